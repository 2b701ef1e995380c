//! Train-time transforms: what the reader does to each image record before batching, and their
//! randomness, a pure function of (seed, epoch, sample key) so that worker counts, rank layouts
//! and resumes never change a crop.

use shardtool_core::rng::SplitMix64;
use std::fmt;
use std::str::FromStr;

/// What the reader does to each image record.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub enum Transform {
    /// Encoded bytes as stored (tar); pixels as stored (packed).
    #[default]
    None,
    /// Decode to RGB8 at the stored size: a batch of different shapes when images differ.
    Decode,
    /// Decode and resize so the shorter side is exactly `size`, aspect kept, the longer side
    /// truncated as torchvision's `Resize(size)` does (300x225 to 224 gives 298x224).
    Resize {
        /// Shorter side in pixels.
        size: u32,
    },
    /// Evaluation crop: the centre square of side `ratio` × the shorter side, resized to
    /// `size`×`size` (torchvision's `Resize(size / ratio)` then `CenterCrop(size)`).
    CenterCrop {
        /// Output side.
        size: u32,
        /// Crop side over the shorter side, in (0, 1].
        ratio: f64,
    },
    /// Training crop: torchvision's `RandomResizedCrop(size, scale, ratio)` sampling rule (ten
    /// tries, then the centre-crop fallback), resized to `size`×`size`.
    RandomResizedCrop {
        /// Output side.
        size: u32,
        /// Range of the crop's area over the image's.
        scale: (f64, f64),
        /// Range of the crop's width over its height.
        ratio: (f64, f64),
    },
}

/// torchvision's defaults for `RandomResizedCrop`.
pub const RRC_SCALE: (f64, f64) = (0.08, 1.0);
/// torchvision's defaults for `RandomResizedCrop`: 3/4 to 4/3.
pub const RRC_RATIO: (f64, f64) = (3.0 / 4.0, 4.0 / 3.0);
/// The usual ImageNet evaluation ratio (224 of 256).
pub const CENTER_RATIO: f64 = 0.875;

/// The region of one sample's upright source image that was resized into its batch slot.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Crop {
    /// Left edge in source pixels.
    pub x: f64,
    /// Top edge.
    pub y: f64,
    /// Width.
    pub w: f64,
    /// Height.
    pub h: f64,
    /// Mirrored left to right.
    pub flipped: bool,
}

impl Transform {
    /// The output side when every sample comes out `size`×`size` (the crops).
    pub fn fixed_size(&self) -> Option<u32> {
        match *self {
            Transform::CenterCrop { size, .. } | Transform::RandomResizedCrop { size, .. } => {
                Some(size)
            }
            _ => None,
        }
    }

    /// True when records are decoded.
    pub fn decodes(&self) -> bool {
        !matches!(self, Transform::None)
    }

    /// Whether the sample `key` is mirrored: the first draw of its generator, so it is known
    /// before the image's size and agrees with [`Transform::crop`].
    pub fn flipped(&self, flip: bool, seed: u64, epoch: u64, key: &str) -> bool {
        flip && self.fixed_size().is_some() && sample_rng(seed, epoch, key).next_u64() >> 63 == 1
    }

    /// The crop of the sample `key` of a `width`×`height` upright image, and whether it is
    /// flipped (drawn with p = 0.5 when `flip` is on). `None` for transforms that do not crop.
    pub fn crop(
        &self,
        flip: bool,
        seed: u64,
        epoch: u64,
        key: &str,
        width: u32,
        height: u32,
    ) -> Option<Crop> {
        let mut rng = sample_rng(seed, epoch, key);
        // The flip is drawn first, so it does not depend on how many tries the box took.
        let flipped = rng.next_u64() >> 63 == 1 && flip;
        let (w, h) = (f64::from(width), f64::from(height));
        let (x, y, cw, ch) = match *self {
            Transform::CenterCrop { ratio, .. } => {
                // At least one pixel: that is what a tiny ratio crops, and what `--keys` says.
                let side = (ratio * w.min(h)).max(1.0);
                ((w - side) / 2.0, (h - side) / 2.0, side, side)
            }
            Transform::RandomResizedCrop { scale, ratio, .. } => {
                random_resized_box(&mut rng, width, height, scale, ratio)
            }
            _ => return None,
        };
        Some(Crop {
            x,
            y,
            w: cw,
            h: ch,
            flipped,
        })
    }
}

/// One generator per sample: xxh3 of the key mixed with the seed and epoch.
fn sample_rng(seed: u64, epoch: u64, key: &str) -> SplitMix64 {
    let k = shardtool_core::Checksum::of(key.as_bytes()).0;
    let mut mix = SplitMix64::new(seed ^ k.rotate_left(17));
    let a = mix.next_u64();
    SplitMix64::new(a ^ epoch.wrapping_mul(0x9E37_79B9_7F4A_7C15))
}

/// A uniform float in `[lo, hi)`.
fn uniform(rng: &mut SplitMix64, lo: f64, hi: f64) -> f64 {
    let u = (rng.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64);
    lo + (hi - lo) * u
}

/// torchvision's `RandomResizedCrop.get_params`: up to ten tries of (area, log-uniform aspect),
/// then the whole image clipped to the ratio range, centred. Sides round as Python's `round`
/// does (half to even): 192.5 is 192.
fn random_resized_box(
    rng: &mut SplitMix64,
    width: u32,
    height: u32,
    scale: (f64, f64),
    ratio: (f64, f64),
) -> (f64, f64, f64, f64) {
    let area = f64::from(width) * f64::from(height);
    let (log_lo, log_hi) = (ratio.0.ln(), ratio.1.ln());
    for _ in 0..10 {
        let target = area * uniform(rng, scale.0, scale.1);
        let aspect = uniform(rng, log_lo, log_hi).exp();
        let w = (target * aspect).sqrt().round_ties_even();
        let h = (target / aspect).sqrt().round_ties_even();
        if w > 0.0 && w <= f64::from(width) && h > 0.0 && h <= f64::from(height) {
            let (w, h) = (w as u32, h as u32);
            let y = rng.below(u64::from(height - h) + 1);
            let x = rng.below(u64::from(width - w) + 1);
            return (x as f64, y as f64, f64::from(w), f64::from(h));
        }
    }
    let (wf, hf) = (f64::from(width), f64::from(height));
    let in_ratio = wf / hf;
    let (w, h) = if in_ratio < ratio.0 {
        (wf, (wf / ratio.0).round_ties_even())
    } else if in_ratio > ratio.1 {
        ((hf * ratio.1).round_ties_even(), hf)
    } else {
        (wf, hf)
    };
    (
        ((wf - w) / 2.0).floor(),
        ((hf - h) / 2.0).floor(),
        w.max(1.0),
        h.max(1.0),
    )
}

/// A `--transform` value that did not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid transform {input:?}: {why}")]
pub struct TransformParseError {
    input: String,
    why: String,
}

const SYNTAX: &str = "expected none, decode, resize:S, center-crop:S[,ratio=R] or \
     random-resized-crop:S[,scale=A-B][,ratio=C-D]";

impl FromStr for Transform {
    type Err = TransformParseError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = |why: &str| TransformParseError {
            input: s.to_owned(),
            why: why.to_owned(),
        };
        let (name, rest) = s.split_once(':').unwrap_or((s, ""));
        let mut parts = rest.split(',');
        let size = parts.next().filter(|p| !p.is_empty());
        let size = |what: &str| -> Result<u32, TransformParseError> {
            let v = size.ok_or_else(|| err(&format!("{what} needs a size, as in {what}:224")))?;
            // Digits only: `+224` is no size as written anywhere else.
            match v
                .parse::<u32>()
                .ok()
                .filter(|_| v.bytes().all(|b| b.is_ascii_digit()))
            {
                Some(n) if (1..=16384).contains(&n) => Ok(n),
                _ => Err(err(&format!(
                    "size {v:?} is not a whole number from 1 to 16384"
                ))),
            }
        };
        let options = parts
            .map(|p| {
                p.split_once('=')
                    .ok_or_else(|| err(&format!("option {p:?} is not NAME=VALUE")))
            })
            .collect::<Result<Vec<_>, _>>()?;
        if let Some((_, (n, _))) = options
            .iter()
            .enumerate()
            .find(|(i, (n, _))| options[..*i].iter().any(|(m, _)| m == n))
        {
            return Err(err(&format!("option {n:?} is given twice")));
        }
        let allow = |names: &[&str]| -> Result<(), TransformParseError> {
            match options.iter().find(|(n, _)| !names.contains(n)) {
                Some((n, _)) if names.is_empty() => {
                    Err(err(&format!("{name} takes no options (got {n:?})")))
                }
                Some((n, _)) => Err(err(&format!(
                    "{name} has no option {n:?} (it takes {})",
                    names.join(", ")
                ))),
                None => Ok(()),
            }
        };
        let option = |n: &str| options.iter().find(|(k, _)| *k == n).map(|(_, v)| *v);
        let range = |n: &str, default: (f64, f64), max: f64| -> Result<_, TransformParseError> {
            let Some(v) = option(n) else {
                return Ok(default);
            };
            let bad = || {
                err(&format!(
                    "{n}={v:?} is not a range LO-HI with 0 < LO ≤ HI ≤ {max}"
                ))
            };
            // The `-` between the ends, not one of an exponent (`1e-3-1`).
            let at = v
                .char_indices()
                .find(|&(i, c)| c == '-' && i > 0 && !v[..i].ends_with(['e', 'E']))
                .map(|(i, _)| i)
                .ok_or_else(bad)?;
            let (lo, hi) = (&v[..at], &v[at + 1..]);
            let (lo, hi) = (number(lo).ok_or_else(bad)?, number(hi).ok_or_else(bad)?);
            if lo > 0.0 && lo <= hi && hi <= max {
                Ok((lo, hi))
            } else {
                Err(bad())
            }
        };
        match name {
            "none" | "decode" if s.contains(':') => {
                Err(err(&format!("{name} takes no size or options")))
            }
            "none" => Ok(Transform::None),
            "decode" => Ok(Transform::Decode),
            "resize" => {
                allow(&[])?;
                Ok(Transform::Resize {
                    size: size("resize")?,
                })
            }
            "center-crop" => {
                allow(&["ratio"])?;
                let ratio = match option("ratio") {
                    None => CENTER_RATIO,
                    Some(v) => number(v)
                        .filter(|r| *r > 0.0 && *r <= 1.0)
                        .ok_or_else(|| err(&format!("ratio={v:?} is not a number in (0, 1]")))?,
                };
                Ok(Transform::CenterCrop {
                    size: size("center-crop")?,
                    ratio,
                })
            }
            "random-resized-crop" => {
                allow(&["scale", "ratio"])?;
                Ok(Transform::RandomResizedCrop {
                    size: size("random-resized-crop")?,
                    scale: range("scale", RRC_SCALE, 1.0)?,
                    ratio: range("ratio", RRC_RATIO, 100.0)?,
                })
            }
            _ => Err(err(SYNTAX)),
        }
    }
}

/// A decimal or a fraction such as `3/4`.
fn number(s: &str) -> Option<f64> {
    let v = match s.split_once('/') {
        Some((a, b)) => a.trim().parse::<f64>().ok()? / b.trim().parse::<f64>().ok()?,
        None => s.trim().parse().ok()?,
    };
    v.is_finite().then_some(v)
}

impl fmt::Display for Transform {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Transform::None => f.write_str("none"),
            Transform::Decode => f.write_str("decode"),
            Transform::Resize { size } => write!(f, "resize:{size}"),
            Transform::CenterCrop { size, ratio } => write!(f, "center-crop:{size},ratio={ratio}"),
            Transform::RandomResizedCrop { size, scale, ratio } => write!(
                f,
                "random-resized-crop:{size},scale={}-{},ratio={}-{}",
                scale.0, scale.1, ratio.0, ratio.1
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn rrc(size: u32) -> Transform {
        Transform::RandomResizedCrop {
            size,
            scale: RRC_SCALE,
            ratio: RRC_RATIO,
        }
    }

    #[test]
    fn parses_every_form_and_round_trips() {
        assert_eq!("none".parse::<Transform>().unwrap(), Transform::None);
        assert_eq!("decode".parse::<Transform>().unwrap(), Transform::Decode);
        assert_eq!(
            "resize:256".parse::<Transform>().unwrap(),
            Transform::Resize { size: 256 }
        );
        assert_eq!(
            "center-crop:224".parse::<Transform>().unwrap(),
            Transform::CenterCrop {
                size: 224,
                ratio: CENTER_RATIO
            }
        );
        assert_eq!(
            "random-resized-crop:224".parse::<Transform>().unwrap(),
            rrc(224)
        );
        let t: Transform = "random-resized-crop:160,scale=0.35-1,ratio=3/4-4/3"
            .parse()
            .unwrap();
        assert_eq!(
            t,
            Transform::RandomResizedCrop {
                size: 160,
                scale: (0.35, 1.0),
                ratio: (0.75, 4.0 / 3.0)
            }
        );
        // Ends in exponent form: the range's `-` is the one outside an exponent.
        let e: Transform = "random-resized-crop:8,scale=1e-3-1,ratio=1E-1-2.5e+0"
            .parse()
            .unwrap();
        assert_eq!(
            e,
            Transform::RandomResizedCrop {
                size: 8,
                scale: (0.001, 1.0),
                ratio: (0.1, 2.5)
            }
        );
        for t in [
            Transform::None,
            Transform::Decode,
            Transform::Resize { size: 9 },
            e,
            t,
            rrc(224),
        ] {
            assert_eq!(t.to_string().parse::<Transform>().unwrap(), t);
        }
    }

    #[test]
    fn bad_values_say_what_is_wrong() {
        for (bad, says) in [
            ("crop:224", "expected none"),
            ("resize", "needs a size"),
            ("resize:0", "from 1 to 16384"),
            ("resize:+224", "from 1 to 16384"),
            ("decode:", "takes no size"),
            ("none:", "takes no size"),
            (
                "random-resized-crop:64,scale=0.5-1,scale=0.1-0.2",
                "\"scale\" is given twice",
            ),
            ("random-resized-crop:224,scale=0.5", "range"),
            ("random-resized-crop:224,scale=0.9-0.1", "range"),
            ("random-resized-crop:224,scale=0-1", "range"),
            ("random-resized-crop:224,flip=1", "no option \"flip\""),
            ("center-crop:224,ratio=1.5", "(0, 1]"),
            ("resize:64,ratio=1", "takes no options"),
            ("decode:3", "takes no size"),
        ] {
            let e = bad.parse::<Transform>().unwrap_err().to_string();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }

    #[test]
    fn crops_depend_on_seed_epoch_and_key_only() {
        let t = rrc(224);
        let a = t.crop(true, 1, 0, "k1", 400, 300).unwrap();
        assert_eq!(t.crop(true, 1, 0, "k1", 400, 300).unwrap(), a);
        let others = [
            t.crop(true, 2, 0, "k1", 400, 300),
            t.crop(true, 1, 1, "k1", 400, 300),
            t.crop(true, 1, 0, "k2", 400, 300),
        ];
        assert!(others.iter().all(|o| o.unwrap() != a));
        assert_eq!(Transform::Decode.crop(true, 1, 0, "k1", 4, 3), None);
    }

    #[test]
    fn flips_are_about_half_and_off_when_not_asked() {
        let t = rrc(32);
        let flipped = (0..2000)
            .filter(|i| t.crop(true, 0, 0, &i.to_string(), 64, 64).unwrap().flipped)
            .count();
        assert!((900..1100).contains(&flipped), "{flipped} of 2000");
        assert!((0..200).all(|i| !t.crop(false, 0, 0, &i.to_string(), 64, 64).unwrap().flipped));
    }

    #[test]
    fn center_crop_is_centred_on_the_shorter_side() {
        let c = Transform::CenterCrop {
            size: 224,
            ratio: 0.875,
        }
        .crop(false, 0, 0, "k", 400, 256)
        .unwrap();
        assert_eq!((c.w, c.h), (224.0, 224.0));
        assert_eq!((c.x, c.y), (88.0, 16.0));
        // A ratio too small for one pixel crops (and reports) one pixel at the centre.
        let tiny: Transform = "center-crop:8,ratio=1e-9".parse().unwrap();
        let c = tiny.crop(false, 0, 0, "k", 400, 256).unwrap();
        assert_eq!((c.x, c.y, c.w, c.h), (199.5, 127.5, 1.0, 1.0));
    }

    #[test]
    fn the_fallback_rounds_half_to_even_as_torchvision() {
        // 400x154, no try fits (every height is over 154): the box is clipped to ratio 1.25,
        // 192.5 wide: torchvision's `int(round(154 * 1.25))` is 192, then x = (400 - 192) // 2.
        let mut rng = SplitMix64::new(7);
        let b = random_resized_box(&mut rng, 400, 154, (0.9, 1.0), (0.8, 1.25));
        assert_eq!(b, (104.0, 0.0, 192.0, 154.0));
    }

    #[test]
    fn impossible_ratios_fall_back_to_the_clipped_centre() {
        // A 1000x10 strip cannot hold a crop of aspect ≤ 4/3 with 8–100% of its area.
        let c = rrc(8).crop(false, 5, 0, "k", 1000, 10).unwrap();
        assert_eq!((c.w, c.h), ((10.0f64 * 4.0 / 3.0).round(), 10.0));
        assert_eq!((c.x, c.y), (((1000.0 - c.w) / 2.0).floor(), 0.0));
    }

    proptest! {
        #[test]
        fn random_crops_stay_inside_and_follow_the_ranges(
            w in 1u32..3000, h in 1u32..3000, seed: u64, key in "[a-z0-9]{1,12}"
        ) {
            let c = rrc(224).crop(true, seed, 3, &key, w, h).unwrap();
            prop_assert!(c.x >= 0.0 && c.y >= 0.0 && c.w >= 1.0 && c.h >= 1.0);
            prop_assert!(c.x + c.w <= f64::from(w) && c.y + c.h <= f64::from(h));
            prop_assert_eq!(c.x.fract(), 0.0);
            prop_assert_eq!(c.w.fract(), 0.0);
        }
    }
}
