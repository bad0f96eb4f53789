"""Writing a fixture directory, shared by the reference scripts (stmixer_backbone_ref.py,
vivit_variants_ref.py, timesformer_variants_ref.py): arrays as .npy, meta.json and the files'
permissions, and the fixture lists the C tests read; and the finite-difference check of a
reference's autograd gradients."""
import json
import os
import shutil

import numpy as np


def save_npy(path, arr):
    """arr as a C-order .npy (a 0-d array stays 0-d)."""
    arr = np.asarray(arr)
    np.save(path, np.ascontiguousarray(arr) if arr.ndim else arr, allow_pickle=False)


def read_safetensors(path):
    from safetensors import safe_open
    with safe_open(path, "pt") as f:
        return {k: f.get_tensor(k) for k in f.keys()}


def check_fixture(d, cfg_json, arrays, tensors):
    """--check: the fixture on disk holds these .npy arrays, safetensors files ({file: {name:
    tensor}}) and config.json, to 1e-6 relative (float64 references saved as float32)."""
    for fn, arr in arrays.items():
        old = np.load(os.path.join(d, fn))
        assert old.dtype == arr.dtype and old.shape == arr.shape, f"{d}/{fn}: dtype / shape"
        diff = np.abs(old.astype(np.float64) - arr.astype(np.float64)).max() if arr.size else 0
        assert diff <= 1e-6 * max(1.0, np.abs(arr).max()), f"{d}/{fn} differs by {diff:.3g}"
    for fn, want in tensors.items():
        old = read_safetensors(os.path.join(d, fn))
        assert set(old) == set(want), f"{d}/{fn}: key sets differ"
        for k in want:
            assert old[k].shape == want[k].shape, f"{d}/{fn}/{k}: shape"
            err = (old[k] - want[k]).abs().max().item()
            assert err <= 1e-6 * max(1.0, want[k].abs().max().item()), f"{d}/{fn}/{k}"
    with open(os.path.join(d, "config.json")) as f:
        assert json.load(f) == cfg_json, f"{d}/config.json differs"


def write_fixture(d, cfg_json, arrays, tensors, meta):
    """Writes the fixture directory d afresh: config.json, the safetensors files, the .npy arrays
    and meta.json (seal_fixture); returns its size in bytes."""
    from safetensors.torch import save_file
    if os.path.isdir(d):
        shutil.rmtree(d)
    os.makedirs(d)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg_json, f, indent=2)
        f.write("\n")
    for fn, ts in tensors.items():
        save_file(ts, os.path.join(d, fn), metadata={"format": "pt"})
    for fn, arr in arrays.items():
        save_npy(os.path.join(d, fn), arr)
    return seal_fixture(d, meta)


def seal_fixture(d, meta):
    """Writes meta.json into d and makes every file of d readable (safetensors' save_file creates
    its files 0600); returns the directory's size in bytes."""
    with open(os.path.join(d, "meta.json"), "w") as f:
        json.dump(meta, f, indent=2)
        f.write("\n")
    for fn in os.listdir(d):
        os.chmod(os.path.join(d, fn), 0o644)
    return sum(os.path.getsize(os.path.join(d, fn)) for fn in os.listdir(d))


def add_to_list(path, names):
    """Appends the fixture names not yet in the list file at path (one name a line)."""
    have = open(path).read().split() if os.path.exists(path) else []
    with open(path, "w") as f:
        f.write("".join(n + "\n" for n in have + [n for n in names if n not in have]))


def fd_check(model, loss, grads, seed, is_zero=lambda name: False):
    """Per tensor: the central difference of loss() (a float64 number) along a random direction v
    against <grad, v>, relative to |grad| |v|; tensors whose gradient is exactly zero (is_zero:
    attention's key biases) are measured as |fd| / |v|. Returns (worst, worst of the zero ones)."""
    import torch
    gen = torch.Generator().manual_seed(seed)
    worst, worst_zero = 0.0, 0.0
    with torch.no_grad():
        for n, p in sorted(model.named_parameters()):
            v = torch.randn(p.shape, generator=gen, dtype=torch.float64)
            v /= v.abs().max()
            h = 1e-5 * max(1.0, p.abs().max().item())
            p0 = p.detach().clone()
            p.add_(h * v)
            lp = loss()
            p.copy_(p0 - h * v)
            lm = loss()
            p.copy_(p0)
            fd = (lp - lm) / (2 * h)
            if is_zero(n):
                worst_zero = max(worst_zero, abs(fd) / v.norm().item())
                continue
            an = (grads[n] * v).sum().item()
            worst = max(worst, abs(fd - an) / max(grads[n].norm().item() * v.norm().item(), 1e-300))
    return worst, worst_zero
