//! Loader behaviour on real shards written to disk: exactly-once over ranks and workers,
//! determinism, resume, corrupt records, out-of-order delivery and zero-copy batch contents.

use proptest::prelude::*;
use shardtool_core::Checksum;
use shardtool_manifest::{Manifest, ShardEntry, ShardFormat};
use shardtool_packed::{Mode, PackedWriter};
use shardtool_reader::{CorruptPolicy, Layout, Loader, ReadError, Remainder};
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

/// Pixels of sample `i`: 3x2 RGB whose bytes encode `i`, so contents can be checked.
fn pixels(i: u32) -> Vec<u8> {
    (0..18u32)
        .map(|j| (i.wrapping_mul(31).wrapping_add(j)) as u8)
        .collect()
}

fn write_manifest(dir: &Path, shards: Vec<ShardEntry>) {
    let classes = (0..10).map(|i| i.to_string()).collect();
    let m = Manifest::new("test", classes, vec![], shards);
    std::fs::write(dir.join("manifest.json"), m.to_json()).unwrap();
}

/// A packed dataset with the given shard sizes; sample keys are `s<global index>`.
fn packed_dataset(dir: &Path, sizes: &[u32]) -> Vec<String> {
    let mut entries = Vec::new();
    let mut keys = Vec::new();
    let mut next = 0u32;
    for (si, &n) in sizes.iter().enumerate() {
        let mut w = PackedWriter::new(Mode::Fixed);
        for _ in 0..n {
            let key = format!("s{next}");
            w.add(
                &key,
                i64::from(next % 10),
                2,
                3,
                &pixels(next),
                serde_json::json!({}),
            )
            .unwrap();
            keys.push(key);
            next += 1;
        }
        let mut bytes = Vec::new();
        w.finish(&mut bytes).unwrap();
        let file = format!("shard-{si:06}.safetensors");
        std::fs::write(dir.join(&file), &bytes).unwrap();
        entries.push(ShardEntry {
            file,
            format: ShardFormat::Packed,
            compression: None,
            samples: u64::from(n),
            bytes: bytes.len() as u64,
            checksum: Checksum::of(&bytes).to_string(),
            uncompressed_bytes: None,
            uncompressed_checksum: None,
        });
    }
    write_manifest(dir, entries);
    keys
}

/// A position saved at one world size resumes at another: each rank reads its share of what the
/// ranks of the first left (each having read as many batches), so that with what they read every
/// sample is read at most once, and only the remainder of the new split is left out. A state
/// that tells its own rank's position alone is refused.
#[test]
fn an_epoch_resumes_at_another_world_size_reading_each_sample_once() {
    let dir = tempfile::tempdir().unwrap();
    let all = packed_dataset(dir.path(), &[13, 20, 7, 11]);
    let at = |r, w| {
        Loader::builder(dir.path())
            .batch_size(4)
            .seed(5)
            .epoch(2)
            .partition(r, w)
    };
    let mut seen: Vec<String> = Vec::new();
    let mut state = None;
    for r in 0..3 {
        let mut l = at(r, 3).build().unwrap();
        for _ in 0..2 {
            seen.extend(l.next().unwrap().unwrap().keys.iter().cloned());
        }
        state = Some(l.state());
    }
    let state = state.unwrap();
    // On two hosts, then one of them saved after a batch and resumed on four.
    let mut rest = Vec::new();
    let mut two = Vec::new();
    for r in 0..2 {
        let mut l = at(r, 2).resume_matching(state.clone()).build().unwrap();
        let first = l.next().unwrap().unwrap();
        seen.extend(first.keys.iter().cloned());
        two.push(l.state());
        rest.push(keys_of(l));
    }
    assert_eq!(rest[0].len(), rest[1].len());
    let mut four = Vec::new();
    for r in 0..4 {
        four.push(keys_of(
            at(r, 4).resume_matching(two[1].clone()).build().unwrap(),
        ));
    }
    assert!(four.iter().all(|k| k.len() == four[0].len()));
    let mut once = std::collections::BTreeSet::new();
    for k in seen.iter().chain(four.iter().flatten()) {
        assert!(once.insert(k.clone()), "{k} read twice");
    }
    // 51 samples over 3 ranks: 17 each; 8 read by each, 27 left; over 2 ranks 13 each (one
    // left out), 4 read by each, 18 left; over 4 ranks 4 each (two left out).
    assert_eq!(once.len(), all.len() - 3);
    assert_eq!(
        seen.len() + rest.iter().map(Vec::len).sum::<usize>(),
        all.len() - 1
    );
    // The world sizes travel in the state: the second resume is the same from any rank's.
    let from_first = at(3, 4).resume_matching(two[0].clone()).build().unwrap();
    assert_eq!(keys_of(from_first), four[3]);
    // Out of order, or inside a batch, each rank stands elsewhere: refused.
    let mut l = at(0, 3).in_order(false).build().unwrap();
    let b = l.next().unwrap().unwrap();
    for s in [l.state(), l.state_within(&b, 1)] {
        if s.delivered_extra.is_empty() && s.partial.is_none() {
            continue;
        }
        let err = at(0, 2).resume_matching(s).build().err().unwrap();
        assert!(
            err.to_string()
                .contains("only where every rank stood alike"),
            "{err}"
        );
    }
}

fn keys_of(loader: Loader) -> Vec<String> {
    let mut out = Vec::new();
    for b in loader {
        out.extend(b.unwrap().keys.iter().cloned());
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]
    #[test]
    fn union_over_ranks_and_workers_is_the_dataset(
        sizes in proptest::collection::vec(1u32..40, 1..7),
        world in 1u32..5,
        workers in 1usize..4,
        batch in 1usize..17,
        seed: u64,
        out_of_order: bool,
    ) {
        let dir = tempfile::tempdir().unwrap();
        let keys = packed_dataset(dir.path(), &sizes);
        let mut seen: BTreeMap<String, u32> = BTreeMap::new();
        let mut batches = Vec::new();
        for rank in 0..world {
            let loader = Loader::builder(dir.path())
                .seed(seed).batch_size(batch).partition(rank, world).workers(workers)
                .in_order(!out_of_order).remainder(Remainder::Pad)
                .build().unwrap();
            batches.push(loader.batches_per_epoch());
            for k in keys_of(loader) { *seen.entry(k).or_default() += 1; }
        }
        // Every rank yields the same number of batches; with padding every sample is read.
        prop_assert!(batches.iter().all(|&b| b == batches[0]));
        prop_assert_eq!(seen.len(), keys.len());
        let extra: u32 = seen.values().map(|c| c - 1).sum();
        prop_assert!(extra < world);
    }
}

#[test]
fn same_seed_same_order_other_epoch_other_order_workers_do_not_matter() {
    let dir = tempfile::tempdir().unwrap();
    packed_dataset(dir.path(), &[50, 50, 50, 50]);
    let run = |epoch, workers| {
        keys_of(
            Loader::builder(dir.path())
                .seed(5)
                .epoch(epoch)
                .workers(workers)
                .batch_size(7)
                .build()
                .unwrap(),
        )
    };
    let a = run(0, 1);
    assert_eq!(a.len(), 200);
    assert_eq!(a, run(0, 3));
    assert_ne!(a, run(1, 1));
    let mut sorted = a.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(sorted.len(), 200);
}

#[test]
fn resume_at_every_point_gives_the_identical_remainder() {
    let dir = tempfile::tempdir().unwrap();
    packed_dataset(dir.path(), &[13, 29, 7]);
    let build = || {
        Loader::builder(dir.path())
            .seed(11)
            .epoch(2)
            .batch_size(5)
            .workers(2)
    };
    let full = keys_of(build().build().unwrap());
    for stop in [0usize, 1, 4, 5, 6, 23, 48] {
        let mut loader = build().build().unwrap();
        let mut got = Vec::new();
        let mut state = loader.state();
        while got.len() < stop {
            let b = loader.next().unwrap().unwrap();
            let take = (stop - got.len()).min(b.len());
            got.extend(b.keys[..take].iter().cloned());
            state = loader.state_within(&b, take);
        }
        drop(loader);
        // The state survives a JSON round trip (what --state-out writes).
        let state = serde_json::from_str(&serde_json::to_string(&state).unwrap()).unwrap();
        let rest = keys_of(
            Loader::builder(dir.path())
                .workers(3)
                .resume(state)
                .build()
                .unwrap(),
        );
        got.extend(rest);
        assert_eq!(got, full, "stopped after {stop}");
    }
}

#[test]
fn resume_refuses_another_dataset() {
    let a = tempfile::tempdir().unwrap();
    let b = tempfile::tempdir().unwrap();
    packed_dataset(a.path(), &[10]);
    packed_dataset(b.path(), &[11]);
    let state = Loader::builder(a.path()).build().unwrap().state();
    let err = Loader::builder(b.path())
        .resume(state)
        .build()
        .err()
        .unwrap();
    assert!(matches!(err, ReadError::BadState(_)), "{err}");
}

/// A state loaded with `resume_matching` must come from a loader made the same way: rank 0's
/// state loaded on rank 1 (a checkpoint saved once and loaded everywhere) is refused, naming
/// the difference; the same state on rank 0 resumes. A prefetch counted in bytes is refused.
#[test]
fn a_matching_resume_refuses_other_options_and_prefetch_is_bounded() {
    let dir = tempfile::tempdir().unwrap();
    packed_dataset(dir.path(), &[20]);
    let rank = |r| Loader::builder(dir.path()).batch_size(3).partition(r, 2);
    let mut zero = rank(0).build().unwrap();
    zero.next().unwrap().unwrap();
    let state = zero.state();
    drop(zero);
    // Rank 0's state loaded on rank 1 (a checkpoint saved on rank 0 alone): rank 1 goes on
    // after its own first batch, as it stood when rank 0 saved.
    let own: Vec<String> = keys_of(rank(1).build().unwrap()).split_off(3);
    assert_eq!(
        keys_of(rank(1).resume_matching(state.clone()).build().unwrap()),
        own
    );
    let err = rank(0)
        .seed(9)
        .resume_matching(state.clone())
        .build()
        .err()
        .unwrap();
    assert!(
        err.to_string().contains("seed: 0 in the state, 9 here"),
        "{err}"
    );
    let all: usize = rank(0).build().unwrap().map(|b| b.unwrap().len()).sum();
    let rest = rank(0).resume_matching(state).build().unwrap();
    assert_eq!(rest.map(|b| b.unwrap().len()).sum::<usize>(), all - 3);
    let err = rank(0).prefetch(1 << 30).build().err().unwrap();
    assert!(matches!(err, ReadError::BadOptions(_)), "{err}");
    // A shuffle buffer or interleave of 0, asked for or in a state, is refused, not taken as 1.
    for err in [
        rank(0).shuffle_buffer(0).build().err().unwrap(),
        rank(0).interleave(0).build().err().unwrap(),
        rank(0).max_pixels(0).build().err().unwrap(),
    ] {
        assert!(matches!(err, ReadError::BadOptions(_)), "{err}");
    }
    let mut emptied = rank(0).build().unwrap().state();
    emptied.order.buffer = 0;
    let err = rank(0).resume(emptied).build().err().unwrap();
    assert!(
        matches!(&err, ReadError::BadState(m) if m.contains("shuffle buffer 0")),
        "{err}"
    );
}

/// A batch put back (its consumer was interrupted as it arrived) is not in the state and comes
/// again next; one forgotten after delivery is not in the state, and the epoch then ends with
/// an error rather than short.
#[test]
fn a_batch_put_back_comes_again_and_a_forgotten_one_fails_the_epoch() {
    let dir = tempfile::tempdir().unwrap();
    packed_dataset(dir.path(), &[12]);
    let build = || Loader::builder(dir.path()).batch_size(3).workers(1);
    let mut loader = build().build().unwrap();
    let first = loader.next().unwrap().unwrap();
    let keys = first.keys.clone();
    loader.put_back(first);
    assert_eq!(loader.state().delivered_prefix, 0);
    let again = loader.next().unwrap().unwrap();
    assert_eq!(again.keys, keys);
    assert_eq!(loader.state().delivered_prefix, 1);
    let second = loader.next().unwrap().unwrap();
    loader.forget(second.index, second.len());
    assert_eq!(loader.state().delivered_prefix, 1);
    let last = loader.last().unwrap();
    assert!(matches!(last, Err(ReadError::Incomplete { .. })));
}

#[test]
fn a_state_claiming_more_batches_than_the_epoch_has_is_refused_at_once() {
    // Found while writing the `loader_state` fuzz target: the claimed prefix was expanded into a
    // set of batch numbers, so 10^15 hung and exhausted memory. Such a state is damaged: it is
    // refused (an empty epoch would lose the rest of it silently).
    let dir = tempfile::tempdir().unwrap();
    packed_dataset(dir.path(), &[10]);
    let mut state = Loader::builder(dir.path())
        .batch_size(3)
        .build()
        .unwrap()
        .state();
    // Four batches: a state at the epoch's end resumes to nothing, one past it is refused.
    state.delivered_prefix = 4;
    let loader = Loader::builder(dir.path()).resume(state.clone()).build();
    assert_eq!(loader.unwrap().count(), 0);
    state.delivered_prefix = 1_000_000_000_000_000;
    let start = std::time::Instant::now();
    let err = Loader::builder(dir.path())
        .resume(state)
        .build()
        .err()
        .unwrap();
    assert!(matches!(err, ReadError::BadState(_)), "{err}");
    assert!(start.elapsed() < std::time::Duration::from_secs(10));
}

#[test]
fn a_saved_state_naming_batches_the_epoch_lacks_is_refused_or_ignored_never_a_panic() {
    // Found by the `loader_state` fuzz target: a partly read batch past the epoch's end made the
    // count of samples still to come underflow (a panic with overflow checks, a wrong count
    // without them).
    let dir = tempfile::tempdir().unwrap();
    packed_dataset(dir.path(), &[11]);
    let base = Loader::builder(dir.path())
        .batch_size(6)
        .build()
        .unwrap()
        .state();
    let all: Vec<String> = Loader::builder(dir.path())
        .batch_size(6)
        .build()
        .unwrap()
        .flat_map(|b| b.unwrap().keys.clone())
        .collect();
    // Two batches (6 and 5 samples): batch 2 does not exist.
    let mut s = base.clone();
    s.delivered_prefix = 2;
    s.partial = Some((2, 1));
    let err = Loader::builder(dir.path()).resume(s).build().err().unwrap();
    assert!(matches!(err, ReadError::BadState(_)), "{err}");
    // More samples used than the batch has.
    let mut s = base.clone();
    s.partial = Some((1, 6));
    assert!(Loader::builder(dir.path()).resume(s).build().is_err());
    // A batch read to its end counts as delivered.
    let mut s = base.clone();
    s.partial = Some((1, 5));
    let got: Vec<String> = Loader::builder(dir.path())
        .resume(s.clone())
        .build()
        .unwrap()
        .flat_map(|b| b.unwrap().keys.clone())
        .collect();
    assert_eq!(got, all[..6]);
    // Batches past the end counted as delivered: a damaged state, refused.
    s.delivered_extra = vec![7, u64::MAX];
    let err = Loader::builder(dir.path()).resume(s).build().err().unwrap();
    assert!(matches!(err, ReadError::BadState(_)), "{err}");
}

#[test]
fn a_huge_interleave_reserves_only_what_the_dataset_has() {
    // Found by the `loader_state` fuzz target: a saved state (or the option) asking to interleave
    // 3*10^10 shard pieces reserved room for all of them (224 GB) before reading any.
    let dir = tempfile::tempdir().unwrap();
    packed_dataset(dir.path(), &[5, 6]);
    let mut s = Loader::builder(dir.path()).build().unwrap().state();
    s.order.interleave = 30_000_000_052;
    let n: usize = Loader::builder(dir.path())
        .resume(s)
        .batch_size(1)
        .build()
        .unwrap()
        .map(|b| b.unwrap().len())
        .sum();
    assert_eq!(n, 11);
}

#[test]
fn batches_hold_the_record_bytes_in_a_fixed_layout() {
    let dir = tempfile::tempdir().unwrap();
    packed_dataset(dir.path(), &[9, 9]);
    let loader = Loader::builder(dir.path())
        .batch_size(4)
        .shuffle(false)
        .build()
        .unwrap();
    let mut n = 0;
    for b in loader {
        let b = b.unwrap();
        assert_eq!(
            b.layout,
            Layout::Fixed {
                height: 2,
                width: 3
            }
        );
        assert_eq!(b.data().len(), b.len() * 18);
        for (i, k) in b.keys.iter().enumerate() {
            let idx: u32 = k[1..].parse().unwrap();
            assert_eq!(b.sample(i), &pixels(idx)[..]);
            assert_eq!(b.labels[i], i64::from(idx % 10));
        }
        n += b.len();
    }
    assert_eq!(n, 18);
}

#[test]
fn drop_remainder_gives_equal_ranks() {
    let dir = tempfile::tempdir().unwrap();
    packed_dataset(dir.path(), &[10, 10, 3]);
    let counts: Vec<usize> = (0..4)
        .map(|r| {
            keys_of(
                Loader::builder(dir.path())
                    .partition(r, 4)
                    .remainder(Remainder::Drop)
                    .build()
                    .unwrap(),
            )
            .len()
        })
        .collect();
    assert_eq!(counts, vec![5, 5, 5, 5]);
}

/// A tar dataset of tiny PNGs, one of which is not a valid image.
fn tar_dataset(dir: &Path, n: u32, corrupt: u32) {
    let mut w = shardtool_wds::TarWriter::new(Vec::new());
    for i in 0..n {
        let key = format!("t{i:03}");
        let mut png = Vec::new();
        image::RgbImage::from_pixel(4, 3, image::Rgb([i as u8, 2, 3]))
            .write_to(&mut std::io::Cursor::new(&mut png), image::ImageFormat::Png)
            .unwrap();
        if i == corrupt {
            png.truncate(20);
        }
        w.append(&format!("{key}.cls"), (i % 3).to_string().as_bytes())
            .unwrap();
        w.append(&format!("{key}.png"), &png).unwrap();
    }
    let bytes = w.finish().unwrap();
    std::fs::write(dir.join("shard-000000.tar"), &bytes).unwrap();
    write_manifest(
        dir,
        vec![ShardEntry {
            file: "shard-000000.tar".into(),
            format: ShardFormat::Wds,
            compression: None,
            samples: u64::from(n),
            bytes: bytes.len() as u64,
            checksum: Checksum::of(&bytes).to_string(),
            uncompressed_bytes: None,
            uncompressed_checksum: None,
        }],
    );
}

#[test]
fn corrupt_record_fails_or_is_skipped_and_counted() {
    let dir = tempfile::tempdir().unwrap();
    tar_dataset(dir.path(), 12, 5);
    let failing = Loader::builder(dir.path())
        .decode(true)
        .batch_size(4)
        .build()
        .unwrap();
    let errors: Vec<ReadError> = failing.filter_map(Result::err).collect();
    assert_eq!(errors.len(), 1);
    assert!(errors[0].to_string().contains("t005"), "{}", errors[0]);

    let mut skipping = Loader::builder(dir.path())
        .decode(true)
        .batch_size(4)
        .on_corrupt(CorruptPolicy::Skip)
        .build()
        .unwrap();
    let mut keys = Vec::new();
    for b in &mut skipping {
        let b = b.unwrap();
        assert!(matches!(
            b.layout,
            Layout::Fixed {
                height: 3,
                width: 4
            }
        ));
        keys.extend(b.keys.clone());
    }
    assert_eq!(keys.len(), 11);
    assert!(!keys.contains(&"t005".to_string()));
    assert_eq!(skipping.metrics().corrupt_skipped, 1);
}

/// A state within a batch that skipped a corrupt record resumes at the next sample, whatever
/// the cut: the skipped record counts as a place of the batch.
#[test]
fn resume_within_a_batch_with_a_skipped_record_repeats_nothing() {
    let dir = tempfile::tempdir().unwrap();
    tar_dataset(dir.path(), 12, 5);
    let build = || {
        Loader::builder(dir.path())
            .decode(true)
            .batch_size(4)
            .shuffle(false)
            .on_corrupt(CorruptPolicy::Skip)
    };
    let full = keys_of(build().build().unwrap());
    assert_eq!(full.len(), 11);
    for stop in 0..full.len() {
        let mut loader = build().build().unwrap();
        let (mut got, mut state) = (Vec::new(), loader.state());
        while got.len() < stop {
            let b = loader.next().unwrap().unwrap();
            let take = (stop - got.len()).min(b.len());
            got.extend(b.keys[..take].iter().cloned());
            state = loader.state_within(&b, take);
        }
        let resumed = Loader::builder(dir.path())
            .decode(true)
            .on_corrupt(CorruptPolicy::Skip)
            .resume(state)
            .build()
            .unwrap();
        got.extend(keys_of(resumed));
        assert_eq!(got, full, "stopped after {stop}");
    }
}

#[test]
fn encoded_records_are_delivered_without_decoding() {
    let dir = tempfile::tempdir().unwrap();
    tar_dataset(dir.path(), 6, 99);
    let b = Loader::builder(dir.path())
        .batch_size(6)
        .shuffle(false)
        .build()
        .unwrap()
        .next()
        .unwrap()
        .unwrap();
    assert!(matches!(b.layout, Layout::Encoded { .. }));
    assert!(b.sample(0).starts_with(b"\x89PNG"));
}

#[test]
fn out_of_order_delivery_is_not_blocked_by_a_slow_record() {
    let dir = tempfile::tempdir().unwrap();
    packed_dataset(dir.path(), &[40, 40]);
    let slow_key = "s0";
    let build = |in_order| {
        Loader::builder(dir.path())
            .shuffle(false)
            .batch_size(4)
            .workers(2)
            .in_order(in_order)
            .inject_delay(slow_key, Duration::from_millis(400))
            .build()
            .unwrap()
    };
    // Out of order: the batch holding the slow record (batch 0) is not the first delivered.
    let mut loader = build(false);
    let first = loader.next().unwrap().unwrap();
    assert_ne!(first.index, 0);
    let rest: Vec<u64> = loader.by_ref().map(|b| b.unwrap().index).collect();
    assert!(rest.contains(&0));
    assert_eq!(rest.len() + 1, 20);
    let slow = loader.metrics().slow_records;
    assert!(slow.iter().any(|s| s.key == slow_key), "{slow:?}");
    // In order: batch 0 comes first whatever its delay.
    let mut loader = build(true);
    assert_eq!(loader.next().unwrap().unwrap().index, 0);
}

#[test]
fn missing_shard_is_an_error_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    packed_dataset(dir.path(), &[5, 5]);
    std::fs::remove_file(dir.path().join("shard-000001.safetensors")).unwrap();
    let errs: Vec<String> = Loader::builder(dir.path())
        .build()
        .unwrap()
        .filter_map(|b| b.err().map(|e| e.to_string()))
        .collect();
    assert!(errs.iter().any(|e| e.contains("shard-000001")), "{errs:?}");
}

#[test]
fn split_shares_are_disjoint_and_interleave_to_the_whole_epoch() {
    let dir = tempfile::tempdir().unwrap();
    packed_dataset(dir.path(), &[7, 3, 12, 5]);
    let build = |split: Option<(u32, u32)>| {
        let mut b = Loader::builder(dir.path())
            .seed(4)
            .batch_size(3)
            .partition(1, 2)
            .workers(2);
        if let Some((i, n)) = split {
            b = b.split(i, n);
        }
        b.build().unwrap()
    };
    let whole: Vec<(u64, Vec<String>)> = build(None)
        .map(|b| b.map(|b| (b.index, b.keys.clone())).unwrap())
        .collect();
    for n in 1..4u32 {
        let mut got = Vec::new();
        for i in 0..n {
            let share = build(Some((i, n)));
            assert_eq!(share.batches_per_epoch(), whole.len() as u64);
            for b in share {
                let b = b.unwrap();
                assert_eq!(b.index % u64::from(n), u64::from(i));
                got.push((b.index, b.keys.clone()));
            }
        }
        got.sort();
        assert_eq!(got, whole, "{n} shares");
    }
    // A share's state resumes only that share.
    let mut share = build(Some((1, 2)));
    share.next().unwrap().unwrap();
    let state = share.state();
    assert_eq!(state.split, Some((1, 2)));
    // The other share's batches are implied, not listed.
    assert!(state.delivered_extra.is_empty());
    let rest: Vec<u64> = Loader::builder(dir.path())
        .split(1, 2)
        .resume(state.clone())
        .build()
        .unwrap()
        .map(|b| b.unwrap().index)
        .collect();
    let expected: Vec<u64> = whole
        .iter()
        .map(|(i, _)| *i)
        .filter(|i| i % 2 == 1)
        .skip(1)
        .collect();
    assert_eq!(rest, expected);
    assert!(matches!(
        Loader::builder(dir.path())
            .split(0, 2)
            .resume(state)
            .build(),
        Err(ReadError::BadState(_))
    ));
    assert!(matches!(
        Loader::builder(dir.path()).split(2, 2).build(),
        Err(ReadError::BadOptions(_))
    ));
}

#[test]
fn next_timeout_reports_pending_then_the_batch() {
    let dir = tempfile::tempdir().unwrap();
    let keys = packed_dataset(dir.path(), &[4]);
    let mut loader = Loader::builder(dir.path())
        .shuffle(false)
        .batch_size(4)
        .workers(1)
        .inject_delay(&keys[0], Duration::from_millis(300))
        .build()
        .unwrap();
    assert!(matches!(
        loader.next_timeout(Duration::from_millis(10)),
        shardtool_reader::Next::Pending
    ));
    let mut pending = 0;
    let batch = loop {
        match loader.next_timeout(Duration::from_millis(20)) {
            shardtool_reader::Next::Pending => pending += 1,
            shardtool_reader::Next::Ready(b) => break b.unwrap(),
            shardtool_reader::Next::Done => panic!("ended before its batch"),
        }
    };
    assert!(pending > 0);
    assert_eq!(batch.keys, keys);
    assert!(matches!(
        loader.next_timeout(Duration::from_millis(10)),
        shardtool_reader::Next::Done
    ));
}

#[test]
fn a_dataset_rewritten_under_an_open_one_is_an_error_not_a_mix() {
    let dir = tempfile::tempdir().unwrap();
    packed_dataset(dir.path(), &[4, 4, 4]);
    let ds = shardtool_reader::Dataset::open(dir.path()).unwrap();
    ds.shard(0).unwrap();
    // As `pack --overwrite` does: the manifest goes first, then shards are replaced, then a new
    // manifest is published.
    std::fs::remove_file(dir.path().join("manifest.json")).unwrap();
    let other = tempfile::tempdir().unwrap();
    packed_dataset(other.path(), &[3, 3, 3]);
    for f in ["shard-000001.safetensors", "manifest.json"] {
        std::fs::rename(other.path().join(f), dir.path().join(f)).unwrap();
    }
    let err = ds.shard(1).err().unwrap().to_string();
    assert!(
        err.contains("the dataset changed under this reader"),
        "{err}"
    );
    assert_eq!(err.matches("could not be opened").count(), 1, "{err}");
    // A shard opened before the change stays readable; one removed since says the same.
    assert_eq!(ds.shard(0).unwrap().len(), 4);
    std::fs::remove_file(dir.path().join("shard-000002.safetensors")).unwrap();
    let err = ds.shard(2).err().unwrap().to_string();
    assert!(
        err.contains("the dataset changed under this reader"),
        "{err}"
    );
    // Opened again, the dataset is the new one, whole.
    let again = shardtool_reader::Dataset::open(dir.path()).unwrap();
    assert_eq!(again.shard(1).unwrap().len(), 3);
}

/// A loader resumed from a state inside a batch that is asked for its state before that batch
/// comes again gives the same state back: the samples already used are not read twice.
#[test]
fn a_resumed_partial_batch_keeps_its_place_until_it_is_handed_out() {
    let dir = tempfile::tempdir().unwrap();
    packed_dataset(dir.path(), &[10]);
    let make = || Loader::builder(dir.path()).batch_size(4).workers(1);
    let all: usize = make().build().unwrap().map(|b| b.unwrap().len()).sum();
    let mut first = make().build().unwrap();
    let batch = first.next().unwrap().unwrap();
    let within = first.state_within(&batch, 2);
    drop(first);
    let resumed = make().resume(within.clone()).build().unwrap();
    assert_eq!(resumed.state(), within);
    let again = make().resume(resumed.state()).build().unwrap();
    assert_eq!(again.map(|b| b.unwrap().len()).sum::<usize>(), all - 2);
}

/// A state keeps the `drop_last` it was saved with: a loader made without the same setting
/// resumes the saved sequence (its short last batch too), a matching resume names the
/// difference, and a state that does not record it, counting the short batch a `drop_last`
/// loader leaves out, says so.
#[test]
fn a_state_resumes_with_the_drop_last_it_was_saved_with() {
    let dir = tempfile::tempdir().unwrap();
    packed_dataset(dir.path(), &[10]);
    let make = |drop| Loader::builder(dir.path()).batch_size(3).drop_last(drop);
    let full = keys_of(make(false).build().unwrap());
    let mut loader = make(false).build().unwrap();
    let first = loader.next().unwrap().unwrap();
    let state = loader.state();
    drop(loader);
    assert_eq!(state.drop_last, Some(false));
    let mut got = first.keys.to_vec();
    got.extend(keys_of(make(true).resume(state.clone()).build().unwrap()));
    assert_eq!(got, full);
    let err = make(true).resume_matching(state).build().err().unwrap();
    assert!(
        err.to_string()
            .contains("drop_last: false in the state, true here"),
        "{err}"
    );
    let mut ended = make(false).build().unwrap();
    while ended.next().is_some() {}
    let mut unrecorded = ended.state();
    assert_eq!(unrecorded.delivered_prefix, 4);
    unrecorded.drop_last = None;
    let text = serde_json::to_string(&unrecorded).unwrap();
    assert!(!text.contains("drop_last"), "{text}");
    let err = make(true).resume(unrecorded.clone()).build().err().unwrap();
    assert!(
        matches!(&err, ReadError::BadState(m) if m.contains("resume with drop_last off")),
        "{err}"
    );
    // The same batch named out of order, nothing below it delivered: refused, never a panic.
    unrecorded.delivered_prefix = 0;
    unrecorded.delivered_extra = vec![3];
    let err = make(true).resume(unrecorded).build().err().unwrap();
    assert!(
        matches!(&err, ReadError::BadState(m) if m.contains("resume with drop_last off")),
        "{err}"
    );
}
