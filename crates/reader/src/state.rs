//! A loader's saved position, which resumes the identical sequence of batches, and the
//! fingerprint that ties it to its dataset.

use crate::dataset::Dataset;
use crate::plan::OrderOptions;
use serde::{Deserialize, Serialize};

/// A loader position that resumes the identical sequence.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LoaderState {
    /// State format version.
    pub version: u32,
    /// Identifies the dataset: XXH3 over the manifest's shard checksums.
    pub dataset: String,
    /// Order options.
    pub order: OrderOptions,
    /// Epoch.
    pub epoch: u64,
    /// Rank and world size.
    pub rank: u32,
    /// World size.
    pub world: u32,
    /// Batch size.
    pub batch_size: usize,
    /// Every batch below this index was delivered.
    pub delivered_prefix: u64,
    /// Batches at or above the prefix that were delivered (out-of-order delivery).
    #[serde(default)]
    pub delivered_extra: Vec<u64>,
    /// A batch of which only the first `consumed` samples were used.
    #[serde(default)]
    pub partial: Option<(u64, usize)>,
    /// `(index, count)`: only every `count`-th batch of the rank's plan, from `index`, is read
    /// (one DataLoader worker's share); the other batches count as delivered.
    #[serde(default)]
    pub split: Option<(u32, u32)>,
    /// Whether the epoch's short last batch is left out (`None` when not recorded: the
    /// loader's own setting applies).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drop_last: Option<bool>,
    /// The world sizes this epoch was read at before this one, oldest first, each with the
    /// whole batches every one of its ranks had delivered when the epoch was resumed at the
    /// next: this rank reads its share of what they left (empty for an epoch read at one).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resharded: Vec<(u32, u64)>,
}

/// Identifies a dataset in saved states: XXH3 over the manifest's shard names and checksums.
pub fn dataset_fingerprint(d: &Dataset) -> String {
    let mut text = Vec::new();
    for s in &d.manifest.shards {
        text.extend_from_slice(s.file.as_bytes());
        text.push(0);
        text.extend_from_slice(s.checksum.as_bytes());
        text.push(0);
    }
    shardtool_core::Checksum::of(&text).to_string()
}
