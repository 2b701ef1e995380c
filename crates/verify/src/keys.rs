//! The keys of one shard, each once, in shard order: one text buffer with end offsets and a hash
//! table of indices over it, so a sample's key costs no allocation of its own.

use foldhash::fast::RandomState;
use hashbrown::HashTable;
use std::hash::BuildHasher;
use std::ops::Range;

#[derive(Default)]
pub(crate) struct Keys {
    text: String,
    ends: Vec<usize>,
    index: HashTable<usize>,
    hasher: RandomState,
}

impl Keys {
    /// Room for `n` keys (callers cap `n`: it comes from an untrusted count).
    pub(crate) fn with_capacity(n: usize) -> Self {
        Self {
            ends: Vec::with_capacity(n),
            index: HashTable::with_capacity(n),
            ..Self::default()
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.ends.len()
    }

    /// The `i`-th key in insertion order.
    pub(crate) fn get(&self, i: usize) -> &str {
        &self.text[span(&self.ends, i)]
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = &str> {
        (0..self.len()).map(|i| self.get(i))
    }

    /// Adds `key` unless it is there already; returns whether it was added.
    pub(crate) fn insert(&mut self, key: &str) -> bool {
        let Self {
            text,
            ends,
            index,
            hasher,
        } = self;
        let get = |i: usize| &text[span(ends, i)];
        let hash = hasher.hash_one(key);
        if index.find(hash, |&i| get(i) == key).is_some() {
            return false;
        }
        index.insert_unique(hash, ends.len(), |&i| hasher.hash_one(get(i)));
        text.push_str(key);
        ends.push(text.len());
        true
    }
}

/// Where the `i`-th key lies in the text.
fn span(ends: &[usize], i: usize) -> Range<usize> {
    i.checked_sub(1).map_or(0, |p| ends[p])..ends[i]
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn keeps_each_key_once_in_order() {
        let mut k = Keys::with_capacity(2);
        for (key, new) in [
            ("b", true),
            ("a", true),
            ("b", false),
            ("", true),
            ("ab", true),
        ] {
            assert_eq!(k.insert(key), new, "{key:?}");
        }
        assert_eq!(k.iter().collect::<Vec<_>>(), ["b", "a", "", "ab"]);
        assert!(!k.insert("ab") && !k.insert(""));
        // Past the first capacity the table grows and still finds every key.
        for i in 0..1000 {
            assert!(k.insert(&i.to_string()));
        }
        assert!((0..1000).all(|i| !k.insert(&i.to_string())));
        assert_eq!(k.len(), 1004);
    }

    #[test]
    fn agrees_with_a_hash_set_on_random_keys() {
        let mut rng = shardtool_core::SplitMix64::new(7);
        let (mut keys, mut set, mut order) = (Keys::with_capacity(4), HashSet::new(), Vec::new());
        for _ in 0..20_000 {
            // Short keys from a small alphabet, so that many repeat.
            let len = rng.below(4) as usize;
            let key: String = (0..len)
                .map(|_| char::from(b'a' + rng.below(6) as u8))
                .collect();
            let new = set.insert(key.clone());
            assert_eq!(keys.insert(&key), new, "{key:?}");
            if new {
                order.push(key);
            }
        }
        assert!(keys.iter().eq(order.iter().map(String::as_str)));
    }
}
