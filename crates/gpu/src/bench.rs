//! Measurements for `shardtool bench --device` and `scripts/gpu-check.sh`: the device loader
//! end to end with a simulated training step (delivered GB/s, data wait p50/p99), and plain
//! host-to-device copy bandwidth from pinned and pageable memory.

use crate::backend::Normalize;
use crate::device::Device;
use crate::error::GpuError;
use crate::pipeline::{DeviceLoader, DeviceOptions};
use crate::ring::RingStats;
use shardtool_reader::LoaderBuilder;
use std::time::{Duration, Instant};

/// Options of [`bench()`].
#[derive(Debug, Clone)]
pub struct BenchOptions {
    /// Batch target.
    pub device: Device,
    /// Simulated training step per batch (zero: measure the loader flat out).
    pub step: Duration,
    /// Epochs to run back to back (at least 1); the next epoch's reader starts early.
    pub epochs: u64,
    /// Staging ring size (default: see [`DeviceOptions::ring`]).
    pub ring: Option<usize>,
    /// Batches copied ahead of the consumer (default 2).
    pub in_flight: usize,
    /// Optional on-device normalisation, to include its cost.
    pub normalize: Option<Normalize>,
}

impl Default for BenchOptions {
    fn default() -> Self {
        Self {
            device: Device::Auto,
            step: Duration::ZERO,
            epochs: 1,
            ring: None,
            in_flight: 2,
            normalize: None,
        }
    }
}

/// What [`bench()`] measured.
#[derive(Debug, Clone)]
pub struct BenchReport {
    /// Where batches went, e.g. `cuda:0 (NVIDIA H200)` or `cpu`.
    pub target: String,
    /// Why `auto` ran on the CPU, when it did.
    pub fallback: Option<String>,
    /// Whether the staging buffers were page-locked.
    pub pinned: bool,
    /// The simulated step.
    pub step: Duration,
    /// Batches delivered.
    pub batches: u64,
    /// Samples delivered.
    pub samples: u64,
    /// uint8 bytes moved to the target.
    pub bytes: u64,
    /// Wall time from the first request to the last batch (readers started before).
    pub seconds: f64,
    /// `bytes / seconds` in GB/s (1e9): the loader-delivered host-to-device throughput when
    /// `step` is zero.
    pub delivered_gb_s: f64,
    /// Median data wait per batch: from asking for a batch to its bytes being on the target.
    pub wait_p50: Duration,
    /// 99th-percentile data wait.
    pub wait_p99: Duration,
    /// Longest data wait.
    pub wait_max: Duration,
    /// Staging ring counters (allocations should stay at or below its capacity).
    pub ring: RingStats,
    /// Target buffers allocated.
    pub target_allocations: u64,
}

impl BenchReport {
    /// One line of `key=value` pairs, the format `scripts/gpu-check.sh` records.
    pub fn to_line(&self) -> String {
        format!(
            "target={:?} pinned={} step_ms={:.1} batches={} samples={} bytes={} seconds={:.3} \
             delivered_gb_s={:.3} wait_p50_ms={:.3} wait_p99_ms={:.3} wait_max_ms={:.3} \
             ring_capacity={} ring_allocations={} ring_overflows={} pageable_fallbacks={} \
             target_allocations={}{}",
            self.target,
            self.pinned,
            self.step.as_secs_f64() * 1e3,
            self.batches,
            self.samples,
            self.bytes,
            self.seconds,
            self.delivered_gb_s,
            ms(self.wait_p50),
            ms(self.wait_p99),
            ms(self.wait_max),
            self.ring.capacity,
            self.ring.allocations,
            self.ring.overflows,
            self.ring.pageable_fallbacks,
            self.target_allocations,
            self.fallback
                .as_ref()
                .map(|f| format!(" fallback={f:?}"))
                .unwrap_or_default(),
        )
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Nearest-rank percentile of sorted values.
fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// Runs the device loader over `opts.epochs` epochs (`make(epoch)` builds each epoch's reader,
/// e.g. the CLI's loader flags with `.epoch(e)`), sleeping `opts.step` after each batch as a
/// stand-in for the training step (the GPU is idle during it, the copies of later batches run).
/// Data wait covers `next()` plus waiting for the batch's copy to land on the device.
pub fn bench(
    make: impl FnMut(u64) -> LoaderBuilder + Send + 'static,
    opts: &BenchOptions,
) -> Result<BenchReport, GpuError> {
    let dopts = DeviceOptions {
        device: opts.device,
        ring: opts.ring,
        in_flight: opts.in_flight,
        normalize: opts.normalize,
    };
    let mut loader = DeviceLoader::epochs(make, 0..opts.epochs.max(1), &dopts)?;
    let mut waits = Vec::new();
    let mut samples = 0u64;
    let mut bytes = 0u64;
    let t0 = Instant::now();
    loop {
        let t = Instant::now();
        let Some(batch) = loader.next() else { break };
        let batch = batch?;
        batch.wait_ready()?;
        waits.push(t.elapsed());
        samples += batch.len() as u64;
        bytes += batch.num_bytes() as u64;
        if !opts.step.is_zero() {
            // Sleeping models a GPU step without stealing a core from the reader's workers.
            std::thread::sleep(opts.step);
        }
        drop(batch);
    }
    let seconds = t0.elapsed().as_secs_f64();
    waits.sort_unstable();
    let stats = loader.stats();
    Ok(BenchReport {
        target: loader.target().to_string(),
        fallback: loader.fallback().map(str::to_string),
        pinned: stats.pinned,
        step: opts.step,
        batches: waits.len() as u64,
        samples,
        bytes,
        seconds,
        delivered_gb_s: bytes as f64 / seconds.max(1e-12) / 1e9,
        wait_p50: percentile(&waits, 50.0),
        wait_p99: percentile(&waits, 99.0),
        wait_max: waits.last().copied().unwrap_or_default(),
        ring: stats.ring,
        target_allocations: stats.target_allocations,
    })
}

/// Plain host-to-device copy bandwidth (the ceiling the loader is measured against).
#[derive(Debug, Clone, PartialEq)]
pub struct H2dReport {
    /// The device.
    pub target: String,
    /// Bytes per copy.
    pub bytes: usize,
    /// Timed copies per source.
    pub iters: usize,
    /// From page-locked memory, GB/s (1e9).
    pub pinned_gb_s: f64,
    /// From ordinary (pageable) memory, GB/s.
    pub pageable_gb_s: f64,
}

/// Times `iters` copies of `bytes` from pinned and from pageable host memory to `device`.
/// Errors (typed) when the device is the CPU or not usable: there is no host-to-device copy.
pub fn h2d_bandwidth(device: Device, bytes: usize, iters: usize) -> Result<H2dReport, GpuError> {
    let target = device.resolve()?;
    let (pinned_gb_s, pageable_gb_s) = crate::select::h2d(&target, bytes, iters)?;
    Ok(H2dReport {
        target: target.to_string(),
        bytes,
        iters,
        pinned_gb_s,
        pageable_gb_s,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_nearest_rank() {
        let v: Vec<Duration> = (1..=100).map(Duration::from_millis).collect();
        assert_eq!(percentile(&v, 50.0), Duration::from_millis(50));
        assert_eq!(percentile(&v, 99.0), Duration::from_millis(99));
        assert_eq!(percentile(&[], 99.0), Duration::ZERO);
        assert_eq!(percentile(&v[..1], 99.0), Duration::from_millis(1));
    }

    #[test]
    fn h2d_on_the_cpu_is_an_error_not_a_panic() {
        let e = h2d_bandwidth(Device::Cpu, 1 << 20, 1).unwrap_err();
        assert!(e.to_string().contains("needs a GPU"), "{e}");
    }
}
