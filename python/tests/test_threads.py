"""One model, several Python threads: each thread gets its own state, the GIL is released while
the library computes, and the answers are those of one thread alone, bit for bit."""
import signal
import sys
import threading

import numpy as np
import pytest

import tubelet
from conftest import FIXTURES, MOTION


def test_four_threads_one_model():
    d = FIXTURES / "timesformer_divided"
    m = tubelet.load(d, threads=1)
    x = np.load(d / "input.npy")
    # another shape too, so threads also switch their state
    x2 = np.ascontiguousarray(x[:1])
    want, want2 = m(x, hidden=True), m(x2)
    results, errors = {}, []
    start = threading.Barrier(4)

    def work(k):
        try:
            start.wait()
            out = []
            for i in range(20):
                out.append(m(x, hidden=True) if (i + k) % 2 else m(x2))
            results[k] = out
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    ts = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors, errors
    for k, out in results.items():
        for i, r in enumerate(out):
            if (i + k) % 2:
                assert np.array_equal(r[0], want[0]) and np.array_equal(r[1], want[1])
            else:
                assert np.array_equal(r, want2)


def test_gil_released_during_forward():
    """While one thread is inside a forward pass, another runs Python code: a counter thread
    advances during the forward (with the GIL held it could not run at all)."""
    m = tubelet.load(FIXTURES / "videomae_mean", threads=1)
    x = np.zeros((16, 4, 3, 32, 32), np.float32)
    m(x)
    ticks = []
    inside = threading.Event()
    done = threading.Event()

    def counter():
        inside.wait()
        while not done.is_set():
            ticks.append(1)

    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-4)
    try:
        t = threading.Thread(target=counter)
        t.start()
        inside.set()
        n0 = len(ticks)
        for _ in range(5):
            m(x)
        n1 = len(ticks)
        done.set()
        t.join()
    finally:
        sys.setswitchinterval(old)
    assert n1 > n0


def test_grad_from_threads():
    d = FIXTURES / "videomae_mean"
    m = tubelet.load(d, threads=1)
    x, y = np.load(d / "input.npy"), np.load(d / "labels.npy")
    want_loss, want = m.grad(x, y)
    out = []

    def work():
        out.append(m.grad(x, y))

    ts = [threading.Thread(target=work) for _ in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert len(out) == 4
    for loss, g in out:
        assert loss == want_loss and all(np.array_equal(g[k], want[k]) for k in want)


def test_thread_count_fixed_at_load():
    """The engine's thread count is chosen at load, and nothing can change it while other threads
    run forward without the GIL: the binding's set_threads used to write it with only the GIL
    held, a data race with them. There is no writer now, so no race to lose: the handle has no
    setter, and forwards from four threads give the one-thread answer and keep the count."""
    d = FIXTURES / "timesformer_divided"
    m = tubelet.load(d, threads=2)
    x = np.load(d / "input.npy")
    want = m(x)
    setters = [a for a in dir(m._h) if "thread" in a.lower()]
    assert setters == [], setters
    out, errors = [], []

    def work():
        try:
            for _ in range(10):
                out.append(m(x))
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    ts = [threading.Thread(target=work) for _ in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(timeout=120)
    assert not errors, errors
    assert len(out) == 40 and all(np.array_equal(r, want) for r in out)
    assert m.config["threads"] == 2


class _Interrupting:
    """An 'array' whose conversion counts itself and, at call `at`, sends SIGINT to the process
    (Python raises KeyboardInterrupt in the main thread)."""

    calls = 0

    def __init__(self, frames, at):
        self.frames, self.at = frames, at

    def __array__(self, dtype=None, copy=None):
        type(self).calls += 1
        if type(self).calls == self.at:
            signal.raise_signal(signal.SIGINT)
        return self.frames


def test_keyboard_interrupt_stops_classify(motion):
    frames = tubelet.read_video(next((MOTION / "examples").glob("*.mp4")), 8).frames
    _Interrupting.calls = 0
    items = [_Interrupting(frames, at=3) for _ in range(40)]
    # Python's own handler, whatever the test runner was started with: a shell starts background
    # jobs with SIGINT ignored, and Python then keeps ignoring it
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            motion.classify(items)
    finally:
        signal.signal(signal.SIGINT, old)
    # stopped at the next video: at most the one being prefetched and one more were started
    assert 3 <= _Interrupting.calls <= 6


def _omp_env(env):
    """What libgomp printed of its settings when a fresh interpreter imported tubelet."""
    import os
    import subprocess
    full = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    full.update(env, OMP_DISPLAY_ENV="verbose")
    r = subprocess.run([sys.executable, "-c", "import tubelet"], env=full, capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return r.stderr


def test_wait_policy_default_applied_at_import():
    # libgomp reads it when the extension loads: the import must set it before, and it shows
    assert "GOMP_SPINCOUNT = '1000'" in _omp_env({})


def test_wait_policy_of_the_user_kept():
    assert "OMP_WAIT_POLICY = 'ACTIVE'" in _omp_env({"OMP_WAIT_POLICY": "active"})
    out = _omp_env({"GOMP_SPINCOUNT": "1234"})
    assert "GOMP_SPINCOUNT = '1234'" in out
