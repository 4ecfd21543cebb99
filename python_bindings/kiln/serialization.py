"""kiln.save / kiln.load in PyTorch's own file format, so checkpoints move both ways:
``torch.load(path, weights_only=True)`` reads kiln's files and ``kiln.load`` reads
``torch.save``'s (tensors, Parameters, state_dicts, the nested dicts / lists / tuples
of numbers and strings a training script checkpoints).

The format (torch >= 1.6): a zip archive (stored, not compressed) under one folder:
``data.pkl`` (the object, pickle protocol 2; each tensor pickled as
``torch._utils._rebuild_tensor_v2(storage, offset, size, stride, requires_grad,
OrderedDict())`` whose storage is a persistent id ``('storage', torch.<Type>Storage,
key, location, numel)``), ``data/<key>`` (each storage's bytes, little-endian) and
``version``. Tensors are written contiguous, one storage each (the same tensor object
twice shares one storage).

kiln.load is safe by default (weights_only=True): its unpickler admits only the
globals such files need (tensor / Parameter rebuilders, storage types, dtypes,
devices, OrderedDict) and refuses any other, naming it, so a file cannot run code.
weights_only=False admits every global (trusted files only).

torch 1.13's own weights_only reader knows no float opcode (torch >= 2.0 does): it
reads kiln's (and torch's) files of tensors, ints and strings, but a checkpoint with
Python floats in it (an optimizer's lr) needs torch.load(weights_only=False) there.
"""

import collections
import io
import os
import pickle
import struct
import zipfile

import numpy as np

from . import _kiln as _C
from ._kiln import Tensor

__all__ = ["save", "load"]

# torch storage class name <-> kiln dtype name <-> numpy dtype of the stored bytes
_STORAGES = {
    "FloatStorage": ("float32", np.float32), "DoubleStorage": ("float64", np.float64),
    "HalfStorage": ("float16", np.float16), "BFloat16Storage": ("bfloat16", np.uint16),
    "LongStorage": ("int64", np.int64), "IntStorage": ("int32", np.int32),
    "BoolStorage": ("bool", np.bool_), "ShortStorage": ("int16", np.int16),
    "CharStorage": ("int8", np.int8), "ByteStorage": ("uint8", np.uint8),
}
_STORAGE_OF = {kd: name for name, (kd, _) in _STORAGES.items()}
_WIDEN = {"int16": "int32", "int8": "int32", "uint8": "int32"}  # dtypes kiln lacks


class _Global:
    """A reference to torch.<module>.<name> written into the pickle (no torch needed)."""

    def __init__(self, module, name):
        self.module, self.name = module, name

    def __call__(self, *args):  # pickle's save_reduce wants a callable
        raise RuntimeError("a pickle placeholder")


class _StorageRef:
    def __init__(self, key, storage, numel):
        self.key, self.storage, self.numel = key, storage, numel


def _tensor_bytes(t):
    """(storage class name, little-endian bytes) of t's values, contiguous."""
    t = t.detach()
    if t.device.type != "cpu":
        t = t.cpu()
    name = t.dtype.name
    if name == "bfloat16":
        bits = np.ascontiguousarray(t.float().numpy()).view(np.uint32) >> 16
        return _STORAGE_OF[name], bits.astype("<u2").tobytes()
    arr = np.ascontiguousarray(t.numpy())
    return _STORAGE_OF[name], arr.astype(arr.dtype.newbyteorder("<")).tobytes()


class _Writer(pickle._Pickler):
    """Pickles kiln tensors, Parameters, dtypes and devices as torch's."""

    dispatch = dict(pickle._Pickler.dispatch)

    def __init__(self, file):
        super().__init__(file, protocol=2)
        self.records = {}  # key -> bytes
        self._keys = {}  # id(tensor) -> _StorageRef

    def save_global_ref(self, obj):
        self.write(pickle.GLOBAL + f"{obj.module}\n{obj.name}\n".encode("utf-8"))
        self.memoize(obj)

    dispatch[_Global] = save_global_ref

    def save_dtype(self, obj):  # torch.float32 and friends are pickled as globals
        self.save_global_ref(_Global("torch", obj.name))

    dispatch[_C.dtype] = save_dtype

    def persistent_id(self, obj):
        if isinstance(obj, _StorageRef):
            return ("storage", _Global("torch", obj.storage), obj.key, "cpu", obj.numel)
        return None

    def _tensor_reduce(self, t, requires_grad):
        ref = self._keys.get(id(t))
        if ref is None:
            storage, data = _tensor_bytes(t)
            ref = _StorageRef(str(len(self.records)), storage, t.numel())
            self.records[ref.key] = data
            self._keys[id(t)] = ref
        size = tuple(t.shape)
        stride, acc = [], 1
        for s in reversed(size):
            stride.append(acc)
            acc *= s
        return (_Global("torch._utils", "_rebuild_tensor_v2"),
                (ref, 0, size, tuple(reversed(stride)), bool(requires_grad),
                 collections.OrderedDict()))

    def reducer_override(self, obj):
        if isinstance(obj, _ParamData):
            return self._tensor_reduce(obj.tensor, False)
        if isinstance(obj, Tensor):
            if getattr(obj, "_kiln_is_param", False):
                return (_Global("torch._utils", "_rebuild_parameter"),
                        (_ParamData(obj), obj.requires_grad, collections.OrderedDict()))
            return self._tensor_reduce(obj, obj.requires_grad)
        if isinstance(obj, _C.device):
            return (_Global("torch", "device"), (str(obj),))
        return NotImplemented


class _ParamData:
    """A Parameter's values, pickled as the plain tensor _rebuild_parameter wraps."""

    def __init__(self, tensor):
        self.tensor = tensor


def _aligned_extra(zf, name, align=64):
    """A local-header extra field that starts the record's data at an aligned offset
    (PyTorch's writer aligns records; readers do not need it, mmap does)."""
    offset = zf.fp.tell() if zf.fp.seekable() else 0
    header = 30 + len(name.encode("utf-8"))
    pad = (-(offset + header + 4)) % align
    return b"FB" + struct.pack("<H", pad) + b"Z" * pad


def save(obj, f, pickle_module=None, pickle_protocol=2, _use_new_zipfile_serialization=True):
    """Writes obj to f (a path or a binary file object) in PyTorch's zip format."""
    if pickle_module is not None and pickle_module is not pickle:
        raise _C.KilnValueError("save: pickle_module must be pickle (kiln writes protocol 2)")
    if not _use_new_zipfile_serialization:
        raise _C.KilnValueError("save: only the zip format is supported "
                                "(_use_new_zipfile_serialization=True)")
    buf = io.BytesIO()
    writer = _Writer(buf)
    writer.dump(obj)
    if isinstance(f, (str, os.PathLike)):
        stem = os.path.splitext(os.path.basename(os.fspath(f)))[0] or "archive"
    else:
        stem = "archive"
    stem = "".join(c if c.isalnum() or c in "_-" else "_" for c in stem) or "archive"
    with zipfile.ZipFile(f, "w", zipfile.ZIP_STORED) as zf:
        records = [("data.pkl", buf.getvalue())]
        records += [(f"data/{k}", v) for k, v in writer.records.items()]
        records += [("version", b"3\n")]
        for name, data in records:
            full = f"{stem}/{name}"
            info = zipfile.ZipInfo(full, date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_STORED
            info.extra = _aligned_extra(zf, full)
            zf.writestr(info, data)


# ---- reading

def _rebuild_tensor(storage, storage_offset, size, stride, requires_grad=False,
                    backward_hooks=None, metadata=None):
    arr, dtype_name, location, loader = storage
    itemsize = arr.dtype.itemsize
    view = np.lib.stride_tricks.as_strided(arr[storage_offset:], shape=tuple(size),
                                           strides=tuple(s * itemsize for s in stride))
    return loader.make_tensor(np.array(view, order="C"), dtype_name, location,
                              bool(requires_grad))


def _rebuild_parameter(data, requires_grad, backward_hooks=None, *state):
    from .nn.modules.module import Parameter

    return Parameter(data, requires_grad)


def _rebuild_device(spec, index=None):
    return _C.device(spec if index is None else f"{spec}:{index}")


def _torch_dtype(name):
    from . import _dtype_by_name

    return _dtype_by_name({"float": "float32", "double": "float64", "half": "float16",
                           "long": "int64", "int": "int32"}.get(name, name))


def _rebuild_tensor_v1(storage, storage_offset, size, stride):
    return _rebuild_tensor(storage, storage_offset, size, stride)


_SAFE = {
    ("collections", "OrderedDict"): collections.OrderedDict,
    ("torch._utils", "_rebuild_tensor"): _rebuild_tensor_v1,
    ("torch", "Size"): tuple,
    ("torch._utils", "_rebuild_tensor_v2"): _rebuild_tensor,
    ("torch._utils", "_rebuild_parameter"): _rebuild_parameter,
    ("torch", "device"): _rebuild_device,
    ("builtins", "set"): set,
    ("builtins", "frozenset"): frozenset,
    ("builtins", "complex"): complex,
}


class _Reader(pickle.Unpickler):
    def __init__(self, file, archive, prefix, map_location, weights_only):
        super().__init__(file)
        self.archive, self.prefix = archive, prefix
        self.map_location = map_location
        self.weights_only = weights_only
        self.storages = {}

    def find_class(self, module, name):
        if (module, name) in _SAFE:
            return _SAFE[(module, name)]
        if module == "torch" and name.endswith("Storage"):
            return ("storage-type", name)
        if module == "torch" and name in ("float32", "float64", "float16", "bfloat16", "int64",
                                          "int32", "bool", "float", "double", "half", "long",
                                          "int"):
            return _torch_dtype(name)
        if self.weights_only:
            raise pickle.UnpicklingError(
                f"kiln.load: weights_only=True refuses the global {module}.{name} (it could run "
                "code while loading); load a file you trust with weights_only=False")
        return super().find_class(module, name)

    def persistent_load(self, pid):
        if not isinstance(pid, tuple) or not pid or pid[0] != "storage":
            raise pickle.UnpicklingError(f"kiln.load: unknown persistent id {pid!r}")
        _, storage_type, key, location, _numel = pid
        type_name = storage_type[1] if isinstance(storage_type, tuple) else str(storage_type)
        if type_name == "UntypedStorage":
            type_name = "ByteStorage"
        if type_name not in _STORAGES:
            raise pickle.UnpicklingError(f"kiln.load: unsupported storage type {type_name}")
        dtype_name, np_dtype = _STORAGES[type_name]
        if key not in self.storages:
            data = self.archive.read(f"{self.prefix}data/{key}")
            self.storages[key] = np.frombuffer(data, dtype=np.dtype(np_dtype).newbyteorder("<"))
        return (self.storages[key], dtype_name, location, self)

    def make_tensor(self, arr, dtype_name, location, requires_grad):
        from ._functions import tensor

        if dtype_name == "bfloat16":
            t = tensor((arr.astype(np.uint32) << 16).view(np.float32)).to(_C.bfloat16)
        else:
            t = tensor(arr.astype(arr.dtype.newbyteorder("=")))
            if dtype_name in _WIDEN:
                t = t.to(getattr(_C, _WIDEN[dtype_name]))
        t = t.to(self._device(t, location))
        if requires_grad and t.dtype.is_floating_point:
            t.requires_grad_(True)
        return t

    def _device(self, t, location):
        m = self.map_location
        if callable(m) and not isinstance(m, (str, _C.device)):
            out = m(t, location)
            return out.device if isinstance(out, Tensor) else _C.device("cpu")
        if isinstance(m, dict):
            target = m.get(location, location)
        elif m is not None:
            target = m
        else:
            target = location
        target = _C.device(str(target))
        if target.type == "cuda" and not _C._cuda_is_available():
            raise _C.DeviceError(
                "kiln.load: Attempting to deserialize object on a CUDA device but "
                "kiln.cuda.is_available() is False. If you are running on a CPU-only machine, "
                "please use kiln.load with map_location='cpu' to map your storages to the CPU.")
        return target


def load(f, map_location=None, pickle_module=None, *, weights_only=True, mmap=None,
         **pickle_load_args):
    """Reads an object written by kiln.save or torch.save (zip format) from f (a path or
    a binary file object). map_location: None (where it was saved), a device or string,
    a dict {saved location: new location} or a callable(tensor, location)."""
    if pickle_module is not None and pickle_module is not pickle:
        raise _C.KilnValueError("load: pickle_module must be pickle")
    if isinstance(f, (str, os.PathLike)) and not os.path.exists(f):
        raise FileNotFoundError(f"[Errno 2] No such file or directory: '{os.fspath(f)}'")
    if not zipfile.is_zipfile(f):
        raise pickle.UnpicklingError("kiln.load: not a zip-format checkpoint (torch.save's "
                                     "legacy format, from before PyTorch 1.6, is not "
                                     "supported)")
    if hasattr(f, "seek"):
        f.seek(0)
    with zipfile.ZipFile(f) as archive:
        names = archive.namelist()
        pkl = [n for n in names if n.endswith("data.pkl") and n.count("/") == 1]
        if not pkl:
            raise _C.KilnRuntimeError("kiln.load: the archive has no <folder>/data.pkl record "
                                      "(not a PyTorch checkpoint)")
        prefix = pkl[0][:-len("data.pkl")]
        reader = _Reader(io.BytesIO(archive.read(pkl[0])), archive, prefix, map_location,
                         weights_only)
        return reader.load()
