"""Work queued to run when the next backward() returns (Tensor.backward and
kiln.autograd.backward call run()). DistributedDataParallel's forward queues its gradient
all-reduce here: kiln's autograd has no per-tensor gradient hooks, so the all-reduce runs
once every gradient of the backward pass is in .grad, before the user's next line."""

_queued = {}


def queue(key, fn):
    """fn() runs after the next backward; queuing the same key again replaces it."""
    _queued[key] = fn


def cancel(key):
    _queued.pop(key, None)


def run():
    while _queued:
        fns = list(_queued.values())
        _queued.clear()
        for fn in fns:
            fn()
