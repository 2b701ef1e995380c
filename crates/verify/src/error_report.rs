//! The check of `errors.jsonl` (its format: `shardtool_manifest::errors`) against the manifest's
//! count of failed inputs. Pack always writes it (empty when nothing failed), so a missing file
//! is only a problem when the manifest counts failures. The file is read as a stream with every
//! line capped; only the first [`MAX_REPORTED`] bad lines are reported one by one.

use crate::report::{Problem, ProblemKind};
use shardtool_manifest::errors::{read_jsonl, ERRORS_FILE as FILE_NAME};
use std::io::BufReader;
use std::path::Path;

/// Bad lines reported one by one; the rest are counted in one problem.
pub(crate) const MAX_REPORTED: usize = 10;

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

/// Reads the report (see [`read_jsonl`]), keeping the count and the first bad lines.
pub(crate) fn scan(r: impl std::io::BufRead) -> std::io::Result<ReportScan> {
    let mut s = ReportScan::default();
    read_jsonl(r, |line| {
        s.lines += 1;
        if let Err(why) = line {
            s.bad_total += 1;
            if s.bad.len() < MAX_REPORTED {
                s.bad.push((s.lines, why));
            }
        }
    })?;
    Ok(s)
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
}
