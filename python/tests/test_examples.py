"""examples/python/classify_folder.py: a missing folder is named as missing, every label in the CSV
has its score, and progress into a pipe is plain lines (the CLI's rule, README "Commands")."""
import csv
import shutil
import subprocess
import sys

from conftest import MOTION, ROOT

SCRIPT = ROOT / "examples" / "python" / "classify_folder.py"


def run(*args):
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], capture_output=True,
                          text=True, timeout=300)


def test_missing_folder(tmp_path):
    r = run(tmp_path / "nonexistent", "--model", MOTION, "-o", tmp_path / "out.csv")
    assert r.returncode != 0
    assert "nonexistent: no such directory" in r.stderr
    assert not (tmp_path / "out.csv").exists()


def test_file_instead_of_folder(tmp_path):
    f = tmp_path / "a.txt"
    f.write_text("x")
    r = run(f, "--model", MOTION, "-o", tmp_path / "out.csv")
    assert r.returncode != 0 and "a.txt: not a directory" in r.stderr


def test_csv_scores_and_plain_progress(tmp_path):
    d = tmp_path / "videos"
    d.mkdir()
    clips = sorted((MOTION / "examples").glob("*.mp4"))[:2]
    for c in clips:
        shutil.copy(c, d)
    (d / "broken.mp4").write_bytes(b"not a video")
    out = tmp_path / "labels.csv"
    r = run(d, "--model", MOTION, "-o", out, "--top", "3", "--threads", "1")
    assert r.returncode == 1, r.stderr  # the broken video fails, the others are labelled
    rows = list(csv.reader(out.open()))
    assert rows[0] == ["video", "label", "score", "label2", "score2", "label3", "score3", "error"]
    by_name = {r[0].rsplit("/", 1)[-1]: r for r in rows[1:]}
    assert len(by_name) == 3
    for c in clips:
        row = by_name[c.name]
        scores = [float(row[k]) for k in (2, 4, 6)]
        assert all(row[k] for k in (1, 3, 5)) and row[7] == ""
        assert all(0 <= s <= 1 for s in scores) and scores == sorted(scores, reverse=True)
    assert by_name["broken.mp4"][1:7] == [""] * 6 and by_name["broken.mp4"][7]
    assert "\r" not in r.stderr  # stderr is a pipe here: plain lines
    assert "3/3" in r.stderr
