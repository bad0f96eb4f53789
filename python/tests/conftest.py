"""Shared paths and helpers of the Python test suite (run from anywhere: paths are absolute)."""
import json
import os
import shutil
import struct
import subprocess
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = Path(os.environ.get("TUBELET_FIXTURES", ROOT / "tests" / "fixtures"))
CLI = Path(os.environ.get("TUBELET_CLI", ROOT / "build" / "tubelet"))
MOTION = ROOT / "models" / "motion-vivit"


def fixture_list(name: str) -> list[str]:
    return [s.strip() for s in (FIXTURES / name).read_text().split() if s.strip()]


def tol(ref: np.ndarray) -> float:
    """The project's forward tolerance: 1e-4 * max(1, max |reference|) (tests/parity.h)."""
    return 1e-4 * max(1.0, float(np.abs(ref).max()))


def read_safetensors(path: Path) -> dict[str, np.ndarray]:
    """The float32 tensors of a .safetensors file (no dependency on the safetensors package)."""
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    out = {}
    for name, t in header.items():
        if name == "__metadata__" or t["dtype"] != "F32":
            continue
        a, b = t["data_offsets"]
        out[name] = np.frombuffer(raw[8 + n + a:8 + n + b], dtype="<f4").reshape(t["shape"])
    return out


def run_cli(*args: str) -> subprocess.CompletedProcess:
    if not CLI.exists():
        pytest.skip(f"{CLI} is not built (make)")
    return subprocess.run([str(CLI), *args], capture_output=True, text=True, cwd=ROOT, timeout=300)


@pytest.fixture(scope="session")
def motion():
    import tubelet
    return tubelet.load(MOTION, threads=2)


@pytest.fixture
def tmp_fixture(tmp_path):
    """A writable copy of a fixture directory."""
    def make(name: str) -> Path:
        d = tmp_path / name
        shutil.copytree(FIXTURES / name, d)
        return d
    return make
