#!/usr/bin/env python3
"""The catalogue of malicious checkpoints (tests/attacks/checkpoints/, table in its README.md):
each file, and the words of the error tubelet must give for it, one "FILE|MESSAGE" per line in
expected.txt. tests/test_checkpoints.c loads every one (in the ASan build too) and checks the
error, that nothing crashed, and that the payloads' canary file was never created. Nothing here
is executed: pickle.dumps only writes the opcodes that would call os.system or eval on load.

Also writes small valid seeds for the fuzz harness (tests/fuzz/corpus/fuzz_pickle/).

Usage: /work/venv/bin/python tools/make_checkpoint_attacks.py
"""
import collections
import io
import os
import pickle
import struct
import zipfile

import torch

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(REPO, "tests", "attacks", "checkpoints")
SEEDS = os.path.join(REPO, "tests", "fuzz", "corpus", "fuzz_pickle")
CANARY = "/tmp/tubelet_checkpoint_canary"
LEGACY_MAGIC = pickle.dumps(0x1950a86a20f9469cfc6c, protocol=2)


class Call:
    """Pickles as a call of fn(*args) on load."""
    def __init__(self, fn, *args):
        self.fn, self.args = fn, args

    def __reduce__(self):
        return self.fn, self.args


class Storage:
    def __init__(self, key, numel, kind=None):
        self.key, self.numel, self.kind = key, numel, kind or torch.FloatStorage


def tensor(storage, offset, size, stride):
    return Call(torch._utils._rebuild_tensor_v2, storage, offset, tuple(size), tuple(stride), False,
                collections.OrderedDict())


class TorchPickler(pickle.Pickler):
    def persistent_id(self, obj):
        if isinstance(obj, Storage):
            return ("storage", obj.kind, obj.key, "cpu", obj.numel)
        return None


def dumps(obj):
    b = io.BytesIO()
    TorchPickler(b, protocol=2).dump(obj)
    return b.getvalue()


def zip_file(pkl, storages, names=None, compress=None):
    """torch's zip layout: archive/data.pkl, archive/data/<key>, version, byteorder."""
    b = io.BytesIO()
    with zipfile.ZipFile(b, "w", zipfile.ZIP_STORED) as z:
        z.writestr("archive/data.pkl", pkl)
        z.writestr("archive/byteorder", "little")
        for key, data in storages.items():
            z.writestr(f"archive/data/{key}", data,
                       compress_type=zipfile.ZIP_DEFLATED if compress else zipfile.ZIP_STORED)
        z.writestr("archive/version", "3\n")
        for n in names or []:
            z.writestr(n, b"x")
    return b.getvalue()


def legacy_file(obj_pickle, keys, storages):
    out = LEGACY_MAGIC + pickle.dumps(1001, protocol=2)
    out += pickle.dumps({"protocol_version": 1001, "little_endian": True,
                         "type_sizes": {"short": 2, "int": 4, "long": 4}}, protocol=2)
    out += obj_pickle + pickle.dumps(keys, protocol=2)
    for numel, data in storages:
        out += struct.pack("<q", numel) + data
    return out


def good_state(n=4):
    s = Storage("0", n)
    return collections.OrderedDict([("w", tensor(s, 0, [n], [1]))]), {"0": struct.pack(f"<{n}f", *range(n))}


def main():
    os.makedirs(OUT, exist_ok=True)
    os.makedirs(SEEDS, exist_ok=True)
    cases = []

    def add(name, data, msg, what):
        with open(os.path.join(OUT, name), "wb") as f:
            f.write(data)
        cases.append((name, msg, what))

    system = Call(os.system, f"touch {CANARY}")
    add("os_system.pth", zip_file(dumps({"model": system}), {}),
        "global 'posix.system' is not allowed", "a pickle calling `os.system` (zip format)")
    add("os_system_legacy.pth", legacy_file(dumps({"model": system}), [], []),
        "global 'posix.system' is not allowed", "the same in the legacy format")
    add("eval.pth", zip_file(dumps(Call(eval, f"__import__('os').system('touch {CANARY}')")), {}),
        "global '__builtin__.eval' is not allowed", "`__reduce__` to `builtins.eval`")
    sd, st = good_state()
    sd["x"] = Call(getattr, Call(__import__, "os"), "system")
    add("getattr_import.pth", zip_file(dumps(sd), st), "global '__builtin__.getattr' is not allowed",
        "`getattr(__import__('os'), 'system')` beside a valid tensor")
    add("alloc_bomb.pth", zip_file(dumps({"model": Call(bytearray, 10 ** 12)}), {}),
        "global '__builtin__.bytearray' is not allowed", "a REDUCE allocating 1 TB")
    add("storage_called.pth", zip_file(dumps({"model": Call(torch.FloatStorage, 10 ** 12)}), {}),
        "a storage type cannot be called", "REDUCE of an allowed global that is not a constructor")
    # nested REDUCEs (100 000 deep, 3.6 MB) are built in memory by tests/test_checkpoints.c
    add("memo_get_unset.pth", zip_file(b"\x80\x02}h\x07.", {}), "memo GET of an index never PUT",
        "memo abuse: GET of an index never PUT")
    add("memo_put_huge.pth", zip_file(b"\x80\x02}r\xff\xff\xff\x7f.", {}), "memo index above 2^20",
        "memo abuse: PUT at index 2^31")
    add("self_reference.pth", zip_file(b"\x80\x02}q\x00(X\x05\x00\x00\x00modelh\x00u.", {}),
        "no state dict", "memo abuse: a dict that contains itself (a cycle)")
    add("huge_string.pth", zip_file(b"\x80\x02\x8d" + struct.pack("<Q", 1 << 62) + b"ab.", {}),
        "declared length runs past the end", "a string declaring 2^62 bytes")
    add("huge_long.pth", zip_file(b"\x80\x02\x8b" + struct.pack("<I", 1 << 31) + b".", {}),
        "declared length runs past the end", "an integer declaring 2^31 bytes")
    add("opcode_inst.pth", zip_file(b"\x80\x02(ios\nsystem\n.", {}), "opcode 'i' (0x69) is not allowed",
        "the INST opcode (imports and calls in protocol 0)")
    s = Storage("0", 1 << 60)
    add("huge_numel.pth", zip_file(dumps({"w": tensor(s, 0, [4], [1])}), {"0": b"\0" * 16}),
        "declares 1152921504606846976 elements but holds 16 bytes", "a storage declaring 2^60 elements")
    s = Storage("0", 16)
    add("huge_shape.pth", zip_file(dumps({"w": tensor(s, 0, [1 << 40, 1 << 40], [1 << 40, 1])}), {"0": b"\0" * 64}),
        "reaches past the end of its storage", "a tensor of 2^80 elements on 16")
    s = Storage("0", 10)
    add("short_storage.pth", zip_file(dumps({"w": tensor(s, 0, [100], [1])}), {"0": b"\0" * 40}),
        "reaches past the end of its storage", "a tensor longer than its storage")
    add("short_storage_offset.pth", zip_file(dumps({"w": tensor(s, 8, [2, 2], [2, 1])}), {"0": b"\0" * 40}),
        "reaches past the end of its storage", "a view whose offset runs past its storage")
    s = Storage("0", 100)
    add("short_entry.pth", zip_file(dumps({"w": tensor(s, 0, [100], [1])}), {"0": b"\0" * 40}),
        "declares 100 elements but holds 40 bytes", "a storage entry shorter than declared")
    add("short_legacy.pth", legacy_file(dumps({"w": tensor(s, 0, [100], [1])}), ["0"], [(100, b"\0" * 40)]),
        "declares 100 elements, more than the file holds", "a legacy storage cut short")
    s = Storage("0", 16)
    add("overlapping_view.pth", zip_file(dumps({"w": tensor(s, 0, [4, 4], [1, 1])}), {"0": b"\0" * 64}),
        "has overlapping elements", "a view whose elements overlap (strides 1, 1)")
    add("zero_stride.pth", zip_file(dumps({"w": tensor(s, 0, [4, 4], [0, 1])}), {"0": b"\0" * 64}),
        "has overlapping elements", "a broadcast view (stride 0)")
    sd, st = good_state()
    add("zip_dotdot.pth", zip_file(dumps(sd), st, names=["archive/../../../tmp/evil"]),
        "has an absolute or '..' path", "a zip entry with a `..` path")
    add("zip_absolute.pth", zip_file(dumps(sd), st, names=["/etc/evil"]),
        "has an absolute or '..' path", "a zip entry with an absolute path")
    n = 4 << 20  # 16 MB of zeros deflate to ~16 kB: ratio ~1000
    s = Storage("0", n)
    add("zip_bomb.pth", zip_file(dumps({"w": tensor(s, 0, [n], [1])}), {"0": b"\0" * (4 * n)}, compress=True),
        "refused as a possible zip bomb", "a deflated storage inflating 1000 times")
    good = zip_file(dumps(sd), st)
    add("truncated_zip.pth", good[: len(good) // 2], "not a valid zip archive", "a zip cut in half")
    add("not_a_checkpoint.pth", b"GIF89a" + b"\0" * 64, "not a torch checkpoint", "another kind of file")
    add("no_state_dict.pth", zip_file(dumps([1, 2, 3]), {}), "no state dict", "a pickle of a list")
    s = Storage("0", 4, torch.LongStorage)
    add("int_weights.pth", zip_file(dumps({"patch_embed.proj.weight": tensor(s, 0, [1, 1, 2, 2], [4, 4, 2, 1])}),
                                    {"0": b"\0" * 32}),
        "dtype int64; weights must be", "integer weights where floats belong")

    with open(os.path.join(OUT, "expected.txt"), "w") as f:
        for name, msg, _ in cases:
            f.write(f"{name}|{msg}\n")
    with open(os.path.join(OUT, "README.md"), "w") as f:
        f.write("# Malicious checkpoints\n\nWritten by `tools/make_checkpoint_attacks.py`; "
                "`tests/test_checkpoints.c` loads each\n(normal and ASan+UBSan builds) through "
                "`tubelet_model_load` and checks the error below, and\nthat the payloads' canary "
                f"`{CANARY}` never appears. See docs/checkpoints.md for the\nthreat model.\n\n"
                "| file | attack | error contains |\n|---|---|---|\n")
        for name, msg, what in cases:
            f.write(f"| `{name}` | {what} | {msg} |\n")
        f.write("| (built by the test) | 100 000 nested `REDUCE`s of `OrderedDict` (3.6 MB) | "
                "parses in linear time, no recursion; then no state dict |\n")
    # fuzz seeds: small valid files in both formats, and a few of the attacks
    sd, st = good_state(3)
    with open(os.path.join(SEEDS, "zip_small.pth"), "wb") as f:
        f.write(zip_file(dumps({"model": sd, "epoch": 1}), st))
    with open(os.path.join(SEEDS, "legacy_small.pth"), "wb") as f:
        f.write(legacy_file(dumps({"model_state": sd}), ["0"], [(3, st["0"])]))
    t = torch.arange(6.0).view(2, 3)
    buf = io.BytesIO()
    torch.save({"a": t.t(), "b": t[1], "h": t.half(), "p": torch.nn.Parameter(t)}, buf)
    with open(os.path.join(SEEDS, "torch_views.pth"), "wb") as f:
        f.write(buf.getvalue())
    print(len(cases), "attacks")


if __name__ == "__main__":
    main()
