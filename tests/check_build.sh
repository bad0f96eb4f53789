#!/usr/bin/env bash
# The Makefile's own checks (make check-build, in test-fast; a few seconds, nothing is built):
#  1. header dependencies: with BUILD up to date, make's dry run with a header taken as new
#     (make -n -W HEADER, under each name the .d files give it) compiles exactly what includes it:
#     a header rebuilds the objects whose sources include it, directly or through other headers,
#     as read from the sources here, and no other; tests/check.h relinks the test programs and
#     compiles no object; a public header rebuilds the CLI and not the kernels' objects.
#  2. make test's stage lines (tests/stages.sh): a start and an end line with the time for each
#     stage and a total line; a failed stage says so and the run exits non-zero.
# Prints "N passed, M failed". Usage: tests/check_build.sh [BUILD [VAR=VALUE...]] (the make
# variables of the build checked, such as MPI=1; make's own flags from a calling make are dropped)
set -u
build=${1:-build}
[ $# -gt 0 ] && shift
cd "$(dirname "$0")/.." || exit 1
unset MAKEFLAGS MFLAGS MAKELEVEL
make="make --no-print-directory $* BUILD=$build"
pass=0 fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }
spellings() { # every name of file $1 in the .d files (src/models/../common.h is src/common.h):
    # make -W takes a name, not a file
    find "$build" -name '*.d' -exec cat {} + | tr ' \\' '\n\n' | sed 's/:$//' | grep -F "${1##*/}" |
        sort -u | while read -r f; do [ "$(realpath -m "$f")" = "$(realpath -m "$1")" ] && echo "$f"; done
}
dry() { # the objects and programs that make -n would build if header $1 were new, one a line
    local w=() f
    for f in $(spellings "$1") "$1"; do w+=(-W "$f"); done
    $make -n "${w[@]}" all 2>&1 |
        grep -oE -- "-o $build/[^ ]+" | sed "s|^-o $build/||" | sort
}

[ -z "$($make -n all 2>&1 | grep -E -- ' -c | -o ')" ] ||
    { echo "$build is not up to date: run make first"; echo "0 passed, 1 failed"; exit 1; }
n_obj=$(find "$build/src" -name '*.o' | wc -l)

# The include graph read from the sources, as the compiler finds a quoted include (beside the
# file, then include/, src/, and the -I of the binary's directories): "file included" lines,
# paths from the top.
edges=$(for f in $(find src include -name '*.c' -o -name '*.h'); do
    sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\(.*\)".*/\1/p' "$f" | while read -r x; do
        for d in "$(dirname "$f")" include src src/cli src/serve src/app; do
            [ -f "$d/$x" ] && { echo "$f $(realpath -m --relative-to=. "$d/$x")"; break; }
        done
    done
done)
includers() { # the sources (.c) that include header $1, directly or through other headers
    local set=" $1 " grown=1 f x
    while [ $grown = 1 ]; do
        grown=0
        while read -r f x; do
            [[ $set == *" $x "* && $set != *" $f "* ]] && set+="$f " && grown=1
        done <<<"$edges"
    done
    for f in $set; do [[ $f == *.c ]] && echo "$f"; done
}

# each header rebuilds exactly the objects of this build whose sources include it (directly or
# not), and all but a public header fewer than every object
for h in src/train/plot.h src/common.h src/kernels/attention.h src/models/model.h src/io/npy.h \
         src/serve/serve.h src/cli/cli.h src/app/app.h include/tubelet_video.h; do
    [ -f "$h" ] || continue
    want=$(includers "$h" | sed 's/\.c$/.o/' | while read -r o; do [ -f "$build/$o" ] && echo "$o"; done | sort)
    got=$(dry "$h" | grep '\.o$')
    [ -n "$want" ] && [ "$got" = "$want" ] && ok ||
        bad "make -n -W $h compiles [$(echo $got)], the sources that include it are [$(echo $want)]"
    [ "$(echo "$got" | grep -c .)" -lt "$n_obj" ] && ok || bad "$h rebuilds every object ($n_obj)"
    echo "  $h: $(echo "$got" | grep -c .) of $n_obj objects rebuilt"
done

# tests/check.h: every test program relinked, no object compiled
got=$(dry tests/check.h)
n_tests=$(ls tests/test_*.c | wc -l)
[ "$(echo "$got" | grep -c '^tests/test_')" -eq "$n_tests" ] && ! echo "$got" | grep -q '\.o$' && ok ||
    bad "make -n -W tests/check.h builds [$(echo $got)], want the $n_tests test programs only"

# a public header: the CLI's objects, not the kernels'
got=$(dry include/tubelet.h)
echo "$got" | grep -q '^src/cli/main\.o$' && ! echo "$got" | grep -q '^src/kernels/gemm\.o$' && ok ||
    bad "make -n -W include/tubelet.h builds [$(echo $got | head -c 400)]"
echo "  include/tubelet.h: $(echo "$got" | grep -c '\.o$') of $n_obj objects rebuilt"

# make test's stage lines, on two quick stages; a stage that fails stops the run
out=$($make test TEST_STAGES="check-cli-headers check-kernel-seam" 2>&1)
rc=$?
[ $rc -eq 0 ] &&
    echo "$out" | grep -qE '^== make test: stage 1/2, check-cli-headers: started at [0-9:]{8}$' &&
    echo "$out" | grep -qE '^== make test: stage 2/2, check-kernel-seam: passed in [0-9]+s$' &&
    echo "$out" | grep '^== make test' | tail -n 1 | grep -qE '^== make test: all 2 stages passed in [0-9]+s \(check-cli-headers [0-9]+s, check-kernel-seam [0-9]+s\)$' &&
    ok || { bad "make test's stage lines (exit $rc):"; echo "$out" | tail -n 8; }
out=$($make test TEST_STAGES="check-cli-headers no-such-stage check-kernel-seam" 2>&1)
rc=$?
[ $rc -ne 0 ] && echo "$out" | grep -qE '^== make test: stage 2/3, no-such-stage: FAILED \(exit [0-9]+\) after' &&
    ! echo "$out" | grep -q 'check-kernel-seam: started' &&
    echo "$out" | grep '^== make test' | tail -n 1 | grep -qE '^== make test: 1 of 2 stages run FAILED \(no-such-stage\), 1 not run' &&
    ok || { bad "make test with a failing stage (exit $rc):"; echo "$out" | tail -n 8; }

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
