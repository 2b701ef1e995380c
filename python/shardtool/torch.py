"""``shardtool.torch.IterableDataset``: a Loader inside ``torch.utils.data.DataLoader``.

The recommended use is the Loader itself (or this wrapper) with ``num_workers=0``: Rust threads
already decode in parallel, with no pickling and no shared memory. With ``num_workers=N`` each
worker process reads a disjoint share of its rank's batches (batch ``i`` goes to worker
``i mod N``), so every batch is read exactly once across ranks and workers, and the DataLoader's
round-robin hands them out in the same order as with one process. The reader threads start in the
worker at its first ``iter()``, never before a fork.
"""

from __future__ import annotations

import multiprocessing
import os
from typing import Any, Dict, Iterator

import torch.utils.data

from ._loader import Batch, Loader
from ._options import Int


def _mark(epoch: int) -> int:
    """How the shared values name a pass of ``epoch`` (0 is none; the last epoch wraps to it)."""
    return (epoch + 1) % 2**64


class IterableDataset(torch.utils.data.IterableDataset):  # type: ignore[type-arg]
    """Wraps a :class:`shardtool.Loader` for ``DataLoader(dataset, batch_size=None, ...)``.

    ``len()`` is the number of batches of this rank per epoch (over all workers together).
    ``state_dict``/``load_state_dict`` follow torchdata's ``Stateful`` protocol, so a
    ``StatefulDataLoader`` saves and restores each worker's position. torchdata applies a loaded
    state at ``iter()``, after the ``set_epoch()`` a training loop calls once it has loaded its
    checkpoint: a state of an earlier epoch than the one set is then dropped, and the set epoch
    read from its start. To go back to an earlier epoch's checkpoint, set that epoch too.
    """

    def __init__(self, loader: Loader) -> None:
        if not isinstance(loader, Loader):
            raise TypeError(f"expected a shardtool.Loader, not {type(loader).__name__}")
        super().__init__()
        self.loader = loader
        # The epoch in shared memory: DataLoader workers (persistent ones included) hold their
        # own copy of this object, and read the epoch set_epoch() wrote here at each iter().
        self._epoch = multiprocessing.Value("Q", loader.epoch, lock=False)
        # And how many times set_epoch() was called: a worker told to read the epoch it has just
        # read reads it again as asked, without the warning of a pass repeating it unasked.
        self._sets = multiprocessing.Value("Q", 0, lock=False)
        # Also shared, of passes in DataLoader worker processes (whose position is theirs
        # alone): [epoch mark of the last begun (_mark), workers in a pass of it, epoch mark of
        # the last finished, workers that finished a pass of that].
        # Its lock is made in the spawn context: one made in the fork context (the default)
        # refuses to travel to spawned workers; a forked one inherits either.
        self._workers = multiprocessing.get_context("spawn").Array("Q", 4)
        self._seen_epoch, self._seen_sets = loader.epoch, 0
        # The process whose DataLoader workers share these values: another that was handed this
        # object (a rank started by torch.multiprocessing.spawn) makes its own at first use.
        self._owner = os.getpid()
        # loader.set_epoch() (as a loop over the loader itself calls it) reaches the workers too.
        loader._add_epoch_hook(self._epoch_set)

    def _own(self) -> None:
        """Gives a process handed this object (not a DataLoader worker) shared values of its own,
        so that ranks started with one copy each do not set one another's epoch."""
        if self._owner == os.getpid() or torch.utils.data.get_worker_info() is not None:
            return
        self._epoch = multiprocessing.Value("Q", int(self._epoch.value), lock=False)
        self._sets = multiprocessing.Value("Q", int(self._sets.value), lock=False)
        self._workers = multiprocessing.get_context("spawn").Array("Q", 4)
        self._owner = os.getpid()

    def __iter__(self) -> Iterator[Batch]:
        info = torch.utils.data.get_worker_info()
        self._own()
        if info is not None and self.loader._output == "dlpack":
            # The worker would fail to pickle every batch and the DataLoader wait forever.
            raise TypeError(
                "output='dlpack' batches (shardtool.Tensor) cannot leave a DataLoader worker "
                "process (they do not pickle): use output='torch' or 'numpy', or num_workers=0"
            )
        self.loader._split = None if info is None or info.num_workers == 1 else (info.id, info.num_workers)
        epoch, sets = int(self._epoch.value), int(self._sets.value)
        pending = self.loader._resume
        if (epoch, sets) != (self._seen_epoch, self._seen_sets):
            # set_epoch() was called (in the main process) since this copy last looked.
            self._seen_epoch, self._seen_sets = epoch, sets
            self.loader._set_epoch(epoch)
        elif pending is not None and pending["epoch"] < epoch:
            # A state of an earlier epoch than the one set: torchdata loads states at iter(),
            # after the set_epoch() a training loop calls once it has loaded its checkpoint.
            # Decided by epochs alone, so every DataLoader worker decides alike.
            self.loader._set_epoch(epoch)
        if info is None:
            return iter(self.loader)
        m, w = _mark(epoch), self._workers
        with w.get_lock():
            # Every worker finished a pass of this epoch before: it is read again.
            again = w[2] == m and w[3] >= info.num_workers
            if w[0] != m:
                w[0], w[1] = m, 0
            w[1] += 1
        if again and self.loader._resume is None:
            # A fresh worker (not persistent) does not know this epoch was read: the Loader
            # warns of a pass reading it again, as it does in one process.
            self.loader._finished_epoch = self.loader.epoch
        return self._in_worker(iter(self.loader), m)

    def _in_worker(self, batches: Iterator[Batch], m: int) -> Iterator[Batch]:
        yield from batches
        w = self._workers
        with w.get_lock():
            if w[0] == m and w[1] > 0:
                w[1] -= 1
            if w[2] != m:
                w[2], w[3] = m, 0
            w[3] += 1

    def __len__(self) -> int:
        return len(self.loader)

    def __getstate__(self) -> Dict[str, Any]:
        if multiprocessing.context.get_spawning_popen() is not None:
            # Shared memory travels only to a process being started (a DataLoader worker): a
            # rank handing this to the workers it starts hands its own values.
            self._own()
            return dict(self.__dict__)
        # Another copy (deepcopy, a pickle to disk) takes the values themselves.
        d = dict(self.__dict__)
        d["_epoch"] = int(self._epoch.value)
        d["_sets"] = int(self._sets.value)
        d["_workers"] = self._workers[:]
        return d

    def __setstate__(self, d: Dict[str, Any]) -> None:
        if isinstance(d["_epoch"], int) or "_owner" not in d:
            # A copy with values of its own (deepcopy, a pickle to disk) is theirs.
            d["_owner"] = os.getpid()
        if isinstance(d["_epoch"], int):
            d["_epoch"] = multiprocessing.Value("Q", d["_epoch"], lock=False)
        if isinstance(d.get("_sets", 0), int):
            d["_sets"] = multiprocessing.Value("Q", d.get("_sets", 0), lock=False)
        if isinstance(d.get("_workers", []), list):
            d["_workers"] = multiprocessing.get_context("spawn").Array("Q", d.get("_workers") or 4)
        self.__dict__.update(d)
        self.loader._add_epoch_hook(self._epoch_set)

    def set_epoch(self, epoch: Int) -> None:
        """Reads ``epoch`` from the next ``iter()``: call it on the dataset (or on its loader)
        before each epoch. DataLoader workers see it too, persistent ones included (the epoch is
        shared memory)."""
        self.loader.set_epoch(epoch)

    def _epoch_set(self, epoch: int) -> None:
        """Shares an epoch set on the loader (or here) with the DataLoader workers."""
        if torch.utils.data.get_worker_info() is not None:
            return
        self._own()
        self._epoch.value = epoch
        self._sets.value = (self._sets.value + 1) % 2**64
        self._seen_epoch, self._seen_sets = epoch, int(self._sets.value)
        with self._workers.get_lock():
            # A pass broken off in the workers leaves its count, a pass read to its end its
            # mark: the epoch set starts afresh.
            self._workers[1] = 0
            self._workers[2] = self._workers[3] = 0

    def state_dict(self) -> Dict[str, Any]:
        """The loader's position (of this worker's share inside a DataLoader worker).

        Called in the main process in the middle of an epoch read in DataLoader worker
        processes (``num_workers > 0``), it raises ``RuntimeError``: the position is theirs, and
        a plain DataLoader cannot collect it (a state of this process would restart the epoch).
        Use torchdata's ``StatefulDataLoader``, whose ``state_dict()`` gathers every worker's, or
        save at an epoch boundary (a state saved once the epoch is read, then loaded after
        ``set_epoch(next_epoch)``, reads the next epoch whole)."""
        in_main = torch.utils.data.get_worker_info() is None
        w, m = self._workers, _mark(int(self._epoch.value))
        mid_epoch = w[0] == m and w[1] > 0 and self.loader.__dict__.get("_reader") is None
        if in_main and mid_epoch:
            raise RuntimeError(
                f"epoch {int(self._epoch.value)} is read in DataLoader worker processes, "
                "which hold its position: a plain DataLoader cannot collect it (this process's "
                "state would restart the epoch); use torchdata's StatefulDataLoader, whose "
                "state_dict() gathers every worker's, num_workers=0, or save after "
                "set_epoch(next_epoch)"
            )
        return self.loader.state_dict()

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        """Continues from ``state`` at the next ``iter()``."""
        self.loader.load_state_dict(state)
        if torch.utils.data.get_worker_info() is None:
            with self._workers.get_lock():
                self._workers[0] = self._workers[1] = 0
