#!/usr/bin/env bash
# The CLI's video commands on device cuda, in the emulator (make CUDA=emu; docs/cuda.md): classify
# of each pipeline model on each video, a timeline over two videos (decoded one ahead while the
# model runs) and features with --pool none (the feature maps' transpose on the device), each
# against the same command on the CPU build: the same labels in the same order, scores within
# 1e-5. The CPU's own outputs are checked against transformers' by test_video_cli.sh, so this
# carries that parity to device cuda.
# usage: tests/test_cuda_emu_cli.sh build-cudaemu/tubelet build/tubelet
set -u
emu=${1:-build-cudaemu/tubelet} cpu=${2:-build/tubelet}
cd "$(dirname "$0")/.."
P=tests/fixtures/pipeline V=tests/fixtures/video
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
pass=0 fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }
finish() { echo "$pass passed, $fail failed"; [ $fail -eq 0 ]; exit $?; }
[ -x "$emu" ] && [ -x "$cpu" ] || { bad "no $emu or $cpu"; finish; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# Every number of the two outputs within tol (absolute), every other token equal.
same() {
    awk -v tol="$3" '
        function toks(s, a,   n) { gsub(/[][{}:,"]/, " ", s); return split(s, a, /[ \t\n]+/) }
        NR == FNR { A = A $0 "\n"; next } { B = B $0 "\n" }
        END {
            na = toks(A, a); nb = toks(B, b)
            if (na != nb) { print "token counts " na " and " nb; exit 1 }
            for (i = 1; i <= na; i++) {
                num = a[i] ~ /^-?[0-9.]+(e-?[0-9]+)?$/ && b[i] ~ /^-?[0-9.]+(e-?[0-9]+)?$/
                if (num ? (a[i] - b[i] > tol || b[i] - a[i] > tol) : a[i] != b[i]) {
                    print "token " i ": " a[i] " vs " b[i]; exit 1
                }
            }
        }' "$1" "$2"
}

for model in videomae timesformer vivit; do
    for video in "$V/h264.mp4" "$V/rotated.mp4" "$P/portrait.webm"; do
        name="$model $(basename "$video")"
        "$cpu" classify --model "$P/$model" --json "$video" >"$tmp/cpu.json" 2>"$tmp/err" ||
            { bad "$name: cpu: $(cat "$tmp/err")"; continue; }
        if "$emu" classify --model "$P/$model" --json --device cuda "$video" >"$tmp/emu.json" \
            2>"$tmp/err" && why=$(same "$tmp/cpu.json" "$tmp/emu.json" 1e-5); then ok
        else bad "classify $name on cuda: ${why:-$(cat "$tmp/err")}"; fi
    done
done

args=(--model "$P/videomae" "$V/h264.mp4" "$V/rotated.mp4" --window 1 --stride 0.5 --json)
if "$cpu" timeline "${args[@]}" >"$tmp/cpu.json" 2>/dev/null &&
    "$emu" timeline "${args[@]}" --device cuda >"$tmp/emu.json" 2>"$tmp/err" &&
    why=$(same "$tmp/cpu.json" "$tmp/emu.json" 1e-5); then ok
else bad "timeline on cuda: ${why:-$(cat "$tmp/err")}"; fi

# features: the .npy headers equal, the values (od's floats) within 1e-5
for pool in mean none; do
    if "$cpu" features --model "$P/videomae" "$V/h264.mp4" --pool $pool -o "$tmp/cpu.npy" \
            2>/dev/null &&
        "$emu" features --model "$P/videomae" "$V/h264.mp4" --pool $pool --device cuda \
            -o "$tmp/emu.npy" 2>"$tmp/err" &&
        cmp -s <(head -c 128 "$tmp/cpu.npy") <(head -c 128 "$tmp/emu.npy") &&
        why=$(same <(od -An -v -f -j 128 "$tmp/cpu.npy") <(od -An -v -f -j 128 "$tmp/emu.npy") 1e-5)
    then ok
    else bad "features --pool $pool on cuda: ${why:-$(cat "$tmp/err")}"; fi
done

# clip features (features --out-dir, one row per clip: tubelet_forward_pooled's copy from the
# device), VideoMAE's fc_norm of the mean and TimeSformer's cls token, the generic form
for m in videomae timesformer; do
    C=(features --model "$P/$m" --clip-frames 8 --clip-stride 16 --resize stretch "$V/h264.mp4")
    if "$cpu" "${C[@]}" --out-dir "$tmp/clip_cpu_$m" >/dev/null 2>&1 &&
        "$emu" "${C[@]}" --device cuda --out-dir "$tmp/clip_emu_$m" >/dev/null 2>"$tmp/err" &&
        cmp -s <(head -c 128 "$tmp/clip_cpu_$m/h264.npy") <(head -c 128 "$tmp/clip_emu_$m/h264.npy") &&
        why=$(same <(od -An -v -f -j 128 "$tmp/clip_cpu_$m/h264.npy") \
                   <(od -An -v -f -j 128 "$tmp/clip_emu_$m/h264.npy") 1e-5)
    then ok
    else bad "clip features of $m on cuda: ${why:-$(cat "$tmp/err")}"; fi
done
finish
