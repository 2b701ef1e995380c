//! The worker side of the loader: each thread reads its batches' records from the open shards,
//! applies the transform, and assembles each batch into one buffer from the allocator (crops are
//! resized straight into their slot of it).

use crate::batch::{Batch, BatchAllocator, FieldColumn, Layout};
use crate::dataset::{Dataset, ShardView};
use crate::loader::CorruptPolicy;
use crate::metrics::{MetricsRecorder, SlowRecord};
use crate::plan::SampleRef;
use crate::transform::{Crop, Transform};
use crate::ReadError;
use shardtool_manifest::ShardFormat;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::SyncSender;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What every worker thread of one loader shares.
pub(crate) struct WorkerShared {
    pub(crate) dataset: Arc<Dataset>,
    pub(crate) order: Arc<Vec<SampleRef>>,
    pub(crate) batch_size: usize,
    // The crop inputs, read only by the decoder (the `decode` feature).
    #[cfg_attr(not(feature = "decode"), allow(dead_code))]
    pub(crate) seed: u64,
    pub(crate) epoch: u64,
    pub(crate) transform: Transform,
    #[cfg_attr(not(feature = "decode"), allow(dead_code))]
    pub(crate) flip: bool,
    #[cfg_attr(not(feature = "decode"), allow(dead_code))]
    pub(crate) region_decode: bool,
    /// The most pixels a record decodes to ([`Dataset::max_pixels`], read once, or the limit
    /// the user gave).
    #[cfg_attr(not(feature = "decode"), allow(dead_code))]
    pub(crate) max_pixels: u64,
    /// Whether a `resize:S` output past that limit is the record's fault (a thin image in a
    /// dataset not trusted), not the options': only under a limit the user gave that the
    /// smallest output, S×S, keeps to; else no record could meet the options.
    #[cfg_attr(not(feature = "decode"), allow(dead_code))]
    pub(crate) resize_past_limit_is_corrupt: bool,
    pub(crate) corrupt: CorruptPolicy,
    pub(crate) allocator: Arc<dyn BatchAllocator>,
    /// Carried fields to deliver, in the order asked.
    pub(crate) fields: Vec<String>,
    pub(crate) stop: Arc<AtomicBool>,
    pub(crate) metrics: Arc<MetricsRecorder>,
    pub(crate) delays: Vec<(String, Duration)>,
    pub(crate) partial: Option<(u64, usize)>,
    pub(crate) left: Vec<AtomicU64>,
}

impl WorkerShared {
    /// Counts `n` samples of `shard` as read, closing the shard after its last one.
    fn done(&self, shard: u32, n: u64) {
        if let Some(left) = self.left.get(shard as usize) {
            if left.fetch_sub(n, Ordering::AcqRel) == n {
                self.dataset.release(shard as usize);
            }
        }
    }

    fn shard_name(&self, r: &SampleRef) -> String {
        self.dataset.manifest.shards[r.shard as usize].file.clone()
    }
}

pub(crate) type Msg = (u64, Result<Batch, ReadError>);

pub(crate) fn worker(s: &WorkerShared, batches: &[u64], tx: &SyncSender<Msg>) {
    for &b in batches {
        if s.stop.load(Ordering::Relaxed) {
            return;
        }
        let r = build_batch(s, b);
        let failed = r.is_err();
        if tx.send((b, r)).is_err() || failed {
            return;
        }
    }
}

/// A record resolved to its bytes.
enum Rec<'a> {
    Pixels {
        shape: [u32; 3],
        bytes: &'a [u8],
    },
    /// Decoded by this worker (only with the `decode` feature).
    #[cfg_attr(not(feature = "decode"), allow(dead_code))]
    Owned {
        shape: [u32; 3],
        bytes: Vec<u8>,
    },
    Encoded(&'a [u8]),
    /// Already written into its slot of a fixed-shape batch.
    InSlot,
}

impl Rec<'_> {
    fn shape(&self) -> Option<[u32; 3]> {
        match self {
            Rec::Pixels { shape, .. } | Rec::Owned { shape, .. } => Some(*shape),
            Rec::Encoded(_) | Rec::InSlot => None,
        }
    }

    fn bytes(&self) -> &[u8] {
        match self {
            Rec::Pixels { bytes, .. } | Rec::Encoded(bytes) => bytes,
            Rec::Owned { bytes, .. } => bytes,
            Rec::InSlot => &[],
        }
    }
}

fn build_batch(s: &WorkerShared, b: u64) -> Result<Batch, ReadError> {
    let start = b as usize * s.batch_size;
    let end = (start + s.batch_size).min(s.order.len());
    let skip_first = match s.partial {
        Some((pb, consumed)) if pb == b => consumed,
        _ => 0,
    };
    let refs = &s.order[start + skip_first.min(end - start)..end];
    // Keep each shard view alive for the batch; records borrow from them.
    let mut views: Vec<Option<Arc<ShardView>>> = Vec::with_capacity(refs.len());
    for r in refs {
        match s.dataset.shard(r.shard as usize) {
            Ok(v) => views.push(Some(v)),
            Err(e) => match s.corrupt {
                CorruptPolicy::Fail => return Err(e),
                CorruptPolicy::Skip => {
                    s.metrics.lost(&s.shard_name(r), &e);
                    views.push(None);
                }
            },
        }
    }
    // Fixed-shape crops are written into their slots as they are decoded.
    let side = s.transform.fixed_size();
    let slot = side.map_or(0, |n| n as usize * n as usize * 3);
    let mut fixed = match side {
        Some(_) => Some(s.allocator.allocate(slot * refs.len())?),
        None => None,
    };
    let mut keys = Vec::with_capacity(refs.len());
    let mut labels = Vec::with_capacity(refs.len());
    let mut recs = Vec::with_capacity(refs.len());
    let mut crops = Vec::new();
    let mut columns: Vec<FieldColumn> = s.fields.iter().cloned().map(FieldColumn::new).collect();
    let mut skipped = Vec::new();
    for (i, (r, view)) in refs.iter().zip(&views).enumerate() {
        let Some(view) = view else {
            skipped.push(i as u32);
            continue;
        };
        let t = Instant::now();
        let at = keys.len() * slot;
        let got = read_record(s, view, r).and_then(|(key, label, rec)| {
            let corrupt = |message: String| ReadError::CorruptRecord {
                shard: s.shard_name(r),
                key: key.clone(),
                message,
            };
            let (rec, crop) = match fixed.as_mut() {
                Some(buf) => {
                    let out = &mut buf.bytes_mut()[at..at + slot];
                    (
                        Rec::InSlot,
                        Some(crop_into(s, &key, rec, out).map_err(corrupt)?),
                    )
                }
                None => (transform_record(s, rec, &corrupt)?, None),
            };
            Ok((key, label, rec, crop))
        });
        let elapsed = t.elapsed();
        match got {
            Ok((key, label, rec, crop)) => {
                if let Some((_, d)) = s.delays.iter().find(|(k, _)| *k == key) {
                    std::thread::sleep(*d);
                }
                let elapsed = t.elapsed().max(elapsed);
                if s.metrics.record_time(elapsed) {
                    s.metrics.slow(SlowRecord {
                        shard: s.shard_name(r),
                        key: key.clone(),
                        time: elapsed,
                    });
                }
                keys.push(key);
                labels.push(label);
                recs.push(rec);
                crops.extend(crop);
                push_fields(s, view, r, &mut columns);
            }
            // Options the dataset cannot meet are no corrupt record: skipping would skip all.
            Err(e @ ReadError::BadOptions(_)) => return Err(e),
            Err(e) => match s.corrupt {
                CorruptPolicy::Fail => return Err(e),
                CorruptPolicy::Skip => {
                    s.metrics.corrupt();
                    skipped.push(i as u32);
                }
            },
        }
    }
    let batch = match (fixed, side) {
        (Some(mut buf), Some(n)) => {
            let len = keys.len() * slot;
            if len < slot * refs.len() {
                // Skipped records left empty slots at the end: a buffer of the right size.
                let mut short = s.allocator.allocate(len)?;
                short.bytes_mut().copy_from_slice(&buf.bytes_mut()[..len]);
                s.allocator.release(std::mem::replace(&mut buf, short));
            }
            s.metrics.add_bytes(len as u64);
            let layout = Layout::Fixed {
                height: n,
                width: n,
            };
            Ok(
                Batch::new(s.epoch, b, keys, labels, layout, buf, s.allocator.clone())
                    .with_crops(crops),
            )
        }
        _ => assemble(s, b, keys, labels, recs),
    }
    .map(|batch| batch.with_fields(columns).with_skipped(skipped));
    // The records are copied out: the views may close now.
    drop(views);
    let mut i = 0;
    while i < refs.len() {
        let shard = refs[i].shard;
        let run = refs[i..].iter().take_while(|r| r.shard == shard).count();
        s.done(shard, run as u64);
        i += run;
    }
    batch
}

/// Appends record `r`'s value of each asked-for field to `columns` (small values: copied).
fn push_fields(s: &WorkerShared, view: &ShardView, r: &SampleRef, columns: &mut [FieldColumn]) {
    let i = r.record as usize;
    match view {
        ShardView::Packed(p) if i < p.len() => {
            for (c, value) in columns.iter_mut().zip(p.fields(i, &s.fields)) {
                c.push(value.as_deref());
            }
        }
        ShardView::Tar { bytes, records } => {
            let spans = records.get(i).map_or(&[][..], |rec| &rec.fields);
            for (j, c) in columns.iter_mut().enumerate() {
                let span = spans.get(j).cloned().flatten();
                c.push(span.and_then(|span| bytes.as_ref().get(span)));
            }
        }
        // The record was read above, so it is in range.
        ShardView::Packed(_) => columns.iter_mut().for_each(|c| c.push(None)),
    }
}

fn read_record<'a>(
    s: &WorkerShared,
    view: &'a ShardView,
    r: &SampleRef,
) -> Result<(String, i64, Rec<'a>), ReadError> {
    let out_of_range = || ReadError::CorruptRecord {
        shard: s.shard_name(r),
        key: format!("#{}", r.record),
        message: "record index out of range".into(),
    };
    match view {
        ShardView::Packed(p) => {
            let rec = p.get(r.record as usize).ok_or_else(out_of_range)?;
            Ok((
                rec.key.to_string(),
                rec.label,
                Rec::Pixels {
                    shape: rec.shape,
                    bytes: rec.pixels,
                },
            ))
        }
        ShardView::Tar { bytes, records } => {
            let rec = records.get(r.record as usize).ok_or_else(out_of_range)?;
            if let Some(why) = &rec.damage {
                return Err(ReadError::CorruptRecord {
                    shard: s.shard_name(r),
                    key: rec.key.clone(),
                    message: why.clone(),
                });
            }
            let data = &bytes.as_ref()[rec.image.clone()];
            Ok((rec.key.clone(), rec.label, Rec::Encoded(data)))
        }
    }
}

/// The variable-shape transforms: none, decode, resize. A record that cannot be read is
/// `corrupt`; an output past the reader's limit (`resize:S` too large for the dataset) is the
/// options' fault, refused with or without skipping corrupt records.
#[cfg(feature = "decode")]
fn transform_record<'a>(
    s: &WorkerShared,
    rec: Rec<'a>,
    corrupt: &dyn Fn(String) -> ReadError,
) -> Result<Rec<'a>, ReadError> {
    use shardtool_image::{plan_size, Encode, Filter, Output, Resize, TransformSpec};
    let max = s.max_pixels;
    let resize = match s.transform {
        Transform::Resize { size } => Resize::ShorterTruncated(size),
        Transform::Decode => Resize::None,
        _ => return Ok(rec),
    };
    let record_fault = s.resize_past_limit_is_corrupt;
    match rec {
        Rec::Encoded(data) => {
            let spec = TransformSpec {
                resize,
                upscale: true,
                filter: Filter::Bilinear,
                encode: Encode::Raw,
                limits: shardtool_core::Limits {
                    max_pixels: max,
                    ..Default::default()
                },
                ..Default::default()
            };
            let out = shardtool_image::transform(data, &spec).map_err(|e| match e.kind {
                shardtool_image::ErrorKind::TooManyPixels
                    if e.message.starts_with("the output") && !record_fault =>
                {
                    ReadError::BadOptions(reader_limit(&e.message, max))
                }
                shardtool_image::ErrorKind::TooManyPixels => corrupt(reader_limit(&e.message, max)),
                _ => corrupt(e.message),
            })?;
            match out.output {
                Output::Pixels(img) => Ok(Rec::Owned {
                    shape: [img.height, img.width, 3],
                    bytes: img.pixels,
                }),
                Output::Encoded { .. } => Err(corrupt("decoder returned encoded bytes".into())),
            }
        }
        Rec::Pixels {
            shape: [h, w, _],
            bytes,
        } if resize != Resize::None => {
            let plan = plan_size(resize, true, w, h);
            let pixels = u64::from(plan.width) * u64::from(plan.height);
            if pixels > max {
                let why = reader_limit(
                    &format!(
                        "the output {}x{} would be {pixels} pixels",
                        plan.width, plan.height
                    ),
                    max,
                );
                return Err(match record_fault {
                    true => corrupt(why),
                    false => ReadError::BadOptions(why),
                });
            }
            let img = shardtool_image::resize_rgb8(bytes, w, h, &plan, Filter::Bilinear)
                .map_err(|e| corrupt(e.message))?;
            Ok(Rec::Owned {
                shape: [img.height, img.width, 3],
                bytes: img.pixels,
            })
        }
        other => Ok(other),
    }
}

/// Why a record or its `resize:S` output is refused: `message` (which says how large it is or
/// would be) without pack's flag, which the reader does not take.
#[cfg(feature = "decode")]
fn reader_limit(message: &str, max: u64) -> String {
    let what = message.split(", over the limit").next().unwrap_or(message);
    format!(
        "{what}, over the reader's limit of {max} pixels a record (the pack's limit, when the \
         dataset was packed under a larger one, or the max pixels given to the reader; \
         resize:S of an image this thin or large; center-crop:S and random-resized-crop:S give \
         S×S)"
    )
}

#[cfg(not(feature = "decode"))]
fn transform_record<'a>(
    s: &WorkerShared,
    rec: Rec<'a>,
    corrupt: &dyn Fn(String) -> ReadError,
) -> Result<Rec<'a>, ReadError> {
    match s.transform {
        Transform::None => Ok(rec),
        _ => Err(corrupt("built without the decode feature".into())),
    }
}

/// A crop transform of one record, resized into `out` (its slot of the batch).
#[cfg(feature = "decode")]
fn crop_into(s: &WorkerShared, key: &str, rec: Rec<'_>, out: &mut [u8]) -> Result<Crop, String> {
    use shardtool_image::{CropBox, CropOptions, Filter};
    let side = s.transform.fixed_size().unwrap_or(1);
    let flipped = s.transform.flipped(s.flip, s.seed, s.epoch, key);
    let options = CropOptions {
        width: side,
        height: side,
        flip: flipped,
        filter: Filter::Bilinear,
        fused: s.region_decode,
    };
    let choose = |w: u32, h: u32| {
        let c = s
            .transform
            .crop(s.flip, s.seed, s.epoch, key, w, h)
            .unwrap_or(Crop {
                x: 0.0,
                y: 0.0,
                w: f64::from(w),
                h: f64::from(h),
                flipped,
            });
        CropBox {
            x: c.x,
            y: c.y,
            w: c.w,
            h: c.h,
        }
    };
    let b = match rec {
        Rec::Encoded(data) => {
            let limits = shardtool_core::Limits {
                max_pixels: s.max_pixels,
                ..Default::default()
            };
            shardtool_image::decode_crop_into(data, &limits, choose, &options, out)
                .map_err(|e| match e.kind {
                    shardtool_image::ErrorKind::TooManyPixels => {
                        reader_limit(&e.message, limits.max_pixels)
                    }
                    _ => e.message,
                })?
                .crop
        }
        Rec::Pixels {
            shape: [h, w, _],
            bytes,
        } => {
            let b = choose(w, h);
            shardtool_image::crop_pixels_into(bytes, w, h, b, &options, out)
                .map_err(|e| e.message)?;
            b
        }
        Rec::Owned { .. } | Rec::InSlot => return Err("record already transformed".into()),
    };
    Ok(Crop {
        x: b.x,
        y: b.y,
        w: b.w,
        h: b.h,
        flipped,
    })
}

#[cfg(not(feature = "decode"))]
fn crop_into(_: &WorkerShared, _: &str, _: Rec<'_>, _: &mut [u8]) -> Result<Crop, String> {
    Err("built without the decode feature".into())
}

/// Copies the records of one batch into one buffer from the allocator: the only copy on the way
/// from the page cache to the batch.
fn assemble(
    s: &WorkerShared,
    b: u64,
    keys: Vec<String>,
    labels: Vec<i64>,
    recs: Vec<Rec<'_>>,
) -> Result<Batch, ReadError> {
    let first = recs.first().and_then(Rec::shape);
    // A batch every record of which was skipped: `[0, 0, 0, 3]` where images are decoded, as
    // code written for the stacked batches of one image size expects an array.
    let pixels = s.transform != Transform::None
        || (s.dataset.manifest.shards.iter()).all(|e| e.format == ShardFormat::Packed);
    let empty_decoded = recs.is_empty() && pixels;
    let fixed = empty_decoded || (first.is_some() && recs.iter().all(|r| r.shape() == first));
    let encoded = recs.iter().any(|r| r.shape().is_none());
    let (layout, total) = if fixed && !encoded {
        let [h, w, _] = first.unwrap_or([0, 0, 3]);
        let n = recs.iter().map(|r| r.bytes().len()).sum::<usize>();
        (
            Layout::Fixed {
                height: h,
                width: w,
            },
            n,
        )
    } else {
        // 64-byte aligned starts, like the packed format, for SIMD-friendly consumers.
        let align = if encoded { 1 } else { 64 };
        let mut offsets = Vec::with_capacity(recs.len() + 1);
        let mut pos = 0usize;
        for r in &recs {
            pos = pos.next_multiple_of(align);
            offsets.push(pos as u64);
            pos += r.bytes().len();
        }
        offsets.push(pos as u64);
        if encoded {
            (Layout::Encoded { offsets }, pos)
        } else {
            let shapes = recs
                .iter()
                .map(|r| r.shape().unwrap_or([0, 0, 3]))
                .collect();
            (Layout::Variable { offsets, shapes }, pos)
        }
    };
    let mut buf = s.allocator.allocate(total)?;
    {
        let out = buf.bytes_mut();
        let mut pos = 0;
        for (i, r) in recs.iter().enumerate() {
            let at = match &layout {
                Layout::Fixed { .. } => pos,
                Layout::Variable { offsets, .. } | Layout::Encoded { offsets } => {
                    offsets[i] as usize
                }
            };
            let src = r.bytes();
            out[at..at + src.len()].copy_from_slice(src);
            pos = at + src.len();
        }
    }
    s.metrics.add_bytes(total as u64);
    Ok(Batch::new(
        s.epoch,
        b,
        keys,
        labels,
        layout,
        buf,
        s.allocator.clone(),
    ))
}
