#!/usr/bin/env bash
# tubelet features --out-dir (docs/temporal-localisation.md): VideoMAE V2's TAD protocol against
# the features of the original code (tools/videomae2_tad_ref.py, committed in tests/fixtures/tad
# with a tiny random ViT in VideoMAE V2's checkpoint layouts), and the out-dir rules. Shell, od
# and awk only (no Python). The videos were made with the ffmpeg CLI:
#   rgb.mkv    -f lavfi -i "testsrc2=size=96x72:rate=25,trim=end_frame=42" -c:v ffv1 -pix_fmt bgr0
#   short.mkv  the same with end_frame=10 (shorter than one clip)
#   wide.mp4   -f lavfi -i "testsrc2=size=256x180:rate=30,trim=end_frame=20" -pix_fmt yuv420p
#              -c:v libx264 -crf 30 -preset veryfast -threads 1
# usage: tests/test_tad_cli.sh [build/tubelet]      prints "N passed, M failed" last
set -u
bin=${1:-build/tubelet}
cd "$(dirname "$0")/.."
F=tests/fixtures/tad
V=tests/fixtures/video
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
pass=0 fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }
finish() { echo "$pass passed, $fail failed"; [ $fail -eq 0 ]; exit $?; }
check() { local what=$1; shift; if "$@"; then ok; else bad "$what"; fi; }
[ -x "$bin" ] || { bad "no executable $bin"; finish; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# .npy v1: the header's length at bytes 8-9; the data after it
npy_hlen() { od -An -tu2 -j8 -N2 "$1" | tr -d ' '; }
npy_header() { head -c $((10 + $(npy_hlen "$1"))) "$1" | tr -d '\000'; }
npy_floats() { tail -c +$((10 + $(npy_hlen "$1") + 1)) "$1" | od -An -v -tf4 | tr -s ' ' '\n' | grep -v '^$'; }
# same shape and every value within tol * max(1, max |ref|); prints the largest error
npy_close() { # GOT REF TOL
    [ "$(npy_header "$1" | grep -o "'shape': ([^)]*)")" = "$(npy_header "$2" | grep -o "'shape': ([^)]*)")" ] || {
        echo "shapes differ: $(npy_header "$1") / $(npy_header "$2")"; return 1; }
    paste <(npy_floats "$1") <(npy_floats "$2") | awk -v tol="$3" '
        { d = $1 - $2; if (d < 0) d = -d; if (d > e) e = d; a = $2 < 0 ? -$2 : $2; if (a > m) m = a; n++ }
        END { if (m < 1) m = 1; printf "    %d values, largest error %.3g (max |ref| %.4g)\n", n, e, m;
              exit !(n > 0 && e <= tol * m) }'
}
run() { # RC NAME ARGS...: runs the binary, its stderr in $tmp/err
    local want=$1 name=$2; shift 2
    "$bin" "$@" >"$tmp/out" 2>"$tmp/err"; local rc=$?
    if [ $rc -ne "$want" ]; then bad "$name: exit $rc, not $want"; tail -5 "$tmp/err"; else ok; fi
}

tad() { "$bin" features --threads 2 --protocol videomae2-tad "$@"; }

# ---- the protocol at parity with the original code, in every layout VideoMAE V2 publishes ----
# K710 fine-tuned ({'module': ...}, float32), distilled ({'model': ...}, float16), bare with a
# detector's backbone. prefix: the same (float16-exact) weights
d=$tmp/vit_tiny_k710_ft
run 0 "videomae2-tad, {'module': ...}" features --threads 2 --protocol videomae2-tad \
    --model $F/vit_tiny_k710_ft.pth --out-dir "$d" $F/rgb.mkv $V/h264.mp4 $F/wide.mp4
check "wide.mp4 (256x180: 224 wide is a downscale, 224 high an upscale; 20 frames: 2 clips)" \
    npy_close "$d/wide.npy" $F/wide.npy 1e-5
check "rgb.mkv (lossless RGB, 42 frames: 7 clips) as the original script's" npy_close "$d/rgb.npy" $F/rgb.npy 1e-5
check "h264.mp4 (4:2:0, B-frames, 60 frames: 12 clips) as the original script's" npy_close "$d/h264.npy" $F/h264.npy 1e-5
for ck in vit_tiny_k710_dl_fp16 vit_tiny_bare_backbone; do
    run 0 "videomae2-tad $ck" features --threads 2 --protocol videomae2-tad --model $F/$ck.pth \
        --out-dir "$tmp/$ck" $F/rgb.mkv
    check "$ck: rgb.npy as the original script's" npy_close "$tmp/$ck/rgb.npy" $F/rgb.npy 1e-5
done
check "float32 (clips, hidden)" grep -qF "'descr': '<f4', 'fortran_order': False, 'shape': (7, 64)" <(npy_header "$d/rgb.npy")
check "the ActionFormer fields" grep -qF "actionformer: feat_stride: 4, num_frames: 16, input_dim: 64, default_fps: 25" "$tmp/out"
check "OpenTAD's offset" grep -qF "opentad: feature_stride=4, sample_stride=1, offset_frames=8, in_channels=64" "$tmp/out"
check "the JSON beside the features" grep -qF '"protocol": "videomae2-tad"' "$d/tubelet_features.json"
check "the JSON: the stretch" grep -qF '"resize": "stretch"' "$d/tubelet_features.json"
check "no temporary file left" [ -z "$(ls -A "$d" | grep -v -e '\.npy$' -e '^tubelet_features.json$')" ]
run 0 "pretraining file" features --threads 2 --protocol videomae2-tad --model $F/vit_tiny_pt.pth \
    --out-dir "$tmp/pt" $F/rgb.mkv
check "pretraining file (encoder., decoder dropped): the mean of its normed tokens" \
    npy_close "$tmp/pt/rgb.npy" $F/rgb_pt.npy 1e-5

# ---- the .pth path's config: every LayerNorm's eps 1e-6, fc_norm's too ----
run 0 "convert the K710 layout" convert $F/vit_tiny_k710_ft.pth -o "$tmp/conv"
eps6='[[:space:]]*(1e-06|9.99999997[0-9]*e-07),'  # 1e-6 as a float
check "inferred fc_norm_eps 1e-6" grep -Eq "\"fc_norm_eps\":$eps6" "$tmp/conv/config.json"
check "inferred layer_norm_eps 1e-6" grep -Eq "\"layer_norm_eps\":$eps6" "$tmp/conv/config.json"
run 0 "info --arch videomae2-giant" info --arch videomae2-giant
check "ViT-g/14: 1012611142 parameters (transformers' count)" grep -q "1012611142" "$tmp/out"
check "ViT-g/14: 40 layers, 1408, 16 heads, MLP 6144" grep -q "40 layers, hidden 1408, 16 heads, MLP 6144" "$tmp/out"

# ---- out-dir rules ----
d=$tmp/vit_tiny_k710_ft
cp "$d/rgb.npy" "$tmp/rgb.before"
run 0 "a second run" features --threads 2 --protocol videomae2-tad --model $F/vit_tiny_k710_ft.pth --out-dir "$d" $F/rgb.mkv $V/h264.mp4
check "skips both, and says so" grep -q "0 written, 2 skipped" "$tmp/err"
check "an existing file is kept" cmp -s "$d/rgb.npy" "$tmp/rgb.before"
run 1 "another protocol into the same folder" features --threads 2 --protocol videomae2-tad --stride 8 --model $F/vit_tiny_k710_ft.pth --out-dir "$d" $F/rgb.mkv
check "names the JSON of the other features" grep -q "tubelet_features.json was written for other features" "$tmp/err"
mkdir -p "$tmp/other"
cp $F/rgb.mkv "$tmp/other/rgb.mp4"
run 2 "two videos of one stem" features --threads 2 --protocol videomae2-tad --model $F/vit_tiny_k710_ft.pth --out-dir "$tmp/stem" $F/rgb.mkv "$tmp/other/rgb.mp4"
check "the stem error names both" grep -qF "$F/rgb.mkv and $tmp/other/rgb.mp4 would both write rgb.npy" "$tmp/err"
check "the stem error writes nothing" [ ! -e "$tmp/stem/rgb.npy" ]
printf '%s\n' $F/short.mkv $F/rgb.mkv >"$tmp/list.txt"
run 1 "a video shorter than a clip (--list)" features --threads 2 --protocol videomae2-tad --model $F/vit_tiny_k710_ft.pth --out-dir "$tmp/short" --list "$tmp/list.txt"
check "the short video: an error that says so" grep -qF "$F/short.mkv is shorter than one clip (16 frames); no file written" "$tmp/err"
check "the short video: no file" [ ! -e "$tmp/short/short.npy" ]
check "the other video of the list is written" npy_close "$tmp/short/rgb.npy" $F/rgb.npy 1e-5
check "the count of written and failed" grep -q "1 written, 0 skipped (their .npy exists), 1 failed of 2 videos" "$tmp/err"
check "progress over the clips" grep -q "clip 7/7" "$tmp/err"

# ---- the generic form: the preset's values by hand give the same file; FineAction's stride ----
run 0 "generic form" features --threads 2 --model $F/vit_tiny_k710_ft.pth --clip-frames 16 --clip-stride 4 \
    --frame-interval 1 --resize stretch --normalize none --out-dir "$tmp/generic" $F/rgb.mkv
check "generic form = videomae2-tad" cmp -s "$tmp/generic/rgb.npy" "$tmp/vit_tiny_k710_ft/rgb.npy"
check "generic form: protocol custom" grep -qF '"protocol": "custom"' "$tmp/generic/tubelet_features.json"
run 0 "--stride 16" features --threads 2 --protocol videomae2-tad --stride 16 --model $F/vit_tiny_k710_ft.pth --out-dir "$tmp/s16" $V/h264.mp4
check "--stride 16: clips 0, 16, 32 (rows 0, 4, 8 of stride 4)" \
    cmp -s <(npy_floats "$tmp/s16/h264.npy") <(npy_floats "$tmp/vit_tiny_k710_ft/h264.npy" | awk 'NR <= 64 || (NR > 256 && NR <= 320) || (NR > 512 && NR <= 576)')
run 0 "short-side, model normalisation (i3d layout)" features --threads 2 --protocol i3d --model $F/vit_tiny_k710_ft.pth --out-dir "$tmp/i3d" $F/rgb.mkv
check "i3d: 7 clips of another preprocessing" grep -qF "'shape': (7, 64)" <(npy_header "$tmp/i3d/rgb.npy")
check "i3d: not the stretched features" bash -c "! cmp -s '$tmp/i3d/rgb.npy' '$tmp/vit_tiny_k710_ft/rgb.npy'"
run 2 "an unknown protocol" features --protocol nope --model $F/vit_tiny_k710_ft.pth --out-dir "$tmp/x" $F/rgb.mkv
check "lists the protocols" grep -q "videomae2-tad, videomae2-tad-fineaction, i3d, tsp" "$tmp/err"
# ---- V-JEPA 2 per clip (issue 40): its own preprocessing, the mean of its encoder's tokens ----
mkdir -p "$tmp/vj"
cp tests/fixtures/vjepa2_hd20/config.json tests/fixtures/vjepa2_hd20/model.safetensors "$tmp/vj/"
echo '{"video_processor_type": "VJEPA2VideoProcessor", "crop_size": 32}' >"$tmp/vj/video_preprocessor_config.json"
run 0 "V-JEPA 2 per clip" features --threads 2 --model "$tmp/vj" --clip-frames 4 --clip-stride 2 --out-dir "$tmp/vjf" $V/h264.mp4
check "V-JEPA 2: (clips, 40) float32" grep -qF "'shape': (29, 40)" <(npy_header "$tmp/vjf/h264.npy")
run 2 "-o with --out-dir" features --protocol videomae2-tad --model $F/vit_tiny_k710_ft.pth --out-dir "$tmp/x" -o "$tmp/x.npy" $F/rgb.mkv
finish
