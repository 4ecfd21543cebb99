"""Recurrent layers: RNN, LSTM (with proj_size), GRU and their cells, with PyTorch's
parameter names (weight_ih_l0, weight_hh_l0, bias_ih_l0, bias_hh_l0, weight_hr_l0,
..._reverse), shapes, gate order (LSTM i, f, g, o; GRU r, z, n) and initialization
(every parameter U(-1/sqrt(hidden_size), 1/sqrt(hidden_size))), so torch state_dicts
load. One linear makes a whole sequence's input projection. An LSTM layer without
proj_size in float32 or float64 (CPU and CUDA) then runs as one fused op per direction
(kiln.lstm_layer: the whole time loop forward, one fused backward; ops/lstm_layout.h);
everything else is composed step by step from kiln ops (the hidden projection and the
pointwise gate math), which autograd and the tracer see as ordinary ops. Set
``fused_lstm = False`` in this module to compose LSTMs too.
"""

import math
import warnings

from .. import functional as F
from .. import init
from ... import _kiln as _C
from .module import Module, Parameter, _factory_kw

__all__ = ["RNNBase", "RNN", "LSTM", "GRU", "RNNCellBase", "RNNCell", "LSTMCell", "GRUCell"]

_GATES = {"RNN_TANH": 1, "RNN_RELU": 1, "LSTM": 4, "GRU": 3}

fused_lstm = True  # LSTM layers through kiln.lstm_layer where it runs (see above)


def _rnn_step(act):
    def step(xw, h, w_hh, b_hh):
        return act(xw + F.linear(h, w_hh, b_hh))

    return step


def _lstm_step(xw, state, w_hh, b_hh, w_hr=None):
    h, c = state
    gates = xw + F.linear(h, w_hh, b_hh)
    i, f, g, o = gates.chunk(4, -1)
    c = _C.sigmoid(f) * c + _C.sigmoid(i) * _C.tanh(g)
    h = _C.sigmoid(o) * _C.tanh(c)
    if w_hr is not None:
        h = F.linear(h, w_hr)
    return h, c


def _gru_step(xw, h, w_hh, b_hh):
    gh = F.linear(h, w_hh, b_hh)
    xr, xz, xn = xw.chunk(3, -1)
    hr, hz, hn = gh.chunk(3, -1)
    r = _C.sigmoid(xr + hr)
    z = _C.sigmoid(xz + hz)
    n = _C.tanh(xn + r * hn)
    return n + z * (h - n)  # (1 - z) * n + z * h


def _check_sizes(name, input_size, hidden_size):
    for arg, v in (("input_size", input_size), ("hidden_size", hidden_size)):
        if not isinstance(v, int) or isinstance(v, bool):
            raise TypeError(f"{name}: {arg} should be of type int, got: {type(v).__name__}")
    if hidden_size <= 0:
        raise _C.KilnValueError(f"{name}: hidden_size must be greater than zero, got "
                                f"{hidden_size}")


class RNNBase(Module):
    def __init__(self, mode, input_size, hidden_size, num_layers=1, bias=True,
                 batch_first=False, dropout=0.0, bidirectional=False, proj_size=0,
                 device=None, dtype=None):
        super().__init__()
        name = type(self).__name__
        _check_sizes(name, input_size, hidden_size)
        if not isinstance(dropout, (int, float)) or isinstance(dropout, bool) \
                or not 0 <= dropout <= 1:
            raise _C.KilnValueError(f"{name}: dropout should be a number in range [0, 1] "
                                    "representing the probability of an element being zeroed")
        if dropout > 0 and num_layers == 1:
            warnings.warn(f"{name}: dropout option adds dropout after all but last recurrent "
                          f"layer, so non-zero dropout expects num_layers greater than 1, but "
                          f"got dropout={dropout} and num_layers={num_layers}")
        if not isinstance(num_layers, int) or num_layers <= 0:
            raise _C.KilnValueError(f"{name}: num_layers must be a positive int, got "
                                    f"{num_layers}")
        if proj_size < 0:
            raise _C.KilnValueError(f"{name}: proj_size should be a positive integer or zero "
                                    "to disable projections")
        if proj_size >= hidden_size:
            raise _C.KilnValueError(f"{name}: proj_size has to be smaller than hidden_size")
        if proj_size and mode != "LSTM":
            raise _C.KilnValueError(f"{name}: proj_size argument is only supported for LSTM, "
                                    "not RNN or GRU")
        self.mode = mode
        self.input_size = input_size
        self.hidden_size = hidden_size
        self.num_layers = num_layers
        self.bias = bias
        self.batch_first = batch_first
        self.dropout = float(dropout)
        self.bidirectional = bidirectional
        self.proj_size = proj_size
        kw = _factory_kw(device, dtype)
        dirs = 2 if bidirectional else 1
        real_hidden = proj_size if proj_size > 0 else hidden_size
        gate_size = _GATES[mode] * hidden_size
        self._flat_weights_names = []
        for layer in range(num_layers):
            layer_input = input_size if layer == 0 else real_hidden * dirs
            for direction in range(dirs):
                sfx = f"_l{layer}" + ("_reverse" if direction else "")
                shapes = [("weight_ih", (gate_size, layer_input)),
                          ("weight_hh", (gate_size, real_hidden))]
                if bias:
                    shapes += [("bias_ih", (gate_size,)), ("bias_hh", (gate_size,))]
                if proj_size > 0:
                    shapes.append(("weight_hr", (proj_size, hidden_size)))
                for base, shape in shapes:
                    setattr(self, base + sfx, Parameter(_C.empty(shape, **kw)))
                    self._flat_weights_names.append(base + sfx)
        self.reset_parameters()

    def reset_parameters(self):
        stdv = 1.0 / math.sqrt(self.hidden_size)
        for p in self.parameters():
            init.uniform_(p, -stdv, stdv)

    @property
    def _flat_weights(self):
        return [getattr(self, n) for n in self._flat_weights_names]

    def _weights(self, layer, direction):
        sfx = f"_l{layer}" + ("_reverse" if direction else "")
        get = self._parameters.get
        return (get("weight_ih" + sfx), get("weight_hh" + sfx), get("bias_ih" + sfx),
                get("bias_hh" + sfx), get("weight_hr" + sfx))

    def _check_hidden(self, h, expected, what):
        if tuple(h.shape) != expected:
            raise _C.KilnRuntimeError(f"{type(self).__name__}: Expected {what} size "
                                      f"{expected}, got {list(h.shape)}")

    def forward(self, input, hx=None):
        name = type(self).__name__
        if input.ndim not in (2, 3):
            raise _C.KilnRuntimeError(f"{name}: input must have 3 dimensions (2 when "
                                      f"unbatched), got {input.ndim}")
        if input.shape[-1] != self.input_size:
            raise _C.KilnRuntimeError(f"{name}: input.size(-1) must be equal to input_size. "
                                      f"Expected {self.input_size}, got {input.shape[-1]}")
        batched = input.ndim == 3
        x = input if batched else input.unsqueeze(1)
        if batched and self.batch_first:
            x = x.transpose(0, 1)
        batch = x.shape[1]
        dirs = 2 if self.bidirectional else 1
        real_hidden = self.proj_size if self.proj_size > 0 else self.hidden_size
        h_shape = (self.num_layers * dirs, batch, real_hidden)
        c_shape = (self.num_layers * dirs, batch, self.hidden_size)
        is_lstm = self.mode == "LSTM"
        if hx is None:
            h0 = _C.zeros(h_shape, dtype=x.dtype, device=x.device)
            c0 = _C.zeros(c_shape, dtype=x.dtype, device=x.device) if is_lstm else None
        else:
            h0, c0 = hx if is_lstm else (hx, None)
            if not batched:
                if h0.ndim != 2 or (is_lstm and c0.ndim != 2):
                    raise _C.KilnRuntimeError(f"{name}: For unbatched 2-D input, hx should "
                                              f"also be 2-D but got {h0.ndim}-D tensor")
                h0 = h0.unsqueeze(1)
                c0 = c0.unsqueeze(1) if is_lstm else None
            self._check_hidden(h0, h_shape, "hidden" if not is_lstm else "hidden[0]")
            if is_lstm:
                self._check_hidden(c0, c_shape, "hidden[1]")
        if self.mode == "RNN_TANH":
            step = _rnn_step(_C.tanh)
        elif self.mode == "RNN_RELU":
            step = _rnn_step(_C.relu)
        else:
            step = _lstm_step if is_lstm else _gru_step
        seq_len = x.shape[0]
        fused = is_lstm and fused_lstm and not self.proj_size and seq_len > 0 \
            and _C.lstm_layer_supports(x)
        h_n, c_n = [], []
        layer_in = x
        for layer in range(self.num_layers):
            outs = []
            for direction in range(dirs):
                w_ih, w_hh, b_ih, b_hh, w_hr = self._weights(layer, direction)
                idx = layer * dirs + direction
                if fused:  # y: h_t per position, then c_n (ops/lstm_layout.h)
                    bias = b_ih + b_hh if b_ih is not None else None
                    y = _C.lstm_layer(F.linear(layer_in, w_ih, bias), h0[idx], c0[idx], w_hh,
                                      bool(direction))
                    outs.append(y[:seq_len])
                    h_n.append(y[0] if direction else y[seq_len - 1])
                    c_n.append(y[seq_len])
                    continue
                xw = F.linear(layer_in, w_ih, b_ih)  # (L, N, gates) in one matmul
                state = (h0[idx], c0[idx]) if is_lstm else h0[idx]
                steps = [None] * seq_len
                order = range(seq_len - 1, -1, -1) if direction else range(seq_len)
                for t in order:
                    if is_lstm:
                        state = step(xw[t], state, w_hh, b_hh, w_hr)
                        steps[t] = state[0]
                    else:
                        state = step(xw[t], state, w_hh, b_hh)
                        steps[t] = state
                outs.append(_C.stack(steps, 0))
                if is_lstm:
                    h_n.append(state[0])
                    c_n.append(state[1])
                else:
                    h_n.append(state)
            layer_in = outs[0] if dirs == 1 else _C.cat(outs, 2)
            if self.dropout and self.training and layer < self.num_layers - 1:
                layer_in = F.dropout(layer_in, self.dropout, True)
        output = layer_in
        h_n = _C.stack(h_n, 0)
        c_n = _C.stack(c_n, 0) if is_lstm else None
        if not batched:
            output = output.squeeze(1)
            h_n = h_n.squeeze(1)
            c_n = c_n.squeeze(1) if is_lstm else None
        elif self.batch_first:
            output = output.transpose(0, 1)
        return (output, (h_n, c_n)) if is_lstm else (output, h_n)

    def extra_repr(self):
        s = f"{self.input_size}, {self.hidden_size}"
        if self.proj_size:
            s += f", proj_size={self.proj_size}"
        if self.num_layers != 1:
            s += f", num_layers={self.num_layers}"
        if self.bias is not True:
            s += f", bias={self.bias}"
        if self.batch_first:
            s += f", batch_first={self.batch_first}"
        if self.dropout:
            s += f", dropout={self.dropout}"
        if self.bidirectional:
            s += f", bidirectional={self.bidirectional}"
        return s


class RNN(RNNBase):
    """Elman RNN: h_t = tanh(x_t W_ih^T + b_ih + h_{t-1} W_hh^T + b_hh) (or relu)."""

    def __init__(self, input_size, hidden_size, num_layers=1, nonlinearity="tanh", bias=True,
                 batch_first=False, dropout=0.0, bidirectional=False, device=None, dtype=None):
        if nonlinearity not in ("tanh", "relu"):
            raise _C.KilnValueError(f"RNN: Unknown nonlinearity '{nonlinearity}'. Select from "
                                    "'tanh' or 'relu'.")
        mode = "RNN_TANH" if nonlinearity == "tanh" else "RNN_RELU"
        super().__init__(mode, input_size, hidden_size, num_layers, bias, batch_first, dropout,
                         bidirectional, 0, device, dtype)
        self.nonlinearity = nonlinearity


class LSTM(RNNBase):
    """LSTM; forward(input, (h_0, c_0)) -> output, (h_n, c_n); proj_size > 0 projects h."""

    def __init__(self, *args, **kwargs):
        super().__init__("LSTM", *args, **kwargs)


class GRU(RNNBase):
    def __init__(self, *args, **kwargs):
        if "proj_size" in kwargs:
            raise _C.KilnValueError("GRU: proj_size argument is only supported for LSTM, "
                                    "not RNN or GRU")
        super().__init__("GRU", *args, **kwargs)


class RNNCellBase(Module):
    def __init__(self, input_size, hidden_size, bias, num_chunks, device=None, dtype=None):
        super().__init__()
        _check_sizes(type(self).__name__, input_size, hidden_size)
        self.input_size = input_size
        self.hidden_size = hidden_size
        self.bias = bias
        kw = _factory_kw(device, dtype)
        self.weight_ih = Parameter(_C.empty((num_chunks * hidden_size, input_size), **kw))
        self.weight_hh = Parameter(_C.empty((num_chunks * hidden_size, hidden_size), **kw))
        if bias:
            self.bias_ih = Parameter(_C.empty((num_chunks * hidden_size,), **kw))
            self.bias_hh = Parameter(_C.empty((num_chunks * hidden_size,), **kw))
        else:
            self.register_parameter("bias_ih", None)
            self.register_parameter("bias_hh", None)
        self.reset_parameters()

    def reset_parameters(self):
        stdv = 1.0 / math.sqrt(self.hidden_size) if self.hidden_size > 0 else 0
        for p in self.parameters():
            init.uniform_(p, -stdv, stdv)

    def _prepare(self, input, hx, n_states):
        """(batched input, hidden state(s) or zeros, batched?) with PyTorch's checks."""
        name = type(self).__name__
        if input.ndim not in (1, 2):
            raise _C.KilnValueError(f"{name}: Expected input to be 1D or 2D, got "
                                    f"{input.ndim}D instead")
        if input.shape[-1] != self.input_size:
            raise _C.KilnRuntimeError(f"{name}: input has inconsistent input_size: got "
                                      f"{input.shape[-1]} expected {self.input_size}")
        batched = input.ndim == 2
        x = input if batched else input.unsqueeze(0)
        shape = (x.shape[0], self.hidden_size)
        if hx is None:
            states = [_C.zeros(shape, dtype=x.dtype, device=x.device) for _ in range(n_states)]
        else:
            states = list(hx) if n_states == 2 else [hx]
            states = [s if batched else s.unsqueeze(0) for s in states]
            for s in states:
                if tuple(s.shape) != shape:
                    raise _C.KilnRuntimeError(f"{name}: Expected hidden size {shape}, got "
                                              f"{list(s.shape)}")
        return x, states, batched

    def extra_repr(self):
        s = f"{self.input_size}, {self.hidden_size}"
        if self.bias is not True:
            s += f", bias={self.bias}"
        nl = getattr(self, "nonlinearity", "tanh")
        return s + (f", nonlinearity={nl}" if nl != "tanh" else "")


class RNNCell(RNNCellBase):
    def __init__(self, input_size, hidden_size, bias=True, nonlinearity="tanh", device=None,
                 dtype=None):
        if nonlinearity not in ("tanh", "relu"):
            raise _C.KilnValueError(f"RNNCell: Unknown nonlinearity: {nonlinearity}")
        super().__init__(input_size, hidden_size, bias, 1, device, dtype)
        self.nonlinearity = nonlinearity

    def forward(self, input, hx=None):
        x, (h,), batched = self._prepare(input, hx, 1)
        act = _C.tanh if self.nonlinearity == "tanh" else _C.relu
        h = _rnn_step(act)(F.linear(x, self.weight_ih, self.bias_ih), h, self.weight_hh,
                           self.bias_hh)
        return h if batched else h.squeeze(0)


class LSTMCell(RNNCellBase):
    def __init__(self, input_size, hidden_size, bias=True, device=None, dtype=None):
        super().__init__(input_size, hidden_size, bias, 4, device, dtype)

    def forward(self, input, hx=None):
        x, (h, c), batched = self._prepare(input, hx, 2)
        h, c = _lstm_step(F.linear(x, self.weight_ih, self.bias_ih), (h, c), self.weight_hh,
                          self.bias_hh)
        return (h, c) if batched else (h.squeeze(0), c.squeeze(0))


class GRUCell(RNNCellBase):
    def __init__(self, input_size, hidden_size, bias=True, device=None, dtype=None):
        super().__init__(input_size, hidden_size, bias, 3, device, dtype)

    def forward(self, input, hx=None):
        x, (h,), batched = self._prepare(input, hx, 1)
        h = _gru_step(F.linear(x, self.weight_ih, self.bias_ih), h, self.weight_hh,
                      self.bias_hh)
        return h if batched else h.squeeze(0)
