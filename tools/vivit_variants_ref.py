#!/usr/bin/env python3
"""An independent PyTorch reference of ViViT Models 1-4 (Arnab et al., "ViViT: A Video Vision
Transformer", ICCV 2021; ../shared/seeds/000_*.txt), written from the paper's equations, and the
fixtures it writes for the C tests.

Usage:
    /work/venv/bin/python tools/vivit_variants_ref.py [--out tests/fixtures] [--only NAME ...]
                                                      [--no-verify] [--check]

For every fixture in FIXTURES this writes tests/fixtures/<name>/ with

    config.json, model.safetensors   Hugging Face VivitConfig fields + "model_variant" (and
                                     "num_temporal_layers"), tensors under the names of
                                     docs/vivit-variants.md
    input.npy                        float32 pixel_values (B, T, C, H, W), N(0, 1)
    logits.npy, hidden.npy           float64 forward of the stored weights, saved as float32
    hidden_layer1.npy                output of the first block (Models 3 and 4; Model 2's first block
                                     runs on per-frame sequences, so it has none)
    labels.npy, loss.npy, grads.safetensors
                                     the mean cross-entropy against fixed labels and d loss / d p for
                                     every parameter (float64 autograd, stored as float32, the
                                     layout of tools/make_grad_fixtures.py)
    meta.json

and adds the names to tests/fixtures/list.txt and grad_list.txt (keeping the other entries).

The model (class Vivit below) follows the paper:
    tokens      z = [z_cls, E x_1, ..., E x_N] + p (eq. 1); E is a Conv3d with stride = kernel:
                uniform frame sampling is the kernel [1, p, p], tubelet embedding [t, p, p]
    block       y = MSA(LN(z)) + z;  z' = MLP(LN(y)) + y (eqs. 2, 3)
    Model 1     one encoder over all n_t n_h n_w tokens + cls (= Hugging Face's VivitModel)
    Model 2     spatial encoder (L_s blocks) over the tokens of each temporal index with a
                per-frame cls token, h_i = LN(z_cls^{L_s}); temporal encoder (L_t blocks) over
                [cls_t, h_1 .. h_{n_t}] + p_t; LN; its cls token is classified.  Positions and
                the final LayerNorm of each encoder as in the authors' Scenic code
                (SpaceTimeViViT: each vit.Encoder adds its own learned positions, cls included,
                and ends with a LayerNorm).
    Model 3     y_s = MSA_s(LN(z)) + z over the tokens of each temporal index; y_t =
                MSA_t(LN(y_s)) + y_s over the tokens of each spatial position; z' =
                MLP(LN(y_t)) + y_t (eqs. 4-6); no cls token: LN, global average pooling, head.
    Model 4     one MSA per block whose heads [0, H/2) attend with K_s, V_s (same temporal
                index) and heads [H/2, H) with K_t, V_t (same spatial position);
                Y = Concat(Y_s, Y_t) W_o (eqs. 7-9); no cls; LN, global average pooling, head.

The attention is written with reshapes into per-frame / per-position sequences, as the paper
describes it.  --verify checks it independently: Model 1 against transformers'
VivitForVideoClassification loaded from the same files; Model 2 against a pipeline made of
transformers' own VivitLayer modules; Models 3 and 4 against full-sequence attention with
per-head masks (same frame / same position); gradients against central finite differences along a
random direction per tensor; float32 against float64.

Everything is seeded: re-running writes byte-identical files (for a given torch version).
"""

import argparse
import json
import math
import os
import sys
import tempfile

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

import transformers

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fixture_io import add_to_list, check_fixture, fd_check, write_fixture  # noqa: E402
from transformers import VivitConfig

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

VARIANTS = ("joint", "factorised_encoder", "factorised_self_attention", "factorised_dot_product")

ACT = {
    "gelu": lambda x: F.gelu(x),
    "gelu_fast": lambda x: 0.5 * x * (1 + torch.tanh(x * 0.7978845608 * (1 + 0.044715 * x * x))),
    "gelu_new": lambda x: 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3))),
    "gelu_pytorch_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "quick_gelu": lambda x: x * torch.sigmoid(1.702 * x),
    "relu": F.relu,
}

# ----------------------------------------------------------------------------------------------
# fixture definitions (small odd shapes: non-square patches, leftover frames and pixels, B = 2)
# ----------------------------------------------------------------------------------------------

_TUB = dict(image_size=[13, 7], num_frames=7, tubelet_size=[2, 4, 3])   # grid 3 x 3 x 2, 1 frame,
                                                                       # 1 row, 1 column left over
_FRM = dict(image_size=[9, 13], num_frames=4, tubelet_size=[1, 4, 3])   # grid 4 x 2 x 4
_SM = dict(hidden_size=8, num_attention_heads=4, intermediate_size=12, num_hidden_layers=2,
           num_labels=3)

FIXTURES = [
    dict(name="vivit_m2_tubelet", seed=3101, batch=2,
         config=dict(_SM, **_TUB, num_attention_heads=2, model_variant="factorised_encoder",
                     num_temporal_layers=2),
         note="ViViT Model 2 (factorised encoder), tubelet embedding [2,4,3] over 7x13x7 (grid 3x3x2): "
              "spatial encoder (2 layers, 2 heads) over each frame's 6 tokens + a per-frame cls token, "
              "LN, temporal encoder (2 layers) over 3 frame tokens + temporal cls, LN, classifier."),
    dict(name="vivit_m2_frames", seed=3102, batch=2,
         config=dict(_SM, **_FRM, num_attention_heads=1, hidden_act="gelu", qkv_bias=False,
                     model_variant="factorised_encoder", num_temporal_layers=1),
         note="ViViT Model 2, uniform frame sampling (2D patches [1,4,3]) over 4x9x13 (grid 4x2x4), no "
              "q/k/v bias, exact GELU, 1 head, 1 temporal layer."),
    dict(name="vivit_m3_tubelet", seed=3103, batch=2,
         config=dict(_SM, **_TUB, model_variant="factorised_self_attention"),
         note="ViViT Model 3 (factorised self-attention): per block spatial MSA (per frame), temporal MSA "
              "(per spatial position, own LayerNorm and weights), MLP; no cls; LN + mean pooling; tubelet "
              "[2,4,3], grid 3x3x2, 4 heads of size 2."),
    dict(name="vivit_m3_frames", seed=3104, batch=2,
         config=dict(_SM, **_FRM, hidden_act="quick_gelu", model_variant="factorised_self_attention"),
         note="ViViT Model 3, uniform frame sampling [1,4,3], grid 4x2x4, quick_gelu."),
    dict(name="vivit_m4_tubelet", seed=3105, batch=2,
         config=dict(_SM, **_TUB, model_variant="factorised_dot_product"),
         note="ViViT Model 4 (factorised dot-product attention): heads 0-1 attend within the frame, heads "
              "2-3 along time, one output projection; no cls; LN + mean pooling; tubelet [2,4,3]."),
    dict(name="vivit_m4_frames", seed=3106, batch=2,
         config=dict(_SM, **_FRM, hidden_act="relu", qkv_bias=False, num_attention_heads=2,
                     model_variant="factorised_dot_product"),
         note="ViViT Model 4, uniform frame sampling [1,4,3], grid 4x2x4, 2 heads of size 4 (1 spatial, 1 "
              "temporal), no q/k/v bias, relu."),
]
FIXTURE_NAMES = [f["name"] for f in FIXTURES]

LABEL_SEED_OFFSET = 70000  # as tools/make_grad_fixtures.py

# ----------------------------------------------------------------------------------------------
# the model: module names = tensor names in model.safetensors (docs/vivit-variants.md)
# ----------------------------------------------------------------------------------------------


class Sub(nn.Module):
    """A named container (attention.attention.query ...)."""

    def __init__(self, **children):
        super().__init__()
        for k, v in children.items():
            setattr(self, k, v)


def attention_module(D, bias):
    return Sub(attention=Sub(query=nn.Linear(D, D, bias=bias), key=nn.Linear(D, D, bias=bias),
                             value=nn.Linear(D, D, bias=bias)),
               output=Sub(dense=nn.Linear(D, D)))


class Layer(nn.Module):
    def __init__(self, c, temporal_attention=False):
        super().__init__()
        D, I, eps = c["hidden_size"], c["intermediate_size"], c["layer_norm_eps"]
        self.layernorm_before = nn.LayerNorm(D, eps=eps)
        self.attention = attention_module(D, c["qkv_bias"])
        if temporal_attention:  # Model 3
            self.temporal_layernorm = nn.LayerNorm(D, eps=eps)
            self.temporal_attention = attention_module(D, c["qkv_bias"])
        self.layernorm_after = nn.LayerNorm(D, eps=eps)
        self.intermediate = Sub(dense=nn.Linear(D, I))
        self.output = Sub(dense=nn.Linear(I, D))


def image_hw(c):
    s = c["image_size"]
    return tuple(s) if isinstance(s, (list, tuple)) else (s, s)


def grid(c):
    T, (H, W) = c["num_frames"], image_hw(c)
    t, ph, pw = c["tubelet_size"]
    return T // t, H // ph, W // pw


class Vivit(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        variant = c.get("model_variant", "joint")
        assert variant in VARIANTS
        self.variant = variant
        D = c["hidden_size"]
        nt, nh, nw = grid(c)
        N = nh * nw
        cls = variant in ("joint", "factorised_encoder")
        n_pos = {"joint": nt * N + 1, "factorised_encoder": N + 1}.get(variant, nt * N)
        emb = Sub(patch_embeddings=Sub(projection=nn.Conv3d(c["num_channels"], D, c["tubelet_size"],
                                                            stride=c["tubelet_size"])))
        if cls:
            emb.cls_token = nn.Parameter(torch.zeros(1, 1, D))
        emb.position_embeddings = nn.Parameter(torch.zeros(1, n_pos, D))
        m = Sub(embeddings=emb,
                encoder=Sub(layer=nn.ModuleList(
                    [Layer(c, variant == "factorised_self_attention") for _ in range(c["num_hidden_layers"])])),
                layernorm=nn.LayerNorm(D, eps=c["layer_norm_eps"]))
        if variant == "factorised_encoder":
            m.temporal_embeddings = Sub(cls_token=nn.Parameter(torch.zeros(1, 1, D)),
                                        position_embeddings=nn.Parameter(torch.zeros(1, nt + 1, D)))
            m.temporal_encoder = Sub(layer=nn.ModuleList([Layer(c) for _ in range(c["num_temporal_layers"])]))
            m.temporal_layernorm = nn.LayerNorm(D, eps=c["layer_norm_eps"])
        self.vivit = m
        self.classifier = nn.Linear(D, len(c["id2label"]))

    # -- the paper's steps ----------------------------------------------------------------------

    def embed(self, x):
        """E x: Conv3d with stride = kernel; (B, T, C, H, W) -> (B, n_t, N, D)."""
        w = self.vivit.embeddings.patch_embeddings.projection
        y = F.conv3d(x.transpose(1, 2), w.weight, w.bias, stride=w.stride)  # (B, D, nt, nh, nw)
        B, D, nt, nh, nw = y.shape
        return y.permute(0, 2, 3, 4, 1).reshape(B, nt, nh * nw, D)

    def attend(self, q, k, v, heads):
        """softmax(Q K^T / sqrt(d_k)) V per head over the second-to-last axis; q (..., L, D)."""
        *bs, L, D = q.shape
        dh = D // heads
        q, k, v = (u.reshape(*bs, L, heads, dh).transpose(-2, -3) for u in (q, k, v))
        p = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(dh), dim=-1)
        return (p @ v).transpose(-2, -3).reshape(*bs, L, D)

    def msa(self, at, y, heads):
        a = at.attention
        return at.output.dense(self.attend(a.query(y), a.key(y), a.value(y), heads))

    def mlp(self, layer, y):
        act = ACT[self.c["hidden_act"]]
        return layer.output.dense(act(layer.intermediate.dense(y)))

    def block(self, layer, z):
        """eqs. 2-3 over the sequences of z (..., L, D)."""
        H = self.c["num_attention_heads"]
        y = self.msa(layer.attention, layer.layernorm_before(z), H) + z
        return self.mlp(layer, layer.layernorm_after(y)) + y

    def factorised_self_attention_block(self, layer, z):
        """eqs. 4-6, z (B, n_t, N, D): space within each temporal index, then time within each
        spatial position."""
        H = self.c["num_attention_heads"]
        ys = self.msa(layer.attention, layer.layernorm_before(z), H) + z
        zt = ys.transpose(1, 2)  # (B, N, n_t, D)
        yt = (self.msa(layer.temporal_attention, layer.temporal_layernorm(zt), H) + zt).transpose(1, 2)
        return self.mlp(layer, layer.layernorm_after(yt)) + yt

    def factorised_dot_product_attention(self, at, y):
        """eqs. 7-9, y (B, n_t, N, D): heads [0, H/2) attend over space, [H/2, H) over time;
        Y = Concat(Y_s, Y_t) W_o."""
        H, D = self.c["num_attention_heads"], self.c["hidden_size"]
        a = at.attention
        q, k, v = a.query(y), a.key(y), a.value(y)
        h = D // 2  # the first H/2 heads own columns [0, D/2)
        ys = self.attend(q[..., :h], k[..., :h], v[..., :h], H // 2)
        tq, tk, tv = (u[..., h:].transpose(1, 2) for u in (q, k, v))
        yt = self.attend(tq, tk, tv, H // 2).transpose(1, 2)
        return at.output.dense(torch.cat([ys, yt], dim=-1))

    def factorised_dot_product_block(self, layer, z):
        y = self.factorised_dot_product_attention(layer.attention, layer.layernorm_before(z)) + z
        return self.mlp(layer, layer.layernorm_after(y)) + y

    # -- the models -----------------------------------------------------------------------------

    def forward(self, x, n_blocks=None):
        """logits, last_hidden_state, and the output of the first n_blocks blocks (if asked)."""
        m, var = self.vivit, self.variant
        e = self.embed(x)  # (B, n_t, N, D)
        B, nt, N, D = e.shape
        early = None
        if var == "joint":
            z = torch.cat([m.embeddings.cls_token.expand(B, 1, D), e.reshape(B, nt * N, D)], 1)
            z = z + m.embeddings.position_embeddings
            for i, layer in enumerate(m.encoder.layer):
                z = self.block(layer, z)
                if n_blocks == i + 1:
                    early = z
            hidden = m.layernorm(z)
            return self.classifier(hidden[:, 0]), hidden, early
        if var == "factorised_encoder":
            z = torch.cat([m.embeddings.cls_token.expand(B, nt, 1, D), e], 2) + m.embeddings.position_embeddings
            for layer in m.encoder.layer:  # spatial encoder: each frame on its own
                z = self.block(layer, z)
            h = m.layernorm(z[:, :, 0])  # h_i: the frame's encoded cls token, (B, n_t, D)
            zt = torch.cat([m.temporal_embeddings.cls_token.expand(B, 1, D), h], 1)
            zt = zt + m.temporal_embeddings.position_embeddings
            for layer in m.temporal_encoder.layer:
                zt = self.block(layer, zt)
            hidden = m.temporal_layernorm(zt)
            return self.classifier(hidden[:, 0]), hidden, None
        z = e + m.embeddings.position_embeddings.reshape(1, nt, N, D)
        blk = self.factorised_self_attention_block if var == "factorised_self_attention" \
            else self.factorised_dot_product_block
        for i, layer in enumerate(m.encoder.layer):
            z = blk(layer, z)
            if n_blocks == i + 1:
                early = z.reshape(B, nt * N, D)
        hidden = m.layernorm(z).reshape(B, nt * N, D)
        logits = self.classifier(hidden.mean(1))  # global average pooling
        return logits, hidden, early


# ----------------------------------------------------------------------------------------------
# independent checks
# ----------------------------------------------------------------------------------------------


def masked_forward(model, x):
    """Models 3 and 4 as full-sequence attention over all n_t N tokens of a clip with per-head masks
    (same temporal index / same spatial position), no reshapes into groups."""
    c, m = model.c, model.vivit
    H, D = c["num_attention_heads"], c["hidden_size"]
    dh = D // H
    e = model.embed(x)
    B, nt, N, _ = e.shape
    S = nt * N
    tix = torch.arange(S) // N
    nix = torch.arange(S) % N
    same_t = tix[:, None] == tix[None, :]
    same_n = nix[:, None] == nix[None, :]

    def mha(at, y, masks):  # masks (H, S, S)
        a = at.attention
        q, k, v = (u.reshape(B, S, H, dh).transpose(1, 2) for u in (a.query(y), a.key(y), a.value(y)))
        s = (q @ k.transpose(-1, -2)) / math.sqrt(dh)
        s = s.masked_fill(~masks[None], float("-inf"))
        return at.output.dense((torch.softmax(s, -1) @ v).transpose(1, 2).reshape(B, S, D))

    z = e.reshape(B, S, D) + m.embeddings.position_embeddings
    for layer in m.encoder.layer:
        if model.variant == "factorised_self_attention":
            z = mha(layer.attention, layer.layernorm_before(z), same_t.expand(H, S, S)) + z
            z = mha(layer.temporal_attention, layer.temporal_layernorm(z), same_n.expand(H, S, S)) + z
        else:
            masks = torch.stack([same_t if h < H // 2 else same_n for h in range(H)])
            z = mha(layer.attention, layer.layernorm_before(z), masks) + z
        z = model.mlp(layer, layer.layernorm_after(z)) + z
    hidden = m.layernorm(z)
    return model.classifier(hidden.mean(1)), hidden


def hf_layers_forward(model, x):
    """Model 2 with transformers' VivitLayer modules (eager attention, float64 softmax) for every
    block of both encoders."""
    from transformers.models.vivit import modeling_vivit as mv

    c, m = model.c, model.vivit
    cfg = VivitConfig(hidden_size=c["hidden_size"], num_attention_heads=c["num_attention_heads"],
                      intermediate_size=c["intermediate_size"], hidden_act=c["hidden_act"],
                      layer_norm_eps=c["layer_norm_eps"], qkv_bias=c["qkv_bias"])
    cfg._attn_implementation = "sdpa"

    def hf_layer(ours):
        hl = mv.VivitLayer(cfg).to(torch.float64).eval()
        sd = {"layernorm_before.weight": ours.layernorm_before.weight, "layernorm_before.bias": ours.layernorm_before.bias,
              "layernorm_after.weight": ours.layernorm_after.weight, "layernorm_after.bias": ours.layernorm_after.bias,
              "mlp.fc1.weight": ours.intermediate.dense.weight, "mlp.fc1.bias": ours.intermediate.dense.bias,
              "mlp.fc2.weight": ours.output.dense.weight, "mlp.fc2.bias": ours.output.dense.bias,
              "attention.o_proj.weight": ours.attention.output.dense.weight,
              "attention.o_proj.bias": ours.attention.output.dense.bias}
        for a, b in (("q", "query"), ("k", "key"), ("v", "value")):
            lin = getattr(ours.attention.attention, b)
            sd[f"attention.{a}_proj.weight"] = lin.weight
            if lin.bias is not None:
                sd[f"attention.{a}_proj.bias"] = lin.bias
        hl.load_state_dict({k: v.detach() for k, v in sd.items()}, strict=True)
        return hl

    e = model.embed(x)
    B, nt, N, D = e.shape
    z = torch.cat([m.embeddings.cls_token.expand(B, nt, 1, D), e], 2) + m.embeddings.position_embeddings
    z = z.reshape(B * nt, N + 1, D)
    for layer in m.encoder.layer:
        z = hf_layer(layer)(z)
    h = m.layernorm(z[:, 0]).reshape(B, nt, D)
    zt = torch.cat([m.temporal_embeddings.cls_token.expand(B, 1, D), h], 1) + m.temporal_embeddings.position_embeddings
    for layer in m.temporal_encoder.layer:
        zt = hf_layer(layer)(zt)
    hidden = m.temporal_layernorm(zt)
    return model.classifier(hidden[:, 0]), hidden


def check_model1_against_hf(seed):
    """Our Model 1 path (both tokenisations) against VivitForVideoClassification on the same
    weights. Returns the largest relative difference of logits and hidden states."""
    from transformers import VivitForVideoClassification

    worst = 0.0
    for tub in (_TUB, _FRM):
        c = full_config(dict(_SM, **dict(tub, image_size=12), num_attention_heads=2))
        ours = Vivit(c).to(torch.float64)
        gen = torch.Generator().manual_seed(seed)
        randomize_(ours, gen)
        hf = VivitForVideoClassification(VivitConfig(**{k: v for k, v in c.items() if k in HF_KEYS and k != "label2id"}))
        hf = hf.to(torch.float64).eval()
        hf.config._attn_implementation = "sdpa"
        sd = {}
        for k, v in ours.state_dict().items():  # legacy file names -> transformers 5 module names
            k = k.replace("vivit.encoder.layer.", "vivit.layers.")
            for a, b in (("attention.attention.query", "attention.q_proj"), ("attention.attention.key", "attention.k_proj"),
                         ("attention.attention.value", "attention.v_proj"), ("attention.output.dense", "attention.o_proj"),
                         ("intermediate.dense", "mlp.fc1"), ("output.dense", "mlp.fc2")):
                k = k.replace(a, b)
            sd[k] = v
        missing, unexpected = hf.load_state_dict(sd, strict=False)
        assert not unexpected and all(k.startswith("vivit.pooler") for k in missing), (missing, unexpected)
        x = torch.randn((2, c["num_frames"], 3, 12, 12), generator=gen, dtype=torch.float64)
        with torch.no_grad():
            l0, h0, _ = ours(x)
            l1 = hf(pixel_values=x).logits
            h1 = hf.vivit(x).last_hidden_state
        worst = max(worst, rel(l0, l1), rel(h0, h1))
    return worst


# ----------------------------------------------------------------------------------------------
# fixtures
# ----------------------------------------------------------------------------------------------

HF_KEYS = set(VivitConfig().to_dict()) | {"num_labels"}


def full_config(spec_cfg):
    """The config.json of a model directory: what VivitConfig.save_pretrained writes for the
    Hugging Face fields, plus the variant's own fields."""
    cfg = VivitConfig(**{k: v for k, v in spec_cfg.items() if k in HF_KEYS})
    with tempfile.TemporaryDirectory() as t:
        cfg.save_pretrained(t)
        with open(os.path.join(t, "config.json")) as f:
            c = json.load(f)
    c.update({k: v for k, v in spec_cfg.items() if k not in HF_KEYS})
    c.pop("transformers_version", None)
    return c


@torch.no_grad()
def randomize_(model, gen):
    """Every parameter random (as tools/make_fixtures.py): LayerNorm weight 1 + 0.2 N, biases 0.1 N,
    Linear / Conv weights N / sqrt(fan_in), cls tokens and positions 0.5 N."""
    owner = {}
    for mname, mod in model.named_modules():
        for pname, _ in mod.named_parameters(recurse=False):
            owner[f"{mname}.{pname}" if mname else pname] = mod
    for name, p in sorted(model.named_parameters(), key=lambda kv: kv[0]):
        mod, leaf = owner[name], name.rsplit(".", 1)[-1]
        r = torch.randn(p.shape, generator=gen, dtype=torch.float64)
        if isinstance(mod, nn.LayerNorm):
            v = 1.0 + 0.2 * r if leaf == "weight" else 0.1 * r
        elif leaf == "bias":
            v = 0.1 * r
        elif isinstance(mod, (nn.Linear, nn.Conv3d)):
            v = r / math.sqrt(p[0].numel())
        else:
            v = 0.5 * r
        p.copy_(v.to(p.dtype))


def rel(a, b):
    return ((a - b).abs().max() / max(1.0, b.abs().max().item())).item()


def grad_rel(g, ref):
    den = ref.abs().max().item()
    return (g - ref).abs().max().item() / (den if den > 0 else 1.0)


def loss_and_grads(model, x, labels):
    model.zero_grad(set_to_none=True)
    logits = model(x)[0]
    loss = F.cross_entropy(logits, labels)
    loss.backward()
    g = {n: p.grad.detach().clone() for n, p in model.named_parameters()}
    model.zero_grad(set_to_none=True)
    return loss.detach(), g


def make_fixture(spec, root, verify, check):
    name = spec["name"]
    c = full_config(spec["config"])
    torch.manual_seed(spec["seed"])
    gen = torch.Generator().manual_seed(spec["seed"])
    model = Vivit(c)
    randomize_(model, gen)
    B = spec["batch"]
    x32 = torch.randn((B, c["num_frames"], c["num_channels"], *image_hw(c)), generator=gen, dtype=torch.float32)
    weights = {k: v.detach().to(torch.float32).contiguous() for k, v in model.state_dict().items()}

    # expected outputs in float64 from the float32 weights as stored
    model = model.to(torch.float64).eval()
    model.load_state_dict({k: v.to(torch.float64) for k, v in weights.items()})
    x = x32.to(torch.float64)
    with torch.no_grad():
        logits, hidden, layer1 = model(x, n_blocks=1)
    rng = np.random.default_rng(spec["seed"] + LABEL_SEED_OFFSET)
    labels_np = rng.integers(0, len(c["id2label"]), size=logits.shape[0], dtype=np.int64)
    labels = torch.from_numpy(labels_np)
    loss, grads = loss_and_grads(model, x, labels)
    grads32 = {k: g.to(torch.float32).contiguous() for k, g in grads.items()}
    assert set(grads32) == set(weights)

    info = dict(name=name, logits=list(logits.shape), hidden=list(hidden.shape), loss=loss.item(),
                n=len(weights), params=sum(v.numel() for v in weights.values()))
    if verify:
        if model.variant == "factorised_encoder":
            l2, h2 = hf_layers_forward(model, x)
            info["alt"] = ("transformers VivitLayer blocks", max(rel(logits, l2), rel(hidden, h2)))
        else:
            with torch.no_grad():
                l2, h2 = masked_forward(model, x)
            info["alt"] = ("full attention with per-head masks", max(rel(logits, l2), rel(hidden, h2)))
        assert info["alt"][1] < 1e-12, f"{name}: the two formulations disagree ({info['alt'][1]:.3g})"
        info["fd"], info["fd_key_bias"] = fd_check(
            model, lambda: F.cross_entropy(model(x)[0], labels).item(), grads, spec["seed"],
            lambda n: n.endswith("attention.key.bias"))
        assert info["fd"] < 1e-6, f"{name}: finite differences disagree ({info['fd']:.3g})"
        gmax = max(g.abs().max().item() for g in grads.values())
        assert info["fd_key_bias"] < 1e-9 * gmax
        m32 = Vivit(c).eval()
        m32.load_state_dict(weights)
        l32, g32 = loss_and_grads(m32, x32, labels)
        info["f32_grad_rel"] = max(grad_rel(g32[k].to(torch.float64), grads[k]) for k in grads
                                   if not k.endswith("attention.key.bias"))
        assert info["f32_grad_rel"] < 2e-5, f"{name}: float32 gradients off by {info['f32_grad_rel']:.3g}"
        for k, g in grads.items():
            assert torch.isfinite(g).all()
            if not k.endswith("attention.key.bias"):
                assert g.abs().max().item() > 1e-6 * gmax, f"{name}: degenerate gradient of {k}"

    files = {"input.npy": x32.numpy(), "logits.npy": logits.to(torch.float32).numpy(),
             "hidden.npy": hidden.to(torch.float32).numpy(), "labels.npy": labels_np,
             "loss.npy": np.asarray(loss.item(), dtype=np.float32)}
    if layer1 is not None:
        files["hidden_layer1.npy"] = layer1.to(torch.float32).numpy()
    d = os.path.join(root, name)
    cfg_json = dict(sorted({**c, "transformers_version": transformers.__version__}.items()))
    tensors = {"model.safetensors": weights, "grads.safetensors": grads32}
    if check:
        check_fixture(d, cfg_json, files, tensors)
        return info
    meta = dict(family="vivit", **{"class": "tools/vivit_variants_ref.py:Vivit"}, note=spec["note"],
                seed=spec["seed"], weights_dtype="float32", input_shape=list(x32.shape),
                logits_shape=info["logits"], hidden_shape=info["hidden"], weight_files=["model.safetensors"],
                expected="float64 forward and autograd of tools/vivit_variants_ref.py on the stored weights, "
                         "saved as float32",
                generated_with=dict(torch=torch.__version__, transformers=transformers.__version__))
    info["bytes"] = write_fixture(d, cfg_json, files, tensors, meta)
    return info


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.path.join(REPO, "tests", "fixtures"))
    ap.add_argument("--only", nargs="+", default=None)
    ap.add_argument("--no-verify", action="store_true")
    ap.add_argument("--check", action="store_true", help="recompute and compare with the files on disk")
    args = ap.parse_args()
    torch.set_num_threads(1)
    names = args.only or FIXTURE_NAMES
    unknown = set(names) - set(FIXTURE_NAMES)
    if unknown:
        sys.exit(f"unknown fixture(s) {sorted(unknown)}; choose from {FIXTURE_NAMES}")
    if not args.no_verify:
        print(f"Model 1 (both tokenisations) vs transformers VivitForVideoClassification: "
              f"max relative difference {check_model1_against_hf(3100):.3g}")
    for spec in FIXTURES:
        if spec["name"] not in names:
            continue
        info = make_fixture(spec, args.out, not args.no_verify, args.check)
        print(" ".join(f"{k}={v:.3g}" if isinstance(v, float) else
                       f"{k}={v[0]}: {v[1]:.3g}" if isinstance(v, tuple) else f"{k}={v}" for k, v in info.items()))
    if not args.check:
        add_to_list(os.path.join(args.out, "list.txt"), FIXTURE_NAMES)
        add_to_list(os.path.join(args.out, "grad_list.txt"), FIXTURE_NAMES)
    print(f"torch {torch.__version__}, transformers {transformers.__version__}")


if __name__ == "__main__":
    main()
