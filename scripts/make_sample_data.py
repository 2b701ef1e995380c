#!/usr/bin/env python3
"""Regenerate shardtool's embedded sample dataset (``sample-data/``).

The sample dataset is a small ImageFolder tree
(``sample-data/imagefolder/<class>/<file>``) of crops of real photographs
taken from two Debian packages (Debian 12 "bookworm"):

* ``mate-backgrounds`` 1.26.0-1      (photos by individual authors, GPL-2+)
* ``opencv-doc``       4.6.0+dfsg-12 (OpenCV sample images, Apache-2.0 AND
  BSD-3-Clause per the package's ``debian/copyright``)

Obtaining the packages (no root needed, any Debian/Ubuntu machine that has
the bookworm archive in its sources)::

    mkdir -p debs && cd debs
    apt-get download mate-backgrounds=1.26.0-1 opencv-doc=4.6.0+dfsg-12
    mkdir -p ../unpacked
    dpkg-deb -x mate-backgrounds_1.26.0-1_all.deb  ../unpacked
    dpkg-deb -x opencv-doc_4.6.0+dfsg-12_all.deb   ../unpacked

(``apt-get download mate-backgrounds opencv-doc`` without versions is fine as
long as the archive still carries these versions; the script checks the
SHA-256 of every source photo it uses and refuses to run on different
files.  Older versions are on https://snapshot.debian.org/.)

Then, from the repository root::

    python3 scripts/make_sample_data.py unpacked            # writes sample-data/

Arguments: ``UNPACKED_DIR`` is the directory given to ``dpkg-deb -x`` (it
contains ``usr/share/...``).  ``--out`` defaults to ``sample-data`` next to
the ``scripts`` directory.  The script deletes the image files previously
present under ``OUT/imagefolder/<class>/`` and rewrites them, together with
``OUT/SOURCES.md`` (provenance, crop boxes, licences and SHA-256 of every
output file).

Determinism: every crop box and output size is drawn from
``random.Random("<seed>:<output name>")`` (string seeding is stable across
Python 3 versions), so the crop boxes recorded in SOURCES.md are exactly
reproducible.  The encoded bytes additionally depend on the Pillow/libjpeg
build (resampling and JPEG encoders are deterministic for a given build; the
committed files were made with the Pillow version listed in SOURCES.md).

Contents / variety, chosen to exercise an image packer:

* 4 classes: ``flower``, ``insect``, ``leaf``, ``landscape``;
* mostly landscape-orientation JPEGs (q85-q90, 200x150 .. 480x360), a few
  portrait ones;
* one grayscale JPEG (mode ``L``), one progressive JPEG;
* one PNG with an alpha channel (RGBA, elliptical soft vignette in alpha);
* one JPEG with EXIF Orientation = 6 whose pixels are stored unrotated
  (i.e. the upright picture rotated 90 degrees counter-clockwise); a viewer
  that honours the tag rotates it 90 degrees clockwise and shows an upright
  portrait ladybird.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import os
import random
import sys
from pathlib import Path

import numpy as np
import PIL
from PIL import Image

SEED = "shardtool-sample-v1"

MATE = ("mate-backgrounds", "1.26.0-1")
OPENCV = ("opencv-doc", "4.6.0+dfsg-12")

MATE_LICENSE = "GPL-2+"
OPENCV_HOLDERS = (
    "2000-2022 Intel Corporation; 2009-2011 Willow Garage Inc.; "
    "2009-2016 NVIDIA Corporation; 2010-2013 Advanced Micro Devices, Inc.; "
    "2015-2022 OpenCV Foundation; 2008-2016 Itseez Inc.; "
    "2019-2022 Xperience AI; 2019-2022 Shenzhen Institute of Artificial "
    "Intelligence and Robotics for Society; respective OpenCV contributors "
    "(catch-all `Files: *` stanza)"
)
OPENCV_LICENSE = "Apache-2.0 AND BSD-3-Clause"

# name -> (package, path inside package, sha256, copyright holder(s), licence)
SOURCES = {
    "FreshFlower": (MATE, "usr/share/backgrounds/mate/nature/FreshFlower.jpg",
                    "972b0a0c4e5e3fa93f4f244fc84bc64b121a5eac3aaa5856f1308c1f38a02f8e",
                    "2005 Jens Ansorg <jens@ansorg-web.de>", MATE_LICENSE),
    "Garden": (MATE, "usr/share/backgrounds/mate/nature/Garden.jpg",
               "d3095ee09d425ef23d27155412136cf14fc3c9af76ca58b452f55e23da324e78",
               "2008 Charles Barbin <barbinch@free.fr>", MATE_LICENSE),
    "YellowFlower": (MATE, "usr/share/backgrounds/mate/nature/YellowFlower.jpg",
                     "254da96256acb7add685679775a04d1e4a5bc8cd13e5a5a3d61351ce198a5306",
                     "2008 Charles Barbin <barbinch@free.fr>", MATE_LICENSE),
    "LadyBird": (MATE, "usr/share/backgrounds/mate/nature/LadyBird.jpg",
                 "e35a9a4126ef969c90b29c038058c5a575a20eadd84106a37bf1fa9931e7b61d",
                 "2008 Charles Barbin <barbinch@free.fr>", MATE_LICENSE),
    "Blinds": (MATE, "usr/share/backgrounds/mate/nature/Blinds.jpg",
               "f7aac0dcc2e06d0491643e84df3da1d9db7c4610f58806a880d56e074799f600",
               "2008 Lennart Poettering <mztabzr@0pointer.de>; 2008 Andrea Cimitan",
               MATE_LICENSE),
    "RainDrops": (MATE, "usr/share/backgrounds/mate/nature/RainDrops.jpg",
                  "3e4ea9671c28c90a86cf67b3db9daf18c4741587c596333a7529ca589aaa0c16",
                  '2008 "blackcombwhistler07" <blackcombwhistler07@googlemail.com>',
                  MATE_LICENSE),
    "GreenMeadow": (MATE, "usr/share/backgrounds/mate/nature/GreenMeadow.jpg",
                    "8fa0de0aa4089f7319c9fb7a6d006d4cab6023e8c8853731557cff53567b4832",
                    "2005 Timothy Schellhase; 2008 Lapo Calamandrei", MATE_LICENSE),
    "Dune": (MATE, "usr/share/backgrounds/mate/nature/Dune.jpg",
             "8a67c2cb0be8c46b70c237311a4fa4d2b4ac7d39568135384787801fa5cc9a91",
             "2007 Marco Cogoni <cogoni@gmail.com>; 2008 Hylke Bons <hylkebons@gmail.com>",
             MATE_LICENSE),
    "Storm": (MATE, "usr/share/backgrounds/mate/nature/Storm.jpg",
              "77ca53077831d3237f73393a91fc879158abc046d852941c26e90de336356957",
              "2008 Sergey Nazarov <phearnot@renee.ru>", MATE_LICENSE),
    "butterfly": (OPENCV, "usr/share/doc/opencv-doc/examples/data/butterfly.jpg",
                  "34a99716b78ded10eae87b4880de739d3e68cc7dd1a96812bb28f469d5eeaea8",
                  OPENCV_HOLDERS, OPENCV_LICENSE),
    "aero1": (OPENCV, "usr/share/doc/opencv-doc/examples/data/aero1.jpg",
              "d9a69191f6e3642ea361bc3c62e677b2f40fe6534b78da540f4155e0734b59ef",
              OPENCV_HOLDERS, OPENCV_LICENSE),
    "aero3": (OPENCV, "usr/share/doc/opencv-doc/examples/data/aero3.jpg",
              "1c407146f8762b3b14a7953ff9bc4c01ed64c467d7277122e769bf7e816017a4",
              OPENCV_HOLDERS, OPENCV_LICENSE),
}

COPYRIGHT_FILES = {
    MATE: "usr/share/doc/mate-backgrounds/copyright",
    OPENCV: "usr/share/doc/opencv-doc/copyright",
}

# Output specification.
#   (class, output stem, source, roi, orientation, maxfrac, special)
# roi: (x0, y0, x1, y1) in source pixels that every crop must contain (the
#      subject); orientation: "L" landscape / "P" portrait output;
# maxfrac: largest crop width as a fraction of the largest crop that fits;
# special: None, "gray", "rgba", "orient6", "progressive".
SPECS = [
    # ---- flower --------------------------------------------------------
    ("flower", "freshflower_01", "FreshFlower", (640, 560, 900, 840), "L", 1.0, None),
    ("flower", "freshflower_02", "FreshFlower", (300, 500, 560, 760), "L", 0.6, None),
    ("flower", "freshflower_03", "FreshFlower", (620, 520, 980, 900), "P", 1.0, None),
    ("flower", "freshflower_04", "FreshFlower", (900, 780, 1100, 960), "L", 0.5, None),
    ("flower", "garden_01", "Garden", (1450, 350, 1950, 850), "L", 1.0, None),
    ("flower", "garden_02", "Garden", (1000, 650, 2000, 1300), "L", 1.0, None),
    ("flower", "garden_03", "Garden", (1500, 380, 1900, 800), "P", 0.8, "progressive"),
    ("flower", "garden_04_rgba", "Garden", (1200, 400, 2200, 1300), "L", 1.0, "rgba"),
    ("flower", "yellowflower_01", "YellowFlower", (1900, 1000, 2500, 1550), "L", 1.0, None),
    ("flower", "yellowflower_02", "YellowFlower", (600, 300, 1600, 1200), "P", 1.0, None),
    ("flower", "yellowflower_03", "YellowFlower", (1100, 200, 1900, 900), "L", 0.7, None),
    ("flower", "yellowflower_04", "YellowFlower", (1950, 1150, 2300, 1450), "L", 0.5, None),
    # ---- insect --------------------------------------------------------
    ("insect", "ladybird_01", "LadyBird", (1640, 680, 1950, 980), "L", 1.0, None),
    ("insect", "ladybird_02", "LadyBird", (1640, 680, 1950, 980), "L", 0.5, None),
    ("insect", "ladybird_03", "LadyBird", (1640, 680, 1950, 980), "L", 0.25, None),
    ("insect", "ladybird_04", "LadyBird", (1640, 680, 1950, 980), "P", 0.6, None),
    ("insect", "ladybird_05", "LadyBird", (1640, 680, 1950, 980), "L", 0.35, None),
    ("insect", "ladybird_06_orient6", "LadyBird", (1640, 680, 1950, 980), "P", 0.45, "orient6"),
    ("insect", "ladybird_07", "LadyBird", (1640, 680, 1950, 980), "L", 0.7, None),
    ("insect", "butterfly_01", "butterfly", (10, 40, 480, 320), "L", 1.0, None),
    ("insect", "butterfly_02", "butterfly", (150, 60, 340, 300), "L", 1.0, None),
    ("insect", "butterfly_03", "butterfly", (170, 110, 320, 290), "P", 1.0, None),
    # ---- leaf ----------------------------------------------------------
    ("leaf", "blinds_01", "Blinds", (900, 500, 1000, 600), "L", 1.0, None),
    ("leaf", "blinds_02", "Blinds", (300, 200, 400, 300), "L", 0.4, None),
    ("leaf", "blinds_03", "Blinds", (1400, 700, 1500, 800), "P", 0.7, None),
    ("leaf", "blinds_04", "Blinds", (1000, 300, 1100, 400), "L", 0.6, None),
    ("leaf", "raindrops_01", "RainDrops", (500, 550, 1100, 900), "L", 1.0, None),
    ("leaf", "raindrops_02", "RainDrops", (430, 500, 600, 640), "L", 0.4, None),
    ("leaf", "raindrops_03", "RainDrops", (780, 640, 900, 760), "L", 0.35, None),
    ("leaf", "raindrops_04", "RainDrops", (500, 300, 1200, 1000), "L", 1.0, None),
    ("leaf", "greenmeadow_01", "GreenMeadow", (500, 400, 700, 600), "L", 1.0, None),
    ("leaf", "greenmeadow_02", "GreenMeadow", (200, 200, 300, 300), "L", 0.5, None),
    ("leaf", "greenmeadow_03", "GreenMeadow", (800, 500, 900, 600), "L", 0.7, None),
    # ---- landscape -----------------------------------------------------
    ("landscape", "dune_01", "Dune", (100, 250, 1500, 700), "L", 1.0, None),
    ("landscape", "dune_02", "Dune", (200, 300, 600, 600), "L", 0.6, None),
    ("landscape", "dune_03", "Dune", (900, 250, 1300, 650), "P", 1.0, None),
    ("landscape", "dune_04", "Dune", (1100, 300, 1500, 600), "L", 0.5, None),
    ("landscape", "storm_01", "Storm", (200, 500, 1700, 1000), "L", 1.0, None),
    ("landscape", "storm_02_gray", "Storm", (300, 600, 900, 950), "L", 0.7, "gray"),
    ("landscape", "storm_03", "Storm", (1100, 650, 1700, 950), "L", 0.6, None),
    ("landscape", "aero1_01", "aero1", (150, 120, 450, 360), "L", 1.0, None),
    ("landscape", "aero1_02", "aero1", (300, 200, 450, 300), "L", 0.6, None),
    ("landscape", "aero3_01", "aero3", (100, 40, 600, 420), "L", 1.0, None),
    ("landscape", "aero3_02", "aero3", (250, 200, 450, 350), "L", 0.7, None),
    ("landscape", "aero3_03", "aero3", (50, 20, 250, 150), "L", 0.6, None),
]

LANDSCAPE_ASPECTS = [(4, 3), (3, 2), (16, 10), (16, 9), (5, 4)]
PORTRAIT_ASPECTS = [(3, 4), (2, 3)]


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def pick_output_size(rng: random.Random, orient: str) -> tuple[int, int]:
    if orient == "L":
        aw, ah = rng.choice(LANDSCAPE_ASPECTS)
        w = rng.randint(200, 480)
        h = max(150, round(w * ah / aw))
        return w, h
    aw, ah = rng.choice(PORTRAIT_ASPECTS)
    h = rng.randint(240, 400)
    w = max(150, round(h * aw / ah))
    return w, h


def pick_crop(rng: random.Random, src_size, roi, out_size, maxfrac):
    """Crop box with the output's aspect ratio that contains ``roi``.

    Never smaller than the output (no upscaling); width drawn uniformly
    between the smallest admissible crop and ``maxfrac`` of the largest.
    """
    W, H = src_size
    rx0, ry0, rx1, ry1 = roi
    ow, oh = out_size
    a = ow / oh
    cw_min = max(rx1 - rx0, (ry1 - ry0) * a, ow, oh * a)
    cw_fit = min(W, H * a)
    cw_max = max(cw_min, cw_min + (cw_fit - cw_min) * maxfrac)
    if cw_min > cw_fit + 1e-6:
        raise ValueError(f"roi {roi} does not fit an aspect {a:.3f} crop in {src_size}")
    cw = cw_min + (cw_max - cw_min) * rng.random()
    ch = cw / a
    cw_i = min(W, max(ow, int(round(cw))))
    ch_i = min(H, max(oh, int(round(ch))))
    x_lo, x_hi = max(0, rx1 - cw_i), min(rx0, W - cw_i)
    y_lo, y_hi = max(0, ry1 - ch_i), min(ry0, H - ch_i)
    x0 = rng.randint(min(x_lo, x_hi), max(x_lo, x_hi))
    y0 = rng.randint(min(y_lo, y_hi), max(y_lo, y_hi))
    return (x0, y0, x0 + cw_i, y0 + ch_i)


def alpha_vignette(w: int, h: int) -> Image.Image:
    """Elliptical soft vignette: opaque centre, transparent corners."""
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float64)
    nx = (xx + 0.5 - w / 2) / (w / 2)
    ny = (yy + 0.5 - h / 2) / (h / 2)
    r = np.sqrt(nx * nx + ny * ny)
    a = np.clip((1.25 - r) / 0.45, 0.0, 1.0)
    return Image.fromarray(np.round(a * 255).astype(np.uint8), "L")


def generate(unpacked: Path, out: Path, seed: str) -> list[dict]:
    # Verify sources first.
    for name, (pkg, rel, digest, _, _) in SOURCES.items():
        p = unpacked / rel
        if not p.is_file():
            sys.exit(f"missing source {p} (from package {pkg[0]} {pkg[1]})")
        got = sha256_file(p)
        if got != digest:
            sys.exit(f"sha256 mismatch for {p}: {got} != {digest} "
                     f"(need {pkg[0]} {pkg[1]})")

    img_root = out / "imagefolder"
    classes = sorted({s[0] for s in SPECS})
    for cls in classes:
        d = img_root / cls
        if d.is_dir():
            for f in d.iterdir():
                if f.is_file() and f.suffix.lower() in (".jpg", ".jpeg", ".png"):
                    f.unlink()
        d.mkdir(parents=True, exist_ok=True)

    cache: dict[str, Image.Image] = {}
    records = []
    for cls, stem, src, roi, orient, maxfrac, special in SPECS:
        rng = random.Random(f"{seed}:{cls}/{stem}")
        if src not in cache:
            im = Image.open(unpacked / SOURCES[src][1])
            im.load()
            cache[src] = im.convert("RGB")
        im = cache[src]
        out_size = pick_output_size(rng, orient)
        box = pick_crop(rng, im.size, roi, out_size, maxfrac)
        quality = rng.choice([85, 88, 90])
        crop = im.crop(box).resize(out_size, Image.Resampling.LANCZOS)

        ext = ".png" if special == "rgba" else ".jpg"
        rel = f"imagefolder/{cls}/{stem}{ext}"
        path = out / rel
        note = ""
        buf = io.BytesIO()
        stored_size = out_size
        if special == "rgba":
            crop = crop.convert("RGBA")
            crop.putalpha(alpha_vignette(*out_size))
            crop.save(buf, format="PNG", optimize=False, compress_level=9)
            quality = None
            note = "RGBA PNG; alpha = elliptical soft vignette (opaque centre, transparent corners)"
        elif special == "gray":
            crop = crop.convert("L")
            crop.save(buf, format="JPEG", quality=quality)
            note = "converted to grayscale (mode L, 1-component JPEG)"
        elif special == "progressive":
            crop.save(buf, format="JPEG", quality=quality, progressive=True)
            note = "progressive JPEG"
        elif special == "orient6":
            stored = crop.transpose(Image.Transpose.ROTATE_90)  # 90 deg CCW
            stored_size = stored.size
            exif = Image.Exif()
            exif[0x0112] = 6
            stored.save(buf, format="JPEG", quality=quality, exif=exif.tobytes())
            note = (f"EXIF Orientation=6; pixels stored rotated 90 deg CCW "
                    f"({stored_size[0]}x{stored_size[1]} stored), displays upright as "
                    f"{out_size[0]}x{out_size[1]} after the 90 deg CW rotation")
        else:
            crop.save(buf, format="JPEG", quality=quality)
        data = buf.getvalue()
        path.write_bytes(data)
        records.append(dict(rel=rel, cls=cls, src=src, src_size=im.size, box=box,
                            out_size=out_size,
                            stored_size=stored_size, quality=quality, note=note,
                            nbytes=len(data), sha=hashlib.sha256(data).hexdigest()))
    return records


def write_sources_md(out: Path, records: list[dict], seed: str) -> None:
    total = sum(r["nbytes"] for r in records)
    classes = sorted({r["cls"] for r in records})
    counts = {c: sum(1 for r in records if r["cls"] == c) for c in classes}
    L = []
    L.append("# sample-data: sources and licences\n")
    L.append("`sample-data/imagefolder/` is shardtool's small embedded default dataset: "
             f"{len(records)} images in {len(classes)} classes "
             + ", ".join(f"`{c}` ({counts[c]})" for c in classes)
             + f", {total} bytes in total. Every file is a crop of a real photograph "
             "shipped in a Debian 12 (bookworm) binary package, resized with Pillow "
             "LANCZOS and re-encoded. No logos, charts or synthetic images are used.\n")
    L.append("It is generated by `scripts/make_sample_data.py` "
             f"(seed `{seed}`, Pillow {PIL.__version__}, numpy {np.__version__}); "
             "see that script's docstring for how to download and unpack the packages. "
             "The script checks the SHA-256 of every source photo listed below.\n")
    L.append("## Licence terms\n")
    L.append("Each file keeps the licence of the photograph it was cut from; the folder "
             "is an aggregate of separately licensed files, not one work under one "
             "licence:\n")
    L.append("* files cut from **mate-backgrounds 1.26.0-1** photos "
             "(`flower/*`, `insect/ladybird_*`, `leaf/*`, `landscape/dune_*`, "
             "`landscape/storm_*`) are licensed **GPL-2.0-or-later** by the copyright "
             "holders listed per file (as stated in "
             "`/usr/share/doc/mate-backgrounds/copyright`, which refers to upstream's "
             "AUTHORS file). The full licence text is in "
             "`/usr/share/common-licenses/GPL-2` on Debian systems or "
             "<https://www.gnu.org/licenses/old-licenses/gpl-2.0.html>. The unmodified "
             "originals (the corresponding source of these crops, together with "
             "`scripts/make_sample_data.py`) are in the Debian source package "
             "`mate-backgrounds` 1.26.0-1 (https://snapshot.debian.org/package/mate-backgrounds/1.26.0-1/) "
             "and upstream at https://git.mate-desktop.org/mate-backgrounds/.\n"
             "* files cut from **opencv-doc 4.6.0+dfsg-12** sample images "
             "(`insect/butterfly_*`, `landscape/aero1_*`, `landscape/aero3_*`) are "
             "licensed **Apache-2.0 AND BSD-3-Clause**, copyright Intel Corporation, "
             "Willow Garage, NVIDIA, AMD, OpenCV Foundation, Itseez, Xperience AI, "
             "Shenzhen Institute of AI and Robotics for Society and the respective "
             "OpenCV contributors, as stated by the catch-all `Files: *` stanza of "
             "`/usr/share/doc/opencv-doc/copyright` (upstream path `samples/data/`). "
             "That copyright file has no stanza specific to these images and does not "
             "name the photographers.\n")
    L.append("Anyone redistributing shardtool together with `sample-data/` must keep "
             "this file (the copyright notices) with it and, for the GPL-2+ files, "
             "make the corresponding source available as described above. If a single "
             "licence for the whole folder is needed, the combination can be "
             "distributed under GPL-3.0-or-later (GPL-2+ permits GPL-3, and both "
             "Apache-2.0 and BSD-3-Clause are GPL-3-compatible).\n")
    L.append("## Source photos\n")
    L.append("| key | package | path inside package | size | SHA-256 | copyright (per package copyright file) | licence |")
    L.append("|---|---|---|---|---|---|---|")
    used = []
    for r in records:
        if r["src"] not in used:
            used.append(r["src"])
    sizes = {r["src"]: r["src_size"] for r in records}
    for key in used:
        (pkg, ver), rel, digest, holder, lic = SOURCES[key]
        w, h = sizes[key]
        L.append(f"| {key} | {pkg} {ver} | `/{rel}` | {w}x{h} | `{digest[:16]}…` | {holder} | {lic} |")
    L.append("")
    L.append("## Output files\n")
    L.append("Crop box is `(left, top, right, bottom)` in source pixels (Pillow "
             "`Image.crop` convention, right/bottom exclusive), applied to the source "
             "converted to RGB; the crop is then resized to the listed size with "
             "`Image.Resampling.LANCZOS`. Sizes are width x height. JPEGs use Pillow's "
             "default 4:2:0 chroma subsampling and carry no metadata except where noted.\n")
    L.append("| file | class | source | crop box | resized to | format | bytes | SHA-256 | notes |")
    L.append("|---|---|---|---|---|---|---|---|---|")
    for r in records:
        b = r["box"]
        fmt = "PNG RGBA" if r["quality"] is None else f"JPEG q{r['quality']}"
        L.append(f"| `{r['rel']}` | {r['cls']} | {r['src']} | ({b[0]}, {b[1]}, {b[2]}, {b[3]}) "
                 f"| {r['out_size'][0]}x{r['out_size'][1]} | {fmt} | {r['nbytes']} "
                 f"| `{r['sha'][:16]}…` | {r['note']} |")
    L.append("")
    L.append("Full SHA-256 of the output files (`sha256sum -c` from `sample-data/`):\n")
    L.append("```")
    for r in records:
        L.append(f"{r['sha']}  {r['rel']}")
    L.append("```")
    L.append("")
    (out / "SOURCES.md").write_text("\n".join(L), encoding="utf-8")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("unpacked", type=Path,
                    help="directory the two .deb files were extracted into (dpkg-deb -x)")
    ap.add_argument("--out", type=Path,
                    default=Path(__file__).resolve().parent.parent / "sample-data")
    ap.add_argument("--seed", default=SEED)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    records = generate(args.unpacked, args.out, args.seed)
    write_sources_md(args.out, records, args.seed)
    total = sum(r["nbytes"] for r in records)
    print(f"wrote {len(records)} images ({total} bytes) under {args.out / 'imagefolder'}")


if __name__ == "__main__":
    main()
