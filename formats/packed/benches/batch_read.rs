//! Batch assembly from a page-cached packed shard, against a plain `memcpy` of the same bytes, and
//! `PackedShard::open` time against shard size.
//!
//! Run with `cargo bench -p shardtool-packed --bench batch_read` (or `scripts/bench_packed_read.sh`,
//! which keeps a copy of the output). Environment:
//!
//! - `BENCH_RECORDS`: records in the batch shard (default 2048, about 400 MB);
//! - `BENCH_SIDE`: their height and width (default 256);
//! - `BENCH_BATCH`: records per batch buffer (default 256);
//! - `BENCH_TMPDIR`: where the temporary shards go (default: the system temp directory).
//!
//! Everything runs on one thread. Each timing is the median of 7 runs after one warm-up run; the
//! cases alternate within each run so that all see the same machine state.
//!
//! The batch buffer is page-aligned, like pinned or GPU-staging memory, so each slot starts at the
//! same offset within a page as a record of a fixed-shape 256x256 shard (records there are
//! page-aligned). The same copies into a buffer 16 bytes past a page boundary (where a large
//! `Vec<u8>` from malloc usually starts) are reported too: on some CPUs `memcpy` of mid-sized
//! blocks is much slower when source and destination sit at slightly different page offsets.

use std::env;
use std::fs::File;
use std::hint::black_box;
use std::io::{BufWriter, Read, Write};
use std::path::Path;
use std::time::{Duration, Instant};

use memmap2::Mmap;
use shardtool_packed::{Mode, PackedShard, PackedWriter};

/// Timed runs per measurement; the median is reported.
const RUNS: usize = 7;
/// Page size assumed for aligning the batch buffer.
const PAGE: usize = 4096;
/// Misalignment of the skewed batch buffer, in bytes.
const SKEW: usize = 16;
/// Seed of the fixed shuffle.
const SEED: u64 = 0x5eed_ba7c;

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

fn main() -> Result<()> {
    // `cargo bench` passes `--bench`; a filter argument is accepted and ignored.
    let records = env_usize("BENCH_RECORDS", 2048)?;
    let side = u32::try_from(env_usize("BENCH_SIDE", 256)?)?;
    let batch = env_usize("BENCH_BATCH", 256)?;
    let dir = match env::var_os("BENCH_TMPDIR") {
        Some(d) => tempfile::tempdir_in(d)?,
        None => tempfile::tempdir()?,
    };

    batch_bench(dir.path(), records, batch, side)?;
    println!();
    open_bench(dir.path())?;
    Ok(())
}

fn env_usize(name: &str, default: usize) -> Result<usize> {
    match env::var(name) {
        Ok(v) => {
            let n: usize = v.parse().map_err(|e| format!("{name}={v:?}: {e}"))?;
            if n == 0 {
                return Err(format!("{name} must be at least 1").into());
            }
            Ok(n)
        }
        Err(_) => Ok(default),
    }
}

/// Deterministic, non-constant pixels for record `i` (distinct per record so checksums differ).
fn fill_pixels(buf: &mut [u8], i: usize) {
    let mut x = (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    for chunk in buf.chunks_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let bytes = x.to_le_bytes();
        chunk.copy_from_slice(&bytes[..chunk.len()]);
    }
}

/// Writes `dir/name.safetensors`, a shard of `n` records of `h`x`w` (in variable mode every other
/// record is one row shorter, so the shapes really vary), and returns it opened and its size.
fn write_shard(
    dir: &Path,
    name: &str,
    mode: Mode,
    n: usize,
    h: u32,
    w: u32,
) -> Result<(File, u64)> {
    let mut writer = PackedWriter::new(mode);
    let mut pixels = Vec::new();
    for i in 0..n {
        let rh = if mode == Mode::Variable && i % 2 == 1 && h > 1 {
            h - 1
        } else {
            h
        };
        pixels.resize(rh as usize * w as usize * 3, 0);
        fill_pixels(&mut pixels, i);
        writer.add(
            &format!("{name}/{i:08}"),
            (i % 1000) as i64,
            rh,
            w,
            &pixels,
            serde_json::json!({ "src": format!("train/{:03}/{i:08}.jpg", i % 1000) }),
        )?;
    }
    let path = dir.join(format!("{name}.safetensors"));
    let mut out = BufWriter::with_capacity(1 << 20, File::create(&path)?);
    let summary = writer.finish(&mut out)?;
    out.flush()?;
    drop(out);
    Ok((File::open(&path)?, summary.total_len))
}

/// Maps `file` read-only and touches every page, so the shard is page-cached and mapped before
/// anything is timed.
fn map_warm(file: &File) -> Result<Mmap> {
    // Read through the file once (page cache), then fault the mapping in.
    let mut sink = vec![0u8; 1 << 20];
    let mut f = file;
    while f.read(&mut sink)? > 0 {}
    #[allow(unsafe_code)]
    // SAFETY: the file is private to this benchmark (created in its own temporary directory) and
    // nothing writes to or truncates it while it is mapped.
    let map = unsafe { Mmap::map(file)? };
    let mut acc = 0u8;
    for page in map.chunks(4096) {
        acc ^= page[0];
    }
    black_box(acc);
    Ok(map)
}

fn median(mut times: Vec<Duration>) -> Duration {
    times.sort();
    times[times.len() / 2]
}

/// Copies the records named by `order` into consecutive slots of `buf`, starting over when the
/// batch is full. Returns the bytes copied.
fn assemble(shard: &PackedShard<Mmap>, order: &[usize], buf: &mut [u8], rec_len: usize) -> u64 {
    let slots = buf.len() / rec_len;
    let mut slot = 0;
    for &i in order {
        let pixels = shard.record(i).pixels;
        buf[slot * rec_len..(slot + 1) * rec_len].copy_from_slice(pixels);
        slot += 1;
        if slot == slots {
            black_box(&mut *buf);
            slot = 0;
        }
    }
    black_box(&mut *buf);
    (order.len() * rec_len) as u64
}

/// Plain sequential `memcpy` of `src` into `buf`, one buffer-full at a time.
fn memcpy(src: &[u8], buf: &mut [u8]) -> u64 {
    for chunk in src.chunks(buf.len()) {
        buf[..chunk.len()].copy_from_slice(chunk);
        black_box(&mut *buf);
    }
    src.len() as u64
}

fn batch_bench(dir: &Path, records: usize, batch: usize, side: u32) -> Result<()> {
    let rec_len = side as usize * side as usize * 3;
    let t = Instant::now();
    let (file, size) = write_shard(dir, "batch", Mode::Fixed, records, side, side)?;
    let map = map_warm(&file)?;
    let shard = PackedShard::open(map)?;
    let data = &shard.as_bytes()[shard.data_offset() as usize..];
    let data = &data[..records * rec_len];
    let buf_len = batch.min(records) * rec_len;
    println!(
        "batch assembly: {records} records of {side}x{side}x3 ({:.1} MB shard, written and warmed in {:.1} s), \
         batch buffer {} records ({:.1} MB), 1 thread, median of {RUNS}",
        size as f64 / 1e6,
        t.elapsed().as_secs_f64(),
        batch.min(records),
        buf_len as f64 / 1e6,
    );

    let mut shuffled: Vec<usize> = (0..records).collect();
    shardtool_core::shuffle(&mut shuffled, SEED);
    let in_order: Vec<usize> = (0..records).collect();
    // A page-aligned batch buffer, as pinned or GPU-staging memory is; and the same buffer 16 bytes
    // off, as a plain `Vec<u8>` of this size usually is (malloc's mmap header).
    let mut storage = vec![0u8; buf_len + PAGE + SKEW];
    let aligned_at = storage.as_ptr().align_offset(PAGE);

    // (name, shuffled order?, destination offset from a page boundary)
    let cases: [(&str, Option<&[usize]>, usize); 5] = [
        ("memcpy, sequential (baseline)", None, 0),
        ("records, shuffled order", Some(&shuffled), 0),
        ("records, file order", Some(&in_order), 0),
        ("memcpy, dst page+16 B", None, SKEW),
        ("records, shuffled, dst page+16 B", Some(&shuffled), SKEW),
    ];
    let mut times = vec![Vec::new(); cases.len()];
    for run in 0..=RUNS {
        for (case, &(_, order, skew)) in cases.iter().enumerate() {
            let buf = &mut storage[aligned_at + skew..aligned_at + skew + buf_len];
            let t = Instant::now();
            let n = match order {
                None => memcpy(data, buf),
                Some(order) => assemble(&shard, order, buf, rec_len),
            };
            let d = t.elapsed();
            assert_eq!(n, data.len() as u64);
            if run > 0 {
                times[case].push(d);
            }
        }
    }
    let bytes = data.len() as f64;
    let base = median(times[0].clone()).as_secs_f64();
    println!(
        "{:<34} {:>10} {:>12} {:>8} {:>9}",
        "", "time ms", "samples/s", "GB/s", "vs memcpy"
    );
    let mut ratios = Vec::new();
    for (&(name, _, _), times) in cases.iter().zip(times) {
        let d = median(times).as_secs_f64();
        ratios.push(base / d);
        println!(
            "{:<34} {:>10.1} {:>12.0} {:>8.2} {:>8.1}%",
            name,
            d * 1e3,
            records as f64 / d,
            bytes / d / 1e9,
            100.0 * base / d,
        );
    }
    println!(
        "target: shuffled records >= 70% of memcpy bandwidth on one core (page-aligned batch): {}",
        if ratios[1] >= 0.7 { "met" } else { "NOT met" }
    );
    Ok(())
}

fn open_bench(dir: &Path) -> Result<()> {
    println!(
        "PackedShard::open over a warm mmap (validates header and index; pixels untouched), median"
    );
    println!(
        "{:<9} {:>8} {:>8} {:>10} {:>11} {:>12}",
        "mode", "records", "record", "file MB", "open us", "ns/record"
    );
    for (mode, mode_name) in [(Mode::Fixed, "fixed"), (Mode::Variable, "variable")] {
        for n in [64usize, 512, 4096] {
            for side in [16u32, 128] {
                let name = format!("open-{mode_name}-{n}-{side}");
                let (file, size) = write_shard(dir, &name, mode, n, side, side)?;
                let map = map_warm(&file)?;
                let bytes: &[u8] = &map;
                // Enough repetitions for a stable median even for the smallest shards.
                let reps = (200_000 / n).clamp(9, 501);
                let mut times = Vec::with_capacity(reps);
                for _ in 0..reps {
                    let t = Instant::now();
                    let shard = PackedShard::open(black_box(bytes))?;
                    let d = t.elapsed();
                    assert_eq!(shard.len(), n);
                    times.push(d);
                }
                let d = median(times);
                println!(
                    "{:<9} {:>8} {:>8} {:>10.1} {:>11.1} {:>12.0}",
                    mode_name,
                    n,
                    format!("{side}x{side}"),
                    size as f64 / 1e6,
                    d.as_secs_f64() * 1e6,
                    d.as_secs_f64() * 1e9 / n as f64,
                );
                drop(map);
                drop(file);
                std::fs::remove_file(dir.join(format!("{name}.safetensors")))?;
            }
        }
    }
    Ok(())
}
