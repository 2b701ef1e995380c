"""The loader's memory stays flat across epochs: resident memory after the 20th epoch is within
5% (and 4 MiB) of what it was after the 2nd, for tar and packed datasets, with batches in numpy
and torch (a leaked batch buffer, a view keeping its pool alive, or a cache of epochs would show
as growth). A batch buffer the process may not have is a MemoryError, not an abort."""

from __future__ import annotations

from pathlib import Path
from typing import Dict

import pytest

import shardtool


def rss_bytes() -> int:
    """Resident set size of this process, from /proc."""
    with open("/proc/self/statm") as f:
        pages = int(f.read().split()[1])
    import os

    return pages * os.sysconf("SC_PAGE_SIZE")


@pytest.mark.parametrize("output", ["numpy", "torch"])
@pytest.mark.parametrize("kind", ["tar", "packed"])
def test_memory_is_flat_over_twenty_epochs(
    datasets: Dict[str, Path], kind: str, output: str
) -> None:
    loader = shardtool.Loader(datasets[kind], batch_size=8, output=output, workers=2)
    after = {}
    seen = 0
    for epoch in range(20):
        loader.set_epoch(epoch)
        for batch in loader:
            # Touch the pixels, as training would.
            seen += int(batch["image"].sum() > 0)
        after[epoch + 1] = rss_bytes()
    assert seen > 0
    print(f"{kind} {output}: RSS after epoch 2 {after[2]}, after epoch 20 {after[20]} bytes")
    # 5% of the process, and at most 4 MiB: with torch loaded the process is large enough for 5%
    # alone to hide a leak of many batches.
    allowed = min(after[2] * 0.05, 4 << 20)
    assert after[20] - after[2] <= allowed, f"RSS grew from {after[2]} to {after[20]} bytes"


def test_every_epoch_reads_into_the_buffers_of_the_one_before(datasets: Dict[str, Path]) -> None:
    """One pool for all epochs: the batches of an epoch, once dropped, wait in the pool, and the
    next epoch takes them rather than allocating (a pool per epoch freed tens of megabytes in
    the iterating thread at each epoch's first batch, and faulted in fresh ones)."""
    loader = shardtool.Loader(datasets["tar"], batch_size=8, output="numpy", workers=2)
    for _ in loader:
        pass
    pool = loader._buffer_pool()
    kept = pool.idle()
    assert kept > 0, "the first epoch's buffers went back to the shared pool"
    loader.set_epoch(1)
    it = iter(loader)
    first = next(it)
    assert pool.idle() < kept, "the second epoch took buffers from the same pool"
    del first
    for _ in it:
        pass
    assert pool.idle() >= kept - 1


def test_a_batch_buffer_the_process_limit_refuses_is_a_memory_error(datasets: Dict[str, Path]) -> None:
    # 8 crops of 4096² take 384 MiB: a child process whose address space has 250 MiB left
    # raises MemoryError for the batch, not an abort.
    import subprocess
    import sys

    code = f"""
import resource, shardtool
loader = shardtool.Loader({str(datasets["tar"])!r}, batch_size=8, workers=1, prefetch=1, output="numpy",
                          transform="random-resized-crop:4096")
vm = next(int(l.split()[1]) * 1024 for l in open("/proc/self/status") if l.startswith("VmSize:"))
resource.setrlimit(resource.RLIMIT_AS, (vm + 250 * 2**20,) * 2)
try:
    next(iter(loader))
except MemoryError as e:
    print("MemoryError:", e)
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "MemoryError: no memory for a batch buffer of 402653184 bytes" in r.stdout, (r.stdout, r.stderr)


def test_close_lets_the_idle_batch_buffers_go(datasets: Dict[str, Path]) -> None:
    # close() lets the idle buffers of a pass go (hundreds of MB for large crops); batches held
    # keep theirs.
    loader = shardtool.Loader(datasets["tar"], batch_size=8, output="numpy", workers=2)
    held = next(iter(loader))
    for _ in loader:
        pass
    pool = loader._buffer_pool()
    assert pool.idle() > 0
    loader.close()
    assert pool.idle() == 0
    assert loader._buffer_pool() is not pool and loader._buffer_pool().idle() == 0
    assert held["image"] is not None and len(held["key"]) == 8
    # A batch held past close() gives its buffer back to a pool no reader uses: freed.
    del held
    assert pool.idle() == 0
    assert sum(len(b["key"]) for b in loader) == 45
