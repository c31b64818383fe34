//! The board of reference prices (USD per token) read on the hot path.
//!
//! Each swap on a reference pool (e.g. SOL/USDC) writes a price; every swap
//! reads one to compute its USD notional. A reader needs a complete value,
//! not a global order with other memory: each price is one `AtomicU64`
//! holding the f64's bits, written with `Release` and read with `Acquire`.
//! No lock and no `SeqCst` fence anywhere.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

/// USD prices of a fixed set of tokens, by mint.
#[derive(Debug)]
pub struct PriceBoard {
    slots: HashMap<String, AtomicU64>,
}

/// Bits of `f64::NAN`: "no price yet".
const UNKNOWN: u64 = 0x7ff8_0000_0000_0000;

impl PriceBoard {
    /// A board for `mints`, with no prices yet.
    pub fn new<I: IntoIterator<Item = String>>(mints: I) -> Self {
        Self { slots: mints.into_iter().map(|m| (m, AtomicU64::new(UNKNOWN))).collect() }
    }

    /// Sets a token's USD price; ignored for tokens not on the board or for
    /// prices that are not finite and positive.
    pub fn store(&self, mint: &str, usd: f64) {
        if let Some(slot) = self.slots.get(mint)
            && usd.is_finite()
            && usd > 0.0
        {
            slot.store(usd.to_bits(), Ordering::Release);
        }
    }

    /// A token's USD price, if the board has one.
    pub fn load(&self, mint: &str) -> Option<f64> {
        let bits = self.slots.get(mint)?.load(Ordering::Acquire);
        (bits != UNKNOWN).then(|| f64::from_bits(bits))
    }

    /// Whether `mint` is a reference token.
    pub fn tracks(&self, mint: &str) -> bool {
        self.slots.contains_key(mint)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stores_and_loads_whole_values() {
        let board = PriceBoard::new(["SOL".to_string(), "USDC".to_string()]);
        assert_eq!(board.load("SOL"), None);
        board.store("SOL", 151.25);
        board.store("BONK", 1.0); // not on the board
        board.store("USDC", f64::NAN); // rejected
        assert_eq!(board.load("SOL"), Some(151.25));
        assert_eq!(board.load("BONK"), None);
        assert_eq!(board.load("USDC"), None);
        assert!(board.tracks("USDC") && !board.tracks("BONK"));
    }

    #[test]
    fn concurrent_readers_see_only_written_values() {
        let board = std::sync::Arc::new(PriceBoard::new(["SOL".to_string()]));
        let writer = {
            let board = board.clone();
            std::thread::spawn(move || {
                for i in 1..=50_000u32 {
                    board.store("SOL", f64::from(i));
                }
            })
        };
        let mut last = 0.0;
        for _ in 0..50_000 {
            if let Some(p) = board.load("SOL") {
                assert!(p.fract() == 0.0 && (1.0..=50_000.0).contains(&p), "torn value {p}");
                assert!(p >= last, "a single writer's values arrive in order");
                last = p;
            }
        }
        writer.join().expect("writer");
    }
}
