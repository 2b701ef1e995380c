#!/usr/bin/env python3
"""Writes the inputs of scripts/bench_inputs.sh: the same ImageFolder's JPEGs as WebDataset shards
and as a Hugging Face-layout Parquet file, once as they are and once repeated ten times.

Usage: bench_inputs_make.py IMAGEFOLDER OUT [REPEAT]   (REPEAT default 10; 1 writes x1 only)

* OUT/x1/wds/shard-NNNNNN.tar: `webdataset.ShardWriter` (maxcount 1000), each sample with the
  crop's bytes as `jpg`, its class index as `cls` and a caption as `txt`.
* OUT/x1/parquet/data.parquet: pyarrow, row groups of 100 rows, columns `image` (struct of
  `bytes`, `path`), `label` (int64, a `ClassLabel` in the `huggingface` schema metadata), `text`.
* OUT/xREPEAT/wds and OUT/xREPEAT/parquet: the same, every image REPEAT times (distinct keys; one
  Parquet file with REPEAT times the rows).

Prints the sample counts as JSON.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Dict, List


def write(images: List[Path], classes: List[str], out: Path, repeat: int) -> int:
    import pyarrow as pa
    import pyarrow.parquet as pq
    import webdataset as wds

    (out / "wds").mkdir(parents=True)
    (out / "parquet").mkdir(parents=True)
    features = {"info": {"features": {
        "image": {"_type": "Image"},
        "label": {"names": classes, "_type": "ClassLabel"},
        "text": {"dtype": "string", "_type": "Value"},
    }}}
    schema = pa.schema(
        [
            ("image", pa.struct([("bytes", pa.binary()), ("path", pa.string())])),
            ("label", pa.int64()),
            ("text", pa.string()),
        ],
        metadata={"huggingface": json.dumps(features)},
    )
    n = 0
    rows: Dict[str, List[Any]] = {"image": [], "label": [], "text": []}
    pattern = str(out / "wds" / "shard-%06d.tar")
    with wds.ShardWriter(pattern, maxcount=1000, verbose=0) as sink, pq.ParquetWriter(
        # No dictionary: it would store the repeated images of the 10x file once.
        out / "parquet" / "data.parquet", schema, use_dictionary=False
    ) as pw:
        for r in range(repeat):
            for i, p in enumerate(images):
                data = p.read_bytes()
                label = classes.index(p.parent.name)
                caption = f"a photo of a {p.parent.name}, crop {p.stem}, copy {r}"
                sink.write({"__key__": f"{r:02d}{i:07d}", "jpg": data,
                            "cls": str(label).encode(), "txt": caption.encode()})
                rows["image"].append({"bytes": data, "path": p.name})
                rows["label"].append(label)
                rows["text"].append(caption)
                n += 1
                if len(rows["label"]) == 100:
                    # One row group of 100 rows, as `datasets` streams image data.
                    pw.write_table(pa.table(rows, schema=schema))
                    rows = {k: [] for k in rows}
        if rows["label"]:
            pw.write_table(pa.table(rows, schema=schema))
    return n


def main(argv: List[str]) -> int:
    if len(argv) not in (3, 4):
        print(__doc__, file=sys.stderr)
        return 2
    src, out = Path(argv[1]), Path(argv[2])
    repeat = int(argv[3]) if len(argv) == 4 else 10
    images = sorted(p for p in src.rglob("*") if p.suffix.lower() in (".jpg", ".jpeg"))
    classes = sorted({p.parent.name for p in images})
    counts = {"x1": write(images, classes, out / "x1", 1)}
    if repeat > 1:
        counts[f"x{repeat}"] = write(images, classes, out / f"x{repeat}", repeat)
    print(json.dumps(counts))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
