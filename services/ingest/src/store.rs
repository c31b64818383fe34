//! The ingest's state in Redis: the active instance's lease
//! (`<prefix>ingest:lease`, with fencing tokens from `<prefix>ingest:fence`,
//! through `sluice-coord`) and the resume cursor (`<prefix>ingest:cursor`:
//! the newest slot whose records Kafka has all acknowledged;
//! `<prefix>ingest:sent`: the newest slot fully sent, to count what a
//! takeover sends again). Cursor writes are fenced by the lease: an instance
//! that lost it cannot move the cursor.

use redis::aio::ConnectionManager;
use redis::{RedisResult, Script};
use sluice_coord::{Claim, LEASED_FENCE_CHECK};

/// Key names under one prefix.
#[derive(Debug, Clone)]
pub struct Keys {
    pub lease: String,
    pub fence: String,
    pub cursor: String,
    pub sent: String,
}

impl Keys {
    pub fn new(prefix: &str) -> Self {
        Self {
            lease: format!("{prefix}ingest:lease"),
            fence: format!("{prefix}ingest:fence"),
            cursor: format!("{prefix}ingest:cursor"),
            sent: format!("{prefix}ingest:sent"),
        }
    }
}

fn cursor_script() -> String {
    format!(
        "{LEASED_FENCE_CHECK}
-- KEYS: fence, lease, cursor, sent. ARGV: token, lease value, cursor, sent
local function raise(key, value)
  local current = tonumber(redis.call('GET', key) or '-1')
  if tonumber(value) > current then redis.call('SET', key, value) end
end
raise(KEYS[3], ARGV[3])
raise(KEYS[4], ARGV[4])
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

    /// The stored cursor and sent slot (`None` before the first).
    pub async fn position(&self) -> RedisResult<(Option<u64>, Option<u64>)> {
        redis::pipe().get(&self.keys.cursor).get(&self.keys.sent).query_async(&mut self.conn.clone()).await
    }

    /// Raises the cursor (and the sent slot), if `claim` still holds the lease.
    pub async fn advance(&self, claim: &Claim, cursor: u64, sent: u64) -> RedisResult<Written> {
        let result: i64 = self
            .cursor
            .key(&self.keys.fence)
            .key(&self.keys.lease)
            .key(&self.keys.cursor)
            .key(&self.keys.sent)
            .arg(claim.token)
            .arg(claim.value())
            .arg(cursor)
            .arg(sent)
            .invoke_async(&mut self.conn.clone())
            .await?;
        Ok(if result == 1 { Written::Moved } else { Written::Refused })
    }
}
