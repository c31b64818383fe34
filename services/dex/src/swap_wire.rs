//! A `Swap` record encoded straight from borrowed fields.
//!
//! The owned prost message costs five `String`s (pool, signature, trader,
//! both mints) copied out of the transaction only to be copied again into
//! the encoding and freed: ten allocator calls per swap, about a tenth of a
//! record's handling in the in-process profile. This writes the same bytes
//! as `Swap::encode_to_vec` (proto3: fields in number order, defaults left
//! out, `-0.0` too, as prost does) from `&str`s, in one allocation of the
//! exact size. The property test below holds it to prost's output.

use prost::encoding::{WireType, encode_key, encode_varint, encoded_len_varint, key_len};
use sluice_core::dex::Swap;

/// A `Swap` whose strings borrow from the record it came from.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct SwapFields<'a> {
    pub pool: &'a str,
    pub venue: i32,
    /// (slot, tx_index, ix_index); the message is always present.
    pub sequence: (u64, u32, u32),
    pub signature: &'a str,
    pub trader: &'a str,
    pub mint_in: &'a str,
    pub mint_out: &'a str,
    pub amount_in: u64,
    pub amount_out: u64,
    pub amount_in_ui: f64,
    pub amount_out_ui: f64,
    pub price: f64,
    pub notional_usd: f64,
    pub block_time_ms: i64,
}

impl SwapFields<'_> {
    /// The encoding `Swap::encode_to_vec` gives for these values.
    pub fn encode(&self) -> Vec<u8> {
        let sequence_len = self.sequence_len();
        let strings = [(1, self.pool), (4, self.signature), (5, self.trader), (6, self.mint_in), (7, self.mint_out)];
        let mut len = key_len(3) + encoded_len_varint(sequence_len as u64) + sequence_len;
        len += strings.iter().map(|(tag, s)| string_len(*tag, s)).sum::<usize>();
        len += varint_len(2, self.venue as i64 as u64)
            + varint_len(8, self.amount_in)
            + varint_len(9, self.amount_out)
            + varint_len(14, self.block_time_ms as u64);
        len += [self.amount_in_ui, self.amount_out_ui, self.price, self.notional_usd]
            .iter()
            .map(|&d| if d == 0.0 { 0 } else { 1 + 8 })
            .sum::<usize>();
        let mut buf = Vec::with_capacity(len);
        string(1, self.pool, &mut buf);
        varint(2, self.venue as i64 as u64, &mut buf);
        encode_key(3, WireType::LengthDelimited, &mut buf);
        encode_varint(sequence_len as u64, &mut buf);
        let (slot, tx_index, ix_index) = self.sequence;
        varint(1, slot, &mut buf);
        varint(2, u64::from(tx_index), &mut buf);
        varint(3, u64::from(ix_index), &mut buf);
        for (tag, s) in &strings[1..] {
            string(*tag, s, &mut buf);
        }
        varint(8, self.amount_in, &mut buf);
        varint(9, self.amount_out, &mut buf);
        double(10, self.amount_in_ui, &mut buf);
        double(11, self.amount_out_ui, &mut buf);
        double(12, self.price, &mut buf);
        double(13, self.notional_usd, &mut buf);
        varint(14, self.block_time_ms as u64, &mut buf);
        debug_assert_eq!(buf.len(), len);
        buf
    }

    fn sequence_len(&self) -> usize {
        let (slot, tx_index, ix_index) = self.sequence;
        varint_len(1, slot) + varint_len(2, u64::from(tx_index)) + varint_len(3, u64::from(ix_index))
    }

    /// The owned message with the same values (tests, and readers' view).
    pub fn to_message(&self) -> Swap {
        let (slot, tx_index, ix_index) = self.sequence;
        Swap {
            pool: self.pool.into(),
            venue: self.venue,
            sequence: Some(sluice_core::dex::Sequence { slot, tx_index, ix_index }),
            signature: self.signature.into(),
            trader: self.trader.into(),
            mint_in: self.mint_in.into(),
            mint_out: self.mint_out.into(),
            amount_in: self.amount_in,
            amount_out: self.amount_out,
            amount_in_ui: self.amount_in_ui,
            amount_out_ui: self.amount_out_ui,
            price: self.price,
            notional_usd: self.notional_usd,
            block_time_ms: self.block_time_ms,
        }
    }
}

fn varint_len(tag: u32, value: u64) -> usize {
    if value == 0 { 0 } else { key_len(tag) + encoded_len_varint(value) }
}

fn string_len(tag: u32, s: &str) -> usize {
    if s.is_empty() { 0 } else { key_len(tag) + encoded_len_varint(s.len() as u64) + s.len() }
}

fn varint(tag: u32, value: u64, buf: &mut Vec<u8>) {
    if value != 0 {
        encode_key(tag, WireType::Varint, buf);
        encode_varint(value, buf);
    }
}

fn string(tag: u32, s: &str, buf: &mut Vec<u8>) {
    if !s.is_empty() {
        encode_key(tag, WireType::LengthDelimited, buf);
        encode_varint(s.len() as u64, buf);
        buf.extend_from_slice(s.as_bytes());
    }
}

fn double(tag: u32, value: f64, buf: &mut Vec<u8>) {
    if value != 0.0 {
        encode_key(tag, WireType::SixtyFourBit, buf);
        buf.extend_from_slice(&value.to_le_bytes());
    }
}

#[cfg(test)]
mod tests {
    use prost::Message;
    use sluice_core::rng::Rng;

    use super::*;

    fn text(rng: &mut Rng, pool: &[&'static str]) -> &'static str {
        pool[rng.below(pool.len() as u64) as usize]
    }

    fn number(rng: &mut Rng) -> u64 {
        match rng.below(4) {
            0 => 0,
            1 => rng.below(128),
            2 => u64::MAX - rng.below(3),
            _ => rng.below(u64::MAX),
        }
    }

    fn double(rng: &mut Rng) -> f64 {
        let specials = [0.0, -0.0, f64::NAN, f64::INFINITY, f64::MIN_POSITIVE, -1.5];
        match rng.below(3) {
            0 => specials[rng.below(specials.len() as u64) as usize],
            _ => f64::from_bits(rng.below(u64::MAX)),
        }
    }

    #[test]
    fn encodes_what_prost_encodes() {
        let mut rng = Rng::seeded(11);
        let strings = ["", "p", "9xQeWvG816bUx9EPjHmaT23yvVM2ZWbrrpZb9PusVFin", "é✓", &"k".repeat(200)];
        let strings: Vec<&'static str> = strings.iter().map(|s| &*Box::leak(s.to_string().into_boxed_str())).collect();
        for _ in 0..20_000 {
            let fields = SwapFields {
                pool: text(&mut rng, &strings),
                venue: [0, 1, 3, -1, i32::MAX][rng.below(5) as usize],
                sequence: (number(&mut rng), number(&mut rng) as u32, number(&mut rng) as u32),
                signature: text(&mut rng, &strings),
                trader: text(&mut rng, &strings),
                mint_in: text(&mut rng, &strings),
                mint_out: text(&mut rng, &strings),
                amount_in: number(&mut rng),
                amount_out: number(&mut rng),
                amount_in_ui: double(&mut rng),
                amount_out_ui: double(&mut rng),
                price: double(&mut rng),
                notional_usd: double(&mut rng),
                block_time_ms: number(&mut rng) as i64,
            };
            let ours = fields.encode();
            assert_eq!(ours, fields.to_message().encode_to_vec(), "{fields:?}");
            assert_eq!(ours.capacity(), ours.len(), "one allocation of the exact size");
        }
    }
}
