/* The CUDA backend's optimiser entries (backend.h; table.c lists them): the global gradient norm's
 * sum of squares, the AdamW update, and the copy of updated weights back to the host. A training
 * step on cuda runs its optimiser here, where the gradients and the uploaded weights already are:
 * nothing of either crosses between host and device (the norm's one double comes back).
 *
 * Verified in the emulator (make CUDA=emu; tests/gpu_grads.c against the CPU's entries and a CPU
 * training step); not yet run on a GPU (docs/cuda.md). */
#include <math.h>

#include "common.h"

/* The optimiser writes the weights in their uploaded copy (tb_cuda_model_copy): a pointer that
 * was not uploaded is a failure, never a staged copy whose writes would be lost. */

/* ---- the sum of squares: each buffer's fixed grid of SS_BLOCKS blocks, each thread's strided
 * sum in double, one partial per block; then one thread adds every partial in order, so that the
 * norm is the same from run to run, and one double comes back. ---- */
#define SS_BLOCKS 64
__global__ void k_sum_squares(double *part, const float *x, int64_t n) {
    __shared__ double sh[8]; /* 256 threads: 8 warps */
    double s = 0;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        s += (double)x[i] * x[i];
    block_partial_d(s, part, sh);
}
__global__ void k_sum_parts(double *out, const double *part, int64_t n) {
    double t = 0;
    for (int64_t i = 0; i < n; i++) t += part[i];
    *out = t;
}
extern "C" double tb_cuda_sum_squares(void *ctx, const float *const *x, const int64_t *n,
                                      int count) {
    tb_cuda *cx = (tb_cuda *)ctx;
    int used = 0;
    for (int i = 0; i < count; i++) used += x[i] && n[i] > 0;
    if (!used) return 0;
    double *part = NULL, total = 0;
    /* partials, then the total after them */
    if (cudaMalloc(&part, sizeof(double) * ((size_t)used * SS_BLOCKS + 1)) != cudaSuccess) {
        tb_cuda_fail(cx, TUBELET_ERR_MEMORY);
        return NAN;
    }
    int k = 0;
    for (int i = 0; i < count; i++)
        if (x[i] && n[i] > 0) {
            LAUNCH(k_sum_squares, SS_BLOCKS, 256)(part + (size_t)k++ * SS_BLOCKS, x[i], n[i]);
            LAUNCHED();
        }
    double *sum = part + (size_t)used * SS_BLOCKS;
    LAUNCH(k_sum_parts, 1, 1)(sum, part, (int64_t)used * SS_BLOCKS);
    LAUNCHED();
    copy_out(cx, &total, sum, sizeof total);
    cudaFree(part);
    return total;
}

/* ---- AdamW: one thread per element, the CPU's own arithmetic (tb_adamw_element, backend.h) on
 * the model's uploaded copy of the tensor ---- */
__global__ void k_adamw(float *w, const float *g, float *m, float *v, int64_t n, tb_adamw_args a) {
    const int64_t j = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (j < n) tb_adamw_element(w + j, g[j], m + j, v + j, &a);
}
extern "C" void tb_cuda_adamw(void *ctx, float *w, const float *g, float *m, float *v, int64_t n,
                              const tb_adamw_args *a) {
    tb_cuda *cx = (tb_cuda *)ctx;
    float *wd = (float *)tb_cuda_model_copy(cx, w, sizeof(float) * (size_t)n);
    if (!wd) {
        tb_cuda_fail(cx, TUBELET_ERR_ARG); /* not a model tensor: nothing to update */
        return;
    }
    if (n <= 0) return;
    LAUNCH(k_adamw, blocks(n), 256)(wd, g, m, v, n, *a);
    LAUNCHED();
}

extern "C" int tb_cuda_download(void *ctx, void *host, size_t bytes, tb_err *e) {
    tb_cuda *cx = (tb_cuda *)ctx; /* the optimiser's: its stream ran the updates */
    const char *d = tb_cuda_model_copy(cx, host, bytes);
    if (!d)
        return tb_fail(e, TUBELET_ERR_ARG, "device cuda: %zu bytes to read back that were never "
                       "uploaded", bytes);
    if (!copy_out(cx, host, d, bytes))
        return tb_fail(e, TUBELET_ERR_IO, "device cuda: reading %zu bytes of weights back failed",
                       bytes);
    return TUBELET_OK;
}
