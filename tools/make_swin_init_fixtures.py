#!/usr/bin/env python3
"""Writes tests/fixtures/image_init_swin/: a small random Hugging Face image Swin and what it
computes on a few images, the references for `tubelet init --from-image` on Video Swin
(docs/video-swin.md, "Initialisation from an image Swin", says why a video of one repeated image
must give these features).

    swin/              SwinForImageClassification saved by transformers' save_pretrained (the
                       names hub checkpoints carry: swin.encoder.layers.i.blocks.j.attention.self.
                       query, ...): embed 24, depths [2, 2], heads [2, 4], window 4, mlp_ratio 2,
                       32x32 images, 4x4 patches (8x8 then 4x4 grids), 3 classes; every parameter
                       random (linear weights N(0, 1/fan_in), norms and biases perturbed, bias
                       tables N(0, 0.5^2))
    swin_new/          the same weights as a SwinModel (no prefix, no classifier) under
                       transformers 5's names (save_original_format=False: attention.q_proj,
                       attention.relative_position_bias.relative_position_bias_table, mlp.fc1)
    video/config.json  the Video Swin it initialises: patch 2x4x4, window 2x4x4, the same widths
    images.npy         (3, 3, 32, 32) three images
    swin_hidden.npy    (3, 16, 48) last_hidden_state (final LayerNorm) of each image
    swin_pooled.npy    (3, 48) pooler_output (the mean of last_hidden_state)
    swin_logits.npy    (3, 3) SwinForImageClassification's logits
References are computed in float64.

Run: /work/venv/bin/python tools/make_swin_init_fixtures.py
"""
import json
import math
import os

import numpy as np
import torch
from safetensors import safe_open
from transformers import SwinConfig, SwinForImageClassification

OUT = os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures", "image_init_swin")

VIDEO = {"model_type": "video_swin", "patch_size": [2, 4, 4], "embed_dim": 24, "depths": [2, 2],
         "num_heads": [2, 4], "window_size": [2, 4, 4], "mlp_ratio": 2.0, "num_frames": 8,
         "image_size": 32, "layer_norm_eps": 1e-5,
         "id2label": {"0": "left", "1": "right", "2": "still"}}


def save(name, a):
    np.save(os.path.join(OUT, name), np.ascontiguousarray(a.detach().numpy(), dtype=np.float32))


def names(path):
    with safe_open(os.path.join(path, "model.safetensors"), "pt") as f:
        return sorted(f.keys())


def main():
    torch.manual_seed(0)
    cfg = SwinConfig(image_size=32, patch_size=4, num_channels=3, embed_dim=24, depths=[2, 2],
                     num_heads=[2, 4], window_size=4, mlp_ratio=2.0, qkv_bias=True,
                     hidden_act="gelu", layer_norm_eps=1e-5, use_absolute_embeddings=False,
                     num_labels=3)
    model = SwinForImageClassification(cfg).eval()
    with torch.no_grad():
        for n, p in model.named_parameters():
            if n.endswith("relative_position_bias_table"):
                p.copy_(0.5 * torch.randn_like(p))
            elif p.dim() == 1 and "norm" in n and n.endswith("weight"):
                p.copy_(1 + 0.2 * torch.randn_like(p))
            elif p.dim() == 1:
                p.copy_(0.1 * torch.randn_like(p))
            else:
                p.copy_(torch.randn_like(p) / math.sqrt(p[0].numel()))
    os.makedirs(OUT, exist_ok=True)
    model.save_pretrained(os.path.join(OUT, "swin"))
    model.swin.save_pretrained(os.path.join(OUT, "swin_new"), save_original_format=False)
    for d in ("swin", "swin_new"):
        path = os.path.join(OUT, d, "generation_config.json")
        if os.path.exists(path):
            os.remove(path)
    legacy, fresh = names(os.path.join(OUT, "swin")), names(os.path.join(OUT, "swin_new"))
    assert "swin.encoder.layers.0.blocks.0.attention.self.query.weight" in legacy, legacy[:8]
    assert "encoder.layers.0.blocks.0.attention.q_proj.weight" in fresh, fresh[:8]
    os.makedirs(os.path.join(OUT, "video"), exist_ok=True)
    with open(os.path.join(OUT, "video", "config.json"), "w") as f:
        json.dump(VIDEO, f, indent=2, sort_keys=True)
        f.write("\n")

    g = torch.Generator().manual_seed(1)
    images = torch.randn(3, 3, 32, 32, generator=g)
    m64 = model.double()
    with torch.no_grad():
        out = m64(images.double())
        base = m64.swin(images.double())
    assert base.last_hidden_state.shape == (3, 16, 48)
    save("images.npy", images)
    save("swin_hidden.npy", base.last_hidden_state)
    save("swin_pooled.npy", base.pooler_output)
    save("swin_logits.npy", out.logits)
    print("wrote", os.path.abspath(OUT))


if __name__ == "__main__":
    main()
