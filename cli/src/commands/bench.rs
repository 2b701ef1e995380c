//! `shardtool bench`: the loader alone, then beside a simulated training step; prints the
//! budget table (samples/s, MB/s, CPU-ms per sample, data wait p50/p99).

use crate::commands::read::LoaderArgs;
use crate::Failure;
use anyhow::anyhow;
use std::time::{Duration, Instant};

/// Arguments of `shardtool bench`.
#[derive(Debug, clap::Args)]
pub struct BenchArgs {
    #[command(flatten)]
    pub loader: LoaderArgs,
    /// Simulated training step per batch, in milliseconds (0 skips that run).
    #[arg(long, default_value_t = 0.0, value_name = "T")]
    pub step_ms: f64,
    /// Epochs per run (--epoch, --epoch + 1, …): longer runs for steadier figures on small
    /// datasets. Each epoch opens the dataset again, as a new epoch of training would.
    #[arg(long, default_value_t = 1, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub epochs: u64,
    /// Also run the loader with its batches copied to a device: `cpu` (the CPU twin: reused
    /// buffers, no copy), `auto` (the GPU when there is one, else the CPU, said once) or
    /// `cuda:N` (`cuda` and `gpu` are `cuda:0`, `gpu:N` is `cuda:N`). On a GPU this adds pinned and pageable host-to-device GB/s of a plain copy
    /// loop, the loader's delivered GB/s against them, and data wait with the GPU in the loop.
    /// `cuda:N` needs a binary built with `--features cuda` and a CUDA driver.
    #[arg(long, value_name = "DEVICE")]
    pub device: Option<shardtool_gpu::Device>,
}

struct Row {
    name: String,
    samples: u64,
    secs: f64,
    mb: f64,
    cpu_ms_per_sample: f64,
    p50: Duration,
    p99: Duration,
}

/// The CPU time of every thread of the process so far, to the nanosecond (the clock ticks of
/// `/proc/self/stat`, 10 ms, left short runs at 0).
#[allow(unsafe_code)]
fn cpu_time() -> Duration {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `t` is a valid, writable timespec for the call's duration.
    let ok = unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut t) } == 0;
    match ok {
        true => Duration::new(
            t.tv_sec.max(0) as u64,
            t.tv_nsec.clamp(0, 999_999_999) as u32,
        ),
        false => Duration::ZERO,
    }
}

fn run_once(a: &LoaderArgs, epochs: u64, name: &str, step: Duration) -> Result<Row, Failure> {
    let (mut samples, mut secs, mut cpu, mut bytes) = (0u64, 0f64, 0f64, 0u64);
    let (mut p50, mut p99) = (Duration::ZERO, Duration::ZERO);
    // One buffer pool for every epoch, as a training loop's loader keeps (Python's `Loader`).
    let pool = std::sync::Arc::new(shardtool_reader::CpuAllocator::default());
    for e in 0..epochs {
        // From building the loader, whose workers start reading at once: on a dataset of a batch
        // or two, timing from the first batch measured only the hand-over of finished batches.
        let cpu0 = cpu_time();
        let t0 = Instant::now();
        let mut loader = a
            .builder()?
            .epoch(a.epoch + e)
            .allocator(pool.clone())
            .build()
            .map_err(crate::commands::read::build_failure)?;
        for batch in &mut loader {
            let batch = batch.map_err(Failure::run)?;
            samples += batch.len() as u64;
            if !step.is_zero() {
                // Busy-wait would steal a core from the workers; sleeping models a GPU step.
                std::thread::sleep(step);
            }
        }
        secs += t0.elapsed().as_secs_f64();
        cpu += (cpu_time() - cpu0).as_secs_f64() * 1e3;
        let m = loader.metrics();
        crate::commands::read::report_lost_and_cache(&m);
        bytes += m.bytes;
        // The worst epoch's waits.
        p50 = p50.max(m.wait_p50);
        p99 = p99.max(m.wait_p99);
    }
    Ok(Row {
        name: name.into(),
        samples,
        secs,
        mb: bytes as f64 / 1e6,
        cpu_ms_per_sample: cpu / samples.max(1) as f64,
        p50,
        p99,
    })
}

/// One thread copying the same number of bytes, batch by batch, into a reused buffer: the
/// ceiling a batch assembler that only copies can reach on this machine.
fn memcpy_row(bytes: u64, samples: u64, batch_bytes: usize) -> Row {
    let batch_bytes = batch_bytes.max(1);
    // A source larger than the caches, so the copy streams from memory like page-cache reads.
    let src = vec![1u8; (256usize << 20).max(batch_bytes)];
    let mut dst = vec![0u8; batch_bytes];
    let t0 = Instant::now();
    let mut done = 0u64;
    let mut pos = 0usize;
    while done < bytes {
        let n = batch_bytes.min((bytes - done) as usize);
        if pos + n > src.len() {
            pos = 0;
        }
        dst[..n].copy_from_slice(&src[pos..pos + n]);
        std::hint::black_box(&dst);
        pos += n;
        done += n as u64;
    }
    Row {
        name: "memcpy (1 thread)".into(),
        samples,
        secs: t0.elapsed().as_secs_f64(),
        mb: bytes as f64 / 1e6,
        cpu_ms_per_sample: 0.0,
        p50: Duration::ZERO,
        p99: Duration::ZERO,
    }
}

/// Runs `shardtool bench`.
pub fn run(a: BenchArgs) -> Result<(), Failure> {
    // A minute at most: a simulated step, not a wait of years.
    if !(0.0..=60_000.0).contains(&a.step_ms) {
        return Err(Failure::usage(anyhow!(
            "--step-ms must be 0 to 60000 milliseconds, not {}",
            a.step_ms
        )));
    }
    // An unusable device is a usage error before any work is done.
    if let Some(d) = a.device {
        d.resolve().map_err(Failure::usage)?;
    }
    let alone = run_once(&a.loader, a.epochs, "loader alone", Duration::ZERO)?;
    let batch_bytes = (alone.mb * 1e6 / alone.samples.max(1) as f64) as usize * a.loader.batch;
    let copy = memcpy_row((alone.mb * 1e6) as u64, alone.samples, batch_bytes);
    let ratio = (alone.mb / alone.secs.max(1e-9)) / (copy.mb / copy.secs.max(1e-9));
    let mut rows = vec![alone, copy];
    if a.step_ms > 0.0 {
        let step = Duration::from_secs_f64(a.step_ms / 1e3);
        rows.push(run_once(
            &a.loader,
            a.epochs,
            &format!("with {} ms step", a.step_ms),
            step,
        )?);
    }
    outln!(
        "{:<22} {:>10} {:>12} {:>10} {:>14} {:>12} {:>12}",
        "run",
        "samples",
        "samples/s",
        "MB/s",
        "CPU-ms/sample",
        "wait p50 ms",
        "wait p99 ms"
    );
    for r in rows {
        outln!(
            "{:<22} {:>10} {:>12.0} {:>10.1} {:>14.4} {:>12.3} {:>12.3}",
            r.name,
            r.samples,
            r.samples as f64 / r.secs.max(1e-9),
            r.mb / r.secs.max(1e-9),
            r.cpu_ms_per_sample,
            r.p50.as_secs_f64() * 1e3,
            r.p99.as_secs_f64() * 1e3
        );
    }
    outln!(
        "loader bytes/s as a share of one-thread memcpy: {:.0}%",
        ratio * 100.0
    );
    if let Some(device) = a.device {
        device_bench(&a, device)?;
    }
    Ok(())
}

/// The loader with each batch copied to `device` (pinned staging ring, side-stream copies).
fn device_bench(a: &BenchArgs, device: shardtool_gpu::Device) -> Result<(), Failure> {
    use shardtool_gpu::{BenchOptions, GpuError};
    let fail = |e: GpuError| match e {
        GpuError::Device(_) | GpuError::Options(_) => Failure::usage(e),
        e => Failure::run(e),
    };
    let cache = a.loader.cache.options()?;
    let mut steps = vec![Duration::ZERO];
    if a.step_ms > 0.0 {
        steps.push(Duration::from_secs_f64(a.step_ms / 1e3));
    }
    let location = a.loader.location()?;
    let mut reports = Vec::new();
    for step in steps {
        let (args, cache, first) = (a.loader.clone(), cache.clone(), a.loader.epoch);
        let location = location.clone();
        let opts = BenchOptions {
            device,
            step,
            epochs: a.epochs,
            ..Default::default()
        };
        let r = shardtool_gpu::bench(
            move |e| {
                args.builder_with(location.clone(), cache.clone())
                    .epoch(first + e)
            },
            &opts,
        )
        .map_err(fail)?;
        if reports.is_empty() {
            if let Some(f) = &r.fallback {
                errln!("{f}");
            }
        }
        reports.push(r);
    }
    let h2d = match reports.first().map(|r| r.target.as_str()) {
        Some(t) if t != "cpu" => {
            Some(shardtool_gpu::h2d_bandwidth(device, 64 << 20, 20).map_err(fail)?)
        }
        _ => None,
    };
    outln!();
    outln!(
        "{:<24} {:>10} {:>10} {:>12} {:>12} {:>12} {:>8}",
        "device run",
        "samples",
        "GB/s",
        "wait p50 ms",
        "wait p99 ms",
        "wait max ms",
        "pinned"
    );
    for r in &reports {
        outln!(
            "{:<24} {:>10} {:>10.3} {:>12.3} {:>12.3} {:>12.3} {:>8}",
            format!("{} step {} ms", r.target, r.step.as_millis()),
            r.samples,
            r.delivered_gb_s,
            r.wait_p50.as_secs_f64() * 1e3,
            r.wait_p99.as_secs_f64() * 1e3,
            r.wait_max.as_secs_f64() * 1e3,
            r.pinned
        );
    }
    if let (Some(h), Some(r)) = (h2d, reports.first()) {
        outln!(
            "host-to-device copy loop: pinned {:.2} GB/s, pageable {:.2} GB/s; loader delivered {:.0}% of pinned",
            h.pinned_gb_s,
            h.pageable_gb_s,
            r.delivered_gb_s / h.pinned_gb_s.max(1e-12) * 100.0
        );
    }
    Ok(())
}
