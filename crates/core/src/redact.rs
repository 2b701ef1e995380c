//! Keeping credentials out of messages: the user information of URLs is masked before any URL
//! reaches an error, a log line, `errors.jsonl` or a sample's metadata.

use std::borrow::Cow;

/// `text` with the user information of every URL in it (`scheme://user:secret@host/…`) replaced
/// by `***`. Text without such a URL is returned as it is.
pub fn redact_urls(text: &str) -> Cow<'_, str> {
    if !text.contains("://") || !text.contains('@') {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    let mut changed = false;
    while let Some(at) = rest.find("://") {
        let (head, tail) = rest.split_at(at + 3);
        out.push_str(head);
        // The authority ends at the path, query or fragment, or where the URL itself ends.
        let end = tail
            .find(|c: char| {
                matches!(c, '/' | '?' | '#' | '"' | '\'' | '<' | '>' | '`') || c.is_whitespace()
            })
            .unwrap_or(tail.len());
        let authority = &tail[..end];
        match authority.rfind('@') {
            Some(user_end) => {
                out.push_str("***");
                out.push_str(&authority[user_end..]);
                changed = true;
            }
            None => out.push_str(authority),
        }
        rest = &tail[end..];
    }
    out.push_str(rest);
    if changed {
        Cow::Owned(out)
    } else {
        Cow::Borrowed(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_information_is_masked_and_nothing_else_changes() {
        assert_eq!(
            redact_urls("fetching https://ann:s3cret@host:8080/a/b.tar failed"),
            "fetching https://***@host:8080/a/b.tar failed"
        );
        assert_eq!(
            redact_urls("s3://KEY:SECRET@bucket/x and http://tok@h/"),
            "s3://***@bucket/x and http://***@h/"
        );
        assert_eq!(redact_urls("(https://u:p@h)"), "(https://***@h)",);
        for plain in [
            "no url at all, a@b.c",
            "https://host/path/with@at",
            "mailto:a@b.c then https://h/x",
            "",
        ] {
            assert!(matches!(redact_urls(plain), Cow::Borrowed(_)), "{plain}");
        }
    }
}
