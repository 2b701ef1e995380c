//! The command line contract: exit codes (0 success, 1 failed run, 2 usage error), refusing to
//! overwrite a dataset without `--overwrite`, and `--max-errors`.

use crate::common::*;
use std::path::Path;

fn make_inputs(root: &Path, good: u32, bad: u32) {
    for i in 0..good {
        save_rgb(root.join(format!("c/good{i:02}.png")), &pattern(16, 12, i));
    }
    for i in 0..bad {
        write_file(root.join(format!("c/bad{i:02}.jpg")), b"not a jpeg");
    }
}

#[test]
fn help_and_version_succeed() {
    let r = Cmd::new(["pack", "--help"]).ok();
    for flag in [
        "--resize",
        "--upscale",
        "--encode",
        "--format",
        "--compress",
        "--seed",
        "--no-shuffle",
        "--shard-size",
        "--shard-samples",
        "--prefix",
        "--jobs",
        "--max-pixels",
        "--max-errors",
        "--overwrite",
        "--list",
    ] {
        assert!(
            r.stdout.contains(flag),
            "pack --help does not mention {flag}"
        );
    }
    Cmd::new(["--version"]).ok();
}

#[test]
fn a_non_empty_output_is_refused_without_overwrite() {
    let t = tempdir();
    let root = t.path().join("in");
    make_inputs(&root, 6, 0);
    let ds = t.path().join("ds");
    pack(&root, &ds).args(["--shard-samples", "2"]).ok();
    let before = dir_contents(&ds);
    assert_eq!(manifest(&ds).shards.len(), 3);

    let r = pack(&root, &ds).args(["--resize", "shorter:8"]).run();
    r.assert_code(2);
    assert!(r.stderr.contains("--overwrite"), "{}", r.stderr);
    assert_eq!(
        dir_contents(&ds),
        before,
        "a refused run must not touch the dataset"
    );

    // Any file makes a folder non-empty, not only a dataset.
    let other = t.path().join("other");
    write_file(other.join("notes.txt"), b"mine");
    pack(&root, &other).run().assert_code(2);
    assert_eq!(file_names(&other), ["notes.txt"]);
    // INPUT and OUTPUT the wrong way round: the images' folder as the output is named so.
    let r = pack(&ds, &root).run();
    r.assert_code(2);
    assert!(r.stderr.contains("the wrong way round"), "{}", r.stderr);
    let r = pack(&root, &other).run();
    assert!(!r.stderr.contains("the wrong way round"), "{}", r.stderr);

    // With --overwrite the old dataset is replaced: no stale shard of the first run survives, and
    // files that are not part of a dataset are left alone.
    write_file(ds.join("notes.txt"), b"mine");
    pack(&root, &ds)
        .args(["--resize", "shorter:8", "--overwrite"])
        .ok();
    let m = manifest(&ds);
    assert_eq!(m.shards.len(), 1);
    assert_eq!(m.pack["resize"], "shorter:8");
    assert_eq!(
        file_names(&ds),
        [
            "errors.jsonl",
            "manifest.json",
            "notes.txt",
            "shard-000000.tar"
        ]
    );
    assert!(wds_samples(&ds).iter().all(|s| s.size().1 == 8));

    // An empty folder needs no --overwrite.
    let empty = t.path().join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    pack(&root, &empty).ok();
}

/// `--overwrite` removes an earlier pack's files only: the shards its manifest lists (whatever
/// their prefix) and this plan's shard names. Another shard-like file is refused before anything
/// is removed. An output inside an ImageFolder is skipped by the listing; one that is the input,
/// or holds the input shards, is refused.
#[test]
fn overwrite_never_removes_files_no_pack_wrote_and_outputs_stay_apart_from_inputs() {
    let t = tempdir();
    let root = t.path().join("in");
    make_inputs(&root, 4, 0);
    let ds = t.path().join("ds");
    pack(&root, &ds)
        .args(["--prefix", "old", "--shard-samples", "2"])
        .ok();
    write_file(ds.join("keep.tar"), b"mine");
    let before = dir_contents(&ds);
    let r = pack(&root, &ds).arg("--overwrite").run();
    r.assert_code(2);
    assert!(r.stderr.contains("keep.tar"), "{}", r.stderr);
    assert_eq!(
        dir_contents(&ds),
        before,
        "a refused overwrite removes nothing"
    );
    std::fs::remove_file(ds.join("keep.tar")).unwrap();
    pack(&root, &ds).arg("--overwrite").ok();
    assert_eq!(
        file_names(&ds),
        ["errors.jsonl", "manifest.json", "shard-000000.tar"]
    );

    // The output inside the ImageFolder is no class of the next pack.
    let inner = root.join("packed");
    pack(&root, &inner).ok();
    let first = manifest(&inner);
    pack(&root, &inner).arg("--overwrite").ok();
    assert_eq!(manifest(&inner).classes, first.classes);
    assert_eq!(manifest(&inner).inputs.packed, 4);
    // Nor of a pack elsewhere: an earlier output (a manifest or a plan) is no class.
    let elsewhere = t.path().join("elsewhere");
    pack(&root, &elsewhere).ok();
    assert_eq!(manifest(&elsewhere).classes, first.classes);
    // The ImageFolder itself, or the folder of the input shards (--overwrite would clear them
    // before they are read), is refused.
    let r = pack(&root, &root).arg("--overwrite").run();
    r.assert_code(2);
    assert!(r.stderr.contains("outside the inputs"), "{}", r.stderr);
    let shards = dir_contents(&ds);
    let r = pack(&ds, &ds)
        .args(["--input-format", "wds", "--overwrite"])
        .run();
    r.assert_code(2);
    assert!(r.stderr.contains("outside the inputs"), "{}", r.stderr);
    assert_eq!(dir_contents(&ds), shards);
}

#[test]
fn an_output_that_is_a_file_is_a_usage_error() {
    let t = tempdir();
    let root = t.path().join("in");
    make_inputs(&root, 2, 0);
    let f = t.path().join("file");
    write_file(&f, b"x");
    pack(&root, &f).run().assert_code(2);
    pack(&root, &f).arg("--overwrite").run().assert_code(2);
    assert_eq!(std::fs::read(&f).unwrap(), b"x");
}

#[test]
fn max_errors_stops_the_run_with_exit_1() {
    let t = tempdir();
    let root = t.path().join("in");
    make_inputs(&root, 5, 3);
    let ds = t.path().join("ds");
    let r = pack(&root, &ds).args(["--max-errors", "2"]).run();
    r.assert_code(1);
    assert!(r.stderr.contains("max-errors"), "{}", r.stderr);
    assert!(
        !ds.join("manifest.json").exists(),
        "an aborted run publishes no manifest"
    );
    let errs = errors(&ds);
    assert!(
        errs.len() >= 3,
        "the failures so far are reported: {errs:?}"
    );
    assert!(errs.iter().all(|e| e.path.starts_with("c/bad")));
    // No temporary file is left behind.
    assert!(
        file_names(&ds).iter().all(|n| !n.starts_with('.')),
        "{:?}",
        file_names(&ds)
    );

    // Exactly N failures are allowed.
    let ok = t.path().join("ok");
    pack(&root, &ok).args(["--max-errors", "3"]).ok();
    let m = manifest(&ok);
    assert_eq!((m.inputs.packed, m.inputs.failed), (5, 3));
    assert_eq!(errors(&ok).len(), 3);

    // --max-errors 0 with clean inputs succeeds.
    let clean = t.path().join("clean");
    let croot = t.path().join("clean-in");
    make_inputs(&croot, 3, 0);
    pack(&croot, &clean).args(["--max-errors", "0"]).ok();
}

#[test]
fn max_errors_counts_listing_failures_too() {
    // Dangling links fail while listing, before any image is read.
    let t = tempdir();
    let root = t.path().join("in");
    make_inputs(&root, 2, 0);
    for i in 0..2 {
        std::os::unix::fs::symlink(
            t.path().join("missing.png"),
            root.join(format!("c/dangling{i}.png")),
        )
        .unwrap();
    }
    let ds = t.path().join("ds");
    pack(&root, &ds)
        .args(["--max-errors", "1"])
        .run()
        .assert_code(1);
    assert!(!ds.join("manifest.json").exists());
    assert_eq!(errors(&ds).len(), 2);
    // So in a planned pack (fixed shard sizes), whose listing failures belong to no shard.
    let planned = t.path().join("planned");
    let r = pack(&root, &planned)
        .args(["--max-errors", "1", "--shard-samples", "1"])
        .run();
    r.assert_code(1);
    assert!(!planned.join("manifest.json").exists());
    // Listed where a whole pack lists them, and the message says where.
    assert!(r.stderr.contains("errors.jsonl"), "{}", r.stderr);
    let listed = errors(&planned);
    assert_eq!(listed.len(), 2, "{listed:?}");
    assert!(listed.iter().all(|e| e.path.contains("dangling")));
}

/// A resumed pack counts the failures of the shards earlier runs finished: rerunning it never
/// commits a dataset with more failures than --max-errors allows.
#[test]
fn max_errors_holds_across_resumes() {
    let t = tempdir();
    let root = t.path().join("in");
    make_inputs(&root, 6, 4);
    let ds = t.path().join("ds");
    let run = || {
        pack(&root, &ds)
            .args(["--max-errors", "2", "--shard-samples", "2", "--resume"])
            .run()
    };
    for attempt in 0..6 {
        let r = run();
        r.assert_code(1);
        assert!(
            r.stderr.contains("max-errors"),
            "attempt {attempt}: {}",
            r.stderr
        );
        assert!(!ds.join("manifest.json").exists(), "attempt {attempt}");
        // Every failure counted is listed, those of earlier runs' shards too.
        let listed = errors(&ds);
        assert!(listed.len() > 2, "attempt {attempt}: {listed:?}");
        assert!(listed.iter().all(|e| e.path.starts_with("c/bad")));
    }
    // A repeated key fails before any decoding: it counts in a planned pack as in a whole one.
    let list = root.join("list.jsonl");
    let rows = "{\"path\": \"c/good00.png\", \"key\": \"same\"}\n{\"path\": \"c/good01.png\", \"key\": \"same\"}\n{\"path\": \"c/good02.png\"}\n";
    std::fs::write(&list, rows).unwrap();
    for extra in [&[][..], &["--shard-samples", "2"]] {
        let out = t.path().join(format!("keys{}", extra.len()));
        let r = Cmd::new(["pack", "--list"])
            .arg(&list)
            .arg(&out)
            .args(["--max-errors", "0"])
            .args(extra)
            .run();
        r.assert_code(1);
        assert!(!out.join("manifest.json").exists(), "{extra:?}");
        let listed = errors(&out);
        assert!(
            listed.iter().any(|e| e.kind == "duplicate_key"),
            "{extra:?}: {listed:?}"
        );
    }
    // A part stopped by --max-errors lists what it counted in the plan folder (OUTPUT's
    // errors.jsonl is the merge's), and says where.
    let out = t.path().join("parts");
    Cmd::new(["plan", "--list"])
        .arg(&list)
        .arg(&out)
        .args(["--shard-samples", "2"])
        .ok();
    // Runs `pack --plan OUT SELECTION --max-errors 0`, which stops: it names `list`.
    let stopped = |selection: [&str; 2], list: &str| {
        let r = Cmd::new(["pack", "--plan"])
            .arg(&out)
            .args(selection)
            .args(["--max-errors", "0"])
            .run();
        r.assert_code(1);
        assert!(r.stderr.contains(list), "{}", r.stderr);
    };
    let report = out.join("_plan/failures-part-0-of-1.jsonl");
    stopped(["--part", "0/1"], &report.display().to_string());
    let text = std::fs::read_to_string(&report).unwrap();
    assert!(text.contains("duplicate_key"), "{text}");
    assert!(!out.join("errors.jsonl").exists());
    // Run again within a limit it meets, the part succeeds and its stale list goes.
    Cmd::new(["pack", "--plan"])
        .arg(&out)
        .args(["--part", "0/1", "--max-errors", "5"])
        .ok();
    assert!(!report.exists());
    // A --shards run names its list by the set it packs, in order: `1,0,1` is `0-1`.
    stopped(["--shards", "0-1"], "failures-shards-0-1.jsonl");
    stopped(["--shards", "1,0,1"], "failures-shards-0-1.jsonl");
    // A merge, every shard done, leaves no stale list.
    Cmd::new(["merge", "-q"]).arg(&out).ok();
    let left: Vec<_> = std::fs::read_dir(out.join("_plan"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("failures-"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

#[test]
fn usage_errors_exit_2_and_write_nothing() {
    let t = tempdir();
    let root = t.path().join("in");
    make_inputs(&root, 2, 0);
    let cases: &[&[&str]] = &[
        &["--resize", "bogus"],
        &["--resize", "shorter"],
        &["--resize", "shorter:0"],
        &["--resize", "shorter:-5"],
        &["--resize", "crop:224"],
        &["--resize", "fit:10x"],
        &["--resize", "longer:70000"],
        &["--shard-size", "12 parsecs"],
        &["--shard-size", "0"],
        &["--shard-size", "-1"],
        &["--shard-size", "MiB"],
        &["--shard-samples", "0"],
        &["--jobs", "0"],
        &["--jobs", "1000000"],
        &["--quality", "0"],
        &["--quality", "101"],
        &["--encode", "gif"],
        &["--filter", "box"],
        &["--format", "zip"],
        &["--compress", "gzip"],
        &["--compress", "zstd:0"],
        &["--compress", "zstd:23"],
        &["--compress", "zstd:x"],
        &["--max-pixels", "many"],
        &["--no-such-flag"],
    ];
    for (i, args) in cases.iter().enumerate() {
        let ds = t.path().join(format!("ds{i}"));
        let r = pack(&root, &ds).args(*args).run();
        r.assert_code(2);
        assert!(!r.stderr.trim().is_empty(), "{args:?}: no message");
        assert!(
            !ds.exists(),
            "{args:?}: a usage error must not create the output"
        );
    }
}

#[test]
fn a_part_refuses_a_worker_count_as_pack_does() {
    let t = tempdir();
    let root = t.path().join("in");
    make_inputs(&root, 2, 0);
    let ds = t.path().join("ds");
    Cmd::new(["plan"])
        .arg(&root)
        .arg(&ds)
        .args(["--shard-samples", "1", "-q"])
        .ok();
    for (jobs, says) in [
        ("0", "--jobs 0: at least one worker thread is needed"),
        ("5000", "--jobs 5000: 5000 worker threads, over the 4096"),
    ] {
        let r = Cmd::new(["pack", "--plan"])
            .arg(&ds)
            .args(["--part", "0/1", "--jobs", jobs])
            .run();
        r.assert_code(2);
        assert!(r.stderr.contains(says), "{}", r.stderr);
    }
    // So do the commands that read a dataset, with the same limit.
    for command in ["verify", "inspect", "preview"] {
        let r = Cmd::new([command]).arg(&ds).args(["--jobs", "5000"]).run();
        r.assert_code(2);
        assert!(r.stderr.contains("not in 1..=4096"), "{}", r.stderr);
    }
}

#[test]
fn missing_or_wrong_inputs_exit_2() {
    let t = tempdir();
    let ds = t.path().join("ds");
    // A missing input folder.
    let r = pack(t.path().join("does-not-exist"), &ds).run();
    r.assert_code(2);
    assert!(r.stderr.contains("does-not-exist"), "{}", r.stderr);
    assert!(!ds.exists(), "nothing is created for a missing input");
    // An input that is a file.
    let f = t.path().join("file.txt");
    write_file(&f, b"x");
    pack(&f, &ds).run().assert_code(2);
    // Missing OUTPUT, no arguments at all.
    Cmd::new(["pack", "only-one-arg"]).run().assert_code(2);
    Cmd::new(["pack"]).run().assert_code(2);
    Cmd::new(Vec::<&str>::new()).run().assert_code(2);
    // --list with both INPUT and OUTPUT, and a missing list.
    let list = t.path().join("l.csv");
    write_file(&list, "path,label\n");
    Cmd::new(["pack", "--list"])
        .args([&list, &t.path().join("x"), &ds])
        .run()
        .assert_code(2);
    pack_list(t.path().join("missing.csv"), &ds)
        .run()
        .assert_code(2);
    assert!(!ds.exists());
}

#[test]
fn a_successful_run_prints_a_summary_and_quiet_silences_it() {
    let t = tempdir();
    let root = t.path().join("in");
    make_inputs(&root, 3, 1);
    let r = pack(&root, t.path().join("a")).ok();
    assert!(r.stdout.contains("packed 3 of 4"), "{}", r.stdout);
    assert!(
        r.stderr.contains("c/bad00.jpg"),
        "failures are shown: {}",
        r.stderr
    );
    let q = pack(&root, t.path().join("b")).arg("--quiet").ok();
    assert!(q.stdout.is_empty(), "{}", q.stdout);
    assert!(
        q.stderr.contains("c/bad00.jpg"),
        "--quiet still prints errors"
    );
}

#[test]
fn the_binary_is_position_independent_with_full_relro() {
    // ELF64 little-endian: e_type (u16 at 16) is ET_DYN (3) for a PIE executable, ET_EXEC (2)
    // for a position-dependent one. Full RELRO is a PT_GNU_RELRO segment plus immediate binding
    // (DF_BIND_NOW in DT_FLAGS or DF_1_NOW in DT_FLAGS_1), so the whole GOT is read-only.
    let bytes = std::fs::read(env!("CARGO_BIN_EXE_shardtool")).unwrap();
    assert_eq!(&bytes[..4], b"\x7fELF", "not an ELF file");
    assert_eq!(bytes[4], 2, "not ELF64");
    let u16_at = |o: usize| u16::from_le_bytes([bytes[o], bytes[o + 1]]);
    let u32_at = |o: usize| u32::from_le_bytes(bytes[o..o + 4].try_into().unwrap());
    let u64_at = |o: usize| u64::from_le_bytes(bytes[o..o + 8].try_into().unwrap());
    let e_type = u16_at(16);
    assert_eq!(
        e_type, 3,
        "ELF type {e_type}: expected ET_DYN (position-independent)"
    );
    let (phoff, phentsize, phnum) = (u64_at(32) as usize, u16_at(54) as usize, u16_at(56));
    let (mut relro, mut now) = (false, false);
    for i in 0..phnum as usize {
        let ph = phoff + i * phentsize;
        match u32_at(ph) {
            0x6474_e552 => relro = true, // PT_GNU_RELRO
            2 => {
                // PT_DYNAMIC: (tag, value) pairs of u64 at p_offset, p_filesz bytes long.
                let (off, size) = (u64_at(ph + 8) as usize, u64_at(ph + 32) as usize);
                for d in (off..off + size).step_by(16) {
                    let (tag, val) = (u64_at(d), u64_at(d + 8));
                    now |= (tag == 30 && val & 0x8 != 0) // DT_FLAGS, DF_BIND_NOW
                        || (tag == 0x6fff_fffb && val & 0x1 != 0); // DT_FLAGS_1, DF_1_NOW
                }
            }
            _ => {}
        }
    }
    assert!(relro, "no PT_GNU_RELRO segment");
    assert!(now, "lazy binding: RELRO is partial, not full");
}

#[test]
fn a_reader_that_goes_away_ends_the_output_quietly_as_sigpipe_does() {
    use std::os::unix::process::ExitStatusExt;
    let dir = tempdir();
    make_inputs(&dir.path().join("in"), 30, 0);
    let out = dir.path().join("out");
    pack(dir.path().join("in"), &out).args(["-q"]).ok();
    // `inspect` prints through `outln!`, `read --keys` through a buffered writer.
    for args in [&["inspect"][..], &["read", "--keys"][..]] {
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let r = std::process::Command::new(BIN)
            .args(args)
            .arg(&out)
            .stdout(writer)
            .output()
            .unwrap();
        assert_eq!(
            r.status.signal(),
            Some(libc::SIGPIPE),
            "{args:?}: {:?}",
            r.status
        );
        assert!(
            r.stderr.is_empty(),
            "{args:?}: {}",
            String::from_utf8_lossy(&r.stderr)
        );
    }
}

/// An option that cannot apply is refused, not silently ignored.
#[test]
fn encode_or_quality_with_shards_that_cannot_use_them_is_a_usage_error() {
    let t = tempdir();
    let root = t.path().join("in");
    make_inputs(&root, 2, 0);
    for encode in ["png", "keep"] {
        let r = pack(&root, t.path().join(encode))
            .args(["--format", "packed", "--encode", encode])
            .run();
        r.assert_code(2);
        assert!(
            r.stderr.contains("packed shards hold raw pixels"),
            "{}",
            r.stderr
        );
    }
    pack(&root, t.path().join("jpeg"))
        .args(["--format", "packed", "--encode", "jpeg"])
        .ok();
    // --quality is used by JPEG-encoded wds shards only.
    for (flags, why) in [
        (&["--format", "packed"][..], "packed shards hold raw pixels"),
        (&["--encode", "png"][..], "--encode png is lossless"),
    ] {
        let r = pack(&root, t.path().join("q"))
            .args(flags)
            .args(["--quality", "95"])
            .run();
        r.assert_code(2);
        assert!(
            r.stderr.contains("--quality 95") && r.stderr.contains(why),
            "{}",
            r.stderr
        );
        assert!(!t.path().join("q").exists());
    }
    pack(&root, t.path().join("keep"))
        .args(["--encode", "keep", "--quality", "95"])
        .ok();
}

#[test]
fn a_list_given_by_url_is_a_usage_error_that_says_why() {
    let t = tempdir();
    let r = Cmd::new(["pack", "--list", "http://127.0.0.1:9/train.csv"])
        .arg(t.path().join("out"))
        .run();
    r.assert_code(2);
    assert!(
        r.stderr.contains("a list is read from a local file"),
        "{}",
        r.stderr
    );
}

#[test]
fn inputs_by_schemes_shardtool_does_not_read_are_usage_errors_that_say_so() {
    let t = tempdir();
    for (input, says) in [
        (
            "gs://bucket/wds/shard-{0..1}.tar",
            "unsupported scheme \"gs\"",
        ),
        ("hf://datasets/x/data/", "unsupported scheme \"hf\""),
        (
            "pipe:curl -s http://host/a.tar",
            "pipe: commands are not run",
        ),
    ] {
        let r = Cmd::new(["pack", input]).arg(t.path().join("out")).run();
        r.assert_code(2);
        assert!(r.stderr.contains(says), "{input}: {}", r.stderr);
        assert!(!t.path().join("out").exists());
    }
}

/// A folder named one level too high (`sample-data/` for `sample-data/imagefolder/`) packs as
/// one class: a note says so, naming the folder that holds the classes.
#[test]
fn one_class_of_class_folders_is_pointed_out() {
    let t = tempdir();
    let high = pack(repo_root().join("sample-data"), t.path().join("high"))
        .args(["--resize", "crop:16x16"])
        .ok();
    let want = format!(
        "note: every image is in one class, \"imagefolder\", whose {} subfolders hold them all: \
         if those are the classes, pack {} instead",
        class_folders(&sample_data()),
        sample_data().display()
    );
    assert!(high.stderr.contains(&want), "{}", high.stderr);
    let right = pack(sample_data(), t.path().join("right"))
        .args(["--resize", "crop:16x16"])
        .ok();
    assert!(!right.stderr.contains("note:"), "{}", right.stderr);
}

/// The class folders of an ImageFolder.
fn class_folders(root: &Path) -> usize {
    (std::fs::read_dir(root).unwrap().flatten())
        .filter(|e| e.path().is_dir())
        .count()
}

#[test]
fn a_plan_without_output_shows_plans_usage() {
    let r = Cmd::new(["plan"]).arg(sample_data()).run();
    r.assert_code(2);
    assert!(
        r.stderr.contains("usage: shardtool plan <INPUT> <OUTPUT>"),
        "{}",
        r.stderr
    );
}

/// With no `HOME` (a service, `env -i`), the default cache folder is one of this user's own in
/// the temporary folder: a shared name would belong to its first user alone.
#[test]
fn without_home_the_cache_folder_is_the_users_own() {
    use std::os::unix::fs::MetadataExt;
    let t = tempdir();
    let uid = std::fs::metadata("/proc/self").unwrap().uid();
    let r = Cmd::new(["cache", "ls"])
        .env("TMPDIR", t.path())
        .env_remove("HOME")
        .env_remove("XDG_CACHE_HOME")
        .env_remove("SHARDTOOL_CACHE_DIR")
        .ok();
    let dir = t.path().join(format!("shardtool-cache-{uid}"));
    assert!(r.stdout.contains(&*dir.to_string_lossy()), "{}", r.stdout);
    // An empty TMPDIR is /tmp, not the working folder.
    let r = Cmd::new(["cache", "ls"])
        .env("TMPDIR", "")
        .env_remove("HOME")
        .env_remove("XDG_CACHE_HOME")
        .env_remove("SHARDTOOL_CACHE_DIR")
        .current_dir(t.path())
        .ok();
    let dir = format!("/tmp/shardtool-cache-{uid}");
    assert!(r.stdout.contains(&dir), "{}", r.stdout);
}
