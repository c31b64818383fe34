//! What a worker does with what its partition decides: units started on
//! permits, outputs enqueued as groups, timers for backoffs and resends,
//! exactly-once releases into the open transaction, metrics and logs, and
//! the slot the consumer thread reads.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use futures_util::FutureExt;
use sluice_core::clock::now_ms;
use tokio::sync::OwnedSemaphorePermit;

use super::{Unit, Worker};
use crate::handler::{Batching, HandleError, Handled, Handler, Record, in_key_order};
use crate::metrics::DeadLetterKind;
use crate::output::Group;
use crate::partition::Action;
use crate::retry::jitter;

impl<H: Handler> Worker<H> {
    /// Starts units while the partition has records ready and permits are left.
    pub(super) fn dispatch(&mut self) {
        let batching = self.state.batching();
        while self.state.can_start() {
            let Some(permit) = self.spare.take().or_else(|| self.shared.permits.clone().try_acquire_owned().ok())
            else {
                return;
            };
            let records = self.state.start_unit();
            if records.is_empty() {
                self.spare = Some(permit);
                return;
            }
            let handler = self.shared.handler.clone();
            self.running.push(Box::pin(run_unit(handler, records, batching, permit)));
        }
    }

    /// A unit is through its handler: the partition decides, this carries it out.
    pub(super) fn on_unit(&mut self, unit: Unit) {
        self.shared.metrics.handle_seconds.observe(unit.started.elapsed().as_secs_f64());
        let actions = self.state.unit_done(unit.records, unit.results);
        self.apply(actions);
        self.release();
    }

    pub(super) fn on_acknowledged(&mut self, id: u64) {
        let Some(group) = self.groups.remove(&id) else { return };
        let actions = self.state.acknowledged(id, group.take_failed());
        self.apply(actions);
    }

    /// Exactly-once mode: what the partition can release goes into the open
    /// transaction; while none is open it waits.
    pub(super) fn release(&mut self) {
        let Some(txn) = self.shared.txn.clone() else { return };
        if !self.state.releasable() {
            return;
        }
        let Some(mut open) = txn.open() else { return };
        if let Some(release) = self.state.release() {
            open.send(&self.owner, release.outputs, release.position);
        }
    }

    /// Carries out the partition's actions, in order.
    pub(super) fn apply(&mut self, actions: Vec<Action>) {
        let now = now_ms();
        for action in actions {
            match action {
                Action::Send { id, outputs } => {
                    let group = Group::new(id, &outputs, self.groups_tx.clone());
                    // Registered first: the acknowledgement may come before `enqueue` returns.
                    self.groups.insert(id, group.clone());
                    let Some(kafka) = &self.shared.kafka else {
                        unreachable!(
                            "with exactly-once outputs a partition stages its outputs for the transaction, never sends a group"
                        )
                    };
                    kafka.enqueue(&outputs, &group);
                }
                Action::Backoff { records, attempts } => {
                    let delay = self.shared.retry.delay(attempts, jitter());
                    self.backoffs.push(Box::pin(async move {
                        tokio::time::sleep(delay).await;
                        records
                    }));
                }
                Action::Resend { outputs, records, attempts } => {
                    let delay = self.shared.retry.delay(attempts, jitter());
                    self.resends.push(Box::pin(async move {
                        tokio::time::sleep(delay).await;
                        (outputs, records, attempts)
                    }));
                }
                Action::Done { offset, outcome, dead_letter, event_time_ms } => {
                    self.count(outcome);
                    let m = &self.shared.metrics;
                    if let Some(kind) = dead_letter {
                        m.dead_letters.with_label_values(&[kind]).inc();
                        tracing::debug!(partition = self.partition, offset, kind, "Dead-lettered");
                    }
                    if let Some(t) = event_time_ms {
                        m.end_to_end_seconds.observe(now.saturating_sub(t).max(0) as f64 / 1000.0);
                    }
                }
                Action::Failed { offset, attempts, dependency, error, stalled } => {
                    self.failed(offset, attempts, dependency, &error, stalled)
                }
                Action::KeyDeadLettered { offset, records, error, full } => {
                    self.key_dead_lettered(offset, records, &error, full)
                }
                Action::Unstalled { offset } => {
                    tracing::info!(partition = self.partition, offset, "The stalled record got through; resuming");
                    self.shared.health.stalled.fetch_sub(1, Ordering::Relaxed);
                    self.shared.metrics.stalled.dec();
                }
                Action::OutOfOrder(e) => {
                    // Loud, because the commit position may then pass it.
                    tracing::error!(partition = self.partition, error = %e, "Offset out of order; record ignored");
                }
            }
        }
        self.record_dead_keys();
    }

    /// The partition's dead keys into the book the commits read, as soon as
    /// they change: before any release into a transaction or position
    /// published after this step.
    pub(super) fn record_dead_keys(&mut self) {
        if let Some(dead) = self.state.take_dead_keys() {
            self.shared.dead_book.record(self.partition, self.owner.epoch, dead);
        }
    }

    /// A failed attempt counted; at the cap the partition pauses and the
    /// service reports not ready (the record keeps retrying).
    fn failed(&mut self, offset: i64, attempts: u32, dependency: &'static str, error: &str, stalled: bool) {
        self.shared.metrics.retries.with_label_values(&[dependency]).inc();
        if !stalled {
            tracing::debug!(partition = self.partition, offset, attempt = attempts, error, "Retrying");
            return;
        }
        self.shared.health.stalled.fetch_add(1, Ordering::Relaxed);
        self.shared.metrics.stalled.inc();
        tracing::error!(
            partition = self.partition,
            offset,
            attempts,
            error,
            "Record keeps failing; pausing its partition and reporting not ready (it keeps retrying)"
        );
    }

    /// A key's retries ran out under the dead-letter-key policy.
    fn key_dead_lettered(&mut self, offset: i64, records: usize, error: &str, full: bool) {
        let partition = self.partition;
        if full {
            tracing::error!(
                partition,
                offset,
                error,
                "Retries ran out, but the commit metadata has no room for another dead key; stalling the partition"
            );
            return;
        }
        tracing::warn!(
            partition,
            offset,
            records,
            error,
            "Retries ran out: the key is dead-lettered from here until a redrive of it (sluice-ops dlq redrive)"
        );
    }

    /// What the partition decided, told to the consumer thread: records
    /// finished, the dead keys and then the position it may commit, whether
    /// to pause.
    pub(super) fn sync(&mut self) {
        self.record_dead_keys();
        let finished = self.state.take_finished();
        if finished > 0 {
            self.slot.add_finished(finished);
        }
        let position = self.state.position();
        if position != self.published
            && let Some(p) = position
        {
            self.slot.set_position(p);
            self.published = position;
        }
        let paused = self.state.paused();
        if paused != self.pause_published {
            self.pause_published = paused;
            self.slot.set_pause(paused);
        }
    }

    fn count(&mut self, outcome: &'static str) {
        match self.outcomes.iter().find(|(o, _)| *o == outcome) {
            Some((_, counter)) => counter.inc(),
            None => {
                let counter = self.shared.metrics.messages.with_label_values(&[outcome]);
                counter.inc();
                self.outcomes.push((outcome, counter));
            }
        }
    }
}

/// Runs one unit through the handler. A panic is a bug reachable from the
/// records: a batch that panics is handled again record by record, and a
/// record that panics is dead-lettered with the reason rather than left to
/// wedge its key.
pub(super) async fn run_unit<H: Handler>(
    handler: Arc<H>,
    records: Vec<Record>,
    batching: Batching,
    permit: OwnedSemaphorePermit,
) -> Unit {
    let started = Instant::now();
    let results = match batching {
        Batching::Batch { .. } if records.len() > 1 => {
            match std::panic::AssertUnwindSafe(handler.handle_batch(&records)).catch_unwind().await {
                Ok(results) => results,
                Err(_) => one_by_one(&*handler, &records).await,
            }
        }
        _ => one_by_one(&*handler, &records).await,
    };
    drop(permit);
    Unit { records, results, started }
}

async fn one_by_one<H: Handler>(handler: &H, records: &[Record]) -> Vec<Result<Handled, HandleError>> {
    in_key_order(records, |record| async move {
        let result = std::panic::AssertUnwindSafe(handler.handle(record)).catch_unwind().await;
        result.unwrap_or_else(|panic| {
            let message = panic
                .downcast_ref::<&str>()
                .map(|s| (*s).to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "handler panicked".to_string());
            Err(HandleError::Invalid { kind: DeadLetterKind::HandlerPanic.as_str(), message })
        })
    })
    .await
}
