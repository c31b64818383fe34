//! The transactions' bookkeeping as pure state: what the open transaction
//! holds (each release's outputs and the position it reaches, per
//! partition and epoch), whether it must abort, what a commit shows and what
//! an abort sends again; and what a failed transaction call means. No
//! producer and no clock here: [`super::Transactions`] carries it out.

use std::collections::HashMap;
use std::sync::atomic::Ordering;

use super::EpochRef;
use crate::output::Output;

/// What the open transaction holds of one release, kept until it commits.
pub(super) struct Retained {
    pub owner: EpochRef,
    pub outputs: Vec<Output>,
}

/// Positions per partition, with the epoch that released them.
pub(super) type Positions = HashMap<i32, (u64, i64)>;

/// What a transaction being ended holds.
pub(super) struct Closing {
    pub dirty: Positions,
    pub retained: Vec<Retained>,
    pub poisoned: bool,
}

impl Closing {
    /// Why it must abort before anything is sent: a partition was lost while
    /// its work was in it, or a partition's outputs are in it without the
    /// position that covers them (its offsets would not be committed with them).
    pub(super) fn doomed(&self) -> Option<String> {
        if self.poisoned {
            return Some("a partition was lost while its work was in the transaction".into());
        }
        let uncovered = self
            .retained
            .iter()
            .map(|r| &r.owner)
            .find(|o| self.dirty.get(&o.partition).is_none_or(|d| d.0 != o.epoch))?;
        Some(format!("partition {}'s outputs are in the transaction without its position", uncovered.partition))
    }
}

#[derive(Default)]
pub(super) struct State {
    pub open: bool,
    /// Positions to commit with the open transaction, per partition.
    dirty: Positions,
    /// The last position released per partition (any transaction), and the
    /// epoch that released it: after an abort only a live one's position
    /// goes into the next transaction.
    latest: HashMap<i32, (EpochRef, i64)>,
    retained: Vec<Retained>,
    /// The open transaction must abort: it may hold a lost partition's outputs.
    pub poisoned: bool,
    pub failed: Option<String>,
}

impl State {
    /// The state of a first transaction, begun.
    pub(super) fn opened() -> Self {
        Self { open: true, ..Self::default() }
    }

    /// Whether `epoch` still owns `partition`: the last epoch to release a
    /// position there, and not lost.
    pub(super) fn owns(&self, partition: i32, epoch: u64) -> bool {
        self.latest.get(&partition).is_some_and(|(o, _)| o.epoch == epoch && o.alive.load(Ordering::Acquire))
    }

    /// One release of `owner` into the open transaction: its `outputs`
    /// (enqueued already; `refused` when the producer refused them: the
    /// transaction aborts) and the position they reach.
    pub(super) fn released(&mut self, owner: &EpochRef, outputs: Vec<Output>, position: Option<i64>, refused: bool) {
        if refused {
            self.poisoned = true;
        }
        if !outputs.is_empty() {
            self.retained.push(Retained { owner: owner.clone(), outputs });
        }
        if let Some(p) = position {
            self.dirty.insert(owner.partition, (owner.epoch, p));
            match self.latest.get_mut(&owner.partition) {
                Some((by, at)) if by.epoch == owner.epoch => *at = p,
                _ => {
                    self.latest.insert(owner.partition, (owner.clone(), p));
                }
            }
        }
    }

    /// A partition `owner`'s epoch has handed nothing of, whose consumer
    /// stepped over markers only, to `to`: into the open transaction the
    /// first time and whenever `to` moves (never backwards), so an idle
    /// partition costs a transaction per epoch, not one per tick.
    pub(super) fn skip_untouched(&mut self, owner: &EpochRef, to: i64) {
        let moved = match self.latest.get_mut(&owner.partition) {
            Some((by, at)) if by.epoch == owner.epoch => {
                let moved = to > *at;
                *at = (*at).max(to);
                moved
            }
            _ => {
                self.latest.insert(owner.partition, (owner.clone(), to));
                true
            }
        };
        if moved {
            self.dirty.insert(owner.partition, (owner.epoch, to));
        }
    }

    /// Moves a partition's position from `from` to `to` when nothing was
    /// released since: the offsets between hold only transaction markers.
    pub(super) fn skip_markers(&mut self, partition: i32, epoch: u64, from: i64, to: i64) {
        if let Some((by, at)) = self.latest.get_mut(&partition)
            && to > from
            && by.epoch == epoch
            && *at == from
        {
            *at = to;
            self.dirty.insert(partition, (epoch, to));
        }
    }

    /// Closes the open transaction and takes what it holds; `None` when it
    /// holds nothing (it stays open).
    pub(super) fn close(&mut self) -> Option<Closing> {
        if self.dirty.is_empty() && self.retained.is_empty() && !self.poisoned {
            return None;
        }
        self.open = false;
        Some(Closing {
            dirty: std::mem::take(&mut self.dirty),
            retained: std::mem::take(&mut self.retained),
            poisoned: std::mem::replace(&mut self.poisoned, false),
        })
    }

    /// A partition in the closing transaction whose epoch is over, unless it
    /// ends with this transaction (`ending`: a revoke's final commit).
    pub(super) fn gone(&self, closing: &Closing, ending: &[i32]) -> Option<i32> {
        let live = |p: i32, epoch: u64| ending.contains(&p) || self.owns(p, epoch);
        closing
            .retained
            .iter()
            .map(|r| (r.owner.partition, r.owner.epoch))
            .chain(closing.dirty.iter().map(|(p, (epoch, _))| (*p, *epoch)))
            .find(|(p, epoch)| !live(*p, *epoch))
            .map(|(p, _)| p)
    }

    /// The committed positions a partition's `committed_offset` series
    /// shows: only partitions still owned and not ending with this commit
    /// (a revoke drops their series right after), so a revoked one's series
    /// does not come back.
    pub(super) fn shown(&self, dirty: &Positions, ending: &[i32]) -> Vec<(i32, i64)> {
        dirty
            .iter()
            .filter(|(p, (epoch, _))| !ending.contains(p) && self.owns(**p, *epoch))
            .map(|(p, (_, offset))| (*p, *offset))
            .collect()
    }

    /// After an abort: the work of partitions still owned (and not ending)
    /// goes into the next transaction, in the order it was first sent; the
    /// returned outputs are to be enqueued again, then given to
    /// [`State::retain`]. A lost partition's position is never committed
    /// (the next owner starts from the last one committed), and an ending
    /// partition's epoch is over.
    pub(super) fn after_abort(&mut self, closing: Closing, ending: &[i32]) -> Vec<Retained> {
        let keep = |owner: &EpochRef| owner.alive.load(Ordering::Acquire) && !ending.contains(&owner.partition);
        let again: Vec<Retained> = closing.retained.into_iter().filter(|r| keep(&r.owner)).collect();
        for (p, at) in closing.dirty {
            if !ending.contains(&p) && self.owns(p, at.0) {
                self.dirty.entry(p).or_insert(at);
            }
        }
        for p in ending {
            self.latest.remove(p);
        }
        again
    }

    /// Outputs enqueued again after an abort (`refused`: the producer
    /// refused some: the next transaction aborts too).
    pub(super) fn retain(&mut self, again: Vec<Retained>, refused: bool) {
        self.poisoned |= refused;
        self.retained.extend(again);
    }

    /// The positions the open transaction will commit (for the tests).
    #[cfg(test)]
    pub(super) fn dirty(&self) -> &Positions {
        &self.dirty
    }
}

/// Which transaction call a retry loop runs: what an error that is neither
/// fatal nor retriable means differs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Step {
    /// Nothing is committed yet: the transaction aborts.
    Offsets,
    /// The commit may have reached the coordinator: asked again (a commit is
    /// idempotent), never aborted on a guess.
    Commit,
    Abort,
}

/// What a failed transaction call's error says.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct TxnError {
    pub fatal: bool,
    pub abortable: bool,
    pub retriable: bool,
}

/// What to do after a failed call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Verdict {
    /// Another producer took the id, or the runtime is stopping: stop.
    Fatal,
    /// The transaction aborts; what it held goes again.
    Abort,
    /// Try again after a pause, for as long as it lasts: an outage pauses the
    /// outputs (the workers' staged records fill their budgets), it does not
    /// stop the processor.
    Retry,
}

/// What a failed `step` means.
pub(super) fn verdict(step: Step, error: TxnError, stopping: bool) -> Verdict {
    if error.fatal {
        return Verdict::Fatal;
    }
    if step != Step::Abort && (error.abortable || (step == Step::Offsets && !error.retriable)) {
        return Verdict::Abort;
    }
    if stopping { Verdict::Fatal } else { Verdict::Retry }
}

#[cfg(test)]
mod tests;
