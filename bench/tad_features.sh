#!/usr/bin/env bash
# Issue 40's speed benchmark (docs/temporal-localisation.md, Speed), NOT YET RUN: clips per second
# of `tubelet features --protocol videomae2-tad` against the original model code on PyTorch
# (tools/videomae2_tad_ref.py: extract_tad_feature.py's loop and modeling_finetune.py's model),
# the same clips, the same threads, runs interleaved (tubelet, torch, tubelet, torch, ...), for
# ViT-B/16 and ViT-g/14 at 16x224², fp32 and bf16 (tubelet --precision bf16; torch: the model
# under torch.autocast("cpu", dtype=torch.bfloat16)), with each process's peak RSS. Random
# weights in VideoMAE V2's layout (the speed does not depend on the values). Run it alone on the
# machine: a shared CPU makes every number here wrong.
#
# Usage: bench/tad_features.sh TUBELET PYTHON OUTDIR [THREADS]
#   QUICK=1: ViT-B only, 1 repetition, a 40-frame video (checks the script in minutes)
#   ARCHS="name:hidden,depth,heads,patch,mlp_ratio ...": other sizes
#   FRAMES=N: the video's length (clips = (N - 16) / 4 + 1); PRECS="fp32": the precisions run;
#   TORCH_BF16=0: skip PyTorch under autocast (on a CPU without AVX512-BF16 it takes hours)
set -u
tub=$1 py=$2 out=$3 threads=${4:-$(nproc)}
quick=${QUICK:-0}
cd "$(dirname "$0")/.."
mkdir -p "$out"
exec > >(tee -a "$out/log.txt") 2>&1
echo "== $(date -u +%FT%TZ) $(lscpu | sed -n 's/^Model name:[[:space:]]*//p'), $threads threads"
reps=3 frames=136          # 136 frames: 31 clips of 16 every 4
[ "$quick" = 1 ] && reps=1 frames=40
frames=${FRAMES:-$frames} precs=${PRECS:-fp32 bf16} torch_bf16_on=${TORCH_BF16:-1}
ffmpeg -nostdin -loglevel error -y -f lavfi -i "testsrc2=size=320x240:rate=30,trim=end_frame=$frames" \
    -pix_fmt yuv420p -c:v libx264 "$out/v.mp4"
clips=$(( (frames - 16) / 4 + 1 ))
archs="vitb:768,12,12,16,4"
[ "$quick" = 1 ] || archs="$archs vitg:1408,40,16,14,4.3636363636363635"
archs=${ARCHS:-$archs}     # e.g. ARCHS=tiny:64,2,1,14,4: a smoke test of the script itself
# the time of a command and its peak RSS (GNU time), into $out/runs.tsv
timed() { # NAME COMMAND...
    local name=$1; shift
    /usr/bin/time -f "%e %M" -o "$out/t" "$@" >/dev/null 2>"$out/err" || { tail -3 "$out/err"; return 1; }
    read -r s kb <"$out/t"
    awk -v n="$name" -v s="$s" -v kb="$kb" -v c="$clips" \
        'BEGIN { printf "%s\t%.2f s\t%.3f clips/s\t%.0f MB\n", n, s, c / s, kb / 1024 }' | tee -a "$out/runs.tsv"
}
torch_bf16='import runpy, sys, torch
sys.argv = sys.argv[1:]
with torch.autocast("cpu", dtype=torch.bfloat16):
    runpy.run_path("tools/videomae2_tad_ref.py", run_name="__main__")'
for a in $archs; do
    name=${a%%:*} arch=${a#*:}
    [ -f "$out/$name.pth" ] || "$py" tools/videomae2_tad_ref.py random --arch "$arch" "$out/$name.pth"
    for r in $(seq "$reps"); do
        for prec in $precs; do
            rm -rf "$out/tb" "$out/pt"
            timed "$name $prec tubelet" "$tub" features --model "$out/$name.pth" --protocol videomae2-tad \
                --threads "$threads" --precision "$prec" --out-dir "$out/tb" "$out/v.mp4"
            if [ $prec = fp32 ]; then
                timed "$name $prec torch" "$py" tools/videomae2_tad_ref.py extract --ckpt "$out/$name.pth" \
                    --arch "$arch" --threads "$threads" --out "$out/pt" "$out/v.mp4"
            elif [ "$torch_bf16_on" = 0 ]; then
                echo "$name $prec torch: skipped (TORCH_BF16=0)"; continue
            else
                timed "$name $prec torch" "$py" -c "$torch_bf16" tools/videomae2_tad_ref.py extract \
                    --ckpt "$out/$name.pth" --arch "$arch" --threads "$threads" --out "$out/pt" "$out/v.mp4"
            fi
            "$py" -c "import numpy as np, sys; a, b = np.load(sys.argv[1]), np.load(sys.argv[2]);
print('   same clips:', a.shape == b.shape, 'largest difference %.3g (max |ref| %.3g)' % (abs(a - b).max(), abs(b).max()))" \
                "$out/tb/v.npy" "$out/pt/v.npy"
        done
    done
done
echo "== whole-process times (model load and decode included); $clips clips per run"
