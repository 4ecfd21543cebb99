"""InstanceNorm1d / InstanceNorm2d (PyTorch's defaults: affine=False,
track_running_stats=False); unbatched input (C, ...) is accepted as PyTorch's."""

from .. import _functional_norm as FN
from ... import _kiln as _C
from .batchnorm import _NormBase

__all__ = ["InstanceNorm1d", "InstanceNorm2d"]


class _InstanceNorm(_NormBase):
    _spatial = 1

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=False,
                 track_running_stats=False, device=None, dtype=None):
        super().__init__(num_features, eps, momentum, affine, track_running_stats, device,
                         dtype)

    def forward(self, input):
        name = type(self).__name__
        batched_dims = self._spatial + 2
        if input.ndim not in (batched_dims - 1, batched_dims):
            raise _C.KilnValueError(f"{name}: expected {batched_dims - 1}D or {batched_dims}D "
                                    f"input (got {input.ndim}D input)")
        batched = input.ndim == batched_dims
        x = input if batched else input.unsqueeze(0)
        if x.shape[1] != self.num_features and self.affine:
            raise _C.KilnValueError(f"{name}: expected input's size at dim=1 to match "
                                    f"num_features ({self.num_features}), but got: "
                                    f"{x.shape[1]}.")
        if self.momentum is None:  # as PyTorch's (no cumulative average here)
            raise TypeError(f"{name}: instance_norm(): argument 'momentum' must be float, "
                            "not NoneType")
        momentum = self.momentum  # num_batches_tracked is kept but not counted, as PyTorch
        use_input_stats = self.training or not self.track_running_stats
        y = FN.instance_norm(x, self.running_mean, self.running_var, self.weight, self.bias,
                             use_input_stats, momentum, self.eps)
        return y if batched else y.squeeze(0)


class InstanceNorm1d(_InstanceNorm):
    _spatial = 1


class InstanceNorm2d(_InstanceNorm):
    _spatial = 2
