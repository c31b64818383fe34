//! The state store's generation: proof that the Redis a service talks to
//! is the one it wrote to.
//!
//! A Redis that restarts without its data, a failover to an empty replica
//! or a volume mix-up hands every service an empty store that answers like
//! the old one. So the store carries a marker, `<prefix>generation`, written
//! once, when a deployment first meets an empty store. A service opens it
//! at start ([`open`]) and remembers it; it checks it on every connection
//! and periodically ([`check`]) and its fenced writes check it atomically.
//! A marker that changed, or vanished, means the state was reset or
//! replaced: the service stops the work that depends on it, with a clear
//! error, a metric and an alert, instead of rebuilding on a blank slate.
//!
//! A service with evidence that state existed before (the processors: a
//! generation recorded with their group's committed offsets in Kafka)
//! opens with [`Expect::Recorded`] and never creates a marker: a store
//! without one then reads as lost, not as new.

use redis::aio::ConnectionLike;
use redis::{RedisResult, Script};

/// A store's generation marker, as read from it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Generation {
    /// The marker's key (`<prefix>generation`).
    pub key: String,
    /// Its value: when it was made (Unix ms, hex) and 64 random bits.
    pub id: String,
}

/// The marker's key under a deployment's key prefix.
pub fn key(prefix: &str) -> String {
    format!("{prefix}generation")
}

/// What a service knows before it opens the store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Expect {
    /// Nothing: a store without a marker is new, and gets one.
    Nothing,
    /// State was written under this generation (found outside Redis): the
    /// store must carry it.
    Recorded(String),
}

/// Why the store is not the one this service's state lives in.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Lost {
    #[error(
        "the Redis state store was reset or replaced: generation {expected} expected at {key}, but it holds none (it restarted without its data, or is another instance)"
    )]
    Missing { key: String, expected: String },
    #[error(
        "the Redis state store was replaced: generation {expected} expected at {key}, but it holds {found} (another instance, or a reset followed by a new start)"
    )]
    Changed { key: String, expected: String, found: String },
}

/// Reads the marker, or writes a new one if there is none (atomically: two
/// services opening an empty store at once get the same one). Returns the
/// generation and whether this call created it.
const OPEN: &str = r"
local current = redis.call('GET', KEYS[1])
if current then return {0, current} end
redis.call('SET', KEYS[1], ARGV[1])
return {1, ARGV[1]}
";

/// A fresh marker value: creation time and 64 random bits (from the
/// standard library's per-process random hash keys), so two stores never
/// share one.
fn fresh_id() -> String {
    use std::hash::{BuildHasher, Hasher};
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u128(now.as_nanos());
    hasher.write_u32(std::process::id());
    format!("{:x}-{:016x}", now.as_millis(), hasher.finish())
}

/// Opens the store's generation under `prefix`, marking an unmarked store
/// now (what a service with no evidence of earlier state does). Returns the
/// generation and whether this call created it.
pub async fn open_or_create(conn: &mut impl ConnectionLike, prefix: &str) -> RedisResult<(Generation, bool)> {
    let key = key(prefix);
    let (created, id): (i64, String) = Script::new(OPEN).key(&key).arg(fresh_id()).invoke_async(conn).await?;
    Ok((Generation { key, id }, created == 1))
}

/// Opens the store's generation under `prefix` as `expect` says: with
/// [`Expect::Nothing`], [`open_or_create`]; with [`Expect::Recorded`] the
/// store must already carry that generation, and is never marked. Returns
/// the generation the caller's state lives in (the recorded one, even when
/// the store lacks it) and whether this call created it, or why the store
/// is not that generation's.
pub async fn open(
    conn: &mut impl ConnectionLike,
    prefix: &str,
    expect: &Expect,
) -> RedisResult<(Generation, Result<bool, Lost>)> {
    match expect {
        Expect::Nothing => open_or_create(conn, prefix).await.map(|(generation, created)| (generation, Ok(created))),
        Expect::Recorded(expected) => {
            let generation = Generation { key: key(prefix), id: expected.clone() };
            let verdict = check(conn, &generation).await?;
            Ok((generation, verdict.map(|()| false)))
        }
    }
}

/// Whether the store still carries `generation`.
pub async fn check(conn: &mut impl ConnectionLike, generation: &Generation) -> RedisResult<Result<(), Lost>> {
    let found: Option<String> = redis::cmd("GET").arg(&generation.key).query_async(conn).await?;
    Ok(verdict(generation, found))
}

/// The verdict on a marker read back (`found`) for `generation`.
pub fn verdict(generation: &Generation, found: Option<String>) -> Result<(), Lost> {
    match found {
        Some(found) if found == generation.id => Ok(()),
        Some(found) => Err(Lost::Changed { key: generation.key.clone(), expected: generation.id.clone(), found }),
        None => Err(Lost::Missing { key: generation.key.clone(), expected: generation.id.clone() }),
    }
}

/// The code of the error reply a script gives when the store's generation
/// is not the caller's (see [`GENERATION_GUARD`]).
pub const ERROR_CODE: &str = "SLUICE_GENERATION";

/// Lua that refuses a write into another generation: defines
/// `sluice_refused(key, generation)`, which answers an error reply with
/// code [`ERROR_CODE`] when the marker at `key` is not `generation`, and
/// nothing otherwise. A script checks first and writes after:
/// `local refused = sluice_refused(KEYS[n], ARGV[m]) if refused then return refused end`.
pub const GENERATION_GUARD: &str = r"
local function sluice_refused(key, generation)
  local found = redis.call('GET', key)
  if found ~= generation then
    return redis.error_reply('SLUICE_GENERATION the store holds generation ' .. tostring(found or 'none') .. ', the writer ' .. generation)
  end
  return nil
end
";

/// Whether a Redis error is [`GENERATION_GUARD`]'s refusal.
pub fn is_refusal(e: &redis::RedisError) -> bool {
    e.code() == Some(ERROR_CODE)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fresh_ids_differ_and_verdicts_name_the_key() {
        assert_ne!(fresh_id(), fresh_id());
        let g = Generation { key: "p:generation".into(), id: "a".into() };
        assert_eq!(verdict(&g, Some("a".into())), Ok(()));
        let missing = verdict(&g, None).expect_err("missing").to_string();
        assert!(missing.contains("p:generation") && missing.contains("holds none"), "{missing}");
        let changed = verdict(&g, Some("b".into())).expect_err("changed").to_string();
        assert!(changed.contains("holds b"), "{changed}");
    }
}
