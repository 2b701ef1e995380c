#!/usr/bin/env python3
"""Check a shardtool packed shard with the reference Python safetensors reader.

Usage: interop_numpy.py SHARD EXPECTED_JSON

EXPECTED_JSON holds {"mode": "fixed"|"variable", "records": [{"key": str,
"label": int, "shape": [h, w, 3], "pixels": [int, ...], "checksum": int}, ...]}.
Exits 0 when `safetensors.numpy.load_file` returns arrays equal to the
expected values, 1 (with a message on stderr) otherwise.
"""

import json
import struct
import sys

import numpy as np
from safetensors import safe_open
from safetensors.numpy import load_file


class Mismatch(Exception):
    pass


def check(cond, msg):
    if not cond:
        raise Mismatch(msg)


def main(shard_path, expected_path):
    with open(expected_path, encoding="utf-8") as f:
        expected = json.load(f)
    records = expected["records"]
    n = len(records)
    mode = expected["mode"]

    with open(shard_path, "rb") as f:
        (header_len,) = struct.unpack("<Q", f.read(8))
    check((8 + header_len) % 4096 == 0, f"data buffer at {8 + header_len} is not 4096-aligned")

    tensors = load_file(shard_path)
    with safe_open(shard_path, framework="np") as f:
        meta = f.metadata()
    check(meta["format"] == "shardtool.packed", f"format is {meta.get('format')!r}")
    check(meta["version"] == "1", f"version is {meta.get('version')!r}")
    check(meta["mode"] == mode, f"mode is {meta.get('mode')!r}, expected {mode!r}")
    samples = json.loads(meta["samples"])
    check(len(samples) == n, f"{len(samples)} samples, expected {n}")

    labels = tensors["labels"]
    checksums = tensors["checksums"]
    check(labels.dtype == np.int64 and labels.shape == (n,), f"labels {labels.dtype} {labels.shape}")
    check(checksums.dtype == np.uint64 and checksums.shape == (n,), f"checksums {checksums.dtype} {checksums.shape}")

    if mode == "fixed":
        check(set(tensors) == {"images", "labels", "checksums"}, f"tensors {sorted(tensors)}")
        images = tensors["images"]
        h, w, c = records[0]["shape"]
        check(images.dtype == np.uint8 and images.shape == (n, h, w, c), f"images {images.dtype} {images.shape}")
        views = [images[i] for i in range(n)]
    elif mode == "variable":
        check(set(tensors) == {"pixels", "offsets", "shapes", "labels", "checksums"}, f"tensors {sorted(tensors)}")
        pixels, offsets, shapes = tensors["pixels"], tensors["offsets"], tensors["shapes"]
        check(pixels.dtype == np.uint8 and pixels.ndim == 1, f"pixels {pixels.dtype} {pixels.shape}")
        check(offsets.dtype == np.uint64 and offsets.shape == (n + 1,), f"offsets {offsets.dtype} {offsets.shape}")
        check(shapes.dtype == np.uint32 and shapes.shape == (n, 3), f"shapes {shapes.dtype} {shapes.shape}")
        check(int(offsets[n]) == pixels.shape[0], "offsets[N] != len(pixels)")
        views = []
        for i in range(n):
            h, w, c = (int(x) for x in shapes[i])
            start = int(offsets[i])
            check(start % 64 == 0, f"record {i} at {start} is not 64-aligned")
            views.append(pixels[start:start + h * w * c].reshape(h, w, c))
    else:
        raise Mismatch(f"unknown expected mode {mode!r}")

    for i, rec in enumerate(records):
        check(samples[i]["key"] == rec["key"], f"record {i}: key {samples[i]['key']!r} != {rec['key']!r}")
        check(int(labels[i]) == rec["label"], f"record {i}: label {int(labels[i])} != {rec['label']}")
        check(int(checksums[i]) == rec["checksum"], f"record {i}: checksum mismatch")
        want = np.array(rec["pixels"], dtype=np.uint8).reshape(rec["shape"])
        check(views[i].shape == want.shape, f"record {i}: shape {views[i].shape} != {want.shape}")
        check(np.array_equal(views[i], want), f"record {i}: pixels differ")

    print(f"ok: {n} {mode} records match")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    try:
        main(sys.argv[1], sys.argv[2])
    except (Mismatch, KeyError) as e:
        print(f"interop_numpy.py: mismatch: {e!r}", file=sys.stderr)
        sys.exit(1)
