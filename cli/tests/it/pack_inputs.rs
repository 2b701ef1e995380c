//! Packing from where datasets live: WebDataset shards written by `webdataset.ShardWriter`,
//! Parquet files in the Hugging Face layout written by pyarrow, lists with extra columns, inputs
//! over loopback HTTP and S3, and damaged inputs. Every carried field is compared byte for byte.
//!
//! Needs `python3` with `webdataset` and `pyarrow` (`tests/interop/make_inputs.py` writes the
//! inputs); lighttpd and s3s-fs as the remote tests do.

use crate::common::*;
use crate::remote::servers::{Lighttpd, S3};
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::process::Command;

/// Writes the inputs into `dir` and returns what they should carry (`expect.json`).
fn make_inputs(dir: &Path) -> Value {
    let out = Command::new("python3")
        .arg(repo_root().join("tests/interop/make_inputs.py"))
        .arg(sample_data())
        .arg(dir)
        .output()
        .expect("run python3");
    assert!(
        out.status.success(),
        "make_inputs.py failed (pip install webdataset pyarrow): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&std::fs::read(dir.join("expect.json")).unwrap()).unwrap()
}

/// Every sample of a tar dataset: key → field → bytes.
pub(crate) fn tar_fields(ds: &Path) -> BTreeMap<String, HashMap<String, Vec<u8>>> {
    let m = manifest(ds);
    let mut out = BTreeMap::new();
    for e in &m.shards {
        let bytes = std::fs::read(ds.join(&e.file)).unwrap();
        let (samples, err) = shardtool_wds::group_samples(&bytes);
        assert!(err.is_none(), "{}: {err:?}", e.file);
        for s in samples {
            let fields = s
                .fields
                .iter()
                .map(|(f, d)| (f.clone(), d.to_vec()))
                .collect();
            assert!(
                out.insert(s.key.clone(), fields).is_none(),
                "{} twice",
                s.key
            );
        }
    }
    out
}

pub(crate) fn verify_ok(ds: &Path) {
    Cmd::new([std::ffi::OsStr::new("verify"), ds.as_os_str()]).ok();
}

fn shard_names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".tar"))
        .collect();
    v.sort();
    v
}

#[test]
fn webdataset_shards_repack_with_every_field_carried_byte_for_byte() {
    let t = tempdir();
    let want = make_inputs(t.path());
    let wds = t.path().join("wds");
    let pattern = wds.join("shard-{000000..000002}.tar");
    let ds = t.path().join("ds");
    pack(&pattern, &ds)
        .args(["--resize", "shorter:32", "--shard-samples", "16"])
        .ok();
    let m = manifest(&ds);
    let expected = want["wds"].as_object().unwrap();
    assert_eq!(m.inputs.packed as usize, expected.len());
    assert_eq!(m.fields, ["cls", "jpg", "json"]);
    assert_eq!(m.optional_fields, ["txt"], "some samples have no caption");
    assert_eq!(m.pack["json"], "input");
    assert_eq!(m.pack["input_format"], "wds");
    let got = tar_fields(&ds);
    assert_eq!(got.len(), expected.len());
    for (key, e) in expected {
        let s = &got[key];
        assert_eq!(
            String::from_utf8(s["json"].clone()).unwrap(),
            e["json"].as_str().unwrap(),
            "{key}: the input's json is carried as it is"
        );
        assert_eq!(
            s.get("txt").map(|t| String::from_utf8(t.clone()).unwrap()),
            e["txt"].as_str().map(str::to_string),
            "{key}"
        );
        assert_eq!(s["cls"], e["cls"].to_string().as_bytes(), "{key}");
        let img = image::load_from_memory(&s["jpg"]).unwrap();
        assert_eq!(img.width().min(img.height()), 32, "{key} was resized");
    }
    verify_ok(&ds);

    // A folder of shards is the same input; so is a glob.
    let ds2 = t.path().join("ds2");
    pack(&wds, &ds2)
        .args(["--resize", "shorter:32", "--shard-samples", "16"])
        .ok();
    let ds3 = t.path().join("ds3");
    pack(wds.join("shard-*.tar"), &ds3)
        .args(["--resize", "shorter:32", "--shard-samples", "16"])
        .ok();
    for other in [&ds2, &ds3] {
        assert_eq!(
            manifest(other).shards,
            m.shards,
            "the same shards, byte for byte"
        );
    }

    // Packed shards carry the fields in their records; the reader hands them back.
    let packed = t.path().join("packed");
    pack(&pattern, &packed)
        .args(["--resize", "crop:24x24", "--format", "packed"])
        .ok();
    let pm = manifest(&packed);
    assert_eq!(pm.fields, ["json", "key", "label", "pixels"]);
    assert_eq!(pm.optional_fields, ["txt"]);
    verify_ok(&packed);
    let out = Cmd::new([
        "read",
        packed.to_str().unwrap(),
        "--no-shuffle",
        "--fields",
        "txt",
    ])
    .ok()
    .stdout;
    let mut seen = 0;
    for line in out.lines() {
        let (key, rest) = line.split_once('\t').unwrap();
        let value = rest.strip_prefix("txt=").unwrap();
        let value: Value = serde_json::from_str(value).unwrap();
        assert_eq!(value, expected[key]["txt"], "{key}");
        seen += 1;
    }
    assert_eq!(seen, expected.len());
}

#[test]
fn hugging_face_parquet_packs_with_class_names_captions_and_columns() {
    let t = tempdir();
    let want = make_inputs(t.path());
    let ds = t.path().join("ds");
    // The dataset folder (with its `data/`) is recognised as Parquet.
    pack(t.path().join("parquet"), &ds)
        .args(["--resize", "shorter:32"])
        .ok();
    let m = manifest(&ds);
    let expected = want["parquet"].as_object().unwrap();
    let classes: Vec<String> = serde_json::from_value(want["classes"].clone()).unwrap();
    assert_eq!(
        m.classes, classes,
        "class names from the ClassLabel feature"
    );
    assert_eq!(m.fields, ["cls", "jpg", "json", "txt"]);
    assert_eq!(m.inputs.found as usize, expected.len());
    let errs = check_accounting(&ds, &[]);
    assert_eq!(errs.len(), 1);
    let (path, err) = errs.iter().next().unwrap();
    assert_eq!(err.kind, "no_image");
    let row = path.rsplit('/').next().unwrap();
    assert_eq!(expected[row]["image"], false, "{path}");
    let got = tar_fields(&ds);
    assert_eq!(got.len(), expected.len() - 1);
    for s in got.values() {
        let json: Value = serde_json::from_slice(&s["json"]).unwrap();
        let source = json["source"].as_str().unwrap();
        let row = source.rsplit('/').next().unwrap();
        let e = &expected[row];
        assert_eq!(s["txt"], e["text"].as_str().unwrap().as_bytes(), "{row}");
        assert_eq!(json["label"], e["label"], "{row}");
        assert_eq!(json["score"], e["score"], "{row}");
        assert_eq!(json["image_path"], e["image_path"], "{row}");
        assert_eq!(s["cls"], e["label"].to_string().as_bytes(), "{row}");
    }
    verify_ok(&ds);
}

/// Every codec and page layout pyarrow writes packs whole: pack's own page-header walk (run
/// before the `parquet` crate reads a page) refuses none of them.
#[test]
fn parquet_in_every_codec_and_page_layout_pyarrow_writes_packs_whole() {
    let t = tempdir();
    let want = make_inputs(t.path());
    let names = want["layouts"]["names"].as_array().unwrap();
    let rows = want["layouts"]["rows"].as_u64().unwrap();
    assert!(names.len() >= 7 && rows > 0);
    let ds = t.path().join("ds");
    pack(t.path().join("parquet-layouts"), &ds)
        .args(["--resize", "shorter:32"])
        .ok();
    let m = manifest(&ds);
    assert_eq!(m.inputs.found, names.len() as u64 * rows);
    assert_eq!(m.inputs.packed, m.inputs.found);
    assert!(check_accounting(&ds, &[]).is_empty());
    let sources: Vec<String> = tar_fields(&ds)
        .values()
        .map(|s| {
            let json: Value = serde_json::from_slice(&s["json"]).unwrap();
            json["source"].as_str().unwrap().to_owned()
        })
        .collect();
    for name in names {
        let file = format!("{}.parquet", name.as_str().unwrap());
        let from_file = sources.iter().filter(|s| s.contains(&file)).count();
        assert_eq!(from_file as u64, rows, "{file}");
    }
    verify_ok(&ds);
}

#[test]
fn damaged_inputs_give_per_sample_errors_and_keep_what_is_whole() {
    let t = tempdir();
    make_inputs(t.path());
    let wds = t.path().join("wds");
    let whole = std::fs::read(wds.join("shard-000000.tar")).unwrap();
    let cut = t.path().join("cut");
    std::fs::create_dir_all(&cut).unwrap();
    std::fs::write(cut.join("a.tar"), &whole[..whole.len() / 2]).unwrap();
    let ds = t.path().join("ds");
    pack(&cut, &ds).args(["--resize", "shorter:32"]).ok();
    let errs = check_accounting(&ds, &[]);
    let shard_err = errs.values().find(|e| e.kind == "bad_shard").unwrap();
    assert!(shard_err.message.contains("truncated"), "{shard_err:?}");
    let packed = manifest(&ds).inputs.packed;
    assert!(
        packed > 3 && packed < 20,
        "{packed} whole samples before the cut"
    );

    // A file that is not Parquet, beside a good one: one error, the good rows packed.
    let pq = t.path().join("pq");
    std::fs::create_dir_all(&pq).unwrap();
    let good = t.path().join("parquet/data/train-00000-of-00002.parquet");
    std::fs::copy(&good, pq.join("a.parquet")).unwrap();
    let mut broken = std::fs::read(&good).unwrap();
    let mid = broken.len() / 2;
    let end = mid + 4096.min(broken.len() - mid);
    for b in &mut broken[mid..end] {
        *b = 0x5a;
    }
    std::fs::write(pq.join("b.parquet"), &broken).unwrap();
    std::fs::write(pq.join("c.parquet"), b"PAR1 not really").unwrap();
    // A file on which the Parquet reader panics (found by fuzzing): its failure, said once, in
    // errors.jsonl with the reader's message, and no panic report on stderr.
    std::fs::copy(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../fuzz/regressions/parquet/rows-panic-the-parquet-reader"),
        pq.join("d.parquet"),
    )
    .unwrap();
    let ds = t.path().join("ds-pq");
    let run = pack(&pq, &ds).args(["--resize", "shorter:32"]).ok();
    assert!(!run.stderr.contains("panicked"), "{}", run.stderr);
    // Staging takes time before the first input: it is said first.
    let first = run.stderr.lines().next().unwrap_or_default();
    assert!(
        first.starts_with("listing: staging the rows of 4 Parquet file(s)"),
        "{first}"
    );
    let errs = check_accounting(&ds, &[]);
    assert!(
        errs.values()
            .any(|e| e.kind == "bad_parquet" && e.path.ends_with("c.parquet")),
        "{errs:?}"
    );
    // One line per row of the failed row group, each with the reader's message.
    let panicked: Vec<_> = errs
        .values()
        .filter(|e| e.path.contains("d.parquet:"))
        .collect();
    assert!(
        !panicked.is_empty()
            && panicked.iter().all(|e| e.kind == "bad_parquet"
                && e.message.starts_with("the Parquet reader failed on")
                && !e.message.ends_with(": ")),
        "{errs:?}"
    );
    assert!(
        manifest(&ds).inputs.packed >= 22,
        "a.parquet's rows are packed"
    );
    assert!(
        !std::fs::read_dir(&ds).unwrap().any(|e| e
            .unwrap()
            .file_name()
            .to_string_lossy()
            .starts_with(".stage")),
        "staged files are removed"
    );
}

/// WebDataset shards compressed as shardtool writes them (`--compress zstd`: `.tar.zst`) or with
/// gzip (`.tar.gz`, `.tgz`) pack as the plain shards do: the same samples, every field the same.
#[test]
fn compressed_webdataset_shards_pack_like_plain_ones() {
    let t = tempdir();
    make_inputs(t.path());
    let wds = t.path().join("wds");
    let opts = ["--resize", "shorter:32", "--shard-samples", "16"];
    let plain = t.path().join("plain");
    pack(&wds, &plain).args(opts).ok();
    let want = tar_fields(&plain);

    let gz = t.path().join("gz");
    std::fs::create_dir_all(&gz).unwrap();
    let out = Command::new("python3")
        .args(["-c", "import gzip,sys,pathlib\nfor i,p in enumerate(sorted(pathlib.Path(sys.argv[1]).glob('*.tar'))):\n    (pathlib.Path(sys.argv[2])/(p.stem+('.tgz' if i else '.tar.gz'))).write_bytes(gzip.compress(p.read_bytes()))"])
        .arg(&wds)
        .arg(&gz)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let from_gz = t.path().join("from-gz");
    pack(&gz, &from_gz).args(opts).ok();
    assert_eq!(tar_fields(&from_gz), want);
    assert!(
        !file_names(&from_gz).iter().any(|f| f.starts_with(".stage")),
        "decompressed shards are removed"
    );

    // shardtool's own zstd output, packed again: the same samples and captions.
    let z = t.path().join("z");
    pack(&wds, &z).args(opts).args(["--compress", "zstd"]).ok();
    assert!(shard_names(&z).is_empty() && manifest(&z).shards[0].file.ends_with(".tar.zst"));
    let from_z = t.path().join("from-z");
    pack(&z, &from_z).args(opts).ok();
    let again = tar_fields(&from_z);
    assert_eq!(
        again.keys().collect::<Vec<_>>(),
        want.keys().collect::<Vec<_>>()
    );
    for (key, fields) in &want {
        assert_eq!(again[key].get("txt"), fields.get("txt"), "{key}");
    }
    verify_ok(&from_z);

    // A file that only claims to be compressed is an error line, not a crash.
    let bad = t.path().join("bad");
    std::fs::create_dir_all(&bad).unwrap();
    std::fs::write(bad.join("a.tar.zst"), b"\x28\xb5\x2f\xfd not zstd").unwrap();
    std::fs::copy(wds.join("shard-000000.tar"), bad.join("b.tar")).unwrap();
    let ds = t.path().join("from-bad");
    pack(&bad, &ds).args(opts).ok();
    let errs = check_accounting(&ds, &[]);
    assert!(
        errs.values()
            .any(|e| e.kind == "bad_shard" && e.path.ends_with("a.tar.zst")),
        "{errs:?}"
    );

    // A compressed shard cut short keeps the samples before the cut, as a cut plain tar does.
    let cut = t.path().join("cut");
    std::fs::create_dir_all(&cut).unwrap();
    let gz = std::fs::read(gz.join("shard-000000.tar.gz")).unwrap();
    std::fs::write(cut.join("c.tar.gz"), &gz[..gz.len() / 2]).unwrap();
    let ds = t.path().join("from-cut");
    pack(&cut, &ds).args(opts).ok();
    let errs = check_accounting(&ds, &[]);
    assert!(
        errs.values().any(|e| e.kind == "bad_shard"
            && e.message.contains("cannot decompress")
            && e.message.contains("samples before the damage are kept")),
        "{errs:?}"
    );
    let packed = manifest(&ds).inputs.packed;
    assert!(
        packed > 0 && packed < 20,
        "{packed} whole samples before the cut"
    );
}

/// Keys a tar header cannot hold travel in pax headers (Python's tarfile, under webdataset's
/// writers) or GNU long-name members: each names its own sample, none merged into another or
/// lost. A sample whose members repeat a field (one key written twice in a row) is an error line,
/// as webdataset refuses it.
#[test]
fn long_and_unicode_names_in_pax_and_gnu_headers_and_repeated_members() {
    let t = tempdir();
    let expect = make_inputs(t.path());
    let names = expect["names"].as_object().unwrap();
    assert_eq!(names.len(), 8);
    let ds = t.path().join("ds-names");
    pack(t.path().join("wds-names"), &ds)
        .args(["--resize", "shorter:32", "--keys", "index"])
        .ok();
    let errs = check_accounting(&ds, &[]);
    assert!(errs.is_empty(), "{errs:?}");
    let mut captions: Vec<String> = tar_fields(&ds)
        .values()
        .map(|f| String::from_utf8(f["txt"].clone()).unwrap())
        .collect();
    captions.sort();
    let mut want: Vec<String> = names
        .values()
        .map(|v| v.as_str().unwrap().to_string())
        .collect();
    want.sort();
    assert_eq!(captions, want);
    // By their own keys, which break the WebDataset key rules: a bad_key line naming each.
    let ds = t.path().join("ds-names-own-keys");
    pack(t.path().join("wds-names"), &ds)
        .args(["--resize", "shorter:32"])
        .run()
        .assert_code(1);
    let errs = errors(&ds);
    assert_eq!(errs.len(), 8, "{errs:?}");
    for key in names.keys() {
        let line = errs.iter().find(|e| e.path.ends_with(&format!(":{key}")));
        assert!(line.is_some_and(|e| e.kind == "bad_key"), "{key}: {errs:?}");
    }

    let ds = t.path().join("ds-dup");
    pack(t.path().join("wds-dup"), &ds)
        .args(["--resize", "shorter:32"])
        .ok();
    let errs = check_accounting(&ds, &[]);
    let dup: Vec<_> = errs.values().collect();
    assert!(
        dup.len() == 1
            && dup[0].kind == "bad_field"
            && dup[0].path.ends_with("dup.tar:twice")
            && dup[0].message.contains("twice"),
        "{errs:?}"
    );
    let packed = tar_fields(&ds);
    assert_eq!(packed.len(), 1);
    assert_eq!(packed.values().next().unwrap()["txt"], b"only");
}

/// A WebDataset input whose carried fields break the rules verify checks them by (a Latin-1
/// caption, a json array, a json stating another key, an oversized json): each such sample is an
/// error line saying why, never a dataset that fails verify.
#[test]
fn carried_fields_that_would_not_verify_are_refused_with_their_reason() {
    let t = tempdir();
    let image = std::fs::read(&shard_images()[0]).unwrap();
    let huge = format!("{{\"k\":\"{}\"}}", "y".repeat(2 << 20));
    let samples: [(&str, &str, &[u8]); 7] = [
        ("latin", "txt", b"caf\xe9"),
        ("latinjson", "json", b"{\"x\": \"caf\xe9\"}"),
        ("array", "json", b"[1, 2]"),
        ("twice", "json", br#"{"key": "twice", "key": "twice"}"#),
        ("otherkey", "json", br#"{"key": "someone-else"}"#),
        ("huge", "json", huge.as_bytes()),
        ("fine", "txt", "café".as_bytes()),
    ];
    let mut w = shardtool_wds::TarWriter::new(Vec::new());
    for (key, field, data) in samples {
        w.append(&format!("{key}.jpg"), &image).unwrap();
        w.append(&format!("{key}.{field}"), data).unwrap();
    }
    let input = t.path().join("in");
    write_file(input.join("shard-000000.tar"), w.finish().unwrap());
    let ds = t.path().join("ds");
    pack(&input, &ds).args(["--resize", "shorter:32"]).ok();
    let errs = check_accounting(&ds, &[]);
    let huge_says = format!("its json is {} bytes, over the", huge.len());
    for (key, says) in [
        ("latin", "its txt is not UTF-8 text"),
        ("latinjson", "its json is not UTF-8 text"),
        ("array", "its json is JSON but not an object"),
        ("twice", "its json is not valid JSON: duplicate field `key`"),
        ("otherkey", "its json states key \"someone-else\""),
        ("huge", huge_says.as_str()),
    ] {
        let e = errs
            .values()
            .find(|e| e.path.ends_with(&format!(":{key}")))
            .unwrap_or_else(|| panic!("no error line for {key}: {errs:?}"));
        assert_eq!(e.kind, "bad_field", "{e:?}");
        assert!(e.message.starts_with(says), "{key}: {e:?}");
    }
    assert_eq!(manifest(&ds).inputs.packed, 1);
    verify_ok(&ds);
}

#[test]
fn keys_that_break_the_rules_are_refused_or_numbered_with_keys_index() {
    let t = tempdir();
    let image = std::fs::read(&shard_images()[0]).unwrap();
    // As plain `tar` of class folders writes them: keys holding '/'. One carries an input json
    // stating that key, one has a key that follows the rules.
    let members: [(&str, &[u8]); 6] = [
        ("n01/a.cls", b"0"),
        ("n01/a.jpg", &image),
        ("n02/b.jpg", &image),
        (
            "n02/b.json",
            br#"{"key": "n02/b", "url": "http://x/b.jpg"}"#,
        ),
        ("plain.cls", b"1"),
        ("plain.jpg", &image),
    ];
    let input = t.path().join("in");
    write_file(
        input.join("shard-000000.tar"),
        shardtool_wds::tar_bytes(members).unwrap(),
    );
    let args = ["--resize", "shorter:32", "--no-shuffle"];

    let kept = t.path().join("kept");
    pack(&input, &kept).args(args).ok();
    let errs = check_accounting(&kept, &[]);
    for key in ["n01/a", "n02/b"] {
        let e = errs
            .values()
            .find(|e| e.path.ends_with(&format!(":{key}")))
            .unwrap_or_else(|| panic!("no error line for {key}: {errs:?}"));
        assert_eq!(e.kind, "bad_key", "{e:?}");
        assert!(e
            .message
            .ends_with("; --keys index (keys=\"index\" in Python) numbers samples instead"));
    }
    assert_eq!(manifest(&kept).inputs.packed, 1);
    assert!(manifest(&kept).pack.get("keys").is_none());
    verify_ok(&kept);

    let numbered = t.path().join("numbered");
    pack(&input, &numbered)
        .args(args)
        .args(["--keys", "index"])
        .ok();
    let m = manifest(&numbered);
    assert_eq!((m.inputs.packed, m.inputs.failed), (3, 0));
    assert_eq!(m.pack["keys"], "index");
    let samples = tar_fields(&numbered);
    let keys: Vec<&str> = samples.keys().map(String::as_str).collect();
    assert_eq!(keys, ["000000000", "000000001", "000000002"]);
    // Listing order (no shuffle): n01/a, n02/b, plain. Our own json names the input's key in its
    // source; an input json is carried byte for byte.
    let json = |k: &str| -> Value { serde_json::from_slice(&samples[k]["json"]).unwrap() };
    assert!(json("000000000")["source"]
        .as_str()
        .unwrap()
        .ends_with(":n01/a"));
    assert_eq!(samples["000000000"]["cls"], b"0");
    assert_eq!(samples["000000001"]["json"], members[3].1);
    assert!(json("000000002")["source"]
        .as_str()
        .unwrap()
        .ends_with(":plain"));
    verify_ok(&numbered);
    // Packed, the sample without a .cls is a record of label -1 beside labelled ones: whole.
    let packed = t.path().join("packed");
    pack(&input, &packed)
        .args(args)
        .args(["--keys", "index", "--format", "packed"])
        .ok();
    verify_ok(&packed);
}

pub(crate) fn shard_images() -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(sample_data().join("flower"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    v.sort();
    v
}

#[test]
fn remote_inputs_over_http_and_s3_pack_like_local_ones() {
    let t = tempdir();
    make_inputs(t.path());
    let local = t.path().join("local");
    let args = ["--resize", "shorter:32", "--shard-samples", "16"];
    pack(t.path().join("wds"), &local).args(args).ok();

    let server = Lighttpd::start(t.path());
    let url = server.url("wds/shard-{000000..000002}.tar");
    let ds = t.path().join("http");
    pack(&url, &ds).args(args).ok();
    assert_eq!(
        manifest(&ds).shards,
        manifest(&local).shards,
        "byte-identical shards"
    );
    assert!(shard_names(&ds).len() > 1);
    // The folder by URL, listed by WebDAV (whose answer names paths from the server's root).
    let ds = t.path().join("http-folder");
    pack(server.url("wds/"), &ds).args(args).ok();
    assert_eq!(manifest(&ds).shards, manifest(&local).shards);
    // Names a URL spells escaped (a space is %20), listed or given.
    let spaced = t.path().join("wds sp");
    std::fs::create_dir(&spaced).unwrap();
    for i in 0..3 {
        let from = t.path().join(format!("wds/shard-{i:06}.tar"));
        std::fs::copy(from, spaced.join(format!("s {i}.tar"))).unwrap();
    }
    // A hidden file is left out of a listed folder, as of a local one.
    std::fs::copy(spaced.join("s 0.tar"), spaced.join(".s 0 copy.tar")).unwrap();
    let ds = t.path().join("http-spaced");
    pack(server.url("wds%20sp/"), &ds).args(args).ok();
    assert_eq!(manifest(&ds).shards, manifest(&local).shards);
    let ds = t.path().join("http-spaced-files");
    pack(server.url("wds%20sp/s%20{0..2}.tar"), &ds)
        .args(args)
        .ok();
    assert_eq!(manifest(&ds).shards, manifest(&local).shards);
    // Names holding what a URL escapes as `%` (and `#`): each escaped once, listed or given.
    let odd = t.path().join("wds 50%");
    std::fs::create_dir(&odd).unwrap();
    for i in 0..3 {
        let from = t.path().join(format!("wds/shard-{i:06}.tar"));
        std::fs::copy(from, odd.join(format!("a%41 #{i}.tar"))).unwrap();
    }
    let ds = t.path().join("http-odd");
    pack(server.url("wds%2050%25/"), &ds).args(args).ok();
    assert_eq!(manifest(&ds).shards, manifest(&local).shards);
    let ds = t.path().join("http-odd-files");
    pack(server.url("wds%2050%25/a%2541%20%23{0..2}.tar"), &ds)
        .args(args)
        .ok();
    assert_eq!(manifest(&ds).shards, manifest(&local).shards);

    let s3 = S3::start();
    let bucket = s3.root.path().join("bucket/hf dir 5%");
    std::fs::create_dir_all(&bucket).unwrap();
    for f in [
        "train-00000-of-00002.parquet",
        "train-00001-of-00002.parquet",
    ] {
        let to = bucket.join(f.replace(".parquet", " %41#.parquet"));
        std::fs::copy(t.path().join("parquet/data").join(f), to).unwrap();
    }
    let from_s3 = t.path().join("s3");
    let url = "s3://bucket/hf dir 5%25/";
    Cmd::new(["pack", url, from_s3.to_str().unwrap()])
        .args(args)
        .envs(s3.env())
        .ok();
    let local_pq = t.path().join("local-pq");
    pack(t.path().join("parquet"), &local_pq).args(args).ok();
    let (a, b) = (manifest(&from_s3), manifest(&local_pq));
    assert_eq!(a.inputs, b.inputs);
    assert_eq!(a.classes, b.classes);
    let (fa, fb) = (tar_fields(&from_s3), tar_fields(&local_pq));
    for (key, s) in &fa {
        assert_eq!(s["txt"], fb[key]["txt"], "{key}");
        assert_eq!(s["jpg"], fb[key]["jpg"], "{key}");
    }
}

/// A re-pack of shardtool's own shards keeps the class names their manifest gives; shards that
/// come with no manifest name each class by its number.
#[test]
fn a_repack_of_shardtool_shards_keeps_their_class_names() {
    let t = tempdir();
    let first = t.path().join("first");
    pack(sample_data(), &first)
        .args(["--resize", "shorter:32", "--shard-samples", "16"])
        .args(["--compress", "zstd", "-q"])
        .ok();
    let classes = manifest(&first).classes;
    assert!(classes.len() > 1 && classes.iter().all(|c| c.parse::<u32>().is_err()));
    // Column options name list and Parquet columns: for these inputs they are refused, not
    // ignored.
    for (input, flag) in [
        (&first, "--text-column"),
        (&sample_data(), "--label-column"),
    ] {
        let r = pack(input, t.path().join("refused"))
            .args([flag, "caption"])
            .run();
        r.assert_code(2);
        assert!(
            r.stderr
                .contains(&format!("{flag} applies to list and Parquet")),
            "{}",
            r.stderr
        );
    }
    let again = t.path().join("again");
    pack(&first, &again)
        .args(["--input-format", "wds", "-q"])
        .ok();
    assert_eq!(manifest(&again).classes, classes);
    verify_ok(&again);

    let loose = t.path().join("loose");
    std::fs::create_dir(&loose).unwrap();
    let shard = &manifest(&first).shards[0].file;
    std::fs::copy(first.join(shard), loose.join(shard)).unwrap();
    let numbered = t.path().join("numbered");
    pack(&loose, &numbered)
        .args(["--input-format", "wds", "-q"])
        .ok();
    let m = manifest(&numbered);
    let want: Vec<String> = (0..m.classes.len()).map(|i| i.to_string()).collect();
    assert!(!want.is_empty());
    assert_eq!(m.classes, want);
}

/// Two shardtool datasets numbering their classes differently (one has a class sorting first)
/// re-packed together: labels are mapped by class name, never mixed by number.
#[test]
fn a_repack_of_datasets_with_other_class_tables_maps_labels_by_name() {
    let t = tempdir();
    let wider = t.path().join("wider");
    let cp = |from: PathBuf, to: &Path| {
        let ok = std::process::Command::new("cp")
            .arg("-r")
            .arg(from)
            .arg(to)
            .status();
        assert!(ok.unwrap().success());
    };
    cp(sample_data(), &wider);
    cp(sample_data().join("insect"), &wider.join("aardvark"));
    let insects = std::fs::read_dir(wider.join("aardvark")).unwrap().count();
    for (input, out) in [(sample_data(), "a"), (wider, "b")] {
        pack(input, t.path().join(out))
            .args(["--resize", "crop:24x24", "-q"])
            .ok();
    }
    assert_ne!(
        manifest(&t.path().join("a")).classes,
        manifest(&t.path().join("b")).classes
    );
    // And an unlabelled dataset beside them (a list of paths): nothing of its to map.
    let list = t.path().join("u.csv");
    let flower = sample_data().join("flower");
    let rows: Vec<String> = (std::fs::read_dir(&flower).unwrap())
        .map(|e| e.unwrap().path().display().to_string())
        .collect();
    std::fs::write(&list, format!("path\n{}\n", rows.join("\n"))).unwrap();
    pack_list(&list, t.path().join("u"))
        .args(["--resize", "crop:24x24", "-q"])
        .ok();
    let both = t.path().join("both");
    let shards = format!("{}/{{a,b,u}}/*.tar", t.path().display());
    pack(&shards, &both)
        .args(["--input-format", "wds", "--keys", "index", "-q"])
        .ok();
    let classes = manifest(&both).classes;
    let samples = wds_samples(&both);
    assert_eq!(samples.len(), 2 * 45 + insects + rows.len());
    for s in samples.iter().filter(|s| s.cls >= 0) {
        // The folder each image was first packed from is its class.
        let first = s.json["input_source"].as_str().unwrap();
        let folder = first.split('/').next().unwrap();
        assert_eq!(classes[s.cls as usize], folder, "{}", s.json);
        assert_eq!(s.json["class"], folder, "{}", s.json);
    }
    assert_eq!(samples.iter().filter(|s| s.cls < 0).count(), rows.len());
    verify_ok(&both);
}

#[test]
fn samples_a_shard_cannot_hold_are_refused_with_their_reason_and_the_rest_packed() {
    let t = tempdir();
    let images = shard_images();
    let (image, other) = (
        std::fs::read(&images[0]).unwrap(),
        std::fs::read(&images[1]).unwrap(),
    );
    // A 36-byte key and a 64-byte field name each follow the rules, but `key.field` passes the
    // 100 bytes a tar member name holds; `both` carries a `.png` beside its `.jpg` image; `big`
    // carries more than a sample may.
    let long = "a".repeat(36);
    let long_field = format!("{long}.{}", "z".repeat(64));
    let big = vec![7u8; (16 << 20) + 1];
    // Our writer keeps to 100-byte names: the long one goes first, under a GNU long-name entry.
    let mut tar = Vec::new();
    let block = |b: &mut Vec<u8>, data: &[u8]| {
        b.extend_from_slice(data);
        b.resize(b.len().div_ceil(512) * 512, 0);
    };
    let name = format!("{long_field}\0");
    let header = shardtool_wds::ustar_header("././@LongLink", name.len() as u64, b'L', "");
    block(&mut tar, &header.unwrap());
    block(&mut tar, name.as_bytes());
    block(
        &mut tar,
        &shardtool_wds::ustar_header("x", 1, b'0', "").unwrap(),
    );
    block(&mut tar, b"x");
    let members: [(&str, &[u8]); 6] = [
        (&format!("{long}.jpg"), &image),
        ("both.jpg", &image),
        ("both.png", &other),
        ("big.bin", &big),
        ("big.jpg", &image),
        ("fine.jpg", &image),
    ];
    let rest = shardtool_wds::tar_bytes(members).unwrap();
    let input = t.path().join("in");
    write_file(input.join("shard-000000.tar"), [tar, rest].concat());
    let refused = |ds: &Path, want: &[(&str, &str, &str)]| {
        let errs = check_accounting(ds, &[]);
        assert_eq!(errs.len(), want.len(), "{errs:?}");
        for (key, kind, says) in want {
            let e = (errs.values())
                .find(|e| e.path.ends_with(&format!(":{key}")))
                .unwrap_or_else(|| panic!("no error line for {key}: {errs:?}"));
            assert_eq!(&e.kind, kind, "{e:?}");
            assert!(e.message.contains(says), "{key}: {e:?}");
        }
        verify_ok(ds);
    };
    let too_long = (long.as_str(), "bad_key", "would be named in 101 bytes");
    let too_big = ("big", "too_large", "take 16777217 bytes");
    let jpeg = t.path().join("jpeg");
    pack(&input, &jpeg).args(["--resize", "shorter:32"]).ok();
    refused(&jpeg, &[too_long, too_big]);
    assert_eq!(tar_fields(&jpeg)["both"]["png"], other);
    let png = t.path().join("png");
    pack(&input, &png)
        .args(["--resize", "shorter:32", "--encode", "png"])
        .ok();
    let clash = ("both", "bad_field", "the image would replace it");
    refused(&png, &[too_long, too_big, clash]);
    let numbered = t.path().join("numbered");
    pack(&input, &numbered)
        .args([
            "--resize",
            "shorter:32",
            "--encode",
            "png",
            "--keys",
            "index",
        ])
        .ok();
    refused(&numbered, &[too_big, clash]);

    // Captions of 1 MiB of `"` take 4 MiB each of a packed shard's header (escaped twice): 23
    // fit under its 100 MB cap. A pack by size starts another shard; a planned shard holds
    // fixed positions, so that pack stops saying how to plan it.
    let caption = "\"".repeat((1 << 20) - 16);
    let mut w = shardtool_wds::TarWriter::new(Vec::new());
    for i in 0..30 {
        w.append(&format!("s{i:02}.jpg"), &image).unwrap();
        w.append(&format!("s{i:02}.txt"), caption.as_bytes())
            .unwrap();
    }
    // Last in the order, a sample no header can hold alone: 15 MiB of NUL bytes, valid UTF-8
    // stored as text, take 7 bytes each escaped twice. Refused, it leaves no empty shard open.
    w.append("zz.jpg", &image).unwrap();
    w.append("zz.bin", &vec![0u8; 15 << 20]).unwrap();
    let input = t.path().join("captions");
    write_file(input.join("shard-000000.tar"), w.finish().unwrap());
    let packed = t.path().join("packed");
    let args = [
        "--format",
        "packed",
        "--resize",
        "crop:16x16",
        "--no-shuffle",
    ];
    pack(&input, &packed).args(args).ok();
    let m = manifest(&packed);
    assert_eq!((m.inputs.packed, m.totals.shards), (30, 2));
    let errs = check_accounting(&packed, &[]);
    let zz = errs.values().find(|e| e.path.ends_with(":zz")).unwrap();
    assert_eq!(zz.kind, "too_large", "{zz:?}");
    assert!(m.shards.iter().all(|s| s.samples < 30), "{:?}", m.shards);
    verify_ok(&packed);
    let planned = t.path().join("planned");
    let r = pack(&input, &planned)
        .args(args)
        .args(["--shard-samples", "30"])
        .run();
    r.assert_code(1);
    assert!(
        r.stderr.contains("--shard-samples of at most 23"),
        "{}",
        r.stderr
    );
}
