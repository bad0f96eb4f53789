#!/usr/bin/env python3
"""References for VideoMAE masked pretraining: tiny random-weight transformers
VideoMAEForPreTraining models, their loss, logits and the gradient of every parameter.

Usage:
    /work/venv/bin/python tools/make_pretrain_fixtures.py [--out tests/fixtures] [--check]

Writes tests/fixtures/<name>/ for each case of CASES:

    config.json, model.safetensors   as save_pretrained writes them (architectures
                                     ["VideoMAEForPreTraining"], the decoder_* fields, norm_pix_loss)
    input.npy      float32 pixel_values (B, T, C, H, W), N(0, 1)
    mask.npy       bool bool_masked_pos (B, num_patches): a tube mask (one spatial mask per clip,
                   repeated over the temporal slices) or a token-level random mask with the same
                   count in every clip
    loss.npy       float32 ()      the model's own loss (MSE over the masked tokens)
    logits.npy     float32 (B, n_masked, C t p p)  the model's logits
    grads.safetensors  float32     d loss / d p for every parameter, under its model.safetensors name
    meta.json

and lists the names in tests/fixtures/pretrain_list.txt. Everything is computed in float64 (the
model in double, transformers' default attention) and saved as float32; a float32 run is checked to agree to
2e-5 relative (the loss 1e-5), and every gradient against a central finite difference along a
random direction.
"""
import argparse
import json
import os
import sys
import tempfile

import numpy as np
import torch
from transformers import VideoMAEConfig, VideoMAEForPreTraining
from transformers.utils import logging as hf_logging

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fixture_io import add_to_list, check_fixture, fd_check, read_safetensors, write_fixture  # noqa: E402

hf_logging.set_verbosity_error()
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# name: (config fields, batch, mask ratio, tube mask)
CASES = {
    # 2 x 4 x 4 tokens, norm_pix_loss, mean pooling (no encoder LayerNorm), mask 0.75
    "pretrain_normpix": (dict(image_size=16, patch_size=4, num_frames=4, tubelet_size=2,
                              hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                              intermediate_size=32, decoder_hidden_size=24,
                              decoder_num_hidden_layers=2, decoder_num_attention_heads=3,
                              decoder_intermediate_size=24, norm_pix_loss=True,
                              use_mean_pooling=True), 2, 0.75, True),
    # an odd grid, 3 x 5 x 5 tokens, plain pixel targets, the encoder's final LayerNorm, no q/v
    # biases, mask 0.9
    "pretrain_pix_odd": (dict(image_size=20, patch_size=4, num_frames=6, tubelet_size=2,
                              hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                              intermediate_size=24, decoder_hidden_size=16,
                              decoder_num_hidden_layers=1, decoder_num_attention_heads=2,
                              decoder_intermediate_size=32, norm_pix_loss=False,
                              use_mean_pooling=False, qv_bias=False, layer_norm_eps=1e-6),
                         2, 0.9, True),
    # norm_pix_loss on an odd grid with a token-level mask (same count per clip), mask 0.9,
    # tubelet 1, batch 3
    "pretrain_normpix_odd": (dict(image_size=12, patch_size=4, num_frames=3, tubelet_size=1,
                                  hidden_size=24, num_hidden_layers=1, num_attention_heads=2,
                                  intermediate_size=40, decoder_hidden_size=16,
                                  decoder_num_hidden_layers=2, decoder_num_attention_heads=2,
                                  decoder_intermediate_size=24, norm_pix_loss=True,
                                  use_mean_pooling=False), 3, 0.9, False),
}


def make_mask(rng, B, gt, n, ratio, tube):
    if tube:  # VideoMAE's TubeMaskingGenerator: int(ratio * n) per frame, the same each slice
        k = int(ratio * n)
        out = []
        for _ in range(B):
            m = np.hstack([np.zeros(n - k), np.ones(k)]).astype(bool)
            rng.shuffle(m)
            out.append(np.tile(m, gt))
        return np.stack(out)
    N = gt * n
    k = int(ratio * N)
    out = np.zeros((B, N), bool)
    for b in range(B):
        out[b, rng.choice(N, k, replace=False)] = True
    return out


def file_name(n, keys):
    """The name a parameter has in model.safetensors (transformers 5 renames q_bias / v_bias on
    load and back on save)."""
    if n in keys:
        return n
    for a, b in (("attention.query.bias", "attention.q_bias"),
                 ("attention.value.bias", "attention.v_bias")):
        if n.endswith(a) and n[: -len(a)] + b in keys:
            return n[: -len(a)] + b
    raise KeyError(n)


def build(name, fields, B, ratio, tube, seed):
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    cfg = VideoMAEConfig(**fields)
    model = VideoMAEForPreTraining(cfg).eval()
    with torch.no_grad():  # move every parameter off its init (unit norms, zero biases)
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    T, S = fields["num_frames"], fields["image_size"]
    gt, n = T // fields["tubelet_size"], (S // fields["patch_size"]) ** 2
    x = rng.standard_normal((B, T, 3, S, S)).astype(np.float32)
    mask = make_mask(rng, B, gt, n, ratio, tube)
    assert mask.sum(1).min() == mask.sum(1).max() > 0 and mask.sum(1).max() < gt * n
    return cfg, model, x, mask


def run(model, x, mask, dtype):
    model = model.to(dtype)
    model.zero_grad(set_to_none=True)
    out = model(torch.from_numpy(x).to(dtype), bool_masked_pos=torch.from_numpy(mask))
    out.loss.backward()
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters()}
    return out.loss.detach(), out.logits.detach(), grads


def make(name, out_dir, check):
    fields, B, ratio, tube = CASES[name]
    seed = 1400 + sorted(CASES).index(name)
    cfg, model, x, mask = build(name, fields, B, ratio, tube, seed)
    with tempfile.TemporaryDirectory() as tmp:
        model.save_pretrained(tmp)
        with open(os.path.join(tmp, "config.json")) as f:
            cfg_json = json.load(f)
        file_tensors = read_safetensors(os.path.join(tmp, "model.safetensors"))
    keys = set(file_tensors)
    loss64, logits64, g64 = run(model, x, mask, torch.float64)
    loss32, logits32, g32 = run(model, x, mask, torch.float32)
    assert abs(loss32.item() - loss64.item()) <= 1e-5 * abs(loss64.item()), "float32 loss"
    for n in g64:
        s = g64[n].abs().max().item()
        assert s > 0, f"{name}: gradient of {n} is zero"
        err = (g32[n].double() - g64[n]).abs().max().item()
        assert err <= 2e-5 * s, f"{name}: float32 gradient of {n} off by {err / s:.2g}"
    model = model.double()
    xt = torch.from_numpy(x).double()
    mt = torch.from_numpy(mask)

    def loss_fn():
        return model(xt, bool_masked_pos=mt).loss.item()

    worst, _ = fd_check(model, loss_fn, g64, seed)
    assert worst < 1e-5, f"{name}: finite differences disagree ({worst:.3g})"
    grads = {file_name(n, keys): g.float().contiguous() for n, g in g64.items()}
    assert set(grads) == keys, f"{name}: parameters {sorted(set(grads) ^ keys)}"
    arrays = {"input.npy": x, "mask.npy": mask, "loss.npy": np.float32(loss64.item()),
              "logits.npy": logits64.float().numpy()}
    if name == "pretrain_normpix":  # masks the CLI must refuse (tests/test_pretrain.sh)
        unequal = mask.copy()
        unequal[1, np.flatnonzero(~unequal[1])[0]] = True
        arrays.update({"bad_mask_unequal.npy": unequal,
                       "bad_mask_all_masked.npy": np.ones_like(mask),
                       "bad_mask_none_masked.npy": np.zeros_like(mask),
                       "bad_mask_shape.npy": mask[:, :-1].copy(),
                       "bad_mask_float.npy": mask.astype(np.float32)})
    d = os.path.join(out_dir, name)
    if check:
        check_fixture(d, cfg_json, arrays, {"grads.safetensors": grads})
        print(f"{name}: matches")
        return
    meta = {"seed": seed, "batch": B, "mask_ratio": ratio, "tube_mask": tube,
            "masked_per_clip": int(mask[0].sum()), "num_patches": int(mask.shape[1]),
            "fd_worst": worst, "transformers": __import__("transformers").__version__,
            "torch": torch.__version__}
    tensors = {"model.safetensors": {k: v.contiguous() for k, v in file_tensors.items()},
               "grads.safetensors": grads}
    size = write_fixture(d, cfg_json, arrays, tensors, meta)
    print(f"{name}: loss {loss64.item():.6f}, {len(grads)} gradients, fd {worst:.2g}, "
          f"{size / 1024:.0f} KB")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(REPO, "tests", "fixtures"))
    ap.add_argument("--check", action="store_true")
    a = ap.parse_args()
    torch.set_num_threads(1)
    for name in CASES:
        make(name, a.out, a.check)
    if not a.check:
        add_to_list(os.path.join(a.out, "pretrain_list.txt"), list(CASES))


if __name__ == "__main__":
    main()
