#!/usr/bin/env bash
# Builds each libFuzzer harness (tests/fuzz_*.c) with clang and runs it briefly on a seed corpus
# made from the fixtures. FUZZ_SECONDS (default 20) per harness. Prints "N passed, M failed".
set -u
cd "$(dirname "$0")/.."
secs=${FUZZ_SECONDS:-20}
out=${BUILD:-build}-fuzz
mkdir -p "$out"
pass=0 fail=0
if ! command -v clang >/dev/null; then
    echo "clang not found (scripts/install-deps.sh installs it)"; echo "0 passed, 1 failed"; exit 1
fi
ffmpeg_libs=$(pkg-config --libs libavformat libavcodec libswscale libavutil 2>/dev/null)
for h in tests/fuzz_*.c; do
    name=$(basename "$h" .c)
    srcs="src/common.c src/io/*.c"
    [ "$name" = fuzz_io ] || srcs="src/*.c src/io/*.c src/video/*.c"
    # shellcheck disable=SC2086
    if ! clang -std=c11 -D_GNU_SOURCE -g -O1 -fsanitize=fuzzer,address,undefined \
            -fno-sanitize-recover=undefined -Iinclude -Isrc $srcs "$h" -lcjson $ffmpeg_libs -lm \
            -o "$out/$name" 2>"$out/$name.build.log"; then
        cat "$out/$name.build.log"; echo "!! $name: build failed"; fail=$((fail + 1)); continue
    fi
    corpus="$out/$name.corpus"
    mkdir -p "$corpus"
    # seeds: small valid inputs of every kind the harness reads
    for f in tests/fixtures/timesformer_relu_odd/model.safetensors tests/fixtures/*/logits.npy \
             tests/fixtures/vivit_sharded/model.safetensors.index.json tests/fixtures/video/*; do
        [ -f "$f" ] && [ "$(stat -c %s "$f")" -lt 300000 ] && cp "$f" "$corpus/$(echo "$f" | tr / _)"
    done
    if "$out/$name" -max_total_time="$secs" -rss_limit_mb=2048 "$corpus" >"$out/$name.log" 2>&1; then
        echo "ok $name: $(grep -Eo 'Done [0-9]+ runs' "$out/$name.log" | tail -n 1) in ${secs}s"
        pass=$((pass + 1))
    else
        tail -n 40 "$out/$name.log"; echo "!! $name: crash (reproducer in $out)"; fail=$((fail + 1))
    fi
done
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
