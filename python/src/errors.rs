//! The exception types of the package and the mapping of the library errors onto them:
//! `ValueError` for bad arguments, `FileNotFoundError` for missing paths, `DatasetError` and its
//! subclasses for everything found wrong with a dataset.

use pyo3::create_exception;
use pyo3::exceptions::{PyException, PyFileNotFoundError, PyMemoryError, PyOSError, PyValueError};
use pyo3::prelude::*;
use shardtool_reader::ReadError;

create_exception!(
    shardtool,
    DatasetError,
    PyException,
    "A dataset, shard, record or cache could not be read."
);
create_exception!(
    shardtool,
    ManifestError,
    DatasetError,
    "The manifest is missing a field, malformed, or of an unknown version."
);
create_exception!(
    shardtool,
    CorruptShardError,
    DatasetError,
    "A shard failed validation (size, checksum or structure)."
);
create_exception!(
    shardtool,
    CorruptRecordError,
    DatasetError,
    "A record could not be read or decoded."
);
create_exception!(
    shardtool,
    CacheError,
    DatasetError,
    "A remote shard could not be fetched into, or served from, the shard cache."
);
create_exception!(
    shardtool,
    IncompleteEpochError,
    DatasetError,
    "An epoch ended with a different number of samples than its plan."
);

create_exception!(
    shardtool,
    TooManyErrorsError,
    DatasetError,
    "More inputs failed than max_errors allows: the pack (or part, or merge) stopped."
);
create_exception!(
    shardtool,
    PlanError,
    DatasetError,
    "The plan in OUTPUT cannot be run as it is (an input changed since it was made, or the plan \
     file is damaged): running the part again fails the same way; plan again with overwrite=True."
);

/// A message from the Rust crates, which name the CLI's flags, with the keyword arguments the
/// Python API takes for them. Only whole flags are replaced (after a space, quote, backtick or
/// parenthesis, and not followed by more of a word), never part of a path.
pub(crate) fn pythonic(mut text: String) -> String {
    text.push_str(shardtool_core::fault_hint(&text).unwrap_or_default());
    const FLAGS: [(&str, &str); 37] = [
        // A flag with its value, before the flag alone.
        ("--keys index (keys=\"index\" in Python)", "keys=\"index\""),
        ("--input-format parquet", "input_format=\"parquet\""),
        ("--input-format imagefolder", "input_format=\"imagefolder\""),
        ("--input-format wds", "input_format=\"wds\""),
        ("--input-format list", "input_format=\"list\""),
        ("--overwrite", "overwrite=True"),
        ("--resume", "resume=True"),
        ("--max-errors", "max_errors"),
        ("--shard-samples", "shard_samples"),
        ("--shard-size", "shard_size"),
        ("--cache-limit", "cache_limit"),
        ("--cache-dir", "cache_dir"),
        ("--label-column", "label_column"),
        ("--text-column", "text_column"),
        ("--image-column", "image_column"),
        ("--drop-column", "drop_columns"),
        ("--input-format", "input_format"),
        ("--fetch-timeout", "fetch_timeout"),
        ("--fetch-attempts", "fetch_attempts"),
        ("--prefetch-shards", "prefetch_shards"),
        ("--fetch-concurrency", "fetch_concurrency"),
        ("--drop-last", "drop_last=True"),
        ("--no-shuffle", "shuffle=False"),
        ("--seed", "seed"),
        ("--resize", "resize"),
        ("--upscale", "upscale"),
        ("--filter", "filter"),
        ("--encode", "encode"),
        ("--quality", "quality"),
        ("--decode-scale", "decode_scale"),
        ("--max-pixels", "max_pixels"),
        ("--format", "format"),
        ("--compress", "compress"),
        ("--prefix", "prefix"),
        ("--jobs", "jobs"),
        ("--keys", "keys"),
        ("--remainder pad", "remainder=\"pad\""),
    ];
    let mut out = String::with_capacity(text.len());
    let mut rest = text.as_str();
    'scan: while let Some(at) = rest.find("--") {
        let (head, tail) = rest.split_at(at);
        out.push_str(head);
        let starts = out
            .chars()
            .next_back()
            .is_none_or(|c| matches!(c, ' ' | '`' | '\'' | '"' | '('));
        for (flag, kwarg) in FLAGS {
            let ends = tail
                .get(flag.len()..)
                .and_then(|r| r.chars().next())
                .is_none_or(|c| !(c.is_ascii_alphanumeric() || c == '-' || c == '_'));
            if starts && ends && tail.starts_with(flag) {
                out.push_str(kwarg);
                rest = &tail[flag.len()..];
                continue 'scan;
            }
        }
        out.push_str("--");
        rest = &tail[2..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::pythonic;

    #[test]
    fn only_whole_flags_become_keyword_arguments() {
        assert_eq!(
            pythonic("rerun with --overwrite to start over".into()),
            "rerun with overwrite=True to start over"
        );
        assert_eq!(
            pythonic("see `--max-errors` (--cache-limit)".into()),
            "see `max_errors` (cache_limit)"
        );
        // Parts of paths stay as they are.
        for path in [
            "/tmp/run--resume--overwrite-x holds no plan",
            "/x/my--cache-dir",
        ] {
            assert_eq!(pythonic(path.into()), path);
        }
        assert_eq!(pythonic("--overwrite-all".into()), "--overwrite-all");
        assert_eq!(pythonic("a -- b --".into()), "a -- b --");
    }
}

/// A reader error as the Python exception a user would catch.
pub fn read_error(e: ReadError) -> PyErr {
    let text = pythonic(e.to_string());
    match e {
        ReadError::Io { cause, .. } if cause.kind() == std::io::ErrorKind::NotFound => {
            PyFileNotFoundError::new_err(text)
        }
        ReadError::Io { .. } => PyOSError::new_err(text),
        ReadError::Manifest { .. } => ManifestError::new_err(text),
        ReadError::CorruptShard { .. } => CorruptShardError::new_err(text),
        ReadError::CorruptRecord { .. } => CorruptRecordError::new_err(text),
        ReadError::BadOptions(_) | ReadError::BadState(_) => PyValueError::new_err(text),
        ReadError::Cache(_) | ReadError::Unavailable { cache: true, .. } => {
            CacheError::new_err(text)
        }
        ReadError::Incomplete { .. } => IncompleteEpochError::new_err(text),
        ReadError::OutOfMemory(_) => PyMemoryError::new_err(text),
        _ => DatasetError::new_err(text),
    }
}

/// Registers the exception types on the module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("DatasetError", py.get_type::<DatasetError>())?;
    m.add("ManifestError", py.get_type::<ManifestError>())?;
    m.add("CorruptShardError", py.get_type::<CorruptShardError>())?;
    m.add("CorruptRecordError", py.get_type::<CorruptRecordError>())?;
    m.add("CacheError", py.get_type::<CacheError>())?;
    m.add(
        "IncompleteEpochError",
        py.get_type::<IncompleteEpochError>(),
    )?;
    m.add("TooManyErrorsError", py.get_type::<TooManyErrorsError>())?;
    m.add("PlanError", py.get_type::<PlanError>())?;
    Ok(())
}
