//! The ingest's state in Redis: the active instance's lease
//! (`<prefix>ingest:lease`, with fencing tokens from `<prefix>ingest:fence`,
//! through `sluice-coord`) and the resume cursor (`<prefix>ingest:cursor`:
//! the newest slot whose records Kafka has all acknowledged). Cursor writes
//! are fenced by the lease: an instance that lost it cannot move the cursor.
//! (What a takeover sends again is counted from the topic itself, not from
//! here: see `resent`.)

use std::sync::{Arc, OnceLock};

use redis::aio::ConnectionManager;
use redis::{RedisResult, Script};
use sluice_coord::generation::{self, GENERATION_GUARD, Generation, Lost};
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
        "{GENERATION_GUARD}
-- KEYS: fence, lease, cursor, generation marker. ARGV: token, lease value, cursor, generation
local refused = sluice_refused(KEYS[4], ARGV[4])
if refused then return refused end
{LEASED_FENCE_CHECK}
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
    /// The store is not the one the cursor lives in (its generation marker
    /// changed or vanished): nothing was written.
    Replaced,
}

/// Redis access for the ingest.
#[derive(Clone)]
pub struct Store {
    conn: ConnectionManager,
    pub keys: Keys,
    cursor: Script,
    prefix: String,
    generation: Arc<OnceLock<Generation>>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").field("keys", &self.keys).finish_non_exhaustive()
    }
}

impl Store {
    pub fn new(conn: ConnectionManager, prefix: &str) -> Self {
        Self {
            conn,
            keys: Keys::new(prefix),
            cursor: Script::new(&cursor_script()),
            prefix: prefix.to_string(),
            generation: Arc::default(),
        }
    }

    /// Opens the store's generation marker (`sluice_coord::generation`; an
    /// unmarked store is marked now): from then on the cursor is written only
    /// into a store that carries it.
    pub async fn open_generation(&self) -> RedisResult<Generation> {
        if let Some(g) = self.generation.get() {
            return Ok(g.clone());
        }
        let (opened, created) = generation::open_or_create(&mut self.conn.clone(), &self.prefix).await?;
        tracing::info!(key = %opened.key, generation = %opened.id, created, "Redis state generation opened");
        Ok(self.generation.get_or_init(|| opened).clone())
    }

    /// Whether the store still carries the generation opened at start (no
    /// verdict before it was opened).
    pub async fn check_generation(&self) -> RedisResult<Result<(), Lost>> {
        match self.generation.get() {
            Some(g) => generation::check(&mut self.conn.clone(), g).await,
            None => Ok(Ok(())),
        }
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
        let (marker, id) = self
            .generation
            .get()
            .map_or((generation::key(&self.prefix), String::new()), |g| (g.key.clone(), g.id.clone()));
        let result: RedisResult<i64> = self
            .cursor
            .key(&self.keys.fence)
            .key(&self.keys.lease)
            .key(&self.keys.cursor)
            .key(marker)
            .arg(claim.token)
            .arg(claim.value())
            .arg(cursor)
            .arg(id)
            .invoke_async(&mut self.conn.clone())
            .await;
        match result {
            Ok(1) => Ok(Written::Moved),
            Ok(_) => Ok(Written::Refused),
            Err(e) if generation::is_refusal(&e) => Ok(Written::Replaced),
            Err(e) => Err(e),
        }
    }
}
