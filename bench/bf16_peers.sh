#!/usr/bin/env bash
# Issue 18's measurements in one run, for a machine with AVX512-BF16 (and AMX where it has it):
#   1. the peaks (bench/fma_peak.c: fp32 FMA, vdpbf16ps, AMX tdpbf16ps when the CPU has AMX);
#   2. tubelet inference of VideoMAE-B and TimeSformer-B in fp32, bf16 and int8, with --profile;
#      a training step of VideoMAE-B in fp32 and mixed precision (bf16), with --profile;
#   3. the training step against PyTorch, fp32 and mixed precision (torch.autocast bfloat16):
#      bench/train_compare.py --modes plain,bf16;
#   4. inference against OpenVINO fp32 and bf16 (INFERENCE_PRECISION_HINT): bench/precision.py.
# Every process is pinned to two logical CPUs on two different physical cores, 2 threads, one
# process at a time. Results go to OUTDIR (peak.json, tubelet.jsonl, profile.txt, train.md/json,
# precision.md/json, and log.txt with the CPU's description).
#
# Usage: bench/bf16_peers.sh TUBELET FMA_PEAK OUTDIR [PYTHON]
#   QUICK=1: tiny shapes (checks the script on any machine in a minute)
set -u
tub=$1 peak=$2 out=$3 py=${4:-python3}
cd "$(dirname "$0")/.."
mkdir -p "$out"
exec > >(tee -a "$out/log.txt") 2>&1
quick=${QUICK:-0}

# two logical CPUs of one package on different physical cores (not SMT siblings)
pair=$(for c in /sys/devices/system/cpu/cpu[0-9]*; do
           n=${c##*cpu}
           echo "$n $(cat "$c/topology/physical_package_id" 2>/dev/null || echo 0)" \
                "$(cat "$c/topology/core_id" 2>/dev/null || echo "$n")"
       done | sort -n | awk 'NR == 1 {p = $2; k = $3; print $1; next}
                             $2 == p && $3 != k {print $1; exit}' | paste -sd, -)
pin="taskset -c $pair"
echo "== $(date -u +%FT%TZ) pinned to CPUs $pair"
lscpu; grep -m1 '^flags' /proc/cpuinfo
flags=$(grep -m1 '^flags' /proc/cpuinfo)

echo "== 1. peaks"
kern=fp32
case $flags in *avx512_bf16*) kern=$kern,bf16 ;; esac
case $flags in *amx_tile*) kern=$kern,amx ;; esac
$pin "$peak" --threads 2 --reps 5 --kernels "$kern" --json >"$out/peak.json" && cat "$out/peak.json"

echo "== 2. tubelet alone"
shape=() ; [ "$quick" = 1 ] && shape=(--size 32)
for arch in videomae-base timesformer-base; do
    for p in fp32 bf16 int8; do
        echo "-- $arch $p inference" >>"$out/profile.txt"
        $pin "$tub" bench --arch "$arch" "${shape[@]}" --precision $p --threads 2 --repeats 3 \
            --warmup 1 --json --profile >>"$out/tubelet.jsonl" 2>>"$out/profile.txt"
        tail -1 "$out/tubelet.jsonl"
    done
done
for p in fp32 bf16; do
    echo "-- videomae-base $p training step" >>"$out/profile.txt"
    $pin "$tub" bench --arch videomae-base "${shape[@]}" --train --precision $p --threads 2 \
        --repeats 2 --warmup 1 --json --profile >>"$out/tubelet.jsonl" 2>>"$out/profile.txt"
    tail -1 "$out/tubelet.jsonl"
done

common=(--tubelet "$tub" --wait-idle 0 --tries 1 --max-other 100)
echo "== 3. training step against PyTorch"
if [ "$quick" = 1 ]; then models=(--small --models videomae-tiny); else models=(--models videomae-base); fi
$pin "$py" bench/train_compare.py "${models[@]}" --batch 1 --modes plain,bf16 --peers tubelet,torch \
    --repeats 2 --warmup 1 --no-check "${common[@]}" --out "$out/train.md" --json "$out/train.json"

echo "== 4. inference against OpenVINO"
[ "$quick" = 1 ] && { echo "(skipped: QUICK)"; exit 0; }
$pin "$py" bench/precision.py --arch videomae-base --arch timesformer-base --batch 1 \
    --peers tubelet-fp32,tubelet-bf16,ov-fp32,ov-bf16 --no-motion --repeats 3 --warmup 1 \
    "${common[@]}" --out "$out/precision.md" --json "$out/precision.json"
echo "== $(date -u +%FT%TZ) done"
