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
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};
use sluice_kafka::KafkaConfig;

use crate::live::{Fed, by_map, produce};
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
    let kafka = KafkaConfig::new(spec.brokers);
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
