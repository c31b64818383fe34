//! Venue math: how each pool prices a swap. Integer arithmetic only, with
//! checked operations: a trade the math cannot carry is not made.
//!
//! The processor never runs this code. It reads the outcome from the chain
//! (vault balances, events), exactly as an indexer of a real chain does; the
//! simulator only needs prices that move plausibly and deterministically.

use sluice_core::dex::Venue;
use sluice_core::pool::PoolState;

use crate::world::Pool;

const Q64: u128 = 1 << 64;

/// A swap the pool would make, with the state it leaves behind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quote {
    pub a_to_b: bool,
    pub amount_in: u64,
    pub amount_out: u64,
    pub post: PoolState,
    /// Concentrated liquidity: sqrt price before.
    pub pre_sqrt_price_x64: u128,
    /// Order book: lots filled, fill price, quote atoms before fee, fee.
    pub lots: u64,
    pub price_ticks: u64,
    pub quote_atoms: u64,
    pub fee: u64,
    pub post_mid_ticks: u64,
}

/// Quotes selling up to `amount_in` of token A (`a_to_b`) or B into `pool`.
/// The order book fills whole lots, so it may take less than offered.
pub fn quote(pool: &Pool, a_to_b: bool, amount_in: u64) -> Option<Quote> {
    if amount_in == 0 {
        return None;
    }
    match pool.venue {
        Venue::ConcentratedLiquidity => concentrated(pool, a_to_b, amount_in),
        Venue::OrderBook => order_book(pool, a_to_b, amount_in),
        Venue::ConstantProduct | Venue::Unspecified => constant_product(pool, a_to_b, amount_in),
    }
}

fn after_fee(amount: u64, fee_bps: u32) -> u128 {
    u128::from(amount) * u128::from(10_000 - fee_bps.min(10_000)) / 10_000
}

fn with_reserves(pool: &Pool, a_to_b: bool, amount_in: u64, amount_out: u64) -> Option<PoolState> {
    let s = pool.state;
    let (reserve_a, reserve_b) = if a_to_b {
        (s.reserve_a.checked_add(amount_in)?, s.reserve_b.checked_sub(amount_out)?)
    } else {
        (s.reserve_a.checked_sub(amount_out)?, s.reserve_b.checked_add(amount_in)?)
    };
    if reserve_a == 0 || reserve_b == 0 {
        return None;
    }
    Some(PoolState { reserve_a, reserve_b, ..s })
}

fn plain(a_to_b: bool, amount_in: u64, amount_out: u64, post: PoolState) -> Quote {
    Quote {
        a_to_b,
        amount_in,
        amount_out,
        post,
        pre_sqrt_price_x64: 0,
        lots: 0,
        price_ticks: 0,
        quote_atoms: 0,
        fee: 0,
        post_mid_ticks: 0,
    }
}

fn constant_product(pool: &Pool, a_to_b: bool, amount_in: u64) -> Option<Quote> {
    let s = pool.state;
    let (r_in, r_out) = if a_to_b { (s.reserve_a, s.reserve_b) } else { (s.reserve_b, s.reserve_a) };
    let net = after_fee(amount_in, pool.info.fee_bps);
    let out = u128::from(r_out).checked_mul(net)? / (u128::from(r_in) + net);
    let out = u64::try_from(out).ok().filter(|&o| o > 0)?;
    let post = with_reserves(pool, a_to_b, amount_in, out)?;
    Some(plain(a_to_b, amount_in, out, post))
}

fn concentrated(pool: &Pool, a_to_b: bool, amount_in: u64) -> Option<Quote> {
    let sqrt = pool.state.sqrt_price_x64;
    let l = pool.liquidity;
    let net = after_fee(amount_in, pool.info.fee_bps);
    let (post_sqrt, out) = if a_to_b {
        // Selling A lowers the price: √P' = L·√P / (L + Δx·√P).
        let denominator = l.checked_add(net.checked_mul(sqrt)? / Q64)?;
        let post = l.checked_mul(sqrt)? / denominator;
        (post, l.checked_mul(sqrt.checked_sub(post)?)? / Q64)
    } else {
        // Selling B raises it: √P' = √P + Δy / L.
        let post = sqrt.checked_add(net.checked_mul(Q64)? / l.max(1))?;
        let x = |s: u128| l.checked_mul(Q64).map(|lq| lq / s.max(1));
        (post, x(sqrt)?.checked_sub(x(post)?)?)
    };
    let out = u64::try_from(out).ok().filter(|&o| o > 0)?;
    let mut post = with_reserves(pool, a_to_b, amount_in, out)?;
    if post_sqrt == 0 {
        return None;
    }
    post.sqrt_price_x64 = post_sqrt;
    Some(Quote { pre_sqrt_price_x64: sqrt, ..plain(a_to_b, amount_in, out, post) })
}

fn order_book(pool: &Pool, a_to_b: bool, amount_in: u64) -> Option<Quote> {
    let lot = pool.info.base_lot_size.max(1);
    let tick = pool.info.tick_size.max(1);
    let mid = pool.mid_ticks;
    let fee_bps = u64::from(pool.info.fee_bps);
    // The book rests one tick either side of the mid.
    let (price, lots) = if a_to_b {
        // Ask: sell base into the bids.
        let price = mid.checked_sub(1).filter(|&p| p > 0)?;
        (price, amount_in / lot)
    } else {
        // Bid: spend quote on the asks, fee on top.
        let price = mid + 1;
        let per_lot = price.checked_mul(tick)?;
        (price, amount_in / per_lot.checked_add(per_lot * fee_bps / 10_000)?)
    };
    if lots == 0 {
        return None;
    }
    let base = lots.checked_mul(lot)?;
    let quote_atoms = lots.checked_mul(price)?.checked_mul(tick)?;
    let fee = quote_atoms * fee_bps / 10_000;
    let (amount_in, amount_out) =
        if a_to_b { (base, quote_atoms.checked_sub(fee).filter(|&q| q > 0)?) } else { (quote_atoms + fee, base) };
    let mut post = with_reserves(pool, a_to_b, amount_in, amount_out)?;
    post.last_price_ticks = price;
    // Taking 1% of the base vault moves the mid by 0.5%, at least a tick.
    let impact = (u128::from(mid) * u128::from(base) / (2 * u128::from(pool.state.reserve_a.max(1)))).max(1) as u64;
    let post_mid_ticks = if a_to_b { mid.saturating_sub(impact).max(2) } else { mid.checked_add(impact)? };
    Some(Quote {
        lots,
        price_ticks: price,
        quote_atoms,
        fee,
        post_mid_ticks,
        ..plain(a_to_b, amount_in, amount_out, post)
    })
}

/// Current price (A in B, raw atoms), to lean trades back towards genesis.
pub fn raw_price(pool: &Pool) -> f64 {
    let s = pool.state;
    match pool.venue {
        Venue::ConcentratedLiquidity => {
            let sqrt = s.sqrt_price_x64 as f64 / Q64 as f64;
            sqrt * sqrt
        }
        Venue::OrderBook => pool.mid_ticks as f64 * pool.info.tick_size as f64 / pool.info.base_lot_size.max(1) as f64,
        Venue::ConstantProduct | Venue::Unspecified => s.reserve_b as f64 / s.reserve_a.max(1) as f64,
    }
}
