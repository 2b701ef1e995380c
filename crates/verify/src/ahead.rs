//! Hashing a shard a little ahead of the parser that walks it, so that every byte comes from
//! memory once: the hash pulls each stretch into cache, and the parser's reads of headers and
//! metadata in that stretch are cache hits instead of a second trip to memory.

use shardtool_core::{Checksum, ChecksumHasher};

/// How far the hash runs ahead of the parser: well inside a core's L2 cache.
const AHEAD: usize = 512 << 10;

/// The hash catches up only when it is less than this far ahead, so that it runs over at least
/// `AHEAD - REFILL` bytes at a time: the hardware prefetcher then streams from memory, where many
/// small steps (one per member) kept restarting it (measured: a 243 MB tar shard set checked on
/// one thread in 21.0 ms instead of 23.0).
const REFILL: usize = 256 << 10;

/// An XXH3 hash of `bytes`, computed front to back on demand.
pub(crate) struct AheadHasher<'d> {
    bytes: &'d [u8],
    done: usize,
    hasher: ChecksumHasher,
}

impl<'d> AheadHasher<'d> {
    pub(crate) fn new(bytes: &'d [u8]) -> Self {
        Self {
            bytes,
            done: 0,
            hasher: ChecksumHasher::new(),
        }
    }

    /// Makes sure everything before `pos` (and a stretch after it) has been hashed.
    pub(crate) fn cover(&mut self, pos: usize) {
        let len = self.bytes.len();
        if self.done >= pos.saturating_add(REFILL).min(len) {
            return;
        }
        let target = pos.saturating_add(AHEAD).min(len);
        if target > self.done {
            self.hasher.update(&self.bytes[self.done..target]);
            self.done = target;
        }
    }

    /// Hashes what is left and returns the checksum of all of `bytes`.
    pub(crate) fn finish(mut self) -> Checksum {
        self.cover(self.bytes.len());
        self.hasher.checksum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn any_order_of_cover_calls_hashes_the_whole_input_once() {
        let bytes: Vec<u8> = (0..3 * AHEAD + 123).map(|i| (i * 31 % 253) as u8).collect();
        for steps in [
            vec![],
            vec![0, 10, 5, AHEAD, 2 * AHEAD + 7],
            vec![REFILL - 1, REFILL, AHEAD - REFILL + 1, 3 * AHEAD],
            (0..bytes.len()).step_by(25_000).collect(),
            vec![usize::MAX],
        ] {
            let mut h = AheadHasher::new(&bytes);
            for s in steps {
                h.cover(s);
                // Everything before the parser's position is hashed, with room to spare.
                assert!(
                    h.done >= s.saturating_add(REFILL).min(bytes.len()),
                    "at {s}"
                );
            }
            assert_eq!(h.finish(), Checksum::of(&bytes));
        }
    }
}
