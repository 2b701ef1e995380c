//! Packed-tensor shards: batches of RGB8 records stored as plain safetensors files.
//!
//! A packed shard is a valid [safetensors] file, so any safetensors reader
//! (Python `safetensors.numpy.load_file`, the Rust `safetensors` crate, ...)
//! opens it. On top of that layout this crate adds conventions that make the
//! records directly addressable without copying pixels:
//!
//! - the data buffer starts on a 4096-byte boundary of the file;
//! - a fixed-shape shard stores every record in one `images` tensor
//!   `U8 [N, H, W, 3]`;
//! - a variable-shape shard stores a flat `pixels` tensor in which every
//!   record starts on a 64-byte boundary, plus `offsets` and `shapes`;
//! - both modes carry `labels` (`I64 [N]`), `checksums` (`U64 [N]`, xxh3-64 of
//!   each record's pixels) and a `__metadata__` entry `samples` holding one
//!   caller-defined JSON object per record (each with at least a `key`), whose
//!   reserved member `fields` holds the record's carried fields (a caption, the
//!   input's JSON …) by name ([`PackedShard::field`]).
//!
//! The byte-level layout is specified in `FORMAT.md` next to this crate's
//! `Cargo.toml`.
//!
//! This crate is only the format layer: it never opens files and never spawns
//! threads. [`PackedWriter`] writes to any [`std::io::Write`];
//! [`PackedShard`] reads from any owner of bytes (`Vec<u8>`, `&[u8]`,
//! `Arc<[u8]>`, a memory map, ...).
//!
//! ```
//! use shardtool_packed::{Mode, PackedShard, PackedWriter, ShardMode};
//!
//! # fn main() -> Result<(), shardtool_packed::Error> {
//! let mut writer = PackedWriter::new(Mode::Auto);
//! writer.add("a", 7, 1, 2, &[1, 2, 3, 4, 5, 6], serde_json::json!({"src": "x.jpg"}))?;
//! writer.add("b", 8, 2, 1, &[9; 6], serde_json::Value::Null)?;
//! let mut bytes = Vec::new();
//! let summary = writer.finish(&mut bytes)?;
//! assert_eq!(summary.total_len, bytes.len() as u64);
//!
//! let shard = PackedShard::open(bytes)?;
//! assert_eq!(shard.mode(), ShardMode::Variable); // the shapes differ
//! let rec = shard.record(1);
//! assert_eq!((rec.key, rec.label, rec.shape), ("b", 8, [2, 1, 3]));
//! assert_eq!(rec.pixels, &[9; 6]);
//! assert_eq!(shard.sample_meta(0)["src"], "x.jpg");
//! assert!(shard.verify_all().is_empty());
//! # Ok(())
//! # }
//! ```
//!
//! [safetensors]: https://github.com/huggingface/safetensors

mod error;
mod fields;
mod format;
mod reader;
mod writer;

pub use error::Error;
pub use fields::{field_value, FieldValue, SAMPLE_FIELDS};
pub use format::{
    checksum, ShardMode, DATA_ALIGN, FORMAT_NAME, FORMAT_VERSION, MAX_HEADER_LEN, RECORD_ALIGN,
    RECORD_FIELDS,
};
pub use reader::{pixel_span, Limits, PackedShard, RecordView};
pub use writer::{Mode, PackedWriter, WriteSummary};
