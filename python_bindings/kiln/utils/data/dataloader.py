"""DataLoader and default_collate, as torch.utils.data.

Batches are read in the main process: num_workers, pin_memory, prefetch_factor,
persistent_workers, timeout and worker_init_fn are accepted and do not change what
is produced (the same batches, in the same order, as with num_workers=0).
"""

import collections.abc

from ... import _kiln as _C
from .dataset import IterableDataset
from .sampler import BatchSampler, RandomSampler, SequentialSampler

__all__ = ["DataLoader", "default_collate"]


def default_collate(batch):
    """Stacks a list of samples: tensors (and numpy arrays) along a new dim 0, numbers
    into a 1-D tensor (int64 / float64 / bool as PyTorch), and tuples, lists and dicts
    field by field (a tuple's fields come back as a list, as PyTorch's); strings stay
    lists."""
    from ... import _functions

    elem = batch[0]
    if isinstance(elem, _C.Tensor):
        return _C.stack(list(batch), 0)
    if type(elem).__module__ == "numpy" and type(elem).__name__ == "ndarray":
        import numpy as np

        return _functions.tensor(np.stack(batch))
    if isinstance(elem, bool):
        return _functions.tensor(list(batch), dtype=_C.bool)
    if isinstance(elem, int):
        return _functions.tensor(list(batch), dtype=_C.int64)
    if isinstance(elem, float):
        return _functions.tensor(list(batch), dtype=_C.float64)
    if type(elem).__module__ == "numpy":  # numpy scalar
        import numpy as np

        return _functions.tensor(np.array(batch))
    if isinstance(elem, (str, bytes)):
        return list(batch)
    if isinstance(elem, collections.abc.Mapping):
        return {key: default_collate([d[key] for d in batch]) for key in elem}
    if isinstance(elem, tuple) and hasattr(elem, "_fields"):  # namedtuple
        return type(elem)(*(default_collate(list(s)) for s in zip(*batch)))
    if isinstance(elem, collections.abc.Sequence):
        size = len(elem)
        if any(len(e) != size for e in batch):
            raise RuntimeError("each element in list of batch should be of equal size")
        return [default_collate(list(s)) for s in zip(*batch)]  # a list, as PyTorch
    raise TypeError(f"default_collate: batch must contain tensors, numpy arrays, numbers, "
                    f"dicts or lists; found {type(elem)}")


def _check_int(name, value, positive):
    if not isinstance(value, int) or isinstance(value, bool) or value < (1 if positive else 0):
        kind = "positive" if positive else "non-negative"
        raise ValueError(f"DataLoader: {name} should be a {kind} integer value, but got "
                         f"{name}={value}")


class DataLoader:
    def __init__(self, dataset, batch_size=1, shuffle=None, sampler=None, batch_sampler=None,
                 num_workers=0, collate_fn=None, pin_memory=False, drop_last=False, timeout=0,
                 worker_init_fn=None, multiprocessing_context=None, generator=None, *,
                 prefetch_factor=None, persistent_workers=False, pin_memory_device=""):
        _check_int("num_workers", num_workers, False)
        if timeout < 0:
            raise ValueError("DataLoader: timeout option should be non-negative")
        self.dataset = dataset
        self.num_workers = num_workers
        self.pin_memory = pin_memory
        self.timeout = timeout
        self.worker_init_fn = worker_init_fn
        self.generator = generator
        self._iterable = isinstance(dataset, IterableDataset)
        if self._iterable:
            if shuffle not in (None, False):
                raise ValueError(f"DataLoader with IterableDataset: expected unspecified "
                                 f"shuffle option, but got shuffle={shuffle}")
            if sampler is not None or batch_sampler is not None:
                raise ValueError("DataLoader with IterableDataset: expected unspecified "
                                 "sampler / batch_sampler option")
        elif sampler is not None and shuffle:
            raise ValueError("sampler option is mutually exclusive with shuffle")
        if batch_sampler is not None:
            if batch_size != 1 or shuffle or sampler is not None or drop_last:
                raise ValueError("batch_sampler option is mutually exclusive with batch_size, "
                                 "shuffle, sampler, and drop_last")
            batch_size, drop_last = None, False
        elif batch_size is None and drop_last:
            raise ValueError("batch_size=None option disables auto-batching and is mutually "
                             "exclusive with drop_last")
        elif batch_size is not None:
            _check_int("batch_size", batch_size, True)
        if sampler is None and not self._iterable:
            sampler = RandomSampler(dataset, generator=generator) if shuffle \
                else SequentialSampler(dataset)
        if batch_size is not None and batch_sampler is None and not self._iterable:
            batch_sampler = BatchSampler(sampler, batch_size, drop_last)
        self.batch_size = batch_size
        self.drop_last = drop_last
        self.sampler = sampler
        self.batch_sampler = batch_sampler
        self._auto_collation = batch_sampler is not None or (self._iterable and batch_size)
        if collate_fn is None:
            collate_fn = default_collate if self._auto_collation else (lambda x: x)
        self.collate_fn = collate_fn

    def __iter__(self):
        if self._iterable:
            return self._iter_iterable()
        if self.batch_sampler is not None:
            return (self.collate_fn([self.dataset[i] for i in b]) for b in self.batch_sampler)
        return (self.collate_fn(self.dataset[i]) for i in self.sampler)

    def _iter_iterable(self):
        if not self.batch_size:
            for sample in self.dataset:
                yield self.collate_fn(sample)
            return
        batch = []
        for sample in self.dataset:
            batch.append(sample)
            if len(batch) == self.batch_size:
                yield self.collate_fn(batch)
                batch = []
        if batch and not self.drop_last:
            yield self.collate_fn(batch)

    def __len__(self):
        if self._iterable:
            n = len(self.dataset)
            if not self.batch_size:
                return n
            return n // self.batch_size if self.drop_last else -(-n // self.batch_size)
        if self.batch_sampler is not None:
            return len(self.batch_sampler)
        return len(self.sampler)
