"""Partitioned packing from Python: ``plan`` once, ``pack_part`` anywhere (a Ray task, a Slurm
job, a notebook), any number of times, then ``merge``. See ``shardtool.ray`` for a Ray driver."""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Any, Dict, Optional, Union

from . import _shardtool
from ._loader import _check_int, _check_path
from ._options import Int, PlanOptions
from ._tools import MAX_JOBS, _report, checked_options

# Unpack types **options: from typing_extensions before Python 3.11, where only a type checker,
# or a tool reading the signature (typing.get_type_hints), needs it.
if sys.version_info >= (3, 11):
    from typing import Unpack
else:
    try:
        from typing_extensions import Unpack
    except ImportError:  # pragma: no cover
        pass

PathLike = Union[str, "os.PathLike[str]"]


def plan(
    input: PathLike,
    output: PathLike,
    *,
    shard_samples: Int,
    **options: Unpack[PlanOptions],
) -> Dict[str, Any]:
    """Lists the inputs once and fixes the options, seed and shard count in ``output/_plan/``.

    Takes the options of :func:`shardtool.pack` but ``shard_size``; ``shard_samples`` (positions per shard) is
    required: shard ``j`` holds positions ``[j*K, (j+1)*K)`` of the seeded order, whoever packs it.
    ``output`` is a folder every part can reach, or an empty ``s3://bucket/prefix/``. Returns
    ``plan`` (the plan hash), ``inputs``, ``shards``, ``shard_samples`` and ``failed_listing``
    (inputs that failed while listing: they are in the merged ``errors.jsonl``).

    A plan already in ``output`` is an error, unless ``overwrite=True`` (replace it and everything
    packed under it) or ``resume=True`` (keep it, when it was made from the same input and options;
    ``ValueError`` naming the options that differ otherwise; the input is compared as the folder
    or file it names, so another spelling of the same path, or another working directory, does
    not matter). A plan killed while planning is simply made again.
    """
    return _plan_as("plan", input, output, shard_samples, dict(options))


def _plan_as(
    caller: str, input: PathLike, output: PathLike, shard_samples: Int, options: Dict[str, Any]
) -> Dict[str, Any]:
    """:func:`plan`, its errors naming ``caller`` (``plan`` or ``ray.pack``)."""
    out = _check_path("output", output)
    if options.get("shard_size") is not None:
        raise TypeError(
            f"{caller}() got an unexpected keyword argument 'shard_size': shard_samples "
            "(required) fixes the samples of each shard of a plan"
        )
    checked = checked_options({**options, "shard_samples": shard_samples}, caller=caller)
    if checked.get("resume") and checked.get("overwrite"):
        # As pack refuses it: overwrite would replace the plan (and a merged dataset) at once.
        raise ValueError(
            "resume=True keeps a plan made from the same inputs, overwrite=True plans again: pass one"
        )
    return _report(_shardtool.pack(_check_path("input", input), out, plan_only=True, **checked))


def pack_part(
    output: PathLike,
    index: Int,
    count: Int,
    *,
    jobs: Optional[Int] = None,
    max_errors: Optional[Int] = None,
) -> Dict[str, Any]:
    """Packs part ``index`` of ``count`` of the plan in ``output``: shards ``j`` with
    ``j % count == index``, skipping those already done, each published with a done record.

    Safe to run again after a crash, or twice at once (the same bytes are written). Returns the
    part's counts (``packed``, ``skipped``, ``samples``, ``failed``, ``seconds`` …). Raises
    ``FileNotFoundError`` when ``output`` holds no plan, ``ValueError`` for a bad part.
    """
    i = _check_int("index", index, 0, maximum=2**63 - 1)
    n = _check_int("count", count, 1, maximum=2**63 - 1)
    threads = _check_int("jobs", jobs, 1, optional=True, maximum=MAX_JOBS)
    most = _check_int("max_errors", max_errors, 0, optional=True, maximum=2**63 - 1)
    return _report(_shardtool.pack_part(_check_path("output", output), i, n, jobs=threads, max_errors=most))


def merge(output: PathLike, *, max_errors: Optional[Int] = None) -> Dict[str, Any]:
    """Commits the partitioned pack in ``output``: every shard must be done and, in a local
    folder, match its checksum (``DatasetError`` naming the missing or damaged ones otherwise;
    a damaged one's done record goes, so its part redoes it); writes ``errors.jsonl``, then
    ``manifest.json`` last, unless more inputs failed than ``max_errors`` (default: the plan's)
    allows (``DatasetError``, nothing committed). Returns the ``manifest`` and the failed inputs
    (``errors``). Running it again is harmless."""
    most = _check_int("max_errors", max_errors, 0, optional=True, maximum=2**63 - 1)
    return _report(_shardtool.merge(_check_path("output", output), max_errors=most))


def status(output: PathLike) -> Dict[str, Any]:
    """Where the partitioned pack in ``output`` stands: ``shards``, ``done`` and ``missing``
    shard indices, ``samples`` and ``failed`` so far, whether it is ``merged``, and the plan's
    ``max_errors`` (``None`` without one; merge commits nothing past it), and ``stopped``: the
    failure lists of runs that stopped past ``max_errors`` (a rerun stops again unless those
    inputs are mended or it is given a larger ``max_errors``)."""
    return _report(_shardtool.status(_check_path("output", output)))
