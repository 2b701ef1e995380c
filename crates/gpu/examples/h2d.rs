//! Plain host-to-device copy bandwidth from pinned and from pageable memory (cudarc copies on
//! one stream), the ceiling `scripts/gpu-check.sh` compares the loader against.
//!
//! ```text
//! cargo run --release -p shardtool-gpu --features cuda --example h2d -- --device cuda:0 --mib 256 --iters 20
//! ```
//!
//! Prints one `key=value` line. Exit status 0 when measured, 1 on a usage or device error
//! (`auto` without a GPU prints `h2d skipped: ...` and exits 0).

use shardtool_gpu::{h2d_bandwidth, Device, Target};

fn main() {
    let mut device = Device::Auto;
    let mut mib = 256usize;
    let mut iters = 20usize;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let v = args.next();
        let parsed = match (a.as_str(), v.as_deref()) {
            ("--device", Some(v)) => v.parse().map(|d| device = d).map_err(|e| e.to_string()),
            ("--mib", Some(v)) => v
                .parse()
                .map(|n| mib = n)
                .map_err(|e| format!("--mib: {e}")),
            ("--iters", Some(v)) => v
                .parse()
                .map(|n| iters = n)
                .map_err(|e| format!("--iters: {e}")),
            _ => Err(format!(
                "usage: h2d [--device cpu|auto|cuda:N] [--mib N] [--iters N] (got {a})"
            )),
        };
        if let Err(e) = parsed {
            eprintln!("h2d: {e}");
            std::process::exit(1);
        }
    }
    if device == Device::Auto {
        match device.resolve() {
            Ok(Target::Cpu { fallback }) => {
                println!("h2d skipped: {}", fallback.unwrap_or_default());
                return;
            }
            Ok(Target::Cuda { ordinal, .. }) => device = Device::Cuda(ordinal),
            Err(e) => {
                eprintln!("h2d: {e}");
                std::process::exit(1);
            }
        }
    }
    match h2d_bandwidth(device, mib << 20, iters) {
        Ok(r) => println!(
            "h2d target={:?} bytes={} iters={} pinned_gb_s={:.2} pageable_gb_s={:.2}",
            r.target, r.bytes, r.iters, r.pinned_gb_s, r.pageable_gb_s
        ),
        Err(e) => {
            eprintln!("h2d: {e}");
            std::process::exit(1);
        }
    }
}
