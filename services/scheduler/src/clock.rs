//! Wall-clock time, behind a trait: ticks are wall-clock instants, and the
//! engine's tests run it under tokio's paused time, where the wall clock must
//! advance exactly as tokio's timers do.

use std::fmt::Debug;

/// Unix milliseconds, now.
pub trait Clock: Send + Sync + Debug + 'static {
    fn now_ms(&self) -> i64;
}

/// The system's wall clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> i64 {
        sluice_core::clock::now_ms()
    }
}

/// A wall clock that follows tokio's clock from `start_ms`: under paused
/// time (tests), it moves only when tokio's time does.
#[derive(Debug, Clone, Copy)]
pub struct TokioClock {
    origin: tokio::time::Instant,
    start_ms: i64,
}

impl TokioClock {
    pub fn starting_at(start_ms: i64) -> Self {
        Self { origin: tokio::time::Instant::now(), start_ms }
    }
}

impl Clock for TokioClock {
    fn now_ms(&self) -> i64 {
        self.start_ms + self.origin.elapsed().as_millis() as i64
    }
}
