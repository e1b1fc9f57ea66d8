#!/usr/bin/env bash
# OLM on the node environment (hack/env.sh up --node), from OLM's own manifests in its Go module
# zip and images built here (hack/images/build.sh olm opm): no registry pulls.
#
#   hack/olm.sh manifests DIR   renders OLM's manifests into DIR with the local images: crds.yaml
#                               (deploy/chart/crds) and olm.yaml (deploy/upstream/quickstart) without the packageserver
#                               CSV (its APIService only serves `kubectl get packagemanifests`) and
#                               without the operatorhub.io CatalogSource
#   hack/olm.sh install         builds and loads the images, applies the manifests, waits until the
#                               olm and catalog operators are Available
#   hack/olm.sh status          OLM's Pods, Deployments, CatalogSources, Subscriptions, InstallPlans,
#                               CSVs and recent events (what a failure should print)
#   hack/olm.sh uninstall       deletes what install applied
#   hack/olm.sh catalog DIR IMAGE [PREV_VERSION PREV_IMAGE]
#                               what a release publishes, for the node: the bundle with its
#                               operator image set to IMAGE, and with PREV_VERSION a previous
#                               version running PREV_IMAGE that the current one replaces in the
#                               channel; each built as a bundle image, loaded and pinned; a
#                               file-based catalog of them (opm render) in DIR/catalog, built as
#                               the catalog image, loaded and pinned. Prints the catalog's REF.
#   hack/olm.sh pin REF         for an image already loaded into the node (hack/node.sh load), adds
#                               the name REPO@DIGEST and prints it. OLM runs catalog images and
#                               bundle images (the unpack Job) with imagePullPolicy Always unless
#                               they are named by digest; by digest it is IfNotPresent, and the
#                               node's containerd finds the image under that name.
#
# install, status and uninstall act on $KUBECONFIG: source the environment's env file first
# (S3OP_ENV_DIR names it; hack/node.sh load needs it).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$here/lib.sh"

OLM_IMAGE="localhost/s3op/olm:$OLM_VERSION"
OPM_IMAGE="localhost/s3op/opm:$OPM_VERSION"
OLM_NAMESPACE=olm

kubectl() { "$S3OP_BIN/kubectl" "$@"; }

olm_dir() {  # the unpacked module zip of OLM
  go mod download -json "github.com/operator-framework/operator-lifecycle-manager@$OLM_VERSION" |
    python3 -c 'import json,sys; d=json.load(sys.stdin); print(d.get("Dir") or sys.exit(d.get("Error")))'
}

manifests() {
  local out=$1 olm f; olm=$(olm_dir)
  local src="$olm/deploy/upstream/quickstart"
  mkdir -p "$out"
  # The chart's CRDs: the quickstart's crds.yaml lacks OLMConfig, which the olm operator watches.
  for f in "$olm"/deploy/chart/crds/*.yaml; do echo "---"; cat "$f"; done >"$out/crds.yaml"
  # Documents are split on `---`; the packageserver CSV and the CatalogSource are left out. The
  # upstream image (by digest) becomes the local one, and the catalog operator gets the local opm
  # image for its bundle unpack Jobs (its default is quay.io's).
  awk -v olm="$OLM_IMAGE" -v opm="$OPM_IMAGE" '
    function flush() { doc = doc "\n"; if (doc !~ /^\n*$/ && doc !~ /\nkind: (ClusterServiceVersion|CatalogSource)\n/) printf "---%s", doc; doc = "" }
    /^---/ { flush(); next }
    {
      gsub(/quay\.io\/operator-framework\/olm@sha256:[0-9a-f]+/, olm)
      # The quickstart still passes the catalog operator single-dash flags, which its cobra
      # command line (v0.38.0) refuses ("unknown shorthand flag"): make them long flags.
      sub(/^          - .-namespace.$/, "          - --namespace")
      sub(/^          - -configmapServerImage=/, "          - --configmapServerImage=")
      sub(/^          - -util-image$/, "          - --util-image")
      if ($0 ~ /--configmapServerImage=/) { doc = doc "\n" $0 "\n          - --opmImage=" opm; next }
      doc = doc "\n" $0
    }
    END { flush() }
  ' "$src/olm.yaml" >"$out/olm.yaml"
  grep -q "image: $OLM_IMAGE" "$out/olm.yaml" || die "no OLM image reference replaced in $src/olm.yaml"
  grep -q -- "--opmImage=$OPM_IMAGE" "$out/olm.yaml" || die "no -opmImage added to the catalog operator"
  echo "$out"
}

need_env() { [[ -n ${KUBECONFIG:-} && -n ${S3OP_ENV_DIR:-} ]] || die "source the environment's env file first (hack/env.sh up --node)"; }

install_olm() {
  need_env
  local archives=() ref archive
  while read -r ref archive; do archives+=("$archive"); done < <("$here/images/build.sh" olm opm)
  "$here/node.sh" load "${archives[@]}" --state "$S3OP_ENV_DIR" >/dev/null
  local dir; dir=$(manifests "$S3OP_ENV_DIR/olm")
  log "applying OLM $OLM_VERSION's CRDs"
  # Server-side: the CSV CRD is too large for the last-applied annotation of a client-side apply.
  kubectl apply --server-side -f "$dir/crds.yaml" >/dev/null
  kubectl wait --for condition=Established --timeout 60s -f "$dir/crds.yaml" >/dev/null
  log "applying OLM $OLM_VERSION (olm and catalog operators)"
  kubectl apply --server-side -f "$dir/olm.yaml" >/dev/null
  if ! kubectl -n "$OLM_NAMESPACE" rollout status deployment/olm-operator --timeout 180s ||
     ! kubectl -n "$OLM_NAMESPACE" rollout status deployment/catalog-operator --timeout 120s; then
    status; die "OLM did not become Available"
  fi
  log "OLM is up"
}

status() {
  need_env
  local k
  kubectl -n "$OLM_NAMESPACE" get deployments,pods -o wide || true
  for k in catalogsources subscriptions installplans clusterserviceversions operatorgroups; do
    kubectl get "$k" -A || true
  done
  kubectl -n "$OLM_NAMESPACE" describe pods || true
  kubectl get events -A --sort-by .lastTimestamp | tail -n 40 || true
  for k in olm-operator catalog-operator; do
    echo "--- logs of $k"; kubectl -n "$OLM_NAMESPACE" logs "deployment/$k" --tail 40 || true
  done
}

uninstall() {
  need_env
  local dir; dir=$(manifests "$S3OP_ENV_DIR/olm")
  kubectl delete --ignore-not-found --wait=false -f "$dir/olm.yaml" >/dev/null || true
  kubectl delete --ignore-not-found -f "$dir/crds.yaml" >/dev/null || true
}

pin() {
  need_env
  local ref=$1 sock="$S3OP_ENV_DIR/node/containerd/containerd.sock" digest
  local c=(ctr --address "$sock" --namespace k8s.io)
  digest=$("${c[@]}" images ls | awk -v r="$ref" '$1 == r {print $3}')
  [[ -n $digest ]] || die "$ref is not in the node's containerd (hack/node.sh load it first)"
  local pinned="${ref%:*}@$digest"
  "${c[@]}" images tag --force "$ref" "$pinned" >/dev/null
  echo "$pinned"
}

PACKAGE=s3-operator
CHANNEL=candidate

# bundle_of OUT VERSION IMAGE: a copy of bundle/ as version VERSION running IMAGE.
bundle_of() {
  local out=$1 version=$2 image=$3 current csv
  current=$(crate_version)
  rm -rf "$out"; cp -r "$here/../bundle" "$out"
  csv="$out/manifests/$PACKAGE.clusterserviceversion.yaml"
  sed -i -e "s|ghcr.io/s3-operator/s3-operator:$current|$image|" \
    -e "s|^  name: $PACKAGE.v$current\$|  name: $PACKAGE.v$version|" \
    -e "s|^  version: $current\$|  version: $version|" "$csv"
  grep -q "image: $image\$" "$csv" && grep -q "^  name: $PACKAGE.v$version\$" "$csv" ||
    die "could not set the image and version of $csv"
}

# pinned_bundle DIR VERSION: builds, loads and pins the bundle image of DIR; prints its ref.
pinned_bundle() {
  local ref archive
  read -r ref archive < <("$here/images/build.sh" bundle "v$2" "$1" | tail -n 1)
  "$here/node.sh" load "$archive" --state "$S3OP_ENV_DIR" >/dev/null
  pin "$ref"
}

catalog() {
  need_env
  local dir=$1 image=$2 prev_version=${3:-} prev_image=${4:-}
  local version; version=$(crate_version)
  local fbc="$dir/catalog/$PACKAGE" v img entries="" prev=""
  rm -rf "$dir/catalog"; mkdir -p "$fbc"
  printf 'schema: olm.package\nname: %s\ndefaultChannel: %s\n' "$PACKAGE" "$CHANNEL" >"$fbc/package.yaml"
  for v in ${prev_version:+"$prev_version"} "$version"; do
    img=$image; [[ $v == "$version" ]] || img=$prev_image
    bundle_of "$dir/bundle-v$v" "$v" "$img"
    local ref; ref=$(pinned_bundle "$dir/bundle-v$v" "$v")
    # opm renders a bundle directory with no image: the catalog names the pinned bundle image.
    "$S3OP_BIN/opm" render "$dir/bundle-v$v" -o yaml | sed "s|^image: \"\"\$|image: $ref|" >"$fbc/bundle-v$v.yaml"
    grep -q "^image: $ref\$" "$fbc/bundle-v$v.yaml" || die "opm render of $dir/bundle-v$v has no image to set"
    entries+="- name: $PACKAGE.v$v"$'\n'
    [[ -z $prev ]] || entries+="  replaces: $PACKAGE.v$prev"$'\n'
    prev=$v
  done
  printf 'schema: olm.channel\npackage: %s\nname: %s\nentries:\n%s' "$PACKAGE" "$CHANNEL" "$entries" >"$fbc/channel.yaml"
  "$S3OP_BIN/opm" validate "$dir/catalog" || die "opm validate refused the catalog in $dir/catalog"
  local ref archive
  read -r ref archive < <("$here/images/build.sh" catalog "$dir/catalog" "$version" | tail -n 1)
  "$here/node.sh" load "$archive" --state "$S3OP_ENV_DIR" >/dev/null
  pin "$ref"
}

case ${1:-} in
  manifests) manifests "${2:?usage: hack/olm.sh manifests DIR}" ;;
  install) install_olm ;;
  status) status ;;
  uninstall) uninstall ;;
  catalog) catalog "${2:?usage: hack/olm.sh catalog DIR IMAGE [PREV_VERSION PREV_IMAGE]}" "${3:?IMAGE}" "${@:4}" ;;
  pin) pin "${2:?usage: hack/olm.sh pin REF}" ;;
  *) die "usage: hack/olm.sh manifests DIR | install | status | uninstall | catalog DIR IMAGE [PREV_VERSION PREV_IMAGE] | pin REF" ;;
esac
