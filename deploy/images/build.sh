#!/usr/bin/env bash
# Builds Sluice's five images on this machine, without a Docker daemon or a registry, from the
# same definition users build with Docker (deploy/images/Dockerfile): buildah builds each of its
# targets with RUNTIME a base assembled here from Debian's packages (the libraries distroless
# cc-debian12 holds: glibc, libgcc, libssl, CA certificates, netbase, tzdata; a nonroot user
# 65532; no shell) and BINARIES=prebuilt, the binaries cargo built on the host.
#
# Usage: deploy/images/build.sh [options] [SERVICE…]   (services: processor scheduler ingest lag chainsim)
#   --profile release|debug  build the binaries with cargo in this profile (release); the test
#                            command gives the debug binaries it has built already
#   --binaries DIR           take the binaries from DIR (cargo's target/<profile>) instead
#   --strip-debug            drop the binaries' debug sections first (objcopy; symbols stay, so
#                            backtraces keep their function names): the test command's debug
#                            binaries go from about 140 MB to 16 MB
#   --registry REGISTRY      name the images REGISTRY/sluice-<service> (the chart's image.registry,
#                            ghcr.io/sluice)
#   --tag TAG                their tag (the chart's appVersion)
#   --out DIR                where the archives go (~/.cache/sluice/images/out)
#   --push REGISTRY          then copy each to REGISTRY/sluice-<service>:TAG with skopeo (plain
#                            HTTP for a local registry: --push-insecure)
# Prints one line per image: its name, its size (the layers, compressed) and its archive, an OCI
# image layout that also carries Docker's manifest.json, so that `docker load` and
# `ctr images import` both read it (archive.py).
#
# Environment: SLUICE_IMAGES_CACHE (~/.cache/sluice/images: the base, buildah's storage).
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_ROOT=$(cd "$HERE/../.." && pwd)
CACHE=${SLUICE_IMAGES_CACHE:-$HOME/.cache/sluice/images}
SERVICES=(processor scheduler ingest lag chainsim)
# The Debian packages of the runtime base (distroless cc-debian12's libraries).
BASE_PACKAGES=(libc6 libgcc-s1 libssl3 ca-certificates netbase tzdata)
# cargo's binary of each service (the image's file is sluice-<service>).
declare -A CARGO_BIN=([processor]=processor [scheduler]=sluice-scheduler [ingest]=sluice-ingest [lag]=sluice-lag [chainsim]=chainsim)
declare -A CARGO_PACKAGE=([processor]=sluice-processor [scheduler]=sluice-scheduler [ingest]=sluice-ingest [lag]=sluice-lag [chainsim]=sluice-chainsim)
# Binaries an image carries besides its service's, each from the package of its name: the
# processor image has the operator's CLI.
declare -A EXTRA_BIN=([processor]=sluice-ops)

die() { printf 'images: error: %s\n' "$*" >&2; exit 1; }
usage() { sed -n '2,27s/^# \{0,1\}//p' "${BASH_SOURCE[0]}" >&2; exit 2; }

chart_value() { # key of Chart.yaml
  sed -n "s/^$1: *\"\{0,1\}\([^\"]*\)\"\{0,1\}$/\1/p" "$REPO_ROOT/helm/sluice/Chart.yaml"
}

profile=release binaries="" strip=false registry=ghcr.io/sluice tag="" out="$CACHE/out" push="" push_tls=true services=()
while (($#)); do
  case $1 in
    --profile) profile=${2:?}; shift ;;
    --binaries) binaries=${2:?}; shift ;;
    --strip-debug) strip=true ;;
    --registry) registry=${2:?}; shift ;;
    --tag) tag=${2:?}; shift ;;
    --out) out=${2:?}; shift ;;
    --push) push=${2:?}; shift ;;
    --push-insecure) push_tls=false ;;
    -h | --help) usage ;;
    -*) printf 'images: unknown option %s\n' "$1" >&2; usage ;;
    *)
      [[ -n ${CARGO_BIN[$1]:-} ]] || die "no service '$1' (one of: ${SERVICES[*]})"
      services+=("$1")
      ;;
  esac
  shift
done
((${#services[@]})) || services=("${SERVICES[@]}")
[[ $profile == release || $profile == debug ]] || die "--profile must be release or debug (got '$profile')"
tag=${tag:-$(chart_value appVersion)}
[[ -n $tag ]] || die "no --tag and no appVersion in helm/sluice/Chart.yaml"

tools() {
  local missing=() t
  for t in buildah umoci skopeo; do command -v "$t" >/dev/null || missing+=("$t"); done
  ((${#missing[@]} == 0)) || "$REPO_ROOT/deploy/local/tools.sh" apt "${missing[@]}" >"$CACHE/apt.log" 2>&1 \
    || { tail -n 20 "$CACHE/apt.log" >&2; die "installing ${missing[*]} failed"; }
}

# buildah with its storage in the cache (vfs: no mounts to leave behind) and runc (crun refuses
# this machine's hybrid cgroups).
bah() {
  buildah --root "$CACHE/storage" --runroot "$CACHE/run" --storage-driver vfs "$@"
}

# What earlier builds left in the storage: working containers (of a build that was stopped)
# and images no tag names any more (every build tags the same names again). Nothing reuses
# them (--layers=false; the archives are the output), and as full vfs copies they had grown
# the cache to 16 GB after a day of CI runs here. The base image keeps its tag.
clean_storage() {
  bah rm --all >/dev/null 2>&1 && bah rmi --prune >/dev/null 2>&1 ||
    printf 'images: cleaning buildah storage in %s failed; continuing\n' "$CACHE/storage" >&2
}

# The runtime base as an OCI layout, once per set of package versions: the packages unpacked
# (not installed: no maintainer scripts run), documentation dropped, the CA bundle made from
# the certificates ca-certificates ships, and the users distroless has.
base_image() {
  local tmp key dir deb
  tmp=$(mktemp -d) && chmod 755 "$tmp"
  (cd "$tmp" && { apt-get download "${BASE_PACKAGES[@]}" || { apt-get update -q && apt-get download "${BASE_PACKAGES[@]}"; }; }) \
    >"$CACHE/base.log" 2>&1 || { rm -rf "$tmp"; tail -n 20 "$CACHE/base.log" >&2; die "downloading Debian's ${BASE_PACKAGES[*]} failed"; }
  key=$(cd "$tmp" && ls ./*.deb | sha256sum | cut -c1-12)
  dir="$CACHE/base-$key"
  if [[ ! -f $dir/done ]]; then
    rm -rf "$dir" && mkdir -p "$dir/root"
    for deb in "$tmp"/*.deb; do dpkg-deb -x "$deb" "$dir/root"; done
    local root="$dir/root"
    rm -rf "$root"/usr/share/{doc,man,info,lintian,locale,bug} "$root"/usr/sbin "$root"/usr/bin "$root"/sbin "$root"/bin "$root"/etc/init.d
    mkdir -p "$root/etc/ssl/certs" "$root/tmp" "$root/home/nonroot"
    find "$root/usr/share/ca-certificates" -name '*.crt' -print0 | sort -z | xargs -0 cat >"$root/etc/ssl/certs/ca-certificates.crt"
    chmod 1777 "$root/tmp" && chown 65532:65532 "$root/home/nonroot" && chmod 700 "$root/home/nonroot"
    printf 'root:x:0:0:root:/root:/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' >"$root/etc/passwd"
    printf 'root:x:0:\nnobody:x:65534:\nnonroot:x:65532:\n' >"$root/etc/group"
    umoci init --layout "$dir/oci" && umoci new --image "$dir/oci:base" \
      && umoci insert --image "$dir/oci:base" "$root" / \
      && umoci config --image "$dir/oci:base" --config.user 65532:65532 --config.workingdir /home/nonroot \
        --config.env PATH=/usr/local/bin:/usr/bin:/bin --config.env SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt \
        --author "deploy/images/build.sh (Debian: $(cd "$tmp" && ls ./*.deb | sed 's|^\./||; s|_[a-z0-9]*\.deb$||' | tr '\n' ' '))" \
      >>"$CACHE/base.log" 2>&1 || { tail -n 20 "$CACHE/base.log" >&2; die "making the base image failed"; }
    touch "$dir/done"
  fi
  rm -rf "$tmp"
  # Into buildah's storage under a name of its own (buildah 1.28 refuses a FROM or a pull of an
  # oci: path with a dot in it, like ~/.cache).
  skopeo copy -q "oci:$dir/oci:base" "containers-storage:[vfs@$CACHE/storage+$CACHE/run]localhost/sluice-base:$key" \
    >>"$CACHE/base.log" 2>&1 || { tail -n 5 "$CACHE/base.log" >&2; die "loading the base image into buildah's storage failed"; }
  echo "localhost/sluice-base:$key"
}

# The binaries, in a folder of their own (the build context of the prebuilt stage).
gather_binaries() { # context
  local context=$1 service extra
  if [[ -z $binaries ]]; then
    local args=() target
    for service in "${services[@]}"; do
      args+=(-p "${CARGO_PACKAGE[$service]}" --bin "${CARGO_BIN[$service]}")
      for extra in ${EXTRA_BIN[$service]:-}; do args+=(-p "$extra" --bin "$extra"); done
    done
    echo "building the binaries with cargo (--profile $profile)" >&2
    (cd "$REPO_ROOT" && cargo build --locked -q --profile "$( [[ $profile == debug ]] && echo dev || echo release)" "${args[@]}") \
      || die "cargo build failed"
    target=$(cd "$REPO_ROOT" && cargo metadata --locked --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')
    binaries="$target/$profile"
  fi
  for service in "${services[@]}"; do
    place "$binaries/${CARGO_BIN[$service]}" "$context/sluice-$service"
    for extra in ${EXTRA_BIN[$service]:-}; do place "$binaries/$extra" "$context/$extra"; done
  done
}

# One binary into the context, stripped of its debug sections when asked.
place() { # from to
  local from=$1 to=$2
  [[ -x $from ]] || die "no binary $from (build it, or give --binaries the folder cargo wrote it to)"
  if $strip; then
    objcopy --strip-debug "$from" "$to" || die "objcopy --strip-debug $from failed"
  else
    # A hard link where it can be one: debug binaries are over 100 MB.
    ln -f "$from" "$to" 2>/dev/null || cp "$from" "$to"
  fi
}

main() {
  mkdir -p "$CACHE" "$out"
  tools
  clean_storage
  local base service name archive size
  base=$(base_image)
  CONTEXT=$(mktemp -d "$CACHE/context.XXXXXX")
  trap 'rm -rf "$CONTEXT"' EXIT
  gather_binaries "$CONTEXT"
  for service in "${services[@]}"; do
    name="$registry/sluice-$service:$tag"
    bah bud --isolation chroot --runtime "$(command -v runc)" --layers=false --quiet \
      --build-arg RUNTIME="$base" --build-arg BINARIES=prebuilt --target "$service" \
      -f "$HERE/Dockerfile" -t "$name" "$CONTEXT" >"$CACHE/build-$service.log" 2>&1 \
      || { tail -n 20 "$CACHE/build-$service.log" >&2; die "building $name failed (log: $CACHE/build-$service.log)"; }
    archive="$out/sluice-$service-$tag.tar"
    rm -f "$archive"
    bah push --quiet "$name" "oci-archive:$archive.oci:$tag" >>"$CACHE/build-$service.log" 2>&1 \
      || die "exporting $name failed (log: $CACHE/build-$service.log)"
    python3 "$HERE/archive.py" "$archive.oci" "$name" "$archive" && rm -f "$archive.oci"
    size=$(python3 "$HERE/archive.py" --size "$archive")
    if [[ -n $push ]]; then
      skopeo copy -q --dest-tls-verify="$push_tls" "oci-archive:$archive" "docker://$push/sluice-$service:$tag" \
        >>"$CACHE/build-$service.log" 2>&1 || die "pushing $name to $push failed (log: $CACHE/build-$service.log)"
    fi
    printf '%-44s %8s  %s%s\n' "$name" "$size" "$archive" "${push:+  pushed to $push/sluice-$service:$tag}"
  done
}

main
