//! A write buffer that passes data on in whole, aligned blocks, so that the page cache can hold
//! the file in large folios and later mapped reads of it are cheap.
//!
//! Why: on kernels whose filesystem caches files in large folios (ext4 and XFS on Linux 6.x),
//! the folio size follows the size and alignment of the writes that filled the page cache. A
//! `BufWriter` flushes whenever the next write does not fit, so its flushes drift off any
//! alignment and leave the file in small folios. Mapping and touching 64 MiB written through a
//! 1 MiB `BufWriter` took 1.7 ms on the development machine; written in aligned 2 MiB blocks,
//! 0.22 ms. Every reader of the shards (`verify`, the loader, the cache) maps them.

use std::io::{self, Write};

/// The block size: 2 MiB, the size of an x86-64 huge page, which is what the kernel maps a large
/// folio with in one step.
pub const WRITE_BLOCK: usize = 2 << 20;

/// Buffers writes and passes them on to `W` in blocks that end at multiples of the block size,
/// counted from the file offset given at creation. Writes larger than the free room go straight
/// through, block by block, without a copy. [`Write::flush`] passes on a partial block (and keeps
/// later blocks aligned); dropping the writer flushes it, ignoring errors, as `BufWriter` does:
/// call [`BlockWriter::into_inner`] or `flush` to see them.
pub struct BlockWriter<W: Write> {
    inner: Option<W>,
    buf: Vec<u8>,
    block: usize,
    /// Bytes from the start of `buf` to the next block boundary of the file.
    room: usize,
}

impl<W: Write> BlockWriter<W> {
    /// Wraps `inner`, whose next write lands at offset 0 of the file (a fresh file).
    pub fn new(inner: W) -> Self {
        Self::with_offset(inner, 0, WRITE_BLOCK)
    }

    /// Wraps `inner`, whose next write lands at file offset `offset`, with blocks of `block`
    /// bytes (at least 1).
    pub fn with_offset(inner: W, offset: u64, block: usize) -> Self {
        let block = block.max(1);
        // `offset % block` is below `block`, a usize.
        let into = usize::try_from(offset % block as u64).unwrap_or(0);
        Self {
            inner: Some(inner),
            buf: Vec::new(),
            block,
            room: block - into,
        }
    }

    /// The wrapped writer.
    pub fn get_ref(&self) -> &W {
        self.inner.as_ref().expect("present until into_inner")
    }

    /// Passes on what is buffered and returns the wrapped writer.
    pub fn into_inner(mut self) -> io::Result<W> {
        self.flush_buf()?;
        Ok(self.inner.take().expect("present until into_inner"))
    }

    fn inner(&mut self) -> &mut W {
        self.inner.as_mut().expect("present until into_inner")
    }

    /// Writes out the buffer; the next boundary moves closer by what was written.
    fn flush_buf(&mut self) -> io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let mut buf = std::mem::take(&mut self.buf);
        let result = self.inner().write_all(&buf);
        self.room -= buf.len();
        if self.room == 0 {
            self.room = self.block;
        }
        buf.clear();
        self.buf = buf;
        result
    }
}

impl<W: Write> Write for BlockWriter<W> {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        let mut rest = data;
        while !rest.is_empty() {
            if self.buf.is_empty() && rest.len() >= self.room {
                // A whole block (or the rest of the first one) straight from the caller's slice.
                let (now, later) = rest.split_at(self.room);
                self.inner().write_all(now)?;
                self.room = self.block;
                rest = later;
                continue;
            }
            let take = (self.room - self.buf.len()).min(rest.len());
            if self.buf.capacity() == 0 {
                self.buf.reserve_exact(self.block);
            }
            self.buf.extend_from_slice(&rest[..take]);
            rest = &rest[take..];
            if self.buf.len() == self.room {
                self.flush_buf()?;
            }
        }
        Ok(data.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.flush_buf()?;
        self.inner().flush()
    }
}

impl<W: Write> Drop for BlockWriter<W> {
    fn drop(&mut self) {
        if self.inner.is_some() {
            let _ = self.flush_buf();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Records the length and offset of every write it receives.
    #[derive(Default)]
    struct Log {
        data: Vec<u8>,
        writes: Vec<(usize, usize)>,
    }

    impl Write for Log {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.writes.push((self.data.len(), buf.len()));
            self.data.extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    fn pattern(n: usize) -> Vec<u8> {
        (0..n).map(|i| (i * 31 % 251) as u8).collect()
    }

    #[test]
    fn writes_reach_the_inner_writer_whole_and_in_aligned_blocks() {
        let data = pattern(10_000);
        for offset in [0u64, 1, 63, 64, 1000] {
            for sizes in [
                vec![1usize],
                vec![7, 100, 3],
                vec![64],
                vec![300],
                vec![5000],
            ] {
                let mut w = BlockWriter::with_offset(Log::default(), offset, 64);
                let mut pos = 0;
                let mut k = 0;
                while pos < data.len() {
                    let n = sizes[k % sizes.len()].min(data.len() - pos);
                    w.write_all(&data[pos..pos + n]).unwrap();
                    pos += n;
                    k += 1;
                }
                let log = w.into_inner().unwrap();
                assert_eq!(log.data, data, "offset {offset}, sizes {sizes:?}");
                let last = log.writes.len() - 1;
                for (i, &(at, len)) in log.writes.iter().enumerate() {
                    let end = offset as usize + at + len;
                    assert!(
                        end.is_multiple_of(64) || i == last,
                        "write {i} of {len} bytes ends off a boundary at {end} (offset {offset}, sizes {sizes:?})"
                    );
                }
            }
        }
    }

    #[test]
    fn a_flush_in_the_middle_keeps_later_blocks_aligned_and_drop_flushes() {
        let mut log = Log::default();
        {
            let mut w = BlockWriter::with_offset(&mut log, 0, 64);
            w.write_all(&pattern(10)).unwrap();
            w.flush().unwrap();
            w.write_all(&pattern(200)).unwrap();
        }
        assert_eq!(log.data.len(), 210);
        assert_eq!(
            log.writes,
            vec![(0, 10), (10, 54), (64, 64), (128, 64), (192, 18)]
        );
    }
}
