//! Hashing a shard a little ahead of the parser that walks it, so that every byte comes from
//! memory once: the hash pulls each stretch into cache, and the parser's reads of headers and
//! metadata in that stretch are cache hits instead of a second trip to memory.

use shardtool_core::{Checksum, ChecksumHasher};

/// How far the hash runs ahead of the parser: well inside a core's L2 cache, and large enough
/// that the hasher's per-call cost is negligible.
const AHEAD: usize = 256 << 10;

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
        let target = pos.saturating_add(AHEAD).min(self.bytes.len());
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
            vec![usize::MAX],
        ] {
            let mut h = AheadHasher::new(&bytes);
            for s in steps {
                h.cover(s);
            }
            assert_eq!(h.finish(), Checksum::of(&bytes));
        }
    }
}
