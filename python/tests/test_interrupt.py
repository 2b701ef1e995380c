"""Ctrl-C reaches Python within a second while the reader waits for a batch or a tool works."""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path
from typing import Dict

import pytest

import shardtool
from shardtool import _shardtool
from conftest import SAMPLE, all_keys


def _sigint_after(seconds: float) -> threading.Timer:
    t = threading.Timer(seconds, lambda: signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGINT))
    t.start()
    return t


def test_ctrl_c_interrupts_a_blocked_next(datasets: Dict[str, Path]) -> None:
    path = datasets["packed"]
    first = all_keys(path)[0]
    reader = _shardtool.Reader(
        str(path), batch_size=4, seed=0, epoch=0, shuffle=False, rank=0, world_size=1,
        workers=1, test_delay=(first, 2.0),
    )
    timer = _sigint_after(0.2)
    start = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        next(reader)
    assert time.monotonic() - start < 1.0
    timer.join()
    # The interrupted wait lost nothing: the batch still comes.
    assert next(reader)[2][0] == first


def test_ctrl_c_interrupts_pack(tmp_path: Path) -> None:
    timer = _sigint_after(0.01)
    start = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        shardtool.pack(SAMPLE, tmp_path / "out", jobs=1, resize="shorter:300", encode="png")
    assert time.monotonic() - start < 1.0
    timer.join()
