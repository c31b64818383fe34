//! Heartbeat: one fenced write per tick, the scheduler's own dead man's
//! switch. `<prefix>sched:heartbeat:last` holds the newest tick run (an
//! external check can alert when it stops moving), and
//! `<prefix>sched:heartbeat:effect:<tick>` counts the runs that wrote for
//! that tick (kept an hour), which is how the tests prove a tick's effect
//! happened once.

use std::time::Duration;

use redis::Script;

use super::{Job, Report, RunContext, RunFuture};
use crate::config::{JobDefaults, Overlap};

/// How long a tick's effect counter is kept.
const EFFECT_TTL_MS: u64 = 3_600_000;

fn script() -> String {
    format!(
        "{}
-- KEYS: fence, lease, effect counter, last. ARGV: token, lease value, tick, ttl ms
local n = redis.call('INCR', KEYS[3])
redis.call('PEXPIRE', KEYS[3], ARGV[4])
redis.call('SET', KEYS[4], ARGV[3] .. ' ' .. ARGV[2])
return n",
        sluice_coord::LEASED_FENCE_CHECK
    )
}

/// Key of the effect counter of `tick`.
pub fn effect_key(prefix: &str, tick_ms: i64) -> String {
    format!("{prefix}sched:heartbeat:effect:{tick_ms}")
}

/// The heartbeat job.
#[derive(Debug, Default)]
pub struct Heartbeat;

impl Heartbeat {
    async fn beat(&self, ctx: &RunContext) -> Result<Report, String> {
        let script = Script::new(&script());
        let written: i64 = ctx
            .fenced(&script)
            .key(effect_key(&ctx.prefix, ctx.tick.ms))
            .key(format!("{}sched:heartbeat:last", ctx.prefix))
            .arg(ctx.tick.ms)
            .arg(EFFECT_TTL_MS)
            .invoke_async(&mut ctx.redis.clone())
            .await
            .map_err(|e| format!("heartbeat write: {e}"))?;
        if written < 0 {
            ctx.refused();
        }
        Ok(Report { items: 1, ..Report::default() })
    }
}

impl Job for Heartbeat {
    fn name(&self) -> &'static str {
        "heartbeat"
    }

    fn description(&self) -> &'static str {
        "One fenced write per tick: proof that the scheduler runs each tick once."
    }

    fn defaults(&self) -> JobDefaults {
        JobDefaults {
            schedule: "*/15 * * * * *",
            enabled: true,
            timeout: Duration::from_secs(5),
            overlap: Overlap::Skip,
        }
    }

    fn run<'a>(&'a self, ctx: &'a RunContext) -> RunFuture<'a> {
        Box::pin(self.beat(ctx))
    }
}
