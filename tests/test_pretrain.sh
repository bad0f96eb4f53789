#!/usr/bin/env bash
# VideoMAE pretraining from the command line: the run/grad contract on a fixture (loss printed,
# logits and gradients written), bad masks and inputs of another channel count refused without
# output, pretrain on a tiny synthetic set (outputs, exact resume), fine-tuning its checkpoint as
# a classifier, classify refusing it.
# Usage: tests/test_pretrain.sh build/tubelet
set -u
bin=${1:-build/tubelet}
cd "$(dirname "$0")/.."
fx=tests/fixtures/pretrain_normpix
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0 fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }

# the contract: run --mask writes the logits and prints "loss X"; grad --mask the gradients
out=$($bin run --model $fx --input $fx/input.npy --mask $fx/mask.npy --logits "$tmp/l.npy" --threads 2 2>"$tmp/err")
echo "$out" | grep -Eqx 'loss [0-9]+\.[0-9]+' && [ -s "$tmp/l.npy" ] && ok || bad "run --mask: '$out' $(cat "$tmp/err")"
out=$($bin grad --model $fx --input $fx/input.npy --mask $fx/mask.npy -o "$tmp/g.safetensors" --threads 2 2>"$tmp/err")
echo "$out" | grep -Eqx 'loss [0-9]+\.[0-9]+' && [ -s "$tmp/g.safetensors" ] && ok || bad "grad --mask: '$out' $(cat "$tmp/err")"
# mixed precision: a loss within bf16's rounding of fp32's, other gradients
out16=$($bin grad --model $fx --input $fx/input.npy --mask $fx/mask.npy -o "$tmp/g16.safetensors" --threads 2 --precision bf16 2>"$tmp/err")
awk -v a="${out#loss }" -v b="${out16#loss }" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(b > 0 && d <= 0.01 * a) }' &&
    ! cmp -s "$tmp/g.safetensors" "$tmp/g16.safetensors" && ok || bad "grad --mask --precision bf16: '$out16' vs '$out' $(cat "$tmp/err")"
# bad masks: an error naming the problem, exit 1, no output file
for m in unequal all_masked none_masked shape float; do
    rm -f "$tmp/l.npy"
    if $bin run --model $fx --input $fx/input.npy --mask $fx/bad_mask_$m.npy --logits "$tmp/l.npy" >/dev/null 2>"$tmp/err"; then
        bad "mask $m accepted"
    elif [ -e "$tmp/l.npy" ] || ! grep -q "^error: .*mask\|^error: .*clip\|^error: .*visible" "$tmp/err"; then
        bad "mask $m: $(cat "$tmp/err")"
    else ok; fi
done
# pixel_values of another channel count (the model takes 3): refused, naming the channels; one
# channel was a heap overflow (the step read three). npy FILE DESCR SHAPE SRC BYTES: a .npy whose
# data are BYTES bytes of SRC's data
npy() {
    local h="{'descr': '$2', 'fortran_order': False, 'shape': $3, }"
    { printf '\x93NUMPY\x01\x00\x76\x00%s' "$h"; printf '%*s\n' $((117 - ${#h})) ''
      tail -c +129 "$4" | head -c "$5"; } >"$1"
}
npy "$tmp/mask1.npy" '|b1' '(1, 32)' $fx/mask.npy 32
for c in 1 4; do
    npy "$tmp/x$c.npy" '<f4' "(1, 4, $c, 16, 16)" $fx/input.npy $((4 * 4 * c * 256))
    for cmd in "run --logits $tmp/out$c" "grad -o $tmp/out$c"; do
        $bin $cmd --model $fx --input "$tmp/x$c.npy" --mask "$tmp/mask1.npy" >/dev/null 2>"$tmp/err"
        rc=$?
        [ $rc -eq 1 ] && [ ! -e "$tmp/out$c" ] && grep -q "x$c.npy: .*3 channels" "$tmp/err" && ok ||
            bad "${cmd%% *} --mask with $c channels: exit $rc: $(tail -3 "$tmp/err")"
    done
done
# the same without --mask, on a classifier (a segmentation fault)
cf=tests/fixtures/videomae_mean
npy "$tmp/c1.npy" '<f4' '(2, 4, 1, 32, 32)' $cf/input.npy $((2 * 4 * 1024 * 4))
$bin grad --model $cf --input "$tmp/c1.npy" --labels $cf/labels.npy -o "$tmp/gc" >/dev/null 2>"$tmp/err"
rc=$?
[ $rc -eq 1 ] && [ ! -e "$tmp/gc" ] && grep -q "c1.npy: .*3 channels" "$tmp/err" && ok || bad "grad with 1 channel: exit $rc: $(tail -3 "$tmp/err")"
# videos decode to 3 channels: training a model of 4 (random weights from its config) is refused
mkdir -p "$tmp/ch4" "$tmp/ch4p"
sed 's/"num_channels": 3/"num_channels": 4/' $cf/config.json >"$tmp/ch4/config.json"
sed 's/"num_channels": 3/"num_channels": 4/' $fx/config.json >"$tmp/ch4p/config.json"
echo "$PWD/tests/fixtures/video/h264.mp4,x" >"$tmp/t.csv" && echo "$PWD/tests/fixtures/video/h264.mp4" >"$tmp/v.txt"
for c in "train --model $tmp/ch4 --train $tmp/t.csv --val $tmp/t.csv" "pretrain --model $tmp/ch4p --videos $tmp/v.txt --batch 1"; do
    $bin $c -o "$tmp/o4" >/dev/null 2>"$tmp/err"
    grep -q "num_channels is 4, but videos decode to 3" "$tmp/err" && [ ! -e "$tmp/o4" ] && ok || bad "${c%% *} of 4 channels: $(tail -3 "$tmp/err")"
done
# a classifier given a mask, a pretraining model given to classify
$bin run --model tests/fixtures/videomae_mean --input $fx/input.npy --mask $fx/mask.npy --logits "$tmp/l.npy" >/dev/null 2>"$tmp/err" &&
    bad "a classifier took --mask" || ok
$bin classify --model $fx tests/fixtures/video/h264.mp4 >/dev/null 2>"$tmp/err" && bad "classify took a pretraining model" ||
    { grep -q "no classifier" "$tmp/err" && ok || bad "classify: $(cat "$tmp/err")"; }

# pretraining on a tiny synthetic set: outputs, exact resume
if ! $bin synth -o "$tmp/data" --per-class 3 --frames 4 --size 16 --seed 5 >/dev/null 2>"$tmp/err"; then
    bad "synth failed: $(cat "$tmp/err")"; echo "$pass passed, $fail failed"; exit 1
fi
mkdir -p "$tmp/model"
cat >"$tmp/model/config.json" <<'JSON'
{"architectures": ["VideoMAEForPreTraining"], "model_type": "videomae", "image_size": 16,
 "patch_size": 8, "num_frames": 4, "tubelet_size": 2, "hidden_size": 16, "num_hidden_layers": 1,
 "num_attention_heads": 2, "intermediate_size": 32, "decoder_hidden_size": 8,
 "decoder_num_hidden_layers": 1, "decoder_num_attention_heads": 2, "decoder_intermediate_size": 16,
 "norm_pix_loss": true, "use_mean_pooling": true}
JSON
cut -d, -f1 "$tmp/data/train.csv" | tail -n +2 | sed "s|^|$tmp/data/|" >"$tmp/videos.txt"
pre() { $bin pretrain --model "$tmp/model" --videos "$tmp/videos.txt" --batch 4 --threads 2 --mask-ratio 0.5 --lr 0.01 "$@"; }
if pre -o "$tmp/a" --epochs 2 >/dev/null 2>"$tmp/err"; then ok; else bad "pretrain: $(tail -3 "$tmp/err")"; fi
[ "$(wc -l <"$tmp/a/metrics.csv" 2>/dev/null)" = 3 ] && head -1 "$tmp/a/metrics.csv" | grep -qx "epoch,train_loss,val_recon_loss,val_acc" && ok || bad "metrics.csv"
grep -q '"VideoMAEForPreTraining"' "$tmp/a/checkpoint/config.json" 2>/dev/null && ok || bad "checkpoint config"
[ "$(head -c 8 "$tmp/a/curves.png" | od -An -tx1 | tr -d ' \n')" = "89504e470d0a1a0a" ] && ok || bad "curves.png"
pre -o "$tmp/b" --epochs 2 --stop-after 1 >/dev/null 2>&1 && pre -o "$tmp/b" --epochs 2 --resume >/dev/null 2>"$tmp/err"
if cmp -s "$tmp/a/metrics.csv" "$tmp/b/metrics.csv"; then ok; else bad "resumed pretraining differs:"; diff "$tmp/a/metrics.csv" "$tmp/b/metrics.csv"; fi
grep -q "classes" "$tmp/err" && bad "the pretraining banner counts classes: $(grep classes "$tmp/err")" || ok
# the small built-in architecture: transformers' VideoMAEForPreTraining of the same config has
# 568,704 parameters; it pretrains (the clips resized to its 8 x 32²)
$bin info --arch videomae-tiny-pretrain --json 2>"$tmp/err" | grep -q '"params": 568704,' && ok ||
    bad "info --arch videomae-tiny-pretrain: $(cat "$tmp/err")"
$bin pretrain --arch videomae-tiny-pretrain --videos "$tmp/videos.txt" --batch 4 --threads 2 --epochs 1 \
    -o "$tmp/tiny" >/dev/null 2>"$tmp/err" && grep -q '"VideoMAEForPreTraining"' "$tmp/tiny/checkpoint/config.json" && ok ||
    bad "pretrain --arch videomae-tiny-pretrain: $(tail -3 "$tmp/err")"
pre -o "$tmp/c" --epochs 1 --mask-ratio 1 >/dev/null 2>"$tmp/err" && bad "mask ratio 1 accepted" || ok
# resuming with another mask ratio is another run: refused, naming the setting
pre -o "$tmp/b" --epochs 2 --resume --mask-ratio 0.75 >/dev/null 2>"$tmp/err" && bad "resume took another --mask-ratio" ||
    { grep -q -- "--mask-ratio 0.5" "$tmp/err" && ok || bad "resume with another mask ratio: $(cat "$tmp/err")"; }
$bin pretrain --model tests/fixtures/videomae_mean --videos "$tmp/videos.txt" -o "$tmp/d" >/dev/null 2>"$tmp/err" &&
    bad "pretrain took a classifier" || ok
# fine-tuning the pretrained checkpoint: the decoder dropped with a warning, the head new
$bin train --model "$tmp/a/checkpoint" --train "$tmp/data/train.csv" --val "$tmp/data/val.csv" --batch 4 --threads 2 --epochs 1 -o "$tmp/ft" >/dev/null 2>"$tmp/err" &&
    grep -q "decoder.*dropped" "$tmp/err" && grep -q '"VideoMAEForVideoClassification"' "$tmp/ft/checkpoint/config.json" && ok ||
    bad "fine-tuning the pretrained model: $(tail -3 "$tmp/err")"
grep -q "unexpected tensor" "$tmp/err" && bad "fine-tuning warned about each decoder tensor" || ok
# curves.png: pretraining has no accuracy panel, so its picture is the classifier's without one:
# as wide, shorter (tests/test_plot.c checks what is drawn)
png_wh() { od -An -tu1 -j16 -N8 "$1" | awk '{ print $3 * 256 + $4, $7 * 256 + $8 }'; }
read -r pw ph <<<"$(png_wh "$tmp/a/curves.png")"; read -r fw fh <<<"$(png_wh "$tmp/ft/curves.png")"
[ "$pw" = "$fw" ] && [ "$ph" -lt "$fh" ] && ok || bad "curves.png: pretraining ${pw}x$ph, fine-tuning ${fw}x$fh"
v1=$(head -1 "$tmp/videos.txt")
# features: the pretrained encoder over every token
$bin features --model "$tmp/a/checkpoint" "$v1" -o "$tmp/f.npy" --threads 2 >/dev/null 2>"$tmp/err" && [ -s "$tmp/f.npy" ] && ok ||
    bad "features on the pretrained encoder: $(cat "$tmp/err")"
$bin reconstruct --model "$tmp/a/checkpoint" "$v1" -o "$tmp/recon.png" --mask-ratio 0.5 --seed 3 >/dev/null 2>"$tmp/err" &&
    [ "$(head -c 8 "$tmp/recon.png" | od -An -tx1 | tr -d ' \n')" = "89504e470d0a1a0a" ] && ok || bad "reconstruct: $(cat "$tmp/err")"
$bin reconstruct --model "$tmp/ft/checkpoint" "$v1" -o "$tmp/r2.png" >/dev/null 2>&1 && bad "reconstruct took a classifier" || ok
# --scale N draws every pixel N x N: 4 frames of 16 px at scale 3 with 2 px gaps are 198 px wide
$bin reconstruct --model "$tmp/a/checkpoint" "$v1" -o "$tmp/r3.png" --mask-ratio 0.5 --scale 3 >/dev/null 2>&1 &&
    [ "$(od -An -tu1 -j16 -N4 "$tmp/r3.png" | tr -s ' ' | sed 's/^ //')" = "0 0 0 198" ] && ok || bad "reconstruct --scale 3: not 198 px wide"
[ -e "$tmp/r2.png" ] && bad "reconstruct left a file" || ok
# its rows are labelled: a white band above the first row of frames holds the word "input" at the
# left (dark pixels there, none further right), and the picture is taller than the 3 rows of frames
if command -v ffmpeg >/dev/null; then
    ffmpeg -v error -i "$tmp/r3.png" -f rawvideo -pix_fmt gray - 2>/dev/null | od -An -tu1 -v -w198 |
        awk 'NR <= 14 { for (i = 1; i <= NF; i++) if ($i < 128) { if (i <= 40) left++; else right++ } }
             END { exit !(NR > 3 * 48 + 4 + 3 * 9 && left > 10 && right == 0) }' && ok ||
        bad "reconstruct: no labelled rows (the top band of $tmp/r3.png)"
fi
$bin info --model "$tmp/a/checkpoint" >"$tmp/info" 2>&1 && grep -q "over the visible tokens" "$tmp/info" && ok || bad "info: $(cat "$tmp/info")"
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
