#!/usr/bin/env bash
# Renders the plain manifests in deploy/ from the Helm chart's defaults, for users without Helm:
#   deploy/kubernetes/sluice.yaml      the workloads, the KEDA ScaledObject, PDBs, NetworkPolicies
#   deploy/kubernetes/monitoring.yaml  the PodMonitor and PrometheusRule (prometheus-operator)
#   deploy/prometheus/sluice-rules.yaml  the same alerting rules as a plain Prometheus rule file
#                                  (both without the chart's release-namespace matcher)
#   deploy/grafana/sluice-dashboard.json  the Grafana dashboard, for manual import
# Usage: deploy/render.sh            rewrite them (after changing the chart)
#        deploy/render.sh --check    fail, showing the difference, if they are not what the chart renders
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
CHART="$HERE/../helm/sluice"
helm=$("$HERE/local/tools.sh" helm)
python=$("$HERE/local/tools.sh" python)

render() {
  local out=$1
  mkdir -p "$out/kubernetes" "$out/prometheus" "$out/grafana"
  # The admin token's Secret is the user's here (a random one would differ on every
  # render): create it before applying, e.g.
  #   kubectl create secret generic sluice-scheduler-admin --from-literal=admin-token=$(openssl rand -hex 16)
  local template=("$helm" template sluice "$CHART" --kube-version 1.31.0 --set scheduler.adminTokenSecret=sluice-scheduler-admin)
  "${template[@]}" --set monitoring.podMonitor.enabled=false --set monitoring.prometheusRule.enabled=false \
    --set monitoring.dashboard.enabled=false >"$out/kubernetes/sluice.yaml"
  # Not scoped to one namespace: applied with kubectl -n, the rules serve whichever it is.
  "${template[@]}" --show-only templates/monitoring.yaml --set monitoring.dashboard.enabled=false \
    --set monitoring.alerts.releaseNamespaceOnly=false >"$out/kubernetes/monitoring.yaml"
  "$python" - "$out/kubernetes/monitoring.yaml" "$out/prometheus/sluice-rules.yaml" <<'EOF'
import sys, yaml
def text(dumper, s):  # multi-line strings (the expressions) as literal blocks, as in the chart
    return dumper.represent_scalar("tag:yaml.org,2002:str", s, style="|" if "\n" in s else None)
yaml.add_representer(str, text, Dumper=yaml.SafeDumper)
rule = next(d for d in yaml.safe_load_all(open(sys.argv[1])) if d and d["kind"] == "PrometheusRule")
with open(sys.argv[2], "w") as f:
    f.write("# Rendered from the Helm chart's defaults by deploy/render.sh; do not edit (edit the chart).\n")
    yaml.safe_dump(rule["spec"], f, sort_keys=False, width=120, allow_unicode=True)
EOF
  cp "$CHART/files/dashboards/sluice.json" "$out/grafana/sluice-dashboard.json"
}

case ${1:-} in
  "") render "$HERE" ;;
  --check)
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    render "$tmp"
    status=0
    for f in kubernetes/sluice.yaml kubernetes/monitoring.yaml prometheus/sluice-rules.yaml grafana/sluice-dashboard.json; do
      diff -u "$HERE/$f" "$tmp/$f" >&2 || { echo "render.sh: deploy/$f is not what the chart renders: run deploy/render.sh" >&2; status=1; }
    done
    exit $status ;;
  *) sed -n '2,9s/^# \{0,1\}//p' "$0" >&2; exit 2 ;;
esac
