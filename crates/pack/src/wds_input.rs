//! Listing the samples of WebDataset shards (local, fetched or decompressed) by their tar
//! headers alone: each sample's members, image field and `.cls` label, and what could not be
//! read, with the samples before any damage kept.

use crate::containers::{decompress_shard, fetch_input, parallel_map, Fetched};
use crate::failure;
use crate::listing::{Container, ContainerKind, ListError, ListOptions, Listing, MAX_INT_LABEL};
use shardtool_wds::{index_samples, is_image_field, parse_cls, SampleSpan, IMAGE_FIELDS};
use std::path::Path;

/// The samples of one shard, or why it could not be read (with the samples before the damage).
struct ShardSamples {
    fetched: Option<Fetched>,
    samples: Vec<SampleSpan>,
    labels: Vec<Result<Option<u32>, String>>,
    error: Option<String>,
}

/// Reads a sample's `.cls` member: `Ok(None)` for none or -1 (no label, as the reader and the
/// Hugging Face `ClassLabel` write it); another negative is no label of any class.
fn read_label(file: &std::fs::File, sample: &SampleSpan) -> Result<Option<u32>, String> {
    use std::os::unix::fs::FileExt;
    let Some(cls) = sample.members.iter().find(|m| m.field == "cls") else {
        return Ok(None);
    };
    if cls.size > 64 {
        return Err(format!("its .cls is {} bytes, not a label", cls.size));
    }
    let mut buf = vec![0u8; cls.size as usize];
    file.read_exact_at(&mut buf, cls.data_offset)
        .map_err(|e| format!("reading its .cls: {e}"))?;
    match parse_cls(&buf) {
        Some(-1) => Ok(None),
        Some(l) if l < 0 => Err(format!("label {l} is negative (-1 alone means no label)")),
        Some(l) if l <= MAX_INT_LABEL => Ok(Some(l as u32)),
        Some(l) => Err(format!("label {l} is outside 0..={MAX_INT_LABEL}")),
        None => Err(format!(
            "its .cls holds {:?}, not an integer",
            String::from_utf8_lossy(&buf)
        )),
    }
}

/// A field that a sample's members name more than once (consecutive members sharing a key).
fn repeated_field(s: &SampleSpan) -> Option<&str> {
    let mut seen = std::collections::HashSet::with_capacity(s.members.len());
    s.members
        .iter()
        .map(|m| m.field.as_str())
        .find(|f| !seen.insert(*f))
}

fn index_shard(name: &str, index: usize, options: &ListOptions) -> ShardSamples {
    use std::os::unix::fs::FileExt;
    let mut out = ShardSamples {
        fetched: None,
        samples: Vec::new(),
        labels: Vec::new(),
        error: None,
    };
    let fetched = match fetch_input(name, index, options) {
        Ok(f) => f,
        Err(e) => {
            out.error = Some(format!("cannot fetch: {e}"));
            return out;
        }
    };
    if crate::sample_read::not_regular(&fetched.path) {
        out.error = Some(crate::sample_read::NOT_REGULAR.into());
        out.fetched = Some(fetched);
        return out;
    }
    let mut file = match std::fs::File::open(&fetched.path) {
        Ok(f) => f,
        Err(e) => {
            out.error = Some(format!("cannot open: {e}"));
            out.fetched = Some(fetched);
            return out;
        }
    };
    let mut damage = None;
    let (file, fetched) = match decompress_shard(&mut file, index, options) {
        Ok(None) => (file, fetched),
        Ok(Some(d)) => {
            damage = d.damage;
            if fetched.staged {
                let _ = std::fs::remove_file(&fetched.path);
            }
            let fetched = Fetched {
                path: d.path,
                staged: true,
                etag: fetched.etag,
            };
            (d.file, fetched)
        }
        Err(e) => {
            out.error = Some(e);
            out.fetched = Some(fetched);
            return out;
        }
    };
    let len = file.metadata().map(|m| m.len()).unwrap_or(0);
    let r = index_samples(
        len,
        |at, buf| file.read_exact_at(buf, at),
        |s| out.samples.push(s),
    );
    // Damaged compression explains a tar cut short better than the tar's own error does, and
    // text where the first header should be is no tar at all (a list of shards, say).
    out.error = match (damage, r) {
        (Some(d), _) => Some(format!("{d}; the samples before the damage are kept")),
        (None, Err(_)) if out.samples.is_empty() && starts_with_text(&file) => {
            Some(NOT_A_TAR.into())
        }
        (None, Err(e)) => Some(format!("{e}; the rest of the shard is not read")),
        (None, Ok(())) => None,
    };
    out.labels = out.samples.iter().map(|s| read_label(&file, s)).collect();
    out.fetched = Some(fetched);
    out
}

/// Why a shard that holds text is not read.
const NOT_A_TAR: &str = "not a tar archive: the file holds text (an error page, or a list of \
     shards, which is not an input: give the shards themselves, as a folder, a brace pattern, a \
     glob or their URLs)";

/// Whether `file` begins with text, where a tar's first header holds NUL bytes: no NUL in its
/// first 512 bytes (UTF-8, Latin-1), or a UTF-16 byte order mark.
fn starts_with_text(file: &std::fs::File) -> bool {
    use std::os::unix::fs::FileExt;
    let mut head = [0u8; 512];
    let n = file.read_at(&mut head, 0).unwrap_or(0);
    let head = &head[..n];
    let utf16 = head.starts_with(&[0xFF, 0xFE]) || head.starts_with(&[0xFE, 0xFF]);
    n > 0 && (!head.contains(&0) || utf16)
}

/// Remote input shards fetched (into staged files) at once, whatever `--jobs` says.
const REMOTE_FETCHES: usize = 16;

/// Lists the samples of WebDataset shards (local paths or URLs, in order). Each sample's members
/// are found by the headers alone; its image is the field `--image-column` names (ignoring case)
/// or else the first field of [`IMAGE_FIELDS`] it has, and
/// its label its `.cls` (none, or a negative one, leaves it unlabelled).
pub(crate) fn list_wds(shards: &[String], options: &ListOptions) -> Result<Listing, ListError> {
    let named = options.columns.image.as_deref();
    let mut listing = Listing {
        looked_for: format!(
            "WebDataset samples with an image field ({}) in {} shard(s){}",
            named.map_or(IMAGE_FIELDS.join(", "), str::to_string),
            shards.len(),
            shards
                .first()
                .map(|s| format!(", the first {s}"))
                .unwrap_or_default()
        ),
        ..Listing::default()
    };
    let mut max_label: Option<u32> = None;
    let classes = DatasetClasses::of(shards, &options.remote)
        .map_err(|message| ListError::BadInput { message })?;
    // A few shards are indexed at a time, so only their sample indexes are held at once (the
    // compact input store keeps what lasts), however many shards there are.
    // Remote shards are mostly waited for: fetched more at once than there are cores.
    let threads = match shards.iter().any(|s| crate::containers::is_remote(s)) {
        true => options.jobs.max(REMOTE_FETCHES),
        false => options.jobs,
    };
    let chunk = threads.max(1) * 2;
    for (c, names) in shards.chunks(chunk).enumerate() {
        let indexed = parallel_map(names, threads, |i, name| {
            index_shard(name, c * chunk + i, options)
        });
        for (name, shard) in names.iter().zip(indexed) {
            if let Some(f) = shard.fetched {
                if f.staged {
                    listing.staged.push(f.path.clone());
                }
                let ci = listing.containers.len() as u32;
                listing.containers.push(Container {
                    etag: f.etag,
                    path: f.path,
                    // URLs may carry credentials; what is shown never does.
                    source: shardtool_core::redact_urls(name).into_owned(),
                    kind: ContainerKind::Tar,
                });
                let dir = listing.inputs.add_container_dir(
                    format!("{}:", shardtool_core::redact_urls(name)).as_bytes(),
                    Some(ci),
                );
                for (s, label) in shard.samples.iter().zip(shard.labels) {
                    let source = || format!("{name}:{}", s.key);
                    let image = |f: &str| match named {
                        Some(named) => f.eq_ignore_ascii_case(named),
                        None => is_image_field(f),
                    };
                    if !s.members.iter().any(|m| image(&m.field)) {
                        // The first few of its fields: a hostile sample may have millions.
                        let fields: Vec<&str> = s
                            .members
                            .iter()
                            .take(16)
                            .map(|m| match m.field.as_str() {
                                "" => "no field (a name without an extension)",
                                f => f,
                            })
                            .collect();
                        let more = match s.members.len() {
                            n @ 17.. => format!(" and {} more", n - 16),
                            _ => String::new(),
                        };
                        listing.errors.push(failure(
                            source(),
                            "no_image",
                            format!(
                                "the sample has no image field ({}); it has {}{more}",
                                named.map_or(IMAGE_FIELDS.join(", "), |n| format!(
                                    "{n}, named by --image-column"
                                )),
                                fields.join(", ")
                            ),
                        ));
                        continue;
                    }
                    if let Some(field) = repeated_field(s) {
                        // webdataset refuses such a sample too ("duplicate file name").
                        listing.errors.push(failure(
                            source(),
                            "bad_field",
                            format!("the sample holds field {field:?} twice"),
                        ));
                        continue;
                    }
                    let label = match (label, &classes) {
                        (Ok(Some(l)), Some(c)) => c.map(name, l).map(Some),
                        (label, _) => label,
                    };
                    let label = match label {
                        Ok(l) => l,
                        Err(message) => {
                            listing.errors.push(failure(source(), "bad_label", message));
                            continue;
                        }
                    };
                    if let Some(l) = label {
                        max_label = max_label.max(Some(l));
                    }
                    listing.inputs.push_span(
                        dir,
                        s.key.as_bytes(),
                        label,
                        Some(&s.key),
                        (s.start, s.end),
                    )?;
                }
            }
            if let Some(message) = shard.error {
                listing
                    .errors
                    .push(failure(name.clone(), "bad_shard", message));
            }
        }
    }
    listing.labelled = max_label.is_some();
    listing.classes = match (max_label, classes) {
        (Some(_), Some(c)) => c.names,
        _ => (0..max_label.map_or(0, |m| m + 1))
            .map(|i| i.to_string())
            .collect(),
    };
    Ok(listing)
}

/// The classes of the shardtool datasets `shards` come from, when some lie in a folder whose
/// manifest names its classes: a re-pack keeps the names rather than numbering the classes, and
/// maps each dataset's labels to them by name, so datasets that number their classes
/// differently do not mix them. Shards of no dataset beside them may come unlabelled (captions);
/// a label of theirs numbers a class no manifest names, and fails its sample.
struct DatasetClasses {
    /// The class names: the datasets' table when they share one, else every name, sorted.
    names: Vec<String>,
    /// For the folder of each dataset, its labels' places in `names`.
    by_dir: std::collections::HashMap<std::path::PathBuf, Vec<u32>>,
}

impl DatasetClasses {
    /// `None` when no shard comes from a shardtool dataset with classes; an error when a
    /// folder's manifest cannot be read.
    fn of(
        shards: &[String],
        remote: &shardtool_cache::RemoteFolders,
    ) -> Result<Option<Self>, String> {
        // One shard of each folder (a URL's folder is read through it).
        let mut dirs: Vec<(&Path, &str)> =
            shards.iter().map(|s| (shard_dir(s), s.as_str())).collect();
        dirs.sort();
        dirs.dedup_by(|a, b| a.0 == b.0);
        let mut tables = Vec::new();
        for (dir, shard) in dirs {
            use crate::output::Beside;
            let beside = match crate::containers::is_remote(shard) {
                true => Beside::remote(shard, remote),
                false => Beside::local(dir),
            };
            let m = match beside {
                Beside::Dataset(m) => m,
                Beside::Plain => continue,
                Beside::Unreadable(why) => {
                    let path = dir.join(shardtool_manifest::FILE_NAME);
                    return Err(format!(
                        "{} cannot be read ({why}), so the class names of the shards beside it \
                         are unknown: repair it (or try again, if a server failed), or move it \
                         away to pack them as plain WebDataset shards",
                        shardtool_core::redact_urls(&path.to_string_lossy())
                    ));
                }
            };
            // An unlabelled dataset has no labels to map (one there is a `bad_label` line).
            tables.push((dir.to_path_buf(), m.classes));
        }
        let labelled: Vec<&(std::path::PathBuf, Vec<String>)> =
            tables.iter().filter(|(_, t)| !t.is_empty()).collect();
        let Some(first) = labelled.first() else {
            return Ok(None);
        };
        // A table naming a class twice cannot map labels by name: numbered as before.
        let repeats = |t: &Vec<String>| {
            let distinct: std::collections::BTreeSet<&String> = t.iter().collect();
            distinct.len() != t.len()
        };
        if labelled.iter().any(|(_, t)| repeats(t)) {
            return Ok(None);
        }
        let names: Vec<String> = match labelled.iter().all(|(_, t)| *t == first.1) {
            true => first.1.clone(),
            false => {
                let all: std::collections::BTreeSet<&String> =
                    labelled.iter().flat_map(|(_, t)| t).collect();
                all.into_iter().cloned().collect()
            }
        };
        let place: std::collections::HashMap<&str, u32> = (names.iter().enumerate())
            .map(|(i, n)| (n.as_str(), i as u32))
            .collect();
        let by_dir = (tables.iter())
            .map(|(dir, t)| (dir.clone(), t.iter().map(|n| place[n.as_str()]).collect()))
            .collect();
        Ok(Some(Self { names, by_dir }))
    }

    /// Label `label` of a sample of `shard`, as a place in [`Self::names`].
    fn map(&self, shard: &str, label: u32) -> Result<u32, String> {
        let dir = shard_dir(shard);
        let manifest = dir.join(shardtool_manifest::FILE_NAME);
        let Some(table) = self.by_dir.get(dir) else {
            return Err(format!(
                "its label {label} numbers a class no manifest names (there is no shardtool \
                 manifest at {}), beside shards of datasets whose manifests name their \
                 classes: pack them apart",
                shardtool_core::redact_urls(&manifest.to_string_lossy())
            ));
        };
        table.get(label as usize).copied().ok_or_else(|| {
            format!(
                "its label {label} is not one of the {} classes of {}",
                table.len(),
                manifest.display()
            )
        })
    }
}

/// The folder of a shard (a URL's too: its text up to the last `/`).
fn shard_dir(shard: &str) -> &Path {
    Path::new(shard).parent().unwrap_or(Path::new(""))
}
