//! Finding the inputs of any kind (ImageFolder in `imagefolder.rs`, lists in `list_file.rs`,
//! WebDataset shards in `wds_input.rs`, Parquet in `parquet/`), in a sorted, deterministic order,
//! held in a compact [`Inputs`] store (a global shuffle keeps every input in memory at once).

use crate::labels::Labels;
use crate::ErrorRecord;
use std::borrow::Cow;
use std::collections::HashMap;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};

/// File extensions taken as images (compared case-insensitively). Content decides the decoder.
pub const IMAGE_EXTENSIONS: &[&str] = &[
    "jpg", "jpeg", "jpe", "jfif", "png", "webp", "gif", "bmp", "tif", "tiff",
];

/// Where the inputs come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InputSource {
    /// `ROOT/<class>/<file>`, classes being the sorted subdirectory names.
    Folder(PathBuf),
    /// A CSV (with header) or JSONL file with `path`, optional `label` and `key`, and any other
    /// columns (carried into each sample's metadata; `text` becomes its `.txt`).
    List(PathBuf),
    /// WebDataset tar shards: local paths or `http(s)://`, `s3://`, `file://` URLs, in order.
    Wds(Vec<String>),
    /// Parquet files (the Hugging Face layout): local paths or URLs, in order.
    Parquet(Vec<String>),
}

/// Which columns (of a list or a Parquet file) hold the image, the label and the text; `None`
/// picks the default (`path`, `label`, `text` for lists; Parquet picks `image`, `label`, `text` or `caption`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Columns {
    /// The image column (a list's path column).
    pub image: Option<String>,
    /// The label column.
    pub label: Option<String>,
    /// The text column, carried as the `.txt` field.
    pub text: Option<String>,
    /// Columns read as if the input lacked them: never carried, never chosen by default (a
    /// dropped `label` leaves the dataset unlabelled, a dropped `text` carries no caption).
    pub drop: Vec<String>,
}

/// The most columns `--drop-column` may name.
pub const MAX_DROPPED_COLUMNS: usize = 64;

impl Columns {
    /// These columns for `source`: a list whose header or first row names `file_name` and no
    /// `path` (a Hugging Face imagefolder's `metadata.jsonl` or `.csv`) reads its images from
    /// `file_name` unless an image column is given.
    pub fn for_source(mut self, source: &InputSource) -> Self {
        if let (None, InputSource::List(file)) = (&self.image, source) {
            if crate::list_file::names_file_not_path(file) {
                self.image = Some(crate::list_file::HF_IMAGE_COLUMN.into());
            }
        }
        self
    }

    /// Whether `name` is dropped (names compared ignoring ASCII case, as list columns are).
    pub(crate) fn is_dropped(&self, name: &str) -> bool {
        self.drop.iter().any(|d| d.eq_ignore_ascii_case(name))
    }

    /// Which dropped columns `names` holds, as bits of their places in [`Columns::drop`].
    pub(crate) fn dropped_bits<'n>(&self, names: impl IntoIterator<Item = &'n str>) -> u64 {
        let mut bits = 0;
        for n in names {
            if let Some(i) = self.drop.iter().position(|d| d.eq_ignore_ascii_case(n)) {
                bits |= 1 << i;
            }
        }
        bits
    }

    /// The first dropped column that none of the inputs held (`seen`, from
    /// [`Columns::dropped_bits`]): misspelt, or the inputs are not the ones meant.
    pub(crate) fn unseen_drop(&self, seen: u64) -> Option<&str> {
        (self.drop.iter().enumerate())
            .find(|(i, _)| seen & (1 << i) == 0)
            .map(|(_, d)| d.as_str())
    }

    /// Refuses a drop list that names a column also named for a role, or is too long, and one
    /// column named for two roles.
    fn check_drop(&self, list: bool) -> Result<(), String> {
        if self.drop.len() > MAX_DROPPED_COLUMNS {
            return Err(format!(
                "--drop-column names {} columns, over the {MAX_DROPPED_COLUMNS} it may",
                self.drop.len()
            ));
        }
        let named = [
            ("--image-column", self.image.as_deref()),
            ("--label-column", self.label.as_deref()),
            ("--text-column", self.text.as_deref()),
        ];
        for (flag, name) in named {
            if let Some(n) = name.filter(|n| self.is_dropped(n)) {
                return Err(format!("--drop-column {n}: it is the column {flag} names"));
            }
        }
        // One column, two roles: it would be the label, and the text silently none. (A list's
        // columns are found ignoring case; a Parquet file's by their exact names.)
        let same = |x: &str, y: &str| x == y || (list && x.eq_ignore_ascii_case(y));
        for (i, (a, x)) in named.iter().enumerate() {
            let twice =
                |(_, y): &&(&str, Option<&str>)| matches!((x, y), (Some(x), Some(y)) if same(x, y));
            if let Some((b, _)) = named[i + 1..].iter().find(twice) {
                return Err(format!(
                    "{a} and {b} both name the column {}: give each role its own column",
                    x.unwrap_or_default()
                ));
            }
        }
        if list {
            let path = self.image.as_deref().unwrap_or("path");
            for own in [path, "key"] {
                if self.is_dropped(own) {
                    return Err(format!(
                        "--drop-column {own}: a list's `{own}` column is read, never carried"
                    ));
                }
            }
        }
        Ok(())
    }
}

/// How inputs are listed.
#[derive(Debug, Clone, Default)]
pub struct ListOptions {
    /// Column choices.
    pub columns: Columns,
    /// Where Parquet files and remote inputs are staged, as `.stage-*.tmp` files (the output).
    pub stage_dir: PathBuf,
    /// Inputs larger than this are refused (a remote shard or Parquet file included).
    pub max_input_bytes: u64,
    /// Threads that stage Parquet files and fetch remote inputs.
    pub jobs: usize,
    /// The most bytes a compressed input shard may decompress to (`None`: 64 GiB).
    pub max_shard_bytes: Option<u64>,
    /// A folder never listed as input: the output (it may lie inside an ImageFolder input).
    pub exclude: Option<PathBuf>,
    /// The clients of remote inputs' folders (with the policy that may stop their fetches).
    pub remote: std::sync::Arc<shardtool_cache::RemoteFolders>,
}

/// One input image, borrowed from [`Inputs`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InputItem<'a> {
    /// The directory part of its path relative to [`Origin::root`], ending in `/` (or empty).
    pub dir: &'a [u8],
    /// The rest of its path (the file name for a folder input).
    pub name: &'a [u8],
    /// Its label (index into the class list).
    pub label: i64,
    /// A key given by the list or the input shard, if any.
    pub key: Option<&'a str>,
    /// The container (input shard, Parquet file or list) it is read from with `span`, as an index
    /// of [`Listing::containers`].
    pub container: Option<u32>,
    /// Its bytes in the container, `[start, end)`: a tar sample, or a list row with extra columns.
    pub span: Option<(u64, u64)>,
}

impl InputItem<'_> {
    /// The path relative to [`Origin::root`], as raw bytes (`dir` then `name`).
    pub fn path_bytes(&self) -> Vec<u8> {
        [self.dir, self.name].concat()
    }
}

/// The stored label of an unlabelled input.
const NO_LABEL: u32 = u32::MAX;
/// The largest label an input can have.
pub const MAX_LABEL: u32 = u32::MAX - 1;
/// The container of a directory whose inputs are plain files.
const NO_CONTAINER: u32 = u32::MAX;

/// A run of consecutive inputs (in listing order) that share a directory and whether their key
/// is their name: a folder listing has one per directory, a WebDataset listing one per shard.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Run {
    first: u32,
    dir: u32,
    /// Every input of the run has its name as its key (a WebDataset sample), stored once.
    key_is_name: bool,
}

/// The inputs of a pack, in listing order.
///
/// A global shuffle holds every input at once, so what one input costs here is what makes peak
/// memory grow with the dataset. Each directory prefix is stored once; names live back to back in
/// one byte arena with a `u32` end offset per input; directory and label are run-length coded
/// (labels are stored per input when they change too often for runs); keys (when there are any)
/// share a second arena, and a key equal to its input's name (a WebDataset sample's) is not
/// stored again. About 4 bytes plus the file name per input and no heap allocation per input. Offsets are `u32`: at most `u32::MAX - 1` inputs and
/// 4 GiB of names or keys, which [`Inputs::push`] enforces.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Inputs {
    dirs: Vec<Box<[u8]>>,
    /// Per directory, the container its inputs are read from ([`NO_CONTAINER`] for none).
    dir_containers: Vec<u32>,
    /// Per input, its span in its container; empty while no input has one (an empty span is none).
    spans: Vec<(u64, u64)>,
    runs: Vec<Run>,
    labels: Labels,
    names: Vec<u8>,
    ends: Vec<u32>,
    keys: String,
    /// End offsets in `keys`, per input; empty while no input has a key (an empty span is no key).
    key_ends: Vec<u32>,
}

impl Inputs {
    /// Number of inputs.
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// Whether any input has a key of its own.
    pub fn has_keys(&self) -> bool {
        !self.keys.is_empty() || self.runs.iter().any(|r| r.key_is_name)
    }

    /// Registers a directory prefix (ending in `/`, or empty) and returns its index for
    /// [`Inputs::push`]. Prefixes are not deduplicated here; the directory interner in `listing.rs` does that.
    pub fn add_dir(&mut self, prefix: &[u8]) -> u32 {
        self.add_container_dir(prefix, None)
    }

    /// Registers a directory prefix whose inputs are read from `container` (an index of
    /// [`Listing::containers`]); inputs under it are pushed with [`Inputs::push_span`].
    pub fn add_container_dir(&mut self, prefix: &[u8], container: Option<u32>) -> u32 {
        self.dirs.push(prefix.into());
        self.dir_containers.push(container.unwrap_or(NO_CONTAINER));
        (self.dirs.len() - 1) as u32
    }

    /// Appends an input with its span in its directory's container (see [`Inputs::push`]).
    pub fn push_span(
        &mut self,
        dir: u32,
        name: &[u8],
        label: Option<u32>,
        key: Option<&str>,
        span: (u64, u64),
    ) -> Result<(), ListError> {
        self.push(dir, name, label, key)?;
        self.spans.resize(self.len() - 1, (0, 0));
        self.spans.push(span);
        Ok(())
    }

    /// Appends an input: `name` under directory `dir` (from [`Inputs::add_dir`]), with its label
    /// (`None` for an unlabelled input; at most [`MAX_LABEL`]).
    pub fn push(
        &mut self,
        dir: u32,
        name: &[u8],
        label: Option<u32>,
        key: Option<&str>,
    ) -> Result<(), ListError> {
        let label = match label {
            Some(l) if l <= MAX_LABEL => l,
            Some(_) => {
                return Err(ListError::TooMany {
                    count: u64::from(MAX_LABEL),
                })
            }
            None => NO_LABEL,
        };
        let too_many = || ListError::TooMany {
            count: self.len() as u64,
        };
        let index = u32::try_from(self.len())
            .ok()
            .filter(|&i| i < u32::MAX - 1)
            .ok_or_else(too_many)?;
        let end = u32::try_from(self.names.len() + name.len()).map_err(|_| too_many())?;
        if (dir as usize) >= self.dirs.len() {
            return Err(ListError::UnknownDirectory(dir));
        }
        let key = key.filter(|k| !k.is_empty());
        let key_is_name = key.is_some_and(|k| k.as_bytes() == name);
        if let Some(k) = key.filter(|_| !key_is_name) {
            let kend = u32::try_from(self.keys.len() + k.len()).map_err(|_| too_many())?;
            self.key_ends.resize(self.len(), self.keys.len() as u32);
            self.keys.push_str(k);
            self.key_ends.push(kend);
        } else if !self.key_ends.is_empty() {
            self.key_ends.push(self.keys.len() as u32);
        }
        if self
            .runs
            .last()
            .is_none_or(|r| (r.dir, r.key_is_name) != (dir, key_is_name))
        {
            self.runs.push(Run {
                first: index,
                dir,
                key_is_name,
            });
        }
        self.labels.push(index, label);
        self.names.extend_from_slice(name);
        self.ends.push(end);
        if !self.spans.is_empty() {
            self.spans.push((0, 0));
        }
        Ok(())
    }

    /// Input `i` (panics when out of range, like slice indexing).
    pub fn get(&self, i: usize) -> InputItem<'_> {
        let start = if i == 0 { 0 } else { self.ends[i - 1] as usize };
        let run = self.runs[self.runs.partition_point(|r| r.first as usize <= i) - 1];
        let name = &self.names[start..self.ends[i] as usize];
        let key = if run.key_is_name {
            // Pushed from a `&str`, so the name is UTF-8.
            std::str::from_utf8(name).ok()
        } else {
            self.key_ends.get(i).and_then(|&end| {
                let start = if i == 0 {
                    0
                } else {
                    self.key_ends[i - 1] as usize
                };
                let k = self.keys.get(start..end as usize)?;
                (!k.is_empty()).then_some(k)
            })
        };
        let container = self.dir_containers[run.dir as usize];
        let label = self.labels.get(i);
        InputItem {
            dir: &self.dirs[run.dir as usize],
            name,
            label: if label == NO_LABEL {
                -1
            } else {
                i64::from(label)
            },
            key,
            container: (container != NO_CONTAINER).then_some(container),
            span: self.spans.get(i).copied().filter(|&(a, b)| b > a),
        }
    }

    /// Iterates in listing order.
    pub fn iter(&self) -> impl Iterator<Item = InputItem<'_>> + '_ {
        (0..self.len()).map(|i| self.get(i))
    }

    /// Releases spare capacity once listing is done (the store then lives for the whole pack).
    pub fn shrink_to_fit(&mut self) {
        self.dirs.shrink_to_fit();
        self.dir_containers.shrink_to_fit();
        self.spans.shrink_to_fit();
        self.runs.shrink_to_fit();
        self.labels.shrink_to_fit();
        self.names.shrink_to_fit();
        self.ends.shrink_to_fit();
        self.keys.shrink_to_fit();
        self.key_ends.shrink_to_fit();
    }

    /// Heap bytes held (capacity), for tests and diagnostics.
    pub fn heap_bytes(&self) -> usize {
        self.dirs.capacity() * std::mem::size_of::<Box<[u8]>>()
            + self.dirs.iter().map(|d| d.len()).sum::<usize>()
            + self.dir_containers.capacity() * 4
            + self.spans.capacity() * 16
            + self.runs.capacity() * std::mem::size_of::<Run>()
            + self.labels.heap_bytes()
            + self.names.capacity()
            + self.ends.capacity() * 4
            + self.keys.capacity()
            + self.key_ends.capacity() * 4
    }
}

/// Deduplicates directory prefixes of list inputs (one entry per distinct directory).
#[derive(Default)]
pub(crate) struct DirInterner {
    index: HashMap<Box<[u8]>, u32>,
}

impl DirInterner {
    pub(crate) fn get(
        &mut self,
        inputs: &mut Inputs,
        prefix: &[u8],
        container: Option<u32>,
    ) -> u32 {
        if let Some(&i) = self.index.get(prefix) {
            return i;
        }
        let i = inputs.add_container_dir(prefix, container);
        self.index.insert(prefix.into(), i);
        i
    }
}

/// The raw bytes of an OS string (lossy outside Unix, where names are not plain bytes).
pub(crate) fn os_bytes(s: &OsStr) -> Cow<'_, [u8]> {
    #[cfg(unix)]
    {
        Cow::Borrowed(std::os::unix::ffi::OsStrExt::as_bytes(s))
    }
    #[cfg(not(unix))]
    {
        match s.to_string_lossy() {
            Cow::Borrowed(b) => Cow::Borrowed(b.as_bytes()),
            Cow::Owned(o) => Cow::Owned(o.into_bytes()),
        }
    }
}

/// The path whose raw bytes are `b` (the inverse of [`os_bytes`]).
fn bytes_path(b: Vec<u8>) -> PathBuf {
    #[cfg(unix)]
    {
        PathBuf::from(<std::ffi::OsString as std::os::unix::ffi::OsStringExt>::from_vec(b))
    }
    #[cfg(not(unix))]
    {
        PathBuf::from(String::from_utf8_lossy(&b).into_owned())
    }
}

/// What item paths are relative to: the store keeps only relative paths, and the rest is derived
/// from this on demand.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Origin {
    /// The input folder, or the list's folder.
    pub root: PathBuf,
}

impl Origin {
    /// Where to read `item`.
    pub fn resolve(&self, item: &InputItem<'_>) -> PathBuf {
        self.root.join(bytes_path(item.path_bytes()))
    }

    /// How to name `item` in reports and sample metadata: relative to the input folder, or as
    /// listed (lossy for non-UTF-8 names).
    pub fn source(&self, item: &InputItem<'_>) -> String {
        String::from_utf8_lossy(&item.path_bytes()).into_owned()
    }
}

/// A file that inputs are read from by span: an input shard, a Parquet file staged as a tar, or
/// a list whose rows carry extra columns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Container {
    /// The local file read.
    pub path: PathBuf,
    /// How the user named it (a path or URL), for reports.
    pub source: String,
    /// What its spans hold.
    pub kind: ContainerKind,
    /// The entity tag of the URL it was fetched from, when the server gives one.
    pub etag: Option<String>,
}

/// What the spans of a [`Container`] hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ContainerKind {
    /// WebDataset samples (tar members sharing a key).
    Tar,
    /// CSV rows, with the file's header.
    Csv {
        /// The header row's column names.
        headers: Vec<String>,
    },
    /// JSONL lines.
    Jsonl,
    /// Rows of a Parquet file staged as a tar (`r<row>.jpg`, `.txt`, `.columns.json`).
    Parquet,
}

impl ContainerKind {
    /// Whether the spans are rows of a list (CSV or JSONL).
    pub fn is_list(&self) -> bool {
        matches!(self, Self::Csv { .. } | Self::Jsonl)
    }
}

/// The result of listing.
#[derive(Debug, Clone, Default)]
pub struct Listing {
    /// How item paths are resolved and named.
    pub origin: Origin,
    /// Inputs in sorted order (folder) or list order.
    pub inputs: Inputs,
    /// Files inputs are read from by span.
    pub containers: Vec<Container>,
    /// Files the listing made in the staging folder (fetched inputs, staged Parquet files), for
    /// the pack to remove when it ends.
    pub staged: Vec<PathBuf>,
    /// What was looked for, and where, for the error when nothing usable was found.
    pub looked_for: String,
    /// Class names (empty for an unlabelled dataset).
    pub classes: Vec<String>,
    /// Whether inputs carry labels.
    pub labelled: bool,
    /// Files skipped: hidden, or not an image extension.
    pub ignored: u64,
    /// Inputs that failed before reading (dangling links, bad list rows), in listing order.
    pub errors: Vec<ErrorRecord>,
}

impl Listing {
    /// Whether `item` is read by span from a container (a tar sample, a Parquet row), not being
    /// a file of its own (a plain input, or the file a list row names).
    pub(crate) fn in_container(&self, item: &InputItem<'_>) -> bool {
        (item.container.zip(item.span))
            .and_then(|(c, _)| self.containers.get(c as usize))
            .is_some_and(|c| !c.kind.is_list())
    }
}

/// Why the inputs could not be listed at all. Problems with single inputs are not errors: they
/// are collected in [`Listing::errors`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ListError {
    /// A folder or list file could not be read.
    #[error("{path}: {cause}")]
    Io {
        /// The folder or file.
        path: PathBuf,
        /// The cause (part of the message, not a separate source, so it is printed once).
        cause: std::io::Error,
    },
    /// An image folder input that is not a folder.
    #[error("{path} is not a directory; a CSV or JSONL file is read as a list of inputs")]
    NotAFolder {
        /// The path given.
        path: PathBuf,
    },
    /// A list file whose structure is unusable (no header, unreadable CSV).
    #[error("{path}: {message}")]
    BadList {
        /// The list file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// Options that do not fit the input.
    #[error("{message}")]
    BadInput {
        /// What is wrong.
        message: String,
    },
    /// More inputs (or classes) than one pack can index.
    #[error("too many inputs for one pack ({count} so far); split the input")]
    TooMany {
        /// How many were listed when the limit was reached.
        count: u64,
    },
    /// An input named a directory index that was never registered (a bug in the lister).
    #[error("internal: input directory #{0} was not registered")]
    UnknownDirectory(u32),
}

impl ListError {
    pub(crate) fn io(path: &Path) -> impl Fn(std::io::Error) -> Self + Copy + '_ {
        move |cause| ListError::Io {
            path: path.to_path_buf(),
            cause,
        }
    }
}

/// The column options checked against the kind of `source` (named for what lists and Parquet
/// files hold) and against each other; with `schemas`, against local Parquet files' schemas too
/// (read again when listed: a misspelt column is found before an output is cleared).
pub(crate) fn check_columns(
    source: &InputSource,
    options: &ListOptions,
    schemas: bool,
) -> Result<(), ListError> {
    // Columns name what lists and Parquet files hold: given for another input, they would be
    // silently ignored (a caption never carried).
    let kind = match source {
        InputSource::Folder(_) => Some("an ImageFolder"),
        InputSource::Wds(_) => Some("WebDataset shards"),
        _ => None,
    };
    let c = &options.columns;
    if let (Some(kind), Some((flag, _))) = (
        kind,
        [
            // A WebDataset sample's image field may be named (`left.jpg` of a stereo pair).
            (
                "--image-column",
                &c.image
                    .clone()
                    .filter(|_| matches!(source, InputSource::Folder(_))),
            ),
            ("--label-column", &c.label),
            ("--text-column", &c.text),
            ("--drop-column", &c.drop.first().cloned()),
        ]
        .into_iter()
        .find(|(_, v)| v.is_some()),
    ) {
        return Err(ListError::BadInput {
            message: format!(
                "{flag} applies to list and Parquet inputs{}; this input is {kind}, whose \
                 fields are its own",
                if flag == "--image-column" {
                    " (and names a WebDataset sample's image field)"
                } else {
                    ""
                }
            ),
        });
    }
    c.check_drop(matches!(source, InputSource::List(_)))
        .map_err(|message| ListError::BadInput { message })?;
    match source {
        InputSource::Parquet(files) if schemas => crate::parquet::check_columns(files, options),
        _ => Ok(()),
    }
}

/// Lists the inputs of `source`. Errors are only for unusable sources (missing folder, unreadable
/// or header-less list); problems with single inputs are collected in [`Listing::errors`].
pub fn list_inputs(source: &InputSource, options: &ListOptions) -> Result<Listing, ListError> {
    check_columns(source, options, false)?;
    let mut listing = match source {
        InputSource::Folder(root) => {
            crate::imagefolder::list_folder(root, options.exclude.as_deref())?
        }
        InputSource::List(file) => {
            let mut l = crate::list_file::list_file(file, &options.columns)?;
            let named_by = options.columns.image.as_deref();
            if crate::list_file::is_imagefolder_metadata(file)
                && named_by == Some(crate::list_file::HF_IMAGE_COLUMN)
            {
                let exclude = options.exclude.as_deref();
                crate::list_file::unlisted_images(file, &options.columns, &mut l, exclude)?;
            }
            l
        }
        InputSource::Wds(shards) => crate::wds_input::list_wds(shards, options)?,
        InputSource::Parquet(files) => crate::parquet::list_parquet(files, options)?,
    };
    listing.inputs.shrink_to_fit();
    Ok(listing)
}

/// Largest integer label accepted from a list: the manifest names every class from 0 up to the
/// largest label, so this bounds its size (a million classes is beyond any public dataset).
pub const MAX_INT_LABEL: i64 = 999_999;

/// The longest class name taken from a list or Parquet label column (a folder name's limit): a
/// longer one fails its row, being no class name, and would swell the manifest.
pub(crate) const MAX_CLASS_NAME_BYTES: usize = 255;

#[cfg(test)]
mod tests {
    use super::*;

    fn write(path: &Path) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, b"x").unwrap();
    }

    fn sources(l: &Listing) -> Vec<(String, i64)> {
        l.inputs
            .iter()
            .map(|i| (l.origin.source(&i), i.label))
            .collect()
    }

    #[test]
    fn store_round_trips_dirs_labels_and_late_keys() {
        let mut s = Inputs::default();
        let a = s.add_dir(b"a/");
        let b = s.add_dir(b"");
        s.push(a, b"1.jpg", Some(0), None).unwrap();
        s.push(a, b"2.jpg", Some(0), None).unwrap();
        s.push(b, b"x/3.jpg", Some(7), Some("k3")).unwrap();
        s.push(a, b"4.jpg", Some(0), None).unwrap();
        s.push(a, b"5.jpg", Some(1), Some("k5")).unwrap();
        let got: Vec<(Vec<u8>, i64, Option<&str>)> =
            s.iter().map(|i| (i.path_bytes(), i.label, i.key)).collect();
        let want: Vec<(Vec<u8>, i64, Option<&str>)> = vec![
            (b"a/1.jpg".to_vec(), 0, None),
            (b"a/2.jpg".to_vec(), 0, None),
            (b"x/3.jpg".to_vec(), 7, Some("k3")),
            (b"a/4.jpg".to_vec(), 0, None),
            (b"a/5.jpg".to_vec(), 1, Some("k5")),
        ];
        assert_eq!(got, want);
        assert!(s.has_keys());
        assert!(s.push(9, b"n", Some(0), None).is_err(), "unknown directory");
    }

    #[test]
    fn per_input_memory_is_an_offset_and_the_name() {
        let mut s = Inputs::default();
        let d = s.add_dir(b"some/class/directory/");
        let n = 20_000;
        let mut name_bytes = 0;
        for i in 0..n {
            let name = format!("{i:08}.jpg");
            name_bytes += name.len();
            s.push(d, name.as_bytes(), Some(3), None).unwrap();
        }
        s.shrink_to_fit();
        let per_input = (s.heap_bytes() - name_bytes) as f64 / n as f64;
        assert!(
            per_input < 4.5,
            "{per_input} bytes per input besides the name"
        );
        assert_eq!(s.get(n - 1).name, b"00019999.jpg");
        assert_eq!(s.get(n - 1).dir, b"some/class/directory/");
    }

    #[test]
    fn webdataset_samples_store_their_key_once_and_changing_labels_one_word_each() {
        // A WebDataset listing: key = name, span per sample, labels that change every sample.
        let mut s = Inputs::default();
        let d = s.add_container_dir(b"shard-000000.tar:", Some(0));
        let n = 20_000u32;
        let mut name_bytes = 0;
        let mut want = Vec::new();
        for i in 0..n {
            let key = format!("{i:09}");
            name_bytes += key.len();
            let label = (i * 7919) % 1000;
            s.push_span(
                d,
                key.as_bytes(),
                Some(label),
                Some(&key),
                (u64::from(i) * 10, u64::from(i) * 10 + 7),
            )
            .unwrap();
            want.push((key, i64::from(label)));
        }
        // Name offset 4, span 16, label 4: 24 bytes per input besides the name, no second key.
        let mut fitted = s.clone();
        fitted.shrink_to_fit();
        let per_input = (fitted.heap_bytes() - name_bytes) as f64 / f64::from(n);
        assert!(
            per_input < 24.5,
            "{per_input} bytes per input besides the name"
        );
        // A key that differs from the name is still stored and read back.
        s.push_span(d, b"other", None, Some("k"), (1, 2)).unwrap();
        let got: Vec<(String, i64)> = s
            .iter()
            .take(n as usize)
            .map(|i| {
                assert_eq!(i.key.map(str::as_bytes), Some(i.name));
                (i.key.unwrap().to_string(), i.label)
            })
            .collect();
        assert_eq!(got, want);
        let last = s.get(n as usize);
        assert_eq!(
            (last.name, last.key, last.label),
            (&b"other"[..], Some("k"), -1)
        );
        assert!(s.has_keys());
    }

    #[test]
    fn folder_listing_is_sorted_recursive_and_relative() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        for p in [
            "b/z.jpg",
            "b/a.PNG",
            "b/sub/m.jpg",
            "b/sub/.hidden.jpg",
            "b/c.txt",
            "a/1.jpeg",
            "empty/.keep",
            "top.jpg",
        ] {
            write(&root.join(p));
        }
        std::fs::create_dir_all(root.join("b/dir.jpg")).unwrap();
        let l = list_inputs(
            &InputSource::Folder(root.to_path_buf()),
            &ListOptions::default(),
        )
        .unwrap();
        assert_eq!(l.classes, ["a", "b", "empty"]);
        assert_eq!(
            sources(&l),
            [
                ("a/1.jpeg".to_string(), 0),
                ("b/a.PNG".into(), 1),
                ("b/sub/m.jpg".into(), 1),
                ("b/z.jpg".into(), 1),
            ]
        );
        // top.jpg, c.txt, .hidden.jpg, .keep; `dir.jpg` is an empty directory, not an input.
        assert_eq!(l.ignored, 4);
        let last = l.inputs.get(3);
        assert_eq!(l.origin.resolve(&last), root.join("b/z.jpg"));
    }

    #[cfg(unix)]
    #[test]
    fn non_utf8_names_resolve_to_the_same_file() {
        use std::os::unix::ffi::OsStrExt;
        let dir = tempfile::tempdir().unwrap();
        let name = OsStr::from_bytes(b"caf\xe9.jpg");
        write(&dir.path().join("c").join(name));
        std::os::unix::fs::symlink("/nonexistent", dir.path().join("c/gone.jpg")).unwrap();
        let l = list_inputs(
            &InputSource::Folder(dir.path().to_path_buf()),
            &ListOptions::default(),
        )
        .unwrap();
        assert_eq!(l.inputs.len(), 1);
        let item = l.inputs.get(0);
        assert!(l.origin.resolve(&item).is_file());
        assert_eq!(l.origin.source(&item), "c/caf\u{fffd}.jpg");
        assert_eq!(l.errors.len(), 1);
        assert_eq!(l.errors[0].path, "c/gone.jpg");
    }

    #[test]
    fn csv_column_names_match_in_any_case_for_labels_too() {
        // Found by the `list` fuzz target: `Label` was read as each row's label (names match in
        // any case) but the list counted as unlabelled (an exact match), so every input got
        // label 0 and the class names were lost.
        let dir = tempfile::tempdir().unwrap();
        let list = dir.path().join("l.csv");
        std::fs::write(&list, "Path,Label\na.jpg,dog\nb.jpg,cat\n").unwrap();
        let l = list_inputs(&InputSource::List(list), &ListOptions::default()).unwrap();
        assert!(l.labelled);
        assert_eq!(l.classes, ["cat", "dog"]);
        assert_eq!(
            sources(&l),
            [("a.jpg".to_string(), 1), ("b.jpg".to_string(), 0)]
        );
    }

    #[test]
    fn lists_keep_paths_as_listed_and_share_directories() {
        let dir = tempfile::tempdir().unwrap();
        let list = dir.path().join("l.csv");
        std::fs::write(
            &list,
            "path,label,key\nx/./a.jpg,dog,k1\nx/./b.jpg,cat,\n/abs/c.jpg,dog,k3\n,cat,\nd.jpg,cat,\n",
        )
        .unwrap();
        let l = list_inputs(&InputSource::List(list.clone()), &ListOptions::default()).unwrap();
        assert_eq!(l.classes, ["cat", "dog"]);
        let got: Vec<(String, i64, Option<&str>)> = l
            .inputs
            .iter()
            .map(|i| (l.origin.source(&i), i.label, i.key))
            .collect();
        assert_eq!(
            got,
            [
                ("x/./a.jpg".to_string(), 1, Some("k1")),
                ("x/./b.jpg".into(), 0, None),
                ("/abs/c.jpg".into(), 1, Some("k3")),
                ("d.jpg".into(), 0, None),
            ]
        );
        assert_eq!(l.errors.len(), 1);
        assert_eq!(l.errors[0].path, format!("{}:5", list.display()));
        assert_eq!(l.origin.resolve(&l.inputs.get(2)), Path::new("/abs/c.jpg"));
        // Two distinct directories ("x/./", "/abs/") and the empty one.
        assert_eq!(l.inputs.dirs.len(), 3);

        let jsonl = dir.path().join("l.jsonl");
        std::fs::write(
            &jsonl,
            "{\"path\": \"a.jpg\", \"label\": 2}\n\n{\"path\": \"b.jpg\", \"label\": 1000000}\nnot json\n",
        )
        .unwrap();
        let l = list_inputs(&InputSource::List(jsonl), &ListOptions::default()).unwrap();
        assert_eq!(l.classes, ["0", "1", "2"]);
        assert_eq!(sources(&l), [("a.jpg".to_string(), 2)]);
        let kinds: Vec<&str> = l.errors.iter().map(|e| e.kind.as_str()).collect();
        assert_eq!(kinds, ["bad_label", "bad_list_row"]);
    }
}
