//! The jobs. Adding one is a [`Job`] impl plus its line in [`builtin`]; its
//! policies then come from `SLUICE_SCHEDULER_JOB_<NAME>_…`.
//!
//! A job gets a [`RunContext`]: the tick, the run's fencing token, a Redis
//! connection, and cancellation. Writes that matter for correctness go
//! through a Lua script that starts with [`sluice_coord::LEASED_FENCE_CHECK`]
//! and is invoked through [`RunContext::fenced`] (which passes the fence and
//! lease keys as `KEYS[1..2]` and the token and lease value as `ARGV[1..2]`;
//! the job's own keys and arguments follow). A refusal is reported with
//! [`RunContext::refused`]: the run no longer holds its lease (it lapsed, or
//! a newer run took the job) and must stop.

pub mod heartbeat;
pub mod reconcile;
pub mod tokens;

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use redis::aio::ConnectionManager;
use sluice_proto::chain::v1::chain_client::ChainClient;
use tokio::sync::watch;
use tonic::transport::Channel;

use crate::config::{JobDefaults, SchedulerConfig};
use crate::store::Tick;

/// What a run reports.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Report {
    pub items: u64,
    pub drift_found: u64,
    pub drift_repaired: u64,
    /// Completion of each item after the run's start.
    pub item_done: Vec<Duration>,
}

/// A job's run, as a future the scheduler can time out and drop.
pub type RunFuture<'a> = Pin<Box<dyn Future<Output = Result<Report, String>> + Send + 'a>>;

/// A periodic job.
pub trait Job: Send + Sync + 'static {
    /// Its name: lower-case words joined by `-` (config variables and metric
    /// labels derive from it).
    fn name(&self) -> &'static str;
    fn description(&self) -> &'static str;
    fn defaults(&self) -> JobDefaults;
    fn run<'a>(&'a self, ctx: &'a RunContext) -> RunFuture<'a>;
}

/// What a run knows and may use.
#[derive(Debug)]
pub struct RunContext {
    pub job: &'static str,
    pub tick: Tick,
    /// This run's fencing token.
    pub token: u64,
    /// The replica running it.
    pub owner: String,
    /// The counter [`Self::token`] is checked against in fenced writes.
    pub fence_key: String,
    /// The job's lease, which the run must still hold for a fenced write.
    pub lease_key: String,
    /// Prefix of every Redis key.
    pub prefix: String,
    pub redis: ConnectionManager,
    cancel: watch::Receiver<bool>,
    refused: Arc<AtomicU64>,
}

impl RunContext {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        job: &'static str,
        tick: Tick,
        token: u64,
        owner: String,
        fence_key: String,
        lease_key: String,
        prefix: String,
        redis: ConnectionManager,
        cancel: watch::Receiver<bool>,
    ) -> Self {
        Self { job, tick, token, owner, fence_key, lease_key, prefix, redis, cancel, refused: Arc::default() }
    }

    /// An invocation of `script` (which starts with
    /// [`sluice_coord::LEASED_FENCE_CHECK`]) with this run's fence: add the
    /// job's keys from `KEYS[3]` and arguments from `ARGV[3]` on.
    pub fn fenced<'s>(&self, script: &'s redis::Script) -> redis::ScriptInvocation<'s> {
        let mut invocation = script.prepare_invoke();
        invocation
            .key(&self.fence_key)
            .key(&self.lease_key)
            .arg(self.token)
            .arg(format!("{}:{}", self.owner, self.token));
        invocation
    }

    /// True once the run must stop (lease lost, shutdown deadline): start
    /// nothing new.
    pub fn is_cancelled(&self) -> bool {
        *self.cancel.borrow()
    }

    /// Resolves when the run is cancelled.
    pub async fn cancelled(&self) {
        let mut rx = self.cancel.clone();
        let _ = rx.wait_for(|c| *c).await;
    }

    /// Reports a write the fence refused.
    pub fn refused(&self) {
        self.refused.fetch_add(1, Ordering::Relaxed);
    }

    /// Writes the fence refused so far.
    pub fn refused_count(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
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

/// The chain client the chain-reading jobs share.
pub fn chain_client(config: &SchedulerConfig) -> Result<ChainClient<Channel>, String> {
    let endpoint = Channel::from_shared(config.chain_url.clone())
        .map_err(|e| format!("SLUICE_SCHEDULER_CHAIN_URL={:?}: {e}", config.chain_url))?
        .connect_timeout(Duration::from_secs(5))
        .timeout(config.chain_timeout);
    Ok(ChainClient::new(endpoint.connect_lazy()).max_decoding_message_size(64 << 20))
}

/// Every job this build has.
pub fn builtin(config: &SchedulerConfig) -> Result<Vec<Arc<dyn Job>>, String> {
    let chain = chain_client(config)?;
    Ok(vec![
        Arc::new(tokens::TokenRefresh::new(chain.clone())),
        Arc::new(reconcile::PoolReconcile::new(chain, config.reconcile_concurrency, config.reconcile_repair)),
        Arc::new(heartbeat::Heartbeat),
    ])
}
