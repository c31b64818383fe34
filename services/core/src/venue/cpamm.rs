//! Constant-product AMM layout (Raydium-v4-like "swap base in").
//!
//! Instruction data: tag `9` (u8), `amount_in` (u64), `minimum_amount_out`
//! (u64), little-endian, 17 bytes. The program emits no event: the amounts
//! swapped are read from the pool vaults' token balances, as an indexer of
//! such a program does on a real chain.

use super::{LayoutError, Reader, expect_tag};

const WHAT: &str = "constant-product swap";
const TAG: u8 = 9;
const LEN: usize = 17;

/// Account positions in a swap instruction.
pub mod accounts {
    /// The SPL token program.
    pub const TOKEN_PROGRAM: usize = 0;
    /// The pool (AMM id): the routing key.
    pub const POOL: usize = 1;
    /// The pool's signing authority.
    pub const POOL_AUTHORITY: usize = 2;
    /// Vault holding token A reserves.
    pub const VAULT_A: usize = 3;
    /// Vault holding token B reserves.
    pub const VAULT_B: usize = 4;
    /// Trader's account of the token sold.
    pub const USER_SOURCE: usize = 5;
    /// Trader's account of the token bought.
    pub const USER_DESTINATION: usize = 6;
    /// The trader (signer).
    pub const USER_OWNER: usize = 7;
    /// Number of accounts the instruction takes.
    pub const COUNT: usize = 8;
}

/// A swap: sell exactly `amount_in`, receive at least `minimum_amount_out`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SwapBaseIn {
    pub amount_in: u64,
    pub minimum_amount_out: u64,
}

impl SwapBaseIn {
    /// Instruction data bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(LEN);
        out.push(TAG);
        out.extend_from_slice(&self.amount_in.to_le_bytes());
        out.extend_from_slice(&self.minimum_amount_out.to_le_bytes());
        out
    }

    /// Parses instruction data.
    pub fn decode(data: &[u8]) -> Result<Self, LayoutError> {
        expect_tag(WHAT, data, &[TAG])?;
        let mut r = Reader::exact(WHAT, data, LEN)?;
        r.u8();
        Ok(Self { amount_in: r.u64(), minimum_amount_out: r.u64() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let ix = SwapBaseIn { amount_in: 1_234_567, minimum_amount_out: u64::MAX };
        let bytes = ix.encode();
        assert_eq!(bytes.len(), LEN);
        assert_eq!(SwapBaseIn::decode(&bytes), Ok(ix));
    }

    #[test]
    fn rejects_other_tags_and_lengths() {
        let bytes = SwapBaseIn { amount_in: 1, minimum_amount_out: 1 }.encode();
        assert!(matches!(SwapBaseIn::decode(&bytes[..10]), Err(LayoutError::Truncated { len: 10, need: 17, .. })));
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(matches!(SwapBaseIn::decode(&longer), Err(LayoutError::TrailingBytes { .. })));
        let mut other = bytes;
        other[0] = 11;
        assert!(matches!(SwapBaseIn::decode(&other), Err(LayoutError::UnknownTag { .. })));
        assert!(matches!(SwapBaseIn::decode(&[]), Err(LayoutError::Truncated { len: 0, .. })));
    }
}
