//! The dataset checksum: XXH3-64, written as `xxh3:<16 lowercase hex digits>`.
//!
//! XXH3 hashes at memory bandwidth, so checksumming never becomes the bottleneck of pack or
//! verify. It guards against corruption, not tampering.

use std::io::{self, Write};
use xxhash_rust::xxh3::Xxh3;

/// A finished XXH3-64 checksum.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Checksum(pub u64);

impl Checksum {
    /// Hashes a whole buffer.
    pub fn of(bytes: &[u8]) -> Self {
        Self(xxhash_rust::xxh3::xxh3_64(bytes))
    }

    /// Parses the `xxh3:<hex>` form.
    pub fn parse(s: &str) -> Option<Self> {
        let hex = s.strip_prefix("xxh3:")?;
        if hex.len() != 16 {
            return None;
        }
        u64::from_str_radix(hex, 16).ok().map(Self)
    }
}

impl std::fmt::Display for Checksum {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "xxh3:{:016x}", self.0)
    }
}

/// A writer that counts and hashes every byte it passes on.
pub struct HashingWriter<W> {
    inner: W,
    hasher: Xxh3,
    written: u64,
}

impl<W: Write> HashingWriter<W> {
    /// Wraps `inner`.
    pub fn new(inner: W) -> Self {
        Self {
            inner,
            hasher: Xxh3::new(),
            written: 0,
        }
    }

    /// Bytes written so far.
    pub fn written(&self) -> u64 {
        self.written
    }

    /// The checksum of the bytes written so far.
    pub fn checksum(&self) -> Checksum {
        Checksum(self.hasher.digest())
    }

    /// The inner writer.
    pub fn get_mut(&mut self) -> &mut W {
        &mut self.inner
    }

    /// Returns the inner writer, the byte count and the checksum.
    pub fn into_parts(self) -> (W, u64, Checksum) {
        let sum = Checksum(self.hasher.digest());
        (self.inner, self.written, sum)
    }
}

impl<W: Write> Write for HashingWriter<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.hasher.update(&buf[..n]);
        self.written += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streaming_equals_one_shot_and_round_trips_text() {
        let data: Vec<u8> = (0..10_000u32).map(|i| (i * 31 % 251) as u8).collect();
        let mut w = HashingWriter::new(Vec::new());
        for chunk in data.chunks(777) {
            w.write_all(chunk).unwrap();
        }
        let (out, n, sum) = w.into_parts();
        assert_eq!(out, data);
        assert_eq!(n, data.len() as u64);
        assert_eq!(sum, Checksum::of(&data));
        assert_eq!(Checksum::parse(&sum.to_string()), Some(sum));
        assert_eq!(Checksum::parse("xxh3:123"), None);
        assert_eq!(Checksum::parse("md5:0123456789abcdef"), None);
    }
}
