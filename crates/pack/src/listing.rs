//! Finding the inputs: an ImageFolder tree or a CSV/JSONL list, in a sorted, deterministic order.

use crate::ErrorRecord;
use fs_err as fs;
use std::collections::{BTreeMap, HashSet};
use std::ffi::OsStr;
use std::path::{Path, PathBuf};

/// File extensions taken as images (compared case-insensitively). Content decides the decoder.
pub const IMAGE_EXTENSIONS: &[&str] = &["jpg", "jpeg", "png", "webp", "gif", "bmp", "tif", "tiff"];

/// Where the inputs come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InputSource {
    /// `ROOT/<class>/<file>`, classes being the sorted subdirectory names.
    Folder(PathBuf),
    /// A CSV (with header) or JSONL file with `path`, `label` and optional `key`.
    List(PathBuf),
}

/// One input image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InputItem {
    /// The file, relative to the input folder or as listed; [`Origin::resolve`] gives the path
    /// to open. Boxed slices rather than growable buffers: every input of a pack is held at
    /// once for the global shuffle, so each byte here is multiplied by the dataset size.
    pub path: Box<Path>,
    /// Its label (index into the class list).
    pub label: i64,
    /// A key given by the list, if any.
    pub key: Option<Box<str>>,
}

/// What item paths are relative to. A global shuffle keeps every item in memory, so an item
/// stores one path and the rest is derived from this on demand.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Origin {
    /// The input folder, or the list's folder.
    pub root: PathBuf,
}

impl Origin {
    /// Where to read `item`.
    pub fn resolve(&self, item: &InputItem) -> PathBuf {
        self.root.join(&item.path)
    }

    /// How to name `item` in reports and sample metadata: relative to the input folder, or as
    /// listed (lossy for non-UTF-8 names).
    pub fn source(&self, item: &InputItem) -> String {
        item.path.to_string_lossy().into_owned()
    }
}

/// The result of listing.
#[derive(Debug, Clone, Default)]
pub struct Listing {
    /// How item paths are resolved and named.
    pub origin: Origin,
    /// Inputs in sorted order (folder) or list order.
    pub items: Vec<InputItem>,
    /// Class names.
    pub classes: Vec<String>,
    /// Files skipped: hidden, or not an image extension.
    pub ignored: u64,
    /// Inputs that failed before reading (dangling links, bad list rows), in listing order.
    pub errors: Vec<ErrorRecord>,
}

/// Lists the inputs of `source`. Errors are only for unusable sources (missing folder, unreadable
/// or header-less list); problems with single inputs are collected in [`Listing::errors`].
pub fn list_inputs(source: &InputSource) -> Result<Listing, String> {
    match source {
        InputSource::Folder(root) => list_folder(root),
        InputSource::List(file) => list_file(file),
    }
}

fn is_hidden(name: &OsStr) -> bool {
    name.as_encoded_bytes().first() == Some(&b'.')
}

fn has_image_extension(path: &Path) -> bool {
    path.extension()
        .and_then(OsStr::to_str)
        .is_some_and(|e| IMAGE_EXTENSIONS.iter().any(|x| e.eq_ignore_ascii_case(x)))
}

/// Directory entries sorted by their raw name bytes, so order never depends on the file system.
fn sorted_entries(dir: &Path) -> Result<Vec<PathBuf>, String> {
    let rd = fs::read_dir(dir).map_err(|e| e.to_string())?;
    let mut paths = Vec::new();
    for entry in rd {
        paths.push(entry.map_err(|e| e.to_string())?.path());
    }
    paths.sort_by(|a, b| {
        a.as_os_str()
            .as_encoded_bytes()
            .cmp(b.as_os_str().as_encoded_bytes())
    });
    Ok(paths)
}

fn relative(root: &Path, path: &Path) -> String {
    path.strip_prefix(root)
        .unwrap_or(path)
        .to_string_lossy()
        .into_owned()
}

fn list_folder(root: &Path) -> Result<Listing, String> {
    let meta = fs::metadata(root).map_err(|e| e.to_string())?;
    if !meta.is_dir() {
        return Err(format!(
            "{} is not a directory (use --list for a CSV or JSONL list)",
            root.display()
        ));
    }
    let mut listing = Listing {
        origin: Origin {
            root: root.to_path_buf(),
        },
        ..Listing::default()
    };
    let mut class_dirs = Vec::new();
    for path in sorted_entries(root)? {
        let name = path.file_name().unwrap_or_default();
        if is_hidden(name) {
            listing.ignored += 1;
            continue;
        }
        if path.is_dir() {
            class_dirs.push(path);
        } else {
            // Files beside the class folders belong to no class.
            listing.ignored += 1;
        }
    }
    for (label, dir) in class_dirs.iter().enumerate() {
        listing.classes.push(
            dir.file_name()
                .unwrap_or_default()
                .to_string_lossy()
                .into_owned(),
        );
        let mut seen = HashSet::new();
        walk(root, dir, label as i64, &mut listing, &mut seen, 0)?;
    }
    Ok(listing)
}

/// Recursion depth past which a tree is taken to be a link cycle.
const MAX_DEPTH: usize = 64;

fn walk(
    root: &Path,
    dir: &Path,
    label: i64,
    out: &mut Listing,
    seen: &mut HashSet<PathBuf>,
    depth: usize,
) -> Result<(), String> {
    // Symlinked directories may form cycles: visit each real directory once.
    let real = fs::canonicalize(dir).map_err(|e| e.to_string())?;
    if !seen.insert(real) || depth > MAX_DEPTH {
        return Ok(());
    }
    for path in sorted_entries(dir)? {
        let name = path.file_name().unwrap_or_default();
        if is_hidden(name) {
            out.ignored += 1;
            continue;
        }
        match std::fs::metadata(&path) {
            Ok(m) if m.is_dir() => walk(root, &path, label, out, seen, depth + 1)?,
            Ok(m) if m.is_file() && has_image_extension(&path) => out.items.push(InputItem {
                // Relative to the root: keeps the per-input memory of a global shuffle small.
                path: path.strip_prefix(root).unwrap_or(&path).into(),
                label,
                key: None,
            }),
            Ok(_) => out.ignored += 1,
            Err(e) if has_image_extension(&path) => out.errors.push(source_kind_message(
                relative(root, &path),
                "unreadable",
                format!("cannot open: {e}"),
            )),
            Err(_) => out.ignored += 1,
        }
    }
    Ok(())
}

fn source_kind_message(path: String, kind: &str, message: String) -> ErrorRecord {
    ErrorRecord {
        path,
        kind: kind.to_string(),
        message,
    }
}

/// Largest integer label accepted from a list: the manifest names every class from 0 up to the
/// largest label, so this bounds its size (a million classes is beyond any public dataset).
pub const MAX_INT_LABEL: i64 = 999_999;

/// A row of a list file before labels are resolved.
struct Row {
    line: usize,
    path: Option<String>,
    label: Option<String>,
    key: Option<String>,
}

fn list_file(file: &Path) -> Result<Listing, String> {
    let text = fs::read(file).map_err(|e| e.to_string())?;
    let base = file.parent().unwrap_or(Path::new(".")).to_path_buf();
    let is_csv = file
        .extension()
        .and_then(OsStr::to_str)
        .is_some_and(|e| e.eq_ignore_ascii_case("csv"));
    let rows = if is_csv {
        csv_rows(&text)?
    } else {
        jsonl_rows(&text)
    };

    let mut listing = Listing {
        origin: Origin { root: base.clone() },
        ..Listing::default()
    };
    // Labels are integers when every present label looks like one (optional sign, digits);
    // otherwise they are class names, numbered in sorted order.
    let looks_int = |l: &str| {
        let d = l.strip_prefix('-').unwrap_or(l);
        !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit())
    };
    let all_ints = rows
        .iter()
        .filter_map(|r| r.label.as_deref())
        .all(looks_int);
    let int_label = |l: &str| {
        l.parse::<i64>()
            .ok()
            .filter(|v| (0..=MAX_INT_LABEL).contains(v))
    };
    let mut names = BTreeMap::new();
    if all_ints {
        let max = rows
            .iter()
            .filter_map(|r| int_label(r.label.as_deref()?))
            .max();
        listing.classes = (0..max.map_or(0, |m| m + 1))
            .map(|i| i.to_string())
            .collect();
    } else {
        for l in rows.iter().filter_map(|r| r.label.as_deref()) {
            names.insert(l.to_string(), 0i64);
        }
        for (i, v) in names.values_mut().enumerate() {
            *v = i as i64;
        }
        listing.classes = names.keys().cloned().collect();
    }
    for row in rows {
        let where_ = format!("{}:{}", file.display(), row.line);
        let (Some(path), Some(label)) = (row.path, row.label) else {
            listing.errors.push(source_kind_message(
                where_,
                "bad_list_row",
                "row needs a non-empty path and label".into(),
            ));
            continue;
        };
        let label = if all_ints {
            match int_label(&label) {
                Some(v) => v,
                None => {
                    listing.errors.push(source_kind_message(
                        where_,
                        "bad_label",
                        format!("integer label {label} is outside 0..={MAX_INT_LABEL}"),
                    ));
                    continue;
                }
            }
        } else {
            names.get(&label).copied().unwrap_or(0)
        };
        listing.items.push(InputItem {
            path: PathBuf::from(path).into_boxed_path(),
            label,
            key: row.key.map(String::into_boxed_str),
        });
    }
    Ok(listing)
}

fn non_empty(s: &str) -> Option<String> {
    let s = s.trim();
    (!s.is_empty()).then(|| s.to_string())
}

fn csv_rows(text: &[u8]) -> Result<Vec<Row>, String> {
    let mut rdr = csv::ReaderBuilder::new().flexible(true).from_reader(text);
    let headers = rdr.headers().map_err(|e| e.to_string())?.clone();
    let col = |name: &str| {
        headers
            .iter()
            .position(|h| h.trim().eq_ignore_ascii_case(name))
    };
    let (Some(p), Some(l)) = (col("path"), col("label")) else {
        return Err("the CSV list needs a header row with `path` and `label` columns".into());
    };
    let k = col("key");
    let mut rows = Vec::new();
    for (i, rec) in rdr.records().enumerate() {
        let line = i + 2;
        match rec {
            Ok(rec) => rows.push(Row {
                line,
                path: rec.get(p).and_then(non_empty),
                label: rec.get(l).and_then(non_empty),
                key: k.and_then(|k| rec.get(k)).and_then(non_empty),
            }),
            Err(_) => rows.push(Row {
                line,
                path: None,
                label: None,
                key: None,
            }),
        }
    }
    Ok(rows)
}

fn jsonl_rows(text: &[u8]) -> Vec<Row> {
    let mut rows = Vec::new();
    for (i, line) in text.split(|&b| b == b'\n').enumerate() {
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let v: Option<serde_json::Value> = serde_json::from_slice(line).ok();
        let field = |name: &str| -> Option<String> {
            match v.as_ref()?.get(name)? {
                serde_json::Value::String(s) => non_empty(s),
                serde_json::Value::Number(n) => Some(n.to_string()),
                _ => None,
            }
        };
        rows.push(Row {
            line: i + 1,
            path: field("path"),
            label: field("label"),
            key: field("key"),
        });
    }
    rows
}
