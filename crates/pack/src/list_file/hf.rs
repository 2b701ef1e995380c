//! Hugging Face imagefolder metadata (`metadata.jsonl` or `.csv` beside the images, naming each
//! by `file_name`): how such a list is told apart, and the images in its folder that no row
//! names.

use super::{for_each_row, ListColumns, ListKind, Members};
use crate::failure;
use crate::listing::{Columns, ListError, Listing};
use std::ffi::OsStr;
use std::path::{Path, PathBuf};

/// The image column of a Hugging Face imagefolder's `metadata.jsonl` or `.csv`.
pub(crate) const HF_IMAGE_COLUMN: &str = "file_name";

/// Whether the list `file`'s header (CSV) or first row (JSONL) names a `file_name` column and
/// no `path` one, or is a Hugging Face imagefolder's `metadata.jsonl` or `.csv` naming
/// `file_name`: its images are named by `file_name`.
/// A file that cannot be read says no (listing it reports why).
pub(crate) fn names_file_not_path(file: &Path) -> bool {
    use std::io::Read;
    // A header or first row longer than this is no imagefolder's metadata.
    const PEEK: u64 = 1 << 20;
    if crate::sample_read::not_regular(file) {
        return false;
    }
    let mut text = Vec::new();
    let read = std::fs::File::open(file).and_then(|f| f.take(PEEK).read_to_end(&mut text));
    if read.is_err() {
        return false;
    }
    // A byte-order mark, as some editors write, is no part of the first name.
    let text = text.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(&text);
    let names: Vec<String> = match ListKind::of(file, text) {
        ListKind::Csv => {
            let mut rdr = csv::ReaderBuilder::new().flexible(true).from_reader(text);
            match rdr.headers() {
                Ok(h) => h.iter().map(|n| n.trim().to_string()).collect(),
                Err(_) => return false,
            }
        }
        ListKind::Jsonl => {
            let first = (text.split(|&b| b == b'\n')).find(|l| !l.trim_ascii().is_empty());
            match first.and_then(|l| serde_json::from_slice::<Members>(l).ok()) {
                Some(m) => m.0.into_iter().map(|(n, _)| n).collect(),
                None => return false,
            }
        }
    };
    let has = |c: &str| names.iter().any(|n| n.eq_ignore_ascii_case(c));
    // An imagefolder's metadata names its images by `file_name` even beside a `path` column.
    has(HF_IMAGE_COLUMN) && (!has("path") || is_imagefolder_metadata(file))
}

/// The names a Hugging Face imagefolder's metadata file may have.
const METADATA_FILES: [&str; 2] = ["metadata.jsonl", "metadata.csv"];

/// Whether `file` is a Hugging Face imagefolder's metadata file by its name.
pub(crate) fn is_imagefolder_metadata(file: &Path) -> bool {
    file.file_name()
        .is_some_and(|n| METADATA_FILES.iter().any(|m| n == *m))
}

/// The imagefolder metadata files in folder `dir`, in [`METADATA_FILES`] order.
pub(crate) fn metadata_in(dir: &Path) -> Vec<PathBuf> {
    (METADATA_FILES.iter())
        .map(|m| dir.join(m))
        .filter(|m| m.is_file())
        .collect()
}

/// For a Hugging Face imagefolder's metadata `file`, listed in `listing` with `columns`: each
/// image in its folder and below that no row names (a row that failed names its image too) is
/// a failed input (`unlisted`), as the `datasets` library refuses such an image; other files
/// count as ignored; one under a subfolder with its own metadata file (not read) says so.
/// Hidden entries, links to folders, `exclude` (the output) and earlier packs are not searched.
pub(crate) fn unlisted_images(
    file: &Path,
    columns: &Columns,
    listing: &mut Listing,
    exclude: Option<&Path>,
) -> Result<(), ListError> {
    use std::collections::HashSet;
    use std::path::Component;
    let base = file.parent().filter(|p| !p.as_os_str().is_empty());
    let base = base.unwrap_or(Path::new("."));
    // Paths compared as absolute paths with `.` and `..` worked out (`./a.jpg`, `sub/../a.jpg`
    // and `/data/a.jpg` are one), by a 64-bit hash each: a million rows take 8 MB.
    let key = |p: &Path| {
        let abs = std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf());
        let mut parts: Vec<&OsStr> = Vec::new();
        for c in abs.components() {
            match c {
                Component::ParentDir => {
                    parts.pop();
                }
                Component::Normal(part) => parts.push(part),
                _ => {}
            }
        }
        let mut bytes = Vec::new();
        for part in parts {
            bytes.extend_from_slice(part.as_encoded_bytes());
            bytes.push(0);
        }
        shardtool_core::Checksum::of(&bytes).0
    };
    let text = std::fs::read(file).unwrap_or_default();
    let kind = ListKind::of(file, &text);
    let mut named: HashSet<u64> = HashSet::new();
    // The splits whose folders the rows' images lie in (`train/a.jpg`, `test/b.jpg`).
    let mut splits = std::collections::BTreeSet::new();
    let _ = for_each_row(&text, kind, &ListColumns::new(columns), &mut |row| {
        if let Some(p) = row.path.as_deref() {
            named.insert(key(&base.join(p)));
            let mut parts = p.split('/').filter(|c| !c.is_empty() && *c != ".");
            if let (Some(first), Some(_)) = (parts.next(), parts.next()) {
                splits.extend(crate::splits::split_named(first));
            }
        }
        Ok(())
    });
    if splits.len() > 1 {
        let names: Vec<&str> = splits.into_iter().collect();
        return Err(ListError::BadInput {
            message: format!(
                "{} names images of the splits {} (by their folders): packed together, held-out \
                 samples would be trained on; give each split's folder the metadata of its own \
                 rows and pack that folder",
                file.display(),
                names.join(", ")
            ),
        });
    }
    let itself = key(file);
    let exclude = exclude.and_then(|p| std::fs::canonicalize(p).ok());
    // Each folder with the metadata file nearest above it, if not `file`.
    let mut stack: Vec<(PathBuf, usize, Option<PathBuf>)> = vec![(base.to_path_buf(), 0, None)];
    while let Some((dir, depth, own)) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        let mut names: Vec<_> = entries.flatten().collect();
        names.sort_by_key(|e| e.file_name());
        for e in names {
            let (name, path) = (e.file_name(), e.path());
            if crate::imagefolder::is_hidden(&name) {
                continue;
            }
            let Ok(kind) = e.file_type() else { continue };
            if kind.is_dir() {
                let output = exclude.is_some() && std::fs::canonicalize(&path).ok() == exclude;
                if output || crate::output::holds_a_pack(&path) {
                    continue;
                }
                if depth >= crate::imagefolder::MAX_DEPTH {
                    let shown = path.strip_prefix(base).unwrap_or(&path);
                    listing.errors.push(failure(
                        shown.display().to_string(),
                        "unreadable",
                        format!(
                            "a folder more than {} levels below {}: not searched",
                            crate::imagefolder::MAX_DEPTH,
                            file.display()
                        ),
                    ));
                    continue;
                }
                let own = metadata_in(&path)
                    .into_iter()
                    .next()
                    .or_else(|| own.clone());
                stack.push((path, depth + 1, own));
                continue;
            }
            let k = key(&path);
            if k == itself {
                continue;
            }
            if !crate::imagefolder::has_image_extension(&path) {
                listing.ignored += 1;
            } else if !named.contains(&k) {
                let why = match &own {
                    None => "add its row, or move it out of the folder".to_string(),
                    Some(m) => format!(
                        "its own folder's {} is not read: pack it apart",
                        m.display()
                    ),
                };
                // Named as the rows name their images: from the metadata's folder.
                let shown = path.strip_prefix(base).unwrap_or(&path);
                listing.errors.push(failure(
                    shown.display().to_string(),
                    "unlisted",
                    format!(
                        "an image that no row of {} names in its {HF_IMAGE_COLUMN} column: not \
                         packed ({why})",
                        file.display()
                    ),
                ));
            }
        }
    }
    Ok(())
}
