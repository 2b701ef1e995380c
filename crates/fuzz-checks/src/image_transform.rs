//! The `image_transform` fuzz target's check.

use shardtool_core::Limits;
use shardtool_image::{transform, Encode, Output, Resize, TransformSpec};

/// A quarter megapixel (512x512): far above any seed, and small enough that executions go to
/// parsing rather than to clearing and resizing big canvases (the code is the same at any size;
/// under four megapixels, 8% of the corpus took 93% of the time).
const MAX_PIXELS: u64 = 1 << 18;

/// `shardtool_image::transform` on arbitrary bytes, under a small pixel limit.
///
/// Invariant under test: decoding untrusted images never panics, never exceeds `max_pixels`, and a
/// successful transform yields an output of the planned size. The input length picks one of three
/// specs so that the resize, crop and every encoder are reached without a format prefix.
pub fn image_transform(data: &[u8]) {
    let limits = Limits {
        max_pixels: MAX_PIXELS,
        ..Limits::default()
    };
    let (resize, encode) = match data.len() % 3 {
        0 => (Resize::Shorter(64), Encode::Jpeg),
        1 => (Resize::Crop(48, 48), Encode::Raw),
        _ => (Resize::Fit(64, 64), Encode::Png),
    };
    let spec = TransformSpec {
        resize,
        encode,
        quality: 80,
        limits,
        ..TransformSpec::default()
    };
    let Ok(t) = transform(data, &spec) else {
        return;
    };
    assert!(u64::from(t.orig_width) * u64::from(t.orig_height) <= MAX_PIXELS);
    assert!(t.width >= 1 && t.height >= 1);
    if let Resize::Crop(w, h) = resize {
        assert_eq!((t.width, t.height), (w, h));
    } else {
        // No upscaling: the output never exceeds the input.
        assert!(t.width <= t.orig_width && t.height <= t.orig_height);
    }
    match t.output {
        Output::Pixels(img) => {
            assert_eq!((img.width, img.height), (t.width, t.height));
            assert_eq!(img.pixels.len() as u64, img.pixel_count() * 3);
        }
        Output::Encoded { bytes, .. } => assert!(!bytes.is_empty()),
    }
}
