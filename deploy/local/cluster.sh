#!/usr/bin/env bash
# A Kubernetes cluster of one node on this machine for the chart's tests and the demo, from
# the released Go modules: etcd, kube-apiserver (with the aggregation layer), kube-controller-
# manager (the deployment, replicaset, job, ttl-after-finished, HPA, disruption, endpointslice,
# node-lifecycle, garbage-collector, namespace and service-account controllers), kube-scheduler, and KEDA's operator,
# metrics adapter (serving external.metrics.k8s.io) and admission webhooks, with KEDA's and
# prometheus-operator's CRDs installed; and a node: a kubelet from the same k8s.io/kubernetes
# module on Debian's containerd, runc and CNI bridge (cluster/node.sh). What the node changes on
# the machine (kernel settings, iptables, cgroups, mounts, a few fixed paths) is recorded before
# and put back after (cluster/machine.sh); one node runs per machine.
#
# Usage: deploy/local/cluster.sh build|up|down|status|env|machine
#   build   build every binary once (the Go modules under deploy/local/cluster/) into
#           ~/.cache/sluice/cluster/bin-<versions>/ and print that folder; later runs reuse it.
#           Measured on 2 cores: the control plane without the node 10 min 42 s from an empty
#           Go build cache (the modules already downloaded); a cached start takes 10 s.
#   up      build if needed, make certificates once per cluster dir, start everything, wait
#           until the external metrics API and KEDA's webhook answer and the node is Ready;
#           first puts the machine back from a node killed before its down
#   down    delete every pod, stop every process, put the machine back as it was before up
#           (the cluster dir, with etcd's data, stays; rm -rf it to reset)
#   status  one line per process; fails unless all run and answer and the node is Ready
#   env     export lines: KUBECONFIG and SLUICE_KUBE_* (server, token, CA)
#   machine what a node may change on the machine, as text: the same before up and after down
#
# Environment: SLUICE_CLUSTER_DIR (<repo>/.stack/cluster: certificates, etcd's data, the node,
# logs), SLUICE_CLUSTER_PORT (23443: the API server; etcd, KEDA, the probes and the kubelet use
# the next 12; below the ephemeral range, so no outgoing connection takes one first),
# SLUICE_NODE_IP (the default route's address: the kubelet's, and the host's for the pods),
# SLUICE_NODE_POD_CIDR (10.244.0.0/24), SLUICE_NODE_MACHINE_DIR (/run/sluice-node: the record),
# SLUICE_CLUSTER_CACHE (~/.cache/sluice/cluster), SLUICE_GOCACHE (~/.cache/sluice/go-build).
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
MODULES="$HERE/cluster"
CACHE=${SLUICE_CLUSTER_CACHE:-$HOME/.cache/sluice/cluster}
KUBERNETES_VERSION=v1.36.4
ETCD_VERSION=v3.6.8
KEDA_VERSION=v2.21.0
COREDNS_VERSION=v1.14.7
BIN="$CACHE/bin-kubernetes-$KUBERNETES_VERSION-etcd-$ETCD_VERSION-coredns-$COREDNS_VERSION-keda-$KEDA_VERSION"
BINARIES=(etcd kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy coredns keda-operator keda-adapter keda-webhooks)

die() { printf 'cluster.sh: error: %s\n' "$*" >&2; exit 1; }

# go build PACKAGES… in MODULE into $BIN.tmp, logging to LOG.
go_build() { # module log [go build args…]
  local module=$1 log=$2
  shift 2
  (cd "$MODULES/$module" && GOCACHE=${SLUICE_GOCACHE:-$HOME/.cache/sluice/go-build} GOFLAGS=-mod=readonly \
    go build -o "$BIN.tmp/" "$@") >"$log" 2>&1 || { tail -n 20 "$log" >&2; die "building $module failed (log: $log)"; }
}

# True when any of NAMES is not built yet.
missing() { # names…
  local name
  for name in "$@"; do [[ -x $BIN/$name ]] || return 0; done
  return 1
}

# Builds what is missing of the four groups (one Go build each) into $BIN.tmp, then moves it
# into $BIN: a new component is built alone, the rest stays cached.
build() {
  missing "${BINARIES[@]}" || { echo "$BIN"; return; }
  command -v go >/dev/null || die "go is not installed: the cluster is built from its Go modules"
  mkdir -p "$CACHE" "$BIN" && rm -rf "$BIN.tmp" && mkdir -p "$BIN.tmp"
  local started=$SECONDS version=k8s.io/component-base/version cmd
  if missing etcd; then
    echo "building etcd $ETCD_VERSION (log: $CACHE/etcd.log)" >&2
    go_build etcd "$CACHE/etcd.log" go.etcd.io/etcd/server/v3
    # A main package at a /v3 path is built under the element before it.
    mv "$BIN.tmp/server" "$BIN.tmp/etcd"
  fi
  if missing kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy; then
    echo "building kube-apiserver, kube-controller-manager, kube-scheduler, kubelet and kube-proxy $KUBERNETES_VERSION (log: $CACHE/controlplane.log)" >&2
    # Without the version the API server reports v0.0.0, which the chart's kubeVersion refuses.
    local minor=${KUBERNETES_VERSION#v1.}
    go_build controlplane "$CACHE/controlplane.log" \
      -ldflags "-X $version.gitVersion=$KUBERNETES_VERSION -X $version.gitMajor=1 -X $version.gitMinor=${minor%%.*}" \
      k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
      k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kube-proxy
  fi
  if missing coredns; then
    echo "building CoreDNS $COREDNS_VERSION (log: $CACHE/coredns.log)" >&2
    go_build dns "$CACHE/coredns.log" .
    mv "$BIN.tmp/dns" "$BIN.tmp/coredns"
  fi
  if missing keda-operator keda-adapter keda-webhooks; then
    echo "building KEDA $KEDA_VERSION's operator, adapter and webhooks (log: $CACHE/keda.log)" >&2
    go_build keda "$CACHE/keda.log" github.com/kedacore/keda/v2/cmd/operator \
      github.com/kedacore/keda/v2/cmd/adapter github.com/kedacore/keda/v2/cmd/webhooks
    for cmd in operator adapter webhooks; do mv "$BIN.tmp/$cmd" "$BIN.tmp/keda-$cmd"; done
  fi
  mv "$BIN.tmp"/* "$BIN/" && rmdir "$BIN.tmp"
  echo "built in $((SECONDS - started)) s" >&2
  echo "$BIN"
}

# shellcheck source=deploy/local/cluster/run.sh
source "$MODULES/run.sh"

case ${1:-} in
  build) build ;;
  up) cmd_up ;;
  down) cmd_down ;;
  status) cmd_status ;;
  env) cmd_env ;;
  machine) machine_snapshot ;;
  *) sed -n '2,32s/^# \{0,1\}//p' "$0" >&2; exit 2 ;;
esac
