//! The current picture as JSON beside `/metrics` (what a `kubectl
//! port-forward` user, the CLI and the demo read): `/groups` (every group,
//! without partitions) and `/groups/{group}` (one, whole); `/scaler/decisions`: the
//! scaler's recent decisions per ScaledObject, with their inputs and the rule that won;
//! with `BURROW_CLUSTER`, Burrow's consumer status API (`/v3/kafka/{cluster}/consumer/{group}/lag`
//! with every partition, `/status` with those not OK; [`crate::burrow`]).

use std::sync::Arc;

use axum::Router;
use axum::extract::{Path, State};
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use tokio::sync::watch;

use crate::burrow;
use crate::picture::{GroupPicture, Picture};
use crate::scaler::Scalers;

pub fn routes(picture: watch::Receiver<Arc<Picture>>, scalers: Scalers, burrow_cluster: Option<String>) -> Router {
    let decisions = Router::new().route("/scaler/decisions", get(decisions)).with_state(scalers);
    let mut router = Router::new()
        .route("/groups", get(groups))
        .route("/groups/{group}", get(group))
        .with_state(picture.clone())
        .merge(decisions);
    if let Some(cluster) = burrow_cluster {
        let state = BurrowState { picture, cluster: Arc::from(cluster), host: Arc::from(hostname()) };
        let api = Router::new()
            .route("/v3/kafka/{cluster}/consumer/{group}/lag", get(burrow_lag))
            .route("/v3/kafka/{cluster}/consumer/{group}/status", get(burrow_status))
            .with_state(state);
        router = router.merge(api);
    }
    router
}

#[derive(Clone)]
struct BurrowState {
    picture: watch::Receiver<Arc<Picture>>,
    cluster: Arc<str>,
    host: Arc<str>,
}

/// The machine's name, as Burrow reports its own in `request.host`.
fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname").map(|h| h.trim().to_string()).unwrap_or_default()
}

async fn burrow_lag(State(s): State<BurrowState>, Path((cluster, group)): Path<(String, String)>) -> impl IntoResponse {
    burrow_reply(&s, &cluster, &group, true)
}

async fn burrow_status(
    State(s): State<BurrowState>,
    Path((cluster, group)): Path<(String, String)>,
) -> impl IntoResponse {
    burrow_reply(&s, &cluster, &group, false)
}

fn burrow_reply(s: &BurrowState, cluster: &str, group: &str, all: bool) -> impl IntoResponse + use<> {
    let url = format!("/v3/kafka/{cluster}/consumer/{group}/{}", if all { "lag" } else { "status" });
    let picture = s.picture.borrow().clone();
    match picture.group(group).filter(|_| cluster == &*s.cluster) {
        Some(g) => json(StatusCode::OK, &burrow::reply(burrow::consumer_status(cluster, g, all), &url, &s.host)),
        None => json(StatusCode::NOT_FOUND, &burrow::not_found(&url, &s.host)),
    }
}

async fn decisions(State(scalers): State<Scalers>) -> impl IntoResponse {
    json(StatusCode::OK, &serde_json::json!({ "scaled_objects": scalers.snapshot() }))
}

async fn groups(State(picture): State<watch::Receiver<Arc<Picture>>>) -> impl IntoResponse {
    let picture = picture.borrow().clone();
    let trimmed: Vec<GroupPicture> =
        picture.groups.iter().map(|g| GroupPicture { partitions: Vec::new(), ..g.clone() }).collect();
    json(StatusCode::OK, &serde_json::json!({ "at_ms": picture.at_ms, "groups": trimmed }))
}

fn json(code: StatusCode, value: &serde_json::Value) -> impl IntoResponse + use<> {
    (code, [(header::CONTENT_TYPE, "application/json")], value.to_string())
}

async fn group(State(picture): State<watch::Receiver<Arc<Picture>>>, Path(name): Path<String>) -> impl IntoResponse {
    let picture = picture.borrow().clone();
    match picture.group(&name) {
        Some(g) => json(StatusCode::OK, &serde_json::to_value(g).unwrap_or_default()),
        None => json(StatusCode::NOT_FOUND, &serde_json::json!({ "error": format!("group {name:?} is not watched") })),
    }
}
