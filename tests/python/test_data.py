"""kiln.utils.data against torch.utils.data: the batches of a DataLoader without
shuffling (values, dtypes, structure of default_collate for tensors, numbers, tuples,
dicts, strings), drop_last, lengths, batch_sampler and samplers; shuffling covers every
sample once per epoch, differs between epochs and repeats with a seeded Generator;
IterableDataset; random_split; PyTorch's error types for bad arguments."""

import numpy as np
import pytest

import kiln
from helpers import assert_close, k, requires_torch, t, torch

pytestmark = requires_torch

from kiln.utils.data import (  # noqa: E402
    BatchSampler, DataLoader, Dataset, IterableDataset, SequentialSampler, TensorDataset,
    WeightedRandomSampler, default_collate, random_split)


def compare_batches(kb, tb):
    if isinstance(tb, torch.Tensor):
        assert isinstance(kb, kiln.Tensor)
        assert_close(kb, tb)
    elif isinstance(tb, dict):
        assert kb.keys() == tb.keys()
        for key in tb:
            compare_batches(kb[key], tb[key])
    elif isinstance(tb, (list, tuple)):
        assert type(kb) is type(tb) and len(kb) == len(tb)
        for a, b in zip(kb, tb):
            compare_batches(a, b)
    else:
        assert kb == tb


@pytest.mark.parametrize("batch_size,drop_last", [(4, False), (4, True), (1, False), (10, False)])
def test_tensor_dataset_loader_matches_torch(rng, batch_size, drop_last):
    x = rng.standard_normal((10, 3)).astype(np.float32)
    y = rng.integers(0, 5, 10)
    kl = DataLoader(TensorDataset(k(x), k(y)), batch_size=batch_size, drop_last=drop_last,
                    num_workers=2, pin_memory=False)
    tl = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(t(x), t(y)),
                                     batch_size=batch_size, drop_last=drop_last)
    assert len(kl) == len(tl)
    kb, tb = list(kl), list(tl)
    assert len(kb) == len(tb)
    for a, b in zip(kb, tb):
        compare_batches(a, b)


class Mixed:
    """Samples of every kind default_collate handles (its own class per library)."""

    def __init__(self, lib, rng):
        self.lib = lib
        self.rows = rng.standard_normal((7, 2)).astype(np.float32)

    def __len__(self):
        return 7

    def __getitem__(self, i):
        return {"x": self.lib.tensor(self.rows[i]), "i": i, "f": float(i) / 2, "b": i % 2 == 0,
                "name": f"s{i}", "pair": (i, self.rows[i])}


def test_default_collate_matches_torch(rng):
    kl = DataLoader(Mixed(kiln, np.random.default_rng(0)), batch_size=3)
    tl = torch.utils.data.DataLoader(Mixed(torch, np.random.default_rng(0)), batch_size=3)
    for a, b in zip(kl, tl):
        compare_batches(a, b)
    assert default_collate([1, 2]).dtype == kiln.int64
    assert default_collate([1.0, 2.0]).dtype == kiln.float64


def test_shuffle_covers_each_sample_once_and_changes_per_epoch():
    data = TensorDataset(kiln.arange(50))
    kiln.manual_seed(0)
    loader = DataLoader(data, batch_size=8, shuffle=True)
    epochs = [np.concatenate([b[0].numpy() for b in loader]) for _ in range(2)]
    for e in epochs:
        np.testing.assert_array_equal(np.sort(e), np.arange(50))
    assert not np.array_equal(epochs[0], epochs[1])
    orders = []
    for _ in range(2):
        g = kiln.Generator().manual_seed(42)
        orders.append(np.concatenate([b[0].numpy() for b in
                                      DataLoader(data, batch_size=8, shuffle=True, generator=g)]))
    np.testing.assert_array_equal(orders[0], orders[1])


def test_batch_sampler_sampler_and_collate_fn():
    data = TensorDataset(kiln.arange(10))
    bs = BatchSampler(SequentialSampler(range(10)), 3, drop_last=True)
    loader = DataLoader(data, batch_sampler=bs, collate_fn=lambda s: [int(v[0]) for v in s])
    assert list(loader) == [[0, 1, 2], [3, 4, 5], [6, 7, 8]]
    assert list(BatchSampler(range(5), 2, False)) == list(
        torch.utils.data.BatchSampler(range(5), 2, False))
    w = WeightedRandomSampler([0.0, 1.0, 0.0, 1.0], 200, generator=kiln.Generator())
    assert set(w) <= {1, 3}
    unbatched = DataLoader(data, batch_size=None)
    assert [int(v[0]) for v in unbatched] == list(range(10))


def Stream(lib, n):
    base = IterableDataset if lib is kiln else torch.utils.data.IterableDataset

    class _Stream(base):
        def __iter__(self):
            return iter(lib.tensor([float(i), float(-i)]) for i in range(n))

    return _Stream()


def test_iterable_dataset_matches_torch():
    kb = list(DataLoader(Stream(kiln, 7), batch_size=3))
    tb = list(torch.utils.data.DataLoader(Stream(torch, 7), batch_size=3))
    for a, b in zip(kb, tb):
        compare_batches(a, b)


def test_random_split_partitions():
    parts = random_split(range(10), [0.5, 0.3, 0.2], generator=kiln.Generator().manual_seed(1))
    assert [len(p) for p in parts] == [5, 3, 2]
    assert sorted(i for p in parts for i in p) == list(range(10))
    with pytest.raises(ValueError, match="lengths"):
        random_split(range(10), [3, 3])


class Plain(Dataset):
    def __len__(self):
        return 4

    def __getitem__(self, i):
        return i


@pytest.mark.parametrize("kwargs", [
    dict(batch_size=0), dict(sampler=[0, 1], shuffle=True), dict(num_workers=-1),
    dict(batch_sampler=[[0]], batch_size=2), dict(batch_size=None, drop_last=True)])
def test_loader_errors_match_torch_types(kwargs):
    with pytest.raises(Exception) as et:
        torch.utils.data.DataLoader(Plain(), **kwargs)
    with pytest.raises(et.type):
        DataLoader(Plain(), **kwargs)
