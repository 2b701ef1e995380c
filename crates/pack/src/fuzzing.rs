//! Entry points for the fuzz targets in `fuzz/` (feature `fuzzing`): pack's parsers of untrusted
//! bytes (list files, Parquet files, a partitioned pack's plan, input list and done records),
//! each run on arbitrary bytes and checked for what must hold beyond "no panic".

use crate::list_file::{csv_crate_first_record, csv_fields, list_text, row_columns};
use crate::listing::{Columns, ListOptions, Listing};
use crate::parquet::list_parquet;
use crate::partition::parse_done;
use crate::plan_file::{check_plan, make_plan, parse_inputs, parse_plan, plan_hash, PlanContainer};
use crate::wds_input::list_wds;
use crate::{InputSource, PackPlan, PlanFile};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// A scratch folder for this process (see [`remove_scratch`]).
fn scratch() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let d = std::env::temp_dir().join(format!("shardtool-fuzz-{}", std::process::id()));
        std::fs::create_dir_all(&d).expect("a scratch folder in the temporary directory");
        d
    })
}

/// Removes this process's scratch folder (a replay calls it when done; a fuzzing process
/// leaves a few small files behind).
pub fn remove_scratch() {
    let _ = std::fs::remove_dir_all(scratch());
}

/// The checks every listing must pass: labels within the classes (or -1 when unlabelled), spans
/// inside their container.
fn check_listing(listing: &Listing, container_len: impl Fn(usize) -> u64) {
    for item in listing.inputs.iter() {
        assert!(!item.path_bytes().is_empty(), "an input without a path");
        if listing.labelled {
            assert!(
                item.label == -1 || (item.label as usize) < listing.classes.len(),
                "label {} with {} classes",
                item.label,
                listing.classes.len()
            );
        } else {
            assert_eq!(item.label, -1, "a label in an unlabelled listing");
        }
        if let Some((start, end)) = item.span {
            let c = item.container.expect("a span without a container") as usize;
            assert!(c < listing.containers.len());
            assert!(
                start < end && end <= container_len(c),
                "span {start}..{end}"
            );
        }
    }
}

/// A CSV or JSONL list file. `data[0]` picks the kind (bit 0) and which columns are named by
/// the user (bits 1 to 3); the rest is the file. A listing has at most one input or error per
/// line (CR or LF), and every row it keeps by span reads back.
pub fn list(data: &[u8]) {
    let Some((&head, text)) = data.split_first() else {
        return;
    };
    let name = if head & 1 == 0 { "l.csv" } else { "l.jsonl" };
    if head & 1 == 0 {
        same_first_record_as_csv_crate(text);
    }
    let columns = Columns {
        image: (head & 2 != 0).then(|| "img".into()),
        label: (head & 4 != 0).then(|| "cls".into()),
        text: (head & 8 != 0).then(|| "caption".into()),
        drop: match head & 16 {
            0 => Vec::new(),
            _ => vec!["note".into()],
        },
    };
    let Ok(listing) = list_text(Path::new(name), text, &columns) else {
        return;
    };
    // CSV records may end in CR alone (classic Mac files), so count CR-separated lines too.
    let lines = text.split(|&b| b == b'\n' || b == b'\r').count();
    assert!(listing.inputs.len() + listing.errors.len() <= lines);
    check_listing(&listing, |_| text.len() as u64);
    for item in listing.inputs.iter() {
        if let (Some(c), Some((start, end))) = (item.container, item.span) {
            let kind = &listing.containers[c as usize].kind;
            let row = &text[start as usize..end as usize];
            if let Err(e) = row_columns(row, kind, &columns) {
                panic!("a listed row does not read back by its span: {e}");
            }
        }
    }
}

/// The parser that reads list rows back (`csv_fields`, one per thread) reads the same first
/// record from any bytes as a fresh `csv` reader does, or fails where it fails.
fn same_first_record_as_csv_crate(bytes: &[u8]) {
    let theirs = csv_crate_first_record(bytes);
    let mut out = Vec::new();
    let ours = csv_fields(bytes, &mut out)
        .map(|f| f.map(|f| f.iter().map(|s| s.to_string()).collect::<Vec<_>>()));
    match (&ours, &theirs) {
        (Ok(a), Ok(b)) => assert_eq!(a, b, "the row parser and the csv crate disagree"),
        (Err(_), Err(_)) => {}
        _ => panic!("the row parser gave {ours:?}, the csv crate {theirs:?}"),
    }
}

/// A Parquet file, listed (and its row groups staged as tars) as `pack` does. Listing a local
/// file fails as a whole only when its columns do not fit (no image column: the command's
/// mistake, refused before an output is cleared); a bad file is a `bad_parquet` error line. Every staged tar reads
/// back as a well-formed tar, and every row's span lies inside it.
pub fn parquet(data: &[u8]) {
    // pack contains a panic of the Parquet reader (a third-party parser; 57.3.2 unwrapped a
    // missing field of some damaged footers) with `catch_unwind` and reports the file as
    // `bad_parquet`. libFuzzer's panic hook would abort on such a contained panic: keep the
    // default hook here. A panic that escapes still fails the target.
    static HOOK: std::sync::Once = std::sync::Once::new();
    HOOK.call_once(|| drop(std::panic::take_hook()));
    let (dir, file, options) = scratch_input("parquet", "input.parquet", data);
    let listing = match list_parquet(&[file], &options) {
        Err(crate::ListError::BadInput { message }) if message.contains("fits the columns") => {
            return;
        }
        listed => listed.expect("listing a local Parquet file reports a bad one, never fails"),
    };
    let sizes: Vec<u64> = listing
        .containers
        .iter()
        .map(|c| {
            let bytes = std::fs::read(&c.path).expect("a staged container exists");
            whole_tar(&bytes, "a staged tar");
            bytes.len() as u64
        })
        .collect();
    check_listing(&listing, |c| sizes[c]);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `data` written as `name` in a fresh scratch folder `folder`, and the listing options that
/// stage into it: the folder, the file as a listed input, the options.
fn scratch_input(folder: &str, name: &str, data: &[u8]) -> (PathBuf, String, ListOptions) {
    let dir = scratch().join(folder);
    std::fs::create_dir_all(&dir).expect("scratch folder");
    let file = dir.join(name);
    std::fs::write(&file, data).expect("scratch file");
    let options = ListOptions {
        stage_dir: dir.clone(),
        max_input_bytes: 1 << 24,
        jobs: 1,
        // A few bytes of zstd may declare terabytes; fuzzing stages on a memory file system.
        max_shard_bytes: Some(1 << 24),
        ..Default::default()
    };
    (dir, file.to_string_lossy().into_owned(), options)
}

/// Panics unless `bytes` read as a tar to their end without an error.
fn whole_tar(bytes: &[u8], what: &str) {
    for member in shardtool_wds::TarReader::new(bytes) {
        if let Err(e) = member {
            panic!("{what} does not hold whole tar members: {e}");
        }
    }
}

/// A WebDataset shard given to `pack` as input, listed as `pack` lists it (samples found by
/// their headers, labels from `.cls`). Listing a local shard never fails as a whole; a damaged
/// one is an error line, and what was found before the damage is kept. Every sample's span lies
/// inside the shard, holds whole tar members and groups into that one sample again.
pub fn wds_input(data: &[u8]) {
    let (dir, file, options) = scratch_input("wds", "input.tar", data);
    let listing =
        list_wds(&[file], &options).expect("listing a local shard reports a bad one, never fails");
    // The shard as indexed: the input, or its decompressed copy when it is zstd or gzip.
    let shard = match listing.containers.first() {
        Some(c) if c.path.file_name() != Some("input.tar".as_ref()) => {
            std::fs::read(&c.path).expect("the staged shard")
        }
        _ => data.to_vec(),
    };
    check_listing(&listing, |_| shard.len() as u64);
    for item in listing.inputs.iter() {
        let (start, end) = item.span.expect("a WebDataset input has a span");
        assert!(item.key.is_some(), "a WebDataset input without its key");
        let span = &shard[start as usize..end as usize];
        whole_tar(span, "a sample's span");
        // Read again at transform time, the span must name the same one sample (pax and GNU
        // long names included).
        let (samples, _) = shardtool_wds::group_samples(span);
        assert_eq!(
            samples.len(),
            1,
            "a sample's span groups into {} samples",
            samples.len()
        );
        assert_eq!(Some(samples[0].key.as_str()), item.key, "the span's key");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A planned output of three inputs, made once per process (its plan is the base that the
/// input-list target edits).
fn base_plan() -> &'static PlanFile {
    static PLAN: OnceLock<PlanFile> = OnceLock::new();
    PLAN.get_or_init(|| {
        let root = scratch().join("planned");
        let _ = std::fs::remove_dir_all(&root);
        for (class, name) in [("a", "x.jpg"), ("a", "y.png"), ("b", "z.jpg")] {
            let d = root.join("in").join(class);
            std::fs::create_dir_all(&d).expect("scratch folder");
            std::fs::write(d.join(name), b"bytes").expect("scratch file");
        }
        let mut plan = PackPlan::new(InputSource::Folder(root.join("in")), root.join("out"));
        plan.shard_samples = Some(2);
        make_plan(&plan, &crate::NoProgress).expect("a plan of three files")
    })
}

/// The plan hash done records are read under (the seed generator writes it into its record).
pub const DONE_PLAN: &str = "xxh3:0000000000000000";

/// A partitioned pack's records. `data[0] % 3` picks `plan.json` (0), `inputs.jsonl` (1) or a
/// done record (2); the rest is the file.
///
/// - A plan that parses re-parses equal from its own JSON, and when its options make a pack plan,
///   the options that plan writes read back as written; one that parses as JSON but fails its
///   hash is checked again under a recomputed hash, so the checks after the hash run too.
/// - An input list is read against the base plan, with the list's own checksum and either its
///   line count or a count taken from its first eight bytes (a plan may claim anything): what
///   reads back has one size per input and names only the plan's containers.
/// - A done record that names plan [`DONE_PLAN`] and shard 0 re-parses equal from its own JSON.
pub fn plan_records(data: &[u8]) {
    let Some((&head, rest)) = data.split_first() else {
        return;
    };
    let path = Path::new("_plan/fuzz");
    match head % 3 {
        0 => match parse_plan(rest, path) {
            Ok(p) => {
                let again = parse_plan(&serde_json::to_vec(&p).expect("serialises"), path)
                    .expect("a plan re-parses from its own JSON");
                assert_eq!(again, p);
                let out = || PathBuf::from("out");
                if let Ok(plan) = PackPlan::from_frozen(&p.options, out()) {
                    let frozen = plan.frozen();
                    let again = PackPlan::from_frozen(&frozen, out())
                        .expect("the options a plan writes make a plan");
                    assert_eq!(again.frozen(), frozen, "options read back as written");
                }
            }
            Err(_) => {
                if let Ok(mut p) = serde_json::from_slice::<PlanFile>(rest) {
                    p.hash = plan_hash(&p);
                    let _ = check_plan(&p, path);
                }
            }
        },
        1 => {
            let mut plan = base_plan().clone();
            plan.containers = ["tar", "csv"]
                .iter()
                .map(|kind| PlanContainer {
                    path: PathBuf::from(format!("c.{kind}")),
                    staged: false,
                    source: format!("c.{kind}"),
                    kind: (*kind).to_string(),
                    headers: Vec::new(),
                    size: None,
                    etag: None,
                    checksum: None,
                    modified_ns: None,
                })
                .collect();
            plan.inputs_checksum = shardtool_core::Checksum::of(rest).to_string();
            plan.inputs = if head & 4 == 0 {
                rest.iter().filter(|&&b| b == b'\n').count() as u64
            } else {
                let mut n = [0u8; 8];
                let k = rest.len().min(8);
                n[..k].copy_from_slice(&rest[..k]);
                u64::from_le_bytes(n)
            };
            if let Ok((inputs, sizes)) = parse_inputs(rest, &plan, path) {
                assert_eq!(inputs.len() as u64, plan.inputs);
                assert_eq!(sizes.len(), inputs.len());
                for item in inputs.iter() {
                    assert!(item
                        .container
                        .is_none_or(|c| (c as usize) < plan.containers.len()));
                }
            }
        }
        _ => {
            let hash = DONE_PLAN;
            if let Some(rec) = parse_done(rest, hash, 0) {
                let json = serde_json::to_vec(&rec).expect("serialises");
                let again = parse_done(&json, hash, 0).expect("a done record re-parses");
                assert_eq!(
                    serde_json::to_value(&again).ok(),
                    serde_json::to_value(&rec).ok()
                );
            }
        }
    }
}
