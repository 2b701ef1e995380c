//! EXIF orientation: reading the tag and applying it to RGB8 pixels.

use shardtool_core::Rgb8Image;
use std::io::Cursor;

/// An EXIF orientation value, 1..=8 (1 is "as stored").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Orientation(pub u8);

impl Orientation {
    /// Stored pixels are already upright.
    pub const NORMAL: Orientation = Orientation(1);

    /// Reads the orientation tag from an image container (JPEG, PNG, TIFF, WebP). Missing or
    /// invalid tags mean [`Orientation::NORMAL`]: a broken EXIF block never fails an image.
    pub fn read(bytes: &[u8]) -> Orientation {
        let Ok(exif) = exif::Reader::new().read_from_container(&mut Cursor::new(bytes)) else {
            return Orientation::NORMAL;
        };
        exif.get_field(exif::Tag::Orientation, exif::In::PRIMARY)
            .and_then(|f| f.value.get_uint(0))
            .and_then(|v| u8::try_from(v).ok())
            .filter(|v| (1..=8).contains(v))
            .map_or(Orientation::NORMAL, Orientation)
    }

    /// True for orientations 5..=8, which swap width and height.
    pub fn swaps_axes(self) -> bool {
        self.0 >= 5
    }
}

/// Returns the upright image for pixels stored with orientation `o`.
pub fn apply_orientation(img: Rgb8Image, o: Orientation) -> Rgb8Image {
    if o.0 <= 1 || o.0 > 8 {
        return img;
    }
    let (w, h) = (img.width as usize, img.height as usize);
    let (ow, oh) = if o.swaps_axes() { (h, w) } else { (w, h) };
    let src = &img.pixels;
    let mut out = vec![0u8; src.len()];
    for y in 0..oh {
        for x in 0..ow {
            // Where output pixel (x, y) comes from in the stored image.
            let (sx, sy) = match o.0 {
                2 => (w - 1 - x, y),
                3 => (w - 1 - x, h - 1 - y),
                4 => (x, h - 1 - y),
                5 => (y, x),
                6 => (y, h - 1 - x),
                7 => (w - 1 - y, h - 1 - x),
                _ => (w - 1 - y, x),
            };
            let s = (sy * w + sx) * 3;
            let d = (y * ow + x) * 3;
            out[d..d + 3].copy_from_slice(&src[s..s + 3]);
        }
    }
    Rgb8Image {
        width: ow as u32,
        height: oh as u32,
        pixels: out,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A 3×2 image whose pixel values encode their stored position.
    fn grid() -> Rgb8Image {
        let mut px = Vec::new();
        for y in 0..2u8 {
            for x in 0..3u8 {
                px.extend_from_slice(&[x, y, 10 * y + x]);
            }
        }
        Rgb8Image::new(3, 2, px).unwrap()
    }

    fn at(img: &Rgb8Image, x: usize, y: usize) -> u8 {
        img.pixels[(y * img.width as usize + x) * 3 + 2]
    }

    #[test]
    fn every_orientation_moves_the_corners_as_exif_says() {
        // Stored top-left = 0, top-right = 2, bottom-left = 10, bottom-right = 12.
        // Expected upright (top-left, top-right, bottom-left) per EXIF 1..8.
        let expect = [
            (1, 0, 2, 10),
            (2, 2, 0, 12),
            (3, 12, 10, 2),
            (4, 10, 12, 0),
            (5, 0, 10, 2),
            (6, 10, 0, 12),
            (7, 12, 2, 10),
            (8, 2, 12, 0),
        ];
        for (o, tl, tr, bl) in expect {
            let out = apply_orientation(grid(), Orientation(o));
            let (w, h) = (out.width as usize, out.height as usize);
            assert_eq!((w, h), if o >= 5 { (2, 3) } else { (3, 2) }, "o={o}");
            assert_eq!(
                (at(&out, 0, 0), at(&out, w - 1, 0), at(&out, 0, h - 1)),
                (tl, tr, bl),
                "orientation {o}"
            );
        }
    }

    #[test]
    fn garbage_has_normal_orientation() {
        assert_eq!(Orientation::read(b"not an image"), Orientation::NORMAL);
        assert_eq!(
            Orientation::read(&[0xFF, 0xD8, 0xFF, 0xE1, 0, 4]),
            Orientation::NORMAL
        );
    }
}
