//! A job's ticker on one replica: sleep to the next tick, claim it, act on
//! the claim, and watch a tick lost to a peer in case its run dies.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::time::Duration;

use super::{Inner, JobEntry};
use crate::config::Overlap;
use crate::metrics::{Effect, Op};
use crate::model::{self, Intent, LostReason, MissReason, SkipReason, Tick};
use crate::store::history::texts;
use crate::store::{ClaimOutcome, ClaimRequest, Claimed, Resolved, RunRecord, StoreResult};

/// A sleeping ticker looks at the wall clock at least this often, so a
/// clock step or a suspended host is noticed.
pub(super) const WALL_CHECK: Duration = Duration::from_secs(5);
/// Missed ticks are counted one by one up to this many, then estimated.
const GAP_COUNT_CAP: u64 = 10_000;
/// Claim attempts when peers keep moving the job on meanwhile.
const CLAIM_TRIES: usize = 3;

impl Inner {
    /// How long this replica waits after `tick_ms` before claiming it.
    fn jitter(&self, entry: &JobEntry, tick_ms: i64) -> i64 {
        let jitter = entry.settings.jitter.as_millis() as u64;
        if jitter == 0 {
            return 0;
        }
        let mut h = DefaultHasher::new();
        (&self.config.instance_id, entry.job.name(), tick_ms).hash(&mut h);
        (h.finish() % jitter) as i64
    }

    /// Publishes the job's stored state, read once when its ticker starts.
    async fn load_state(&self, job: &str) {
        self.metrics.init_job(job);
        match self.store.job_state(job).await {
            Ok(state) => {
                self.metrics.set_paused(job, state.paused);
                if let Some(ms) = state.last_success_ms {
                    self.metrics.set_last_success(job, ms);
                }
            }
            Err(e) => {
                tracing::warn!(job, error = %e, "Could not read the job's state; its metrics fill in at its next claim")
            }
        }
    }

    pub(super) async fn tick_loop(self: Arc<Self>, entry: Arc<JobEntry>) {
        let schedule = &entry.settings.schedule;
        let job = entry.job.name();
        let mut stopping = self.stopping.subscribe();
        self.load_state(job).await;
        // A tick that came due while no replica ran may still be in its
        // window; a job that never ran before starts with its next tick.
        let mut cursor = self.now_ms();
        let has_run = match self.store.last_tick(job).await {
            Ok(last) => last.is_some(),
            Err(e) => {
                tracing::warn!(job, error = %e, "Could not read the job's last tick; a tick still in its window is left to peers");
                false
            }
        };
        if let Some(latest) = schedule.latest_at_or_before(cursor)
            && has_run
            && cursor - latest <= entry.settings.start_window().as_millis() as i64
        {
            self.attempt(&entry, latest).await;
        }
        loop {
            let Some(next) = schedule.next_after(cursor) else {
                tracing::info!(job, "Schedule has no further ticks");
                return;
            };
            self.metrics.next_tick.with_label_values(&[job]).set(next as f64 / 1000.0);
            let wake = next + self.jitter(&entry, next);
            loop {
                let left = wake - self.now_ms();
                if left <= 0 {
                    break;
                }
                let nap = Duration::from_millis(left as u64).min(WALL_CHECK);
                tokio::select! {
                    () = tokio::time::sleep(nap) => {}
                    _ = stopping.wait_for(|s| *s) => return,
                }
            }
            if *stopping.borrow() {
                return;
            }
            // The latest due tick: later than `next` if this replica slept
            // through several (the ones between are recorded as missed by
            // whoever claims next).
            let due = schedule.latest_at_or_before(self.now_ms()).unwrap_or(next).max(next);
            cursor = due;
            self.attempt(&entry, due).await;
        }
    }

    /// Claims `tick`; for a scheduled tick, with the record of the ticks
    /// nobody claimed since `observed_last`.
    pub(super) async fn claim(
        &self,
        entry: &JobEntry,
        tick: Tick,
        intent: Intent,
        observed_last: Option<i64>,
    ) -> StoreResult<Claimed> {
        let settings = &entry.settings;
        let now = self.now_ms();
        let skip_detail = match intent {
            Intent::Skip(SkipReason::Late) => format!(
                "claimed {} ms after its time, past the start window ({} ms, misfire policy {:?})",
                now - tick.ms,
                settings.start_window().as_millis(),
                settings.misfire
            ),
            Intent::Skip(SkipReason::Paused) => texts::PAUSED_BY_CONFIG.into(),
            Intent::Skip(SkipReason::Overlap) => texts::OVERLAP.into(),
            Intent::Run => String::new(),
        };
        let gap =
            if tick.manual { None } else { model::gap(&settings.schedule, observed_last, tick.ms, GAP_COUNT_CAP) };
        let request = ClaimRequest {
            job: entry.job.name().into(),
            tick,
            owner: self.config.instance_id.clone(),
            observed_last,
            gap: gap.map(|g| RunRecord::missed(entry.job.name(), g, &self.config.instance_id, now)),
            claim_ttl: settings.claim_keep(),
            lease_ttl: self.config.lease_ttl,
            intent,
            buffer_one: settings.overlap == Overlap::BufferOne,
            skip_detail,
            now_ms: now,
        };
        self.store.claim(&request).await
    }

    /// Tries to claim scheduled tick `tick_ms` and acts on the outcome.
    async fn attempt(self: &Arc<Self>, entry: &Arc<JobEntry>, tick_ms: i64) {
        let job = entry.job.name();
        let late = self.now_ms() - tick_ms - self.jitter(entry, tick_ms);
        let intent = model::intent(entry.settings.paused, late, entry.settings.start_window());
        let tick = Tick::scheduled(tick_ms);
        let _busy = self.busy();
        let failed = |e: &dyn std::fmt::Display| {
            self.metrics.error(job, Op::Claim);
            tracing::warn!(job, tick_ms, error = %e, "Claim failed (Redis); the next claim records the tick as missed");
        };
        let mut observed = match self.store.last_tick(job).await {
            Ok(last) => last,
            Err(e) => return failed(&e),
        };
        // A peer may move the job on between the read and the claim; the
        // claim then says so and is tried again with what it saw.
        for _ in 0..CLAIM_TRIES {
            match self.claim(entry, tick, intent, observed).await {
                Ok(Claimed { outcome: ClaimOutcome::Lost(LostReason::Retry), previous_tick, .. }) => {
                    observed = previous_tick;
                }
                Ok(claimed) => {
                    if !matches!(claimed.outcome, ClaimOutcome::Lost(_))
                        && let Some(gap) =
                            model::gap(&entry.settings.schedule, claimed.previous_tick, tick_ms, GAP_COUNT_CAP)
                    {
                        self.metrics.missed(job, MissReason::Unclaimed, gap.count);
                        tracing::warn!(
                            job,
                            count = gap.count,
                            first = gap.first,
                            last = gap.last,
                            "Ticks nobody claimed in time"
                        );
                    }
                    Arc::clone(self).after_claim(entry, tick, claimed);
                    return;
                }
                Err(e) => return failed(&e),
            }
        }
        self.metrics.error(job, Op::Claim);
        tracing::warn!(job, tick_ms, "Peers kept moving the job on during the claim; left to them");
    }

    /// Counts and logs a run found dead by one of this replica's calls.
    pub(super) fn found_dead(&self, job: &str, claimed_tick: Tick, dead: &Resolved) {
        self.metrics.abandoned.with_label_values(&[job, Effect::of(dead.applied).as_str()]).inc();
        // A dead run of an older tick, found by a scheduled claim of a newer
        // one, can no longer be taken over: that tick is missed.
        if dead.applied == 0 && !dead.manual && !claimed_tick.manual && dead.tick_ms < claimed_tick.ms {
            self.metrics.missed(job, MissReason::Abandoned, 1);
        }
        tracing::warn!(
            job,
            tick_ms = dead.tick_ms,
            owner = dead.owner,
            token = dead.token,
            applied = dead.applied,
            "A run stopped without recording its end; recorded as abandoned"
        );
    }

    pub(super) fn after_claim(self: Arc<Self>, entry: &Arc<JobEntry>, tick: Tick, claimed: Claimed) {
        let job = entry.job.name();
        if let Some(ms) = claimed.last_success_ms {
            self.metrics.set_last_success(job, ms);
        }
        if let Some(dead) = &claimed.resolved {
            self.found_dead(job, tick, dead);
        }
        let entry = Arc::clone(entry);
        match claimed.outcome {
            ClaimOutcome::Run { token, takeover } => {
                self.metrics.set_paused(job, false);
                let busy = self.busy();
                tokio::spawn(self.execute(busy, entry, tick, token, takeover));
            }
            ClaimOutcome::Queued => {
                let busy = self.busy();
                tokio::spawn(self.wait_queued(busy, entry, tick));
            }
            ClaimOutcome::Skipped(SkipReason::Late) => self.metrics.missed(job, MissReason::Late, 1),
            ClaimOutcome::Skipped(reason) => {
                if reason == SkipReason::Paused {
                    self.metrics.set_paused(job, true);
                }
                self.metrics.skipped(job, reason);
            }
            ClaimOutcome::Lost(LostReason::Applied) => {
                tracing::info!(
                    job,
                    tick_ms = tick.ms,
                    "The tick's effect was applied by a run that died; not run again"
                );
            }
            ClaimOutcome::Lost(reason) => {
                self.metrics.claims_contended.with_label_values(&[job]).inc();
                // A replica configured paused never takes a tick over.
                if reason == LostReason::Held && !tick.manual && !entry.settings.paused {
                    tokio::spawn(self.watch_for_takeover(entry, tick));
                }
            }
        }
    }

    /// After losing tick `tick` to a peer: until its start window closes,
    /// look again every half lease, and take it over if the peer's run died
    /// before applying anything (the claim asks the ledger).
    async fn watch_for_takeover(self: Arc<Self>, entry: Arc<JobEntry>, tick: Tick) {
        let closes = tick.ms + entry.settings.start_window().as_millis() as i64;
        let every = (self.config.lease_ttl / 2).max(Duration::from_millis(100));
        let mut stopping = self.stopping.subscribe();
        loop {
            tokio::select! {
                () = tokio::time::sleep(every) => {}
                _ = stopping.wait_for(|s| *s) => return,
            }
            if self.now_ms() > closes {
                return;
            }
            let _busy = self.busy();
            match self.claim(&entry, tick, Intent::Run, Some(tick.ms)).await {
                Ok(Claimed { outcome: ClaimOutcome::Lost(LostReason::Held), .. }) => {}
                Ok(claimed) => {
                    if matches!(claimed.outcome, ClaimOutcome::Run { .. }) {
                        tracing::warn!(job = entry.job.name(), tick_ms = tick.ms, "Taking over a tick whose run died");
                    }
                    // Resolved or superseded meanwhile: nothing to act on
                    // (this replica's contention was counted at its claim).
                    if !matches!(claimed.outcome, ClaimOutcome::Lost(r) if r != LostReason::Applied) {
                        Arc::clone(&self).after_claim(&entry, tick, claimed);
                    }
                    return;
                }
                Err(e) => {
                    self.metrics.error(entry.job.name(), Op::Claim);
                    tracing::warn!(job = entry.job.name(), tick_ms = tick.ms, error = %e, "Takeover check failed (Redis)");
                }
            }
        }
    }
}
