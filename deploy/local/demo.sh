#!/usr/bin/env bash
# The main job: the whole system on this machine. Brings up the local stack (a real Kafka
# and a real Redis), runs chainsim, two ingest instances (active/standby), two scheduler
# replicas and the processors (added and removed by the chart's autoscaling policy on
# sluice-scaling's engine: KEDA's and the HPA's arithmetic; with --kubernetes the chart's pods
# on a local cluster's node, scaled by the real KEDA and HPA), drives traffic, shows a live
# view, then drains and checks the result against the chain. Writes results/demo/<run>.json
# and .png.
#
# Usage: deploy/local/demo.sh [--seconds N] [--rate TX_PER_SEC] [--kubernetes] [--keep] [sluice-demo options]
#   --seconds N   how long the chain's traffic runs (default 120)
#   --rate R      average transactions per second outside bursts (default 2000)
#   --kubernetes  the system as its users run it: deploy/local/cluster.sh (a control plane, KEDA
#                 and a node; built once, minutes the first time), the images built from the
#                 release binaries and pushed to the cluster's registry (deploy/images/build.sh),
#                 the chart installed with helm: the ingest, scheduler, processors and sluice-lag
#                 run as pods (CPU requests lowered to fit the 2-core node:
#                 deploy/local/cluster/node-values.yaml), KEDA and the HPA scale the processors
#   --keep        leave the stack (and the cluster) running afterwards (default: stop what this
#                 run started)
#   other options go to sluice-demo (--max-processors, --lag-threshold, --sync-seconds, …;
#   see: cargo run -p sluice-demo -- --help)
# The stack's ports and folder come from deploy/local/stack.sh's settings (SLUICE_*).
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_ROOT=$(cd "$HERE/../.." && pwd)
cd "$REPO_ROOT"

keep=0 kubernetes=0
args=()
while (($#)); do
  case $1 in
    --keep) keep=1; shift ;;
    --kubernetes) kubernetes=1; shift ;;
    --seconds|--rate) args+=("$1" "${2:?$1 needs a value}"); shift 2 ;;
    -h|--help) sed -n '/^# Usage:/,/^# The stack/s/^# \{0,1\}//p' "$0"; exit 0 ;;
    *) args+=("$1"); shift ;;
  esac
done

command -v cargo >/dev/null || { echo "demo.sh: cargo is not installed (the Rust toolchain is a prerequisite)" >&2; exit 1; }
command -v java >/dev/null || { echo "demo.sh: java is not installed (Java 17 runs the Kafka broker)" >&2; exit 1; }

echo "== building every service (release; the first build takes several minutes)"
"$HERE/tools.sh" build-deps
cargo build --locked --release -q --bins
target_dir=$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')

started=0 cluster_started=0
if ! "$HERE/stack.sh" status >/dev/null 2>&1; then started=1; fi
stop() {
  if ((cluster_started && !keep)); then
    echo "== stopping the control plane this demo started"
    "$HERE/cluster.sh" down
  fi
  if ((started && !keep)); then
    echo "== stopping the stack this demo started"
    "$HERE/stack.sh" down
  fi
}
trap stop EXIT

echo "== bringing up the local stack"
if ((kubernetes)); then
  # The pods reach the broker and Redis on the node's address (the default route's).
  SLUICE_STACK_POD_ADDRESS=${SLUICE_STACK_POD_ADDRESS:-$(ip -4 route get 1.1.1.1 2>/dev/null | sed -n 's/.* src \([0-9.]*\).*/\1/p')}
  export SLUICE_STACK_POD_ADDRESS
fi
"$HERE/stack.sh" up
eval "$("$HERE/stack.sh" env)"
export SLUICE_KAFKA_BROKERS SLUICE_REDIS_URL
if ((kubernetes)); then
  [[ -n ${SLUICE_KAFKA_POD_BROKERS:-} ]] \
    || { echo "demo.sh: the running stack does not listen for pods: run 'deploy/local/stack.sh down' first" >&2; exit 1; }
  export SLUICE_KAFKA_POD_BROKERS SLUICE_REDIS_POD_URL
  echo "== bringing up the Kubernetes cluster (deploy/local/cluster.sh; the first build takes several minutes)"
  if ! "$HERE/cluster.sh" status >/dev/null 2>&1; then cluster_started=1; fi
  "$HERE/cluster.sh" up
  eval "$("$HERE/cluster.sh" env)"
  echo "== the images, from the release binaries, pushed to the cluster's registry $SLUICE_REGISTRY"
  "$REPO_ROOT/deploy/images/build.sh" --binaries "$target_dir/release" --push "$SLUICE_REGISTRY/sluice" --push-insecure
  args+=(--kubernetes --helm "$("$HERE/tools.sh" helm)" --image-registry "$SLUICE_REGISTRY/sluice"
    -f "$HERE/cluster/node-values.yaml")
fi

rc=0
"$target_dir/release/sluice-demo" --out "$REPO_ROOT/results/demo" "${args[@]}" || rc=$?
if [[ -f $REPO_ROOT/results/demo/latest.json ]] && ((rc != 130)); then
  id=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["id"])' "$REPO_ROOT/results/demo/latest.json")
  if "$HERE/results.sh" --demo-plot "$REPO_ROOT/results/demo/latest.json" "$REPO_ROOT/results/demo/$id.png"; then
    echo "plot: results/demo/$id.png"
  fi
fi
exit "$rc"
