//! Interop with the Python `webdataset` library: `tests/interop/read_wds.py` reads every sample of
//! a packed dataset and checks labels, image sizes and counts against the json and the manifest.
//!
//! Needs `python3` with `webdataset` and `pillow`. Without them the test fails with a clear
//! message, unless `SHARDTOOL_NO_PYTHON=1` is set.

use crate::common::*;
use serde_json::Value;
use std::path::Path;
use std::process::Command;

fn python_available() -> bool {
    let ok = Command::new("python3")
        .args(["-c", "import webdataset, PIL"])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    if ok {
        return true;
    }
    if std::env::var("SHARDTOOL_NO_PYTHON").as_deref() == Ok("1") {
        eprintln!("python_webdataset_interop: skipped because SHARDTOOL_NO_PYTHON=1");
        return false;
    }
    panic!(
        "python_webdataset_interop needs `python3` with the `webdataset` and `pillow` packages \
         (pip install webdataset pillow); set SHARDTOOL_NO_PYTHON=1 to skip this test"
    );
}

/// Runs the reader script on `ds`; returns its JSON summary after checking it succeeded.
fn read_with_webdataset(ds: &Path) -> Value {
    let script = repo_root().join("tests/interop/read_wds.py");
    let out = Command::new("python3")
        .arg(&script)
        .arg(ds)
        .output()
        .expect("run python3");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "read_wds.py failed ({:?})\n--- stdout\n{stdout}\n--- stderr\n{stderr}",
        out.status
    );
    let summary: Value = serde_json::from_str(stdout.trim())
        .unwrap_or_else(|e| panic!("read_wds.py printed no JSON summary ({e}): {stdout}"));
    assert_eq!(summary["ok"], true, "{summary}");
    summary
}

#[test]
fn python_webdataset_interop() {
    if !python_available() {
        return;
    }
    let t = tempdir();
    let cases: &[(&str, &[&str])] = &[
        ("jpg", &["--resize", "shorter:64", "--shard-samples", "10"]),
        (
            "png-zstd",
            &[
                "--resize",
                "fit:48x48",
                "--encode",
                "png",
                "--compress",
                "zstd",
            ],
        ),
    ];
    for (name, args) in cases {
        let ds = t.path().join(name);
        pack(sample_data(), &ds).args(*args).ok();
        let m = manifest(&ds);
        let summary = read_with_webdataset(&ds);
        assert_eq!(summary["samples"], m.totals.samples, "{name}: {summary}");
        assert_eq!(summary["samples"], 45, "{name}");
        assert_eq!(summary["shards"], m.totals.shards, "{name}");
        let per_shard: Vec<u64> = m.shards.iter().map(|s| s.samples).collect();
        assert_eq!(summary["per_shard"], serde_json::json!(per_shard), "{name}");
        // The class counts of sample-data: flower 12, insect 10, landscape 12, leaf 11.
        let mut expect = serde_json::Map::new();
        for c in &m.classes {
            let n = std::fs::read_dir(sample_data().join(c)).unwrap().count();
            expect.insert(c.clone(), n.into());
        }
        assert_eq!(summary["classes"], Value::Object(expect), "{name}");
    }
}

#[test]
fn the_reader_script_catches_a_wrong_label() {
    // The check above is only worth something if the script fails on a bad dataset: rewrite one
    // sample's `cls` and expect a failure naming it.
    if !python_available() {
        return;
    }
    let t = tempdir();
    let ds = t.path().join("ds");
    pack(sample_data(), &ds)
        .args(["--resize", "shorter:32"])
        .ok();
    let m = manifest(&ds);
    let path = ds.join(&m.shards[0].file);
    let bytes = std::fs::read(&path).unwrap();
    let (samples, err) = shardtool_wds::group_samples(&bytes);
    assert!(err.is_none());
    let mut w = shardtool_wds::TarWriter::new(Vec::new());
    for (i, s) in samples.iter().enumerate() {
        for (field, data) in &s.fields {
            let data: &[u8] = if i == 0 && field == "cls" {
                b"99"
            } else {
                data
            };
            w.append(&format!("{}.{field}", s.key), data).unwrap();
        }
    }
    std::fs::write(&path, w.finish().unwrap()).unwrap();
    let out = Command::new("python3")
        .arg(repo_root().join("tests/interop/read_wds.py"))
        .arg(&ds)
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(1),
        "the script accepted a wrong label"
    );
    let summary: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(summary["ok"], false);
    let errs = summary["errors"].to_string();
    assert!(
        errs.contains(&samples[0].key) && errs.contains("cls"),
        "{errs}"
    );
}
