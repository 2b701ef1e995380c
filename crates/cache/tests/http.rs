//! The cache against real HTTP servers on loopback: lighttpd for the normal path, and a
//! fault-injecting server for 500s, stalls, truncated bodies and ignored ranges.

mod common;
mod fixture;

use common::{Fault, FaultServer, Lighttpd};
use fixture::{du, make_dataset};
use shardtool_cache::{
    CacheError, CacheOptions, FetchPolicy, Location, RemoteDataset, RemoteFolder,
};
use shardtool_core::Checksum;
use std::time::Duration;

fn open(url: &str, options: CacheOptions) -> Result<RemoteDataset, CacheError> {
    match Location::parse(url)? {
        Location::Remote(r) => RemoteDataset::open(r, options),
        Location::Local(p) => panic!("{url} parsed as local {}", p.display()),
    }
}

fn options(dir: &std::path::Path) -> CacheOptions {
    CacheOptions {
        dir: dir.to_path_buf(),
        limit: None,
        policy: FetchPolicy {
            attempts: 4,
            backoff: Duration::from_millis(20),
            max_backoff: Duration::from_millis(100),
            stall_timeout: Duration::from_millis(700),
            connect_timeout: Duration::from_secs(2),
            stop: None,
        },
        concurrency: 0,
        ahead: 2,
    }
}

#[test]
fn fetches_checks_decompresses_and_then_hits() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("www/ds");
    let shards = make_dataset(&data, &[300_000, 200_000, 150_000], &[1]);
    let server = Lighttpd::start(&tmp.path().join("www"));
    let cache = tmp.path().join("cache");
    let ds = open(&server.url("ds/"), options(&cache)).unwrap();
    assert_eq!(ds.specs().len(), 3);
    for (i, want) in shards.iter().enumerate() {
        let lease = ds.acquire(i).unwrap();
        let got = std::fs::read(lease.path()).unwrap();
        assert_eq!(Checksum::of(&got), Checksum::of(want), "shard {i}");
        // The .zst shard is stored decompressed, under its plain name.
        assert!(!lease.path().to_string_lossy().ends_with(".zst"));
    }
    let m = ds.metrics();
    assert_eq!((m.misses, m.hits, m.fetches), (3, 0, 3));
    let on_server: u64 = ds.specs().iter().map(|s| s.bytes).sum();
    assert!(m.bytes_fetched >= on_server, "{m:?}");
    drop(ds);

    // A second open (another process, another epoch) fetches nothing but the manifest.
    let ds = open(&server.url("ds/manifest.json"), options(&cache)).unwrap();
    for i in 0..3 {
        ds.acquire(i).unwrap();
    }
    let m = ds.metrics();
    assert_eq!((m.misses, m.hits), (0, 3));
    let gets = server.gets();
    for s in ds.specs() {
        assert_eq!(gets.get(&format!("/ds/{}", s.file)), Some(&1), "{gets:?}");
    }
}

#[test]
fn a_damaged_cached_file_is_fetched_again_never_served() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("www/ds");
    let shards = make_dataset(&data, &[100_000, 80_000], &[]);
    let server = Lighttpd::start(&tmp.path().join("www"));
    let cache = tmp.path().join("cache");
    let ds = open(&server.url("ds"), options(&cache)).unwrap();
    let path0 = ds.acquire(0).unwrap().path().to_path_buf();
    let path1 = ds.acquire(1).unwrap().path().to_path_buf();
    // Flip one byte in place (same size) and truncate the other.
    let mut bytes = std::fs::read(&path0).unwrap();
    bytes[5000] ^= 0x40;
    std::fs::write(&path0, &bytes).unwrap();
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(&path1)
        .unwrap();
    f.set_len(1000).unwrap();
    drop(f);
    for (i, want) in shards.iter().enumerate() {
        let lease = ds.acquire(i).unwrap();
        assert_eq!(std::fs::read(lease.path()).unwrap(), *want, "shard {i}");
    }
    let m = ds.metrics();
    assert_eq!(m.repaired, 2, "{m:?}");
    assert_eq!(m.misses, 4);
}

#[test]
fn server_errors_are_retried_with_backoff() {
    let tmp = tempfile::tempdir().unwrap();
    let shards = make_dataset(tmp.path(), &[64_000], &[]);
    // Two 500s on the shard, then success.
    let server = FaultServer::start(tmp.path(), |path, n| {
        if path.ends_with(".tar") && n <= 2 {
            Fault::Error500
        } else {
            Fault::Ok
        }
    });
    let ds = open(&server.url(""), options(&tmp.path().join("cache"))).unwrap();
    let lease = ds.acquire(0).unwrap();
    assert_eq!(std::fs::read(lease.path()).unwrap(), shards[0]);
    let m = ds.metrics();
    assert_eq!(m.retries, 2, "{m:?}");
    let gets = server
        .requests()
        .iter()
        .filter(|r| r.method == "GET" && r.path.ends_with(".tar"))
        .count();
    assert_eq!(gets, 3);
}

#[test]
fn a_truncated_body_resumes_with_a_range_request() {
    let tmp = tempfile::tempdir().unwrap();
    let shards = make_dataset(tmp.path(), &[500_000], &[]);
    let server = FaultServer::start(tmp.path(), |path, n| {
        if path.ends_with(".tar") && n == 1 {
            Fault::Truncate(200_000)
        } else {
            Fault::Ok
        }
    });
    let ds = open(&server.url(""), options(&tmp.path().join("cache"))).unwrap();
    let lease = ds.acquire(0).unwrap();
    assert_eq!(std::fs::read(lease.path()).unwrap(), shards[0]);
    let tar: Vec<_> = server
        .requests()
        .into_iter()
        .filter(|r| r.path.ends_with(".tar"))
        .collect();
    assert_eq!(tar.len(), 2, "{tar:?}");
    assert_eq!(tar[0].range_start, None);
    // Resumed from where the body broke off (the client may have received a little less).
    let resumed = tar[1].range_start.expect("the retry asks for a range");
    assert!(resumed > 0 && resumed <= 200_000, "{resumed}");
    let m = ds.metrics();
    assert!(m.bytes_fetched < 500_000 + 200_000, "{m:?}");
}

/// A server that fails a resuming request for a moment (restarting: 500, or no connection)
/// still has the bytes already received kept: the next try resumes after them.
#[test]
fn a_resume_that_fails_for_a_moment_keeps_what_arrived() {
    let tmp = tempfile::tempdir().unwrap();
    let shards = make_dataset(tmp.path(), &[500_000], &[]);
    let server = FaultServer::start(tmp.path(), |path, n| match (path.ends_with(".tar"), n) {
        (true, 1) => Fault::Truncate(200_000),
        (true, 2) => Fault::Error500,
        _ => Fault::Ok,
    });
    let ds = open(&server.url(""), options(&tmp.path().join("cache"))).unwrap();
    let lease = ds.acquire(0).unwrap();
    assert_eq!(std::fs::read(lease.path()).unwrap(), shards[0]);
    let tar: Vec<_> = (server.requests().into_iter())
        .filter(|r| r.path.ends_with(".tar"))
        .collect();
    assert_eq!(tar.len(), 3, "{tar:?}");
    assert_eq!(tar[1].range_start, tar[2].range_start, "{tar:?}");
    assert!(tar[2].range_start.is_some_and(|r| r > 0), "{tar:?}");
}

/// An input replaced by another of the same size between a broken-off download and its resume
/// (nothing else would catch the splice: inputs have no checksum) is fetched again whole: the
/// resume asks for the version it began (`If-Match`), and a server that ignores that and sends
/// the other version's tag is asked again from the start.
#[test]
fn an_input_replaced_between_attempts_is_fetched_again_whole() {
    for second in [Fault::Ok, Fault::IgnoreIfMatch] {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("in");
        std::fs::create_dir_all(&dir).unwrap();
        let old: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
        let new: Vec<u8> = old.iter().map(|b| b ^ 0x5a).collect();
        std::fs::write(dir.join("a.tar"), &old).unwrap();
        let (target, replacement) = (dir.join("a.tar"), new.clone());
        let server = FaultServer::start(&dir, move |path, n| match (path == "a.tar", n) {
            (true, 1) => Fault::Truncate(100_000),
            (true, 2) => {
                std::fs::write(&target, &replacement).unwrap();
                second
            }
            _ => Fault::Ok,
        });
        let policy = options(tmp.path()).policy;
        let (folder, _) = RemoteFolder::connect(&server.url(""), policy).unwrap();
        let out = tmp.path().join("fetched");
        let mut file = std::fs::File::options()
            .create_new(true)
            .read(true)
            .write(true)
            .open(&out)
            .unwrap();
        let (size, _) = folder.fetch("a.tar", 1 << 30, &mut file).unwrap();
        assert_eq!(size, 300_000);
        assert!(
            std::fs::read(&out).unwrap() == new,
            "{second:?}: two versions spliced"
        );
        let gets: Vec<_> = (server.requests().into_iter())
            .filter(|r| r.method == "GET" && r.path == "a.tar")
            .collect();
        assert_eq!(gets.len(), 3, "{gets:?}");
        assert!(
            gets[1].range_start.is_some() && gets[1].if_match.is_some(),
            "{gets:?}"
        );
        assert_eq!(
            (gets[2].range_start, &gets[2].if_match),
            (None, &None),
            "{gets:?}"
        );
    }
}

/// Fetches a 300 kB shard whose first GET breaks off after 100 kB and whose later ones get
/// `then`, checks its bytes and returns the requests for it.
fn broken_off_then(then: Fault) -> Vec<common::Seen> {
    let tmp = tempfile::tempdir().unwrap();
    let shards = make_dataset(tmp.path(), &[300_000], &[]);
    let server = FaultServer::start(tmp.path(), move |path, n| {
        match (path.ends_with(".tar"), n) {
            (true, 1) => Fault::Truncate(100_000),
            (true, _) => then,
            _ => Fault::Ok,
        }
    });
    let ds = open(&server.url(""), options(&tmp.path().join("cache"))).unwrap();
    let lease = ds.acquire(0).unwrap();
    assert_eq!(std::fs::read(lease.path()).unwrap(), shards[0]);
    (server.requests().into_iter())
        .filter(|r| r.path.ends_with(".tar"))
        .collect()
}

/// A shard (its checksum known, which catches any splice) resumed from a replica that tags the
/// same bytes otherwise is resumed, not fetched again from the start.
#[test]
fn a_shard_resumed_from_a_replica_with_another_tag_is_not_fetched_again() {
    let tar = broken_off_then(Fault::OtherTag);
    assert_eq!(tar.len(), 2, "{tar:?}");
    assert!(
        tar[1].range_start.is_some_and(|r| r > 0) && tar[1].if_match.is_none(),
        "{tar:?}"
    );
}

#[test]
fn a_server_ignoring_ranges_makes_the_download_start_over() {
    let tar = broken_off_then(Fault::IgnoreRange);
    assert_eq!(tar.last().unwrap().fault, Fault::IgnoreRange, "{tar:?}");
}

#[test]
fn a_stalled_body_times_out_and_is_retried() {
    let tmp = tempfile::tempdir().unwrap();
    let shards = make_dataset(tmp.path(), &[200_000], &[]);
    let server = FaultServer::start(tmp.path(), |path, n| {
        if path.ends_with(".tar") && n == 1 {
            Fault::Stall(Duration::from_secs(5))
        } else {
            Fault::Ok
        }
    });
    let ds = open(&server.url(""), options(&tmp.path().join("cache"))).unwrap();
    let t = std::time::Instant::now();
    let lease = ds.acquire(0).unwrap();
    assert_eq!(std::fs::read(lease.path()).unwrap(), shards[0]);
    // The 700 ms stall timeout cut the 5 s stall short.
    assert!(t.elapsed() < Duration::from_secs(4), "{:?}", t.elapsed());
    assert_eq!(ds.metrics().retries, 1);
}

#[test]
fn a_shard_that_keeps_failing_names_its_url_and_last_error() {
    let tmp = tempfile::tempdir().unwrap();
    make_dataset(tmp.path(), &[10_000, 10_000], &[]);
    std::fs::remove_file(tmp.path().join("shard-000001.tar")).unwrap();
    let server = FaultServer::start(tmp.path(), |path, _| {
        if path == "shard-000000.tar" {
            Fault::Error500
        } else {
            Fault::Ok
        }
    });
    let cache = tmp.path().join("cache");
    let ds = open(&server.url(""), options(&cache)).unwrap();
    let e = ds.acquire(0).unwrap_err();
    let text = e.to_string();
    assert!(matches!(e, CacheError::Fetch { attempts: 4, .. }), "{text}");
    assert!(text.contains(&server.url("shard-000000.tar")), "{text}");
    assert!(text.contains("500"), "{text}");
    // A missing object is permanent: one attempt, no retries.
    let e = ds.acquire(1).unwrap_err();
    assert!(matches!(e, CacheError::Fetch { attempts: 1, .. }), "{e}");
    // Nothing partial is left behind to be served later.
    assert_eq!(du(&ds.cache_dir().join("shards")), 0);
    assert_eq!(du(&ds.cache_dir().join("tmp")), 0);
}

#[test]
fn a_fetch_that_failed_otherwise_after_a_stall_names_the_stall_too() {
    let tmp = tempfile::tempdir().unwrap();
    make_dataset(tmp.path(), &[200_000], &[]);
    let server = FaultServer::start(tmp.path(), |path, n| match (path.ends_with(".tar"), n) {
        (true, 1) => Fault::Stall(Duration::from_secs(5)),
        (true, _) => Fault::Error500,
        _ => Fault::Ok,
    });
    let ds = open(&server.url(""), options(&tmp.path().join("cache"))).unwrap();
    let text = ds.acquire(0).unwrap_err().to_string();
    assert!(text.contains("500") && text.contains("(first: "), "{text}");
    assert!(text.contains("stalled"), "{text}");
}

/// A fetch stopped by the policy's flag while the server holds its answer, or while it waits
/// out a backoff: it ends within moments, not when the attempts run out.
#[test]
fn a_stop_flag_ends_a_stalled_fetch_and_a_backoff_at_once() {
    use std::sync::atomic::{AtomicBool, Ordering};
    for fault in [Fault::Stall(Duration::from_secs(20)), Fault::Error500] {
        let tmp = tempfile::tempdir().unwrap();
        make_dataset(tmp.path(), &[200_000], &[]);
        let server = FaultServer::start(tmp.path(), move |path, _| match path.ends_with(".tar") {
            true => fault,
            false => Fault::Ok,
        });
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let mut options = options(&tmp.path().join("cache"));
        options.policy.stall_timeout = Duration::from_secs(30);
        options.policy.backoff = Duration::from_secs(20);
        options.policy.max_backoff = Duration::from_secs(20);
        options.policy.stop = Some(stop.clone());
        let ds = open(&server.url(""), options).unwrap();
        let setter = stop.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(400));
            setter.store(true, Ordering::SeqCst);
        });
        let t = std::time::Instant::now();
        let e = ds.acquire(0).unwrap_err().to_string();
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "{fault:?}: {:?}",
            t.elapsed()
        );
        assert!(e.contains("stopped before it ended"), "{fault:?}: {e}");
        assert_eq!(du(&ds.cache_dir().join("tmp")), 0, "{fault:?}");
    }
}

/// A reader waiting for the lock another process holds on a shard (its fetch, or readers of a
/// copy this one cannot use) ends as soon as the reader is stopped, not after the holder's
/// stall of ten minutes: a finished process no longer waits on its prefetcher at exit.
#[test]
fn a_wait_for_another_process_ends_when_the_reader_is_stopped() {
    let tmp = tempfile::tempdir().unwrap();
    make_dataset(&tmp.path().join("www/ds"), &[100_000], &[]);
    let server = Lighttpd::start(&tmp.path().join("www"));
    let ds = open(&server.url("ds/"), options(&tmp.path().join("cache"))).unwrap();
    let name = ds.specs()[0].cached_name().to_string();
    let holder = std::fs::File::create(ds.cache_dir().join(format!("locks/{name}.lock"))).unwrap();
    holder.lock().unwrap();
    let t = std::time::Instant::now();
    let e = std::thread::scope(|s| {
        let waiter = s.spawn(|| ds.acquire(0).map(drop));
        std::thread::sleep(Duration::from_millis(400));
        ds.stop();
        waiter.join().unwrap()
    })
    .unwrap_err()
    .to_string();
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    assert!(e.contains("stopped before it ended"), "{e}");
}

/// A reader that found a shard missing and waits to fetch it while other processes hold it
/// shared stops waiting once one of them has published it, and reads that copy: before, it
/// waited for every reader of the shard to let go, or for the holder's stall of ten minutes,
/// and processes sharing a cache could wait on each other that long. So does `verify`'s check
/// at the source, which hashes every cached copy.
#[test]
fn a_fetch_waiting_behind_readers_reads_the_copy_another_process_published() {
    let tmp = tempfile::tempdir().unwrap();
    make_dataset(&tmp.path().join("www/ds"), &[100_000], &[]);
    let server = Lighttpd::start(&tmp.path().join("www"));
    for at_source in [false, true] {
        waits_behind_readers_until_published(
            &tmp.path().join(format!("{at_source}")),
            &server.url("ds/"),
            at_source,
        );
    }
}

fn waits_behind_readers_until_published(dir: &std::path::Path, url: &str, at_source: bool) {
    let ds = open(url, options(&dir.join("cache"))).unwrap();
    let name = ds.specs()[0].cached_name().to_string();
    // A reader of another process holds the shard's lock shared (while the copy is missing
    // here, the waiter goes for the exclusive lock to fetch it).
    let reader = std::fs::File::create(ds.cache_dir().join(format!("locks/{name}.lock"))).unwrap();
    reader.lock_shared().unwrap();
    // The copy another process publishes: fetched into a cache on the same file system and
    // moved into place with its stamp, as a publish renames it.
    let other = open(url, options(&dir.join("other"))).unwrap();
    drop(other.acquire(0).unwrap());
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::scope(|s| {
        s.spawn(|| {
            let got = match at_source {
                false => ds.acquire(0),
                true => ds.acquire_once(0, true),
            };
            tx.send(got.map(|l| l.path().to_path_buf())).unwrap()
        });
        std::thread::sleep(Duration::from_millis(500));
        for (from, to) in [("shards", name.clone()), ("meta", format!("{name}.json"))] {
            std::fs::rename(
                other.cache_dir().join(from).join(&to),
                ds.cache_dir().join(from).join(&to),
            )
            .unwrap();
        }
        let got = rx.recv_timeout(Duration::from_secs(10));
        // Let a waiter of a regression go, so the test fails rather than hangs.
        reader.unlock().unwrap();
        let path = got
            .unwrap_or_else(|_| panic!("still waiting behind the readers (at source: {at_source})"))
            .unwrap();
        assert_eq!(path, ds.cache_dir().join("shards").join(&name));
    });
    let m = ds.metrics();
    assert_eq!((m.misses, m.hits), (0, 1), "at source {at_source}: {m:?}");
}

#[test]
fn eviction_keeps_the_cache_under_its_limit_and_spares_shards_in_use() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("www/ds");
    make_dataset(&data, &[100_000; 6], &[]);
    let server = Lighttpd::start(&tmp.path().join("www"));
    let cache = tmp.path().join("cache");
    let mut o = options(&cache);
    o.limit = Some(250_000);
    let ds = open(&server.url("ds/"), o).unwrap();
    ds.check_capacity(200_000).unwrap();
    // Shard 0 stays in use throughout.
    let held = ds.acquire(0).unwrap();
    for i in 1..6 {
        let lease = ds.acquire(i).unwrap();
        drop(lease);
        let used = du(&ds.cache_dir().join("shards"));
        assert!(used <= 250_000, "after shard {i}: {used} bytes cached");
        assert!(held.path().exists(), "the shard in use was evicted");
    }
    assert_eq!(ds.metrics().evictions, 4);
    // With shards 0 and 5 both held, a third cannot fit: a clear error, not a hang.
    let _five = ds.acquire(5).unwrap();
    let e = ds.acquire(1).unwrap_err();
    assert!(
        matches!(e, CacheError::TooSmall { limit: 250_000, .. }),
        "{e}"
    );
    assert!(e.to_string().contains("in use"), "{e}");
    drop(held);
}

#[test]
fn a_limit_below_the_open_window_is_refused_at_start() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("www/ds");
    make_dataset(&data, &[100_000; 4], &[]);
    let server = Lighttpd::start(&tmp.path().join("www"));
    let mut o = options(&tmp.path().join("cache"));
    o.limit = Some(150_000);
    let ds = open(&server.url("ds/"), o).unwrap();
    let e = ds.check_capacity(300_000).unwrap_err();
    let text = e.to_string();
    assert!(text.contains("150000") && text.contains("300000"), "{text}");
    // The largest shard alone must fit too.
    let mut o = options(&tmp.path().join("cache2"));
    o.limit = Some(50_000);
    let ds = open(&server.url("ds/"), o).unwrap();
    let text = ds.check_capacity(0).unwrap_err().to_string();
    // Fetching alone (`cache prefetch`), the reader's options are no advice.
    assert!(text.contains("the largest shard needs"), "{text}");
    assert!(!text.contains("shuffle buffer"), "{text}");
}

#[test]
fn the_prefetcher_fetches_ahead_in_plan_order() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("www/ds");
    make_dataset(&data, &[50_000; 8], &[]);
    let server = Lighttpd::start(&tmp.path().join("www"));
    let mut o = options(&tmp.path().join("cache"));
    o.concurrency = 2;
    o.ahead = 3;
    let ds = open(&server.url("ds/"), o).unwrap();
    ds.plan(vec![7, 6, 5, 4, 3, 2, 1, 0]);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while ds.metrics().misses < 3 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(300));
    // Three ahead of a reader that has not started, no more.
    let cached = |i: usize| {
        ds.cache_dir()
            .join("shards")
            .join(&ds.specs()[i].file)
            .exists()
    };
    assert_eq!((0..8).filter(|&i| cached(i)).count(), 3);
    assert!(cached(7) && cached(6) && cached(5));
    // Reading moves the window on.
    ds.acquire(7).unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !cached(4) && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(cached(4));
    // The shard read was the prefetcher's miss, and no hit besides: one count per shard.
    assert_eq!((ds.metrics().hits, ds.metrics().misses), (0, 4));
}

/// A reader right behind its prefetcher often waits for the prefetcher's fetch of the shard it
/// opens: that shard is the prefetcher's miss, never also the reader's hit (it was counted a
/// hit when the prefetcher marked it only after letting go of its lock).
#[test]
fn a_cold_read_racing_its_prefetcher_counts_each_shard_once() {
    let tmp = tempfile::tempdir().unwrap();
    make_dataset(&tmp.path().join("www/ds"), &[4_000; 60], &[]);
    let server = Lighttpd::start(&tmp.path().join("www"));
    for round in 0..6 {
        let mut o = options(&tmp.path().join(format!("cache{round}")));
        o.concurrency = 2;
        o.ahead = 4;
        let ds = open(&server.url("ds/"), o).unwrap();
        ds.plan((0..60).collect());
        for i in 0..60 {
            drop(ds.acquire(i).unwrap());
        }
        let m = ds.metrics();
        assert_eq!((m.hits, m.misses), (0, 60), "round {round}: {m:?}");
    }
}

/// A request that fails and then finds the object missing: missing (a part's done record not
/// written yet), not a 404 error after the retries, which failed packs after a server blip.
#[test]
fn an_object_found_missing_after_a_failed_attempt_is_missing() {
    let tmp = tempfile::tempdir().unwrap();
    let www = tmp.path().join("www");
    std::fs::create_dir_all(&www).unwrap();
    std::fs::write(www.join("here.json"), b"{}").unwrap();
    let server = FaultServer::start(&www, |_, n| match n {
        1 => Fault::Error500,
        _ => Fault::Ok,
    });
    let (folder, _) = RemoteFolder::connect(&server.url(""), options(tmp.path()).policy).unwrap();
    assert_eq!(folder.read("missing.json", 1 << 20).unwrap(), None);
    assert_eq!(
        folder.read("here.json", 1 << 20).unwrap(),
        Some(b"{}".to_vec())
    );
    assert_eq!(folder.head("missing.json").unwrap(), None);
    assert_eq!(folder.size("here.json").unwrap(), Some(2));
    // Each was asked twice: the failure, then the answer.
    let asked = |m: &str| server.requests().iter().filter(|s| s.method == m).count();
    assert_eq!(
        (asked("GET"), asked("HEAD")),
        (4, 4),
        "{:?}",
        server.requests()
    );
}

#[test]
fn a_foreign_non_empty_folder_is_never_used_as_a_cache() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("precious.txt"), b"keep me").unwrap();
    let e = shardtool_cache::CacheDir::open(tmp.path(), Some(1)).unwrap_err();
    assert!(matches!(e, CacheError::NotACache { .. }), "{e}");
    assert!(shardtool_cache::CacheDir::existing(tmp.path()).is_err());
    assert!(tmp.path().join("precious.txt").exists());
}

#[test]
fn a_webdav_folder_lists_whole_where_the_server_refuses_deep_listings() {
    // Stock lighttpd (and Apache) refuse PROPFIND of depth infinity: the folder is listed one
    // level at a time instead, to the same names.
    let root = tempfile::tempdir().unwrap();
    let files = ["a.tar", "sub/b.tar", "sub/deeper/c d.tar", "z/e.tar"];
    for (i, f) in files.iter().enumerate() {
        let path = root.path().join("data").join(f);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, vec![7u8; 100 + i]).unwrap();
    }
    let want: Vec<(String, u64)> = (files.iter().enumerate())
        .map(|(i, f)| (f.to_string(), 100 + i as u64))
        .collect();
    for server in [
        Lighttpd::start(root.path()),
        Lighttpd::start_stock(root.path()),
    ] {
        let policy = options(root.path()).policy;
        let (folder, _) = RemoteFolder::connect(&server.url("data/"), policy).unwrap();
        assert_eq!(folder.list().unwrap(), want);
        // Only the folder's own objects, in one listing of it.
        assert_eq!(folder.list_top().unwrap(), want[..1]);
        let (sub, _) = RemoteFolder::connect(&server.url("data/sub/"), Default::default()).unwrap();
        assert_eq!(sub.list_top().unwrap(), [("b.tar".to_string(), 101)]);
    }
}
