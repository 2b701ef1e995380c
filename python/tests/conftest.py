"""Datasets packed once per test session from the repository's 45-photo sample folder, with
``shardtool.pack`` itself: a tar dataset of fixed-size JPEGs, a tar dataset of original-size
images (variable shapes), and a packed dataset of raw pixels."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable, Dict

import pytest

import shardtool

SAMPLE = Path(__file__).resolve().parents[2] / "sample-data" / "imagefolder"


def _pack(out: Path, **options: object) -> Path:
    # Small shards, so that shard shuffling, partitioning and shard closing are exercised.
    shardtool.pack(SAMPLE, out, shard_samples=8, jobs=2, **options)
    return out


@pytest.fixture(scope="session")
def datasets(tmp_path_factory: pytest.TempPathFactory) -> Dict[str, Path]:
    root = tmp_path_factory.mktemp("datasets")
    return {
        "tar": _pack(root / "tar", resize="crop:32x24"),
        "tar_var": _pack(root / "tar_var", resize="shorter:20"),
        "packed": _pack(root / "packed", format="packed", resize="crop:16x16"),
    }


def samples(path: Path) -> int:
    """Samples in a dataset, from its manifest."""
    m = json.loads((path / "manifest.json").read_text())
    return sum(int(s["samples"]) for s in m["shards"])


def all_keys(path: Path) -> list:
    """Every sample key of a dataset, read once in manifest order."""
    loader = shardtool.Loader(path, batch_size=7, shuffle=False, output="numpy", decode=False)
    return [k for b in loader for k in b["key"]]


def slow_readers(monkeypatch: pytest.MonkeyPatch, key: str, seconds: float) -> Callable[[], None]:
    """Makes the reader of every Loader started from now on wait ``seconds`` on sample ``key``
    (the reader's testing aid, so a test can act while an iteration waits); returns what puts
    the plain reader back."""
    from shardtool import _loader, _shardtool

    real = _shardtool.Reader

    def slow(*args: object, **kwargs: object) -> object:
        return real(*args, test_delay=(key, seconds), **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(_loader._shardtool, "Reader", slow)
    return lambda: monkeypatch.setattr(_loader._shardtool, "Reader", real)
