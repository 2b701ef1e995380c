//! Validating tar reader over a byte slice, and WebDataset sample grouping.

use crate::BLOCK;
use std::borrow::Cow;

/// What a tar member is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryKind {
    /// A regular file (type `0` or NUL).
    Regular,
    /// A directory (type `5`).
    Directory,
    /// A hard or symbolic link (type `1` or `2`).
    Link,
    /// A character or block device or a FIFO (types `3`, `4`, `6`).
    Device,
    /// A pax or GNU metadata header (types `x`, `g`, `L`, `K`), which we never write.
    Extension,
    /// Anything else.
    Other(u8),
}

/// One member of a tar stream, borrowing its data from the archive bytes.
#[derive(Debug, Clone)]
pub struct Entry<'a> {
    /// Full member name (USTAR prefix joined with name). Borrowed from the header unless a
    /// USTAR prefix had to be joined to it.
    pub name: Cow<'a, str>,
    /// Member type.
    pub kind: EntryKind,
    /// Offset of the member's header in the archive.
    pub header_offset: u64,
    /// The member's data.
    pub data: &'a [u8],
}

/// Why an archive could not be read further.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ReadError {
    /// The archive ends inside a header or member.
    #[error("archive truncated at byte {offset}: {what}")]
    Truncated {
        /// Where the missing bytes start.
        offset: u64,
        /// What was being read.
        what: &'static str,
    },
    /// A header's checksum does not match its bytes.
    #[error("bad header checksum at byte {offset}")]
    BadChecksum {
        /// Header offset.
        offset: u64,
    },
    /// A numeric header field is not valid octal.
    #[error("bad {field} field in header at byte {offset}")]
    BadNumber {
        /// Header offset.
        offset: u64,
        /// Field name.
        field: &'static str,
    },
    /// A member name is not UTF-8.
    #[error("member name at byte {offset} is not UTF-8")]
    BadName {
        /// Header offset.
        offset: u64,
    },
}

/// Iterates over the members of an in-memory tar archive. Stops (returning `None`) at the
/// end-of-archive marker; yields one `Err` and then stops on malformed input. Never panics and
/// allocates only for a name with a USTAR prefix.
pub struct TarReader<'a> {
    bytes: &'a [u8],
    pos: usize,
    done: bool,
    /// The next header's own name will be replaced (see [`parse_header_named`]).
    renamed: bool,
}

impl<'a> TarReader<'a> {
    /// Reads `bytes` as a tar archive.
    pub fn new(bytes: &'a [u8]) -> Self {
        Self {
            bytes,
            pos: 0,
            done: false,
            renamed: false,
        }
    }

    fn next_entry(&mut self) -> Result<Option<Entry<'a>>, ReadError> {
        let offset = self.pos as u64;
        if self.pos == self.bytes.len() {
            // A stream without the end marker: tolerated (webdataset does too), reported by verify.
            return Ok(None);
        }
        let bytes: &'a [u8] = self.bytes;
        let Some(h) = bytes.get(self.pos..self.pos + BLOCK) else {
            return Err(ReadError::Truncated {
                offset,
                what: "header",
            });
        };
        let Some(h) = parse_header_named(h, offset, self.renamed)? else {
            return Ok(None);
        };
        let start = self.pos + BLOCK;
        let (end, padded) = member_end(offset, h.size, self.bytes.len() as u64)?;
        // `end` is within `bytes`, so it fits a usize; the padding may be cut off.
        let end = end as usize;
        self.pos = usize::try_from(padded).map_or(self.bytes.len(), |p| p.min(self.bytes.len()));
        Ok(Some(Entry {
            name: h.name,
            kind: h.kind,
            header_offset: offset,
            data: &bytes[start..end],
        }))
    }
}

/// A parsed header block: the member's name, type and the number of data bytes that follow it
/// in the archive.
pub(crate) struct Header<'h> {
    pub name: Cow<'h, str>,
    pub kind: EntryKind,
    pub size: u64,
    /// The type byte, which tells extension headers apart (`x` pax, `L` GNU long name, …).
    pub flag: u8,
}

/// Parses the header block `h` (512 bytes) found at `offset`; `None` for an all-zero block (the
/// start of the end-of-archive marker). Allocates only for a name with a USTAR prefix.
pub(crate) fn parse_header(h: &[u8], offset: u64) -> Result<Option<Header<'_>>, ReadError> {
    parse_header_named(h, offset, false)
}

/// [`parse_header`], taking a name that is not UTF-8 as it reads (lossily) when `renamed`: a
/// pax or GNU long name before the member replaces it, and GNU tar cuts a long name to its first
/// 100 bytes, which may split a character.
pub(crate) fn parse_header_named(
    h: &[u8],
    offset: u64,
    renamed: bool,
) -> Result<Option<Header<'_>>, ReadError> {
    if h.iter().all(|&b| b == 0) {
        return Ok(None);
    }
    let stored = parse_octal(&h[148..156]).ok_or(ReadError::BadNumber {
        offset,
        field: "checksum",
    })?;
    // The header checksum treats its own eight bytes as spaces: one plain sum over the block
    // minus those bytes. It runs once per member.
    let all = byte_sum(h);
    let own: u32 = h[148..156].iter().map(|&b| u32::from(b)).sum();
    let computed = u64::from(all - own + 8 * u32::from(b' '));
    if stored != computed {
        return Err(ReadError::BadChecksum { offset });
    }
    let size = parse_octal(&h[124..136]).ok_or(ReadError::BadNumber {
        offset,
        field: "size",
    })?;
    let name = cstr(&h[..100]);
    let is_ustar = &h[257..262] == b"ustar";
    let prefix = if is_ustar { cstr(&h[345..500]) } else { &[] };
    let bad_name = || ReadError::BadName { offset };
    let full: Cow<'_, [u8]> = if prefix.is_empty() {
        Cow::Borrowed(name)
    } else {
        Cow::Owned([prefix, b"/", name].concat())
    };
    // A renamed member's own name is read as it is: its long name replaces it.
    let name: Cow<'_, str> = match full {
        Cow::Borrowed(b) => match std::str::from_utf8(b) {
            Ok(s) => Cow::Borrowed(s),
            Err(_) if renamed => String::from_utf8_lossy(b),
            Err(_) => return Err(bad_name()),
        },
        Cow::Owned(v) => match String::from_utf8(v) {
            Ok(s) => Cow::Owned(s),
            Err(e) if renamed => Cow::Owned(String::from_utf8_lossy(e.as_bytes()).into_owned()),
            Err(_) => return Err(bad_name()),
        },
    };
    let kind = match h[156] {
        b'0' | 0 | b'7' => EntryKind::Regular,
        b'1' | b'2' => EntryKind::Link,
        b'3' | b'4' | b'6' => EntryKind::Device,
        b'5' => EntryKind::Directory,
        b'x' | b'g' | b'L' | b'K' => EntryKind::Extension,
        other => EntryKind::Other(other),
    };
    // Links and devices carry no data in the archive whatever their size field says.
    let size = match kind {
        EntryKind::Link | EntryKind::Device | EntryKind::Directory => 0,
        _ => size,
    };
    Ok(Some(Header {
        name,
        kind,
        size,
        flag: h[156],
    }))
}

/// The name an extension member of type `flag` gives the member after it, as tar and Python's
/// `tarfile` (which webdataset's writers use) read it: a pax header's last `path` record (type
/// `x`), or a GNU long-name member's data up to its NUL (type `L`). `None` for other extensions,
/// malformed records and names that are not UTF-8 (the member keeps its header's name).
pub(crate) fn long_name(flag: u8, data: &[u8]) -> Option<&str> {
    match flag {
        b'L' => std::str::from_utf8(cstr(data))
            .ok()
            .filter(|n| !n.is_empty()),
        b'x' => {
            let mut path = None;
            let mut rest = data;
            // Records: "<length> <key>=<value>\n", the length counting the whole record.
            while !rest.is_empty() && rest[0] != 0 {
                let space = rest.iter().take(20).position(|&b| b == b' ')?;
                let len: usize = std::str::from_utf8(&rest[..space]).ok()?.parse().ok()?;
                let record = rest.get(space + 1..len)?;
                let (newline, body) = record.split_last()?;
                if *newline != b'\n' {
                    return None;
                }
                let eq = body.iter().position(|&b| b == b'=')?;
                if &body[..eq] == b"path" {
                    path = Some(std::str::from_utf8(&body[eq + 1..]).ok()?);
                }
                rest = &rest[len..];
            }
            path.filter(|p| !p.is_empty())
        }
        _ => None,
    }
}

/// Where the data of the member whose header is at `offset` ends, without and with its padding
/// to the block size (the padding may run past the archive's end), or the error when the data
/// runs past `archive_len`.
pub(crate) fn member_end(
    offset: u64,
    size: u64,
    archive_len: u64,
) -> Result<(u64, u64), ReadError> {
    let start = offset + BLOCK as u64;
    let end = start
        .checked_add(size)
        .filter(|&e| e <= archive_len)
        .ok_or(ReadError::Truncated {
            offset: start,
            what: "member data",
        })?;
    Ok((end, start + size.div_ceil(BLOCK as u64) * BLOCK as u64))
}

impl<'a> Iterator for TarReader<'a> {
    type Item = Result<Entry<'a>, ReadError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        match self.next_entry() {
            Ok(Some(e)) => Some(Ok(e)),
            Ok(None) => {
                self.done = true;
                None
            }
            Err(e) => {
                self.done = true;
                Some(Err(e))
            }
        }
    }
}

/// The sum of a header block's bytes (up to 512 of them). Sixteen `u16` lanes, each adding
/// every sixteenth byte (at most 32 × 255, no overflow), compile to wide vector adds: a third of
/// the time of one `u32` sum over the bytes, which the compiler widened 4 bytes at a time.
fn byte_sum(h: &[u8]) -> u32 {
    debug_assert!(h.len() <= BLOCK);
    let mut lanes = [0u16; 16];
    let chunks = h.chunks_exact(16);
    let tail: u32 = chunks.remainder().iter().map(|&b| u32::from(b)).sum();
    for c in chunks {
        for (l, &b) in lanes.iter_mut().zip(c) {
            *l += u16::from(b);
        }
    }
    lanes.iter().map(|&l| u32::from(l)).sum::<u32>() + tail
}

fn cstr(field: &[u8]) -> &[u8] {
    let end = field.iter().position(|&b| b == 0).unwrap_or(field.len());
    &field[..end]
}

/// A numeric header field: octal digits, optionally with a leading `+`, surrounded by spaces and
/// ended by a NUL or the field's end; an all-space field is 0. Overflow is an error. (What
/// `u64::from_str_radix(text.trim_matches(' '), 8)` accepts, without the UTF-8 and string steps:
/// this runs twice per member.)
fn parse_octal(field: &[u8]) -> Option<u64> {
    let text = cstr(field);
    let start = text.iter().position(|&b| b != b' ').unwrap_or(text.len());
    let end = text
        .iter()
        .rposition(|&b| b != b' ')
        .map_or(start, |i| i + 1);
    let digits = match &text[start..end] {
        [] => return Some(0),
        [b'+', rest @ ..] if !rest.is_empty() => rest,
        d => d,
    };
    digits.iter().try_fold(0u64, |v, &b| {
        let d = b.wrapping_sub(b'0');
        if d > 7 {
            return None;
        }
        v.checked_mul(8)?.checked_add(u64::from(d))
    })
}

/// Splits a member name into `(key, field)` by the WebDataset rule: at the first `.` of the last
/// path component (`d.1/x.seg.png` → `("d.1/x", "seg.png")`). Names without a `.` in their last
/// component have an empty field.
pub fn split_name(name: &str) -> (&str, &str) {
    let base_start = name.rfind('/').map_or(0, |i| i + 1);
    match name[base_start..].find('.') {
        Some(dot) => (&name[..base_start + dot], &name[base_start + dot + 1..]),
        None => (name, ""),
    }
}

/// A WebDataset sample: a run of consecutive regular members sharing one key.
#[derive(Debug, Clone)]
pub struct Sample<'a> {
    /// The shared key.
    pub key: String,
    /// `(field, data)` in archive order.
    pub fields: Vec<(String, &'a [u8])>,
}

impl Sample<'_> {
    /// The data of `field`, if present.
    pub fn get(&self, field: &str) -> Option<&[u8]> {
        self.fields
            .iter()
            .find(|(f, _)| f == field)
            .map(|(_, d)| *d)
    }
}

/// Groups regular members into samples as WebDataset does, skipping `__*__` names and non-regular
/// members; a member named by a pax `path` record or a GNU long-name member before it takes that
/// name. Returns the samples and the first read error, if any (samples before it are kept).
pub fn group_samples(bytes: &[u8]) -> (Vec<Sample<'_>>, Option<ReadError>) {
    let mut samples: Vec<Sample<'_>> = Vec::new();
    let mut long: Option<&str> = None;
    let mut reader = TarReader::new(bytes);
    loop {
        reader.renamed = long.is_some();
        let entry = match reader.next() {
            None => break,
            Some(Ok(e)) => e,
            Some(Err(e)) => return (samples, Some(e)),
        };
        if entry.kind == EntryKind::Extension {
            // The type byte of the header the reader has just validated.
            let flag = bytes[entry.header_offset as usize + 156];
            if entry.data.len() as u64 <= crate::MAX_EXTENSION_BYTES {
                if let Some(n) = long_name(flag, entry.data) {
                    long = Some(n);
                }
            }
            continue;
        }
        let name = long.take().unwrap_or(&entry.name);
        if entry.kind != EntryKind::Regular {
            continue;
        }
        if crate::is_metadata_member(name) {
            continue;
        }
        let (key, field) = split_name(name);
        let field = field.to_ascii_lowercase();
        match samples.last_mut() {
            Some(last) if last.key == key => last.fields.push((field, entry.data)),
            _ => samples.push(Sample {
                key: key.to_string(),
                fields: vec![(field, entry.data)],
            }),
        }
    }
    (samples, None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The definition `parse_octal` must match.
    fn reference(field: &[u8]) -> Option<u64> {
        let text = std::str::from_utf8(cstr(field)).ok()?.trim_matches(' ');
        if text.is_empty() {
            return Some(0);
        }
        u64::from_str_radix(text, 8).ok()
    }

    #[test]
    fn octal_fields_parse_as_the_definition_says() {
        for f in [
            &b"0000644\0"[..],
            b"  17 \0",
            b"+7",
            b"+",
            b"-1",
            b"1 2",
            b"        ",
            b"\0garbage",
            b"7777777777777777777777",
            b"1777777777777777777777",
            b"\xff1",
            b"12\xff",
            b"",
        ] {
            assert_eq!(parse_octal(f), reference(f), "{f:?}");
        }
    }

    proptest! {
        #[test]
        fn octal_fields_match_the_definition(
            f in prop::collection::vec(prop::sample::select(b" +-0123456789\0\xffa".to_vec()), 0..24)
        ) {
            prop_assert_eq!(parse_octal(&f), reference(&f));
        }

        #[test]
        fn byte_sums_match_the_plain_sum(h in prop::collection::vec(any::<u8>(), 0..=BLOCK), fill in any::<bool>()) {
            // Random blocks and lengths, and all-0xff ones (the largest sums the lanes hold).
            let h = if fill { vec![0xff; h.len()] } else { h };
            prop_assert_eq!(byte_sum(&h), h.iter().map(|&b| u32::from(b)).sum::<u32>());
        }
    }
}
