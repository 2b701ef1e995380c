//! Validating tar reader over a byte stream (a file read front to back through a small reused
//! buffer), for checks that need every header but only a few members' data: the data of the
//! other members is skipped without being copied anywhere, and memory stays bounded by the buffer
//! and by what the caller asks to keep.
//!
//! It reports exactly what [`TarReader`](crate::TarReader) reports for the same bytes, given the
//! archive's length up front (from the file system): a member whose data runs past the end is an
//! error at its header, as it is in memory.

use crate::reader::{member_end, parse_header, EntryKind, ReadError};
use crate::BLOCK;
use std::borrow::Cow;
use std::io::{self, Read};

/// Smallest buffer: a header, and the second block of the end-of-archive marker, fit in it.
const MIN_BUFFER: usize = 2 * BLOCK;
/// The page size reads are aligned to (4 KiB on every platform we build for; a larger page only
/// makes the alignment partial, never wrong).
const PAGE: usize = 4096;

/// Why a streamed archive could not be read further.
#[derive(Debug, thiserror::Error)]
pub enum StreamError {
    /// The archive is malformed.
    #[error(transparent)]
    Tar(#[from] ReadError),
    /// Reading failed, or the source ended before the length it was said to have.
    #[error(transparent)]
    Io(#[from] io::Error),
}

/// A member's header as streamed: its name borrows the stream's buffer (or is owned when a USTAR
/// prefix was joined to it), so it lives until the stream moves on.
#[derive(Debug)]
pub struct StreamHeader<'s> {
    /// Full member name.
    pub name: Cow<'s, str>,
    /// Member type.
    pub kind: EntryKind,
    /// Offset of the header in the archive.
    pub header_offset: u64,
    /// Bytes of data that follow (0 for links, devices and directories).
    pub size: u64,
}

/// What follows the last member, read to the end of the source.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tail {
    /// Offset where the last member (and its padding) ends: the end-of-archive marker should start
    /// here.
    pub end: u64,
    /// Bytes from `end` to the end of the source.
    pub len: u64,
    /// Offset of the first non-zero byte at or after `end`, if any.
    pub first_nonzero: Option<u64>,
}

/// Reads a tar archive of a known length from `src`, header by header.
pub struct TarStream<R> {
    src: R,
    buf: Vec<u8>,
    /// Unread bytes are `buf[lo..hi]`.
    lo: usize,
    hi: usize,
    /// Archive offset of `buf[lo]`.
    offset: u64,
    len: u64,
    /// Data and padding of the last header returned, still to be consumed.
    pending: u64,
    /// Where the last member returned ends with its padding, even when the archive ends first.
    after_last: u64,
    /// Set once `next_header` has returned `None` or an error.
    done: bool,
}

impl<R: Read> TarStream<R> {
    /// Streams the archive of `len` bytes that `src` yields, reading through `buf` (its length, at
    /// least 1 KiB, is the read size; the buffer comes back from [`into_parts`](Self::into_parts)
    /// for reuse).
    pub fn new(src: R, len: u64, mut buf: Vec<u8>) -> Self {
        if buf.len() < MIN_BUFFER {
            buf.resize(MIN_BUFFER, 0);
        }
        Self {
            src,
            buf,
            lo: 0,
            hi: 0,
            offset: 0,
            len,
            pending: 0,
            after_last: 0,
            done: false,
        }
    }

    /// Bytes buffered and not yet consumed.
    fn available(&self) -> usize {
        self.hi - self.lo
    }

    /// Reads until at least `want` bytes (at most the buffer's length) are buffered, or the
    /// source ends. Returns whether `want` bytes are there.
    fn fill(&mut self, want: usize) -> io::Result<bool> {
        debug_assert!(want <= self.buf.len());
        if self.available() >= want {
            return Ok(true);
        }
        // Keep the buffered bytes where their address matches their archive offset modulo a
        // page, so each read() copies page-cache pages to the same offset within a page: a
        // destination a few bytes past it ran the kernel's copy at a quarter of the speed (4K
        // aliasing), and verify spent most of its time there.
        let kept = self.available();
        let start = (self.offset as usize).wrapping_sub(self.buf.as_ptr() as usize) % PAGE;
        let start = if start + want <= self.buf.len() {
            start
        } else {
            0
        };
        if self.lo != start {
            self.buf.copy_within(self.lo..self.hi, start);
            self.lo = start;
            self.hi = start + kept;
        }
        while self.hi - self.lo < want {
            match self.src.read(&mut self.buf[self.hi..]) {
                Ok(0) => return Ok(false),
                Ok(n) => self.hi += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(true)
    }

    /// Consumes `n` bytes, reading what is not buffered yet, appending them to `out` when given
    /// (dropping them otherwise). Returns the bytes that could be consumed before the source
    /// ended.
    fn consume(&mut self, mut n: u64, mut out: Option<&mut Vec<u8>>) -> io::Result<u64> {
        let asked = n;
        loop {
            // At most `available()`, a usize.
            let here = n.min(self.available() as u64) as usize;
            if let Some(out) = out.as_mut() {
                out.extend_from_slice(&self.buf[self.lo..self.lo + here]);
            }
            self.lo += here;
            self.offset += here as u64;
            n -= here as u64;
            if n == 0 || !self.fill(1)? {
                return Ok(asked - n);
            }
        }
    }

    /// The next member's header, or `None` at the end-of-archive marker (or at the end of an
    /// archive without one). The member's data is skipped unless [`read_data`](Self::read_data)
    /// is called before the next call.
    pub fn next_header(&mut self) -> Result<Option<StreamHeader<'_>>, StreamError> {
        if self.done {
            return Ok(None);
        }
        // Ends the stream unless a header is returned.
        self.done = true;
        if self.pending > 0 {
            // The previous header stays buffered until here, where it is consumed with its data.
            let n = std::mem::take(&mut self.pending);
            if self.consume(n, None)? < n {
                return Err(short_source().into());
            }
        }
        let offset = self.offset;
        if offset >= self.len {
            // A stream without the end marker: tolerated, as `TarReader` does.
            return Ok(None);
        }
        if self.len - offset < BLOCK as u64 {
            return Err(ReadError::Truncated {
                offset,
                what: "header",
            }
            .into());
        }
        if !self.fill(BLOCK)? {
            return Err(short_source().into());
        }
        let h = &self.buf[self.lo..self.lo + BLOCK];
        let Some(header) = parse_header(h, offset)? else {
            return Ok(None);
        };
        let (_, padded) = member_end(offset, header.size, self.len)?;
        // Header, data and padding; the padding may be cut off by the end of the archive.
        self.pending = padded.min(self.len) - offset;
        self.after_last = padded;
        self.done = false;
        Ok(Some(StreamHeader {
            name: header.name,
            kind: header.kind,
            header_offset: offset,
            size: header.size,
        }))
    }

    /// Reads the data of the member whose header was returned last into `out` (appended). Fails
    /// only when reading fails or the source is shorter than its stated length.
    pub fn read_data(&mut self, size: u64, out: &mut Vec<u8>) -> io::Result<()> {
        debug_assert!(self.pending >= BLOCK as u64 + size);
        if self.consume(BLOCK as u64, None)? < BLOCK as u64 {
            return Err(short_source());
        }
        self.pending -= BLOCK as u64;
        let take = size.min(self.pending);
        if self.consume(take, Some(out))? < take {
            return Err(short_source());
        }
        self.pending -= take;
        Ok(())
    }

    /// Offset of the next unread byte.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// Reads the rest of the source after the last member (call once `next_header` has returned
    /// `None` or an error) and describes it.
    pub fn tail(&mut self) -> io::Result<Tail> {
        if self.pending > 0 {
            let n = std::mem::take(&mut self.pending);
            self.consume(n, None)?;
        }
        // As `TarReader` counts it: a last member whose padding the archive cuts off still ends
        // at the end of its padding.
        let end = self.after_last.max(self.offset);
        let mut first_nonzero = None;
        loop {
            if first_nonzero.is_none() {
                let here = &self.buf[self.lo..self.hi];
                first_nonzero = here
                    .iter()
                    .enumerate()
                    .map(|(i, &b)| (self.offset + i as u64, b))
                    .find(|&(at, b)| b != 0 && at >= end)
                    .map(|(at, _)| at);
            }
            let n = self.available();
            self.lo = self.hi;
            self.offset += n as u64;
            if !self.fill(1)? {
                break;
            }
        }
        Ok(Tail {
            end,
            len: self.offset.saturating_sub(end),
            first_nonzero,
        })
    }

    /// The source and the buffer, for reuse.
    pub fn into_parts(self) -> (R, Vec<u8>) {
        (self.src, self.buf)
    }
}

fn short_source() -> io::Error {
    io::Error::new(
        io::ErrorKind::UnexpectedEof,
        "the file ended before its length (was it truncated while being read?)",
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{TarReader, TarWriter};

    fn archive(members: &[(&str, usize)]) -> Vec<u8> {
        let mut out = Vec::new();
        let mut w = TarWriter::new(&mut out);
        for (i, (name, len)) in members.iter().enumerate() {
            let data: Vec<u8> = (0..*len).map(|j| (i * 7 + j) as u8).collect();
            w.append(name, &data).unwrap();
        }
        w.finish().unwrap();
        out
    }

    /// Every member and the error, as the in-memory reader and the stream see them.
    fn both(bytes: &[u8], buf: usize) -> (Vec<String>, Vec<String>) {
        let mut a = Vec::new();
        for e in TarReader::new(bytes) {
            match e {
                Ok(e) => a.push(format!(
                    "{} {:?} {} {:?}",
                    e.name, e.kind, e.header_offset, e.data
                )),
                Err(e) => a.push(format!("error {e}")),
            }
        }
        let mut b = Vec::new();
        let mut s = TarStream::new(bytes, bytes.len() as u64, vec![0; buf]);
        loop {
            match s.next_header() {
                Ok(Some(h)) => {
                    let (name, kind, off, size) =
                        (h.name.to_string(), h.kind, h.header_offset, h.size);
                    let mut data = Vec::new();
                    // Read every other member's data; skip the rest.
                    if b.len() % 2 == 0 {
                        if let Err(e) = s.read_data(size, &mut data) {
                            b.push(format!("error {e}"));
                            break;
                        }
                    } else {
                        data = bytes[(off as usize + BLOCK)..(off + BLOCK as u64 + size) as usize]
                            .to_vec();
                    }
                    b.push(format!("{name} {kind:?} {off} {data:?}"));
                }
                Ok(None) => break,
                Err(e) => {
                    b.push(format!("error {e}"));
                    break;
                }
            }
        }
        (a, b)
    }

    #[test]
    fn the_stream_sees_what_the_in_memory_reader_sees() {
        let whole = archive(&[
            ("a.cls", 1),
            ("a.jpg", 3000),
            ("b.cls", 0),
            ("b.jpg", 512),
            ("c.json", 70000),
        ]);
        // Whole, cut at every kind of place, and with a corrupted header.
        let mut cases = vec![whole.clone()];
        for cut in [
            0,
            100,
            512,
            700,
            1024,
            1536,
            5000,
            whole.len() - 1024,
            whole.len() - 1,
        ] {
            cases.push(whole[..cut].to_vec());
        }
        let mut bad = whole.clone();
        bad[1024 + 10] ^= 1;
        cases.push(bad);
        for bytes in &cases {
            for buf in [1024, 1536, 4096, 1 << 20] {
                let (a, b) = both(bytes, buf);
                assert_eq!(a, b, "length {} buffer {buf}", bytes.len());
            }
        }
    }

    #[test]
    fn tail_reports_the_marker_and_what_follows() {
        let mut bytes = archive(&[("a.cls", 1)]);
        let end = 1024u64;
        bytes.extend_from_slice(&[0, 0, 7, 0]);
        let mut s = TarStream::new(&bytes[..], bytes.len() as u64, vec![0; 1024]);
        while s.next_header().unwrap().is_some() {}
        let t = s.tail().unwrap();
        assert_eq!(t.end, end);
        assert_eq!(t.len, bytes.len() as u64 - end);
        assert_eq!(t.first_nonzero, Some(bytes.len() as u64 - 2));
        assert_eq!(s.offset(), bytes.len() as u64);
    }

    #[test]
    fn a_source_shorter_than_its_length_is_an_io_error() {
        let bytes = archive(&[("a.jpg", 5000)]);
        let mut s = TarStream::new(&bytes[..2000], bytes.len() as u64, vec![0; 1024]);
        let h = s.next_header().unwrap().unwrap();
        assert_eq!(h.size, 5000);
        let mut data = Vec::new();
        let size = h.size;
        let err = s.read_data(size, &mut data).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::UnexpectedEof);
    }
}
