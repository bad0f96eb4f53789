#!/usr/bin/env python3
"""facebookresearch/vjepa2's own checkpoint layout, small (docs/vjepa2.md, "Meta's checkpoints").

Meta publishes V-JEPA 2 as torch.save'd dicts: the pretraining checkpoints (vitl.pt, vith.pt,
vitg.pt, vitg-384.pt) hold "encoder", "target_encoder" and "predictor" state dicts under
"module.backbone.", with fused qkv; the attentive probes (ssv2-vitl-16x2x3.pt,
diving48-vitl-256.pt, ...) a "classifiers" list of AttentiveClassifier state dicts under
"module." (pooler.blocks.N with fused qkv, pooler.cross_attention_block with a fused kv,
linear), beside an "opt" list. This script writes files of that layout from the transformers
fixture tests/fixtures/vjepa2_hd20 (Meta's names from transformers' by the inverse of what
tubelet's reader does, src/io/checkpoint.c), so that reading them back must give the fixture's
model.safetensors tensor for tensor:

tests/fixtures/vjepa2_meta/
    vjepa2-hd20-32.pt     target_encoder = the fixture's encoder; encoder = the same + 1 (to tell
                          them apart); predictor (its mask tokens as a ParameterList, a
                          predictor_pos_embed to drop); the encoder carries a pos_embed to drop
    vjepa2-hd20-32_legacy.pt   the same in torch's legacy serialisation
    ssv2-hd20-4x2x3.pt    the probe: classifiers = [the fixture's pooler + classifier, a second
                          probe (+ 1)], opt, epoch
    combined-hd20-32.pt   "encoder" only (a hub-style copy: no target_encoder), the predictor and
                          the probe's classifiers in one file
    diving48-tiny-64.pt   random weights, hidden 64 (one head of 64 inferred), patch 4, MLP
                          ratio 279/64, 3 pooler blocks, 3 classes, encoder and probe in one file:
                          for the inferred config (crop 64 and 32 frames from the name)

tests/attacks/checkpoints/vjepa2_*.pt (their lines in expected.txt, README.md's table): hostile
or broken files of the same layout; none runs anything (a payload would touch the canary of
tools/make_checkpoint_attacks.py).

    /work/venv/bin/python tools/make_vjepa2_meta_checkpoint.py
"""
import collections
import os
import sys

import torch
from safetensors.torch import load_file

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
FIX = os.path.join(ROOT, "tests", "fixtures")
OUT = os.path.join(FIX, "vjepa2_meta")
ATTACKS = os.path.join(ROOT, "tests", "attacks", "checkpoints")

sys.path.insert(0, HERE)


def block_sd(sd, hf, L, b):
    """One transformer block, transformers' layer L -> Meta's block b (q, k, v fused as qkv)."""
    for k in ("weight", "bias"):
        sd[b + f"norm1.{k}"] = hf[L + f"norm1.{k}"]
        if L + f"attention.query.{k}" in hf:
            sd[b + f"attn.qkv.{k}"] = torch.cat([hf[L + f"attention.{n}.{k}"]
                                                for n in ("query", "key", "value")])
        sd[b + f"attn.proj.{k}"] = hf[L + f"attention.proj.{k}"]
        sd[b + f"norm2.{k}"] = hf[L + f"norm2.{k}"]
        sd[b + f"mlp.fc1.{k}"] = hf[L + f"mlp.fc1.{k}"]
        sd[b + f"mlp.fc2.{k}"] = hf[L + f"mlp.fc2.{k}"]


def encoder_sd(hf, n_layers, prefix="module.backbone.", pos_embed=True):
    """Meta's VisionTransformer state dict from transformers' vjepa2.encoder.*"""
    e = "vjepa2.encoder."
    sd = collections.OrderedDict()
    for k in ("weight", "bias"):
        sd[f"{prefix}patch_embed.proj.{k}"] = hf[f"{e}embeddings.patch_embeddings.proj.{k}"]
    for i in range(n_layers):
        block_sd(sd, hf, f"{e}layer.{i}.", f"{prefix}blocks.{i}.")
    for k in ("weight", "bias"):
        sd[f"{prefix}norm.{k}"] = hf[f"{e}layernorm.{k}"]
    if pos_embed:  # a RoPE encoder's unused table (Meta's strict=False loads skip it)
        D = hf[f"{e}layernorm.weight"].shape[0]
        sd[f"{prefix}pos_embed"] = torch.zeros(1, 8, D)
    return sd


def predictor_sd(hf, n_layers, prefix="module.backbone."):
    p = "vjepa2.predictor."
    sd = collections.OrderedDict()
    for k in ("weight", "bias"):
        sd[f"{prefix}predictor_embed.{k}"] = hf[f"{p}embeddings.predictor_embeddings.{k}"]
    for i, tok in enumerate(hf[f"{p}embeddings.mask_tokens"]):  # (n, 1, 1, P) -> n x (1, 1, P)
        sd[f"{prefix}mask_tokens.{i}"] = tok.clone()
    sd[f"{prefix}predictor_pos_embed"] = torch.zeros(1, 8, hf[f"{p}layernorm.weight"].shape[0])
    for i in range(n_layers):
        block_sd(sd, hf, f"{p}layer.{i}.", f"{prefix}predictor_blocks.{i}.")
    for k in ("weight", "bias"):
        sd[f"{prefix}predictor_norm.{k}"] = hf[f"{p}layernorm.{k}"]
        sd[f"{prefix}predictor_proj.{k}"] = hf[f"{p}proj.{k}"]
    return sd


def probe_sd(hf, n_pool, prefix="module."):
    """AttentiveClassifier (depth = n_pool + 1) from transformers' pooler.* and classifier.*"""
    sd = collections.OrderedDict()
    sd[f"{prefix}pooler.query_tokens"] = hf["pooler.query_tokens"]
    for i in range(n_pool):
        L = f"pooler.self_attention_layers.{i}."
        b = f"{prefix}pooler.blocks.{i}."
        for k in ("weight", "bias"):
            sd[b + f"norm1.{k}"] = hf[L + f"layer_norm1.{k}"]
            sd[b + f"attn.qkv.{k}"] = torch.cat([hf[L + f"self_attn.{n}_proj.{k}"] for n in "qkv"])
            sd[b + f"attn.proj.{k}"] = hf[L + f"self_attn.out_proj.{k}"]
            sd[b + f"norm2.{k}"] = hf[L + f"layer_norm2.{k}"]
            sd[b + f"mlp.fc1.{k}"] = hf[L + f"mlp.fc1.{k}"]
            sd[b + f"mlp.fc2.{k}"] = hf[L + f"mlp.fc2.{k}"]
    C = "pooler.cross_attention_layer."
    b = f"{prefix}pooler.cross_attention_block."
    for k in ("weight", "bias"):
        sd[b + f"norm1.{k}"] = hf[C + f"layer_norm1.{k}"]
        sd[b + f"xattn.q.{k}"] = hf[C + f"cross_attn.q_proj.{k}"]
        sd[b + f"xattn.kv.{k}"] = torch.cat([hf[C + f"cross_attn.k_proj.{k}"],
                                             hf[C + f"cross_attn.v_proj.{k}"]])
        sd[b + f"norm2.{k}"] = hf[C + f"layer_norm2.{k}"]
        sd[b + f"mlp.fc1.{k}"] = hf[C + f"mlp.fc1.{k}"]
        sd[b + f"mlp.fc2.{k}"] = hf[C + f"mlp.fc2.{k}"]
    for k in ("weight", "bias"):
        sd[f"{prefix}linear.{k}"] = hf[f"classifier.{k}"]
    return sd


def plus_one(sd):
    return collections.OrderedDict((k, v + 1) for k, v in sd.items())


def count(hf, fmt):
    n = 0
    while fmt.format(n) in hf:
        n += 1
    return n


def save(obj, path, legacy=False):
    # contiguous copies: each tensor its own storage, as torch.save of a state dict writes them
    torch.save(obj, path, _use_new_zipfile_serialization=not legacy)


def tiny_random(seed=3810, D=64, layers=2, patch=4, hidden_mlp=279, n_pool=3, classes=3):
    """A random transformers-named V-JEPA 2 classifier (no predictor) for the inferred config."""
    g = torch.Generator().manual_seed(seed)
    r = lambda *s: torch.randn(*s, generator=g) * 0.02  # noqa: E731
    hf = {"vjepa2.encoder.embeddings.patch_embeddings.proj.weight": r(D, 3, 2, patch, patch),
          "vjepa2.encoder.embeddings.patch_embeddings.proj.bias": r(D),
          "vjepa2.encoder.layernorm.weight": 1 + r(D), "vjepa2.encoder.layernorm.bias": r(D),
          "pooler.query_tokens": r(1, 1, D), "classifier.weight": r(classes, D),
          "classifier.bias": r(classes)}
    for i in range(layers):
        L = f"vjepa2.encoder.layer.{i}."
        for n in ("query", "key", "value", "proj"):
            hf[L + f"attention.{n}.weight"], hf[L + f"attention.{n}.bias"] = r(D, D), r(D)
        for n in ("norm1", "norm2"):
            hf[L + f"{n}.weight"], hf[L + f"{n}.bias"] = 1 + r(D), r(D)
        hf[L + "mlp.fc1.weight"], hf[L + "mlp.fc1.bias"] = r(hidden_mlp, D), r(hidden_mlp)
        hf[L + "mlp.fc2.weight"], hf[L + "mlp.fc2.bias"] = r(D, hidden_mlp), r(D)
    blocks = [f"pooler.self_attention_layers.{i}." for i in range(n_pool)]
    for L in blocks + ["pooler.cross_attention_layer."]:
        att = "self_attn." if "self" in L else "cross_attn."
        for n in ("q", "k", "v") + (("out",) if "self" in L else ()):
            hf[L + f"{att}{n}_proj.weight"], hf[L + f"{att}{n}_proj.bias"] = r(D, D), r(D)
        for n in ("layer_norm1", "layer_norm2"):
            hf[L + f"{n}.weight"], hf[L + f"{n}.bias"] = 1 + r(D), r(D)
        hf[L + "mlp.fc1.weight"], hf[L + "mlp.fc1.bias"] = r(4 * D, D), r(4 * D)
        hf[L + "mlp.fc2.weight"], hf[L + "mlp.fc2.bias"] = r(D, 4 * D), r(D)
    return hf


def fixtures():
    os.makedirs(OUT, exist_ok=True)
    hf = load_file(os.path.join(FIX, "vjepa2_hd20", "model.safetensors"))
    nl = count(hf, "vjepa2.encoder.layer.{}.norm1.weight")
    npl = count(hf, "vjepa2.predictor.layer.{}.norm1.weight")
    npool = count(hf, "pooler.self_attention_layers.{}.layer_norm1.weight")
    target = encoder_sd(hf, nl)
    online = plus_one(target)
    pred = predictor_sd(hf, npl)
    ckpt = {"encoder": online, "predictor": pred, "target_encoder": target,
            "opt": {"state": {}, "param_groups": [{"lr": 1e-4, "params": [0, 1]}]},
            "scaler": None, "epoch": 10, "loss": 0.5, "batch_size": 2, "world_size": 1,
            "lr": 1e-4}
    save(ckpt, os.path.join(OUT, "vjepa2-hd20-32.pt"))
    save(ckpt, os.path.join(OUT, "vjepa2-hd20-32_legacy.pt"), legacy=True)
    probe = probe_sd(hf, npool)
    save({"classifiers": [probe, plus_one(probe)],
          "opt": [{"state": {}, "param_groups": [{"lr": 1e-3, "params": [0]}]}] * 2,
          "scaler": [None, None], "epoch": 20, "batch_size": 2, "world_size": 1},
         os.path.join(OUT, "ssv2-hd20-4x2x3.pt"))
    save({"encoder": encoder_sd(hf, nl, pos_embed=False), "predictor": pred,
          "classifiers": [probe], "epoch": 1},
         os.path.join(OUT, "combined-hd20-32.pt"))
    tiny = tiny_random()
    save({"target_encoder": encoder_sd(tiny, 2, pos_embed=False),
          "classifiers": [probe_sd(tiny, 3)]},
         os.path.join(OUT, "diving48-tiny-64.pt"))
    print(f"wrote {OUT}: {sorted(os.listdir(OUT))}")
    return hf, target, pred, probe


def attacks(hf, target, pred, probe):
    """Hostile or broken V-JEPA 2 files: each must fail with its message, running nothing."""
    from make_checkpoint_attacks import CANARY, Call, dumps, zip_file
    target = encoder_sd(hf, 1, pos_embed=False)  # one block is enough, and keeps them small
    cases = []

    def add(name, obj, msg, what):
        save(obj, os.path.join(ATTACKS, name))
        cases.append((name, msg, what))

    add("vjepa2_probe_only.pt", {"classifiers": [probe]}, "without an encoder",
        "a V-JEPA 2 probe (classifiers) given as the model, without its encoder")
    bad = collections.OrderedDict(target)
    bad["module.backbone.blocks.0.attn.qkv.weight"] = torch.zeros(121, 40)
    add("vjepa2_qkv_not_three.pt", {"target_encoder": bad}, "cannot be split in three",
        "a fused qkv whose rows are not a multiple of 3")
    badp = collections.OrderedDict(probe)
    badp["module.pooler.cross_attention_block.xattn.kv.weight"] = torch.zeros(81, 40)
    add("vjepa2_kv_odd.pt", {"target_encoder": target, "classifiers": [badp]},
        "cannot be split in two", "the probe's fused kv with an odd number of rows")
    gap = collections.OrderedDict((k, v) for k, v in pred.items() if not k.endswith("mask_tokens.1"))
    gap["module.backbone.mask_tokens.5"] = torch.zeros(1, 1, 16)
    add("vjepa2_mask_gap.pt", {"target_encoder": target, "predictor": gap},
        "mask_tokens.1 is missing", "predictor mask tokens 0, 5: the ones between missing")
    shp = collections.OrderedDict(pred)
    shp["module.backbone.mask_tokens.1"] = torch.zeros(1, 1, 17)
    add("vjepa2_mask_shape.pt", {"target_encoder": target, "predictor": shp},
        "is not (1, 1, 16)", "mask tokens of two widths")
    dup = collections.OrderedDict(target)
    dup["backbone.norm.weight"] = target["module.backbone.norm.weight"]
    add("vjepa2_duplicate_name.pt", {"target_encoder": dup}, "two tensors become",
        "the same tensor under module.backbone. and backbone.: one name twice after stripping")
    two = collections.OrderedDict(target)
    two["backbone.patch_embed.proj.weight"] = target["module.backbone.patch_embed.proj.weight"]
    add("vjepa2_two_patch_embeds.pt", {"target_encoder": two}, "two patch embeddings",
        "two patch embeddings under one encoder")
    flat = collections.OrderedDict(target)
    flat["module.backbone.patch_embed.proj.weight"] = torch.zeros(40, 3, 8, 8)
    add("vjepa2_image_encoder.pt", {"target_encoder": flat}, "not a 3D (tubelet) patch",
        "a 2D (image) patch embedding")
    # a payload inside the target encoder's dict: the unpickler refuses the global
    pkl = dumps({"target_encoder": {"x": Call(os.system, f"touch {CANARY}")}})
    with open(os.path.join(ATTACKS, "vjepa2_os_system.pt"), "wb") as f:
        f.write(zip_file(pkl, {}))
    cases.append(("vjepa2_os_system.pt", "global 'posix.system' is not allowed",
                  "os.system inside the target_encoder dict"))
    add("vjepa2_no_encoder.pt", {"encoder_ema": target}, "no 'target_encoder'",
        "state dicts side by side, none named target_encoder or encoder")

    exp = os.path.join(ATTACKS, "expected.txt")
    lines = [ln for ln in open(exp).read().splitlines() if not ln.startswith("vjepa2_")]
    lines += [f"{n}|{m}" for n, m, _ in cases]
    with open(exp, "w") as f:
        f.write("\n".join(lines) + "\n")
    readme = os.path.join(ATTACKS, "README.md")
    text = [ln for ln in open(readme).read().splitlines() if not ln.startswith("| `vjepa2_")]
    last = max(i for i, ln in enumerate(text) if ln.startswith("| `"))
    rows = [f"| `{n}` | {w} (tools/make_vjepa2_meta_checkpoint.py) | {m} |" for n, m, w in cases]
    text[last + 1:last + 1] = rows
    with open(readme, "w") as f:
        f.write("\n".join(text) + "\n")
    print(f"wrote {len(cases)} files into {ATTACKS}")


if __name__ == "__main__":
    attacks(*fixtures())
