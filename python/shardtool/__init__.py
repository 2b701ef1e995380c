"""shardtool: exactly-once, resumable, zero-copy image batches for PyTorch and NumPy.

The reading is done by Rust threads inside this process (no pickling, no ``/dev/shm``); batches
arrive as views of the reader's buffers through DLPack.

>>> import shardtool
>>> loader = shardtool.Loader("out/sample", batch_size=32, seed=7)   # doctest: +SKIP
>>> for batch in loader:                                            # doctest: +SKIP
...     images, labels = batch["image"], batch["label"]
"""

from typing import TYPE_CHECKING, List

from ._shardtool import (
    CacheError,
    CorruptRecordError,
    CorruptShardError,
    DatasetError,
    IncompleteEpochError,
    ManifestError,
    PlanError,
    Tensor,
    TooManyErrorsError,
    __version__,
)
from ._loader import Loader
from ._options import PackOptions, PartitionOptions, PlanOptions
from ._partition import merge, pack_part, plan, status
from ._tools import inspect, pack, verify


if TYPE_CHECKING:
    from . import ray as ray, torch as torch
else:

    def __getattr__(name: str) -> object:
        # `shardtool.torch` and `shardtool.ray` after a plain `import shardtool`, imported on
        # first use: torch and Ray are not needed to read with NumPy. Without them the attribute
        # is missing (hasattr is False), saying why.
        if name in ("torch", "ray"):
            import importlib

            try:
                return importlib.import_module(f"{__name__}.{name}")
            except ImportError as e:
                raise AttributeError(f"shardtool.{name} cannot be imported: {e}") from e
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

    def __dir__() -> List[str]:
        # The public names (not the typing helpers imported here), and the lazy submodules.
        return sorted([*__all__, "torch", "ray"])


__all__ = [
    "CacheError",
    "CorruptRecordError",
    "CorruptShardError",
    "DatasetError",
    "IncompleteEpochError",
    "Loader",
    "ManifestError",
    "PackOptions",
    "PartitionOptions",
    "PlanError",
    "PlanOptions",
    "Tensor",
    "TooManyErrorsError",
    "__version__",
    "inspect",
    "merge",
    "pack",
    "pack_part",
    "plan",
    "status",
    "verify",
]
