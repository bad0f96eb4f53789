#!/usr/bin/env python3
"""Generate the small random-weight Hugging Face fixtures used by the C test suite.

Usage:
    /work/venv/bin/python tools/make_fixtures.py [--out tests/fixtures] [--only NAME ...] [--no-verify]

For every fixture this (re)writes tests/fixtures/<name>/ with

    config.json, model.safetensors     as XForVideoClassification.save_pretrained() writes them
                                       (or model.safetensors.index.json + shards for the sharded one)
    input.npy                          float32 pixel_values, HF layout (B, T, C, H, W), N(0, 1)
    logits.npy                         float32 XForVideoClassification(pixel_values).logits
    hidden.npy                         float32 last_hidden_state of the base model (model.<prefix>)
    hidden_layer1.npy                  float32 hidden_states[1] of the base model (output of block 1)
    meta.json                          {"family", "class", "note", ...}

and tests/fixtures/list.txt (one fixture name per line).

Every parameter is randomised (HF's own init leaves LayerNorms at 1/0 and biases at 0, which would
hide bugs): LayerNorm weight = 1 + 0.2*randn, every bias = 0.1*randn, Linear/Conv weight =
randn / sqrt(fan_in), cls tokens / position / time embeddings = 0.5*randn.  The expected outputs
are computed in float64 (eval mode; eager attention, except ViViT whose eager path does the softmax
in float32, so SDPA there) from the weights *as stored*, reloaded with from_pretrained (so for the
F16 / BF16 fixtures from the rounded half-precision values), and saved as float32.

Everything is seeded, so re-running produces byte-identical files (for a given torch/transformers).
"""

import argparse
import json
import math
import os
import shutil
import sys

import numpy as np
import torch
from torch import nn

import transformers
from transformers import (
    TimesformerConfig,
    TimesformerForVideoClassification,
    VideoMAEConfig,
    VideoMAEForVideoClassification,
    VivitConfig,
    VivitForVideoClassification,
)
from transformers.utils import logging as hf_logging

hf_logging.set_verbosity_error()
try:  # the "Writing model shards" progress bar
    hf_logging.disable_progress_bar()
except AttributeError:
    pass

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

FAMILIES = {
    "videomae": (VideoMAEConfig, VideoMAEForVideoClassification, "videomae"),
    "timesformer": (TimesformerConfig, TimesformerForVideoClassification, "timesformer"),
    "vivit": (VivitConfig, VivitForVideoClassification, "vivit"),
}

# ----------------------------------------------------------------------------------------------
# fixture definitions
# ----------------------------------------------------------------------------------------------

_VM = dict(image_size=32, patch_size=8, num_frames=4, tubelet_size=2, hidden_size=48,
           num_attention_heads=3, num_hidden_layers=2, intermediate_size=96, num_labels=5)
_TS = dict(image_size=32, patch_size=8, num_frames=3, hidden_size=48, num_attention_heads=4,
           num_hidden_layers=2, intermediate_size=96, num_labels=6)
_VV = dict(image_size=32, num_frames=6, tubelet_size=[2, 8, 8], hidden_size=48, num_attention_heads=3,
           num_hidden_layers=2, intermediate_size=96, num_labels=4)

def merge(*dicts, **kw):
    out = {}
    for d in dicts:
        out.update(d)
    out.update(kw)
    return out


_SMALL = dict(image_size=16, hidden_size=24, num_attention_heads=2, num_hidden_layers=1, intermediate_size=48)

FIXTURES = [
    dict(name="videomae_mean", family="videomae", seed=1001, batch=2,
         config=dict(_VM, qkv_bias=True, use_mean_pooling=True, layer_norm_eps=1e-6),
         note="VideoMAE, mean pooling over all tokens + fc_norm (nn.LayerNorm default eps 1e-5, NOT the "
              "config layer_norm_eps 1e-6) + classifier; q/v bias (stored as q_bias/v_bias, key has no bias); "
              "fixed sinusoid position table (not stored in the file); tubelet 2, grid 2x4x4 = 32 tokens; "
              "hidden_act gelu (erf)."),
    dict(name="videomae_cls_noqkvbias", family="videomae", seed=1002, batch=3,
         config=dict(_VM, image_size=30, num_frames=7, tubelet_size=3, qkv_bias=False,
                     use_mean_pooling=False, layer_norm_eps=1e-6),
         note="VideoMAE, use_mean_pooling false: final videomae.layernorm (config eps) is applied to the "
              "sequence and the classifier reads token 0 (a patch token, there is no CLS token); no q/v "
              "bias tensors at all; 7 frames with tubelet 3 -> 2 temporal tokens (last frame ignored); "
              "30x30 image with patch 8 -> 3x3 grid (last 6 pixel rows/cols ignored); B = 3."),
    dict(name="timesformer_divided", family="timesformer", seed=2001, batch=2,
         config=dict(_TS, attention_type="divided_space_time"),
         note="TimeSformer divided space-time: per layer temporal attention (over frames, per patch, no CLS) "
              "-> temporal_dense -> residual, then spatial attention per frame with the CLS token copied "
              "into every frame and its outputs averaged over frames; token order after embeddings is "
              "[CLS, (patch, frame) with frame fastest]; time embeddings added per frame; 3 frames, 4x4 "
              "grid = 1 + 48 tokens; CLS -> final layernorm -> classifier."),
    dict(name="timesformer_space_only", family="timesformer", seed=2002, batch=2,
         config=dict(_TS, attention_type="space_only"),
         note="TimeSformer space_only: every frame is an independent image (batch B*T, own CLS token each, "
              "no time embeddings, no temporal params); logits are (B*T, num_labels) and hidden is "
              "(B*T, 1+16, D), exactly as HF returns them."),
    dict(name="timesformer_joint", family="timesformer", seed=2003, batch=2,
         config=dict(_TS, attention_type="joint_space_time", hidden_act="gelu_new"),
         note="TimeSformer joint_space_time: one attention over [CLS, (patch, frame) frame fastest] with "
              "time embeddings; no temporal params; hidden_act gelu_new (tanh approximation)."),
    dict(name="vivit_m1", family="vivit", seed=3001, batch=2,
         config=dict(_VV),
         note="ViViT model 1 (spatio-temporal attention): Conv3d tubelet [2,8,8] -> grid 3x4x4 = 48 tokens "
              "(t, h, w order, w fastest) + CLS prepended, learned position embeddings; separate "
              "query/key/value with bias; hidden_act gelu_fast (tanh approx, constant 0.7978845608); "
              "final layernorm eps 1e-6; CLS -> classifier."),
    dict(name="vivit_odd", family="vivit", seed=3002, batch=1,
         config=dict(_VV, image_size=30, num_frames=7, tubelet_size=[3, 8, 6], hidden_act="gelu",
                     qkv_bias=False),
         note="ViViT with a non-cubic tubelet [3,8,6] that does not divide the input: 7 frames -> 2, "
              "30 rows -> 3, 30 cols -> 5 (grid 2x3x5 = 30 tokens + CLS; leftover frame/pixels ignored); "
              "no q/k/v bias tensors (the attention output dense keeps its bias); hidden_act gelu (erf); B = 1."),
    dict(name="videomae_f16", family="videomae", seed=1003, batch=2, dtype="float16",
         config=dict(_VM, qkv_bias=True, use_mean_pooling=True, layer_norm_eps=1e-6),
         note="Like videomae_mean (other seed) but every tensor stored as F16 (config dtype float16); "
              "expected outputs computed in float64 from the stored f16 values."),
    dict(name="timesformer_bf16", family="timesformer", seed=2004, batch=2, dtype="bfloat16",
         config=dict(_TS, attention_type="divided_space_time"),
         note="Like timesformer_divided (other seed) but every tensor stored as BF16 (config dtype "
              "bfloat16); expected outputs computed in float64 from the stored bf16 values."),
    dict(name="vivit_sharded", family="vivit", seed=3003, batch=1, shard="120KB",
         config=dict(_VV, num_hidden_layers=3),
         note="Like vivit_m1 (other seed, 3 layers) saved as several model-0000k-of-0000n.safetensors "
              "shards plus model.safetensors.index.json (weight_map tensor name -> shard file); no "
              "model.safetensors; B = 1."),
    # ---- extra coverage (smaller: hidden 24, 2 heads, 16x16 images, 1 layer, B = 1) ------------
    dict(name="videomae_legacy_config", family="videomae", seed=1004, batch=1, legacy_config=True,
         config=merge(_VM, _SMALL, qkv_bias=False, use_mean_pooling=True, hidden_act="quick_gelu"),
         note="config.json rewritten the way transformers 4.x wrote it and the published MCG-NJU checkpoints "
              "have it: key 'qkv_bias' (false here) instead of 5.x's 'qv_bias', 'torch_dtype' instead of "
              "'dtype'; default layer_norm_eps 1e-12 (as in MCG-NJU/videomae-*); hidden_act quick_gelu "
              "(x*sigmoid(1.702x)); hidden 24, 2 heads, 16x16 images, 1 layer, B = 1. transformers 5.x "
              "loads it identically."),
    dict(name="timesformer_relu_odd", family="timesformer", seed=2005, batch=1,
         config=merge(_TS, _SMALL, image_size=22, num_frames=2, qkv_bias=False, hidden_act="relu",
                     attention_type="divided_space_time"),
         note="TimeSformer divided space-time with image 22 / patch 8 (2x2 grid, leftover pixels ignored), "
              "2 frames, no qkv bias, hidden_act relu, hidden 24, 2 heads, 1 layer, B = 1."),
    dict(name="vivit_newnames", family="vivit", seed=3004, batch=1, original_format=False,
         config=merge(_VV, _SMALL, hidden_act="gelu_pytorch_tanh"),
         note="ViViT saved by transformers 5.x with save_original_format=False, i.e. with the NEW tensor "
              "names (vivit.layers.N.attention.{q,k,v,o}_proj, vivit.layers.N.mlp.fc1/fc2) instead of the "
              "legacy vivit.encoder.layer.N.attention.attention.query... names that save_pretrained writes "
              "by default and that the published checkpoints use; hidden_act gelu_pytorch_tanh; hidden 24, "
              "2 heads, 16x16 images, 1 layer, B = 1."),
    dict(name="vivit_m1_frames", family="vivit", seed=3005, batch=2,
         config=merge(_VV, _SMALL, image_size=12, num_frames=3, tubelet_size=[1, 5, 3], hidden_size=12,
                      intermediate_size=20, num_hidden_layers=2),
         note="ViViT Model 1 with uniform frame sampling: tubelet [1,5,3] = a 2D patch per frame (Conv3d "
              "with a temporal kernel of 1), 3 frames of 12x12 -> grid 3x2x4 = 24 tokens (2 leftover "
              "pixel rows) + CLS; hidden 12, 2 heads, 2 layers, B = 2."),
]

# ----------------------------------------------------------------------------------------------
# helpers
# ----------------------------------------------------------------------------------------------


def build_model(family, cfg_kwargs):
    cfg_cls, model_cls, _ = FAMILIES[family]
    cfg = cfg_cls(**cfg_kwargs)
    try:
        model = model_cls._from_config(cfg, attn_implementation="eager")
    except (TypeError, ValueError):
        model = model_cls(cfg)
    return model.eval()


@torch.no_grad()
def randomize_(model, gen):
    """Overwrite every parameter with non-trivial random values (deterministic given gen)."""
    owner = {}
    for mname, mod in model.named_modules():
        for pname, _ in mod.named_parameters(recurse=False):
            owner[f"{mname}.{pname}" if mname else pname] = mod
    for name, p in sorted(model.named_parameters(), key=lambda kv: kv[0]):
        mod = owner[name]
        leaf = name.rsplit(".", 1)[-1]
        r = torch.randn(p.shape, generator=gen, dtype=torch.float64)
        if isinstance(mod, nn.LayerNorm):
            v = 1.0 + 0.2 * r if leaf == "weight" else 0.1 * r
        elif leaf == "bias" or leaf.endswith("_bias"):
            v = 0.1 * r
        elif isinstance(mod, (nn.Linear, nn.Conv2d, nn.Conv3d)) and leaf == "weight":
            fan_in = p[0].numel()
            v = r / math.sqrt(fan_in)
        else:  # cls_token, position_embeddings, time_embeddings, ...
            v = 0.5 * r
        p.copy_(v.to(p.dtype))


def reference_attn(family):
    return "sdpa" if family == "vivit" else "eager"


@torch.no_grad()
def forward(model, family, x):
    _, _, prefix = FAMILIES[family]
    logits = model(pixel_values=x).logits
    out = getattr(model, prefix)(x, output_hidden_states=True)
    return logits, out.last_hidden_state, out.hidden_states[1]


def save_npy(path, arr):
    arr = np.ascontiguousarray(np.asarray(arr, dtype=np.float32))
    np.save(path, arr, allow_pickle=False)


def legacyfy_config(path):
    """Rewrite config.json as transformers 4.x / the published checkpoints would have it."""
    with open(path) as f:
        cfg = json.load(f)
    out = {}
    for k, v in cfg.items():
        if k == "qv_bias":
            out["qkv_bias"] = v
        elif k == "dtype":
            out["torch_dtype"] = v
        elif k == "transformers_version":
            out[k] = "4.46.3"
        else:
            out[k] = v
    with open(path, "w") as f:
        json.dump(dict(sorted(out.items())), f, indent=2, sort_keys=True)
        f.write("\n")


def weight_files(d):
    return sorted(fn for fn in os.listdir(d) if fn.endswith(".safetensors"))


def make_fixture(spec, out_root):
    name, family = spec["name"], spec["family"]
    _, model_cls, prefix = FAMILIES[family]
    d = os.path.join(out_root, name)
    if os.path.isdir(d):
        shutil.rmtree(d)
    os.makedirs(d)

    torch.manual_seed(spec["seed"])
    gen = torch.Generator().manual_seed(spec["seed"])
    model = build_model(family, spec["config"])
    randomize_(model, gen)

    cfg = model.config
    B = spec["batch"]
    img = cfg.image_size if isinstance(cfg.image_size, (list, tuple)) else (cfg.image_size, cfg.image_size)
    x = torch.randn((B, cfg.num_frames, cfg.num_channels, img[0], img[1]), generator=gen, dtype=torch.float32)

    dtype = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}[spec.get("dtype", "float32")]
    if dtype != torch.float32:
        model = model.to(dtype)

    save_kw = dict(safe_serialization=True)
    if "shard" in spec:
        save_kw["max_shard_size"] = spec["shard"]
    if spec.get("original_format") is False:
        save_kw["save_original_format"] = False
    model.save_pretrained(d, **save_kw)
    if spec.get("legacy_config"):
        legacyfy_config(os.path.join(d, "config.json"))
    for fn in os.listdir(d):  # save_pretrained creates the weight files 0600
        os.chmod(os.path.join(d, fn), 0o644)

    files = weight_files(d)
    if "shard" in spec:
        assert os.path.exists(os.path.join(d, "model.safetensors.index.json")), "sharded fixture has no index"
        assert len(files) >= 2 and "model.safetensors" not in files, f"not really sharded: {files}"
    else:
        assert files == ["model.safetensors"], files

    # expected outputs: float64, from the weights as stored on disk.  ViViT's eager attention does its
    # softmax in float32 even for a float64 model (~2e-7 abs error), so its reference uses SDPA, which
    # on CPU in float64 matches the (float64) eager path of VideoMAE to ~1e-15.
    ref_attn = reference_attn(family)
    ref = model_cls.from_pretrained(d, dtype=torch.float64, attn_implementation=ref_attn).eval()
    # the on-disk weights must be exactly the in-memory (possibly half-precision) ones
    mem = model.state_dict()
    ref_sd = ref.state_dict()
    assert set(ref_sd) == set(mem), f"{name}: reloaded keys differ: {set(ref_sd) ^ set(mem)}"
    for k, v in ref_sd.items():
        assert torch.equal(v, mem[k].to(torch.float64)), f"{name}: reloaded tensor {k} differs"
    logits64, hidden64, layer1_64 = forward(ref, family, x.to(torch.float64))

    save_npy(os.path.join(d, "input.npy"), x.numpy())
    save_npy(os.path.join(d, "logits.npy"), logits64.numpy())
    save_npy(os.path.join(d, "hidden.npy"), hidden64.numpy())
    save_npy(os.path.join(d, "hidden_layer1.npy"), layer1_64.numpy())

    meta = dict(
        family=family,
        **{"class": model_cls.__name__},
        note=spec["note"],
        seed=spec["seed"],
        weights_dtype=spec.get("dtype", "float32"),
        input_shape=list(x.shape),
        logits_shape=list(logits64.shape),
        hidden_shape=list(hidden64.shape),
        weight_files=files,
        expected=f"float64 forward ({ref_attn} attention) of the stored weights, saved as float32",
        generated_with=dict(torch=torch.__version__, transformers=transformers.__version__),
    )
    with open(os.path.join(d, "meta.json"), "w") as f:
        json.dump(meta, f, indent=2)
        f.write("\n")
    return d


def softmax_stats(model, family, x):
    """Max attention probability per (layer, head, query) averaged -> detects one-hot saturation."""
    from transformers.models.timesformer import modeling_timesformer as mt

    maxes = []
    if family == "timesformer":  # no output_attentions plumbing through the layer API: patch it
        orig = mt.TimesformerSelfAttention.forward

        def fwd(self, hidden_states, output_attentions=False):
            out = orig(self, hidden_states, output_attentions=True)
            maxes.append(out[1].amax(-1).mean().item())
            return out if output_attentions else (out[0],)

        mt.TimesformerSelfAttention.forward = fwd
        try:
            with torch.no_grad():
                model(pixel_values=x)
        finally:
            mt.TimesformerSelfAttention.forward = orig
    else:
        with torch.no_grad():
            out = model(pixel_values=x, output_attentions=True)
        for a in out.attentions:
            maxes.append(a.amax(-1).mean().item())
    return maxes



# ----------------------------------------------------------------------------------------------
# independent numpy float64 reference (reads only the fixture files; documents the HF semantics
# the C engine has to reproduce and cross-checks the HF-computed expectations)
# ----------------------------------------------------------------------------------------------

_verf = np.vectorize(math.erf)
ACT = {
 "gelu": lambda x: 0.5*x*(1+_verf(x/math.sqrt(2))),
 "gelu_fast": lambda x: 0.5*x*(1+np.tanh(x*0.7978845608*(1+0.044715*x*x))),
 "gelu_new": lambda x: 0.5*x*(1+np.tanh(math.sqrt(2/math.pi)*(x+0.044715*x**3))),
 "gelu_pytorch_tanh": lambda x: 0.5*x*(1+np.tanh(math.sqrt(2/math.pi)*(x+0.044715*x**3))),
 "quick_gelu": lambda x: x/(1+np.exp(-1.702*x)),
 "relu": lambda x: np.maximum(x, 0),
}
def ln(x, w, b, eps):
    m = x.mean(-1, keepdims=True); v = ((x-m)**2).mean(-1, keepdims=True)
    return (x-m)/np.sqrt(v+eps)*w+b
def lin(x, W, p, bias=True):
    y = x @ W[p+".weight"].T
    if p+".bias" in W: y = y + W[p+".bias"]
    return y
def mha(q, k, v, H):
    *bs, N, D = q.shape; hd = D//H
    q = q.reshape(*bs, N, H, hd).swapaxes(-2, -3); k = k.reshape(*bs, N, H, hd).swapaxes(-2, -3); v = v.reshape(*bs, N, H, hd).swapaxes(-2, -3)
    s = q @ k.swapaxes(-1, -2) / math.sqrt(hd); s = s - s.max(-1, keepdims=True); p = np.exp(s); p /= p.sum(-1, keepdims=True)
    return (p @ v).swapaxes(-2, -3).reshape(*bs, N, D)
def patchify(x, kt, kh, kw):
    # x (B,T,C,H,W) -> (B, nt*nh*nw, C*kt*kh*kw) in (t,h,w) token order and (c,t,h,w) feature order (Conv3d)
    B, T, C, Hh, Ww = x.shape; nt, nh, nw = T//kt, Hh//kh, Ww//kw
    x = x[:, :nt*kt, :, :nh*kh, :nw*kw].reshape(B, nt, kt, C, nh, kh, nw, kw)
    return x.transpose(0, 1, 4, 6, 3, 2, 5, 7).reshape(B, nt*nh*nw, C*kt*kh*kw), (nt, nh, nw)
def sinusoid(n, d):
    pos = np.arange(n)[:, None]; j = np.arange(d)[None, :]
    t = pos / np.power(10000, 2*(j//2)/d); t[:, 0::2] = np.sin(t[:, 0::2]); t[:, 1::2] = np.cos(t[:, 1::2])
    return t.astype(np.float32).astype(np.float64)   # HF: torch.FloatTensor(table)

def videomae(cfg, W, x):
    D, H, eps, act = cfg["hidden_size"], cfg["num_attention_heads"], cfg["layer_norm_eps"], ACT[cfg["hidden_act"]]
    p = "videomae."
    pw = W[p+"embeddings.patch_embeddings.projection.weight"]
    tok, (nt, nh, nw) = patchify(x, pw.shape[2], pw.shape[3], pw.shape[4])
    h = tok @ pw.reshape(D, -1).T + W[p+"embeddings.patch_embeddings.projection.bias"]
    h = h + sinusoid(nt*nh*nw, D)
    for i in range(cfg["num_hidden_layers"]):
        L = f"{p}encoder.layer.{i}."
        y = ln(h, W[L+"layernorm_before.weight"], W[L+"layernorm_before.bias"], eps)
        q = y @ W[L+"attention.attention.query.weight"].T + W.get(L+"attention.attention.q_bias", 0)
        k = y @ W[L+"attention.attention.key.weight"].T
        v = y @ W[L+"attention.attention.value.weight"].T + W.get(L+"attention.attention.v_bias", 0)
        h = h + lin(mha(q, k, v, H), W, L+"attention.output.dense")
        y = ln(h, W[L+"layernorm_after.weight"], W[L+"layernorm_after.bias"], eps)
        h = h + lin(act(lin(y, W, L+"intermediate.dense")), W, L+"output.dense")
    if "fc_norm.weight" in W:
        hidden = h; pooled = ln(h.mean(1), W["fc_norm.weight"], W["fc_norm.bias"], 1e-5)
    else:
        hidden = ln(h, W[p+"layernorm.weight"], W[p+"layernorm.bias"], eps); pooled = hidden[:, 0]
    return lin(pooled, W, "classifier"), hidden

def vivit(cfg, W, x):
    D, H, eps, act = cfg["hidden_size"], cfg["num_attention_heads"], cfg["layer_norm_eps"], ACT[cfg["hidden_act"]]
    p = "vivit."; new = any(k.startswith("vivit.layers.") for k in W)
    pw = W[p+"embeddings.patch_embeddings.projection.weight"]
    tok, _ = patchify(x, *pw.shape[2:])
    h = tok @ pw.reshape(D, -1).T + W[p+"embeddings.patch_embeddings.projection.bias"]
    B = x.shape[0]
    h = np.concatenate([np.broadcast_to(W[p+"embeddings.cls_token"], (B, 1, D)), h], 1) + W[p+"embeddings.position_embeddings"]
    for i in range(cfg["num_hidden_layers"]):
        if new:
            L = f"{p}layers.{i}."; nq, nk, nv, no, f1, f2 = "attention.q_proj", "attention.k_proj", "attention.v_proj", "attention.o_proj", "mlp.fc1", "mlp.fc2"
        else:
            L = f"{p}encoder.layer.{i}."; nq, nk, nv, no, f1, f2 = "attention.attention.query", "attention.attention.key", "attention.attention.value", "attention.output.dense", "intermediate.dense", "output.dense"
        y = ln(h, W[L+"layernorm_before.weight"], W[L+"layernorm_before.bias"], eps)
        h = h + lin(mha(lin(y, W, L+nq), lin(y, W, L+nk), lin(y, W, L+nv), H), W, L+no)
        y = ln(h, W[L+"layernorm_after.weight"], W[L+"layernorm_after.bias"], eps)
        h = h + lin(act(lin(y, W, L+f1)), W, L+f2)
    hidden = ln(h, W[p+"layernorm.weight"], W[p+"layernorm.bias"], eps)
    return lin(hidden[:, 0], W, "classifier"), hidden

def timesformer(cfg, W, x):
    D, H, eps, act = cfg["hidden_size"], cfg["num_attention_heads"], cfg["layer_norm_eps"], ACT[cfg["hidden_act"]]
    typ = cfg["attention_type"]; p = "timesformer."
    B, T = x.shape[:2]
    pw = W[p+"embeddings.patch_embeddings.projection.weight"]; ps = pw.shape[-1]
    tok, (_, nh, nw) = patchify(x, 1, ps, ps)            # (B, T*P, ...) order (t, h, w)
    P = nh*nw
    e = (tok @ pw.reshape(D, -1).T + W[p+"embeddings.patch_embeddings.projection.bias"]).reshape(B*T, P, D)
    cls = W[p+"embeddings.cls_token"].reshape(1, 1, D)
    e = np.concatenate([np.broadcast_to(cls, (B*T, 1, D)), e], 1) + W[p+"embeddings.position_embeddings"]
    if typ == "space_only":
        h = e
    else:
        c0 = e[:B, 0:1]                                      # HF takes rows [:B] of the (B*T) batch: cls + pos[0]
        pt = e[:, 1:].reshape(B, T, P, D).transpose(0, 2, 1, 3) + W[p+"embeddings.time_embeddings"].reshape(1, 1, T, D)
        h = np.concatenate([c0, pt.reshape(B, P*T, D)], 1)  # order: patch-major, frame fastest
    def attn(y, L):
        qkv = lin(y, W, L+"attention.qkv"); q, k, v = qkv[..., :D], qkv[..., D:2*D], qkv[..., 2*D:]
        return lin(mha(q, k, v, H), W, L+"output.dense")
    for i in range(cfg["num_hidden_layers"]):
        L = f"{p}encoder.layer.{i}."
        if typ != "divided_space_time":
            h = h + attn(ln(h, W[L+"layernorm_before.weight"], W[L+"layernorm_before.bias"], eps), L+"attention.")
        else:
            xt = h[:, 1:].reshape(B*P, T, D)
            rt = attn(ln(xt, W[L+"temporal_layernorm.weight"], W[L+"temporal_layernorm.bias"], eps), L+"temporal_attention.")
            rt = lin(rt.reshape(B, P*T, D), W, L+"temporal_dense")
            te = h[:, 1:] + rt                                # (B, P*T, D)
            sp = te.reshape(B, P, T, D).transpose(0, 2, 1, 3).reshape(B*T, P, D)
            sp = np.concatenate([np.repeat(h[:, 0:1], T, axis=0), sp], 1)
            rs = attn(ln(sp, W[L+"layernorm_before.weight"], W[L+"layernorm_before.bias"], eps), L+"attention.")
            rc = rs[:, 0].reshape(B, T, D).mean(1, keepdims=True)
            rp = rs[:, 1:].reshape(B, T, P, D).transpose(0, 2, 1, 3).reshape(B, P*T, D)
            h = np.concatenate([h[:, 0:1], te], 1) + np.concatenate([rc, rp], 1)
        y = ln(h, W[L+"layernorm_after.weight"], W[L+"layernorm_after.bias"], eps)
        h = h + lin(act(lin(y, W, L+"intermediate.dense")), W, L+"output.dense")
    hidden = ln(h, W[p+"layernorm.weight"], W[p+"layernorm.bias"], eps)
    return lin(hidden[:, 0], W, "classifier"), hidden


def numpy_reference(d):
    from safetensors.torch import load_file

    cfg = json.load(open(os.path.join(d, "config.json")))
    W = {}
    for fn in weight_files(d):
        W.update({k: v.double().numpy() for k, v in load_file(os.path.join(d, fn)).items()})
    x = np.load(os.path.join(d, "input.npy")).astype(np.float64)
    fn = {"videomae": videomae, "vivit": vivit, "timesformer": timesformer}[cfg["model_type"]]
    return fn(cfg, W, x)


def verify(spec, d):
    """Reload with from_pretrained, run in float32, compare with the stored float64-derived outputs."""
    name, family = spec["name"], spec["family"]
    _, model_cls, _ = FAMILIES[family]
    m = model_cls.from_pretrained(d, dtype=torch.float32, attn_implementation="eager").eval()
    x = torch.from_numpy(np.load(os.path.join(d, "input.npy")))
    exp_l = np.load(os.path.join(d, "logits.npy")).astype(np.float64)
    exp_h = np.load(os.path.join(d, "hidden.npy")).astype(np.float64)
    l32, h32, _ = forward(m, family, x)
    l32, h32 = l32.double().numpy(), h32.double().numpy()
    assert l32.shape == exp_l.shape and h32.shape == exp_h.shape, (l32.shape, exp_l.shape, h32.shape, exp_h.shape)
    el = np.abs(l32 - exp_l).max() / max(1.0, np.abs(exp_l).max())
    eh = np.abs(h32 - exp_h).max() / max(1.0, np.abs(exp_h).max())
    nl, nh = numpy_reference(d)
    nel = np.abs(nl - exp_l).max() / max(1.0, np.abs(exp_l).max())
    neh = np.abs(nh - exp_h).max() / max(1.0, np.abs(exp_h).max())
    att = softmax_stats(m, family, x)
    size = sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d))
    ok = el < 1e-5 and eh < 1e-5 and nel < 1e-6 and neh < 1e-6
    print(f"{name:24s} in{list(x.shape)} logits{list(exp_l.shape)} hidden{list(exp_h.shape)}  "
          f"max|logits|={np.abs(exp_l).max():7.3f} std={exp_l.std():6.3f}  max|hidden|={np.abs(exp_h).max():7.3f}  "
          f"HF-f32 rel err logits={el:.1e} hidden={eh:.1e}  numpy-ref rel err {nel:.1e} {neh:.1e}  mean max-attn-prob={min(att):.2f}..{max(att):.2f}  "
          f"{size / 1024:.0f} KiB  {'OK' if ok else 'FAIL'}")
    return ok


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.path.join(REPO, "tests", "fixtures"))
    ap.add_argument("--only", nargs="*", help="regenerate only these fixtures (list.txt still lists all)")
    ap.add_argument("--no-verify", action="store_true")
    args = ap.parse_args()

    torch.set_num_threads(max(1, min(4, os.cpu_count() or 1)))
    os.makedirs(args.out, exist_ok=True)
    names = [s["name"] for s in FIXTURES]
    if args.only:
        unknown = set(args.only) - set(names)
        if unknown:
            sys.exit(f"unknown fixture(s): {sorted(unknown)}")
    ok = True
    for spec in FIXTURES:
        if args.only and spec["name"] not in args.only:
            continue
        d = make_fixture(spec, args.out)
        if not args.no_verify:
            ok &= verify(spec, d)
    # the TimeSformer L+G / axial fixtures come from tools/timesformer_variants_ref.py: keep them
    variants = ["timesformer_local_global_odd", "timesformer_axial_odd"]
    names += [n for n in variants if os.path.isdir(os.path.join(args.out, n))]
    # ViViT Models 2-4 come from tools/vivit_variants_ref.py; keep them listed
    from vivit_variants_ref import FIXTURE_NAMES as variant_names
    with open(os.path.join(args.out, "list.txt"), "w") as f:
        f.write("\n".join(names + [n for n in variant_names if n not in names]) + "\n")
    if not ok:
        sys.exit("verification FAILED")


if __name__ == "__main__":
    main()
