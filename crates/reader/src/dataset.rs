//! A dataset opened for reading: the manifest and one validated, zero-copy view per shard,
//! from a local folder (read in place) or a remote one (through the shard cache).

use crate::ReadError;
#[cfg(feature = "remote")]
use shardtool_cache::{CacheOptions, Lease, RemoteDataset, RemoteUrl};
use shardtool_core::{open_shard, OpenShard};
use shardtool_manifest::{Manifest, ShardEntry, ShardFormat};
use shardtool_packed::PackedShard;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// The bytes of one shard, opened by [`shardtool_core::open_shard`]: a local shard mapped (or
/// decompressed), or a shard in the cache, held there (not evictable) while the lease lives.
pub enum ShardBytes {
    /// A shard of a local dataset.
    Local(shardtool_core::ShardBytes),
    /// A cached copy of a remote shard (always plain: the cache stores it decompressed).
    #[cfg(feature = "remote")]
    Cached(shardtool_core::ShardBytes, Lease),
}

impl AsRef<[u8]> for ShardBytes {
    fn as_ref(&self) -> &[u8] {
        match self {
            ShardBytes::Local(b) => b,
            #[cfg(feature = "remote")]
            ShardBytes::Cached(b, _) => b,
        }
    }
}

/// One sample of a tar shard, by byte ranges into the shard.
#[derive(Debug, Clone)]
pub struct TarRecord {
    /// Sample key.
    pub key: String,
    /// Label from `.cls`; -1 for a sample without one (an unlabelled dataset).
    pub label: i64,
    /// The image field (`jpg`, `png`, …).
    pub field: String,
    /// Where the image bytes are.
    pub image: Range<usize>,
    /// Where the data of each carried field the loader asked for lies (in the order asked),
    /// `None` where the sample lacks it; empty when no field was asked for.
    pub fields: Vec<Option<Range<usize>>>,
    /// Why the sample cannot be read though its shard can (a `.cls` that is no integer): the
    /// record is corrupt, left out alone under [`crate::CorruptPolicy::Skip`].
    pub damage: Option<String>,
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
    /// Failed to open: every later caller gets the same error. `corrupt` tells a shard whose
    /// bytes are wrong from one that could not be had (I/O, a full cache, a failed fetch).
    Failed {
        corrupt: bool,
        message: String,
        /// Whether the shard cache failed it.
        cache: bool,
    },
}

/// An opened dataset.
pub struct Dataset {
    /// Its directory (for a remote dataset: its folder in the cache).
    pub dir: PathBuf,
    /// The manifest.
    pub manifest: Manifest,
    /// Views, in manifest order, opened lazily and closed by [`Dataset::release`].
    shards: Vec<Mutex<Slot>>,
    /// The carried fields tar views index (see [`Dataset::carry`]).
    fields: Vec<String>,
    /// Set for a remote dataset read through the cache.
    #[cfg(feature = "remote")]
    remote: Option<Arc<RemoteDataset>>,
    /// A local dataset's manifest file and which file it was when read: a shard opened later
    /// is the manifest's only while the manifest is still that file (`pack --overwrite` removes
    /// it before it replaces a shard).
    manifest_file: Option<(PathBuf, FileId)>,
}

/// Which file a path named, by size and modification time: a rewrite makes a new file with a
/// new time. Not by inode, which some FUSE mounts of object stores do not keep stable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct FileId(u64, i64, i64);

impl FileId {
    fn of(path: &Path) -> Option<Self> {
        use std::os::unix::fs::MetadataExt;
        let m = std::fs::metadata(path).ok()?;
        Some(Self(m.size(), m.mtime(), m.mtime_nsec()))
    }
}

/// Largest manifest read.
const MAX_MANIFEST: u64 = 256 << 20;

impl Dataset {
    /// Opens a remote dataset folder (or its manifest) whose shards are fetched into the cache
    /// described by `cache`.
    #[cfg(feature = "remote")]
    pub fn open_remote(url: RemoteUrl, cache: CacheOptions) -> Result<Self, ReadError> {
        let remote = RemoteDataset::open(url, cache)?;
        let manifest = remote.manifest().clone();
        Ok(Self {
            dir: remote.cache_dir().to_path_buf(),
            shards: manifest.shards.iter().map(|_| Default::default()).collect(),
            manifest,
            fields: Vec::new(),
            remote: Some(Arc::new(remote)),
            manifest_file: None,
        })
    }

    /// The remote dataset behind this one, if it is remote.
    #[cfg(feature = "remote")]
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
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
        if let Some(name) = name.filter(|n| shardtool_manifest::ShardKind::from_name(n).is_some()) {
            if !path.is_dir() {
                return Err(ReadError::Manifest {
                    path: path.to_path_buf(),
                    message: format!(
                        "{name} is a shard: the reader takes a dataset folder or its \
                         manifest.json (inspect and preview take single shards)"
                    ),
                });
            }
        }
        let (dir, manifest_path) = if path.is_dir() {
            (path.to_path_buf(), path.join(shardtool_manifest::FILE_NAME))
        } else {
            (
                path.parent().unwrap_or(Path::new(".")).to_path_buf(),
                path.to_path_buf(),
            )
        };
        let before = FileId::of(&manifest_path);
        let bytes =
            shardtool_core::read_regular_within(&manifest_path, MAX_MANIFEST).map_err(|e| {
                match e.kind() {
                    std::io::ErrorKind::FileTooLarge => ReadError::Manifest {
                        path: manifest_path.clone(),
                        message: format!("the file is {e} for a manifest"),
                    },
                    // A folder of WebDataset shards, or a pack that did not finish.
                    std::io::ErrorKind::NotFound if path.is_dir() => ReadError::Io {
                        path: manifest_path.clone(),
                        cause: std::io::Error::new(
                            e.kind(),
                            "the folder has no manifest.json: an unfinished pack, or not a \
                             shardtool dataset (shardtool pack makes one from WebDataset \
                             shards, Parquet files or images)",
                        ),
                    },
                    _ => ReadError::Io {
                        path: manifest_path.clone(),
                        cause: e,
                    },
                }
            })?;
        let manifest =
            Manifest::from_slice(&bytes, MAX_MANIFEST).map_err(|e| ReadError::Manifest {
                path: manifest_path.clone(),
                message: e.to_string(),
            })?;
        // Replaced while read: the bytes may be either file's.
        let id = before.filter(|&b| FileId::of(&manifest_path) == Some(b));
        if id.is_none() {
            return Err(ReadError::Manifest {
                path: manifest_path,
                message: "it was replaced while it was read (a pack writing this folder?): \
                          open the dataset again"
                    .into(),
            });
        }
        let shards = manifest.shards.iter().map(|_| Default::default()).collect();
        Ok(Self {
            dir,
            manifest,
            shards,
            fields: Vec::new(),
            #[cfg(feature = "remote")]
            remote: None,
            manifest_file: id.map(|id| (manifest_path, id)),
        })
    }

    /// Indexes carried `fields` (already checked against the manifest) in the tar shards opened
    /// from now on, so their data is found without reading headers again ([`TarRecord::fields`]).
    pub(crate) fn carry(&mut self, fields: Vec<String>) {
        self.fields = fields;
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
                Err(ReadError::CorruptShard { message, .. }) => Slot::Failed {
                    corrupt: true,
                    message,
                    cache: false,
                },
                // Said again below with the shard's name: kept without it.
                Err(ReadError::Unavailable { message, cache, .. }) => Slot::Failed {
                    corrupt: false,
                    message,
                    cache,
                },
                Err(e) => Slot::Failed {
                    corrupt: false,
                    cache: matches!(e, ReadError::Cache(_)),
                    message: e.to_string(),
                },
            };
        }
        match &*slot {
            Slot::Open(v) => Ok(v.clone()),
            Slot::Failed {
                corrupt,
                message,
                cache,
            } => {
                let shard = self.manifest.shards[i].file.clone();
                let message = message.clone();
                Err(if *corrupt {
                    ReadError::CorruptShard { shard, message }
                } else {
                    ReadError::Unavailable {
                        shard,
                        message,
                        cache: *cache,
                    }
                })
            }
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
        #[cfg(feature = "remote")]
        if let Some(remote) = &self.remote {
            // The cache holds a whole, checked, decompressed copy; the lease keeps it from being
            // evicted while mapped.
            let lease = remote.acquire(i)?;
            let how = OpenShard {
                zstd: false,
                max_bytes: shard_size(entry),
                map: true,
            };
            let bytes = open_shard(lease.path(), how).map_err(|e| self.corrupt(i, e))?;
            return self.view_of(i, ShardBytes::Cached(bytes, lease));
        }
        let how = OpenShard {
            zstd: entry.compression.is_some(),
            max_bytes: shard_size(entry),
            map: true,
        };
        let opened = open_shard(&self.dir.join(&entry.file), how);
        // Opened while the manifest was still the one read: the shard is its own (a writer
        // removes the manifest before it replaces any shard). Checked on a failure too: a
        // shard gone or of another size is then the change, not damage.
        if let Some((path, id)) = &self.manifest_file {
            if FileId::of(path).as_ref() != Some(id) {
                return Err(ReadError::Unavailable {
                    shard: entry.file.clone(),
                    message: format!(
                        "the dataset changed under this reader: {} was replaced or removed \
                         since it was read (a pack overwriting this folder?), so its shards may \
                         be another dataset's; start the epoch again",
                        path.display()
                    ),
                    cache: false,
                });
            }
        }
        let bytes = opened.map_err(|e| self.corrupt(i, e))?;
        self.view_of(i, ShardBytes::Local(bytes))
    }

    fn corrupt(&self, i: usize, e: shardtool_core::OpenShardError) -> ReadError {
        match e {
            shardtool_core::OpenShardError::Io { path, cause } => ReadError::Io { path, cause },
            e => ReadError::CorruptShard {
                shard: self.manifest.shards[i].file.clone(),
                message: e.to_string(),
            },
        }
    }

    fn view_of(&self, i: usize, bytes: ShardBytes) -> Result<ShardView, ReadError> {
        let entry = &self.manifest.shards[i];
        let corrupt = |message: String| ReadError::CorruptShard {
            shard: entry.file.clone(),
            message,
        };
        let view = match entry.format {
            ShardFormat::Packed => {
                let shard = PackedShard::open(bytes).map_err(|e| corrupt(e.to_string()))?;
                // One pass over the records: labels the manifest names, keys verify takes.
                for r in shard.records() {
                    if !self.label_ok(r.label, true) {
                        return Err(corrupt(self.bad_label(r.key, r.label)));
                    }
                    shardtool_core::validate_key(r.key)
                        .map_err(|e| corrupt(format!("record key {:?} is refused: {e}", r.key)))?;
                }
                ShardView::Packed(shard)
            }
            ShardFormat::Wds => {
                let records = index_tar(bytes.as_ref(), &self.fields).map_err(corrupt)?;
                // Every sample has a `.cls` where the manifest says so (`-1` means none).
                let cls = (self.manifest.fields.iter()).any(|f| f == shardtool_wds::LABEL_FIELD);
                let bad = |r: &&TarRecord| r.damage.is_none() && !self.label_ok(r.label, !cls);
                if let Some(r) = records.iter().find(bad) {
                    return Err(corrupt(match r.label {
                        -1 if cls => format!(
                            "sample {:?} has no label (its .cls is missing or -1), and the \
                             manifest says every sample has a .cls",
                            r.key
                        ),
                        l => self.bad_label(&r.key, l),
                    }));
                }
                // A field asked for that the manifest says every sample has is there; only an
                // optional field's may be missing (None).
                for (i, f) in self.fields.iter().enumerate() {
                    if !self.manifest.fields.contains(f) {
                        continue;
                    }
                    // (A field named as a sample's image is that image, not carried.)
                    let lacks = |r: &&TarRecord| r.fields[i].is_none() && r.field != *f;
                    if let Some(r) = records.iter().find(lacks) {
                        return Err(corrupt(format!(
                            "sample {:?} has no .{f}, and the manifest says every sample has one",
                            r.key
                        )));
                    }
                }
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

impl Dataset {
    /// The most pixels a record may decode to: the limit the dataset was packed under when
    /// larger than the default (`--max-pixels`), within a ceiling.
    pub(crate) fn max_pixels(&self) -> u64 {
        let packed = self
            .manifest
            .pack
            .get("max_pixels")
            .and_then(|v| v.as_u64());
        shardtool_core::Limits::dataset_max_pixels(packed)
    }

    /// Whether a sample's `label` may be handed out: a class index of the manifest's classes
    /// (none when it names none: an unlabelled dataset), or -1 (no label) where `unlabelled`
    /// samples may be. Training code indexes with labels: one past the classes is a crash on
    /// a GPU, or worse.
    fn label_ok(&self, label: i64, unlabelled: bool) -> bool {
        let n = self.manifest.classes.len();
        (label == -1 && unlabelled) || usize::try_from(label).is_ok_and(|l| l < n)
    }

    fn bad_label(&self, key: &str, label: i64) -> String {
        format!(
            "sample {key:?} has label {label}, not one of the manifest's {} classes (shardtool \
             verify lists every such sample)",
            self.manifest.classes.len()
        )
    }
}

/// The size of shard `entry` once decompressed, as the manifest states it.
fn shard_size(entry: &ShardEntry) -> u64 {
    entry.uncompressed_bytes.unwrap_or(entry.bytes)
}

/// Indexes a tar shard once: each sample's key, label (-1 without a `.cls`), image byte range
/// and the byte ranges of the carried `fields`.
fn index_tar(bytes: &[u8], fields: &[String]) -> Result<Vec<TarRecord>, String> {
    let (samples, err) = shardtool_wds::group_samples(bytes);
    if let Some(e) = err {
        return Err(e.to_string());
    }
    let base = bytes.as_ptr() as usize;
    // Every data slice lies inside `bytes`.
    let range = |data: &[u8]| {
        let start = data.as_ptr() as usize - base;
        start..start + data.len()
    };
    let mut out = Vec::with_capacity(samples.len());
    for s in samples {
        // Keys reach training code, which may name files by them (`../x`, `/tmp/y`).
        shardtool_core::validate_key(&s.key)
            .map_err(|e| format!("sample key {:?} is refused: {e}", s.key))?;
        let (label, damage) = match s
            .get(shardtool_wds::LABEL_FIELD)
            .map(shardtool_wds::parse_cls)
        {
            None => (-1, None),
            Some(Some(label)) => (label, None),
            Some(None) => (-1, Some("its .cls is not an integer".to_string())),
        };
        let image = shardtool_wds::image_field(s.fields.iter().map(|(f, _)| f.as_str()));
        let (field, data) = s
            .fields
            .iter()
            .find(|(f, _)| Some(f.as_str()) == image)
            .ok_or_else(|| format!("sample {:?} has no image field", s.key))?;
        out.push(TarRecord {
            key: s.key.clone(),
            label,
            field: field.clone(),
            image: range(data),
            // A field named as the image is carried only beside a better-ranked image.
            fields: fields
                .iter()
                .map(|f| s.get(f).filter(|_| Some(f.as_str()) != image).map(range))
                .collect(),
            damage,
        });
    }
    Ok(out)
}
