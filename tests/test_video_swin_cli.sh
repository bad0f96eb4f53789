#!/usr/bin/env bash
# Video Swin through every command (issue 15): info/bench of --arch video-swin-t, run, grad,
# timeline, features (--pool mean|none, --levels 4: the four stage outputs), classify, bench
# in bf16 and int8 and with --train [--checkpointing], init --from-image of an image Swin, and
# train from scratch on synthetic videos; values are checked by test_video_swin.c.
# Shell tools only (no Python).
set -u
bin=${1:-build/tubelet}
cd "$(dirname "$0")/.."
fx=tests/fixtures
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0 fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }
run_ok() { # NAME CMD...: exit 0
    local name=$1; shift
    "$@" >"$tmp/stdout" 2>"$tmp/stderr" && { ok; return 0; }
    bad "$name: exit $?: $(tail -3 "$tmp/stderr")"
    return 1
}
# the JSON value of a top-level number field of $tmp/stdout
field() { grep -o "\"$1\": [-0-9.e+]*" "$tmp/stdout" | head -1 | sed 's/.*: //'; }
# "shape" of tensor $2 in safetensors file $1 (its JSON header)
st_shape() {
    local n
    n=$(od -An -t u8 -N 8 "$1" | tr -d ' ')
    tail -c +9 "$1" | head -c "$n" | grep -o "\"$2\":{[^}]*}" | grep -o '"shape":\[[0-9,]*\]'
}

# info and bench of the published sizes: parameters (torchvision's counts) and FLOPs
grep -qx video-swin-t <($bin info --list) && grep -qx video-swin-b <($bin info --list) && ok ||
    bad "info --list lacks video-swin-t/b"
if run_ok "info video-swin-t" $bin info --arch video-swin-t --json --threads 1; then
    [ "$(field params)" = 28158070 ] && ok || bad "video-swin-t parameters: $(cat "$tmp/stdout")"
    grep -q '"family": "video_swin"' "$tmp/stdout" && ok || bad "info family: $(cat "$tmp/stdout")"
fi
# the stages, each with its own depth, width, heads and MLP (issue 39 item 22: info mixed the
# last stage's width and heads with the blocks of all stages)
if run_ok "info video-swin-t stages (json)" $bin info --arch video-swin-t --json --threads 1; then
    grep -q '"window_size": \[8, 7, 7\], "stages": \[{"depth": 2, "heads": 3, "width": 96, "intermediate_size": 384, "tokens": \[16, 56, 56\], "window": \[8, 7, 7\]}, {"depth": 2, "heads": 6, "width": 192, .*{"depth": 6, "heads": 12, "width": 384, .*{"depth": 2, "heads": 24, "width": 768, "intermediate_size": 3072, "tokens": \[16, 7, 7\]' "$tmp/stdout" &&
        ok || bad "info --json stages: $(cat "$tmp/stdout")"
fi
if run_ok "info video-swin-t stages" $bin info --arch video-swin-t --threads 1; then
    grep -qx 'encoder:      4 stages, 12 blocks, window 8 x 7 x 7 (frames x rows x columns of tokens)' "$tmp/stdout" &&
        grep -qx '  stage 1:    2 blocks, width 96, 3 heads, MLP 384, tokens 16 x 56 x 56' "$tmp/stdout" &&
        grep -qx '  stage 3:    6 blocks, width 384, 12 heads, MLP 1536, tokens 16 x 14 x 14' "$tmp/stdout" &&
        grep -qx '  stage 4:    2 blocks, width 768, 24 heads, MLP 3072, tokens 16 x 7 x 7' "$tmp/stdout" &&
        ok || bad "info stages: $(cat "$tmp/stdout")"
fi
# a window larger than a stage's grid shrinks to it, and says so
if run_ok "info stages, shrunk windows" $bin info --model $fx/video_swin_pad --threads 1; then
    grep -qx '  stage 2:    1 block, width 8, 1 head, MLP 12, tokens 3 x 5 x 4' "$tmp/stdout" &&
        grep -qx '  stage 4:    1 block, width 32, 2 heads, MLP 48, tokens 3 x 2 x 1, window 3 x 2 x 1' "$tmp/stdout" &&
        ok || bad "info shrunk windows: $(cat "$tmp/stdout")"
fi
run_ok "info video-swin-s" $bin info --arch video-swin-s --json --threads 1 &&
    { [ "$(field params)" = 49816678 ] && ok || bad "video-swin-s parameters"; }

M=$fx/video_swin_shift X=$fx/video_swin_shift/input.npy
run_ok "bench" $bin bench --model $M --frames 8 --size 24 --batch 2 --threads 2 --repeats 2 --json &&
    { grep -q '"flop_per_clip"\|"gflop' "$tmp/stdout" && ok || bad "bench json: $(cat "$tmp/stdout")"; }
for p in bf16 int8; do
    run_ok "bench $p" $bin bench --model $M --frames 8 --size 24 --threads 2 --repeats 1 \
        --warmup 0 --precision $p --json
done
run_ok "bench train" $bin bench --model $M --frames 8 --size 24 --batch 2 --threads 2 --repeats 1 \
    --warmup 0 --train --json
run_ok "bench train checkpointing" $bin bench --model $M --frames 8 --size 24 --batch 2 --threads 2 \
    --repeats 1 --warmup 0 --train --checkpointing --json &&
    { grep -q '"activation_mb"' "$tmp/stdout" && ok || bad "bench --checkpointing json: $(cat "$tmp/stdout")"; }

# init from an image Swin (values: test_image_init.c), then the video model runs
SI=$fx/image_init_swin
if run_ok "init --from-image swin" $bin init --from-image $SI/swin --arch $SI/video --keep-head -o "$tmp/init"; then
    grep -q "inflate" "$tmp/stderr" && grep -q video_swin "$tmp/init/config.json" && ok ||
        bad "init: $(cat "$tmp/stderr")"
    run_ok "bench the initialised model" $bin bench --model "$tmp/init" --frames 8 --size 32 --threads 2 \
        --repeats 1 --warmup 0 --json
fi
$bin init --from-image $fx/image_init/vit --arch $SI/video -o "$tmp/init2" >/dev/null 2>"$tmp/stderr" &&
    bad "init Video Swin from a ViT: exit 0" ||
    { grep -q "not an image Swin" "$tmp/stderr" && [ ! -e "$tmp/init2/model.safetensors" ] && ok ||
      bad "init Video Swin from a ViT: $(cat "$tmp/stderr")"; }

# run: logits (2, 5) and last_hidden_state (2, 4, 32): the last stage's 4x1x1 tokens
if run_ok "run" $bin run --model $M --input $X --logits "$tmp/l.npy" --hidden "$tmp/h.npy" --threads 2; then
    [ "$(stat -c %s "$tmp/l.npy")" -eq $((128 + 2 * 5 * 4)) ] && ok || bad "logits size"
    [ "$(stat -c %s "$tmp/h.npy")" -eq $((128 + 2 * 4 * 32 * 4)) ] && ok || bad "hidden size"
fi
run_ok "run bf16" $bin run --model $M --input $X --logits "$tmp/lb.npy" --precision bf16

# grad: every parameter's gradient, under torchvision's names
if run_ok "grad" $bin grad --model $M --input $X --labels $M/labels.npy -o "$tmp/g.safetensors"; then
    for t in patch_embed.proj.weight features.0.1.attn.relative_position_bias_table \
             features.5.reduction.weight head.weight; do
        st_shape "$tmp/g.safetensors" "$t" >/dev/null && ok || bad "grad lacks $t"
    done
    # mixed precision: its own gradients, the loss within bf16's rounding of fp32's
    l32=$(sed -n 's/^loss //p' "$tmp/stdout")
    if run_ok "grad bf16" $bin grad --model $M --input $X --labels $M/labels.npy -o "$tmp/g16.safetensors" --precision bf16; then
        l16=$(sed -n 's/^loss //p' "$tmp/stdout")
        awk -v a="$l32" -v b="$l16" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a > 0 && d <= 0.01 * a) }' &&
            ! cmp -s "$tmp/g.safetensors" "$tmp/g16.safetensors" && ok || bad "grad bf16: loss $l16 vs $l32"
    fi
fi

# video commands: a model directory with a preprocessor of its 24x24 input
mkdir -p "$tmp/m"
cp $M/config.json $M/model.safetensors "$tmp/m/"
cat >"$tmp/m/preprocessor_config.json" <<'JSON'
{"do_resize": true, "size": {"shortest_edge": 24}, "resample": 2, "do_center_crop": true,
 "crop_size": {"height": 24, "width": 24}, "do_rescale": true, "rescale_factor": 0.00392156862745098,
 "do_normalize": true, "image_mean": [0.485, 0.456, 0.406], "image_std": [0.229, 0.224, 0.225]}
JSON
V=$fx/video/h264.mp4
run_ok "classify" $bin classify --model "$tmp/m" $V --json
run_ok "timeline" $bin timeline --model "$tmp/m" $V --json
if run_ok "features --levels 4" $bin features --model "$tmp/m" $V -o "$tmp/f.safetensors" --levels 4; then
    want=("[1,4,4,6,6]" "[1,8,4,3,3]" "[1,16,4,2,2]" "[1,32,4,1,1]")
    for i in 0 1 2 3; do
        [ "$(st_shape "$tmp/f.safetensors" features.$i)" = "\"shape\":${want[$i]}" ] && ok ||
            bad "features.$i shape $(st_shape "$tmp/f.safetensors" features.$i), want ${want[$i]}"
    done
fi
$bin features --model "$tmp/m" $V -o "$tmp/f.npy" --levels 4 >/dev/null 2>"$tmp/stderr" &&
    bad "--levels 4 into .npy: exit 0" || { grep -q "safetensors" "$tmp/stderr" && [ ! -e "$tmp/f.npy" ] && ok ||
    bad "--levels 4 into .npy: $(cat "$tmp/stderr")"; }
$bin features --model "$tmp/m" $V -o "$tmp/f5.safetensors" --levels 5 >/dev/null 2>"$tmp/stderr" &&
    bad "--levels 5: exit 0" || { grep -q "levels" "$tmp/stderr" && ok || bad "--levels 5: $(cat "$tmp/stderr")"; }
run_ok "features mean" $bin features --model "$tmp/m" $V -o "$tmp/fm.npy" --pool mean &&
    { [ "$(stat -c %s "$tmp/fm.npy")" -eq $((128 + 32 * 4)) ] && ok || bad "features mean size"; }
run_ok "features none" $bin features --model "$tmp/m" $V -o "$tmp/fn.npy" --pool none &&
    { [ "$(stat -c %s "$tmp/fn.npy")" -eq $((128 + 32 * 4 * 4)) ] && ok || bad "features none size"; }

# train from scratch (random initialisation from config.json) on synthetic videos (resume and
# the curves: test_train.sh, for every family alike)
if $bin synth -o "$tmp/data" --per-class 3 --frames 8 --size 24 --seed 3 >/dev/null 2>"$tmp/err"; then
    mkdir -p "$tmp/scratch"
    cp $M/config.json "$tmp/scratch/"
    train() { $bin train --model "$tmp/scratch" --train "$tmp/data/train.csv" --val "$tmp/data/val.csv" --batch 2 --threads 2 "$@"; }
    if train -o "$tmp/t" --epochs 1 >/dev/null 2>"$tmp/err"; then ok; else bad "train: $(tail -3 "$tmp/err")"; fi
    [ -s "$tmp/t/checkpoint/model.safetensors" ] && grep -q video_swin "$tmp/t/checkpoint/config.json" && ok ||
        bad "train wrote no Video Swin checkpoint"
    # fine-tuning: the fixture's weights, its 5-class head re-made for the data's classes
     train --model "$tmp/m" --train "$tmp/data/train.csv" --val "$tmp/data/val.csv" --batch 2 \
        --threads 2 -o "$tmp/ft" --epochs 1 >/dev/null 2>"$tmp/err" && grep -q "re-initialised" "$tmp/err" &&
        ok || bad "fine-tune: $(tail -3 "$tmp/err")"
else
    bad "synth: $(cat "$tmp/err")"
fi

# bad input: an input smaller than one patch, named
python_free_npy() { # a (1, 1, 3, 24, 24) float32 .npy of zeros
    local hdr="{'descr': '<f4', 'fortran_order': False, 'shape': (1, 1, 3, 24, 24), }"
    local pad=$((128 - 10 - ${#hdr} - 1))
    { printf '\x93NUMPY\x01\x00\x76\x00%s%*s\n' "$hdr" $pad ""; head -c $((1728 * 4)) /dev/zero; } >"$1"
}
python_free_npy "$tmp/small.npy"
$bin run --model $M --input "$tmp/small.npy" --logits "$tmp/o.npy" >/dev/null 2>"$tmp/stderr" &&
    bad "input smaller than a patch: exit 0" ||
    { grep -q "smaller than one" "$tmp/stderr" && grep -qF "$M" "$tmp/stderr" && [ ! -e "$tmp/o.npy" ] && ok ||
      bad "input smaller than a patch: $(cat "$tmp/stderr")"; }

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
