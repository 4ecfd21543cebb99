"""kiln.nn's layers, one file per family as in torch.nn.modules (module, container,
linear, conv, pooling, dropout, activation, normalization, loss, ...); kiln.nn
re-exports every name listed in __all__."""

from .module import Module, Parameter
from .container import ModuleDict, ModuleList, Sequential
from .linear import Embedding, Flatten, Identity, Linear
from .conv import Conv2d
from .pooling import AvgPool2d, MaxPool2d
from .dropout import Dropout
from .activation import GELU, LogSoftmax, MultiheadAttention, ReLU, SiLU, Sigmoid, Softmax, Tanh
from .normalization import GroupNorm, LayerNorm, RMSNorm
from .batchnorm import BatchNorm1d, BatchNorm2d
from .instancenorm import InstanceNorm1d, InstanceNorm2d
from .rnn import GRU, LSTM, RNN, GRUCell, LSTMCell, RNNBase, RNNCell, RNNCellBase
from .loss import BCEWithLogitsLoss, CrossEntropyLoss, MSELoss

__all__ = [
    "Parameter", "Module", "Sequential", "ModuleList", "ModuleDict", "Identity",
    "Linear", "LayerNorm", "Embedding", "Conv2d", "MaxPool2d", "AvgPool2d", "Dropout",
    "ReLU", "GELU", "SiLU", "Tanh", "Sigmoid", "Softmax", "LogSoftmax", "Flatten",
    "MultiheadAttention", "CrossEntropyLoss", "MSELoss", "BCEWithLogitsLoss",
    "GroupNorm", "RMSNorm", "BatchNorm1d", "BatchNorm2d", "InstanceNorm1d", "InstanceNorm2d",
    "RNNBase", "RNN", "LSTM", "GRU", "RNNCellBase", "RNNCell", "LSTMCell", "GRUCell",
]
