"""Carried fields from Python: ``Loader(fields=[...])`` on tar and packed shards, each value with its
own sample (in-process and through DataLoader worker processes), the Python type of each field,
unlabelled samples, and clear errors for bad names."""

from __future__ import annotations

import io
import json
import shutil
import struct
import tarfile
import zlib
from pathlib import Path
from typing import Any, Dict, List, Optional

import pytest
import torch.utils.data

import shardtool
import shardtool.torch
from conftest import samples


def caption(key: str) -> Optional[str]:
    """About two samples in three have a caption (with a tab and non-ASCII text)."""
    return None if zlib.crc32(key.encode()) % 3 == 0 else f"a photo of {key}\twith ünïcödé"


def blob(key: str) -> bytes:
    """A binary field that is not UTF-8."""
    return b"\x93NUMPY" + key.encode() + b"\xff"


def unlabelled(key: str) -> bool:
    return zlib.crc32(key.encode()) % 4 == 0


def _rewrite_manifest(dst: Path, edit: Any) -> None:
    """Applies ``edit`` to the manifest and sets each shard's size from its file. Checksums are
    left as they were: the reader does not check them for local datasets (``verify`` does)."""
    m = json.loads((dst / "manifest.json").read_text())
    for s in m["shards"]:
        s["bytes"] = (dst / s["file"]).stat().st_size
    m["totals"]["bytes"] = sum(s["bytes"] for s in m["shards"])
    edit(m)
    (dst / "manifest.json").write_text(json.dumps(m, indent=2) + "\n")


def _captioned_tar(src: Path, dst: Path) -> Path:
    """A copy of a tar dataset whose samples carry ``KEY.txt`` (where ``caption`` gives one) and
    ``KEY.bin``, some without ``KEY.cls`` (unlabelled), as a pack that carries fields lays them
    out."""
    shutil.copytree(src, dst)
    for shard in sorted(dst.glob("*.tar")):
        members = []
        with tarfile.open(shard) as t:
            for info in t.getmembers():
                data = t.extractfile(info).read()  # type: ignore[union-attr]
                members.append((info.name, data))
        with tarfile.open(shard, "w", format=tarfile.USTAR_FORMAT) as out:
            def add(name: str, data: bytes) -> None:
                info = tarfile.TarInfo(name)
                info.size = len(data)
                out.addfile(info, io.BytesIO(data))

            for name, data in members:
                key, _, field = name.partition(".")
                if field == "cls" and unlabelled(key):
                    continue
                add(name, data)
                if field == "json":
                    add(f"{key}.bin", blob(key))
                    text = caption(key)
                    if text is not None:
                        add(f"{key}.txt", text.encode())

    def edit(m: Dict[str, Any]) -> None:
        m["fields"] = sorted(set(m["fields"]) - {"cls"} | {"bin"})
        m["optional_fields"] = ["cls", "txt"]

    _rewrite_manifest(dst, edit)
    return dst


def _captioned_packed(src: Path, dst: Path) -> Path:
    """A copy of a packed dataset whose records carry their caption in the sample object's
    ``fields`` member (``formats/packed/FORMAT.md``): only the header changes, re-padded so the
    data buffer still starts on a 4096-byte boundary."""
    shutil.copytree(src, dst)
    for shard in sorted(dst.glob("*.safetensors")):
        raw = shard.read_bytes()
        (n,) = struct.unpack("<Q", raw[:8])
        header = json.loads(raw[8 : 8 + n])
        meta = header["__metadata__"]
        records = json.loads(meta["samples"])
        for r in records:
            text = caption(r["key"])
            if text is not None:
                r["fields"] = {"txt": text}
        meta["samples"] = json.dumps(records)
        text_header = json.dumps(header).encode()
        padded = -(-(8 + len(text_header)) // 4096) * 4096 - 8
        shard.write_bytes(struct.pack("<Q", padded) + text_header.ljust(padded, b" ") + raw[8 + n :])

    def edit(m: Dict[str, Any]) -> None:
        m["optional_fields"] = ["txt"]

    _rewrite_manifest(dst, edit)
    return dst


@pytest.fixture(scope="module")
def captioned(datasets: Dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Dict[str, Path]:
    root = tmp_path_factory.mktemp("captioned")
    return {
        "tar": _captioned_tar(datasets["tar"], root / "tar"),
        "packed": _captioned_packed(datasets["packed"], root / "packed"),
    }


def _check_tar_batch(b: Dict[str, Any]) -> None:
    keys: List[str] = b["key"]
    assert [len(b[f]) for f in ("txt", "json", "cls", "bin")] == [len(keys)] * 4
    labels = [int(x) for x in b["label"]]
    for i, k in enumerate(keys):
        assert b["txt"][i] == caption(k), k
        assert isinstance(b["json"][i], dict) and b["json"][i]["key"] == k
        assert b["bin"][i] == blob(k) and isinstance(b["bin"][i], bytes)
        if unlabelled(k):
            assert b["cls"][i] is None and labels[i] == -1, k
        else:
            assert isinstance(b["cls"][i], int) and b["cls"][i] == labels[i] >= 0, k


def test_tar_fields_follow_their_samples(captioned: Dict[str, Path]) -> None:
    path = captioned["tar"]
    loader = shardtool.Loader(
        path, batch_size=5, seed=2, workers=2, in_order=False, output="numpy", fields=["txt", "json", "cls", "bin"]
    )
    keys = []
    for b in loader:
        assert set(b) == {"image", "label", "key", "epoch", "index", "txt", "json", "cls", "bin"}
        _check_tar_batch(b)
        keys.extend(b["key"])
    assert len(keys) == len(set(keys)) == samples(path)
    assert any(caption(k) is None for k in keys) and any(unlabelled(k) for k in keys)


def test_a_json_field_that_does_not_parse_is_skipped_with_skip_corrupt(
    captioned: Dict[str, Path], tmp_path: Path
) -> None:
    copy = tmp_path / "ds"
    shutil.copytree(captioned["tar"], copy)
    shard = sorted(copy.glob("*.tar"))[0]
    with tarfile.open(shard) as t:
        member = next(m for m in t.getmembers() if m.name.endswith(".json"))
    damaged = member.name.split(".")[0]
    data = bytearray(shard.read_bytes())
    data[member.offset_data] = ord("#")
    shard.write_bytes(bytes(data))
    opts: Dict[str, Any] = dict(batch_size=5, seed=2, fields=["json", "txt"])
    with pytest.raises(shardtool.CorruptRecordError, match=f"record {damaged}: its json field"):
        list(shardtool.Loader(copy, output="numpy", **opts))
    whole = [k for b in shardtool.Loader(captioned["tar"], **opts) for k in b["key"]]
    for output in ("numpy", "torch"):
        loader = shardtool.Loader(copy, output=output, skip_corrupt=True, **opts)
        keys = []
        for b in loader:
            assert len(b["image"]) == len(b["label"]) == len(b["json"]) == len(b["txt"]) == len(b["key"])
            assert all(j["key"] == k for j, k in zip(b["json"], b["key"]))
            assert all(t == caption(k) for t, k in zip(b["txt"], b["key"]))
            keys.extend(b["key"])
        # The one record is left out, the others keep their places and their batches.
        assert keys == [k for k in whole if k != damaged]
        assert loader.metrics()["corrupt_skipped"] == 1
    # DLPack batches leave it out too (their arrays, copied, still export DLPack).
    import numpy as np

    got = []
    for b in shardtool.Loader(copy, output="dlpack", skip_corrupt=True, **opts):
        images = b["image"] if isinstance(b["image"], list) else np.from_dlpack(b["image"])
        assert len(images) == np.from_dlpack(b["label"]).shape[0] == len(b["key"])
        got.extend(b["key"])
    assert got == [k for k in whole if k != damaged]
    # JSON nested past Python's recursion limit does not parse either (RecursionError).
    from shardtool._loader import _field_values

    bad: List[int] = []
    assert _field_values("json", [b"{}", b"[" * 100_000], ["a", "b"], bad) == [{}, None] and bad == [1]
    with pytest.raises(shardtool.CorruptRecordError, match="record b: its json field"):
        _field_values("json", [b"{}", b"[" * 100_000], ["a", "b"])
    # What verify refuses is corrupt here too: a json that is no object (or not UTF-8), a txt
    # that is not UTF-8.
    bad = []
    utf16 = '{"a": 1}'.encode("utf-16")
    twice, nested = b'{"a": 1, "a": 2}', b'{"a": {"b": 1, "b": 2}}'
    got = _field_values("json", [b"[1]", b"null", utf16, twice, nested], list("abcde"), bad)
    # A member named twice inside a nested object is the sample's own data, as verify holds.
    assert got == [None, None, None, None, {"a": {"b": 2}}] and bad == [0, 1, 2, 3]
    bad = []
    assert _field_values("txt", [b"ok", b"\xff\xfe\x00abc", None], list("abc"), bad) == ["ok", None, None]
    assert bad == [1]
    with pytest.raises(shardtool.CorruptRecordError, match="record a: its json field does not parse: it is a JSON array, not an object"):
        _field_values("json", [b"[1]"], ["a"])
    with pytest.raises(shardtool.CorruptRecordError, match="record b: its txt field"):
        _field_values("txt", [b"ok", b"\xff\xfe"], ["a", "b"])


def test_fields_through_dataloader_workers(captioned: Dict[str, Path]) -> None:
    path = captioned["tar"]
    opts: Dict[str, Any] = dict(batch_size=4, seed=7, fields=["txt", "json", "cls", "bin"], output="numpy")
    direct = [b["key"] for b in shardtool.Loader(path, **opts)]
    ds = shardtool.torch.IterableDataset(shardtool.Loader(path, **opts))
    dl = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=2)
    got = []
    for b in dl:
        _check_tar_batch(b)
        got.append(b["key"])
    assert got == direct


def test_packed_fields_and_their_metadata_as_json(captioned: Dict[str, Path]) -> None:
    path = captioned["packed"]
    n = 0
    for b in shardtool.Loader(path, batch_size=6, seed=1, fields=["json", "txt"]):
        for i, k in enumerate(b["key"]):
            assert b["txt"][i] == caption(k)
            meta = b["json"][i]
            assert meta["key"] == k and meta["label"] == int(b["label"][i])
            assert "fields" not in meta and meta["width"] == 16
        n += len(b["key"])
    assert n == samples(path)


def test_bad_field_names_are_refused_at_construction(
    datasets: Dict[str, Path], captioned: Dict[str, Path]
) -> None:
    path = captioned["tar"]
    with pytest.raises(TypeError, match="list of field names"):
        shardtool.Loader(path, batch_size=2, fields="txt")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="more than once"):
        shardtool.Loader(path, batch_size=2, fields=["txt", "txt"])
    with pytest.raises(ValueError, match="is the batch's own 'image', always delivered"):
        shardtool.Loader(path, batch_size=2, fields=["image"])
    # A field may be named as the batch's position or epoch: refused for the right reason,
    # naming where it can be read.
    with pytest.raises(ValueError, match="position in the epoch.*read DATASET --fields index"):
        shardtool.Loader(path, batch_size=2, fields=["index"])
    with pytest.raises(ValueError, match=r'no field "caption".*bin, json in every sample and cls, txt in some'):
        shardtool.Loader(path, batch_size=2, fields=["caption"])
    with pytest.raises(ValueError, match="image data"):
        shardtool.Loader(path, batch_size=2, fields=["jpg"])
    # A dataset without captions says which fields it has.
    with pytest.raises(ValueError, match=r'no field "txt".*json in every sample'):
        shardtool.Loader(datasets["packed"], batch_size=2, fields=["txt"])
