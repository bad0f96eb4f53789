"""VideoMAE V2's temporal-action-localisation features (OpenGVLab/VideoMAEv2,
extract_tad_feature.py) re-implemented from the original code, for `tubelet features --protocol
videomae2-tad` (docs/temporal-localisation.md).

What the original script does, step by step, and how this file does the same:
  * frames: decord's VideoReader(path, num_threads=1) numbers the frames in presentation order;
    clip k is frames start..start+15 for start in range(0, len(vr) - 15, 4) (FineAction: 16).
    Here: PyAV decodes every frame to RGB24 in presentation order (decord is not installed).
  * pixels: `vid.permute(3, 0, 1, 2).to(torch.float32) / 255`, then
    `F.interpolate(vid, size=(224, 224), mode="bilinear", align_corners=False)` on the
    (3, 16, H, W) tensor (channels as the batch, frames as channels), no antialias, no mean/std;
    the same calls here.
  * model: models/modeling_finetune.py's VisionTransformer (vit_giant_patch14_224: patch 14,
    1408 wide, 40 blocks, 16 heads, mlp_ratio 48/11, qkv_bias, LayerNorm eps 1e-6 everywhere,
    fixed sinusoid positions, use_mean_pooling) and its forward_features:
    fc_norm(x.mean(1)) after the last block. Ported below class by class (without timm: drop
    path and dropout are identities in eval), at any size.
  * output: np.vstack of the (1, C) rows, float32, <name>.npy where name is the video's file
    name up to its FIRST dot (vid_name.split('.')[0]; tubelet strips only the last extension).

  python tools/videomae2_tad_ref.py fixture OUTDIR VIDEO...   tiny random-weight model in
      VideoMAE V2's layouts + the expected features of each video; tests/fixtures/tad is
      `fixture tests/fixtures/tad tests/fixtures/tad/rgb.mkv tests/fixtures/video/h264.mp4
      tests/fixtures/tad/wide.mp4` (rgb.mkv, short.mkv, wide.mp4: see test_tad_cli.sh's header)
  python tools/videomae2_tad_ref.py extract --ckpt FILE.pth --arch D,L,H,P,MLP --out DIR VIDEO...
      the original protocol on any checkpoint (the comparison in docs/temporal-localisation.md)
"""
import argparse
import json
import math
import os
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


# ---- models/modeling_finetune.py, ported ----

class Mlp(nn.Module):
    def __init__(self, d, hidden):
        super().__init__()
        self.fc1 = nn.Linear(d, hidden)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(hidden, d)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


class Attention(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.num_heads = heads
        head_dim = d // heads
        self.scale = head_dim ** -0.5
        self.qkv = nn.Linear(d, d * 3, bias=False)
        self.q_bias = nn.Parameter(torch.zeros(d))
        self.v_bias = nn.Parameter(torch.zeros(d))
        self.proj = nn.Linear(d, d)

    def forward(self, x):
        B, N, C = x.shape
        qkv_bias = torch.cat((self.q_bias, torch.zeros_like(self.v_bias), self.v_bias))
        qkv = F.linear(input=x, weight=self.qkv.weight, bias=qkv_bias)
        qkv = qkv.reshape(B, N, 3, self.num_heads, -1).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        q = q * self.scale
        attn = (q @ k.transpose(-2, -1)).softmax(dim=-1)
        x = (attn @ v).transpose(1, 2).reshape(B, N, -1)
        return self.proj(x)


class Block(nn.Module):
    def __init__(self, d, heads, mlp_ratio, eps):
        super().__init__()
        self.norm1 = nn.LayerNorm(d, eps=eps)
        self.attn = Attention(d, heads)
        self.norm2 = nn.LayerNorm(d, eps=eps)
        self.mlp = Mlp(d, int(d * mlp_ratio))

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class PatchEmbed(nn.Module):
    def __init__(self, img, patch, d, frames, tubelet):
        super().__init__()
        self.num_patches = (img // patch) ** 2 * (frames // tubelet)
        self.proj = nn.Conv3d(3, d, kernel_size=(tubelet, patch, patch),
                              stride=(tubelet, patch, patch))

    def forward(self, x):
        return self.proj(x).flatten(2).transpose(1, 2)


def get_sinusoid_encoding_table(n_position, d_hid):
    def angles(pos):
        return [pos / np.power(10000, 2 * (j // 2) / d_hid) for j in range(d_hid)]
    table = np.array([angles(p) for p in range(n_position)])
    table[:, 0::2] = np.sin(table[:, 0::2])
    table[:, 1::2] = np.cos(table[:, 1::2])
    return torch.tensor(table, dtype=torch.float, requires_grad=False).unsqueeze(0)


class VisionTransformer(nn.Module):
    def __init__(self, d, depth, heads, patch, mlp_ratio, num_classes, img=224, frames=16,
                 tubelet=2, eps=1e-6):
        super().__init__()
        self.patch_embed = PatchEmbed(img, patch, d, frames, tubelet)
        self.pos_embed = get_sinusoid_encoding_table(self.patch_embed.num_patches, d)
        self.blocks = nn.ModuleList([Block(d, heads, mlp_ratio, eps) for _ in range(depth)])
        self.norm = nn.Identity()
        self.fc_norm = nn.LayerNorm(d, eps=eps)
        self.head = nn.Linear(d, num_classes)
        self.pretrain_norm = None

    def forward_features(self, x):
        B = x.size(0)
        x = self.patch_embed(x)
        x = x + self.pos_embed.expand(B, -1, -1).type_as(x).to(x.device).clone().detach()
        for blk in self.blocks:
            x = blk(x)
        if self.pretrain_norm is not None:  # the pretraining encoder: norm, then (ours) the mean
            return self.pretrain_norm(x).mean(1)
        return self.fc_norm(x.mean(1))


# ---- the script's preprocessing and loop ----

def read_frames(path):
    """Every frame of the video, (n, H, W, 3) uint8 RGB, in presentation order."""
    import av
    with av.open(path) as c:
        s = c.streams.video[0]
        frames = [(f.pts if f.pts is not None else i, f.to_ndarray(format="rgb24"))
                  for i, f in enumerate(c.decode(s))]
    frames.sort(key=lambda x: x[0])
    return np.stack([f for _, f in frames])


def transform(frame):
    vid = frame.permute(3, 0, 1, 2).to(torch.float32) / 255   # ToFloatTensorInZeroOne
    return F.interpolate(vid, size=(224, 224), scale_factor=None, mode="bilinear",
                         align_corners=False)                 # Resize((224, 224))


def extract(model, frames, stride=4):
    rows = []
    for start in range(0, len(frames) - 15, stride):
        data = frames[start:start + 16]
        x = transform(torch.from_numpy(np.ascontiguousarray(data))).unsqueeze(0)
        with torch.no_grad():
            rows.append(model.forward_features(x).float().cpu().numpy())
    return np.vstack(rows)


# ---- a tiny random model in VideoMAE V2's layouts ----

def tiny_model(seed=0, d=64, depth=2, heads=1, patch=14, classes=10):
    torch.manual_seed(seed)
    m = VisionTransformer(d, depth, heads, patch, 48 / 11, classes)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in m.named_parameters():
            if "norm" in name and name.endswith("weight"):
                v = 1 + 0.2 * torch.randn(p.shape, generator=g)
            elif name.endswith("bias") or "q_bias" in name or "v_bias" in name:
                v = 0.1 * torch.randn(p.shape, generator=g)
            else:
                fan_in = p[0].numel() if p.ndim > 1 else p.numel()
                v = torch.randn(p.shape, generator=g) / math.sqrt(fan_in)
            p.copy_(v.half().float())  # fp16-exact: every layout holds the same values
    return m.eval()


def pretrain_state(sd, d, g):
    """modeling_pretrain.py's PretrainVisionTransformer: the encoder under encoder. (its own
    final norm, no fc_norm, no head), a decoder, encoder_to_decoder and mask_token."""
    out = {}
    for k, v in sd.items():
        if k.startswith(("fc_norm", "head")):
            continue
        out["encoder." + k] = v
    out["encoder.norm.weight"] = sd["fc_norm.weight"]
    out["encoder.norm.bias"] = sd["fc_norm.bias"]
    dd = 32
    for k, shape in {"decoder.blocks.0.norm1.weight": (dd,), "decoder.blocks.0.attn.qkv.weight": (3 * dd, dd),
                     "decoder.norm.weight": (dd,), "decoder.head.weight": (3 * 2 * 14 * 14, dd)}.items():
        out[k] = torch.randn(shape, generator=g).half()
    out["encoder_to_decoder.weight"] = torch.randn(dd, d, generator=g).half()
    out["mask_token"] = torch.zeros(1, 1, dd).half()
    return out


def fixture(outdir, videos):
    os.makedirs(outdir, exist_ok=True)
    m = tiny_model()
    sd = {k: v.detach().clone() for k, v in m.state_dict().items()}
    half = {k: v.half() for k, v in sd.items()}
    g = torch.Generator().manual_seed(1)
    # the K710 fine-tuned ViT-g's layout: DeepSpeed's {'module': ...}, float32
    torch.save({"module": sd}, os.path.join(outdir, "vit_tiny_k710_ft.pth"))
    # the distilled ViT-S / ViT-B: {'model': ...} in float16
    torch.save({"model": half}, os.path.join(outdir, "vit_tiny_k710_dl_fp16.pth"))
    # a bare state dict under a detector's backbone. prefix
    torch.save({"backbone." + k: v for k, v in half.items()},
               os.path.join(outdir, "vit_tiny_bare_backbone.pth"))
    # a pretraining file: encoder. + decoder (features: the encoder's last hidden state)
    torch.save({"model": pretrain_state(half, 64, g)}, os.path.join(outdir, "vit_tiny_pt.pth"))
    meta = {}
    for v in videos:
        frames = read_frames(v)
        feats = extract(m, frames).astype(np.float32)
        name = os.path.basename(v).split(".")[0]
        np.save(os.path.join(outdir, name + ".npy"), feats)
        meta[name] = {"frames": int(len(frames)), "clips": int(feats.shape[0]),
                      "max_abs": float(np.abs(feats).max())}
        print(f"{v}: {len(frames)} frames -> {feats.shape}", file=sys.stderr)
        if name == "rgb":  # the pretraining file's encoder: encoder.norm = fc_norm's weights
            m.pretrain_norm = m.fc_norm
            np.save(os.path.join(outdir, name + "_pt.npy"), extract(m, frames).astype(np.float32))
            m.pretrain_norm = None
    import av
    meta["_versions"] = {"torch": torch.__version__, "numpy": np.__version__, "av": av.__version__,
                         "videomae2": "OpenGVLab/VideoMAEv2 29eab1e (extract_tad_feature.py, "
                                      "models/modeling_finetune.py)"}
    with open(os.path.join(outdir, "meta.json"), "w") as f:
        json.dump(meta, f, indent=1, sort_keys=True)


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("fixture")
    a.add_argument("outdir")
    a.add_argument("videos", nargs="+")
    c = sub.add_parser("random", help="a random-weight checkpoint in VideoMAE V2's layout")
    c.add_argument("--arch", default="768,12,12,16,4", help="hidden,depth,heads,patch,mlp_ratio")
    c.add_argument("--classes", type=int, default=710)
    c.add_argument("--fp16", action="store_true", help="{'model': float16} (the distilled "
                   "ViT-S/B) instead of {'module': float32} (the K710 ViT-g)")
    c.add_argument("--seed", type=int, default=0)
    c.add_argument("out")
    b = sub.add_parser("extract")
    b.add_argument("--ckpt", required=True)
    b.add_argument("--arch", default="1408,40,16,14,4.3636363636363635",
                   help="hidden,depth,heads,patch,mlp_ratio (default ViT-g/14)")
    b.add_argument("--classes", type=int, default=710)
    b.add_argument("--stride", type=int, default=4)
    b.add_argument("--out", required=True)
    b.add_argument("--threads", type=int, default=0)
    b.add_argument("videos", nargs="+")
    args = ap.parse_args()
    if args.cmd == "fixture":
        return fixture(args.outdir, args.videos)
    if args.cmd == "random":
        d, depth, heads, patch, ratio = args.arch.split(",")
        torch.manual_seed(args.seed)
        m = VisionTransformer(int(d), int(depth), int(heads), int(patch), float(ratio), args.classes)
        g = torch.Generator().manual_seed(args.seed)
        with torch.no_grad():  # trunc_normal(0.02) linears as the original's _init_weights,
            for name, p in m.named_parameters():  # random LayerNorms and biases
                if "norm" in name and name.endswith("weight"):
                    p.copy_(1 + 0.2 * torch.randn(p.shape, generator=g))
                elif p.ndim == 1:
                    p.copy_(0.02 * torch.randn(p.shape, generator=g))
                else:
                    p.copy_(torch.randn(p.shape, generator=g).clamp(-2, 2) * 0.02)
        sd = m.state_dict()
        torch.save({"model": {k: v.half() for k, v in sd.items()}} if args.fp16 else {"module": sd},
                   args.out)
        return
    if args.threads:
        torch.set_num_threads(args.threads)
    d, depth, heads, patch, ratio = args.arch.split(",")
    m = VisionTransformer(int(d), int(depth), int(heads), int(patch), float(ratio), args.classes)
    ckpt = torch.load(args.ckpt, map_location="cpu")
    for key in ["model", "module"]:
        if key in ckpt:
            ckpt = ckpt[key]
            break
    m.load_state_dict({k: v.float() for k, v in ckpt.items()})
    m.eval()
    os.makedirs(args.out, exist_ok=True)
    for v in args.videos:
        url = os.path.join(args.out, os.path.basename(v).split(".")[0] + ".npy")
        if os.path.exists(url):
            continue
        np.save(url, extract(m, read_frames(v), args.stride))
        print(f"save feature on {url}", file=sys.stderr)


if __name__ == "__main__":
    main()
