"""Partitioned packing from Python: ``plan``, ``pack_part`` in any order and again, ``merge``,
``status``; the result is byte-identical to one ``pack`` with the same options. With Ray
installed, ``python -m shardtool.ray`` runs the parts as Ray tasks on a local cluster."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Dict

import pytest

import shardtool

from conftest import SAMPLE

OPTIONS = dict(resize="crop:24x24", seed=3, shard_samples=7)


def published(d: Path) -> Dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(d.iterdir()) if p.is_file()}


@pytest.fixture(scope="module")
def single(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("single") / "ds"
    shardtool.pack(SAMPLE, out, jobs=2, **OPTIONS)
    return out


def test_parts_in_any_order_merge_to_the_single_pack(single: Path, tmp_path: Path) -> None:
    out = tmp_path / "parts"
    planned = shardtool.plan(SAMPLE, out, **OPTIONS)
    assert planned["inputs"] == 45
    assert planned["shards"] == -(-45 // 7)
    for i in (2, 0):
        r = shardtool.pack_part(out, i, 3, jobs=1)
        assert r["packed"] == r["assigned"] > 0
    s = shardtool.status(out)
    assert s["missing"] == [j for j in range(s["shards"]) if j % 3 == 1]
    with pytest.raises(shardtool.DatasetError, match="not done") as incomplete:
        shardtool.merge(out)
    # The advice names the Python call, not the CLI's `--shards` (the wheel installs no CLI).
    text = str(incomplete.value)
    assert "shardtool pack" not in text and "--shards" not in text, text
    assert "run pack_part again for the parts holding them" in text, text
    assert text.endswith("shards " + ",".join(map(str, s["missing"]))), text
    shardtool.pack_part(out, 1, 3)
    again = shardtool.pack_part(out, 0, 3)
    assert again["packed"] == 0 and again["skipped"] == again["assigned"]
    merged = shardtool.merge(out)
    assert merged["manifest"]["totals"]["samples"] == 45
    assert published(out) == published(single)


def test_max_errors_given_to_the_plan_holds_for_the_merge(tmp_path: Path) -> None:
    inp = tmp_path / "in"
    shutil.copytree(SAMPLE, inp)
    (inp / "leaf" / "broken.jpg").write_bytes(b"not a jpeg")
    out = tmp_path / "out"
    shardtool.plan(inp, out, max_errors=0, **OPTIONS)
    # One part packs every shard, so it meets the failure: the plan's limit stops it.
    with pytest.raises(shardtool.DatasetError, match="more than max_errors 0"):
        shardtool.pack_part(out, 0, 1)
    stopped = shardtool.status(out)["stopped"]
    assert [Path(p).name for p in stopped] == ["failures-part-0-of-1.jsonl"]
    with pytest.raises(shardtool.DatasetError, match="larger max_errors"):
        shardtool.merge(out)
    shardtool.pack_part(out, 0, 1, max_errors=5)
    assert shardtool.status(out)["stopped"] == []
    with pytest.raises(shardtool.DatasetError, match="1 inputs failed"):
        shardtool.merge(out)
    assert not (out / "manifest.json").exists()
    merged = shardtool.merge(out, max_errors=1)
    assert merged["manifest"]["totals"]["samples"] == 45 and len(merged["errors"]) == 1


def test_a_plan_whose_listing_failures_pass_max_errors_says_so(tmp_path: Path) -> None:
    shards = tmp_path / "shards"
    shardtool.pack(SAMPLE, tmp_path / "one", resize="crop:24x24", shard_samples=64)
    shards.mkdir()
    shutil.copy(tmp_path / "one" / "shard-000000.tar", shards / "a.tar")
    (shards / "junk.tar").write_bytes(b"not a tar at all, not even close")
    with pytest.raises(shardtool.TooManyErrorsError, match="1 inputs failed, more than max_errors 0"):
        shardtool.plan(shards, tmp_path / "out", max_errors=0, **OPTIONS)
    # The plan is kept: a part given its own limit packs it.
    shardtool.pack_part(tmp_path / "out", 0, 1, max_errors=1)


def test_bad_parts_and_plans_are_python_errors(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        shardtool.pack_part(tmp_path / "nothing", 0, 1)
    for bad in [0, -1, 2**64]:
        with pytest.raises(ValueError, match="shard_samples"):
            shardtool.plan(SAMPLE, tmp_path / "p", shard_samples=bad)
    with pytest.raises(TypeError, match="shard_samples"):
        shardtool.plan(SAMPLE, tmp_path / "p", shard_samples=True)
    shardtool.plan(SAMPLE, tmp_path / "p", shard_samples=10)
    with pytest.raises(ValueError, match="below"):
        shardtool.pack_part(tmp_path / "p", 3, 3)
    with pytest.raises(TypeError, match="index"):
        shardtool.pack_part(tmp_path / "p", True, 2)
    with pytest.raises(ValueError, match="max_errors"):
        shardtool.pack_part(tmp_path / "p", 0, 2, max_errors=-1)
    with pytest.raises(ValueError, match="max_errors"):
        shardtool.pack(SAMPLE, tmp_path / "q", max_errors=-1)
    for bad, name in [
        (dict(shard_size=True), "shard_size"),
        (dict(shard_size=1.5), "shard_size"),
        (dict(upscale="yes"), "upscale"),
        (dict(overwrite=1), "overwrite"),
        (dict(resize=224), "resize"),
        (dict(seed="1"), "seed must be an int, not str"),
        (dict(quality="90"), "quality must be an int"),
        (dict(jobs=2.5), "jobs must be an int, not float"),
        (dict(max_errors=1.5), "max_errors must be an int"),
        (dict(input_format=3), "input_format must be a str"),
        (dict(label_column=b"label"), "label_column must be a str"),
        (dict(resze="crop:3x3"), r"pack\(\) got an unexpected keyword argument 'resze' \(did you mean 'resize'\?\)"),
    ]:
        with pytest.raises(TypeError, match=name):
            shardtool.pack(SAMPLE, tmp_path / "q", **bad)
    with pytest.raises(TypeError, match=r"^plan\(\) got an unexpected keyword argument 'resze'"):
        shardtool.plan(SAMPLE, tmp_path / "q", shard_samples=2, resze="crop:3x3")
    # shard_samples fixes a plan's shards: a shard_size is not taken, whatever shard_samples is.
    with pytest.raises(TypeError, match=r"^plan\(\) got an unexpected keyword argument 'shard_size'"):
        shardtool.plan(SAMPLE, tmp_path / "q", shard_samples=2, shard_size="1MiB")  # type: ignore[call-arg]
    from shardtool import ray as on_ray

    with pytest.raises(TypeError, match=r"^ray\.pack\(\) got an unexpected keyword argument 'resze'"):
        on_ray.pack(SAMPLE, tmp_path / "q", parts=2, shard_samples=2, resze="crop:3x3")  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="shard_samples must be an int, not str"):
        shardtool.plan(SAMPLE, tmp_path / "q", shard_samples="100")  # type: ignore[arg-type]
    for decode in ("yes", 1):
        with pytest.raises(TypeError, match="decode must be True or False"):
            shardtool.verify(SAMPLE, decode=decode)  # type: ignore[arg-type]
    # The CLI's --no-shuffle is pointed at; a far-off name gets no guess.
    with pytest.raises(TypeError, match=r"'no_shuffle' \(did you mean shuffle=False\?\)"):
        shardtool.pack(SAMPLE, tmp_path / "q", no_shuffle=True)
    with pytest.raises(TypeError, match=r"'quiet'$"):
        shardtool.pack(SAMPLE, tmp_path / "q", quiet=True)
    assert not (tmp_path / "q").exists()
    # Planning into a finished dataset says what is there and how to replace it (numpy's bools
    # are bools).
    import numpy as np

    done = tmp_path / "done"
    shardtool.pack(SAMPLE, done, resize="crop:16x16", shuffle=np.True_)
    assert shardtool.verify(done, decode=np.bool_(False))["ok"]
    keys = [k for b in shardtool.Loader(done, batch_size=8, shuffle=np.False_, output="numpy") for k in b["key"]]
    assert keys == sorted(keys)
    with pytest.raises(ValueError, match=r"holds a dataset\).*overwrite=True"):
        shardtool.plan(SAMPLE, done, shard_samples=10)
    with pytest.raises(ValueError, match="pass one"):
        shardtool.pack(SAMPLE, tmp_path / "q", shard_samples=5, resume=True, overwrite=True)
    # As the CLI refuses --shard-size with --shard-samples (one was silently dropped).
    with pytest.raises(ValueError, match="shard_size rolls shards by size"):
        shardtool.pack(SAMPLE, tmp_path / "r", shard_samples=5, shard_size="100KB")
    assert not (tmp_path / "r").exists()
    with pytest.raises(ValueError, match="packed shards hold raw pixels"):
        shardtool.pack(SAMPLE, tmp_path / "t", format="packed", encode="png")
    with pytest.raises(ValueError, match="quality=95: .*packed shards hold raw pixels"):
        shardtool.pack(SAMPLE, tmp_path / "t", format="packed", quality=95)
    with pytest.raises(ValueError, match='quality=95: .*encode="png" is lossless'):
        shardtool.pack(SAMPLE, tmp_path / "t", encode="png", quality=95)
    # A plan refuses them as pack does (`python -m shardtool.ray` plans with them).
    with pytest.raises(ValueError, match='quality=95: .*encode="png" is lossless'):
        shardtool.plan(SAMPLE, tmp_path / "t", shard_samples=5, encode="png", quality=95)
    assert not (tmp_path / "t").exists()
    # Messages name keyword arguments, not the CLI's flags.
    with pytest.raises(ValueError, match="need shard_samples"):
        shardtool.pack(SAMPLE, tmp_path / "s", resume=True)


def test_ray_runs_the_parts_as_tasks_then_merges(single: Path, tmp_path: Path) -> None:
    pytest.importorskip("ray")
    out = tmp_path / "ray"
    cmd = [
        sys.executable,
        "-m",
        "shardtool.ray",
        str(SAMPLE),
        str(out),
        "--parts",
        "3",
        "--shard-samples",
        "7",
        "--resize",
        "crop:24x24",
        # Pack's other flags reach the parts: the same bytes as a single pack given them.
        "--encode",
        "png",
        "--keys",
        "index",
        "--prefix",
        "part",
        "--input-format",
        "imagefolder",
        "--seed",
        "3",
        "--num-cpus",
        "2",
    ]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-4000:]
    assert "packed 45 samples" in r.stdout
    import shardtool.ray

    flagged = tmp_path / "single-flagged"
    shardtool.pack(SAMPLE, flagged, jobs=2, encode="png", keys="index", prefix="part", **OPTIONS)
    assert published(out) == published(flagged)
    assert published(out) != published(single)
    # A rerun keeps the plan only when it asks for the same one: other options are refused
    # (before any Ray task starts), naming what differs.
    with pytest.raises(ValueError, match="resize"):
        shardtool.ray.pack(str(SAMPLE), str(out), parts=3, shard_samples=7, resize="crop:20x20", seed=3)
    with pytest.raises(ValueError, match="cpus_per_part"):
        shardtool.ray.pack(str(SAMPLE), str(out), parts=3, jobs=2, **OPTIONS)
    for bad, error in ((dict(parts=0), ValueError), (dict(parts=2, cpus_per_part=0), ValueError),
                       (dict(parts=True), TypeError), (dict(parts=2.0), TypeError)):
        name = "cpus_per_part" if "cpus_per_part" in bad else "parts"
        with pytest.raises(error, match=f"{name} must be"):
            shardtool.ray.pack(str(SAMPLE), str(tmp_path / "ray-zero"), **{**OPTIONS, **bad})
    assert not (tmp_path / "ray-zero").exists()
    assert published(out) == published(flagged)
    # From the command line: the reason and exit 2, not a traceback; the flag it names exists.
    r = subprocess.run(cmd[:-3] + ["4"] + cmd[-2:], capture_output=True, text=True, timeout=600)
    assert r.returncode == 2, r.stderr[-4000:]
    assert "seed: 3 → 4" in r.stderr and "Traceback" not in r.stderr, r.stderr[-4000:]
    assert "--overwrite" in r.stderr
    # A part past --max-errors stops the run: exit 1 with the reason, not Ray's traceback.
    broken = tmp_path / "broken"
    shutil.copytree(SAMPLE, broken)
    (broken / "leaf" / "bad.jpg").write_bytes(b"not a jpeg")
    failing = cmd[:3] + [str(broken), str(tmp_path / "ray-bad")] + cmd[5:] + ["--max-errors", "0"]
    r = subprocess.run(failing, capture_output=True, text=True, timeout=600)
    assert r.returncode == 1, r.stderr[-4000:]
    assert "more than --max-errors 0" in r.stderr and "Traceback" not in r.stderr, r.stderr[-4000:]
    assert not (tmp_path / "ray-bad" / "manifest.json").exists()
    # A shard input changed since the plan: the rerun is refused before any task starts (exit
    # 2), and a part run by hand fails with the reason (PlanError), as often as it runs.
    shards = tmp_path / "shards"
    shardtool.pack(SAMPLE, shards, resize="crop:16x16", shard_samples=20)
    changed = tmp_path / "ray-changed"
    shardtool.plan(shards, changed, shard_samples=7)
    os.utime(shards / "shard-000000.tar", ns=(0, 1_000_000_000))
    rerun = cmd[:3] + [str(shards), str(changed), "--parts", "2", "--shard-samples", "7", "--num-cpus", "2"]
    r = subprocess.run(rerun, capture_output=True, text=True, timeout=600)
    assert r.returncode == 2, r.stderr[-4000:]
    assert "shard-000000.tar changed since the plan" in r.stderr, r.stderr[-4000:]
    assert "a part failed" not in r.stderr and "--overwrite" in r.stderr, r.stderr[-4000:]
    with pytest.raises(shardtool.PlanError, match="changed since the plan"):
        shardtool.pack_part(changed, 0, 1)
    help = subprocess.run(cmd[:3] + ["--help"], capture_output=True, text=True, timeout=60)
    assert "--overwrite" in help.stdout and "--text-column" in help.stdout
    assert published(out) == published(flagged)


def test_ray_parts_find_a_relative_output_whatever_folder_the_workers_run_in(
    single: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ray = pytest.importorskip("ray")
    import shardtool.ray

    # A runtime_env working_dir (how code is shipped to a Ray cluster) runs the tasks in a
    # folder of Ray's own: a relative OUTPUT is the driver's.
    shipped = tmp_path / "code"
    shipped.mkdir()
    (shipped / "train.py").write_text("# the user's code\n")
    monkeypatch.chdir(tmp_path)
    ray.init(num_cpus=2, runtime_env={"working_dir": str(shipped)}, include_dashboard=False)
    try:
        merged = shardtool.ray.pack(str(SAMPLE), "relative", parts=2, **OPTIONS)
    finally:
        ray.shutdown()
    assert merged["manifest"]["totals"]["samples"] == 45
    assert published(tmp_path / "relative") == published(single)


def test_plan_with_resume_keeps_the_same_plan_and_names_what_differs(tmp_path: Path) -> None:
    out = tmp_path / "kept"
    first = shardtool.plan(SAMPLE, out, **OPTIONS)
    with pytest.raises(ValueError, match="already planned"):
        shardtool.plan(SAMPLE, out, **OPTIONS)
    assert shardtool.plan(SAMPLE, out, resume=True, **OPTIONS)["plan"] == first["plan"]
    with pytest.raises(ValueError, match=r"seed: 3 → 4") as refused:
        shardtool.plan(SAMPLE, out, resume=True, **dict(OPTIONS, seed=4))
    # The way out is named as Python takes it.
    assert "overwrite=True" in str(refused.value) and "--" not in str(refused.value)
    # Both at once are refused, as pack refuses them: overwrite would replace the plan (and a
    # merged dataset) at once. overwrite alone plans again with the new options.
    with pytest.raises(ValueError, match="pass one"):
        shardtool.plan(SAMPLE, out, resume=True, overwrite=True, **dict(OPTIONS, seed=4))
    assert shardtool.plan(SAMPLE, out, resume=True, **OPTIONS)["plan"] == first["plan"]
    other = shardtool.plan(SAMPLE, out, overwrite=True, **dict(OPTIONS, seed=4))
    assert other["plan"] != first["plan"]
    # An image added to the folder since: refused (it would be left out), naming both counts.
    copy = tmp_path / "grown"
    shutil.copytree(SAMPLE, copy)
    grown = tmp_path / "grown-out"
    shardtool.plan(copy, grown, **OPTIONS)
    extra = next(copy.glob("*/*.jpg"))
    shutil.copy(extra, extra.with_name("added.jpg"))
    with pytest.raises(ValueError, match=r"input: (\d+) inputs when planned, \d+ in "):
        shardtool.plan(copy, grown, resume=True, **OPTIONS)
    # (A plan killed while planning is made again: plan_file::tests, which knows whether the
    # file system's locks bind every host.)


def test_a_rerun_after_the_caption_list_changed_is_refused_not_reported_done(tmp_path: Path) -> None:
    images = sorted(SAMPLE.glob("*/*"))[:3]
    listing = tmp_path / "caps.jsonl"

    def write(captions: list) -> None:
        rows = [{"path": str(p), "text": c} for p, c in zip(images, captions)]
        listing.write_text("".join(json.dumps(r) + "\n" for r in rows))

    write(["a cat", "a dog", "a fox"])
    out = tmp_path / "out"
    shardtool.plan(listing, out, shard_samples=1, resize="crop:8x8")
    shardtool.pack_part(out, 0, 1)
    shardtool.merge(out)
    # Every shard is done; the captions are edited at the same size and the driver reruns.
    write(["A CAT", "a dog", "a fox"])
    for rerun in (
        lambda: shardtool.plan(listing, out, shard_samples=1, resize="crop:8x8", resume=True),
        lambda: shardtool.pack(listing, out, shard_samples=1, resize="crop:8x8", resume=True),
    ):
        with pytest.raises(ValueError, match="caps.jsonl changed since the plan was made"):
            rerun()
    # As it was, the rerun keeps the plan.
    write(["a cat", "a dog", "a fox"])
    shardtool.plan(listing, out, shard_samples=1, resize="crop:8x8", resume=True)


def test_resume_knows_the_input_folder_whatever_it_is_named_from(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The same folder by another spelling is the same input; another folder of the same name
    # (a rerun from another working directory) is not.
    here, there = tmp_path / "here", tmp_path / "there"
    shutil.copytree(SAMPLE, here / "data")
    shutil.copytree(SAMPLE / "flower", there / "data" / "flower")
    (tmp_path / "link").symlink_to(here)
    out = tmp_path / "out"
    monkeypatch.chdir(here)
    first = shardtool.plan("data", out, **OPTIONS)["plan"]
    for same in ["data/", "./data", str(here / "data"), str(tmp_path / "link" / "data")]:
        assert shardtool.plan(same, out, resume=True, **OPTIONS)["plan"] == first, same
    monkeypatch.chdir(there)
    with pytest.raises(ValueError, match="input"):
        shardtool.plan("data", out, resume=True, **OPTIONS)
    with pytest.raises(ValueError, match="input"):
        shardtool.pack("data", out, resume=True, **OPTIONS)


def test_pack_resumes_what_a_plan_and_one_part_left(single: Path, tmp_path: Path) -> None:
    out = tmp_path / "resumed"
    shardtool.plan(SAMPLE, out, **OPTIONS)
    shardtool.pack_part(out, 0, 2)
    with pytest.raises(ValueError, match="resume=True"):
        shardtool.pack(SAMPLE, out, **OPTIONS)
    with pytest.raises(ValueError, match="other inputs or options"):
        shardtool.pack(SAMPLE, out, resume=True, **dict(OPTIONS, resize="crop:20x20"))
    shardtool.pack(SAMPLE, out, resume=True, **OPTIONS)
    assert published(out) == published(single)
    assert not (out / "_plan").exists()


def test_the_ray_commands_errors_name_its_flags() -> None:
    # pack's messages name keyword arguments; the command's own say its flags instead, leaving
    # the same words in prose alone.
    from shardtool.ray import _flags

    assert _flags(ValueError("no row has it (drop_columns)")) == "no row has it (--drop-column)"
    assert _flags(ValueError("image_column names the path")) == "--image-column names the path"
    assert _flags(ValueError('keys "bogus": expected input or index')).startswith('--keys "bogus"')
    assert _flags(ValueError("quality must be >= 1")) == "--quality must be >= 1"
    assert _flags(ValueError("the keys of rows, in the seed order")) == "the keys of rows, in the seed order"
    assert _flags(ValueError("output /tmp/max_errors is not empty")) == "output /tmp/max_errors is not empty"
    assert _flags(ValueError("parts must be at least 1")) == "--parts must be at least 1"
    assert _flags(ValueError('resize: invalid --resize "x"')) == 'resize: invalid --resize "x"'
    # The command's own paths, as given, whatever words they hold.
    given = "/tmp/old max_errors"
    assert _flags(ValueError(f"{given}: no such file"), [given]) == f"{given}: no such file"
    assert _flags(ValueError("output run seed=1 is not empty"), ["run seed=1"]).endswith("run seed=1 is not empty")
