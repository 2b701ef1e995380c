"""Ctrl-C reaches Python within a second while the reader waits for a batch or a tool works."""

from __future__ import annotations

import json
import signal
import socket
import threading
import time
from pathlib import Path
from typing import Dict

import pytest

import shardtool
from shardtool import _shardtool
from conftest import SAMPLE, all_keys, slow_readers


def _sigint_after(seconds: float) -> threading.Timer:
    t = threading.Timer(seconds, lambda: signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGINT))
    t.start()
    return t


def _sigint_until(first: float, stop: threading.Event) -> threading.Thread:
    """Sends SIGINT to the main thread after ``first`` seconds, and again every 2 s until ``stop``
    is set: one landing where Python drops exceptions (a finalizer) does not leave the test's
    loop running for ever."""

    def send() -> None:
        wait = first
        while not stop.wait(wait):
            signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGINT)
            wait = 2.0

    t = threading.Thread(target=send)
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


def test_an_interrupted_pack_stops_so_it_can_be_resumed_at_once(tmp_path: Path) -> None:
    # The interrupted pack stops (releasing OUTPUT) rather than going on in the background:
    # resuming it right away is allowed and gives the whole dataset.
    out = tmp_path / "out"
    options = dict(jobs=1, resize="shorter:1024", upscale=True, encode="png", shard_samples=5)
    timer = _sigint_after(0.3)
    with pytest.raises(KeyboardInterrupt):
        shardtool.pack(SAMPLE, out, **options)
    timer.join()
    assert not (out / "manifest.json").exists()
    assert not [p for p in out.iterdir() if p.name.endswith(".tmp")]
    published = [p for p in out.iterdir() if p.name.endswith(".tar")]
    report = shardtool.pack(SAMPLE, out, resume=True, **options)
    assert report["manifest"]["totals"]["samples"] == 45
    # The resume packed only what the interrupted run had not published (5 images a shard).
    assert report["packed_now"] == 45 - 5 * len(published)
    assert shardtool.verify(out)["ok"]


def test_an_interrupted_plan_releases_its_output_before_raising(tmp_path: Path) -> None:
    # A plan of a million-row list takes seconds; interrupted, it raises once it has let go of
    # OUTPUT, so planning again in the same process is not refused as "another process".
    rows = "".join(f"img/{i:07d}.jpg,{i % 10}\n" for i in range(1_000_000))
    listing = tmp_path / "big.csv"
    listing.write_text("path,label\n" + rows)
    out = tmp_path / "out"
    timer = _sigint_after(0.3)
    with pytest.raises(KeyboardInterrupt):
        shardtool.plan(listing, out, shard_samples=1000)
    timer.join()
    shardtool.plan(SAMPLE, out, shard_samples=10, overwrite=True)
    assert shardtool.status(out)["shards"] == 5


def test_an_interrupt_as_a_batch_arrives_loses_no_batch(datasets: Dict[str, Path]) -> None:
    # Batches arrive every few milliseconds, so the signal mostly lands in a wait that ends with
    # a batch: that batch must not count as handed out (a resume would skip it).
    loader = shardtool.Loader(datasets["tar"], batch_size=1, seed=5, output="numpy", workers=1)
    for trial in range(4):
        stop = threading.Event()
        timer = _sigint_until(0.05 + 0.02 * trial, stop)
        received = finished = 0
        with pytest.raises(KeyboardInterrupt):
            while True:
                received = 0
                for _ in loader:
                    received += 1
                finished = received
        stop.set()
        timer.join()
        state = loader.state_dict()
        delivered = 0 if state["reader"] is None else state["reader"]["delivered_prefix"]
        if received == 0 and delivered == finished:
            # Interrupted between passes: the state is still the finished pass's.
            continue
        assert delivered == received, f"trial {trial}"
        assert state["samples"] == received


def test_close_from_another_thread_stops_a_waiting_iteration(datasets: Dict[str, Path]) -> None:
    path = datasets["packed"]
    first = all_keys(path)[0]
    reader = _shardtool.Reader(
        str(path), batch_size=4, seed=0, epoch=0, shuffle=False, rank=0, world_size=1,
        workers=1, test_delay=(first, 5.0),
    )
    closer = threading.Timer(0.2, reader.close)
    closer.start()
    start = time.monotonic()
    with pytest.raises(RuntimeError, match="closed"):
        next(reader)
    assert time.monotonic() - start < 1.0
    closer.join()
    with pytest.raises(RuntimeError, match="closed"):
        next(reader)


def test_close_from_another_thread_stops_a_busy_iteration(datasets: Dict[str, Path]) -> None:
    path = datasets["tar"]
    reader = _shardtool.Reader(
        str(path), batch_size=1, seed=0, epoch=0, shuffle=False, rank=0, world_size=1, workers=1,
    )
    got: list = []
    errors: list = []

    def consume() -> None:
        try:
            for batch in reader:
                got.append(batch)
                time.sleep(0.01)
        except RuntimeError as e:
            errors.append(e)

    t = threading.Thread(target=consume)
    t.start()
    # Close once the iteration is under way (however slowly a loaded machine starts it).
    deadline = time.monotonic() + 10
    while not got and time.monotonic() < deadline:
        time.sleep(0.005)
    reader.close()
    t.join(timeout=10)
    assert not t.is_alive()
    assert errors and "closed" in str(errors[0])
    assert 0 < len(got) < 45


def test_a_slow_batch_is_one_wait_in_the_metrics(datasets: Dict[str, Path]) -> None:
    # The binding waits in 50 ms slices (to see Ctrl-C): a 1 s stall is still one batch's wait,
    # and samples count what was handed out, not what the reader threads had ready.
    path = datasets["packed"]
    first = all_keys(path)[0]
    reader = _shardtool.Reader(
        str(path), batch_size=5, seed=0, epoch=0, shuffle=False, rank=0, world_size=1,
        workers=1, test_delay=(first, 1.0),
    )
    next(reader)
    time.sleep(0.3)
    m = json.loads(reader.metrics())
    assert m["batches"] == 1 and m["samples"] == 5, m
    assert m["wait_p50_s"] >= 0.9, m
    got = 5 + sum(len(b[2]) for b in reader)
    m = json.loads(reader.metrics())
    assert m["samples"] == got == 45 and m["batches"] == 9, m
    assert m["wait_p99_s"] >= 0.9, m


def test_a_signal_handler_that_closes_the_loader_keeps_its_position(
    datasets: Dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The handler runs inside next() (on the thread holding the reader): close() there neither
    # waits for a stop that thread records only after the handler, nor loses the position.

    path = datasets["tar"]
    keys = all_keys(path)
    plain = slow_readers(monkeypatch, keys[12], 2.0)
    opts = dict(batch_size=4, shuffle=False, output="numpy", workers=1)
    loader = shardtool.Loader(path, **opts)
    it = iter(loader)
    got = [k for _ in range(3) for k in next(it)["key"]]
    took: Dict[str, float] = {}

    def handler(signum: int, frame: object) -> None:
        start = time.monotonic()
        loader.close()
        took["close"] = time.monotonic() - start

    old = signal.signal(signal.SIGALRM, handler)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.3)
        with pytest.raises(RuntimeError, match="closed"):
            next(it)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    assert took["close"] < 0.5, took
    state = loader.state_dict()
    assert state["samples"] == 12 and got == keys[:12]
    plain()
    resumed = shardtool.Loader(path, **opts)
    resumed.load_state_dict(state)
    assert [k for b in resumed for k in b["key"]] == keys[12:]


def test_metrics_from_a_monitoring_thread_need_not_wait_for_a_slow_batch(datasets: Dict[str, Path]) -> None:
    path = datasets["packed"]
    first = all_keys(path)[0]
    reader = _shardtool.Reader(
        str(path), batch_size=4, seed=0, epoch=0, shuffle=False, rank=0, world_size=1,
        workers=1, test_delay=(first, 2.0),
    )
    seen: Dict[str, float] = {}

    def monitor() -> None:
        time.sleep(0.2)
        start = time.monotonic()
        m = json.loads(reader.metrics())
        s = json.loads(reader.state())
        seen["took"] = time.monotonic() - start
        seen["samples"] = m["samples"] + s["delivered_prefix"]

    t = threading.Thread(target=monitor)
    t.start()
    next(reader)
    t.join()
    assert seen["took"] < 0.5 and seen["samples"] == 0, seen


@pytest.mark.parametrize("step", ["len", "iter", "verify", "inspect"])
def test_ctrl_c_interrupts_the_manifest_fetch_of_a_remote_dataset(step: str) -> None:
    # A server that takes the connection and never answers: each attempt waits out its timeout.
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        url = f"http://127.0.0.1:{silent.getsockname()[1]}/ds/"
        loader = shardtool.Loader(url, batch_size=2, output="numpy", fetch_timeout=30, fetch_attempts=2)
        timer = _sigint_after(0.3)
        start = time.monotonic()
        with pytest.raises(KeyboardInterrupt):
            if step == "len":
                len(loader)
            elif step == "iter":
                next(iter(loader))
            elif step == "verify":
                shardtool.verify(url, fetch_timeout=30, fetch_attempts=2)
            else:
                shardtool.inspect(url, fetch_timeout=30, fetch_attempts=2)
        assert time.monotonic() - start < 5.0
        timer.join()
        loader.close()


def test_ctrl_c_at_any_line_of_iter_keeps_a_loaded_position(datasets: Dict[str, Path]) -> None:
    # KeyboardInterrupt raised at each line of the start of a resumed pass in turn (as a signal
    # handler would raise it there): the position saved before is never lost.
    import sys
    import types

    path = datasets["tar"]
    first = shardtool.Loader(path, batch_size=2, seed=4, output="numpy")
    it = iter(first)
    next(it)
    next(it)
    saved = first.state_dict()
    first.close()
    start = shardtool.Loader._start.__code__
    for k in range(1, 200):
        loader = shardtool.Loader(path, batch_size=2, seed=4, output="numpy")
        loader.load_state_dict(saved)
        seen = [0]

        def trace(frame: types.FrameType, event: str, arg: object) -> object:
            if frame.f_code is not start:
                return None
            if event == "line":
                seen[0] += 1
                if seen[0] == k:
                    raise KeyboardInterrupt
            return trace

        sys.settrace(trace)
        try:
            batches = iter(loader)
        except KeyboardInterrupt:
            batches = None
        finally:
            sys.settrace(None)
        assert loader.state_dict()["samples"] == saved["samples"], k
        if batches is not None:
            # Every line was reached: the pass resumes where the saved one stopped.
            assert next(batches)["key"] and loader.state_dict()["samples"] == saved["samples"] + 2
            loader.close()
            break
        loader.close()
        assert loader.state_dict()["samples"] == saved["samples"], k
    else:
        raise AssertionError("iter() never got through")


def test_ctrl_c_while_a_loader_closes_keeps_its_position(datasets: Dict[str, Path]) -> None:
    # A second Ctrl-C while the first one's cleanup waits for the reader to stop.
    loader = shardtool.Loader(datasets["tar"], batch_size=2, seed=4, output="numpy")
    it = iter(loader)
    next(it)
    next(it)

    class Interrupted:
        def __init__(self, reader: object) -> None:
            self.reader = reader

        def stopped_at(self, timeout: float) -> object:
            raise KeyboardInterrupt

        def __getattr__(self, name: str) -> object:
            return getattr(self.reader, name)

    loader._reader = Interrupted(loader._reader)  # type: ignore[assignment]
    with pytest.raises(KeyboardInterrupt):
        loader.close()
    assert loader.state_dict()["samples"] == 4
    loader._reader = loader._reader.reader  # type: ignore[union-attr]
    loader.close()
    assert loader.state_dict()["samples"] == 4
