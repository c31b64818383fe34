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
/// one (`bs58`'s verdict: every character in the alphabet, and its leading
/// `1`s, one zero byte each, plus the value's bytes make exactly 32).
/// Venue events carry raw keys; recognition compares them with this, once
/// per swap, so it is arithmetic on eight 32-bit limbs, five characters at a
/// time, rather than `bs58`'s byte-at-a-time decode (about 6% of a record's
/// handling in the in-process profile).
pub fn key_bytes(key: &str) -> Option<[u8; 32]> {
    let text = key.as_bytes();
    let ones = text.iter().take_while(|&&c| c == b'1').count();
    // Big-endian limbs of the value; 58^5 < 2^32, so five digits a step.
    let mut limbs = [0u32; 8];
    for chunk in text.chunks(5) {
        let (mut scale, mut add) = (1u64, 0u64);
        for &c in chunk {
            let digit = DIGITS.get(c as usize).copied().filter(|&d| d != INVALID)?;
            scale *= 58;
            add = add * 58 + u64::from(digit);
        }
        let mut carry = add;
        for limb in limbs.iter_mut().rev() {
            let next = u64::from(*limb) * scale + carry;
            *limb = next as u32;
            carry = next >> 32;
        }
        if carry != 0 {
            return None; // above 2^256
        }
    }
    let mut out = [0u8; 32];
    for (bytes, limb) in out.chunks_exact_mut(4).zip(limbs) {
        bytes.copy_from_slice(&limb.to_be_bytes());
    }
    let significant = 32 - out.iter().take_while(|&&b| b == 0).count();
    (ones + significant == 32).then_some(out)
}

const INVALID: u8 = u8::MAX;

/// Each ASCII byte's base58 digit (Bitcoin's alphabet), `INVALID` if none.
const DIGITS: [u8; 128] = {
    let alphabet = b"123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz";
    let mut digits = [INVALID; 128];
    let mut i = 0;
    while i < alphabet.len() {
        digits[alphabet[i] as usize] = i as u8;
        i += 1;
    }
    digits
};

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

    /// `bs58`'s own verdict on `text` as a 32-byte key.
    fn reference(text: &str) -> Option<[u8; 32]> {
        let mut out = [0u8; 32];
        matches!(bs58::decode(text).onto(&mut out), Ok(32)).then_some(out)
    }

    #[test]
    fn key_bytes_agrees_with_bs58() {
        let mut rng = Rng::seeded(3);
        let alphabet = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz0OIl+é";
        let chars: Vec<char> = alphabet.chars().collect();
        let mut cases = vec![
            String::new(),
            "1".repeat(32),
            "1".repeat(33),
            "1".repeat(31),
            bs58::encode([0xFF; 32]).into_string(),
            bs58::encode([0xFF; 33]).into_string(),
            format!("1{}", bs58::encode([0xFF; 32]).into_string()),
        ];
        for _ in 0..20_000 {
            let mut raw: [u8; 32] = rng.bytes::<32>();
            let zeros = rng.below(34) as usize;
            raw[..zeros.min(32)].fill(0);
            let mut text = bs58::encode(raw).into_string();
            match rng.below(4) {
                0 => {}
                1 => text.insert(0, '1'),
                2 => {
                    let at = rng.below(text.len() as u64 + 1) as usize;
                    text.insert(at, chars[rng.below(chars.len() as u64) as usize]);
                }
                _ => {
                    let n = rng.below(50) as usize;
                    text = (0..n).map(|_| chars[rng.below(chars.len() as u64) as usize]).collect();
                }
            }
            cases.push(text);
        }
        for text in cases {
            assert_eq!(key_bytes(&text), reference(&text), "{text:?}");
        }
    }
}
