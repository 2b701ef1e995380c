"""Exactly once across ranks and DataLoader worker processes, with equal batch counts per rank,
and fork safety."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Dict, List

import pytest
import torch.utils.data

import shardtool
import shardtool.torch
from conftest import all_keys, samples


def _rank_batches(path: Path, rank: int, world: int, workers: int, remainder: str) -> List[dict]:
    loader = shardtool.Loader(
        path, batch_size=2, seed=11, rank=rank, world_size=world, remainder=remainder, output="numpy"
    )
    ds = shardtool.torch.IterableDataset(loader)
    dl = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=workers)
    out = list(dl)
    assert len(out) == len(dl) == len(loader)
    return out


@pytest.mark.parametrize("workers", [0, 1, 2, 3])
@pytest.mark.parametrize("world", [1, 2, 3, 4])
def test_exactly_once_over_ranks_and_workers(datasets: Dict[str, Path], world: int, workers: int) -> None:
    path = datasets["packed"]
    n = samples(path)
    reference = [_rank_batches(path, r, world, 0, "drop") for r in range(world)] if workers else None
    keys: List[str] = []
    counts = set()
    for rank in range(world):
        batches = _rank_batches(path, rank, world, workers, "drop")
        counts.add(len(batches))
        # Worker processes change nothing: same batches, same order as in-process reading.
        if reference is not None:
            assert [b["key"] for b in batches] == [b["key"] for b in reference[rank]]
            assert [b["index"] for b in batches] == list(range(len(batches)))
        keys.extend(k for b in batches for k in b["key"])
    assert len(counts) == 1
    assert len(keys) == len(set(keys)) == n - n % world
    assert set(keys) <= set(all_keys(path))


def test_pad_reads_every_sample(datasets: Dict[str, Path]) -> None:
    path = datasets["packed"]
    world = 4
    keys = [k for r in range(world) for b in _rank_batches(path, r, world, 2, "pad") for k in b["key"]]
    assert set(keys) == set(all_keys(path))
    assert len(keys) == world * -(-samples(path) // world)


def test_rank_is_resolved_at_iter_not_construction(datasets: Dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    path = datasets["packed"]
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    loader = shardtool.Loader(path, batch_size=2, seed=11, output="numpy")
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    got = [k for b in loader for k in b["key"]]
    explicit = shardtool.Loader(path, batch_size=2, seed=11, rank=1, world_size=2, output="numpy")
    assert got == [k for b in explicit for k in b["key"]]
    assert len(got) == samples(path) // 2


def test_started_loader_used_in_forked_child_raises(datasets: Dict[str, Path]) -> None:
    loader = shardtool.Loader(datasets["packed"], batch_size=2, workers=2, output="numpy")
    it = iter(loader)
    next(it)
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child reports through its exit status
        code = 3
        try:
            next(it)
            code = 1
        except RuntimeError as e:
            code = 0 if "cannot be used in process" in str(e) else 2
        except BaseException:
            code = 4
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(status) == 0
    # The parent's iterator is unaffected.
    assert next(it)["image"].shape[0] == 2


def test_forked_child_can_start_its_own_iteration(datasets: Dict[str, Path]) -> None:
    path = datasets["packed"]
    loader = shardtool.Loader(path, batch_size=5, seed=2, output="numpy")
    expected = sum(len(b["key"]) for b in loader)  # started (and finished) in the parent
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover
        os.close(r)
        try:
            n = sum(len(b["key"]) for b in loader)
            os.write(w, str(n).encode())
        finally:
            os._exit(0)
    os.close(w)
    with os.fdopen(r) as f:
        text = f.read()
    os.waitpid(pid, 0)
    assert int(text) == expected == samples(path)


def test_rank_without_world_size_is_an_error(datasets: Dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.setenv("WORLD_SIZE", "4")
    loader = shardtool.Loader(datasets["packed"], batch_size=2, output="numpy")
    with pytest.raises(ValueError, match="WORLD_SIZE is set but RANK is not"):
        next(iter(loader))


@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_set_epoch_reaches_persistent_workers(datasets: Dict[str, Path], context: str) -> None:
    # Persistent workers keep their copy of the dataset: the epoch set in the main process
    # must still reach them, or every epoch repeats one order.
    path = datasets["tar"]
    ds = shardtool.torch.IterableDataset(shardtool.Loader(path, batch_size=5, seed=3, output="numpy"))
    dl = torch.utils.data.DataLoader(
        ds, batch_size=None, num_workers=1, persistent_workers=True, multiprocessing_context=context
    )
    orders = []
    for i, epoch in enumerate((0, 1, 0, 1)):
        # On the dataset, or (as a loop over the loader itself does) on its loader.
        (ds if i % 2 == 0 else ds.loader).set_epoch(epoch)
        orders.append([k for b in dl for k in b["key"]])
        want = [k for b in shardtool.Loader(path, batch_size=5, seed=3, epoch=epoch, output="numpy") for k in b["key"]]
        assert orders[-1] == want, f"epoch {epoch}"
    assert orders[0] != orders[1] and orders[0] == orders[2] and orders[1] == orders[3]
    # A copy made outside a process start (deepcopy, pickle) takes the epoch's value.
    import copy
    import pickle

    assert copy.deepcopy(ds)._epoch.value == 1
    assert pickle.loads(pickle.dumps(ds))._epoch.value == 1
    # A second wrapper of the same loader (another DataLoader over it): both hear its epoch.
    other = shardtool.torch.IterableDataset(ds.loader)
    dl2 = torch.utils.data.DataLoader(
        other, batch_size=None, num_workers=1, persistent_workers=True, multiprocessing_context=context
    )
    for epoch in (2, 0):
        ds.loader.set_epoch(epoch)
        want = [k for b in shardtool.Loader(path, batch_size=5, seed=3, epoch=epoch, output="numpy") for k in b["key"]]
        assert [k for b in dl for k in b["key"]] == want, f"first, epoch {epoch}"
        assert [k for b in dl2 for k in b["key"]] == want, f"second, epoch {epoch}"


def _warnings_to_stderr(_: int) -> None:
    """A DataLoader worker's warnings printed: pytest records the test process's warnings, and a
    forked worker inherits that (it would keep them in its own memory)."""
    import sys
    import warnings

    warnings.simplefilter("always")

    def show(message: Any, category: Any, filename: str, lineno: int, file: Any = None, line: Any = None) -> None:
        print(f"{category.__name__}: {message}", file=sys.stderr, flush=True)

    warnings.showwarning = show


def test_a_plain_dataloaders_workers_hold_the_position_and_know_a_read_epoch(
    datasets: Dict[str, Path], capfd: pytest.CaptureFixture[str]
) -> None:
    path = datasets["tar"]
    ds = shardtool.torch.IterableDataset(shardtool.Loader(path, batch_size=2, seed=3, output="numpy"))
    dl = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=2, worker_init_fn=_warnings_to_stderr)
    it = iter(dl)
    next(it)
    next(it)
    # This process's state would restart the epoch: refused, naming what works.
    with pytest.raises(RuntimeError, match="StatefulDataLoader"):
        ds.state_dict()
    del it
    ds.set_epoch(1)
    assert ds.state_dict()["epoch"] == 1 and ds.state_dict()["samples"] == 0
    # Fresh (not persistent) workers reading an epoch a second time warn, as one process does.
    first = [k for b in dl for k in b["key"]]
    assert "reads epoch 1 again" not in capfd.readouterr().err
    # Once the epoch is read, a state may be saved: loaded after set_epoch(next), it reads that.
    assert ds.state_dict()["epoch"] == 1
    second = [k for b in dl for k in b["key"]]
    assert second == first
    assert "reads epoch 1 again" in capfd.readouterr().err
    ds.set_epoch(2)
    [k for b in dl for k in b["key"]]
    assert "again" not in capfd.readouterr().err
    # Set again, the epoch just read is read again as asked, by fresh and persistent workers
    # alike; read again unasked, it is warned of.
    kept = torch.utils.data.DataLoader(
        ds, batch_size=None, num_workers=2, persistent_workers=True, worker_init_fn=_warnings_to_stderr
    )
    # (The last epoch, whose mark in the shared counts wraps to 0, too.)
    last = 2**64 - 1
    for loader in (dl, kept):
        ds.set_epoch(last)
        third = [k for b in loader for k in b["key"]]
        ds.loader.set_epoch(last)
        assert [k for b in loader for k in b["key"]] == third
        assert "again" not in capfd.readouterr().err
        assert [k for b in loader for k in b["key"]] == third
        assert f"reads epoch {last} again" in capfd.readouterr().err
    # More workers than batches: one done before another starts is no epoch read before.
    few = shardtool.torch.IterableDataset(shardtool.Loader(path, batch_size=16, seed=3, output="numpy"))
    few.set_epoch(5)
    many = torch.utils.data.DataLoader(few, batch_size=None, num_workers=4, worker_init_fn=_warnings_to_stderr)
    assert sum(len(b["key"]) for b in many) == samples(path)
    assert "again" not in capfd.readouterr().err


def test_the_dataset_wrapper_takes_every_epoch_the_loader_takes(datasets: Dict[str, Path]) -> None:
    # Epochs past 2**63 - 1 wrapped to negative numbers in the shared value, refused at iter().
    path = datasets["tar"]
    for epoch in (2**63, 2**64 - 1):
        ds = shardtool.torch.IterableDataset(shardtool.Loader(path, batch_size=5, seed=3, output="numpy"))
        ds.set_epoch(epoch)
        got = [k for b in torch.utils.data.DataLoader(ds, batch_size=None) for k in b["key"]]
        want = [k for b in shardtool.Loader(path, batch_size=5, seed=3, epoch=epoch, output="numpy") for k in b["key"]]
        assert got == want, epoch


def test_the_dataset_wrapper_and_its_loader_do_not_hold_each_other(datasets: Dict[str, Path]) -> None:
    import gc
    import weakref

    loader = shardtool.Loader(datasets["tar"], batch_size=4, output="numpy")
    ds = shardtool.torch.IterableDataset(loader)
    next(iter(ds))
    gone = weakref.ref(loader)
    gc.disable()
    try:
        del ds, loader
        # Freed by reference counting alone: no cycle keeps the batch buffers until a collection.
        assert gone() is None
    finally:
        gc.enable()


def _rank_sets_its_epoch(ds: Any, rank: int, barrier: Any, out: Any) -> None:
    ds.set_epoch(rank + 1)
    barrier.wait()  # both ranks have set theirs before either reads
    out.put((rank, [k for b in torch.utils.data.DataLoader(ds, batch_size=None) for k in b["key"]]))


def test_ranks_handed_one_dataset_object_each_keep_their_own_epoch(datasets: Dict[str, Path]) -> None:
    import multiprocessing

    # As torch.multiprocessing.spawn hands the launcher's dataset to every rank it starts.
    path = datasets["tar"]
    ds = shardtool.torch.IterableDataset(shardtool.Loader(path, batch_size=8, seed=3, output="numpy"))
    ctx = multiprocessing.get_context("spawn")
    barrier, out = ctx.Barrier(2), ctx.Queue()
    ranks = [ctx.Process(target=_rank_sets_its_epoch, args=(ds, r, barrier, out)) for r in range(2)]
    for p in ranks:
        p.start()
    got = dict(out.get(timeout=120) for _ in ranks)
    for p in ranks:
        p.join(timeout=60)
        assert p.exitcode == 0
    for rank, keys in got.items():
        want = shardtool.Loader(path, batch_size=8, seed=3, epoch=rank + 1, output="numpy")
        assert keys == [k for b in want for k in b["key"]], rank
