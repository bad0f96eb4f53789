#!/usr/bin/env bash
# make test's driver: runs each stage (a make target) in turn with MAKE, printing a line as each
# starts and as it ends with its time, and a last line with the totals. Stops at the first failed
# stage, or runs on past it under make -k. Exits non-zero if a stage failed.
#   tests/stages.sh MAKE STAGE...      (the Makefile: make test, TEST_STAGES)
set -u
make_cmd=$1; shift
keep_going=0
case ${MAKEFLAGS:-} in # make -k: single-letter flags come first, without a dash ("k", "ks")
" "* | -* | "") ;;
*) w=${MAKEFLAGS%% *}; [[ $w != *=* && $w == *k* ]] && keep_going=1 ;;
esac
took() { local s=$1; if [ "$s" -ge 60 ]; then printf '%dm %02ds' $((s / 60)) $((s % 60)); else printf '%ds' "$s"; fi; }
n=$# i=0 ran=0 failed=() times=() t0=$SECONDS
for stage in "$@"; do
    i=$((i + 1))
    echo "== make test: stage $i/$n, $stage: started at $(date +%H:%M:%S)"
    s0=$SECONDS
    $make_cmd --no-print-directory "$stage"
    rc=$?
    ran=$((ran + 1)) dt=$((SECONDS - s0))
    times+=("$stage $(took $dt)")
    if [ $rc -eq 0 ]; then
        echo "== make test: stage $i/$n, $stage: passed in $(took $dt)"
    else
        echo "== make test: stage $i/$n, $stage: FAILED (exit $rc) after $(took $dt)"
        failed+=("$stage")
        [ $keep_going = 1 ] || break
    fi
done
summary=$(IFS=,; echo "${times[*]}" | sed 's/,/, /g')
if [ ${#failed[@]} -eq 0 ]; then
    echo "== make test: all $n stages passed in $(took $((SECONDS - t0))) ($summary)"
else
    echo "== make test: ${#failed[@]} of $ran stages run FAILED (${failed[*]}), $((n - ran)) not run," \
        "in $(took $((SECONDS - t0))) ($summary)"
    exit 1
fi
