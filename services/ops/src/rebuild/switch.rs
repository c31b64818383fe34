//! The rebuilt state checked against the chain, then put in the live state's
//! place in one step.
//!
//! The check compares each staged pool with the chain's state after a slot the
//! replay has read every record of, or, for a pool changed after it, after the
//! slot of the last swap it applied (as the scheduler's reconciliation does).
//!
//! The switch is one Lua script, so nothing runs between its check and its
//! writes: it refuses while any live pool has applied a swap the staged one
//! has not (the processors are ahead of the replay: the caller replays more
//! and tries again), then renames every staged hash over its live one,
//! publishes the price of every pool whose price it changed, and puts the
//! generation marker back when the store lost it. After it, a processor's
//! apply of a swap the replay already applied finds it applied (the apply is
//! idempotent by sequence), and every later swap lands on the rebuilt pool:
//! no processor stops, and no swap is lost or applied twice.

use serde::Serialize;
use sluice_core::pool::PoolState;
use sluice_dex::state::{pool_key, prices_channel, read_pool};
use sluice_proto::chain::v1::chain_client::ChainClient;
use tonic::Code;
use tonic::transport::Channel;

use super::RebuildError;
use super::staged::chain_state;

/// What the check found, pool by pool.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Verified {
    /// The slot the pools were compared at: every partition's replay had read past it.
    pub through: u64,
    /// Equal to the chain's state after `through`, or, for a pool changed after it, after
    /// the same swap.
    pub clean: usize,
    /// Changed after `through`, and the chain has later swaps of the pool in that slot: the
    /// replay is mid-slot (the ingest has not written the rest yet).
    pub behind: usize,
    /// Neither rebuilt state nor a swap on the chain by `through`.
    pub unseen: usize,
    /// The chain no longer keeps, or has not produced, that slot.
    pub unverifiable: usize,
    /// Pools whose rebuilt state differs from the chain's (at most ten named).
    pub drift: Vec<String>,
    pub drifted: usize,
}

impl Verified {
    fn drifted(&mut self, what: String) {
        self.drifted += 1;
        if self.drift.len() < 10 {
            self.drift.push(what);
        }
    }
}

/// Checks every staged pool of `pools` against the chain: at `through`, a slot the replay
/// has read every record of (so a swap the replay missed, a late start among them, shows
/// as drift), or, for a pool changed after it, after the same swap (the rest of that slot
/// may not be in the topic yet).
pub async fn verify(
    chain: &ChainClient<Channel>,
    conn: &mut redis::aio::MultiplexedConnection,
    staging: &str,
    pools: &[String],
    through: u64,
) -> Result<Verified, RebuildError> {
    let mut verified = Verified { through, ..Verified::default() };
    for pool in pools {
        let ours = read_pool(conn, staging, pool).await.map_err(RebuildError::Redis)?;
        let own = ours.and_then(|o| o.last_applied).map(|s| s.slot).filter(|&s| s > through);
        let at = own.unwrap_or(through);
        let wire = match chain_state(chain, pool, at).await {
            Ok(wire) => wire,
            Err(s) if matches!(s.code(), Code::OutOfRange | Code::FailedPrecondition) => {
                verified.unverifiable += 1;
                continue;
            }
            Err(s) => return Err(RebuildError::Chain(format!("GetPool {pool} at slot {at}: {}", s.message()))),
        };
        let truth = PoolState::from_proto(&wire).map_err(|e| RebuildError::Chain(format!("state of {pool}: {e}")))?;
        match ours {
            None if truth.last_applied.is_none() => verified.unseen += 1,
            None => verified.drifted(format!("{pool}: not rebuilt, the chain has {truth:?} at slot {at}")),
            Some(ours) if truth == ours => verified.clean += 1,
            Some(ours) if own.is_some() && truth.last_applied > ours.last_applied => verified.behind += 1,
            Some(ours) => verified.drifted(format!("{pool}: rebuilt {ours:?}, the chain {truth:?} at slot {at}")),
        }
    }
    Ok(verified)
}

/// KEYS: the marker, then each pool's live and staged hash. ARGV: the generation the
/// store must carry ('' for none known), the prices channel, then each pool's name.
/// Returns {'switched', pools, prices published, marker restored (0/1)},
/// {'ahead', pool, live sequence, staged sequence} or {'other', marker found}.
const SWITCH: &str = r"
local marker = redis.call('GET', KEYS[1])
if marker and ARGV[1] ~= '' and marker ~= ARGV[1] then return {'other', marker} end
local function seq(key)
  local s = redis.call('HMGET', key, 'slot', 'tx', 'ix')
  if not s[1] then return nil end
  return {tonumber(s[1]), tonumber(s[2]), tonumber(s[3])}
end
local function above(a, b)
  for i = 1, 3 do
    if a[i] ~= b[i] then return a[i] > b[i] end
  end
  return false
end
local pools = (#KEYS - 1) / 2
for i = 1, pools do
  local live, staged = seq(KEYS[2 * i]), seq(KEYS[2 * i + 1])
  if live and (not staged or above(live, staged)) then
    local at = function(s) return s and table.concat(s, ':') or 'none' end
    return {'ahead', ARGV[2 + i], at(live), at(staged)}
  end
end
local switched, published = 0, 0
for i = 1, pools do
  local live, staged = KEYS[2 * i], KEYS[2 * i + 1]
  if redis.call('EXISTS', staged) == 1 then
    local before = redis.call('HGET', live, 'price')
    redis.call('RENAME', staged, live)
    switched = switched + 1
    local after = redis.call('HGET', live, 'price')
    if after ~= before then
      redis.call('PUBLISH', ARGV[2], ARGV[2 + i] .. ' ' .. after)
      published = published + 1
    end
  end
end
local restored = 0
if not marker and ARGV[1] ~= '' then
  redis.call('SET', KEYS[1], ARGV[1])
  restored = 1
end
return {'switched', switched, published, restored}
";

/// What the switch did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub enum Switch {
    /// Done: pools renamed, prices published, whether the marker was put back.
    Switched { pools: i64, prices_published: i64, marker_restored: bool },
    /// Not done: this live pool has applied a swap the staged one has not (their last
    /// applied sequences, `slot:tx:ix`).
    Ahead { pool: String, live: String, staged: String },
}

/// Switches `pools`' staged state under `staging` in for the live state under `prefix`,
/// if no live pool is ahead; the store must carry `generation` (or have lost its marker,
/// which is then put back). `generation` empty: none known, the marker is left as it is.
pub async fn switch(
    conn: &mut redis::aio::MultiplexedConnection,
    prefix: &str,
    staging: &str,
    generation: &str,
    pools: &[String],
) -> Result<Switch, RebuildError> {
    let script = redis::Script::new(SWITCH);
    let mut invocation = script.key(sluice_coord::generation::key(prefix));
    for pool in pools {
        invocation.key(pool_key(prefix, pool)).key(pool_key(staging, pool));
    }
    invocation.arg(generation).arg(prices_channel(prefix));
    for pool in pools {
        invocation.arg(pool);
    }
    let reply: Vec<redis::Value> = invocation.invoke_async(conn).await.map_err(RebuildError::Redis)?;
    let text = |i: usize| reply.get(i).and_then(|v| redis::from_redis_value::<String>(v.clone()).ok());
    let int = |i: usize| reply.get(i).and_then(|v| redis::from_redis_value::<i64>(v.clone()).ok()).unwrap_or(0);
    match text(0).as_deref() {
        Some("switched") => {
            Ok(Switch::Switched { pools: int(1), prices_published: int(2), marker_restored: int(3) == 1 })
        }
        Some("ahead") => Ok(Switch::Ahead {
            pool: text(1).unwrap_or_default(),
            live: text(2).unwrap_or_default(),
            staged: text(3).unwrap_or_default(),
        }),
        Some("other") => {
            Err(RebuildError::OtherStore { expected: generation.to_string(), found: text(1).unwrap_or_default() })
        }
        _ => Err(RebuildError::Unexpected(format!("the switch script answered {reply:?}"))),
    }
}
