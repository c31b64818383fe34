//! Account keys and signatures: base58 text of 32- and 64-byte values, as a
//! Solana-like chain writes them.

use crate::rng::Rng;

/// A fresh random account key (32 bytes, base58).
pub fn random_key(rng: &mut Rng) -> String {
    bs58::encode(rng.bytes::<32>()).into_string()
}

/// A fresh random transaction signature (64 bytes, base58).
pub fn random_signature(rng: &mut Rng) -> String {
    bs58::encode(rng.bytes::<64>()).into_string()
}

/// The 32 raw bytes behind a base58 account key, or `None` when `key` is not
/// one. Venue events carry raw keys; recognition compares them with this.
pub fn key_bytes(key: &str) -> Option<[u8; 32]> {
    let mut out = [0u8; 32];
    match bs58::decode(key).onto(&mut out) {
        Ok(32) => Some(out),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_round_trip_through_base58() {
        let mut rng = Rng::seeded(1);
        let key = random_key(&mut rng);
        let raw = key_bytes(&key).expect("a generated key decodes");
        assert_eq!(bs58::encode(raw).into_string(), key);
        assert_eq!(key_bytes("not base58: 0OIl"), None);
        assert_eq!(key_bytes("1111"), None, "too short to be a key");
        assert!(random_signature(&mut rng).len() > 80);
    }
}
