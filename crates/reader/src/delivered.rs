//! The batches of an epoch delivered so far, kept as a prefix and the delivered batches past
//! it, so that taking the position costs time in the batches past the prefix (a few, in order),
//! not in the batches of the epoch: a position is recorded as each batch is handed out.

use std::collections::BTreeSet;

/// Delivered batches of one loader; with a split, the other shares' batches count as delivered
/// without being stored.
#[derive(Debug, Clone)]
pub(crate) struct Delivered {
    /// Every batch below it is delivered.
    prefix: u64,
    /// This share's delivered batches at or above `prefix`.
    above: BTreeSet<u64>,
    /// This loader's share `(i, n)`: the batches `b` with `b % n == i`.
    split: Option<(u32, u32)>,
    /// The epoch's batches: the prefix never passes it.
    batches: u64,
}

impl Delivered {
    /// `done` delivered (or skipped) already, of an epoch of `batches`, for the share `split`.
    pub(crate) fn new(
        done: impl IntoIterator<Item = u64>,
        split: Option<(u32, u32)>,
        batches: u64,
    ) -> Self {
        let mut d = Self {
            prefix: 0,
            above: BTreeSet::new(),
            split,
            batches,
        };
        let mine: Vec<u64> = done.into_iter().filter(|&b| d.mine(b)).collect();
        d.above.extend(mine);
        d.advance();
        d
    }

    fn mine(&self, b: u64) -> bool {
        self.split
            .is_none_or(|(i, n)| b % u64::from(n.max(1)) == u64::from(i))
    }

    /// Moves the prefix past every delivered batch (another share's are).
    fn advance(&mut self) {
        while self.prefix < self.batches
            && (!self.mine(self.prefix) || self.above.remove(&self.prefix))
        {
            self.prefix += 1;
        }
    }

    /// Whether batch `b` counts as delivered.
    pub(crate) fn contains(&self, b: u64) -> bool {
        !self.mine(b) || b < self.prefix || self.above.contains(&b)
    }

    /// Records batch `b` as delivered.
    pub(crate) fn insert(&mut self, b: u64) {
        if !self.contains(b) {
            self.above.insert(b);
            self.advance();
        }
    }

    /// Records batch `b` as not delivered; whether it was.
    pub(crate) fn remove(&mut self, b: u64) -> bool {
        if !self.mine(b) {
            return false;
        }
        if b < self.prefix {
            // The prefix ends before it now; this share's batches after it stay delivered.
            let after: Vec<u64> = (b + 1..self.prefix).filter(|&x| self.mine(x)).collect();
            self.above.extend(after);
            self.prefix = b;
            return true;
        }
        self.above.remove(&b)
    }

    /// Every batch below it is delivered.
    pub(crate) fn prefix(&self) -> u64 {
        self.prefix
    }

    /// This share's delivered batches past the prefix, ascending.
    pub(crate) fn past_prefix(&self) -> impl Iterator<Item = u64> + '_ {
        self.above.iter().copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The prefix and the batches past it, by the definition: a set of every delivered batch.
    fn by_definition(set: &BTreeSet<u64>, split: Option<(u32, u32)>) -> (u64, Vec<u64>) {
        let mine = |b: u64| split.is_none_or(|(i, n)| b % u64::from(n) == u64::from(i));
        let mut prefix = 0;
        while prefix < 40 && (!mine(prefix) || set.contains(&prefix)) {
            prefix += 1;
        }
        let past = set.range(prefix..).copied().filter(|&b| mine(b)).collect();
        (prefix, past)
    }

    #[test]
    fn prefix_and_past_batches_match_a_plain_set_through_any_deliveries_and_removals() {
        let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for split in [None, Some((0, 1)), Some((1, 3)), Some((2, 3))] {
            for _ in 0..50 {
                let start: BTreeSet<u64> = (0..40).filter(|_| next() % 4 == 0).collect();
                let mut d = Delivered::new(start.iter().copied(), split, 40);
                let mut set = start;
                for _ in 0..200 {
                    let b = next() % 40;
                    if next() % 3 == 0 {
                        let mine = split.is_none_or(|(i, n)| b % u64::from(n) == u64::from(i));
                        assert_eq!(d.remove(b), mine && set.remove(&b));
                    } else {
                        d.insert(b);
                        set.insert(b);
                    }
                    let (prefix, past) = by_definition(&set, split);
                    assert_eq!(d.prefix(), prefix);
                    assert_eq!(d.past_prefix().collect::<Vec<_>>(), past);
                    for x in 0..40 {
                        let mine = split.is_none_or(|(i, n)| x % u64::from(n) == u64::from(i));
                        assert_eq!(d.contains(x), !mine || set.contains(&x));
                    }
                }
            }
        }
    }
}
