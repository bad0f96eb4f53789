#!/usr/bin/env bash
# Data-parallel training on --device cuda (docs/training.md, "Under mpirun with --device cuda"):
# 2 ranks train the same run as 1 rank, in the emulator (a build with MPI=1 CUDA=emu), every
# parameter within 1e-5 relative; and the all-reduce's staging is what the docs say: each rank
# copies its gradients to the host and the sum back once per optimiser step, so a rank's
# host-to-device copies are the 1-rank run's plus one per step (counted by the emulator), and no
# call runs on the default stream.
# Usage: tests/gpu_mpi.sh build-mpi-cudaemu/tubelet PYTHON   (PYTHON: an interpreter with numpy)
set -u
bin=${1:-build-mpi-cudaemu/tubelet}
py=${2:-python3}
bin=$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0 fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }

$bin synth -o "$tmp/data" --per-class 3 --frames 4 --size 16 --seed 3 >/dev/null 2>&1 || { echo "FAIL: synth"; exit 1; }
mkdir -p "$tmp/model"
cat >"$tmp/model/config.json" <<'JSON'
{"model_type": "videomae", "image_size": 16, "patch_size": 8, "num_frames": 4, "tubelet_size": 2,
 "hidden_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 32}
JSON
# 24 clips, batch 5: 5 steps an epoch, 2 epochs
steps=10
T=("$bin" train --model "$tmp/model" --train "$tmp/data/train.csv" --val "$tmp/data/val.csv"
   --batch 5 --threads 1 --device cuda --epochs 2)
TB_CUDAEMU_STATS=1 "${T[@]}" -o "$tmp/one" >/dev/null 2>"$tmp/err1" && ok || bad "1 rank: $(tail -2 "$tmp/err1")"
TB_CUDAEMU_STATS=1 timeout 600 mpirun --oversubscribe --allow-run-as-root --bind-to none -np 2 \
    "${T[@]}" -o "$tmp/two" >/dev/null 2>"$tmp/err2" && ok || bad "2 ranks: $(tail -3 "$tmp/err2")"
"$py" tools/compare_safetensors.py "$tmp/one/checkpoint/model.safetensors" \
    "$tmp/two/checkpoint/model.safetensors" 1e-5 >"$tmp/cmp" && ok || bad "2 ranks vs 1 on cuda: $(cat "$tmp/cmp")"

# "cudaemu: ... copies: N host-to-device (...), ... ; K calls on the default stream"
h2d() { sed -n 's/.*copies: \([0-9]*\) host-to-device.*/\1/p' "$1"; }
one=$(h2d "$tmp/err1")
two=$(h2d "$tmp/err2" | paste -sd' ')
[ -n "$one" ] && [ "$(echo "$two" | wc -w)" = 2 ] && ok || bad "no emulator counts (one: '$one', two: '$two')"
for n in $two; do
    [ "$n" = $((one + steps)) ] && ok ||
        bad "a rank made $n host-to-device copies; 1 rank made $one, and the all-reduce adds one per step ($steps)"
done
grep -h "default stream" "$tmp/err1" "$tmp/err2" | grep -qv " 0 calls on the default stream" &&
    bad "calls on the default stream: $(grep -h 'default stream' "$tmp/err1" "$tmp/err2")" || ok
echo "gradient staging per rank: $one host-to-device copies on 1 rank, $two on 2 ranks ($steps steps)"
echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
