//! Coordination in Redis: who may act, and proof that a late actor's
//! writes are refused.
//!
//! A [`Claim`] is a key taken with `SET NX PX` by one owner. Taking it also
//! draws a **fencing token** from a counter that only grows ([`NEXT_TOKEN`]:
//! never below the server's clock in milliseconds, so a store that forgot
//! the counter cannot hand out an old token again), and a newer claim of
//! the same resource always carries a larger token. The
//! holder renews the claim while it works ([`renew`]: only the holder can)
//! and stops if renewal fails. A holder that was paused past its claim
//! (GC, SIGSTOP, a slow disk) cannot know it lost it; that is what the
//! token is for: every write that matters runs through a script that first
//! checks the token against the counter ([`FENCE_CHECK`]) and refuses a
//! stale one.
//!
//! The same primitive serves two shapes:
//! - a claim per scheduled tick (`sched:{job}:{tick}`), kept past its run so
//!   that a replica whose ticker or clock is out of phase cannot run the
//!   tick again;
//! - a lease per role (the active ingest), renewed for as long as the
//!   holder lives and released on shutdown.
//!
//! A holder keeps its claim alive with [`keeper::keep`], one rule for
//! every holder: bounded renewal calls, given up at half the lease time.
//!
//! The store itself is checked with [`generation`]: a Redis that comes back
//! empty, or another one, is told apart from the one the state lives in.
//!
//! Every service reaches that Redis through [`endpoint`]: URL, ACL user and TLS files.
//!
//! This is an efficiency-and-safety mechanism on one Redis primary, not a
//! consensus protocol: what keeps correctness is the fenced write.

#![forbid(unsafe_code)]

pub mod endpoint;
pub mod generation;
pub mod keeper;

use std::time::Duration;

use redis::aio::ConnectionLike;
use redis::{RedisResult, Script};

/// A claim held by this process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim {
    /// The claimed key.
    pub key: String,
    /// The counter its fencing tokens come from (one per resource).
    pub fence_key: String,
    pub owner: String,
    /// This claim's fencing token: larger than every earlier claim's.
    pub token: u64,
}

impl Claim {
    /// The value stored under the claim key (`owner:token`): what
    /// [`LEASED_FENCE_CHECK`] compares the lease with.
    pub fn value(&self) -> String {
        format!("{}:{}", self.owner, self.token)
    }
}

/// Takes `key` for `owner` if nobody holds it, drawing a token from
/// `fence_key`; the claim lapses after `ttl` unless renewed.
const ACQUIRE: &str = r"
if redis.call('EXISTS', KEYS[1]) == 1 then return false end
local token = sluice_next_token(KEYS[2])
redis.call('SET', KEYS[1], ARGV[1] .. ':' .. token, 'PX', ARGV[2])
return token
";

/// Lua that draws fencing tokens that never repeat, whatever Redis
/// forgets: defines `sluice_next_token(key)`, the counter at `key` raised
/// to the larger of one above its value and the server's clock in
/// milliseconds. A store that lost the counter (restarted empty, failed
/// over to a stale replica) so starts above every token drawn in an
/// earlier millisecond, as long as tokens were drawn at under a thousand a
/// second and the server's clock did not go back. (Milliseconds, not finer: Lua prints numbers with
/// 14 significant digits, so tokens stay exact in the scripts' strings and
/// JSON for millennia.)
pub const NEXT_TOKEN: &str = r"
local function sluice_next_token(key)
  local now = redis.call('TIME')
  local clock = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
  local token = math.max((tonumber(redis.call('GET', key)) or 0) + 1, clock)
  redis.call('SET', key, string.format('%.0f', token))
  return token
end
";

/// Extends the claim only if it is still this owner's, with this token.
const RENEW: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
";

/// Deletes the claim only if it is still this owner's, with this token.
const RELEASE: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
";

/// The Lua prelude of a fenced write: with the fence counter as `KEYS[1]`
/// and the writer's token as `ARGV[1]`, it returns `-1` (refused) when a
/// newer claim of the resource exists. A fenced script starts with it and
/// does its write after.
pub const FENCE_CHECK: &str = r"
local newest = tonumber(redis.call('GET', KEYS[1]) or '0')
if tonumber(ARGV[1]) < newest then return -1 end
";

/// The Lua prelude of a write fenced by a lease as well as a token: with
/// the fence counter as `KEYS[1]`, the lease key as `KEYS[2]`, the writer's
/// token as `ARGV[1]` and its lease value (`owner:token`) as `ARGV[2]`, it
/// returns `-1` (refused) when a newer claim exists *or* the writer no
/// longer holds the lease. The second check closes the window between a
/// lapsed lease and the next claim, in which a paused holder's token would
/// still be the newest.
pub const LEASED_FENCE_CHECK: &str = r"
local newest = tonumber(redis.call('GET', KEYS[1]) or '0')
if tonumber(ARGV[1]) < newest or redis.call('GET', KEYS[2]) ~= ARGV[2] then return -1 end
";

fn millis(ttl: Duration) -> u64 {
    ttl.as_millis().clamp(1, u128::from(u64::MAX)) as u64
}

/// Claims `key` for `owner` for `ttl`: `None` if someone holds it.
pub async fn acquire(
    conn: &mut impl ConnectionLike,
    key: &str,
    fence_key: &str,
    owner: &str,
    ttl: Duration,
) -> RedisResult<Option<Claim>> {
    let token: Option<u64> = Script::new(&format!("{NEXT_TOKEN}{ACQUIRE}"))
        .key(key)
        .key(fence_key)
        .arg(owner)
        .arg(millis(ttl))
        .invoke_async(conn)
        .await?;
    Ok(token.map(|token| Claim { key: key.to_string(), fence_key: fence_key.to_string(), owner: owner.into(), token }))
}

/// Extends `claim` to `ttl` from now; `false` if it is no longer held
/// (lapsed, or taken by someone else): the holder must stop.
pub async fn renew(conn: &mut impl ConnectionLike, claim: &Claim, ttl: Duration) -> RedisResult<bool> {
    let renewed: i64 =
        Script::new(RENEW).key(&claim.key).arg(claim.value()).arg(millis(ttl)).invoke_async(conn).await?;
    Ok(renewed == 1)
}

/// Gives `claim` up; `false` if it was no longer held.
pub async fn release(conn: &mut impl ConnectionLike, claim: &Claim) -> RedisResult<bool> {
    let released: i64 = Script::new(RELEASE).key(&claim.key).arg(claim.value()).invoke_async(conn).await?;
    Ok(released == 1)
}

/// The outcome of a fenced write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fenced {
    Written,
    /// A newer claim of the resource exists: the write was refused.
    Stale,
}

/// Sets `field` of hash `key` to `value`, only if `claim`'s token is not
/// older than the resource's newest claim. The simplest fenced write; other
/// scripts start with [`FENCE_CHECK`] the same way.
pub async fn fenced_hset(
    conn: &mut impl ConnectionLike,
    claim: &Claim,
    key: &str,
    field: &str,
    value: &str,
) -> RedisResult<Fenced> {
    let script = format!("{FENCE_CHECK}\nredis.call('HSET', KEYS[2], ARGV[2], ARGV[3])\nreturn 1");
    let result: i64 = Script::new(&script)
        .key(&claim.fence_key)
        .key(key)
        .arg(claim.token)
        .arg(field)
        .arg(value)
        .invoke_async(conn)
        .await?;
    Ok(if result == -1 { Fenced::Stale } else { Fenced::Written })
}
