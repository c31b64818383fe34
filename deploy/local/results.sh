#!/usr/bin/env bash
# Regenerate results/README.md's figure blocks and results/plots/*.png from the newest
# results/*.json of each mode (see results/render.py). Installs Debian's
# python3-matplotlib first when Python cannot import matplotlib.
#
#   deploy/local/results.sh            rewrite results/README.md and results/plots/
#   deploy/local/results.sh --check --results DIR
#                                      render DIR's results into a temporary copy (CI smoke)
#   deploy/local/results.sh --demo-plot REPORT.json OUT.png
#                                      plot a sluice-demo report (lag, processors, throughput)
#   deploy/local/results.sh --sim-plot SIMULATION.json OUT.png
#                                      plot a `sluice-lag simulate --json` run (every policy side by side)
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_ROOT=$(cd "$HERE/../.." && pwd)

# Debian's package serves Debian's interpreter (/usr/bin/python3), which need not be the
# first python3 on PATH (pyenv, venvs).
has_matplotlib() { "$1" -c 'import matplotlib' 2>/dev/null; }
PY=""
for candidate in python3 /usr/bin/python3; do
  if has_matplotlib "$candidate"; then PY=$candidate; break; fi
done
if [[ -z $PY ]]; then
  [[ $EUID -eq 0 ]] || { echo "results: matplotlib is missing and installing python3-matplotlib needs root" >&2; exit 1; }
  aptlog=$(mktemp)
  echo "installing Debian package python3-matplotlib (log: $aptlog)"
  if ! { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q python3-matplotlib; } >"$aptlog" 2>&1 \
    || ! has_matplotlib /usr/bin/python3; then
    tail -n 20 "$aptlog" >&2
    echo "results: could not install python3-matplotlib for /usr/bin/python3" >&2
    exit 1
  fi
  PY=/usr/bin/python3
fi
if [[ ${1:-} == --demo-plot ]]; then
  shift
  exec "$PY" "$REPO_ROOT/results/plot_demo.py" "$@"
fi
if [[ ${1:-} == --sim-plot ]]; then
  shift
  exec "$PY" "$REPO_ROOT/results/render.py" --sim-plot "$@"
fi
exec "$PY" "$REPO_ROOT/results/render.py" "$@"
