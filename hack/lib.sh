# Shared settings for the hack/ scripts: pinned versions and the cache layout.
# Sourced, never run.

# Everything heavy lives outside the clone so a second run (or a fresh clone) reuses it.
S3OP_CACHE="${S3OP_CACHE:-$HOME/.cache/s3-operator}"
S3OP_BIN="$S3OP_CACHE/bin"

KUBE_VERSION="v1.34.4"          # kube-apiserver + kubectl, from k8s.io/kubernetes
ETCD_VERSION="v3.5.35"          # go.etcd.io/etcd/server/v3
HELM_VERSION="v3.22.0"          # helm.sh/helm/v3
KUSTOMIZE_VERSION="v5.7.1"      # sigs.k8s.io/kustomize/kustomize/v5
JAEGER_VERSION="v1.76.0"        # github.com/jaegertracing/jaeger (module tag of the Jaeger v2 binary)
MOTO_VERSION="5.2.5"            # moto[server] from PyPI

export GOFLAGS="${GOFLAGS:--mod=mod}"
export GOTOOLCHAIN="${GOTOOLCHAIN:-auto}"

log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "error: $*"; exit 1; }
