"""Pack on a Ray cluster: plan once, one Ray task per part, then merge.

Parts are idempotent (a part skips shards already done, and a repeated shard has the same
bytes), so Ray's task retries and a rerun of this driver after a crash are both safe: a rerun
keeps the plan already in OUTPUT when it was made from the same input and options, and refuses
one made from others. OUTPUT must be reachable from every node: a shared file system or an
``s3://`` folder.

Run it as a module::

    python -m shardtool.ray INPUT OUTPUT --parts 8 --shard-samples 5000 --resize shorter:256

or from Python::

    import ray, shardtool.ray
    ray.init()
    shardtool.ray.pack(INPUT, OUTPUT, parts=8, shard_samples=5000, resize="shorter:256")
"""

from __future__ import annotations

import argparse
import operator
import os
import re
import sys
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence, Union

from . import _partition
from ._loader import _check_int
from ._options import Int, PartitionOptions

# Unpack types **options: from typing_extensions before Python 3.11, where only a type checker,
# or a tool reading the signature (typing.get_type_hints), needs it.
if sys.version_info >= (3, 11):
    from typing import Unpack
else:
    try:
        from typing_extensions import Unpack
    except ImportError:  # pragma: no cover
        pass


def pack(
    input: Union[str, "os.PathLike[str]"],
    output: Union[str, "os.PathLike[str]"],
    *,
    parts: Int,
    shard_samples: Int,
    cpus_per_part: Int = 1,
    max_retries: Int = 3,
    **options: Unpack[PartitionOptions],
) -> Dict[str, Any]:
    """Plans ``input`` into ``output`` with ``shard_samples`` positions per shard (keeping a
    plan already in ``output`` if it was made from the same input and options; ``ValueError``
    naming the differences if not; ``overwrite=True`` plans again, in a local ``output``: an
    ``s3://`` one must be empty), runs ``parts`` Ray tasks of ``cpus_per_part`` CPUs each (a
    task that fails on I/O, a store error or a lost worker is run again, up to ``max_retries``
    times; parts are idempotent), and merges. ``options`` are those of :func:`shardtool.plan`.
    Returns the merge result (``manifest``, ``errors``) with the parts' reports under
    ``parts``. Needs ``ray.init()`` (or a cluster address) first. A relative local ``output``
    is taken from the driver's folder; every node must see it at that path (a shared file
    system), or give an ``s3://`` URL."""
    import ray

    if "jobs" in options:
        raise ValueError("jobs: each part runs cpus_per_part threads; give cpus_per_part instead")
    count = _check_int("parts", parts, 1, maximum=2**32)
    cpus = _check_int("cpus_per_part", cpus_per_part, 1, maximum=4096)
    retries = _check_int("max_retries", max_retries, 0, maximum=2**31 - 1)
    # The tasks may run in another folder (a runtime_env working_dir): a local OUTPUT is named
    # from the driver's.
    output = os.fspath(output)
    if "://" not in output:
        output = os.path.abspath(output)
    # A plan already there is kept if it is the same (resume), unless the caller says otherwise.
    resume = not options.get("overwrite", False)
    plan_options: PartitionOptions = {"resume": resume, **options}
    _partition._plan_as("ray.pack", input, output, shard_samples, dict(plan_options))

    from . import DatasetError, PlanError, TooManyErrorsError

    given = options.get("max_errors")
    max_errors = None if given is None else operator.index(given)

    # Retried: a worker that died, and a part that failed on I/O or a store error (a part is
    # idempotent); not a usage error (ValueError), a part past max_errors or a plan that cannot
    # be run (an input changed since it), which would fail again the same way.
    # Ray's stubs type retry_exceptions as a bool; its docs and runtime take a list of classes.
    @ray.remote(  # type: ignore[call-overload, untyped-decorator]
        num_cpus=cpus, max_retries=retries, retry_exceptions=[OSError, DatasetError]
    )
    def part(index: int) -> Dict[str, Any]:
        try:
            return _partition.pack_part(output, index, count, jobs=cpus, max_errors=max_errors)
        except TooManyErrorsError as e:
            return {"too_many_errors": str(e)}
        except PlanError as e:
            return {"plan_error": str(e)}

    reports: List[Dict[str, Any]] = ray.get([part.remote(i) for i in range(count)])
    for field, error in (("plan_error", PlanError), ("too_many_errors", TooManyErrorsError)):
        stopped = [r[field] for r in reports if field in r]
        if stopped:
            raise error(stopped[0])
    # This run's limit, if given, over the one a kept plan was made with.
    merged = _partition.merge(output, max_errors=max_errors)
    merged["parts"] = reports
    return merged


def _flags(e: BaseException, paths: Sequence[str] = ()) -> str:
    """``e``'s message naming this command's flags rather than the keyword arguments: a name
    with an underscore wherever it stands, a one-word one where it is used as an option
    (``quality=95``, ``keys "x"``, ``(seed)``, ``compress:``, ``quality must``). ``paths`` (the
    command's own, as given and made absolute) are left as they are."""
    text = str(e)
    kept = sorted({q for p in paths for q in (p, os.path.abspath(p))}, key=len, reverse=True)
    for i, p in enumerate(kept):
        text = text.replace(p, f"\0{i}\0")
    text = text.replace("overwrite=True", "--overwrite")
    names = {*_PACK_FLAGS, "drop_columns", "max_errors", "shard_samples", "cpus_per_part", "parts"}
    for name in sorted(names):
        flag = "--" + ("drop-column" if name == "drop_columns" else name.replace("_", "-"))
        if name == "shuffle":
            flag = "--no-shuffle"
        if flag in text:
            continue
        # Not inside a path or a word (`/tmp/max_errors/`, `the keys of`).
        if "_" in name:
            text = re.sub(rf"(?<![\w/.-]){name}(?![\w/.-])", flag, text)
        else:
            text = re.sub(rf"(?<![\w/.-]){name}(?=[=:)]| \"| must)", flag, text)
    for i, p in enumerate(kept):
        text = text.replace(f"\0{i}\0", p)
    return text


# The options main() passes to pack as given (None: pack's default).
_PACK_FLAGS = (
    "input_format", "image_column", "label_column", "text_column", "resize", "upscale", "filter",
    "decode_scale", "format", "encode", "quality", "compress", "keys", "prefix", "max_pixels",
    "seed", "shuffle",
)


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m shardtool.ray",
        description="Pack INPUT into OUTPUT with one Ray task per part, then merge.",
    )
    p.add_argument("input")
    p.add_argument("output")
    p.add_argument("--parts", type=int, required=True, help="Ray tasks (parts of the plan)")
    p.add_argument("--shard-samples", type=int, required=True, help="positions per shard")
    p.add_argument("--cpus-per-part", type=int, default=1, help="CPUs (and pack threads) of each task (default 1)")
    p.add_argument("--address", default=None, help="Ray cluster address (default: local)")
    p.add_argument("--num-cpus", type=int, default=None, help="CPUs of a local Ray instance")
    # The pack options, as `shardtool pack`'s flags of the same names (its --help says more);
    # one not given takes pack's default.
    p.add_argument("--input-format", choices=["imagefolder", "list", "wds", "parquet"])
    p.add_argument("--image-column", help="the list's or Parquet file's image column")
    p.add_argument("--label-column", help="the label column")
    p.add_argument("--text-column", help="the caption column (the .txt field)")
    p.add_argument(
        "--drop-column", action="append", default=None, metavar="NAME",
        help="leave a list's or Parquet file's column out (repeat, or separate with commas)",
    )
    p.add_argument("--resize", help="as shardtool pack's --resize (default none)")
    p.add_argument("--upscale", action="store_true", default=None, help="let --resize enlarge")
    p.add_argument("--filter", help="resize filter (default catmull-rom)")
    p.add_argument("--decode-scale", help="JPEG DCT scaling (default gap:2)")
    p.add_argument("--format", choices=["wds", "packed"], help="shard format (default wds)")
    p.add_argument("--encode", choices=["jpeg", "png", "keep"], help="image encoding (default jpeg)")
    p.add_argument("--quality", type=int, help="JPEG quality (default 90)")
    p.add_argument("--compress", help="shard compression: none or zstd[:LEVEL] (default none)")
    p.add_argument("--keys", help="sample keys: input or index (default input)")
    p.add_argument("--prefix", help="shard file name prefix (default shard)")
    p.add_argument("--max-pixels", type=int, help="largest image accepted, in pixels")
    p.add_argument("--seed", type=int, help="shuffle seed (default 0)")
    p.add_argument("--no-shuffle", action="store_false", dest="shuffle", default=None,
                   help="keep the inputs' order")
    p.add_argument(
        "--max-errors",
        type=int,
        default=None,
        help="commit nothing (exit 1) if more than N inputs failed in the whole pack",
    )
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="plan again, replacing a plan (and what was packed under it) already in a local "
        "OUTPUT (an s3:// OUTPUT must be empty: objects are never deleted)",
    )
    a = p.parse_args(argv)
    import ray

    from . import DatasetError

    paths = (a.input, a.output)
    ray.init(address=a.address, num_cpus=a.num_cpus)
    try:
        r = pack(
            a.input,
            a.output,
            parts=a.parts,
            shard_samples=a.shard_samples,
            cpus_per_part=a.cpus_per_part,
            max_errors=a.max_errors,
            overwrite=a.overwrite,
            drop_columns=[n for v in a.drop_column or [] for n in v.split(",") if n] or None,
            **{name: getattr(a, name) for name in _PACK_FLAGS},
        )
    except ray.exceptions.RayTaskError as e:
        # A part that failed for good (its retries spent): its own error, not Ray's traceback
        # (such an error is also an instance of its cause's type, so it is caught first).
        print(f"error: a part failed: {_flags(e.cause if e.cause is not None else e, paths)}", file=sys.stderr)
        return 1
    except (ValueError, FileNotFoundError) as e:
        # A usage error (another plan in OUTPUT, a bad option): the message, not a traceback,
        # naming this command's flag rather than the keyword argument.
        print(f"error: {_flags(e, paths)}", file=sys.stderr)
        return 2
    except (DatasetError, OSError) as e:
        print(f"error: {_flags(e, paths)}", file=sys.stderr)
        return 1
    finally:
        ray.shutdown()
    m = r["manifest"]
    print(
        f"packed {m['totals']['samples']} samples into {m['totals']['shards']} shard(s) "
        f"with {a.parts} Ray task(s); {len(r['errors'])} input(s) failed"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
