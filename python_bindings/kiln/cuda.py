"""kiln.cuda: GPU queries. A machine with no driver or no GPU reports no devices
(kiln then runs on the CPU only); nothing here raises for that."""

from . import _kiln as _C


def is_available():
    """True when kiln was built with CUDA and at least one GPU is usable."""
    return bool(_C._cuda_is_available())


def is_built():
    """True when kiln was built with the CUDA backend (GPU present or not)."""
    return bool(_C._cuda_built())


def device_count():
    return int(_C._cuda_device_count())


def get_device_name(device=0):
    return _C._cuda_device_name(_index(device))


def synchronize(device=None):
    """Waits until kiln's work on the device (all devices if None) has finished."""
    _C._cuda_synchronize(device)


def empty_cache():
    """Returns the caching allocator's free blocks to the driver."""
    _C._cuda_empty_cache()


def memory_allocated(device=0):
    return int(_C._cuda_memory_allocated(_index(device)))


def memory_reserved(device=0):
    return int(_C._cuda_memory_cached(_index(device)))


def current_stream_handle(device=0):
    """kiln's stream on the device, as an int (a cudaStream_t)."""
    return int(_C._cuda_stream_handle(_index(device)))


def _index(device):
    if isinstance(device, int):
        return device
    d = _C.device(device) if not isinstance(device, _C.device) else device
    return d.index or 0
