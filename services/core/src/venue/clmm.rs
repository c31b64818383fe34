//! Concentrated-liquidity AMM layout (Whirlpool-like).
//!
//! Instruction data (42 bytes): an 8-byte discriminator, `amount` (u64),
//! `other_amount_threshold` (u64), `sqrt_price_limit` (u128, Q64.64),
//! `amount_specified_is_input` (bool), `a_to_b` (bool). The program emits a
//! [`Traded`] event carrying the pool's sqrt price before and after the swap
//! and the amounts moved: the price is state that no token balance shows.

use super::{LayoutError, Reader, expect_tag};

const SWAP_WHAT: &str = "concentrated-liquidity swap";
const SWAP_DISCRIMINATOR: [u8; 8] = [0xf8, 0xc6, 0x9e, 0x91, 0xe1, 0x75, 0x87, 0xc8];
const SWAP_LEN: usize = 42;
const TRADED_WHAT: &str = "concentrated-liquidity Traded event";
const TRADED_DISCRIMINATOR: [u8; 8] = [0xe1, 0xca, 0x49, 0xaf, 0x93, 0x2b, 0xa0, 0x96];
const TRADED_LEN: usize = 97;

/// Account positions in a swap instruction.
pub mod accounts {
    pub const TOKEN_PROGRAM: usize = 0;
    /// The trader (signer).
    pub const TOKEN_AUTHORITY: usize = 1;
    /// The pool (whirlpool): the routing key.
    pub const POOL: usize = 2;
    pub const OWNER_ACCOUNT_A: usize = 3;
    pub const VAULT_A: usize = 4;
    pub const OWNER_ACCOUNT_B: usize = 5;
    pub const VAULT_B: usize = 6;
    pub const TICK_ARRAY_0: usize = 7;
    pub const TICK_ARRAY_1: usize = 8;
    pub const TICK_ARRAY_2: usize = 9;
    pub const ORACLE: usize = 10;
    /// Number of accounts the instruction takes.
    pub const COUNT: usize = 11;
}

/// The swap instruction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Swap {
    pub amount: u64,
    pub other_amount_threshold: u64,
    pub sqrt_price_limit: u128,
    pub amount_specified_is_input: bool,
    pub a_to_b: bool,
}

impl Swap {
    /// Instruction data bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(SWAP_LEN);
        out.extend_from_slice(&SWAP_DISCRIMINATOR);
        out.extend_from_slice(&self.amount.to_le_bytes());
        out.extend_from_slice(&self.other_amount_threshold.to_le_bytes());
        out.extend_from_slice(&self.sqrt_price_limit.to_le_bytes());
        out.push(u8::from(self.amount_specified_is_input));
        out.push(u8::from(self.a_to_b));
        out
    }

    /// Parses instruction data.
    pub fn decode(data: &[u8]) -> Result<Self, LayoutError> {
        expect_tag(SWAP_WHAT, data, &SWAP_DISCRIMINATOR)?;
        let mut r = Reader::exact(SWAP_WHAT, data, SWAP_LEN)?;
        r.take::<8>();
        Ok(Self {
            amount: r.u64(),
            other_amount_threshold: r.u64(),
            sqrt_price_limit: r.u128(),
            amount_specified_is_input: r.bool("amount_specified_is_input")?,
            a_to_b: r.bool("a_to_b")?,
        })
    }
}

/// The event a swap emits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Traded {
    /// Raw key of the pool traded on.
    pub pool: [u8; 32],
    pub a_to_b: bool,
    /// Q64.64 sqrt price before and after the swap.
    pub pre_sqrt_price: u128,
    pub post_sqrt_price: u128,
    pub input_amount: u64,
    pub output_amount: u64,
    pub lp_fee: u64,
}

impl Traded {
    /// Event bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(TRADED_LEN);
        out.extend_from_slice(&TRADED_DISCRIMINATOR);
        out.extend_from_slice(&self.pool);
        out.push(u8::from(self.a_to_b));
        out.extend_from_slice(&self.pre_sqrt_price.to_le_bytes());
        out.extend_from_slice(&self.post_sqrt_price.to_le_bytes());
        out.extend_from_slice(&self.input_amount.to_le_bytes());
        out.extend_from_slice(&self.output_amount.to_le_bytes());
        out.extend_from_slice(&self.lp_fee.to_le_bytes());
        out
    }

    /// Parses event bytes.
    pub fn decode(data: &[u8]) -> Result<Self, LayoutError> {
        expect_tag(TRADED_WHAT, data, &TRADED_DISCRIMINATOR)?;
        let mut r = Reader::exact(TRADED_WHAT, data, TRADED_LEN)?;
        r.take::<8>();
        let pool = r.take::<32>();
        let a_to_b = r.bool("a_to_b")?;
        Ok(Self {
            pool,
            a_to_b,
            pre_sqrt_price: r.u128(),
            post_sqrt_price: r.u128(),
            input_amount: r.u64(),
            output_amount: r.u64(),
            lp_fee: r.u64(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn swap_round_trip_and_bool_validation() {
        let ix = Swap {
            amount: 42,
            other_amount_threshold: 40,
            sqrt_price_limit: u128::MAX - 5,
            amount_specified_is_input: true,
            a_to_b: false,
        };
        let mut bytes = ix.encode();
        assert_eq!(bytes.len(), SWAP_LEN);
        assert_eq!(Swap::decode(&bytes), Ok(ix));
        bytes[SWAP_LEN - 1] = 2;
        assert!(matches!(Swap::decode(&bytes), Err(LayoutError::InvalidField { field: "a_to_b", value: 2, .. })));
    }

    #[test]
    fn traded_round_trip_and_wrong_discriminator() {
        let ev = Traded {
            pool: [7; 32],
            a_to_b: true,
            pre_sqrt_price: 1 << 64,
            post_sqrt_price: (1 << 64) - 12345,
            input_amount: 1000,
            output_amount: 990,
            lp_fee: 3,
        };
        let bytes = ev.encode();
        assert_eq!(bytes.len(), TRADED_LEN);
        assert_eq!(Traded::decode(&bytes), Ok(ev));
        // A swap instruction is not an event.
        let swap = Swap {
            amount: 1,
            other_amount_threshold: 1,
            sqrt_price_limit: 1,
            amount_specified_is_input: true,
            a_to_b: true,
        };
        assert!(matches!(Traded::decode(&swap.encode()), Err(LayoutError::UnknownTag { .. })));
        assert!(matches!(Traded::decode(&bytes[..50]), Err(LayoutError::Truncated { .. })));
    }
}
