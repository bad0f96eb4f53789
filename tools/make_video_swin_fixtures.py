#!/usr/bin/env python3
"""Video Swin references from torchvision's SwinTransformer3d (the model of swin3d_t/s/b), with
tiny random weights, for tests/test_video_swin.c.

Usage:
    /work/venv/bin/python tools/make_video_swin_fixtures.py [--root tests/fixtures] [--check]

Writes tests/fixtures/video_swin_<name>/ for each entry of FIXTURES:

    config.json         tubelet's "video_swin" config (docs/video-swin.md)
    model.safetensors   every parameter under torchvision's name (no relative_position_index:
                        a buffer tubelet computes)
    input.npy           float32 (B, T, C, H, W), tubelet's pixel layout
    logits.npy          float32 (B, classes)
    hidden.npy          float32 (B, N, C_last): the final-normed tokens of the last stage
    stage<i>.npy        float32 (B, C_i, T_i, H_i, W_i): the output of features[2 i], stage i
    labels.npy          int64 (B,)
    loss.npy            float32 (): F.cross_entropy(logits, labels)
    grads.safetensors   d loss / d p for every parameter p, under its name

References run in float64 (model.double(), eval mode: stochastic depth off) and are saved as
float32; a float32 torch run is compared with them for information, and each gradient is
checked against a central finite difference of the float64 loss (fixture_io.fd_check).

The fixtures cover: regular and shifted windows with the shift mask; an input that does not
divide into patches (patch padding), a token grid that does not divide into windows (window
padding: zero tokens that attend unmasked), rows and columns merged with padding (odd grids),
and windows shrunk to grids smaller than them (torchvision's relative_position_index[:L, :L]
rule).

It also tests tools/convert_video_swin.py: a torchvision state dict and the same weights under
the official (mmaction2) names, each converted, give back the torchvision tensors, and the
config.json written loads the same model (checked through the torch model built from it).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch
import torch.nn.functional as F
from torchvision.models.video.swin_transformer import SwinTransformer3d

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fixture_io import check_fixture, fd_check, write_fixture  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# name: model arguments, input (B, T, H, W), classes
FIXTURES = {
    # every stage has a shifted block; stage 0's 4x6x6 grid has 8 windows of 2x3x3 with shift
    # (1,1,1); later stages shrink rows and columns to their grids and shift only in time
    "video_swin_shift": dict(
        model=dict(patch_size=[2, 4, 4], embed_dim=4, depths=[2, 2, 2, 2], num_heads=[1, 2, 2, 4],
                   window_size=[2, 3, 3], mlp_ratio=2.0),
        input=(2, 8, 24, 24), classes=5),
    # 5 x 26 x 23 pixels: patches 2x3x3 pad to a 3x9x8 grid; window 3x4x4: time shrinks (3 <= 3),
    # rows pad 9 → 12 with shift 2, columns 8 with shift 2; merging pads 9 → 10 rows; stage 2's
    # 3x3x2 grid shrinks every axis (L = 18 of the full window's 48)
    "video_swin_pad": dict(
        model=dict(patch_size=[2, 3, 3], embed_dim=4, depths=[2, 1, 2, 1], num_heads=[1, 1, 2, 2],
                   window_size=[3, 4, 4], mlp_ratio=1.5),
        input=(1, 5, 26, 23), classes=3),
}


def build(spec, seed):
    """The torchvision model with random weights of sizes that make every term matter: linear
    weights ~ N(0, 1/fan_in), norms 1 + N(0, 0.1²), biases N(0, 0.1²), bias tables N(0, 0.5²)."""
    torch.manual_seed(seed)
    m = SwinTransformer3d(**spec["model"], stochastic_depth_prob=0.0,
                          num_classes=spec["classes"])
    with torch.no_grad():
        for n, p in m.named_parameters():
            if n.endswith("relative_position_bias_table"):
                p.copy_(0.5 * torch.randn_like(p))
            elif p.ndim >= 2:
                p.copy_(torch.randn_like(p) / np.sqrt(p[0].numel()))
            elif "norm" in n and n.endswith("weight"):
                p.copy_(1 + 0.1 * torch.randn_like(p))
            else:
                p.copy_(0.1 * torch.randn_like(p))
    return m.eval()


def run(m, x):
    """Logits, the stage outputs (B, C, T, H, W) and the final-normed tokens (B, N, C)."""
    h = m.pos_drop(m.patch_embed(x))
    stages = []
    for i, layer in enumerate(m.features):
        h = layer(h)
        if i % 2 == 0:
            stages.append(h.permute(0, 4, 1, 2, 3))
    h = m.norm(h)
    hidden = h.reshape(h.shape[0], -1, h.shape[-1])
    logits = m.head(torch.flatten(m.avgpool(h.permute(0, 4, 1, 2, 3)), 1))
    return logits, stages, hidden


def config_json(spec):
    mm = spec["model"]
    B, T, H, W = spec["input"]
    return {
        "model_type": "video_swin", "architectures": ["SwinTransformer3d"],
        "patch_size": mm["patch_size"], "embed_dim": mm["embed_dim"], "depths": mm["depths"],
        "num_heads": mm["num_heads"], "window_size": mm["window_size"],
        "mlp_ratio": mm["mlp_ratio"], "stochastic_depth_prob": 0.0, "num_channels": 3,
        "num_frames": T, "image_size": [H, W], "layer_norm_eps": 1e-5,
        "id2label": {str(i): f"class_{i}" for i in range(spec["classes"])},
    }


def params_of(m):
    return {n: p for n, p in m.named_parameters()}


def make(name, spec, seed):
    m = build(spec, seed).double()
    B, T, H, W = spec["input"]
    g = torch.Generator().manual_seed(seed + 1)
    pix = torch.randn(B, T, 3, H, W, generator=g, dtype=torch.float64)  # tubelet's layout
    x = pix.permute(0, 2, 1, 3, 4).contiguous()                          # torch's (B, C, T, H, W)
    labels = torch.arange(B) % spec["classes"]
    logits, stages, hidden = run(m, x)
    loss = F.cross_entropy(logits, labels)
    m.zero_grad()
    loss.backward()
    grads = {n: p.grad.detach().clone() for n, p in m.named_parameters()}
    for n, gr in grads.items():
        assert torch.isfinite(gr).all() and gr.abs().max() > 0, f"{name}: gradient of {n} is zero"

    def loss_fn():
        with torch.no_grad():
            return F.cross_entropy(run(m, x)[0], labels).item()
    worst, _ = fd_check(m, loss_fn, grads, seed + 2)
    assert worst < 1e-5, f"{name}: finite differences disagree with autograd ({worst:.3g})"
    # float32 against float64, for information (what the C engine can hope for)
    m32 = build(spec, seed)
    l32, s32, _ = run(m32, x.float())
    err32 = ((l32.double() - logits).abs().max() / logits.abs().max()).item()
    print(f"{name}: loss {loss.item():.6f}, fd {worst:.2e}, torch f32 logits rel err {err32:.2e}, "
          f"stages {[tuple(s.shape) for s in stages]}")
    f32 = lambda t: t.detach().float().numpy()  # noqa: E731
    arrays = {"input.npy": f32(pix), "logits.npy": f32(logits), "hidden.npy": f32(hidden),
              "labels.npy": labels.numpy().astype(np.int64),
              "loss.npy": np.array(loss.item(), dtype=np.float32)}
    for i, s in enumerate(stages):
        arrays[f"stage{i}.npy"] = f32(s)
    weights = {n: p.detach().float().contiguous() for n, p in m.named_parameters()}
    tensors = {"model.safetensors": weights,
               "grads.safetensors": {n: gr.float().contiguous() for n, gr in grads.items()}}
    meta = {"reference": "torchvision.models.video.swin_transformer.SwinTransformer3d, float64",
            "torch": torch.__version__, "seed": seed, "fd_worst": worst, "torch_f32_rel": err32}
    return config_json(spec), arrays, tensors, meta


OFFICIAL = [  # torchvision name piece → mmaction2 (Video-Swin-Transformer) name piece
    ("mlp.0.", "mlp.fc1."), ("mlp.3.", "mlp.fc2."),
]


def to_official(sd, depths):
    """torchvision names → the official checkpoint's: backbone.layers.<i>.blocks.<j>.*,
    backbone.layers.<i>.downsample.*, backbone.norm.*, cls_head.fc_cls.*."""
    out = {}
    for n, t in sd.items():
        parts = n.split(".")
        if parts[0] == "features":
            k = int(parts[1])
            if k % 2 == 0:
                rest = ".".join(parts[3:])
                for a, b in OFFICIAL:
                    rest = rest.replace(a, b)
                n2 = f"backbone.layers.{k // 2}.blocks.{parts[2]}.{rest}"
            else:
                n2 = f"backbone.layers.{k // 2}.downsample.{'.'.join(parts[2:])}"
        elif parts[0] == "head":
            n2 = "cls_head.fc_cls." + ".".join(parts[1:])
        else:
            n2 = "backbone." + n
        out[n2] = t
    return {"meta": {"note": "mmaction2-style"}, "state_dict": out}


def test_converter():
    """convert_video_swin.py on a torchvision and an official-style .pth of the same weights."""
    from fixture_io import read_safetensors
    spec = FIXTURES["video_swin_pad"]
    m = build(spec, 7)
    sd = m.state_dict()
    mm = spec["model"]
    args = ["--patch-size", ",".join(map(str, mm["patch_size"])), "--embed-dim",
            str(mm["embed_dim"]), "--depths", ",".join(map(str, mm["depths"])), "--num-heads",
            ",".join(map(str, mm["num_heads"])), "--window-size",
            ",".join(map(str, mm["window_size"])), "--mlp-ratio", str(mm["mlp_ratio"])]
    with tempfile.TemporaryDirectory() as tmp:
        for kind, obj in (("torchvision", sd), ("official", to_official(sd, mm["depths"]))):
            pth, out = os.path.join(tmp, kind + ".pth"), os.path.join(tmp, kind)
            torch.save(obj, pth)
            subprocess.run([sys.executable, os.path.join(REPO, "tools", "convert_video_swin.py"),
                            pth, "-o", out] + args, check=True)
            got = read_safetensors(os.path.join(out, "model.safetensors"))
            want = {n: t for n, t in sd.items() if not n.endswith("relative_position_index")}
            assert set(got) == set(want), f"{kind}: names {set(got) ^ set(want)}"
            for n in want:
                assert torch.equal(got[n], want[n].float()), f"{kind}: {n} differs"
            cfg = json.load(open(os.path.join(out, "config.json")))
            for k in ("patch_size", "embed_dim", "depths", "num_heads", "window_size"):
                assert cfg[k] == mm[k], f"{kind}: config.json {k} {cfg[k]} != {mm[k]}"
            assert cfg["model_type"] == "video_swin" and len(cfg["id2label"]) == spec["classes"]
            pre = json.load(open(os.path.join(out, "preprocessor_config.json")))
            assert pre["crop_size"] == {"height": 224, "width": 224}
            assert pre["size"] == {"shortest_edge": 256}
        # a wrong window for the table is refused, naming the tensor
        bad_args = [("8,7,7" if i and args[i - 1] == "--window-size" else s)
                    for i, s in enumerate(args)]
        r = subprocess.run([sys.executable, os.path.join(REPO, "tools", "convert_video_swin.py"),
                            os.path.join(tmp, "torchvision.pth"), "-o",
                            os.path.join(tmp, "bad")] + bad_args,
                           capture_output=True, text=True)
        assert r.returncode != 0 and "relative_position_bias_table" in r.stderr, r.stderr
        assert not os.path.exists(os.path.join(tmp, "bad", "model.safetensors"))
    print("convert_video_swin.py: torchvision and official names converted exactly; a wrong "
          "window refused")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", default=os.path.join(REPO, "tests", "fixtures"))
    ap.add_argument("--check", action="store_true", help="compare with the files on disk")
    a = ap.parse_args()
    torch.set_num_threads(1)
    for i, (name, spec) in enumerate(FIXTURES.items()):
        cfg, arrays, tensors, meta = make(name, spec, 1000 + i)
        d = os.path.join(a.root, name)
        if a.check:
            check_fixture(d, cfg, arrays, tensors)
            print(f"{d}: unchanged")
        else:
            size = write_fixture(d, cfg, arrays, tensors, meta)
            print(f"{d}: {size / 1024:.0f} KB")
    test_converter()


if __name__ == "__main__":
    main()
