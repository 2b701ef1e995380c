"""``shardtool.torch.IterableDataset``: a Loader inside ``torch.utils.data.DataLoader``.

The recommended use is the Loader itself (or this wrapper) with ``num_workers=0``: Rust threads
already decode in parallel, with no pickling and no shared memory. With ``num_workers=N`` each
worker process reads a disjoint share of its rank's batches (batch ``i`` goes to worker
``i mod N``), so every batch is read exactly once across ranks and workers, and the DataLoader's
round-robin hands them out in the same order as with one process. The reader threads start in the
worker at its first ``iter()``, never before a fork.
"""

from __future__ import annotations

from typing import Any, Dict, Iterator

import torch.utils.data

from ._loader import Batch, Loader


class IterableDataset(torch.utils.data.IterableDataset):  # type: ignore[type-arg]
    """Wraps a :class:`shardtool.Loader` for ``DataLoader(dataset, batch_size=None, ...)``.

    ``len()`` is the number of batches of this rank per epoch (over all workers together).
    ``state_dict``/``load_state_dict`` follow torchdata's ``Stateful`` protocol, so a
    ``StatefulDataLoader`` saves and restores each worker's position.
    """

    def __init__(self, loader: Loader) -> None:
        if not isinstance(loader, Loader):
            raise TypeError(f"expected a shardtool.Loader, not {type(loader).__name__}")
        super().__init__()
        self.loader = loader

    def __iter__(self) -> Iterator[Batch]:
        info = torch.utils.data.get_worker_info()
        if info is not None and self.loader._output == "dlpack":
            # The worker would fail to pickle every batch and the DataLoader wait forever.
            raise TypeError(
                "output='dlpack' batches (shardtool.Tensor) cannot leave a DataLoader worker "
                "process (they do not pickle): use output='torch' or 'numpy', or num_workers=0"
            )
        self.loader._split = None if info is None or info.num_workers == 1 else (info.id, info.num_workers)
        return iter(self.loader)

    def __len__(self) -> int:
        return len(self.loader)

    def set_epoch(self, epoch: int) -> None:
        """Reads ``epoch`` from the next ``iter()`` (call it on the dataset before each epoch).
        With ``persistent_workers=True`` the workers keep the copy of the dataset they started
        with and this call never reaches them, so every epoch would repeat one order: make a new
        DataLoader each epoch, or use ``num_workers=0`` (the Rust threads already decode in
        parallel)."""
        self.loader.set_epoch(epoch)

    def state_dict(self) -> Dict[str, Any]:
        """The loader's position (of this worker's share inside a DataLoader worker)."""
        return self.loader.state_dict()

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        """Continues from ``state`` at the next ``iter()``."""
        self.loader.load_state_dict(state)
