//! Where the stream stands: what was sent, what Kafka acknowledged, and
//! from where to resume. Pure logic, no IO.
//!
//! Records are numbered in send order (the pipelined producer acknowledges
//! in that order). A slot is *complete* once its end marker arrived and every
//! record sent before the marker is acknowledged; the **cursor** is the
//! newest complete slot, and a restart resumes right after it with no gap.
//! After a dropped stream (same producer, nothing lost in flight) the
//! subscription resumes at the first slot not fully *sent*, skipping the
//! transactions of it already sent, so a reconnect produces no duplicate.

use std::collections::VecDeque;

/// The stream's position.
#[derive(Debug, Clone)]
pub struct SlotTracker {
    /// Records sent, and acknowledged (both counts; acks come in order).
    sent: u64,
    acked: u64,
    /// Slots whose end marker arrived, with the records sent by then.
    ends: VecDeque<(u64, u64)>,
    cursor: Option<u64>,
    /// The first slot whose end marker has not arrived, and how many of its
    /// transactions were sent (they arrive in index order).
    open_slot: u64,
    open_sent: u32,
}

impl SlotTracker {
    /// Starts at `first_slot` (the slot after the stored cursor).
    pub fn new(first_slot: u64) -> Self {
        Self {
            sent: 0,
            acked: 0,
            ends: VecDeque::new(),
            cursor: first_slot.checked_sub(1),
            open_slot: first_slot,
            open_sent: 0,
        }
    }

    /// Whether transaction `index` of `slot` still has to be sent (false
    /// for ones sent before a reconnect, and for slots already ended).
    pub fn wants(&self, slot: u64, index: u32) -> bool {
        slot > self.open_slot || (slot == self.open_slot && index >= self.open_sent)
    }

    /// Transaction `index` of `slot` was sent as `records` records; returns
    /// the sequence number of its last record.
    pub fn sent(&mut self, slot: u64, index: u32, records: u64) -> u64 {
        if slot != self.open_slot {
            // A slot without transactions before it ended unseen: cannot
            // happen on a well-formed stream (every slot has an end marker).
            self.open_slot = slot;
        }
        self.open_sent = index + 1;
        self.sent += records;
        self.sent
    }

    /// The sequence number the next record will get.
    pub fn next_seq(&self) -> u64 {
        self.sent + 1
    }

    /// The end marker of `slot` arrived.
    pub fn slot_end(&mut self, slot: u64) {
        if slot < self.open_slot {
            return; // replayed after a reconnect
        }
        self.ends.push_back((slot, self.sent));
        self.open_slot = slot + 1;
        self.open_sent = 0;
        self.advance();
    }

    /// Records up to sequence number `seq` are acknowledged.
    pub fn acked(&mut self, seq: u64) {
        self.acked = self.acked.max(seq);
        self.advance();
    }

    fn advance(&mut self) {
        while let Some(&(slot, needed)) = self.ends.front() {
            if needed > self.acked {
                break;
            }
            self.cursor = Some(slot);
            self.ends.pop_front();
        }
    }

    /// The newest slot whose records are all acknowledged.
    pub fn cursor(&self) -> Option<u64> {
        self.cursor
    }

    /// Where a new subscription starts after a dropped stream.
    pub fn resume_slot(&self) -> u64 {
        self.open_slot
    }

    /// Records sent and not yet acknowledged.
    pub fn in_flight(&self) -> u64 {
        self.sent - self.acked
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cursor_waits_for_the_end_marker_and_every_ack() {
        let mut t = SlotTracker::new(10);
        assert_eq!(t.cursor(), Some(9));
        let a = t.sent(10, 0, 2);
        let b = t.sent(10, 1, 1);
        assert_eq!((a, b), (2, 3));
        t.acked(3);
        assert_eq!(t.cursor(), Some(9), "no end marker yet");
        t.slot_end(10);
        assert_eq!(t.cursor(), Some(10));
        t.slot_end(11); // an empty slot
        assert_eq!(t.cursor(), Some(11));
        t.sent(12, 0, 4);
        t.slot_end(12);
        t.acked(5);
        assert_eq!(t.cursor(), Some(11), "one of slot 12's records is still in flight");
        t.acked(7);
        assert_eq!((t.cursor(), t.in_flight()), (Some(12), 0));
    }

    #[test]
    fn a_reconnect_resumes_inside_the_open_slot_without_resending() {
        let mut t = SlotTracker::new(0);
        t.sent(0, 0, 1);
        t.slot_end(0);
        t.sent(1, 0, 1);
        t.sent(1, 1, 1);
        assert_eq!(t.resume_slot(), 1);
        // The new stream replays slot 1 from its start.
        assert!(!t.wants(1, 0) && !t.wants(1, 1) && t.wants(1, 2) && t.wants(2, 0));
        assert!(!t.wants(0, 5), "ended slots are never sent again");
        t.slot_end(0); // a replayed end marker changes nothing
        assert_eq!(t.resume_slot(), 1);
    }

    proptest::proptest! {
        /// Whatever the order of acks, the cursor never passes a slot with a
        /// record unacknowledged, and reaches the last ended slot at the end.
        #[test]
        fn the_cursor_never_passes_an_unacked_record(sizes in proptest::collection::vec(proptest::collection::vec(1u64..4, 0..4), 1..20), acks in proptest::collection::vec(0u64..80, 0..30)) {
            let mut t = SlotTracker::new(0);
            let mut last_seq_of_slot = Vec::new();
            for (slot, txs) in sizes.iter().enumerate() {
                for (i, n) in txs.iter().enumerate() {
                    t.sent(slot as u64, i as u32, *n);
                }
                t.slot_end(slot as u64);
                last_seq_of_slot.push(t.next_seq() - 1);
            }
            let mut acked = 0;
            for a in acks {
                acked = acked.max(a.min(t.next_seq() - 1));
                t.acked(acked);
                if let Some(c) = t.cursor() {
                    proptest::prop_assert!(last_seq_of_slot[c as usize] <= acked);
                }
            }
            t.acked(t.next_seq() - 1);
            proptest::prop_assert_eq!(t.cursor(), Some(sizes.len() as u64 - 1));
        }
    }
}
