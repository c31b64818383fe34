#!/usr/bin/env bash
# shellcheck disable=SC2015 # "a && b || die" is meant: die when either fails
# Local Sluice stack: a real single-node Apache Kafka 4.x (KRaft) and a real Redis, both
# bound to 127.0.0.1, for tests and the demo. No Docker; installs what is missing
# (Debian's redis-server, Kafka's jars from Maven Central) on first use.
#
# Usage: deploy/local/stack.sh up|down|status|topics|restart kafka|redis|redis-wipe|redis-restore|env
#   up      start Kafka and Redis (if not running), wait until both answer, create topics
#   down    stop both (Kafka gets up to 30 s for a clean shutdown), leave nothing running
#   status  running/stopped for each; exit 0 if both run, 3 otherwise
#   topics  create the project topics if they do not exist (Kafka must be up)
#   restart kafka|redis  stop one cleanly and start it again on its data (faults for tests)
#   redis-wipe     restart Redis on an empty data dir (the old one kept aside): a store that
#                  lost everything, as after a failover to an empty replica
#   redis-restore  restart Redis on the data dir redis-wipe kept aside
#   env     print export lines: eval "$(deploy/local/stack.sh env)"
#
# Configuration (environment; for an existing stack dir, values saved by its last `up`
# fill in whatever is unset, so `down`/`status` need only SLUICE_STACK_DIR):
#   SLUICE_STACK_DIR              <repo>/.stack/default  data, logs, pid files, config
#   SLUICE_KAFKA_PORT             9092                    client listener (PLAINTEXT)
#   SLUICE_KAFKA_CONTROLLER_PORT  kafka port + 1          KRaft controller listener
#   SLUICE_KAFKA_SECURE_PORT      kafka port + 3          SASL_SSL listener: TLS (a self-signed
#                                                         certificate for 127.0.0.1, tls/ca.crt)
#                                                         and SCRAM-SHA-512/256 (user sluice)
#   SLUICE_KAFKA_JMX_PORT         kafka port + 7          the broker's JMX (127.0.0.1, no auth: its
#                                                         request metrics, read by the benchmarks)
#   SLUICE_STACK_POD_ADDRESS      unset                   an address of this machine that pods on
#                                                         its node reach (cluster.sh: the node's):
#                                                         Kafka also listens and advertises
#                                                         there, PLAINTEXT on kafka port + 6 and
#                                                         SASL_SSL on + 8 (its certificate then
#                                                         names that address too),
#                                                         Redis also binds there (protected mode
#                                                         off: no password, a test stack)
#   SLUICE_REDIS_PORT             6379
#   SLUICE_REDIS_TLS_PORT         redis port + 1          the same Redis over TLS (the stack's own CA,
#                                                         tls/redis/; a client certificate required)
#                                                         for the ACL user sluice only (keys and
#                                                         channels under tls-*), as a managed
#                                                         Redis is set up
#   SLUICE_KAFKA_HEAP             1g                      broker -Xmx/-Xms (Kafka's own default; at
#                                                         512m the stress harness's broker paused
#                                                         for GC in 35-37 s of a 65 s loop, up to
#                                                         30 ms each: results/README.md, issue 31)
#   SLUICE_KAFKA_VERSION          4.1.1                   org.apache.kafka:kafka_2.13 (3.9.x or 4.x)
#   SLUICE_TOPIC_PARTITIONS       12                      chain.transactions, dex.swaps
#   SLUICE_KAFKA_START_TIMEOUT    90                      seconds to wait for the broker
# Stacks with different dirs and ports run side by side, e.g. for a test:
#   SLUICE_STACK_DIR=/tmp/x SLUICE_KAFKA_PORT=19092 SLUICE_REDIS_PORT=16379 stack.sh up
# Kafka's jars are cached per user in ${XDG_CACHE_HOME:-~/.cache}/sluice/kafka-<version>/.
# Logs: $SLUICE_STACK_DIR/logs/{kafka.log,kafka.out,topics.out,tools.log,redis.log}.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_ROOT=$(cd "$HERE/../.." && pwd)
# shellcheck source=deploy/local/lib.sh
source "$HERE/lib.sh"

usage() {
  sed -n '/^# Usage:/,/^#   env/s/^# \{0,1\}//p' "${BASH_SOURCE[0]}" >&2
  exit 2
}

STACK_DIR=$(realpath -m "${SLUICE_STACK_DIR:-$REPO_ROOT/.stack/default}")
SAVED_ENV="$STACK_DIR/stack.env"
load_saved_settings
KAFKA_PORT=${SLUICE_KAFKA_PORT:-9092}
CONTROLLER_PORT=${SLUICE_KAFKA_CONTROLLER_PORT:-$((KAFKA_PORT + 1))}
# +3, not +2: 9094 is the ingest's admin port.
SECURE_PORT=${SLUICE_KAFKA_SECURE_PORT:-$((KAFKA_PORT + 3))}
# +7: clear of the services' admin ports (9090, 9094, 9096 locally).
JMX_PORT=${SLUICE_KAFKA_JMX_PORT:-$((KAFKA_PORT + 7))}
# +6: the listener for pods (SLUICE_STACK_POD_ADDRESS), clear of the admin ports too.
POD_ADDRESS=${SLUICE_STACK_POD_ADDRESS:-}
POD_PORT=$((KAFKA_PORT + 6)) POD_SECURE_PORT=$((KAFKA_PORT + 8))
# The SASL_SSL listener's one user, for tests of the TLS and SCRAM paths (not a secret:
# the listener is on 127.0.0.1 and the stack is for tests and demos).
SASL_USER=sluice
SASL_PASSWORD=sluice-stack-secret
TLS_PASSWORD=sluice-stack-tls
REDIS_PORT=${SLUICE_REDIS_PORT:-6379}
REDIS_TLS_PORT=${SLUICE_REDIS_TLS_PORT:-$((REDIS_PORT + 1))}
# The ACL user of Redis's TLS port (not a secret, as the SASL user above). It may touch only
# keys and channels under `tls-`, the prefix of the tests that use it (their names start with
# it), so a service that strays from its prefix fails them, as it would on a managed Redis.
REDIS_ACL_USER=sluice
REDIS_ACL_PASSWORD=sluice-stack-redis
REDIS_ACL_PATTERN='tls-*'
KAFKA_HEAP=${SLUICE_KAFKA_HEAP:-1g}
KAFKA_VERSION=${SLUICE_KAFKA_VERSION:-4.1.1}
PARTITIONS=${SLUICE_TOPIC_PARTITIONS:-12}
START_TIMEOUT=${SLUICE_KAFKA_START_TIMEOUT:-90}
DEADLINE=$((SECONDS + START_TIMEOUT)) # for Kafka's start-up; set again by `up`
KAFKA_HOME="${XDG_CACHE_HOME:-${HOME:?HOME is not set}/.cache}/sluice/kafka-$KAFKA_VERSION"
BOOTSTRAP="127.0.0.1:$KAFKA_PORT"

check_config() {
  local bad=0 v
  for v in KAFKA_PORT CONTROLLER_PORT SECURE_PORT JMX_PORT REDIS_PORT REDIS_TLS_PORT; do
    [[ ${!v} =~ ^[1-9][0-9]{0,4}$ ]] && ((${!v} < 65536)) || { warn "SLUICE_${v/JMX_PORT/KAFKA_JMX_PORT}=${!v} is not a port"; bad=1; }
  done
  [[ $(printf '%s\n' "$KAFKA_PORT" "$CONTROLLER_PORT" "$SECURE_PORT" "$JMX_PORT" "$REDIS_PORT" "$REDIS_TLS_PORT" | sort -u | wc -l) == 6 ]] ||
    { warn "the six ports (Kafka, controller, SASL_SSL, JMX, Redis, Redis TLS) must differ"; bad=1; }
  [[ $KAFKA_HEAP =~ ^[0-9]+[kKmMgG]?$ ]] || { warn "SLUICE_KAFKA_HEAP=$KAFKA_HEAP is not a JVM size like 512m"; bad=1; }
  [[ $KAFKA_VERSION =~ ^(3\.9|4\.[0-9]+)\.[0-9]+$ ]] || { warn "SLUICE_KAFKA_VERSION=$KAFKA_VERSION is not a 3.9.x or 4.x.y version"; bad=1; }
  [[ -z $POD_ADDRESS || $POD_ADDRESS =~ ^[0-9]+\.[0-9]+\.[0-9]+\.[0-9]+$ ]] || { warn "SLUICE_STACK_POD_ADDRESS=$POD_ADDRESS is not an IPv4 address"; bad=1; }
  [[ $PARTITIONS =~ ^[1-9][0-9]*$ ]] || { warn "SLUICE_TOPIC_PARTITIONS=$PARTITIONS is not a positive number"; bad=1; }
  [[ $START_TIMEOUT =~ ^[1-9][0-9]*$ ]] || { warn "SLUICE_KAFKA_START_TIMEOUT=$START_TIMEOUT is not a number of seconds"; bad=1; }
  ((bad == 0)) || exit 2
}

print_addresses() {
  log "kafka: $BOOTSTRAP (SASL_SSL: 127.0.0.1:$SECURE_PORT, SCRAM user $SASL_USER, CA $STACK_DIR/tls/ca.crt)"
  log "redis: redis://127.0.0.1:$REDIS_PORT (TLS: rediss://127.0.0.1:$REDIS_TLS_PORT, ACL user $REDIS_ACL_USER, CA $STACK_DIR/tls/redis/ca.crt)"
}

write_server_properties() {
  cat >"$STACK_DIR/server.properties" <<EOF
# Written by deploy/local/stack.sh on every start; edits are overwritten.
process.roles=broker,controller
node.id=1
listeners=PLAINTEXT://127.0.0.1:$KAFKA_PORT,CONTROLLER://127.0.0.1:$CONTROLLER_PORT,SASL_SSL://127.0.0.1:$SECURE_PORT${POD_ADDRESS:+,PODS://$POD_ADDRESS:$POD_PORT,PODS_SECURE://$POD_ADDRESS:$POD_SECURE_PORT}
advertised.listeners=PLAINTEXT://127.0.0.1:$KAFKA_PORT,SASL_SSL://127.0.0.1:$SECURE_PORT${POD_ADDRESS:+,PODS://$POD_ADDRESS:$POD_PORT,PODS_SECURE://$POD_ADDRESS:$POD_SECURE_PORT}
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,SASL_SSL:SASL_SSL,PODS:PLAINTEXT,PODS_SECURE:SASL_SSL
# The SASL_SSL listener: TLS with the stack's self-signed certificate, SCRAM users kept in
# the cluster metadata (added at format time, or by ensure_scram_user).
ssl.keystore.type=PKCS12
ssl.keystore.location=$STACK_DIR/tls/broker.p12
ssl.keystore.password=$TLS_PASSWORD
ssl.key.password=$TLS_PASSWORD
sasl.enabled.mechanisms=SCRAM-SHA-512,SCRAM-SHA-256
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.pods_secure.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.pods_secure.scram-sha-256.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
inter.broker.listener.name=PLAINTEXT
controller.listener.names=CONTROLLER
# Static voter set: unlike --standalone it keeps no endpoint in the formatted log, so
# the ports may change between runs of the same stack dir.
controller.quorum.voters=1@127.0.0.1:$CONTROLLER_PORT
log.dirs=$STACK_DIR/kafka-data
num.network.threads=2
num.io.threads=4
num.partitions=1
default.replication.factor=1
min.insync.replicas=1
offsets.topic.replication.factor=1
offsets.topic.num.partitions=12
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=12
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
auto.create.topics.enable=false
log.retention.hours=24
log.retention.bytes=1073741824
log.segment.bytes=67108864
log.retention.check.interval.ms=60000
# A deleted topic's files go 1 s after the deletion, not 60 s (Kafka's default): the stress
# harness deletes each phase's topics when it ends, and their removal a minute later fell
# inside a later phase's measurement (27 logs in one second of a headline loop).
log.segment.delete.delay.ms=1000
EOF
}

# The controller port is saved only when given; otherwise it follows the Kafka port.
save_config() {
  printf '%s\n' "SLUICE_KAFKA_PORT=$KAFKA_PORT" "SLUICE_REDIS_PORT=$REDIS_PORT" \
    "SLUICE_KAFKA_HEAP=$KAFKA_HEAP" "SLUICE_KAFKA_VERSION=$KAFKA_VERSION" \
    "SLUICE_TOPIC_PARTITIONS=$PARTITIONS" ${POD_ADDRESS:+"SLUICE_STACK_POD_ADDRESS=$POD_ADDRESS"} \
    ${SLUICE_KAFKA_CONTROLLER_PORT:+"SLUICE_KAFKA_CONTROLLER_PORT=$CONTROLLER_PORT"} \
    ${SLUICE_KAFKA_SECURE_PORT:+"SLUICE_KAFKA_SECURE_PORT=$SECURE_PORT"} \
    ${SLUICE_KAFKA_JMX_PORT:+"SLUICE_KAFKA_JMX_PORT=$JMX_PORT"} \
    ${SLUICE_REDIS_TLS_PORT:+"SLUICE_REDIS_TLS_PORT=$REDIS_TLS_PORT"} >"$SAVED_ENV"
}

# Redis as docs/deploying.md ("The Redis Sluice needs") tells users to run theirs: every write in
# the append-only file, fsynced each second (a crash of Redis loses nothing, one of the
# machine at most a second), no snapshots, and no eviction (an evicted key is state lost).
# Its TLS port serves the stack's ACL user only (`default` has no password, so there it is
# refused: the TLS port is where the services' ACL and TLS settings are tested).
start_redis() {
  ensure_redis_tls
  log "starting redis on 127.0.0.1${POD_ADDRESS:+ and $POD_ADDRESS}:$REDIS_PORT (TLS: $REDIS_TLS_PORT)"
  local tls=$STACK_DIR/tls/redis
  # A second address is not loopback: protected mode would refuse it without a password.
  redis-server --port "$REDIS_PORT" --bind 127.0.0.1 ${POD_ADDRESS:+"$POD_ADDRESS"} --save "" \
    ${POD_ADDRESS:+--protected-mode no} \
    --tls-port "$REDIS_TLS_PORT" --tls-cert-file "$tls/server.crt" --tls-key-file "$tls/server.key" \
    --tls-ca-cert-file "$tls/ca.crt" --tls-auth-clients yes \
    --user "$REDIS_ACL_USER" on ">$REDIS_ACL_PASSWORD" "~$REDIS_ACL_PATTERN" "&$REDIS_ACL_PATTERN" "+@all" \
    --appendonly yes --appendfsync everysec --maxmemory-policy noeviction \
    --daemonize yes --pidfile "$STACK_DIR/redis.pid" \
    --logfile "$STACK_DIR/logs/redis.log" --dir "$STACK_DIR/redis" 8>&- 9>&- ||
    die_with_log "redis-server failed to start" "$STACK_DIR/logs/redis.log"
}

# The broker's TLS key and self-signed certificate (for 127.0.0.1 and localhost), made once
# per stack dir; tls/ca.crt is what clients trust.
ensure_tls() {
  local san="ip:127.0.0.1,dns:localhost${POD_ADDRESS:+,ip:$POD_ADDRESS}"
  [[ -f $STACK_DIR/tls/broker.p12 && -f $STACK_DIR/tls/ca.crt && $(cat "$STACK_DIR/tls/san" 2>/dev/null) == "$san" ]] && return 0
  command -v keytool >/dev/null || die "keytool is missing (it comes with Java): the SASL_SSL listener needs a certificate"
  rm -rf "$STACK_DIR/tls" && mkdir -p "$STACK_DIR/tls"
  { keytool -genkeypair -alias broker -keyalg RSA -keysize 2048 -validity 3650 -dname CN=localhost \
      -ext "SAN=$san" -storetype PKCS12 -keystore "$STACK_DIR/tls/broker.p12" \
      -storepass "$TLS_PASSWORD" -keypass "$TLS_PASSWORD" &&
    keytool -exportcert -rfc -alias broker -keystore "$STACK_DIR/tls/broker.p12" -storepass "$TLS_PASSWORD" \
      -file "$STACK_DIR/tls/ca.crt" && echo "$san" >"$STACK_DIR/tls/san"; } >>"$STACK_DIR/logs/tools.log" 2>&1 ||
    die_with_log "making the broker's TLS certificate failed" "$STACK_DIR/logs/tools.log"
}

# Redis's TLS port: a CA of the stack's own, the server's certificate (127.0.0.1, localhost
# and the pod address) and a client certificate, EC keys in PKCS#8 PEM, made once per stack dir.
ensure_redis_tls() {
  local dir=$STACK_DIR/tls/redis san="IP:127.0.0.1,DNS:localhost${POD_ADDRESS:+,IP:$POD_ADDRESS}" who
  [[ -f $dir/client.key && $(cat "$dir/san" 2>/dev/null) == "$san" ]] && return 0
  command -v openssl >/dev/null || apt_install openssl openssl
  rm -rf "$dir" && mkdir -p "$dir"
  (openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 3650 \
      -subj /CN=sluice-stack-redis-ca -keyout "$dir/ca.key" -out "$dir/ca.crt" &&
    for who in server client; do
      openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj "/CN=sluice-stack-redis-$who" \
        -keyout "$dir/$who.key" -out "$dir/$who.csr" &&
        openssl x509 -req -in "$dir/$who.csr" -CA "$dir/ca.crt" -CAkey "$dir/ca.key" -CAcreateserial -days 3650 \
          -out "$dir/$who.crt" -extfile <(printf 'subjectAltName=%s\nextendedKeyUsage=%s\n' "$san" \
          "$([[ $who == server ]] && echo serverAuth || echo clientAuth)") || exit 1
    done && echo "$san" >"$dir/san") >>"$STACK_DIR/logs/tools.log" 2>&1 ||
    die_with_log "making Redis's TLS certificates failed" "$STACK_DIR/logs/tools.log"
}

SCRAM_MARK=kafka-data/.sluice-scram-user
start_kafka() {
  write_server_properties
  ensure_tls
  if [[ ! -f $STACK_DIR/kafka-data/meta.properties ]]; then
    log "formatting Kafka storage in $STACK_DIR/kafka-data"
    rm -rf "$STACK_DIR/kafka-data"
    kafka_tool kafka.tools.StorageTool format --config "$STACK_DIR/server.properties" \
      --cluster-id "$(new_cluster_id)" \
      --add-scram "SCRAM-SHA-512=[name=$SASL_USER,password=$SASL_PASSWORD]" \
      --add-scram "SCRAM-SHA-256=[name=$SASL_USER,password=$SASL_PASSWORD]" >>"$STACK_DIR/logs/kafka.out" 2>&1 ||
      die_with_log "formatting Kafka storage failed" "$STACK_DIR/logs/kafka.out"
    touch "$STACK_DIR/$SCRAM_MARK"
  fi
  log "starting kafka $KAFKA_VERSION on $BOOTSTRAP (controller 127.0.0.1:$CONTROLLER_PORT)"
  # setsid: own session, no terminal, so closing the shell or Ctrl-C does not reach it.
  # The GC log (pauses with their UTC time) is what the stress benchmark names a stall by.
  (exec setsid java -Xmx"$KAFKA_HEAP" -Xms"$KAFKA_HEAP" -XX:+UseG1GC -XX:MaxGCPauseMillis=20 \
    -Xlog:gc:file="$STACK_DIR/logs/kafka-gc.log":utctime:filecount=2,filesize=20m \
    -XX:InitiatingHeapOccupancyPercent=35 -XX:+ExplicitGCInvokesConcurrent \
    -XX:MaxDirectMemorySize=256m -Djava.awt.headless=true \
    -Dcom.sun.management.jmxremote.port="$JMX_PORT" -Dcom.sun.management.jmxremote.rmi.port="$JMX_PORT" \
    -Dcom.sun.management.jmxremote.host=127.0.0.1 -Djava.rmi.server.hostname=127.0.0.1 \
    -Dcom.sun.management.jmxremote.authenticate=false -Dcom.sun.management.jmxremote.ssl=false \
    -Dlog4j2.configurationFile="$HERE/kafka/log4j2.xml" -Dsluice.log.level=info \
    -Dsluice.log.file="$STACK_DIR/logs/kafka.log" -Dkafka.logs.dir="$STACK_DIR/logs" \
    -cp "$KAFKA_HOME/libs/*" kafka.Kafka "$STACK_DIR/server.properties" \
    </dev/null >>"$STACK_DIR/logs/kafka.out" 2>&1 8>&- 9>&-) & # no lock fds for the daemon
  echo $! >"$STACK_DIR/kafka.pid"
}

# A stack dir formatted before the SASL_SSL listener existed has no SCRAM user: add it once.
ensure_scram_user() {
  [[ -f $STACK_DIR/$SCRAM_MARK ]] && return 0
  log "adding the SCRAM user $SASL_USER (a stack formatted before the SASL_SSL listener)"
  local mechanism
  for mechanism in SCRAM-SHA-512 SCRAM-SHA-256; do
    kafka_tool kafka.admin.ConfigCommand --bootstrap-server "$BOOTSTRAP" --alter --entity-type users \
      --entity-name "$SASL_USER" --add-config "$mechanism=[password=$SASL_PASSWORD]" >>"$STACK_DIR/logs/tools.log" 2>&1 ||
      die_with_log "adding the SCRAM user failed" "$STACK_DIR/logs/tools.log"
  done
  touch "$STACK_DIR/$SCRAM_MARK"
}

# Poll the client port (it opens once the broker has started). The real metadata
# round-trip follows in create_topics, bounded by what is left of START_TIMEOUT.
wait_kafka() {
  while ! port_open "$KAFKA_PORT"; do
    find_pid kafka >/dev/null ||
      die_with_log "kafka exited during start-up (see $STACK_DIR/logs/kafka.log)" "$STACK_DIR/logs/kafka.out"
    ((SECONDS < DEADLINE)) || die_with_log "kafka did not open $BOOTSTRAP within $START_TIMEOUT s" "$STACK_DIR/logs/kafka.log"
    sleep 0.3
  done
}

create_topics() {
  local spec name parts pids=() out="$STACK_DIR/logs/topics.out" failed=0 i=0
  local specs=("chain.transactions:$PARTITIONS" "dex.swaps:$PARTITIONS" "chain.transactions.dlq:3")
  : >"$out"
  # TopicCommand creates one topic per call; the three JVMs run in parallel.
  for spec in "${specs[@]}"; do
    name=${spec%%:*} parts=${spec##*:}
    TOOL_TIMEOUT=$((DEADLINE - SECONDS > 30 ? DEADLINE - SECONDS : 30)) \
      kafka_tool org.apache.kafka.tools.TopicCommand --bootstrap-server "$BOOTSTRAP" --create \
      --if-not-exists --topic "$name" --partitions "$parts" --replication-factor 1 \
      >"$out.$name" 2>&1 &
    pids+=($!)
  done
  for spec in "${specs[@]}"; do
    name=${spec%%:*}
    wait "${pids[i]}" || { warn "creating topic $name failed:"; sed 's/^/    /' "$out.$name" >&2; failed=1; }
    cat "$out.$name" >>"$out"
    rm -f "$out.$name"
    i=$((i + 1))
  done
  ((failed == 0)) || die_with_log "could not create all topics on $BOOTSTRAP" "$STACK_DIR/logs/kafka.log"
  log "topics: chain.transactions ($PARTITIONS partitions), dex.swaps ($PARTITIONS), chain.transactions.dlq (3)"
}

cmd_up() {
  mkdir -p "$STACK_DIR/logs" "$STACK_DIR/redis"
  lock_stack
  local kpid rpid
  kpid=$(find_pid kafka) || kpid=""
  rpid=$(find_pid redis) || rpid=""
  [[ -z $kpid$rpid ]] || refuse_changed_settings
  if [[ -n $kpid && -n $rpid ]] && port_open "$KAFKA_PORT" && redis_ping; then
    log "already running (kafka pid $kpid, redis pid $rpid, $STACK_DIR)"
    port_open "$SECURE_PORT" ||
      warn "this broker has no SASL_SSL listener on $SECURE_PORT (started by an older stack.sh): run 'down', then 'up'"
    port_open "$REDIS_TLS_PORT" ||
      warn "this Redis has no TLS port on $REDIS_TLS_PORT (started by an older stack.sh): run 'down', then 'up'"
    print_addresses
    return 0
  fi
  # Check every port before starting anything, so a conflict leaves nothing half-up.
  if [[ -z $kpid ]]; then
    ensure_port_free "$KAFKA_PORT" SLUICE_KAFKA_PORT
    ensure_port_free "$CONTROLLER_PORT" SLUICE_KAFKA_CONTROLLER_PORT
    ensure_port_free "$SECURE_PORT" SLUICE_KAFKA_SECURE_PORT
    [[ -z $POD_ADDRESS ]] || ensure_port_free "$POD_PORT" "SLUICE_KAFKA_PORT (+6, the listener for pods)"
    [[ -z $POD_ADDRESS ]] || ensure_port_free "$POD_SECURE_PORT" "SLUICE_KAFKA_PORT (+8, the SASL_SSL listener for pods)"
  fi
  [[ -n $rpid ]] || ensure_port_free "$REDIS_PORT" SLUICE_REDIS_PORT
  [[ -n $rpid ]] || ensure_port_free "$REDIS_TLS_PORT" SLUICE_REDIS_TLS_PORT
  save_config
  ensure_kafka_libs
  [[ -n $rpid ]] || apt_install redis-server redis-server
  DEADLINE=$((SECONDS + START_TIMEOUT)) # counts from here, not from the download
  # Kafka first: it takes longest, and Redis starts while it boots.
  [[ -n $kpid ]] || start_kafka
  [[ -n $rpid ]] || start_redis
  wait_redis
  wait_kafka
  create_topics
  ensure_scram_user
  print_addresses
}

cmd_down() {
  if [[ ! -d $STACK_DIR ]]; then
    log "nothing running ($STACK_DIR does not exist)"
    return 0
  fi
  lock_stack
  local pid stopped=0 port name
  # Kafka gets 30 s for a clean shutdown; Redis fsyncs its append-only file on SIGTERM.
  for name in kafka redis; do
    pid=$(find_pid "$name") || continue
    log "stopping $name (pid $pid)"
    stop_pid "$name" "$pid" "$([[ $name == kafka ]] && echo 30 || echo 10)"
    stopped=1
  done
  rm -f "$STACK_DIR/kafka.pid" "$STACK_DIR/redis.pid"
  # Verify by pid and by port: nothing of this stack is left; name whoever holds a port.
  if find_pid kafka >/dev/null || find_pid redis >/dev/null; then
    die "a process of this stack is still running"
  fi
  for port in "$KAFKA_PORT" "$CONTROLLER_PORT" "$SECURE_PORT" "$REDIS_PORT" "$REDIS_TLS_PORT"; do
    if port_open "$port"; then warn "port $port still answers, not from this stack: $(port_owner "$port")"; fi
  done
  if ((stopped)); then log "stopped ($STACK_DIR)"; else log "nothing running ($STACK_DIR)"; fi
}

# Stops one of the stack's two processes cleanly and starts it again, waiting until it
# answers; with `wipe`/`restore` (Redis), on an empty data dir or on the one kept aside.
cmd_restart() { # kafka|redis [wipe|restore]
  local name=$1 how=${2:-} pid
  [[ $name == kafka || $name == redis ]] || usage
  [[ -d $STACK_DIR ]] || die "no stack at $STACK_DIR: run 'up' first"
  lock_stack
  pid=$(find_pid "$name") || die "$name is not running ($STACK_DIR)"
  log "stopping $name (pid $pid)"
  stop_pid "$name" "$pid" "$([[ $name == kafka ]] && echo 30 || echo 10)"
  rm -f "$STACK_DIR/$name.pid"
  DEADLINE=$((SECONDS + START_TIMEOUT))
  if [[ $name == kafka ]]; then
    start_kafka
    wait_kafka
    return
  fi
  case $how in
    wipe)
      rm -rf "$STACK_DIR/redis.wiped" && mv "$STACK_DIR/redis" "$STACK_DIR/redis.wiped" &&
        mkdir -p "$STACK_DIR/redis" || die "moving Redis's data aside failed"
      log "Redis's data moved aside to $STACK_DIR/redis.wiped; starting it empty"
      ;;
    restore)
      [[ -d $STACK_DIR/redis.wiped ]] || die "nothing to restore: no $STACK_DIR/redis.wiped"
      rm -rf "$STACK_DIR/redis" && mv "$STACK_DIR/redis.wiped" "$STACK_DIR/redis" || die "restoring Redis's data failed"
      log "Redis's data restored from $STACK_DIR/redis.wiped"
      ;;
  esac
  start_redis
  wait_redis
}

cmd_status() {
  local rc=0
  show_status kafka "$BOOTSTRAP" port_open "$KAFKA_PORT" || rc=3
  show_status redis "redis://127.0.0.1:$REDIS_PORT" redis_ping || rc=3
  return "$rc"
}

cmd_topics() {
  [[ -d $STACK_DIR ]] || die "no stack at $STACK_DIR; run: $0 up"
  lock_stack
  refuse_changed_settings
  find_pid kafka >/dev/null && port_open "$KAFKA_PORT" ||
    die "kafka is not running for $STACK_DIR on $BOOTSTRAP; run: $0 up"
  ensure_kafka_libs
  create_topics
}

cmd_env() {
  log "export SLUICE_KAFKA_BROKERS=$BOOTSTRAP"
  [[ -z $POD_ADDRESS ]] || log "export SLUICE_KAFKA_POD_BROKERS=$POD_ADDRESS:$POD_PORT"
  [[ -z $POD_ADDRESS ]] || log "export SLUICE_KAFKA_POD_SECURE_BROKERS=$POD_ADDRESS:$POD_SECURE_PORT"
  [[ -z $POD_ADDRESS ]] || log "export SLUICE_REDIS_POD_URL=redis://$POD_ADDRESS:$REDIS_PORT"
  log "export SLUICE_REDIS_URL=redis://127.0.0.1:$REDIS_PORT"
  log "export SLUICE_REDIS_TLS_URL=rediss://127.0.0.1:$REDIS_TLS_PORT"
  [[ -z $POD_ADDRESS ]] || log "export SLUICE_REDIS_POD_TLS_URL=rediss://$POD_ADDRESS:$REDIS_TLS_PORT"
  log "export SLUICE_REDIS_TLS_DIR=$STACK_DIR/tls/redis"
  log "export SLUICE_REDIS_ACL_USERNAME=$REDIS_ACL_USER"
  log "export SLUICE_REDIS_ACL_PASSWORD=$REDIS_ACL_PASSWORD"
  log "export SLUICE_STACK_DIR=$STACK_DIR"
  log "export SLUICE_KAFKA_SECURE_BROKERS=127.0.0.1:$SECURE_PORT"
  log "export SLUICE_KAFKA_SECURE_CA=$STACK_DIR/tls/ca.crt"
  log "export SLUICE_KAFKA_SECURE_USERNAME=$SASL_USER"
  log "export SLUICE_KAFKA_SECURE_PASSWORD=$SASL_PASSWORD"
  log "export SLUICE_KAFKA_JMX=127.0.0.1:$JMX_PORT"
  log "export SLUICE_KAFKA_HOME=$KAFKA_HOME"
}

[[ $# -eq 1 || ($# -eq 2 && $1 == restart) ]] || usage
check_config
case $1 in
  up) cmd_up ;;
  down) cmd_down ;;
  status) cmd_status ;;
  topics) cmd_topics ;;
  restart) cmd_restart "${2:-}" ;;
  redis-wipe) cmd_restart redis wipe ;;
  redis-restore) cmd_restart redis restore ;;
  env) cmd_env ;;
  *) usage ;;
esac
