//! Small codec services for the crates that show or check images (verify, inspect, preview), so
//! that codecs stay in this crate: PNG output of an RGB8 image, an image's size read from its
//! header alone, and a one-off resize of RGB8 pixels.

use crate::codec::resize_pixels;
use crate::{ErrorKind, Filter, ImageError, SizePlan};
use fast_image_resize as fr;
use shardtool_core::Rgb8Image;

/// Encodes an RGB8 image as PNG (default compression: for sheets people look at, not for shards).
pub fn encode_png_rgb8(img: &Rgb8Image) -> Result<Vec<u8>, ImageError> {
    crate::codec::encode_png_with(img, image::codecs::png::CompressionType::Default)
}

/// The `(width, height)` an encoded image declares in its header, found by content and read
/// without decoding pixels (nothing is allocated by the declared size). `None` when the format is
/// unknown or the header is unreadable. Sizes are as stored, before any EXIF orientation.
pub fn probe_size(bytes: &[u8]) -> Option<(u32, u32)> {
    image::ImageReader::new(std::io::Cursor::new(bytes))
        .with_guessed_format()
        .ok()?
        .into_dimensions()
        .ok()
}

/// Whether `bytes` (a file's first few) begin, by their signature, as an image of a format
/// shardtool decodes (JPEG, PNG, WebP, GIF, BMP, TIFF; not the ICO or AVIF the crate knows too).
pub fn has_image_signature(bytes: &[u8]) -> bool {
    use image::ImageFormat as F;
    matches!(
        image::guess_format(bytes),
        Ok(F::Jpeg | F::Png | F::WebP | F::Gif | F::Bmp | F::Tiff)
    )
}

/// Resizes `width`×`height` RGB8 `pixels` as `plan` says (see [`crate::plan_size`]) with
/// `filter`.
pub fn resize_rgb8(
    pixels: &[u8],
    width: u32,
    height: u32,
    plan: &SizePlan,
    filter: Filter,
) -> Result<Rgb8Image, ImageError> {
    let expected = u64::from(width) * u64::from(height) * 3;
    if pixels.len() as u64 != expected {
        return Err(ImageError::new(
            ErrorKind::Resize,
            format!(
                "{} bytes of pixels for a {width}x{height} RGB8 image (expected {expected})",
                pixels.len()
            ),
        ));
    }
    resize_pixels(&mut fr::Resizer::new(), pixels, width, height, plan, filter)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{plan_size, transform, Encode, Output, Resize, TransformSpec};

    fn gradient(w: u32, h: u32) -> Rgb8Image {
        let pixels = (0..w * h)
            .flat_map(|i| [(i % w * 7) as u8, (i / w * 5) as u8, (i % 13) as u8])
            .collect();
        Rgb8Image::new(w, h, pixels).unwrap()
    }

    fn decode(bytes: &[u8]) -> Rgb8Image {
        let spec = TransformSpec {
            resize: Resize::None,
            encode: Encode::Raw,
            ..TransformSpec::default()
        };
        match transform(bytes, &spec).unwrap().output {
            Output::Pixels(p) => p,
            Output::Encoded { .. } => panic!("raw output expected"),
        }
    }

    #[test]
    fn png_round_trips_losslessly_and_its_header_gives_the_size() {
        let img = gradient(37, 11);
        let png = encode_png_rgb8(&img).unwrap();
        assert_eq!(&png[1..4], b"PNG");
        assert_eq!(probe_size(&png), Some((37, 11)));
        assert_eq!(decode(&png), img);
    }

    #[test]
    fn probe_reads_headers_only_and_rejects_garbage() {
        assert_eq!(probe_size(b"not an image at all"), None);
        assert_eq!(probe_size(&[]), None);
        let png = encode_png_rgb8(&gradient(5, 4)).unwrap();
        assert_eq!(probe_size(&png), Some((5, 4)));
        // Cut inside the header (signature + part of IHDR): no size.
        assert_eq!(probe_size(&png[..20]), None);
    }

    #[test]
    fn resize_follows_the_plan_and_checks_the_buffer() {
        let img = gradient(40, 20);
        let plan = plan_size(Resize::Fit(10, 10), false, 40, 20);
        let out = resize_rgb8(&img.pixels, 40, 20, &plan, Filter::CatmullRom).unwrap();
        assert_eq!((out.width, out.height), (plan.width, plan.height));
        assert_eq!((out.width, out.height), (10, 5));
        assert_eq!(out.pixels.len(), 10 * 5 * 3);
        let err = resize_rgb8(&img.pixels[1..], 40, 20, &plan, Filter::CatmullRom).unwrap_err();
        assert_eq!(err.kind, ErrorKind::Resize);
    }
}
