//! The image stage of a pack: read bytes → decode (by content) → apply EXIF orientation → RGB8 →
//! resize or crop → encode, under
//! [`shardtool_core::Limits`]. This is the only crate that links codecs.
//!
//! JPEG goes through libjpeg-turbo (vendored and linked statically by the `turbojpeg` crate), with
//! DCT-domain downscaling when the output is much smaller than the input; every other format, and
//! JPEGs libjpeg-turbo will not convert to RGB (CMYK), goes through the `image` crate.
//!
//! How far the DCT may shrink is [`DecodeScale`]: by default it stops while the image is still
//! twice the target (`gap:2`), so the resampler, not the DCT's block averaging, makes the last
//! step; `fast` shrinks as far as the target allows, `full` not at all. `docs/benchmarks.md`
//! ("Pack fidelity") has the pixel error and speed of each.

mod codec;
mod crop;
mod geometry;
mod orient;
mod services;
mod spec;

pub use codec::{transform, Output, Timings, Transformed};
pub use crop::{
    crop_pixels_into, dct_scale_for, decode_crop_into, CropBox, CropOptions, CropReport,
};
pub use geometry::{plan_size, SizePlan};
pub use orient::{apply_orientation, Orientation};
pub use services::{encode_png_rgb8, has_image_signature, probe_size, resize_rgb8};
pub use spec::{DecodeScale, Encode, Filter, ParseError, ReducingGap, Resize, TransformSpec};

/// What kind of failure an input had; the `kind` column of `errors.jsonl`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The bytes are not a supported image format.
    UnsupportedFormat,
    /// The image is malformed or truncated.
    Decode,
    /// The image has more pixels than `Limits::max_pixels`.
    TooManyPixels,
    /// Resizing failed (should not happen for valid sizes).
    Resize,
    /// Encoding the output failed.
    Encode,
    /// No memory for the decoded pixels: the machine's fault, not the image's (a run stops).
    OutOfMemory,
}

impl ErrorKind {
    /// The stable name used in error reports.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::UnsupportedFormat => "unsupported_format",
            ErrorKind::Decode => "decode",
            ErrorKind::TooManyPixels => "too_many_pixels",
            ErrorKind::Resize => "resize",
            ErrorKind::Encode => "encode",
            ErrorKind::OutOfMemory => "machine_fault",
        }
    }
}

/// Why an image could not be transformed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ImageError {
    /// The failure class.
    pub kind: ErrorKind,
    /// A human-readable reason.
    pub message: String,
}

impl ImageError {
    pub(crate) fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
        }
    }
}
