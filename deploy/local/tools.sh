#!/usr/bin/env bash
# Installs (once, cached under ~/.cache/sluice/tools) the tools the chart's tests use, and
# prints where they are:
#   deploy/local/tools.sh helm     the real helm, built from its Go module
#   deploy/local/tools.sh python   a Python with PyYAML, jsonschema and kubernetes-validate
#                                  (the Kubernetes API schemas it bundles); a venv from PyPI
#   deploy/local/tools.sh keda-crds  the folder of KEDA's CRDs, from its released Go module
#   deploy/local/tools.sh monitoring-crds  the folder of prometheus-operator's CRDs (PodMonitor,
#                                  PrometheusRule…), generated from its released API module with
#                                  controller-gen, the way the operator generates them
#   deploy/local/tools.sh promtool  promtool, from Debian's prometheus package (not installed:
#                                  the package is downloaded and unpacked)
#   deploy/local/tools.sh prometheus  the Prometheus server, from the same package
#   deploy/local/tools.sh build-deps  what the Rust build needs beyond the toolchain: OpenSSL's
#                                  headers and pkg-config (librdkafka links OpenSSL for TLS/SASL)
#   deploy/local/tools.sh apt PKG…  Debian packages (the node's containerd, runc, CNI plugins; the
#                                  image tools), installed as root without starting any service
# Environment: SLUICE_HELM_VERSION (v3.22.0), SLUICE_KEDA_VERSION (v2.21.0),
# SLUICE_PROMETHEUS_OPERATOR_VERSION (v0.95.2), SLUICE_CONTROLLER_TOOLS_VERSION (v0.19.0),
# SLUICE_TOOLS_DIR.
set -euo pipefail

TOOLS=${SLUICE_TOOLS_DIR:-$HOME/.cache/sluice/tools}
HELM_VERSION=${SLUICE_HELM_VERSION:-v3.22.0}
KEDA_VERSION=${SLUICE_KEDA_VERSION:-v2.21.0}
PROMOP_VERSION=${SLUICE_PROMETHEUS_OPERATOR_VERSION:-v0.95.2}
CONTROLLER_TOOLS_VERSION=${SLUICE_CONTROLLER_TOOLS_VERSION:-v0.19.0}
mkdir -p "$TOOLS"

die() { printf 'tools.sh: error: %s\n' "$*" >&2; exit 1; }

# Builds a Go command once into $TOOLS/<name>-<version>/ and prints its path.
go_install() { # name package version
  local name=$1 bin="$TOOLS/$1-$3/$1" log="$TOOLS/$1-$3.log"
  if [[ ! -x $bin ]]; then
    command -v go >/dev/null || die "go is not installed: $name is built from its Go module ($2)"
    echo "building $name $3 from its Go module (log: $log)" >&2
    # The build cache the conformance harness and cluster.sh use: the standard library and
    # the shared modules compiled once.
    (cd "$TOOLS" && GOCACHE=${SLUICE_GOCACHE:-$HOME/.cache/sluice/go-build} GOBIN="${bin%/*}" GOFLAGS=-mod=mod \
      go install "$2@$3") >"$log" 2>&1 \
      || { tail -n 20 "$log" >&2; die "building $name failed"; }
  fi
  echo "$bin"
}

# The directory of a downloaded Go module (module@version).
go_module_dir() {
  command -v go >/dev/null || die "go is not installed: $1 is a Go module"
  (cd "$TOOLS" && go mod download -json "$1" | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')
}

helm_path() {
  go_install helm helm.sh/helm/v3/cmd/helm "$HELM_VERSION"
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
  local dir
  dir=$(go_module_dir "github.com/kedacore/keda/v2@$KEDA_VERSION") || die "downloading KEDA's Go module $KEDA_VERSION failed"
  [[ -f $dir/config/crd/bases/keda.sh_scaledobjects.yaml ]] || die "no CRDs under $dir/config/crd/bases"
  echo "$dir/config/crd/bases"
}

monitoring_crds() {
  local out="$TOOLS/prometheus-operator-crds-$PROMOP_VERSION"
  if [[ ! -f $out/monitoring.coreos.com_prometheusrules.yaml ]]; then
    local gen log="$TOOLS/monitoring-crds.log" api tmp
    gen=$(go_install controller-gen sigs.k8s.io/controller-tools/cmd/controller-gen "$CONTROLLER_TOOLS_VERSION")
    echo "generating prometheus-operator $PROMOP_VERSION's CRDs with controller-gen (log: $log)" >&2
    api=$(go_module_dir "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring@$PROMOP_VERSION") \
      || die "downloading prometheus-operator's API module $PROMOP_VERSION failed"
    tmp=$(mktemp -d)
    cp -r "$api"/. "$tmp" && chmod -R u+w "$tmp"
    (cd "$tmp" && GOFLAGS=-mod=mod "$gen" crd:crdVersions=v1,allowDangerousTypes=true paths=./v1/... "output:crd:dir=$out.tmp") >"$log" 2>&1 \
      || { rm -rf "$tmp"; tail -n 20 "$log" >&2; die "generating the CRDs failed"; }
    rm -rf "$tmp" "$out" && mv "$out.tmp" "$out"
  fi
  echo "$out"
}

prometheus_deb() { # prints the unpacked package's root
  local root="$TOOLS/prometheus-deb"
  if [[ ! -x $root/usr/bin/promtool || ! -x $root/usr/bin/prometheus ]]; then
    command -v apt-get >/dev/null || die "apt-get is missing: promtool and prometheus come from Debian's prometheus package"
    local log="$TOOLS/promtool.log" tmp
    tmp=$(mktemp -d) && chmod 777 "$tmp"
    echo "downloading Debian's prometheus package for promtool and prometheus (log: $log)" >&2
    { (cd "$tmp" && { apt-get download prometheus || { apt-get update && apt-get download prometheus; }; }) \
        && rm -rf "$root" && dpkg-deb -x "$tmp"/prometheus_*.deb "$root"; } >"$log" 2>&1 \
      || { rm -rf "$tmp"; tail -n 20 "$log" >&2; die "fetching promtool failed"; }
    rm -rf "$tmp"
  fi
  echo "$root"
}

build_deps() {
  pkg-config --exists openssl 2>/dev/null && return 0
  [[ $EUID -eq 0 ]] && command -v apt-get >/dev/null \
    || die "OpenSSL's headers are missing (librdkafka links OpenSSL for TLS/SASL): install libssl-dev and pkg-config"
  local log="$TOOLS/build-deps.log"
  echo "installing libssl-dev and pkg-config from Debian (log: $log)" >&2
  { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q libssl-dev pkg-config; } >"$log" 2>&1 \
    || { tail -n 20 "$log" >&2; die "installing libssl-dev failed"; }
}

# apt-get install, with a policy-rc.d that refuses every service start while it runs (a
# package's own start script would start a second containerd or a registry on a fixed port).
apt_install() { # package…
  [[ $EUID -eq 0 ]] && command -v apt-get >/dev/null || die "Debian's $* are missing: install them as root"
  local policy=/usr/sbin/policy-rc.d kept="" rc=0
  [[ -e $policy ]] && kept=$(mktemp) && cp -p "$policy" "$kept"
  printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod 755 "$policy"
  { apt-get install -y -q --no-install-recommends "$@" || { apt-get update -q && apt-get install -y -q --no-install-recommends "$@"; }; } || rc=$?
  if [[ -n $kept ]]; then mv "$kept" "$policy"; else rm -f "$policy"; fi
  ((rc == 0)) || die "installing $* failed"
}

case ${1:-} in
  apt)
    shift
    DEBIAN_FRONTEND=noninteractive apt_install "$@"
    ;;
  helm) helm_path ;;
  python) python_path ;;
  keda-crds) keda_crds ;;
  monitoring-crds) monitoring_crds ;;
  promtool) echo "$(prometheus_deb)/usr/bin/promtool" ;;
  prometheus) echo "$(prometheus_deb)/usr/bin/prometheus" ;;
  build-deps) build_deps ;;
  *) sed -n '2,22s/^# \{0,1\}//p' "$0" >&2; exit 2 ;;
esac
