//! Redundant attempts of one part (a replacement pod while the old one still runs, a Slurm
//! requeue): an attempt overtaken by another attempt and a merge ends as done and touches
//! nothing of the merged dataset, even when the merge has removed the staged inputs it read.

use crate::common::*;
use crate::partition::{assert_same_dataset, inputs, part, published};
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

/// Every file under `dir`, with its bytes.
fn tree(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_file() {
            out.insert(p.display().to_string(), std::fs::read(&p).unwrap());
        }
    }
    out
}

#[test]
fn an_attempt_overtaken_by_a_merge_ends_as_done_and_changes_nothing() {
    let dir = tempdir();
    let images = inputs(dir.path(), 30);
    // Gzipped WebDataset shards: a plan stages them decompressed, and merge removes the copies.
    let wds = dir.path().join("wds");
    pack(&images, &wds)
        .args(["--shard-samples", "8", "-q"])
        .ok();
    let gz = dir.path().join("gz");
    std::fs::create_dir(&gz).unwrap();
    for (name, _) in published(&wds) {
        if name.ends_with(".tar") {
            let s = std::process::Command::new("gzip")
                .arg("-k")
                .arg(wds.join(&name))
                .status()
                .unwrap();
            assert!(s.success());
            let zipped = format!("{name}.gz");
            std::fs::rename(wds.join(&zipped), gz.join(&zipped)).unwrap();
        }
    }
    // Large PNGs: slow enough per shard to be stopped in the middle of one.
    let opts = [
        "--resize",
        "shorter:768",
        "--upscale",
        "--encode",
        "png",
        "--shard-samples",
        "8",
    ];
    let single = dir.path().join("single");
    pack(&gz, &single).args(opts).args(["-q"]).ok();
    let out = dir.path().join("out");
    Cmd::new(["plan"]).arg(&gz).arg(&out).args(opts).ok();
    let mut slow = part(&out, "0/1").spawn();
    let pid = slow.id().to_string();
    let signal = |sig: &str| {
        let s = std::process::Command::new("kill")
            .args([sig, &pid])
            .status()
            .unwrap();
        assert!(s.success());
    };
    // Stopped while it writes a shard (its temporary file is in OUTPUT).
    let shard_tmp = |out: &Path| {
        std::fs::read_dir(out).unwrap().any(|e| {
            let name = e.unwrap().file_name().to_string_lossy().into_owned();
            name.starts_with(".shard-") && name.ends_with(".tmp")
        })
    };
    while !shard_tmp(&out) {
        assert!(
            slow.try_wait().unwrap().is_none(),
            "the attempt ended before it could be stopped"
        );
        std::thread::sleep(Duration::from_micros(200));
    }
    signal("-STOP");
    part(&out, "0/1").ok();
    Cmd::new(["merge", "-q"]).arg(&out).ok();
    assert!(!shard_tmp(&out), "merge removes the stopped attempt's file");
    assert!(!out.join("_plan/staged").exists());
    let (shards, done) = (tree(&out), tree(&out.join("_plan/done")));
    signal("-CONT");
    let status = slow.wait().unwrap();
    assert!(status.success(), "the overtaken attempt failed: {status}");
    // (Compared whole, not printed: the files are megabytes.)
    assert!(tree(&out) == shards, "the merged dataset was touched");
    assert!(
        tree(&out.join("_plan/done")) == done,
        "done records were rewritten"
    );
    assert_same_dataset(&out, &single);
}
