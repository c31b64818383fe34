//! A group over time: its rebalances, and how long consumption stopped for
//! each. A rebalance is seen as a rebalancing state (`PreparingRebalance`,
//! `CompletingRebalance`, or KIP-848's `Assigning`/`Reconciling`) or a change
//! of the member set between polls. Consumption "stopped" from the last poll
//! at which the group's committed offsets advanced before the rebalance,
//! until the first poll at which they advance again, so the pause is known to
//! a poll interval.

use std::collections::{BTreeSet, VecDeque};

use serde::{Deserialize, Serialize};

/// How many ended rebalances a group keeps for its picture.
pub const RECENT_REBALANCES: usize = 10;

/// A rebalance whose consumption resumed: when, and how long it stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RebalancePause {
    /// The poll at which the committed offsets advanced again.
    pub resumed_ms: i64,
    pub pause_ms: i64,
}

/// One group's rebalance bookkeeping.
#[derive(Debug, Clone, Default)]
pub struct GroupTracker {
    members: Option<BTreeSet<String>>,
    last_committed: Option<i64>,
    last_progress_ms: Option<i64>,
    /// A rebalance seen, whose consumption has not resumed yet (since when).
    open: Option<i64>,
    pub rebalances: u64,
    pub last_pause_ms: Option<i64>,
    /// Since when the member set has been the one seen now (the first poll, or its last change).
    pub members_since_ms: Option<i64>,
    /// The newest ended rebalances, oldest first.
    pub recent: VecDeque<RebalancePause>,
}

/// What one poll says of a group.
#[derive(Debug, Clone)]
pub struct GroupPoll<'a> {
    pub at_ms: i64,
    pub state: &'a str,
    pub members: BTreeSet<String>,
    /// The sum of its committed offsets (`None`: not read this time).
    pub committed: Option<i64>,
    pub lag: Option<i64>,
}

/// Whether `state` is a group state in which a rebalance is under way.
pub fn rebalancing(state: &str) -> bool {
    matches!(state, "PreparingRebalance" | "CompletingRebalance" | "Assigning" | "Reconciling")
}

impl GroupTracker {
    /// Takes one poll; the pause of a rebalance that ended with it, in ms.
    pub fn observe(&mut self, poll: GroupPoll<'_>) -> Option<i64> {
        let changed = self.members.as_ref().is_some_and(|m| *m != poll.members);
        if changed || self.members_since_ms.is_none() {
            self.members_since_ms = Some(poll.at_ms);
        }
        if (rebalancing(poll.state) || changed) && self.open.is_none() {
            self.rebalances += 1;
            self.open = Some(self.last_progress_ms.unwrap_or(poll.at_ms));
        }
        self.members = Some(poll.members);
        let advanced = matches!((self.last_committed, poll.committed), (Some(a), Some(b)) if b > a);
        if poll.committed.is_some() {
            self.last_committed = poll.committed;
        }
        let mut ended = None;
        if let Some(since) = self.open
            && !rebalancing(poll.state)
        {
            if advanced {
                let pause = poll.at_ms - since;
                self.last_pause_ms = Some(pause);
                if self.recent.len() == RECENT_REBALANCES {
                    self.recent.pop_front();
                }
                self.recent.push_back(RebalancePause { resumed_ms: poll.at_ms, pause_ms: pause });
                ended = Some(pause);
                self.open = None;
            } else if poll.lag == Some(0) {
                // Nothing to consume: no pause to measure.
                self.open = None;
            }
        }
        if advanced {
            self.last_progress_ms = Some(poll.at_ms);
        }
        ended
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn poll(at_ms: i64, state: &str, members: &[&str], committed: i64, lag: i64) -> GroupPoll<'static> {
        let members = members.iter().map(|m| m.to_string()).collect();
        GroupPoll {
            at_ms,
            state: if state == "Stable" { "Stable" } else { "PreparingRebalance" },
            members,
            committed: Some(committed),
            lag: Some(lag),
        }
    }

    #[test]
    fn a_scale_up_is_a_rebalance_with_the_pause_it_caused() {
        let mut g = GroupTracker::default();
        assert_eq!(g.observe(poll(0, "Stable", &["a"], 100, 50)), None);
        assert_eq!(g.observe(poll(1_000, "Stable", &["a"], 200, 50)), None);
        // A second member joins: nothing committed for two polls.
        assert_eq!(g.observe(poll(2_000, "Rebalancing", &["a"], 200, 80)), None);
        assert_eq!(g.observe(poll(3_000, "Stable", &["a", "b"], 200, 120)), None);
        assert_eq!(
            g.observe(poll(4_000, "Stable", &["a", "b"], 400, 30)),
            Some(3_000),
            "from the last progress at 1 s"
        );
        assert_eq!((g.rebalances, g.last_pause_ms), (1, Some(3_000)));
        // A member leaves while caught up: counted, no pause to measure.
        g.observe(poll(5_000, "Stable", &["a"], 400, 0));
        assert_eq!((g.rebalances, g.last_pause_ms), (2, Some(3_000)));
        assert_eq!(g.recent, [RebalancePause { resumed_ms: 4_000, pause_ms: 3_000 }]);
    }

    #[test]
    fn each_pause_is_kept_up_to_the_newest_ten() {
        let mut g = GroupTracker::default();
        let (ab, a): (&[&str], &[&str]) = (&["a", "b"], &["a"]);
        let mut committed = 0;
        g.observe(poll(-1_000, "Stable", a, committed, 50));
        for i in 0..12 {
            let at = i * 100_000;
            // Consuming, then a member comes or goes, and consumption resumes
            // i + 2 s after the last progress.
            let (before, after) = if i % 2 == 0 { (a, ab) } else { (ab, a) };
            committed += 10;
            g.observe(poll(at, "Stable", before, committed, 50));
            g.observe(poll(at + 1_000, "Rebalancing", after, committed, 60));
            for k in 0..i {
                g.observe(poll(at + 2_000 + k * 1_000, "Stable", after, committed, 70));
            }
            committed += 10;
            let resumed = g.observe(poll(at + 2_000 + i * 1_000, "Stable", after, committed, 40));
            assert_eq!(resumed, Some(2_000 + i * 1_000), "round {i}");
        }
        assert_eq!(g.rebalances, 12);
        let pauses: Vec<i64> = g.recent.iter().map(|r| r.pause_ms).collect();
        assert_eq!(pauses, (2..12).map(|i| 2_000 + i * 1_000).collect::<Vec<_>>(), "the newest ten, oldest first");
    }
}
