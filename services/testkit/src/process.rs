//! Services under test as processes: [`Spawned`] owns one (log, signals,
//! SIGTERM-then-wait, killed when dropped), and the free functions read its
//! admin port (`/ready`, `/metrics`).
//!
//! The helpers live in [`sluice_service::process`] because the demo, a
//! binary, runs the deployables the same way (the module says why it is not
//! here); this re-exports them, plus a free port that fails the test instead
//! of returning an error.

pub use sluice_service::process::{Spawned, http_get, log_tail, metric, wait_ready};

/// A free loopback port (bound, then released for a child to take).
pub fn free_port() -> u16 {
    sluice_service::process::free_port().expect("a free loopback port")
}
