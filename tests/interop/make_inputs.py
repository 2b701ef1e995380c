#!/usr/bin/env python3
"""Writes pack inputs with the real tools users bring them from, and what each should carry.

Usage: make_inputs.py IMAGEFOLDER OUT

* OUT/wds/shard-00000{0,1,2}.tar: written by `webdataset.ShardWriter` (maxcount 20) from the JPEGs
  of IMAGEFOLDER, each sample with `jpg`, `cls`, a `json` in img2dataset's style and a `txt`
  caption, except every seventh sample, which has no caption.
* OUT/parquet/data/train-0000{0,1}-of-00002.parquet: the Hugging Face `datasets` layout written
  with pyarrow: `image` (struct of `bytes`, `path`), `label` (int64, a `ClassLabel` in the
  `huggingface` schema metadata), `text`, `score` (float64); the last row of the last file has a
  null image.
* OUT/parquet-layouts/<layout>.parquet: the first six images (same schema, no metadata) written
  with each compression codec and page layout pyarrow offers: data page v1 and v2, dictionary or
  not, page index, page checksums, statistics or not, small pages and row groups.
* OUT/wds-names/: samples whose keys a tar header cannot hold, each with a `jpg` and a unique
  `txt`: `pax.tar` by `webdataset.TarWriter` (Python's tarfile, pax headers for names that are
  not ASCII or over 100 bytes) and `gnu.tar` by tarfile in GNU format (`././@LongLink` members).
* OUT/wds-dup/dup.tar: by `webdataset.TarWriter`, the same key written twice in a row (its
  members then repeat `jpg` and `txt` within one sample), then one ordinary sample.
* OUT/expect.json: per WebDataset key and per Parquet `file:row`, the fields pack must carry.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    import pyarrow as pa
    import pyarrow.parquet as pq
    import webdataset as wds

    src, out = Path(argv[1]), Path(argv[2])
    images = sorted(p for p in src.rglob("*") if p.suffix.lower() in (".jpg", ".jpeg"))
    classes = sorted({p.parent.name for p in images})
    expect: dict[str, Any] = {"wds": {}, "parquet": {}, "classes": classes}

    (out / "wds").mkdir(parents=True)
    pattern = str(out / "wds" / "shard-%06d.tar")
    with wds.ShardWriter(pattern, maxcount=20, verbose=0) as sink:
        for i, p in enumerate(images):
            key = f"{i:09d}"
            meta = json.dumps({"key": key, "url": f"https://example.com/{p.name}",
                               "width": 9999, "height": 9999, "status": "success"})
            sample: dict[str, Any] = {
                "__key__": key,
                "jpg": p.read_bytes(),
                "cls": str(classes.index(p.parent.name)).encode(),
                "json": meta.encode(),
            }
            if i % 7 != 3:
                sample["txt"] = f"a photo of {p.stem}, sample {i} \u00e9".encode()
            sink.write(sample)
            expect["wds"][key] = {
                "cls": classes.index(p.parent.name),
                "json": meta,
                "txt": sample["txt"].decode() if "txt" in sample else None,
            }

    (out / "parquet" / "data").mkdir(parents=True)
    features = {"info": {"features": {
        "image": {"_type": "Image"},
        "label": {"names": classes, "_type": "ClassLabel"},
        "text": {"dtype": "string", "_type": "Value"},
        "score": {"dtype": "float64", "_type": "Value"},
    }}}
    schema = pa.schema(
        [
            ("image", pa.struct([("bytes", pa.binary()), ("path", pa.string())])),
            ("label", pa.int64()),
            ("text", pa.string()),
            ("score", pa.float64()),
        ],
        metadata={"huggingface": json.dumps(features)},
    )
    half = (len(images) + 1) // 2
    for f, part in enumerate([images[:half], images[half:]]):
        name = f"train-{f:05d}-of-00002.parquet"
        rows: dict[str, list[Any]] = {"image": [], "label": [], "text": [], "score": []}
        for r, p in enumerate(part):
            last = f == 1 and r == len(part) - 1
            rows["image"].append(None if last else {"bytes": p.read_bytes(), "path": p.name})
            rows["label"].append(classes.index(p.parent.name))
            rows["text"].append(f"row {r} of {name}: {p.stem}")
            rows["score"].append(r / 4)
            expect["parquet"][f"{name}:{r}"] = {
                "label": rows["label"][-1], "text": rows["text"][-1], "score": r / 4,
                "image_path": None if last else p.name, "image": not last,
            }
        table = pa.table(rows, schema=schema)
        # Small row groups, as `datasets` writes image data (it streams by row group).
        pq.write_table(table, out / "parquet" / "data" / name, row_group_size=8)
    layouts: dict[str, dict[str, Any]] = {
        "default": {},
        "uncompressed-v2": {"compression": "none", "data_page_version": "2.0"},
        "zstd-v2-page-index": {"compression": "zstd", "data_page_version": "2.0",
                               "write_page_index": True},
        "gzip-no-dictionary": {"compression": "gzip", "use_dictionary": False},
        "lz4-checksums": {"compression": "lz4", "write_page_checksum": True},
        "brotli-small-pages": {"compression": "brotli", "data_page_size": 1024,
                               "row_group_size": 2},
        "snappy-no-statistics": {"compression": "snappy", "write_statistics": False},
    }
    (out / "parquet-layouts").mkdir()
    first = images[:6]
    table = pa.table({
        "image": [{"bytes": p.read_bytes(), "path": p.name} for p in first],
        "label": [classes.index(p.parent.name) for p in first],
        "text": [p.stem for p in first],
    })
    expect["layouts"] = {"names": list(layouts), "rows": len(first)}
    for name, options in layouts.items():
        pq.write_table(table, out / "parquet-layouts" / f"{name}.parquet", **options)
    import io
    import tarfile

    (out / "wds-names").mkdir()
    names: dict[str, str] = {}
    with open(out / "wds-names" / "pax.tar", "wb") as f:
        w = wds.TarWriter(f)
        for i, p in enumerate(images[:4]):
            key = f"photo-\u00e9\u00e8-{i}" if i % 2 else f"{'long' * 30}-{i}"
            names[key] = f"caption of {key}"
            w.write({"__key__": key, "jpg": p.read_bytes(), "txt": names[key].encode()})
        w.close()
    with tarfile.open(out / "wds-names" / "gnu.tar", "w", format=tarfile.GNU_FORMAT) as t:
        for i, p in enumerate(images[4:8]):
            key = f"{'d' * 60}/{'gnu' * 40}-{i}"
            names[key] = f"caption of {key}"
            for field, data in (("jpg", p.read_bytes()), ("txt", names[key].encode())):
                info = tarfile.TarInfo(f"{key}.{field}")
                info.size = len(data)
                t.addfile(info, io.BytesIO(data))
    expect["names"] = names
    (out / "wds-dup").mkdir()
    with open(out / "wds-dup" / "dup.tar", "wb") as f:
        w = wds.TarWriter(f)
        for key, caption in (("twice", "first"), ("twice", "second"), ("once", "only")):
            w.write({"__key__": key, "jpg": images[0].read_bytes(), "txt": caption.encode()})
        w.close()
    (out / "expect.json").write_text(json.dumps(expect))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
