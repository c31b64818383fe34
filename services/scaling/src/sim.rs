//! A dry run of a policy on a trace: a consumer group modelled second by second, KEDA and
//! the HPA deciding on what they would read of it, their replicas feeding back into it.
//!
//! The model (settings in [`Model`], measured from this system — see docs/autoscaling.md):
//! - the produce rate is the trace's, spread evenly over the partitions;
//! - each ready pod consumes at most `per_pod_rate` records/s, shared between the partitions
//!   it holds (round robin, as the cooperative assignor spreads them), a partition never
//!   faster than its pod's share;
//! - every change of the ready pod count is a rebalance: no partition is consumed for
//!   `rebalance_pause_s`; a pod asked for is ready `startup_s` later, one removed stops at once;
//! - the processors commit what they consumed every `commit_interval_s` (the processor's
//!   `COMMIT_INTERVAL_MS`, 1 s): the lag and time lag that sluice-lag and KEDA read — and
//!   that the samples show, as a dashboard would — are the committed ones, so a group that
//!   keeps up still shows about a commit interval of records;
//! - the time lag is the age of each partition's oldest uncommitted record.
//!
//! The deciders: sluice-lag polls every `lag_poll_s`; Sluice's scaler decides from its
//! newest poll; KEDA's kafka trigger reads the offsets at each HPA sync; KEDA's operator polls
//! every `pollingInterval` (activation, scale to zero); the HPA syncs every 15 s
//! ([`crate::hpa`], the same code `services/scaling/conformance/hpa` holds to Kubernetes' controller).

use std::collections::VecDeque;

use serde::Serialize;

use crate::engine::Engine;
use crate::keda::{OperatorState, PartitionOffsets};
use crate::rules::{GroupInput, PartitionInput};
use crate::trace::Trace;
use crate::values::Policy;

/// The consumer group and its surroundings.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Model {
    pub per_pod_rate: f64,
    pub rebalance_pause_s: f64,
    pub startup_s: f64,
    /// sluice-lag's poll interval.
    pub lag_poll_s: f64,
    /// The HPA's sync period.
    pub sync_s: f64,
    /// How often the consumers commit their positions, seconds (0: at once).
    pub commit_interval_s: f64,
    /// The time-lag objective the summary counts against.
    pub objective_s: f64,
}

/// One second of the run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Sample {
    pub t_s: f64,
    pub produce_rate: f64,
    pub consume_rate: f64,
    pub lag: f64,
    pub time_lag_s: f64,
    /// What the HPA (or KEDA's operator) last asked for.
    pub desired: i32,
    pub ready: i32,
    pub paused: bool,
}

/// The run in figures.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Summary {
    pub policy: String,
    pub trace: String,
    pub peak_lag: f64,
    pub peak_time_lag_s: f64,
    pub seconds_over_objective: f64,
    pub objective_s: f64,
    pub rebalances: u32,
    pub replica_minutes: f64,
    pub peak_replicas: i32,
    pub final_lag: f64,
}

/// One partition: its unconsumed records in arrival order, (second produced, count).
#[derive(Debug, Clone, Default)]
struct Partition {
    queue: VecDeque<(f64, f64)>,
    produced: f64,
    consumed: f64,
    /// The committed position and when it was committed.
    committed: f64,
    committed_at: f64,
}

impl Partition {
    fn lag(&self) -> f64 {
        self.queue.iter().map(|(_, n)| n).sum()
    }

    fn age(&self, now: f64) -> f64 {
        self.queue.front().map_or(0.0, |(t, _)| (now - t).max(0.0))
    }

    /// The lag a reader of the committed offset sees.
    fn committed_lag(&self) -> f64 {
        (self.produced - self.committed).max(0.0)
    }

    /// The age of the oldest uncommitted record: consumed ones wait for the commit.
    fn committed_age(&self, now: f64) -> f64 {
        let waiting = if self.consumed - self.committed > 1e-9 { now - self.committed_at } else { 0.0 };
        self.age(now).max(waiting)
    }

    fn commit(&mut self, at: f64) {
        self.committed = self.consumed;
        self.committed_at = at;
    }

    fn consume(&mut self, mut budget: f64) -> f64 {
        let mut taken = 0.0;
        while budget > 1e-9 {
            let Some(front) = self.queue.front_mut() else { break };
            let take = front.1.min(budget);
            front.1 -= take;
            budget -= take;
            taken += take;
            if front.1 <= 1e-9 {
                self.queue.pop_front();
            }
        }
        self.consumed += taken;
        taken
    }
}

struct Run<'a> {
    policy: &'a Policy,
    model: &'a Model,
    parts: Vec<Partition>,
    ready: i32,
    /// Pods asked for and when they are ready.
    starting: Vec<f64>,
    desired: i32,
    paused_until: f64,
    last_rebalance: Option<f64>,
    rebalances: u32,
    engine: Engine,
    operator: OperatorState,
    snapshot: Option<GroupInput>,
    /// Records consumed in each of the last 60 s, for the consume rate sluice-lag reports.
    consumed_window: VecDeque<f64>,
    produced_window: VecDeque<f64>,
}

/// Runs `policy` over `trace` with `model`.
pub fn run(policy: &Policy, model: &Model, trace: &Trace) -> (Vec<Sample>, Summary) {
    let initial = policy.min_replicas.max(1);
    let mut r = Run::new(policy, model, initial);
    if trace.initial_lag > 0.0 {
        let per = trace.initial_lag / f64::from(policy.partitions.max(1));
        for p in &mut r.parts {
            p.queue.push_back((0.0, per));
            p.produced += per;
        }
    }
    let mut samples = Vec::new();
    let seconds = trace.length_s().ceil() as usize;
    for s in 0..seconds {
        samples.push(r.second(s as f64, trace.rate_at(s as f64)));
    }
    let summary = summarize(policy, model, trace, &samples, r.rebalances);
    (samples, summary)
}

impl<'a> Run<'a> {
    fn new(policy: &'a Policy, model: &'a Model, initial: i32) -> Self {
        Self {
            policy,
            model,
            parts: vec![Partition::default(); policy.partitions.max(1) as usize],
            ready: initial,
            starting: Vec::new(),
            desired: initial,
            paused_until: 0.0,
            last_rebalance: None,
            rebalances: 0,
            engine: Engine::new(policy, (model.sync_s * 1000.0) as i64),
            operator: OperatorState::default(),
            snapshot: None,
            consumed_window: VecDeque::new(),
            produced_window: VecDeque::new(),
        }
    }

    fn second(&mut self, t: f64, rate: f64) -> Sample {
        self.pods(t);
        let per = rate / self.parts.len() as f64;
        for p in &mut self.parts {
            p.queue.push_back((t, per));
            p.produced += per;
        }
        let interval = self.model.commit_interval_s;
        if interval > 0.0 && t % interval < 1.0 {
            self.parts.iter_mut().for_each(|p| p.commit(t));
        }
        let paused = t < self.paused_until;
        let consumed = if paused { 0.0 } else { self.consume() };
        if interval <= 0.0 {
            self.parts.iter_mut().for_each(|p| p.commit(t + 1.0));
        }
        push_window(&mut self.consumed_window, consumed);
        push_window(&mut self.produced_window, rate);
        let at = t + 1.0;
        if at % self.model.lag_poll_s.max(1.0) < 1.0 {
            self.snapshot = Some(self.observe(at, paused));
        }
        if at % (self.policy.polling_interval_s as f64) < 1.0 {
            self.operate(at);
        }
        if at >= self.model.sync_s && at % self.model.sync_s < 1.0 {
            self.sync(at);
        }
        Sample {
            t_s: at,
            produce_rate: rate,
            consume_rate: consumed,
            lag: self.parts.iter().map(Partition::committed_lag).sum(),
            time_lag_s: self.parts.iter().map(|p| p.committed_age(at)).fold(0.0, f64::max),
            desired: self.desired,
            ready: self.ready,
            paused,
        }
    }

    /// Pods that finished starting join; a change of the ready count is a rebalance.
    fn pods(&mut self, t: f64) {
        let before = self.ready;
        let joined = self.starting.iter().filter(|&&at| at <= t).count() as i32;
        self.starting.retain(|&at| at > t);
        self.ready += joined;
        if self.ready != before {
            self.rebalance(t);
        }
    }

    fn rebalance(&mut self, t: f64) {
        self.rebalances += 1;
        self.paused_until = t + self.model.rebalance_pause_s;
        self.last_rebalance = Some(t);
    }

    /// Sets the replica count: removals at once, additions after the start-up time.
    fn scale_to(&mut self, t: f64, replicas: i32) {
        self.desired = replicas;
        let coming = self.ready + self.starting.len() as i32;
        if replicas > coming {
            self.starting.extend(std::iter::repeat_n(t + self.model.startup_s, (replicas - coming) as usize));
        } else if replicas < coming {
            let mut excess = coming - replicas;
            while excess > 0 && !self.starting.is_empty() {
                self.starting.pop();
                excess -= 1;
            }
            if excess > 0 {
                self.ready -= excess;
                self.rebalance(t);
            }
        }
    }

    /// One second of consumption: each pod's rate split over the partitions it holds.
    fn consume(&mut self) -> f64 {
        let pods = self.ready.max(0) as usize;
        if pods == 0 {
            return 0.0;
        }
        let mut total = 0.0;
        for pod in 0..pods {
            let held: Vec<usize> = (pod..self.parts.len()).step_by(pods).collect();
            let mut budget = self.model.per_pod_rate;
            // Two passes: an even share first, then what a drained partition left to the others.
            for _ in 0..2 {
                let busy: Vec<usize> = held.iter().copied().filter(|&i| self.parts[i].lag() > 1e-9).collect();
                if busy.is_empty() || budget <= 1e-9 {
                    break;
                }
                let share = budget / busy.len() as f64;
                for i in busy {
                    let taken = self.parts[i].consume(share);
                    budget -= taken;
                    total += taken;
                }
            }
        }
        total
    }

    /// What sluice-lag reads at `at`.
    fn observe(&self, at: f64, paused: bool) -> GroupInput {
        let n = self.parts.len() as f64;
        let produce = self.produced_window.iter().sum::<f64>() / self.produced_window.len().max(1) as f64;
        let consume = self.consumed_window.iter().sum::<f64>() / self.consumed_window.len().max(1) as f64;
        GroupInput {
            at_ms: (at * 1000.0) as i64,
            consume_rate: Some(consume),
            members: Some(self.ready.max(0) as u32),
            rebalancing: paused,
            last_rebalance_pause_ms: (self.rebalances > 0).then_some((self.model.rebalance_pause_s * 1000.0) as i64),
            stable_for_ms: Some(((at - self.last_rebalance.unwrap_or(0.0)) * 1000.0) as i64),
            blocked: None,
            partitions: self
                .parts
                .iter()
                .map(|p| PartitionInput {
                    lag: Some(p.committed_lag().round() as i64),
                    time_lag_ms: Some((p.committed_age(at) * 1000.0) as i64),
                    produce_rate: Some(produce / n),
                    stalled: false,
                })
                .collect(),
        }
    }

    fn offsets(&self) -> Vec<PartitionOffsets> {
        self.parts
            .iter()
            .map(|p| PartitionOffsets {
                committed: Some(p.committed.floor() as i64),
                earliest: Some(0),
                latest: p.produced.floor() as i64,
            })
            .collect()
    }

    /// KEDA's operator: from and to zero.
    fn operate(&mut self, at: f64) {
        let lag: f64 = self.parts.iter().map(Partition::committed_lag).sum();
        let active = lag.round() as i64 > self.policy.activation_lag_threshold;
        let op = crate::keda::Operator {
            min_replica_count: self.policy.min_replicas,
            max_replica_count: self.policy.max_replicas,
            polling_interval_s: self.policy.polling_interval_s,
            cooldown_period_s: self.policy.cooldown_period_s,
            fallback: None,
        };
        let current = self.ready + self.starting.len() as i32;
        if let Some(n) = self.operator.poll(&op, (at * 1000.0) as i64, current, active) {
            self.scale_to(at, n);
        }
    }

    /// The HPA's sync: the metric as KEDA serves it, then the controller's decision.
    fn sync(&mut self, at: f64) {
        let current = self.ready + self.starting.len() as i32;
        let offsets = self.offsets();
        let metric = self.engine.metric(&offsets, self.snapshot.as_ref());
        let result = self.engine.sync((at * 1000.0) as i64, current, metric);
        if result.desired != current {
            self.scale_to(at, result.desired);
        }
    }
}

fn push_window(window: &mut VecDeque<f64>, value: f64) {
    window.push_back(value);
    while window.len() > 60 {
        window.pop_front();
    }
}

fn summarize(policy: &Policy, model: &Model, trace: &Trace, samples: &[Sample], rebalances: u32) -> Summary {
    Summary {
        policy: policy.name.clone(),
        trace: trace.name.clone(),
        peak_lag: samples.iter().map(|s| s.lag).fold(0.0, f64::max),
        peak_time_lag_s: samples.iter().map(|s| s.time_lag_s).fold(0.0, f64::max),
        seconds_over_objective: samples.iter().filter(|s| s.time_lag_s > model.objective_s).count() as f64,
        objective_s: model.objective_s,
        rebalances,
        replica_minutes: samples.iter().map(|s| f64::from(s.ready)).sum::<f64>() / 60.0,
        peak_replicas: samples.iter().map(|s| s.ready).max().unwrap_or(0),
        final_lag: samples.last().map_or(0.0, |s| s.lag),
    }
}

#[cfg(test)]
mod tests;
