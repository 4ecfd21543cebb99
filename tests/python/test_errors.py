"""Errors: kiln's C++ errors arrive as Python exceptions that derive from kiln.KilnError
and from the builtin users expect, with the C++ message unchanged; wrong argument types
give TypeError (never a crash); the runtime stays usable after any error."""

import pytest

import kiln

x = None


def setup_module():
    global x
    x = kiln.ones(2, 3)


CLASSES = [
    (kiln.ShapeError, ValueError), (kiln.KilnValueError, ValueError),
    (kiln.DTypeError, TypeError), (kiln.KilnIndexError, IndexError),
    (kiln.DeviceError, RuntimeError), (kiln.OutOfMemoryError, RuntimeError),
    (kiln.BackendError, RuntimeError), (kiln.KilnRuntimeError, RuntimeError),
]


@pytest.mark.parametrize("cls,builtin", CLASSES, ids=lambda c: getattr(c, "__name__", c))
def test_exception_hierarchy(cls, builtin):
    assert issubclass(cls, kiln.KilnError) and issubclass(cls, builtin)
    assert cls.__module__ == "kiln"
    assert issubclass(kiln.KilnError, Exception)
    with pytest.raises(kiln.KilnError, match="boom"):
        raise cls("boom")


# (call, Python class, kiln class, pieces of the message)
CASES = [
    (lambda: x + kiln.ones(4), ValueError, kiln.ShapeError,
     ["[add]", "[2, 3]", "[4]", "broadcast"]),
    (lambda: x @ kiln.ones(4, 2), ValueError, kiln.ShapeError, ["[matmul]", "[2, 3]", "[4, 2]"]),
    (lambda: x.view(5), ValueError, kiln.ShapeError, ["[view]", "[5]", "6"]),
    (lambda: x.reshape(7), ValueError, kiln.ShapeError, ["[reshape]", "[7]"]),
    (lambda: x.expand(4, 3), ValueError, kiln.ShapeError, ["[expand]"]),
    (lambda: kiln.layer_norm(x, (4,)), ValueError, kiln.ShapeError, ["[layer_norm]", "[4]"]),
    (lambda: kiln.conv2d(x, x), ValueError, kiln.ShapeError, ["[conv2d]"]),
    (lambda: kiln.zeros(-1), ValueError, kiln.ShapeError, ["non-negative"]),
    (lambda: kiln.arange(0, 1, 0), ValueError, kiln.KilnValueError, ["[arange]", "step"]),
    (lambda: x.permute(0, 0), ValueError, kiln.KilnValueError, ["[permute]"]),
    (lambda: kiln.chunk(x, 0), ValueError, kiln.KilnValueError, ["[chunk]"]),
    (lambda: x.sum(5), IndexError, kiln.KilnIndexError, ["[sum]", "dim 5", "rank 2"]),
    (lambda: kiln.softmax(x, 3), IndexError, kiln.KilnIndexError, ["[softmax]"]),
    (lambda: kiln.index_select(x, 0, kiln.tensor([5])), IndexError, kiln.KilnIndexError,
     ["[index_select]", "5"]),
    (lambda: x[2], IndexError, kiln.KilnIndexError, ["index 2 is out of bounds"]),
    (lambda: kiln.exp(x.bool()), TypeError, kiln.DTypeError, ["[exp]", "bool"]),
    (lambda: kiln.where(x, x, x), TypeError, kiln.DTypeError, ["[where]", "bool", "float32"]),
    (lambda: kiln.embedding(x, x), TypeError, kiln.DTypeError, ["[embedding]", "float32"]),
    (lambda: kiln.zeros(2, dtype="float32"), TypeError, kiln.DTypeError, ["[zeros]", "dtype"]),
    (lambda: kiln.full((2,), "a"), TypeError, kiln.DTypeError, ["[full]", "fill_value"]),
    (lambda: x.view("a"), TypeError, kiln.DTypeError, ["[view]", "str"]),
    (lambda: x.sum(dim=1.5), TypeError, kiln.DTypeError, ["[sum]", "float"]),
    (lambda: kiln.Tensor.view(5, 2), TypeError, kiln.DTypeError, ["kiln.Tensor"]),
]


@pytest.mark.parametrize("call,builtin,cls,pieces", CASES, ids=[str(i) for i in range(len(CASES))])
def test_errors_class_and_message(call, builtin, cls, pieces):
    with pytest.raises(builtin) as info:
        call()
    assert isinstance(info.value, cls), f"{type(info.value)} is not {cls}"
    assert isinstance(info.value, kiln.KilnError)
    message = str(info.value)
    for piece in pieces:
        assert piece in message, f"{piece!r} not in {message!r}"


@pytest.mark.skipif(kiln.cuda.is_available(), reason="a GPU is present")
def test_no_gpu_is_a_device_error():
    with pytest.raises(RuntimeError, match="not available") as info:
        x.cuda()
    assert isinstance(info.value, kiln.DeviceError)
    with pytest.raises(kiln.DeviceError):
        kiln.zeros(2, device="cuda")


WRONG_TYPES = [
    lambda: kiln.add("a", 1), lambda: x + "a", lambda: x * None, lambda: "a" - x,
    lambda: x.transpose(0.5, 1), lambda: kiln.softmax(x), lambda: kiln.matmul(x, 3),
    lambda: kiln.cat(x), lambda: kiln.cat([x, 1]), lambda: kiln.relu([1.0]),
    lambda: kiln.tensor([1], dtype="x"), lambda: x.to(3.5), lambda: kiln.from_numpy([1]),
    lambda: x.unsqueeze("0"), lambda: x.fill_("a"), lambda: x.copy_(3), lambda: x.add_("a"),
    lambda: kiln.device(3.5), lambda: kiln.clamp(x, "a"), lambda: x.index_select(0, [0]),
    lambda: kiln.layer_norm(x, 3, weight=5), lambda: kiln.linear(x, x, bias="b"),
    lambda: kiln.max_pool2d(x, "k"), lambda: x.chunk(2.5), lambda: kiln.manual_seed("s"),
]


@pytest.mark.parametrize("call", WRONG_TYPES, ids=[str(i) for i in range(len(WRONG_TYPES))])
def test_wrong_argument_types_raise_type_error(call):
    with pytest.raises(TypeError):
        call()


def test_tensor_cannot_be_built_directly():
    with pytest.raises((RuntimeError, TypeError)):
        kiln.Tensor()


def test_runtime_usable_after_errors():
    for call, *_ in CASES:
        try:
            call()
        except Exception:
            pass
    y = kiln.ones(3, 3) @ kiln.ones(3, 3)
    assert y.tolist() == [[3.0] * 3] * 3


def test_catch_all_kiln_errors():
    caught = 0
    for call, *_ in CASES:
        try:
            call()
        except kiln.KilnError:
            caught += 1
    assert caught == len(CASES)
