//! Where a partitioned pack's output lives: a local folder (or `file://` URL), or an `s3://`
//! folder whose files are made in a private local scratch folder and uploaded — shards once,
//! create-if-absent, so a repeated attempt never replaces other bytes.

use crate::PackError;
use shardtool_cache::RemoteFolder;
use shardtool_core::AtomicFile;
use std::path::{Path, PathBuf};

/// The most requests [`Store::each`] has in flight at once on an object store.
const REQUESTS_AT_ONCE: usize = 16;

/// A partitioned pack's output folder. Names are relative, `/`-separated (`_plan/plan.json`).
pub(crate) enum Store {
    /// A local folder: files are made in place.
    Local(PathBuf),
    /// An object-store folder, with the local folder where its files are made first.
    Remote {
        folder: Box<RemoteFolder>,
        url: String,
        scratch: PathBuf,
        /// The scratch folder's lock, held while the store lives.
        _held: std::fs::File,
    },
}

/// Whether `output` names an object-store folder.
pub(crate) fn is_remote(output: &Path) -> bool {
    // A URL's scheme is case-insensitive: `S3://` is no folder named `S3:`.
    let scheme = output.to_str().and_then(|s| s.get(..5));
    scheme.is_some_and(|s| s.eq_ignore_ascii_case("s3://"))
}

/// The folder a `file://` output names (parsed as inputs' URLs are); any other output as it is.
pub(crate) fn local_path(output: &Path) -> PathBuf {
    output
        .to_str()
        .and_then(|s| crate::containers::local_path(s).ok())
        .map_or_else(|| output.to_path_buf(), PathBuf::from)
}

impl Store {
    /// Opens `output`: a local path, `file://…`, or `s3://bucket/prefix/`.
    pub(crate) fn open(output: &Path) -> Result<Self, PackError> {
        if !is_remote(output) {
            return Ok(Store::Local(local_path(output)));
        }
        let mut url = output.to_string_lossy().into_owned();
        if !url.ends_with('/') {
            url.push('/');
        }
        let (folder, _) =
            RemoteFolder::connect(&url, Default::default()).map_err(|e| PackError::Store {
                location: url.clone(),
                message: e.to_string(),
            })?;
        let (scratch, held) = make_scratch().map_err(|e| PackError::Store {
            location: url.clone(),
            message: format!(
                "cannot make its scratch folder in {} (the temporary folder, $TMPDIR): {e}; set \
                 TMPDIR to a writable local folder",
                std::env::temp_dir().display()
            ),
        })?;
        Ok(Store::Remote {
            folder: Box::new(folder),
            url,
            scratch,
            _held: held,
        })
    }

    /// The local folder where files are made (the output itself, or the scratch folder).
    pub(crate) fn local(&self) -> &Path {
        match self {
            Store::Local(p) => p,
            Store::Remote { scratch, .. } => scratch,
        }
    }

    /// Whether the output is in an object store.
    pub(crate) fn is_remote(&self) -> bool {
        matches!(self, Store::Remote { .. })
    }

    /// `f` of each of `items`, in order: for an object store on up to [`REQUESTS_AT_ONCE`]
    /// threads, so that a look at every shard (status, merge, a part's rerun) does not wait for
    /// one request after another; for a local folder one after another. The first error wins.
    pub(crate) fn each<T: Send>(
        &self,
        items: &[u64],
        f: impl Fn(u64) -> Result<T, PackError> + Sync,
    ) -> Result<Vec<T>, PackError> {
        let threads = if self.is_remote() {
            REQUESTS_AT_ONCE
        } else {
            1
        };
        each_on(threads, items, f)
    }

    fn remote_error(&self, e: shardtool_cache::CacheError) -> PackError {
        PackError::Store {
            location: match self {
                Store::Local(p) => p.display().to_string(),
                Store::Remote { url, .. } => url.clone(),
            },
            message: e.to_string(),
        }
    }

    /// Reads `name` whole (at most `limit` bytes), `None` when it does not exist.
    pub(crate) fn read(&self, name: &str, limit: u64) -> Result<Option<Vec<u8>>, PackError> {
        match self {
            Store::Local(root) => {
                let path = root.join(name);
                match shardtool_core::read_within(&path, limit) {
                    Ok(b) => Ok(Some(b)),
                    // A file where the output folder should be holds no file either.
                    Err(e)
                        if matches!(
                            e.kind(),
                            std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory
                        ) =>
                    {
                        Ok(None)
                    }
                    Err(e) => Err(PackError::io(path, e)),
                }
            }
            Store::Remote { folder, .. } => {
                folder.read(name, limit).map_err(|e| self.remote_error(e))
            }
        }
    }

    /// Writes `name` atomically, replacing it. A local temporary file is locked while it is
    /// written, so a merge tidying the folder (on any host or in any container) leaves it be.
    pub(crate) fn write(&self, name: &str, bytes: &[u8]) -> Result<(), PackError> {
        match self {
            Store::Local(root) => {
                let path = root.join(name);
                let write = || {
                    let (mut f, held) = locked_temporary(&path)?;
                    std::io::Write::write_all(&mut f, bytes)?;
                    f.commit()?;
                    // Held past the rename: `commit` closes its own handle first.
                    drop(held);
                    Ok(())
                };
                write().map_err(|e| PackError::io(path, e))
            }
            Store::Remote { folder, .. } => folder
                .write(name, bytes.to_vec())
                .map_err(|e| self.remote_error(e)),
        }
    }

    /// Writes `name` as [`Store::write`] does, unless it exists by then: `false` (another
    /// writer was first). An object store has no such test: its write replaces.
    pub(crate) fn write_new(&self, name: &str, bytes: &[u8]) -> Result<bool, PackError> {
        let Store::Local(root) = self else {
            return self.write(name, bytes).map(|()| true);
        };
        let path = root.join(name);
        let write = || {
            let (mut f, held) = locked_temporary(&path)?;
            std::io::Write::write_all(&mut f, bytes)?;
            let first = f.commit_new()?;
            drop(held);
            Ok(first)
        };
        write().map_err(|e| PackError::io(path, e))
    }

    /// Writes `name` as [`Store::write`] does, unless it holds `bytes` already: a manifest
    /// written again, even with the same bytes, is a new file to the readers of the dataset,
    /// which then fail their epoch.
    pub(crate) fn write_if_changed(&self, name: &str, bytes: &[u8]) -> Result<(), PackError> {
        if matches!(self.read(name, bytes.len() as u64), Ok(Some(old)) if old == bytes) {
            return Ok(());
        }
        self.write(name, bytes)
    }

    /// What identifies file `name` as written (`None`: there is none): for a local file its
    /// inode, size and modification time; for an object its size and entity tag.
    pub(crate) fn stamp(&self, name: &str) -> Result<Option<String>, PackError> {
        use std::os::unix::fs::MetadataExt;
        match self {
            Store::Local(root) => Ok(std::fs::metadata(root.join(name))
                .ok()
                .map(|m| format!("{} {} {}.{}", m.ino(), m.len(), m.mtime(), m.mtime_nsec()))),
            Store::Remote { folder, .. } => Ok(folder
                .head(name)
                .map_err(|e| self.remote_error(e))?
                .map(|(size, etag)| format!("{size} {}", etag.unwrap_or_default()))),
        }
    }

    /// Removes `name`; one already gone is no error.
    pub(crate) fn delete(&self, name: &str) -> Result<(), PackError> {
        match self {
            Store::Local(root) => match std::fs::remove_file(root.join(name)) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    Err(PackError::io(root.join(name), e))
                }
                _ => Ok(()),
            },
            Store::Remote { folder, .. } => folder.delete(name).map_err(|e| self.remote_error(e)),
        }
    }

    /// The size of `name`, `None` when it does not exist.
    pub(crate) fn size(&self, name: &str) -> Result<Option<u64>, PackError> {
        match self {
            Store::Local(root) => Ok(std::fs::metadata(root.join(name)).ok().map(|m| m.len())),
            Store::Remote { folder, .. } => folder.size(name).map_err(|e| self.remote_error(e)),
        }
    }

    /// Publishes `name`, just made under [`Store::local`]: in place already for a local folder;
    /// uploaded once (create-if-absent, or the same bytes already there) and the local copy
    /// removed for an object store.
    pub(crate) fn publish(&self, name: &str) -> Result<(), PackError> {
        let Store::Remote {
            folder, scratch, ..
        } = self
        else {
            return Ok(());
        };
        let local = scratch.join(name);
        folder
            .publish(name, &local)
            .map_err(|e| self.remote_error(e))?;
        let _ = std::fs::remove_file(&local);
        Ok(())
    }

    /// Makes `name` available under [`Store::local`] (downloading it from an object store when
    /// not there yet) and returns its local path.
    pub(crate) fn fetch(&self, name: &str, limit: u64) -> Result<PathBuf, PackError> {
        let path = self.local().join(name);
        let Store::Remote { folder, .. } = self else {
            return Ok(path);
        };
        if path.exists() {
            return Ok(path);
        }
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| PackError::io(dir, e))?;
        }
        let mut file = AtomicFile::create(&path).map_err(|e| PackError::io(&path, e))?;
        let mut handle = file.clone_file().map_err(|e| PackError::io(&path, e))?;
        folder
            .fetch(name, limit, &mut handle)
            .map_err(|e| self.remote_error(e))?;
        drop(handle);
        std::io::Write::flush(&mut file).map_err(|e| PackError::io(&path, e))?;
        file.commit().map_err(|e| PackError::io(&path, e))?;
        Ok(path)
    }

    /// The names (`dir/…`) of the files directly in folder `dir` of the output.
    pub(crate) fn list_under(&self, dir: &str) -> Result<Vec<String>, PackError> {
        match self {
            Store::Local(root) => {
                let mut out: Vec<String> = (std::fs::read_dir(root.join(dir)).into_iter())
                    .flatten()
                    .flatten()
                    .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
                    .map(|e| format!("{dir}/{}", e.file_name().to_string_lossy()))
                    .collect();
                out.sort();
                Ok(out)
            }
            Store::Remote { url, .. } => {
                // Only the objects directly in it: its subfolders (a done record per shard) and
                // the output (every shard) are not walked.
                let sub = format!("{url}{dir}/");
                let (folder, _) = RemoteFolder::connect(&sub, Default::default())
                    .map_err(|e| self.remote_error(e))?;
                let listed = folder.list_top().map_err(|e| self.remote_error(e))?;
                Ok(listed
                    .into_iter()
                    .map(|(n, _)| format!("{dir}/{n}"))
                    .collect())
            }
        }
    }

    /// Where `name` is, as shown to the user: a path, or the object's URL.
    pub(crate) fn shown(&self, name: &str) -> PathBuf {
        match self {
            Store::Local(root) => root.join(name),
            Store::Remote { url, .. } => PathBuf::from(format!("{url}{name}")),
        }
    }

    /// Refuses an object-store output that holds anything but what a plan killed before it
    /// published its plan file left in the plan folder `dir` (staged copies, its input list:
    /// its own, by name), which `overwrite` removes. Other objects are never deleted from here:
    /// the folder must start empty.
    pub(crate) fn ready_for_a_plan(
        &self,
        overwrite: bool,
        dir: &str,
        plan_file: &str,
    ) -> Result<(), PackError> {
        let Store::Remote { folder, url, .. } = self else {
            return Ok(());
        };
        let names = folder.list().map_err(|e| self.remote_error(e))?;
        if names.is_empty() {
            return Ok(());
        }
        let leftovers = (names.iter()).all(|(n, _)| {
            n.strip_prefix(dir)
                .is_some_and(|rest| !rest.is_empty() && rest != plan_file)
        });
        let planned = names.iter().any(|(n, _)| n == &format!("{dir}{plan_file}"));
        let finished = names
            .iter()
            .any(|(n, _)| n == shardtool_manifest::FILE_NAME);
        let message = if !leftovers && finished {
            "holds a finished dataset (manifest.json): to pack it again, delete its objects or \
             use another prefix (shardtool deletes no published object in an object store)"
                .into()
        } else if !leftovers && planned {
            "holds a plan, and perhaps shards packed by it: keep it with --resume (the same \
             input and options) and run its parts, or `pack … --resume`; to start over, delete \
             its objects or use another prefix (shardtool deletes no published object in an \
             object store)"
                .into()
        } else if !leftovers {
            "not empty: a plan needs an empty object-store folder (delete its objects or use \
             another prefix; --overwrite deletes only what an unfinished plan staged)"
                .into()
        } else if overwrite {
            for (n, _) in &names {
                self.delete(n)?;
            }
            return Ok(());
        } else {
            format!(
                "holds the staged inputs of a plan that did not finish ({} objects under \
                 {dir}): plan again with --overwrite, which removes them",
                names.len()
            )
        };
        Err(PackError::Store {
            location: url.clone(),
            message,
        })
    }
}

impl Drop for Store {
    fn drop(&mut self) {
        if let Store::Remote { scratch, .. } = self {
            let _ = std::fs::remove_dir_all(&scratch);
            let mut lock = scratch.clone().into_os_string();
            lock.push(SCRATCH_LOCK);
            let _ = std::fs::remove_file(lock);
        }
    }
}

/// `f` of each of `items`, in order, on up to `threads` threads; the first error in order wins.
fn each_on<T: Send>(
    threads: usize,
    items: &[u64],
    f: impl Fn(u64) -> Result<T, PackError> + Sync,
) -> Result<Vec<T>, PackError> {
    let threads = threads.min(items.len());
    if threads <= 1 {
        return items.iter().map(|&j| f(j)).collect();
    }
    let next = std::sync::atomic::AtomicUsize::new(0);
    let failed = std::sync::atomic::AtomicBool::new(false);
    let mut out: Vec<Option<Result<T, PackError>>> = (0..items.len()).map(|_| None).collect();
    let parts = shardtool_core::on_threads(threads, || {
        let mut mine = Vec::new();
        use std::sync::atomic::Ordering::Relaxed;
        while !failed.load(Relaxed) {
            let i = next.fetch_add(1, Relaxed);
            let Some(&j) = items.get(i) else { break };
            let r = f(j);
            failed.fetch_or(r.is_err(), Relaxed);
            mine.push((i, r));
        }
        mine
    });
    for (i, r) in parts.into_iter().flatten() {
        out[i] = Some(r);
    }
    // Items are handed out in order, so all before the first error were looked at; that
    // error is returned, and what came after it may not have been.
    let mut done = Vec::with_capacity(items.len());
    for r in out.into_iter().flatten() {
        done.push(r?);
    }
    Ok(done)
}

/// A temporary file for `dest` and a second handle on it that holds its lock until dropped
/// (keep it past the commit's rename). A merge may have removed the file between its making and
/// its locking (it was not locked then): then another is made. Where the file system has no
/// locks (NFS without lockd, Lustre without `flock`) the file is written unlocked, as merges
/// there leave every temporary file be.
fn locked_temporary(dest: &Path) -> std::io::Result<(AtomicFile, Option<std::fs::File>)> {
    use std::os::unix::fs::MetadataExt;
    loop {
        let f = AtomicFile::create(dest)?;
        let held = f.clone_file()?;
        if held.lock().is_err() {
            return Ok((f, None));
        }
        let (ours, named) = (held.metadata()?, std::fs::metadata(f.temp_path()));
        if named.is_ok_and(|n| (n.dev(), n.ino()) == (ours.dev(), ours.ino())) {
            return Ok((f, Some(held)));
        }
    }
}

/// The prefix of scratch folders in the temporary folder.
const SCRATCH: &str = "shardtool-out-";
/// The suffix of the lock file beside a scratch folder, held by its process while it lives.
const SCRATCH_LOCK: &str = ".held";

/// Makes this process's scratch folder in the temporary folder, holding the lock file beside
/// it, after removing those whose process is gone (killed: SIGKILL, the OOM killer, a
/// preemption outlasting its grace period), whose shards would stay on the node's disk for
/// good. The lock is held before the folder is made, so no sweep takes a new one for dead.
fn make_scratch() -> std::io::Result<(PathBuf, std::fs::File)> {
    let tmp = std::env::temp_dir();
    for e in std::fs::read_dir(&tmp).into_iter().flatten().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if !name.starts_with(SCRATCH) {
            continue;
        }
        if let Some(folder) = name.strip_suffix(SCRATCH_LOCK) {
            // A lock whose folder was never made (killed in between), a minute old: nobody's.
            let old = (e.metadata().and_then(|m| m.modified()).ok())
                .and_then(|t| t.elapsed().ok())
                .is_some_and(|age| age > std::time::Duration::from_secs(60));
            if old && !tmp.join(folder).exists() {
                if let Ok(f) = std::fs::File::open(e.path()) {
                    if f.try_lock().is_ok() {
                        let _ = std::fs::remove_file(e.path());
                    }
                }
            }
            continue;
        }
        let lock = tmp.join(format!("{name}{SCRATCH_LOCK}"));
        if let Ok(f) = std::fs::File::open(&lock) {
            if f.try_lock().is_ok() {
                let _ = std::fs::remove_dir_all(e.path());
                let _ = std::fs::remove_file(&lock);
            }
        }
    }
    let name = format!(
        "{SCRATCH}{}-{:x}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos())
    );
    let held = std::fs::File::create(tmp.join(format!("{name}{SCRATCH_LOCK}")))?;
    // Where the file system has no locks, no sweep can take one either: the folder stays.
    let _ = held.lock();
    let scratch = tmp.join(name);
    std::fs::create_dir_all(&scratch)?;
    Ok((scratch, held))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn looks_run_in_order_and_the_first_error_in_order_is_returned() {
        let items: Vec<u64> = (0..200).collect();
        let slow = |j: u64| {
            // Later items finish first, so order comes from the indices, not from timing.
            std::thread::sleep(std::time::Duration::from_micros(200 - j));
            Ok(j * 2)
        };
        for threads in [1, 3, 16] {
            let got = each_on(threads, &items, slow).unwrap();
            assert_eq!(got, items.iter().map(|j| j * 2).collect::<Vec<_>>());
            let failing = |j: u64| match j {
                50 | 120 => Err(PackError::io(
                    format!("item {j}"),
                    std::io::Error::other("unreadable"),
                )),
                j => slow(j),
            };
            let e = each_on(threads, &items, failing).unwrap_err().to_string();
            assert!(e.contains("item 50"), "{threads} threads: {e}");
        }
        assert!(each_on(4, &[], slow).unwrap().is_empty());
    }
}
