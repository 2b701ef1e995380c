//! Shard writing: rolls shards at a size or count, compresses, checksums and publishes each one
//! atomically, and collects the manifest entries.

use crate::plan::{Compression, PackPlan, ShardFormatChoice};
use crate::PackError;
use shardtool_core::AtomicFile;
use shardtool_core::{Checksum, HashingWriter};
use shardtool_manifest::{self as manifest, ShardEntry, ShardFormat};
use shardtool_packed::{Mode, PackedWriter};
use shardtool_wds::TarWriter;
use std::collections::BTreeMap;
use std::io::{self, Write};
use std::path::PathBuf;

/// The stored file, possibly behind a zstd encoder.
enum Stage {
    Plain(HashingWriter<AtomicFile>),
    Zstd(zstd::Encoder<'static, HashingWriter<AtomicFile>>),
}

impl Write for Stage {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stage::Plain(w) => w.write(buf),
            Stage::Zstd(w) => w.write(buf),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        match self {
            Stage::Plain(w) => w.flush(),
            Stage::Zstd(w) => w.flush(),
        }
    }
}

/// One shard file being written: uncompressed bytes are counted and hashed on the way in, stored
/// bytes on the way out.
struct ShardFile {
    outer: HashingWriter<Stage>,
}

struct Finished {
    bytes: u64,
    checksum: Checksum,
    uncompressed: Option<(u64, Checksum)>,
}

impl ShardFile {
    fn create(path: &std::path::Path, compression: Compression) -> io::Result<Self> {
        let file = HashingWriter::new(AtomicFile::create(path)?);
        let stage = match compression {
            Compression::None => Stage::Plain(file),
            Compression::Zstd(level) => {
                // A frame checksum: a flipped byte is a decompression error, not wrong samples.
                let mut e = zstd::Encoder::new(file, level)?;
                e.include_checksum(true)?;
                Stage::Zstd(e)
            }
        };
        Ok(Self {
            outer: HashingWriter::new(stage),
        })
    }

    /// Writes the rest of the file, not yet under its name (the temporary file is removed if
    /// it is dropped uncommitted).
    fn finish(self) -> io::Result<(Finished, AtomicFile)> {
        let (stage, ubytes, usum) = self.outer.into_parts();
        let (file, compressed) = match stage {
            Stage::Plain(f) => (f, false),
            Stage::Zstd(enc) => (enc.finish()?, true),
        };
        let (atomic, bytes, checksum) = file.into_parts();
        let finished = Finished {
            bytes,
            checksum,
            uncompressed: compressed.then_some((ubytes, usum)),
        };
        Ok((finished, atomic))
    }
}

enum Open {
    Wds {
        // Boxed: the zstd encoder makes this variant large.
        tar: Box<TarWriter<ShardFile>>,
        samples: u64,
    },
    Packed {
        writer: PackedWriter,
    },
}

/// Records per packed shard at most: with ~300 bytes of JSON metadata each, the header stays well
/// under the 100 MB safetensors header limit however small the images are.
pub(crate) const MAX_PACKED_RECORDS: usize = 200_000;

/// What a record carries into a shard.
#[derive(Clone, Copy)]
pub(crate) enum Payload<'a> {
    /// Encoded image bytes and their field (`jpg`, `png`).
    Encoded(&'a [u8], &'static str),
    /// RGB8 pixels.
    Pixels {
        /// Height.
        height: u32,
        /// Width.
        width: u32,
        /// `height * width * 3` bytes.
        pixels: &'a [u8],
    },
}

/// Writes the records of a pack into rolling shards.
pub(crate) struct ShardSink<'p> {
    plan: &'p PackPlan,
    open: Option<Open>,
    next_index: usize,
    pub(crate) entries: Vec<ShardEntry>,
    pub(crate) bytes_out: u64,
    /// Samples written.
    pub(crate) samples: u64,
    /// How many samples carry each field.
    field_counts: BTreeMap<String, u64>,
    /// Whether any sample's `.json` is the input's, carried byte for byte.
    pub(crate) input_json: bool,
    /// Whether a full shard is published by `add` (the shard size or count reached); off, only
    /// `roll` publishes (a part, which checks each shard first).
    pub(crate) rolls_itself: bool,
    /// Called once, just before the first shard takes its name, with that shard's temporary
    /// file: `--overwrite` clears the earlier dataset only then.
    pub(crate) before_first: Option<BeforeFirst<'p>>,
}

/// What a sink does before its first shard is published (given that shard's temporary file).
pub(crate) type BeforeFirst<'p> = Box<dyn FnOnce(&std::path::Path) -> Result<(), PackError> + 'p>;

impl<'p> ShardSink<'p> {
    pub(crate) fn new(plan: &'p PackPlan) -> Self {
        Self {
            plan,
            open: None,
            next_index: 0,
            entries: Vec::new(),
            bytes_out: 0,
            samples: 0,
            field_counts: BTreeMap::new(),
            input_json: false,
            rolls_itself: true,
            before_first: None,
        }
    }

    fn count(&mut self, field: &str) {
        match self.field_counts.get_mut(field) {
            Some(n) => *n += 1,
            None => {
                self.field_counts.insert(field.to_string(), 1);
            }
        }
    }

    /// The fields every sample carries, and those only some carry, each sorted.
    pub(crate) fn fields(&self) -> (Vec<String>, Vec<String>) {
        split_fields(&self.field_counts, self.samples)
    }

    /// How many samples written so far carry each field.
    pub(crate) fn field_counts(&self) -> &BTreeMap<String, u64> {
        &self.field_counts
    }

    /// Publishes the open shard, if any, and names the next one shard `index`.
    pub(crate) fn start_shard(&mut self, index: usize) -> Result<(), PackError> {
        // A sink that does not roll itself publishes only through its owner's checked roll.
        debug_assert!(self.rolls_itself || self.open.is_none());
        self.roll()?;
        self.next_index = index;
        Ok(())
    }

    pub(crate) fn file_name(&self, index: usize) -> String {
        let format = match self.plan.format {
            ShardFormatChoice::Wds => ShardFormat::Wds,
            ShardFormatChoice::Packed => ShardFormat::Packed,
        };
        let compression = match self.plan.compression {
            Compression::None => None,
            Compression::Zstd(_) => Some(manifest::Compression::Zstd),
        };
        let suffix = manifest::ShardKind::new(format, compression).suffix();
        format!("{}-{index:06}{suffix}", self.plan.prefix)
    }

    fn current_path(&self) -> PathBuf {
        self.plan.output.join(self.file_name(self.next_index))
    }

    /// Appends one sample, rolling to a new shard when the current one is full. `Ok(Some(why))`
    /// refuses the sample (it fails as an input would): its metadata alone would pass a packed
    /// shard's header cap.
    pub(crate) fn add(
        &mut self,
        key: &str,
        label: i64,
        payload: Payload<'_>,
        meta: &serde_json::Value,
        carried: &[(String, Vec<u8>)],
    ) -> Result<Option<String>, PackError> {
        let path = self.current_path();
        let io_err = |e| PackError::io(&path, e);
        if self.open.is_none() {
            self.open = Some(match self.plan.format {
                ShardFormatChoice::Wds => Open::Wds {
                    tar: Box::new(TarWriter::new(
                        ShardFile::create(&path, self.plan.compression).map_err(io_err)?,
                    )),
                    samples: 0,
                },
                ShardFormatChoice::Packed => Open::Packed {
                    writer: PackedWriter::new(
                        if self.plan.transform.resize.fixed_size().is_some() {
                            Mode::Fixed
                        } else {
                            Mode::Variable
                        },
                    ),
                },
            });
        }
        // The fields the sample is stored with, counted for the manifest.
        let (size, samples, names): (u64, u64, Vec<&str>) = match (self.open.as_mut(), payload) {
            (Some(Open::Wds { tar, samples }), Payload::Encoded(bytes, field)) => {
                let own_json;
                let cls = (label >= 0).then(|| label.to_string());
                let mut members: Vec<(&str, &[u8])> = Vec::with_capacity(carried.len() + 3);
                if let Some(cls) = &cls {
                    members.push((shardtool_wds::LABEL_FIELD, cls.as_bytes()));
                }
                members.push((field, bytes));
                // An input's own `.json` is carried as it is; otherwise ours describes the sample.
                if carried.iter().all(|(f, _)| f != "json") {
                    own_json = serde_json::to_vec(meta).unwrap_or_default();
                    members.push(("json", &own_json));
                }
                members.extend(
                    carried
                        .iter()
                        .filter(|(f, _)| f != shardtool_wds::LABEL_FIELD && f != field)
                        .map(|(f, d)| (f.as_str(), &d[..])),
                );
                // Fields in sorted order, as WebDataset writers emit them.
                members.sort_by(|a, b| a.0.cmp(b.0));
                for (f, d) in &members {
                    tar.append(&format!("{key}.{f}"), d).map_err(io_err)?;
                }
                *samples += 1;
                // Count the end-of-archive blocks `finish` will add.
                (
                    tar.written() + 2 * shardtool_wds::BLOCK as u64,
                    *samples,
                    members.iter().map(|(f, _)| *f).collect(),
                )
            }
            (
                Some(Open::Packed { writer }),
                Payload::Pixels {
                    height,
                    width,
                    pixels,
                },
            ) => {
                let mut record = meta.clone();
                if !carried.is_empty() {
                    if let Some(m) = record.as_object_mut() {
                        let fields = carried
                            .iter()
                            .map(|(f, d)| (f.clone(), shardtool_packed::field_value(d)))
                            .collect();
                        m.insert("fields".into(), serde_json::Value::Object(fields));
                    }
                }
                match writer.add(key, label, height, width, pixels, record) {
                    Ok(()) => {}
                    Err(shardtool_packed::Error::HeaderTooLarge { .. }) => {
                        let held = writer.len();
                        return self.header_full(held, key, label, payload, meta, carried);
                    }
                    Err(e) => {
                        let memory = match &e {
                            shardtool_packed::Error::Io(c)
                                if c.kind() == std::io::ErrorKind::OutOfMemory =>
                            {
                                Some(c)
                            }
                            _ => None,
                        };
                        return Err(PackError::Shard {
                            path,
                            message: match memory {
                                Some(c) => format!(
                                    "{c} (a packed shard is held in memory until it is written: \
                                     lower --shard-size)"
                                ),
                                None => e.to_string(),
                            },
                        });
                    }
                }
                let names = ["key", "label", "pixels"]
                    .into_iter()
                    .chain(carried.iter().map(|(f, _)| f.as_str()))
                    .collect();
                // The safetensors header (per-record metadata) must stay under its 100 MB cap.
                if writer.len() >= MAX_PACKED_RECORDS {
                    (u64::MAX, writer.len() as u64, names)
                } else {
                    (writer.estimated_size(), writer.len() as u64, names)
                }
            }
            _ => {
                return Err(PackError::Shard {
                    path,
                    message: "record payload does not match the shard format".into(),
                })
            }
        };
        self.samples += 1;
        for f in names {
            self.count(f);
        }
        if carried.iter().any(|(f, _)| f == "json") {
            self.input_json = true;
        }
        // A shard passes its byte budget by less than one sample.
        let full =
            size >= self.plan.shard_bytes || self.plan.shard_samples.is_some_and(|n| samples >= n);
        if full && self.rolls_itself {
            self.roll()?;
        }
        Ok(None)
    }

    /// A packed shard holding `held` records has no header room for the next: a sink that rolls
    /// itself starts a new shard for it; a part's shard holds fixed positions, so the pack stops
    /// saying how to plan it. A record too large for any header is refused.
    fn header_full(
        &mut self,
        held: usize,
        key: &str,
        label: i64,
        payload: Payload<'_>,
        meta: &serde_json::Value,
        carried: &[(String, Vec<u8>)],
    ) -> Result<Option<String>, PackError> {
        let max_mb = shardtool_packed::MAX_HEADER_LEN / 1_000_000;
        if held == 0 {
            // The shard opened for it holds nothing: none is open (an empty one cannot be
            // written, and the pack's last roll would fail on it).
            self.open = None;
            return Ok(Some(format!(
                "its metadata and carried fields would take more than the {max_mb} MB a packed \
                 shard's header holds (--format wds stores fields as files)"
            )));
        }
        if self.rolls_itself {
            self.roll()?;
            return self.add(key, label, payload, meta, carried);
        }
        Err(PackError::Shard {
            path: self.current_path(),
            message: format!(
                "the shard's header would pass the {max_mb} MB a packed shard's header holds \
                 after {held} samples (their metadata and carried fields): plan again with \
                 --shard-samples of at most {held}, or with --format wds"
            ),
        })
    }

    /// Finishes and publishes the open shard, if any.
    pub(crate) fn roll(&mut self) -> Result<(), PackError> {
        self.roll_checked(&|| Ok(true)).map(|_| ())
    }

    /// Finishes the open shard, if any, and publishes it if `check`, asked once its file is
    /// written and just before it takes its name, says so; dropped otherwise. `check` is asked
    /// when no shard is open too; its answer is returned.
    pub(crate) fn roll_checked(
        &mut self,
        check: &dyn Fn() -> Result<bool, PackError>,
    ) -> Result<bool, PackError> {
        let Some(open) = self.open.take() else {
            return check();
        };
        let name = self.file_name(self.next_index);
        let path = self.plan.output.join(&name);
        let io_err = |e| PackError::io(&path, e);
        let ((finished, atomic), samples, format) = match open {
            Open::Wds { tar, samples } => {
                let file = tar.finish().map_err(io_err)?;
                (file.finish().map_err(io_err)?, samples, ShardFormat::Wds)
            }
            Open::Packed { writer } => {
                let samples = writer.len() as u64;
                let mut file = ShardFile::create(&path, self.plan.compression).map_err(io_err)?;
                writer.finish(&mut file).map_err(|e| match e {
                    // A full disk or a file size limit: the cause, as for a tar shard.
                    shardtool_packed::Error::Io(cause) => io_err(cause),
                    e => PackError::Shard {
                        path: path.clone(),
                        message: e.to_string(),
                    },
                })?;
                (file.finish().map_err(io_err)?, samples, ShardFormat::Packed)
            }
        };
        if !check()? {
            self.input_json = false;
            return Ok(false);
        }
        if let Some(before) = self.before_first.take() {
            before(atomic.temp_path())?;
        }
        atomic.commit().map_err(io_err)?;
        self.bytes_out += finished.bytes;
        self.entries.push(ShardEntry {
            file: name,
            format,
            compression: finished.uncompressed.map(|_| manifest::Compression::Zstd),
            samples,
            bytes: finished.bytes,
            checksum: finished.checksum.to_string(),
            uncompressed_bytes: finished.uncompressed.map(|(b, _)| b),
            uncompressed_checksum: finished.uncompressed.map(|(_, c)| c.to_string()),
        });
        self.next_index += 1;
        Ok(true)
    }
}

/// The fields all `samples` carry, and those only some carry, each sorted.
pub(crate) fn split_fields(
    counts: &BTreeMap<String, u64>,
    samples: u64,
) -> (Vec<String>, Vec<String>) {
    let (all, some): (Vec<_>, Vec<_>) = counts.iter().partition(|(_, &n)| n == samples);
    (
        all.into_iter().map(|(f, _)| f.clone()).collect(),
        some.into_iter().map(|(f, _)| f.clone()).collect(),
    )
}

impl Write for ShardFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.outer.write(buf)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.outer.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::InputSource;

    /// A sink that does not roll itself publishes nothing until `roll`, even past the packed
    /// record cap where it would roll (a part checks each shard before it is published).
    #[test]
    fn a_sink_that_does_not_roll_itself_publishes_only_on_roll() {
        let dir = tempfile::tempdir().unwrap();
        let mut plan = PackPlan::new(InputSource::Folder(dir.path().into()), dir.path().into());
        plan.format = ShardFormatChoice::Packed;
        plan.shard_samples = Some(MAX_PACKED_RECORDS as u64);
        let mut sink = ShardSink::new(&plan);
        sink.rolls_itself = false;
        let meta = serde_json::json!({});
        for i in 0..MAX_PACKED_RECORDS {
            let one = Payload::Pixels {
                height: 1,
                width: 1,
                pixels: &[1, 2, 3],
            };
            sink.add(&format!("{i:07}"), 0, one, &meta, &[]).unwrap();
        }
        assert!(sink.entries.is_empty(), "published inside add");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
        sink.roll().unwrap();
        assert_eq!(sink.entries.len(), 1);
        assert_eq!(sink.entries[0].samples, MAX_PACKED_RECORDS as u64);
    }
}
