//! The admin HTTP server: `/live`, `/ready`, `/metrics`.
//!
//! `/live` answers 200 while the process serves HTTP at all. `/ready`
//! answers 200 only while every readiness check passes, 503 with the failing
//! checks' reasons otherwise. `/metrics` is the Prometheus text format of
//! the service's registry, plus `sluice_<service>_ready`: 1 while `/ready`
//! would answer 200, evaluated at each scrape (so an alert sees a pod that is
//! up but not ready, which the kubelet only acts on), plus any text the service
//! keeps ready-made ([`Appended`]). The text is written off the async workers.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use prometheus::{Encoder, IntGauge, Registry, TextEncoder};
use tokio::net::TcpListener;

/// Why a service is not ready: what `/ready` answers with its 503.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct NotReady(pub String);

impl NotReady {
    pub fn new(reason: impl Into<String>) -> Self {
        Self(reason.into())
    }
}

/// A readiness check: `Ok` when ready, `Err(why not)` otherwise.
pub type ReadyCheck = Arc<dyn Fn() -> Result<(), NotReady> + Send + Sync>;

/// A readiness check that is a switch: ready while it is on, not ready
/// with `reason` while off (a service that is ready once connected).
pub fn switch(reason: &'static str) -> (Arc<std::sync::atomic::AtomicBool>, ReadyCheck) {
    use std::sync::atomic::{AtomicBool, Ordering};
    let on = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&on);
    let check: ReadyCheck =
        Arc::new(move || if flag.load(Ordering::SeqCst) { Ok(()) } else { Err(NotReady::new(reason)) });
    (on, check)
}

/// Exposition text a service keeps ready-made (families of its own, none of them in its
/// registry), appended to `/metrics` after the registry's.
pub type Appended = Arc<dyn Fn(&mut Vec<u8>) + Send + Sync>;

#[derive(Clone)]
struct AdminState {
    registry: Registry,
    appended: Option<Appended>,
    ready: ReadyCheck,
    ready_gauge: IntGauge,
}

/// Binds `addr` (port 0 picks one) and serves until `shutdown` resolves.
/// `service` names the readiness gauge (`sluice_<service>_ready`), which is
/// registered in `registry`. Returns the bound address and the server task.
pub async fn serve(
    addr: SocketAddr,
    service: &str,
    registry: Registry,
    ready: ReadyCheck,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<(SocketAddr, tokio::task::JoinHandle<std::io::Result<()>>)> {
    serve_with(addr, service, (registry, None), ready, Router::new(), shutdown).await
}

/// [`serve`], with text appended to `/metrics` and the service's own `routes` beside the
/// standard three (a service's JSON endpoints).
pub async fn serve_with(
    addr: SocketAddr,
    service: &str,
    (registry, appended): (Registry, Option<Appended>),
    ready: ReadyCheck,
    routes: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<(SocketAddr, tokio::task::JoinHandle<std::io::Result<()>>)> {
    let ready_gauge =
        IntGauge::new(format!("sluice_{service}_ready"), "1 while /ready answers 200 (checked at each scrape)")
            .and_then(|g| registry.register(Box::new(g.clone())).map(|()| g))
            .map_err(std::io::Error::other)?;
    register_process(&registry)?;
    let connections =
        crate::connections::Connections::new(&format!("sluice_{service}")).map_err(std::io::Error::other)?;
    match registry.register(Box::new(connections)) {
        Ok(()) | Err(prometheus::Error::AlreadyReg) => {}
        Err(e) => return Err(std::io::Error::other(e)),
    }
    let listener = TcpListener::bind(addr).await?;
    let local = listener.local_addr()?;
    let app = Router::new()
        .route("/live", get(|| async { "live\n" }))
        .route("/ready", get(ready_handler))
        .route("/metrics", get(metrics_handler))
        .with_state(AdminState { registry, appended, ready, ready_gauge })
        .merge(routes);
    let task = tokio::spawn(async move { axum::serve(listener, app).with_graceful_shutdown(shutdown).await });
    Ok((local, task))
}

/// The process's own CPU, memory, threads and open files, by the names Prometheus's clients
/// give them (`process_cpu_seconds_total`, `process_resident_memory_bytes`, …): what the
/// cost-per-record rule divides by the records each workload handled. A registry served twice
/// keeps the one it has.
fn register_process(registry: &Registry) -> std::io::Result<()> {
    #[cfg(target_os = "linux")]
    match registry.register(Box::new(prometheus::process_collector::ProcessCollector::for_self())) {
        Ok(()) | Err(prometheus::Error::AlreadyReg) => {}
        Err(e) => return Err(std::io::Error::other(e)),
    }
    #[cfg(not(target_os = "linux"))]
    let _ = registry;
    Ok(())
}

async fn ready_handler(State(state): State<AdminState>) -> impl IntoResponse {
    match (state.ready)() {
        Ok(()) => (StatusCode::OK, "ready\n".to_string()),
        Err(reason) => (StatusCode::SERVICE_UNAVAILABLE, format!("not ready: {reason}\n")),
    }
}

async fn metrics_handler(State(state): State<AdminState>) -> impl IntoResponse {
    state.ready_gauge.set(i64::from((state.ready)().is_ok()));
    let written = tokio::task::spawn_blocking(move || {
        let mut body = Vec::new();
        TextEncoder::new().encode(&state.registry.gather(), &mut body).map_err(|e| e.to_string())?;
        if let Some(append) = &state.appended {
            append(&mut body);
        }
        Ok::<_, String>(body)
    })
    .await
    .map_err(|e| e.to_string())
    .and_then(|written| written);
    match written {
        Ok(body) => (StatusCode::OK, [(header::CONTENT_TYPE, TextEncoder::new().format_type().to_string())], body),
        Err(e) => {
            (StatusCode::INTERNAL_SERVER_ERROR, [(header::CONTENT_TYPE, "text/plain".to_string())], e.into_bytes())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn metrics_carry_the_process_s_cpu_and_memory_whatever_the_service_registers() {
        let registry = Registry::new();
        let ready: ReadyCheck = Arc::new(|| Ok(()));
        let (addr, task) = serve(([127, 0, 0, 1], 0).into(), "thing", registry.clone(), ready, std::future::pending())
            .await
            .expect("serve");
        let body = tokio::task::spawn_blocking(move || crate::process::http_get(addr.port(), "/metrics"))
            .await
            .expect("the request's thread")
            .map(|(_, body)| body)
            .unwrap_or_default();
        task.abort();
        let own = "sluice_thing_tcp_connections{peer=\"inbound\"}";
        for series in ["sluice_thing_ready 1", "process_cpu_seconds_total ", "process_resident_memory_bytes ", own] {
            assert!(body.contains(series), "{series} missing from:\n{body}");
        }
    }
}
