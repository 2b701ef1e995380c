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
