//! House rules every Rust source file of the repository keeps, checked over the whole tree: a
//! leading `//!` line saying what the module is for, no `dbg!`, no silenced
//! `clippy::too_many_arguments` without a comment saying why, and no file over 900 lines.

use std::path::{Path, PathBuf};

const MAX_LINES: usize = 900;

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("cli/ has a parent")
        .to_path_buf()
}

/// Every `.rs` file below `dir`, skipping build outputs and hidden folders.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for path in entries {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if name.starts_with('.') || name == "target" || name == "node_modules" {
            continue;
        }
        if path.is_dir() {
            rust_files(&path, out);
        } else if name.ends_with(".rs") {
            out.push(path);
        }
    }
}

#[test]
fn every_source_file_keeps_the_house_rules() {
    let root = repo_root();
    let mut files = Vec::new();
    rust_files(&root, &mut files);
    assert!(
        files.len() > 50,
        "found only {} files under {}",
        files.len(),
        root.display()
    );
    let mut problems = Vec::new();
    for path in &files {
        let rel = path.strip_prefix(&root).unwrap().display().to_string();
        let text = std::fs::read_to_string(path).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        if !lines.first().is_some_and(|l| l.starts_with("//!")) {
            problems.push(format!(
                "{rel}: does not open with a `//!` line saying what it is for"
            ));
        }
        if lines.len() > MAX_LINES {
            problems.push(format!(
                "{rel}: {} lines (at most {MAX_LINES})",
                lines.len()
            ));
        }
        for (i, line) in lines.iter().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            if code.contains(concat!("dbg", "!(")) {
                problems.push(format!("{rel}:{}: dbg! left in", i + 1));
            }
            if line.contains(concat!("clippy::", "too_many_arguments")) {
                let commented = line.contains("//")
                    || (i > 0 && {
                        let prev = lines[i - 1].trim_start();
                        prev.starts_with("//") && !prev.starts_with("///")
                    });
                if !commented {
                    problems.push(format!(
                        "{rel}:{}: too_many_arguments allowed without a `//` comment saying why",
                        i + 1
                    ));
                }
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
