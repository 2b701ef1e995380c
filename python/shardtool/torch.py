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
        return iter(self.loader)

    def __len__(self) -> int:
        return len(self.loader)

    def __getstate__(self) -> Dict[str, Any]:
        d = dict(self.__dict__)
        if multiprocessing.context.get_spawning_popen() is None:
            # Shared memory travels only to a process being started (a DataLoader worker);
            # another copy (deepcopy, a pickle to disk) takes the epoch's value.
            d["_epoch"] = int(self._epoch.value)
        return d

    def __setstate__(self, d: Dict[str, Any]) -> None:
        if isinstance(d["_epoch"], int):
            d["_epoch"] = multiprocessing.Value("Q", d["_epoch"], lock=False)
        self.__dict__.update(d)
        self.loader._shared_epoch = self._epoch

    def set_epoch(self, epoch: int) -> None:
        """Reads ``epoch`` from the next ``iter()``: call it on the dataset (or on its loader)
        before each epoch. DataLoader workers see it too, persistent ones included (the epoch is
        shared memory)."""
        self.loader.set_epoch(epoch)
        self._seen_epoch = epoch

    def state_dict(self) -> Dict[str, Any]:
        """The loader's position (of this worker's share inside a DataLoader worker)."""
        return self.loader.state_dict()

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        """Continues from ``state`` at the next ``iter()``."""
        self.loader.load_state_dict(state)
