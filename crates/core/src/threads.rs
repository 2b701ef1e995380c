//! Work spread over scoped threads that degrades to fewer, or to the calling thread, where the
//! system starts no more (a thread limit, `ulimit -u`), instead of panicking as
//! `std::thread::scope`'s `spawn` does.

/// Runs `work` on `n` scoped threads (at least one), or on as many as the system starts: on the
/// calling thread alone when it starts none. Returns what each run returned. `work` must take its
/// items from shared state (a counter), so that fewer threads still do all of it.
pub fn on_threads<R: Send>(n: usize, work: impl Fn() -> R + Sync) -> Vec<R> {
    std::thread::scope(|s| {
        let started: Vec<_> = (0..n.max(1))
            .map_while(|_| std::thread::Builder::new().spawn_scoped(s, &work).ok())
            .collect();
        if started.is_empty() {
            return vec![work()];
        }
        let joined = started.into_iter().map(|h| h.join());
        joined
            .map(|r| r.unwrap_or_else(|panic| std::panic::resume_unwind(panic)))
            .collect()
    })
}

/// Whether the system starts `n` more threads now, all alive at once: a thread limit
/// (`ulimit -u`) may leave fewer. Each is ended before this returns.
pub fn can_start_threads(n: usize) -> bool {
    let go = std::sync::atomic::AtomicBool::new(false);
    let wait = || {
        while !go.load(std::sync::atomic::Ordering::Acquire) {
            std::thread::park();
        }
    };
    std::thread::scope(|s| {
        let started: Vec<_> = (0..n)
            .map_while(|_| std::thread::Builder::new().spawn_scoped(s, wait).ok())
            .collect();
        go.store(true, std::sync::atomic::Ordering::Release);
        for h in &started {
            h.thread().unpark();
        }
        started.len() == n
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn every_item_is_taken_once_on_any_number_of_threads() {
        for n in [0, 1, 3, 16] {
            let next = AtomicUsize::new(0);
            let runs = on_threads(n, || {
                let mut mine = Vec::new();
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= 100 {
                        return mine;
                    }
                    mine.push(i);
                }
            });
            assert_eq!(runs.len(), n.max(1));
            let mut all: Vec<usize> = runs.into_iter().flatten().collect();
            all.sort_unstable();
            assert_eq!(all, (0..100).collect::<Vec<_>>(), "{n} threads");
        }
    }

    #[test]
    fn a_few_threads_start_where_no_limit_stops_them() {
        assert!(can_start_threads(0));
        assert!(can_start_threads(3));
    }
}
