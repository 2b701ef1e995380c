//! `preview`: a contact sheet of sampled images with their class names, so a person can judge
//! resize quality and labels at a glance. Samples are chosen with a seeded shuffle
//! (`shardtool_core::shuffle`), only the shards holding them are read, and the sheet is drawn with
//! the built-in bitmap font (no system fonts).

use crate::font::{draw_text, fill_rect, fit_text, GLYPH_H};
use crate::{read_shard, sniff, tar_meta_and_label};
use rayon::prelude::*;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use shardtool_core::{shuffle, Limits, Rgb8Image, SplitMix64};
use shardtool_image::{
    encode_png_rgb8, plan_size, resize_rgb8, transform, Encode, Filter, Resize, TransformSpec,
};
use shardtool_manifest::{Manifest, ShardFormat, ShardKind};
use shardtool_packed::PackedShard;
use shardtool_verify::{open_target, Target, VerifyError};
use shardtool_wds::group_samples;
use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};

/// Datasets up to this many samples are shuffled whole; larger ones are sampled without
/// materialising every index.
const SHUFFLE_ALL_UP_TO: u64 = 1 << 24;
/// Largest sheet drawn, in pixels (about 600 MB of RGB8).
const MAX_SHEET_PIXELS: u64 = 200_000_000;
/// Space around and between tiles, in pixels.
const PAD: u32 = 8;
/// Scale of the class-name text (font pixels are `SCALE`×`SCALE` squares).
const SCALE: u32 = 2;
const BACKGROUND: [u8; 3] = [28, 28, 30];
const TILE_BG: [u8; 3] = [52, 52, 56];
const TEXT: [u8; 3] = [250, 250, 250];
const DIM_TEXT: [u8; 3] = [170, 170, 176];
const ERROR_BG: [u8; 3] = [110, 24, 24];

/// What to draw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PreviewOptions {
    /// Number of samples (fewer if the dataset holds fewer).
    pub count: usize,
    /// Shuffle seed: the same seed picks the same samples.
    pub seed: u64,
    /// Thumbnails fit into `tile`×`tile` pixels, aspect kept, never enlarged.
    pub tile: u32,
    /// Columns of the grid (default: about square).
    pub columns: Option<usize>,
    /// Worker threads.
    pub jobs: usize,
    /// Limits for decoding images and reading the manifest.
    pub limits: Limits,
    /// Largest (uncompressed) shard held in memory.
    pub max_shard_bytes: u64,
}

impl Default for PreviewOptions {
    fn default() -> Self {
        Self {
            count: 16,
            seed: 0,
            tile: 128,
            columns: None,
            jobs: std::thread::available_parallelism().map_or(1, |n| n.get()),
            limits: Limits::default(),
            max_shard_bytes: shardtool_verify::DEFAULT_MAX_SHARD_BYTES,
        }
    }
}

/// One sample on the sheet.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PreviewItem {
    /// Shard file name.
    pub shard: String,
    /// Sample key.
    pub key: String,
    /// Label, if the sample has one.
    pub label: Option<i64>,
    /// Class name, if known.
    pub class: Option<String>,
    /// Stored image width (0 when it did not decode).
    pub width: u32,
    /// Stored image height (0 when it did not decode).
    pub height: u32,
    /// Why the image could not be shown, if it could not.
    pub error: Option<String>,
}

/// The drawn sheet and what is on it.
#[derive(Debug, Clone)]
pub struct PreviewSheet {
    /// The sheet, RGB8.
    pub image: Rgb8Image,
    /// The samples in grid order (row by row).
    pub items: Vec<PreviewItem>,
    /// Samples the target holds (as the manifest says, or as counted in a lone shard).
    pub samples_available: u64,
    /// Problems that kept shards off the sheet (missing, unreadable, malformed).
    pub skipped: Vec<String>,
}

/// A sample picked for the sheet, with its thumbnail.
struct Picked {
    order: usize,
    item: PreviewItem,
    thumb: Option<Rgb8Image>,
}

/// A shard to read and the local sample indices wanted from it, with their sheet positions.
struct Want {
    path: PathBuf,
    name: String,
    kind: Option<ShardKind>,
    declared: Option<u64>,
    picks: Vec<(u64, usize)>,
}

/// Draws a contact sheet of `opts.count` samples of a dataset or a single shard.
pub fn preview(target: &Path, opts: &PreviewOptions) -> Result<PreviewSheet, VerifyError> {
    preview_titled(target, opts, None)
}

/// The manifest indices of the shards [`preview`] reads for a dataset described by `m`.
#[cfg(feature = "remote")]
pub(crate) fn preview_shards(m: &Manifest, opts: &PreviewOptions) -> Vec<usize> {
    picks_by_shard(m, opts).into_keys().collect()
}

/// The samples `opts` picks from the dataset `m` describes: per shard index, the local sample
/// indices wanted, with their sheet positions.
fn picks_by_shard(m: &Manifest, opts: &PreviewOptions) -> BTreeMap<usize, Vec<(u64, usize)>> {
    let total = m
        .shards
        .iter()
        .fold(0u64, |a, s| a.saturating_add(s.samples));
    let chosen = choose(total, opts.count, opts.seed);
    // Global index → (shard, local index), by the manifest's counts.
    let mut starts = Vec::with_capacity(m.shards.len());
    let mut acc = 0u64;
    for s in &m.shards {
        starts.push(acc);
        acc = acc.saturating_add(s.samples);
    }
    let mut by_shard: BTreeMap<usize, Vec<(u64, usize)>> = BTreeMap::new();
    for (order, g) in chosen.into_iter().enumerate() {
        let shard = starts.partition_point(|&s| s <= g).saturating_sub(1);
        by_shard
            .entry(shard)
            .or_default()
            .push((g - starts[shard], order));
    }
    by_shard
}

/// [`preview`], the sheet titled `title` (the target's path by default).
pub(crate) fn preview_titled(
    target: &Path,
    opts: &PreviewOptions,
    title_given: Option<&str>,
) -> Result<PreviewSheet, VerifyError> {
    if opts.count == 0 || opts.tile < 16 || opts.jobs == 0 {
        return Err(VerifyError::Usage(
            "--count and --jobs must be at least 1, --tile at least 16".into(),
        ));
    }
    let cell = u64::from(opts.tile + PAD) * u64::from(opts.tile + label_height() + PAD + 4);
    if (opts.count as u64).saturating_mul(cell) > MAX_SHEET_PIXELS {
        return Err(VerifyError::Usage(format!(
            "{} tiles of {}px would make a sheet over {MAX_SHEET_PIXELS} pixels; use a smaller \
             --count or --tile",
            opts.count, opts.tile
        )));
    }
    // What the manifest breaks, as warnings: the sheet shows what can be read.
    let mut skipped = Vec::new();
    let (title, classes, wants, available, lone) = match open_target(target, &opts.limits, true)? {
        Target::Dataset(ds) => {
            skipped.extend(ds.problems.iter().map(|p| format!("the manifest: {p}")));
            let m = &ds.manifest;
            let total = m
                .shards
                .iter()
                .fold(0u64, |a, s| a.saturating_add(s.samples));
            let wants = picks_by_shard(m, opts)
                .into_iter()
                .filter(|(i, _)| shardtool_manifest::is_safe_file_name(&m.shards[*i].file))
                .map(|(i, picks)| {
                    let e = &m.shards[i];
                    Want {
                        path: ds.dir.join(&e.file),
                        name: e.file.clone(),
                        kind: Some(ShardKind {
                            format: e.format,
                            compression: e.compression,
                        }),
                        declared: e.uncompressed_bytes,
                        picks,
                    }
                })
                .collect::<Vec<_>>();
            let title = ds.dir.display().to_string();
            (title, m.classes.clone(), wants, total, false)
        }
        Target::Shard(path) => {
            let name = path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            let want = Want {
                kind: ShardKind::from_name(&name),
                path: path.clone(),
                name: name.clone(),
                declared: None,
                // Filled in once the shard's sample count is known.
                picks: Vec::new(),
            };
            (path.display().to_string(), Vec::new(), vec![want], 0, true)
        }
    };
    // Each thread holds a whole shard: as many as keep to the bound.
    let largest = (wants.iter())
        .filter_map(|w| {
            std::fs::metadata(&w.path)
                .ok()
                .map(|m| m.len().max(w.declared.unwrap_or(0)))
        })
        .max()
        .unwrap_or(0);
    let jobs = crate::jobs_within(opts.jobs, largest);
    let read = |w: &Want| read_picks(w, lone, &classes, opts);
    let pool = shardtool_verify::pool_within(jobs, |i| format!("preview-{i}"))?;
    let results: Vec<Result<PicksRead, String>> =
        pool.install(|| wants.par_iter().with_max_len(1).map(read).collect());
    let mut picked = Vec::new();
    let mut available = available;
    for (r, w) in results.into_iter().zip(&wants) {
        match r {
            Ok(PicksRead {
                picked: p,
                samples,
                lost,
            }) => {
                if lone {
                    available = samples;
                }
                picked.extend(p);
                if let Some(why) = lost {
                    skipped.push(format!("{}: {why}", w.name));
                }
            }
            Err(e) => skipped.push(format!("{}: {e}", w.name)),
        }
    }
    if lone && picked.is_empty() && !skipped.is_empty() {
        return Err(VerifyError::UnknownFile {
            path: wants[0].path.clone(),
        });
    }
    picked.sort_by_key(|p| p.order);
    let subtitle = format!(
        "{} of {} samples, seed {}",
        picked.len(),
        available,
        opts.seed
    );
    let image = render(title_given.unwrap_or(&title), &subtitle, &picked, opts);
    Ok(PreviewSheet {
        image,
        items: picked.into_iter().map(|p| p.item).collect(),
        samples_available: available,
        skipped,
    })
}

/// `count` distinct indices below `total`, in a seeded random order.
pub(crate) fn choose(total: u64, count: usize, seed: u64) -> Vec<u64> {
    let count = (count as u64).min(total);
    if total <= SHUFFLE_ALL_UP_TO {
        let mut all: Vec<u64> = (0..total).collect();
        shuffle(&mut all, seed);
        all.truncate(count as usize);
        return all;
    }
    let mut rng = SplitMix64::new(seed);
    let mut seen = HashSet::new();
    let mut out = Vec::with_capacity(count as usize);
    while (out.len() as u64) < count {
        let i = rng.below(total);
        if seen.insert(i) {
            out.push(i);
        }
    }
    out
}

/// What [`read_picks`] read of one shard.
struct PicksRead {
    picked: Vec<Picked>,
    /// Samples the shard holds (as far as it could be read).
    samples: u64,
    /// Why some picks are missing (the shard holds fewer samples than its manifest entry), or,
    /// for a lone shard, where reading it stopped.
    lost: Option<String>,
}

/// Reads one shard and makes thumbnails of the wanted samples. For a lone shard (`lone`), the
/// picks are chosen here, once the shard's sample count is known.
fn read_picks(
    w: &Want,
    lone: bool,
    classes: &[String],
    opts: &PreviewOptions,
) -> Result<PicksRead, String> {
    let read = read_shard(&w.path, w.kind, w.declared, opts.max_shard_bytes, false)
        .map_err(|(_, message)| message)?;
    let data = &read.data[..];
    let format = w
        .kind
        .map(|k| k.format)
        .or_else(|| sniff(data))
        .ok_or("not a tar or packed shard")?;
    let thumb_spec = TransformSpec {
        resize: Resize::Fit(opts.tile, opts.tile),
        upscale: false,
        encode: Encode::Raw,
        limits: opts.limits,
        ..TransformSpec::default()
    };
    let class_of = |label: Option<i64>, meta_class: Option<String>| {
        label
            .and_then(|l| usize::try_from(l).ok())
            .and_then(|l| classes.get(l).cloned())
            .or(meta_class)
    };
    let (picked, n, damage) = match format {
        ShardFormat::Wds => {
            let (samples, err) = group_samples(data);
            if samples.is_empty() {
                if let Some(e) = err {
                    return Err(format!("not a readable tar shard: {e}"));
                }
            }
            let n = samples.len() as u64;
            let picks = if lone {
                lone_picks(n, opts)
            } else {
                w.picks.clone()
            };
            let out: Vec<Picked> = picks
                .par_iter()
                .filter_map(|&(i, order)| {
                    let s = samples.get(usize::try_from(i).ok()?)?;
                    let (meta, label) = tar_meta_and_label(s);
                    let meta_class = meta
                        .as_ref()
                        .and_then(|m| m.get("class")?.as_str().map(String::from));
                    let mut item = PreviewItem {
                        shard: w.name.clone(),
                        key: s.key.clone(),
                        label,
                        class: class_of(label, meta_class),
                        width: 0,
                        height: 0,
                        error: None,
                    };
                    let image = s
                        .fields
                        .iter()
                        .find(|(f, _)| shardtool_wds::is_image_field(f));
                    let thumb = match image {
                        None => {
                            item.error = Some("no image field".into());
                            None
                        }
                        Some((_, bytes)) => match transform(bytes, &thumb_spec) {
                            Ok(t) => {
                                item.width = t.orig_width;
                                item.height = t.orig_height;
                                match t.output {
                                    shardtool_image::Output::Pixels(p) => Some(p),
                                    _ => None,
                                }
                            }
                            Err(e) => {
                                item.error = Some(e.message);
                                None
                            }
                        },
                    };
                    Some(Picked { order, item, thumb })
                })
                .collect();
            (out, n, err.map(|e| e.to_string()))
        }
        ShardFormat::Packed => {
            let shard =
                PackedShard::open(data).map_err(|e| format!("not a valid packed shard: {e}"))?;
            let n = shard.len() as u64;
            let picks = if lone {
                lone_picks(n, opts)
            } else {
                w.picks.clone()
            };
            let out: Vec<Picked> = picks
                .par_iter()
                .filter_map(|&(i, order)| {
                    let i = usize::try_from(i).ok()?;
                    let rec = shard.get(i)?;
                    let meta_class = shard
                        .sample_meta(i)
                        .get("class")
                        .and_then(Value::as_str)
                        .map(String::from);
                    let [h, wd, _] = rec.shape;
                    let mut item = PreviewItem {
                        shard: w.name.clone(),
                        key: rec.key.to_string(),
                        label: Some(rec.label),
                        class: class_of(Some(rec.label), meta_class),
                        width: wd,
                        height: h,
                        error: None,
                    };
                    let thumb = match thumbnail(rec.pixels, wd, h, opts.tile) {
                        Ok(t) => Some(t),
                        Err(e) => {
                            item.error = Some(e);
                            None
                        }
                    };
                    Some(Picked { order, item, thumb })
                })
                .collect();
            (out, n, None)
        }
    };
    let wanted = if lone { picked.len() } else { w.picks.len() };
    let lost = match damage {
        _ if picked.len() < wanted => Some(format!(
            "{} of the {wanted} samples chosen from it could not be read: it holds {n}{}",
            wanted - picked.len(),
            damage.map(|d| format!(" ({d})")).unwrap_or_default()
        )),
        // A lone shard's picks come from what could be read: say where reading stopped.
        Some(d) if lone => Some(format!("read up to a damaged part: {n} samples ({d})")),
        _ => None,
    };
    Ok(PicksRead {
        picked,
        samples: n,
        lost,
    })
}

fn lone_picks(n: u64, opts: &PreviewOptions) -> Vec<(u64, usize)> {
    choose(n, opts.count, opts.seed)
        .into_iter()
        .enumerate()
        .map(|(order, i)| (i, order))
        .collect()
}

/// Fits RGB8 pixels into `tile`×`tile` (aspect kept, never enlarged) with Catmull–Rom.
fn thumbnail(pixels: &[u8], width: u32, height: u32, tile: u32) -> Result<Rgb8Image, String> {
    let plan = plan_size(Resize::Fit(tile, tile), false, width, height);
    if plan.width == width && plan.height == height {
        return Rgb8Image::new(width, height, pixels.to_vec())
            .ok_or_else(|| "record size does not match its shape".to_string());
    }
    resize_rgb8(pixels, width, height, &plan, Filter::CatmullRom).map_err(|e| e.to_string())
}

/// Height of the label area under a tile: the class name at 2×, then size and key at 1×.
fn label_height() -> u32 {
    4 + GLYPH_H * SCALE + 4 + GLYPH_H + 4
}

/// Lays the thumbnails out in a grid with a title line.
fn render(title: &str, subtitle: &str, picked: &[Picked], opts: &PreviewOptions) -> Rgb8Image {
    let n = picked.len().max(1);
    let cols = opts
        .columns
        .unwrap_or_else(|| (n as f64).sqrt().ceil() as usize)
        .clamp(1, n) as u32;
    let rows = (n as u32).div_ceil(cols);
    let tile = opts.tile;
    let cell_w = tile + PAD;
    let cell_h = tile + label_height() + PAD + 4;
    let header = PAD + GLYPH_H * SCALE + 4 + GLYPH_H + PAD;
    let width = (PAD + cols * cell_w).max(320);
    let height = header + rows * cell_h;
    let mut img = Rgb8Image {
        width,
        height,
        pixels: BACKGROUND.repeat((width * height) as usize),
    };
    let title = fit_text(title, SCALE, width - 2 * PAD);
    draw_text(&mut img, PAD, PAD, &title, SCALE, TEXT);
    let subtitle = fit_text(subtitle, 1, width - 2 * PAD);
    draw_text(
        &mut img,
        PAD,
        PAD + GLYPH_H * SCALE + 4,
        &subtitle,
        1,
        DIM_TEXT,
    );
    for (i, p) in picked.iter().enumerate() {
        let (col, row) = (i as u32 % cols, i as u32 / cols);
        let x0 = PAD + col * cell_w;
        let y0 = header + row * cell_h;
        fill_rect(&mut img, x0, y0, tile, tile, TILE_BG);
        match &p.thumb {
            Some(t) => blit(
                &mut img,
                t,
                x0 + (tile - t.width.min(tile)) / 2,
                y0 + (tile - t.height.min(tile)) / 2,
            ),
            None => {
                fill_rect(&mut img, x0, y0, tile, tile, ERROR_BG);
                let msg = p.item.error.as_deref().unwrap_or("no image");
                draw_text(&mut img, x0 + 4, y0 + 4, "NO IMAGE", 1, TEXT);
                let msg = fit_text(msg, 1, tile - 8);
                draw_text(&mut img, x0 + 4, y0 + 16, &msg, 1, TEXT);
            }
        }
        let class = fit_text(
            &shown_class(p.item.class.as_deref(), p.item.label),
            SCALE,
            tile,
        );
        let ty = y0 + tile + 4;
        draw_text(&mut img, x0, ty, &class, SCALE, TEXT);
        let info = format!("{}x{} {}", p.item.width, p.item.height, p.item.key);
        let info = fit_text(&info, 1, tile);
        draw_text(&mut img, x0, ty + GLYPH_H * SCALE + 4, &info, 1, DIM_TEXT);
    }
    img
}

/// Copies `src` into `dst` at `(x, y)`, clipped.
fn blit(dst: &mut Rgb8Image, src: &Rgb8Image, x: u32, y: u32) {
    let w = src.width.min(dst.width.saturating_sub(x)) as usize;
    for row in 0..src.height.min(dst.height.saturating_sub(y)) {
        let s = (row * src.width) as usize * 3;
        let d = ((y + row) * dst.width + x) as usize * 3;
        dst.pixels[d..d + w * 3].copy_from_slice(&src.pixels[s..s + w * 3]);
    }
}

/// Encodes an RGB8 image as PNG (through `shardtool-image`, the crate that holds the codecs).
pub fn encode_png(img: &Rgb8Image) -> Result<Vec<u8>, String> {
    encode_png_rgb8(img).map_err(|e| format!("PNG encoding failed: {}", e.message))
}

/// The caption of a tile: the class name, led by its index where the font cannot draw all of
/// it (non-ASCII names would all read `?`), else the label, else "(no label)".
fn shown_class(class: Option<&str>, label: Option<i64>) -> String {
    match (class, label) {
        (Some(c), Some(l)) if !c.chars().all(|ch| (' '..='~').contains(&ch)) => format!("#{l} {c}"),
        (Some(c), _) => c.to_string(),
        (None, Some(l)) => format!("label {l}"),
        (None, None) => "(no label)".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn class_names_the_font_cannot_draw_are_led_by_their_index() {
        assert_eq!(shown_class(Some("dog"), Some(1)), "dog");
        assert_eq!(shown_class(Some("猫"), Some(2)), "#2 猫");
        assert_eq!(shown_class(Some("🐶"), Some(3)), "#3 🐶");
        assert_eq!(shown_class(None, Some(4)), "label 4");
        assert_eq!(shown_class(None, None), "(no label)");
    }

    #[test]
    fn choose_is_seeded_distinct_and_bounded() {
        let a = choose(100, 16, 7);
        assert_eq!(a, choose(100, 16, 7));
        assert_ne!(a, choose(100, 16, 8));
        assert_eq!(a.len(), 16);
        let set: HashSet<_> = a.iter().collect();
        assert_eq!(set.len(), 16);
        assert!(a.iter().all(|&i| i < 100));
        assert_eq!(choose(5, 16, 0).len(), 5);
        assert!(choose(0, 16, 0).is_empty());
        let big = choose(1 << 40, 8, 1);
        assert_eq!(big.len(), 8);
        assert_eq!(big, choose(1 << 40, 8, 1));
    }

    #[test]
    fn thumbnails_keep_aspect_and_never_enlarge() {
        let t = thumbnail(&[200; 300 * 150 * 3], 300, 150, 128).unwrap();
        assert_eq!((t.width, t.height), (128, 64));
        let t = thumbnail(&[9; 20 * 10 * 3], 20, 10, 128).unwrap();
        assert_eq!((t.width, t.height), (20, 10));
    }

    #[test]
    fn a_sheet_has_room_for_every_tile() {
        let item = PreviewItem {
            shard: "s".into(),
            key: "k".into(),
            label: Some(0),
            class: Some("a-long-class-name-that-is-cut".into()),
            width: 2,
            height: 2,
            error: None,
        };
        let picked: Vec<Picked> = (0..5)
            .map(|i| Picked {
                order: i,
                item: item.clone(),
                thumb: (i != 3).then(|| Rgb8Image::new(128, 60, vec![255; 128 * 60 * 3]).unwrap()),
            })
            .collect();
        let opts = PreviewOptions::default();
        let img = render("title", "sub", &picked, &opts);
        // 5 tiles: 3 columns, 2 rows.
        assert_eq!(img.width, (PAD + 3 * (128 + PAD)).max(320));
        assert_eq!(img.pixels.len(), (img.width * img.height * 3) as usize);
        let png = encode_png(&img).unwrap();
        assert_eq!(&png[1..4], b"PNG");
    }

    #[test]
    fn oversized_sheets_are_refused_before_any_work() {
        let opts = PreviewOptions {
            count: 1024,
            tile: 1024,
            ..PreviewOptions::default()
        };
        assert!(matches!(
            preview(Path::new("/nonexistent"), &opts),
            Err(VerifyError::Usage(_))
        ));
    }
}
