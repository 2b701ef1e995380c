//! Remote datasets end to end: `read`, `bench` and `cache` against real servers on loopback
//! (lighttpd over HTTP, s3s-fs over S3, and a fault-injecting HTTP server), with several
//! processes sharing one cache folder.

#[path = "../../../crates/cache/tests/common/mod.rs"]
pub(crate) mod servers;

use servers::{Fault, FaultServer, Lighttpd, S3};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub(crate) fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_shardtool"))
}

pub(crate) fn sample_data() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../sample-data/imagefolder")
}

fn pack(out: &Path, extra: &[&str]) {
    let per_shard = if extra.contains(&"--shard-samples") {
        &[][..]
    } else {
        &["--shard-samples", "6"][..]
    };
    let st = bin()
        .arg("pack")
        .arg(sample_data())
        .arg(out)
        .args(["--resize", "crop:32x32", "-q"])
        .args(per_shard)
        .args(extra)
        .status()
        .unwrap();
    assert!(st.success());
}

fn run(args: &[&str]) -> Output {
    bin().args(args).output().unwrap()
}

fn ok(out: &Output) -> String {
    assert!(
        out.status.success(),
        "exit {:?}: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn keys(args: &[&str]) -> Vec<String> {
    let mut a = vec!["read"];
    a.extend_from_slice(args);
    a.push("--keys");
    ok(&run(&a)).lines().map(str::to_string).collect()
}

#[test]
fn http_reads_match_local_reads_and_the_second_epoch_is_all_hits() {
    let tmp = tempfile::tempdir().unwrap();
    let www = tmp.path().join("www");
    for (name, extra) in [
        ("tar-zst", &["--compress", "zstd"][..]),
        ("packed", &["--format", "packed"][..]),
    ] {
        pack(&www.join(name), extra);
    }
    let server = Lighttpd::start(&www);
    let cache = tmp.path().join("cache");
    let c = cache.to_str().unwrap();
    for name in ["tar-zst", "packed"] {
        let local = www.join(name);
        let url = server.url(&format!("{name}/"));
        let want = keys(&[local.to_str().unwrap(), "--seed", "3", "--epoch", "1"]);
        assert_eq!(want.len(), 45);
        let args = [
            "read",
            &url,
            "--seed",
            "3",
            "--epoch",
            "1",
            "--cache-dir",
            c,
            "--keys",
        ];
        let cold = run(&args);
        let got: Vec<String> = ok(&cold).lines().map(str::to_string).collect();
        assert_eq!(got, want, "{name}");
        // Cold: each shard one miss, whether the prefetcher or the reader fetched it (a shard
        // prefetched was also counted a hit when opened).
        let shards = crate::common::manifest(&local).shards.len();
        let err = String::from_utf8_lossy(&cold.stderr);
        assert!(
            err.contains(&format!("cache: 0 hits, {shards} misses")),
            "{err}"
        );
        // Epoch 2 from the warm cache: no shard is fetched again.
        let out = run(&[
            "read",
            &url,
            "--seed",
            "3",
            "--epoch",
            "2",
            "--cache-dir",
            c,
        ]);
        ok(&out);
        let err = String::from_utf8_lossy(&out.stderr);
        // One hit per shard opened: the prefetcher's look at a cached shard is not a hit.
        assert!(
            err.contains(&format!("cache: {shards} hits, 0 misses")),
            "{err}"
        );
    }
    let gets = server.gets();
    let shard_gets: Vec<_> = gets.iter().filter(|(p, _)| !p.ends_with(".json")).collect();
    assert!(!shard_gets.is_empty());
    assert!(shard_gets.iter().all(|(_, &n)| n == 1), "{gets:?}");
    // A manifest of another name, spelled escaped in the URL, is fetched by its stored name.
    let local = www.join("packed");
    std::fs::copy(local.join("manifest.json"), local.join("train v2%.json")).unwrap();
    let url = server.url("packed/train%20v2%25.json");
    let got = keys(&[&url, "--seed", "3", "--cache-dir", c]);
    assert_eq!(got, keys(&[local.to_str().unwrap(), "--seed", "3"]));
}

#[test]
fn four_processes_share_one_cache_and_download_each_shard_once() {
    let tmp = tempfile::tempdir().unwrap();
    let www = tmp.path().join("www");
    pack(&www.join("ds"), &["--shard-samples", "3"]);
    let server = Lighttpd::start(&www);
    let url = server.url("ds");
    let cache = tmp.path().join("cache");
    let children: Vec<_> = (0..4)
        .map(|rank| {
            bin()
                .args(["read", &url, "--keys", "--seed", "9", "--remainder", "pad"])
                .args([
                    "--rank",
                    &rank.to_string(),
                    "--world",
                    "4",
                    "--workers",
                    "2",
                ])
                .arg("--cache-dir")
                .arg(&cache)
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut all = Vec::new();
    for c in children {
        let out = c.wait_with_output().unwrap();
        all.extend(ok(&out).lines().map(str::to_string));
    }
    // Every sample read (pad repeats a few to even out the ranks) …
    let mut unique = all.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), 45);
    // … and each shard downloaded exactly once, counted at the server.
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(www.join("ds/manifest.json")).unwrap()).unwrap();
    let gets = server.gets();
    for s in manifest["shards"].as_array().unwrap() {
        let file = s["file"].as_str().unwrap();
        assert_eq!(
            gets.get(&format!("/ds/{file}")),
            Some(&1),
            "{file}: {gets:?}"
        );
    }
}

#[test]
fn s3_reads_match_local_reads() {
    let tmp = tempfile::tempdir().unwrap();
    let server = S3::start();
    let ds = server.root.path().join("bucket/sets/ds");
    pack(&ds, &["--format", "packed", "--compress", "zstd"]);
    let want = keys(&[ds.to_str().unwrap(), "--seed", "5"]);
    let out = bin()
        .args([
            "read",
            "s3://bucket/sets/ds/manifest.json",
            "--keys",
            "--seed",
            "5",
        ])
        .arg("--cache-dir")
        .arg(tmp.path().join("cache"))
        .envs(server.env())
        .output()
        .unwrap();
    let got: Vec<String> = ok(&out).lines().map(str::to_string).collect();
    assert_eq!(got, want);
}

#[test]
fn a_server_that_is_not_there_is_named_with_the_reason() {
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/ds/", closed.local_addr().unwrap());
    drop(closed);
    let tmp = tempfile::tempdir().unwrap();
    let out = bin()
        .args(["read", &url, "--cache-dir"])
        .arg(tmp.path().join("cache"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    // The URL, and the cause under the HTTP client's "error sending request".
    assert!(
        stderr.contains(&format!("{url}manifest.json")) && stderr.contains("Connection refused"),
        "{stderr}"
    );
}

#[test]
fn s3_without_credentials_says_which_variables_to_set() {
    let tmp = tempfile::tempdir().unwrap();
    let server = S3::start();
    let ds = server.root.path().join("bucket/sets/ds");
    pack(&ds, &[]);
    // No credentials: the client asks the metadata service, here a port nothing listens on.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let metadata = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    let mut cmd = bin();
    for (k, v) in server.env() {
        if !k.starts_with("AWS_ACCESS") && !k.starts_with("AWS_SECRET") {
            cmd.env(k, v);
        }
    }
    for k in [
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "AWS_WEB_IDENTITY_TOKEN_FILE",
        "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
        "AWS_CONTAINER_CREDENTIALS_FULL_URI",
        "AWS_SKIP_SIGNATURE",
    ] {
        cmd.env_remove(k);
    }
    let out = cmd
        .env("AWS_METADATA_ENDPOINT", &metadata)
        .args(["read", "s3://bucket/sets/ds/", "--cache-dir"])
        .arg(tmp.path().join("cache"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    // A dataset that cannot be opened is exit 2, as for a local one.
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("no AWS credentials were found")
            && stderr.contains("AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"),
        "{stderr}"
    );
}

#[test]
fn a_cache_limit_below_the_open_shards_fails_at_start_with_exit_1() {
    let tmp = tempfile::tempdir().unwrap();
    let www = tmp.path().join("www");
    pack(&www.join("ds"), &["--format", "packed"]);
    let server = Lighttpd::start(&www);
    let cache = tmp.path().join("cache");
    let t = std::time::Instant::now();
    let out = run(&[
        "read",
        &server.url("ds/"),
        "--cache-dir",
        cache.to_str().unwrap(),
        "--cache-limit",
        "10000",
    ]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("cache limit 10000 bytes is too small"),
        "{err}"
    );
    assert!(err.contains("--cache-limit"), "{err}");
    assert!(t.elapsed() < std::time::Duration::from_secs(20));
    // Nothing was fetched before the refusal.
    let gets = server.gets();
    assert!(
        gets.keys().all(|p| p.ends_with("manifest.json")),
        "{gets:?}"
    );
}

#[test]
fn a_shard_that_keeps_failing_fails_the_read_or_is_skipped_loudly() {
    let tmp = tempfile::tempdir().unwrap();
    let ds = tmp.path().join("ds");
    pack(&ds, &[]);
    let server = FaultServer::start(&ds, |path, _| {
        if path == "shard-000002.tar" {
            Fault::Error500
        } else {
            Fault::Ok
        }
    });
    let url = server.url("");
    let cache = tmp.path().join("cache");
    let common = [
        "--cache-dir",
        cache.to_str().unwrap(),
        "--fetch-attempts",
        "2",
        "--no-shuffle",
    ];
    let mut a = vec!["read", url.as_str(), "--keys"];
    a.extend_from_slice(&common);
    let out = run(&a);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(&server.url("shard-000002.tar")), "{err}");
    assert!(err.contains("500"), "{err}");

    a.push("--skip-corrupt");
    let out = run(&a);
    let got = ok(&out).lines().count();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(got, 45 - 6, "{err}");
    assert!(err.contains("6 samples LOST"), "{err}");
    assert!(err.contains("shard-000002.tar"), "{err}");
}

#[test]
fn cache_prefetch_ls_and_clear() {
    let tmp = tempfile::tempdir().unwrap();
    let www = tmp.path().join("www");
    pack(&www.join("ds"), &["--compress", "zstd"]);
    let server = Lighttpd::start(&www);
    let cache = tmp.path().join("cache");
    let c = cache.to_str().unwrap();
    let url = server.url("ds/");
    // Before the first fetch the folder does not exist: an empty listing, nothing made.
    let ls = ok(&run(&["cache", "ls", "--cache-dir", c, "--json"]));
    assert_eq!(ls.trim(), "[]");
    assert!(!cache.exists());
    let out = ok(&run(&["cache", "prefetch", &url, "--cache-dir", c]));
    assert!(
        out.contains("8 shards: 0 already cached, 8 fetched"),
        "{out}"
    );
    let again = run(&["cache", "prefetch", &url, "--cache-dir", c]);
    let out = ok(&again);
    assert!(out.contains("8 already cached, 0 fetched"), "{out}");
    assert!(!String::from_utf8_lossy(&again.stderr).contains("warning"));
    let prefetched = |extra: &[&str]| {
        let mut a = vec!["cache", "prefetch", &url, "--json"];
        a.extend(extra);
        let out = run(&a);
        let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        (out.status.code(), doc)
    };
    let (code, doc) = prefetched(&["--cache-dir", c]);
    assert_eq!(code, Some(0), "{doc}");
    let counts = |d: &serde_json::Value| {
        ["shards", "already_cached", "fetched"].map(|k| d[k].as_u64().unwrap())
    };
    assert_eq!(counts(&doc), [8, 8, 0], "{doc}");
    // Shards' bytes only: the manifest this command reads first is not counted as fetched.
    assert_eq!(doc["bytes_fetched"], 0, "{doc}");
    assert_eq!(
        (&doc["ok"], &doc["dataset"], &doc["failed"]),
        (&true.into(), &url.as_str().into(), &serde_json::json!([])),
        "{doc}"
    );
    // A limit that holds half the dataset: fetched, and said to stay cached in part only.
    let m = crate::common::manifest(&www.join("ds"));
    let whole: u64 = (m.shards.iter())
        .map(|s| s.uncompressed_bytes.unwrap_or(s.bytes))
        .sum();
    let half = (whole / 2).to_string();
    let small = tmp.path().join("small-cache");
    let s = small.to_str().unwrap();
    let part = run(&[
        "cache",
        "prefetch",
        &url,
        "--cache-dir",
        s,
        "--cache-limit",
        &half,
    ]);
    ok(&part);
    let err = String::from_utf8_lossy(&part.stderr);
    assert!(err.contains("only part of it stays cached"), "{err}");
    // A limit that holds fewer shards than the downloads run at once (4): fewer run, and every
    // shard is fetched (more failed for want of the room the others' downloads held).
    let largest = (m.shards.iter())
        .map(|s| s.uncompressed_bytes.unwrap_or(s.bytes))
        .max()
        .unwrap();
    let two = (largest * 2 + 1).to_string();
    let tight = tmp.path().join("tight-cache");
    let out = ok(&run(&[
        "cache",
        "prefetch",
        &url,
        "--cache-dir",
        tight.to_str().unwrap(),
        "--cache-limit",
        &two,
    ]));
    assert!(
        out.contains("8 fetched") && out.contains("0 failed"),
        "{out}"
    );
    let ls: serde_json::Value =
        serde_json::from_str(&ok(&run(&["cache", "ls", "--cache-dir", c, "--json"]))).unwrap();
    assert_eq!(ls[0]["source"], url.as_str());
    assert_eq!(ls[0]["shards"], 8);
    let out = ok(&run(&["cache", "clear", &url, "--cache-dir", c, "--json"]));
    let cleared: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        (&cleared["ok"], &cleared["removed"]),
        (&true.into(), &8.into()),
        "{out}"
    );
    assert_eq!(cleared["in_use"], serde_json::json!([]), "{out}");
    // A URL the cache does not hold (a typo) is an error, not "removed 0".
    let typo = format!("{url}x/");
    let out = run(&["cache", "clear", &typo, "--cache-dir", c]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("holds no dataset"));
    // Under --json, the same refusal is a document on stdout too.
    let out = run(&["cache", "clear", &typo, "--cache-dir", c, "--json"]);
    assert_eq!(out.status.code(), Some(2));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (&doc["ok"], &doc["error"]["kind"]),
        (&false.into(), &"usage".into())
    );
    assert!(doc["error"]["message"]
        .as_str()
        .unwrap()
        .contains("holds no dataset"));
    // Cleared, it is no longer listed.
    let ls = ok(&run(&["cache", "ls", "--cache-dir", c, "--json"]));
    assert_eq!(ls.trim(), "[]");
    let ls = ok(&run(&["cache", "ls", "--cache-dir", c]));
    assert!(ls.contains("0 dataset(s), 0 bytes"), "{ls}");

    // A folder that is not a cache is never cleared.
    let other = tmp.path().join("www/ds");
    let out = run(&["cache", "clear", "--cache-dir", other.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(other.join("manifest.json").exists());
    // Local datasets are never copied into the cache.
    let fresh = tmp.path().join("fresh-cache");
    ok(&run(&[
        "read",
        other.to_str().unwrap(),
        "--cache-dir",
        fresh.to_str().unwrap(),
    ]));
    assert!(!fresh.exists());
    let out = run(&[
        "cache",
        "prefetch",
        other.to_str().unwrap(),
        "--cache-dir",
        c,
        "--json",
    ]);
    assert_eq!(out.status.code(), Some(2));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        doc["error"]["message"]
            .as_str()
            .unwrap()
            .contains("is local"),
        "{doc}"
    );
    // So are the argument errors clap finds (a missing URL, a value out of range).
    for (args, says) in [
        (&["cache", "prefetch", "--json"][..], "not provided: <URL>"),
        (
            &["verify", &url, "--json", "--fetch-concurrency", "0"],
            "invalid value '0'",
        ),
    ] {
        let out = run(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(doc["error"]["kind"], "usage", "{args:?}: {doc}");
        let message = doc["error"]["message"].as_str().unwrap();
        assert!(message.contains(says), "{args:?}: {doc}");
        assert!(!String::from_utf8_lossy(&out.stderr).is_empty(), "{args:?}");
    }

    // A shard the server no longer has: the others are fetched, it is named with why, exit 1.
    std::fs::remove_file(other.join("shard-000002.tar.zst")).unwrap();
    let lost = tmp.path().join("lost-cache");
    let (code, doc) = prefetched(&[
        "--cache-dir",
        lost.to_str().unwrap(),
        "--fetch-attempts",
        "1",
    ]);
    assert_eq!(code, Some(1), "{doc}");
    assert_eq!(counts(&doc), [8, 0, 7], "{doc}");
    assert_eq!(doc["ok"], false, "{doc}");
    let failed = doc["failed"].as_array().unwrap();
    assert_eq!(failed.len(), 1, "{doc}");
    assert_eq!(failed[0]["shard"], "shard-000002.tar.zst", "{doc}");
    assert!(!failed[0]["message"].as_str().unwrap().is_empty(), "{doc}");
}

#[test]
fn verify_checks_a_remote_dataset_through_the_cache() {
    let tmp = tempfile::tempdir().unwrap();
    let www = tmp.path().join("www");
    pack(&www.join("ds"), &["--compress", "zstd"]);
    let server = Lighttpd::start(&www);
    let cache = tmp.path().join("cache");
    let c = cache.to_str().unwrap();
    let url = server.url("ds/");
    let out = run(&["verify", &url, "--cache-dir", c, "--json", "--decode"]);
    let doc: serde_json::Value = serde_json::from_str(&ok(&out)).unwrap();
    assert_eq!(doc["ok"], true, "{doc}");
    assert_eq!(doc["samples"], 45);
    assert_eq!(doc["dataset"], format!("{url}manifest.json"));
    assert!(doc["images_decoded"].as_u64().unwrap() >= 45, "{doc}");
    // A cache folder named relative to the working directory serves as well.
    let out = bin()
        .current_dir(tmp.path())
        .args(["verify", &url, "--cache-dir", "cache"])
        .output()
        .unwrap();
    ok(&out);
    // Again with the cache warm and limited to what the dataset takes there: the shards are
    // checked at the server again without needing room beside the cached copies.
    let m: serde_json::Value =
        serde_json::from_slice(&std::fs::read(www.join("ds/manifest.json")).unwrap()).unwrap();
    let cached: u64 = m["shards"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["uncompressed_bytes"].as_u64().unwrap())
        .sum();
    let limit = cached.to_string();
    let out = run(&["verify", &url, "--cache-dir", c, "--cache-limit", &limit]);
    ok(&out);
    let whole = cached;

    // A shard damaged on the server is caught on the way in and named.
    let shard = www.join("ds/shard-000003.tar.zst");
    let good = std::fs::read(&shard).unwrap();
    let mut bytes = good.clone();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 1;
    std::fs::write(&shard, bytes).unwrap();
    // So is it through a cache still holding the good copy: verify checks the server's.
    let fresh = tmp.path().join("cache2");
    for cache_dir in [fresh.as_path(), cache.as_path()] {
        let out = run(&[
            "verify",
            &url,
            "--cache-dir",
            cache_dir.to_str().unwrap(),
            "--fetch-attempts",
            "1",
            "--json",
        ]);
        assert_eq!(out.status.code(), Some(1), "{cache_dir:?}");
        let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let problems = doc["problems"].as_array().unwrap();
        assert_eq!(problems.len(), 1, "{doc}");
        let p = &problems[0];
        assert_eq!(p["kind"], "fetch_failed", "{doc}");
        assert_eq!(p["shard"], "shard-000003.tar.zst", "{doc}");
        assert!(p["message"].as_str().unwrap().contains("checksum"), "{doc}");
    }
    // The good cached copy is left as it was, for readers that hold it.
    let cached: Vec<_> = std::fs::read_dir(&cache)
        .unwrap()
        .map(|d| d.unwrap().path().join("shards/shard-000003.tar"))
        .filter(|p| p.exists())
        .collect();
    assert_eq!(cached.len(), 1, "{cached:?}");
    // A limit too small for the shards read at once is refused before fetching, saying what
    // would do; reading fewer at once is advised only where more than one is.
    std::fs::write(&shard, &good).unwrap();
    let cold = tmp.path().join("cold");
    let cold = cold.to_str().unwrap();
    let tight = |extra: &[&str]| {
        let mut a = vec!["verify", &url, "--cache-dir", cold, "--cache-limit", "1000"];
        a.extend(extra);
        let out = run(&a);
        assert_eq!(out.status.code(), Some(1));
        let text = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(text.contains("too small"), "{text}");
        text
    };
    let text = tight(&[]);
    assert!(text.contains("read fewer at once"), "{text}");
    let one_by_one = ["--jobs", "1", "--fetch-concurrency", "1"];
    let text = tight(&one_by_one);
    assert!(!text.contains("fewer"), "{text}");
    let least = least_in(&text);
    // That limit holds one shard (with its .zst copy while it is decompressed), not the
    // dataset, and verifies it whole from a cold cache and again: shards are fetched and
    // checked one by one, older ones making room for newer.
    assert!(least.parse::<u64>().unwrap() < whole, "{least} {whole}");
    let limited = |cache_dir: &str| {
        let mut a = vec![
            "verify",
            &url,
            "--cache-dir",
            cache_dir,
            "--cache-limit",
            &least,
        ];
        a.extend(one_by_one);
        a.push("--json");
        run(&a)
    };
    for _ in 0..2 {
        let doc: serde_json::Value = serde_json::from_str(&ok(&limited(cold))).unwrap();
        assert_eq!(
            (doc["ok"].as_bool(), doc["samples"].as_u64()),
            (Some(true), Some(45))
        );
    }
    // A shard damaged on the server is found so too, and only that one.
    let mut bytes = good.clone();
    bytes[mid] ^= 1;
    std::fs::write(&shard, bytes).unwrap();
    let out = limited(cold);
    assert_eq!(out.status.code(), Some(1));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let problems: Vec<(&str, &str)> = (doc["problems"].as_array().unwrap().iter())
        .map(|p| (p["kind"].as_str().unwrap(), p["shard"].as_str().unwrap()))
        .collect();
    assert_eq!(
        problems,
        [("fetch_failed", "shard-000003.tar.zst")],
        "{doc}"
    );
}

#[test]
fn a_view_a_killed_verify_left_in_the_cache_is_removed_by_the_next() {
    let tmp = tempfile::tempdir().unwrap();
    let www = tmp.path().join("www");
    pack(&www.join("ds"), &[]);
    let server = Lighttpd::start(&www);
    let cache = tmp.path().join("cache");
    let c = cache.to_str().unwrap();
    let url = server.url("ds/");
    ok(&run(&["verify", &url, "--cache-dir", c]));
    let folder = (std::fs::read_dir(&cache).unwrap())
        .map(|e| e.unwrap().path())
        .find(|p| p.join("shards").is_dir())
        .unwrap();
    // A killed process's view (its lock free), a live one's (locked), one just being made.
    let killed = folder.join("view-killed");
    let live = folder.join("view-live");
    let young = folder.join("view-young");
    for v in [&killed, &live, &young] {
        std::fs::create_dir(v).unwrap();
        std::fs::write(v.join("manifest.json"), "{}").unwrap();
    }
    std::fs::write(killed.join(".lock"), "").unwrap();
    let held = std::fs::File::create(live.join(".lock")).unwrap();
    held.lock().unwrap();
    ok(&run(&["verify", &url, "--cache-dir", c]));
    let mut views: Vec<String> = (std::fs::read_dir(&folder).unwrap())
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("view-"))
        .collect();
    views.sort();
    assert_eq!(views, ["view-live", "view-young"]);
}

/// The byte count a "cache too small" message advises ("at least N").
fn least_in(text: &str) -> String {
    text.split("at least ")
        .nth(1)
        .and_then(|t| t.split(|c: char| !c.is_ascii_digit()).next())
        .unwrap_or_else(|| panic!("no advice in {text}"))
        .to_string()
}

#[test]
fn inspect_and_preview_read_a_remote_dataset_as_a_local_one() {
    let tmp = tempfile::tempdir().unwrap();
    let www = tmp.path().join("www");
    let local = www.join("ds");
    pack(&local, &["--compress", "zstd"]);
    let server = Lighttpd::start(&www);
    let url = server.url("ds/");
    let cache = tmp.path().join("cache");
    let c = cache.to_str().unwrap();
    let json = |out: &Output| -> serde_json::Value { serde_json::from_str(&ok(out)).unwrap() };

    // Inspect: the same figures as the local dataset's, the stored sizes and formats the
    // server's (the cache holds .zst shards decompressed), named by URL.
    let want = json(&run(&["inspect", local.to_str().unwrap(), "--json"]));
    let mut got = json(&run(&["inspect", &url, "--cache-dir", c, "--json"]));
    assert_eq!(got["target"], url.as_str());
    assert_eq!(got["manifest"], format!("{url}manifest.json"));
    assert!(got["formats"]["wds+zstd"].as_u64().unwrap() > 1, "{got}");
    for k in ["target", "manifest"] {
        got[k] = want[k].clone();
    }
    assert_eq!(got, want);
    // So under a limit that holds one shard at a time and not the dataset, from a cold cache.
    let cold = tmp.path().join("cold");
    let one_by_one = |limit: &str| {
        run(&[
            "inspect",
            &url,
            "--cache-dir",
            cold.to_str().unwrap(),
            "--cache-limit",
            limit,
            "--jobs",
            "1",
            "--fetch-concurrency",
            "1",
            "--json",
        ])
    };
    let refused = one_by_one("1000");
    assert_eq!(refused.status.code(), Some(1));
    let least = least_in(&String::from_utf8_lossy(&refused.stderr));
    let cached_total = want["uncompressed_bytes"].as_u64().unwrap();
    assert!(
        least.parse::<u64>().unwrap() < cached_total,
        "{least} {want}"
    );
    let mut got = json(&one_by_one(&least));
    for k in ["target", "manifest"] {
        got[k] = want[k].clone();
    }
    assert_eq!(got, want);

    // Preview: the same samples as the local sheet, fetching only the shards that hold them.
    let fresh = tmp.path().join("fresh");
    std::fs::create_dir(&fresh).unwrap();
    let c = fresh.to_str().unwrap();
    let sheet = |target: &str, png: &Path| {
        let mut a = vec![
            "preview",
            target,
            "-o",
            png.to_str().unwrap(),
            "-n",
            "2",
            "--json",
        ];
        a.extend(["--seed", "5", "--cache-dir", c]);
        json(&run(&a))
    };
    let want = sheet(local.to_str().unwrap(), &tmp.path().join("local.png"));
    let got = sheet(&url, &tmp.path().join("remote.png"));
    assert_eq!(got["items"], want["items"]);
    let shards: std::collections::BTreeSet<&str> = got["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["shard"].as_str().unwrap())
        .collect();
    assert!(shards.iter().all(|s| s.ends_with(".tar.zst")), "{shards:?}");
    let cached: Vec<PathBuf> = std::fs::read_dir(c)
        .unwrap()
        .map(|d| d.unwrap().path().join("shards"))
        .filter(|d| d.is_dir())
        .flat_map(|d| std::fs::read_dir(d).unwrap())
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(cached.len(), shards.len(), "{cached:?}");
    assert!(manifest_shards(&local) > shards.len());
    let png = std::fs::read(tmp.path().join("remote.png")).unwrap();
    assert!(png.starts_with(b"\x89PNG"));

    // Credentials in the URL are never shown, nor written into the cache.
    let secret = url.replace("http://", "http://alice:s3cret@");
    let creds = tmp.path().join("creds");
    let cc = creds.to_str().unwrap();
    for cmd in [&["inspect", "--json"][..], &["verify", "--json"]] {
        let out = run(&[cmd[0], &secret, "--cache-dir", cc, cmd[1]]);
        let text = ok(&out) + &String::from_utf8_lossy(&out.stderr);
        assert!(!text.contains("s3cret"), "{text}");
        assert!(text.contains("127.0.0.1"), "{text}");
    }
    let mut on_disk = String::new();
    for d in std::fs::read_dir(&creds).unwrap() {
        let d = d.unwrap().path();
        on_disk.push_str(&d.display().to_string());
        on_disk.push_str(&std::fs::read_to_string(d.join("source")).unwrap_or_default());
    }
    assert!(
        on_disk.contains("127.0.0.1") && !on_disk.contains("s3cret"),
        "{on_disk}"
    );

    // An errors.jsonl over the size verify fetches (a sparse file: no disk): inspect and
    // preview do not read it; verify reports it as a problem of the dataset.
    let report = local.join("errors.jsonl");
    let kept = std::fs::read(&report).unwrap();
    std::fs::File::options()
        .write(true)
        .open(&report)
        .unwrap()
        .set_len(65 << 20)
        .unwrap();
    ok(&run(&["inspect", &url, "--cache-dir", c]));
    let png = tmp.path().join("again.png");
    ok(&run(&[
        "preview",
        &url,
        "--cache-dir",
        c,
        "-o",
        png.to_str().unwrap(),
    ]));
    let out = run(&["verify", &url, "--cache-dir", c, "--json"]);
    std::fs::write(&report, kept).unwrap();
    assert_eq!(out.status.code(), Some(1));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let kinds: Vec<&str> = doc["problems"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["error_report"], "{doc}");

    // A picked shard damaged on the server: skipped, named as stored, with why.
    let png = tmp.path().join("damaged.png");
    let args = |c: &str| {
        let mut a = vec!["preview", &url, "-o", png.to_str().unwrap(), "-n", "8"];
        a.extend(["--json", "--cache-dir"]);
        a.push(c);
        a.into_iter().map(String::from).collect::<Vec<_>>()
    };
    let first: serde_json::Value = json(&bin().args(args(c)).output().unwrap());
    let victim = first["items"][0]["shard"].as_str().unwrap().to_string();
    let served = local.join(&victim);
    let kept = std::fs::read(&served).unwrap();
    let mut bad = kept.clone();
    let mid = bad.len() / 2;
    bad[mid] ^= 1;
    std::fs::write(&served, bad).unwrap();
    let cold = tmp.path().join("cold-preview");
    let out = bin().args(args(cold.to_str().unwrap())).output().unwrap();
    std::fs::write(&served, kept).unwrap();
    let skipped = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        skipped.contains(&format!("{victim}: could not be fetched whole")),
        "{skipped}"
    );

    // A URL with no dataset behind it cannot be opened: exit 2, as a missing folder.
    let gone = server.url("nothing/");
    assert_eq!(
        run(&["inspect", &gone, "--cache-dir", c]).status.code(),
        Some(2)
    );
}

fn manifest_shards(ds: &Path) -> usize {
    let m: serde_json::Value =
        serde_json::from_slice(&std::fs::read(ds.join("manifest.json")).unwrap()).unwrap();
    m["shards"].as_array().unwrap().len()
}
