//! The `options` fuzz target's check: the parsers of option strings that Python users (and the
//! CLI) pass through, from transforms and resize specs to byte sizes and dataset locations.

use shardtool_cache::Location;
use shardtool_core::{parse_byte_size, Checksum};
use shardtool_image::{DecodeScale, Encode, Filter, ReducingGap, Resize};
use shardtool_pack::InputFormat;
use shardtool_reader::Transform;
use std::fmt::{Debug, Display};
use std::str::FromStr;

/// A value that parses prints as text that parses back to the same value.
fn round_trip<T>(text: &str)
where
    T: FromStr + Display + PartialEq + Debug,
{
    if let Ok(v) = text.parse::<T>() {
        let printed = v.to_string();
        match printed.parse::<T>() {
            Ok(again) => assert_eq!(again, v, "{text:?} printed as {printed:?}"),
            Err(_) => panic!("{text:?} parsed, but its printed form {printed:?} does not"),
        }
    }
}

/// Every option parser on the bytes as UTF-8 text (Python strings are): no panic, and each
/// parsed value round-trips through its printed form. Locations print with credentials masked,
/// so they are only parsed and printed.
pub fn options(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    round_trip::<Transform>(text);
    round_trip::<Resize>(text);
    round_trip::<Filter>(text);
    round_trip::<Encode>(text);
    round_trip::<DecodeScale>(text);
    round_trip::<ReducingGap>(text);
    if let Ok(n) = parse_byte_size(text) {
        assert_eq!(parse_byte_size(&n.to_string()).ok(), Some(n), "{text:?}");
    }
    if let Some(c) = Checksum::parse(text) {
        assert_eq!(Checksum::parse(&c.to_string()), Some(c), "{text:?}");
    }
    let _ = text.parse::<InputFormat>();
    if let Ok(l) = Location::parse(text) {
        let _ = l.to_string();
    }
}
