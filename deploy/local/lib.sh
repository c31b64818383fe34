# shellcheck shell=bash
# Helpers for deploy/local/stack.sh (sourced, not run). They read the globals that
# stack.sh sets: HERE, STACK_DIR, SAVED_ENV, KAFKA_VERSION, KAFKA_HOME, REDIS_PORT.

log() { printf '%s\n' "$*"; }
warn() { printf 'stack: %s\n' "$*" >&2; }
die() { warn "error: $*"; exit 1; }

# Print the last lines of a log file to stderr, then fail.
die_with_log() { # message logfile
  if [[ -s $2 ]]; then
    warn "last lines of $2:"
    tail -n 25 "$2" | sed 's/^/    /' >&2
  fi
  die "$1"
}

# Settings saved by the last `up` of a stack dir fill in what the environment leaves
# unset; MISMATCH lists explicit settings that differ from the saved ones.
load_saved_settings() {
  local key value
  MISMATCH=""
  [[ -f $SAVED_ENV ]] || return 0
  while IFS='=' read -r key value; do
    [[ $key =~ ^SLUICE_[A-Z_]+$ ]] || continue
    if [[ -z ${!key:-} ]]; then
      printf -v "$key" '%s' "$value"
    elif [[ ${!key} != "$value" ]]; then
      MISMATCH+=" $key=$value"
    fi
  done <"$SAVED_ENV"
}

# A running stack keeps the settings it was started with; refuse to act on others.
refuse_changed_settings() {
  [[ -z $MISMATCH ]] || die "the stack in $STACK_DIR runs with$MISMATCH; run 'down' before changing that"
}

# Serialise up/down/topics of one stack dir (two `up`s at once would start two brokers).
lock_stack() {
  exec 9>"$STACK_DIR/.lock"
  flock -w 180 9 || die "another stack.sh is busy with $STACK_DIR"
}

# Is something listening on 127.0.0.1:PORT?
port_open() {
  # shellcheck disable=SC2016 # $0 is expanded by the inner bash
  timeout 2 bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$0"' "$1" 2>/dev/null
}

redis_ping() { [[ $(timeout 2 redis-cli -p "$REDIS_PORT" ping 2>/dev/null) == PONG ]]; }

# Fail early, and clearly, when another program holds one of our ports.
ensure_port_free() { # port variable-name
  port_open "$1" || return 0
  die "port $1 is already in use by $(port_owner "$1"), not by this stack ($STACK_DIR); choose another with $2"
}

wait_redis() {
  local deadline=$((SECONDS + 15))
  until redis_ping; do
    ((SECONDS < deadline)) || die_with_log "redis did not answer PING within 15 s" "$STACK_DIR/logs/redis.log"
    sleep 0.2
  done
}

# Best-effort description of who listens on a port, for error messages.
port_owner() {
  local users
  users=$(ss -ltnpH "sport = :$1" 2>/dev/null | grep -o 'users:.*' | head -n 1) || true
  printf '%s' "${users:-unknown process}"
}

# Does PID belong to this stack? Kafka: its command line names our server.properties.
# Redis: it is redis-server and its working directory is our redis dir (set by --dir).
# Both fail for a dead or zombie process and for a pid reused by something else.
is_ours() { # kafka|redis pid
  local comm="" cmd cwd
  read -r comm 2>/dev/null <"/proc/$2/comm" || return 1 # cheap filter before forking
  case $1 in
    kafka)
      [[ $comm == java ]] || return 1
      cmd=$(tr '\0' ' ' <"/proc/$2/cmdline" 2>/dev/null) || return 1
      [[ $cmd == *" kafka.Kafka $STACK_DIR/server.properties"* ]] ;;
    redis)
      [[ $comm == redis-server ]] || return 1
      cwd=$(readlink "/proc/$2/cwd" 2>/dev/null) || return 1
      [[ $cwd == "$STACK_DIR/redis" ]] ;;
  esac
}

# Print the pid of this stack's kafka|redis process; fail if there is none. The pid file
# is the fast path; /proc is scanned when it is missing or stale, so a lost pid file
# does not leave an orphan behind. A stale pid file is removed.
find_pid() {
  local kind=$1 file="$STACK_DIR/$1.pid" pid="" p
  [[ -f $file ]] && { read -r pid <"$file" || true; }
  if [[ $pid =~ ^[0-9]+$ ]] && is_ours "$kind" "$pid"; then
    echo "$pid"
    return 0
  fi
  rm -f "$file"
  for p in /proc/[0-9]*; do
    pid=${p#/proc/}
    if is_ours "$kind" "$pid"; then
      echo "$pid" >"$file"
      echo "$pid"
      return 0
    fi
  done
  return 1
}

# One line of `status`; fails unless the process exists and the probe succeeds.
show_status() { # name address probe-command...
  local name=$1 addr=$2 pid
  shift 2
  if ! pid=$(find_pid "$name"); then
    log "$name: stopped"
    return 1
  elif ! "$@"; then
    log "$name: not answering (pid $pid, $addr)"
    return 1
  fi
  log "$name: running (pid $pid, $addr)"
}

# SIGTERM, wait up to GRACE seconds, then SIGKILL. Returns once the process is gone.
stop_pid() { # name pid grace
  local name=$1 pid=$2 deadline=$((SECONDS + $3))
  kill -TERM "$pid" 2>/dev/null || return 0
  while is_ours "$name" "$pid"; do
    if ((SECONDS >= deadline)); then
      warn "$name (pid $pid) did not stop within $3 s; sending SIGKILL"
      kill -KILL "$pid" 2>/dev/null || true
      sleep 1
      is_ours "$name" "$pid" && die "$name (pid $pid) survived SIGKILL"
      return 0
    fi
    sleep 0.2
  done
}

# Install a Debian package when COMMAND is missing; name the package if that fails.
apt_install() { # command package
  command -v "$1" >/dev/null && return 0
  local pkg=$2 aptlog="$STACK_DIR/logs/apt-$2.log" guard="" rc=0
  [[ $EUID -eq 0 ]] || die "$1 is missing and installing Debian package '$pkg' needs root"
  command -v apt-get >/dev/null || die "$1 is missing and there is no apt-get to install '$pkg'"
  log "installing Debian package $pkg (log: $aptlog)"
  # Keep the package's own service from starting (and taking the default port):
  # a policy-rc.d that says "no" is Debian's switch for that.
  if [[ ! -e /usr/sbin/policy-rc.d ]]; then
    printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
    chmod 755 /usr/sbin/policy-rc.d
    guard=1
    trap 'rm -f /usr/sbin/policy-rc.d' EXIT # also when interrupted
  fi
  { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$pkg"; } \
    >"$aptlog" 2>&1 || rc=$?
  if [[ -n $guard ]]; then
    rm -f /usr/sbin/policy-rc.d
    trap - EXIT
  fi
  if ((rc != 0)) || ! command -v "$1" >/dev/null; then
    die_with_log "could not install Debian package '$pkg' (for $1)" "$aptlog"
  fi
}

# Download Kafka's jars once into the per-user cache, shared by all stacks and clones.
# The .complete marker is written last, so an interrupted download is redone.
ensure_kafka_libs() {
  [[ -f $KAFKA_HOME/.complete ]] && return 0
  apt_install java openjdk-17-jre-headless
  apt_install mvn maven
  mkdir -p "$(dirname "$KAFKA_HOME")"
  exec 8>"$KAFKA_HOME.lock"
  flock -w 900 8 || die "timed out waiting for another download of Kafka $KAFKA_VERSION"
  if [[ ! -f $KAFKA_HOME/.complete ]]; then
    rm -rf "$KAFKA_HOME"
    mkdir -p "$KAFKA_HOME"
    log "downloading Kafka $KAFKA_VERSION jars with Maven into $KAFKA_HOME (once)"
    mvn -B -q -Dstyle.color=never -f "$HERE/kafka/pom.xml" -Dkafka.version="$KAFKA_VERSION" \
      dependency:copy-dependencies -DincludeScope=runtime \
      -DoutputDirectory="$KAFKA_HOME/libs" >"$KAFKA_HOME/mvn.log" 2>&1 ||
      die_with_log "could not download org.apache.kafka:kafka_2.13:$KAFKA_VERSION and kafka-tools from Maven Central" "$KAFKA_HOME/mvn.log"
    [[ -f $KAFKA_HOME/libs/kafka_2.13-$KAFKA_VERSION.jar ]] ||
      die "Maven finished but kafka_2.13-$KAFKA_VERSION.jar is missing in $KAFKA_HOME/libs"
    date -u +%FT%TZ >"$KAFKA_HOME/.complete"
  fi
  exec 8>&-
}

# Run a Kafka command-line tool: small heap, fast start-up, logs to the stack's tools.log,
# killed after TOOL_TIMEOUT seconds (default 60).
kafka_tool() { # main-class args...
  local main=$1
  shift
  timeout "${TOOL_TIMEOUT:-60}" java -Xmx256m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 \
    -Dlog4j2.configurationFile="$HERE/kafka/log4j2.xml" -Dsluice.log.level=warn \
    -Dsluice.log.file="$STACK_DIR/logs/tools.log" \
    -cp "$KAFKA_HOME/libs/*" "$main" "$@"
}

# A random KRaft cluster id: 16 random bytes, base64url without padding (22 chars),
# never starting with '-' (it would read as a command-line flag).
new_cluster_id() {
  local id
  while :; do
    id=$(head -c 16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=\n')
    [[ $id != -* ]] && break
  done
  echo "$id"
}
