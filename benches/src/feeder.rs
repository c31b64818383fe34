//! The open-loop feeder in its own process (`sluice-bench feed`, started by
//! the benchmark itself), so the benchmark process's CPU, context switches
//! and threads are the processor's alone, and the feeder's are measured
//! apart.
//!
//! The protocol, one JSON line at a time: the parent writes a [`FeedSpec`]
//! to the child's stdin; the child builds the traffic, connects its
//! producer and answers `ready`; the parent writes the start time (Unix
//! ns), which the child waits for and paces from; the child answers with
//! what it fed ([`Fed`]) and exits. The traffic is chainsim's, rebuilt from
//! the same seed, so the child sends exactly the records the parent's
//! schedule expects, to the partitions the parent chose.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rdkafka::ClientContext;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::{BaseRecord, DeliveryResult, Producer, ProducerContext, ThreadedProducer};

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};
use sluice_kafka::KafkaConfig;

use crate::live::{Partitioner, Schedule, by_map};
use crate::traffic::Traffic;

/// What the child feeds.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FeedSpec {
    pub brokers: String,
    pub topic: String,
    /// The parent's traffic size; the child builds only the prefix it sends.
    pub transactions: u64,
    pub total: usize,
    /// Records/s.
    pub rate: f64,
    /// Key → partition, as the parent's partitioner deals them.
    pub partitions: HashMap<String, usize>,
    pub partition_count: usize,
    /// Extra librdkafka properties for the feeder's producer (`k=v,k=v`),
    /// over the ingest's defaults it stands in for.
    #[serde(default)]
    pub properties: Option<String>,
}

/// A running feeder process, connected and waiting for its start.
#[derive(Debug)]
pub struct Feeder {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    pid: String,
}

impl Feeder {
    /// Starts `sluice-bench feed` and waits until its producer is connected.
    pub fn spawn(spec: &FeedSpec) -> Result<Self> {
        let exe = std::env::current_exe().context("the benchmark's own binary")?;
        let mut child = Command::new(exe)
            .arg("feed")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .context("starting the feeder process")?;
        let (Some(mut stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            bail!("the feeder process has no pipes");
        };
        writeln!(stdin, "{}", serde_json::to_string(spec)?).context("sending the feed spec")?;
        let mut feeder = Self { pid: child.id().to_string(), child, stdin, stdout: BufReader::new(stdout) };
        let line = feeder.line().context("waiting for the feeder to connect")?;
        if line != "ready" {
            bail!("the feeder said {line:?}, not ready");
        }
        Ok(feeder)
    }

    /// For /proc: the feeder's CPU and context switches.
    pub fn pid(&self) -> &str {
        &self.pid
    }

    /// Tells the feeder to start `lead` from now; returns that instant.
    pub fn start(&mut self, lead: Duration) -> Result<Instant> {
        let at = Instant::now() + lead;
        let unix_ns = (SystemTime::now() + lead).duration_since(UNIX_EPOCH)?.as_nanos();
        writeln!(self.stdin, "{unix_ns}").context("starting the feeder")?;
        Ok(at)
    }

    /// Waits for the feed's end and the process's exit.
    pub fn finish(mut self) -> Result<Fed> {
        let line = self.line().context("waiting for the feeder's figures")?;
        let fed: Fed = serde_json::from_str(&line).with_context(|| format!("the feeder's figures: {line:?}"))?;
        let status = self.child.wait()?;
        if !status.success() {
            bail!("the feeder exited with {status}");
        }
        Ok(fed)
    }

    fn line(&mut self) -> Result<String> {
        let mut line = String::new();
        if self.stdout.read_line(&mut line)? == 0 {
            let status = self.child.wait()?;
            bail!("the feeder process ended ({status}) without answering");
        }
        Ok(line.trim().to_string())
    }
}

impl Drop for Feeder {
    fn drop(&mut self) {
        // A feeder abandoned by an error must not keep producing.
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// The child's side: reads the spec from stdin, feeds, answers on stdout.
#[allow(clippy::print_stdout)]
pub fn serve() -> Result<()> {
    let mut input = std::io::stdin().lock();
    let mut line = String::new();
    input.read_line(&mut line).context("reading the feed spec")?;
    let spec: FeedSpec = serde_json::from_str(&line).context("the feed spec")?;
    let traffic = Traffic::generate_prefix(spec.transactions, spec.total);
    let partitioner = by_map(spec.partitions, spec.partition_count.max(1));
    let mut kafka = KafkaConfig::new(spec.brokers);
    let vars = spec.properties.iter().map(|p| ("FEEDER_KAFKA_PROPERTIES".to_string(), p.clone()));
    let mut env = sluice_service::env::EnvReader::from_vars("FEEDER_", vars);
    kafka.properties = env.kafka_properties();
    env.finish().context("--feeder-properties")?;
    let fed = produce(&kafka, &spec.topic, &partitioner, &traffic, spec.total, || {
        println!("ready");
        std::io::stdout().flush()?;
        let mut start = String::new();
        input.read_line(&mut start).context("reading the start time")?;
        let unix_ns: u128 = start.trim().parse().context("the start time")?;
        let now_ns = SystemTime::now().duration_since(UNIX_EPOCH)?.as_nanos();
        let lead = Duration::from_nanos(unix_ns.saturating_sub(now_ns) as u64);
        Ok(Some((Instant::now() + lead, spec.rate)))
    })?;
    println!("{}", serde_json::to_string(&fed)?);
    Ok(())
}

/// What a feed sent.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Fed {
    pub records: u64,
    /// From the first send to the last (acknowledgements awaited after).
    pub seconds: f64,
    pub records_per_sec: f64,
    /// A paced feed's lateness, per second of its schedule: how long after
    /// its due time the most overdue record of that second was handed to the
    /// producer, ms (a feeder that falls behind delays records before any
    /// other part sees them). Empty for an unpaced feed.
    #[serde(default)]
    pub late_ms_by_second: Vec<f64>,
}

/// How a feed is paced: not at all (as fast as the producer takes the
/// records), or record `j` due at `start + j / rate` (records/s).
pub type Pace = Option<(Instant, f64)>;

/// Produces `total` records of `traffic` to `topic` (each key to its
/// partition) on its own thread: as fast as the producer takes them,
/// or paced by `schedule` (each record sent once it is due).
pub fn feed(
    kafka: &KafkaConfig,
    topic: &str,
    partitioner: Partitioner,
    traffic: Arc<Traffic>,
    total: usize,
    schedule: Option<Arc<Schedule>>,
) -> std::thread::JoinHandle<Result<Fed>> {
    let (kafka, topic) = (kafka.clone(), topic.to_string());
    std::thread::spawn(move || {
        produce(&kafka, &topic, &partitioner, &traffic, total, || {
            let started = Instant::now();
            Ok(schedule.map(|s| {
                s.start_at(started);
                (started, s.rate())
            }))
        })
    })
}

/// The feed itself: connects, then asks `begin` how to pace (it may wait
/// for a start signal), then sends. Cheap per record, so the rate search
/// finds the processor's limit rather than the feeder's: the ingest's
/// producer settings, but a `ThreadedProducer` whose delivery callback only
/// counts (no future or allocation per record), and paced in steps: every
/// record due by now goes out, then one sleep until the next is due (at
/// least [`PACE_STEP`], so a step sends a few dozen records, not one).
pub fn produce(
    kafka: &KafkaConfig,
    topic: &str,
    partitioner: &Partitioner,
    traffic: &Traffic,
    total: usize,
    begin: impl FnOnce() -> Result<Pace>,
) -> Result<Fed> {
    let producer: ThreadedProducer<Counting> = kafka.producer().create_with_context(Counting::default())?;
    producer.client().fetch_metadata(Some(topic), Duration::from_secs(10))?;
    let pace = begin()?;
    if let Some((start, _)) = pace {
        std::thread::sleep(start.saturating_duration_since(Instant::now()));
    }
    let started = pace.map_or_else(Instant::now, |(start, _)| start);
    let mut late = Lateness::default();
    let mut j = 0;
    while j < total {
        let due = match pace {
            None => total,
            Some((_, rate)) => {
                let elapsed = started.elapsed().as_secs_f64();
                late.note(elapsed, elapsed - j as f64 / rate);
                ((elapsed * rate) as usize + 1).min(total)
            }
        };
        while j < due {
            let (key, payload) = traffic.record(j);
            let record = BaseRecord::to(topic).key(key).payload(payload).partition(partitioner(key) as i32);
            match producer.send(record) {
                Ok(()) => j += 1,
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), _)) => {
                    std::thread::sleep(Duration::from_millis(1));
                }
                Err((e, _)) => bail!("feeding {topic}: {e}"),
            }
        }
        if let Some((_, rate)) = pace {
            let next = started + Duration::from_secs_f64(j as f64 / rate);
            std::thread::sleep(next.saturating_duration_since(Instant::now()).max(PACE_STEP));
        }
    }
    // Until the last record was handed to the producer: a paced feed
    // that keeps its schedule takes the schedule's length.
    let seconds = started.elapsed().as_secs_f64();
    producer.flush(Duration::from_secs(60))?;
    let context = producer.context();
    let (delivered, failed) = (context.delivered.load(Ordering::Relaxed), context.failed.load(Ordering::Relaxed));
    if failed > 0 || delivered != total as u64 {
        bail!("feeding {topic}: {delivered} of {total} records delivered, {failed} failed");
    }
    Ok(Fed { records: total as u64, seconds, records_per_sec: total as f64 / seconds, late_ms_by_second: late.0 })
}

/// The most a paced feed was behind its schedule, per second of it, ms.
#[derive(Debug, Default)]
struct Lateness(Vec<f64>);

impl Lateness {
    /// At `elapsed` seconds into the feed the next record was `behind`
    /// seconds overdue (negative: not yet due).
    fn note(&mut self, elapsed: f64, behind: f64) {
        let second = elapsed.max(0.0) as usize;
        if self.0.len() <= second {
            self.0.resize(second + 1, 0.0);
        }
        self.0[second] = self.0[second].max(behind.max(0.0) * 1e3);
    }
}

/// The shortest sleep of a paced feed.
const PACE_STEP: Duration = Duration::from_micros(500);

/// Counts the feed's deliveries and failures.
#[derive(Debug, Default)]
struct Counting {
    delivered: AtomicU64,
    failed: AtomicU64,
}

impl ClientContext for Counting {}

impl ProducerContext for Counting {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        let counter = if result.is_ok() { &self.delivered } else { &self.failed };
        counter.fetch_add(1, Ordering::Relaxed);
    }
}
