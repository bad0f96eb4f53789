#!/usr/bin/env python3
"""The catalogue of malicious and malformed Flax checkpoints, tests/attacks/flax/: each file and
the error tubelet must give (expected.txt, "<file>|<part of the error>"). tests/test_flax.c loads
every one through tubelet_model_load (normal and ASan builds) and checks the error.

Usage:
    /work/venv/bin/python tools/make_flax_attacks.py [--out tests/attacks/flax]

The files are built from msgpack bytes directly (the msgpack package for the well-formed parts,
hand-written bytes for the rest), the way flax.serialization writes a state dict: maps with string
keys, arrays as extension type 1 holding msgpack [shape, dtype, bytes].
"""
import argparse
import os
import struct

import msgpack
import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def nd(shape, dtype="float32", data=None):
    """flax's ndarray extension (flax.serialization._ndarray_to_bytes)."""
    if data is None:
        data = np.zeros(shape, dtype=dtype).tobytes()
    return msgpack.ExtType(1, msgpack.packb((tuple(shape), dtype, data), use_bin_type=True))


def ext_raw(code, payload):
    return msgpack.ExtType(code, payload)


def pack(tree):
    return msgpack.packb(tree, use_bin_type=True)


def m1_like(**replace):
    """A minimal scenic Model 1 parameter tree (enough to reach the config inference)."""
    D = 8
    t = {"cls": nd((1, 1, D)), "embedding": {"kernel": nd((2, 4, 4, 3, D)), "bias": nd((D,))},
         "Transformer": {"encoderblock_0": {"MultiHeadDotProductAttention_0": {
             "query": {"kernel": nd((D, 2, 4)), "bias": nd((2, 4))}}}}}
    t.update(replace)
    return {"optimizer": {"target": t}}


def cases():
    c = {}
    valid = pack(m1_like())
    c["truncated.msgpack"] = (valid[: len(valid) // 2], "runs past the end")
    c["truncated_header.msgpack"] = (b"\x81\xa3cls\xc9\x00\x00", "the data ends inside an object")
    deep = b""
    for _ in range(200):
        deep += b"\x81\xa1a"
    c["deep_nesting.msgpack"] = (deep + b"\xc0", "nested deeper than 24 levels")
    c["huge_map.msgpack"] = (b"\x81\xa1a\xdf\xff\xff\xff\xff" + b"\xc0" * 8, "a container declares 8589934590 entries")
    c["huge_array.msgpack"] = (b"\x81\xa1a\xdd\xff\xff\xff\xff" + b"\xc0" * 8, "a container declares 4294967295 entries")
    c["huge_str.msgpack"] = (b"\x81\xa1a\xdb\xff\xff\xff\xff" + b"x" * 8, "declared length 4294967295 runs past the end")
    c["huge_ext.msgpack"] = (b"\x81\xa1a\xc9\xff\xff\xff\xff\x01" + b"x" * 8, "declared length 4294967296 runs past the end")
    c["huge_ext_payload_bin.msgpack"] = (
        pack({"cls": ext_raw(1, b"\x93\x91\x01\xa7float32\xc6\xff\xff\xff\xf0abcd")}),
        "array 'cls': byte 11: declared length 4294967280 runs past the end")
    c["ext_truncated_payload.msgpack"] = (pack({"cls": ext_raw(1, b"\x93\x91")}), "array 'cls': byte 0: a container declares 3 entries")
    c["ext_not_a_list.msgpack"] = (pack({"cls": ext_raw(1, pack(42))}), "not flax's ndarray encoding")
    c["ext_trailing.msgpack"] = (pack({"cls": ext_raw(1, pack(((1,), "float32", b"abcd")) + b"\xc0")}),
                                 "not flax's ndarray encoding")
    c["ext_short_bytes.msgpack"] = (pack({"cls": nd((1000000, 1000000), data=b"abcd")}),
                                    "need 4000000000000 bytes, the array holds 4")
    c["ext_dim_overflow.msgpack"] = (pack({"cls": nd((2 ** 40, 2 ** 40), data=b"")}), "shape entry 1 is not a size below 2^40")
    c["ext_negative_dim.msgpack"] = (pack({"cls": nd((-1,), data=b"")}), "shape entry 0 is not a size")
    c["ext_many_dims.msgpack"] = (pack({"cls": nd((1,) * 9, data=b"\0" * 4)}), "9 dimensions (at most 8)")
    c["ext_object_dtype.msgpack"] = (pack({"cls": nd((1,), "object", b"\0" * 8)}), "dtype 'object' is not supported")
    c["ext_unknown_code.msgpack"] = (pack({"cls": ext_raw(7, b"\0")}), "msgpack extension type 7")
    c["key_not_string.msgpack"] = (b"\x81\xa9optimizer\x81\xa6target\x81\x01" + pack(nd((1,))), "is not a string")
    c["key_with_slash.msgpack"] = (pack({"params": {"a/b": nd((1,))}}), "empty or holds '/'")
    c["duplicate_key.msgpack"] = (b"\x82\xa3cls" + pack(nd((1,))) + b"\xa3cls" + pack(nd((1,))), "'cls' appears twice")
    c["chunked_array.msgpack"] = (pack({"cls": {"__msgpack_chunked_array__": True, "shape": {"0": 1},
                                                "chunks": {"0": nd((1,))}}}), "'cls' is a chunked array")
    c["byte_c1.msgpack"] = (b"\x81\xa1a\xc1", "0xc1 is not a msgpack type")
    c["trailing_bytes.msgpack"] = (valid + b"\xc0\xc0", "2 bytes after the end of the msgpack tree")
    c["no_arrays.msgpack"] = (pack({"optimizer": {"target": {"step": 3}}, "note": "x"}), "no arrays under 'optimizer/target'")
    c["not_vivit.msgpack"] = (pack({"params": {"Dense_0": {"kernel": nd((2, 2))}}}), "no ViViT parameters under 'params'")
    c["embedding_3d.msgpack"] = (pack(m1_like(embedding={"kernel": nd((4, 4, 3))})), "no 'embedding/kernel' of 4 or 5 dimensions")
    c["heads_mismatch.msgpack"] = (pack(m1_like(Transformer={"encoderblock_0": {"MultiHeadDotProductAttention_0": {
        "query": {"kernel": nd((8, 3, 4))}}}})), "heads times head size must equal the hidden size 8")
    c["pre_logits.msgpack"] = (pack(m1_like(pre_logits={"kernel": nd((8, 8))})), "'pre_logits' (representation_size) is not supported")
    return c


WHAT = {
    "truncated.msgpack": "a train state cut in half",
    "truncated_header.msgpack": "an ext32 header cut inside its length",
    "deep_nesting.msgpack": "200 nested maps (msgpack-c's own stack is 32)",
    "huge_map.msgpack": "a map declaring 2^32 - 1 entries in 8 bytes (msgpack-c allocates from the count)",
    "huge_array.msgpack": "an array declaring 2^32 - 1 entries in 8 bytes",
    "huge_str.msgpack": "a string declaring 4 GiB",
    "huge_ext.msgpack": "an extension declaring 4 GiB",
    "huge_ext_payload_bin.msgpack": "an ndarray whose bytes declare 4 GiB",
    "ext_truncated_payload.msgpack": "an ndarray payload cut after its list header",
    "ext_not_a_list.msgpack": "an ndarray payload that is an integer",
    "ext_trailing.msgpack": "an ndarray payload with a byte after it",
    "ext_short_bytes.msgpack": "a 10^6 x 10^6 float32 array in 4 bytes",
    "ext_dim_overflow.msgpack": "2^40 x 2^40 elements (the product overflows 64 bits in bytes)",
    "ext_negative_dim.msgpack": "a negative dimension",
    "ext_many_dims.msgpack": "9 dimensions",
    "ext_object_dtype.msgpack": "dtype object (pickled Python objects in numpy)",
    "ext_unknown_code.msgpack": "an extension type flax never writes",
    "key_not_string.msgpack": "an integer key",
    "key_with_slash.msgpack": "a key with '/' (names would collide)",
    "duplicate_key.msgpack": "the same key twice in one map",
    "chunked_array.msgpack": "flax's chunked array (arrays over 1 GiB)",
    "byte_c1.msgpack": "the byte 0xc1, which msgpack never uses",
    "trailing_bytes.msgpack": "bytes after the tree",
    "no_arrays.msgpack": "a train state without arrays",
    "not_vivit.msgpack": "a Flax model that is not a ViViT",
    "embedding_3d.msgpack": "a patch embedding of 3 dimensions",
    "heads_mismatch.msgpack": "attention heads x head size != hidden size",
    "pre_logits.msgpack": "a representation layer Hugging Face's ViViT does not have",
}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(REPO, "tests", "attacks", "flax"))
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    lines = []
    for name, (data, err) in cases().items():
        with open(os.path.join(args.out, name), "wb") as f:
            f.write(data)
        lines.append(f"{name}|{err}")
    with open(os.path.join(args.out, "expected.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    with open(os.path.join(args.out, "README.md"), "w") as f:
        f.write("# Malformed and malicious Flax checkpoints\n\nWritten by `tools/make_flax_attacks.py`; "
                "`tests/test_flax.c` loads each (normal and ASan+UBSan builds) through `tubelet_model_load` "
                "and checks the error below, which also names the file. See docs/checkpoints.md for the "
                "threat model.\n\n| file | attack | error contains |\n|---|---|---|\n")
        for name, (_, err) in cases().items():
            f.write(f"| `{name}` | {WHAT[name]} | {err} |\n")


if __name__ == "__main__":
    main()
