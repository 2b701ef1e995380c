//! A sample's `.json` metadata: the one reading of it that pack (for a carried input json) and
//! verify share, borrowing the members shardtool's rules look at from the text.

use crate::MAX_TEXT_BYTES;
use serde::de::{self, MapAccess, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;
use std::borrow::Cow;

/// The members of a sample's `.json` that shardtool's rules read, as their JSON text (borrowed,
/// not built); other members are skipped. A member present as `null` is `Some`, so a checker
/// reports it as the wrong type rather than taking it as absent. A member of the object named
/// twice (any member: JSON readers keep one of the two values, which one differs) makes the
/// text invalid.
#[derive(Default)]
pub struct SampleMeta<'a> {
    /// The sample's key.
    pub key: Option<&'a RawValue>,
    /// Its integer label.
    pub label: Option<&'a RawValue>,
    /// The name of its label's class.
    pub class: Option<&'a RawValue>,
    /// The stored image's width.
    pub width: Option<&'a RawValue>,
    /// The stored image's height.
    pub height: Option<&'a RawValue>,
}

/// A member name, borrowed from the text unless it has escapes.
struct Name<'a>(Cow<'a, str>);

impl<'de> Deserialize<'de> for Name<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visit;
        impl<'de> Visitor<'de> for Visit {
            type Value = Name<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a member name")
            }
            fn visit_borrowed_str<E: de::Error>(self, s: &'de str) -> Result<Name<'de>, E> {
                Ok(Name(Cow::Borrowed(s)))
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Name<'de>, E> {
                Ok(Name(Cow::Owned(s.to_owned())))
            }
        }
        d.deserialize_str(Visit)
    }
}

/// Names seen so far in one object: the first few on the stack (a sample json has a handful,
/// and verify reads one per sample), the rest in a set.
#[derive(Default)]
struct Seen<'a> {
    few: [Option<Cow<'a, str>>; 16],
    more: std::collections::HashSet<Cow<'a, str>>,
}

impl<'a> Seen<'a> {
    /// Adds `name`; false when it was there.
    fn insert(&mut self, name: Cow<'a, str>) -> bool {
        if self.few.iter().flatten().any(|n| *n == name) || self.more.contains(&name) {
            return false;
        }
        match self.few.iter_mut().find(|n| n.is_none()) {
            Some(slot) => *slot = Some(name),
            None => {
                self.more.insert(name);
            }
        }
        true
    }
}

impl<'de> Deserialize<'de> for SampleMeta<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visit;
        impl<'de> Visitor<'de> for Visit {
            type Value = SampleMeta<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<SampleMeta<'de>, A::Error> {
                let mut meta = SampleMeta::default();
                let mut seen = Seen::default();
                while let Some(Name(name)) = m.next_key()? {
                    let slot = match name.as_ref() {
                        "key" => Some(&mut meta.key),
                        "label" => Some(&mut meta.label),
                        "class" => Some(&mut meta.class),
                        "width" => Some(&mut meta.width),
                        "height" => Some(&mut meta.height),
                        _ => None,
                    };
                    match slot {
                        Some(slot) => *slot = Some(m.next_value::<&'de RawValue>()?),
                        None => {
                            m.next_value::<de::IgnoredAny>()?;
                        }
                    }
                    if !seen.insert(name.clone()) {
                        return Err(de::Error::custom(format!("duplicate field `{name}`")));
                    }
                }
                Ok(meta)
            }
        }
        d.deserialize_map(Visit)
    }
}

impl<'a> SampleMeta<'a> {
    /// Reads the `.json` member of `len` bytes whose data is `bytes` (empty when it is over
    /// [`MAX_TEXT_BYTES`] and was not read). `Err` says why it breaks the rule every sample json
    /// follows: one JSON object of at most [`MAX_TEXT_BYTES`].
    pub fn parse(len: u64, bytes: &'a [u8]) -> Result<Self, String> {
        if len > MAX_TEXT_BYTES as u64 {
            return Err(format!(
                "is {len} bytes, over the {MAX_TEXT_BYTES}-byte limit for metadata"
            ));
        }
        // JSON is UTF-8 text, and readers decode it whole; a parser skipping a member's string
        // does not look at its bytes, so this is checked first.
        if let Err(e) = std::str::from_utf8(bytes) {
            return Err(format!(
                "is not UTF-8 text, as JSON must be (byte {} is not)",
                e.valid_up_to()
            ));
        }
        // serde_json skips a member's value without a depth limit; readers that build values
        // recurse (Python's `json` fails near 1000 levels).
        let (deep, digits) = shape(bytes);
        if deep > MAX_JSON_DEPTH {
            return Err(format!(
                "nests arrays and objects {deep} levels deep, over the {MAX_JSON_DEPTH}-level \
                 limit (readers that build its values recurse that deep)"
            ));
        }
        if digits > MAX_INTEGER_DIGITS {
            return Err(format!(
                "holds an integer of {digits} digits, over the {MAX_INTEGER_DIGITS} that \
                 Python's json reads"
            ));
        }
        let object = bytes.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{');
        if !object {
            return match serde_json::from_slice::<de::IgnoredAny>(bytes) {
                Ok(_) => Err("is JSON but not an object".into()),
                Err(e) => Err(format!("is not valid JSON: {e}")),
            };
        }
        let err = match serde_json::from_slice::<SampleMeta<'_>>(bytes) {
            Ok(meta) => return Ok(meta),
            Err(e) => format!("is not valid JSON: {e}"),
        };
        // Python's `json` (webdataset's writer, img2dataset's metadata from pandas) writes
        // NaN, Infinity and -Infinity, which JSON lacks and Python reads back: taken as numbers.
        let text = std::str::from_utf8(bytes).map_err(|_| err.clone())?;
        let tamed = finite(text).ok_or_else(|| err.clone())?;
        let meta = serde_json::from_str::<SampleMeta<'_>>(&tamed).map_err(|_| err)?;
        // The members' text at the same places of the input; one that was non-finite is none.
        let rebased = |raw: Option<&RawValue>| {
            let raw = raw?.get();
            let start = raw.as_ptr() as usize - tamed.as_ptr() as usize;
            let original = &text[start..start + raw.len()];
            (original == raw)
                .then(|| serde_json::from_str::<&RawValue>(original).ok())
                .flatten()
        };
        Ok(SampleMeta {
            key: rebased(meta.key),
            label: rebased(meta.label),
            class: rebased(meta.class),
            width: rebased(meta.width),
            height: rebased(meta.height),
        })
    }

    /// Why the `key` it states, if it states one, is not the sample's `key`.
    pub fn key_problem(&self, key: &str) -> Option<String> {
        let k = self.key?;
        (json_string(k).as_deref() != Some(key))
            .then(|| format!("states key {k}, but the sample's key is {key:?}"))
    }
}

/// The deepest a sample json may nest arrays and objects (serde_json's own limit for the values
/// it builds).
pub const MAX_JSON_DEPTH: usize = 128;

/// The most digits an integer in a sample json may have: Python's `json` refuses more
/// (`sys.get_int_max_str_digits()`, 4300 by default).
pub const MAX_INTEGER_DIGITS: usize = 4300;

/// What readers that build JSON values are bounded by, in JSON `text` (strings skipped): the
/// deepest nesting of arrays and objects, and the most digits of an integer (a number without
/// `.` or exponent).
fn shape(text: &[u8]) -> (usize, usize) {
    let (mut depth, mut deepest, mut digits, mut i) = (0usize, 0usize, 0usize, 0usize);
    let (mut in_string, mut escaped) = (false, false);
    while i < text.len() {
        let b = text[i];
        i += 1;
        if in_string {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            b'-' | b'0'..=b'9' => {
                let start = i - 1;
                let part =
                    |c: &u8| c.is_ascii_digit() || matches!(c, b'.' | b'e' | b'E' | b'+' | b'-');
                while text.get(i).is_some_and(part) {
                    i += 1;
                }
                let number = &text[start..i];
                if !number.iter().any(|c| matches!(c, b'.' | b'e' | b'E')) {
                    digits = digits.max(number.iter().filter(|c| c.is_ascii_digit()).count());
                }
            }
            _ => {}
        }
    }
    (deepest, digits)
}

/// `text` with each NaN, Infinity and -Infinity outside strings written as a number of the same
/// length (`0.0`, `0.000000`, `-0.000000`), so members stay where they were; `None` when it
/// has none.
fn finite(text: &str) -> Option<String> {
    let out = replace_nonfinite(text.as_bytes(), |word| match word {
        b"-Infinity" => b"-0.000000",
        b"Infinity" => b"0.000000",
        _ => b"0.0",
    })?;
    String::from_utf8(out).ok()
}

/// JSON `text` as Python's `json` writes it, with each `NaN`, `Infinity` and `-Infinity`
/// outside strings replaced by what `by` gives for that word; `None` when it has none.
pub fn replace_nonfinite(
    text: &[u8],
    by: impl Fn(&'static [u8]) -> &'static [u8],
) -> Option<Vec<u8>> {
    let b = text;
    let mut out = Vec::with_capacity(b.len());
    let (mut i, mut in_string, mut changed) = (0, false, false);
    while i < b.len() {
        let mut step = 1;
        match b[i] {
            b'\\' if in_string => step = 2,
            b'"' => in_string = !in_string,
            _ if in_string => {}
            _ => {
                for word in [&b"-Infinity"[..], b"Infinity", b"NaN"] {
                    // Python writes no `-NaN` (and reads none back).
                    let negated_nan = word == b"NaN" && i > 0 && b[i - 1] == b'-';
                    if b[i..].starts_with(word) && !negated_nan {
                        out.extend_from_slice(by(word));
                        i += word.len();
                        changed = true;
                        step = 0;
                        break;
                    }
                }
            }
        }
        out.extend_from_slice(&b[i..(i + step).min(b.len())]);
        i += step;
    }
    changed.then_some(out)
}

/// The value of a member's JSON text as `T`, if it is one (`i64` and `u64`: integers only).
pub fn json_value<'a, T: Deserialize<'a>>(raw: &'a RawValue) -> Option<T> {
    serde_json::from_str(raw.get()).ok()
}

/// The string a member's JSON text holds, if it is a string (borrowed unless it has escapes).
pub fn json_string(raw: &RawValue) -> Option<Cow<'_, str>> {
    json_value::<&str>(raw)
        .map(Cow::Borrowed)
        .or_else(|| json_value::<String>(raw).map(Cow::Owned))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_json_that_is_not_utf8_breaks_the_rules_even_in_a_member_no_rule_reads() {
        let bad = b"{\"x\": \"\xff\", \"key\": \"k\"}";
        let err = SampleMeta::parse(bad.len() as u64, bad).err().unwrap();
        assert!(err.contains("not UTF-8") && err.contains("byte 7"), "{err}");
        let good = "{\"x\": \"\u{e9}t\u{e9}\"}".as_bytes();
        assert!(SampleMeta::parse(good.len() as u64, good).is_ok());
    }

    #[test]
    fn python_non_finite_numbers_are_read_and_strings_left_alone() {
        let text = br#"{"similarity": NaN, "w": [Infinity, -Infinity], "key": "k", "s": "NaN \" NaN", "width": NaN}"#;
        let meta = SampleMeta::parse(text.len() as u64, text).unwrap();
        assert_eq!(meta.key.map(RawValue::get), Some("\"k\""));
        assert!(meta.width.is_none(), "a NaN width states none");
        assert_eq!(meta.key_problem("k"), None);
        // Not JSON for another reason: still refused, with serde's reason.
        let bad = br#"{"a": NaN, "b": }"#;
        assert!(SampleMeta::parse(bad.len() as u64, bad).is_err());
        for refused in [&br#"{"a": nan}"#[..], br#"{"a": -NaN}"#] {
            assert!(SampleMeta::parse(refused.len() as u64, refused).is_err());
        }
    }

    #[test]
    fn reads_the_members_the_rules_use_and_says_why_a_json_breaks_them() {
        let m = SampleMeta::parse(60, br#" {"key": "a\u0062", "label": null, "x": [1]}"#).unwrap();
        assert_eq!(m.key_problem("ab"), None);
        assert_eq!(
            m.key_problem("b").unwrap(),
            r#"states key "a\u0062", but the sample's key is "b""#
        );
        assert_eq!(m.label.map(RawValue::get), Some("null"));
        assert_eq!(m.label.and_then(json_value::<i64>), None);
        assert!(m.width.is_none());
        let why = |json: &[u8]| SampleMeta::parse(json.len() as u64, json).err().unwrap();
        assert_eq!(why(b"[1]"), "is JSON but not an object");
        assert!(why(b"{").starts_with("is not valid JSON: EOF"));
        assert!(why(br#"{"key": "a", "key": "a"}"#).contains("duplicate field `key`"));
        // Any member, escaped or not, past the first sixteen too; nested objects are theirs.
        assert!(why(br#"{"a": 1, "a": 2}"#).contains("duplicate field `a`"));
        let many: Vec<String> = (0..40).map(|i| format!("\"m{i}\": {{\"x\": 1}}")).collect();
        let ok = format!("{{{}}}", many.join(", "));
        assert!(SampleMeta::parse(ok.len() as u64, ok.as_bytes()).is_ok());
        let twice = format!("{{{}, \"m30\": 0}}", many.join(", "));
        assert!(why(twice.as_bytes()).contains("duplicate field `m30`"));
        let nested = br#"{"a": {"b": 1, "c": {"b": 2}}, "b": 3}"#;
        assert!(SampleMeta::parse(nested.len() as u64, nested).is_ok());
        // Nesting is counted outside strings only, up to the limit and not past it.
        let nest = |n: usize| {
            format!(
                "{{\"a\": {}\"[{{\\\"\"{}}}",
                "[".repeat(n - 1),
                "]".repeat(n - 1)
            )
        };
        assert!(SampleMeta::parse(nest(128).len() as u64, nest(128).as_bytes()).is_ok());
        assert!(why(nest(129).as_bytes()).contains("129 levels deep, over the 128-level limit"));
        // Integers Python's json reads, and one past them; floats, and digits in strings, are
        // no integers.
        let number = |n: &str| format!("{{\"a\": [1, {n}], \"s\": \"{}\"}}", "9".repeat(5000));
        let parse = |t: String| SampleMeta::parse(t.len() as u64, t.as_bytes()).map(|_| ());
        assert!(parse(number(&format!("-{}", "7".repeat(4300)))).is_ok());
        assert!(parse(number(&format!("{}.5", "7".repeat(5000)))).is_ok());
        assert!(parse(number(&format!("{}e3", "7".repeat(5000)))).is_ok());
        let long = number(&format!("-{}", "7".repeat(4301)));
        assert!(why(long.as_bytes()).contains("an integer of 4301 digits, over the 4300"));
        let over = SampleMeta::parse(MAX_TEXT_BYTES as u64 + 1, b"")
            .err()
            .unwrap();
        assert!(over.starts_with(&format!("is {} bytes, over the", MAX_TEXT_BYTES + 1)));
    }
}
