"""Random differential check of `tubelet tokenize` against transformers' CLIPTokenizer on the
fixture vocabularies (tests/fixtures/tokenizer/clip_small, clip_unk): random texts drawn from
Latin, combining marks, Greek, Cyrillic, general punctuation, CJK, Hangul, emoji, ZWJ,
whitespace of every kind, apostrophe suffixes and the special tokens; prints the number that
differ, and the first few. Exits 1 if any differ. Characters assigned after Debian's PCRE2 and
utf8proc's Unicode versions are left out (docs/zero-shot.md, "Known differences").

  /work/venv/bin/python tools/tokenizer_differential.py [--bin build/tubelet] [--seed 1] [--n 400]
"""
import argparse
import json
import random
import subprocess
import sys

from transformers import CLIPTokenizer

RANGES = [(0x20, 0x250), (0x300, 0x530), (0x2000, 0x2070), (0x3000, 0x3100), (0x4E00, 0x4E40),
          (0xAC00, 0xAC20), (0x1F300, 0x1F680)]
EXTRA = [0x200D, 0xFE0F, 0x180E, 0x85, 0xA0, 0x1680, 0x130, 0x1E9E, 0x3A3, 0x2126, 0x212A, 0xFB01]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default="build/tubelet")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--n", type=int, default=400)
    ap.add_argument("--context", type=int, default=20)
    a = ap.parse_args()
    rng = random.Random(a.seed)
    pool = [chr(c) for lo, hi in RANGES for c in range(lo, hi)] + [chr(c) for c in EXTRA]
    pool += list("\t\n\r  'sStTdDmMlLvVrReE<|>") + ["<|endoftext|>", "<|startoftext|>",
                                                  "<|StartOfText|>", "'ll", "'re"]
    texts = ["".join(rng.choice(pool) for _ in range(rng.randint(0, 40))) for _ in range(a.n)]
    failed = 0
    for d in ["clip_small", "clip_unk"]:
        path = f"tests/fixtures/tokenizer/{d}"
        want = CLIPTokenizer.from_pretrained(path)(texts, padding="max_length", truncation=True,
                                                   max_length=a.context)["input_ids"]
        out = subprocess.run([a.bin, "tokenize", "--model", path, "--context", str(a.context),
                              "--json", "--"] + texts, capture_output=True, text=True, check=True)
        got = json.loads(out.stdout)["ids"]
        bad = [(t, w, g) for t, w, g in zip(texts, want, got) if w != g]
        print(f"{d}: {len(texts)} texts, {len(bad)} differ")
        for t, w, g in bad[:3]:
            print(f"  {t!r}\n    transformers {w}\n    tubelet      {g}")
        failed += len(bad)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
