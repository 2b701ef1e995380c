//! Write-once publishing, the one way every shardtool file reaches its final name: write under a
//! temporary name, fsync, rename, fsync the directory. A reader never sees a partial file, and a
//! crash leaves at most a temporary file behind.

use crate::BlockWriter;
use fs_err as fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

static NEXT_TMP: AtomicU64 = AtomicU64::new(0);

/// A file being written under a temporary name. [`AtomicFile::commit`] makes it appear under its
/// final name in one step; dropping it uncommitted removes it.
///
/// Writes pass through a [`BlockWriter`], so the file reaches the page cache in aligned blocks.
pub struct AtomicFile {
    tmp: PathBuf,
    dest: PathBuf,
    file: Option<BlockWriter<fs::File>>,
}

impl AtomicFile {
    /// Creates a temporary file beside `dest` (`.NAME.PID.N.tmp`, unique per process and call, so
    /// concurrent writers of one destination never share a temporary file).
    pub fn create(dest: &Path) -> io::Result<Self> {
        let name = dest.file_name().ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{}: not a file name", dest.display()),
            )
        })?;
        // Another host or a restarted container can reuse our PID (a Kubernetes pod's process is
        // often PID 1), and a killed writer leaves its temporary file: take the next free name.
        let mut attempt = 0;
        loop {
            let mut tmp_name = std::ffi::OsString::from(".");
            tmp_name.push(name);
            tmp_name.push(format!(
                ".{}.{}.tmp",
                std::process::id(),
                NEXT_TMP.fetch_add(1, Ordering::Relaxed)
            ));
            match Self::create_at(dest.with_file_name(tmp_name), dest) {
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists && attempt < 1000 => {
                    attempt += 1
                }
                r => return r,
            }
        }
    }

    /// Creates the temporary file at `tmp`, which must not exist and must be on the same file
    /// system as `dest` (a cache keeps its temporary files in a folder of its own).
    pub fn create_at(tmp: PathBuf, dest: &Path) -> io::Result<Self> {
        let file = fs::File::options()
            .create_new(true)
            .read(true)
            .write(true)
            .open(&tmp)?;
        Ok(Self {
            tmp,
            dest: dest.to_path_buf(),
            file: Some(BlockWriter::new(file)),
        })
    }

    /// Writes `bytes` to `dest` atomically.
    pub fn write(dest: &Path, bytes: &[u8]) -> io::Result<()> {
        let mut f = Self::create(dest)?;
        f.write_all(bytes)?;
        f.commit()
    }

    /// The final path.
    pub fn dest(&self) -> &Path {
        &self.dest
    }

    /// The temporary path the bytes are written to until [`AtomicFile::commit`].
    pub fn temp_path(&self) -> &Path {
        &self.tmp
    }

    /// A second handle on the temporary file, for a writer that needs a `File` (positioned
    /// writes, writeback hints). Bytes written through it bypass this value's block buffer, so
    /// use one or the other.
    pub fn clone_file(&self) -> io::Result<std::fs::File> {
        match &self.file {
            Some(f) => f.get_ref().file().try_clone(),
            None => Err(io::Error::other("already committed")),
        }
    }

    /// Flushes, fsyncs, renames into place and fsyncs the directory.
    pub fn commit(mut self) -> io::Result<()> {
        let Some(buf) = self.file.take() else {
            return Err(io::Error::other("already committed"));
        };
        // A failure before the rename (a full disk shows up at the last flush or the fsync)
        // leaves no temporary file behind.
        let written = buf.into_inner().and_then(|file| file.sync_all());
        if let Err(e) = written.and_then(|()| fs::rename(&self.tmp, &self.dest)) {
            let _ = std::fs::remove_file(&self.tmp);
            return Err(e);
        }
        let dir = match self.dest.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        fs::File::open(dir)?.sync_all()
    }
}

/// Whether process `pid` of this host's PID namespace runs now (this process included). A PID
/// seen in another container's namespace means nothing here: callers that can must prefer a
/// lock.
pub fn process_alive(pid: u32) -> bool {
    pid == std::process::id() || Path::new("/proc").join(pid.to_string()).exists()
}

impl Write for AtomicFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self.file.as_mut() {
            Some(f) => f.write(buf),
            None => Err(io::Error::other("already committed")),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self.file.as_mut() {
            Some(f) => f.flush(),
            None => Ok(()),
        }
    }
}

impl AtomicFile {
    /// [`AtomicFile::commit`], unless `dest` exists by then: the temporary file goes and the
    /// result is `false` (another writer was first). Where the file system has no hard links,
    /// it replaces `dest` as `commit` does.
    pub fn commit_new(mut self) -> io::Result<bool> {
        let Some(buf) = self.file.take() else {
            return Err(io::Error::other("already committed"));
        };
        let written = buf.into_inner().and_then(|file| file.sync_all());
        let linked = written.and_then(|()| match fs::hard_link(&self.tmp, &self.dest) {
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(false),
            Err(_) => fs::rename(&self.tmp, &self.dest).map(|()| true),
            Ok(()) => Ok(true),
        });
        let _ = fs::remove_file(&self.tmp);
        if linked? {
            let dir = self.dest.parent().filter(|d| !d.as_os_str().is_empty());
            fs::File::open(dir.unwrap_or(Path::new(".")))?.sync_all()?;
            return Ok(true);
        }
        Ok(false)
    }
}

impl Drop for AtomicFile {
    fn drop(&mut self) {
        if self.file.take().is_some() {
            let _ = std::fs::remove_file(&self.tmp);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uncommitted_files_never_appear() {
        let dir = tempfile::tempdir().unwrap();
        let dest = dir.path().join("a.bin");
        {
            let mut f = AtomicFile::create(&dest).unwrap();
            f.write_all(b"partial").unwrap();
            assert!(f.temp_path().exists());
            assert!(!dest.exists());
        }
        assert!(!dest.exists());
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
        AtomicFile::write(&dest, b"whole").unwrap();
        assert_eq!(std::fs::read(&dest).unwrap(), b"whole");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn concurrent_writers_of_one_destination_use_their_own_temporary_files() {
        let dir = tempfile::tempdir().unwrap();
        let dest = dir.path().join("m.json");
        let mut a = AtomicFile::create(&dest).unwrap();
        let mut b = AtomicFile::create(&dest).unwrap();
        assert_ne!(a.temp_path(), b.temp_path());
        a.write_all(b"from a").unwrap();
        b.write_all(b"from b").unwrap();
        a.commit().unwrap();
        b.commit().unwrap();
        assert_eq!(std::fs::read(&dest).unwrap(), b"from b");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn an_existing_temporary_path_is_refused_and_errors_name_the_path() {
        let dir = tempfile::tempdir().unwrap();
        let tmp = dir.path().join("t");
        std::fs::write(&tmp, b"x").unwrap();
        let err = AtomicFile::create_at(tmp.clone(), &dir.path().join("d"))
            .err()
            .unwrap();
        assert_eq!(err.kind(), io::ErrorKind::AlreadyExists);
        assert!(err.to_string().contains(&*tmp.to_string_lossy()), "{err}");
        let missing = dir.path().join("no/such/dir/f");
        let err = AtomicFile::create(&missing).err().unwrap();
        assert!(err.to_string().contains("no/such/dir"), "{err}");
    }

    #[test]
    fn this_process_is_alive_and_a_pid_past_any_pid_max_is_not() {
        assert!(process_alive(std::process::id()));
        assert!(!process_alive(u32::MAX));
    }

    #[test]
    fn stale_temporary_files_of_a_reused_pid_are_stepped_over() {
        let dir = tempfile::tempdir().unwrap();
        let dest = dir.path().join("s.tar");
        // A killed writer with our PID left the next temporary names behind.
        let next = NEXT_TMP.load(Ordering::Relaxed);
        for n in next..next + 64 {
            let stale = dir
                .path()
                .join(format!(".s.tar.{}.{n}.tmp", std::process::id()));
            std::fs::write(stale, b"stale").unwrap();
        }
        let mut f = AtomicFile::create(&dest).unwrap();
        f.write_all(b"fresh").unwrap();
        f.commit().unwrap();
        assert_eq!(std::fs::read(&dest).unwrap(), b"fresh");
    }

    #[test]
    fn commit_new_keeps_what_another_writer_committed_first() {
        let t = tempfile::tempdir().unwrap();
        let dest = t.path().join("done.json");
        let first = AtomicFile::create(&dest).unwrap();
        let mut second = AtomicFile::create(&dest).unwrap();
        second.write_all(b"second").unwrap();
        assert!(second.commit_new().unwrap());
        assert!(!first.commit_new().unwrap());
        assert_eq!(std::fs::read(&dest).unwrap(), b"second");
        let names: Vec<_> = std::fs::read_dir(t.path()).unwrap().flatten().collect();
        assert_eq!(names.len(), 1, "a temporary file was left");
    }
}
