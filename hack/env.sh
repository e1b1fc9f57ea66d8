#!/usr/bin/env bash
# Starts and stops the local test environment: etcd, kube-apiserver (TLS, RBAC, ServiceAccount
# tokens), kube-controller-manager (garbage collection, namespaces, ServiceAccounts) and moto
# (S3, IAM, STS with IAM enforcement), all on loopback with free ports.
#
#   hack/env.sh up   [--state DIR] [--owner-pid PID]   start; prints the env file to source
#   hack/env.sh down [--state DIR]                     stop and delete the state
#   hack/env.sh apiserver PORT [--state DIR]           run one more kube-apiserver (foreground)
#
# With --owner-pid the environment tears itself down when that process exits, even if it is
# killed, so a failing or interrupted test run never leaves servers behind.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$here/lib.sh"

cmd=${1:-}; shift || true
port=""
if [[ $cmd == apiserver ]]; then port=${1:?usage: hack/env.sh apiserver PORT}; shift; fi
state="${S3OP_STATE:-$here/../.local/env}"
owner=""
while [[ $# -gt 0 ]]; do
  case $1 in
    --state) state=$2; shift 2 ;;
    --owner-pid) owner=$2; shift 2 ;;
    *) die "unknown argument $1" ;;
  esac
done
if [[ $cmd == down && ! -d $state ]]; then exit 0; fi  # already gone (the watchdog may come late)
mkdir -p "$state"
state="$(cd "$state" && pwd)"

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# start NAME CMD...: runs CMD in the background, logging to $state/NAME.log, pid in $state/pids.
start() {
  local name=$1; shift
  "$@" >"$state/$name.log" 2>&1 &
  echo "$name $!" >>"$state/pids"
}

wait_for() {  # wait_for WHAT SECONDS CMD...
  local what=$1 secs=$2; shift 2
  for ((i = 0; i < secs * 5; i++)); do
    if "$@" >/dev/null 2>&1; then return 0; fi
    sleep 0.2
  done
  log "$what did not come up in ${secs}s; last log lines:"
  tail -n 20 "$state/$what.log" >&2 || true
  return 1
}

certs() {
  local d="$state/pki"; mkdir -p "$d"
  [[ -f $d/admin.crt ]] && return 0
  local o="openssl"
  $o req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=s3op-test-ca" \
    -keyout "$d/ca.key" -out "$d/ca.crt" 2>/dev/null
  sign() {  # sign NAME SUBJECT [SAN]
    $o req -newkey rsa:2048 -nodes -subj "$2" -keyout "$d/$1.key" -out "$d/$1.csr" 2>/dev/null
    local ext="$d/$1.ext"
    echo "basicConstraints=CA:FALSE" >"$ext"
    [[ -n ${3:-} ]] && echo "subjectAltName=$3" >>"$ext"
    $o x509 -req -in "$d/$1.csr" -CA "$d/ca.crt" -CAkey "$d/ca.key" -CAcreateserial -days 3650 \
      -extfile "$ext" -out "$d/$1.crt" 2>/dev/null
  }
  sign apiserver "/CN=kube-apiserver" \
    "IP:127.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc"
  sign admin "/O=system:masters/CN=s3op-admin"
  $o genrsa -out "$d/sa.key" 2048 2>/dev/null
  $o rsa -in "$d/sa.key" -pubout -out "$d/sa.pub" 2>/dev/null
}

# apiserver PORT CERT_DIR AUDIT_LOG: runs a kube-apiserver on the environment's etcd. `up` starts
# the main one; `hack/env.sh apiserver` starts another (an HA peer the fault tests stop and
# restart). Every write is audited (hack/audit-policy.yaml) as one JSON line in AUDIT_LOG.
apiserver() {
  local pki="$state/pki"
  exec "$S3OP_BIN/kube-apiserver" \
    --etcd-servers "$(cat "$state/etcd.url")" \
    --bind-address 127.0.0.1 --advertise-address 127.0.0.1 --secure-port "$1" \
    --cert-dir "$2" \
    --tls-cert-file "$pki/apiserver.crt" --tls-private-key-file "$pki/apiserver.key" \
    --client-ca-file "$pki/ca.crt" \
    --authorization-mode RBAC \
    --service-account-issuer "https://kubernetes.default.svc.cluster.local" \
    --service-account-key-file "$pki/sa.pub" --service-account-signing-key-file "$pki/sa.key" \
    --service-cluster-ip-range 10.96.0.0/16 \
    --disable-admission-plugins ServiceAccount \
    --audit-policy-file "$here/audit-policy.yaml" --audit-log-path "$3" \
    --profiling=false --v 1
}

up() {
  if [[ -f $state/env ]] && source "$state/env" && kubectl_ok && moto_ok; then
    log "environment already up: source $state/env"
    echo "$state/env"; return 0
  fi
  down_quiet
  mkdir -p "$state"
  "$here/tools.sh" etcd kube moto
  certs
  local etcd_port peer_port api_port moto_port
  etcd_port=$(free_port); peer_port=$(free_port); api_port=$(free_port); moto_port=$(free_port)
  local pki="$state/pki" bin="$S3OP_BIN"

  log "starting etcd on 127.0.0.1:$etcd_port"
  start etcd "$bin/etcd" --data-dir "$state/etcd" --name s3op \
    --listen-client-urls "http://127.0.0.1:$etcd_port" --advertise-client-urls "http://127.0.0.1:$etcd_port" \
    --listen-peer-urls "http://127.0.0.1:$peer_port" --initial-advertise-peer-urls "http://127.0.0.1:$peer_port" \
    --initial-cluster "s3op=http://127.0.0.1:$peer_port" --unsafe-no-fsync --log-level warn

  echo "http://127.0.0.1:$etcd_port" >"$state/etcd.url"
  log "starting kube-apiserver $KUBE_VERSION on https://127.0.0.1:$api_port"
  start kube-apiserver apiserver "$api_port" "$state/apiserver-certs" "$state/audit.jsonl"

  local kc="$state/admin.kubeconfig"
  KUBECONFIG="$kc" "$bin/kubectl" config set-cluster local --server "https://127.0.0.1:$api_port" \
    --certificate-authority "$pki/ca.crt" --embed-certs >/dev/null
  KUBECONFIG="$kc" "$bin/kubectl" config set-credentials admin --client-certificate "$pki/admin.crt" \
    --client-key "$pki/admin.key" --embed-certs >/dev/null
  KUBECONFIG="$kc" "$bin/kubectl" config set-context local --cluster local --user admin >/dev/null
  KUBECONFIG="$kc" "$bin/kubectl" config use-context local >/dev/null
  export KUBECONFIG="$kc"
  wait_for kube-apiserver 90 "$bin/kubectl" get --raw /readyz

  log "starting kube-controller-manager (garbage collector, namespaces, ServiceAccounts)"
  start kube-controller-manager "$bin/kube-controller-manager" --kubeconfig "$kc" \
    --controllers garbagecollector,namespace,serviceaccount \
    --leader-elect=false --secure-port 0 --root-ca-file "$pki/ca.crt" --v 1

  log "starting moto $MOTO_VERSION (S3, IAM, STS; IAM enforced) on http://127.0.0.1:$moto_port"
  local venv="$S3OP_CACHE/venv-moto-$MOTO_VERSION"
  start moto env INITIAL_NO_AUTH_ACTION_COUNT=3 MOTO_PORT="$moto_port" \
    "$venv/bin/python" "$here/moto_server.py" 127.0.0.1 "$moto_port"
  local endpoint="http://127.0.0.1:$moto_port"
  wait_for moto 60 python3 -c "import socket; socket.create_connection(('127.0.0.1', $moto_port), 1)"

  {
    echo "# Source this file to use the local environment (written by hack/env.sh)."
    echo "export S3OP_ENV_DIR=$state"
    echo "export KUBECONFIG=$kc"
    echo "export S3OP_KUBE_SERVER=https://127.0.0.1:$api_port"
    echo "export S3OP_KUBE_CA=$pki/ca.crt"
    echo "export S3OP_KUBE_AUDIT_LOG=$state/audit.jsonl"
    echo "export S3OP_AWS_ENDPOINT=$endpoint"
    echo "export S3OP_AWS_REGION=us-east-1"
    echo "export PATH=$bin:\$PATH"
    "$venv/bin/python" "$here/aws_bootstrap.py" "$endpoint"
  } >"$state/env.tmp"
  mv "$state/env.tmp" "$state/env"

  if [[ -n $owner ]]; then
    # A detached watchdog: tears the environment down once the owner process is gone.
    setsid bash -c "while kill -0 $owner 2>/dev/null; do sleep 1; done; exec '$here/env.sh' down --state '$state'" \
      >/dev/null 2>&1 </dev/null &
  fi
  log "environment up: source $state/env"
  echo "$state/env"
}

kubectl_ok() { "$S3OP_BIN/kubectl" get --raw /readyz >/dev/null 2>&1; }
moto_ok() { curl -sf -o /dev/null "$S3OP_AWS_ENDPOINT/moto-api/" ; }

down_quiet() {
  if [[ -f $state/pids ]]; then
    # Reverse start order: moto, controller-manager, apiserver, then etcd.
    tac "$state/pids" | while read -r _ pid; do kill "$pid" 2>/dev/null || true; done
    for _ in $(seq 50); do
      local alive=0
      while read -r _ pid; do kill -0 "$pid" 2>/dev/null && alive=1; done <"$state/pids"
      [[ $alive == 0 ]] && break
      sleep 0.1
    done
    while read -r _ pid; do kill -9 "$pid" 2>/dev/null || true; done <"$state/pids"
  fi
  rm -rf "$state/etcd" "$state/pids" "$state/env" "$state/apiserver-certs"* "$state/audit"*.jsonl
}

case $cmd in
  up) up ;;
  down) down_quiet; log "environment down ($state)" ;;
  apiserver) apiserver "$port" "$state/apiserver-certs-$port" "$state/audit-$port.jsonl" ;;
  *) die "usage: hack/env.sh up|down|apiserver [--state DIR] [--owner-pid PID]" ;;
esac
