//! Taking a saved position into a loader's builder: the checks that it belongs there, and what
//! it resumes where it was saved at another rank or world size.

use super::LoaderBuilder;
use crate::state::LoaderState;
use crate::ReadError;

/// What a saved state sets besides the builder's options.
#[derive(Debug, Default)]
pub(super) struct Resumed {
    /// Every batch below this one was delivered.
    pub delivered_prefix: u64,
    /// Batches past the prefix that were delivered.
    pub extra: Vec<u64>,
    /// A batch of which only the first samples were used.
    pub partial: Option<(u64, usize)>,
    /// The world sizes the epoch ran at before, as [`LoaderState::resharded`] lists them.
    pub resharded: Vec<(u32, u64)>,
}

impl LoaderBuilder {
    /// Takes the state to resume from, if one was given: sets the options it fixes and returns
    /// the position (nothing delivered without one).
    pub(super) fn take_resume(&mut self, fingerprint: &str) -> Result<Resumed, ReadError> {
        let Some(s) = self.resume.take() else {
            return Ok(Resumed::default());
        };
        if s.version != 1 || s.dataset != fingerprint {
            return Err(ReadError::BadState(
                "the saved state belongs to another dataset or version".into(),
            ));
        }
        if s.split != self.split {
            let share = |s: Option<(u32, u32)>| match s {
                Some((i, n)) => format!("share {i} of {n} of the rank's batches"),
                None => "all of the rank's batches".to_string(),
            };
            return Err(ReadError::BadState(format!(
                "the saved state is for {}, this loader reads {} (a state resumes with the \
                 worker count it was saved with)",
                share(s.split),
                share(self.split)
            )));
        }
        // A partial batch of which none was used is its start (written so before this was
        // known).
        let mut s = s;
        s.partial = s.partial.filter(|&(_, used)| used > 0);
        // Another rank or world size than the state's, asked for: DDP ranks step together, so
        // the state tells what every rank of its world delivered.
        let moved = (self.resume_strict || self.partition_set)
            && (s.rank, s.world) != (self.rank, self.world);
        if let Some(why) = moved.then(|| unmovable(&s)).flatten() {
            return Err(ReadError::BadState(format!(
                "the saved state is of rank {} of {}, this loader is rank {} of {}: a state \
                 resumes at another rank or world size only where every rank stood alike, and \
                 this one {why}; load each rank's own state (at the world size it was saved \
                 at), or start the next epoch (set_epoch, or read --epoch)",
                s.rank, s.world, self.rank, self.world
            )));
        }
        if self.resume_strict {
            let differs = strict_differences(&s, self, moved);
            if !differs.is_empty() {
                return Err(ReadError::BadState(format!(
                    "the saved state was made by a loader with other options ({}); load it into \
                     a loader made as that one was",
                    differs.join("; ")
                )));
            }
        }
        self.order = s.order;
        self.epoch = s.epoch;
        if !moved {
            self.rank = s.rank;
            self.world = s.world;
            self.env_partition_error = None;
        }
        self.batch_size = s.batch_size;
        self.drop_last = s.drop_last.unwrap_or(self.drop_last);
        let mut resharded = s.resharded;
        // The prefix is checked once the epoch's batch count is known: a saved state is read
        // from a checkpoint file and may claim any number.
        let delivered_prefix = match moved && s.world != self.world {
            true => {
                resharded.push((s.world, s.delivered_prefix));
                0
            }
            false => s.delivered_prefix,
        };
        Ok(Resumed {
            delivered_prefix,
            extra: s.delivered_extra,
            partial: s.partial,
            resharded,
        })
    }
}

/// Why a state tells only its own rank's position, if it does: other ranks may stand elsewhere.
fn unmovable(s: &LoaderState) -> Option<&'static str> {
    if s.split.is_some() {
        Some("is one DataLoader worker's share of its rank's batches")
    } else if !s.delivered_extra.is_empty() {
        Some("was read out of order (in_order off), each rank to another position")
    } else if s.partial.is_some() {
        Some("ends inside a batch")
    } else {
        None
    }
}

/// What differs between a saved state and the builder it is loaded into, as `name state/builder`
/// (the partition not, where the state is `moved` to the builder's).
fn strict_differences(s: &LoaderState, b: &LoaderBuilder, moved: bool) -> Vec<String> {
    let mut out = Vec::new();
    let mut check = |name: &str, state: String, here: String| {
        if state != here {
            out.push(format!("{name}: {state} in the state, {here} here"));
        }
    };
    if !moved {
        check(
            "rank",
            format!("{} of {}", s.rank, s.world),
            format!("{} of {}", b.rank, b.world),
        );
    }
    check(
        "batch size",
        s.batch_size.to_string(),
        b.batch_size.to_string(),
    );
    check("epoch", s.epoch.to_string(), b.epoch.to_string());
    if let Some(d) = s.drop_last {
        check("drop_last", d.to_string(), b.drop_last.to_string());
    }
    let (o, p) = (&s.order, &b.order);
    check("seed", o.seed.to_string(), p.seed.to_string());
    check("shuffle", o.shuffle.to_string(), p.shuffle.to_string());
    check(
        "interleave",
        o.interleave.to_string(),
        p.interleave.to_string(),
    );
    check("shuffle buffer", o.buffer.to_string(), p.buffer.to_string());
    check(
        "remainder",
        o.remainder.to_string(),
        p.remainder.to_string(),
    );
    out
}
