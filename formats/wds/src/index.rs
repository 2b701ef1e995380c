//! Indexing an archive by its headers alone: where each WebDataset sample starts and ends, so a
//! sample can later be read with one positioned read, without reading any member's data now.

use crate::reader::{member_end, parse_header_named, split_name, EntryKind, ReadError};
use crate::BLOCK;
use std::io;

/// One member of an indexed sample.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberSpan {
    /// Its field (the name after the key's dot), lower-cased as webdataset does.
    pub field: String,
    /// Offset of its data in the archive.
    pub data_offset: u64,
    /// Bytes of data.
    pub size: u64,
}

/// A WebDataset sample as found by [`index_samples`]: its members are the regular members of
/// `[start, end)` whose key is `key` (other members in that span are the ones
/// [`group_samples`](crate::group_samples) skips as well).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SampleSpan {
    /// The shared key.
    pub key: String,
    /// Offset of its first member's header.
    pub start: u64,
    /// End of its last member's data (before padding).
    pub end: u64,
    /// Its members, in archive order.
    pub members: Vec<MemberSpan>,
}

/// Why indexing stopped before the end of the archive.
#[derive(Debug, thiserror::Error)]
pub enum IndexError {
    /// The archive is malformed at some offset.
    #[error(transparent)]
    Tar(#[from] ReadError),
    /// Reading failed.
    #[error(transparent)]
    Io(#[from] io::Error),
}

/// The most bytes of a pax or GNU long-name header read for the name it gives; a larger one
/// names nothing.
pub const MAX_EXTENSION_BYTES: u64 = 1 << 20;

/// Reads the headers of an archive of `len` bytes through `read_at(offset, buf)` (which fills
/// `buf` from `offset`) and calls `on_sample` with every sample, grouped as
/// [`group_samples`](crate::group_samples) groups them: consecutive regular members sharing a key,
/// `__*__` names and other member types skipped. Data is never read, so a header costs one 512-byte
/// read. On a malformed archive the error is returned after the whole samples before the damage
/// have been delivered; the sample the damage may have cut short is not delivered.
pub fn index_samples(
    len: u64,
    mut read_at: impl FnMut(u64, &mut [u8]) -> io::Result<()>,
    mut on_sample: impl FnMut(SampleSpan),
) -> Result<(), IndexError> {
    let mut block = [0u8; BLOCK];
    let mut offset = 0u64;
    let mut current: Option<SampleSpan> = None;
    // A pax or GNU long name for the next member, and where the extension headers before it
    // start (its sample's span starts there, so that grouping the span's bytes names it alike).
    let mut long: Option<String> = None;
    let mut extension_start: Option<u64> = None;
    loop {
        if offset >= len {
            break;
        }
        if len - offset < BLOCK as u64 {
            return Err(ReadError::Truncated {
                offset,
                what: "header",
            }
            .into());
        }
        read_at(offset, &mut block)?;
        let Some(h) = parse_header_named(&block, offset, long.is_some())? else {
            break;
        };
        let (end, padded) = match member_end(offset, h.size, len) {
            Ok(e) => e,
            Err(e) => {
                // The sample being gathered is whole only if the cut member starts another one.
                let (key, _) = split_name(long.as_deref().unwrap_or(&h.name));
                if let Some(done) = current.take().filter(|s| s.key != key) {
                    on_sample(done);
                }
                return Err(e.into());
            }
        };
        if h.kind == EntryKind::Extension {
            extension_start.get_or_insert(offset);
            // A larger one (extended attributes, say) names nothing here, as in `group_samples`.
            if matches!(h.flag, b'x' | b'L') && h.size <= MAX_EXTENSION_BYTES {
                let mut data = vec![0u8; h.size as usize];
                read_at(offset + BLOCK as u64, &mut data)?;
                if let Some(n) = crate::reader::long_name(h.flag, &data) {
                    long = Some(n.to_string());
                }
            }
            offset = padded;
            continue;
        }
        let first_header = extension_start.take().unwrap_or(offset);
        let name = match long.take() {
            Some(n) => std::borrow::Cow::Owned(n),
            None => h.name,
        };
        if h.kind == EntryKind::Regular && !crate::is_metadata_member(&name) {
            let (key, field) = split_name(&name);
            let member = MemberSpan {
                field: field.to_ascii_lowercase(),
                data_offset: offset + BLOCK as u64,
                size: h.size,
            };
            match current.as_mut() {
                Some(s) if s.key == key => {
                    s.end = end;
                    s.members.push(member);
                }
                _ => {
                    if let Some(done) = current.take() {
                        on_sample(done);
                    }
                    current = Some(SampleSpan {
                        key: key.to_string(),
                        start: first_header,
                        end,
                        members: vec![member],
                    });
                }
            }
        }
        offset = padded;
    }
    if let Some(done) = current {
        on_sample(done);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::group_samples;

    fn archive(members: &[(&str, &[u8])]) -> Vec<u8> {
        crate::tar_bytes(members.iter().copied()).unwrap()
    }

    fn index(bytes: &[u8]) -> (Vec<SampleSpan>, Option<String>) {
        let mut out = Vec::new();
        let r = index_samples(
            bytes.len() as u64,
            |at, buf| {
                let at = at as usize;
                buf.copy_from_slice(&bytes[at..at + buf.len()]);
                Ok(())
            },
            |s| out.push(s),
        );
        (out, r.err().map(|e| e.to_string()))
    }

    #[test]
    fn spans_hold_the_same_samples_as_grouping_the_bytes() {
        let bytes = archive(&[
            ("a.jpg", b"jjj"),
            ("a.TXT", b"caption"),
            ("__meta__", b"skip"),
            ("b.jpg", b"j2"),
            ("dir/c.seg.png", b"p"),
            ("dir/c.json", b"{}"),
        ]);
        let (spans, err) = index(&bytes);
        assert_eq!(err, None);
        let (samples, e) = group_samples(&bytes);
        assert!(e.is_none());
        assert_eq!(spans.len(), samples.len());
        for (span, sample) in spans.iter().zip(&samples) {
            assert_eq!(span.key, sample.key);
            // Re-grouping the span alone yields the sample, fields and data alike.
            let (again, e) = group_samples(&bytes[span.start as usize..span.end as usize]);
            assert!(e.is_none());
            assert_eq!(again.len(), 1);
            assert_eq!(again[0].fields, sample.fields);
            let fields: Vec<(&str, &[u8])> = span
                .members
                .iter()
                .map(|m| {
                    let at = m.data_offset as usize;
                    (m.field.as_str(), &bytes[at..at + m.size as usize])
                })
                .collect();
            let want: Vec<(&str, &[u8])> = sample
                .fields
                .iter()
                .map(|(f, d)| (f.as_str(), *d))
                .collect();
            assert_eq!(fields, want);
        }
        assert_eq!(spans[0].members[1].field, "txt");
    }

    /// A member appended with its header, data and padding.
    fn member(out: &mut Vec<u8>, name: &str, flag: u8, data: &[u8]) {
        out.extend(crate::ustar_header(name, data.len() as u64, flag, "").unwrap());
        out.extend(data);
        out.resize(out.len().next_multiple_of(BLOCK), 0);
    }

    /// A pax record: its length counts itself.
    fn pax(key: &str, value: &str) -> Vec<u8> {
        let body = format!(" {key}={value}\n");
        let mut len = body.len() + 1;
        while len.to_string().len() + body.len() != len {
            len += 1;
        }
        format!("{len}{body}").into_bytes()
    }

    /// Names Python's `tarfile` writes in pax headers (not ASCII, or over 100 bytes) and GNU
    /// long-name members name the member after them, when indexed and when grouped alike.
    #[test]
    fn pax_and_gnu_long_names_name_the_next_member() {
        let long = format!("{}/sample", "d".repeat(120));
        let mut bytes = Vec::new();
        let records = [pax("mtime", "1.5"), pax("path", "Ünï.jpg")].concat();
        member(&mut bytes, "././@PaxHeader", b'x', &records);
        member(&mut bytes, "Uni.jpg", b'0', b"image 1");
        member(&mut bytes, "././@PaxHeader", b'x', &pax("path", "Ünï.txt"));
        member(&mut bytes, "Uni.txt", b'0', b"caption 1");
        member(&mut bytes, "././@PaxHeader", b'x', &pax("path", "Änï.jpg"));
        member(&mut bytes, "Uni.jpg", b'0', b"image 2");
        member(
            &mut bytes,
            "././@LongLink",
            b'L',
            format!("{long}.jpg\0").as_bytes(),
        );
        member(&mut bytes, "d/sample.jpg", b'0', b"image 3");
        member(
            &mut bytes,
            "././@LongLink",
            b'L',
            format!("{long}.cls").as_bytes(),
        );
        member(&mut bytes, "d/sample.cls", b'0', b"3");
        // A global pax header names nothing.
        member(
            &mut bytes,
            "pax_global_header",
            b'g',
            &pax("path", "ignored"),
        );
        member(&mut bytes, "plain.jpg", b'0', b"image 4");
        bytes.extend([0; 2 * BLOCK]);
        let (spans, err) = index(&bytes);
        assert_eq!(err, None);
        let keys: Vec<&str> = spans.iter().map(|s| s.key.as_str()).collect();
        assert_eq!(keys, ["Ünï", "Änï", long.as_str(), "plain"]);
        assert_eq!(spans[0].members.len(), 2);
        assert_eq!(spans[2].members[1].field, "cls");
        let (samples, e) = group_samples(&bytes);
        assert!(e.is_none());
        let grouped: Vec<&str> = samples.iter().map(|s| s.key.as_str()).collect();
        assert_eq!(grouped, keys);
        assert_eq!(samples[0].get("txt"), Some(&b"caption 1"[..]));
        assert_eq!(samples[1].get("jpg"), Some(&b"image 2"[..]));
        // Each span, grouped alone, names its sample as the whole archive does.
        for (span, sample) in spans.iter().zip(&samples) {
            let (again, e) = group_samples(&bytes[span.start as usize..span.end as usize]);
            assert!(e.is_none());
            assert_eq!(again.len(), 1);
            assert_eq!(again[0].key, sample.key);
            assert_eq!(again[0].fields, sample.fields);
        }
    }

    #[test]
    fn malformed_pax_records_and_oversized_extensions_name_nothing_or_stop() {
        use crate::reader::long_name;
        assert_eq!(long_name(b'x', &pax("path", "a.jpg")), Some("a.jpg"));
        assert_eq!(long_name(b'x', b"99 path=a.jpg\n"), None);
        assert_eq!(long_name(b'x', b"12 path=a.jpg"), None);
        assert_eq!(long_name(b'x', b"x path=a\n"), None);
        assert_eq!(long_name(b'x', &pax("path", "")), None);
        assert_eq!(long_name(b'x', &[0xff; 40]), None);
        assert_eq!(long_name(b'L', b"name.jpg\0\0\0"), Some("name.jpg"));
        assert_eq!(long_name(b'L', b"\xff.jpg"), None);
        assert_eq!(long_name(b'K', b"link"), None);
        // A pax header over the bound names nothing, in both readings: the member keeps its own.
        let mut bytes = Vec::new();
        let mut big = pax("path", "b.jpg");
        big.extend(pax("comment", &"c".repeat(MAX_EXTENSION_BYTES as usize)));
        member(&mut bytes, "././@PaxHeader", b'x', &big);
        member(&mut bytes, "a.jpg", b'0', b"1");
        let (spans, err) = index(&bytes);
        assert_eq!(err, None);
        assert_eq!(spans.len(), 1);
        assert_eq!(spans[0].key, "a");
        assert_eq!(group_samples(&bytes).0[0].key, "a");
    }

    /// GNU tar keeps the first 100 bytes of a long name in the header, which may split a UTF-8
    /// character: with the long name before it, that header name is not needed and no error.
    #[test]
    fn a_split_character_in_a_renamed_header_is_no_error() {
        let long = format!("{}-\u{65e5}\u{672c}", "x".repeat(98));
        let cut = long.as_bytes()[..100].to_vec();
        assert!(std::str::from_utf8(&cut).is_err());
        let mut bytes = Vec::new();
        member(
            &mut bytes,
            "././@LongLink",
            b'L',
            format!("{long}.jpg").as_bytes(),
        );
        let mut h = crate::ustar_header("placeholder", 1, b'0', "").unwrap();
        h[..100].copy_from_slice(&cut);
        h[148..156].fill(b' ');
        let sum: u32 = h.iter().map(|&b| u32::from(b)).sum();
        h[148..156].copy_from_slice(format!("{sum:06o}\0 ").as_bytes());
        bytes.extend(h);
        bytes.extend([7u8]);
        bytes.resize(bytes.len().next_multiple_of(BLOCK), 0);
        let (spans, err) = index(&bytes);
        assert_eq!(err, None);
        assert_eq!(spans[0].key, long);
        let (samples, err) = group_samples(&bytes);
        assert!(err.is_none());
        assert_eq!(samples[0].key, long);
        // Without the long name the same header is an error, as before.
        let (_, err) = group_samples(&bytes[BLOCK * 2..]);
        assert!(err.is_some());
    }

    #[test]
    fn truncation_keeps_the_whole_samples_before_it() {
        let bytes = archive(&[("a.jpg", b"1"), ("b.jpg", &[7; 2000]), ("b.cls", b"3")]);
        // Cut inside b.jpg's data.
        let cut = &bytes[..1024 + 512 + 700];
        let (spans, err) = index(cut);
        assert_eq!(spans.iter().map(|s| &s.key[..]).collect::<Vec<_>>(), ["a"]);
        assert!(err.unwrap().contains("truncated"));
        let (full, _) = index(&bytes);
        let cls_header = full[1].members[1].data_offset as usize - BLOCK;
        let (spans, err) = index(&bytes[..cls_header + 100]);
        assert!(err.is_some(), "the end is cut inside b.cls's header");
        // b may be missing members: it is not delivered.
        assert_eq!(spans.iter().map(|s| &s.key[..]).collect::<Vec<_>>(), ["a"]);
    }
}
