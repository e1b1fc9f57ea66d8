#!/usr/bin/env bash
# Starts and stops the local test environment: etcd, kube-apiserver (TLS, RBAC, ServiceAccount
# tokens), kube-controller-manager (garbage collection, namespaces, ServiceAccounts, quotas) and moto
# (S3, IAM, STS with IAM enforcement; EKS Pod Identity associations and EKS Auth) with a stand-in
# for the EKS Pod Identity agent (hack/pod_identity_agent.py), all on loopback with free ports.
#
#   hack/env.sh up   [--state DIR] [--owner-pid PID]   start; prints the env file to source
#   hack/env.sh up --node [--state DIR] [--owner-pid PID]  the same plus a real node (root only)
#   hack/env.sh down [--state DIR]                     stop and delete the state
#   hack/env.sh apiserver PORT [--state DIR]           run one more kube-apiserver (foreground)
#
# With --owner-pid the environment tears itself down when that process exits, even if it is
# killed, so a failing or interrupted test run never leaves servers behind.
#
# --node (hack/node.sh says more): the API server and moto are also reached at the node's own
# bridge address (a relay to loopback), with ServiceAccount admission, the Node authorizer and
# every default controller; kube-scheduler, kubelet, kube-proxy, containerd and CoreDNS join them. `down` also
# stops the node and restores the host. Pods reach the Pod Identity agent stand-in where EKS's agent
# listens, http://169.254.170.23/v1/credentials (node.sh puts that address on the node's bridge).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$here/lib.sh"

cmd=${1:-}; shift || true
port=""
if [[ $cmd == apiserver ]]; then port=${1:?usage: hack/env.sh apiserver PORT}; shift; fi
state="${S3OP_STATE:-$here/../.local/env}"
owner=""
node=""
while [[ $# -gt 0 ]]; do
  case $1 in
    --state) state=$2; shift 2 ;;
    --owner-pid) owner=$2; shift 2 ;;
    --node) node=1; shift ;;
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
  local san="IP:127.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc"
  if [[ -f $state/node/bridge-ip ]]; then
    # Pods reach the API server at the bridge address and at the `kubernetes` Service's IP.
    local ip; ip=$(cat "$state/node/bridge-ip")
    san+=",IP:$ip,IP:10.96.0.1,DNS:kubernetes.default.svc.cluster.local"
    grep -qF "IP:$ip," "$d/apiserver.ext" 2>/dev/null || rm -f "$d/admin.crt"  # made without the node
  fi
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
  sign apiserver "/CN=kube-apiserver" "$san"
  sign admin "/O=system:masters/CN=s3op-admin"
  $o genrsa -out "$d/sa.key" 2048 2>/dev/null
  $o rsa -in "$d/sa.key" -pubout -out "$d/sa.pub" 2>/dev/null
}

# apiserver PORT CERT_DIR AUDIT_LOG: runs a kube-apiserver on the environment's etcd. `up` starts
# the main one; `hack/env.sh apiserver` starts another (an HA peer the fault tests stop and
# restart). Every write, and every read of a ServiceAccount, is audited (hack/audit-policy.yaml)
# as one JSON line in AUDIT_LOG.
# ADVERTISE (the node mode's main one): the address the `kubernetes` Service sends Pods to, where
# a relay forwards to the loopback address every API server listens on.
apiserver() {  # apiserver PORT CERT_DIR AUDIT_LOG [ADVERTISE]
  local pki="$state/pki" advertise=${4:-127.0.0.1} authz=RBAC admission=(--disable-admission-plugins ServiceAccount) node_flags=()
  if [[ -f $state/node/bridge-ip ]]; then
    # Pods get their ServiceAccount tokens mounted; kubelet acts as a node (Node authorizer,
    # NodeRestriction); logs and exec reach kubelet at its InternalIP, checked against the CA.
    authz=Node,RBAC admission=(--enable-admission-plugins NodeRestriction)
    node_flags=(--kubelet-preferred-address-types InternalIP --kubelet-certificate-authority "$pki/ca.crt"
      --kubelet-client-certificate "$pki/admin.crt" --kubelet-client-key "$pki/admin.key")
    # A peer stays out of the `kubernetes` Service: its loopback address would be a Pod's own.
    if [[ $advertise == 127.0.0.1 ]]; then node_flags+=(--endpoint-reconciler-type none); fi
  fi
  exec "$S3OP_BIN/kube-apiserver" \
    --etcd-servers "$(cat "$state/etcd.url")" \
    --bind-address 127.0.0.1 --advertise-address "$advertise" --secure-port "$1" \
    --cert-dir "$2" \
    --tls-cert-file "$pki/apiserver.crt" --tls-private-key-file "$pki/apiserver.key" \
    --client-ca-file "$pki/ca.crt" \
    --authorization-mode "$authz" \
    --service-account-issuer "$(cat "$state/sa-issuer")" --service-account-jwks-uri "$(cat "$state/sa-issuer")/openid/v1/jwks" \
    --service-account-key-file "$pki/sa.pub" --service-account-signing-key-file "$pki/sa.key" \
    --service-cluster-ip-range 10.96.0.0/16 \
    "${admission[@]}" "${node_flags[@]}" \
    --audit-policy-file "$here/audit-policy.yaml" --audit-log-path "$3" \
    --profiling=false --v 1
}

up() {
  if [[ -f $state/env ]] && source "$state/env" && kubectl_ok && moto_ok && [[ -z $node || -n ${S3OP_NODE_NAME:-} ]]; then
    log "environment already up: source $state/env"
    echo "$state/env"; return 0
  fi
  down_quiet
  mkdir -p "$state"
  # Every server listens on loopback, as without a node. With one, Pods reach the API server and
  # moto at the node's bridge address through a relay (socat) to loopback: each server takes a
  # single bind address, and a wider one would include the uplink's.
  local addr=127.0.0.1 node_ip=127.0.0.1
  if [[ -n $node ]]; then
    [[ $(id -u) -eq 0 ]] || die "hack/env.sh up --node needs root (containerd, kubelet, iptables, a bridge)"
    # The watchdog first: the node changes the host from here on.
    watchdog
    node_ip=$("$here/node.sh" net-up --state "$state" | tail -n 1)
  fi
  "$here/tools.sh" etcd kube moto faketime
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
  # The ServiceAccount token issuer is the main API server's loopback URL, which the emulator
  # (standing in for STS) reaches to fetch the signing keys, as STS fetches an EKS cluster's.
  echo "https://127.0.0.1:$api_port" >"$state/sa-issuer"
  log "starting kube-apiserver $KUBE_VERSION on https://$addr:$api_port"
  start kube-apiserver apiserver "$api_port" "$state/apiserver-certs" "$state/audit.jsonl" "$node_ip"
  if [[ -n $node ]]; then relay "$api_port"; fi

  local kc="$state/admin.kubeconfig"
  KUBECONFIG="$kc" "$bin/kubectl" config set-cluster local --server "https://$addr:$api_port" \
    --certificate-authority "$pki/ca.crt" --embed-certs >/dev/null
  KUBECONFIG="$kc" "$bin/kubectl" config set-credentials admin --client-certificate "$pki/admin.crt" \
    --client-key "$pki/admin.key" --embed-certs >/dev/null
  KUBECONFIG="$kc" "$bin/kubectl" config set-context local --cluster local --user admin >/dev/null
  KUBECONFIG="$kc" "$bin/kubectl" config use-context local >/dev/null
  export KUBECONFIG="$kc"
  wait_for kube-apiserver 90 "$bin/kubectl" get --raw /readyz
  # OIDC discovery without credentials, as STS reads it (EKS serves it publicly).
  "$bin/kubectl" create clusterrolebinding s3op-oidc-discovery --clusterrole system:service-account-issuer-discovery \
    --group system:unauthenticated >/dev/null

  # The quota controller may recount from a cache that has not seen the newest objects yet and
  # then leaves `used` low until its next full recount (5 min by default); tests wait for it.
  local quota_resync=10s
  if [[ -n $node ]]; then
    log "starting kube-controller-manager (every default controller)"
    start kube-controller-manager "$bin/kube-controller-manager" --kubeconfig "$kc" \
      --leader-elect=false --secure-port 0 --root-ca-file "$pki/ca.crt" \
      --service-account-private-key-file "$pki/sa.key" --service-cluster-ip-range 10.96.0.0/16 \
      --cluster-signing-cert-file "$pki/ca.crt" --cluster-signing-key-file "$pki/ca.key" \
      --resource-quota-sync-period "$quota_resync" --v 1
  else
    log "starting kube-controller-manager (garbage collector, namespaces, ServiceAccounts, quotas)"
    start kube-controller-manager "$bin/kube-controller-manager" --kubeconfig "$kc" \
      --controllers garbagecollector,namespace,serviceaccount,resourcequota \
      --leader-elect=false --secure-port 0 --root-ca-file "$pki/ca.crt" \
      --resource-quota-sync-period "$quota_resync" --v 1
  fi

  log "starting moto $MOTO_VERSION (S3, IAM, STS; IAM enforced) on http://$addr:$moto_port"
  local venv="$S3OP_CACHE/venv-moto-$MOTO_VERSION"
  # A member account (AWS Organizations' OrganizationAccountAccessRole), a target of AWSAccounts.
  start moto env INITIAL_NO_AUTH_ACTION_COUNT=6 MOTO_PORT="$moto_port" S3OP_OIDC_CA_BUNDLE="$pki/ca.crt" \
    S3OP_EMULATOR_ACCOUNTS="${S3OP_EMULATOR_ACCOUNTS:-111111111111}" \
    S3OP_SA_ISSUER="$(cat "$state/sa-issuer")" \
    "$venv/bin/python" "$here/moto_server.py" "$addr" "$moto_port"
  local endpoint="http://$addr:$moto_port"
  wait_for moto 60 python3 -c "import socket; socket.create_connection(('$addr', $moto_port), 1)"
  if [[ -n $node ]]; then relay "$moto_port"; fi

  if [[ -n $node ]]; then "$here/node.sh" start --state "$state"; fi

  local agent_port agent_listen
  agent_port=$(free_port)
  agent_listen=("$addr:$agent_port")
  if [[ -n $node ]]; then agent_listen+=("$(cat "$state/node/pod-identity-agent-ip"):80"); fi
  {
    echo "# Source this file to use the local environment (written by hack/env.sh)."
    echo "export S3OP_ENV_DIR=$state"
    echo "export KUBECONFIG=$kc"
    echo "export S3OP_KUBE_SERVER=https://$addr:$api_port"
    echo "export S3OP_KUBE_CA=$pki/ca.crt"
    echo "export S3OP_KUBE_AUDIT_LOG=$state/audit.jsonl"
    echo "export S3OP_AWS_ENDPOINT=$endpoint"
    echo "export S3OP_AWS_REGION=us-east-1"
    echo "export S3OP_POD_IDENTITY_AGENT_URL=http://$addr:$agent_port/v1/credentials"
    echo "export PATH=$bin:\$PATH"
    "$venv/bin/python" "$here/aws_bootstrap.py" "$endpoint" "$(cat "$state/sa-issuer")" "$pki/ca.crt"
    if [[ -n $node ]]; then
      # What Pods use: the API server behind the `kubernetes` Service, moto through its relay.
      echo "export S3OP_NODE_KUBE_SERVER=https://$node_ip:$api_port"
      echo "export S3OP_NODE_AWS_ENDPOINT=http://$node_ip:$moto_port"
      echo "export S3OP_NODE_POD_IDENTITY_AGENT_URL=http://${agent_listen[1]%:80}/v1/credentials"
      cat "$state/node/env"
    fi
  } >"$state/env.tmp"
  mv "$state/env.tmp" "$state/env"
  pod_identity_agent "$venv" "$endpoint" "${agent_listen[@]}"

  if [[ -z $node ]]; then watchdog; fi
  log "environment up: source $state/env"
  echo "$state/env"
}

# pod_identity_agent VENV ENDPOINT HOST:PORT...: the agent stand-in, signing with the agent's own
# key from the env file (passed in its environment, never on its command line).
pod_identity_agent() {
  local venv=$1 endpoint=$2; shift 2
  log "starting the Pod Identity agent stand-in on $*"
  start pod-identity-agent env -u AWS_SESSION_TOKEN -u AWS_PROFILE \
    AWS_ACCESS_KEY_ID="$(source "$state/env" && echo "$S3OP_POD_IDENTITY_AGENT_ACCESS_KEY_ID")" \
    AWS_SECRET_ACCESS_KEY="$(source "$state/env" && echo "$S3OP_POD_IDENTITY_AGENT_SECRET_ACCESS_KEY")" \
    "$venv/bin/python" "$here/pod_identity_agent.py" "$endpoint" "$(source "$state/env" && echo "$S3OP_EKS_CLUSTER_NAME")" "$@"
  local listen
  for listen in "$@"; do
    wait_for pod-identity-agent 20 python3 -c "import socket; socket.create_connection(('${listen%:*}', ${listen##*:}), 1)"
  done
}

# relay PORT: the node's bridge address, same port, forwarded to the server on loopback.
relay() {
  start "relay-$1" socat "TCP-LISTEN:$1,bind=$node_ip,reuseaddr,fork" "TCP:127.0.0.1:$1"
  wait_for "relay-$1" 10 python3 -c "import socket; socket.create_connection(('$node_ip', $1), 1)"
}

watchdog() {
  if [[ -n $owner ]]; then
    # A detached watchdog: tears the environment down once the owner process is gone, and
    # removes its state (keys and logs of an environment nobody can use any more).
    setsid bash -c "while kill -0 $owner 2>/dev/null; do sleep 1; done; '$here/env.sh' down --state '$state' && rm -rf '$state'" \
      >/dev/null 2>&1 </dev/null &
  fi
}

kubectl_ok() { "$S3OP_BIN/kubectl" get --raw /readyz >/dev/null 2>&1; }
moto_ok() { curl -sf -o /dev/null "$S3OP_AWS_ENDPOINT/moto-api/" ; }

down_quiet() {
  # The node first (it restores the host), then the control plane.
  if [[ -d $state/node ]]; then "$here/node.sh" down --state "$state" || true; fi
  # Reverse start order: relays, moto, controller-manager, apiserver, then etcd.
  kill_pids "$state/pids"
  rm -rf "$state/etcd" "$state/pids" "$state/env" "$state/apiserver-certs"* "$state/audit"*.jsonl
}

case $cmd in
  up) up ;;
  down) down_quiet; log "environment down ($state)" ;;
  apiserver) apiserver "$port" "$state/apiserver-certs-$port" "$state/audit-$port.jsonl" ;;
  *) die "usage: hack/env.sh up|down|apiserver [--state DIR] [--owner-pid PID]" ;;
esac
