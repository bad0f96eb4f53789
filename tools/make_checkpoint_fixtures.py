#!/usr/bin/env python3
"""Fixtures for tests/test_checkpoints.c: tiny random-weight models saved as their authors' code
saves them, and the outputs of the Hugging Face model built from the same weights.

Usage:
    /work/venv/bin/python tools/make_checkpoint_fixtures.py [--out tests/fixtures/checkpoints]

For each case this writes tests/fixtures/checkpoints/<case>/ with

    model.<ext>          torch.save(obj) in the zip format (torch >= 1.6)
    model_legacy.<ext>   torch.save(obj, _use_new_zipfile_serialization=False)
    config.json          only where the tensors cannot say everything (VideoMAE's input size)
    input.npy            pixel_values (1, T, C, H, W), N(0, 1)
    expected.npy         logits (or last_hidden_state for a pretraining encoder), float64 -> f32

and list.txt ("<case> <file> <logits|hidden>" per line). obj is laid out as each codebase saves it:
pySlowFast's {"epoch", "model_state", "optimizer_state", "cfg"} with "model." names for
TimeSformer (facebookresearch/TimeSformer, vit.py), VideoMAE's {"model", "optimizer", "epoch",
"args"} or DeepSpeed's {"module", ...} (MCG-NJU/VideoMAE modeling_finetune.py and
modeling_pretrain.py), torchvision's bare state dict and mmcv's {"meta", "state_dict", "optimizer"}
(plus an mmengine message_hub of numpy arrays and a HistoryBuffer) for Video Swin. pySlowFast's
cfg is a yacs dump (yaml.safe_dump) and VideoMAE's args carry --num_frames, --input_size and
--sampling_rate, with values of their own that the reader must find. Some tensors are stored as
float16, bfloat16 or float64, as non-contiguous views, or as views of one shared storage, to
exercise the reader.

The expected outputs come from transformers' models: the official state dict is renamed as
transformers' convert_timesformer_to_pytorch.py / convert_videomae_to_pytorch.py do (ported below;
the scripts are not shipped in the wheel), loaded strictly, and run in float64 from the stored
(rounded) values. Both codebases use LayerNorm eps 1e-6, which the configs here say too.
Video Swin's expected logits are torchvision's SwinTransformer3d's, in float64 from the stored
values; the mmaction2 names are torchvision's renamed back (tools/convert_video_swin.py's inverse).
Everything is seeded: re-running gives the same values.
"""
import argparse
import argparse as _argparse
import collections
import json
import os
import shutil

import sys

import numpy as np
import torch
from transformers import (TimesformerConfig, TimesformerForVideoClassification, VideoMAEConfig,
                          VideoMAEForVideoClassification, VideoMAEModel)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


# ---- official layouts -----------------------------------------------------------------------
def timesformer_official(D, L, I, C, p, N, T, K, attn):
    s = collections.OrderedDict()
    s["cls_token"] = (1, 1, D)
    s["pos_embed"] = (1, N + 1, D)
    if attn != "space_only":
        s["time_embed"] = (1, T, D)
    s["patch_embed.proj.weight"] = (D, C, p, p)
    s["patch_embed.proj.bias"] = (D,)
    for i in range(L):
        b = f"blocks.{i}."
        s[b + "norm1.weight"] = s[b + "norm1.bias"] = (D,)
        s[b + "attn.qkv.weight"], s[b + "attn.qkv.bias"] = (3 * D, D), (3 * D,)
        s[b + "attn.proj.weight"], s[b + "attn.proj.bias"] = (D, D), (D,)
        if attn == "divided_space_time":
            s[b + "temporal_norm1.weight"] = s[b + "temporal_norm1.bias"] = (D,)
            s[b + "temporal_attn.qkv.weight"], s[b + "temporal_attn.qkv.bias"] = (3 * D, D), (3 * D,)
            s[b + "temporal_attn.proj.weight"], s[b + "temporal_attn.proj.bias"] = (D, D), (D,)
            s[b + "temporal_fc.weight"], s[b + "temporal_fc.bias"] = (D, D), (D,)
        s[b + "norm2.weight"] = s[b + "norm2.bias"] = (D,)
        s[b + "mlp.fc1.weight"], s[b + "mlp.fc1.bias"] = (I, D), (I,)
        s[b + "mlp.fc2.weight"], s[b + "mlp.fc2.bias"] = (D, I), (D,)
    s["norm.weight"] = s["norm.bias"] = (D,)
    s["head.weight"], s["head.bias"] = (K, D), (K,)
    return s


def videomae_official(D, L, I, C, t, p, K, qv_bias, mean_pool, gamma, prefix=""):
    s = collections.OrderedDict()
    s[prefix + "patch_embed.proj.weight"] = (D, C, t, p, p)
    s[prefix + "patch_embed.proj.bias"] = (D,)
    for i in range(L):
        b = f"{prefix}blocks.{i}."
        s[b + "norm1.weight"] = s[b + "norm1.bias"] = (D,)
        s[b + "attn.qkv.weight"] = (3 * D, D)
        if qv_bias:
            s[b + "attn.q_bias"] = s[b + "attn.v_bias"] = (D,)
        s[b + "attn.proj.weight"], s[b + "attn.proj.bias"] = (D, D), (D,)
        s[b + "norm2.weight"] = s[b + "norm2.bias"] = (D,)
        s[b + "mlp.fc1.weight"], s[b + "mlp.fc1.bias"] = (I, D), (I,)
        s[b + "mlp.fc2.weight"], s[b + "mlp.fc2.bias"] = (D, I), (D,)
        if gamma:
            s[b + "gamma_1"] = s[b + "gamma_2"] = (D,)
    if mean_pool:
        s[prefix + "fc_norm.weight"] = s[prefix + "fc_norm.bias"] = (D,)
    else:
        s[prefix + "norm.weight"] = s[prefix + "norm.bias"] = (D,)
    if K:
        s[prefix + "head.weight"], s[prefix + "head.bias"] = (K, D), (K,)
    return s


def randomise(shapes, g):
    """The project's fixture distribution (tools/make_fixtures.py): nothing left at 0 or 1."""
    out = collections.OrderedDict()
    for k, shape in shapes.items():
        x = torch.randn(shape, generator=g, dtype=torch.float64)
        if k.endswith("bias") or "_bias" in k:
            x = 0.1 * x
        elif "norm" in k and k.endswith("weight"):
            x = 1 + 0.2 * x
        elif "gamma" in k:
            x = 0.5 + 0.2 * x
        elif k.endswith(("cls_token", "pos_embed", "time_embed", "mask_token")):
            x = 0.5 * x
        else:
            x = x / np.sqrt(np.prod(shape[1:]))
        out[k] = x.float()
    return out


# ---- transformers' conversion (convert_timesformer_to_pytorch.py, convert_videomae_to_pytorch.py)
def hf_timesformer(sd):
    out = {}
    for key, val in sd.items():
        if key.startswith("model."):
            key = key.replace("model.", "")
        if "qkv" in key:
            n = int(key.split(".")[1])
            post = ".temporal_attention.attention.qkv." if "temporal" in key else ".attention.attention.qkv."
            out[f"timesformer.encoder.layer.{n}{post}{key.split('.')[-1]}"] = val
            continue
        name = key
        if "cls_token" in name: name = name.replace("cls_token", "timesformer.embeddings.cls_token")
        if "pos_embed" in name: name = name.replace("pos_embed", "timesformer.embeddings.position_embeddings")
        if "time_embed" in name: name = name.replace("time_embed", "timesformer.embeddings.time_embeddings")
        if "patch_embed.proj" in name:
            name = name.replace("patch_embed.proj", "timesformer.embeddings.patch_embeddings.projection")
        if "blocks" in name: name = name.replace("blocks", "timesformer.encoder.layer")
        if "attn.proj" in name: name = name.replace("attn.proj", "attention.output.dense")
        if "temporal_norm1" in name: name = name.replace("temporal_norm1", "temporal_layernorm")
        if "temporal_fc" in name: name = name.replace("temporal_fc", "temporal_dense")
        if "norm1" in name and "temporal" not in name: name = name.replace("norm1", "layernorm_before")
        if "norm2" in name: name = name.replace("norm2", "layernorm_after")
        if "mlp.fc1" in name: name = name.replace("mlp.fc1", "intermediate.dense")
        if "mlp.fc2" in name: name = name.replace("mlp.fc2", "output.dense")
        if name.startswith("norm."): name = "timesformer.layernorm." + name[5:]
        if "head" in name: name = name.replace("head", "classifier")
        out[name] = val
    return out


def hf_videomae(sd, D):
    out = {}
    for key, val in sd.items():
        if key.startswith(("decoder.", "mask_token", "encoder_to_decoder")):
            continue  # the pretraining decoder: VideoMAEModel has none
        if key.startswith("encoder."):
            key = key.replace("encoder.", "")
        if "qkv" in key:
            n = int(key.split(".")[1])
            p = f"videomae.encoder.layer.{n}.attention.attention."
            out[p + "query.weight"], out[p + "key.weight"], out[p + "value.weight"] = \
                val[:D], val[D:2 * D], val[-D:]
            continue
        name = key
        if "patch_embed.proj" in name:
            name = name.replace("patch_embed.proj", "videomae.embeddings.patch_embeddings.projection")
        if "blocks" in name: name = name.replace("blocks", "videomae.encoder.layer")
        if "attn.proj" in name: name = name.replace("attn.proj", "attention.output.dense")
        # transformers 5 calls the q/v biases query.bias / value.bias (q_bias / v_bias before)
        if "attn.q_bias" in name: name = name.replace("attn.q_bias", "attention.attention.query.bias")
        if "attn.v_bias" in name: name = name.replace("attn.v_bias", "attention.attention.value.bias")
        if "norm1" in name: name = name.replace("norm1", "layernorm_before")
        if "norm2" in name: name = name.replace("norm2", "layernorm_after")
        if "mlp.fc1" in name: name = name.replace("mlp.fc1", "intermediate.dense")
        if "mlp.fc2" in name: name = name.replace("mlp.fc2", "output.dense")
        if name.startswith("norm."): name = "videomae.layernorm." + name[5:]
        if "head" in name: name = name.replace("head", "classifier")
        out[name] = val
    return out


def run_hf(model, hf_sd, x, output, prefix=None):
    missing, unexpected = model.load_state_dict({k: v.double() for k, v in hf_sd.items()}, strict=False)
    assert not missing and not unexpected, (missing, unexpected)
    model = model.double().eval()
    with torch.no_grad():
        out = model(pixel_values=x.double())
    return (out.logits if output == "logits" else out.last_hidden_state).float().numpy()


# ---- storage tricks ---------------------------------------------------------------------------
def as_dtype(sd, names, dtype):
    for k in names:
        sd[k] = sd[k].to(dtype)


def transposed_view(t):
    """Same values, stored column-major: a non-contiguous tensor."""
    return t.t().contiguous().t()


def shared(sd, a, b):
    """a and b become views of one storage."""
    flat = torch.cat([sd[a].flatten(), sd[b].flatten()])
    na = sd[a].numel()
    sd[a], sd[b] = flat[:na].view(sd[a].shape), flat[na:].view(sd[b].shape)


# ---- cases -------------------------------------------------------------------------------------
def pyslowfast(sd, cfg_yaml, g):
    """pySlowFast's checkpoint (slowfast/utils/checkpoint.py save_checkpoint)."""
    return {"epoch": 15, "model_state": sd,
            "optimizer_state": {"state": {0: {"momentum_buffer": torch.randn(4, generator=g)}},
                                "param_groups": [{"lr": 0.005, "momentum": 0.9, "dampening": 0,
                                                  "weight_decay": 1e-4, "nesterov": True,
                                                  "params": [0, 1, 2]}]},
            "cfg": cfg_yaml}


def case_timesformer(name, attn, dtype_names, frames_in_cfg=True):
    D, L, I, C, p, img, T, K = 64, 1, 32, 3, 4, 8, 2, 3
    g = torch.Generator().manual_seed(len(name) * 7919)
    sd = randomise(timesformer_official(D, L, I, C, p, (img // p) ** 2, T, K, attn), g)
    dt = dtype_names(sd)
    for k, d in dt.items():
        sd[k] = sd[k].to(d)
    sd["head.weight"] = transposed_view(sd["head.weight"])
    shared(sd, "cls_token", "pos_embed")
    cfg = TimesformerConfig(image_size=img, patch_size=p, num_channels=C, num_frames=T, hidden_size=D,
                            num_hidden_layers=L, num_attention_heads=D // 64, intermediate_size=I,
                            num_labels=K, attention_type=attn, layer_norm_eps=1e-6, qkv_bias=True,
                            hidden_act="gelu", attn_implementation="eager")
    x = torch.randn(1, T, C, img, img, generator=g)
    expected = run_hf(TimesformerForVideoClassification(cfg), hf_timesformer(sd), x, "logits")
    # the run's config as pySlowFast saves it (yacs' CfgNode.dump: yaml.safe_dump, sorted keys;
    # block lists with PyYAML >= 5.1, flow lists before: the space-only case), with a mean, std,
    # sampling rate and test crop of its own that the reader must find
    import yaml as pyyaml
    cfg = {"DATA": {"NUM_FRAMES": T, "SAMPLING_RATE": 4, "TRAIN_CROP_SIZE": img,
                    "TEST_CROP_SIZE": img, "MEAN": [0.4, 0.45, 0.5], "STD": [0.2, 0.225, 0.25],
                    "TRAIN_JITTER_SCALES": [10, 12], "INPUT_CHANNEL_NUM": [3],
                    "PATH_LABEL_SEPARATOR": " ", "PATH_TO_DATA_DIR": "/path/to/kinetics/"},
           "MODEL": {"NUM_CLASSES": K, "ARCH": "vit", "MODEL_NAME": "vit_base_patch16_224"},
           "TIMESFORMER": {"ATTENTION_TYPE": attn, "PRETRAINED_MODEL": ""},
           "TEST": {"NUM_SPATIAL_CROPS": 3, "NUM_ENSEMBLE_VIEWS": 1, "DATASET": "kinetics"},
           "NUM_GPUS": 8, "RNG_SEED": 0}
    if not frames_in_cfg:
        cfg = {"MODEL": {"NUM_CLASSES": K}, "NUM_GPUS": 8}
    yaml = pyyaml.safe_dump(cfg, default_flow_style=None if attn == "space_only" else False)
    obj = pyslowfast(collections.OrderedDict(("model." + k, v) for k, v in sd.items()), yaml, g)
    return obj, "pyth", x, expected, "logits", None


def case_videomae(name, mean_pool, qv_bias, gamma, pretrain, wrap, dtype_names):
    D, L, I, C, t, p, img, T, K = 16, 2, 32, 3, 2, 8, 16, 4, (0 if pretrain else 4)
    g = torch.Generator().manual_seed(len(name) * 104729 + int(mean_pool) + 2 * int(qv_bias))
    prefix = "encoder." if pretrain else ""
    sd = randomise(videomae_official(D, L, I, C, t, p, K, qv_bias, mean_pool, gamma, prefix), g)
    if pretrain:  # a little of the decoder, which the encoder ignores
        extra = randomise(collections.OrderedDict([
            ("mask_token", (1, 1, 8)), ("encoder_to_decoder.weight", (8, D)),
            ("decoder.blocks.0.norm1.weight", (8,)), ("decoder.norm.weight", (8,)),
            ("decoder.head.weight", (t * p * p * C, 8)), ("decoder.head.bias", (t * p * p * C,))]), g)
        sd.update(extra)
    for k, d in dtype_names(sd).items():
        sd[k] = sd[k].to(d)
    if K:
        sd["head.weight"] = transposed_view(sd["head.weight"])
    shared(sd, prefix + "blocks.0.mlp.fc1.weight", prefix + "blocks.0.mlp.fc2.weight")
    cfg_json = dict(model_type="videomae", image_size=img, patch_size=p, tubelet_size=t, num_channels=C,
                    num_frames=T, hidden_size=D, num_hidden_layers=L, num_attention_heads=2,
                    intermediate_size=I, hidden_act="gelu", layer_norm_eps=1e-6, qkv_bias=qv_bias,
                    use_mean_pooling=mean_pool, num_labels=K)
    if gamma:
        cfg_json["layer_scale_init_value"] = 0.1
    cfg = VideoMAEConfig(**{k: v for k, v in cfg_json.items() if k not in ("model_type", "layer_scale_init_value")})
    cfg._attn_implementation = "eager"
    x = torch.randn(1, T, C, img, img, generator=g)
    hf_sd = hf_videomae(sd, D)
    if gamma:
        expected = None  # layer scale: checked against the STMixer reference instead (see below)
    elif pretrain:
        expected = run_hf(VideoMAEModel(cfg), {k[len("videomae."):]: v for k, v in hf_sd.items()}, x, "hidden")
    else:
        expected = run_hf(VideoMAEForVideoClassification(cfg), hf_sd, x, "logits")
    if wrap == "module":  # DeepSpeed's model states
        obj = {"module": sd, "buffer_names": [], "global_steps": 100, "ds_version": "0.5.8"}
    else:  # VideoMAE's utils.save_model
        obj = {"model": sd, "optimizer": {"state": {}, "param_groups": [{"lr": 1e-3, "params": [0]}]},
               "epoch": 29, "scaler": {"scale": 65536.0, "growth_factor": 2.0},
               # VideoMAE's scripts: --num_frames, --input_size, --sampling_rate (read by tubelet)
               "args": _argparse.Namespace(model="vit_base_patch16_224", batch_size=8, lr=1e-3,
                                           num_frames=T, input_size=img, sampling_rate=2)}
    return obj, "pth", x, expected, "hidden" if pretrain else "logits", cfg_json


def case_stmixer(name):
    """STMixer's backbone (layer scale gamma_1 / gamma_2, q/v biases, final norm) under its own
    names, from tools/stmixer_backbone_ref.py (STMixer's vit_utils.py module by module) with its
    fixture head, inside a detector checkpoint's {"model": {"backbone.<name>": ...}}. transformers'
    VideoMAE has no layer scale, so the expected logits are the reference's own (float64, on the
    stored float32 values); config.json beside the file says the input size."""
    import stmixer_backbone_ref as sref
    c = dict(sref.CFG)
    model = sref.ViT(c).double()
    g = torch.Generator().manual_seed(sref.SEED + 16)
    sref.randomize_(model, g)
    sd = collections.OrderedDict((k, v.float()) for k, v in model.state_dict().items())
    model.load_state_dict({k: v.double() for k, v in sd.items()})
    x = torch.randn(1, c["num_frames"], c["in_chans"], c["pretrain_img_size"], c["pretrain_img_size"],
                    generator=g)
    with torch.no_grad():
        expected = model.eval()(x.double())[0].float().numpy()
    sd["blocks.1.gamma_2"] = sd["blocks.1.gamma_2"].double()  # a float64 storage among them
    obj = {"model": collections.OrderedDict(("backbone." + k, v) for k, v in sd.items()),
           "iteration": 1200, "optimizer": {"state": {}, "param_groups": [{"lr": 1e-4, "params": [0]}]}}
    return obj, "pth", x, expected, "logits", sref.hf_config(c, True)


# ---- Video Swin: torchvision's SwinTransformer3d, saved as torchvision and as mmaction2 do ----
def swin_model(window, seed, classes=5):
    """A tiny torchvision Video Swin (2 stages, widths 8 and 16) with random weights that make
    every term matter (as tools/make_video_swin_fixtures.py): linear weights ~ N(0, 1/fan_in),
    norms 1 + N(0, 0.2²), biases N(0, 0.1²), bias tables N(0, 0.5²)."""
    from torchvision.models.video.swin_transformer import SwinTransformer3d
    torch.manual_seed(seed)
    m = SwinTransformer3d(patch_size=[2, 4, 4], embed_dim=8, depths=[2, 1], num_heads=[1, 2],
                          window_size=window, mlp_ratio=2.0, stochastic_depth_prob=0.0,
                          num_classes=classes)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for n, p in m.named_parameters():
            x = torch.randn(p.shape, generator=g, dtype=torch.float64)
            if n.endswith("relative_position_bias_table"):
                x = 0.5 * x
            elif "norm" in n and n.endswith("weight"):
                x = 1 + 0.2 * x
            elif n.endswith("bias"):
                x = 0.1 * x
            else:
                x = x / np.sqrt(np.prod(p.shape[1:]))
            p.copy_(x.float())
    return m.eval()


def swin_logits(m, sd, x):
    """torchvision's logits in float64 from the stored (rounded) values; x is (1, T, C, H, W)."""
    m = m.double()
    missing, unexpected = m.load_state_dict({k: v.double() for k, v in sd.items()}, strict=False)
    assert not unexpected and all(k.endswith("relative_position_index") for k in missing), \
        (missing, unexpected)
    with torch.no_grad():
        return m(x.double().permute(0, 2, 1, 3, 4)).float().numpy()


def to_mmaction2(name):
    """torchvision's name → the official Video-Swin-Transformer / mmaction2 0.x one (the inverse
    of tools/convert_video_swin.py's official_to_torchvision)."""
    p = name.split(".")
    if p[0] == "features" and int(p[1]) % 2 == 0:
        rest = ".".join(p[3:]).replace("mlp.0.", "mlp.fc1.").replace("mlp.3.", "mlp.fc2.")
        return f"backbone.layers.{int(p[1]) // 2}.blocks.{p[2]}.{rest}"
    if p[0] == "features":
        return f"backbone.layers.{int(p[1]) // 2}.downsample.{'.'.join(p[2:])}"
    if p[0] == "head":
        return "cls_head.fc_cls." + p[1]
    return "backbone." + name  # patch_embed.*, norm.*


def swin_config_json(window, classes):
    """tubelet's video_swin config.json for swin_model (docs/video-swin.md)."""
    return dict(model_type="video_swin", patch_size=[2, 4, 4], embed_dim=8, depths=[2, 1],
                num_heads=[1, 2], window_size=window, mlp_ratio=2.0, num_channels=3,
                num_frames=4, image_size=32, layer_norm_eps=1e-5,
                id2label={str(i): f"LABEL_{i}" for i in range(classes)})


class _HistoryBuffer:
    """Stands for mmengine.logging.history_buffer.HistoryBuffer (a plain object holding numpy
    arrays) without installing mmengine: pickled under mmengine's module and class name."""
    def __init__(self):
        self._log_history = np.array([0.7, 0.5, 0.25])
        self._count_history = np.array([1, 1, 1])
        self.max_length = 1000000


def mmengine_message_hub():
    import types
    for mod in ("mmengine", "mmengine.logging", "mmengine.logging.history_buffer"):
        sys.modules.setdefault(mod, types.ModuleType(mod))
    hb = sys.modules["mmengine.logging.history_buffer"]
    _HistoryBuffer.__module__, _HistoryBuffer.__qualname__ = hb.__name__, "HistoryBuffer"
    _HistoryBuffer.__name__ = "HistoryBuffer"
    hb.HistoryBuffer = _HistoryBuffer
    return {"log_scalars": {"train/loss": _HistoryBuffer()},
            "runtime_info": {"epoch": 30, "iter": 1200, "best_acc": np.float64(0.75)},
            "resumed_keys": {"epoch": False}}


MM_CONFIG = """model = dict(
    type='Recognizer3D',
    backbone=dict(
        type='SwinTransformer3D', patch_size=(2, 4, 4), embed_dim=8, depths=[2, 1],
        num_heads=[1, 2], window_size=(8, 7, 7), mlp_ratio=2.0, patch_norm=True),
    cls_head=dict(type='I3DHead', in_channels=16, num_classes=5))
img_norm_cfg = dict(
    mean=[127.5, 127.5, 127.5], std=[63.75, 63.75, 63.75], to_bgr=False)
test_pipeline = [
    dict(type='SampleFrames', clip_len=4, frame_interval=2, num_clips=4, test_mode=True),
    dict(type='Resize', scale=(-1, 32)),
    dict(type='ThreeCrop', crop_size=32),
    dict(type='Normalize', **img_norm_cfg),
]
"""


def case_swin(name, layout, window):
    """torchvision's state dict as torchvision saves it (the bare dict; f16 tables, a float64
    norm, a transposed head), or the same model under mmaction2 / Video-Swin-Transformer's names in
    mmcv's {"meta", "state_dict", "optimizer"} with an mmengine message_hub (numpy arrays, a
    HistoryBuffer) beside it. The 8x7x7 window (every published Video Swin's) is inferred from
    its tables: their relative_position_index buffers (392² int64 each) are left out to keep the
    files small; the 2x3x3 case keeps them (and needs config.json beside it)."""
    seed = 1000 + len(name) * 31 + len(layout)
    m = swin_model(window, seed)
    sd = collections.OrderedDict((k, v.detach().clone()) for k, v in m.state_dict().items())
    if window == [8, 7, 7]:
        sd = collections.OrderedDict((k, v) for k, v in sd.items()
                                     if not k.endswith("relative_position_index"))
    for k in sd:
        if k.endswith("relative_position_bias_table") and layout == "torchvision":
            sd[k] = sd[k].half()
    sd["norm.weight"] = sd["norm.weight"].double()
    sd["head.weight"] = transposed_view(sd["head.weight"])
    g = torch.Generator().manual_seed(seed + 1)
    x = torch.randn(1, 4, 3, 32, 32, generator=g)  # 2 x 8 x 8 tokens: stage 0 pads and shifts
    expected = swin_logits(m, sd, x)
    cfg_json = None if window == [8, 7, 7] else swin_config_json(window, 5)
    if layout == "torchvision":
        return sd, "pth", x, expected, "logits", cfg_json
    obj = {"meta": {"mmcv_version": "1.3.8", "time": "Wed Jun 23 10:00:00 2021",
                    "config": MM_CONFIG, "seed": 0, "epoch": 30, "iter": 1200,
                    "hook_msgs": {"last_ckpt": "/work_dirs/epoch_30.pth"}},
           "state_dict": collections.OrderedDict((to_mmaction2(k), v) for k, v in sd.items()),
           "optimizer": {"state": {}, "param_groups": [{"lr": 1e-3, "params": [0, 1]}]},
           "message_hub": mmengine_message_hub()}
    return obj, "pth", x, expected, "logits", cfg_json


CASES = {
    # inferred config: divided (f16 blocks), joint (bf16 blocks), space_only (frames from cfg)
    "timesformer_divided": lambda n: case_timesformer(
        n, "divided_space_time", lambda sd: {k: torch.float16 for k in sd if k.startswith("blocks.")}),
    "timesformer_joint": lambda n: case_timesformer(
        n, "joint_space_time", lambda sd: {k: torch.bfloat16 for k in sd if k.startswith("blocks.")}),
    "timesformer_space_only": lambda n: case_timesformer(
        n, "space_only", lambda sd: {k: torch.float64 for k in sd if "norm" in k}),
    # config.json beside the files (the input size is not in the tensors)
    "videomae_finetuned_mean": lambda n: case_videomae(
        n, True, True, False, False, "model", lambda sd: {}),
    "videomae_finetuned_cls_nobias": lambda n: case_videomae(
        n, False, False, False, False, "module", lambda sd: {k: torch.float64 for k in sd if "fc1" in k}),
    "videomae_pretrain": lambda n: case_videomae(
        n, False, True, False, True, "model", lambda sd: {k: torch.float16 for k in sd if "blocks.1." in k}),
    # STMixer's backbone: layer scale, in a detector checkpoint (config.json beside the files)
    "stmixer_backbone": case_stmixer,
    # Video Swin: the 8x7x7 window inferred (torchvision's names; mmaction2's in mmcv's checkpoint
    # with an mmengine message_hub); a 2x3x3 window with config.json beside the files
    "video_swin_torchvision": lambda n: case_swin(n, "torchvision", [8, 7, 7]),
    "video_swin_mmaction2": lambda n: case_swin(n, "mmaction2", [8, 7, 7]),
    "video_swin_window233": lambda n: case_swin(n, "torchvision", [2, 3, 3]),
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(REPO, "tests", "fixtures", "checkpoints"))
    ap.add_argument("--only", nargs="+", choices=list(CASES), help="write these cases only (list.txt "
                    "keeps the others' lines)")
    args = ap.parse_args()
    torch.manual_seed(0)
    lines = []
    for name, make in CASES.items():
        if args.only and name not in args.only:
            continue
        obj, ext, x, expected, output, cfg_json = make(name)
        d = os.path.join(args.out, name)
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
        for fn, new in ((f"model.{ext}", True), (f"model_legacy.{ext}", False)):
            torch.save(obj, os.path.join(d, fn), _use_new_zipfile_serialization=new)
            lines.append(f"{name} {fn} {output}")
        if cfg_json:
            with open(os.path.join(d, "config.json"), "w") as f:
                json.dump(cfg_json, f, indent=2)
        np.save(os.path.join(d, "input.npy"), x.numpy().astype(np.float32))
        np.save(os.path.join(d, "expected.npy"), expected.astype(np.float32))
        print(name, output, expected.shape, "max |ref| %.3f" % np.abs(expected).max())
    # a space-only TimeSformer whose checkpoint does not say its frames: the error names --config
    if not args.only or "timesformer_space_only" in args.only:
        obj, ext, *_ = case_timesformer("timesformer_space_only", "space_only", lambda sd: {}, frames_in_cfg=False)
        torch.save(obj, os.path.join(args.out, "timesformer_space_only_noframes.pyth"),
                   _use_new_zipfile_serialization=False)
    # a Video Swin whose window is not 8x7x7, without its config.json: the error names --config
    if not args.only or "video_swin_window233" in args.only:
        obj, *_ = case_swin("video_swin_window233", "torchvision", [2, 3, 3])
        torch.save(obj, os.path.join(args.out, "video_swin_window233_noconfig.pth"),
                   _use_new_zipfile_serialization=False)
    list_txt = os.path.join(args.out, "list.txt")
    if args.only and os.path.exists(list_txt):
        with open(list_txt) as f:
            lines = [l for l in f.read().splitlines() if l.split()[0] not in args.only] + lines
    with open(list_txt, "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
