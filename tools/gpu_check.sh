#!/usr/bin/env bash
# The CUDA backend's check on a GPU machine (issue 30, docs/cuda.md), in two halves:
#
#   tools/gpu_check.sh prepare   on the development machine (nvcc and our Debian packages):
#       builds tests/gpu_parity.c with CUDA=1 for x86-64-v3 in build-gpu/ and copies it, with the
#       shared libraries it needs that a bare GPU machine lacks (oneDNN, cJSON, ...: not glibc,
#       not CUDA's own, gzip'd into lib.tar.gz, which run unpacks), into build-gpu/carry/
#       (about 13 MiB; the fixtures travel with the working tree, about 30 MiB).
#   tools/gpu_check.sh [run]     on the GPU machine, from the repository root, with
#       build-gpu/carry carried (device tool: carry ["build-gpu/carry"], timeout_s 540):
#       (a) parity: gpu_parity, the CUDA forward of every fixture (classifiers, Video Swin,
#           X-CLIP, pretraining) against the fixture's PyTorch outputs (fp32 <= 1e-4
#           relative, TF32 off; bf16 <= 2e-2 with the top-1 unchanged); (a') gpu_grads, the
#           gradients, when it was built; (b) the speed table of issue 30:
#           bench/gpu_peers.py (PyTorch eager bf16 with SDPA where the model has it, the card's
#           dense bf16 peak, FLOP by torch's counter, peak memory), tubelet's rows (VideoMAE-B
#           16x224 at batch 1, 8, 32; TimeSformer-B 8x224, ViViT-B 32x224, Video Swin-B 32x224
#           at batch 8; bf16 and fp32; GPU memory), then torch.compile of VideoMAE-B at batch 8.
#           Bounded to under 8 minutes; everything printed goes to $OUT/gpu_check.txt too (or
#           build-gpu/gpu_check.txt without $OUT).
#
# The run half has not run on a GPU yet; the same gpu_parity passes in the emulator (make
# test-cuda-emu, docs/cuda.md).
set -u
cd "$(dirname "$0")/.."
carry=build-gpu/carry

prepare() {
    set -e
    make CUDA=1 BUILD=build-gpu ARCH=-march=x86-64-v3 -j"${JOBS:-2}" build-gpu/gpu/gpu_parity
    rm -rf "$carry" && mkdir -p "$carry/lib"
    cp build-gpu/gpu/gpu_parity "$carry/"
    if grep -q '^$(BUILD)/gpu/gpu_grads:' Makefile; then
        make CUDA=1 BUILD=build-gpu ARCH=-march=x86-64-v3 -j"${JOBS:-2}" build-gpu/gpu/gpu_grads
        cp build-gpu/gpu/gpu_grads "$carry/"
    fi
    strip "$carry"/gpu_*
    # the libraries a bare GPU machine lacks: everything but glibc's own, the compiler's runtime
    # (libstdc++, libgcc_s: that machine's are newer, and PyTorch needs them), the base system's
    # (zlib, bzip2, OpenSSL 3: Python's own needs) and CUDA's (that machine has CUDA 13 and
    # PyTorch's nvidia-* wheels: libcudart, libcublasLt). oneDNN is most of it (~40 MB).
    ldd "$carry/gpu_parity" | awk '$3 ~ /^\// {print $3}' |
        grep -vE '/(libc|libm|libdl|librt|libpthread|ld-linux[^/]*|libstdc\+\+|libgcc_s|libz|libbz2|libcrypto|libcudart|libcublasLt|libcublas)\.so' |
        while read -r lib; do cp -L "$lib" "$carry/lib/"; done
    ls "$carry/lib"
    # gzip'd (oneDNN's 40 MB to 11): the tree and the carry must travel in 64 MiB; run unpacks
    tar -C "$carry" -czf "$carry/lib.tar.gz" lib && rm -rf "$carry/lib"
    # what travels: the tracked tree (the fixtures are most of it) and the carry, 64 MiB at most
    local tree carried
    tree=$(git ls-files -z | xargs -0 du -cb 2>/dev/null | tail -1 | cut -f1)
    carried=$(du -sb "$carry" | cut -f1)
    echo "travels: $(( (tree + carried) >> 20 )) MiB (tree $((tree >> 20)), carry $((carried >> 20))) of 64"
    [ $((tree + carried)) -lt $((63 << 20)) ] || { echo "too large to travel"; exit 1; }
    echo "prepared: carry build-gpu/carry and run tools/gpu_check.sh on the GPU machine"
}

run() {
    local log=${OUT:-build-gpu}/gpu_check.txt
    mkdir -p "$(dirname "$log")"
    exec > >(tee "$log") 2>&1
    [ -x "$carry/gpu_parity" ] || { echo "no $carry/gpu_parity: run 'tools/gpu_check.sh prepare' first and carry $carry"; exit 1; }
    [ -d "$carry/lib" ] || tar -C "$carry" -xzf "$carry/lib.tar.gz" ||
        { echo "cannot unpack $carry/lib.tar.gz"; exit 1; }
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
    # CUDA's libraries: the toolkit's, else PyTorch's nvidia-* wheels
    local wheels
    wheels=$(python3 -c 'import nvidia.cublas, nvidia.cuda_runtime, os; print(":".join(os.path.join(p, "lib") for m in (nvidia.cublas, nvidia.cuda_runtime) for p in m.__path__))' 2>/dev/null)
    # for our program only: PyTorch below keeps its own libraries
    local libs="$carry/lib:/usr/local/cuda/lib64:${wheels}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    LD_LIBRARY_PATH="$libs" ldd "$carry/gpu_parity" | grep -i "not found" && echo "missing libraries above"
    local status=0
    echo "== (a) parity against the fixtures (cuda fp32, TF32 off; tolerance 1e-4 relative)"
    LD_LIBRARY_PATH="$libs" timeout 150 "$carry/gpu_parity" || status=1
    if [ -x "$carry/gpu_grads" ]; then
        echo "== (a') training: every gradient on cuda against the fixtures' PyTorch gradients"
        LD_LIBRARY_PATH="$libs" timeout 90 "$carry/gpu_grads" || status=1
    fi
    echo "== (b) the PyTorch peers (eager, bf16, SDPA where the model has it) and the bf16 peak"
    timeout 150 python3 bench/gpu_peers.py || status=1
    echo "== (b) tubelet (random weights; fp32, then bf16 where the build has it)"
    local row arch batch frames prec
    for row in "videomae-base 1 16" "videomae-base 8 16" "videomae-base 32 16" \
               "timesformer-base 8 8" "vivit-base 8 32" "video-swin-b 8 32"; do
        read -r arch batch frames <<<"$row"
        for prec in bf16 fp32; do
            LD_LIBRARY_PATH="$libs" timeout 25 "$carry/gpu_parity" --bench "$arch" "$batch" \
                "$frames" 224 cuda "$prec" || status=1
        done
    done
    echo "== (b) torch.compile, VideoMAE-B batch 8 (last: compiling takes minutes)"
    timeout 150 python3 bench/gpu_peers.py --compile || status=1
    echo "gpu_check: $([ $status -eq 0 ] && echo 'all parts ran' || echo 'a part FAILED (above)')"
    return $status
}

case "${1:-run}" in
prepare) prepare ;;
run) run ;;
*) echo "usage: tools/gpu_check.sh [prepare|run]" >&2; exit 2 ;;
esac
