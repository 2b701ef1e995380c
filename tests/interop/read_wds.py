#!/usr/bin/env python3
"""Reads a shardtool WebDataset dataset with the `webdataset` library and checks it.

Usage: read_wds.py DATASET_DIR

For every shard listed in DATASET_DIR/manifest.json (in order; `.tar.zst` shards are piped through
`zstd -dc`), reads every sample with `webdataset.WebDataset(urls, shardshuffle=False)` and
`.decode("pil")`, and checks that:

* each sample has a `cls`, a `json` and exactly one image field (`jpg` or `png`);
* `cls` equals the json's `label`, and the json's `key` equals the sample's `__key__`;
* the decoded image size equals the json's `width` x `height`;
* keys are unique;
* the number of samples equals the manifest's `totals.samples` and each shard's `samples`.

Prints one JSON object on stdout: {"ok", "samples", "shards", "per_shard", "classes",
"fields", "errors"} and exits 0 when every check passed, 1 otherwise (2 for a usage error).
"""

import json
import os
import shlex
import sys
from collections import Counter


def main(argv):
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    root = argv[1]
    try:
        import webdataset as wds
    except ImportError as e:  # pragma: no cover - the Rust test checks this first
        print(json.dumps({"ok": False, "errors": [f"cannot import webdataset: {e}"]}))
        return 1

    with open(os.path.join(root, "manifest.json"), encoding="utf-8") as f:
        manifest = json.load(f)

    errors = []
    keys = set()
    per_shard = []
    classes = Counter()
    fields = Counter()
    total = 0
    for shard in manifest["shards"]:
        path = os.path.join(root, shard["file"])
        url = f"pipe:zstd -dc {shlex.quote(path)}" if shard.get("compression") == "zstd" else path
        ds = wds.WebDataset([url], shardshuffle=False, empty_check=False).decode("pil")
        n = 0
        for sample in ds:
            n += 1
            key = sample["__key__"]
            where = f"{shard['file']}:{key}"
            if key in keys:
                errors.append(f"{where}: duplicate key")
            keys.add(key)
            images = [f for f in ("jpg", "png") if f in sample]
            fields.update(f for f in sample if not f.startswith("__"))
            if "cls" not in sample or "json" not in sample or len(images) != 1:
                errors.append(f"{where}: fields {sorted(sample)}")
                continue
            meta = sample["json"]
            if sample["cls"] != meta.get("label"):
                errors.append(f"{where}: cls {sample['cls']!r} != json label {meta.get('label')!r}")
            if meta.get("key") != key:
                errors.append(f"{where}: json key {meta.get('key')!r}")
            img = sample[images[0]]
            if img.size != (meta.get("width"), meta.get("height")):
                errors.append(
                    f"{where}: image is {img.size}, json says {meta.get('width')}x{meta.get('height')}"
                )
            if img.mode != "RGB":
                errors.append(f"{where}: image mode {img.mode}")
            classes[meta.get("class")] += 1
        if n != shard["samples"]:
            errors.append(f"{shard['file']}: read {n} samples, manifest says {shard['samples']}")
        per_shard.append(n)
        total += n

    if total != manifest["totals"]["samples"]:
        errors.append(f"read {total} samples, manifest totals say {manifest['totals']['samples']}")

    summary = {
        "ok": not errors,
        "samples": total,
        "shards": len(per_shard),
        "per_shard": per_shard,
        "classes": dict(sorted(classes.items())),
        "fields": dict(sorted(fields.items())),
        "errors": errors[:50],
    }
    print(json.dumps(summary))
    return 0 if not errors else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
