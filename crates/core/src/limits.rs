//! Bounds on what untrusted input may make us allocate.

/// Resource limits applied to every untrusted input (image files, shards, manifests).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Largest decoded image, in pixels (width × height), checked from the header before decoding.
    pub max_pixels: u64,
    /// Largest input file read into memory, in bytes.
    pub max_input_bytes: u64,
    /// Largest manifest or shard header read into memory, in bytes.
    pub max_header_bytes: u64,
}

impl Limits {
    /// 100 megapixels: larger than any camera photo, small enough to stop decompression bombs.
    pub const DEFAULT_MAX_PIXELS: u64 = 100_000_000;
    /// 512 MiB per input file.
    pub const DEFAULT_MAX_INPUT_BYTES: u64 = 512 << 20;
    /// 256 MiB per manifest or shard header.
    pub const DEFAULT_MAX_HEADER_BYTES: u64 = 256 << 20;
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_pixels: Self::DEFAULT_MAX_PIXELS,
            max_input_bytes: Self::DEFAULT_MAX_INPUT_BYTES,
            max_header_bytes: Self::DEFAULT_MAX_HEADER_BYTES,
        }
    }
}
