"""kiln.nn.Module's lookups on the per-step path: attribute reads of parameters,
buffers and submodules (in C, python_bindings/src/module_getattr.cpp) and parameters()
(without named_parameters' names) give what Module.__getattr__ and named_parameters()
give, errors included."""

import pytest

import kiln
import kiln.nn as knn


class Net(knn.Module):
    def __init__(self):
        super().__init__()
        self.lin = knn.Linear(2, 2)
        self.register_buffer("buf", kiln.ones(2))
        self.plain = 3
        self.none_param = None

    @property
    def broken(self):
        raise AttributeError("inner")

    @property
    def failing(self):
        raise ValueError("not an AttributeError")


def test_attribute_reads_match_module_getattr():
    m = Net()
    assert m.lin is m._modules["lin"] and m.buf is m._buffers["buf"] and m.plain == 3
    assert m.lin.weight is m.lin._parameters["weight"]
    for name in ("missing", "broken"):  # a property's AttributeError falls to __getattr__
        with pytest.raises(AttributeError, match=f"'Net' object has no attribute '{name}'"):
            getattr(m, name)
    with pytest.raises(ValueError, match="not an AttributeError"):
        m.failing
    assert not hasattr(m, "missing") and getattr(m, "missing", 5) == 5
    m._parameters["extra"] = knn.Parameter(kiln.zeros(1))  # the dicts, written directly
    assert m.extra is m._parameters["extra"]
    del m._parameters["extra"]
    with pytest.raises(AttributeError):
        m.extra
    m.register_parameter("p", None)
    assert m.p is None


def test_classes_with_their_own_getattr_keep_it():
    class Wrapper(knn.Module):
        def __init__(self):
            super().__init__()
            self.inner = knn.Linear(1, 1)

        def __getattr__(self, name):
            if name == "magic":
                return 42
            return super().__getattr__(name)

    w = Wrapper()
    assert w.magic == 42 and isinstance(w.inner, knn.Linear)
    with pytest.raises(AttributeError, match="'Wrapper' object has no attribute 'zzz'"):
        w.zzz
    Net.__getattr__ = lambda self, name: "patched"  # assigned later: CPython's slot again
    try:
        assert Net().anything == "patched"
    finally:
        del Net.__getattr__
    with pytest.raises(AttributeError):
        Net().anything


def test_parameters_in_named_parameters_order():
    shared = knn.Linear(2, 2)

    class A(knn.Module):
        def __init__(self):
            super().__init__()
            self.x = knn.Linear(1, 1)
            self.s = shared
            self.n = None
            self.y = knn.Sequential(shared, knn.Linear(2, 3))

    class B(knn.Module):
        def __init__(self):
            super().__init__()
            self.a = A()
            self.s = shared
            self.p = knn.Parameter(kiln.ones(1))
            self.q = self.p  # the same parameter twice

    class C(knn.Module):  # its own named_modules: asked for its subtree
        def __init__(self):
            super().__init__()
            self.inner = A()
            self.w = knn.Parameter(kiln.ones(2))

        def named_modules(self, memo=None, prefix="", remove_duplicate=True):
            yield from super().named_modules(memo, prefix, remove_duplicate)

    class D(knn.Module):
        def __init__(self):
            super().__init__()
            self.c = C()
            self.b = B()
            self.c2 = self.c

    class E(knn.Module):  # its own named_parameters: parameters() follows it
        def __init__(self):
            super().__init__()
            self.lin = knn.Linear(2, 2)

        def named_parameters(self, prefix="", recurse=True):
            yield "only", self.lin.weight

    for cls in (A, B, C, D):
        m = cls()
        for recurse in (True, False):
            want = [p for _, p in m.named_parameters(recurse=recurse)]
            got = list(m.parameters(recurse=recurse))
            assert len(got) == len(want) and all(g is w for g, w in zip(got, want)), cls
    e = E()
    assert [p is e.lin.weight for p in e.parameters()] == [True]
