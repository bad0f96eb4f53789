#!/usr/bin/env bash
# Builds each libFuzzer harness (tests/fuzz_*.c, listed in the table below) with clang, ASan and
# UBSan, and runs it on its committed seed corpus (tests/fuzz/corpus/<harness>/) plus seeds taken
# from the fixtures. Prints "N passed, M failed".
#
#   tests/fuzz.sh [HARNESS...]         short run (make fuzz, make test): FUZZ_SECONDS (default 15)
#                                      per harness, fixed -seed, a fresh working corpus each time
#   tests/fuzz.sh --long [HARNESS...]  long run (make fuzz-long): FUZZ_SECONDS (default 1800) or
#                                      FUZZ_RUNS executions (default 10000000), whichever comes
#                                      first; the working corpus is kept between runs; the
#                                      executions and coverage of each harness go to
#                                      $BUILD-fuzz/fuzz-long.txt. FUZZ_JOBS harnesses at a time
#                                      (default 1).
#
# A crash, leak, UBSan report, timeout (-timeout, FUZZ_TIMEOUT, default 25 s for one input) or
# RSS above the limit fails the harness; libFuzzer leaves the input in $BUILD-fuzz/ as
# <harness>-crash-*, -leak-*, -timeout-* or -oom-*. Reproduce: $BUILD-fuzz/<harness> FILE.
set -u
cd "$(dirname "$0")/.." || exit 1

# The video, serve and text harnesses link the models too: preprocessing asks the family for a
# processor's defaults (tb_family_preprocess) and the tokenizer checks its ids against a model
# (tubelet_tokenizer_check).
# name         | sources besides src/common.c               | libraries        | seeds from the fixtures
TABLE='
fuzz_io        | src/io/*.c                                 | cjson zip msgpack | tests/fixtures/timesformer_relu_odd/model.safetensors tests/fixtures/*/logits.npy tests/fixtures/vivit_sharded/model.safetensors.index.json
fuzz_video     | src/video/*.c src/io/*.c src/kernels/*.c src/models/*.c | cjson ffmpeg zip msgpack dnnl omp | tests/fixtures/video/*.mp4 tests/fixtures/video/*.mkv tests/fixtures/video/*.bin tests/fixtures/video/*/preprocessor_config.json
fuzz_config    | src/io/*.c src/kernels/*.c src/models/*.c  | cjson zip msgpack dnnl omp | tests/fixtures/*/config.json tests/fixtures/xclip/*/config.json tests/fixtures/xclip/pth/config.json
fuzz_preproc   | src/video/*.c src/io/*.c src/kernels/*.c src/models/*.c | cjson ffmpeg zip msgpack dnnl omp | tests/fixtures/video/*/preprocessor_config.json
fuzz_data      | src/video/*.c src/train/data.c src/io/*.c src/kernels/*.c src/models/*.c | cjson ffmpeg zip msgpack dnnl omp |
fuzz_run_config| src/train/run_config.c                     | cjson            |
fuzz_pickle    | src/io/torch_pickle.c src/io/torch_file.c src/io/safetensors.c src/io/ckpt_cfg.c | cjson zip | tests/fixtures/checkpoints/*/*.p* tests/attacks/checkpoints/*.pth
fuzz_pretrain  | src/io/*.c src/kernels/*.c src/models/*.c src/cli/pretrain_io.c | cjson zip msgpack dnnl omp | tests/fixtures/pretrain_normpix/input.npy
fuzz_serve     | src/serve/params.c src/serve/body.c src/video/*.c src/io/*.c src/kernels/*.c src/models/*.c | cjson ffmpeg zip msgpack mhd dnnl omp |
fuzz_tokenizer | src/text/*.c src/io/*.c src/kernels/*.c src/models/*.c | cjson pcre2 utf8proc zip msgpack dnnl omp | tests/fixtures/tokenizer/clip_small/* tests/fixtures/tokenizer/clip_unk/*
fuzz_scales    | src/io/int8_scales.c                      | cjson            |
fuzz_flax      | src/io/flax_file.c src/io/torch_file.c src/io/torch_pickle.c src/io/safetensors.c | cjson zip msgpack | tests/fixtures/flax/*/*.msgpack tests/attacks/flax/*.msgpack
'

long=0
if [ "${1:-}" = "--long" ]; then long=1; shift; fi
if [ $long = 1 ]; then
    secs=${FUZZ_SECONDS:-1800} runs=${FUZZ_RUNS:-10000000}
else
    secs=${FUZZ_SECONDS:-15} runs=${FUZZ_RUNS:--1}
fi
jobs=${FUZZ_JOBS:-1}
out=${BUILD:-build}-fuzz
summary=$out/fuzz-long.txt
mkdir -p "$out"
if ! command -v clang >/dev/null; then
    echo "clang not found (scripts/install-deps.sh installs it)"; echo "0 passed, 1 failed"; exit 1
fi

libs_for() { # the table's library names -> linker flags
    local l flags="-lm"
    for l in $1; do
        case $l in
        cjson) flags="-lcjson $flags" ;;
        zip) flags="$(pkg-config --libs libzip) $flags" ;;
        msgpack) flags="$(pkg-config --libs msgpack) $flags" ;;
        dnnl) flags="-ldnnl $flags" ;;
        omp) flags="-fopenmp $flags" ;;
        pcre2) flags="$(pkg-config --libs libpcre2-8) $flags" ;;
        utf8proc) flags="$(pkg-config --libs libutf8proc) $flags" ;;
        mhd) flags="$(pkg-config --libs libmicrohttpd) $flags" ;;
        ffmpeg) flags="$(pkg-config --libs libavformat libavcodec libswscale libavutil libavdevice) $flags" ;;
        *) echo "fuzz.sh: unknown library '$l' in the table" >&2; return 1 ;;
        esac
    done
    echo "$flags"
}

build() { # name sources libs
    local name=$1 flags
    flags=$(libs_for "$3") || return 1
    # shellcheck disable=SC2086
    clang -std=c11 -D_GNU_SOURCE -g -O1 -fsanitize=fuzzer,address,undefined \
        -fno-sanitize-recover=undefined -Iinclude -Isrc src/common.c $2 "tests/$name.c" $flags \
        -o "$out/$name" 2>"$out/$name.build.log"
}

# Builds and runs one harness: its log is $out/<name>.log, its result line $out/<name>.result
# (and, for --long, its line of the summary $out/<name>.summary).
fuzz_one() { # name sources libs seeds
    local name=$1 work seed_dir f rc
    if ! build "$name" "$2" "$3"; then
        cat "$out/$name.build.log"; echo "!! $name: build failed" >"$out/$name.result"; return
    fi
    # new inputs go to the first corpus directory (the working one), never to tests/
    if [ $long = 1 ]; then work=$out/long/$name.corpus; else work=$out/$name.corpus; rm -rf "$work"; fi
    seed_dir=$out/$name.fixture-seeds
    rm -rf "$seed_dir"
    mkdir -p "$work" "$seed_dir"
    for f in $4; do # small valid inputs of the kinds the harness reads
        [ -f "$f" ] && [ "$(stat -c %s "$f")" -lt 300000 ] && cp "$f" "$seed_dir/$(echo "$f" | tr / _)"
    done
    local dirs=("$work" "$seed_dir")
    [ -d "tests/fuzz/corpus/$name" ] && dirs+=("tests/fuzz/corpus/$name")
    "$out/$name" -seed=1 -max_total_time="$secs" -runs="$runs" -rss_limit_mb=2048 \
        -timeout="${FUZZ_TIMEOUT:-25}" -print_final_stats=1 -artifact_prefix="$out/$name-" \
        "${dirs[@]}" >"$out/$name.log" 2>&1
    rc=$?
    local execs cov ft took
    execs=$(grep -Eo '^stat::number_of_executed_units: [0-9]+' "$out/$name.log" | grep -Eo '[0-9]+$')
    took=$(grep -Eo '^Done [0-9]+ runs in [0-9]+ second' "$out/$name.log" | grep -Eo '[0-9]+ second' | grep -Eo '[0-9]+')
    cov=$(grep -Eo 'cov: [0-9]+ ft: [0-9]+' "$out/$name.log" | tail -n 1)
    ft=${cov##* }; cov=${cov#cov: }; cov=${cov%% *}
    if [ $rc -eq 0 ]; then
        echo "ok $name: ${execs:-?} runs in ${took:-?} s, cov ${cov:-?} ft ${ft:-?}" >"$out/$name.result"
    else
        { tail -n 40 "$out/$name.log"; echo "!! $name: failed (exit $rc; log $out/$name.log, reproducer $out/$name-*)"; } >"$out/$name.result"
    fi
    if [ $long = 1 ]; then
        printf '%-16s %-6s executions %-10s in %-6s s  cov %-6s ft %-7s corpus %s  (limits %s s, %s runs)\n' \
            "$name" "$([ $rc -eq 0 ] && echo ok || echo FAILED)" "${execs:-?}" "${took:-?}" "${cov:-?}" \
            "${ft:-?}" "$(find "$work" -type f | wc -l)" "$secs" "$runs" >"$out/$name.summary"
    fi
}

want() { # is harness $1 selected on the command line (all when none is)?
    [ $# -eq 1 ] && return 0
    local n=$1; shift
    for a in "$@"; do [ "$a" = "$n" ] && return 0; done
    return 1
}

names=()
while IFS='|' read -r name srcs libs seeds; do
    name=$(echo "$name" | xargs)
    [ -n "$name" ] || continue
    want "$name" "$@" || continue
    [ -f "tests/$name.c" ] || { echo "!! $name: tests/$name.c missing" >"$out/$name.result"; names+=("$name"); continue; }
    names+=("$name")
    rm -f "$out/$name.result" "$out/$name.summary"
    fuzz_one "$name" "$srcs" "$libs" "$seeds" &
    while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n; done
done <<<"$TABLE"
wait

pass=0 fail=0
for name in "${names[@]}"; do
    cat "$out/$name.result"
    case $(tail -n 1 "$out/$name.result") in ok*) pass=$((pass + 1)) ;; *) fail=$((fail + 1)) ;; esac
done
if [ $long = 1 ]; then
    { echo "tubelet fuzz-long $(date -u +%Y-%m-%dT%H:%MZ) $(git rev-parse --short HEAD 2>/dev/null)"
      for name in "${names[@]}"; do cat "$out/$name.summary" 2>/dev/null || echo "$name: not run"; done
    } >"$summary"
    echo "summary: $summary"; cat "$summary"
fi
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
