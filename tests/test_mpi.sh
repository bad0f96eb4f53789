#!/usr/bin/env bash
# Data-parallel training over Open MPI (docs/distributed.md): 2 ranks x 1 thread train the same
# run as 1 rank (metrics.csv and every parameter within 1e-5 relative: the only differences are
# the order of float sums, measured ~1e-6 after 15 steps), with a batch the ranks do not divide;
# a run resumes on another number of ranks; a rank killed with SIGKILL stops the job within
# seconds, named, with the last checkpoint intact and resumable.
# Usage: tests/test_mpi.sh build-mpi/tubelet PYTHON   (PYTHON: an interpreter with numpy)
set -u
bin=${1:-build-mpi/tubelet}
py=${2:-python3}
bin=$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$tmp"' EXIT
pass=0 fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }
mpi() { timeout 300 mpirun --oversubscribe --allow-run-as-root --bind-to none -np "$@"; }

$bin synth -o "$tmp/data" --per-class 3 --frames 4 --size 16 --seed 3 >/dev/null 2>&1 || { bad synth; exit 1; }
mkdir -p "$tmp/model"
cat >"$tmp/model/config.json" <<'JSON'
{"model_type": "videomae", "image_size": 16, "patch_size": 8, "num_frames": 4, "tubelet_size": 2,
 "hidden_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 32}
JSON
T=("$bin" train --model "$tmp/model" --train "$tmp/data/train.csv" --val "$tmp/data/val.csv" --batch 5 --threads 1)

# same metrics (numerically) and parameters
same_run() { # DIR_A DIR_B WHAT [TOLERANCE [PARAMETER TOLERANCE]]
    local tol=${4:-1e-5} ptol=${5:-${4:-1e-5}}
    paste -d, "$1/metrics.csv" "$2/metrics.csv" | awk -F, -v what="$3" -v tol="$tol" 'NR > 1 {
        for (i = 2; i <= 4; i++) { d = $i - $(i + 4); if (d < 0) d = -d; if (d > tol) { print what ": metrics differ: " $0; exit 1 } } }
        END { if (NR < 2) { print what ": no metrics"; exit 1 } }' && ok || bad "$3 metrics"
    "$py" tools/compare_safetensors.py "$1/checkpoint/model.safetensors" "$2/checkpoint/model.safetensors" "$ptol" >"$tmp/cmp" &&
        ok || bad "$3 parameters: $(cat "$tmp/cmp")"
}

"${T[@]}" --epochs 3 -o "$tmp/one" >/dev/null 2>"$tmp/err" || bad "1 rank: $(tail -2 "$tmp/err")"
mpi 2 "${T[@]}" --epochs 3 -o "$tmp/two" >/dev/null 2>"$tmp/err" || bad "2 ranks: $(tail -3 "$tmp/err")"
same_run "$tmp/one" "$tmp/two" "2 ranks vs 1"
[ "$(grep -c '^epoch 3:' "$tmp/err")" = 1 ] && ok || bad "2 ranks: the epoch report is not printed once"

# the bf16 all-reduce: the same run within bf16's rounding of the gradients (measured ~5e-6 on
# the metrics here; the parameters up to 7 % relative on the small MLP bias, since AdamW divides
# each gradient by its own running scale, so rounding moves small updates by a share of their
# size), and not the f32 one (the bf16 path did run)
mpi 2 "${T[@]}" --epochs 3 --allreduce-bf16 -o "$tmp/bf16" >/dev/null 2>"$tmp/err" || bad "bf16 all-reduce: $(tail -3 "$tmp/err")"
same_run "$tmp/two" "$tmp/bf16" "bf16 all-reduce vs f32" 1e-3 0.25
cmp -s "$tmp/two/checkpoint/model.safetensors" "$tmp/bf16/checkpoint/model.safetensors" &&
    bad "bf16 all-reduce: parameters identical to the f32 all-reduce's" || ok

# resume on another number of ranks, both ways
mpi 2 "${T[@]}" --epochs 3 --stop-after 1 -o "$tmp/r21" >/dev/null 2>&1
"${T[@]}" --epochs 3 --resume -o "$tmp/r21" >/dev/null 2>"$tmp/err" || bad "resume 2 -> 1: $(tail -2 "$tmp/err")"
same_run "$tmp/one" "$tmp/r21" "2 ranks then 1"
"${T[@]}" --epochs 3 --stop-after 1 -o "$tmp/r12" >/dev/null 2>&1
mpi 2 "${T[@]}" --epochs 3 --resume -o "$tmp/r12" >/dev/null 2>"$tmp/err" || bad "resume 1 -> 2: $(tail -2 "$tmp/err")"
same_run "$tmp/one" "$tmp/r12" "1 rank then 2"

# with dropout and drop path every rank draws its own masks (not rank 0's again): the run
# trains, and it is not the 1-rank run (whose masks cover other rows)
echo '{"drop_path_rate": 0.2, "hidden_dropout_prob": 0.2}' >"$tmp/drop.json"
"${T[@]}" --epochs 1 --config "$tmp/drop.json" -o "$tmp/d1" >/dev/null 2>&1
mpi 2 "${T[@]}" --epochs 1 --config "$tmp/drop.json" -o "$tmp/d2" >/dev/null 2>"$tmp/err" || bad "2 ranks with dropout: $(tail -2 "$tmp/err")"
[ -s "$tmp/d2/metrics.csv" ] && ! cmp -s "$tmp/d1/metrics.csv" "$tmp/d2/metrics.csv" && ok || bad "2 ranks with dropout: same masks as 1 rank?"

# a batch smaller than the ranks is refused by every rank, cleanly
mpi 2 "${T[@]}" --epochs 1 --batch 1 -o "$tmp/small" >/dev/null 2>"$tmp/err"
[ $? -ne 0 ] && grep -q "smaller than the 2 ranks" "$tmp/err" && ok || bad "batch < ranks: $(tail -2 "$tmp/err")"

# kill -9 one rank: the job stops within seconds and names it; the checkpoint resumes
mpi 2 "${T[@]}" --epochs 100000 -o "$tmp/k" >/dev/null 2>"$tmp/kerr" &
job=$!
for _ in $(seq 1 600); do [ -e "$tmp/k/checkpoint/trainer_state.json" ] && break; sleep 0.1; done
victim=$(pgrep -f -- "-o $tmp/k" | while read -r p; do [ "$(ps -o comm= -p "$p")" = tubelet ] && echo "$p"; done | tail -n 1)
start=$(date +%s)
kill -9 "$victim"
wait $job
rc=$?
took=$(($(date +%s) - start))
[ $rc -ne 0 ] && [ $took -le 20 ] && ok || bad "killed rank: exit $rc after ${took}s"
grep -qi "rank" "$tmp/kerr" && ok || bad "killed rank: not named: $(tail -5 "$tmp/kerr")"
pgrep -f -- "-o $tmp/k" >/dev/null && bad "killed rank: processes left" || ok
timeout 60 "${T[@]}" --epochs 100000 --stop-after 1 --resume -o "$tmp/k" >/dev/null 2>"$tmp/err" ||
    grep -q "stopping after epoch\|already" "$tmp/err" && ok || bad "killed rank: checkpoint not resumable: $(tail -2 "$tmp/err")"

# sharded classify: 2 and 3 ranks print what 1 rank prints, in the list's order, a bad video
# included (reported in place; the exit status 1 as for one process)
(ls models/motion-vivit/examples/*.mp4 | head -n 5; echo "$tmp/none.mp4"; ls models/motion-vivit/examples/*.mp4 | tail -n 2) >"$tmp/list.txt"
"$bin" classify --model models/motion-vivit --list "$tmp/list.txt" --json >"$tmp/c1.json" 2>/dev/null
rc1=$?
for n in 2 3; do
    mpi $n "$bin" classify --model models/motion-vivit --list "$tmp/list.txt" --json >"$tmp/c$n.json" 2>/dev/null
    rc=$?
    [ $rc -eq 1 ] && [ $rc1 -eq 1 ] && cmp -s "$tmp/c1.json" "$tmp/c$n.json" && ok || bad "classify on $n ranks: exit $rc/$rc1, $(diff "$tmp/c1.json" "$tmp/c$n.json" | head -3)"
done
grep -q '"error": ".*none.mp4' "$tmp/c2.json" && ok || bad "sharded classify: the bad video is not reported"

# sharded timeline: 2 and 3 ranks print what 1 rank prints, --json and --csv, the bad video
# included (in place, exit 1); one video on 2 ranks prints what it prints alone
TL=(timeline --model models/motion-vivit --window 0.5 --stride 0.25 --top 2 --threads 1)
for form in json csv; do
    "$bin" "${TL[@]}" --list "$tmp/list.txt" --$form >"$tmp/t1.$form" 2>/dev/null
    rc1=$?
    for n in 2 3; do
        mpi $n "$bin" "${TL[@]}" --list "$tmp/list.txt" --$form >"$tmp/t$n.$form" 2>/dev/null
        rc=$?
        [ $rc -eq 1 ] && [ $rc1 -eq 1 ] && [ "$(grep -c '"start"' "$tmp/t1.$form")$(wc -l <"$tmp/t1.$form")" != 00 ] &&
            cmp -s "$tmp/t1.$form" "$tmp/t$n.$form" && ok ||
            bad "timeline --$form on $n ranks: exit $rc/$rc1, $(diff "$tmp/t1.$form" "$tmp/t$n.$form" | head -3)"
    done
done
grep -q '"video": ".*none.mp4", "error": ".*none.mp4' "$tmp/t2.json" && ok || bad "sharded timeline: the bad video is not reported"
one=$(head -n 1 "$tmp/list.txt")
"$bin" "${TL[@]}" "$one" --json >"$tmp/t1one.json" 2>/dev/null &&
    mpi 2 "$bin" "${TL[@]}" "$one" --json >"$tmp/t2one.json" 2>/dev/null &&
    [ -s "$tmp/t1one.json" ] && cmp -s "$tmp/t1one.json" "$tmp/t2one.json" && ok || bad "timeline of one video on 2 ranks"

# sharded features: 2 and 3 ranks (3 does not divide 7 videos) write the bytes 1 rank writes,
# pooled and as a feature map with levels; a bad video fails the whole run on every rank count,
# writing nothing
ls models/motion-vivit/examples/*.mp4 | head -n 7 >"$tmp/flist.txt"
F=(features --model models/motion-vivit --list "$tmp/flist.txt" --threads 1)
"$bin" "${F[@]}" -o "$tmp/f1.npy" 2>/dev/null && "$bin" "${F[@]}" --levels 2 -o "$tmp/l1.safetensors" 2>/dev/null &&
    ok || bad "features on 1 rank failed"
for n in 2 3; do
    mpi $n "$bin" "${F[@]}" -o "$tmp/f$n.npy" 2>/dev/null &&
        cmp -s "$tmp/f1.npy" "$tmp/f$n.npy" && ok || bad "features on $n ranks differ from 1 rank"
    mpi $n "$bin" "${F[@]}" --levels 2 -o "$tmp/l$n.safetensors" 2>/dev/null &&
        cmp -s "$tmp/l1.safetensors" "$tmp/l$n.safetensors" && ok || bad "features --levels on $n ranks differ"
done
echo "$tmp/none.mp4" >>"$tmp/flist.txt"
mpi 2 "$bin" "${F[@]}" -o "$tmp/fbad.npy" 2>"$tmp/ferr"
rc=$?
[ $rc -ne 0 ] && [ ! -e "$tmp/fbad.npy" ] && grep -q "none.mp4" "$tmp/ferr" && ok ||
    bad "features with a bad video on 2 ranks: exit $rc, $(ls "$tmp"/fbad* 2>/dev/null), $(tail -2 "$tmp/ferr")"

# sharded clip features (features --out-dir, docs/temporal-localisation.md): each rank writes its
# share of the .npy files, the bytes 1 rank writes; the JSON once; the counts of the whole job
mkdir -p "$tmp/tadv"
cp tests/fixtures/tad/rgb.mkv "$tmp/tadv/a.mkv"
cp tests/fixtures/video/h264.mp4 "$tmp/tadv/b.mp4"
cp tests/fixtures/tad/rgb.mkv "$tmp/tadv/c.mkv"
ls "$tmp"/tadv/* >"$tmp/tadlist.txt"
TAD=(features --model tests/fixtures/tad/vit_tiny_k710_ft.pth --protocol videomae2-tad --threads 1 --list "$tmp/tadlist.txt")
"$bin" "${TAD[@]}" --out-dir "$tmp/tad1" 2>/dev/null || bad "clip features on 1 rank failed"
mpi 2 "$bin" "${TAD[@]}" --out-dir "$tmp/tad2" >"$tmp/tadout" 2>"$tmp/taderr" || bad "clip features on 2 ranks: $(tail -2 "$tmp/taderr")"
for f in a b c; do cmp -s "$tmp/tad1/$f.npy" "$tmp/tad2/$f.npy" && ok || bad "clip features on 2 ranks: $f.npy differs"; done
grep -q "3 written, 0 skipped (their .npy exists), 0 failed of 3 videos" "$tmp/taderr" && ok || bad "2 ranks: the job's counts"
[ "$(grep -c '^actionformer:' "$tmp/tadout")" = 1 ] && ok || bad "2 ranks: the config fields are not printed once"
mpi 2 "$bin" "${TAD[@]}" --out-dir "$tmp/tad2" >/dev/null 2>"$tmp/taderr" && grep -q "0 written, 3 skipped" "$tmp/taderr" && ok ||
    bad "2 ranks: a second run does not skip the 3 files"

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
