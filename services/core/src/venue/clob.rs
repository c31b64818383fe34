//! Central-limit-order-book layout (Phoenix-like).
//!
//! Instruction data (27 bytes): tag `0` (swap), order kind `2`
//! (immediate-or-cancel), side (`0` bid = buy base, `1` ask = sell base),
//! `price_in_ticks` limit (u64), `num_base_lots` (u64),
//! `min_base_lots_to_fill` (u64). The program emits a [`FillSummary`] event
//! with what actually filled; one base lot is `base_lot_size` atoms and one
//! lot at one tick costs `tick_size` quote atoms (see the market's info).

use super::{LayoutError, Reader, expect_tag};

const SWAP_WHAT: &str = "order-book swap";
const SWAP_TAG: u8 = 0;
const IMMEDIATE_OR_CANCEL: u8 = 2;
const SWAP_LEN: usize = 27;
const FILL_WHAT: &str = "order-book FillSummary event";
const FILL_TAG: u8 = 6;
const FILL_LEN: usize = 66;

/// Account positions in a swap instruction.
pub mod accounts {
    pub const PROGRAM: usize = 0;
    pub const LOG_AUTHORITY: usize = 1;
    /// The market: the routing key.
    pub const MARKET: usize = 2;
    /// The trader (signer).
    pub const TRADER: usize = 3;
    pub const BASE_ACCOUNT: usize = 4;
    pub const QUOTE_ACCOUNT: usize = 5;
    pub const BASE_VAULT: usize = 6;
    pub const QUOTE_VAULT: usize = 7;
    pub const TOKEN_PROGRAM: usize = 8;
    /// Number of accounts the instruction takes.
    pub const COUNT: usize = 9;
}

/// Side of the taker order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// Buys base with quote.
    Bid,
    /// Sells base for quote.
    Ask,
}

impl Side {
    fn to_byte(self) -> u8 {
        match self {
            Side::Bid => 0,
            Side::Ask => 1,
        }
    }

    fn from_byte(what: &'static str, value: u8) -> Result<Self, LayoutError> {
        match value {
            0 => Ok(Side::Bid),
            1 => Ok(Side::Ask),
            v => Err(LayoutError::InvalidField { what, field: "side", value: u64::from(v) }),
        }
    }
}

/// An immediate-or-cancel taker order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SwapOrder {
    pub side: Side,
    pub price_in_ticks: u64,
    pub num_base_lots: u64,
    pub min_base_lots_to_fill: u64,
}

impl SwapOrder {
    /// Instruction data bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(SWAP_LEN);
        out.push(SWAP_TAG);
        out.push(IMMEDIATE_OR_CANCEL);
        out.push(self.side.to_byte());
        out.extend_from_slice(&self.price_in_ticks.to_le_bytes());
        out.extend_from_slice(&self.num_base_lots.to_le_bytes());
        out.extend_from_slice(&self.min_base_lots_to_fill.to_le_bytes());
        out
    }

    /// Parses instruction data.
    pub fn decode(data: &[u8]) -> Result<Self, LayoutError> {
        expect_tag(SWAP_WHAT, data, &[SWAP_TAG])?;
        let mut r = Reader::exact(SWAP_WHAT, data, SWAP_LEN)?;
        r.u8();
        let kind = r.u8();
        if kind != IMMEDIATE_OR_CANCEL {
            return Err(LayoutError::InvalidField { what: SWAP_WHAT, field: "order kind", value: u64::from(kind) });
        }
        Ok(Self {
            side: Side::from_byte(SWAP_WHAT, r.u8())?,
            price_in_ticks: r.u64(),
            num_base_lots: r.u64(),
            min_base_lots_to_fill: r.u64(),
        })
    }
}

/// What a taker order filled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FillSummary {
    /// Raw key of the market.
    pub market: [u8; 32],
    pub side: Side,
    pub base_lots_filled: u64,
    /// Quote atoms paid or received, before the taker fee.
    pub quote_atoms_filled: u64,
    /// Price of the last fill.
    pub last_price_in_ticks: u64,
    /// Taker fee, quote atoms.
    pub fee_in_quote_atoms: u64,
}

impl FillSummary {
    /// Event bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(FILL_LEN);
        out.push(FILL_TAG);
        out.extend_from_slice(&self.market);
        out.push(self.side.to_byte());
        out.extend_from_slice(&self.base_lots_filled.to_le_bytes());
        out.extend_from_slice(&self.quote_atoms_filled.to_le_bytes());
        out.extend_from_slice(&self.last_price_in_ticks.to_le_bytes());
        out.extend_from_slice(&self.fee_in_quote_atoms.to_le_bytes());
        out
    }

    /// Parses event bytes.
    pub fn decode(data: &[u8]) -> Result<Self, LayoutError> {
        expect_tag(FILL_WHAT, data, &[FILL_TAG])?;
        let mut r = Reader::exact(FILL_WHAT, data, FILL_LEN)?;
        r.u8();
        let market = r.take::<32>();
        Ok(Self {
            market,
            side: Side::from_byte(FILL_WHAT, r.u8())?,
            base_lots_filled: r.u64(),
            quote_atoms_filled: r.u64(),
            last_price_in_ticks: r.u64(),
            fee_in_quote_atoms: r.u64(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn order_round_trip_and_field_checks() {
        let order =
            SwapOrder { side: Side::Ask, price_in_ticks: 150_000, num_base_lots: 12, min_base_lots_to_fill: 12 };
        let bytes = order.encode();
        assert_eq!(bytes.len(), SWAP_LEN);
        assert_eq!(SwapOrder::decode(&bytes), Ok(order));
        let mut bad_kind = bytes.clone();
        bad_kind[1] = 1;
        assert!(matches!(SwapOrder::decode(&bad_kind), Err(LayoutError::InvalidField { field: "order kind", .. })));
        let mut bad_side = bytes;
        bad_side[2] = 9;
        assert!(matches!(SwapOrder::decode(&bad_side), Err(LayoutError::InvalidField { field: "side", value: 9, .. })));
    }

    #[test]
    fn fill_round_trip() {
        let fill = FillSummary {
            market: [3; 32],
            side: Side::Bid,
            base_lots_filled: 5,
            quote_atoms_filled: 750_000,
            last_price_in_ticks: 150_000,
            fee_in_quote_atoms: 75,
        };
        let bytes = fill.encode();
        assert_eq!(bytes.len(), FILL_LEN);
        assert_eq!(FillSummary::decode(&bytes), Ok(fill));
        assert!(matches!(FillSummary::decode(&bytes[1..]), Err(LayoutError::UnknownTag { .. })));
    }
}
