#!/usr/bin/env python3
"""Writes tests/fixtures/xclip/pth/: the p32_f3 fixture's XCLIPModel saved as the original
repository saves it (microsoft/VideoX X-CLIP/models/xclip.py: OpenAI CLIP's names, fused
attention in_proj, `x @ proj` projections, under "model"), with its config.json beside it, for
tests/test_xclip.c's `convert`/load of a .pth (docs/zero-shot.md).

The original names are transformers' convert_x_clip_original_pytorch_to_hf.py's map run
backwards; the script checks that the forward map (rename, in_proj split in thirds, the two
projections transposed) gives back every tensor of the model exactly.

    /work/venv/bin/python tools/make_xclip_pth.py
"""
import os
import re
import shutil

import torch
from transformers import XCLIPModel

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.join(HERE, "..", "tests", "fixtures", "xclip", "p32_f3")
OUT = os.path.join(HERE, "..", "tests", "fixtures", "xclip", "pth")

# (original, transformers) name pieces, applied in order to the whole name
TOWERS = [("visual.transformer.resblocks.", "vision_model.encoder.layers."),
          ("mit.resblocks.", "mit.encoder.layers."),
          ("transformer.resblocks.", "text_model.encoder.layers.")]
BLOCK = [("ln_1.", "layer_norm1."), ("ln_2.", "layer_norm2."), ("mlp.c_fc.", "mlp.fc1."),
         ("mlp.c_proj.", "mlp.fc2."), ("attn.out_proj.", "self_attn.out_proj.")]
WHOLE = {"visual.conv1.weight": "vision_model.embeddings.patch_embedding.weight",
         "visual.class_embedding": "vision_model.embeddings.class_embedding",
         "visual.positional_embedding": "vision_model.embeddings.position_embedding.weight",
         "visual.proj": "visual_projection.weight",
         "token_embedding.weight": "text_model.embeddings.token_embedding.weight",
         "positional_embedding": "text_model.embeddings.position_embedding.weight",
         "text_projection": "text_projection.weight",
         "mit.positional_embedding": "mit.position_embedding",
         "prompts_visual_proj": "prompts_visual_projection"}
PREFIX = [("visual.ln_pre.", "vision_model.pre_layernorm."),
          ("visual.ln_post.", "vision_model.post_layernorm."),
          ("ln_final.", "text_model.final_layer_norm."),
          ("prompts_visual_ln.", "prompts_visual_layernorm."),
          ("prompts_generator.norm.", "prompts_generator.layernorm.")]
TRANSPOSED = {"visual.proj", "text_projection"}


def to_hf(orig):
    """The original state dict in transformers' names (the converter's rules)."""
    out = {}
    for k, v in orig.items():
        m = re.match(r"(.*\.\d+\.)((?:message_)?attn)\.in_proj_(weight|bias)$", k)
        if m:
            base, attn, kind = m.groups()
            for t, part in zip("qkv", v.chunk(3, dim=0)):
                out[to_hf_name(base + "x") [:-1] + ("message_attn" if attn == "message_attn"
                                                    else "self_attn") +
                    f".{t}_proj.{kind}"] = part
            continue
        out[to_hf_name(k)] = v.t() if k in TRANSPOSED else v
    return out


def rename(k, forward):
    """A name of the original checkpoint as transformers spells it (forward), or back: the same
    PREFIX, TOWERS and BLOCK pairs read one way (forward) or the other."""
    def way(pair):
        return pair if forward else pair[::-1]
    for a, b in map(way, PREFIX):
        if k.startswith(a):
            return b + k[len(a):]
    for a, b in map(way, TOWERS):
        m = re.match(re.escape(a) + r"(\d+)\.(.*)$", k)
        if m:
            n, rest = m.groups()
            for x, y in map(way, BLOCK):
                if rest.startswith(x):
                    rest = y + rest[len(x):]
                    break
            return f"{b}{n}.{rest}"
    return k


def to_hf_name(k):
    return WHOLE[k] if k in WHOLE else rename(k, True)


def orig_name(k):
    return rename(k, False)


def main():
    m = XCLIPModel.from_pretrained(SRC)
    hf = {k: v.detach().clone() for k, v in m.state_dict().items() if "position_ids" not in k}
    # backwards: every transformers name to the original's
    back = {}
    inv_whole = {v: k for k, v in WHOLE.items()}
    for k, v in hf.items():
        m_qkv = re.match(r"(.*\.\d+\.)(self_attn|message_attn)\.([qkv])_proj\.(weight|bias)$", k)
        if m_qkv:
            base, attn, t, kind = m_qkv.groups()
            name = orig_name(base + "x")[:-1] + ("message_attn" if attn == "message_attn"
                                                 else "attn") + f".in_proj_{kind}"
            back.setdefault(name, {})[t] = v
            continue
        name = inv_whole.get(k) or orig_name(k)
        back[name] = v.t().contiguous() if name in TRANSPOSED else v
    for name, parts in list(back.items()):
        if isinstance(parts, dict):
            back[name] = torch.cat([parts["q"], parts["k"], parts["v"]], dim=0)
    again = to_hf(back)
    assert again.keys() == hf.keys(), sorted(set(again) ^ set(hf))
    for k in hf:
        assert torch.equal(again[k], hf[k]), k
    os.makedirs(OUT, exist_ok=True)
    torch.save({"model": {k: v.half() for k, v in back.items()}},
               os.path.join(OUT, "xclip_p32_f3.pth"))
    shutil.copy(os.path.join(SRC, "config.json"), os.path.join(OUT, "config.json"))
    print(f"{len(back)} tensors in the original layout, {len(hf)} in transformers'")



if __name__ == "__main__":
    main()
