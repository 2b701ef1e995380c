//! The single error type of `shardtool-packed`, shared by the writer and the reader.

/// Everything that can go wrong while writing or opening a packed shard.
///
/// Reader variants name the first problem found while validating a shard;
/// writer variants ([`Error::BadInput`], [`Error::HeaderTooLarge`],
/// [`Error::Io`]) describe rejected input or a failing sink.
///
/// Display messages never repeat the text of their source error; walk
/// [`std::error::Error::source`] for the underlying cause.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The input ends before a structure that the header promises.
    #[error("shard is truncated: needs at least {needed} bytes, has {available}")]
    Truncated {
        /// Bytes the shard needs up to the end of the structure being read.
        needed: u64,
        /// Bytes actually available.
        available: u64,
    },

    /// The declared header length (or the header a writer would produce)
    /// exceeds the limit.
    #[error("header of {len} bytes exceeds the limit of {max} bytes")]
    HeaderTooLarge {
        /// The declared or required header length in bytes.
        len: u64,
        /// The limit in force.
        max: u64,
    },

    /// The header is not valid UTF-8 JSON of the safetensors shape.
    #[error("header is not a valid safetensors JSON header")]
    BadJson(#[source] serde_json::Error),

    /// A tensor the mode requires is absent.
    #[error("required tensor `{name}` is missing")]
    MissingTensor {
        /// Name of the missing tensor.
        name: String,
    },

    /// The header holds a tensor that the mode does not define.
    #[error("unexpected tensor `{name}` for this mode")]
    UnexpectedTensor {
        /// Name of the unexpected tensor.
        name: String,
    },

    /// A tensor has the wrong dtype.
    #[error("tensor `{name}` has dtype {found}, which this format does not allow")]
    BadDtype {
        /// Name of the tensor.
        name: String,
        /// The dtype found in the header.
        found: String,
    },

    /// A tensor has the wrong rank or dimensions.
    #[error("tensor `{name}` has a bad shape: {detail}")]
    BadShape {
        /// Name of the tensor.
        name: String,
        /// What is wrong with it.
        detail: String,
    },

    /// A tensor's `data_offsets` disagree with its shape or leave a hole or an
    /// overlap in the data buffer.
    #[error("tensor `{name}` has bad data_offsets: {detail}")]
    BadDataOffsets {
        /// Name of the tensor.
        name: String,
        /// What is wrong with it.
        detail: String,
    },

    /// Bytes follow the last tensor: the data buffer is not exactly covered.
    #[error("{extra} bytes follow the last tensor")]
    TrailingData {
        /// Number of uncovered trailing bytes.
        extra: u64,
    },

    /// A record's pixels do not lie within the `pixels` tensor. `record == len`
    /// refers to the final sentinel entry of `offsets`.
    #[error("record {record} lies outside the pixel tensor")]
    OffsetsOutOfRange {
        /// Index of the offending record (or the sentinel).
        record: usize,
    },

    /// A record starts before the previous record ends.
    #[error("record {record} overlaps the previous record")]
    OverlappingRecords {
        /// Index of the offending record.
        record: usize,
    },

    /// The data buffer does not start on a 4096-byte boundary of the file.
    #[error("data buffer starts at byte {offset}, which is not 4096-byte aligned")]
    Misaligned {
        /// Absolute file offset of the data buffer.
        offset: u64,
    },

    /// A record of a variable-shape shard does not start on a 64-byte
    /// boundary of the `pixels` tensor.
    #[error("record {record} starts at pixel offset {offset}, which is not 64-byte aligned")]
    MisalignedRecord {
        /// Index of the offending record.
        record: usize,
        /// Its offset within the `pixels` tensor.
        offset: u64,
    },

    /// A row of the `shapes` tensor is not `(h >= 1, w >= 1, 3)`.
    #[error("record {record} has an invalid shape")]
    BadRecordShape {
        /// Index of the offending record.
        record: usize,
    },

    /// The `samples` metadata does not hold one entry per record.
    #[error("metadata describes {found} samples but the tensors hold {expected} records")]
    MetadataCountMismatch {
        /// Number of records in the tensors.
        expected: usize,
        /// Number of entries in `samples`.
        found: usize,
    },

    /// The `__metadata__` map is missing, incomplete or wrong.
    #[error("bad metadata: {0}")]
    BadMetadata(String),

    /// A record's `fields` member (its carried fields) breaks the format: not an object, or a
    /// value that is neither a string nor `{"base64": string}` with valid base64.
    #[error("bad `fields` in record {record} ({key}): {detail}")]
    BadFields {
        /// Index of the offending record.
        record: usize,
        /// Its key.
        key: String,
        /// What is wrong.
        detail: String,
    },

    /// The writer rejected a record or an option.
    #[error("bad input: {0}")]
    BadInput(String),

    /// Writing to the sink failed.
    #[error("I/O error while writing the shard")]
    Io(#[from] std::io::Error),
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::error::Error as _;

    #[test]
    fn messages_do_not_repeat_source() {
        let io = std::io::Error::other("disk on fire");
        let e = Error::from(io);
        assert!(!e.to_string().contains("disk on fire"));
        assert!(e.source().is_some());

        let json = serde_json::from_str::<serde_json::Value>("{").err();
        let Some(json) = json else {
            panic!("expected a JSON error")
        };
        let json_msg = json.to_string();
        let e = Error::BadJson(json);
        assert!(!e.to_string().contains(&json_msg));
        assert!(e.source().is_some());
    }
}
