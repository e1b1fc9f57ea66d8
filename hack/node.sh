#!/usr/bin/env bash
# The node mode of the test environment: a real one-node Kubernetes cluster on this machine, its
# Pods confined to it. Root only. Started and stopped through hack/env.sh:
#
#   hack/env.sh up --node [--state DIR] [--owner-pid PID]  control plane + node; prints the env file
#   hack/env.sh down [--state DIR]                         stops everything and restores the host
#   hack/node.sh load ARCHIVE... [--state DIR]   imports docker-archives (hack/images/build.sh) into
#                                                the node's containerd; Pods use them by their names
#   hack/node.sh check [--state DIR]             self-test: a Pod resolves the cluster DNS, calls the
#                                                API server through the `kubernetes` Service, and moto
#   (called by env.sh: `net-up`, before the API server; `start`, after it; `down`)
#
# The node: containerd (its own config, root, state and socket under the state dir) with runc and
# Debian's CNI plugins; kubelet, kube-proxy (nftables mode) and kube-scheduler; CoreDNS as a Pod
# behind 10.96.0.10. Images come from hack/images/build.sh, never from a registry: the pause image
# is imported under the name containerd's sandbox_image names, and every image name starts with
# localhost/, so even a pull by mistake stays on loopback. Any other name (a package's default
# image) fails to pull: containerd's only proxy is a closed loopback port.
#
# The network: the bridge $BRIDGE with $BRIDGE_IP, made before the API server starts. The API
# server and moto listen on loopback, and Pods reach them at $BRIDGE_IP through relays that
# env.sh starts (each server takes one bind address; any wider one would include the uplink's). Pods get $POD_CIDR from the CNI bridge plugin on $BRIDGE, without masquerade; DROP rules
# keep the pod and service ranges off every other interface, and keep other interfaces away from
# the pod range.
#
# The host: everything changed (sysctls, iptables and nft tables, the bridge, mounts, cgroups, the
# directories containerd and the CNI plugins insist on) is recorded under DIR/node/host at `net-up`
# and restored by `down`, which also works after a failed or killed run (env.sh's watchdog calls
# it). `down` ends by comparing the host with the record and warns about any difference.
set -Eeuo pipefail  # -E: the ERR trap below also reports failures inside functions
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$here/lib.sh"
trap 'log "error: hack/node.sh $cmd failed at line $LINENO: $BASH_COMMAND"' ERR

BRIDGE=s3op0
POD_CIDR=${S3OP_NODE_POD_CIDR:-10.244.0.0/24}
BRIDGE_IP=${POD_CIDR%.*}.1
SVC_CIDR=10.96.0.0/16 # hack/env.sh's --service-cluster-ip-range
DNS_IP=10.96.0.10
# Where EKS's Pod Identity agent listens on every node; the agent stand-in (env.sh) binds it on the
# bridge, where the Pods' default route leads.
POD_IDENTITY_AGENT_IP=169.254.170.23
NODE_NAME=s3op-node
CGROUP_ROOT=/s3op-node # kubelet's cgroupRoot in every cgroup v1 hierarchy (or in cgroup v2)
# What kubelet, kube-proxy, the CNI plugins and this script may change, restored by `down`
# (ip_forward first: setting it also sets all.accept_redirects and every interface's forwarding).
SYSCTLS="net.ipv4.ip_forward net.ipv4.conf.all.accept_redirects net.bridge.bridge-nf-call-iptables
  net.bridge.bridge-nf-call-ip6tables vm.overcommit_memory vm.panic_on_oom kernel.panic
  kernel.panic_on_oops kernel.keys.root_maxkeys kernel.keys.root_maxbytes
  net.ipv4.conf.all.route_localnet net.netfilter.nf_conntrack_max
  net.netfilter.nf_conntrack_tcp_timeout_established net.netfilter.nf_conntrack_tcp_timeout_close_wait"
# Fixed paths used whatever the configuration says: the shims' sockets (/run/containerd/s), the
# CNI result cache (/var/lib/cni), kubelet's device plugin socket and its /var/log/containers links.
HOST_PATHS="/run/containerd /var/lib/cni /etc/cni /opt/cni /opt/containerd /run/netns
  /var/log/containers /var/log/pods /var/lib/kubelet"

cmd=${1:-}; shift || true
state="${S3OP_STATE:-$here/../.local/env}"
args=()
while [[ $# -gt 0 ]]; do
  case $1 in
    --state) state=$2; shift 2 ;;
    *) args+=("$1"); shift ;;
  esac
done
if [[ $cmd == down && ! -d $state/node ]]; then exit 0; fi
mkdir -p "$state"
state="$(cd "$state" && pwd -P)"  # physical: mounts are matched against /proc/self/mountinfo
nd="$state/node"      # the node's state
hs="$nd/host"         # the record of the host as it was
ctr_sock="$nd/containerd/containerd.sock"
bin="$S3OP_BIN"
kc="$state/admin.kubeconfig"

need_root() { [[ $(id -u) -eq 0 ]] || die "the node mode needs root (containerd, kubelet, iptables, a bridge)"; }
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
start() {  # start NAME CMD...: as env.sh's, pids in $nd/pids
  local name=$1; shift
  "$@" >"$state/$name.log" 2>&1 &
  echo "$name $!" >>"$nd/pids"
}
kubectl() { "$bin/kubectl" --kubeconfig "$kc" "$@"; }
ctr() { command ctr --address "$ctr_sock" --namespace k8s.io "$@"; }
cgroup_dirs() {  # every hierarchy's directory for CGROUP_ROOT
  local m
  if [[ -f /sys/fs/cgroup/cgroup.controllers ]]; then echo "/sys/fs/cgroup$CGROUP_ROOT"; return; fi
  for m in /sys/fs/cgroup/*/; do
    if [[ -f $m/cgroup.procs ]]; then echo "${m%/}$CGROUP_ROOT"; fi
  done
}

# ---------------------------------------------------------------- the record of the host

snapshot() {  # snapshot DIR: what the final comparison looks at
  local d=$1 k p c; mkdir -p "$d"
  iptables-save 2>/dev/null | sed -e '/^#/d' -e 's/\[[0-9]*:[0-9]*\]//' >"$d/iptables"
  ip6tables-save 2>/dev/null | sed -e '/^#/d' -e 's/\[[0-9]*:[0-9]*\]//' >"$d/ip6tables"
  { nft list tables 2>/dev/null || true; } | sort >"$d/nft-tables"
  ip -o link show | awk -F': ' '{sub(/@.*/, "", $2); print $2}' | sort >"$d/links"
  awk '{print $5}' /proc/self/mountinfo | sort >"$d/mounts"
  for k in $SYSCTLS; do
    if [[ -e /proc/sys/${k//.//} ]]; then sysctl "$k"; fi
  done >"$d/sysctl"
  sysctl -a 2>/dev/null | awk '/^net\.ipv4\.conf\.[^.]+\.forwarding /' | sort >>"$d/sysctl"
  for p in $HOST_PATHS; do
    if [[ -e $p || -L $p ]]; then echo "$p"; fi
  done >"$d/paths"
  for c in $(cgroup_dirs); do
    if [[ -d $c ]]; then echo "$c"; fi
  done >"$d/cgroups"
}

net_up() {
  need_root
  [[ -d $hs ]] && die "$nd already holds a node: hack/env.sh down --state $state first"
  ip link show "$BRIDGE" >/dev/null 2>&1 && die "the bridge $BRIDGE exists already (another node environment?)"
  # kubelet's device plugin socket has a fixed path: another kubelet here would lose it.
  [[ -S /var/lib/kubelet/device-plugins/kubelet.sock ]] && die "another kubelet runs on this machine"
  # The pod and service ranges must not overlap anything the host routes.
  local routes; mapfile -t routes < <(ip -4 route show table all | awk '$1 ~ /^[0-9]/ {print $1}')
  python3 - "$POD_CIDR" "$SVC_CIDR" "${routes[@]}" <<'EOF' || die "the pod or service range overlaps a host route (set S3OP_NODE_POD_CIDR)"
import ipaddress, sys
ours = [ipaddress.ip_network(n) for n in sys.argv[1:3]]
for r in sys.argv[3:]:
    net = ipaddress.ip_network(r if "/" in r else r + "/32", strict=False)
    if net.prefixlen > 0 and any(net.overlaps(o) for o in ours):
        sys.exit(f"{net} overlaps {', '.join(map(str, ours))}")
EOF
  mkdir -p "$nd"
  snapshot "$hs"

  log "creating the bridge $BRIDGE ($BRIDGE_IP, pods $POD_CIDR) and the DROP rules that confine it"
  ip link add "$BRIDGE" type bridge
  echo "$BRIDGE" >"$hs/created-link"
  sysctl -qw "net.ipv6.conf.$BRIDGE.disable_ipv6=1"  # no IPv6 chatter on it
  ip addr add "$BRIDGE_IP/${POD_CIDR#*/}" dev "$BRIDGE"
  ip addr add "$POD_IDENTITY_AGENT_IP/32" dev "$BRIDGE"
  ip link set "$BRIDGE" up
  echo "$BRIDGE_IP" >"$nd/bridge-ip"
  echo "$POD_IDENTITY_AGENT_IP" >"$nd/pod-identity-agent-ip"

  # Pods on the bridge may talk to each other, to services (DNAT to a pod or to this host) and to
  # this host; nothing of the pod or service ranges passes any other interface, in either direction.
  iptables -w -N S3OP-FORWARD
  iptables -w -A S3OP-FORWARD -i "$BRIDGE" -o "$BRIDGE" -j RETURN
  iptables -w -A S3OP-FORWARD -i "$BRIDGE" -j DROP
  iptables -w -A S3OP-FORWARD -o "$BRIDGE" -j DROP
  local r
  for r in "$POD_CIDR" "$SVC_CIDR"; do
    iptables -w -A S3OP-FORWARD -s "$r" -j DROP
    iptables -w -A S3OP-FORWARD -d "$r" -j DROP
  done
  iptables -w -N S3OP-OUTPUT
  iptables -w -A S3OP-OUTPUT -o lo -j RETURN
  iptables -w -A S3OP-OUTPUT -o "$BRIDGE" -j RETURN
  for r in "$POD_CIDR" "$SVC_CIDR"; do
    iptables -w -A S3OP-OUTPUT -s "$r" -j DROP
    iptables -w -A S3OP-OUTPUT -d "$r" -j DROP
  done
  # The API server and moto listen on $BRIDGE_IP, the agent stand-in on $POD_IDENTITY_AGENT_IP:
  # only this host and its Pods may reach them.
  iptables -w -N S3OP-INPUT
  iptables -w -A S3OP-INPUT -i lo -j RETURN
  iptables -w -A S3OP-INPUT -i "$BRIDGE" -j RETURN
  iptables -w -A S3OP-INPUT -d "$POD_CIDR" -j DROP
  iptables -w -A S3OP-INPUT -d "$POD_IDENTITY_AGENT_IP" -j DROP
  iptables -w -I FORWARD 1 -j S3OP-FORWARD
  iptables -w -I OUTPUT 1 -j S3OP-OUTPUT
  iptables -w -I INPUT 1 -j S3OP-INPUT

  # Routing between pods through a Service IP needs forwarding; bridged traffic must pass
  # kube-proxy's rules. Both are restored by `down`.
  sysctl -qw net.ipv4.ip_forward=1
  if [[ -e /proc/sys/net/bridge/bridge-nf-call-iptables ]]; then
    sysctl -qw net.bridge.bridge-nf-call-iptables=1
  else
    modprobe br_netfilter && echo br_netfilter >"$hs/loaded-module" && sysctl -qw net.bridge.bridge-nf-call-iptables=1
  fi

  # kubelet's cgroupRoot; cgroup v1's cpuset needs its cpus and mems set before any task joins.
  local c
  for c in $(cgroup_dirs); do
    mkdir -p "$c"
    if [[ -f ${c%/*}/cpuset.cpus ]]; then cat "${c%/*}/cpuset.cpus" >"$c/cpuset.cpus"; cat "${c%/*}/cpuset.mems" >"$c/cpuset.mems"; fi
  done
  echo "$BRIDGE_IP"
}

# ---------------------------------------------------------------- the node

sign() {  # sign NAME SUBJECT [SAN]: a client or serving certificate from the environment's CA
  local d="$nd/pki" p="$state/pki"; mkdir -p "$d"
  openssl req -newkey rsa:2048 -nodes -subj "$2" -keyout "$d/$1.key" -out "$d/$1.csr" 2>/dev/null
  { echo "basicConstraints=CA:FALSE"; [[ -n ${3:-} ]] && echo "subjectAltName=$3"; } >"$d/$1.ext"
  openssl x509 -req -in "$d/$1.csr" -CA "$p/ca.crt" -CAkey "$p/ca.key" -CAcreateserial -days 3650 \
    -extfile "$d/$1.ext" -out "$d/$1.crt" 2>/dev/null
}

kubeconfig() {  # kubeconfig NAME: for the certificate NAME, to the API server admin's names
  local f="$nd/$1.kubeconfig" server
  server=$(kubectl config view -o jsonpath='{.clusters[0].cluster.server}')
  KUBECONFIG="$f" "$bin/kubectl" config set-cluster local --server "$server" \
    --certificate-authority "$state/pki/ca.crt" --embed-certs >/dev/null
  KUBECONFIG="$f" "$bin/kubectl" config set-credentials "$1" --client-certificate "$nd/pki/$1.crt" \
    --client-key "$nd/pki/$1.key" --embed-certs >/dev/null
  KUBECONFIG="$f" "$bin/kubectl" config set-context local --cluster local --user "$1" >/dev/null
  KUBECONFIG="$f" "$bin/kubectl" config use-context local >/dev/null
  echo "$f"
}

images() {  # builds (or reuses) the node's images; "REF ARCHIVE" lines in $nd/images
  "$here/images/build.sh" pause coredns probe >"$nd/images"
}
image_ref() { awk -v n="localhost/s3op/$1:" 'index($1, n) == 1 {print $1}' "$nd/images"; }

write_configs() {
  local pause; pause=$(image_ref pause)
  mkdir -p "$nd/cni/net.d" "$nd/containerd/certs.d"
  cat >"$nd/containerd.toml" <<EOF
version = 2
root = "$nd/containerd/root"
state = "$nd/containerd/state"
# No /opt/containerd, and no snapshotters that are not used.
disabled_plugins = ["io.containerd.internal.v1.opt", "io.containerd.snapshotter.v1.aufs",
  "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.snapshotter.v1.zfs", "io.containerd.tracing.processor.v1.otlp"]
[grpc]
  address = "$ctr_sock"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$pause"
  # The sandbox lacks CAP_SYS_RESOURCE: without this every sandbox fails with "can't get final
  # child's PID from pipe".
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  stream_server_address = "127.0.0.1"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "$nd/runc"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$nd/cni/net.d"
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = "$nd/containerd/certs.d"
EOF
  # No ipMasq: pod traffic is never rewritten to leave through the uplink (the DROP rules stop it).
  cat >"$nd/cni/net.d/10-s3op.conflist" <<EOF
{"cniVersion": "0.4.0", "name": "s3op", "plugins": [
  {"type": "bridge", "bridge": "$BRIDGE", "isDefaultGateway": true, "ipMasq": false, "hairpinMode": true,
   "ipam": {"type": "host-local", "dataDir": "$nd/cni/ipam",
            "ranges": [[{"subnet": "$POD_CIDR", "gateway": "$BRIDGE_IP"}]]}}]}
EOF
  local kport hport
  kport=$(free_port); hport=$(free_port)
  # No resolvConf: Pods with dnsPolicy Default get no name server, so no query leaves the machine.
  cat >"$nd/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $BRIDGE_IP
port: $kport
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: $hport
containerRuntimeEndpoint: unix://$ctr_sock
cgroupDriver: cgroupfs
cgroupRoot: $CGROUP_ROOT
failSwapOn: false
clusterDNS: [$DNS_IP]
clusterDomain: cluster.local
resolvConf: ""
podLogsDir: $nd/pod-logs
tlsCertFile: $nd/pki/kubelet-serving.crt
tlsPrivateKeyFile: $nd/pki/kubelet-serving.key
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $state/pki/ca.crt}
authorization: {mode: Webhook}
# Imported images cannot be pulled again: never collect them.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
# The node shares the host's disk with builds and caches: evicting Pods when it is 85-90% full
# (kubelet's defaults) would fail tests on a busy but healthy machine. Evict only when it is
# really about to fill.
evictionHard: {nodefs.available: 2Gi, imagefs.available: 2Gi, memory.available: 256Mi}
EOF
  local pz pm
  pz=$(free_port); pm=$(free_port)
  # conntrack values 0: kube-proxy leaves the host's conntrack sysctls alone.
  cat >"$nd/kube-proxy.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: $nd/kube-proxy.kubeconfig}
mode: nftables
hostnameOverride: $NODE_NAME
clusterCIDR: $POD_CIDR
healthzBindAddress: 127.0.0.1:$pz
metricsBindAddress: 127.0.0.1:$pm
nodePortAddresses: ["$BRIDGE_IP/32"]
conntrack: {maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
EOF
}

wait_until() {  # wait_until WHAT SECONDS LOG CMD...
  local what=$1 secs=$2 logf=$3; shift 3
  for ((i = 0; i < secs * 5; i++)); do
    if "$@" >/dev/null 2>&1; then return 0; fi
    sleep 0.2
  done
  log "$what not ready after ${secs}s; last lines of $logf:"
  tail -n 30 "$state/$logf" >&2 || true
  return 1
}

node_ready() { [[ $(kubectl get node "$NODE_NAME" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}') == True ]]; }

start_node() {
  need_root
  [[ -f $nd/bridge-ip ]] || die "no node network in $state: start with hack/env.sh up --node"
  "$here/tools.sh" node_pkgs kube_node coredns
  images
  sign kubelet "/O=system:nodes/CN=system:node:$NODE_NAME"
  sign kubelet-serving "/CN=$NODE_NAME" "IP:$BRIDGE_IP,DNS:$NODE_NAME"
  sign kube-proxy "/CN=system:kube-proxy"
  sign kube-scheduler "/CN=system:kube-scheduler"
  kubeconfig kubelet >/dev/null; kubeconfig kube-proxy >/dev/null; kubeconfig kube-scheduler >/dev/null
  write_configs

  log "starting containerd $(containerd --version | awk '{print $3}') (socket $ctr_sock)"
  # A Pod naming an image that was not imported (a chart's default ghcr.io/... image, say) makes
  # containerd pull it. containerd 1.6 has no catch-all registry config (certs.d/_default is
  # 1.7), so its proxy is a closed loopback port instead: such a pull fails at once, and no packet
  # leaves the machine, not even the registry's DNS query (the proxy would resolve it). Loopback
  # registries are never proxied.
  start containerd env HTTP_PROXY=http://127.0.0.1:9 HTTPS_PROXY=http://127.0.0.1:9 NO_PROXY= \
    containerd --config "$nd/containerd.toml"
  wait_until containerd 30 containerd.log ctr version
  local archives; mapfile -t archives < <(awk '{print $2}' "$nd/images")
  load "${archives[@]}" >/dev/null

  log "starting kube-scheduler, kubelet and kube-proxy $KUBE_VERSION (node $NODE_NAME at $BRIDGE_IP)"
  start kube-scheduler "$bin/kube-scheduler" --kubeconfig "$nd/kube-scheduler.kubeconfig" \
    --authentication-kubeconfig "$nd/kube-scheduler.kubeconfig" \
    --authorization-kubeconfig "$nd/kube-scheduler.kubeconfig" \
    --leader-elect=false --secure-port 0 --v 1
  start kubelet "$bin/kubelet" --config "$nd/kubelet.yaml" --kubeconfig "$nd/kubelet.kubeconfig" \
    --root-dir "$nd/kubelet" --hostname-override "$NODE_NAME" --node-ip "$BRIDGE_IP" --v 1
  start kube-proxy "$bin/kube-proxy" --config "$nd/kube-proxy.yaml" --v 1
  wait_until kubelet 60 kubelet.log node_ready

  log "starting CoreDNS $COREDNS_VERSION behind $DNS_IP"
  coredns_manifest | kubectl apply -f - >/dev/null
  wait_until coredns 90 kubelet.log kubectl -n kube-system rollout status deploy/coredns --timeout 2s

  {
    echo "export S3OP_NODE_NAME=$NODE_NAME"
    echo "export S3OP_NODE_IP=$BRIDGE_IP"
    echo "export S3OP_NODE_CONTAINERD=$ctr_sock"
    echo "export S3OP_NODE_POD_CIDR=$POD_CIDR"
  } >"$nd/env"
  log "node $NODE_NAME Ready, CoreDNS running"
}

coredns_manifest() {
  cat <<EOF
apiVersion: v1
kind: ServiceAccount
metadata: {name: coredns, namespace: kube-system}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: system:coredns}
rules:
- apiGroups: [""]
  resources: [endpoints, services, pods, namespaces]
  verbs: [list, watch]
- apiGroups: [discovery.k8s.io]
  resources: [endpointslices]
  verbs: [list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: system:coredns}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: system:coredns}
subjects: [{kind: ServiceAccount, name: coredns, namespace: kube-system}]
---
# Only the cluster zone: no forward plugin, so no query ever leaves the machine.
apiVersion: v1
kind: ConfigMap
metadata: {name: coredns, namespace: kube-system}
data:
  Corefile: |
    .:53 {
        errors
        health :8080
        ready :8181
        kubernetes cluster.local in-addr.arpa ip6.arpa {
            pods insecure
            fallthrough in-addr.arpa ip6.arpa
            ttl 30
        }
        cache 30
        loadbalance
    }
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: coredns, namespace: kube-system, labels: {k8s-app: kube-dns}}
spec:
  replicas: 1
  selector: {matchLabels: {k8s-app: kube-dns}}
  template:
    metadata: {labels: {k8s-app: kube-dns}}
    spec:
      serviceAccountName: coredns
      priorityClassName: system-cluster-critical
      dnsPolicy: Default
      containers:
      - name: coredns
        image: $(image_ref coredns)
        args: [-conf, /etc/coredns/Corefile]
        ports:
        - {name: dns, containerPort: 53, protocol: UDP}
        - {name: dns-tcp, containerPort: 53, protocol: TCP}
        readinessProbe: {httpGet: {path: /ready, port: 8181}, periodSeconds: 2}
        livenessProbe: {httpGet: {path: /health, port: 8080}, initialDelaySeconds: 10}
        securityContext:
          allowPrivilegeEscalation: false
          readOnlyRootFilesystem: true
          capabilities: {drop: [ALL], add: [NET_BIND_SERVICE]}
        volumeMounts: [{name: config, mountPath: /etc/coredns, readOnly: true}]
      volumes: [{name: config, configMap: {name: coredns}}]
---
apiVersion: v1
kind: Service
metadata: {name: kube-dns, namespace: kube-system, labels: {k8s-app: kube-dns}}
spec:
  clusterIP: $DNS_IP
  selector: {k8s-app: kube-dns}
  ports:
  - {name: dns, port: 53, protocol: UDP}
  - {name: dns-tcp, port: 53, protocol: TCP}
EOF
}

load() {  # load ARCHIVE...: into the node's containerd; prints the image names
  [[ -S $ctr_sock ]] || die "no node in $state (no containerd socket)"
  local a
  for a in "$@"; do
    ctr images import "$a" | awk '{print $2}'
  done
}

check() {
  # shellcheck source=/dev/null
  source "$state/env"
  local probe archive
  read -r probe archive < <("$here/images/build.sh" probe)
  load "$archive" >/dev/null
  kubectl delete pod s3op-node-check -n default --ignore-not-found --wait >/dev/null
  kubectl apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Pod
metadata: {name: s3op-node-check, namespace: default}
spec:
  restartPolicy: Never
  containers:
  - name: probe
    image: $probe
    args: [dns, kubernetes.default.svc.cluster.local, kube, http, "$S3OP_NODE_AWS_ENDPOINT/moto-api/"]
    securityContext: {allowPrivilegeEscalation: false, capabilities: {drop: [ALL]}}
EOF
  local phase=""
  for _ in $(seq 120); do
    phase=$(kubectl get pod s3op-node-check -n default -o jsonpath='{.status.phase}')
    [[ $phase == Succeeded || $phase == Failed ]] && break
    sleep 0.5
  done
  kubectl logs -n default s3op-node-check >&2 || true
  kubectl delete pod s3op-node-check -n default --wait=false >/dev/null
  [[ $phase == Succeeded ]] || die "the node check Pod ended $phase"
  log "node check passed"
}

# ---------------------------------------------------------------- teardown

# Restores the iptables table FAMILY (iptables|ip6tables) to its record: the chains of the node
# (S3OP-, KUBE-, CNI-) that were not there before and every rule that jumps to them go; other
# rules and chains are not touched.
fw_restore() {
  local ipt=$1 before="$hs/$1" now t line chain
  now=$("$ipt-save" 2>/dev/null) || return 0
  [[ -n $now ]] || return 0
  local -a ours=()
  while read -r t chain; do
    grep -qx ":$chain" < <(awk -v t="*$t" '/^\*/ {cur=$0} cur==t && /^:/ {print $1}' "$before") || ours+=("$t $chain")
  done < <(awk '/^\*/ {t=substr($1,2)} /^:(S3OP|KUBE|CNI)-/ {print t, substr($1,2)}' <<<"$now")
  [[ ${#ours[@]} -gt 0 ]] || return 0
  local tc
  # Rules elsewhere that jump to a chain being removed.
  while IFS= read -r line; do
    t=${line%% *}; line=${line#* }
    for tc in "${ours[@]}"; do
      if [[ $tc == "$t "* && $line == *" -j ${tc#* }"* && $line != "-A ${tc#* } "* ]]; then
        eval "$ipt -w -t $t -D ${line#-A }" 2>/dev/null || true
        break
      fi
    done
  done < <(awk '/^\*/ {t=substr($1,2)} /^-A / {print t, $0}' <<<"$now")
  for tc in "${ours[@]}"; do "$ipt" -w -t "${tc% *}" -F "${tc#* }" 2>/dev/null || true; done
  for tc in "${ours[@]}"; do "$ipt" -w -t "${tc% *}" -X "${tc#* }" 2>/dev/null || true; done
}

# nft tables that were not there before: kube-proxy's own, and iptables-nft's tables that are now
# empty again (iptables cannot delete a table, nft can).
nft_restore() {
  command -v nft >/dev/null || return 0
  local fam name
  while read -r _ fam name; do
    grep -qx "table $fam $name" "$hs/nft-tables" && continue
    if [[ $name == kube-proxy ]] || ! nft list table "$fam" "$name" 2>/dev/null | grep -qvE '^\s*(table|chain|type|policy|\}|$)'; then
      nft delete table "$fam" "$name" || true
    fi
  done < <(nft list tables 2>/dev/null)
}

down() {
  need_root
  # Everything started by `start`, the kubelet first, so no Pod is started again.
  if [[ -f $nd/pids ]]; then
    grep -v '^containerd ' "$nd/pids" >"$nd/pids.k8s" || true
    kill_pids "$nd/pids.k8s"
  fi
  # The Pods' containers: killed and deleted through containerd, so their shims exit.
  if [[ -S $ctr_sock ]] && ctr version >/dev/null 2>&1; then
    local id
    for id in $(ctr tasks ls -q 2>/dev/null); do ctr tasks kill -s SIGKILL "$id" >/dev/null 2>&1 || true; done
    for id in $(ctr tasks ls -q 2>/dev/null); do ctr tasks delete -f "$id" >/dev/null 2>&1 || true; done
    for id in $(ctr containers ls -q 2>/dev/null); do ctr containers delete "$id" >/dev/null 2>&1 || true; done
  fi
  kill_pids "$nd/pids"
  # What is left after a killed run: shims of this containerd, processes in the node's cgroups.
  local pid c
  for pid in $(grep -lF -- "$ctr_sock" /proc/[0-9]*/cmdline 2>/dev/null | cut -d/ -f3); do
    if [[ $(cat "/proc/$pid/comm" 2>/dev/null) == containerd-shim* ]]; then kill -9 "$pid" 2>/dev/null || true; fi
  done
  node_procs() { local c; for c in $(cgroup_dirs); do [[ -d $c ]] && find "$c" -name cgroup.procs -exec cat {} +; done 2>/dev/null || true; }
  for pid in $(node_procs); do kill -9 "$pid" 2>/dev/null || true; done
  for _ in $(seq 50); do [[ -z $(node_procs) ]] && break; sleep 0.1; done
  # Mounts under the state dir (kubelet's bind mount of its root dir, volumes, rootfs, netns),
  # deepest first.
  local m
  for m in $(awk '{print $5}' /proc/self/mountinfo | grep -F "$nd/" | sort -r); do
    umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || log "warning: could not unmount $m"
  done
  for c in $(cgroup_dirs); do
    [[ -d $c ]] || continue
    find "$c" -depth -type d -exec rmdir {} \; 2>/dev/null || true
    if [[ -d $c ]]; then log "warning: could not remove the cgroup $c"; fi
  done
  if [[ -d $hs ]]; then
    # Links: veths left on the bridge, then the bridge.
    local l
    for l in $(ip -o link show master "$BRIDGE" 2>/dev/null | awk -F': ' '{print $2}' | sed 's/@.*//'); do
      ip link delete "$l" 2>/dev/null || true
    done
    if [[ -f $hs/created-link ]]; then
      ip addr del "$POD_IDENTITY_AGENT_IP/32" dev "$BRIDGE" 2>/dev/null || true
      ip link delete "$BRIDGE" 2>/dev/null || true
    fi
    fw_restore iptables
    fw_restore ip6tables
    nft_restore
    # sysctls as recorded (only those that differ).
    local kv k v
    while IFS= read -r kv; do
      k=${kv%% = *}; v=${kv#* = }
      [[ -e /proc/sys/${k//.//} ]] || continue
      [[ $(sysctl -n "$k" 2>/dev/null) == "$v" ]] || sysctl -qw "$k=$v" || log "warning: could not restore $k"
    done <"$hs/sysctl"
    restore_paths
    if [[ -f $hs/loaded-module ]]; then modprobe -r br_netfilter 2>/dev/null || true; fi
    compare
  fi
  # The node's state, logs kept.
  rm -rf "$nd"
}

# The fixed paths that were not there before: what the node put there goes, then the directories
# left empty. Anything else found there (a containerd or kubelet started meanwhile) stays.
restore_paths() {
  local p f
  for p in $HOST_PATHS; do
    if grep -qx "$p" "$hs/paths" || [[ ! -e $p ]]; then continue; fi
    case $p in
      /run/containerd)  # the shims' sockets, unless a containerd of someone else's lives there now
        local in=("$p"/*)
        if [[ ${#in[@]} -eq 1 && ${in[0]} == "$p/s" ]]; then rm -rf "$p/s"; fi ;;
      /var/lib/cni) rm -f "$p"/results/s3op-* "$p"/results/cni-loopback-* ;;
      /var/log/containers)
        for f in "$p"/*; do [[ -L $f && $(readlink "$f") == "$nd/"* ]] && rm -f "$f"; done ;;
      /var/lib/kubelet) rm -f "$p/device-plugins/kubelet.sock" ;;
    esac
    find "$p" -depth -type d -empty -delete 2>/dev/null || true
    if [[ -e $p ]]; then log "warning: $p was made while the node ran and holds more than the node's files: left"; fi
  done
}

compare() {  # warns about every difference between the host now and its record
  local after="$nd/host-after" f diffs=""
  snapshot "$after"
  for f in iptables ip6tables nft-tables links mounts sysctl paths cgroups; do
    if ! diff -u "$hs/$f" "$after/$f" >"$after/$f.diff" 2>&1; then diffs+=" $f"; cat "$after/$f.diff" >&2; fi
  done
  if [[ -n $diffs ]]; then log "warning: the host differs from its record in:$diffs"; else log "host restored (iptables, nft tables, links, mounts, sysctls, paths, cgroups as before)"; fi
}

case $cmd in
  net-up) net_up ;;
  start) start_node ;;
  down) down ;;
  load) load "${args[@]}" ;;
  check) check ;;
  *) die "usage: hack/node.sh net-up|start|down|load ARCHIVE...|check [--state DIR] (see the top of the file)" ;;
esac
