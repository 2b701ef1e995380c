//! Reading one input's bytes (a file, or a span of a container) within their limits, and the
//! checks of the fields a sample carries, run on the pack's worker threads.

use std::io::Read;
use std::path::Path;

/// The pack option that numbers samples, as both front-ends spell it, for messages about keys.
pub(crate) const NUMBERED: &str = "--keys index (keys=\"index\" in Python)";

/// Why a carried field breaks the rules verify checks it by, if it does: a `txt` is UTF-8 of
/// at most 1 MiB, a `json` (the input's own) one JSON object of at most 1 MiB whose `key`, if it
/// states one, is the sample's (unless samples are `renumbered`: it is then the input's). A
/// dataset pack writes then always verifies.
pub(crate) fn carried_problem(
    field: &str,
    data: &[u8],
    key: &str,
    renumbered: bool,
) -> Option<String> {
    match field {
        "txt" => {
            shardtool_wds::txt_problem(data.len() as u64, data).map(|why| format!("its txt {why}"))
        }
        "json" => match shardtool_wds::SampleMeta::parse(data.len() as u64, data) {
            Ok(meta) if !renumbered => meta.key_problem(key),
            Ok(_) => None,
            Err(why) => Some(why),
        }
        .map(|why| format!("its json {why}")),
        _ => None,
    }
}

/// Why a tar sample of `key` with its image as `image` (`jpg`, `png`) and the `carried` fields
/// cannot be written, if it cannot: a carried field of the image's name would be replaced by it,
/// and a member name (`key.field`) holds at most 100 bytes.
pub(crate) fn tar_member_problem(
    key: &str,
    image: &str,
    carried: &[(String, Vec<u8>)],
) -> Option<(&'static str, String)> {
    if carried.iter().any(|(f, _)| f == image) {
        return Some((
            "bad_field",
            format!(
                "the sample carries a `{image}` field besides its image, which is stored as \
                 `{image}`: the image would replace it (another --encode keeps both)"
            ),
        ));
    }
    let fields = carried.iter().map(|(f, _)| f.as_str());
    let longest = fields
        .chain([image, "json", "cls"])
        .max_by_key(|f| f.len())?;
    let len = key.len() + 1 + longest.len();
    (len > 100).then(|| {
        (
            "bad_key",
            format!(
                "the tar member `{key}.{longest}` would be named in {len} bytes, and a name \
                 holds at most 100; {} numbers samples in 9 digits instead",
                NUMBERED
            ),
        )
    })
}

/// Why a packed record cannot carry the `carried` fields, if it cannot: one named like a field
/// every record has (`key`, `label`, `pixels`) could be told from it neither in the manifest's
/// field lists nor by a reader.
pub(crate) fn packed_record_problem(
    carried: &[(String, Vec<u8>)],
) -> Option<(&'static str, String)> {
    let (name, _) = carried
        .iter()
        .find(|(f, _)| shardtool_packed::RECORD_FIELDS.contains(&f.as_str()))?;
    Some((
        "bad_field",
        format!(
            "the sample carries a `{name}` field, the name of the record's own {name} in packed \
             shards (--format wds stores it as a tar member)"
        ),
    ))
}

/// The members of `json` worth keeping when it is metadata shardtool wrote (a `source`, a
/// `key` and the four sizes, as a pack's `.json` states them): its source and original size as
/// `input_source`, `input_orig_width` and `input_orig_height` (this input's; an earlier pack's
/// move to `input_input_source` and so on), and its other members but the key, label, class and the sizes of the
/// image it described, which a new pack states afresh. `None` for any other json (an input's
/// own, carried byte for byte).
pub(crate) fn own_metadata(json: &[u8]) -> Option<serde_json::Map<String, serde_json::Value>> {
    // Ours names `orig_width` plainly: any other json (every sample's, for img2dataset shards)
    // is not parsed here as well as by the carried-field check.
    let named = |w: &[u8]| w == b"\"orig_width\"";
    if json.len() as u64 > shardtool_wds::MAX_TEXT_BYTES as u64 || !json.windows(12).any(named) {
        return None;
    }
    let Ok(serde_json::Value::Object(mut m)) = serde_json::from_slice(json) else {
        return None;
    };
    let sizes = ["orig_width", "orig_height", "width", "height"];
    let ours = m.get("source").is_some_and(|v| v.is_string())
        && m.get("key").is_some_and(|v| v.is_string())
        && sizes.iter().all(|s| m.get(*s).is_some_and(|v| v.is_u64()));
    if !ours {
        return None;
    }
    for drop in ["key", "label", "class", "width", "height", "fields"] {
        m.remove(drop);
    }
    // What described the input (an EXIF turn too: the new image is upright) is kept for it.
    for own in ["source", "orig_width", "orig_height", "orientation"] {
        if let Some(v) = m.remove(own) {
            shift_in(&mut m, format!("input_{own}"), v);
        }
    }
    Some(m)
}

/// Puts `v` under `name`, moving what held that name (an earlier pack's `input_source`, or a
/// user's `source` column carried under it) to `input_<name>`, and so on: nothing is lost.
fn shift_in(
    m: &mut serde_json::Map<String, serde_json::Value>,
    mut name: String,
    mut v: serde_json::Value,
) {
    while let Some(old) = m.insert(name.clone(), v) {
        name.insert_str(0, "input_");
        v = old;
    }
}

/// Bytes a sample may carry besides its image (captions, metadata, other fields).
pub(crate) const MAX_CARRIED_BYTES: u64 = 16 << 20;

/// Reads `[start, end)` of a container file, refusing spans over `limit` bytes.
pub(crate) fn read_span(
    path: &Path,
    (start, end): (u64, u64),
    limit: u64,
) -> Result<Vec<u8>, (&'static str, String)> {
    use std::os::unix::fs::FileExt;
    let len = end - start;
    if len > limit {
        return Err((
            "too_large",
            format!("the sample is {len} bytes, over the {limit}-byte limit"),
        ));
    }
    let unreadable = |e: std::io::Error| (read_failure(&e), format!("{}: {e}", path.display()));
    let file = std::fs::File::open(path).map_err(unreadable)?;
    let mut bytes = vec![0u8; len as usize];
    file.read_exact_at(&mut bytes, start).map_err(unreadable)?;
    Ok(bytes)
}

/// The kind of failure of a read that failed with `e`: [`MACHINE_FAULT`] where the machine is
/// at fault (which stops the run), else the input is `unreadable`.
fn read_failure(e: &std::io::Error) -> &'static str {
    match shardtool_core::machine_fault(e) {
        true => MACHINE_FAULT,
        false => "unreadable",
    }
}

/// Whether failure `e` was this machine's fault: so marked, or (a failure met while listing or
/// staging, which keeps only the text) naming too many open files or no memory.
pub(crate) fn machine_fault(e: &crate::ErrorRecord) -> bool {
    e.kind == MACHINE_FAULT || shardtool_core::names_a_machine_fault(&e.message)
}

/// Refuses a listing in which an input failed for this machine's fault (too many open files, no
/// memory) while it was read or staged: the run stops, as a retry may list it, rather than count
/// the input as failed.
pub(crate) fn faultless(listing: &crate::Listing) -> Result<(), crate::PackError> {
    match listing.errors.iter().find(|e| machine_fault(e)) {
        Some(e) => Err(crate::PackError::MachineFault(e.clone())),
        None => Ok(()),
    }
}

/// The kind of a read that failed for a fault of this machine (too many open files, no memory):
/// the run stops instead of counting the input as failed.
pub(crate) const MACHINE_FAULT: &str = "machine_fault";

/// For a missing file whose name has spaces at its ends (a list's path is taken as written),
/// a hint naming the file without them, when that one exists.
fn trimmed_exists(path: &Path, e: &std::io::Error) -> Option<String> {
    if e.kind() != std::io::ErrorKind::NotFound {
        return None;
    }
    // Each component trimmed: a CSV written with `, ` puts the space before the folder.
    let mut trimmed = std::path::PathBuf::new();
    for c in path.components() {
        match (c, c.as_os_str().to_str().map(str::trim)) {
            (std::path::Component::Normal(_), Some(t)) if !t.is_empty() => trimmed.push(t),
            _ => trimmed.push(c),
        }
    }
    (trimmed != path && trimmed.exists()).then(|| {
        let shown = trimmed.display().to_string();
        format!(" (a path is taken as written, spaces and all: {shown:?} exists)")
    })
}

/// Why a file that is not a regular one (a pipe, socket or device) is not read.
pub(crate) const NOT_REGULAR: &str = "not a regular file (a pipe, socket or device): not read";

/// Whether `path` exists and is no regular file: opening a pipe would wait for a writer.
pub(crate) fn not_regular(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| !m.is_file())
}

/// Reads a whole file, refusing (before reading) files over `limit` bytes, and files whose size
/// is not the `planned` one.
pub(crate) fn read_bounded(
    path: &Path,
    limit: u64,
    planned: Option<u64>,
) -> Result<Vec<u8>, (&'static str, String)> {
    let unreadable = |e: std::io::Error| {
        let hint = trimmed_exists(path, &e).unwrap_or_default();
        (read_failure(&e), format!("cannot read: {e}{hint}"))
    };
    if not_regular(path) {
        return Err(("unreadable", NOT_REGULAR.into()));
    }
    let file = std::fs::File::open(path).map_err(unreadable)?;
    let len = file.metadata().map_err(unreadable)?.len();
    if let Some(p) = planned.filter(|&p| p != len) {
        return Err((
            "changed",
            format!("{len} bytes, {p} when the plan was made: the input changed since"),
        ));
    }
    if len > limit {
        return Err((
            "too_large",
            format!("{len} bytes, over the {limit}-byte input limit"),
        ));
    }
    if len == 0 {
        return Err(("decode", "empty file".into()));
    }
    let mut bytes = Vec::new();
    if bytes.try_reserve_exact(len as usize).is_err() {
        let message = format!("no memory to read its {len} bytes");
        return Err((MACHINE_FAULT, message));
    }
    // `take` guards against a file that grows while we read it.
    file.take(limit + 1)
        .read_to_end(&mut bytes)
        .map_err(unreadable)?;
    if bytes.len() as u64 > limit {
        return Err(("too_large", format!("over the {limit}-byte input limit")));
    }
    Ok(bytes)
}

/// Names our metadata uses (`fields` holds a packed record's carried fields); a carried column
/// of the same name is stored as `input_<name>` (`input_input_<name>` when that is taken too),
/// in every sample alike (`orientation` is only in those whose image was turned).
pub(crate) const OWN_META: [&str; 10] = [
    "fields",
    "key",
    "source",
    "label",
    "class",
    "orig_width",
    "orig_height",
    "width",
    "height",
    "orientation",
];
