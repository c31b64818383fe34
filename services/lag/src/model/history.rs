//! A partition's recent samples (one per poll), and what they say: produce
//! and consume rates, lag velocity, time to drain, how long the committed
//! offset has stood still, whether it went back. Everything is over windows
//! of *time*, whatever the commit or poll rate.

use std::collections::VecDeque;

use serde::Serialize;

/// One poll's view of a partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sample {
    pub at_ms: i64,
    /// The log end offset (the end the group is measured against).
    pub end: i64,
    pub committed: Option<i64>,
    pub lag: Option<i64>,
}

/// Records per second over a window.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Rates {
    pub produce: f64,
    /// `None` if the committed offset went back in the window (a reset).
    pub consume: Option<f64>,
}

impl Rates {
    /// Lag growth, records/s (produce − consume).
    pub fn velocity(&self) -> Option<f64> {
        self.consume.map(|c| self.produce - c)
    }

    /// Seconds until `lag` is consumed at these rates; `None`: never (not
    /// draining, or the rates are unknown). A group that keeps pace carries a
    /// small standing lag (what it has read but not yet committed), and its
    /// net rate is noise around 0: a lag it consumes within `resolution_s`
    /// (one poll, below which this poller cannot see) counts as caught up and
    /// drains in lag ÷ consume, rather than reading "never".
    pub fn drain_seconds(&self, lag: i64, resolution_s: f64) -> Option<f64> {
        let consume = self.consume?;
        let net = consume - self.produce;
        if lag == 0 {
            Some(0.0)
        } else if net > 0.0 {
            Some(lag as f64 / net)
        } else if consume > 0.0 && lag as f64 <= consume * resolution_s {
            Some(lag as f64 / consume)
        } else {
            None
        }
    }
}

/// The samples of the last `keep_ms`.
#[derive(Debug, Clone, Default)]
pub struct History {
    samples: VecDeque<Sample>,
    keep_ms: i64,
}

impl History {
    pub fn new(keep_ms: i64) -> Self {
        Self { samples: VecDeque::new(), keep_ms }
    }

    pub fn push(&mut self, sample: Sample) {
        if self.samples.back().is_some_and(|last| last.at_ms >= sample.at_ms) {
            return;
        }
        self.samples.push_back(sample);
        while self.samples.front().is_some_and(|first| sample.at_ms - first.at_ms > self.keep_ms) {
            self.samples.pop_front();
        }
    }

    pub fn latest(&self) -> Option<&Sample> {
        self.samples.back()
    }

    /// The samples within `window_ms` of the newest.
    fn within(&self, window_ms: i64) -> impl Iterator<Item = &Sample> {
        let newest = self.samples.back().map_or(0, |s| s.at_ms);
        self.samples.iter().filter(move |s| newest - s.at_ms <= window_ms)
    }

    /// The first and last samples within `window_ms` of the newest that have a committed offset.
    pub fn committed_ends(&self, window_ms: i64) -> Option<(Sample, Sample)> {
        let mut committed = self.within(window_ms).filter(|s| s.committed.is_some());
        let first = *committed.next()?;
        Some((first, *committed.last().unwrap_or(&first)))
    }

    /// How much of `window_ms` the samples cover.
    pub fn span_ms(&self, window_ms: i64) -> i64 {
        let mut within = self.within(window_ms);
        match (within.next(), self.samples.back()) {
            (Some(first), Some(last)) => last.at_ms - first.at_ms,
            _ => 0,
        }
    }

    /// Rates over the last `window_ms` (at least two samples apart).
    pub fn rates(&self, window_ms: i64) -> Option<Rates> {
        let first = self.within(window_ms).next()?;
        let last = self.samples.back()?;
        let seconds = (last.at_ms - first.at_ms) as f64 / 1000.0;
        if seconds <= 0.0 {
            return None;
        }
        let produce = (last.end - first.end).max(0) as f64 / seconds;
        let consume = match (first.committed, last.committed) {
            (Some(a), Some(b)) if !self.rewound(window_ms) && b >= a => Some((b - a) as f64 / seconds),
            _ => None,
        };
        Some(Rates { produce, consume })
    }

    /// Since when the committed offset has stood at its current value (the
    /// oldest sample kept if it never moved), or `None` without a commit.
    pub fn still_since_ms(&self) -> Option<i64> {
        let current = self.samples.back()?.committed?;
        let mut since = self.samples.back()?.at_ms;
        for s in self.samples.iter().rev() {
            if s.committed != Some(current) {
                break;
            }
            since = s.at_ms;
        }
        Some(since)
    }

    /// Since when the committed offset has stood at its current value with lag in every
    /// sample (records waiting that nobody committed past), or `None` without lag now.
    pub fn waiting_since_ms(&self) -> Option<i64> {
        let last = self.samples.back()?;
        let current = last.committed?;
        if last.lag.unwrap_or(0) <= 0 {
            return None;
        }
        let mut since = last.at_ms;
        for s in self.samples.iter().rev() {
            if s.committed != Some(current) || s.lag.unwrap_or(0) <= 0 {
                break;
            }
            since = s.at_ms;
        }
        Some(since)
    }

    /// The longest time between two polls at which the committed offset was seen to move,
    /// over the samples kept: how often this group commits, to a poll interval. `None`
    /// until it has been seen to move twice.
    pub fn commit_interval_ms(&self) -> Option<i64> {
        let mut moves = self
            .samples
            .iter()
            .zip(self.samples.iter().skip(1))
            .filter(|(a, b)| a.committed.is_some() && b.committed.is_some() && a.committed != b.committed)
            .map(|(_, b)| b.at_ms);
        let mut previous = moves.next()?;
        let mut longest = None;
        for at in moves {
            longest = longest.max(Some(at - previous));
            previous = at;
        }
        longest
    }

    /// The time of the oldest sample kept.
    pub fn oldest_ms(&self) -> Option<i64> {
        self.samples.front().map(|s| s.at_ms)
    }

    /// Whether the committed offset went back within `window_ms`.
    pub fn rewound(&self, window_ms: i64) -> bool {
        let committed: Vec<i64> = self.within(window_ms).filter_map(|s| s.committed).collect();
        committed.windows(2).any(|w| w[1] < w[0])
    }

    /// Lag that grew through the whole window: every lag of its newer half
    /// is above every lag of its older half (a sawtooth does not count).
    pub fn lag_growing(&self, window_ms: i64) -> bool {
        let lags: Vec<(i64, i64)> = self.within(window_ms).filter_map(|s| s.lag.map(|l| (s.at_ms, l))).collect();
        let (Some(first), Some(last)) = (lags.first(), lags.last()) else { return false };
        if last.0 - first.0 < window_ms / 2 {
            return false;
        }
        let middle = first.0 + (last.0 - first.0) / 2;
        let older = lags.iter().filter(|(t, _)| *t <= middle).map(|(_, l)| *l).max();
        let newer = lags.iter().filter(|(t, _)| *t > middle).map(|(_, l)| *l).min();
        matches!((older, newer), (Some(o), Some(n)) if n > o)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn history(points: &[(i64, i64, Option<i64>)]) -> History {
        let mut h = History::new(600_000);
        for (at, end, committed) in points {
            h.push(Sample { at_ms: *at, end: *end, committed: *committed, lag: committed.map(|c| end - c) });
        }
        h
    }

    #[test]
    fn rates_velocity_and_drain() {
        // 10 s: 1,000 produced, 1,500 consumed.
        let h = history(&[(0, 1_000, Some(0)), (5_000, 1_500, Some(700)), (10_000, 2_000, Some(1_500))]);
        let r = h.rates(60_000).expect("rates");
        assert_eq!((r.produce, r.consume), (100.0, Some(150.0)));
        assert_eq!(r.velocity(), Some(-50.0));
        assert_eq!(r.drain_seconds(500, 1.0), Some(10.0));
        let falling_behind = Rates { produce: 200.0, consume: Some(150.0) };
        assert_eq!(falling_behind.drain_seconds(500, 1.0), None, "never drains");
        assert_eq!(falling_behind.drain_seconds(0, 1.0), Some(0.0), "nothing to drain");
        let keeping_pace = Rates { produce: 150.0, consume: Some(150.0) };
        assert_eq!(keeping_pace.drain_seconds(75, 1.0), Some(0.5), "a standing lag within one poll is caught up");
        assert_eq!(
            keeping_pace.drain_seconds(151, 1.0),
            None,
            "more than a poll's worth is a backlog that never drains"
        );
        let stopped = Rates { produce: 0.0, consume: Some(0.0) };
        assert_eq!(stopped.drain_seconds(1, 1.0), None, "nothing consumed: never");
        assert!(history(&[(0, 1, Some(0))]).rates(60_000).is_none(), "one sample says nothing");
    }

    #[test]
    fn standing_still_and_going_back() {
        let h = history(&[(0, 10, Some(5)), (5_000, 20, Some(7)), (10_000, 30, Some(7)), (15_000, 40, Some(7))]);
        assert_eq!(h.still_since_ms(), Some(5_000));
        assert!(!h.rewound(60_000));
        let reset = history(&[(0, 10, Some(9)), (5_000, 10, Some(2)), (10_000, 10, Some(4))]);
        assert!(reset.rewound(60_000));
        assert!(!reset.rewound(4_000), "outside the window");
        assert_eq!(reset.rates(60_000).and_then(|r| r.consume), None, "no rate across a reset");
    }

    #[test]
    fn waiting_and_the_commit_interval() {
        // Moves at 5 s and 10 s, then stands with lag from 10 s on.
        let h = history(&[
            (0, 10, Some(5)),
            (5_000, 20, Some(7)),
            (10_000, 30, Some(9)),
            (15_000, 40, Some(9)),
            (20_000, 50, Some(9)),
        ]);
        assert_eq!(h.waiting_since_ms(), Some(10_000));
        assert_eq!(h.commit_interval_ms(), Some(5_000));
        let caught_up = history(&[(0, 10, Some(10)), (5_000, 10, Some(10))]);
        assert_eq!(caught_up.waiting_since_ms(), None, "no lag: nothing waits");
        // Standing still while caught up, then records arrive: waiting since they did.
        let arrived = history(&[(0, 10, Some(10)), (5_000, 10, Some(10)), (10_000, 12, Some(10))]);
        assert_eq!(arrived.waiting_since_ms(), Some(10_000));
        assert_eq!(arrived.commit_interval_ms(), None, "never seen to move");
        let once = history(&[(0, 10, Some(5)), (5_000, 20, Some(7)), (10_000, 30, Some(7))]);
        assert_eq!(once.commit_interval_ms(), None, "one move is no interval");
        let sparse = history(&[(0, 10, Some(1)), (5_000, 20, Some(2)), (30_000, 30, Some(3)), (35_000, 40, Some(4))]);
        assert_eq!(sparse.commit_interval_ms(), Some(25_000), "the longest gap between moves");
    }

    #[test]
    fn growth_must_span_the_window_not_a_sawtooth() {
        let steady: Vec<(i64, i64, Option<i64>)> =
            (0..20).map(|i| (i * 5_000, 1_000 + i * 100, Some(950 + i * 100))).collect();
        assert!(!history(&steady).lag_growing(60_000));
        let growing: Vec<_> = (0..20).map(|i| (i * 5_000, 1_000 + i * 100, Some(1_000 + i * 60))).collect();
        assert!(history(&growing).lag_growing(60_000));
        let sawtooth: Vec<_> =
            (0..20).map(|i| (i * 5_000, 1_000 + i * 100, Some(1_000 + i * 100 - (i % 4) * 50))).collect();
        assert!(!history(&sawtooth).lag_growing(60_000));
        let short: Vec<_> = (0..3).map(|i| (i * 5_000, 1_000 + i * 100, Some(1_000))).collect();
        assert!(!history(&short).lag_growing(60_000), "too little of the window seen");
    }
}
