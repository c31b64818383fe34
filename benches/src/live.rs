//! Benchmarks against the real local stack (a Kafka broker and Redis, from
//! `deploy/local/stack.sh`): fresh topic, group and key names per run, the
//! processor runtime started in this process, a paced feeder, a bare
//! consumer, and a handler wrapper that measures every completion.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use hdrhistogram::Histogram;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::{Message, Offset, TopicPartitionList};
use sluice_dex::DexConfig;
use sluice_kafka::topics::TopicSpec;
use sluice_kafka::{KafkaConfig, ensure_topics};
use sluice_runtime::metrics::RuntimeMetrics;
use sluice_runtime::run::RuntimeError;
use sluice_runtime::sink::RedisConfig;
use sluice_runtime::{Batching, HandleError, Handled, Handler, Record, Runtime, RuntimeConfig, RuntimeHandle};
use sluice_service::env::EnvReader;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::machine;
use crate::stats::histogram;
use crate::traffic::{Traffic, partition_of};

/// Where the stack is, and this run's unique name stem.
#[derive(Debug, Clone)]
pub struct Stack {
    pub kafka: KafkaConfig,
    pub redis_url: String,
    /// Extra librdkafka properties for the processor (`k=v,k=v`), e.g. to
    /// try another `linger.ms`.
    pub processor_properties: Option<String>,
    /// Topic configs for every topic the run creates (`--topic-config`).
    pub topic_config: Vec<(String, String)>,
    dir: Option<PathBuf>,
    run: String,
}

impl Stack {
    /// From `SLUICE_KAFKA_BROKERS` / `SLUICE_REDIS_URL` (what `stack.sh env` prints).
    pub fn from_env() -> Result<Self> {
        let get = |name: &str| {
            std::env::var(name).ok().filter(|v| !v.is_empty()).with_context(|| {
                format!(
                    "{name} is not set: this mode needs the local stack; run `deploy/local/stack.sh up` \
                     and `eval \"$(deploy/local/stack.sh env)\"` first"
                )
            })
        };
        Ok(Self {
            kafka: KafkaConfig::new(get("SLUICE_KAFKA_BROKERS")?),
            redis_url: get("SLUICE_REDIS_URL")?,
            processor_properties: None,
            topic_config: Vec::new(),
            dir: std::env::var_os("SLUICE_STACK_DIR").map(PathBuf::from),
            run: format!("bench-{}-{}", machine::utc_stamp().to_lowercase(), std::process::id()),
        })
    }

    /// A name unique to this run (topics, groups, Redis prefixes).
    pub fn name(&self, what: &str) -> String {
        format!("{}-{what}", self.run)
    }

    /// Deletes every topic this run created (names start with its stem):
    /// what a phase that failed half-way left. Best effort: what could not
    /// be deleted is returned.
    pub async fn delete_run_topics(&self) -> Vec<String> {
        let names: Vec<String> = {
            let consumer: Result<BaseConsumer, _> = self.kafka.client().create();
            let metadata = consumer.and_then(|c| c.fetch_metadata(None, Duration::from_secs(10)));
            match metadata {
                Ok(m) => m.topics().iter().map(|t| t.name().to_string()).filter(|n| n.starts_with(&self.run)).collect(),
                Err(e) => return vec![format!("listing topics: {e}")],
            }
        };
        self.delete_topics(&names).await
    }

    /// Deletes `names` as soon as a phase is done with them: one open loop at
    /// 100k records/s writes several GB, and a run of them kept to its end
    /// once filled the disk. Best effort: what could not be deleted is returned.
    pub async fn delete_topics(&self, names: &[String]) -> Vec<String> {
        use rdkafka::admin::{AdminClient, AdminOptions};
        use rdkafka::client::DefaultClientContext;
        if names.is_empty() {
            return Vec::new();
        }
        let admin: AdminClient<DefaultClientContext> = match self.kafka.client().create() {
            Ok(a) => a,
            Err(e) => return vec![format!("admin client: {e}")],
        };
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        let options = AdminOptions::new().operation_timeout(Some(Duration::from_secs(60)));
        match admin.delete_topics(&refs, &options).await {
            Ok(results) => results.into_iter().filter_map(|r| r.err().map(|(t, e)| format!("{t}: {e}"))).collect(),
            Err(e) => vec![format!("deleting topics: {e}")],
        }
    }

    /// Deletes a processor input's topics (it, its swaps and dead-letter
    /// topics, and `more`), saying what could not be deleted.
    pub async fn drop_input(&self, input: &str, more: &[&str]) {
        let mut names = vec![input.to_string(), format!("{input}.swaps"), format!("{input}.dlq")];
        names.extend(more.iter().map(|m| m.to_string()));
        for failure in self.delete_topics(&names).await {
            eprintln!("  could not delete a topic of this run: {failure}");
        }
    }

    pub async fn create_topics(&self, topics: &[(&str, i32)]) -> Result<()> {
        let spec = |name: &str, partitions: i32| {
            self.topic_config.iter().fold(TopicSpec::new(name, partitions), |s, (k, v)| s.with_config(k, v))
        };
        let specs: Vec<TopicSpec> = topics.iter().map(|(n, p)| spec(n, *p)).collect();
        ensure_topics(&self.kafka, &specs, Duration::from_secs(60)).await.context("creating topics")
    }

    /// CPU time so far of the broker and of Redis (from the stack's pid
    /// files; zero when `SLUICE_STACK_DIR` is unknown).
    pub fn stack_cpu(&self) -> (Duration, Duration) {
        let of = |kind: &str| self.pid(kind).map_or(Duration::ZERO, |pid| machine::cpu_time(&pid));
        (of("kafka"), of("redis"))
    }

    /// How long the stack's `kafka` or `redis` process has run, s (from
    /// /proc: its start time in clock ticks since boot against the uptime).
    pub fn uptime(&self, kind: &str) -> Option<f64> {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.pid(kind)?)).ok()?;
        // After the command name, the start time is field 22 (1-based), the 20th here.
        let started: f64 = stat.rsplit(')').next()?.split_whitespace().nth(19)?.parse().ok()?;
        let uptime: f64 = std::fs::read_to_string("/proc/uptime").ok()?.split_whitespace().next()?.parse().ok()?;
        Some(uptime - started / 100.0) // USER_HZ is 100 on Linux
    }

    /// The broker's maximum heap, its `-Xmx` (e.g. `1g`), from its command line.
    pub fn broker_heap(&self) -> Option<String> {
        let cmdline = std::fs::read(format!("/proc/{}/cmdline", self.pid("kafka")?)).ok()?;
        jvm_max_heap(&cmdline)
    }

    /// The stack's folder (`SLUICE_STACK_DIR`), when known.
    pub fn dir(&self) -> Option<&std::path::Path> {
        self.dir.as_deref()
    }

    /// The pid of the stack's `kafka` or `redis` (from its pid file).
    pub fn pid(&self, kind: &str) -> Option<String> {
        let dir = self.dir.as_ref()?;
        Some(std::fs::read_to_string(dir.join(format!("{kind}.pid"))).ok()?.trim().to_string())
    }

    pub async fn redis(&self) -> Result<redis::aio::MultiplexedConnection> {
        let client = redis::Client::open(self.redis_url.as_str())?;
        Ok(client.get_multiplexed_async_connection().await?)
    }

    /// Redis's `connected_clients`.
    pub async fn redis_clients(conn: &mut redis::aio::MultiplexedConnection) -> Result<i64> {
        let info: String = redis::cmd("INFO").arg("clients").query_async(conn).await?;
        info.lines()
            .find_map(|l| l.strip_prefix("connected_clients:"))
            .and_then(|v| v.trim().parse().ok())
            .context("INFO clients has no connected_clients")
    }

    /// The processor's configuration for a run: `input` consumed by `group`,
    /// swaps to `<input>.swaps`, Redis keys under `<input>:`, statistics
    /// every second; `extra` are further `SLUICE_PROCESSOR_` settings.
    pub fn processor_config(
        &self,
        input: &str,
        group: &str,
        extra: &[(&str, String)],
    ) -> Result<(RuntimeConfig, RedisConfig, DexConfig)> {
        // Later settings win: `extra` overrides the defaults above it.
        let vars: std::collections::BTreeMap<String, String> = [
            ("KAFKA_BROKERS", self.kafka.brokers.clone()),
            (
                "KAFKA_PROPERTIES",
                ["statistics.interval.ms=1000", self.processor_properties.as_deref().unwrap_or("")].join(","),
            ),
            ("REDIS_URL", self.redis_url.clone()),
            ("GROUP_ID", group.to_string()),
            ("INPUT_TOPIC", input.to_string()),
            ("DLQ_TOPIC", format!("{input}.dlq")),
            ("SWAPS_TOPIC", format!("{input}.swaps")),
            ("REDIS_PREFIX", format!("{input}:")),
            ("ADMIN_LISTEN", "127.0.0.1:0".to_string()),
        ]
        .into_iter()
        .chain(extra.iter().cloned())
        .map(|(k, v)| (format!("SLUICE_PROCESSOR_{k}"), v))
        .collect();
        let mut env = EnvReader::from_vars("SLUICE_PROCESSOR_", vars);
        let runtime = RuntimeConfig::read(&mut env, &sluice_dex::handler::DEFAULTS);
        let redis = RedisConfig::read(&mut env);
        let dex = DexConfig::read(&mut env);
        env.finish().context("benchmark processor configuration")?;
        let context = "benchmark processor configuration";
        Ok((runtime.context(context)?, redis.context(context)?, dex))
    }

    /// The input topic with `partitions`, and its swaps and dead-letter topics.
    pub async fn processor_topics(&self, input: &str, partitions: i32) -> Result<()> {
        self.create_topics(&[
            (input, partitions),
            (&format!("{input}.swaps"), partitions),
            (&format!("{input}.dlq"), 3),
        ])
        .await
    }
}

/// When each record was meant to be sent, for open-loop latency: record `j`
/// of the feed is due at `start + j / rate`. Latency is measured from that
/// time, not from when the feeder managed to send it, so a stall anywhere
/// (feeder, broker, processor) counts against every record it delayed:
/// coordinated omission corrected.
#[derive(Debug)]
pub struct Schedule {
    start: OnceLock<Instant>,
    rate: f64,
    /// Records of the first second, left out of the latency (warm-up).
    warmup: usize,
    /// partition → offset → feed index (fresh topic: offsets start at 0).
    index: Vec<Vec<u32>>,
}

impl Schedule {
    pub fn new(traffic: &Traffic, total: usize, partitioner: &Partitioner, partitions: usize, rate: f64) -> Self {
        let mut index = vec![Vec::with_capacity(total / partitions + 1); partitions];
        for j in 0..total {
            index[partitioner(traffic.record(j).0)].push(j as u32);
        }
        Self { start: OnceLock::new(), rate, warmup: rate as usize, index }
    }

    fn due(&self, j: usize) -> Option<Instant> {
        Some(*self.start.get()? + Duration::from_nanos((j as f64 * 1e9 / self.rate) as u64))
    }

    /// Starts the schedule at `start` (once; later calls change nothing).
    pub fn start_at(&self, start: Instant) {
        let _ = self.start.set(start);
    }

    /// Records/s.
    pub fn rate(&self) -> f64 {
        self.rate
    }

    /// The feed's length in whole seconds, rounded up.
    fn seconds(&self) -> usize {
        let records: usize = self.index.iter().map(Vec::len).sum();
        (records as f64 / self.rate).ceil() as usize
    }

    /// When the record at `partition`/`offset` was due, and whether it
    /// falls in the warm-up second.
    fn due_of(&self, partition: i32, offset: i64) -> Option<(Instant, bool)> {
        let j = *self.index.get(partition as usize)?.get(offset as usize)? as usize;
        Some((self.due(j)?, j < self.warmup))
    }
}

/// Completions seen by [`Measured`]: count, first and last, and latency
/// (from the schedule when there is one, else the handler's own time).
#[derive(Debug)]
pub struct Progress {
    done: AtomicU64,
    base: Instant,
    first_ns: AtomicU64,
    last_ns: AtomicU64,
    histograms: Vec<Mutex<Histogram<u64>>>,
    schedule: Option<Arc<Schedule>>,
    /// Records whose offset the schedule does not know (should stay 0).
    pub unscheduled: AtomicU64,
    /// Per second of the schedule, by completion time: completions and the
    /// worst latency among them (empty without a schedule).
    seconds: Vec<SecondCounts>,
}

/// Seconds after a feed's end that still get a slot of their own (an open
/// loop waits up to 300 s for its last completion).
const SECONDS_AFTER_FEED: usize = 300;

#[derive(Debug, Default)]
struct SecondCounts {
    done: AtomicU64,
    max_ns: AtomicU64,
}

/// One second of an open loop, by completion time.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct CompletedSecond {
    pub done: u64,
    /// The worst due-to-completion latency of the records completed in it.
    pub max_ms: f64,
}

impl Progress {
    pub fn new(partitions: usize, schedule: Option<Arc<Schedule>>) -> Arc<Self> {
        Arc::new(Self {
            done: AtomicU64::new(0),
            base: Instant::now(),
            first_ns: AtomicU64::new(u64::MAX),
            last_ns: AtomicU64::new(0),
            histograms: (0..partitions.max(1)).map(|_| Mutex::new(histogram())).collect(),
            seconds: (0..schedule.as_ref().map_or(0, |s| s.seconds() + SECONDS_AFTER_FEED))
                .map(|_| SecondCounts::default())
                .collect(),
            schedule,
            unscheduled: AtomicU64::new(0),
        })
    }

    fn complete(&self, record: &Record, started: Instant) {
        let now = Instant::now();
        let (from, warmup) = match &self.schedule {
            Some(s) => s.due_of(record.partition, record.offset).unwrap_or_else(|| {
                self.unscheduled.fetch_add(1, Ordering::Relaxed);
                (started, false)
            }),
            None => (started, false),
        };
        let ns = now.saturating_duration_since(from).as_nanos() as u64;
        let slot = record.partition as usize % self.histograms.len();
        if !warmup && let Ok(mut h) = self.histograms[slot].lock() {
            let _ = h.record(ns.max(1));
        }
        if let Some(second) = self.second_of(now) {
            second.done.fetch_add(1, Ordering::Relaxed);
            second.max_ns.fetch_max(ns, Ordering::Relaxed);
        }
        let at = now.duration_since(self.base).as_nanos() as u64;
        self.first_ns.fetch_min(at, Ordering::Relaxed);
        self.last_ns.fetch_max(at, Ordering::Relaxed);
        self.done.fetch_add(1, Ordering::Relaxed);
    }

    /// The slot of the schedule's second `now` falls in (the last slot
    /// takes whatever completes later).
    fn second_of(&self, now: Instant) -> Option<&SecondCounts> {
        let start = *self.schedule.as_ref()?.start.get()?;
        let i = now.saturating_duration_since(start).as_secs() as usize;
        self.seconds.get(i.min(self.seconds.len().checked_sub(1)?))
    }

    /// Completions and worst latency per second of the schedule, up to the
    /// last second that saw a completion.
    pub fn timeline(&self) -> Vec<CompletedSecond> {
        let mut seconds: Vec<CompletedSecond> = self
            .seconds
            .iter()
            .map(|s| CompletedSecond {
                done: s.done.load(Ordering::Relaxed),
                max_ms: s.max_ns.load(Ordering::Relaxed) as f64 / 1e6,
            })
            .collect();
        while seconds.last().is_some_and(|s| s.done == 0) {
            seconds.pop();
        }
        seconds
    }

    pub fn done(&self) -> u64 {
        self.done.load(Ordering::Relaxed)
    }

    /// Seconds from the first completion to the last.
    pub fn span_seconds(&self) -> f64 {
        let (first, last) = (self.first_ns.load(Ordering::Relaxed), self.last_ns.load(Ordering::Relaxed));
        if first == u64::MAX { 0.0 } else { (last.saturating_sub(first)) as f64 / 1e9 }
    }

    pub fn latency(&self) -> Histogram<u64> {
        let mut merged = histogram();
        for h in &self.histograms {
            if let Ok(h) = h.lock() {
                let _ = merged.add(&*h);
            }
        }
        merged
    }
}

impl Probe {
    /// Reports to `progress`, no added IO.
    pub fn of(progress: &Arc<Progress>) -> Self {
        Self { progress: progress.clone(), io: Duration::ZERO }
    }
}

/// A handler that runs `inner` (optionally after a simulated IO wait) and
/// reports each record that is done with (handled, or bound for the
/// dead-letter topic) to its [`Progress`].
#[derive(Debug)]
pub struct Measured<H> {
    pub inner: H,
    pub probe: Probe,
}

/// Where [`Measured`] reports, and the IO wait it adds to every record
/// before the inner handler runs (lag-drain experiment; zero otherwise).
#[derive(Debug, Clone)]
pub struct Probe {
    pub progress: Arc<Progress>,
    pub io: Duration,
}

impl<H: Handler> Handler for Measured<H> {
    async fn handle(&self, record: &Record) -> Result<Handled, HandleError> {
        let started = Instant::now();
        if !self.probe.io.is_zero() {
            tokio::time::sleep(self.probe.io).await;
        }
        let result = self.inner.handle(record).await;
        if !matches!(result, Err(HandleError::Transient { .. })) {
            self.probe.progress.complete(record, started);
        }
        result
    }

    /// The inner handler's batches, each record reported once its result
    /// is in (the simulated IO wait, when set, stays per record).
    async fn handle_batch(&self, records: &[Record]) -> Vec<Result<Handled, HandleError>> {
        let started = Instant::now();
        let results = self.inner.handle_batch(records).await;
        for (record, result) in records.iter().zip(&results) {
            if !matches!(result, Err(HandleError::Transient { .. })) {
                self.probe.progress.complete(record, started);
            }
        }
        results
    }

    fn batching(&self) -> Batching {
        if self.probe.io.is_zero() { self.inner.batching() } else { Batching::PerRecord }
    }

    fn ready(&self) -> Result<(), sluice_service::admin::NotReady> {
        self.inner.ready()
    }

    fn state_generation(&self) -> Option<String> {
        self.inner.state_generation()
    }
}

/// A processor instance running in this process (its own consumer thread,
/// sinks and admin server), stopped like a pod: graceful shutdown.
#[derive(Debug)]
pub struct Instance {
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<Result<(), RuntimeError>>,
    pub metrics: RuntimeMetrics,
    handle: Arc<OnceLock<RuntimeHandle>>,
}

impl Instance {
    /// Starts the runtime with the handler `make` builds on its sinks.
    pub fn start<H: Handler>(config: RuntimeConfig, make: impl FnOnce(&Runtime) -> Result<H>) -> Result<Self> {
        let runtime = Runtime::new(config, sluice_dex::handler::IDENTITY).context("starting the runtime")?;
        let handler = make(&runtime)?;
        let metrics = runtime.metrics().clone();
        let handle = Arc::new(OnceLock::new());
        let (stop, stopped) = oneshot::channel::<()>();
        let task = {
            let handle = handle.clone();
            tokio::spawn(runtime.run(
                handler,
                async {
                    let _ = stopped.await;
                },
                move |h| {
                    let _ = handle.set(h);
                },
            ))
        };
        Ok(Self { stop: Some(stop), task, metrics, handle })
    }

    /// Partitions assigned to this instance now.
    pub fn assigned(&self) -> usize {
        self.handle.get().map_or(0, |h| h.health.assigned.load(Ordering::Relaxed))
    }

    pub async fn stop(mut self) -> Result<()> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        self.task.await.context("runtime task")?.context("runtime shutdown")
    }
}

/// Waits until `instances` together own all `partitions`.
pub async fn await_assigned(instances: &[Instance], partitions: usize, timeout: Duration) -> Result<()> {
    let deadline = Instant::now() + timeout;
    while instances.iter().map(Instance::assigned).sum::<usize>() < partitions
        || instances.iter().any(|i| i.assigned() == 0)
    {
        if Instant::now() > deadline {
            let each: Vec<usize> = instances.iter().map(Instance::assigned).collect();
            bail!("partitions not assigned within {timeout:?}: {each:?} of {partitions}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(())
}

/// Waits until `progress` counts `expected` records, printing a progress
/// line every second.
pub async fn await_done(progress: &Progress, expected: u64, label: &str, timeout: Duration) -> Result<()> {
    let started = Instant::now();
    let mut last_print = Instant::now();
    while progress.done() < expected {
        if started.elapsed() > timeout {
            bail!("{label}: {} of {expected} records done after {timeout:?}", progress.done());
        }
        if last_print.elapsed() >= Duration::from_secs(1) {
            last_print = Instant::now();
            let n = progress.done();
            eprint!("\r  {label}: {n:>10} / {expected} records  {:>6.1} s   ", started.elapsed().as_secs_f64());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    eprintln!("\r  {label}: {expected} records done in {:.1} s{:>30}", started.elapsed().as_secs_f64(), "");
    Ok(())
}

/// Which partition a key goes to.
pub type Partitioner = Arc<dyn Fn(&str) -> usize + Send + Sync>;

/// Keys dealt evenly over `n` partitions ([`Traffic::balanced`]).
pub fn balanced(traffic: &Traffic, n: usize) -> Partitioner {
    by_map(traffic.balanced(n), n)
}

/// The partitions `map` gives its keys; any other key hashed over `n`.
pub fn by_map(map: std::collections::HashMap<String, usize>, n: usize) -> Partitioner {
    Arc::new(move |key| map.get(key).copied().unwrap_or_else(|| partition_of(key, n)))
}

/// A bare rdkafka consume-and-commit loop: the processor's consumer
/// settings, each record's payload touched, positions committed every
/// commit interval (as the processor does) and at the end.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct Bare {
    pub records: u64,
    pub bytes: u64,
    /// First record to last.
    pub seconds: f64,
    pub records_per_sec: f64,
}

pub fn bare_consume(config: &RuntimeConfig, expected: u64, timeout: Duration) -> Result<Bare> {
    let consumer: BaseConsumer = config.consumer_client().create()?;
    consumer.subscribe(&[&config.input_topic])?;
    let deadline = Instant::now() + timeout;
    let (mut records, mut bytes) = (0u64, 0u64);
    let mut positions: Vec<i64> = Vec::new();
    let mut first: Option<Instant> = None;
    let mut last = Instant::now();
    let mut last_commit = Instant::now();
    let commit = |positions: &[i64], mode: CommitMode| -> Result<()> {
        let mut tpl = TopicPartitionList::new();
        for (p, &o) in positions.iter().enumerate().filter(|(_, o)| **o > 0) {
            tpl.add_partition_offset(&config.input_topic, p as i32, Offset::Offset(o))?;
        }
        if tpl.count() > 0 {
            consumer.commit(&tpl, mode)?;
        }
        Ok(())
    };
    while records < expected {
        if Instant::now() > deadline {
            bail!("bare consumer: {records} of {expected} records after {timeout:?}");
        }
        let Some(message) = consumer.poll(Duration::from_millis(100)) else { continue };
        let message = message?;
        first.get_or_insert_with(Instant::now);
        last = Instant::now();
        records += 1;
        bytes += message.payload().map_or(0, <[u8]>::len) as u64 + message.key().map_or(0, <[u8]>::len) as u64;
        let p = message.partition() as usize;
        if positions.len() <= p {
            positions.resize(p + 1, 0);
        }
        positions[p] = message.offset() + 1;
        if last_commit.elapsed() >= config.commit_interval {
            last_commit = Instant::now();
            commit(&positions, CommitMode::Async)?;
        }
    }
    commit(&positions, CommitMode::Sync)?;
    let seconds = first.map_or(0.0, |f| last.duration_since(f).as_secs_f64());
    Ok(Bare { records, bytes, seconds, records_per_sec: records as f64 / seconds.max(1e-9) })
}

/// The last `-Xmx` of a NUL-separated command line (the JVM takes the last).
fn jvm_max_heap(cmdline: &[u8]) -> Option<String> {
    cmdline
        .split(|b| *b == 0)
        .filter_map(|arg| arg.strip_prefix(b"-Xmx"))
        .next_back()
        .map(|size| String::from_utf8_lossy(size).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_broker_heap_is_the_last_xmx() {
        assert_eq!(jvm_max_heap(b"java\0-Xmx512m\0-Xms512m\0-Xmx1g\0kafka.Kafka\0").as_deref(), Some("1g"));
        assert_eq!(jvm_max_heap(b"java\0-Xms1g\0kafka.Kafka\0"), None);
    }
}
