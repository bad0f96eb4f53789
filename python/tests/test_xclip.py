"""X-CLIP in the Python package (issue 31): encode_text, encode_video, logits_per_video and
classify(labels=...) against transformers' outputs of tests/fixtures/xclip (tools/
make_xclip_fixtures.py), and the errors."""
import json

import numpy as np
import pytest

import tubelet
from conftest import CLI, FIXTURES, tol

X = FIXTURES / "xclip" / "p16_f8"


def test_logits_per_video_matches_transformers():
    m = tubelet.load(X, threads=1)
    texts = json.loads((X / "texts.json").read_text())
    text = m.encode_text(texts)
    assert text.shape == (len(texts), 32) and text.dtype == np.float32
    ref = np.load(X / "logits_per_video.npy")
    got = m.logits_per_video(np.load(X / "x.npy"), text)
    assert got.shape == ref.shape
    assert np.abs(got - ref).max() <= tol(ref)


def test_encode_video_matches_get_video_features():
    m = tubelet.load(X, threads=1)
    ref = np.load(X / "video_features.npy")
    got = m.encode_video(np.load(X / "x.npy"))
    assert got.shape == ref.shape and np.abs(got - ref).max() <= tol(ref)


def test_classify_labels_like_the_cli(tmp_path):
    video = FIXTURES / "video" / "h264.mp4"
    pytest.importorskip("subprocess")
    import subprocess
    m = tubelet.load(X, threads=1)
    got = m.classify(str(video), top=2, labels=["cat", "falling", "forklift"],
                     template="a video of {}")
    cli = subprocess.run([str(CLI), "classify", "--model", str(X), "--labels",
                          "cat,falling,forklift", "--template", "a video of {}", "--top", "2",
                          "--json", "--threads", "1", str(video)],
                         capture_output=True, text=True, check=True)
    want = json.loads(cli.stdout)[0]
    assert [t["label"] for t in got["top"]] == [t["label"] for t in want["top"]]
    for a, b in zip(got["top"], want["top"]):
        assert abs(a["score"] - b["score"]) < 1e-5


def test_errors():
    m = tubelet.load(X, threads=1)
    with pytest.raises(ValueError, match="give labels"):
        m.classify(np.load(X / "x.npy"))
    with pytest.raises(ValueError, match="has no"):
        m.classify(np.load(X / "x.npy"), labels=["a"], template="a video")
    with pytest.raises(TypeError):
        m.encode_text("a single string")
    with pytest.raises(tubelet.InputError):
        m.logits_per_video(np.load(X / "x.npy"), np.zeros((2, 31), np.float32))
    v = tubelet.from_arch("videomae-tiny-pretrain", threads=1)
    with pytest.raises(tubelet.Error, match="no text tower"):
        v.logits_per_video(np.zeros((1, 16, 3, 224, 224), np.float32), np.zeros((1, 4)))


def test_watch_labels_like_the_cli_timeline(tmp_path):
    """tubelet.watch(labels=..., template=...) on a file: timeline --labels' windows."""
    import shutil
    import subprocess
    if not shutil.which("ffmpeg"):
        pytest.skip("ffmpeg not installed")
    video = tmp_path / "c64.mp4"
    subprocess.run(["ffmpeg", "-v", "error", "-f", "lavfi", "-i", "testsrc=size=64x48:rate=25",
                    "-frames:v", "64", "-pix_fmt", "yuv420p", str(video)], check=True)
    labels = ["cat", "falling", "forklift"]
    m = tubelet.load(X, threads=1)
    got = list(tubelet.watch(video, m, window=1, stride=0.5, top=3, labels=labels,
                             template="a video of {}"))
    cli = subprocess.run([str(CLI), "timeline", "--model", str(X), "--labels", ",".join(labels),
                          "--template", "a video of {}", "--window", "1", "--stride", "0.5",
                          "--top", "3", "--json", "--threads", "1", str(video)],
                         capture_output=True, text=True, check=True)
    want = json.loads(cli.stdout)
    assert len(got) == len(want) >= 4
    for g, w in zip(got, want):
        assert abs(g["t0"] - w["start"]) < 1e-3 and abs(g["t1"] - w["end"]) < 1e-3
        assert [t["label"] for t in g["top"]] == [t["label"] for t in w["top"]]
        for a, b in zip(g["top"], w["top"]):
            assert abs(a["score"] - b["score"]) < 1e-5
    with pytest.raises(ValueError, match="give labels"):
        next(tubelet.watch(video, m))
