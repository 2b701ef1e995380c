//! The cache folder against hostile and unlucky surroundings: unmakeable or foreign folders,
//! racing openers, links, leftovers of dead processes, forked children holding locks.

use super::*;
use std::os::unix::fs::PermissionsExt;

#[test]
fn a_cache_folder_that_cannot_be_made_is_named_with_how_to_choose_another() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("home");
    fs::write(&file, b"a file where HOME's folder would be").unwrap();
    let e = CacheDir::open(file.join(".cache/shardtool"), None)
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("cannot use the cache folder "), "{e}");
    assert!(
        e.contains(".cache/shardtool") && e.contains("--cache-dir"),
        "{e}"
    );
}

#[test]
fn a_lock_is_released_though_a_forked_child_keeps_the_file_open() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("x.lock");
    for explicit in [false, true] {
        let f = open_lock(&path).unwrap();
        f.lock().unwrap();
        // What fork gives a child: another descriptor of the same open file.
        let child_copy = f.try_clone().unwrap();
        if explicit {
            drop(Locked::new(f));
        } else {
            drop(f);
        }
        let other = open_lock(&path).unwrap();
        assert_eq!(
            other.try_lock().is_ok(),
            explicit,
            "explicit unlock: {explicit}"
        );
        drop(other);
        drop(child_copy);
    }
}

#[test]
fn partial_downloads_go_when_no_fetch_holds_their_shard() {
    let dir = tempfile::tempdir().unwrap();
    let (tmp, locks) = (dir.path().join("tmp"), dir.path().join("locks"));
    fs::create_dir_all(&tmp).unwrap();
    fs::create_dir_all(&locks).unwrap();
    // A fetch of a.tar under way in a process whose PID this one cannot see (another container).
    let fetching = open_lock(&locks.join("a.tar.lock")).unwrap();
    fetching.lock().unwrap();
    let old = SystemTime::now() - std::time::Duration::from_secs(3600);
    let mine = format!("c.tar.download.{}.3.part", std::process::id());
    // (name, idle, gone)
    let files = [
        // Its shard locked: a live fetch, kept however old, whatever its PID.
        ("a.tar.download.4000000000.1.part", true, false),
        ("a.tar.zstd.1.2.part", true, false),
        // No fetch holds the shard: stale at once, whatever its PID says (PID 1 of a container
        // that ended, or this very process).
        ("b.tar.download.1.1.part", false, true),
        (mine.as_str(), false, true),
        // Not a download's name: by its PID and idle time, as before.
        ("x.download.4000000000.part", true, true),
        ("y.download.4000000000.part", false, false),
        ("notes.txt", true, false),
    ];
    for (name, idle, _) in &files {
        let f = File::create(tmp.join(name)).unwrap();
        if *idle {
            f.set_modified(old).unwrap();
        }
    }
    remove_stale_downloads(&tmp, std::time::Duration::from_secs(600));
    for (name, _, gone) in &files {
        assert_eq!(!tmp.join(name).exists(), *gone, "{name}");
    }
    // The fetch ends without removing its files (killed): they go at the next look.
    drop(fetching);
    remove_stale_downloads(&tmp, std::time::Duration::from_secs(600));
    assert!(!tmp.join("a.tar.download.4000000000.1.part").exists());
    assert!(!tmp.join("a.tar.zstd.1.2.part").exists());
}

#[test]
fn a_new_cache_folder_is_private_and_another_users_is_refused() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("cache");
    CacheDir::open(&root, None).unwrap();
    let mode = fs::metadata(&root).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o700, "mode {mode:o}");
    // Giving it away needs root; where the tests run unprivileged this half cannot be set up.
    if std::os::unix::fs::chown(&root, Some(4242), None).is_ok() {
        assert!(matches!(
            CacheDir::open(&root, None),
            Err(CacheError::NotOurs { owner: 4242, .. })
        ));
        assert!(matches!(
            CacheDir::existing(&root),
            Err(CacheError::NotOurs { .. })
        ));
    } else {
        eprintln!("not root: the foreign-owner half of this test was not set up");
    }
}

#[test]
fn processes_creating_one_cache_at_once_never_refuse_each_other() {
    // The window: one opener sees no tag, a racing one commits the tag and creates
    // `reserve`, then the first lists the folder. Many rounds make it likely to open.
    let t = tempfile::tempdir().unwrap();
    for round in 0..300 {
        let root = t.path().join(format!("cache-{round}"));
        let gate = std::sync::Barrier::new(4);
        std::thread::scope(|s| {
            let opened: Vec<_> = (0..4)
                .map(|_| {
                    s.spawn(|| {
                        gate.wait();
                        CacheDir::open(&root, None).map(|_| ())
                    })
                })
                .collect();
            for h in opened {
                if let Err(e) = h.join().unwrap() {
                    panic!("round {round}: {e}");
                }
            }
        });
        assert!(root.join(TAG).is_file());
    }
}

#[test]
fn clear_never_follows_links_out_of_the_folder() {
    let t = tempfile::tempdir().unwrap();
    let outside = t.path().join("precious");
    fs::create_dir_all(outside.join("shards")).unwrap();
    fs::write(outside.join("source"), "https://h/d/").unwrap();
    fs::write(outside.join("shards/a.tar"), b"keep me").unwrap();
    fs::write(t.path().join("file.tar"), b"keep me too").unwrap();
    let cache = CacheDir::open(t.path().join("cache"), None).unwrap();
    // A linked dataset folder, and a link among a real dataset's shards.
    std::os::unix::fs::symlink(&outside, cache.root().join("linked-0000")).unwrap();
    let d = cache.dataset_dir("https://h/real/").unwrap();
    std::os::unix::fs::symlink(t.path().join("file.tar"), d.join("shards/b.tar")).unwrap();
    fs::write(d.join("shards/own.tar"), b"ours").unwrap();
    let report = cache.clear(None).unwrap();
    assert_eq!(report.removed, 1, "only our own shard goes");
    assert!(!d.join("shards/own.tar").exists());
    assert_eq!(fs::read(outside.join("shards/a.tar")).unwrap(), b"keep me");
    assert_eq!(fs::read(t.path().join("file.tar")).unwrap(), b"keep me too");
}

#[test]
fn reservations_are_alive_while_locked_whatever_their_pid() {
    let t = tempfile::tempdir().unwrap();
    let cache = CacheDir::open(t.path().join("cache"), Some(1000)).unwrap();
    let reserve = cache.root().join("reserve");
    // Another container's process with this very PID (each one's PID 1): its own start time,
    // its reservation locked while it lives.
    let theirs = reserve.join(format!("{}.1-0", std::process::id()));
    fs::write(&theirs, "300").unwrap();
    let held = open_lock(&theirs).unwrap();
    held.lock().unwrap();
    // A dead process's, from a namespace whose PIDs /proc here does not show: not locked.
    let dead = reserve.join("4000000000.2-0");
    fs::write(&dead, "500").unwrap();
    // This process's own, as `reserve` makes it.
    let (mine, _) = cache.reserve(100).unwrap();
    assert_eq!(cache.reserved_bytes().unwrap(), (400, 300));
    assert!(!dead.exists() && theirs.exists());
    drop(held);
    drop(mine);
    assert_eq!(cache.reserved_bytes().unwrap(), (0, 0));
    assert!(!theirs.exists(), "gone once its process let it go");
}

#[test]
fn a_fifo_or_device_in_place_of_a_stamp_is_no_stamp_and_never_waited_on() {
    let t = tempfile::tempdir().unwrap();
    let p = CacheDir::shard_paths(t.path(), "a.tar");
    for d in [&p.data, &p.meta] {
        fs::create_dir_all(d.parent().unwrap()).unwrap();
    }
    fs::write(&p.data, b"shard bytes").unwrap();
    let sum = hash_file(&p.data).unwrap();
    for planted in ["fifo", "zero"] {
        let _ = fs::remove_file(&p.meta);
        match planted {
            "fifo" => assert!(std::process::Command::new("mkfifo")
                .arg(&p.meta)
                .status()
                .unwrap()
                .success()),
            _ => std::os::unix::fs::symlink("/dev/zero", &p.meta).unwrap(),
        }
        let (tx, rx) = std::sync::mpsc::channel();
        let paths = CacheDir::shard_paths(t.path(), "a.tar");
        std::thread::spawn(move || tx.send(CacheDir::is_whole(&paths, 11, sum).unwrap()));
        let whole = rx.recv_timeout(std::time::Duration::from_secs(20));
        assert_eq!(
            whole,
            Ok(true),
            "{planted}: hashed instead, and stamped afresh"
        );
        assert!(
            fs::symlink_metadata(&p.meta).unwrap().is_file(),
            "{planted}"
        );
    }
}
