//! A sample's `.json` metadata: the one reading of it that pack (for a carried input json) and
//! verify share, borrowing the members shardtool's rules look at from the text.

use crate::MAX_TEXT_BYTES;
use serde::Deserialize;
use serde_json::value::RawValue;
use std::borrow::Cow;

/// The members of a sample's `.json` that shardtool's rules read, as their JSON text (borrowed,
/// not built); other members are skipped. A member present as `null` is `Some`, so a checker
/// reports it as the wrong type rather than taking it as absent. A member named twice makes the
/// text invalid.
#[derive(Deserialize)]
pub struct SampleMeta<'a> {
    /// The sample's key.
    #[serde(borrow, default, deserialize_with = "present")]
    pub key: Option<&'a RawValue>,
    /// Its integer label.
    #[serde(borrow, default, deserialize_with = "present")]
    pub label: Option<&'a RawValue>,
    /// The name of its label's class.
    #[serde(borrow, default, deserialize_with = "present")]
    pub class: Option<&'a RawValue>,
    /// The stored image's width.
    #[serde(borrow, default, deserialize_with = "present")]
    pub width: Option<&'a RawValue>,
    /// The stored image's height.
    #[serde(borrow, default, deserialize_with = "present")]
    pub height: Option<&'a RawValue>,
}

fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<&'de RawValue>, D::Error> {
    <&RawValue as Deserialize>::deserialize(d).map(Some)
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
        let object = bytes.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{');
        match serde_json::from_slice::<SampleMeta<'_>>(bytes) {
            Ok(meta) if object => Ok(meta),
            Ok(_) => Err("is JSON but not an object".into()),
            Err(e) => Err(format!("is not valid JSON: {e}")),
        }
    }

    /// Why the `key` it states, if it states one, is not the sample's `key`.
    pub fn key_problem(&self, key: &str) -> Option<String> {
        let k = self.key?;
        (json_string(k).as_deref() != Some(key))
            .then(|| format!("states key {k}, but the sample's key is {key:?}"))
    }
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
        let over = SampleMeta::parse(MAX_TEXT_BYTES as u64 + 1, b"")
            .err()
            .unwrap();
        assert!(over.starts_with(&format!("is {} bytes, over the", MAX_TEXT_BYTES + 1)));
    }
}
