"""Work: what a collective called with async_op=True returns. kiln's collectives are
complete on return (CPU backends) or ordered on kiln's stream (NCCL), so wait() has
nothing left to wait for."""


class Work:
    def wait(self, timeout=None):
        return True

    def is_completed(self):
        return True

    def is_success(self):
        return True

    def exception(self):
        return None

    def synchronize(self):
        pass

    def result(self):
        return []
