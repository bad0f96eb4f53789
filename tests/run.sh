#!/usr/bin/env bash
# Runs every test program of a build directory and the CLI tests, then prints one summary line
# "N passed, M failed". Exits non-zero if any program fails or any check fails. A check that a
# build skips (the sanitizer build skips a few) prints a line with "skipped in the sanitizer
# build"; those lines are listed again at the end.
set -u
build=${1:-build}
cd "$(dirname "$0")/.."
total_pass=0 total_fail=0 status=0 skipped=()
run() {
    local name=$1; shift
    local out rc
    out=$("$@" 2>&1); rc=$?
    local s
    while IFS= read -r s; do skipped+=("  $name: $s"); done < <(printf '%s\n' "$out" |
        grep 'skipped in the sanitizer build' | sed 's/^ *//')
    local line
    line=$(printf '%s\n' "$out" | grep -E '^[0-9]+ passed, [0-9]+ failed' | tail -n 1)
    if [ -z "$line" ]; then
        printf '%s\n' "$out" | tail -n 30
        echo "!! $name printed no summary line (exit $rc)"
        total_fail=$((total_fail + 1)); status=1; return
    fi
    local p f
    p=$(echo "$line" | sed -E 's/^([0-9]+) passed.*/\1/')
    f=$(echo "$line" | sed -E 's/^[0-9]+ passed, ([0-9]+) failed.*/\1/')
    total_pass=$((total_pass + p)); total_fail=$((total_fail + f))
    if [ "$rc" -ne 0 ] || [ "$f" -ne 0 ]; then
        printf '%s\n' "$out" | grep -E 'FAIL|error|ERROR|Sanitizer|runtime error' | head -n 40
        echo "!! $name: $line (exit $rc)"
        status=1
    else
        echo "ok $name: $line"
    fi
}
for t in "$build"/tests/test_*; do
    [ -x "$t" ] || continue
    run "$(basename "$t")" "$t"
done
run test_cli.sh tests/test_cli.sh "$build/tubelet"
run test_video_cli.sh tests/test_video_cli.sh "$build/tubelet"
run test_tad_cli.sh tests/test_tad_cli.sh "$build/tubelet"
run test_train.sh tests/test_train.sh "$build/tubelet"
run test_pretrain.sh tests/test_pretrain.sh "$build/tubelet"
run test_attacks.sh tests/test_attacks.sh "$build/tubelet"
run test_video_swin_cli.sh tests/test_video_swin_cli.sh "$build/tubelet"
run test_xclip_cli.sh tests/test_xclip_cli.sh "$build/tubelet"
run test_vjepa2_cli.sh tests/test_vjepa2_cli.sh "$build/tubelet"
run test_serve.sh tests/test_serve.sh "$build/tubelet"
run test_watch.sh tests/test_watch.sh "$build/tubelet"
if [ ${#skipped[@]} -gt 0 ]; then
    echo "skipped in this build ($build):"
    printf '%s\n' "${skipped[@]}"
fi
echo "$total_pass passed, $total_fail failed"
exit $status
