# shellcheck shell=bash
# cluster.sh's image registry (sourced, not run): Debian's docker-registry (the CNCF
# distribution registry) on 127.0.0.1, its data in the cluster dir, that the node's containerd
# pulls from over plain HTTP as a production node pulls from its registry. Images reach it with
# `deploy/images/build.sh --push "$SLUICE_REGISTRY" --push-insecure` (skopeo).

REGISTRY_PORT=$((PORT + 13))
REGISTRY="127.0.0.1:$REGISTRY_PORT"

registry_up() {
  command -v docker-registry >/dev/null || "$HERE/tools.sh" apt docker-registry >"$DIR/logs/apt-registry.log" 2>&1 \
    || fail_with_log "installing Debian's docker-registry failed" apt-registry
  mkdir -p "$DIR/registry/data"
  cat >"$DIR/registry/config.yml" <<EOF
version: 0.1
log: {level: warn}
storage:
  filesystem: {rootdirectory: $DIR/registry/data}
  delete: {enabled: true}
http:
  addr: $REGISTRY
  headers: {X-Content-Type-Options: [nosniff]}
EOF
  start docker-registry serve "$DIR/registry/config.yml"
  wait_until "the registry on $REGISTRY" 30 docker-registry registry_ready
}

registry_ready() {
  "$PYTHON" -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=2)' "http://$REGISTRY/v2/"
}

# containerd's hosts.toml for the registry: plain HTTP, pulls and resolves.
registry_hosts() { # certs.d dir
  mkdir -p "$1/$REGISTRY"
  cat >"$1/$REGISTRY/hosts.toml" <<EOF
server = "http://$REGISTRY"
[host."http://$REGISTRY"]
  capabilities = ["pull", "resolve"]
EOF
}
