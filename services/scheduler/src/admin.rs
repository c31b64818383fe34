//! The admin gRPC API (`sluice.scheduler.v1.SchedulerAdmin`): list jobs,
//! run history, trigger now, pause and resume. With an admin token
//! configured, every call must carry `authorization: Bearer <token>`.

use std::net::SocketAddr;

use sluice_proto::scheduler::v1 as api;
use sluice_proto::scheduler::v1::scheduler_admin_server::{SchedulerAdmin, SchedulerAdminServer};
use tokio::net::TcpListener;
use tokio_stream::wrappers::TcpListenerStream;
use tonic::service::interceptor::InterceptedService;
use tonic::{Request, Response, Status};

use crate::engine::{Engine, JobEntry, TriggerError};
use crate::store::{RunRecord, StoreError};

/// Next ticks listed per job.
const NEXT_TICKS: usize = 5;

/// The service over one replica's engine (state is shared through Redis,
/// so any replica answers for all).
#[derive(Debug, Clone)]
pub struct Admin {
    engine: Engine,
}

fn to_proto(run: RunRecord) -> api::Run {
    api::Run {
        job: run.job,
        tick_ms: run.tick_ms,
        owner: run.owner,
        token: run.token,
        started_ms: run.started_ms,
        ended_ms: run.ended_ms,
        outcome: run.outcome.as_str().into(),
        reason: run.reason,
        items: run.items,
        drift_found: run.drift_found,
        drift_repaired: run.drift_repaired,
        stale_writes: run.stale_writes,
        ticks: run.ticks,
        last_tick_ms: run.last_tick_ms,
        manual: run.manual,
        item_done_p50_ms: run.item_done_p50_ms,
        item_done_p95_ms: run.item_done_p95_ms,
        item_done_max_ms: run.item_done_max_ms,
        applied: run.applied,
    }
}

fn unavailable(e: StoreError) -> Status {
    Status::unavailable(e.to_string())
}

impl Admin {
    pub fn new(engine: Engine) -> Self {
        Self { engine }
    }

    fn entry(&self, job: &str) -> Result<&JobEntry, Status> {
        self.engine.job(job).map(AsRef::as_ref).ok_or_else(|| Status::not_found(format!("no job {job:?}")))
    }

    async fn describe(&self, entry: &JobEntry) -> Result<api::Job, Status> {
        let store = self.engine.store();
        let name = entry.job.name();
        let state = store.job_state(name).await.map_err(unavailable)?;
        let last = store.runs(name, 1).await.map_err(unavailable)?.into_iter().next();
        let s = &entry.settings;
        Ok(api::Job {
            name: name.into(),
            description: entry.job.description().into(),
            schedule: s.schedule.expression().into(),
            overlap: s.overlap.to_proto().into(),
            misfire: s.misfire.to_proto().into(),
            catch_up_window_ms: s.catch_up_window.as_millis() as u64,
            timeout_ms: s.timeout.as_millis() as u64,
            jitter_ms: s.jitter.as_millis() as u64,
            paused: s.paused || state.paused,
            paused_reason: if s.paused { "paused by configuration".into() } else { state.paused_reason },
            next_ticks_ms: if s.enabled { s.schedule.upcoming(self.engine.now_ms(), NEXT_TICKS) } else { Vec::new() },
            last_run: last.map(to_proto),
            last_success_ms: state.last_success_ms.unwrap_or(0),
            effects: entry.job.effects().describe(),
        })
    }
}

#[tonic::async_trait]
impl SchedulerAdmin for Admin {
    async fn list_jobs(&self, _: Request<api::ListJobsRequest>) -> Result<Response<api::ListJobsResponse>, Status> {
        let mut jobs = Vec::new();
        for entry in self.engine.jobs() {
            jobs.push(self.describe(entry).await?);
        }
        Ok(Response::new(api::ListJobsResponse { jobs }))
    }

    async fn get_runs(&self, request: Request<api::GetRunsRequest>) -> Result<Response<api::GetRunsResponse>, Status> {
        let request = request.into_inner();
        self.entry(&request.job)?;
        let limit = match request.limit {
            0 => 50,
            n => n.min(1000) as usize,
        };
        let runs = self.engine.store().runs(&request.job, limit).await.map_err(unavailable)?;
        Ok(Response::new(api::GetRunsResponse { runs: runs.into_iter().map(to_proto).collect() }))
    }

    async fn trigger_now(
        &self,
        request: Request<api::TriggerNowRequest>,
    ) -> Result<Response<api::TriggerNowResponse>, Status> {
        let job = request.into_inner().job;
        self.entry(&job)?;
        let triggered = self.engine.trigger_now(&job).await.map_err(|e| match e {
            TriggerError::NoJob(_) => Status::not_found(e.to_string()),
            TriggerError::ShuttingDown | TriggerError::Store(_) => Status::unavailable(e.to_string()),
        })?;
        tracing::info!(job, tick_ms = triggered.tick_ms, started = triggered.started, "Triggered by the admin API");
        Ok(Response::new(api::TriggerNowResponse {
            tick_ms: triggered.tick_ms,
            started: triggered.started,
            reason: triggered.reason,
        }))
    }

    async fn pause(&self, request: Request<api::PauseRequest>) -> Result<Response<api::PauseResponse>, Status> {
        let request = request.into_inner();
        self.entry(&request.job)?;
        let reason = if request.reason.is_empty() { "paused through the admin API".into() } else { request.reason };
        self.engine.store().set_paused(&request.job, true, &reason).await.map_err(unavailable)?;
        tracing::info!(job = request.job, reason, "Job paused");
        Ok(Response::new(api::PauseResponse {}))
    }

    async fn resume(&self, request: Request<api::ResumeRequest>) -> Result<Response<api::ResumeResponse>, Status> {
        let job = request.into_inner().job;
        self.entry(&job)?;
        self.engine.store().set_paused(&job, false, "").await.map_err(unavailable)?;
        tracing::info!(job, "Job resumed");
        Ok(Response::new(api::ResumeResponse {}))
    }
}

/// Checks the bearer token, if one is configured.
#[derive(Clone)]
pub struct BearerAuth {
    expected: Option<String>,
}

impl std::fmt::Debug for BearerAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BearerAuth").field("required", &self.expected.is_some()).finish()
    }
}

/// Compares without stopping at the first difference.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

impl tonic::service::Interceptor for BearerAuth {
    fn call(&mut self, request: Request<()>) -> Result<Request<()>, Status> {
        let Some(expected) = &self.expected else { return Ok(request) };
        let given = request
            .metadata()
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .unwrap_or("");
        if same(given.as_bytes(), expected.as_bytes()) {
            Ok(request)
        } else {
            Err(Status::unauthenticated("a valid bearer token is required"))
        }
    }
}

/// The service with its authentication.
pub fn service(engine: Engine, token: Option<String>) -> InterceptedService<SchedulerAdminServer<Admin>, BearerAuth> {
    SchedulerAdminServer::with_interceptor(Admin::new(engine), BearerAuth { expected: token })
}

/// Serves the API on `addr` until `shutdown` resolves; returns the address bound.
pub async fn serve(
    addr: SocketAddr,
    engine: Engine,
    token: Option<String>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<(SocketAddr, tokio::task::JoinHandle<Result<(), tonic::transport::Error>>)> {
    let listener = TcpListener::bind(addr).await?;
    let local = listener.local_addr()?;
    let task = tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(service(engine, token))
            .serve_with_incoming_shutdown(TcpListenerStream::new(listener), shutdown),
    );
    Ok((local, task))
}

#[cfg(test)]
mod tests {
    use tonic::service::Interceptor;

    use super::*;

    fn call(auth: &mut BearerAuth, header: Option<&str>) -> Result<(), tonic::Code> {
        let mut request = Request::new(());
        if let Some(h) = header {
            request.metadata_mut().insert("authorization", h.parse().expect("ascii"));
        }
        auth.call(request).map(|_| ()).map_err(|s| s.code())
    }

    #[test]
    fn bearer_token_is_required_only_when_configured() {
        let mut open = BearerAuth { expected: None };
        assert_eq!(call(&mut open, None), Ok(()));
        let mut closed = BearerAuth { expected: Some("s3cret".into()) };
        assert_eq!(call(&mut closed, Some("Bearer s3cret")), Ok(()));
        for bad in [None, Some("Bearer s3cre"), Some("s3cret"), Some("Bearer s3cret2"), Some("Basic s3cret")] {
            assert_eq!(call(&mut closed, bad), Err(tonic::Code::Unauthenticated), "{bad:?}");
        }
        assert!(!format!("{closed:?}").contains("s3cret"), "the token is never printed");
    }
}
