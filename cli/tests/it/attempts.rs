//! Part attempts as schedulers run them. Redundant attempts of one part (a replacement pod while
//! the old one still runs, a Slurm requeue): one overtaken by another attempt and a merge ends
//! as done and touches nothing of the merged dataset, even when the merge has removed the staged
//! inputs it read; one of a replaced plan publishes nothing. Parts started from any folder.

use crate::common::*;
use crate::partition::{assert_same_dataset, inputs, part, published};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::Duration;

/// Options that make a pack of the test images slow enough per shard to stop in one: large
/// images, shards of 8.
const SLOW: [&str; 5] = [
    "--resize",
    "shorter:768",
    "--upscale",
    "--shard-samples",
    "8",
];

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

/// Gzipped WebDataset shards of 30 images in `dir`: a plan stages them decompressed, and merge
/// removes the copies.
fn gzipped_input(dir: &Path) -> PathBuf {
    let images = inputs(dir, 30);
    let wds = dir.join("wds");
    pack(&images, &wds)
        .args(["--shard-samples", "8", "-q"])
        .ok();
    let gz = dir.join("gz");
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
    gz
}

/// A part attempt run in the background, to be stopped and resumed; killed (and reaped) if a
/// test fails before it ends, so no stopped process outlives the test.
struct Attempt(Option<Child>);

impl Attempt {
    fn child(&mut self) -> &mut Child {
        self.0.as_mut().expect("the attempt is running")
    }

    fn signal(&mut self, sig: &str) {
        let pid = self.child().id().to_string();
        let s = std::process::Command::new("kill")
            .args([sig, &pid])
            .status()
            .unwrap();
        assert!(s.success());
    }

    /// Waits until `ready` holds (the attempt still running), then stops it.
    fn stop_when(&mut self, ready: impl Fn() -> bool) {
        while !ready() {
            assert!(
                self.child().try_wait().unwrap().is_none(),
                "the attempt ended before it could be stopped"
            );
            std::thread::sleep(Duration::from_micros(200));
        }
        self.signal("-STOP");
    }

    /// Lets it go on and waits for it to end.
    fn resume(mut self) -> std::process::Output {
        self.signal("-CONT");
        let child = self.0.take().expect("the attempt is running");
        child.wait_with_output().unwrap()
    }
}

impl Drop for Attempt {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = std::process::Command::new("kill")
                .args(["-CONT", &c.id().to_string()])
                .status();
            let _ = c.wait();
        }
    }
}

/// Plans a pack of staged inputs with `format` options, starts one attempt of its single part, stops it
/// once `stop_when` holds of OUTPUT, finishes the pack with a second attempt and a merge, then
/// lets the first attempt go on: it must end as done, changing nothing.
fn overtaken_attempt(format: &[&str], stop_when: impl Fn(&Path) -> bool) {
    let dir = tempdir();
    let gz = gzipped_input(dir.path());
    let mut opts = SLOW.to_vec();
    opts.extend(format);
    let single = dir.path().join("single");
    pack(&gz, &single).args(&opts).args(["-q"]).ok();
    let out = dir.path().join("out");
    Cmd::new(["plan"]).arg(&gz).arg(&out).args(&opts).ok();
    // With --max-errors 0: the staged inputs the merge removes must not count as failures.
    let mut slow = Attempt(Some(part(&out, "0/1").args(["--max-errors", "0"]).spawn()));
    slow.stop_when(|| stop_when(&out));
    part(&out, "0/1").ok();
    Cmd::new(["merge", "-q"]).arg(&out).ok();
    assert!(!shard_tmp(&out), "merge removes the stopped attempt's file");
    assert!(!out.join("_plan/staged").exists());
    let (shards, done) = (tree(&out), tree(&out.join("_plan/done")));
    let status = slow.resume().status;
    assert!(status.success(), "the overtaken attempt failed: {status}");
    // (Compared whole, not printed: the files are megabytes.)
    assert!(tree(&out) == shards, "the merged dataset was touched");
    assert!(
        tree(&out.join("_plan/done")) == done,
        "done records were rewritten"
    );
    assert_same_dataset(&out, &single);
}

/// Whether a shard's temporary file is in `out`.
fn shard_tmp(out: &Path) -> bool {
    std::fs::read_dir(out).unwrap().any(|e| {
        let name = e.unwrap().file_name().to_string_lossy().into_owned();
        name.starts_with(".shard-") && name.ends_with(".tmp")
    })
}

#[test]
fn an_attempt_overtaken_by_a_merge_ends_as_done_and_changes_nothing() {
    // Stopped while it writes a shard (its temporary file is in OUTPUT): the merge removes it.
    overtaken_attempt(&["--encode", "png"], shard_tmp);
}

#[test]
fn an_attempt_overtaken_between_shards_ends_as_done_and_changes_nothing() {
    // A packed shard's file is written only when the shard is complete: stopped after its first
    // shard is done, the attempt is making the next one with no file in OUTPUT, and would go on
    // reading staged inputs the merge has removed.
    overtaken_attempt(&["--format", "packed"], |out| {
        out.join("_plan/done/000000.json").exists()
    });
}

#[test]
fn an_attempt_overtaken_by_another_before_the_merge_leaves_its_shards_alone() {
    for _ in 0..3 {
        if overtaken_before_the_merge() {
            return;
        }
    }
    panic!("the first attempt could not be stopped after its first shard in three tries");
}

/// The scenario above; `false` when the stop came too late (on a loaded machine the attempt had
/// begun recording its second shard), to be tried again.
fn overtaken_before_the_merge() -> bool {
    let dir = tempdir();
    let gz = gzipped_input(dir.path());
    let opts = [&SLOW[..], &["--format", "packed"]].concat();
    let out = dir.path().join("out");
    Cmd::new(["plan"]).arg(&gz).arg(&out).args(&opts).ok();
    let mut slow = Attempt(Some(part(&out, "0/1").arg("--json").spawn_piped()));
    slow.stop_when(|| out.join("_plan/done/000000.json").exists());
    let recorded = std::fs::read_dir(out.join("_plan/done")).unwrap().count();
    if recorded != 1 {
        return false;
    }
    part(&out, "0/1").ok();
    let stamps = |dir: &Path| -> BTreeMap<String, std::time::SystemTime> {
        std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap())
            .filter(|e| e.path().is_file())
            .map(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                (name, e.metadata().unwrap().modified().unwrap())
            })
            .collect()
    };
    let before = (stamps(&out), stamps(&out.join("_plan/done")));
    let done = slow.resume();
    assert!(done.status.success(), "{done:?}");
    // The shards the other attempt did are neither published again nor recorded again.
    assert_eq!((stamps(&out), stamps(&out.join("_plan/done"))), before);
    let report: serde_json::Value = serde_json::from_slice(&done.stdout).unwrap();
    let shards = report["assigned"].as_u64().unwrap();
    assert!(shards >= 3, "{report}");
    assert_eq!(report["packed"].as_u64().unwrap(), 1, "{report}");
    assert_eq!(report["skipped"].as_u64().unwrap(), shards - 1, "{report}");
    Cmd::new(["merge", "-q"]).arg(&out).ok();
    Cmd::new(["verify"]).arg(&out).ok();
    true
}

#[test]
fn an_attempt_of_a_replaced_plan_publishes_nothing_into_the_new_dataset() {
    let dir = tempdir();
    let images = inputs(dir.path(), 30);
    // Packed shards are written whole when the shard is done: the stopped attempt still holds
    // its next shard in memory, to be written after the plan is replaced.
    let opts = [&SLOW[..], &["--format", "packed"]].concat();
    let out = dir.path().join("out");
    Cmd::new(["plan"]).arg(&images).arg(&out).args(&opts).ok();
    let mut old = Attempt(Some(part(&out, "0/1").spawn()));
    old.stop_when(|| out.join("_plan/done/000000.json").exists());
    // Planning again beside the running part is refused here (it shares OUTPUT's lock)...
    let again = || {
        Cmd::new(["plan"])
            .arg(&images)
            .args(&opts)
            .args(["--seed", "7", "--overwrite"])
    };
    let r = again().arg(&out).run();
    r.assert_code(1);
    assert!(
        r.stderr.contains("another shardtool process"),
        "{}",
        r.stderr
    );
    // ...but not from a host whose lock does not bind this one (a network file system): as if,
    // the new plan is made, packed and merged beside, then moved in (another seed: other
    // shards).
    let new = dir.path().join("new");
    again().arg(&new).ok();
    part(&new, "0/1").ok();
    Cmd::new(["merge", "-q"]).arg(&new).ok();
    std::fs::remove_dir_all(out.join("_plan")).unwrap();
    for e in std::fs::read_dir(&new).unwrap() {
        let e = e.unwrap();
        std::fs::rename(e.path(), out.join(e.file_name())).unwrap();
    }
    let merged = tree(&out);
    let status = old.resume().status;
    assert!(
        !status.success(),
        "the old plan's attempt must fail: {status}"
    );
    assert!(tree(&out) == merged, "the new dataset was touched");
    Cmd::new(["verify"]).arg(&out).ok();
}

/// Parts run wherever the scheduler starts them: a plan made from a list in the working folder
/// (its paths relative to it) is packed by parts started from other folders.
#[test]
fn parts_started_from_another_folder_read_a_relative_list() {
    let dir = tempdir();
    let images = inputs(dir.path(), 12);
    let mut rows = String::from("path,label\n");
    for e in std::fs::read_dir(images.join("cat")).unwrap() {
        let name = e.unwrap().file_name().to_string_lossy().into_owned();
        rows.push_str(&format!("in/cat/{name},0\n"));
    }
    std::fs::write(dir.path().join("list.csv"), rows).unwrap();
    let out = dir.path().join("out");
    Cmd::new(["plan", "--list", "list.csv"])
        .arg(&out)
        .args(["--shard-samples", "2"])
        .current_dir(dir.path())
        .ok();
    for (i, from) in ["/", "/tmp"].iter().enumerate() {
        part(&out, &format!("{i}/2")).current_dir(from).ok();
    }
    Cmd::new(["merge", "-q"]).arg(&out).ok();
    let m = manifest(&out);
    assert_eq!((m.inputs.packed, m.inputs.failed), (4, 0));
}

/// Parts and merges share OUTPUT; a plan or a pack needs it alone: `pack --overwrite` beside a
/// running part would delete the plan under it, a part beside a plan being made would read half
/// of it. Each is refused (exit 1: it passes by itself), touching nothing.
#[test]
fn parts_and_merges_share_output_and_plans_and_packs_need_it_alone() {
    let dir = tempdir();
    let images = inputs(dir.path(), 12);
    let out = dir.path().join("out");
    Cmd::new(["plan"])
        .arg(&images)
        .arg(&out)
        .args(["--shard-samples", "4"])
        .ok();
    let planned = tree(&out.join("_plan"));
    let held = std::fs::File::open(&out).unwrap();
    held.lock_shared().unwrap();
    // As if a part ran: another part and a merge may run beside it; a pack may not.
    part(&out, "0/2").ok();
    Cmd::new(["merge", "-q"]).arg(&out).run().assert_code(1);
    let r = pack(&images, &out).args(["--overwrite", "-q"]).run();
    r.assert_code(1);
    assert!(
        r.stderr.contains("another shardtool process"),
        "{}",
        r.stderr
    );
    assert!(tree(&out.join("_plan")) == planned, "the plan was touched");
    held.unlock().unwrap();
    // As if a plan were being made: parts and merges wait for it.
    held.lock().unwrap();
    // Exit 1, not 2: it passes by itself, and a job system retries it (Kubernetes' template
    // fails an index at once on exit 2).
    part(&out, "1/2").run().assert_code(1);
    Cmd::new(["merge", "-q"]).arg(&out).run().assert_code(1);
    // Spelled as a `file://` URL, the folder is the same, and so is its lock.
    let url = format!("file://{}", out.display());
    part(Path::new(&url), "1/2").run().assert_code(1);
    Cmd::new(["merge", "-q"]).arg(&url).run().assert_code(1);
    held.unlock().unwrap();
    part(&out, "1/2").ok();
    Cmd::new(["merge", "-q"]).arg(&out).ok();
    Cmd::new(["verify"]).arg(&out).ok();
    // A shard lost after the merge: status says the merged dataset is no longer whole.
    std::fs::remove_file(out.join("shard-000001.tar")).unwrap();
    let r = Cmd::new(["status"]).arg(&out).run();
    r.assert_code(1);
    assert!(r.stdout.contains("merged, but"), "{}", r.stdout);
}

/// `scancel` and a pod's deletion send SIGTERM, Ctrl-C SIGINT: a part stops at its next input,
/// removes its temporary shard and exits 128 + the signal; run again, it goes on.
#[test]
fn a_signalled_part_stops_cleanly_and_goes_on_when_run_again() {
    let dir = tempdir();
    let images = inputs(dir.path(), 30);
    let out = dir.path().join("out");
    let opts = [&SLOW[..], &["--encode", "png"]].concat();
    Cmd::new(["plan"]).arg(&images).arg(&out).args(&opts).ok();
    for (signal, code) in [("-TERM", 143), ("-INT", 130)] {
        let mut attempt = Attempt(Some(part(&out, "0/1").spawn_piped()));
        attempt.stop_when(|| shard_tmp(&out));
        attempt.signal("-CONT");
        attempt.signal(signal);
        let child = attempt.0.take().unwrap();
        let done = child.wait_with_output().unwrap();
        assert_eq!(done.status.code(), Some(code), "{done:?}");
        assert!(!shard_tmp(&out), "a temporary shard was left");
        let err = String::from_utf8_lossy(&done.stderr);
        assert!(err.contains("stopped by signal"), "{err}");
    }
    part(&out, "0/1").ok();
    Cmd::new(["merge", "-q"]).arg(&out).ok();
    Cmd::new(["verify"]).arg(&out).ok();
    // A pack with no plan to go on from, stopped before any input failed, leaves nothing in
    // the way of running it again (its empty errors.jsonl was "not empty").
    let plain = dir.path().join("plain");
    let opts = ["--resize", "shorter:768", "--upscale", "--encode", "png"];
    let mut attempt = Attempt(Some(pack(&images, &plain).args(opts).spawn_piped()));
    attempt.stop_when(|| plain.is_dir() && shard_tmp(&plain));
    attempt.signal("-CONT");
    attempt.signal("-TERM");
    let done = attempt.0.take().unwrap().wait_with_output().unwrap();
    assert_eq!(done.status.code(), Some(143), "{done:?}");
    pack(&images, &plain).args(["-q"]).ok();
    Cmd::new(["verify"]).arg(&plain).ok();
}

/// What the `s3://` attempt tests share: slow inputs planned into [`S3Plan::URL`] on a server of
/// their own, and commands pointed at it with a temporary folder (`tmp`) of their own.
struct S3Plan {
    s3: crate::remote::servers::S3,
    images: PathBuf,
    tmp: PathBuf,
    _dir: tempfile::TempDir,
}

impl S3Plan {
    const URL: &'static str = "s3://bucket/out/";

    fn new() -> Self {
        let dir = tempdir();
        let images = inputs(dir.path(), 16);
        let tmp = dir.path().join("tmp");
        std::fs::create_dir(&tmp).unwrap();
        let s3 = crate::remote::servers::S3::start();
        std::fs::create_dir_all(s3.root.path().join("bucket")).unwrap();
        let plan = Self {
            s3,
            images,
            tmp,
            _dir: dir,
        };
        plan.plan(&[]);
        plan
    }

    /// `c` against the server, with the plan's temporary folder.
    fn cmd(&self, c: Cmd) -> Cmd {
        c.envs(self.s3.env()).env("TMPDIR", &self.tmp)
    }

    /// Plans the inputs into [`S3Plan::URL`] with `extra` options.
    fn plan(&self, extra: &[&str]) {
        self.cmd(Cmd::new(["plan"]))
            .arg(&self.images)
            .arg(Self::URL)
            .args(SLOW)
            .args(extra)
            .ok();
    }

    /// An attempt of the plan's one part.
    fn part(&self) -> Cmd {
        self.cmd(part(Path::new(Self::URL), "0/1"))
    }
}

/// A part killed outright while writing to `s3://` (SIGKILL, the OOM killer, a grace period
/// outlasted) left its scratch folder, whole shards in it, on the node for good: the next run
/// opening an object-store output removes it, and leaves a live run's alone.
#[test]
fn a_killed_attempts_scratch_folder_goes_with_the_next_run_and_a_live_ones_stays() {
    let plan = S3Plan::new();
    let tmp = &plan.tmp;
    let scratches = || -> Vec<PathBuf> {
        let mut all: Vec<PathBuf> = (std::fs::read_dir(tmp).unwrap())
            .map(|e| e.unwrap().path())
            .filter(|p| {
                p.file_name()
                    .unwrap()
                    .to_string_lossy()
                    .starts_with("shardtool-out-")
            })
            .filter(|p| p.is_dir())
            .collect();
        all.sort();
        all
    };
    let mut attempt = Attempt(Some(plan.part().spawn_piped()));
    // Stopped while a shard is being made in its scratch folder, then killed.
    attempt.stop_when(|| (scratches().iter()).any(|d| std::fs::read_dir(d).unwrap().count() > 0));
    attempt.signal("-KILL");
    let _ = attempt.0.take().unwrap().wait();
    let dead = scratches();
    assert_eq!(dead.len(), 1, "the killed attempt's scratch folder");
    // A live run's: its lock is held (here by the test).
    let live = tmp.join("shardtool-out-1-live");
    std::fs::create_dir(&live).unwrap();
    let held = std::fs::File::create(tmp.join("shardtool-out-1-live.held")).unwrap();
    held.lock().unwrap();
    // A lock whose folder was never made (killed in between), an hour old.
    let lone = tmp.join("shardtool-out-2-lone.held");
    let f = std::fs::File::create(&lone).unwrap();
    let hour_ago = std::time::SystemTime::now() - Duration::from_secs(3600);
    f.set_modified(hour_ago).unwrap();
    drop(f);
    let r = plan.cmd(Cmd::new(["status", S3Plan::URL])).run();
    r.assert_code(1);
    assert_eq!(scratches(), vec![live.clone()]);
    assert!(!lone.exists(), "a lone lock file stayed");
    drop(held);
    plan.part().ok();
    assert!(scratches().is_empty(), "{:?}", scratches());
    let left: Vec<_> = std::fs::read_dir(tmp).unwrap().collect();
    assert!(left.is_empty(), "{left:?}");
}

/// A straggler attempt of a plan replaced in `s3://` (the prefix deleted and planned again
/// while it was stopped) published its shards into the new plan, which then could never finish
/// ("another object is already there"): it checks the plan object before each shard now.
#[test]
fn an_attempt_of_a_plan_replaced_in_s3_publishes_nothing_into_the_new_one() {
    let plan = S3Plan::new();
    let mut old = Attempt(Some(plan.part().spawn_piped()));
    // Stopped while it writes a shard (its plan read), not while it reads the plan's files.
    let writing = |d: &Path| {
        (std::fs::read_dir(d).into_iter().flatten().flatten())
            .any(|e| e.file_name().to_string_lossy().starts_with(".shard-"))
    };
    let tmp = &plan.tmp;
    old.stop_when(|| (std::fs::read_dir(tmp).unwrap().flatten()).any(|d| writing(&d.path())));
    // The prefix deleted (`aws s3 rm --recursive`) and planned again with other options.
    std::fs::remove_dir_all(plan.s3.root.path().join("bucket/out")).unwrap();
    plan.plan(&["--seed", "5"]);
    let done = old.resume();
    assert_eq!(done.status.code(), Some(1), "{done:?}");
    let err = String::from_utf8_lossy(&done.stderr);
    assert!(err.contains("was replaced while this part ran"), "{err}");
    // The new plan runs and merges as if the straggler had never been.
    plan.part().ok();
    plan.cmd(Cmd::new(["merge", S3Plan::URL])).ok();
    plan.cmd(Cmd::new(["verify", S3Plan::URL])).ok();
}

/// A server on loopback that answers a GET of a `.tar` with its headers and then holds the body,
/// a HEAD of one with its headers, and anything else with 404 (or, with `manifest`, never a
/// request for `manifest.json`). Returns its address.
fn stalling_server(manifest: bool) -> String {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for mut conn in listener.incoming().flatten() {
            std::thread::spawn(move || {
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") && conn.read(&mut byte).unwrap_or(0) == 1 {
                    head.push(byte[0]);
                }
                let line = String::from_utf8_lossy(&head)
                    .lines()
                    .next()
                    .map(str::to_owned);
                let line = line.unwrap_or_default();
                let (tar, get) = (line.contains(".tar "), line.starts_with("GET "));
                if manifest && line.contains("manifest.json") {
                    std::thread::sleep(Duration::from_secs(120));
                }
                let answer = match tar {
                    true => {
                        "HTTP/1.1 200 OK\r\nContent-Length: 100000\r\nConnection: close\r\n\r\n"
                    }
                    false => {
                        "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                    }
                };
                let _ = conn.write_all(answer.as_bytes());
                std::thread::sleep(Duration::from_secs(if tar && get { 120 } else { 0 }));
            });
        }
    });
    addr.to_string()
}

/// Ctrl-C or SIGTERM while a remote input's server holds its answer: the pack (or plan) stops
/// within moments, not when the fetch's attempts run out minutes later, and an earlier dataset
/// in the output stays whole.
#[test]
fn a_pack_stopped_while_a_server_stalls_ends_at_once_and_keeps_the_earlier_dataset() {
    let dir = tempdir();
    let images = inputs(dir.path(), 3);
    let out = dir.path().join("out");
    pack(&images, &out).args(["-q"]).ok();
    let before = tree(&out);
    // The second stalls the check of a manifest beside the shard as well.
    let stops = [
        ("pack", "-INT", 130, None, false),
        ("plan", "-TERM", 143, Some("8"), true),
        ("pack", "-TERM", 143, None, true),
    ];
    for (command, signal, code, shard_samples, manifest) in stops {
        let url = format!("http://{}/data/shard-000000.tar", stalling_server(manifest));
        let mut cmd = Cmd::new([command])
            .arg(&url)
            .arg(&out)
            .args(["--overwrite"]);
        if let Some(n) = shard_samples {
            cmd = cmd.args(["--shard-samples", n]);
        }
        let mut attempt = Attempt(Some(cmd.spawn_piped()));
        std::thread::sleep(Duration::from_millis(1500));
        let t = std::time::Instant::now();
        attempt.signal(signal);
        let done = attempt.0.take().unwrap().wait_with_output().unwrap();
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "{command}: {:?}",
            t.elapsed()
        );
        assert_eq!(done.status.code(), Some(code), "{command}: {done:?}");
        let err = String::from_utf8_lossy(&done.stderr);
        assert!(err.contains("stopped by signal"), "{command}: {err}");
        if command == "pack" {
            assert!(err.contains("is left as it was"), "{err}");
        }
        assert_eq!(tree(&out), before, "{command} changed the earlier dataset");
    }
    Cmd::new(["verify"]).arg(&out).ok();
}
