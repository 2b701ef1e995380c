//! Inputs that live inside other files: naming them (brace patterns, globs, folders, URLs, and
//! which format a path holds), fetching remote ones into the staging folder, and decompressing
//! compressed shards (listing their samples is `wds_input.rs`).

use crate::listing::{ListError, ListOptions};
use shardtool_wds::IMAGE_FIELDS;
use std::path::{Path, PathBuf};
use std::str::FromStr;

/// How to read the input argument of a pack.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InputFormat {
    /// `ROOT/<class>/<image>`.
    ImageFolder,
    /// A CSV or JSONL list of files.
    List,
    /// WebDataset tar shards.
    Wds,
    /// Parquet files.
    Parquet,
}

impl FromStr for InputFormat {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "imagefolder" => Ok(Self::ImageFolder),
            "list" => Ok(Self::List),
            "wds" => Ok(Self::Wds),
            "parquet" => Ok(Self::Parquet),
            _ => Err(format!(
                "unknown input format {s:?}: expected imagefolder, list, wds or parquet"
            )),
        }
    }
}

/// Whether `s` names a remote object (`http(s)://`, `s3://`).
pub fn is_remote(s: &str) -> bool {
    let lower = s.get(..8).unwrap_or(s).to_ascii_lowercase();
    lower.starts_with("http://") || lower.starts_with("https://") || lower.starts_with("s3://")
}

/// A `file://` URL as a path; anything else unchanged.
pub(crate) fn local_path(s: &str) -> Result<String, ListError> {
    let scheme = s.split_once("://").map(|(scheme, _)| scheme);
    if let Some(scheme) = scheme.filter(|sc| {
        !sc.is_empty()
            && sc
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"+.-".contains(&b))
            && !["file", "http", "https", "s3"].contains(&sc.to_ascii_lowercase().as_str())
    }) {
        return Err(bad_input(
            s,
            &format!(
                "unsupported scheme {scheme:?}: inputs are local paths, file://, http://, \
                 https:// or s3:// URLs (an S3-compatible store by AWS_ENDPOINT)"
            ),
        ));
    }
    // webdataset's `pipe:COMMAND` runs a command; here it would be a file name.
    if s.starts_with("pipe:") && !Path::new(s).exists() {
        return Err(bad_input(
            s,
            "pipe: commands are not run: name the shards by path or http(s):// or s3:// URL",
        ));
    }
    if s.get(..7)
        .is_some_and(|p| p.eq_ignore_ascii_case("file://"))
    {
        let url = url::Url::parse(s).map_err(|e| bad_input(s, &e.to_string()))?;
        if url.query().is_some() || url.fragment().is_some() {
            return Err(bad_input(s, shardtool_cache::FILE_URL_QUERY));
        }
        let path = url
            .to_file_path()
            .map_err(|()| bad_input(s, "not a local file path"))?;
        return Ok(path.to_string_lossy().into_owned());
    }
    Ok(s.to_string())
}

/// The error for input `what`; a cause that names it first (a fetch's) names it once.
fn bad_input(what: &str, why: &str) -> ListError {
    let once = why.strip_prefix(what).and_then(|w| w.strip_prefix(": "));
    ListError::BadList {
        path: PathBuf::from(what),
        message: once.unwrap_or(why).to_string(),
    }
}

/// A name's extension, lower-cased; compressed tar shards (`.tar.zst`, `.tar.gz`, `.tgz`) count
/// as `tar`: they are decompressed when listed ([`decompress_shard`]).
fn extension(name: &str) -> String {
    let base = name.rsplit('/').next().unwrap_or(name).to_ascii_lowercase();
    if [".tar.zst", ".tar.gz", ".tgz"]
        .iter()
        .any(|e| base.ends_with(e))
    {
        return "tar".into();
    }
    base.rsplit_once('.')
        .map(|(_, e)| e.to_string())
        .unwrap_or_default()
}

/// The most bytes a compressed input shard may decompress to: a few bytes of zstd can declare
/// terabytes, which would fill the disk they are staged on.
pub(crate) const MAX_DECOMPRESSED_SHARD: u64 = 64 << 30;

/// A zstd- or gzip-compressed shard (told by its first bytes, whatever its name) decompressed
/// into the staging folder as `.stage-<index>.decompressed.tar.tmp` (fetched inputs are staged as
/// `.stage-<index>-<name>.tmp`, so the two never share a name), with why it stopped early if the
/// stream is damaged (the bytes before the damage are kept), and open for reading from its
/// start; `Ok(None)` for any other file, which is read as it is.
pub(crate) fn decompress_shard(
    file: &mut std::fs::File,
    index: usize,
    options: &ListOptions,
) -> Result<Option<Decompressed>, String> {
    use std::io::{Read, Seek, Write};
    let mut magic = [0u8; 4];
    let n = file
        .read(&mut magic)
        .map_err(|e| format!("cannot read: {e}"))?;
    file.rewind().map_err(|e| format!("cannot read: {e}"))?;
    let mut reader: Box<dyn Read + '_> = match &magic[..n] {
        [0x28, 0xb5, 0x2f, 0xfd] => {
            Box::new(zstd::Decoder::new(&*file).map_err(|e| format!("not a zstd stream: {e}"))?)
        }
        [0x1f, 0x8b, ..] => Box::new(flate2::read::MultiGzDecoder::new(&*file)),
        _ => return Ok(None),
    };
    let path = options
        .stage_dir
        .join(format!(".stage-{index:06}.decompressed.tar.tmp"));
    let out = std::fs::File::options()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&path)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    let fail = |why: String| {
        let _ = std::fs::remove_file(&path);
        why
    };
    let max = options.max_shard_bytes.unwrap_or(MAX_DECOMPRESSED_SHARD);
    let mut w = std::io::BufWriter::with_capacity(1 << 20, out);
    let (mut buf, mut total, mut damage) = (vec![0u8; 1 << 16], 0u64, None);
    loop {
        let n = match reader.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            // Damage: what came before it is kept, as a damaged plain tar's samples are.
            Err(e) => {
                damage = Some(format!("cannot decompress past byte {total}: {e}"));
                break;
            }
        };
        total += n as u64;
        if total > max {
            return Err(fail(format!("decompresses to more than {max} bytes")));
        }
        w.write_all(&buf[..n])
            .map_err(|e| fail(format!("cannot write {}: {e}", path.display())))?;
    }
    let file = w
        .into_inner()
        .map_err(|e| e.into_error())
        .and_then(|mut f| f.rewind().map(|()| f))
        .map_err(|e| fail(format!("cannot write {}: {e}", path.display())))?;
    Ok(Some(Decompressed { path, file, damage }))
}

/// A shard decompressed by [`decompress_shard`].
pub(crate) struct Decompressed {
    pub(crate) path: PathBuf,
    pub(crate) file: std::fs::File,
    /// Why decompression stopped before the end of the stream, if it did.
    pub(crate) damage: Option<String>,
}

/// Whether some entry directly in `dir` is one `f` accepts (false when `dir` cannot be read).
fn any_entry_in(dir: &Path, f: &dyn Fn(&Path) -> bool) -> bool {
    std::fs::read_dir(dir).is_ok_and(|rd| rd.filter_map(|e| e.ok()).any(|e| f(&e.path())))
}

fn format_of_name(name: &str) -> Option<InputFormat> {
    match extension(name).as_str() {
        "tar" => Some(InputFormat::Wds),
        "parquet" => Some(InputFormat::Parquet),
        "csv" | "jsonl" | "json" => Some(InputFormat::List),
        _ => None,
    }
}

/// Whether a file name matches a glob of `*` (any run) and `?` (one character).
fn glob_match(pattern: &[u8], name: &[u8]) -> bool {
    // In O(pattern x name) steps, not exponential (names are untrusted): on a mismatch only
    // the last `*` takes one more byte, as any earlier star's other choices are covered by it.
    let (mut p, mut n) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while n < name.len() {
        match pattern.get(p) {
            Some(b'*') => {
                star = Some((p, n));
                p += 1;
            }
            Some(&c) if c == b'?' || c == name[n] => {
                p += 1;
                n += 1;
            }
            _ => match star {
                Some((sp, sn)) => {
                    star = Some((sp, sn + 1));
                    p = sp + 1;
                    n = sn + 1;
                }
                None => return false,
            },
        }
    }
    pattern[p..].iter().all(|&c| c == b'*')
}

/// The files of `dir` (recursively, sorted by path, leaving out subfolders holding an earlier
/// pack) whose extension is one of `exts`.
fn files_with_extension(dir: &Path, exts: &[&str], out: &mut Vec<String>) -> Result<(), ListError> {
    let io = |e| ListError::Io {
        path: dir.to_path_buf(),
        cause: e,
    };
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(io)?
        .map(|e| e.map(|e| e.path()))
        .collect::<Result<_, _>>()
        .map_err(io)?;
    entries.sort();
    for p in entries {
        let name = p.file_name().map(|n| n.to_string_lossy().into_owned());
        if name.as_deref().is_none_or(|n| n.starts_with('.')) {
            continue;
        }
        if p.is_dir() {
            // An earlier pack's output inside the input (its manifest says so) is its own
            // dataset, not more shards of this one.
            if !crate::output::holds_a_pack(&p) {
                files_with_extension(&p, exts, out)?;
            }
        } else if exts.contains(&extension(&p.to_string_lossy()).as_str()) {
            out.push(utf8_name(&p)?);
        }
    }
    Ok(())
}

/// `p` as text; a name that is not UTF-8 is refused, as it would name another file once changed.
fn utf8_name(p: &Path) -> Result<String, ListError> {
    p.to_str()
        .map(str::to_string)
        .ok_or_else(|| ListError::BadInput {
            message: format!(
                "{} has a name that is not UTF-8 text: rename it",
                p.display()
            ),
        })
}

/// The files matching `pattern`, a path whose last component holds `*` or `?` (sorted); `arg`,
/// the input as given, names it in errors.
fn glob_files(arg: &str, pattern: &str) -> Result<Vec<String>, ListError> {
    let p = Path::new(pattern);
    let dir = p
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let last = p.file_name().map(|n| n.to_string_lossy().into_owned());
    let last = last.unwrap_or_default();
    if dir.to_string_lossy().contains(['*', '?']) {
        return Err(bad_input(
            arg,
            "only the last path component may hold * or ?",
        ));
    }
    let mut found: Vec<String> = std::fs::read_dir(dir)
        .map_err(|e| ListError::Io {
            path: dir.to_path_buf(),
            cause: e,
        })?
        .filter_map(|e| e.ok())
        .filter(|e| glob_match(last.as_bytes(), e.file_name().as_encoded_bytes()))
        .map(|e| utf8_name(&e.path()))
        .collect::<Result<_, _>>()?;
    found.sort();
    if found.is_empty() {
        return Err(bad_input(arg, &format!("no file matches {pattern}")));
    }
    Ok(found)
}

/// Turns the input argument of a pack into an [`crate::InputSource`]: a brace pattern, a glob in
/// the last path component, a folder (an ImageFolder, or a folder of `.tar` or `.parquet` files,
/// searched recursively), a file (`.tar`, `.parquet`, `.csv`, `.jsonl`), or URLs of these
/// (`http(s)://`, `s3://`, `file://`; a remote folder ends in `/`). `format` overrides what the
/// names suggest.
pub fn resolve_input(
    arg: &str,
    format: Option<InputFormat>,
    policy: &shardtool_cache::FetchPolicy,
) -> Result<crate::InputSource, ListError> {
    use crate::InputSource as S;
    // A file or folder that exists under its very name (`data{1}`) is not a pattern.
    let names = match arg.contains('{') && Path::new(arg).exists() {
        true => vec![arg.to_string()],
        false => crate::braces::expand_braces(arg).map_err(|m| bad_input(arg, &m))?,
    };
    let spelled = names;
    let names: Vec<String> = spelled
        .iter()
        .map(|n| local_path(n))
        .collect::<Result<_, _>>()?;
    let many = |f: InputFormat, names: Vec<String>| -> Result<S, ListError> {
        // A list read as shards, or shards as Parquet, would fail as "truncated" data.
        let other =
            (names.iter()).find_map(|n| format_of_name(n).filter(|&g| g != f).map(|g| (n, g)));
        if let Some((n, g)) = other.filter(|_| f != InputFormat::List) {
            let ext = if f == InputFormat::Wds {
                "tar"
            } else {
                "parquet"
            };
            let [g, f] = [g, f].map(|x| format!("{x:?}").to_lowercase());
            let fix = match names.len() {
                1 => format!("pass --input-format {g}"),
                _ => format!("name only {f} files (a pattern such as *.{ext})"),
            };
            // The argument is named before the message already.
            let n = if n == arg { "it".into() } else { n.clone() };
            return Err(bad_input(
                arg,
                &format!("{n} is named as {g} input, not {f}: {fix}"),
            ));
        }
        if let Some(why) = (names.iter())
            .filter(|_| f == InputFormat::List)
            .find_map(|n| crate::output::dataset_manifest(Path::new(n)))
        {
            return Err(bad_input(arg, &why));
        }
        match f {
            InputFormat::Wds => Ok(S::Wds(names)),
            InputFormat::Parquet => Ok(S::Parquet(names)),
            _ if names.len() == 1 => Ok(match f {
                InputFormat::List => S::List(PathBuf::from(&names[0])),
                _ => S::Folder(PathBuf::from(&names[0])),
            }),
            _ => Err(bad_input(
                arg,
                "a pattern naming several inputs needs --input-format wds or parquet",
            )),
        }
    };
    let by_names = |names: &[String]| -> Result<InputFormat, ListError> {
        let f = names.first().and_then(|n| format_of_name(n));
        match f {
            Some(f) if names.iter().all(|n| format_of_name(n) == Some(f)) => Ok(f),
            _ => Err(bad_input(
                arg,
                "cannot tell the input format from the names (.tar, .parquet, .csv, .jsonl); \
                 pass --input-format",
            )),
        }
    };
    if names.len() == 1 && is_remote(&names[0]) && names[0].ends_with('/') {
        // A remote folder: its files decide.
        let (folder, _) = shardtool_cache::RemoteFolder::connect(&names[0], policy.clone())
            .map_err(|e| bad_input(arg, &e.to_string()))?;
        let mut listed = folder.list().map_err(|e| bad_input(arg, &e.to_string()))?;
        // Hidden files and folders are left out, as in a local folder.
        listed.retain(|(n, _)| !n.split('/').any(|part| part.starts_with('.')));
        let pick = |ext: &str| -> Vec<String> {
            listed
                .iter()
                .filter(|(n, _)| extension(n) == ext)
                .map(|(n, _)| folder.url_of(n))
                .collect()
        };
        let f = match format {
            Some(f) => f,
            None if !pick("tar").is_empty() => InputFormat::Wds,
            None if !pick("parquet").is_empty() => InputFormat::Parquet,
            None => {
                return Err(bad_input(
                    arg,
                    "the remote folder holds no .tar or .parquet files",
                ))
            }
        };
        let ext = match f {
            InputFormat::Wds => "tar",
            InputFormat::Parquet => "parquet",
            _ => {
                return Err(bad_input(
                    arg,
                    "a remote folder holds wds or parquet inputs",
                ))
            }
        };
        let relative: Vec<&str> = (listed.iter())
            .filter(|(n, _)| extension(n) == ext)
            .map(|(n, _)| n.as_str())
            .collect();
        let shown = shardtool_core::redact_urls(arg);
        crate::splits::one_split(&shown, &relative, ext).map_err(|m| bad_input(arg, &m))?;
        return many(f, pick(ext));
    }
    if names.iter().any(|n| is_remote(n) && n.contains(['?', '#'])) {
        return Err(bad_input(
            arg,
            "URLs with a query or fragment (such as presigned URLs) are not supported; name \
             the objects by their plain URLs (s3:// with AWS_* credentials)",
        ));
    }
    if names.iter().any(|n| is_remote(n) && n.contains('*')) {
        return Err(bad_input(
            arg,
            "remote inputs are not globbed: name their folder (ending in /) or a brace pattern \
             (an object whose name holds * is spelled %2A)",
        ));
    }
    if names.iter().any(|n| is_remote(n)) {
        let f = match format {
            Some(f) => f,
            None => by_names(&names)?,
        };
        if matches!(f, InputFormat::ImageFolder | InputFormat::List) {
            let manifest = names
                .iter()
                .any(|n| n.ends_with(shardtool_manifest::FILE_NAME));
            return Err(bad_input(
                arg,
                match manifest {
                    true => {
                        "only wds and parquet inputs can be read from a URL; to pack from a \
                         shardtool dataset, name its folder (ending in /), whose .tar shards \
                         are read"
                    }
                    false => "only wds and parquet inputs can be read from a URL",
                },
            ));
        }
        return many(f, names);
    }
    // Local names: a glob in the last component expands to the matching files (in each name a
    // brace pattern gave, too: `o_{a,b}/*.tar`); a path that exists as spelled is that path
    // (a folder or file named with `?`, a `file://` URL's escaped `%3F`).
    // (A `file://` URL's `%2A` and `%3F` are those characters, never a pattern.)
    let glob = |n: &String, spelled: &String| {
        spelled.contains(['*', '?']) && n.contains(['*', '?']) && !Path::new(n).exists()
    };
    let names = if names.iter().zip(&spelled).any(|(n, s)| glob(n, s)) {
        let mut all = Vec::new();
        for (n, s) in names.iter().zip(&spelled) {
            match glob(n, s) {
                true => all.extend(glob_files(arg, n)?),
                false => all.push(n.clone()),
            }
        }
        all
    } else {
        names
    };
    if names.len() == 1 && Path::new(&names[0]).is_dir() {
        let dir = Path::new(&names[0]);
        if let Some(why) = crate::output::not_an_input(dir) {
            return Err(bad_input(arg, &why));
        }
        let found = |exts: &[&str]| -> Result<Vec<String>, ListError> {
            let mut out = Vec::new();
            files_with_extension(dir, exts, &mut out)?;
            Ok(out)
        };
        // Shards or Parquet files of one split.
        let one_split = |files: Vec<String>, ext: &str| -> Result<Vec<String>, ListError> {
            let relative: Vec<&str> = (files.iter())
                .map(|f| {
                    let rel = Path::new(f).strip_prefix(dir).unwrap_or(Path::new(f));
                    rel.to_str().unwrap_or(f)
                })
                .collect();
            crate::splits::one_split(arg, &relative, ext).map_err(|m| bad_input(arg, &m))?;
            Ok(files)
        };
        let found = |exts: &[&str]| -> Result<Vec<String>, ListError> {
            let files = found(exts)?;
            match exts {
                [one] => one_split(files, one),
                _ => Ok(files),
            }
        };
        return match format {
            Some(InputFormat::Wds) => Ok(S::Wds(found(&["tar"])?)),
            Some(InputFormat::Parquet) => Ok(S::Parquet(found(&["parquet"])?)),
            Some(InputFormat::List) => Err(bad_input(arg, "a list input is a file, not a folder")),
            Some(InputFormat::ImageFolder) => Ok(S::Folder(dir.to_path_buf())),
            None => {
                // Shards or Parquet files directly in the folder (or in a Hugging Face
                // `data/` folder) make it that kind of input; anything else is an ImageFolder.
                let any_entry = |f: &dyn Fn(&Path) -> bool| any_entry_in(dir, f);
                let direct = |ext: &str| {
                    any_entry(&|p| p.is_file() && extension(&p.to_string_lossy()) == ext)
                };
                let plain_tar = |p: &Path| {
                    p.is_file() && p.extension().is_some_and(|e| e.eq_ignore_ascii_case("tar"))
                };
                let class_folder = |p: &Path| {
                    p.is_dir()
                        && any_entry_in(p, &|f| {
                            IMAGE_FIELDS.contains(&extension(&f.to_string_lossy()).as_str())
                        })
                };
                if any_entry(&plain_tar) {
                    if any_entry(&class_folder) {
                        return Err(bad_input(
                            arg,
                            "the folder holds both .tar shards and folders of images; pass \
                             --input-format wds or --input-format imagefolder",
                        ));
                    }
                    return Ok(S::Wds(found(&["tar"])?));
                }
                // Compressed shards alone make a WebDataset input only without class folders
                // beside them: an ImageFolder may keep the archive it came in.
                if direct("tar") && !any_entry(&|p| p.is_dir()) {
                    return Ok(S::Wds(found(&["tar"])?));
                }
                // Parquet files anywhere below (a Hub repository: `data/`, `<config>/`,
                // `default/train/`) make a Parquet input, unless class folders of images stand
                // beside them: then which was meant is asked, not guessed (a repository's
                // README images taken for an ImageFolder lost the dataset).
                let classes = any_entry(&class_folder);
                if direct("parquet") || dir.join("data").is_dir() || !classes {
                    // One walk finds the Parquet files and any images beside them.
                    let exts: Vec<&str> = std::iter::once("parquet").chain(IMAGE_FIELDS).collect();
                    let (parquet, images): (Vec<String>, Vec<String>) = found(&exts)?
                        .into_iter()
                        .partition(|f| extension(f) == "parquet");
                    // Images in folders (an ImageFolder's classes, nested or not), not only
                    // loose beside the Parquet files (a repository's README image).
                    let in_folders = images.iter().find(|i| Path::new(i).parent() != Some(dir));
                    if let Some(why) = crate::splits::parquet_metadata(&parquet, &images) {
                        return Err(bad_input(arg, &why));
                    }
                    match (parquet.first(), in_folders) {
                        (Some(p), Some(i)) => {
                            return Err(bad_input(
                                arg,
                                &format!(
                                    "the folder holds Parquet files ({p}, {} in all) and folders \
                                     of images ({i}, …); pass --input-format parquet or \
                                     --input-format imagefolder",
                                    parquet.len()
                                ),
                            ))
                        }
                        (Some(_), _) => return Ok(S::Parquet(one_split(parquet, "parquet")?)),
                        _ => {}
                    }
                }
                match crate::splits::imagefolder_metadata(dir) {
                    Ok(Some(metadata)) => Ok(S::List(metadata)),
                    Ok(None) => Ok(S::Folder(dir.to_path_buf())),
                    Err(why) => Err(bad_input(arg, &why)),
                }
            }
        };
    }
    let f = match format {
        Some(f) => f,
        None => {
            if names.len() == 1 && !Path::new(&names[0]).exists() {
                return Err(ListError::Io {
                    path: PathBuf::from(&names[0]),
                    cause: std::io::Error::new(
                        std::io::ErrorKind::NotFound,
                        "no such file or directory",
                    ),
                });
            }
            by_names(&names)?
        }
    };
    many(f, names)
}

/// Where a remote input is staged, and how reports name it.
pub(crate) struct Fetched {
    pub path: PathBuf,
    pub staged: bool,
    /// The entity tag of a fetched URL, when its server gives one.
    pub etag: Option<String>,
}

/// Makes `name` (a local path or a URL) a local file: URLs are fetched into the staging folder
/// as `.stage-<i>-<name>.tmp`.
pub(crate) fn fetch_input(name: &str, i: usize, options: &ListOptions) -> Result<Fetched, String> {
    if !is_remote(name) {
        return Ok(Fetched {
            path: PathBuf::from(name),
            staged: false,
            etag: None,
        });
    }
    if options.remote.stopped() {
        return Err("not fetched: the run was interrupted".into());
    }
    let (folder, file) = options.remote.connect(name).map_err(|e| e.to_string())?;
    let file = file.ok_or("the URL names a folder, not a file")?;
    let base: String = file
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .take(60)
        .collect();
    let path = options.stage_dir.join(format!(".stage-{i:06}-{base}.tmp"));
    let mut out = std::fs::File::options()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&path)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    match folder.fetch(&file, options.max_input_bytes, &mut out) {
        Ok((_, etag)) => Ok(Fetched {
            path,
            staged: true,
            etag,
        }),
        Err(e) => {
            let _ = std::fs::remove_file(&path);
            Err(e.to_string())
        }
    }
}

/// Runs `f` over `items` on `jobs` threads, keeping the results in item order.
pub(crate) fn parallel_map<T: Sync, R: Send>(
    items: &[T],
    jobs: usize,
    f: impl Fn(usize, &T) -> R + Sync,
) -> Vec<R> {
    if jobs <= 1 || items.len() <= 1 {
        // One worker: this thread, with no thread to start and join.
        return items.iter().enumerate().map(|(i, t)| f(i, t)).collect();
    }
    let next = std::sync::atomic::AtomicUsize::new(0);
    let results: Vec<std::sync::Mutex<Option<R>>> =
        items.iter().map(|_| std::sync::Mutex::new(None)).collect();
    shardtool_core::on_threads(jobs.clamp(1, items.len().max(1)), || loop {
        let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let Some(item) = items.get(i) else { break };
        let r = f(i, item);
        if let Ok(mut slot) = results[i].lock() {
            *slot = Some(r);
        }
    });
    results
        .into_iter()
        .filter_map(|m| m.into_inner().ok().flatten())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parallel_map_keeps_item_order_on_any_number_of_threads() {
        let items: Vec<u64> = (0..37).map(|i| i * 7919 % 101).collect();
        let expected: Vec<u64> = items.iter().map(|&x| x * x).collect();
        for jobs in [0, 1, 2, 3, 8, 64] {
            let got = parallel_map(&items, jobs, |_, &x| x * x);
            assert_eq!(got, expected, "{jobs} jobs");
            let indices = parallel_map(&items, jobs, |i, _| i);
            assert_eq!(indices, (0..items.len()).collect::<Vec<_>>(), "{jobs} jobs");
        }
        assert!(parallel_map(&[] as &[u8], 4, |_, _| 0).is_empty());
    }

    #[test]
    fn globs_match_whole_names() {
        assert!(glob_match(b"*.tar", b"a.tar"));
        assert!(glob_match(b"s-??.tar", b"s-01.tar"));
        assert!(!glob_match(b"*.tar", b"a.tar.gz"));
        assert!(!glob_match(b"s-?.tar", b"s-01.tar"));
        // A hostile name does not make matching exponential.
        let name = format!("shard{}.tarx", "-".repeat(240));
        assert!(!glob_match(b"shard-*-*-*-*-*-*-*-*.tar", name.as_bytes()));
        // The same answers as the plain recursive definition, on every short case.
        fn reference(p: &[u8], n: &[u8]) -> bool {
            match (p.first(), n.first()) {
                (None, None) => true,
                (Some(b'*'), _) => {
                    reference(&p[1..], n) || (!n.is_empty() && reference(p, &n[1..]))
                }
                (Some(b'?'), Some(_)) => reference(&p[1..], &n[1..]),
                (Some(a), Some(b)) if a == b => reference(&p[1..], &n[1..]),
                _ => false,
            }
        }
        let words = |alphabet: &[u8], max: usize| -> Vec<Vec<u8>> {
            let mut all = vec![Vec::new()];
            let mut last = vec![Vec::new()];
            for _ in 0..max {
                last = (last.iter())
                    .flat_map(|w| alphabet.iter().map(move |&c| [w.as_slice(), &[c]].concat()))
                    .collect();
                all.extend(last.iter().cloned());
            }
            all
        };
        for p in words(b"a*?", 4) {
            for n in words(b"ab", 4) {
                assert_eq!(glob_match(&p, &n), reference(&p, &n), "{p:?} {n:?}");
            }
        }
    }

    #[test]
    fn a_brace_pattern_of_globs_expands_each() {
        let t = tempfile::tempdir().unwrap();
        for f in ["o_a/x.tar", "o_a/y.tar", "o_b/z.tar", "o_c/w.tar"] {
            let p = t.path().join(f);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, b"").unwrap();
        }
        let root = t.path().display();
        let policy = shardtool_cache::FetchPolicy::default();
        let got = resolve_input(&format!("{root}/o_{{a,b}}/*.tar"), None, &policy).unwrap();
        let want: Vec<String> = ["o_a/x.tar", "o_a/y.tar", "o_b/z.tar"]
            .iter()
            .map(|f| format!("{root}/{f}"))
            .collect();
        assert!(
            matches!(&got, crate::InputSource::Wds(n) if *n == want),
            "{got:?}"
        );
        let err = resolve_input(&format!("{root}/o_{{a,d}}/*.tar"), None, &policy).unwrap_err();
        assert!(err.to_string().contains("o_d"), "{err}");
    }

    /// Compressed shards alone make a folder a WebDataset input; beside class folders they are an
    /// ImageFolder's archive and the folder stays an ImageFolder.
    #[test]
    fn compressed_shards_decide_a_folder_only_without_class_folders() {
        let dir = tempfile::tempdir().unwrap();
        let kind = |d: &Path| match resolve_input(d.to_str().unwrap(), None, &Default::default())
            .unwrap()
        {
            crate::InputSource::Wds(v) => format!("wds {}", v.len()),
            crate::InputSource::Folder(_) => "folder".into(),
            _ => "other".into(),
        };
        let shards = dir.path().join("shards");
        std::fs::create_dir_all(&shards).unwrap();
        std::fs::write(shards.join("a.tar.zst"), b"x").unwrap();
        std::fs::write(shards.join("b.tgz"), b"x").unwrap();
        assert_eq!(kind(&shards), "wds 2");
        let images = dir.path().join("images");
        std::fs::create_dir_all(images.join("cat")).unwrap();
        std::fs::write(images.join("cat/a.jpg"), b"x").unwrap();
        std::fs::write(images.join("images.tgz"), b"x").unwrap();
        assert_eq!(kind(&images), "folder");
        // A plain shard beside folders of images is ambiguous: the format must be named.
        std::fs::write(images.join("plain.tar"), b"x").unwrap();
        let err = resolve_input(images.to_str().unwrap(), None, &Default::default()).unwrap_err();
        assert!(err.to_string().contains("pass --input-format"), "{err}");
        std::fs::remove_dir_all(images.join("cat")).unwrap();
        assert_eq!(kind(&images), "wds 2");
    }

    /// A compressed shard is told by its first bytes and decompressed into the staging folder,
    /// at most `max_shard_bytes` of it; any other file is left as it is.
    #[test]
    fn compressed_shards_decompress_within_their_bound() {
        let dir = tempfile::tempdir().unwrap();
        let options = ListOptions {
            stage_dir: dir.path().to_path_buf(),
            max_shard_bytes: Some(1 << 20),
            ..Default::default()
        };
        let tar = shardtool_wds::tar_bytes([("a.jpg", b"x")]).unwrap();
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        std::io::Write::write_all(&mut gz, &tar).unwrap();
        for (i, bytes) in [zstd::encode_all(&tar[..], 3).unwrap(), gz.finish().unwrap()]
            .iter()
            .enumerate()
        {
            let path = dir.path().join(format!("in{i}"));
            std::fs::write(&path, bytes).unwrap();
            let mut f = std::fs::File::open(&path).unwrap();
            let d = decompress_shard(&mut f, i, &options).unwrap().unwrap();
            assert_eq!(std::fs::read(&d.path).unwrap(), tar);
            let mut read_back = Vec::new();
            std::io::Read::read_to_end(&mut &d.file, &mut read_back).unwrap();
            assert_eq!(read_back, tar, "the handle reads the shard from its start");
            assert_eq!(d.damage, None);
        }
        let plain = dir.path().join("plain.tar");
        std::fs::write(&plain, &tar).unwrap();
        let mut f = std::fs::File::open(&plain).unwrap();
        assert!(matches!(decompress_shard(&mut f, 9, &options), Ok(None)));
        // Two MiB of zeros in a few hundred bytes: refused at the bound, nothing left behind.
        let bomb = dir.path().join("bomb");
        std::fs::write(
            &bomb,
            zstd::encode_all(&vec![0u8; 2 << 20][..], 19).unwrap(),
        )
        .unwrap();
        let mut f = std::fs::File::open(&bomb).unwrap();
        let Err(err) = decompress_shard(&mut f, 5, &options) else {
            panic!("a bomb decompressed")
        };
        assert!(err.contains("more than 1048576 bytes"), "{err}");
        assert!(!dir
            .path()
            .join(".stage-000005-decompressed.tar.tmp")
            .exists());
    }
}
