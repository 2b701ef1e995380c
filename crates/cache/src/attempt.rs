//! One fetch attempt's failure: the store's error as a short message (no HTML error pages, no
//! request timings), and whether another attempt may succeed.

/// One attempt's failure: retried unless permanent.
pub(crate) struct AttemptError {
    pub(crate) message: String,
    pub(crate) permanent: bool,
}

impl AttemptError {
    pub(crate) fn retry(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            permanent: false,
        }
    }
    pub(crate) fn fatal(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            permanent: true,
        }
    }
}

/// The HTTP status in an object store's message ("... non-2xx status code: 501 Not Implemented").
pub(crate) fn http_status(message: &str) -> Option<u16> {
    let at = message.find("status code: ")? + "status code: ".len();
    message.get(at..at + 3)?.parse().ok()
}

/// A message cut before an error page's HTML (servers answer errors with whole documents). An
/// XML body stays: S3's holds the error's code and message.
fn without_html(message: &str) -> &str {
    let lower = message.to_ascii_lowercase();
    let cut = ["<!doctype", "<html"]
        .iter()
        .filter_map(|t| lower.find(t))
        .min()
        .unwrap_or(message.len());
    message[..cut].trim_end_matches([' ', ':', '\n'])
}

/// `message` without the request timings the store's errors name (`HEAD URL in 801.2µs`): noise
/// in a report, and they make each failure's text differ.
fn without_elapsed(message: &str) -> String {
    let mut out = String::with_capacity(message.len());
    let mut rest = message;
    while let Some(at) = rest.find(" in ") {
        let after = &rest[at + 4..];
        let digits = after.find(|c: char| !(c.is_ascii_digit() || c == '.'));
        let unit = digits
            .filter(|&n| n > 0)
            .and_then(|n| {
                ["ns", "µs", "ms", "s"]
                    .iter()
                    .find(|u| after[n..].starts_with(**u))
                    .map(|u| n + u.len())
            })
            .filter(|&end| !after[end..].starts_with(|c: char| c.is_alphanumeric()));
        match unit {
            Some(end) => {
                out.push_str(&rest[..at]);
                rest = &after[end..];
            }
            None => {
                out.push_str(&rest[..at + 4]);
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

pub(crate) fn classify(e: object_store::Error) -> AttemptError {
    use object_store::Error as E;
    if let E::NotFound { .. } = e {
        // The store's text names the object three times over; the caller names it once.
        return AttemptError::fatal("no such object on the server (404 Not Found)");
    }
    let mut message = without_elapsed(without_html(&e.to_string()));
    // Refused credentials, a missing object or a method the server does not implement will not
    // change on another attempt. Other client errors may: S3 answers an idle upload with 400
    // (RequestTimeout) and a conflicting one with 409 (OperationAborted).
    let permanent_status =
        http_status(&message).is_some_and(|s| matches!(s, 401 | 403 | 404 | 405 | 410 | 501));
    let permanent = permanent_status
        || matches!(
            e,
            E::PermissionDenied { .. }
                | E::Unauthenticated { .. }
                | E::InvalidPath { .. }
                | E::NotSupported { .. }
        );
    // The store's message stops at "error sending request"; the causes under it say why
    // (refused, reset, timed out, a DNS failure).
    let mut source = std::error::Error::source(&e);
    while let Some(cause) = source {
        let text = without_elapsed(without_html(&cause.to_string()));
        if !message.contains(&text) {
            message.push_str(": ");
            message.push_str(&text);
        }
        source = cause.source();
    }
    // With no credentials in the environment the S3 client asks the instance metadata service
    // last; off a cloud machine that fails with a message about an address the user never gave.
    if message.contains("/latest/api/token") || message.contains("/latest/meta-data/") {
        message.push_str(
            " (no AWS credentials were found in the environment, so the instance metadata \
             service was asked: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or \
             AWS_SKIP_SIGNATURE=true for a public bucket)",
        );
    }
    AttemptError { message, permanent }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn generic(message: &str) -> object_store::Error {
        object_store::Error::Generic {
            store: "HTTP",
            source: message.into(),
        }
    }

    /// HTML error pages are cut from messages, S3's XML kept; refusals, missing objects and 501
    /// are not retried; other client errors, timeouts, throttling and server errors are.
    #[test]
    fn http_failures_are_retried_only_when_another_attempt_may_differ() {
        let page = "Server returned non-2xx status code: 501 Not Implemented: <!DOCTYPE HTML>\n<html><body>Error code: 501</body></html>";
        let e = classify(generic(page));
        assert!(e.permanent);
        assert!(e.message.ends_with("501 Not Implemented"), "{}", e.message);
        for (status, permanent) in [
            ("403 Forbidden", true),
            ("405 Method Not Allowed", true),
            ("400 Bad Request", false),
            ("409 Conflict", false),
            ("408 Request Timeout", false),
            ("429 Too Many Requests", false),
            ("500 Internal Server Error", false),
            ("503 Service Unavailable", false),
        ] {
            let e = classify(generic(&format!("non-2xx status code: {status}")));
            assert_eq!(e.permanent, permanent, "{status}");
        }
        assert!(!classify(generic("connection reset")).permanent);
        let xml = "non-2xx status code: 400 Bad Request: <?xml version=\"1.0\"?><Error><Code>RequestTimeout</Code></Error>";
        assert!(classify(generic(xml))
            .message
            .contains("<Code>RequestTimeout</Code>"));
        assert_eq!(without_html("plain message"), "plain message");
    }

    /// Request timings are cut wherever they stand; words after " in " are kept; a missing
    /// object is said once, without the store's three namings of it.
    #[test]
    fn messages_leave_out_timings_and_repeats() {
        let e = classify(generic(
            "Error performing HEAD http://h/a.tar in 801.157µs - Server returned non-2xx \
             status code: 500 Internal Server Error",
        ));
        assert_eq!(
            e.message,
            "Generic HTTP error: Error performing HEAD http://h/a.tar - Server returned non-2xx status code: 500 \
             Internal Server Error"
        );
        assert_eq!(without_elapsed("x in 2s, y in 3ms"), "x, y");
        for kept in ["in 2 places", "in 5sec", "in 12", "in .", "ends in "] {
            assert_eq!(without_elapsed(kept), kept);
        }
        let missing = object_store::Error::NotFound {
            path: "a.tar".into(),
            source: "Error performing HEAD http://h/a.tar in 1ms - 404 Not Found".into(),
        };
        let e = classify(missing);
        assert!(e.permanent);
        assert_eq!(e.message, "no such object on the server (404 Not Found)");
    }
}
