//! Process-wide health the readiness check reads.

use std::sync::atomic::{AtomicBool, AtomicUsize};

#[derive(Debug, Default)]
pub struct Health {
    pub assigned: AtomicUsize,
    /// Records past the retry cap (they keep retrying).
    pub stalled: AtomicUsize,
    pub shutting_down: AtomicBool,
}
