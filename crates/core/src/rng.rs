//! A tiny seeded generator and shuffle whose output we own, so orders never change with a
//! dependency's version.

/// SplitMix64 (Steele, Lea, Flood 2014): a 64-bit generator that passes BigCrush and is trivially
/// reproducible in any language.
#[derive(Debug, Clone)]
pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    /// A generator started from `seed`.
    pub fn new(seed: u64) -> Self {
        Self { state: seed }
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A uniform integer in `0..bound` (Lemire's multiply-shift with rejection; no modulo bias).
    pub fn below(&mut self, bound: u64) -> u64 {
        assert!(bound > 0, "below(0)");
        let threshold = bound.wrapping_neg() % bound;
        loop {
            let m = u128::from(self.next_u64()) * u128::from(bound);
            if (m as u64) >= threshold {
                return (m >> 64) as u64;
            }
        }
    }
}

/// Shuffles `items` in place with Fisher–Yates driven by `SplitMix64::new(seed)`.
pub fn shuffle<T>(items: &mut [T], seed: u64) {
    let mut rng = SplitMix64::new(seed);
    for i in (1..items.len()).rev() {
        let j = rng.below(i as u64 + 1) as usize;
        items.swap(i, j);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn splitmix_matches_reference_vector() {
        // First outputs for seed 1234567 from the reference C implementation (Vigna's splitmix64.c).
        let mut r = SplitMix64::new(1_234_567);
        assert_eq!(r.next_u64(), 6_457_827_717_110_365_317);
        assert_eq!(r.next_u64(), 3_203_168_211_198_807_973);
    }

    #[test]
    fn shuffle_depends_on_seed() {
        let mut a: Vec<u32> = (0..100).collect();
        let mut b = a.clone();
        shuffle(&mut a, 1);
        shuffle(&mut b, 2);
        assert_ne!(a, b);
        assert_ne!(a, (0..100).collect::<Vec<_>>());
    }

    proptest! {
        #[test]
        fn shuffle_is_a_deterministic_permutation(n in 0usize..500, seed: u64) {
            let mut a: Vec<usize> = (0..n).collect();
            let mut b = a.clone();
            shuffle(&mut a, seed);
            shuffle(&mut b, seed);
            prop_assert_eq!(&a, &b);
            a.sort_unstable();
            prop_assert_eq!(a, (0..n).collect::<Vec<_>>());
        }

        #[test]
        fn below_stays_in_range(bound in 1u64.., seed: u64) {
            let mut r = SplitMix64::new(seed);
            for _ in 0..8 {
                prop_assert!(r.below(bound) < bound);
            }
        }
    }
}
