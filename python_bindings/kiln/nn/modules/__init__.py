"""kiln.nn's layers, one file per family as in torch.nn.modules (module, container,
linear, conv, pooling, dropout, activation, normalization, loss, ...); kiln.nn
re-exports every name listed in __all__."""

from .module import Module, Parameter
from .container import ModuleDict, ModuleList, ParameterDict, ParameterList, Sequential
from .linear import Embedding, Flatten, Identity, Linear, Unflatten
from .conv import Conv1d, Conv2d
from .conv_transpose import ConvTranspose1d, ConvTranspose2d
from .pooling import AdaptiveAvgPool1d, AdaptiveAvgPool2d, AvgPool2d, MaxPool2d
from .dropout import Dropout, Dropout1d, Dropout2d
from .activation import (
    CELU, ELU, GELU, GLU, SELU, Hardshrink, Hardsigmoid, Hardswish, Hardtanh, LeakyReLU,
    LogSigmoid, LogSoftmax, Mish, MultiheadAttention, PReLU, ReLU, ReLU6, SiLU, Sigmoid,
    Softmax, Softmin, Softplus, Softshrink, Softsign, Tanh, Tanhshrink, Threshold)
from .upsampling import (
    PixelShuffle, PixelUnshuffle, Upsample, UpsamplingBilinear2d, UpsamplingNearest2d)
from .normalization import GroupNorm, LayerNorm, RMSNorm
from .batchnorm import BatchNorm1d, BatchNorm2d
from .instancenorm import InstanceNorm1d, InstanceNorm2d
from .transformer import (
    Transformer, TransformerDecoder, TransformerDecoderLayer, TransformerEncoder,
    TransformerEncoderLayer)
from .rnn import GRU, LSTM, RNN, GRUCell, LSTMCell, RNNBase, RNNCell, RNNCellBase
from .loss import (
    BCELoss, BCEWithLogitsLoss, CrossEntropyLoss, HuberLoss, KLDivLoss, L1Loss, MSELoss,
    NLLLoss, SmoothL1Loss)

__all__ = [
    "Parameter", "Module", "Sequential", "ModuleList", "ModuleDict", "Identity",
    "Linear", "LayerNorm", "Embedding", "Conv2d", "MaxPool2d", "AvgPool2d", "Dropout",
    "ReLU", "GELU", "SiLU", "Tanh", "Sigmoid", "Softmax", "LogSoftmax", "Flatten",
    "MultiheadAttention", "CrossEntropyLoss", "MSELoss", "BCEWithLogitsLoss",
    "GroupNorm", "RMSNorm", "BatchNorm1d", "BatchNorm2d", "InstanceNorm1d", "InstanceNorm2d",
    "RNNBase", "RNN", "LSTM", "GRU", "RNNCellBase", "RNNCell", "LSTMCell", "GRUCell",
    "ParameterList", "ParameterDict", "Unflatten", "Conv1d", "AdaptiveAvgPool1d",
    "AdaptiveAvgPool2d", "Dropout1d", "Dropout2d", "CELU", "ELU", "GLU", "SELU", "Hardshrink",
    "Hardsigmoid", "Hardswish", "Hardtanh", "LeakyReLU", "LogSigmoid", "Mish", "PReLU",
    "ReLU6", "Softmin", "Softplus", "Softshrink", "Softsign", "Tanhshrink", "Threshold",
    "PixelShuffle", "PixelUnshuffle", "Upsample", "UpsamplingBilinear2d",
    "UpsamplingNearest2d", "BCELoss", "HuberLoss", "KLDivLoss", "L1Loss", "NLLLoss",
    "SmoothL1Loss", "Transformer", "TransformerDecoder", "TransformerDecoderLayer",
    "TransformerEncoder", "TransformerEncoderLayer", "ConvTranspose1d", "ConvTranspose2d",
]
