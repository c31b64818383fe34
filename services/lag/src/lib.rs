//! sluice-lag: consumer-group lag read from Kafka itself, independent of the
//! consumers it watches, so it never goes silent when they stop.
//!
//! - [`wire`]: a small Kafka client of our own (batched offsets and groups).
//! - [`model`]: what the readings mean (lag states, time lag, rates, status,
//!   rebalances), pure and tested.
//! - [`poller`]: one poll of everything; [`picture`]: the readings and the
//!   state kept across polls assembled into the current picture.
//! - [`metrics`] (kafka_exporter's and Burrow's names, and `sluice_lag_…`), [`http`]
//!   (the picture as JSON, and Burrow's consumer status), [`burrow`] (Burrow's status
//!   codes and JSON shape), [`cli`] (`sluice-lag describe`), [`config`].
//! - [`scaler`]: KEDA's external scaler, served from the picture with
//!   `sluice-scaling`'s rules.
//! - [`simulate`]: `sluice-lag simulate`, the autoscaling engine on a trace.

#![forbid(unsafe_code)]

pub mod burrow;
pub mod cli;
pub mod config;
pub mod http;
pub mod metrics;
pub mod model;
pub mod picture;
pub mod poller;
pub mod scaler;
pub mod simulate;
pub mod wire;
