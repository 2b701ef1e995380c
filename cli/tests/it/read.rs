//! `shardtool read` and `bench` end to end: keys on stdout, exactly-once over ranks, resume from a
//! state file, and the budget table.

use std::path::Path;
use std::process::Command;

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_shardtool"))
}

fn sample_data() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../sample-data/imagefolder")
}

fn pack(out: &Path, extra: &[&str]) {
    let st = bin()
        .arg("pack")
        .arg(sample_data())
        .arg(out)
        .args(["--resize", "crop:32x32", "--shard-samples", "8", "-q"])
        .args(extra)
        .status()
        .unwrap();
    assert!(st.success());
}

fn keys(args: &[&str]) -> Vec<String> {
    let out = bin().arg("read").args(args).arg("--keys").output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect()
}

#[test]
fn keys_are_exactly_once_over_ranks_and_stable() {
    let dir = tempfile::tempdir().unwrap();
    let ds = dir.path().join("ds");
    pack(&ds, &["--format", "packed"]);
    let d = ds.to_str().unwrap();
    let all = keys(&[
        d,
        "--seed",
        "4",
        "--remainder",
        "pad",
        "--world",
        "1",
        "--rank",
        "0",
    ]);
    assert_eq!(all.len(), 45);
    let mut union = Vec::new();
    let mut per_rank = Vec::new();
    for r in 0..3 {
        let k = keys(&[
            d,
            "--seed",
            "4",
            "--rank",
            &r.to_string(),
            "--world",
            "3",
            "--workers",
            "2",
        ]);
        per_rank.push(k.len());
        union.extend(k);
    }
    assert_eq!(per_rank, vec![15, 15, 15]);
    union.sort();
    let mut expected = all.clone();
    expected.sort();
    assert_eq!(union, expected);
    // Same seed → same order, whatever the workers; another epoch → another order.
    assert_eq!(
        keys(&[d, "--seed", "4", "--workers", "1"]),
        keys(&[d, "--seed", "4", "--workers", "2"])
    );
    assert_ne!(
        keys(&[d, "--seed", "4"]),
        keys(&[d, "--seed", "4", "--epoch", "1"])
    );
}

/// RANK and WORLD_SIZE partition a read as torchrun sets them; one set to something that is not
/// a whole number is an error (not the whole dataset on every rank), unless --rank and --world
/// are given.
#[test]
fn rank_and_world_size_come_from_the_environment_and_a_bad_one_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let ds = dir.path().join("ds");
    pack(&ds, &[]);
    let d = ds.to_str().unwrap();
    let read = |env: &[(&str, &str)], args: &[&str]| {
        let mut c = bin();
        c.env_remove("RANK").env_remove("WORLD_SIZE");
        c.envs(env.iter().copied());
        c.arg("read")
            .arg(d)
            .arg("--keys")
            .args(args)
            .output()
            .unwrap()
    };
    let ok = |out: std::process::Output| {
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    let from_env = ok(read(&[("RANK", "1"), ("WORLD_SIZE", "3")], &[]));
    let given = ok(read(&[], &["--rank", "1", "--world", "3"]));
    assert_eq!(from_env.lines().count(), 15);
    assert_eq!(from_env, given);
    for (env, says) in [
        (&[("WORLD_SIZE", "abc")][..], "WORLD_SIZE=\"abc\""),
        (&[("RANK", "-1"), ("WORLD_SIZE", "2")][..], "RANK=\"-1\""),
        (&[("RANK", " 1"), ("WORLD_SIZE", "2")][..], "RANK=\" 1\""),
        (
            &[("WORLD_SIZE", "4")][..],
            "WORLD_SIZE is set but RANK is not",
        ),
        (&[("RANK", "1")][..], "RANK is set but WORLD_SIZE is not"),
        (
            &[("RANK", "5"), ("WORLD_SIZE", "4")][..],
            "RANK=5 must be below WORLD_SIZE=4",
        ),
    ] {
        let out = read(env, &[]);
        assert_eq!(out.status.code(), Some(2), "{env:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(says), "{env:?}: {err}");
        assert!(out.stdout.is_empty(), "{env:?}");
    }
    let explicit = ok(read(
        &[("WORLD_SIZE", "abc")],
        &["--rank", "1", "--world", "3"],
    ));
    assert_eq!(explicit, given);
    // Counts that cannot work are refused as flags are parsed, naming the range.
    for (flag, range) in [("--workers", "1..=4096"), ("--batch", "must be at least 1")] {
        let out = read(&[], &[flag, "0"]);
        assert_eq!(out.status.code(), Some(2), "{flag}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(range), "{flag}: {err}");
    }
}

/// More ranks than samples with the remainder dropped leave every rank nothing: an error, not an
/// empty epoch; padding gives each rank one sample.
#[test]
fn more_ranks_than_samples_is_an_error_unless_padded() {
    let dir = tempfile::tempdir().unwrap();
    let ds = dir.path().join("ds");
    pack(&ds, &[]);
    let d = ds.to_str().unwrap();
    let out = bin()
        .args(["read", d, "--keys", "--rank", "3", "--world", "100"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("45 samples over 100 ranks leave each rank none"),
        "{err}"
    );
    let padded = keys(&[d, "--rank", "3", "--world", "100", "--remainder", "pad"]);
    assert_eq!(padded.len(), 1);
}

#[test]
fn limit_state_out_and_resume_continue_the_identical_sequence() {
    let dir = tempfile::tempdir().unwrap();
    let ds = dir.path().join("ds");
    pack(&ds, &[]);
    let d = ds.to_str().unwrap();
    let full = keys(&[d, "--seed", "9", "--epoch", "3", "--batch", "5"]);
    let state = dir.path().join("state.json");
    let s = state.to_str().unwrap();
    let head = keys(&[
        d,
        "--seed",
        "9",
        "--epoch",
        "3",
        "--batch",
        "5",
        "--limit",
        "12",
        "--state-out",
        s,
    ]);
    assert_eq!(head.len(), 12);
    let tail = keys(&[d, "--resume", s, "--workers", "1"]);
    assert_eq!([head, tail].concat(), full);
    // A symlink given as --state-out stays one: the file it names takes the state.
    std::fs::create_dir(dir.path().join("kept")).unwrap();
    let link = dir.path().join("state-link.json");
    std::os::unix::fs::symlink("kept/state.json", &link).unwrap();
    let l = link.to_str().unwrap();
    let limited = [
        d, "--seed", "9", "--epoch", "3", "--batch", "5", "--limit", "12",
    ];
    let head = keys(&[&limited[..], &["--state-out", l]].concat());
    assert!(std::fs::symlink_metadata(&link).unwrap().is_symlink());
    assert!(dir.path().join("kept/state.json").is_file());
    let tail = keys(&[d, "--resume", l]);
    assert_eq!([head, tail].concat(), full);
    // A --state-out whose folder is missing, or takes no file (even root's), is refused before
    // anything is read.
    for (nowhere, why) in [
        (
            dir.path().join("missing/state.json"),
            "its folder does not exist",
        ),
        ("/proc/shardtool-state.json".into(), "cannot write there"),
        (dir.path().to_path_buf(), "names a folder"),
        ("/dev/null".into(), "is not a regular file"),
    ] {
        let out = bin()
            .args(["read", d, "--keys", "--limit", "3", "--state-out"])
            .arg(&nowhere)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2));
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(stdout.is_empty(), "{stdout}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(why), "{err}");
    }
    // A --resume given a file without end (or a checkpoint) stops at the state limit instead of
    // reading it whole.
    let out = bin()
        .args(["read", d, "--keys", "--resume", "/dev/zero"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("reading state /dev/zero: over the"), "{err}");
}

#[test]
fn bench_prints_the_budget_table() {
    let dir = tempfile::tempdir().unwrap();
    let ds = dir.path().join("ds");
    pack(&ds, &["--format", "packed"]);
    let out = bin()
        .args([
            "bench",
            ds.to_str().unwrap(),
            "--batch",
            "8",
            "--step-ms",
            "2",
        ])
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("wait p99 ms"), "{text}");
    assert!(
        text.lines()
            .any(|l| l.starts_with("with 2 ms step") && l.contains(" 45 ")),
        "{text}"
    );
    // Decoding 45 images takes CPU time, measured finer than the 10 ms clock ticks it was.
    let alone = text
        .lines()
        .find(|l| l.starts_with("loader alone"))
        .unwrap();
    let cpu: f64 = alone.split_whitespace().nth(5).unwrap().parse().unwrap();
    assert!(cpu > 0.0, "{text}");
}

#[test]
fn a_missing_dataset_or_a_single_shard_is_a_usage_error() {
    let out = bin()
        .args(["read", "/nonexistent/dataset", "--keys"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("manifest"));
    // A single shard is not a dataset: the message says what to give instead.
    let dir = tempfile::tempdir().unwrap();
    let ds = dir.path().join("ds");
    pack(&ds, &[]);
    let out = bin()
        .arg("read")
        .arg(ds.join("shard-000000.tar"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("is a shard: the reader takes a dataset folder"),
        "{err}"
    );
}

#[test]
fn a_closed_stdout_ends_quietly_without_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    let ds = dir.path().join("ds");
    pack(&ds, &[]);
    // Close the pipe's only read end before the child writes, as `| head -0` does: its first
    // write to stdout then fails whatever the pipe buffer size.
    let mut child = bin()
        .args(["inspect", ds.to_str().unwrap()])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
}

#[test]
fn bench_runs_the_device_loader_on_the_cpu_twin_and_refuses_a_missing_gpu() {
    let dir = tempfile::tempdir().unwrap();
    let ds = dir.path().join("ds");
    pack(&ds, &["--format", "packed"]);
    let d = ds.to_str().unwrap();
    let out = bin()
        .args([
            "bench",
            d,
            "--batch",
            "8",
            "--device",
            "cpu",
            "--step-ms",
            "1",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("device run"), "{text}");
    let rows: Vec<&str> = text.lines().filter(|l| l.starts_with("cpu step")).collect();
    assert_eq!(rows.len(), 2, "{text}");
    // Every sample went through the device loader.
    assert!(
        rows.iter()
            .all(|r| r.split_whitespace().nth(4) == Some("45")),
        "{text}"
    );

    // `auto` without a GPU says once that it runs on the CPU.
    let out = bin()
        .args(["bench", d, "--batch", "8", "--device", "auto"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.matches("running on the CPU").count(), 1, "{err}");

    // No GPU here (CI, and machines without CUDA): cuda:0 is a usage error naming what is
    // missing, before any work is done.
    if std::env::var_os("SHARDTOOL_GPU_TESTS").is_none() {
        let out = bin()
            .args(["bench", d, "--device", "cuda:0"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2));
        assert!(out.stdout.is_empty());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("without CUDA support") || err.contains("driver"),
            "{err}"
        );
    }
}

#[test]
fn a_folder_without_a_manifest_is_named_as_no_shardtool_dataset() {
    let dir = tempfile::tempdir().unwrap();
    let ds = dir.path().join("ds");
    pack(&ds, &[]);
    // The shards alone, as a WebDataset folder holds them.
    std::fs::remove_file(ds.join("manifest.json")).unwrap();
    let out = bin().arg("read").arg(&ds).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "a usage error");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("no manifest.json") && err.contains("shardtool pack makes one"),
        "{err}"
    );
}

#[test]
fn drop_last_leaves_out_only_the_short_last_batch() {
    let dir = tempfile::tempdir().unwrap();
    let ds = dir.path().join("ds");
    pack(&ds, &["--format", "packed"]);
    let d = ds.to_str().unwrap();
    let all = keys(&[d, "--seed", "2", "--batch", "10"]);
    let whole = keys(&[d, "--seed", "2", "--batch", "10", "--drop-last"]);
    assert_eq!(all.len(), 45);
    assert_eq!(whole, all[..40], "the same order, less the last 5");
}

/// A read keeping its position (`--state-out`) that is stopped by SIGTERM (a preemption) writes
/// the position of what it printed, exits 143, and a resume prints the rest: the epoch whole.
#[test]
fn sigterm_writes_the_state_and_a_resume_prints_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let mut read = Waiting::start(dir.path(), 9, 60);
    // The read waits at the tenth key, having read the nine before it.
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let pid = read.child.id().to_string();
    assert!(Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap()
        .success());
    let mut printed = String::new();
    std::io::Read::read_to_string(&mut read.child.stdout.take().unwrap(), &mut printed).unwrap();
    assert_eq!(read.child.wait().unwrap().code(), Some(143));
    let first: Vec<String> = printed.lines().map(str::to_string).collect();
    assert_eq!(first, read.all[..9]);
    assert_eq!([first, read.rest()].concat(), read.all);
}

/// A read of a packed dataset keeping its position in `st.json`, printing keys (seed 2, one
/// sample a batch) to a pipe, that waits `secs` at its key `at`; `all` is every key in order.
struct Waiting {
    ds: String,
    all: Vec<String>,
    state: std::path::PathBuf,
    child: std::process::Child,
}

impl Waiting {
    fn start(dir: &Path, at: usize, secs: u32) -> Self {
        let ds = dir.join("ds");
        pack(&ds, &["--format", "packed"]);
        let ds = ds.to_str().unwrap().to_string();
        let order = [ds.as_str(), "--seed", "2", "--batch", "1", "--workers", "1"];
        let all = keys(&order);
        let state = dir.join("st.json");
        let child = bin()
            .arg("read")
            .args(order)
            .args(["--keys", "--test-delay", &format!("{}:{secs}", all[at])])
            .arg("--state-out")
            .arg(&state)
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        Self {
            ds,
            all,
            state,
            child,
        }
    }

    /// What a resume from the state prints.
    fn rest(&self) -> Vec<String> {
        let state = self.state.to_str().unwrap();
        keys(&[&self.ds, "--seed", "2", "--batch", "1", "--resume", state])
    }
}

/// A read keeping its position whose shard cannot be fetched (gone from the server) fails
/// having written the position of what it printed; once the shard is back, a resume prints
/// the rest.
#[test]
fn a_failed_fetch_writes_the_state_and_a_resume_prints_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let www = dir.path().join("www");
    pack(&www.join("ds"), &["--format", "packed"]);
    let server = crate::remote::servers::Lighttpd::start(&www);
    let url = server.url("ds/");
    let cache = dir.path().join("cache");
    let args = |extra: &[&str]| -> Vec<String> {
        let base = [
            url.as_str(),
            "--seed",
            "5",
            "--batch",
            "1",
            "--workers",
            "1",
        ];
        let cache = [
            "--cache-dir",
            cache.to_str().unwrap(),
            "--prefetch-shards",
            "0",
        ];
        [&base[..], &cache[..], extra]
            .concat()
            .iter()
            .map(|s| s.to_string())
            .collect()
    };
    let all = keys(&args(&[]).iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(all.len(), 45);
    // The last shard goes (and leaves the cache); the read reaches it last.
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(www.join("ds/manifest.json")).unwrap()).unwrap();
    let shards = manifest["shards"].as_array().unwrap();
    let state = dir.path().join("st.json");
    let mut first = Vec::new();
    for s in shards {
        let name = s["file"].as_str().unwrap();
        let (held, kept) = (www.join("ds").join(name), dir.path().join(name));
        std::fs::rename(&held, &kept).unwrap();
        std::fs::remove_dir_all(&cache).unwrap();
        let mut a = args(&["--keys", "--fetch-attempts", "1", "--state-out"]);
        a.push(state.to_str().unwrap().to_string());
        let out = bin().arg("read").args(&a).output().unwrap();
        std::fs::rename(&kept, &held).unwrap();
        assert_eq!(out.status.code(), Some(1));
        first = String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .map(str::to_string)
            .collect();
        if !first.is_empty() {
            break;
        }
    }
    assert!(!first.is_empty() && first.len() < all.len(), "{first:?}");
    let mut resume = args(&["--resume"]);
    resume.push(state.to_str().unwrap().to_string());
    let rest = keys(&resume.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!([first, rest].concat(), all);
}

/// A state resumed by another rank (flags or torchrun's variables) reads that rank's share, at
/// the position the state's rank stood (ranks step together); a Python `state_dict()` given to
/// the CLI is named as one.
#[test]
fn resume_at_another_rank_reads_its_share_and_names_a_python_state() {
    let dir = tempfile::tempdir().unwrap();
    let ds = dir.path().join("ds");
    pack(&ds, &["--format", "packed"]);
    let d = ds.to_str().unwrap();
    let state = dir.path().join("st.json");
    let out = bin()
        .args([
            "read",
            d,
            "--rank",
            "0",
            "--world",
            "2",
            "--batch",
            "3",
            "--limit",
            "3",
            "--state-out",
        ])
        .arg(&state)
        .output()
        .unwrap();
    assert!(out.status.success());
    let s = state.to_str().unwrap();
    let one = keys(&[d, "--rank", "1", "--world", "2", "--batch", "3"]);
    for (args, env) in [
        (&["--rank", "1", "--world", "2"][..], None),
        (&[][..], Some(("1", "2"))),
    ] {
        let mut cmd = bin();
        cmd.args(["read", d, "--keys", "--resume", s]).args(args);
        if let Some((r, w)) = env {
            cmd.env("RANK", r).env("WORLD_SIZE", w);
        }
        let out = cmd.output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{err}");
        let rest: Vec<String> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| l.split('\t').next().unwrap_or("").to_string())
            .collect();
        assert_eq!(rest, one[3..], "{args:?} {env:?}");
    }
    // At a batch's start (`--limit 0`, or a pipe closed between batches) it is no partial batch.
    let start = dir.path().join("start.json");
    let none = [
        d, "--rank", "0", "--world", "2", "--batch", "3", "--limit", "0",
    ];
    keys(&[&none[..], &["--state-out", start.to_str().unwrap()]].concat());
    let resumed = [
        d,
        "--rank",
        "1",
        "--world",
        "2",
        "--resume",
        start.to_str().unwrap(),
    ];
    assert_eq!(keys(&resumed), one);
    // Inside a batch, the other rank's position is unknown: refused.
    let inside = dir.path().join("inside.json");
    let limited = [
        d, "--rank", "0", "--world", "2", "--batch", "3", "--limit", "2",
    ];
    keys(&[&limited[..], &["--state-out", inside.to_str().unwrap()]].concat());
    let out = bin()
        .args([
            "read", d, "--keys", "--rank", "1", "--world", "2", "--resume",
        ])
        .arg(&inside)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("only where every rank stood alike"), "{err}");
    let python = dir.path().join("py.json");
    let text = std::fs::read_to_string(&state).unwrap();
    std::fs::write(&python, format!("{{\"samples\": 3, \"reader\": {text}}}")).unwrap();
    let out = bin()
        .args(["read", d, "--resume", python.to_str().unwrap()])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("a Python Loader.state_dict()"), "{err}");
}

/// A read keeping its position whose pipe's reader goes (Ctrl-C ends the whole pipeline) writes
/// the position of what the reader took: a resume prints the rest, nothing lost.
#[test]
fn a_closed_pipe_writes_the_state_of_what_was_taken() {
    use std::io::BufRead;
    let dir = tempfile::tempdir().unwrap();
    let mut read = Waiting::start(dir.path(), 5, 1);
    let mut lines = std::io::BufReader::new(read.child.stdout.take().unwrap()).lines();
    let taken: Vec<String> = (0..5).map(|_| lines.next().unwrap().unwrap()).collect();
    drop(lines);
    assert!(!read.child.wait().unwrap().success());
    assert_eq!(taken, read.all[..5]);
    assert_eq!([taken, read.rest()].concat(), read.all);
}
