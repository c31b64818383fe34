//! The readings' families as Prometheus text, written once per poll and served as they
//! are: a scrape copies the last poll's text and never waits for a poll, nor a poll for a
//! scrape, and a scrape costs a copy however many series there are (823,061 series at
//! ten times `lag-scale`). Each family's text is rebuilt whole in every poll, so a series
//! the poll did not set is gone from the next scrape.

use std::collections::HashSet;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex};

/// The families' text of the last published poll, each family's lines together.
pub type Snapshot = Arc<Vec<String>>;

/// A gauge family whose lines a poll writes, each stamped with the poll's time.
#[derive(Debug)]
pub struct Family {
    name: String,
    head: String,
    labels: &'static [&'static str],
    /// The labels' positions in name order, the order they are written in (as the
    /// prometheus crate writes them, so text matched by hand reads the same).
    order: Vec<usize>,
    /// Labels may repeat within a poll (the first value is kept).
    repeats: bool,
    /// Lines carry the poll's time (off for a verdict: see [`Family::verdict`]).
    stamped: bool,
    round: Mutex<Round>,
}

#[derive(Debug, Default)]
struct Round {
    at_ms: i64,
    text: String,
    seen: HashSet<Vec<String>>,
}

impl Family {
    /// `prefix_thing`, a gauge with `labels`. Panics on a name or label name Prometheus
    /// refuses (a programming error, caught by every test that builds the metrics).
    pub fn new(prefix: &str, thing: &str, help: &str, labels: &'static [&'static str]) -> Self {
        let name = format!("{prefix}_{thing}");
        let label_names = labels.iter().map(|l| l.to_string()).collect();
        prometheus::core::Desc::new(name.clone(), help.to_string(), label_names, Default::default())
            .unwrap_or_else(|e| panic!("metric {name}: {e}"));
        let help = help.replace('\\', r"\\").replace('\n', r"\n");
        let head = format!("# HELP {name} {help}\n# TYPE {name} gauge\n");
        let mut order: Vec<usize> = (0..labels.len()).collect();
        order.sort_by_key(|&i| labels[i]);
        Self { name, head, labels, order, repeats: false, stamped: true, round: Mutex::default() }
    }

    /// The same, for a family whose labels several groups set in one poll (a partition's
    /// produce rate, read once per group that reads it).
    pub fn repeating(mut self) -> Self {
        self.repeats = true;
        self
    }

    /// The same, for a verdict: one series at 1 labelled with the current value (a status,
    /// a state, a cause), written without the poll's time. Prometheus marks a series stale
    /// at the first scrape that lacks it only when its samples carry no timestamp; stamped,
    /// the previous value would stay in every query for the 5-minute lookback, beside the
    /// new one, and an alert on it would go on firing after it cleared.
    pub fn verdict(mut self) -> Self {
        self.stamped = false;
        self
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// Starts a poll's lines, stamped `at_ms`.
    pub fn begin(&self, at_ms: i64) {
        let mut round = self.lock();
        round.at_ms = at_ms;
        round.text.clear();
        round.seen.clear();
    }

    /// One series of this poll; `labels` in the order the family names them (written in
    /// name order).
    pub fn set(&self, labels: &[&str], value: f64) {
        debug_assert_eq!(labels.len(), self.labels.len(), "{}: label values", self.name);
        let mut round = self.lock();
        if self.repeats && !round.seen.insert(labels.iter().map(|l| l.to_string()).collect()) {
            return;
        }
        let Round { at_ms, text, .. } = &mut *round;
        if text.is_empty() {
            text.push_str(&self.head);
        }
        text.push_str(&self.name);
        if !labels.is_empty() {
            text.push('{');
            for (n, &i) in self.order.iter().enumerate() {
                if n > 0 {
                    text.push(',');
                }
                text.push_str(self.labels[i]);
                text.push_str("=\"");
                escape_into(text, labels[i]);
                text.push('"');
            }
            text.push('}');
        }
        text.push(' ');
        push_value(text, value);
        if self.stamped {
            let _ = write!(text, " {at_ms}");
        }
        text.push('\n');
    }

    /// The poll's lines (empty when it set none), leaving the family empty.
    pub fn finish(&self) -> String {
        let mut round = self.lock();
        round.seen = HashSet::new();
        std::mem::take(&mut round.text)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Round> {
        self.round.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A label value as the text format quotes it.
fn escape_into(text: &mut String, value: &str) {
    for c in value.chars() {
        match c {
            '\\' => text.push_str(r"\\"),
            '"' => text.push_str("\\\""),
            '\n' => text.push_str(r"\n"),
            c => text.push(c),
        }
    }
}

fn push_value(text: &mut String, value: f64) {
    if value.is_nan() {
        text.push_str("NaN");
    } else if value.is_infinite() {
        text.push_str(if value > 0.0 { "+Inf" } else { "-Inf" });
    } else {
        let _ = write!(text, "{value}");
    }
}

/// The last poll's snapshot, swapped whole by each publish.
#[derive(Debug, Default)]
pub struct Published(Mutex<Snapshot>);

impl Published {
    pub fn swap(&self, families: Vec<String>) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = Arc::new(families);
    }

    pub fn snapshot(&self) -> Snapshot {
        Arc::clone(&self.0.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Appends the snapshot's text to `body`.
    pub fn write(&self, body: &mut Vec<u8>) {
        let snapshot = self.snapshot();
        body.reserve(snapshot.iter().map(String::len).sum());
        for family in snapshot.iter() {
            body.extend_from_slice(family.as_bytes());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_prometheus_text_with_the_poll_s_time_and_escaped_labels() {
        let f = Family::new("kafka", "consumergroup_lag", "Lag.\nRecords \\ behind.", &["topic", "consumergroup"]);
        f.begin(1_700_000_000_123);
        f.set(&["t\\1\nx", "a\"b"], 12.0);
        f.set(&["t", "c"], f64::INFINITY);
        f.set(&["t", "d"], 0.25);
        let text = f.finish();
        let want = "# HELP kafka_consumergroup_lag Lag.\\nRecords \\\\ behind.\n\
                    # TYPE kafka_consumergroup_lag gauge\n\
                    kafka_consumergroup_lag{consumergroup=\"a\\\"b\",topic=\"t\\\\1\\nx\"} 12 1700000000123\n\
                    kafka_consumergroup_lag{consumergroup=\"c\",topic=\"t\"} +Inf 1700000000123\n\
                    kafka_consumergroup_lag{consumergroup=\"d\",topic=\"t\"} 0.25 1700000000123\n";
        assert_eq!(text, want);
        f.begin(5);
        assert_eq!(f.finish(), "", "a poll that sets nothing has no lines, not even the family's head");
    }

    #[test]
    fn a_repeating_family_keeps_the_first_value_and_no_other_repeats() {
        let f = Family::new("sluice_lag", "produce_rate", "Rate.", &["topic", "partition"]).repeating();
        f.begin(1);
        f.set(&["t", "0"], 3.0);
        f.set(&["t", "0"], 4.0);
        f.set(&["t", "1"], 5.0);
        assert_eq!(f.finish().lines().filter(|l| !l.starts_with('#')).count(), 2);
        f.begin(2);
        f.set(&["t", "0"], 6.0);
        assert!(f.finish().contains("{partition=\"0\",topic=\"t\"} 6 2"), "a new poll starts afresh");
    }

    #[test]
    fn a_verdict_carries_no_time_so_prometheus_marks_the_previous_one_stale() {
        let f = Family::new("sluice_lag", "group_cause", "Cause.", &["consumergroup", "cause"]).verdict();
        f.begin(1_700_000_000_123);
        f.set(&["g", "blocked"], 1.0);
        assert!(f.finish().ends_with("sluice_lag_group_cause{cause=\"blocked\",consumergroup=\"g\"} 1\n"));
    }

    #[test]
    #[should_panic(expected = "metric sluice_lag_bad-name")]
    fn a_name_prometheus_refuses_panics_naming_it() {
        Family::new("sluice_lag", "bad-name", "Bad.", &[]);
    }

    #[test]
    fn a_published_snapshot_is_served_whole_until_the_next() {
        let p = Published::default();
        let mut body = b"own\n".to_vec();
        p.write(&mut body);
        assert_eq!(body, b"own\n", "nothing published yet");
        p.swap(vec!["a 1 5\n".into(), "b 2 5\n".into()]);
        let held = p.snapshot();
        p.swap(vec!["a 3 6\n".into()]);
        let mut body = Vec::new();
        p.write(&mut body);
        assert_eq!(
            (held.concat(), String::from_utf8(body).expect("utf-8")),
            ("a 1 5\nb 2 5\n".into(), "a 3 6\n".into())
        );
    }
}
