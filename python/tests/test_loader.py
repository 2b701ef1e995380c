"""The batch dict contract for tar and packed datasets, in every output kind."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Dict, Optional, Tuple

import numpy as np
import pytest
import torch

import shardtool
from conftest import all_keys, samples


@pytest.mark.parametrize("name,shape", [("tar", (24, 32, 3)), ("packed", (16, 16, 3))])
def test_torch_dict_contract_fixed_shapes(datasets: Dict[str, Path], name: str, shape: tuple) -> None:
    path = datasets[name]
    n = samples(path)
    loader = shardtool.Loader(path, batch_size=8, seed=3, workers=2)
    batches = list(loader)
    assert len(batches) == len(loader) == -(-n // 8)
    seen = []
    for i, b in enumerate(batches):
        assert set(b) == {"image", "label", "key", "epoch", "index"}
        img, label = b["image"], b["label"]
        assert isinstance(img, torch.Tensor) and img.dtype == torch.uint8
        assert tuple(img.shape[1:]) == shape and img.shape[0] == len(b["key"])
        assert img.is_contiguous()
        assert isinstance(label, torch.Tensor) and label.dtype == torch.int64
        assert label.shape == (len(b["key"]),)
        assert all(isinstance(k, str) for k in b["key"])
        assert b["epoch"] == 0 and b["index"] == i
        # Real pixels, not an untouched buffer.
        assert int(img.max()) > 0
        seen.extend(b["key"])
    assert len(seen) == len(set(seen)) == n
    assert sorted(seen) == sorted(all_keys(path))


def test_numpy_and_dlpack_outputs(datasets: Dict[str, Path]) -> None:
    path = datasets["packed"]
    as_np = next(iter(shardtool.Loader(path, batch_size=4, seed=1, output="numpy")))
    assert isinstance(as_np["image"], np.ndarray) and as_np["image"].dtype == np.uint8
    assert as_np["image"].shape == (4, 16, 16, 3)
    assert as_np["label"].dtype == np.int64
    raw = next(iter(shardtool.Loader(path, batch_size=4, seed=1, output="dlpack")))
    t = raw["image"]
    assert hasattr(t, "__dlpack__") and t.__dlpack_device__() == (1, 0)
    assert t.shape == [4, 16, 16, 3] and t.dtype == "uint8"
    # The same seed gives the same batch whatever the output kind.
    assert raw["key"] == as_np["key"]
    np.testing.assert_array_equal(np.from_dlpack(t), as_np["image"])
    np.testing.assert_array_equal(torch.from_dlpack(raw["label"]).numpy(), as_np["label"])


def test_variable_shapes_give_lists(datasets: Dict[str, Path]) -> None:
    path = datasets["tar_var"]
    shapes = set()
    for b in shardtool.Loader(path, batch_size=5, seed=2):
        img = b["image"]
        if isinstance(img, list):
            assert len(img) == len(b["key"])
            for t in img:
                assert t.dtype == torch.uint8 and t.ndim == 3 and t.shape[2] == 3
                assert min(t.shape[0], t.shape[1]) == 20
                shapes.add(tuple(t.shape))
        else:
            shapes.add(tuple(img.shape[1:]))
    assert len(shapes) > 1


def test_encoded_records_without_decode(datasets: Dict[str, Path]) -> None:
    b = next(iter(shardtool.Loader(datasets["tar"], batch_size=3, decode=False, output="numpy")))
    assert isinstance(b["image"], list) and len(b["image"]) == 3
    for a in b["image"]:
        assert a.ndim == 1 and a.dtype == np.uint8
        assert bytes(a[:2]) in (b"\xff\xd8", b"\x89P")  # JPEG or PNG magic


def test_seed_epoch_and_set_epoch_determine_the_order(datasets: Dict[str, Path]) -> None:
    path = datasets["tar"]

    def keys(loader: shardtool.Loader) -> list:
        return [k for b in loader for k in b["key"]]

    loader = shardtool.Loader(path, batch_size=4, seed=5, output="numpy")
    first = keys(loader)
    assert keys(shardtool.Loader(path, batch_size=4, seed=5, output="numpy", workers=1)) == first
    loader.set_epoch(1)
    assert loader.epoch == 1
    second = keys(loader)
    assert second != first and sorted(second) == sorted(first)
    assert keys(shardtool.Loader(path, batch_size=4, seed=5, epoch=1, output="numpy")) == second
    assert keys(shardtool.Loader(path, batch_size=4, shuffle=False, output="numpy")) == all_keys(path)


def test_out_of_order_delivery_yields_every_batch(datasets: Dict[str, Path]) -> None:
    path = datasets["packed"]
    loader = shardtool.Loader(path, batch_size=3, seed=4, in_order=False, workers=2, output="numpy")
    got = [b["index"] for b in loader]
    assert sorted(got) == list(range(len(loader)))


def test_a_second_pass_at_the_same_epoch_warns_once_to_call_set_epoch(datasets: Dict[str, Path]) -> None:
    import warnings

    path = datasets["tar"]
    loader = shardtool.Loader(path, batch_size=8, seed=5, output="numpy")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        # A peek (a pass left early) is no epoch read twice.
        next(iter(loader))
        first = [k for b in loader for k in b["key"]]
    with pytest.warns(UserWarning, match=r"reads epoch 0 again.*set_epoch"):
        again = [k for b in loader for k in b["key"]]
    assert again == first
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        list(loader)  # warned once per Loader
        loader.set_epoch(1)
        list(loader)
        unshuffled = shardtool.Loader(path, batch_size=8, shuffle=False, output="numpy")
        list(unshuffled)
        list(unshuffled)
        # Setting the epoch just read reads it again, as asked: no warning.
        asked = shardtool.Loader(path, batch_size=8, seed=5, output="numpy")
        for _ in range(2):
            asked.set_epoch(0)
            assert [k for b in asked for k in b["key"]] == first
        # Set during a pass of that epoch, it is read again as asked too.
        asked.set_epoch(0)
        it = iter(asked)
        next(it)
        asked.set_epoch(0)
        list(it)
        list(asked)


def test_drop_last_gives_only_full_batches_and_says_so_in_len(datasets: Dict[str, Path]) -> None:
    path = datasets["packed"]
    total = samples(path)
    full = shardtool.Loader(path, batch_size=8, seed=3, output="numpy")
    dropped = shardtool.Loader(path, batch_size=8, seed=3, output="numpy", drop_last=True)
    assert total % 8 != 0, "the test needs a short last batch"
    assert len(full) == -(-total // 8) and len(dropped) == total // 8
    kept = [b["key"] for b in dropped]
    assert len(kept) == len(dropped) and all(len(k) == 8 for k in kept)
    # The same order, without the short last batch.
    assert kept == [b["key"] for b in full][: len(dropped)]
    with pytest.raises(ValueError, match="drop-last leaves no batch"):
        list(shardtool.Loader(path, batch_size=total + 1, output="numpy", drop_last=True))
    with pytest.raises(TypeError, match="drop_last must be True or False"):
        shardtool.Loader(path, batch_size=8, drop_last=1)  # type: ignore[arg-type]


def test_reader_threads_are_shared_among_the_ranks_and_workers_of_a_node(
    datasets: Dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    import os

    cores = len(os.sched_getaffinity(0))

    def threads(split: Optional[Tuple[int, int]], workers: Optional[int] = None) -> int:
        # batch_size 1: more batches than cores, so the count is not capped by the work.
        loader = shardtool.Loader(datasets["tar"], batch_size=1, workers=workers)
        loader._split = split  # as a DataLoader worker sets it
        it = iter(loader)  # held: a pass dropped unstarted stops its reader  # noqa: F841
        try:
            assert loader._reader is not None
            return loader._reader.workers
        finally:
            loader.close()

    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    assert threads(None) == cores
    assert threads((0, 1)) == cores
    assert threads((1, 2)) == max(1, cores // 2)
    assert threads((0, 2), workers=3) == 3
    monkeypatch.setenv("LOCAL_WORLD_SIZE", str(cores))
    assert threads(None) == 1
    assert threads((0, 1), workers=2) == 2
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "not a number")
    assert threads(None) == cores


def test_an_iterator_dropped_before_its_first_batch_stops_its_reader(datasets: Dict[str, Path]) -> None:
    import os

    def threads() -> int:
        return len(os.listdir("/proc/self/task"))

    loader = shardtool.Loader(datasets["tar"], batch_size=4, workers=3, output="numpy")
    before = threads()
    it = iter(loader)
    assert loader._reader is not None and threads() > before
    del it
    # Its threads stop at once (they held cache room and shard locks until the next iter()).
    assert loader._reader is None
    for _ in range(100):
        if threads() <= before:
            break
        import time

        time.sleep(0.01)
    assert threads() <= before
    # The loader still reads a whole epoch.
    assert sum(len(b["key"]) for b in loader) == samples(datasets["tar"])


def test_len_follows_a_dataset_packed_again_between_epochs(tmp_path: Path) -> None:
    from conftest import SAMPLE

    import shutil

    from urllib.parse import quote

    out = tmp_path / "sp ace" / "ds"
    shardtool.pack(SAMPLE, out, resize="crop:8x8")
    # By path and by file:// URLs (escaped, naming this host) alike.
    urls = (out, f"file://{quote(str(out))}", f"file://localhost{quote(str(out))}")
    loaders = [shardtool.Loader(d, batch_size=4, output="numpy") for d in urls]
    for loader in loaders:
        assert len(loader) == -(-samples(out) // 4)
    # Packed again with half the images: the next epoch reads the new one, and len() says so.
    half = tmp_path / "half"
    for c in sorted(SAMPLE.iterdir())[:2]:
        shutil.copytree(c, half / c.name)
    shardtool.pack(half, out, resize="crop:8x8", overwrite=True)
    for loader in loaders:
        assert len(loader) == -(-samples(out) // 4) == len(list(loader))


def test_the_torch_and_ray_modules_are_reached_from_the_package() -> None:
    # As the README writes it: `import shardtool`, then `shardtool.torch.IterableDataset`.
    code = (
        "import shardtool; print(shardtool.torch.IterableDataset.__name__); "
        "print(hasattr(shardtool, 'nope'))"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["IterableDataset", "False"]
    # dir() shows the public names and the two modules, not the typing helpers imported there.
    shown = dir(shardtool)
    assert {"Loader", "pack", "verify", "torch", "ray"} <= set(shown), shown
    assert not {"List", "TYPE_CHECKING"} & set(shown), shown
