//! Latency distributions as every result reports them.

use hdrhistogram::Histogram;
use serde::Serialize;

/// Quantiles kept for the distribution plots.
const QUANTILES: [f64; 12] = [0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99, 0.995, 0.999, 0.9995, 0.9999, 1.0];

/// p50…max of a histogram recorded in nanoseconds, and its distribution
/// as (quantile, ns) pairs.
#[derive(Debug, Clone, Serialize)]
pub struct Latency {
    pub p50_ns: u64,
    pub p95_ns: u64,
    pub p99_ns: u64,
    pub p999_ns: u64,
    pub max_ns: u64,
    pub mean_ns: f64,
    pub count: u64,
    pub distribution: Vec<(f64, u64)>,
}

impl Latency {
    pub fn of(h: &Histogram<u64>) -> Self {
        Self {
            p50_ns: h.value_at_quantile(0.50),
            p95_ns: h.value_at_quantile(0.95),
            p99_ns: h.value_at_quantile(0.99),
            p999_ns: h.value_at_quantile(0.999),
            max_ns: h.max(),
            mean_ns: h.mean(),
            count: h.len(),
            distribution: QUANTILES.iter().map(|&q| (q, h.value_at_quantile(q))).collect(),
        }
    }
}

/// A histogram for nanosecond values up to an hour, 3 significant digits.
pub fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 3_600_000_000_000, 3).expect("valid histogram bounds")
}

/// Median, mean and extremes of a few values (per-poll figures).
#[derive(Debug, Clone, Copy, Serialize, Default)]
pub struct Summary {
    pub count: usize,
    pub min: f64,
    pub p50: f64,
    pub mean: f64,
    pub max: f64,
}

impl Summary {
    /// The summary of `values` (all zero when empty); the median of an even
    /// count is the upper middle value.
    pub fn of(values: &[f64]) -> Self {
        let mut sorted = values.to_vec();
        sorted.sort_by(f64::total_cmp);
        let Some((&min, &max)) = sorted.first().zip(sorted.last()) else { return Self::default() };
        let mean = sorted.iter().sum::<f64>() / sorted.len() as f64;
        Self { count: sorted.len(), min, p50: sorted[sorted.len() / 2], mean, max }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn summary_of_a_few_values() {
        let s = super::Summary::of(&[3.0, 1.0, 2.0, 10.0]);
        assert_eq!((s.count, s.min, s.p50, s.mean, s.max), (4, 1.0, 3.0, 4.0, 10.0));
        assert_eq!(super::Summary::of(&[]).count, 0);
    }
}
