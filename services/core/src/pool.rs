//! Pool state and how a recognised swap changes it.
//!
//! The state is what both sides can observe exactly: vault balances after
//! the swap, the venue's price state (sqrt price or last fill price), and the
//! sequence of the last swap applied. Applying a swap whose sequence is not
//! above the last applied one changes nothing, which is what turns
//! at-least-once delivery into exactly-once effects.

use crate::dex::Venue;
use crate::recognize::SwapFact;
use crate::seq::Seq;

/// A wire-form pool state whose sqrt price is not a number.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("pool {pool}: sqrt_price_x64 {sqrt_price_x64:?}: {source}")]
pub struct BadPoolState {
    pub pool: String,
    pub sqrt_price_x64: String,
    #[source]
    pub source: std::num::ParseIntError,
}

/// The parameters that turn a pool's raw state into a UI price.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PriceParams {
    pub venue: Venue,
    pub decimals_a: u32,
    pub decimals_b: u32,
    /// Order book: quote atoms per base lot per tick.
    pub tick_size: u64,
    /// Order book: base atoms per lot.
    pub base_lot_size: u64,
}

/// The state of one pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PoolState {
    pub reserve_a: u64,
    pub reserve_b: u64,
    /// Concentrated liquidity: sqrt price, Q64.64.
    pub sqrt_price_x64: u128,
    /// Order book: price of the last fill, ticks.
    pub last_price_ticks: u64,
    pub last_applied: Option<Seq>,
    pub swaps_applied: u64,
}

/// Outcome of [`PoolState::apply`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Applied {
    /// The swap advanced the state.
    Changed,
    /// The swap was at or below the last applied sequence: a replay, ignored.
    Stale,
}

/// What one swap leaves its pool with: the observable post-swap state and
/// the swap's sequence. Every store of pool state applies this one shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolUpdate {
    pub seq: Seq,
    pub reserve_a: u64,
    pub reserve_b: u64,
    /// Concentrated liquidity: sqrt price after the swap.
    pub sqrt_price_x64: Option<u128>,
    /// Order book: price of the last fill.
    pub last_price_ticks: Option<u64>,
}

impl From<&SwapFact<'_>> for PoolUpdate {
    fn from(swap: &SwapFact<'_>) -> Self {
        Self {
            seq: swap.seq,
            reserve_a: swap.post_reserve_a,
            reserve_b: swap.post_reserve_b,
            sqrt_price_x64: swap.post_sqrt_price_x64,
            last_price_ticks: swap.last_price_ticks,
        }
    }
}

impl PoolState {
    /// Applies `swap` unless it is not newer than the last swap applied.
    pub fn apply(&mut self, swap: &SwapFact) -> Applied {
        self.apply_update(&PoolUpdate::from(swap))
    }

    /// Applies `update` unless it is not newer than the last swap applied.
    pub fn apply_update(&mut self, update: &PoolUpdate) -> Applied {
        if self.last_applied.is_some_and(|last| update.seq <= last) {
            return Applied::Stale;
        }
        self.reserve_a = update.reserve_a;
        self.reserve_b = update.reserve_b;
        if let Some(sqrt) = update.sqrt_price_x64 {
            self.sqrt_price_x64 = sqrt;
        }
        if let Some(ticks) = update.last_price_ticks {
            self.last_price_ticks = ticks;
        }
        self.last_applied = Some(update.seq);
        self.swaps_applied += 1;
        Applied::Changed
    }

    /// Price of token A in token B, UI units; 0 when the state has none yet.
    pub fn price(&self, p: &PriceParams) -> f64 {
        let scale = 10f64.powi(p.decimals_a as i32 - p.decimals_b as i32);
        match p.venue {
            Venue::ConcentratedLiquidity => {
                let sqrt = self.sqrt_price_x64 as f64 / 18_446_744_073_709_551_616.0;
                sqrt * sqrt * scale
            }
            Venue::OrderBook => {
                if p.base_lot_size == 0 {
                    return 0.0;
                }
                // Quote atoms per base atom, scaled to UI units.
                let raw = (self.last_price_ticks as f64) * (p.tick_size as f64) / (p.base_lot_size as f64);
                raw * scale
            }
            Venue::ConstantProduct | Venue::Unspecified => {
                if self.reserve_a == 0 {
                    return 0.0;
                }
                (self.reserve_b as f64) / (self.reserve_a as f64) * scale
            }
        }
    }

    /// The state a wire-form state describes (what a chain node's `GetPool`
    /// answers); an unparsable sqrt price is an error naming it.
    pub fn from_proto(state: &crate::dex::PoolState) -> Result<Self, BadPoolState> {
        let sqrt_price_x64 = match state.sqrt_price_x64.as_str() {
            "" => 0,
            raw => raw.parse().map_err(|source| BadPoolState {
                pool: state.pool.clone(),
                sqrt_price_x64: raw.to_string(),
                source,
            })?,
        };
        Ok(Self {
            reserve_a: state.reserve_a,
            reserve_b: state.reserve_b,
            sqrt_price_x64,
            last_price_ticks: state.last_price_ticks,
            last_applied: state.last_applied.as_ref().map(Seq::from),
            swaps_applied: state.swaps_applied,
        })
    }

    /// The wire form of this state.
    pub fn to_proto(&self, pool: &str, slot: u64, params: &PriceParams) -> crate::dex::PoolState {
        crate::dex::PoolState {
            pool: pool.to_string(),
            venue: params.venue as i32,
            reserve_a: self.reserve_a,
            reserve_b: self.reserve_b,
            sqrt_price_x64: if params.venue == Venue::ConcentratedLiquidity {
                self.sqrt_price_x64.to_string()
            } else {
                String::new()
            },
            last_price_ticks: self.last_price_ticks,
            last_applied: self.last_applied.map(Into::into),
            swaps_applied: self.swaps_applied,
            price: self.price(params),
            slot,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn swap(slot: u64, tx_index: u32, a: u64, b: u64) -> SwapFact<'static> {
        SwapFact {
            venue: Venue::ConstantProduct,
            seq: Seq { slot, tx_index, ix_index: 0 },
            post_reserve_a: a,
            post_reserve_b: b,
            ..SwapFact::default()
        }
    }

    #[test]
    fn replays_and_older_swaps_change_nothing() {
        let mut state = PoolState::default();
        assert_eq!(state.apply(&swap(5, 1, 100, 200)), Applied::Changed);
        let after_first = state;
        assert_eq!(state.apply(&swap(5, 1, 999, 999)), Applied::Stale);
        assert_eq!(state.apply(&swap(4, 9, 999, 999)), Applied::Stale);
        assert_eq!(state, after_first);
        assert_eq!(state.apply(&swap(5, 2, 110, 190)), Applied::Changed);
        assert_eq!(state.swaps_applied, 2);
        assert_eq!((state.reserve_a, state.reserve_b), (110, 190));
    }

    #[test]
    fn the_wire_form_round_trips() {
        let params = PriceParams {
            venue: Venue::ConcentratedLiquidity,
            decimals_a: 9,
            decimals_b: 6,
            tick_size: 0,
            base_lot_size: 0,
        };
        let state = PoolState {
            reserve_a: 7,
            reserve_b: 9,
            sqrt_price_x64: u128::MAX - 3,
            last_price_ticks: 0,
            last_applied: Some(Seq { slot: 4, tx_index: 2, ix_index: 1 }),
            swaps_applied: 11,
        };
        assert_eq!(PoolState::from_proto(&state.to_proto("p", 4, &params)), Ok(state));
        let mut bad = state.to_proto("p", 4, &params);
        bad.sqrt_price_x64 = "12x".into();
        assert!(PoolState::from_proto(&bad).expect_err("unparsable").to_string().contains("sqrt_price_x64"));
    }

    #[test]
    fn prices_per_venue() {
        let cp = PoolState {
            reserve_a: 1_000_000_000, // 1 SOL (9 decimals)
            reserve_b: 150_000_000,   // 150 USDC (6 decimals)
            ..Default::default()
        };
        let params =
            PriceParams { venue: Venue::ConstantProduct, decimals_a: 9, decimals_b: 6, tick_size: 0, base_lot_size: 0 };
        assert!((cp.price(&params) - 150.0).abs() < 1e-9);

        // sqrt price 2.0 → raw price 4, decimals equal → 4.0.
        let cl = PoolState { sqrt_price_x64: 2u128 << 64, ..Default::default() };
        let cl_params = PriceParams { venue: Venue::ConcentratedLiquidity, decimals_a: 6, decimals_b: 6, ..params };
        assert!((cl.price(&cl_params) - 4.0).abs() < 1e-12);

        // 150_000 ticks × 1 quote atom per lot per tick, lots of 0.001 SOL:
        // 150_000 µUSDC per 0.001 SOL = 150 USDC per SOL.
        let ob = PoolState { last_price_ticks: 150_000, ..Default::default() };
        let ob_params = PriceParams { venue: Venue::OrderBook, tick_size: 1, base_lot_size: 1_000_000, ..params };
        assert!((ob.price(&ob_params) - 150.0).abs() < 1e-9);
    }
}
