//! Views of a dataset or a single shard for people: [`inspect`] (counts, class histogram, image
//! sizes, bytes per field) and [`preview`] (a contact sheet of sampled images with their class
//! names). Both print nothing and return typed values; the CLI formats them.
//!
//! A dataset is opened as verify opens it ([`shardtool_verify::open_target`]: a directory, a
//! manifest, or one shard file), a shard as every reader opens it ([`shardtool_core::open_shard`]:
//! read, or mapped with `mmap`, a `.zst` one decompressed under the manifest's size cap). What
//! cannot be read is reported as a verify [`Problem`](shardtool_verify::Problem) naming the shard;
//! only a target that cannot be opened at all is an error.

mod font;
mod inspect;
mod preview;
#[cfg(feature = "remote")]
mod remote;

pub use inspect::{inspect, ClassCount, FieldStats, InspectReport, SizeCount, SizeStats, Spread};
pub use preview::{encode_png, preview, PreviewItem, PreviewOptions, PreviewSheet};
#[cfg(feature = "remote")]
pub use remote::{inspect_remote, preview_remote};

use serde_json::{Map, Value};
use shardtool_core::{open_shard, OpenShard, OpenShardError, ShardBytes};
use shardtool_manifest::{Compression, ShardFormat, ShardKind};
use shardtool_verify::ProblemKind;
use shardtool_wds::{Sample, TarReader};
use std::io::Read;
use std::path::Path;

/// The first four bytes of a zstd frame.
const ZSTD_MAGIC: [u8; 4] = [0x28, 0xB5, 0x2F, 0xFD];

/// A shard's bytes as read for a view.
struct ViewBytes {
    /// The (uncompressed) shard.
    data: ShardBytes,
    /// Bytes of the file as stored.
    stored: u64,
    /// Whether it was decompressed.
    compressed: bool,
}

/// Reads the shard at `path`. `kind` is the manifest's word on its format and compression; a
/// lone shard (`None`) is decompressed when it starts with the zstd magic. At most `max_bytes`
/// are held (or the manifest's `declared` uncompressed size, when smaller).
/// Shard bytes held in memory at once by `inspect` and `preview`, which read each shard whole:
/// their threads are as many as fit, at least one.
const SHARD_BYTES_IN_FLIGHT: u64 = 1 << 30;

/// `jobs` threads, fewer when each holding a shard of `largest` bytes would pass
/// [`SHARD_BYTES_IN_FLIGHT`].
fn jobs_within(jobs: usize, largest: u64) -> usize {
    let fit = SHARD_BYTES_IN_FLIGHT / largest.max(1);
    jobs.min(usize::try_from(fit).unwrap_or(usize::MAX)).max(1)
}

fn read_shard(
    path: &Path,
    kind: Option<ShardKind>,
    declared: Option<u64>,
    max_bytes: u64,
    map: bool,
) -> Result<ViewBytes, (ProblemKind, String)> {
    let cannot = |e: std::io::Error| {
        let kind = if e.kind() == std::io::ErrorKind::NotFound {
            ProblemKind::MissingShard
        } else {
            ProblemKind::Unreadable
        };
        (kind, format!("cannot read: {e}"))
    };
    let zstd = match kind {
        Some(k) => k.compression == Some(Compression::Zstd),
        None => {
            let mut magic = [0u8; 4];
            let n = shardtool_core::open_regular(path)
                .and_then(|mut f| f.read(&mut magic))
                .map_err(cannot)?;
            n == 4 && magic == ZSTD_MAGIC
        }
    };
    let stored = std::fs::metadata(path).map_err(cannot)?.len();
    let max_bytes = declared
        .filter(|_| zstd)
        .map_or(max_bytes, |d| d.min(max_bytes));
    let how = OpenShard {
        zstd,
        max_bytes,
        map: map && !zstd,
    };
    match open_shard(path, how) {
        Ok(data) => Ok(ViewBytes {
            data,
            stored,
            compressed: zstd,
        }),
        Err(OpenShardError::Io { cause, .. }) => Err(cannot(cause)),
        Err(OpenShardError::TooLarge { max_bytes, .. }) => Err((
            ProblemKind::Unreadable,
            format!("content not read: holds more than {max_bytes} bytes"),
        )),
        Err(OpenShardError::Decompress { message, .. }) => Err((
            ProblemKind::Decompress,
            format!("the zstd stream cannot be decompressed: {message}"),
        )),
        Err(e) => Err((ProblemKind::Unreadable, format!("cannot read: {e}"))),
    }
}

/// What a tar sample says of itself: its `.json` (at most 1 MiB, when it is a JSON object) and
/// its label (`.cls` first, else the json's `label`).
fn tar_meta_and_label(sample: &Sample<'_>) -> (Option<Map<String, Value>>, Option<i64>) {
    let meta: Option<Map<String, Value>> = sample
        .get("json")
        .filter(|j| j.len() <= 1 << 20)
        .and_then(|j| serde_json::from_slice(j).ok());
    let label = sample
        .get(shardtool_wds::LABEL_FIELD)
        .and_then(shardtool_wds::parse_cls)
        .or_else(|| meta.as_ref()?.get("label")?.as_i64());
    (meta, label)
}

/// Detects the format of shard bytes from their content.
fn sniff(bytes: &[u8]) -> Option<ShardFormat> {
    if bytes.len() > 9 && bytes[8] == b'{' {
        return Some(ShardFormat::Packed);
    }
    match TarReader::new(bytes).next() {
        Some(Ok(_)) => Some(ShardFormat::Wds),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn threads_holding_whole_shards_keep_to_the_bound() {
        assert_eq!(jobs_within(8, 64 << 20), 8);
        assert_eq!(jobs_within(8, 256 << 20), 4);
        assert_eq!(jobs_within(8, 4 << 30), 1);
        assert_eq!(jobs_within(3, 0), 3);
    }

    #[test]
    fn shards_are_read_plain_mapped_or_decompressed_within_their_cap() {
        let dir = tempfile::tempdir().unwrap();
        let data: Vec<u8> = (0..50_000u32).map(|i| (i * 13 % 251) as u8).collect();
        let plain = dir.path().join("a.tar");
        let packed = dir.path().join("a.tar.zst");
        std::fs::write(&plain, &data).unwrap();
        let z = zstd::encode_all(&data[..], 3).unwrap();
        std::fs::write(&packed, &z).unwrap();
        let n = data.len() as u64;
        let tar = Some(ShardKind::new(ShardFormat::Wds, None));
        let tar_zst = Some(ShardKind::new(ShardFormat::Wds, Some(Compression::Zstd)));
        let empty = dir.path().join("e.tar");
        std::fs::write(&empty, b"").unwrap();
        for map in [false, true] {
            let r = read_shard(&plain, tar, None, n, map).unwrap();
            assert_eq!((&r.data[..], r.stored, r.compressed), (&data[..], n, false));
            assert_eq!(matches!(r.data, ShardBytes::Mapped(_)), map);
            assert!(read_shard(&empty, tar, None, n, map)
                .unwrap()
                .data
                .is_empty());
        }
        // A lone shard is decompressed by its magic; a listed one as the manifest says.
        for kind in [None, tar_zst] {
            let r = read_shard(&packed, kind, Some(n), u64::MAX, true).unwrap();
            assert_eq!(&r.data[..], &data[..]);
            assert_eq!((r.stored, r.compressed), (z.len() as u64, true));
        }
        // The manifest's declared size caps decompression, as does the limit.
        for (declared, max) in [(Some(n - 1), u64::MAX), (None, n - 1)] {
            let (kind, message) = read_shard(&packed, tar_zst, declared, max, false)
                .err()
                .unwrap();
            assert_eq!(kind, ProblemKind::Unreadable);
            assert!(
                message.contains(&format!("more than {}", n - 1)),
                "{message}"
            );
        }
        let (kind, message) = read_shard(&dir.path().join("gone.tar"), tar, None, n, false)
            .err()
            .unwrap();
        assert_eq!(kind, ProblemKind::MissingShard, "{message}");
        std::fs::write(&packed, &z[..z.len() / 2]).unwrap();
        let (kind, _) = read_shard(&packed, tar_zst, Some(n), u64::MAX, false)
            .err()
            .unwrap();
        assert_eq!(kind, ProblemKind::Decompress);
    }
}
