"""tubelet: video vision transformers (ViViT, TimeSformer, VideoMAE, Video Swin, X-CLIP) in C.

A C engine with numpy in and out. The model runs without the GIL, so several Python threads can
share one model; a float32 C-contiguous input is read in place, never copied.

Examples
--------
>>> import tubelet
>>> m = tubelet.load("models/motion-vivit")
>>> x = m.preprocess("models/motion-vivit/examples/move_up_0000.mp4")
>>> m(x).shape
(1, 4)
>>> m.classify("models/motion-vivit/examples/move_up_0000.mp4", top=1)
{'video': 'models/motion-vivit/examples/move_up_0000.mp4', 'top': [{'label': 'move_up', 'score': ...}]}

See docs/python.md for the whole API.
"""

from __future__ import annotations  # (binds the name `annotations`, deleted below)

import concurrent.futures as _futures
import json as _json
import os as _os
import tempfile as _tempfile
import threading as _threading
import time as _time
import warnings as _warnings
from typing import Any as _Any
from typing import Iterator as _Iterator
from typing import NamedTuple as _NamedTuple

import numpy as _np

# OpenMP's idle threads spin before they sleep, which on a busy machine makes short parallel
# regions several times slower (docs/threads.md). libgomp reads its wait policy once, when it loads
# with the extension just below: so, unless the user chose one, tubelet's default goes in first.
if "OMP_WAIT_POLICY" not in _os.environ and "GOMP_SPINCOUNT" not in _os.environ:
    _os.environ["GOMP_SPINCOUNT"] = "1000"

from . import _tubelet  # noqa: E402 (after the wait policy, on purpose)
from ._tubelet import Error

del annotations  # the future import's name; the module's public names are __all__

__version__: str = _tubelet.VERSION

__all__ = [
    "Error",
    "InputError",
    "Model",
    "Video",
    "__version__",
    "arch_names",
    "from_arch",
    "from_config",
    "load",
    "read_video",
    "watch",
]


class InputError(Error, ValueError):
    """An array argument has the wrong dtype, rank or shape (raised before any compute).

    A subclass of both :class:`tubelet.Error` and :class:`ValueError`. Its ``status`` is
    ``"shape"`` (wrong rank or shape), ``"arg"`` (a dtype or object that is no array of the
    right kind) or ``"value"`` (a label outside the model's classes).
    """

    def __init__(self, message: str, status: str = "shape") -> None:
        super().__init__(message)
        self.status = status


def _error(message: str, status: str) -> Error:
    """tubelet.Error(message) with its ``status``, as the library's own errors carry it."""
    e = Error(message)
    e.status = status
    return e


_PRECISIONS = {"fp32": (0, 0), "bf16": (1, 0), "int8": (2, 0), "bf16-ref": (1, 1),
               "int8-ref": (2, 1)}
_POOLS = {"cls": 0, "mean": 1}
_HAVE_VIDEO = bool(_tubelet.HAVE_VIDEO)


def _load_args(precision: str, threads: int | None) -> tuple[int, int, int]:
    if precision not in _PRECISIONS:
        raise ValueError(f"precision must be one of {', '.join(_PRECISIONS)}, not {precision!r}")
    if threads is None:
        threads = 0
    cap = _tubelet.max_threads()
    if not isinstance(threads, int) or not 0 <= threads <= cap:
        raise ValueError(f"threads must be None or an int from 0 to {cap} (4 x the CPUs this "
                         f"process may use), not {threads!r}")
    p, ref = _PRECISIONS[precision]
    return p, ref, threads


def load(model_dir: str | _os.PathLike, precision: str = "fp32", threads: int | None = None, *,
         inference: bool = False, max_memory: int | None = None,
         train_precision: str = "fp32", device: str = "cpu") -> Model:
    """Load a Hugging Face model directory.

    Parameters
    ----------
    model_dir : str or os.PathLike
        A directory with ``config.json`` and ``model.safetensors`` (or a sharded
        ``model.safetensors.index.json``) of a ``VideoMAE`` (classifier or
        ``VideoMAEForPreTraining``), ``TimeSformer``, ``ViViT``, Video Swin or X-CLIP model, or an
        official checkpoint file (``.pth``/``.pyth``, scenic's Flax; docs/checkpoints.md);
        ``preprocessor_config.json`` there sets the video preprocessing.
    precision : {"fp32", "bf16", "int8"}, optional
        Precision of the linear layers (docs/precision.md). ``"bf16-ref"`` and ``"int8-ref"`` take
        the portable path even where the CPU has AVX512-BF16 / VNNI. :meth:`Model.grad` needs
        ``"fp32"``.
    threads : int, optional
        Threads of each forward pass. ``None`` or ``0``: every core. At most 4 x the CPUs this
        process may use (ValueError above).
    inference : bool, optional
        Pack the fp32 weights once for forward passes only (1-4 % faster per forward, about
        180 ms more at load for ViT-B); :meth:`Model.grad` is then unavailable. Reduced
        precisions always pack.
    max_memory : int, optional
        Bytes the model may need; ``None``: the machine's memory; ``-1``: no check.
    train_precision : {"fp32", "bf16"}, optional
        Precision of :meth:`Model.grad`: ``"bf16"`` is mixed precision as
        ``torch.autocast(dtype=torch.bfloat16)`` — f32 weights and gradients, every product of
        the linear layers with bf16 operands (docs/training.md).
    device : {"cpu", "cuda"}, optional
        The backend that runs the model: ``"cuda"`` needs a library built with ``CUDA=1`` and an
        NVIDIA GPU (fp32 inference; written but not yet verified on a GPU, docs/cuda.md).
        :class:`tubelet.Error` when this build or machine lacks it.

    Returns
    -------
    Model

    Raises
    ------
    tubelet.Error
        The directory, a file in it, or the configuration is missing, unreadable, malformed or
        unsupported; the message names the file and the problem.

    See Also
    --------
    from_arch : a model with random weights at a built-in architecture's shapes.

    Examples
    --------
    >>> m = tubelet.load("models/motion-vivit", threads=2)
    >>> m.config["model_type"], m.labels
    ('vivit', ('move_right', 'move_left', 'move_down', 'move_up'))
    """
    p, ref, threads = _load_args(precision, threads)
    if train_precision not in ("fp32", "bf16"):
        raise ValueError(f"train_precision must be 'fp32' or 'bf16', not {train_precision!r}")
    path = _os.fspath(model_dir)
    if isinstance(path, bytes):
        path = _os.fsdecode(path)
    h = _tubelet._load(path, 0, p, ref, threads, bool(inference), 0,
                       0 if max_memory is None else int(max_memory),
                       _tubelet.precision_parse(train_precision), str(device))
    return Model(h, path)


def from_arch(arch: str, precision: str = "fp32", threads: int | None = None, *, seed: int = 42,
              inference: bool = False, max_memory: int | None = None,
              device: str = "cpu") -> Model:
    """Build a model with random weights at a built-in architecture's shapes.

    Parameters
    ----------
    arch : str
        One of :func:`arch_names`, e.g. ``"videomae-base"``, ``"timesformer-base"``,
        ``"vivit-base"``.
    precision, threads, inference, max_memory, device
        As for :func:`load`.
    seed : int, optional
        Seed of the random initialisation (42, as ``tubelet bench --arch`` uses).

    Returns
    -------
    Model
        Its preprocessing is transformers' VideoMAE processor at the model's input size.

    Raises
    ------
    tubelet.Error
        Unknown architecture name.

    Examples
    --------
    >>> m = tubelet.from_arch("videomae-base")
    >>> m.num_params
    86534800
    """
    p, ref, threads = _load_args(precision, threads)
    h = _tubelet._load(str(arch), 1, p, ref, threads, bool(inference), int(seed) & (2**64 - 1),
                       0 if max_memory is None else int(max_memory), 0, str(device))
    return Model(h, None)


def from_config(config: dict | str | _os.PathLike, precision: str = "fp32",
                threads: int | None = None, *, seed: int = 42, inference: bool = False,
                max_memory: int | None = None) -> Model:
    """Build a model with random weights from a configuration, as transformers'
    ``AutoModel.from_config`` does: every weight drawn from normal(0, ``initializer_range``),
    biases zero, LayerNorms one and zero.

    Parameters
    ----------
    config : dict, str or os.PathLike
        A ``config.json`` as a dict, or the path of a ``config.json`` or of a directory holding
        one (weights beside it are not read).
    precision, threads, inference, max_memory, device
        As for :func:`load`.
    seed : int, optional
        Seed of the random initialisation.

    Returns
    -------
    Model
        Without a model directory; save it with the CLI's ``tubelet train`` or use it as is.

    Raises
    ------
    tubelet.Error
        The configuration is missing, malformed or unsupported (the message names config.json).

    Examples
    --------
    >>> m = tubelet.from_config({"model_type": "videomae", "image_size": 32, "patch_size": 16,
    ...                          "num_frames": 4, "hidden_size": 64, "num_hidden_layers": 2,
    ...                          "num_attention_heads": 2, "intermediate_size": 128})
    >>> m.config["hidden_size"]
    64
    """
    if isinstance(config, dict):
        text = _json.dumps(config)
    else:
        path = _os.fsdecode(_os.fspath(config))
        if _os.path.isdir(path):
            path = _os.path.join(path, "config.json")
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read()
        except OSError as e:
            raise _error(f"{path}: cannot read the configuration ({e.strerror})", "io") from None
    p, ref, threads = _load_args(precision, threads)
    # the C loader reads a directory: one holding this config.json alone, so that no weights
    # beside the caller's file are read
    with _tempfile.TemporaryDirectory(prefix="tubelet-config-") as d:
        with open(_os.path.join(d, "config.json"), "w", encoding="utf-8") as f:
            f.write(text)
        with _warnings.catch_warnings():  # "no weights": that is what was asked for
            _warnings.filterwarnings("ignore", message=".*no weights; starting from random")
            h = _tubelet._load(d, 2, p, ref, threads, bool(inference), int(seed) & (2**64 - 1),
                               0 if max_memory is None else int(max_memory))
    return Model(h, None)


def arch_names() -> list[str]:
    """Names of the built-in architectures :func:`from_arch` accepts."""
    return _tubelet.arch_names()


class Video(_NamedTuple):
    """Frames :func:`read_video` decoded.

    Attributes
    ----------
    frames : numpy.ndarray
        uint8 ``(n, height, width, 3)`` RGB, after the container's rotation; ``n`` is
        ``clips * num_frames``.
    indices : numpy.ndarray
        int64 ``(n,)``: the frame numbers, in presentation order, that were sampled.
    fps : float
        Average frame rate of the video.
    """

    frames: _np.ndarray
    indices: _np.ndarray
    fps: float


def _need_video() -> None:
    if not _HAVE_VIDEO:
        raise _error("this build of tubelet has no video support (include/tubelet_video.h)",
                     "unsupported")


def _views_params(sampling: str, stride: int | None, clips: int, crops: int,
                  threads: int | None) -> tuple[str, int, int, int, int]:
    if sampling not in ("hf", "uniform", "clip", "hf-rate"):
        raise ValueError(f"sampling must be 'hf', 'uniform', 'clip' or 'hf-rate', not {sampling!r}")
    if stride is not None and (not isinstance(stride, int) or stride < 1):
        raise ValueError(f"stride must be None or an int >= 1, not {stride!r}")
    if not isinstance(clips, int) or not 1 <= clips <= 1024:
        raise ValueError(f"clips must be an int in [1, 1024], not {clips!r}")
    if crops not in (1, 3):
        raise ValueError(f"crops must be 1 or 3, not {crops!r}")
    if threads is not None and (not isinstance(threads, int) or threads < 0):
        raise ValueError(f"threads must be None or an int >= 0, not {threads!r}")
    return sampling, stride or 0, clips, crops, threads or 0


def read_video(path: str | _os.PathLike | bytes | _Any, num_frames: int, sampling: str = "hf", *,
               stride: int | None = None, clips: int = 1, threads: int | None = None) -> Video:
    """Decode the frames a model would sample from a video file.

    Parameters
    ----------
    path : str, os.PathLike, bytes-like or binary file object
        A video file FFmpeg can read; or its content: ``bytes``, ``bytearray`` or a
        ``memoryview``, or a file object opened with ``"rb"`` (read to its end), decoded from
        memory with no temporary file and the same frames as from the file.
    num_frames : int
        Frames per clip.
    sampling : {"hf", "uniform", "clip", "hf-rate"}, optional
        ``"hf"``: frame ``floor(i * F / T)``, what the transformers video-classification
        pipeline takes (default); ``"uniform"``: segment centres; ``"clip"``: ``num_frames``
        frames ``stride`` apart, centred (VideoMAE's test loader); ``"hf-rate"``: the pipeline's
        older frames ``0, r, 2r, ...``. docs/video.md has the exact formulas.
    stride : int, optional
        Frame stride for ``"clip"`` (default 4) or rate for ``"hf-rate"`` (default 1).
    clips : int, optional
        Temporal views (``"clip"`` sampling spreads them over the video).
    threads : int, optional
        Decoder threads; ``None``: FFmpeg's choice.

    Returns
    -------
    Video
        ``(frames, indices, fps)``: uint8 ``(clips * num_frames, H, W, 3)``, the int64 frame
        numbers, and the average frame rate. A video shorter than the clip repeats frames, as
        the reference loaders do.

    Raises
    ------
    tubelet.Error
        The file is missing, unreadable, not a video or truncated; the message names it.

    Examples
    --------
    >>> frames, idx, fps = tubelet.read_video("clip.mp4", 16)
    >>> frames.shape, frames.dtype
    ((16, 240, 320, 3), dtype('uint8'))
    """
    _need_video()
    if not isinstance(num_frames, int) or not 1 <= num_frames <= 4096:
        raise ValueError(f"num_frames must be an int in [1, 4096], not {num_frames!r}")
    sampling, stride, clips, _, threads = _views_params(sampling, stride, clips, 1, threads)
    if not _is_video(path):
        raise TypeError(f"path must be a str, os.PathLike, bytes or a binary file object, not "
                        f"{type(path).__name__}")
    src, data, name = _video_source(path)
    blob, shape, idx, _n, fps, _pad = _tubelet._read_frames(
        src, sampling, stride, clips, 1, num_frames, threads, 0, data, name)
    frames = _np.frombuffer(blob, dtype=_np.uint8).reshape(shape)
    return Video(frames, _np.asarray(idx, dtype=_np.int64), float(fps))


def _as_array(x: _Any, what: str) -> _np.ndarray:
    """x as an ndarray without a copy where possible: ndarrays, the buffer protocol, DLPack
    (torch tensors on the CPU) and __array__."""
    if isinstance(x, _np.ndarray):
        return x
    if hasattr(x, "__dlpack__") and not isinstance(x, (bytes, bytearray, memoryview)):
        try:
            return _np.from_dlpack(x)
        except (BufferError, TypeError, RuntimeError, ValueError):
            pass  # e.g. a tensor that requires grad: try __array__, which says why
    try:
        return _np.asarray(x)
    except Exception as e:  # noqa: BLE001 - any conversion failure is the caller's input
        raise InputError(f"{what}: cannot read {type(x).__name__} as an array: {e}",
                         "arg") from e


def _float32(a: _np.ndarray, what: str, stacklevel: int) -> _np.ndarray:
    if a.dtype == _np.float32:
        return _np.ascontiguousarray(a)
    if a.dtype == _np.float64:
        _warnings.warn(f"{what}: float64 converted to float32 (a copy); pass float32 to avoid it",
                      stacklevel=stacklevel)
        return _np.ascontiguousarray(a, dtype=_np.float32)
    raise InputError(f"{what}: dtype {a.dtype} is not supported; pass float32 (or float64)",
                     "arg")


def _is_video(v: _Any) -> bool:
    """v names a video: a path (str or os.PathLike), the file's bytes (bytes, bytearray, a 1-D
    memoryview) or a binary file object (anything with read())."""
    if isinstance(v, (str, _os.PathLike, bytes, bytearray)):
        return True
    if isinstance(v, memoryview):
        return v.ndim == 1  # a memoryview of frames is an array
    return callable(getattr(v, "read", None)) and not isinstance(v, _np.ndarray)


def _video_source(v: _Any) -> tuple[_Any, bool, str | None]:
    """A video as the extension takes it: (path or bytes, is_data, name for messages). A file
    object is read to its end here; bytes are decoded from memory (FFmpeg's custom I/O), never
    through a temporary file."""
    if isinstance(v, (str, _os.PathLike)):
        return v, False, None
    if isinstance(v, (bytes, bytearray, memoryview)):
        return v, True, None
    data = v.read()
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise TypeError(f"{type(v).__name__}.read() returned {type(data).__name__}, not bytes: "
                        "open the video in binary mode ('rb')")
    name = getattr(v, "name", None)
    return data, True, name if isinstance(name, str) else None


def _video_name(v: _Any, i: int) -> str | int:
    """What results and messages call video v, the i-th: its path, its file name, or i."""
    if isinstance(v, (str, _os.PathLike)):
        return _os.fsdecode(v)
    name = getattr(v, "name", None)
    return name if isinstance(name, str) else i


class _Local(_threading.local):
    """Per-thread state cache: one activation arena (the last input shape) per thread."""

    state: _Any = None
    shapes: dict | None = None


class Model:
    """A loaded model; make one with :func:`load` or :func:`from_arch`.

    One model serves several threads: each thread gets its own activation state, and the GIL is
    released while the C library computes or decodes.

    Attributes
    ----------
    config : dict
        The configuration as the engine resolved it (Hugging Face key names where they exist:
        ``model_type``, ``num_frames``, ``hidden_size``, ``num_hidden_layers``,
        ``tubelet_size``, ``num_labels``, ...; and tubelet's ``family``, ``variant``,
        ``num_tokens``, ``flop_per_clip``, ``precision``, ``packed``, ``threads``).
    labels : tuple of str
        The class names, config.json ``id2label`` in order.
    num_params : int
        Number of parameters.
    """

    def __init__(self, handle: _Any, model_dir: str | None) -> None:
        self._h = handle
        self._dir = model_dir
        self._info = handle.info()
        self._labels = tuple(handle.labels())
        self._local = _Local()
        self._grad_lock = _threading.Lock()
        self._grads_on = False
        self._train_state: _Any = None
        self._pp_lock = _threading.Lock()
        self._pp: _Any = None

    # ---------------------------------------------------------------- attributes
    @property
    def config(self) -> dict:
        d = dict(self._info)
        d["threads"] = self._h.info()["threads"]
        d["id2label"] = {i: s for i, s in enumerate(self._labels)}
        d["image_size"] = (d["image_height"], d["image_width"])
        return d

    @property
    def labels(self) -> tuple[str, ...]:
        return self._labels

    @property
    def num_params(self) -> int:
        return int(self._info["num_params"])

    @property
    def model_dir(self) -> str | None:
        """The directory the model came from (``None`` for :func:`from_arch`)."""
        return self._dir

    def flop_per_clip(self, frames: int | None = None, size: int | tuple[int, int] | None = None
                      ) -> float:
        """Floating-point operations of one clip's forward pass.

        Parameters
        ----------
        frames : int, optional
            Frames per clip; default config.json's ``num_frames``.
        size : int or (int, int), optional
            Input height and width (one int: square); default config.json's image size.

        Returns
        -------
        float
            2 x multiply-adds of every matrix product, attention included.
        """
        f = self._info["num_frames"] if frames is None else int(frames)
        if size is None:
            h, w = self._info["image_height"], self._info["image_width"]
        elif isinstance(size, int):
            h = w = size
        else:
            h, w = (int(v) for v in size)
        return self._h.flop_per_clip(f, h, w)

    def __repr__(self) -> str:
        i = self._info
        src = self._dir if self._dir is not None else "random weights"
        return (f"<tubelet.Model {i['model_type']} {i['variant']} ({src}): "
                f"{self.num_params / 1e6:.1f}M params, {i['precision']}, "
                f"{i['num_labels']} labels>")

    # ---------------------------------------------------------------- internals
    def _pixels(self, x: _Any, stacklevel: int = 3) -> _np.ndarray:
        """x checked as pixel_values (B, T, C, H, W): float32, C-contiguous (copied only when
        it is not already)."""
        a = _as_array(x, "pixel_values")
        C = self._info["num_channels"]
        if a.ndim != 5:
            raise InputError(f"pixel_values must have 5 dimensions (batch, frames, {C}, height, "
                             f"width); got shape {a.shape}")
        if a.shape[2] != C:
            raise InputError(f"pixel_values must have shape (batch, frames, {C}, height, width); "
                             f"got {a.shape}")
        if min(a.shape) < 1 or max(a.shape) > 2**31 - 1:
            raise InputError(f"pixel_values has an empty or too large dimension: {a.shape}")
        return _float32(a, "pixel_values", stacklevel + 1)

    def _state(self, a: _np.ndarray) -> tuple[_Any, dict]:
        """This thread's state for a's shape (made on first use of a shape)."""
        B, T, _, H, W = a.shape
        loc = self._local
        s = loc.state
        if s is None or not s.matches(B, T, H, W):
            loc.state = None  # free the old arena first
            s = _tubelet._state(self._h, B, T, H, W, False)
            loc.state, loc.shapes = s, s.info()
        return s, loc.shapes

    def _preprocessor(self) -> _Any:
        _need_video()
        with self._pp_lock:
            if self._pp is None:
                if self._dir is not None:
                    self._pp = _tubelet._preprocessor(self._dir)
                else:
                    self._pp = _tubelet._preprocessor(None, self._info["image_height"],
                                                      self._info["image_width"])
            return self._pp

    # ---------------------------------------------------------------- inference
    def forward(self, x: _Any, hidden: bool = False
                ) -> _np.ndarray | tuple[_np.ndarray, _np.ndarray]:
        """Run the model on pixel_values.

        Parameters
        ----------
        x : array_like
            float32 ``(batch, frames, channels, height, width)``: a numpy array, a CPU torch
            tensor, or anything with the buffer protocol, ``__dlpack__`` or ``__array__``. A
            float32 C-contiguous input is read in place; another layout is copied, float64 is
            converted with a warning. Another size than config.json's works where the model
            allows it (positions are resized bicubically).
        hidden : bool, optional
            Also return the base model's ``last_hidden_state``.

        Returns
        -------
        logits : numpy.ndarray
            float32, what ``*ForVideoClassification`` returns (usually ``(batch, num_labels)``),
            the same numbers ``tubelet run`` writes.
        last_hidden_state : numpy.ndarray
            float32 ``(batch, tokens, hidden_size)``, only with ``hidden=True``.

        Raises
        ------
        tubelet.InputError
            Wrong dtype, rank or channel count (before any compute).
        tubelet.Error
            A shape the model cannot take, or a non-finite input value.

        Examples
        --------
        >>> logits = m(np.zeros((1, 16, 3, 224, 224), np.float32))
        >>> logits, h = m.forward(x, hidden=True)
        """
        a = self._pixels(x)
        s, sh = self._state(a)
        logits = _np.empty(sh["logits_shape"], _np.float32)
        h = _np.empty(sh["hidden_shape"], _np.float32) if hidden else None
        s.forward(a, logits, h)
        return (logits, h) if hidden else logits

    __call__ = forward

    def features(self, x: _Any, pool: str | None = None, layers: int | list[int] | None = None, *,
                 levels: int | None = None) -> _np.ndarray:
        """Embeddings or feature maps, as ``tubelet features`` writes them.

        Parameters
        ----------
        x : array_like, video, or list of videos
            pixel_values ``(batch, ...)`` as for :meth:`forward`, or video(s): paths, or their
            content as :func:`read_video` takes it, each preprocessed as :meth:`preprocess`
            does (one row per video).
        pool : {"cls", "mean", "none"}, optional
            ``"cls"``: the cls token ``(batch, hidden)`` (default for ViViT and TimeSformer);
            ``"mean"``: the mean of the patch tokens (default for VideoMAE); ``"none"``: the
            feature map ``(batch, hidden, T/t, H/p, W/p)``, the layout a detector takes.
        layers : int or list of int, optional
            int ``L``: the output of block ``L`` (``hidden_states[L]``; 0 = embeddings, no final
            LayerNorm) instead of ``last_hidden_state``. A list: one feature map per entry
            (``-1`` = last hidden state), stacked ``(levels, batch, hidden, t, h, w)``; ViTDet's
            blocks 3, 5, 7, 11 of a 12-block ViT are ``[4, 6, 8, 12]``.
        levels : int, optional
            ``n`` copies of the final-normed feature map, as STMixer's backbone returns
            ``[x, x, x, x]`` (``levels=4``); ``(levels, batch, hidden, t, h, w)``.

        Returns
        -------
        numpy.ndarray
            float32 features.

        Raises
        ------
        tubelet.Error
            ``pool="cls"`` on a model without a cls token, a layer outside the model, per-layer
            or map features of a ViViT factorised encoder (Model 2).
        """
        if pool not in (None, "cls", "mean", "none"):
            raise ValueError(f"pool must be 'cls', 'mean' or 'none', not {pool!r}")
        videos = self._video_list(x)
        if videos is not None:
            # one video at a time (batch 1), as `tubelet features` runs: the same numbers
            rows, first = [], None
            for v in videos:
                px = self.preprocess(v)
                if first is not None and px.shape != first:
                    raise _error(f"{_video_name(v, len(rows))}: preprocessed to "
                                 f"{px.shape[1:]}, unlike the videos before it ({first[1:]})",
                                 "shape")
                first = px.shape
                rows.append(self.features(px, pool, layers, levels=levels))
            multi = isinstance(layers, (list, tuple)) or levels is not None
            return _np.concatenate(rows, axis=1 if multi else 0)
        a = self._pixels(x)
        s, sh = self._state(a)
        nl = self._info["num_hidden_layers"]
        m2 = self._info["num_temporal_layers"] > 0
        if isinstance(layers, (list, tuple)) or levels is not None:
            if pool not in (None, "none"):
                raise ValueError("layers=[...] / levels give feature maps: pool must be 'none'")
            lay = None
            if isinstance(layers, (list, tuple)):
                lay = [int(v) for v in layers]
                if levels is not None and levels != len(lay):
                    raise ValueError(f"levels={levels} but layers names {len(lay)}")
                for v in lay:
                    if not -1 <= v <= nl:
                        raise _error(f"layer {v}: the model has blocks 0..{nl}", "arg")
            elif layers is not None:
                raise ValueError("levels goes with layers=None or a list of the same length")
            n = len(lay) if lay is not None else int(levels)  # type: ignore[arg-type]
            if not 1 <= n <= 64:
                raise ValueError(f"1 to 64 levels, not {n}")
            out = _np.empty((n,) + tuple(sh["feature_shape"]), _np.float32)
            s.forward_features(a, lay, [out[i] for i in range(n)])
            return out
        layer = -1 if layers is None else int(layers)
        if not -1 <= layer <= nl:
            raise _error(f"layer {layer}: the model has blocks 0..{nl}", "arg")
        if m2 and (layer >= 0 or pool == "none"):
            raise _error(f"{self._dir or 'this model'} is a ViViT factorised encoder (Model 2): "
                         "its last hidden state holds frame tokens, not patch tokens; only "
                         "pool='cls' or 'mean' of the last layer", "unsupported")
        if pool is None:
            pool = "cls" if sh["has_cls"] else "mean"
        if pool == "cls" and not sh["has_cls"]:
            raise _error(f"{self._dir or 'this model'} has no cls token (VideoMAE, ViViT Models 3 "
                         "and 4); use pool='mean' or 'none'", "unsupported")
        h = _np.empty(sh["hidden_shape"], _np.float32)
        s.forward_hidden(a, layer, h)
        if pool == "none":
            out = _np.empty(sh["feature_shape"], _np.float32)
            s.feature_map(h, out)
        else:
            out = _np.empty((a.shape[0], self._info["hidden_size"]), _np.float32)
            s.pool(h, out, _POOLS[pool])
        return out

    def _video_list(self, x: _Any) -> list | None:
        """x as a list of videos (paths, bytes, file objects), or None when it is an array."""
        if _is_video(x):
            return [x]
        if isinstance(x, (list, tuple)) and x and all(_is_video(v) for v in x):
            return list(x)
        return None

    def preprocess(self, video: str | _os.PathLike | bytes | _Any, *, sampling: str = "hf",
                   stride: int | None = None, clips: int = 1, crops: int = 1,
                   num_frames: int | None = None, threads: int | None = None) -> _np.ndarray:
        """The pixel_values the model sees for a video.

        Parameters
        ----------
        video : str, os.PathLike, bytes-like, binary file object or numpy.ndarray
            A video file, decoded and sampled as ``tubelet preprocess`` does (or its content as
            bytes or a file object, as :func:`read_video` takes it); or uint8 RGB frames
            ``(T, height, width, 3)`` (e.g. from :func:`read_video`), only preprocessed.
        sampling, stride, clips
            As for :func:`read_video` (files only).
        crops : {1, 3}, optional
            Spatial views: the centre, or first/centre/last along the long side.
        num_frames : int, optional
            Frames per clip; default config.json's ``num_frames`` (files only).
        threads : int, optional
            Decoder threads.

        Returns
        -------
        numpy.ndarray
            float32 ``(clips * crops, T, 3, H, W)`` (views in the order clip-major), exactly what
            ``tubelet preprocess`` writes, resized, cropped and normalised as the model
            directory's ``preprocessor_config.json`` says.

        Raises
        ------
        tubelet.Error
            The file is missing, unreadable or not a video (the message names it).
        """
        sampling, stride_, clips, crops, threads_ = _views_params(sampling, stride, clips, crops,
                                                                  threads)
        pp = self._preprocessor()
        if _is_video(video):
            if num_frames is not None and (not isinstance(num_frames, int) or num_frames < 1):
                raise ValueError(f"num_frames must be None or an int >= 1, not {num_frames!r}")
            src, data, name = _video_source(video)
            blob, shape, *_ = _tubelet._views(src, sampling, stride_, clips, crops,
                                              num_frames or 0, threads_,
                                              self._info["num_frames"], pp, data, name)
            return _np.frombuffer(blob, dtype=_np.float32).reshape(shape)
        f = _as_array(video, "frames")
        if f.dtype != _np.uint8 or f.ndim != 4 or f.shape[3] != 3:
            raise InputError(f"frames must be uint8 (T, height, width, 3); got {f.dtype} "
                             f"{f.shape}")
        f = _np.ascontiguousarray(f)
        T, H, W, _ = f.shape
        out = []
        for crop in ((0,) if crops == 1 else (1, 0, 2)):
            blob, shape = _tubelet._preprocess_frames(pp, f, T, H, W, crop)
            out.append(_np.frombuffer(blob, dtype=_np.float32).reshape(shape))
        return _np.stack(out)

    def encode_text(self, texts: list[str]) -> _np.ndarray:
        """Text embeddings of a video-text model (X-CLIP), as ``XCLIPModel.get_text_features``.

        Parameters
        ----------
        texts : list of str
            Tokenized with the model directory's ``vocab.json`` and ``merges.txt`` (CLIP's
            tokenizer, truncated to the model's context).

        Returns
        -------
        numpy.ndarray
            float32 ``(len(texts), projection_dim)``: compute a label set's once, then pass it
            to :meth:`classify` as ``labels`` or to :meth:`logits_per_video`.

        Raises
        ------
        tubelet.Error
            A model without a text tower, or one loaded from an architecture name (no
            tokenizer); a text that is not valid UTF-8.
        """
        if isinstance(texts, str) or not all(isinstance(t, str) for t in texts):
            raise TypeError("texts must be a list of str")
        if self._dir is None or not _os.path.isdir(self._dir):
            raise _error("encode_text needs a model directory with the tokenizer's vocab.json "
                         "and merges.txt", "arg")
        blob, shape = self._h.encode_text(self._dir, list(texts))
        return _np.frombuffer(blob, dtype=_np.float32).reshape(shape)

    def encode_video(self, x: _Any) -> _np.ndarray:
        """X-CLIP's video embeddings ``(batch, projection_dim)`` of pixel_values x ``(batch,
        frames, 3, height, width)``, before normalising, as ``XCLIPModel.get_video_features``
        (without texts: the prompt generator does not run)."""
        dims = self._h.text_dims()
        if dims is None:
            raise _error("this model has no text tower (encode_video needs an X-CLIP model)",
                         "unsupported")
        a = self._pixels(x)
        s, _ = self._state(a)
        out = _np.empty((a.shape[0], dims[0]), _np.float32)
        s.encode_video(a, out)
        return out

    def logits_per_video(self, x: _Any, text_embeds: _Any) -> _np.ndarray:
        """X-CLIP's ``logits_per_video`` ``(batch, texts)`` of pixel_values x ``(batch, frames,
        3, height, width)`` against embeddings from :meth:`encode_text`."""
        if self._h.text_dims() is None:
            raise _error("this model has no text tower (texts need an X-CLIP model)",
                         "unsupported")
        a = self._pixels(x)
        t = _np.ascontiguousarray(text_embeds, dtype=_np.float32)
        if t.ndim != 2 or t.shape[1] != self._h.text_dims()[0] or t.shape[0] < 1:
            raise InputError(f"text_embeds must have shape (texts, {self._h.text_dims()[0]}); "
                             f"got {t.shape}")
        s, _ = self._state(a)
        logits = _np.empty((a.shape[0], t.shape[0]), _np.float32)
        s.forward_text(a, t, t.shape[0], logits)
        return logits

    def classify(self, videos: _Any, top: int = 5, clips: int = 1, crops: int = 1, *,
                 sampling: str = "hf", stride: int | None = None, threads: int | None = None,
                 labels: list[str] | None = None, template: str | None = None
                 ) -> dict | list[dict]:
        """Label videos, as ``tubelet classify --json`` does.

        Parameters
        ----------
        videos : str, os.PathLike, bytes, file object, numpy.ndarray, or a list of them
            Video files (or their content, as :func:`read_video` takes it); uint8 frames ``(T, H, W, 3)`` (preprocessed here); or float32
            pixel_values ``(views, T, C, H, W)``.
        top : int, optional
            Labels per video.
        clips, crops : int, optional
            Temporal and spatial views; their softmax probabilities are averaged.
        sampling, stride, threads
            As for :func:`read_video`.
        labels : list of str, optional
            A video-text model (X-CLIP): classify zero-shot among these labels (their text
            embeddings are computed once for all the videos), as ``tubelet classify
            --labels``.
        template : str, optional
            With ``labels``: the text of each label, ``"{}"`` replaced by it ("a video of
            {}").

        Returns
        -------
        dict or list of dict
            ``{"video": path (a file object's name, else the list index; "video" for one
            video given as bytes), "top": [{"label", "score"}]}``.
            For one video a failure raises; in a list it comes back as
            ``{"video", "error": message}`` and the others still run.

        Raises
        ------
        tubelet.Error
            A single video that cannot be read (the message names the file).
        KeyboardInterrupt
            Stops at the next video; the video being decoded in the background is finished
            first.

        Examples
        --------
        >>> m.classify(["a.mp4", "b.mp4"], top=1)
        [{'video': 'a.mp4', 'top': [{'label': 'move_up', 'score': 0.98}]}, ...]
        """
        if not isinstance(top, int) or top < 1:
            raise ValueError(f"top must be an int >= 1, not {top!r}")
        text = self._label_texts(labels, template)
        vp = _views_params(sampling, stride, clips, crops, threads)
        single = not isinstance(videos, (list, tuple))
        items = [videos] if single else list(videos)
        results: list[dict] = []
        if not items:
            return results
        # decode video i+1 while the model runs on video i (decoding releases the GIL)
        with _futures.ThreadPoolExecutor(max_workers=1) as pool:
            nxt = pool.submit(self._classify_input, items[0], 0, vp)
            try:
                for i, item in enumerate(items):
                    fut = nxt
                    if i + 1 < len(items):
                        nxt = pool.submit(self._classify_input, items[i + 1], i + 1, vp)
                    name = _video_name(item, i)
                    if single and isinstance(name, int):
                        name = "video"  # one video of bytes: no index to name it by (as serve)
                    try:
                        pixels = fut.result()
                        results.append({"video": name,
                                        "top": self._top(pixels, top, text, labels)})
                    except Error as e:
                        if single:
                            raise
                        results.append({"video": name, "error": str(e)})
            except BaseException:
                nxt.cancel()
                raise
        return results[0] if single else results

    def _classify_input(self, item: _Any, i: int, vp: tuple) -> _np.ndarray:
        sampling, stride, clips, crops, threads = vp
        if _is_video(item):
            return self.preprocess(item, sampling=sampling, stride=stride or None, clips=clips,
                                   crops=crops, threads=threads or None)
        a = _as_array(item, f"videos[{i}]")
        if a.dtype == _np.uint8:
            return self.preprocess(a, crops=crops)
        if a.ndim == 4:
            a = a[None]
        return self._pixels(a)

    def _top(self, pixels: _np.ndarray, top: int, text: _np.ndarray | None = None,
             names: list[str] | None = None) -> list[dict]:
        return self._top_of(self._probs(pixels, text), top, names)

    def _label_texts(self, labels: list[str] | None, template: str | None
                     ) -> _np.ndarray | None:
        """The text embeddings of a label set (labels put into template's "{}"), computed once
        for classify and watch: None for a model with its own labels and no label set."""
        if labels is not None or template is not None:
            if labels is None or isinstance(labels, str) or not labels:
                raise ValueError("labels must be a non-empty list of str")
            if template is not None and "{}" not in template:
                raise ValueError(f"template {template!r} has no {{}} for the label")
            return self.encode_text([template.replace("{}", l, 1) if template else l
                                     for l in labels])
        if self._h.text_dims() is not None:
            raise ValueError("a video-text model (X-CLIP) classifies zero-shot: give labels")
        return None

    def _probs(self, pixels: _np.ndarray, text: _np.ndarray | None = None) -> _np.ndarray:
        """The softmax probabilities of the views in pixels (against the text embeddings of a
        video-text model), averaged (float64)."""
        logits = (self.forward(pixels) if text is None
                  else self.logits_per_video(pixels, text)).astype(_np.float64)
        z = logits - logits.max(axis=1, keepdims=True)
        p = _np.exp(z)
        return (p / p.sum(axis=1, keepdims=True)).mean(axis=0)

    def _top_of(self, p: _np.ndarray, top: int, names: list[str] | None = None) -> list[dict]:
        order = _np.argsort(-p, kind="stable")[:top]
        labels = self._labels if names is None else names
        return [{"label": labels[k] if k < len(labels) else "", "score": float(p[k])}
                for k in order]

    # ---------------------------------------------------------------- training
    def grad(self, x: _Any, labels: _Any) -> tuple[float, dict[str, _np.ndarray]]:
        """Loss and gradients of every parameter for one batch, as ``tubelet grad`` computes.

        Parameters
        ----------
        x : array_like
            float32 pixel_values ``(batch, frames, channels, height, width)``.
        labels : array_like of int
            One class index per logits row (``batch``), in ``[0, num_labels)``.

        Returns
        -------
        loss : float
            Mean cross-entropy of the logits against ``labels`` (no label smoothing, dropout
            or drop path).
        grads : dict of str to numpy.ndarray
            float32 gradient of each parameter under its Hugging Face name and shape.

        Raises
        ------
        tubelet.InputError
            Wrong dtype, rank or shape of ``x`` or ``labels``, or a label out of range.
        tubelet.Error
            The model was loaded in bf16/int8 or with ``inference=True``.

        Notes
        -----
        The gradients live in one buffer per model object (the C model itself stays
        read-only); calls from several threads take turns.
        """
        a = self._pixels(x)
        y = _as_array(labels, "labels")
        if y.ndim != 1 or y.dtype.kind not in "iu":
            raise InputError(f"labels must be a 1-D integer array; got {y.dtype} {y.shape}")
        y = _np.ascontiguousarray(y, dtype=_np.int64)
        i = self._info
        if i["precision"] != "fp32" or i["packed"]:
            raise _error("grad needs fp32 weights loaded without inference=True", "unsupported")
        with self._grad_lock:
            if not self._grads_on:
                self._h.enable_grads()
                self._grads_on = True
            B, T, _, H, W = a.shape
            s = self._train_state
            if s is None or not s.matches(B, T, H, W):
                self._train_state = None
                s = self._train_state = _tubelet._state(self._h, B, T, H, W, True)
            rows = s.info()["logits_shape"][0]
            if y.shape[0] != rows:
                raise InputError(f"{y.shape[0]} labels for {rows} logits rows")
            nl = i["num_labels"]
            bad = _np.flatnonzero((y < 0) | (y >= nl))
            if bad.size:
                raise InputError(f"label {y[bad[0]]} of row {bad[0]} is outside the model's "
                                 f"classes [0, {nl})", "value")
            self._h.zero_grads()
            loss = s.forward_backward(a, y)
            tensors = self._h.tensors()
            outs = [_np.empty(shape, _np.float32) for _, shape in tensors]
            self._h.copy_tensors(outs, True)
        return float(loss), {name: g for (name, _), g in zip(tensors, outs)}

    def state_dict(self) -> dict[str, _np.ndarray]:
        """A copy of every parameter (float32) under its Hugging Face name."""
        tensors = self._h.tensors()
        outs = [_np.empty(shape, _np.float32) for _, shape in tensors]
        self._h.copy_tensors(outs, False)
        return {name: t for (name, _), t in zip(tensors, outs)}


def watch(source: str | _os.PathLike, model: Model | str | _os.PathLike, window: float = 2.0,
          stride: float = 0.5, *, top: int = 5, smooth: int = 1, realtime: bool = False,
          reconnect: bool = False, reconnect_tries: int = 0, timeout: float = 10.0,
          threads: int | None = None, labels: list[str] | None = None,
          template: str | None = None) -> _Iterator[dict]:
    """Label a live source window by window as it arrives, as ``tubelet watch`` does.

    A generator: one dict per window, the JSON line of ``tubelet watch`` (docs/watch.md). A
    decoder thread reads the source while the model runs; when the model (or the loop that
    consumes the generator) is slower than the stream, windows are skipped (counted in
    ``"skipped"``) and the lag does not grow. A file is read as fast as the generator is
    consumed, no window skipped, and gives ``tubelet timeline``'s windows.

    Parameters
    ----------
    source : str or os.PathLike
        A file, ``"-"`` for stdin, ``rtsp://``, ``rtmp://``, ``http(s)://``, ``udp://``,
        ``tcp://``, ``srt://`` or ``v4l2:/dev/videoN``.
    model : Model, str or os.PathLike
        A loaded model, or a model directory to load (with ``threads``).
    window, stride : float, optional
        Window length and the step between window starts, in seconds.
    top : int, optional
        Labels per window.
    smooth : int, optional
        Report the mean probabilities of the last ``smooth`` windows.
    realtime : bool, optional
        Read a file at its frame rate, as a live source.
    reconnect, reconnect_tries, timeout
        As ``tubelet watch --reconnect --reconnect-tries N --timeout S``.
    threads : int, optional
        Decoder threads (and the model's, when ``model`` is a directory).
    labels, template : optional
        A video-text model (X-CLIP): score each window zero-shot among these labels, as
        :meth:`Model.classify` (their text embeddings computed once).

    Yields
    ------
    dict
        ``{"t0", "t1", "wall", "lag_ms", "skipped", "top": [{"label", "score"}]}``: ``t0`` and
        ``t1`` in seconds from the stream's first frame, ``wall`` the ``time.time()`` of the
        answer, ``lag_ms`` from the arrival of the window's newest frame to the answer. A
        reconnecting source also yields ``{"event": "disconnected" | "reconnected", "wall",
        "message"}`` (``"attempts"`` and ``"down_s"`` when reconnected).

    Raises
    ------
    tubelet.Error
        A source that cannot be opened or read (the message names it).

    Examples
    --------
    >>> for w in tubelet.watch("udp://127.0.0.1:5000", "models/motion-vivit", stride=1):
    ...     print(w["t0"], w["top"][0]["label"], w["lag_ms"])
    """
    if not isinstance(top, int) or top < 1:
        raise ValueError(f"top must be an int >= 1, not {top!r}")
    if not isinstance(smooth, int) or smooth < 1:
        raise ValueError(f"smooth must be an int >= 1, not {smooth!r}")
    if not (window > 0 and stride > 0):
        raise ValueError(f"window and stride must be seconds above 0, not {window!r}, {stride!r}")
    _need_video()
    m = model if isinstance(model, Model) else load(model, threads=threads)
    text = m._label_texts(labels, template)
    names = list(labels) if text is not None else None
    pp = m._preprocessor()
    T, C = m._info["num_frames"], m._info["num_channels"]
    live = _tubelet._live(_os.fspath(source), threads or 0, bool(realtime), bool(reconnect),
                          reconnect_tries, float(timeout))
    try:
        fstride, _hop, fps, fps_known, H, W = live.start(pp, T, C, float(window), float(stride))
        if not fps_known:
            _warnings.warn(f"{_os.fspath(source)} does not say its frame rate; taking 25 fps",
                           stacklevel=2)
        pixels = _np.empty((1, T, C, H, W), _np.float32)
        hist: list[_np.ndarray] = []  # the probabilities of the last `smooth` windows
        while (item := live.next(pixels, fstride, fps)) is not None:
            if item[0] != "window":
                kind, message, attempts, down = item
                ev = {"event": kind, "wall": _time.time()}
                if kind == "reconnected":
                    ev.update(attempts=attempts, down_s=down)
                ev["message"] = message
                hist.clear()  # smoothing starts again with the new connection
                yield ev
                continue
            _, t0, t1, arrival, skipped = item
            hist.append(m._probs(pixels, text))
            del hist[:-smooth]
            tops = m._top_of(_np.mean(hist, axis=0), top, names)
            yield {"t0": t0, "t1": t1, "wall": _time.time(),
                   "lag_ms": (_time.monotonic() - arrival) * 1000, "skipped": skipped,
                   "top": tops}
    finally:
        live.close()


def __dir__() -> list[str]:
    """The public API only (docs/python.md): the module's private helpers stay out of dir()."""
    return sorted(__all__)
