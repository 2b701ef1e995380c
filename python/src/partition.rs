//! Partitioned packing for Python (Ray tasks, notebooks): `pack_part`, `merge` and `status`
//! over a plan made by `shardtool plan` or `shardtool.plan`. Results come back as JSON text.

use crate::errors::DatasetError;
use crate::tools::interruptible;
use pyo3::exceptions::{PyFileNotFoundError, PyOSError, PyValueError};
use pyo3::prelude::*;
use shardtool_pack::{Assignment, PackError};
use std::path::PathBuf;

/// A pack error as the Python exception a user would catch.
pub(crate) fn pack_error(e: PackError) -> PyErr {
    let mut text = e.to_string();
    if let PackError::Incomplete {
        output,
        missing,
        staged_gone: false,
        ..
    } = &e
    {
        // The CLI's `--shards` has no Python twin: the parts holding them are run again.
        text = text.replace(
            &shardtool_pack::redo_hint(output, missing, false),
            &format!(
                "run pack_part again for the parts holding them (shard j is in part j % count; \
                 shards already done are skipped): shards {}",
                shardtool_pack::shard_ranges(missing)
            ),
        );
    }
    let text = crate::errors::pythonic(text);
    match e {
        PackError::NoPlan { .. } => PyFileNotFoundError::new_err(text),
        PackError::TooManyErrors { .. } => crate::errors::TooManyErrorsError::new_err(text),
        PackError::BadPlan { .. } => crate::errors::PlanError::new_err(text),
        e if e.is_usage() => PyValueError::new_err(text),
        PackError::Io { .. }
        | PackError::MachineFault(_)
        | PackError::Inputs(shardtool_pack::ListError::Io { .. }) => PyOSError::new_err(text),
        _ => DatasetError::new_err(text),
    }
}

fn json(v: serde_json::Value) -> String {
    v.to_string()
}

/// Packs part `index` of `count` of the plan in `output` (shards `j` with `j % count ==
/// index`), skipping shards already done; returns the part's report as JSON.
#[pyfunction]
#[pyo3(signature = (output, index, count, *, jobs=None, max_errors=None))]
pub fn pack_part(
    py: Python<'_>,
    output: String,
    index: u64,
    count: u64,
    jobs: Option<usize>,
    max_errors: Option<u64>,
) -> PyResult<String> {
    if jobs == Some(0) {
        return Err(PyValueError::new_err("jobs: at least one worker thread"));
    }
    let out = PathBuf::from(output);
    let which = Assignment::Part { index, count };
    let r = crate::tools::cancellable(py, move |cancel| {
        shardtool_pack::pack_part(&out, &which, jobs, max_errors, cancel)
    })?
    .map_err(pack_error)?;
    let mut summary = r.summary();
    summary.insert("part".into(), index.into());
    summary.insert("parts".into(), count.into());
    Ok(json(serde_json::Value::Object(summary)))
}

/// Commits the partitioned pack in `output`: every shard must be done; writes `errors.jsonl`
/// and `manifest.json` last; returns the manifest and errors as JSON.
#[pyfunction]
#[pyo3(signature = (output, *, max_errors=None))]
pub fn merge(py: Python<'_>, output: String, max_errors: Option<u64>) -> PyResult<String> {
    let out = PathBuf::from(output);
    // Ctrl-C waits for the merge (it holds OUTPUT's lock), unless pressed twice.
    let r = crate::tools::cancellable(py, move |_| shardtool_pack::merge(&out, max_errors))?
        .map_err(pack_error)?;
    Ok(json(serde_json::json!({
        "manifest": r.manifest,
        "errors": r.errors,
    })))
}

/// Where the partitioned pack in `output` stands, as JSON.
#[pyfunction]
pub fn status(py: Python<'_>, output: String) -> PyResult<String> {
    let out = PathBuf::from(output);
    let s = interruptible(py, move || shardtool_pack::status(&out))?.map_err(pack_error)?;
    Ok(json(serde_json::to_value(s).unwrap_or_default()))
}
