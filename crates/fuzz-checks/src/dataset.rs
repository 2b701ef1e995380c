//! The `dataset` fuzz target's check: a one-shard dataset (a manifest and an arbitrary shard,
//! tar or packed, plain or zstd) through `verify`, `inspect` and the reader.

use shardtool_core::Checksum;
use shardtool_inspect::inspect;
use shardtool_manifest::{Compression, Manifest, ShardFormat};
use shardtool_reader::{Loader, Transform};
use shardtool_verify::{verify, NoProgress, VerifyOptions};
use std::path::PathBuf;
use std::sync::OnceLock;

/// Largest decompressed shard the check reads (and the cap verify and the reader are given).
const MAX_SHARD: u64 = 16 << 20;

fn folder() -> &'static PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        std::env::temp_dir().join(format!("shardtool-fuzz-dataset-{}", std::process::id()))
    })
}

/// Removes the dataset folder this process wrote.
pub fn remove_dataset_folder() {
    let _ = std::fs::remove_dir_all(folder());
}

/// Splits the input: a flags byte, a two-byte manifest length, the manifest, the shard.
fn split(data: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&flags, rest) = data.split_first()?;
    let (len, rest) = rest.split_first_chunk::<2>()?;
    let len = usize::from(u16::from_le_bytes(*len));
    (rest.len() >= len).then(|| (flags, &rest[..len], &rest[len..]))
}

/// The input is a flags byte (bit 0: decode), a two-byte manifest length, a manifest with one
/// shard entry, and the shard's bytes. The harness names the shard file after its entry's format
/// and compression and writes the entry's sizes and checksums (and the totals) from the bytes,
/// so the checks behind them run; everything else in the manifest is the input's.
///
/// `verify` (with `decode` as bit 0 says), `inspect` and the reader never panic. When `verify`
/// finds no problem, the reader (decoding when `verify` decoded) delivers every sample the
/// manifest counts, exactly once, without an error: what verify passes, training can read.
pub fn dataset(data: &[u8]) {
    check(data);
}

/// Whether `verify` passed the dataset the input describes (for tests of the seeds: a seed that
/// fails verify would leave the reader's half of the check unexercised).
pub fn dataset_passes_verify(data: &[u8]) -> bool {
    check(data) == Some(true)
}

/// [`dataset`], returning whether verify passed (`None` when the input describes no dataset).
fn check(data: &[u8]) -> Option<bool> {
    let (flags, manifest, shard) = split(data)?;
    let mut m = serde_json::from_slice::<Manifest>(manifest).ok()?;
    if m.shards.len() != 1 {
        return None;
    }
    let e = &mut m.shards[0];
    let suffix = match e.format {
        ShardFormat::Wds => "tar",
        ShardFormat::Packed => "safetensors",
    };
    e.file = match e.compression {
        Some(Compression::Zstd) => format!("shard-000000.{suffix}.zst"),
        None => format!("shard-000000.{suffix}"),
    };
    e.bytes = shard.len() as u64;
    e.checksum = Checksum::of(shard).to_string();
    if e.compression.is_some() {
        use std::io::Read;
        let mut plain = Vec::new();
        let ok = zstd::stream::read::Decoder::new(shard)
            .and_then(|d| d.take(MAX_SHARD + 1).read_to_end(&mut plain))
            .is_ok();
        if ok && plain.len() as u64 <= MAX_SHARD {
            e.uncompressed_bytes = Some(plain.len() as u64);
            e.uncompressed_checksum = Some(Checksum::of(&plain).to_string());
        }
    }
    let (samples, bytes, file) = (e.samples, e.bytes, e.file.clone());
    m.totals.shards = 1;
    m.totals.samples = samples;
    m.totals.bytes = bytes;

    let dir = folder();
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).expect("scratch folder");
    std::fs::write(dir.join(&file), shard).expect("scratch shard");
    std::fs::write(dir.join("manifest.json"), m.to_json()).expect("scratch manifest");

    let decode = flags & 1 == 1;
    let mut opts = VerifyOptions {
        decode,
        jobs: 1,
        max_shard_bytes: MAX_SHARD,
        ..VerifyOptions::default()
    };
    opts.limits.max_pixels = 1 << 20;
    let _ = inspect(dir, &opts);
    let report = verify(dir, &opts, &NoProgress).ok()?;
    let loader = Loader::builder(dir)
        .batch_size(1)
        .workers(1)
        .transform(if decode {
            Transform::Decode
        } else {
            Transform::None
        })
        .build();
    if !report.ok {
        // Still read it: a damaged dataset gives errors, never a panic.
        if let Ok(loader) = loader {
            for b in loader {
                if b.is_err() {
                    break;
                }
            }
        }
        return Some(false);
    }
    let loader = match loader {
        Ok(l) => l,
        Err(e) => panic!("verify passed, the reader refused the dataset: {e}"),
    };
    let mut keys = std::collections::BTreeSet::new();
    let mut delivered = 0u64;
    for b in loader {
        match b {
            Ok(b) => {
                delivered += b.len() as u64;
                for k in &b.keys {
                    assert!(keys.insert(k.clone()), "key {k} delivered twice");
                }
            }
            Err(e) => panic!("verify passed, the reader failed: {e}"),
        }
    }
    assert_eq!(
        delivered, samples,
        "verify passed, the reader delivered another count"
    );
    Some(true)
}
