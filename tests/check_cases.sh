#!/usr/bin/env bash
# The C test programs' case filter (tests/check.h; make check-cases, in test-fast, seconds): every
# program lists its cases (--list), a word that matches no case fails with a message and runs
# none, and a word runs the cases whose names contain it and says how many ran, the summary line
# "N passed, M failed" last. Prints "N passed, M failed". Usage: tests/check_cases.sh [BUILD]
set -u
build=${1:-build}
cd "$(dirname "$0")/.." || exit 1
pass=0 fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }
for t in "$build"/tests/test_*; do
    [ -x "$t" ] || continue
    n=$(basename "$t")
    list=$("$t" --list 2>&1)
    cases=$(echo "$list" | grep -E '^[0-9]+ cases$' | grep -oE '^[0-9]+')
    [ "${cases:-0}" -gt 0 ] && ok || bad "$n --list: no cases"
    [ "$(echo "$list" | grep -cE '^[^ ]+\(.*\)$')" -eq "${cases:-0}" ] && ok ||
        bad "$n --list: not $cases names of the form name(...)"
    out=$("$t" no_such_case_xyz 2>&1); rc=$?
    [ $rc -ne 0 ] && echo "$out" | grep -q "^ran 0 of $cases cases" && echo "$out" | grep -q '^no case matches' &&
        echo "$out" | tail -n 1 | grep -qE '^[0-9]+ passed, 0 failed$' && ok ||
        bad "$n no_such_case_xyz: exit $rc, $(echo "$out" | tail -n 3 | tr '\n' '|')"
done
# a filter runs its cases only: test_plot's font (1 of 2), test_models's vivit_m4_one_time_step
out=$("$build/tests/test_plot" font 2>&1); rc=$?
[ $rc -eq 0 ] && echo "$out" | grep -qx 'case font()' && ! echo "$out" | grep -q '^case curves' &&
    echo "$out" | grep -qx "ran 1 of 2 cases (the names containing 'font')" &&
    echo "$out" | tail -n 1 | grep -qE '^[1-9][0-9]* passed, 0 failed$' && ok ||
    bad "test_plot font: exit $rc, $(echo "$out" | tail -n 3 | tr '\n' '|')"
out=$("$build/tests/test_models" one_time_step no_such_case_xyz 2>&1); rc=$?
[ $rc -eq 0 ] && [ "$(echo "$out" | grep -c '^case ')" -eq 1 ] &&
    echo "$out" | grep -qE "^ran 1 of [0-9]+ cases \(the names containing 'one_time_step' or 'no_such_case_xyz'\)$" &&
    echo "$out" | tail -n 1 | grep -qE '^[1-9][0-9]* passed, 0 failed$' && ok ||
    bad "test_models one_time_step no_such_case_xyz: exit $rc, $(echo "$out" | tail -n 3 | tr '\n' '|')"
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
