//! `errors.jsonl`, the report pack writes beside the shards: one JSON object per failed input
//! (`path`, `kind`, `message`), as many lines as the manifest's `inputs.failed`. Pack always
//! writes it (empty when nothing failed), so a missing file is only a problem when the manifest
//! counts failures.
//!
//! The file is untrusted: it is read as a stream, line by line, each line capped at
//! [`MAX_LINE_BYTES`], so neither a huge file nor one endless line can make us allocate without
//! bound; only the first [`MAX_REPORTED`] bad lines are reported one by one.

use crate::report::{Problem, ProblemKind};
use serde::Deserialize;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;

/// The report's file name in a dataset directory.
pub(crate) const FILE_NAME: &str = "errors.jsonl";

/// Longest line parsed: far above a line pack writes (a path and an error message).
pub(crate) const MAX_LINE_BYTES: usize = 64 << 10;

/// Bad lines reported one by one; the rest are counted in one problem.
pub(crate) const MAX_REPORTED: usize = 10;

/// The shape of one line.
#[derive(Deserialize)]
struct Line<'a> {
    #[serde(borrow)]
    #[allow(dead_code)] // Parsed to check its type only.
    path: std::borrow::Cow<'a, str>,
    #[serde(borrow)]
    #[allow(dead_code)]
    kind: std::borrow::Cow<'a, str>,
    #[serde(borrow)]
    #[allow(dead_code)]
    message: std::borrow::Cow<'a, str>,
}

/// Checks `dir/errors.jsonl` against the manifest's count of failed inputs.
pub(crate) fn check_error_report(dir: &Path, failed: u64) -> Vec<Problem> {
    let path = dir.join(FILE_NAME);
    let problem = |message: String| Problem::shard(FILE_NAME, ProblemKind::ErrorReport, message);
    let file = match std::fs::File::open(&path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return if failed == 0 {
                Vec::new()
            } else {
                vec![problem(format!(
                    "missing, but the manifest counts {failed} failed inputs, each of which \
                     should have a line in it"
                ))]
            };
        }
        Err(e) => return vec![problem(format!("cannot open: {e}"))],
    };
    match scan(BufReader::new(file)) {
        Ok(s) => s.problems(failed),
        Err(e) => vec![problem(format!("cannot read: {e}"))],
    }
}

/// What a pass over the report found.
#[derive(Debug, Default)]
pub(crate) struct ReportScan {
    /// Lines (records) in the file.
    pub lines: u64,
    /// `(line number, reason)` of the first bad lines.
    pub bad: Vec<(u64, String)>,
    /// Bad lines in all.
    pub bad_total: u64,
}

impl ReportScan {
    fn problems(&self, failed: u64) -> Vec<Problem> {
        let problem =
            |message: String| Problem::shard(FILE_NAME, ProblemKind::ErrorReport, message);
        let mut out: Vec<Problem> = self
            .bad
            .iter()
            .map(|(n, why)| {
                Problem::member(
                    FILE_NAME,
                    format!("line {n}"),
                    ProblemKind::ErrorReport,
                    why,
                )
            })
            .collect();
        let unlisted = self.bad_total - self.bad.len() as u64;
        if unlisted > 0 {
            out.push(problem(format!("{unlisted} more bad lines")));
        }
        if self.lines != failed {
            out.push(problem(format!(
                "has {} lines; the manifest counts {failed} failed inputs",
                self.lines
            )));
        }
        out
    }
}

/// Reads the report line by line (each line capped at [`MAX_LINE_BYTES`]).
pub(crate) fn scan(mut r: impl BufRead) -> std::io::Result<ReportScan> {
    let mut s = ReportScan::default();
    let mut line = Vec::new();
    loop {
        line.clear();
        let n = (&mut r)
            .take(MAX_LINE_BYTES as u64 + 1)
            .read_until(b'\n', &mut line)?;
        if n == 0 {
            return Ok(s);
        }
        s.lines += 1;
        let why = if line.last() != Some(&b'\n') && line.len() > MAX_LINE_BYTES {
            // Skip the rest of the overlong line without keeping it.
            skip_line(&mut r)?;
            Some(format!("longer than {MAX_LINE_BYTES} bytes"))
        } else {
            let text = line.strip_suffix(b"\n").unwrap_or(&line);
            match serde_json::from_slice::<Line<'_>>(text) {
                Ok(_) => None,
                Err(e) => Some(format!(
                    "not a JSON object with string fields path, kind and message: {e}"
                )),
            }
        };
        if let Some(why) = why {
            s.bad_total += 1;
            if s.bad.len() < MAX_REPORTED {
                s.bad.push((s.lines, why));
            }
        }
    }
}

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

    fn scan_of(text: &[u8]) -> ReportScan {
        scan(text).unwrap()
    }

    const GOOD: &str = r#"{"path":"a/b.jpg","kind":"decode","message":"bad \"huffman\" table"}"#;

    #[test]
    fn pack_shaped_lines_pass_and_are_counted() {
        let text = format!("{GOOD}\n{GOOD}\n");
        let s = scan_of(text.as_bytes());
        assert_eq!((s.lines, s.bad_total), (2, 0));
        assert!(s.problems(2).is_empty());
        assert_eq!(s.problems(3).len(), 1);
        assert_eq!(scan_of(b"").lines, 0);
        // A last line without its newline still counts.
        assert_eq!(scan_of(GOOD.as_bytes()).lines, 1);
    }

    #[test]
    fn bad_lines_are_named_and_capped() {
        let mut text = format!("{GOOD}\n[1]\n{{\"path\":1,\"kind\":\"x\",\"message\":\"y\"}}\n\n");
        for _ in 0..20 {
            text.push_str("garbage\n");
        }
        let s = scan_of(text.as_bytes());
        assert_eq!(s.lines, 24);
        assert_eq!(s.bad_total, 23);
        assert_eq!(s.bad.len(), MAX_REPORTED);
        assert_eq!(
            s.bad.iter().map(|b| b.0).take(3).collect::<Vec<_>>(),
            [2, 3, 4]
        );
        let p = s.problems(24);
        assert_eq!(p.len(), MAX_REPORTED + 1, "named lines, then one summary");
        assert!(p.iter().all(|p| p.kind == ProblemKind::ErrorReport));
    }

    #[test]
    fn an_endless_line_is_skipped_without_holding_it() {
        let mut text = vec![b'x'; 5 * MAX_LINE_BYTES];
        text.push(b'\n');
        text.extend_from_slice(GOOD.as_bytes());
        let s = scan_of(&text);
        assert_eq!((s.lines, s.bad_total), (2, 1));
        assert!(s.bad[0].1.contains("longer than"));
    }
}
