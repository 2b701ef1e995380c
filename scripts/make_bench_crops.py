#!/usr/bin/env python3
"""Generate a benchmark ImageFolder of random 400x350 JPEG crops of real photos.

Usage::

    python3 scripts/make_bench_crops.py OUT_DIR --unpacked UNPACKED_DIR \
        [--count 1000] [--seed 0] [--quality 90] [--max-scale 3.0]

``UNPACKED_DIR`` is the directory the Debian package ``mate-backgrounds``
(1.26.0-1, bookworm) was extracted into with ``dpkg-deb -x`` (it contains
``usr/share/backgrounds/mate/...``); ``scripts/make_bench_data.sh`` downloads
and unpacks it (together with ``opencv-doc``) and then calls this script.

Only the large photographs of mate-backgrounds are used (1280x1024 ..
2560x1600; no logos, renders, paintings or charts), grouped into four classes
by source photo:

    flower     FreshFlower.jpg, Garden.jpg, YellowFlower.jpg
    insect     LadyBird.jpg
    leaf       Blinds.jpg, RainDrops.jpg, GreenMeadow.jpg
    landscape  Dune.jpg, Storm.jpg

Image ``i`` (0-based) gets class ``CLASSES[i % 4]`` (so classes are balanced),
a source photo of that class, a random scale ``s`` in ``[1, max_scale]`` and a
random position; the ``round(400*s) x round(350*s)`` box is cut from the photo,
resized to exactly 400x350 with Pillow LANCZOS (no resize when the box is
already 400x350) and saved as a baseline JPEG (quality 90 by default, 4:2:0) to
``OUT_DIR/<class>/<iiiii>.jpg``.  All random draws come from
``random.Random(seed)``, so the crop boxes are a pure function of
``(seed, count)`` prefix-wise: image ``i`` does not depend on ``count``.
Existing ``*.jpg`` files in ``OUT_DIR/<class>/`` are deleted first; nothing
but the class folders and their JPEGs is written to ``OUT_DIR``.
"""

from __future__ import annotations

import argparse
import hashlib
import random
import sys
from pathlib import Path

from PIL import Image

OUT_W, OUT_H = 400, 350
MATE = "usr/share/backgrounds/mate/nature"

# class -> list of (file inside package, expected sha256 in mate-backgrounds 1.26.0-1)
CLASS_SOURCES = {
    "flower": [
        ("FreshFlower.jpg", "972b0a0c4e5e3fa93f4f244fc84bc64b121a5eac3aaa5856f1308c1f38a02f8e"),
        ("Garden.jpg", "d3095ee09d425ef23d27155412136cf14fc3c9af76ca58b452f55e23da324e78"),
        ("YellowFlower.jpg", "254da96256acb7add685679775a04d1e4a5bc8cd13e5a5a3d61351ce198a5306"),
    ],
    "insect": [
        ("LadyBird.jpg", "e35a9a4126ef969c90b29c038058c5a575a20eadd84106a37bf1fa9931e7b61d"),
    ],
    "leaf": [
        ("Blinds.jpg", "f7aac0dcc2e06d0491643e84df3da1d9db7c4610f58806a880d56e074799f600"),
        ("RainDrops.jpg", "3e4ea9671c28c90a86cf67b3db9daf18c4741587c596333a7529ca589aaa0c16"),
        ("GreenMeadow.jpg", "8fa0de0aa4089f7319c9fb7a6d006d4cab6023e8c8853731557cff53567b4832"),
    ],
    "landscape": [
        ("Dune.jpg", "8a67c2cb0be8c46b70c237311a4fa4d2b4ac7d39568135384787801fa5cc9a91"),
        ("Storm.jpg", "77ca53077831d3237f73393a91fc879158abc046d852941c26e90de336356957"),
    ],
}
CLASSES = ["flower", "insect", "leaf", "landscape"]


def main() -> None:
    ap = argparse.ArgumentParser(description="random 400x350 JPEG crops of real photos "
                                 "in ImageFolder layout")
    ap.add_argument("out_dir", type=Path)
    ap.add_argument("--count", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--unpacked", type=Path, required=True,
                    help="directory mate-backgrounds_*.deb was extracted into (dpkg-deb -x)")
    ap.add_argument("--quality", type=int, default=90)
    ap.add_argument("--max-scale", type=float, default=3.0)
    args = ap.parse_args()
    if args.count < 0:
        sys.exit("--count must be >= 0")

    photos: dict[str, Image.Image] = {}
    for cls in CLASSES:
        for name, digest in CLASS_SOURCES[cls]:
            p = args.unpacked / MATE / name
            if not p.is_file():
                sys.exit(f"missing {p}: extract mate-backgrounds_1.26.0-1_all.deb "
                         f"into {args.unpacked} (dpkg-deb -x)")
            data = p.read_bytes()
            got = hashlib.sha256(data).hexdigest()
            if got != digest:
                print(f"warning: {p} differs from mate-backgrounds 1.26.0-1 "
                      f"(sha256 {got}); crops will differ", file=sys.stderr)
            im = Image.open(p)
            im.load()
            photos[name] = im.convert("RGB")

    for cls in CLASSES:
        d = args.out_dir / cls
        if d.is_dir():
            for f in d.glob("*.jpg"):
                f.unlink()
        d.mkdir(parents=True, exist_ok=True)

    rng = random.Random(args.seed)
    width = max(5, len(str(max(args.count - 1, 0))))
    for i in range(args.count):
        cls = CLASSES[i % len(CLASSES)]
        name = rng.choice(CLASS_SOURCES[cls])[0]
        im = photos[name]
        W, H = im.size
        s_max = max(1.0, min(args.max_scale, W / OUT_W, H / OUT_H))
        s = rng.uniform(1.0, s_max)
        cw = min(W, round(OUT_W * s))
        ch = min(H, round(OUT_H * s))
        x0 = rng.randint(0, W - cw)
        y0 = rng.randint(0, H - ch)
        box = (x0, y0, x0 + cw, y0 + ch)
        crop = im.crop(box)
        if crop.size != (OUT_W, OUT_H):
            crop = crop.resize((OUT_W, OUT_H), Image.Resampling.LANCZOS)
        rel = f"{cls}/{i:0{width}d}.jpg"
        crop.save(args.out_dir / rel, format="JPEG", quality=args.quality)
    print(f"wrote {args.count} crops ({OUT_W}x{OUT_H}, JPEG q{args.quality}) "
          f"to {args.out_dir}", file=sys.stderr)


if __name__ == "__main__":
    main()
