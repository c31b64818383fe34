//! [`Store`] in Redis: each transition is one Lua script (`scripts/*.lua`,
//! with `lib.lua` in front) taking one JSON request and answering JSON, so
//! both sides of the seam are typed and no argument is mapped by position.

use std::time::Duration;

use redis::aio::ConnectionManager;
use redis::{RedisError, Script};
use serde::Serialize;
use serde::de::DeserializeOwned;
use sluice_coord::generation::{self, Generation};

use super::history::texts;
use super::keys::{JobKeys, queued_value};
use super::{
    Applied, ClaimRequest, Claimed, FinishRequest, Finished, JobState, Queue, QueueRequest, RunLease, RunRecord, Store,
    StoreError, StoreResult, Write,
};
use crate::model::{Outcome, Tick};

const LIB: &str = include_str!("scripts/lib.lua");

/// The texts the scripts write into records (all of them live in
/// [`texts`]; a script never makes up a reason).
#[derive(Serialize)]
struct Texts {
    paused: &'static str,
    paused_while_queued: &'static str,
    overlap: &'static str,
    queued: &'static str,
    takeover: &'static str,
    abandoned_applied: &'static str,
    abandoned_none: &'static str,
    abandoned_queued: &'static str,
    superseded: &'static str,
}

const TEXTS: Texts = Texts {
    paused: texts::PAUSED,
    paused_while_queued: texts::PAUSED_WHILE_QUEUED,
    overlap: texts::OVERLAP,
    queued: texts::QUEUED,
    takeover: texts::TAKEOVER,
    abandoned_applied: texts::ABANDONED_APPLIED,
    abandoned_none: texts::ABANDONED_NONE,
    abandoned_queued: texts::ABANDONED_QUEUED,
    superseded: texts::SUPERSEDED,
};

#[derive(Serialize)]
struct History {
    ttl_ms: u64,
    keep: usize,
}

#[derive(Serialize)]
struct TickArg {
    ms: i64,
    manual: bool,
    name: String,
}

impl From<Tick> for TickArg {
    fn from(t: Tick) -> Self {
        Self { ms: t.ms, manual: t.manual, name: t.name() }
    }
}

/// Every request carries these; `fields` are the script's own.
#[derive(Serialize)]
struct Request<'a, T: Serialize> {
    base: &'a str,
    history: &'a History,
    texts: &'a Texts,
    /// The store generation the scheduler opened: a store without it gets no write.
    #[serde(skip_serializing_if = "Option::is_none")]
    generation: Option<&'a GenerationArg>,
    #[serde(flatten)]
    fields: T,
}

/// The generation marker a script checks before it writes.
#[derive(Debug, Clone, Serialize)]
struct GenerationArg {
    key: String,
    id: String,
}

/// The scripts, loaded once.
#[derive(Debug)]
struct Scripts {
    claim: Script,
    start_queued: Script,
    leave_queue: Script,
    renew: Script,
    finish: Script,
    record: Script,
}

impl Scripts {
    fn new() -> Self {
        let with_lib = |body: &str| Script::new(&format!("{LIB}\n{body}"));
        Self {
            claim: with_lib(include_str!("scripts/claim.lua")),
            start_queued: with_lib(include_str!("scripts/start_queued.lua")),
            leave_queue: with_lib(include_str!("scripts/leave_queue.lua")),
            renew: with_lib(include_str!("scripts/renew.lua")),
            finish: with_lib(include_str!("scripts/finish.lua")),
            record: with_lib(include_str!("scripts/record.lua")),
        }
    }
}

/// The scheduler's state in Redis.
#[derive(Clone)]
pub struct RedisStore {
    conn: ConnectionManager,
    prefix: String,
    scripts: std::sync::Arc<Scripts>,
    history: std::sync::Arc<History>,
    generation: std::sync::Arc<std::sync::OnceLock<GenerationArg>>,
}

impl std::fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStore").field("prefix", &self.prefix).finish_non_exhaustive()
    }
}

pub(crate) fn ms(d: Duration) -> u64 {
    d.as_millis().clamp(1, u128::from(u64::MAX)) as u64
}

fn error(e: RedisError) -> StoreError {
    if generation::is_refusal(&e) {
        return StoreError::Replaced(e.detail().unwrap_or_default().to_string());
    }
    // A script that fails to run is a bug on our side; anything else (the
    // connection, a timeout, a loading or failing-over server) may pass.
    if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::ResponseError) {
        StoreError::Reply(e.to_string())
    } else {
        StoreError::Unavailable(e.to_string())
    }
}

fn decode<T: DeserializeOwned>(reply: &str) -> StoreResult<T> {
    serde_json::from_str(reply).map_err(|e| StoreError::Reply(format!("{e}: {reply}")))
}

impl RedisStore {
    pub fn new(conn: ConnectionManager, prefix: &str, history_keep: usize, history_ttl: Duration) -> Self {
        Self {
            conn,
            prefix: prefix.to_string(),
            scripts: std::sync::Arc::new(Scripts::new()),
            history: std::sync::Arc::new(History { ttl_ms: ms(history_ttl), keep: history_keep }),
            generation: Default::default(),
        }
    }

    /// Opens the store's generation marker (`sluice_coord::generation`; an
    /// unmarked store is marked now): from then on every script refuses to
    /// write into a store without it. Returns it.
    pub async fn open_generation(&self) -> redis::RedisResult<Generation> {
        let (generation, created) = generation::open_or_create(&mut self.conn.clone(), &self.prefix).await?;
        tracing::info!(key = %generation.key, generation = %generation.id, created, "Redis state generation opened");
        let _ = self.generation.set(GenerationArg { key: generation.key.clone(), id: generation.id.clone() });
        Ok(generation)
    }

    /// Whether the store still carries the generation opened at start.
    pub async fn check_generation(&self, generation: &Generation) -> redis::RedisResult<Result<(), generation::Lost>> {
        generation::check(&mut self.conn.clone(), generation).await
    }

    pub fn keys(&self, job: &str) -> JobKeys {
        JobKeys::new(&self.prefix, job)
    }

    /// Runs `script` with `fields` as its request and decodes its reply.
    async fn call<T: Serialize, R: DeserializeOwned>(&self, script: &Script, job: &str, fields: T) -> StoreResult<R> {
        let keys = self.keys(job);
        let request = Request {
            base: keys.base(),
            history: &self.history,
            texts: &TEXTS,
            generation: self.generation.get(),
            fields,
        };
        let json = serde_json::to_string(&request).map_err(|e| StoreError::Reply(e.to_string()))?;
        let reply: String = script.arg(json).invoke_async(&mut self.conn.clone()).await.map_err(error)?;
        decode(&reply)
    }
}

#[derive(Serialize)]
struct ClaimFields<'a> {
    tick: TickArg,
    tick_key: String,
    owner: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    observed_last: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    gap: Option<&'a RunRecord>,
    gap_id: String,
    claim_ttl_ms: u64,
    lease_ttl_ms: u64,
    intent: crate::model::Intent,
    buffer_one: bool,
    queued_value: String,
    skip_detail: &'a str,
    record: RunRecord,
}

#[derive(Serialize)]
struct QueueFields<'a> {
    tick: TickArg,
    tick_key: String,
    owner: &'a str,
    queued_value: String,
    claim_ttl_ms: u64,
    lease_ttl_ms: u64,
    record: RunRecord,
}

#[derive(Serialize)]
struct RenewFields {
    tick_key: String,
    lease: String,
    lease_ttl_ms: u64,
    claim_ttl_ms: u64,
}

#[derive(Serialize)]
struct FinishFields<'a> {
    tick: TickArg,
    tick_key: String,
    lease: String,
    token: u64,
    id: String,
    record: &'a RunRecord,
    keep_ms: u64,
}

#[derive(Serialize)]
struct RecordFields<'a> {
    id: String,
    score: i64,
    record: &'a RunRecord,
}

#[derive(Serialize)]
struct WriteHeader<'a> {
    token: u64,
    lease: String,
    id: &'a str,
    ttl_ms: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    generation: Option<&'a GenerationArg>,
}

#[async_trait::async_trait]
impl Store for RedisStore {
    fn prefix(&self) -> &str {
        &self.prefix
    }

    fn connection(&self) -> Option<ConnectionManager> {
        Some(self.conn.clone())
    }

    async fn last_tick(&self, job: &str) -> StoreResult<Option<i64>> {
        redis::cmd("HGET")
            .arg(self.keys(job).state())
            .arg("last_tick")
            .query_async(&mut self.conn.clone())
            .await
            .map_err(error)
    }

    async fn claim(&self, req: &ClaimRequest) -> StoreResult<Claimed> {
        let keys = self.keys(&req.job);
        let fields = ClaimFields {
            tick: req.tick.into(),
            tick_key: keys.tick(req.tick),
            owner: &req.owner,
            observed_last: req.observed_last,
            gap: req.gap.as_ref(),
            gap_id: req.gap.as_ref().map(RunRecord::id).unwrap_or_default(),
            claim_ttl_ms: ms(req.claim_ttl),
            lease_ttl_ms: ms(req.lease_ttl),
            intent: req.intent,
            buffer_one: req.buffer_one,
            queued_value: queued_value(&req.owner, req.tick),
            skip_detail: &req.skip_detail,
            record: RunRecord::new(&req.job, req.tick, &req.owner, Outcome::Running, req.now_ms),
        };
        self.call(&self.scripts.claim, &req.job, fields).await
    }

    async fn start_queued(&self, req: &QueueRequest) -> StoreResult<Queue> {
        let fields = QueueFields {
            tick: req.tick.into(),
            tick_key: self.keys(&req.job).tick(req.tick),
            owner: &req.owner,
            queued_value: queued_value(&req.owner, req.tick),
            claim_ttl_ms: ms(req.claim_ttl),
            lease_ttl_ms: ms(req.lease_ttl),
            record: RunRecord::new(&req.job, req.tick, &req.owner, Outcome::Running, req.now_ms),
        };
        self.call(&self.scripts.start_queued, &req.job, fields).await
    }

    async fn leave_queue(&self, job: &str, owner: &str, tick: Tick) -> StoreResult<()> {
        #[derive(Serialize)]
        struct Fields {
            queued_value: String,
        }
        let _: bool =
            self.call(&self.scripts.leave_queue, job, Fields { queued_value: queued_value(owner, tick) }).await?;
        Ok(())
    }

    async fn renew(&self, lease: &RunLease, claim_ttl: Duration, lease_ttl: Duration) -> StoreResult<bool> {
        let fields = RenewFields {
            tick_key: self.keys(&lease.job).tick(lease.tick),
            lease: lease.value(),
            lease_ttl_ms: ms(lease_ttl),
            claim_ttl_ms: ms(claim_ttl),
        };
        self.call(&self.scripts.renew, &lease.job, fields).await
    }

    async fn apply(&self, lease: &RunLease, write: &Write) -> StoreResult<Applied> {
        let keys = self.keys(&lease.job);
        let header = WriteHeader {
            token: lease.token,
            lease: lease.value(),
            id: &write.id,
            ttl_ms: ms(write.ledger_ttl),
            generation: self.generation.get(),
        };
        let header = serde_json::to_string(&header).map_err(|e| StoreError::Reply(e.to_string()))?;
        let mut invocation = write.script.redis().prepare_invoke();
        invocation.key(keys.fence()).key(keys.running()).key(keys.ledger(lease.tick)).arg(header);
        for key in &write.keys {
            invocation.key(key);
        }
        for arg in &write.args {
            invocation.arg(arg);
        }
        let reply: String = invocation.invoke_async(&mut self.conn.clone()).await.map_err(error)?;
        decode(&reply)
    }

    async fn finish(&self, end: &FinishRequest) -> StoreResult<Finished> {
        let lease = &end.lease;
        let fields = FinishFields {
            tick: lease.tick.into(),
            tick_key: self.keys(&lease.job).tick(lease.tick),
            lease: lease.value(),
            token: lease.token,
            id: end.record.id(),
            record: &end.record,
            keep_ms: ms(end.claim_keep),
        };
        self.call(&self.scripts.finish, &lease.job, fields).await
    }

    async fn record(&self, run: &RunRecord) -> StoreResult<()> {
        let fields = RecordFields { id: run.id(), score: run.tick_ms, record: run };
        let _: bool = self.call(&self.scripts.record, &run.job, fields).await?;
        Ok(())
    }

    async fn runs(&self, job: &str, limit: usize) -> StoreResult<Vec<RunRecord>> {
        let keys = self.keys(job);
        let mut conn = self.conn.clone();
        let ids: Vec<String> = redis::cmd("ZREVRANGE")
            .arg(keys.runs())
            .arg(0)
            .arg(limit.max(1) - 1)
            .query_async(&mut conn)
            .await
            .map_err(error)?;
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        // Records and leases in one atomic read: a run that ends in between
        // must not look abandoned.
        let (raw, running, queued): (Vec<Option<String>>, Option<String>, Option<String>) = redis::pipe()
            .atomic()
            .cmd("MGET")
            .arg(ids.iter().map(|id| keys.run(id)).collect::<Vec<_>>())
            .get(keys.running())
            .get(keys.queued())
            .query_async(&mut conn)
            .await
            .map_err(error)?;
        let records = raw.into_iter().flatten().filter_map(|json| serde_json::from_str::<RunRecord>(&json).ok());
        Ok(records.map(|run| super::history::as_read(run, running.as_deref(), queued.as_deref())).collect())
    }

    async fn job_state(&self, job: &str) -> StoreResult<JobState> {
        let (paused, reason, success): (Option<String>, Option<String>, Option<i64>) = redis::cmd("HMGET")
            .arg(self.keys(job).state())
            .arg("paused")
            .arg("paused_reason")
            .arg("last_success_ms")
            .query_async(&mut self.conn.clone())
            .await
            .map_err(error)?;
        Ok(JobState {
            paused: paused.as_deref() == Some("1"),
            paused_reason: reason.unwrap_or_default(),
            last_success_ms: success,
        })
    }

    async fn set_paused(&self, job: &str, paused: bool, reason: &str) -> StoreResult<()> {
        let () = redis::cmd("HSET")
            .arg(self.keys(job).state())
            .arg("paused")
            .arg(if paused { "1" } else { "0" })
            .arg("paused_reason")
            .arg(if paused { reason } else { "" })
            .query_async(&mut self.conn.clone())
            .await
            .map_err(error)?;
        Ok(())
    }
}

/// A job's write script: its `body` as a function seeing only the job's own
/// keys and arguments, inside `fenced.lua` (fence, lease, ledger).
pub(crate) fn fenced_script(body: &str) -> Script {
    Script::new(&format!("local function body(KEYS, ARGV)\n{body}\nend\n{}", include_str!("scripts/fenced.lua")))
}
