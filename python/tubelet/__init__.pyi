# Type stubs of the tubelet package (the docstrings are in __init__.py; help() shows them).
import os
from typing import Any, Iterator, Literal, NamedTuple, Protocol, overload

import numpy as np
import numpy.typing as npt

__all__ = ["Error", "InputError", "Model", "Video", "__version__", "arch_names", "from_arch",
           "from_config", "load", "read_video", "watch"]

__version__: str

class Error(RuntimeError):
    """An error the tubelet library reported; the message names the file and the problem."""

    status: str

class InputError(Error, ValueError):
    def __init__(self, message: str, status: str = "shape") -> None: ...

class Video(NamedTuple):
    frames: npt.NDArray[np.uint8]
    indices: npt.NDArray[np.int64]
    fps: float

_Path = str | os.PathLike[str]

class _Readable(Protocol):
    def read(self) -> bytes: ...

# a video: its path, or its content (bytes-like, or a binary file object read to its end)
_Video = _Path | bytes | bytearray | memoryview | _Readable
_Precision = Literal["fp32", "bf16", "int8", "bf16-ref", "int8-ref"]
_Sampling = Literal["hf", "uniform", "clip", "hf-rate"]
_Pool = Literal["cls", "mean", "none"]

def load(model_dir: _Path, precision: _Precision = "fp32", threads: int | None = None, *,
         inference: bool = False, max_memory: int | None = None,
         train_precision: Literal["fp32", "bf16"] = "fp32",
         device: Literal["cpu", "cuda"] = "cpu") -> Model: ...
def from_arch(arch: str, precision: _Precision = "fp32", threads: int | None = None, *,
              seed: int = 42, inference: bool = False, max_memory: int | None = None,
              device: Literal["cpu", "cuda"] = "cpu") -> Model: ...
def from_config(config: dict[str, Any] | _Path, precision: _Precision = "fp32",
                threads: int | None = None, *, seed: int = 42, inference: bool = False,
                max_memory: int | None = None) -> Model: ...
def arch_names() -> list[str]: ...
def read_video(path: _Video, num_frames: int, sampling: _Sampling = "hf", *,
               stride: int | None = None, clips: int = 1, threads: int | None = None) -> Video: ...

class Model:
    @property
    def config(self) -> dict[str, Any]: ...
    @property
    def labels(self) -> tuple[str, ...]: ...
    @property
    def num_params(self) -> int: ...
    @property
    def model_dir(self) -> str | None: ...
    def flop_per_clip(self, frames: int | None = None,
                      size: int | tuple[int, int] | None = None) -> float: ...
    @overload
    def forward(self, x: npt.ArrayLike, hidden: Literal[False] = False) -> npt.NDArray[np.float32]: ...
    @overload
    def forward(self, x: npt.ArrayLike, hidden: Literal[True]
                ) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.float32]]: ...
    @overload
    def __call__(self, x: npt.ArrayLike, hidden: Literal[False] = False) -> npt.NDArray[np.float32]: ...
    @overload
    def __call__(self, x: npt.ArrayLike, hidden: Literal[True]
                 ) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.float32]]: ...
    def features(self, x: npt.ArrayLike | _Video | list[_Video], pool: _Pool | None = None,
                 layers: int | list[int] | None = None, *,
                 levels: int | None = None) -> npt.NDArray[np.float32]: ...
    def preprocess(self, video: _Video | npt.NDArray[np.uint8], *, sampling: _Sampling = "hf",
                   stride: int | None = None, clips: int = 1, crops: Literal[1, 3] = 1,
                   num_frames: int | None = None,
                   threads: int | None = None) -> npt.NDArray[np.float32]: ...
    @overload
    def classify(self, videos: _Video | npt.NDArray[Any], top: int = 5, clips: int = 1,
                 crops: Literal[1, 3] = 1, *, sampling: _Sampling = "hf",
                 stride: int | None = None, threads: int | None = None,
                 labels: list[str] | None = None, template: str | None = None
                 ) -> dict[str, Any]: ...
    @overload
    def classify(self, videos: list[Any] | tuple[Any, ...], top: int = 5, clips: int = 1,
                 crops: Literal[1, 3] = 1, *, sampling: _Sampling = "hf",
                 stride: int | None = None, threads: int | None = None,
                 labels: list[str] | None = None, template: str | None = None
                 ) -> list[dict[str, Any]]: ...
    def encode_text(self, texts: list[str]) -> npt.NDArray[np.float32]: ...
    def encode_video(self, x: npt.ArrayLike) -> npt.NDArray[np.float32]: ...
    def logits_per_video(self, x: npt.ArrayLike, text_embeds: npt.ArrayLike
                         ) -> npt.NDArray[np.float32]: ...
    def grad(self, x: npt.ArrayLike, labels: npt.ArrayLike
             ) -> tuple[float, dict[str, npt.NDArray[np.float32]]]: ...
    def state_dict(self) -> dict[str, npt.NDArray[np.float32]]: ...

def watch(source: _Path, model: Model | _Path, window: float = 2.0, stride: float = 0.5, *,
          top: int = 5, smooth: int = 1, realtime: bool = False, reconnect: bool = False,
          reconnect_tries: int = 0, timeout: float = 10.0,
          threads: int | None = None) -> Iterator[dict[str, Any]]: ...
