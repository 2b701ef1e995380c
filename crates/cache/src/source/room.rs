//! The room a command that reads every shard once needs under the cache's limit: checked
//! before anything is fetched, so that a limit too small is refused saying what would do.

use super::{RemoteDataset, ShardSpec};
use crate::dir::CacheDir;
use crate::CacheError;

impl RemoteDataset {
    /// Fails unless the cache limit can hold `at_once` shards (the largest), each `.zst` one
    /// with its compressed copy while it is decompressed: the room a command needs that reads
    /// every shard once, `at_once` at a time, each held only while it is read
    /// ([`RemoteDataset::acquire_once`]).
    pub fn check_room_one_by_one(&self, at_once: usize) -> Result<(), CacheError> {
        let mut sizes: Vec<u64> = self
            .shared
            .specs
            .iter()
            .map(ShardSpec::fetch_bytes)
            .collect();
        sizes.sort_unstable_by(|a, b| b.cmp(a));
        let at_once = at_once.clamp(1, sizes.len().max(1));
        let need = sizes
            .iter()
            .take(at_once)
            .fold(0u64, |a, &b| a.saturating_add(b));
        let zst = self.shared.specs.iter().any(|s| s.decompressed.is_some());
        match self.shared.cache.limit() {
            Some(limit) if limit < need => Err(CacheError::TooSmall {
                limit,
                message: format!(
                    "shards are read {at_once} at a time, each held in the cache while it is \
                     read{}: up to {need} bytes; raise --cache-limit to at least {need}{}",
                    match zst {
                        true => " (with a .zst one's compressed copy while it is decompressed)",
                        false => "",
                    },
                    if at_once > 1 {
                        ", or read fewer at once (--jobs and --fetch-concurrency)"
                    } else {
                        ""
                    }
                ),
            }),
            _ => Ok(()),
        }
    }

    /// Fails unless the cache limit can hold the shards `indices` names, held at once, those
    /// not cached yet fetched `fetching` at a time, each `.zst` one with its compressed copy
    /// while it is decompressed.
    pub fn check_room(&self, indices: &[usize], fetching: usize) -> Result<(), CacheError> {
        let specs: Vec<&ShardSpec> = indices
            .iter()
            .filter_map(|&i| self.shared.specs.get(i))
            .collect();
        let held: u64 = specs.iter().map(|s| s.cached_bytes()).sum();
        // Only shards not cached whole yet are fetched.
        let to_fetch: Vec<&&ShardSpec> = specs
            .iter()
            .filter(|s| {
                let paths = CacheDir::shard_paths(&self.shared.dir, s.cached_name());
                !CacheDir::is_whole(&paths, s.cached_bytes(), s.cached_checksum()).unwrap_or(false)
            })
            .collect();
        let transient = to_fetch
            .iter()
            .filter(|s| s.decompressed.is_some())
            .map(|s| s.bytes)
            .max()
            .unwrap_or(0);
        let extra = transient.saturating_mul(fetching.clamp(1, to_fetch.len().max(1)) as u64);
        let need = held.saturating_add(extra);
        match self.shared.cache.limit() {
            // Fetching fewer at once helps only where compressed copies need room beside
            // their decompressed ones.
            Some(limit) if limit < need && extra == 0 => Err(CacheError::TooSmall {
                limit,
                message: format!(
                    "the {held} bytes of shards read here are held in the cache at once; raise \
                     --cache-limit to at least {need}"
                ),
            }),
            Some(limit) if limit < need => Err(CacheError::TooSmall {
                limit,
                message: format!(
                    "the {held} bytes of shards read here are held in the cache at once, and \
                     those fetched {fetching} at a time need up to {extra} more while \
                     decompressed; raise --cache-limit to at least {need}{}",
                    if fetching > 1 {
                        ", or fetch fewer at once (--fetch-concurrency)"
                    } else {
                        ""
                    }
                ),
            }),
            _ => Ok(()),
        }
    }
}
