"""The keyword options of ``pack``, ``plan`` and ``ray.pack`` as types a checker can hold calls to."""

from __future__ import annotations

from typing import List, Literal, Optional, SupportsIndex, Tuple, TypedDict, Union

# Each option may be given as None, which takes its default, as the CLI does without the flag;
# integers may be numpy's (anything with __index__; a bool is refused when run).

#: An integer argument: an ``int`` or anything with ``__index__`` (numpy's integers). ``int`` comes
#: first so that config parsers that fill arguments from their hints (jsonargparse, LightningCLI)
#: read one from text.
Int = Union[int, SupportsIndex]


class _CommonOptions(TypedDict, total=False):
    """Options every pack takes: the CLI's flags with underscores (see :func:`shardtool.pack`)."""

    format: Optional[Literal["wds", "packed"]]
    resize: Optional[str]
    upscale: Optional[bool]
    filter: Optional[Literal["catmull-rom", "lanczos3", "bilinear"]]
    encode: Optional[Literal["jpeg", "png", "keep"]]
    quality: Optional[Int]
    decode_scale: Optional[str]
    compress: Optional[str]
    keys: Optional[Literal["input", "index"]]
    seed: Optional[Int]
    shuffle: Optional[bool]
    prefix: Optional[str]
    max_pixels: Optional[Int]
    max_errors: Optional[Int]
    overwrite: Optional[bool]
    resume: Optional[bool]


class PackOptions(_CommonOptions, total=False):
    """The keyword options of :func:`shardtool.pack` beyond its input's columns, each described
    there. Annotate a dict of options reused across calls with it, so that a type checker holds
    it to them: ``common: shardtool.PackOptions = {"format": "packed", "seed": 1}``."""

    shard_size: Optional[Union[Int, str]]
    shard_samples: Optional[Int]
    jobs: Optional[Int]


class _Columns(TypedDict, total=False):
    """What a list or Parquet input's columns hold (see :func:`shardtool.pack`)."""

    input_format: Optional[Literal["imagefolder", "list", "wds", "parquet"]]
    image_column: Optional[str]
    label_column: Optional[str]
    text_column: Optional[str]
    drop_columns: Optional[Union[List[str], Tuple[str, ...]]]


class PartitionOptions(_CommonOptions, _Columns, total=False):
    """The keyword options of :func:`shardtool.ray.pack` beyond its own: its shard samples and
    threads are arguments of their own."""


class PlanOptions(PartitionOptions, total=False):
    """The keyword options of :func:`shardtool.plan` beyond ``shard_samples``."""

    jobs: Optional[Int]
