//! What the demo shows and writes: the live view, the checks against the
//! chain, the summary, and the JSON report.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Serialize;
use sluice_core::pool::PoolState;
use sluice_proto::chain::v1::chain_client::ChainClient;
use sluice_proto::chain::v1::{GetPoolRequest, ListPoolsRequest};
use sluice_scheduler::model::Outcome;
use sluice_scheduler::store::Store;
use sluice_scheduler::store::redis::RedisStore;
use tonic::transport::Channel;

use crate::shutdown::Shutdown;

/// One second of the run.
#[derive(Debug, Clone, Serialize)]
pub struct Sample {
    pub t: f64,
    pub chain_head_slot: u64,
    /// Transactions the chain produced per second (from its schedule).
    pub chain_tx_per_sec: f64,
    pub ingest_tx_per_sec: f64,
    pub records_produced: u64,
    /// Consumer-group lag, records (high watermarks minus committed offsets).
    pub lag: u64,
    /// The group's time lag from sluice-lag: the age of its oldest unconsumed
    /// record, exact (`null` while sluice-lag has not read it).
    pub lag_seconds: Option<f64>,
    /// The group's status from sluice-lag (ok, warn, stall, …).
    pub lag_status: Option<String>,
    pub processors: u32,
    /// Records committed per second.
    pub records_per_sec: f64,
    /// End-to-end (event time to done) p99 over the last second, ms.
    pub p99_ms: Option<f64>,
    /// Freshness p99 over the last second: the swaps' age when readable (block time to their
    /// transaction's commit or acknowledgement), ms.
    pub freshness_p99_ms: Option<f64>,
    pub heartbeat_runs: u64,
    pub token_refresh_runs: u64,
    pub reconcile_runs: u64,
}

/// A scaling step.
#[derive(Debug, Clone, Serialize)]
pub struct Scaled {
    pub t: f64,
    pub lag: u64,
    pub from: u32,
    pub to: u32,
}

#[derive(Debug, Clone, Serialize)]
pub struct Settings {
    pub seconds: u64,
    pub rate: u32,
    pub partitions: u32,
    pub max_processors: u32,
    pub lag_threshold: u64,
    pub sync_seconds: u64,
    pub scale_down_window_seconds: u64,
    /// `--processor-cpu`: each local processor's CPU limit, millicores (0: unlimited).
    pub processor_cpu_millis: u32,
}

/// How often one job's scheduled ticks ran.
#[derive(Debug, Clone, Serialize)]
pub struct JobRuns {
    pub job: String,
    /// Ticks a run applied (its writes are the tick's effect, by the
    /// scheduler's ledger) or ran to success.
    pub ticks_run: u64,
    /// Ticks whose effect more than one run applied, or that more than one
    /// run succeeded (must be 0).
    pub ticks_run_twice: u64,
    pub ticks_missed: u64,
    pub ticks_skipped: u64,
    pub drift_found: u64,
}

/// The checks against the chain.
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    pub pools: usize,
    pub pools_matching: usize,
    /// Pools whose Redis state differs from the chain's at the same point (must be 0).
    pub pools_mismatched: Vec<String>,
    /// Pools whose last slot is the one the ingest was sending when it
    /// stopped (past its cursor; the chain has later swaps in it): not
    /// comparable, not wrong.
    pub pools_mid_slot: usize,
    /// Pools with no swap up to the ingest's cursor, on the chain too.
    pub pools_untouched: usize,
    /// The ingest's final cursor: every pool is checked at least up to it.
    pub ingest_cursor: Option<u64>,
    pub jobs: Vec<JobRuns>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub id: String,
    pub started_ms: i64,
    pub settings: Settings,
    pub records_produced: u64,
    pub records_consumed: u64,
    pub peak_lag: u64,
    pub drain_seconds: Option<f64>,
    /// With --kubernetes: from the drain until the HPA had the processors back at minReplicas.
    pub scale_down_seconds: Option<f64>,
    pub peak_processors: u32,
    /// Who scaled the processors: the stand-in engine or a real control plane.
    pub autoscaler: String,
    /// The chart values the policy came from, in helm's order: these files, then these
    /// `--set` pairs (`sluice-lag simulate` replays the run with the same policy).
    pub values_files: Vec<String>,
    pub values_set: Vec<(String, String)>,
    pub summary: Summary,
    /// The swaps' freshness and the processors' CPU per record over the run.
    pub signals: crate::signals::SignalsSummary,
    pub scaling: Vec<Scaled>,
    pub timeline: Vec<Sample>,
    /// `--chaos`: the faults and the outputs' check.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub chaos: Option<crate::chaos::ChaosReport>,
    /// With --kubernetes: the node the pods ran on, and every processor pod that served.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub pods: Vec<String>,
    /// With --kubernetes: each processor pod the run saw shutting down (scale-down, a rollout),
    /// from its log.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub shutdowns: Vec<Shutdown>,
    /// With --kubernetes: the outputs against the chain (exactly-once processors with their
    /// audit log, as in the soak): nothing lost, nothing applied twice.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub outputs: Option<crate::outputs::Outputs>,
}

impl Report {
    /// 0 mismatched pools, no tick run twice, the lag drained.
    pub fn passed(&self) -> bool {
        self.summary.pools_mismatched.is_empty()
            && self.summary.jobs.iter().all(|j| j.ticks_run_twice == 0)
            && self.drain_seconds.is_some()
            && self.chaos.as_ref().is_none_or(crate::chaos::ChaosReport::passed)
            && self.outputs.as_ref().is_none_or(crate::outputs::Outputs::passed)
            && self.shutdowns.iter().all(Shutdown::in_time)
    }
}

fn thousands(n: f64) -> String {
    let s = format!("{:.0}", n.max(0.0));
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// The live view (a few lines).
pub fn view(s: &Sample, seconds: u64, draining: bool, active_ingest: Option<usize>) -> String {
    let phase = if draining { "draining".to_string() } else { format!("{:>3.0}/{seconds} s", s.t) };
    let lag_s = s.lag_seconds.map_or("-".into(), |l| format!("{l:.1} s"));
    let status = s.lag_status.as_deref().unwrap_or("-");
    let p99 = s.p99_ms.map_or("-".to_string(), |p| format!("{p:.0} ms"));
    let fresh = s.freshness_p99_ms.map_or("-".to_string(), |p| format!("{p:.0} ms"));
    format!(
        "  {phase:<10} chain slot {:<6} {:>7} tx/s   ingest {:>7} tx/s (active: {})\n  \
         lag {:>8} records, time lag {lag_s:>6} ({status})  processors {}  throughput {:>7} records/s  p99 {p99}  \
         freshness p99 {fresh}\n  \
         scheduler runs: heartbeat {}, token-refresh {}, pool-reconcile {}",
        s.chain_head_slot,
        thousands(s.chain_tx_per_sec),
        thousands(s.ingest_tx_per_sec),
        active_ingest.map_or("none".to_string(), |i| format!("ingest-{i}")),
        thousands(s.lag as f64),
        s.processors,
        thousands(s.records_per_sec),
        s.heartbeat_runs,
        s.token_refresh_runs,
        s.reconcile_runs,
    )
}

/// Compares every pool's Redis state with the chain's, and reads how often
/// each scheduled tick ran.
pub async fn check(chain: &ChainClient<Channel>, redis_url: &str, prefix: &str) -> anyhow::Result<Summary> {
    let client = redis::Client::open(redis_url)?;
    let conn = redis::aio::ConnectionManager::new(client).await?;
    let cursor: Option<u64> =
        redis::cmd("GET").arg(format!("{prefix}ingest:cursor")).query_async(&mut conn.clone()).await?;
    let Some(cursor) = cursor else {
        anyhow::bail!("the ingest recorded no cursor: nothing reached Kafka");
    };
    let pools = check_pools(chain, &conn, prefix, cursor).await?;
    let store = RedisStore::new(conn, prefix, 1_000_000, Duration::from_secs(3600));
    let mut jobs = Vec::new();
    for job in ["heartbeat", "token-refresh", "pool-reconcile"] {
        jobs.push(job_runs(&store, job).await?);
    }
    Ok(Summary {
        pools: pools.total,
        pools_matching: pools.matching,
        pools_mismatched: pools.mismatched,
        pools_mid_slot: pools.mid_slot,
        pools_untouched: pools.untouched,
        ingest_cursor: Some(cursor),
        jobs,
    })
}

/// The pools, tallied by how their Redis state compares with the chain's.
#[derive(Debug, Default)]
struct PoolTally {
    total: usize,
    matching: usize,
    mismatched: Vec<String>,
    mid_slot: usize,
    untouched: usize,
}

async fn check_pools(
    chain: &ChainClient<Channel>,
    conn: &redis::aio::ConnectionManager,
    prefix: &str,
    cursor: u64,
) -> anyhow::Result<PoolTally> {
    let pools = chain.clone().list_pools(ListPoolsRequest {}).await?.into_inner().pools;
    let state_at = |pool: String, at_slot: u64| {
        let mut chain = chain.clone();
        async move {
            let wire = chain.get_pool(GetPoolRequest { pool: pool.clone(), at_slot }).await;
            let wire = wire.map_err(|s| anyhow::anyhow!("GetPool {pool} at slot {at_slot}: {}", s.message()))?;
            PoolState::from_proto(&wire.into_inner()).map_err(anyhow::Error::from)
        }
    };
    let mut tally = PoolTally { total: pools.len(), ..PoolTally::default() };
    for info in &pools {
        let ours = sluice_dex::state::read_pool(&mut conn.clone(), prefix, &info.pool).await?;
        let slot = ours.and_then(|s| s.last_applied).map(|s| s.slot);
        match ours {
            // Records past the cursor (the slot being sent at the stop) were
            // applied: compare at that slot; the chain may have more of it.
            Some(ours) if slot > Some(cursor) => {
                let truth = state_at(info.pool.clone(), slot.unwrap_or(0)).await?;
                if truth == ours {
                    tally.matching += 1;
                } else if truth.last_applied > ours.last_applied {
                    tally.mid_slot += 1;
                } else {
                    tally.mismatched.push(info.pool.clone());
                }
            }
            // Otherwise the pool must be exactly the chain's at the cursor:
            // every swap up to it applied, none missing.
            ours => {
                let truth = state_at(info.pool.clone(), cursor).await?;
                match ours {
                    Some(ours) if ours == truth => tally.matching += 1,
                    None if truth.last_applied.is_none() => tally.untouched += 1,
                    _ => tally.mismatched.push(info.pool.clone()),
                }
            }
        }
    }
    Ok(tally)
}

/// How often each of `job`'s scheduled ticks ran (manual runs aside).
async fn job_runs(store: &RedisStore, job: &str) -> anyhow::Result<JobRuns> {
    let runs = store.all_runs(job).await?;
    // Per tick: (runs that applied its effect, runs that succeeded).
    let mut per_tick: BTreeMap<i64, (u64, u64)> = BTreeMap::new();
    let (mut missed, mut skipped, mut drift) = (0, 0, 0);
    for r in runs.iter().filter(|r| !r.manual) {
        match r.outcome {
            Outcome::Missed => missed += r.ticks,
            Outcome::Skipped => skipped += 1,
            _ if r.applied > 0 || r.outcome == Outcome::Succeeded => {
                let tick = per_tick.entry(r.tick_ms).or_default();
                tick.0 += u64::from(r.applied > 0);
                tick.1 += u64::from(r.outcome == Outcome::Succeeded);
            }
            _ => {}
        }
        drift += r.drift_found;
    }
    Ok(JobRuns {
        job: job.into(),
        ticks_run: per_tick.len() as u64,
        ticks_run_twice: per_tick.values().filter(|(applied, ok)| *applied > 1 || *ok > 1).count() as u64,
        ticks_missed: missed,
        ticks_skipped: skipped,
        drift_found: drift,
    })
}

/// sluice-lag's view over the run: the peak time lag and the statuses seen.
fn time_lag_line(timeline: &[Sample]) -> String {
    let peak =
        timeline.iter().filter_map(|s| s.lag_seconds).fold(None, |m: Option<f64>, l| Some(m.map_or(l, |m| m.max(l))));
    let mut statuses: Vec<&str> = Vec::new();
    for s in timeline.iter().filter_map(|s| s.lag_status.as_deref()) {
        if !statuses.contains(&s) {
            statuses.push(s);
        }
    }
    match peak {
        Some(p) => format!("peak time lag            {p:>11.1}s  (sluice-lag; status seen: {})", statuses.join(", ")),
        None => "peak time lag                     -   (sluice-lag reported none)".into(),
    }
}

/// The closing summary.
pub fn summary_text(r: &Report) -> String {
    let mut out = String::new();
    let mut line = |l: String| {
        out.push_str(&l);
        out.push('\n');
    };
    line(String::new());
    line("Sluice demo summary".into());
    line("-------------------".into());
    scaling_lines(r, &mut line);
    signal_lines(&r.signals, &mut line);
    state_lines(&r.summary, &mut line);
    if let Some(c) = &r.chaos {
        chaos_lines(c, &mut line);
    }
    shutdown_lines(&r.shutdowns, &mut line);
    if let Some(o) = &r.outputs {
        output_lines(o, &mut line);
    }
    line(format!("result                   {}", if r.passed() { "PASS" } else { "FAIL" }));
    out
}

/// Freshness and cost, as the processors measured them.
fn signal_lines(s: &crate::signals::SignalsSummary, line: &mut impl FnMut(String)) {
    let secs =
        |v: Option<f64>| v.map_or("-".to_string(), |v| if v.is_finite() { format!("{v} s") } else { "> 600 s".into() });
    let within = s.within_objective.map_or("-".to_string(), |w| format!("{:.2}%", w * 100.0));
    line(format!(
        "freshness (swaps)        p50 {}, p99 {} from block to readable (read_committed); {within} within {} s",
        secs(s.freshness_p50_seconds),
        secs(s.freshness_p99_seconds),
        crate::signals::OBJECTIVE_SECONDS,
    ));
    let cost = s.processor_cpu_us_per_record.map_or("-".to_string(), |c| format!("{c:.1}"));
    line(format!(
        "processor cost           {cost:>12}  CPU-µs per record (whole processes, sluice_processor_* over the run)"
    ));
}

/// The traffic, the lag and how the processors scaled.
fn scaling_lines(r: &Report, line: &mut impl FnMut(String)) {
    line(format!("records produced         {:>12}", thousands(r.records_produced as f64)));
    line(format!(
        "records processed        {:>12}  (committed by the processors' group)",
        thousands(r.records_consumed as f64)
    ));
    line(format!(
        "peak lag                 {:>12}  records; peak processors {}",
        thousands(r.peak_lag as f64),
        r.peak_processors
    ));
    line(format!("autoscaler               {}", r.autoscaler));
    if r.settings.processor_cpu_millis > 0 {
        line(format!(
            "processor CPU            {:>11}m  each (a pod's limit: a control group with the kubelet's CFS quota)",
            r.settings.processor_cpu_millis
        ));
    }
    if let Some(node) = &r.node {
        line(format!("pods on node {node}: {} processor pods served: {}", r.pods.len(), r.pods.join(", ")));
    }
    line(time_lag_line(&r.timeline));
    line(match r.drain_seconds {
        Some(d) => format!("drain after traffic      {d:>11.1}s  (lag back to 0)"),
        None => "drain after traffic         not done  (lag not back to 0 in time)".into(),
    });
    if r.autoscaler.starts_with("Kubernetes") {
        line(match r.scale_down_seconds {
            Some(d) => format!("scaled back down          {d:>11.1}s  after the drain (the HPA, to minReplicas)"),
            None => "scaled back down            not done  (the HPA had not reached minReplicas)".into(),
        });
    }
    for step in &r.scaling {
        line(format!(
            "  at {:>5.0} s  lag {:>8}  processors {} → {}",
            step.t,
            thousands(step.lag as f64),
            step.from,
            step.to
        ));
    }
}

/// The pools against the chain and the scheduled jobs' ticks.
fn state_lines(s: &Summary, line: &mut impl FnMut(String)) {
    line(format!(
        "pools vs the chain       {:>12}  match, {} mismatch (must be 0), {} mid-slot at the stop, {} untouched",
        s.pools_matching,
        s.pools_mismatched.len(),
        s.pools_mid_slot,
        s.pools_untouched
    ));
    for j in &s.jobs {
        line(format!(
            "job {:<20} {:>5} ticks run, {} run twice (must be 0), {} missed, {} skipped{}",
            j.job,
            j.ticks_run,
            j.ticks_run_twice,
            j.ticks_missed,
            j.ticks_skipped,
            if j.job == "pool-reconcile" { format!(", drift found {}", j.drift_found) } else { String::new() }
        ));
    }
}

/// How each processor pod the HPA removed stopped.
fn shutdown_lines(shutdowns: &[Shutdown], line: &mut impl FnMut(String)) {
    for s in shutdowns {
        line(match s.complete_ms {
            _ if s.killed() => format!("SIGKILL {}  deleted with no grace period: nothing drained", s.pod),
            Some(ms) => format!(
                "SIGTERM {}  drained, flushed, committed in {:.1} s of its {} s grace{}",
                s.pod,
                ms as f64 / 1000.0,
                s.grace_seconds,
                if s.in_time() { "" } else { " (must be within)" }
            ),
            None => format!("SIGTERM {}  no \"Shutdown complete\" in its log (must be)", s.pod),
        });
    }
}

fn chaos_lines(c: &crate::chaos::ChaosReport, line: &mut impl FnMut(String)) {
    let count = |f: crate::chaos::Fault| c.faults.iter().filter(|a| a.fault == f).count();
    use crate::chaos::Fault as F;
    line(format!(
        "chaos faults             {:>12}  ({} processor SIGKILLs, {} storm steps, broker {}, Redis {}, ingest SIGKILL {}, SIGSTOP {}, Redis wiped {}){}",
        c.faults.len(),
        count(F::KillProcessor),
        count(F::StormUp) + count(F::StormDown),
        count(F::RestartBroker),
        count(F::RestartRedis),
        count(F::KillIngest),
        count(F::PauseIngest),
        count(F::WipeRedis),
        if c.finished { "" } else { "; the timetable did not finish (must)" }
    ));
    match &c.outputs {
        Some(o) => output_lines(o, line),
        None => line("outputs                      not checked".into()),
    }
}

fn output_lines(o: &crate::outputs::Outputs, line: &mut impl FnMut(String)) {
    line(format!(
        "dex.swaps (read_committed) {:>10}  swaps expected up to slot {}, {} lost, {} duplicates (both must be 0; {} added by the processors, the rest from input records sent twice)",
        thousands(o.expected_swaps as f64),
        o.up_to_slot,
        o.lost_swaps,
        o.duplicate_swaps,
        o.duplicate_swaps_from_processors
    ));
    line(format!(
        "dead letters             {:>12}  expected, {} missing, {} without a reason, {} duplicates (all must be 0; {} added by the processors)",
        o.expected_dead_letters,
        o.missing_dead_letters,
        o.dead_letters_without_reason,
        o.duplicate_dead_letters,
        o.duplicate_dead_letters_from_processors
    ));
    line(format!(
        "effects (audit log)      {:>12}  double-applied, {} out of order, {} never applied; {} input records sent twice by the ingest (all must be 0)",
        o.double_applied, o.out_of_order, o.lost_effects, o.duplicate_inputs
    ));
}
