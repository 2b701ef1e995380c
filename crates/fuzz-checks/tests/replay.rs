//! Replays every committed fuzz input (seeds, the minimised corpora and the regressions under
//! `fuzz/`) through its target's check, so CI catches a regression without building libFuzzer.

use std::path::{Path, PathBuf};
use std::time::Instant;

fn inputs(target: &str) -> Vec<PathBuf> {
    let fuzz = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz");
    let mut files = Vec::new();
    for kind in ["seeds", "corpus", "regressions"] {
        let Ok(dir) = std::fs::read_dir(fuzz.join(kind).join(target)) else {
            continue;
        };
        for entry in dir {
            let path = entry.expect("a readable folder").path();
            if path.is_file() {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

#[test]
fn every_committed_fuzz_input_passes_its_check() {
    let mut total = 0;
    for &(target, check) in shardtool_fuzz_checks::TARGETS {
        let files = inputs(target);
        assert!(
            !files.is_empty(),
            "{target}: no seeds under fuzz/seeds/{target}"
        );
        let start = Instant::now();
        for file in &files {
            let data = std::fs::read(file).expect("a readable input");
            // A failing check names its input: replay it alone with `scripts/fuzz.sh replay`.
            eprintln!("{}", file.display());
            check(&data);
        }
        println!(
            "{target}: {} inputs in {:.1} s",
            files.len(),
            start.elapsed().as_secs_f64()
        );
        total += files.len();
    }
    shardtool_fuzz_checks::remove_scratch();
    shardtool_fuzz_checks::remove_dataset();
    shardtool_fuzz_checks::remove_dataset_folder();
    assert!(total > 0);
}

/// The libFuzzer crate is outside the workspace and CI does not compile it (its build is the
/// whole stack again under other flags): check here that its targets are exactly these checks,
/// each one line calling its function, so the two cannot drift apart.
#[test]
fn every_libfuzzer_target_is_one_line_over_its_check() {
    let fuzz = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz");
    let manifest = std::fs::read_to_string(fuzz.join("Cargo.toml")).expect("fuzz/Cargo.toml");
    let bins: Vec<&str> = manifest
        .lines()
        .filter_map(|l| l.strip_prefix("name = \""))
        .filter_map(|l| l.strip_suffix('"'))
        .filter(|&n| n != "shardtool-fuzz")
        .collect();
    let targets: Vec<&str> = shardtool_fuzz_checks::TARGETS.iter().map(|t| t.0).collect();
    assert_eq!(
        bins, targets,
        "fuzz/Cargo.toml's [[bin]]s and TARGETS differ"
    );
    for t in targets {
        let text = std::fs::read_to_string(fuzz.join("fuzz_targets").join(format!("{t}.rs")))
            .unwrap_or_else(|e| panic!("fuzz/fuzz_targets/{t}.rs: {e}"));
        let call =
            format!("libfuzzer_sys::fuzz_target!(|data: &[u8]| shardtool_fuzz_checks::{t}(data));");
        assert!(
            text.contains(&call),
            "fuzz/fuzz_targets/{t}.rs does not call its check"
        );
        assert!(
            text.starts_with("//!"),
            "fuzz/fuzz_targets/{t}.rs: no //! line"
        );
    }
}

/// The `dataset` seeds are datasets `verify` passes, so the fuzzer starts from inputs where the
/// reader's half of the check runs.
#[test]
fn the_dataset_seeds_pass_verify() {
    let seeds: Vec<PathBuf> = inputs("dataset")
        .into_iter()
        .filter(|p| {
            p.parent().and_then(Path::file_name) == Some("dataset".as_ref())
                && p.to_string_lossy().contains("/seeds/")
        })
        .collect();
    assert!(seeds.len() >= 6);
    for s in seeds {
        let data = std::fs::read(&s).unwrap();
        assert!(
            shardtool_fuzz_checks::dataset_passes_verify(&data),
            "{}",
            s.display()
        );
    }
    shardtool_fuzz_checks::remove_dataset_folder();
}
