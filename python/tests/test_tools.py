"""pack, verify and inspect return the CLI's reports as dicts."""

from __future__ import annotations

from pathlib import Path
from typing import Dict

import shardtool
from conftest import SAMPLE, samples


def test_pack_verify_inspect(datasets: Dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "p"
    summary = shardtool.pack(SAMPLE, out, format="packed", resize="crop:8x8", shard_samples=10)
    inputs = summary["manifest"]["inputs"]
    assert inputs["found"] == inputs["packed"] + inputs["failed"] >= 40
    assert summary["bytes_out"] > 0 and (out / "manifest.json").exists()
    assert samples(out) == inputs["packed"]
    report = shardtool.verify(out, decode=True)
    assert report["ok"] is True and report["problems"] == []
    info = shardtool.inspect(datasets["tar"])
    assert info["samples"] == samples(datasets["tar"])
    assert info["shards"] >= 5
