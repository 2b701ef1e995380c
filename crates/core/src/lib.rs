//! Shared vocabulary of shardtool: sample keys, resource limits, checksums, seeded shuffles and the
//! RGB8 image type that flows between the codec, the packer and the shard formats, the byte-size
//! parser, civil dates of UTC times, and the two file primitives every crate shares: publishing
//! a file atomically ([`AtomicFile`]) and opening a published shard ([`open_shard`], the one
//! file mapping).

pub mod atomic;
pub mod block_writer;
pub mod checksum;
pub mod date;
pub mod key;
pub mod limits;
pub mod redact;
pub mod rng;
pub mod shard_file;
pub mod size;
pub mod threads;

pub use atomic::{process_alive, AtomicFile};
pub use block_writer::{BlockWriter, WRITE_BLOCK};
pub use checksum::{Checksum, ChecksumHasher, HashingReader, HashingWriter};
pub use date::civil_from_days;
pub use key::{index_key, validate_key, KeyError};
pub use limits::{
    fault_hint, machine_fault, names_a_machine_fault, not_regular_file, open_regular,
    read_regular_within, read_within, Limits,
};
pub use redact::redact_urls;
pub use rng::{shuffle, SplitMix64};
pub use shard_file::{
    map_readonly, open_shard, read_to_end_bounded, OpenShard, OpenShardError, ShardBytes,
};
pub use size::{parse_byte_size, ByteSizeError};
pub use threads::{can_start_threads, on_threads};

/// A decoded image in 8-bit RGB, row-major, HWC, with no row padding.
#[derive(Clone, PartialEq, Eq)]
pub struct Rgb8Image {
    /// Width in pixels.
    pub width: u32,
    /// Height in pixels.
    pub height: u32,
    /// `width * height * 3` bytes.
    pub pixels: Vec<u8>,
}

impl Rgb8Image {
    /// Wraps a pixel buffer, checking that its length is `width * height * 3`.
    pub fn new(width: u32, height: u32, pixels: Vec<u8>) -> Option<Self> {
        let expected = (width as usize)
            .checked_mul(height as usize)?
            .checked_mul(3)?;
        (pixels.len() == expected).then_some(Self {
            width,
            height,
            pixels,
        })
    }

    /// Number of pixels.
    pub fn pixel_count(&self) -> u64 {
        u64::from(self.width) * u64::from(self.height)
    }
}

impl std::fmt::Debug for Rgb8Image {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Rgb8Image({}x{})", self.width, self.height)
    }
}
