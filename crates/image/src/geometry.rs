//! Output sizes, crop boxes and DCT scales. Pure arithmetic, so it is tested exhaustively without
//! images.
//!
//! Rounding: a scaled side is `round(side × target / reference)` with halves rounded up, and never
//! below 1. So 640×480 with `shorter:256` gives 341×256 (640 × 256 / 480 = 341.33). The reader's
//! `resize:S` ([`Resize::ShorterTruncated`]) truncates instead, as torchvision does: 299.4 → 299.

use crate::Resize;

/// Where the output comes from and what size it has.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SizePlan {
    /// Output width.
    pub width: u32,
    /// Output height.
    pub height: u32,
    /// Source region `(left, top, width, height)` in source pixels, for `crop`; else the whole image.
    pub crop: Option<(f64, f64, f64, f64)>,
}

impl SizePlan {
    /// True when the output is exactly the source: no resampling at all.
    pub fn is_identity(&self, src_w: u32, src_h: u32) -> bool {
        self.crop.is_none() && self.width == src_w && self.height == src_h
    }
}

/// `round(a * num / den)`, halves up, at least 1.
fn scale(a: u32, num: u32, den: u32) -> u32 {
    let (a, num, den) = (u64::from(a), u64::from(num), u64::from(den));
    let v = (2 * a * num + den) / (2 * den);
    v.clamp(1, u64::from(u32::MAX)) as u32
}

/// `floor(a * num / den)`, at least 1.
fn scale_down(a: u32, num: u32, den: u32) -> u32 {
    let v = u64::from(a) * u64::from(num) / u64::from(den);
    v.clamp(1, u64::from(u32::MAX)) as u32
}

/// Plans the output for a `w`×`h` source (after orientation).
pub fn plan_size(resize: Resize, upscale: bool, w: u32, h: u32) -> SizePlan {
    let whole = |width, height| SizePlan {
        width,
        height,
        crop: None,
    };
    match resize {
        Resize::None => whole(w, h),
        Resize::Shorter(n) | Resize::ShorterTruncated(n) => {
            let s = w.min(h);
            let long = match resize {
                Resize::Shorter(_) => scale,
                _ => scale_down,
            };
            if s == n || (s < n && !upscale) {
                whole(w, h)
            } else if w <= h {
                whole(n, long(h, n, w))
            } else {
                whole(long(w, n, h), n)
            }
        }
        Resize::Longer(n) => {
            let l = w.max(h);
            if l == n || (l < n && !upscale) {
                whole(w, h)
            } else if w >= h {
                whole(n, scale(h, n, w))
            } else {
                whole(scale(w, n, h), n)
            }
        }
        Resize::Fit(bw, bh) => {
            let fits = w <= bw && h <= bh;
            let touches = w == bw || h == bh;
            if fits && (touches || !upscale) {
                return whole(w, h);
            }
            // Width-limited when w/h >= bw/bh.
            if u64::from(w) * u64::from(bh) >= u64::from(bw) * u64::from(h) {
                whole(bw, scale(h, bw, w).min(bh))
            } else {
                whole(scale(w, bh, h).min(bw), bh)
            }
        }
        Resize::Crop(bw, bh) if (w, h) == (bw, bh) => whole(w, h),
        Resize::Crop(bw, bh) => {
            let (wf, hf, bwf, bhf) = (f64::from(w), f64::from(h), f64::from(bw), f64::from(bh));
            // Cover the box: keep the full extent of the side that limits, centre the other.
            let (cw, ch) = if wf * bhf >= bwf * hf {
                (hf * bwf / bhf, hf)
            } else {
                (wf, wf * bhf / bwf)
            };
            SizePlan {
                width: bw,
                height: bh,
                crop: Some(((wf - cw) / 2.0, (hf - ch) / 2.0, cw, ch)),
            }
        }
    }
}

/// A side of `dim` pixels decoded at DCT scale `m`/8, rounded up as libjpeg-turbo does
/// (`TJSCALED`).
pub(crate) fn dct_scaled(dim: u32, m: u8) -> u32 {
    ((u64::from(dim) * u64::from(m)).div_ceil(8)) as u32
}

/// The smallest DCT scale M of `scales` (ascending; decoding at M/8) whose decoded size
/// `scaled(M)` is at least `gap` (a ratio `num/den`) times `need` in both directions; 8 (full
/// size) when none is. Shared by the pack decode and the train-time crops.
pub(crate) fn smallest_dct_scale(
    scales: impl IntoIterator<Item = u8>,
    (num, den): (u32, u32),
    need: (f64, f64),
    scaled: impl Fn(u8) -> (f64, f64),
) -> u8 {
    let (num, den) = (f64::from(num), f64::from(den));
    scales
        .into_iter()
        .find(|&m| {
            let (w, h) = scaled(m);
            w * den >= num * need.0 && h * den >= num * need.1
        })
        .unwrap_or(8)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn size(r: Resize, up: bool, w: u32, h: u32) -> (u32, u32) {
        let p = plan_size(r, up, w, h);
        (p.width, p.height)
    }

    #[test]
    fn documented_examples() {
        assert_eq!(size(Resize::Shorter(256), false, 640, 480), (341, 256));
        assert_eq!(size(Resize::Shorter(256), false, 480, 640), (256, 341));
        assert_eq!(size(Resize::Longer(320), false, 640, 480), (320, 240));
        assert_eq!(size(Resize::Fit(100, 100), false, 640, 480), (100, 75));
        assert_eq!(size(Resize::Fit(1000, 100), false, 640, 480), (133, 100));
        assert_eq!(size(Resize::Crop(224, 224), false, 640, 480), (224, 224));
    }

    #[test]
    fn downscale_only_unless_upscale() {
        assert_eq!(size(Resize::Shorter(256), false, 200, 100), (200, 100));
        assert_eq!(size(Resize::Shorter(256), true, 200, 100), (512, 256));
        // torchvision's Resize(224) of 300x225: int(224 * 300 / 225) = int(298.67) = 298.
        assert_eq!(
            size(Resize::ShorterTruncated(224), false, 300, 225),
            (298, 224)
        );
        assert_eq!(size(Resize::Shorter(224), false, 300, 225), (299, 224));
        assert_eq!(
            size(Resize::ShorterTruncated(256), true, 100, 200),
            (256, 512)
        );
        assert_eq!(size(Resize::ShorterTruncated(2), true, 1, 1000), (2, 2000));
        assert_eq!(size(Resize::ShorterTruncated(1), false, 1000, 3), (333, 1));
        assert_eq!(size(Resize::Longer(512), false, 200, 100), (200, 100));
        assert_eq!(size(Resize::Longer(400), true, 200, 100), (400, 200));
        assert_eq!(size(Resize::Fit(400, 400), false, 200, 100), (200, 100));
        assert_eq!(size(Resize::Fit(400, 400), true, 200, 100), (400, 200));
        // crop always yields its box, enlarging if needed.
        assert_eq!(size(Resize::Crop(400, 400), false, 200, 100), (400, 400));
    }

    #[test]
    fn crop_box_is_centred_and_has_box_aspect() {
        let p = plan_size(Resize::Crop(100, 100), false, 640, 480);
        assert_eq!(p.crop, Some((80.0, 0.0, 480.0, 480.0)));
        let p = plan_size(Resize::Crop(200, 100), false, 300, 300);
        assert_eq!(p.crop, Some((0.0, 75.0, 300.0, 150.0)));
        // An image already at the box needs no resampling (so `--encode keep` can keep it).
        assert!(plan_size(Resize::Crop(64, 48), false, 64, 48).is_identity(64, 48));
    }

    proptest! {
        #[test]
        fn sizes_respect_their_mode(w in 1u32..5000, h in 1u32..5000, n in 1u32..2000, m in 1u32..2000, up: bool) {
            let (sw, sh) = size(Resize::Shorter(n), up, w, h);
            if up || w.min(h) > n { prop_assert_eq!(sw.min(sh), n); } else { prop_assert_eq!((sw, sh), (w, h)); }
            let (tw, th) = size(Resize::ShorterTruncated(n), up, w, h);
            if up || w.min(h) > n {
                let (short, long) = (u64::from(w.min(h)), u64::from(w.max(h)));
                let want = (u64::from(n) * long / short).max(1) as u32;
                prop_assert_eq!((tw.min(th), tw.max(th)), (n.min(want), n.max(want)));
                prop_assert!(tw <= sw && th <= sh);
            } else { prop_assert_eq!((tw, th), (w, h)); }
            let (lw, lh) = size(Resize::Longer(n), up, w, h);
            if up || w.max(h) > n { prop_assert_eq!(lw.max(lh), n); } else { prop_assert_eq!((lw, lh), (w, h)); }
            let (fw, fh) = size(Resize::Fit(n, m), up, w, h);
            prop_assert!(fw >= 1 && fh >= 1);
            if up || w > n || h > m {
                prop_assert!(fw <= n && fh <= m);
                prop_assert!(fw == n || fh == m);
            }
            let p = plan_size(Resize::Crop(n, m), up, w, h);
            let (l, t, cw, ch) = p.crop.unwrap_or((0.0, 0.0, f64::from(w), f64::from(h)));
            prop_assert!(l >= 0.0 && t >= 0.0 && l + cw <= f64::from(w) + 1e-6 && t + ch <= f64::from(h) + 1e-6);
        }
    }
}
