#!/usr/bin/env python3
"""An independent PyTorch reference of the STMixer backbone (VideoMAE ViT with layer scale, final
LayerNorm and four-level feature output; ../shared/seeds/001_*.txt, STMixer's
alphaction/modeling/backbone/{video_model_builder,vit_utils}.py), written from the seed's code, and
the fixture it writes for the C tests.

Usage:
    /work/main/.venv/bin/python tools/stmixer_backbone_ref.py [--out tests/fixtures] [--no-verify]
                                                             [--check]

It builds a small random model (class ViT below: hidden 32, 2 blocks, 2 heads of size 16, tubelet
2 x 4 x 4, 4 frames of 20 x 20 = 2 x 5 x 5 tokens), maps its parameters to the Hugging Face
VideoMAE names tubelet reads (docs/stmixer-backbone.md) and writes tests/fixtures/stmixer_backbone/:

    config.json, model.safetensors   VideoMAEConfig fields + "layer_scale_init_value"; tensors under
                                     Hugging Face's VideoMAE names + lambda_1 / lambda_2 per block
    input.npy                        float32 pixel_values (B, T, C, H, W), N(0, 1), B = 2
    hidden.npy                       the final-normed tokens (B, N, D) (last_hidden_state)
    hidden_layer1.npy                the output of block 0 (hidden_states[1]; no final LayerNorm)
    logits.npy                       the classification head on it (below)
    features.npy                     the backbone's output x of features = [x, x, x, x],
                                     (B, D, T/2, H/4, W/4)
    features_layers.npy              hidden_states[0], [1], [2] (embeddings, block 0's and block
                                     1's outputs, no final LayerNorm) laid out as features,
                                     stacked: (3, B, D, T/2, H/4, W/4)
    input_28x24.npy, features_28x24.npy   another input size (1 clip, 7 x 6 tokens per frame): the
    input_12x8.npy, features_12x8.npy     positions are resized bicubically, per temporal slice
                                          (interpolate_pos_embed_online), up and down
    labels.npy, loss.npy, grads.safetensors
                                     mean cross-entropy against fixed labels and d loss / d p for
                                     every parameter, under the same names (float64 autograd, saved
                                     as float32, the layout of tools/make_grad_fixtures.py), with
                                     use_checkpoint on (gradient checkpointing of every block and
                                     of each half of it, as the seed's ViT and Block do)
    meta.json

and adds the name to tests/fixtures/list.txt and grad_list.txt.

The head. STMixer's backbone has none (the detector consumes the features); the gradients need a
scalar loss, so the fixture adds the head of Hugging Face's VideoMAEForVideoClassification with
use_mean_pooling = False: a Linear classifier on token 0 of the final-normed sequence, i.e. on
features[0][:, :, 0, 0, 0]. Every backbone parameter reaches it through the attention.

--verify (default) checks the reference independently:
  * with init_values 0 (no gamma) against transformers' VideoMAEForVideoClassification
    (use_mean_pooling False) on the same weights;
  * with layer scale against the same transformers model whose output projections carry the
    scale folded in (W <- diag(lambda) W, b <- lambda b, exact since lambda * (o W^T + b) =
    o (diag(lambda) W)^T + lambda b);
  * gradients with and without use_checkpoint (identical), against central finite differences
    along a random direction per tensor, and float32 against float64.
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
import torch.utils.checkpoint as checkpoint
from safetensors.torch import save_file
from torch import nn

import transformers

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fixture_io import add_to_list, check_fixture, fd_check, write_fixture  # noqa: E402
from transformers import VideoMAEConfig, VideoMAEForVideoClassification

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NAME = "stmixer_backbone"
SEED = 4201
LABEL_SEED_OFFSET = 70000  # as tools/make_grad_fixtures.py

# the fixture's model: STMixer's ViT-B structure at a small size
CFG = dict(tubelet_size=2, patch_size=4, in_chans=3, embed_dim=32, pretrain_img_size=20,
           num_frames=4, depth=2, num_heads=2, mlp_ratio=4.0, qkv_bias=True, init_values=0.5,
           num_labels=3)
OTHER_SIZES = [(28, 24), (12, 8)]


# ----------------------------------------------------------------------------------------------
# the backbone, as the seed's code writes it
# ----------------------------------------------------------------------------------------------

def drop_path(x, drop_prob: float = 0., training: bool = False, scale_by_keep: bool = True):
    """Stochastic depth per sample (timm's drop_path, which the seed's DropPath calls)."""
    if drop_prob == 0. or not training:
        return x
    keep_prob = 1 - drop_prob
    shape = (x.shape[0],) + (1,) * (x.ndim - 1)
    random_tensor = x.new_empty(shape).bernoulli_(keep_prob)
    if keep_prob > 0.0 and scale_by_keep:
        random_tensor.div_(keep_prob)
    return x * random_tensor


class DropPath(nn.Module):
    def __init__(self, drop_prob=None):
        super().__init__()
        self.drop_prob = drop_prob

    def forward(self, x):
        return drop_path(x, self.drop_prob, self.training)


class Mlp(nn.Module):
    def __init__(self, in_features, hidden_features=None, out_features=None, act_layer=nn.GELU, drop=0.):
        super().__init__()
        out_features = out_features or in_features
        hidden_features = hidden_features or in_features
        self.fc1 = nn.Linear(in_features, hidden_features)
        self.act = act_layer()
        self.fc2 = nn.Linear(hidden_features, out_features)
        self.drop = nn.Dropout(drop)

    def forward(self, x):
        x = self.fc1(x)
        x = self.act(x)
        x = self.fc2(x)
        x = self.drop(x)
        return x


class Attention(nn.Module):
    def __init__(self, dim, num_heads=8, qkv_bias=False, qk_scale=None, attn_drop=0., proj_drop=0.,
                 attn_head_dim=None):
        super().__init__()
        self.num_heads = num_heads
        head_dim = dim // num_heads
        if attn_head_dim is not None:
            head_dim = attn_head_dim
        all_head_dim = head_dim * self.num_heads
        self.scale = qk_scale or head_dim ** -0.5
        self.qkv = nn.Linear(dim, all_head_dim * 3, bias=False)
        if qkv_bias:
            self.q_bias = nn.Parameter(torch.zeros(all_head_dim))
            self.v_bias = nn.Parameter(torch.zeros(all_head_dim))
        else:
            self.q_bias = None
            self.v_bias = None
        self.attn_drop = nn.Dropout(attn_drop)
        self.proj = nn.Linear(all_head_dim, dim)
        self.proj_drop = nn.Dropout(proj_drop)

    def forward(self, x):
        B, N, C = x.shape
        qkv_bias = None
        if self.q_bias is not None:
            qkv_bias = torch.cat((self.q_bias, torch.zeros_like(self.v_bias, requires_grad=False), self.v_bias))
        qkv = F.linear(input=x, weight=self.qkv.weight, bias=qkv_bias)
        qkv = qkv.reshape(B, N, 3, self.num_heads, -1).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        q = q * self.scale
        attn = (q @ k.transpose(-2, -1))
        attn = attn.softmax(dim=-1)
        attn = self.attn_drop(attn)
        x = (attn @ v).transpose(1, 2).reshape(B, N, -1)
        x = self.proj(x)
        x = self.proj_drop(x)
        return x


class Block(nn.Module):
    def __init__(self, dim, num_heads, mlp_ratio=4., qkv_bias=False, qk_scale=None, drop=0., attn_drop=0.,
                 drop_path=0., init_values=None, act_layer=nn.GELU, norm_layer=nn.LayerNorm,
                 attn_head_dim=None, use_checkpoint=False):
        super().__init__()
        self.norm1 = norm_layer(dim)
        self.attn = Attention(dim, num_heads=num_heads, qkv_bias=qkv_bias, qk_scale=qk_scale,
                              attn_drop=attn_drop, proj_drop=drop, attn_head_dim=attn_head_dim)
        self.drop_path = DropPath(drop_path) if drop_path > 0. else nn.Identity()
        self.norm2 = norm_layer(dim)
        mlp_hidden_dim = int(dim * mlp_ratio)
        self.mlp = Mlp(in_features=dim, hidden_features=mlp_hidden_dim, act_layer=act_layer, drop=drop)
        self.use_checkpoint = use_checkpoint
        if init_values > 0:
            self.gamma_1 = nn.Parameter(init_values * torch.ones((dim)), requires_grad=True)
            self.gamma_2 = nn.Parameter(init_values * torch.ones((dim)), requires_grad=True)
        else:
            self.gamma_1, self.gamma_2 = None, None

    def forward_part1(self, x):
        if self.gamma_1 is None:
            return self.drop_path(self.attn(self.norm1(x)))
        return self.drop_path(self.gamma_1 * self.attn(self.norm1(x)))

    def forward_part2(self, x):
        if self.gamma_1 is None:
            return self.drop_path(self.mlp(self.norm2(x)))
        return self.drop_path(self.gamma_2 * self.mlp(self.norm2(x)))

    def forward(self, x):
        if self.use_checkpoint:
            x = x + checkpoint.checkpoint(self.forward_part1, x, use_reentrant=False)
        else:
            x = x + self.forward_part1(x)
        if self.use_checkpoint:
            x = x + checkpoint.checkpoint(self.forward_part2, x, use_reentrant=False)
        else:
            x = x + self.forward_part2(x)
        return x


class PatchEmbed(nn.Module):
    """Video to patch embedding: a Conv3d with stride = kernel = (tubelet, patch, patch)."""

    def __init__(self, img_size=224, patch_size=16, in_chans=3, embed_dim=768, num_frames=16, tubelet_size=2):
        super().__init__()
        img_size = (img_size, img_size)
        patch_size = (patch_size, patch_size)
        self.tubelet_size = int(tubelet_size)
        self.num_patches = ((img_size[1] // patch_size[1]) * (img_size[0] // patch_size[0]) *
                            (num_frames // self.tubelet_size))
        self.proj = nn.Conv3d(in_channels=in_chans, out_channels=embed_dim,
                              kernel_size=(self.tubelet_size, patch_size[0], patch_size[1]),
                              stride=(self.tubelet_size, patch_size[0], patch_size[1]))

    def forward(self, x):
        return self.proj(x)  # (B, embed_dim, n_t, n_h, n_w)


def get_sinusoid_encoding_table(n_position, d_hid):
    """Sinusoid position encoding table (VideoMAE's), float32 as the seed's code returns it."""
    def get_position_angle_vec(position):
        return [position / np.power(10000, 2 * (hid_j // 2) / d_hid) for hid_j in range(d_hid)]

    sinusoid_table = np.array([get_position_angle_vec(pos_i) for pos_i in range(n_position)])
    sinusoid_table[:, 0::2] = np.sin(sinusoid_table[:, 0::2])
    sinusoid_table[:, 1::2] = np.cos(sinusoid_table[:, 1::2])
    return torch.tensor(sinusoid_table, dtype=torch.float, requires_grad=False).unsqueeze(0)


def interpolate_pos_embed_online(pos_embed, orig_size, new_size, num_extra_tokens):
    """pos_embed (T, H0 W0 [+ extra], C) -> (T, H1 W1 [+ extra], C): bicubic over each slice."""
    extra_tokens = pos_embed[:, :num_extra_tokens]
    pos_tokens = pos_embed[:, num_extra_tokens:]
    embedding_size = pos_tokens.shape[-1]
    pos_tokens = pos_tokens.reshape(-1, orig_size[0], orig_size[1], embedding_size).permute(0, 3, 1, 2)
    pos_tokens = F.interpolate(pos_tokens, size=new_size, mode="bicubic", align_corners=False)
    pos_tokens = pos_tokens.permute(0, 2, 3, 1).flatten(1, 2)
    return torch.cat((extra_tokens, pos_tokens), dim=1)


class ViT(nn.Module):
    """The seed's ViT backbone (_construct_network and forward), plus the fixture's head."""

    def __init__(self, c, use_checkpoint=False, drop_path_rate=0.):
        super().__init__()
        norm_layer = lambda d: nn.LayerNorm(d, eps=1e-6)  # partial(nn.LayerNorm, eps=1e-6)
        self.depth = c["depth"]
        self.tubelet_size = c["tubelet_size"]
        self.use_checkpoint = use_checkpoint
        self.num_frames = c["num_frames"]
        self.patch_embed = PatchEmbed(img_size=c["pretrain_img_size"], patch_size=c["patch_size"],
                                      in_chans=c["in_chans"], embed_dim=c["embed_dim"],
                                      num_frames=c["num_frames"], tubelet_size=self.tubelet_size)
        num_patches = self.patch_embed.num_patches
        self.grid_size = [c["pretrain_img_size"] // c["patch_size"]] * 2
        self.pos_embed = get_sinusoid_encoding_table(num_patches, c["embed_dim"])  # fixed, not a parameter
        self.pos_drop = nn.Dropout(p=0.)
        dpr = [x.item() for x in torch.linspace(0, drop_path_rate, self.depth)]
        self.blocks = nn.ModuleList([
            Block(dim=c["embed_dim"], num_heads=c["num_heads"], mlp_ratio=c["mlp_ratio"],
                  qkv_bias=c["qkv_bias"], qk_scale=None, drop=0., attn_drop=0., drop_path=dpr[i],
                  norm_layer=norm_layer, init_values=c["init_values"], use_checkpoint=use_checkpoint)
            for i in range(self.depth)])
        self.norm = norm_layer(c["embed_dim"])
        # the fixture's head (not STMixer's): VideoMAEForVideoClassification without mean pooling
        self.head = nn.Linear(c["embed_dim"], c["num_labels"])

    def forward_features(self, x_list, keep_blocks=False):
        """The seed's forward: [x] (B, C, T, H, W) -> features [x, x, x, x]; keep_blocks also
        returns the token sequence after the embedding and after each block (before the norm)."""
        x = x_list[0]
        x = self.patch_embed(x)
        ws = x.shape[2:]
        assert ws[0] % 2 == 0, "n_t should be even"
        x = x.flatten(2).transpose(1, 2).contiguous()  # b, thw, C
        B, _, C = x.shape
        pos_embed = self.pos_embed.reshape(self.num_frames // self.tubelet_size, -1, C)
        pos_embed = interpolate_pos_embed_online(pos_embed, self.grid_size, [ws[1], ws[2]], 0).reshape(1, -1, C)
        x = x + pos_embed.type_as(x).to(x.device).clone().detach()
        x = self.pos_drop(x)
        states = [x]
        for i in range(self.depth):
            blk = self.blocks[i]
            if self.use_checkpoint:
                x = checkpoint.checkpoint(blk, x, use_reentrant=False)
            else:
                x = blk(x)
            states.append(x)
        x = self.norm(x)
        tokens = x
        x = x.reshape(B, ws[0], ws[1], ws[2], -1).permute(0, 4, 1, 2, 3).contiguous()
        features = [x, x, x, x]
        if keep_blocks:
            maps = [s.reshape(B, ws[0], ws[1], ws[2], -1).permute(0, 4, 1, 2, 3) for s in states]
            return features, tokens, maps, states
        return features

    def forward(self, pixel_values, keep_blocks=False):
        """pixel_values (B, T, C, H, W) as Hugging Face and tubelet take them."""
        out = self.forward_features([pixel_values.permute(0, 2, 1, 3, 4)], keep_blocks=True)
        features, tokens, maps, states = out
        logits = self.head(features[0][:, :, 0, 0, 0])
        return logits, features, tokens, maps, states


# ----------------------------------------------------------------------------------------------
# names: the seed's modules -> Hugging Face VideoMAE's (+ lambda_1, lambda_2)
# ----------------------------------------------------------------------------------------------

# per block: the reference's parameter (after "blocks.{i}.") -> Hugging Face's (after
# "videomae.encoder.layer.{i}."); gamma_1/gamma_2 only with layer scale
BLOCK_NAMES = {"attn.q_bias": "attention.attention.q_bias",
               "attn.v_bias": "attention.attention.v_bias",
               "attn.proj.weight": "attention.output.dense.weight",
               "attn.proj.bias": "attention.output.dense.bias",
               "norm1.weight": "layernorm_before.weight", "norm1.bias": "layernorm_before.bias",
               "norm2.weight": "layernorm_after.weight", "norm2.bias": "layernorm_after.bias",
               "mlp.fc1.weight": "intermediate.dense.weight", "mlp.fc1.bias": "intermediate.dense.bias",
               "mlp.fc2.weight": "output.dense.weight", "mlp.fc2.bias": "output.dense.bias",
               "gamma_1": "lambda_1", "gamma_2": "lambda_2"}


def to_hf(sd, c):
    """The reference's state dict under the names tubelet reads (docs/stmixer-backbone.md)."""
    D = c["embed_dim"]
    out = {"videomae.embeddings.patch_embeddings.projection.weight": sd["patch_embed.proj.weight"],
           "videomae.embeddings.patch_embeddings.projection.bias": sd["patch_embed.proj.bias"]}
    for i in range(c["depth"]):
        s, h = f"blocks.{i}.", f"videomae.encoder.layer.{i}."
        qkv = sd[s + "attn.qkv.weight"]
        out[h + "attention.attention.query.weight"] = qkv[:D]
        out[h + "attention.attention.key.weight"] = qkv[D:2 * D]
        out[h + "attention.attention.value.weight"] = qkv[2 * D:]
        for src, dst in BLOCK_NAMES.items():
            if s + src in sd:
                out[h + dst] = sd[s + src]
    out["videomae.layernorm.weight"] = sd["norm.weight"]
    out["videomae.layernorm.bias"] = sd["norm.bias"]
    out["classifier.weight"] = sd["head.weight"]
    out["classifier.bias"] = sd["head.bias"]
    assert len(out) == len(sd) + c["depth"] * 2, "every parameter mapped once (qkv split in three)"
    return {k: v.detach().contiguous() for k, v in out.items()}


def hf_grads(grads, c):
    """Gradients under the Hugging Face names (qkv's split like its weight)."""
    return to_hf(grads, c)


def hf_config(c, layer_scale):
    """config.json: what VideoMAEConfig.save_pretrained writes, + layer_scale_init_value."""
    cfg = VideoMAEConfig(image_size=c["pretrain_img_size"], patch_size=c["patch_size"],
                         num_channels=c["in_chans"], num_frames=c["num_frames"],
                         tubelet_size=c["tubelet_size"], hidden_size=c["embed_dim"],
                         num_hidden_layers=c["depth"], num_attention_heads=c["num_heads"],
                         intermediate_size=int(c["embed_dim"] * c["mlp_ratio"]), hidden_act="gelu",
                         layer_norm_eps=1e-6, qkv_bias=c["qkv_bias"], use_mean_pooling=False,
                         num_labels=c["num_labels"], hidden_dropout_prob=0.0,
                         attention_probs_dropout_prob=0.0)
    with tempfile.TemporaryDirectory() as t:
        cfg.save_pretrained(t)
        with open(os.path.join(t, "config.json")) as f:
            j = json.load(f)
    j.pop("transformers_version", None)
    if layer_scale:
        j["layer_scale_init_value"] = c["init_values"]
    return j


# ----------------------------------------------------------------------------------------------
# checks
# ----------------------------------------------------------------------------------------------

@torch.no_grad()
def randomize_(model, gen):
    """Every parameter random (as tools/make_fixtures.py): LayerNorm weight 1 + 0.2 N, biases and
    q/v biases 0.1 N, Linear / Conv weights N / sqrt(fan_in), gamma init_values (1 + 0.5 N)."""
    for name, p in sorted(model.named_parameters(), key=lambda kv: kv[0]):
        r = torch.randn(p.shape, generator=gen, dtype=torch.float64)
        leaf = name.rsplit(".", 1)[-1]
        if "norm" in name.rsplit(".", 2)[-2]:
            v = 1.0 + 0.2 * r if leaf == "weight" else 0.1 * r
        elif leaf.startswith("gamma"):
            v = p.detach().double() * (1.0 + 0.5 * r)
        elif leaf in ("bias", "q_bias", "v_bias"):
            v = 0.1 * r
        else:
            v = r / math.sqrt(p[0].numel())
        p.copy_(v.to(p.dtype))


def loss_and_grads(model, x, labels):
    model.zero_grad(set_to_none=True)
    loss = F.cross_entropy(model(x)[0], labels)
    loss.backward()
    g = {n: p.grad.detach().clone() for n, p in model.named_parameters()}
    model.zero_grad(set_to_none=True)
    return loss.detach(), g


def rel(a, b):
    return ((a - b).abs().max() / max(1.0, b.abs().max().item())).item()


def grad_rel(g, ref):
    den = ref.abs().max().item()
    return (g - ref).abs().max().item() / (den if den > 0 else 1.0)


@torch.no_grad()
def check_against_hf(model, x, c, fold):
    """The reference against transformers' VideoMAEForVideoClassification (eager attention) on the
    same weights; with fold, the layer scale is folded into the output projections and transformers
    runs without it. Returns the largest relative difference of logits and last_hidden_state."""
    sd = {k: v.clone() for k, v in model.state_dict().items() if k != "pos_embed"}
    if fold:
        for i in range(c["depth"]):
            s = f"blocks.{i}."
            for gamma, lin in (("gamma_1", "attn.proj"), ("gamma_2", "mlp.fc2")):
                g = sd.pop(s + gamma)
                sd[s + lin + ".weight"] = g[:, None] * sd[s + lin + ".weight"]
                sd[s + lin + ".bias"] = g * sd[s + lin + ".bias"]
    c0 = dict(c, init_values=0.0)
    w = to_hf(sd, c0)
    with tempfile.TemporaryDirectory() as t:
        with open(os.path.join(t, "config.json"), "w") as f:
            json.dump(hf_config(c0, False), f)
        save_file({k: v.to(torch.float32) for k, v in w.items()}, os.path.join(t, "model.safetensors"),
                  metadata={"format": "pt"})
        hf = VideoMAEForVideoClassification.from_pretrained(t, dtype=torch.float64, attn_implementation="eager").eval()
    # the reference's float32 weights, exactly (from_pretrained read them back from float32)
    hf.load_state_dict({k.replace("attention.attention.q_bias", "attention.attention.query.bias")
                        .replace("attention.attention.v_bias", "attention.attention.value.bias"): v.to(torch.float64)
                        for k, v in w.items()}, strict=True)
    out = hf(pixel_values=x, output_hidden_states=True)
    hidden = hf.videomae(pixel_values=x).last_hidden_state
    logits, _, tokens, _, _ = model(x)
    return max(rel(out.logits, logits), rel(hidden, tokens))


# ----------------------------------------------------------------------------------------------
# fixture
# ----------------------------------------------------------------------------------------------

def make_fixture(root, verify, check):
    c = CFG
    torch.manual_seed(SEED)
    gen = torch.Generator().manual_seed(SEED)
    model = ViT(c)
    randomize_(model, gen)
    B, S = 2, c["pretrain_img_size"]
    x32 = torch.randn((B, c["num_frames"], c["in_chans"], S, S), generator=gen, dtype=torch.float32)
    others = [torch.randn((1, c["num_frames"], c["in_chans"], h, w), generator=gen, dtype=torch.float32)
              for h, w in OTHER_SIZES]
    weights32 = {k: v.detach().to(torch.float32).contiguous() for k, v in model.state_dict().items()
                 if k != "pos_embed"}

    # float64 forward and autograd of the float32 weights as stored, checkpointing on
    model = ViT(c, use_checkpoint=True).to(torch.float64).eval()
    model.load_state_dict({k: v.to(torch.float64) for k, v in weights32.items()}, strict=False)
    model.pos_embed = get_sinusoid_encoding_table(model.patch_embed.num_patches, c["embed_dim"])
    x = x32.to(torch.float64)
    with torch.no_grad():
        logits, features, tokens, maps, states = model(x)
        feats_other = [model(o.to(torch.float64))[1][0] for o in others]
    assert all(f is features[0] for f in features), "features = [x, x, x, x]"
    rng = np.random.default_rng(SEED + LABEL_SEED_OFFSET)
    labels_np = rng.integers(0, c["num_labels"], size=B, dtype=np.int64)
    labels = torch.from_numpy(labels_np)
    loss, grads = loss_and_grads(model, x, labels)
    weights = to_hf(weights32, c)
    grads32 = {k: g.to(torch.float32).contiguous() for k, g in hf_grads(grads, c).items()}
    assert set(grads32) == set(weights)

    info = dict(name=NAME, loss=loss.item(), tensors=len(weights),
                params=sum(v.numel() for v in weights.values()))
    if verify:
        model.use_checkpoint = False
        for b in model.blocks:
            b.use_checkpoint = False
        l2, g2 = loss_and_grads(model, x, labels)
        info["checkpoint_vs_not"] = max(grad_rel(g2[k], grads[k]) for k in grads)
        assert info["checkpoint_vs_not"] < 1e-14 and abs(l2 - loss) < 1e-14
        info["hf_layer_scale_folded"] = check_against_hf(model, x, c, fold=True)
        plain = ViT(dict(c, init_values=0.0)).to(torch.float64).eval()
        plain.load_state_dict({k: v for k, v in model.state_dict().items() if "gamma" not in k})
        info["hf_no_layer_scale"] = check_against_hf(plain, x, dict(c, init_values=0.0), fold=False)
        assert info["hf_layer_scale_folded"] < 1e-12 and info["hf_no_layer_scale"] < 1e-12
        info["fd"], _ = fd_check(model, lambda: F.cross_entropy(model(x)[0], labels).item(), grads,
                                 SEED)
        assert info["fd"] < 1e-6, f"finite differences disagree ({info['fd']:.3g})"
        m32 = ViT(c).eval()
        m32.load_state_dict(weights32, strict=False)
        _, g32 = loss_and_grads(m32, x32, labels)
        info["f32_grad_rel"] = max(grad_rel(g32[k].to(torch.float64), grads[k]) for k in grads)
        assert info["f32_grad_rel"] < 2e-5, f"float32 gradients off by {info['f32_grad_rel']:.3g}"
        gmax = max(g.abs().max().item() for g in grads.values())
        for k, g in grads.items():
            assert torch.isfinite(g).all() and g.abs().max().item() > 1e-6 * gmax, f"degenerate gradient of {k}"
        info["other_sizes"] = [list(f.shape) for f in feats_other]

    f32 = lambda t: t.to(torch.float32).numpy()
    files = {"input.npy": x32.numpy(), "logits.npy": f32(logits), "hidden.npy": f32(tokens),
             "hidden_layer1.npy": f32(states[1]), "features.npy": f32(features[0]),
             "features_layers.npy": f32(torch.stack(maps)), "labels.npy": labels_np,
             "loss.npy": np.asarray(loss.item(), dtype=np.float32)}
    for (h, w), o, fo in zip(OTHER_SIZES, others, feats_other):
        files[f"input_{h}x{w}.npy"] = o.numpy()
        files[f"features_{h}x{w}.npy"] = f32(fo)
    d = os.path.join(root, NAME)
    cfg_json = dict(sorted({**hf_config(c, True), "transformers_version": transformers.__version__}.items()))
    tensors = {"model.safetensors": weights, "grads.safetensors": grads32}
    if check:
        check_fixture(d, cfg_json, files, tensors)
        return info
    meta = dict(family="videomae", **{"class": "tools/stmixer_backbone_ref.py:ViT"},
                note="STMixer backbone (seed 001): VideoMAE ViT, Conv3d tubelet 2x4x4, fixed sinusoid "
                     "positions resized bicubically per temporal slice for other input sizes, q/v bias, "
                     "layer scale gamma_1/gamma_2 (stored as lambda_1/lambda_2, init_values 0.5, "
                     "randomised), LayerNorm eps 1e-6, final norm, features (B, D, T/2, H/4, W/4); "
                     "head: classifier on token 0 of the final-normed sequence; 2 blocks, hidden 32, "
                     "2 heads of size 16, grid 2x5x5.",
                seed=SEED, weights_dtype="float32", input_shape=list(x32.shape),
                logits_shape=list(logits.shape), hidden_shape=list(tokens.shape),
                features_shape=list(features[0].shape), other_sizes=[list(s) for s in OTHER_SIZES],
                weight_files=["model.safetensors"],
                expected="float64 forward and autograd (use_checkpoint on) of tools/stmixer_backbone_ref.py "
                         "on the stored weights, saved as float32",
                generated_with=dict(torch=torch.__version__, transformers=transformers.__version__))
    info["bytes"] = write_fixture(d, cfg_json, files, tensors, meta)
    return info


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.path.join(REPO, "tests", "fixtures"))
    ap.add_argument("--no-verify", action="store_true")
    ap.add_argument("--check", action="store_true", help="recompute and compare with the files on disk")
    args = ap.parse_args()
    torch.set_num_threads(1)
    info = make_fixture(args.out, not args.no_verify, args.check)
    print(" ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}" for k, v in info.items()))
    if not args.check:
        add_to_list(os.path.join(args.out, "list.txt"), [NAME])
        add_to_list(os.path.join(args.out, "grad_list.txt"), [NAME])
    print(f"torch {torch.__version__}, transformers {transformers.__version__}")


if __name__ == "__main__":
    sys.exit(main())
