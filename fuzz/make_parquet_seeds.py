#!/usr/bin/env python3
"""Writes the seeds of the `parquet` fuzz target with pyarrow, the writer users' files come from.

Run from the repository root: python3 fuzz/make_parquet_seeds.py. The output is deterministic.

* hf.parquet: the Hugging Face `datasets` layout (an `image` struct of `bytes` and `path`, a
  `label` that the `huggingface` schema metadata names as a ClassLabel, `text`, a float column),
  snappy, two row groups, one null image.
* binary.parquet: a plain binary `jpg` column and an int64 `label`, zstd, no metadata.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq


def main() -> None:
    out = Path(__file__).resolve().parent / "seeds" / "parquet"
    out.mkdir(parents=True, exist_ok=True)
    features = {"info": {"features": {
        "image": {"_type": "Image"},
        "label": {"_type": "ClassLabel", "names": ["cat", "dog"]},
        "text": {"_type": "Value", "dtype": "string"},
    }}}
    image = pa.array(
        [{"bytes": b"\xff\xd8\xff" + bytes([i]) * 5, "path": f"img/{i}.jpg"} for i in range(3)] + [None],
        type=pa.struct([("bytes", pa.binary()), ("path", pa.string())]),
    )
    table = pa.table({
        "image": image,
        "label": pa.array([0, 1, 1, 0], type=pa.int64()),
        "text": pa.array(["a", "b", None, "d"]),
        "score": pa.array([0.5, 1.0, 2.5, None]),
    }).replace_schema_metadata({"huggingface": json.dumps(features)})
    pq.write_table(table, out / "hf.parquet", row_group_size=2, compression="snappy")
    plain = pa.table({
        "jpg": pa.array([b"\x89PNG" + bytes([i]) * 4 for i in range(3)], type=pa.binary()),
        "label": pa.array([2, 0, 7], type=pa.int64()),
    })
    pq.write_table(plain, out / "binary.parquet", compression="zstd")
    for p in sorted(out.iterdir()):
        print(p, p.stat().st_size, "bytes")


if __name__ == "__main__":
    main()
