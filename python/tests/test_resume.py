"""``state_dict`` / ``load_state_dict``: resuming at any point yields the identical remainder."""

from __future__ import annotations

import json
import random
import time
from pathlib import Path
from typing import Any, Dict, List

import pytest
import torch.utils.data

import shardtool
import shardtool.torch
from conftest import samples


def _keys(batches: List[dict]) -> List[List[str]]:
    return [b["key"] for b in batches]


@pytest.mark.parametrize("name", ["tar", "packed"])
def test_resume_at_random_points_gives_the_identical_remainder(datasets: Dict[str, Path], name: str) -> None:
    path = datasets[name]
    opts = dict(batch_size=3, seed=21, epoch=2, rank=1, world_size=2, output="numpy", workers=2)
    full = _keys(list(shardtool.Loader(path, **opts)))
    rng = random.Random(5)
    for cut in sorted(rng.sample(range(len(full)), 4)) + [0, len(full)]:
        loader = shardtool.Loader(path, **opts)
        it = iter(loader)
        head = [next(it)["key"] for _ in range(cut)]
        state = json.loads(json.dumps(loader.state_dict()))  # JSON round trip
        assert state["samples"] == sum(len(k) for k in head)
        assert state["epoch"] == 2 and state["seed"] == 21
        fresh = shardtool.Loader(path, **opts)
        fresh.load_state_dict(state)
        assert fresh.state_dict()["samples"] == state["samples"]
        tail = _keys(list(fresh))
        assert head + tail == full, f"cut at {cut}"


def test_state_of_another_dataset_or_seed_raises(datasets: Dict[str, Path]) -> None:
    a = shardtool.Loader(datasets["tar"], batch_size=3, seed=1)
    it = iter(a)
    next(it)
    state = a.state_dict()
    with pytest.raises(ValueError, match="seed"):
        shardtool.Loader(datasets["tar"], batch_size=3, seed=2).load_state_dict(state)
    with pytest.raises(ValueError, match="another dataset"):
        shardtool.Loader(datasets["packed"], batch_size=3, seed=1).load_state_dict(state)
    with pytest.raises(ValueError, match="batch_size"):
        shardtool.Loader(datasets["tar"], batch_size=4, seed=1).load_state_dict(state)
    with pytest.raises(ValueError, match="drop_last=False, this loader has drop_last=True"):
        shardtool.Loader(datasets["tar"], batch_size=3, seed=1, drop_last=True).load_state_dict(state)
    edited = dict(state, reader=dict(state["reader"], drop_last="false"))
    with pytest.raises(ValueError, match="drop_last must be a bool, not 'false'"):
        shardtool.Loader(datasets["tar"], batch_size=3, seed=1, drop_last=True).load_state_dict(edited)
    with pytest.raises(ValueError, match="format"):
        shardtool.Loader(datasets["tar"], batch_size=3, seed=1).load_state_dict({"format": 99})
    # A damaged checkpoint: counts of the wrong type or range are refused, naming them.
    for key, bad in (("world_size", "1"), ("world_size", 1.5), ("samples", -100), ("epoch", True), ("split", [5, 2])):
        with pytest.raises(ValueError, match=f"state's {key} must be"):
            shardtool.Loader(datasets["tar"], batch_size=3, seed=1).load_state_dict(dict(state, **{key: bad}))
    # Wrapper and reader telling different positions (pieced together, edited): refused.
    for key, bad in (("epoch", 1), ("world_size", 2), ("rank", 1)):
        with pytest.raises(ValueError, match=f"state's {key} {bad} is not its reader's"):
            shardtool.Loader(datasets["tar"], batch_size=3, seed=1).load_state_dict(dict(state, **{key: bad}))
    # One claiming more batches delivered than the epoch has: refused at iter(), not an empty epoch.
    reader = json.loads(state["reader"]) if isinstance(state["reader"], str) else dict(state["reader"])
    reader["delivered_prefix"] = 10**6
    b = shardtool.Loader(datasets["tar"], batch_size=3, seed=1)
    b.load_state_dict(dict(state, reader=reader if not isinstance(state["reader"], str) else json.dumps(reader)))
    with pytest.raises(ValueError, match="counts 1000000 batches as delivered"):
        next(iter(b))


def test_a_state_of_another_order_is_refused_at_iter(datasets: Dict[str, Path]) -> None:
    opts = dict(batch_size=3, seed=1, world_size=2, output="numpy")
    zero = shardtool.Loader(datasets["tar"], rank=0, **opts)
    next(iter(zero))
    state = zero.state_dict()
    # One checkpoint saved on rank 0 and loaded on every rank: each rank goes on from its own
    # position (ranks step together), not from rank 0's samples.
    one = shardtool.Loader(datasets["tar"], rank=1, **opts)
    one.load_state_dict(state)
    own = [k for b in shardtool.Loader(datasets["tar"], rank=1, **opts) for k in b["key"]]
    assert [k for b in one for k in b["key"]] == own[3:]
    unshuffled = shardtool.Loader(datasets["tar"], rank=0, shuffle=False, **opts)
    unshuffled.load_state_dict(state)
    with pytest.raises(ValueError, match="shuffle: true in the state, false here"):
        iter(unshuffled)
    # The reader's own state (what `shardtool read --state-out` writes) is not a Loader's.
    with pytest.raises(ValueError, match="read --state-out"):
        shardtool.Loader(datasets["tar"], rank=0, **opts).load_state_dict(state["reader"])
    padded = shardtool.Loader(datasets["tar"], rank=0, remainder="pad", **opts)
    padded.load_state_dict(state)
    with pytest.raises(ValueError, match='remainder: drop in the state, pad here'):
        iter(padded)
    same = shardtool.Loader(datasets["tar"], rank=0, **opts)
    same.load_state_dict(state)
    full = [k for b in shardtool.Loader(datasets["tar"], rank=0, **opts) for k in b["key"]]
    assert [k for b in same for k in b["key"]] == full[3:]


def test_a_job_restarted_on_other_hosts_resumes_the_epoch_reading_each_sample_once(
    datasets: Dict[str, Path],
) -> None:
    # Rank 2's state of a world of 3, after two batches each, resumed by a world of 2 (through
    # the DataLoader wrapper's state protocol), then rank 0's of that by a world of 5.
    path = datasets["tar"]
    opts: Dict[str, Any] = dict(batch_size=4, seed=7, output="numpy")
    read: List[str] = []
    for rank in range(3):
        loader = shardtool.Loader(path, rank=rank, world_size=3, **opts)
        batches = iter(loader)
        read += [k for _ in range(2) for k in next(batches)["key"]]
        state = loader.state_dict()
    saved = []
    for rank in range(2):
        ds = shardtool.torch.IterableDataset(shardtool.Loader(path, rank=rank, world_size=2, **opts))
        ds.load_state_dict(state)
        batches = iter(torch.utils.data.DataLoader(ds, batch_size=None))
        read += list(next(batches)["key"])
        saved.append(ds.state_dict())
        del batches
    rest = []
    for rank in range(5):
        loader = shardtool.Loader(path, rank=rank, world_size=5, **opts)
        loader.load_state_dict(saved[0])
        rest.append([k for b in loader for k in b["key"]])
    assert len({len(r) for r in rest}) == 1, "every rank reads as many samples"
    everything = read + [k for r in rest for k in r]
    assert len(everything) == len(set(everything)), "no sample twice"
    # Left out: the remainders of the splits over 3, 2 and 5 ranks, each fewer than the ranks.
    assert 0 <= samples(path) - len(everything) < 3 + 2 + 5
    # The saved world sizes travel in the state: rank 1's state resumes alike.
    again = shardtool.Loader(path, rank=4, world_size=5, **opts)
    again.load_state_dict(saved[1])
    assert [k for b in again for k in b["key"]] == rest[4]


def test_close_keeps_the_position_and_a_second_iter_stops_the_first(datasets: Dict[str, Path]) -> None:
    opts = dict(batch_size=3, seed=4, output="numpy")
    loader = shardtool.Loader(datasets["tar"], **opts)
    it = iter(loader)
    head = [next(it)["key"] for _ in range(2)]
    loader.close()
    state = loader.state_dict()
    assert state["samples"] == 6 and state["reader"] is not None
    with pytest.raises(RuntimeError, match="closed"):
        next(it)
    resumed = shardtool.Loader(datasets["tar"], **opts)
    resumed.load_state_dict(state)
    full = [b["key"] for b in shardtool.Loader(datasets["tar"], **opts)]
    assert head + [b["key"] for b in resumed] == full
    # A second iter() mid-pass: the first iterator raises instead of ending early.
    first = iter(loader)
    next(first)
    peek = next(iter(loader))
    assert peek["key"] == full[0]
    with pytest.raises(RuntimeError, match="later iter"):
        next(first)


def test_worker_share_resumes_through_the_dataset_protocol(datasets: Dict[str, Path]) -> None:
    # What a StatefulDataLoader does per worker: the share's own state, restored in a loader of
    # the same share.
    path = datasets["packed"]
    opts = dict(batch_size=2, seed=3, output="numpy")
    ds = shardtool.torch.IterableDataset(shardtool.Loader(path, **opts))
    ds.loader._split = (1, 3)
    full = _keys(list(iter(ds.loader)))
    ds.loader._split = (1, 3)
    it = iter(ds.loader)
    head = [next(it)["key"] for _ in range(2)]
    state = ds.state_dict()
    other = shardtool.torch.IterableDataset(shardtool.Loader(path, **opts))
    other.load_state_dict(state)
    other.loader._split = (1, 3)
    assert head + _keys(list(iter(other.loader))) == full
    # A state of one share does not resume another.
    wrong = shardtool.Loader(path, **opts)
    wrong.load_state_dict(state)
    wrong._split = (0, 3)
    with pytest.raises(ValueError, match="share"):
        iter(wrong)
    assert isinstance(ds, torch.utils.data.IterableDataset)


def test_a_state_saved_after_set_epoch_names_its_own_pass(datasets: Dict[str, Path]) -> None:
    opts = dict(batch_size=3, seed=4, output="numpy")
    loader = shardtool.Loader(datasets["tar"], **opts)
    it = iter(loader)
    next(it)
    loader.set_epoch(1)  # for the next pass; the position is still epoch 0's
    state = loader.state_dict()
    assert state["epoch"] == 0
    fresh = shardtool.Loader(datasets["tar"], **opts)
    fresh.load_state_dict(state)
    rest = [b["key"] for b in fresh]
    full = [b["key"] for b in shardtool.Loader(datasets["tar"], **opts)]
    assert rest == full[1:]


def test_a_failed_iter_keeps_the_loaded_position(datasets: Dict[str, Path], tmp_path: Path) -> None:
    # A transient failure at the resuming iter() (a manifest not fetched) must not throw the
    # loaded position away: the retry resumes, and a state saved meanwhile is still the position.
    import shutil

    ds = tmp_path / "ds"
    shutil.copytree(datasets["tar"], ds)
    opts = dict(batch_size=5, seed=1, output="numpy")
    loader = shardtool.Loader(ds, **opts)
    it = iter(loader)
    head = [next(it)["key"] for _ in range(4)]
    state = loader.state_dict()
    loader.close()
    resumed = shardtool.Loader(ds, **opts)
    resumed.load_state_dict(state)
    (ds / "manifest.json").rename(ds / "away.json")
    with pytest.raises(FileNotFoundError):
        iter(resumed)
    (ds / "away.json").rename(ds / "manifest.json")
    assert resumed.state_dict()["samples"] == 20
    rest = [b["key"] for b in resumed]
    assert head + rest == [b["key"] for b in shardtool.Loader(ds, **opts)]


def test_iters_started_at_once_from_two_threads_read_one_pass(
    datasets: Dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    # One iter() at a time: of two started together, the later stops the earlier, which raises
    # rather than reading a second, parallel pass. A pass waits a second on one sample, so the
    # two passes overlap however the threads are scheduled (a pass of 45 samples could otherwise
    # end before the other thread calls iter(), and two whole passes one after another are right).
    import threading

    from conftest import all_keys, slow_readers

    slow_readers(monkeypatch, all_keys(datasets["tar"])[22], 1.0)
    loader = shardtool.Loader(datasets["tar"], batch_size=3, seed=2, output="numpy")
    counts: List[object] = []
    ready = threading.Barrier(2)

    def run() -> None:
        ready.wait()
        try:
            counts.append(sum(len(b["key"]) for b in iter(loader)))
        except RuntimeError as e:
            counts.append(e)

    threads = [threading.Thread(target=run) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    whole = [c for c in counts if isinstance(c, int) and c == 45]
    assert len(whole) == 1, counts


def test_close_from_another_thread_keeps_the_position_of_a_waiting_iteration(
    datasets: Dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The iterating thread waits for a slow batch while another thread closes the loader: the
    # position of the 20 samples handed out must survive (it was the epoch's start).
    import threading

    from conftest import all_keys, slow_readers

    path = datasets["tar"]
    keys = all_keys(path)
    plain = slow_readers(monkeypatch, keys[22], 3.0)
    opts = dict(batch_size=5, shuffle=False, output="numpy", workers=1)
    loader = shardtool.Loader(path, **opts)
    got: List[str] = []
    done = threading.Event()

    def run() -> None:
        try:
            for b in loader:
                got.extend(b["key"])
        except RuntimeError:
            pass
        done.set()

    t = threading.Thread(target=run)
    t.start()
    deadline = time.monotonic() + 10
    while len(got) < 20 and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.3)
    loader.close()
    t.join(10)
    assert done.is_set() and got == keys[:20]
    state = loader.state_dict()
    assert state["samples"] == 20 and state["reader"] is not None, state
    plain()
    resumed = shardtool.Loader(path, **opts)
    resumed.load_state_dict(state)
    assert [k for b in resumed for k in b["key"]] == keys[20:]


def test_state_dict_from_a_checkpointing_thread_never_finds_the_reader_busy(datasets: Dict[str, Path]) -> None:
    # The position is recorded as each batch is handed out: a state taken from another thread
    # never finds the reader busy, however long the iterating thread waits in it.
    import threading

    loader = shardtool.Loader(
        datasets["packed"], batch_size=4, seed=1, workers=1, prefetch=1,
        transform="random-resized-crop:32", output="numpy",
    )
    errors: List[BaseException] = []
    states: List[Dict[str, object]] = []
    stop = threading.Event()

    def checkpoint() -> None:
        while not stop.is_set():
            try:
                states.append(loader.state_dict())
            except BaseException as e:  # noqa: BLE001 - any failure is the finding
                errors.append(e)
            time.sleep(0.0005)

    t = threading.Thread(target=checkpoint)
    t.start()
    try:
        for epoch in range(5):
            loader.set_epoch(epoch)
            for _ in loader:
                time.sleep(0.002)  # a training step
    finally:
        stop.set()
        t.join()
    assert not errors, errors[:3]
    assert len(states) > 10


def test_a_pass_left_early_stops_its_reader_and_keeps_its_position(datasets: Dict[str, Path]) -> None:
    path = datasets["packed"]
    loader = shardtool.Loader(path, batch_size=4, seed=2, output="numpy")
    whole = [k for b in shardtool.Loader(path, batch_size=4, seed=2, output="numpy") for k in b["key"]]
    it = iter(loader)
    seen = [k for _ in range(3) for k in next(it)["key"]]
    # Dropped (as `break` drops a for loop's iterator, or a DataLoader worker ends): the reader
    # stops now, releasing its threads, shard locks and cache room, not at the next iter().
    del it
    assert loader._reader is None
    state = loader.state_dict()
    assert state["samples"] == 12
    resumed = shardtool.Loader(path, batch_size=4, seed=2, output="numpy")
    resumed.load_state_dict(state)
    assert seen + [k for b in resumed for k in b["key"]] == whole
