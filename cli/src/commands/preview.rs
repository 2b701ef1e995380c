//! `shardtool preview`: a contact sheet PNG of seeded-random samples, written atomically.

use crate::args::PreviewArgs;
use crate::commands::verify::{fetched, local_target, open_remote, opened};
use crate::Failure;
use anyhow::anyhow;
use shardtool_core::AtomicFile;
use shardtool_inspect::{encode_png, preview, preview_remote, PreviewOptions};

/// Runs `shardtool preview`.
pub fn run(a: PreviewArgs) -> Result<(), Failure> {
    // PNG bytes under another image extension would mislead whatever opens the file.
    let ext = a
        .output
        .extension()
        .map(|e| e.to_string_lossy().to_ascii_lowercase());
    if ext.as_deref().is_some_and(|e| e != "png") {
        return Err(Failure::usage(anyhow!(
            "--output {}: the contact sheet is a PNG; name it .png",
            a.output.display()
        )));
    }
    let mut opts = PreviewOptions {
        count: a.count as usize,
        seed: a.seed,
        tile: a.tile,
        columns: a.columns.map(|c| c as usize),
        ..PreviewOptions::default()
    };
    if let Some(j) = a.jobs {
        opts.jobs = j as usize;
    }
    let sheet = match open_remote(&a.target, &a.cache, a.json)? {
        Some((ds, workers)) => fetched(preview_remote(&ds, workers, &opts), a.json)?,
        None => opened(preview(&local_target(&a.target), &opts), a.json)?,
    };
    for s in &sheet.skipped {
        errln!("warning: skipped {s}");
    }
    if sheet.items.is_empty() {
        return Err(Failure::run(anyhow!(
            "no sample could be read from {}",
            a.target.display()
        )));
    }
    let png = encode_png(&sheet.image).map_err(|e| Failure::run(anyhow!(e)))?;
    AtomicFile::write(&a.output, &png)
        .map_err(|e| Failure::run(anyhow!("writing {}: {e}", a.output.display())))?;
    let failed = sheet.items.iter().filter(|i| i.error.is_some()).count();
    if a.json {
        let doc = serde_json::json!({
            "output": a.output.display().to_string(),
            "width": sheet.image.width,
            "height": sheet.image.height,
            "samples_available": sheet.samples_available,
            "items": sheet.items,
            "skipped": sheet.skipped,
        });
        outln!("{doc:#}");
    } else {
        outln!(
            "wrote {} ({}x{} px): {} of {} samples, seed {}{}",
            a.output.display(),
            sheet.image.width,
            sheet.image.height,
            sheet.items.len(),
            sheet.samples_available,
            a.seed,
            if failed > 0 {
                format!("; {failed} could not be shown (drawn as red tiles)")
            } else {
                String::new()
            }
        );
    }
    Ok(())
}
