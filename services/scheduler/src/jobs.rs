//! The job contract, and the built-in jobs. Adding one is a [`Job`] impl plus
//! its line in [`builtin`]; its policies then come from
//! `SLUICE_SCHEDULER_JOB_<NAME>_…`.
//!
//! A run gets a [`RunContext`]: the tick, the run's fencing token,
//! cancellation, and [`RunContext::write`], the only way a job changes
//! Redis. A write is a Lua script body (a [`JobScript`]) that the scheduler
//! wraps in its fence and the tick's effect ledger: it is applied only while
//! the run holds the newest token and its lease, at most once per tick and
//! write id (a retry after a lost reply gets the first reply back), and the
//! first run that writes owns the tick's effect, so a peer that takes the
//! tick over never applies it again. A refused write stops the run.
//!
//! Effects outside Redis cannot be fenced by the scheduler: a job declares
//! them ([`Effects::External`]) and makes them idempotent per tick with
//! [`RunContext::idempotency_key`], which every run of the tick shares.

pub mod heartbeat;
pub mod reconcile;
pub mod tokens;

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use sluice_proto::chain::v1::chain_client::ChainClient;
use tokio::sync::watch;
use tonic::transport::Channel;

use crate::config::{JobDefaults, SchedulerConfig};
use crate::model::{ErrorKind, Tick};
use crate::store::{Applied, JobScript, RunLease, Store, StoreError, Write};

/// What a run reports.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Report {
    pub items: u64,
    pub drift_found: u64,
    pub drift_repaired: u64,
    /// Completion of each item after the run's start.
    pub item_done: Vec<Duration>,
}

/// Why a run failed: the scheduler records and exports the kinds apart.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JobError {
    /// A dependency (Redis, the chain) failed in a way that may pass; the
    /// next tick tries again (outcome `unavailable`).
    #[error("{dependency}: {message}")]
    Unavailable { dependency: &'static str, message: String },
    /// The job itself failed (outcome `failed`).
    #[error("{0}")]
    Failed(String),
    /// A write was refused by the fence: this run no longer holds its lease
    /// (outcome `lost_claim`).
    #[error("write refused: {0}")]
    Refused(&'static str),
}

impl JobError {
    pub fn unavailable(dependency: &'static str, error: impl std::fmt::Display) -> Self {
        Self::Unavailable { dependency, message: error.to_string() }
    }

    pub fn kind(&self) -> ErrorKind {
        match self {
            Self::Unavailable { .. } => ErrorKind::Dependency,
            Self::Failed(_) => ErrorKind::Job,
            Self::Refused(_) => ErrorKind::Fenced,
        }
    }
}

/// A job's run, as a future the scheduler can time out and drop.
pub type RunFuture<'a> = Pin<Box<dyn Future<Output = Result<Report, JobError>> + Send + 'a>>;

/// How a job's effects are made to apply once per tick.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Effects {
    /// Every effect is a [`RunContext::write`]: fenced, and applied at most
    /// once per tick by the ledger. Nothing else to do.
    Ledger,
    /// Some effects leave Redis; the job makes each idempotent per tick with
    /// [`RunContext::idempotency_key`] as this sentence says (shown by the
    /// admin API).
    External { idempotent_by: &'static str },
}

impl Effects {
    /// The declaration in words (the admin API's `Job.effects`).
    pub fn describe(&self) -> String {
        match self {
            Self::Ledger => "fenced Redis writes, applied at most once per tick by the scheduler's ledger".into(),
            Self::External { idempotent_by } => format!("outside Redis, idempotent per tick by {idempotent_by}"),
        }
    }
}

/// A periodic job.
pub trait Job: Send + Sync + 'static {
    /// Its name: lower-case words joined by `-` (config variables and metric
    /// labels derive from it).
    fn name(&self) -> &'static str;
    fn description(&self) -> &'static str;
    fn defaults(&self) -> JobDefaults;
    /// How its effects apply once per tick; required, so that a job with
    /// effects outside Redis cannot leave it unsaid.
    fn effects(&self) -> Effects;
    fn run<'a>(&'a self, ctx: &'a RunContext) -> RunFuture<'a>;
}

/// Tries of a write whose reply was lost, and the pause before the first
/// retry (doubled each time). Retrying is safe: the ledger knows the id.
const WRITE_TRIES: u32 = 4;
const WRITE_RETRY: Duration = Duration::from_millis(100);

/// What a run knows and may use.
#[derive(Debug)]
pub struct RunContext {
    pub job: &'static str,
    pub tick: Tick,
    /// This run's fencing token.
    pub token: u64,
    /// The replica running it.
    pub owner: String,
    /// Prefix of every Redis key.
    pub prefix: String,
    lease: RunLease,
    store: Arc<dyn Store>,
    cancel: watch::Receiver<bool>,
    refused: AtomicU64,
    /// How long the tick's ledger is kept (see [`Write::ledger_ttl`]).
    ledger_ttl: Duration,
}

impl RunContext {
    pub(crate) fn new(
        lease: RunLease,
        job: &'static str,
        store: Arc<dyn Store>,
        cancel: watch::Receiver<bool>,
        ledger_ttl: Duration,
    ) -> Self {
        Self {
            job,
            tick: lease.tick,
            token: lease.token,
            owner: lease.owner.clone(),
            prefix: store.prefix().to_string(),
            lease,
            store,
            cancel,
            refused: AtomicU64::new(0),
            ledger_ttl,
        }
    }

    /// A Redis connection for the job's reads.
    pub fn redis(&self) -> Result<redis::aio::ConnectionManager, JobError> {
        self.store.connection().ok_or_else(|| JobError::Failed("no Redis connection: the store is in memory".into()))
    }

    /// The lease value (`owner:token`) this run holds.
    pub fn lease_value(&self) -> String {
        self.lease.value()
    }

    /// The same for every run of this tick (a takeover too): the key under
    /// which an effect outside Redis is made idempotent per tick.
    pub fn idempotency_key(&self) -> String {
        format!("{}sched:{}:{}", self.prefix, self.job, self.tick.name())
    }

    /// A fenced write of `script`, named `id` within the tick: add the job's
    /// keys and arguments, then [`WriteCall::apply`].
    pub fn write<'c>(&'c self, script: &Arc<JobScript>, id: impl Into<String>) -> WriteCall<'c> {
        let (script, id) = (Arc::clone(script), id.into());
        let write = Write { script, id, keys: Vec::new(), args: Vec::new(), ledger_ttl: self.ledger_ttl };
        WriteCall { ctx: self, write }
    }

    /// True once the run must stop (lease lost, a write refused, shutdown
    /// deadline): start nothing new.
    pub fn is_cancelled(&self) -> bool {
        *self.cancel.borrow() || self.refused_count() > 0
    }

    /// Resolves when the run is cancelled.
    pub async fn cancelled(&self) {
        let mut rx = self.cancel.clone();
        let _ = rx.wait_for(|c| *c).await;
    }

    /// Writes the fence refused so far.
    pub fn refused_count(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }

    async fn apply(&self, write: &Write) -> Result<i64, JobError> {
        let mut pause = WRITE_RETRY;
        for attempt in 1..=WRITE_TRIES {
            match self.store.apply(&self.lease, write).await {
                Ok(Applied::Written(reply) | Applied::Already(reply)) => return Ok(reply),
                Ok(refusal) => {
                    self.refused.fetch_add(1, Ordering::Relaxed);
                    return Err(JobError::Refused(match refusal {
                        Applied::Superseded => "a newer run of the job started",
                        Applied::OtherRun => "another run's writes are the tick's effect",
                        _ => "the run no longer holds its lease",
                    }));
                }
                Err(StoreError::Unavailable(e)) if attempt < WRITE_TRIES && !self.is_cancelled() => {
                    tracing::debug!(job = self.job, id = write.id, error = %e, "Write unconfirmed; asking again");
                    tokio::time::sleep(pause).await;
                    pause *= 2;
                }
                Err(StoreError::Unavailable(e)) => return Err(JobError::unavailable("redis", e)),
                Err(e @ (StoreError::Reply(_) | StoreError::Replaced(_))) => {
                    return Err(JobError::Failed(format!("write {}: {e}", write.id)));
                }
            }
        }
        Err(JobError::unavailable("redis", "write unconfirmed"))
    }
}

/// A write being built: [`Self::key`] and [`Self::arg`], then [`Self::apply`].
#[derive(Debug)]
pub struct WriteCall<'c> {
    ctx: &'c RunContext,
    write: Write,
}

impl WriteCall<'_> {
    pub fn key(mut self, key: impl Into<String>) -> Self {
        self.write.keys.push(key.into());
        self
    }

    pub fn arg(mut self, arg: impl ToString) -> Self {
        self.write.args.push(arg.to_string());
        self
    }

    /// Applies the write; the script's reply. A lost reply is asked again
    /// (the ledger makes that safe); a refusal counts and stops the run.
    pub async fn apply(self) -> Result<i64, JobError> {
        self.ctx.apply(&self.write).await
    }
}

/// Runs `work` for every item with at most `concurrency` in flight: a new
/// item starts as soon as any finishes (a permit per item), so one slow item
/// holds one permit, never the whole sweep. Stops starting items once the
/// run is cancelled. Returns each finished item's result and completion time
/// after the start.
pub async fn pipeline<T, R, F, Fut>(
    ctx: &RunContext,
    items: impl IntoIterator<Item = T>,
    concurrency: usize,
    work: F,
) -> (Vec<R>, Vec<Duration>)
where
    F: Fn(T) -> Fut,
    Fut: Future<Output = R>,
{
    let start = Instant::now();
    let mut items = items.into_iter();
    let mut in_flight = FuturesUnordered::new();
    let mut results = Vec::new();
    let mut done = Vec::new();
    loop {
        while in_flight.len() < concurrency.max(1) && !ctx.is_cancelled() {
            match items.next() {
                Some(item) => in_flight.push(work(item)),
                None => break,
            }
        }
        match in_flight.next().await {
            Some(result) => {
                results.push(result);
                done.push(start.elapsed());
            }
            None => break,
        }
    }
    (results, done)
}

/// `SLUICE_SCHEDULER_CHAIN_URL` is not a URI.
#[derive(Debug, thiserror::Error)]
#[error("SLUICE_SCHEDULER_CHAIN_URL={url:?}: {source}")]
pub struct BadChainUrl {
    pub url: String,
    #[source]
    pub source: tonic::codegen::http::uri::InvalidUri,
}

/// The chain client the chain-reading jobs share.
pub fn chain_client(config: &SchedulerConfig) -> Result<ChainClient<Channel>, BadChainUrl> {
    sluice_service::connections::declare("chain", &config.chain_url);
    let endpoint = Channel::from_shared(config.chain_url.clone())
        .map_err(|source| BadChainUrl { url: config.chain_url.clone(), source })?
        .connect_timeout(Duration::from_secs(5))
        .timeout(config.chain_timeout);
    Ok(ChainClient::new(endpoint.connect_lazy()).max_decoding_message_size(64 << 20))
}

/// Every job this build has.
pub fn builtin(config: &SchedulerConfig) -> Result<Vec<Arc<dyn Job>>, BadChainUrl> {
    let chain = chain_client(config)?;
    Ok(vec![
        Arc::new(tokens::TokenRefresh::new(chain.clone())),
        Arc::new(reconcile::PoolReconcile::new(chain, config.reconcile_concurrency, config.reconcile_repair)),
        Arc::new(heartbeat::Heartbeat::default()),
    ])
}
