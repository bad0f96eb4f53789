"""V-JEPA 2 parity fixtures (issue 38; docs/vjepa2.md), from transformers' VJEPA2 code:

tests/fixtures/rope/hdN/: transformers' own 3D rotary rotation (VJEPA2RopeAttention.
    apply_rotary_embeddings at get_position_ids' positions) of random queries, for head sizes
    whose three slices leave remainders (20: 3 x 6 + 2; 26: 3 x 8 + 2; 64: 3 x 20 + 4):
    x.npy (rows, heads, hd), pos.npy int32 (rows, 3) the (depth, height, width) of each row,
    out.npy the rotated x, grad.npy the gradient of sum(out * x) with respect to the input (the
    backward applied to dy = x).

tests/fixtures/vjepa2_*/: small random-weight VJEPA2ForVideoClassification directories as
    transformers saves them (config.json, model.safetensors: the encoder, the predictor, which
    classification does not run, the attentive pooler and the classifier), input.npy (batch,
    frames, channels, height, width), hidden.npy (the encoder's last_hidden_state, after its final
    layernorm), logits.npy, labels.npy, loss.npy (cross-entropy, mean over the batch) and
    grads.safetensors (d loss / d p for every parameter the classifier's forward reaches, under
    the parameter's file name), all computed in float64 and saved as float32.

    /work/venv/bin/python tools/make_vjepa2_fixtures.py
"""
import json
import os
import shutil

import numpy as np
import torch
import torch.nn.functional as F
from safetensors.torch import save_file
from transformers import VJEPA2Config, VJEPA2ForVideoClassification
from transformers.models.vjepa2.modeling_vjepa2 import VJEPA2RopeAttention

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
FIX = os.path.join(ROOT, "tests", "fixtures")

# name: (config, batch, frames, side, labels, seed). Small shapes that still exercise what a
# general loader must: head sizes with a remainder after the three RoPE slices, ViT-g's MLP ratio
# 48/11, patch sizes other than 16, one and several pooler blocks, a clip shorter than the
# config's frames_per_clip and one of a single frame (repeated to the tubelet), batch > 1.
CASES = {
    # head 20 (3 x 6 + 2), patch 8, 2 pooler self-attention blocks, batch 2
    "vjepa2_hd20": (dict(patch_size=8, crop_size=32, frames_per_clip=4, tubelet_size=2,
                         hidden_size=40, num_attention_heads=2, num_hidden_layers=2,
                         mlp_ratio=4.0, num_pooler_layers=2, pred_hidden_size=16,
                         pred_num_attention_heads=2, pred_num_hidden_layers=1,
                         pred_num_mask_tokens=2),
                    2, 4, 32, 5, 3801),
    # head 26 (3 x 8 + 2), ViT-g's MLP ratio 48/11, patch 6 on 24x24 (4 x 4), 3 frames of a
    # 6-frame config (the positions are the config's grid), 1 pooler block
    "vjepa2_g_odd": (dict(patch_size=6, crop_size=24, frames_per_clip=6, tubelet_size=2,
                          hidden_size=52, num_attention_heads=2, num_hidden_layers=2,
                          mlp_ratio=48 / 11, num_pooler_layers=1, pred_hidden_size=16,
                          pred_num_attention_heads=2, pred_num_hidden_layers=1,
                          pred_num_mask_tokens=2),
                     1, 4, 24, 3, 3802),
    # one frame (repeated to the tubelet of 2), head 16 (3 x 4 + 4), qkv without bias, no pooler
    # self-attention block
    "vjepa2_one_frame": (dict(patch_size=16, crop_size=32, frames_per_clip=2, tubelet_size=2,
                              hidden_size=32, num_attention_heads=2, num_hidden_layers=1,
                              qkv_bias=False, num_pooler_layers=0, pred_hidden_size=16,
                              pred_num_attention_heads=2, pred_num_hidden_layers=1,
                              pred_num_mask_tokens=2),
                         2, 1, 32, 4, 3803),
}


def save_npy(path, arr):
    np.save(path, np.ascontiguousarray(arr), allow_pickle=False)


def rope_fixture(name, hd, heads, grid, depth, seed):
    """transformers' rotation of random x (1, heads, tokens, hd) and the gradient of
    sum(out * x) with respect to its input."""
    torch.manual_seed(seed)
    cfg = VJEPA2Config(patch_size=16, crop_size=16 * grid, frames_per_clip=2 * depth,
                       tubelet_size=2, hidden_size=heads * hd, num_attention_heads=heads)
    att = VJEPA2RopeAttention(cfg, hidden_size=heads * hd, num_attention_heads=heads)
    n = depth * grid * grid
    x = torch.randn(1, heads, n, hd)
    pos = att.get_position_ids(x.transpose(1, 2))  # the token count is dim 1 of (B, N, ...)
    z = x.clone().requires_grad_()
    out = att.apply_rotary_embeddings(z, pos)
    (out * x).sum().backward()
    d = os.path.join(FIX, "rope", name)
    os.makedirs(d, exist_ok=True)
    save_npy(os.path.join(d, "x.npy"), x[0].transpose(0, 1).numpy())          # (rows, heads, hd)
    save_npy(os.path.join(d, "pos.npy"), torch.stack(pos, 1).to(torch.int32).numpy())
    save_npy(os.path.join(d, "out.npy"), out.detach()[0].transpose(0, 1).numpy())
    save_npy(os.path.join(d, "grad.npy"), z.grad[0].transpose(0, 1).numpy())
    print(f"rope/{name}: {n} rows, {heads} heads of {hd}, slices of {att.d_dim}")


def randomise(model):
    """Weights of a visible size (transformers' init is tiny), stored as float32."""
    with torch.no_grad():
        for n, p in model.named_parameters():
            if p.ndim == 1 and "norm" in n and n.endswith("weight"):
                p.normal_(1.0, 0.1)
            else:
                p.normal_(0.0, 0.2 if p.ndim > 1 else 0.05)


def model_fixture(name, cfg_kw, batch, frames, side, num_labels, seed):
    torch.manual_seed(seed)
    cfg = VJEPA2Config(num_labels=num_labels, **cfg_kw)
    model = VJEPA2ForVideoClassification(cfg).eval()
    randomise(model)
    d = os.path.join(FIX, name)
    if os.path.isdir(d):
        shutil.rmtree(d)
    model.save_pretrained(d)
    x = torch.randn(batch, frames, 3, side, side)
    labels = torch.from_numpy(np.random.default_rng(seed).integers(0, num_labels, batch))
    # the reference in float64 (eager attention), saved as float32
    ref = VJEPA2ForVideoClassification.from_pretrained(d, attn_implementation="eager")
    ref = ref.double().eval()
    out = ref(pixel_values_videos=x.double(), labels=labels)
    hidden = ref.vjepa2(pixel_values_videos=x.double(), skip_predictor=True).last_hidden_state
    loss = F.cross_entropy(out.logits, labels)
    assert abs(loss.item() - out.loss.item()) < 1e-12, "transformers' loss is the plain mean CE"
    loss.backward()
    grads = {n: p.grad.float().contiguous() for n, p in ref.named_parameters()
             if p.grad is not None}
    assert not any(n.startswith("vjepa2.predictor") for n in grads), "the predictor is not run"
    save_npy(os.path.join(d, "input.npy"), x.numpy().astype(np.float32))
    save_npy(os.path.join(d, "hidden.npy"), hidden.detach().float().numpy())
    save_npy(os.path.join(d, "logits.npy"), out.logits.detach().float().numpy())
    save_npy(os.path.join(d, "labels.npy"), labels.numpy().astype(np.int64))
    save_npy(os.path.join(d, "loss.npy"), np.array(loss.item(), dtype=np.float32))
    save_file(grads, os.path.join(d, "grads.safetensors"), metadata={"format": "pt"})
    meta = {"family": "vjepa2", "class": "VJEPA2ForVideoClassification", "seed": seed,
            "input_shape": list(x.shape), "logits_shape": list(out.logits.shape),
            "hidden_shape": list(hidden.shape),
            "note": "grads: d loss / d p of every parameter the classifier's forward reaches "
                    "(the predictor's are absent); float64 eager reference saved as float32",
            "generated_with": {"torch": torch.__version__,
                               "transformers": __import__("transformers").__version__}}
    with open(os.path.join(d, "meta.json"), "w") as f:
        json.dump(meta, f, indent=2)
        f.write("\n")
    for fn in os.listdir(d):
        os.chmod(os.path.join(d, fn), 0o644)
    size = sum(os.path.getsize(os.path.join(d, fn)) for fn in os.listdir(d))
    print(f"{name}: hidden {tuple(hidden.shape)} logits {tuple(out.logits.shape)} "
          f"loss {loss.item():.4f}, {len(grads)} gradients, {size / 1e3:.0f} KB")


def main():
    rope_fixture("hd20", 20, 2, 3, 2, 3701)
    rope_fixture("hd26", 26, 3, 2, 3, 3702)
    rope_fixture("hd64", 64, 1, 4, 2, 3703)
    for name, case in CASES.items():
        model_fixture(name, *case)


if __name__ == "__main__":
    main()
