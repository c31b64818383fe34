#!/usr/bin/env bash
# The main job: brings up the local stack (a real Kafka and a real Redis), runs the
# simulated chain into Kafka at live pace, and prints what went in.
#
# Usage: deploy/local/demo.sh [--seconds N] [--rate TX_PER_SEC] [--keep]
#   --seconds N   how long the chain runs (default 30)
#   --rate R      average transactions per second outside bursts (default 2000)
#   --keep        leave the stack running afterwards (default: stop it if this run started it)
# The stack's ports and folder come from deploy/local/stack.sh's settings (SLUICE_*).
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_ROOT=$(cd "$HERE/../.." && pwd)
cd "$REPO_ROOT"

seconds=30 rate=2000 keep=0
while (($#)); do
  case $1 in
    --seconds) seconds=${2:?--seconds needs a value}; shift 2 ;;
    --rate) rate=${2:?--rate needs a value}; shift 2 ;;
    --keep) keep=1; shift ;;
    *) sed -n '/^# Usage:/,/^# The stack/s/^# \{0,1\}//p' "$0" >&2; exit 2 ;;
  esac
done
[[ $seconds =~ ^[1-9][0-9]*$ ]] || { echo "demo.sh: --seconds must be a positive integer, got '$seconds'" >&2; exit 2; }
[[ $rate =~ ^[1-9][0-9]*$ ]] || { echo "demo.sh: --rate must be a positive integer, got '$rate'" >&2; exit 2; }

command -v cargo >/dev/null || { echo "demo.sh: cargo is not installed" >&2; exit 1; }

echo "== building chainsim"
cargo build --locked -q -p sluice-chainsim --bin chainsim

started=0
if ! "$HERE/stack.sh" status >/dev/null 2>&1; then started=1; fi
stop() {
  if ((started && !keep)); then
    echo "== stopping the stack this demo started"
    "$HERE/stack.sh" down
  fi
}
trap stop EXIT

echo "== bringing up the local stack"
"$HERE/stack.sh" up
eval "$("$HERE/stack.sh" env)"

echo "== running the chain into Kafka for ${seconds}s at ${rate} tx/s (bursts ×4 every 60 s)"
target_dir=$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')
"$target_dir/debug/chainsim" feed \
  --brokers "$SLUICE_KAFKA_BROKERS" \
  --rate "$rate" --seconds "$seconds" --paced --json >"$REPO_ROOT/.stack/demo-feed.json"

python3 - "$REPO_ROOT/.stack/demo-feed.json" "$SLUICE_KAFKA_BROKERS" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
secs = r["elapsed_ms"] / 1000
parts = r["records_per_partition"]
print()
print("Sluice demo summary")
print("-------------------")
print(f"Kafka                  {sys.argv[2]}  topic chain.transactions ({len(parts)} partitions written)")
print(f"slots                  {r['first_slot']}..{r['last_slot']}")
print(f"transactions           {r['transactions']:>10,}  ({r['transactions'] / secs:,.0f} tx/s over {secs:.1f} s)")
print(f"  swaps                {r['swaps']:>10,}  ({r['multi_hop']:,} multi-hop)")
print(f"  malformed            {r['malformed']:>10,}  ({100 * r['malformed'] / max(1, r['transactions']):.2f}%)")
print(f"  unknown venue        {r['unknown_venue']:>10,}  ({100 * r['unknown_venue'] / max(1, r['transactions']):.2f}%)")
print(f"records acknowledged   {r['records']:>10,}  (one per pool touched, keyed by pool)")
vals = sorted(int(v) for v in parts.values())
print(f"records per partition  min {vals[0]:,}  max {vals[-1]:,}")
PY
