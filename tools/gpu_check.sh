#!/usr/bin/env bash
# The CUDA backend's check on a GPU machine (issue 30, docs/cuda.md), in two halves:
#
#   tools/gpu_check.sh prepare   on the development machine (nvcc and our Debian packages):
#       builds tests/gpu_parity.c with CUDA=1 for x86-64-v3 in build-gpu/ and copies it, with the
#       shared libraries it needs that a bare GPU machine lacks (oneDNN, cJSON, ...: not glibc,
#       not CUDA's own), into build-gpu/carry/ (a few tens of MiB; the fixtures travel with the
#       working tree, about 16 MiB).
#   tools/gpu_check.sh [run]     on the GPU machine, from the repository root, with
#       build-gpu/carry carried (device tool: carry ["build-gpu/carry"], timeout_s 540):
#       (a) parity: the CUDA forward of every fixture (the classifiers of
#           tests/fixtures/list.txt, Video Swin's, X-CLIP's, pretraining's of pretrain_list.txt),
#           plain and packed, against the fixture's PyTorch outputs (<= 1e-4 relative, fp32,
#           TF32 off); (b) the speed table: VideoMAE-B 16x224 at batch 1 and 8, tubelet fp32
#           on cuda against PyTorch eager SDPA in bf16 (random weights from transformers'
#           VideoMAEConfig; the same run, the same card); (c) the card's dense bf16 peak, an
#           8192^3 cuBLAS product through torch.matmul. Bounded to under 8 minutes; everything
#           printed goes to $OUT/gpu_check.txt too (or build-gpu/gpu_check.txt without $OUT).
#
# Nothing in the run half has run yet: it was written on a machine without a GPU.
set -u
cd "$(dirname "$0")/.."
carry=build-gpu/carry

prepare() {
    set -e
    make CUDA=1 BUILD=build-gpu ARCH=-march=x86-64-v3 -j"${JOBS:-2}" build-gpu/gpu/gpu_parity
    rm -rf "$carry" && mkdir -p "$carry/lib"
    cp build-gpu/gpu/gpu_parity "$carry/"
    strip "$carry/gpu_parity"
    # the libraries a bare GPU machine lacks: everything but glibc's own, the compiler's runtime
    # (libstdc++, libgcc_s: that machine's are newer, and PyTorch needs them), the base system's
    # (zlib, bzip2, OpenSSL 3: Python's own needs) and CUDA's (that machine has CUDA 13 and
    # PyTorch's nvidia-* wheels: libcudart, libcublasLt). oneDNN is most of it (~40 MB).
    ldd "$carry/gpu_parity" | awk '$3 ~ /^\// {print $3}' |
        grep -vE '/(libc|libm|libdl|librt|libpthread|ld-linux[^/]*|libstdc\+\+|libgcc_s|libz|libbz2|libcrypto|libcudart|libcublasLt|libcublas)\.so' |
        while read -r lib; do cp -L "$lib" "$carry/lib/"; done
    ls "$carry/lib"
    # what travels: the tracked tree (the fixtures are most of it) and the carry, 64 MiB at most
    local tree carried
    tree=$(git ls-files -z | xargs -0 du -cb 2>/dev/null | tail -1 | cut -f1)
    carried=$(du -sb "$carry" | cut -f1)
    echo "travels: $(( (tree + carried) >> 20 )) MiB (tree $((tree >> 20)), carry $((carried >> 20))) of 64"
    [ $((tree + carried)) -lt $((63 << 20)) ] || { echo "too large to travel"; exit 1; }
    echo "prepared: carry build-gpu/carry and run tools/gpu_check.sh on the GPU machine"
}

# the peers and the peak, in PyTorch (that machine's python3 holds torch 2.11, transformers 5.17)
torch_part() {
    python3 - <<'EOF'
import time, torch
from transformers import VideoMAEConfig, VideoMAEForVideoClassification
dev = torch.device("cuda")
print("torch", torch.__version__, "on", torch.cuda.get_device_name(0))

def timed(fn, warm=3, reps=10):
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / reps

# (c) dense bf16 peak: one large cuBLAS product
n = 8192
a = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
b = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
ms = timed(lambda: a @ b)
peak = 2 * n**3 / (ms / 1e3) / 1e12
print(f"bf16 peak (8192^3 torch.matmul): {peak:.0f} TFLOP/s")
del a, b

# (b) the PyTorch peer: VideoMAE-B 16x224, eager, SDPA, bf16
cfg = VideoMAEConfig(num_labels=400)
cfg._attn_implementation = "sdpa"
model = VideoMAEForVideoClassification(cfg).to(dev, torch.bfloat16).eval()
flop_clip = None
for batch in (1, 8):
    x = torch.randn(batch, 16, 3, 224, 224, device=dev, dtype=torch.bfloat16)
    torch.cuda.reset_peak_memory_stats()
    with torch.no_grad():
        ms = timed(lambda: model(pixel_values=x))
    # 2 x parameters' products per token, plus attention: 1568 tokens, 12 layers, 768 wide
    L, D, layers = 1568, 768, 12
    flop_clip = layers * (2 * L * (4 * D * D + 8 * D * D) + 4 * L * L * D)
    pct = 100 * batch * flop_clip / (ms / 1e3) / (peak * 1e12)
    mem = torch.cuda.max_memory_allocated() / 2**30
    print(f"pytorch sdpa bf16 videomae-base batch {batch} 16x224: {ms:.2f} ms, "
          f"{ms / batch:.2f} ms/clip, {batch / (ms / 1e3):.1f} clips/s, {pct:.0f}% of peak, "
          f"peak memory {mem:.2f} GiB")
EOF
}

run() {
    local log=${OUT:-build-gpu}/gpu_check.txt
    mkdir -p "$(dirname "$log")"
    exec > >(tee "$log") 2>&1
    [ -x "$carry/gpu_parity" ] || { echo "no $carry/gpu_parity: run 'tools/gpu_check.sh prepare' first and carry $carry"; exit 1; }
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
    # CUDA's libraries: the toolkit's, else PyTorch's nvidia-* wheels
    local wheels
    wheels=$(python3 -c 'import nvidia.cublas, nvidia.cuda_runtime, os; print(":".join(os.path.join(p, "lib") for m in (nvidia.cublas, nvidia.cuda_runtime) for p in m.__path__))' 2>/dev/null)
    # for our program only: PyTorch below keeps its own libraries
    local libs="$carry/lib:/usr/local/cuda/lib64:${wheels}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    LD_LIBRARY_PATH="$libs" ldd "$carry/gpu_parity" | grep -i "not found" && echo "missing libraries above"
    local status=0
    echo "== (a) parity against the fixtures (cuda fp32, TF32 off; tolerance 1e-4 relative)"
    LD_LIBRARY_PATH="$libs" timeout 200 "$carry/gpu_parity" || status=1
    echo "== (b) speed: VideoMAE-B 16x224 (random weights)"
    for b in 1 8; do
        LD_LIBRARY_PATH="$libs" timeout 60 "$carry/gpu_parity" --bench videomae-base $b 16 224 cuda ||
            status=1
    done
    echo "== (b, c) the PyTorch peer and the bf16 peak"
    timeout 150 bash -c "$(declare -f torch_part); torch_part" || status=1
    echo "gpu_check: $([ $status -eq 0 ] && echo 'all parts ran' || echo 'a part FAILED (above)')"
    return $status
}

case "${1:-run}" in
prepare) prepare ;;
run) run ;;
*) echo "usage: tools/gpu_check.sh [prepare|run]" >&2; exit 2 ;;
esac
