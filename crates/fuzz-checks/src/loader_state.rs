//! The `loader_state` fuzz target's check: a saved loader position (Python's `state_dict`, read
//! back from a checkpoint) resumed on a small local dataset.

use shardtool_reader::{Loader, LoaderState};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// A dataset of eleven tiny PNGs in two classes, packed once per process into the scratch folder.
fn dataset() -> &'static (PathBuf, String) {
    static DS: OnceLock<(PathBuf, String)> = OnceLock::new();
    DS.get_or_init(|| {
        let root = std::env::temp_dir().join(format!("shardtool-fuzz-ds-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        for i in 0..11u8 {
            let class = root.join("in").join(if i % 2 == 0 { "a" } else { "b" });
            std::fs::create_dir_all(&class).expect("scratch folder");
            let img = image::RgbImage::from_pixel(4, 3, image::Rgb([i, 2 * i, 3 * i]));
            img.save(class.join(format!("{i}.png"))).expect("a PNG");
        }
        let out = root.join("ds");
        let mut plan = shardtool_pack::PackPlan::new(
            shardtool_pack::InputSource::Folder(root.join("in")),
            out.clone(),
        );
        plan.shard_samples = Some(4);
        shardtool_pack::pack(&plan, &shardtool_pack::NoProgress).expect("packs");
        let fingerprint = Loader::builder(&out)
            .build()
            .expect("opens")
            .state()
            .dataset;
        (out, fingerprint)
    })
}

/// Removes the dataset this process packed.
pub fn remove_dataset() {
    if let Some(parent) = dataset().0.parent() {
        let _ = std::fs::remove_dir_all(parent);
    }
}

/// A saved state that parses is resumed on the dataset (its fingerprint set to the dataset's:
/// that check is a string comparison, and what follows it is what is under test). Building
/// either fails with an error or gives a loader that reads to the end of its epoch in bounded
/// time, with no more batches than an epoch has and no batch larger than the batch size.
pub fn loader_state(data: &[u8]) {
    let Ok(mut state) = serde_json::from_slice::<LoaderState>(data) else {
        return;
    };
    let (path, fingerprint) = dataset();
    state.dataset = fingerprint.clone();
    let batch_size = state.batch_size;
    let split = state.split;
    let mut builder = Loader::builder(Path::new(path)).workers(1).resume(state);
    if let Some((i, n)) = split {
        builder = builder.split(i, n);
    }
    let Ok(loader) = builder.build() else {
        return;
    };
    let per_epoch = loader.batches_per_epoch();
    let mut seen = 0u64;
    for batch in loader {
        let Ok(batch) = batch else {
            break;
        };
        seen += 1;
        assert!(batch.len() <= batch_size, "a batch of {}", batch.len());
        assert!(seen <= per_epoch, "more batches than an epoch has");
    }
}
