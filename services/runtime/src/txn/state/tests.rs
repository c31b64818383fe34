//! The transactions' bookkeeping as units, and as a property over random
//! releases, losses, revokes and transaction ends: a commit never carries a
//! lost epoch's outputs or position, nor outputs without the position that
//! covers them, and a partition's committed position never goes back
//! within an epoch.

#![allow(clippy::unwrap_used)]

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use proptest::prelude::*;

use super::*;

fn epoch(partition: i32, epoch: u64) -> EpochRef {
    EpochRef { partition, epoch, alive: Arc::new(AtomicBool::new(true)) }
}

fn output(offset: i64) -> Output {
    let payload = offset.to_be_bytes().to_vec();
    Output { topic: Arc::from("out"), key: Vec::new(), payload, headers: None, event_time_ms: None }
}

fn source(output: &Output) -> i64 {
    i64::from_be_bytes(output.payload[..8].try_into().unwrap())
}

#[test]
fn an_empty_transaction_stays_open_and_a_release_closes_with_its_position() {
    let mut state = State::opened();
    assert!(state.close().is_none());
    assert!(state.open);
    let e = epoch(0, 1);
    state.released(&e, vec![output(0), output(1)], Some(2), false);
    let closing = state.close().unwrap();
    assert!(!state.open);
    assert_eq!(closing.dirty, HashMap::from([(0, (1, 2))]));
    assert_eq!(closing.retained.len(), 1);
    assert_eq!(closing.doomed(), None);
}

#[test]
fn a_poisoned_or_uncovered_transaction_is_doomed() {
    let mut state = State::opened();
    let e = epoch(0, 1);
    state.released(&e, vec![output(0)], Some(1), true);
    assert!(state.close().unwrap().doomed().unwrap().contains("lost"), "a refused output poisons it");
    state.released(&e, vec![output(1)], None, false);
    assert!(state.close().unwrap().doomed().unwrap().contains("without its position"));
}

#[test]
fn a_lost_epoch_is_gone_unless_its_partition_ends_with_the_transaction() {
    let mut state = State::opened();
    let e = epoch(4, 1);
    state.released(&e, vec![output(0)], Some(1), false);
    let closing = state.close().unwrap();
    assert_eq!(state.gone(&closing, &[]), None);
    e.alive.store(false, Ordering::Release);
    assert_eq!(state.gone(&closing, &[]), Some(4));
    assert_eq!(state.gone(&closing, &[4]), None, "a revoke's final commit names it");
}

#[test]
fn after_an_abort_only_live_epochs_work_goes_again_in_its_order() {
    let mut state = State::opened();
    let (a, b, c) = (epoch(0, 1), epoch(1, 2), epoch(2, 3));
    state.released(&a, vec![output(0)], Some(1), false);
    state.released(&b, vec![output(10)], Some(11), false);
    state.released(&c, vec![output(20)], Some(21), false);
    state.released(&a, vec![output(1)], Some(2), false);
    b.alive.store(false, Ordering::Release);
    let closing = state.close().unwrap();
    let again = state.after_abort(closing, &[2]);
    let sent: Vec<i64> = again.iter().flat_map(|r| r.outputs.iter().map(source)).collect();
    assert_eq!(sent, vec![0, 1], "b was lost, c ends with the aborted transaction");
    state.retain(again, false);
    assert_eq!(state.dirty(), &HashMap::from([(0, (1, 2))]));
    assert!(!state.owns(2, 3), "an ending partition's epoch is over");
}

#[test]
fn markers_are_skipped_only_when_nothing_was_released_since() {
    let mut state = State::opened();
    let e = epoch(0, 1);
    state.released(&e, Vec::new(), Some(10), false);
    state.close();
    state.skip_markers(0, 1, 9, 12);
    assert!(state.dirty().is_empty(), "the worker released past 9 since");
    state.skip_markers(0, 2, 10, 12);
    assert!(state.dirty().is_empty(), "another epoch");
    state.skip_markers(0, 1, 10, 12);
    assert_eq!(state.dirty(), &HashMap::from([(0, (1, 12))]));
}

#[test]
fn a_partition_handed_nothing_commits_its_position_once_per_move() {
    let mut state = State::opened();
    let (old, new) = (epoch(0, 1), epoch(0, 2));
    state.released(&old, Vec::new(), Some(3), false);
    state.close();
    state.skip_untouched(&new, 4);
    assert_eq!(state.dirty(), &HashMap::from([(0, (2, 4))]), "the new epoch owns it from its first position");
    assert!(state.owns(0, 2));
    state.close();
    state.skip_untouched(&new, 4);
    assert!(state.dirty().is_empty(), "not moved: no transaction for it");
    state.skip_untouched(&new, 3);
    assert!(state.dirty().is_empty(), "never backwards");
    state.skip_untouched(&new, 6);
    assert_eq!(state.dirty(), &HashMap::from([(0, (2, 6))]));
}

#[test]
fn a_commit_shows_the_positions_of_partitions_still_owned_and_not_ending() {
    let mut state = State::opened();
    let (a, b, c) = (epoch(0, 1), epoch(1, 2), epoch(2, 3));
    for e in [&a, &b, &c] {
        state.released(e, Vec::new(), Some(5), false);
    }
    b.alive.store(false, Ordering::Release);
    let closing = state.close().unwrap();
    let mut shown = state.shown(&closing.dirty, &[2]);
    shown.sort_unstable();
    assert_eq!(shown, vec![(0, 5)]);
}

#[test]
fn what_a_failed_call_means() {
    let fatal = TxnError { fatal: true, ..TxnError::default() };
    let abortable = TxnError { abortable: true, ..TxnError::default() };
    let retriable = TxnError { retriable: true, ..TxnError::default() };
    let other = TxnError::default();
    assert_eq!(verdict(Step::Commit, fatal, false), Verdict::Fatal);
    assert_eq!(verdict(Step::Offsets, abortable, false), Verdict::Abort);
    assert_eq!(verdict(Step::Commit, abortable, false), Verdict::Abort);
    assert_eq!(verdict(Step::Offsets, other, false), Verdict::Abort, "nothing committed yet");
    assert_eq!(verdict(Step::Offsets, retriable, false), Verdict::Retry);
    assert_eq!(verdict(Step::Commit, other, false), Verdict::Retry, "the commit may have landed: ask again");
    assert_eq!(verdict(Step::Abort, abortable, false), Verdict::Retry);
    assert_eq!(verdict(Step::Commit, other, true), Verdict::Fatal, "a shutdown ends the waiting");
}

#[derive(Debug, Clone)]
enum Op {
    /// The partition's live epoch releases `n` records.
    Release {
        partition: i32,
        n: u8,
    },
    /// The partition is lost (the open transaction is poisoned).
    Lose(i32),
    /// A new epoch takes a lost partition.
    Assign(i32),
    /// The driver ends the open transaction (`ending`: a revoke's final commit).
    End {
        abort: bool,
        ending: Option<i32>,
    },
    Skip {
        partition: i32,
        by: u8,
    },
    /// The partition's epoch, if it released nothing, steps over `by` markers.
    Untouched {
        partition: i32,
        by: u8,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0i32..3, 1u8..4).prop_map(|(partition, n)| Op::Release { partition, n }),
        1 => (0i32..3).prop_map(Op::Lose),
        1 => (0i32..3).prop_map(Op::Assign),
        3 => (prop::bool::weighted(0.3), prop::option::weighted(0.2, 0i32..3))
            .prop_map(|(abort, ending)| Op::End { abort, ending }),
        1 => (0i32..3, 1u8..3).prop_map(|(partition, by)| Op::Skip { partition, by }),
        1 => (0i32..3, 0u8..3).prop_map(|(partition, by)| Op::Untouched { partition, by }),
    ]
}

/// The driver's bookkeeping around the state: each partition's live epoch
/// and how far it released, and what each epoch committed.
#[derive(Default)]
struct Model {
    state: State,
    epochs: HashMap<i32, (EpochRef, i64)>,
    /// Epochs that released a record.
    touched: std::collections::HashSet<u64>,
    next_epoch: u64,
    committed: HashMap<(i32, u64), i64>,
}

impl Model {
    fn step(&mut self, op: Op) -> Result<(), TestCaseError> {
        match op {
            Op::Release { partition, n } => {
                let (e, at) = live_epoch(&mut self.epochs, &mut self.next_epoch, partition);
                if e.alive.load(Ordering::Acquire) {
                    self.touched.insert(e.epoch);
                    let outputs = (*at..*at + i64::from(n)).map(output).collect();
                    *at += i64::from(n);
                    self.state.released(e, outputs, Some(*at), false);
                }
            }
            Op::Lose(p) => {
                if let Some((e, _)) = self.epochs.get(&p) {
                    e.alive.store(false, Ordering::Release);
                    self.state.poisoned = true;
                }
            }
            Op::Assign(p) => {
                if self.epochs.get(&p).is_some_and(|(e, _)| !e.alive.load(Ordering::Acquire)) {
                    self.epochs.remove(&p);
                }
            }
            Op::Skip { partition, by } => {
                if let Some((e, at)) = self.epochs.get_mut(&partition) {
                    self.state.skip_markers(partition, e.epoch, *at, *at + i64::from(by));
                    *at += i64::from(by);
                }
            }
            Op::Untouched { partition, by } => {
                let (e, at) = live_epoch(&mut self.epochs, &mut self.next_epoch, partition);
                if e.alive.load(Ordering::Acquire) && !self.touched.contains(&e.epoch) {
                    *at += i64::from(by);
                    self.state.skip_untouched(e, *at);
                }
            }
            Op::End { abort, ending } => self.end(abort, ending.into_iter().collect())?,
        }
        Ok(())
    }

    fn end(&mut self, abort: bool, ending: Vec<i32>) -> Result<(), TestCaseError> {
        if let Some(closing) = self.state.close() {
            let doomed = closing.doomed().is_some() || self.state.gone(&closing, &ending).is_some();
            if abort || doomed {
                let again = self.state.after_abort(closing, &ending);
                self.state.retain(again, false);
            } else {
                self.committed(&closing, &ending)?;
            }
        }
        for p in &ending {
            if let Some((e, _)) = self.epochs.remove(p) {
                e.alive.store(false, Ordering::Release);
            }
        }
        self.state.open = true;
        Ok(())
    }

    fn committed(&mut self, closing: &Closing, ending: &[i32]) -> Result<(), TestCaseError> {
        let mut released: HashMap<i32, Vec<i64>> = HashMap::new();
        for r in &closing.retained {
            let live = r.owner.alive.load(Ordering::Acquire) || ending.contains(&r.owner.partition);
            prop_assert!(live, "a lost epoch's outputs committed");
            let covered = closing.dirty.get(&r.owner.partition).map(|d| d.0);
            prop_assert_eq!(covered, Some(r.owner.epoch), "outputs committed without their position");
            released.entry(r.owner.partition).or_default().extend(r.outputs.iter().map(source));
        }
        for (p, (e, offset)) in &closing.dirty {
            let from = self.committed.insert((*p, *e), *offset).unwrap_or(0);
            prop_assert!(from <= *offset, "partition {} went back from {} to {}", p, from, offset);
            for o in released.remove(p).unwrap_or_default() {
                prop_assert!(o < *offset, "the output of {} committed with position {}", o, offset);
            }
        }
        Ok(())
    }
}

/// The partition's current epoch and how far it got, a new one (numbered
/// from `next`) if it has none.
fn live_epoch<'a>(
    epochs: &'a mut HashMap<i32, (EpochRef, i64)>,
    next: &mut u64,
    partition: i32,
) -> &'a mut (EpochRef, i64) {
    epochs.entry(partition).or_insert_with(|| {
        *next += 1;
        (epoch(partition, *next), 0)
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn a_commit_never_carries_a_lost_epochs_work_nor_goes_back(ops in prop::collection::vec(op(), 0..80)) {
        let mut model = Model { state: State::opened(), ..Model::default() };
        for op in ops {
            model.step(op)?;
        }
    }
}
