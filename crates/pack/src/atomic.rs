//! Write-once publishing: write to a temporary name, fsync, rename, fsync the directory.

use fs_err as fs;
use shardtool_core::BlockWriter;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// A file being written under a temporary name in its final directory. [`AtomicFile::commit`]
/// makes it appear under its real name in one step; dropping it uncommitted removes it, so a
/// reader never sees a partial file.
pub struct AtomicFile {
    tmp: PathBuf,
    dest: PathBuf,
    file: Option<BlockWriter<fs::File>>,
}

impl AtomicFile {
    /// Creates `dir/.<name>.tmp` for writing.
    pub fn create(dest: &Path) -> io::Result<Self> {
        let name = dest
            .file_name()
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "no file name"))?;
        let mut tmp_name = std::ffi::OsString::from(".");
        tmp_name.push(name);
        tmp_name.push(".tmp");
        let tmp = dest.with_file_name(tmp_name);
        let file = fs::File::create(&tmp)?;
        Ok(Self {
            tmp,
            dest: dest.to_path_buf(),
            // Aligned 2 MiB writes: the page cache then keeps the shard in large folios, which
            // every later mapped read of it (verify, the loader) finds several times cheaper.
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

    /// Flushes, fsyncs, renames into place and fsyncs the directory.
    pub fn commit(mut self) -> io::Result<()> {
        let Some(buf) = self.file.take() else {
            return Err(io::Error::other("already committed"));
        };
        let file = buf.into_inner()?;
        file.sync_all()?;
        drop(file);
        fs::rename(&self.tmp, &self.dest)?;
        if let Some(dir) = self.dest.parent() {
            let dir = if dir.as_os_str().is_empty() {
                Path::new(".")
            } else {
                dir
            };
            fs::File::open(dir)?.sync_all()?;
        }
        Ok(())
    }
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
            assert!(!dest.exists());
        }
        assert!(!dest.exists());
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
        AtomicFile::write(&dest, b"whole").unwrap();
        assert_eq!(std::fs::read(&dest).unwrap(), b"whole");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }
}
