//! Parquet column values as a sample carries them: scalars, lists, structs and maps as JSON in
//! the sample's `.json`; binary values (a second image, a mask) as fields of their own.

use super::schema::Nanos;
use parquet::record::Field;
use serde_json::Value as V;

/// What a column other than the image, label and text gives a sample.
pub(crate) enum Carried<'r> {
    /// A member of the sample's `.json`.
    Json(V),
    /// A field of its own, named for the column ([`field_bases`]) and its content's extension
    /// (`mask.png`, `embedding.bin`), and what else the column held (a Hugging Face image
    /// struct's `path`) for the `.json`.
    Field {
        ext: &'static str,
        bytes: &'r [u8],
        rest: Option<V>,
    },
}

/// How a column's value `f` is carried. Binary that is an image becomes a field named
/// by its format, other binary a `.bin` field (in every row alike: which row happens to be
/// UTF-8 says nothing), except a string column's (`string`, read as bytes), whose UTF-8 values
/// are JSON strings; a struct with a binary `bytes` member (the Hugging Face `Image` feature)
/// is carried as its bytes, with the other members as JSON.
pub(crate) fn carried(f: &Field, string: bool) -> Carried<'_> {
    match f {
        Field::Bytes(b) if string => match std::str::from_utf8(b.data()) {
            Ok(text) => Carried::Json(V::String(text.into())),
            Err(_) => Carried::Field {
                ext: "bin",
                bytes: b.data(),
                rest: None,
            },
        },
        Field::Bytes(b) => binary(b.data(), None),
        Field::Group(g)
            if g.get_column_iter()
                .any(|(n, v)| n == "bytes" && matches!(v, Field::Bytes(_))) =>
        {
            let mut rest = serde_json::Map::new();
            let mut data: &[u8] = &[];
            for (n, v) in g.get_column_iter() {
                match (n.as_str(), v) {
                    ("bytes", Field::Bytes(b)) => data = b.data(),
                    _ => {
                        rest.insert(n.clone(), json(v));
                    }
                }
            }
            binary(data, Some(V::Object(rest)))
        }
        other => Carried::Json(json(other)),
    }
}

fn binary(bytes: &[u8], rest: Option<V>) -> Carried<'_> {
    Carried::Field {
        ext: image_format(bytes).unwrap_or("bin"),
        bytes,
        rest,
    }
}

/// The image format the bytes start with, as a field extension.
fn image_format(b: &[u8]) -> Option<&'static str> {
    Some(match b {
        [0xFF, 0xD8, 0xFF, ..] => "jpg",
        [0x89, b'P', b'N', b'G', 0x0D, 0x0A, 0x1A, 0x0A, ..] => "png",
        [b'R', b'I', b'F', b'F', _, _, _, _, b'W', b'E', b'B', b'P', ..] => "webp",
        [b'G', b'I', b'F', b'8', b'7' | b'9', b'a', ..] => "gif",
        [b'I', b'I', 0x2A, 0x00, ..] | [b'M', b'M', 0x00, 0x2A, ..] => "tiff",
        // `BM`, then (past the file size, two reserved words and the pixels' offset) the size
        // of a BITMAPINFOHEADER or a later one: not any text starting "BM".
        [b'B', b'M', _, _, _, _, _, _, _, _, _, _, _, _, h0, h1, 0, 0, ..]
            if matches!(
                u16::from_le_bytes([*h0, *h1]),
                12 | 40 | 52 | 56 | 64 | 108 | 124
            ) =>
        {
            "bmp"
        }
        _ => return None,
    })
}

/// A column name as field names spell it: lower case, characters other than a-z 0-9 _ - as
/// `_` (`Mask` and `mask` alike).
fn field_base(column: &str) -> String {
    (column.chars())
        .map(|c| match c.to_ascii_lowercase() {
            c @ ('a'..='z' | '0'..='9' | '_' | '-') => c,
            _ => '_',
        })
        .collect()
}

/// The field name (less its `.ext`) of each of `columns`, in order: its [`field_base`], cut to
/// leave room for a number and an extension, numbered (`mask_2`) when an earlier column took
/// it. From the names alone, so a column's field is named alike in every row.
pub(crate) fn field_bases<'a>(columns: impl Iterator<Item = &'a str>) -> Vec<String> {
    let mut taken: Vec<String> = Vec::new();
    for c in columns {
        let mut base: String = field_base(c).chars().take(52).collect();
        if base.is_empty() {
            base.push_str("column");
        }
        let (mut name, mut n) = (base.clone(), 1);
        while taken.contains(&name) {
            n += 1;
            name = format!("{base}_{n}");
        }
        taken.push(name);
    }
    taken
}

/// Writes the nanosecond times `at` marks in `v`, a nested column's JSON, as text, as
/// [`timestamp_nanos`] and [`time_nanos`] do for top-level columns (rows give them as integers).
pub(crate) fn nanos_as_text(v: &mut V, at: &Nanos) {
    match at {
        Nanos::Leaf(time) => {
            if let Some(n) = v.as_i64() {
                *v = V::String(match time {
                    true => time_nanos(n),
                    false => timestamp_nanos(n),
                });
            }
        }
        Nanos::Struct(members) => {
            if let V::Object(o) = v {
                for (name, at) in members {
                    if let Some(x) = o.get_mut(name) {
                        nanos_as_text(x, at);
                    }
                }
            }
        }
        Nanos::List(at) => {
            if let V::Array(a) = v {
                a.iter_mut().for_each(|x| nanos_as_text(x, at));
            }
        }
        // Text keys make an object; others a list of [key, value] pairs (see [`json`]).
        Nanos::Map(key, value) => match v {
            V::Object(o) => {
                if let Some(at) = value {
                    o.values_mut().for_each(|x| nanos_as_text(x, at));
                }
            }
            V::Array(pairs) => {
                for pair in pairs {
                    if let V::Array(kv) = pair {
                        for (x, at) in kv.iter_mut().zip([key, value]) {
                            if let Some(at) = at {
                                nanos_as_text(x, at);
                            }
                        }
                    }
                }
            }
            _ => {}
        },
    }
}

/// Nanoseconds since the epoch as the record API writes its micros, in UTC:
/// `2023-11-14 22:13:20.000000155 +00:00`.
pub(crate) fn timestamp_nanos(v: i64) -> String {
    let (secs, nanos) = (v.div_euclid(1_000_000_000), v.rem_euclid(1_000_000_000));
    let (days, s) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let (year, month, day) = shardtool_core::civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02}.{nanos:09} +00:00",
        s / 3600,
        s % 3600 / 60,
        s % 60
    )
}

/// Nanoseconds since midnight as `HH:MM:SS.nnnnnnnnn` (the record API's micros, finer).
pub(crate) fn time_nanos(v: i64) -> String {
    let (s, nanos) = (v.div_euclid(1_000_000_000), v.rem_euclid(1_000_000_000));
    format!(
        "{:02}:{:02}:{:02}.{nanos:09}",
        s / 3600,
        s % 3600 / 60,
        s % 60
    )
}

/// A value as JSON: scalars as themselves (dates, times and decimals as their text), lists as
/// arrays, structs as objects, maps as objects (or `[key, value]` pairs when a key is not
/// text), binary as UTF-8 text or else base64.
pub(crate) fn json(f: &Field) -> V {
    match f {
        Field::Null => V::Null,
        Field::Bool(b) => V::Bool(*b),
        Field::Byte(v) => V::from(*v),
        Field::Short(v) => V::from(*v),
        Field::Int(v) => V::from(*v),
        Field::Long(v) => V::from(*v),
        Field::UByte(v) => V::from(*v),
        Field::UShort(v) => V::from(*v),
        Field::UInt(v) => V::from(*v),
        Field::ULong(v) => V::from(*v),
        // By its shortest decimal form: widened bit for bit, 0.1f32 would read 0.10000000149011612.
        Field::Float(v) => v
            .to_string()
            .parse()
            .ok()
            .and_then(serde_json::Number::from_f64)
            .map_or(V::Null, V::Number),
        Field::Double(v) => serde_json::Number::from_f64(*v).map_or(V::Null, V::Number),
        // Every half-precision value is exactly a double; NaN and infinities have no JSON number.
        Field::Float16(v) => serde_json::Number::from_f64(v.to_f64()).map_or(V::Null, V::Number),
        Field::Str(s) => V::String(s.clone()),
        Field::Date(_)
        | Field::TimeMillis(_)
        | Field::TimeMicros(_)
        | Field::TimestampMillis(_)
        | Field::TimestampMicros(_)
        | Field::Decimal(_) => V::String(f.to_string()),
        Field::Bytes(b) => match std::str::from_utf8(b.data()) {
            Ok(text) => V::String(text.into()),
            Err(_) => V::String(base64(b.data())),
        },
        Field::Group(g) => V::Object(
            g.get_column_iter()
                .map(|(n, v)| (n.clone(), json(v)))
                .collect(),
        ),
        Field::ListInternal(l) => V::Array(l.elements().iter().map(json).collect()),
        Field::MapInternal(m) => {
            if m.entries().iter().all(|(k, _)| matches!(k, Field::Str(_))) {
                V::Object(
                    m.entries()
                        .iter()
                        .map(|(k, v)| match k {
                            Field::Str(k) => (k.clone(), json(v)),
                            _ => unreachable!("every key is text"),
                        })
                        .collect(),
                )
            } else {
                V::Array(
                    m.entries()
                        .iter()
                        .map(|(k, v)| V::Array(vec![json(k), json(v)]))
                        .collect(),
                )
            }
        }
    }
}

/// Standard base64 with padding (RFC 4648).
fn base64(data: &[u8]) -> String {
    const ABC: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
    for chunk in data.chunks(3) {
        let n = chunk.iter().fold(0u32, |n, &b| n << 8 | u32::from(b)) << (8 * (3 - chunk.len()));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ABC[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_follows_rfc_4648() {
        for (raw, coded) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(base64(raw.as_bytes()), coded);
        }
        assert_eq!(base64(&[0xFF, 0xFE, 0x00]), "//4A");
    }

    #[test]
    fn field_names_follow_the_field_rules() {
        let named =
            |column: &str, ext: &str| format!("{}.{ext}", field_bases(std::iter::once(column))[0]);
        assert_eq!(named("conditioning_image", "png"), "conditioning_image.png");
        assert_eq!(named("Mask Image/2", "png"), "mask_image_2.png");
        assert_eq!(named("", "bin"), "column.bin");
        // pandas' `datetime64[ns]`: 2023-11-14 22:13:20 UTC and 155 ns; before the epoch too.
        assert_eq!(
            timestamp_nanos(1_700_000_000_000_000_155),
            "2023-11-14 22:13:20.000000155 +00:00"
        );
        assert_eq!(timestamp_nanos(-1), "1969-12-31 23:59:59.999999999 +00:00");
        assert_eq!(
            timestamp_nanos(951_782_400 * 1_000_000_000),
            "2000-02-29 00:00:00.000000000 +00:00"
        );
        assert_eq!(time_nanos(3_723_000_000_042), "01:02:03.000000042");
        let long = |c: char| format!("{}{c}", "x".repeat(70));
        let columns = ["Mask", "mask", "mask_2", &long('A'), &long('B'), ""];
        let bases = field_bases(columns.iter().copied());
        assert_eq!(bases[..3], ["mask", "mask_2", "mask_2_2"]);
        assert_eq!(
            (bases[3].len(), &bases[4]),
            (52, &format!("{}_2", "x".repeat(52)))
        );
        assert_eq!(bases[5], "column");
        // Cut to leave room for a number and the longest extension within 64 bytes.
        let long = named(&"x".repeat(200), "webp");
        assert_eq!(long.len(), 52 + ".webp".len());
        for name in [
            long,
            format!("{}_99.webp", "x".repeat(52)),
            named("ü.ß", "jpg"),
        ] {
            assert!(shardtool_manifest::is_field_name(&name), "{name}");
        }
    }
}
