//! Carried fields of a packed record: the reserved `fields` member of its sample object, mapping
//! a field name to its bytes (a JSON string when they are UTF-8, else `{"base64": "…"}`).

use std::borrow::Cow;

use base64::Engine;
use serde_json::{Map, Value};

use crate::error::Error;

/// The sample-object member holding a record's carried fields.
pub const SAMPLE_FIELDS: &str = "fields";

/// The key of the object that stores bytes which are not UTF-8.
const BASE64_KEY: &str = "base64";

/// Standard alphabet, padding required on decode (as written).
const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::STANDARD;

/// The JSON value that stores a carried field's bytes: a string when they are UTF-8, otherwise
/// `{"base64": "<standard base64 with padding>"}`.
pub fn field_value(bytes: &[u8]) -> Value {
    match std::str::from_utf8(bytes) {
        Ok(s) => Value::String(s.to_owned()),
        Err(_) => {
            let mut obj = Map::new();
            obj.insert(BASE64_KEY.into(), Value::String(B64.encode(bytes)));
            Value::Object(obj)
        }
    }
}

/// A carried field's value as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FieldValue<'a> {
    /// Valid UTF-8, stored as a JSON string.
    Text(Cow<'a, str>),
    /// Any other bytes, stored as base64 (decoded here).
    Binary(Vec<u8>),
}

impl<'a> FieldValue<'a> {
    /// The field's bytes.
    pub fn bytes(&self) -> &[u8] {
        match self {
            FieldValue::Text(s) => s.as_bytes(),
            FieldValue::Binary(b) => b,
        }
    }

    /// The field's bytes, borrowed when they are borrowed text.
    pub fn into_bytes(self) -> Cow<'a, [u8]> {
        match self {
            FieldValue::Text(Cow::Borrowed(s)) => Cow::Borrowed(s.as_bytes()),
            FieldValue::Text(Cow::Owned(s)) => Cow::Owned(s.into_bytes()),
            FieldValue::Binary(b) => Cow::Owned(b),
        }
    }

    /// The value with its text owned.
    pub fn into_owned(self) -> FieldValue<'static> {
        match self {
            FieldValue::Text(s) => FieldValue::Text(Cow::Owned(s.into_owned())),
            FieldValue::Binary(b) => FieldValue::Binary(b),
        }
    }
}

/// Reads a stored value; `Err` says why it is not one of the two forms.
pub(crate) fn parse_value(v: &Value) -> Result<FieldValue<'_>, String> {
    match v {
        Value::String(s) => Ok(FieldValue::Text(Cow::Borrowed(s))),
        Value::Object(obj) => match (obj.get(BASE64_KEY), obj.len()) {
            (Some(Value::String(b)), 1) => B64
                .decode(b)
                .map(FieldValue::Binary)
                .map_err(|e| format!("is not valid padded standard base64: {e}")),
            _ => Err(format!(
                "is an object other than {{\"{BASE64_KEY}\": string}}"
            )),
        },
        other => Err(format!("is a JSON {}", kind(other))),
    }
}

/// Checks the `fields` member of sample `record` (key `key`), if present: an object of valid
/// values whose names are non-empty.
pub(crate) fn check_fields(
    obj: &Map<String, Value>,
    record: usize,
    key: &str,
) -> Result<(), Error> {
    let bad = |detail: String| Error::BadFields {
        record,
        key: key.to_owned(),
        detail,
    };
    let Some(fields) = obj.get(SAMPLE_FIELDS) else {
        return Ok(());
    };
    let Value::Object(fields) = fields else {
        return Err(bad(format!(
            "`{SAMPLE_FIELDS}` is a JSON {}, not an object",
            kind(fields)
        )));
    };
    for (name, v) in fields {
        if name.is_empty() {
            return Err(bad("a field has an empty name".into()));
        }
        parse_value(v).map_err(|why| bad(format!("field `{name}` {why}")))?;
    }
    Ok(())
}

/// The JSON type of `v`, for messages.
pub(crate) fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn values_round_trip_as_text_or_base64() {
        for bytes in [&b"a red bus"[..], b"", b"\xff\xfe\x00raw", "é".as_bytes()] {
            let v = field_value(bytes);
            assert_eq!(
                v.is_string(),
                std::str::from_utf8(bytes).is_ok(),
                "{bytes:?}"
            );
            assert_eq!(parse_value(&v).unwrap().bytes(), bytes);
        }
        assert_eq!(field_value(b"\xff\x00"), json!({"base64": "/wA="}));
    }

    #[test]
    fn malformed_fields_are_named() {
        let check = |fields: Value| {
            let obj = json!({"key": "k", "fields": fields});
            check_fields(obj.as_object().unwrap(), 3, "k")
                .err()
                .map(|e| e.to_string())
        };
        assert_eq!(check(json!({"txt": "x", "bin": {"base64": "/wA="}})), None);
        let cases = [
            (json!(["txt"]), "is a JSON array"),
            (json!({"txt": 5}), "field `txt` is a JSON number"),
            (
                json!({"bin": {"base64": "/wA"}}),
                "field `bin` is not valid",
            ),
            (
                json!({"bin": {"base64": "!!!!"}}),
                "field `bin` is not valid",
            ),
            (json!({"bin": {"b64": "AA=="}}), "field `bin` is an object"),
            (json!({"bin": {"base64": "AA==", "x": 1}}), "is an object"),
            (json!({"": "x"}), "empty name"),
        ];
        for (fields, want) in cases {
            let msg = check(fields.clone()).unwrap_or_else(|| panic!("{fields} accepted"));
            assert!(msg.contains(want), "{fields}: {msg}");
            assert!(msg.contains("record 3 (k)"), "{msg}");
        }
    }
}
