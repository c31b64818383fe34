//! Pool reconciliation: every pool's state in Redis against the chain's
//! `GetPool` at the slot of the last swap Redis applied.
//!
//! Per pool, with the chain's state after that slot:
//! - the chain's last swap in the slot is the one Redis applied: every field
//!   must match; a difference is **drift**;
//! - the chain has later swaps of the pool in that slot: Redis is mid-slot
//!   (a processor is applying them), so the states are not comparable yet:
//!   **behind**, not drift;
//! - Redis claims a swap the chain does not have at that slot: drift.
//!
//! Drift is repaired with a compare-and-set that is fenced (a run that lost
//! its lease is refused) and checks that the pool's last applied sequence is
//! still the one compared, so a repair never overwrites a newer update from
//! a processor (that pool is reported as moved and looked at next time).
//!
//! Pools are checked as a bounded pipeline ([`super::pipeline`]): a slow
//! pool holds one permit, the others keep flowing.

use std::time::Duration;

use sluice_core::pool::PoolState;
use sluice_core::seq::Seq;
use sluice_dex::state::{pool_key, prices_channel, read_pool};
use sluice_proto::chain::v1::chain_client::ChainClient;
use sluice_proto::chain::v1::{GetPoolRequest, ListPoolsRequest};
use sluice_proto::dex::v1::{PoolInfo, PoolState as WirePoolState};
use tonic::Code;
use tonic::transport::Channel;

use super::{Effects, Job, JobError, Report, RunContext, RunFuture, pipeline};
use crate::config::{JobDefaults, Overlap};
use crate::store::JobScript;

/// The compare-and-set of one pool's state (the hash layout of
/// `sluice_dex::state`), run as a fenced write. Returns 1 repaired, 0 moved.
const REPAIR: &str = "
-- KEYS: pool. ARGV: expected slot, tx, ix, then the chain's slot, tx, ix,
-- reserve_a, reserve_b, sqrt ('' for none), last_price_ticks, swaps_applied,
-- price, venue, prices channel, pool
local cur = redis.call('HMGET', KEYS[1], 'slot', 'tx', 'ix', 'price')
if cur[1] ~= ARGV[1] or cur[2] ~= ARGV[2] or cur[3] ~= ARGV[3] then return 0 end
redis.call('HSET', KEYS[1], 'slot', ARGV[4], 'tx', ARGV[5], 'ix', ARGV[6], 'reserve_a', ARGV[7],
  'reserve_b', ARGV[8], 'last_price_ticks', ARGV[10], 'swaps_applied', ARGV[11], 'price', ARGV[12],
  'venue', ARGV[13])
if ARGV[9] == '' then
  redis.call('HDEL', KEYS[1], 'sqrt_price_x64')
else
  redis.call('HSET', KEYS[1], 'sqrt_price_x64', ARGV[9])
end
if cur[4] ~= ARGV[12] then redis.call('PUBLISH', ARGV[14], ARGV[15] .. ' ' .. ARGV[12]) end
return 1";

/// One pool's verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    Clean,
    /// Redis is mid-slot: the chain has later swaps of the pool in that slot.
    Behind,
    /// No swap applied in Redis yet.
    Unseen,
    /// The chain has no state at that slot to compare with (not produced
    /// yet by this node, or no longer kept).
    Unverifiable,
    Drift(Repair),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Repair {
    Repaired,
    /// Not repaired: repairs are off.
    Recorded,
    /// A processor moved the pool on between the compare and the repair.
    Moved,
}

/// The reconciliation job.
#[derive(Debug)]
pub struct PoolReconcile {
    chain: ChainClient<Channel>,
    concurrency: usize,
    repair: bool,
    script: std::sync::Arc<JobScript>,
}

fn seq_args(seq: Option<Seq>) -> [String; 3] {
    let s = seq.unwrap_or_default();
    [s.slot.to_string(), s.tx_index.to_string(), s.ix_index.to_string()]
}

impl PoolReconcile {
    pub fn new(chain: ChainClient<Channel>, concurrency: usize, repair: bool) -> Self {
        Self { chain, concurrency, repair, script: JobScript::new("pool-reconcile", REPAIR) }
    }

    async fn chain_state(&self, pool: &str, slot: u64) -> Result<Option<WirePoolState>, JobError> {
        let chain = &mut self.chain.clone();
        match chain.get_pool(GetPoolRequest { pool: pool.to_string(), at_slot: slot }).await {
            Ok(state) => Ok(Some(state.into_inner())),
            // The node has not produced that slot yet (it lags the processors'
            // source) or no longer keeps it: nothing to compare with. Comparing
            // with an older state instead would roll the pool back.
            Err(status) if matches!(status.code(), Code::OutOfRange | Code::FailedPrecondition) => Ok(None),
            Err(status) => Err(JobError::unavailable("chain", format!("GetPool {pool}: {}", status.message()))),
        }
    }

    async fn check(&self, ctx: &RunContext, info: &PoolInfo) -> Result<Verdict, JobError> {
        let mut redis = ctx.redis()?;
        let ours =
            read_pool(&mut redis, &ctx.prefix, &info.pool).await.map_err(|e| JobError::unavailable("redis", e))?;
        let Some(ours) = ours else {
            return Ok(Verdict::Unseen);
        };
        let slot = ours.last_applied.map_or(0, |s| s.slot);
        let Some(wire) = self.chain_state(&info.pool, slot).await? else {
            return Ok(Verdict::Unverifiable);
        };
        let truth =
            PoolState::from_proto(&wire).map_err(|e| JobError::Failed(format!("chain state of {}: {e}", info.pool)))?;
        tracing::debug!(pool = %info.pool, "Chain state read");
        if truth.last_applied > ours.last_applied {
            return Ok(Verdict::Behind);
        }
        if truth == ours {
            return Ok(Verdict::Clean);
        }
        tracing::warn!(pool = %info.pool, ?ours, ?truth, "Pool state drifted from the chain");
        if !self.repair {
            return Ok(Verdict::Drift(Repair::Recorded));
        }
        let [es, et, ei] = seq_args(ours.last_applied);
        let [ns, nt, ni] = seq_args(truth.last_applied);
        let repaired = ctx
            .write(&self.script, format!("pool:{}", info.pool))
            .key(pool_key(&ctx.prefix, &info.pool))
            .arg(es)
            .arg(et)
            .arg(ei)
            .arg(ns)
            .arg(nt)
            .arg(ni)
            .arg(truth.reserve_a)
            .arg(truth.reserve_b)
            .arg(&wire.sqrt_price_x64)
            .arg(truth.last_price_ticks)
            .arg(truth.swaps_applied)
            .arg(format!("{:.12}", wire.price))
            .arg(wire.venue)
            .arg(prices_channel(&ctx.prefix))
            .arg(&info.pool)
            .apply()
            .await?;
        Ok(Verdict::Drift(if repaired == 1 { Repair::Repaired } else { Repair::Moved }))
    }

    async fn sweep(&self, ctx: &RunContext) -> Result<Report, JobError> {
        let pools = self
            .chain
            .clone()
            .list_pools(ListPoolsRequest {})
            .await
            .map_err(|e| JobError::unavailable("chain", format!("ListPools: {}", e.message())))?
            .into_inner()
            .pools;
        tracing::debug!(pools = pools.len(), "Pools listed");
        let (verdicts, item_done) = pipeline(ctx, pools.iter(), self.concurrency, |info| self.check(ctx, info)).await;
        let mut report = Report { items: verdicts.len() as u64, item_done, ..Report::default() };
        let (mut behind, mut unseen, mut unverifiable, mut moved, mut failures) = (0, 0, 0, 0, Vec::new());
        for verdict in verdicts {
            match verdict {
                Ok(Verdict::Clean) => {}
                Ok(Verdict::Behind) => behind += 1,
                Ok(Verdict::Unseen) => unseen += 1,
                Ok(Verdict::Unverifiable) => unverifiable += 1,
                Ok(Verdict::Drift(repair)) => {
                    report.drift_found += 1;
                    match repair {
                        Repair::Repaired => report.drift_repaired += 1,
                        Repair::Moved => moved += 1,
                        Repair::Recorded => {}
                    }
                }
                Err(e) => failures.push(e),
            }
        }
        tracing::info!(
            pools = pools.len(),
            checked = report.items,
            drift = report.drift_found,
            repaired = report.drift_repaired,
            behind,
            unseen,
            unverifiable,
            moved,
            failed = failures.len(),
            "Reconciliation sweep done"
        );
        let Some(first) = failures.first() else { return Ok(report) };
        let summary = format!(
            "{} of {} pools not checked (first: {first}); drift found {}, repaired {}",
            failures.len(),
            pools.len(),
            report.drift_found,
            report.drift_repaired
        );
        // The most serious kind among the failures names the run's.
        Err(if let Some(refused) = failures.iter().find(|e| matches!(e, JobError::Refused(_))) {
            refused.clone()
        } else if failures.iter().all(|e| matches!(e, JobError::Unavailable { .. })) {
            JobError::Unavailable { dependency: "chain or redis", message: summary }
        } else {
            JobError::Failed(summary)
        })
    }
}

impl Job for PoolReconcile {
    fn name(&self) -> &'static str {
        "pool-reconcile"
    }

    fn description(&self) -> &'static str {
        "Every pool's Redis state against the chain's at the same slot; drift is recorded and repaired (fenced compare-and-set)."
    }

    fn defaults(&self) -> JobDefaults {
        JobDefaults {
            schedule: "0 */5 * * * *",
            enabled: true,
            timeout: Duration::from_secs(240),
            overlap: Overlap::Skip,
        }
    }

    fn effects(&self) -> Effects {
        Effects::Ledger
    }

    fn run<'a>(&'a self, ctx: &'a RunContext) -> RunFuture<'a> {
        Box::pin(self.sweep(ctx))
    }
}
