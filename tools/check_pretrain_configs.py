#!/usr/bin/env python3
"""More VideoMAEForPreTraining configs against `tubelet grad --mask` / `tubelet run --mask`, without
fixtures: a rectangular image, a decoder of 0 blocks, an encoder of 0 blocks, 1 channel with
norm_pix_loss, gelu_new, tubelet 1, batch 1, masks that are not tubes. Prints the loss of both,
the logits' max abs error and the worst relative gradient error per tensor.

Usage: /work/venv/bin/python tools/check_pretrain_configs.py [build/tubelet]
"""
import json, os, subprocess, sys, tempfile
import numpy as np, torch
from safetensors.numpy import load_file
from transformers import VideoMAEConfig, VideoMAEForPreTraining
from transformers.utils import logging; logging.set_verbosity_error()
TUBELET = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "build", "tubelet")
cases = [
  dict(image_size=[8, 12], patch_size=4, num_frames=2, tubelet_size=2, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=20, decoder_hidden_size=8, decoder_num_hidden_layers=0, decoder_num_attention_heads=1, decoder_intermediate_size=8),
  dict(image_size=8, patch_size=4, num_channels=1, num_frames=4, tubelet_size=2, hidden_size=8, num_hidden_layers=0, num_attention_heads=1, intermediate_size=8, decoder_hidden_size=12, decoder_num_hidden_layers=1, decoder_num_attention_heads=3, decoder_intermediate_size=8, norm_pix_loss=True, hidden_act="gelu_new"),
  dict(image_size=16, patch_size=8, num_frames=4, tubelet_size=1, hidden_size=16, num_hidden_layers=2, num_attention_heads=4, intermediate_size=16, decoder_hidden_size=16, decoder_num_hidden_layers=1, decoder_num_attention_heads=4, decoder_intermediate_size=16, norm_pix_loss=False, use_mean_pooling=False, layer_norm_eps=1e-5),
]
for i, f in enumerate(cases):
    torch.manual_seed(i)
    m = VideoMAEForPreTraining(VideoMAEConfig(**f)).eval()
    with torch.no_grad():
        for p in m.parameters(): p.add_(0.05 * torch.randn_like(p))
    d = tempfile.mkdtemp(); m.save_pretrained(d)
    C = f.get("num_channels", 3); S = f["image_size"]; H, W = (S, S) if isinstance(S, int) else S
    B = 1 if i == 0 else 2
    x = np.random.default_rng(i).standard_normal((B, f["num_frames"], C, H, W)).astype(np.float32)
    N = (f["num_frames"] // f["tubelet_size"]) * (H // f["patch_size"]) * (W // f["patch_size"])
    k = max(1, N // 2)
    mask = np.zeros((B, N), bool)
    for b in range(B): mask[b, np.random.default_rng(10 + b).choice(N, k, replace=False)] = True
    np.save(d + "/x.npy", x); np.save(d + "/m.npy", mask.astype(np.uint8))
    m = m.double(); m.zero_grad()
    out = m(torch.from_numpy(x).double(), bool_masked_pos=torch.from_numpy(mask)); out.loss.backward()
    r = subprocess.run([TUBELET, "grad", "--model", d, "--input", d + "/x.npy", "--mask", d + "/m.npy", "-o", d + "/g.safetensors", "--threads", "1"], capture_output=True, text=True)
    r2 = subprocess.run([TUBELET, "run", "--model", d, "--input", d + "/x.npy", "--mask", d + "/m.npy", "--logits", d + "/l.npy", "--threads", "1"], capture_output=True, text=True)
    if r.returncode or r2.returncode: print(i, "FAILED", r.stderr, r2.stderr); continue
    g = load_file(d + "/g.safetensors"); keys = set(load_file(d + "/model.safetensors"))
    worst = 0
    for n, p in m.named_parameters():
        fn = n if n in keys else n.replace("query.bias", "q_bias").replace("value.bias", "v_bias")
        ref = p.grad.numpy(); worst = max(worst, np.abs(g[fn] - ref).max() / max(np.abs(ref).max(), 1e-30))
    L = np.load(d + "/l.npy")
    print(i, "loss", out.loss.item(), r.stdout.strip(), r2.stdout.strip(), "logits err", np.abs(L - out.logits.detach().numpy()).max(), "worst grad rel", worst, "n", len(g), len(list(m.parameters())))
