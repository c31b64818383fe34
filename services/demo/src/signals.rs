//! The production signals the processors export, as the demo saw them over its run: the
//! swaps' freshness (`sluice_processor_visible_age_seconds`: a swap's age, from its block,
//! when a `read_committed` reader can first read it) and the CPU each record cost
//! (`process_cpu_seconds_total` over `sluice_processor_messages_total`). Processors come and
//! go as the demo scales them, so each sample adds every running processor's increase since
//! the one before; a counter that went back (a restarted process) counts from zero.

use std::collections::HashMap;

use serde::Serialize;
use sluice_service::process::metric;

use crate::procs::{buckets_where, quantile};

/// The freshness objective the demo reports against (the chart's default).
pub const OBJECTIVE_SECONDS: f64 = 5.0;

/// What the run added up, for the report.
#[derive(Debug, Clone, Default, Serialize)]
pub struct SignalsSummary {
    /// Swaps that became readable while the demo sampled.
    pub swaps_readable: f64,
    pub freshness_p50_seconds: Option<f64>,
    pub freshness_p99_seconds: Option<f64>,
    /// Share of them readable within [`OBJECTIVE_SECONDS`] of their block.
    pub within_objective: Option<f64>,
    /// The processors' whole-process CPU per record they finished, µs.
    pub processor_cpu_us_per_record: Option<f64>,
}

/// One processor's counters at the last sample.
#[derive(Debug, Default)]
struct Seen {
    ages: Vec<(f64, f64)>,
    cpu_seconds: f64,
    records: f64,
}

#[derive(Debug)]
pub struct Signals {
    /// `topic="<swaps topic>"`, the freshness series' selector.
    topic: String,
    seen: HashMap<String, Seen>,
    ages: Vec<(f64, f64)>,
    cpu_seconds: f64,
    records: f64,
}

impl Signals {
    pub fn new(swaps_topic: &str) -> Self {
        Self {
            topic: format!("topic=\"{swaps_topic}\""),
            seen: HashMap::new(),
            ages: Vec::new(),
            cpu_seconds: 0.0,
            records: 0.0,
        }
    }

    /// Adds each processor's increase since the last sample (`processors`: name and
    /// `/metrics` text); returns the freshness p99 of the swaps readable since then.
    pub fn sample<'a>(&mut self, processors: impl IntoIterator<Item = (&'a str, &'a str)>) -> Option<f64> {
        let mut interval: Vec<(f64, f64)> = Vec::new();
        for (name, text) in processors {
            if text.is_empty() {
                continue;
            }
            let now = Seen {
                ages: buckets_where([text], "sluice_processor_visible_age_seconds", &self.topic),
                cpu_seconds: metric(text, "process_cpu_seconds_total", ""),
                records: metric(text, "sluice_processor_messages_total", ""),
            };
            let before = self.seen.remove(name).unwrap_or_default();
            let increase = |now: f64, before: f64| if now >= before { now - before } else { now };
            self.cpu_seconds += increase(now.cpu_seconds, before.cpu_seconds);
            self.records += increase(now.records, before.records);
            for &(bound, count) in &now.ages {
                let was = before.ages.iter().find(|(b, _)| *b == bound).map_or(0.0, |(_, c)| *c);
                add(&mut interval, bound, increase(count, was));
            }
            self.seen.insert(name.to_string(), now);
        }
        for &(bound, count) in &interval {
            add(&mut self.ages, bound, count);
        }
        quantile(&[], &interval, 0.99)
    }

    pub fn summary(&self) -> SignalsSummary {
        let total = self.ages.last().map_or(0.0, |(_, c)| *c);
        let within = self.ages.iter().find(|(b, _)| *b >= OBJECTIVE_SECONDS).map(|(_, c)| *c);
        SignalsSummary {
            swaps_readable: total,
            freshness_p50_seconds: quantile(&[], &self.ages, 0.5),
            freshness_p99_seconds: quantile(&[], &self.ages, 0.99),
            within_objective: within.filter(|_| total > 0.0).map(|w| w / total),
            processor_cpu_us_per_record: (self.records > 0.0).then(|| self.cpu_seconds * 1e6 / self.records),
        }
    }
}

/// Adds `count` to `bound`'s bucket, keeping the bounds sorted.
fn add(histogram: &mut Vec<(f64, f64)>, bound: f64, count: f64) {
    match histogram.iter_mut().find(|(b, _)| *b == bound) {
        Some(entry) => entry.1 += count,
        None => {
            histogram.push((bound, count));
            histogram.sort_by(|a, b| a.0.total_cmp(&b.0));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(le_1: u64, le_5: u64, all: u64, cpu: f64, records: u64) -> String {
        let h = "sluice_processor_visible_age_seconds_bucket{topic=\"s\",le=";
        format!(
            "{h}\"1\"}} {le_1}\n{h}\"5\"}} {le_5}\n{h}\"+Inf\"}} {all}\n\
             sluice_processor_visible_age_seconds_bucket{{topic=\"dlq\",le=\"+Inf\"}} 1000\n\
             process_cpu_seconds_total {cpu}\nsluice_processor_messages_total{{outcome=\"ok\"}} {records}\n"
        )
    }

    #[test]
    fn processors_that_come_go_and_restart_add_up() {
        let mut s = Signals::new("s");
        s.sample([("p1", text(90, 99, 100, 1.0, 100_000).as_str())]);
        // p1 moves on, p2 appears (its whole count is new), then p1 restarts from zero.
        let p99 = s.sample([
            ("p1", text(180, 198, 200, 1.5, 150_000).as_str()),
            ("p2", text(0, 0, 100, 0.5, 50_000).as_str()),
        ]);
        assert_eq!(p99, Some(f64::INFINITY), "half the interval's swaps were over 5 s");
        s.sample([("p1", text(10, 10, 10, 0.1, 10_000).as_str())]);
        let summary = s.summary();
        assert_eq!(summary.swaps_readable, 310.0, "dead letters left out");
        assert_eq!(summary.within_objective, Some(208.0 / 310.0));
        assert_eq!(summary.freshness_p50_seconds, Some(1.0));
        let cost = summary.processor_cpu_us_per_record.expect("records");
        assert!((cost - 2.1e6 / 210_000.0).abs() < 1e-9, "{cost}");
    }
}
