#!/usr/bin/env bash
# V-JEPA 2 through the commands (issue 38): info of the published shapes (transformers' parameter
# counts), run, grad, bench (fp32, bf16, int8, training), classify, features (mean-pooled and the
# token map), timeline, a Meta .pt file with its probe, convert, and training; values are checked
# by test_models.c, test_grads.c and test_checkpoints.c. Shell tools only (no Python).
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
field() { grep -o "\"$1\": [-0-9.e+]*" "$tmp/stdout" | head -1 | sed 's/.*: //'; }

# the published shapes: transformers 5.23's parameter counts (VJEPA2Model, VJEPA2ForVideoClassification
# on the meta device), the predictor's among them (its files carry it; classification never runs it)
while read -r arch total predictor; do
    if run_ok "info $arch" $bin info --arch "$arch" --json --threads 1; then
        p=$(field params) n=$(field params_not_run)
        [ "$n" = "$predictor" ] && [ $((p + n)) = "$total" ] && ok ||
            bad "$arch: $p + $n parameters, transformers has $total ($predictor in the predictor)"
    fi
done <<'COUNTS'
vjepa2-vitl-256 325971328 22086016
vjepa2-vith-256 653930880 22282880
vjepa2-vitg-256 1034555264 22381312
vjepa2-vitl-ssv2 375485998 22086016
vjepa2-vitg-384-ssv2 1128049454 22381312
COUNTS

M=$fx/vjepa2_hd20 X=$fx/vjepa2_hd20/input.npy
# run: logits (2, 5) and last_hidden_state (2, 32, 40)
if run_ok "run" $bin run --model $M --input $X --logits "$tmp/l.npy" --hidden "$tmp/h.npy" --threads 2; then
    [ "$(stat -c %s "$tmp/l.npy")" -eq $((128 + 2 * 5 * 4)) ] && ok || bad "logits size"
    [ "$(stat -c %s "$tmp/h.npy")" -eq $((128 + 2 * 32 * 40 * 4)) ] && ok || bad "hidden size"
fi
for p in bf16 int8; do run_ok "run $p" $bin run --model $M --input $X --logits "$tmp/l$p.npy" --precision $p; done
run_ok "grad" $bin grad --model $M --input $X --labels $M/labels.npy -o "$tmp/g.safetensors" &&
    { grep -q "pooler.query_tokens" "$tmp/g.safetensors" && ok || bad "grad lacks the pooler's query"; }
run_ok "bench train" $bin bench --model $M --frames 4 --size 32 --batch 2 --threads 2 --repeats 1 \
    --warmup 0 --train --json

# video commands: a model directory with VJEPA2VideoProcessor at its crop of 32 (short side 36)
mkdir -p "$tmp/m"
cp $M/config.json $M/model.safetensors "$tmp/m/"
echo '{"video_processor_type": "VJEPA2VideoProcessor", "crop_size": 32}' >"$tmp/m/video_preprocessor_config.json"
V=$fx/video/h264.mp4
run_ok "classify" $bin classify --model "$tmp/m" $V --json &&
    { grep -q '"label"' "$tmp/stdout" && ok || bad "classify json: $(cat "$tmp/stdout")"; }
run_ok "timeline" $bin timeline --model "$tmp/m" $V --json
run_ok "features mean" $bin features --model "$tmp/m" $V -o "$tmp/fm.npy" --pool mean &&
    { [ "$(stat -c %s "$tmp/fm.npy")" -eq $((128 + 40 * 4)) ] && ok || bad "features mean size"; }
run_ok "features none" $bin features --model "$tmp/m" $V -o "$tmp/fn.npy" --pool none &&
    { [ "$(stat -c %s "$tmp/fn.npy")" -eq $((128 + 40 * 2 * 4 * 4 * 4)) ] && ok || bad "features none size"; }

# Meta's files: the encoder .pt with its probe as a model, and converted to a directory
P=$fx/vjepa2_meta
if TUBELET_VJEPA2_PROBE=$P/ssv2-hd20-4x2x3.pt run_ok "convert Meta .pt" $bin convert $P/vjepa2-hd20-32.pt \
        --config $M/config.json -o "$tmp/conv"; then
    run_ok "run the converted" $bin run --model "$tmp/conv" --input $X --logits "$tmp/lc.npy" &&
        { cmp -s "$tmp/l.npy" "$tmp/lc.npy" && ok || bad "converted logits differ from the fixture's"; }
fi

# training: from the fixture's weights, its 5-class head re-made for the data's 3 classes
if $bin synth -o "$tmp/data" --per-class 3 --frames 4 --size 32 --seed 3 >/dev/null 2>"$tmp/err"; then
    train() { $bin train --train "$tmp/data/train.csv" --val "$tmp/data/val.csv" --batch 2 --threads 2 "$@"; }
    train --model "$tmp/m" -o "$tmp/ft" --epochs 1 >/dev/null 2>"$tmp/err" && grep -q "re-initialised" "$tmp/err" &&
        [ -s "$tmp/ft/checkpoint/model.safetensors" ] && grep -q vjepa2 "$tmp/ft/checkpoint/config.json" &&
        ok || bad "fine-tune: $(tail -3 "$tmp/err")"
    # the attentive probe over the frozen encoder: the encoder's last hidden state is unchanged
    if train --model "$tmp/m" -o "$tmp/fz" --epochs 1 --freeze-encoder >/dev/null 2>"$tmp/err"; then
        run_ok "run the probe-trained" $bin run --model "$tmp/fz/checkpoint" --input $X --hidden "$tmp/hz.npy" \
            --logits "$tmp/lz.npy" && { cmp -s "$tmp/h.npy" "$tmp/hz.npy" && ok || bad "--freeze-encoder changed the encoder"; }
    else
        bad "train --freeze-encoder: $(tail -3 "$tmp/err")"
    fi
    # the frozen run resumes exactly: its optimiser state holds the probe's moments only
    train --model "$tmp/m" -o "$tmp/fa" --epochs 2 --freeze-encoder >/dev/null 2>&1 &&
        train --model "$tmp/m" -o "$tmp/fb" --epochs 2 --stop-after 1 --freeze-encoder >/dev/null 2>&1 &&
        train --model "$tmp/m" -o "$tmp/fb" --epochs 2 --resume --freeze-encoder >/dev/null 2>"$tmp/err" &&
        cmp -s "$tmp/fa/metrics.csv" "$tmp/fb/metrics.csv" && ok || bad "frozen resume: $(tail -3 "$tmp/err")"
    # without augmentation each clip's encoder output is computed once and reused
    echo '{"freeze_encoder": true, "augment": false}' >"$tmp/noaug.json"
    train --model "$tmp/m" -o "$tmp/fc" --epochs 2 --config "$tmp/noaug.json" >/dev/null 2>"$tmp/err" &&
        grep -q "encoder output is computed in its first epoch and reused" "$tmp/err" &&
        [ -s "$tmp/fc/checkpoint/model.safetensors" ] && ok || bad "frozen, no augmentation: $(tail -3 "$tmp/err")"
else
    bad "synth: $(cat "$tmp/err")"
fi

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
