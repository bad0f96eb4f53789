"""tubelet.watch, the generator over a live source (tubelet_live_*), against `tubelet watch`."""
import json
import shutil
import subprocess

import pytest

import tubelet
from conftest import MOTION, run_cli

CLIP = MOTION / "examples" / "move_left_0001.mp4"  # 1 s at 8 fps


@pytest.fixture(scope="module")
def four(tmp_path_factory):
    """Four example clips, one per direction, joined: 4 s at 8 fps (ffmpeg's concat)."""
    if not shutil.which("ffmpeg"):
        pytest.skip("the ffmpeg CLI is needed")
    d = tmp_path_factory.mktemp("watch")
    names = ["move_down_0000", "move_left_0000", "move_right_0000", "move_up_0000"]
    (d / "list.txt").write_text("".join(f"file '{MOTION / 'examples' / n}.mp4'\n" for n in names))
    subprocess.run(["ffmpeg", "-v", "error", "-y", "-f", "concat", "-safe", "0", "-i",
                    str(d / "list.txt"), "-c", "copy", str(d / "four.mp4")], check=True, timeout=60)
    return d / "four.mp4"


def cli_watch(source, *args: str) -> list[dict]:
    r = run_cli("watch", str(source), "--model", str(MOTION), *args)
    assert r.returncode == 0, r.stderr
    return [json.loads(line) for line in r.stdout.splitlines()]


def same_windows(got: list[dict], want: list[dict]) -> None:
    assert len(got) == len(want) and want
    for g, w in zip(got, want):
        assert set(g) == set(w)  # the keys of watch's JSON lines
        assert abs(g["t0"] - w["t0"]) < 5e-4 and abs(g["t1"] - w["t1"]) < 5e-4
        assert g["skipped"] == w["skipped"] == 0  # a file: every window, none dropped
        assert [t["label"] for t in g["top"]] == [t["label"] for t in w["top"]]
        for a, b in zip(g["top"], w["top"]):
            assert abs(a["score"] - b["score"]) <= 1e-6  # the CLI prints 6 decimals
        assert g["lag_ms"] >= 0 and g["wall"] > 0


@pytest.mark.parametrize("window,stride,smooth", [(1, 0.5, 1), (0.5, 0.25, 1), (1, 0.25, 3)])
def test_watch_file_equals_cli(motion, four, window, stride, smooth):
    """A file: the windows, labels and scores of `tubelet watch` (and so of timeline)."""
    want = cli_watch(four, "--window", str(window), "--stride", str(stride), "--top", "3",
                     "--smooth", str(smooth))
    got = list(tubelet.watch(four, motion, window=window, stride=stride, top=3, smooth=smooth))
    assert len(got) >= 4
    same_windows(got, want)


def test_watch_loads_a_model_dir(four):
    got = list(tubelet.watch(str(four), MOTION, window=1, stride=1, top=1, threads=2))
    labels = [w["top"][0]["label"] for w in got]
    assert labels == ["move_down", "move_left", "move_right", "move_up"]


def test_watch_stops_early(motion):
    """Leaving the loop closes the source (the decoder thread is joined, nothing hangs)."""
    gen = tubelet.watch(CLIP, motion, window=0.5, stride=0.25)
    first = next(gen)
    assert first["t0"] == 0
    gen.close()
    with pytest.raises(StopIteration):
        next(gen)


def test_watch_bad_sources(motion, tmp_path):
    with pytest.raises(tubelet.Error, match="none.mp4: cannot open"):
        next(tubelet.watch(tmp_path / "none.mp4", motion))
    with pytest.raises(tubelet.Error, match="unsupported source scheme 'ftp'"):
        next(tubelet.watch("ftp://127.0.0.1/x.mp4", motion))
    with pytest.raises(ValueError, match="top"):
        next(tubelet.watch(CLIP, motion, top=0))
    with pytest.raises(ValueError, match="window"):
        next(tubelet.watch(CLIP, motion, window=-1))
