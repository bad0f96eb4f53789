#!/usr/bin/env python3
"""Full-size parity check of the C engine against Hugging Face transformers (not run in CI).

Builds the published architectures with random weights (no downloads needed; every parameter is
randomised exactly like tests/fixtures, see tools/make_fixtures.py), saves each one with
save_pretrained() into a work directory together with a random input, computes the expected logits /
last_hidden_state with HF in float32 and in float64, runs

    <tubelet> run --model DIR --input input.npy --logits L.npy --hidden H.npy --threads N

and prints, per model, the max abs error and the relative bound max_abs_err / max(1, max|expected|)
of the C outputs against both references (plus HF-float32 vs HF-float64, the float32 noise floor).

    /work/venv/bin/python tools/parity_full.py                       # all three models
    /work/venv/bin/python tools/parity_full.py --models timesformer-base --keep --workdir /tmp/pf
    /work/venv/bin/python tools/parity_full.py --skip-c              # only the HF side (timings)
    /work/venv/bin/python tools/parity_full.py --layers 2            # quick: 2 encoder layers only

Models (B = 1, like the checkpoints named; 400 Kinetics labels):
    videomae-base     MCG-NJU/videomae-base-finetuned-kinetics: 16x224x224, tubelet 2, patch 16,
                      1568 tokens, mean pooling + fc_norm, q/v bias, layer_norm_eps 1e-12 (HF default,
                      as in the published config), gelu
    timesformer-base  facebook/timesformer-base-finetuned-k400: 8x224x224, patch 16,
                      divided_space_time, 1 + 1568 tokens, layer_norm_eps 1e-6, gelu
    vivit-base        google/vivit-b-16x2-kinetics400: 32x224x224, tubelet [2,16,16], 1 + 3136
                      tokens, gelu_fast, layer_norm_eps 1e-6
"""

import argparse
import gc
import os
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_fixtures import (  # noqa: E402  (same randomisation / forward helpers as the fixtures)
    FAMILIES,
    REPO,
    build_model,
    forward,
    randomize_,
    reference_attn,
    save_npy,
)

MODELS = {
    "videomae-base": dict(
        family="videomae", seed=9001,
        config=dict(image_size=224, patch_size=16, num_frames=16, tubelet_size=2, hidden_size=768,
                    num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072, hidden_act="gelu",
                    qkv_bias=True, use_mean_pooling=True, layer_norm_eps=1e-12, num_labels=400)),
    "timesformer-base": dict(
        family="timesformer", seed=9002,
        config=dict(image_size=224, patch_size=16, num_frames=8, hidden_size=768, num_hidden_layers=12,
                    num_attention_heads=12, intermediate_size=3072, hidden_act="gelu", qkv_bias=True,
                    attention_type="divided_space_time", layer_norm_eps=1e-6, num_labels=400)),
    "vivit-base": dict(
        family="vivit", seed=9003,
        config=dict(image_size=224, num_frames=32, tubelet_size=[2, 16, 16], hidden_size=768,
                    num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072,
                    hidden_act="gelu_fast", qkv_bias=True, layer_norm_eps=1e-6, num_labels=400)),
}


def errs(got, exp):
    got = np.asarray(got, dtype=np.float64)
    exp = np.asarray(exp, dtype=np.float64)
    if got.shape != exp.shape:
        return None
    a = float(np.abs(got - exp).max())
    return a, a / max(1.0, float(np.abs(exp).max()))


def fmt(e):
    return "shape mismatch" if e is None else f"max_abs={e[0]:.3e} rel={e[1]:.3e}"


def run_model(name, spec, args, workdir):
    family = spec["family"]
    _, model_cls, _ = FAMILIES[family]
    cfg = dict(spec["config"])
    if args.layers:
        cfg["num_hidden_layers"] = args.layers
    d = os.path.join(workdir, name)
    if os.path.isdir(d):
        shutil.rmtree(d)
    os.makedirs(d)
    t = {}

    t0 = time.perf_counter()
    torch.manual_seed(spec["seed"])
    gen = torch.Generator().manual_seed(spec["seed"])
    model = build_model(family, cfg)
    randomize_(model, gen)
    c = model.config
    x = torch.randn((1, c.num_frames, c.num_channels, c.image_size, c.image_size), generator=gen)
    model.save_pretrained(d, safe_serialization=True)
    save_npy(os.path.join(d, "input.npy"), x.numpy())
    t["build+save"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    l32, h32 = forward(model, family, x)
    t["hf_f32"] = time.perf_counter() - t0
    l32, h32 = l32.numpy(), h32.numpy()
    del model
    gc.collect()

    # float64 reference from the saved files (ViViT: SDPA, its eager softmax runs in float32)
    t0 = time.perf_counter()
    ref = model_cls.from_pretrained(d, dtype=torch.float64, attn_implementation=reference_attn(family)).eval()
    l64, h64 = forward(ref, family, x.double())
    t["hf_f64"] = time.perf_counter() - t0
    l64, h64 = l64.numpy(), h64.numpy()
    del ref
    gc.collect()
    for fn, arr in (("expected_logits_f32.npy", l32), ("expected_hidden_f32.npy", h32),
                    ("expected_logits_f64.npy", l64), ("expected_hidden_f64.npy", h64)):
        np.save(os.path.join(d, fn), arr)

    print(f"\n== {name}  ({family}, {cfg['num_hidden_layers']} layers)  input {list(x.shape)}  "
          f"logits {list(l64.shape)}  hidden {list(h64.shape)}")
    print(f"   max|logits|={np.abs(l64).max():.4f}  max|hidden|={np.abs(h64).max():.4f}")
    print(f"   HF f32 vs HF f64 (noise floor): logits {fmt(errs(l32, l64))}  hidden {fmt(errs(h32, h64))}")

    ok = True
    if args.skip_c:
        print("   C engine: skipped (--skip-c)")
    elif not (os.path.isfile(args.tubelet) and os.access(args.tubelet, os.X_OK)):
        print(f"   C engine: skipped ({args.tubelet} not found / not executable)")
    else:
        lp, hp = os.path.join(d, "c_logits.npy"), os.path.join(d, "c_hidden.npy")
        cmd = [args.tubelet, "run", "--model", d, "--input", os.path.join(d, "input.npy"),
               "--logits", lp, "--hidden", hp, "--threads", str(args.threads)]
        t0 = time.perf_counter()
        r = subprocess.run(cmd, capture_output=True, text=True)
        t["c_run"] = time.perf_counter() - t0
        if r.returncode != 0 or not (os.path.exists(lp) and os.path.exists(hp)):
            ok = False
            print(f"   C engine FAILED (rc={r.returncode}): {' '.join(cmd)}")
            for line in (r.stdout + r.stderr).strip().splitlines()[-20:]:
                print(f"      | {line}")
        else:
            cl, ch = np.load(lp), np.load(hp)
            res = {}
            for ref_name, el, eh in (("f64", l64, h64), ("f32", l32, h32)):
                res[ref_name] = (errs(cl, el), errs(ch, eh))
                print(f"   C vs HF {ref_name}: logits {fmt(res[ref_name][0])}  hidden {fmt(res[ref_name][1])}")
            worst = max((e[1] if e is not None else float("inf")) for e in res["f64"])
            ok = worst <= args.tol
            argmax = "same" if cl.shape == l64.shape and (cl.argmax(-1) == l64.argmax(-1)).all() else "DIFFERENT"
            print(f"   top-1 vs f64: {argmax}   {'PASS' if ok else 'FAIL'} (rel bound vs f64 <= {args.tol:g})")
    print("   time: " + "  ".join(f"{k} {v:.1f}s" for k, v in t.items()))
    return ok


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default=",".join(MODELS),
                    help=f"comma-separated subset of {','.join(MODELS)} (default: all)")
    ap.add_argument("--tubelet", default=os.path.join(REPO, "build", "tubelet"), help="C engine binary")
    ap.add_argument("--threads", type=int, default=2, help="--threads passed to the C engine")
    ap.add_argument("--torch-threads", type=int, default=0, help="torch threads (default: torch's choice)")
    ap.add_argument("--workdir", help="where model dirs are written (default: a fresh temp dir)")
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    ap.add_argument("--skip-c", action="store_true", help="only build the models and run HF")
    ap.add_argument("--layers", type=int, default=0, help="override num_hidden_layers (quick runs)")
    ap.add_argument("--tol", type=float, default=1e-3, help="PASS threshold on the relative bound vs f64")
    args = ap.parse_args()

    names = [m.strip() for m in args.models.split(",") if m.strip()]
    bad = [m for m in names if m not in MODELS]
    if bad:
        ap.error(f"unknown model(s) {bad}; choose from {list(MODELS)}")
    if args.torch_threads:
        torch.set_num_threads(args.torch_threads)
    args.tubelet = os.path.abspath(args.tubelet)

    workdir = args.workdir or tempfile.mkdtemp(prefix="tubelet_parity_")
    os.makedirs(workdir, exist_ok=True)
    print(f"workdir {workdir}   torch {torch.__version__} ({torch.get_num_threads()} threads)   "
          f"transformers {__import__('transformers').__version__}")
    all_ok = True
    try:
        for name in names:
            t0 = time.perf_counter()
            all_ok &= run_model(name, MODELS[name], args, workdir)
            print(f"   total {time.perf_counter() - t0:.1f}s")
    finally:
        if args.keep or args.workdir:
            print(f"\nkept {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    sys.exit(0 if all_ok else 1)


if __name__ == "__main__":
    main()
