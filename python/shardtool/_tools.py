"""``pack``, ``verify`` and ``inspect``: the CLI's library calls with Python results."""

from __future__ import annotations

import difflib
import json
import os
import sys
from typing import TYPE_CHECKING, Any, Dict, List, Literal, Optional, Tuple, Union

from . import _shardtool
from ._options import Int, PackOptions
from ._loader import _check_bool, _check_fetch, _check_int, _check_path, cache_limit_bytes


def _report(text: str) -> Dict[str, Any]:
    """A report the native module returns as a JSON object, parsed."""
    report: Dict[str, Any] = json.loads(text)
    return report


PathLike = Union[str, "os.PathLike[str]"]

# Unpack types **options: from typing_extensions before Python 3.11 (a dependency there), where
# only a type checker, or a tool reading the signature (typing.get_type_hints), needs it.
if sys.version_info >= (3, 11):
    from typing import Unpack
else:
    try:
        from typing_extensions import Unpack
    except ImportError:  # pragma: no cover
        pass


# The most worker threads a pack starts (the Rust side refuses more too).
MAX_JOBS = 4096

# Integer options of pack and their least value (each at most 2**63 - 1; the seed 2**64 - 1,
# jobs MAX_JOBS).
_INT_OPTIONS = {"seed": 0, "shard_samples": 1, "jobs": 1, "max_pixels": 1, "max_errors": 0}
_BOOL_OPTIONS = ("upscale", "shuffle", "overwrite", "resume")
_STR_OPTIONS = (
    "format", "resize", "filter", "encode", "decode_scale", "compress", "keys", "prefix",
    "input_format", "image_column", "label_column", "text_column",
)
_OPTIONS = frozenset(
    [*_INT_OPTIONS, *_BOOL_OPTIONS, *_STR_OPTIONS, "quality", "drop_columns", "shard_size"]
)


def checked_options(options: Dict[str, Any], caller: str = "pack") -> Dict[str, Any]:
    """``options`` of :func:`pack` checked, each error naming the option: an unknown one (a
    ``TypeError`` naming ``caller``, with the option meant), a wrong type (a ``TypeError``),
    an integer out of range (a ``ValueError``, not an ``OverflowError`` from the conversion;
    numpy's integers as ints); an int ``shard_size`` as bytes. An option given as ``None``
    takes its default."""
    unknown = sorted(set(options) - _OPTIONS)
    if unknown:
        name = unknown[0]
        # `no_shuffle=True` is the CLI's `--no-shuffle`; a close spelling is offered otherwise.
        negated = name[3:] if name.startswith("no_") and name[3:] in _BOOL_OPTIONS else None
        meant = difflib.get_close_matches(name, sorted(_OPTIONS), n=1, cutoff=0.75)
        hint = (
            f" (did you mean {negated}=False?)" if negated
            else f" (did you mean {meant[0]!r}?)" if meant
            else ""
        )
        raise TypeError(f"{caller}() got an unexpected keyword argument {name!r}{hint}")
    options = {k: v for k, v in options.items() if v is not None}

    def integer(name: str, value: Any, least: int, most: int) -> None:
        # A bool (an int to the bindings) is never what was meant; _check_int refuses it.
        if value is not None:
            options[name] = _check_int(name, value, least, maximum=most)

    for name, least in _INT_OPTIONS.items():
        most = {"seed": 2**64 - 1, "jobs": MAX_JOBS}.get(name, 2**63 - 1)
        integer(name, options.get(name), least, most)
    integer("quality", options.get("quality"), 1, 100)
    # Flags and texts checked here too, so a wrong type names the argument.
    for name in _BOOL_OPTIONS:
        if name in options:
            options[name] = _check_bool(name, options[name])
    for name in _STR_OPTIONS:
        value = options.get(name)
        if value is not None and not isinstance(value, str):
            raise TypeError(f"{name} must be a str, not {type(value).__name__}")
    drop = options.get("drop_columns")
    if drop is not None:
        if not isinstance(drop, (list, tuple)) or not all(isinstance(c, str) for c in drop):
            raise TypeError("drop_columns must be a list of column names (str)")
        options["drop_columns"] = list(drop)
    size = options.get("shard_size")
    if size is not None and options.get("shard_samples") is not None:
        raise ValueError(
            "shard_size rolls shards by size, shard_samples fixes the samples of each: pass one"
        )
    if size is not None and not isinstance(size, (bool, str)) and hasattr(size, "__index__"):
        integer("shard_size", size, 1, 2**63 - 1)
        options["shard_size"] = str(options["shard_size"])
    elif size is not None and not isinstance(size, str):
        kind = type(size).__name__
        raise TypeError(f"shard_size must be bytes (int) or a size (str), not {kind}")
    encode = options.get("encode")
    if options.get("format") == "packed" and encode not in (None, "jpeg"):
        # As the CLI refuses them (pack and plan alike): the option would be ignored.
        raise ValueError(
            f"encode={encode!r}: packed shards hold raw pixels; encode chooses how wds shards "
            "store images"
        )
    quality = options.get("quality")
    if quality is not None and (options.get("format") == "packed" or encode == "png"):
        raise ValueError(
            f"quality={quality!r}: only JPEG-encoded wds shards use it, and "
            + (
                "packed shards hold raw pixels"
                if options.get("format") == "packed"
                else 'encode="png" is lossless'
            )
        )
    return options


def pack(
    input: PathLike,
    output: PathLike,
    *,
    input_format: Optional[Literal["imagefolder", "list", "wds", "parquet"]] = None,
    image_column: Optional[str] = None,
    label_column: Optional[str] = None,
    text_column: Optional[str] = None,
    drop_columns: Optional[Union[List[str], Tuple[str, ...]]] = None,
    **options: Unpack[PackOptions],
) -> Dict[str, Any]:
    """Packs images into shards in ``output``, as ``shardtool pack INPUT OUTPUT`` does.

    ``input`` is what the CLI takes as INPUT (a ``str`` or an ``os.PathLike``): an image folder
    (``class/image.jpg``), a CSV or JSONL list, WebDataset ``.tar`` shards, Parquet files (or a
    folder of them, as in the Hugging Face layout), a brace pattern
    (``"shards/s-{000..009}.tar"``), a glob in the last path component (``"shards/*.tar"``), or
    URLs (``http(s)://``, ``s3://``, ``file://``) of shards or Parquet files.

    ``input_format`` says what ``input`` holds when its names do not: ``"imagefolder"``,
    ``"list"``, ``"wds"`` or ``"parquet"`` (a pattern of names without ``.tar`` or ``.parquet``
    needs it). ``image_column``, ``label_column`` and ``text_column`` name the list or Parquet
    columns holding the image (for a list, its path), the label (an integer or class name) and
    the text carried as each sample's ``.txt``; by default ``image`` (list: ``path``, or
    ``file_name`` in a list with no ``path`` column, as a Hugging Face imagefolder's
    ``metadata.jsonl``, which a folder holding one at its top is packed by), ``label``
    and ``text`` (Parquet: ``text``, then ``caption``); ``image_column`` also names a
    WebDataset sample's image field (``"left.jpg"``; default its first of jpg, jpeg, png, webp,
    …). ``drop_columns`` names list or Parquet
    columns to leave out as if the input lacked them (case ignored): not carried into ``.json``
    or as fields, never chosen by default (drop ``"label"`` for an unlabelled dataset); Parquet
    files never read them, so a large column costs nothing. Each must be a column of the input.

    The other options are the CLI's flags with underscores: ``format`` (``"wds"`` or
    ``"packed"``), ``resize`` (``"none"``, ``"shorter:256"``, ``"longer:512"``, ``"fit:512x512"``,
    ``"crop:224x224"``), ``upscale``, ``filter`` (``"catmull-rom"``, ``"lanczos3"``, ``"bilinear"``), ``encode``
    (``"jpeg"``, ``"png"``, ``"keep"``; ``format="packed"`` stores raw pixels), ``quality`` (JPEG quality, 1 to 100, default 90;
    refused with ``encode="png"`` and ``format="packed"``, which do not use it),
    ``decode_scale`` (``"gap:2"``, the default: JPEGs shrink while decoding only while still
    twice the target, so the resize filter makes the last step; ``"gap:N"`` for another gap
    from 1 to 8; ``"fast"`` to shrink as far as the target allows, quicker but blurrier;
    ``"full"`` for none), ``compress`` (``"zstd"``, ``"zstd:LEVEL"``), ``keys`` (``"input"``,
    the default: an input's own key, a WebDataset sample's or a list's ``key`` column, refused
    when it breaks the key rules; ``"index"``: every sample numbered by its position, the input's
    key kept in its ``source``), ``seed``, ``shuffle``,
    ``shard_size`` (bytes, or a size like ``"64MiB"``), ``shard_samples``, ``prefix``, ``jobs``,
    ``max_pixels``, ``max_errors``,
    ``overwrite`` (replace an earlier dataset in ``output``; it is deleted only once the new
    one's first shard is ready, so inputs that all fail leave it whole), ``resume`` (with
    ``shard_samples``: continue a pack that was interrupted in ``output``, keeping the shards it
    published).

    Returns a dict with the published ``manifest``, the failed inputs (``errors``), ``bytes_in``,
    ``bytes_out``, ``packed_now`` (images this call packed: fewer than the manifest's on a
    resume), ``finished_before`` (a resume found the dataset finished) and ``seconds``. Raises ``FileNotFoundError`` for a missing input (a plain
    local path; a file a pattern or URL names that is missing when the pack reaches it is a
    failed input, a ``bad_shard`` line in ``errors``),
    ``ValueError`` for bad options (the message names the argument, e.g. ``input_format``),
    ``DatasetError`` when too many inputs fail. The GIL is released while packing; Ctrl-C stops
    the pack at its next input (listing a large input is waited for), removes its temporary
    files and raises ``KeyboardInterrupt``: rerun with ``resume=True`` (with ``shard_samples``)
    or ``overwrite=True``. ``resume`` and ``overwrite`` together are refused.
    """
    columns = dict(
        input_format=input_format,
        image_column=image_column,
        label_column=label_column,
        text_column=text_column,
        drop_columns=drop_columns,
    )
    checked = checked_options({**options, **columns})
    if checked.get("resume") and checked.get("overwrite"):
        raise ValueError(
            "resume=True continues an interrupted pack, overwrite=True starts over: pass one"
        )
    return _report(
        _shardtool.pack(
            _check_path("input", input),
            _check_path("output", output),
            **checked,
        )
    )


def verify(
    path: PathLike,
    decode: bool = False,
    *,
    jobs: Optional[Int] = None,
    cache_dir: Optional[PathLike] = None,
    cache_limit: Optional[Union[Int, str]] = None,
    fetch_timeout: Optional[float] = None,
    fetch_attempts: Optional[Int] = None,
    fetch_concurrency: Optional[Int] = None,
) -> Dict[str, Any]:
    """Checks every shard of a dataset (sizes, checksums, structure; with ``decode``, every image).

    ``path`` is a dataset folder or its ``manifest.json``, local or as an ``http(s)://`` or
    ``s3://`` URL. A remote dataset's shards are fetched into the shard cache (``cache_dir``, at
    most ``cache_limit`` bytes, as for :class:`Loader`), checked on the way in, and verified
    there, each held only while it is checked: ``fetch_concurrency`` downloading and ``jobs``
    checked at once, the larger of the two held; the limit needs room for that many of the
    largest shards, not for the dataset.
    Problems name the shards as the server stores them.
    ``fetch_timeout``, ``fetch_attempts`` and ``fetch_concurrency`` are as for :class:`Loader`
    (``--fetch-timeout``, ``--fetch-attempts``, ``--fetch-concurrency``).

    Returns the report as a dict; ``report["ok"]`` is true when no problem was found, and
    ``report["problems"]`` lists the rest. Raises ``FileNotFoundError`` for a missing path,
    ``ManifestError`` when the manifest is missing or unreadable (or ``path`` is a shard), and
    ``CacheError`` when a remote dataset cannot be opened or its cache limit cannot hold the shards read at once.
    """
    jobs = _check_int("jobs", jobs, 1, optional=True, maximum=MAX_JOBS)
    timeout, attempts, concurrency = _check_fetch(fetch_timeout, fetch_attempts, fetch_concurrency)
    decode = _check_bool("decode", decode)
    if decode is None:
        raise TypeError("decode must be True or False, not None")
    return _report(
        _shardtool.verify(
            _check_path("path", path),
            decode=decode,
            jobs=jobs,
            cache_dir=_check_path("cache_dir", cache_dir, optional=True),
            cache_limit=cache_limit_bytes(cache_limit),
            fetch_timeout=timeout,
            fetch_attempts=attempts,
            fetch_concurrency=concurrency,
        )
    )


def inspect(
    path: PathLike,
    *,
    jobs: Optional[Int] = None,
    cache_dir: Optional[PathLike] = None,
    cache_limit: Optional[Union[Int, str]] = None,
    fetch_timeout: Optional[float] = None,
    fetch_attempts: Optional[Int] = None,
    fetch_concurrency: Optional[Int] = None,
) -> Dict[str, Any]:
    """Counts, class histogram, image sizes, fields and pack options of a dataset or one shard,
    as a dict.

    ``path`` is a dataset folder, its ``manifest.json`` or one shard file, or the ``http(s)://``
    or ``s3://`` URL of a dataset: its shards are fetched into the shard cache (``cache_dir``, at
    most ``cache_limit`` bytes, as for :class:`Loader`) and read there, each held only while it
    is read (as for :func:`verify`), with stored sizes and formats as the server has them. Shards that cannot be read are
    listed under ``problems`` and left out of the figures. ``fetch_timeout``, ``fetch_attempts``
    and ``fetch_concurrency`` are as for :class:`Loader`.
    """
    jobs = _check_int("jobs", jobs, 1, optional=True, maximum=MAX_JOBS)
    timeout, attempts, concurrency = _check_fetch(fetch_timeout, fetch_attempts, fetch_concurrency)
    return _report(
        _shardtool.inspect(
            _check_path("path", path),
            jobs=jobs,
            cache_dir=_check_path("cache_dir", cache_dir, optional=True),
            cache_limit=cache_limit_bytes(cache_limit),
            fetch_timeout=timeout,
            fetch_attempts=attempts,
            fetch_concurrency=concurrency,
        )
    )
