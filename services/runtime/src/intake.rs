//! The consumer thread's decisions, as pure state: what it has handed to
//! each partition's worker, when a partition pauses and resumes, which
//! positions a periodic commit sends, when a position may move past
//! transaction markers, and the poll loop's pacing. No librdkafka and no
//! clock here (instants come in as arguments): [`crate::consumer`] asks and
//! carries out.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::partition::Budget;

/// Records handed out and not finished, over all partitions, past which
/// the consumer thread takes no more until the workers catch up (they stay
/// in librdkafka's prefetch meanwhile, which a pause would throw away).
/// Small, so a revoke or a shutdown drains in a moment; a partition's own
/// budget (a pause) is for when its worker stops making progress.
pub(crate) const MAX_AHEAD: u64 = 4 * POLL_BATCH as u64;

/// Most records one poll round takes before handing them out.
pub(crate) const POLL_BATCH: usize = 2048;

/// Even while the workers are behind, a poll round at least this often:
/// rebalance callbacks and errors are served from polls.
const MAX_POLL_GAP: Duration = Duration::from_millis(100);

/// Exactly-once mode: how often the group's metadata (its generation) is
/// handed to the transactions, besides after every rebalance.
const GROUP_REFRESH: Duration = Duration::from_millis(50);

/// Every this many periodic commits, every position is sent again (a
/// commit lost in transit is repeated), not only those that moved.
const COMMIT_ALL_EVERY: u64 = 10;

/// What the consumer thread knows of one partition's intake.
#[derive(Debug, Default, Clone, Copy)]
struct Flow {
    handed: u64,
    /// One past the last offset handed to the worker.
    handed_end: i64,
    paused: bool,
    /// Records of this partition are polled and not handed out yet (this
    /// poll round's batch): the consumer's position is past records no
    /// worker has, so it must not be committed (see [`Intake::past_markers`]).
    pending: bool,
    /// Records of this partition were polled with no worker to take them:
    /// the consumer's position is past records nobody handled.
    dropped: bool,
}

impl Flow {
    /// Everything of the partition polled in this epoch went to its worker:
    /// nothing is on its way (this round's batch) and nothing was polled
    /// with no worker to take it. Only then may a position the consumer
    /// reached be committed for offsets the worker was not handed.
    fn all_handed(&self) -> bool {
        !self.pending && !self.dropped
    }
}

/// The intake of every owned partition, and the positions last committed.
#[derive(Debug, Default)]
pub(crate) struct Intake {
    flows: HashMap<i32, Flow>,
    /// The last position sent in a periodic commit, per owned partition.
    sent: HashMap<i32, i64>,
}

impl Intake {
    /// A new epoch of `partition` counts its intake afresh.
    pub(crate) fn assigned(&mut self, partition: i32) {
        self.flows.insert(partition, Flow::default());
    }

    /// Partitions this member no longer owns start afresh if they come back.
    pub(crate) fn forget(&mut self, partitions: &[i32]) {
        for p in partitions {
            self.sent.remove(p);
            self.flows.remove(p);
        }
    }

    /// Records of `partition` were polled in this round (a revoke served by
    /// the next poll must see it).
    pub(crate) fn polled(&mut self, partition: i32) {
        self.flows.entry(partition).or_default().pending = true;
    }

    /// This round's records of `partition` were handed to its worker
    /// (`Some((records, one past the last offset))`), or had no worker to
    /// go to (`None`: not committed, so consumed again by the owner).
    pub(crate) fn handed(&mut self, partition: i32, handed: Option<(u64, i64)>) {
        let f = self.flows.entry(partition).or_default();
        f.pending = false;
        match handed {
            Some((n, end)) => {
                f.handed += n;
                f.handed_end = end;
            }
            None => f.dropped = true,
        }
    }

    /// Given the records its worker has finished and whether the worker
    /// asks for a pause (bytes, a stalled record): the records in flight,
    /// and `Some(pause)` when the partition should change. A partition
    /// whose worker holds its budget of records pauses until it is down to
    /// the resume fraction; one whose worker asks pauses until it stops.
    pub(crate) fn pause(&mut self, partition: i32, finished: u64, wants: bool, budget: &Budget) -> (u64, Option<bool>) {
        let f = self.flows.entry(partition).or_default();
        let in_flight = f.handed.saturating_sub(finished);
        let low = (budget.max_records as f64 * budget.resume_fraction) as u64;
        let over = if f.paused { in_flight > low } else { in_flight >= budget.max_records as u64 };
        let pause = over || wants;
        (in_flight, (pause != f.paused).then_some(pause))
    }

    /// The consumer paused or resumed `partition`.
    pub(crate) fn set_paused(&mut self, partition: i32, paused: bool) {
        self.flows.entry(partition).or_default().paused = paused;
    }

    pub(crate) fn is_paused(&self, partition: i32) -> bool {
        self.flows.get(&partition).is_some_and(|f| f.paused)
    }

    /// `offset` (a worker's position), or the consumer's `position` when the
    /// worker is through everything handed out and the consumer is further:
    /// the offsets between hold no record the application was given, only
    /// transaction markers (and aborted records) the consumer stepped over.
    /// Committing past them is what lets the group's lag reach 0 on a topic
    /// written with transactions (librdkafka's position steps over a commit
    /// marker; `sluice-kafka`'s transactions test checks it), instead of 1
    /// per partition for ever.
    pub(crate) fn past_markers(&self, partition: i32, offset: i64, position: Option<i64>) -> i64 {
        // Records polled and not handed out lie between: not markers.
        match self.flows.get(&partition) {
            Some(f) if f.handed_end == offset && f.all_handed() => position.map_or(offset, |p| p.max(offset)),
            _ => offset,
        }
    }

    /// The consumer's `position` of a partition this epoch has handed no
    /// record of (its worker has no position to commit), when every offset
    /// the consumer stepped over since the epoch began was a transaction
    /// marker or an aborted record: nothing handed, nothing polled on its
    /// way, nothing polled without a worker. Without it a partition whose
    /// last record before a rebalance was a marker keeps a lag of 1 under its
    /// next owner for ever (a CI run: the ingest's last transaction, then a
    /// scale-up that moved its partitions).
    pub(crate) fn untouched_position(&self, partition: i32, position: Option<i64>) -> Option<i64> {
        let f = self.flows.get(&partition)?;
        (f.handed == 0 && f.all_handed()).then_some(position?)
    }

    /// Exactly-once mode: where `partition`'s position may move past
    /// markers, from the end of what was handed out (`(from, to)`); the
    /// transaction applies it only if the partition released nothing since.
    /// `None` for a partition this epoch handed nothing of (see
    /// [`Intake::untouched_position`]).
    pub(crate) fn marker_skip(&self, partition: i32, position: Option<i64>) -> Option<(i64, i64)> {
        let f = self.flows.get(&partition).filter(|f| f.handed > 0)?;
        Some((f.handed_end, self.past_markers(partition, f.handed_end, position)))
    }

    /// Of the workers' `positions` (past markers already), those a periodic
    /// commit sends: the ones that moved since the last, or all of them;
    /// they count as sent from now on.
    pub(crate) fn commit_now(&mut self, positions: Vec<(i32, i64)>, all: bool) -> Vec<(i32, i64)> {
        let moved: Vec<(i32, i64)> =
            positions.into_iter().filter(|(p, o)| all || self.sent.get(p) != Some(o)).collect();
        self.sent.extend(moved.iter().copied());
        moved
    }

    /// A commit could not be sent: its partitions go in the next one.
    pub(crate) fn unsent(&mut self, partitions: impl IntoIterator<Item = i32>) {
        for p in partitions {
            self.sent.remove(&p);
        }
    }
}

/// The poll loop's pacing: when to refresh the group's metadata, commit,
/// and poll.
#[derive(Debug)]
pub(crate) struct Pacer {
    commit_interval: Duration,
    last_commit: Instant,
    commits: u64,
    last_poll: Instant,
    last_group: Instant,
}

impl Pacer {
    pub(crate) fn new(now: Instant, commit_interval: Duration) -> Self {
        Self { commit_interval, last_commit: now, commits: 0, last_poll: now, last_group: now }
    }

    /// Exactly-once mode: whether to hand the group's metadata to the
    /// transactions now (a transaction's offsets are refused with a stale
    /// generation).
    pub(crate) fn group_due(&mut self, now: Instant) -> bool {
        let due = now.duration_since(self.last_group) >= GROUP_REFRESH;
        if due {
            self.last_group = now;
        }
        due
    }

    /// `Some(all)` when a periodic commit is due: `all` when it should send
    /// every position, not only those that moved.
    pub(crate) fn commit_due(&mut self, now: Instant) -> Option<bool> {
        if now.duration_since(self.last_commit) < self.commit_interval {
            return None;
        }
        self.last_commit = now;
        self.commits += 1;
        Some(self.commits.is_multiple_of(COMMIT_ALL_EVERY))
    }

    /// Whether to poll now with `ahead` records handed out and not
    /// finished: not while the workers are behind, except at least every
    /// [`MAX_POLL_GAP`].
    pub(crate) fn poll_due(&mut self, now: Instant, ahead: u64) -> bool {
        if ahead >= MAX_AHEAD && now.duration_since(self.last_poll) < MAX_POLL_GAP {
            return false;
        }
        self.last_poll = now;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BUDGET: Budget = Budget { max_records: 100, max_bytes: 1 << 20, resume_fraction: 0.5 };

    #[test]
    fn a_partition_pauses_at_its_budget_and_resumes_at_the_fraction() {
        let mut intake = Intake::default();
        intake.assigned(0);
        intake.handed(0, Some((100, 100)));
        assert_eq!(intake.pause(0, 1, false, &BUDGET), (99, None));
        assert_eq!(intake.pause(0, 0, false, &BUDGET), (100, Some(true)));
        intake.set_paused(0, true);
        assert_eq!(intake.pause(0, 49, false, &BUDGET), (51, None), "51 in flight: still above the fraction");
        assert_eq!(intake.pause(0, 50, false, &BUDGET), (50, Some(false)));
    }

    #[test]
    fn a_worker_asking_for_a_pause_gets_one_whatever_its_records() {
        let mut intake = Intake::default();
        intake.assigned(3);
        assert_eq!(intake.pause(3, 0, true, &BUDGET), (0, Some(true)));
        intake.set_paused(3, true);
        assert_eq!(intake.pause(3, 0, true, &BUDGET), (0, None));
        assert_eq!(intake.pause(3, 0, false, &BUDGET), (0, Some(false)));
    }

    #[test]
    fn a_position_moves_past_markers_only_when_everything_polled_was_handed_out() {
        let mut intake = Intake::default();
        intake.assigned(0);
        intake.handed(0, Some((10, 10)));
        assert_eq!(intake.past_markers(0, 10, Some(12)), 12, "10 and 11 are markers");
        assert_eq!(intake.past_markers(0, 8, Some(12)), 8, "the worker is not through 8 and 9");
        assert_eq!(intake.past_markers(0, 10, Some(9)), 10, "never backwards");
        intake.polled(0);
        assert_eq!(intake.past_markers(0, 10, Some(12)), 10, "10 and 11 are records on their way");
        intake.handed(0, Some((2, 12)));
        assert_eq!(intake.past_markers(0, 12, Some(14)), 14, "handed out: 12 and 13 are markers again");
        assert_eq!(intake.past_markers(7, 10, Some(12)), 10, "not owned");
        assert_eq!(intake.marker_skip(0, Some(14)), Some((12, 14)));
    }

    #[test]
    fn records_polled_with_no_worker_to_take_them_hold_the_position_back() {
        let mut intake = Intake::default();
        intake.assigned(0);
        intake.handed(0, Some((10, 10)));
        intake.polled(0);
        intake.handed(0, None);
        assert_eq!(intake.past_markers(0, 10, Some(12)), 10, "10 and 11 went to no worker: never handled");
        assert_eq!(intake.marker_skip(0, Some(12)), Some((10, 10)));
        intake.assigned(1);
        assert_eq!(intake.marker_skip(1, Some(5)), None, "handed nothing: the untouched position's case");
    }

    #[test]
    fn a_partition_handed_nothing_commits_the_position_past_its_markers() {
        let mut intake = Intake::default();
        assert_eq!(intake.untouched_position(0, Some(12)), None, "not owned");
        intake.assigned(0);
        assert_eq!(intake.untouched_position(0, None), None, "no position yet");
        assert_eq!(intake.untouched_position(0, Some(12)), Some(12), "the epoch stepped over markers only");
        intake.polled(0);
        assert_eq!(intake.untouched_position(0, Some(14)), None, "records on their way");
        intake.handed(0, Some((2, 14)));
        assert_eq!(intake.untouched_position(0, Some(14)), None, "its worker's position counts now");
        intake.assigned(1);
        intake.polled(1);
        intake.handed(1, None);
        assert_eq!(intake.untouched_position(1, Some(5)), None, "records polled with no worker were not handled");
        intake.forget(&[1]);
        intake.assigned(1);
        assert_eq!(intake.untouched_position(1, Some(5)), Some(5), "a new epoch starts afresh");
    }

    #[test]
    fn a_periodic_commit_sends_what_moved_and_after_a_failure_sends_it_again() {
        let mut intake = Intake::default();
        assert_eq!(intake.commit_now(vec![(0, 5), (1, 7)], false), vec![(0, 5), (1, 7)]);
        assert_eq!(intake.commit_now(vec![(0, 5), (1, 8)], false), vec![(1, 8)]);
        intake.unsent([1]);
        assert_eq!(intake.commit_now(vec![(0, 5), (1, 8)], false), vec![(1, 8)]);
        assert_eq!(intake.commit_now(vec![(0, 5), (1, 8)], true), vec![(0, 5), (1, 8)]);
        intake.forget(&[0]);
        assert_eq!(intake.commit_now(vec![(0, 5)], false), vec![(0, 5)], "a partition back after a revoke");
    }

    #[test]
    fn the_pacer_commits_every_interval_and_everything_every_tenth_time() {
        let start = Instant::now();
        let mut pacer = Pacer::new(start, Duration::from_secs(1));
        assert_eq!(pacer.commit_due(start + Duration::from_millis(999)), None);
        let dues: Vec<Option<bool>> = (1..=10).map(|s| pacer.commit_due(start + Duration::from_secs(s))).collect();
        assert_eq!(dues[..9], [Some(false); 9]);
        assert_eq!(dues[9], Some(true));
        assert!(!pacer.group_due(start + Duration::from_millis(49)));
        assert!(pacer.group_due(start + Duration::from_millis(50)));
        assert!(!pacer.group_due(start + Duration::from_millis(60)), "50 ms since the last refresh");
    }

    #[test]
    fn the_pacer_holds_polls_while_the_workers_are_behind_but_polls_every_gap() {
        let start = Instant::now();
        let mut pacer = Pacer::new(start, Duration::from_secs(1));
        let ms = |n| start + Duration::from_millis(n);
        assert!(pacer.poll_due(ms(1), MAX_AHEAD - 1));
        assert!(!pacer.poll_due(ms(50), MAX_AHEAD));
        assert!(pacer.poll_due(ms(101), MAX_AHEAD), "rebalances are served from polls");
        assert!(!pacer.poll_due(ms(150), MAX_AHEAD));
    }
}
