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

use redis::Script;
use sluice_core::pool::{PoolState, Seq};
use sluice_dex::state::{pool_key, prices_channel, read_pool};
use sluice_proto::chain::v1::chain_client::ChainClient;
use sluice_proto::chain::v1::{GetPoolRequest, ListPoolsRequest};
use sluice_proto::dex::v1::{PoolInfo, PoolState as WirePoolState};
use tonic::Code;
use tonic::transport::Channel;

use super::{Job, Report, RunContext, RunFuture, pipeline};
use crate::config::{JobDefaults, Overlap};

/// The fenced compare-and-set of one pool's state (the hash layout of
/// `sluice_dex::state`). Returns 1 repaired, 0 moved, -1 refused.
fn repair_script() -> String {
    format!(
        "{}
-- KEYS: fence, lease, pool. ARGV: token, lease value, expected slot, tx, ix,
-- then the chain's slot, tx, ix, reserve_a, reserve_b, sqrt ('' for none),
-- last_price_ticks, swaps_applied, price, venue, prices channel, pool
local cur = redis.call('HMGET', KEYS[3], 'slot', 'tx', 'ix', 'price')
if cur[1] ~= ARGV[3] or cur[2] ~= ARGV[4] or cur[3] ~= ARGV[5] then return 0 end
redis.call('HSET', KEYS[3], 'slot', ARGV[6], 'tx', ARGV[7], 'ix', ARGV[8], 'reserve_a', ARGV[9],
  'reserve_b', ARGV[10], 'last_price_ticks', ARGV[12], 'swaps_applied', ARGV[13], 'price', ARGV[14],
  'venue', ARGV[15])
if ARGV[11] == '' then
  redis.call('HDEL', KEYS[3], 'sqrt_price_x64')
else
  redis.call('HSET', KEYS[3], 'sqrt_price_x64', ARGV[11])
end
if cur[4] ~= ARGV[14] then redis.call('PUBLISH', ARGV[16], ARGV[17] .. ' ' .. ARGV[14]) end
return 1",
        sluice_coord::LEASED_FENCE_CHECK
    )
}

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
    /// The fence refused the repair: this run lost its lease.
    Refused,
}

/// The reconciliation job.
#[derive(Debug)]
pub struct PoolReconcile {
    chain: ChainClient<Channel>,
    concurrency: usize,
    repair: bool,
    script: Script,
}

fn seq_args(seq: Option<Seq>) -> [String; 3] {
    let s = seq.unwrap_or_default();
    [s.slot.to_string(), s.tx_index.to_string(), s.ix_index.to_string()]
}

impl PoolReconcile {
    pub fn new(chain: ChainClient<Channel>, concurrency: usize, repair: bool) -> Self {
        Self { chain, concurrency, repair, script: Script::new(&repair_script()) }
    }

    async fn chain_state(&self, pool: &str, slot: u64) -> Result<Option<WirePoolState>, String> {
        let chain = &mut self.chain.clone();
        match chain.get_pool(GetPoolRequest { pool: pool.to_string(), at_slot: slot }).await {
            Ok(state) => Ok(Some(state.into_inner())),
            // The node has not produced that slot yet (it lags the processors'
            // source) or no longer keeps it: nothing to compare with. Comparing
            // with an older state instead would roll the pool back.
            Err(status) if matches!(status.code(), Code::OutOfRange | Code::FailedPrecondition) => Ok(None),
            Err(status) => Err(format!("GetPool {pool}: {}", status.message())),
        }
    }

    async fn check(&self, ctx: &RunContext, info: &PoolInfo) -> Result<Verdict, String> {
        let mut redis = ctx.redis.clone();
        let Some(ours) = read_pool(&mut redis, &ctx.prefix, &info.pool).await.map_err(|e| e.to_string())? else {
            return Ok(Verdict::Unseen);
        };
        let slot = ours.last_applied.map_or(0, |s| s.slot);
        let Some(wire) = self.chain_state(&info.pool, slot).await? else {
            return Ok(Verdict::Unverifiable);
        };
        let truth = PoolState::from_proto(&wire)?;
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
        let result: i64 = ctx
            .fenced(&self.script)
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
            .invoke_async(&mut redis)
            .await
            .map_err(|e| format!("repairing {}: {e}", info.pool))?;
        Ok(Verdict::Drift(match result {
            1 => Repair::Repaired,
            -1 => {
                ctx.refused();
                Repair::Refused
            }
            _ => Repair::Moved,
        }))
    }

    async fn sweep(&self, ctx: &RunContext) -> Result<Report, String> {
        let pools = self
            .chain
            .clone()
            .list_pools(ListPoolsRequest {})
            .await
            .map_err(|e| format!("chain ListPools: {}", e.message()))?
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
                        Repair::Recorded | Repair::Refused => {}
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
        match failures.first() {
            None => Ok(report),
            Some(first) => Err(format!(
                "{} of {} pools not checked (first: {first}); drift found {}, repaired {}",
                failures.len(),
                pools.len(),
                report.drift_found,
                report.drift_repaired
            )),
        }
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

    fn run<'a>(&'a self, ctx: &'a RunContext) -> RunFuture<'a> {
        Box::pin(self.sweep(ctx))
    }
}
