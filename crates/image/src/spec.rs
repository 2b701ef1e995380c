//! What a transform does: resize mode, filter, output encoding, limits. Parsed from CLI strings.

use crate::geometry::{dct_scaled, smallest_dct_scale};
use shardtool_core::Limits;
use std::fmt;
use std::str::FromStr;

/// How to size the output.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resize {
    /// Keep the decoded size.
    None,
    /// The shorter side becomes N, aspect kept.
    Shorter(u32),
    /// The shorter side becomes N and the longer side is truncated, not rounded, as
    /// torchvision's `Resize(N)` computes it: the reader's `resize:N`. Not a `--resize` value.
    ShorterTruncated(u32),
    /// The longer side becomes N, aspect kept.
    Longer(u32),
    /// The largest size that fits in W×H, aspect kept.
    Fit(u32, u32),
    /// Cover W×H, then centre-crop to exactly W×H.
    Crop(u32, u32),
}

/// A `--resize` value that did not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ParseError(pub String);

impl FromStr for Resize {
    type Err = ParseError;

    fn from_str(s: &str) -> Result<Self, ParseError> {
        let err = || {
            ParseError(format!(
                "invalid resize {s:?}: expected none, shorter:N, longer:N, fit:WxH or crop:WxH (N, W, H from 1 to 65535)"
            ))
        };
        let side = |v: &str| -> Result<u32, ParseError> {
            v.parse::<u32>()
                .ok()
                .filter(|n| (1..=65_535).contains(n))
                .ok_or_else(err)
        };
        let pair = |v: &str| -> Result<(u32, u32), ParseError> {
            let (w, h) = v.split_once(['x', 'X']).ok_or_else(err)?;
            Ok((side(w)?, side(h)?))
        };
        if s == "none" {
            return Ok(Resize::None);
        }
        let (mode, arg) = s.split_once(':').ok_or_else(err)?;
        match mode {
            "shorter" => Ok(Resize::Shorter(side(arg)?)),
            "longer" => Ok(Resize::Longer(side(arg)?)),
            "fit" => pair(arg).map(|(w, h)| Resize::Fit(w, h)),
            "crop" => pair(arg).map(|(w, h)| Resize::Crop(w, h)),
            _ => Err(err()),
        }
    }
}

impl fmt::Display for Resize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Resize::None => write!(f, "none"),
            Resize::Shorter(n) => write!(f, "shorter:{n}"),
            Resize::ShorterTruncated(n) => write!(f, "shorter:{n} (longer side truncated)"),
            Resize::Longer(n) => write!(f, "longer:{n}"),
            Resize::Fit(w, h) => write!(f, "fit:{w}x{h}"),
            Resize::Crop(w, h) => write!(f, "crop:{w}x{h}"),
        }
    }
}

impl Resize {
    /// The output size when every record has the same size, else `None`.
    pub fn fixed_size(&self) -> Option<(u32, u32)> {
        match *self {
            Resize::Crop(w, h) => Some((w, h)),
            _ => None,
        }
    }
}

/// The resampling filter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Filter {
    /// Catmull–Rom cubic: sharp, and about 30% faster than Lanczos3 here. The default.
    #[default]
    CatmullRom,
    /// Lanczos with a = 3: slightly sharper, slower.
    Lanczos3,
    /// Bilinear (triangle), widened when reducing like torchvision's `antialias=True`: the
    /// fastest, and the train-time crops' default.
    Bilinear,
}

impl FromStr for Filter {
    type Err = ParseError;
    fn from_str(s: &str) -> Result<Self, ParseError> {
        match s {
            "catmull-rom" | "catmullrom" => Ok(Filter::CatmullRom),
            "lanczos3" => Ok(Filter::Lanczos3),
            "bilinear" => Ok(Filter::Bilinear),
            _ => Err(ParseError(format!(
                "invalid filter {s:?}: expected catmull-rom, lanczos3 or bilinear"
            ))),
        }
    }
}

impl fmt::Display for Filter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Filter::CatmullRom => "catmull-rom",
            Filter::Lanczos3 => "lanczos3",
            Filter::Bilinear => "bilinear",
        })
    }
}

/// How to store the output.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Encode {
    /// JPEG, 4:2:0, at the spec's quality. The default.
    #[default]
    Jpeg,
    /// Lossless PNG (RGB8).
    Png,
    /// An input JPEG needing no resize, rotation or colour conversion is stored byte for byte;
    /// anything else is encoded as JPEG.
    Keep,
    /// No encoding: the RGB8 pixels (for packed-tensor shards).
    Raw,
}

impl FromStr for Encode {
    type Err = ParseError;
    fn from_str(s: &str) -> Result<Self, ParseError> {
        match s {
            "jpeg" | "jpg" => Ok(Encode::Jpeg),
            "png" => Ok(Encode::Png),
            "keep" => Ok(Encode::Keep),
            _ => Err(ParseError(format!(
                "invalid encoding {s:?}: expected jpeg, png or keep"
            ))),
        }
    }
}

impl fmt::Display for Encode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Encode::Jpeg => "jpeg",
            Encode::Png => "png",
            Encode::Keep => "keep",
            Encode::Raw => "raw",
        })
    }
}

/// How far libjpeg-turbo may shrink a JPEG in the DCT domain before the resampler takes over.
///
/// DCT scaling is cheap, but a coarse scale averages blocks of pixels (a box filter), which
/// blurs fine detail more than the resampler would. Keeping a reducing gap, as PIL's
/// `thumbnail(reducing_gap=2)` does, leaves the last and largest step to the resampler.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecodeScale {
    /// `gap:N`: the coarsest of 1/8 to 4/8 whose image is still at least N times the target in
    /// both directions; full size when none is. The default, with N = 2.
    Gap(ReducingGap),
    /// `fast`: the coarsest of 1/8, 1/4 and 1/2 whose image still covers the target.
    Fast,
    /// `full`: no DCT scaling.
    Full,
}

impl Default for DecodeScale {
    fn default() -> Self {
        DecodeScale::Gap(ReducingGap::TWO)
    }
}

/// A reducing gap from 1 to 8, in hundredths so that it compares exactly.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct ReducingGap(u16);

impl ReducingGap {
    /// 2x, the default.
    pub const TWO: Self = Self(200);
    /// The smallest gap, 1x: the scaled image only has to cover the target.
    pub const MIN: Self = Self(100);
    /// The largest gap, 8x: beyond it no DCT scale (at most 8x smaller) could ever be chosen.
    pub const MAX: Self = Self(800);

    /// The gap of `hundredths`/100, or `None` outside 1..=8.
    pub fn from_hundredths(hundredths: u16) -> Option<Self> {
        (Self::MIN.0..=Self::MAX.0)
            .contains(&hundredths)
            .then_some(Self(hundredths))
    }

    /// The gap in hundredths (200 for 2x).
    pub fn hundredths(self) -> u16 {
        self.0
    }
}

impl FromStr for ReducingGap {
    type Err = ParseError;

    /// Parses `2`, `1.5` or `1.25`: at most two decimals, from 1 to 8.
    fn from_str(s: &str) -> Result<Self, ParseError> {
        let err = || {
            ParseError(format!(
                "invalid reducing gap {s:?}: expected a number from 1 to 8 with at most two decimals"
            ))
        };
        let (int, frac) = s.split_once('.').unwrap_or((s, ""));
        let digits = |t: &str| t.bytes().all(|b| b.is_ascii_digit());
        if int.is_empty() || int.len() > 2 || frac.len() > 2 || !digits(int) || !digits(frac) {
            return Err(err());
        }
        if s.ends_with('.') {
            return Err(err());
        }
        let int: u16 = int.parse().map_err(|_| err())?;
        let frac: u16 = format!("{frac:0<2}").parse().map_err(|_| err())?;
        Self::from_hundredths(int * 100 + frac).ok_or_else(err)
    }
}

impl fmt::Display for ReducingGap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (int, frac) = (self.0 / 100, self.0 % 100);
        match frac {
            0 => write!(f, "{int}"),
            _ if frac % 10 == 0 => write!(f, "{int}.{}", frac / 10),
            _ => write!(f, "{int}.{frac:02}"),
        }
    }
}

impl FromStr for DecodeScale {
    type Err = ParseError;

    fn from_str(s: &str) -> Result<Self, ParseError> {
        let err = || {
            ParseError(format!(
                "invalid decode scale {s:?}: expected gap:N (N from 1 to 8, at most two decimals), fast or full"
            ))
        };
        match s {
            "fast" => Ok(DecodeScale::Fast),
            "full" => Ok(DecodeScale::Full),
            _ => {
                let n = s.strip_prefix("gap:").ok_or_else(err)?;
                n.parse().map(DecodeScale::Gap).map_err(|_| err())
            }
        }
    }
}

impl fmt::Display for DecodeScale {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DecodeScale::Gap(g) => write!(f, "gap:{g}"),
            DecodeScale::Fast => f.write_str("fast"),
            DecodeScale::Full => f.write_str("full"),
        }
    }
}

/// The DCT scales M (decoding at M/8) that `gap:N` chooses from. libjpeg-turbo has SIMD code
/// only for some IDCT sizes: 5/8 to 7/8 (and the larger chroma IDCTs they bring) decode slower
/// than full size, so a gap those would keep is kept by decoding at full size instead.
const GAP_SCALES: [u8; 4] = [1, 2, 3, 4];

impl DecodeScale {
    /// The DCT scale M (decode at M/8) for a `source` JPEG whose decoded image must be at least
    /// `need` (width, height) to cover the target; 8 for full size.
    pub fn dct_scale(self, source: (u32, u32), need: (f64, f64)) -> u8 {
        let scaled = |m| {
            (
                f64::from(dct_scaled(source.0, m)),
                f64::from(dct_scaled(source.1, m)),
            )
        };
        match self {
            DecodeScale::Full => 8,
            DecodeScale::Fast => smallest_dct_scale([1, 2, 4], (1, 1), need, scaled),
            // The gap is measured on the exact scaled size: libjpeg-turbo's rounded-up last
            // row or column holds less than a pixel of the source (3 rows at 1/2 are 1.5, not
            // 2), so counting it would take a 3-pixel side down to a 1-pixel target.
            DecodeScale::Gap(g) => {
                smallest_dct_scale(GAP_SCALES, (u32::from(g.0), 100), need, |m| {
                    let exact = |side: u32| f64::from(side) * f64::from(m) / 8.0;
                    (exact(source.0), exact(source.1))
                })
            }
        }
    }
}

/// A complete transform specification.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TransformSpec {
    /// Output sizing.
    pub resize: Resize,
    /// Allow enlarging (for every mode but `crop`, which always yields its box).
    pub upscale: bool,
    /// Resampling filter.
    pub filter: Filter,
    /// Output encoding.
    pub encode: Encode,
    /// JPEG quality, 1..=100.
    pub quality: u8,
    /// How far JPEGs are shrunk while decoding, before resampling.
    pub decode_scale: DecodeScale,
    /// Limits on untrusted input.
    pub limits: Limits,
}

impl Default for TransformSpec {
    fn default() -> Self {
        Self {
            resize: Resize::None,
            upscale: false,
            filter: Filter::default(),
            encode: Encode::default(),
            quality: 90,
            decode_scale: DecodeScale::default(),
            limits: Limits::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// True when scale `m` keeps `gap` (hundredths) times `need` in both directions, on the
    /// exact scaled size (`dim` × m/8, not rounded up).
    fn keeps_gap(src: (u32, u32), m: u8, gap: u16, need: (u32, u32)) -> bool {
        let keeps = |dim: u32, need: u32| {
            u64::from(dim) * u64::from(m) * 100 >= u64::from(gap) * u64::from(need) * 8
        };
        keeps(src.0, need.0) && keeps(src.1, need.1)
    }

    fn need(n: (u32, u32)) -> (f64, f64) {
        (f64::from(n.0), f64::from(n.1))
    }

    #[test]
    fn decode_scales_parse_and_print() {
        assert_eq!(DecodeScale::default().to_string(), "gap:2");
        for s in [
            "gap:2", "gap:1", "gap:8", "gap:1.5", "gap:1.25", "fast", "full",
        ] {
            assert_eq!(s.parse::<DecodeScale>().unwrap().to_string(), s);
        }
        assert_eq!("gap:2.0".parse::<DecodeScale>(), Ok(DecodeScale::default()));
        assert_eq!(
            "gap:2.50".parse::<DecodeScale>().map(|d| d.to_string()),
            Ok("gap:2.5".into())
        );
        assert_eq!(
            "gap:3.05".parse::<DecodeScale>(),
            Ok(DecodeScale::Gap(ReducingGap::from_hundredths(305).unwrap()))
        );
    }

    #[test]
    fn bad_decode_scales_are_refused_with_the_accepted_forms() {
        for s in [
            "",
            "gap",
            "gap:",
            "gap:0",
            "gap:0.99",
            "gap:8.01",
            "gap:9",
            "gap:10",
            "gap:x",
            "gap:1.234",
            "gap:-2",
            "gap:+2",
            "gap:.5",
            "gap:2.",
            "gap:nan",
            "gap:inf",
            "GAP:2",
            "slow",
            "gap:2 ",
        ] {
            let e = s.parse::<DecodeScale>().expect_err(s);
            assert!(e.0.contains(&format!("{s:?}")), "{s}: {e}");
            for form in ["gap:N", "fast", "full"] {
                assert!(e.0.contains(form), "{s}: {e}");
            }
        }
    }

    #[test]
    fn full_never_scales() {
        for (src, n) in [
            ((4000, 3000), (1, 1)),
            ((640, 480), (80, 60)),
            ((9, 9), (9, 9)),
        ] {
            assert_eq!(DecodeScale::Full.dct_scale(src, need(n)), 8);
        }
    }

    #[test]
    fn gap_examples() {
        // 1600x1200 to shorter:256 (341x256): 2x needs 682x512; 3/8 gives 600x450, 4/8 800x600.
        let two = DecodeScale::default();
        assert_eq!(two.dct_scale((1600, 1200), need((341, 256))), 4);
        // `fast` only has to cover 341x256: 1/4 gives 400x300.
        assert_eq!(
            DecodeScale::Fast.dct_scale((1600, 1200), need((341, 256))),
            2
        );
        // 400x350 to shorter:256: no scale keeps a gap of 2, so full size.
        assert_eq!(two.dct_scale((400, 350), need((293, 256))), 8);
        // 400x350 to shorter:128 (146x128): 6/8 (300x263) would keep 2x, but decodes slower
        // than full size; 4/8 (200x175) does not keep it.
        assert_eq!(two.dct_scale((400, 350), need((146, 128))), 8);
        // 4000x3 to longer:1000 (1000x1): 4/8 decodes 2000x2, but its second row is half a
        // source row (1.5 rows), so the gap is not kept: full size, as PIL's draft does.
        assert_eq!(two.dct_scale((4000, 3), need((1000, 1))), 8);
        // A gap of 1.5 needs 512x384 there: 3/8 gives 600x450.
        let g = DecodeScale::Gap(ReducingGap::from_hundredths(150).unwrap());
        assert_eq!(g.dct_scale((1600, 1200), need((341, 256))), 3);
    }

    proptest! {
        #[test]
        fn gap_picks_the_coarsest_fast_scale_that_keeps_the_gap(
            w in 1u32..6000, h in 1u32..6000, nw in 1u32..3000, nh in 1u32..3000, gap in 100u16..=800,
        ) {
            let src = (w, h);
            let n = (nw, nh);
            let g = DecodeScale::Gap(ReducingGap::from_hundredths(gap).unwrap());
            let m = g.dct_scale(src, need(n));
            // 1/8 to 4/8, else full size.
            prop_assert!([1, 2, 3, 4, 8].contains(&m), "{m}/8");
            if m < 8 {
                prop_assert!(keeps_gap(src, m, gap, n), "{m}/8 breaks the gap");
            }
            for coarser in (1..m).filter(|&c| c <= 4) {
                prop_assert!(!keeps_gap(src, coarser, gap, n), "{coarser}/8 also keeps the gap");
            }
        }

        #[test]
        fn fast_is_the_coarsest_power_of_two_that_covers(
            w in 1u32..6000, h in 1u32..6000, nw in 1u32..3000, nh in 1u32..3000,
        ) {
            // The choice `fast` names: 1/8, 1/4 or 1/2 by turbojpeg's own rounding, else 1/1.
            let mut want = turbojpeg::ScalingFactor::ONE;
            for denom in [8usize, 4, 2] {
                let f = turbojpeg::ScalingFactor::new(1, denom);
                if f.scale(w as usize) >= nw as usize && f.scale(h as usize) >= nh as usize {
                    want = f;
                    break;
                }
            }
            let m = DecodeScale::Fast.dct_scale((w, h), need((nw, nh)));
            prop_assert_eq!(turbojpeg::ScalingFactor::new(usize::from(m), 8), want);
        }

        #[test]
        fn gap_two_is_never_coarser_than_fast(
            w in 1u32..6000, h in 1u32..6000, nw in 1u32..3000, nh in 1u32..3000,
        ) {
            let n = need((nw, nh));
            let fast = DecodeScale::Fast.dct_scale((w, h), n);
            prop_assert!(DecodeScale::default().dct_scale((w, h), n) >= fast);
        }
    }

    #[test]
    fn parses_and_prints_every_mode() {
        for s in [
            "none",
            "shorter:256",
            "longer:512",
            "fit:640x480",
            "crop:224x224",
        ] {
            assert_eq!(s.parse::<Resize>().unwrap().to_string(), s);
        }
        assert_eq!("fit:2X3".parse::<Resize>(), Ok(Resize::Fit(2, 3)));
    }

    #[test]
    fn refuses_bad_modes() {
        for s in [
            "",
            "shorter",
            "shorter:0",
            "shorter:-1",
            "crop:224",
            "fit:1x",
            "big:3",
            "longer:70000",
        ] {
            assert!(s.parse::<Resize>().is_err(), "{s}");
        }
    }
}
