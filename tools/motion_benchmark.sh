#!/usr/bin/env bash
# The motion benchmark of issues 4 and 5: TimeSformer's five attention schemes and ViViT Models
# 1-4, same size and budget, several seeds, trained by tubelet on `tubelet synth` clips whose
# classes differ only in the direction of time. Writes OUTDIR/results.csv (one row per run) and
# OUTDIR/table.md; docs/motion-benchmark.md holds a committed copy and the discussion.
#
# usage: tools/motion_benchmark.sh [OUTDIR] (env: TUBELET, SEEDS="0 1 2", EPOCHS=40, BATCH=8, LR=1e-3, SIZE=64, PATCH=16, THREADS=1, JOBS=2, PRECISION=fp32 (or bf16: mixed precision),
#        CLASSES="move_right move_left move_down move_up", PER_CLASS=200, MODELS="...": any of vivit_m1..vivit_m4,
#        timesformer_{space_only,joint,divided,local_global,axial}, video_swin_t)
# Interrupted (Ctrl-C, a kill), the same command continues each unfinished run with --resume;
# results.csv holds finished runs only (tools/train_run.sh).
set -eu
out=${1:-bench/out/motion}
bin=${TUBELET:-build/tubelet}
seeds=${SEEDS:-0 1 2}
epochs=${EPOCHS:-40}
batch=${BATCH:-8}
lr=${LR:-1e-3}
size=${SIZE:-64}
patch=${PATCH:-16}
threads=${THREADS:-1}
precision=${PRECISION:-fp32}
jobs=${JOBS:-2}
per_class=${PER_CLASS:-200}
classes=${CLASSES:-move_right move_left move_down move_up}
models=${MODELS:-vivit_m1 timesformer_divided timesformer_joint timesformer_space_only}
mkdir -p "$out"
# 64x64, 8 frames, no distractors and no noise: a setting where these tiny transformers get past
# their initial plateau within the CPU budget (docs/motion-benchmark.md)
data="$out/synth"
[ -f "$data/train.csv" ] || "$bin" synth -o "$data" --per-class "$per_class" --frames 8 --size "$size" \
    --seed 0 --distractors 0 --noise 0 >/dev/null
pattern=",($(echo $classes | tr ' ' '|'))\$"
mkdir -p "$out/subset"
for s in train val; do
    { echo path,label; grep -E "$pattern" "$data/$s.csv" | sed 's|^|../synth/|'; } >"$out/subset/$s.csv"
done
printf '%s\n' $classes >"$out/subset/labels.txt"

config() {   # config NAME: one size for every model, only the attention differs
    local common='"image_size": '$size', "num_frames": 8, "num_channels": 3, "hidden_size": 96,
 "num_hidden_layers": 4, "num_attention_heads": 4, "intermediate_size": 384, "layer_norm_eps": 1e-6'
    case $1 in
    vivit_m1) echo "{\"model_type\": \"vivit\", \"tubelet_size\": [2, $patch, $patch], \"hidden_act\": \"gelu_fast\", $common}" ;;
    # Models 2-4 (issue 5): the same blocks; Model 2 adds a temporal encoder of 2 blocks after the
    # 4 spatial ones (the paper's ViViT-B FE has L_s = 12, L_t = 4)
    vivit_m2 | vivit_m3 | vivit_m4)
        local v lt=""
        case $1 in vivit_m2) v=factorised_encoder lt='"num_temporal_layers": 2, ' ;;
                   vivit_m3) v=factorised_self_attention ;; *) v=factorised_dot_product ;; esac
        echo "{\"model_type\": \"vivit\", \"model_variant\": \"$v\", $lt\"tubelet_size\": [2, $patch, $patch],
 \"hidden_act\": \"gelu_fast\", $common}" ;;
    timesformer_*)
        local a=${1#timesformer_}
        case $a in divided | joint) a=${a}_space_time ;; esac   # space_only, local_global, axial as they are
        echo "{\"model_type\": \"timesformer\", \"patch_size\": $patch, \"hidden_act\": \"gelu\",
 \"attention_type\": \"$a\", $common}" ;;
    # Video Swin (issue 15): its own shapes, small: patch 2x4x4 (a 4x16x16 grid, then 4x8x8 after
    # the merge), widths 48 and 96 (the others' width in the last stage), 2 + 2 blocks, heads of
    # 16, windows of 2x4x4 tokens shifted by 1x2x2; 0.31M parameters (the others 0.6M), 0.26
    # GFLOP per clip (the others about 0.08; docs/motion-benchmark.md)
    video_swin_t) echo "{\"model_type\": \"video_swin\", \"image_size\": $size, \"num_frames\": 8,
 \"num_channels\": 3, \"patch_size\": [2, 4, 4], \"embed_dim\": 48, \"depths\": [2, 2], \"num_heads\": [3, 6],
 \"window_size\": [2, 4, 4], \"mlp_ratio\": 4.0, \"layer_norm_eps\": 1e-5, \"stochastic_depth_prob\": 0.0}" ;;
    esac
}
echo '{"min_scale": 1.0, "warmup_epochs": 1}' >"$out/train.json"
[ -f "$out/results.csv" ] || echo "model,seed,epochs,final_val_acc,best_val_acc,final_train_loss,seconds" >"$out/results.csv"
run_one() {   # run_one SEED MODEL: one training run, its row of results.csv once it has finished
    local seed=$1 model=$2 run="$out/runs/${2}_seed$1"
    mkdir -p "$run/init"
    config "$model" >"$run/init/config.json"
    OMP_WAIT_POLICY=passive "$tools/train_run.sh" "$out/results.csv" "$model" "$seed" "$epochs" "$run" \
        "$run/log.txt" -- "$bin" train --model "$run/init" --train "$out/subset/train.csv" \
        --val "$out/subset/val.csv" -o "$run" --epochs "$epochs" --batch "$batch" --lr "$lr" \
        --seed "$seed" --threads "$threads" --config "$out/train.json" --precision "$precision"
}
# JOBS runs at a time with THREADS threads each (on a small machine, 2 single-threaded runs
# waste less than one 2-threaded run waiting at barriers), seed by seed
tools=$(cd "$(dirname "$0")" && pwd)
export -f run_one config
export out bin epochs batch lr threads size patch precision tools
status=0
for seed in $seeds; do for model in $models; do echo "$seed $model"; done; done |
    xargs -P "$jobs" -L 1 bash -c 'run_one "$@"' _ || status=1
# table: mean over seeds, and each seed's value, of the finished runs
"$tools/seed_table.sh" "$out/results.csv" >"$out/table.md"
cat "$out/table.md"
if [ $status -ne 0 ]; then
    echo "some runs did not finish (above): the table leaves them out; run the same command again to continue them" >&2
    exit 1
fi
