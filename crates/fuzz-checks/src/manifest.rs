//! The `manifest` fuzz target's check: the two files that describe a dataset, `manifest.json`
//! and `errors.jsonl`.

use shardtool_manifest::{errors, Manifest};

/// The byte limit a reader applies to a manifest (generous: inputs are small).
const LIMIT: u64 = 1 << 20;

/// `shardtool_manifest::Manifest::from_slice` and `errors::read_jsonl` on arbitrary bytes.
///
/// Invariants under test: parsing never panics; a manifest that validates serialises to JSON that
/// parses and validates again to an equal manifest; the report reader hands over one result per
/// line, and the records it reads are written back and read again unchanged.
pub fn manifest(data: &[u8]) {
    error_report(data);
    let Ok(m) = Manifest::from_slice(data, LIMIT) else {
        return;
    };
    let json = m.to_json();
    let again = Manifest::from_slice(&json, u64::MAX)
        .expect("a validated manifest must re-parse from its own JSON");
    // `pack` holds arbitrary JSON, whose floats may not round-trip bit for bit; compare the rest.
    assert_eq!(again.format, m.format);
    assert_eq!(again.version, m.version);
    assert_eq!(again.tool, m.tool);
    assert_eq!(again.inputs, m.inputs);
    assert_eq!(again.shards, m.shards);
    assert_eq!(again.totals, m.totals);
    assert_eq!(again.classes, m.classes);
    assert_eq!(again.fields, m.fields);
}

fn error_report(data: &[u8]) {
    let (mut lines, mut records) = (0usize, Vec::new());
    errors::read_jsonl(data, |line| {
        lines += 1;
        records.extend(line.ok());
    })
    .expect("reading a slice does not fail");
    let expected = match data {
        [] => 0,
        _ => data.split(|&b| b == b'\n').count() - usize::from(data.ends_with(b"\n")),
    };
    assert_eq!(lines, expected, "one result per line");
    let mut again = Vec::new();
    errors::read_jsonl(&errors::to_jsonl(&records)[..], |line| {
        again.push(line.expect("a written record reads back"))
    })
    .expect("reading a slice does not fail");
    assert_eq!(again, records);
}
