"""Bad input from Python: every case raises tubelet.Error (the message names the file where there
is one), never crashes; wrong dtype, rank or shape raises before any compute."""
import json
import os
import subprocess
import sys
import warnings

import numpy as np
import pytest

import tubelet
from conftest import FIXTURES, MOTION, ROOT

D = FIXTURES / "videomae_mean"


@pytest.fixture(scope="module")
def m():
    return tubelet.load(D, threads=1)


@pytest.fixture(scope="module")
def x():
    return np.load(D / "input.npy")


def test_error_is_runtime_error():
    assert issubclass(tubelet.Error, RuntimeError)
    assert issubclass(tubelet.InputError, tubelet.Error)
    assert issubclass(tubelet.InputError, ValueError)


def test_missing_dir(tmp_path):
    with pytest.raises(tubelet.Error, match=str(tmp_path / "nope")) as e:
        tubelet.load(tmp_path / "nope")
    assert e.value.status == "io"


@pytest.mark.parametrize("cut", [0, 7, 100, 5000])
def test_truncated_safetensors(tmp_fixture, cut):
    d = tmp_fixture("videomae_mean")
    f = d / "model.safetensors"
    f.write_bytes(f.read_bytes()[:cut])
    with pytest.raises(tubelet.Error, match="model.safetensors") as e:
        tubelet.load(d)
    assert e.value.status in ("format", "io", "missing")


def test_garbage_header(tmp_fixture):
    d = tmp_fixture("videomae_mean")
    f = d / "model.safetensors"
    raw = bytearray(f.read_bytes())
    raw[8:20] = b"{not json!!!"
    f.write_bytes(bytes(raw))
    with pytest.raises(tubelet.Error, match="model.safetensors"):
        tubelet.load(d)


def test_bad_config(tmp_fixture):
    d = tmp_fixture("videomae_mean")
    (d / "config.json").write_text('{"model_type": "videomae", "hidden_size": -3}')
    with pytest.raises(tubelet.Error, match="config.json"):
        tubelet.load(d)


def test_threads_above_the_cap():
    # 4 x the CPUs this process may use: 1 << 30 used to load, then every forward ran out of memory
    cap = 4 * len(os.sched_getaffinity(0))
    loaders = (lambda t: tubelet.load(D, threads=t),
               lambda t: tubelet.from_arch("videomae-base", threads=t))
    for load in loaders:
        with pytest.raises(ValueError, match=f"from 0 to {cap} "):
            load(1 << 30)
        with pytest.raises(ValueError, match=f"from 0 to {cap} "):
            load(cap + 1)
    assert tubelet.load(D, threads=cap).config["threads"] == cap


def test_device():
    """device= reaches tubelet_load_params.device: an unknown one is named; cuda in a build (the
    wheel's: no CUDA=1) or on a machine without it says what is missing."""
    assert tubelet.load(D, threads=1, device="cpu").config["threads"] == 1
    with pytest.raises(tubelet.Error, match="unknown device 'nope'"):
        tubelet.load(D, device="nope")
    if not os.path.exists("/dev/nvidia0"):
        with pytest.raises(tubelet.Error, match="no CUDA backend|no usable GPU|no GPU found"):
            tubelet.from_arch("videomae-base", device="cuda")


def test_unknown_arch_and_precision():
    with pytest.raises(tubelet.Error, match="nonsense"):
        tubelet.from_arch("nonsense")
    with pytest.raises(ValueError, match="precision"):
        tubelet.load(D, precision="fp8")


@pytest.mark.parametrize("shape", [(4, 3, 32, 32), (1, 2, 4, 3, 32, 32), (2, 4, 2, 32, 32)])
def test_wrong_rank_or_channels(m, shape):
    with pytest.raises(tubelet.InputError, match="pixel_values"):
        m(np.zeros(shape, np.float32))


@pytest.mark.parametrize("dtype", [np.int32, np.uint8, np.float16, np.complex64])
def test_wrong_dtype(m, dtype):
    with pytest.raises(tubelet.InputError, match="dtype"):
        m(np.zeros((1, 4, 3, 32, 32), dtype))


def test_shape_the_model_cannot_take(m):
    # 3 frames with tubelet 2
    with pytest.raises(tubelet.Error) as e:
        m(np.zeros((1, 3, 3, 32, 32), np.float32))
    assert e.value.status in ("shape", "arg")


def test_empty_dimension(m):
    with pytest.raises(tubelet.InputError):
        m(np.zeros((0, 4, 3, 32, 32), np.float32))


def test_nan_input(m, x):
    bad = x.copy()
    bad[1, 2, 0, 5, 7] = np.nan
    with pytest.raises(tubelet.Error, match="non-finite") as e:
        m(bad)
    assert e.value.status == "value"
    with pytest.raises(tubelet.Error, match="non-finite"):
        m.grad(bad, np.load(D / "labels.npy"))
    # the model still works afterwards
    assert np.isfinite(m(x)).all()


def test_float64_warns_and_matches(m, x):
    with pytest.warns(UserWarning, match="float64"):
        a = m(x.astype(np.float64))
    assert np.array_equal(a, m(x))


def test_float32_no_copy_no_warning(m, x):
    assert m._pixels(x) is x  # what the binding reads: the caller's array itself
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        m(x)
        m(x[:, ::1])  # a view, still C-contiguous


def test_non_contiguous_accepted(m, x):
    f = np.asfortranarray(x)
    assert np.array_equal(m(f), m(x))
    big = np.zeros((2, 8, 3, 32, 32), np.float32)
    big[:, ::2] = x
    assert np.array_equal(m(big[:, ::2]), m(x))


def test_buffer_protocol_and_lists(m, x):
    mv = memoryview(x)
    assert np.shares_memory(m._pixels(mv), x)
    assert np.array_equal(m(mv), m(x))
    with pytest.warns(UserWarning, match="float64") as w:
        assert np.array_equal(m(x.tolist()), m(x))  # a list is float64: converted
    assert w[0].filename == __file__  # the warning points at the caller


def test_torch_tensor_zero_copy(m, x):
    torch = pytest.importorskip("torch")
    t = torch.from_numpy(x.copy())
    assert np.shares_memory(m._pixels(t), t.numpy())  # DLPack: the tensor's own memory
    assert np.array_equal(m(t), m(x))
    with pytest.raises(tubelet.Error):
        m(torch.zeros((1, 4, 3, 32, 32), dtype=torch.int64))


def test_unreadable_video(motion, tmp_path):
    txt = tmp_path / "not_a_video.mp4"
    txt.write_text("hello")
    for p in (txt, tmp_path / "missing.mp4"):
        with pytest.raises(tubelet.Error, match=str(p)):
            motion.classify(p)
        with pytest.raises(tubelet.Error, match=str(p)):
            motion.preprocess(p)
        with pytest.raises(tubelet.Error, match=str(p)):
            tubelet.read_video(p, 8)
        with pytest.raises(tubelet.Error, match=str(p)):
            motion.features([p])
    # in a list, a bad video comes back as an error entry; the others still run
    good = str(next((MOTION / "examples").glob("*.mp4")))
    r = motion.classify([good, str(txt), good], top=1)
    assert r[0] == r[2] and "top" in r[0]
    assert r[1]["video"] == str(txt) and str(txt) in r[1]["error"]


def test_truncated_video(motion, tmp_path):
    src = next((MOTION / "examples").glob("*.mp4")).read_bytes()
    p = tmp_path / "cut.mp4"
    p.write_bytes(src[: len(src) // 3])
    with pytest.raises(tubelet.Error, match=str(p)):
        motion.classify(p)


def test_bad_arguments(motion):
    good = str(next((MOTION / "examples").glob("*.mp4")))
    with pytest.raises(ValueError):
        motion.classify(good, crops=2)
    with pytest.raises(ValueError):
        motion.classify(good, sampling="every")
    with pytest.raises(ValueError):
        motion.classify(good, top=0)
    with pytest.raises(tubelet.InputError):
        motion.preprocess(np.zeros((8, 64, 64, 3), np.float32))


def test_interpreter_survives_everything():
    """The bad inputs above in a fresh interpreter, which must exit normally."""
    code = f"""
import numpy as np, tubelet, tempfile, os, pathlib
d = tempfile.mkdtemp()
for bad in [d + '/none', '/dev/null', '/proc/self/mem']:
    try: tubelet.load(bad)
    except tubelet.Error: pass
m = tubelet.load({str(D)!r}, threads=1)
for a in [np.zeros((1, 3, 3, 32, 32), np.float32), np.full((1, 4, 3, 32, 32), np.inf, np.float32),
          np.zeros((1, 4, 3, 1, 1), np.float32), np.zeros((1, 4, 3, 4096, 8), np.float32)]:
    try: m(a)
    except tubelet.Error: pass
print("ok")
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                       timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr


def test_initializer_range(tmp_path):
    """A config without weights is initialised with normal(0, initializer_range), as transformers
    does; a value out of range is an error naming config.json."""
    cfg = {"model_type": "videomae", "image_size": 16, "patch_size": 8, "num_frames": 4,
           "tubelet_size": 2, "hidden_size": 64, "num_hidden_layers": 1, "num_attention_heads": 2,
           "intermediate_size": 128, "num_labels": 3}
    stds = {}
    for r in (0.02, 0.5):
        m = tubelet.from_config({**cfg, "initializer_range": r})
        w = m.state_dict()["videomae.encoder.layer.0.intermediate.dense.weight"]
        stds[r] = float(w.std())
    assert abs(stds[0.02] / 0.02 - 1) < 0.05 and abs(stds[0.5] / 0.5 - 1) < 0.05, stds
    d = tmp_path / "bad"
    d.mkdir()
    (d / "config.json").write_text(json.dumps({**cfg, "initializer_range": -1}))
    with pytest.raises(tubelet.Error, match="config.json.*initializer_range"):
        tubelet.from_config(d)
    with pytest.raises(tubelet.Error, match="config.json"):  # weights are needed to load
        tubelet.load(d)
    with pytest.raises(tubelet.Error, match="nowhere.*cannot read"):
        tubelet.from_config(tmp_path / "nowhere")


def test_every_error_has_a_status(m, tmp_path):
    """docs/python.md: `e.status` says the kind, for every tubelet exception (issue 27: it was None
    for InputError and for the errors the package raises itself)."""
    cases = [
        (lambda: m(np.zeros((1, 4, 3, 32), np.float32)), tubelet.InputError, "shape"),
        (lambda: m(np.zeros((1, 4, 3, 32, 32), np.int32)), tubelet.InputError, "arg"),
        (lambda: m.grad(np.zeros((1, 4, 3, 32, 32), np.float32), np.array([10**6])),
         tubelet.InputError, "value"),
        (lambda: m.features(np.zeros((1, 4, 3, 32, 32), np.float32), layers=99), tubelet.Error,
         "arg"),
        (lambda: m.features(np.zeros((1, 4, 3, 32, 32), np.float32), pool="cls"), tubelet.Error,
         "unsupported"),
        (lambda: tubelet.from_config(tmp_path / "none.json"), tubelet.Error, "io"),
        (lambda: tubelet.load(tmp_path / "none"), tubelet.Error, "io"),
    ]
    for call, cls, status in cases:
        with pytest.raises(cls) as e:
            call()
        assert e.value.status == status, (str(e.value), e.value.status)


@pytest.mark.parametrize("name,hint", [
    ("MCG-NJU/videomae-base-finetuned-kinetics",
     "hf download MCG-NJU/videomae-base-finetuned-kinetics --local-dir DIR"),
    ("hf://MCG-NJU/videomae-base", "hf download MCG-NJU/videomae-base --local-dir DIR"),
    ("https://huggingface.co/MCG-NJU/videomae-base", "hf download MCG-NJU/videomae-base "),
    ("http://example.com/model.pth", "downloads nothing"),
    ("-", "standard input"),
])
def test_not_a_local_path(name, hint):
    """A Hub id, a URL or '-' says it is no local path and what to do (issue 27)."""
    with pytest.raises(tubelet.Error) as e:
        tubelet.load(name)
    msg = str(e.value)
    assert name in msg and hint in msg and "No such file" not in msg
    assert e.value.status == "io"


def test_video_from_bytes_and_file_objects(motion, tmp_path):
    """bytes, bytearray, memoryview and binary file objects decode from memory, to exactly what
    the path gives (issue 27: bytes said "embedded null byte", a file object TypeError)."""
    import io

    path = next((MOTION / "examples").glob("*.mp4"))
    raw = path.read_bytes()
    ref = tubelet.read_video(path, 8, "uniform")
    for src in (raw, bytearray(raw), memoryview(raw), io.BytesIO(raw), open(path, "rb")):
        v = tubelet.read_video(src, 8, "uniform")
        assert np.array_equal(v.frames, ref.frames) and np.array_equal(v.indices, ref.indices)
        assert v.fps == ref.fps
    px = motion.preprocess(path, crops=3)
    assert np.array_equal(motion.preprocess(raw, crops=3), px)
    with open(path, "rb") as f:
        assert np.array_equal(motion.preprocess(f, crops=3), px)
    top = motion.classify(str(path), top=2)
    with open(path, "rb") as f:
        got = motion.classify([raw, f, io.BytesIO(raw)], top=2)
    assert [g["top"] for g in got] == [top["top"]] * 3
    assert got[0]["video"] == 0 and got[1]["video"] == str(path) and got[2]["video"] == 2
    # one video of bytes: "video", as serve names a raw body (issue 39: it was 0)
    assert motion.classify(raw, top=2)["video"] == "video"
    assert np.array_equal(motion.features(raw), motion.features(str(path)))
    # bad bytes: an error naming the file object (or <memory>), with a status
    with pytest.raises(tubelet.Error, match="<memory>") as e:
        tubelet.read_video(b"not a video at all", 8)
    assert e.value.status == "format"
    with pytest.raises(tubelet.Error, match="cut.mp4"):
        bad = tmp_path / "cut.mp4"
        bad.write_bytes(raw[: len(raw) // 3])
        with open(bad, "rb") as f:
            motion.classify(f)
    with pytest.raises(TypeError, match="binary mode"):
        with open(path, encoding="latin-1") as f:
            tubelet.read_video(f, 8)
