//! A group over time: its rebalances, and how long consumption stopped for
//! each. A rebalance is seen as a rebalancing state (`PreparingRebalance`,
//! `CompletingRebalance`, or KIP-848's `Assigning`/`Reconciling`) or a change
//! of the member set between polls. Consumption "stopped" from the last poll
//! at which the group's committed offsets advanced before the rebalance,
//! until the first poll at which they advance again, so the pause is known to
//! a poll interval.

use std::collections::BTreeSet;

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

fn rebalancing(state: &str) -> bool {
    matches!(state, "PreparingRebalance" | "CompletingRebalance" | "Assigning" | "Reconciling")
}

impl GroupTracker {
    /// Takes one poll; the pause of a rebalance that ended with it, in ms.
    pub fn observe(&mut self, poll: GroupPoll<'_>) -> Option<i64> {
        let changed = self.members.as_ref().is_some_and(|m| *m != poll.members);
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
    }
}
