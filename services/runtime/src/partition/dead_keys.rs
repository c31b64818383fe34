//! The keys of one partition whose retries ran out under the dead-letter-key
//! policy ([`crate::retry::Exhausted::DeadLetterKey`]), each with the offset
//! range its records go to the dead-letter topic unhandled: from the record
//! whose retries ran out, until a record of the key redriven from the
//! dead-letter topic arrives (`sluice-ops dlq redrive`), which lifts it.
//!
//! The set travels with the partition's committed offset, in the commit's
//! metadata (`dead=<key hex>@<from>-<until>,...`, see [`DeadKeys::encode`]):
//! a later owner of the partition, after a rebalance or a restart, goes on
//! dead-lettering what the last one did, so a key's records never take
//! effect out of order. Ranges are kept while the committed position may
//! still fall inside them (a replay from there must decide as the first run
//! did) and dropped once it is past their end. Commit metadata is small
//! (the broker's `offset.metadata.max.bytes`, 4096 by default), so the set
//! is bounded: past [`DeadKeys::MAX_ENCODED`] a further exhaustion stalls
//! the partition instead, as the pause policy does.

use std::collections::BTreeMap;
use std::fmt::Write as _;

/// Records of a key at offsets in `from..until` are dead-lettered unhandled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Range {
    from: i64,
    /// Where a redriven record of the key lifted it; open while `None`.
    until: Option<i64>,
}

impl Range {
    fn holds(&self, offset: i64) -> bool {
        self.from <= offset && self.until.is_none_or(|u| offset < u)
    }
}

/// Why commit metadata could not be read as dead keys.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("dead keys in the commit metadata cannot be read: {0:?}")]
pub(crate) struct Unreadable(pub String);

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct DeadKeys {
    keys: BTreeMap<Vec<u8>, Vec<Range>>,
}

impl DeadKeys {
    /// The most the encoded set may take: the broker's default limit on a
    /// commit's metadata (4096 bytes) less room for `generation=<id>;`.
    pub(crate) const MAX_ENCODED: usize = 3_500;

    pub(crate) fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// Where the range holding `key`'s record at `offset` began, if one does.
    pub(crate) fn dead_since(&self, key: &[u8], offset: i64) -> Option<i64> {
        self.keys.get(key)?.iter().find(|r| r.holds(offset)).map(|r| r.from)
    }

    /// Whether one more key (of `key_len` bytes) still fits in the metadata.
    pub(crate) fn has_room(&self, key_len: usize) -> bool {
        self.encode().len() + 2 * key_len + 48 <= Self::MAX_ENCODED
    }

    /// `key`'s records from `from` on are dead-lettered.
    pub(crate) fn kill(&mut self, key: &[u8], from: i64) {
        let ranges = self.keys.entry(key.to_vec()).or_default();
        if !ranges.iter().any(|r| r.holds(from)) {
            ranges.push(Range { from, until: None });
        }
    }

    /// A redriven record of `key` arrived at `at`: its open range ends there.
    pub(crate) fn lift(&mut self, key: &[u8], at: i64) {
        for range in self.keys.get_mut(key).into_iter().flatten() {
            if range.until.is_none() && range.from <= at {
                range.until = Some(at);
            }
        }
    }

    /// Drops the ranges a replay from `position` can no longer reach.
    pub(crate) fn prune(&mut self, position: i64) {
        for ranges in self.keys.values_mut() {
            ranges.retain(|r| r.until.is_none_or(|u| u > position));
        }
        self.keys.retain(|_, ranges| !ranges.is_empty());
    }

    /// `<key hex>@<from>-<until or empty>` entries joined by commas.
    pub(crate) fn encode(&self) -> String {
        let mut out = String::new();
        for (key, ranges) in &self.keys {
            for range in ranges {
                if !out.is_empty() {
                    out.push(',');
                }
                for byte in key {
                    let _ = write!(out, "{byte:02x}");
                }
                let _ = write!(out, "@{}-", range.from);
                if let Some(until) = range.until {
                    let _ = write!(out, "{until}");
                }
            }
        }
        out
    }

    pub(crate) fn decode(text: &str) -> Result<Self, Unreadable> {
        let mut dead = Self::default();
        for entry in text.split(',').filter(|e| !e.is_empty()) {
            let bad = || Unreadable(entry.to_string());
            let (hex, range) = entry.split_once('@').ok_or_else(bad)?;
            let (from, until) = range.split_once('-').ok_or_else(bad)?;
            let key = unhex(hex).ok_or_else(bad)?;
            let from = from.parse().map_err(|_| bad())?;
            let until = if until.is_empty() { None } else { Some(until.parse().map_err(|_| bad())?) };
            dead.keys.entry(key).or_default().push(Range { from, until });
        }
        Ok(dead)
    }
}

fn unhex(hex: &str) -> Option<Vec<u8>> {
    if !hex.len().is_multiple_of(2) {
        return None;
    }
    (0..hex.len()).step_by(2).map(|i| u8::from_str_radix(hex.get(i..i + 2)?, 16).ok()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_dead_from_its_exhaustion_until_a_redriven_record_lifts_it() {
        let mut dead = DeadKeys::default();
        dead.kill(b"pool-a", 10);
        assert_eq!(dead.dead_since(b"pool-a", 9), None, "records before the exhaustion took effect");
        assert_eq!(dead.dead_since(b"pool-a", 10), Some(10));
        assert_eq!(dead.dead_since(b"pool-a", 500), Some(10));
        assert_eq!(dead.dead_since(b"pool-b", 500), None);
        dead.lift(b"pool-a", 700);
        assert_eq!(dead.dead_since(b"pool-a", 699), Some(10), "a replay below the lift decides as before");
        assert_eq!(dead.dead_since(b"pool-a", 700), None);
        dead.kill(b"pool-a", 900);
        assert_eq!(dead.dead_since(b"pool-a", 950), Some(900), "dead again after a second exhaustion");
        dead.prune(699);
        assert_eq!(dead.dead_since(b"pool-a", 699), Some(10), "a replay from 699 meets it");
        dead.prune(700);
        assert_eq!(dead.dead_since(b"pool-a", 699), None, "past the lift: that range is gone");
        assert_eq!(dead.dead_since(b"pool-a", 901), Some(900));
    }

    #[test]
    fn the_set_round_trips_through_commit_metadata_and_bad_text_is_refused() {
        let mut dead = DeadKeys::default();
        dead.kill(&[0x00, 0xff, b','], 3);
        dead.lift(&[0x00, 0xff, b','], 8);
        dead.kill(b"k", 41);
        let text = dead.encode();
        assert_eq!(text, "00ff2c@3-8,6b@41-");
        assert_eq!(DeadKeys::decode(&text), Ok(dead));
        assert_eq!(DeadKeys::decode(""), Ok(DeadKeys::default()));
        for bad in ["6b", "6b@x-", "6@1-", "zz@1-", "6b@1-y"] {
            assert!(DeadKeys::decode(bad).is_err(), "{bad} must not read");
        }
    }

    #[test]
    fn the_set_stays_within_the_brokers_metadata_limit() {
        let mut dead = DeadKeys::default();
        let mut offset = 0;
        while dead.has_room(44) {
            dead.kill(format!("{offset:044}").as_bytes(), offset);
            offset += 1_000_000_007;
        }
        assert!(dead.encode().len() <= DeadKeys::MAX_ENCODED, "{}", dead.encode().len());
        assert!(offset / 1_000_000_007 >= 20, "room for a few dozen 44-byte keys");
    }
}
