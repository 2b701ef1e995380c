"""Type stubs of the compiled module ``shardtool._shardtool``."""

from typing import Any, Iterator, List, Optional, Tuple, Union

__version__: str

class DatasetError(Exception):
    """A dataset, shard, record or cache could not be read."""

class ManifestError(DatasetError):
    """The manifest is missing a field, malformed, or of an unknown version."""

class CorruptShardError(DatasetError):
    """A shard failed validation (size, checksum or structure)."""

class CorruptRecordError(DatasetError):
    """A record could not be read or decoded."""

class CacheError(DatasetError):
    """A remote shard could not be fetched into, or served from, the shard cache."""

class IncompleteEpochError(DatasetError):
    """An epoch ended with a different number of samples than its plan."""

class TooManyErrorsError(DatasetError):
    """More inputs failed than max_errors allows: the pack (or part, or merge) stopped."""

class PlanError(DatasetError):
    """The plan in OUTPUT cannot be run as it is (an input changed since it was made, or the plan
    file is damaged): running the part again fails the same way; plan again with overwrite=True."""

class Tensor:
    """A C-contiguous CPU array viewing bytes a Rust owner keeps alive (DLPack producer)."""

    def __dlpack__(
        self,
        *,
        stream: Optional[Any] = None,
        max_version: Optional[Tuple[int, int]] = None,
        dl_device: Optional[Tuple[int, int]] = None,
        copy: Optional[bool] = None,
    ) -> Any: ...
    def __dlpack_device__(self) -> Tuple[int, int]: ...
    @property
    def shape(self) -> List[int]: ...
    @property
    def dtype(self) -> str: ...
    @property
    def data_ptr(self) -> int: ...
    @property
    def buffer(self) -> Tuple[int, int]: ...
    @property
    def nbytes(self) -> int: ...

RawFields = List[Tuple[str, List[Optional[bytes]]]]
RawCrops = Optional[List[Tuple[float, float, float, float, bool]]]
RawBatch = Tuple[int, int, List[str], Tensor, Union[Tensor, List[Tensor]], RawFields, RawCrops]

class BufferPool:
    """Batch buffers shared by the readers of successive epochs (one per ``Loader``)."""

    def __init__(self) -> None: ...
    def idle(self) -> int: ...
    def retire(self) -> None: ...

class Reader:
    """One epoch of one rank (or one share of its batches); iterating yields raw batches."""

    def __init__(
        self,
        dataset: str,
        *,
        batch_size: int,
        seed: int,
        epoch: int,
        shuffle: bool,
        rank: int,
        world_size: int,
        workers: Optional[int] = None,
        transform: str = "decode",
        flip: bool = False,
        remainder: str = "drop",
        drop_last: bool = False,
        in_order: bool = True,
        shuffle_buffer: Optional[int] = None,
        interleave: Optional[int] = None,
        prefetch: Optional[int] = None,
        skip_corrupt: bool = False,
        max_pixels: Optional[int] = None,
        split: Optional[Tuple[int, int]] = None,
        resume: Optional[str] = None,
        cache_dir: Optional[str] = None,
        cache_limit: Optional[int] = None,
        fetch_timeout: Optional[float] = None,
        fetch_attempts: Optional[int] = None,
        prefetch_shards: Optional[int] = None,
        fetch_concurrency: Optional[int] = None,
        fields: Optional[List[str]] = None,
        pool: Optional[BufferPool] = None,
        test_delay: Optional[Tuple[str, float]] = None,
    ) -> None: ...
    def __iter__(self) -> Iterator[RawBatch]: ...
    def __next__(self) -> RawBatch: ...
    def state(self) -> str: ...
    def forget(self, index: int, samples: int) -> None: ...
    def metrics(self) -> str: ...
    def batches_per_epoch(self) -> int: ...
    @property
    def workers(self) -> int: ...
    def close(self) -> None: ...
    def stopped_at(self, wait_s: float) -> Optional[Tuple[str, str]]: ...

def plan_info(
    dataset: str,
    *,
    batch_size: int,
    world_size: int,
    remainder: str = "drop",
    drop_last: bool = False,
    cache_dir: Optional[str] = None,
    cache_limit: Optional[int] = None,
    fetch_timeout: Optional[float] = None,
    fetch_attempts: Optional[int] = None,
) -> Tuple[str, int, int]: ...
def check_fields(dataset: str, fields: List[str]) -> None: ...
def pack(
    input: str,
    output: str,
    *,
    input_format: Optional[str] = None,
    image_column: Optional[str] = None,
    label_column: Optional[str] = None,
    text_column: Optional[str] = None,
    drop_columns: Optional[List[str]] = None,
    format: str = "wds",
    resize: str = "none",
    upscale: bool = False,
    filter: str = "catmull-rom",
    encode: str = "jpeg",
    quality: int = 90,
    decode_scale: str = "gap:2",
    compress: Optional[str] = None,
    keys: str = "input",
    seed: Optional[int] = None,
    shuffle: bool = True,
    shard_size: str = "256MiB",
    shard_samples: Optional[int] = None,
    prefix: str = "shard",
    jobs: Optional[int] = None,
    max_pixels: int = 100_000_000,
    max_errors: Optional[int] = None,
    overwrite: bool = False,
    resume: bool = False,
    plan_only: bool = False,
) -> str: ...
def pack_part(
    output: str, index: int, count: int, *, jobs: Optional[int] = None, max_errors: Optional[int] = None
) -> str: ...
def merge(output: str, *, max_errors: Optional[int] = None) -> str: ...
def status(output: str) -> str: ...
def verify(
    path: str,
    *,
    decode: bool = False,
    jobs: Optional[int] = None,
    cache_dir: Optional[str] = None,
    cache_limit: Optional[int] = None,
    fetch_timeout: Optional[float] = None,
    fetch_attempts: Optional[int] = None,
    fetch_concurrency: Optional[int] = None,
) -> str: ...
def inspect(
    path: str,
    *,
    jobs: Optional[int] = None,
    cache_dir: Optional[str] = None,
    cache_limit: Optional[int] = None,
    fetch_timeout: Optional[float] = None,
    fetch_attempts: Optional[int] = None,
    fetch_concurrency: Optional[int] = None,
) -> str: ...
def parse_byte_size(text: str) -> int: ...
def check_transform(text: str) -> Tuple[str, bool]: ...
