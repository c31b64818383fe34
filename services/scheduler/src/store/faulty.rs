//! A replica's view of the store that fails the way replicas and their
//! links to Redis fail (tests only): a call that never reached the store, a
//! reply lost after the call was applied, a replica killed before or after
//! a call (it never makes another), a replica paused (every call it makes
//! meanwhile waits for the pause to end; one dropped by its caller never
//! reaches the store), and a call delayed in flight (applied late, even if
//! its caller gave up: a zombie's write).

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use super::memory::MemoryStore;
use super::{
    Applied, ClaimRequest, Claimed, FinishRequest, Finished, JobState, Queue, QueueRequest, RunLease, RunRecord, Store,
    StoreError, StoreResult, Write,
};
use crate::model::Tick;

/// The store calls a fault can hit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Call {
    Read,
    Claim,
    StartQueued,
    LeaveQueue,
    Renew,
    Apply,
    Finish,
    Record,
}

/// What happens to one call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// It fails without reaching the store.
    FailBefore,
    /// It is applied, but its reply is lost.
    LoseReply,
    /// The replica dies before it reaches the store.
    DieBefore,
    /// The replica dies once it is applied, before the reply.
    DieAfter,
    /// The replica freezes this long before making it.
    Pause(Duration),
    /// It is applied this late, whether or not its caller still waits.
    Delay(Duration),
}

/// Decides each call's fault.
pub type Plan = Box<dyn FnMut(Call) -> Option<Fault> + Send>;

/// One replica's faulty view of a shared [`MemoryStore`].
pub struct Faulty {
    inner: Arc<MemoryStore>,
    plan: Mutex<Plan>,
    dead: AtomicBool,
    paused_until: Mutex<Option<Instant>>,
}

impl std::fmt::Debug for Faulty {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Faulty").field("dead", &self.dead).finish_non_exhaustive()
    }
}

impl Faulty {
    pub fn new(inner: Arc<MemoryStore>, plan: Plan) -> Arc<Self> {
        Arc::new(Self { inner, plan: Mutex::new(plan), dead: AtomicBool::new(false), paused_until: Mutex::new(None) })
    }

    /// SIGKILL: no call of this replica reaches the store again.
    pub fn kill(&self) {
        self.dead.store(true, Ordering::SeqCst);
    }

    pub fn is_dead(&self) -> bool {
        self.dead.load(Ordering::SeqCst)
    }

    /// SIGSTOP for `d`: calls made meanwhile wait for its end.
    pub fn pause(&self, d: Duration) {
        let until = Instant::now() + d;
        let mut paused = self.paused_until.lock().unwrap_or_else(|e| e.into_inner());
        *paused = Some(paused.map_or(until, |p| p.max(until)));
    }

    async fn gone<T>() -> StoreResult<T> {
        std::future::pending().await
    }

    async fn call<T, F, Fut>(&self, call: Call, op: F) -> StoreResult<T>
    where
        T: Send + 'static,
        F: FnOnce() -> Fut + Send + 'static,
        Fut: Future<Output = StoreResult<T>> + Send + 'static,
    {
        loop {
            let until = *self.paused_until.lock().unwrap_or_else(|e| e.into_inner());
            match until {
                Some(t) if t > Instant::now() => tokio::time::sleep_until(t).await,
                _ => break,
            }
        }
        if self.is_dead() {
            return Self::gone().await;
        }
        let fault = (self.plan.lock().unwrap_or_else(|e| e.into_inner()))(call);
        let lost = || Err(StoreError::Unavailable("injected: the reply was lost".into()));
        match fault {
            None => op().await,
            Some(Fault::FailBefore) => Err(StoreError::Unavailable("injected: no connection".into())),
            Some(Fault::LoseReply) => {
                let _ = op().await;
                lost()
            }
            Some(Fault::DieBefore) => {
                self.kill();
                Self::gone().await
            }
            Some(Fault::DieAfter) => {
                let _ = op().await;
                self.kill();
                Self::gone().await
            }
            Some(Fault::Pause(d)) => {
                self.pause(d);
                tokio::time::sleep(d).await;
                if self.is_dead() { Self::gone().await } else { op().await }
            }
            Some(Fault::Delay(d)) => {
                let late = tokio::spawn(async move {
                    tokio::time::sleep(d).await;
                    op().await
                });
                late.await.unwrap_or_else(|e| Err(StoreError::Unavailable(e.to_string())))
            }
        }
    }
}

#[async_trait::async_trait]
impl Store for Faulty {
    fn prefix(&self) -> &str {
        self.inner.prefix()
    }

    fn connection(&self) -> Option<redis::aio::ConnectionManager> {
        None
    }

    async fn last_tick(&self, job: &str) -> StoreResult<Option<i64>> {
        let (inner, job) = (Arc::clone(&self.inner), job.to_string());
        self.call(Call::Read, move || async move { inner.last_tick(&job).await }).await
    }

    async fn claim(&self, req: &ClaimRequest) -> StoreResult<Claimed> {
        let (inner, req) = (Arc::clone(&self.inner), req.clone());
        self.call(Call::Claim, move || async move { inner.claim(&req).await }).await
    }

    async fn start_queued(&self, req: &QueueRequest) -> StoreResult<Queue> {
        let (inner, req) = (Arc::clone(&self.inner), req.clone());
        self.call(Call::StartQueued, move || async move { inner.start_queued(&req).await }).await
    }

    async fn leave_queue(&self, job: &str, owner: &str, tick: Tick) -> StoreResult<()> {
        let (inner, job, owner) = (Arc::clone(&self.inner), job.to_string(), owner.to_string());
        self.call(Call::LeaveQueue, move || async move { inner.leave_queue(&job, &owner, tick).await }).await
    }

    async fn renew(&self, lease: &RunLease, claim_ttl: Duration, lease_ttl: Duration) -> StoreResult<bool> {
        let (inner, lease) = (Arc::clone(&self.inner), lease.clone());
        self.call(Call::Renew, move || async move { inner.renew(&lease, claim_ttl, lease_ttl).await }).await
    }

    async fn apply(&self, lease: &RunLease, write: &Write) -> StoreResult<Applied> {
        let (inner, lease, write) = (Arc::clone(&self.inner), lease.clone(), write.clone());
        self.call(Call::Apply, move || async move { inner.apply(&lease, &write).await }).await
    }

    async fn finish(&self, end: &FinishRequest) -> StoreResult<Finished> {
        let (inner, end) = (Arc::clone(&self.inner), end.clone());
        self.call(Call::Finish, move || async move { inner.finish(&end).await }).await
    }

    async fn record(&self, run: &RunRecord) -> StoreResult<()> {
        let (inner, run) = (Arc::clone(&self.inner), run.clone());
        self.call(Call::Record, move || async move { inner.record(&run).await }).await
    }

    async fn runs(&self, job: &str, limit: usize) -> StoreResult<Vec<RunRecord>> {
        let (inner, job) = (Arc::clone(&self.inner), job.to_string());
        self.call(Call::Read, move || async move { inner.runs(&job, limit).await }).await
    }

    async fn job_state(&self, job: &str) -> StoreResult<JobState> {
        let (inner, job) = (Arc::clone(&self.inner), job.to_string());
        self.call(Call::Read, move || async move { inner.job_state(&job).await }).await
    }

    async fn set_paused(&self, job: &str, paused: bool, reason: &str) -> StoreResult<()> {
        let (inner, job, reason) = (Arc::clone(&self.inner), job.to_string(), reason.to_string());
        self.call(Call::Read, move || async move { inner.set_paused(&job, paused, &reason).await }).await
    }
}
