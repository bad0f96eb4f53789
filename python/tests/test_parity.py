"""Parity from Python with the committed PyTorch references (tests/fixtures/list.txt), within the
C tests' tolerance: max abs error <= 1e-4 * max(1, max |reference|) (tests/test_models.c)."""
import numpy as np
import pytest

import tubelet
from conftest import FIXTURES, fixture_list, tol

NAMES = fixture_list("list.txt")


def close(got, ref, what):
    assert got.shape == ref.shape, f"{what}: shape {got.shape}, reference {ref.shape}"
    err = float(np.abs(got.astype(np.float64) - ref).max())
    assert err <= tol(ref), f"{what}: max abs error {err:.3g} > {tol(ref):.3g}"


@pytest.mark.parametrize("name", NAMES)
def test_forward(name):
    d = FIXTURES / name
    m = tubelet.load(d, threads=2)
    x = np.load(d / "input.npy")
    logits, hidden = m.forward(x, hidden=True)
    assert logits.dtype == np.float32 and hidden.dtype == np.float32
    close(logits, np.load(d / "logits.npy"), f"{name} logits")
    close(hidden, np.load(d / "hidden.npy"), f"{name} hidden")
    close(m(x), np.load(d / "logits.npy"), f"{name} m(x)")


@pytest.mark.parametrize("name", [n for n in NAMES if (FIXTURES / n / "hidden_layer1.npy").exists()])
def test_features_pooled(name):
    """features(pool=...) of the last hidden state and of hidden_states[1]: the cls token, or the
    mean of the patch tokens, of the reference's tokens."""
    d = FIXTURES / name
    m = tubelet.load(d, threads=2)
    x = np.load(d / "input.npy")
    if m.config["family"] == "timesformer" and m.config["variant"] == "space_only":
        pytest.skip("space_only pools per clip over frames: not a slice of the token array")
    for layer, ref in ((None, np.load(d / "hidden.npy")), (1, np.load(d / "hidden_layer1.npy"))):
        cls = m.features(x, pool="mean", layers=layer)
        has_cls = m.config["family"] != "videomae" and not m.config["variant"].startswith(
            ("model3_", "model4_"))
        patches = ref[:, 1:] if has_cls else ref
        close(cls, patches.astype(np.float64).mean(axis=1), f"{name} layer {layer} mean")
        if has_cls:
            close(m.features(x, pool="cls", layers=layer), ref[:, 0], f"{name} layer {layer} cls")


def test_stmixer_levels():
    """STMixer's backbone: [x, x, x, x] (levels=4), per-block levels in one pass, other sizes."""
    d = FIXTURES / "stmixer_backbone"
    m = tubelet.load(d, threads=2)
    x = np.load(d / "input.npy")
    f = np.load(d / "features.npy")
    four = m.features(x, levels=4)
    assert four.shape == (4,) + f.shape
    for i in range(4):
        close(four[i], f, f"stmixer level {i}")
    close(m.features(x, pool="none"), f, "stmixer pool none")
    fl = np.load(d / "features_layers.npy")  # hidden_states[0], [1], [2]
    blocks = m.features(x, layers=[2, 0, -1, 1])
    for got, ref in zip(blocks, (fl[2], fl[0], f, fl[1])):
        close(got, ref, "stmixer blocks")
    for size in ("28x24", "12x8"):
        close(m.features(np.load(d / f"input_{size}.npy"), levels=1)[0],
              np.load(d / f"features_{size}.npy"), f"stmixer {size}")
    with pytest.raises(tubelet.Error, match="layer 3"):
        m.features(x, layers=[3])


@pytest.mark.parametrize("precision", ["bf16", "int8"])
def test_reduced_precision_runs(precision):
    """bf16/int8 load and stay near fp32 (docs/precision.md bounds: 2^-5 bf16, 2^-3 int8)."""
    d = FIXTURES / "videomae_mean"
    x = np.load(d / "input.npy")
    ref = np.load(d / "logits.npy")
    m = tubelet.load(d, precision=precision, threads=1)
    assert m.config["precision"] == precision
    bound = (2**-5 if precision == "bf16" else 2**-3) * max(1.0, float(np.abs(ref).max()))
    assert float(np.abs(m(x) - ref).max()) <= bound


def test_inference_packing_same_logits():
    d = FIXTURES / "timesformer_divided"
    x = np.load(d / "input.npy")
    m = tubelet.load(d, inference=True, threads=1)
    assert m.config["packed"]
    close(m(x), np.load(d / "logits.npy"), "packed logits")
