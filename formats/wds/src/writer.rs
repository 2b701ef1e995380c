//! Deterministic USTAR writer: fixed mode, owner and mtime, so equal inputs give equal bytes.

use crate::BLOCK;
use std::io::{self, Write};

/// The modification time written into every member: 2000-01-01T00:00:00Z. A fixed value keeps
/// shards byte-identical across runs; a non-zero one keeps tools that treat 0 as "unset" quiet.
pub const FIXED_MTIME: u64 = 946_684_800;

/// Writes regular-file members into a tar stream.
pub struct TarWriter<W: Write> {
    inner: W,
    written: u64,
}

impl<W: Write> TarWriter<W> {
    /// Starts a tar stream on `inner`.
    pub fn new(inner: W) -> Self {
        Self { inner, written: 0 }
    }

    /// Bytes written so far (headers, data and padding).
    pub fn written(&self) -> u64 {
        self.written
    }

    /// The bytes one member of `len` data bytes takes in the archive.
    pub fn member_size(len: u64) -> u64 {
        BLOCK as u64 + len.div_ceil(BLOCK as u64) * BLOCK as u64
    }

    /// Appends a regular file `name` holding `data`. `name` must fit the 100-byte USTAR name
    /// field (sample keys are capped so that it always does).
    pub fn append(&mut self, name: &str, data: &[u8]) -> io::Result<()> {
        let header = ustar_header(name, data.len() as u64, b'0', "")?;
        self.inner.write_all(&header)?;
        self.inner.write_all(data)?;
        let pad = (BLOCK - data.len() % BLOCK) % BLOCK;
        self.inner.write_all(&[0u8; BLOCK][..pad])?;
        self.written += Self::member_size(data.len() as u64);
        Ok(())
    }

    /// Writes the two zero blocks that end an archive and returns the inner writer.
    pub fn finish(mut self) -> io::Result<W> {
        self.inner.write_all(&[0u8; 2 * BLOCK])?;
        self.inner.flush()?;
        Ok(self.inner)
    }
}

/// A whole archive in memory of the `members`, `(name, data)` in order (see
/// [`TarWriter::append`] for the names it accepts).
pub fn tar_bytes<N: AsRef<str>, D: AsRef<[u8]>>(
    members: impl IntoIterator<Item = (N, D)>,
) -> io::Result<Vec<u8>> {
    let mut w = TarWriter::new(Vec::new());
    for (name, data) in members {
        w.append(name.as_ref(), data.as_ref())?;
    }
    w.finish()
}

/// A USTAR header for a member `name` of `size` bytes, of type `typeflag` (b'0' a regular file,
/// the only type [`TarWriter`] writes; tests build links and devices with the others) pointing at
/// `linkname` (empty but for links).
pub fn ustar_header(
    name: &str,
    size: u64,
    typeflag: u8,
    linkname: &str,
) -> io::Result<[u8; BLOCK]> {
    let bad = |msg: &str| io::Error::new(io::ErrorKind::InvalidInput, format!("{msg}: {name:?}"));
    if name.is_empty() || name.len() > 100 || name.contains('\0') {
        return Err(bad("tar member name must be 1..=100 bytes without NUL"));
    }
    if linkname.len() > 100 || linkname.contains('\0') {
        return Err(bad("tar link name must be at most 100 bytes without NUL"));
    }
    // 11 octal digits hold sizes below 8 GiB, far above any shard member.
    if size >= 1 << 33 {
        return Err(bad("tar member too large"));
    }
    let mut h = [0u8; BLOCK];
    h[..name.len()].copy_from_slice(name.as_bytes());
    octal(&mut h[100..108], 0o644);
    octal(&mut h[108..116], 0);
    octal(&mut h[116..124], 0);
    octal(&mut h[124..136], size);
    octal(&mut h[136..148], FIXED_MTIME);
    h[156] = typeflag;
    h[157..157 + linkname.len()].copy_from_slice(linkname.as_bytes());
    h[257..263].copy_from_slice(b"ustar\0");
    h[263..265].copy_from_slice(b"00");
    // The checksum is computed with its own field filled with spaces.
    h[148..156].fill(b' ');
    let sum: u32 = h.iter().map(|&b| u32::from(b)).sum();
    let text = format!("{sum:06o}\0 ");
    h[148..156].copy_from_slice(text.as_bytes());
    Ok(h)
}

/// Writes `value` as zero-padded octal followed by a NUL, filling `field`.
fn octal(field: &mut [u8], value: u64) {
    let digits = field.len() - 1;
    let text = format!("{value:0digits$o}");
    field[..digits].copy_from_slice(text.as_bytes());
    field[digits] = 0;
}
