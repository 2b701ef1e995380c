//! Property tests over the parsers of untrusted bytes that pack reads: list files (CSV and
//! JSONL) and their rows, Parquet files, and a partitioned pack's plan, input list and done
//! records. Arbitrary and mutated inputs must give errors (or per-input error records), never a
//! panic. These run in every `cargo test`; the libFuzzer targets in `fuzz/` cover other parsers.

use crate::listing::{Columns, ContainerKind, InputSource, ListOptions};
use crate::plan_file::{make_plan, read_inputs, read_plan, PLAN_DIR};
use crate::store::Store;
use crate::PackPlan;
use proptest::prelude::*;
use std::path::Path;

/// A planned output of a few real files, made once per test process.
fn planned() -> &'static Path {
    static DIR: std::sync::OnceLock<tempfile::TempDir> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        let t = tempfile::tempdir().unwrap();
        for (class, name) in [("a", "x.jpg"), ("a", "y.png"), ("b", "z.jpg")] {
            std::fs::create_dir_all(t.path().join("in").join(class)).unwrap();
            std::fs::write(t.path().join("in").join(class).join(name), b"bytes").unwrap();
        }
        let mut plan = PackPlan::new(
            InputSource::Folder(t.path().join("in")),
            t.path().join("out"),
        );
        plan.shard_samples = Some(2);
        make_plan(&plan, &crate::NoProgress).unwrap();
        t
    })
    .path()
}

/// `bytes` with the positions in `flips` xor-ed by their values.
fn mutate(bytes: &[u8], flips: &[(usize, u8)]) -> Vec<u8> {
    let mut b = bytes.to_vec();
    if !b.is_empty() {
        for &(i, x) in flips {
            let n = b.len();
            b[i % n] ^= x;
        }
    }
    b
}

/// A copy of the planned output whose file `name` (under `_plan/`) is `bytes`.
fn with_plan_file(name: &str, bytes: &[u8]) -> tempfile::TempDir {
    let t = tempfile::tempdir().unwrap();
    let src = planned().join("out").join(PLAN_DIR);
    let dst = t.path().join(PLAN_DIR);
    std::fs::create_dir_all(dst.join("done")).unwrap();
    for f in ["plan.json", "inputs.jsonl"] {
        std::fs::copy(src.join(f), dst.join(f)).unwrap();
    }
    std::fs::write(dst.join(name), bytes).unwrap();
    t
}

// 256 cases a test by default; PROPTEST_CASES=N for a longer run.
proptest! {
    #[test]
    fn a_damaged_plan_is_an_error_never_a_panic(
        flips in proptest::collection::vec((any::<usize>(), 1u8..), 1..6),
        junk in proptest::collection::vec(any::<u8>(), 0..400),
    ) {
        let good = std::fs::read(planned().join("out").join(PLAN_DIR).join("plan.json")).unwrap();
        for bytes in [mutate(&good, &flips), junk] {
            let t = with_plan_file("plan.json", &bytes);
            // A changed byte either breaks the JSON or the hash; whitespace may survive both.
            if let Ok(p) = read_plan(t.path()) {
                prop_assert_eq!(serde_json::to_vec(&p).ok(), serde_json::to_vec(
                    &read_plan(&planned().join("out")).unwrap()).ok());
            }
        }
    }

    #[test]
    fn a_damaged_input_list_is_an_error_never_a_panic(
        flips in proptest::collection::vec((any::<usize>(), 1u8..), 1..6),
        lines in proptest::collection::vec("[\\[\\]0-9a-z\",:{}/ .-]{0,60}", 0..8),
    ) {
        let good_dir = planned().join("out");
        let plan = read_plan(&good_dir).unwrap();
        let good = std::fs::read(good_dir.join(PLAN_DIR).join("inputs.jsonl")).unwrap();
        let junk: Vec<u8> = lines.join("\n").into_bytes();
        for bytes in [mutate(&good, &flips), junk] {
            let t = with_plan_file("inputs.jsonl", &bytes);
            let store = Store::open(t.path()).unwrap();
            if bytes != good {
                prop_assert!(read_inputs(&store, &plan).is_err());
            }
        }
    }

    #[test]
    fn damaged_done_records_count_as_not_done(
        junk in proptest::collection::vec(any::<u8>(), 0..300),
    ) {
        let t = with_plan_file("done/000000.json", &junk);
        let s = crate::status(t.path()).unwrap();
        prop_assert!(s.missing.contains(&0));
    }

    #[test]
    fn any_list_file_lists_or_fails_cleanly(
        csv in "(path|label|key|text|x)(,(path|label|key|text|x)){0,3}\n([a-z0-9/._\" ,-]{0,30}\n){0,6}",
        jsonl in proptest::collection::vec("[\\[\\]{}0-9a-z\",:. -]{0,50}", 0..6),
    ) {
        let t = tempfile::tempdir().unwrap();
        for (name, text) in [("l.csv", csv), ("l.jsonl", jsonl.join("\n"))] {
            let p = t.path().join(name);
            std::fs::write(&p, &text).unwrap();
            let _ = crate::list_file::list_file(&p, &Columns::default());
            // Rows read back by span, whatever bytes the span holds.
            let kinds = [
                ContainerKind::Jsonl,
                ContainerKind::Csv { headers: vec!["path".into(), "text".into(), "x".into()] },
            ];
            for kind in &kinds {
                let _ = crate::list_file::row_columns(text.as_bytes(), kind, &Columns::default());
            }
        }
    }

    #[test]
    fn any_parquet_file_is_listed_or_reported_never_a_panic(
        body in proptest::collection::vec(any::<u8>(), 0..600),
        footer_len in any::<u32>(),
    ) {
        let t = tempfile::tempdir().unwrap();
        // Parquet's framing around arbitrary bytes: magic, body, footer length, magic.
        let mut file = b"PAR1".to_vec();
        file.extend_from_slice(&body);
        file.extend_from_slice(&footer_len.to_le_bytes());
        file.extend_from_slice(b"PAR1");
        let p = t.path().join("f.parquet");
        std::fs::write(&p, &file).unwrap();
        let options = ListOptions {
            stage_dir: t.path().join("stage"),
            max_input_bytes: 1 << 20,
            jobs: 1,
            ..Default::default()
        };
        std::fs::create_dir_all(&options.stage_dir).unwrap();
        let listing = crate::parquet::list_parquet(&[p.to_string_lossy().into_owned()], &options)
            .unwrap();
        prop_assert!(listing.inputs.is_empty());
        prop_assert!(listing.errors.iter().any(|e| e.kind == "bad_parquet"));
    }
}

/// Damaged files found by the `parquet` fuzz target: one footer panicked the Parquet reader
/// (57.3.2), one cost its thrift skip about 2 s (16 s under ASan), and a page header whose size
/// lies past the end of the file kept the reader calling `read` at the end for 85 s (60.1.0,
/// bounded by `Bounded`); two on which 60.1.0 panics (a row group's metadata assertion, now
/// refused first by pack's page walk, and rows whose reading indexes past a slice: contained); a
/// dictionary page declaring 671 million values in 24 bytes, for which the crate reserved room
/// before reading one (refused by `check_dictionary`); footer lists whose sizes declare
/// about 2^31 booleans, one of them in an 18-byte varint; and a page size the crate truncates
/// from a five-byte varint to 2 GB. Each is reported as `bad_parquet` lines, and found within a
/// second (far above the milliseconds each takes now, far below the old cost).
#[test]
fn damaged_parquet_files_are_bad_parquet_lines_found_at_once() {
    for (name, says) in [
        ("footer-panics-the-parquet-reader", ""),
        ("slow-footer-skip", ""),
        ("reads-past-the-end", ""),
        (
            "row-group-panics-the-parquet-reader",
            "its chunk declares offset",
        ),
        ("rows-panic-the-parquet-reader", "Parquet reader failed"),
        (
            "dictionary-declares-too-many-values",
            "dictionary page declares",
        ),
        ("footer-list-of-booleans", "more list or map elements"),
        (
            "footer-list-size-in-an-18-byte-varint",
            "more list or map elements",
        ),
        (
            "footer-field-read-otherwise-hides-a-list-of-booleans",
            "more list or map elements",
        ),
        (
            "page-size-truncated-from-a-long-varint",
            "2013265920 bytes uncompressed",
        ),
    ] {
        let input = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../fuzz/regressions/parquet")
            .join(name);
        let t = tempfile::tempdir().unwrap();
        let options = ListOptions {
            stage_dir: t.path().to_path_buf(),
            max_input_bytes: 1 << 20,
            jobs: 1,
            ..Default::default()
        };
        let start = std::time::Instant::now();
        let listing =
            crate::parquet::list_parquet(&[input.to_string_lossy().into_owned()], &options)
                .unwrap();
        let took = start.elapsed();
        assert!(!listing.errors.is_empty(), "{name}");
        assert!(
            listing.errors.iter().all(|e| e.kind == "bad_parquet"),
            "{name}: {:?}",
            listing.errors
        );
        assert!(took.as_secs_f64() < 1.0, "{name}: listing took {took:?}");
        assert!(
            listing.errors.iter().any(|e| e.message.contains(says)),
            "{name}: no line says {says:?}: {:?}",
            listing.errors
        );
    }
}

/// A footer whose unknown field is a map of 2^31 - 1 booleans to booleans in five bytes: the
/// `parquet` crate would skip it without reading a byte per entry (seconds); pack refuses it
/// first, and a footer that declares no more elements than it has bytes still reaches the crate.
#[test]
fn a_footer_declaring_more_elements_than_bytes_is_refused_at_once() {
    let file = |map_len: &[u8]| {
        // FileMetaData: field 200 (full id, zigzag 400) of type map, its size, key and value
        // types boolean, then the struct's stop.
        let mut meta = vec![0x0B, 0x90, 0x03];
        meta.extend_from_slice(map_len);
        meta.extend_from_slice(&[0x11, 0x00]);
        let mut bytes = b"PAR1".to_vec();
        bytes.extend_from_slice(&meta);
        bytes.extend_from_slice(&(meta.len() as u32).to_le_bytes());
        bytes.extend_from_slice(b"PAR1");
        bytes
    };
    let t = tempfile::tempdir().unwrap();
    for (name, map_len, refused) in [
        ("huge.parquet", &[0xFF, 0xFF, 0xFF, 0xFF, 0x07][..], true),
        ("small.parquet", &[0x03][..], false),
    ] {
        let path = t.path().join(name);
        std::fs::write(&path, file(map_len)).unwrap();
        let options = ListOptions {
            stage_dir: t.path().to_path_buf(),
            jobs: 1,
            ..Default::default()
        };
        let start = std::time::Instant::now();
        let listing =
            crate::parquet::list_parquet(&[path.to_string_lossy().into_owned()], &options).unwrap();
        assert!(start.elapsed().as_secs_f64() < 1.0, "{name}");
        assert!(listing.inputs.is_empty(), "{name}");
        let [e] = &listing.errors[..] else {
            panic!("{name}: {:?}", listing.errors)
        };
        assert_eq!(e.kind, "bad_parquet", "{name}");
        assert_eq!(
            e.message
                .contains("more list or map elements than it has bytes"),
            refused,
            "{name}: {}",
            e.message
        );
    }
}

/// An input with an endless name or message still makes an `errors.jsonl` line that verify and
/// merge read back (the line cap is `errors::MAX_LINE_BYTES`), even when every byte needs an
/// escape, and the cut is said.
#[test]
fn error_lines_stay_readable_whatever_the_input_says() {
    use shardtool_manifest::errors::{read_jsonl, to_jsonl, MAX_LINE_BYTES};
    let controls: String = (0..200_000)
        .map(|i| char::from(1 + (i % 30) as u8))
        .collect();
    let wide: String = "é".repeat(100_000);
    for (path, message) in [(&controls, &wide), (&wide, &controls)] {
        let record = crate::failure(path.as_str(), "decode", message.as_str());
        assert!(
            record.message.ends_with(" bytes in all)"),
            "{}",
            &record.message[..40]
        );
        let line = to_jsonl(std::slice::from_ref(&record));
        assert!(line.len() < MAX_LINE_BYTES, "{} bytes", line.len());
        let mut back = Vec::new();
        read_jsonl(&line[..], |l| back.push(l.unwrap())).unwrap();
        assert_eq!(back, [record]);
    }
}
