//! Interop with Python: `tests/interop_numpy.py` opens our shards with
//! `safetensors.numpy.load_file` and compares them with the expected values.
//!
//! Needs `python3` with `safetensors` and `numpy`. Without them the test fails
//! with a clear message, unless `SHARDTOOL_NO_PYTHON=1` is set.
#![allow(clippy::unwrap_used)]

mod common;

use std::path::Path;
use std::process::Command;

use common::{recs, write, Rec};
use serde_json::json;
use shardtool_packed::{checksum, Mode};

fn python_available() -> bool {
    let ok = Command::new("python3")
        .args(["-c", "import safetensors.numpy, numpy"])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    if ok {
        return true;
    }
    if std::env::var("SHARDTOOL_NO_PYTHON").as_deref() == Ok("1") {
        eprintln!("python_interop: skipped because SHARDTOOL_NO_PYTHON=1");
        return false;
    }
    panic!(
        "python_interop needs `python3` with the `safetensors` and `numpy` packages \
         (pip install safetensors numpy); set SHARDTOOL_NO_PYTHON=1 to skip this test"
    );
}

fn expected(mode: &str, records: &[Rec]) -> serde_json::Value {
    json!({
        "mode": mode,
        "records": records.iter().map(|r| json!({
            "key": r.key,
            "label": r.label,
            "shape": [r.height, r.width, 3],
            "pixels": r.pixels,
            "checksum": checksum(&r.pixels),
        })).collect::<Vec<_>>(),
    })
}

/// Writes `records` as a shard and `expected` as its expectations, then runs
/// the script on them.
fn run_script(
    dir: &Path,
    name: &str,
    mode: Mode,
    records: &[Rec],
    expected: &serde_json::Value,
) -> std::process::Output {
    let shard = dir.join(format!("{name}.safetensors"));
    let exp = dir.join(format!("{name}.json"));
    std::fs::write(&shard, write(mode, records)).unwrap();
    std::fs::write(&exp, serde_json::to_vec(expected).unwrap()).unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/interop_numpy.py");
    Command::new("python3")
        .arg(&script)
        .arg(&shard)
        .arg(&exp)
        .output()
        .unwrap()
}

fn assert_script_ok(dir: &Path, name: &str, mode: Mode, mode_str: &str, records: &[Rec]) {
    let out = run_script(dir, name, mode, records, &expected(mode_str, records));
    assert!(
        out.status.success(),
        "interop_numpy.py failed for {name} ({}):\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn python_interop() {
    if !python_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut fixed = recs(&[(2, 3), (2, 3), (2, 3)]);
    fixed[1].label = i64::MIN;
    fixed[2].label = i64::MAX;
    assert_script_ok(dir.path(), "fixed", Mode::Auto, "fixed", &fixed);
    let variable = recs(&[(1, 1), (3, 2), (2, 5), (4, 4)]);
    assert_script_ok(dir.path(), "variable", Mode::Auto, "variable", &variable);
    let odd = recs(&[(1, 3); 3]);
    assert_script_ok(dir.path(), "odd_fixed", Mode::Fixed, "fixed", &odd);

    // The script must notice a mismatch, or the checks above prove nothing.
    let mut wrong = expected("variable", &variable);
    wrong["records"][2]["pixels"][4] = json!(255 - variable[2].pixels[4]);
    let out = run_script(dir.path(), "wrong", Mode::Auto, &variable, &wrong);
    assert_eq!(out.status.code(), Some(1), "script accepted wrong pixels");
    assert!(String::from_utf8_lossy(&out.stderr).contains("pixels differ"));
}
