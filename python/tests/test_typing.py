"""A type checker holds calls to the package's typed signatures: misspelt options, values outside
an option's choices and options a call does not take are errors before anything runs."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import shardtool


def _mypy(code: str, tmp_path: Path) -> str:
    """mypy's report of `code`, checked strictly against the shardtool being tested."""
    snippet = tmp_path / "snippet.py"
    snippet.write_text(code)
    # Run from the folder holding the package: mypy finds it there, installed or not.
    package_parent = Path(shardtool.__file__).resolve().parent.parent
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--cache-dir=/dev/null", str(snippet)],
        cwd=package_parent,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode in (0, 1), done.stdout + done.stderr
    return done.stdout


def test_correct_calls_check_clean(tmp_path: Path) -> None:
    out = _mypy(
        "import shardtool\n"
        "r = shardtool.pack('in', 'out', resize='shorter:256', shard_size=64 << 20,\n"
        "                   filter='lanczos3', encode='png', keys='index', compress='zstd:3',\n"
        "                   input_format='list', drop_columns=['a'], seed=None, jobs=2)\n"
        "p = shardtool.plan('in', 'out', shard_samples=100, format='packed', image_column='img')\n"
        "l = shardtool.Loader('x', batch_size=2, remainder='pad', output='numpy')\n",
        tmp_path,
    )
    assert "Success: no issues found" in out, out


def test_wrong_options_are_type_errors(tmp_path: Path) -> None:
    calls = [
        "shardtool.pack('in', 'out', resise='shorter:256')",
        "shardtool.pack('in', 'out', filter='lanczos')",
        "shardtool.pack('in', 'out', input_format='csv')",
        "shardtool.pack('in', 'out', shuffle='no')",
        "shardtool.plan('in', 'out', shard_samples=10, shard_size='1MiB')",
        "shardtool.Loader('x', batch_size=2, remainder='pads')",
        "shardtool.Loader('x', batch_size=2, output='jax')",
    ]
    out = _mypy("import shardtool\n" + "\n".join(calls) + "\n", tmp_path)
    # Each call's own line is named by at least one error.
    lines = {int(m) for m in re.findall(r"snippet\.py:(\d+): error", out)}
    assert lines == set(range(2, 2 + len(calls))), out
    assert 'did you mean "resize"' in out, out
