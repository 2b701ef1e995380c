//! The epoch plan: a pure function of (shard sizes, seed, epoch, rank, world, options) that says
//! which samples a rank reads and in which order. Nothing here touches data, so resuming is
//! recomputing the plan and skipping what was delivered.
//!
//! 1. Shard order: the shards are shuffled with a seed derived from (seed, epoch).
//! 2. Partition: the samples, concatenated in that shard order, are cut into `world` equal
//!    contiguous ranges (equal counts, so every rank yields the same number of batches and DDP
//!    never hangs). `Remainder::Drop` drops the last `N mod world` samples of the epoch order;
//!    `Remainder::Pad` repeats samples from the start of it to fill the last range.
//! 3. Two-level shuffle within a rank: `interleave` consecutive shard pieces are read
//!    round-robin into a shuffle buffer of `buffer` samples; each step emits a uniformly random
//!    buffered sample. The output is a permutation of the rank's samples.

use shardtool_core::SplitMix64;
use std::collections::TryReserveError;

mod resumed;
pub use resumed::{resumed_order, MAX_RESHARDS, MAX_RESHARD_WORLD};

/// A sample's address: shard index in the manifest, record index in the shard.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
pub struct SampleRef {
    /// Shard index in the manifest.
    pub shard: u32,
    /// Record index within the shard.
    pub record: u32,
}

/// What to do with the `N mod world` samples that do not divide evenly among ranks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Remainder {
    /// Leave them out of this epoch (they differ per epoch, since the shard order does).
    #[default]
    Drop,
    /// Repeat samples from the start of the epoch order so that every sample is read.
    Pad,
}

impl std::fmt::Display for Remainder {
    /// As the CLI's `--remainder` and Python's `remainder=` spell it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Remainder::Drop => "drop",
            Remainder::Pad => "pad",
        })
    }
}

/// Options that shape the order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct OrderOptions {
    /// Base seed.
    pub seed: u64,
    /// Shuffle at all (shard order and buffer). Off: manifest order, split by rank.
    pub shuffle: bool,
    /// Shard pieces read at once into the shuffle buffer.
    pub interleave: usize,
    /// Shuffle buffer capacity in samples.
    pub buffer: usize,
    /// Remainder policy.
    pub remainder: Remainder,
}

impl Default for OrderOptions {
    fn default() -> Self {
        Self {
            seed: 0,
            shuffle: true,
            // Measured with examples/shuffle_quality.rs: on a class-sorted 1000-class dataset
            // these reach ~87% of a uniform shuffle's distinct classes per batch of 16, while
            // the buffer holds only 8-byte sample references.
            interleave: 32,
            buffer: 8192,
            remainder: Remainder::Drop,
        }
    }
}

/// Mixes values into one seed (SplitMix64 finaliser over each), so nearby epochs and ranks get
/// unrelated streams.
pub fn derive_seed(parts: &[u64]) -> u64 {
    let mut acc = 0x5EED_5EED_5EED_5EEDu64;
    for &p in parts {
        acc = SplitMix64::new(acc ^ p).next_u64();
    }
    acc
}

/// A contiguous run of records of one shard.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Piece {
    shard: u32,
    start: u32,
    end: u32,
}

/// The shard order of an epoch.
pub fn shard_order(shards: usize, opts: &OrderOptions, epoch: u64) -> Vec<u32> {
    let mut order: Vec<u32> = (0..shards as u32).collect();
    if opts.shuffle {
        shardtool_core::shuffle(&mut order, derive_seed(&[opts.seed, epoch, 1]));
    }
    order
}

/// [`per_rank`], refusing a share of none from samples there are: a job would train on no data.
pub fn rank_share(total: u64, world: u32, remainder: Remainder) -> Result<u64, crate::ReadError> {
    match per_rank(total, world, remainder) {
        0 if total > 0 => Err(crate::ReadError::BadOptions(format!(
            "{total} samples over {world} ranks leave each rank none (remainder drop): pad the \
             remainder (--remainder pad), or use fewer ranks"
        ))),
        n => Ok(n),
    }
}

/// The whole batches of `samples` (drop-last), refusing none from samples there are.
pub fn whole_batches(samples: u64, batch: u64) -> Result<u64, crate::ReadError> {
    match samples / batch.max(1) {
        0 if samples > 0 => Err(crate::ReadError::BadOptions(format!(
            "drop-last leaves no batch: each rank reads {samples} samples, fewer than the \
             batch of {batch}"
        ))),
        n => Ok(n),
    }
}

/// Samples each rank gets this epoch.
pub fn per_rank(total: u64, world: u32, remainder: Remainder) -> u64 {
    let world = u64::from(world.max(1));
    match remainder {
        Remainder::Drop => total / world,
        Remainder::Pad => total.div_ceil(world),
    }
}

/// The ordered samples of `rank` in `epoch`. `counts[i]` is the sample count of shard `i`
/// (their sum fits a `u64`, each fits a `u32`, as a valid manifest's do). The error: the order
/// could not be allocated (counts stated by a manifest larger than its shards can hold).
pub fn rank_order(
    counts: &[u64],
    opts: &OrderOptions,
    epoch: u64,
    rank: u32,
    world: u32,
) -> Result<Vec<SampleRef>, TryReserveError> {
    EpochOrder::new(counts, opts, epoch)?.rank(counts, opts, epoch, rank, world)
}

/// An epoch's shard order, and where each of its shards ends in the concatenation of their
/// samples: what every rank's order is cut from.
struct EpochOrder {
    order: Vec<u32>,
    ends: Vec<u64>,
}

impl EpochOrder {
    fn new(counts: &[u64], opts: &OrderOptions, epoch: u64) -> Result<Self, TryReserveError> {
        let order = shard_order(counts.len(), opts, epoch);
        // The shard holding a position is found by bisection (a scan from the start for each
        // piece was quadratic in the shard count: minutes at a million shards).
        let mut ends = Vec::new();
        ends.try_reserve_exact(order.len())?;
        ends.extend(order.iter().scan(0u64, |acc, &s| {
            *acc += counts[s as usize];
            Some(*acc)
        }));
        Ok(Self { order, ends })
    }

    /// [`rank_order`] of this epoch.
    fn rank(
        &self,
        counts: &[u64],
        opts: &OrderOptions,
        epoch: u64,
        rank: u32,
        world: u32,
    ) -> Result<Vec<SampleRef>, TryReserveError> {
        let (order, ends) = (&self.order, &self.ends);
        let total = ends.last().copied().unwrap_or(0);
        let per = per_rank(total, world, opts.remainder);
        let mut out = Vec::new();
        if total == 0 || per == 0 {
            return Ok(out);
        }
        out.try_reserve_exact(usize::try_from(per).unwrap_or(usize::MAX))?;
        // The rank's range in the epoch-ordered concatenation, wrapping for padding.
        let begin = u64::from(rank) * per;
        let mut pieces = Vec::new();
        let mut need = per;
        let mut pos = begin % total;
        while need > 0 {
            let i = ends.partition_point(|&e| e <= pos);
            let (s, end) = (order[i], ends[i]);
            let c = counts[s as usize];
            let start = pos - (end - c);
            let take = (c - start).min(need);
            pieces.push(Piece {
                shard: s,
                start: start as u32,
                end: (start + take) as u32,
            });
            need -= take;
            pos = (pos + take) % total;
        }
        if !opts.shuffle {
            out.extend(pieces.iter().flat_map(|p| {
                (p.start..p.end).map(move |r| SampleRef {
                    shard: p.shard,
                    record: r,
                })
            }));
            return Ok(out);
        }
        // Positions past the end of the epoch order are copies (`Remainder::Pad`): shuffled apart
        // and put last, so a short last batch left out (`drop_last`) leaves out copies first, never
        // a sample this rank alone reads.
        let (originals, copies) = split_pieces(&pieces, total.saturating_sub(begin).min(per));
        for (part, pieces) in [(2, originals), (3, copies)] {
            buffer_shuffle(
                &pieces,
                opts.interleave.max(1),
                opts.buffer.max(1),
                derive_seed(&[opts.seed, epoch, part, u64::from(rank)]),
                &mut out,
            );
        }
        Ok(out)
    }
}

/// `pieces` cut after their first `n` samples: those, and the rest.
fn split_pieces(pieces: &[Piece], n: u64) -> (Vec<Piece>, Vec<Piece>) {
    let (mut head, mut tail) = (Vec::new(), Vec::new());
    let mut left = n;
    for &p in pieces {
        let len = u64::from(p.end - p.start);
        if left >= len {
            head.push(p);
            left -= len;
        } else if left == 0 {
            tail.push(p);
        } else {
            let cut = p.start + left as u32;
            head.push(Piece { end: cut, ..p });
            tail.push(Piece { start: cut, ..p });
            left = 0;
        }
    }
    (head, tail)
}

/// Interleaves `k` pieces at a time round-robin into a bounded buffer, emitting a random buffered
/// sample per step once the buffer is full, then draining it randomly.
fn buffer_shuffle(pieces: &[Piece], k: usize, cap: usize, seed: u64, out: &mut Vec<SampleRef>) {
    // `out` has room for the whole order.
    let total = out.capacity();
    let mut rng = SplitMix64::new(seed);
    let mut buf: Vec<SampleRef> = Vec::with_capacity(cap.min(total));
    // `k` and `cap` come from options (or a saved state): reserve no more than there is.
    let mut active: Vec<Piece> = Vec::with_capacity(k.min(pieces.len()));
    let mut next_piece = 0;
    let mut push = |s: SampleRef, buf: &mut Vec<SampleRef>, out: &mut Vec<SampleRef>| {
        if buf.len() == cap {
            let j = rng.below(cap as u64) as usize;
            out.push(std::mem::replace(&mut buf[j], s));
        } else {
            buf.push(s);
        }
    };
    loop {
        while active.len() < k && next_piece < pieces.len() {
            active.push(pieces[next_piece]);
            next_piece += 1;
        }
        if active.is_empty() {
            break;
        }
        let mut i = 0;
        while i < active.len() {
            let p = &mut active[i];
            push(
                SampleRef {
                    shard: p.shard,
                    record: p.start,
                },
                &mut buf,
                out,
            );
            p.start += 1;
            if p.start == p.end {
                active.swap_remove(i);
            } else {
                i += 1;
            }
        }
    }
    shardtool_core::shuffle(&mut buf, rng.next_u64());
    out.extend(buf);
}

/// Shards in the order this rank first reads them: what a prefetcher should fetch, in turn.
pub fn first_use_order(order: &[SampleRef]) -> Vec<usize> {
    let mut seen = std::collections::HashSet::new();
    order
        .iter()
        .map(|r| r.shard as usize)
        .filter(|&s| seen.insert(s))
        .collect()
}

/// The most bytes of shards open at once while `order` is read in batches of `batch`, when
/// workers may run up to `lookahead` batches ahead of the oldest unfinished one: a shard is open
/// from the batch of its first sample (reached `lookahead` batches early) to that of its last.
pub fn open_window_bytes(order: &[SampleRef], batch: usize, lookahead: u64, sizes: &[u64]) -> u64 {
    let batch = batch.max(1);
    let mut span: std::collections::HashMap<u32, (u64, u64)> = Default::default();
    for (pos, r) in order.iter().enumerate() {
        let b = (pos / batch) as u64;
        span.entry(r.shard)
            .and_modify(|e| e.1 = b)
            .or_insert((b, b));
    }
    // Sweep: +size where a shard opens, -size after it closes.
    let mut events: Vec<(u64, i128)> = Vec::with_capacity(span.len() * 2);
    for (shard, (first, last)) in span {
        let size = sizes.get(shard as usize).copied().unwrap_or(0) as i128;
        events.push((first.saturating_sub(lookahead), size));
        events.push((last + 1, -size));
    }
    // Closing before opening at the same batch.
    events.sort_unstable_by_key(|&(at, d)| (at, d));
    let (mut open, mut peak) = (0i128, 0i128);
    for (_, d) in events {
        open += d;
        peak = peak.max(open);
    }
    peak as u64
}

#[cfg(test)]
mod window_tests {
    use super::*;

    fn refs(shards: &[u32]) -> Vec<SampleRef> {
        shards
            .iter()
            .enumerate()
            .map(|(i, &s)| SampleRef {
                shard: s,
                record: i as u32,
            })
            .collect()
    }

    #[test]
    fn sequential_shards_open_one_at_a_time_without_lookahead() {
        let order = refs(&[0, 0, 1, 1, 2, 2]);
        assert_eq!(open_window_bytes(&order, 2, 0, &[10, 20, 30]), 30);
        // Reaching one batch ahead overlaps neighbours.
        assert_eq!(open_window_bytes(&order, 2, 1, &[10, 20, 30]), 50);
        assert_eq!(first_use_order(&order), vec![0, 1, 2]);
    }

    #[test]
    fn interleaved_shards_are_open_together() {
        let order = refs(&[2, 0, 1, 2, 0, 1]);
        assert_eq!(open_window_bytes(&order, 1, 0, &[10, 20, 30]), 60);
        assert_eq!(first_use_order(&order), vec![2, 0, 1]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashMap;

    fn all_ranks(
        counts: &[u64],
        opts: &OrderOptions,
        epoch: u64,
        world: u32,
    ) -> Vec<Vec<SampleRef>> {
        (0..world)
            .map(|r| rank_order(counts, opts, epoch, r, world).unwrap())
            .collect()
    }

    proptest! {
        #[test]
        fn exactly_once_over_ranks(
            counts in proptest::collection::vec(0u64..60, 1..12),
            world in 1u32..9,
            seed: u64,
            epoch in 0u64..4,
            interleave in 1usize..5,
            buffer in 1usize..100,
            pad: bool,
            shuffle: bool,
        ) {
            let opts = OrderOptions { seed, shuffle, interleave, buffer, remainder: if pad { Remainder::Pad } else { Remainder::Drop } };
            let total: u64 = counts.iter().sum();
            let ranks = all_ranks(&counts, &opts, epoch, world);
            let per = per_rank(total, world, opts.remainder) as usize;
            // Equal counts per rank: DDP never waits on a rank with fewer batches.
            for r in &ranks { prop_assert_eq!(r.len(), per); }
            let mut seen: HashMap<SampleRef, usize> = HashMap::new();
            for r in &ranks { for s in r { *seen.entry(*s).or_default() += 1; } }
            for s in seen.keys() {
                prop_assert!((s.shard as usize) < counts.len());
                prop_assert!(u64::from(s.record) < counts[s.shard as usize]);
            }
            let delivered: usize = seen.values().sum();
            prop_assert_eq!(delivered, per * world as usize);
            match opts.remainder {
                Remainder::Drop => {
                    // No sample twice; exactly total mod world left out.
                    prop_assert!(seen.values().all(|&c| c == 1));
                    prop_assert_eq!(seen.len() as u64, total - total % u64::from(world));
                }
                Remainder::Pad => {
                    // Every sample at least once; repeats only to fill the last range.
                    prop_assert_eq!(seen.len() as u64, total);
                    prop_assert!(seen.values().all(|&c| c <= 2 || total < u64::from(world)));
                    // The copies come last in their rank's order: the ranks' leading samples
                    // before them are every sample once (a dropped short batch drops copies).
                    let mut first = HashMap::new();
                    for (r, order) in ranks.iter().enumerate() {
                        let originals = total.saturating_sub(r as u64 * per as u64).min(per as u64);
                        for s in &order[..originals as usize] { *first.entry(*s).or_insert(0) += 1; }
                    }
                    prop_assert_eq!(first.len() as u64, total);
                    prop_assert!(first.values().all(|&c| c == 1));
                }
            }
        }

        #[test]
        fn same_inputs_same_order(counts in proptest::collection::vec(1u64..40, 1..8), seed: u64) {
            let opts = OrderOptions { seed, ..Default::default() };
            prop_assert_eq!(rank_order(&counts, &opts, 3, 0, 2).unwrap(), rank_order(&counts, &opts, 3, 0, 2).unwrap());
        }
    }

    #[test]
    fn a_million_one_sample_shards_split_exactly_once_over_ranks() {
        // Each piece is one shard here: finding each piece's shard by a scan from the start took
        // minutes at this count.
        let counts = vec![1; 1_000_000];
        let mut seen = vec![0u8; counts.len()];
        for rank in 0..3 {
            for r in rank_order(&counts, &OrderOptions::default(), 0, rank, 3).unwrap() {
                assert_eq!(r.record, 0);
                seen[r.shard as usize] += 1;
            }
        }
        // 1,000,000 = 3 x 333,333 + 1: the one left over is dropped.
        assert_eq!(seen.iter().filter(|&&n| n == 1).count(), 999_999);
        assert!(seen.iter().all(|&n| n <= 1));
    }

    #[test]
    fn another_epoch_gives_another_order() {
        let counts = vec![100; 10];
        let opts = OrderOptions::default();
        let a = rank_order(&counts, &opts, 0, 0, 1).unwrap();
        let b = rank_order(&counts, &opts, 1, 0, 1).unwrap();
        assert_eq!(a.len(), 1000);
        assert_ne!(a, b);
        assert_ne!(shard_order(10, &opts, 0), shard_order(10, &opts, 1));
    }

    #[test]
    fn default_shuffle_reaches_85_percent_of_uniform_on_class_sorted_data() {
        // 1000 classes x 1300 samples, sorted by class, 1000 samples per shard.
        let (classes, per, shard) = (1000u64, 1300u64, 1000u64);
        let total = classes * per;
        let counts: Vec<u64> = (0..total.div_ceil(shard))
            .map(|i| shard.min(total - i * shard))
            .collect();
        let distinct = |labels: &[u64]| {
            let batches: Vec<usize> = labels
                .chunks_exact(16)
                .map(|b| b.iter().collect::<std::collections::HashSet<_>>().len())
                .collect();
            batches.iter().sum::<usize>() as f64 / batches.len() as f64
        };
        let order = rank_order(&counts, &OrderOptions::default(), 0, 0, 1).unwrap();
        let ours: Vec<u64> = order
            .iter()
            .map(|s| (u64::from(s.shard) * shard + u64::from(s.record)) / per)
            .collect();
        let mut uniform: Vec<u64> = (0..total).map(|i| i / per).collect();
        shardtool_core::shuffle(&mut uniform, 9);
        let (o, u) = (distinct(&ours), distinct(&uniform));
        assert!(
            o >= 0.85 * u,
            "two-level shuffle {o:.2} vs uniform {u:.2} distinct classes per 16"
        );
    }

    #[test]
    fn no_shuffle_keeps_manifest_order() {
        let opts = OrderOptions {
            shuffle: false,
            ..Default::default()
        };
        let r = rank_order(&[2, 2], &opts, 5, 1, 2).unwrap();
        assert_eq!(
            r,
            vec![
                SampleRef {
                    shard: 1,
                    record: 0
                },
                SampleRef {
                    shard: 1,
                    record: 1
                }
            ]
        );
    }
}
