#!/usr/bin/env bash
# What the autoscaling assumes, measured on real pods (benches/pods/measure.py): a processor
# pod's start-up (asked for → scheduled → running → Ready → consuming, the image cached and
# pulled), the rebalance pause per scale step, and the records/s one pod sustains at its CPU
# request and unlimited. A release-build run of its own, not part of CI: it builds the release
# binaries and images, brings up the stack (listening for pods) and the cluster, and writes
# results/<UTC time>-pods.json; deploy/local/results.sh renders it into results/README.md.
#
# Usage: deploy/local/measure-pods.sh [measure.py options: --backlog N --window S --steady-rate R]
#        deploy/local/measure-pods.sh kill [--runs N]   how long a killed processor's partitions go
#                 without a commit, per group setting (benches/pods/kill.py: results/<time>-pod-kill.json)
# Stops the stack and the cluster afterwards if it started them.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_ROOT=$(cd "$HERE/../.." && pwd)
cd "$REPO_ROOT"

echo "== building the release binaries"
"$HERE/tools.sh" build-deps
cargo build --locked --release -q --bins
target=$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')

SLUICE_STACK_POD_ADDRESS=${SLUICE_STACK_POD_ADDRESS:-$(ip -4 route get 1.1.1.1 2>/dev/null | sed -n 's/.* src \([0-9.]*\).*/\1/p')}
export SLUICE_STACK_POD_ADDRESS
stack_started=0 cluster_started=0
"$HERE/stack.sh" status >/dev/null 2>&1 || stack_started=1
"$HERE/cluster.sh" status >/dev/null 2>&1 || cluster_started=1
stop() {
  ((cluster_started)) && "$HERE/cluster.sh" down >/dev/null
  ((stack_started)) && "$HERE/stack.sh" down >/dev/null
  return 0
}
trap stop EXIT
"$HERE/stack.sh" up
eval "$("$HERE/stack.sh" env)"
[[ -n ${SLUICE_KAFKA_POD_BROKERS:-} ]] || { echo "measure-pods.sh: the running stack does not listen for pods: stack.sh down first" >&2; exit 1; }
export SLUICE_KAFKA_BROKERS SLUICE_KAFKA_POD_BROKERS SLUICE_REDIS_POD_URL
"$HERE/cluster.sh" up
eval "$("$HERE/cluster.sh" env)"
tag="$(sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' helm/sluice/Chart.yaml)"
"$REPO_ROOT/deploy/images/build.sh" --binaries "$target/release" --tag "$tag" --push "$SLUICE_REGISTRY/sluice" --push-insecure
python=$("$HERE/tools.sh" python) helm=$("$HERE/tools.sh" helm)
if [[ ${1:-} == kill ]]; then
  shift
  "$python" "$REPO_ROOT/benches/pods/kill.py" --out "$REPO_ROOT/results/$(date -u +%Y%m%dT%H%M%SZ)-pod-kill.json" "$@" -- \
    --helm "$helm" --kubeconfig "$KUBECONFIG" --demo "$target/release/sluice-demo" --sluice-lag "$target/release/sluice-lag" \
    --registry "$SLUICE_REGISTRY/sluice" --tag "$tag" --upgrade-tag "$tag" --containerd-socket "$SLUICE_NODE_CONTAINERD" \
    --values "$REPO_ROOT/helm/tests/e2e-values.yaml" --values "$HERE/cluster/node-values.yaml"
  exit
fi
out="$REPO_ROOT/results/$(date -u +%Y%m%dT%H%M%SZ)-pods.json"
"$python" "$REPO_ROOT/benches/pods/measure.py" --helm "$helm" --kubeconfig "$KUBECONFIG" \
  --registry "$SLUICE_REGISTRY/sluice" --tag "$tag" --chainsim "$target/release/chainsim" \
  --sluice-lag "$target/release/sluice-lag" --containerd-socket "$SLUICE_NODE_CONTAINERD" --node-ip "$SLUICE_NODE_IP" \
  --out "$out" "$@"
