//! What a partitioned pack does when its inputs, shards or limits say no: work done under
//! another plan, inputs changed since the plan (at their size too), shards damaged before the
//! merge, and a whole pack's `--max-errors` given to the plan.

use crate::common::*;
use crate::partition::{inputs, numbers, part, published, status_json, OPTS};
use std::collections::BTreeMap;
use std::path::Path;

#[test]
fn work_done_under_another_plan_or_on_changed_inputs_is_not_taken() {
    let dir = tempdir();
    let input = inputs(dir.path(), 30);
    let out = dir.path().join("out");
    Cmd::new(["plan"]).arg(&input).arg(&out).args(OPTS).ok();
    part(&out, "0/1").ok();
    let old_done = out.join("_plan/done");
    let saved: BTreeMap<String, Vec<u8>> = published(&old_done);
    let saved_shards = published(&out);
    // Re-plan with another resize: the old shards and done records do not count for it.
    Cmd::new(["plan", "--overwrite", "--resize", "shorter:32"])
        .arg(&input)
        .arg(&out)
        .args(["--shard-samples", "9", "--seed", "11"])
        .ok();
    for (name, bytes) in &saved {
        write_file(old_done.join(name), bytes);
    }
    for (name, bytes) in &saved_shards {
        write_file(out.join(name), bytes);
    }
    let s = status_json(&out);
    assert!(numbers(&s["done"]).is_empty(), "{s}");
    let r = Cmd::new(["merge"]).arg(&out).run();
    r.assert_code(1);

    // An edited plan is refused.
    let plan_path = out.join("_plan/plan.json");
    let text = std::fs::read_to_string(&plan_path).unwrap();
    std::fs::write(&plan_path, text.replace("shorter:32", "shorter:33")).unwrap();
    let r = part(&out, "0/1").run();
    r.assert_code(2);
    assert!(r.stderr.contains("hash"), "{}", r.stderr);
    std::fs::write(&plan_path, text).unwrap();

    // An input changed after planning fails with a line naming it, instead of packing other
    // bytes than were planned.
    write_file(input.join("cat/0003.jpg"), jpeg(&pattern(90, 90, 999)));
    part(&out, "0/1").ok();
    Cmd::new(["merge"]).arg(&out).ok();
    let errs = errors(&out);
    let changed: Vec<_> = errs.iter().filter(|e| e.kind == "changed").collect();
    assert_eq!(changed.len(), 1, "{errs:?}");
    assert!(changed[0].path.ends_with("cat/0003.jpg"), "{errs:?}");

    // The same for an image a list names (not packed with the new picture).
    let list = dir.path().join("l.csv");
    let mut rows: Vec<String> = (std::fs::read_dir(input.join("cat")).unwrap())
        .map(|e| e.unwrap().path().display().to_string())
        .filter(|p| !p.ends_with("0003.jpg"))
        .collect();
    rows.sort();
    write_file(&list, format!("path\n{}\n", rows[..2].join("\n")));
    let listed = dir.path().join("listed");
    Cmd::new(["plan", "--list"])
        .arg(&list)
        .arg(&listed)
        .args(OPTS)
        .ok();
    write_file(&rows[1], jpeg(&pattern(90, 90, 998)));
    part(&listed, "0/1").ok();
    Cmd::new(["merge"]).arg(&listed).ok();
    let errs = errors(&listed);
    assert_eq!(errs.len(), 1, "{errs:?}");
    assert!(
        errs[0].kind == "changed" && rows[1].ends_with(&errs[0].path),
        "{errs:?}"
    );
}

#[test]
fn a_shard_or_list_rewritten_at_its_size_after_the_plan_is_changed_not_packed() {
    let dir = tempdir();
    let input = inputs(dir.path(), 30);
    // Two one-shard packs of the same images in other orders: tars of one size whose samples
    // lie at other places.
    let (a, b) = (dir.path().join("a"), dir.path().join("b"));
    for (out, seed) in [(&a, "1"), (&b, "2")] {
        pack(&input, out)
            .args([
                "--resize",
                "shorter:40",
                "--shard-samples",
                "64",
                "--seed",
                seed,
            ])
            .ok();
    }
    let (sa, sb) = (a.join("shard-000000.tar"), b.join("shard-000000.tar"));
    let len = |p: &Path| std::fs::metadata(p).unwrap().len();
    assert_eq!(len(&sa), len(&sb));
    let shards = dir.path().join("shards");
    std::fs::create_dir(&shards).unwrap();
    let shard = shards.join("s.tar");
    copy(&sa, &shard);
    let out = dir.path().join("out");
    Cmd::new(["plan"]).arg(&shards).arg(&out).args(OPTS).ok();
    let planned_at = std::fs::metadata(&shard).unwrap().modified().unwrap();
    copy(&sb, &shard);
    // Its modification time tells: the part fails, naming the shard, before packing anything
    // (its samples, all failed, would be left out of a merged dataset), with exit 2: every
    // retry would fail alike, and schedulers are told not to retry on 2.
    let r = part(&out, "0/1").run();
    r.assert_code(2);
    assert!(
        r.stderr
            .contains("s.tar changed since the plan was made (its modification time"),
        "{}",
        r.stderr
    );
    assert!(numbers(&status_json(&out)["done"]).is_empty());
    // Where the time is the planned one, the keys found at the planned places tell.
    let file = std::fs::File::options().write(true).open(&shard).unwrap();
    file.set_modified(planned_at).unwrap();
    drop(file);
    part(&out, "0/1").ok();
    Cmd::new(["merge"]).arg(&out).run();
    let errs = errors(&out);
    let moved = (errs.iter())
        .filter(|e| e.kind == "changed" && e.message.contains("where sample"))
        .count();
    assert!(moved > 10, "{errs:?}");

    // A list whose labels and captions are swapped at the same size.
    let list = dir.path().join("list.csv");
    let rows = |swap: bool| {
        let mut text = String::from("path,label,text\n");
        for (i, class) in ["cat", "dog"].iter().enumerate() {
            let (label, caption) = match (swap, i) {
                (false, 0) | (true, 1) => ("cat", "aaaa"),
                _ => ("dog", "zzzz"),
            };
            for n in (i as u32..30).step_by(3).take(4) {
                text += &format!(
                    "{}/{n:04}.jpg,{label},{caption}\n",
                    input.join(class).display()
                );
            }
        }
        text
    };
    write_file(&list, rows(false));
    let out = dir.path().join("out-list");
    Cmd::new(["plan", "--list"])
        .arg(&list)
        .arg(&out)
        .args(OPTS)
        .ok();
    write_file(&list, rows(true));
    let r = part(&out, "0/1").run();
    r.assert_code(2);
    assert!(r.stderr.contains("(its checksum differs)"), "{}", r.stderr);
    // A touched shard whose bytes are the planned ones, given back its time, packs.
    let out = dir.path().join("out-touched");
    copy(&sa, &shard);
    Cmd::new(["plan"]).arg(&shards).arg(&out).args(OPTS).ok();
    let planned_at = std::fs::metadata(&shard).unwrap().modified().unwrap();
    let file = std::fs::File::options().write(true).open(&shard).unwrap();
    file.set_modified(std::time::SystemTime::now()).unwrap();
    part(&out, "0/1").run().assert_code(2);
    file.set_modified(planned_at).unwrap();
    part(&out, "0/1").ok();
    Cmd::new(["merge"]).arg(&out).ok();
    assert_eq!(manifest(&out).totals.samples, manifest(&a).totals.samples);
}

#[test]
fn merge_finds_a_shard_damaged_at_its_size_and_its_part_redoes_it() {
    let dir = tempdir();
    let input = inputs(dir.path(), 30);
    let out = dir.path().join("out");
    Cmd::new(["plan"]).arg(&input).arg(&out).args(OPTS).ok();
    part(&out, "0/1").ok();
    let whole = published(&out);
    let shard = out.join("shard-000001.tar");
    let mut bytes = std::fs::read(&shard).unwrap();
    bytes[5000] ^= 0xff;
    write_file(&shard, &bytes);
    // Done by its record and its size, damaged by its checksum: not committed, and not done.
    let r = Cmd::new(["merge"]).arg(&out).run();
    r.assert_code(1);
    assert!(
        r.stderr
            .contains("shard-000001.tar was damaged after it was packed"),
        "{}",
        r.stderr
    );
    assert!(r.stderr.contains("--shards 1"), "{}", r.stderr);
    assert!(!out.join("manifest.json").exists());
    assert_eq!(numbers(&status_json(&out)["missing"]), [1]);
    Cmd::new(["pack", "--plan"])
        .arg(&out)
        .args(["--shards", "1"])
        .ok();
    Cmd::new(["merge"]).arg(&out).ok();
    Cmd::new(["verify"]).arg(&out).ok();
    let now = published(&out);
    for (name, bytes) in &whole {
        assert_eq!(&now[name], bytes, "{name}");
    }
}

#[test]
fn max_errors_given_to_the_plan_is_the_whole_packs_and_merge_keeps_to_it() {
    let dir = tempdir();
    let input = inputs(dir.path(), 30);
    // Two inputs fail: a plan allowing one commits nothing.
    let out = dir.path().join("out");
    Cmd::new(["plan", "--max-errors", "1"])
        .arg(&input)
        .arg(&out)
        .args(OPTS)
        .ok();
    // One part packs every shard, so it meets both failures: the plan's limit stops it.
    let r = part(&out, "0/1").run();
    r.assert_code(1);
    assert!(
        r.stderr.contains("more than --max-errors 1"),
        "{}",
        r.stderr
    );
    // status and merge name the stopped run and say a rerun as it was stops again.
    let stopped = "a run stopped past --max-errors";
    let r = Cmd::new(["status"]).arg(&out).run();
    r.assert_code(1);
    assert!(
        r.stdout.contains(stopped) && r.stdout.contains("failures-part-0-of-1.jsonl"),
        "{}",
        r.stdout
    );
    let r = Cmd::new(["merge"]).arg(&out).run();
    r.assert_code(1);
    assert!(
        r.stderr.contains(stopped) && r.stderr.contains("larger --max-errors"),
        "{}",
        r.stderr
    );
    // Lifted for the part, it packs; the merge still keeps to the plan's.
    Cmd::new(["pack", "--plan"])
        .arg(&out)
        .args(["--part", "0/1", "--max-errors", "100"])
        .ok();
    assert!(!Cmd::new(["status"]).arg(&out).ok().stdout.contains(stopped));
    let shards = status_json(&out)["shards"].as_u64().unwrap();
    assert_eq!(numbers(&status_json(&out)["done"]).len() as u64, shards);
    // status says merge will refuse; it takes no limit of its own.
    let r = Cmd::new(["status"]).arg(&out).ok();
    assert!(
        r.stdout.contains("than the plan's --max-errors 1"),
        "{}",
        r.stdout
    );
    Cmd::new(["status", "--max-errors", "0"])
        .arg(&out)
        .run()
        .assert_code(2);
    let r = Cmd::new(["merge"]).arg(&out).run();
    r.assert_code(1);
    assert!(
        r.stderr
            .contains("2 inputs failed, more than --max-errors 1"),
        "{}",
        r.stderr
    );
    assert!(!out.join("manifest.json").exists());
    // The merge's own limit overrides the plan's.
    Cmd::new(["merge", "--max-errors", "2"]).arg(&out).ok();
    assert_eq!(errors(&out).len(), 2);
    // Merged: status no longer says merge will refuse.
    let r = Cmd::new(["status"]).arg(&out).ok();
    assert!(
        r.stdout.contains("; merged") && !r.stdout.contains("max-errors"),
        "{}",
        r.stdout
    );
    // A part takes no zero threads, as a pack does not.
    let r = Cmd::new(["pack", "--plan"])
        .arg(&out)
        .args(["--part", "0/1", "-j", "0"])
        .run();
    r.assert_code(2);
    assert!(
        r.stderr.contains("at least one worker thread"),
        "{}",
        r.stderr
    );
}

/// In an `s3://` output as in a folder: a run stopped past the limit is named by `status` and
/// `merge`, and its list goes once a run goes through (both knew local folders only).
#[test]
fn a_run_stopped_past_max_errors_in_s3_is_named_and_its_list_removed() {
    use crate::remote::servers::S3;
    let dir = tempdir();
    let input = inputs(dir.path(), 30);
    let s3 = S3::start();
    std::fs::create_dir_all(s3.root.path().join("bucket")).unwrap();
    let url = "s3://bucket/out/";
    let cmd = |args: &[&str]| Cmd::new(args.iter().copied()).envs(s3.env());
    cmd(&["plan", "--max-errors", "1"])
        .arg(&input)
        .arg(url)
        .args(OPTS)
        .ok();
    cmd(&["pack", "--plan", url, "--part", "0/1"])
        .run()
        .assert_code(1);
    let list = s3
        .root
        .path()
        .join("bucket/out/_plan/failures-part-0-of-1.jsonl");
    assert!(list.exists());
    let stopped = "a run stopped past --max-errors, its failures listed in \
                   s3://bucket/out/_plan/failures-part-0-of-1.jsonl";
    let r = cmd(&["status", url]).run();
    r.assert_code(1);
    assert!(r.stdout.contains(stopped), "{}", r.stdout);
    // A URL's scheme in capitals is the same URL, not a folder named `S3:`.
    let r = cmd(&["status", "S3://bucket/out/"]).run();
    r.assert_code(1);
    assert!(
        r.stdout.contains("a run stopped past --max-errors"),
        "{}",
        r.stdout
    );
    let r = cmd(&["merge", url]).run();
    r.assert_code(1);
    assert!(r.stderr.contains(stopped), "{}", r.stderr);
    cmd(&[
        "pack",
        "--plan",
        url,
        "--part",
        "0/1",
        "--max-errors",
        "100",
    ])
    .ok();
    assert!(!list.exists(), "the stopped run's list stayed");
    assert!(!cmd(&["status", url]).run().stdout.contains("a run stopped"));
    cmd(&["merge", url, "--max-errors", "2"]).ok();
}

#[test]
fn a_plans_max_errors_counts_the_inputs_that_failed_while_listing() {
    let dir = tempdir();
    let input = inputs(dir.path(), 12);
    let one = dir.path().join("one");
    pack(&input, &one)
        .args(["--resize", "shorter:40", "--shard-samples", "64"])
        .ok();
    let shards = dir.path().join("shards");
    copy(one.join("shard-000000.tar"), shards.join("a.tar"));
    write_file(shards.join("junk.tar"), b"not a tar at all, not even close");
    let out = dir.path().join("out");
    // The plan says so at once (every part would stop), and is kept.
    let r = Cmd::new(["plan", "--max-errors", "0"])
        .arg(&shards)
        .arg(&out)
        .args(OPTS)
        .run();
    r.assert_code(1);
    assert!(
        r.stderr
            .contains("1 inputs failed, more than --max-errors 0"),
        "{}",
        r.stderr
    );
    // The junk shard failed while listing: past the plan's limit before any shard is packed.
    let r = part(&out, "0/2").run();
    r.assert_code(1);
    assert!(
        r.stderr.contains("more than --max-errors 0"),
        "{}",
        r.stderr
    );
    assert!(numbers(&status_json(&out)["done"]).is_empty());
}

#[test]
fn a_plan_whose_every_input_failed_to_list_is_refused_as_pack_refuses_it() {
    let dir = tempdir();
    let gone = dir.path().join("gone/shard-{000010..000011}.tar");
    let gone = gone.to_str().unwrap();
    let out = dir.path().join("out");
    let r = Cmd::new(["plan", gone]).arg(&out).args(OPTS).run();
    r.assert_code(1);
    assert!(r.stderr.contains("no usable image"), "{}", r.stderr);
    assert!(!out.join("_plan/plan.json").exists());
    let errors = std::fs::read_to_string(out.join("errors.jsonl")).unwrap();
    assert_eq!(errors.lines().count(), 2, "{errors}");
    // As a pack of the same input says.
    let r = pack(gone, dir.path().join("single")).args(OPTS).run();
    r.assert_code(1);
    assert!(r.stderr.contains("no usable image"), "{}", r.stderr);
}

#[test]
fn options_that_differ_from_the_plan_are_named_by_their_flags() {
    let dir = tempdir();
    let input = inputs(dir.path(), 12);
    let out = dir.path().join("out");
    pack(&input, &out)
        .args(["--shard-samples", "10", "-q"])
        .ok();
    let r = pack(&input, &out)
        .args(["--shard-samples", "12", "--resume"])
        .run();
    r.assert_code(2);
    assert!(
        r.stderr.contains("(--shard-samples: 10 → 12)"),
        "{}",
        r.stderr
    );
    let r = pack(&input, &out)
        .args(["--shard-samples", "10", "--no-shuffle", "--resume"])
        .run();
    r.assert_code(2);
    assert!(
        r.stderr.contains("--no-shuffle: \"not given\" → \"given\""),
        "{}",
        r.stderr
    );
}

/// An image added to a folder after its plan: resuming is refused, as it is once the dataset
/// is published, not the image silently left out.
#[test]
fn an_input_added_after_the_plan_is_refused_on_resume() {
    let dir = tempdir();
    let input = inputs(dir.path(), 12);
    let out = dir.path().join("out");
    Cmd::new(["plan"]).arg(&input).arg(&out).args(OPTS).ok();
    std::fs::copy(input.join("cat/0000.jpg"), input.join("cat/added.jpg")).unwrap();
    let says = "input: 14 inputs when planned, 15 in";
    let r = pack(&input, &out).args(OPTS).arg("--resume").run();
    r.assert_code(2);
    assert!(r.stderr.contains(says), "{}", r.stderr);
    // Taken away again, the plan goes on.
    std::fs::remove_file(input.join("cat/added.jpg")).unwrap();
    pack(&input, &out).args(OPTS).arg("--resume").ok();
    assert_eq!(manifest(&out).inputs.found, 14);
}

/// What a plan into S3 killed while staging leaves (its staged copies) is removed by a plan
/// with --overwrite; another object is never deleted.
#[test]
fn an_s3_plan_killed_while_staging_is_planned_again_with_overwrite() {
    use crate::remote::servers::S3;
    let dir = tempdir();
    let input = inputs(dir.path(), 12);
    let s3 = S3::start();
    let bucket = s3.root.path().join("bucket");
    let left = bucket.join("k/_plan/staged/.stage-000000-a.tar.tmp");
    write_file(&left, b"half a staged tar");
    // Killed between its input list and its plan file: the list is its own too.
    write_file(bucket.join("k/_plan/inputs.jsonl"), b"{}\n");
    let plan_in = |url: &str, extra: &[&str]| {
        Cmd::new(["plan"])
            .envs(s3.env())
            .args(extra)
            .arg(&input)
            .arg(url)
            .args(OPTS)
            .run()
    };
    let plan = |extra: &[&str]| plan_in("s3://bucket/k/", extra);
    let r = plan(&[]);
    assert_ne!(r.code, Some(0));
    assert!(
        r.stderr
            .contains("the staged inputs of a plan that did not finish")
            && r.stderr.contains("--overwrite"),
        "{}",
        r.stderr
    );
    plan(&["--overwrite"]).assert_code(0);
    assert!(!left.exists(), "the leftover stayed");
    assert!(bucket.join("k/_plan/plan.json").exists());
    // Planned again (a pack rerun after a kill): the way on is --resume, and starting over
    // means deleting objects, which shardtool never does there.
    let r = plan(&["--overwrite"]);
    assert!(
        r.stderr.contains("holds a plan") && r.stderr.contains("--resume"),
        "{}",
        r.stderr
    );
    let r = plan(&["--resume", "--prefix", "other"]);
    assert!(
        r.stderr.contains("--prefix") && r.stderr.contains("delete its objects"),
        "{}",
        r.stderr
    );
    // The user's own object beside a leftover: refused, whatever the flags, and kept.
    write_file(bucket.join("m/_plan/staged/.stage-000000-a.tar.tmp"), b"x");
    write_file(bucket.join("m/notes.txt"), b"mine");
    let r = plan_in("s3://bucket/m/", &["--overwrite"]);
    assert!(r.stderr.contains("not empty"), "{}", r.stderr);
    assert!(bucket.join("m/notes.txt").exists());
    // A finished dataset there: nothing to resume, and it stays.
    write_file(bucket.join("f/manifest.json"), b"{}");
    let r = plan_in("s3://bucket/f/", &["--overwrite"]);
    assert!(
        r.stderr.contains("holds a finished dataset"),
        "{}",
        r.stderr
    );
    assert!(bucket.join("f/manifest.json").exists());
}

/// The next steps `plan` prints are commands a shell reads back: an odd folder name is quoted.
#[test]
fn plan_prints_its_next_steps_quoted_for_a_shell() {
    let t = tempdir();
    jpeg_folder(&t.path().join("in"), 2, 16, 16);
    let out = t.path().join("p #1 it's");
    let r = Cmd::new(["plan"])
        .arg(t.path().join("in"))
        .arg(&out)
        .args(["--shard-samples", "1"])
        .ok();
    let quoted = format!("'{}'", out.display().to_string().replace('\'', "'\\''"));
    let (part, merge) = (format!("--plan {quoted} --part"), format!("merge {quoted}"));
    assert!(
        r.stdout.contains(&part) && r.stdout.contains(&merge),
        "{}",
        r.stdout
    );
}

/// A job that runs `plan` again (a resubmitted Slurm job) keeps the plan with `--resume`, and
/// its parts' work, instead of being offered only `--overwrite`; other options are named.
#[test]
fn plan_with_resume_keeps_the_same_plan_and_names_what_differs() {
    let t = tempdir();
    let input = inputs(t.path(), 6);
    let out = t.path().join("out");
    let plan = |extra: &[&str]| {
        Cmd::new(["plan"])
            .arg(&input)
            .arg(&out)
            .args(["--shard-samples", "2", "--json"])
            .args(extra)
            .run()
    };
    let first = plan(&[]);
    first.assert_code(0);
    part(&out, "0/1").ok();
    let again = plan(&[]);
    again.assert_code(2);
    assert!(
        again
            .stderr
            .contains("already planned; pass --resume to keep that plan"),
        "{}",
        again.stderr
    );
    let kept = plan(&["--resume"]);
    kept.assert_code(0);
    let field =
        |r: &Run, f: &str| serde_json::from_str::<serde_json::Value>(&r.stdout).unwrap()[f].clone();
    assert_eq!(field(&kept, "plan"), field(&first, "plan"));
    let kept_flags = (field(&first, "kept"), field(&kept, "kept"));
    assert_eq!(kept_flags, (false.into(), true.into()));
    // The part's shards are still done: the merge commits them without another part.
    Cmd::new(["merge"]).arg(&out).ok();
    let r = plan(&["--resume", "--seed", "5"]);
    r.assert_code(2);
    assert!(r.stderr.contains("--seed: 0 → 5"), "{}", r.stderr);
}
