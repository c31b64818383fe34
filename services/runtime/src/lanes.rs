//! Per-key lanes of one partition: which received records may start now.
//!
//! A key's records start in offset order, one unit at a time: while a unit
//! holding some of a key's records runs (or waits out a retry backoff),
//! the key's later records wait in its lane, and every other key goes on.
//! Records without a key have no order to keep and start as they come.
//! Keys become ready in the order they were first blocked on nothing, so
//! no key starves.

use std::collections::{HashMap, VecDeque};

use crate::handler::Record;

#[derive(Debug, Default)]
struct Lane {
    queue: VecDeque<Record>,
    /// A unit holding this key's records runs, or a retry waits: nothing
    /// of this key may start.
    busy: bool,
    /// In `ready` already.
    listed: bool,
}

/// The lanes of one partition.
#[derive(Debug, Default)]
pub(crate) struct Lanes {
    lanes: HashMap<Vec<u8>, Lane>,
    /// Keys whose next record may start, oldest first.
    ready: VecDeque<Vec<u8>>,
    unkeyed: VecDeque<Record>,
    queued: usize,
}

impl Lanes {
    /// Records received and not started.
    pub(crate) fn queued(&self) -> usize {
        self.queued
    }

    /// Whether a record could start now.
    pub(crate) fn has_ready(&self) -> bool {
        !self.ready.is_empty() || !self.unkeyed.is_empty()
    }

    /// Keys with records started or queued (for tests).
    #[cfg(test)]
    fn keys(&self) -> usize {
        self.lanes.len()
    }

    pub(crate) fn push(&mut self, record: Record) {
        self.queued += 1;
        let Some(key) = record.key.as_deref() else {
            self.unkeyed.push_back(record);
            return;
        };
        let lane = match self.lanes.get_mut(key) {
            Some(lane) => lane,
            None => self.lanes.entry(key.to_vec()).or_default(),
        };
        if !lane.busy && !lane.listed {
            lane.listed = true;
            self.ready.push_back(key.to_vec());
        }
        lane.queue.push_back(record);
    }

    /// Starts up to `max` records: the next record of each ready key when
    /// `per_key` is 1, or up to `per_key` consecutive records of each; the
    /// keys taken are busy until [`Lanes::release`] or [`Lanes::retry`].
    pub(crate) fn take(&mut self, max: usize, per_key: usize) -> Vec<Record> {
        let mut taken = Vec::new();
        while taken.len() < max {
            if let Some(record) = self.unkeyed.pop_front() {
                taken.push(record);
                continue;
            }
            let Some(key) = self.ready.pop_front() else { break };
            let Some(lane) = self.lanes.get_mut(&key) else { continue };
            lane.listed = false;
            if lane.busy || lane.queue.is_empty() {
                continue;
            }
            lane.busy = true;
            let n = per_key.min(max - taken.len()).min(lane.queue.len()).max(1);
            taken.extend(lane.queue.drain(..n));
        }
        self.queued -= taken.len();
        taken
    }

    /// A unit holding `key` is through: the key's next record may start.
    pub(crate) fn release(&mut self, key: &[u8]) {
        let Some(lane) = self.lanes.get_mut(key) else { return };
        lane.busy = false;
        if lane.queue.is_empty() {
            self.lanes.remove(key);
        } else if !lane.listed {
            lane.listed = true;
            self.ready.push_back(key.to_vec());
        }
    }

    /// Takes `key`'s queued records out (offset order) and forgets the key:
    /// its retries ran out and it is dead-lettered from there on.
    pub(crate) fn take_key(&mut self, key: &[u8]) -> Vec<Record> {
        let Some(lane) = self.lanes.remove(key) else { return Vec::new() };
        self.queued -= lane.queue.len();
        self.ready.retain(|k| k != key);
        lane.queue.into()
    }

    /// `records` of one key (offset order) failed and go back to the front
    /// of the lane; the key stays busy until released after the backoff.
    pub(crate) fn retry(&mut self, records: Vec<Record>) {
        let Some(key) = records.first().and_then(|r| r.key.clone()) else {
            self.queued += records.len();
            for record in records.into_iter().rev() {
                self.unkeyed.push_front(record);
            }
            return;
        };
        self.queued += records.len();
        let lane = self.lanes.entry(key).or_default();
        lane.busy = true;
        for record in records.into_iter().rev() {
            lane.queue.push_front(record);
        }
    }
}

/// A batch handler's queue: records in offset order, taken from the front,
/// one unit at a time per partition, so everything done lies below
/// everything not started (a revoke then needs only the running unit to
/// finish). A key whose records wait out a retry backoff is held: its later
/// records stay in the queue, and the other keys' records go on.
#[derive(Debug, Default)]
pub(crate) struct Ordered {
    records: VecDeque<Record>,
    held: Vec<Vec<u8>>,
}

impl Ordered {
    pub(crate) fn queued(&self) -> usize {
        self.records.len()
    }

    pub(crate) fn has_ready(&self) -> bool {
        !self.records.is_empty()
    }

    pub(crate) fn push(&mut self, record: Record) {
        self.records.push_back(record);
    }

    /// Up to `max` records from the front, in offset order, skipping held keys.
    pub(crate) fn take(&mut self, max: usize) -> Vec<Record> {
        if self.held.is_empty() {
            let n = max.min(self.records.len());
            return self.records.drain(..n).collect();
        }
        let mut taken = Vec::new();
        let mut kept = VecDeque::with_capacity(self.records.len());
        for record in self.records.drain(..) {
            let held = record.key.as_ref().is_some_and(|k| self.held.contains(k));
            if held || taken.len() >= max {
                kept.push_back(record);
            } else {
                taken.push(record);
            }
        }
        self.records = kept;
        taken
    }

    /// `key`'s records wait (a retry backoff); [`Ordered::retry`] brings them back.
    pub(crate) fn hold(&mut self, key: &[u8]) {
        if !self.held.iter().any(|k| k == key) {
            self.held.push(key.to_vec());
        }
    }

    /// Takes `key`'s queued records out (offset order); it is no longer held.
    pub(crate) fn take_key(&mut self, key: &[u8]) -> Vec<Record> {
        self.held.retain(|k| k != key);
        let (taken, kept) = self.records.drain(..).partition(|r| r.key.as_deref() == Some(key));
        self.records = kept;
        taken.into()
    }

    /// Failed records go back in offset order; their key is no longer held.
    pub(crate) fn retry(&mut self, records: Vec<Record>) {
        if let Some(key) = records.first().and_then(|r| r.key.as_deref()) {
            self.held.retain(|k| k != key);
        }
        for record in records {
            let at = self.records.partition_point(|r| r.offset < record.offset);
            self.records.insert(at, record);
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::sync::Arc;

    use super::*;

    fn record(offset: i64, key: Option<&str>) -> Record {
        Record {
            topic: Arc::from("t"),
            partition: 0,
            offset,
            key: key.map(|k| k.as_bytes().to_vec()),
            payload: None,
            timestamp_ms: None,
            redriven: false,
        }
    }

    fn offsets(records: &[Record]) -> Vec<i64> {
        records.iter().map(|r| r.offset).collect()
    }

    #[test]
    fn one_record_per_key_at_a_time_others_go_on() {
        let mut lanes = Lanes::default();
        for (o, k) in [(0, "a"), (1, "a"), (2, "b"), (3, "a"), (4, "c")] {
            lanes.push(record(o, Some(k)));
        }
        assert_eq!(offsets(&lanes.take(10, 1)), [0, 2, 4]);
        assert!(lanes.take(10, 1).is_empty(), "a, b and c are busy");
        lanes.release(b"b");
        assert!(lanes.take(10, 1).is_empty(), "b has nothing queued");
        lanes.release(b"a");
        assert_eq!(offsets(&lanes.take(10, 1)), [1]);
        lanes.release(b"a");
        assert_eq!(offsets(&lanes.take(10, 1)), [3]);
        lanes.release(b"a");
        lanes.release(b"c");
        assert_eq!((lanes.keys(), lanes.queued()), (0, 0));
    }

    #[test]
    fn a_batch_takes_consecutive_records_of_each_key() {
        let mut lanes = Lanes::default();
        for (o, k) in [(0, Some("a")), (1, Some("a")), (2, None), (3, Some("b")), (4, Some("a"))] {
            lanes.push(record(o, k));
        }
        let mut batch = offsets(&lanes.take(100, 100));
        batch.sort_unstable();
        assert_eq!(batch, [0, 1, 2, 3, 4]);
        lanes.push(record(5, Some("a")));
        assert!(lanes.take(100, 100).is_empty(), "a is busy until released");
        lanes.release(b"a");
        assert_eq!(offsets(&lanes.take(100, 100)), [5]);
    }

    #[test]
    fn a_retry_goes_first_and_waits_for_its_release() {
        let mut lanes = Lanes::default();
        for o in 0..3 {
            lanes.push(record(o, Some("a")));
        }
        lanes.push(record(9, Some("b")));
        let taken = lanes.take(100, 2);
        assert_eq!(offsets(&taken), [0, 1, 9]);
        // 0 failed: 0 and 1 go back in front of 2; b goes on meanwhile.
        lanes.retry(taken.into_iter().filter(|r| r.key.as_deref() == Some(b"a")).collect());
        lanes.release(b"b");
        lanes.push(record(10, Some("b")));
        assert_eq!(offsets(&lanes.take(100, 100)), [10]);
        lanes.release(b"a");
        assert_eq!(offsets(&lanes.take(100, 100)), [0, 1, 2]);
        assert_eq!(lanes.queued(), 0);
    }

    #[test]
    fn max_bounds_what_starts() {
        let mut lanes = Lanes::default();
        for o in 0..5 {
            lanes.push(record(o, Some(&format!("k{o}"))));
        }
        assert_eq!(lanes.take(2, 1).len(), 2);
        assert_eq!(lanes.queued(), 3);
        assert!(lanes.has_ready());
    }

    #[test]
    fn a_batch_queue_takes_in_offset_order_around_held_keys() {
        let mut q = Ordered::default();
        for (o, k) in [(0, "a"), (1, "b"), (2, "a"), (3, "c"), (4, "b")] {
            q.push(record(o, Some(k)));
        }
        assert_eq!(offsets(&q.take(2)), [0, 1]);
        // 1 (b) failed: b is held, its later record 4 waits; a and c go on.
        q.hold(b"b");
        assert_eq!(offsets(&q.take(10)), [2, 3]);
        assert_eq!(q.queued(), 1);
        q.retry(vec![record(1, Some("b"))]);
        assert_eq!(offsets(&q.take(10)), [1, 4]);
        assert!(!q.has_ready());
    }
}
