#!/usr/bin/env bash
# Installs (once, cached under ~/.cache/sluice/tools) the tools the chart's tests use, and
# prints where they are:
#   deploy/local/tools.sh helm     the real helm, built from its Go module
#   deploy/local/tools.sh python   a Python with PyYAML, jsonschema and kubernetes-validate
#                                  (the Kubernetes API schemas it bundles); a venv from PyPI
#   deploy/local/tools.sh keda-crds  the folder of KEDA's CRDs, from its released Go module
# Environment: SLUICE_HELM_VERSION (v3.22.0), SLUICE_KEDA_VERSION (v2.21.0), SLUICE_TOOLS_DIR.
set -euo pipefail

TOOLS=${SLUICE_TOOLS_DIR:-$HOME/.cache/sluice/tools}
HELM_VERSION=${SLUICE_HELM_VERSION:-v3.22.0}
KEDA_VERSION=${SLUICE_KEDA_VERSION:-v2.21.0}
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
  if ! "$venv/bin/python" -c 'import yaml, jsonschema, kubernetes_validate' 2>/dev/null; then
    local log="$TOOLS/venv.log"
    echo "creating a Python venv with PyYAML, jsonschema and kubernetes-validate (log: $log)" >&2
    { python3 -m venv "$venv" && "$venv/bin/pip" install -q pyyaml jsonschema 'kubernetes-validate==1.37.0'; } >"$log" 2>&1 \
      || { tail -n 20 "$log" >&2; die "creating the Python venv failed"; }
  fi
  echo "$venv/bin/python"
}

keda_crds() {
  command -v go >/dev/null || die "go is not installed: KEDA's CRDs come from its Go module"
  local dir
  dir=$(cd "$TOOLS" && go mod download -json "github.com/kedacore/keda/v2@$KEDA_VERSION" | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])') \
    || die "downloading KEDA's Go module $KEDA_VERSION failed"
  [[ -f $dir/config/crd/bases/keda.sh_scaledobjects.yaml ]] || die "no CRDs under $dir/config/crd/bases"
  echo "$dir/config/crd/bases"
}

case ${1:-} in
  helm) helm_path ;;
  python) python_path ;;
  keda-crds) keda_crds ;;
  *) sed -n '2,9s/^# \{0,1\}//p' "$0" >&2; exit 2 ;;
esac
