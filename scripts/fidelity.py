#!/usr/bin/env python3
"""Pixel fidelity of ``shardtool pack`` against PIL, for each ``--decode-scale``.

For every JPEG of the chosen sets, each target size and each decode scale, the image is packed
by shardtool (JPEG output at ``--quality``) and read back. The reference is PIL's full decode
(EXIF orientation applied) resized with ``Image.resize(..., LANCZOS)`` to the packed image's
exact size. PIL's own error is that reference encoded as JPEG at the same quality by PIL and
decoded again: the error a PIL pipeline that stores JPEG has anyway. Per image the script takes
``ratio = MAE(ours, reference) / MAE(PIL's own, reference)`` (MAE: mean absolute difference per
channel value, 0..255) and prints, per set, target and mode: the number of images, the median
and maximum ratio, the share of images over 1.5x, and the median MAEs. Images that the target
leaves at their size are not counted (the decode scale cannot matter there).

Sets: ``sample-data/imagefolder`` (JPEGs only), ``bench-data/crops`` when present, and every
folder given with ``--extra`` (searched recursively for ``*.jpg``/``*.jpeg``).

Usage::

    python3 scripts/fidelity.py [--resize shorter:256 --resize shorter:128]
        [--modes fast,gap:2,full] [--filter lanczos3] [--extra DIR ...] [--no-crops]
        [--csv rows.csv]

Needs a release build (``cargo build --release -p shardtool``), Pillow and numpy.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import statistics
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

import numpy as np
from PIL import Image, ImageOps

ROOT = Path(__file__).resolve().parent.parent


@dataclass
class Row:
    """One image at one target and decode scale."""

    set: str
    path: str
    resize: str
    mode: str
    size: Tuple[int, int]
    ours: float
    pil: float

    @property
    def ratio(self) -> float:
        return self.ours / self.pil if self.pil > 0 else float("inf")


def jpegs(folder: Path) -> List[Path]:
    return sorted(p for p in folder.rglob("*") if p.suffix.lower() in (".jpg", ".jpeg"))


def mae(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.abs(a.astype(np.int16) - b.astype(np.int16)).mean())


def rgb(img: Image.Image) -> np.ndarray:
    return np.asarray(img.convert("RGB"))


def pack(
    binary: Path, paths: Sequence[Path], resize: str, mode: str, options: Sequence[str], work: Path
) -> Dict[int, bytes]:
    """Packs ``paths`` with shardtool; returns the output JPEG of each input, by index."""
    listing = work / "list.jsonl"
    with listing.open("w") as f:
        for i, p in enumerate(paths):
            f.write(json.dumps({"path": str(p.resolve()), "label": 0, "key": f"{i:07d}"}) + "\n")
    out = work / "out"
    cmd = [
        str(binary), "pack", "--list", str(listing), str(out), "--resize", resize,
        "--decode-scale", mode, "--no-shuffle", "--overwrite", "-q", *options,
    ]
    subprocess.run(cmd, check=True)
    found: Dict[int, bytes] = {}
    for shard in sorted(out.glob("*.tar")):
        with tarfile.open(shard) as tar:
            for member in tar:
                key, _, ext = member.name.partition(".")
                if ext == "jpg":
                    data = tar.extractfile(member)
                    if data is not None:
                        found[int(key)] = data.read()
    return found


def reference(path: Path, size: Tuple[int, int], quality: int) -> Tuple[np.ndarray, np.ndarray]:
    """PIL's full decode resized with Lanczos to ``size``, and that image after PIL's own JPEG."""
    with Image.open(path) as im:
        full = ImageOps.exif_transpose(im).convert("RGB")
    ref = full.resize(size, Image.Resampling.LANCZOS)
    buf = io.BytesIO()
    ref.save(buf, "JPEG", quality=quality)
    buf.seek(0)
    with Image.open(buf) as own:
        return rgb(ref), rgb(own)


def upright_size(path: Path) -> Tuple[int, int]:
    with Image.open(path) as im:
        return ImageOps.exif_transpose(im).size


def measure(
    binary: Path,
    sets: Dict[str, List[Path]],
    resizes: Sequence[str],
    modes: Sequence[str],
    quality: int,
    filter: Optional[str],
) -> List[Row]:
    options = ["--quality", str(quality)] + (["--filter", filter] if filter else [])
    rows: List[Row] = []
    for set_name, paths in sets.items():
        sources = [upright_size(p) for p in paths]
        for resize in resizes:
            with tempfile.TemporaryDirectory() as tmp:
                outputs = {m: pack(binary, paths, resize, m, options, Path(tmp)) for m in modes}
            refs: Dict[Tuple[int, Tuple[int, int]], Tuple[np.ndarray, np.ndarray]] = {}
            for mode in modes:
                for i, data in sorted(outputs[mode].items()):
                    with Image.open(io.BytesIO(data)) as im:
                        ours = rgb(im)
                    size = (ours.shape[1], ours.shape[0])
                    if size == sources[i]:
                        continue
                    if (i, size) not in refs:
                        refs[(i, size)] = reference(paths[i], size, quality)
                    ref, own = refs[(i, size)]
                    errors = (mae(ours, ref), mae(own, ref))
                    rows.append(Row(set_name, str(paths[i]), resize, mode, size, *errors))
            print(f"measured {set_name} {resize}: {len(refs)} resized images", file=sys.stderr)
    return rows


def summarise(rows: Iterable[Row]) -> List[str]:
    groups: Dict[Tuple[str, str, str], List[Row]] = {}
    for r in rows:
        groups.setdefault((r.set, r.resize, r.mode), []).append(r)
    lines = [
        "| set | resize | mode | images | median ratio | max ratio | over 1.5x "
        "| median MAE ours | median MAE PIL |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for (s, resize, mode), g in groups.items():
        ratios = [r.ratio for r in g]
        over = sum(x > 1.5 for x in ratios) / len(ratios)
        lines.append(
            f"| {s} | {resize} | {mode} | {len(g)} | {statistics.median(ratios):.3f} | "
            f"{max(ratios):.3f} | {100 * over:.1f}% | {statistics.median(r.ours for r in g):.3f} | "
            f"{statistics.median(r.pil for r in g):.3f} |"
        )
    return lines


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--bin", type=Path, default=ROOT / "target/release/shardtool")
    ap.add_argument("--resize", action="append", help="pack --resize value (repeatable; not crop:)")
    ap.add_argument(
        "--modes", default="fast,gap:2,full", help="comma-separated --decode-scale values"
    )
    ap.add_argument("--quality", type=int, default=90)
    ap.add_argument("--filter", help="pack --filter (default: pack's own default, catmull-rom)")
    ap.add_argument(
        "--extra", type=Path, action="append", default=[], help="another folder of JPEGs"
    )
    ap.add_argument("--no-crops", action="store_true", help="leave out bench-data/crops")
    ap.add_argument("--csv", type=Path, help="also write one row per image here")
    a = ap.parse_args(argv)
    resizes = a.resize or ["shorter:256", "shorter:128"]
    if any(r.startswith("crop:") for r in resizes):
        ap.error("crop: is not supported (the reference would need the same box)")
    if not a.bin.exists():
        ap.error(f"{a.bin} not found: cargo build --release -p shardtool")
    sets = {"sample-data": jpegs(ROOT / "sample-data/imagefolder")}
    crops = ROOT / "bench-data/crops"
    if crops.is_dir() and not a.no_crops:
        sets["bench-crops"] = jpegs(crops)
    for extra in a.extra:
        sets[extra.name] = jpegs(extra)
    for name, paths in sets.items():
        print(f"{name}: {len(paths)} JPEGs", file=sys.stderr)
    rows = measure(a.bin, sets, resizes, a.modes.split(","), a.quality, a.filter)
    if a.csv:
        with a.csv.open("w", newline="") as f:
            w = csv.writer(f)
            w.writerow(
                ["set", "path", "resize", "mode", "width", "height", "mae_ours", "mae_pil", "ratio"]
            )
            for r in rows:
                errors = [f"{r.ours:.4f}", f"{r.pil:.4f}", f"{r.ratio:.4f}"]
                w.writerow([r.set, r.path, r.resize, r.mode, *r.size, *errors])
    print("\n".join(summarise(rows)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
