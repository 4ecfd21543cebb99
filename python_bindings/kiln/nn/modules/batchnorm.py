"""BatchNorm1d / BatchNorm2d with PyTorch's parameters, buffers and update rule:
weight, bias (affine), running_mean, running_var (unbiased), num_batches_tracked;
momentum=None is the cumulative average; eval() normalizes with the running stats."""

from .. import _functional_norm as FN
from ... import _kiln as _C
from .module import Module, Parameter, _factory_kw, _no_grad

__all__ = ["BatchNorm1d", "BatchNorm2d"]


class _NormBase(Module):
    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True,
                 track_running_stats=True, device=None, dtype=None):
        super().__init__()
        if not isinstance(num_features, int) or num_features <= 0:
            raise _C.KilnValueError(f"{type(self).__name__}: num_features must be a positive "
                                    f"int, got {num_features!r}")
        self.num_features = num_features
        self.eps = eps
        self.momentum = momentum
        self.affine = affine
        self.track_running_stats = track_running_stats
        kw = _factory_kw(device, dtype)
        if affine:
            self.weight = Parameter(_C.ones((num_features,), **kw))
            self.bias = Parameter(_C.zeros((num_features,), **kw))
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)
        if track_running_stats:
            self.register_buffer("running_mean", _C.zeros((num_features,), **kw))
            self.register_buffer("running_var", _C.ones((num_features,), **kw))
            self.register_buffer("num_batches_tracked",
                                 _C.zeros((), dtype=_C.int64, device=device))
        else:
            self.register_buffer("running_mean", None)
            self.register_buffer("running_var", None)
            self.register_buffer("num_batches_tracked", None)

    def reset_running_stats(self):
        if self.track_running_stats:
            with _no_grad():
                self.running_mean.zero_()
                self.running_var.fill_(1)
                self.num_batches_tracked.zero_()

    def reset_parameters(self):
        self.reset_running_stats()
        if self.affine:
            with _no_grad():
                self.weight.fill_(1)
                self.bias.zero_()

    def _check_input_dim(self, input):
        raise NotImplementedError

    def _momentum(self):
        """The update factor of this step (counting the batch when tracking)."""
        momentum = 0.0 if self.momentum is None else self.momentum
        if self.training and self.track_running_stats and self.num_batches_tracked is not None:
            with _no_grad():
                self.num_batches_tracked.copy_(self.num_batches_tracked + 1)
            if self.momentum is None:
                momentum = 1.0 / float(self.num_batches_tracked.item())
        return momentum

    def extra_repr(self):
        return (f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, "
                f"affine={self.affine}, track_running_stats={self.track_running_stats}")


class _BatchNorm(_NormBase):
    def forward(self, input):
        self._check_input_dim(input)
        momentum = self._momentum()
        use_batch = self.training or self.running_mean is None
        track = not self.training or self.track_running_stats
        return FN.batch_norm(input, self.running_mean if track else None,
                             self.running_var if track else None, self.weight, self.bias,
                             use_batch, momentum, self.eps)


class BatchNorm1d(_BatchNorm):
    """Over (N, C) or (N, C, L) input."""

    def _check_input_dim(self, input):
        if input.ndim not in (2, 3):
            raise _C.KilnValueError(f"BatchNorm1d: expected 2D or 3D input (got {input.ndim}D "
                                    "input)")


class BatchNorm2d(_BatchNorm):
    """Over (N, C, H, W) input."""

    def _check_input_dim(self, input):
        if input.ndim != 4:
            raise _C.KilnValueError(f"BatchNorm2d: expected 4D input (got {input.ndim}D input)")
