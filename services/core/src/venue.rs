//! The venue layouts: how each supported program encodes a swap.
//!
//! Each venue is a program on the chain with its own instruction data,
//! account order and events, the way Raydium, Orca Whirlpool and Phoenix
//! differ on Solana. Each layout has an encoder (used by the chain
//! simulator) and a decoder (used by the processor); decoders never panic:
//! every byte string maps to a value or a typed [`LayoutError`].

pub mod clmm;
pub mod clob;
pub mod cpamm;

use crate::dex::Venue;

/// Program id of the constant-product AMM.
pub const CPAMM_PROGRAM: &str = "CPAMMSwap1111111111111111111111111111111111";
/// Program id of the concentrated-liquidity AMM.
pub const CLMM_PROGRAM: &str = "CLMMSwap11111111111111111111111111111111111";
/// Program id of the central limit order book.
pub const CLOB_PROGRAM: &str = "CLoBSwap11111111111111111111111111111111111";

/// The venue a program id belongs to, or `None` for a program Sluice does
/// not know (such instructions are counted and skipped, never dead-lettered).
pub fn venue_of_program(program_id: &str) -> Option<Venue> {
    match program_id {
        CPAMM_PROGRAM => Some(Venue::ConstantProduct),
        CLMM_PROGRAM => Some(Venue::ConcentratedLiquidity),
        CLOB_PROGRAM => Some(Venue::OrderBook),
        _ => None,
    }
}

/// The program id of a venue.
pub fn program_of_venue(venue: Venue) -> Option<&'static str> {
    match venue {
        Venue::ConstantProduct => Some(CPAMM_PROGRAM),
        Venue::ConcentratedLiquidity => Some(CLMM_PROGRAM),
        Venue::OrderBook => Some(CLOB_PROGRAM),
        Venue::Unspecified => None,
    }
}

/// Position, within an instruction's accounts, of the pool (or market) the
/// instruction acts on, for each venue.
pub fn pool_account_position(venue: Venue) -> usize {
    match venue {
        Venue::ConstantProduct => cpamm::accounts::POOL,
        Venue::ConcentratedLiquidity => clmm::accounts::POOL,
        Venue::OrderBook => clob::accounts::MARKET,
        Venue::Unspecified => 0,
    }
}

/// Why bytes do not decode under a venue layout.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LayoutError {
    /// Fewer bytes than the layout needs.
    #[error("{what}: {len} bytes, layout needs {need}")]
    Truncated { what: &'static str, len: usize, need: usize },
    /// More bytes than the layout has.
    #[error("{what}: {len} bytes, layout has {need}")]
    TrailingBytes { what: &'static str, len: usize, need: usize },
    /// The leading tag or discriminator names another instruction or event.
    #[error("{what}: unknown tag {tag:02x?}")]
    UnknownTag { what: &'static str, tag: Vec<u8> },
    /// A field holds a value the layout does not allow.
    #[error("{what}: invalid {field} {value}")]
    InvalidField { what: &'static str, field: &'static str, value: u64 },
}

/// Little-endian field reader over a fixed-size layout.
#[derive(Debug)]
pub(crate) struct Reader<'a> {
    what: &'static str,
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    /// Checks the total length up front, so field reads cannot run short.
    pub(crate) fn exact(what: &'static str, bytes: &'a [u8], need: usize) -> Result<Self, LayoutError> {
        let len = bytes.len();
        if len < need {
            return Err(LayoutError::Truncated { what, len, need });
        }
        if len > need {
            return Err(LayoutError::TrailingBytes { what, len, need });
        }
        Ok(Self { what, bytes, at: 0 })
    }

    pub(crate) fn take<const N: usize>(&mut self) -> [u8; N] {
        let mut out = [0u8; N];
        out.copy_from_slice(&self.bytes[self.at..self.at + N]);
        self.at += N;
        out
    }

    pub(crate) fn u8(&mut self) -> u8 {
        self.take::<1>()[0]
    }

    pub(crate) fn u64(&mut self) -> u64 {
        u64::from_le_bytes(self.take())
    }

    pub(crate) fn u128(&mut self) -> u128 {
        u128::from_le_bytes(self.take())
    }

    pub(crate) fn bool(&mut self, field: &'static str) -> Result<bool, LayoutError> {
        match self.u8() {
            0 => Ok(false),
            1 => Ok(true),
            v => Err(LayoutError::InvalidField { what: self.what, field, value: u64::from(v) }),
        }
    }
}

/// Checks the leading tag bytes of `bytes` before the full-length check, so
/// that another instruction of the same program reports its tag, not its size.
pub(crate) fn expect_tag(what: &'static str, bytes: &[u8], tag: &[u8]) -> Result<(), LayoutError> {
    match bytes.get(..tag.len()) {
        Some(head) if head == tag => Ok(()),
        Some(head) => Err(LayoutError::UnknownTag { what, tag: head.to_vec() }),
        None => Err(LayoutError::Truncated { what, len: bytes.len(), need: tag.len() }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_venue_has_a_program_and_back() {
        for venue in [Venue::ConstantProduct, Venue::ConcentratedLiquidity, Venue::OrderBook] {
            let program = program_of_venue(venue).expect("known venue");
            assert_eq!(venue_of_program(program), Some(venue));
        }
        assert_eq!(venue_of_program("SomeOtherProgram111"), None);
    }

    #[test]
    fn program_ids_are_valid_base58_keys() {
        for program in [CPAMM_PROGRAM, CLMM_PROGRAM, CLOB_PROGRAM] {
            assert!(bs58::decode(program).into_vec().is_ok(), "{program}");
        }
    }
}
