"""The ``device`` argument: checked at construction, its CUDA index resolved at the first
``iter()`` (explicit index, else ``LOCAL_RANK``), and a CUDA device a clear ``RuntimeError``
naming the resolved device, since the bindings have no CUDA path."""

from __future__ import annotations

from pathlib import Path
from typing import Dict

import pytest
import torch

import shardtool
from conftest import samples


def test_cpu_device_reads_cpu_batches(datasets: Dict[str, Path]) -> None:
    path = datasets["packed"]
    for device in ("cpu", "cpu:0", torch.device("cpu"), torch.device("cpu", 0)):
        batches = list(shardtool.Loader(path, batch_size=8, device=device))
        assert sum(len(b["key"]) for b in batches) == samples(path)
        assert all(b["image"].device.type == "cpu" for b in batches)


def test_bare_cuda_takes_local_rank_at_iter(datasets: Dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    loader = shardtool.Loader(datasets["tar"], batch_size=4, device="cuda")
    # Set after construction, as a launcher's init code may: still honoured.
    monkeypatch.setenv("LOCAL_RANK", "3")
    # The plan does not need the device.
    assert len(loader) == -(-samples(datasets["tar"]) // 4)
    with pytest.raises(RuntimeError, match=r"'cuda:3' \(index from LOCAL_RANK=3\).*no CUDA support"):
        iter(loader)
    monkeypatch.setenv("LOCAL_RANK", "1")
    with pytest.raises(RuntimeError, match=r"'cuda:1'"):
        iter(loader)


def test_bare_cuda_without_local_rank_is_cuda_0(datasets: Dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    loader = shardtool.Loader(datasets["tar"], batch_size=4, device="cuda")
    with pytest.raises(RuntimeError, match=r"'cuda:0' \(no index given and LOCAL_RANK unset\)"):
        next(iter(loader))


def test_explicit_index_wins_over_local_rank(datasets: Dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOCAL_RANK", "3")
    for device in ("cuda:1", torch.device("cuda", 1)):
        loader = shardtool.Loader(datasets["tar"], batch_size=4, device=device)
        with pytest.raises(RuntimeError, match=r"device 'cuda:1': .*no CUDA support") as err:
            iter(loader)
        assert "LOCAL_RANK" not in str(err.value)


def test_bad_devices(datasets: Dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    p = datasets["tar"]
    for bad in ("cuda:", "cuda:x", "cuda:-1", "cuda:1:2", "gpu", "CPU", "mps", ""):
        with pytest.raises(ValueError, match="device must be"):
            shardtool.Loader(p, batch_size=2, device=bad)
    with pytest.raises(TypeError):
        shardtool.Loader(p, batch_size=2, device=0)  # type: ignore[arg-type]
    loader = shardtool.Loader(p, batch_size=2, device="cuda")
    for bad_env in ("x", "-1", ""):
        monkeypatch.setenv("LOCAL_RANK", bad_env)
        with pytest.raises(ValueError, match="LOCAL_RANK"):
            iter(loader)
