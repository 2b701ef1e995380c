//! A dataset opened for reading: the manifest and one validated, zero-copy view per shard.

use crate::mmap::map_readonly;
use crate::ReadError;
use memmap2::Mmap;
use shardtool_manifest::{Manifest, ShardFormat};
use shardtool_packed::PackedShard;
use std::io::Read;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The bytes of one shard: a read-only map of a plain file, or a buffer holding a decompressed
/// `.zst` shard.
pub enum ShardBytes {
    /// Mapped file.
    Mapped(Mmap),
    /// Decompressed in memory.
    Owned(Vec<u8>),
}

impl AsRef<[u8]> for ShardBytes {
    fn as_ref(&self) -> &[u8] {
        match self {
            ShardBytes::Mapped(m) => m,
            ShardBytes::Owned(v) => v,
        }
    }
}

/// One sample of a tar shard, by byte ranges into the shard.
#[derive(Debug, Clone)]
pub struct TarRecord {
    /// Sample key.
    pub key: String,
    /// Label from `.cls`.
    pub label: i64,
    /// The image field (`jpg`, `png`, …).
    pub field: String,
    /// Where the image bytes are.
    pub image: Range<usize>,
}

/// A validated shard.
pub enum ShardView {
    /// A tar shard indexed once.
    Tar {
        /// Shard bytes.
        bytes: ShardBytes,
        /// Its samples.
        records: Vec<TarRecord>,
    },
    /// A packed shard.
    Packed(PackedShard<ShardBytes>),
}

impl ShardView {
    /// Number of samples.
    pub fn len(&self) -> usize {
        match self {
            ShardView::Tar { records, .. } => records.len(),
            ShardView::Packed(p) => p.len(),
        }
    }

    /// True when the shard holds no samples.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// An opened dataset.
pub struct Dataset {
    /// Its directory.
    pub dir: PathBuf,
    /// The manifest.
    pub manifest: Manifest,
    /// Views, in manifest order, opened lazily.
    shards: Vec<std::sync::OnceLock<Result<Arc<ShardView>, String>>>,
}

/// Largest manifest read.
const MAX_MANIFEST: u64 = 256 << 20;

impl Dataset {
    /// Opens a dataset directory or a `manifest.json` path. Shards are opened on first use.
    pub fn open(path: &Path) -> Result<Self, ReadError> {
        if !path.exists() {
            return Err(ReadError::Manifest {
                path: path.to_path_buf(),
                message: "no such dataset: expected a directory holding manifest.json, or a manifest.json path".into(),
            });
        }
        let (dir, manifest_path) = if path.is_dir() {
            (path.to_path_buf(), path.join(shardtool_manifest::FILE_NAME))
        } else {
            (
                path.parent().unwrap_or(Path::new(".")).to_path_buf(),
                path.to_path_buf(),
            )
        };
        let bytes = std::fs::read(&manifest_path).map_err(|e| ReadError::Io {
            path: manifest_path.clone(),
            cause: e,
        })?;
        let manifest =
            Manifest::from_slice(&bytes, MAX_MANIFEST).map_err(|e| ReadError::Manifest {
                path: manifest_path,
                message: e.to_string(),
            })?;
        let shards = manifest.shards.iter().map(|_| Default::default()).collect();
        Ok(Self {
            dir,
            manifest,
            shards,
        })
    }

    /// Sample counts per shard, from the manifest.
    pub fn counts(&self) -> Vec<u64> {
        self.manifest.shards.iter().map(|s| s.samples).collect()
    }

    /// The view of shard `i`, opening and validating it on first use.
    pub fn shard(&self, i: usize) -> Result<Arc<ShardView>, ReadError> {
        let cell = self.shards.get(i).ok_or(ReadError::NoSuchShard(i))?;
        // A shard that failed to open fails the same way for every later caller.
        cell.get_or_init(|| self.open_shard(i).map(Arc::new).map_err(|e| e.to_string()))
            .clone()
            .map_err(|message| ReadError::CorruptShard {
                shard: self.manifest.shards[i].file.clone(),
                message,
            })
    }

    fn open_shard(&self, i: usize) -> Result<ShardView, ReadError> {
        let entry = &self.manifest.shards[i];
        let path = self.dir.join(&entry.file);
        let io = |e| ReadError::Io {
            path: path.clone(),
            cause: e,
        };
        let file = std::fs::File::open(&path).map_err(io)?;
        let bytes = if entry.compression.is_some() {
            let limit = entry.uncompressed_bytes.unwrap_or(0);
            let mut out = Vec::new();
            zstd::Decoder::new(file)
                .map_err(io)?
                .take(limit + 1)
                .read_to_end(&mut out)
                .map_err(io)?;
            ShardBytes::Owned(out)
        } else {
            // SAFETY: published shards are write-once and never modified in place (see mmap.rs).
            #[allow(unsafe_code)]
            let map = unsafe { map_readonly(&file) }.map_err(io)?;
            ShardBytes::Mapped(map)
        };
        let corrupt = |message: String| ReadError::CorruptShard {
            shard: entry.file.clone(),
            message,
        };
        let view = match entry.format {
            ShardFormat::Packed => {
                ShardView::Packed(PackedShard::open(bytes).map_err(|e| corrupt(e.to_string()))?)
            }
            ShardFormat::Wds => {
                let records = index_tar(bytes.as_ref()).map_err(corrupt)?;
                ShardView::Tar { bytes, records }
            }
        };
        if view.len() as u64 != entry.samples {
            return Err(corrupt(format!(
                "holds {} samples, the manifest says {}",
                view.len(),
                entry.samples
            )));
        }
        Ok(view)
    }
}

/// Indexes a tar shard once: each sample's key, label and image byte range.
fn index_tar(bytes: &[u8]) -> Result<Vec<TarRecord>, String> {
    let (samples, err) = shardtool_wds::group_samples(bytes);
    if let Some(e) = err {
        return Err(e.to_string());
    }
    let base = bytes.as_ptr() as usize;
    let mut out = Vec::with_capacity(samples.len());
    for s in samples {
        let label = s
            .get("cls")
            .and_then(|c| std::str::from_utf8(c).ok())
            .and_then(|c| c.trim().parse::<i64>().ok())
            .ok_or_else(|| format!("sample {:?} has no valid .cls label", s.key))?;
        let (field, data) = s
            .fields
            .iter()
            .find(|(f, _)| matches!(f.as_str(), "jpg" | "jpeg" | "png" | "webp"))
            .ok_or_else(|| format!("sample {:?} has no image field", s.key))?;
        let start = data.as_ptr() as usize - base;
        out.push(TarRecord {
            key: s.key.clone(),
            label,
            field: field.clone(),
            image: start..start + data.len(),
        });
    }
    Ok(out)
}
