//! The check of `errors.jsonl` (its format: `shardtool_manifest::errors`) against the manifest's
//! count of failed inputs. Pack always writes it (empty when nothing failed), so a missing file
//! is only a problem when the manifest counts failures. The file is read as a stream with every
//! line capped; only the first [`MAX_REPORTED`] bad lines are reported one by one.

use crate::report::{Problem, ProblemKind};
use shardtool_manifest::errors::{read_jsonl, ERRORS_FILE as FILE_NAME};
use std::io::{BufRead, BufReader};
use std::path::Path;

/// Bad lines reported one by one; the rest are counted in one problem.
pub(crate) const MAX_REPORTED: usize = 10;

fn problem(message: String) -> Problem {
    Problem::shard(FILE_NAME, ProblemKind::ErrorReport, message)
}

/// Checks `dir/errors.jsonl` against the manifest's count of failed inputs.
pub(crate) fn check_error_report(dir: &Path, failed: u64) -> Vec<Problem> {
    let file = match shardtool_core::open_regular(&dir.join(FILE_NAME)) {
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
    check_lines(BufReader::new(file), failed)
        .unwrap_or_else(|e| vec![problem(format!("cannot read: {e}"))])
}

/// The report's problems: its first bad lines by number, a count of the other bad ones, and a
/// line count other than `failed`.
fn check_lines(r: impl BufRead, failed: u64) -> std::io::Result<Vec<Problem>> {
    let (mut lines, mut bad, mut out) = (0u64, 0u64, Vec::new());
    read_jsonl(r, |line| {
        lines += 1;
        if let Err(why) = line {
            bad += 1;
            if out.len() < MAX_REPORTED {
                let at = format!("line {lines}");
                out.push(Problem::member(
                    FILE_NAME,
                    at,
                    ProblemKind::ErrorReport,
                    why,
                ));
            }
        }
    })?;
    if bad > MAX_REPORTED as u64 {
        out.push(problem(format!(
            "{} more bad lines",
            bad - MAX_REPORTED as u64
        )));
    }
    if lines != failed {
        out.push(problem(format!(
            "has {lines} lines; the manifest counts {failed} failed inputs"
        )));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"{"path":"a/b.jpg","kind":"decode","message":"bad \"huffman\" table"}"#;

    fn check(text: &[u8], failed: u64) -> Vec<Problem> {
        check_lines(text, failed).unwrap()
    }

    #[test]
    fn pack_shaped_lines_pass_and_are_counted() {
        let text = format!("{GOOD}\n{GOOD}\n");
        assert!(check(text.as_bytes(), 2).is_empty());
        let p = check(text.as_bytes(), 3);
        assert_eq!(p.len(), 1);
        assert!(p[0].message.starts_with("has 2 lines"), "{p:?}");
        assert!(check(b"", 0).is_empty());
        // A last line without its newline still counts.
        assert!(check(GOOD.as_bytes(), 1).is_empty());
    }

    #[test]
    fn bad_lines_are_named_and_capped() {
        let mut text = format!("{GOOD}\n[1]\n{{\"path\":1,\"kind\":\"x\",\"message\":\"y\"}}\n\n");
        for _ in 0..20 {
            text.push_str("garbage\n");
        }
        let p = check(text.as_bytes(), 24);
        assert_eq!(p.len(), MAX_REPORTED + 1, "named lines, then one summary");
        assert!(p.iter().all(|p| p.kind == ProblemKind::ErrorReport));
        let named: Vec<_> = p
            .iter()
            .filter_map(|p| p.member_or_record.as_deref())
            .collect();
        assert_eq!(named[..3], ["line 2", "line 3", "line 4"]);
        assert_eq!(p[MAX_REPORTED].message, "13 more bad lines");
    }
}
