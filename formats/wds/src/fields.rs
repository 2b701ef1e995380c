//! The WebDataset field conventions every shardtool tool shares: which fields hold an image, how
//! a `.cls` label is written, and what a `.txt` must be.

/// Field names (file extensions) that hold an encoded image, in the order a sample's image is
/// chosen when it has several. webdataset lowercases extensions, so they are matched without
/// regard to ASCII case.
pub const IMAGE_FIELDS: [&str; 8] = ["jpg", "jpeg", "png", "webp", "gif", "bmp", "tif", "tiff"];

/// The field holding a sample's integer class label, as decimal text.
pub const LABEL_FIELD: &str = "cls";

/// Whether `field` holds an encoded image.
pub fn is_image_field(field: &str) -> bool {
    IMAGE_FIELDS.iter().any(|f| f.eq_ignore_ascii_case(field))
}

/// The image field among `fields`, by the order of [`IMAGE_FIELDS`]; `None` when there is none.
pub fn image_field<'a, I>(fields: I) -> Option<&'a str>
where
    I: IntoIterator<Item = &'a str>,
{
    let mut best: Option<(usize, &str)> = None;
    for f in fields {
        if let Some(rank) = IMAGE_FIELDS.iter().position(|i| i.eq_ignore_ascii_case(f)) {
            if best.is_none_or(|(r, _)| rank < r) {
                best = Some((rank, f));
            }
        }
    }
    best.map(|(_, f)| f)
}

/// Whether a member is a WebDataset metadata member (`__key__`, `__url__`, … as its last path
/// component), which is no sample's field: readers skip it.
pub fn is_metadata_member(name: &str) -> bool {
    let base = name.rsplit('/').next().unwrap_or(name);
    base.starts_with("__") && base.ends_with("__")
}

/// Reads a `.cls` member: a decimal integer, optionally signed, with surrounding ASCII
/// whitespace (writers often end it with a newline). `None` for anything else.
pub fn parse_cls(bytes: &[u8]) -> Option<i64> {
    std::str::from_utf8(bytes.trim_ascii()).ok()?.parse().ok()
}

/// Largest `.txt` (and largest `.cls` or `.json` a checker reads): 1 MiB.
pub const MAX_TEXT_BYTES: usize = 1 << 20;

/// Why a `.txt` member of `len` bytes whose data is `bytes` (its first [`MAX_TEXT_BYTES`] at
/// most) breaks the text rule: UTF-8, at most [`MAX_TEXT_BYTES`]. Pack refuses such a sample,
/// verify reports it.
pub fn txt_problem(len: u64, bytes: &[u8]) -> Option<String> {
    if len > MAX_TEXT_BYTES as u64 {
        return Some(format!(
            "is {len} bytes, over the {MAX_TEXT_BYTES}-byte limit for text"
        ));
    }
    std::str::from_utf8(bytes).err().map(|e| {
        format!(
            "is not UTF-8 text (invalid byte at {}): {}",
            e.valid_up_to(),
            quote(bytes)
        )
    })
}

/// The start of `bytes` as quoted text, for a message (invalid UTF-8 shown as U+FFFD).
pub fn quote(bytes: &[u8]) -> String {
    let head = &bytes[..bytes.len().min(24)];
    let s = format!("{:?}", String::from_utf8_lossy(head));
    if bytes.len() > head.len() {
        format!("{s}…")
    } else {
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_utf8_and_bounded() {
        assert_eq!(txt_problem(5, b"caf\xc3\xa9"), None);
        let latin1 = txt_problem(4, b"caf\xe9").unwrap();
        assert!(latin1.contains("invalid byte at 3"), "{latin1}");
        let long = txt_problem(MAX_TEXT_BYTES as u64 + 1, b"").unwrap();
        assert!(long.contains("over the"), "{long}");
        assert_eq!(quote(&[b'a'; 30]), format!("{:?}…", "a".repeat(24)));
    }

    #[test]
    fn labels_as_writers_leave_them() {
        assert_eq!(parse_cls(b"7"), Some(7));
        assert_eq!(parse_cls(b" 12\n"), Some(12));
        assert_eq!(parse_cls(b"-1"), Some(-1));
        for bad in [
            &b""[..],
            b"1.5",
            b"0x10",
            b"seven",
            b"1 2",
            b"\xff",
            b"99999999999999999999",
        ] {
            assert_eq!(parse_cls(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn the_image_field_is_chosen_by_rank_whatever_the_case() {
        assert_eq!(image_field(["cls", "json", "PNG"]), Some("PNG"));
        assert_eq!(image_field(["png", "jpg"]), Some("jpg"));
        assert_eq!(image_field(["txt", "json"]), None);
        assert!(is_image_field("TIFF"));
        assert!(!is_image_field("seg.png"));
    }
}
