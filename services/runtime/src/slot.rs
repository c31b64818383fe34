//! What a partition worker tells the consumer thread, through shared
//! atomics instead of messages: the position it may commit (the next
//! offset to consume, below which every record is done and acknowledged),
//! how many records it is through with, and whether it wants its partition
//! paused. The consumer thread owns the
//! slot of each current assignment and drops it on revoke or loss, so a
//! worker of an ended epoch writes into a slot nobody reads: its position
//! is never committed.

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};

#[derive(Debug)]
pub(crate) struct Slot {
    /// -1 until the worker has a position.
    position: AtomicI64,
    pause: AtomicBool,
    /// Records of this epoch the worker is through with (completed, or
    /// refused as out of order): the consumer thread, which counts what it
    /// handed out, knows from it how many are in flight.
    finished: AtomicU64,
}

impl Slot {
    pub(crate) fn new() -> Self {
        Self { position: AtomicI64::new(-1), pause: AtomicBool::new(false), finished: AtomicU64::new(0) }
    }

    pub(crate) fn add_finished(&self, n: u64) {
        self.finished.fetch_add(n, Ordering::Release);
    }

    pub(crate) fn finished(&self) -> u64 {
        self.finished.load(Ordering::Acquire)
    }

    pub(crate) fn set_position(&self, offset: i64) {
        self.position.store(offset, Ordering::Release);
    }

    pub(crate) fn position(&self) -> Option<i64> {
        Some(self.position.load(Ordering::Acquire)).filter(|p| *p >= 0)
    }

    pub(crate) fn set_pause(&self, pause: bool) {
        self.pause.store(pause, Ordering::Release);
    }

    pub(crate) fn wants_pause(&self) -> bool {
        self.pause.load(Ordering::Acquire)
    }
}
