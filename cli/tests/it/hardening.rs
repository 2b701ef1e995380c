//! Hardening end to end: credentials in URLs or the environment never reach messages, reports
//! or shards; a cache's lock file replaced by a link is never written through.

use crate::common::*;
use crate::remote::servers::{Lighttpd, S3};

/// Every file under `dir`, concatenated (shards, manifest, errors.jsonl, plan files).
fn all_bytes(dir: &std::path::Path) -> Vec<u8> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.extend(std::fs::read(&p).unwrap());
            }
        }
    }
    out
}

fn contains(hay: &[u8], needle: &str) -> bool {
    hay.windows(needle.len()).any(|w| w == needle.as_bytes())
}

#[test]
fn credentials_in_urls_and_the_environment_never_reach_messages_reports_or_shards() {
    let t = tempdir();
    let input = t.path().join("in");
    jpeg_folder(&input, 4, 40, 30);
    // A tar shard of the images, served over HTTP and asked for with user information.
    let wds = t.path().join("wds");
    pack(&input, &wds).args(["-q"]).ok();
    let server = Lighttpd::start(&wds);
    let url = server
        .url("shard-000000.tar")
        .replacen("http://", "http://ann:SECRETPW@", 1);
    let out = t.path().join("out");
    let r = pack(&url, &out).args(["--input-format", "wds"]).run();
    r.assert_ok();
    assert!(!r.stdout.contains("SECRETPW") && !r.stderr.contains("SECRETPW"));
    assert!(
        !contains(&all_bytes(&out), "SECRETPW"),
        "a secret reached the dataset"
    );
    // A partitioned pack: its plan stays in OUTPUT after the merge, with no secret in it
    // (the parts read the staged copy); planning again with the same URL matches the plan.
    let planned = t.path().join("planned");
    let plan = |extra: &[&str]| {
        Cmd::new(["plan"])
            .arg(&url)
            .arg(&planned)
            .args(["--input-format", "wds", "--shard-samples", "3"])
            .args(extra)
            .run()
    };
    plan(&[]).assert_ok();
    for part in ["0/2", "1/2"] {
        Cmd::new(["pack", "--plan"])
            .arg(&planned)
            .args(["--part", part])
            .ok();
    }
    Cmd::new(["merge"]).arg(&planned).ok();
    let all = all_bytes(&planned);
    assert!(!contains(&all, "SECRETPW"), "a secret reached the plan");
    assert!(contains(&all, "***@127.0.0.1"), "the plan names no input");
    let r = plan(&[]);
    assert!(r.stderr.contains("--overwrite"), "{}", r.stderr);
    // A presigned URL (a query): refused up front, its signature masked.
    let r = pack(
        "http://127.0.0.1:9/x.tar?X-Amz-Signature=SECRETSIG",
        t.path().join("o4"),
    )
    .run();
    r.assert_code(2);
    assert!(!r.stderr.contains("SECRETSIG"), "{}", r.stderr);
    assert!(r.stderr.contains("query or fragment"), "{}", r.stderr);
    // A URL that cannot be fetched: the error names it, masked.
    let r = pack("http://ann:SECRETPW@127.0.0.1:9/x.tar", t.path().join("o2")).run();
    assert_ne!(r.code, Some(0));
    assert!(!r.stderr.contains("SECRETPW"), "{}", r.stderr);
    assert!(r.stderr.contains("***@127.0.0.1"), "{}", r.stderr);

    // S3 with a wrong secret key: refused by the server, the key never printed.
    let s3 = S3::start();
    std::fs::create_dir_all(s3.root.path().join("bucket/d")).unwrap();
    std::fs::copy(
        wds.join("shard-000000.tar"),
        s3.root.path().join("bucket/d/s.tar"),
    )
    .unwrap();
    let cmd = pack("s3://bucket/d/s.tar", t.path().join("o3")).envs(s3.env());
    let r = cmd.env("AWS_SECRET_ACCESS_KEY", "SECRETENVKEY").run();
    assert_ne!(r.code, Some(0), "a wrong key was accepted");
    assert!(!r.stderr.contains("SECRETENVKEY"), "{}", r.stderr);
    assert!(!r.stdout.contains("SECRETENVKEY"));
}

#[test]
fn a_cache_lock_replaced_by_a_link_is_refused_not_written_through() {
    let dir = tempdir();
    let ds = dir.path().join("ds");
    pack(sample_data(), &ds)
        .args(["--resize", "crop:16x16", "-q"])
        .ok();
    let server = Lighttpd::start(&ds);
    let url = server.url("");
    let cache = dir.path().join("cache");
    let prefetch = || {
        Cmd::new(["cache", "prefetch", &url, "--cache-limit", "10MB"])
            .arg("--cache-dir")
            .arg(&cache)
            .run()
    };
    prefetch().assert_code(0);
    // The eviction lock holds the byte count, written under it: a link planted in its place
    // (another process of the same user) must not make the cache write the file it points to.
    let victim = dir.path().join("victim.txt");
    std::fs::write(&victim, b"precious").unwrap();
    let lock = cache.join("evict.lock");
    std::fs::remove_file(&lock).unwrap();
    std::os::unix::fs::symlink(&victim, &lock).unwrap();
    // What was cached goes too, so the next prefetch fetches (and counts) again.
    for e in std::fs::read_dir(&cache).unwrap().flatten() {
        if e.path().is_dir() {
            std::fs::remove_dir_all(e.path()).unwrap();
        }
    }
    let r = prefetch();
    assert_ne!(r.code, Some(0), "{}", r.stderr);
    assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
}

/// Images deeper than the folder walk goes (64 levels below a class folder) are reported, not
/// dropped without a word.
#[test]
fn a_folder_too_deep_to_search_is_a_failed_input() {
    let t = crate::common::tempdir();
    let mut deep = t.path().join("in/c");
    crate::common::jpeg_folder(&t.path().join("in"), 1, 24, 16);
    for _ in 0..70 {
        deep.push("x");
    }
    crate::common::write_file(
        deep.join("a.jpg"),
        crate::common::jpeg(&crate::common::pattern(24, 16, 5)),
    );
    let out = t.path().join("out");
    crate::common::pack(t.path().join("in"), &out)
        .args(["-q"])
        .ok();
    let m = crate::common::manifest(&out);
    assert_eq!((m.inputs.packed, m.inputs.failed), (1, 1));
    let errs = crate::common::errors(&out);
    assert!(errs[0].message.contains("levels below"), "{errs:?}");
}

/// An S3 endpoint that is no URL (a scheme forgotten) is named as such, where the S3 client
/// would panic at its first request; a pack of such an input leaves no output folder behind.
#[test]
fn an_s3_endpoint_that_is_no_url_is_named() {
    let t = tempdir();
    let out = t.path().join("out");
    for endpoint in [
        "127.0.0.1:9000",
        "",
        "notaurl",
        "http:///x",
        " http://127.0.0.1:9",
        "http://127.0.0.1:9?x=1",
    ] {
        let env = [
            ("AWS_ENDPOINT", endpoint),
            ("AWS_ACCESS_KEY_ID", "a"),
            ("AWS_SECRET_ACCESS_KEY", "b"),
        ];
        for r in [
            Cmd::new(["inspect", "s3://bucket/ds/"]).envs(env).run(),
            pack("s3://bucket/ds/x.tar", &out).envs(env).run(),
        ] {
            let err = &r.assert_code(2).stderr;
            assert!(
                err.contains("is no http(s):// URL") && !err.contains("panicked"),
                "{err}"
            );
            assert!(!out.exists());
        }
    }
}
