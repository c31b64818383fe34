# shellcheck shell=bash
# cluster.sh's node (sourced, not run): a kubelet and kube-scheduler built from the control
# plane's own k8s.io/kubernetes module, on Debian's containerd, runc and CNI bridge, with a
# pause image built here (deploy/images/pause.c). Pods get addresses on the bridge (cni0,
# SLUICE_NODE_POD_CIDR) and reach the host on its gateway and on the node's address.
#
# Everything lives in the cluster dir's node/ folder but what machine.sh records and puts back.
# Reads the globals run.sh sets (DIR, PORT, PKI, BIN, KUBECONFIG_FILE) and uses its start/stop.

NODE_DIR="$DIR/node"
NODE_NAME=sluice-node
NODE_POD_CIDR=${SLUICE_NODE_POD_CIDR:-10.244.0.0/24}
NODE_SOCKET="$NODE_DIR/containerd/containerd.sock"
# The sandbox image containerd starts every pod with (never pulled: imported at up).
PAUSE_IMAGE=sluice.local/pause:1.0
KUBELET_PORT=$((PORT + 11)) KUBELET_HEALTHZ_PORT=$((PORT + 12))
PROXY_HEALTHZ_PORT=$((PORT + 14)) PROXY_METRICS_PORT=$((PORT + 15))
NODE_PROCESSES=(containerd kubelet kube-scheduler kube-proxy)
NODE_PACKAGES=(containerd runc containernetworking-plugins iptables nftables)

# The address pods reach the host on and the API server reaches the kubelet on: the
# default route's source address (SLUICE_NODE_IP overrides).
node_ip() {
  if [[ -n ${SLUICE_NODE_IP:-} ]]; then
    echo "$SLUICE_NODE_IP"
    return
  fi
  local ip
  ip=$(ip -4 route get 1.1.1.1 2>/dev/null | sed -n 's/.* src \([0-9.]*\).*/\1/p')
  [[ -n $ip ]] || die "no default route to take the node's address from: set SLUICE_NODE_IP"
  echo "$ip"
}

# Debian's containerd, runc, CNI plugins and iptables, installed without starting any
# service (a policy-rc.d refuses every start while apt runs).
node_packages() {
  local missing=() pkg
  for pkg in "${NODE_PACKAGES[@]}"; do dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg"); done
  ((${#missing[@]})) || return 0
  [[ $EUID -eq 0 ]] && command -v apt-get >/dev/null || die "the node needs Debian's ${missing[*]}: install them as root"
  echo "installing Debian's ${missing[*]} (log: $DIR/logs/apt-node.log)"
  "$HERE/tools.sh" apt "${missing[@]}" >"$DIR/logs/apt-node.log" 2>&1 || fail_with_log "installing ${missing[*]} failed" apt-node
}

# The pause image: the static binary as an OCI image of one layer, imported into containerd.
pause_image() {
  local out="$NODE_DIR/pause" tag=${PAUSE_IMAGE##*:}
  if [[ ! -f $out/pause.tar ]]; then
    command -v umoci >/dev/null && command -v skopeo >/dev/null || "$HERE/tools.sh" apt umoci skopeo >>"$DIR/logs/apt-node.log" 2>&1 \
      || fail_with_log "installing umoci and skopeo failed" apt-node
    rm -rf "$out" && mkdir -p "$out/root"
    cc -static -Os -s -o "$out/root/pause" "$HERE/../images/pause.c" || die "compiling deploy/images/pause.c failed"
    umoci init --layout "$out/oci" && umoci new --image "$out/oci:$tag" \
      && umoci insert --image "$out/oci:$tag" "$out/root/pause" /pause \
      && umoci config --image "$out/oci:$tag" --config.entrypoint /pause --config.user 65535:65535 \
      && skopeo copy -q "oci:$out/oci:$tag" "oci-archive:$out/pause.tar:$tag" >/dev/null \
      || die "packing the pause image failed"
  fi
  node_ctr images import --base-name "${PAUSE_IMAGE%:*}" "$out/pause.tar" >/dev/null || die "importing the pause image failed"
}

node_ctr() { ctr --address "$NODE_SOCKET" --namespace k8s.io "$@"; }

write_node_config() {
  local ip=$1
  mkdir -p "$NODE_DIR"/{containerd,cni/net.d,kubelet,pod-logs,certs.d}
  registry_hosts "$NODE_DIR/certs.d"
  cat >"$NODE_DIR/containerd/config.toml" <<EOF
version = 2
root = "$NODE_DIR/containerd/root"
state = "$NODE_DIR/containerd/state"
disabled_plugins = ["io.containerd.internal.v1.opt", "io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs", "io.containerd.tracing.processor.v1.otlp"]
[grpc]
  address = "$NODE_SOCKET"
[ttrpc]
  address = "$NODE_SOCKET.ttrpc"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$PAUSE_IMAGE"
  # Root here lacks CAP_SYS_RESOURCE: runc cannot lower a sandbox's oom_score_adj below 0.
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  disable_apparmor = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        BinaryName = "$(command -v runc)"
        Root = "$NODE_DIR/runc"
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$NODE_DIR/cni/net.d"
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = "$NODE_DIR/certs.d"
EOF
  # The bridge with the gateway on the host, no masquerade and no port maps: the plugin then
  # adds no iptables rules. Hairpin: a pod may reach itself through a Service.
  cat >"$NODE_DIR/cni/net.d/10-sluice.conflist" <<EOF
{"cniVersion": "0.4.0", "name": "sluice",
 "plugins": [{"type": "bridge", "bridge": "$MACHINE_BRIDGE", "isGateway": true, "ipMasq": false, "hairpinMode": true,
              "ipam": {"type": "host-local", "ranges": [[{"subnet": "$NODE_POD_CIDR"}]],
                       "routes": [{"dst": "0.0.0.0/0"}], "dataDir": "$NODE_DIR/cni/ipam"}}]}
EOF
  cat >"$NODE_DIR/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
containerRuntimeEndpoint: unix://$NODE_SOCKET
# This machine's cgroups are v1 (the workplace's own layout), without systemd.
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupsPerQOS: true
# Without changing kernel settings the kubelet refuses to start; machine.sh puts them back.
protectKernelDefaults: false
failSwapOn: false
address: $ip
port: $KUBELET_PORT
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: $KUBELET_HEALTHZ_PORT
# Only the API server (a client certificate of the cluster's CA) reaches the kubelet's API.
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {clientCAFile: $PKI/ca.crt}
authorization: {mode: AlwaysAllow}
podLogsDir: $NODE_DIR/pod-logs
volumePluginDir: $NODE_DIR/volume-plugins
resolvConf: /etc/resolv.conf
clusterDNS: [$ip]
clusterDomain: $CLUSTER_DOMAIN
serializeImagePulls: false
# The disk is shared with the builds: evict on an absolute floor, not on a percentage.
evictionHard: {memory.available: 100Mi, nodefs.available: 512Mi, imagefs.available: 512Mi, nodefs.inodesFree: 1%}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
EOF
}

# kube-proxy in iptables mode: Services' cluster IPs routed to their pods, from the pods and
# from the host (KEDA runs there). It leaves the conntrack settings alone and makes no node
# port answer on 127.0.0.1 (that would set route_localnet).
write_proxy_config() {
  cat >"$NODE_DIR/kube-proxy.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: $KUBECONFIG_FILE}
mode: iptables
clusterCIDR: $NODE_POD_CIDR
hostnameOverride: $NODE_NAME
healthzBindAddress: 127.0.0.1:$PROXY_HEALTHZ_PORT
metricsBindAddress: 127.0.0.1:$PROXY_METRICS_PORT
conntrack: {maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
iptables: {localhostNodePorts: false}
EOF
}

# A connection to a Service address kube-proxy has no rule for (a Service deleted, its address
# not yet reused) is refused on the node, as a network that routes no such address would leave
# it unanswered; here the default route leads to a proxy that answers anything, and a client
# holding on to a deleted Service's address (KEDA's gRPC connection to a scaler, say) would
# never look the name up again. One chain of our own, removed with the node's (machine.sh).
refuse_stale_service_addresses() {
  iptables -N SLUICE-SERVICES 2>/dev/null || iptables -F SLUICE-SERVICES
  iptables -A SLUICE-SERVICES -d "$SERVICE_CIDR" -m conntrack ! --ctstate DNAT -j REJECT --reject-with tcp-reset -p tcp
  local chain
  for chain in OUTPUT FORWARD; do
    iptables -C "$chain" -j SLUICE-SERVICES 2>/dev/null || iptables -I "$chain" -j SLUICE-SERVICES
  done
}

# A Node Ready, its taints gone (the node-lifecycle controller lifts not-ready).
node_ready() {
  local node
  node=$(kube get "/api/v1/nodes/$NODE_NAME" 2>/dev/null) || return 1
  "$PYTHON" -c '
import json, sys
node = json.loads(sys.argv[1])
ready = [c for c in node["status"].get("conditions", []) if c["type"] == "Ready" and c["status"] == "True"]
taints = [t for t in node["spec"].get("taints", []) if t["key"].startswith("node.kubernetes.io/")]
sys.exit(0 if ready and not taints else 1)' "$node"
}

node_up() {
  local ip
  node_packages
  # One node per machine: a node of this dir or of another whose kubelet still runs is kept;
  # one killed before its down is cleaned up and the machine put back first.
  if [[ -f $MACHINE_DIR/owner ]]; then
    local owner
    read -r owner <"$MACHINE_DIR/owner"
    if [[ $owner != "$NODE_DIR" ]] && pgrep -f -- "--root-dir $owner/kubelet" >/dev/null; then
      die "a node of $(dirname "$owner") runs on this machine (one node per machine): stop that cluster first"
    fi
    if [[ -z $(pid_of kubelet) ]]; then
      echo "putting the machine back from a node that was not stopped ($owner)"
      node_reclaim "$owner"
    fi
  fi
  ip=$(node_ip)
  write_node_config "$ip"
  write_proxy_config
  machine_record "$NODE_DIR"
  echo "starting containerd, the kubelet, kube-scheduler and kube-proxy (node $NODE_NAME at $ip, pods on $NODE_POD_CIDR)"
  start containerd --config "$NODE_DIR/containerd/config.toml"
  wait_until "containerd's socket $NODE_SOCKET" 30 containerd node_ctr version
  pause_image
  start kubelet --config "$NODE_DIR/kubelet.yaml" --kubeconfig "$KUBECONFIG_FILE" --root-dir "$NODE_DIR/kubelet" \
    --cert-dir "$NODE_DIR/kubelet-pki" --node-ip "$ip" --hostname-override "$NODE_NAME"
  start kube-scheduler --kubeconfig "$KUBECONFIG_FILE" --authentication-kubeconfig "$KUBECONFIG_FILE" \
    --authorization-kubeconfig "$KUBECONFIG_FILE" --leader-elect=false --secure-port 0
  start kube-proxy --config "$NODE_DIR/kube-proxy.yaml"
  refuse_stale_service_addresses
  wait_until "the Node $NODE_NAME Ready and untainted" 90 kubelet node_ready
}

# Every pod deleted through the API while the kubelet runs, so that it stops their sandboxes
# (the CNI plugin takes their links down); waits until containerd runs no task.
node_drain() {
  [[ -n $(pid_of kubelet) ]] || return 0
  "$PYTHON" - "$KUBECONFIG_FILE" "$MODULES" <<'EOF' || echo "node: deleting the pods failed" >&2
import sys
sys.path.insert(0, sys.argv[2])
from kube import Kube, ApiError
kube = Kube(sys.argv[1])
for pod in kube.get("/api/v1/pods")["items"]:
    meta = pod["metadata"]
    try:
        kube.request("DELETE", f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}",
                     {"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 5})
    except ApiError as e:
        if e.code != 404:
            raise
EOF
  local deadline=$((SECONDS + 60))
  while [[ -n $(node_ctr tasks ls -q 2>/dev/null) || -n $(ip -o link show master "$MACHINE_BRIDGE" 2>/dev/null) ]]; do
    ((SECONDS < deadline)) || { echo "node: pods still running after 60 s; stopping them hard" >&2; break; }
    sleep 0.5
  done
}

# Stops the node's processes and containers and puts the machine back.
node_down() {
  node_drain
  stop kube-scheduler
  stop kube-proxy
  stop kubelet
  node_reclaim "$NODE_DIR"
}

# What a stopped (or killed) node of NODE_DIR left: its containers, containerd and the shims
# (by PID: containerd's own first, those of a node killed before its down by their arguments),
# then the machine as recorded, if the record is this node's.
node_reclaim() { # node_dir
  local node_dir=$1 sock=$1/containerd/containerd.sock id pid owner=""
  if ctr --address "$sock" version >/dev/null 2>&1; then
    for id in $(ctr --address "$sock" -n k8s.io tasks ls -q 2>/dev/null); do
      ctr --address "$sock" -n k8s.io tasks kill -s SIGKILL "$id" >/dev/null 2>&1 || true
    done
  fi
  [[ $node_dir == "$NODE_DIR" ]] && stop containerd
  for pid in $(pgrep -f -- "--root-dir $node_dir/kubelet" || true) $(pgrep -f -- "--config $node_dir/(containerd/config.toml|kube-proxy.yaml)" || true) \
    $(pgrep -f "containerd-shim-runc-v2 .*-address $sock" || true); do
    kill -KILL "$pid" 2>/dev/null || true
  done
  [[ -f $MACHINE_DIR/owner ]] && read -r owner <"$MACHINE_DIR/owner"
  if [[ $owner == "$node_dir" ]]; then machine_restore "$node_dir"; fi
}
