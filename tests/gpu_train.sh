#!/usr/bin/env bash
# `tubelet train --device cuda` against the same run on the CPU: a tiny synthetic motion run
# (TimeSformer, dropout, drop path, label smoothing) trained twice by one binary, and the two
# curves (metrics.csv: train loss, val loss, val accuracy per epoch) equal up to rounding
# (1e-4 relative); and the cuda run stopped after an epoch and resumed gives its curve exactly. BIN: a build with the CUDA backend, on a GPU, or the emulator's
# (make CUDA=emu build-cudaemu/tubelet; a few minutes there). Usage: tests/gpu_train.sh BIN
set -u
bin=${1:-build-cudaemu/tubelet}
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0 fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }

if ! $bin synth -o "$tmp/data" --per-class 3 --frames 4 --size 16 --seed 5 >/dev/null 2>"$tmp/err"; then
    echo "FAIL: synth: $(tail -2 "$tmp/err")"; echo "0 passed, 1 failed"; exit 1
fi
mkdir -p "$tmp/model"
cat >"$tmp/model/config.json" <<'JSON'
{"model_type": "timesformer", "image_size": 16, "patch_size": 8, "num_frames": 4,
 "hidden_size": 16, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 32,
 "attention_type": "divided_space_time", "hidden_dropout_prob": 0.1,
 "attention_probs_dropout_prob": 0.1}
JSON
echo '{"drop_path_rate": 0.1, "label_smoothing": 0.1}' >"$tmp/train.json"
train() { $bin train --model "$tmp/model" --train "$tmp/data/train.csv" --val "$tmp/data/val.csv" \
    --batch 4 --threads 2 --epochs 2 --config "$tmp/train.json" "$@"; }
for dev in cpu cuda; do
    if train --device $dev -o "$tmp/$dev" >/dev/null 2>"$tmp/err.$dev"; then ok; else bad "train --device $dev: $(tail -2 "$tmp/err.$dev")"; fi
done
# on cuda the weights and the optimiser's moments live on the device: a run stopped after epoch 1
# and resumed from its checkpoint (weights read back, moments saved and restored through the
# host) repeats the uninterrupted run's curve exactly
if train --device cuda -o "$tmp/resumed" --stop-after 1 >/dev/null 2>"$tmp/err.r" &&
    train --device cuda -o "$tmp/resumed" --resume >/dev/null 2>>"$tmp/err.r"; then
    cmp -s "$tmp/cuda/metrics.csv" "$tmp/resumed/metrics.csv" && ok ||
        { bad "the resumed cuda run's curve differs:"; paste -d'|' "$tmp/cuda/metrics.csv" "$tmp/resumed/metrics.csv"; }
else bad "train --device cuda --stop-after 1, --resume: $(tail -2 "$tmp/err.r")"; fi
if [ -s "$tmp/cpu/metrics.csv" ] && [ -s "$tmp/cuda/metrics.csv" ]; then
    # the same rows, each number within 1e-4 relative of the CPU's
    if awk -F, 'NR == FNR { a[FNR] = $0; n = FNR; next }
        { split(a[FNR], c, ","); if (NF != length(c)) exit 1
          for (i = 1; i <= NF; i++) { d = $i - c[i]; m = c[i] < 0 ? -c[i] : c[i]
              if ((d < 0 ? -d : d) > 1e-4 * (m > 1 ? m : 1)) exit 1 } }
        END { exit FNR == n && n == 3 ? 0 : 1 }' "$tmp/cpu/metrics.csv" "$tmp/cuda/metrics.csv"
    then ok; else bad "the cuda curve differs from the cpu curve:"; paste -d'|' "$tmp/cpu/metrics.csv" "$tmp/cuda/metrics.csv"; fi
    cat "$tmp/cuda/metrics.csv"
fi
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
