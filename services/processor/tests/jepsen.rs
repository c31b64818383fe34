//! A Jepsen-style checker for the processor, against the real stack.
//!
//! It records what must happen (the seeded chain, regenerated: every swap
//! per pool, every malformed transaction) and what did happen (pool states
//! and the audit log of applied sequences in Redis, `dex.swaps`, the
//! dead-letter topic), then reports lost swaps, double-applied effects,
//! out-of-order applications, state mismatches and missing dead letters —
//! all of which must be zero — and the duplicates in `dex.swaps`, which are
//! allowed only across a crash or revoke.

#![allow(dead_code, clippy::print_stdout, clippy::unwrap_used)]

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use prost::Message;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};
use sluice_chainsim::feed::{FeedOptions, FeedReport, feed};
use sluice_chainsim::{Chain, ChainConfig, TxKind};
use sluice_coord::endpoint::RedisEndpoint;
use sluice_core::route::record_keys;
use sluice_core::seq::Seq;
use sluice_kafka::topics::TopicSpec;
use sluice_kafka::{KafkaConfig, ensure_topics};
use sluice_proto::dex::v1::Swap;
use sluice_testkit::process::Spawned;
use sluice_testkit::{consume_committed, free_port, unique};

/// Topics, group and key prefix of one scenario: nothing shared with others.
#[derive(Debug, Clone)]
pub struct Scenario {
    pub name: String,
    pub kafka: KafkaConfig,
    pub redis_url: String,
    /// The same Redis with its ACL user and TLS files, if any (the checker reads through it).
    pub redis: RedisEndpoint,
    pub input: String,
    pub swaps: String,
    pub dlq: String,
    pub group: String,
    pub prefix: String,
    pub chain: ChainConfig,
    pub logs: PathBuf,
    /// Admin ports of every processor started, for diagnostics on failure.
    pub admin_ports: std::sync::Arc<std::sync::Mutex<Vec<(String, u16)>>>,
    /// `classic` (cooperative-sticky) or `consumer` (KIP-848).
    pub group_protocol: &'static str,
    /// More `SLUICE_PROCESSOR_…` settings for every processor started.
    pub env: Vec<(String, String)>,
}

impl Scenario {
    /// Creates the scenario's topics and token registry.
    pub async fn new(name: &str, redis_url: &str, transactions_per_sec: u32) -> Self {
        Self::with_redis(name, RedisEndpoint::url(redis_url), transactions_per_sec).await
    }

    /// On a Redis reached with an ACL user or TLS: the processors get the same settings.
    pub async fn with_redis(name: &str, redis: RedisEndpoint, transactions_per_sec: u32) -> Self {
        let id = unique(name);
        let s = Self {
            name: name.to_string(),
            kafka: sluice_testkit::kafka(),
            redis_url: redis.url.clone(),
            input: format!("{id}.chain.transactions"),
            swaps: format!("{id}.dex.swaps"),
            dlq: format!("{id}.chain.transactions.dlq"),
            group: format!("{id}.processor"),
            prefix: format!("{id}:"),
            chain: ChainConfig { seed: 17, tx_per_sec: transactions_per_sec, ..ChainConfig::default() },
            logs: std::env::temp_dir().join(&id),
            admin_ports: Default::default(),
            group_protocol: "classic",
            env: endpoint_env(&redis),
            redis,
        };
        std::fs::create_dir_all(&s.logs).unwrap();
        let specs = [TopicSpec::new(&s.input, 12), TopicSpec::new(&s.swaps, 12), TopicSpec::new(&s.dlq, 3)];
        ensure_topics(&s.kafka, &specs, Duration::from_secs(60)).await.expect("topics");
        let chain = Chain::new(s.chain.clone()).unwrap();
        let client = s.redis.client().unwrap();
        let mut conn = client.get_multiplexed_async_connection().await.expect("redis");
        sluice_dex::registry::publish(&mut conn, &s.prefix, &chain.tokens()).await.expect("registry");
        s
    }

    /// Feeds at least `transactions` of the chain into the input topic.
    pub async fn feed(&self, transactions: u64) -> FeedReport {
        let options = FeedOptions { max_transactions: Some(transactions), ..FeedOptions::new(&self.input) };
        feed(Chain::new(self.chain.clone()).unwrap(), &self.kafka, &options).await.expect("feed")
    }

    /// Feeds in the background; the handle yields the report.
    pub fn feed_in_background(&self, transactions: u64) -> tokio::task::JoinHandle<FeedReport> {
        let s = self.clone();
        tokio::spawn(async move { s.feed(transactions).await })
    }

    /// Starts one processor process.
    pub fn spawn(&self, instance: &str) -> Processor {
        self.spawn_with_redis(instance, &self.redis_url)
    }

    /// Starts one processor process against another Redis URL.
    pub fn spawn_with_redis(&self, instance: &str, redis_url: &str) -> Processor {
        let admin_port = free_port();
        self.admin_ports.lock().unwrap().push((instance.to_string(), admin_port));
        let mut command = Command::new(env!("CARGO_BIN_EXE_processor"));
        command
            .env("SLUICE_PROCESSOR_KAFKA_BROKERS", &self.kafka.brokers)
            .env("SLUICE_PROCESSOR_REDIS_URL", redis_url)
            .env("SLUICE_PROCESSOR_GROUP_ID", &self.group)
            .env("SLUICE_PROCESSOR_INPUT_TOPIC", &self.input)
            .env("SLUICE_PROCESSOR_SWAPS_TOPIC", &self.swaps)
            .env("SLUICE_PROCESSOR_DLQ_TOPIC", &self.dlq)
            .env("SLUICE_PROCESSOR_REDIS_PREFIX", &self.prefix)
            .env("SLUICE_PROCESSOR_AUDIT_APPLIED", "true")
            .env("SLUICE_PROCESSOR_ADMIN_LISTEN", format!("127.0.0.1:{admin_port}"))
            .env("SLUICE_PROCESSOR_GROUP_PROTOCOL", self.group_protocol)
            // A killed member is noticed within 15 s; a drain may take 10 s.
            .env("SLUICE_PROCESSOR_SESSION_TIMEOUT_MS", "15000")
            .env("SLUICE_PROCESSOR_DRAIN_DEADLINE_MS", "10000")
            .env("SLUICE_PROCESSOR_SHUTDOWN_DEADLINE_MS", "20000")
            .env("SLUICE_LOG_FORMAT", "plain")
            .env("SLUICE_LOG", std::env::var("SLUICE_TEST_PROCESSOR_LOG").unwrap_or_else(|_| "info".into()));
        for (k, v) in &self.env {
            command.env(format!("SLUICE_PROCESSOR_{k}"), v);
        }
        let process = Spawned::spawn(&mut command, self.logs.join(format!("{instance}.log")))
            .expect("starting the processor binary");
        Processor { process, name: instance.to_string(), admin_port }
    }

    /// Sum over partitions of (committed offset, high watermark) for the group.
    pub fn progress(&self) -> (i64, i64) {
        let consumer: BaseConsumer = self.kafka.client().set("group.id", &self.group).create().unwrap();
        let mut tpl = TopicPartitionList::new();
        for p in 0..12 {
            tpl.add_partition(&self.input, p);
        }
        let committed = consumer
            .committed_offsets(tpl, Duration::from_secs(5))
            .map_or(0, |c| c.elements().iter().map(|e| if let Offset::Offset(o) = e.offset() { o } else { 0 }).sum());
        let high = (0..12)
            .map(|p| consumer.fetch_watermarks(&self.input, p, Duration::from_secs(5)).map_or(0, |(_, h)| h))
            .sum();
        (committed, high)
    }

    /// The interesting metrics of every processor still answering.
    pub fn diagnostics(&self) -> String {
        let mut out = String::new();
        for (name, port) in self.admin_ports.lock().unwrap().iter() {
            let metrics = admin_body(*port, "/metrics");
            let keep: Vec<&str> = metrics
                .lines()
                .filter(|l| {
                    !l.starts_with('#')
                        && (l.contains("in_flight")
                            || l.contains("paused")
                            || l.contains("stalled")
                            || l.contains("messages_total")
                            || l.contains("commits_total")
                            || l.contains("committed_offset")
                            || l.contains("assigned")
                            || l.contains("retries"))
                })
                .collect();
            out.push_str(&format!(
                "--- {name} (admin {port}) ready={}\n{}\n",
                admin_status(*port, "/ready"),
                keep.join("\n")
            ));
        }
        out
    }

    /// Waits until the group has committed `fraction` of `records`.
    pub async fn wait_committed(&self, records: u64, fraction: f64, timeout: Duration) {
        let target = (records as f64 * fraction) as i64;
        let deadline = Instant::now() + timeout;
        loop {
            let (committed, _) = tokio::task::block_in_place(|| self.progress());
            if committed >= target {
                return;
            }
            if Instant::now() >= deadline {
                panic!(
                    "{}: only {committed} of {target} records committed within {timeout:?}; logs in {}\n{}",
                    self.name,
                    self.logs.display(),
                    self.diagnostics()
                );
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
}

/// A running processor process (killed when dropped).
pub struct Processor {
    process: Spawned,
    pub name: String,
    pub admin_port: u16,
}

impl Processor {
    /// The HTTP status of `GET path` on the admin port (0 when it does not answer).
    pub fn admin_status(&self, path: &str) -> u16 {
        admin_status(self.admin_port, path)
    }

    pub fn signal(&self, signal: &str) {
        self.process.signal(signal).unwrap_or_else(|e| panic!("{}: {e}", self.name));
    }

    /// Waits until this processor owns at least one partition.
    pub async fn wait_assigned(&self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        loop {
            let text = admin_body(self.admin_port, "/metrics");
            if sluice_testkit::metric(&text, "sluice_processor_assigned_partitions", "") > 0.0 {
                return;
            }
            assert!(Instant::now() < deadline, "{} owned no partition within {timeout:?}", self.name);
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// SIGTERM and wait for a clean exit (status 0) within 30 s.
    pub fn terminate(mut self) {
        let (code, took) = self.process.terminate(Duration::from_secs(30));
        assert_eq!(code, Some(0), "{} after SIGTERM (None: still running after {took:?}, killed)", self.name);
    }

    /// SIGKILL: no chance to commit or drain.
    pub fn kill(mut self) {
        self.process.kill();
    }
}

/// The HTTP status of `GET path` on a processor's admin port (0 when it does not answer).
pub fn admin_status(port: u16, path: &str) -> u16 {
    sluice_testkit::http_get(port, path).map_or(0, |(code, _)| code)
}

/// The body of `GET path` on a processor's admin port (empty when it does not answer).
pub fn admin_body(port: u16, path: &str) -> String {
    sluice_testkit::http_get(port, path).map(|(_, body)| body).unwrap_or_default()
}

/// A Redis server of the test's own, so stopping it affects nobody else.
pub struct OwnRedis {
    pub port: u16,
    pub dir: PathBuf,
    child: Option<Child>,
}

impl OwnRedis {
    pub fn start(dir: PathBuf) -> Self {
        std::fs::create_dir_all(&dir).unwrap();
        let mut redis = Self { port: free_port(), dir, child: None };
        redis.run();
        redis
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    fn run(&mut self) {
        // Snapshots only on shutdown (`SHUTDOWN SAVE`), loaded on start: a
        // stop loses nothing, as with a production Redis that persists.
        let child = Command::new("redis-server")
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(&self.dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server must be installed (deploy/local/stack.sh installs it)");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(Instant::now() < deadline, "own redis did not start");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Stops the server (saving its data); `restart` brings it back.
    pub fn stop(&mut self) {
        let saved = Command::new("redis-cli").args(["-p", &self.port.to_string(), "shutdown", "save"]).status();
        assert!(saved.is_ok(), "redis-cli shutdown");
        if let Some(mut child) = self.child.take() {
            let _ = child.wait();
        }
    }

    pub fn restart(&mut self) {
        self.run();
    }
}

impl Drop for OwnRedis {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// What the checker found.
#[derive(Debug, Default)]
pub struct Report {
    pub transactions: u64,
    pub expected_swaps: usize,
    pub pools_checked: usize,
    pub state_mismatches: Vec<String>,
    pub lost_swaps: usize,
    pub lost_effects: usize,
    pub double_applied: usize,
    pub out_of_order: usize,
    pub duplicate_swap_records: usize,
    pub dead_letters: usize,
    pub expected_dead_letters: usize,
    pub missing_dead_letters: usize,
    pub dead_letters_without_reason: usize,
    /// Dead letters beyond one per malformed transaction.
    pub duplicate_dead_letters: usize,
}

impl Report {
    pub fn print(&self, name: &str) {
        println!(
            "checker[{name}]: {} transactions, {} swaps expected over {} pools | state mismatches {} | lost swaps {} | lost effects {} | double-applied {} | out-of-order {} | dead letters {} (missing {}, without reason {}, duplicates {}) | duplicate dex.swaps records {}",
            self.transactions,
            self.expected_swaps,
            self.pools_checked,
            self.state_mismatches.len(),
            self.lost_swaps,
            self.lost_effects,
            self.double_applied,
            self.out_of_order,
            self.dead_letters,
            self.missing_dead_letters,
            self.dead_letters_without_reason,
            self.duplicate_dead_letters,
            self.duplicate_swap_records
        );
    }

    /// The invariants that hold in every scenario.
    pub fn assert_exactly_once_effects(&self, name: &str) {
        self.print(name);
        assert!(
            self.state_mismatches.is_empty(),
            "{name}: pools differ from the chain: {:?}",
            &self.state_mismatches[..self.state_mismatches.len().min(5)]
        );
        assert_eq!(self.lost_swaps, 0, "{name}: swaps missing from dex.swaps");
        assert_eq!(self.lost_effects, 0, "{name}: swaps never applied");
        assert_eq!(self.double_applied, 0, "{name}: swaps applied twice");
        assert_eq!(self.out_of_order, 0, "{name}: swaps applied out of order");
        assert_eq!(self.missing_dead_letters, 0, "{name}: malformed records not dead-lettered");
        assert_eq!(self.dead_letters_without_reason, 0, "{name}: dead letters without a reason");
    }
}

/// The processor settings for `redis`'s user and TLS files (its URL is set apart).
fn endpoint_env(redis: &RedisEndpoint) -> Vec<(String, String)> {
    let path = |p: &std::path::Path| p.display().to_string();
    let (cert, key) = redis.client_cert.as_ref().map(|(c, k)| (path(c), path(k))).unzip();
    [
        ("REDIS_USERNAME", redis.username.clone()),
        ("REDIS_PASSWORD", redis.password.clone()),
        ("REDIS_TLS_CA_FILE", redis.ca_file.as_deref().map(path)),
        ("REDIS_TLS_CERT_FILE", cert),
        ("REDIS_TLS_KEY_FILE", key),
    ]
    .into_iter()
    .filter_map(|(k, v)| v.map(|v| (k.to_string(), v)))
    .collect()
}

/// Checks everything the processors did against the chain up to `feed.last_slot`.
pub async fn check(s: &Scenario, fed: &FeedReport) -> Report {
    let last_slot = fed.last_slot.expect("fed something");
    let mut chain = Chain::new(s.chain.clone()).unwrap();
    let mut expected: HashMap<String, Vec<Seq>> = HashMap::new();
    let mut malformed: HashSet<String> = HashSet::new();
    let mut report = Report::default();
    while chain.next_slot() <= last_slot {
        for g in chain.next_block().transactions {
            report.transactions += 1;
            match g.kind {
                TxKind::Swap { .. } => {
                    for key in record_keys(&g.tx) {
                        let r = sluice_core::recognize::recognize(&g.tx, key).unwrap();
                        for f in r.swaps {
                            expected.entry(f.pool.to_string()).or_default().push(f.seq);
                        }
                    }
                }
                TxKind::Malformed(_) => {
                    malformed.insert(g.tx.signature.clone());
                }
                TxKind::UnknownVenue => {}
            }
        }
    }
    report.expected_swaps = expected.values().map(Vec::len).sum();

    // Redis: final state and the audit log of every applied sequence.
    let client = s.redis.client().unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    for pool in chain.pools() {
        report.pools_checked += 1;
        let address = &pool.info.pool;
        let truth = pool.state;
        let got = sluice_dex::state::read_pool(&mut conn, &s.prefix, address).await.unwrap();
        let matches = match got {
            Some(state) => state == truth,
            None => truth.swaps_applied == 0,
        };
        if !matches {
            report.state_mismatches.push(format!("{address}: redis {got:?} vs chain {truth:?}"));
        }
        let audit = sluice_dex::state::read_audit(&mut conn, &s.prefix, address).await.unwrap();
        let mut seen = HashSet::new();
        for (i, seq) in audit.iter().enumerate() {
            if !seen.insert(*seq) {
                report.double_applied += 1;
            }
            if i > 0 && audit[i - 1] >= *seq {
                report.out_of_order += 1;
            }
        }
        let wanted = expected.get(address).cloned().unwrap_or_default();
        report.lost_effects += wanted.iter().filter(|s| !seen.contains(s)).count();
    }

    // dex.swaps: every expected swap at least once.
    let records = consume_committed(&s.kafka, &s.swaps, 12, Duration::from_secs(120)).await;
    let mut published: HashMap<(String, Seq), usize> = HashMap::new();
    for r in &records {
        let swap = Swap::decode(r.payload.as_slice()).expect("a Swap");
        let seq = Seq::from(swap.sequence.as_ref().expect("sequence"));
        *published.entry((swap.pool.clone(), seq)).or_default() += 1;
    }
    for (pool, seqs) in &expected {
        report.lost_swaps += seqs.iter().filter(|seq| !published.contains_key(&(pool.clone(), **seq))).count();
    }
    report.duplicate_swap_records = published.values().map(|n| n - 1).sum();

    // Dead letters: every malformed transaction, with its reason.
    let dead = consume_committed(&s.kafka, &s.dlq, 3, Duration::from_secs(60)).await;
    report.dead_letters = dead.len();
    let mut dead_signatures = HashSet::new();
    for r in &dead {
        let tx = sluice_proto::chain::v1::ChainTransaction::decode(r.payload.as_slice()).expect("original payload");
        dead_signatures.insert(tx.signature);
        let has = |h: &str| r.headers.get(h).is_some_and(|v| !v.is_empty());
        if !(has("sluice.error.kind") && has("sluice.error.message") && has("sluice.original.offset")) {
            report.dead_letters_without_reason += 1;
        }
    }
    report.duplicate_dead_letters = dead.len() - dead_signatures.len();
    report.expected_dead_letters = malformed.len();
    report.missing_dead_letters = malformed.iter().filter(|sig| !dead_signatures.contains(*sig)).count();
    report
}

/// The end of every scenario: wait until everything fed is committed,
/// check, stop the processors cleanly, and assert the invariants that hold
/// whatever the faults were.
pub async fn finish(s: &Scenario, fed: &FeedReport, processors: Vec<Processor>) -> Report {
    wait_drained(s, fed.records, Duration::from_secs(300)).await;
    let report = check(s, fed).await;
    for p in processors {
        p.terminate();
    }
    report.assert_exactly_once_effects(&s.name);
    report
}

/// Waits until the group committed everything in the input topic.
pub async fn wait_drained(s: &Scenario, records: u64, timeout: Duration) {
    s.wait_committed(records, 1.0, timeout).await;
}

/// The sluice-lag binary of this build (cargo builds every workspace binary before it runs
/// the tests of `cargo test --workspace`).
pub fn lag_binary() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary");
    let path = exe.parent().and_then(|deps| deps.parent()).expect("target dir").join("sluice-lag");
    assert!(path.exists(), "{} is missing: build it first (cargo build -p sluice-lag)", path.display());
    path
}

/// sluice-lag's picture of `group`, from its admin port.
pub fn lag_picture(port: u16, group: &str) -> Option<sluice_lag::picture::GroupPicture> {
    let (code, body) = sluice_service::process::http_get(port, &format!("/groups/{group}"))?;
    (code == 200).then(|| serde_json::from_str(&body).expect("a group picture"))
}

/// The sluice-ops binary of this build (cargo builds every workspace binary before it runs
/// the tests of `cargo test --workspace`).
pub fn ops_binary() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary");
    let path = exe.parent().and_then(|deps| deps.parent()).expect("target dir").join("sluice-ops");
    assert!(path.exists(), "{} is missing: build it first (cargo build -p sluice-ops)", path.display());
    path
}

/// `sluice-ops ARGS --json` with the processor's variables, as the chart's Job runs it.
pub fn ops(s: &Scenario, args: &[&str]) -> serde_json::Value {
    let out = ops_output(s, args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "sluice-ops {args:?} failed: {stderr}");
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("sluice-ops {args:?}: not JSON ({e}): {stderr}"))
}

/// `sluice-ops ARGS --json`, whatever it answers.
pub fn ops_output(s: &Scenario, args: &[&str]) -> std::process::Output {
    Command::new(ops_binary())
        .args(args)
        .arg("--json")
        .env("SLUICE_PROCESSOR_KAFKA_BROKERS", &s.kafka.brokers)
        .env("SLUICE_PROCESSOR_INPUT_TOPIC", &s.input)
        .env("SLUICE_PROCESSOR_DLQ_TOPIC", &s.dlq)
        .env("SLUICE_PROCESSOR_GROUP_ID", &s.group)
        .env("SLUICE_PROCESSOR_REDIS_URL", &s.redis_url)
        .envs(s.env.iter().map(|(k, v)| (format!("SLUICE_PROCESSOR_{k}"), v)))
        .output()
        .expect("sluice-ops")
}
