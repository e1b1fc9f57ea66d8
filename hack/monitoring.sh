#!/usr/bin/env bash
# prometheus-operator on the node environment (hack/env.sh up --node), from its own bundle.yaml in
# its Go module zip and images built here (hack/images/build.sh prom_operator prometheus): no
# registry pulls.
#
#   hack/monitoring.sh manifests DIR   renders bundle.yaml into DIR with the local image:
#                                      crds.yaml (every monitoring.coreos.com CRD) and
#                                      operator.yaml (its Namespace, RBAC, Deployment and Service
#                                      in the namespace `monitoring` instead of `default`, the
#                                      config reloader image the local one too)
#   hack/monitoring.sh install         builds and loads the images (prometheus-operator with its
#                                      config reloader, and Prometheus from Debian's package for
#                                      Prometheus objects' spec.image), applies the manifests,
#                                      waits until the operator is rolled out; prints the
#                                      Prometheus image's REF
#   hack/monitoring.sh status          the operator's Pods, every Prometheus object, their
#                                      StatefulSets and Pods, recent events and the operator's
#                                      logs (what a failure should print)
#   hack/monitoring.sh uninstall       deletes every Prometheus object, then what install applied,
#                                      except the ServiceMonitor and PrometheusRule CRDs, which
#                                      the tests share (hack/tools.sh crds applies the same ones)
#
# install, status and uninstall act on $KUBECONFIG: source the environment's env file first
# (S3OP_ENV_DIR names it; hack/node.sh load needs it).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$here/lib.sh"

OPERATOR_IMAGE="localhost/s3op/prometheus-operator:$PROM_OPERATOR_VERSION"
NAMESPACE=monitoring
# The CRDs the e2e tests apply on their own (tests/e2e, hack/tools.sh crds): never deleted here.
SHARED_CRDS="servicemonitors.monitoring.coreos.com prometheusrules.monitoring.coreos.com"

kubectl() { "$S3OP_BIN/kubectl" "$@"; }

module_dir() {  # the unpacked module zip of prometheus-operator
  go mod download -json "github.com/prometheus-operator/prometheus-operator@$PROM_OPERATOR_VERSION" |
    python3 -c 'import json,sys; d=json.load(sys.stdin); print(d.get("Dir") or sys.exit(d.get("Error")))'
}

manifests() {
  local out=$1 src; src="$(module_dir)/bundle.yaml"
  mkdir -p "$out"
  # Documents are split on `---`: CRDs to crds.yaml, the rest to operator.yaml. There the quay.io
  # images (operator, and config reloader it puts into every Prometheus Pod) become the local
  # image, which holds both binaries in /bin as upstream's do; `default` becomes $NAMESPACE.
  # --kubelet-service is dropped: it would make the operator keep a Service of the kubelets in
  # kube-system, outside what this install owns and uninstall removes.
  awk -v img="$OPERATOR_IMAGE" -v ns="$NAMESPACE" -v crds="$out/crds.yaml" -v rest="$out/operator.yaml.tmp" '
    function flush() {
      if (doc ~ /\nkind: CustomResourceDefinition\n/) printf "---%s\n", doc >crds
      else if (doc !~ /^\n*$/) printf "---%s\n", doc >rest
      doc = ""
    }
    /^---/ { flush(); next }
    { line = $0 }
    doc !~ /\nkind: CustomResourceDefinition/ {
      gsub(/quay\.io\/prometheus-operator\/prometheus-operator:v[0-9.]+/, img, line)
      gsub(/quay\.io\/prometheus-operator\/prometheus-config-reloader:v[0-9.]+/, img, line)
      sub(/^  namespace: default$/, "  namespace: " ns, line)
      if (line ~ /^        - --kubelet-service=/) next
    }
    { doc = doc "\n" line }
    END { flush() }
  ' "$src"
  { printf -- '---\napiVersion: v1\nkind: Namespace\nmetadata:\n  name: %s\n' "$NAMESPACE"; cat "$out/operator.yaml.tmp"; } >"$out/operator.yaml"
  rm -f "$out/operator.yaml.tmp"
  local f=$out/operator.yaml
  grep -q "image: $OPERATOR_IMAGE\$" "$f" || die "no operator image replaced in $src"
  grep -q -- "--prometheus-config-reloader=$OPERATOR_IMAGE\$" "$f" || die "no config reloader image replaced in $src"
  ! grep -q 'quay\.io\|namespace: default$\|--kubelet-service' "$f" || die "$f still names quay.io, default or the kubelet Service"
  [[ $(grep -c "^  namespace: $NAMESPACE\$" "$f") -ge 4 ]] || die "not every namespaced object of $src moved to $NAMESPACE"
  [[ $(grep -c '^kind: CustomResourceDefinition$' "$out/crds.yaml") -ge 10 ]] || die "$src has fewer CRDs than expected"
  echo "$out"
}

need_env() { [[ -n ${KUBECONFIG:-} && -n ${S3OP_ENV_DIR:-} ]] || die "source the environment's env file first (hack/env.sh up --node)"; }

install() {
  need_env
  local archives=() refs=() ref archive
  while read -r ref archive; do refs+=("$ref"); archives+=("$archive"); done < <("$here/images/build.sh" prom_operator prometheus)
  "$here/node.sh" load "${archives[@]}" --state "$S3OP_ENV_DIR" >/dev/null
  local dir; dir=$(manifests "$S3OP_ENV_DIR/monitoring")
  log "applying prometheus-operator $PROM_OPERATOR_VERSION's CRDs"
  # Server-side (the CRDs are too large for a client-side apply's annotation), taking over the
  # fields of the ServiceMonitor and PrometheusRule CRDs the tests may have applied already.
  kubectl apply --server-side --force-conflicts --field-manager s3op-monitoring -f "$dir/crds.yaml" >/dev/null
  kubectl wait --for condition=Established --timeout 60s -f "$dir/crds.yaml" >/dev/null
  log "applying prometheus-operator $PROM_OPERATOR_VERSION in namespace $NAMESPACE"
  kubectl apply --server-side --force-conflicts --field-manager s3op-monitoring -f "$dir/operator.yaml" >/dev/null
  if ! kubectl -n "$NAMESPACE" rollout status deployment/prometheus-operator --timeout 180s >&2; then
    status >&2; die "prometheus-operator did not become Available"
  fi
  log "prometheus-operator is up"
  echo "${refs[1]}"  # the Prometheus image, for Prometheus objects' spec.image
}

status() {
  need_env
  kubectl -n "$NAMESPACE" get deployments,pods -o wide || true
  kubectl get prometheuses,servicemonitors,prometheusrules -A -o wide || true
  echo "--- conditions of the Prometheus objects"
  kubectl get prometheuses -A -o jsonpath='{range .items[*]}{.metadata.namespace}/{.metadata.name}:{range .status.conditions[*]} {.type}={.status} ({.reason}: {.message}){end}{"\n"}{end}' || true
  kubectl get statefulsets,pods -A -l app.kubernetes.io/managed-by=prometheus-operator -o wide || true
  kubectl -n "$NAMESPACE" describe pods || true
  kubectl get events -A --sort-by .lastTimestamp | tail -n 40 || true
  echo "--- logs of prometheus-operator"
  kubectl -n "$NAMESPACE" logs deployment/prometheus-operator --tail 60 || true
}

uninstall() {
  need_env
  local dir; dir=$(manifests "$S3OP_ENV_DIR/monitoring")
  # The Prometheus objects first, while the operator still runs, so their StatefulSets go too.
  kubectl delete prometheuses,prometheusagents,alertmanagers,thanosrulers -A --all --ignore-not-found --timeout 60s >/dev/null 2>&1 || true
  kubectl delete --ignore-not-found --timeout 90s -f "$dir/operator.yaml" >/dev/null || true
  local crds=() c
  for c in $(kubectl get -f "$dir/crds.yaml" -o name --ignore-not-found 2>/dev/null); do
    [[ " $SHARED_CRDS " == *" ${c#*/} "* ]] || crds+=("$c")
  done
  if [[ ${#crds[@]} -gt 0 ]]; then kubectl delete --ignore-not-found "${crds[@]}" >/dev/null || true; fi
}

case ${1:-} in
  manifests) manifests "${2:?usage: hack/monitoring.sh manifests DIR}" ;;
  install) install ;;
  status) status ;;
  uninstall) uninstall ;;
  *) die "usage: hack/monitoring.sh manifests DIR | install | status | uninstall" ;;
esac
