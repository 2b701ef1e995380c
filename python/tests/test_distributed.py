"""torch.distributed with the gloo backend on two local processes: the Loader is built before
``init_process_group`` and still reads its rank's share at ``iter()``, in the rank's process or
in DataLoader workers it spawns (which have no process group of their own)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Dict

import pytest
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.utils.data

import shardtool
import shardtool.torch
from conftest import samples


def _worker(rank: int, world: int, path: str, init: str, out: str, context: str) -> None:
    for name in ("RANK", "WORLD_SIZE"):
        os.environ.pop(name, None)
    loader = shardtool.Loader(path, batch_size=3, seed=8, output="numpy")
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
    try:
        if context:
            ds = shardtool.torch.IterableDataset(loader)
            dl = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=2, multiprocessing_context=context)
            keys = [k for b in dl for k in b["key"]]
        else:
            keys = [k for b in loader for k in b["key"]]
        gathered: list = [None] * world
        dist.all_gather_object(gathered, keys)
        if rank == 0:
            with open(out, "w") as f:
                for ks in gathered:
                    f.write(",".join(ks) + "\n")
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("context", ["", "spawn"])
def test_gloo_two_processes(datasets: Dict[str, Path], tmp_path: Path, context: str) -> None:
    path = datasets["tar"]
    out = tmp_path / "keys.txt"
    init = f"file://{tmp_path / 'rendezvous'}"
    mp.spawn(_worker, args=(2, str(path), init, str(out), context), nprocs=2, join=True)
    lines = out.read_text().splitlines()
    assert len(lines) == 2
    per_rank = [line.split(",") for line in lines]
    n = samples(path)
    assert len(per_rank[0]) == len(per_rank[1]) == n // 2
    assert not set(per_rank[0]) & set(per_rank[1])
