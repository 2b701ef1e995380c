#!/usr/bin/env python3
"""Peer baseline for shardtool: pack an ImageFolder with PIL + webdataset.

Usage::

    python3 scripts/bench_pack_peer.py INPUT_DIR OUT_DIR \
        [--size 256] [--quality 90] [--maxcount 100000]

What it does (single process, single thread of Python work), for every image
of ``INPUT_DIR/<class>/<file>`` in sorted order of ``(class, file)``:

1. read+decode: read the file's bytes, ``PIL.Image.open`` them and
   ``convert("RGB")`` (which forces the decode);
2. resize: if the shorter side is larger than ``--size``, resize with
   ``Image.BICUBIC`` so that the shorter side is exactly ``--size`` and the
   longer side is ``long * size / short`` rounded half up (the same rule as
   shardtool: 640x480 -> 341x256, 400x350 -> 293x256); images whose shorter
   side is already <= ``--size`` are left alone (downscale only);
3. encode: JPEG at ``--quality`` into memory (Pillow defaults otherwise);
4. tar write: ``webdataset.ShardWriter(OUT_DIR/shard-%06d.tar,
   maxsize=256 MiB, maxcount=--maxcount)`` gets
   ``{"__key__": "%09d" % i, "jpg": bytes, "cls": label}`` where ``label`` is
   the index of the class folder in sorted order.

Each stage is timed with ``time.perf_counter``; the result is printed as one
JSON line on stdout, e.g.::

    {"tool": "webdataset+PIL", "images": 1000, "seconds": 6.1,
     "images_per_s": 163.9, "stage_ms_per_image": {"read_decode": ...,
     "resize": ..., "encode": ..., "tar_write": ...}, ...}

``seconds`` is the wall time of the whole run (directory walk, all stages,
closing the last shard).  EXIF orientation is not applied (PIL does not do it
implicitly); the bench crops carry no EXIF.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import sys
import time
from pathlib import Path

import PIL
from PIL import Image
import webdataset as wds

IMAGE_EXTS = {".jpg", ".jpeg", ".png", ".bmp", ".gif", ".tif", ".tiff", ".webp", ".ppm", ".pgm"}
MAXSIZE = 256 * 1024 * 1024  # 256 MiB


def target_size(w: int, h: int, size: int) -> tuple[int, int]:
    """Shorter side -> ``size``, longer side rounded half up; downscale only."""
    if min(w, h) <= size:
        return w, h
    if w <= h:
        return size, (2 * h * size + w) // (2 * w)
    return (2 * w * size + h) // (2 * h), size


def list_imagefolder(root: Path) -> tuple[list[str], list[tuple[Path, int]]]:
    classes = sorted(e.name for e in os.scandir(root) if e.is_dir() and not e.name.startswith("."))
    items = []
    for label, cls in enumerate(classes):
        names = sorted(e.name for e in os.scandir(root / cls)
                       if e.is_file() and os.path.splitext(e.name)[1].lower() in IMAGE_EXTS)
        items.extend((root / cls / n, label) for n in names)
    return classes, items


def main() -> None:
    ap = argparse.ArgumentParser(description="PIL + webdataset.ShardWriter baseline packer")
    ap.add_argument("input_dir", type=Path)
    ap.add_argument("out_dir", type=Path)
    ap.add_argument("--size", type=int, default=256)
    ap.add_argument("--quality", type=int, default=90)
    ap.add_argument("--maxcount", type=int, default=100000)
    args = ap.parse_args()

    t_start = time.perf_counter()
    classes, items = list_imagefolder(args.input_dir)
    if not items:
        sys.exit(f"no images found under {args.input_dir}/<class>/")
    args.out_dir.mkdir(parents=True, exist_ok=True)
    pattern = str(args.out_dir / "shard-%06d.tar")

    t_read = t_resize = t_encode = t_write = 0.0
    bytes_in = bytes_out = 0
    resized = 0
    pc = time.perf_counter

    t0 = pc()
    sink = wds.ShardWriter(pattern, maxcount=args.maxcount, maxsize=MAXSIZE, verbose=0)
    t_write += pc() - t0
    for i, (path, label) in enumerate(items):
        t0 = pc()
        with open(path, "rb") as f:
            data = f.read()
        im = Image.open(io.BytesIO(data))
        im = im.convert("RGB")
        t1 = pc()
        size = target_size(im.width, im.height, args.size)
        if size != im.size:
            im = im.resize(size, Image.BICUBIC)
            resized += 1
        t2 = pc()
        buf = io.BytesIO()
        im.save(buf, format="JPEG", quality=args.quality)
        jpg = buf.getvalue()
        t3 = pc()
        sink.write({"__key__": "%09d" % i, "jpg": jpg, "cls": label})
        t4 = pc()
        t_read += t1 - t0
        t_resize += t2 - t1
        t_encode += t3 - t2
        t_write += t4 - t3
        bytes_in += len(data)
        bytes_out += len(jpg)
    n_shards = sink.shard  # close() deletes the attribute
    t0 = pc()
    sink.close()
    t_write += pc() - t0
    seconds = pc() - t_start

    n = len(items)
    result = {
        "tool": "webdataset+PIL",
        "images": n,
        "seconds": round(seconds, 4),
        "images_per_s": round(n / seconds, 2),
        "stage_ms_per_image": {
            "read_decode": round(1e3 * t_read / n, 4),
            "resize": round(1e3 * t_resize / n, 4),
            "encode": round(1e3 * t_encode / n, 4),
            "tar_write": round(1e3 * t_write / n, 4),
        },
        "stage_seconds": {
            "read_decode": round(t_read, 4),
            "resize": round(t_resize, 4),
            "encode": round(t_encode, 4),
            "tar_write": round(t_write, 4),
        },
        "classes": len(classes),
        "resized": resized,
        "input_bytes": bytes_in,
        "output_jpeg_bytes": bytes_out,
        "shards": n_shards,
        "size": args.size,
        "quality": args.quality,
        "processes": 1,
        "versions": {"python": sys.version.split()[0], "pillow": PIL.__version__,
                     "webdataset": getattr(wds, "__version__", "?")},
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
