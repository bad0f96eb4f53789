"""The speed table's PyTorch rows on a GPU (issue 30; tools/gpu_check.sh runs it on the GPU
machine, whose python3 has torch and transformers, beside tubelet's rows of the same run).

For each model and batch: PyTorch eager in bf16 with scaled_dot_product_attention where the
model takes it (the line says which attention ran), random weights built from the config (no
download), ms per forward (CUDA events, after warm-up), ms per clip, clips per second, the share
of the card's dense bf16 peak (measured first, an 8192^3 torch.matmul; the model's FLOP counted
by torch's FlopCounterMode on one forward) and the peak memory PyTorch allocated. --compile runs
only torch.compile (default mode) of VideoMAE-B at batch 8, as the issue asks (compiling takes
minutes, so only there; gpu_check.sh runs it last).

    python3 bench/gpu_peers.py [--only NAME] [--compile] [--reps N]
"""
import argparse
import sys

import torch

DEV = torch.device("cuda")

# name, frames, batches, builder: the speed table of issue 30
TABLE = [
    ("videomae-base", 16, (1, 8, 32)),
    ("timesformer-base", 8, (8,)),
    ("vivit-base", 32, (8,)),
    ("video-swin-b", 32, (8,)),
]


def build(name):
    """(model, input layout, attention) with random weights; layout 'btchw' or 'bcthw'."""
    if name == "video-swin-b":
        from torchvision.models.video import swin3d_b  # its attention: torch's softmax(q k^T) v
        return swin3d_b(), "bcthw", "torchvision"
    import transformers as tf
    cls = {"videomae-base": (tf.VideoMAEConfig, tf.VideoMAEForVideoClassification),
           "timesformer-base": (tf.TimesformerConfig, tf.TimesformerForVideoClassification),
           "vivit-base": (tf.VivitConfig, tf.VivitForVideoClassification)}[name]
    for attn in ("sdpa", "eager"):  # sdpa where the model has it
        try:
            cfg = cls[0](num_labels=400, attn_implementation=attn)
            return cls[1](cfg), "btchw", attn
        except (ValueError, ImportError):
            continue
    raise RuntimeError(f"{name}: no attention implementation accepted")


def timed(fn, warm=3, reps=10):
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / reps


def peak_tflops():
    n = 8192
    a = torch.randn(n, n, device=DEV, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=DEV, dtype=torch.bfloat16)
    ms = timed(lambda: a @ b, warm=5, reps=20)
    return 2 * n**3 / (ms / 1e3) / 1e12


def flop_per_clip(model, x, layout):
    from torch.utils.flop_counter import FlopCounterMode
    one = x[:1]
    with torch.no_grad(), FlopCounterMode(display=False) as fc:
        run(model, one, layout)
    return fc.get_total_flops()


def run(model, x, layout):
    return model(x) if layout == "bcthw" else model(pixel_values=x)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", help="one model of the table")
    ap.add_argument("--compile", action="store_true",
                    help="only torch.compile of VideoMAE-B at batch 8")
    ap.add_argument("--reps", type=int, default=10)
    a = ap.parse_args()
    print("torch", torch.__version__, "on", torch.cuda.get_device_name(0))
    peak = peak_tflops()
    print(f"bf16 peak (8192^3 torch.matmul): {peak:.0f} TFLOP/s")
    for name, frames, batches in TABLE:
        if (a.only and name != a.only) or (a.compile and name != "videomae-base"):
            continue
        try:
            model, layout, attn = build(name)
        except Exception as ex:  # a missing package on that machine: say so, go on
            print(f"pytorch {name}: not run ({type(ex).__name__}: {ex})")
            continue
        model = model.to(DEV, torch.bfloat16).eval()
        variants = [("compile", torch.compile(model))] if a.compile else [("eager", model)]
        for label, m in variants:
            for batch in (8,) if a.compile else batches:
                shape = (batch, 3, frames, 224, 224) if layout == "bcthw" else \
                        (batch, frames, 3, 224, 224)
                x = torch.randn(*shape, device=DEV, dtype=torch.bfloat16)
                flop = flop_per_clip(model, x, layout)
                torch.cuda.reset_peak_memory_stats()
                with torch.no_grad():
                    ms = timed(lambda: run(m, x, layout), reps=a.reps)
                pct = 100 * batch * flop / (ms / 1e3) / (peak * 1e12)
                mem = torch.cuda.max_memory_allocated() / 2**30
                print(f"pytorch {label} {attn} bf16 {name} batch {batch} {frames}x224: "
                      f"{ms:.2f} ms, {ms / batch:.2f} ms/clip, {batch / (ms / 1e3):.1f} clips/s, "
                      f"{flop / 1e9:.1f} GFLOP/clip, {pct:.0f}% of peak, "
                      f"peak memory {mem:.2f} GiB", flush=True)
                del x
        del model, variants
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
