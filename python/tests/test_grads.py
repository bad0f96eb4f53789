"""Gradients from Python against PyTorch autograd (tests/fixtures/grad_list.txt), with the C test's
bounds (tests/test_grads.c): loss to 1e-5 relative; per tensor max |g - ref| / max(max |ref|,
1e-4 * max |any ref|) <= 1e-3."""
import numpy as np
import pytest

import tubelet
from conftest import FIXTURES, fixture_list, read_safetensors


@pytest.mark.parametrize("name", fixture_list("grad_list.txt"))
def test_grad(name):
    d = FIXTURES / name
    m = tubelet.load(d, threads=2)
    x = np.load(d / "input.npy")
    y = np.load(d / "labels.npy")
    lref = float(np.load(d / "loss.npy").reshape(-1)[0])
    ref = read_safetensors(d / "grads.safetensors")
    loss, grads = m.grad(x, y)
    assert abs(loss - lref) <= 1e-5 * max(1.0, abs(lref)), f"loss {loss}, reference {lref}"
    assert set(grads) == set(ref)
    floor = 1e-4 * max(float(np.abs(g).max()) for g in ref.values())
    for k, g in grads.items():
        assert g.shape == ref[k].shape, k
        rel = float(np.abs(g - ref[k]).max()) / max(float(np.abs(ref[k]).max()), floor)
        assert rel <= 1e-3, f"{name}: gradient of {k}: relative error {rel:.3g}"
    # a second call gives the same numbers: gradients are zeroed, not accumulated
    loss2, grads2 = m.grad(x, y)
    assert loss2 == loss
    assert all(np.array_equal(grads[k], grads2[k]) for k in grads)


def test_grad_refuses():
    d = FIXTURES / "videomae_mean"
    x = np.load(d / "input.npy")
    y = np.load(d / "labels.npy")
    m = tubelet.load(d, threads=1)
    with pytest.raises(tubelet.InputError, match="outside"):
        m.grad(x, np.full_like(y, 99))
    with pytest.raises(tubelet.InputError, match="labels for"):
        m.grad(x, y[:1])
    with pytest.raises(tubelet.InputError):
        m.grad(x, y.astype(np.float32))
    with pytest.raises(tubelet.Error, match="fp32"):
        tubelet.load(d, precision="bf16", threads=1).grad(x, y)
    with pytest.raises(tubelet.Error, match="fp32"):
        tubelet.load(d, inference=True, threads=1).grad(x, y)


def test_grad_mixed_precision():
    """train_precision="bf16": the products' operands rounded to bf16, the gradients within
    bf16's rounding of fp32's (tests/test_mixed.c's bounds) and not equal to them."""
    d = FIXTURES / "timesformer_divided"
    x = np.load(d / "input.npy")
    y = np.load(d / "labels.npy")
    l32, g32 = tubelet.load(d, threads=2).grad(x, y)
    l16, g16 = tubelet.load(d, threads=2, train_precision="bf16").grad(x, y)
    assert abs(l16 - l32) <= 1e-2 * abs(l32)
    num = sum(float(((g16[k] - g32[k]) ** 2).sum()) for k in g32)
    den = sum(float((g32[k] ** 2).sum()) for k in g32)
    assert 1e-4 <= (num / den) ** 0.5 <= 4e-2
    with pytest.raises(ValueError, match="train_precision"):
        tubelet.load(d, train_precision="int8")
