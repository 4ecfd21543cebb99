"""kiln.utils.data: Dataset, TensorDataset, DataLoader, samplers and default_collate
with torch.utils.data's names and behaviour."""

from . import distributed  # noqa: F401
from .dataloader import DataLoader, default_collate  # noqa: F401
from .dataset import (  # noqa: F401
    ConcatDataset,
    Dataset,
    IterableDataset,
    Subset,
    TensorDataset,
    random_split,
)
from .sampler import (  # noqa: F401
    BatchSampler,
    RandomSampler,
    Sampler,
    SequentialSampler,
    SubsetRandomSampler,
    WeightedRandomSampler,
)
from .distributed import DistributedSampler  # noqa: F401,E402
