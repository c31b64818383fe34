//! The ingest against chainsim, the real broker and the real Redis, as
//! processes: every transaction of the chain up to the stored cursor is in
//! Kafka, one record per pool touched; a cut stream is resumed exactly
//! where sending stopped (no gap, no duplicate); when the active instance is
//! SIGKILLed the standby takes over within the lease time, and still no
//! transaction is missing; an active instance paused past its lease
//! (SIGSTOP) adds nothing once it wakes, fenced by Kafka; what an instance
//! sends again (after a takeover, or from genesis after the cursor was
//! lost) is counted exactly.

use std::collections::{HashMap, HashSet};
use std::process::Command;
use std::time::{Duration, Instant};

use prost::Message;
use rdkafka::consumer::{BaseConsumer, Consumer};
use sluice_chainsim::server::{ChainNode, ServerOptions};
use sluice_chainsim::{Chain, ChainConfig};
use sluice_core::clock::now_ms;
use sluice_core::route::record_keys;
use sluice_kafka::{KafkaConfig, TopicSpec, ensure_topics};
use sluice_proto::chain::v1::ChainTransaction;
use sluice_testkit::process::Spawned;
use sluice_testkit::{free_port, http_get};

const PARTITIONS: i32 = 6;

/// A metric of the instance on `port`; NaN when it does not answer (every
/// comparison with it then fails).
fn metric(port: u16, name: &str) -> f64 {
    http_get(port, "/metrics").map_or(f64::NAN, |(_, body)| sluice_testkit::metric(&body, name, ""))
}

/// One test's names and chain.
struct Setup {
    kafka: KafkaConfig,
    topic: String,
    prefix: String,
    chain: ChainConfig,
    chain_url: String,
}

async fn setup(name: &str, cut_streams_after: Option<u64>) -> Setup {
    let id = sluice_testkit::unique(name);
    let kafka = sluice_testkit::kafka();
    let topic = format!("{id}.chain.transactions");
    ensure_topics(&kafka, &[TopicSpec::new(&topic, PARTITIONS)], Duration::from_secs(60)).await.expect("topic");
    // 100 ms slots, about 60 transactions each, the first 20 slots already due.
    let chain = ChainConfig {
        seed: 23,
        genesis_ms: now_ms() - 2_000,
        slot_ms: 100,
        tx_per_sec: 600,
        pools: 16,
        ..ChainConfig::default()
    };
    let (listener, addr) = ChainNode::bind(([127, 0, 0, 1], 0).into()).await.expect("bind");
    let node = ChainNode::start(
        Chain::new(chain.clone()).expect("chain"),
        &ServerOptions { cut_streams_after, ..ServerOptions::default() },
    );
    tokio::spawn(node.serve(listener, std::future::pending()));
    Setup { kafka, topic, prefix: format!("{id}:"), chain, chain_url: format!("http://{addr}") }
}

/// An ingest instance: a real `sluice-ingest` process (killed when dropped).
struct Ingest {
    process: Spawned,
    admin: u16,
}

impl Ingest {
    fn start(s: &Setup, name: &str) -> Self {
        Self::start_with(s, name, &[])
    }

    /// With further `SLUICE_INGEST_` settings (names without the prefix).
    fn start_with(s: &Setup, name: &str, extra: &[(&str, &str)]) -> Self {
        let admin = free_port();
        let log = std::env::temp_dir().join(format!("{}{name}.log", s.prefix.trim_end_matches(':')));
        let mut command = Command::new(env!("CARGO_BIN_EXE_sluice-ingest"));
        command
            .env("SLUICE_INGEST_KAFKA_BROKERS", &s.kafka.brokers)
            .env("SLUICE_INGEST_REDIS_URL", sluice_testkit::redis_url())
            .env("SLUICE_INGEST_REDIS_PREFIX", &s.prefix)
            .env("SLUICE_INGEST_CHAIN_URL", &s.chain_url)
            .env("SLUICE_INGEST_TOPIC", &s.topic)
            .env("SLUICE_INGEST_INSTANCE_ID", name)
            .env("SLUICE_INGEST_LEASE_TTL_MS", "1500")
            .env("SLUICE_INGEST_ADMIN_LISTEN", format!("127.0.0.1:{admin}"))
            .env("SLUICE_LOG_FORMAT", "plain");
        command.envs(extra.iter().map(|(k, v)| (format!("SLUICE_INGEST_{k}"), *v)));
        Self { process: Spawned::spawn(&mut command, log).expect("starting sluice-ingest"), admin }
    }

    fn active(&self) -> bool {
        metric(self.admin, "sluice_ingest_active") == 1.0
    }

    fn kill(&mut self) {
        self.process.kill();
    }

    fn signal(&self, signal: &str) {
        self.process.signal(signal).expect("signalling the ingest");
    }

    fn terminate(&mut self) -> Option<i32> {
        self.process.terminate(Duration::from_secs(30)).0
    }

    fn log_tail(&self) -> String {
        self.process.log_tail(30)
    }
}

async fn wait_until(what: &str, limit: Duration, check: impl Fn() -> bool) -> Duration {
    let started = Instant::now();
    while !check() {
        assert!(started.elapsed() < limit, "not {what} within {limit:?}");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    started.elapsed()
}

/// Every (signature, key) record in the topic, with how often it occurs.
fn read_topic(s: &Setup) -> HashMap<(String, String), usize> {
    let consumer: BaseConsumer = s
        .kafka
        .client()
        .set("group.id", sluice_testkit::unique("ingest-check"))
        .set("auto.offset.reset", "earliest")
        .set("enable.auto.commit", "false")
        .create()
        .expect("consumer");
    // The log's end, per partition: records and (the ingest sends in
    // transactions) commit markers, which the consumer's position steps over.
    let ends: Vec<i64> = (0..PARTITIONS)
        .map(|p| consumer.fetch_watermarks(&s.topic, p, Duration::from_secs(10)).expect("watermarks").1)
        .collect();
    let mut tpl = rdkafka::TopicPartitionList::new();
    for p in 0..PARTITIONS {
        tpl.add_partition_offset(&s.topic, p, rdkafka::Offset::Beginning).expect("tpl");
    }
    consumer.assign(&tpl).expect("assign");
    let at_end = |consumer: &BaseConsumer| {
        let position = consumer.position().expect("position");
        (0..PARTITIONS).all(|p| {
            let at = position.find_partition(&s.topic, p).map(|e| e.offset());
            ends[p as usize] == 0 || matches!(at, Some(rdkafka::Offset::Offset(o)) if o >= ends[p as usize])
        })
    };
    let mut out = HashMap::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !at_end(&consumer) {
        assert!(Instant::now() < deadline, "read the whole topic (to {ends:?}) within 60 s");
        if let Some(Ok(m)) = consumer.poll(Duration::from_millis(200)) {
            use rdkafka::Message as _;
            let tx = ChainTransaction::decode(m.payload().unwrap_or_default()).expect("a transaction");
            let key = String::from_utf8_lossy(m.key().unwrap_or_default()).to_string();
            *out.entry((tx.signature, key)).or_insert(0) += 1;
        }
    }
    out
}

/// The records the chain's slots up to `last` must have produced.
fn expected(chain: &ChainConfig, last: u64) -> HashSet<(String, String)> {
    let mut chain = Chain::new(chain.clone()).expect("chain");
    let mut out = HashSet::new();
    while chain.next_slot() <= last {
        for generated in chain.next_block().transactions {
            for key in record_keys(&generated.tx) {
                out.insert((generated.tx.signature.clone(), key.to_string()));
            }
        }
    }
    out
}

async fn stored_cursor(s: &Setup) -> Option<u64> {
    let client = redis::Client::open(sluice_testkit::redis_url()).expect("url");
    let mut conn = client.get_multiplexed_async_connection().await.expect("redis");
    redis::cmd("GET").arg(format!("{}ingest:cursor", s.prefix)).query_async(&mut conn).await.expect("GET")
}

async fn cursor(s: &Setup) -> u64 {
    stored_cursor(s).await.expect("a cursor was written")
}

/// Waits (on a loaded machine a first slot may take a while) for a cursor.
async fn first_cursor(s: &Setup) {
    let started = Instant::now();
    while stored_cursor(s).await.is_none() {
        assert!(started.elapsed() < Duration::from_secs(30), "no cursor written within 30 s");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Checks the topic against the chain up to the cursor; returns
/// (records expected, duplicates in the topic).
async fn check(s: &Setup) -> (usize, usize) {
    let last = cursor(s).await;
    let want = expected(&s.chain, last);
    let got = read_topic(s);
    let missing: Vec<_> = want.iter().filter(|r| !got.contains_key(*r)).take(5).collect();
    assert!(missing.is_empty(), "records of slots up to the cursor {last} missing from Kafka, e.g. {missing:?}");
    let duplicates = got.values().map(|n| n - 1).sum();
    eprintln!("cursor at slot {last}: {} records expected, all present; {duplicates} duplicates", want.len());
    (want.len(), duplicates)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_stream_resumes_where_it_stopped_with_no_gap_and_no_duplicate() {
    let s = setup("ingest-cut", Some(700)).await;
    let mut a = Ingest::start(&s, "cut-a");
    wait_until("active", Duration::from_secs(30), || a.active()).await;
    tokio::time::sleep(Duration::from_secs(6)).await;
    let reconnects = metric(a.admin, "sluice_ingest_reconnects_total");
    assert_eq!(a.terminate(), Some(0), "{}", a.log_tail());
    assert!(reconnects >= 3.0, "the stream was cut and re-opened: {reconnects}");
    let (records, duplicates) = check(&s).await;
    assert!(records > 3_000, "{records}");
    assert_eq!(duplicates, 0, "a reconnect resumes inside the slot it stopped in");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_standby_takes_over_when_the_active_instance_is_killed() {
    let s = setup("ingest-takeover", None).await;
    let mut one = Ingest::start(&s, "one");
    let mut two = Ingest::start(&s, "two");
    wait_until("one instance active", Duration::from_secs(30), || one.active() || two.active()).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!(one.active() && two.active()), "never two active instances");
    let (active, standby) = if one.active() { (&mut one, &mut two) } else { (&mut two, &mut one) };
    tokio::time::sleep(Duration::from_secs(3)).await;
    let before = cursor(&s).await;
    active.kill();
    let took = wait_until("the standby active", Duration::from_secs(10), || standby.active()).await;
    eprintln!("standby active {took:?} after the SIGKILL (lease 1.5 s)");
    assert!(took < Duration::from_millis(1_500 + 1_000), "within the lease time: {took:?}");
    tokio::time::sleep(Duration::from_secs(3)).await;
    let resent = metric(standby.admin, "sluice_ingest_resent_records_total");
    let skipped = metric(standby.admin, "sluice_ingest_skipped_records_total");
    assert_eq!(standby.terminate(), Some(0), "{}", standby.log_tail());
    let after = cursor(&s).await;
    assert!(after > before + 10, "the standby moved the cursor on: {before} → {after}");
    let (_, duplicates) = check(&s).await;
    eprintln!(
        "{duplicates} duplicates in Kafka; the new active skipped {skipped} records the topic held, resent {resent}"
    );
    assert_eq!((duplicates, resent), (0, 0.0), "what the killed instance committed past the cursor is not sent again");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_active_instance_is_fenced_by_kafka_and_adds_nothing_when_it_wakes() {
    let s = setup("ingest-zombie", None).await;
    let mut one = Ingest::start(&s, "z-one");
    wait_until("active", Duration::from_secs(30), || one.active()).await;
    let mut two = Ingest::start(&s, "z-two");
    tokio::time::sleep(Duration::from_secs(2)).await;
    // Frozen mid-stream, with records sent and not yet committed; the standby
    // takes over once the lease lapses, and its producer fences the frozen one.
    one.signal("STOP");
    wait_until("the standby active", Duration::from_secs(10), || two.active()).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    one.signal("CONT");
    wait_until("the woken one back to standby", Duration::from_secs(10), || {
        metric(one.admin, "sluice_ingest_active") == 0.0
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let skipped = metric(two.admin, "sluice_ingest_skipped_records_total");
    let fenced = metric(one.admin, "sluice_ingest_fenced_total") + metric(one.admin, "sluice_ingest_leases_lost_total");
    assert_eq!(two.terminate(), Some(0), "{}", two.log_tail());
    assert_eq!(one.terminate(), Some(0), "{}", one.log_tail());
    assert!(fenced >= 1.0, "the woken instance stopped: fenced or its lease lost");
    let (_, duplicates) = check(&s).await;
    eprintln!("{duplicates} duplicates for read_committed readers; the new active skipped {skipped} already there");
    // Anything the frozen instance had in flight, or sent on waking, or
    // anything the new active sent again, would be a duplicate.
    assert_eq!(duplicates, 0, "the topic holds each record once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replaced_store_stops_the_ingest_until_its_generation_is_back() {
    let s = setup("ingest-generation", None).await;
    let mut one = Ingest::start(&s, "g-one");
    wait_until("active", Duration::from_secs(30), || one.active()).await;
    first_cursor(&s).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let client = redis::Client::open(sluice_testkit::redis_url()).expect("url");
    let mut conn = client.get_multiplexed_async_connection().await.expect("redis");
    let marker_key = format!("{}generation", s.prefix);
    let marker: String = redis::cmd("GET").arg(&marker_key).query_async(&mut conn).await.expect("the ingest's marker");
    // The marker vanishes (what an empty or another Redis looks like): the
    // next cursor write is refused in the same step, and streaming stops.
    let () = redis::cmd("DEL").arg(&marker_key).query_async(&mut conn).await.expect("DEL");
    wait_until("the replaced store reported", Duration::from_secs(10), || {
        metric(one.admin, "sluice_ingest_state_store_replaced") == 1.0
    })
    .await;
    let stopped_at = cursor(&s).await;
    let produced = metric(one.admin, "sluice_ingest_produced_records_total");
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(metric(one.admin, "sluice_ingest_produced_records_total"), produced, "nothing sent meanwhile");
    assert_eq!(cursor(&s).await, stopped_at, "the cursor did not move");
    let marked: i64 = redis::cmd("EXISTS").arg(&marker_key).query_async(&mut conn).await.expect("EXISTS");
    assert_eq!(marked, 0, "a running ingest never marks a store anew");
    // The store is restored: it streams again from its cursor.
    let () = redis::cmd("SET").arg(&marker_key).arg(&marker).query_async(&mut conn).await.expect("SET");
    wait_until("the store back", Duration::from_secs(15), || {
        metric(one.admin, "sluice_ingest_state_store_replaced") == 0.0
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(cursor(&s).await > stopped_at, "the cursor moves again");
    let skipped = metric(one.admin, "sluice_ingest_skipped_records_total");
    assert_eq!(one.terminate(), Some(0), "{}", one.log_tail());
    let (_, duplicates) = check(&s).await;
    eprintln!("stopped at slot {stopped_at}; {skipped} records past it found in the topic; {duplicates} duplicates");
    // The commit before the refused cursor write put records past the cursor.
    assert!(skipped > 0.0, "what was committed past the cursor is found in the topic");
    assert_eq!(duplicates, 0, "and not sent again");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_cursor_stops_the_ingest_until_told_to_resend_then_it_sends_only_what_the_topic_lacks() {
    let s = setup("ingest-lost-cursor", None).await;
    let mut first = Ingest::start(&s, "first");
    wait_until("active", Duration::from_secs(30), || first.active()).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(first.terminate(), Some(0), "{}", first.log_tail());
    let (sent_before, duplicates_before) = check(&s).await;
    assert_eq!(duplicates_before, 0);
    // Redis forgets the cursor (a wipe, a failover that lost it) while the
    // topic keeps its records: the next instance must not stream.
    let client = redis::Client::open(sluice_testkit::redis_url()).expect("url");
    let mut conn = client.get_multiplexed_async_connection().await.expect("redis");
    let _: () = redis::cmd("DEL").arg(format!("{}ingest:cursor", s.prefix)).query_async(&mut conn).await.expect("DEL");
    let mut stopped = Ingest::start(&s, "stopped");
    wait_until("the lost cursor reported", Duration::from_secs(30), || {
        metric(stopped.admin, "sluice_ingest_cursor_lost") == 1.0
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let produced = metric(stopped.admin, "sluice_ingest_produced_records_total");
    assert_eq!(stopped.terminate(), Some(0), "{}", stopped.log_tail());
    assert_eq!(produced, 0.0, "nothing sent while the cursor is lost");
    assert!(stopped.log_tail().contains("SLUICE_INGEST_LOST_CURSOR=resend"), "the error names the way out");
    // Told to: it reads the chain again from genesis, finds every record the
    // topic holds already, and sends only what follows.
    let _: () = redis::cmd("DEL").arg(format!("{}ingest:cursor", s.prefix)).query_async(&mut conn).await.expect("DEL");
    let mut second = Ingest::start_with(&s, "second", &[("LOST_CURSOR", "resend")]);
    wait_until("active again", Duration::from_secs(30), || second.active()).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let resent = metric(second.admin, "sluice_ingest_resent_records_total");
    let skipped = metric(second.admin, "sluice_ingest_skipped_records_total");
    let lost = metric(second.admin, "sluice_ingest_cursor_lost");
    assert_eq!(second.terminate(), Some(0), "{}", second.log_tail());
    let (records, duplicates) = check(&s).await;
    eprintln!("{sent_before} records before the cursor was lost; {skipped} skipped; {duplicates} duplicates");
    assert_eq!(lost, 0.0, "streaming again");
    assert!(skipped >= sent_before as f64, "everything sent before was found: {skipped} of {sent_before}");
    assert!(records > sent_before, "and the chain went on from there: {records} records");
    assert_eq!((duplicates, resent), (0, 0.0), "nothing is in the topic twice");
}
