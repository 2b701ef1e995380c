//! The `manifest` fuzz target's check.

use shardtool_manifest::Manifest;

/// The byte limit a reader applies to a manifest (generous: inputs are small).
const LIMIT: u64 = 1 << 20;

/// `shardtool_manifest::Manifest::from_slice` on arbitrary bytes.
///
/// Invariant under test: parsing never panics; a manifest that validates serialises to JSON that
/// parses and validates again to an equal manifest.
pub fn manifest(data: &[u8]) {
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
