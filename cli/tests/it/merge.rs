//! Merge beside other merges, on this host or another, and beside readers of the dataset it
//! committed: a merge run again leaves the committed manifest as it is (a new one, even of the
//! same bytes, fails every reader mid-epoch), and a temporary manifest another merge holds
//! locked is left to it whatever its PID says.

use crate::common::*;
use crate::partition::{inputs, part, OPTS};
use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// A planned output with every shard done, nothing merged.
fn parts_done(dir: &Path) -> std::path::PathBuf {
    let input = inputs(dir, 12);
    let out = dir.join("out");
    Cmd::new(["plan"]).arg(&input).arg(&out).args(OPTS).ok();
    part(&out, "0/1").ok();
    out
}

#[test]
fn merges_at_once_leave_each_others_temporary_files_alone() {
    let dir = tempdir();
    let out = parts_done(dir.path());
    // Each round: two merges at once (a job system merging at the end of each array task);
    // each took the other's temporary manifest or report for a leftover and failed renaming it.
    for _ in 0..6 {
        let _ = std::fs::remove_file(out.join("manifest.json"));
        let spawn = || {
            std::process::Command::new(env!("CARGO_BIN_EXE_shardtool"))
                .args(["merge", "-q"])
                .arg(&out)
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        };
        let (a, b) = (spawn(), spawn());
        for child in [a, b] {
            let o = child.wait_with_output().unwrap();
            assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        }
        Cmd::new(["verify"]).arg(&out).ok();
    }
}

#[test]
fn a_merge_run_again_leaves_the_committed_files_as_they_were() {
    let dir = tempdir();
    let out = parts_done(dir.path());
    Cmd::new(["merge", "-q"]).arg(&out).ok();
    let stamp = |name: &str| {
        let m = std::fs::metadata(out.join(name)).unwrap();
        (m.ino(), m.mtime(), m.mtime_nsec(), m.len())
    };
    let before = [stamp("manifest.json"), stamp("errors.jsonl")];
    // A `status && merge` step run again, or the Ray driver rerun: readers must not see a new
    // manifest (the reader recognises its manifest by size and modification time).
    std::thread::sleep(std::time::Duration::from_millis(20));
    Cmd::new(["merge", "-q"]).arg(&out).ok();
    assert_eq!([stamp("manifest.json"), stamp("errors.jsonl")], before);
    Cmd::new(["verify"]).arg(&out).ok();
}

#[test]
fn a_temporary_manifest_held_locked_is_left_to_its_merge_whatever_its_pid() {
    let dir = tempdir();
    let out = parts_done(dir.path());
    // Another container's merge: its PID (past any pid_max) means nothing here, its lock does.
    let theirs = out.join(".manifest.json.4194399.0.tmp");
    std::fs::write(&theirs, b"{}").unwrap();
    let held = std::fs::File::open(&theirs).unwrap();
    held.lock().unwrap();
    Cmd::new(["merge", "-q"]).arg(&out).ok();
    assert!(
        theirs.exists(),
        "a merge removed a temporary manifest another merge held"
    );
    // Once no merge holds it, it is a killed merge's leftover: the next merge removes it.
    drop(held);
    Cmd::new(["merge", "-q"]).arg(&out).ok();
    assert!(
        !theirs.exists(),
        "a killed merge's temporary manifest was left"
    );
    Cmd::new(["verify"]).arg(&out).ok();
}

#[test]
fn done_records_that_make_a_broken_manifest_commit_nothing() {
    let dir = tempdir();
    let out = parts_done(dir.path());
    // A done record edited by hand (or damaged): a field name no reader takes.
    let done = out.join("_plan/done/000000.json");
    let mut record: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&done).unwrap()).unwrap();
    record["fields"]["../x"] = 1.into();
    std::fs::write(&done, record.to_string()).unwrap();
    let r = Cmd::new(["merge"]).arg(&out).run();
    assert_ne!(r.code, Some(0), "{}", r.stderr);
    assert!(
        r.stderr.contains("breaks the format's rules"),
        "{}",
        r.stderr
    );
    assert!(!out.join("manifest.json").exists());
}

#[test]
fn shards_asked_for_twice_or_out_of_order_are_reported_once_as_ranges() {
    let dir = tempdir();
    let out = parts_done(dir.path());
    for e in std::fs::read_dir(out.join("_plan/done")).unwrap() {
        std::fs::remove_file(e.unwrap().path()).unwrap();
    }
    let r = Cmd::new(["pack", "--plan"])
        .arg(&out)
        .args(["--shards", "1,0-1,0"])
        .ok();
    assert!(r.stdout.starts_with("shards 0-1 of "), "{}", r.stdout);
    let r = Cmd::new(["pack", "--plan"])
        .arg(&out)
        .args(["--shards", "1,0,1", "--json"])
        .ok();
    let summary: serde_json::Value = serde_json::from_str(r.stdout.trim()).unwrap();
    assert_eq!(summary["shards"], serde_json::json!([0, 1]));
}
