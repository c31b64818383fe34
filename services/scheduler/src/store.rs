//! The scheduler's shared state: who runs which tick, with which token, which
//! run's writes are the tick's effect, and what happened. Every transition
//! is one atomic step of the store, so replicas racing for a tick see one
//! outcome.
//!
//! [`Store`] is the contract; [`redis::RedisStore`] keeps it in Redis (one
//! Lua script per transition, `store/scripts/`), [`memory::MemoryStore`] is
//! the same rules in process memory, for the engine's tests under paused
//! time. A test runs the same sequences against both (`tests/store_contract.rs`).
//!
//! **The effect ledger.** Every fenced write of a run goes through
//! [`Store::apply`], which in the same atomic step checks the fence (the
//! run's token is the newest and it still holds the lease), marks the tick's
//! ledger with the run and the write's id, and only then applies it. So:
//! - a write is applied at most once per tick: retried after a lost reply,
//!   it finds its id in the ledger and returns the reply it had;
//! - the first run that writes owns the tick's effect: a peer that finds
//!   the run dead asks the ledger first, and a tick with writes is recorded
//!   as applied by the dead run and never run again;
//! - a run's record says how many of the tick's writes it applied, from the
//!   ledger (the truth), not from what the run saw.

#[cfg(test)]
pub(crate) mod faulty;
pub mod history;
pub mod keys;
pub mod memory;
pub mod redis;

use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

pub use self::history::{JobState, RunRecord};
use crate::model::{Intent, LostReason, Outcome, SkipReason, Tick};

/// A failed store call.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    /// The store did not answer (connection, timeout): the call may or may
    /// not have been applied.
    #[error("redis unavailable: {0}")]
    Unavailable(String),
    /// The store answered something the scheduler does not understand (a
    /// bug, or a script of another version).
    #[error("unexpected reply from redis: {0}")]
    Reply(String),
    /// The store is not the one the scheduler's state is in (its generation
    /// marker changed or vanished): the script wrote nothing.
    #[error("redis state store replaced: {0}")]
    Replaced(String),
}

pub type StoreResult<T> = Result<T, StoreError>;

/// A run's hold on its job: the lease value `owner:token` is what fenced
/// writes, renewals and the end are checked against.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunLease {
    pub job: String,
    pub tick: Tick,
    pub owner: String,
    pub token: u64,
}

impl RunLease {
    pub fn value(&self) -> String {
        format!("{}:{}", self.owner, self.token)
    }
}

/// A claim attempt.
#[derive(Debug, Clone)]
pub struct ClaimRequest {
    pub job: String,
    pub tick: Tick,
    pub owner: String,
    /// The newest claimed tick as the caller last saw it; the claim is
    /// refused with [`LostReason::Retry`] if it moved (the gap record would
    /// be wrong).
    pub observed_last: Option<i64>,
    /// The ticks between `observed_last` and `tick` nobody claimed, as a
    /// `missed` record (written only if this claim moves the job on).
    pub gap: Option<RunRecord>,
    /// How long the tick's claim lives (kept past the run, see
    /// [`crate::config::JobSettings::claim_keep`]).
    pub claim_ttl: Duration,
    pub lease_ttl: Duration,
    pub intent: Intent,
    pub buffer_one: bool,
    /// The record's reason if the tick is resolved as `intent`'s skip.
    pub skip_detail: String,
    pub now_ms: i64,
}

/// What a claim attempt got.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ClaimOutcome {
    /// This replica runs the tick with this fencing token.
    Run {
        token: u64,
        takeover: bool,
    },
    /// Waiting behind the running tick (buffer-one).
    Queued,
    /// This replica resolved the tick as not run.
    Skipped(SkipReason),
    Lost(LostReason),
}

/// A run whose replica stopped without recording its end, recorded by the
/// call that found its lease lapsed (`abandoned`, with what it applied).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Resolved {
    pub tick_ms: i64,
    pub manual: bool,
    pub owner: String,
    pub token: u64,
    /// Writes of the tick's effect it applied (0: none; the tick was then
    /// taken over, or is missed).
    pub applied: u64,
}

/// A claim attempt's outcome and the job's state as the store saw it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Claimed {
    pub outcome: ClaimOutcome,
    /// The newest scheduled tick claimed before this attempt.
    pub previous_tick: Option<i64>,
    pub last_success_ms: Option<i64>,
    pub resolved: Option<Resolved>,
}

/// A queued tick's attempt to start, for [`Store::start_queued`].
#[derive(Debug, Clone)]
pub struct QueueRequest {
    pub job: String,
    pub tick: Tick,
    pub owner: String,
    pub claim_ttl: Duration,
    pub lease_ttl: Duration,
    pub now_ms: i64,
}

/// Where a queued tick stands, for [`Store::start_queued`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Queue {
    /// It runs now, with this token.
    Started { token: u64, resolved: Option<Resolved> },
    /// Still behind the running tick (its place was renewed).
    Waiting,
    /// The job was paused meanwhile (recorded as skipped).
    Paused,
    /// Its place lapsed.
    Lost,
}

/// A job's write: a Lua body that sees only the job's own `KEYS` and `ARGV`
/// (from 1) and returns an integer, wrapped in the fence and the ledger.
/// Build it once per job (Redis caches the script under its hash).
#[derive(Debug)]
pub struct JobScript {
    name: &'static str,
    script: ::redis::Script,
}

impl JobScript {
    /// `name` identifies the write in tests (the in-memory store runs a
    /// Rust model registered under it).
    pub fn new(name: &'static str, body: &str) -> Arc<Self> {
        Arc::new(Self { name, script: redis::fenced_script(body) })
    }

    pub fn name(&self) -> &'static str {
        self.name
    }

    pub(crate) fn redis(&self) -> &::redis::Script {
        &self.script
    }
}

/// A fenced write of a run: a job's Lua script with the job's keys and
/// arguments, named `id` within the tick (a retry with the same id is never
/// applied twice).
#[derive(Debug, Clone)]
pub struct Write {
    pub script: Arc<JobScript>,
    pub id: String,
    pub keys: Vec<String>,
    pub args: Vec<String>,
    /// How long the tick's ledger is kept: at least the history's lifetime
    /// and twice the tick's claim, so a takeover or a late end can ask it.
    pub ledger_ttl: Duration,
}

/// What a fenced write did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Applied {
    /// Applied now; the script's reply.
    Written(i64),
    /// Applied before by this run (a retry after a lost reply); the reply it had.
    Already(i64),
    /// Refused: a newer run of the job started.
    Superseded,
    /// Refused: the run no longer holds its lease.
    LeaseLost,
    /// Refused: another run's writes are the tick's effect.
    OtherRun,
}

/// The end of a run, for [`Store::finish`].
#[derive(Debug, Clone)]
pub struct FinishRequest {
    pub lease: RunLease,
    /// The run's final record as the run saw it (`applied` is filled in
    /// from the ledger).
    pub record: RunRecord,
    /// How long the tick's claim is kept after the end.
    pub claim_keep: Duration,
}

/// What [`Store::finish`] recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Finished {
    /// The outcome recorded: the run's own, or `lost_claim` if it thought it
    /// succeeded while a newer run had started (the lease was gone).
    pub outcome: Outcome,
    /// Writes of the tick's effect this run applied, by the ledger.
    pub applied: u64,
}

/// The scheduler's state store. Every method is one atomic step.
#[async_trait::async_trait]
pub trait Store: Send + Sync + std::fmt::Debug + 'static {
    /// The prefix of every key (shared with the processors' keys).
    fn prefix(&self) -> &str;

    /// A Redis connection for jobs that read Redis (none in memory).
    fn connection(&self) -> Option<::redis::aio::ConnectionManager>;

    /// The newest scheduled tick claimed for `job`.
    async fn last_tick(&self, job: &str) -> StoreResult<Option<i64>>;

    /// Claims a tick (see [`ClaimRequest`]); a run found dead on the way is
    /// recorded ([`Claimed::resolved`]).
    async fn claim(&self, req: &ClaimRequest) -> StoreResult<Claimed>;

    /// For a queued tick: starts it once the lease is free, else keeps its
    /// place (see [`Queue`]).
    async fn start_queued(&self, req: &QueueRequest) -> StoreResult<Queue>;

    /// Gives up a queued place (shutdown).
    async fn leave_queue(&self, job: &str, owner: &str, tick: Tick) -> StoreResult<()>;

    /// Extends a running tick's lease and claim; `false` once it is lost.
    async fn renew(&self, lease: &RunLease, claim_ttl: Duration, lease_ttl: Duration) -> StoreResult<bool>;

    /// A fenced write, at most once per tick and id (see the module doc).
    async fn apply(&self, lease: &RunLease, write: &Write) -> StoreResult<Applied>;

    /// Ends a run: frees the lease, marks the tick resolved unless a
    /// cancelled run applied nothing, and writes the final record.
    async fn finish(&self, end: &FinishRequest) -> StoreResult<Finished>;

    /// Adds or replaces a record in the job's history.
    async fn record(&self, run: &RunRecord) -> StoreResult<()>;

    /// The newest `limit` records of `job`, newest first. A run still marked
    /// running (or queued) whose lease is gone reads as abandoned.
    async fn runs(&self, job: &str, limit: usize) -> StoreResult<Vec<RunRecord>>;

    /// Pause state and last success, as stored.
    async fn job_state(&self, job: &str) -> StoreResult<JobState>;

    /// Pauses or resumes `job` on every replica.
    async fn set_paused(&self, job: &str, paused: bool, reason: &str) -> StoreResult<()>;

    /// Every record of `job` (tests and audits), oldest first.
    async fn all_runs(&self, job: &str) -> StoreResult<Vec<RunRecord>> {
        let mut runs = self.runs(job, usize::MAX / 2).await?;
        runs.reverse();
        Ok(runs)
    }
}
