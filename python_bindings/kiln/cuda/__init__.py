"""kiln.cuda: GPU queries in torch.cuda's spelling. A machine with no driver or no GPU
reports no devices (kiln then runs on the CPU only); the queries never raise for that.
kiln.cuda.amp holds GradScaler and autocast (torch.cuda.amp's spellings)."""

import time as _time


from .. import _kiln as _C


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


def max_memory_allocated(device=None):
    """The most bytes allocated at once (block sizes, as memory_allocated) since the
    process started or reset_peak_memory_stats(). 0 without a GPU, as PyTorch."""
    if not is_available():
        return 0
    return int(_C._cuda_max_memory_allocated(_index(0 if device is None else device)))


def max_memory_reserved(device=None):
    """The caching allocator's reserved bytes now (kiln keeps no peak of them): an upper
    bound of max_memory_allocated until empty_cache() returns blocks."""
    if not is_available():
        return 0
    return memory_reserved(0 if device is None else device)


def reset_peak_memory_stats(device=None):
    """max_memory_allocated() starts again from the bytes allocated now."""
    if is_available():
        _C._cuda_reset_peak_memory_stats(_index(0 if device is None else device))


def is_bf16_supported():
    """True when a GPU is usable (kiln's CUDA kernels take bfloat16 on every GPU it runs on)."""
    return is_available()


_current = 0


def current_device():
    return _current


def set_device(device):
    """Selects the GPU; kiln's 'cuda' is cuda:0, so only device 0 can be selected (use
    explicit 'cuda:N' devices for others)."""
    global _current
    index = _index(device)
    if not is_available():
        raise _C.DeviceError(f"[cuda.set_device] no CUDA device is available (asked for {index})")
    if not 0 <= index < device_count():
        raise _C.DeviceError(f"[cuda.set_device] device must be in [0, {device_count()}), "
                             f"got {index}")
    if index != 0:
        raise NotImplementedError(f"[cuda.set_device] kiln's 'cuda' device is cuda:0; "
                                  f"set_device({index}) is not supported, use 'cuda:{index}'")
    _current = index


def manual_seed(seed):
    """Seeds kiln's random numbers (one Philox stream serves every device)."""
    from .._random import manual_seed as _seed

    _seed(seed)


manual_seed_all = manual_seed


def seed():
    from .._random import seed as _seed

    return _seed()


class Event:
    """torch.cuda.Event for timing: record() synchronizes kiln's GPU work and takes the
    host clock, so elapsed_time() (ms) is exact for the work between the two records
    (at the cost of a synchronization each record). Works without a GPU too."""

    def __init__(self, enable_timing=False, blocking=False, interprocess=False):
        self.enable_timing = enable_timing
        self._time = None

    def record(self, stream=None):
        if is_available():
            synchronize()
        self._time = _time.perf_counter()

    def synchronize(self):
        if is_available():
            synchronize()

    def wait(self, stream=None):
        self.synchronize()

    def query(self):
        return True

    def elapsed_time(self, end_event):
        if not self.enable_timing or not end_event.enable_timing:
            raise RuntimeError("Both events must be created with argument 'enable_timing=True'.")
        if self._time is None or end_event._time is None:
            raise RuntimeError("elapsed_time: both events must be recorded before calling "
                               "elapsed_time()")
        return (end_event._time - self._time) * 1000.0


def current_stream_handle(device=0):
    """kiln's stream on the device, as an int (a cudaStream_t)."""
    return int(_C._cuda_stream_handle(_index(device)))


class Stream:
    """torch.cuda.Stream over kiln's one stream per device: kiln runs all GPU work in
    order on that stream, so a script's streams serialize (correct, without the overlap
    it asked for); synchronize / wait_stream / wait_event / record_event / query work."""

    def __init__(self, device=None, priority=0, **kwargs):
        if not is_available():
            raise RuntimeError("kiln.cuda.Stream: no CUDA device is available")
        self.device = _C.device(f"cuda:{_index(device) if device is not None else _current}")
        self.priority = priority

    @property
    def cuda_stream(self):
        return current_stream_handle(self.device.index or 0)

    def synchronize(self):
        synchronize()

    def query(self):
        return True

    def wait_stream(self, stream):
        pass

    def wait_event(self, event):
        pass

    def record_event(self, event=None):
        event = event if event is not None else Event()
        event.record(self)
        return event

    def __eq__(self, other):
        return isinstance(other, Stream) and other.device == self.device

    def __hash__(self):
        return hash(("kiln.cuda.Stream", str(self.device)))


def current_stream(device=None):
    return Stream(device)


default_stream = current_stream


class stream:
    """with kiln.cuda.stream(s): a no-op around kiln's one stream (None allowed)."""

    def __init__(self, stream):
        self.stream = stream

    def __enter__(self):
        return self.stream

    def __exit__(self, *exc):
        return False


def _index(device):
    if isinstance(device, int):
        return device
    d = _C.device(device) if not isinstance(device, _C.device) else device
    return d.index or 0


from . import amp  # noqa: E402,F401  (kiln.cuda.amp.GradScaler / autocast)
