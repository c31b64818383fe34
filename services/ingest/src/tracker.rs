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

    /// What to do with transaction `index` of `slot`: send it (the next one
    /// expected), skip it (sent before a reconnect, or of an ended slot), or
    /// stop: the stream skipped something, and sending on would leave a gap
    /// below a future cursor.
    pub fn check(&self, slot: u64, index: u32) -> Next {
        match (slot.cmp(&self.open_slot), index.cmp(&self.open_sent)) {
            (std::cmp::Ordering::Less, _) | (std::cmp::Ordering::Equal, std::cmp::Ordering::Less) => Next::Skip,
            (std::cmp::Ordering::Equal, std::cmp::Ordering::Equal) => Next::Send,
            _ => Next::Gap,
        }
    }

    /// Transaction `index` of the open slot was sent as `records` records
    /// (after [`Self::check`] said [`Next::Send`]); returns the sequence
    /// number of its last record.
    pub fn sent(&mut self, index: u32, records: u64) -> u64 {
        self.open_sent = index + 1;
        self.sent += records;
        self.sent
    }

    /// The sequence number the next record will get.
    pub fn next_seq(&self) -> u64 {
        self.sent + 1
    }

    /// The end marker of `slot`, which held `transactions`, arrived. A
    /// replayed marker of an ended slot is ignored; a marker of another slot,
    /// or one that arrives before every transaction of its slot was sent, is
    /// a [`Next::Gap`].
    pub fn slot_end(&mut self, slot: u64, transactions: u32) -> Next {
        if slot < self.open_slot {
            return Next::Skip; // replayed after a reconnect
        }
        if slot > self.open_slot || transactions != self.open_sent {
            return Next::Gap;
        }
        self.ends.push_back((slot, self.sent));
        self.open_slot = slot + 1;
        self.open_sent = 0;
        self.advance();
        Next::Send
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
        self.sent.saturating_sub(self.acked)
    }
}

/// What the tracker says of a stream update.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// The expected update: send it (or, for an end marker, it was taken).
    Send,
    /// Already handled before a reconnect.
    Skip,
    /// The stream skipped something: reconnect at [`SlotTracker::resume_slot`].
    Gap,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cursor_waits_for_the_end_marker_and_every_ack() {
        let mut t = SlotTracker::new(10);
        assert_eq!(t.cursor(), Some(9));
        let a = t.sent(0, 2);
        let b = t.sent(1, 1);
        assert_eq!((a, b), (2, 3));
        t.acked(3);
        assert_eq!(t.cursor(), Some(9), "no end marker yet");
        assert_eq!(t.slot_end(10, 2), Next::Send);
        assert_eq!(t.cursor(), Some(10));
        t.slot_end(11, 0); // an empty slot
        assert_eq!(t.cursor(), Some(11));
        t.sent(0, 4);
        t.slot_end(12, 1);
        t.acked(5);
        assert_eq!(t.cursor(), Some(11), "one of slot 12's records is still in flight");
        t.acked(7);
        assert_eq!((t.cursor(), t.in_flight()), (Some(12), 0));
    }

    #[test]
    fn a_reconnect_resumes_inside_the_open_slot_without_resending() {
        let mut t = SlotTracker::new(0);
        t.sent(0, 1);
        t.slot_end(0, 1);
        t.sent(0, 1);
        t.sent(1, 1);
        assert_eq!(t.resume_slot(), 1);
        // The new stream replays slot 1 from its start.
        assert_eq!([t.check(1, 0), t.check(1, 1), t.check(1, 2)], [Next::Skip, Next::Skip, Next::Send]);
        assert_eq!(t.check(0, 5), Next::Skip, "ended slots are never sent again");
        assert_eq!(t.slot_end(0, 1), Next::Skip, "a replayed end marker changes nothing");
        assert_eq!(t.resume_slot(), 1);
    }

    #[test]
    fn a_skipped_transaction_or_slot_is_a_gap_not_progress() {
        let mut t = SlotTracker::new(5);
        assert_eq!(t.check(5, 1), Next::Gap, "index 0 never came");
        assert_eq!(t.check(6, 0), Next::Gap, "slot 5 never ended");
        t.sent(0, 1);
        assert_eq!(t.slot_end(5, 3), Next::Gap, "two of its transactions never came");
        assert_eq!(t.slot_end(6, 0), Next::Gap);
        assert_eq!(t.cursor(), Some(4), "nothing completed");
        assert_eq!(t.resume_slot(), 5);
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
                    proptest::prop_assert_eq!(t.check(slot as u64, i as u32), Next::Send);
                    t.sent(i as u32, *n);
                }
                proptest::prop_assert_eq!(t.slot_end(slot as u64, txs.len() as u32), Next::Send);
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
