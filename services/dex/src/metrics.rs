//! The DEX workload's metrics, registered in the runtime's registry.

use prometheus::{IntCounter, IntCounterVec, Opts, Registry};
use sluice_core::dex::Venue;

#[derive(Debug, Clone)]
pub struct DexMetrics {
    pub swaps: IntCounterVec,
    /// `swaps` per venue, resolved once: no label lookup per swap.
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
        let i = match venue {
            Venue::Unspecified => 0,
            Venue::ConstantProduct => 1,
            Venue::ConcentratedLiquidity => 2,
            Venue::OrderBook => 3,
        };
        &self.by_venue[i]
    }

    pub fn register(registry: &Registry) -> prometheus::Result<Self> {
        let counter = |name: &str, help: &str| -> prometheus::Result<IntCounter> {
            let c = IntCounter::new(format!("sluice_processor_{name}"), help)?;
            registry.register(Box::new(c.clone()))?;
            Ok(c)
        };
        let swaps = IntCounterVec::new(
            Opts::new("sluice_processor_swaps_total", "Swaps recognised and published, by venue"),
            &["venue"],
        )?;
        registry.register(Box::new(swaps.clone()))?;
        let by_venue = [
            swaps.with_label_values(&["unspecified"]),
            swaps.with_label_values(&["constant_product"]),
            swaps.with_label_values(&["concentrated_liquidity"]),
            swaps.with_label_values(&["order_book"]),
        ];
        Ok(Self {
            swaps,
            by_venue,
            stale_swaps: counter(
                "stale_swaps_total",
                "Swaps not applied because their pool had already applied them (replays)",
            )?,
            unknown_venue: counter("unknown_venue_instructions_total", "Instructions of unknown programs, skipped")?,
            cache_hits: counter("token_cache_hits_total", "Token registry cache hits")?,
            cache_misses: counter("token_cache_misses_total", "Token registry cache misses (read from Redis)")?,
            cache_evictions: counter("token_cache_evictions_total", "Token registry cache entries evicted")?,
        })
    }
}
