//! One partition's decisions, as a pure state machine: no IO, no clock, no
//! channel, no metric. [`crate::worker`] feeds it what happened (records
//! received, a unit through its handler, a group of outputs acknowledged, a
//! backoff over, a transaction open) and carries out the [`Action`]s it
//! returns; everything a rule depends on is here, so every rule has a unit
//! test (`partition/tests.rs`, with property tests over random interleavings).
//!
//! The rules:
//! - **Start**: a key's records start in offset order, one unit at a time
//!   (per-record handlers, [`Lanes`]); a batch handler takes records in
//!   offset order, one unit at a time per partition, skipping keys that wait
//!   out a retry ([`Ordered`]).
//! - **Release**: a unit's done records' outputs are sent as one group;
//!   the key's next records may start at once. In exactly-once mode done
//!   records are staged and handed to the open transaction in offset order
//!   only, from the lowest unfinished record up, with the position they reach.
//! - **Commit**: a record completes when its outputs are acknowledged (or
//!   released into a transaction); the position ([`Partition::position`]) is
//!   below every record that has not.
//! - **Retry**: a transient failure retries the key from the failed record
//!   after a backoff; a failed delivery is sent again after a backoff; at
//!   the retry cap the partition stalls (pauses, not ready) and keeps
//!   retrying, or, under the workload's dead-letter-key policy, the record
//!   and its key's later records go to the dead-letter topic unhandled until
//!   a redriven record of the key lifts it ([`DeadKeys`]).
//! - **Budget**: bytes in flight, or completed records waiting behind a slow
//!   one, past the budget pause the partition; it resumes below the resume
//!   fraction with no stall.
//! - **Drain**: what must finish before a revoked partition's position is
//!   final ([`Partition::drained`]).

use std::collections::{BTreeMap, HashMap};

use rdkafka::error::KafkaError;
use sluice_core::offsets::{OffsetTracker, TrackError};

use crate::handler::{Batching, HandleError, Handled, Record};
use crate::lanes::{Lanes, Ordered};
use crate::metrics::Dependency;
use crate::outcome::{self, DeadLetters};
use crate::output::Output;
use crate::retry::Exhausted;

mod budget;
mod dead_keys;

pub(crate) use budget::Budget;
pub(crate) use dead_keys::DeadKeys;

/// What a partition's rules depend on.
#[derive(Debug, Clone)]
pub(crate) struct Rules {
    pub batching: Batching,
    /// Outputs go into Kafka transactions ([`Partition::release`]) instead of groups.
    pub exactly_once: bool,
    pub budget: Budget,
    /// Failed attempts at which a record's retries are exhausted.
    pub attempts_before_stall: u32,
    /// What exhausted retries lead to.
    pub exhausted: Exhausted,
    pub dead_letters: DeadLetters,
}

/// What the worker must do, in the order given.
#[derive(Debug)]
pub(crate) enum Action {
    /// Enqueue `outputs` as group `id`; report with [`Partition::acknowledged`].
    Send { id: u64, outputs: Vec<Output> },
    /// After the backoff for `attempts`, give `records` back with [`Partition::retry_due`].
    Backoff { records: Vec<Record>, attempts: u32 },
    /// After the backoff for `attempts`, give these back with [`Partition::resend_due`].
    Resend { outputs: Vec<Output>, records: Vec<(i64, usize)>, attempts: u32 },
    /// The record at `offset` is done (for the metrics).
    Done { offset: i64, outcome: &'static str, dead_letter: Option<&'static str>, event_time_ms: Option<i64> },
    /// An attempt failed (`stalled`: it reached the cap now).
    Failed { offset: i64, attempts: u32, dependency: &'static str, error: String, stalled: bool },
    /// A stalled record got through.
    Unstalled { offset: i64 },
    /// Retries ran out at `offset` and its key is dead-lettered from there
    /// (`records` of it now); `full`: no room for one more dead key, so the
    /// partition stalls instead.
    KeyDeadLettered { offset: i64, records: usize, error: String, full: bool },
    /// A record came out of offset order and is ignored (counted as finished).
    OutOfOrder(TrackError),
}

/// What one exactly-once release hands to the open transaction.
#[derive(Debug)]
pub(crate) struct Release {
    pub outputs: Vec<Output>,
    /// The position the released records reach (committed with the transaction).
    pub position: Option<i64>,
}

/// Records a group of outputs completes once acknowledged.
#[derive(Debug)]
struct Awaiting {
    records: Vec<(i64, usize)>,
    attempts: u32,
}

/// One partition's processing state in one assignment epoch.
#[derive(Debug)]
pub(crate) struct Partition {
    rules: Rules,
    tracker: OffsetTracker,
    /// Per-record handlers: which keys may start.
    lanes: Lanes,
    /// Batch handlers: records in offset order.
    ordered: Ordered,
    bytes: usize,
    /// Units started and not through their handler.
    running: usize,
    /// Backoffs and resends the worker is waiting out.
    backoffs: usize,
    resends: usize,
    awaiting: HashMap<u64, Awaiting>,
    next_group: u64,
    /// Failed attempts by the offset of the first record of a failing run.
    attempts: HashMap<i64, u32>,
    /// Offsets past the retry cap.
    stalled: Vec<i64>,
    /// Keys dead-lettered since their retries ran out.
    dead: DeadKeys,
    /// `dead` changed since [`Partition::take_dead_keys`] last read it.
    dead_changed: bool,
    paused: bool,
    /// Exactly-once mode: done records (size, outputs) waiting until every
    /// record below them is done.
    staged: BTreeMap<i64, (usize, Vec<Output>)>,
    /// Records finished (completed, or refused as out of order) and not yet
    /// reported by [`Partition::take_finished`].
    finished: u64,
}

impl Partition {
    pub(crate) fn new(rules: Rules) -> Self {
        Self {
            rules,
            tracker: OffsetTracker::new(),
            lanes: Lanes::default(),
            ordered: Ordered::default(),
            bytes: 0,
            running: 0,
            backoffs: 0,
            resends: 0,
            awaiting: HashMap::new(),
            next_group: 0,
            attempts: HashMap::new(),
            stalled: Vec::new(),
            dead: DeadKeys::default(),
            dead_changed: false,
            paused: false,
            staged: BTreeMap::new(),
            finished: 0,
        }
    }

    /// The dead keys a commit of this partition recorded (a new owner's start).
    pub(crate) fn restore(&mut self, dead: DeadKeys) {
        self.dead = dead;
        self.dead_changed = true;
    }

    /// The dead keys, encoded for the commit metadata, when they changed
    /// since the last call: to be recorded before any position past them.
    pub(crate) fn take_dead_keys(&mut self) -> Option<String> {
        std::mem::take(&mut self.dead_changed).then(|| self.dead.encode())
    }

    /// Records fetched for this partition, in offset order. A dead key's
    /// records are dead-lettered unhandled; a redriven one lifts its key.
    pub(crate) fn receive(&mut self, records: Vec<Record>) -> Vec<Action> {
        let mut actions = Vec::new();
        let mut dead = Vec::new();
        for record in records {
            if let Err(e) = self.tracker.received(record.offset) {
                // librdkafka delivers a partition's offsets increasing within
                // an assignment; anything else (e.g. a position reset after
                // log truncation) is not tracked and not processed.
                self.finished += 1;
                actions.push(Action::OutOfOrder(e));
                continue;
            }
            self.bytes += record.size();
            if let Some(since) = self.dead_since(&record) {
                let why = format!("its key is dead-lettered since offset {since}, where its retries ran out");
                dead.push(outcome::exhausted(&record, &self.rules.dead_letters, &why));
                continue;
            }
            match self.rules.batching {
                Batching::PerRecord => self.lanes.push(record),
                Batching::Batch { .. } => self.ordered.push(record),
            }
        }
        if !dead.is_empty() {
            self.finish(dead, &mut actions);
        }
        self.check_budget();
        actions
    }

    /// Where `record`'s key has been dead since, if it is and the record
    /// is not a redriven one (which lifts the key).
    fn dead_since(&mut self, record: &Record) -> Option<i64> {
        let key = record.key.as_deref().filter(|_| !self.dead.is_empty())?;
        let since = self.dead.dead_since(key, record.offset)?;
        if record.redriven {
            self.dead.lift(key, record.offset);
            self.dead_changed = true;
            return None;
        }
        Some(since)
    }

    pub(crate) fn batching(&self) -> Batching {
        self.rules.batching
    }

    /// Whether a unit could start now (given a permit).
    pub(crate) fn can_start(&self) -> bool {
        match self.rules.batching {
            Batching::PerRecord => self.lanes.has_ready(),
            Batching::Batch { .. } => self.running == 0 && self.ordered.has_ready(),
        }
    }

    /// The next unit's records: one record for per-record handlers, the
    /// next batch for batch handlers; empty when none may start. Report it
    /// with [`Partition::unit_done`].
    pub(crate) fn start_unit(&mut self) -> Vec<Record> {
        if !self.can_start() {
            return Vec::new();
        }
        let records = match self.rules.batching {
            Batching::PerRecord => self.lanes.take(1, 1),
            Batching::Batch { max_records } => self.ordered.take(max_records.max(1)),
        };
        if !records.is_empty() {
            self.running += 1;
        }
        records
    }

    /// A unit is through its handler (one result per record): its done
    /// records' outputs go out as one group (or are staged), its keys
    /// released, its failures scheduled for a retry.
    pub(crate) fn unit_done(
        &mut self,
        records: Vec<Record>,
        results: Vec<Result<Handled, HandleError>>,
    ) -> Vec<Action> {
        self.running = self.running.saturating_sub(1);
        let mut actions = Vec::new();
        let mut keys: Vec<Vec<u8>> = records.iter().filter_map(|r| r.key.clone()).collect();
        keys.sort_unstable();
        keys.dedup();
        let settled = outcome::settle(records, results, &self.rules.dead_letters);
        self.finish(settled.done, &mut actions);
        let retrying: Vec<&[u8]> = settled.retry.iter().filter_map(|r| r.records[0].key.as_deref()).collect();
        if self.rules.batching == Batching::PerRecord {
            for key in keys.iter().filter(|k| !retrying.contains(&k.as_slice())) {
                self.lanes.release(key);
            }
        } else {
            for key in &retrying {
                self.ordered.hold(key);
            }
        }
        for retry in settled.retry {
            let first = retry.records[0].offset;
            let attempts = self.attempts.entry(first).or_insert(0);
            *attempts += 1;
            let attempts = *attempts;
            let exhausted = attempts >= self.rules.attempts_before_stall;
            let retry = match self.rules.exhausted {
                Exhausted::DeadLetterKey if exhausted => match self.dead_letter_key(retry, attempts, &mut actions) {
                    Ok(()) => continue,
                    Err(retry) => retry,
                },
                _ => retry,
            };
            self.failed_attempt(first, attempts, retry.dependency, retry.message, &mut actions);
            self.backoffs += 1;
            actions.push(Action::Backoff { records: retry.records, attempts });
        }
        actions
    }

    /// Done records: their outputs go out as one group (or are staged).
    fn finish(&mut self, done: Vec<outcome::Done>, actions: &mut Vec<Action>) {
        let mut outputs = Vec::new();
        let mut completes = Vec::new();
        let mut immediate = Vec::new();
        for done in done {
            actions.push(Action::Done {
                offset: done.offset,
                outcome: done.outcome,
                dead_letter: done.dead_letter,
                event_time_ms: done.event_time_ms,
            });
            self.unstall(done.offset, actions);
            if self.rules.exactly_once {
                self.staged.insert(done.offset, (done.size, done.outputs));
            } else if done.outputs.is_empty() {
                immediate.push((done.offset, done.size));
            } else {
                completes.push((done.offset, done.size));
                outputs.extend(done.outputs);
            }
        }
        for (offset, size) in immediate {
            self.complete(offset, size);
        }
        if !outputs.is_empty() {
            actions.push(self.send_group(outputs, completes, 0));
        }
    }

    /// The dead-letter-key policy at the retry cap: the failed records and
    /// their key's queued ones go to the dead-letter topic, unhandled, in
    /// offset order, and the key is dead from the first of them on. The
    /// retry back (the partition stalls instead) when the commit metadata
    /// has no room for one more dead key.
    fn dead_letter_key(
        &mut self,
        retry: outcome::Retry,
        attempts: u32,
        actions: &mut Vec<Action>,
    ) -> Result<(), outcome::Retry> {
        let first = retry.records[0].offset;
        let key = retry.records[0].key.clone();
        let error = format!("{}: {} (retries exhausted after {attempts} attempts)", retry.dependency, retry.message);
        if key.as_ref().is_some_and(|k| !self.dead.has_room(k.len())) {
            actions.push(Action::KeyDeadLettered { offset: first, records: 0, error, full: true });
            return Err(retry);
        }
        self.attempts.remove(&first);
        actions.push(Action::Failed {
            offset: first,
            attempts,
            dependency: retry.dependency,
            error: retry.message.clone(),
            stalled: false,
        });
        let mut records = retry.records;
        if let Some(key) = &key {
            records.extend(match self.rules.batching {
                Batching::PerRecord => self.lanes.take_key(key),
                Batching::Batch { .. } => self.ordered.take_key(key),
            });
            self.dead.kill(key, first);
            self.dead_changed = true;
        }
        let later = format!("its key is dead-lettered since offset {first}: {error}");
        let dlq = &self.rules.dead_letters;
        let done = records
            .iter()
            .map(|r| outcome::exhausted(r, dlq, if r.offset == first { &error } else { &later }))
            .collect();
        actions.push(Action::KeyDeadLettered { offset: first, records: records.len(), error, full: false });
        self.finish(done, actions);
        Ok(())
    }

    /// A backoff is over: the records go back to the front of their lane
    /// (batch handlers: back into offset order, their key no longer held).
    pub(crate) fn retry_due(&mut self, records: Vec<Record>) {
        self.backoffs = self.backoffs.saturating_sub(1);
        if let Batching::Batch { .. } = self.rules.batching {
            return self.ordered.retry(records);
        }
        let key = records.first().and_then(|r| r.key.clone());
        self.lanes.retry(records);
        if let Some(key) = key {
            self.lanes.release(&key);
        }
    }

    /// A resend's backoff is over: its outputs go out again as a new group.
    pub(crate) fn resend_due(&mut self, outputs: Vec<Output>, records: Vec<(i64, usize)>, attempts: u32) -> Action {
        self.resends = self.resends.saturating_sub(1);
        self.send_group(outputs, records, attempts)
    }

    /// Group `id` is acknowledged: its records complete, or its `failed`
    /// deliveries (with why) go again after a backoff (at least once; a
    /// resend may land after the key's later outputs, which carry their own
    /// sequence).
    pub(crate) fn acknowledged(&mut self, id: u64, failed: Vec<(Output, KafkaError)>) -> Vec<Action> {
        let Some(awaiting) = self.awaiting.remove(&id) else { return Vec::new() };
        if failed.is_empty() {
            for (offset, size) in awaiting.records {
                self.complete(offset, size);
            }
            return Vec::new();
        }
        let mut actions = Vec::new();
        let attempts = awaiting.attempts + 1;
        let first = awaiting.records.first().map_or(-1, |r| r.0);
        self.failed_attempt(first, attempts, Dependency::Kafka.as_str(), failed[0].1.to_string(), &mut actions);
        self.resends += 1;
        let outputs = failed.into_iter().map(|(out, _)| out).collect();
        actions.push(Action::Resend { outputs, records: awaiting.records, attempts });
        actions
    }

    /// Exactly-once mode: whether the lowest unfinished record is done and
    /// waits to be released (staged records above a record whose retry a
    /// drain dropped never are: the next owner processes them).
    pub(crate) fn releasable(&self) -> bool {
        self.tracker.commit_position().is_some_and(|h| self.staged.contains_key(&h))
    }

    /// Exactly-once mode, while a transaction is open: the done records from
    /// the lowest unfinished one up, in offset order, with the position they
    /// reach, in one step (a transaction never holds outputs above the
    /// offsets committed with it). `None` when nothing is releasable.
    pub(crate) fn release(&mut self) -> Option<Release> {
        if !self.releasable() {
            return None;
        }
        let mut outputs = Vec::new();
        while let Some(h) = self.tracker.commit_position()
            && let Some((size, out)) = self.staged.remove(&h)
        {
            outputs.extend(out);
            self.complete(h, size);
        }
        Some(Release { outputs, position: self.tracker.commit_position() })
    }

    /// The position the consumer may commit: the next offset to consume,
    /// below which every record is done and acknowledged (or released).
    pub(crate) fn position(&self) -> Option<i64> {
        self.tracker.commit_position()
    }

    /// Whether the partition wants to be paused.
    pub(crate) fn paused(&self) -> bool {
        self.paused
    }

    /// Records finished since the last call.
    pub(crate) fn take_finished(&mut self) -> u64 {
        std::mem::take(&mut self.finished)
    }

    /// Records received and not complete.
    pub(crate) fn incomplete(&self) -> usize {
        self.tracker.incomplete()
    }

    /// Offsets past the retry cap now.
    pub(crate) fn stalled(&self) -> usize {
        self.stalled.len()
    }

    /// For the logs: queued, running, awaiting acknowledgement, retrying.
    pub(crate) fn counts(&self) -> [usize; 4] {
        [self.lanes.queued() + self.ordered.queued(), self.running, self.awaiting.len(), self.backoffs + self.resends]
    }

    /// Whether a drain is through. Per-record handlers finish everything
    /// received (by the deadline): with keys interleaved in a partition,
    /// stopping short would leave later records of some keys done above
    /// the watermark, to be processed again by the next owner. Batch
    /// handlers take records in offset order, so what is done lies below
    /// what is not started: the running unit and its acknowledgements are
    /// enough (its retries are left to the next owner).
    pub(crate) fn drained(&self) -> bool {
        match self.rules.batching {
            Batching::PerRecord => self.tracker.incomplete() == 0,
            Batching::Batch { .. } => {
                self.running == 0
                    && !self.releasable()
                    && self.awaiting.is_empty()
                    && self.resends == 0
                    && self.backoffs == 0
            }
        }
    }

    /// A batch handler's drain retries nothing: a retry that got through
    /// while another key's still waited would leave done records above the
    /// watermark, published again by the next owner, which instead runs the
    /// failed records itself. The worker drops its backoffs with this.
    pub(crate) fn drop_backoffs(&mut self) {
        self.backoffs = 0;
    }

    /// At the drain deadline: nothing more starts or retries (the worker
    /// drops its running units and backoffs); only acknowledgements of what
    /// was enqueued still count.
    pub(crate) fn abandon_running(&mut self) {
        self.running = 0;
        self.backoffs = 0;
    }

    /// Whether any group of outputs awaits its acknowledgement.
    pub(crate) fn awaiting_acks(&self) -> bool {
        !self.awaiting.is_empty()
    }

    fn send_group(&mut self, outputs: Vec<Output>, records: Vec<(i64, usize)>, attempts: u32) -> Action {
        self.next_group += 1;
        let id = self.next_group;
        self.awaiting.insert(id, Awaiting { records, attempts });
        Action::Send { id, outputs }
    }

    /// Counts a failed attempt; at the cap the partition stalls.
    fn failed_attempt(
        &mut self,
        offset: i64,
        attempts: u32,
        dependency: &'static str,
        error: String,
        actions: &mut Vec<Action>,
    ) {
        let stalled = attempts == self.rules.attempts_before_stall;
        if stalled {
            self.stalled.push(offset);
            self.check_budget();
        }
        actions.push(Action::Failed { offset, attempts, dependency, error, stalled });
    }

    /// The record at `offset` got through: undo its stall, if any.
    fn unstall(&mut self, offset: i64, actions: &mut Vec<Action>) {
        self.attempts.remove(&offset);
        if let Some(i) = self.stalled.iter().position(|o| *o == offset) {
            self.stalled.swap_remove(i);
            actions.push(Action::Unstalled { offset });
            self.check_budget();
        }
    }

    fn check_budget(&mut self) {
        let window = self.tracker.window_len();
        self.paused = self.rules.budget.paused(self.bytes, window, !self.stalled.is_empty(), self.paused);
    }

    fn complete(&mut self, offset: i64, size: usize) {
        if let Err(e) = self.tracker.complete(offset) {
            tracing::error!(error = %e, "Completion for an offset not in flight");
            return;
        }
        self.finished += 1;
        self.bytes = self.bytes.saturating_sub(size);
        self.check_budget();
    }
}

#[cfg(test)]
mod tests;
