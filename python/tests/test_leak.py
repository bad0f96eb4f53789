"""The extension must not leak: 1000 loads, forwards and frees of a small model leave the resident
set flat (within a few MB), and so do 1000 failed loads."""
import gc
import os

import numpy as np

import tubelet
from conftest import FIXTURES

PAGE = os.sysconf("SC_PAGE_SIZE")


def rss_mb():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE / 2**20


def cycle(n, d, x, tmp):
    for _ in range(n):
        m = tubelet.load(d, threads=1)
        m(x, hidden=True)
        del m
        try:
            tubelet.load(tmp)
        except tubelet.Error:
            pass
    gc.collect()


def test_load_free_flat(tmp_path):
    d = FIXTURES / "vivit_m1"
    x = np.load(d / "input.npy")
    cycle(100, d, x, tmp_path / "missing")  # warm up allocator pools
    before = rss_mb()
    cycle(1000, d, x, tmp_path / "missing")
    after = rss_mb()
    assert after - before < 4, f"RSS grew {after - before:.1f} MB over 1000 loads"
