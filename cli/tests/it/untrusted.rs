//! Datasets whose bytes lie (crafted manifests, shards, states and inputs): every tool answers
//! with an error naming what is wrong, never a panic, an abort or memory the files cannot
//! justify.

use crate::common::{errors, manifest, pack, sample_data, tempdir, wds_samples, write_file, Cmd};
use serde_json::Value;
use std::path::{Path, PathBuf};

/// Packs the sample data (4 shards of up to 12) into `root/name` with `args`.
fn dataset(root: &Path, name: &str, args: &[&str]) -> PathBuf {
    let dir = root.join(name);
    pack(sample_data(), &dir)
        .args(["--resize", "shorter:32", "--shard-samples", "12"])
        .args(args)
        .ok();
    dir
}

/// Rewrites the manifest of `dir` with `edit`, keeping its totals the sums of its shards.
fn edit_manifest(dir: &Path, edit: impl FnOnce(&mut Value)) {
    let path = dir.join("manifest.json");
    let mut m: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    edit(&mut m);
    let sum = |k: &str| -> u64 {
        let shards = m["shards"].as_array().unwrap();
        shards.iter().map(|s| s[k].as_u64().unwrap()).sum()
    };
    let (samples, bytes) = (sum("samples"), sum("bytes"));
    let shards = m["shards"].as_array().unwrap().len();
    m["totals"] = serde_json::json!({"samples": samples, "shards": shards, "bytes": bytes});
    m["inputs"]["packed"] = samples.into();
    std::fs::write(&path, serde_json::to_vec(&m).unwrap()).unwrap();
}

#[test]
fn sample_counts_no_shard_can_hold_are_refused_before_anything_is_sized_by_them() {
    let root = tempdir();
    let dir = dataset(root.path(), "wds", &[]);
    // More samples than a shard of its size can hold: a broken rule for every tool.
    edit_manifest(&dir, |m| m["shards"][0]["samples"] = (1u64 << 40).into());
    for cmd in [["read"], ["verify"], ["inspect"]] {
        let r = Cmd::new(cmd).arg(&dir).run();
        assert!(matches!(r.code, Some(1 | 2)), "{cmd:?}: {r:?}");
        assert!(
            r.stderr.contains("cannot fit in") || r.stdout.contains("cannot fit in"),
            "{cmd:?}: {r:?}"
        );
        assert!(!r.stderr.contains("panicked"), "{r:?}");
    }
    // Counts each shard could hold if it were as large as the manifest says, adding up to
    // more than memory holds: an error, not an abort.
    edit_manifest(&dir, |m| {
        let first = m["shards"][0].clone();
        let shards: Vec<Value> = (0..4096)
            .map(|i| {
                let mut s = first.clone();
                s["file"] = format!("shard-{i:06}.tar").into();
                s["bytes"] = (1u64 << 48).into();
                s["samples"] = u64::from(u32::MAX).into();
                s
            })
            .collect();
        m["shards"] = shards.into();
    });
    let r = Cmd::new(["read"]).arg(&dir).run();
    r.assert_code(2);
    assert!(r.stderr.contains("cannot be held in memory"), "{r:?}");
}

#[test]
fn a_saved_position_past_the_epoch_is_refused_not_an_empty_epoch() {
    let root = tempdir();
    let dir = dataset(root.path(), "wds", &[]);
    let state = root.path().join("pos.json");
    Cmd::new(["read"])
        .arg(&dir)
        .args(["--batch", "8", "--limit", "16", "--state-out"])
        .arg(&state)
        .ok();
    let mut s: Value = serde_json::from_slice(&std::fs::read(&state).unwrap()).unwrap();
    // 45 samples in batches of 8: six batches; the seventh cannot have been delivered.
    s["delivered_prefix"] = 7.into();
    std::fs::write(&state, serde_json::to_vec(&s).unwrap()).unwrap();
    let r = Cmd::new(["read"])
        .arg(&dir)
        .args(["--batch", "8", "--keys", "--resume"])
        .arg(&state)
        .run();
    assert_ne!(r.code, Some(0), "{r:?}");
    assert!(r.stdout.is_empty(), "{}", r.stdout);
    assert!(
        r.stderr
            .contains("counts 7 batches as delivered, and the epoch has 6 batches"),
        "{}",
        r.stderr
    );
}

#[test]
fn batches_in_flight_larger_than_memory_are_refused_before_any_is_allocated() {
    let root = tempdir();
    let dir = dataset(root.path(), "wds", &[]);
    // 8 crops of 16384² take 6 GiB each, under the 8 GiB a batch may take; six batches, so six
    // workers started, holding three each: 114 GiB.
    let r = Cmd::new(["read"])
        .arg(&dir)
        .args(["--batch", "8", "--workers", "64"])
        .args(["--transform", "center-crop:16384"])
        .run();
    r.assert_code(2);
    assert!(
        r.stderr.contains("batches of 6.0 GiB in flight"),
        "{}",
        r.stderr
    );
}

#[test]
fn a_batch_buffer_the_process_limit_refuses_is_an_error_not_an_abort() {
    let root = tempdir();
    let dir = dataset(root.path(), "wds", &[]);
    // 8 crops of 4096² take 384 MiB: four such batches in flight are no reason to refuse up
    // front on a machine of 4 GiB or more, and one is more than the 400 MB of address space
    // `ulimit -v` leaves the process.
    let script = "ulimit -v 400000 && exec \"$0\" read \"$1\" --batch 8 --workers 1 \
                  --transform random-resized-crop:4096 --keys";
    let out = std::process::Command::new("sh")
        .args(["-c", script, crate::common::BIN])
        .arg(&dir)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("no memory for a batch buffer of 402653184 bytes: use a smaller batch"),
        "{stderr}"
    );
}

#[test]
fn a_damaged_zstd_shard_is_a_corrupt_shard_not_an_io_error() {
    let root = tempdir();
    let dir = dataset(root.path(), "zstd", &["--compress", "zstd"]);
    let m = crate::common::manifest(&dir);
    let shard = dir.join(&m.shards[0].file);
    let bytes = std::fs::read(&shard).unwrap();
    // Cut in the middle of its frame: the frame header still says zstd.
    std::fs::write(&shard, &bytes[..bytes.len() / 2]).unwrap();
    let r = Cmd::new(["read"]).arg(&dir).run();
    assert_ne!(r.code, Some(0), "{r:?}");
    assert!(
        r.stderr.contains("is corrupt") && r.stderr.contains("cannot be decompressed"),
        "{}",
        r.stderr
    );
    let r = Cmd::new(["inspect"]).arg(&dir).run();
    assert!(r.stdout.contains("decompress"), "{}", r.stdout);
    // One byte flipped in the middle: the frame's checksum fails (without one, the samples
    // came out changed, silently).
    let dir = dataset(root.path(), "zstd-flip", &["--compress", "zstd"]);
    let shard = dir.join(&m.shards[0].file);
    let mut bytes = std::fs::read(&shard).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x01;
    std::fs::write(&shard, &bytes).unwrap();
    let r = Cmd::new(["read"]).arg(&dir).run();
    assert_ne!(r.code, Some(0), "{r:?}");
    assert!(r.stderr.contains("is corrupt"), "{}", r.stderr);
}

#[test]
fn option_values_past_their_range_are_usage_errors_naming_the_flag_not_panics() {
    let root = tempdir();
    let dir = dataset(root.path(), "wds", &[]);
    let out = root.path().join("out");
    for (cmd, flag, value) in [
        ("read", "--fetch-timeout", "1e300"),
        ("read", "--fetch-timeout", "NaN"),
        ("bench", "--step-ms", "1e300"),
        ("bench", "--step-ms", "inf"),
        ("read", "--shuffle-buffer", "0"),
        ("read", "--interleave", "0"),
        ("read", "--cache-limit", "-5"),
        ("pack", "--max-pixels", "0"),
    ] {
        let mut c = Cmd::new([cmd]).arg(&dir);
        if cmd == "pack" {
            c = c.arg(&out);
        }
        let r = c.arg(format!("{flag}={value}")).run();
        r.assert_code(2);
        assert!(
            r.stderr.contains(flag),
            "{cmd} {flag} {value}: {}",
            r.stderr
        );
        assert!(!r.stderr.contains("panicked"), "{}", r.stderr);
    }
}

/// A WebDataset `.cls` of -1 is no label (as the reader and the Hugging Face `ClassLabel` write
/// it); another negative is no label of any class, and fails its sample.
#[test]
fn a_negative_cls_other_than_minus_one_fails_its_sample() {
    let t = tempdir();
    let image = std::fs::read(&crate::pack_inputs::shard_images()[0]).unwrap();
    let members: [(&str, &[u8]); 6] = [
        ("a.cls", b"1"),
        ("a.jpg", &image),
        ("b.cls", b"-1"),
        ("b.jpg", &image),
        ("c.cls", b"-3"),
        ("c.jpg", &image),
    ];
    let input = t.path().join("in");
    write_file(
        input.join("shard-000000.tar"),
        shardtool_wds::tar_bytes(members).unwrap(),
    );
    let out = t.path().join("out");
    pack(&input, &out).args(["-q"]).ok();
    let m = manifest(&out);
    assert_eq!((m.inputs.packed, m.inputs.failed), (2, 1));
    let errs = errors(&out);
    assert!(
        errs[0].path.ends_with(":c") && errs[0].kind == "bad_label",
        "{errs:?}"
    );
    let cls: Vec<i64> = wds_samples(&out).iter().map(|s| s.cls).collect();
    assert_eq!(cls.iter().filter(|&&c| c == -1).count(), 1, "{cls:?}");
}

/// A `.tar` shard of the dataset in `ds`.
fn tar_shard(ds: &Path) -> PathBuf {
    std::fs::read_dir(ds)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|x| x == "tar"))
        .unwrap()
}

/// A FIFO in place of a shard or the manifest (or an error report linked to `/dev/zero`) is
/// named as no regular file: never opened, so nothing waits for a writer or reads forever.
#[test]
fn special_files_in_a_dataset_are_refused_not_waited_on() {
    let t = tempdir();
    let run = |args: &[&str], ds: &Path| {
        std::process::Command::new("timeout")
            .args(["60", crate::common::BIN])
            .args(args)
            .arg(ds)
            .output()
            .unwrap()
    };
    let fifo = |p: &Path| {
        std::fs::remove_file(p).unwrap();
        let st = std::process::Command::new("mkfifo")
            .arg(p)
            .status()
            .unwrap();
        assert!(st.success());
    };
    let ds = dataset(t.path(), "shard", &[]);
    let shard = tar_shard(&ds);
    fifo(&shard);
    for args in [&["read", "-q"][..], &["inspect"][..], &["verify", "-q"][..]] {
        let o = run(args, &ds);
        let err = String::from_utf8_lossy(&o.stderr).into_owned();
        let out = String::from_utf8_lossy(&o.stdout).into_owned();
        assert_eq!(o.status.code(), Some(1), "{args:?}: {err}");
        assert!((err + &out).contains("not a regular file"), "{args:?}");
    }
    let ds = dataset(t.path(), "manifest", &[]);
    fifo(&ds.join("manifest.json"));
    for args in [&["read", "-q"][..], &["inspect"][..], &["verify", "-q"][..]] {
        let o = run(args, &ds);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(matches!(o.status.code(), Some(1 | 2)), "{args:?}: {err}");
        assert!(err.contains("not a regular file"), "{args:?}: {err}");
    }
    let ds = dataset(t.path(), "report", &[]);
    let report = ds.join("errors.jsonl");
    let _ = std::fs::remove_file(&report);
    std::os::unix::fs::symlink("/dev/zero", &report).unwrap();
    let o = run(&["verify", "-q"], &ds);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stdout).contains("not a regular file"));
    // A folder in place of a shard: every command names it alike.
    let ds = dataset(t.path(), "folder", &[]);
    let shard = tar_shard(&ds);
    std::fs::remove_file(&shard).unwrap();
    std::fs::create_dir(&shard).unwrap();
    for args in [&["read", "-q"][..], &["inspect"][..], &["verify", "-q"][..]] {
        let o = run(args, &ds);
        let text =
            String::from_utf8_lossy(&o.stderr).into_owned() + &String::from_utf8_lossy(&o.stdout);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {text}");
        assert!(text.contains("is a directory"), "{args:?}: {text}");
    }
}

/// An image below folders whose path passes PATH_MAX cannot be looked at: that is said in the
/// error report, not counted among the files ignored.
#[test]
fn a_folder_past_path_max_is_a_failed_input_not_ignored() {
    let t = tempdir();
    let input = t.path().join("in");
    let jpeg = crate::common::jpeg(&crate::common::pattern(8, 8, 1));
    write_file(input.join("ok/a.jpg"), &jpeg);
    write_file(t.path().join("a.jpg"), &jpeg);
    std::fs::create_dir_all(input.join("deep")).unwrap();
    // 17 folders of 250 bytes: made one `chdir` at a time, as no single path may name them.
    let script = "import os, shutil, sys\nos.chdir('deep')\nfor _ in range(17):\n    \
                  os.mkdir('d' * 250)\n    os.chdir('d' * 250)\nshutil.copy(sys.argv[1], '.')";
    let made = std::process::Command::new("python3")
        .args(["-c", script])
        .arg(t.path().join("a.jpg"))
        .current_dir(&input)
        .status()
        .unwrap();
    assert!(made.success());
    let out = t.path().join("out");
    let r = pack(&input, &out).ok();
    assert!(r.stdout.contains("packed 1 of 2 inputs"), "{}", r.stdout);
    assert!(!r.stdout.contains("ignored"), "{}", r.stdout);
    let failed = errors(&out);
    assert_eq!(failed.len(), 1, "{failed:?}");
    assert_eq!(failed[0].kind, "unreadable", "{failed:?}");
    assert!(failed[0].message.contains("too long"), "{failed:?}");
}
