//! `pack`, `verify` and `inspect` for Python: the library calls run on a helper thread while the
//! calling thread waits with the GIL released and checks for Ctrl-C between waits. Reports come
//! back as JSON text (the Python side turns them into dicts).

use crate::errors::{read_error, CacheError, DatasetError, ManifestError};
use pyo3::exceptions::{PyFileNotFoundError, PyOSError, PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use shardtool_cache::{CacheOptions, Location, RemoteDataset};
use shardtool_pack::{
    pack as pack_dataset, resolve_input, Columns, Compression, InputFormat, ListError, PackError,
    PackPlan, ShardFormatChoice,
};
use shardtool_reader::ReadError;
use shardtool_verify::{VerifyError, VerifyOptions};
use std::path::PathBuf;
use std::sync::mpsc;
use std::time::Duration;

/// Runs `work` on its own thread; returns its result, or the exception a signal handler raised
/// (Ctrl-C) within 100 ms. An interrupted task finishes in the background: the libraries have
/// no cancellation point, and stopping a thread mid-write would leave temporary files.
pub(crate) fn interruptible<T: Send + 'static>(
    py: Python<'_>,
    work: impl FnOnce() -> T + Send + 'static,
) -> PyResult<T> {
    run_on_thread(py, None, work)
}

/// A pack's [`shardtool_pack::Progress`] that asks it to stop once `stop` is set.
pub(crate) struct Cancel(pub(crate) std::sync::Arc<std::sync::atomic::AtomicBool>);

impl shardtool_pack::Progress for Cancel {
    fn update(&self, _: &shardtool_pack::ProgressSnapshot) {}
    fn cancelled(&self) -> bool {
        self.0.load(std::sync::atomic::Ordering::Relaxed)
    }
}

/// [`interruptible`] for a task that holds what a retry needs (OUTPUT's lock, room in the shard
/// cache): on Ctrl-C it is told to stop (a pack at its next input, cleaning up; planning and
/// merging have no such point and finish; a remote check stops fetching), and the exception is
/// raised once it has ended and let go, so a retry may start at once; a second Ctrl-C stops
/// waiting.
pub(crate) fn cancellable<T: Send + 'static>(
    py: Python<'_>,
    work: impl FnOnce(&Cancel) -> T + Send + 'static,
) -> PyResult<T> {
    let flag = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let cancel = Cancel(flag.clone());
    run_on_thread(py, Some(flag), move || work(&cancel))
}

fn run_on_thread<T: Send + 'static>(
    py: Python<'_>,
    stop: Option<std::sync::Arc<std::sync::atomic::AtomicBool>>,
    work: impl FnOnce() -> T + Send + 'static,
) -> PyResult<T> {
    let (tx, rx) = mpsc::channel();
    std::thread::Builder::new()
        .name("shardtool-task".into())
        .spawn(move || {
            let _ = tx.send(work());
        })
        .map_err(|e| PyRuntimeError::new_err(format!("cannot start a thread: {e}")))?;
    let mut rx = rx;
    let mut interrupted: Option<PyErr> = None;
    loop {
        // The receiver moves into the GIL-free section and back (it is not Sync).
        let (got, back) = py.detach(move || (rx.recv_timeout(Duration::from_millis(100)), rx));
        rx = back;
        match got {
            Ok(v) => return interrupted.map_or(Ok(v), Err),
            Err(mpsc::RecvTimeoutError::Timeout) => {
                if let Err(e) = py.check_signals() {
                    match (&stop, interrupted.is_some()) {
                        // Told to stop; the exception waits until it has.
                        (Some(flag), false) => {
                            flag.store(true, std::sync::atomic::Ordering::Relaxed);
                            interrupted = Some(e);
                        }
                        _ => return Err(e),
                    }
                }
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                return Err(PyRuntimeError::new_err("the task panicked"))
            }
        }
    }
}

fn verify_error(e: VerifyError) -> PyErr {
    let text = crate::errors::pythonic(e.to_string());
    match e {
        VerifyError::NotFound { .. } => PyFileNotFoundError::new_err(text),
        VerifyError::NoManifest { .. }
        | VerifyError::Manifest { .. }
        | VerifyError::Shard { .. } => ManifestError::new_err(text),
        VerifyError::Io { .. } => PyOSError::new_err(text),
        VerifyError::Usage(_) => PyValueError::new_err(text),
        VerifyError::Remote(_) | VerifyError::CacheTooSmall(_) => CacheError::new_err(text),
        _ => DatasetError::new_err(text),
    }
}

fn json(v: &impl serde::Serialize) -> PyResult<String> {
    serde_json::to_string(v).map_err(|e| PyRuntimeError::new_err(e.to_string()))
}

/// Whether `input` names one local path, to be checked for existence up front: no URL scheme
/// (`http(s)://`, `s3://`, `file://`), and none of the brace (`{a..b}`, `{x,y}`) or glob (`*`,
/// `?`) characters of a pattern, which `resolve_input` expands.
fn is_plain_local_path(input: &str) -> bool {
    !input.contains("://") && !input.contains(['{', '}', '*', '?'])
}

/// An input that `resolve_input` could not name: `FileNotFoundError` for a missing path (a glob's
/// folder included), `ValueError` otherwise (a bad pattern, a format it cannot tell).
fn input_error(e: ListError) -> PyErr {
    match e {
        ListError::Io { path, cause } if cause.kind() == std::io::ErrorKind::NotFound => {
            PyFileNotFoundError::new_err(format!("{}: no such file or directory", path.display()))
        }
        e => PyValueError::new_err(crate::errors::pythonic(e.to_string())),
    }
}

/// Packs an image folder, list, WebDataset shards or Parquet files into shards; returns the
/// summary as JSON.
#[pyfunction]
#[pyo3(signature = (input, output, *, input_format=None, image_column=None, label_column=None,
    text_column=None, drop_columns=None, format="wds", resize="none", upscale=false,
    filter="catmull-rom", encode="jpeg", quality=90, decode_scale="gap:2", compress=None, keys="input", seed=None, shuffle=true,
    shard_size="256MiB", shard_samples=None, prefix="shard", jobs=None, max_pixels=100_000_000,
    max_errors=None, overwrite=false, resume=false, plan_only=false))]
// One parameter per keyword argument of the Python signature.
#[allow(clippy::too_many_arguments)]
pub fn pack(
    py: Python<'_>,
    input: &str,
    output: PathBuf,
    input_format: Option<&str>,
    image_column: Option<String>,
    label_column: Option<String>,
    text_column: Option<String>,
    drop_columns: Option<Vec<String>>,
    format: &str,
    resize: &str,
    upscale: bool,
    filter: &str,
    encode: &str,
    quality: u8,
    decode_scale: &str,
    compress: Option<&str>,
    keys: &str,
    seed: Option<u64>,
    shuffle: bool,
    shard_size: &str,
    shard_samples: Option<u64>,
    prefix: &str,
    jobs: Option<usize>,
    max_pixels: u64,
    max_errors: Option<u64>,
    overwrite: bool,
    resume: bool,
    plan_only: bool,
) -> PyResult<String> {
    let bad = |field: &str, e: String| PyValueError::new_err(format!("{field}: {e}"));
    let input_format = input_format
        .map(str::parse::<InputFormat>)
        .transpose()
        .map_err(|e| bad("input_format", e))?;
    if is_plain_local_path(input) && !std::path::Path::new(input).exists() {
        return Err(PyFileNotFoundError::new_err(format!(
            "{input}: no such file or directory"
        )));
    }
    let source = resolve_input(input, input_format, &Default::default()).map_err(input_error)?;
    let mut plan = PackPlan::new(source, output);
    plan.columns = Columns {
        image: image_column,
        label: label_column,
        text: text_column,
        drop: drop_columns.unwrap_or_default(),
    }
    .for_source(&plan.source);
    let t = &mut plan.transform;
    t.resize = resize
        .parse()
        .map_err(|e: shardtool_image::ParseError| bad("resize", e.0))?;
    t.upscale = upscale;
    t.filter = filter
        .parse()
        .map_err(|e: shardtool_image::ParseError| bad("filter", e.0))?;
    t.encode = encode
        .parse()
        .map_err(|e: shardtool_image::ParseError| bad("encode", e.0))?;
    t.quality = quality;
    t.decode_scale = decode_scale
        .parse()
        .map_err(|e: shardtool_image::ParseError| bad("decode_scale", e.0))?;
    t.limits.max_pixels = max_pixels;
    plan.format = match format {
        "wds" => ShardFormatChoice::Wds,
        "packed" => ShardFormatChoice::Packed,
        _ => {
            return Err(bad(
                "format",
                format!("expected \"wds\" or \"packed\", not {format:?}"),
            ))
        }
    };
    plan.compression = match compress {
        None | Some("none") => Compression::None,
        Some("zstd") => Compression::Zstd(3),
        Some(s) => match s.strip_prefix("zstd:").and_then(|l| l.parse().ok()) {
            Some(level) if (1..=22).contains(&level) => Compression::Zstd(level),
            Some(level) => {
                return Err(bad(
                    "compress",
                    format!("zstd level {level} is outside 1..=22"),
                ))
            }
            None => {
                return Err(bad(
                    "compress",
                    format!("expected zstd or zstd:LEVEL, not {s:?}"),
                ))
            }
        },
    };
    plan.keys = keys.parse().map_err(PyValueError::new_err)?;
    if shuffle {
        if let Some(s) = seed {
            plan.seed = Some(s);
        }
    } else {
        plan.seed = None;
    }
    plan.shard_bytes = shardtool_core::parse_byte_size(shard_size)
        .map_err(|e| bad("shard_size", e.to_string()))?;
    plan.shard_samples = shard_samples;
    plan.prefix = prefix.to_string();
    if let Some(j) = jobs {
        plan.jobs = j;
    }
    plan.max_errors = max_errors;
    plan.overwrite = overwrite;
    plan.resume = resume;
    plan.validate()
        .map_err(|e| PyValueError::new_err(crate::errors::pythonic(e.to_string())))?;
    if plan_only {
        if plan.shard_samples.is_none() {
            return Err(PyValueError::new_err(
                "shard_samples is required: a plan fixes what each shard holds by position",
            ));
        }
        // With `resume`, a plan already there is kept if it is the same plan. Ctrl-C waits for
        // the listing (holding OUTPUT's lock) unless pressed twice, then ends the plan before an
        // earlier dataset is cleared.
        let out_dir = plan.output.clone();
        let file = cancellable(py, move |cancel| {
            if plan.resume {
                shardtool_pack::make_or_keep_plan(&plan, cancel)
            } else {
                shardtool_pack::make_plan(&plan, cancel)
            }
        })?
        .map_err(python_pack_error)?;
        file.check_listing_failures(&out_dir)
            .map_err(crate::partition::pack_error)?;
        return json(&serde_json::json!({
            "plan": file.hash,
            "inputs": file.inputs,
            "shards": file.shards,
            "shard_samples": file.shard_samples,
            "failed_listing": file.errors.len(),
        }));
    }
    let report = cancellable(py, move |cancel| pack_dataset(&plan, cancel))?;
    match report {
        Ok(r) => json(&serde_json::json!({
            "manifest": r.manifest,
            "errors": r.errors,
            "bytes_in": r.bytes_in,
            "bytes_out": r.bytes_out,
            "packed_now": r.packed_now,
            "finished_before": r.finished_before,
            "seconds": r.elapsed.as_secs_f64(),
        })),
        Err(PackError::Inputs(ListError::Io { path, cause }))
            if cause.kind() == std::io::ErrorKind::NotFound =>
        {
            Err(PyFileNotFoundError::new_err(format!(
                "{}: no such file or directory",
                path.display()
            )))
        }
        Err(e) => Err(python_pack_error(e)),
    }
}

/// A pack or plan error as Python raises it: an output not empty says which keyword gets past.
fn python_pack_error(e: PackError) -> PyErr {
    match e {
        PackError::OutputNotEmpty { path } => PyValueError::new_err(format!(
            "output {} is not empty{}; pass overwrite=True to replace what it holds{}",
            path.display(),
            if path.join("manifest.json").is_file() {
                " (it holds a dataset)"
            } else {
                ""
            },
            if path.join(shardtool_pack::PLAN_DIR).exists() {
                ", or resume=True (with the same options) to continue an interrupted pack"
            } else {
                ""
            }
        )),
        e => crate::partition::pack_error(e),
    }
}

/// Runs `local` on a local dataset path, or `remote` on a remote dataset (an `http(s)://` or
/// `s3://` URL, opened through `cache`, fetched `cache.concurrency` shards at a time), on a
/// thread Ctrl-C can interrupt; the result as JSON.
fn on_dataset<T: serde::Serialize + Send + 'static>(
    py: Python<'_>,
    path: PathBuf,
    mut cache: CacheOptions,
    local: impl FnOnce(&std::path::Path) -> Result<T, VerifyError> + Send + 'static,
    remote: impl FnOnce(&RemoteDataset, usize) -> Result<T, VerifyError> + Send + 'static,
) -> PyResult<String> {
    // A path that is not UTF-8 is local (URLs are text).
    let location = match path.to_str() {
        Some(text) => Location::parse(text).map_err(|e| read_error(ReadError::from(e)))?,
        None => Location::Local(path),
    };
    let r = match location {
        Location::Local(path) => interruptible(py, move || local(&path))?,
        Location::Remote(url) => {
            let workers = cache.concurrency.max(1);
            // Every shard is fetched by the task itself: no prefetch threads.
            cache.concurrency = 0;
            // Ctrl-C leaves the manifest's fetch at once (it holds nothing).
            let ds = interruptible(py, move || RemoteDataset::open(url, cache))?
                .map_err(|e| verify_error(VerifyError::Remote(e.to_string())))?;
            cancellable(py, move |cancel| {
                /// Set when the work ends, returning or unwinding.
                struct Done<'a>(&'a std::sync::atomic::AtomicBool);
                impl Drop for Done<'_> {
                    fn drop(&mut self) {
                        self.0.store(true, std::sync::atomic::Ordering::Relaxed);
                    }
                }
                let done = std::sync::atomic::AtomicBool::new(false);
                std::thread::scope(|s| {
                    // Ctrl-C stops the fetching: the task then ends soon, releasing the cache
                    // room it held before the exception is raised, so a retry has it.
                    let watch = || {
                        while !done.load(std::sync::atomic::Ordering::Relaxed) {
                            if cancel.0.load(std::sync::atomic::Ordering::Relaxed) {
                                ds.stop();
                                return;
                            }
                            std::thread::sleep(std::time::Duration::from_millis(50));
                        }
                    };
                    let _ = std::thread::Builder::new().spawn_scoped(s, watch);
                    let _done = Done(&done);
                    remote(&ds, workers)
                })
            })?
        }
    };
    json(&r.map_err(verify_error)?)
}

/// Verifies a dataset (a local folder or manifest, or an `http(s)://` or `s3://` URL whose shards
/// are fetched through the cache); returns the report as JSON.
#[pyfunction]
#[pyo3(signature = (path, *, decode=false, jobs=None, cache_dir=None, cache_limit=None,
    fetch_timeout=None, fetch_attempts=None, fetch_concurrency=None))]
// One parameter per keyword argument of the Python signature.
#[allow(clippy::too_many_arguments)]
pub fn verify(
    py: Python<'_>,
    path: PathBuf,
    decode: bool,
    jobs: Option<usize>,
    cache_dir: Option<PathBuf>,
    cache_limit: Option<u64>,
    fetch_timeout: Option<f64>,
    fetch_attempts: Option<u32>,
    fetch_concurrency: Option<usize>,
) -> PyResult<String> {
    let opts = VerifyOptions {
        decode,
        ..VerifyOptions::with_jobs(jobs.unwrap_or(0))
    };
    let cache = crate::reader::fetching(
        crate::reader::cache_options(cache_dir, cache_limit),
        fetch_timeout,
        fetch_attempts,
        fetch_concurrency,
    )?;
    on_dataset(
        py,
        path,
        cache,
        move |p| shardtool_verify::verify(p, &opts, &shardtool_verify::NoProgress),
        move |ds, workers| {
            shardtool_verify::verify_remote(ds, workers, &opts, &shardtool_verify::NoProgress)
        },
    )
}

/// Counts, class histogram and image sizes of a dataset or shard (local, or an `http(s)://` or
/// `s3://` URL whose shards are fetched through the cache), as JSON.
#[pyfunction]
#[pyo3(signature = (path, *, jobs=None, cache_dir=None, cache_limit=None, fetch_timeout=None,
    fetch_attempts=None, fetch_concurrency=None))]
// One parameter per keyword argument of the Python signature.
#[allow(clippy::too_many_arguments)]
pub fn inspect(
    py: Python<'_>,
    path: PathBuf,
    jobs: Option<usize>,
    cache_dir: Option<PathBuf>,
    cache_limit: Option<u64>,
    fetch_timeout: Option<f64>,
    fetch_attempts: Option<u32>,
    fetch_concurrency: Option<usize>,
) -> PyResult<String> {
    let mut opts = VerifyOptions::default();
    if let Some(j) = jobs {
        opts.jobs = j;
    }
    let cache = crate::reader::fetching(
        crate::reader::cache_options(cache_dir, cache_limit),
        fetch_timeout,
        fetch_attempts,
        fetch_concurrency,
    )?;
    on_dataset(
        py,
        path,
        cache,
        move |p| shardtool_inspect::inspect(p, &opts),
        move |ds, workers| shardtool_inspect::inspect_remote(ds, workers, &opts),
    )
}

/// A `transform=` value checked and written out in full (defaults filled in); `ValueError` says
/// what is wrong. The Loader calls it at construction, so a typo fails before any iteration.
#[pyfunction]
pub fn check_transform(text: &str) -> PyResult<(String, bool)> {
    let t = text
        .parse::<shardtool_reader::Transform>()
        .map_err(|e| PyValueError::new_err(e.to_string()))?;
    Ok((t.to_string(), t.fixed_size().is_some()))
}

/// `"64GiB"`, `"200GB"`, `"512"` → bytes.
#[pyfunction]
pub fn parse_byte_size(text: &str) -> PyResult<u64> {
    shardtool_core::parse_byte_size(text).map_err(|e| PyValueError::new_err(e.to_string()))
}
