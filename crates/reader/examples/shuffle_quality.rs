//! Measures shuffle quality: mean distinct classes per batch of 16 on a class-sorted dataset
//! (as packed with `--no-shuffle`), for the reader's two-level shuffle against a full uniform
//! shuffle. Pure index arithmetic: no data is read.
//!
//! `cargo run --release -p shardtool-reader --example shuffle_quality [CLASSES PER_CLASS SHARD]`

use shardtool_reader::plan::rank_order;
use shardtool_reader::OrderOptions;

fn distinct_per_batch(labels: &[u32], batch: usize) -> f64 {
    let mut total = 0usize;
    let mut n = 0usize;
    for b in labels.chunks_exact(batch) {
        let mut v = b.to_vec();
        v.sort_unstable();
        v.dedup();
        total += v.len();
        n += 1;
    }
    total as f64 / n.max(1) as f64
}

fn main() {
    let args: Vec<u64> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let (classes, per_class, shard) = match args[..] {
        [c, p, s] => (c, p, s),
        _ => (1000, 1300, 1000),
    };
    let total = classes * per_class;
    // Class-sorted: sample i has class i / per_class; shards cut the sorted list.
    let counts: Vec<u64> = (0..total.div_ceil(shard))
        .map(|i| shard.min(total - i * shard))
        .collect();
    let label =
        |shard_i: u32, rec: u32| ((u64::from(shard_i) * shard + u64::from(rec)) / per_class) as u32;
    let mut uniform: Vec<u32> = (0..total).map(|i| (i / per_class) as u32).collect();
    shardtool_core::shuffle(&mut uniform, 1);
    let u = distinct_per_batch(&uniform, 16);
    println!(
        "dataset: {classes} classes x {per_class} samples, class-sorted, {shard} samples/shard"
    );
    println!("uniform shuffle: {u:.2} distinct classes per batch of 16");
    println!(
        "{:>10} {:>8} {:>10} {:>8}",
        "interleave", "buffer", "distinct", "% unif"
    );
    let d = OrderOptions::default();
    for (k, buf) in [
        (8, 4096),
        (16, 8192),
        (d.interleave, d.buffer),
        (64, 16384),
        (128, 16384),
    ] {
        let opts = OrderOptions {
            interleave: k,
            buffer: buf,
            ..d
        };
        let order = rank_order(&counts, &opts, 0, 0, 1).expect("the order fits in memory");
        let labels: Vec<u32> = order.iter().map(|s| label(s.shard, s.record)).collect();
        let r = distinct_per_batch(&labels, 16);
        let tag = if (k, buf) == (d.interleave, d.buffer) {
            " (default)"
        } else {
            ""
        };
        println!("{k:>10} {buf:>8} {r:>10.2} {:>7.1}%{tag}", 100.0 * r / u);
    }
}
