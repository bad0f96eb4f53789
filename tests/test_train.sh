#!/usr/bin/env bash
# Training end to end on a tiny synthetic dataset: it runs, writes its outputs, resumes exactly,
# and bad data stops it with a message naming the file. Usage: tests/test_train.sh build/tubelet
set -u
bin=${1:-build/tubelet}
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0 fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }

if ! $bin synth -o "$tmp/data" --per-class 3 --frames 4 --size 16 --seed 3 >/dev/null 2>"$tmp/err"; then
    bad "synth failed: $(cat "$tmp/err")"; echo "$pass passed, $fail failed"; exit 1
fi
mkdir -p "$tmp/model"
cat >"$tmp/model/config.json" <<'JSON'
{"model_type": "timesformer", "image_size": 16, "patch_size": 8, "num_frames": 4,
 "hidden_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 32,
 "attention_type": "divided_space_time"}
JSON
train() { $bin train --model "$tmp/model" --train "$tmp/data/train.csv" --val "$tmp/data/val.csv" --batch 4 --threads 2 "$@"; }

if train -o "$tmp/a" --epochs 2 >/dev/null 2>"$tmp/err"; then ok; else bad "train: $(tail -3 "$tmp/err")"; fi
[ "$(wc -l <"$tmp/a/metrics.csv")" -eq 3 ] && head -1 "$tmp/a/metrics.csv" | grep -qx "epoch,train_loss,val_loss,val_acc" && ok || bad "metrics.csv"
for f in config.json model.safetensors preprocessor_config.json optimizer.safetensors trainer_state.json; do
    [ -s "$tmp/a/checkpoint/$f" ] || { bad "checkpoint lacks $f"; continue; }; ok
done
[ "$(head -c 8 "$tmp/a/curves.png" | od -An -tx1 | tr -d ' \n')" = "89504e470d0a1a0a" ] && ok || bad "curves.png is not a PNG"
grep -q "progress\|epoch 1/2" "$tmp/err" && ok || bad "no progress bar"
# the checkpoint is a model directory the other commands load
$bin classify --model "$tmp/a/checkpoint" "$(sed -n 2p "$tmp/data/val.csv" | cut -d, -f1 | sed "s|^|$tmp/data/|")" >/dev/null 2>&1 && ok || bad "classify with the checkpoint"

# a finished run is not replaced by a forgotten --resume (issue 39): refused, the run intact;
# --overwrite starts over; --resume with --overwrite is refused
cp "$tmp/a/metrics.csv" "$tmp/a.metrics"
train -o "$tmp/a" --epochs 1 >/dev/null 2>"$tmp/err"
[ $? -ne 0 ] && grep -q -- "holds a run (checkpoint): continue it with --resume, choose another -o, or replace it with --overwrite" "$tmp/err" &&
    cmp -s "$tmp/a/metrics.csv" "$tmp/a.metrics" && ok || bad "train -o over a run: $(cat "$tmp/err")"
train -o "$tmp/a" --epochs 1 --resume --overwrite >/dev/null 2>"$tmp/err"
[ $? -eq 2 ] && grep -q "give one of them" "$tmp/err" && ok || bad "--resume --overwrite: $(cat "$tmp/err")"
train -o "$tmp/ow" --epochs 1 >/dev/null 2>&1 && train -o "$tmp/ow" --epochs 1 --overwrite >/dev/null 2>"$tmp/err" &&
    [ "$(wc -l <"$tmp/ow/metrics.csv")" -eq 2 ] && ok || bad "--overwrite: $(tail -2 "$tmp/err")"

# resume: stop after epoch 1, continue: the same curve as the uninterrupted run
train -o "$tmp/b" --epochs 2 --stop-after 1 >/dev/null 2>&1 && train -o "$tmp/b" --epochs 2 --resume >/dev/null 2>"$tmp/err"
if cmp -s "$tmp/a/metrics.csv" "$tmp/b/metrics.csv"; then ok; else bad "resumed curve differs:"; diff "$tmp/a/metrics.csv" "$tmp/b/metrics.csv"; fi

# dropout from the model's config.json: it changes the run, resumes exactly (the masks are a
# function of the seed and the step), is kept in the checkpoint's config.json, and --config
# rates of 0 give the run without dropout back exactly
mkdir -p "$tmp/model_do"
sed 's/"attention_type"/"hidden_dropout_prob": 0.2, "attention_probs_dropout_prob": 0.2, "attention_type"/' \
    "$tmp/model/config.json" >"$tmp/model_do/config.json"
train_do() { $bin train --model "$tmp/model_do" --train "$tmp/data/train.csv" --val "$tmp/data/val.csv" --batch 4 --threads 2 "$@"; }
train_do -o "$tmp/d" --epochs 2 >/dev/null 2>"$tmp/err" && ok || bad "train with dropout: $(tail -3 "$tmp/err")"
if cmp -s "$tmp/a/metrics.csv" "$tmp/d/metrics.csv"; then bad "dropout 0.2 left the run unchanged"; else ok; fi
grep -q '"hidden_dropout_prob":[[:space:]]*0.2' "$tmp/d/checkpoint/config.json" &&
    grep -q '"attention_probs_dropout_prob":[[:space:]]*0.2' "$tmp/d/checkpoint/config.json" && ok ||
    bad "the checkpoint's config.json lost the dropout rates"
train_do -o "$tmp/e" --epochs 2 --stop-after 1 >/dev/null 2>&1 && train_do -o "$tmp/e" --epochs 2 --resume >/dev/null 2>"$tmp/err"
if cmp -s "$tmp/d/metrics.csv" "$tmp/e/metrics.csv"; then ok; else bad "resumed curve with dropout differs:"; diff "$tmp/d/metrics.csv" "$tmp/e/metrics.csv"; fi
echo '{"hidden_dropout_prob": 0, "attention_probs_dropout_prob": 0}' >"$tmp/nodrop.json"
train_do -o "$tmp/f" --epochs 2 --config "$tmp/nodrop.json" >/dev/null 2>"$tmp/err"
if cmp -s "$tmp/a/metrics.csv" "$tmp/f/metrics.csv"; then ok; else bad "--config dropout 0 differs from no dropout:"; diff "$tmp/a/metrics.csv" "$tmp/f/metrics.csv"; fi

# layer scale (the STMixer backbone's VideoMAE blocks) with drop path and gradient checkpointing:
# the lambdas (parameters of their own: 4 x 16 more) go into the checkpoint with the
# config field, and the run resumes exactly
mkdir -p "$tmp/model_ls"
cat >"$tmp/model_ls/config.json" <<'JSON'
{"model_type": "videomae", "image_size": 16, "patch_size": 8, "num_frames": 4, "tubelet_size": 2,
 "hidden_size": 16, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 32,
 "use_mean_pooling": false, "layer_norm_eps": 1e-6, "layer_scale_init_value": 0.1}
JSON
echo '{"drop_path_rate": 0.2, "gradient_checkpointing": true}' >"$tmp/ls.json"
train_ls() { $bin train --model "$tmp/model_ls" --train "$tmp/data/train.csv" --val "$tmp/data/val.csv" --batch 4 --threads 2 --config "$tmp/ls.json" "$@"; }
train_ls -o "$tmp/ls" --epochs 2 >/dev/null 2>"$tmp/err" && ok || bad "train with layer scale: $(tail -3 "$tmp/err")"
grep -q '"layer_scale_init_value":[[:space:]]*0.1' "$tmp/ls/checkpoint/config.json" && ok || bad "the checkpoint's config.json lost layer_scale_init_value"
# 10876 parameters: 10812 without the 2 x 2 x 16 lambdas
$bin info --model "$tmp/ls/checkpoint" --json >"$tmp/info" 2>&1 && grep -q '"params": 10876,' "$tmp/info" && ok ||
    bad "layer-scale checkpoint: $(cat "$tmp/info")"
hl=$(od -An -tu8 -N8 "$tmp/ls/checkpoint/model.safetensors" | tr -d ' ')
[ "$(head -c $((8 + hl)) "$tmp/ls/checkpoint/model.safetensors" | grep -ao 'layer\.[01]\.lambda_[12]' | sort -u | wc -l)" -eq 4 ] && ok ||
    bad "the checkpoint lacks lambda_1 / lambda_2"
train_ls -o "$tmp/ls2" --epochs 2 --stop-after 1 >/dev/null 2>&1 && train_ls -o "$tmp/ls2" --epochs 2 --resume >/dev/null 2>"$tmp/err"
if cmp -s "$tmp/ls/metrics.csv" "$tmp/ls2/metrics.csv"; then ok; else bad "resumed curve with layer scale differs:"; diff "$tmp/ls/metrics.csv" "$tmp/ls2/metrics.csv"; fi

# a non-finite loss stops training with a message and keeps the last good checkpoint
# (NaN written into the first tensor of the saved weights: the first forward's loss is NaN)
cp -r "$tmp/a" "$tmp/nan"
w="$tmp/nan/checkpoint/model.safetensors"
hdr=$(od -An -t u8 -N8 "$w" | tr -d ' ')
for _ in 1 2 3 4 5 6 7 8; do printf '\x00\x00\xc0\x7f'; done |
    dd of="$w" bs=1 seek=$((8 + hdr)) conv=notrunc 2>/dev/null
cp "$w" "$tmp/good.safetensors"
train -o "$tmp/nan" --epochs 3 --resume >/dev/null 2>"$tmp/err"
rc=$?
[ $rc -ne 0 ] && grep -q "not finite" "$tmp/err" && grep -q "last checkpoint" "$tmp/err" && ok || bad "NaN loss: exit $rc: $(tail -2 "$tmp/err")"
cmp -s "$tmp/good.safetensors" "$tmp/nan/checkpoint/model.safetensors" && ok || bad "NaN loss: the checkpoint changed"

# disk full while writing a checkpoint (a file-size limit makes write() fail with EFBIG): a clear
# message, a non-zero exit, and the previous checkpoint intact
cp -r "$tmp/a" "$tmp/full"
( trap '' XFSZ; ulimit -f 8; train -o "$tmp/full" --epochs 3 --resume >/dev/null 2>"$tmp/err" )
rc=$?
[ $rc -ne 0 ] && grep -qi "error" "$tmp/err" && ok || bad "disk full: exit $rc: $(tail -2 "$tmp/err")"
cmp -s "$tmp/a/checkpoint/model.safetensors" "$tmp/full/checkpoint/model.safetensors" && ok || bad "disk full: the checkpoint was damaged"
$bin classify --model "$tmp/full/checkpoint" "$(sed -n 2p "$tmp/data/val.csv" | cut -d, -f1 | sed "s|^|$tmp/data/|")" >/dev/null 2>&1 && ok || bad "disk full: the kept checkpoint does not load"

# TimeSformer's sparse local-global and axial schemes from a config.json alone: training runs,
# the checkpoint keeps the attention type and loads (classify), a resumed run is exact
for att in local_global axial; do
    mkdir -p "$tmp/model_$att"
    sed "s/\"divided_space_time\"/\"$att\"/; s/\"patch_size\": 8/\"patch_size\": 4/" "$tmp/model/config.json" \
        >"$tmp/model_$att/config.json"
    train_att() { $bin train --model "$tmp/model_$att" --train "$tmp/data/train.csv" --val "$tmp/data/val.csv" --batch 4 --threads 2 "$@"; }
    train_att -o "$tmp/$att" --epochs 2 >/dev/null 2>"$tmp/err" && ok || bad "train $att: $(tail -3 "$tmp/err")"
    [ "$(wc -l <"$tmp/$att/metrics.csv")" -eq 3 ] && ok || bad "$att metrics.csv"
    grep -q "\"attention_type\":[[:space:]]*\"$att\"" "$tmp/$att/checkpoint/config.json" && ok ||
        bad "$att: the checkpoint's config.json lost the attention type"
    $bin classify --model "$tmp/$att/checkpoint" "$(sed -n 2p "$tmp/data/val.csv" | cut -d, -f1 | sed "s|^|$tmp/data/|")" >/dev/null 2>&1 &&
        ok || bad "classify with the $att checkpoint"
    train_att -o "$tmp/${att}_r" --epochs 2 --stop-after 1 >/dev/null 2>&1 && train_att -o "$tmp/${att}_r" --epochs 2 --resume >/dev/null 2>&1
    if cmp -s "$tmp/$att/metrics.csv" "$tmp/${att}_r/metrics.csv"; then ok; else bad "$att: resumed curve differs"; fi
done

# ViViT Models 2-4 (tubelet 2x8x8 over 4 frames of 16x16: grid 2x2x2): each trains, resumes
# exactly, gives the same curve with gradient checkpointing, keeps its variant in the
# checkpoint's config.json, and the checkpoint classifies a video
echo '{"gradient_checkpointing": true}' >"$tmp/ckpt.json"
vid=$(sed -n 2p "$tmp/data/val.csv" | cut -d, -f1 | sed "s|^|$tmp/data/|")
for v in factorised_encoder factorised_self_attention factorised_dot_product; do
    mkdir -p "$tmp/m_$v"
    cat >"$tmp/m_$v/config.json" <<JSON
{"model_type": "vivit", "image_size": 16, "num_frames": 4, "tubelet_size": [2, 8, 8], "hidden_size": 16,
 "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 32, "model_variant": "$v",
 "num_temporal_layers": 1}
JSON
    [ $v = factorised_encoder ] || sed -i 's/, *"num_temporal_layers": 1//' "$tmp/m_$v/config.json"
    train_v() { $bin train --model "$tmp/m_$v" --train "$tmp/data/train.csv" --val "$tmp/data/val.csv" --batch 4 --threads 2 --epochs 2 "$@"; }
    train_v -o "$tmp/v_$v" >/dev/null 2>"$tmp/err" && ok || { bad "train $v: $(tail -3 "$tmp/err")"; continue; }
    [ "$(wc -l <"$tmp/v_$v/metrics.csv")" -eq 3 ] && ok || bad "$v metrics.csv"
    grep -q "\"model_variant\":[[:space:]]*\"$v\"" "$tmp/v_$v/checkpoint/config.json" && ok || bad "$v checkpoint config.json lost model_variant"
    train_v -o "$tmp/r_$v" --stop-after 1 >/dev/null 2>&1 && train_v -o "$tmp/r_$v" --resume >/dev/null 2>"$tmp/err"
    cmp -s "$tmp/v_$v/metrics.csv" "$tmp/r_$v/metrics.csv" && ok || bad "$v: resumed curve differs"
    train_v -o "$tmp/c_$v" --config "$tmp/ckpt.json" >/dev/null 2>"$tmp/err"
    cmp -s "$tmp/v_$v/metrics.csv" "$tmp/c_$v/metrics.csv" && ok || bad "$v: gradient checkpointing changes the curve"
    $bin classify --model "$tmp/v_$v/checkpoint" "$vid" >/dev/null 2>"$tmp/err" && ok || bad "$v: classify: $(cat "$tmp/err")"
done
# Model 2's last hidden state has frame tokens only: pooled features work, the patch map is refused
$bin features --model "$tmp/v_factorised_encoder/checkpoint" "$vid" -o "$tmp/f.npy" --pool mean >/dev/null 2>"$tmp/err" &&
    ok || bad "features of Model 2: $(cat "$tmp/err")"
$bin features --model "$tmp/v_factorised_encoder/checkpoint" "$vid" -o "$tmp/g.npy" --pool none >/dev/null 2>"$tmp/err"
[ $? -ne 0 ] && grep -q "factorised encoder" "$tmp/err" && [ ! -e "$tmp/g.npy" ] && ok || bad "features --pool none of Model 2: $(cat "$tmp/err")"

# a learning rate whose last bit 15 digits lose (Python's repr(3e-4 * 0.7)) resumes: the
# checkpoint records it exactly
train -o "$tmp/lr" --epochs 2 --stop-after 1 --lr 0.00020999999999999998 >/dev/null 2>&1
train -o "$tmp/lr" --epochs 2 --resume --lr 0.00020999999999999998 >/dev/null 2>"$tmp/err" && ok ||
    bad "resume with lr 0.00020999999999999998: $(tail -2 "$tmp/err")"

# mixed precision (--precision bf16): trains to a curve of its own (its products are rounded),
# records the precision in the checkpoint, resumes exactly, and a resume in fp32 is refused
train -o "$tmp/mp" --epochs 2 --precision bf16 >/dev/null 2>"$tmp/err" && ok || bad "train --precision bf16: $(tail -2 "$tmp/err")"
grep -q '"precision":[[:space:]]*"bf16"' "$tmp/mp/checkpoint/trainer_state.json" && ok || bad "trainer_state.json lacks the precision"
[ -s "$tmp/mp/metrics.csv" ] && ! cmp -s "$tmp/a/metrics.csv" "$tmp/mp/metrics.csv" && ok || bad "the bf16 curve is the fp32 one"
train -o "$tmp/mp2" --epochs 2 --stop-after 1 --precision bf16 >/dev/null 2>&1 && train -o "$tmp/mp2" --epochs 2 --resume --precision bf16 >/dev/null 2>&1
cmp -s "$tmp/mp/metrics.csv" "$tmp/mp2/metrics.csv" && ok || bad "resumed bf16 curve differs"
train -o "$tmp/mp2" --epochs 3 --resume >/dev/null 2>"$tmp/err"
[ $? -ne 0 ] && grep -q -- "--precision bf16 (now fp32)" "$tmp/err" && ok || bad "resume in fp32 of a bf16 run: $(cat "$tmp/err")"

# --device cuda on a build without the CUDA backend (or a machine without a GPU): refused at load
# with the reason, before a step and before OUTDIR is made (tests/gpu_train.sh runs it for real)
train -o "$tmp/cu" --epochs 1 --device cuda >/dev/null 2>"$tmp/err"
[ $? -ne 0 ] && grep -q "device.*cuda" "$tmp/err" && [ ! -e "$tmp/cu/metrics.csv" ] && ok ||
    bad "train --device cuda without CUDA: $(cat "$tmp/err")"
train -o "$tmp/mp3" --epochs 1 --precision int8 >/dev/null 2>"$tmp/err"
[ $? -eq 2 ] && grep -q "fp32 or bf16" "$tmp/err" && [ ! -e "$tmp/mp3" ] && ok || bad "train --precision int8: $(cat "$tmp/err")"

# tools/motion_benchmark.sh (README's retraining command) records finished runs only: a run
# interrupted after its first epoch (as Ctrl-C leaves one: a checkpoint, exit 130) gets no row and
# fails the call; the next call continues it with --resume and then records it
real=$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")
cat >"$tmp/tubelet" <<SH
#!/usr/bin/env bash
[ "\$1" = train ] && echo "\$*" >>"$tmp/calls"
if [ "\$1" = train ] && [ ! -e "$tmp/interrupted" ]; then
    touch "$tmp/interrupted"; "$real" "\$@" --stop-after 1 >/dev/null; exit 130
fi
exec "$real" "\$@"
SH
chmod +x "$tmp/tubelet"
mb() { TUBELET="$tmp/tubelet" SEEDS=0 MODELS=vivit_m1 EPOCHS=2 BATCH=4 SIZE=16 PATCH=8 PER_CLASS=5 JOBS=1 \
       tools/motion_benchmark.sh "$tmp/mb" >"$tmp/mb.out" 2>"$tmp/mb.err"; }
mb && bad "motion_benchmark.sh: an interrupted run reported success" || ok
[ "$(wc -l <"$tmp/mb/results.csv")" -eq 1 ] && ok || bad "an interrupted run was recorded: $(cat "$tmp/mb/results.csv")"
grep -q "vivit_m1" "$tmp/mb/table.md" && bad "the table lists an unfinished run" || ok
mb && ok || bad "motion_benchmark.sh, second call: $(tail -3 "$tmp/mb.err")"
tail -1 "$tmp/calls" | grep -q -- "--resume" && ok || bad "the second call did not resume: $(tail -1 "$tmp/calls")"
[ "$(wc -l <"$tmp/mb/results.csv")" -eq 2 ] && grep -q "^vivit_m1,0,2," "$tmp/mb/results.csv" &&
    [ "$(wc -l <"$tmp/mb/runs/vivit_m1_seed0/metrics.csv")" -eq 3 ] && ok ||
    bad "the resumed run's row: $(cat "$tmp/mb/results.csv")"
mb && [ "$(wc -l <"$tmp/calls")" -eq 2 ] && ok || bad "a finished run was trained again"

# bad data
printf 'path,label\nvideos/none.mp4,grow\n' >"$tmp/data/missing.csv"
train --val "$tmp/data/missing.csv" -o "$tmp/c" --epochs 1 >/dev/null 2>"$tmp/err"
[ $? -ne 0 ] && grep -q "none.mp4" "$tmp/err" && ok || bad "missing video: $(cat "$tmp/err" | tail -2)"
printf 'path,label\nvideos/x.mp4,no_such_class\n' >"$tmp/data/unknown.csv"
train --val "$tmp/data/unknown.csv" -o "$tmp/c" --epochs 1 >/dev/null 2>"$tmp/err"
[ $? -ne 0 ] && grep -q "unknown.csv: row 1: label 'no_such_class'" "$tmp/err" && ok || bad "unknown label: $(cat "$tmp/err")"
printf 'path,label\njust-one-field\n' >"$tmp/data/badrow.csv"
train --val "$tmp/data/badrow.csv" -o "$tmp/c" --epochs 1 >/dev/null 2>"$tmp/err"
[ $? -ne 0 ] && grep -q "badrow.csv:2: expected 'path,label'" "$tmp/err" && ok || bad "bad row: $(cat "$tmp/err")"
$bin train --help | grep -q usage && ok || bad "train --help"
$bin grad --help | grep -q usage && ok || bad "grad --help"
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
