//! The wall clock in Unix milliseconds, one function for the crates around
//! the core.
//!
//! This is the crate's one exception to "no clock": everything else here
//! takes instants as arguments, so it stays deterministic and testable. The
//! reading lives here rather than in an IO crate because nearly every crate
//! (the scheduler, chainsim, the runtime, the tests) needs the same Unix
//! milliseconds, and this is the crate they all depend on.

/// Wall-clock now, Unix milliseconds (0 for a clock set before 1970).
pub fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}
