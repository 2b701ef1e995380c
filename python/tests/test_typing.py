"""A type checker holds calls to the package's typed signatures: misspelt options, values outside
an option's choices and options a call does not take are errors before anything runs."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Dict

import pytest

import shardtool


def _mypy(files: Dict[str, str], tmp_path: Path) -> str:
    """mypy's report of the snippets `files` (name: code), checked strictly against the
    shardtool being tested, in one run (mypy takes a while to load numpy's types)."""
    for name, code in files.items():
        (tmp_path / name).write_text(code)
    # Run from the folder holding the package: mypy finds it there, installed or not.
    package_parent = Path(shardtool.__file__).resolve().parent.parent
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--cache-dir=/dev/null", *(str(tmp_path / n) for n in files)],
        cwd=package_parent,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode in (0, 1), done.stdout + done.stderr
    return done.stdout


def test_documented_calls_pass_and_wrong_options_are_type_errors(tmp_path: Path) -> None:
    good = (
        "import shardtool\n"
        "r = shardtool.pack('in', 'out', resize='shorter:256', shard_size=64 << 20,\n"
        "                   filter='lanczos3', encode='png', keys='index', compress='zstd:3',\n"
        "                   input_format='list', drop_columns=['a'], seed=None, jobs=2)\n"
        "p = shardtool.plan('in', 'out', shard_samples=100, format='packed', image_column='img')\n"
        "l = shardtool.Loader('x', batch_size=2, remainder='pad', output='numpy')\n"
        # numpy's integers, as the runtime takes them; a reused dict of options, annotated.
        "import numpy as np\n"
        "shardtool.pack('in', 'out', seed=np.int64(7), shard_samples=np.int32(8))\n"
        "shardtool.plan('in', 'out', shard_samples=np.int64(8), max_errors=np.uint8(3))\n"
        "n = shardtool.Loader('x', batch_size=np.int64(2), seed=np.uint32(1), epoch=np.int64(0),\n"
        "                     rank=np.int64(0), world_size=np.int64(2), cache_limit=np.int64(1 << 30),\n"
        "                     prefetch=np.int16(2), fetch_concurrency=np.int8(2))\n"
        "n.set_epoch(np.int64(3))\n"
        "shardtool.verify('x', jobs=np.int64(2), fetch_attempts=np.int64(3))\n"
        "shardtool.merge('out', max_errors=np.int64(0))\n"
        "common: shardtool.PackOptions = {'format': 'packed', 'seed': 1}\n"
        "shardtool.pack('in', 'out', **common)\n"
        # A call's own options added to it, as the README shows.
        "mine: shardtool.PackOptions = {**common, 'resize': 'shorter:256'}\n"
        "shardtool.pack('in', 'out', **mine)\n"
        # Paths, as every call takes them.
        "from pathlib import Path\n"
        "import shardtool.ray\n"
        "shardtool.ray.pack(Path('in'), Path('out'), parts=2, shard_samples=8, resize='none')\n"
        "shardtool.ray.pack('in', 'out', parts=np.int64(2), shard_samples=np.int64(8), cpus_per_part=np.int64(1))\n"
    )
    calls = [
        "shardtool.pack('in', 'out', resise='shorter:256')",
        "shardtool.pack('in', 'out', filter='lanczos')",
        "shardtool.pack('in', 'out', input_format='csv')",
        "shardtool.pack('in', 'out', shuffle='no')",
        "shardtool.plan('in', 'out', shard_samples=10, shard_size='1MiB')",
        "shardtool.Loader('x', batch_size=2, remainder='pads')",
        "shardtool.Loader('x', batch_size=2, output='jax')",
        "shardtool.Loader('x', batch_size=2.0)",
        "shardtool.verify('x', jobs='2')",
        "shardtool.pack('in', 'out', drop_columns='label')",
        "shardtool.ray.pack('in', 'out', parts=2, shard_samples=8, jobs=2)",
    ]
    bad = "import shardtool, shardtool.ray\n" + "\n".join(calls) + "\n"
    out = _mypy({"good.py": good, "bad.py": bad}, tmp_path)
    assert "good.py" not in out, out
    # Each wrong call's own line is named by at least one error.
    lines = {int(m) for m in re.findall(r"bad\.py:(\d+): error", out)}
    assert lines == set(range(2, 2 + len(calls))), out
    assert 'did you mean "resize"' in out, out


def test_a_config_parser_fills_every_argument_from_the_hints(tmp_path: Path) -> None:
    # LightningCLI and others build command lines and configs from the hints with jsonargparse:
    # integers, sizes and choices read from text, then the real objects made and used.
    ArgumentParser = pytest.importorskip("jsonargparse").ArgumentParser

    from conftest import SAMPLE, samples

    ds = tmp_path / "ds"
    parser = ArgumentParser()
    parser.add_class_arguments(shardtool.Loader, "loader")
    parser.add_function_arguments(shardtool.pack, "pack")
    parser.add_function_arguments(shardtool.verify, "verify")
    cfg = parser.parse_args([
        f"--pack.input={SAMPLE}", f"--pack.output={ds}", "--pack.quality=80", "--pack.shard_size=200000",
        f"--loader.dataset={ds}", "--loader.batch_size=8", "--loader.seed=3", "--loader.epoch=1",
        "--loader.cache_limit=64MiB", "--loader.output=numpy", "--loader.prefetch=2",
        f"--verify.path={ds}", "--verify.jobs=2",
    ])
    assert (cfg.loader.batch_size, cfg.loader.cache_limit, cfg.pack.quality) == (8, "64MiB", 80)
    shardtool.pack(cfg.pack.input, cfg.pack.output, quality=cfg.pack.quality, shard_size=cfg.pack.shard_size)
    report = shardtool.verify(cfg.verify.path, jobs=cfg.verify.jobs)
    assert report["ok"] and report["jobs"] == 2, report
    loader = parser.instantiate(cfg).loader
    assert isinstance(loader, shardtool.Loader)
    assert sum(len(b["key"]) for b in loader) == samples(ds)
    with pytest.raises(SystemExit):
        parser.parse_args([f"--loader.dataset={ds}", "--loader.batch_size=eight"])
