"""kiln.Size: the type of ``Tensor.shape`` (a tuple, like torch.Size)."""


class Size(tuple):
    """A tuple of ints naming a tensor's sizes; prints as ``kiln.Size([2, 3])``."""

    __slots__ = ()

    def __new__(cls, sizes=()):
        return super().__new__(cls, (int(s) for s in sizes))

    def __repr__(self):
        return f"kiln.Size({list(self)})"

    def __getitem__(self, index):
        item = super().__getitem__(index)
        return Size(item) if isinstance(index, slice) else item

    def __add__(self, other):
        return Size(tuple(self) + tuple(other))

    def __radd__(self, other):
        return Size(tuple(other) + tuple(self))

    def numel(self):
        n = 1
        for s in self:
            n *= s
        return n
Size.__module__ = "kiln"
