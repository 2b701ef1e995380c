//! Train-time crops: a region of an image resized straight into a caller's buffer, flipped if
//! asked. For JPEG the crop is fused with decoding: libjpeg-turbo scales in the DCT domain and
//! decodes only the rows and MCU columns the region needs, stopping after its last row.

use crate::geometry::smallest_dct_scale;
use crate::{ErrorKind, Filter, ImageError, TransformSpec};
use fast_image_resize as fr;
use shardtool_core::Limits;
use std::cell::RefCell;

/// A region of the upright source image in source pixels; fractional for centre crops.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CropBox {
    /// Left edge.
    pub x: f64,
    /// Top edge.
    pub y: f64,
    /// Width.
    pub w: f64,
    /// Height.
    pub h: f64,
}

/// Where a crop goes and how it is made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CropOptions {
    /// Output width.
    pub width: u32,
    /// Output height.
    pub height: u32,
    /// Mirror the output left to right.
    pub flip: bool,
    /// Resampling filter.
    pub filter: Filter,
    /// Decode only the region (and DCT-scale) for JPEG. Off decodes every pixel at full size and
    /// crops afterwards: the reference the fused path is tested and benchmarked against.
    pub fused: bool,
}

/// How one crop was made.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CropReport {
    /// The upright source size the box was chosen on.
    pub source: (u32, u32),
    /// The box.
    pub crop: CropBox,
    /// libjpeg-turbo's DCT scale numerator (the image was decoded at `dct_scale`/8); 8 when not
    /// scaled or not a JPEG.
    pub dct_scale: u8,
    /// True when libjpeg-turbo decoded only the region.
    pub region_decoded: bool,
}

/// The smallest DCT scale M (decoding at M/8) that keeps the scaled box at least twice the
/// output in both directions (a reducing gap of 2, so the resampler still does the last step);
/// 8 when even full size is smaller.
pub fn dct_scale_for(crop: &CropBox, out_w: u32, out_h: u32) -> u8 {
    smallest_dct_scale(1..=8, (2, 1), (f64::from(out_w), f64::from(out_h)), |m| {
        let s = f64::from(m) / 8.0;
        (crop.w * s, crop.h * s)
    })
}

struct CropCodecs {
    jpeg: Option<tj::Decoder>,
    scratch: Vec<u8>,
    row: Vec<u8>,
    resizer: fr::Resizer,
}

thread_local! {
    static CROP: RefCell<CropCodecs> = RefCell::new(CropCodecs {
        jpeg: tj::Decoder::new(),
        scratch: Vec::new(),
        row: Vec::new(),
        resizer: fr::Resizer::new(),
    });
}

/// Decodes the region of `bytes` that `choose(width, height)` picks on the upright image and
/// resizes it into `out` (`options.width × options.height` RGB8, exactly that many bytes).
pub fn decode_crop_into(
    bytes: &[u8],
    limits: &Limits,
    choose: impl Fn(u32, u32) -> CropBox,
    options: &CropOptions,
    out: &mut [u8],
) -> Result<CropReport, ImageError> {
    check_out(options, out)?;
    CROP.with(|c| {
        let c = &mut *c.borrow_mut();
        if let Some(dec) = c.jpeg.as_mut() {
            let fused = match dec.region(bytes, limits, &choose, options) {
                Ok(Some(region)) => dec
                    .decode(bytes, &region, &mut c.scratch)
                    .map(|decoded| Some((region, decoded))),
                other => other.map(|_| None),
            };
            let fused = match fused {
                Ok(f) => f,
                Err(e) => {
                    // A handle that failed on a stream keeps state of it that fails later good
                    // ones (a bogus Huffman table): it is replaced after any error.
                    c.jpeg = tj::Decoder::new();
                    return Err(e);
                }
            };
            if let Some((region, decoded)) = fused {
                let report = CropReport {
                    source: region.source,
                    crop: region.crop,
                    dct_scale: region.scale,
                    region_decoded: options.fused,
                };
                resize_into(
                    &mut c.resizer,
                    &mut c.row,
                    decoded,
                    region.in_region(),
                    options,
                    out,
                )?;
                return Ok(report);
            }
        }
        // Everything else: the full decode of the pack path (any format, EXIF orientation).
        let spec = TransformSpec {
            encode: crate::Encode::Raw,
            limits: *limits,
            ..TransformSpec::default()
        };
        let t = crate::transform(bytes, &spec)?;
        let crate::Output::Pixels(img) = t.output else {
            return Err(ImageError::new(
                ErrorKind::Decode,
                "decoder returned encoded bytes",
            ));
        };
        let crop = choose(img.width, img.height);
        let src = Pixels {
            bytes: &img.pixels,
            width: img.width,
            height: img.height,
        };
        resize_into(&mut c.resizer, &mut c.row, src, crop, options, out)?;
        Ok(CropReport {
            source: (img.width, img.height),
            crop,
            dct_scale: 8,
            region_decoded: false,
        })
    })
}

/// Crops `crop` out of `width × height` RGB8 `pixels` (a packed record) and resizes it into `out`.
pub fn crop_pixels_into(
    pixels: &[u8],
    width: u32,
    height: u32,
    crop: CropBox,
    options: &CropOptions,
    out: &mut [u8],
) -> Result<(), ImageError> {
    check_out(options, out)?;
    if pixels.len() as u64 != u64::from(width) * u64::from(height) * 3 {
        return Err(ImageError::new(
            ErrorKind::Decode,
            format!(
                "{} bytes of pixels for a {width}x{height} RGB8 record",
                pixels.len()
            ),
        ));
    }
    let src = Pixels {
        bytes: pixels,
        width,
        height,
    };
    CROP.with(|c| {
        let c = &mut *c.borrow_mut();
        resize_into(&mut c.resizer, &mut c.row, src, crop, options, out)
    })
}

fn check_out(options: &CropOptions, out: &[u8]) -> Result<(), ImageError> {
    let need = u64::from(options.width) * u64::from(options.height) * 3;
    if options.width == 0 || options.height == 0 || out.len() as u64 != need {
        return Err(ImageError::new(
            ErrorKind::Resize,
            format!(
                "output of {} bytes for a {}x{} RGB8 crop",
                out.len(),
                options.width,
                options.height
            ),
        ));
    }
    Ok(())
}

#[derive(Clone, Copy)]
struct Pixels<'a> {
    bytes: &'a [u8],
    width: u32,
    height: u32,
}

/// Resizes `crop` of `src` into `out` with `fast_image_resize` (no intermediate image), then
/// mirrors the rows in place while they are still in cache.
fn resize_into(
    resizer: &mut fr::Resizer,
    row: &mut Vec<u8>,
    src: Pixels<'_>,
    crop: CropBox,
    options: &CropOptions,
    out: &mut [u8],
) -> Result<(), ImageError> {
    let err = |e: &dyn std::fmt::Display| ImageError::new(ErrorKind::Resize, e.to_string());
    let crop = clamp_box(crop, src.width, src.height);
    let src_img = fr::images::ImageRef::new(src.width, src.height, src.bytes, fr::PixelType::U8x3)
        .map_err(|e| err(&e))?;
    let mut dst =
        fr::images::Image::from_slice_u8(options.width, options.height, out, fr::PixelType::U8x3)
            .map_err(|e| err(&e))?;
    let alg = fr::ResizeAlg::Convolution(match options.filter {
        Filter::Bilinear => fr::FilterType::Bilinear,
        Filter::CatmullRom => fr::FilterType::CatmullRom,
        Filter::Lanczos3 => fr::FilterType::Lanczos3,
    });
    let opts = fr::ResizeOptions::new()
        .resize_alg(alg)
        .crop(crop.x, crop.y, crop.w, crop.h);
    resizer
        .resize(&src_img, &mut dst, &opts)
        .map_err(|e| err(&e))?;
    if options.flip {
        for line in out.chunks_exact_mut(options.width as usize * 3) {
            flip_row(line, row);
        }
    }
    Ok(())
}

/// Mirrors an RGB8 row, four pixels (12 bytes) per step through a copy of it in `tmp`: a
/// pixel-by-pixel swap took more than twice as long, a noticeable share of a 224x224 crop.
fn flip_row(row: &mut [u8], tmp: &mut Vec<u8>) {
    tmp.clear();
    tmp.extend_from_slice(row);
    let n = row.len() / 3;
    let mut i = 0;
    while i + 4 <= n {
        let s = 3 * (n - 4 - i);
        row[3 * i..3 * i + 12].copy_from_slice(&reverse4(&tmp[s..s + 12]));
        i += 4;
    }
    while i < n {
        let s = 3 * (n - 1 - i);
        row[3 * i..3 * i + 3].copy_from_slice(&tmp[s..s + 3]);
        i += 1;
    }
}

/// Four RGB pixels in reverse order, moved as one 96-bit integer.
fn reverse4(px: &[u8]) -> [u8; 12] {
    let mut wide = [0u8; 16];
    wide[..12].copy_from_slice(&px[..12]);
    let v = u128::from_le_bytes(wide);
    let m = 0xFF_FFFF;
    let r = ((v >> 72) & m) | (((v >> 48) & m) << 24) | (((v >> 24) & m) << 48) | ((v & m) << 72);
    let mut out = [0u8; 12];
    out.copy_from_slice(&r.to_le_bytes()[..12]);
    out
}

/// Keeps a box inside the image and at least a pixel wide, whatever rounding did.
fn clamp_box(b: CropBox, width: u32, height: u32) -> CropBox {
    let (w, h) = (f64::from(width), f64::from(height));
    let x = b.x.clamp(0.0, w - 1.0);
    let y = b.y.clamp(0.0, h - 1.0);
    CropBox {
        x,
        y,
        w: b.w.clamp(1.0, w - x),
        h: b.h.clamp(1.0, h - y),
    }
}

/// What libjpeg-turbo is asked to decode for one crop.
struct Region {
    source: (u32, u32),
    crop: CropBox,
    scale: u8,
    // In scaled pixels: the decoded rectangle, x on an MCU boundary.
    x: u32,
    y: u32,
    w: u32,
    h: u32,
}

impl Region {
    /// The crop box in the decoded rectangle's pixels.
    fn in_region(&self) -> CropBox {
        let s = f64::from(self.scale) / 8.0;
        CropBox {
            x: self.crop.x * s - f64::from(self.x),
            y: self.crop.y * s - f64::from(self.y),
            w: self.crop.w * s,
            h: self.crop.h * s,
        }
    }
}

/// libjpeg-turbo's TurboJPEG 3 decompressor, for the calls the `turbojpeg` crate does not wrap
/// (cropping regions). The only `unsafe` of this crate.
#[allow(unsafe_code)]
mod tj {
    use super::{CropBox, CropOptions, Pixels, Region};
    use crate::codec::{check_jpeg_size, jpeg_frame_size};
    use crate::geometry::dct_scaled as scaled;
    use crate::orient::Orientation;
    use crate::{ErrorKind, ImageError};
    use shardtool_core::Limits;
    use std::ffi::{c_int, CStr};
    use std::ptr::NonNull;
    use turbojpeg_sys as sys;

    /// MCU width in pixels per chroma subsampling (`tjMCUWidth`: 4:4:4, 4:2:2, 4:2:0, gray,
    /// 4:4:0, 4:1:1, 4:4:1).
    const MCU_WIDTH: [u32; 7] = [8, 16, 16, 8, 8, 32, 8];

    /// An owned `tjhandle`.
    pub(super) struct Decoder(NonNull<std::ffi::c_void>);

    impl Drop for Decoder {
        fn drop(&mut self) {
            // SAFETY: the handle came from tj3Init and is destroyed once.
            unsafe { sys::tj3Destroy(self.0.as_ptr()) }
        }
    }

    impl Decoder {
        pub(super) fn new() -> Option<Self> {
            // SAFETY: tj3Init has no preconditions; null means failure.
            NonNull::new(unsafe { sys::tj3Init(sys::TJINIT_TJINIT_DECOMPRESS as c_int) }).map(Self)
        }

        fn error(&self, what: &str) -> ImageError {
            // SAFETY: the handle is live; the string is owned by it and copied at once.
            let msg = unsafe { CStr::from_ptr(sys::tj3GetErrorStr(self.0.as_ptr())) };
            ImageError::new(
                ErrorKind::Decode,
                format!("{what}: {}", msg.to_string_lossy()),
            )
        }

        fn get(&self, param: sys::TJPARAM) -> c_int {
            // SAFETY: the handle is live; tj3Get only reads it.
            unsafe { sys::tj3Get(self.0.as_ptr(), param as c_int) }
        }

        /// Reads the header and plans the region for `choose`'s box; `None` when the fused path
        /// does not apply (EXIF rotation, CMYK, lossless, an unknown subsampling, not a JPEG).
        pub(super) fn region(
            &mut self,
            bytes: &[u8],
            limits: &Limits,
            choose: impl Fn(u32, u32) -> CropBox,
            options: &CropOptions,
        ) -> Result<Option<Region>, ImageError> {
            if !bytes.starts_with(&[0xFF, 0xD8]) || Orientation::read(bytes) != Orientation::NORMAL
            {
                return Ok(None);
            }
            // libjpeg-turbo keeps the previous header when a stream has none: scan first.
            let (fw, fh) = jpeg_frame_size(bytes)
                .ok_or_else(|| ImageError::new(ErrorKind::Decode, "JPEG has no frame header"))?;
            // SAFETY: the pointer and length describe `bytes`, which outlives the call.
            let rc = unsafe {
                sys::tj3DecompressHeader(
                    self.0.as_ptr(),
                    bytes.as_ptr(),
                    bytes.len() as sys::size_t,
                )
            };
            if rc != 0 {
                return Err(self.error("bad JPEG header"));
            }
            let w = self.get(sys::TJPARAM_TJPARAM_JPEGWIDTH);
            let h = self.get(sys::TJPARAM_TJPARAM_JPEGHEIGHT);
            // Negative values (never from libjpeg-turbo) read as zero, which the check refuses.
            let (w, h) = (u32::try_from(w).unwrap_or(0), u32::try_from(h).unwrap_or(0));
            check_jpeg_size((fw, fh), (w.into(), h.into()), limits.max_pixels)?;
            let colorspace = self.get(sys::TJPARAM_TJPARAM_COLORSPACE);
            let subsamp = self.get(sys::TJPARAM_TJPARAM_SUBSAMP);
            let ok_colorspace = [
                sys::TJCS_TJCS_YCbCr,
                sys::TJCS_TJCS_GRAY,
                sys::TJCS_TJCS_RGB,
            ]
            .iter()
            .any(|&c| c as c_int == colorspace);
            let Some(&mcu) = usize::try_from(subsamp).ok().and_then(|s| MCU_WIDTH.get(s)) else {
                return Ok(None);
            };
            if !ok_colorspace || self.get(sys::TJPARAM_TJPARAM_LOSSLESS) != 0 {
                return Ok(None);
            }
            let crop = super::clamp_box(choose(w, h), w, h);
            let m = if options.fused {
                super::dct_scale_for(&crop, options.width, options.height)
            } else {
                8
            };
            let (sw, sh) = (scaled(w, m), scaled(h, m));
            let s = f64::from(m) / 8.0;
            let region = if options.fused {
                let smcu = scaled(mcu, m).max(1);
                let x0 = ((crop.x * s).floor() as u32).min(sw - 1);
                let x0 = x0 - x0 % smcu;
                let y0 = ((crop.y * s).floor() as u32).min(sh - 1);
                let x1 = (((crop.x + crop.w) * s).ceil() as u32).clamp(x0 + 1, sw);
                let y1 = (((crop.y + crop.h) * s).ceil() as u32).clamp(y0 + 1, sh);
                (x0, y0, x1 - x0, y1 - y0)
            } else {
                (0, 0, sw, sh)
            };
            Ok(Some(Region {
                source: (w, h),
                crop,
                scale: m,
                x: region.0,
                y: region.1,
                w: region.2,
                h: region.3,
            }))
        }

        /// Decodes `region` of `bytes` into `scratch` (grown as needed, within the pixel limit
        /// already checked) and returns the decoded rectangle.
        pub(super) fn decode<'s>(
            &mut self,
            bytes: &[u8],
            r: &Region,
            scratch: &'s mut Vec<u8>,
        ) -> Result<Pixels<'s>, ImageError> {
            let len = r.w as usize * r.h as usize * 3;
            if scratch.len() < len {
                scratch.resize(len, 0);
            }
            let whole = r.x == 0
                && r.y == 0
                && (r.w, r.h) == (scaled(r.source.0, r.scale), scaled(r.source.1, r.scale));
            let region = if whole {
                sys::tjregion {
                    x: 0,
                    y: 0,
                    w: 0,
                    h: 0,
                }
            } else {
                sys::tjregion {
                    x: r.x as c_int,
                    y: r.y as c_int,
                    w: r.w as c_int,
                    h: r.h as c_int,
                }
            };
            // libjpeg-turbo lists its factors in lowest terms (1/1, 7/8, 3/4, …, 1/8).
            let g = c_int::from(r.scale & r.scale.wrapping_neg()).min(8);
            let factor = sys::tjscalingfactor {
                num: c_int::from(r.scale) / g,
                denom: 8 / g,
            };
            let h = self.0.as_ptr();
            // SAFETY: the handle is live and holds this image's header (read by `region`); the
            // destination has `r.h` rows of `r.w * 3` bytes, which is what libjpeg-turbo writes
            // for the region at this scale; the source slice outlives the call.
            let rc = unsafe {
                if sys::tj3SetScalingFactor(h, factor) != 0
                    || sys::tj3SetCroppingRegion(h, region) != 0
                {
                    -1
                } else {
                    sys::tj3Decompress8(
                        h,
                        bytes.as_ptr(),
                        bytes.len() as sys::size_t,
                        scratch.as_mut_ptr(),
                        (r.w * 3) as c_int,
                        sys::TJPF_TJPF_RGB as c_int,
                    )
                }
            };
            let result = if rc != 0 {
                Err(self.error("corrupt JPEG"))
            } else {
                Ok(Pixels {
                    bytes: &scratch[..len],
                    width: r.w,
                    height: r.h,
                })
            };
            // Leave the handle uncropped at full scale for the next image, whatever happened.
            // SAFETY: the handle is live; these calls only reset parameters.
            unsafe {
                sys::tj3SetCroppingRegion(
                    h,
                    sys::tjregion {
                        x: 0,
                        y: 0,
                        w: 0,
                        h: 0,
                    },
                );
                sys::tj3SetScalingFactor(h, sys::tjscalingfactor { num: 1, denom: 1 });
            }
            result
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dct_scale_keeps_a_reducing_gap_of_two() {
        let b = |w, h| CropBox {
            x: 0.0,
            y: 0.0,
            w,
            h,
        };
        assert_eq!(dct_scale_for(&b(256.0, 256.0), 224, 224), 8);
        assert_eq!(dct_scale_for(&b(3584.0, 3584.0), 224, 224), 1);
        // 1000 px: 4/8 gives 500 ≥ 448, 3/8 gives 375 < 448.
        assert_eq!(dct_scale_for(&b(1000.0, 1000.0), 224, 224), 4);
        // The smaller side decides.
        assert_eq!(dct_scale_for(&b(4000.0, 1000.0), 224, 224), 4);
        // Fractional boxes, compared with the rule written out: the smallest M with the box at
        // M/8 at least twice the output on both sides.
        for (w, h, ow, oh) in [
            (999.5, 700.25, 224, 224),
            (333.3, 4000.0, 100, 64),
            (1.5, 1.5, 1, 1),
        ] {
            let want = (1..=8u8)
                .find(|&m| {
                    let s = f64::from(m) / 8.0;
                    w * s >= 2.0 * f64::from(ow) && h * s >= 2.0 * f64::from(oh)
                })
                .unwrap_or(8);
            assert_eq!(
                dct_scale_for(&b(w, h), ow, oh),
                want,
                "{w}x{h} to {ow}x{oh}"
            );
        }
    }

    #[test]
    fn flip_mirrors_pixels_not_channels() {
        let mut tmp = Vec::new();
        let mut row = vec![1, 2, 3, 4, 5, 6, 7, 8, 9];
        flip_row(&mut row, &mut tmp);
        assert_eq!(row, vec![7, 8, 9, 4, 5, 6, 1, 2, 3]);
        // Every width, including those that are not a multiple of the four-pixel step.
        for n in 0..20usize {
            let px: Vec<[u8; 3]> = (0..n)
                .map(|i| [i as u8, 100 + i as u8, 200 + i as u8])
                .collect();
            let mut row = px.concat();
            flip_row(&mut row, &mut tmp);
            let want: Vec<u8> = px.iter().rev().flatten().copied().collect();
            assert_eq!(row, want, "{n} pixels");
        }
    }

    #[test]
    fn boxes_are_kept_inside_the_image() {
        let c = clamp_box(
            CropBox {
                x: -1.0,
                y: 5.0,
                w: 50.0,
                h: 0.2,
            },
            20,
            10,
        );
        assert_eq!((c.x, c.y, c.w, c.h), (0.0, 5.0, 20.0, 1.0));
    }
}
