//! The driver thread: it ends the open transaction every interval, or at
//! once when a revoke asks, commits (the deliveries awaited, the offsets
//! sent) or aborts and sends again what epochs still owned held, and opens
//! the next one. What each step means is decided by [`super::state`].

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use rdkafka::error::KafkaError;
use rdkafka::producer::Producer;
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};

use super::state::{Closing, Positions, Step, TxnError, Verdict, verdict};
use super::{Transactions, TxnFailed};
use crate::metrics::TxnOutcome;

/// How a transaction ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    /// Nothing was in it: it stays open.
    Empty,
    Committed,
    Aborted,
}

/// The result of one attempt to end a transaction.
enum Ended {
    Committed,
    /// It must be aborted; what it held goes again.
    Abort(String),
    Fatal(String),
}

impl Transactions {
    /// The driver thread: ends a transaction every interval, or at once
    /// when asked; stops after a fatal error or when told to.
    pub(super) fn drive(&self) {
        let mut aborts_in_a_row = 0u32;
        loop {
            // After aborts, the next attempt waits longer (a rebalance the
            // consumer has not caught up with refuses every offset commit
            // until it has), up to 16 intervals.
            let wait = self.settings.interval * 2u32.pow(aborts_in_a_row.min(4));
            let (finals, stop) = {
                let mut requests = self.lock_requests();
                if requests.finals.is_empty() && !requests.stop {
                    requests = self.wake.wait_timeout(requests, wait).unwrap_or_else(|e| e.into_inner()).0;
                }
                (std::mem::take(&mut requests.finals), requests.stop)
            };
            let ending: Vec<i32> = finals
                .iter()
                .filter(|f| !f.cancelled.load(Ordering::Acquire))
                .flat_map(|f| f.partitions.iter().copied())
                .collect();
            let outcome = self.end(&ending);
            aborts_in_a_row = match outcome {
                Ok(Outcome::Aborted) => aborts_in_a_row + 1,
                _ => 0,
            };
            let outcome = outcome.map(|_| ());
            for f in finals {
                let _ = f.reply.send(outcome.clone());
            }
            if outcome.is_err() || stop {
                // Wakes workers waiting for a transaction that will not open.
                self.reopened.send_modify(|n| *n += 1);
                let mut requests = self.lock_requests();
                requests.ended = true;
                let why = TxnFailed(self.failed().unwrap_or_else(|| "the transactions have stopped".into()));
                for f in requests.finals.drain(..) {
                    let _ = f.reply.send(Err(why.clone()));
                }
                return;
            }
        }
    }

    /// Ends the open transaction (commit, or abort and send again), then
    /// opens the next one.
    fn end(&self, ending: &[i32]) -> Result<Outcome, TxnFailed> {
        let closing = {
            // Alone at the gate: every release in progress has finished.
            let _closing = self.gate.write().unwrap_or_else(|e| e.into_inner());
            let mut state = self.lock();
            if let Some(why) = &state.failed {
                return Err(TxnFailed(why.clone()));
            }
            let Some(closing) = state.close() else { return Ok(Outcome::Empty) };
            closing
        };
        let started = Instant::now();
        let ended = match closing.doomed() {
            Some(why) => Ended::Abort(why),
            None => self.commit(&closing, ending),
        };
        let result = match ended {
            Ended::Committed => {
                self.metrics.transactions.with_label_values(&[TxnOutcome::Committed.as_str()]).inc();
                // Committed: a read_committed reader sees every output it held from now.
                let outputs = closing.retained.iter().flat_map(|r| &r.outputs);
                self.metrics.observe_visible(outputs.filter_map(|o| Some((&o.topic, o.event_time_ms?))));
                self.committed_offsets(&closing.dirty, ending);
                self.begin().map(|()| Outcome::Committed)
            }
            Ended::Abort(why) => {
                let outputs = closing.retained.iter().map(|r| r.outputs.len()).sum::<usize>();
                tracing::warn!(reason = %why, outputs, "Aborting the transaction; its work goes again in the next one");
                let reopened = match self.abort() {
                    Ok(()) => self.begin(),
                    // Fenced while aborting (the coordinator already aborted it).
                    Err(e) if !self.stopping() => {
                        tracing::warn!(error = %e, "The abort failed; replacing the transactional producer");
                        self.renew()
                    }
                    Err(e) => Err(e),
                };
                self.reopened_after_abort(reopened, closing, ending)
            }
            // What the transaction held is aborted with the old producer; the
            // work of epochs still owned goes again with a new one.
            Ended::Fatal(why) if !self.stopping() => {
                tracing::warn!(reason = %why, "The transactional producer cannot go on; replacing it");
                self.reopened_after_abort(self.renew(), closing, ending)
            }
            Ended::Fatal(why) => Err(TxnFailed(why)),
        };
        self.metrics.transaction_seconds.observe(started.elapsed().as_secs_f64());
        match result {
            Ok(outcome) => {
                self.lock().open = true;
                self.reopened.send_modify(|n| *n += 1);
                Ok(outcome)
            }
            Err(e) => {
                tracing::error!(error = %e, "Exactly-once outputs cannot go on; the service stops (its open transaction is aborted by the broker)");
                self.lock().failed = Some(e.0.clone());
                Err(e)
            }
        }
    }

    /// An aborted transaction, once the next one is open (`reopened`): what
    /// it held of epochs still owned goes again.
    fn reopened_after_abort(
        &self,
        reopened: Result<(), TxnFailed>,
        closing: Closing,
        ending: &[i32],
    ) -> Result<Outcome, TxnFailed> {
        self.metrics.transactions.with_label_values(&[TxnOutcome::Aborted.as_str()]).inc();
        reopened.map(|()| {
            self.send_again(closing, ending);
            Outcome::Aborted
        })
    }

    /// `sluice_processor_committed_offset` follows what the transaction
    /// committed (the consumer commits nothing itself in this mode, so
    /// librdkafka's statistics never see it move), for the partitions
    /// [`State::shown`] picks.
    fn committed_offsets(&self, dirty: &Positions, ending: &[i32]) {
        let shown = self.lock().shown(dirty, ending);
        for (p, offset) in shown {
            self.metrics.committed_offset.with_label_values(&[&*self.topic, &p.to_string()]).set(offset);
        }
    }

    /// Waits for the deliveries, sends the offsets, commits.
    fn commit(&self, closing: &Closing, ending: &[i32]) -> Ended {
        let dirty = &closing.dirty;
        let deadline = Instant::now() + self.settings.timeout;
        // Not rdkafka's flush, which waits in polls of 100 ms: the
        // producer's own thread serves the deliveries.
        let producer = self.producer();
        while producer.in_flight_count() > 0 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_micros(500));
        }
        // A partition lost while this transaction was closing (its epoch
        // ended after the poison was read) must not commit here: the group
        // coordinator's generation check is the last guard, not the only one.
        if let Some(p) = self.lock().gone(closing, ending) {
            return Ended::Abort(format!("partition {p} was lost while its transaction was ending"));
        }
        if !dirty.is_empty() {
            let Some(group) = self.group.lock().unwrap_or_else(|e| e.into_inner()).clone() else {
                return Ended::Abort("no consumer group metadata yet".into());
            };
            let mut tpl = TopicPartitionList::new();
            for (p, (_, offset)) in dirty {
                let _ = tpl.add_partition_offset(&self.topic, *p, Offset::Offset(*offset));
            }
            (self.stamp)(&tpl);
            let timeout = self.settings.timeout;
            let sent = self.retrying(Step::Offsets, || producer.send_offsets_to_transaction(&tpl, &group, timeout));
            if let Err(ended) = sent {
                return ended;
            }
        }
        match self.retrying(Step::Commit, || producer.commit_transaction(self.settings.timeout)) {
            Ok(()) => Ended::Committed,
            Err(ended) => ended,
        }
    }

    fn abort(&self) -> Result<(), TxnFailed> {
        let timeout = self.settings.timeout;
        let producer = self.producer();
        self.retrying(Step::Abort, || producer.abort_transaction(timeout)).map_err(|ended| match ended {
            Ended::Abort(why) | Ended::Fatal(why) => TxnFailed(format!("abort failed: {why}")),
            Ended::Committed => unreachable!("an abort never commits"),
        })
    }

    /// Runs a transaction call until it succeeds or its error settles the
    /// transaction: fatal (another producer took the id) stops; abortable
    /// aborts. Anything else (the broker unreachable, a timeout) is tried
    /// again with a growing pause, for as long as it lasts: an outage pauses
    /// the outputs (the workers' staged records fill their budgets), it does
    /// not stop the processor. Only a shutdown ends the waiting.
    fn retrying(&self, step: Step, mut call: impl FnMut() -> Result<(), KafkaError>) -> Result<(), Ended> {
        let mut pause = Duration::from_millis(100);
        loop {
            let Err(e) = call() else { return Ok(()) };
            let error = match &e {
                KafkaError::Transaction(t) => {
                    TxnError { fatal: t.is_fatal(), abortable: t.txn_requires_abort(), retriable: t.is_retriable() }
                }
                _ => TxnError::default(),
            };
            let stopping = self.stopping();
            match verdict(step, error, stopping) {
                Verdict::Fatal if stopping && !error.fatal => return Err(Ended::Fatal(format!("{e} (stopping)"))),
                Verdict::Fatal => return Err(Ended::Fatal(e.to_string())),
                Verdict::Abort => return Err(Ended::Abort(e.to_string())),
                Verdict::Retry => {}
            }
            tracing::warn!(?step, error = %e, retry_in_ms = pause.as_millis() as u64, "Transaction call failed; trying again");
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_secs(2));
        }
    }

    fn begin(&self) -> Result<(), TxnFailed> {
        self.producer().begin_transaction().map_err(|e| TxnFailed(format!("begin: {e}")))
    }

    /// After an abort: what [`State::after_abort`] keeps goes into the new
    /// transaction, in the order it was first sent.
    fn send_again(&self, closing: Closing, ending: &[i32]) {
        let again = self.lock().after_abort(closing, ending);
        let mut refused = false;
        for r in &again {
            if let Err(e) = self.enqueue(&r.outputs) {
                tracing::warn!(error = %e, "Output refused again; the next transaction aborts too");
                refused = true;
            }
        }
        self.lock().retain(again, refused);
    }
}
