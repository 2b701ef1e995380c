//! Decoding, resizing and encoding, with per-thread codec handles and per-stage timings.

use crate::geometry::{plan_size, SizePlan};
use crate::orient::{apply_orientation, Orientation};
use crate::{Encode, ErrorKind, Filter, ImageError, TransformSpec};
use fast_image_resize as fr;
use image::{DynamicImage, ImageDecoder, ImageFormat, ImageReader};
use shardtool_core::Rgb8Image;
use std::cell::RefCell;
use std::io::Cursor;
use std::time::{Duration, Instant};

/// Time spent in each stage of one transform.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Timings {
    /// Header parsing, decoding, orientation and colour conversion.
    pub decode: Duration,
    /// Resampling.
    pub resize: Duration,
    /// Encoding.
    pub encode: Duration,
}

impl std::ops::AddAssign for Timings {
    fn add_assign(&mut self, o: Self) {
        self.decode += o.decode;
        self.resize += o.resize;
        self.encode += o.encode;
    }
}

/// The transformed record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Output {
    /// Encoded bytes and their field name (`jpg` or `png`).
    Encoded {
        /// The file bytes.
        bytes: Vec<u8>,
        /// `jpg` or `png`.
        field: &'static str,
        /// True when the input bytes were stored unchanged (`--encode keep`).
        kept: bool,
    },
    /// RGB8 pixels (`Encode::Raw`).
    Pixels(Rgb8Image),
}

/// One transformed image with its sizes.
#[derive(Debug, Clone)]
pub struct Transformed {
    /// The record.
    pub output: Output,
    /// Width after EXIF orientation, before resizing (full resolution).
    pub orig_width: u32,
    /// Height after EXIF orientation, before resizing (full resolution).
    pub orig_height: u32,
    /// Output width.
    pub width: u32,
    /// Output height.
    pub height: u32,
    /// The EXIF orientation (2 to 8) the image was turned upright from; 1 when it was upright.
    pub orientation: u8,
    /// Where the time went.
    pub timings: Timings,
}

struct Codecs {
    decompressor: Option<turbojpeg::Decompressor>,
    compressor: Option<turbojpeg::Compressor>,
    resizer: fr::Resizer,
}

thread_local! {
    // libjpeg-turbo handles and resize scratch buffers are reused per thread: creating them per
    // image costs allocations on the hot path.
    static CODECS: RefCell<Codecs> = RefCell::new(Codecs {
        decompressor: turbojpeg::Decompressor::new().ok(),
        compressor: turbojpeg::Compressor::new().ok(),
        resizer: fr::Resizer::new(),
    });
}

/// Runs the whole image stage on one input's bytes.
pub fn transform(bytes: &[u8], spec: &TransformSpec) -> Result<Transformed, ImageError> {
    CODECS.with(|c| transform_with(&mut c.borrow_mut(), bytes, spec))
}

fn transform_with(
    codecs: &mut Codecs,
    bytes: &[u8],
    spec: &TransformSpec,
) -> Result<Transformed, ImageError> {
    let mut timings = Timings::default();
    let t0 = Instant::now();
    let format = image::guess_format(bytes).map_err(|_| {
        ImageError::new(
            ErrorKind::UnsupportedFormat,
            "not a supported image (no JPEG, PNG, WebP, GIF, BMP or TIFF signature)",
        )
    })?;
    let orientation = Orientation::read(bytes);
    let decoded = if format == ImageFormat::Jpeg {
        let decoded = decode_jpeg(codecs, bytes, spec, orientation);
        if decoded.is_err() {
            // A handle that failed on a stream keeps state of it that fails later good ones
            // (a bogus Huffman table, the previous frame's size): replaced after any error.
            codecs.decompressor = turbojpeg::Decompressor::new().ok();
        }
        decoded?
    } else {
        None
    };
    let Decoded {
        img,
        orig_w,
        orig_h,
        dct_scale,
        pristine,
    } = match decoded {
        Some(d) => d,
        None => {
            let (img, w, h) = decode_generic(bytes, format, spec, orientation)?;
            Decoded {
                img,
                orig_w: w,
                orig_h: h,
                dct_scale: 8,
                pristine: false,
            }
        }
    };
    timings.decode = t0.elapsed();

    let t1 = Instant::now();
    // Plan against the full-resolution upright size so that DCT-scaled decoding never changes
    // the output size, then map the source region onto the decoded pixels at the exact scale:
    // libjpeg-turbo rounds a scaled side up, so the last decoded column or row may stand for
    // less than a whole scaled pixel, and resampling all of them would shift the picture.
    let target = plan_size(spec.resize, spec.upscale, orig_w, orig_h);
    // Upscaling (`--upscale`, `crop:WxH`) may ask for far more pixels than the input has.
    let out_pixels = u64::from(target.width) * u64::from(target.height);
    if out_pixels > spec.limits.max_pixels {
        return Err(ImageError::new(
            ErrorKind::TooManyPixels,
            format!(
                "the output {}x{} would be {out_pixels} pixels, over the limit of {} (--max-pixels)",
                target.width, target.height, spec.limits.max_pixels
            ),
        ));
    }
    let s = f64::from(dct_scale) / 8.0;
    let exact = |side: u32| u64::from(side) * u64::from(dct_scale) % 8 == 0;
    let crop = match target.crop {
        Some((l, t, w, h)) => Some((l * s, t * s, w * s, h * s)),
        None if !(exact(orig_w) && exact(orig_h)) => {
            Some((0.0, 0.0, f64::from(orig_w) * s, f64::from(orig_h) * s))
        }
        None => None,
    };
    let plan = SizePlan { crop, ..target };
    let unchanged = plan.is_identity(img.width, img.height);
    let img = if unchanged {
        img
    } else {
        resize(&mut codecs.resizer, &img, &plan, spec.filter)?
    };
    timings.resize = t1.elapsed();

    let t2 = Instant::now();
    let (width, height) = (img.width, img.height);
    let output = match spec.encode {
        Encode::Raw => Output::Pixels(img),
        Encode::Keep if pristine && unchanged => Output::Encoded {
            bytes: bytes.to_vec(),
            field: "jpg",
            kept: true,
        },
        Encode::Jpeg | Encode::Keep => Output::Encoded {
            bytes: encode_jpeg(codecs, &img, spec.quality)?,
            field: "jpg",
            kept: false,
        },
        Encode::Png => Output::Encoded {
            bytes: encode_png(&img)?,
            field: "png",
            kept: false,
        },
    };
    timings.encode = t2.elapsed();
    Ok(Transformed {
        output,
        orig_width: orig_w,
        orig_height: orig_h,
        width,
        height,
        orientation: orientation.0.clamp(1, 8),
        timings,
    })
}

fn too_many(w: u64, h: u64, max: u64) -> ImageError {
    ImageError::new(
        ErrorKind::TooManyPixels,
        format!(
            "{w}x{h} is {} pixels, over the limit of {max} (--max-pixels)",
            w * h
        ),
    )
}

/// A decoded, upright image and the full-resolution size it stands for.
struct Decoded {
    img: Rgb8Image,
    /// Upright width at full resolution.
    orig_w: u32,
    /// Upright height at full resolution.
    orig_h: u32,
    /// The DCT scale M it was decoded at (M/8); 8 for full size.
    dct_scale: u8,
    /// True when the input bytes could be kept verbatim: a YCbCr JPEG, stored upright, decoded
    /// at full size.
    pristine: bool,
}

/// Decodes a JPEG with libjpeg-turbo. Returns `None` for JPEGs it cannot turn into RGB (CMYK),
/// which the generic path then handles.
fn decode_jpeg(
    codecs: &mut Codecs,
    bytes: &[u8],
    spec: &TransformSpec,
    orientation: Orientation,
) -> Result<Option<Decoded>, ImageError> {
    let Some(dec) = codecs.decompressor.as_mut() else {
        return Ok(None);
    };
    // libjpeg-turbo keeps the previous image's header when a stream has no frame, so the frame
    // header is found by our own bounded marker scan first.
    let (fw, fh) = jpeg_frame_size(bytes)
        .ok_or_else(|| ImageError::new(ErrorKind::Decode, "JPEG has no frame header"))?;
    let header = dec
        .read_header(bytes)
        .map_err(|e| ImageError::new(ErrorKind::Decode, format!("bad JPEG header: {e}")))?;
    let (w, h) = (header.width as u64, header.height as u64);
    check_jpeg_size((fw, fh), (w, h), spec.limits.max_pixels)?;
    if !matches!(
        header.colorspace,
        turbojpeg::Colorspace::YCbCr | turbojpeg::Colorspace::Gray | turbojpeg::Colorspace::RGB
    ) {
        return Ok(None);
    }
    let (ow, oh) = if orientation.swaps_axes() {
        (h, w)
    } else {
        (w, h)
    };
    let (ow, oh) = (ow as u32, oh as u32);
    // The decoded image must cover the target (for crop, the whole image at the crop's scale);
    // `spec.decode_scale` then picks how much of that shrinking the DCT does.
    let target = plan_size(spec.resize, spec.upscale, ow, oh);
    let need = match target.crop {
        Some((_, _, cw, ch)) => {
            let s = (f64::from(target.width) / cw).max(f64::from(target.height) / ch);
            ((f64::from(ow) * s).ceil(), (f64::from(oh) * s).ceil())
        }
        None => (f64::from(target.width), f64::from(target.height)),
    };
    let need = if orientation.swaps_axes() {
        (need.1, need.0)
    } else {
        need
    };
    let m = spec.decode_scale.dct_scale((w as u32, h as u32), need);
    let factor = turbojpeg::ScalingFactor::new(usize::from(m), 8);
    dec.set_scaling_factor(factor)
        .map_err(|e| ImageError::new(ErrorKind::Decode, format!("JPEG scaling: {e}")))?;
    let (sw, sh) = (factor.scale(w as usize), factor.scale(h as usize));
    // The largest allocation of a pack: past the memory the process may take (`ulimit -v`), an
    // error that stops the run rather than an abort.
    let len = sw * sh * 3;
    let mut pixels = pixel_room(len as u64)?;
    pixels.resize(len, 0);
    let image = turbojpeg::Image {
        pixels: pixels.as_mut_slice(),
        width: sw,
        pitch: sw * 3,
        height: sh,
        format: turbojpeg::PixelFormat::RGB,
    };
    let res = dec.decompress(bytes, image);
    // Leave the handle at full scale for the next image whatever happened.
    let _ = dec.set_scaling_factor(turbojpeg::ScalingFactor::ONE);
    res.map_err(|e| ImageError::new(ErrorKind::Decode, format!("corrupt JPEG: {e}")))?;
    let img = Rgb8Image {
        width: sw as u32,
        height: sh as u32,
        pixels,
    };
    let pristine = factor == turbojpeg::ScalingFactor::ONE
        && orientation == Orientation::NORMAL
        && header.colorspace == turbojpeg::Colorspace::YCbCr;
    Ok(Some(Decoded {
        img: apply_orientation(img, orientation),
        orig_w: ow,
        orig_h: oh,
        dct_scale: m,
        pristine,
    }))
}

/// Checks the size libjpeg-turbo read from a header (`read`) against the frame header our own
/// scan found (`frame`) and the pixel limit, before anything is allocated by it.
pub(crate) fn check_jpeg_size(
    frame: (u32, u32),
    read: (u64, u64),
    max_pixels: u64,
) -> Result<(), ImageError> {
    let ((fw, fh), (w, h)) = (frame, read);
    if w == 0 || h == 0 {
        return Err(ImageError::new(
            ErrorKind::Decode,
            "JPEG has a zero dimension",
        ));
    }
    if (w, h) != (u64::from(fw), u64::from(fh)) {
        return Err(ImageError::new(
            ErrorKind::Decode,
            format!("JPEG frame says {fw}x{fh} but the decoder read {w}x{h}"),
        ));
    }
    if w * h > max_pixels {
        return Err(too_many(w, h, max_pixels));
    }
    Ok(())
}

/// Width and height from the first SOF marker, scanning marker segments up to the first scan.
/// `None` when the stream ends, or a scan starts, before any frame header.
pub(crate) fn jpeg_frame_size(b: &[u8]) -> Option<(u32, u32)> {
    if b.get(..2)? != [0xFF, 0xD8] {
        return None;
    }
    let mut i = 2usize;
    loop {
        // Skip fill bytes before a marker.
        while *b.get(i)? == 0xFF && *b.get(i + 1)? == 0xFF {
            i += 1;
        }
        if *b.get(i)? != 0xFF {
            return None;
        }
        let marker = *b.get(i + 1)?;
        match marker {
            0xD8 | 0x01 | 0xD0..=0xD7 => {
                i += 2;
                continue;
            }
            0xD9 | 0xDA => return None,
            _ => {}
        }
        let len = usize::from(u16::from_be_bytes([*b.get(i + 2)?, *b.get(i + 3)?]));
        if len < 2 {
            return None;
        }
        let is_sof = matches!(marker, 0xC0..=0xCF) && !matches!(marker, 0xC4 | 0xC8 | 0xCC);
        if is_sof {
            let seg = b.get(i + 4..i + 2 + len)?;
            let h = u16::from_be_bytes([*seg.get(1)?, *seg.get(2)?]);
            let w = u16::from_be_bytes([*seg.get(3)?, *seg.get(4)?]);
            return Some((u32::from(w), u32::from(h)));
        }
        i += 2 + len;
    }
}

/// What a decoder may allocate besides the pixels: header chunks, tables, buffers.
const HEADER_ALLOC: u64 = 64 << 20;

fn decode_generic(
    bytes: &[u8],
    format: ImageFormat,
    spec: &TransformSpec,
    orientation: Orientation,
) -> Result<(Rgb8Image, u32, u32), ImageError> {
    let decode_err = |e: image::ImageError| match e {
        image::ImageError::Unsupported(u) => ImageError::new(
            ErrorKind::UnsupportedFormat,
            match u.kind() {
                // The crate names a sample layout it does not know by its bits per pixel alone
                // ("color type `Unknown(32)`"): float or 32-bit integer samples, mostly.
                image::error::UnsupportedErrorKind::Color(image::ExtendedColorType::Unknown(
                    bits,
                )) => format!(
                    "unsupported image: a {format:?} of {bits}-bit pixels the decoder cannot \
                     read (float or 32-bit integer samples, or an unusual layout); save it with \
                     8 or 16 bits per channel"
                ),
                _ => format!("unsupported image: {u}"),
            },
        ),
        image::ImageError::Limits(l) => ImageError::new(ErrorKind::TooManyPixels, l.to_string()),
        other => ImageError::new(
            ErrorKind::Decode,
            format!("cannot decode {format:?}: {other}"),
        ),
    };
    let reader = |max_alloc: u64| {
        let mut r = ImageReader::with_format(Cursor::new(bytes), format);
        let mut limits = image::Limits::default();
        limits.max_alloc = Some(max_alloc);
        r.limits(limits);
        r
    };
    // Check the header's size before allocating any pixels. What the header's chunks may take
    // (a PNG's compressed ICC profile or text) is bounded on its own, not by the largest image
    // allowed.
    let header = |r: ImageReader<Cursor<&[u8]>>| -> image::ImageResult<_> {
        let d = r.into_decoder()?;
        Ok((d.dimensions(), d.color_type()))
    };
    let ((w, h), color) = header(reader(HEADER_ALLOC)).map_err(|e| match e {
        image::ImageError::Limits(l) => ImageError::new(
            ErrorKind::Decode,
            format!("its header declares more than {HEADER_ALLOC} bytes of tables to read ({l})"),
        ),
        e => decode_err(e),
    })?;
    if w == 0 || h == 0 {
        return Err(ImageError::new(
            ErrorKind::Decode,
            "image has a zero dimension",
        ));
    }
    if u64::from(w) * u64::from(h) > spec.limits.max_pixels {
        return Err(too_many(w.into(), h.into(), spec.limits.max_pixels));
    }
    // Room for this image at 32-bit float RGBA (a TIFF's widest) plus the decoder's buffers.
    let max_alloc = (u64::from(w) * u64::from(h))
        .saturating_mul(16)
        .saturating_add(HEADER_ALLOC);
    reserve_for_decode(w, h, color, format)?;
    let dynimg = reader(max_alloc).decode().map_err(|e| match e {
        // The pixels fit the limit (checked above): a frame, strip or table the file declares
        // larger than its image asked for the rest. A damaged or hostile file.
        image::ImageError::Limits(l) => ImageError::new(
            ErrorKind::Decode,
            format!(
                "decoding its {w}x{h} pixels asks for more than {max_alloc} bytes: a frame, \
                 strip or table declared larger than the image ({l})"
            ),
        ),
        e => decode_err(e),
    })?;
    let img = to_rgb8(dynimg);
    let img = apply_orientation(img, orientation);
    let (w, h) = (img.width, img.height);
    Ok((img, w, h))
}

/// Checks that the decode of a `w`×`h` image of `color` and its conversion to RGB8 find memory
/// at once (reserved and given back): past the memory the process may take (`ulimit -v`), an
/// error that stops the run rather than an abort inside the decoder.
fn reserve_for_decode(
    w: u32,
    h: u32,
    color: image::ColorType,
    format: ImageFormat,
) -> Result<(), ImageError> {
    let px = u64::from(w) * u64::from(h);
    let decoded = px.saturating_mul(u64::from(color.bytes_per_pixel()));
    // The peak of the decode and conversion: an RGBA copy beside the decoded pixels, then the
    // RGB8 one beside that; TIFF and WebP decoders hold a buffer of their own beside the image.
    let peak = match color {
        image::ColorType::Rgb8 => decoded,
        image::ColorType::Rgba8 => decoded + 3 * px,
        c if c.has_alpha() => (decoded + 4 * px).max(7 * px),
        _ => decoded + 3 * px,
    };
    let len = match format {
        ImageFormat::Tiff | ImageFormat::WebP => peak.saturating_add(decoded),
        _ => peak,
    };
    pixel_room(len).map(drop)
}

/// An empty buffer with room for `len` bytes of decoded pixels; where the memory the process
/// may take (`ulimit -v`) has none, the error that stops the run (an abort otherwise).
fn pixel_room(len: u64) -> Result<Vec<u8>, ImageError> {
    let mut room = Vec::new();
    match usize::try_from(len).map(|n| room.try_reserve_exact(n)) {
        Ok(Ok(())) => Ok(room),
        _ => Err(ImageError::new(
            ErrorKind::OutOfMemory,
            format!("no memory for the {len} bytes of its decoded pixels"),
        )),
    }
}

/// Converts any decoded image to RGB8. Alpha is flattened onto white
/// (`c' = (c·a + 255·(255 − a)) / 255`, rounded), because transparent regions of product photos
/// and icons are meant to look like paper, not like black. 16-bit channels are rounded to 8 bits.
fn to_rgb8(img: DynamicImage) -> Rgb8Image {
    let (w, h) = (img.width(), img.height());
    let pixels = if img.color().has_alpha() {
        let rgba = img.into_rgba8();
        let mut out = Vec::with_capacity(w as usize * h as usize * 3);
        for p in rgba.pixels() {
            let a = u32::from(p[3]);
            for c in &p.0[..3] {
                out.push(((u32::from(*c) * a + 255 * (255 - a) + 127) / 255) as u8);
            }
        }
        out
    } else {
        img.into_rgb8().into_raw()
    };
    Rgb8Image {
        width: w,
        height: h,
        pixels,
    }
}

fn resize(
    resizer: &mut fr::Resizer,
    img: &Rgb8Image,
    plan: &SizePlan,
    filter: Filter,
) -> Result<Rgb8Image, ImageError> {
    resize_pixels(resizer, &img.pixels, img.width, img.height, plan, filter)
}

pub(crate) fn resize_pixels(
    resizer: &mut fr::Resizer,
    pixels: &[u8],
    width: u32,
    height: u32,
    plan: &SizePlan,
    filter: Filter,
) -> Result<Rgb8Image, ImageError> {
    let err = |e: &dyn std::fmt::Display| ImageError::new(ErrorKind::Resize, e.to_string());
    let src = fr::images::ImageRef::new(width, height, pixels, fr::PixelType::U8x3)
        .map_err(|e| err(&e))?;
    let mut dst = fr::images::Image::new(plan.width, plan.height, fr::PixelType::U8x3);
    let alg = fr::ResizeAlg::Convolution(match filter {
        Filter::CatmullRom => fr::FilterType::CatmullRom,
        Filter::Lanczos3 => fr::FilterType::Lanczos3,
        Filter::Bilinear => fr::FilterType::Bilinear,
    });
    let mut opts = fr::ResizeOptions::new().resize_alg(alg);
    if let Some((l, t, w, h)) = plan.crop {
        opts = opts.crop(l, t, w, h);
    }
    resizer.resize(&src, &mut dst, &opts).map_err(|e| err(&e))?;
    Ok(Rgb8Image {
        width: plan.width,
        height: plan.height,
        pixels: dst.into_vec(),
    })
}

fn encode_jpeg(codecs: &mut Codecs, img: &Rgb8Image, quality: u8) -> Result<Vec<u8>, ImageError> {
    let err = |e: turbojpeg::Error| ImageError::new(ErrorKind::Encode, format!("JPEG encode: {e}"));
    let c = codecs.compressor.as_mut().ok_or_else(|| {
        ImageError::new(ErrorKind::Encode, "libjpeg-turbo compressor unavailable")
    })?;
    c.set_quality(i32::from(quality.clamp(1, 100)))
        .map_err(err)?;
    c.set_subsamp(turbojpeg::Subsamp::Sub2x2).map_err(err)?;
    let image = turbojpeg::Image {
        pixels: img.pixels.as_slice(),
        width: img.width as usize,
        pitch: img.width as usize * 3,
        height: img.height as usize,
        format: turbojpeg::PixelFormat::RGB,
    };
    let encoded = c.compress_to_vec(image).map_err(err);
    if encoded.is_err() {
        codecs.compressor = turbojpeg::Compressor::new().ok();
    }
    encoded
}

fn encode_png(img: &Rgb8Image) -> Result<Vec<u8>, ImageError> {
    encode_png_with(img, image::codecs::png::CompressionType::Fast)
}

/// PNG of an RGB8 image at the given compression (adaptive filtering).
pub(crate) fn encode_png_with(
    img: &Rgb8Image,
    compression: image::codecs::png::CompressionType,
) -> Result<Vec<u8>, ImageError> {
    use image::codecs::png::{FilterType, PngEncoder};
    use image::ImageEncoder;
    let mut out = Vec::new();
    PngEncoder::new_with_quality(&mut out, compression, FilterType::Adaptive)
        .write_image(
            &img.pixels,
            img.width,
            img.height,
            image::ExtendedColorType::Rgb8,
        )
        .map_err(|e| ImageError::new(ErrorKind::Encode, format!("PNG encode: {e}")))?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::{jpeg_frame_size, transform, ErrorKind, TransformSpec};

    #[test]
    fn frame_size_needs_a_frame_header() {
        assert_eq!(jpeg_frame_size(&[0xFF, 0xD8, 0xFF, 0xD9]), None);
        assert_eq!(jpeg_frame_size(b"not a jpeg"), None);
        assert_eq!(jpeg_frame_size(&[0xFF, 0xD8, 0xFF, 0xC0, 0x00]), None);
        // SOI, APP0 (len 4), SOF0 (len 11: precision, h=2, w=3, ...).
        let jpeg = [
            0xFF, 0xD8, 0xFF, 0xE0, 0x00, 0x04, 0x00, 0x00, 0xFF, 0xC0, 0x00, 0x0B, 0x08, 0x00,
            0x02, 0x00, 0x03, 0x01, 0x01, 0x11, 0x00,
        ];
        assert_eq!(jpeg_frame_size(&jpeg), Some((3, 2)));
    }

    #[test]
    fn a_frame_larger_than_its_image_is_a_damaged_file_named_as_such() {
        // A 1x1 GIF (a two-colour table) whose one frame declares 65535x65535.
        let mut gif = b"GIF89a\x01\x00\x01\x00\x80\x00\x00\x00\x00\x00\xff\xff\xff".to_vec();
        gif.extend_from_slice(b"\x2c\x00\x00\x00\x00\xff\xff\xff\xff\x00");
        gif.extend_from_slice(b"\x02\x02\x4c\x01\x00\x3b");
        let e = transform(&gif, &TransformSpec::default()).unwrap_err();
        assert_eq!(e.kind, ErrorKind::Decode, "{e}");
        assert!(
            e.to_string().contains("1x1 pixels asks for more than"),
            "{e}"
        );
        assert!(
            e.to_string().contains("declared larger than the image"),
            "{e}"
        );
    }
}
