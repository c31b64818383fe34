//! A small seedable pseudo-random generator (xoshiro256**, seeded through
//! SplitMix64).
//!
//! The chain simulator's promise, "same seed → same stream", must survive
//! dependency upgrades, so the generator's output is fixed by this file alone
//! rather than by a crate whose algorithm may change between versions. Only
//! integer arithmetic is used, so every platform draws the same values.

/// Deterministic generator; cloning it forks an identical future.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rng {
    state: [u64; 4],
}

fn splitmix64(x: &mut u64) -> u64 {
    *x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *x;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

impl Rng {
    /// A generator whose whole output is determined by `seed`.
    pub fn seeded(seed: u64) -> Self {
        let mut x = seed;
        let state = [splitmix64(&mut x), splitmix64(&mut x), splitmix64(&mut x), splitmix64(&mut x)];
        Self { state }
    }

    /// An independent generator for sub-stream `stream`, drawn from this one.
    pub fn fork(&mut self, stream: u64) -> Self {
        Self::seeded(self.next_u64() ^ stream.wrapping_mul(0xA24B_AED4_963E_E407))
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        let s = &mut self.state;
        let result = s[1].wrapping_mul(5).rotate_left(7).wrapping_mul(9);
        let t = s[1] << 17;
        s[2] ^= s[0];
        s[3] ^= s[1];
        s[1] ^= s[2];
        s[0] ^= s[3];
        s[2] ^= t;
        s[3] = s[3].rotate_left(45);
        result
    }

    /// Uniform in `0..n` without modulo bias (Lemire's method). `n` must be > 0.
    pub fn below(&mut self, n: u64) -> u64 {
        assert!(n > 0, "Rng::below(0)");
        let threshold = n.wrapping_neg() % n;
        loop {
            let wide = u128::from(self.next_u64()) * u128::from(n);
            if (wide as u64) >= threshold {
                return (wide >> 64) as u64;
            }
        }
    }

    /// Uniform in `lo..=hi`.
    pub fn between(&mut self, lo: u64, hi: u64) -> u64 {
        debug_assert!(lo <= hi);
        match (hi - lo).checked_add(1) {
            Some(span) => lo + self.below(span),
            None => self.next_u64(),
        }
    }

    /// True with probability `parts_per_million / 1_000_000`.
    pub fn chance_ppm(&mut self, parts_per_million: u32) -> bool {
        self.below(1_000_000) < u64::from(parts_per_million)
    }

    /// A uniformly chosen element; `items` must not be empty.
    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len() as u64) as usize]
    }

    /// `N` random bytes.
    pub fn bytes<const N: usize>(&mut self) -> [u8; N] {
        let mut out = [0u8; N];
        for chunk in out.chunks_mut(8) {
            let word = self.next_u64().to_le_bytes();
            chunk.copy_from_slice(&word[..chunk.len()]);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_stream_and_known_first_value() {
        let mut a = Rng::seeded(42);
        let mut b = Rng::seeded(42);
        let first: Vec<u64> = (0..1000).map(|_| a.next_u64()).collect();
        let second: Vec<u64> = (0..1000).map(|_| b.next_u64()).collect();
        assert_eq!(first, second);
        // Pinned so that an accidental change of the algorithm (which would
        // silently change every simulated chain) fails here.
        assert_eq!(first[0], Rng::seeded(42).next_u64());
        assert_ne!(first[0], Rng::seeded(43).next_u64());
        assert_eq!(first[0], 1_546_998_764_402_558_742);
    }

    #[test]
    fn below_is_in_range_and_roughly_uniform() {
        let mut rng = Rng::seeded(7);
        let mut counts = [0u32; 10];
        for _ in 0..100_000 {
            counts[rng.below(10) as usize] += 1;
        }
        for c in counts {
            assert!((9_000..11_000).contains(&c), "bucket count {c}");
        }
        assert_eq!(rng.between(5, 5), 5);
        // The full range must not overflow (span + 1 wraps to 0).
        let _ = rng.between(0, u64::MAX);
    }

    #[test]
    fn chance_ppm_matches_its_rate() {
        let mut rng = Rng::seeded(9);
        let hits = (0..200_000).filter(|_| rng.chance_ppm(50_000)).count();
        assert!((9_000..11_000).contains(&hits), "hits {hits}");
        assert!(!(0..1000).any(|_| rng.chance_ppm(0)));
        assert!((0..1000).all(|_| rng.chance_ppm(1_000_000)));
    }
}
