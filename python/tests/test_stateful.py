"""torchdata's StatefulDataLoader saves and restores the Loader's position through the
``state_dict``/``load_state_dict`` protocol, in-process and with worker processes."""

from __future__ import annotations

from pathlib import Path
from typing import Dict

import pytest

import shardtool
import shardtool.torch

stateful = pytest.importorskip("torchdata.stateful_dataloader")


@pytest.mark.parametrize("workers", [0, 2])
def test_stateful_dataloader_resumes_the_identical_remainder(datasets: Dict[str, Path], workers: int) -> None:
    path = datasets["packed"]

    def make() -> "stateful.StatefulDataLoader":
        loader = shardtool.Loader(path, batch_size=2, seed=13, output="numpy")
        return stateful.StatefulDataLoader(
            shardtool.torch.IterableDataset(loader), batch_size=None, num_workers=workers
        )

    full = [b["key"] for b in make()]
    dl = make()
    it = iter(dl)
    head = [next(it)["key"] for _ in range(5)]
    state = dl.state_dict()
    del it
    resumed = make()
    resumed.load_state_dict(state)
    tail = [b["key"] for b in resumed]
    assert head + tail == full


@pytest.mark.parametrize("workers,persistent", [(0, False), (2, False), (2, True)])
def test_a_checkpoint_at_an_epochs_end_then_set_epoch_reads_the_next_epoch(
    datasets: Dict[str, Path], workers: int, persistent: bool
) -> None:
    # torchdata applies a loaded state at iter(), after the set_epoch() the training loop calls
    # once the checkpoint is loaded: a finished state of an earlier epoch must not win over it
    # (reading that epoch again, with its crops).
    path = datasets["packed"]

    def make() -> "tuple[stateful.StatefulDataLoader, shardtool.torch.IterableDataset]":
        d = shardtool.torch.IterableDataset(shardtool.Loader(path, batch_size=4, seed=9, output="numpy"))
        dl = stateful.StatefulDataLoader(d, batch_size=None, num_workers=workers, persistent_workers=persistent)
        return dl, d

    def keys(epoch: int) -> "list[str]":
        loader = shardtool.Loader(path, batch_size=4, seed=9, output="numpy")
        loader.set_epoch(epoch)
        return sorted(k for b in loader for k in b["key"])

    def order(epoch: int) -> "list[str]":
        loader = shardtool.Loader(path, batch_size=4, seed=9, output="numpy")
        loader.set_epoch(epoch)
        return [k for b in loader for k in b["key"]]

    dl, d = make()
    d.set_epoch(0)
    first = [b for b in dl]
    checkpoint = dl.state_dict()
    dl, d = make()
    dl.load_state_dict(checkpoint)
    d.set_epoch(1)
    got = [b for b in dl]
    assert {int(b["epoch"]) for b in got} == {1}
    got_keys = [k for b in got for k in b["key"]]
    assert sorted(got_keys) == keys(1) and len(first) == len(got)
    if workers == 0:
        assert got_keys == order(1) != order(0)


def test_a_state_of_an_earlier_epoch_resumes_once_that_epoch_is_set(datasets: Dict[str, Path]) -> None:
    # Going back to an older checkpoint: set_epoch() names the epoch to read, the state's.
    path = datasets["packed"]
    d = shardtool.torch.IterableDataset(shardtool.Loader(path, batch_size=4, seed=9, output="numpy"))
    dl = stateful.StatefulDataLoader(d, batch_size=None, num_workers=0)
    d.set_epoch(0)
    it = iter(dl)
    head = [k for _ in range(3) for k in next(it)["key"]]
    old = dl.state_dict()
    del it
    d.set_epoch(1)
    assert len([b for b in dl]) > 0
    dl.load_state_dict(old)
    d.set_epoch(0)
    rest = [k for b in dl for k in b["key"]]
    loader = shardtool.Loader(path, batch_size=4, seed=9, output="numpy")
    assert head + rest == [k for b in loader for k in b["key"]]


def test_a_dataloaders_state_given_to_a_loader_says_where_it_belongs(datasets: Dict[str, Path]) -> None:
    path = datasets["packed"]
    d = shardtool.torch.IterableDataset(shardtool.Loader(path, batch_size=4, output="numpy"))
    dl = stateful.StatefulDataLoader(d, batch_size=None, num_workers=0)
    it = iter(dl)
    next(it)
    state = dl.state_dict()
    with pytest.raises(ValueError, match="StatefulDataLoader's state; load it with that DataLoader"):
        shardtool.Loader(path, batch_size=4).load_state_dict(state)
