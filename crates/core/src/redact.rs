//! Keeping credentials out of messages: the user information and query of URLs are masked
//! before any URL reaches an error, a log line, `errors.jsonl` or a sample's metadata.

use std::borrow::Cow;

/// `text` with the user information of every URL in it (`scheme://user:secret@host/…`) and its
/// query (`?X-Amz-Signature=…`, presigned URLs' credentials) replaced by `***`. Text without
/// such a URL is returned as it is.
pub fn redact_urls(text: &str) -> Cow<'_, str> {
    if !text.contains("://") || !text.contains(['@', '?']) {
        return Cow::Borrowed(text);
    }
    let ends_url = |c: char| matches!(c, '"' | '\'' | '<' | '>' | '`') || c.is_whitespace();
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    let mut changed = false;
    while let Some(at) = rest.find("://") {
        let (head, tail) = rest.split_at(at + 3);
        out.push_str(head);
        // The authority ends at the path, query or fragment, or where the URL itself ends.
        let end = tail
            .find(|c: char| matches!(c, '/' | '?' | '#') || ends_url(c))
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
        let tail = &tail[end..];
        // The path, then the query up to the fragment or the URL's end (punctuation that ends
        // a sentence or a clause is the message's).
        let url_end = tail.find(ends_url).unwrap_or(tail.len());
        let url_end = tail[..url_end]
            .trim_end_matches([';', ':', ',', '.', ')'])
            .len();
        let (url, after) = tail.split_at(url_end);
        match url
            .split_once('?')
            .filter(|(_, q)| !q.is_empty() && !q.starts_with('#'))
        {
            Some((path, query)) => {
                out.push_str(path);
                out.push_str("?***");
                if let Some(at) = query.find('#') {
                    out.push_str(&query[at..]);
                }
                changed = true;
            }
            None => out.push_str(url),
        }
        rest = after;
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
        assert_eq!(
            redact_urls("\"https://h/b/x.tar?X-Amz-Signature=abc&e=1#f\" and s3://b/y?v=2 z"),
            "\"https://h/b/x.tar?***#f\" and s3://b/y?*** z"
        );
        assert_eq!(redact_urls("https://u@h?q=1"), "https://***@h?***");
        assert_eq!(
            redact_urls("at http://h/x?sig=1; 2 failed"),
            "at http://h/x?***; 2 failed"
        );
        for plain in [
            "no url at all, a@b.c",
            "https://host/path/with@at",
            "mailto:a@b.c then https://h/x",
            "what? no url",
            "is it https://h/x?",
            "",
        ] {
            assert!(matches!(redact_urls(plain), Cow::Borrowed(_)), "{plain}");
        }
    }
}
