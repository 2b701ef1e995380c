//! Temporary files a process that died while writing them left in the cache folder: nothing
//! else removes them (a reservation or a dataset's `source` written atomically, named `.*.tmp`).

use std::path::Path;
use std::time::Duration;

/// How long a temporary file stays untouched before it counts as left by a dead process: its
/// writer takes microseconds, and one of another PID namespace cannot be asked.
pub(super) const STALE_TEMP: Duration = Duration::from_secs(600);

/// Removes the files of `dir` named `.*.tmp` untouched for `idle`.
pub(super) fn remove_stale_temps(dir: &Path, idle: Duration) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        remove_if_stale(&e, idle);
    }
}

/// Removes `e` if it is named `.*.tmp` and untouched for `idle`.
pub(super) fn remove_if_stale(e: &std::fs::DirEntry, idle: Duration) {
    let name = e.file_name();
    let name = name.to_string_lossy();
    let old = (e.metadata().and_then(|m| m.modified()))
        .is_ok_and(|t| t.elapsed().is_ok_and(|d| d >= idle));
    if name.starts_with('.') && name.ends_with(".tmp") && old {
        let _ = std::fs::remove_file(e.path());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_old_hidden_temporary_files_go() {
        let t = tempfile::tempdir().unwrap();
        let hour_ago = std::time::SystemTime::now() - Duration::from_secs(3600);
        for name in [".a.1.tmp", ".b.2.tmp", "c.tmp", ".d"] {
            let f = std::fs::File::create(t.path().join(name)).unwrap();
            if name != ".b.2.tmp" {
                f.set_modified(hour_ago).unwrap();
            }
        }
        remove_stale_temps(t.path(), STALE_TEMP);
        let mut left: Vec<String> = std::fs::read_dir(t.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(left, [".b.2.tmp", ".d", "c.tmp"]);
    }
}
