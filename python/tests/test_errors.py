"""Bad arguments and bad data raise the documented exceptions, never crash the interpreter."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Dict

import numpy as np
import pytest

import shardtool
from conftest import SAMPLE


def test_bad_arguments(datasets: Dict[str, Path], tmp_path: Path) -> None:
    p = datasets["tar"]
    with pytest.raises(FileNotFoundError):
        shardtool.Loader(tmp_path / "missing", batch_size=2)
    # A folder of images, or a shard, is refused when the Loader is made, not at its first use.
    with pytest.raises(FileNotFoundError, match="holds no manifest.json"):
        shardtool.Loader(SAMPLE, batch_size=2)
    with pytest.raises(ValueError, match="give the dataset folder"):
        shardtool.Loader(next(p.glob("shard-*")), batch_size=2)
    with pytest.raises(TypeError):
        shardtool.Loader(p, batch_size="8")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        shardtool.Loader(p, batch_size=True)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        shardtool.Loader(42, batch_size=2)  # type: ignore[arg-type]
    # Paths that are no paths, or empty, are refused naming the argument.
    for call, name in (
        (lambda: shardtool.Loader("", batch_size=2), "dataset"),
        (lambda: shardtool.Loader(p, batch_size=2, cache_dir=3), "cache_dir"),  # type: ignore[arg-type]
        (lambda: shardtool.verify(p, cache_dir=b"x"), "cache_dir"),  # type: ignore[arg-type]
        (lambda: shardtool.inspect(""), "path"),
        (lambda: shardtool.status(""), "output"),
        (lambda: shardtool.merge(""), "output"),
        (lambda: shardtool.pack_part("", 0, 1), "output"),
        (lambda: shardtool.pack(p, ""), "output"),
    ):
        with pytest.raises((TypeError, ValueError), match=f"^{name} "):
            call()
    with pytest.raises(ValueError):
        shardtool.Loader(p, batch_size=0)
    with pytest.raises(ValueError):
        shardtool.Loader(p, batch_size=2, seed=-1)
    # Past what the reader takes (u64): a ValueError naming the argument, not an OverflowError.
    for name in ("seed", "epoch"):
        with pytest.raises(ValueError, match=name):
            shardtool.Loader(p, batch_size=2, **{name: 2**64})
    for name, value in (("batch_size", 2**64), ("workers", 2**64), ("shuffle_buffer", 2**64),
                        ("interleave", 2**64), ("world_size", 2**32)):
        with pytest.raises(ValueError, match=name):
            shardtool.Loader(p, **{"batch_size": 2, "rank": 0, "world_size": 1, name: value})
    # numpy's integers are integers (a rank or epoch computed with numpy, say).
    import numpy as np

    numbered = shardtool.Loader(p, batch_size=np.int64(4), seed=np.uint64(3), epoch=np.int32(0),
                                rank=np.int64(0), world_size=np.int64(1), output="numpy",
                                cache_limit=np.int64(1 << 30), prefetch=np.int16(2),
                                fetch_concurrency=np.int8(2), fetch_attempts=np.uint8(3),
                                fetch_timeout=np.int64(30))
    numbered.set_epoch(np.int64(1))
    plain = shardtool.Loader(p, batch_size=4, seed=3, epoch=1, rank=0, world_size=1, output="numpy")
    assert [b["key"] for b in numbered] == [b["key"] for b in plain]
    assert numbered.state_dict() == plain.state_dict()
    with pytest.raises(ValueError, match="cache_limit"):
        shardtool.Loader(p, batch_size=2, cache_limit=np.int64(0))
    with pytest.raises(TypeError):
        shardtool.Loader(p, batch_size=np.float64(4))  # type: ignore[arg-type]
    # An array has __index__ (so a type checker takes it), but is an int only as one integer.
    for name, value in (("batch_size", np.zeros(3)), ("cache_limit", np.array([4, 5]))):
        with pytest.raises(TypeError, match=f"{name} must be an int, not ndarray"):
            shardtool.Loader(p, **{"batch_size": 2, name: value})
    with pytest.raises(TypeError, match="decode must be True or False, not None"):
        shardtool.verify(p, None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="at most 86400 seconds"):
        shardtool.Loader(p, batch_size=2, fetch_timeout=86400.5)
    # More ranks than samples, dropping the remainder: len() says so as iter() does.
    crowded = shardtool.Loader(p, batch_size=4, rank=0, world_size=64)
    for call in (len, iter):
        with pytest.raises(ValueError, match="leave each rank none"):
            call(crowded)
    # The largest seed the CLI takes packs from Python too (the same dataset, reproducible).
    m = shardtool.pack(SAMPLE, tmp_path / "seeded", resize="shorter:16", seed=2**64 - 1)["manifest"]
    assert m["pack"]["seed"] == 2**64 - 1
    for jobs in (0, -1):
        with pytest.raises(ValueError, match="jobs"):
            shardtool.verify(p, jobs=jobs)
        with pytest.raises(ValueError, match="jobs"):
            shardtool.inspect(p, jobs=jobs)
    with pytest.raises(ValueError):
        shardtool.Loader(p, batch_size=2, rank=2, world_size=2)
    with pytest.raises(ValueError):
        shardtool.Loader(p, batch_size=2, rank=0)
    with pytest.raises(ValueError):
        shardtool.Loader(p, batch_size=2, output="jax")
    # decode=False says transform="none": both together agree.
    assert shardtool.Loader(p, batch_size=2, decode=False, transform="none")._transform == "none"
    with pytest.raises(ValueError, match="conflicts"):
        shardtool.Loader(p, batch_size=2, decode=False, transform="decode")
    with pytest.raises(ValueError):
        shardtool.Loader(p, batch_size=2, remainder="keep")
    with pytest.raises(ValueError, match="^cache_limit: "):
        shardtool.Loader(p, batch_size=2, cache_limit="lots")
    # A bad value names the keyword it came in.
    with pytest.raises(ValueError, match="compress: zstd level 23 is outside"):
        shardtool.pack(SAMPLE, tmp_path / "z", compress="zstd:23")
    with pytest.raises(TypeError):
        shardtool.Loader(p, batch_size=2, shuffle="yes")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        shardtool.Loader(p, batch_size=2, no_such_option=1)  # type: ignore[call-arg]
    with pytest.raises(ValueError):
        shardtool.Loader(p, batch_size=2, device="tpu")
    with pytest.raises(TypeError):
        shardtool.pack(p, tmp_path / "o", no_such_option=1)
    with pytest.raises(ValueError):
        shardtool.pack(p, tmp_path / "o", format="zip")
    with pytest.raises(FileNotFoundError):
        shardtool.pack(tmp_path / "missing", tmp_path / "o")
    with pytest.raises(FileNotFoundError):
        shardtool.verify(tmp_path / "missing")
    # Integers out of range name their option (not a bare OverflowError).
    # numpy's integers too; jobs is bounded (a million threads were started).
    for bad in (
        dict(seed=-1), dict(shard_samples=-1), dict(quality=300), dict(jobs=0), dict(jobs=10**6),
        dict(seed=np.int64(-1)), dict(quality=np.int64(-5)), dict(max_errors=np.int64(-1)),
        dict(max_pixels=np.int64(0)), dict(shard_size=np.int64(0)),
    ):
        with pytest.raises(ValueError, match=next(iter(bad))):
            shardtool.pack(p, tmp_path / "o", **bad)
    with pytest.raises(ValueError, match="index"):
        shardtool.pack_part(tmp_path / "o", -1, 3)
    with pytest.raises(ValueError, match="jobs must be <= 4096"):
        shardtool.pack_part(tmp_path / "o", 0, 3, jobs=5000)
    # A numpy integer, and None for an option's default, are taken as given.
    report = shardtool.pack(
        p, tmp_path / "np", shard_size=np.int64(1 << 20), jobs=np.int32(2), seed=np.uint64(3), format=None
    )
    assert report["manifest"]["inputs"]["packed"] > 0 and report["manifest"]["pack"]["seed"] == 3
    # prefetch counts whole batches: a byte count would have allocated hundreds of gigabytes.
    with pytest.raises(ValueError, match="prefetch must be <= 1024"):
        shardtool.Loader(p, batch_size=2, prefetch=256 << 20)


def test_without_torch_the_default_output_is_refused_at_once_naming_numpy(datasets: Dict[str, Path]) -> None:
    # A JAX user's environment: torch cannot be imported.
    script = (
        "import sys; sys.modules['torch'] = None\n"
        "import shardtool\n"
        "try:\n"
        f"    shardtool.Loader({str(datasets['tar'])!r}, batch_size=4)\n"
        "except ValueError as e:\n"
        "    print(e)\n"
        f"b = next(iter(shardtool.Loader({str(datasets['tar'])!r}, batch_size=4, output='numpy')))\n"
        "print(type(b['image']).__module__)\n"
    )
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert 'output="numpy"' in r.stdout and "numpy\n" in r.stdout, r.stdout


def test_a_relative_dataset_path_is_the_folder_it_was_checked_in(
    datasets: Dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(datasets["tar"].parent)
    loader = shardtool.Loader(datasets["tar"].name, batch_size=4, output="numpy")
    # Elsewhere, and a folder of the same name there holding another dataset.
    other = tmp_path / datasets["tar"].name
    shardtool.pack(SAMPLE, other, resize="crop:8x8")
    monkeypatch.chdir(tmp_path)
    first = next(iter(loader))
    assert first["image"].shape[1:] == next(iter(shardtool.Loader(datasets["tar"], batch_size=4, output="numpy")))["image"].shape[1:]
    assert first["image"].shape[1:] != (8, 8, 3)


def test_dlpack_batches_cannot_leave_a_dataloader_worker(datasets: Dict[str, Path]) -> None:
    import torch.utils.data

    import shardtool.torch

    loader = shardtool.Loader(datasets["tar"], batch_size=8, output="dlpack")
    dl = torch.utils.data.DataLoader(shardtool.torch.IterableDataset(loader), batch_size=None, num_workers=1)
    with pytest.raises(TypeError, match="dlpack"):
        next(iter(dl))


def test_broken_manifest_raises_manifest_error(tmp_path: Path) -> None:
    (tmp_path / "manifest.json").write_text("{not json")
    with pytest.raises(shardtool.ManifestError):
        list(shardtool.Loader(tmp_path, batch_size=2))
    assert issubclass(shardtool.ManifestError, shardtool.DatasetError)


def test_corrupt_shard_raises_dataset_error(datasets: Dict[str, Path], tmp_path: Path) -> None:
    copy = tmp_path / "ds"
    shutil.copytree(datasets["packed"], copy)
    shard = copy / json.loads((copy / "manifest.json").read_text())["shards"][0]["file"]
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0xFF
    shard.write_bytes(bytes(data[: len(data) - 100]))
    with pytest.raises(shardtool.DatasetError):
        list(shardtool.Loader(copy, batch_size=4, shuffle=False, output="numpy"))
    report = shardtool.verify(copy)
    assert report["ok"] is False and report["problems"]
    # With skip_corrupt the pass completes without the damaged shard, and metrics() says what
    # was left out and why (also after close()).
    first = json.loads((copy / "manifest.json").read_text())["shards"][0]
    loader = shardtool.Loader(copy, batch_size=4, shuffle=False, output="numpy", skip_corrupt=True)
    assert loader.metrics() == {}
    read = sum(len(b["key"]) for b in loader)
    m = loader.metrics()
    assert m["lost_samples"] + m["corrupt_skipped"] > 0
    assert read + m["lost_samples"] + m["corrupt_skipped"] == sum(
        s["samples"] for s in json.loads((copy / "manifest.json").read_text())["shards"]
    )
    assert [name for name, _ in m["lost_shards"]] == ([first["file"]] if m["lost_samples"] else [])
    # Times are seconds, as floats.
    assert isinstance(m["wait_p99_s"], float) and 0 <= m["wait_p50_s"] <= m["wait_p99_s"]
    assert 0 < m["elapsed_s"] < 600
    loader.close()
    assert loader.metrics()["samples"] == read


def test_a_batch_whose_records_were_all_skipped_is_an_empty_array_where_images_are_decoded(
    tmp_path: Path,
) -> None:
    # Shard 0 gone: the first two batches of 4 have nothing. Decoded, they are [0, 0, 0, 3]
    # arrays, usable as the stacked ones are (`.permute`); encoded, lists as always.
    ds = tmp_path / "ds"
    shardtool.pack(SAMPLE, ds, resize="crop:32x32", shard_samples=8)
    (ds / json.loads((ds / "manifest.json").read_text())["shards"][0]["file"]).unlink()
    for output in ("numpy", "torch"):
        batches = list(shardtool.Loader(ds, batch_size=4, shuffle=False, output=output, skip_corrupt=True))
        assert [len(b["key"]) for b in batches[:3]] == [0, 0, 4]
        assert tuple(batches[0]["image"].shape) == (0, 0, 0, 3)
        assert tuple(batches[2]["image"].shape) == (4, 32, 32, 3)
        if output == "torch":
            assert tuple(batches[0]["image"].permute(0, 3, 1, 2).shape) == (0, 3, 0, 0)
    encoded = list(shardtool.Loader(ds, batch_size=4, shuffle=False, decode=False, skip_corrupt=True))
    assert encoded[0]["image"] == [] and len(encoded[2]["image"]) == 4
    # Packed shards hold pixels: their records as stored are arrays too.
    packed = tmp_path / "packed"
    shardtool.pack(SAMPLE, packed, resize="crop:32x32", shard_samples=8, format="packed")
    (packed / json.loads((packed / "manifest.json").read_text())["shards"][0]["file"]).unlink()
    raw = list(shardtool.Loader(packed, batch_size=4, shuffle=False, decode=False, output="numpy", skip_corrupt=True))
    assert tuple(raw[0]["image"].shape) == (0, 0, 0, 3) and tuple(raw[2]["image"].shape) == (4, 32, 32, 3)


def test_the_loaders_type_hints_resolve_at_run_time() -> None:
    # Config parsers (jsonargparse, LightningCLI) resolve them; `torch.device` under
    # TYPE_CHECKING alone raised NameError.
    import typing

    hints = typing.get_type_hints(shardtool.Loader.__init__)
    assert str in typing.get_args(hints["device"])


def test_an_image_whose_samples_the_decoder_cannot_read_is_named_as_such(tmp_path: Path) -> None:
    # A float TIFF (as scientific imaging writes): the decoder knows its pixels only as
    # "Unknown(32)"; the error says what that means and what would do.
    from PIL import Image

    folder = tmp_path / "in" / "a"
    folder.mkdir(parents=True)
    Image.fromarray(np.linspace(0, 1, 64, dtype=np.float32).reshape(8, 8)).save(folder / "float.tif")
    Image.fromarray(np.zeros((8, 8, 3), np.uint8)).save(folder / "ok.png")
    shardtool.pack(tmp_path / "in", tmp_path / "out", resize="none")
    lines = [json.loads(x) for x in (tmp_path / "out" / "errors.jsonl").read_text().splitlines()]
    assert [(x["path"], x["kind"]) for x in lines] == [("a/float.tif", "unsupported_format")], lines
    message = lines[0]["message"]
    assert "32-bit pixels" in message and "8 or 16 bits per channel" in message, message
