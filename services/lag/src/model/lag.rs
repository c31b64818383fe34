//! One partition's lag, with explicit states instead of fake numbers: a
//! group that never committed there is `Uncommitted` (not "lag = the log
//! end"); lag is counted from the log start, so records retention deleted
//! before anyone read them are reported as lost, not as lag; a
//! `read_committed` group is measured against the last stable offset (so
//! transaction markers are no permanent lag of 1).

use serde::{Deserialize, Serialize};

/// What the broker says of a partition's log.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Log {
    pub start: i64,
    pub end: i64,
    /// The last stable offset (the end a `read_committed` reader sees).
    pub stable: i64,
}

/// A partition's lag for one group.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum Lag {
    /// The group has no committed offset here.
    Uncommitted,
    /// `records` unconsumed; `lost` records retention deleted before the
    /// group read them (its committed offset is below the log start).
    Behind { records: i64, lost: i64, committed: i64 },
}

impl Lag {
    pub fn of(log: Log, committed: Option<i64>, read_committed: bool) -> Self {
        let Some(committed) = committed else { return Self::Uncommitted };
        let end = if read_committed { log.stable.min(log.end) } else { log.end };
        let from = committed.max(log.start);
        Self::Behind { records: (end - from).max(0), lost: (log.start - committed).max(0), committed }
    }

    pub fn records(&self) -> Option<i64> {
        match self {
            Self::Uncommitted => None,
            Self::Behind { records, .. } => Some(*records),
        }
    }

    /// The offset of the oldest unconsumed record, if there is one.
    pub fn oldest_unconsumed(&self, log: Log) -> Option<i64> {
        match self {
            Self::Behind { records, committed, .. } if *records > 0 => Some((*committed).max(log.start)),
            _ => None,
        }
    }
}

/// The age of the oldest unconsumed record, in ms: `now` minus its
/// timestamp; 0 when nothing is unconsumed; never negative (a producer
/// clock ahead of ours reads as 0, not as a negative lag).
pub fn time_lag_ms(lag: &Lag, oldest_timestamp_ms: Option<i64>, now_ms: i64) -> Option<i64> {
    match lag {
        Lag::Uncommitted => None,
        Lag::Behind { records: 0, .. } => Some(0),
        Lag::Behind { .. } => oldest_timestamp_ms.map(|t| (now_ms - t).max(0)),
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    const LOG: Log = Log { start: 100, end: 200, stable: 190 };

    #[test]
    fn the_explicit_states() {
        assert_eq!(Lag::of(LOG, None, false), Lag::Uncommitted);
        assert_eq!(Lag::of(LOG, Some(150), false).records(), Some(50));
        assert_eq!(Lag::of(LOG, Some(150), true).records(), Some(40), "against the stable offset");
        assert_eq!(Lag::of(LOG, Some(40), false), Lag::Behind { records: 100, lost: 60, committed: 40 });
        assert_eq!(Lag::of(LOG, Some(250), false).records(), Some(0), "never negative");
        assert_eq!(Lag::of(LOG, Some(40), false).oldest_unconsumed(LOG), Some(100), "the oldest that still exists");
        assert_eq!(Lag::of(LOG, Some(200), false).oldest_unconsumed(LOG), None);
    }

    #[test]
    fn time_lag_is_the_oldest_unconsumed_record_s_age() {
        let behind = Lag::of(LOG, Some(150), false);
        assert_eq!(time_lag_ms(&behind, Some(9_000), 10_000), Some(1_000));
        assert_eq!(time_lag_ms(&behind, Some(11_000), 10_000), Some(0), "a clock ahead is not negative lag");
        assert_eq!(time_lag_ms(&behind, None, 10_000), None, "unknown, not 0");
        assert_eq!(time_lag_ms(&Lag::of(LOG, Some(200), false), None, 10_000), Some(0), "caught up");
        assert_eq!(time_lag_ms(&Lag::Uncommitted, Some(1), 10_000), None);
    }

    proptest! {
        #[test]
        fn lag_plus_consumed_is_the_log(start in 0i64..1000, len in 0i64..1000, committed in 0i64..3000) {
            let log = Log { start, end: start + len, stable: start + len };
            let Lag::Behind { records, lost, .. } = Lag::of(log, Some(committed), false) else { unreachable!() };
            prop_assert!(records >= 0 && lost >= 0 && records <= len);
            if committed >= start && committed <= start + len {
                prop_assert_eq!(records + (committed - start), len);
            }
        }
    }
}
