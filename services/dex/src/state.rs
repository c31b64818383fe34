//! Pool state in Redis: one hash per pool, changed only by one Lua script
//! that applies a swap atomically if, and only if, its sequence is above the
//! last applied one. A replay (at-least-once delivery, a retry, a record
//! processed again after a revoke) is therefore a no-op, which is what makes
//! the effects exactly-once.
//!
//! Hash `<prefix>pool:<pool>` fields: `slot`, `tx`, `ix` (last applied
//! sequence), `reserve_a`, `reserve_b`, `sqrt_price_x64`, `last_price_ticks`,
//! `swaps_applied`, `price`, `venue`. A price change is published on
//! `<prefix>prices` as `<pool> <price>`.
//!
//! A batch's swaps on one pool go to Redis as one call of the batch script
//! ([`APPLY_MANY_SCRIPT`]), which applies them in order with exactly the one-swap
//! script's rule and effects: the same final hash, the same audit entries, and
//! the same price stream, one message per applied swap that changed its pool's
//! price, each pool's in its sequence order (a batch publishes pool after pool,
//! so two pools' messages may interleave differently than one by one: no
//! order across pools was ever promised). It reads the hash once and writes it
//! once per call instead of once per swap.

use std::collections::HashMap;

use sluice_core::pool::{PoolState, PoolUpdate};
use sluice_core::seq::Seq;

/// The apply script. Returns 1 when applied, 0 when the swap was not newer.
pub const APPLY_SCRIPT: &str = r#"
local cur = redis.call('HMGET', KEYS[1], 'slot', 'tx', 'ix', 'price')
local s, t, i = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
if cur[1] then
  local cs, ct, ci = tonumber(cur[1]), tonumber(cur[2]), tonumber(cur[3])
  if s < cs or (s == cs and (t < ct or (t == ct and i <= ci))) then
    return 0
  end
end
redis.call('HSET', KEYS[1], 'slot', ARGV[1], 'tx', ARGV[2], 'ix', ARGV[3],
  'reserve_a', ARGV[4], 'reserve_b', ARGV[5], 'price', ARGV[8], 'venue', ARGV[9])
if ARGV[6] ~= '' then redis.call('HSET', KEYS[1], 'sqrt_price_x64', ARGV[6]) end
if ARGV[7] ~= '' then redis.call('HSET', KEYS[1], 'last_price_ticks', ARGV[7]) end
redis.call('HINCRBY', KEYS[1], 'swaps_applied', 1)
if ARGV[12] == '1' then
  redis.call('RPUSH', KEYS[2], ARGV[1] .. ':' .. ARGV[2] .. ':' .. ARGV[3])
end
if cur[4] ~= ARGV[8] then
  redis.call('PUBLISH', ARGV[10], ARGV[11] .. ' ' .. ARGV[8])
end
return 1
"#;

/// The batch apply script: one pool's swaps in order (`ARGV`: the prices
/// channel, the pool, the audit flag, then nine values per swap as in
/// [`APPLY_SCRIPT`]). Returns 1 or 0 per swap, as the one-swap script would
/// have for each in turn.
pub const APPLY_MANY_SCRIPT: &str = r#"
local cur = redis.call('HMGET', KEYS[1], 'slot', 'tx', 'ix', 'price')
local cs, ct, ci, price = tonumber(cur[1]), tonumber(cur[2]), tonumber(cur[3]), cur[4]
local out, applied, last, sqrt, ticks = {}, 0, nil, nil, nil
for j = 4, #ARGV, 9 do
  local s, t, i = tonumber(ARGV[j]), tonumber(ARGV[j + 1]), tonumber(ARGV[j + 2])
  if cs and (s < cs or (s == cs and (t < ct or (t == ct and i <= ci)))) then
    out[#out + 1] = 0
  else
    cs, ct, ci, last, applied = s, t, i, j, applied + 1
    if ARGV[j + 5] ~= '' then sqrt = ARGV[j + 5] end
    if ARGV[j + 6] ~= '' then ticks = ARGV[j + 6] end
    if ARGV[3] == '1' then
      redis.call('RPUSH', KEYS[2], ARGV[j] .. ':' .. ARGV[j + 1] .. ':' .. ARGV[j + 2])
    end
    if price ~= ARGV[j + 7] then
      redis.call('PUBLISH', ARGV[1], ARGV[2] .. ' ' .. ARGV[j + 7])
    end
    price = ARGV[j + 7]
    out[#out + 1] = 1
  end
end
if last then
  redis.call('HSET', KEYS[1], 'slot', ARGV[last], 'tx', ARGV[last + 1], 'ix', ARGV[last + 2],
    'reserve_a', ARGV[last + 3], 'reserve_b', ARGV[last + 4], 'price', ARGV[last + 7], 'venue', ARGV[last + 8])
  if sqrt then redis.call('HSET', KEYS[1], 'sqrt_price_x64', sqrt) end
  if ticks then redis.call('HSET', KEYS[1], 'last_price_ticks', ticks) end
  redis.call('HINCRBY', KEYS[1], 'swaps_applied', applied)
end
return out
"#;

/// Key of a pool's state hash.
pub fn pool_key(prefix: &str, pool: &str) -> String {
    format!("{prefix}pool:{pool}")
}

/// Key of a pool's audit list of applied sequences (`slot:tx:ix`).
pub fn audit_key(prefix: &str, pool: &str) -> String {
    format!("{prefix}pool:{pool}:applied")
}

/// Channel price changes are published on.
pub fn prices_channel(prefix: &str) -> String {
    format!("{prefix}prices")
}

/// One swap's effect on its pool.
#[derive(Debug, Clone, PartialEq)]
pub struct Apply<'a> {
    pub pool: &'a str,
    pub update: PoolUpdate,
    pub price: f64,
    pub venue: i32,
}

/// The `EVALSHA` command applying `apply`.
pub fn apply_command(sha: &str, prefix: &str, apply: &Apply<'_>, audit: bool) -> redis::Cmd {
    let mut cmd = redis::cmd("EVALSHA");
    cmd.arg(sha).arg(2).arg(pool_key(prefix, apply.pool)).arg(audit_key(prefix, apply.pool));
    update_args(&mut cmd, apply);
    cmd.arg(prices_channel(prefix)).arg(apply.pool).arg(if audit { "1" } else { "0" });
    cmd
}

/// The `EVALSHA` command of [`APPLY_MANY_SCRIPT`] applying `applies`, all on
/// `pool`, in order.
pub fn apply_many_command<'a>(
    sha: &str,
    prefix: &str,
    pool: &str,
    applies: impl IntoIterator<Item = &'a Apply<'a>>,
    audit: bool,
) -> redis::Cmd {
    let mut cmd = redis::cmd("EVALSHA");
    cmd.arg(sha).arg(2).arg(pool_key(prefix, pool)).arg(audit_key(prefix, pool));
    cmd.arg(prices_channel(prefix)).arg(pool).arg(if audit { "1" } else { "0" });
    for apply in applies {
        update_args(&mut cmd, apply);
    }
    cmd
}

/// The pools of `applies` in order of first appearance, each with the
/// positions of its swaps, in order: one [`apply_many_command`] each.
pub fn by_pool<'a>(applies: &[Apply<'a>]) -> Vec<(&'a str, Vec<usize>)> {
    let mut pools: Vec<(&'a str, Vec<usize>)> = Vec::new();
    let mut index: HashMap<&'a str, usize> = HashMap::new();
    for (i, apply) in applies.iter().enumerate() {
        let slot = *index.entry(apply.pool).or_insert_with(|| {
            pools.push((apply.pool, Vec::new()));
            pools.len() - 1
        });
        pools[slot].1.push(i);
    }
    pools
}

/// A swap's nine values, as both scripts read them.
fn update_args(cmd: &mut redis::Cmd, apply: &Apply<'_>) {
    let u = &apply.update;
    cmd.arg(u.seq.slot)
        .arg(u.seq.tx_index)
        .arg(u.seq.ix_index)
        .arg(u.reserve_a)
        .arg(u.reserve_b)
        .arg(u.sqrt_price_x64.map(|v| v.to_string()).unwrap_or_default())
        .arg(u.last_price_ticks.map(|v| v.to_string()).unwrap_or_default())
        .arg(format!("{:.12}", apply.price))
        .arg(apply.venue);
}

/// The `HSET` that writes a pool's whole state as the chain reports it (`GetPool`), the
/// way the apply script leaves the hash after the state's last swap; `None` for a pool
/// never swapped (the processors leave it without a hash).
pub fn put_command(prefix: &str, wire: &sluice_core::dex::PoolState) -> Option<redis::Cmd> {
    let seq = wire.last_applied?;
    let mut cmd = redis::cmd("HSET");
    cmd.arg(pool_key(prefix, &wire.pool))
        .arg("slot")
        .arg(seq.slot)
        .arg("tx")
        .arg(seq.tx_index)
        .arg("ix")
        .arg(seq.ix_index)
        .arg("reserve_a")
        .arg(wire.reserve_a)
        .arg("reserve_b")
        .arg(wire.reserve_b)
        .arg("last_price_ticks")
        .arg(wire.last_price_ticks)
        .arg("swaps_applied")
        .arg(wire.swaps_applied)
        .arg("price")
        .arg(format!("{:.12}", wire.price))
        .arg("venue")
        .arg(wire.venue);
    if !wire.sqrt_price_x64.is_empty() {
        cmd.arg("sqrt_price_x64").arg(&wire.sqrt_price_x64);
    }
    Some(cmd)
}

/// The SHA1 Redis gives a script (what `EVALSHA` names it by).
pub fn script_sha(source: &str) -> String {
    redis::Script::new(source).get_hash().to_string()
}

/// Reads a pool's state back (`None` when no swap was applied yet).
pub async fn read_pool(
    conn: &mut impl redis::aio::ConnectionLike,
    prefix: &str,
    pool: &str,
) -> redis::RedisResult<Option<PoolState>> {
    let fields: HashMap<String, String> = redis::cmd("HGETALL").arg(pool_key(prefix, pool)).query_async(conn).await?;
    if fields.is_empty() {
        return Ok(None);
    }
    let num = |name: &str| fields.get(name).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    Ok(Some(PoolState {
        reserve_a: num("reserve_a"),
        reserve_b: num("reserve_b"),
        sqrt_price_x64: fields.get("sqrt_price_x64").and_then(|v| v.parse().ok()).unwrap_or(0),
        last_price_ticks: num("last_price_ticks"),
        last_applied: Some(Seq { slot: num("slot"), tx_index: num("tx") as u32, ix_index: num("ix") as u32 }),
        swaps_applied: num("swaps_applied"),
    }))
}

/// Reads a pool's audit list as sequences.
pub async fn read_audit(
    conn: &mut impl redis::aio::ConnectionLike,
    prefix: &str,
    pool: &str,
) -> redis::RedisResult<Vec<Seq>> {
    let raw: Vec<String> = redis::cmd("LRANGE").arg(audit_key(prefix, pool)).arg(0).arg(-1).query_async(conn).await?;
    Ok(raw
        .iter()
        .filter_map(|s| {
            let mut it = s.split(':').map(|p| p.parse::<u64>().ok());
            Some(Seq { slot: it.next()??, tx_index: it.next()?? as u32, ix_index: it.next()?? as u32 })
        })
        .collect())
}
