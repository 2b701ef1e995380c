//! Listing an ImageFolder: `INPUT/<class>/<image>` walked in byte order of names (never the
//! file system's), classes numbered in that order, earlier pack outputs inside it skipped.

use crate::failure;
use crate::listing::{os_bytes, ListError, Listing, Origin, IMAGE_EXTENSIONS};
use std::collections::HashSet;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};

pub(crate) fn is_hidden(name: &OsStr) -> bool {
    name.as_encoded_bytes().first() == Some(&b'.')
}

/// Whether `path` ends in one of [`IMAGE_EXTENSIONS`] (case ignored).
pub fn has_image_extension(path: &Path) -> bool {
    path.extension()
        .and_then(OsStr::to_str)
        .is_some_and(|e| IMAGE_EXTENSIONS.iter().any(|x| e.eq_ignore_ascii_case(x)))
}

/// The names in one directory, sorted by their raw bytes so order never depends on the file
/// system; held in one buffer (not one allocation per entry).
struct SortedNames {
    bytes: Vec<u8>,
    spans: Vec<(usize, usize)>,
}

impl SortedNames {
    fn read(dir: &Path) -> Result<Self, ListError> {
        let mut s = SortedNames {
            bytes: Vec::new(),
            spans: Vec::new(),
        };
        let io = ListError::io(dir);
        for entry in std::fs::read_dir(dir).map_err(io)? {
            let name = entry.map_err(io)?.file_name();
            let start = s.bytes.len();
            s.bytes.extend_from_slice(name.as_encoded_bytes());
            s.spans.push((start, s.bytes.len()));
        }
        let bytes = &s.bytes;
        s.spans
            .sort_by(|a, b| bytes[a.0..a.1].cmp(&bytes[b.0..b.1]));
        Ok(s)
    }

    fn iter(&self) -> impl Iterator<Item = &OsStr> + '_ {
        self.spans.iter().map(|&(a, b)| name_os(&self.bytes[a..b]))
    }
}

/// A name read back from [`SortedNames`] (the bytes came from `as_encoded_bytes` of one name).
fn name_os(b: &[u8]) -> &OsStr {
    #[cfg(unix)]
    {
        std::os::unix::ffi::OsStrExt::from_bytes(b)
    }
    #[cfg(not(unix))]
    {
        // Outside Unix only UTF-8 names round-trip without `unsafe`; others become empty names,
        // which match nothing and are reported as unreadable by the caller.
        OsStr::new(std::str::from_utf8(b).unwrap_or(""))
    }
}

pub(crate) fn list_folder(root: &Path, exclude: Option<&Path>) -> Result<Listing, ListError> {
    let exclude = exclude.and_then(|p| std::fs::canonicalize(p).ok());
    let meta = std::fs::metadata(root).map_err(ListError::io(root))?;
    if !meta.is_dir() {
        return Err(ListError::NotAFolder {
            path: root.to_path_buf(),
        });
    }
    let mut listing = Listing {
        origin: Origin {
            root: root.to_path_buf(),
        },
        looked_for: format!(
            "image files ({}) in class folders {}/<class>/",
            IMAGE_EXTENSIONS.join(", "),
            root.display()
        ),
        labelled: true,
        ..Listing::default()
    };
    let mut class_names = Vec::new();
    for name in SortedNames::read(root)?.iter() {
        if is_hidden(name) {
            listing.ignored += 1;
            continue;
        }
        let path = root.join(name);
        if path.is_dir() {
            // The output, or an earlier pack's output or plan, is no class.
            if (exclude.is_some() && std::fs::canonicalize(&path).ok() == exclude)
                || crate::output::holds_a_pack(&path)
            {
                continue;
            }
            class_names.push(name.to_os_string());
        } else {
            // Files beside the class folders belong to no class.
            listing.ignored += 1;
        }
    }
    let names: Vec<&str> = class_names.iter().filter_map(|c| c.to_str()).collect();
    crate::splits::splits_as_classes(&root.display().to_string(), &names)
        .map_err(|message| ListError::BadInput { message })?;
    if let [only] = names.as_slice() {
        let holds_folders = std::fs::read_dir(root.join(only)).is_ok_and(|entries| {
            entries
                .flatten()
                .any(|e| !is_hidden(&e.file_name()) && e.file_type().is_ok_and(|t| t.is_dir()))
        });
        crate::splits::sole_split(&root.display().to_string(), only, holds_folders)
            .map_err(|message| ListError::BadInput { message })?;
    }
    let mut seen = HashSet::new();
    for (label, class) in class_names.iter().enumerate() {
        // A class name is text: a name that is not UTF-8 would be changed, and two such names
        // could become one.
        let Some(name) = class.to_str() else {
            return Err(ListError::BadInput {
                message: format!(
                    "the class folder {} has a name that is not UTF-8 text: rename it",
                    root.join(class).display()
                ),
            });
        };
        listing.classes.push(name.to_string());
        let label = u32::try_from(label).map_err(|_| ListError::TooMany {
            count: label as u64,
        })?;
        let mut dir = root.join(class);
        let mut prefix = os_bytes(class).into_owned();
        prefix.push(b'/');
        // Each class has its own set: a folder linked into two classes is listed in both.
        seen.clear();
        // The output is never input, wherever it lies below a class.
        seen.extend(exclude.clone());
        walk(&mut dir, &mut prefix, label, &mut listing, &mut seen, 0)?;
    }
    Ok(listing)
}

/// Folder depth past which a tree is not searched (links are followed once each; this bounds
/// the recursion).
pub(crate) const MAX_DEPTH: usize = 64;

/// Lists `dir` (whose path relative to the root is `prefix`, ending in `/`) and its
/// subdirectories, in sorted order. `dir` and `prefix` are scratch buffers, restored on return.
fn walk(
    dir: &mut PathBuf,
    prefix: &mut Vec<u8>,
    label: u32,
    out: &mut Listing,
    seen: &mut HashSet<PathBuf>,
    depth: usize,
) -> Result<(), ListError> {
    // Symlinked directories may form cycles: visit each real directory once.
    let real = std::fs::canonicalize(&*dir).map_err(ListError::io(dir))?;
    if !seen.insert(real) {
        return Ok(());
    }
    if depth > MAX_DEPTH {
        // Reported, not dropped: whatever lies below is not packed.
        out.errors.push(crate::failure(
            String::from_utf8_lossy(prefix).into_owned(),
            "unreadable",
            format!("a folder more than {MAX_DEPTH} levels below its class folder: not searched"),
        ));
        return Ok(());
    }
    let names = SortedNames::read(dir)?;
    let dir_index = out.inputs.add_dir(prefix);
    for name in names.iter() {
        if is_hidden(name) {
            out.ignored += 1;
            continue;
        }
        dir.push(name);
        let step = match std::fs::metadata(&*dir) {
            Ok(m) if m.is_dir() => {
                let len = prefix.len();
                prefix.extend_from_slice(&os_bytes(name));
                prefix.push(b'/');
                let r = walk(dir, prefix, label, out, seen, depth + 1);
                prefix.truncate(len);
                r
            }
            Ok(m) if m.is_file() && has_image_extension(dir) => {
                out.inputs
                    .push(dir_index, &os_bytes(name), Some(label), None)
            }
            Ok(_) if has_image_extension(dir) => {
                // Named as an image but no file (a FIFO, a device): said, not silently ignored.
                let path = [&prefix[..], &os_bytes(name)].concat();
                out.errors.push(failure(
                    String::from_utf8_lossy(&path).into_owned(),
                    "unreadable",
                    crate::sample_read::NOT_REGULAR,
                ));
                Ok(())
            }
            Ok(_) => {
                out.ignored += 1;
                Ok(())
            }
            // A folder or image that cannot be looked at (a path past PATH_MAX, no permission, a
            // loop of links) is said; only a link to nothing is passed over as no input.
            Err(e) if has_image_extension(dir) || e.kind() != std::io::ErrorKind::NotFound => {
                let path = [&prefix[..], &os_bytes(name)].concat();
                out.errors.push(failure(
                    String::from_utf8_lossy(&path).into_owned(),
                    "unreadable",
                    format!("cannot open: {e}"),
                ));
                Ok(())
            }
            Err(_) => {
                out.ignored += 1;
                Ok(())
            }
        };
        dir.pop();
        step?;
    }
    Ok(())
}
