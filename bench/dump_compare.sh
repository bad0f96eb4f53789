#!/usr/bin/env bash
# Bit-identity check across a refactoring: builds bench/dump_outputs.c against the library of
# each build directory, dumps every fixture's outputs (bench/dump_outputs.c) and compares the two
# dumps file by file with cmp. Exits non-zero on any difference or missing file.
#   bench/dump_compare.sh BASELINE_BUILD_DIR [NEW_BUILD_DIR (default build)]
# BASE_SRC=DIR: the baseline's source tree (its dump_outputs.c and headers), when the public API
# changed between the two; default: this tree for both.
set -u
cd "$(dirname "$0")/.."
base=$1 new=${2:-build}
libs="-ldnnl -lcjson $(pkg-config --libs libavformat libavcodec libswscale libavutil libzip msgpack) -lm"
work=$(mktemp -d /tmp/dump_compare.XXXXXX)
src_base=${BASE_SRC:-.}
for b in "$base" "$new"; do
    s=.; [ "$b" = "$base" ] && s=$src_base
    gcc -O2 -march=native -fopenmp -std=c11 -D_GNU_SOURCE -I"$s/include" -I"$s/src" \
        "$s/bench/dump_outputs.c" "$b/libtubelet.a" $libs -o "$b/dump_outputs" || exit 1
done
"$base/dump_outputs" "$work/a" >/dev/null 2>"$work/a.log" || { echo "baseline dump failed"; cat "$work/a.log"; }
"$new/dump_outputs" "$work/b" >/dev/null 2>"$work/b.log" || { echo "new dump failed"; cat "$work/b.log"; }
status=0 n=0
for f in "$work"/a/*.bin; do
    n=$((n + 1))
    g="$work/b/$(basename "$f")"
    if [ ! -f "$g" ]; then echo "missing: $(basename "$f")"; status=1
    elif ! cmp -s "$f" "$g"; then echo "differs: $(basename "$f")"; status=1; fi
done
extra=$(comm -13 <(ls "$work/a") <(ls "$work/b") | wc -l)
[ "$extra" -ne 0 ] && { echo "$extra outputs only in the new dump"; status=1; }
echo "$n outputs compared: $([ $status -eq 0 ] && echo bit-identical || echo DIFFERENCES)"
rm -rf "$work"
exit $status
