//! The device loader end to end over a dataset: delivered GB/s and data wait p50/p99 with the
//! target in the loop at a simulated step. What `shardtool bench --device` will print, until
//! the CLI calls [`shardtool_gpu::bench()`] itself.
//!
//! ```text
//! cargo run --release -p shardtool-gpu --features cuda --example device_bench -- \
//!     DATASET --device cuda:0 --batch 64 --step-ms 100 --epochs 3 [--workers N] [--in-flight 2] [--normalize]
//! ```
//!
//! Prints one `key=value` line; exit status 1 on errors (a missing GPU for `cuda:N` included).

use shardtool_gpu::{bench, BenchOptions, Device, Normalize};
use shardtool_reader::Loader;
use std::time::Duration;

fn main() {
    if let Err(e) = run() {
        eprintln!("device_bench: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let mut dataset = None;
    let mut opts = BenchOptions::default();
    let mut batch = 64usize;
    let mut workers = None;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = || args.next().ok_or(format!("{a} needs a value"));
        match a.as_str() {
            "--device" => opts.device = value()?.parse::<Device>()?,
            "--batch" => batch = value()?.parse()?,
            "--step-ms" => opts.step = Duration::from_secs_f64(value()?.parse::<f64>()? / 1e3),
            "--epochs" => opts.epochs = value()?.parse()?,
            "--workers" => workers = Some(value()?.parse::<usize>()?),
            "--in-flight" => opts.in_flight = value()?.parse()?,
            "--ring" => opts.ring = Some(value()?.parse()?),
            "--normalize" => opts.normalize = Some(Normalize::IMAGENET),
            s if !s.starts_with("--") && dataset.is_none() => dataset = Some(s.to_string()),
            s => return Err(format!("unknown argument {s}").into()),
        }
    }
    let dataset = dataset.ok_or("usage: device_bench DATASET [--device D] [--batch N] ...")?;
    let r = bench(
        move |epoch| {
            let b = Loader::builder(&dataset)
                .batch_size(batch)
                .seed(0)
                .epoch(epoch);
            match workers {
                Some(w) => b.workers(w),
                None => b,
            }
        },
        &opts,
    )?;
    if let Some(f) = &r.fallback {
        eprintln!("{f}");
    }
    println!("loader {}", r.to_line());
    Ok(())
}
