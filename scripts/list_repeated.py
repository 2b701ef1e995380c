#!/usr/bin/env python3
"""Writes a pack list (CSV: path,label) naming every image under an ImageFolder-style folder
TIMES times over, with the class folder's name as the label: a larger dataset from the bench
crops without copying files.

Usage: scripts/list_repeated.py FOLDER OUT.csv [TIMES]   (default 4)
"""
import os
import sys


def main() -> None:
    if len(sys.argv) not in (3, 4):
        sys.exit(__doc__)
    folder, out = sys.argv[1], sys.argv[2]
    times = int(sys.argv[3]) if len(sys.argv) == 4 else 4
    files = sorted(os.path.join(r, f) for r, _, fs in os.walk(folder) for f in fs)
    if not files:
        sys.exit(f"list_repeated: no files under {folder}")
    with open(out, "w") as o:
        o.write("path,label\n")
        for _ in range(times):
            for f in files:
                o.write(f"{os.path.abspath(f)},{os.path.basename(os.path.dirname(f))}\n")


if __name__ == "__main__":
    main()
