//! Constants and small helpers shared by the writer and the reader.

/// Value of the `format` metadata entry.
pub const FORMAT_NAME: &str = "shardtool.packed";

/// Value of the `version` metadata entry written and accepted by this crate.
pub const FORMAT_VERSION: &str = "1";

/// Alignment, in bytes from the start of the file, of the data buffer.
pub const DATA_ALIGN: u64 = 4096;

/// Alignment, in bytes from the start of the `pixels` tensor, of every record
/// in a variable-shape shard.
pub const RECORD_ALIGN: u64 = 64;

/// Default largest accepted header length in bytes (the `N` of the 8-byte
/// prefix, padding included).
///
/// This equals the limit of the reference safetensors implementation, so the
/// writer refuses to produce headers longer than this: other readers would
/// reject them.
pub const MAX_HEADER_LEN: u64 = 100_000_000;

/// The fields every packed record has, as a dataset's manifest names them (carried fields come
/// on top, in each sample's `fields` member).
pub const RECORD_FIELDS: [&str; 3] = ["key", "label", "pixels"];

/// Metadata key holding the format name.
pub(crate) const META_FORMAT: &str = "format";
/// Metadata key holding the format version.
pub(crate) const META_VERSION: &str = "version";
/// Metadata key holding the mode (`fixed` or `variable`).
pub(crate) const META_MODE: &str = "mode";
/// Metadata key holding the JSON-encoded array of per-record samples.
pub(crate) const META_SAMPLES: &str = "samples";
/// Reserved key of the safetensors header that holds the metadata map.
pub(crate) const METADATA_ENTRY: &str = "__metadata__";

/// Sample field holding the record key.
pub(crate) const SAMPLE_KEY: &str = "key";
/// Sample field holding the record label.
pub(crate) const SAMPLE_LABEL: &str = "label";

/// Fixed mode: all records, `U8 [N, H, W, 3]`.
pub(crate) const T_IMAGES: &str = "images";
/// Variable mode: all records, padded, `U8 [total]`.
pub(crate) const T_PIXELS: &str = "pixels";
/// Variable mode: record start offsets plus a sentinel, `U64 [N + 1]`.
pub(crate) const T_OFFSETS: &str = "offsets";
/// Variable mode: record shapes, `U32 [N, 3]`.
pub(crate) const T_SHAPES: &str = "shapes";
/// Both modes: labels, `I64 [N]`.
pub(crate) const T_LABELS: &str = "labels";
/// Both modes: xxh3-64 of each record's pixels, `U64 [N]`.
pub(crate) const T_CHECKSUMS: &str = "checksums";

/// Number of channels of every record (RGB8).
pub(crate) const CHANNELS: u32 = 3;

/// How the records of a shard are stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ShardMode {
    /// Every record has the same `H x W x 3` shape; tensor `images`.
    Fixed,
    /// Records have their own shapes; tensors `pixels`, `offsets`, `shapes`.
    Variable,
}

impl ShardMode {
    /// The value of the `mode` metadata entry for this mode.
    pub fn as_str(self) -> &'static str {
        match self {
            ShardMode::Fixed => "fixed",
            ShardMode::Variable => "variable",
        }
    }

    /// Parses a `mode` metadata value.
    pub(crate) fn parse(s: &str) -> Option<Self> {
        match s {
            "fixed" => Some(ShardMode::Fixed),
            "variable" => Some(ShardMode::Variable),
            _ => None,
        }
    }
}

impl std::fmt::Display for ShardMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The checksum stored for a record: xxh3-64 of exactly its `h * w * 3`
/// pixel bytes.
pub fn checksum(pixels: &[u8]) -> u64 {
    twox_hash::XxHash3_64::oneshot(pixels)
}

/// Rounds `x` up to a multiple of `align` (a power of two), or `None` on
/// overflow.
pub(crate) fn round_up(x: u64, align: u64) -> Option<u64> {
    debug_assert!(align.is_power_of_two());
    Some(x.checked_add(align - 1)? & !(align - 1))
}

/// Pixel byte count of an `h x w x 3` record, or `None` on overflow.
pub(crate) fn record_len(height: u32, width: u32) -> Option<u64> {
    u64::from(height)
        .checked_mul(u64::from(width))?
        .checked_mul(u64::from(CHANNELS))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_up_works() {
        assert_eq!(round_up(0, 64), Some(0));
        assert_eq!(round_up(1, 64), Some(64));
        assert_eq!(round_up(64, 64), Some(64));
        assert_eq!(round_up(65, 4096), Some(4096));
        assert_eq!(round_up(u64::MAX, 64), None);
    }

    #[test]
    fn record_len_overflow() {
        assert_eq!(record_len(2, 3), Some(18));
        assert_eq!(record_len(u32::MAX, u32::MAX), None);
    }

    #[test]
    fn mode_strings_round_trip() {
        for m in [ShardMode::Fixed, ShardMode::Variable] {
            assert_eq!(ShardMode::parse(m.as_str()), Some(m));
            assert_eq!(m.to_string(), m.as_str());
        }
        assert_eq!(ShardMode::parse("auto"), None);
    }
}
