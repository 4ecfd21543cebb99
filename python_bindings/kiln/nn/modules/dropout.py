"""Dropout."""

from .. import _functional_spatial as FS
from .. import functional as F
from ... import _kiln as _C
from .module import Module


class Dropout(Module):
    def __init__(self, p=0.5, inplace=False):
        super().__init__()
        if p < 0 or p > 1:
            raise _C.KilnValueError(f"dropout probability has to be between 0 and 1, but got {p}")
        self.p = p
        self.inplace = inplace

    def forward(self, input):
        return F.dropout(input, self.p, self.training, self.inplace)

    def extra_repr(self):
        return f"p={self.p}, inplace={self.inplace}"


class Dropout1d(Dropout):
    """Zeroes whole channels of (N, C, L) / (C, L) input."""

    def forward(self, input):
        return FS.dropout1d(input, self.p, self.training, self.inplace)


class Dropout2d(Dropout):
    """Zeroes whole channels of (N, C, H, W) / (C, H, W) input."""

    def forward(self, input):
        return FS.dropout2d(input, self.p, self.training, self.inplace)
