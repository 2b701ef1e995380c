//! The output folder: kept apart from the inputs, cleared with `--overwrite` of the files an
//! earlier pack wrote there and of nothing else, and only once the inputs are listed.

use crate::listing::{list_inputs, InputSource, ListOptions};
use crate::plan::{PackPlan, PlanError};
use crate::PackError;
use shardtool_manifest::{self as manifest, Manifest, ERRORS_FILE};
use std::collections::HashSet;
use std::path::{Path, PathBuf};

/// `path` made absolute with links resolved as the kernel resolves them, also when its last
/// components do not exist yet: component by component, a prefix that exists stands for its real
/// path (so `link/..` is the parent of the link's target), and `..` after a missing component
/// undoes it.
pub(crate) fn resolved(path: &Path) -> PathBuf {
    use std::path::Component;
    let mut cur = PathBuf::new();
    for c in std::path::absolute(path)
        .unwrap_or_else(|_| path.to_path_buf())
        .components()
    {
        match c {
            Component::ParentDir => {
                cur.pop();
            }
            Component::CurDir => {}
            c => cur.push(c),
        }
        if let Ok(real) = cur.canonicalize() {
            cur = real;
        }
    }
    cur
}

/// The manifest of the dataset in `dir`, if it holds one that parses (read within the manifest
/// limit).
pub(crate) fn manifest_in(dir: &Path) -> Option<Manifest> {
    let limit = shardtool_core::Limits::DEFAULT_MAX_HEADER_BYTES;
    let bytes = shardtool_core::read_within(&dir.join(manifest::FILE_NAME), limit).ok()?;
    Manifest::from_slice(&bytes, limit).ok()
}

/// Whether `dir` holds an earlier pack's output (its manifest, or a plan's `_plan` folder).
pub(crate) fn holds_a_pack(dir: &Path) -> bool {
    dir.join(manifest::FILE_NAME).is_file() || dir.join(crate::PLAN_DIR).is_dir()
}

/// Lists the inputs of `plan` and prepares its output, which `lock` first takes hold of: an
/// earlier dataset there is cleared only once the inputs are listed, so a bad input or option
/// leaves it whole (and a bad input leaves no output folder behind). Inputs staged while listed
/// (fetched, decompressed, Parquet rows) go into the output beside it, as hidden temporary
/// files, then move into `stage_dir`. A stop asked for (`progress`) once they are listed ends
/// the run before the clear. With `defer`, an earlier dataset (a manifest, a plan) is only
/// checked, and left for the caller to clear with [`clear_output`] before its first shard.
pub(crate) fn list_for(
    plan: &PackPlan,
    stage_dir: &Path,
    lock: impl FnOnce() -> Result<(), PackError>,
    progress: &dyn crate::Progress,
    defer: bool,
) -> Result<crate::Listing, PackError> {
    // Only checks and a killed run's temporary files change the output before the clear, so
    // whether it holds an earlier dataset is known from the start.
    let deferred = defer && holds_a_pack(&plan.output);
    let clear = |keep: &[PathBuf]| match deferred {
        true => clear_output(plan, None),
        false => clear_output(plan, Some(keep)),
    };
    if !stages(plan) {
        let options = list_options(plan, stage_dir);
        let listing = list_inputs(&plan.source, &options).map_err(PackError::Inputs)?;
        crate::sample_read::faultless(&listing)?;
        lock()?;
        keeps_an_earlier_dataset(plan, &listing)?;
        clear(&[])?;
        return Ok(listing);
    }
    let options = list_options(plan, &plan.output);
    // Local files' columns are checked before the output is made.
    crate::listing::check_columns(&plan.source, &options, true).map_err(PackError::Inputs)?;
    let made = !plan.output.exists();
    lock()?;
    clear_output(plan, None)?;
    let listed = listed_unless_stopped(plan, options, progress).map_err(PackError::Inputs);
    // A listing the stop broke off fails as stopped, not as what the stop made of it.
    let listed = match listed {
        Err(_) if progress.cancelled() => Err(PackError::Interrupted),
        listed => listed,
    };
    let mut listing = listed.inspect_err(|_| {
        remove_staged(plan);
        // A folder made for inputs that could not be listed goes again (if still empty).
        if made {
            let _ = std::fs::remove_dir(&plan.output);
        }
    })?;
    let staged = crate::pipeline::StagedFiles(std::mem::take(&mut listing.staged));
    if progress.cancelled() {
        return Err(PackError::Interrupted);
    }
    crate::sample_read::faultless(&listing)?;
    keeps_an_earlier_dataset(plan, &listing)?;
    if let Some(input) = fetched_from_the_output(plan, &listing, &staged.0) {
        return Err(PackError::Plan(PlanError::OutputHoldsInputs {
            output: plan.output.clone(),
            input: PathBuf::from(shardtool_core::redact_urls(&input).into_owned()),
        }));
    }
    // Deferred, the output was checked before the listing: checked again, it would take the
    // inputs just staged for a killed run's leftovers.
    if !deferred {
        clear_output(plan, Some(&staged.0))?;
    }
    listing.staged = move_staged(staged, &mut listing.containers, stage_dir)?;
    Ok(listing)
}

/// Lists the inputs of `plan` on a thread of its own while this one asks `progress` whether to
/// stop: fetches of remote inputs then end within a poll, not when a stalled server's attempts
/// run out.
fn listed_unless_stopped(
    plan: &PackPlan,
    mut options: ListOptions,
    progress: &dyn crate::Progress,
) -> Result<crate::Listing, crate::ListError> {
    use std::sync::atomic::{AtomicBool, Ordering};
    let stop = std::sync::Arc::new(AtomicBool::new(false));
    let policy = shardtool_cache::FetchPolicy::default().with_stop(Some(stop.clone()));
    options.remote = std::sync::Arc::new(shardtool_cache::RemoteFolders::new(policy));
    std::thread::scope(|s| {
        let lister =
            std::thread::Builder::new().spawn_scoped(s, || list_inputs(&plan.source, &options));
        // Where the system starts no thread (a thread limit), the listing runs here, unwatched.
        let Ok(listing) = lister else {
            return list_inputs(&plan.source, &options);
        };
        while !listing.is_finished() {
            if progress.cancelled() {
                stop.store(true, Ordering::SeqCst);
            }
            std::thread::sleep(shardtool_cache::STOP_POLL);
        }
        listing
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
    })
}

/// Refuses to clear an earlier dataset in the output (`--overwrite`) for inputs of which none
/// can be packed: nothing found, every one failed while listed (a misspelt `--image-column`),
/// or no listed file opens as an image (a list whose paths are all wrong).
fn keeps_an_earlier_dataset(plan: &PackPlan, listing: &crate::Listing) -> Result<(), PackError> {
    if !plan.overwrite || !holds_a_pack(&plan.output) {
        return Ok(());
    }
    let mut summary = crate::failure_summary(&listing.errors);
    if !listing.inputs.is_empty() {
        let Some((path, why)) = no_file_is_an_image(listing) else {
            return Ok(());
        };
        let listed = format!("no listed file opens as an image; the first, {path}: {why}");
        summary = match summary.is_empty() {
            true => listed,
            false => format!("{listed}; and while listing, {summary}"),
        };
    }
    Err(PackError::NoImages {
        looked_for: listing.looked_for.clone(),
        failed: (listing.inputs.len() + listing.errors.len()) as u64,
        summary,
        report: plan.output.join(ERRORS_FILE),
        kept: true,
    })
}

/// When no input of `listing` may be an image, the first one's name and failure: each is a file
/// that cannot be opened or does not begin as a supported image does. Stops at the first that
/// may be (a tar sample or Parquet row, read later, always may), so a good listing costs a read.
fn no_file_is_an_image(listing: &crate::Listing) -> Option<(String, String)> {
    use std::io::Read;
    let mut first = None;
    for i in 0..listing.inputs.len() {
        let item = listing.inputs.get(i);
        if listing.in_container(&item) {
            return None;
        }
        let path = listing.origin.resolve(&item);
        let mut head = [0u8; 64];
        // A FIFO named by a list would block the open: only regular files are read.
        let why = match shardtool_core::open_regular(&path).and_then(|mut f| f.read(&mut head)) {
            Ok(n) if shardtool_image::has_image_signature(&head[..n]) => return None,
            Ok(_) => "not a supported image (no image signature)".to_string(),
            Err(e) => format!("cannot read: {e}"),
        };
        first.get_or_insert_with(|| (listing.origin.source(&item), why));
    }
    first
}

/// The URL of an input fetched (into `staged`) from the output folder itself, if one was: a file
/// there of its name holds the fetched bytes, and clearing the output would delete it (a folder
/// of shards with no manifest served by URL and packed into itself).
fn fetched_from_the_output(
    plan: &PackPlan,
    listing: &crate::Listing,
    staged: &[PathBuf],
) -> Option<String> {
    let same = |a: &Path, b: &Path| -> bool {
        let (Ok(ma), Ok(mb)) = (std::fs::metadata(a), std::fs::metadata(b)) else {
            return false;
        };
        let hash = |p: &Path| crate::plan_file::file_checksum(p).ok();
        ma.is_file() && ma.len() == mb.len() && hash(a).is_some_and(|x| Some(x) == hash(b))
    };
    listing.containers.iter().find_map(|c| {
        let remote = crate::containers::is_remote(&c.source) && staged.contains(&c.path);
        let name = c.source.rsplit('/').next().filter(|n| !n.is_empty())?;
        (remote && same(&plan.output.join(name), &c.path)).then(|| c.source.clone())
    })
}

/// Moves the files `staged` in the output into `stage_dir` (the output itself, or a folder in
/// it), and the containers read from them with them; returns their new paths.
fn move_staged(
    mut staged: crate::pipeline::StagedFiles,
    containers: &mut [crate::listing::Container],
    stage_dir: &Path,
) -> Result<Vec<PathBuf>, PackError> {
    if staged.0.iter().all(|p| p.parent() == Some(stage_dir)) {
        return Ok(std::mem::take(&mut staged.0));
    }
    std::fs::create_dir_all(stage_dir).map_err(|e| PackError::io(stage_dir, e))?;
    for p in &mut staged.0 {
        let to = stage_dir.join(p.file_name().unwrap_or_default());
        std::fs::rename(&*p, &to).map_err(|e| PackError::io(&*p, e))?;
        for c in containers.iter_mut().filter(|c| c.path == *p) {
            c.path = to.clone();
        }
        *p = to;
    }
    Ok(std::mem::take(&mut staged.0))
}

/// Whether `plan`'s inputs are staged (fetched, decompressed, Parquet rows) while listed.
pub(crate) fn stages(plan: &PackPlan) -> bool {
    matches!(
        plan.source,
        crate::InputSource::Wds(_) | crate::InputSource::Parquet(_)
    )
}

pub(crate) fn list_options(plan: &PackPlan, stage_dir: &Path) -> ListOptions {
    ListOptions {
        columns: plan.columns.clone(),
        stage_dir: stage_dir.to_path_buf(),
        max_input_bytes: plan.transform.limits.max_input_bytes,
        jobs: plan.jobs,
        max_shard_bytes: None,
        exclude: Some(plan.output.clone()),
        remote: Default::default(),
    }
}

/// Why the folder `dir` cannot be packed from as it is, if so: a shardtool pack still running
/// or stopped before publishing its manifest (a pack holds the folder locked, a partitioned one
/// keeps `_plan/`, and shards are written as hidden `.NAME.PID.N.tmp` files first), or a
/// finished dataset of packed shards (raw pixels, no encoded images to pack).
pub(crate) fn not_an_input(dir: &Path) -> Option<String> {
    if dir.join(manifest::FILE_NAME).exists() {
        let packed =
            |e: std::fs::DirEntry| e.path().extension().is_some_and(|x| x == "safetensors");
        let has_packed = std::fs::read_dir(dir).is_ok_and(|rd| rd.flatten().any(packed));
        return has_packed.then(|| {
            "the folder is a dataset of packed shards (.safetensors of raw pixels), which pack \
             does not read: pack from the dataset's original input, or from one packed with \
             --format wds"
                .to_string()
        });
    }
    let why = unfinished_pack(dir)?;
    Some(format!(
        "the folder is a pack that has not finished ({why}, and no manifest.json): its shards \
         are not a dataset yet; let it finish (or finish it: pack --resume, or the plan's parts \
         and merge), then pack from it"
    ))
}

/// Why `dir`, which holds no manifest, looks like a pack still running or stopped before
/// publishing one.
fn unfinished_pack(dir: &Path) -> Option<&'static str> {
    if dir.join(crate::plan_file::PLAN_DIR).is_dir() {
        return Some("it holds a plan, `_plan/`");
    }
    let locked = std::fs::File::open(dir)
        .is_ok_and(|f| matches!(f.try_lock_shared(), Err(std::fs::TryLockError::WouldBlock)));
    if locked {
        return Some("another process is packing into it");
    }
    let writing = std::fs::read_dir(dir).is_ok_and(|rd| {
        rd.flatten()
            .any(|e| being_written(&e.file_name().to_string_lossy()).is_some())
    });
    writing.then_some("it holds a shard being written, a hidden `.tmp` file")
}

/// Why the file `file`, given as a list, is not one: it is the manifest of a shardtool dataset.
pub(crate) fn dataset_manifest(file: &Path) -> Option<String> {
    let dir = file.parent()?;
    if file.file_name()? != manifest::FILE_NAME || manifest_in(dir).is_none() {
        return None;
    }
    let shown = match dir.as_os_str().is_empty() {
        true => Path::new("."),
        false => dir,
    };
    Some(match not_an_input(dir) {
        Some(why) => why,
        None => format!(
            "the file is a shardtool dataset's manifest, not a list: to pack from the dataset, \
             name its folder ({}), whose .tar shards are read",
            shown.display()
        ),
    })
}

/// A local input file of a WebDataset or Parquet source (`None` for other URLs).
fn local_file(input: &str) -> Option<PathBuf> {
    if let Some(p) = input.strip_prefix("file://") {
        return Some(PathBuf::from(p));
    }
    (!input.contains("://")).then(|| PathBuf::from(input))
}

/// Refuses an output folder that would take in or clear the inputs: the ImageFolder input itself
/// (or the folder of a Hugging Face imagefolder's metadata);
/// a folder inside one that exists with files but no manifest (a class folder, whose images the
/// listing would skip; an earlier pack's output inside the input is skipped and is fine); or the
/// folder holding an input shard or Parquet file, by its own path or a link's (`--overwrite`
/// would clear it, or a new shard replace a link to it, before it is read).
pub(crate) fn check_apart(plan: &PackPlan) -> Result<(), PlanError> {
    if crate::store::is_remote(&plan.output) {
        return Ok(());
    }
    let out = resolved(&plan.output);
    let clash = |input: &Path| PlanError::OutputHoldsInputs {
        output: plan.output.clone(),
        input: input.to_path_buf(),
    };
    match &plan.source {
        InputSource::Folder(root) => {
            let root_real = resolved(root);
            let holds_other_files = || {
                std::fs::read_dir(&out).is_ok_and(|mut d| d.next().is_some()) && !holds_a_pack(&out)
            };
            if out == root_real || (out.starts_with(&root_real) && holds_other_files()) {
                return Err(clash(root));
            }
        }
        // A Hugging Face imagefolder's metadata stands for its folder of images, as an
        // ImageFolder does; other lists name files anywhere.
        InputSource::List(file) if crate::list_file::is_imagefolder_metadata(file) => {
            let root = file.parent().filter(|p| !p.as_os_str().is_empty());
            let root = root.unwrap_or(Path::new("."));
            if out == resolved(root) {
                return Err(clash(root));
            }
        }
        InputSource::List(_) => {}
        InputSource::Wds(inputs) | InputSource::Parquet(inputs) => {
            for file in inputs.iter().filter_map(|i| local_file(i)) {
                // The folder the path names, and the one a link leads to.
                let beside = file.parent().map(|p| {
                    resolved(if p.as_os_str().is_empty() {
                        Path::new(".")
                    } else {
                        p
                    })
                });
                if beside.as_deref() == Some(out.as_path())
                    || resolved(&file).parent() == Some(out.as_path())
                {
                    return Err(clash(&file));
                }
            }
        }
    }
    Ok(())
}

/// Removes the copies of inputs staged in the output (hidden `.stage-…` files) after a listing
/// that failed: it returns no list of them. The output is held: they are this run's.
pub(crate) fn remove_staged(plan: &PackPlan) {
    let staged = |e: &std::fs::DirEntry| {
        let name = e.file_name();
        let name = name.to_string_lossy();
        name.starts_with(".stage-") && name.ends_with(".tmp")
    };
    for e in std::fs::read_dir(&plan.output)
        .into_iter()
        .flatten()
        .flatten()
    {
        if staged(&e) {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

/// Whether `name` is that of a temporary file a pack writes: a staged input
/// (`.stage-….tmp`), or a shard, manifest or report being written (`.<name>.<pid>.<n>.tmp`).
/// Another tool's hidden `.tmp` files (a sync client's) are not.
fn temporary(name: &str) -> bool {
    if name.starts_with(".stage-") && name.ends_with(".tmp") {
        return true;
    }
    being_written(name).is_some_and(|target| {
        target == manifest::FILE_NAME || target == ERRORS_FILE || named_as_a_shard(target)
    })
}

/// The file being written under `name` when it is an atomic write's temporary file
/// (`.<target>.<pid>.<n>.tmp`, as `shardtool_core::AtomicFile` names them).
fn being_written(name: &str) -> Option<&str> {
    let number = |d: &str| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit());
    let rest = name.strip_prefix('.')?.strip_suffix(".tmp")?;
    let mut parts = rest.rsplitn(3, '.');
    let (n, pid) = (parts.next()?, parts.next()?);
    (number(n) && number(pid)).then(|| parts.next().unwrap_or_default())
}

/// Makes sure `output` exists and holds no dataset, clearing an old one with `--overwrite` but
/// for `keep` (inputs staged there since the check, the first new shard being written); `None`
/// only checks it (and makes it), removing nothing but a killed run's temporary files.
///
/// Only files a pack writes are removed: the manifest, the shards it lists, shards named as this
/// plan names them (`<prefix>-NNNNNN`, left by an interrupted pack), `errors.jsonl`, temporary
/// files and the plan folder. Another file that looks like a shard is refused before anything is
/// removed: it may be the user's own data.
pub(crate) fn clear_output(plan: &PackPlan, keep: Option<&[PathBuf]>) -> Result<(), PackError> {
    let out = &plan.output;
    let io = |e| PackError::io(out, e);
    if !out.exists() {
        return std::fs::create_dir_all(out).map_err(io);
    }
    if !out.is_dir() {
        return Err(PackError::OutputNotAFolder { path: out.clone() });
    }
    let mut entries: Vec<_> = std::fs::read_dir(out)
        .map_err(io)?
        .collect::<Result<_, _>>()
        .map_err(io)?;
    entries.retain(|e| !keep.is_some_and(|k| k.contains(&e.path())));
    // An empty error report is all a pack stopped before its first failure leaves behind.
    let empty_report = |e: &std::fs::DirEntry| {
        e.file_name() == "errors.jsonl" && e.metadata().is_ok_and(|m| m.is_file() && m.len() == 0)
    };
    if entries.iter().all(empty_report) {
        return Ok(());
    }
    if !plan.overwrite {
        return Err(PackError::OutputNotEmpty { path: out.clone() });
    }
    if let Some(url) = served_from(plan, out) {
        return Err(PackError::Plan(PlanError::OutputHoldsInputs {
            output: out.clone(),
            input: PathBuf::from(shardtool_core::redact_urls(&url).into_owned()),
        }));
    }
    let listed: Option<HashSet<String>> =
        manifest_in(out).map(|m| m.shards.into_iter().map(|s| s.file).collect());
    // Files named as a pack names shards (any prefix: an earlier pack's may differ) are an
    // interrupted pack's only where no manifest lists what was made and a pack left its mark
    // (the error report it writes before its first shard, its plan, one of its temporary
    // files): a folder of downloaded `shard-NNNNNN.tar` files is the user's.
    let marks = |e: &std::fs::DirEntry| {
        let name = e.file_name();
        let name = name.to_string_lossy();
        (name == ERRORS_FILE && our_error_report(&e.path()))
            || (name == crate::PLAN_DIR && e.path().join(crate::plan_file::PLAN_FILE).is_file())
            || temporary(&name)
    };
    let interrupted = listed.is_none() && entries.iter().any(marks);
    let listed = listed.unwrap_or_default();
    let mut ours = Vec::new();
    for e in &entries {
        let name = e.file_name();
        let name = name.to_string_lossy();
        let is_file = e.file_type().map_err(io)?.is_file();
        if name == crate::PLAN_DIR && !is_file {
            // A `_plan` folder holding nothing a plan writes is the user's: refused, as a plan
            // would write into it and then remove it.
            if !plan_folder(&e.path()) {
                return Err(PackError::OutputHoldsOtherShards {
                    path: out.clone(),
                    file: name.into_owned(),
                });
            }
            ours.push(e.path());
        } else if !is_file {
            continue;
        } else if name == manifest::FILE_NAME
            || name == ERRORS_FILE
            || temporary(&name)
            || listed.contains(name.as_ref())
            || (interrupted && named_as_a_shard(&name) && {
                // Another prefix's numbers have the six digits a pack gives (not a date's eight).
                let (prefix, number) = name.rsplit_once('-').unwrap_or_default();
                prefix == plan.prefix || number.bytes().take_while(u8::is_ascii_digit).count() == 6
            })
        {
            ours.push(e.path());
        } else if manifest::ShardKind::from_name(&name).is_some() {
            return Err(PackError::OutputHoldsOtherShards {
                path: out.clone(),
                file: name.into_owned(),
            });
        }
    }
    if keep.is_none() {
        // Only the temporary files a killed run left go now: inputs are staged next, under
        // such names.
        let left = |p: &&PathBuf| temporary(&p.file_name().unwrap_or_default().to_string_lossy());
        for p in ours.iter().filter(left) {
            std::fs::remove_file(p).map_err(io)?;
        }
        return Ok(());
    }
    // The manifest goes first, so an interrupted overwrite leaves a visibly incomplete dataset,
    // and the marks of a pack last, so that what it leaves is still known as a pack's.
    ours.sort_by_key(|p| match p.file_name().and_then(|n| n.to_str()) {
        Some(manifest::FILE_NAME) => 0,
        Some(ERRORS_FILE | crate::PLAN_DIR) => 2,
        _ => 1,
    });
    for path in ours {
        if path.is_dir() {
            std::fs::remove_dir_all(&path).map_err(io)?;
        } else {
            std::fs::remove_file(&path).map_err(io)?;
        }
    }
    Ok(())
}

/// A remote input whose folder serves the dataset in `out` (the same manifest, byte for byte):
/// clearing `out` would delete that input before it is read. Checked for the first remote input
/// only, with one small request; an answer that does not come is no match.
fn served_from(plan: &PackPlan, out: &Path) -> Option<String> {
    let (InputSource::Wds(names) | InputSource::Parquet(names)) = &plan.source else {
        return None;
    };
    let here = std::fs::read(out.join(manifest::FILE_NAME)).ok()?;
    let first = names.iter().find(|n| crate::containers::is_remote(n))?;
    // One short try (a HEAD, then a GET): it runs before Ctrl-C is watched for, and no answer
    // is no match (the fetched copies are compared with the output's files after listing).
    let policy = shardtool_cache::FetchPolicy {
        attempts: 1,
        stall_timeout: std::time::Duration::from_secs(2),
        connect_timeout: std::time::Duration::from_secs(2),
        ..Default::default()
    };
    let there = manifest_bytes_beside(first, policy, here.len() as u64).ok()??;
    (there == here).then(|| first.clone())
}

/// The bytes of the manifest in the folder of the file at URL `url` (at most `limit`); `None`
/// when there is none, why when it cannot be read.
fn manifest_bytes_beside(
    url: &str,
    policy: shardtool_cache::FetchPolicy,
    limit: u64,
) -> Result<Option<Vec<u8>>, String> {
    shardtool_cache::RemoteFolder::connect(url, policy)
        .and_then(|(folder, _)| folder.read(manifest::FILE_NAME, limit))
        .map_err(|e| e.to_string())
}

/// The `manifest.json` beside shards being packed: a shardtool dataset's, none or another
/// tool's (the shards are plain), or one that cannot be read (why).
pub(crate) enum Beside {
    Dataset(Box<Manifest>),
    Plain,
    Unreadable(String),
}

impl Beside {
    /// What `read` (the manifest's bytes; `None` when there is none) says. Bytes that are no
    /// JSON, or JSON naming this format, were meant as a shardtool manifest; other JSON is
    /// another tool's.
    fn judge(read: Result<Option<Vec<u8>>, String>, limit: u64) -> Self {
        let bytes = match read {
            Ok(Some(b)) => b,
            Ok(None) => return Beside::Plain,
            Err(e) => return Beside::Unreadable(e),
        };
        match Manifest::from_slice(&bytes, limit) {
            Ok(m) => Beside::Dataset(Box::new(m)),
            Err(e) => match serde_json::from_slice::<serde_json::Value>(&bytes) {
                Ok(v) if v.get("format").and_then(|f| f.as_str()) != Some(manifest::FORMAT) => {
                    Beside::Plain
                }
                _ => Beside::Unreadable(e.to_string()),
            },
        }
    }

    /// The manifest in local folder `dir`.
    pub(crate) fn local(dir: &Path) -> Self {
        let limit = shardtool_core::Limits::DEFAULT_MAX_HEADER_BYTES;
        let read = match shardtool_core::read_within(&dir.join(manifest::FILE_NAME), limit) {
            Ok(b) => Ok(Some(b)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e.to_string()),
        };
        Self::judge(read, limit)
    }

    /// The manifest in the folder of the file at URL `url`.
    /// The manifest beside remote shard `url`, read through `remote`'s client of its folder
    /// (so a stop asked for ends a stalled read).
    pub(crate) fn remote(url: &str, remote: &shardtool_cache::RemoteFolders) -> Self {
        let limit = shardtool_core::Limits::DEFAULT_MAX_HEADER_BYTES;
        let read = (remote.connect(url))
            .and_then(|(folder, _)| folder.read(manifest::FILE_NAME, limit))
            .map_err(|e| e.to_string());
        Self::judge(read, limit)
    }
}

/// Whether the folder `dir` (named `_plan`) is a plan's: it holds a plan file, the input list,
/// the staged inputs' folder, or done records only.
fn plan_folder(dir: &Path) -> bool {
    let files = [crate::plan_file::PLAN_FILE, "inputs.jsonl"];
    let record = |e: std::fs::DirEntry| {
        let name = e.file_name().to_string_lossy().into_owned();
        let number = |n: &str| n.len() == 6 && n.bytes().all(|b| b.is_ascii_digit());
        name.strip_suffix(".json").is_some_and(number)
    };
    let done = std::fs::read_dir(dir.join("done"))
        .map(|rd| rd.flatten().map(record).collect::<Vec<_>>())
        .is_ok_and(|r| !r.is_empty() && r.iter().all(|ours| *ours));
    files.iter().any(|f| dir.join(f).is_file()) || dir.join("staged").is_dir() || done
}

/// Whether the `errors.jsonl` at `path` is a pack's: empty, or its first line one of a pack's
/// (`path`, `kind` and `message`, and nothing else). Another tool's report is no mark.
fn our_error_report(path: &Path) -> bool {
    use std::io::Read;
    let mut head = Vec::new();
    let file = shardtool_core::open_regular(path);
    if file
        .and_then(|f| f.take(64 << 10).read_to_end(&mut head))
        .is_err()
    {
        return false;
    }
    let Some(line) = head.split(|&b| b == b'\n').next().filter(|l| !l.is_empty()) else {
        return true;
    };
    let row: Result<serde_json::Map<String, serde_json::Value>, _> = serde_json::from_slice(line);
    let ours = |r: &serde_json::Map<String, serde_json::Value>| {
        r.len() == 3
            && ["path", "kind", "message"]
                .iter()
                .all(|k| r.get(*k).is_some_and(|v| v.is_string()))
    };
    row.is_ok_and(|r| ours(&r))
}

/// True for a shard name a pack gives: `<prefix>-`, six or more digits, a shard suffix.
fn named_as_a_shard(name: &str) -> bool {
    let Some(at) = name.rfind('-').filter(|&at| at > 0) else {
        return false;
    };
    let rest = &name[at + 1..];
    let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
    digits >= 6 && manifest::ShardKind::from_name(name).is_some() && {
        let suffix = &rest[digits..];
        manifest::ShardKind::from_name(&format!("x{suffix}")).is_some_and(|k| k.suffix() == suffix)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The whole clear, as a pack without staged inputs does it.
    fn prepare_output(plan: &PackPlan) -> Result<(), PackError> {
        clear_output(plan, Some(&[]))
    }

    #[test]
    fn shard_names_are_a_prefix_six_digits_and_a_shard_suffix() {
        for name in [
            "shard-000000.tar",
            "shard-000012.safetensors",
            "shard-1234567.tar.zst",
            "data-000000.tar",
            "my-data-000003.tar",
        ] {
            assert!(named_as_a_shard(name), "{name}");
        }
        for name in [
            "shard-00001.tar",
            "-000000.tar",
            "shard-000000.tar.gz",
            "shard-000000-x.tar",
            "keep.tar",
            "shard-000000.txt",
        ] {
            assert!(!named_as_a_shard(name), "{name}");
        }
    }

    #[test]
    fn an_output_that_is_the_image_folder_or_beside_input_shards_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("in");
        std::fs::create_dir_all(root.join("cat")).unwrap();
        let plan = |source, output: PathBuf| PackPlan::new(source, output);
        for output in [root.clone(), root.join("cat/..")] {
            let p = plan(InputSource::Folder(root.clone()), output.clone());
            assert!(
                matches!(check_apart(&p), Err(PlanError::OutputHoldsInputs { .. })),
                "{output:?}"
            );
        }
        for output in [
            dir.path().join("out"),
            root.join("out"),
            root.join("cat/new"),
        ] {
            let p = plan(InputSource::Folder(root.clone()), output);
            assert_eq!(check_apart(&p), Ok(()));
        }
        // An existing class folder (files, no manifest) is refused; an earlier pack's is not.
        std::fs::write(root.join("cat/a.jpg"), b"x").unwrap();
        let p = plan(InputSource::Folder(root.clone()), root.join("cat"));
        assert!(matches!(
            check_apart(&p),
            Err(PlanError::OutputHoldsInputs { .. })
        ));
        std::fs::create_dir_all(root.join("old")).unwrap();
        std::fs::write(root.join("old/manifest.json"), b"{}").unwrap();
        let p = plan(InputSource::Folder(root.clone()), root.join("old"));
        assert_eq!(check_apart(&p), Ok(()));
        // `link/..` is the parent of the link's target, as the kernel resolves it.
        let elsewhere = dir.path().join("elsewhere");
        std::fs::create_dir_all(&elsewhere).unwrap();
        std::os::unix::fs::symlink(root.join("cat"), elsewhere.join("link")).unwrap();
        let p = plan(InputSource::Folder(root.clone()), elsewhere.join("link/.."));
        assert!(matches!(
            check_apart(&p),
            Err(PlanError::OutputHoldsInputs { .. })
        ));
        // A plan's output (a `_plan` folder, no manifest yet) inside the input is an earlier pack's.
        std::fs::create_dir_all(root.join("planned/_plan")).unwrap();
        let p = plan(InputSource::Folder(root.clone()), root.join("planned"));
        assert_eq!(check_apart(&p), Ok(()));
        // `..` after a folder that does not exist still resolves to the input.
        let p = plan(InputSource::Folder(root.clone()), root.join("nosuch/.."));
        assert!(matches!(
            check_apart(&p),
            Err(PlanError::OutputHoldsInputs { .. })
        ));
        let shard = root.join("shard-000000.tar").to_string_lossy().into_owned();
        for source in [
            InputSource::Wds(vec![shard.clone()]),
            InputSource::Parquet(vec![format!("file://{shard}")]),
        ] {
            let p = plan(source, root.clone());
            assert!(matches!(
                check_apart(&p),
                Err(PlanError::OutputHoldsInputs { .. })
            ));
        }
        let p = plan(InputSource::Wds(vec![shard]), root.join("out"));
        assert_eq!(check_apart(&p), Ok(()));
        // A link to a shard elsewhere: the link's folder and the shard's are both refused.
        let links = dir.path().join("links");
        std::fs::create_dir_all(&links).unwrap();
        std::fs::write(root.join("real.tar"), b"x").unwrap();
        std::os::unix::fs::symlink(root.join("real.tar"), links.join("s.tar")).unwrap();
        let link = links.join("s.tar").to_string_lossy().into_owned();
        for output in [links.clone(), root.clone()] {
            let p = plan(InputSource::Wds(vec![link.clone()]), output);
            assert!(matches!(
                check_apart(&p),
                Err(PlanError::OutputHoldsInputs { .. })
            ));
        }
    }

    #[test]
    fn overwrite_removes_an_old_pack_and_refuses_foreign_shards() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out");
        std::fs::create_dir_all(out.join(crate::PLAN_DIR)).unwrap();
        std::fs::write(out.join(crate::PLAN_DIR).join("plan.json"), b"{}").unwrap();
        for f in [
            "shard-000000.tar",
            "errors.jsonl",
            ".shard-000001.tar.7.1.tmp",
            "notes.md",
        ] {
            std::fs::write(out.join(f), b"x").unwrap();
        }
        let mut plan = PackPlan::new(InputSource::Folder("in".into()), out.clone());
        plan.overwrite = true;
        std::fs::write(out.join("mine.tar"), b"x").unwrap();
        let err = prepare_output(&plan).unwrap_err();
        assert!(
            matches!(&err, PackError::OutputHoldsOtherShards { file, .. } if file == "mine.tar"),
            "{err}"
        );
        // Refused before anything was removed.
        assert!(out.join("shard-000000.tar").exists() && out.join(crate::PLAN_DIR).exists());
        std::fs::remove_file(out.join("mine.tar")).unwrap();
        prepare_output(&plan).unwrap();
        let left: Vec<_> = std::fs::read_dir(&out)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert_eq!(left, ["notes.md"]);
    }

    /// Files named as this plan names shards are an interrupted pack's only where a pack left
    /// its mark and no manifest lists the dataset's shards: downloaded WebDataset shards named
    /// `shard-NNNNNN.tar`, alone or beside a dataset, are the user's.
    #[test]
    fn shards_named_as_ours_go_only_where_a_pack_left_its_mark() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out");
        let mut plan = PackPlan::new(InputSource::Folder("in".into()), out.clone());
        plan.overwrite = true;
        let refused = |plan: &PackPlan, file: &str| {
            let err = prepare_output(plan).unwrap_err();
            assert!(
                matches!(&err, PackError::OutputHoldsOtherShards { file: f, .. } if f == file),
                "{err}"
            );
        };
        std::fs::create_dir_all(&out).unwrap();
        std::fs::write(out.join("shard-000007.tar"), b"x").unwrap();
        refused(&plan, "shard-000007.tar");
        // Beside a manifest that does not list it.
        let m = Manifest::new("t", Vec::new(), Vec::new(), Vec::new());
        std::fs::write(out.join(manifest::FILE_NAME), m.to_json()).unwrap();
        refused(&plan, "shard-000007.tar");
        assert!(out.join(manifest::FILE_NAME).exists());
        // Another tool's manifest, and a sync client's hidden temporary file, are no marks.
        std::fs::write(
            out.join(manifest::FILE_NAME),
            br#"{"format":"webdataset-index"}"#,
        )
        .unwrap();
        std::fs::write(out.join(".syncthing.shard-000004.tar.tmp"), b"x").unwrap();
        refused(&plan, "shard-000007.tar");
        assert_eq!(std::fs::read_dir(&out).unwrap().count(), 3);
        // A pack's error report and no manifest: a pack stopped before publishing, whatever
        // prefix it gave its shards.
        std::fs::remove_file(out.join(manifest::FILE_NAME)).unwrap();
        std::fs::remove_file(out.join(".syncthing.shard-000004.tar.tmp")).unwrap();
        std::fs::write(out.join("old-000121.tar"), b"x").unwrap();
        std::fs::write(out.join(ERRORS_FILE), b"").unwrap();
        prepare_output(&plan).unwrap();
        assert_eq!(std::fs::read_dir(&out).unwrap().count(), 0);
        // Another tool's error report is no mark; a `_plan` folder of the user's is refused.
        std::fs::write(out.join("shard-000007.tar"), b"x").unwrap();
        std::fs::write(
            out.join(ERRORS_FILE),
            b"{\"url\": \"http://x/a.jpg\", \"error\": \"404\"}\n",
        )
        .unwrap();
        refused(&plan, "shard-000007.tar");
        std::fs::remove_file(out.join("shard-000007.tar")).unwrap();
        std::fs::create_dir_all(out.join("_plan/done")).unwrap();
        std::fs::write(out.join("_plan/done/notes.txt"), b"x").unwrap();
        refused(&plan, "_plan");
        assert!(out.join("_plan/done/notes.txt").exists());
        std::fs::remove_dir_all(out.join("_plan")).unwrap();
        // Another prefix is read whole: `shard-backup-20240101.tar` is not this plan's.
        std::fs::write(out.join(ERRORS_FILE), b"").unwrap();
        std::fs::write(out.join("shard-backup-20240101.tar"), b"x").unwrap();
        refused(&plan, "shard-backup-20240101.tar");
        std::fs::remove_file(out.join("shard-backup-20240101.tar")).unwrap();
        // One of a pack's temporary files is a mark too.
        std::fs::write(out.join("shard-000007.tar"), b"x").unwrap();
        std::fs::write(out.join(".shard-000008.tar.41.2.tmp"), b"x").unwrap();
        prepare_output(&plan).unwrap();
        assert_eq!(std::fs::read_dir(&out).unwrap().count(), 0);
    }
}
