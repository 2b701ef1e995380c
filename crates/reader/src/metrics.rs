//! Loader metrics: throughput, how long the consumer waited per batch, skipped and slow records.

use serde::Serialize;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

/// A record that took more than 10× the running median and over [`SLOW_FLOOR`] to read or decode.
#[derive(Debug, Clone, Serialize)]
pub struct SlowRecord {
    /// Shard file.
    pub shard: String,
    /// Sample key.
    pub key: String,
    /// Time taken (`time_s`, seconds, in JSON).
    #[serde(rename = "time_s", serialize_with = "shardtool_cache::as_seconds")]
    pub time: Duration,
}

/// A snapshot of the metrics.
#[derive(Debug, Clone, Serialize)]
pub struct Metrics {
    /// Samples delivered in batches.
    pub samples: u64,
    /// Batch bytes assembled.
    pub bytes: u64,
    /// Wall time since the loader started (`elapsed_s`, seconds, in JSON).
    #[serde(rename = "elapsed_s", serialize_with = "shardtool_cache::as_seconds")]
    pub elapsed: Duration,
    /// Samples per second.
    pub samples_per_s: f64,
    /// Bytes per second.
    pub bytes_per_s: f64,
    /// Batches received from the reader threads (each counted once, however many timed-out calls
    /// its wait took; one put back and handed out again counts once).
    pub batches: u64,
    /// Median consumer wait per batch (`wait_p50_s`, seconds, in JSON).
    #[serde(rename = "wait_p50_s", serialize_with = "shardtool_cache::as_seconds")]
    pub wait_p50: Duration,
    /// 99th-percentile consumer wait per batch (`wait_p99_s`, seconds, in JSON).
    #[serde(rename = "wait_p99_s", serialize_with = "shardtool_cache::as_seconds")]
    pub wait_p99: Duration,
    /// Records left out under the skip policy.
    pub corrupt_skipped: u64,
    /// How many records were slow (see [`SlowRecord`]).
    pub slow_count: u64,
    /// The slowest of them, slowest first, at most [`SLOW_KEPT`].
    pub slow_records: Vec<SlowRecord>,
    /// Samples lost under the skip policy because their shard could not be opened or fetched.
    pub lost_samples: u64,
    /// Those shards, each with the error that lost it.
    pub lost_shards: Vec<(String, String)>,
    /// Shard cache activity, for a remote dataset.
    pub cache: Option<shardtool_cache::CacheMetrics>,
}

/// Shared, thread-safe recorder.
#[derive(Default)]
pub(crate) struct MetricsRecorder {
    bytes: AtomicU64,
    corrupt: AtomicU64,
    lost: AtomicU64,
    lost_shards: Mutex<Vec<(String, String)>>,
    waits: Mutex<Vec<Duration>>,
    recent: Mutex<Recent>,
    slow: Mutex<SlowLog>,
}

/// The slow records seen: a count and the slowest few, so a long run keeps bounded memory.
#[derive(Default)]
struct SlowLog {
    count: u64,
    worst: Vec<SlowRecord>,
}

/// A window of recent record times for the running median.
#[derive(Default)]
struct Recent {
    times: Vec<Duration>,
    next: usize,
    median: Duration,
    since_update: usize,
}

const WINDOW: usize = 255;

/// A record is slow only past this absolute time as well as 10× the running median: on a busy
/// machine a worker preempted for a scheduler time slice or two (4 to 25 ms) is not reading a
/// slow record.
pub const SLOW_FLOOR: Duration = Duration::from_millis(50);

/// How many of the slowest records [`Metrics::slow_records`] keeps.
pub const SLOW_KEPT: usize = 5;

impl MetricsRecorder {
    pub(crate) fn add_bytes(&self, bytes: u64) {
        self.bytes.fetch_add(bytes, Ordering::Relaxed);
    }

    pub(crate) fn corrupt(&self) {
        self.corrupt.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts one sample lost with its shard, remembering the shard once.
    pub(crate) fn lost(&self, shard: &str, e: &dyn std::fmt::Display) {
        self.lost.fetch_add(1, Ordering::Relaxed);
        if let Ok(mut l) = self.lost_shards.lock() {
            if !l.iter().any(|(s, _)| s == shard) {
                l.push((shard.to_string(), e.to_string()));
            }
        }
    }

    pub(crate) fn lost_count(&self) -> u64 {
        self.lost.load(Ordering::Relaxed)
    }

    pub(crate) fn corrupt_count(&self) -> u64 {
        self.corrupt.load(Ordering::Relaxed)
    }

    pub(crate) fn wait(&self, d: Duration) {
        if let Ok(mut w) = self.waits.lock() {
            w.push(d);
        }
    }

    pub(crate) fn slow(&self, r: SlowRecord) {
        if let Ok(mut s) = self.slow.lock() {
            s.count += 1;
            let at = s.worst.partition_point(|w| w.time >= r.time);
            if at < SLOW_KEPT {
                s.worst.insert(at, r);
                s.worst.truncate(SLOW_KEPT);
            }
        }
    }

    /// Records one record's time; true when it is slow against the running median.
    pub(crate) fn record_time(&self, d: Duration) -> bool {
        let Ok(mut r) = self.recent.lock() else {
            return false;
        };
        let slow = r.times.len() >= 16 && d > SLOW_FLOOR && d > r.median * 10;
        if r.times.len() < WINDOW {
            r.times.push(d);
        } else {
            let i = r.next;
            r.times[i] = d;
            r.next = (i + 1) % WINDOW;
        }
        r.since_update += 1;
        // Re-sort rarely: the median of a 255-entry window moves slowly.
        if r.since_update >= 32 || r.times.len() <= 32 {
            let mut v = r.times.clone();
            v.sort_unstable();
            r.median = v[v.len() / 2];
            r.since_update = 0;
        }
        slow
    }

    /// The figures so far, `samples` of them delivered (the loader counts what it hands out;
    /// batches still queued are not the consumer's yet).
    pub(crate) fn snapshot(&self, elapsed: Duration, samples: u64) -> Metrics {
        let mut waits = self.waits.lock().map(|w| w.clone()).unwrap_or_default();
        waits.sort_unstable();
        let pct = |p: f64| -> Duration {
            if waits.is_empty() {
                Duration::ZERO
            } else {
                waits[((waits.len() - 1) as f64 * p).round() as usize]
            }
        };
        let bytes = self.bytes.load(Ordering::Relaxed);
        let secs = elapsed.as_secs_f64().max(1e-9);
        Metrics {
            samples,
            bytes,
            elapsed,
            samples_per_s: samples as f64 / secs,
            bytes_per_s: bytes as f64 / secs,
            batches: waits.len() as u64,
            wait_p50: pct(0.5),
            wait_p99: pct(0.99),
            corrupt_skipped: self.corrupt_count(),
            slow_count: self.slow.lock().map(|s| s.count).unwrap_or_default(),
            slow_records: self
                .slow
                .lock()
                .map(|s| s.worst.clone())
                .unwrap_or_default(),
            lost_samples: self.lost_count(),
            lost_shards: self
                .lost_shards
                .lock()
                .map(|s| s.clone())
                .unwrap_or_default(),
            cache: None,
        }
    }
}

/// What a loader's metrics are taken from, shared with threads that do not hold the loader (a
/// monitoring thread beside the one iterating it): [`crate::Loader::metrics_source`].
#[derive(Clone)]
pub struct MetricsSource {
    recorder: std::sync::Arc<MetricsRecorder>,
    started: std::time::Instant,
    delivered: std::sync::Arc<AtomicU64>,
    // Read for the cache metrics of a remote dataset; weak, so that a source kept after its
    // loader is gone keeps no shard open or leased.
    #[cfg_attr(not(feature = "remote"), allow(dead_code))]
    dataset: std::sync::Weak<crate::Dataset>,
}

impl MetricsSource {
    pub(crate) fn new(
        recorder: std::sync::Arc<MetricsRecorder>,
        dataset: std::sync::Arc<crate::Dataset>,
    ) -> Self {
        Self {
            recorder,
            started: std::time::Instant::now(),
            delivered: Default::default(),
            dataset: std::sync::Arc::downgrade(&dataset),
        }
    }

    /// Samples handed out so far.
    pub(crate) fn delivered(&self) -> u64 {
        self.delivered.load(Ordering::Relaxed)
    }

    pub(crate) fn add_delivered(&self, n: usize) {
        self.delivered.fetch_add(n as u64, Ordering::Relaxed);
    }

    pub(crate) fn sub_delivered(&self, n: usize) {
        let _ = (self.delivered).fetch_update(Ordering::Relaxed, Ordering::Relaxed, |d| {
            Some(d.saturating_sub(n as u64))
        });
    }

    /// The metrics now.
    pub fn metrics(&self) -> Metrics {
        let m = self
            .recorder
            .snapshot(self.started.elapsed(), self.delivered());
        #[cfg(feature = "remote")]
        let m = Metrics {
            cache: (self.dataset.upgrade()).and_then(|d| d.remote().map(|r| r.metrics())),
            ..m
        };
        m
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(key: &str, ms: u64) -> SlowRecord {
        SlowRecord {
            shard: "shard-000000.tar".into(),
            key: key.into(),
            time: Duration::from_millis(ms),
        }
    }

    #[test]
    fn slow_log_counts_all_and_keeps_the_slowest_few_in_order() {
        let m = MetricsRecorder::default();
        for (i, ms) in [60, 300, 70, 900, 55, 120, 80, 400].into_iter().enumerate() {
            m.slow(rec(&format!("k{i}"), ms));
        }
        let snap = m.snapshot(Duration::from_secs(1), 0);
        assert_eq!(snap.slow_count, 8);
        let kept: Vec<u128> = snap
            .slow_records
            .iter()
            .map(|r| r.time.as_millis())
            .collect();
        assert_eq!(kept, [900, 400, 300, 120, 80]);
    }

    #[test]
    fn scheduler_slices_are_not_slow_but_a_long_stall_is() {
        let m = MetricsRecorder::default();
        for _ in 0..64 {
            assert!(!m.record_time(Duration::from_micros(300)));
        }
        // 28× the median, but within a couple of time slices.
        assert!(!m.record_time(Duration::from_micros(8_400)));
        assert!(m.record_time(Duration::from_millis(60)));
    }
}
