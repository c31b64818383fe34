# shellcheck shell=bash
# cluster.sh's up|down|status|env (sourced by it, not run): the processes of the control
# plane, their certificates and the objects that wire KEDA into the API server; the node is
# node.sh's, the record of the machine machine.sh's. Reads the globals cluster.sh sets: HERE,
# MODULES, BIN, KEDA_VERSION.

REPO_ROOT=$(cd "$HERE/../.." && pwd)
DIR=$(realpath -m "${SLUICE_CLUSTER_DIR:-$REPO_ROOT/.stack/cluster}")
PORT=${SLUICE_CLUSTER_PORT:-23443}
[[ $PORT =~ ^[0-9]+$ ]] && ((PORT > 1024 && PORT < 65525)) || die "SLUICE_CLUSTER_PORT must be a port between 1025 and 65524 (got '$PORT')"
ETCD_PORT=$((PORT + 1)) ETCD_PEER_PORT=$((PORT + 2)) ADAPTER_PORT=$((PORT + 3)) WEBHOOKS_PORT=$((PORT + 4))
GRPC_PORT=$((PORT + 5)) OPERATOR_METRICS=$((PORT + 6)) OPERATOR_PROBE=$((PORT + 7))
WEBHOOKS_METRICS=$((PORT + 8)) WEBHOOKS_PROBE=$((PORT + 9)) ADAPTER_METRICS=$((PORT + 10))
LAST_PORT=$((PORT + 17)) # node.sh: the kubelet's and kube-proxy's; registry.sh's; dns.sh's health and ready
PKI="$DIR/pki" KUBECONFIG_FILE="$DIR/kubeconfig"
SERVICE_CIDR=10.96.0.0/16
CONTROL_PLANE=(etcd kube-apiserver kube-controller-manager)
KEDA=(keda-operator keda-adapter keda-webhooks)

# shellcheck source=deploy/local/cluster/machine.sh
source "$MODULES/machine.sh"
# shellcheck source=deploy/local/cluster/node.sh
source "$MODULES/node.sh"
# shellcheck source=deploy/local/cluster/registry.sh
source "$MODULES/registry.sh"
# shellcheck source=deploy/local/cluster/dns.sh
source "$MODULES/dns.sh"
PROCESSES=("${CONTROL_PLANE[@]}" docker-registry coredns "${NODE_PROCESSES[@]}" "${KEDA[@]}")

port_open() {
  # shellcheck disable=SC2016 # $0 is expanded by the inner bash
  timeout 2 bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$0"' "$1" 2>/dev/null
}

# The binary of process NAME: Debian's for containerd, the ones built here for the rest.
binary() { # name
  case $1 in
    containerd | docker-registry) realpath "$(command -v "$1")" ;;
    *) echo "$BIN/$1" ;;
  esac
}

# Is PID one of this cluster's NAME processes (its binary, with this dir in its arguments)?
is_ours() { # name pid
  local exe cmd
  exe=$(readlink "/proc/$2/exe" 2>/dev/null) || return 1
  [[ $exe == "$(binary "$1")" ]] || return 1
  cmd=$(tr '\0' ' ' <"/proc/$2/cmdline" 2>/dev/null) || return 1
  [[ $cmd == *"$DIR/"* ]]
}

pid_of() { # name
  local pid=""
  [[ -f $DIR/$1.pid ]] && read -r pid <"$DIR/$1.pid"
  [[ $pid =~ ^[0-9]+$ ]] && is_ours "$1" "$pid" && echo "$pid"
}

# Starts BIN/NAME ARGS… in its own session, logging to logs/NAME.log.
start() { # name args…
  local name=$1
  shift
  [[ -n $(pid_of "$name") ]] && return 0
  local cmd=("$(binary "$name")" "$@")
  # KEDA runs on the host but resolves Service names as in a cluster (dns.sh).
  [[ $name == keda-* ]] && cmd=("${DNS_RESOLVING[@]}" "${cmd[@]}")
  # 9 is the dir's lock: a process that kept it would block every later up and down.
  setsid "${cmd[@]}" >>"$DIR/logs/$name.log" 2>&1 </dev/null 9>&- &
  local pid=$! deadline=$((SECONDS + 10))
  echo "$pid" >"$DIR/$name.pid"
  # Until setsid has exec'd the binary, /proc shows the shell: wait for it, or for its end.
  until is_ours "$name" "$pid"; do
    local state=""
    [[ -r /proc/$pid/stat ]] && read -r _ _ state _ <"/proc/$pid/stat"
    [[ -n $state && $state != Z ]] || fail_with_log "$name exited at once" "$name"
    ((SECONDS < deadline)) || die "$name (pid $pid) did not start within 10 s"
    sleep 0.05
  done
}

stop() { # name
  local pid deadline=$((SECONDS + 20))
  pid=$(pid_of "$1") || { rm -f "$DIR/$1.pid"; return 0; }
  kill -TERM "$pid" 2>/dev/null || true
  while is_ours "$1" "$pid"; do
    if ((SECONDS >= deadline)); then
      kill -KILL "$pid" 2>/dev/null || true
      sleep 0.5
    fi
    sleep 0.2
  done
  rm -f "$DIR/$1.pid"
}

fail_with_log() { # message name
  [[ -s $DIR/logs/$2.log ]] && { echo "last lines of $DIR/logs/$2.log:" >&2; tail -n 20 "$DIR/logs/$2.log" | sed 's/^/    /' >&2; }
  die "$1"
}

wait_until() { # what seconds name command…
  local what=$1 deadline=$((SECONDS + $2)) name=$3
  shift 3
  until "$@" >/dev/null 2>&1; do
    [[ -n $(pid_of "$name") ]] || fail_with_log "$name exited while starting ($what)" "$name"
    ((SECONDS < deadline)) || fail_with_log "$what: not within $2 s" "$name"
    sleep 0.3
  done
}

# One certificate signed by CA: NAME.crt/.key with the SANs and usages given.
certificate() { # ca name subject san usage
  openssl req -new -newkey rsa:2048 -nodes -keyout "$PKI/$2.key" -subj "$3" -out "$PKI/$2.csr" 2>/dev/null
  printf 'subjectAltName=%s\nextendedKeyUsage=%s\nbasicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\n' "$4" "$5" >"$PKI/$2.ext"
  openssl x509 -req -in "$PKI/$2.csr" -CA "$PKI/$1.crt" -CAkey "$PKI/$1.key" -CAcreateserial -days 3650 \
    -extfile "$PKI/$2.ext" -out "$PKI/$2.crt" 2>/dev/null
  rm -f "$PKI/$2.csr" "$PKI/$2.ext"
}

# Certificates, the service-account key and the admin token: once per cluster dir.
ensure_pki() {
  [[ -f $PKI/done ]] && return 0
  if ! command -v openssl >/dev/null; then
    [[ $EUID -eq 0 ]] && command -v apt-get >/dev/null || die "openssl is missing: install Debian's openssl package (it makes the cluster's certificates)"
    echo "installing Debian's openssl package (the cluster's certificates)"
    { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q openssl; } >"$DIR/logs/apt-openssl.log" 2>&1 \
      || fail_with_log "installing openssl failed" apt-openssl
  fi
  rm -rf "$PKI" && mkdir -p "$PKI/keda" "$PKI/scaler-ca"
  local ca
  for ca in ca front-proxy-ca; do
    openssl req -x509 -newkey rsa:2048 -nodes -keyout "$PKI/$ca.key" -out "$PKI/$ca.crt" -days 3650 \
      -subj "/CN=sluice-local-$ca" -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign 2>/dev/null
  done
  certificate ca apiserver /CN=kube-apiserver "IP:127.0.0.1,DNS:localhost,DNS:kubernetes.default.svc" serverAuth
  certificate front-proxy-ca proxy-client /CN=aggregator "DNS:aggregator" clientAuth
  # One certificate for KEDA's three (each serves TLS and the adapter is the operator's client):
  # the API server reaches the adapter by its Service's name, the rest by 127.0.0.1.
  certificate ca keda /CN=keda "IP:127.0.0.1,DNS:localhost,DNS:keda-metrics-apiserver.keda.svc,DNS:keda-operator.keda.svc,DNS:keda-admission-webhooks.keda.svc" serverAuth,clientAuth
  cp "$PKI/ca.crt" "$PKI/keda/ca.crt" && mv "$PKI/keda.crt" "$PKI/keda/tls.crt" && mv "$PKI/keda.key" "$PKI/keda/tls.key"
  certificate ca kubelet-client "/CN=kube-apiserver-kubelet-client/O=system:masters" "DNS:kube-apiserver-kubelet-client" clientAuth
  openssl genrsa -out "$PKI/sa.key" 2048 2>/dev/null && openssl rsa -in "$PKI/sa.key" -pubout -out "$PKI/sa.pub" 2>/dev/null
  printf '%s,admin,admin,system:masters\n' "$(openssl rand -hex 24)" >"$PKI/tokens.csv"
  touch "$PKI/done"
}

write_kubeconfig() {
  local token
  token=$(cut -d, -f1 "$PKI/tokens.csv")
  cat >"$KUBECONFIG_FILE" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: sluice-local
  cluster:
    server: https://127.0.0.1:$PORT
    certificate-authority: $PKI/ca.crt
users:
- name: admin
  user:
    token: $token
contexts:
- name: sluice-local
  context: {cluster: sluice-local, user: admin}
current-context: sluice-local
EOF
}

api_ready() {
  [[ $(kube get /readyz 2>/dev/null) == ok ]]
}

kube() { "$PYTHON" "$MODULES/kube.py" --kubeconfig "$KUBECONFIG_FILE" "$@"; }

start_control_plane() {
  start etcd --name sluice --data-dir "$DIR/etcd" --unsafe-no-fsync --log-level warn \
    --listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
    --listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-cluster "sluice=http://127.0.0.1:$ETCD_PEER_PORT"
  wait_until "etcd on 127.0.0.1:$ETCD_PORT" 30 etcd port_open "$ETCD_PORT"
  start kube-apiserver --etcd-servers "http://127.0.0.1:$ETCD_PORT" \
    --bind-address 127.0.0.1 --advertise-address 127.0.0.1 --secure-port "$PORT" \
    --tls-cert-file "$PKI/apiserver.crt" --tls-private-key-file "$PKI/apiserver.key" --client-ca-file "$PKI/ca.crt" \
    --service-account-issuer https://kubernetes.default.svc --service-account-signing-key-file "$PKI/sa.key" \
    --service-account-key-file "$PKI/sa.pub" --authorization-mode RBAC --token-auth-file "$PKI/tokens.csv" \
    --service-cluster-ip-range "$SERVICE_CIDR" --endpoint-reconciler-type none --profiling=false \
    --requestheader-client-ca-file "$PKI/front-proxy-ca.crt" --requestheader-allowed-names aggregator \
    --requestheader-username-headers X-Remote-User --requestheader-group-headers X-Remote-Group \
    --requestheader-extra-headers-prefix X-Remote-Extra- \
    --proxy-client-cert-file "$PKI/proxy-client.crt" --proxy-client-key-file "$PKI/proxy-client.key" \
    --kubelet-client-certificate "$PKI/kubelet-client.crt" --kubelet-client-key "$PKI/kubelet-client.key" \
    --kubelet-preferred-address-types InternalIP
  wait_until "kube-apiserver's /readyz on 127.0.0.1:$PORT" 90 kube-apiserver api_ready
  start kube-controller-manager --kubeconfig "$KUBECONFIG_FILE" \
    --authentication-kubeconfig "$KUBECONFIG_FILE" --authorization-kubeconfig "$KUBECONFIG_FILE" \
    --controllers deployment,replicaset,job,ttl-after-finished,horizontalpodautoscaling,serviceaccount,garbagecollector,namespace,nodelifecycle,taint-eviction-controller,disruption,endpointslice,podgc,root-ca-cert-publisher \
    --leader-elect=false --secure-port 0 --profiling=false \
    --service-account-private-key-file "$PKI/sa.key" --root-ca-file "$PKI/ca.crt"
}

# KEDA's CRDs, its namespace, the APIService for external.metrics.k8s.io (through an
# ExternalName Service: the API server refuses loopback endpoints) and the admission webhook
# configuration from KEDA's own file, pointed at 127.0.0.1.
apply_keda_objects() {
  local keda_crds monitoring_crds objects="$DIR/keda-objects.yaml" ca
  keda_crds=$("$HERE/tools.sh" keda-crds)
  monitoring_crds=$("$HERE/tools.sh" monitoring-crds)
  kube apply "$keda_crds"/*.yaml "$monitoring_crds"/*.yaml
  ca=$(base64 -w0 <"$PKI/ca.crt")
  "$PYTHON" - "$keda_crds/../../webhooks/validation_webhooks.yaml" "$ca" "$WEBHOOKS_PORT" "$ADAPTER_PORT" >"$objects" <<'EOF'
import sys, yaml
webhooks_file, ca, webhooks_port, adapter_port = sys.argv[1:]
docs = [
    {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "keda"}},
    {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "keda-metrics-apiserver", "namespace": "keda"},
     "spec": {"type": "ExternalName", "externalName": "127.0.0.1",
              "ports": [{"name": "https", "port": int(adapter_port), "protocol": "TCP"}]}},
    {"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService", "metadata": {"name": "v1beta1.external.metrics.k8s.io"},
     "spec": {"service": {"name": "keda-metrics-apiserver", "namespace": "keda", "port": int(adapter_port)},
              "group": "external.metrics.k8s.io", "version": "v1beta1", "caBundle": ca,
              "groupPriorityMinimum": 100, "versionPriority": 100}},
]
vwc = yaml.safe_load(open(webhooks_file))
for w in vwc["webhooks"]:
    path = w["clientConfig"]["service"]["path"]
    w["clientConfig"] = {"url": f"https://127.0.0.1:{webhooks_port}{path}", "caBundle": ca}
docs.append(vwc)
yaml.safe_dump_all(docs, sys.stdout)
EOF
  kube apply "$objects"
  local crd
  for crd in "$keda_crds"/*.yaml "$monitoring_crds"/*.yaml; do
    crd=$(basename "$crd" .yaml)
    kube wait "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/${crd#*_}.${crd%%_*}" Established --timeout 30 >/dev/null
  done
}

start_keda() {
  mkdir -p "$DIR/dns" && dns_resolv_conf "$(node_ip)"
  export KUBECONFIG=$KUBECONFIG_FILE WATCH_NAMESPACE="" POD_NAMESPACE=keda KEDA_CLUSTER_OBJECT_NAMESPACE=keda \
    OPERATOR_NAME=keda-operator
  start keda-operator --leader-elect=false --cert-dir "$PKI/keda" --ca-dir "$PKI/scaler-ca" --enable-cert-rotation=false \
    --enable-webhook-patching=false --enable-apiservice-patching=false \
    --metrics-bind-address "127.0.0.1:$OPERATOR_METRICS" --health-probe-bind-address "127.0.0.1:$OPERATOR_PROBE" \
    --metrics-service-bind-address "127.0.0.1:$GRPC_PORT"
  start keda-adapter --secure-port "$ADAPTER_PORT" --bind-address 127.0.0.1 --cert-dir "$PKI/keda" \
    --tls-cert-file "$PKI/keda/tls.crt" --tls-private-key-file "$PKI/keda/tls.key" \
    --metrics-service-address "127.0.0.1:$GRPC_PORT" --port "$ADAPTER_METRICS" \
    --lister-kubeconfig "$KUBECONFIG_FILE" --authentication-kubeconfig "$KUBECONFIG_FILE" \
    --authorization-kubeconfig "$KUBECONFIG_FILE"
  start keda-webhooks --cert-dir "$PKI/keda" --port "$WEBHOOKS_PORT" \
    --metrics-bind-address "127.0.0.1:$WEBHOOKS_METRICS" --health-probe-bind-address "127.0.0.1:$WEBHOOKS_PROBE"
  wait_until "KEDA's operator gRPC metrics service on 127.0.0.1:$GRPC_PORT" 60 keda-operator port_open "$GRPC_PORT"
  wait_until "KEDA's admission webhooks on 127.0.0.1:$WEBHOOKS_PORT" 60 keda-webhooks port_open "$WEBHOOKS_PORT"
  wait_until "the external metrics API (KEDA's adapter on 127.0.0.1:$ADAPTER_PORT) Available" 90 keda-adapter \
    kube wait /apis/apiregistration.k8s.io/v1/apiservices/v1beta1.external.metrics.k8s.io Available --timeout 2
}

# A running cluster keeps its port; refuse to start on another.
check_port_setting() {
  local saved=""
  [[ -f $DIR/port ]] && read -r saved <"$DIR/port"
  if [[ -n $saved && $saved != "$PORT" && -n $(pid_of kube-apiserver) ]]; then
    die "the cluster in $DIR runs on port $saved; run 'down' before changing SLUICE_CLUSTER_PORT"
  fi
  echo "$PORT" >"$DIR/port"
}

cmd_up() {
  local started=$SECONDS name p
  build >/dev/null
  PYTHON=$("$HERE/tools.sh" python)
  mkdir -p "$DIR/logs"
  exec 9>"$DIR/.lock"
  flock -w 300 9 || die "another cluster.sh is busy with $DIR"
  check_port_setting
  if [[ -z $(pid_of kube-apiserver) ]]; then
    for p in $(seq "$PORT" "$LAST_PORT"); do
      port_open "$p" && die "port $p is in use (the cluster needs $PORT-$LAST_PORT); choose others with SLUICE_CLUSTER_PORT"
    done
  fi
  ensure_pki
  write_kubeconfig
  echo "starting etcd, kube-apiserver and kube-controller-manager $KUBERNETES_VERSION (logs: $DIR/logs)"
  start_control_plane
  echo "installing KEDA's and prometheus-operator's CRDs and wiring KEDA $KEDA_VERSION into the API server"
  apply_keda_objects
  start_keda
  registry_up
  dns_up "$(node_ip)"
  node_up
  for name in "${PROCESSES[@]}"; do [[ -n $(pid_of "$name") ]] || fail_with_log "$name is not running" "$name"; done
  echo "cluster up in $((SECONDS - started)) s: https://127.0.0.1:$PORT"
  echo "kubeconfig: $KUBECONFIG_FILE"
}

cmd_down() {
  local i
  mkdir -p "$DIR"
  exec 9>"$DIR/.lock"
  flock -w 300 9 || die "another cluster.sh is busy with $DIR"
  # KEDA and the controllers first (nothing scales or replaces a pod), then the node (its
  # pods deleted through the API server), then the API server, then etcd.
  for ((i = ${#KEDA[@]} - 1; i >= 0; i--)); do stop "${KEDA[i]}"; done
  stop kube-controller-manager
  PYTHON=$("$HERE/tools.sh" python)
  node_down
  stop coredns
  stop docker-registry
  for ((i = ${#CONTROL_PLANE[@]} - 1; i >= 0; i--)); do stop "${CONTROL_PLANE[i]}"; done
  echo "cluster in $DIR stopped"
}

cmd_status() {
  local name pid rc=0
  PYTHON=$("$HERE/tools.sh" python)
  for name in "${PROCESSES[@]}"; do
    if pid=$(pid_of "$name"); then echo "$name: running (pid $pid)"; else echo "$name: stopped"; rc=1; fi
  done
  if ((rc == 0)); then
    api_ready || { echo "kube-apiserver: /readyz does not answer ok"; rc=1; }
    kube wait /apis/apiregistration.k8s.io/v1/apiservices/v1beta1.external.metrics.k8s.io Available --timeout 3 >/dev/null 2>&1 \
      || { echo "external.metrics.k8s.io: not Available"; rc=1; }
    node_ready || { echo "node $NODE_NAME: not Ready"; rc=1; }
  fi
  return "$rc"
}

cmd_env() {
  [[ -f $KUBECONFIG_FILE ]] || die "no cluster in $DIR: run 'up' first"
  echo "export KUBECONFIG=$KUBECONFIG_FILE"
  echo "export SLUICE_KUBE_SERVER=https://127.0.0.1:$PORT"
  echo "export SLUICE_KUBE_CA=$PKI/ca.crt"
  echo "export SLUICE_KUBE_TOKEN=$(cut -d, -f1 "$PKI/tokens.csv")"
  echo "export SLUICE_REGISTRY=$REGISTRY"
  echo "export SLUICE_NODE_IP=$(node_ip)"
  echo "export SLUICE_NODE_CONTAINERD=$NODE_SOCKET"
}
