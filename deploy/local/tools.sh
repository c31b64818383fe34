#!/usr/bin/env bash
# Installs (once, cached under ~/.cache/sluice/tools) the tools the chart's tests use, and
# prints where they are:
#   deploy/local/tools.sh helm     the real helm, built from its Go module
#   deploy/local/tools.sh python   a Python with PyYAML (a venv; PyPI)
# Environment: SLUICE_HELM_VERSION (default v3.22.0), SLUICE_TOOLS_DIR.
set -euo pipefail

TOOLS=${SLUICE_TOOLS_DIR:-$HOME/.cache/sluice/tools}
HELM_VERSION=${SLUICE_HELM_VERSION:-v3.22.0}
mkdir -p "$TOOLS"

die() { printf 'tools.sh: error: %s\n' "$*" >&2; exit 1; }

helm_path() {
  local bin="$TOOLS/helm-$HELM_VERSION/helm"
  if [[ ! -x $bin ]]; then
    command -v go >/dev/null || die "go is not installed: helm is built from its Go module (helm.sh/helm/v3)"
    local log="$TOOLS/helm-$HELM_VERSION.log"
    echo "building helm $HELM_VERSION from its Go module (a few minutes on 2 cores; log: $log)" >&2
    (cd "$TOOLS" && GOBIN="$TOOLS/helm-$HELM_VERSION" GOFLAGS=-mod=mod go install "helm.sh/helm/v3/cmd/helm@$HELM_VERSION") >"$log" 2>&1 \
      || { tail -n 20 "$log" >&2; die "building helm failed"; }
  fi
  echo "$bin"
}

python_path() {
  local venv="$TOOLS/venv"
  if ! "$venv/bin/python" -c 'import yaml' 2>/dev/null; then
    local log="$TOOLS/venv.log"
    echo "creating a Python venv with PyYAML (log: $log)" >&2
    { python3 -m venv "$venv" && "$venv/bin/pip" install -q pyyaml; } >"$log" 2>&1 \
      || { tail -n 20 "$log" >&2; die "creating the Python venv failed"; }
  fi
  echo "$venv/bin/python"
}

case ${1:-} in
  helm) helm_path ;;
  python) python_path ;;
  *) sed -n '2,6s/^# \{0,1\}//p' "$0" >&2; exit 2 ;;
esac
