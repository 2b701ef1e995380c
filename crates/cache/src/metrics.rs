//! Cache metrics: hits, misses, bytes fetched, fetch latency, retries and evictions.
// Parts of this module serve only the fetching side (`remote`).
#![cfg_attr(not(feature = "remote"), allow(dead_code))]

use serde::Serialize;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

/// A snapshot of one dataset's cache activity in this process.
#[derive(Debug, Clone, Default, Serialize)]
pub struct CacheMetrics {
    /// Shards found whole in the cache.
    pub hits: u64,
    /// Shards that had to be fetched (by this process).
    pub misses: u64,
    /// Bytes received from the remote store, retries included.
    pub bytes_fetched: u64,
    /// Whole-shard fetches completed.
    pub fetches: u64,
    /// Median time of a completed shard fetch (`fetch_p50_s` in JSON).
    #[serde(rename = "fetch_p50_s", serialize_with = "as_seconds")]
    pub fetch_p50: Duration,
    /// Slowest completed shard fetch (`fetch_max_s` in JSON).
    #[serde(rename = "fetch_max_s", serialize_with = "as_seconds")]
    pub fetch_max: Duration,
    /// Attempts that failed and were retried.
    pub retries: u64,
    /// Shards given up on after every attempt.
    pub failures: u64,
    /// Cached files found damaged (wrong size or checksum) and fetched again.
    pub repaired: u64,
    /// Shards evicted by this process to stay under the limit.
    pub evictions: u64,
}

/// Serialises a duration as seconds (a float), as metrics are reported in JSON.
pub fn as_seconds<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64())
}

#[derive(Default)]
pub(crate) struct Recorder {
    pub hits: AtomicU64,
    pub misses: AtomicU64,
    pub bytes: AtomicU64,
    pub retries: AtomicU64,
    pub failures: AtomicU64,
    pub repaired: AtomicU64,
    pub evictions: AtomicU64,
    latencies: Mutex<Vec<Duration>>,
}

impl Recorder {
    pub fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    pub fn fetched(&self, took: Duration) {
        self.latencies
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(took);
    }

    pub fn snapshot(&self) -> CacheMetrics {
        let mut l = self
            .latencies
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        l.sort_unstable();
        CacheMetrics {
            hits: self.hits.load(Ordering::Relaxed),
            misses: self.misses.load(Ordering::Relaxed),
            bytes_fetched: self.bytes.load(Ordering::Relaxed),
            fetches: l.len() as u64,
            fetch_p50: l.get(l.len() / 2).copied().unwrap_or_default(),
            fetch_max: l.last().copied().unwrap_or_default(),
            retries: self.retries.load(Ordering::Relaxed),
            failures: self.failures.load(Ordering::Relaxed),
            repaired: self.repaired.load(Ordering::Relaxed),
            evictions: self.evictions.load(Ordering::Relaxed),
        }
    }
}
