# shellcheck shell=bash
# cluster.sh's record of the machine (sourced, not run): what a node changes outside its own
# folder, written down before its first change and put back when it stops. The kubelet sets
# vm.overcommit_memory, kernel.panic, kernel.panic_on_oops and the root keyring limits for the
# whole machine; the CNI bridge turns on IPv4 forwarding; the kubelet and kube-proxy add
# iptables chains (and, through iptables-nft, nf_tables tables), cgroups named kubepods, a bind
# mount of the kubelet's root onto itself and a few fixed paths whatever their flags say.
#
# The record is machine-wide (MACHINE_DIR, /run/sluice-node): one node per machine, whichever
# cluster dir it belongs to. A node killed before its `down` leaves the record behind, and the
# next `up` (or `down`) puts the machine back from it before anything else.

MACHINE_DIR=${SLUICE_NODE_MACHINE_DIR:-/run/sluice-node}
# The kernel settings a node may change; each is put back to its recorded value.
MACHINE_SYSCTLS='^(vm\.overcommit_memory|kernel\.panic(_on_oops)?|kernel\.keys\.root_max(keys|bytes)|net\.ipv4\.ip_forward|net\.ipv4\.conf\.[^.]+\.(forwarding|route_localnet)|net\.ipv6\.conf\.[^.]+\.forwarding|net\.netfilter\.nf_conntrack_(max|tcp_timeout_established|tcp_timeout_close_wait)|net\.bridge\.bridge-nf-call-(iptables|ip6tables|arptables)) '
# Values that change on their own (counters, randomness) or belong to links that come and go.
MACHINE_VOLATILE='^(fs\.(dentry-state|file-nr|inode-nr|inode-state|aio-nr|quota\.[^ ]*)|kernel\.(ns_last_pid|random\.[^ ]*|pty\.nr|tainted)|net\.netfilter\.nf_conntrack_count|net\.ipv[46]\.(conf|neigh)\.(cni0|veth[^.]*)\.[^ ]*) '
# Paths the kubelet, containerd and the CNI plugins create whatever their flags say.
MACHINE_PATHS=(/var/lib/kubelet /var/log/containers /var/log/pods /var/lib/cni /run/containerd /opt/containerd
  /var/lib/containerd /run/netns /etc/cni /opt/cni /run/kubernetes /etc/kubernetes /usr/libexec/kubernetes)
MACHINE_IPTABLES=(iptables ip6tables)
MACHINE_BRIDGE=cni0

# Everything a node could leave changed, in a stable text form: two snapshots differ only
# where the machine does. `cluster.sh machine` prints it; the kubernetes test compares the
# one before `up` with the one after `down`.
machine_snapshot() {
  local path h cmd
  echo "# sysctl"
  sysctl -a 2>/dev/null | grep -vE "$MACHINE_VOLATILE" | sort
  echo "# mounts"
  awk '{print $2, $3}' /proc/mounts | sort
  echo "# links"
  ip -o link show | awk -F': ' '{sub(/@.*/, "", $2); print $2}' | sort
  for cmd in "${MACHINE_IPTABLES[@]}"; do
    echo "# $cmd"
    # Rules and chains per table, without the packet counters.
    if command -v "$cmd-save" >/dev/null; then "$cmd-save" 2>/dev/null | sed -E '/^#/d; s/ \[[0-9]+:[0-9]+\]$//'; fi
  done
  echo "# nft tables"
  if command -v nft >/dev/null; then nft list tables 2>/dev/null | sort; fi
  echo "# cgroups"
  for h in /sys/fs/cgroup/*/; do
    [[ $h == */process_api/ ]] && continue
    find "$h" -mindepth 1 -maxdepth 2 -type d -not -path '*/process_api*' 2>/dev/null
  done | sort
  echo "# paths"
  for path in "${MACHINE_PATHS[@]}"; do if [[ -e $path ]]; then echo "$path"; fi; done
}

# Writes the record, unless one is there (then the machine is still as it was before the
# node that wrote it, or is put back from it first: see machine_reclaim).
machine_record() { # node_dir
  mkdir -p "$MACHINE_DIR"
  [[ -f $MACHINE_DIR/sysctl ]] && return 0
  local path cmd
  sysctl -a 2>/dev/null | grep -E "$MACHINE_SYSCTLS" >"$MACHINE_DIR/sysctl.tmp"
  for path in "${MACHINE_PATHS[@]}"; do if [[ -e $path ]]; then echo "$path"; fi; done >"$MACHINE_DIR/paths"
  { command -v nft >/dev/null && nft list tables 2>/dev/null; } >"$MACHINE_DIR/nft-tables" || true
  for cmd in "${MACHINE_IPTABLES[@]}"; do
    { command -v "$cmd-save" >/dev/null && "$cmd-save" 2>/dev/null | grep -E '^:' | awk '{print $1}'; } >"$MACHINE_DIR/$cmd-chains" || true
  done
  echo "$1" >"$MACHINE_DIR/owner"
  mv "$MACHINE_DIR/sysctl.tmp" "$MACHINE_DIR/sysctl"
}

# Kills what is left in the kubelet's cgroups (the containers of a node killed hard) and
# removes those cgroups bottom-up, in every hierarchy; never the workplace's own.
machine_cgroups() {
  local h dir pid
  for h in /sys/fs/cgroup/*/; do
    [[ -d $h/kubepods && $h != */process_api/ ]] || continue
    while read -r dir; do
      while read -r pid; do kill -KILL "$pid" 2>/dev/null || true; done <"$dir/cgroup.procs" 2>/dev/null
    done < <(find "$h/kubepods" -type d 2>/dev/null)
  done
  for h in /sys/fs/cgroup/*/; do
    [[ -d $h/kubepods && $h != */process_api/ ]] || continue
    local tries
    for tries in 1 2 3 4 5 6 7 8 9 10; do
      find "$h/kubepods" -depth -type d -exec rmdir {} + 2>/dev/null || true
      [[ -d $h/kubepods ]] || break
      sleep 0.3
    done
    [[ -d $h/kubepods ]] && echo "machine: could not remove ${h}kubepods (processes left in it?)" >&2
  done
  return 0
}

# Removes the KUBE-*, CNI-* and SLUICE-* chains (and the rules that jump to them) that were not there
# at the record, then the nf_tables tables iptables-nft made for them.
machine_iptables() {
  local cmd table chain
  for cmd in "${MACHINE_IPTABLES[@]}"; do
    command -v "$cmd-save" >/dev/null || continue
    for table in filter nat mangle raw; do
      local rules script="" chains=()
      rules=$("$cmd-save" -t "$table" 2>/dev/null) || continue
      while read -r chain; do
        grep -qxF ":$chain" "$MACHINE_DIR/$cmd-chains" 2>/dev/null || chains+=("$chain")
      done < <(grep -oE '^:(KUBE|CNI|SLUICE)-[^ ]+' <<<"$rules" | cut -c2-)
      ((${#chains[@]})) || continue
      for chain in "${chains[@]}"; do
        script+=$(grep -E "^-A [^ ]+ .*-j $chain( |$)" <<<"$rules" | sed 's/^-A /-D /' || true)$'\n'
      done
      for chain in "${chains[@]}"; do script+="-F $chain"$'\n'; done
      for chain in "${chains[@]}"; do script+="-X $chain"$'\n'; done
      printf '*%s\n%s\nCOMMIT\n' "$table" "$(grep -v '^$' <<<"$script")" | "$cmd-restore" --noflush \
        || echo "machine: could not remove $cmd's ${chains[*]} in $table" >&2
    done
  done
  command -v nft >/dev/null || return 0
  local line
  while read -r line; do
    [[ -n $line ]] || continue
    grep -qxF "$line" "$MACHINE_DIR/nft-tables" 2>/dev/null && continue
    # Only the tables iptables-nft makes (ip/ip6 filter, nat…) and kube-proxy's.
    [[ $line =~ ^table\ (ip|ip6)\ (filter|nat|mangle|raw|kube-proxy)$ ]] || continue
    nft delete table "${line#table }" || echo "machine: could not delete nf_tables' $line" >&2
  done < <(nft list tables 2>/dev/null)
  return 0
}

machine_sysctls() {
  local key value
  # ip_forward first: writing it resets every interface's forwarding, which follows.
  while read -r key _ value; do
    [[ $key == net.ipv4.ip_forward ]] && sysctl -qw "$key=$value" >/dev/null
  done <"$MACHINE_DIR/sysctl"
  while read -r key _ value; do
    [[ -e /proc/sys/${key//.//} ]] || continue # a link's setting; the link is gone
    [[ $(sysctl -n "$key" 2>/dev/null) == "$value" ]] && continue
    sysctl -qw "$key=$value" >/dev/null || echo "machine: could not put back $key=$value" >&2
  done <"$MACHINE_DIR/sysctl"
  return 0
}

# Puts the machine back as the record says, and removes the record. NODE_DIR is the folder of
# the node that wrote it (its mounts and processes).
machine_restore() { # node_dir
  [[ -f $MACHINE_DIR/sysctl ]] || return 0
  local node_dir=$1 mnt path
  # Mounts under the node's folder (the kubelet's root bound onto itself, pod volumes, the
  # snapshotter's overlays, network namespaces), deepest first.
  while read -r mnt; do
    umount "$mnt" 2>/dev/null || umount -l "$mnt" 2>/dev/null || echo "machine: could not unmount $mnt" >&2
  done < <(awk -v d="$node_dir" '$2 == d || index($2, d "/") == 1 {print $2}' /proc/mounts | sort -r)
  machine_cgroups
  # The bridge's veths go with the pods' network namespaces; any left, then the bridge.
  while read -r mnt; do ip link del "$mnt" 2>/dev/null || true; done \
    < <(ip -o link show master "$MACHINE_BRIDGE" 2>/dev/null | awk -F': ' '{sub(/@.*/, "", $2); print $2}')
  ip link del "$MACHINE_BRIDGE" 2>/dev/null || true
  machine_iptables
  for path in "${MACHINE_PATHS[@]}"; do
    if [[ -e $path ]] && ! grep -qxF "$path" "$MACHINE_DIR/paths"; then rm -rf "$path"; fi
  done
  machine_sysctls
  rm -rf "$MACHINE_DIR"
}
