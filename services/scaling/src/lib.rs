//! The autoscaling engine, with no IO: what Kubernetes' HPA controller and KEDA decide
//! for a consumer group, and the rules Sluice's own scaler adds.
//!
//! - [`behavior`]: `spec.behavior` as the API server defaults it, and its policies.
//! - [`hpa`]: the HPA controller's sync, step by step (checked against the controller itself
//!   by `services/scaling/conformance/hpa`).
//! - [`keda`]: KEDA's `kafka` trigger arithmetic and its operator's activation and fallback.
//! - [`partitions`]: the replica counts that relieve a pod; [`landing`]: where the HPA's rate
//!   limits can land, and the policies the chart derives so they land only on those.
//! - [`rules`]: Sluice's scaler (offsetLag, timeLag, drainTime and the rules every trigger
//!   shares), served to KEDA by sluice-lag.
//! - [`values`] (a policy from the chart's values), [`trace`] (what is replayed), [`sim`] (the
//!   consumer model with KEDA and the HPA deciding on it): `sluice-lag simulate`.
//! - [`engine`]: a policy's metric and HPA together (the simulator and the demo drive it).
//! - [`case`]: the committed conformance cases and their replay.

#![forbid(unsafe_code)]

pub mod behavior;
pub mod case;
pub mod engine;
pub mod hpa;
pub mod keda;
pub mod landing;
pub mod partitions;
pub mod rules;
pub mod sim;
pub mod trace;
pub mod values;
