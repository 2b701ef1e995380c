//! The checks of shardtool's fuzz targets, one function per target: each runs a parser of
//! untrusted bytes on arbitrary input and asserts what must hold beyond "no panic". The
//! libFuzzer targets in `fuzz/fuzz_targets/` call these, and `tests/replay.rs` runs every seed,
//! corpus entry and regression through them in `cargo test`.

mod crop;
mod dataset;
mod image_transform;
mod loader_state;
mod manifest;
mod options;
mod packed_open;
mod wds_tar;

pub use crop::crop;
pub use dataset::{dataset, dataset_passes_verify, remove_dataset_folder};
pub use image_transform::image_transform;
pub use loader_state::{loader_state, remove_dataset};
pub use manifest::manifest;
pub use options::options;
pub use packed_open::packed_open;
pub use shardtool_pack::fuzzing::{list, parquet, plan_records, remove_scratch, wds_input};
pub use wds_tar::wds_tar;

/// A target's check: runs on any bytes, panics on a finding.
pub type Check = fn(&[u8]);

/// Every target, by name (the folder names under `fuzz/seeds/`, `fuzz/corpus/` and
/// `fuzz/regressions/`).
pub const TARGETS: &[(&str, Check)] = &[
    ("packed_open", packed_open),
    ("wds_tar", wds_tar),
    ("manifest", manifest),
    ("image_transform", image_transform),
    ("crop", crop),
    ("list", list),
    ("parquet", parquet),
    ("plan_records", plan_records),
    ("options", options),
    ("loader_state", loader_state),
    ("wds_input", wds_input),
    ("dataset", dataset),
];
