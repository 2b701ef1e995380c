"""Zero copy: tensors view the Rust batch buffer, through either DLPack capsule kind, and a
buffer is reused only after every view of it is gone."""

from __future__ import annotations

import gc
from pathlib import Path
from typing import Dict

import numpy as np
import torch

import shardtool


def test_torch_and_numpy_view_the_rust_buffer(datasets: Dict[str, Path]) -> None:
    for b in shardtool.Loader(datasets["packed"], batch_size=4, seed=1, output="dlpack"):
        t = b["image"]
        start, length = t.buffer
        assert length == t.nbytes > 0
        x = torch.from_dlpack(t)
        assert start <= x.data_ptr() and x.data_ptr() + x.numel() <= start + length
        assert x.data_ptr() == t.data_ptr
        a = np.from_dlpack(t)
        assert a.__array_interface__["data"][0] == t.data_ptr
        # Page-aligned, as the reader's CPU allocator promises.
        assert start % 4096 == 0


def test_variable_images_view_one_shared_buffer(datasets: Dict[str, Path]) -> None:
    b = next(iter(shardtool.Loader(datasets["tar_var"], batch_size=6, seed=2, output="dlpack")))
    images = b["image"]
    assert isinstance(images, list)
    start, length = images[0].buffer
    for t in images:
        assert t.buffer == (start, length)
        x = torch.from_dlpack(t)
        assert start <= x.data_ptr() and x.data_ptr() + x.numel() <= start + length


def test_both_capsule_kinds(datasets: Dict[str, Path]) -> None:
    b = next(iter(shardtool.Loader(datasets["packed"], batch_size=2, output="dlpack")))
    t = b["image"]
    legacy = t.__dlpack__()
    versioned = t.__dlpack__(max_version=(1, 0))
    assert "dltensor" in repr(legacy) and "dltensor_versioned" not in repr(legacy)
    assert "dltensor_versioned" in repr(versioned)
    x = torch.utils.dlpack.from_dlpack(legacy)
    assert x.data_ptr() == t.data_ptr
    # An unconsumed capsule frees its tensor when collected; copy=True gives a new buffer.
    del versioned
    copied = np.from_dlpack(t, copy=True)
    assert copied.__array_interface__["data"][0] != t.data_ptr
    np.testing.assert_array_equal(copied, x.numpy())


def test_holding_100_batches_never_corrupts_one(datasets: Dict[str, Path]) -> None:
    path = datasets["packed"]
    loader = shardtool.Loader(path, batch_size=4, seed=9, workers=2)
    held = []
    snapshots = []
    epoch = 0
    while len(held) < 100:
        loader.set_epoch(epoch)
        for b in loader:
            held.append(b["image"])
            snapshots.append(b["image"].clone())
            if len(held) == 100:
                break
        epoch += 1
    gc.collect()
    # Every held tensor is its own buffer and still holds what it held when handed out.
    ptrs = {t.data_ptr() for t in held}
    assert len(ptrs) == 100
    for t, s in zip(held, snapshots):
        assert torch.equal(t, s)


def test_dropped_batches_recycle_buffers(datasets: Dict[str, Path]) -> None:
    loader = shardtool.Loader(datasets["packed"], batch_size=4, seed=9, workers=1, prefetch=1)
    ptrs = set()
    for b in loader:
        ptrs.add(b["image"].data_ptr())
        del b
    # One thread, one batch ahead: a handful of buffers serve the whole epoch.
    assert len(ptrs) <= 4 < len(loader)
