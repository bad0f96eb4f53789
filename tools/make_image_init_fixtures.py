#!/usr/bin/env python3
"""Writes tests/fixtures/image_init/: a small random Hugging Face image ViT
(ViTForImageClassification, saved by transformers) and what it computes on a few images, the
references for `tubelet init --from-image` (docs/image-init.md has the relations tested).

    vit/                 config.json + model.safetensors (hidden 16, 2 heads, 2 layers, 12x12
                         images, 4x4 patches: a 3x3 grid; every parameter random, norms included)
    frames.npy           (4, 3, 12, 12) four different images f0..f3
    frames16.npy         (4, 3, 16, 16) four images at 16x16 (a 4x4 grid: positions resized)
    vit_hidden.npy       (4, 10, 16) ViT last_hidden_state of each frame
    vit_hidden1.npy      (4, 10, 16) hidden_states[1] (after block 0) of each frame
    vit_hidden16.npy     (4, 17, 16) last_hidden_state at 16x16, interpolate_pos_encoding=True
    vit_nocls.npy        (4, 9, 16)  the ViT's blocks and final norm on the patch tokens alone
                                     (embeddings + positions, no cls token), each frame
    vit_clsbias_f1.npy   (10, 16)    the ViT on f1 with log(1/2) added to every attention score
                                     of the cls key (ViViT Model 1 on [f0, f1, f0, f1], tubelet 2,
                                     central frame)
    vit_clsbias_mean.npy (10, 16)    the same on (f0 + f1) / 2 (filter inflation)

Run: /work/venv/bin/python tools/make_image_init_fixtures.py
"""
import json
import math
import os

import numpy as np
import torch
from safetensors.torch import load_file
from transformers import ViTConfig, ViTForImageClassification

OUT = os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures", "image_init")


def manual_vit(model, sd, pixels, cls_key_bias=0.0, with_cls=True):
    """The ViT forward written out in float64: embeddings, pre-norm blocks, final LayerNorm.
    cls_key_bias is added to every query's score for the cls key; with_cls=False drops the cls
    token (and its position) and runs the blocks on the patch tokens alone. sd: the tensors of
    the saved model.safetensors (the legacy names tubelet reads), float64."""
    c = model.config
    D, H = c.hidden_size, c.num_attention_heads
    dh = D // H
    x = torch.nn.functional.conv2d(pixels.double(), sd["vit.embeddings.patch_embeddings.projection.weight"],
                                   sd["vit.embeddings.patch_embeddings.projection.bias"],
                                   stride=c.patch_size)
    x = x.flatten(2).transpose(1, 2)  # (B, N, D)
    pos = sd["vit.embeddings.position_embeddings"]
    if with_cls:
        cls = sd["vit.embeddings.cls_token"].expand(x.shape[0], -1, -1)
        x = torch.cat([cls, x], 1) + pos
    else:
        x = x + pos[:, 1:]
    ln = lambda t, p: torch.nn.functional.layer_norm(t, (D,), sd[p + ".weight"], sd[p + ".bias"],
                                                     c.layer_norm_eps)
    lin = lambda t, p: t @ sd[p + ".weight"].T + sd[p + ".bias"]
    for l in range(c.num_hidden_layers):
        p = f"vit.encoder.layer.{l}."
        h = ln(x, p + "layernorm_before")
        B, L, _ = h.shape
        q, k, v = (lin(h, p + "attention.attention." + n).view(B, L, H, dh).transpose(1, 2)
                   for n in ("query", "key", "value"))
        s = q @ k.transpose(-1, -2) / math.sqrt(dh)
        if with_cls:
            s[..., 0] += cls_key_bias
        a = (s.softmax(-1) @ v).transpose(1, 2).reshape(B, L, D)
        x = x + lin(a, p + "attention.output.dense")
        h = ln(x, p + "layernorm_after")
        x = x + lin(torch.nn.functional.gelu(lin(h, p + "intermediate.dense")), p + "output.dense")
    return ln(x, "vit.layernorm")


# Video models (config.json only) at the ViT's sizes; `tubelet init` builds them from vit/.
BASE = {"hidden_size": 16, "num_hidden_layers": 2, "num_attention_heads": 2,
        "intermediate_size": 24, "num_channels": 3, "num_frames": 4, "hidden_act": "gelu",
        "layer_norm_eps": 1e-6, "qkv_bias": True, "id2label": {"0": "left", "1": "right"}}
VIDEO = {
    "timesformer_divided": {"model_type": "timesformer", "image_size": 12, "patch_size": 4,
                            "attention_type": "divided_space_time"},
    "timesformer_divided16": {"model_type": "timesformer", "image_size": 16, "patch_size": 4,
                              "attention_type": "divided_space_time"},
    "timesformer_axial": {"model_type": "timesformer", "image_size": 12, "patch_size": 4,
                          "attention_type": "axial"},
    "timesformer_local_global": {"model_type": "timesformer", "image_size": 12, "patch_size": 4,
                                 "attention_type": "local_global"},
    "timesformer_space": {"model_type": "timesformer", "image_size": 12, "patch_size": 4,
                          "attention_type": "space_only"},
    "vivit_m1": {"model_type": "vivit", "image_size": 12, "tubelet_size": [2, 4, 4]},
    "vivit_m2": {"model_type": "vivit", "image_size": 12, "tubelet_size": [2, 4, 4],
                 "model_variant": "factorised_encoder", "num_temporal_layers": 1},
    "vivit_m3": {"model_type": "vivit", "image_size": 12, "tubelet_size": [2, 4, 4],
                 "model_variant": "factorised_self_attention"},
    "vivit_m4": {"model_type": "vivit", "image_size": 12, "tubelet_size": [1, 4, 4],
                 "model_variant": "factorised_dot_product"},
}


def save(name, a):
    np.save(os.path.join(OUT, name), np.ascontiguousarray(a, dtype=np.float32))


def main():
    torch.manual_seed(0)
    cfg = ViTConfig(hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                    intermediate_size=24, image_size=12, patch_size=4, num_channels=3,
                    layer_norm_eps=1e-6, hidden_act="gelu", qkv_bias=True, num_labels=3)
    model = ViTForImageClassification(cfg).eval()
    with torch.no_grad():  # every parameter random and of order 1 (norms and biases included)
        for n, p in model.named_parameters():
            if n.endswith("layernorm_before.weight") or n.endswith("layernorm_after.weight") \
                    or n.endswith("layernorm.weight"):
                p.copy_(1 + 0.3 * torch.randn_like(p))
            elif "embeddings" in n and "projection" not in n:
                p.copy_(0.5 * torch.randn_like(p))
            else:
                p.copy_(0.3 * torch.randn_like(p))
    os.makedirs(OUT, exist_ok=True)
    model.save_pretrained(os.path.join(OUT, "vit"))
    for f in ("generation_config.json",):
        path = os.path.join(OUT, "vit", f)
        if os.path.exists(path):
            os.remove(path)

    for name, extra in VIDEO.items():
        os.makedirs(os.path.join(OUT, name), exist_ok=True)
        with open(os.path.join(OUT, name, "config.json"), "w") as f:
            json.dump({**BASE, **extra}, f, indent=2, sort_keys=True)
            f.write("\n")

    g = torch.Generator().manual_seed(1)
    frames = torch.randn(4, 3, 12, 12, generator=g)
    frames16 = torch.randn(4, 3, 16, 16, generator=g)
    with torch.no_grad():
        out = model.vit(frames, output_hidden_states=True)
        out16 = model.vit(frames16, interpolate_pos_encoding=True)
        # the manual forward is checked against transformers' own
        sd = {k: v.double() for k, v in
              load_file(os.path.join(OUT, "vit", "model.safetensors")).items()}
        ref = manual_vit(model, sd, frames)
        err = (ref - out.last_hidden_state.double()).abs().max().item()
        print(f"manual ViT vs transformers: max abs diff {err:.2e}")
        assert err < 1e-5
        nocls = manual_vit(model, sd, frames, with_cls=False)
        bias = math.log(0.5)
        f1 = manual_vit(model, sd, frames[1:2], cls_key_bias=bias)[0]
        mean = manual_vit(model, sd, (frames[0:1] + frames[1:2]) / 2, cls_key_bias=bias)[0]
    save("frames.npy", frames)
    save("frames16.npy", frames16)
    save("vit_hidden.npy", out.last_hidden_state)
    save("vit_hidden1.npy", out.hidden_states[1])
    save("vit_hidden16.npy", out16.last_hidden_state)
    save("vit_nocls.npy", nocls)
    save("vit_clsbias_f1.npy", f1)
    save("vit_clsbias_mean.npy", mean)
    print("wrote", os.path.abspath(OUT))


if __name__ == "__main__":
    main()
