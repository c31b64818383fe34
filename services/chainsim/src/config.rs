//! What shapes a simulated chain. Every field takes part in determinism:
//! the same config always yields the same chain, transaction for transaction.

use serde::Serialize;

/// Parameters of a simulated chain.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ChainConfig {
    /// Seed of every random draw.
    pub seed: u64,
    /// Block time of slot 0, Unix milliseconds. Live servers default it to
    /// their start time; tests pin it.
    pub genesis_ms: i64,
    /// Slot duration (Solana: 400 ms).
    pub slot_ms: u64,
    /// Average transactions per second outside bursts.
    pub tx_per_sec: u32,
    /// A burst starts every this many slots (0: no bursts).
    pub burst_every_slots: u64,
    /// Length of a burst, slots.
    pub burst_slots: u64,
    /// Rate multiplier during a burst.
    pub burst_factor: u32,
    /// Tokens in the registry (at least the named ones are always there).
    pub tokens: usize,
    /// Pools, spread over the three venue layouts.
    pub pools: usize,
    /// Distinct trader wallets.
    pub traders: usize,
    /// Share of swap transactions that route through 2–3 pools, parts per million.
    pub multi_hop_ppm: u32,
    /// Share of transactions that are malformed, parts per million.
    pub malformed_ppm: u32,
    /// Share of transactions on venues Sluice does not know, parts per million.
    pub unknown_venue_ppm: u32,
}

impl Default for ChainConfig {
    fn default() -> Self {
        Self {
            seed: 1,
            genesis_ms: 1_767_225_600_000, // 2026-01-01T00:00:00Z
            slot_ms: 400,
            tx_per_sec: 1_000,
            burst_every_slots: 150,
            burst_slots: 15,
            burst_factor: 4,
            tokens: 24,
            pools: 64,
            traders: 500,
            multi_hop_ppm: 150_000,
            malformed_ppm: 10_000,
            unknown_venue_ppm: 20_000,
        }
    }
}

/// A chain configuration that cannot run, with the field it names.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct InvalidConfig(pub String);

/// Converts a fraction in `[0, 1]` to parts per million.
pub fn fraction_to_ppm(name: &str, fraction: f64) -> Result<u32, InvalidConfig> {
    if !(0.0..=1.0).contains(&fraction) {
        return Err(InvalidConfig(format!("{name} must be within [0, 1], got {fraction}")));
    }
    Ok((fraction * 1_000_000.0).round() as u32)
}

impl ChainConfig {
    /// Checks the fields against each other; the message names the field.
    pub fn validate(&self) -> Result<(), InvalidConfig> {
        if self.slot_ms == 0 {
            return Err(InvalidConfig("slot_ms must be above 0".into()));
        }
        if self.pools < 3 {
            return Err(InvalidConfig(format!("pools must be at least 3 (one per venue), got {}", self.pools)));
        }
        if self.traders == 0 {
            return Err(InvalidConfig("traders must be above 0".into()));
        }
        if self.burst_every_slots > 0 && self.burst_slots > self.burst_every_slots {
            return Err(InvalidConfig(format!(
                "burst_slots ({}) must not exceed burst_every_slots ({})",
                self.burst_slots, self.burst_every_slots
            )));
        }
        if u64::from(self.malformed_ppm) + u64::from(self.unknown_venue_ppm) > 1_000_000 {
            return Err(InvalidConfig("malformed and unknown-venue fractions add up to more than 1".into()));
        }
        if self.multi_hop_ppm > 1_000_000 {
            return Err(InvalidConfig("multi_hop fraction must be within [0, 1]".into()));
        }
        Ok(())
    }

    /// Transactions in `slot`: the average rate spread exactly over slots
    /// (so no rounding drift), times the burst factor inside a burst.
    pub fn transactions_in_slot(&self, slot: u64) -> u32 {
        let per_slot_x1000 = |s: u64| u128::from(s) * u128::from(self.tx_per_sec) * u128::from(self.slot_ms);
        let base = (per_slot_x1000(slot + 1) / 1_000 - per_slot_x1000(slot) / 1_000) as u32;
        let in_burst =
            self.burst_every_slots > 0 && slot % self.burst_every_slots >= self.burst_every_slots - self.burst_slots;
        if in_burst { base * self.burst_factor } else { base }
    }

    /// Block time of `slot`, Unix milliseconds.
    pub fn block_time_ms(&self, slot: u64) -> i64 {
        self.genesis_ms + (slot * self.slot_ms) as i64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slot_counts_average_to_the_rate_without_drift() {
        let config = ChainConfig { tx_per_sec: 333, burst_every_slots: 0, ..ChainConfig::default() };
        let total: u64 = (0..2_500).map(|s| u64::from(config.transactions_in_slot(s))).sum();
        // 2,500 slots × 0.4 s = 1,000 s at 333/s.
        assert_eq!(total, 333_000);
    }

    #[test]
    fn bursts_multiply_the_rate_at_the_end_of_each_period() {
        let config = ChainConfig {
            tx_per_sec: 1_000,
            burst_every_slots: 10,
            burst_slots: 2,
            burst_factor: 5,
            ..ChainConfig::default()
        };
        let counts: Vec<u32> = (0..10).map(|s| config.transactions_in_slot(s)).collect();
        assert_eq!(counts, vec![400, 400, 400, 400, 400, 400, 400, 400, 2000, 2000]);
    }

    #[test]
    fn validation_names_the_field() {
        let bad = ChainConfig { burst_slots: 200, ..ChainConfig::default() };
        assert!(bad.validate().expect_err("invalid").0.contains("burst_slots"));
        assert!(fraction_to_ppm("malformed", 1.5).expect_err("out of range").0.contains("malformed"));
        assert_eq!(fraction_to_ppm("x", 0.01), Ok(10_000));
        assert!(ChainConfig::default().validate().is_ok());
    }
}
