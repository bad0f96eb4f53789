"""X-CLIP parity fixtures (issue 31; docs/zero-shot.md): small random-weight XCLIPModel
directories as transformers saves them (config.json with text_config and vision_config,
model.safetensors) plus the CLIP tokenizer files of tests/fixtures/tokenizer/clip_small, an input
video x.npy (batch, frames, channels, height, width), the token ids of texts of different
lengths (ids.npy, int32, padded to the tokenizer's context, as X-CLIP's processor pads them),
and the reference outputs of XCLIPModel: logits_per_video.npy (batch, texts), text_embeds.npy
(batch, texts, projection_dim) and video_embeds.npy (batch, projection_dim), both normalised,
vision_pooled.npy (batch x frames, hidden), the vision tower's pooled output, and
video_features.npy (batch, projection_dim), get_video_features.

    /work/venv/bin/python tools/make_xclip_fixtures.py     (writes tests/fixtures/xclip/)
"""
import json
import os
import shutil

import numpy as np
import torch
from transformers import CLIPTokenizer, XCLIPConfig, XCLIPModel

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
TOK = os.path.join(ROOT, "tests", "fixtures", "tokenizer", "clip_small")
OUT = os.path.join(ROOT, "tests", "fixtures", "xclip")

TEXTS = ["a video of a cat", "someone falling", "the forklift is reversing slowly, isn't it?",
         "x"]

# name: (text config, vision config, top-level config, batch, context); the
# weights are kept small (< 1 MB for both): the token embedding of the 1,712-token vocabulary and
# the patch embedding dominate
CASES = {
    # patch 16 on 32x32, 8 frames, 2 prompt-generator layers
    "p16_f8": (dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                    num_attention_heads=2),
               dict(hidden_size=32, intermediate_size=96, num_hidden_layers=2,
                    num_attention_heads=4, mit_hidden_size=32, mit_intermediate_size=64,
                    mit_num_hidden_layers=1, mit_num_attention_heads=2, image_size=32,
                    patch_size=16, num_frames=8),
               dict(projection_dim=32, prompt_layers=2, prompt_num_attention_heads=4),
               2, 77),
    # patch 32 on 64x64, an odd frame count, 1 prompt-generator layer, a short context
    "p32_f3": (dict(hidden_size=16, intermediate_size=48, num_hidden_layers=2,
                    num_attention_heads=4, max_position_embeddings=16),
               dict(hidden_size=16, intermediate_size=40, num_hidden_layers=2,
                    num_attention_heads=2, mit_hidden_size=24, mit_intermediate_size=40,
                    mit_num_hidden_layers=1, mit_num_attention_heads=3, image_size=64,
                    patch_size=32, num_frames=3),
               dict(projection_dim=24, prompt_layers=1, prompt_num_attention_heads=2,
                    prompt_alpha=0.3),
               1, 16),
}


def clip_ordered_vocab():
    """clip_small's vocabulary with its start and end tokens moved to the last two ids, where
    CLIP has them (49406, 49407): XCLIPTextModel pools the largest id of each text (its legacy
    eos_token_id 2), which is then the end-of-text token, as with CLIP's real vocabulary."""
    with open(os.path.join(TOK, "vocab.json")) as f:
        vocab = json.load(f)
    by_id = {i: t for t, i in vocab.items()}
    n = len(vocab)
    for special, last in (("<|startoftext|>", n - 2), ("<|endoftext|>", n - 1)):
        i = vocab[special]
        other = by_id[last]
        vocab[special], vocab[other] = last, i
        by_id[last], by_id[i] = special, other
    return vocab


def vocab_size():
    with open(os.path.join(TOK, "vocab.json")) as f:
        return max(json.load(f).values()) + 1


def make(name, tc, vc, top, batch, context, seed):
    torch.manual_seed(seed)
    tc = dict(tc, vocab_size=vocab_size())
    cfg = XCLIPConfig(text_config=tc, vision_config=vc, **top)
    model = XCLIPModel(cfg).eval()
    with torch.no_grad():  # random weights of a visible size (transformers' init is tiny)
        for n, p in model.named_parameters():
            if n == "logit_scale":
                p.fill_(2.6592)
            elif n.endswith("alpha"):
                p.normal_(0.3, 0.1)
            elif p.ndim == 1 and ("norm" in n or "ln" in n) and n.endswith("weight"):
                p.normal_(1.0, 0.1)
            else:
                p.normal_(0.0, 0.2 if p.ndim > 1 else 0.05)
        # stored as float16 (half the bytes; the loader widens them exactly), so the reference
        # runs on the float16-rounded weights
        for p in model.parameters():
            p.copy_(p.half().float())
    d = os.path.join(OUT, name)
    if os.path.isdir(d):
        shutil.rmtree(d)
    model.half().save_pretrained(d)
    model.float()
    shutil.copy(os.path.join(TOK, "merges.txt"), os.path.join(d, "merges.txt"))
    with open(os.path.join(d, "vocab.json"), "w") as f:
        json.dump(clip_ordered_vocab(), f, ensure_ascii=False)
    with open(os.path.join(TOK, "tokenizer_config.json")) as f:
        tcfg = json.load(f)
    tcfg["model_max_length"] = context
    with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
        json.dump(tcfg, f, indent=2)
        f.write("\n")
    # the hub's X-CLIP preprocessor_config.json (VideoMAE's processor, CLIP's mean and std), at
    # this model's image size
    S = vc["image_size"]
    with open(os.path.join(d, "preprocessor_config.json"), "w") as f:
        json.dump({"crop_size": S, "do_center_crop": True, "do_normalize": True,
                   "do_resize": True, "feature_extractor_type": "VideoMAEFeatureExtractor",
                   "image_mean": [0.48145466, 0.4578275, 0.40821073],
                   "image_std": [0.26862954, 0.26130258, 0.27577711], "resample": 2,
                   "size": S}, f, indent=2)
        f.write("\n")
    tok = CLIPTokenizer.from_pretrained(d)
    enc = tok(TEXTS, padding="max_length", truncation=True, max_length=context,
              return_tensors="pt")
    ids = enc["input_ids"]
    T = vc["num_frames"]
    x = torch.randn(batch, T, 3, vc["image_size"], vc["image_size"])
    with torch.no_grad():
        out = model(input_ids=ids, pixel_values=x, attention_mask=enc["attention_mask"])
    np.save(os.path.join(d, "x.npy"), x.numpy().astype(np.float32))
    np.save(os.path.join(d, "ids.npy"), ids.numpy().astype(np.int32))
    np.save(os.path.join(d, "logits_per_video.npy"), out.logits_per_video.numpy())
    np.save(os.path.join(d, "text_embeds.npy"), out.text_embeds.numpy())
    np.save(os.path.join(d, "video_embeds.npy"), out.video_embeds.numpy())
    # the vision tower's pooled output per frame (batch x frames, hidden): what tubelet_forward
    # returns as an X-CLIP model's "logits" (it has no classifier)
    np.save(os.path.join(d, "vision_pooled.npy"),
            out.vision_model_output.pooler_output.numpy())
    with torch.no_grad():  # get_video_features: the video embeddings before normalising
        vf = model.get_video_features(pixel_values=x)
    np.save(os.path.join(d, "video_features.npy"),
            (vf.pooler_output if hasattr(vf, "pooler_output") else vf).numpy())
    with open(os.path.join(d, "texts.json"), "w") as f:
        json.dump(TEXTS, f, indent=1, ensure_ascii=False)
        f.write("\n")
    size = sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d))
    print(f"{name}: logits {tuple(out.logits_per_video.shape)} "
          f"max |logit| {out.logits_per_video.abs().max():.3f}, {size / 1e3:.0f} KB")


def main():
    os.makedirs(OUT, exist_ok=True)
    for seed, (name, case) in enumerate(CASES.items()):
        make(name, *case, seed=seed)


if __name__ == "__main__":
    main()
