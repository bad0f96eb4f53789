#!/usr/bin/env bash
# train_run.sh RESULTS.csv NAME SEED EPOCHS RUNDIR LOG -- TUBELET train ARGS...: one training run of
# tools/motion_benchmark.sh or tools/pretrain_benchmark.sh (train ARGS write RUNDIR), and its row
# of RESULTS.csv (name,seed,epochs,final_val_acc,best_val_acc,final_train_loss,seconds), appended
# only after train has exited 0: so RESULTS.csv holds finished runs only.
#   - a run already in RESULTS.csv is skipped;
#   - a run an earlier call left unfinished (interrupted, killed, failed after a checkpoint:
#     RUNDIR/checkpoint exists) continues exactly with --resume; without a checkpoint it starts again;
#   - a run that fails or is interrupted gets no row, and this exits non-zero.
# seconds: the run's wall time over all the calls that trained it (RUNDIR/seconds).
set -u
[ $# -ge 8 ] && [ "$7" = -- ] || { echo "usage: $0 RESULTS.csv NAME SEED EPOCHS RUNDIR LOG -- CMD..." >&2; exit 2; }
results=$1 name=$2 seed=$3 epochs=$4 run=$5 log=$6
shift 7
grep -q "^$name,$seed," "$results" && exit 0   # finished in an earlier call
resume=() spent=0
if [ -d "$run/checkpoint" ]; then
    resume=(--resume)
    spent=$(cat "$run/seconds" 2>/dev/null || echo 0)
    echo "$name seed $seed: continuing the unfinished run in $run (--resume)" >&2
fi
t0=$(date +%s)
# everything to the log; each epoch's line (loss, val accuracy) to the terminal too, so that a
# run's progress shows where it was started (issue 39: it showed only in the log)
"$@" "${resume[@]}" 2> >(tee -a "$log" | grep --line-buffered '^epoch [0-9]' |
                          sed -u "s/^/$name seed $seed: /" >&2)
rc=$?
mkdir -p "$run" && echo $((spent + $(date +%s) - t0)) >"$run/seconds"
if [ $rc -ne 0 ]; then
    echo "$name seed $seed: train exited with status $rc (see $log); not recorded: run the same" \
         "command again to continue it" >&2
    exit 1
fi
awk -F, -v m="$name" -v s="$seed" -v e="$epochs" -v t="$(cat "$run/seconds")" \
    'NR > 1 { if ($4 > best) best = $4; last = $4; loss = $2 }
     END { printf "%s,%s,%s,%s,%s,%s,%s\n", m, s, e, last, best, loss, t }' \
    "$run/metrics.csv" >>"$results"
tail -1 "$results"
