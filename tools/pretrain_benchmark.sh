#!/usr/bin/env bash
# Issue 14's experiment: does VideoMAE masked pretraining turn a small video transformer that
# cannot learn the 12-class motion task from scratch into one that does? On `tubelet synth` clips
# (all 12 classes, distractors and noise at their defaults):
#   1. pretrain a small VideoMAEForPreTraining on the training clips, without their labels;
#   2. fine-tune it on the labels, SEEDS times;
#   3. train the same classifier from a random init, same recipe and budget, SEEDS times;
#   4. draw reconstructions of one validation clip early and late in pretraining.
# Writes OUTDIR/results.csv, OUTDIR/table.md, OUTDIR/recon_early.png, OUTDIR/recon_late.png and
# OUTDIR/pretrain/curves.png; docs/pretraining.md holds a committed copy and the discussion.
#
# usage: tools/pretrain_benchmark.sh [OUTDIR]
#   env: TUBELET=build/tubelet SIZE=32 FRAMES=8 PATCH=4 PER_CLASS=150 HIDDEN=96 LAYERS=4 HEADS=4
#        DEC_HIDDEN=64 DEC_LAYERS=2 DEC_HEADS=4 MASK=0.75 PRE_EPOCHS=200 PRE_STOP=74 PRE_BATCH=32
#        PRE_LR=1e-3 EARLY=5 FT_EPOCHS=25 FT_BATCH=16 FT_LR=1e-3 SEEDS="0 1 2" THREADS=1 JOBS=2
#   The defaults are the run of docs/pretraining.md: a 200-epoch schedule stopped after epoch 74
#   (PRE_STOP; the loss had been flat since epoch 2).
#   Interrupted (Ctrl-C, a kill), the same command continues: pretraining from its checkpoint,
#   each unfinished fine-tuning run with --resume; results.csv holds finished runs only
#   (tools/train_run.sh).
#   PRE_LR and FT_LR are the learning rates actually used (the script passes lr * 256 / batch to
#   `pretrain`, whose --lr is VideoMAE's base rate scaled by batch / 256).
set -eu
out=${1:-bench/out/pretrain}
bin=${TUBELET:-build/tubelet}
size=${SIZE:-32} frames=${FRAMES:-8} patch=${PATCH:-4} per_class=${PER_CLASS:-150}
hidden=${HIDDEN:-96} layers=${LAYERS:-4} heads=${HEADS:-4}
dec_hidden=${DEC_HIDDEN:-64} dec_layers=${DEC_LAYERS:-2} dec_heads=${DEC_HEADS:-4}
mask=${MASK:-0.75} pre_epochs=${PRE_EPOCHS:-200} pre_batch=${PRE_BATCH:-32} pre_lr=${PRE_LR:-1e-3}
pre_stop=${PRE_STOP:-74}
early=${EARLY:-5} ft_epochs=${FT_EPOCHS:-25} ft_batch=${FT_BATCH:-16} ft_lr=${FT_LR:-1e-3}
seeds=${SEEDS:-0 1 2} threads=${THREADS:-1} jobs=${JOBS:-2}
mkdir -p "$out"
data="$out/synth"
[ -f "$data/train.csv" ] || "$bin" synth -o "$data" --per-class "$per_class" --frames "$frames" \
    --size "$size" --seed 0 >/dev/null

encoder() {   # the encoder's config keys, shared by the pretraining model and the classifier
    echo "\"model_type\": \"videomae\", \"image_size\": $size, \"patch_size\": $patch, \"num_frames\": $frames,
 \"tubelet_size\": 2, \"num_channels\": 3, \"hidden_size\": $hidden, \"num_hidden_layers\": $layers,
 \"num_attention_heads\": $heads, \"intermediate_size\": $((4 * hidden)), \"use_mean_pooling\": true"
}
mkdir -p "$out/pretrain_init" "$out/scratch_init"
cat >"$out/pretrain_init/config.json" <<JSON
{"architectures": ["VideoMAEForPreTraining"], $(encoder), "decoder_hidden_size": $dec_hidden,
 "decoder_num_hidden_layers": $dec_layers, "decoder_num_attention_heads": $dec_heads,
 "decoder_intermediate_size": $((4 * dec_hidden)), "norm_pix_loss": true}
JSON
cat >"$out/scratch_init/config.json" <<JSON
{"architectures": ["VideoMAEForVideoClassification"], $(encoder)}
JSON
echo '{"warmup_epochs": 5}' >"$out/pretrain.json"
echo '{"warmup_epochs": 2, "min_scale": 0.6}' >"$out/finetune.json"

# 1. pretraining: the training clips without labels; stopped after EARLY epochs once for the
# early reconstruction, then resumed (exactly) to epoch PRE_STOP
pre() {
    OMP_WAIT_POLICY=passive "$bin" pretrain --model "$out/pretrain_init" --videos "$data/train.csv" \
        --val "$data/val.csv" -o "$out/pretrain" --mask-ratio "$mask" --epochs "$pre_epochs" \
        --batch "$pre_batch" --lr "$(awk -v l="$pre_lr" -v b="$pre_batch" 'BEGIN { print l * 256 / b }')" \
        --seed 0 --threads 2 --config "$out/pretrain.json" "$@"
}
val_clip="$data/$(sed -n 2p "$data/val.csv" | cut -d, -f1)"
t0=$(date +%s)
# an interrupted call left a checkpoint: --resume continues it (set -e stops at a failed stage)
saved_epoch() {   # the epoch of OUTDIR/pretrain/checkpoint, 0 if none
    local e
    e=$(grep -o '"epoch":[[:space:]]*[0-9]*' "$out/pretrain/checkpoint/trainer_state.json" 2>/dev/null | grep -o '[0-9]*$' | head -1)
    echo "${e:-0}"
}
if [ ! -f "$out/recon_early.png" ]; then
    if [ "$(saved_epoch)" -eq 0 ]; then pre --stop-after "$early" 2>>"$out/pretrain.log"
    elif [ "$(saved_epoch)" -lt "$early" ]; then pre --resume --stop-after "$early" 2>>"$out/pretrain.log"; fi
    "$bin" reconstruct --model "$out/pretrain/checkpoint" "$val_clip" -o "$out/recon_early.png" \
        --mask-ratio "$mask" --seed 1 >/dev/null
fi
if [ ! -f "$out/recon_late.png" ]; then
    pre --resume --stop-after "$pre_stop" 2>>"$out/pretrain.log"
    "$bin" reconstruct --model "$out/pretrain/checkpoint" "$val_clip" -o "$out/recon_late.png" \
        --mask-ratio "$mask" --seed 1 >/dev/null
fi
echo "pretraining: $(($(date +%s) - t0)) s (this call)" | tee -a "$out/timing.txt"

# 2 and 3. fine-tuning and from scratch: same classifier, recipe and budget
[ -f "$out/results.csv" ] || echo "init,seed,epochs,final_val_acc,best_val_acc,final_train_loss,seconds" >"$out/results.csv"
run_one() {   # run_one SEED INIT: INIT is pretrained or scratch; its row once it has finished
    local seed=$1 init=$2 run="$out/runs/${2}_seed$1" from
    [ "$init" = pretrained ] && from="$out/pretrain/checkpoint" || from="$out/scratch_init"
    OMP_WAIT_POLICY=passive "$tools/train_run.sh" "$out/results.csv" "$init" "$seed" "$ft_epochs" "$run" \
        "$run.log" -- "$bin" train --model "$from" --train "$data/train.csv" --val "$data/val.csv" \
        -o "$run" --epochs "$ft_epochs" --batch "$ft_batch" --lr "$ft_lr" --seed "$seed" \
        --threads "$threads" --config "$out/finetune.json"
}
tools=$(cd "$(dirname "$0")" && pwd)
export -f run_one
export out bin ft_epochs ft_batch ft_lr threads data tools
mkdir -p "$out/runs"
status=0
for seed in $seeds; do for init in pretrained scratch; do echo "$seed $init"; done; done |
    xargs -P "$jobs" -L 1 bash -c 'run_one "$@"' _ || status=1
"$tools/seed_table.sh" "$out/results.csv" >"$out/table.md"
cat "$out/table.md"
if [ $status -ne 0 ]; then
    echo "some runs did not finish (above): the table leaves them out; run the same command again to continue them" >&2
    exit 1
fi
