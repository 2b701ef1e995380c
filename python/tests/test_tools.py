"""pack, verify and inspect return the CLI's reports as dicts; pack reads the CLI's inputs
(WebDataset shards through brace patterns and globs, Parquet files with chosen columns)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import pytest

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


# Inputs written with the tools users bring them from (webdataset.ShardWriter, pyarrow), by the
# same script the CLI's interop tests use.
MAKE_INPUTS = Path(__file__).resolve().parents[2] / "tests" / "interop" / "make_inputs.py"


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> Tuple[Path, Dict[str, Any]]:
    out = tmp_path_factory.mktemp("inputs")
    subprocess.run([sys.executable, str(MAKE_INPUTS), str(SAMPLE), str(out)], check=True)
    return out, json.loads((out / "expect.json").read_text())


def test_pack_webdataset_through_a_brace_pattern_carries_captions(
    inputs: Tuple[Path, Dict[str, Any]], tmp_path: Path
) -> None:
    root, expect = inputs
    pattern = str(root / "wds" / "shard-{000000..000002}.tar")
    out = tmp_path / "ds"
    summary = shardtool.pack(pattern, out, resize="shorter:32", shard_samples=16, jobs=2)
    m = summary["manifest"]
    assert m["pack"]["input_format"] == "wds"
    assert m["inputs"]["packed"] == len(expect["wds"])
    assert m["optional_fields"] == ["txt"], "every seventh sample has no caption"
    loader = shardtool.Loader(
        out, batch_size=1, shuffle=False, output="numpy", decode=False, fields=["txt"]
    )
    got = {k: t for b in loader for k, t in zip(b["key"], b["txt"])}
    assert got == {k: e["txt"] for k, e in expect["wds"].items()}
    assert sum(t is None for t in got.values()) > 0
    # The same shards as a glob in an os.PathLike: the same dataset.
    again = shardtool.pack(
        root / "wds" / "shard-*.tar", tmp_path / "ds2", resize="shorter:32", shard_samples=16
    )
    assert again["manifest"]["shards"] == m["shards"]


def test_pack_webdataset_json_with_python_nan_is_carried_byte_for_byte(tmp_path: Path) -> None:
    import math

    import webdataset as wds

    # LAION-style metadata through img2dataset: pandas' missing values, written by Python's
    # json as NaN (and webdataset's writer does the same); webdataset reads them back.
    photos = sorted(SAMPLE.rglob("*.jpg"))[:4]
    (tmp_path / "in").mkdir()
    with wds.TarWriter(str(tmp_path / "in" / "00000.tar")) as w:
        for i, p in enumerate(photos):
            meta = {"similarity": math.nan if i % 2 else 0.31, "pwatermark": math.inf, "n": i}
            w.write({"__key__": f"{i:05d}", "jpg": p.read_bytes(), "json": meta})
    raw = {k: m["json"] for k, m in _members(tmp_path / "in").items()}
    assert any(b"NaN" in j for j in raw.values())
    out = tmp_path / "out"
    summary = shardtool.pack(tmp_path / "in", out, resize="shorter:16")
    assert summary["manifest"]["inputs"]["packed"] == len(photos), summary["errors"]
    assert shardtool.verify(out)["ok"]
    got = {json.loads(m["json"])["n"]: m["json"] for m in _members(out).values()}
    assert sorted(got.values()) == sorted(raw.values())


def test_pack_numbers_samples_by_position_with_keys_index(
    inputs: Tuple[Path, Dict[str, Any]], tmp_path: Path
) -> None:
    root, expect = inputs
    shards = str(root / "wds" / "shard-*.tar")
    summary = shardtool.pack(shards, tmp_path / "ds", resize="shorter:32", keys="index")
    m = summary["manifest"]
    assert m["pack"]["keys"] == "index"
    assert m["inputs"]["packed"] == len(expect["wds"])
    members = _members(tmp_path / "ds")
    assert sorted(members) == [f"{i:09d}" for i in range(len(expect["wds"]))]
    assert shardtool.verify(tmp_path / "ds")["ok"]
    with pytest.raises(ValueError, match="expected input or index"):
        shardtool.pack(shards, tmp_path / "o", keys="names")


def _members(dataset: Path) -> Dict[str, Dict[str, bytes]]:
    """Every sample of a tar dataset: key → field → bytes, read with tarfile."""
    out: Dict[str, Dict[str, bytes]] = {}
    for shard in sorted(dataset.glob("*.tar")):
        with tarfile.open(shard) as t:
            for info in t.getmembers():
                key, field = info.name.split(".", 1)
                data = t.extractfile(info).read()  # type: ignore[union-attr]
                out.setdefault(key, {})[field] = data
    return out


def test_pack_refuses_a_folder_mixing_dataset_splits(
    inputs: Tuple[Path, Dict[str, Any]], tmp_path: Path
) -> None:
    # The Hub's layout with a held-out split beside the training files: packed together, test
    # images would be trained on.
    root, _ = inputs
    hub = tmp_path / "hub"
    shutil.copytree(root / "parquet", hub)
    data = hub / "data"
    shutil.copy(data / "train-00001-of-00002.parquet", data / "test-00000-of-00001.parquet")
    with pytest.raises(ValueError, match=r"splits test \(1 file\), train \(2 files\)") as e:
        shardtool.pack(hub, tmp_path / "mixed", resize="shorter:16")
    assert "data/train*.parquet" in str(e.value)
    assert not (tmp_path / "mixed" / "manifest.json").exists()
    m = shardtool.pack(data / "train*.parquet", tmp_path / "train", resize="shorter:16")["manifest"]
    files = {json.loads(s["json"])["source"].split(":")[0] for s in _members(tmp_path / "train").values()}
    assert {Path(f).name for f in files} == {"train-00000-of-00002.parquet", "train-00001-of-00002.parquet"}
    assert m["inputs"]["packed"] == len(_members(tmp_path / "train"))
    # Two configurations, each with its train split (one may hold the other's rows): asked
    # which, not packed together.
    repo = tmp_path / "configs"
    for config in ("full", "mini"):
        shutil.copytree(root / "parquet" / "data", repo / config / "train")
        for f in (repo / config / "train").glob("test-*"):
            f.unlink()
    with pytest.raises(ValueError, match=r"split folders in full/ \(\d+ files?\), mini/") as e:
        shardtool.pack(repo, tmp_path / "configs-out", resize="shorter:16")
    assert f"'{repo}/full/train/'" in str(e.value)
    shardtool.pack(repo / "full" / "train", tmp_path / "full-out", resize="shorter:16")


def test_pack_tells_a_hub_repository_by_its_parquet_files_and_asks_beside_image_folders(
    inputs: Tuple[Path, Dict[str, Any]], tmp_path: Path
) -> None:
    root, _ = inputs
    rows = sum(pq_rows(f) for f in (root / "parquet" / "data").glob("*.parquet"))
    # A config folder, and the Hub's converted layout: no `data/` folder, no image folders.
    for layout in ("plain_text", "default/train"):
        repo = tmp_path / layout.replace("/", "_")
        shutil.copytree(root / "parquet" / "data", repo / layout)
        m = shardtool.pack(repo, tmp_path / f"{repo.name}-out", resize="shorter:16")["manifest"]
        assert m["inputs"]["found"] == rows
    # README images in a folder beside `data/`: which input was meant is asked (it packed the
    # two README images as a two-class ImageFolder).
    repo = tmp_path / "with-assets"
    shutil.copytree(root / "parquet", repo)
    (repo / "assets").mkdir()
    shutil.copy(next(SAMPLE.glob("*/*.jpg")), repo / "assets" / "preview.jpg")
    with pytest.raises(ValueError, match="input_format=.parquet. or input_format=.imagefolder."):
        shardtool.pack(repo, tmp_path / "asked", resize="shorter:16")
    m = shardtool.pack(repo, tmp_path / "asked", resize="shorter:16", input_format="parquet")["manifest"]
    assert m["inputs"]["found"] == rows
    # A nested ImageFolder (class/sub/image) with one Parquet file of embeddings inside: asked
    # too (taken for Parquet, its images were dropped).
    nested = tmp_path / "nested"
    for c in ("flower", "insect"):
        shutil.copytree(SAMPLE / c, nested / c / "a")
    shutil.copy(next((root / "parquet" / "data").glob("*.parquet")), nested / "insect" / "a" / "emb.parquet")
    with pytest.raises(ValueError, match="input_format=.parquet. or input_format=.imagefolder."):
        shardtool.pack(nested, tmp_path / "nested-out", resize="shorter:16")
    # A Hugging Face imagefolder with its metadata in Parquet: told how to give it, as neither
    # input format reads it (as Parquet it has no image bytes, as an ImageFolder no captions).
    folder = tmp_path / "imagefolder-parquet"
    shutil.copytree(SAMPLE / "flower", folder / "imgs")
    import pyarrow as pa
    import pyarrow.parquet as pq

    names = sorted(f"imgs/{f.name}" for f in (folder / "imgs").iterdir())
    pq.write_table(pa.table({"file_name": names, "text": ["a flower"] * len(names)}), folder / "metadata.parquet")
    with pytest.raises(ValueError, match="metadata.parquet is a Hugging Face imagefolder's metadata"):
        shardtool.pack(folder, tmp_path / "imagefolder-parquet-out", resize="shorter:16")
    # In a split's folder too (it was packed as the one class "train", captions dropped).
    split = tmp_path / "split-parquet"
    shutil.copytree(folder, split / "train")
    with pytest.raises(ValueError, match="train/metadata.parquet is a Hugging Face imagefolder's metadata"):
        shardtool.pack(split, tmp_path / "split-parquet-out", resize="shorter:16")


def pq_rows(f: Path) -> int:
    import pyarrow.parquet as pq

    return int(pq.ParquetFile(f).metadata.num_rows)


def test_pack_parquet_with_input_format_and_custom_columns(
    inputs: Tuple[Path, Dict[str, Any]], tmp_path: Path
) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    root, expect = inputs
    name = "train-00000-of-00002.parquet"
    table = pq.read_table(root / "parquet" / "data" / name)
    rows = table.num_rows
    true_labels = table.column("label").to_pylist()
    # The Hugging Face layout under other column names, beside a decoy `label` and `text` that
    # the defaults would pick; a file name that does not say Parquet.
    custom = pa.table(
        {
            "img": table.column("image"),
            "fine_label": table.column("label"),
            "label": pa.array([99] * rows, pa.int64()),
            "alt": table.column("text"),
            "text": pa.array(["decoy"] * rows, pa.string()),
        }
    )
    rows_file = tmp_path / "rows.bin"
    pq.write_table(custom, rows_file, row_group_size=8)
    with pytest.raises(ValueError, match="input format"):
        shardtool.pack(rows_file, tmp_path / "unknown", image_column="img")
    # A misspelt column no file has: the command's mistake, named, not every row failed.
    with pytest.raises(ValueError, match='fits the columns asked for: no column "fine_lable"'):
        shardtool.pack(rows_file, tmp_path / "typo", input_format="parquet", image_column="img", label_column="fine_lable")
    out = tmp_path / "ds"
    summary = shardtool.pack(
        rows_file,
        out,
        input_format="parquet",
        image_column="img",
        label_column="fine_label",
        text_column="alt",
        resize="shorter:32",
    )
    m = summary["manifest"]
    assert m["pack"]["input_format"] == "parquet"
    assert m["inputs"]["packed"] == rows
    got = _members(out)
    assert len(got) == rows
    for s in got.values():
        meta = json.loads(s["json"])
        row = int(meta["source"].rsplit(":", 1)[1])
        e = expect["parquet"][f"{name}:{row}"]
        assert int(s["cls"]) == true_labels[row] == e["label"]
        assert s["txt"].decode() == e["text"]
    # With overwrite, a misspelt column is refused before the earlier dataset is cleared.
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    typos: List[Dict[str, Any]] = [{"label_column": "fine_lable"}, {"drop_columns": ["alt_text"]}]
    for typo in typos:
        with pytest.raises(ValueError, match="Parquet file"):
            shardtool.pack(rows_file, out, input_format="parquet", image_column="img", overwrite=True, **typo)
        assert {p.name: p.read_bytes() for p in out.iterdir()} == before, typo


def test_pack_parquet_of_a_converted_webdataset_reads_cls_and_txt(tmp_path: Path) -> None:
    # The Hub's Parquet conversion of a WebDataset repository: one column per field.
    import pyarrow as pa
    import pyarrow.parquet as pq

    jpgs = sorted(SAMPLE.glob("*/*.jpg"))[:4]
    table = pa.table(
        {
            "__key__": [f"s{i}" for i in range(4)],
            "__url__": ["shard-0.tar"] * 4,
            "jpg": [f.read_bytes() for f in jpgs],
            "cls": pa.array([2, 0, 1, 2], pa.int64()),
            "txt": [f"caption {i}" for i in range(4)],
        }
    )
    (tmp_path / "conv").mkdir()
    pq.write_table(table, tmp_path / "conv" / "0000.parquet")
    out = tmp_path / "ds"
    m = shardtool.pack(tmp_path / "conv", out, resize="shorter:16")["manifest"]
    assert m["inputs"]["packed"] == 4
    for s in _members(out).values():
        row = int(json.loads(s["json"])["source"].rsplit(":", 1)[1])
        assert int(s["cls"]) == [2, 0, 1, 2][row]
        assert s["txt"].decode() == f"caption {row}"


def test_pack_parquet_drop_columns_are_neither_read_nor_carried(
    inputs: Tuple[Path, Dict[str, Any]], tmp_path: Path
) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    root, expect = inputs
    name = "train-00000-of-00002.parquet"
    table = pq.read_table(root / "parquet" / "data" / name)
    rows = table.num_rows
    # Beside the Hub's layout: a large binary column (embeddings, a second image) and a note.
    wide = table.append_column(
        "embedding", pa.array([bytes([i]) * 200_000 for i in range(rows)], pa.binary())
    ).append_column("note", pa.array([f"n{i}" for i in range(rows)], pa.string()))
    # A column named as the image struct's `path` goes into the `.json`: both are kept.
    wide = wide.append_column("image_path", pa.array([f"mine{i}" for i in range(rows)]))
    folder = tmp_path / "in"
    folder.mkdir()
    f = folder / "x.parquet"
    pq.write_table(wide, f, compression="none", use_dictionary=False)
    # Damage the embedding column's first page header: a read of that column fails its rows.
    meta = pq.ParquetFile(f).metadata.row_group(0)
    chunk = next(
        meta.column(i) for i in range(meta.num_columns) if meta.column(i).path_in_schema == "embedding"
    )
    data = bytearray(f.read_bytes())
    data[chunk.data_page_offset : chunk.data_page_offset + 32] = b"\xff" * 32
    f.write_bytes(bytes(data))
    with pytest.raises(shardtool.DatasetError):
        shardtool.pack(f, tmp_path / "all", resize="shorter:16")

    out = tmp_path / "ds"
    summary = shardtool.pack(f, out, resize="shorter:16", drop_columns=["EMBEDDING", "note"])
    assert summary["manifest"]["inputs"]["packed"] == rows
    got = _members(out)
    assert len(got) == rows
    for s in got.values():
        meta_json = json.loads(s["json"])
        assert "embedding" not in meta_json and "note" not in meta_json, meta_json
        assert not any(field.startswith("embedding") for field in s), list(s)
        row = int(meta_json["source"].rsplit(":", 1)[1])
        assert meta_json["image_path"] == f"mine{row}", meta_json
        assert isinstance(meta_json["input_image_path"], str), meta_json
        e = expect["parquet"][f"{name}:{row}"]
        assert int(s["cls"]) == e["label"]
        assert s["txt"].decode() == e["text"]

    # A dropped label column leaves the dataset unlabelled, a dropped text column captionless.
    bare = tmp_path / "bare"
    shardtool.pack(f, bare, resize="shorter:16", drop_columns=("embedding", "label", "text"))
    got = _members(bare)
    assert len(got) == rows
    assert all("cls" not in s and "txt" not in s for s in got.values())
    assert all("label" not in json.loads(s["json"]) for s in got.values())

    with pytest.raises(ValueError, match="none of the 1 Parquet file.*has that column"):
        shardtool.pack(f, tmp_path / "typo", drop_columns=["embeding"])
    with pytest.raises(ValueError, match="it is the column label_column names"):
        shardtool.pack(f, tmp_path / "both", drop_columns=["label"], label_column="label")
    with pytest.raises(TypeError, match="drop_columns must be a list"):
        shardtool.pack(f, tmp_path / "str", drop_columns="note")  # type: ignore[arg-type]
    # A plan records the dropped columns: its parts leave them out too.
    plan = shardtool.plan(f, tmp_path / "plan", shard_samples=4, drop_columns=["embedding"])
    assert plan["inputs"] == rows
    plan_json = json.loads((tmp_path / "plan" / "_plan" / "plan.json").read_text())
    assert plan_json["options"]["drop_columns"] == ["embedding"], plan_json["options"]


def test_pack_parquet_strings_that_are_not_utf8_fail_their_row_alone(tmp_path: Path) -> None:
    import io

    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq
    from PIL import Image

    png = io.BytesIO()
    Image.new("RGB", (8, 8), (9, 9, 9)).save(png, "PNG")
    rows = 30

    def strings(values: list) -> pa.Array:
        # A string column holding bytes that are not UTF-8, as pyarrow would refuse to write.
        offsets = np.cumsum([0] + [len(v) for v in values]).astype(np.int32)
        buffers = [None, pa.py_buffer(offsets.tobytes()), pa.py_buffer(b"".join(values))]
        return pa.Array.from_buffers(pa.string(), rows, buffers)

    texts = [f"t{i}".encode() for i in range(rows)]
    texts[5] = b"\xff\xfe" * 300  # the caption: its row fails
    notes = [f"n{i}".encode() for i in range(rows)]
    notes[12] = b"caf\xe9"  # another column: carried as its bytes
    table = pa.table({"image": pa.array([png.getvalue()] * rows), "text": strings(texts), "note": strings(notes)})
    f = tmp_path / "x.parquet"
    pq.write_table(table, f, row_group_size=10)
    out = tmp_path / "ds"
    summary = shardtool.pack(f, out)
    inputs = summary["manifest"]["inputs"]
    # The crate's row reader stops at such a string; the row group is read again with its
    # strings as bytes, so only row 5 fails and rows 6-9 are packed with their own captions.
    assert inputs["found"] == rows and inputs["packed"] == rows - 1 and inputs["failed"] == 1, inputs
    (error,) = summary["errors"]
    assert error["path"].endswith(":5") and error["kind"] == "bad_field", error
    got = _members(out)
    for s in got.values():
        meta = json.loads(s["json"])
        row = int(meta["source"].rsplit(":", 1)[1])
        assert s["txt"].decode() == f"t{row}", (row, s["txt"])
        if row == 12:
            assert "note" not in meta and s["note.bin"] == b"caf\xe9", (meta, list(s))
        else:
            assert meta["note"] == f"n{row}", meta


def test_pack_parquet_with_class_names_as_string_labels(
    inputs: Tuple[Path, Dict[str, Any]], tmp_path: Path
) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    root, _ = inputs
    # Two files whose string labels are class names (some rows unlabelled: null or empty).
    names = ["zebra", "ant", "moth", "bee"]
    files = sorted((root / "parquet" / "data").glob("*.parquet"))
    assert len(files) == 2
    folder = tmp_path / "named"
    folder.mkdir()
    want: Dict[str, Any] = {}
    for f in files:
        table = pq.read_table(f)
        labels = [
            None if i % 7 == 3 else "" if i % 7 == 5 else names[(i + len(want)) % len(names)]
            for i in range(table.num_rows)
        ]
        for i, l in enumerate(labels):
            want[f"{f.name}:{i}"] = l or None
        pq.write_table(
            table.set_column(table.schema.get_field_index("label"), "label", pa.array(labels, pa.string())),
            folder / f.name,
            row_group_size=5,
        )
    out = tmp_path / "ds"
    m = shardtool.pack(folder, out, resize="shorter:32")["manifest"]
    classes = sorted(set(l for l in want.values() if l))
    assert m["classes"] == classes
    got = _members(out)
    # (The inputs hold rows without a usable image; those fail as they do with integer labels.)
    assert len(got) == m["inputs"]["packed"]
    assert m["inputs"]["packed"] + m["inputs"]["failed"] == len(want)
    labelled = 0
    for s in got.values():
        source = json.loads(s["json"])["source"]
        name = want[source.rsplit("/", 1)[1]]
        if name is None:
            assert "cls" not in s, source
        else:
            assert classes[int(s["cls"])] == name, source
            labelled += 1
    assert 0 < labelled < len(got)
    # A "class name" of a kilobyte fails its row (it would swell every sample's metadata).
    long = tmp_path / "long"
    long.mkdir()
    table = pq.read_table(files[0])
    names_long = ["x" * 1000] + ["ant"] * (table.num_rows - 1)
    at = table.schema.get_field_index("label")
    pq.write_table(table.set_column(at, "label", pa.array(names_long)), long / "l.parquet")
    m = shardtool.pack(long, tmp_path / "ds-long", resize="shorter:16")["manifest"]
    assert m["classes"] == ["ant"]
    lines = [json.loads(x) for x in (tmp_path / "ds-long" / "errors.jsonl").read_text().splitlines()]
    assert [x["path"] for x in lines if x["kind"] == "bad_label"] == [f"{long / 'l.parquet'}:0"]
    # Class indices in one file and names in another are refused, naming both.
    table = pq.read_table(files[0])
    pq.write_table(table, folder / files[0].name)
    with pytest.raises(ValueError, match="mix class indices"):
        shardtool.pack(folder, tmp_path / "mixed")


def test_pack_parquet_keeps_labels_of_every_integer_width(
    inputs: Tuple[Path, Dict[str, Any]], tmp_path: Path
) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    root, _ = inputs
    # (Without the Hugging Face metadata, whose ClassLabel names would name the classes.)
    table = pq.read_table(sorted((root / "parquet" / "data").glob("*.parquet"))[0])
    table = table.replace_schema_metadata(None)
    labels = [i % 3 for i in range(table.num_rows)]
    at = table.schema.get_field_index("label")
    for t in [pa.int8(), pa.int16(), pa.uint8(), pa.uint16(), pa.uint32(), pa.uint64()]:
        folder = tmp_path / str(t)
        folder.mkdir()
        pq.write_table(table.set_column(at, "label", pa.array(labels, t)), folder / "x.parquet")
        out = tmp_path / f"ds-{t}"
        m = shardtool.pack(folder, out, resize="shorter:16")["manifest"]
        assert m["classes"] == ["0", "1", "2"], t
        got = _members(out)
        assert got and all("cls" in s for s in got.values()), t
        for s in got.values():
            row = int(json.loads(s["json"])["source"].rsplit(":", 1)[1])
            assert int(s["cls"]) == labels[row], t
    # -1 (ClassLabel's "no label") leaves a row unlabelled; another negative, or a value past
    # the limit, fails it naming the value as stored.
    folder = tmp_path / "odd"
    folder.mkdir()
    column = pa.array([-1, -5, 0] + labels[3:], pa.int64())
    pq.write_table(table.set_column(at, "label", column), folder / "a.parquet")
    big = pa.array([0, 0, 2**63 + 5] + labels[3:], pa.uint64())
    pq.write_table(table.set_column(at, "label", big), folder / "b.parquet")
    out = tmp_path / "ds-odd"
    shardtool.pack(folder, out, resize="shorter:16")
    lines = [json.loads(x) for x in (out / "errors.jsonl").read_text().splitlines()]
    bad = {x["path"].rsplit("/", 1)[1]: x["message"] for x in lines if x["kind"] == "bad_label"}
    assert set(bad) == {"a.parquet:1", "b.parquet:2"}, lines
    assert "-5" in bad["a.parquet:1"] and str(2**63 + 5) in bad["b.parquet:2"]
    got = _members(out)
    unlabelled = [s for s in got.values() if "cls" not in s]
    assert [json.loads(s["json"])["source"].rsplit("/", 1)[1] for s in unlabelled] == ["a.parquet:0"]


def test_pack_parquet_float_labels_and_class_label_names(
    inputs: Tuple[Path, Dict[str, Any]], tmp_path: Path
) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    root, _ = inputs
    first = sorted((root / "parquet" / "data").glob("*.parquet"))[0]
    table = pq.read_table(first)
    at = table.schema.get_field_index("label")
    names = json.loads(table.schema.metadata[b"huggingface"])["info"]["features"]["label"]["names"]
    rows = table.num_rows

    def errors_of(out: Path) -> Dict[str, str]:
        lines = [json.loads(x) for x in (out / "errors.jsonl").read_text().splitlines()]
        return {x["path"].rsplit("/", 1)[1]: x["message"] for x in lines if x["kind"] == "bad_label"}

    def cls_by_row(out: Path) -> Dict[int, Optional[int]]:
        got = {}
        for s in _members(out).values():
            row = int(json.loads(s["json"])["source"].rsplit(":", 1)[1])
            got[row] = int(s["cls"]) if "cls" in s else None
        return got

    # Floats, as pandas stores an integer column with missing values: named as the label column,
    # whole ones are indices, NaN is no label, a fraction is a bad label. Found by name alone,
    # a float `label` may be a score: it is carried in the json.
    floats = [0.0, 1.0, float("nan"), 1.5] + [float(i % 3) for i in range(4, rows)]
    folder = tmp_path / "floats"
    folder.mkdir()
    plain = table.replace_schema_metadata(None)
    pq.write_table(plain.set_column(at, "label", pa.array(floats, pa.float64())), folder / "f.parquet")
    scores = tmp_path / "ds-scores"
    m = shardtool.pack(folder, scores, resize="shorter:16")["manifest"]
    assert m["classes"] == [] and m["inputs"]["failed"] == 0
    carried = {int(json.loads(s["json"])["source"].rsplit(":", 1)[1]): json.loads(s["json"]) for s in _members(scores).values()}
    assert carried[3]["input_label"] == 1.5 and carried[1]["input_label"] == 1.0
    out = tmp_path / "ds-floats"
    m = shardtool.pack(folder, out, resize="shorter:16", label_column="label")["manifest"]
    assert m["classes"] == ["0", "1", "2"]
    assert errors_of(out) == {"f.parquet:3": "label 1.5 is not a whole number (a class index)"}
    got = cls_by_row(out)
    assert (got[0], got[1], got[2]) == (0, 1, None) and 3 not in got
    assert all(got[r] == r % 3 for r in range(4, rows))
    # Integers in one file and floats in another (pandas, where the second has a missing
    # value): refused unless named, not half the dataset labelled.
    mixed = tmp_path / "mixed-types"
    mixed.mkdir()
    ints = [i % 3 for i in range(rows)]
    pq.write_table(plain.set_column(at, "label", pa.array(ints, pa.int64())), mixed / "a.parquet")
    shutil.copy(folder / "f.parquet", mixed / "b.parquet")
    with pytest.raises(ValueError, match="holds class indices in .*a.parquet but floats in .*b.parquet"):
        shardtool.pack(mixed, tmp_path / "ds-mixed", resize="shorter:16")
    m = shardtool.pack(mixed, tmp_path / "ds-mixed-named", resize="shorter:16", label_column="label")["manifest"]
    assert m["classes"] == ["0", "1", "2"] and m["inputs"]["failed"] == 1

    # An index past the ClassLabel names fails its row; the names stay the dataset's classes.
    folder = tmp_path / "past"
    folder.mkdir()
    labels = [len(names)] + [i % len(names) for i in range(1, rows)]
    pq.write_table(table.set_column(at, "label", pa.array(labels, pa.int64())), folder / "p.parquet")
    out = tmp_path / "ds-past"
    m = shardtool.pack(folder, out, resize="shorter:16")["manifest"]
    assert m["classes"] == names
    assert list(errors_of(out)) == ["p.parquet:0"]
    assert "names no class" in errors_of(out)["p.parquet:0"]

    # Files whose ClassLabel features name other classes are refused, naming both.
    folder = tmp_path / "other-names"
    folder.mkdir()
    pq.write_table(table, folder / "a.parquet")
    meta = json.loads(table.schema.metadata[b"huggingface"])
    meta["info"]["features"]["label"]["names"] = list(reversed(names))
    other = table.replace_schema_metadata({b"huggingface": json.dumps(meta).encode()})
    pq.write_table(other, folder / "b.parquet")
    with pytest.raises(ValueError, match="name other classes"):
        shardtool.pack(folder, tmp_path / "ds-other-names")

    # A ClassLabel may name two classes alike (ImageNet-1k has two "crane"s: the bird and the
    # machine): labels are indices, each kept, the names as given.
    folder = tmp_path / "twice"
    folder.mkdir()
    twice_names = [names[0], names[1], names[0]] + names[3:]
    meta["info"]["features"]["label"]["names"] = twice_names
    twice = table.replace_schema_metadata({b"huggingface": json.dumps(meta).encode()})
    pq.write_table(twice, folder / "t.parquet")
    m = shardtool.pack(folder, tmp_path / "ds-twice", resize="shorter:16")["manifest"]
    assert m["classes"] == twice_names
    got = cls_by_row(tmp_path / "ds-twice")
    stored = table.column("label").to_pylist()
    assert got and all(got[r] == stored[r] for r in got if stored[r] is not None and stored[r] >= 0)

    # A class name longer than any the manifest takes from a list fails its file, saying so,
    # rather than being dropped (labels then unnamed) without a word.
    folder = tmp_path / "long-name"
    folder.mkdir()
    meta["info"]["features"]["label"]["names"] = ["c" * 256] + names[1:]
    long_named = table.replace_schema_metadata({b"huggingface": json.dumps(meta).encode()})
    pq.write_table(long_named, folder / "l.parquet")
    with pytest.raises(shardtool.DatasetError, match="names class 0 with 256 bytes, over 255"):
        shardtool.pack(folder, tmp_path / "ds-long-name", resize="shorter:16")

    # Two ClassLabel columns and no `label` (CIFAR-100's fine and coarse labels): asked which,
    # not packed unlabelled; named, the other is carried.
    folder = tmp_path / "two-labels"
    folder.mkdir()
    coarse = [i % 2 for i in range(rows)]
    two = table.rename_columns(["fine_label" if n == "label" else n for n in table.column_names])
    two = two.append_column("coarse_label", pa.array(coarse, pa.int64()))
    meta = json.loads(table.schema.metadata[b"huggingface"])
    feats = meta["info"]["features"]
    feats["fine_label"] = feats.pop("label")
    feats["coarse_label"] = {"_type": "ClassLabel", "names": ["odd", "even"]}
    pq.write_table(two.replace_schema_metadata({b"huggingface": json.dumps(meta).encode()}), folder / "c.parquet")
    with pytest.raises(ValueError, match=r"2 ClassLabel columns to choose from \(coarse_label, fine_label\)"):
        shardtool.pack(folder, tmp_path / "ds-two-labels", resize="shorter:16")
    m = shardtool.pack(folder, tmp_path / "ds-fine", resize="shorter:16", label_column="fine_label")["manifest"]
    assert m["classes"] == names
    # A dropped one is as if the file lacked it: the other is the label; both dropped, none.
    m = shardtool.pack(folder, tmp_path / "ds-coarse", resize="shorter:16", drop_columns=["fine_label"])["manifest"]
    assert m["classes"] == ["odd", "even"]
    both = ["fine_label", "coarse_label"]
    m = shardtool.pack(folder, tmp_path / "ds-none", resize="shorter:16", drop_columns=both)["manifest"]
    assert m["classes"] == [] and m["inputs"]["packed"] == rows
    for s in _members(tmp_path / "ds-fine").values():
        meta_row = json.loads(s["json"])
        assert meta_row["coarse_label"] == coarse[int(meta_row["source"].rsplit(":", 1)[1])]


def test_pack_input_errors(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="input_format"):
        shardtool.pack(SAMPLE, tmp_path / "a", input_format="tfrecord")
    with pytest.raises(FileNotFoundError, match="no such file"):
        shardtool.pack(tmp_path / "missing", tmp_path / "b")
    # A pattern is not checked up front: as in the CLI, each shard it names that cannot be opened
    # is one failed input of the report; with no usable image at all, the pack fails and
    # publishes nothing.
    with pytest.raises(shardtool.DatasetError, match="2 input"):
        shardtool.pack(str(tmp_path / "missing-{0..1}.tar"), tmp_path / "c")
    assert not (tmp_path / "c" / "manifest.json").exists()
    lines = (tmp_path / "c" / "errors.jsonl").read_text().splitlines()
    assert [json.loads(line)["kind"] for line in lines] == ["bad_shard", "bad_shard"]


def test_pack_parquet_carries_nested_and_binary_columns(tmp_path: Path) -> None:
    import io

    import pyarrow as pa
    import pyarrow.parquet as pq
    from PIL import Image

    photos = sorted(SAMPLE.rglob("*.jpg"))[:4]
    masks = []
    for i in range(4):
        buf = io.BytesIO()
        Image.new("L", (8, 8), 40 * i).save(buf, format="PNG")
        masks.append(buf.getvalue())
    image_type = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
    table = pa.table(
        {
            "image": pa.array([{"bytes": p.read_bytes(), "path": p.name} for p in photos], image_type),
            # ControlNet's layout: a second image per row.
            "conditioning_image": pa.array(
                [{"bytes": m, "path": f"c{i}.png"} for i, m in enumerate(masks)], image_type
            ),
            "tags": pa.array([["a", "b"], [], None, ["c"]], pa.list_(pa.string())),
            "meta": pa.array(
                [{"w": i, "src": f"s{i}"} for i in range(4)],
                pa.struct([("w", pa.int32()), ("src", pa.string())]),
            ),
            "props": pa.array([[("k", i)] for i in range(4)], pa.map_(pa.string(), pa.int64())),
            "embedding": pa.array([bytes([255, i, 0, 7]) for i in range(4)], pa.binary()),
            "note": pa.array([f"note {i}".encode() for i in range(4)], pa.binary()),
            "n": pa.array(range(4), pa.int64()),
        }
    )
    src = tmp_path / "rows.parquet"
    pq.write_table(table, src)
    with pytest.raises(ValueError, match='text column "n" holds neither strings nor bytes'):
        shardtool.pack(src, tmp_path / "bad", text_column="n")
    out = tmp_path / "ds"
    m = shardtool.pack(src, out, resize="shorter:16", shuffle=False)["manifest"]
    assert m["inputs"]["packed"] == 4 and m["inputs"]["failed"] == 0
    assert "conditioning_image.png" in m["fields"] and "embedding.bin" in m["fields"]
    got = sorted(_members(out).values(), key=lambda s: json.loads(s["json"])["source"])
    for i, s in enumerate(got):
        meta = json.loads(s["json"])
        assert s["conditioning_image.png"] == masks[i]
        assert s["embedding.bin"] == bytes([255, i, 0, 7])
        assert meta["conditioning_image"] == {"path": f"c{i}.png"}
        assert meta["tags"] == [["a", "b"], [], None, ["c"]][i]
        assert meta["meta"] == {"w": i, "src": f"s{i}"}
        assert meta["props"] == {"k": i}
        # A binary column is bytes in every row, UTF-8 or not (per row, an int8 embedding was
        # a JSON string in the rows that happened to be UTF-8, a `.bin` in the others).
        assert s["note.bin"] == f"note {i}".encode() and "note" not in meta, (meta, list(s))
        assert meta["n"] == i
    assert shardtool.verify(out)["ok"] is True
    packed = tmp_path / "packed"
    shardtool.pack(src, packed, resize="crop:16x16", format="packed", shuffle=False)
    assert shardtool.verify(packed)["ok"] is True
    loader = shardtool.Loader(packed, batch_size=4, shuffle=False, output="numpy", fields=["conditioning_image.png"])
    (batch,) = list(loader)
    assert sorted(bytes(b) for b in batch["conditioning_image.png"]) == sorted(masks)


def test_pack_parquet_names_a_columns_field_alike_in_every_row(tmp_path: Path) -> None:
    import io

    import pyarrow as pa
    import pyarrow.parquet as pq
    from PIL import Image

    photo = next(SAMPLE.rglob("*.jpg")).read_bytes()

    def png(v: int) -> bytes:
        buf = io.BytesIO()
        Image.new("L", (4, 4), v).save(buf, format="PNG")
        return buf.getvalue()

    rows = 6
    table = pa.table(
        {
            "image": pa.array([photo] * rows, pa.binary()),
            # int8 embeddings: some rows happen to be valid UTF-8, others not.
            "embedding": pa.array([bytes([65 + i, 66, 67]) if i % 2 else bytes([200, i]) for i in range(rows)]),
            # Text that starts like a BMP or GIF file, stored as binary.
            "note": pa.array([b"BM" + b"W 320i parked by the kerb, " * 2, b"GIF8 is a format"] * 3),
            # Two mask columns alike but for case, each null in some rows.
            "Mask": pa.array([None if i % 3 == 0 else png(10) for i in range(rows)], pa.binary()),
            "mask": pa.array([png(200) if i % 2 == 0 else None for i in range(rows)], pa.binary()),
            # A third whose own name is the second's numbered one.
            "mask_2": pa.array([png(100)] * rows, pa.binary()),
        }
    )
    src = tmp_path / "rows.parquet"
    pq.write_table(table, src)
    out = tmp_path / "ds"
    shardtool.pack(src, out, shuffle=False)
    got = sorted(_members(out).values(), key=lambda s: json.loads(s["json"])["source"])
    assert len(got) == rows
    for i, s in enumerate(got):
        meta = json.loads(s["json"])
        assert s["embedding.bin"] == table.column("embedding")[i].as_py() and "embedding" not in meta
        assert s["note.bin"] == table.column("note")[i].as_py(), list(s)
        # `Mask` is always mask.png, `mask` always mask_2.png, whichever is null.
        assert s.get("mask.png") == table.column("Mask")[i].as_py(), (i, list(s))
        assert s.get("mask_2.png") == table.column("mask")[i].as_py(), (i, list(s))
        assert s["mask_2_2.png"] == table.column("mask_2")[i].as_py(), (i, list(s))
        # No column lost to a name another took.
        masks = sorted(v for k, v in s.items() if k.startswith("mask"))
        wanted = [table.column(c)[i].as_py() for c in ("Mask", "mask", "mask_2")]
        assert masks == sorted(v for v in wanted if v is not None), (i, list(s))


def test_pack_parquet_takes_the_class_label_feature_as_the_label_whatever_its_name(
    inputs: Tuple[Path, Dict[str, Any]], tmp_path: Path
) -> None:
    import pyarrow.parquet as pq

    root, _ = inputs
    first = sorted((root / "parquet" / "data").glob("*.parquet"))[0]
    table = pq.read_table(first)
    meta = json.loads(table.schema.metadata[b"huggingface"])
    names = meta["info"]["features"]["label"]["names"]
    labels = table.column("label").to_pylist()
    # As the `beans` dataset names it: `labels`.
    meta["info"]["features"]["labels"] = meta["info"]["features"].pop("label")
    renamed = table.rename_columns(["labels" if c == "label" else c for c in table.column_names])
    renamed = renamed.replace_schema_metadata({b"huggingface": json.dumps(meta).encode()})
    src = tmp_path / "beans.parquet"
    pq.write_table(renamed, src)
    m = shardtool.pack(src, tmp_path / "ds", resize="shorter:16")["manifest"]
    assert m["classes"] == names
    for s in _members(tmp_path / "ds").values():
        row = int(json.loads(s["json"])["source"].rsplit(":", 1)[1])
        assert int(s["cls"]) == labels[row]


def test_pack_parquet_files_agree_on_their_label_and_text_columns(
    inputs: Tuple[Path, Dict[str, Any]], tmp_path: Path
) -> None:
    import pyarrow.parquet as pq

    root, _ = inputs
    first, second = sorted((root / "parquet" / "data").glob("*.parquet"))[:2]
    tables = [pq.read_table(f) for f in (first, second)]
    meta = json.loads(tables[0].schema.metadata[b"huggingface"])
    names = meta["info"]["features"]["label"]["names"]
    meta["info"]["features"]["labels"] = meta["info"]["features"].pop("label")
    renamed = [t.rename_columns(["labels" if c == "label" else c for c in t.column_names]) for t in tables]
    # The first file keeps the features; the second was saved again by a tool that drops them.
    folder = tmp_path / "drift"
    folder.mkdir()
    pq.write_table(renamed[0].replace_schema_metadata({b"huggingface": json.dumps(meta).encode()}), folder / "a.parquet")
    pq.write_table(renamed[1].replace_schema_metadata(None), folder / "b.parquet")
    m = shardtool.pack(folder, tmp_path / "ds", resize="shorter:16")["manifest"]
    assert m["classes"] == names
    by_file = {"a.parquet": tables[0], "b.parquet": tables[1]}
    members = _members(tmp_path / "ds").values()
    assert {json.loads(s["json"])["source"].split(":")[0].rsplit("/", 1)[1] for s in members} == set(by_file)
    for s in members:
        file, row = json.loads(s["json"])["source"].rsplit(":", 1)
        assert int(s["cls"]) == by_file[file.rsplit("/", 1)[1]].column("label")[int(row)].as_py(), s["json"]
    # The same files by URL: fetched once each (choosing again fetched the file twice, and the
    # second fetch failed on the first one's staged copy).
    import functools
    import http.server
    import threading

    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(folder))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/{{a,b}}.parquet"
        r = shardtool.pack(url, tmp_path / "by-url", resize="shorter:16")
    finally:
        server.shutdown()
    assert r["manifest"]["classes"] == names
    assert (r["manifest"]["inputs"]["packed"], r["manifest"]["inputs"]["failed"]) == (
        m["inputs"]["packed"],
        m["inputs"]["failed"],
    ), r["errors"]
    assert not list((tmp_path / "by-url").glob(".stage-*"))
    # Captions from `text` in one file and `caption` in the other: asked, not half lost.
    captions = tmp_path / "captions"
    captions.mkdir()
    pq.write_table(tables[0], captions / "a.parquet")
    pq.write_table(tables[1].rename_columns(["caption" if c == "text" else c for c in tables[1].column_names]), captions / "b.parquet")
    with pytest.raises(ValueError, match='text columns differ: "text" in .*a.parquet, "caption" in .*b.parquet; name one with text_column'):
        shardtool.pack(captions, tmp_path / "asked", resize="shorter:16")


def test_pack_parquet_carries_nanosecond_times_as_text_nested_too_and_half_floats_as_numbers(tmp_path: Path) -> None:
    import datetime

    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    photo = next(SAMPLE.rglob("*.jpg")).read_bytes()
    # pandas' default `datetime64[ns]`, and a time of day in nanoseconds.
    table = pa.table(
        {
            "image": pa.array([photo] * 2, pa.binary()),
            "taken": pa.array([1_700_000_000_000_000_155, -1], pa.timestamp("ns")),
            "at": pa.array([3_723_000_000_042, 0], pa.time64("ns")),
            "when": pa.array([datetime.datetime(2024, 1, 2, 3, 4, 5, 6)] * 2, pa.timestamp("us")),
            # Half floats are numbers, as every other float column (NaN as null).
            "half": pa.array([np.float16(1.5), np.float16("nan")], pa.float16()),
            # Inside a struct, a list and a map alike.
            "meta": pa.array(
                [{"at": 1_700_000_000_000_000_155, "n": 1}, {"at": None, "n": 2}],
                pa.struct([("at", pa.timestamp("ns")), ("n", pa.int64())]),
            ),
            "times": pa.array([[-1, 0], []], pa.list_(pa.timestamp("ns"))),
            "by": pa.array([[("a", 3_723_000_000_042)], []], pa.map_(pa.string(), pa.time64("ns"))),
        }
    )
    src = tmp_path / "rows.parquet"
    pq.write_table(table, src)
    shardtool.pack(src, tmp_path / "ds", shuffle=False)
    got = sorted((json.loads(s["json"]) for s in _members(tmp_path / "ds").values()), key=lambda m: m["source"])
    assert [m["taken"] for m in got] == ["2023-11-14 22:13:20.000000155 +00:00", "1969-12-31 23:59:59.999999999 +00:00"]
    assert [m["at"] for m in got] == ["01:02:03.000000042", "00:00:00.000000000"]
    # Micros as the record API writes them, for comparison.
    assert got[0]["when"] == "2024-01-02 03:04:05.000006 +00:00"
    assert [m["half"] for m in got] == [1.5, None]
    assert [m["meta"] for m in got] == [{"at": "2023-11-14 22:13:20.000000155 +00:00", "n": 1}, {"at": None, "n": 2}]
    assert [m["times"] for m in got] == [["1969-12-31 23:59:59.999999999 +00:00", "1970-01-01 00:00:00.000000000 +00:00"], []]
    assert [m["by"] for m in got] == [{"a": "01:02:03.000000042"}, {}]
