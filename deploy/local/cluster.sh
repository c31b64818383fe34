#!/usr/bin/env bash
# A Kubernetes control plane on 127.0.0.1 for the chart's tests (issue 18), from the released
# Go modules: etcd, kube-apiserver, kube-controller-manager, and KEDA's operator, metrics
# adapter and admission webhooks. No kubelet: pods never start.
#
# Usage: deploy/local/cluster.sh build
#   build   build every binary once (the Go modules under deploy/local/cluster/) into
#           ~/.cache/sluice/cluster/bin-<versions>/ and print that folder; later runs reuse it.
#           Measured on 2 cores with a warm Go cache: kube-apiserver and kube-controller-manager
#           about 5 min, etcd 33 s, KEDA's three commands a few minutes.
# Starting and stopping the control plane (up|down|status|env) is the next step of issue 18.
#
# Environment: SLUICE_CLUSTER_DIR (~/.cache/sluice/cluster), SLUICE_GOCACHE
# (~/.cache/sluice/go-build).
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
MODULES="$HERE/cluster"
CACHE=${SLUICE_CLUSTER_DIR:-$HOME/.cache/sluice/cluster}
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

case ${1:-} in
  build) build ;;
  *) sed -n '2,13s/^# \{0,1\}//p' "$0" >&2; exit 2 ;;
esac
