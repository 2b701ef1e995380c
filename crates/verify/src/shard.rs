//! One shard's checks: read it (streamed, or whole through `loader`), compare its size and
//! checksums with the manifest, and run the structure, label, metadata and (with `decode`) image
//! checks of its format.

use crate::check_packed::{check_packed, Records};
use crate::check_tar::{check_tar, stream_tar, Ctx, ImageJob, Scan, MAX_SHARD_PROBLEMS};
use crate::keys::Keys;
use crate::loader::{
    load_mapped, load_packed_checks, load_plain, load_zstd, BufferPool, Incomplete, Loaded,
    ShardBytes, STREAM_BUFFER,
};
use crate::report::{Problem, ProblemKind};
use crate::VerifyOptions;
use rayon::prelude::*;
use shardtool_core::Checksum;
use shardtool_image::{transform, Encode, Resize, TransformSpec};
use shardtool_manifest::{is_safe_file_name, Compression, ShardEntry, ShardFormat};
use std::collections::BTreeSet;
use std::path::Path;

/// What every shard's checks share.
pub(crate) struct Shared<'a> {
    /// The dataset directory.
    pub dir: &'a Path,
    /// The manifest's fields, optional fields and classes.
    pub fields: &'a BTreeSet<String>,
    pub optional: &'a BTreeSet<String>,
    pub classes: &'a [String],
    /// The manifest's pack options say a sample's json may be its input's (`"json": "input"`).
    pub json_input: bool,
    /// The manifest's pack options say samples were numbered by position (`"keys": "index"`).
    pub renumbered: bool,
    /// The pixel limit the dataset was packed under (within the readers' ceiling).
    pub max_pixels: u64,
    pub opts: &'a VerifyOptions,
    /// Verify's threads (`opts.jobs_or_cores()`, read once); with 1 nothing fans out.
    pub jobs: usize,
    pub buffers: BufferPool,
}

impl Shared<'_> {
    /// The checks' context for the shard of `entry`.
    fn ctx<'e>(&'e self, entry: &'e ShardEntry, decode: bool) -> Ctx<'e> {
        Ctx {
            shard: &entry.file,
            fields: self.fields,
            optional: self.optional,
            json_input: self.json_input,
            renumbered: self.renumbered,
            classes: self.classes,
            decode,
            expected_samples: entry.samples,
        }
    }
}

/// What one shard contributed.
#[derive(Default)]
pub(crate) struct ShardOutcome {
    pub problems: Vec<Problem>,
    /// Samples found, when the shard could be parsed to its end.
    pub samples: Option<u64>,
    /// Its keys in shard order, each once.
    pub keys: Keys,
    pub bytes_read: u64,
    pub decoded: u64,
}

/// Reads one shard and runs every check on it.
pub(crate) fn verify_shard(entry: &ShardEntry, sh: &Shared<'_>) -> ShardOutcome {
    let mut out = ShardOutcome::default();
    let name = entry.file.as_str();
    if !is_safe_file_name(name) {
        // Reported with the manifest's problems; never joined to a path.
        return out;
    }
    let path = sh.dir.join(name);
    let problem = |kind, message: String| Problem::shard(name, kind, message);
    match std::fs::metadata(&path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            out.problems.push(problem(
                ProblemKind::MissingShard,
                "listed in the manifest but not in the directory".into(),
            ));
            return out;
        }
        Err(e) => {
            out.problems.push(problem(
                ProblemKind::Unreadable,
                format!("cannot stat: {e}"),
            ));
            return out;
        }
        Ok(meta) if !meta.is_file() => {
            out.problems.push(problem(
                ProblemKind::Unreadable,
                shardtool_core::not_regular_file(&meta).into(),
            ));
            return out;
        }
        Ok(_) => {}
    }
    let opts = sh.opts;
    let compressed = entry.compression == Some(Compression::Zstd);
    if entry.format == ShardFormat::Wds && !compressed && !opts.decode {
        stream_shard(&path, entry, sh, &mut out);
        return out;
    }
    // A plain packed shard whose checksum matches needs no pixels (see below): read it keeping
    // everything else; one that does not match is read again, whole, to name its records.
    let limit = opts.max_shard_bytes;
    let light = if entry.format == ShardFormat::Packed && !compressed && !opts.decode && !opts.mmap
    {
        match load_packed_checks(&path, limit).transpose() {
            Some(Ok(l)) if !matches_manifest(entry, l.stored_sum, None) => None,
            light => light,
        }
    } else {
        None
    };
    let pooled = light.is_none();
    let loaded = light.unwrap_or_else(|| match (compressed, opts.mmap) {
        (true, _) => load_zstd(&path, entry.uncompressed_bytes, limit, &sh.buffers),
        (false, true) => load_mapped(&path),
        (false, false) => load_plain(&path, limit, &sh.buffers),
    });
    let loaded = match loaded {
        Ok(l) => l,
        Err(e) => {
            out.problems.push(problem(
                ProblemKind::Unreadable,
                format!("cannot read: {e}"),
            ));
            return out;
        }
    };
    out.bytes_read = loaded.stored_len;
    let mut content = Vec::new();
    if loaded.incomplete.is_none() {
        // A packed shard's file checksum covers every record: they are recomputed only to name
        // the damaged ones when it does not match, and with `decode`, the deep check (see
        // `check_packed`). Tar shards have no record checksums.
        let records = if entry.format == ShardFormat::Packed
            && (opts.decode || !matches_manifest(entry, loaded.stored_sum, loaded.uncompressed))
        {
            // With `decode` the records fan out over verify's pool; without, each shard is one
            // thread's work (shards run in parallel).
            if opts.decode && sh.jobs > 1 {
                Records::CheckOnPool
            } else {
                Records::Check
            }
        } else {
            Records::Skip
        };
        check_content(entry, &loaded.data, records, sh, &mut out, &mut content);
    }
    compare_with_manifest(entry, &loaded, &mut out.problems);
    out.problems.extend(content);
    if pooled {
        sh.buffers.give(loaded.data);
    }
    out
}

/// Checks a plain tar shard without decoding by reading it front to back through a small
/// buffer (see [`stream_tar`]): the data of members no check reads is hashed and dropped, so
/// memory stays bounded whatever the shard's size, and each byte is hashed while in cache.
fn stream_shard(path: &Path, entry: &ShardEntry, sh: &Shared<'_>, out: &mut ShardOutcome) {
    let name = entry.file.as_str();
    let unreadable = |e: std::io::Error| {
        Problem::shard(name, ProblemKind::Unreadable, format!("cannot read: {e}"))
    };
    let opened = shardtool_core::open_regular(path).and_then(|f| {
        let len = f.metadata()?.len();
        Ok((f, len))
    });
    let (file, len) = match opened {
        Ok(o) => o,
        Err(e) => {
            out.problems.push(unreadable(e));
            return;
        }
    };
    let ctx = sh.ctx(entry, false);
    let mut buf = sh.buffers.take();
    if buf.len() < STREAM_BUFFER {
        buf.resize(STREAM_BUFFER, 0);
    }
    let (streamed, buf) = stream_tar(file, len, buf, &ctx);
    sh.buffers.give(ShardBytes::owned(buf));
    let mut s = match streamed {
        Ok(s) => s,
        Err(e) => {
            out.problems.push(unreadable(e));
            return;
        }
    };
    out.bytes_read = s.len;
    let loaded = Loaded {
        data: ShardBytes::owned(Vec::new()),
        stored_len: s.len,
        stored_sum: s.sum,
        uncompressed: None,
        incomplete: None,
    };
    compare_with_manifest(entry, &loaded, &mut out.problems);
    let mut content = Vec::new();
    take_scan(entry, &mut s.scan, out, &mut content);
    out.problems.extend(content);
}

/// Whether the shard's stored checksum (and, for a compressed shard, its uncompressed checksum
/// when the manifest records one) equals the manifest's. A checksum the manifest lacks or that
/// does not parse never matches.
fn matches_manifest(
    entry: &ShardEntry,
    stored_sum: Checksum,
    uncompressed: Option<(u64, Checksum)>,
) -> bool {
    let stored_ok = Checksum::parse(&entry.checksum) == Some(stored_sum);
    let uncompressed_ok = match (&entry.uncompressed_checksum, uncompressed) {
        (None, _) => true,
        (Some(expected), Some((_, sum))) => Checksum::parse(expected) == Some(sum),
        (Some(_), None) => false,
    };
    stored_ok && uncompressed_ok
}

/// Sizes and checksums, stored and uncompressed, and why the content could not be read whole.
fn compare_with_manifest(entry: &ShardEntry, l: &Loaded, problems: &mut Vec<Problem>) {
    let stored_sum = l.stored_sum;
    let name = entry.file.as_str();
    let mut push = |kind, message: String| problems.push(Problem::shard(name, kind, message));
    if l.stored_len != entry.bytes {
        push(
            ProblemKind::SizeMismatch,
            format!(
                "the file is {} bytes; the manifest says {}",
                l.stored_len, entry.bytes
            ),
        );
    }
    if let Some(expected) = Checksum::parse(&entry.checksum) {
        if expected != stored_sum {
            push(
                ProblemKind::ChecksumMismatch,
                format!("the file hashes to {stored_sum}; the manifest says {expected}"),
            );
        }
    }
    if let (Some((len, sum)), Some(elen)) = (l.uncompressed, entry.uncompressed_bytes) {
        if len != elen {
            push(
                ProblemKind::UncompressedSizeMismatch,
                format!("it decompresses to {len} bytes; the manifest says {elen}"),
            );
        }
        let expected = entry
            .uncompressed_checksum
            .as_deref()
            .and_then(Checksum::parse);
        if let Some(expected) = expected {
            if expected != sum {
                push(
                    ProblemKind::UncompressedChecksumMismatch,
                    format!(
                        "it decompresses to bytes hashing to {sum}; the manifest says {expected}"
                    ),
                );
            }
        }
    }
    match &l.incomplete {
        None => {}
        Some(Incomplete::TooLarge { limit }) => push(
            ProblemKind::TooLarge,
            format!(
                "over the {limit}-byte in-memory limit for a shard; only its checksum was checked"
            ),
        ),
        Some(Incomplete::OverCap { cap }) => push(
            ProblemKind::UncompressedSizeMismatch,
            format!("it decompresses to more than the {cap} bytes the manifest says"),
        ),
        Some(Incomplete::Decompress(e)) => push(
            ProblemKind::Decompress,
            format!("not a valid zstd stream: {e}"),
        ),
    }
}

/// Structure, labels, metadata and (with `decode`) images of a completely read shard. Problems go
/// to `problems`; counts and keys to `out`. `records` applies to packed shards.
fn check_content(
    entry: &ShardEntry,
    data: &[u8],
    records: Records,
    sh: &Shared<'_>,
    out: &mut ShardOutcome,
    problems: &mut Vec<Problem>,
) {
    let opts = sh.opts;
    let ctx = sh.ctx(entry, opts.decode);
    let mut scan = match entry.format {
        ShardFormat::Wds => check_tar(data, &ctx),
        ShardFormat::Packed => check_packed(data, &ctx, records),
    };
    take_scan(entry, &mut scan, out, problems);
    if opts.decode {
        let spec = TransformSpec {
            resize: Resize::None,
            encode: Encode::Raw,
            limits: shardtool_core::Limits {
                // A caller's own limit caps; the default follows the dataset's (a pack may
                // have raised it).
                max_pixels: match opts.limits.max_pixels {
                    d if d == shardtool_core::Limits::default().max_pixels => sh.max_pixels,
                    cap => cap,
                },
                ..opts.limits
            },
            ..TransformSpec::default()
        };
        let decode = |job| decode_one(&entry.file, data, job, &spec);
        let results: Vec<Option<Problem>> = if sh.jobs > 1 {
            scan.images.par_iter().map(decode).collect()
        } else {
            scan.images.iter().map(decode).collect()
        };
        out.decoded = scan.images.len() as u64;
        problems.extend(results.into_iter().flatten());
    }
}

/// Takes a shard scan's problems, sample count (checked against the manifest's) and keys.
fn take_scan(
    entry: &ShardEntry,
    scan: &mut Scan,
    out: &mut ShardOutcome,
    problems: &mut Vec<Problem>,
) {
    problems.append(&mut scan.problems);
    if scan.unlisted > 0 {
        problems.push(Problem::shard(
            &entry.file,
            ProblemKind::MoreProblems,
            format!(
                "{} more problems in this shard are not listed (the first {MAX_SHARD_PROBLEMS} are)",
                scan.unlisted
            ),
        ));
    }
    let samples = scan.samples;
    if samples != entry.samples {
        problems.push(Problem::shard(
            &entry.file,
            ProblemKind::CountMismatch,
            format!(
                "holds {samples} samples; the manifest says {}",
                entry.samples
            ),
        ));
    }
    out.samples = Some(samples);
    out.keys = std::mem::take(&mut scan.keys);
}

fn decode_one(shard: &str, data: &[u8], job: &ImageJob, spec: &TransformSpec) -> Option<Problem> {
    // The scan found the member inside `data`.
    let bytes = usize::try_from(job.at)
        .ok()
        .zip(usize::try_from(job.len).ok())
        .and_then(|(at, len)| data.get(at..at.checked_add(len)?))?;
    match transform(bytes, spec) {
        Err(e) => Some(Problem::member(
            shard,
            job.member.as_str(),
            ProblemKind::Decode,
            format!("does not decode ({}): {}", e.kind.as_str(), e.message),
        )),
        Ok(t) => match job.expect {
            Some((w, h)) if (u64::from(t.width), u64::from(t.height)) != (w, h) => {
                Some(Problem::member(
                    shard,
                    job.member.as_str(),
                    ProblemKind::ImageSizeMismatch,
                    format!(
                        "decodes to {}x{}, but its metadata says {w}x{h}",
                        t.width, t.height
                    ),
                ))
            }
            _ => None,
        },
    }
}
