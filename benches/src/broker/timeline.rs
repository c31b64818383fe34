//! An open loop second by second, and its worst stall named with its
//! evidence: what each process (and the rest of the machine) spent, how far
//! the feeder was behind its schedule, how long the processor's produce
//! acknowledgements took, how many partitions were paused, and the broker's
//! GC pauses (from its GC log), JIT compilation (its compiler threads) and
//! log segments rolled or deleted (from its log), and the machine's steal
//! time and waits on I/O (the kernel's pressure stall information). A stall is named by the
//! evidence that stands out in its window against the run's own medians, or
//! declared unexplained; the thresholds are [`Thresholds`].

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime};

use prometheus::core::Collector;
use serde::Serialize;
use sluice_runtime::metrics::RuntimeMetrics;

use crate::live::{CompletedSecond, Stack};
use crate::machine;

/// One second of an open loop (second `i` runs from the schedule's start + i s).
#[derive(Debug, Clone, Default, Serialize)]
pub struct Second {
    pub second: usize,
    /// Records completed in it, and the worst latency among them.
    pub done: u64,
    pub max_ms: f64,
    /// How far the feeder was behind its schedule at worst, ms.
    pub feeder_late_ms: f64,
    /// Cores used: this process (the processor), the broker, Redis, the
    /// feeder, and everything else on the machine.
    pub cores: Cores,
    /// The processor's produce acknowledgements (enqueue to the group's
    /// last acknowledgement): mean of those that ended in this second, ms.
    pub ack_ms: Option<f64>,
    /// Partitions paused at the second's end (in-flight budget spent).
    pub paused: i64,
    /// The broker's GC pauses that started in this second, summed, ms.
    pub gc_ms: f64,
    /// The broker's JIT compiler threads, cores.
    pub broker_jit_cores: f64,
    /// Log segments the broker rolled in this second (each roll flushes the
    /// segment before it), and logs it removed from disk (a deleted topic's
    /// partitions go `log.segment.delete.delay.ms` after the delete: 1 s on
    /// the stack since 2026-12-07, Kafka's 60 s before).
    pub segment_rolls: u32,
    pub logs_removed: u32,
    /// CPU the hypervisor took from this VM (steal), ms over all cores, and
    /// how long some task waited on I/O (the kernel's pressure stall
    /// information), ms.
    pub steal_ms: f64,
    pub io_wait_ms: f64,
}

#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Cores {
    pub process: f64,
    pub broker: f64,
    pub redis: f64,
    pub feeder: f64,
    pub other: f64,
}

/// The run's worst stall: the record completed latest after its due time,
/// the window it waited through, and what stood out there.
#[derive(Debug, Clone, Serialize)]
pub struct Stall {
    /// The second it completed in, and its latency.
    pub second: usize,
    pub latency_ms: f64,
    /// The seconds it waited through (from when it was due).
    pub window: (usize, usize),
    /// What stood out in the window; empty when nothing did.
    pub evidence: Vec<String>,
    /// `evidence` joined, or "unexplained: …" with the window's figures.
    pub verdict: String,
}

/// Samples counters once a second while an open loop runs.
pub struct Sampler {
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<Vec<Sample>>,
    wall_start: SystemTime,
    gc_log: Option<PathBuf>,
    /// The broker's log and its length when sampling started.
    broker_log: Option<(PathBuf, u64)>,
}

/// Cumulative counters at a second's end.
#[derive(Debug, Clone, Default)]
struct Sample {
    cpu: [Duration; 4],
    broker_jit: Duration,
    machine_busy: Duration,
    steal: Duration,
    io_wait: Duration,
    ack_sum: f64,
    ack_count: u64,
    paused: i64,
}

impl Sampler {
    /// Starts sampling at `start` (the schedule's start) for the processor
    /// (this process), the stack's broker and Redis, and the feeder `feeder`.
    pub fn start(stack: &Stack, metrics: &RuntimeMetrics, feeder: &str, start: Instant) -> Self {
        let pids = [Some("self".to_string()), stack.pid("kafka"), stack.pid("redis"), Some(feeder.to_string())];
        let stop = Arc::new(AtomicBool::new(false));
        let wall_start = SystemTime::now() + start.saturating_duration_since(Instant::now());
        let (metrics, stopped) = (metrics.clone(), stop.clone());
        let task = tokio::spawn(async move {
            tokio::time::sleep_until(start.into()).await;
            let mut samples = vec![sample(&pids, &metrics)];
            let mut tick = tokio::time::interval_at((start + Duration::from_secs(1)).into(), Duration::from_secs(1));
            while !stopped.load(Ordering::Relaxed) {
                tick.tick().await;
                samples.push(sample(&pids, &metrics));
            }
            samples
        });
        let broker_log = stack.dir().map(|d| d.join("logs/kafka.log")).map(|p| {
            let length = std::fs::metadata(&p).map_or(0, |m| m.len());
            (p, length)
        });
        Self { stop, task, wall_start, gc_log: stack.dir().map(|d| d.join("logs/kafka-gc.log")), broker_log }
    }

    /// Stops sampling and joins the samples with the completions and the
    /// feeder's lateness, second by second.
    pub async fn finish(self, completed: &[CompletedSecond], late_ms: &[f64]) -> Vec<Second> {
        self.stop.store(true, Ordering::Relaxed);
        let samples = self.task.await.unwrap_or_default();
        let gc = self.gc_log.as_deref().map(|p| gc_pauses(p, self.wall_start)).unwrap_or_default();
        let events =
            self.broker_log.as_ref().map(|(p, from)| log_events(p, *from, self.wall_start)).unwrap_or_default();
        let n = completed.len().max(samples.len().saturating_sub(1));
        (0..n)
            .map(|i| {
                let mut s = second(i, &samples, completed, late_ms, &gc);
                let here =
                    |kind: LogEvent| events.iter().filter(|(at, k)| *k == kind && at.floor() == i as f64).count();
                (s.segment_rolls, s.logs_removed) = (here(LogEvent::Roll) as u32, here(LogEvent::Removed) as u32);
                s
            })
            .collect()
    }
}

fn sample(pids: &[Option<String>; 4], metrics: &RuntimeMetrics) -> Sample {
    let ack = metrics.sink_seconds.with_label_values(&["kafka"]);
    let paused =
        metrics.paused.collect().iter().flat_map(|f| f.get_metric()).map(|m| m.get_gauge().get_value()).sum::<f64>();
    Sample {
        cpu: std::array::from_fn(|i| pids[i].as_deref().map_or(Duration::ZERO, machine::cpu_time)),
        broker_jit: pids[1].as_deref().map_or(Duration::ZERO, jit_time),
        machine_busy: machine::busy_time(),
        steal: machine::steal_time(),
        io_wait: machine::pressure("io"),
        ack_sum: ack.get_sample_sum(),
        ack_count: ack.get_sample_count(),
        paused: paused as i64,
    }
}

fn second(i: usize, samples: &[Sample], completed: &[CompletedSecond], late_ms: &[f64], gc: &[(f64, f64)]) -> Second {
    let mut s = Second { second: i, ..Second::default() };
    if let Some(c) = completed.get(i) {
        (s.done, s.max_ms) = (c.done, c.max_ms);
    }
    s.feeder_late_ms = late_ms.get(i).copied().unwrap_or(0.0);
    if let (Some(a), Some(b)) = (samples.get(i), samples.get(i + 1)) {
        let cores: [f64; 4] = std::array::from_fn(|k| b.cpu[k].saturating_sub(a.cpu[k]).as_secs_f64());
        let busy = b.machine_busy.saturating_sub(a.machine_busy).as_secs_f64();
        let [process, broker, redis, feeder] = cores;
        s.cores = Cores { process, broker, redis, feeder, other: (busy - cores.iter().sum::<f64>()).max(0.0) };
        s.broker_jit_cores = b.broker_jit.saturating_sub(a.broker_jit).as_secs_f64();
        s.steal_ms = b.steal.saturating_sub(a.steal).as_secs_f64() * 1e3;
        s.io_wait_ms = b.io_wait.saturating_sub(a.io_wait).as_secs_f64() * 1e3;
        let count = b.ack_count.saturating_sub(a.ack_count);
        s.ack_ms = (count > 0).then(|| (b.ack_sum - a.ack_sum) * 1e3 / count as f64);
        s.paused = b.paused;
    }
    // From 0.0, not the empty sum's -0.0.
    s.gc_ms = gc.iter().filter(|(at, _)| *at >= i as f64 && *at < (i + 1) as f64).fold(0.0, |sum, (_, ms)| sum + ms);
    s
}

/// The broker's GC pauses from its log (`-Xlog:gc:…:utctime`), as (seconds
/// after `start`, pause ms); none when the log is missing (a stack started
/// before the log was configured).
fn gc_pauses(path: &Path, start: SystemTime) -> Vec<(f64, f64)> {
    let Ok(text) = std::fs::read_to_string(path) else { return Vec::new() };
    let start_ms = start.duration_since(SystemTime::UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64() * 1e3);
    text.lines()
        .filter_map(parse_gc_line)
        .map(|(at_ms, pause)| ((at_ms - start_ms) / 1e3, pause))
        .filter(|(at, _)| *at >= -1.0)
        .collect()
}

/// `[2026-12-07T03:01:02.123+0000][gc] GC(12) Pause Young (Normal) (G1 Evacuation Pause) 120M->30M(512M) 3.456ms`
/// → (Unix ms of its end, 3.456). Lines that are not a pause give `None`.
fn parse_gc_line(line: &str) -> Option<(f64, f64)> {
    let stamp = line.strip_prefix('[')?.split(']').next()?;
    if !line.contains(" Pause ") {
        return None;
    }
    let pause: f64 = line.rsplit(' ').next()?.strip_suffix("ms")?.parse().ok()?;
    Some((unix_ms(stamp)?, pause))
}

/// CPU of a JVM's JIT compiler threads (`C1 CompilerThread0`, `C2 CompilerThread1`, …).
fn jit_time(pid: &str) -> Duration {
    machine::thread_cpu(pid).iter().filter(|(name, _)| name.contains("CompilerThre")).map(|(_, t)| *t).sum()
}

/// What the broker's log says happened to its logs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LogEvent {
    Roll,
    Removed,
}

/// The broker's segment rolls and log removals written to its log after byte
/// `from`, as (seconds after `start`, event).
fn log_events(path: &Path, from: u64, start: SystemTime) -> Vec<(f64, LogEvent)> {
    use std::io::{Read, Seek, SeekFrom};
    let mut text = String::new();
    let read = std::fs::File::open(path).and_then(|mut f| {
        f.seek(SeekFrom::Start(from))?;
        f.read_to_string(&mut text)
    });
    if read.is_err() {
        return Vec::new();
    }
    let start_ms = start.duration_since(SystemTime::UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64() * 1e3);
    text.lines().filter_map(parse_log_event).map(|(at_ms, e)| ((at_ms - start_ms) / 1e3, e)).collect()
}

/// `[2026-12-07 13:11:13,648] INFO [LocalLog partition=…] Rolled new log segment at offset 118753 in 6 ms. (…)`
/// → (Unix ms, Roll); `… INFO Deleted log for partition …` → Removed. The stack's
/// log4j2 pattern writes UTC (`deploy/local/kafka/log4j2.xml`).
fn parse_log_event(line: &str) -> Option<(f64, LogEvent)> {
    let event = if line.contains("] Rolled new log segment at offset ") {
        LogEvent::Roll
    } else if line.contains(" INFO Deleted log for partition ") {
        LogEvent::Removed
    } else {
        return None;
    };
    let stamp = line.strip_prefix('[')?.split(']').next()?;
    let (date, time) = stamp.split_once(' ')?;
    Some((sluice_service::utc::rfc3339_ms(&format!("{date}T{}Z", time.replace(',', ".")))? as f64, event))
}

/// `2026-12-07T03:01:02.123+0000` → Unix ms (UTC offsets only, as `utctime` writes).
fn unix_ms(stamp: &str) -> Option<f64> {
    Some(sluice_service::utc::rfc3339_ms(&format!("{}Z", stamp.strip_suffix("+0000")?))? as f64)
}

/// When a window's figure stands out against the run's median.
pub struct Thresholds;

impl Thresholds {
    /// A GC pause counts when it is 10 ms or a tenth of the stall.
    const GC_SHARE: f64 = 0.1;
    const GC_MIN_MS: f64 = 10.0;
    /// The feeder counts when it was behind by half the stall.
    const FEEDER_SHARE: f64 = 0.5;
    /// A process's cores count below half, or above 1.5×, its median.
    const STARVED: f64 = 0.5;
    const BUSY: f64 = 1.5;
    /// Other processes count above a quarter of a core.
    const OTHER_CORES: f64 = 0.25;
    /// Acknowledgements count above 3× their median.
    const ACK: f64 = 3.0;
    /// The machine counts as saturated at 90% of its cores busy: every
    /// other disturbance then queues.
    const SATURATED: f64 = 0.9;
    /// Steal counts from 50 ms and 3× its median; waiting on I/O from 20 ms
    /// and 3× its median.
    const STEAL_MIN_MS: f64 = 50.0;
    const IO_MIN_MS: f64 = 20.0;
    const MACHINE: f64 = 3.0;
    /// The broker's JIT counts from a quarter of a core: on a warm broker
    /// its compilers run under 0.1 (on 2 cores a compiling broker's first
    /// seconds at a new rate ran them at 0.4–0.8).
    const JIT_CORES: f64 = 0.25;
}

/// The worst stall of `seconds` (the completion with the highest latency),
/// named by what stands out in the seconds it waited through. The first
/// second is left out, as the latency distribution leaves out the records
/// due in it: the processor is still starting its first fetches.
pub fn worst_stall(seconds: &[Second], cores: f64) -> Option<Stall> {
    let worst = seconds.iter().skip(1).filter(|s| s.done > 0).max_by(|a, b| a.max_ms.total_cmp(&b.max_ms))?;
    // It completed within its second, so it was due from `latency` before that second's start.
    let from = (worst.second as f64 - worst.max_ms / 1e3).floor().max(0.0) as usize;
    let window: Vec<&Second> = seconds[from.min(worst.second)..=worst.second].iter().collect();
    let evidence = evidence(seconds, &window, worst.max_ms, cores);
    let verdict = if evidence.is_empty() { format!("unexplained: {}", figures(&window)) } else { evidence.join("; ") };
    Some(Stall { second: worst.second, latency_ms: worst.max_ms, window: (from, worst.second), evidence, verdict })
}

fn evidence(all: &[Second], window: &[&Second], stall_ms: f64, cores: f64) -> Vec<String> {
    let mut found = Vec::new();
    let median = |f: &dyn Fn(&Second) -> f64| {
        let mut v: Vec<f64> = all.iter().filter(|s| s.done > 0).map(f).collect();
        v.sort_by(f64::total_cmp);
        v.get(v.len() / 2).copied().unwrap_or(0.0)
    };
    let peak = |f: &dyn Fn(&Second) -> f64| {
        window.iter().map(|s| (s.second, f(s))).max_by(|a, b| a.1.total_cmp(&b.1)).unwrap_or((0, 0.0))
    };
    let low = |f: &dyn Fn(&Second) -> f64| {
        window.iter().map(|s| (s.second, f(s))).min_by(|a, b| a.1.total_cmp(&b.1)).unwrap_or((0, 0.0))
    };
    let (at, gc) = peak(&|s| s.gc_ms);
    if gc >= Thresholds::GC_MIN_MS.max(Thresholds::GC_SHARE * stall_ms) {
        found.push(format!("broker GC paused {gc:.0} ms in second {at}"));
    }
    let (at, late) = peak(&|s| s.feeder_late_ms);
    if late >= Thresholds::FEEDER_SHARE * stall_ms {
        found.push(format!("the feeder was {late:.0} ms behind its schedule in second {at}"));
    }
    for (name, get) in
        [("processor", (|s: &Second| s.cores.process) as fn(&Second) -> f64), ("broker", |s| s.cores.broker)]
    {
        let (m, (at, lo), (at_hi, hi)) = (median(&get), low(&get), peak(&get));
        if lo < Thresholds::STARVED * m {
            found.push(format!("the {name} ran {lo:.2} cores in second {at} (median {m:.2})"));
        }
        if hi > Thresholds::BUSY * m {
            found.push(format!("the {name} ran {hi:.2} cores in second {at_hi} (median {m:.2})"));
        }
    }
    let (at, other) = peak(&|s| s.cores.other);
    if other > Thresholds::OTHER_CORES.max(Thresholds::BUSY * median(&|s| s.cores.other)) {
        found.push(format!("other processes ran {other:.2} cores in second {at}"));
    }
    let (at, ack) = peak(&|s| s.ack_ms.unwrap_or(0.0));
    let ack_median = median(&|s| s.ack_ms.unwrap_or(0.0));
    if ack > Thresholds::ACK * ack_median && ack_median > 0.0 {
        found.push(format!("produce acknowledgements took {ack:.0} ms in second {at} (median {ack_median:.1})"));
    }
    let (at, busy) = peak(&|s| s.cores.process + s.cores.broker + s.cores.redis + s.cores.feeder + s.cores.other);
    if busy >= Thresholds::SATURATED * cores {
        found.push(format!(
            "the machine was {:.0}% busy in second {at} ({busy:.2} of {cores:.0} cores)",
            busy / cores * 100.0
        ));
    }
    let (at, steal) = peak(&|s| s.steal_ms);
    if steal >= Thresholds::STEAL_MIN_MS.max(Thresholds::MACHINE * median(&|s| s.steal_ms)) {
        found.push(format!("the hypervisor took {steal:.0} ms of CPU from the VM (steal) in second {at}"));
    }
    let (at, io) = peak(&|s| s.io_wait_ms);
    if io >= Thresholds::IO_MIN_MS.max(Thresholds::MACHINE * median(&|s| s.io_wait_ms)) {
        found.push(format!("tasks waited {io:.0} ms on I/O in second {at} (pressure stall information)"));
    }
    let (at, paused) = peak(&|s| s.paused as f64);
    if paused > 0.0 {
        found.push(format!("{paused:.0} partitions paused at second {at} (in-flight budget spent)"));
    }
    found.extend(broker_events(window));
    found
}

/// What the broker did to itself in the window: JIT compilation, segment
/// rolls, logs removed from disk.
fn broker_events(window: &[&Second]) -> Vec<String> {
    let mut found = Vec::new();
    let jit = window.iter().max_by(|a, b| a.broker_jit_cores.total_cmp(&b.broker_jit_cores));
    if let Some(s) = jit.filter(|s| s.broker_jit_cores >= Thresholds::JIT_CORES) {
        found.push(format!("the broker's JIT compilers ran {:.2} cores in second {}", s.broker_jit_cores, s.second));
    }
    let counted = |get: fn(&Second) -> u32| {
        let seconds: Vec<usize> = window.iter().filter(|s| get(s) > 0).map(|s| s.second).collect();
        let n: u32 = window.iter().map(|s| get(s)).sum();
        (n, seconds.first().copied(), seconds.last().copied())
    };
    let span = |first: Option<usize>, last: Option<usize>| match (first, last) {
        (Some(a), Some(b)) if a != b => format!("seconds {a}–{b}"),
        (Some(a), _) => format!("second {a}"),
        _ => String::new(),
    };
    if let (n @ 1.., first, last) = counted(|s| s.segment_rolls) {
        let what = if n == 1 { "log segment" } else { "log segments" };
        found.push(format!("the broker rolled {n} {what} in {} (each flushes the one before)", span(first, last)));
    }
    if let (n @ 1.., first, last) = counted(|s| s.logs_removed) {
        let what = if n == 1 { "log" } else { "logs" };
        found.push(format!("the broker removed {n} {what} of deleted topics from disk in {}", span(first, last)));
    }
    found
}

/// A window's figures, for an unexplained stall.
fn figures(window: &[&Second]) -> String {
    let parts: Vec<String> = window
        .iter()
        .map(|s| {
            format!(
                "s{} done {} cores p{:.2}/b{:.2}/r{:.2}/f{:.2}/o{:.2} ack {} gc {:.0} jit {:.2} steal {:.0} io {:.0}",
                s.second,
                s.done,
                s.cores.process,
                s.cores.broker,
                s.cores.redis,
                s.cores.feeder,
                s.cores.other,
                s.ack_ms.map_or("-".into(), |a| format!("{a:.1}")),
                s.gc_ms,
                s.broker_jit_cores,
                s.steal_ms,
                s.io_wait_ms
            )
        })
        .collect();
    parts.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_g1_pause_line_with_its_utc_time() {
        let line = "[2026-12-07T03:01:02.123+0000][gc] GC(12) Pause Young (Normal) (G1 Evacuation Pause) 120M->30M(512M) 3.456ms";
        let (at, pause) = parse_gc_line(line).expect("a pause");
        assert_eq!(pause, 3.456);
        // 2026-12-07T03:01:02.123Z
        assert_eq!(at, 1_796_612_462_123.0);
        assert_eq!(parse_gc_line("[2026-12-07T03:01:02.123+0000][gc] Using G1"), None);
    }

    fn steady(i: usize) -> Second {
        Second {
            second: i,
            done: 50_000,
            max_ms: 20.0,
            cores: Cores { process: 0.5, broker: 0.5, redis: 0.0, feeder: 0.2, other: 0.05 },
            ack_ms: Some(4.0),
            ..Second::default()
        }
    }

    #[test]
    fn a_stall_is_named_by_what_stands_out_in_its_window() {
        let mut seconds: Vec<Second> = (0..20).map(steady).collect();
        // A 1.3 s stall completing in second 12: the broker paused in second 11.
        seconds[12].max_ms = 1300.0;
        seconds[11].gc_ms = 900.0;
        seconds[11].cores.process = 0.1;
        seconds[10].cores.other = 0.65;
        let stall = worst_stall(&seconds, 2.0).expect("a stall");
        assert_eq!((stall.second, stall.window), (12, (10, 12)));
        assert!(stall.evidence.iter().any(|e| e.starts_with("broker GC paused 900 ms in second 11")), "{stall:?}");
        assert!(stall.evidence.iter().any(|e| e.contains("processor ran 0.10 cores")), "{stall:?}");
        assert!(
            stall.evidence.iter().any(|e| e.starts_with("the machine was 92% busy in second 10 (1.85 of 2 cores)")),
            "{stall:?}"
        );
        assert!(!stall.verdict.starts_with("unexplained"));
    }

    #[test]
    fn reads_the_brokers_rolls_and_removals_from_its_log() {
        let roll = "[2026-12-07 13:11:13,648] INFO [LocalLog partition=t-2, dir=/d/t-2] Rolled new log segment at offset 118753 in 6 ms. (org.apache.kafka.storage.internals.log.LocalLog)";
        assert_eq!(parse_log_event(roll), Some((1_796_649_073_648.0, LogEvent::Roll)));
        let removed = "[2026-12-07 13:11:29,426] INFO Deleted log for partition t.swaps-0 in /d/t.swaps-0.ef82-delete. (kafka.log.LogManager)";
        assert_eq!(parse_log_event(removed), Some((1_796_649_089_426.0, LogEvent::Removed)));
        let renamed = "[2026-12-07 13:10:29,412] INFO Log for partition t-1 is renamed to /d/t-1.8a20-delete and is scheduled for deletion (kafka.log.LogManager)";
        assert_eq!(parse_log_event(renamed), None);
    }

    #[test]
    fn the_brokers_jit_rolls_and_removals_name_a_stall() {
        let mut seconds: Vec<Second> = (0..40).map(steady).collect();
        seconds[26].max_ms = 70.0;
        seconds[26].segment_rolls = 12;
        seconds[25].broker_jit_cores = 0.77;
        seconds[25].logs_removed = 3;
        seconds[30].broker_jit_cores = 0.2;
        let stall = worst_stall(&seconds, 2.0).expect("a stall");
        assert_eq!(stall.window, (25, 26));
        assert_eq!(
            stall.evidence,
            [
                "the broker's JIT compilers ran 0.77 cores in second 25",
                "the broker rolled 12 log segments in second 26 (each flushes the one before)",
                "the broker removed 3 logs of deleted topics from disk in second 25",
            ]
        );
        // Below the threshold the JIT is not evidence.
        seconds[25] = steady(25);
        seconds[26].segment_rolls = 0;
        let stall = worst_stall(&seconds, 2.0).expect("a stall");
        assert!(stall.verdict.starts_with("unexplained: s25 done 50000"), "{}", stall.verdict);
        assert!(stall.verdict.ends_with("gc 0 jit 0.00 steal 0 io 0"), "{}", stall.verdict);
    }

    #[test]
    fn the_hypervisor_and_io_waits_name_a_stall_above_their_own_medians() {
        let mut seconds: Vec<Second> =
            (0..30).map(|i| Second { steal_ms: 10.0, io_wait_ms: 5.0, ..steady(i) }).collect();
        seconds[15].max_ms = 120.0;
        seconds[14].steal_ms = 140.0;
        seconds[15].io_wait_ms = 60.0;
        let stall = worst_stall(&seconds, 2.0).expect("a stall");
        assert_eq!(
            stall.evidence,
            [
                "the hypervisor took 140 ms of CPU from the VM (steal) in second 14",
                "tasks waited 60 ms on I/O in second 15 (pressure stall information)",
            ]
        );
        // Steady steal and I/O waits are the machine's, not the stall's.
        seconds[14].steal_ms = 29.0;
        seconds[15].io_wait_ms = 14.0;
        assert!(worst_stall(&seconds, 2.0).expect("a stall").verdict.starts_with("unexplained"));
    }

    #[test]
    fn a_stall_nothing_explains_is_declared_unexplained_with_its_figures() {
        let mut seconds: Vec<Second> = (0..20).map(steady).collect();
        seconds[7].max_ms = 300.0;
        // The first second is left out: its stall is the processor's start.
        seconds[0].max_ms = 900.0;
        let stall = worst_stall(&seconds, 2.0).expect("a stall");
        assert!(stall.evidence.is_empty(), "{stall:?}");
        assert!(stall.verdict.starts_with("unexplained: s6 done 50000"), "{}", stall.verdict);
    }
}
