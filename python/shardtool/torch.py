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
from typing import Any, Dict, Iterator

import torch.utils.data

from ._loader import Batch, Loader


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
        # Also shared: epoch + 1 of the last pass begun, and of the last finished, in a worker
        # process (0: none). The position of a pass there lives in the workers alone.
        self._worker_pass = multiprocessing.Value("Q", 0, lock=False)
        self._worker_done = multiprocessing.Value("Q", 0, lock=False)
        self._seen_epoch = loader.epoch
        # loader.set_epoch() (as a loop over the loader itself calls it) reaches the workers too.
        loader._shared_epoch = self._epoch

    def __iter__(self) -> Iterator[Batch]:
        info = torch.utils.data.get_worker_info()
        if info is not None and self.loader._output == "dlpack":
            # The worker would fail to pickle every batch and the DataLoader wait forever.
            raise TypeError(
                "output='dlpack' batches (shardtool.Tensor) cannot leave a DataLoader worker "
                "process (they do not pickle): use output='torch' or 'numpy', or num_workers=0"
            )
        self.loader._split = None if info is None or info.num_workers == 1 else (info.id, info.num_workers)
        epoch = int(self._epoch.value)
        pending = self.loader._resume
        if epoch != self._seen_epoch:
            # set_epoch() was called (in the main process) since this copy last looked.
            self._seen_epoch = epoch
            self.loader.set_epoch(epoch)
        elif pending is not None and pending["epoch"] < epoch:
            # A state of an earlier epoch than the one set: torchdata loads states at iter(),
            # after the set_epoch() a training loop calls once it has loaded its checkpoint.
            # Decided by epochs alone, so every DataLoader worker decides alike.
            self.loader.set_epoch(epoch)
        if info is None:
            return iter(self.loader)
        if self._worker_done.value == _mark(epoch) and self.loader._resume is None:
            # A fresh worker (not persistent) does not know this epoch was read: the Loader
            # warns of a pass reading it again, as it does in one process.
            self.loader._finished_epoch = self.loader.epoch
        self._worker_pass.value = _mark(epoch)
        return self._in_worker(iter(self.loader), epoch)

    def _in_worker(self, batches: Iterator[Batch], epoch: int) -> Iterator[Batch]:
        yield from batches
        self._worker_done.value = _mark(epoch)

    def __len__(self) -> int:
        return len(self.loader)

    def __getstate__(self) -> Dict[str, Any]:
        d = dict(self.__dict__)
        if multiprocessing.context.get_spawning_popen() is None:
            # Shared memory travels only to a process being started (a DataLoader worker);
            # another copy (deepcopy, a pickle to disk) takes the epoch's value.
            for name in ("_epoch", "_worker_pass", "_worker_done"):
                d[name] = int(getattr(self, name).value)
        return d

    def __setstate__(self, d: Dict[str, Any]) -> None:
        for name in ("_epoch", "_worker_pass", "_worker_done"):
            if isinstance(d.get(name, 0), int):
                d[name] = multiprocessing.Value("Q", d.get(name, 0), lock=False)
        self.__dict__.update(d)
        self.loader._shared_epoch = self._epoch

    def set_epoch(self, epoch: int) -> None:
        """Reads ``epoch`` from the next ``iter()``: call it on the dataset (or on its loader)
        before each epoch. DataLoader workers see it too, persistent ones included (the epoch is
        shared memory)."""
        self.loader.set_epoch(epoch)
        self._seen_epoch = epoch

    def state_dict(self) -> Dict[str, Any]:
        """The loader's position (of this worker's share inside a DataLoader worker).

        Called in the main process while this epoch is read in DataLoader worker processes
        (``num_workers > 0``), it raises ``RuntimeError``: the position is theirs, and a plain
        DataLoader cannot collect it (a state of this process would restart the epoch). Use
        torchdata's ``StatefulDataLoader``, whose ``state_dict()`` gathers every worker's, or
        save at an epoch boundary, after ``set_epoch(next_epoch)``."""
        in_main = torch.utils.data.get_worker_info() is None
        if in_main and self._worker_pass.value == _mark(int(self._epoch.value)):
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
            self._worker_pass.value = 0
