//! The `crop` fuzz target's check.

use shardtool_core::Limits;
use shardtool_image::{decode_crop_into, CropBox, CropOptions, Filter};

/// A quarter megapixel (512x512): far above any seed, and small enough that executions go to
/// parsing rather than to clearing and resizing big canvases (the code is the same at any size;
/// under four megapixels, 8% of the corpus took 93% of the time).
const MAX_PIXELS: u64 = 1 << 18;

/// `shardtool_image::decode_crop_into` (the reader's fused JPEG crop) on arbitrary bytes.
///
/// Invariant under test: untrusted images never panic the crop path, never exceed `max_pixels`,
/// and every box the reader could ask for (any position, size and DCT scale) stays inside the
/// buffers. The first eight bytes choose the box and options; the rest is the image.
pub fn crop(data: &[u8]) {
    let Some((head, image)) = data.split_first_chunk::<8>() else {
        return;
    };
    let limits = Limits {
        max_pixels: MAX_PIXELS,
        ..Limits::default()
    };
    let side = u32::from(head[0] % 64) + 1;
    let options = CropOptions {
        width: side,
        height: side,
        flip: head[1] & 1 == 1,
        filter: Filter::Bilinear,
        fused: head[1] & 2 == 0,
    };
    // Fractions of the image, so boxes land anywhere, including edges and beyond them.
    let f = |b: u8| f64::from(b) / 200.0;
    let choose = |w: u32, h: u32| {
        assert!(u64::from(w) * u64::from(h) <= MAX_PIXELS);
        let (w, h) = (f64::from(w), f64::from(h));
        CropBox {
            x: f(head[2]) * w,
            y: f(head[3]) * h,
            w: f(head[4]) * w + f64::from(head[6]),
            h: f(head[5]) * h + f64::from(head[7]),
        }
    };
    let mut out = vec![0u8; (side * side * 3) as usize];
    if let Ok(r) = decode_crop_into(image, &limits, choose, &options, &mut out) {
        assert!((1..=8).contains(&r.dct_scale));
        assert!(u64::from(r.source.0) * u64::from(r.source.1) <= MAX_PIXELS);
    }
}
