"""The ``Loader``: options, lazy rank resolution, output conversion and resumable state around the
Rust reader (``_shardtool.Reader``), which is created at each ``iter()`` in the process that
iterates."""

from __future__ import annotations

import json
import multiprocessing
import numbers
import operator
import os
import sys
import threading
import urllib.parse
import warnings
import weakref
from typing import (
    TYPE_CHECKING, Any, Callable, Dict, Iterator, List, Literal, Optional, Sequence,
    Tuple, Union, overload,
)

if TYPE_CHECKING:
    import torch

    Device = Union[str, torch.device, None]
else:
    # Resolvable at run time without torch (typing.get_type_hints, config parsers).
    Device = Union[str, Any, None]

from . import _shardtool
from ._options import Int

STATE_FORMAT = 1
# Most whole batches each reader thread may hold ready (the Rust reader's bound).
MAX_PREFETCH = 1024
_OUTPUTS = ("torch", "numpy", "dlpack")
_REMOTE = ("http://", "https://", "s3://", "file://")

Batch = Dict[str, Any]

# Keys of the batch dict (the last two with a crop transform); a carried field may not take one
# of these names.
_BATCH_KEYS = ("image", "label", "key", "epoch", "index", "crop_box", "crop_flipped")

# Every Loader of this process, so that a forked child (a DataLoader worker) gives each new
# locks: one another thread of the parent held at the fork would never be released there.
_LOADERS: "weakref.WeakSet[Loader]" = weakref.WeakSet()


def _new_locks_after_fork() -> None:
    for loader in list(_LOADERS):
        loader._new_locks()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_new_locks_after_fork)


def _check_fetch(
    fetch_timeout: Optional[float],
    fetch_attempts: Optional[Int],
    fetch_concurrency: Optional[Int],
) -> Tuple[Optional[float], Optional[int], Optional[int]]:
    """The fetch options of a remote dataset (Loader, verify, inspect), checked by name: the
    timeout as a float, the counts as ints."""
    attempts = _check_int("fetch_attempts", fetch_attempts, 1, optional=True, maximum=100)
    concurrency = _check_int("fetch_concurrency", fetch_concurrency, 1, optional=True, maximum=1024)
    if fetch_timeout is not None:
        # numpy's numbers too (registered as numbers.Real).
        if isinstance(fetch_timeout, bool) or not isinstance(fetch_timeout, numbers.Real):
            raise TypeError(f"fetch_timeout must be a number of seconds, not {type(fetch_timeout).__name__}")
        if not 0 < fetch_timeout <= 86400:
            raise ValueError(f"fetch_timeout must be more than 0 and at most 86400 seconds (a day), not {fetch_timeout}")
    return None if fetch_timeout is None else float(fetch_timeout), attempts, concurrency


def _check_fields(fields: Optional[Sequence[str]]) -> Optional[List[str]]:
    """``fields`` as a list of names, checked for type, emptiness, repeats and clashes with the
    batch dict's own keys (the manifest is checked separately)."""
    if fields is None:
        return None
    if isinstance(fields, (str, bytes)) or not isinstance(fields, (list, tuple)):
        raise TypeError(f"fields must be a list of field names, not {type(fields).__name__}")
    names = list(fields)
    for name in names:
        if not isinstance(name, str) or not name:
            raise ValueError(f"fields must hold non-empty strings, not {name!r}")
        if name in ("image", "label", "key"):
            raise ValueError(f"field {name!r} is the batch's own {name!r}, always delivered")
        if name in _BATCH_KEYS:
            own = {"index": "position in the epoch", "epoch": "epoch"}.get(name, "crop")
            raise ValueError(
                f"a carried field named {name!r} cannot be a key of the batch, whose {name!r} is "
                f"the batch's {own}; read it with `shardtool read DATASET --fields {name}`"
            )
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise ValueError(f"fields lists {repeated} more than once")
    return names


def _crop_arrays(crops: List[Tuple[float, float, float, float, bool]], output: str) -> Tuple[Any, Any]:
    """The crop boxes ``[B, 4]`` float32 (x, y, w, h in pixels of the upright source image) and
    flips ``[B]`` bool of a batch, as torch tensors for ``output="torch"``, else numpy arrays."""
    import numpy

    boxes = numpy.array([c[:4] for c in crops], dtype=numpy.float32).reshape(len(crops), 4)
    flips = numpy.array([c[4] for c in crops], dtype=bool)
    if output == "torch":
        import torch

        return torch.from_numpy(boxes), torch.from_numpy(flips)
    return boxes, flips


class _Twice(dict):  # type: ignore[type-arg]
    """A JSON object that named a member twice (verify refuses such a sample json)."""


def _object(pairs: List[Tuple[str, Any]]) -> Dict[str, Any]:
    members = dict(pairs)
    return _Twice(members) if len(members) < len(pairs) else members


def _field_values(
    name: str, values: List[Optional[bytes]], keys: List[str], bad: Optional[List[int]] = None
) -> List[Any]:
    """One carried field's values as Python objects: ``txt`` as ``str``, ``json`` parsed (an
    object, as verify requires), ``cls`` as ``int``, anything else as ``bytes``; ``None`` stays
    ``None``. A value that does not parse (a ``txt`` not UTF-8, a ``json`` that is no object or
    names a member twice) raises, or, with ``bad`` given, is ``None`` and its place added."""

    def parse(v: bytes) -> Any:
        if name == "txt":
            return v.decode("utf-8")
        if name == "cls":
            return int(v.strip())
        # Decoded first: json.loads would take UTF-16 or UTF-32 bytes, which verify refuses.
        parsed = json.loads(v.decode("utf-8"), object_pairs_hook=_object)
        if not isinstance(parsed, dict):
            kinds = {list: "array", str: "string", bool: "true or false", type(None): "null"}
            raise ValueError(f"it is a JSON {kinds.get(type(parsed), 'number')}, not an object")
        if type(parsed) is _Twice:
            raise ValueError("it names a member twice")
        return parsed

    if name in ("txt", "json", "cls"):
        out: List[Any] = []
        for i, (key, v) in enumerate(zip(keys, values)):
            if v is None:
                out.append(None)
                continue
            try:
                out.append(parse(v))
            except (ValueError, RecursionError) as e:
                if bad is None:
                    raise _shardtool.CorruptRecordError(f"record {key}: its {name} field does not parse: {e}") from None
                bad.append(i)
                out.append(None)
        return out
    return values


def _without(batch: Batch, bad: List[int]) -> Batch:
    """``batch`` without the samples at places ``bad`` (records whose fields do not parse, left
    out as ``skip_corrupt`` leaves out records that do not decode)."""
    gone = set(bad)
    keep = [i for i in range(len(batch["key"])) if i not in gone]
    out: Batch = {}
    for name, value in batch.items():
        if name in ("epoch", "index"):
            out[name] = value
        elif isinstance(value, list):
            out[name] = [value[i] for i in keep]
        elif type(value).__module__.startswith("torch"):
            import torch

            out[name] = value[torch.as_tensor(keep, dtype=torch.long)]
        else:
            # numpy arrays; a DLPack tensor has no indexing: the kept rows are copied into a
            # numpy array, which is a DLPack exporter too.
            import numpy

            array = value if isinstance(value, numpy.ndarray) else numpy.from_dlpack(value)
            out[name] = array[numpy.asarray(keep, dtype=numpy.int64)]
    return out


def _process_group() -> Optional[Tuple[int, int]]:
    """This process's rank and world size in torch.distributed, when it is initialised (torch is
    not imported for it)."""
    dist = sys.modules.get("torch.distributed")
    if dist is not None and dist.is_available() and dist.is_initialized():
        return int(dist.get_rank()), int(dist.get_world_size())
    return None


def _check_bool(name: str, value: Any) -> Any:
    """``value`` as a ``bool`` (numpy's too; ``None`` stays ``None``), else a ``TypeError``
    naming ``name``."""
    if value is None or isinstance(value, bool):
        return value
    if type(value).__module__ == "numpy" and type(value).__name__ in ("bool_", "bool"):
        return bool(value)
    kind = type(value)
    shown = f"{kind.__module__}.{kind.__name__}" if kind.__module__ != "builtins" else kind.__name__
    raise TypeError(f"{name} must be True or False, not {shown}")


@overload
def _check_int(
    name: str, value: Int, minimum: int, optional: bool = False, maximum: Optional[int] = None
) -> int: ...


@overload
def _check_int(
    name: str, value: Optional[Int], minimum: int, optional: Literal[True], maximum: Optional[int] = None
) -> Optional[int]: ...


def _check_int(
    name: str, value: Any, minimum: int, optional: bool = False, maximum: Optional[int] = None
) -> Any:
    """``value`` as an ``int`` (numpy's integers too), checked against its bounds."""
    if value is None and optional:
        return None
    # bool is an int subclass, and never what the caller meant.
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        raise TypeError(f"{name} must be an int, not {type(value).__name__}")
    try:
        value = operator.index(value)
    except TypeError as e:
        # An array or tensor has __index__, but only one integer of one element is an int.
        raise TypeError(f"{name} must be an int, not {type(value).__name__} ({e})") from None
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise ValueError(f"{name} must be <= {maximum}, got {value}")
    return value


def _check_path(name: str, value: Any, optional: bool = False) -> Any:
    """``value`` (a str or ``os.PathLike`` of one) as a str, refusing another type or an empty
    one with an error naming ``name``."""
    if value is None and optional:
        return None
    path = os.fspath(value) if isinstance(value, (str, os.PathLike)) else None
    if isinstance(path, bytes):
        raise TypeError(f"{name} must be a str path or an os.PathLike of one, not one giving bytes")
    if not isinstance(path, str):
        raise TypeError(f"{name} must be a str or os.PathLike path, not {type(value).__name__}")
    if not path:
        raise ValueError(f"{name} is empty: name a folder, file or URL")
    return path


def _env_partition() -> Optional[Tuple[int, int]]:
    rank, world = os.environ.get("RANK"), os.environ.get("WORLD_SIZE")
    if rank is None and world is None:
        return None
    if rank is None or world is None:
        # One without the other would make every process rank 0 (or all of world 1).
        have, lack = ("RANK", "WORLD_SIZE") if world is None else ("WORLD_SIZE", "RANK")
        raise ValueError(f"{have} is set but {lack} is not")
    try:
        return int(rank), int(world)
    except ValueError:
        raise ValueError(f"RANK={rank!r} and WORLD_SIZE={world!r} must be integers") from None


def _parse_device(device: Any) -> Optional[Tuple[str, Optional[int]]]:
    """``device`` checked and split into (kind, index); ``("cuda", None)`` takes its index from
    ``LOCAL_RANK`` at the first ``iter()``. ``torch.device`` objects are taken by their name."""
    if device is None:
        return None
    if type(device).__module__ == "torch" and type(device).__name__ == "device":
        device = str(device)
    if not isinstance(device, str):
        raise TypeError(f"device must be a str or torch.device, not {type(device).__name__}")
    kind, sep, index = device.partition(":")
    if kind == "cpu" and (not sep or index == "0"):
        # torch names its one CPU device "cpu" and also accepts "cpu:0".
        return ("cpu", None)
    if kind == "cuda" and not sep:
        return ("cuda", None)
    if kind == "cuda" and index.isdigit() and index.isascii():
        return ("cuda", int(index))
    raise ValueError(f"device must be 'cpu', 'cpu:0', 'cuda' or 'cuda:N', not {device!r}")


def _converter(output: str) -> Callable[[Any], Any]:
    if output == "torch":
        from torch.utils.dlpack import from_dlpack

        return from_dlpack
    if output == "numpy":
        import numpy

        return numpy.from_dlpack
    return lambda t: t



def cache_limit_bytes(cache_limit: Optional[Union[Int, str]]) -> Optional[int]:
    """``cache_limit`` as bytes: an int (>= 1; numpy's too), a size like ``"64GiB"``, or ``None``
    (no limit)."""
    if cache_limit is None:
        return None
    if not isinstance(cache_limit, (bool, str)) and hasattr(cache_limit, "__index__"):
        limit = _check_int("cache_limit", cache_limit, 0)
        if not 1 <= limit < 2**64:
            raise ValueError(f"cache_limit must be at least 1 byte and below 2**64, not {limit} (None: no limit)")
        return limit
    if isinstance(cache_limit, str):
        try:
            return _shardtool.parse_byte_size(cache_limit)
        except ValueError as e:
            raise ValueError(f"cache_limit: {e}") from None
    raise TypeError(f"cache_limit must be an int or a size string, not {type(cache_limit).__name__}")

class Loader:
    """Batches of a shardtool dataset, read by Rust threads in this process.

    ``dataset`` is a dataset folder, its ``manifest.json``, or the ``http(s)://`` / ``s3://`` URL
    of a remote one (whose shards are fetched through a checked cache in ``cache_dir``, at most
    ``cache_limit`` bytes: an int or a size like ``"64GiB"``, shared by the processes using that
    folder (ranks on one node: give what each needs times their count); a fetch fails after
    ``fetch_timeout`` seconds without a byte, default 30, and is tried ``fetch_attempts`` times,
    default 5, with backoff, resuming by range; ``prefetch_shards``, default 8, are fetched ahead
    of the one read, ``fetch_concurrency``, default 4, at once: ``prefetch_shards=0`` fetches
    each shard when it is opened, which ranks sharing a small cache may want, so that no rank
    fetches ahead what another's fetch then evicts).

    Iterating yields dicts: ``image`` (uint8 ``[B, H, W, 3]`` when every image of the batch has
    the same shape, else a list of ``[h, w, 3]`` arrays; with ``decode=False`` on tar shards, a
    list of 1-D arrays of encoded bytes; with a crop ``transform``, always ``[B, S, S, 3]``),
    ``label`` (int64 ``[B]``, -1 for an unlabelled sample), ``key`` (list of str),
    ``epoch`` and ``index`` (the batch's position in this rank's epoch); with a crop ``transform``
    also ``crop_box`` (float32 ``[B, 4]``: x, y, width, height in pixels of the upright stored
    image, to carry boxes or points of the sample's annotations into the crop) and
    ``crop_flipped`` (bool ``[B]``), as ``shardtool read --keys`` prints them. ``output`` picks torch
    tensors, NumPy arrays, or ``shardtool.Tensor`` objects (``__dlpack__``). Images are views of
    the reader's batch buffer, not copies; the buffer is reused only after every view of it is
    gone, so batches you keep are never overwritten.

    ``rank`` and ``world_size`` are read at the first ``iter()``, not here: the arguments, else an
    initialised ``torch.distributed``, else ``RANK``/``WORLD_SIZE``, else 0 of 1 (JAX sets none of
    these: pass ``rank=jax.process_index(), world_size=jax.process_count()``). Every rank yields
    ``len(loader)`` batches, so DDP never waits on a rank that ran out. ``remainder="drop"`` leaves
    out the ``N mod world_size`` samples that do not divide evenly; ``"pad"`` repeats a few
    instead. ``drop_last=True`` also leaves out each epoch's last batch when it is short, so every
    batch holds ``batch_size`` samples (fixed shapes for XLA or CUDA graphs).

    ``device`` is ``"cpu"`` (the default, also given as ``None``), ``"cuda:N"``, or ``"cuda"``,
    whose index is ``LOCAL_RANK`` read at the first ``iter()`` (an explicit index wins). This
    build hands out CPU batches only: a CUDA device raises ``RuntimeError`` at ``iter()``, naming
    the device.

    ``transform`` is what the Rust threads do to each image (default ``"decode"``, or ``"none"``
    with ``decode=False``): ``"resize:S"`` (shorter side S, the longer truncated as
    torchvision's ``Resize(S)``), ``"center-crop:S[,ratio=R]"`` (evaluation: the centre square
    of R × the shorter side, default 0.875, resized to S×S) or
    ``"random-resized-crop:S[,scale=A-B][,ratio=C-D]"`` (training: torchvision's
    ``RandomResizedCrop`` rule, defaults 0.08-1 and 3/4-4/3). ``flip=True`` mirrors each crop with
    probability 0.5. Crops are a function of (seed, epoch, sample key) only, so worker counts,
    ranks and resumes never change them; JPEGs decode only the crop's region.

    ``fields`` names carried fields to deliver with each batch, one list per field under its name,
    one value per sample (``None`` where a sample lacks it): ``batch["txt"]`` holds ``str``,
    ``batch["json"]`` the parsed JSON object (a ``dict``), ``batch["cls"]`` ``int``, any other
    field ``bytes``; a ``txt`` that is not UTF-8, or a ``json`` that does not parse or is no
    object (which verify refuses too), makes its record corrupt. Any field of the manifest's ``fields`` or
    ``optional_fields`` may be named except the image, ``key`` and ``label`` (already in the
    batch; an image field beside the image, as a ``png`` mask beside each ``jpg``, may); on
    packed shards ``json`` is always there (the input's json when it was carried, else the
    record's metadata). Names are checked against a local dataset's manifest here, against a
    remote one's at the first ``iter()``: an unknown name raises ``ValueError`` listing the
    dataset's fields.

    ``workers`` Rust threads decode (default: all cores, divided among the ranks on this node
    by ``LOCAL_WORLD_SIZE`` as torchrun sets it and among DataLoader worker processes);
    ``in_order=False`` delivers batches as they complete. ``shuffle_buffer`` (samples, default
    8192) and ``interleave`` (shard pieces read at once, default 32) tune the two-level shuffle;
    ``prefetch`` is the
    number of whole batches each thread may hold ready (default 2, at most 1024); ``skip_corrupt``
    leaves unreadable records out of their batches instead of raising (a ``json`` or ``cls``
    field asked for that does not parse too, ``output="dlpack"`` then giving that batch's arrays
    as NumPy arrays, copied, which export DLPack too; ``metrics()`` counts them;
    a batch may then be short, or empty: ``[0, S, S, 3]`` for a crop to S, ``[0, 0, 0, 3]`` for
    other decoded images and packed pixels). ``max_pixels`` is the most pixels a record may decode
    to, a larger one being corrupt (default: the limit the dataset was packed under, at least
    100 million, at most 2**30): lower it for datasets you do not trust, as each decode takes
    3 bytes a pixel in each thread.
    Batches that could not all be held at once (workers × (prefetch + 1) + 1 of them over half the
    memory, or a container's limit) raise ``ValueError`` at ``iter()``; a batch buffer the system
    refuses later (``ulimit -v``) raises ``MemoryError``.

    One ``iter()`` at a time: a second ``iter()`` (or ``close()``) stops the first, whose next
    batch then raises ``RuntimeError`` rather than ending the pass early.
    """

    def __init__(
        self,
        dataset: Union[str, "os.PathLike[str]"],
        *,
        batch_size: Int,
        seed: Int = 0,
        epoch: Int = 0,
        shuffle: bool = True,
        rank: Optional[Int] = None,
        world_size: Optional[Int] = None,
        workers: Optional[Int] = None,
        decode: bool = True,
        transform: Optional[str] = None,
        flip: bool = False,
        remainder: Literal["drop", "pad"] = "drop",
        drop_last: bool = False,
        in_order: bool = True,
        output: Literal["torch", "numpy", "dlpack"] = "torch",
        device: Device = None,
        cache_dir: Optional[Union[str, "os.PathLike[str]"]] = None,
        cache_limit: Optional[Union[Int, str]] = None,
        fetch_timeout: Optional[float] = None,
        fetch_attempts: Optional[Int] = None,
        prefetch_shards: Optional[Int] = None,
        fetch_concurrency: Optional[Int] = None,
        shuffle_buffer: Optional[Int] = None,
        interleave: Optional[Int] = None,
        prefetch: Optional[Int] = None,
        skip_corrupt: bool = False,
        fields: Optional[Sequence[str]] = None,
        max_pixels: Optional[Int] = None,
    ) -> None:
        location = _check_path("dataset", dataset)
        if not location.lower().startswith(_REMOTE) and not os.path.exists(location):
            raise FileNotFoundError(f"{_redacted(location)}: no such dataset folder or manifest")
        if "://" not in location:
            # The folder checked here is the one read: a later os.chdir changes neither.
            location = os.path.abspath(location)
            # Found here, not at the first len() or iter() (a later cell of a notebook).
            if os.path.isdir(location) and not os.path.exists(os.path.join(location, "manifest.json")):
                raise FileNotFoundError(
                    f"{location} holds no manifest.json: not a packed dataset (shardtool.pack makes one)"
                )
            if os.path.isfile(location) and not location.endswith(".json"):
                raise ValueError(
                    f"{location} is a file, not a dataset: give the dataset folder (holding "
                    "manifest.json) or its manifest.json"
                )
        batch_size = _check_int("batch_size", batch_size, 1, maximum=2**63 - 1)
        seed = _check_int("seed", seed, 0, maximum=2**64 - 1)
        epoch = _check_int("epoch", epoch, 0, maximum=2**64 - 1)
        workers = _check_int("workers", workers, 1, optional=True, maximum=4096)
        shuffle_buffer = _check_int("shuffle_buffer", shuffle_buffer, 1, optional=True, maximum=2**63 - 1)
        max_pixels = _check_int("max_pixels", max_pixels, 1, optional=True, maximum=2**64 - 1)
        interleave = _check_int("interleave", interleave, 1, optional=True, maximum=2**63 - 1)
        prefetch = _check_int("prefetch", prefetch, 1, optional=True, maximum=MAX_PREFETCH)
        prefetch_shards = _check_int("prefetch_shards", prefetch_shards, 0, optional=True, maximum=2**32)
        timeout, attempts, concurrency = _check_fetch(fetch_timeout, fetch_attempts, fetch_concurrency)
        if (rank is None) != (world_size is None):
            raise ValueError("give both rank and world_size, or neither")
        rank_of: Optional[Tuple[int, int]] = None
        if rank is not None and world_size is not None:
            rank_of = (_check_int("rank", rank, 0, maximum=2**32 - 2),
                       _check_int("world_size", world_size, 1, maximum=2**32 - 1))
            if rank_of[0] >= rank_of[1]:
                raise ValueError(f"rank {rank_of[0]} must be < world_size {rank_of[1]}")
        if output not in _OUTPUTS:
            raise ValueError(f"output must be one of {_OUTPUTS}, not {output!r}")
        if output == "torch":
            try:
                import torch  # noqa: F401
            except ImportError:
                raise ValueError(
                    'output="torch" (the default) needs torch, which cannot be imported: pass '
                    'output="numpy" (or "dlpack", for JAX and others)'
                ) from None
        if remainder not in ("drop", "pad"):
            raise ValueError(f'remainder must be "drop" or "pad", not {remainder!r}')
        parsed_device = _parse_device(device)
        limit = cache_limit_bytes(cache_limit)
        for name, flag in (("shuffle", shuffle), ("decode", decode), ("in_order", in_order),
                           ("skip_corrupt", skip_corrupt), ("flip", flip), ("drop_last", drop_last)):
            if _check_bool(name, flag) is None:
                raise TypeError(f"{name} must be True or False, not None")
        # numpy's bools as bools.
        shuffle, decode, in_order = bool(shuffle), bool(decode), bool(in_order)
        skip_corrupt, flip, drop_last = bool(skip_corrupt), bool(flip), bool(drop_last)
        if transform is None:
            transform = "decode" if decode else "none"
        elif not isinstance(transform, str):
            raise TypeError(f"transform must be a str, not {type(transform).__name__}")
        elif not decode and transform != "none":
            raise ValueError(f"decode=False conflicts with transform={transform!r}: give one")
        transform, crops = _shardtool.check_transform(transform)
        if flip and not crops:
            raise ValueError(
                f"flip needs a crop transform (center-crop or random-resized-crop), not {transform}"
            )
        field_names = _check_fields(fields)
        if field_names:
            _shardtool.check_fields(location, field_names)

        self._dataset = location
        self._batch_size = batch_size
        self._seed = seed
        self._epoch = epoch
        self._shuffle = shuffle
        self._rank = None if rank_of is None else rank_of[0]
        self._world_size = None if rank_of is None else rank_of[1]
        self._workers = workers
        self._transform = transform
        self._flip = flip
        self._remainder = remainder
        self._drop_last = drop_last
        self._in_order = in_order
        self._output = output
        cache_dir = _check_path("cache_dir", cache_dir, optional=True)
        self._cache_dir = None if cache_dir is None else os.path.abspath(cache_dir)
        self._cache_limit = limit
        self._fetch_timeout = timeout
        self._fetch_attempts = attempts
        self._prefetch_shards = prefetch_shards
        self._fetch_concurrency = concurrency
        self._shuffle_buffer = shuffle_buffer
        self._interleave = interleave
        self._prefetch = prefetch
        self._skip_corrupt = skip_corrupt
        self._max_pixels = max_pixels
        self._fields = field_names
        self._device = parsed_device
        # This process's share of the rank's batches, (index, count): set per DataLoader worker.
        self._split: Optional[Tuple[int, int]] = None
        self._reader: Optional[_shardtool.Reader] = None
        # The position when the last reader was closed, for state_dict().
        self._closed_state: Optional[Dict[str, Any]] = None
        self._closed_metrics: Dict[str, Any] = {}
        # The epoch of the last pass read to its end, and whether a repeat of it was warned of.
        self._finished_epoch: Optional[int] = None
        self._warned_repeat = False
        self._partition: Optional[Tuple[int, int]] = None
        self._resume: Optional[Dict[str, Any]] = None
        self._samples = 0
        # Records of this pass left out here, in Python, because their fields did not parse.
        self._fields_skipped = 0
        self._info: Dict[Tuple[int, Optional[Tuple[int, int, int]]], Tuple[str, int, int]] = {}
        self._new_locks()
        # Told of every set_epoch() by each shardtool.torch.IterableDataset wrapping this loader,
        # which shares the epoch with its DataLoader workers (persistent ones too); weakly, so
        # the two do not hold each other (and the batch buffers) past their last use.
        self._epoch_hooks: List["weakref.WeakMethod[Callable[[int], None]]"] = []
        # How many times set_epoch() was called here.
        self._epoch_sets = 0

    # -- rank, plan ---------------------------------------------------------------------------

    def _resolve_partition(self) -> Tuple[int, int]:
        """Rank and world size, looked up now (not at construction, which may run before
        ``init_process_group``)."""
        if self._rank is not None and self._world_size is not None:
            return self._rank, self._world_size
        group = _process_group()
        if group is not None:
            return group
        # A DataLoader worker spawned by a rank: its process group is the rank's, not its own.
        inherited: Optional[Tuple[int, int]] = self.__dict__.get("_rank_process_group")
        if inherited is not None:
            return inherited
        env = _env_partition()
        if env is not None:
            rank, world = env
            if not 0 <= rank < world:
                raise ValueError(f"RANK={rank} must be below WORLD_SIZE={world} (ranks count from 0)")
            return env
        return 0, 1

    def _resolve_device(self) -> str:
        """The device batches go to, looked up now: an explicit ``cuda:N`` wins, a bare ``cuda``
        takes ``LOCAL_RANK`` (0 when it is unset), like the rank. A CUDA device raises
        ``RuntimeError``: the bindings have no CUDA path yet (``crates/gpu``'s pinned ring is
        not wired to them), so no build of this package can hand out CUDA batches."""
        if self._device is None or self._device[0] == "cpu":
            return "cpu"
        index, source = self._device[1], ""
        if index is None:
            local = os.environ.get("LOCAL_RANK")
            index, source = 0, " (no index given and LOCAL_RANK unset)"
            if local is not None:
                if not (local.isdigit() and local.isascii()):
                    raise ValueError(f"LOCAL_RANK={local!r} must be a non-negative integer")
                index, source = int(local), f" (index from LOCAL_RANK={local})"
        resolved = f"cuda:{index}"
        raise RuntimeError(
            f"device {resolved!r}{source}: this build of shardtool has no CUDA support; "
            "read on the CPU and move batches with .to(device, non_blocking=True)"
        )

    def _plan_info(self, world: int) -> Tuple[str, int, int]:
        # A local manifest replaced (a pack --overwrite between epochs) is planned afresh, as the
        # next iter() reads it; a remote one is fetched once, and again when an iter() found it
        # changed.
        key = (world, _manifest_stamp(self._dataset))
        if key not in self._info:
            self._info[key] = _shardtool.plan_info(
                self._dataset,
                batch_size=self._batch_size,
                world_size=world,
                remainder=self._remainder,
                drop_last=self.__dict__.get("_drop_last", False),
                cache_dir=self._cache_dir,
                cache_limit=self._cache_limit,
                fetch_timeout=self.__dict__.get("_fetch_timeout"),
                fetch_attempts=self.__dict__.get("_fetch_attempts"),
            )
        return self._info[key]

    def __len__(self) -> int:
        """Batches this rank yields per epoch (the same on every rank)."""
        _, world = self._resolve_partition()
        return self._plan_info(world)[2]

    @property
    def epoch(self) -> int:
        """The epoch the next ``iter()`` reads."""
        return self._epoch

    def _new_locks(self) -> None:
        # One iter() builds its reader at a time: a second one then stops the first.
        self._iter_lock = threading.Lock()
        # The position's parts (reader, closed state, loaded state, samples) change together
        # under it, so a state_dict() from another thread never sees them half changed.
        self._state_lock = threading.RLock()
        _LOADERS.add(self)

    def set_epoch(self, epoch: Int) -> None:
        """Reads epoch ``epoch`` (a different shard order and shuffle) from the next ``iter()``.

        A state loaded with :meth:`load_state_dict` for another epoch is dropped: that ``iter()``
        reads epoch ``epoch`` from its start (the same epoch keeps it). Setting the epoch just
        read reads it again, as asked, without the warning a pass repeating it unasked gives."""
        epoch = _check_int("epoch", epoch, 0, maximum=2**64 - 1)
        self._set_epoch(epoch)
        for share in [hook() for hook in self.__dict__.get("_epoch_hooks", [])]:
            if share is not None:
                share(epoch)

    def _add_epoch_hook(self, hook: Callable[[int], None]) -> None:
        """Has ``hook`` (a bound method, held weakly) told of every :meth:`set_epoch`."""
        alive = [h for h in self.__dict__.get("_epoch_hooks", []) if h() is not None]
        self._epoch_hooks = alive + [weakref.WeakMethod(hook)]

    def _set_epoch(self, epoch: int) -> None:
        """:meth:`set_epoch` in this copy of the loader alone."""
        with self._state_lock:
            if self._resume is not None and self._resume["epoch"] != epoch:
                self._resume = None
            self._epoch = epoch
            self._finished_epoch = None
            self._epoch_sets = self.__dict__.get("_epoch_sets", 0) + 1
        # A new epoch may read a remote dataset packed again since: len() plans it afresh (one
        # request for its manifest), also where the passes run in DataLoader workers.
        self._forget_remote_plans()

    def _forget_remote_plans(self, but: Optional[str] = None) -> None:
        """Drops the plans of a remote dataset, but those of the dataset fingerprint ``but``."""
        if _manifest_stamp(self._dataset) is None:
            self._info = {k: v for k, v in self._info.items() if k[1] is not None or v[0] == but}

    # -- iteration -----------------------------------------------------------------------------

    def __iter__(self) -> Iterator[Batch]:
        with self._iter_lock:
            return self._start()

    def _start(self) -> Iterator[Batch]:
        with self._state_lock:
            # The batch buffers stay for the new pass to reuse.
            self._close()
            self._closed_state = None
        self._resolve_device()
        rank, world = self._resolve_partition()
        # A loaded position is used up only once a reader starts from it: an iter() that fails
        # (a manifest not fetched) leaves it for the next.
        resume = self._resume
        if (
            self._shuffle
            and resume is None
            and self.__dict__.get("_finished_epoch") == self._epoch
            and not self.__dict__.get("_warned_repeat")
        ):
            self._warned_repeat = True
            warnings.warn(
                f"shardtool.Loader: this pass reads epoch {self._epoch} again, in the order of the "
                "last pass; call loader.set_epoch(epoch) before each epoch for a new shard order "
                "and shuffle (as with torch's DistributedSampler)",
                stacklevel=3,
            )
        convert = _converter(self._output)
        reader = _shardtool.Reader(
            self._dataset,
            batch_size=self._batch_size,
            seed=self._seed,
            epoch=self._epoch,
            shuffle=self._shuffle,
            rank=rank,
            world_size=world,
            workers=self._workers,
            transform=self._transform,
            flip=self._flip,
            remainder=self._remainder,
            drop_last=self.__dict__.get("_drop_last", False),
            in_order=self._in_order,
            shuffle_buffer=self._shuffle_buffer,
            interleave=self._interleave,
            prefetch=self._prefetch,
            skip_corrupt=self._skip_corrupt,
            max_pixels=self.__dict__.get("_max_pixels"),
            split=self._split,
            resume=None if resume is None or resume["reader"] is None else json.dumps(resume["reader"]),
            cache_dir=self._cache_dir,
            cache_limit=self._cache_limit,
            fetch_timeout=self.__dict__.get("_fetch_timeout"),
            fetch_attempts=self.__dict__.get("_fetch_attempts"),
            prefetch_shards=self.__dict__.get("_prefetch_shards"),
            fetch_concurrency=self.__dict__.get("_fetch_concurrency"),
            fields=self._fields,
            pool=self._buffer_pool(),
        )
        with self._state_lock:
            # One call, which a signal's exception (Ctrl-C) cannot split: the loaded position
            # is either still loaded or the new reader's.
            self.__dict__.update(
                _resume=None,
                _fields_skipped=0,
                _samples=0 if resume is None else int(resume["samples"]),
                _reader=reader,
                _partition=(rank, world),
            )
            # A remote manifest planned before is planned again when this pass found another
            # (packed again on the server): len() and states follow the dataset being read.
            if _manifest_stamp(self._dataset) is None:
                self._forget_remote_plans(but=json.loads(reader.state())["dataset"])
        started: List[bool] = []
        batches = self._batches(reader, convert, (self._epoch, self._epoch_sets), started)
        # Dropped before its first batch, the generator never runs its body (nor the cleanup
        # below): the reader it started stops when it goes.
        weakref.finalize(batches, _release_unstarted, weakref.ref(self), reader, started)
        return batches

    def _batches(
        self,
        reader: _shardtool.Reader,
        convert: Callable[[Any], Any],
        pass_epoch: Tuple[int, int],
        started: List[bool],
    ) -> Iterator[Batch]:
        started.append(True)
        try:
            for epoch, index, keys, labels, image, fields, crops in reader:
                try:
                    batch: Batch = {
                        "image": (
                            [convert(t) for t in image] if isinstance(image, list) else convert(image)
                        ),
                        "label": convert(labels),
                        "key": keys,
                        "epoch": epoch,
                        "index": index,
                    }
                    bad: Optional[List[int]] = [] if self._skip_corrupt else None
                    for name, values in fields:
                        batch[name] = _field_values(name, values, keys, bad)
                    if crops is not None:
                        batch["crop_box"], batch["crop_flipped"] = _crop_arrays(crops, self._output)
                    if bad:
                        batch = _without(batch, bad)
                        self._fields_skipped += len(set(bad))
                    n = len(batch["key"])
                except BaseException:
                    # Never handed out (Ctrl-C, a signal handler's exception): a state saved
                    # now must resume with it.
                    reader.forget(index, len(keys))
                    raise
                # No call between here and the yield: from Python 3.11 a signal handler runs
                # only at calls and jumps, so it cannot raise after the batch is counted and
                # before it is handed out (3.9 and 3.10 check between most instructions: a
                # window of a few).
                self._samples += n
                yield batch
            # An epoch set again during the pass (to be read again, as asked) is not one read
            # unasked next time.
            if self._epoch_sets == pass_epoch[1]:
                self._finished_epoch = pass_epoch[0]
            # A pass read to its end lets its reader go too: a remote one's fetch threads and
            # connections are not kept while the loader waits (in a dict of loaders, a
            # validation loader) for its next pass, which starts a reader of its own.
            with self._state_lock:
                if self._reader is reader:
                    self._close()
        except BaseException:
            # An error, or the pass left (`break`, the iterator dropped, a DataLoader worker
            # ending): the threads stop and the cache room and shard locks they hold go now,
            # not at the next iter() or close(), which a DataLoader worker never calls. The
            # position stays for state_dict().
            with self._state_lock:
                if self._reader is reader:
                    self._close()
            raise

    def close(self) -> None:
        """Stops the reader threads of the current iteration, if any (batches stay valid).
        Fetches under way are cancelled and none starts after; it waits for the threads at most
        a second (a new reader meanwhile waits for the cache room they still hold).
        ``state_dict()`` still gives the position reached; the next ``iter()`` starts the epoch
        afresh unless that state is loaded. Idle batch buffers are let go (batches you hold keep
        theirs)."""
        with self._state_lock:
            self._close()
            pool = self.__dict__.pop("_pool", None)
            if pool is not None:
                # Batches still held give their buffers back to it: freed, not kept.
                pool.retire()

    def _close(self) -> None:
        reader = self._reader
        if reader is None:
            return
        try:
            reader.close()
        except RuntimeError:
            # A reader inherited through fork: nothing of it runs in this process.
            pass
        # The position as it stopped (no batch is handed out after close() began), recorded by
        # close() or by a thread waiting in the reader; else the one recorded as the last batch
        # was handed out. None from a forked copy.
        stopped = reader.stopped_at(1.0)
        if stopped is None:
            try:
                stopped = (reader.state(), reader.metrics())
            except RuntimeError:
                pass
        closed = None if stopped is None else self._state_of(json.loads(stopped[0]))
        metrics = self._closed_metrics if stopped is None else json.loads(stopped[1])
        # The reader is let go only with its position recorded, in one call that a second
        # Ctrl-C cannot split: until then state_dict() asks the (closed) reader.
        self.__dict__.update(_reader=None, _closed_state=closed, _closed_metrics=metrics)

    def metrics(self) -> Dict[str, Any]:
        """What the current (or last closed) pass has done so far, as a dict: ``samples``,
        ``batches``, ``samples_per_s``, ``elapsed_s``, ``wait_p50_s``/``wait_p99_s`` (seconds),
        ``corrupt_skipped`` (records left out with ``skip_corrupt=True``), ``lost_samples`` and
        ``lost_shards`` (shards that could not be read at all, with why), ``slow_records``, and
        ``cache`` for a remote dataset. Empty before the first ``iter()``."""
        reader = self._reader
        out = dict(self._closed_metrics) if reader is None else dict(json.loads(reader.metrics()))
        if out and self.__dict__.get("_fields_skipped"):
            # Records left out here, in Python: their fields did not parse.
            out["corrupt_skipped"] = out.get("corrupt_skipped", 0) + self._fields_skipped
        return out

    # -- resume --------------------------------------------------------------------------------

    def state_dict(self) -> Dict[str, Any]:
        """The position after the batches handed out so far, as a small JSON-serialisable dict:
        ``format``, ``dataset`` (the plan's dataset fingerprint), ``seed``, ``epoch``,
        ``batch_size``, ``rank``, ``world_size``, ``split``, ``samples`` (consumed this epoch)
        and the reader's own state."""
        with self._state_lock:
            return self._state_dict()

    def _state_dict(self) -> Dict[str, Any]:
        if self._resume is not None:
            return dict(self._resume)
        closed = self.__dict__.get("_closed_state")
        if self._reader is None and closed is not None:
            return dict(closed)
        reader_state: Optional[Dict[str, Any]] = None
        if self._reader is not None:
            reader_state = json.loads(self._reader.state())
        return self._state_of(reader_state)

    def _state_of(self, reader_state: Optional[Dict[str, Any]]) -> Dict[str, Any]:
        """The loader state at the reader's state ``reader_state`` (``None``: the epoch's start)."""
        rank, world = self._partition if reader_state is not None and self._partition else self._resolve_partition()
        return {
            "format": STATE_FORMAT,
            # A reader's own (no fetch: a checkpoint is wanted most when the server is away).
            "dataset": self._plan_info(world)[0] if reader_state is None else reader_state["dataset"],
            "seed": self._seed,
            # The pass's own epoch: set_epoch() after it (for the next pass) must not relabel it.
            "epoch": self._epoch if reader_state is None else int(reader_state["epoch"]),
            "batch_size": self._batch_size,
            "rank": rank,
            "world_size": world,
            "split": None if self._split is None else list(self._split),
            "samples": self._samples if reader_state is not None else 0,
            "reader": reader_state,
        }

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        """Continues from ``state`` (from ``state_dict``) at the next ``iter()``: the identical
        remaining batches. Raises ``ValueError`` for a state of another dataset, seed, batch size,
        ``drop_last`` or format, and at that ``iter()`` for one saved by a loader of another
        shuffle, remainder, ``interleave`` or ``shuffle_buffer`` (keep those options to resume,
        even where a cache limit asks for a smaller buffer: change them at an epoch's start).
        ``workers`` and ``prefetch`` may change.

        A state saved by another rank, or at another world size (a job restarted on fewer or more
        hosts), resumes this rank's share of what the epoch has left: every rank of the saved
        world is taken to have read as many batches as the one that saved it, as DDP ranks do, so
        rank 0's state alone resumes every rank. With what was read before, each sample is then
        read at most once (with ``remainder="pad"``, the copies an earlier split padded with may
        be read again); the remainder of the new split (fewer than ``world_size`` samples) is
        left out or padded, and this pass yields fewer batches than ``len()``, which counts a
        whole epoch. Only a state whose batches were all delivered in order (always so with
        ``in_order=True``) and not by a DataLoader worker (``num_workers=0``) is taken so;
        another raises at ``iter()``. :meth:`set_epoch` drops a loaded state of another epoch.
        The command line's ``read --resume`` takes these options from the state instead."""
        if not isinstance(state, dict):
            raise TypeError(f"state must be a dict, not {type(state).__name__}")
        if state.get("format") != STATE_FORMAT:
            # torchdata's StatefulDataLoader.state_dict() holds its workers' states, not ours.
            hint = (
                ": it is a StatefulDataLoader's state; load it with that DataLoader's "
                "load_state_dict()"
                if any(k.startswith("_") or "worker" in k for k in state)
                # `shardtool read --state-out` writes the reader's own state.
                else ": it is the state `shardtool read --state-out` writes, which `read --resume` "
                "takes; a Loader loads what its state_dict() returned"
                if "delivered_prefix" in state
                else ""
            )
            raise ValueError(f"unknown loader state format {state.get('format')!r}{hint}")
        missing = {"dataset", "seed", "epoch", "batch_size", "world_size", "samples", "reader"} - state.keys()
        if missing:
            raise ValueError(f"loader state lacks {sorted(missing)}")
        # A checkpoint file is data: each count an int in its range, not anything int() takes.
        for name, least in (("epoch", 0), ("world_size", 1), ("samples", 0)):
            value = state[name]
            if isinstance(value, bool) or not isinstance(value, int) or not least <= value < 2**64:
                raise ValueError(f"loader state's {name} must be an int of at least {least}, not {value!r}")
        split = state.get("split")
        if split is not None and not (
            isinstance(split, (list, tuple))
            and len(split) == 2
            and all(isinstance(v, int) and not isinstance(v, bool) for v in split)
            and 0 <= split[0] < split[1] < 2**32
        ):
            raise ValueError(f"loader state's split must be [index, count] with index < count, not {split!r}")
        reader = state["reader"]
        if reader is not None:
            # The reader's own state must tell the same position as the wrapper's (a state
            # edited by hand, or pieced together from two checkpoints, would resume elsewhere).
            if not isinstance(reader, dict):
                raise ValueError(f"loader state's reader must be a dict or None, not {type(reader).__name__}")
            pairs = [("epoch", "epoch"), ("world_size", "world"), ("batch_size", "batch_size"), ("dataset", "dataset")]
            if "rank" in state:
                pairs.append(("rank", "rank"))
            for outer, inner in pairs:
                if reader.get(inner) != state[outer]:
                    raise ValueError(
                        f"loader state's {outer} {state[outer]!r} is not its reader's {reader.get(inner)!r}: "
                        "a state from state_dict() holds the same in both"
                    )
        if state["seed"] != self._seed:
            raise ValueError(f"the state is for seed {state['seed']}, this loader has seed {self._seed}")
        if state["batch_size"] != self._batch_size:
            raise ValueError(
                f"the state is for batch_size {state['batch_size']}, this loader has {self._batch_size}"
            )
        drop_last = reader.get("drop_last") if isinstance(reader, dict) else None
        mine = self.__dict__.get("_drop_last", False)
        if drop_last is not None and not isinstance(drop_last, bool):
            raise ValueError(f"loader state's drop_last must be a bool, not {drop_last!r}")
        if drop_last is not None and drop_last != mine:
            raise ValueError(f"the state is for drop_last={drop_last}, this loader has drop_last={mine}")
        world = int(state["world_size"])
        if state["dataset"] != self._plan_info(world)[0]:
            # A remote plan may be older than the dataset the state was read from (packed again
            # on the server, read by DataLoader workers): planned again before refusing.
            self._forget_remote_plans()
            if state["dataset"] != self._plan_info(world)[0]:
                raise ValueError("the state belongs to another dataset")
        with self._state_lock:
            self.close()
            # One call: a Ctrl-C cannot leave the epoch set without the position.
            self.__dict__.update(_epoch=int(state["epoch"]), _resume=dict(state))

    # -- pickling (DataLoader workers started with spawn) ------------------------------------

    def _buffer_pool(self) -> _shardtool.BufferPool:
        """The batch buffers every epoch's reader shares (made at the first iteration)."""
        pool = self.__dict__.get("_pool")
        if pool is None:
            pool = self._pool = _shardtool.BufferPool()
        return pool

    def __getstate__(self) -> Dict[str, Any]:
        d = dict(self.__dict__)
        d["_reader"] = None
        d["_partition"] = None
        # For the process being started only: a copy pickled on (to disk, to another process)
        # looks its rank up afresh.
        d.pop("_rank_process_group", None)
        if multiprocessing.context.get_spawning_popen() is not None:
            # A process being started (spawn, forkserver) has no process group: it reads the
            # rank's share as this process would.
            d["_rank_process_group"] = _process_group()
        d.pop("_pool", None)
        d.pop("_iter_lock", None)
        d.pop("_state_lock", None)
        # The wrappers': each hands its own copy to its workers.
        d.pop("_epoch_hooks", None)
        return d

    def __setstate__(self, d: Dict[str, Any]) -> None:
        self.__dict__.update(d)
        self._new_locks()

    def __repr__(self) -> str:
        fields = "" if not self._fields else f", fields={self._fields!r}"
        return (
            f"shardtool.Loader({_redacted(self._dataset)!r}, batch_size={self._batch_size}, seed={self._seed}, "
            f"epoch={self._epoch}, output={self._output!r}{fields})"
        )


def _manifest_stamp(dataset: str) -> Optional[Tuple[int, int, int]]:
    """The manifest of a local `dataset` (a folder or the manifest itself) as (inode, size,
    modification time); ``None`` for a remote one or one that cannot be read. A ``file://``
    dataset is its path."""
    if dataset[:7].lower() == "file://":
        # As the reader takes it: percent-escapes decoded, no host but this one.
        url = urllib.parse.urlparse(dataset)
        if url.netloc not in ("", "localhost"):
            return None
        dataset = urllib.parse.unquote(url.path)
    elif "://" in dataset:
        return None
    path = dataset if os.path.isfile(dataset) else os.path.join(dataset, "manifest.json")
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns)


def _release_unstarted(loader: "weakref.ref[Loader]", reader: Any, started: List[bool]) -> None:
    """Stops `reader` if the iteration that started it never began (see ``Loader.__iter__``)."""
    owner = loader()
    if started or owner is None:
        return
    with owner._state_lock:
        if owner._reader is reader:
            owner._close()


def _redacted(location: str) -> str:
    """A dataset URL as it may be shown: without user, password or query (a presigned URL's
    signature), as every message of the Rust side shows it."""
    if "://" not in location:
        return location
    u = urllib.parse.urlsplit(location)
    netloc = u.netloc if "@" not in u.netloc else "***@" + u.netloc.rsplit("@", 1)[1]
    return urllib.parse.urlunsplit((u.scheme, netloc, u.path, "***" if u.query else "", u.fragment))
