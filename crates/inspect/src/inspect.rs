//! `inspect`: what a dataset or a single shard holds — sample and shard counts, the class
//! histogram, the distribution of image sizes, bytes per sample and per field (carried fields
//! included), the fields the manifest declares, and the pack options — computed from the shards
//! themselves (each read once, in parallel).

use crate::{read_shard, sniff, tar_meta_and_label};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use shardtool_manifest::{ShardEntry, ShardFormat, ShardKind};
use shardtool_packed::{PackedShard, RECORD_FIELDS};
use shardtool_verify::{
    map_in_turn, map_on_threads, open_target, HoldShards, Problem, ProblemKind, Target,
    VerifyError, VerifyOptions,
};
use shardtool_wds::group_samples;
use std::collections::{BTreeMap, HashMap};
use std::path::Path;

/// How many of the most common image sizes to list.
const MOST_COMMON: usize = 5;

/// Samples of one label.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClassCount {
    /// The label.
    pub label: i64,
    /// Its class name (from the manifest, or from sample metadata for a lone shard).
    pub name: Option<String>,
    /// Samples with this label.
    pub count: u64,
}

/// Minimum, median and maximum of a quantity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Spread {
    /// Smallest value.
    pub min: u32,
    /// Median (the lower one for an even count).
    pub median: u32,
    /// Largest value.
    pub max: u32,
}

/// How many images have one size.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SizeCount {
    /// Width in pixels.
    pub width: u32,
    /// Height in pixels.
    pub height: u32,
    /// Images of this size.
    pub count: u64,
}

/// The distribution of image sizes.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct SizeStats {
    /// Images whose size is known.
    pub images: u64,
    /// Widths.
    pub width: Spread,
    /// Heights.
    pub height: Spread,
    /// The most common sizes, most frequent first.
    pub most_common: Vec<SizeCount>,
}

/// Size of one field over all samples.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct FieldStats {
    /// Samples carrying the field.
    pub count: u64,
    /// Bytes of the field in all of them.
    pub bytes: u64,
    /// Mean bytes per sample carrying it.
    pub mean_bytes: f64,
}

/// What `inspect` found.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InspectReport {
    /// The path inspected.
    pub target: String,
    /// `dataset` or `shard`.
    pub kind: String,
    /// The manifest, for a dataset.
    pub manifest: Option<String>,
    /// The tool that packed it (from the manifest).
    pub tool: Option<String>,
    /// Shard files read.
    pub shards: u64,
    /// Shards per format (`wds`, `packed`, `wds+zstd`, `packed+zstd`).
    pub formats: BTreeMap<String, u64>,
    /// Samples found.
    pub samples: u64,
    /// Samples the manifest lists (for a dataset).
    pub samples_in_manifest: Option<u64>,
    /// Bytes of the shard files as stored.
    pub stored_bytes: u64,
    /// Bytes of the shards after decompression (equal to `stored_bytes` when uncompressed).
    pub uncompressed_bytes: u64,
    /// `stored_bytes / samples`.
    pub bytes_per_sample: f64,
    /// Per-field sizes as found in the shards (`jpg`, `cls`, `json`, `txt` … for tar shards;
    /// `key`, `label`, `pixels` and the carried fields for packed ones).
    pub fields: BTreeMap<String, FieldStats>,
    /// The fields every sample carries, as the manifest declares them (for a dataset).
    pub declared_fields: Option<Vec<String>>,
    /// The fields only some samples carry, as the manifest declares them (for a dataset).
    pub optional_fields: Option<Vec<String>>,
    /// Samples per label, in label order (unlabelled samples left out); for a dataset, every
    /// class of its manifest, those no sample has at 0.
    pub classes: Vec<ClassCount>,
    /// Samples without a label (no `.cls` and no json `label`, or label -1).
    pub unlabelled: u64,
    /// Image sizes.
    pub image_sizes: SizeStats,
    /// The pack options from the manifest.
    pub pack: Option<serde_json::Map<String, Value>>,
    /// Shards or samples that could not be read; the statistics leave them out.
    pub problems: Vec<Problem>,
}

/// Statistics of one shard, merged later.
#[derive(Default)]
struct Stats {
    shards: u64,
    formats: BTreeMap<String, u64>,
    samples: u64,
    stored: u64,
    uncompressed: u64,
    fields: BTreeMap<String, (u64, u64)>,
    labels: BTreeMap<i64, u64>,
    unlabelled: u64,
    names: BTreeMap<i64, String>,
    sizes: HashMap<(u32, u32), u64>,
    problems: Vec<Problem>,
}

impl Stats {
    fn merge(&mut self, o: Stats) {
        self.shards += o.shards;
        for (k, v) in o.formats {
            *self.formats.entry(k).or_default() += v;
        }
        self.samples += o.samples;
        self.stored += o.stored;
        self.uncompressed += o.uncompressed;
        for (k, (c, b)) in o.fields {
            let e = self.fields.entry(k).or_default();
            e.0 += c;
            e.1 += b;
        }
        for (k, v) in o.labels {
            *self.labels.entry(k).or_default() += v;
        }
        self.unlabelled += o.unlabelled;
        for (k, v) in o.names {
            self.names.entry(k).or_insert(v);
        }
        for (k, v) in o.sizes {
            *self.sizes.entry(k).or_default() += v;
        }
        self.problems.extend(o.problems);
    }
}

/// Inspects a dataset (directory or manifest) or a single shard file.
pub fn inspect(target: &Path, opts: &VerifyOptions) -> Result<InspectReport, VerifyError> {
    inspect_as(target, opts, None)
}

/// [`inspect`]; with `remote`, the target's shards are held as they are read (a remote
/// dataset's view, fetching them then), and the dataset's shards as the server stores them (its
/// manifest entries, index for index, where the view holds decompressed copies), whose formats
/// and sizes the report gives for the shards it reads.
pub(crate) fn inspect_as(
    target: &Path,
    opts: &VerifyOptions,
    remote: Option<(&dyn HoldShards, &[ShardEntry])>,
) -> Result<InspectReport, VerifyError> {
    let as_stored = remote.map(|(_, stored)| stored);
    match open_target(target, &opts.limits, true)? {
        Target::Dataset(ds) => {
            let m = &ds.manifest;
            // A shard listed twice is counted once; one named outside the folder is not read
            // (both are among the manifest's problems, reported below).
            let mut seen = std::collections::HashSet::new();
            let indexed: Vec<(usize, &ShardEntry)> = (m.shards.iter().enumerate())
                .filter(|(_, e)| seen.insert(e.file.as_str()))
                .collect();
            // Each thread holds a whole shard: as many as keep to the bound.
            let largest = (indexed.iter())
                .map(|(_, e)| e.uncompressed_bytes.unwrap_or(e.bytes).max(e.bytes))
                .max()
                .unwrap_or(0);
            // A remote dataset's shards are fetched by these threads: as many as it fetches at
            // once, within the bound.
            let jobs = remote.map_or(opts.jobs_or_cores(), |(view, _)| view.at_once());
            let jobs = crate::jobs_within(jobs, largest);
            let read = |&(i, e): &(usize, &ShardEntry)| {
                if !shardtool_manifest::is_safe_file_name(&e.file) {
                    return Stats::default();
                }
                let _held = remote.and_then(|(view, _)| view.hold(i));
                let kind = ShardKind {
                    format: e.format,
                    compression: e.compression,
                };
                let mut s = shard_stats(
                    &ds.dir.join(&e.file),
                    &e.file,
                    Some(kind),
                    e.uncompressed_bytes,
                    opts,
                );
                if let Some(stored) = as_stored.and_then(|v| v.get(i)).filter(|_| s.shards > 0) {
                    s.stored = stored.bytes;
                    s.formats = BTreeMap::from([(
                        format_name(stored.format, stored.compression.is_some()),
                        1,
                    )]);
                }
                s
            };
            // A remote dataset's shards, each held while it is read: no more in hand than the
            // threads (see `map_in_turn`).
            let parts = match remote {
                None => map_on_threads(jobs, "inspect", &indexed, read)?,
                Some(_) => map_in_turn(jobs, &indexed, read),
            };
            let mut all = Stats {
                problems: ds.problems.clone(),
                ..Stats::default()
            };
            for p in parts {
                all.merge(p);
            }
            for (i, c) in m.classes.iter().enumerate() {
                all.names.insert(i as i64, c.clone());
                // A class no sample has (its images all failed, or none) is shown at 0: the
                // class count is the manifest's, which labels index into.
                all.labels.entry(i as i64).or_insert(0);
            }
            let mut r = finish(target, "dataset", all);
            r.manifest = Some(ds.manifest_path.display().to_string());
            r.tool = Some(m.tool.clone());
            r.samples_in_manifest = Some(m.totals.samples);
            r.pack = Some(m.pack.clone());
            r.declared_fields = Some(m.fields.clone());
            r.optional_fields = Some(m.optional_fields.clone());
            Ok(r)
        }
        Target::Shard(path) => {
            let name = path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            let kind = ShardKind::from_name(&name);
            let stats = shard_stats(&path, &name, kind, None, opts);
            if stats.shards == 0 && stats.problems.is_empty() {
                return Err(VerifyError::UnknownFile { path });
            }
            Ok(finish(target, "shard", stats))
        }
    }
}

fn finish(target: &Path, kind: &str, s: Stats) -> InspectReport {
    let classes = s
        .labels
        .iter()
        .map(|(&label, &count)| ClassCount {
            label,
            name: s.names.get(&label).cloned(),
            count,
        })
        .collect();
    let fields = s
        .fields
        .iter()
        .map(|(k, &(count, bytes))| {
            (
                k.clone(),
                FieldStats {
                    count,
                    bytes,
                    mean_bytes: bytes as f64 / count.max(1) as f64,
                },
            )
        })
        .collect();
    InspectReport {
        target: target.display().to_string(),
        kind: kind.into(),
        manifest: None,
        tool: None,
        shards: s.shards,
        formats: s.formats,
        samples: s.samples,
        samples_in_manifest: None,
        stored_bytes: s.stored,
        uncompressed_bytes: s.uncompressed,
        bytes_per_sample: s.stored as f64 / s.samples.max(1) as f64,
        fields,
        declared_fields: None,
        optional_fields: None,
        classes,
        unlabelled: s.unlabelled,
        image_sizes: size_stats(&s.sizes),
        pack: None,
        problems: s.problems,
    }
}

/// Min, median and max from a histogram of values.
fn spread(hist: &BTreeMap<u32, u64>) -> Spread {
    let total: u64 = hist.values().sum();
    if total == 0 {
        return Spread::default();
    }
    let mid = (total - 1) / 2;
    let mut seen = 0u64;
    let mut median = 0;
    for (&v, &c) in hist {
        if seen + c > mid {
            median = v;
            break;
        }
        seen += c;
    }
    Spread {
        min: hist.keys().next().copied().unwrap_or(0),
        median,
        max: hist.keys().next_back().copied().unwrap_or(0),
    }
}

fn size_stats(sizes: &HashMap<(u32, u32), u64>) -> SizeStats {
    let mut widths = BTreeMap::new();
    let mut heights = BTreeMap::new();
    for (&(w, h), &c) in sizes {
        *widths.entry(w).or_default() += c;
        *heights.entry(h).or_default() += c;
    }
    let mut common: Vec<SizeCount> = sizes
        .iter()
        .map(|(&(width, height), &count)| SizeCount {
            width,
            height,
            count,
        })
        .collect();
    common.sort_by(|a, b| {
        b.count
            .cmp(&a.count)
            .then((a.width, a.height).cmp(&(b.width, b.height)))
    });
    common.truncate(MOST_COMMON);
    SizeStats {
        images: sizes.values().sum(),
        width: spread(&widths),
        height: spread(&heights),
        most_common: common,
    }
}

/// `wds`, `packed`, `wds+zstd` or `packed+zstd`.
fn format_name(format: ShardFormat, compressed: bool) -> String {
    let name = match format {
        ShardFormat::Wds => "wds",
        ShardFormat::Packed => "packed",
    };
    if compressed {
        format!("{name}+zstd")
    } else {
        name.to_string()
    }
}

fn shard_stats(
    path: &Path,
    name: &str,
    kind: Option<ShardKind>,
    declared: Option<u64>,
    opts: &VerifyOptions,
) -> Stats {
    let mut s = Stats::default();
    let read = match read_shard(path, kind, declared, opts.max_shard_bytes, opts.mmap) {
        Ok(r) => r,
        Err((kind, message)) => {
            s.problems.push(Problem::shard(name, kind, message));
            return s;
        }
    };
    let data = &read.data[..];
    let Some(format) = kind.map(|k| k.format).or_else(|| sniff(data)) else {
        return s;
    };
    s.shards = 1;
    s.stored = read.stored;
    s.uncompressed = data.len() as u64;
    s.formats.insert(format_name(format, read.compressed), 1);
    match format {
        ShardFormat::Wds => wds_stats(data, name, &mut s),
        ShardFormat::Packed => packed_stats(data, name, &mut s),
    }
    s
}

fn wds_stats(data: &[u8], name: &str, s: &mut Stats) {
    let (samples, err) = group_samples(data);
    if let Some(e) = err {
        s.problems.push(Problem::shard(
            name,
            ProblemKind::Malformed,
            format!("read stopped after {} samples: {e}", samples.len()),
        ));
    }
    for sample in &samples {
        s.samples += 1;
        for (f, d) in &sample.fields {
            let e = s.fields.entry(f.clone()).or_default();
            e.0 += 1;
            e.1 += d.len() as u64;
        }
        let (meta, label) = tar_meta_and_label(sample);
        match label {
            Some(l) if l >= 0 => {
                *s.labels.entry(l).or_default() += 1;
                if let Some(Value::String(c)) = meta.as_ref().and_then(|m| m.get("class")) {
                    s.names.entry(l).or_insert_with(|| c.clone());
                }
            }
            _ => s.unlabelled += 1,
        }
        // The stored image's own header first: a `.json` carried from the input states the
        // input's size, not the one packed.
        let probed = sample
            .fields
            .iter()
            .find(|(f, _)| shardtool_wds::is_image_field(f))
            .and_then(|image| shardtool_image::probe_size(image.1));
        let size = probed.or_else(|| {
            let m = meta.as_ref()?;
            let w = u32::try_from(m.get("width")?.as_u64()?).ok()?;
            let h = u32::try_from(m.get("height")?.as_u64()?).ok()?;
            Some((w, h))
        });
        if let Some(wh) = size {
            *s.sizes.entry(wh).or_default() += 1;
        }
    }
}

fn packed_stats(data: &[u8], name: &str, s: &mut Stats) {
    let shard = match PackedShard::open(data) {
        Ok(p) => p,
        Err(e) => {
            s.problems.push(Problem::shard(
                name,
                ProblemKind::Malformed,
                format!("not a valid packed shard: {e}"),
            ));
            return;
        }
    };
    for (i, rec) in shard.records().enumerate() {
        s.samples += 1;
        for f in RECORD_FIELDS {
            let bytes = match f {
                "pixels" => rec.pixels.len() as u64,
                "label" => 8,
                _ => rec.key.len() as u64,
            };
            let e = s.fields.entry(f.to_string()).or_default();
            e.0 += 1;
            e.1 += bytes;
        }
        for (f, v) in shard.carried(i) {
            let e = s.fields.entry(f.to_string()).or_default();
            e.0 += 1;
            e.1 += v.bytes().len() as u64;
        }
        if rec.label < 0 {
            s.unlabelled += 1;
        } else {
            *s.labels.entry(rec.label).or_default() += 1;
            if let Some(Value::String(c)) = shard.sample_meta(i).get("class") {
                s.names.entry(rec.label).or_insert_with(|| c.clone());
            }
        }
        let [h, w, _] = rec.shape;
        *s.sizes.entry((w, h)).or_default() += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spread_of_a_histogram() {
        let h: BTreeMap<u32, u64> = [(10, 1), (20, 2), (30, 1)].into_iter().collect();
        assert_eq!(
            spread(&h),
            Spread {
                min: 10,
                median: 20,
                max: 30
            }
        );
        let h: BTreeMap<u32, u64> = [(10, 2), (30, 2)].into_iter().collect();
        assert_eq!(spread(&h).median, 10);
        assert_eq!(spread(&BTreeMap::new()), Spread::default());
    }

    #[test]
    fn most_common_sizes_first() {
        let sizes: HashMap<(u32, u32), u64> = [((1, 1), 1), ((2, 2), 5), ((3, 3), 5)]
            .into_iter()
            .collect();
        let s = size_stats(&sizes);
        assert_eq!(s.images, 11);
        assert_eq!(
            (
                s.most_common[0].width,
                s.most_common[1].width,
                s.most_common[2].width
            ),
            (2, 3, 1)
        );
    }

    #[test]
    fn sniffs_formats() {
        let mut w = shardtool_wds::TarWriter::new(Vec::new());
        w.append("a.cls", b"1").unwrap();
        let tar = w.finish().unwrap();
        assert_eq!(sniff(&tar), Some(ShardFormat::Wds));
        let mut p = 8u64.to_le_bytes().to_vec();
        p.extend_from_slice(b"{}      ");
        assert_eq!(sniff(&p), Some(ShardFormat::Packed));
        assert_eq!(sniff(b"hello"), None);
    }
}
