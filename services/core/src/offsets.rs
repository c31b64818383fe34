//! The contiguous-watermark offset tracker of one partition.
//!
//! Kafka keeps one committed offset per partition, so when records of a
//! partition complete out of order (different keys run concurrently), the
//! only safe commit is the lowest offset not yet complete. The tracker keeps
//! the received offsets in arrival order (Kafka hands them out increasing,
//! possibly with gaps from compaction or transaction markers) with a done
//! flag; completing is a binary search, and the watermark advances by
//! popping done offsets off the front, amortised O(1) per record.

use std::collections::VecDeque;

/// A misuse of the tracker; the runtime treats it as a bug and fails loudly.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum TrackError {
    #[error("offset {offset} received after {last}: offsets must increase")]
    NotIncreasing { offset: i64, last: i64 },
    #[error("offset {0} is not in flight (never received, or completed twice)")]
    NotInFlight(i64),
}

/// Offsets of one partition between "received" and "committed".
#[derive(Debug, Clone, Default)]
pub struct OffsetTracker {
    /// Received offsets from the lowest incomplete one on, with done flags.
    window: VecDeque<(i64, bool)>,
    /// Highest offset received.
    last_received: Option<i64>,
    /// Number of `false` flags in `window`.
    incomplete: usize,
    /// Position last handed out by [`OffsetTracker::take_commit`].
    last_taken: Option<i64>,
}

impl OffsetTracker {
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers a record handed to processing.
    pub fn received(&mut self, offset: i64) -> Result<(), TrackError> {
        if let Some(last) = self.last_received
            && offset <= last
        {
            return Err(TrackError::NotIncreasing { offset, last });
        }
        self.last_received = Some(offset);
        self.window.push_back((offset, false));
        self.incomplete += 1;
        Ok(())
    }

    /// Marks a record's processing (and every output it caused) complete.
    pub fn complete(&mut self, offset: i64) -> Result<(), TrackError> {
        let i = self.window.binary_search_by_key(&offset, |&(o, _)| o).map_err(|_| TrackError::NotInFlight(offset))?;
        let slot = &mut self.window[i].1;
        if *slot {
            return Err(TrackError::NotInFlight(offset));
        }
        *slot = true;
        self.incomplete -= 1;
        while self.window.front().is_some_and(|&(_, done)| done) {
            self.window.pop_front();
        }
        Ok(())
    }

    /// The offset to commit (Kafka semantics: the next offset to consume):
    /// the lowest incomplete offset, or one past the last received when all
    /// are complete. `None` before the first record.
    pub fn commit_position(&self) -> Option<i64> {
        match self.window.front() {
            Some(&(offset, _)) => Some(offset),
            None => self.last_received.map(|o| o + 1),
        }
    }

    /// The commit position if it moved since the last call.
    pub fn take_commit(&mut self) -> Option<i64> {
        let position = self.commit_position()?;
        if self.last_taken == Some(position) {
            return None;
        }
        self.last_taken = Some(position);
        Some(position)
    }

    /// Records received and not complete.
    pub fn incomplete(&self) -> usize {
        self.incomplete
    }

    /// Records held: incomplete ones and completed ones above the watermark.
    pub fn window_len(&self) -> usize {
        self.window.len()
    }

    /// Highest offset received.
    pub fn last_received(&self) -> Option<i64> {
        self.last_received
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use proptest::prelude::*;

    use super::*;

    #[test]
    fn commits_the_lowest_incomplete_offset() {
        let mut t = OffsetTracker::new();
        assert_eq!(t.commit_position(), None);
        for o in [10, 11, 13, 20] {
            t.received(o).expect("increasing");
        }
        assert_eq!(t.commit_position(), Some(10));
        t.complete(11).expect("in flight");
        t.complete(20).expect("in flight");
        assert_eq!(t.commit_position(), Some(10), "10 is still running");
        t.complete(10).expect("in flight");
        assert_eq!(t.commit_position(), Some(13), "gaps (12) count as nothing to wait for");
        assert_eq!(t.take_commit(), Some(13));
        assert_eq!(t.take_commit(), None, "unchanged");
        t.complete(13).expect("in flight");
        assert_eq!(t.commit_position(), Some(21));
        assert_eq!(t.incomplete(), 0);
        assert_eq!(t.window_len(), 0);
    }

    #[test]
    fn misuse_is_an_error() {
        let mut t = OffsetTracker::new();
        t.received(5).expect("first");
        assert_eq!(t.received(5), Err(TrackError::NotIncreasing { offset: 5, last: 5 }));
        assert_eq!(t.complete(6), Err(TrackError::NotInFlight(6)));
        t.received(6).expect("increasing");
        t.complete(6).expect("in flight");
        assert_eq!(t.complete(6), Err(TrackError::NotInFlight(6)), "completing twice");
    }

    proptest! {
        /// Against a model: records arrive with gaps, complete in any order;
        /// the commit position never passes an incomplete offset, never goes
        /// backwards, and reaches one past the last offset once all complete.
        #[test]
        fn never_passes_an_incomplete_offset(
            gaps in prop::collection::vec(1i64..4, 1..200),
            order in prop::collection::vec(any::<prop::sample::Index>(), 1..200),
        ) {
            let mut t = OffsetTracker::new();
            let mut offset = 100;
            let mut offsets = Vec::new();
            for g in &gaps {
                offset += g;
                offsets.push(offset);
                t.received(offset).expect("increasing");
            }
            let mut incomplete: BTreeSet<i64> = offsets.iter().copied().collect();
            let mut last_position = t.commit_position().expect("received some");
            for pick in &order {
                if incomplete.is_empty() { break; }
                let o = *incomplete.iter().nth(pick.index(incomplete.len())).expect("non-empty");
                t.complete(o).expect("in flight");
                incomplete.remove(&o);
                let position = t.commit_position().expect("received some");
                prop_assert!(position >= last_position, "went backwards");
                if let Some(&lowest) = incomplete.first() {
                    prop_assert!(position <= lowest, "passed incomplete {lowest}: {position}");
                    prop_assert_eq!(position, lowest, "should reach the lowest incomplete");
                }
                prop_assert_eq!(t.incomplete(), incomplete.len());
                last_position = position;
            }
            // Everything completes eventually.
            for o in incomplete.clone() {
                t.complete(o).expect("in flight");
            }
            prop_assert_eq!(t.commit_position(), Some(offset + 1));
            prop_assert_eq!(t.window_len(), 0);
        }
    }
}
