"""Video from Python against the CLI (build/tubelet) and the HF pipeline fixtures."""
import json
import re

import numpy as np
import pytest

import tubelet
from conftest import FIXTURES, MOTION, ROOT, run_cli

EXAMPLES = sorted((MOTION / "examples").glob("*.mp4"))


def test_classify_equals_cli_json(motion):
    """classify on the example clips = `tubelet classify --json`, video by video."""
    paths = [str(p) for p in EXAMPLES]
    assert len(paths) >= 2
    r = run_cli("classify", "--model", str(MOTION), *paths, "--top", "3", "--json")
    assert r.returncode == 0, r.stderr
    cli = json.loads(r.stdout)
    got = motion.classify(paths, top=3)
    assert len(got) == len(cli)
    for g, c in zip(got, cli):
        assert g["video"] == c["video"]
        assert [t["label"] for t in g["top"]] == [t["label"] for t in c["top"]]
        for a, b in zip(g["top"], c["top"]):
            assert abs(a["score"] - b["score"]) <= 1e-6  # the CLI prints 6 decimals
    # one video alone: the same answer, as a dict
    one = motion.classify(paths[0], top=3)
    assert one == got[0]


def test_classify_views_equal_cli(motion):
    path = str(EXAMPLES[0])
    r = run_cli("classify", "--model", str(MOTION), path, "--top", "2", "--clips", "2",
                "--crops", "3", "--sampling", "uniform", "--json")
    assert r.returncode == 0, r.stderr
    c = json.loads(r.stdout)[0]
    g = motion.classify(path, top=2, clips=2, crops=3, sampling="uniform")
    assert [t["label"] for t in g["top"]] == [t["label"] for t in c["top"]]
    assert all(abs(a["score"] - b["score"]) <= 1e-6 for a, b in zip(g["top"], c["top"]))


def test_preprocess_equals_cli(motion, tmp_path):
    path = str(EXAMPLES[1])
    out = tmp_path / "x.npy"
    r = run_cli("preprocess", "--model", str(MOTION), path, "-o", str(out), "--crops", "3",
                "--clips", "2", "--sampling", "clip", "--stride", "2")
    assert r.returncode == 0, r.stderr
    ref = np.load(out)
    got = motion.preprocess(path, crops=3, clips=2, sampling="clip", stride=2)
    assert got.dtype == np.float32 and got.shape == ref.shape
    assert np.array_equal(got, ref)


def test_read_video_then_preprocess(motion):
    """read_video's frames, preprocessed in memory, are the pixel_values of the file."""
    path = EXAMPLES[2]
    v = tubelet.read_video(path, 8, "uniform")
    assert v.frames.dtype == np.uint8 and v.frames.shape[0] == 8 and v.frames.shape[3] == 3
    assert v.indices.dtype == np.int64 and v.indices.shape == (8,)
    assert v.fps > 0
    frames, idx, fps = v  # unpacks as a tuple
    for crops in (1, 3):
        a = motion.preprocess(frames, crops=crops)
        b = motion.preprocess(path, sampling="uniform", crops=crops)
        assert np.array_equal(a, b)
    # classify of the frames array = classify of the file (same sampling)
    ga = motion.classify([frames], top=2)[0]
    gb = motion.classify(path, top=2, sampling="uniform")
    assert ga["video"] == 0 and ga["top"] == gb["top"]


def test_read_video_indices():
    """hf sampling takes frame floor(i * F / T) (docs/video.md)."""
    v = tubelet.read_video(FIXTURES / "video" / "h264.mp4", 5, "hf")
    n = tubelet.read_video(FIXTURES / "video" / "h264.mp4", 1, "clip", stride=1)
    assert len(v.indices) == 5
    assert list(v.indices) == sorted(v.indices) and v.indices[0] == 0
    assert n.frames.shape[0] == 1


def test_features_of_videos_equal_cli(motion, tmp_path):
    paths = [str(p) for p in EXAMPLES[:3]]
    for pool in ("cls", "none"):
        out = tmp_path / f"f_{pool}.npy"
        r = run_cli("features", "--model", str(MOTION), *paths, "-o", str(out), "--pool", pool)
        assert r.returncode == 0, r.stderr
        assert np.array_equal(motion.features(paths, pool=pool), np.load(out))


def _expected_top(path):
    rows = [line.split("\t") for line in path.read_text(encoding="utf-8").splitlines() if line]
    return [(lab, float(s)) for lab, s in rows]


CASES = []
_exp = json.loads((FIXTURES / "pipeline" / "expected.json").read_text(encoding="utf-8"))
for _c in _exp["cases"]:
    _m = re.search(r"--model (\S+) (\S+)", _c["command"])
    CASES.append((_c["model"], _m.group(1), _m.group(2)))


@pytest.mark.parametrize("model,mdir,video", CASES, ids=[f"{c[0]}-{c[2].rsplit('/', 1)[1]}" for c in CASES])
def test_classify_equals_hf_pipeline(model, mdir, video):
    """Top-5 = transformers.pipeline("video-classification") (tests/fixtures/pipeline):
    labels exact and in order, scores within 1e-4."""
    m = tubelet.load(ROOT / mdir, threads=2)
    got = m.classify(str(ROOT / video), top=5)["top"]
    stem = video.rsplit("/", 1)[1].split(".")[0]
    exp = _expected_top(FIXTURES / "pipeline" / f"expected_{model}_{stem}.txt")
    assert [g["label"] for g in got] == [e[0] for e in exp]
    assert all(abs(g["score"] - e[1]) <= 1e-4 for g, e in zip(got, exp))
