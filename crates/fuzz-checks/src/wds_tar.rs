//! The `wds_tar` fuzz target's check.

use shardtool_wds::{group_samples, split_name, StreamError, TarReader, TarStream, BLOCK};

/// `shardtool_wds::TarReader` over arbitrary bytes, then `group_samples`, then `TarStream` over the
/// same bytes.
///
/// Invariants under test: the reader never panics, stops after its first error, and every member
/// it yields borrows bytes from inside the input at or after its header; grouping fails only
/// where the reader does, and reads past the reader only at a header name that a long name
/// replaces; the stream (through a
/// small buffer, reading some members' data and skipping the rest) yields the same members and
/// the same error, and then reads the input to its end.
pub fn wds_tar(data: &[u8]) {
    let mut members = 0usize;
    let mut regular = 0usize;
    let mut errors = 0usize;
    let mut bad_name = false;
    let start = data.as_ptr() as usize;
    for entry in TarReader::new(data) {
        match entry {
            Ok(e) => {
                members += 1;
                assert_eq!(e.header_offset % BLOCK as u64, 0);
                assert!(e.header_offset + BLOCK as u64 <= data.len() as u64);
                if !e.data.is_empty() {
                    let off = e.data.as_ptr() as usize - start;
                    assert!(off as u64 >= e.header_offset + BLOCK as u64);
                    assert!(off + e.data.len() <= data.len());
                }
                if e.kind == shardtool_wds::EntryKind::Regular {
                    regular += 1;
                }
                let _ = split_name(&e.name);
            }
            Err(e) => {
                bad_name = matches!(e, shardtool_wds::ReadError::BadName { .. });
                errors += 1;
                assert_eq!(errors, 1, "the reader must stop after its first error");
            }
        }
        // Every member takes at least one block.
        assert!(members <= data.len() / BLOCK);
    }

    let (samples, err) = group_samples(data);
    if err.is_some() {
        assert_eq!(errors, 1, "grouping failed where the reader did not");
    }
    // A header whose own name is not UTF-8 stops the reader; grouping reads on when a pax or GNU
    // long name replaces that name (and may stop later, at another error). Any other error stops
    // both alike, so grouping then holds no more fields than the reader found regular members.
    let grouped_past = err.is_none() && errors == 1;
    assert!(
        !grouped_past || bad_name,
        "grouping read past a reader error other than a bad name"
    );
    if !bad_name {
        let fields: usize = samples.iter().map(|s| s.fields.len()).sum();
        assert!(fields <= regular);
    }
    for s in &samples {
        assert!(!s.fields.is_empty());
        if let Some((name, _)) = s.fields.first() {
            let _ = s.get(name);
        }
    }

    // The stream sees what the in-memory reader sees.
    let expected: Vec<_> = TarReader::new(data)
        .map(|e| {
            e.map(|e| {
                (
                    e.name.into_owned(),
                    e.kind,
                    e.header_offset,
                    e.data.to_vec(),
                )
            })
        })
        .collect();
    let mut stream = TarStream::new(data, data.len() as u64, vec![0; 1024]);
    let mut got = Vec::new();
    loop {
        match stream.next_header() {
            Ok(Some(h)) => {
                let (name, kind, offset, size) =
                    (h.name.into_owned(), h.kind, h.header_offset, h.size);
                let mut bytes = Vec::new();
                if got.len() % 2 == 0 {
                    stream
                        .read_data(size, &mut bytes)
                        .expect("a slice as long as stated");
                } else {
                    let start = (offset + BLOCK as u64) as usize;
                    bytes = data[start..start + size as usize].to_vec();
                }
                got.push(Ok((name, kind, offset, bytes)));
            }
            Ok(None) => break,
            Err(StreamError::Tar(e)) => {
                got.push(Err(e));
                break;
            }
            Err(StreamError::Io(e)) => panic!("reading a slice failed: {e}"),
        }
    }
    assert_eq!(got, expected);
    let tail = stream.tail().expect("reading a slice cannot fail");
    assert_eq!(stream.offset(), data.len() as u64);
    assert_eq!(tail.len, (data.len() as u64).saturating_sub(tail.end));
    if let Some(p) = tail.first_nonzero {
        assert!(p >= tail.end && p < data.len() as u64 && data[p as usize] != 0);
    }
}
