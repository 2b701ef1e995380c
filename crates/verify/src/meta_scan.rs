//! A one-pass reader of the flat JSON object pack writes as each sample's `.json`: it checks the
//! syntax and picks out the fields verify compares, without serde's per-field machinery (which
//! was the largest part of checking a sample's structure). It accepts a subset of JSON only: no
//! nested values, no escapes, integers where verify reads numbers. On anything else it gives up
//! and the caller reads the object with serde_json; whatever it accepts, serde_json reads the
//! same way (a property test below and the `verify_meta` fuzz target check that).

/// The metadata fields verify reads, borrowed from the member's bytes.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Meta<'a> {
    /// `key`: the sample's key.
    pub key: Option<&'a str>,
    /// `label`: its class index.
    pub label: Option<i64>,
    /// `class`: its class name.
    pub class: Option<&'a str>,
    /// `width` of the image, in pixels.
    pub width: Option<u64>,
    /// `height` of the image, in pixels.
    pub height: Option<u64>,
}

/// Reads `json` as a flat object; `None` when it is not one of the simple objects this reader
/// handles (including every invalid document, a repeated field of [`Meta`], and a field of
/// [`Meta`] of another type).
pub fn scan_flat(json: &[u8]) -> Option<Meta<'_>> {
    // One pass over the whole document first (it vectorises; per string it cost more than the
    // rest of the scan): no backslash anywhere (escapes are refused, and a backslash outside a
    // string is invalid), no control character but JSON's whitespace (which is invalid inside a
    // string, where `string` looks for it), and valid UTF-8, so that every string is.
    let (backslash, control) = json.iter().fold((false, false), |(b, c), &x| {
        (
            b | (x == b'\\'),
            c | (x < 0x20 && !matches!(x, b'\t' | b'\n' | b'\r')),
        )
    });
    if backslash || control || !(json.is_ascii() || std::str::from_utf8(json).is_ok()) {
        return None;
    }
    let mut p = Cursor { b: json, i: 0 };
    let mut m = Meta::default();
    p.ws();
    p.eat(b'{')?;
    p.ws();
    if p.peek() == Some(b'}') {
        p.i += 1;
    } else {
        loop {
            p.ws();
            let name = p.string()?;
            p.ws();
            p.eat(b':')?;
            p.ws();
            match name {
                b"key" => set(&mut m.key, p.text()?)?,
                b"class" => set(&mut m.class, p.text()?)?,
                b"label" => set(&mut m.label, p.int()?)?,
                b"width" => set(&mut m.width, u64::try_from(p.int()?).ok()?)?,
                b"height" => set(&mut m.height, u64::try_from(p.int()?).ok()?)?,
                _ => p.skip_scalar()?,
            }
            p.ws();
            match p.peek()? {
                b',' => p.i += 1,
                b'}' => {
                    p.i += 1;
                    break;
                }
                _ => return None,
            }
        }
    }
    p.ws();
    (p.i == json.len()).then_some(m)
}

/// Fills a field once (serde rejects a repeated field of a struct).
fn set<T>(slot: &mut Option<T>, v: T) -> Option<()> {
    if slot.is_some() {
        return None;
    }
    *slot = Some(v);
    Some(())
}

struct Cursor<'a> {
    b: &'a [u8],
    i: usize,
}

impl<'a> Cursor<'a> {
    fn peek(&self) -> Option<u8> {
        self.b.get(self.i).copied()
    }

    fn eat(&mut self, c: u8) -> Option<()> {
        (self.peek()? == c).then(|| self.i += 1)
    }

    /// JSON whitespace (not the form feed or vertical tab `is_ascii_whitespace` also allows).
    fn ws(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.i += 1;
        }
    }

    /// A string without control characters, as bytes (the document has no backslash and is
    /// valid UTF-8: see `scan_flat`).
    fn string(&mut self) -> Option<&'a [u8]> {
        self.eat(b'"')?;
        let start = self.i;
        let len = self.b[start..]
            .iter()
            .position(|&c| c == b'"' || c < 0x20)?;
        self.i = start + len;
        self.eat(b'"')?;
        Some(&self.b[start..start + len])
    }

    /// A string read as text.
    fn text(&mut self) -> Option<&'a str> {
        std::str::from_utf8(self.string()?).ok()
    }

    /// An integer without fraction or exponent, of at most 18 digits (so it fits an `i64`
    /// without checks); a number with a fraction or an exponent is refused here, and so is `-0`
    /// (serde reads these as floats, which is not an integer field's type).
    fn int(&mut self) -> Option<i64> {
        let negative = self.peek() == Some(b'-');
        if negative {
            self.i += 1;
        }
        let start = self.i;
        let digits = self.b[start..]
            .iter()
            .take_while(|c| c.is_ascii_digit())
            .count();
        if digits == 0 || digits > 18 || (digits > 1 && self.b[start] == b'0') {
            return None;
        }
        self.i += digits;
        if matches!(self.peek(), Some(b'.' | b'e' | b'E')) {
            return None;
        }
        let v = self.b[start..self.i]
            .iter()
            .fold(0i64, |v, &c| v * 10 + i64::from(c - b'0'));
        match (negative, v) {
            (true, 0) => None,
            (true, v) => Some(-v),
            (false, v) => Some(v),
        }
    }

    /// Any number, by the JSON grammar: `-? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?`.
    fn number(&mut self) -> Option<()> {
        if self.peek() == Some(b'-') {
            self.i += 1;
        }
        match self.peek()? {
            b'0' => self.i += 1,
            b'1'..=b'9' => self.digits(),
            _ => return None,
        }
        if self.peek() == Some(b'.') {
            self.i += 1;
            self.some_digits()?;
        }
        if matches!(self.peek(), Some(b'e' | b'E')) {
            self.i += 1;
            if matches!(self.peek(), Some(b'+' | b'-')) {
                self.i += 1;
            }
            self.some_digits()?;
        }
        Some(())
    }

    fn digits(&mut self) {
        while self.peek().is_some_and(|c| c.is_ascii_digit()) {
            self.i += 1;
        }
    }

    fn some_digits(&mut self) -> Option<()> {
        let start = self.i;
        self.digits();
        (self.i > start).then_some(())
    }

    /// A string, a number, `true`, `false` or `null`; `None` for an object or an array.
    fn skip_scalar(&mut self) -> Option<()> {
        match self.peek()? {
            b'"' => self.string().map(drop),
            b'-' | b'0'..=b'9' => self.number(),
            _ => {
                let rest = &self.b[self.i..];
                let word = [&b"true"[..], b"false", b"null"]
                    .into_iter()
                    .find(|w| rest.starts_with(w))?;
                self.i += word.len();
                Some(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check_tar::serde_meta as by_serde;
    use proptest::prelude::*;

    #[test]
    fn reads_what_pack_writes() {
        let json = br#"{"class":"flower","height":350,"key":"000000001","label":0,"orig_height":350,"orig_width":400,"source":"flower/00208.jpg","width":400}"#;
        let m = scan_flat(json).unwrap();
        assert_eq!(
            m,
            Meta {
                key: Some("000000001"),
                label: Some(0),
                class: Some("flower"),
                width: Some(400),
                height: Some(350),
            }
        );
        assert_eq!(by_serde(json), Some(m));
        assert_eq!(scan_flat(b" {} \n"), Some(Meta::default()));
    }

    #[test]
    fn gives_up_on_what_it_does_not_handle() {
        for json in [
            &br#"{"key":"a\"b"}"#[..],           // an escape
            br#"{"source":{"a":1}}"#,            // a nested object
            br#"{"x":[1]}"#,                     // an array
            br#"{"width":1.0}"#,                 // a float where an integer is read
            br#"{"width":-1}"#,                  // a negative size
            br#"{"label":1e2}"#,                 // an exponent
            br#"{"label":1234567890123456789}"#, // 19 digits
            br#"{"label":-0}"#,                  // serde reads -0 as a float
            br#"{"key":"a","key":"b"}"#,         // a repeated field
            br#"{"key":null}"#,                  // null where a string is read
            br#"{"a":01}"#,                      // a leading zero
            br#"{"a":1,}"#,                      // a trailing comma
            br#"{"a":1} x"#,                     // trailing bytes
            br#"[1]"#,                           // not an object
            b"{\"a\":\"\xff\"}",                 // invalid UTF-8
            b"{\"a\":\"tab\there\"}",            // a raw control character
            b"\x0c{}",                           // a form feed is not JSON whitespace
            br#"{"a":tru}"#,
            br#"{"a":-}"#,
            br#"{"a":1.}"#,
            br#"{"a":1e+}"#,
            br#"{"a" 1}"#,
            br#"{"a":1"#,
            b"",
        ] {
            assert_eq!(scan_flat(json), None, "{}", String::from_utf8_lossy(json));
        }
    }

    /// Documents near the subset: random fields (some read by verify, some not) with random
    /// values, including every kind the reader gives up on, with random whitespace.
    fn document() -> impl Strategy<Value = String> {
        let name = prop_oneof![
            Just("key".to_string()),
            Just("label".to_string()),
            Just("class".to_string()),
            Just("width".to_string()),
            Just("height".to_string()),
            Just("source".to_string()),
            "[a-z\\\\é]{0,4}",
        ];
        let value = prop_oneof![
            "[a-z0-9/é\\\\\"\t]{0,6}".prop_map(|s| format!("\"{s}\"")),
            any::<i64>().prop_map(|v| v.to_string()),
            (0u64..1000).prop_map(|v| v.to_string()),
            any::<u64>().prop_map(|v| v.to_string()),
            any::<f64>().prop_map(|v| format!("{v:?}")),
            "-?[0-9]{1,3}(\\.[0-9]{0,2})?([eE][+-]?[0-9]{0,2})?",
            Just("true".to_string()),
            Just("false".to_string()),
            Just("null".to_string()),
            Just("{\"a\":1}".to_string()),
            Just("[]".to_string()),
        ];
        let ws = "[ \t\r\n]{0,2}";
        proptest::collection::vec((name, value, ws, ws), 0..7).prop_map(|fields| {
            let body: Vec<String> = fields
                .into_iter()
                .map(|(n, v, a, b)| format!("{a}\"{n}\"{b}:{a}{v}{b}"))
                .collect();
            format!("{{{}}}", body.join(","))
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(4000))]

        #[test]
        fn whatever_it_reads_serde_reads_the_same(doc in document(), cut in any::<prop::sample::Index>(), flip in any::<(prop::sample::Index, u8)>()) {
            let bytes = doc.as_bytes();
            let mut flipped = bytes.to_vec();
            if !flipped.is_empty() {
                let i = flip.0.index(flipped.len());
                flipped[i] = flip.1;
            }
            let cut = &bytes[..cut.index(bytes.len() + 1)];
            for json in [bytes, cut, &flipped[..]] {
                if let Some(m) = scan_flat(json) {
                    prop_assert_eq!(Some(m), by_serde(json), "{}", String::from_utf8_lossy(json));
                }
            }
        }

        #[test]
        fn reads_every_plain_document(fields in proptest::collection::btree_map("[a-z]{1,8}", prop_oneof!["[a-z0-9/._-]{0,12}".prop_map(|s| format!("\"{s}\"")), (0u64..100_000).prop_map(|v| v.to_string())], 0..8)) {
            // Distinct names, plain strings and small integers: what pack writes. The reader
            // must take these itself rather than leave them to serde.
            let doc = serde_json::to_string(&fields.iter().map(|(k, v)| (k.clone(), serde_json::from_str::<serde_json::Value>(v).unwrap())).collect::<serde_json::Map<_, _>>()).unwrap();
            let read = scan_flat(doc.as_bytes());
            let typed = ["key", "class"].iter().all(|f| fields.get(*f).is_none_or(|v| v.starts_with('"')))
                && ["label", "width", "height"].iter().all(|f| fields.get(*f).is_none_or(|v| !v.starts_with('"')));
            prop_assert_eq!(read.is_some(), typed, "{}", doc);
            if read.is_some() {
                prop_assert_eq!(read, by_serde(doc.as_bytes()));
            }
        }
    }
}
