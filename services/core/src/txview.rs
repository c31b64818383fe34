//! A borrowed decode of a `ChainTransaction`: strings and bytes point into
//! the record's payload instead of being copied out one allocation each.
//!
//! The processor decodes every record (a multi-hop transaction once per pool
//! it touches), and the owned prost decode of a ~1 KB transaction is about
//! forty allocations and frees: most of the handling path's CPU. This view
//! costs three (account keys, instructions, token balances).
//!
//! It accepts exactly the inputs prost accepts, with the same values: the
//! same wire-type checks, varint limits, UTF-8 checks on every string field,
//! last-one-wins scalars, packed and unpacked repeated `uint32`, unknown
//! fields and groups skipped under prost's recursion limit. Its error says
//! only that the bytes are not a transaction; a caller that reports the
//! reason asks prost for prost's wording (errors are rare, so that costs
//! nothing). `tests/txview.rs` checks the agreement on mutated payloads.

use crate::chain::ChainTransaction;
use crate::route;

/// The payload is not a valid `ChainTransaction`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("not a valid ChainTransaction encoding")]
pub struct ViewError;

/// A transaction whose strings and bytes borrow from its encoding.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TxView<'a> {
    pub slot: u64,
    pub index: u32,
    pub signature: &'a str,
    pub block_time_ms: i64,
    pub account_keys: Vec<&'a str>,
    pub instructions: Vec<InstructionView<'a>>,
    pub token_balances: Vec<BalanceView<'a>>,
}

/// One instruction. Only the first event is kept: it is all recognition reads.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct InstructionView<'a> {
    pub program_id_index: u32,
    pub accounts: Accounts,
    pub data: &'a [u8],
    pub first_event: Option<&'a [u8]>,
}

/// One token balance.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BalanceView<'a> {
    pub account_index: u32,
    pub mint: &'a str,
    pub pre_amount: u64,
    pub post_amount: u64,
}

/// An instruction's account indexes: inline up to [`INLINE_ACCOUNTS`] (every
/// venue's swap fits), on the heap beyond.
#[derive(Debug, Clone, Default)]
pub struct Accounts {
    inline: [u32; INLINE_ACCOUNTS],
    len: usize,
    spilled: Vec<u32>,
}

/// Account indexes an instruction holds without allocating.
pub const INLINE_ACCOUNTS: usize = 16;

impl Accounts {
    pub fn push(&mut self, index: u32) {
        if self.spilled.is_empty() && self.len < INLINE_ACCOUNTS {
            self.inline[self.len] = index;
            self.len += 1;
        } else {
            if self.spilled.is_empty() {
                self.spilled.extend_from_slice(&self.inline[..self.len]);
            }
            self.spilled.push(index);
        }
    }

    pub fn as_slice(&self) -> &[u32] {
        if self.spilled.is_empty() { &self.inline[..self.len] } else { &self.spilled }
    }
}

impl PartialEq for Accounts {
    fn eq(&self, other: &Self) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl Eq for Accounts {}

impl From<&[u32]> for Accounts {
    fn from(indexes: &[u32]) -> Self {
        let mut accounts = Accounts::default();
        for &i in indexes {
            accounts.push(i);
        }
        accounts
    }
}

impl<'a> TxView<'a> {
    /// Decodes `bytes` as prost would, borrowing strings and bytes.
    pub fn decode(bytes: &'a [u8]) -> Result<Self, ViewError> {
        let mut tx = TxView::default();
        tx.decode_into(bytes)?;
        Ok(tx)
    }

    /// [`TxView::decode`] into `self`, reusing its vectors: a batch decodes
    /// all its records into one view without allocating again. On an error
    /// `self` holds a partial decode.
    pub fn decode_into(&mut self, bytes: &'a [u8]) -> Result<(), ViewError> {
        let tx = self;
        (tx.slot, tx.index, tx.signature, tx.block_time_ms) = (0, 0, "", 0);
        tx.account_keys.clear();
        tx.instructions.clear();
        tx.token_balances.clear();
        let mut r = Reader { buf: bytes };
        while !r.buf.is_empty() {
            let (tag, wire) = r.key()?;
            match tag {
                1 => tx.slot = r.varint_field(wire)?,
                2 => tx.index = r.varint_field(wire)? as u32,
                3 => tx.signature = r.string_field(wire)?,
                4 => tx.block_time_ms = r.varint_field(wire)? as i64,
                5 => tx.account_keys.push(r.string_field(wire)?),
                6 => tx.instructions.push(InstructionView::decode(r.message_field(wire)?)?),
                7 => tx.token_balances.push(BalanceView::decode(r.message_field(wire)?)?),
                _ => r.skip(wire, tag, RECURSION_LIMIT)?,
            }
        }
        Ok(())
    }

    /// The view of an owned transaction (tests, replay, the benchmarks).
    pub fn of(tx: &'a ChainTransaction) -> Self {
        TxView {
            slot: tx.slot,
            index: tx.index,
            signature: &tx.signature,
            block_time_ms: tx.block_time_ms,
            account_keys: tx.account_keys.iter().map(String::as_str).collect(),
            instructions: tx
                .instructions
                .iter()
                .map(|ix| InstructionView {
                    program_id_index: ix.program_id_index,
                    accounts: Accounts::from(ix.accounts.as_slice()),
                    data: &ix.data,
                    first_event: ix.events.first().map(Vec::as_slice),
                })
                .collect(),
            token_balances: tx
                .token_balances
                .iter()
                .map(|b| BalanceView {
                    account_index: b.account_index,
                    mint: &b.mint,
                    pre_amount: b.pre_amount,
                    post_amount: b.post_amount,
                })
                .collect(),
        }
    }

    /// The record key `ix` routes to ([`route`]'s rule).
    pub fn instruction_key(&self, ix: &InstructionView<'_>) -> &'a str {
        let key = |index: u32| self.account_keys.get(index as usize).copied();
        route::pool_key(key(ix.program_id_index), ix.accounts.as_slice(), key, self.signature)
    }
}

impl<'a> InstructionView<'a> {
    fn decode(bytes: &'a [u8]) -> Result<Self, ViewError> {
        let mut ix = InstructionView::default();
        let mut r = Reader { buf: bytes };
        while !r.buf.is_empty() {
            let (tag, wire) = r.key()?;
            match tag {
                1 => ix.program_id_index = r.varint_field(wire)? as u32,
                2 if wire == LEN => {
                    // Packed: varints filling exactly the delimited length.
                    let mut packed = Reader { buf: r.len_delimited()? };
                    while !packed.buf.is_empty() {
                        ix.accounts.push(packed.varint()? as u32);
                    }
                }
                2 => ix.accounts.push(r.varint_field(wire)? as u32),
                3 => ix.data = r.bytes_field(wire)?,
                4 => {
                    let event = r.bytes_field(wire)?;
                    ix.first_event.get_or_insert(event);
                }
                _ => r.skip(wire, tag, RECURSION_LIMIT - 1)?,
            }
        }
        Ok(ix)
    }
}

impl<'a> BalanceView<'a> {
    fn decode(bytes: &'a [u8]) -> Result<Self, ViewError> {
        let mut b = BalanceView::default();
        let mut r = Reader { buf: bytes };
        while !r.buf.is_empty() {
            let (tag, wire) = r.key()?;
            match tag {
                1 => b.account_index = r.varint_field(wire)? as u32,
                2 => b.mint = r.string_field(wire)?,
                3 => b.pre_amount = r.varint_field(wire)?,
                4 => b.post_amount = r.varint_field(wire)?,
                _ => r.skip(wire, tag, RECURSION_LIMIT - 1)?,
            }
        }
        Ok(b)
    }
}

/// prost's nesting limit: a top-level unknown field may nest groups this deep,
/// a nested message's one level less.
const RECURSION_LIMIT: u32 = 100;

const VARINT: u8 = 0;
const FIXED64: u8 = 1;
const LEN: u8 = 2;
const START_GROUP: u8 = 3;
const END_GROUP: u8 = 4;
const FIXED32: u8 = 5;

/// Protobuf wire primitives over a shrinking slice.
struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    /// At most ten bytes, the tenth below 2 (no bits past 64).
    fn varint(&mut self) -> Result<u64, ViewError> {
        let mut value = 0u64;
        for (i, &byte) in self.buf.iter().take(10).enumerate() {
            value |= u64::from(byte & 0x7F) << (7 * i);
            if byte < 0x80 {
                if i == 9 && byte >= 2 {
                    return Err(ViewError);
                }
                self.buf = &self.buf[i + 1..];
                return Ok(value);
            }
        }
        Err(ViewError)
    }

    fn key(&mut self) -> Result<(u32, u8), ViewError> {
        let key = self.varint()?;
        if key > u64::from(u32::MAX) {
            return Err(ViewError);
        }
        let wire = (key & 7) as u8;
        let tag = (key as u32) >> 3;
        if wire > FIXED32 || tag == 0 {
            return Err(ViewError);
        }
        Ok((tag, wire))
    }

    fn take(&mut self, len: u64) -> Result<&'a [u8], ViewError> {
        if len > self.buf.len() as u64 {
            return Err(ViewError);
        }
        let (head, tail) = self.buf.split_at(len as usize);
        self.buf = tail;
        Ok(head)
    }

    fn len_delimited(&mut self) -> Result<&'a [u8], ViewError> {
        let len = self.varint()?;
        self.take(len)
    }

    fn varint_field(&mut self, wire: u8) -> Result<u64, ViewError> {
        if wire != VARINT {
            return Err(ViewError);
        }
        self.varint()
    }

    fn bytes_field(&mut self, wire: u8) -> Result<&'a [u8], ViewError> {
        if wire != LEN {
            return Err(ViewError);
        }
        self.len_delimited()
    }

    fn string_field(&mut self, wire: u8) -> Result<&'a str, ViewError> {
        std::str::from_utf8(self.bytes_field(wire)?).map_err(|_| ViewError)
    }

    fn message_field(&mut self, wire: u8) -> Result<&'a [u8], ViewError> {
        self.bytes_field(wire)
    }

    /// Skips an unknown field; `depth` is what is left of the recursion limit.
    fn skip(&mut self, wire: u8, tag: u32, depth: u32) -> Result<(), ViewError> {
        if depth == 0 {
            return Err(ViewError);
        }
        match wire {
            VARINT => self.varint().map(|_| ()),
            FIXED32 => self.take(4).map(|_| ()),
            FIXED64 => self.take(8).map(|_| ()),
            LEN => self.len_delimited().map(|_| ()),
            START_GROUP => loop {
                let (inner_tag, inner_wire) = self.key()?;
                if inner_wire == END_GROUP {
                    return if inner_tag == tag { Ok(()) } else { Err(ViewError) };
                }
                self.skip(inner_wire, inner_tag, depth - 1)?;
            },
            _ => Err(ViewError), // an end-group with no start
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accounts_spill_past_the_inline_capacity_in_order() {
        let indexes: Vec<u32> = (0..40).collect();
        for n in [0, 1, INLINE_ACCOUNTS, INLINE_ACCOUNTS + 1, 40] {
            assert_eq!(Accounts::from(&indexes[..n]).as_slice(), &indexes[..n]);
        }
    }

    #[test]
    fn varints_follow_the_ten_byte_rule() {
        let ok = |b: &[u8]| Reader { buf: b }.varint();
        assert_eq!(ok(&[0x96, 0x01]), Ok(150));
        let max = [0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x01];
        assert_eq!(ok(&max), Ok(u64::MAX));
        let overflow = [0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x02];
        assert_eq!(ok(&overflow), Err(ViewError));
        assert_eq!(ok(&[0x80; 11]), Err(ViewError));
        assert_eq!(ok(&[0x80]), Err(ViewError));
        assert_eq!(ok(&[]), Err(ViewError));
    }
}
