//! Heartbeat: one fenced write per tick, the scheduler's own dead man's
//! switch. `<prefix>sched:heartbeat:last` holds the newest tick run (an
//! external check can alert when it stops moving).
//!
//! `<prefix>sched:heartbeat:effect:<tick>` counts how often the write's
//! body really ran for that tick (kept an hour). It is deliberately not
//! idempotent: it is an independent count of applied effects, which the
//! tests compare with the run history; the ledger is what keeps it at 1.

use std::time::Duration;

use super::{Effects, Job, JobError, Report, RunContext, RunFuture};
use crate::config::{JobDefaults, Overlap};
use crate::store::JobScript;

/// How long a tick's effect counter is kept.
const EFFECT_TTL_MS: u64 = 3_600_000;

const BODY: &str = "
-- KEYS: effect counter, last. ARGV: tick, lease value, ttl ms
local n = redis.call('INCR', KEYS[1])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
redis.call('SET', KEYS[2], ARGV[1] .. ' ' .. ARGV[2])
return n";

/// Key of the effect counter of tick `tick_ms`.
pub fn effect_key(prefix: &str, tick_ms: i64) -> String {
    format!("{prefix}sched:heartbeat:effect:{tick_ms}")
}

/// The heartbeat job.
#[derive(Debug)]
pub struct Heartbeat {
    script: std::sync::Arc<JobScript>,
}

impl Default for Heartbeat {
    fn default() -> Self {
        Self { script: JobScript::new("heartbeat", BODY) }
    }
}

impl Heartbeat {
    async fn beat(&self, ctx: &RunContext) -> Result<Report, JobError> {
        ctx.write(&self.script, "beat")
            .key(effect_key(&ctx.prefix, ctx.tick.ms))
            .key(format!("{}sched:heartbeat:last", ctx.prefix))
            .arg(ctx.tick.ms)
            .arg(ctx.lease_value())
            .arg(EFFECT_TTL_MS)
            .apply()
            .await?;
        Ok(Report { items: 1, ..Report::default() })
    }
}

impl Job for Heartbeat {
    fn name(&self) -> &'static str {
        "heartbeat"
    }

    fn description(&self) -> &'static str {
        "One fenced write per tick: proof that the scheduler applies each tick's effect once."
    }

    fn defaults(&self) -> JobDefaults {
        JobDefaults {
            schedule: "*/15 * * * * *",
            enabled: true,
            timeout: Duration::from_secs(5),
            overlap: Overlap::Skip,
        }
    }

    fn effects(&self) -> Effects {
        Effects::Ledger
    }

    fn run<'a>(&'a self, ctx: &'a RunContext) -> RunFuture<'a> {
        Box::pin(self.beat(ctx))
    }
}
