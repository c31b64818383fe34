#!/usr/bin/env bash
# A Kubernetes control plane on 127.0.0.1 for the chart's tests and the demo (issue 18), from
# the released Go modules: etcd, kube-apiserver (with the aggregation layer), kube-controller-
# manager (the deployment, replicaset, HPA, garbage-collector, namespace and service-account
# controllers), and KEDA's operator, metrics adapter (serving external.metrics.k8s.io) and
# admission webhooks, with KEDA's and prometheus-operator's CRDs installed. No kubelet and no
# scheduler: pods are created but never run (the tests' replica follower runs processors).
#
# Usage: deploy/local/cluster.sh build|up|down|status|env
#   build   build every binary once (the Go modules under deploy/local/cluster/) into
#           ~/.cache/sluice/cluster/bin-<versions>/ and print that folder; later runs reuse it.
#           Measured on 2 cores: all six 10 min 42 s from an empty Go build cache (the
#           modules already downloaded); a cached start takes 10 s.
#   up      build if needed, make certificates once per cluster dir, start everything, wait
#           until the external metrics API and KEDA's webhook answer; prints the kubeconfig
#   down    stop every process (the cluster dir, with etcd's data, stays; rm -rf it to reset)
#   status  one line per process; fails unless all run and answer
#   env     export lines: KUBECONFIG and SLUICE_KUBE_* (server, token, CA)
#
# Environment: SLUICE_CLUSTER_DIR (<repo>/.stack/cluster: certificates, etcd's data, logs),
# SLUICE_CLUSTER_PORT (23443: the API server; etcd, KEDA and the probes use the next 10; below
# the ephemeral range, so no outgoing connection takes one first),
# SLUICE_CLUSTER_CACHE (~/.cache/sluice/cluster), SLUICE_GOCACHE (~/.cache/sluice/go-build).
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
MODULES="$HERE/cluster"
CACHE=${SLUICE_CLUSTER_CACHE:-$HOME/.cache/sluice/cluster}
KUBERNETES_VERSION=v1.36.4
ETCD_VERSION=v3.6.8
KEDA_VERSION=v2.21.0
BIN="$CACHE/bin-kubernetes-$KUBERNETES_VERSION-etcd-$ETCD_VERSION-keda-$KEDA_VERSION"

die() { printf 'cluster.sh: error: %s\n' "$*" >&2; exit 1; }

# go build PACKAGES… in MODULE into $BIN.tmp, logging to LOG.
go_build() { # module log [go build args…]
  local module=$1 log=$2
  shift 2
  (cd "$MODULES/$module" && GOCACHE=${SLUICE_GOCACHE:-$HOME/.cache/sluice/go-build} GOFLAGS=-mod=readonly \
    go build -o "$BIN.tmp/" "$@") >"$log" 2>&1 || { tail -n 20 "$log" >&2; die "building $module failed (log: $log)"; }
}

build() {
  if [[ -x $BIN/kube-apiserver && -x $BIN/kube-controller-manager && -x $BIN/etcd && -x $BIN/keda-operator
    && -x $BIN/keda-adapter && -x $BIN/keda-webhooks ]]; then
    echo "$BIN"
    return
  fi
  command -v go >/dev/null || die "go is not installed: the control plane is built from its Go modules"
  mkdir -p "$CACHE" && rm -rf "$BIN.tmp" && mkdir -p "$BIN.tmp"
  local started=$SECONDS version=k8s.io/component-base/version
  echo "building etcd $ETCD_VERSION (log: $CACHE/etcd.log)" >&2
  go_build etcd "$CACHE/etcd.log" go.etcd.io/etcd/server/v3
  # A main package at a /v3 path is built under the element before it.
  mv "$BIN.tmp/server" "$BIN.tmp/etcd"
  echo "building kube-apiserver and kube-controller-manager $KUBERNETES_VERSION (log: $CACHE/controlplane.log)" >&2
  # Without the version the API server reports v0.0.0, which the chart's kubeVersion refuses.
  local minor=${KUBERNETES_VERSION#v1.}
  go_build controlplane "$CACHE/controlplane.log" \
    -ldflags "-X $version.gitVersion=$KUBERNETES_VERSION -X $version.gitMajor=1 -X $version.gitMinor=${minor%%.*}" \
    k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager
  echo "building KEDA $KEDA_VERSION's operator, adapter and webhooks (log: $CACHE/keda.log)" >&2
  go_build keda "$CACHE/keda.log" github.com/kedacore/keda/v2/cmd/operator \
    github.com/kedacore/keda/v2/cmd/adapter github.com/kedacore/keda/v2/cmd/webhooks
  for cmd in operator adapter webhooks; do mv "$BIN.tmp/$cmd" "$BIN.tmp/keda-$cmd"; done
  rm -rf "$BIN" && mv "$BIN.tmp" "$BIN"
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
  *) sed -n '2,24s/^# \{0,1\}//p' "$0" >&2; exit 2 ;;
esac
