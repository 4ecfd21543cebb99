"""kiln.save / kiln.load against torch 1.13's torch.save / torch.load: files go both
ways (kiln -> torch.load, with weights_only=True where torch 1.13 allows it;
torch.save -> kiln.load), checkpoints of model + optimizer resume training identically,
every dtype, non-contiguous / offset / shared tensors, Parameters, nested containers,
map_location, and the restricted unpickler refusing code."""

import io
import os
import pickle
import zipfile

import numpy as np
import pytest

import kiln
from helpers import assert_close, k, requires_torch, t, torch

pytestmark = requires_torch


def _eq(a, b):
    """Deep equality of a kiln object and a torch object (tensors by dtype and value)."""
    if isinstance(b, torch.Tensor):
        assert isinstance(a, kiln.Tensor), type(a)
        assert_close(a, b.detach(), rtol=0, atol=0)
    elif isinstance(b, dict):
        assert list(a.keys()) == list(b.keys())
        for key in b:
            _eq(a[key], b[key])
    elif isinstance(b, (list, tuple)):
        assert type(a) is type(b) and len(a) == len(b)
        for x, y in zip(a, b):
            _eq(x, y)
    elif isinstance(b, torch.dtype):
        assert a == getattr(kiln, str(b).split(".")[-1])
    else:
        assert a == b and type(a) is type(b)


def kiln_checkpoint(rng):
    x = k(rng.standard_normal((4, 6)).astype(np.float32))
    shared = k(rng.standard_normal(3))
    return {
        "f32": x, "f64": k(rng.standard_normal((2, 3))), "f16": x.to(kiln.float16),
        "bf16": x.to(kiln.bfloat16), "i64": k(rng.integers(-9, 9, (5,))),
        "i32": k(rng.integers(-9, 9, (2, 2)).astype(np.int32)), "bool": x > 0,
        "scalar": k(np.float32(2.5)), "empty": kiln.zeros(0, 3),
        "transposed": x.t(), "sliced": x[1:, ::2], "shared": [shared, shared],
        "param": kiln.nn.Parameter(k(rng.standard_normal(2).astype(np.float32))),
        "meta": {"iter": 7, "name": "gpt", "none": None, "flag": True, "sizes": (3, 4),
                 "nested": [1, [2, {"deep": "yes"}]]},
    }


def test_kiln_round_trip_and_torch_reads_it(rng, tmp_path):
    ck = kiln_checkpoint(rng)
    path = tmp_path / "ck.pt"
    kiln.save(ck, path)
    back = kiln.load(path)
    tk = torch.load(path)  # the whole file: Python floats need weights_only=False in 1.13
    for name, value in ck.items():
        if isinstance(value, kiln.Tensor):
            assert_close(back[name], value, rtol=0, atol=0)
            assert tuple(tk[name].shape) == tuple(value.shape)
            assert_close(value, tk[name], rtol=0, atol=0)
    assert back["meta"] == ck["meta"] == tk["meta"]
    assert tk["shared"][0].data_ptr() == tk["shared"][1].data_ptr()  # one storage
    assert isinstance(tk["param"], torch.nn.Parameter) and tk["param"].requires_grad
    assert back["param"].requires_grad and isinstance(back["param"], kiln.nn.Parameter)
    assert tk["bf16"].dtype == torch.bfloat16 and back["bf16"].dtype == kiln.bfloat16


def test_torch_weights_only_reads_kiln_state_dicts(rng, tmp_path):
    m = kiln.nn.Sequential(kiln.nn.Linear(3, 4), kiln.nn.BatchNorm1d(4), kiln.nn.Linear(4, 2))
    m(k(rng.standard_normal((5, 3)).astype(np.float32)))  # running stats move
    kiln.save({"model": m.state_dict(), "step": 3, "arch": "mlp"}, tmp_path / "w.pt")
    loaded = torch.load(tmp_path / "w.pt", weights_only=True)
    tm = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4),
                             torch.nn.Linear(4, 2))
    tm.load_state_dict(loaded["model"])
    tm.eval()
    m.eval()
    x = rng.standard_normal((6, 3)).astype(np.float32)
    assert_close(m(k(x)), tm(t(x)).detach(), rtol=1e-5, atol=1e-6)
    assert loaded["model"]["1.num_batches_tracked"].dtype == torch.int64


def test_kiln_reads_torch_files(rng, tmp_path):
    base = torch.from_numpy(rng.standard_normal((5, 6)).astype(np.float32))
    obj = {
        "view": base[1:4, ::2], "offset": base.view(-1)[7:13], "t": base.t(),
        "shared": (base[0], base[0]), "half": base.half(), "bf16": base.bfloat16(),
        "double": base.double(), "long": torch.arange(-3, 4), "int": torch.arange(3).int(),
        "bool": base > 0, "int8": torch.arange(-2, 3, dtype=torch.int8),
        "uint8": torch.arange(4, dtype=torch.uint8), "int16": torch.arange(3, dtype=torch.int16),
        "param": torch.nn.Parameter(torch.ones(2)), "sd": torch.nn.Linear(2, 3).state_dict(),
        "cfg": {"lr": 3e-4, "betas": (0.9, 0.95), "name": "x"}, "epoch": 12,
        "dtype": torch.float64,
    }
    path = tmp_path / "torch.pt"
    torch.save(obj, path)
    back = kiln.load(path)
    for name in ("view", "offset", "t", "half", "bf16", "double", "long", "int", "bool",
                 "param", "cfg", "epoch", "dtype", "shared"):
        _eq(back[name], obj[name])
    for name in ("int8", "uint8", "int16"):  # kiln has no 8/16-bit ints: widened to int32
        assert back[name].dtype == kiln.int32
        np.testing.assert_array_equal(back[name].numpy(), obj[name].numpy())
    _eq(back["sd"], obj["sd"])
    assert hasattr(back["sd"], "_metadata")  # torch's state_dict metadata survives
    m = kiln.nn.Linear(2, 3)
    m.load_state_dict(back["sd"])


def test_checkpoint_resumes_training_like_torch(rng, tmp_path):
    """A script's checkpoint: kiln trains, saves; torch and kiln resume from the file and
    take the same steps."""
    x = rng.standard_normal((8, 4)).astype(np.float32)
    y = rng.standard_normal((8, 1)).astype(np.float32)

    def step(lib, model, opt, conv):
        opt.zero_grad()
        lib.nn.functional.mse_loss(model(conv(x)), conv(y)).backward()
        opt.step()

    km = kiln.nn.Sequential(kiln.nn.Linear(4, 8), kiln.nn.Tanh(), kiln.nn.Linear(8, 1))
    kopt = kiln.optim.AdamW(km.parameters(), lr=0.01)
    for _ in range(3):
        step(kiln, km, kopt, k)
    kiln.save({"model": km.state_dict(), "optimizer": kopt.state_dict(), "iter_num": 3,
               "best_val_loss": 1.25, "config": {"lr": 0.01}}, tmp_path / "ckpt.pt")
    ck_t = torch.load(tmp_path / "ckpt.pt")
    tm = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    tm.load_state_dict(ck_t["model"])
    topt = torch.optim.AdamW(tm.parameters(), lr=0.01)
    topt.load_state_dict(ck_t["optimizer"])
    ck_k = kiln.load(tmp_path / "ckpt.pt")
    km2 = kiln.nn.Sequential(kiln.nn.Linear(4, 8), kiln.nn.Tanh(), kiln.nn.Linear(8, 1))
    km2.load_state_dict(ck_k["model"])
    kopt2 = kiln.optim.AdamW(km2.parameters(), lr=0.01)
    kopt2.load_state_dict(ck_k["optimizer"])
    assert ck_k["iter_num"] == 3 and ck_k["best_val_loss"] == 1.25
    for _ in range(3):
        step(kiln, km, kopt, k)
        step(kiln, km2, kopt2, k)
        step(torch, tm, topt, t)
    for a, b, c in zip(km.parameters(), km2.parameters(), tm.parameters()):
        assert_close(b, a, rtol=1e-6, atol=1e-7)
        assert_close(b, c.detach(), rtol=1e-5, atol=1e-6)


def test_file_objects_and_map_location(rng):
    buf = io.BytesIO()
    x = k(rng.standard_normal((2, 3)).astype(np.float32))
    kiln.save({"x": x}, buf)
    for m in (None, "cpu", kiln.device("cpu"), {"cpu": "cpu"}, lambda s, loc: s):
        buf.seek(0)
        assert_close(kiln.load(buf, map_location=m)["x"], x, rtol=0, atol=0)
    # a file saved on a GPU: its storages say 'cuda:0'
    raw = zipfile.ZipFile(io.BytesIO(buf.getvalue()))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as z:
        for info in raw.infolist():
            data = raw.read(info.filename)
            if info.filename.endswith("data.pkl"):
                data = data.replace(b"X\x03\x00\x00\x00cpu", b"X\x06\x00\x00\x00cuda:0")
            z.writestr(info.filename, data)
    out.seek(0)
    assert_close(kiln.load(out, map_location="cpu")["x"], x, rtol=0, atol=0)
    if not kiln.cuda.is_available():
        out.seek(0)
        with pytest.raises(RuntimeError, match="map_location"):
            kiln.load(out)


class _Evil:
    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (os.makedirs, (self.path,))


def test_load_is_safe_by_default(tmp_path):
    target = str(tmp_path / "pwned")
    torch.save({"w": torch.ones(2), "x": _Evil(target)}, tmp_path / "evil.pt")
    with pytest.raises(pickle.UnpicklingError, match="os|posix"):
        kiln.load(tmp_path / "evil.pt")
    assert not os.path.exists(target)
    kiln.load(tmp_path / "evil.pt", weights_only=False)  # trusted: runs, as torch.load
    assert os.path.exists(target)


def test_load_errors_match_torch_types(tmp_path):
    for lib in (torch, kiln):
        with pytest.raises(FileNotFoundError):
            lib.load(tmp_path / "missing.pt")
    (tmp_path / "garbage.pt").write_bytes(b"hello\n")
    with pytest.raises(pickle.UnpicklingError):
        torch.load(tmp_path / "garbage.pt")
    with pytest.raises(pickle.UnpicklingError, match="zip"):
        kiln.load(tmp_path / "garbage.pt")
