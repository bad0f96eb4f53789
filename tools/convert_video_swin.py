#!/usr/bin/env python3
"""A Video Swin checkpoint (.pth) → a tubelet model directory (docs/video-swin.md).

Usage:
    convert_video_swin.py IN.pth -o DIR [--patch-size 2,4,4] [--embed-dim 96] [--depths 2,2,6,2]
                          [--num-heads 3,6,12,24] [--window-size 8,7,7] [--mlp-ratio 4]
                          [--num-frames 32] [--image-size 224]

The defaults are Swin-T (torchvision's swin3d_t). IN.pth is either torchvision's state dict
(swin3d_t/s/b weights: features.<k>.*, norm.*, head.*) or an official Video-Swin-Transformer /
mmaction2 checkpoint (a "state_dict" of backbone.layers.<i>.blocks.<j>.*,
backbone.layers.<i>.downsample.*, backbone.norm.*, cls_head.fc_cls.*). DIR receives

    model.safetensors          every parameter under torchvision's name, float32
                               (relative_position_index, a buffer, is left out)
    config.json                "model_type": "video_swin" with the sizes given here, and
                               id2label (Kinetics-400's names for 400 classes)
    preprocessor_config.json   torchvision's Swin3D_*_Weights transforms: shortest edge 256
                               (bilinear), centre crop 224, mean/std of ImageNet

Every tensor's shape is checked against the sizes given, so a checkpoint of another size (a
relative-position table of another window, say) is refused with the tensor named; nothing is
written then. The files are written under temporary names and renamed.
"""
import argparse
import json
import os
import re
import sys

import torch


def ints(s, n=None):
    try:
        v = [int(x) for x in s.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{s}' is not a comma-separated list of integers")
    if (n and len(v) != n) or any(x < 1 for x in v):
        raise argparse.ArgumentTypeError(f"'{s}': want {n or 'some'} positive integers")
    return v


def official_to_torchvision(name):
    """mmaction2 / Video-Swin-Transformer names → torchvision's; None: not a model tensor."""
    m = re.match(r"(?:module\.)?backbone\.layers\.(\d+)\.blocks\.(\d+)\.(.*)", name)
    if m:
        rest = m.group(3).replace("mlp.fc1.", "mlp.0.").replace("mlp.fc2.", "mlp.3.")
        return f"features.{2 * int(m.group(1))}.{m.group(2)}.{rest}"
    m = re.match(r"(?:module\.)?backbone\.layers\.(\d+)\.downsample\.(.*)", name)
    if m:
        return f"features.{2 * int(m.group(1)) + 1}.{m.group(2)}"
    m = re.match(r"(?:module\.)?backbone\.(patch_embed\..*|norm\..*)", name)
    if m:
        return m.group(1)
    m = re.match(r"(?:module\.)?cls_head\.fc_cls\.(.*)", name)
    if m:
        return "head." + m.group(1)
    return None


def expected_shapes(a, classes):
    """torchvision's parameter names and shapes for these sizes."""
    pt, ph, pw = a.patch_size
    C0 = a.embed_dim
    wt, wh, ww = a.window_size
    n_rel = (2 * wt - 1) * (2 * wh - 1) * (2 * ww - 1)
    s = {"patch_embed.proj.weight": (C0, 3, pt, ph, pw), "patch_embed.proj.bias": (C0,),
         "patch_embed.norm.weight": (C0,), "patch_embed.norm.bias": (C0,)}
    for i, (d, h) in enumerate(zip(a.depths, a.num_heads)):
        C = C0 << i
        I = int(C * a.mlp_ratio)
        for j in range(d):
            p = f"features.{2 * i}.{j}."
            s.update({p + "norm1.weight": (C,), p + "norm1.bias": (C,),
                      p + "attn.qkv.weight": (3 * C, C), p + "attn.qkv.bias": (3 * C,),
                      p + "attn.proj.weight": (C, C), p + "attn.proj.bias": (C,),
                      p + "attn.relative_position_bias_table": (n_rel, h),
                      p + "norm2.weight": (C,), p + "norm2.bias": (C,),
                      p + "mlp.0.weight": (I, C), p + "mlp.0.bias": (I,),
                      p + "mlp.3.weight": (C, I), p + "mlp.3.bias": (C,)})
        if i + 1 < len(a.depths):
            p = f"features.{2 * i + 1}."
            s.update({p + "reduction.weight": (2 * C, 4 * C), p + "norm.weight": (4 * C,),
                      p + "norm.bias": (4 * C,)})
    C = C0 << (len(a.depths) - 1)
    s.update({"norm.weight": (C,), "norm.bias": (C,)})
    if classes:
        s.update({"head.weight": (classes, C), "head.bias": (classes,)})
    return s


def fail(msg):
    print(f"error: {msg}", file=sys.stderr)
    sys.exit(1)


def labels_for(n):
    if n == 400:
        try:
            from torchvision.models._meta import _KINETICS400_CATEGORIES
            return list(_KINETICS400_CATEGORIES)
        except ImportError:
            pass
    return [f"LABEL_{i}" for i in range(n)]


def write_atomic(path, write):
    tmp = path + ".tmp"
    write(tmp)
    os.replace(tmp, path)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("input", metavar="IN.pth")
    ap.add_argument("-o", dest="out", required=True, metavar="DIR")
    ap.add_argument("--patch-size", type=lambda s: ints(s, 3), default=[2, 4, 4])
    ap.add_argument("--embed-dim", type=int, default=96)
    ap.add_argument("--depths", type=ints, default=[2, 2, 6, 2])
    ap.add_argument("--num-heads", type=ints, default=[3, 6, 12, 24])
    ap.add_argument("--window-size", type=lambda s: ints(s, 3), default=[8, 7, 7])
    ap.add_argument("--mlp-ratio", type=float, default=4.0)
    ap.add_argument("--num-frames", type=int, default=32)
    ap.add_argument("--image-size", type=int, default=224)
    a = ap.parse_args()
    if len(a.depths) != len(a.num_heads) or len(a.depths) > 4:
        fail(f"--depths {a.depths} and --num-heads {a.num_heads}: one head count per stage, at "
             "most 4 stages")
    for i, h in enumerate(a.num_heads):
        if (a.embed_dim << i) % h:
            fail(f"stage {i} has width {a.embed_dim << i}, not divisible by {h} heads")
    try:
        obj = torch.load(a.input, map_location="cpu", weights_only=True)
    except Exception as ex:  # noqa: BLE001 (any unreadable file: one clear message)
        fail(f"{a.input}: not a readable PyTorch checkpoint ({ex})")
    sd = obj.get("state_dict", obj.get("model", obj)) if isinstance(obj, dict) else None
    if not isinstance(sd, dict):
        fail(f"{a.input}: no state dict in the file")
    official = any(k.startswith(("backbone.", "module.backbone.")) for k in sd)
    tensors = {}
    for k, t in sd.items():
        n = official_to_torchvision(k) if official else k
        if n is None or n.endswith("relative_position_index"):
            continue
        if not torch.is_tensor(t):
            fail(f"{a.input}: '{k}' is not a tensor")
        tensors[n] = t.detach().float().contiguous()
    classes = tensors["head.weight"].shape[0] if "head.weight" in tensors else 0
    want = expected_shapes(a, classes)
    missing = sorted(set(want) - set(tensors))
    extra = sorted(set(tensors) - set(want))
    if missing:
        fail(f"{a.input}: missing tensor '{missing[0]}' ({len(missing)} missing) for the sizes "
             "given (check --depths)")
    if extra:
        fail(f"{a.input}: unexpected tensor '{extra[0]}' ({len(extra)} in all) for the sizes "
             "given (check --depths)")
    for n, shape in want.items():
        if tuple(tensors[n].shape) != shape:
            hint = (" (the table of another --window-size)"
                    if n.endswith("relative_position_bias_table") else "")
            fail(f"{a.input}: '{n}' has shape {tuple(tensors[n].shape)}, the sizes given imply "
                 f"{shape}{hint}")
    from safetensors.torch import save_file
    os.makedirs(a.out, exist_ok=True)
    labels = labels_for(classes)
    cfg = {"model_type": "video_swin", "architectures": ["SwinTransformer3d"],
           "patch_size": a.patch_size, "embed_dim": a.embed_dim, "depths": a.depths,
           "num_heads": a.num_heads, "window_size": a.window_size, "mlp_ratio": a.mlp_ratio,
           "stochastic_depth_prob": 0.1, "num_channels": 3, "num_frames": a.num_frames,
           "image_size": a.image_size, "layer_norm_eps": 1e-5,
           "id2label": {str(i): l for i, l in enumerate(labels)}}
    pre = {"do_resize": True, "size": {"shortest_edge": 256}, "resample": 2,
           "do_center_crop": True, "crop_size": {"height": 224, "width": 224},
           "do_rescale": True, "rescale_factor": 1 / 255, "do_normalize": True,
           "image_mean": [0.485, 0.456, 0.406], "image_std": [0.229, 0.224, 0.225],
           "image_processor_type": "VideoMAEImageProcessor"}
    ordered = {n: tensors[n] for n in want}
    write_atomic(os.path.join(a.out, "model.safetensors"),
                 lambda p: save_file(ordered, p, metadata={"format": "pt"}))
    for fn, obj in (("config.json", cfg), ("preprocessor_config.json", pre)):
        write_atomic(os.path.join(a.out, fn),
                     lambda p, obj=obj: open(p, "w").write(json.dumps(obj, indent=2) + "\n"))
    print(f"{a.out}: {len(ordered)} tensors, {sum(t.numel() for t in ordered.values())} "
          f"parameters, {classes} classes", file=sys.stderr)


if __name__ == "__main__":
    main()
