//! When a job is due: cron expressions with seconds, evaluated in UTC.
//!
//! The dialect is croner 3's with seconds required (six fields, seconds first;
//! an optional seventh, the year), chosen to read the day fields as Vixie cron
//! and a Kubernetes CronJob do: when both day-of-month and day-of-week are
//! restricted, a day matches either (`0 0 0 13 * FRI` is every 13th *and*
//! every Friday); when either is `*` (or `?`) the other alone decides. A `+`
//! before the day-of-week (croner's extension) asks for both (`+FRI`: Friday
//! the 13th). This is *not* what tokio-cron-scheduler's constructors parse:
//! its `Job::new` and kin set croner's Quartz mode, both fields required.
//! A tick is identified by its nominal UTC instant in Unix
//! milliseconds, computed from the expression alone, never from the moment
//! a timer happened to fire; so every replica names the same tick the same
//! way whatever its timer's phase.

use std::time::Duration;

use chrono::{DateTime, Utc};
use croner::Cron;
use croner::parser::{CronParser, Seconds};

/// A schedule that cannot be used, with its expression.
#[derive(Debug, thiserror::Error)]
pub enum BadSchedule {
    #[error("{expression:?} is not a cron expression with seconds ({source})")]
    NotCron {
        expression: String,
        #[source]
        source: croner::errors::CronError,
    },
    #[error("{expression:?} never fires")]
    NeverFires { expression: String },
}

/// A parsed schedule.
#[derive(Debug, Clone)]
pub struct Schedule {
    cron: Cron,
    expression: String,
    period: Duration,
}

fn at(ms: i64) -> Option<DateTime<Utc>> {
    DateTime::from_timestamp_millis(ms)
}

impl Schedule {
    /// Parses `expression` (six fields, seconds first; a seventh, the year,
    /// is allowed). An expression that never fires is refused.
    pub fn parse(expression: &str) -> Result<Self, BadSchedule> {
        let cron = CronParser::builder()
            .seconds(Seconds::Required)
            .dom_and_dow(false)
            .build()
            .parse(expression)
            .map_err(|source| BadSchedule::NotCron { expression: expression.to_string(), source })?;
        let mut schedule = Self { cron, expression: expression.trim().to_string(), period: Duration::ZERO };
        if schedule.next_after(0).is_none() {
            return Err(BadSchedule::NeverFires { expression: expression.to_string() });
        }
        let ticks = schedule.upcoming(0, 16);
        let shortest = ticks.windows(2).map(|w| w[1] - w[0]).min().unwrap_or(86_400_000);
        schedule.period = Duration::from_millis(shortest.max(1000) as u64);
        Ok(schedule)
    }

    pub fn expression(&self) -> &str {
        &self.expression
    }

    /// The first tick strictly after `after_ms`.
    pub fn next_after(&self, after_ms: i64) -> Option<i64> {
        // Ticks fall on whole seconds: search from the end of the current
        // second so that a sub-second `after_ms` is handled exactly.
        let from = at(after_ms.div_euclid(1000) * 1000)?;
        let next = self.cron.find_next_occurrence(&from, false).ok()?.timestamp_millis();
        if next > after_ms { Some(next) } else { self.next_after(next) }
    }

    /// The latest tick at or before `at_ms`.
    pub fn latest_at_or_before(&self, at_ms: i64) -> Option<i64> {
        let from = at(at_ms.div_euclid(1000) * 1000)?;
        self.cron.find_previous_occurrence(&from, true).ok().map(|t| t.timestamp_millis())
    }

    /// The next `n` ticks after `after_ms`.
    pub fn upcoming(&self, after_ms: i64, n: usize) -> Vec<i64> {
        let mut out = Vec::with_capacity(n);
        let mut cursor = after_ms;
        while out.len() < n {
            match self.next_after(cursor) {
                Some(t) => {
                    out.push(t);
                    cursor = t;
                }
                None => break,
            }
        }
        out
    }

    /// How many ticks lie strictly between `after_ms` and `before_ms`,
    /// counted up to `cap` (a long outage of a per-second job is not walked
    /// tick by tick; past the cap the rest is estimated from the period,
    /// an overcount for irregular schedules), and the last of them.
    pub fn between(&self, after_ms: i64, before_ms: i64, cap: u64) -> (u64, Option<i64>) {
        let mut count = 0;
        let mut last = None;
        let mut cursor = after_ms;
        while let Some(t) = self.next_after(cursor) {
            if t >= before_ms {
                break;
            }
            count += 1;
            last = Some(t);
            if count >= cap {
                // Jump to the last tick before `before_ms`, estimating the rest.
                if let Some(final_tick) = self.latest_at_or_before(before_ms - 1).filter(|f| *f > t) {
                    let period = self.period().as_millis().max(1) as i64;
                    count += ((final_tick - t) / period).max(1) as u64;
                    last = Some(final_tick);
                }
                break;
            }
            cursor = t;
        }
        (count, last)
    }

    /// The shortest gap between consecutive ticks over the first few
    /// occurrences: what claim lifetimes are sized from.
    pub fn period(&self) -> Duration {
        self.period
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(s: &str) -> i64 {
        DateTime::parse_from_rfc3339(s).expect("a time").timestamp_millis()
    }

    #[test]
    fn every_second_and_sub_second_positions() {
        let s = Schedule::parse("* * * * * *").expect("valid");
        let t = ms("2026-03-08T01:59:59Z");
        assert_eq!(s.next_after(t), Some(t + 1000));
        assert_eq!(s.next_after(t + 1), Some(t + 1000), "from inside a second");
        assert_eq!(s.latest_at_or_before(t + 999), Some(t));
        assert_eq!(s.latest_at_or_before(t), Some(t), "inclusive");
        assert_eq!(s.period(), Duration::from_secs(1));
    }

    #[test]
    fn utc_ignores_daylight_saving_transitions() {
        // 02:30 every day: in UTC there is no gap in March nor a repeat in
        // November (US and EU transitions of 2026).
        let s = Schedule::parse("0 30 2 * * *").expect("valid");
        for (after, expected) in [
            ("2026-03-08T00:00:00Z", "2026-03-08T02:30:00Z"),
            ("2026-03-29T00:00:00Z", "2026-03-29T02:30:00Z"),
            ("2026-10-25T02:30:00Z", "2026-10-26T02:30:00Z"),
            ("2026-11-01T00:00:00Z", "2026-11-01T02:30:00Z"),
        ] {
            assert_eq!(s.next_after(ms(after)), Some(ms(expected)), "after {after}");
        }
        let ticks = s.upcoming(ms("2026-10-24T12:00:00Z"), 3);
        assert!(ticks.windows(2).all(|w| w[1] - w[0] == 86_400_000), "exactly a day apart: {ticks:?}");
    }

    #[test]
    fn leap_day_and_day_fields_are_or_combined() {
        let s = Schedule::parse("0 0 12 29 2 *").expect("valid");
        assert_eq!(s.next_after(ms("2026-01-01T00:00:00Z")), Some(ms("2028-02-29T12:00:00Z")));
        // The 1st or any Monday: 2026-06-01 is a Monday, 2026-06-08 too.
        let s = Schedule::parse("0 0 0 1 * MON").expect("valid");
        assert_eq!(
            s.upcoming(ms("2026-05-31T12:00:00Z"), 2),
            vec![ms("2026-06-01T00:00:00Z"), ms("2026-06-08T00:00:00Z")]
        );
    }

    #[test]
    fn restricted_day_fields_match_either_as_in_vixie_cron() {
        let from = ms("2026-01-01T00:00:00Z"); // a Thursday
        let fridays_and_13ths = vec![
            ms("2026-01-02T00:00:00Z"),
            ms("2026-01-09T00:00:00Z"),
            ms("2026-01-13T00:00:00Z"), // a Tuesday
            ms("2026-01-16T00:00:00Z"),
        ];
        assert_eq!(Schedule::parse("0 0 0 13 * FRI").expect("valid").upcoming(from, 4), fridays_and_13ths);
        // tokio-cron-scheduler's reading (croner's Quartz mode) differs: Friday the 13th only.
        let quartz = CronParser::builder().seconds(Seconds::Required).dom_and_dow(true).build();
        let and = quartz.parse("0 0 0 13 * FRI").expect("valid");
        let first = and.find_next_occurrence(&at(from).expect("instant"), false).expect("fires");
        assert_eq!(first.timestamp_millis(), ms("2026-02-13T00:00:00Z"));
        // A `*` (or `?`) day field leaves the other alone to decide; `+` asks for both.
        assert_eq!(
            Schedule::parse("0 0 0 * * FRI").expect("valid").upcoming(from, 2),
            vec![ms("2026-01-02T00:00:00Z"), ms("2026-01-09T00:00:00Z")]
        );
        assert_eq!(
            Schedule::parse("0 0 0 13 * ?").expect("valid").upcoming(from, 2),
            vec![ms("2026-01-13T00:00:00Z"), ms("2026-02-13T00:00:00Z")]
        );
        assert_eq!(
            Schedule::parse("0 0 0 13 * +FRI").expect("valid").upcoming(from, 2),
            vec![ms("2026-02-13T00:00:00Z"), ms("2026-03-13T00:00:00Z")]
        );
    }

    #[test]
    fn bad_expressions_are_refused_with_the_expression() {
        for bad in ["", "* * * * *", "61 * * * * *", "0 0 0 31 2 *"] {
            let err = Schedule::parse(bad).expect_err(bad).to_string();
            assert!(err.contains(&format!("{bad:?}")), "{err}");
        }
    }

    #[test]
    fn counts_ticks_between_with_a_cap() {
        let s = Schedule::parse("*/10 * * * * *").expect("valid");
        let t = ms("2026-01-01T00:00:00Z");
        assert_eq!(s.between(t, t + 60_000, 1000), (5, Some(t + 50_000)));
        assert_eq!(s.between(t, t + 10_000, 1000), (0, None));
        let day = s.between(t, t + 86_400_000, 100);
        assert_eq!(day, (8639, Some(t + 86_390_000)), "estimated past the cap");
    }

    proptest::proptest! {
        #[test]
        fn next_and_latest_agree(start in 1_600_000_000_000i64..1_900_000_000_000i64, step in 1u32..60) {
            let s = Schedule::parse(&format!("*/{step} * * * * *")).expect("valid");
            let next = s.next_after(start).expect("fires");
            proptest::prop_assert!(next > start);
            proptest::prop_assert_eq!(s.latest_at_or_before(next), Some(next));
            let before = s.latest_at_or_before(next - 1).expect("fires");
            proptest::prop_assert!(before <= start, "no tick between {} and {}", start, next);
        }
    }
}
