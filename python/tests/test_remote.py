"""Datasets served by a real HTTP server (lighttpd on loopback): the loader reads them through
the shard cache and ``verify`` checks them there, naming shards as the server stores them."""

from __future__ import annotations

import http.server
import json
import os
import shutil
import socket
import subprocess
import threading
import time
from pathlib import Path
from typing import Iterator, List

import pytest

import shardtool
from conftest import SAMPLE, samples


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Path]:
    """A folder lighttpd serves at ``http://127.0.0.1:PORT/``; yields the folder, with the
    port in ``(folder / ".port")``."""
    binary = shutil.which("lighttpd") or "/usr/sbin/lighttpd"
    if not Path(binary).is_file():
        pytest.fail("lighttpd is needed by this test: apt-get install lighttpd (.ci/run does)")
    root = tmp_path / "www"
    root.mkdir()
    port = _free_port()
    conf = tmp_path / "lighttpd.conf"
    conf.write_text(
        f'server.document-root = "{root}"\nserver.bind = "127.0.0.1"\nserver.port = {port}\n'
        f'server.errorlog = "{tmp_path / "error.log"}"\n'
        # The test changes a served file: no stat cache serving its old size for a second.
        'server.stat-cache-engine = "disable"\n'
    )
    server = subprocess.Popen([binary, "-D", "-f", str(conf)], stdout=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"lighttpd did not listen on {port}")
                time.sleep(0.05)
        (tmp_path / "port").write_text(str(port))
        yield root
    finally:
        server.kill()
        server.wait()


def _url(root: Path, path: str) -> str:
    port = (root.parent / "port").read_text()
    return f"http://127.0.0.1:{port}/{path}"


def test_loader_and_verify_over_http_through_the_cache(served: Path, tmp_path: Path) -> None:
    ds = served / "ds"
    shardtool.pack(SAMPLE, ds, resize="crop:16x16", shard_samples=8, compress="zstd", jobs=2)
    url = _url(served, "ds/")
    cache = tmp_path / "cache"

    keys = [
        k
        for b in shardtool.Loader(url, batch_size=5, output="numpy", decode=False, cache_dir=cache)
        for k in b["key"]
    ]
    assert len(keys) == len(set(keys)) == samples(ds)

    report = shardtool.verify(url, decode=True, cache_dir=cache)
    assert report["ok"], report["problems"]
    assert report["dataset"] == url + "manifest.json"
    assert report["samples"] == samples(ds)

    # Inspect reads it as the local copy, naming it by URL (stored sizes as served: zstd).
    remote = shardtool.inspect(url, cache_dir=cache)
    local = shardtool.inspect(ds)
    assert (remote["target"], remote["manifest"]) == (url, url + "manifest.json")
    assert "wds+zstd" in remote["formats"]
    assert {k: v for k, v in remote.items() if k not in ("target", "manifest")} == {
        k: v for k, v in local.items() if k not in ("target", "manifest")
    }

    # A shard damaged on the server fails its checksum on the way into the cache: reported under
    # its stored name, as a fetch failure. The cache is cleared first so it is fetched again.
    manifest = json.loads((ds / "manifest.json").read_text())
    stored = manifest["shards"][1]["file"]
    assert stored.endswith(".tar.zst")
    data = bytearray((ds / stored).read_bytes())
    data[len(data) // 2] ^= 0xFF
    (ds / stored).write_bytes(bytes(data))
    report = shardtool.verify(url, cache_dir=tmp_path / "fresh", fetch_attempts=1, fetch_concurrency=1)
    assert not report["ok"]
    assert [(p["kind"], p["shard"]) for p in report["problems"]] == [("fetch_failed", stored)]
    # One attempt asked for, one made (the default retries a failed checksum).
    assert "after 1 attempt(s)" in report["problems"][0]["message"], report["problems"]
    inspected = shardtool.inspect(url, cache_dir=tmp_path / "fresh", fetch_timeout=5.0, fetch_attempts=1)
    assert len(inspected["problems"]) == 1, inspected["problems"]
    for bad, error in ((dict(fetch_attempts=0), ValueError), (dict(fetch_timeout="5"), TypeError)):
        with pytest.raises(error, match=next(iter(bad))):
            shardtool.verify(url, cache_dir=tmp_path / "fresh", **bad)  # type: ignore[arg-type]

    # Too small a cache for the shards checked at once is an error before anything is fetched;
    # one that holds the largest shard (with its .zst copy) and not the dataset checks it all,
    # one shard at a time, and finds the damaged one.
    with pytest.raises(shardtool.CacheError, match="at least"):
        shardtool.verify(url, cache_dir=tmp_path / "small", cache_limit=1000)
    largest = max(s["uncompressed_bytes"] + s["bytes"] for s in manifest["shards"])
    assert largest < sum(s["uncompressed_bytes"] for s in manifest["shards"])
    one_at_a_time = dict(cache_dir=tmp_path / "small", cache_limit=largest, jobs=1, fetch_concurrency=1)
    report = shardtool.verify(url, fetch_attempts=1, **one_at_a_time)  # type: ignore[arg-type]
    assert [(p["kind"], p["shard"]) for p in report["problems"]] == [("fetch_failed", stored)]
    assert report["samples"] == samples(ds) - manifest["shards"][1]["samples"]
    inspected = shardtool.inspect(url, fetch_attempts=1, **one_at_a_time)  # type: ignore[arg-type]
    assert [p["shard"] for p in inspected["problems"]] == [stored]
    # A shard URL is not a dataset.
    with pytest.raises(shardtool.DatasetError, match="is a shard"):
        shardtool.verify(_url(served, f"ds/{stored}"))


def _serve_stalling(
    ds: Path, release: threading.Event, stalled: threading.Event, gets: List[str]
) -> http.server.ThreadingHTTPServer:
    """Serves ``ds`` on loopback, the start of every shard and then nothing until ``release`` is
    set (each such GET named in ``gets``, ``stalled`` set); once released, shards whole. The
    manifest is served whole, or stalled too under ``/stall/``."""

    class Stalling(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_HEAD(self) -> None:
            self.do_GET(head=True)

        def do_GET(self, head: bool = False) -> None:
            stall = self.path.startswith("/stall/")
            path = ds / self.path.removeprefix("/stall").lstrip("/")
            if not path.is_file():
                self.send_error(404)
                return
            data = path.read_bytes()
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if head:
                return
            if (path.name == "manifest.json" and not stall) or release.is_set():
                self.wfile.write(data)
                return
            gets.append(path.name)
            self.wfile.write(data[:1000])
            self.wfile.flush()
            stalled.set()
            release.wait(60)

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Stalling)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def test_an_interrupted_remote_verify_frees_its_cache_room_before_raising(tmp_path: Path) -> None:
    # Ctrl-C while verify fetches from a stalled server: the fetches stop, and the room they held
    # under the cache limit is free once KeyboardInterrupt arrives, so a retry at once under the
    # same limit has it (it found the room held by the interrupted task, still fetching).
    import signal

    ds = tmp_path / "ds"
    shardtool.pack(SAMPLE, ds, resize="shorter:32", shard_samples=10)
    stalled = threading.Event()
    release = threading.Event()
    server = _serve_stalling(ds, release, stalled, [])
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/"
        shards = json.loads((ds / "manifest.json").read_text())["shards"]
        two_largest = sum(sorted(s["bytes"] for s in shards)[-2:])
        options = dict(cache_dir=tmp_path / "cache", cache_limit=two_largest, jobs=1, fetch_concurrency=2,
                       fetch_timeout=30.0, fetch_attempts=1)
        main = threading.main_thread().ident or 0
        interrupt = threading.Thread(target=lambda: stalled.wait(30) and signal.pthread_kill(main, signal.SIGINT))
        interrupt.start()
        start = time.monotonic()
        with pytest.raises(KeyboardInterrupt):
            shardtool.verify(url, **options)  # type: ignore[arg-type]
        assert time.monotonic() - start < 10.0
        interrupt.join()
        release.set()
        report = shardtool.verify(url, **options)  # type: ignore[arg-type]
        assert report["ok"], report["problems"]
        assert report["samples"] == samples(ds)
    finally:
        release.set()
        server.shutdown()


def test_a_remote_verify_downloads_no_more_shards_at_once_than_fetch_concurrency(tmp_path: Path) -> None:
    # Shards are checked on `jobs` threads and held by as many, but downloaded at most
    # fetch_concurrency at a time, as the option says.
    ds = tmp_path / "ds"
    shardtool.pack(SAMPLE, ds, resize="shorter:32", shard_samples=4)
    lock = threading.Lock()
    flight = {"now": 0, "most": 0}

    class Slow(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            path = ds / self.path.lstrip("/")
            if not path.is_file():
                self.send_error(404)
                return
            data = path.read_bytes()
            shard = path.name != "manifest.json"
            with lock:
                flight["now"] += shard
                flight["most"] = max(flight["most"], flight["now"])
            try:
                if shard:
                    time.sleep(0.1)
                self.send_response(200)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            finally:
                with lock:
                    flight["now"] -= shard

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Slow)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/"
        for concurrency in (1, 3):
            flight["most"] = 0
            report = shardtool.verify(url, cache_dir=tmp_path / f"c{concurrency}", jobs=6,
                                      fetch_concurrency=concurrency)
            assert report["ok"], report["problems"]
            assert flight["most"] == concurrency, (concurrency, flight)
    finally:
        server.shutdown()


def test_close_does_not_wait_for_a_stalled_fetch(tmp_path: Path) -> None:
    # A server that sends the start of every shard and then nothing: a reader thread waits in
    # that read until the fetch timeout (30 s). close() (and so a Ctrl-C'd program's exit) must
    # not wait for it.
    ds = tmp_path / "ds"
    shardtool.pack(SAMPLE, ds, resize="shorter:32", shard_samples=10)
    release = threading.Event()
    gets: List[str] = []
    server = _serve_stalling(ds, release, threading.Event(), gets)
    try:
        url = f"http://user:Secret1@127.0.0.1:{server.server_address[1]}/"
        loader = shardtool.Loader(
            url, batch_size=4, cache_dir=tmp_path / "cache", output="numpy", fetch_timeout=1, fetch_attempts=5
        )
        assert "Secret1" not in repr(loader) and "***@127.0.0.1" in repr(loader)
        shouted = shardtool.Loader(url.replace("http://", "HTTP://"), batch_size=4)
        assert "Secret1" not in repr(shouted)
        it = iter(loader)
        time.sleep(0.5)
        start = time.monotonic()
        loader.close()
        assert time.monotonic() - start < 3.0
        with pytest.raises(RuntimeError, match="closed"):
            next(it)
        # Closed, it fetches nothing more: no retry of the stalled fetches, no new one.
        time.sleep(0.5)
        after_close = len(gets)
        time.sleep(3)
        assert len(gets) == after_close, gets
        # The stall ends a fetch after fetch_timeout seconds, tried fetch_attempts times.
        quick = shardtool.Loader(
            url, batch_size=4, cache_dir=tmp_path / "cache2", output="numpy", fetch_timeout=0.5, fetch_attempts=1
        )
        start = time.monotonic()
        with pytest.raises(shardtool.DatasetError, match="1 attempt"):
            next(iter(quick))
        assert time.monotonic() - start < 10.0
        # So does the manifest's fetch that len() and state_dict() make without a reader.
        start = time.monotonic()
        stalled = shardtool.Loader(
            url + "stall/", batch_size=4, cache_dir=tmp_path / "cache3", fetch_timeout=0.5, fetch_attempts=1
        )
        with pytest.raises(shardtool.DatasetError, match="1 attempt"):
            len(stalled)
        assert time.monotonic() - start < 10.0
        for bad in (dict(fetch_timeout=0), dict(fetch_attempts=0)):
            with pytest.raises(ValueError):
                shardtool.Loader(url, batch_size=4, **bad)  # type: ignore[arg-type]
    finally:
        release.set()
        server.shutdown()


def test_a_checkpoint_needs_no_server_and_a_lost_shard_is_a_cache_error(served: Path, tmp_path: Path) -> None:
    ds = served / "ds"
    shardtool.pack(SAMPLE, ds, resize="crop:16x16", shard_samples=8, jobs=2)
    url = _url(served, "ds/")
    opts = dict(batch_size=4, seed=1, output="numpy", cache_dir=tmp_path / "cache", fetch_attempts=1)
    loader = shardtool.Loader(url, **opts)
    it = iter(loader)
    head = [k for _ in range(3) for k in next(it)["key"]]
    # The server has the dataset no more: the position is still saved (it fetched the manifest
    # again).
    away = served / "away"
    ds.rename(away)
    state = loader.state_dict()
    assert state["samples"] == 12 and state["reader"] is not None
    loader.close()
    away.rename(ds)
    resumed = shardtool.Loader(url, **opts)
    resumed.load_state_dict(state)
    full = [k for b in shardtool.Loader(url, **opts) for k in b["key"]]
    assert head + [k for b in resumed for k in b["key"]] == full
    # A shard the server lacks is a cache error, as a manifest it lacks is.
    manifest = json.loads((ds / "manifest.json").read_text())
    (ds / manifest["shards"][2]["file"]).unlink()
    opts["cache_dir"] = tmp_path / "cache2"
    with pytest.raises(shardtool.CacheError, match="could not be opened"):
        for _ in shardtool.Loader(url, **opts):
            pass


def test_prefetch_shards_and_fetch_concurrency_reach_the_cache(served: Path, tmp_path: Path) -> None:
    ds = served / "ds"
    shardtool.pack(SAMPLE, ds, resize="crop:16x16", shard_samples=8)
    url = _url(served, "ds/")
    shards = len(json.loads((ds / "manifest.json").read_text())["shards"])
    # Nothing fetched ahead: each shard is fetched when it is opened, so none is a hit.
    loader = shardtool.Loader(
        url, batch_size=4, output="numpy", cache_dir=tmp_path / "c", prefetch_shards=0, fetch_concurrency=1
    )
    keys = [k for b in loader for k in b["key"]]
    assert len(keys) == len(set(keys)) == samples(ds)
    cache = loader.metrics()["cache"]
    assert (cache["misses"], cache["hits"]) == (shards, 0), cache
    # A pass read to its end lets its reader go (fetch threads and connections), though the
    # loader lives on; its position is kept. Counted after a first remote pass, which may start
    # a thread the process keeps.
    assert loader._reader is None and loader.state_dict()["samples"] == samples(ds)
    tasks = lambda: len(os.listdir("/proc/self/task"))  # noqa: E731
    before = tasks()
    kept = [shardtool.Loader(url, batch_size=4, output="numpy", cache_dir=tmp_path / "k") for _ in range(3)]
    for other in kept:
        assert sum(len(b["key"]) for b in other) == samples(ds)
    for _ in range(100):
        if tasks() <= before:
            break
        time.sleep(0.01)
    assert tasks() <= before, (before, tasks())
    with pytest.raises(ValueError, match="fetch_concurrency"):
        shardtool.Loader(url, batch_size=4, fetch_concurrency=0)


def test_len_and_states_follow_a_dataset_packed_again_on_the_server(served: Path, tmp_path: Path) -> None:
    ds = served / "ds"
    shardtool.pack(SAMPLE, ds, resize="crop:8x8", shard_samples=8)
    def make() -> shardtool.Loader:
        return shardtool.Loader(_url(served, "ds/"), batch_size=4, output="numpy", cache_dir=tmp_path / "c")

    loader, beside, third = make(), make(), make()
    assert len(loader) == len(beside) == len(third) == -(-samples(ds) // 4) == len(list(loader))
    # Packed again on the server with half the images: the next pass reads it, and len() and
    # a state saved in it follow, rather than the first plan.
    half = tmp_path / "half"
    for c in sorted(SAMPLE.iterdir())[:2]:
        shutil.copytree(c, half / c.name)
    shardtool.pack(half, ds, resize="crop:8x8", shard_samples=8, overwrite=True)
    loader.set_epoch(1)
    it = iter(loader)
    next(it)
    state = loader.state_dict()
    assert len(loader) == -(-samples(ds) // 4)
    loader.load_state_dict(state)
    assert sum(len(b["key"]) for b in loader) == samples(ds) - 4
    # Loaders planned before that never iterate here (their passes run in DataLoader workers)
    # follow too: at set_epoch, and when given a state of the new dataset.
    beside.set_epoch(1)
    assert len(beside) == len(loader)
    third.load_state_dict(state)
    assert len(third) == len(loader)


def test_a_misspelt_column_of_a_remote_parquet_input_leaves_the_earlier_dataset(served: Path, tmp_path: Path) -> None:
    # Remote inputs are staged in the output: the earlier dataset there is cleared only once
    # they are listed, so a usage error leaves it (it was deleted first).
    import io

    import pyarrow as pa
    import pyarrow.parquet as pq
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (16, 12), (9, 80, 200)).save(buf, "PNG")
    table = pa.table({"image": [{"bytes": buf.getvalue(), "path": f"{i}.png"} for i in range(3)], "label": [0, 1, 0]})
    pq.write_table(table, served / "t.parquet")
    url = _url(served, "t.parquet")
    out = tmp_path / "ds"
    shardtool.pack(url, out)
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    # Nor is the copy staged for it left beside it; a partitioned pack plans the same way.
    for shard_samples in (None, 2):
        with pytest.raises(ValueError, match='no column "lable"'):
            shardtool.pack(url, out, overwrite=True, label_column="lable", shard_samples=shard_samples)
        assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    for shard_samples in (None, 2):
        m = shardtool.pack(url, out, overwrite=True, resize="shorter:6", shard_samples=shard_samples)["manifest"]
        assert m["inputs"]["packed"] == 3
        assert not [p for p in out.iterdir() if p.name.startswith(".")]


def test_verify_fetches_again_a_cached_shard_damaged_in_place(served: Path, tmp_path: Path) -> None:
    # Bytes damaged in the cache with the file's size and time kept (bit rot) pass the stamp a
    # reader trusts; verify hashes the cached copies, fetches that one again and does not blame
    # the server.
    import os

    ds = served / "ds"
    shardtool.pack(SAMPLE, ds, resize="crop:16x16", shard_samples=8)
    url, cache = _url(served, "ds/"), tmp_path / "cache"
    first = shardtool.verify(url, cache_dir=cache)
    assert first["ok"] and first["cache_repaired"] == 0, first
    cached = sorted(cache.glob("*/shards/shard-000002.tar"))
    assert len(cached) == 1, cached
    st = cached[0].stat()
    data = bytearray(cached[0].read_bytes())
    data[5000:5016] = bytes(b ^ 0xFF for b in data[5000:5016])
    cached[0].write_bytes(bytes(data))
    os.utime(cached[0], ns=(st.st_atime_ns, st.st_mtime_ns))
    report = shardtool.verify(url, cache_dir=cache)
    assert report["ok"], report["problems"]
    assert report["cache_repaired"] == 1
    assert cached[0].read_bytes() == (ds / "shard-000002.tar").read_bytes()
    assert "cache_repaired" not in shardtool.verify(ds)


def test_shards_served_from_the_output_itself_are_not_cleared_by_overwrite(served: Path, tmp_path: Path) -> None:
    # Shards of a pack stopped before its manifest (its errors.jsonl beside them), served by
    # URL and packed into their own folder: the fetched copies match the files there, which
    # --overwrite would delete (a folder holding a manifest was refused already, by comparing
    # the manifests).
    ds = served / "wds"
    shardtool.pack(SAMPLE, ds, resize="crop:8x8", shard_samples=20)
    (ds / "manifest.json").unlink()
    before = {p.name: p.read_bytes() for p in ds.iterdir()}
    pattern = _url(served, "wds/shard-{000000..000002}.tar")
    for shard_samples in (None, 10):
        with pytest.raises(ValueError, match="would take in the input"):
            shardtool.pack(pattern, ds, overwrite=True, shard_samples=shard_samples)
        assert {p.name: p.read_bytes() for p in ds.iterdir()} == before
    # With no mark of a pack beside them they are no pack's: refused before any fetch.
    (ds / "errors.jsonl").unlink()
    with pytest.raises(ValueError, match="which no earlier pack there accounts for"):
        shardtool.pack(pattern, ds, overwrite=True)
    assert len(list(ds.iterdir())) == len(before) - 1
