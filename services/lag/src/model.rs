//! What the poller's readings mean, as pure functions over plain data (no
//! IO, no clock), each with its tests.
//!
//! - [`lag`]: a partition's lag with explicit states, and its time lag.
//! - [`history`]: a partition's samples over time: rates, velocity, time to
//!   drain, standing still, going back, growing.
//! - [`status`]: the Burrow-style status per partition and group.
//! - [`cause`]: what more consumers can do about a group's lag, from those verdicts.
//! - [`group`]: rebalances and the consumption pause each caused.

pub mod cause;
pub mod group;
pub mod history;
pub mod lag;
pub mod status;

/// How long until the oldest unconsumed record (timestamp `oldest_ms`) is
/// due for deletion by time-based retention (`retention_ms`; `None`:
/// unlimited): the data-loss ETA, in ms. It is a lower bound: brokers delete
/// whole segments, so a record may outlive its due time a little.
pub fn retention_headroom_ms(oldest_ms: Option<i64>, retention_ms: Option<i64>, now_ms: i64) -> Option<i64> {
    Some((oldest_ms? + retention_ms.filter(|r| *r >= 0)? - now_ms).max(0))
}

#[cfg(test)]
mod tests {
    #[test]
    fn retention_headroom() {
        assert_eq!(super::retention_headroom_ms(Some(1_000), Some(10_000), 4_000), Some(7_000));
        assert_eq!(super::retention_headroom_ms(Some(1_000), Some(10_000), 20_000), Some(0), "due already");
        assert_eq!(super::retention_headroom_ms(Some(1_000), Some(-1), 4_000), None, "unlimited retention");
        assert_eq!(super::retention_headroom_ms(None, Some(10_000), 4_000), None, "nothing unconsumed");
    }
}
