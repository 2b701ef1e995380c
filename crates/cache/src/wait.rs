//! Waiting for a shard lock that another process holds: bounded by that process's progress
//! (its partial download growing), so a stopped or hung fetcher fails its waiters instead of
//! blocking them forever, and stale partial downloads are told apart by the same lock.

#[cfg(feature = "remote")]
use std::fs::{self, File};
#[cfg(feature = "remote")]
use std::path::Path;
#[cfg(feature = "remote")]
use std::time::{Duration, Instant, SystemTime};

/// The shard a partial download in `tmp/` belongs to: its files are named
/// `NAME.WHAT.PID.N.part` while the fetch holds the shard's lock exclusively.
pub(crate) fn part_shard(file: &str) -> Option<&str> {
    let mut it = file.rsplitn(5, '.');
    let (part, n, pid, what, name) = (it.next()?, it.next()?, it.next()?, it.next()?, it.next()?);
    let numeric = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    (part == "part" && numeric(n) && numeric(pid) && !what.is_empty() && !name.is_empty())
        .then_some(name)
}

#[cfg(feature = "remote")]
/// What the partial downloads of `shard` in `tmp` look like now: their names, sizes and
/// modification times, compared between polls to see a fetch moving.
fn progress(tmp: &Path, shard: &str) -> Vec<(String, u64, Option<SystemTime>)> {
    let mut seen: Vec<_> = fs::read_dir(tmp)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            (part_shard(&name) == Some(shard)).then(|| {
                let md = e.metadata().ok();
                let len = md.as_ref().map_or(0, |m| m.len());
                (name, len, md.and_then(|m| m.modified().ok()))
            })
        })
        .collect();
    seen.sort();
    seen
}

#[cfg(feature = "remote")]
/// Why a lock was not taken.
#[derive(Debug)]
pub(crate) enum NotTaken {
    /// Another process held it this long without its download moving.
    Stalled(Duration),
    /// The caller's `over` said the wait was no longer needed (stopped, or the shard appeared).
    Over,
}

#[cfg(feature = "remote")]
/// Takes `lock` (shared or exclusive) for shard `shard`, waiting while another process holds it
/// for as long as that process's partial downloads in `tmp` keep changing; fails once they have
/// not changed for `stall`, or as soon as `over` (asked four times a second) says so.
pub(crate) fn lock_while_moving(
    lock: &File,
    shared: bool,
    tmp: &Path,
    shard: &str,
    stall: Duration,
    over: &dyn Fn() -> bool,
) -> Result<(), NotTaken> {
    let take = || match shared {
        true => lock.try_lock_shared(),
        false => lock.try_lock(),
    };
    if take().is_ok() {
        return Ok(());
    }
    let started = Instant::now();
    let (mut last, mut moved, mut looked) = (progress(tmp, shard), started, started);
    // Polled often, so a reader waiting for a fetch of its own prefetcher starts within a few
    // milliseconds of its end; the download is looked at four times a second.
    let mut pause = Duration::from_millis(1);
    loop {
        std::thread::sleep(pause);
        pause = (pause * 2).min(POLL);
        if take().is_ok() {
            return Ok(());
        }
        if looked.elapsed() >= LOOK {
            if over() {
                return Err(NotTaken::Over);
            }
            looked = Instant::now();
            let now = progress(tmp, shard);
            if now != last {
                (last, moved) = (now, looked);
            } else if moved.elapsed() >= stall {
                return Err(NotTaken::Stalled(started.elapsed()));
            }
        }
    }
}

/// The longest pause between two tries of a held lock.
#[cfg(feature = "remote")]
const POLL: Duration = Duration::from_millis(20);

/// How often a held lock's download is looked at for progress.
#[cfg(feature = "remote")]
const LOOK: Duration = Duration::from_millis(250);

#[cfg(feature = "remote")]
/// The longest a healthy fetcher goes without writing to its download: waiting for cache room,
/// then every attempt connecting and stalling with the longest backoff before it, and the
/// flush and publish after; never under ten minutes.
pub(crate) fn holder_stall(policy: &crate::FetchPolicy) -> Duration {
    let attempt = (policy.connect_timeout)
        .saturating_add(policy.stall_timeout)
        .saturating_add(policy.max_backoff);
    crate::dir::ROOM_WAIT
        .saturating_add(attempt.saturating_mul(policy.attempts.max(1)))
        .saturating_add(Duration::from_secs(60))
        .max(Duration::from_secs(600))
}

#[cfg(feature = "remote")]
/// How long a reader waits for a cached shard of another version that other processes read.
pub(crate) const OTHER_VERSION_WAIT: Duration = Duration::from_secs(60);

#[cfg(feature = "remote")]
/// Takes `lock` exclusively within `wait`, or until `over` says the wait is no longer needed.
pub(crate) fn lock_within(
    lock: &File,
    wait: Duration,
    over: &dyn Fn() -> bool,
) -> Result<(), NotTaken> {
    let started = Instant::now();
    loop {
        if lock.try_lock().is_ok() {
            return Ok(());
        }
        if started.elapsed() >= wait {
            return Err(NotTaken::Stalled(started.elapsed()));
        }
        if over() {
            return Err(NotTaken::Over);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[cfg(feature = "remote")]
    use std::io::Write;

    #[test]
    fn partial_download_names_give_their_shard() {
        assert_eq!(part_shard("s.tar.download.12.3.part"), Some("s.tar"));
        assert_eq!(part_shard("a.b.c.tar.zstd.1.0.part"), Some("a.b.c.tar"));
        for other in [
            "s.tar.download.x.3.part",
            "s.tar.download.12.3.tmp",
            "download.12.3.part",
            "notes.txt",
            "",
        ] {
            assert_eq!(part_shard(other), None, "{other:?}");
        }
    }

    #[cfg(feature = "remote")]
    #[test]
    fn an_exclusive_lock_is_waited_for_within_its_bound_only() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.lock");
        let reader = File::create(&path).unwrap();
        reader.lock_shared().unwrap();
        let other = File::open(&path).unwrap();
        let t = Instant::now();
        let never = || false;
        let err = lock_within(&other, Duration::from_millis(200), &never);
        assert!(matches!(err, Err(NotTaken::Stalled(_))), "{err:?}");
        assert!(t.elapsed() >= Duration::from_millis(200));
        let t = Instant::now();
        let err = lock_within(&other, Duration::from_secs(20), &|| {
            t.elapsed() > Duration::from_millis(100)
        });
        assert!(matches!(err, Err(NotTaken::Over)), "{err:?}");
        assert!(t.elapsed() < Duration::from_secs(1), "{:?}", t.elapsed());
        drop(reader);
        assert!(lock_within(&other, Duration::from_millis(200), &never).is_ok());
    }

    #[cfg(feature = "remote")]
    #[test]
    fn a_holder_is_waited_for_while_its_download_moves_and_not_after() {
        let dir = tempfile::tempdir().unwrap();
        let tmp = dir.path().join("tmp");
        fs::create_dir(&tmp).unwrap();
        let path = dir.path().join("s.tar.lock");
        let fetcher = File::create(&path).unwrap();
        fetcher.lock().unwrap();
        let stall = Duration::from_millis(400);

        // Nothing written: the waiter gives up after the stall, shared or exclusive.
        let never = || false;
        for shared in [true, false] {
            let waiter = File::open(&path).unwrap();
            let t = Instant::now();
            let err = lock_while_moving(&waiter, shared, &tmp, "s.tar", stall, &never);
            let Err(NotTaken::Stalled(waited)) = err else {
                panic!("{err:?}")
            };
            assert!(t.elapsed() >= stall && waited >= stall, "{:?}", t.elapsed());
        }

        // Told the wait is over, it ends at its next look, long before the stall.
        let waiter = File::open(&path).unwrap();
        let t = Instant::now();
        let err = lock_while_moving(&waiter, true, &tmp, "s.tar", stall * 10, &|| {
            t.elapsed() > Duration::from_millis(100)
        });
        assert!(matches!(err, Err(NotTaken::Over)), "{err:?}");
        assert!(t.elapsed() < Duration::from_secs(1), "{:?}", t.elapsed());

        // A download growing every 100 ms for 1.2 s keeps the waiter waiting past the stall,
        // and it gets the lock once the fetcher lets go.
        let grower = std::thread::spawn({
            let tmp = tmp.clone();
            move || {
                let mut part = File::create(tmp.join("s.tar.download.7.0.part")).unwrap();
                // Another shard's download moving is no progress of this one.
                let mut other = File::create(tmp.join("t.tar.download.7.1.part")).unwrap();
                for _ in 0..12 {
                    std::thread::sleep(Duration::from_millis(100));
                    part.write_all(&[0; 512]).unwrap();
                    other.write_all(&[0; 512]).unwrap();
                }
                drop(fetcher);
            }
        });
        let waiter = File::open(&path).unwrap();
        let t = Instant::now();
        lock_while_moving(&waiter, true, &tmp, "s.tar", stall, &never).unwrap();
        assert!(
            t.elapsed() >= Duration::from_millis(1100),
            "{:?}",
            t.elapsed()
        );
        grower.join().unwrap();

        // Only the other shard moving: the stall counts as for no download at all.
        let fetcher = File::open(&path).unwrap();
        waiter.unlock().unwrap();
        fetcher.lock().unwrap();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let mover = std::thread::spawn({
            let (tmp, stop) = (tmp.clone(), stop.clone());
            move || {
                let mut other = fs::OpenOptions::new()
                    .append(true)
                    .open(tmp.join("t.tar.download.7.1.part"))
                    .unwrap();
                while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                    other.write_all(&[0; 512]).unwrap();
                    std::thread::sleep(Duration::from_millis(50));
                }
            }
        });
        let t = Instant::now();
        assert!(lock_while_moving(&waiter, true, &tmp, "s.tar", stall, &never).is_err());
        assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
        stop.store(true, std::sync::atomic::Ordering::SeqCst);
        mover.join().unwrap();
    }
}
