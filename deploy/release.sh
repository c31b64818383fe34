#!/usr/bin/env bash
# A release a user can install: the five images built from the release binaries
# (deploy/images/build.sh), tagged with the chart's appVersion and pushed to REGISTRY, and the
# chart packaged with helm. Refuses a chart version CHANGELOG.md has no entry for.
#
# Usage: deploy/release.sh REGISTRY [--insecure] [--out DIR] [build.sh options: --binaries DIR --strip-debug]
#   REGISTRY     where the images go, with its path: registry.example.com/sluice
#   --insecure   the registry speaks plain HTTP (a local one)
#   --out DIR    where the chart's package and the images' archives go (<repo>/dist)
# Then, on any cluster that pulls from REGISTRY:
#   helm install sluice DIR/sluice-<version>.tgz --set image.registry=REGISTRY …
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_ROOT=$(cd "$HERE/.." && pwd)
CHART="$REPO_ROOT/helm/sluice"

die() { printf 'release: error: %s\n' "$*" >&2; exit 1; }
usage() { sed -n '2,13s/^# \{0,1\}//p' "${BASH_SOURCE[0]}" >&2; exit 2; }

registry="" insecure=() out="$REPO_ROOT/dist" build=()
while (($#)); do
  case $1 in
    --insecure) insecure=(--push-insecure) ;;
    --out) out=${2:?}; shift ;;
    --binaries) build+=("$1" "${2:?}"); shift ;;
    --strip-debug) build+=("$1") ;;
    -h | --help) usage ;;
    -*) printf 'release: unknown option %s\n' "$1" >&2; usage ;;
    *) [[ -z $registry ]] || usage; registry=$1 ;;
  esac
  shift
done
[[ -n $registry ]] || usage

chart_field() { sed -n "s/^$1: *\"\{0,1\}\([^\"]*\)\"\{0,1\}$/\1/p" "$CHART/Chart.yaml"; }
version=$(chart_field version) app=$(chart_field appVersion)
grep -qE "^## Chart $version, images $app( |$)" "$REPO_ROOT/CHANGELOG.md" \
  || die "CHANGELOG.md has no entry '## Chart $version, images $app': write one before releasing"

mkdir -p "$out"
echo "== the images, tagged $app, pushed to $registry"
"$REPO_ROOT/deploy/images/build.sh" "${build[@]}" --tag "$app" --out "$out/images" --push "$registry" "${insecure[@]}"
echo "== the chart $version"
helm=$("$REPO_ROOT/deploy/local/tools.sh" helm)
"$helm" package "$CHART" --destination "$out" >/dev/null || die "helm package failed"
echo "$out/sluice-$version.tgz"
echo "install: helm install sluice $out/sluice-$version.tgz --set image.registry=$registry"
