//! `errors.jsonl`, the report pack writes beside the shards: one JSON object per input that did
//! not make it into a shard (`path`, `kind`, `message`), as many lines as the manifest's
//! `inputs.failed`. Written here, and read back here as a stream with every line capped, since a
//! dataset's files are untrusted.

use serde::{Deserialize, Serialize};
use std::io::{BufRead, Read};

/// The report's file name inside a dataset directory.
pub const ERRORS_FILE: &str = "errors.jsonl";

/// Longest line [`read_jsonl`] parses: far above a line pack writes (a path and a message).
pub const MAX_LINE_BYTES: usize = 64 << 10;

/// One input that did not make it into a shard: a line of `errors.jsonl`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorRecord {
    /// The input path (relative to the input folder, or as listed).
    pub path: String,
    /// The failure class (`unreadable`, `decode`, `too_many_pixels`, …).
    pub kind: String,
    /// A human-readable reason.
    pub message: String,
}

/// The report's bytes: one JSON object per line.
pub fn to_jsonl(errors: &[ErrorRecord]) -> Vec<u8> {
    let mut out = Vec::new();
    for e in errors {
        if serde_json::to_writer(&mut out, e).is_ok() {
            out.push(b'\n');
        }
    }
    out
}

/// Reads a report line by line, holding at most [`MAX_LINE_BYTES`] of a line, and hands `each`
/// every line's record, or why the line is not one. A last line without its newline counts.
pub fn read_jsonl(
    mut r: impl BufRead,
    mut each: impl FnMut(Result<ErrorRecord, String>),
) -> std::io::Result<()> {
    let mut line = Vec::new();
    loop {
        line.clear();
        let n = (&mut r)
            .take(MAX_LINE_BYTES as u64 + 1)
            .read_until(b'\n', &mut line)?;
        if n == 0 {
            return Ok(());
        }
        if line.last() != Some(&b'\n') && line.len() > MAX_LINE_BYTES {
            skip_line(&mut r)?;
            each(Err(format!("longer than {MAX_LINE_BYTES} bytes")));
            continue;
        }
        let text = line.strip_suffix(b"\n").unwrap_or(&line);
        each(serde_json::from_slice(text).map_err(|e| {
            format!("not a JSON object with string fields path, kind and message: {e}")
        }));
    }
}

/// Skips the rest of an overlong line without keeping it.
fn skip_line(r: &mut impl BufRead) -> std::io::Result<()> {
    loop {
        let buf = r.fill_buf()?;
        if buf.is_empty() {
            return Ok(());
        }
        match buf.iter().position(|&b| b == b'\n') {
            Some(i) => {
                r.consume(i + 1);
                return Ok(());
            }
            None => {
                let n = buf.len();
                r.consume(n);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(text: &[u8]) -> Vec<Result<ErrorRecord, String>> {
        let mut out = Vec::new();
        read_jsonl(text, |l| out.push(l)).unwrap();
        out
    }

    #[test]
    fn written_records_read_back() {
        let records = vec![
            ErrorRecord {
                path: "a/b.jpg".into(),
                kind: "decode".into(),
                message: "bad \"huffman\" table\nat byte 3".into(),
            },
            ErrorRecord {
                path: "c.png".into(),
                kind: "unreadable".into(),
                message: String::new(),
            },
        ];
        let text = to_jsonl(&records);
        let back: Vec<_> = lines(&text).into_iter().map(Result::unwrap).collect();
        assert_eq!(back, records);
        assert!(lines(b"").is_empty());
        // A last line without its newline still counts.
        assert_eq!(lines(text.strip_suffix(b"\n").unwrap()).len(), 2);
    }

    #[test]
    fn bad_lines_say_why() {
        let text = b"[1]\n{\"path\":1,\"kind\":\"x\",\"message\":\"y\"}\n\ngarbage";
        let got = lines(text);
        assert_eq!(got.len(), 4);
        assert!(got.iter().all(|l| l
            .as_ref()
            .is_err_and(|why| why.contains("path, kind and message"))));
    }

    #[test]
    fn an_endless_line_is_skipped_without_holding_it() {
        let mut text = vec![b'x'; 5 * MAX_LINE_BYTES];
        text.push(b'\n');
        text.extend_from_slice(br#"{"path":"p","kind":"k","message":"m"}"#);
        let got = lines(&text);
        assert_eq!(got.len(), 2);
        assert!(got[0]
            .as_ref()
            .is_err_and(|why| why.contains("longer than")));
        assert_eq!(got[1].as_ref().unwrap().path, "p");
    }
}
