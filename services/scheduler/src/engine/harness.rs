//! What the engine's tests share: replicas of an [`Engine`] on one
//! [`MemoryStore`] under tokio's paused time, each through its own
//! [`Faulty`] view, and a job whose every effect is counted independently
//! of the history (the model of its write logs which run applied it).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::{Engine, JobEntry};
use crate::clock::{Clock, TokioClock};
use crate::config::{JobDefaults, Overlap, SchedulerConfig};
use crate::jobs::{Effects, Job, JobError, Report, RunContext, RunFuture};
use crate::metrics::Metrics;
use crate::model::Outcome;
use crate::store::JobScript;
use crate::store::faulty::{Faulty, Plan};
use crate::store::memory::MemoryStore;
use crate::store::{RunRecord, Store};

/// 2026-01-01T00:00:00Z: the tests' wall clock starts here.
pub const EPOCH_MS: i64 = 1_767_225_600_000;

/// Which run (by token) applied each tick's effect, as the write's model saw it.
#[derive(Debug, Default)]
pub struct EffectLog {
    pub by_tick: Mutex<BTreeMap<i64, Vec<u64>>>,
}

impl EffectLog {
    /// The tokens of the runs that applied tick `EPOCH_MS + at_ms`.
    pub fn of(&self, at_ms: i64) -> Vec<u64> {
        self.by_tick.lock().unwrap_or_else(|e| e.into_inner()).get(&(EPOCH_MS + at_ms)).cloned().unwrap_or_default()
    }
}

/// How long a run of [`Beat`] works before and after its write.
pub type Timing = Arc<dyn Fn(i64, u64) -> (Duration, Duration) + Send + Sync>;

/// The job under test: works a while, makes one write, works a while more.
pub struct Beat {
    script: Arc<JobScript>,
    timing: Timing,
    schedule: &'static str,
}

impl Beat {
    pub fn new(schedule: &'static str, timing: Timing) -> Self {
        Self { script: JobScript::new("beat", "return 1"), timing, schedule }
    }

    async fn beat(&self, ctx: &RunContext) -> Result<Report, JobError> {
        let (before, after) = (self.timing)(ctx.tick.ms, ctx.token);
        tokio::time::sleep(before).await;
        ctx.write(&self.script, "beat").apply().await?;
        tokio::time::sleep(after).await;
        Ok(Report { items: 1, ..Report::default() })
    }
}

impl Job for Beat {
    fn name(&self) -> &'static str {
        "beat"
    }

    fn description(&self) -> &'static str {
        "One counted write per tick."
    }

    fn defaults(&self) -> JobDefaults {
        JobDefaults { schedule: self.schedule, enabled: true, timeout: Duration::from_secs(30), overlap: Overlap::Skip }
    }

    fn effects(&self) -> Effects {
        Effects::Ledger
    }

    fn run<'a>(&'a self, ctx: &'a RunContext) -> RunFuture<'a> {
        Box::pin(self.beat(ctx))
    }
}

/// A shared store, its clock, the effect log, and the replicas' settings.
pub struct World {
    pub store: Arc<MemoryStore>,
    pub clock: Arc<dyn Clock>,
    pub effects: Arc<EffectLog>,
    env: Vec<(String, String)>,
}

impl World {
    /// A world whose wall clock starts at `EPOCH_MS + offset_ms` (call it in
    /// a paused-time test). `env`: scheduler settings without the prefix.
    pub fn new(offset_ms: i64, env: &[(&str, &str)]) -> Self {
        let clock: Arc<dyn Clock> = Arc::new(TokioClock::starting_at(EPOCH_MS + offset_ms));
        let store = Arc::new(MemoryStore::new("t:", Arc::clone(&clock), 1_000_000));
        let effects = Arc::new(EffectLog::default());
        let log = Arc::clone(&effects);
        store.model(
            "beat",
            Arc::new(move |lease, _| {
                log.by_tick
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .entry(lease.tick.ms)
                    .or_default()
                    .push(lease.token);
                1
            }),
        );
        let env = env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        Self { store, clock, effects, env }
    }

    /// Starts replica `name` running `job`, through a faulty view with `plan`.
    pub fn replica(&self, name: &str, job: Arc<dyn Job>, plan: Plan) -> (Engine, Arc<Faulty>) {
        let mut vars: Vec<(String, String)> =
            vec![("S_REDIS_URL".into(), "redis://unused".into()), ("S_INSTANCE_ID".into(), name.into())];
        vars.push(("S_ADMIN_INSECURE".into(), "true".into())); // no admin API in the harness
        vars.extend(self.env.iter().map(|(k, v)| (format!("S_{k}"), v.clone())));
        let mut env = sluice_service::env::EnvReader::from_vars("S_", vars);
        let config = SchedulerConfig::read(&mut env).expect("test settings: REDIS_URL");
        let entries = JobEntry::read_all(&mut env, vec![job]);
        if let Err(e) = env.finish() {
            panic!("test settings: {e}");
        }
        let faulty = Faulty::new(Arc::clone(&self.store), plan);
        let store: Arc<dyn Store> = faulty.clone();
        let engine = Engine::new(config, store, Arc::clone(&self.clock), Metrics::new(), entries);
        engine.start();
        (engine, faulty)
    }

    pub async fn history(&self) -> Vec<RunRecord> {
        self.store.all_runs("beat").await.expect("in memory")
    }

    /// Sleeps (paused time) until the wall clock reads `EPOCH_MS + at_ms`.
    pub async fn until(&self, at_ms: i64) {
        let left = EPOCH_MS + at_ms - self.clock.now_ms();
        tokio::time::sleep(Duration::from_millis(left.max(0) as u64)).await;
    }
}

/// The first call of `kind` gets `fault`; every other call none.
pub fn once(kind: crate::store::faulty::Call, fault: crate::store::faulty::Fault) -> Plan {
    let mut done = false;
    Box::new(move |call| {
        if call == kind && !done {
            done = true;
            Some(fault)
        } else {
            None
        }
    })
}

/// Fixed timing: `before` ms, then the write, then `after` ms.
pub fn timing(before: u64, after: u64) -> Timing {
    Arc::new(move |_, _| (Duration::from_millis(before), Duration::from_millis(after)))
}

/// No faults.
pub fn healthy() -> Plan {
    Box::new(|_| None)
}

/// The records of tick `EPOCH_MS + at_ms` (a `missed` record covers its span).
pub fn records_of(history: &[RunRecord], at_ms: i64) -> Vec<&RunRecord> {
    let tick_ms = EPOCH_MS + at_ms;
    history
        .iter()
        .filter(|r| {
            !r.manual
                && if r.outcome == Outcome::Missed {
                    (r.tick_ms..=r.last_tick_ms).contains(&tick_ms)
                } else {
                    r.tick_ms == tick_ms
                }
        })
        .collect()
}
