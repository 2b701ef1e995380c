//! WebDataset tar shards: a deterministic USTAR writer over any `Write`, and a reader over bytes
//! that validates every header and groups members into samples by the WebDataset key rule.
//!
//! The format crate never opens files: callers hand it a `Write` or a byte slice (an mmap, a
//! buffer). See `README.md` beside this crate for the member layout.

mod fields;
mod index;
mod meta;
mod reader;
mod stream;
mod writer;

pub use fields::{
    image_field, is_image_field, is_metadata_member, parse_cls, quote, txt_problem, IMAGE_FIELDS,
    LABEL_FIELD, MAX_TEXT_BYTES,
};
pub use index::{index_samples, IndexError, MemberSpan, SampleSpan, MAX_EXTENSION_BYTES};
pub use meta::{json_string, json_value, replace_nonfinite, SampleMeta};
pub use reader::{group_samples, split_name, Entry, EntryKind, ReadError, Sample, TarReader};
pub use stream::{StreamError, StreamHeader, Tail, TarStream};
pub use writer::{tar_bytes, ustar_header, TarWriter, FIXED_MTIME};

/// Size of a tar block.
pub const BLOCK: usize = 512;

/// Most members one sample may have (its image, metadata, label and carried fields): a sample
/// has a handful; verify checks this many and reports the rest, and pack refuses a sample over
/// it, so that what pack writes verifies.
pub const MAX_SAMPLE_MEMBERS: usize = 4096;
