//! A dataset opened for reading: the manifest and one validated, zero-copy view per shard,
//! from a local folder (read in place) or a remote one (through the shard cache).

use crate::mmap::map_readonly;
use crate::ReadError;
use memmap2::Mmap;
use shardtool_cache::{CacheOptions, Lease, Location, RemoteDataset};
use shardtool_manifest::{Manifest, ShardFormat};
use shardtool_packed::PackedShard;
use std::io::Read;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// The bytes of one shard: a read-only map of a plain file, or a buffer holding a decompressed
/// `.zst` shard.
pub enum ShardBytes {
    /// Mapped file.
    Mapped(Mmap),
    /// Decompressed in memory.
    Owned(Vec<u8>),
    /// A mapped file in the shard cache, held there (not evictable) while the lease lives.
    Cached(Mmap, Lease),
}

impl AsRef<[u8]> for ShardBytes {
    fn as_ref(&self) -> &[u8] {
        match self {
            ShardBytes::Mapped(m) | ShardBytes::Cached(m, _) => m,
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

/// The state of one shard's view.
#[derive(Default)]
enum Slot {
    /// Not open (yet, or again after its last sample this epoch).
    #[default]
    Closed,
    Open(Arc<ShardView>),
    /// Failed to open: every later caller gets the same error.
    Failed(String),
}

/// An opened dataset.
pub struct Dataset {
    /// Its directory (for a remote dataset: its folder in the cache).
    pub dir: PathBuf,
    /// The manifest.
    pub manifest: Manifest,
    /// Views, in manifest order, opened lazily and closed by [`Dataset::release`].
    shards: Vec<Mutex<Slot>>,
    /// Set for a remote dataset read through the cache.
    remote: Option<Arc<RemoteDataset>>,
}

/// Largest manifest read.
const MAX_MANIFEST: u64 = 256 << 20;

impl Dataset {
    /// Opens a dataset at `location`: a local folder or manifest path (read in place), or an
    /// `http(s)://`, `s3://` or `file://` URL of a dataset folder or its manifest. Remote shards
    /// are fetched into the cache described by `cache` (defaults when `None`).
    pub fn open_location(location: &str, cache: Option<&CacheOptions>) -> Result<Self, ReadError> {
        match Location::parse(location)? {
            Location::Local(p) => Self::open(&p),
            Location::Remote(url) => {
                let remote = RemoteDataset::open(url, cache.cloned().unwrap_or_default())?;
                let manifest = remote.manifest().clone();
                Ok(Self {
                    dir: remote.cache_dir().to_path_buf(),
                    shards: manifest.shards.iter().map(|_| Default::default()).collect(),
                    manifest,
                    remote: Some(Arc::new(remote)),
                })
            }
        }
    }

    /// The remote dataset behind this one, if it is remote.
    pub fn remote(&self) -> Option<&Arc<RemoteDataset>> {
        self.remote.as_ref()
    }

    /// Opens a local dataset directory or a `manifest.json` path. Shards are opened on first use.
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
            remote: None,
        })
    }

    /// Sample counts per shard, from the manifest.
    pub fn counts(&self) -> Vec<u64> {
        self.manifest.shards.iter().map(|s| s.samples).collect()
    }

    /// The view of shard `i`, opening and validating it on first use.
    pub fn shard(&self, i: usize) -> Result<Arc<ShardView>, ReadError> {
        let cell = self.shards.get(i).ok_or(ReadError::NoSuchShard(i))?;
        // One opener per shard; others wait for its view instead of opening it twice.
        let mut slot = cell.lock().unwrap_or_else(|p| p.into_inner());
        if let Slot::Closed = *slot {
            *slot = match self.open_shard(i) {
                Ok(v) => Slot::Open(Arc::new(v)),
                Err(e) => Slot::Failed(e.to_string()),
            };
        }
        match &*slot {
            Slot::Open(v) => Ok(v.clone()),
            Slot::Failed(message) => Err(ReadError::CorruptShard {
                shard: self.manifest.shards[i].file.clone(),
                message: message.clone(),
            }),
            Slot::Closed => unreachable!("opened above"),
        }
    }

    /// Closes shard `i` once its last sample of the epoch is read: the mapping goes when the
    /// last batch using it is assembled, and a cached shard becomes evictable again.
    pub fn release(&self, i: usize) {
        if let Some(cell) = self.shards.get(i) {
            let mut slot = cell.lock().unwrap_or_else(|p| p.into_inner());
            if let Slot::Open(_) = *slot {
                *slot = Slot::Closed;
            }
        }
    }

    fn open_shard(&self, i: usize) -> Result<ShardView, ReadError> {
        let entry = &self.manifest.shards[i];
        if let Some(remote) = &self.remote {
            // The cache holds a whole, checked, decompressed copy; the lease keeps it from being
            // evicted while mapped.
            let lease = remote.acquire(i)?;
            let map = map_file(lease.path())?;
            return self.view_of(i, ShardBytes::Cached(map, lease));
        }
        let path = self.dir.join(&entry.file);
        let bytes = if entry.compression.is_some() {
            let io = |e| ReadError::Io {
                path: path.clone(),
                cause: e,
            };
            let limit = entry.uncompressed_bytes.unwrap_or(0);
            let mut out = Vec::new();
            zstd::Decoder::new(std::fs::File::open(&path).map_err(io)?)
                .map_err(io)?
                .take(limit + 1)
                .read_to_end(&mut out)
                .map_err(io)?;
            ShardBytes::Owned(out)
        } else {
            ShardBytes::Mapped(map_file(&path)?)
        };
        self.view_of(i, bytes)
    }

    fn view_of(&self, i: usize, bytes: ShardBytes) -> Result<ShardView, ReadError> {
        let entry = &self.manifest.shards[i];
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

/// Maps a published shard file (a dataset's or the cache's) read-only.
fn map_file(path: &Path) -> Result<Mmap, ReadError> {
    let io = |e| ReadError::Io {
        path: path.to_path_buf(),
        cause: e,
    };
    let file = std::fs::File::open(path).map_err(io)?;
    // SAFETY: published shards, in a dataset or in the cache, are renamed into place and never
    // modified in place; cached ones are held by a lease while mapped (see mmap.rs).
    #[allow(unsafe_code)]
    let map = unsafe { map_readonly(&file) }.map_err(io)?;
    Ok(map)
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
            .get(shardtool_wds::LABEL_FIELD)
            .and_then(shardtool_wds::parse_cls)
            .ok_or_else(|| format!("sample {:?} has no valid .cls label", s.key))?;
        let image = shardtool_wds::image_field(s.fields.iter().map(|(f, _)| f.as_str()));
        let (field, data) = s
            .fields
            .iter()
            .find(|(f, _)| Some(f.as_str()) == image)
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
