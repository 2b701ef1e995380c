//! Partitioned packing end to end: plan, parts as separate processes (killed with SIGKILL at
//! random moments and run again), merge, status, resume, and the Slurm and Kubernetes drivers;
//! and the crash matrix of packing: twenty landed kills each of a size-rolled pack, a
//! single-machine planned pack, parts and merge. The reference is always an uninterrupted `pack`
//! of the same inputs and options: byte for byte.

use crate::common::*;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Options shared by the single pack and the plan.
pub(crate) const OPTS: [&str; 6] = [
    "--resize",
    "shorter:40",
    "--shard-samples",
    "9",
    "--seed",
    "11",
];

/// An ImageFolder of `n` small JPEGs in three classes, plus two files that fail to decode.
pub(crate) fn inputs(dir: &Path, n: u32) -> PathBuf {
    let root = dir.join("in");
    for i in 0..n {
        let class = ["cat", "dog", "fox"][i as usize % 3];
        write_file(
            root.join(class).join(format!("{i:04}.jpg")),
            jpeg(&pattern(320 + i % 5, 240 + i % 7, i)),
        );
    }
    write_file(root.join("dog/broken.jpg"), b"not a jpeg at all");
    write_file(root.join("fox/empty.jpg"), b"");
    root
}

/// An S3 server whose bucket holds `n` of [`inputs`] packed under `wds/` as WebDataset shards
/// of 10 samples (`s3://bucket/wds/shard-00000K.tar`), and the bucket's folder on disk.
pub(crate) fn wds_in_s3(dir: &Path, n: u32) -> (crate::remote::servers::S3, PathBuf) {
    let s3 = crate::remote::servers::S3::start();
    let bucket = s3.root.path().join("bucket");
    pack(inputs(dir, n), bucket.join("wds"))
        .args(["--shard-samples", "10", "-q"])
        .ok();
    (s3, bucket)
}

/// The published dataset: every plain file of `dir` (not `_plan/`), with its bytes.
pub(crate) fn published(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.path().is_file())
        .map(|e| {
            (
                e.file_name().to_string_lossy().into_owned(),
                std::fs::read(e.path()).unwrap(),
            )
        })
        .collect()
}

#[track_caller]
pub(crate) fn assert_same_dataset(got: &Path, want: &Path) {
    assert_same_files(got, want, false);
}

/// [`assert_same_dataset`], not counting temporary files (`.NAME.PID.N.tmp`) with
/// `skip_temporaries`.
#[track_caller]
fn assert_same_files(got: &Path, want: &Path, skip_temporaries: bool) {
    let mut g = published(got);
    if skip_temporaries {
        g.retain(|name, _| !(name.starts_with('.') && name.ends_with(".tmp")));
    }
    let w = published(want);
    assert_eq!(
        g.keys().collect::<Vec<_>>(),
        w.keys().collect::<Vec<_>>(),
        "published files differ"
    );
    for (name, bytes) in &w {
        assert!(g[name] == *bytes, "{name} differs from the single pack's");
    }
}

pub(crate) fn part(out: &Path, spec: &str) -> Cmd {
    Cmd::new(["pack", "--plan"])
        .arg(out)
        .args(["--part", spec, "--jobs", "1", "-q"])
}

pub(crate) fn status_json(out: &Path) -> Value {
    let r = Cmd::new(["status", "--json"]).arg(out).run();
    serde_json::from_str(&r.stdout).unwrap_or_else(|e| panic!("{e}: {r:?}"))
}

pub(crate) fn numbers(v: &Value) -> Vec<u64> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap())
        .collect()
}

/// Every shard with a done record is whole: `verify` of the done shards through the records'
/// entries is what merge will publish, so check each file against its record here.
#[track_caller]
fn done_shards_are_whole(out: &Path) {
    let done = out.join("_plan/done");
    let Ok(entries) = std::fs::read_dir(&done) else {
        return;
    };
    for e in entries {
        let e = e.unwrap();
        let name = e.file_name().to_string_lossy().into_owned();
        if !name.ends_with(".json") || name.starts_with('.') {
            continue;
        }
        let rec: Value = serde_json::from_slice(&std::fs::read(e.path()).unwrap()).unwrap();
        if let Some(entry) = rec["entry"].as_object() {
            let file = out.join(entry["file"].as_str().unwrap());
            let bytes = std::fs::read(&file).unwrap();
            assert_eq!(bytes.len() as u64, entry["bytes"].as_u64().unwrap());
            assert_eq!(xxh3(&bytes), entry["checksum"].as_str().unwrap());
        }
    }
}

#[test]
fn four_parts_one_killed_and_rerun_merge_to_the_bytes_of_a_single_pack() {
    let dir = tempdir();
    let input = inputs(dir.path(), 150);
    let single = dir.path().join("single");
    pack(&input, &single).args(OPTS).args(["-q"]).ok();
    let m = manifest(&single);
    assert_eq!(m.inputs.failed, 2);
    assert_eq!(m.inputs.packed, 150);
    assert!(
        !single.join("_plan").exists(),
        "a single pack leaves no plan"
    );

    let out = dir.path().join("parts");
    Cmd::new(["plan"]).arg(&input).arg(&out).args(OPTS).ok();
    let mut rng = KillRng::new();
    let victim = rng.below(4);
    let children: Vec<_> = (0..4)
        .filter(|&i| i != victim)
        .map(|i| part(&out, &format!("{i}/4")).spawn())
        .collect();
    kill_after(
        part(&out, &format!("{victim}/4")),
        Duration::from_millis(rng.below(400)),
    );
    for mut c in children {
        assert!(c.wait().unwrap().success());
    }
    done_shards_are_whole(&out);
    // Merging before the killed part is redone names what is missing, unless it finished.
    let early = Cmd::new(["merge"]).arg(&out).run();
    if early.code != Some(0) {
        early.assert_code(1);
        assert!(early.stderr.contains("not done"), "{}", early.stderr);
        assert!(!out.join("manifest.json").exists());
    }
    part(&out, &format!("{victim}/4")).ok();
    Cmd::new(["merge"]).arg(&out).ok();
    assert_same_dataset(&out, &single);
    Cmd::new(["verify"]).arg(&out).ok();
    // A second merge is harmless.
    Cmd::new(["merge"]).arg(&out).ok();
    assert_same_dataset(&out, &single);
}

#[test]
fn twenty_random_kills_across_parts_and_merge_leave_nothing_torn_lost_or_doubled() {
    let dir = tempdir();
    let input = inputs(dir.path(), 200);
    let single = dir.path().join("single");
    pack(&input, &single).args(OPTS).args(["-q"]).ok();
    let out = dir.path().join("parts");
    Cmd::new(["plan"]).arg(&input).arg(&out).args(OPTS).ok();
    let mut rng = KillRng::new();
    let (mut kills, mut merge_kills, mut attempts, mut merged) = (0, 0, 0, 0);
    // At least twenty in parts (merge has its own twenty below).
    while kills - merge_kills < 20 {
        attempts += 1;
        assert!(attempts < 400, "landed only {kills} kills");
        if numbers(&status_json(&out)["missing"]).is_empty() {
            // Everything is done: commit, compare, and start over from a fresh plan.
            Cmd::new(["merge", "-q"]).arg(&out).ok();
            assert_same_dataset(&out, &single);
            merged += 1;
            Cmd::new(["plan", "--overwrite", "-q"])
                .arg(&input)
                .arg(&out)
                .args(OPTS)
                .ok();
            continue;
        }
        let which = rng.below(5);
        let landed = if which == 4 {
            kill_after(
                Cmd::new(["merge", "-q"]).arg(&out),
                Duration::from_millis(rng.below(6)),
            )
        } else {
            kill_after(
                part(&out, &format!("{which}/4")),
                Duration::from_millis(rng.below(150)),
            )
        };
        if landed {
            kills += 1;
            merge_kills += u32::from(which == 4);
        }
        done_shards_are_whole(&out);
        // A merge publishes the manifest only once every shard is done, as the final dataset.
        if out.join("manifest.json").exists() {
            assert_same_dataset(&out, &single);
        }
    }
    eprintln!("{kills} kills ({merge_kills} during merge), {merged} full rounds merged");
    for i in 0..4 {
        part(&out, &format!("{i}/4")).ok();
    }
    let s = status_json(&out);
    assert!(numbers(&s["missing"]).is_empty(), "{s}");
    Cmd::new(["merge"]).arg(&out).ok();
    assert_same_dataset(&out, &single);
    // Nothing packed twice: every input is in exactly one sample or one error line.
    let samples = wds_samples(&out);
    let mut sources: Vec<&str> = samples
        .iter()
        .map(|s| s.json["source"].as_str().unwrap())
        .collect();
    sources.sort_unstable();
    let before = sources.len();
    sources.dedup();
    assert_eq!(before, sources.len(), "a sample was packed twice");
    assert_eq!(sources.len() + errors(&out).len(), 202);
}

#[test]
fn merge_names_missing_shards_and_status_lists_them() {
    let dir = tempdir();
    let input = inputs(dir.path(), 40);
    let out = dir.path().join("out");
    let planned = Cmd::new(["plan", "--json"])
        .arg(&input)
        .arg(&out)
        .args(OPTS)
        .ok();
    let plan: Value = serde_json::from_str(&planned.stdout).unwrap();
    let shards = plan["shards"].as_u64().unwrap();
    // 40 images and 2 broken files are listed; K = 9.
    assert_eq!(shards, 42u64.div_ceil(9));
    // The part's summary names it as Python's pack_part does.
    let r = part(&out, "0/2").arg("--json").ok();
    let summary: Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(
        (summary["part"].as_u64(), summary["parts"].as_u64()),
        (Some(0), Some(2))
    );
    assert_eq!(summary["packed"].as_u64(), Some(shards.div_ceil(2)));
    let s = status_json(&out);
    let odd: Vec<u64> = (0..shards).filter(|j| j % 2 == 1).collect();
    assert_eq!(numbers(&s["missing"]), odd);
    assert_eq!(s["merged"], false);
    Cmd::new(["status"]).arg(&out).run().assert_code(1);
    let r = Cmd::new(["merge"]).arg(&out).run();
    r.assert_code(1);
    for j in &odd {
        assert!(
            r.stderr.contains(&format!("shard-{j:06}.tar")),
            "{}",
            r.stderr
        );
    }
    assert!(!out.join("manifest.json").exists());
    // Redo exactly the missing ones with the command merge gives.
    let hint = r
        .stderr
        .split("run them again: shardtool ")
        .nth(1)
        .unwrap_or_else(|| panic!("no command in {}", r.stderr))
        .trim();
    let args: Vec<&str> = hint.split(' ').collect();
    assert_eq!(
        args[..3],
        ["pack", "--plan", out.to_str().unwrap()],
        "{hint}"
    );
    Cmd::new(args).arg("-q").ok();
    assert!(numbers(&status_json(&out)["missing"]).is_empty());
    Cmd::new(["status"]).arg(&out).ok();
    Cmd::new(["merge"]).arg(&out).ok();
    Cmd::new(["verify"]).arg(&out).ok();
}

#[test]
fn slurm_and_kubernetes_drivers_take_the_part_from_their_environment() {
    let dir = tempdir();
    let input = inputs(dir.path(), 40);
    let out = dir.path().join("out");
    Cmd::new(["plan"]).arg(&input).arg(&out).args(OPTS).ok();
    let shards = status_json(&out)["shards"].as_u64().unwrap();

    // The Slurm template, run as task 1 of `--array=0-1` resubmitted alone (`--array=1`).
    let script = repo_root().join("scripts/slurm_pack.sh");
    let r = std::process::Command::new("bash")
        .arg(&script)
        .arg(&out)
        .arg("2")
        .env("SHARDTOOL", BIN)
        .env("SLURM_ARRAY_TASK_ID", "1")
        .env("SLURM_ARRAY_TASK_MIN", "1")
        .env("SLURM_CPUS_PER_TASK", "1")
        .env_remove("JOB_COMPLETION_INDEX")
        .output()
        .unwrap();
    assert!(r.status.success(), "{r:?}");
    let odd: Vec<u64> = (0..shards).filter(|j| j % 2 == 1).collect();
    assert_eq!(numbers(&status_json(&out)["done"]), odd);

    // The Kubernetes template's command, with the index an indexed Job gives pod 0.
    let yaml = std::fs::read_to_string(repo_root().join("scripts/k8s_pack_job.yaml")).unwrap();
    let count = |key: &str| -> u64 {
        let line = yaml
            .lines()
            .find(|l| l.trim_start().starts_with(key))
            .unwrap_or_else(|| panic!("{key} in the manifest"));
        line.split(':').nth(1).unwrap().trim().parse().unwrap()
    };
    let n = count("completions:");
    assert_eq!(n, count("parallelism:"));
    assert!(
        yaml.contains(&format!("\"auto/{n}\"")),
        "parts must match completions"
    );
    assert!(yaml.contains("completionMode: Indexed"));
    Cmd::new(["pack", "--plan"])
        .arg(&out)
        .args(["--part", "auto/2", "-q"])
        .env("JOB_COMPLETION_INDEX", "0")
        .ok();
    assert!(numbers(&status_json(&out)["missing"]).is_empty());
    Cmd::new(["merge"]).arg(&out).ok();

    // Without either variable, auto is a usage error that says what it looked for.
    let r = Cmd::new(["pack", "--plan"])
        .arg(&out)
        .args(["--part", "auto/2"])
        .run();
    if std::env::var_os("SLURM_ARRAY_TASK_ID").is_none()
        && std::env::var_os("JOB_COMPLETION_INDEX").is_none()
    {
        r.assert_code(2);
        assert!(r.stderr.contains("SLURM_ARRAY_TASK_ID"), "{}", r.stderr);
    }
}

#[test]
fn a_killed_pack_resumes_from_its_done_shards_to_the_same_bytes() {
    let dir = tempdir();
    let input = inputs(dir.path(), 150);
    let single = dir.path().join("single");
    pack(&input, &single).args(OPTS).args(["-q"]).ok();
    let out = dir.path().join("out");
    let mut rng = KillRng::new();
    let killed = kill_after(
        pack(&input, &out).args(OPTS).args(["-q", "--jobs", "1"]),
        Duration::from_millis(150 + rng.below(400)),
    );
    if killed && !holds_anything(&out) {
        // Killed before it wrote anything (a loaded machine starts processes slowly): nothing
        // to resume or refuse.
        pack(&input, &out).args(OPTS).args(["-q"]).ok();
    } else if killed {
        let r = pack(&input, &out).args(OPTS).run();
        r.assert_code(2);
        assert!(r.stderr.contains("--resume"), "{}", r.stderr);
        // Other options than the interrupted pack's are refused.
        let r = pack(&input, &out)
            .args([
                "--resize",
                "shorter:41",
                "--shard-samples",
                "9",
                "--seed",
                "11",
            ])
            .arg("--resume")
            .run();
        r.assert_code(2);
        assert!(r.stderr.contains("other inputs or options"), "{}", r.stderr);
        // Killed before its plan was written or after it was removed, there is no status.
        let s = Cmd::new(["status", "--json"]).arg(&out).run();
        eprintln!("killed at: {}{}", s.stdout.trim(), s.stderr.trim());
        pack(&input, &out).args(OPTS).args(["--resume", "-q"]).ok();
    }
    assert_same_dataset(&out, &single);
    assert!(!out.join("_plan").exists());
    // Resuming a finished pack packs nothing and changes nothing; other options are refused.
    let r = pack(&input, &out)
        .args(OPTS)
        .args(["--resume", "--json"])
        .ok();
    let summary: serde_json::Value = serde_json::from_str(r.stdout.trim()).unwrap();
    assert_eq!(summary["packed_now"], 0, "{summary}");
    assert_eq!(summary["finished_before"], true, "{summary}");
    assert_eq!(summary["images_per_s"], 0.0, "{summary}");
    assert!(
        summary["inputs"]["packed"].as_u64() > Some(100),
        "{summary}"
    );
    let r = pack(&input, &out).args(OPTS).args(["--resume"]).ok();
    assert!(r.stdout.contains("all by earlier runs"), "{}", r.stdout);
    let r = pack(&input, &out).args(OPTS).args(["--resume", "-q"]).ok();
    assert_eq!((r.stdout.as_str(), r.stderr.as_str()), ("", ""));
    assert_same_dataset(&out, &single);
    let r = pack(&input, &out)
        .args([
            "--resize",
            "shorter:41",
            "--shard-samples",
            "9",
            "--seed",
            "11",
            "--resume",
        ])
        .run();
    r.assert_code(2);
    assert!(r.stderr.contains("other inputs or options"), "{}", r.stderr);
    // So is another input with the same options: the finished dataset is not another's.
    let other = inputs(&dir.path().join("other"), 20);
    let r = pack(&other, &out).args(OPTS).args(["--resume"]).run();
    r.assert_code(2);
    assert!(r.stderr.contains("input: "), "{}", r.stderr);
    assert_same_dataset(&out, &single);
    // Its plan is gone: status says what is there instead.
    let r = Cmd::new(["status"]).arg(&out).run();
    r.assert_code(2);
    assert!(r.stderr.contains("finished dataset"), "{}", r.stderr);
}

#[test]
fn partitioned_packing_refuses_what_cannot_work() {
    let dir = tempdir();
    let input = inputs(dir.path(), 6);
    let out = dir.path().join("out");
    let r = Cmd::new(["plan"]).arg(&input).arg(&out).run();
    r.assert_code(2);
    assert!(r.stderr.contains("--shard-samples"), "{}", r.stderr);
    // The flags that run a plan are refused by `plan` (it would otherwise ignore them) and
    // left out of its help; its --resume keeps a plan (plan_guards).
    for flags in [&["--part", "0/2"][..], &["--shards", "0"]] {
        let r = Cmd::new(["plan"])
            .arg(&input)
            .arg(&out)
            .args(OPTS)
            .args(flags)
            .run();
        r.assert_code(2);
        assert!(
            r.stderr.contains("pack --plan OUTPUT"),
            "{flags:?}: {}",
            r.stderr
        );
    }
    assert!(!out.exists());
    let help = Cmd::new(["plan", "--help"]).ok().stdout;
    for flag in ["--part ", "--shards ", "--plan "] {
        assert!(
            !help.contains(&format!("\n      {flag}")),
            "plan --help shows {flag}"
        );
    }
    assert!(help.contains("\n      --shard-samples "), "{help}");
    assert!(help.contains("Keep a plan already in OUTPUT"), "{help}");
    let help = Cmd::new(["cache", "prefetch", "--help"]).ok().stdout;
    assert!(!help.contains("--prefetch-shards"), "{help}");
    assert!(help.contains("--fetch-concurrency"), "{help}");
    let r = pack(&input, &out).arg("--resume").run();
    r.assert_code(2);
    let r = Cmd::new(["pack", "--plan"])
        .arg(&out)
        .args(["--part", "0/1"])
        .run();
    r.assert_code(2);
    assert!(r.stderr.contains("no plan"), "{}", r.stderr);
    Cmd::new(["plan"]).arg(&input).arg(&out).args(OPTS).ok();
    let r = Cmd::new(["plan"]).arg(&input).arg(&out).args(OPTS).run();
    r.assert_code(2);
    assert!(r.stderr.contains("--overwrite"), "{}", r.stderr);
    for bad in ["2/2", "x/2", "1/0", "auto"] {
        let r = Cmd::new(["pack", "--plan"])
            .arg(&out)
            .args(["--part", bad])
            .run();
        r.assert_code(2);
        assert!(r.stderr.contains("--part"), "{bad}: {}", r.stderr);
    }
    let r = Cmd::new(["pack", "--plan"])
        .arg(&out)
        .args(["--shards", "0,7"])
        .run();
    r.assert_code(2);
    assert!(
        r.stderr.contains("shard 7 is not in the plan"),
        "{}",
        r.stderr
    );
    let r = Cmd::new(["pack", "--plan"])
        .arg(&out)
        .args(["--resize", "shorter:10"])
        .run();
    r.assert_code(2);
    let r = pack(&input, dir.path().join("o2"))
        .args(["--shard-size", "1MiB", "--shard-samples", "5"])
        .run();
    r.assert_code(2);
}

#[test]
fn parts_publish_into_an_s3_folder_once_and_merge_there() {
    use crate::remote::servers::S3;
    let dir = tempdir();
    let input = inputs(dir.path(), 60);
    let single = dir.path().join("single");
    pack(&input, &single).args(OPTS).args(["-q"]).ok();
    let s3 = S3::start();
    std::fs::create_dir_all(s3.root.path().join("bucket")).unwrap();
    let with_env = |c: Cmd| c.envs(s3.env());
    let url = "s3://bucket/out/";
    // A temporary folder that cannot hold the scratch folder is named as the cause.
    let r = with_env(Cmd::new(["plan"]).arg(&input).arg(url).args(OPTS))
        .env("TMPDIR", dir.path().join("none"))
        .run();
    let err = &r.assert_code(1).stderr;
    assert!(
        err.contains("set TMPDIR to a writable local folder"),
        "{err}"
    );
    with_env(Cmd::new(["plan"]).arg(&input).arg(url).args(OPTS)).ok();
    let mut rng = KillRng::new();
    kill_after(
        with_env(part(Path::new(url), "0/2")),
        Duration::from_millis(rng.below(300)),
    );
    with_env(part(Path::new(url), "1/2")).ok();
    with_env(part(Path::new(url), "0/2")).ok();
    with_env(Cmd::new(["merge", url])).ok();
    // The objects are files under the server's root: the same bytes as a local single pack.
    let objects = s3.root.path().join("bucket/out");
    for (name, bytes) in published(&single) {
        let got = std::fs::read(objects.join(&name)).unwrap_or_default();
        assert!(got == bytes, "{name} differs from the single pack's");
    }
    // A shard published again with the same bytes is accepted; other bytes are never replaced.
    let done0 = objects.join("_plan/done/000000.json");
    std::fs::remove_file(&done0).unwrap();
    with_env(Cmd::new(["pack", "--plan", url, "--shards", "0", "-q"])).ok();
    assert!(done0.exists());
    let shard0 = objects.join("shard-000000.tar");
    let original = std::fs::read(&shard0).unwrap();
    let mut other = original.clone();
    let last = other.len() - 1;
    other[last] ^= 1;
    std::fs::write(&shard0, &other).unwrap();
    std::fs::remove_file(&done0).unwrap();
    let r = with_env(Cmd::new(["pack", "--plan", url, "--shards", "0"])).run();
    r.assert_code(1);
    assert!(r.stderr.contains("not replaced"), "{}", r.stderr);
    assert_eq!(std::fs::read(&shard0).unwrap(), other);
    // Status and merge read done records from the store too.
    let r = with_env(Cmd::new(["status", url])).run();
    r.assert_code(1);
    assert!(r.stdout.contains("missing: 0"), "{}", r.stdout);
}

#[test]
fn a_plan_of_urls_records_sizes_and_etags_and_parts_read_its_staged_copies() {
    let dir = tempdir();
    let (s3, _) = wds_in_s3(dir.path(), 30);
    let with_env = |c: Cmd| c.envs(s3.env());
    let url = "s3://bucket/wds/shard-{000000..000002}.tar";
    let single = dir.path().join("single");
    with_env(pack(url, &single).args(OPTS).args(["-q"])).ok();
    let out = dir.path().join("out");
    with_env(Cmd::new(["plan", url]).arg(&out).args(OPTS)).ok();
    let plan: Value =
        serde_json::from_slice(&std::fs::read(out.join("_plan/plan.json")).unwrap()).unwrap();
    let containers = plan["containers"].as_array().unwrap();
    assert_eq!(containers.len(), 3);
    for c in containers {
        assert_eq!(c["staged"], true, "{c}");
        assert!(c["size"].as_u64().unwrap() > 0, "{c}");
        assert!(!c["etag"].as_str().unwrap_or_default().is_empty(), "{c}");
    }
    // The store goes away: parts read the copies the plan staged.
    drop(s3);
    part(&out, "0/2").ok();
    part(&out, "1/2").ok();
    Cmd::new(["merge"]).arg(&out).ok();
    assert_same_dataset(&out, &single);
    assert!(
        !out.join("_plan/staged").exists(),
        "merge removes the staged copies"
    );
    // A shard redone after the merge cannot read them: an error, not a shard of failures that
    // a second merge would commit.
    let manifest_before = std::fs::read(out.join("manifest.json")).unwrap();
    let shard = out.join("shard-000001.tar");
    let len = std::fs::metadata(&shard).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&shard)
        .unwrap()
        .set_len(len / 2)
        .unwrap();
    let r = Cmd::new(["pack", "--plan"])
        .arg(&out)
        .args(["--shards", "1", "-q"])
        .run();
    // Exit 2: a plan that cannot run fails every retry alike (schedulers stop on 2).
    r.assert_code(2);
    assert!(r.stderr.contains("staged copy"), "{}", r.stderr);
    assert!(r.stderr.contains("--overwrite"), "{}", r.stderr);
    assert_eq!(
        std::fs::read(out.join("manifest.json")).unwrap(),
        manifest_before
    );
}

/// Temporary files (`.NAME.PID.N.tmp`) anywhere under `dir`.
fn temporaries(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else if p.file_name().unwrap().to_string_lossy().ends_with(".tmp") {
                out.push(p);
            }
        }
    }
    out
}

/// Every shard published in `out` is byte-identical to the same shard of the uninterrupted
/// pack `single`: a killed pack leaves whole shards or none, never a torn one.
#[track_caller]
fn published_shards_are_whole(out: &Path, single: &Path) {
    let want = published(single);
    for (name, bytes) in published(out) {
        if name.starts_with("shard-") {
            assert!(want.get(&name) == Some(&bytes), "{name} is torn or foreign");
        }
    }
}

/// Milliseconds an uninterrupted `cmd` takes (at least 20), to draw kill times from.
fn duration_ms(cmd: Cmd) -> u64 {
    let start = std::time::Instant::now();
    cmd.ok();
    (start.elapsed().as_millis() as u64).max(20)
}

/// Runs `cmd()` killed at a random moment within `ms` until twenty kills have landed, calling
/// `killed(kills so far)` after each kill and `finished()` after each run that ended first.
/// Returns the number of runs that finished.
fn twenty_kills(
    mut ms: u64,
    mut cmd: impl FnMut() -> Cmd,
    mut killed: impl FnMut(u32),
    mut finished: impl FnMut(),
) -> u32 {
    let mut rng = KillRng::new();
    let (mut kills, mut done) = (0, 0);
    while kills < 20 {
        assert!(kills + done < 400, "landed only {kills} kills");
        if kill_after(cmd(), Duration::from_millis(rng.below(ms))) {
            kills += 1;
            killed(kills);
        } else {
            done += 1;
            // A timing taken on a busy machine can be far too long: halve it every 20 misses.
            ms = if done % 20 == 0 { (ms / 2).max(2) } else { ms };
            finished();
        }
    }
    done
}

/// Whether the folder exists and holds any entry (what a killed run left).
fn holds_anything(dir: &Path) -> bool {
    std::fs::read_dir(dir).is_ok_and(|mut d| d.next().is_some())
}

/// After each kill: shards whole or absent, and a manifest only as the whole dataset (it is
/// written last). A killed run's temporary file may lie beside them: a SIGKILL leaves no chance
/// to remove it, and the next run sweeps it (a merge killed before renaming its manifest, after
/// an earlier killed merge had published the same manifest, leaves exactly that).
#[track_caller]
fn nothing_torn(out: &Path, single: &Path) {
    // Killed before it made the output folder: nothing was written.
    if !out.exists() {
        return;
    }
    done_shards_are_whole(out);
    published_shards_are_whole(out, single);
    if out.join("manifest.json").exists() {
        assert_same_files(out, single, true);
    }
}

/// At the end: the uninterrupted bytes and no temporary file.
#[track_caller]
fn finished_whole(out: &Path, single: &Path) {
    assert_same_dataset(out, single);
    assert_eq!(
        temporaries(out),
        Vec::<PathBuf>::new(),
        "temporary files left"
    );
}

#[test]
fn twenty_kills_of_a_size_rolled_pack_then_an_overwrite_give_the_uninterrupted_bytes() {
    let dir = tempdir();
    let input = inputs(dir.path(), 120);
    let opts = [
        "--resize",
        "shorter:40",
        "--seed",
        "11",
        "--shard-size",
        "48KiB",
        "-q",
    ];
    let single = dir.path().join("single");
    let ms = duration_ms(pack(&input, &single).args(opts).args(["--jobs", "1"]));
    assert!(
        manifest(&single).shards.len() > 3,
        "several shards to be killed between"
    );
    let out = dir.path().join("out");
    let mut refused = false;
    let finished = twenty_kills(
        ms,
        || {
            pack(&input, &out)
                .args(opts)
                .args(["--jobs", "1", "--overwrite"])
        },
        |_| {
            nothing_torn(&out, &single);
            // Without --overwrite the leftovers are never taken for a dataset. Checked once,
            // after the first kill that left any: one that lands before the run has written
            // anything leaves nothing to refuse (a loaded machine starts processes slowly).
            if holds_anything(&out) && !refused {
                pack(&input, &out).args(opts).run().assert_code(2);
                refused = true;
            }
        },
        || assert_same_dataset(&out, &single),
    );
    assert!(refused, "no kill left anything behind to refuse");
    eprintln!("20 kills, {finished} runs finished between them");
    pack(&input, &out).args(opts).arg("--overwrite").ok();
    finished_whole(&out, &single);
}

#[test]
fn twenty_kills_of_a_planned_pack_each_resumed_give_the_uninterrupted_bytes() {
    let dir = tempdir();
    let input = inputs(dir.path(), 120);
    let single = dir.path().join("single");
    let ms = duration_ms(pack(&input, &single).args(OPTS).args(["-q", "--jobs", "1"]));
    let out = dir.path().join("out");
    let finished = twenty_kills(
        ms,
        || {
            pack(&input, &out)
                .args(OPTS)
                .args(["-q", "--jobs", "1", "--resume"])
        },
        |_| nothing_torn(&out, &single),
        || {
            // The whole dataset; start again from nothing.
            assert_same_dataset(&out, &single);
            std::fs::remove_dir_all(&out).unwrap();
        },
    );
    eprintln!("20 kills, {finished} packs finished between them");
    pack(&input, &out).args(OPTS).args(["-q", "--resume"]).ok();
    finished_whole(&out, &single);
    assert!(!out.join("_plan").exists());
}

#[test]
fn twenty_kills_of_merge_leave_no_manifest_or_the_final_one() {
    let dir = tempdir();
    let input = inputs(dir.path(), 120);
    let single = dir.path().join("single");
    pack(&input, &single).args(OPTS).args(["-q"]).ok();
    // Every part done, nothing merged.
    let planned = |out: &Path| {
        let _ = std::fs::remove_dir_all(out);
        Cmd::new(["plan", "-q"])
            .arg(&input)
            .arg(out)
            .args(OPTS)
            .ok();
        part(out, "0/1").ok();
    };
    let timed = dir.path().join("timed");
    planned(&timed);
    let ms = duration_ms(Cmd::new(["merge", "-q"]).arg(&timed));
    let out = dir.path().join("out");
    planned(&out);
    let finished = twenty_kills(
        ms,
        || Cmd::new(["merge", "-q"]).arg(&out),
        |_| nothing_torn(&out, &single),
        || {
            assert_same_dataset(&out, &single);
            planned(&out);
        },
    );
    eprintln!("20 kills of merge ({ms} ms uninterrupted), {finished} merges finished between them");
    Cmd::new(["merge", "-q"]).arg(&out).ok();
    finished_whole(&out, &single);
}

/// A resume of a partitioned pack that is merged changes nothing there: the plan stays, and
/// `status` and a second `merge` still answer as before.
#[test]
fn a_resume_after_a_merge_keeps_the_plan() {
    let dir = tempdir();
    let images = inputs(dir.path(), 12);
    let out = dir.path().join("out");
    let k = ["--shard-samples", "5"];
    Cmd::new(["plan", "-q"]).arg(&images).arg(&out).args(k).ok();
    part(&out, "0/1").ok();
    Cmd::new(["merge", "-q"]).arg(&out).ok();
    let manifest = std::fs::read(out.join("manifest.json")).unwrap();
    pack(&images, &out).args(k).args(["--resume", "-q"]).ok();
    assert!(
        out.join("_plan/plan.json").is_file(),
        "the plan was removed"
    );
    assert_eq!(std::fs::read(out.join("manifest.json")).unwrap(), manifest);
    Cmd::new(["status"]).arg(&out).ok();
    Cmd::new(["merge", "-q"]).arg(&out).ok();
    Cmd::new(["verify", "-q"]).arg(&out).ok();
}
