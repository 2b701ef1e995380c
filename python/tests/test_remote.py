"""Datasets served by a real HTTP server (lighttpd on loopback): the loader reads them through
the shard cache and ``verify`` checks them there, naming shards as the server stores them."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
from pathlib import Path
from typing import Iterator

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
    report = shardtool.verify(url, cache_dir=tmp_path / "fresh")
    assert not report["ok"]
    assert [(p["kind"], p["shard"]) for p in report["problems"]] == [("fetch_failed", stored)]

    # Too small a cache for the whole dataset is an error before anything is fetched.
    with pytest.raises(shardtool.CacheError):
        shardtool.verify(url, cache_dir=tmp_path / "small", cache_limit=1000)
    # A shard URL is not a dataset.
    with pytest.raises(shardtool.DatasetError, match="is a shard"):
        shardtool.verify(_url(served, f"ds/{stored}"))
