#!/usr/bin/env bash
# OpenMP wait policy (issue 27): wall time of three jobs under each policy, on a quiet machine and
# with a CPU-bound process per core beside them, in interleaved rounds. Prints a markdown table
# (median of ROUNDS) to stdout; raw times to OUT/times.csv.
#   jobs: classify of the 8 shipped clips (short parallel regions), one epoch of training a small
#         ViViT on `tubelet synth` clips, one VideoMAE-B forward (tubelet bench, long regions)
#   policies: libgomp's default (spin 300,000 turns), OMP_WAIT_POLICY=passive, GOMP_SPINCOUNT=N
# usage: bench/wait_policy.sh [OUT]   (env: TUBELET=build/tubelet ROUNDS=3 SPINS="1000 10000 100000")
set -eu
out=${1:-bench/out/wait_policy}
bin=${TUBELET:-build/tubelet}
rounds=${ROUNDS:-3}
spins=${SPINS:-1000 10000 100000}
mkdir -p "$out"
# the machine's FP32 FMA peak in the same run (bench/README.md builds build/fma_peak)
if [ -x build/fma_peak ]; then
    echo "FP32 FMA peak, 2 threads: $(build/fma_peak --json --kernels fp32 --threads 2 --reps 11 |
        python3 -c 'import json, sys; print(json.load(sys.stdin)["kernels"]["fp32_fma"]["gflops"]["2"]["median"])') GFLOP/s; $(grep -m1 'model name' /proc/cpuinfo)" >&2
fi
data="$out/synth"
[ -f "$data/train.csv" ] || "$bin" synth -o "$data" --per-class 16 --frames 8 --size 64 --seed 0 \
    --distractors 0 --noise 0 >/dev/null 2>&1
mkdir -p "$out/init"
cat >"$out/init/config.json" <<'J'
{"model_type": "vivit", "image_size": 64, "num_frames": 8, "num_channels": 3, "hidden_size": 96,
 "num_hidden_layers": 4, "num_attention_heads": 4, "intermediate_size": 384, "layer_norm_eps": 1e-6,
 "tubelet_size": [2, 16, 16], "hidden_act": "gelu_fast", "num_labels": 12}
J
job() {
    case $1 in
    classify) "$bin" classify --model models/motion-vivit models/motion-vivit/examples/*.mp4 ;;
    train) rm -rf "$out/run"; "$bin" train --model "$out/init" --train "$data/train.csv" \
               --val "$data/val.csv" -o "$out/run" --epochs 1 --batch 8 --seed 0 ;;
    vitb) "$bin" bench --arch videomae-base --repeats 1 --warmup 0 ;;
    esac
}
policy_env() {
    case $1 in
    default) echo GOMP_SPINCOUNT=300000 ;;
    passive) echo OMP_WAIT_POLICY=passive ;;
    spin*) echo GOMP_SPINCOUNT=${1#spin} ;;
    esac
}
policies="default passive $(printf 'spin%s ' $spins)"
load_pids=()
load_on() { for _ in $(seq "$(nproc)"); do sh -c 'while :; do :; done' & load_pids+=($!); done; }
load_off() { kill "${load_pids[@]}" 2>/dev/null || true; wait "${load_pids[@]}" 2>/dev/null || true; load_pids=(); }
trap load_off EXIT
echo "round,load,job,policy,seconds" >"$out/times.csv"
for r in $(seq "$rounds"); do
    for load in quiet loaded; do
        [ "$load" = loaded ] && load_on
        for j in classify train vitb; do
            for p in $policies; do
                t0=$(date +%s.%N)
                env $(policy_env "$p") bash -c "$(declare -f job); out=$out bin=$bin data=$data job $j" \
                    >/dev/null 2>&1 || { echo "error: $j under $p failed" >&2; exit 1; }
                t1=$(date +%s.%N)
                echo "$r,$load,$j,$p,$(echo "$t1 - $t0" | bc)" >>"$out/times.csv"
            done
        done
        load_off
    done
done
python3 - "$out/times.csv" "$policies" <<'PY'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1])))
pol = sys.argv[2].split()
print("| load | job | " + " | ".join(pol) + " |")
print("|---|---|" + "---|" * len(pol))
for load in ("quiet", "loaded"):
    for job in ("classify", "train", "vitb"):
        med = {p: statistics.median(float(r["seconds"]) for r in rows
                                    if r["load"] == load and r["job"] == job and r["policy"] == p)
               for p in pol}
        print(f"| {load} | {job} | " + " | ".join(f"{med[p]:.2f} s" for p in pol) + " |")
PY
