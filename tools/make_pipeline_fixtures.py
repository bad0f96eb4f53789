#!/usr/bin/env python3
"""End-to-end references for `tubelet classify` and for position-table interpolation.

Usage:
    /work/venv/bin/python tools/make_pipeline_fixtures.py [--only pipeline|interp] [--bin build/tubelet]

1. tests/fixtures/pipeline/  (read by tests/test_video_cli.sh)

   <family>/            a small random-weight *ForVideoClassification directory per family
                        (videomae, timesformer (divided_space_time), vivit): config.json with a
                        16-label id2label (names with spaces, quotes, a backslash, non-ASCII),
                        model.safetensors, and a preprocessor_config.json shaped like the published
                        checkpoint's (MCG-NJU/videomae-base-finetuned-kinetics,
                        facebook/timesformer-base-finetuned-k400, google/vivit-b-16x2-kinetics400)
                        at a small size.
   portrait.webm        a generated VP9 video (ffmpeg CLI), 72x96, 45 frames; the other videos are
                        tests/fixtures/video/h264.mp4 (60 frames) and rotated.mp4 (rotation
                        metadata, 20 frames).
   expected.json        per (model, video): what transformers'
                        pipeline("video-classification", model=DIR, top_k=5)(VIDEO) returns, the
                        processor class and frame indices the pipeline used, the tubelet command
                        line that reproduces it, and which tubelet --sampling modes give exactly
                        the pipeline's pixel_values (checked with --bin, when it exists).
   expected_<family>_<video>.txt
                        the same top-5, one line per rank: the label (UTF-8, as in id2label), a
                        TAB, the score with 6 decimals.

   Every parameter is randomised (tools/make_fixtures.py randomize_); then the classifier is
   redrawn (seeded draws at a few scales, the first that works) so that in every case the top 6
   probabilities are at least MIN_GAP apart: a 1e-6 numeric difference cannot reorder the top 5
   or change its membership.

2. tests/fixtures/interp/  (read by tests/test_interp.c)

   models/<name>/       tiny random models (config image 16, patch 4 -> 4x4 grid)
   <case>/              input.npy (B, T, C, H, W) at a size other than the config's, and the
                        float64 reference logits.npy / hidden.npy stored as float32
   list.txt             "case model" per line (cases at the config's size too, as controls)
   bicubic_<name>_{src,dst}.npy, bicubic.txt
                        (h0, w0, D) -> (h1, w1, D) through F.interpolate(mode="bicubic",
                        align_corners=False) in float64, for tb_resize_bicubic
   meta.json            what each case checks, and what HF's own ViViT interpolate_pos_encoding
                        does with these inputs

   References: TimeSformer = HF's own nearest resize of position / time embeddings (just the HF
   model at the other size). VideoMAE = HF with embeddings.position_embeddings replaced by the
   config grid's sinusoid table resized per temporal slice: (T0*H0*W0, D) -> (T0, D, H0, W0) ->
   bicubic (H1, W1) -> (1, T0*H1*W1, D) (STMixer); ViViT = HF with position_embeddings replaced by
   [cls position, the same per-slice bicubic resize of the (T0, H0, W0, D) patch positions].
"""
import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from make_fixtures import build_model, randomize_, save_npy  # noqa: E402

import transformers  # noqa: E402
from transformers import (  # noqa: E402
    TimesformerForVideoClassification,
    VideoMAEForVideoClassification,
    VivitForVideoClassification,
)
from transformers.utils import logging as hf_logging  # noqa: E402

hf_logging.set_verbosity_error()

PIPE = os.path.join(REPO, "tests", "fixtures", "pipeline")
INTERP = os.path.join(REPO, "tests", "fixtures", "interp")
MIN_GAP = 2e-3

LABELS = [
    "jumping jacks", "playing \"guitar\"", "café au lait", "tai chi", "riding a bike",
    "abseiling", "back\\slash dance", "pull ups", "zumba", "snowkiting", "yo-yo",
    "push up", "surfing water", "跳绳 (skipping rope)", "it's raining", "juggling, balls",
]

# as the published checkpoints' preprocessor_config.json, at a small size
PREPROC = {
    "videomae": {  # MCG-NJU/videomae-base-finetuned-kinetics: shortest 224, crop 224
        "crop_size": {"height": 32, "width": 32},
        "do_center_crop": True, "do_normalize": True, "do_rescale": True, "do_resize": True,
        "image_mean": [0.485, 0.456, 0.406], "image_processor_type": "VideoMAEImageProcessor",
        "image_std": [0.229, 0.224, 0.225], "resample": 2,
        "rescale_factor": 0.00392156862745098, "size": {"shortest_edge": 40},
    },
    "timesformer": {  # facebook/timesformer-base-finetuned-k400
        "crop_size": {"height": 32, "width": 32},
        "do_center_crop": True, "do_normalize": True, "do_rescale": True, "do_resize": True,
        "image_mean": [0.45, 0.45, 0.45], "image_processor_type": "VideoMAEImageProcessor",
        "image_std": [0.225, 0.225, 0.225], "resample": 2,
        "rescale_factor": 0.00392156862745098, "size": {"shortest_edge": 36},
    },
    "vivit": {  # google/vivit-b-16x2-kinetics400: shortest 256, crop 224, offset
        "crop_size": {"height": 32, "width": 32},
        "do_center_crop": True, "do_normalize": True, "do_rescale": True, "do_resize": True,
        "image_mean": [0.5, 0.5, 0.5], "image_processor_type": "VivitImageProcessor",
        "image_std": [0.5, 0.5, 0.5], "offset": True, "resample": 2,
        "rescale_factor": 0.00784313725490196, "size": {"shortest_edge": 40},
    },
}

_COMMON = dict(image_size=32, num_frames=8, hidden_size=32, num_attention_heads=2,
               num_hidden_layers=2, intermediate_size=64, num_labels=len(LABELS),
               id2label={i: l for i, l in enumerate(LABELS)},
               label2id={l: i for i, l in enumerate(LABELS)})
PIPE_MODELS = [
    dict(name="videomae", family="videomae", seed=5001,
         config=dict(_COMMON, patch_size=8, tubelet_size=2, qkv_bias=True, use_mean_pooling=True)),
    dict(name="timesformer", family="timesformer", seed=5002,
         config=dict(_COMMON, patch_size=8, attention_type="divided_space_time")),
    dict(name="vivit", family="vivit", seed=5003,
         config=dict(_COMMON, tubelet_size=[2, 8, 8], hidden_act="gelu_fast")),
]
# name used in file names, path relative to the repository root
VIDEOS = [
    ("h264", "tests/fixtures/video/h264.mp4"),
    ("rotated", "tests/fixtures/video/rotated.mp4"),
    ("portrait", "tests/fixtures/pipeline/portrait.webm"),
]
CLASSES = {"videomae": VideoMAEForVideoClassification,
           "timesformer": TimesformerForVideoClassification,
           "vivit": VivitForVideoClassification}
PREFIX = {"videomae": "videomae", "timesformer": "timesformer", "vivit": "vivit"}


def ff(*args):
    subprocess.run(["ffmpeg", "-nostdin", "-hide_banner", "-loglevel", "error", "-y", *args],
                   check=True)


def make_portrait(path):
    # moving content (testsrc2 + a rotating hue) so that the sampled frames differ
    ff("-f", "lavfi", "-i", "testsrc2=size=72x96:rate=30,trim=end_frame=45,hue=h=8*t*360",
       "-pix_fmt", "yuv420p", "-c:v", "libvpx-vp9", "-deadline", "good", "-cpu-used", "4",
       "-threads", "1", "-g", "15", "-b:v", "120k", path)


def chmod_dir(d):
    for fn in os.listdir(d):
        p = os.path.join(d, fn)
        if os.path.isfile(p):
            os.chmod(p, 0o644)


def pipeline_top(d, video, k):
    from transformers import pipeline
    pipe = pipeline("video-classification", model=d)
    assert pipe.video_processor is not None, "expected the video-processor path"
    return pipe, pipe(video, top_k=k)


def top_gaps(res):
    s = [r["score"] for r in res]
    return min(a - b for a, b in zip(s, s[1:6]))


def save_model_dir(model, d, family):
    if os.path.isdir(d):
        shutil.rmtree(d)
    model.save_pretrained(d)
    with open(os.path.join(d, "preprocessor_config.json"), "w") as f:
        json.dump(PREPROC[family], f, indent=2, sort_keys=True)
        f.write("\n")
    chmod_dir(d)


def make_pipeline_model(spec, videos):
    """Random model; then the classifier is redrawn (seeded, a few scales) until the top 6
    probabilities of every video are MIN_GAP apart. The search works on the classifier's input
    features of the pipeline's own pixel_values; the final model is checked through the pipeline."""
    d = os.path.join(PIPE, spec["name"])
    gen = torch.Generator().manual_seed(spec["seed"])
    torch.manual_seed(spec["seed"])
    model = build_model(spec["family"], spec["config"])
    randomize_(model, gen)
    save_model_dir(model, d, spec["family"])
    feats = []
    hook = model.classifier.register_forward_hook(lambda mod, inp, out: feats.append(inp[0].detach()))
    for _, v in videos:
        pipe, _ = pipeline_top(d, os.path.join(REPO, v), 5)
        with torch.no_grad():
            model(**pipe.preprocess(os.path.join(REPO, v)))
    hook.remove()
    X = torch.cat(feats).double()  # (videos, D)
    D, L = X.shape[1], len(LABELS)
    for k in range(1000):
        g = torch.Generator().manual_seed(spec["seed"] * 1000 + k)
        W = torch.randn((L, D), generator=g, dtype=torch.float64) / math.sqrt(D)
        b = 0.1 * torch.randn((L,), generator=g, dtype=torch.float64)
        for scale in (1.0, 1.5, 2.0, 3.0):
            p = torch.softmax(X @ (scale * W).T + scale * b, -1)
            s = p.sort(-1, descending=True).values[:, :6]
            gap = float((s[:, :-1] - s[:, 1:]).min())
            if gap >= 2 * MIN_GAP:
                break
        if gap >= 2 * MIN_GAP:
            break
    else:
        sys.exit(f"{spec['name']}: no classifier separates the top 5 by {MIN_GAP}")
    with torch.no_grad():
        model.classifier.weight.copy_((scale * W).float())
        model.classifier.bias.copy_((scale * b).float())
    save_model_dir(model, d, spec["family"])
    gaps = [top_gaps(pipeline_top(d, os.path.join(REPO, v), L)[1]) for _, v in videos]
    print(f"  {spec['name']}: classifier draw {k}, scale {scale}: smallest top-6 gap {min(gaps):.2e}")
    assert min(gaps) >= MIN_GAP, gaps
    return d, {"draw": k, "scale": scale}, min(gaps)


def processor_indices(d, video, T):
    from transformers import AutoVideoProcessor
    vp = AutoVideoProcessor.from_pretrained(d)
    out = vp(video, do_sample_frames=True, num_frames=T, return_metadata=True, return_tensors="pt")
    return type(vp).__name__, [int(i) for i in out["video_metadata"][0].frames_indices], \
        out["pixel_values"][0].numpy()


def tubelet_checks(binpath, d, video, pv_pipe, res_pipe):
    """Which --sampling modes of tubelet give the pipeline's pixel_values / top-5."""
    pix, top = [], []
    with tempfile.TemporaryDirectory() as t:
        for mode in ("hf", "uniform", "clip", "hf-rate"):
            o = os.path.join(t, mode + ".npy")
            r = subprocess.run([binpath, "preprocess", "--model", d, video, "-o", o,
                                "--sampling", mode], capture_output=True, text=True)
            if r.returncode == 0:
                x = np.load(o)[0]
                if x.shape == pv_pipe.shape and np.array_equal(x, pv_pipe):
                    pix.append(mode)
            r = subprocess.run([binpath, "classify", "--model", d, video, "--top", "5", "--json",
                                "--sampling", mode], capture_output=True, text=True)
            if r.returncode == 0:
                got = json.loads(r.stdout)[0]["top"]
                if [g["label"] for g in got] == [p["label"] for p in res_pipe] and \
                        max(abs(g["score"] - p["score"]) for g, p in zip(got, res_pipe)) <= 1e-4:
                    top.append(mode)
    return pix, top


def make_pipeline(binpath):
    os.makedirs(PIPE, exist_ok=True)
    portrait = os.path.join(REPO, VIDEOS[2][1])
    if not os.path.exists(portrait):
        make_portrait(portrait)
    for fn in os.listdir(PIPE):
        if fn.startswith("expected"):
            os.remove(os.path.join(PIPE, fn))
    import torchcodec
    import torchvision
    meta = {"generated_with": {"transformers": transformers.__version__, "torch": torch.__version__,
                               "torchvision": torchvision.__version__,
                               "torchcodec": torchcodec.__version__},
            "reference": "transformers.pipeline('video-classification', model=DIR, top_k=5)(VIDEO)",
            "tolerance": {"labels": "exact, same order", "score": 1e-4},
            "labels": LABELS, "models": {}, "cases": []}
    have_bin = binpath and os.access(binpath, os.X_OK)
    if not have_bin:
        print(f"warning: {binpath} not found: the sampling modes are not checked")
    for spec in PIPE_MODELS:
        d, scale, gap = make_pipeline_model(spec, VIDEOS)
        rel = os.path.relpath(d, REPO)
        meta["models"][spec["name"]] = {"dir": rel, "class": CLASSES[spec["family"]].__name__,
                                        "seed": spec["seed"], "classifier": scale,
                                        "min_top6_gap": gap}
        for vname, vrel in VIDEOS:
            video = os.path.join(REPO, vrel)
            pipe, res = pipeline_top(d, video, 5)
            pv_pipe = pipe.preprocess(video)["pixel_values"][0].float().numpy()
            cls, idx, pv = processor_indices(d, video, spec["config"]["num_frames"])
            assert np.array_equal(pv, pv_pipe), "processor and pipeline disagree"
            _, full = pipeline_top(d, video, len(LABELS))
            case = {"model": spec["name"], "video": vrel,
                    "command": f"build/tubelet classify --model {rel} {vrel} --top 5 --json",
                    "processor": cls, "indices": idx,
                    "pixel_values_shape": list(pv_pipe.shape),
                    "top5": [{"label": r["label"], "score": r["score"]} for r in res],
                    "top6_min_gap": top_gaps(full)}
            if have_bin:
                pix, top = tubelet_checks(binpath, d, video, pv_pipe, res)
                case["tubelet_sampling_same_pixel_values"] = pix
                case["tubelet_sampling_same_top5"] = top
                assert "hf" in top, f"{spec['name']} {vname}: tubelet --sampling hf differs"
            meta["cases"].append(case)
            with open(os.path.join(PIPE, f"expected_{spec['name']}_{vname}.txt"), "w",
                      encoding="utf-8") as f:
                for r in res:
                    assert not set(r["label"]) & set("\t\n\r"), r["label"]
                    f.write(f"{r['label']}\t{r['score']:.6f}\n")
            print(f"{spec['name']:12s} {vname:9s} {cls}: indices {idx} -> "
                  + ", ".join(f"{r['label']} {r['score']:.4f}" for r in res)
                  + (f"  [pixels equal for {case['tubelet_sampling_same_pixel_values']}, "
                     f"top-5 equal for {case['tubelet_sampling_same_top5']}]" if have_bin else ""))
    with open(os.path.join(PIPE, "expected.json"), "w", encoding="utf-8") as f:
        json.dump(meta, f, indent=1, ensure_ascii=False)
        f.write("\n")


# ----------------------------------------------------------------------------------------------
# position interpolation
# ----------------------------------------------------------------------------------------------

_TINY = dict(image_size=16, hidden_size=24, num_attention_heads=2, num_hidden_layers=1,
             intermediate_size=48, num_labels=5)
INTERP_MODELS = [
    dict(name="ts_joint", family="timesformer", seed=6001,
         config=dict(_TINY, patch_size=4, num_frames=3, attention_type="joint_space_time")),
    dict(name="ts_space", family="timesformer", seed=6002,
         config=dict(_TINY, patch_size=4, num_frames=3, attention_type="space_only")),
    dict(name="ts_divided", family="timesformer", seed=6003,
         config=dict(_TINY, patch_size=4, num_frames=4, attention_type="divided_space_time")),
    dict(name="vm", family="videomae", seed=6004,
         config=dict(_TINY, patch_size=4, num_frames=4, tubelet_size=2, qkv_bias=True,
                     use_mean_pooling=True)),
    dict(name="vv", family="vivit", seed=6005,
         config=dict(_TINY, num_frames=4, tubelet_size=[2, 4, 4])),
]
# case, model, batch, frames, height, width, note
INTERP_CASES = [
    ("ts_joint_24x24_f5", "ts_joint", 1, 5, 24, 24,
     "joint_space_time, grid 4x4 -> 6x6 and 3 -> 5 frames: HF's own nearest resize of the "
     "spatial positions and of the time embeddings"),
    ("ts_joint_12x20_f2", "ts_joint", 2, 2, 12, 20,
     "joint_space_time, 4x4 -> 3x5 (smaller, non-square), 3 -> 2 frames, batch 2"),
    ("ts_space_24x24", "ts_space", 1, 3, 24, 24, "space_only, 4x4 -> 6x6"),
    ("ts_space_20x28_f2", "ts_space", 1, 2, 20, 28,
     "space_only, 4x4 -> 5x7, 2 frames (space_only has no time embeddings)"),
    ("ts_divided_24x16", "ts_divided", 1, 4, 24, 16,
     "divided_space_time, 4x4 -> 6x4 (more rows only: the one change HF's divided layer "
     "handles, it takes frames and columns from config.json)"),
    ("ts_divided_12x20_f6", "ts_divided", 1, 6, 12, 20,
     "divided_space_time, 4x4 -> 3x5, 4 -> 6 frames; reference: HF with config.num_frames and "
     "config.image_size set to the input's after loading, so that TimesformerLayer's divided "
     "reshapes use the input's layout (as the original TimeSformer does) while the embeddings "
     "still resize the trained tables (nearest)"),
    ("vm_24x24", "vm", 1, 4, 24, 24,
     "VideoMAE, grid 2x4x4 -> 2x6x6: sinusoid table per temporal slice, bicubic (STMixer)"),
    ("vm_12x12", "vm", 2, 4, 12, 12, "VideoMAE, 4x4 -> 3x3 (downscale), batch 2"),
    ("vm_20x28", "vm", 1, 4, 20, 28, "VideoMAE, 4x4 -> 5x7 (non-square)"),
    ("vv_24x24", "vv", 1, 4, 24, 24,
     "ViViT, 2x4x4 -> 2x6x6: learned patch positions per temporal slice, bicubic; cls kept"),
    ("vv_28x20", "vv", 1, 4, 28, 20, "ViViT, 4x4 -> 7x5 (non-square)"),
    # the config's own size: the model's tables untouched while states of other sizes share it
    ("ts_joint_16x16", "ts_joint", 1, 3, 16, 16, "config size (control)"),
    ("ts_divided_16x16", "ts_divided", 1, 4, 16, 16, "config size (control)"),
    ("vm_16x16", "vm", 1, 4, 16, 16, "config size (control)"),
    ("vv_16x16", "vv", 1, 4, 16, 16, "config size (control)"),
]
BICUBIC = [  # name, h0, w0, h1, w1, D
    ("up_4x4_6x6", 4, 4, 6, 6, 3),
    ("down_6x5_3x4", 6, 5, 3, 4, 2),
    ("mixed_4x4_7x3", 4, 4, 7, 3, 2),
    ("same_3x3", 3, 3, 3, 3, 2),
    ("one_1x1_2x3", 1, 1, 2, 3, 2),
    ("up_2x2_5x5", 2, 2, 5, 5, 1),
    ("big_14x14_16x16", 14, 14, 16, 16, 4),
]


def resize_slices(table, t0, h0, w0, h1, w1):
    """(t0*h0*w0, D) -> (t0*h1*w1, D): per temporal slice, F.interpolate bicubic, float64."""
    D = table.shape[-1]
    x = table.reshape(t0, h0, w0, D).permute(0, 3, 1, 2)
    y = F.interpolate(x, size=(h1, w1), mode="bicubic", align_corners=False)
    return y.permute(0, 2, 3, 1).reshape(t0 * h1 * w1, D)


def hf_vivit_interpolate_report(d, x):
    """What VivitForVideoClassification(..., interpolate_pos_encoding=True) does."""
    m = VivitForVideoClassification.from_pretrained(d, dtype=torch.float64,
                                                    attn_implementation="sdpa").eval()
    try:
        with torch.no_grad():
            m(pixel_values=x.double(), interpolate_pos_encoding=True)
        return "runs"
    except Exception as ex:  # noqa: BLE001
        return f"{type(ex).__name__}: {str(ex).splitlines()[0]}"


def interp_reference(spec, d, x):
    family = spec["family"]
    cls = CLASSES[family]
    attn = "sdpa" if family == "vivit" else "eager"
    m = cls.from_pretrained(d, dtype=torch.float64, attn_implementation=attn).eval()
    cfg = m.config
    B, T, C, H1, W1 = x.shape
    if family == "videomae":
        p = cfg.patch_size
        t0, h0, w0 = cfg.num_frames // cfg.tubelet_size, cfg.image_size // p, cfg.image_size // p
        emb = m.videomae.embeddings
        assert T == cfg.num_frames
        # VideoMAEEmbeddings.forward adds self.position_embeddings (a plain tensor attribute, not
        # a parameter or buffer) with .type_as(embeddings): replacing the attribute is enough; the
        # patch embedding's image-size check has to be told the new size.
        table = emb.position_embeddings.double()[0]
        emb.position_embeddings = resize_slices(table, t0, h0, w0, H1 // p, W1 // p)[None]
        emb.patch_embeddings.image_size = (H1, W1)
    elif family == "vivit":
        kt, kh, kw = cfg.tubelet_size
        t0, h0, w0 = cfg.num_frames // kt, cfg.image_size // kh, cfg.image_size // kw
        emb = m.vivit.embeddings
        pos = emb.position_embeddings.detach().double()[0]
        new = torch.cat([pos[:1], resize_slices(pos[1:], t0, h0, w0, H1 // kh, W1 // kw)])
        emb.position_embeddings = torch.nn.Parameter(new[None])
        emb.image_size = (H1, W1)  # VivitEmbeddings.forward checks the size against this
    elif family == "timesformer" and cfg.attention_type == "divided_space_time":
        # TimesformerLayer (divided) reshapes with config.num_frames and
        # config.image_size // patch_size columns, whatever the input: tell it the input's
        # layout (the embeddings compare with their parameters' sizes, not with config)
        if T != cfg.num_frames or W1 // cfg.patch_size != cfg.image_size // cfg.patch_size:
            for layer in m.timesformer.encoder.layer:
                layer.config.num_frames = T
                layer.config.image_size = W1
            assert m.timesformer.embeddings.time_embeddings.shape[1] != T
    with torch.no_grad():
        xd = x.double()
        out = m(pixel_values=xd)
        logits = out.logits
        hidden = getattr(m, PREFIX[family])(xd).last_hidden_state
    return logits, hidden


def make_interp():
    if os.path.isdir(INTERP):
        shutil.rmtree(INTERP)
    os.makedirs(os.path.join(INTERP, "models"))
    meta = {"generated_with": {"transformers": transformers.__version__, "torch": torch.__version__},
            "tolerance": "max abs error <= 1e-4 * max(1, max|ref|)", "cases": {}, "bicubic": {}}
    dirs = {}
    for spec in INTERP_MODELS:
        d = os.path.join(INTERP, "models", spec["name"])
        gen = torch.Generator().manual_seed(spec["seed"])
        torch.manual_seed(spec["seed"])
        model = build_model(spec["family"], spec["config"])
        randomize_(model, gen)
        model.save_pretrained(d)
        chmod_dir(d)
        dirs[spec["name"]] = (spec, d)
    lines = []
    for case, mname, B, T, H, W, note in INTERP_CASES:
        spec, d = dirs[mname]
        gen = torch.Generator().manual_seed(sum(map(ord, case)) + 7000)
        x = torch.randn((B, T, 3, H, W), generator=gen, dtype=torch.float32)
        logits, hidden = interp_reference(spec, d, x)
        cd = os.path.join(INTERP, case)
        os.makedirs(cd)
        save_npy(os.path.join(cd, "input.npy"), x.numpy())
        save_npy(os.path.join(cd, "logits.npy"), logits.numpy())
        save_npy(os.path.join(cd, "hidden.npy"), hidden.numpy())
        entry = {"model": mname, "input_shape": list(x.shape), "logits_shape": list(logits.shape),
                 "hidden_shape": list(hidden.shape), "note": note}
        if spec["family"] == "vivit":
            entry["hf_interpolate_pos_encoding"] = hf_vivit_interpolate_report(d, x)
        meta["cases"][case] = entry
        lines.append(f"{case} {mname}")
        print(f"{case:22s} {mname:10s} in{list(x.shape)} logits{list(logits.shape)} "
              f"hidden{list(hidden.shape)} max|logits| {logits.abs().max():.3f}"
              + (f"  HF interpolate_pos_encoding=True: {entry['hf_interpolate_pos_encoding']}"
                 if "hf_interpolate_pos_encoding" in entry else ""))
    # HF's own ViViT interpolation at the config size and a few others, for the record
    spec, d = dirs["vv"]
    rep = {}
    for (T, H, W) in ((4, 16, 16), (4, 24, 24), (4, 28, 20), (2, 24, 20)):
        x = torch.randn((1, T, 3, H, W), generator=torch.Generator().manual_seed(1))
        rep[f"{T}x{H}x{W}"] = hf_vivit_interpolate_report(d, x)
    # T0 = 1 (one temporal index) and T0 = 4 (4*4*4 = 64 positions: a perfect square)
    for frames in (2, 8):
        with tempfile.TemporaryDirectory() as t:
            build_model("vivit", dict(spec["config"], num_frames=frames)).save_pretrained(t)
            for (H, W) in ((24, 24), (28, 20)):
                x = torch.randn((1, frames, 3, H, W), generator=torch.Generator().manual_seed(1))
                rep[f"T0={frames // 2} model: {frames}x{H}x{W}"] = hf_vivit_interpolate_report(t, x)
    meta["hf_vivit_interpolate_pos_encoding"] = {
        "model": "vv: num_frames 4, tubelet [2, 4, 4], image 16 -> T0*H0*W0 = 2*4*4 = 32 positions",
        "results": rep}
    for k, v in rep.items():
        print(f"  HF ViViT interpolate_pos_encoding=True, input {k}: {v}")
    with open(os.path.join(INTERP, "list.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    names = []
    for name, h0, w0, h1, w1, D in BICUBIC:
        gen = torch.Generator().manual_seed(sum(map(ord, name)))
        src = torch.randn((h0, w0, D), generator=gen, dtype=torch.float32)
        dst = F.interpolate(src.double().permute(2, 0, 1)[None], size=(h1, w1), mode="bicubic",
                            align_corners=False)[0].permute(1, 2, 0)
        save_npy(os.path.join(INTERP, f"bicubic_{name}_src.npy"), src.numpy())
        save_npy(os.path.join(INTERP, f"bicubic_{name}_dst.npy"), dst.numpy())
        d32 = F.interpolate(src.permute(2, 0, 1)[None], size=(h1, w1), mode="bicubic",
                            align_corners=False)[0].permute(1, 2, 0)
        meta["bicubic"][name] = {"src": [h0, w0, D], "dst": [h1, w1, D],
                                 "torch_float32_vs_float64": float((d32.double() - dst).abs().max())}
        names.append(name)
    with open(os.path.join(INTERP, "bicubic.txt"), "w") as f:
        f.write("\n".join(names) + "\n")
    with open(os.path.join(INTERP, "meta.json"), "w") as f:
        json.dump(meta, f, indent=1)
        f.write("\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", choices=["pipeline", "interp"])
    ap.add_argument("--bin", default=os.path.join(REPO, "build", "tubelet"),
                    help="tubelet binary used to check which --sampling matches the pipeline")
    args = ap.parse_args()
    torch.set_num_threads(max(1, min(4, os.cpu_count() or 1)))
    if args.only != "interp":
        make_pipeline(args.bin)
    if args.only != "pipeline":
        make_interp()


if __name__ == "__main__":
    main()
