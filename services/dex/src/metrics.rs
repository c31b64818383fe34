//! The DEX workload's metrics, registered in the runtime's registry under the workload's
//! prefix (`sluice_processor_…` for the processor).

use prometheus::{IntCounter, IntCounterVec, Registry};
use sluice_core::dex::Venue;
use sluice_service::label;
use sluice_service::metrics::Registrar;

label! {
    /// `swaps_total{venue}`.
    VenueLabel {
        Unspecified => "unspecified",
        ConstantProduct => "constant_product",
        ConcentratedLiquidity => "concentrated_liquidity",
        OrderBook => "order_book",
    }
}

label! {
    /// `messages_total{outcome}` besides the runtime's `ok` and `dead_lettered`: a record with
    /// no swap, or one whose only programs are unknown venues.
    DexOutcome { NoSwap => "no_swap", UnknownVenue => "unknown_venue" }
}

label! {
    /// `dead_letters_total{kind}` besides recognition's own kinds (`RecognizeError::kind`): a
    /// payload that is no transaction, a record without a UTF-8 key.
    InvalidKind { Decode => "decode", Key => "key" }
}

label! {
    /// `retries_total{dependency}` besides the runtime's: a token the registry does not have yet.
    DexDependency { Registry => "registry" }
}

impl From<Venue> for VenueLabel {
    fn from(venue: Venue) -> Self {
        match venue {
            Venue::Unspecified => Self::Unspecified,
            Venue::ConstantProduct => Self::ConstantProduct,
            Venue::ConcentratedLiquidity => Self::ConcentratedLiquidity,
            Venue::OrderBook => Self::OrderBook,
        }
    }
}

#[derive(Debug, Clone)]
pub struct DexMetrics {
    pub swaps: IntCounterVec,
    /// `swaps` per venue, in `VenueLabel::ALL`'s order, resolved once: no label lookup per swap.
    by_venue: [IntCounter; 4],
    pub stale_swaps: IntCounter,
    pub unknown_venue: IntCounter,
    pub cache_hits: IntCounter,
    pub cache_misses: IntCounter,
    pub cache_evictions: IntCounter,
}

impl DexMetrics {
    /// The swap counter of `venue`.
    pub fn swap_counter(&self, venue: Venue) -> &IntCounter {
        &self.by_venue[VenueLabel::from(venue) as usize]
    }

    /// The series, named `<prefix>_<thing>`, registered in `registry`.
    pub fn new(registry: &Registry, prefix: &str) -> Self {
        let r = Registrar::new(registry, prefix);
        let swaps = r.counters("swaps_total", "Swaps recognised and published, by venue", &["venue"]);
        let by_venue = std::array::from_fn(|i| swaps.with_label_values(&[VenueLabel::ALL[i].as_str()]));
        Self {
            swaps,
            by_venue,
            stale_swaps: r.counter(
                "stale_swaps_total",
                "Swaps not applied because their pool had already applied them (replays)",
            ),
            unknown_venue: r.counter("unknown_venue_instructions_total", "Instructions of unknown programs, skipped"),
            cache_hits: r.counter("token_cache_hits_total", "Token registry cache hits"),
            cache_misses: r.counter("token_cache_misses_total", "Token registry cache misses (read from Redis)"),
            cache_evictions: r.counter("token_cache_evictions_total", "Token registry cache entries evicted"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_venue_counts_under_its_own_label() {
        let registry = Registry::new();
        let m = DexMetrics::new(&registry, "sluice_processor");
        for (n, venue) in [Venue::Unspecified, Venue::ConstantProduct, Venue::ConcentratedLiquidity, Venue::OrderBook]
            .into_iter()
            .enumerate()
        {
            m.swap_counter(venue).inc_by(n as u64 + 1);
        }
        let text = prometheus::TextEncoder::new().encode_to_string(&registry.gather()).expect("text");
        for (venue, n) in
            [("unspecified", 1), ("constant_product", 2), ("concentrated_liquidity", 3), ("order_book", 4)]
        {
            let line = format!("sluice_processor_swaps_total{{venue=\"{venue}\"}} {n}");
            assert!(text.lines().any(|l| l == line), "no {line:?} in:\n{text}");
        }
    }
}
