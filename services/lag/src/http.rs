//! The current picture as JSON beside `/metrics` (what a `kubectl
//! port-forward` user, the CLI and the demo read): `/groups` (every group,
//! without partitions) and `/groups/{group}` (one, whole); `/scaler/decisions`: the
//! scaler's recent decisions per ScaledObject, with their inputs and the rule that won.

use std::sync::Arc;

use axum::Router;
use axum::extract::{Path, State};
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use tokio::sync::watch;

use crate::picture::{GroupPicture, Picture};
use crate::scaler::Scalers;

pub fn routes(picture: watch::Receiver<Arc<Picture>>, scalers: Scalers) -> Router {
    let decisions = Router::new().route("/scaler/decisions", get(decisions)).with_state(scalers);
    Router::new()
        .route("/groups", get(groups))
        .route("/groups/{group}", get(group))
        .with_state(picture)
        .merge(decisions)
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
