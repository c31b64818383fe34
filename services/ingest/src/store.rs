//! The ingest's state in Redis: the active instance's lease
//! (`<prefix>ingest:lease`, with fencing tokens from `<prefix>ingest:fence`,
//! through `sluice-coord`) and the resume cursor (`<prefix>ingest:cursor`:
//! the newest slot whose records Kafka has all acknowledged). Cursor writes
//! are fenced by the lease: an instance that lost it cannot move the cursor.
//! (What a takeover sends again is counted from the topic itself, not from
//! here: see `resent`.)

use redis::aio::ConnectionManager;
use redis::{RedisResult, Script};
use sluice_coord::{Claim, LEASED_FENCE_CHECK};

/// Key names under one prefix.
#[derive(Debug, Clone)]
pub struct Keys {
    pub lease: String,
    pub fence: String,
    pub cursor: String,
}

impl Keys {
    pub fn new(prefix: &str) -> Self {
        Self {
            lease: format!("{prefix}ingest:lease"),
            fence: format!("{prefix}ingest:fence"),
            cursor: format!("{prefix}ingest:cursor"),
        }
    }
}

fn cursor_script() -> String {
    format!(
        "{LEASED_FENCE_CHECK}
-- KEYS: fence, lease, cursor. ARGV: token, lease value, cursor
local current = tonumber(redis.call('GET', KEYS[3]) or '-1')
if tonumber(ARGV[3]) > current then redis.call('SET', KEYS[3], ARGV[3]) end
return 1"
    )
}

/// Where a cursor write went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Written {
    Moved,
    /// The lease is no longer this instance's.
    Refused,
}

/// Redis access for the ingest.
#[derive(Clone)]
pub struct Store {
    conn: ConnectionManager,
    pub keys: Keys,
    cursor: Script,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").field("keys", &self.keys).finish_non_exhaustive()
    }
}

impl Store {
    pub fn new(conn: ConnectionManager, prefix: &str) -> Self {
        Self { conn, keys: Keys::new(prefix), cursor: Script::new(&cursor_script()) }
    }

    pub fn connection(&self) -> ConnectionManager {
        self.conn.clone()
    }

    /// The stored cursor (`None` before the first).
    pub async fn position(&self) -> RedisResult<Option<u64>> {
        redis::cmd("GET").arg(&self.keys.cursor).query_async(&mut self.conn.clone()).await
    }

    /// Raises the cursor, if `claim` still holds the lease.
    pub async fn advance(&self, claim: &Claim, cursor: u64) -> RedisResult<Written> {
        let result: i64 = self
            .cursor
            .key(&self.keys.fence)
            .key(&self.keys.lease)
            .key(&self.keys.cursor)
            .arg(claim.token)
            .arg(claim.value())
            .arg(cursor)
            .invoke_async(&mut self.conn.clone())
            .await?;
        Ok(if result == 1 { Written::Moved } else { Written::Refused })
    }
}
