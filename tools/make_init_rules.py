#!/usr/bin/env python3
"""How each reference initialises every parameter of a fresh model, as rules that
tests/test_init.c checks tubelet's random initialisation against (issue 27).

Usage:
    /work/venv/bin/python tools/make_init_rules.py [--out tests/fixtures/init_rules.json] [--check]

For every model of MODELS (the small configs of the committed fixtures, plus two with
initializer_range 1, where a truncation at +-2 shows) this builds the reference:

    ViViT Model 1, TimeSformer divided / joint / space_only, VideoMAE classifier and
    VideoMAEForPreTraining, V-JEPA 2 (without its predictor)
                              transformers' own class, initialised by its post_init
                              (the family's _init_weights)
    ViViT Models 2-4, TimeSformer axial / local_global (not in transformers)
                              the modules of tools/vivit_variants_ref.py /
                              tools/timesformer_variants_ref.py, initialised as post_init would:
                              the family's _init_weights applied to every module
    STMixer's layer scale     transformers' VideoMAEForVideoClassification, plus lambda_1 and
                              lambda_2 from STMixer's own Block (tools/stmixer_backbone_ref.py)
    Video Swin                torchvision's SwinTransformer3d (the model of swin3d_t/s/b)

The rule of a parameter is read from the code path, not guessed from its values: every
torch.nn.init function (and transformers' guarded copies, which call the same table) is wrapped
to record the last initialisation each tensor received; a tensor no function touched keeps what
its constructor gave it (torch.zeros, init_values * torch.ones). The rules:

    {"rule": "zeros"} / {"rule": "ones"} / {"rule": "constant", "value": v}
    {"rule": "normal", "std": s}                      normal_(0, s)
    {"rule": "trunc_normal", "std": s, "bound": b}    trunc_normal_(0, s, a=-b, b=b): b is
                                                      absolute, as in torch (2: +-100 s at 0.02)
    {"rule": "uniform", "bound": b}                   uniform_(-b, b); kaiming_uniform_ (the
                                                      default of nn.Linear / nn.Conv3d) and
                                                      xavier_uniform_ give their bound

Each rule is then checked against the reference's own freshly drawn values with the same
statistics as the C test (exact zeros / ones / constant; mean, standard deviation, the share
within one standard deviation and the bound within sampling tolerance), so a rule that does not
describe the reference fails the script. Names are tubelet's: the Hugging Face / torchvision
state-dict names, with transformers 5's module names mapped back to the legacy ones a fresh
tubelet model uses (ViViT Model 1's vivit.layers.N.attention.q_proj ->
vivit.encoder.layer.N.attention.attention.query, VideoMAE's query.bias -> q_bias).

--check recomputes and compares with the file instead of writing it.
"""

import argparse
import json
import math
import os
import sys
from collections import OrderedDict

import torch
import torchvision
import transformers
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import stmixer_backbone_ref  # noqa: E402
import timesformer_variants_ref  # noqa: E402
import vivit_variants_ref  # noqa: E402
from torchvision.models.video.swin_transformer import SwinTransformer3d  # noqa: E402
from transformers import (TimesformerConfig, TimesformerForVideoClassification,  # noqa: E402
                          VideoMAEConfig, VideoMAEForPreTraining, VideoMAEForVideoClassification,
                          VivitConfig, VivitForVideoClassification)
from transformers import initialization as hf_init  # noqa: E402
from transformers.utils import logging as hf_logging  # noqa: E402

hf_logging.set_verbosity_error()
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = os.path.join(REPO, "tests", "fixtures")
SEED = 2701

# (name, fixture whose config.json it uses, changes to that config)
MODELS = [
    ("vivit_m1", "vivit_m1", {}),
    ("vivit_m1_range1", "vivit_m1", {"initializer_range": 1.0}),
    ("vivit_m2_tubelet", "vivit_m2_tubelet", {}),
    ("vivit_m3_tubelet", "vivit_m3_tubelet", {}),
    ("vivit_m4_tubelet", "vivit_m4_tubelet", {}),
    ("timesformer_divided", "timesformer_divided", {}),
    ("timesformer_divided_range1", "timesformer_divided", {"initializer_range": 1.0}),
    ("timesformer_joint", "timesformer_joint", {}),
    ("timesformer_space_only", "timesformer_space_only", {}),
    ("timesformer_axial_odd", "timesformer_axial_odd", {}),
    ("timesformer_local_global_odd", "timesformer_local_global_odd", {}),
    ("videomae_mean", "videomae_mean", {}),
    ("videomae_cls_noqkvbias", "videomae_cls_noqkvbias", {}),
    ("pretrain_normpix", "pretrain_normpix", {}),
    ("stmixer_backbone", "stmixer_backbone", {}),
    ("video_swin_shift", "video_swin_shift", {}),
    ("vjepa2_hd20", "vjepa2_hd20", {}),
    ("vjepa2_one_frame_range1", "vjepa2_one_frame", {"initializer_range": 1.0}),
]

# ---------------------------------------------------------------------------------------------
# recording what initialised each tensor
# ---------------------------------------------------------------------------------------------

RECORD = {}  # id(tensor) -> (tensor, function, rule); the tensor kept so that ids are not reused


def _fan_in_out(t):
    return nn.init._calculate_fan_in_and_fan_out(t)


def _recording(fname, orig):
    def wrapped(tensor, *args, **kwargs):
        out = orig(tensor, *args, **kwargs)
        # recorded after the call: an init that calls another records itself last
        RECORD[id(tensor)] = (tensor, fname, rule_of_call(fname, tensor, args, kwargs))
        return out
    return wrapped


def rule_of_call(fname, t, args, kw):
    """The distribution an init function draws, from its arguments (torch's defaults)."""
    def arg(i, name, default):
        return args[i] if len(args) > i else kw.get(name, default)
    if fname == "zeros_":
        return {"rule": "zeros"}
    if fname == "ones_":
        return {"rule": "ones"}
    if fname == "constant_":
        v = float(arg(0, "val", None))
        return {"rule": "zeros"} if v == 0 else {"rule": "ones"} if v == 1 else {"rule": "constant", "value": v}
    if fname == "normal_":
        assert float(arg(0, "mean", 0.0)) == 0
        return {"rule": "normal", "std": float(arg(1, "std", 1.0))}
    if fname == "trunc_normal_":
        mean, std = float(arg(0, "mean", 0.0)), float(arg(1, "std", 1.0))
        a, b = float(arg(2, "a", -2.0)), float(arg(3, "b", 2.0))
        assert mean == 0 and a == -b, (mean, a, b)
        return {"rule": "trunc_normal", "std": std, "bound": b}
    if fname == "uniform_":
        a, b = float(arg(0, "a", 0.0)), float(arg(1, "b", 1.0))
        assert a == -b, (a, b)
        return {"rule": "uniform", "bound": b}
    if fname == "kaiming_uniform_":
        a, mode = arg(0, "a", 0), arg(1, "mode", "fan_in")
        nonlinearity = arg(2, "nonlinearity", "leaky_relu")
        fan_in, fan_out = _fan_in_out(t)
        gain = nn.init.calculate_gain(nonlinearity, a)
        return {"rule": "uniform", "bound": math.sqrt(3.0) * gain / math.sqrt(fan_in if mode == "fan_in" else fan_out)}
    if fname == "xavier_uniform_":
        fan_in, fan_out = _fan_in_out(t)
        return {"rule": "uniform", "bound": float(arg(0, "gain", 1.0)) * math.sqrt(6.0 / (fan_in + fan_out))}
    raise SystemExit(f"no rule for torch.nn.init.{fname}: teach rule_of_call")


def install_recorders():
    for fname, orig in list(hf_init.TORCH_INIT_FUNCTIONS.items()):
        rec = _recording(fname, orig)
        hf_init.TORCH_INIT_FUNCTIONS[fname] = rec  # what transformers' guarded functions call
        setattr(nn.init, fname, rec)               # what torch's modules and torchvision call


def rule_of_tensor(name, p):
    """The last recorded initialisation of p, or what its constructor left (no init touched it)."""
    got = RECORD.get(id(p))
    if got is not None and got[0] is p:
        return dict(got[2])
    v = p.detach().double().flatten()
    if bool((v == 0).all()):
        return {"rule": "zeros"}
    if bool((v == 1).all()):
        return {"rule": "ones"}
    if bool((v == v[0]).all()):
        return {"rule": "constant", "value": float(v[0])}
    raise SystemExit(f"{name}: no init function recorded and not constant: cannot tell its rule")


# ---------------------------------------------------------------------------------------------
# the statistics (tests/test_init.c checks the same)
# ---------------------------------------------------------------------------------------------

def phi(x):
    return math.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)


def Phi(x):
    return 0.5 * (1 + math.erf(x / math.sqrt(2)))


def expected(rule):
    """(standard deviation, share of |x| <= that standard deviation, bound or None)."""
    r = rule["rule"]
    if r == "normal":
        return rule["std"], 2 * Phi(1) - 1, None
    if r == "trunc_normal":
        s, beta = rule["std"], rule["bound"] / rule["std"]
        z = 2 * Phi(beta) - 1
        sd = s * math.sqrt(1 - 2 * beta * phi(beta) / z)
        return sd, (2 * Phi(sd / s) - 1) / z, rule["bound"]
    if r == "uniform":
        return rule["bound"] / math.sqrt(3), 1 / math.sqrt(3), rule["bound"]
    raise ValueError(r)


def check_sample(name, rule, v):
    """Raises when the values v (a 1-D float64 tensor) are not a plausible draw of rule."""
    r, n = rule["rule"], v.numel()
    if r in ("zeros", "ones", "constant"):
        c = {"zeros": 0.0, "ones": 1.0}.get(r, rule.get("value"))
        assert bool((v == torch.tensor(c, dtype=v.dtype).float().double()).all()), f"{name}: not all {c}"
        return
    sd, share, bound = expected(rule)
    mean, s = float(v.mean()), float(v.std(unbiased=False))
    inside = float((v.abs() <= sd).double().mean())
    assert abs(mean) < 5 * sd / math.sqrt(n), f"{name}: mean {mean:.3g} ({rule})"
    assert abs(s / sd - 1) < 5 / math.sqrt(2 * n), f"{name}: std {s:.4g}, expected {sd:.4g} ({rule})"
    assert abs(inside - share) < 5 * math.sqrt(share * (1 - share) / n), \
        f"{name}: {inside:.3f} within one std, expected {share:.3f} ({rule})"
    if bound is not None:
        assert float(v.abs().max()) <= bound * (1 + 1e-6), f"{name}: beyond the bound {bound} ({rule})"


# ---------------------------------------------------------------------------------------------
# the references
# ---------------------------------------------------------------------------------------------

def apply_init_weights(hf_model, ref):
    """What post_init does, for a reference made of the family's modules: the family's
    _init_weights on every module."""
    for module in ref.modules():
        hf_model._init_weights(module)


def vivit(cfg):
    if cfg.get("model_variant", "joint") == "joint":  # Model 1: transformers' own
        return VivitForVideoClassification(VivitConfig(**cfg)), "transformers.VivitForVideoClassification"
    ref = vivit_variants_ref.Vivit(cfg)
    with torch.device("meta"):  # only for its _init_weights (and config)
        hf = VivitForVideoClassification(VivitConfig(**{k: v for k, v in cfg.items() if k != "model_variant"}))
    apply_init_weights(hf, ref)
    return ref, "tools/vivit_variants_ref.py + VivitPreTrainedModel._init_weights"


def timesformer(cfg):
    at = cfg["attention_type"]
    if at in ("divided_space_time", "joint_space_time", "space_only"):
        return (TimesformerForVideoClassification(TimesformerConfig(**cfg)),
                "transformers.TimesformerForVideoClassification")
    hc = TimesformerConfig(**dict(cfg, attention_type="divided_space_time"))
    ref = timesformer_variants_ref.VariantForVideoClassification(hc, at)
    with torch.device("meta"):
        hf = TimesformerForVideoClassification(hc)
    apply_init_weights(hf, ref)
    return ref, "tools/timesformer_variants_ref.py + TimesformerPreTrainedModel._init_weights"


def videomae(cfg):
    if cfg.get("architectures") == ["VideoMAEForPreTraining"]:
        return VideoMAEForPreTraining(VideoMAEConfig(**cfg)), "transformers.VideoMAEForPreTraining"
    return VideoMAEForVideoClassification(VideoMAEConfig(**cfg)), "transformers.VideoMAEForVideoClassification"


def vjepa2(cfg):
    return (transformers.VJEPA2ForVideoClassification(transformers.VJEPA2Config(**cfg)),
            "transformers.VJEPA2ForVideoClassification (its predictor left out: tubelet loads it, never runs it)")


def swin(cfg):
    m = SwinTransformer3d(patch_size=cfg["patch_size"], embed_dim=cfg["embed_dim"], depths=cfg["depths"],
                          num_heads=cfg["num_heads"], window_size=cfg["window_size"],
                          mlp_ratio=cfg["mlp_ratio"], stochastic_depth_prob=cfg["stochastic_depth_prob"],
                          num_classes=len(cfg["id2label"]))
    return m, "torchvision.models.video.swin_transformer.SwinTransformer3d"


VIVIT_NEW = [(".attention.q_proj.", ".attention.attention.query."), (".attention.k_proj.", ".attention.attention.key."),
             (".attention.v_proj.", ".attention.attention.value."), (".attention.o_proj.", ".attention.output.dense."),
             (".mlp.fc1.", ".intermediate.dense."), (".mlp.fc2.", ".output.dense.")]


def tubelet_name(family, name):
    """transformers 5's module names -> the names a fresh tubelet model has."""
    if family == "vivit" and name.startswith("vivit.layers."):
        name = name.replace("vivit.layers.", "vivit.encoder.layer.", 1)
        for new, old in VIVIT_NEW:
            name = name.replace(new, old)
    if family == "videomae":
        name = name.replace("attention.attention.query.bias", "attention.attention.q_bias")
        name = name.replace("attention.attention.value.bias", "attention.attention.v_bias")
    return name


def layer_scale_rules(cfg):
    """lambda_1, lambda_2 of every encoder layer: STMixer's Block.gamma_1 / gamma_2."""
    D = cfg["hidden_size"]
    blk = stmixer_backbone_ref.Block(D, cfg["num_attention_heads"], init_values=cfg["layer_scale_init_value"])
    out = []
    for l in range(cfg["num_hidden_layers"]):
        for i, p in ((1, blk.gamma_1), (2, blk.gamma_2)):
            name = f"videomae.encoder.layer.{l}.lambda_{i}"
            out.append((name, list(p.shape), rule_of_tensor(name, p), p.detach().double().flatten()))
    return out


def model_rules(name, fixture, changes):
    with open(os.path.join(FIXTURES, fixture, "config.json")) as f:
        cfg = json.load(f, object_pairs_hook=OrderedDict)
    cfg.update(changes)
    family = cfg["model_type"]
    torch.manual_seed(SEED)
    RECORD.clear()
    build = {"vivit": vivit, "timesformer": timesformer, "videomae": videomae, "video_swin": swin,
             "vjepa2": vjepa2}[family]
    ref, reference = build(cfg)
    params = []
    for n, p in ref.named_parameters():
        if family == "vjepa2" and n.startswith("vjepa2.predictor."):
            continue
        params.append((tubelet_name(family, n), list(p.shape), rule_of_tensor(n, p), p.detach().double().flatten()))
    if family == "videomae" and cfg.get("layer_scale_init_value", 0) > 0:
        params += layer_scale_rules(cfg)
        reference += " + tools/stmixer_backbone_ref.py Block (gamma_1, gamma_2 -> lambda_1, lambda_2)"
    for n, _, rule, values in params:
        check_sample(f"{name}: {n}", rule, values)  # the rule describes the reference's draw
    return OrderedDict(name=name, fixture=fixture, reference=reference, config=cfg,
                       params=[OrderedDict(name=n, shape=s, **r) for n, s, r, _ in params])


def dump(doc):
    """JSON with one parameter a line."""
    head = {k: v for k, v in doc.items() if k != "models"}
    lines = ["{"] + [f"  {json.dumps(k)}: {json.dumps(v)}," for k, v in head.items()] + ['  "models": [']
    for i, m in enumerate(doc["models"]):
        lines.append("    {")
        for k in ("name", "fixture", "reference", "config"):
            lines.append(f"      {json.dumps(k)}: {json.dumps(m[k])},")
        lines.append('      "params": [')
        lines += [f"        {json.dumps(p)}{',' if j + 1 < len(m['params']) else ''}"
                  for j, p in enumerate(m["params"])]
        lines.append("      ]")
        lines.append("    }" + ("," if i + 1 < len(doc["models"]) else ""))
    lines += ["  ]", "}"]
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(FIXTURES, "init_rules.json"))
    ap.add_argument("--check", action="store_true", help="compare with the file instead of writing it")
    args = ap.parse_args()
    install_recorders()
    doc = OrderedDict(
        generator="tools/make_init_rules.py",
        versions={"torch": torch.__version__.split("+")[0], "transformers": transformers.__version__,
                  "torchvision": torchvision.__version__.split("+")[0]},
        models=[model_rules(*spec) for spec in MODELS])
    text = dump(doc)
    json.loads(text)
    for m in doc["models"]:
        kinds = sorted({p["rule"] for p in m["params"]})
        print(f"{m['name']}: {len(m['params'])} parameters ({', '.join(kinds)}); {m['reference']}")
    if args.check:
        with open(args.out) as f:
            if f.read() != text:
                raise SystemExit(f"{args.out} differs from what the references give now")
        print(f"{args.out}: up to date")
        return
    with open(args.out, "w") as f:
        f.write(text)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
