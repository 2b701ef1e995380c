"""Driver of scripts/bench_python.sh: `shardtool bench`, the Python Loader and webdataset +
torchvision.io.decode_jpeg in a DataLoader on the same shards and cores, alternating, run after
run; prints each run's figures, then medians and ratios.

Each Python measurement runs in a fresh interpreter (its RSS is its own). Python overhead per
batch is the CPU time of the thread that iterates (Python code, the bindings, the DLPack
handover), which does nothing else; it is also shown as wall time per batch against
`shardtool bench` on a dataset of tiny images, where the Rust work per batch is small.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time
from typing import Any, Dict, List

ROW = re.compile(r"^(loader alone|memcpy \(1 thread\))\s+(\d+)\s+([\d.]+)\s+([\d.]+)")


def rss_mib() -> float:
    """This process's resident set now (not its peak), in MiB."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def loader_child(path: str, batch: int, cores: int, epochs: int) -> Dict[str, Any]:
    import torch  # noqa: F401  (imported before the clock starts, as in a training script)

    import shardtool

    loader = shardtool.Loader(path, batch_size=batch, workers=cores, seed=0, output="torch")
    samples = batches = 0
    start_cpu = 0.0
    rss: List[float] = []
    closed: List[float] = []
    t0, c0 = time.perf_counter(), time.thread_time()
    for e in range(epochs):
        loader.set_epoch(e)
        s0 = time.thread_time()
        it = iter(loader)
        start_cpu += time.thread_time() - s0
        for b in it:
            samples += len(b["key"])
            batches += 1
        del b
        # At the epoch's end (the reader's buffers still pooled), and after its reader is closed.
        rss.append(round(rss_mib(), 1))
        loader.close()
        closed.append(round(rss_mib(), 1))
    wall, cpu = time.perf_counter() - t0, time.thread_time() - c0
    return {
        "samples_s": samples / wall,
        "batches": batches,
        "wall_us_per_batch": wall / batches * 1e6,
        "thread_cpu_us_per_batch": cpu / batches * 1e6,
        "thread_cpu_us_per_batch_without_epoch_start": (cpu - start_cpu) / batches * 1e6,
        "epoch_start_cpu_ms": start_cpu / epochs * 1e3,
        "rss_mib": rss,
        "rss_closed_mib": closed,
    }


def peer_child(path: str, batch: int, cores: int, epochs: int) -> Dict[str, Any]:
    import glob

    import torch
    import torchvision.io
    import webdataset as wds

    shards = sorted(glob.glob(os.path.join(path, "*.tar")))

    def decode(s: Dict[str, Any]) -> Any:
        jpg = torch.frombuffer(bytearray(s["jpg"]), dtype=torch.uint8)
        return torchvision.io.decode_jpeg(jpg), int(s["cls"])

    ds = wds.WebDataset(shards, shardshuffle=False, nodesplitter=wds.split_by_node).map(decode).batched(batch)
    # Persistent workers: no worker start-up per epoch, the peer's best case.
    dl = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=cores, persistent_workers=True)
    samples = 0
    t0 = time.perf_counter()
    for _ in range(epochs):
        for _imgs, labels in dl:
            samples += len(labels)
    return {"samples_s": samples / (time.perf_counter() - t0), "shards": len(shards)}


def child(kind: str, path: str, a: argparse.Namespace) -> Dict[str, Any]:
    out = subprocess.run(
        [sys.executable, __file__, kind, path, str(a.batch), str(a.cores), str(a.epochs)],
        check=True,
        stdout=subprocess.PIPE,
        text=True,
    ).stdout
    return json.loads(out.strip().splitlines()[-1])


def cli_bench(path: str, a: argparse.Namespace, decode: bool) -> Dict[str, float]:
    cmd = [a.bin, "bench", path, "--batch", str(a.batch), "--workers", str(a.cores), "--epochs", str(a.epochs)]
    out = subprocess.run(cmd + (["--decode"] if decode else []), check=True, stdout=subprocess.PIPE, text=True).stdout
    rows = {}
    for line in out.splitlines():
        m = ROW.match(line)
        if m:
            rows[m.group(1)] = (int(m.group(2)), float(m.group(3)), float(m.group(4)))
    if "loader alone" not in rows or "memcpy (1 thread)" not in rows:
        sys.exit(f"bench_python: unexpected `shardtool bench` output:\n{out}")
    samples, sps, mbs = rows["loader alone"]
    return {
        "samples_s": sps,
        "mb_s": mbs,
        "us_per_batch": a.batch / sps * 1e6,
        "memcpy_mb_s": rows["memcpy (1 thread)"][2],
    }


def med(runs: List[Dict[str, Any]], key: str) -> float:
    return statistics.median(r[key] for r in runs)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--bin", required=True)
    p.add_argument("--tar", required=True)
    p.add_argument("--packed", required=True)
    p.add_argument("--tiny", required=True)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--cores", type=int, default=os.cpu_count())
    p.add_argument("--epochs", type=int, default=20)
    p.add_argument("--runs", type=int, default=3)
    a = p.parse_args()
    res: Dict[str, List[Dict[str, Any]]] = {}
    plan = [
        ("tar cli", lambda: cli_bench(a.tar, a, decode=True)),
        ("tar loader", lambda: child("loader", a.tar, a)),
        ("tar peer", lambda: child("peer", a.tar, a)),
        ("packed cli", lambda: cli_bench(a.packed, a, decode=False)),
        ("packed loader", lambda: child("loader", a.packed, a)),
        ("tiny cli", lambda: cli_bench(a.tiny, a, decode=False)),
        ("tiny loader", lambda: child("loader", a.tiny, a)),
    ]
    for run in range(1, a.runs + 1):
        print(f"-- run {run} of {a.runs}, load average {os.getloadavg()[0]:.2f}", flush=True)
        for name, fn in plan:
            r = fn()
            res.setdefault(name, []).append(r)
            print(f"{name:<14} {json.dumps(r)}", flush=True)

    def ratio(x: str, y: str) -> str:
        return f"{med(res[x], 'samples_s') / med(res[y], 'samples_s'):.2f}"

    print(f"\n== medians of {a.runs} runs ({a.epochs} epochs each, batch {a.batch}, {a.cores} cores)")
    for name in res:
        print(f"{name:<14} samples/s {med(res[name], 'samples_s'):>9.0f}")
    print(f"tar + JPEG decode: Loader / shardtool bench = {ratio('tar loader', 'tar cli')}")
    print(f"tar + JPEG decode: Loader / webdataset+torchvision = {ratio('tar loader', 'tar peer')}")
    print(f"tar + JPEG decode: shardtool bench / webdataset+torchvision = {ratio('tar cli', 'tar peer')}")
    print(f"packed 256x256 raw: Loader / shardtool bench = {ratio('packed loader', 'packed cli')}")
    packed_mb = med(res["packed cli"], "mb_s") / med(res["packed cli"], "samples_s")
    print(
        f"packed 256x256 raw MB/s: shardtool bench {med(res['packed cli'], 'mb_s'):.0f}, "
        f"Loader {med(res['packed loader'], 'samples_s') * packed_mb:.0f}, "
        f"memcpy (1 thread) {med(res['packed cli'], 'memcpy_mb_s'):.0f}"
    )
    for name in ("tar loader", "packed loader", "tiny loader"):
        print(
            f"{name}: iterating thread's CPU per batch {med(res[name], 'thread_cpu_us_per_batch'):.1f} µs, "
            f"{med(res[name], 'thread_cpu_us_per_batch_without_epoch_start'):.1f} µs without the epoch "
            f"starts ({med(res[name], 'epoch_start_cpu_ms'):.2f} ms CPU each)"
        )
    tiny = med(res["tiny loader"], "wall_us_per_batch") - med(res["tiny cli"], "us_per_batch")
    print(
        f"tiny packed: wall per batch, Loader {med(res['tiny loader'], 'wall_us_per_batch'):.1f} µs "
        f"- shardtool bench {med(res['tiny cli'], 'us_per_batch'):.1f} µs = {tiny:.1f} µs"
    )
    for name in ("tar loader", "packed loader"):
        for i, r in enumerate(res[name], 1):
            for what, key in (("at each epoch's end", "rss_mib"), ("after close()", "rss_closed_mib")):
                rss = r[key]
                tail = rss[1:] or rss
                print(
                    f"{name} run {i}: RSS MiB {what} {rss}; epochs 2-{len(rss)}: "
                    f"{min(tail):.1f}..{max(tail):.1f} ({(max(tail) - min(tail)) / min(tail) * 100:.1f}% spread), "
                    f"last vs first {(rss[-1] - rss[0]) / rss[0] * 100:+.1f}%"
                )


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] in ("loader", "peer"):
        kind, path, batch, cores, epochs = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:6])
        fn = loader_child if kind == "loader" else peer_child
        print(json.dumps(fn(path, batch, cores, epochs)))
    else:
        main()
