#!/usr/bin/env bash
# The whole test suite, from a fresh clone: installs and starts what the tests need (a real
# Kafka and a real Redis, on ports of their own so they never collide with a demo stack),
# runs every test of the workspace against them, and stops them again. Also: a smoke run of
# every benchmark and of the demo, and the chart, alert and dashboard checks with the real
# helm and promtool (tools.sh fetches them, and the CRDs, once into ~/.cache/sluice/tools).
#
# Usage: deploy/local/test.sh [extra cargo test args, e.g. -p sluice-core]
#
# Environment:
#   SLUICE_TEST_STACK_DIR   <repo>/.stack/test   the test stack's data and logs
#   SLUICE_TEST_KAFKA_PORT  19092                (controller: +1)
#   SLUICE_TEST_REDIS_PORT  16379
#   SLUICE_TEST_PROMETHEUS_PORT 19190            the Prometheus that scrapes the demo smoke
#   SLUICE_TEST_KEEP_STACK  unset                set to 1 to leave the stack running afterwards
#   CARGO_TARGET_DIR        cargo's default      CI points it at a cache outside the clone
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_ROOT=$(cd "$HERE/../.." && pwd)
cd "$REPO_ROOT"

say() { printf '\n== %s\n' "$*"; }
die() { printf 'test.sh: error: %s\n' "$*" >&2; exit 1; }

command -v cargo >/dev/null || die "cargo is not installed (the Rust toolchain is a prerequisite)"
command -v java >/dev/null || die "java is not installed (Java 17 runs the Kafka broker)"
for tool in cc make perl; do
  command -v "$tool" >/dev/null || die "$tool is missing: librdkafka is built from source and needs a C toolchain"
done
"$HERE/tools.sh" build-deps

export SLUICE_STACK_DIR=${SLUICE_TEST_STACK_DIR:-$REPO_ROOT/.stack/test}
export SLUICE_KAFKA_PORT=${SLUICE_TEST_KAFKA_PORT:-19092}
export SLUICE_KAFKA_CONTROLLER_PORT=$((SLUICE_KAFKA_PORT + 1))
export SLUICE_REDIS_PORT=${SLUICE_TEST_REDIS_PORT:-16379}
PROMETHEUS_PORT=${SLUICE_TEST_PROMETHEUS_PORT:-19190}

stop_prometheus() {
  local pid
  pid=$(cat "$SLUICE_STACK_DIR/prometheus/pid" 2>/dev/null) || return 0
  kill "$pid" 2>/dev/null && timeout 20 tail --pid="$pid" -f /dev/null || kill -9 "$pid" 2>/dev/null || true
  rm -f "$SLUICE_STACK_DIR/prometheus/pid"
}

stop_stack() {
  stop_prometheus
  if [[ ${SLUICE_TEST_KEEP_STACK:-} == 1 ]]; then
    say "leaving the test stack running ($SLUICE_STACK_DIR)"
  else
    say "stopping the test stack"
    "$HERE/stack.sh" down || true
  fi
}

say "starting the test stack (real Kafka + Redis)"
trap stop_stack EXIT
"$HERE/stack.sh" up || die "the test stack did not start; see $SLUICE_STACK_DIR/logs/"
eval "$("$HERE/stack.sh" env)"
export SLUICE_KAFKA_BROKERS SLUICE_REDIS_URL SLUICE_KAFKA_SECURE_BROKERS SLUICE_KAFKA_SECURE_CA SLUICE_KAFKA_SECURE_USERNAME SLUICE_KAFKA_SECURE_PASSWORD

say "checking formatting"
cargo fmt --all --check || die "code is not formatted: run cargo fmt --all"

say "checking architecture invariants (ARCHITECTURE.md)"
core_deps=$(cargo tree --locked -p sluice-core -e normal --prefix none)
if io=$(grep -E '^(tokio|rdkafka|redis|tonic|hyper|axum) ' <<<"$core_deps"); then
  die "sluice-core must do no IO, but depends on: $(tr '\n' ' ' <<<"$io")"
fi
echo "sluice-core depends on no IO crate"
processor_deps=$(cargo tree --locked -p sluice-processor -e normal --prefix none)
if sched=$(grep -E '^(tokio-cron-scheduler|sluice-scheduler|cron|croner) ' <<<"$processor_deps"); then
  die "the processor must contain no scheduled work, but depends on: $(tr '\n' ' ' <<<"$sched")"
fi
echo "sluice-processor depends on no scheduling crate"
if cargo tree --locked -p sluice-scheduler -e normal --prefix none | grep -qE '^(rdkafka|sluice-runtime) '; then
  die "the scheduler must not link the Kafka runtime (use sluice-dex without its handler feature)"
fi
echo "sluice-scheduler links no Kafka client"
if cargo tree --locked -p sluice-runtime -e normal --prefix none | grep -qE '^sluice-(dex|chainsim) '; then
  die "the runtime must stay workload-agnostic: sluice-runtime depends on a workload crate"
fi
echo "sluice-runtime depends on no workload"

say "benchmark smoke (short runs with loose bounds: they catch rot and gross regressions, not performance)"
smoke_out=$(mktemp -d)
# Progress lines go to a log, shown when a run fails.
bench() {
  cargo run --locked -q -p sluice-benches --bin sluice-bench -- --out "$smoke_out" "$@" 2>"$smoke_out/stderr" || {
    tail -n 25 "$smoke_out/stderr" >&2
    die "benchmark smoke failed: sluice-bench $*"
  }
}
bench chain --transactions 20000 >/dev/null
bench stress --seconds 2 --transactions 5000 --max-p99-us 50000
bench stress --mode full --seconds 3 --transactions 3000 --rate 1000 --max-p99-us 5000000
bench drain --transactions 1500 --instances 1,2 --partitions 4 --io-ms 5 --concurrency 4 --min-speedup 1.3
bench contention --seconds 0.2 --max-p99-us 2000
bench barrier --base-ms 5 --slow-factor 20 --window-seconds 2 --warmup-seconds 0.5 --min-utilization 0.8
say "rendering the smoke results (tables and plots, into a temporary copy)"
"$HERE/results.sh" --check --results "$smoke_out"

say "demo smoke: the whole system (chainsim, ingest x2, scheduler x2, autoscaled processors) for 20 s; must PASS"
cargo build --locked -q --bins
rm -rf "$SLUICE_STACK_DIR/scrapes" "$SLUICE_STACK_DIR/prometheus"
mkdir -p "$SLUICE_STACK_DIR/scrapes" "$SLUICE_STACK_DIR/prometheus"
# A real Prometheus scrapes the demo's services (file-based discovery the demo keeps
# current) every second and evaluates deploy/'s rules; the chart checks query it.
cat >"$SLUICE_STACK_DIR/prometheus/prometheus.yml" <<PROM
global: {scrape_interval: 1s, scrape_timeout: 1s, evaluation_interval: 1s}
rule_files: ["$REPO_ROOT/deploy/prometheus/sluice-rules.yaml"]
scrape_configs:
  - job_name: sluice
    file_sd_configs: [{files: ["$SLUICE_STACK_DIR/scrapes/targets.json"], refresh_interval: 1s}]
PROM
(exec "$("$HERE/tools.sh" prometheus)" --config.file="$SLUICE_STACK_DIR/prometheus/prometheus.yml" \
  --storage.tsdb.path="$SLUICE_STACK_DIR/prometheus/data" --web.listen-address="127.0.0.1:$PROMETHEUS_PORT" \
  --log.level=warn </dev/null >"$SLUICE_STACK_DIR/logs/prometheus.log" 2>&1) &
echo $! >"$SLUICE_STACK_DIR/prometheus/pid"
prometheus_ready() {
  python3 -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=2)' \
    "http://127.0.0.1:$PROMETHEUS_PORT/-/ready" 2>/dev/null
}
for _ in $(seq 100); do prometheus_ready && break; sleep 0.2; done
prometheus_ready || die "prometheus did not start on 127.0.0.1:$PROMETHEUS_PORT (log: $SLUICE_STACK_DIR/logs/prometheus.log)"
scrape_since=$(date +%s)
target_dir=$(cargo metadata --locked --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')
"$target_dir/debug/sluice-demo" --seconds 20 --rate 300 --max-processors 2 --lag-threshold 300 --sync-seconds 2 \
  --scale-down-window-seconds 6 --out "$smoke_out/demo" --logs "$smoke_out/demo-logs" \
  --scrapes "$SLUICE_STACK_DIR/scrapes" >"$smoke_out/demo.out" 2>&1 || {
  tail -n 40 "$smoke_out/demo.out" >&2
  die "the demo smoke failed (logs: $smoke_out/demo-logs)"
}
tail -n 14 "$smoke_out/demo.out"
"$HERE/results.sh" --demo-plot "$smoke_out/demo/latest.json" "$smoke_out/demo/plot.png"
rm -rf "$smoke_out"

say "the Helm chart with the real helm, the alerts with the real promtool, deploy/ against the chart"
helm_bin=$("$HERE/tools.sh" helm)
tools_python=$("$HERE/tools.sh" python)
promtool=$("$HERE/tools.sh" promtool)
"$HERE/../render.sh" --check
"$tools_python" "$REPO_ROOT/helm/tests/test_chart.py" --helm "$helm_bin" --promtool "$promtool" \
  --crds "$("$HERE/tools.sh" keda-crds)" --crds "$("$HERE/tools.sh" monitoring-crds)" \
  --scrapes "$SLUICE_STACK_DIR/scrapes" --prometheus "http://127.0.0.1:$PROMETHEUS_PORT" --since "$scrape_since" \
  >"$SLUICE_STACK_DIR/logs/chart.log" 2>&1 || {
  grep -E '^FAIL' -A3 "$SLUICE_STACK_DIR/logs/chart.log" >&2
  die "chart checks failed (log: $SLUICE_STACK_DIR/logs/chart.log)"
}
tail -n 1 "$SLUICE_STACK_DIR/logs/chart.log"
stop_prometheus

say "building and running every test (Kafka $SLUICE_KAFKA_BROKERS, Redis $SLUICE_REDIS_URL)"
# Two tests at a time per test binary: the machine has two cores and the broker needs some.

test_log="$SLUICE_STACK_DIR/logs/cargo-test.log"
mkdir -p "$(dirname "$test_log")"
rc=0
cargo test --workspace --locked "$@" -- --test-threads=2 2>&1 | tee "$test_log" || rc=$?
trap - EXIT
stop_stack
# One closing line over every test binary (cargo prints one result line per binary).
awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed;/) p += $i; if ($(i+1) ~ /^failed;/) f += $i } }
     END { printf "\nsummary: %d passed, %d failed\n", p, f }' "$test_log"
exit "$rc"
