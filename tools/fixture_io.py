"""Writing a fixture directory, shared by the reference scripts (stmixer_backbone_ref.py,
vivit_variants_ref.py, timesformer_variants_ref.py): arrays as .npy, meta.json and the files'
permissions, and the fixture lists the C tests read."""
import json
import os

import numpy as np


def save_npy(path, arr):
    """arr as a C-order .npy (a 0-d array stays 0-d)."""
    arr = np.asarray(arr)
    np.save(path, np.ascontiguousarray(arr) if arr.ndim else arr, allow_pickle=False)


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
