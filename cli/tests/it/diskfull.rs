//! Disk full and I/O errors: pack, merge and cache downloads onto a small tmpfs that fills up,
//! a read-only output folder, and inputs the user may not read. Every failure exits non-zero
//! naming the path and the cause, leaves no temporary file behind and publishes nothing.
//!
//! Mounting a tmpfs needs root (CI runs as root); elsewhere these tests say so and stop.

use crate::common::*;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A tmpfs mounted on a folder for the length of a test.
struct Tmpfs {
    dir: PathBuf,
}

impl Tmpfs {
    fn mount(dir: &Path, size: &str) -> Option<Self> {
        std::fs::create_dir_all(dir).unwrap();
        let st = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir)
            .output()
            .unwrap();
        if !st.status.success() {
            eprintln!(
                "cannot mount a tmpfs here ({}): this test needs root",
                String::from_utf8_lossy(&st.stderr).trim()
            );
            return None;
        }
        Some(Self {
            dir: dir.to_path_buf(),
        })
    }

    fn remount(&self, options: &str) {
        let st = Command::new("mount")
            .args(["-o", &format!("remount,{options}")])
            .arg(&self.dir)
            .status()
            .unwrap();
        assert!(st.success());
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.dir).status();
    }
}

/// Runs `script` with bash (a `ulimit` or a redirection set before `exec {BIN} …`): its exit
/// code and stderr.
pub(crate) fn bash(script: &str) -> (Option<i32>, String) {
    let o = Command::new("bash").arg("-c").arg(script).output().unwrap();
    (
        o.status.code(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// Images that encode to about 200 KB each as PNG (noise does not compress).
fn big_inputs(root: &Path, n: u32) {
    for i in 0..n {
        let img = image::RgbImage::from_fn(260, 260, |x, y| {
            let v = (x.wrapping_mul(7919) ^ y.wrapping_mul(104_729) ^ i.wrapping_mul(31))
                .wrapping_mul(2_654_435_761);
            image::Rgb([(v >> 24) as u8, (v >> 16) as u8, (v >> 8) as u8])
        });
        save_rgb(root.join(format!("c/{i:03}.png")), &img);
    }
}

/// Files whose name marks them temporary (`.NAME.PID.N.tmp`, `.stage-*.tmp`), anywhere under
/// `dir`.
fn temporaries(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if e.path().is_dir() {
                stack.push(e.path());
            } else if name.ends_with(".tmp") {
                out.push(e.path().display().to_string());
            }
        }
    }
    out
}

#[track_caller]
fn says_no_space(r: &Run, path: &Path) {
    let err = r.stderr.to_lowercase();
    assert!(err.contains("no space"), "{}", r.stderr);
    assert!(
        r.stderr.contains(&*path.to_string_lossy()),
        "the message should name {}: {}",
        path.display(),
        r.stderr
    );
}

#[test]
fn pack_onto_a_full_disk_fails_naming_the_path_and_publishes_nothing() {
    let t = tempdir();
    let input = t.path().join("in");
    big_inputs(&input, 30);
    let Some(fs) = Tmpfs::mount(&t.path().join("small"), "2m") else {
        return;
    };
    for (name, extra) in [
        ("rolled", &["--shard-size", "600KiB"][..]),
        ("planned", &["--shard-samples", "3"][..]),
    ] {
        let out = fs.dir.join(name);
        let r = pack(&input, &out)
            .args(["--encode", "png", "-q", "--jobs", "1"])
            .args(extra)
            .run();
        r.assert_code(1);
        says_no_space(&r, &out);
        assert!(!out.join("manifest.json").exists(), "{name}: published");
        assert_eq!(temporaries(&out), Vec::<String>::new(), "{name}");
        let _ = std::fs::remove_dir_all(&out);
    }
    // With room again, the planned pack resumes from the shards it had published.
    let out = fs.dir.join("planned");
    let r = pack(&input, &out)
        .args([
            "--encode",
            "png",
            "-q",
            "--jobs",
            "1",
            "--shard-samples",
            "3",
        ])
        .run();
    r.assert_code(1);
    fs.remount("size=64m");
    pack(&input, &out)
        .args([
            "--encode",
            "png",
            "-q",
            "--jobs",
            "1",
            "--shard-samples",
            "3",
        ])
        .arg("--resume")
        .ok();
    Cmd::new(["verify"]).arg(&out).ok();
    assert_eq!(manifest(&out).inputs.packed, 30);
}

#[test]
fn merge_onto_a_full_disk_fails_and_succeeds_once_there_is_room() {
    let t = tempdir();
    let input = t.path().join("in");
    jpeg_folder(&input, 20, 64, 48);
    let Some(fs) = Tmpfs::mount(&t.path().join("small"), "4m") else {
        return;
    };
    let out = fs.dir.join("out");
    Cmd::new(["plan"])
        .arg(&input)
        .arg(&out)
        .args(["--shard-samples", "5", "-q"])
        .ok();
    Cmd::new(["pack", "--plan"]).arg(&out).arg("-q").ok();
    // Fill what is left.
    let filler = fs.dir.join("filler");
    {
        use std::io::Write;
        let mut f = std::fs::File::create(&filler).unwrap();
        let block = vec![7u8; 64 << 10];
        while f.write_all(&block).is_ok() {}
        let _ = f.sync_all();
    }
    let r = Cmd::new(["merge"]).arg(&out).run();
    r.assert_code(1);
    says_no_space(&r, &out);
    assert!(!out.join("manifest.json").exists());
    assert_eq!(temporaries(&out), Vec::<String>::new());
    std::fs::remove_file(&filler).unwrap();
    Cmd::new(["merge"]).arg(&out).ok();
    Cmd::new(["verify"]).arg(&out).ok();
}

#[test]
fn a_cache_download_onto_a_full_disk_fails_and_leaves_the_cache_usable() {
    let t = tempdir();
    let input = t.path().join("in");
    big_inputs(&input, 12);
    let www = t.path().join("www");
    pack(&input, www.join("ds"))
        .args(["--encode", "png", "--shard-samples", "4", "-q"])
        .ok();
    let server = crate::remote::servers::Lighttpd::start(&www);
    let url = server.url("ds/");
    let Some(fs) = Tmpfs::mount(&t.path().join("small"), "1m") else {
        return;
    };
    let cache = fs.dir.join("cache");
    let r = Cmd::new(["read", &url, "--keys", "--cache-dir"])
        .arg(&cache)
        .run();
    r.assert_code(1);
    says_no_space(&r, &cache);
    // No partial shard under a final name, no download left behind by a live process.
    for d in std::fs::read_dir(&cache).unwrap().flatten() {
        if let Ok(shards) = std::fs::read_dir(d.path().join("shards")) {
            for s in shards.flatten() {
                let name = s.file_name();
                let want = std::fs::read(www.join("ds").join(&name)).unwrap();
                assert_eq!(std::fs::read(s.path()).unwrap(), want, "{name:?}");
            }
        }
    }
    Cmd::new(["cache", "ls", "--cache-dir"]).arg(&cache).ok();
    Cmd::new(["cache", "clear", "--cache-dir"]).arg(&cache).ok();
    fs.remount("size=64m");
    let r = Cmd::new(["read", &url, "--keys", "--cache-dir"])
        .arg(&cache)
        .ok();
    assert_eq!(r.stdout.lines().count(), 12);
    // Warm but read-only: refused when opened, naming the folder, not at a shard's lock.
    fs.remount("ro");
    let r = Cmd::new(["read", &url, "--keys", "--cache-dir"])
        .arg(&cache)
        .run();
    assert_ne!(r.code, Some(0));
    assert!(
        r.stderr.contains("cannot use the cache folder") && r.stderr.contains("Read-only"),
        "{}",
        r.stderr
    );
}

/// A file size limit (`ulimit -f`) fails the write that passes it, naming the file, instead of
/// SIGXFSZ killing the pack silently with its temporary file left.
#[test]
fn a_file_size_limit_is_a_clear_error() {
    let t = tempdir();
    let input = t.path().join("in");
    big_inputs(&input, 6);
    for (name, format) in [("out", "--encode png"), ("packed", "--format packed")] {
        let out = t.path().join(name);
        let (code, err) = bash(&format!(
            "ulimit -f 100 && exec {BIN} pack {} {} {format} -q",
            input.display(),
            out.display()
        ));
        assert_eq!(code, Some(1), "{format}: {err}");
        assert!(err.contains("File too large"), "{format}: {err}");
        assert!(temporaries(&out).is_empty(), "{:?}", temporaries(&out));
        assert!(!out.join("manifest.json").exists());
    }
    // Every command: a merge writing its manifest past the limit too.
    let planned = t.path().join("planned");
    Cmd::new(["plan"])
        .arg(&input)
        .arg(&planned)
        .args(["--shard-samples", "3", "-q"])
        .ok();
    Cmd::new(["pack", "--plan"])
        .arg(&planned)
        .args(["--part", "0/1", "-q"])
        .ok();
    let (code, err) = bash(&format!(
        "ulimit -f 0 && exec {BIN} merge {} -q",
        planned.display()
    ));
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("File too large"), "{err}");
    assert!(
        temporaries(&planned).is_empty(),
        "{:?}",
        temporaries(&planned)
    );
}

#[test]
fn a_read_only_output_and_unreadable_inputs_are_clear_errors() {
    let t = tempdir();
    let input = t.path().join("in");
    jpeg_folder(&input, 3, 40, 30);
    let Some(fs) = Tmpfs::mount(&t.path().join("ro"), "1m") else {
        return;
    };
    fs.remount("ro");
    let out = fs.dir.join("out");
    let r = pack(&input, &out).run();
    assert_ne!(r.code, Some(0));
    assert!(r.stderr.contains("Read-only file system"), "{}", r.stderr);
    assert!(r.stderr.contains(&*out.to_string_lossy()), "{}", r.stderr);

    // Root reads everything: the unreadable-input half runs as `nobody`.
    use std::os::unix::fs::PermissionsExt;
    let shared = t.path().join("shared");
    std::fs::create_dir_all(&shared).unwrap();
    for p in [t.path(), shared.as_path()] {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o777)).unwrap();
    }
    let input = shared.join("in");
    jpeg_folder(&input, 3, 40, 30);
    let secret = input.join("c/1.jpg");
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o000)).unwrap();
    let as_nobody = |args: &[&std::ffi::OsStr]| {
        Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups", BIN])
            .args(args)
            .output()
            .unwrap()
    };
    let out = shared.join("out");
    let o = as_nobody(&[
        "pack".as_ref(),
        input.as_os_str(),
        out.as_os_str(),
        "-q".as_ref(),
    ]);
    if !o.status.success() && String::from_utf8_lossy(&o.stderr).contains("setpriv") {
        eprintln!(
            "cannot switch user here: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        return;
    }
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let errs = errors(&out);
    assert_eq!(errs.len(), 1, "{errs:?}");
    assert_eq!(errs[0].path, "c/1.jpg");
    assert_eq!(errs[0].kind, "unreadable");
    assert!(errs[0].message.contains("Permission denied"), "{errs:?}");
    // A class folder that cannot be listed stops the pack before anything is written.
    std::fs::set_permissions(input.join("c"), std::fs::Permissions::from_mode(0o000)).unwrap();
    let out2 = shared.join("out2");
    let o = as_nobody(&["pack".as_ref(), input.as_os_str(), out2.as_os_str()]);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("Permission denied") && err.contains("in/c"),
        "{err}"
    );
    std::fs::set_permissions(input.join("c"), std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// Too few file descriptors (`ulimit -n`) stop a pack with the cause named, at whatever step
/// they run out; an input that could not be opened for lack of one is never counted as failed.
#[test]
fn too_few_file_descriptors_stop_the_pack_and_fail_no_input() {
    let t = tempdir();
    let input = t.path().join("in");
    jpeg_folder(&input, 60, 16, 16);
    // Gzipped shards too, which are decompressed (staged) while listed.
    let shards = t.path().join("shards");
    pack(&input, &shards)
        .args(["--shard-samples", "5", "-q"])
        .ok();
    let gz = Command::new("bash")
        .arg("-c")
        .arg(format!("gzip {}/*.tar", shards.display()))
        .status();
    assert!(gz.unwrap().success());
    let gzipped = format!("'{}/*.tar.gz'", shards.display());
    let folder = format!("{} --shard-samples 5", input.display());
    let runs = [
        (6, &folder),
        (6, &folder),
        (7, &folder),
        (8, &folder),
        (8, &gzipped),
    ];
    for (i, (limit, args)) in runs
        .into_iter()
        .chain([(10, &gzipped), (12, &gzipped)])
        .enumerate()
    {
        let out = t.path().join(format!("out{i}"));
        let (code, err) = bash(&format!(
            "ulimit -n {limit} && exec {BIN} pack {args} {} --jobs 8 -q",
            out.display()
        ));
        assert!(!err.contains("failed: "), "{limit}: {err}");
        match code {
            Some(0) => assert_eq!(manifest(&out).inputs.failed, 0, "{limit}: {err}"),
            code => {
                assert_eq!(code, Some(1), "{limit}: {err}");
                assert!(err.contains("Too many open files"), "{limit}: {err}");
                assert!(err.contains("ulimit -n"), "{limit}: {err}");
            }
        }
    }
}

/// A stderr that cannot be written (`2>/dev/full`) loses the progress and messages, not the
/// run's outcome: a pack that succeeds exits 0 and one refused exits 2, never a panic's 101.
#[test]
fn a_stderr_that_cannot_be_written_leaves_the_exit_status_alone() {
    let t = tempdir();
    let input = t.path().join("in");
    jpeg_folder(&input, 3, 16, 16);
    let a_file = t.path().join("a-file");
    write_file(&a_file, "x");
    for (out, code) in [(t.path().join("out"), 0), (a_file, 2)] {
        let (code_seen, _) = bash(&format!(
            "exec {BIN} pack {} {} 2>/dev/full",
            input.display(),
            out.display()
        ));
        assert_eq!(code_seen, Some(code), "{}", out.display());
    }
    assert_eq!(manifest(&t.path().join("out")).totals.samples, 3);
}
