#!/usr/bin/env bash
# Builds the node mode's images with buildah from files prepared on the host: no registry pulls
# and no RUN steps (`buildah run` would set up its own bridge and iptables chains on the host).
#
#   hack/images/build.sh pause|runtime|coredns|probe ...  the stand-ins
#   hack/images/build.sh olm|opm|prom_operator|prometheus ... OLM, opm (+grpc_health_probe),
#                                          prometheus-operator, Prometheus
#   hack/images/build.sh operator [TAG]    ./Dockerfile on the stand-in runtime base, with the
#                                          binary of `$RELEASE_BUILD` from $CARGO_TARGET_DIR
#   hack/images/build.sh bundle [TAG [DIR]] ./bundle.Dockerfile (FROM scratch) on bundle/ or DIR
#   hack/images/build.sh app [BINARY]      the e2e workload (examples/bucket-app.rs) on the
#                                          stand-in runtime base; BINARY defaults to the debug
#                                          build in $CARGO_TARGET_DIR/debug/examples/bucket-app
#
# Prints "REF ARCHIVE" per image: ARCHIVE is a docker-archive that `hack/node.sh load` imports into
# the node's containerd. Images are kept in buildah storage under $S3OP_CACHE/containers (vfs
# driver: nothing is mounted on the host) and archives in $S3OP_CACHE/images, both keyed by a hash
# of their inputs, so a second run reuses them.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
source "$here/../lib.sh"

store="$S3OP_CACHE/containers"
archives="$S3OP_CACHE/images"
mkdir -p "$store" "$archives"
# buildah's own settings keep it off the host: its network config dir (which it creates even with
# --network none) under the store; its blob-info cache, always in /var/lib/containers/cache for
# root, is removed at exit unless that directory was already there.
printf '[network]\nnetwork_config_dir = "%s"\n' "$store/cni" >"$store/containers.conf"
export CONTAINERS_CONF="$store/containers.conf"
if [[ ! -e /var/lib/containers ]]; then trap 'rm -rf /var/lib/containers' EXIT; fi
bah() { buildah --root "$store/storage" --runroot "$store/run" --storage-driver vfs "$@"; }

# The fixed names the node uses; all under localhost/, so even a pull by mistake stays on loopback.
PAUSE_IMAGE="localhost/s3op/pause:1"
RUNTIME_IMAGE="localhost/s3op/runtime-base:1"
COREDNS_IMAGE="localhost/s3op/coredns:$COREDNS_VERSION"
PROBE_IMAGE="localhost/s3op/probe:1"

inputs_hash() {  # inputs_hash CONTAINERFILE DIR: content, modes and owners; not mtimes
  { cat "$1"; tar --sort=name --mtime=@0 --numeric-owner -C "$2" -cf - .; } | sha256sum | cut -c1-16
}

# image REF CONTAINERFILE CONTEXT [BUD ARGS...]: builds REF unless an archive of the same inputs
# exists; prints "REF ARCHIVE".
image() {
  local ref=$1 file=$2 ctx=$3; shift 3
  local name=${ref##*/}; name=${name/:/-}  # per tag: two tags of one image are kept apart
  local hash; hash=$(inputs_hash "$file" "$ctx")
  local archive="$archives/$name-$hash.tar"
  if [[ ! -f $archive ]] || ! bah inspect --type image "$ref" >/dev/null 2>&1; then
    log "building image $ref"
    bah bud --quiet --pull-never --network none --layers=false \
      -f "$file" -t "$ref" "$@" "$ctx" >/dev/null
    rm -f "$archives/$name"-????????????????.tar  # its older builds (a 16-digit hash)
    bah push --quiet "$ref" "docker-archive:$archive.tmp:$ref" && mv "$archive.tmp" "$archive"
  fi
  rm -rf "$ctx"
  echo "$ref $archive"
}

fresh_ctx() { local d="$archives/ctx-$1"; rm -rf "$d"; mkdir -p "$d"; echo "$d"; }

img_pause() {
  local ctx; ctx=$(fresh_ctx pause)
  cc -static -Os -s -o "$ctx/pause" "$here/pause.c"
  image "$PAUSE_IMAGE" "$here/pause.Containerfile" "$ctx"
}

img_probe() {
  local ctx; ctx=$(fresh_ctx probe)
  (cd "$here/probe" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$ctx/probe" main.go)
  image "$PROBE_IMAGE" "$here/probe.Containerfile" "$ctx"
}

img_coredns() {
  "$here/../tools.sh" coredns
  local ctx; ctx=$(fresh_ctx coredns)
  cp "$S3OP_BIN/coredns" "$ctx/coredns"
  image "$COREDNS_IMAGE" "$here/coredns.Containerfile" "$ctx"
}

# A distroless-like rootfs from the host's own Debian packages: the shared objects of libc6 and
# libgcc-s1 (what a Rust binary links against), the CA bundle, passwd/group with nonroot 65532.
img_runtime() {
  local ctx; ctx=$(fresh_ctx runtime)
  local r="$ctx/rootfs" lib=lib/x86_64-linux-gnu f
  mkdir -p "$r/$lib" "$r/lib64" "$r/etc/ssl/certs" "$r/tmp" "$r/root" "$r/home" "$ctx/home/nonroot"
  dpkg -L libc6 libgcc-s1 | grep -E '^(/usr)?/lib/x86_64-linux-gnu/[^/]+\.so[.0-9]*$' | sort -u |
    while read -r f; do cp -L "$f" "$r/$lib/"; done
  ln -s "/$lib/ld-linux-x86-64.so.2" "$r/lib64/ld-linux-x86-64.so.2"
  cp -L /etc/ssl/certs/ca-certificates.crt "$r/etc/ssl/certs/"
  printf '%s\n' 'root:x:0:0:root:/root:/sbin/nologin' 'nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin' \
    'nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin' >"$r/etc/passwd"
  printf '%s\n' 'root:x:0:' 'nobody:x:65534:' 'nonroot:x:65532:' >"$r/etc/group"
  printf '%s\n' 'passwd: files' 'group: files' 'hosts: files dns' >"$r/etc/nsswitch.conf"
  printf '%s\n' 'PRETTY_NAME="s3-operator test stand-in for distroless cc (Debian 12)"' >"$r/etc/os-release"
  chmod 1777 "$r/tmp"; chmod 700 "$r/root" "$ctx/home/nonroot"
  image "$RUNTIME_IMAGE" "$here/runtime.Containerfile" "$ctx"
}

# The e2e workload: the example binary cargo built (debug symbols stripped: the image only runs
# it), on the runtime base, so it runs exactly as the operator does: glibc, non-root, no shell.
img_app() {
  local bin=${1:-${CARGO_TARGET_DIR:-$S3OP_CACHE/target}/debug/examples/bucket-app}
  [[ -x $bin ]] || die "$bin is missing: run \`cargo build --locked --example bucket-app\` first"
  img_runtime >/dev/null
  local ctx; ctx=$(fresh_ctx app)
  strip -o "$ctx/bucket-app" "$bin"
  image "localhost/s3op/bucket-app:1" "$here/app.Containerfile" "$ctx"
}

# OLM's operators (hack/tools.sh olm) with cp (hack/images/cp.c) for the bundle unpack Job.
img_olm() {
  "$here/../tools.sh" olm
  img_runtime >/dev/null
  local ctx b; ctx=$(fresh_ctx olm)
  for b in olm catalog copy-content cpb; do cp "$S3OP_BIN/$b" "$ctx/"; done
  cc -static -Os -s -o "$ctx/cp" "$here/cp.c"
  image "localhost/s3op/olm:$OLM_VERSION" "$here/olm.Containerfile" "$ctx"
}

# opm (hack/tools.sh opm) and grpc_health_probe: OLM's --opmImage and the catalog images' base.
img_opm() {
  "$here/../tools.sh" opm grpc_health_probe
  img_runtime >/dev/null
  local ctx; ctx=$(fresh_ctx opm)
  cp "$S3OP_BIN/opm" "$S3OP_BIN/grpc_health_probe" "$ctx/"
  image "localhost/s3op/opm:$OPM_VERSION" "$here/opm.Containerfile" "$ctx"
}

img_prom_operator() {
  "$here/../tools.sh" prom_operator
  img_runtime >/dev/null
  local ctx; ctx=$(fresh_ctx prom-operator)
  cp "$S3OP_BIN/prometheus-operator" "$S3OP_BIN/prometheus-config-reloader" "$ctx/"
  image "localhost/s3op/prometheus-operator:$PROM_OPERATOR_VERSION" "$here/prom-operator.Containerfile" "$ctx"
}

# Prometheus built from its Go module (hack/tools.sh prometheus_server), the image a Prometheus
# object of prometheus-operator runs (hack/monitoring.sh), tagged $PROMETHEUS_VERSION, which is what
# the object's spec.version must say. Not Debian's /usr/bin/prometheus: Debian removed Kubernetes
# service discovery from it, so it refuses the config prometheus-operator writes for a
# ServiceMonitor ("field kubernetes_sd_configs not found"). Static, like upstream's.
img_prometheus() {
  "$here/../tools.sh" prometheus_server
  img_runtime >/dev/null
  local ctx; ctx=$(fresh_ctx prometheus)
  cp "$S3OP_BIN/prometheus-server" "$ctx/prometheus"
  mkdir -p "$ctx/prometheus-data"
  image "localhost/s3op/prometheus:$PROMETHEUS_VERSION" "$here/prometheus.Containerfile" "$ctx"
}

# img_catalog FBC_DIR [TAG]: a file-based catalog image (catalog.Containerfile) on the opm image.
# The Containerfile names opm's tag: keep it equal to $OPM_VERSION.
img_catalog() {
  local fbc=${1:?usage: hack/images/build.sh catalog FBC_DIR [TAG]} tag=${2:-1}
  grep -q "opm:$OPM_VERSION\$" "$here/catalog.Containerfile" || die "catalog.Containerfile's base is not opm:$OPM_VERSION"
  img_opm >/dev/null
  local ctx; ctx=$(fresh_ctx catalog)
  cp -r "$fbc" "$ctx/configs"
  # What `opm generate dockerfile`'s RUN step does, here on the host (no RUN steps): the serve
  # cache, which `opm serve --cache-dir` checks at start (--cache-enforce-integrity).
  "$S3OP_BIN/opm" serve "$ctx/configs" --cache-dir "$ctx/cache" --cache-only 2>/dev/null
  image "localhost/s3op/s3-operator-catalog:$tag" "$here/catalog.Containerfile" "$ctx"
}


# The project's Dockerfile as it is, with its base images passed as build arguments. Its build
# stage (`$RELEASE_BUILD` on the Rust image) is replaced through BINARY_FROM by an image holding
# the binary the same command built on the host, so no Rust image is needed and buildah skips that
# stage.
img_operator() {
  local tag=${1:-$(crate_version)}
  local bin="${CARGO_TARGET_DIR:-$S3OP_CACHE/target}/release/s3-operator"
  [[ -x $bin ]] || die "$bin is missing: run \`$RELEASE_BUILD\` first"
  img_runtime >/dev/null
  local sum; sum=$(sha256sum "$bin" | cut -c1-16)
  local binref="localhost/s3op/s3-operator-binary:$sum"
  if ! bah inspect --type image "$binref" >/dev/null 2>&1; then
    local c; c=$(bah from --pull-never scratch)
    bah copy --quiet "$c" "$bin" /src/target/release/s3-operator >/dev/null
    bah commit --quiet "$c" "$binref" >/dev/null
    bah rm "$c" >/dev/null
  fi
  # The inputs: the Dockerfile and the binary (the rest of the context is the skipped stage's).
  local ctx; ctx=$(fresh_ctx operator-inputs)
  cp "$bin" "$ctx/"; cp "$root/Dockerfile" "$ctx/"; echo "$tag" >"$ctx/tag"
  local hash; hash=$(inputs_hash "$root/Dockerfile" "$ctx")
  local ref="localhost/s3op/s3-operator:$tag" archive="$archives/s3-operator-$tag-$hash.tar"
  if [[ ! -f $archive ]] || ! bah inspect --type image "$ref" >/dev/null 2>&1; then
    log "building image $ref from ./Dockerfile (binary $bin)"
    bah bud --quiet --pull-never --network none --layers=false \
      --build-arg "BINARY_FROM=$binref" --build-arg "RUNTIME_IMAGE=$RUNTIME_IMAGE" \
      --build-arg "VERSION=$(crate_version)" -f "$root/Dockerfile" -t "$ref" "$root" >/dev/null
    rm -f "$archives/s3-operator-$tag"-*.tar
    bah push --quiet "$ref" "docker-archive:$archive.tmp:$ref" && mv "$archive.tmp" "$archive"
  fi
  rm -rf "$ctx"
  echo "$ref $archive"
}

# img_bundle [TAG [DIR]]: bundle.Dockerfile with bundle/ (or the bundle directory DIR, e.g. a copy
# naming another operator image) as its bundle/. The context holds only that directory, and
# bundle.Dockerfile's own ignore file is passed as Docker would read it.
img_bundle() {
  local tag=${1:-v$(crate_version)} dir=${2:-$root/bundle}
  [[ -f $dir/metadata/annotations.yaml ]] || die "$dir is not a bundle directory (no metadata/annotations.yaml)"
  local ctx; ctx=$(fresh_ctx "bundle-$tag")
  cp -r "$dir" "$ctx/bundle"
  image "localhost/s3op/s3-operator-bundle:$tag" "$root/bundle.Dockerfile" "$ctx" \
    --ignorefile "$root/bundle.Dockerfile.dockerignore"
}

[[ $# -gt 0 ]] || die "usage: hack/images/build.sh pause|runtime|coredns|probe|olm|opm|prom_operator|prometheus ... | operator [TAG] | bundle [TAG [DIR]] | app [BINARY]"
case $1 in
  operator|bundle|app|catalog) "img_$1" "${@:2}" ;;
  *) for i in "$@"; do declare -F "img_$i" >/dev/null || die "unknown image $i"; "img_$i"; done ;;
esac
