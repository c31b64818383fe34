//! The rules of `scripts/*.lua` over typed state: one function per script
//! (and `lib.lua`'s helpers as methods of [`Step`]), each run under the
//! store's lock as one atomic step.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use super::WriteModel;
use crate::model::{Intent, LostReason, Outcome, SkipReason, Tick};
use crate::store::history::texts;
use crate::store::keys::{queued_value, skipped_value};
use crate::store::{
    Applied, ClaimOutcome, ClaimRequest, Claimed, FinishRequest, Finished, Queue, Resolved, RunLease, RunRecord, Write,
};

/// A value with an expiry (Unix ms).
#[derive(Debug, Clone)]
pub(super) struct Timed {
    value: String,
    until: i64,
}

/// The run that took the lease and has not recorded its end.
#[derive(Debug, Clone)]
pub(super) struct Open {
    id: String,
    lease: String,
    tick: Tick,
    owner: String,
    token: u64,
}

#[derive(Debug, Default)]
pub(super) struct Ledger {
    run: Option<String>,
    writes: u64,
    replies: HashMap<String, i64>,
}

#[derive(Debug, Default)]
pub(super) struct JobData {
    pub(super) last_tick: Option<i64>,
    pub(super) last_done: Option<i64>,
    pub(super) last_success_ms: Option<i64>,
    pub(super) paused: bool,
    pub(super) paused_reason: String,
    pub(super) open: Option<Open>,
    pub(super) fence: u64,
    pub(super) claims: HashMap<Tick, Timed>,
    pub(super) running: Option<Timed>,
    pub(super) queued: Option<Timed>,
    pub(super) ledgers: HashMap<Tick, Ledger>,
    /// By (score, id): Redis's sorted-set order.
    pub(super) records: BTreeMap<(i64, String), RunRecord>,
}

/// One job's state with the time of the step, and the history's size.
pub(super) struct Step<'a> {
    pub job: &'a mut JobData,
    pub now: i64,
    pub keep: usize,
}

/// A key's value while it lives (Redis keeps a key until its expiry has passed).
pub(super) fn live(t: &Option<Timed>, now: i64) -> Option<&str> {
    t.as_ref().filter(|t| t.until >= now).map(|t| t.value.as_str())
}

pub(super) fn timed(value: impl Into<String>, now: i64, ttl: Duration) -> Timed {
    Timed { value: value.into(), until: now + crate::store::redis::ms(ttl) as i64 }
}

impl Step<'_> {
    pub(super) fn claim(&self, tick: Tick) -> Option<&str> {
        self.job.claims.get(&tick).filter(|c| c.until >= self.now).map(|c| c.value.as_str())
    }

    fn lease_held(&self) -> bool {
        live(&self.job.running, self.now).is_some()
    }

    pub(super) fn record(&mut self, rec: RunRecord) {
        let key = (rec.tick_ms, rec.id());
        self.job.records.insert(key, rec);
        let excess = self.job.records.len().saturating_sub(self.keep);
        let open_tick = self.job.open.as_ref().map(|o| o.tick);
        for _ in 0..excess {
            if let Some((_, old)) = self.job.records.pop_first()
                && Some(old.tick()) != open_tick
            {
                self.job.ledgers.remove(&old.tick());
            }
        }
    }

    fn remove_record(&mut self, rec: &RunRecord) {
        self.job.records.remove(&(rec.tick_ms, rec.id()));
    }

    fn mark_done(&mut self, ms: i64) {
        if self.job.last_done.is_none_or(|d| ms > d) {
            self.job.last_done = Some(ms);
        }
    }

    /// `lib.lua`'s `applied_by`: the writes of `tick` the run holding `lease` applied.
    fn applied_by(&self, tick: Tick, lease: &str) -> u64 {
        match self.job.ledgers.get(&tick) {
            Some(l) if l.run.as_deref() == Some(lease) => l.writes,
            _ => 0,
        }
    }

    /// `lib.lua`'s `resolve_open`.
    fn resolve_open(&mut self) -> Option<Resolved> {
        if self.job.open.is_none() || self.lease_held() {
            return None;
        }
        let open = self.job.open.take()?;
        let applied = self.applied_by(open.tick, &open.lease);
        if let Some(rec) = self.job.records.get_mut(&(open.tick.ms, open.id.clone()))
            && rec.outcome == Outcome::Running
        {
            rec.outcome = Outcome::Abandoned;
            rec.applied = applied;
            rec.reason = if applied > 0 { texts::ABANDONED_APPLIED } else { texts::ABANDONED_NONE }.into();
        }
        if applied > 0 && !open.tick.manual {
            self.mark_done(open.tick.ms);
        }
        Some(Resolved {
            tick_ms: open.tick.ms,
            manual: open.tick.manual,
            owner: open.owner,
            token: open.token,
            applied,
        })
    }

    /// `lib.lua`'s `take_lease` (the token never below the run's start).
    fn take_lease(&mut self, mut rec: RunRecord, owner: &str, lease_ttl: Duration, claim_ttl: Duration) -> u64 {
        self.job.fence = (self.job.fence + 1).max(u64::try_from(rec.started_ms).unwrap_or(0));
        let token = self.job.fence;
        let lease = format!("{owner}:{token}");
        let tick = rec.tick();
        self.job.running = Some(timed(lease.clone(), self.now, lease_ttl));
        self.job.claims.insert(tick, timed(lease.clone(), self.now, claim_ttl));
        rec.token = token;
        rec.outcome = Outcome::Running;
        let id = rec.id();
        self.record(rec);
        self.job.open = Some(Open { id, lease, tick, owner: owner.into(), token });
        token
    }

    /// Resolves `tick` as not run, with `outcome` and `reason`.
    fn skip(&mut self, req: &ClaimRequest, outcome: Outcome, detail: &str) {
        self.job.claims.insert(req.tick, timed(skipped_value(&req.owner), self.now, req.claim_ttl));
        if !req.tick.manual {
            self.mark_done(req.tick.ms);
        }
        self.record(RunRecord::resolved_unrun(&req.job, req.tick, &req.owner, outcome, detail, req.now_ms));
    }
}

/// `claim.lua`, up to the point where the claim moves the job on: `Err`
/// with the reply if the attempt ends there; `Ok(takeover)` otherwise.
fn claim_checks(s: &mut Step<'_>, req: &ClaimRequest, resolved: &mut Option<Resolved>) -> Result<bool, ClaimOutcome> {
    let (t, last, done) = (req.tick, s.job.last_tick, s.job.last_done);
    let lost = |r| Err(ClaimOutcome::Lost(r));
    let Some(current) = s.claim(t).map(str::to_string) else {
        if !t.manual {
            if last.is_some_and(|l| t.ms < l) {
                return lost(LostReason::Superseded);
            }
            if last == Some(t.ms) && done.is_some_and(|d| d >= t.ms) {
                return lost(LostReason::Done);
            }
            if last != req.observed_last {
                return lost(LostReason::Retry);
            }
            if last == Some(t.ms) && s.job.ledgers.get(&t).is_some_and(|l| l.run.is_some()) {
                *resolved = s.resolve_open();
                s.mark_done(t.ms);
                return lost(LostReason::Applied);
            }
        }
        return Ok(false);
    };
    if t.manual {
        return lost(LostReason::Held);
    }
    let mark = current.rsplit(':').next().unwrap_or_default();
    if done.is_some_and(|d| d >= t.ms) || mark == "s" {
        return lost(LostReason::Done);
    }
    if last.is_some_and(|l| t.ms < l) {
        return lost(LostReason::Superseded);
    }
    if mark.starts_with('q') {
        if live(&s.job.queued, s.now) == Some(current.as_str()) {
            return lost(LostReason::Held);
        }
        let waiter = &current[..current.len() - mark.len() - 1];
        let id = RunRecord::new(&req.job, t, waiter, Outcome::Queued, 0).id();
        if let Some(rec) = s.job.records.get_mut(&(t.ms, id)) {
            (rec.outcome, rec.reason) = (Outcome::Abandoned, texts::ABANDONED_QUEUED.into());
        }
    } else if live(&s.job.running, s.now) == Some(current.as_str()) {
        return lost(LostReason::Held);
    } else {
        *resolved = s.resolve_open();
        if s.job.ledgers.get(&t).is_some_and(|l| l.run.is_some()) {
            s.mark_done(t.ms);
            return lost(LostReason::Applied);
        }
    }
    Ok(true)
}

/// `claim.lua`.
pub(super) fn claim(s: &mut Step<'_>, req: &ClaimRequest) -> Claimed {
    let (previous_tick, last_success_ms) = (s.job.last_tick, s.job.last_success_ms);
    let mut resolved = None;
    let outcome = match claim_checks(s, req, &mut resolved) {
        Err(outcome) => outcome,
        Ok(takeover) => claim_moves_on(s, req, takeover, &mut resolved),
    };
    Claimed { outcome, previous_tick, last_success_ms, resolved }
}

fn claim_moves_on(
    s: &mut Step<'_>,
    req: &ClaimRequest,
    takeover: bool,
    resolved: &mut Option<Resolved>,
) -> ClaimOutcome {
    let t = req.tick;
    if !t.manual && s.job.last_tick.is_none_or(|l| t.ms > l) {
        s.job.last_tick = Some(t.ms);
        if let Some(gap) = &req.gap {
            s.record(gap.clone());
        }
    }
    if resolved.is_none() {
        *resolved = s.resolve_open();
    }
    if s.job.paused {
        s.skip(req, Outcome::Skipped, texts::PAUSED);
        return ClaimOutcome::Skipped(SkipReason::Paused);
    }
    if let Intent::Skip(reason) = req.intent {
        s.skip(req, reason.outcome(), &req.skip_detail);
        return ClaimOutcome::Skipped(reason);
    }
    if s.lease_held() || live(&s.job.queued, s.now).is_some() {
        if req.buffer_one && live(&s.job.queued, s.now).is_none() {
            let value = queued_value(&req.owner, t);
            s.job.queued = Some(timed(value.clone(), s.now, req.lease_ttl));
            s.job.claims.insert(t, timed(value, s.now, req.claim_ttl));
            let rec = RunRecord {
                reason: texts::QUEUED.into(),
                ..RunRecord::new(&req.job, t, &req.owner, Outcome::Queued, req.now_ms)
            };
            s.record(rec);
            return ClaimOutcome::Queued;
        }
        s.skip(req, Outcome::Skipped, texts::OVERLAP);
        return ClaimOutcome::Skipped(SkipReason::Overlap);
    }
    let mut rec = RunRecord::new(&req.job, t, &req.owner, Outcome::Running, req.now_ms);
    if takeover {
        rec.reason = texts::TAKEOVER.into();
    }
    let token = s.take_lease(rec, &req.owner, req.lease_ttl, req.claim_ttl);
    ClaimOutcome::Run { token, takeover }
}

/// `start_queued.lua`.
pub(super) fn start_queued(s: &mut Step<'_>, rec: RunRecord, claim_ttl: Duration, lease_ttl: Duration) -> Queue {
    let (t, owner) = (rec.tick(), rec.owner.clone());
    let current = s.claim(t).map(str::to_string);
    let running = live(&s.job.running, s.now).map(str::to_string);
    if let (Some(c), Some(r)) = (&current, &running)
        && c == r
        && let Some(token) = c.strip_prefix(&format!("{owner}:")).and_then(|t| t.parse().ok())
    {
        return Queue::Started { token, resolved: None };
    }
    let mine = queued_value(&owner, t);
    if live(&s.job.queued, s.now) != Some(mine.as_str()) || current.as_deref() != Some(mine.as_str()) {
        return Queue::Lost;
    }
    let queued_record = RunRecord { outcome: Outcome::Queued, ..rec.clone() };
    if s.job.paused {
        s.job.queued = None;
        s.job.claims.insert(t, timed(skipped_value(&owner), s.now, claim_ttl));
        if !t.manual {
            s.mark_done(t.ms);
        }
        s.remove_record(&queued_record);
        let skipped = RunRecord::resolved_unrun(
            &rec.job,
            t,
            &owner,
            Outcome::Skipped,
            texts::PAUSED_WHILE_QUEUED,
            rec.started_ms,
        );
        s.record(skipped);
        return Queue::Paused;
    }
    if running.is_some() {
        if let Some(q) = &mut s.job.queued {
            q.until = s.now + crate::store::redis::ms(lease_ttl) as i64;
        }
        if let Some(c) = s.job.claims.get_mut(&t) {
            c.until = s.now + crate::store::redis::ms(claim_ttl) as i64;
        }
        return Queue::Waiting;
    }
    let resolved = s.resolve_open();
    s.job.queued = None;
    s.remove_record(&queued_record);
    let token = s.take_lease(rec, &owner, lease_ttl, claim_ttl);
    Queue::Started { token, resolved }
}

/// `fenced.lua`, with the job's script replaced by its model.
pub(super) fn apply(s: &mut Step<'_>, lease: &RunLease, write: &Write, model: &WriteModel) -> Applied {
    let value = lease.value();
    let ledger = s.job.ledgers.get(&lease.tick);
    if let Some(reply) =
        ledger.filter(|l| l.run.as_deref() == Some(value.as_str())).and_then(|l| l.replies.get(&write.id))
    {
        return Applied::Already(*reply);
    }
    if lease.token < s.job.fence {
        return Applied::Superseded;
    }
    if live(&s.job.running, s.now) != Some(value.as_str()) {
        return Applied::LeaseLost;
    }
    let ledger = s.job.ledgers.entry(lease.tick).or_default();
    if ledger.run.as_deref().is_some_and(|r| r != value) {
        return Applied::OtherRun;
    }
    let reply = model(lease, write);
    ledger.run = Some(value);
    ledger.replies.insert(write.id.clone(), reply);
    ledger.writes += 1;
    Applied::Written(reply)
}

/// `finish.lua`.
pub(super) fn finish(s: &mut Step<'_>, end: &FinishRequest) -> Finished {
    let (lease, value) = (&end.lease, end.lease.value());
    let applied = s.applied_by(lease.tick, &value);
    let mut rec = end.record.clone();
    if let Some(previous) = s.job.records.get(&(rec.tick_ms, rec.id()))
        && !matches!(previous.outcome, Outcome::Running | Outcome::Abandoned)
    {
        return Finished { outcome: previous.outcome, applied };
    }
    rec.applied = applied;
    if lease.token < s.job.fence {
        if rec.outcome == Outcome::Succeeded {
            (rec.outcome, rec.reason) = (Outcome::LostClaim, texts::SUPERSEDED.into());
        }
        let outcome = rec.outcome;
        s.record(rec);
        return Finished { outcome, applied };
    }
    if live(&s.job.running, s.now) == Some(value.as_str()) {
        s.job.running = None;
    }
    if s.job.open.as_ref().is_some_and(|o| o.lease == value) {
        s.job.open = None;
    }
    if rec.outcome != Outcome::Cancelled || applied > 0 {
        if !lease.tick.manual {
            s.mark_done(lease.tick.ms);
        }
        s.job.claims.insert(lease.tick, timed(value, s.now, end.claim_keep));
    }
    if rec.outcome == Outcome::Succeeded {
        s.job.last_success_ms = Some(rec.ended_ms);
    }
    let outcome = rec.outcome;
    s.record(rec);
    Finished { outcome, applied }
}
