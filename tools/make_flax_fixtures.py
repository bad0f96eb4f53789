#!/usr/bin/env python3
"""Fixtures for tests/test_flax.c: tiny random-weight ViViT models in scenic's Flax layout,
written by flax.serialization.to_bytes as scenic's (flax.training.checkpoints) save_checkpoint
writes them, and the logits of the Flax model itself.

Usage:
    PY tools/make_flax_fixtures.py [--out tests/fixtures/flax]

PY needs flax and jax (`pip install flax`; written with flax 0.12.8, jax 0.10.2) besides torch and
transformers. To keep /work/venv as it is, a venv of its own that also sees /work/venv's packages:
    /work/venv/bin/python -m venv /tmp/flaxenv
    echo /work/venv/lib/python3.11/site-packages > /tmp/flaxenv/lib/python3.11/site-packages/base.pth
    /tmp/flaxenv/bin/pip install flax

The models below follow google-research/scenic projects/vivit/model.py module by module (ViViT,
SpaceTimeViViT, Encoder, EncoderBlock, EncoderFactorizedSelfAttentionBlock, vit.AddPositionEmbs,
attention_layers.MlpBlock, model_utils.factorized_dot_product_attention), so that flax itself
names the parameters: embedding, cls, Transformer/posembed_input/pos_embedding,
Transformer/encoderblock_N/{LayerNorm_0, MultiHeadDotProductAttention_0, LayerNorm_1, MlpBlock_0},
encoder_norm, output_projection; cls_SpatialTransformer, SpatialTransformer/...,
TemporalTransformer/...; {LayerNorm,MultiHeadDotProductAttention}_{space,time}, LayerNorm_mlp,
MlpBlock. The parameters are initialised by flax, then every leaf is made random (scenic
initialises cls and output_projection to zero, which would hide mistakes).

For each case this writes tests/fixtures/flax/<case>/ with

    model.msgpack    flax.serialization.to_bytes(state): scenic's old train state
                     {"optimizer": {"target": params, "state": {"step", "param_states"}}, ...}
                     (the published checkpoints), its newer {"params": ..., "opt_state": ...}, or
                     the parameters alone
    model_bf16.msgpack  (Model 1) the same parameters stored as bfloat16
    config.json      only where the tensors cannot say the input size
    expected.npy     the Flax model's logits (float32) for the input below
    expected_bf16.npy  those of the bfloat16 parameters

and list.txt ("<case> <file> <expected> <frames> <height> <width>" per line). The input is
pixel_values (2, T, 3, H, W) with element i = ((i * 2654435761) mod 2^32) / 2^32 - 0.5 (tubelet's
test computes the same numbers; no input file is stored).

The logits are checked before they are written against two other implementations fed the same
weights renamed to Hugging Face's names (the renaming is ported from transformers'
convert_vivit_flax_to_pytorch.py, and extended with its own rules to Models 2-4): transformers'
VivitForVideoClassification for Model 1, and tools/vivit_variants_ref.py (the paper's equations,
in torch, float64) for Models 1-4.
"""
import argparse
import functools
import json
import os
import shutil
import sys

import numpy as np

import flax
import flax.linen as nn
import jax
import jax.numpy as jnp
from flax import serialization

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

jax.config.update("jax_default_matmul_precision", "highest")


# ---- scenic's ViViT, module by module --------------------------------------------------------
class MlpBlock(nn.Module):  # scenic.model_lib.layers.attention_layers.MlpBlock
    mlp_dim: int

    @nn.compact
    def __call__(self, x):
        y = nn.Dense(self.mlp_dim)(x)
        y = nn.gelu(y)  # flax's default: the tanh approximation
        return nn.Dense(x.shape[-1])(y)


class AddPositionEmbs(nn.Module):  # scenic.projects.baselines.vit.AddPositionEmbs
    @nn.compact
    def __call__(self, x):
        pe = self.param("pos_embedding", nn.initializers.normal(stddev=0.02), (1,) + x.shape[1:])
        return x + pe


def factorized_dot_product_attention(query, key, value, **kwargs):
    """scenic.projects.vivit.model_utils: the first half of the heads attends over time (axis 1),
    the second over space (axis 2); inputs [b, t, hw, heads, c]."""
    query = query / jnp.sqrt(query.shape[-1]).astype(query.dtype)
    outs = []
    for i, (q, k, v) in enumerate(zip(*(jnp.split(u, 2, axis=-2) for u in (query, key, value)))):
        b = "abcdefghijk"[: i + 1]
        w = jax.nn.softmax(jnp.einsum(f"{b}x...z,{b}y...z->{b}x...y", q, k), axis=-1)
        outs.append(jnp.einsum(f"{b}x...y,{b}y...z->{b}x...z", w, v))
    return jnp.concatenate(outs, axis=-2)


class EncoderBlock(nn.Module):
    mlp_dim: int
    num_heads: int
    attention_fn: object = nn.dot_product_attention

    @nn.compact
    def __call__(self, inputs):
        x = nn.LayerNorm()(inputs)
        x = nn.MultiHeadDotProductAttention(num_heads=self.num_heads,
                                            attention_fn=self.attention_fn)(x, x)
        x = x + inputs
        y = nn.LayerNorm()(x)
        return MlpBlock(self.mlp_dim)(y) + x


class EncoderFactorizedSelfAttentionBlock(nn.Module):
    mlp_dim: int
    num_heads: int
    temporal_dims: int

    @nn.compact
    def __call__(self, inputs):
        b, thw, d = inputs.shape
        t, hw = self.temporal_dims, thw // self.temporal_dims
        x = inputs.reshape(b, t, hw, d)
        for axis in (2, 1):  # attention_order 'space_time' (the paper's; tubelet's)
            name = {1: "time", 2: "space"}[axis]
            y = x.reshape(b * t, hw, d) if axis == 2 else x.transpose(0, 2, 1, 3).reshape(b * hw, t, d)
            z = nn.LayerNorm(name=f"LayerNorm_{name}")(y)
            z = nn.MultiHeadDotProductAttention(num_heads=self.num_heads,
                                                name=f"MultiHeadDotProductAttention_{name}")(z, z)
            z = z + y
            x = z.reshape(b, t, hw, d) if axis == 2 else z.reshape(b, hw, t, d).transpose(0, 2, 1, 3)
        x = x.reshape(b, thw, d)
        y = nn.LayerNorm(name="LayerNorm_mlp")(x)
        return x + MlpBlock(self.mlp_dim, name="MlpBlock")(y)


class Encoder(nn.Module):
    temporal_dims: int
    mlp_dim: int
    num_layers: int
    num_heads: int
    attention: str = "spacetime"

    @nn.compact
    def __call__(self, x):
        x = AddPositionEmbs(name="posembed_input")(x)
        b, thw, d = x.shape
        if self.attention == "factorized_self_attention_block":
            block = functools.partial(EncoderFactorizedSelfAttentionBlock, temporal_dims=self.temporal_dims)
        elif self.attention == "factorized_dot_product_attention":
            x = x.reshape(b, self.temporal_dims, thw // self.temporal_dims, d)
            block = functools.partial(EncoderBlock, attention_fn=factorized_dot_product_attention)
        else:
            block = EncoderBlock
        for i in range(self.num_layers):
            x = block(mlp_dim=self.mlp_dim, num_heads=self.num_heads, name=f"encoderblock_{i}")(x)
        x = x.reshape(b, thw, d)
        return nn.LayerNorm(name="encoder_norm")(x)


class ViViT(nn.Module):  # Models 1, 3, 4
    cfg: dict

    @nn.compact
    def __call__(self, x):  # (n, t, h, w, c)
        c = self.cfg
        ft, fh, fw = c["tubelet"]
        if c.get("embed_2d"):  # temporal_encoding "temporal_sampling": frames stacked, 2D patches
            n, t, h, w, ch = x.shape
            x = nn.Conv(c["hidden"], (fh, fw), strides=(fh, fw), padding="VALID",
                        name="embedding")(x.reshape(n, t * h, w, ch))
            x = x.reshape(n, -1, x.shape[-1])
            d = x.shape[-1]
        else:  # "3d_conv": tubelet embedding
            x = nn.Conv(c["hidden"], (ft, fh, fw), strides=(ft, fh, fw), padding="VALID", name="embedding")(x)
            n, t, h, w, d = x.shape
            x = x.reshape(n, t * h * w, d)
        token = c["attention"] == "spacetime"
        if token:
            cls = self.param("cls", nn.initializers.zeros, (1, 1, d))
            x = jnp.concatenate([jnp.tile(cls, [n, 1, 1]), x], axis=1)
        x = Encoder(temporal_dims=t, mlp_dim=c["mlp"], num_layers=c["layers"], num_heads=c["heads"],
                    attention=c["attention"], name="Transformer")(x)
        x = x[:, 0] if token else jnp.mean(x, axis=1)
        return nn.Dense(c["classes"], kernel_init=nn.initializers.zeros, name="output_projection")(x)


class SpaceTimeViViT(nn.Module):  # Model 2, classifier 'token'
    cfg: dict

    @nn.compact
    def __call__(self, x):
        c = self.cfg
        ft, fh, fw = c["tubelet"]
        x = nn.Conv(c["hidden"], (ft, fh, fw), strides=(ft, fh, fw), padding="VALID", name="embedding")(x)
        n, t, h, w, d = x.shape

        def vit_body(x, num_layers, name):
            cls = self.param(f"cls_{name}", nn.initializers.zeros, (1, 1, d))
            x = jnp.concatenate([jnp.tile(cls, [x.shape[0], 1, 1]), x], axis=1)
            x = Encoder(temporal_dims=None, mlp_dim=c["mlp"], num_layers=num_layers,
                        num_heads=c["heads"], name=name)(x)
            return x[:, 0]

        # scenic vmaps vit_body over time with shared parameters: the same as frames as a batch
        x = vit_body(x.reshape(n * t, h * w, d), c["layers"], "SpatialTransformer").reshape(n, t, d)
        x = vit_body(x, c["temporal_layers"], "TemporalTransformer")
        return nn.Dense(c["classes"], kernel_init=nn.initializers.zeros, name="output_projection")(x)


# ---- the cases --------------------------------------------------------------------------------
BASE = dict(hidden=8, heads=2, mlp=16, layers=2, classes=5, channels=3)
CASES = [
    # Model 1 as published: optimizer/target; 224 x 224 input read from the positions (no config)
    dict(name="vivit_m1", model=1, attention="spacetime", tubelet=(2, 16, 16), frames=2, size=(224, 224),
         wrap="optimizer", bf16=True, config=False),
    # Model 2: scenic's newer TrainState {"params": ...}; everything inferred from the positions
    dict(name="vivit_m2", model=2, attention="factorized_encoder", tubelet=(2, 4, 4), frames=6,
         size=(16, 16), wrap="params", temporal_layers=1, config=False),
    # Model 3: the parameters alone; its input size from a config.json beside the file
    dict(name="vivit_m3", model=3, attention="factorized_self_attention_block", tubelet=(2, 4, 4),
         frames=4, size=(12, 16), wrap="none", config=True),
    # Model 4: uniform frame sampling (2D patches), 4 heads, 224 x 224, optimizer/target
    dict(name="vivit_m4", model=4, attention="factorized_dot_product_attention", tubelet=(1, 16, 16),
         frames=3, size=(224, 224), wrap="optimizer", heads=4, embed_2d=True, config=False),
]


def pixels(shape):
    """The test input: element i = ((i * 2654435761) mod 2^32) / 2^32 - 0.5 (exact in float32)."""
    i = np.arange(int(np.prod(shape)), dtype=np.uint64)
    return (((i * np.uint64(2654435761)) % np.uint64(2 ** 32)).astype(np.float64) / 2 ** 32 - 0.5) \
        .astype(np.float32).reshape(shape)


def randomise(params, rng):
    """Every leaf random: LayerNorm scale 1 + 0.2 N, biases 0.1 N, kernels N / sqrt(fan in),
    positions and cls tokens 0.5 N."""
    flat = flax.traverse_util.flatten_dict(flax.core.unfreeze(params))
    out = {}
    for path in sorted(flat):
        shape, leaf = flat[path].shape, path[-1]
        r = rng.standard_normal(shape)
        if leaf == "scale":
            v = 1 + 0.2 * r
        elif leaf == "bias":
            v = 0.1 * r
        elif leaf == "kernel":
            parent = path[-2]
            fan_in = shape[0] if parent in ("query", "key", "value") else int(np.prod(shape[:-1]))
            v = r / np.sqrt(fan_in)
        else:
            v = 0.5 * r
        out[path] = jnp.asarray(v, dtype=jnp.float32)
    return flax.traverse_util.unflatten_dict(out)


def wrap(params, how, rng):
    """The state a training script saves around the parameters."""
    if how == "optimizer":  # flax.optim (scenic's published ViViT checkpoints): Momentum
        moments = jax.tree_util.tree_map(lambda p: {"momentum": np.asarray(p) * 0.01}, params)
        return {"optimizer": {"target": params, "state": {"step": np.int64(1000), "param_states": moments}},
                "global_step": 1000, "model_state": {}, "rng": np.array([0, 42], dtype=np.uint32),
                "accum_train_time": 12.5, "metadata": {"chrono": {"note": "fixture"}}}
    if how == "params":  # scenic's newer TrainState (optax)
        mu = jax.tree_util.tree_map(lambda p: np.asarray(p) * 0.01, params)
        return {"global_step": np.int32(7), "opt_state": {"0": {"count": np.int32(7), "mu": mu}},
                "params": params, "model_state": {}, "rng": np.array([1, 2], dtype=np.uint32)}
    return params


# ---- Hugging Face names (transformers' convert_vivit_flax_to_pytorch.py, extended) ----------
def hf_state(params, case):
    """scenic parameters -> the names of transformers' ViViT (Model 1, as the conversion script)
    and of tubelet's Models 2-4 (docs/vivit-variants.md)."""
    P = {"/".join(k): np.asarray(v, dtype=np.float64) for k, v in flax.traverse_util.flatten_dict(params).items()}
    s = {}
    swap = case["model"] == 4  # scenic: heads [0, H/2) over time; tubelet's: over space

    def heads(a, axis):
        if not swap:
            return a
        h = a.shape[axis] // 2
        return np.concatenate([np.take(a, range(h, 2 * h), axis), np.take(a, range(h), axis)], axis)

    def ln(f, t):
        s[t + ".weight"], s[t + ".bias"] = P[f + "/scale"], P[f + "/bias"]

    def dense(f, t):
        s[t + ".weight"], s[t + ".bias"] = P[f + "/kernel"].T, P[f + "/bias"]

    def mha(f, t):
        for q in ("query", "key", "value"):
            k = heads(P[f"{f}/{q}/kernel"], 1)
            s[f"{t}.attention.{q}.weight"] = k.reshape(k.shape[0], -1).T
            s[f"{t}.attention.{q}.bias"] = heads(P[f"{f}/{q}/bias"], 0).reshape(-1)
        o = heads(P[f"{f}/out/kernel"], 0)
        s[f"{t}.output.dense.weight"] = o.reshape(-1, o.shape[-1]).T
        s[f"{t}.output.dense.bias"] = P[f"{f}/out/bias"]

    def block(f, t):
        ln(f + "/LayerNorm_0", t + ".layernorm_before")
        mha(f + "/MultiHeadDotProductAttention_0", t + ".attention")
        ln(f + "/LayerNorm_1", t + ".layernorm_after")
        dense(f + "/MlpBlock_0/Dense_0", t + ".intermediate.dense")
        dense(f + "/MlpBlock_0/Dense_1", t + ".output.dense")

    k = P["embedding/kernel"]
    if k.ndim == 4:
        k = k[None]
    s["vivit.embeddings.patch_embeddings.projection.weight"] = np.transpose(k, (4, 3, 0, 1, 2))
    s["vivit.embeddings.patch_embeddings.projection.bias"] = P["embedding/bias"]
    dense("output_projection", "classifier")
    L = case.get("layers", BASE["layers"])
    if case["model"] == 2:
        s["vivit.embeddings.cls_token"] = P["cls_SpatialTransformer"]
        s["vivit.embeddings.position_embeddings"] = P["SpatialTransformer/posembed_input/pos_embedding"]
        for i in range(L):
            block(f"SpatialTransformer/encoderblock_{i}", f"vivit.encoder.layer.{i}")
        ln("SpatialTransformer/encoder_norm", "vivit.layernorm")
        s["vivit.temporal_embeddings.cls_token"] = P["cls_TemporalTransformer"]
        s["vivit.temporal_embeddings.position_embeddings"] = P["TemporalTransformer/posembed_input/pos_embedding"]
        for i in range(case["temporal_layers"]):
            block(f"TemporalTransformer/encoderblock_{i}", f"vivit.temporal_encoder.layer.{i}")
        ln("TemporalTransformer/encoder_norm", "vivit.temporal_layernorm")
        return s
    if case["model"] == 1:
        s["vivit.embeddings.cls_token"] = P["cls"]
    s["vivit.embeddings.position_embeddings"] = P["Transformer/posembed_input/pos_embedding"]
    for i in range(L):
        f, t = f"Transformer/encoderblock_{i}", f"vivit.encoder.layer.{i}"
        if case["model"] == 3:
            ln(f + "/LayerNorm_space", t + ".layernorm_before")
            mha(f + "/MultiHeadDotProductAttention_space", t + ".attention")
            ln(f + "/LayerNorm_time", t + ".temporal_layernorm")
            mha(f + "/MultiHeadDotProductAttention_time", t + ".temporal_attention")
            ln(f + "/LayerNorm_mlp", t + ".layernorm_after")
            dense(f + "/MlpBlock/Dense_0", t + ".intermediate.dense")
            dense(f + "/MlpBlock/Dense_1", t + ".output.dense")
        else:
            block(f, t)
    ln("Transformer/encoder_norm", "vivit.layernorm")
    return s


def hf_config(case):
    variant = {1: "joint", 2: "factorised_encoder", 3: "factorised_self_attention",
               4: "factorised_dot_product"}[case["model"]]
    size = case["size"][0] if case["size"][0] == case["size"][1] else list(case["size"])
    c = dict(model_type="vivit", image_size=size, num_frames=case["frames"],
             tubelet_size=list(case["tubelet"]), num_channels=BASE["channels"],
             hidden_size=BASE["hidden"], num_hidden_layers=case.get("layers", BASE["layers"]),
             num_attention_heads=case.get("heads", BASE["heads"]), intermediate_size=BASE["mlp"],
             hidden_act="gelu_fast", layer_norm_eps=1e-6, qkv_bias=True,
             id2label={str(i): f"LABEL_{i}" for i in range(BASE["classes"])},
             label2id={f"LABEL_{i}": i for i in range(BASE["classes"])})
    if case["model"] != 1:
        c["model_variant"] = variant
    if case["model"] == 2:
        c["num_temporal_layers"] = case["temporal_layers"]
    return c


def check_against_references(case, params, x, logits):
    """The Flax logits against transformers (Model 1) and tools/vivit_variants_ref.py (all)."""
    import torch
    from vivit_variants_ref import Vivit, full_config
    sd = hf_state(params, case)
    cfg = hf_config(case)
    fc = full_config({k: v for k, v in cfg.items() if k not in ("id2label", "label2id", "model_type")}
                     | {"num_labels": BASE["classes"]})
    ref = Vivit(fc).double()
    ref.load_state_dict({k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in sd.items()}, strict=True)
    with torch.no_grad():
        got = ref(torch.from_numpy(x).double())[0].numpy()
    err = np.abs(got - logits).max() / max(1.0, np.abs(got).max())
    print(f"  {case['name']}: vivit_variants_ref.py vs flax: max rel error {err:.2e}")
    assert err < 1e-4, err
    errs = {"vivit_variants_ref": float(err)}
    if case["model"] == 1:
        from transformers import VivitConfig, VivitForVideoClassification
        hf = VivitForVideoClassification(VivitConfig(**{k: v for k, v in cfg.items() if k != "model_type"})).double().eval()
        new = {}
        for k, v in sd.items():  # the file's (legacy) names -> transformers 5's module names
            k = k.replace("vivit.encoder.layer.", "vivit.layers.")
            for a, b in (("attention.attention.query", "attention.q_proj"), ("attention.attention.key", "attention.k_proj"),
                         ("attention.attention.value", "attention.v_proj"), ("attention.output.dense", "attention.o_proj"),
                         ("intermediate.dense", "mlp.fc1"), ("output.dense", "mlp.fc2")):
                k = k.replace(a, b)
            new[k] = torch.from_numpy(np.ascontiguousarray(v))
        missing, unexpected = hf.load_state_dict(new, strict=False)
        assert not unexpected and all("pooler" in m for m in missing), (missing, unexpected)
        with torch.no_grad():
            got = hf(pixel_values=torch.from_numpy(x).double()).logits.numpy()
        err = np.abs(got - logits).max() / max(1.0, np.abs(got).max())
        print(f"  {case['name']}: transformers VivitForVideoClassification vs flax: max rel error {err:.2e}")
        assert err < 1e-4, err
        errs["transformers"] = float(err)
    return errs


def make_case(case, out, seed):
    c = dict(BASE, **{k: v for k, v in case.items() if k in ("heads", "layers", "temporal_layers", "embed_2d")},
             tubelet=case["tubelet"], attention=case["attention"])
    model = SpaceTimeViViT(c) if case["model"] == 2 else ViViT(c)
    x = pixels((2, case["frames"], BASE["channels"]) + tuple(case["size"]))
    xf = jnp.asarray(x.transpose(0, 1, 3, 4, 2))  # scenic: (n, t, h, w, c)
    params = flax.core.unfreeze(model.init(jax.random.PRNGKey(seed), xf))["params"]
    params = randomise(params, np.random.default_rng(seed))
    logits = np.asarray(model.apply({"params": params}, xf), dtype=np.float32)
    errs = check_against_references(case, params, x, logits.astype(np.float64))
    d = os.path.join(out, case["name"])
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    rng = np.random.default_rng(seed + 1)
    with open(os.path.join(d, "model.msgpack"), "wb") as f:
        f.write(serialization.to_bytes(wrap(params, case["wrap"], rng)))
    np.save(os.path.join(d, "expected.npy"), logits)
    lines = [f"{case['name']} model.msgpack expected.npy {case['frames']} {case['size'][0]} {case['size'][1]}"]
    if case.get("bf16"):
        p16 = jax.tree_util.tree_map(lambda p: p.astype(jnp.bfloat16), params)
        l16 = model.apply({"params": jax.tree_util.tree_map(lambda p: p.astype(jnp.float32), p16)}, xf)
        with open(os.path.join(d, "model_bf16.msgpack"), "wb") as f:
            f.write(serialization.to_bytes(wrap(p16, case["wrap"], rng)))
        np.save(os.path.join(d, "expected_bf16.npy"), np.asarray(l16, dtype=np.float32))
        lines.append(f"{case['name']} model_bf16.msgpack expected_bf16.npy {case['frames']} {case['size'][0]} {case['size'][1]}")
    if case["config"]:
        cfg = hf_config(case)
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(cfg, f, indent=2)
            f.write("\n")
    return lines, errs


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(REPO, "tests", "fixtures", "flax"))
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    lines, meta = [], {}
    for i, case in enumerate(CASES):
        ls, errs = make_case(case, args.out, 1600 + i)
        lines += ls
        meta[case["name"]] = errs
    with open(os.path.join(args.out, "list.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    import transformers
    import torch
    with open(os.path.join(args.out, "meta.json"), "w") as f:
        json.dump({"generated_with": {"flax": flax.__version__, "jax": jax.__version__,
                                      "transformers": transformers.__version__, "torch": torch.__version__},
                   "reference_agreement_max_rel_error": meta}, f, indent=2)
        f.write("\n")


if __name__ == "__main__":
    main()
