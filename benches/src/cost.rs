//! What a phase cost, per record: CPU of this process (the processor, or
//! the ceiling loop: the feeder runs in its own process), of the broker, of
//! Redis and of the feeder; context switches of each; this process's and
//! the broker's CPU by thread; and what the broker served, from its JMX.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::Result;
use serde::Serialize;

use crate::jmx::{Counts, Jmx, Served};
use crate::live::Stack;
use crate::machine;

/// Counters at one moment.
#[derive(Debug, Clone)]
pub struct Sample {
    at: Instant,
    cpu: [Duration; 4],
    switches: [u64; 4],
    threads: BTreeMap<String, Duration>,
    broker_threads: BTreeMap<String, Duration>,
    broker: Counts,
}

/// A phase's cost. CPU-µs and context switches per record, for
/// `[this process, broker, Redis, feeder]` (feeder 0 when it did not run).
#[derive(Debug, Clone, Serialize)]
pub struct Cost {
    pub seconds: f64,
    pub records: u64,
    pub cpu_us_per_record: PerProcess<f64>,
    pub context_switches_per_record: PerProcess<f64>,
    /// This process's CPU-µs per record by thread name (digits dropped), largest first.
    pub threads_cpu_us_per_record: Vec<(String, f64)>,
    /// The broker's, likewise: the JVM names a thread by its first 15
    /// characters, so `data-plane-kafk` is the network threads and the
    /// request handlers together; `GC Thread#`, `G1 …` the collector,
    /// `C2 CompilerThre` / `C1 …` the JIT.
    pub broker_threads_cpu_us_per_record: Vec<(String, f64)>,
    /// Cores used during the phase, by process.
    pub cores: PerProcess<f64>,
    pub broker: Served,
}

#[derive(Debug, Clone, Copy, Serialize)]
pub struct PerProcess<T> {
    pub process: T,
    pub broker: T,
    pub redis: T,
    pub feeder: T,
}

impl PerProcess<f64> {
    /// The whole system's share: processor (or ceiling loop) + broker + Redis;
    /// the feeder, which stands in for the ingest, is left out.
    pub fn system(&self) -> f64 {
        self.process + self.broker + self.redis
    }
}

impl<T: Copy> PerProcess<T> {
    fn from(v: [T; 4]) -> Self {
        Self { process: v[0], broker: v[1], redis: v[2], feeder: v[3] }
    }
}

impl Sample {
    /// Takes the counters at a phase's start; `feeder` is the feeder
    /// process's pid, if one runs. The broker's JMX (when given) is read
    /// first: its JVM's start must not fall inside the window.
    pub fn start(stack: &Stack, jmx: Option<&Jmx>, feeder: Option<&str>) -> Result<Self> {
        let broker = jmx.map(Jmx::read).transpose()?.unwrap_or_default();
        Ok(Self { broker, ..Self::processes(stack, feeder) })
    }

    /// Takes the counters at a phase's end: /proc now, the broker's JMX
    /// right after (requests are counted, not timed, so reading them a
    /// moment later adds only the idle gap's few requests).
    pub fn end(stack: &Stack, jmx: Option<&Jmx>, feeder: Option<&str>) -> Result<Self> {
        let sample = Self::processes(stack, feeder);
        Ok(Self { broker: jmx.map(Jmx::read).transpose()?.unwrap_or_default(), ..sample })
    }

    fn processes(stack: &Stack, feeder: Option<&str>) -> Self {
        let pids = [Some("self".to_string()), stack.pid("kafka"), stack.pid("redis"), feeder.map(str::to_string)];
        let cpu = pids.clone().map(|p| p.map_or(Duration::ZERO, |p| machine::cpu_time(&p)));
        let switches = pids.map(|p| p.map_or(0, |p| machine::context_switches(&p)));
        let broker_threads = stack.pid("kafka").map(|p| machine::thread_cpu(&p)).unwrap_or_default();
        let threads = machine::thread_cpu("self");
        Self { at: Instant::now(), cpu, switches, threads, broker_threads, broker: Counts::default() }
    }

    /// From `self` to `after`, over `records`.
    pub fn cost(&self, after: &Sample, records: u64) -> Cost {
        let seconds = after.at.duration_since(self.at).as_secs_f64();
        let n = records.max(1) as f64;
        let cpu: [f64; 4] = std::array::from_fn(|i| after.cpu[i].saturating_sub(self.cpu[i]).as_secs_f64());
        let switches: [f64; 4] = std::array::from_fn(|i| after.switches[i].saturating_sub(self.switches[i]) as f64);
        Cost {
            seconds,
            records,
            cpu_us_per_record: PerProcess::from(cpu.map(|c| c * 1e6 / n)),
            context_switches_per_record: PerProcess::from(switches.map(|s| s / n)),
            threads_cpu_us_per_record: per_thread(&self.threads, &after.threads, n),
            broker_threads_cpu_us_per_record: per_thread(&self.broker_threads, &after.broker_threads, n),
            cores: PerProcess::from(cpu.map(|c| c / seconds.max(1e-9))),
            broker: self.broker.served(&after.broker, seconds),
        }
    }
}

/// CPU-µs per record of each thread name from `before` to `after`, over
/// `n` records, largest first; threads that did not run are left out.
fn per_thread(before: &BTreeMap<String, Duration>, after: &BTreeMap<String, Duration>, n: f64) -> Vec<(String, f64)> {
    let mut threads: Vec<(String, f64)> = after
        .iter()
        .map(|(name, t)| {
            let start = before.get(name).copied().unwrap_or_default();
            (name.clone(), t.saturating_sub(start).as_secs_f64() * 1e6 / n)
        })
        .filter(|(_, us)| *us > 0.0)
        .collect();
    threads.sort_by(|a, b| b.1.total_cmp(&a.1));
    threads
}
