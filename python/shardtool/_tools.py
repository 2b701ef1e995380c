"""``pack``, ``verify`` and ``inspect``: the CLI's library calls with Python results."""

from __future__ import annotations

import json
import os
from typing import Any, Dict, Union

from . import _shardtool

PathLike = Union[str, "os.PathLike[str]"]


def pack(input: PathLike, output: PathLike, **options: Any) -> Dict[str, Any]:
    """Packs an image folder (``class/image.jpg``) into shards in ``output``.

    Options are the CLI's flags with underscores: ``format`` (``"wds"`` or ``"packed"``),
    ``resize`` (``"none"``, ``"256x256"``, ``"short:256"``, …), ``upscale``, ``filter``, ``encode``
    (``"jpeg"``, ``"png"``, ``"raw"``, ``"keep"``), ``quality``, ``decode_scale`` (``"gap:2"``,
    the default: JPEGs shrink while decoding only while still twice the target, so the resize
    filter makes the last step; ``"gap:N"`` for another gap from 1 to 8; ``"fast"`` to shrink as
    far as the target allows, quicker but blurrier; ``"full"`` for none), ``compress``
    (``"zstd"``, ``"zstd:LEVEL"``), ``seed``, ``shuffle``, ``shard_size``, ``shard_samples``,
    ``prefix``, ``jobs``, ``max_pixels``, ``max_errors``, ``overwrite``.

    Returns a dict with the published ``manifest``, the failed inputs (``errors``), ``bytes_in``,
    ``bytes_out`` and ``seconds``. Raises ``FileNotFoundError`` for a missing input, ``ValueError``
    for bad options, ``DatasetError`` when too many inputs fail. The GIL is released while packing;
    Ctrl-C returns control at once (the pack in flight completes in the background).
    """
    return json.loads(_shardtool.pack(os.fspath(input), os.fspath(output), **options))


def verify(path: PathLike, decode: bool = False, *, jobs: Union[int, None] = None) -> Dict[str, Any]:
    """Checks every shard of a dataset (sizes, checksums, structure; with ``decode``, every image).

    Returns the report as a dict; ``report["ok"]`` is true when no problem was found, and
    ``report["problems"]`` lists the rest. Raises ``FileNotFoundError`` for a missing path and
    ``ManifestError`` when the manifest is missing or unreadable.
    """
    return json.loads(_shardtool.verify(os.fspath(path), decode=decode, jobs=jobs))


def inspect(path: PathLike, *, jobs: Union[int, None] = None) -> Dict[str, Any]:
    """Counts, class histogram, image sizes and pack options of a dataset or one shard, as a dict."""
    return json.loads(_shardtool.inspect(os.fspath(path), jobs=jobs))
