//! Retry delays: exponential with full jitter, capped.

use std::time::Duration;

/// What happens when a record's retries reach the cap: the workload's
/// choice ([`crate::Handler::retry_exhausted`]), not a deployment setting,
/// because only the workload knows whether its keys may skip a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Exhausted {
    /// The record's partition pauses and the service reports not-ready;
    /// retries go on at the cap until the record gets through. For state
    /// that must not skip a record (the DEX workload: a pool's swaps).
    #[default]
    PausePartition,
    /// The record goes to the dead-letter topic with the reason, and so do
    /// its key's later records of the partition, in offset order, unhandled,
    /// until a record of the key redriven from the dead-letter topic arrives;
    /// the partition's other keys and its committed offset move on. For
    /// workloads whose keys are independent of each other.
    DeadLetterKey,
}

impl Exhausted {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::PausePartition => "pause-partition",
            Self::DeadLetterKey => "dead-letter-key",
        }
    }
}

/// How a transient failure is retried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Delay before the first retry.
    pub initial: Duration,
    /// Cap on any single delay.
    pub max: Duration,
    /// After this many attempts the record's retries are exhausted: what
    /// follows is the workload's [`Exhausted`] policy (by default its
    /// partition pauses and the service reports not-ready while retries go
    /// on at the cap; nothing is dropped).
    pub attempts_before_stall: u32,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self { initial: Duration::from_millis(50), max: Duration::from_secs(5), attempts_before_stall: 10 }
    }
}

impl RetryPolicy {
    /// The delay before retry number `attempt` (1-based), with full jitter:
    /// uniform in [delay/2, delay] so retries of many keys spread out.
    pub fn delay(&self, attempt: u32, jitter_unit: f64) -> Duration {
        let exp = self.initial.saturating_mul(1u32 << attempt.saturating_sub(1).min(20));
        let capped = exp.min(self.max);
        capped.mul_f64(0.5 + 0.5 * jitter_unit.clamp(0.0, 1.0))
    }
}

/// A cheap per-thread jitter source in [0, 1).
pub fn jitter() -> f64 {
    use std::cell::Cell;
    thread_local! {
        static STATE: Cell<u64> = Cell::new(
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(1, |d| d.as_nanos() as u64) | 1,
        );
    }
    STATE.with(|s| {
        // xorshift64*
        let mut x = s.get();
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        s.set(x);
        (x.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11) as f64 / (1u64 << 53) as f64
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grows_exponentially_to_the_cap_with_bounded_jitter() {
        let p =
            RetryPolicy { initial: Duration::from_millis(100), max: Duration::from_secs(2), attempts_before_stall: 5 };
        assert_eq!(p.delay(1, 1.0), Duration::from_millis(100));
        assert_eq!(p.delay(2, 1.0), Duration::from_millis(200));
        assert_eq!(p.delay(4, 1.0), Duration::from_millis(800));
        assert_eq!(p.delay(10, 1.0), Duration::from_secs(2));
        assert_eq!(p.delay(60, 1.0), Duration::from_secs(2), "no overflow");
        assert_eq!(p.delay(2, 0.0), Duration::from_millis(100), "half at zero jitter");
        for _ in 0..1000 {
            let j = jitter();
            assert!((0.0..1.0).contains(&j));
        }
    }
}
