#!/usr/bin/env python3
"""Writes the video-pipeline reference of tests/test_video.c into tests/fixtures/video/.

For each case: a committed video (made once by tests/make_media.sh and committed, so that this
script and the C test read the same bytes), a preprocessor_config.json (committed too), and what
transformers 5.23's video-classification pipeline does with them:

  * "hf" cases: pipeline("video-classification").preprocess(video, num_frames=T), i.e. the
    model's video processor (VideoMAEVideoProcessor / VivitVideoProcessor, torchvision backend)
    decoding with torchcodec (exact seek mode), sampling default_sample_indices_fn
    (i * F // T) and preprocessing. The script checks that the processor called directly gives
    the same tensor as the pipeline.
  * "hf-rate" cases: the pipeline's legacy image-processor path (models without a video
    processor): PyAV decoding, np.linspace(0, T*r - 1, T) indices, VideoMAEImageProcessor;
    for X-CLIP's config also XCLIPProcessor (the same tensor, asserted).

Saved per case: <name>.pixel_values.npy (float32, (T, C, H, W)) and, in cases.json, the frame
indices and an FNV-1a 64 hash of every sampled decoded RGB24 frame (H, W, 3), so the C test
checks decoding bit-exactly without storing frames.

    /work/venv/bin/pip install torchvision torchcodec av pillow   # besides tools/requirements.txt
    /work/venv/bin/python tools/make_video_fixtures.py            # rewrites tests/fixtures/video/
    /work/venv/bin/python tools/make_video_fixtures.py --report   # + PIL-backend and PyAV deltas
"""
import argparse
import json
import os
import sys
import tempfile

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
FIX = os.path.join(HERE, "..", "tests", "fixtures", "video")

CONFIGS = {
    # VideoMAE-style (as MCG-NJU/videomae-base-finetuned-kinetics, smaller sizes)
    "videomae": {
        "crop_size": {"height": 56, "width": 56},
        "do_center_crop": True, "do_normalize": True, "do_rescale": True, "do_resize": True,
        "feature_extractor_type": "VideoMAEFeatureExtractor",
        "image_mean": [0.485, 0.456, 0.406], "image_std": [0.229, 0.224, 0.225],
        "image_processor_type": "VideoMAEImageProcessor",
        "resample": 2, "rescale_factor": 0.00392156862745098,
        "size": {"shortest_edge": 64},
    },
    # ViViT-style (as google/vivit-b-16x2-kinetics400, smaller sizes)
    "vivit": {
        "crop_size": {"height": 64, "width": 64},
        "do_center_crop": True, "do_normalize": True, "do_rescale": True, "do_resize": True,
        "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5],
        "image_processor_type": "VivitImageProcessor",
        "offset": True, "resample": 2, "rescale_factor": 0.00784313725490196,
        "size": {"shortest_edge": 72},
    },
    # TimeSformer-style mean/std, bicubic, fixed {height, width} resize, crop larger than one side
    "timesformer": {
        "crop_size": {"height": 48, "width": 48},
        "do_center_crop": True, "do_normalize": True, "do_rescale": True, "do_resize": True,
        "image_mean": [0.45, 0.45, 0.45], "image_std": [0.225, 0.225, 0.225],
        "image_processor_type": "VideoMAEImageProcessor",
        "resample": 3, "rescale_factor": 0.00392156862745098,
        "size": {"height": 44, "width": 70},
    },
    # X-CLIP (as microsoft/xclip-base-patch32, smaller sizes): the legacy integer size and
    # crop_size, CLIP's mean and std, no rescale_factor (1/255); XCLIPProcessor runs these
    # through VideoMAEImageProcessor, and the script checks that it gives the same tensor
    "xclip": {
        "crop_size": 48,
        "do_center_crop": True, "do_normalize": True, "do_resize": True,
        "feature_extractor_type": "VideoMAEFeatureExtractor",
        "image_mean": [0.48145466, 0.4578275, 0.40821073],
        "image_std": [0.26862954, 0.26130258, 0.27577711],
        "resample": 2, "size": 56,
    },
}

# V-JEPA 2 (as facebook/vjepa2-vitl-fpc16-256-ssv2, crop 48 instead of 256): not a dict
# written here but what VJEPA2VideoProcessor(crop_size=48).save_pretrained writes, the transformers
# 5 file video_preprocessor_config.json; its short side int(48 * 256 / 224) = 54 comes from the
# crop (the processor's __init__), bilinear, ImageNet's mean and std
VIDEO_PROCESSORS = {"vjepa2": ("VJEPA2VideoProcessor", {"crop_size": 48})}

# name, video, config, mode, num_frames, stride (frame_sampling_rate for hf-rate)
CASES = [
    ("videomae_h264_hf", "h264.mp4", "videomae", "hf", 8, 1),
    ("vivit_rotated_hf", "rotated.mp4", "vivit", "hf", 6, 1),
    ("timesformer_odd_hf", "odd.mkv", "timesformer", "hf", 4, 1),
    ("videomae_h264_hfrate", "h264.mp4", "videomae", "hf-rate", 8, 4),
    ("xclip_h264_hfrate", "h264.mp4", "xclip", "hf-rate", 3, 2),
    ("vjepa2_odd_hf", "odd.mkv", "vjepa2", "hf", 6, 1),
]


def fnv1a64(b: bytes) -> str:
    h = 0xCBF29CE484222325
    a = np.frombuffer(b, dtype=np.uint8)
    # vectorised enough for small frames
    for x in a.tolist():
        h ^= x
        h = (h * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return "%016x" % h


def tiny_model_dir(d, family, num_frames):
    from transformers import (VideoMAEConfig, VideoMAEForVideoClassification, VivitConfig,
                              VivitForVideoClassification)
    torch.manual_seed(0)
    if family == "vivit":
        cfg = VivitConfig(image_size=64, num_frames=num_frames, tubelet_size=[2, 16, 16],
                          hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                          intermediate_size=37, num_labels=3)
        VivitForVideoClassification(cfg).save_pretrained(d)
    else:
        cfg = VideoMAEConfig(image_size=64, patch_size=16, num_frames=num_frames, tubelet_size=2,
                             hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                             intermediate_size=37, num_labels=3)
        VideoMAEForVideoClassification(cfg).save_pretrained(d)


def hf_case(video, cfg_name, T):
    """What pipeline('video-classification') feeds the model, and the indices and frames."""
    from transformers import AutoVideoProcessor, pipeline
    from torchcodec.decoders import VideoDecoder
    with tempfile.TemporaryDirectory() as d:
        tiny_model_dir(d, "vivit" if cfg_name == "vivit" else "videomae", T)
        with open(os.path.join(d, "preprocessor_config.json"), "w") as f:
            json.dump(CONFIGS[cfg_name], f)
        pipe = pipeline("video-classification", model=d)
        assert pipe.video_processor is not None, "expected the video-processor path"
        vp_class = type(pipe.video_processor).__name__
        inputs = pipe.preprocess(video, num_frames=T)
        pv_pipe = inputs["pixel_values"][0].float().numpy()
        vp = AutoVideoProcessor.from_pretrained(d)
        out = vp(video, do_sample_frames=True, num_frames=T, return_metadata=True, return_tensors="pt")
        pv = out["pixel_values"][0].numpy()
        idx = [int(i) for i in out["video_metadata"][0].frames_indices]
        assert np.array_equal(pv, pv_pipe), "pipeline and processor disagree"
    dec = VideoDecoder(video, seek_mode="exact")
    frames = dec.get_frames_at(indices=idx).data.permute(0, 2, 3, 1).contiguous().numpy()
    return pv, idx, frames, vp_class, int(dec.metadata.num_frames)


def video_processor_case(video, cfg_name, T):
    """A video processor saved by transformers itself (video_preprocessor_config.json) and run
    directly, as the pipeline runs it: decoding with torchcodec, default_sample_indices_fn."""
    import transformers
    from transformers import AutoVideoProcessor
    from torchcodec.decoders import VideoDecoder
    cls, kwargs = VIDEO_PROCESSORS[cfg_name]
    d = os.path.join(FIX, cfg_name)
    os.makedirs(d, exist_ok=True)
    for old in os.listdir(d):
        os.remove(os.path.join(d, old))
    getattr(transformers, cls)(**kwargs).save_pretrained(d)
    assert os.listdir(d) == ["video_preprocessor_config.json"], os.listdir(d)
    vp = AutoVideoProcessor.from_pretrained(d)
    assert type(vp).__name__ == cls, type(vp).__name__
    out = vp(video, do_sample_frames=True, num_frames=T, return_metadata=True, return_tensors="pt")
    pv = out[vp.model_input_names[0]][0].numpy()  # VJEPA2: pixel_values_videos
    idx = [int(i) for i in out["video_metadata"][0].frames_indices]
    dec = VideoDecoder(video, seek_mode="exact")
    frames = dec.get_frames_at(indices=idx).data.permute(0, 2, 3, 1).contiguous().numpy()
    return pv, idx, frames, cls, int(dec.metadata.num_frames)


def hfrate_case(video, cfg_name, T, r):
    """The pipeline's image-processor path (transformers.pipelines.video_classification)."""
    import av
    from transformers import AutoImageProcessor
    from transformers.pipelines.video_classification import read_video_pyav
    with tempfile.TemporaryDirectory() as d:
        with open(os.path.join(d, "preprocessor_config.json"), "w") as f:
            json.dump(CONFIGS[cfg_name], f)
        ip = AutoImageProcessor.from_pretrained(d)
        container = av.open(video)
        idx = np.linspace(0, T * r - 1, num=T, dtype=np.int64)
        frames = read_video_pyav(container, idx)
        pv = ip(list(frames), return_tensors="pt")["pixel_values"][0].numpy()
        if cfg_name == "xclip":
            from transformers import CLIPTokenizer, XCLIPProcessor
            tok = CLIPTokenizer.from_pretrained(os.path.join(FIX, "..", "xclip", "p32_f3"))
            xp = XCLIPProcessor(image_processor=ip, tokenizer=tok)
            pv_x = xp(videos=list(frames), return_tensors="pt")["pixel_values"][0].numpy()
            assert np.array_equal(pv, pv_x), "XCLIPProcessor and its image processor disagree"
        n = sum(1 for _ in av.open(video).decode(video=0))
    return pv, [int(i) for i in idx], frames, type(ip).__name__, n


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--report", action="store_true", help="also measure PIL backend / PyAV deltas")
    ap.add_argument("--only", nargs="+", metavar="CASE",
                    help="regenerate these cases only, keeping the others of cases.json")
    args = ap.parse_args()
    import transformers, torchvision, torchcodec
    meta = {"transformers": transformers.__version__, "torch": torch.__version__,
            "torchvision": torchvision.__version__, "torchcodec": torchcodec.__version__,
            "cpu_capability": torch.backends.cpu.get_cpu_capability(), "cases": []}
    only = set(args.only or [])
    if only:
        with open(os.path.join(FIX, "cases.json")) as f:
            old = json.load(f)
        meta["cases"] = [c for c in old["cases"] if c["name"] not in only]
    for name, cfg in CONFIGS.items():
        if only and not any(c[2] == name for c in CASES if c[0] in only):
            continue
        os.makedirs(os.path.join(FIX, name), exist_ok=True)
        with open(os.path.join(FIX, name, "preprocessor_config.json"), "w") as f:
            json.dump(cfg, f, indent=2, sort_keys=True)
            f.write("\n")
    for name, vid, cfg, mode, T, r in CASES:
        if only and name not in only:
            continue
        path = os.path.join(FIX, vid)
        config_file = "preprocessor_config.json"
        if cfg in VIDEO_PROCESSORS:
            pv, idx, frames, cls, F = video_processor_case(path, cfg, T)
            config_file = "video_preprocessor_config.json"
        elif mode == "hf":
            pv, idx, frames, cls, F = hf_case(path, cfg, T)
        else:
            pv, idx, frames, cls, F = hfrate_case(path, cfg, T, r)
        pv = np.ascontiguousarray(pv, dtype=np.float32)
        np.save(os.path.join(FIX, name + ".pixel_values.npy"), pv)
        hashes = [fnv1a64(np.ascontiguousarray(fr).tobytes()) for fr in frames]
        meta["cases"].append({"name": name, "video": vid, "config": cfg, "mode": mode,
                              "num_frames": T, "stride": r, "n_frames_video": F,
                              "processor": cls, "config_file": config_file,
                              "indices": idx, "frame_fnv1a64": hashes,
                              "shape": list(pv.shape)})
        print(f"{name}: {cls}, F={F}, indices={idx}, pixel_values {pv.shape}")
    with open(os.path.join(FIX, "cases.json"), "w") as f:
        json.dump(meta, f, indent=1)
        f.write("\n")
    if args.report:
        report()


def report():
    """Numbers for docs/video.md: the PIL backend (VideoMAEImageProcessorPil) against the
    torchvision one on the same frames."""
    from transformers import AutoImageProcessor
    from torchcodec.decoders import VideoDecoder
    for cfg_name, vid in (("videomae", "h264.mp4"), ("timesformer", "odd.mkv")):
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "preprocessor_config.json"), "w") as f:
                json.dump(CONFIGS[cfg_name], f)
            tv = AutoImageProcessor.from_pretrained(d)
            pil = AutoImageProcessor.from_pretrained(d, backend="pil")
            dec = VideoDecoder(os.path.join(FIX, vid), seek_mode="exact")
            fr = dec.get_frames_at(indices=list(range(8))).data.permute(0, 2, 3, 1).numpy()
            a = tv(list(fr), return_tensors="np")["pixel_values"][0]
            b = pil(list(fr), return_tensors="np")["pixel_values"][0]
            print(f"{cfg_name}: torchvision vs PIL backend ({type(pil).__name__}): "
                  f"max abs {np.abs(a - b).max():.4g}, mean abs {np.abs(a - b).mean():.3g}")


if __name__ == "__main__":
    sys.exit(main())
