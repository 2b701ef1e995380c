//! The order of an epoch resumed at another world size: each rank's share of what the ranks of
//! the earlier world sizes left, computed for the samples this rank needs alone.
//!
//! At each world size the epoch ran at, every rank delivered as many whole batches (DDP ranks
//! step together). What they left, rank after rank in rank order and each rank's rest in the
//! order it was to be read, is the pool the next world size's ranks cut their shares from, as
//! an epoch's ranks cut theirs from the shard-ordered samples: contiguous, of equal length, the
//! remainder dropped or padded from the pool's start.

use super::{per_rank, EpochOrder, OrderOptions, SampleRef};
use crate::ReadError;
use std::cell::RefCell;
use std::collections::{HashMap, TryReserveError};

/// Most ranks a world size that resumed with another may have had (a checkpoint is data).
pub const MAX_RESHARD_WORLD: u32 = 1 << 16;
/// Most changes of world size one epoch's position may record.
pub const MAX_RESHARDS: usize = 64;

/// One world size the epoch was read at.
#[derive(Debug, Clone, Copy)]
struct Stage {
    world: u32,
    /// Each rank's share of the pool before it (where rank `r`'s begins: `r * share`).
    share: u64,
    /// What each rank delivered of its share, then what it left of what it was to read (whole
    /// batches with drop-last).
    cut: u64,
    rest: u64,
}

/// What the pools are cut from, and the orders of the first stage's ranks computed so far: each
/// is built once (a padded stage may take its pieces from several ranks in turn), together at
/// most the epoch's order, what one rank of world 1 holds.
struct Pools<'a> {
    counts: &'a [u64],
    opts: &'a OrderOptions,
    epoch: u64,
    first: EpochOrder,
    stages: Vec<Stage>,
    orders: RefCell<HashMap<u32, Vec<SampleRef>>>,
}

/// The samples rank `rank` of `world` reads of an epoch that ran before at the world sizes
/// `resharded` lists, oldest first, each with the whole batches every one of its ranks had
/// delivered; `None` for an epoch read at one world size. Drop-last applies to the earlier
/// stages here, and to this one by the caller. A stage that claims more batches than its ranks
/// had, a world size past [`MAX_RESHARD_WORLD`] or more than [`MAX_RESHARDS`] stages is a damaged
/// or foreign state.
#[allow(clippy::too_many_arguments)] // One call site; each argument is a plan input.
pub fn resumed_order(
    counts: &[u64],
    opts: &OrderOptions,
    epoch: u64,
    resharded: &[(u32, u64)],
    batch: usize,
    drop_last: bool,
    rank: u32,
    world: u32,
) -> Result<Option<Vec<SampleRef>>, ReadError> {
    let bad = |m: String| ReadError::BadState(m);
    if resharded.is_empty() {
        return Ok(None);
    }
    if resharded.len() > MAX_RESHARDS {
        return Err(bad(format!(
            "the saved state records {} changes of world size in one epoch, more than \
             {MAX_RESHARDS}: start the next epoch to go on (set_epoch, or read --epoch)",
            resharded.len()
        )));
    }
    let no_memory = |e: TryReserveError| bad(format!("its order cannot be held in memory ({e})"));
    let batch = batch.max(1) as u64;
    let mut stages = Vec::with_capacity(resharded.len() + 1);
    let mut pool: u64 = counts.iter().sum();
    for &(world, delivered) in resharded {
        if world == 0 || world > MAX_RESHARD_WORLD {
            return Err(bad(format!(
                "the saved state records a world size of {world}, not 1 to {MAX_RESHARD_WORLD}: \
                 a state of more ranks resumes only at its own world size"
            )));
        }
        let share = per_rank(pool, world, opts.remainder);
        let per = if drop_last {
            share / batch * batch
        } else {
            share
        };
        let batches = per.div_ceil(batch);
        if delivered > batches {
            return Err(bad(format!(
                "the saved state counts {delivered} batch(es) delivered at world size {world}, \
                 whose ranks had {batches}"
            )));
        }
        let cut = (delivered * batch).min(per);
        stages.push(Stage {
            world,
            share,
            cut,
            rest: per - cut,
        });
        pool = (per - cut) * u64::from(world);
    }
    let share = per_rank(pool, world, opts.remainder);
    stages.push(Stage {
        world,
        share,
        cut: 0,
        rest: share,
    });
    let pools = Pools {
        counts,
        opts,
        epoch,
        first: EpochOrder::new(counts, opts, epoch).map_err(no_memory)?,
        stages,
        orders: RefCell::default(),
    };
    let mut out = Vec::new();
    out.try_reserve_exact(usize::try_from(share).unwrap_or(usize::MAX))
        .map_err(no_memory)?;
    let mine = pools.stages.len() - 1;
    pools
        .order(mine, rank, 0, share, &mut out)
        .map_err(no_memory)?;
    Ok(Some(out))
}

impl Pools<'_> {
    /// Appends samples `[from, from + n)` of the pool stage `i` left: its ranks' rests, one
    /// after another.
    fn pool(
        &self,
        i: usize,
        from: u64,
        n: u64,
        out: &mut Vec<SampleRef>,
    ) -> Result<(), TryReserveError> {
        let s = self.stages[i];
        let mut p = from;
        while p < from + n {
            let (r, off) = (p / s.rest, p % s.rest);
            let take = (s.rest - off).min(from + n - p);
            self.order(i, r as u32, s.cut + off, take, out)?;
            p += take;
        }
        Ok(())
    }

    /// Appends positions `[from, from + n)` of rank `r`'s order at stage `i`: at the first, its
    /// order of the epoch; later, its share of the pool before.
    fn order(
        &self,
        i: usize,
        r: u32,
        from: u64,
        n: u64,
        out: &mut Vec<SampleRef>,
    ) -> Result<(), TryReserveError> {
        if n == 0 {
            return Ok(());
        }
        if i == 0 {
            let mut orders = self.orders.borrow_mut();
            let order = match orders.entry(r) {
                std::collections::hash_map::Entry::Occupied(o) => o.into_mut(),
                std::collections::hash_map::Entry::Vacant(v) => {
                    let world = self.stages[0].world;
                    v.insert((self.first).rank(self.counts, self.opts, self.epoch, r, world)?)
                }
            };
            out.try_reserve(n as usize)?;
            out.extend_from_slice(&order[from as usize..(from + n) as usize]);
            return Ok(());
        }
        let before = self.stages[i - 1];
        let total = before.rest * u64::from(before.world);
        let begin = u64::from(r) * self.stages[i].share;
        let mut j = from;
        while j < from + n {
            let q = (begin + j) % total;
            let take = (total - q).min(from + n - j);
            self.pool(i - 1, q, take, out)?;
            j += take;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::{rank_order, Remainder};
    use super::*;
    use proptest::prelude::*;

    /// The model: every rank's order at each stage built whole, rests concatenated, shares cut
    /// from the concatenation.
    fn model(
        counts: &[u64],
        opts: &OrderOptions,
        resharded: &[(u32, u64)],
        batch: usize,
        drop_last: bool,
        world: u32,
    ) -> Vec<Vec<SampleRef>> {
        let share_of = |pool: &[SampleRef], r: u32, w: u32| -> Vec<SampleRef> {
            let total = pool.len() as u64;
            let per = per_rank(total, w, opts.remainder);
            (0..per)
                .map(|j| pool[((u64::from(r) * per + j) % total.max(1)) as usize])
                .collect()
        };
        let mut pool: Option<Vec<SampleRef>> = None;
        for &(w, done) in resharded {
            let mut next = Vec::new();
            for r in 0..w {
                let mut o = match &pool {
                    None => rank_order(counts, opts, 1, r, w).unwrap(),
                    Some(p) => share_of(p, r, w),
                };
                if drop_last {
                    o.truncate(o.len() / batch * batch);
                }
                next.extend_from_slice(&o[(done as usize * batch).min(o.len())..]);
            }
            pool = Some(next);
        }
        let pool = pool.unwrap();
        (0..world).map(|r| share_of(&pool, r, world)).collect()
    }

    proptest! {
        #[test]
        fn each_rank_reads_its_share_of_what_the_earlier_world_sizes_left(
            counts in proptest::collection::vec(0u64..40, 1..10),
            worlds in proptest::collection::vec((1u32..7, 0u64..12), 1..4),
            world in 1u32..7,
            batch in 1usize..5,
            seed: u64,
            drop_last: bool,
            pad: bool,
        ) {
            let remainder = if pad { Remainder::Pad } else { Remainder::Drop };
            let opts = OrderOptions { seed, buffer: 7, interleave: 2, remainder, ..Default::default() };
            // Each stage's delivered count within what its ranks had.
            let mut resharded = Vec::new();
            for &(w, done) in &worlds {
                resharded.push((w, done));
                let got = resumed_order(&counts, &opts, 1, &resharded, batch, drop_last, 0, 1);
                if got.is_err() {
                    resharded.last_mut().unwrap().1 = 0;
                }
            }
            let want = model(&counts, &opts, &resharded, batch, drop_last, world);
            for (r, want) in want.iter().enumerate() {
                let got = resumed_order(&counts, &opts, 1, &resharded, batch, drop_last, r as u32, world);
                prop_assert_eq!(got.unwrap().unwrap(), want.clone());
            }
            if !pad {
                // With what the earlier stages delivered, no sample twice.
                let mut seen = std::collections::HashSet::new();
                for (k, &(w, done)) in resharded.iter().enumerate() {
                    let orders: Vec<Vec<SampleRef>> = match k {
                        0 => (0..w).map(|r| rank_order(&counts, &opts, 1, r, w).unwrap()).collect(),
                        _ => model(&counts, &opts, &resharded[..k], batch, drop_last, w),
                    };
                    for mut o in orders {
                        if drop_last { o.truncate(o.len() / batch * batch); }
                        for s in &o[..(done as usize * batch).min(o.len())] {
                            prop_assert!(seen.insert(*s), "{:?} twice", s);
                        }
                    }
                }
                for s in want.iter().flatten() {
                    prop_assert!(seen.insert(*s), "{:?} twice", s);
                }
            }
        }
    }

    #[test]
    fn a_state_past_the_bounds_is_refused_before_any_work() {
        let opts = OrderOptions::default();
        let order = |chain: &[(u32, u64)]| resumed_order(&[10], &opts, 0, chain, 2, false, 0, 1);
        assert!(order(&[]).unwrap().is_none());
        for chain in [vec![(0, 0)], vec![(MAX_RESHARD_WORLD + 1, 0)], vec![(2, 9)]] {
            let err = order(&chain).unwrap_err();
            assert!(matches!(err, ReadError::BadState(_)), "{err}");
        }
        assert!(order(&vec![(1, 0); MAX_RESHARDS + 1]).is_err());
        // The widest stages allowed, padded, stay quick and small: each rank's share alone.
        let opts = OrderOptions {
            remainder: Remainder::Pad,
            ..opts
        };
        let wide = vec![(MAX_RESHARD_WORLD, 0); MAX_RESHARDS];
        let got = resumed_order(&[10], &opts, 0, &wide, 2, false, 3, 4).unwrap();
        assert_eq!(got.unwrap().len(), 16384);
        // Two ranks with a sample left each, padded out to many: pieces alternate between the
        // two, whose orders are built once each (once per piece took hours at 40M samples).
        let fan = [(2, 19_999), (MAX_RESHARD_WORLD, 0)];
        let got = resumed_order(&[10_000; 4], &opts, 0, &fan, 1, false, 0, 1).unwrap();
        assert_eq!(got.unwrap().len(), MAX_RESHARD_WORLD as usize);
    }
}
