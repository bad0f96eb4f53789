/* What the CUDA backend's two sources share (kernels.cu: inference, backward.cu: training): the
 * launch spelling, the error record, the translation of pointers and cuBLASLt's handle. The
 * state behind them (uploaded ranges, staging, the first failure) lives once, in kernels.cu. */
#ifndef TB_CUDA_COMMON_H
#define TB_CUDA_COMMON_H

#include <cublasLt.h>
#include <cuda_runtime.h>

#include "cuda.h"

/* kernel<<<grid, block>>>(args), spelled so that tests/cudaemu (make CUDA=emu) can run the same
 * source on the CPU */
#ifdef TB_CUDA_EMU
#define LAUNCH(kernel, grid, block) TB_EMU_LAUNCH(kernel, grid, block)
#define LAUNCH_SHARED(kernel, grid, block, bytes) TB_EMU_LAUNCH_SHARED(kernel, grid, block, bytes)
#define DYNAMIC_SHARED(name) unsigned char *name = tb_emu_dynamic_shared()
#else
#define LAUNCH(kernel, grid, block) kernel<<<(grid), (block)>>>
/* with `bytes` of dynamic shared memory, which the kernel names with DYNAMIC_SHARED(name) */
#define LAUNCH_SHARED(kernel, grid, block, bytes) kernel<<<(grid), (block), (bytes)>>>
#define DYNAMIC_SHARED(name)                                                                       \
    extern __shared__ __align__(128) unsigned char tb_dynamic_shared[];                            \
    unsigned char *name = tb_dynamic_shared
#endif

/* Records the first failure since the last ctx_status (which the pass reports). */
void tb_cuda_fail(int code);
#define CK(call)                                                                                   \
    do {                                                                                           \
        if ((call) != cudaSuccess) tb_cuda_fail(TUBELET_ERR_UNSUPPORTED);                          \
    } while (0)
/* a kernel launch's own error (a bad configuration) */
#define LAUNCHED() CK(cudaGetLastError())

/* The device address of bytes bytes at p: a device pointer as it is, an uploaded host range's
 * copy, any other host pointer staged for this entry (read-only: writes there are lost). Each
 * entry starts with tb_cuda_stage_reset. */
const void *tb_cuda_dev(const void *p, size_t bytes);
void tb_cuda_stage_reset(void);
#define DEVF(p, n) ((const float *)tb_cuda_dev((p), sizeof(float) * (size_t)(n)))
#define DEVI(p, n) ((const int32_t *)tb_cuda_dev((p), sizeof(int32_t) * (size_t)(n)))

/* C (m x n, column-major, ld ldc; fp32) = op(A) op(B) + bias [+ C] through cuBLASLt, fp32
 * compute (no TF32), its descriptors and algorithm kept per kind of product (kernels.cu); A and
 * B in bf16 with bf16 set. A failure is recorded (tb_cuda_fail). */
void tb_cuda_gemm(cublasOperation_t ta, cublasOperation_t tb, int64_t m, int64_t n, int64_t k,
                  const void *A, int64_t lda, const void *B, int64_t ldb, int accumulate,
                  float *C, int64_t ldc, const float *bias, int bf16);

/* The attention kernels keep a query's row in registers: head_dim up to ATT_D. */
#define ATT_D 128
/* An attention entry's start (kernels.cu; the forward's and the backward's): the cases no kernel
 * takes refused (head_dim over ATT_D: unsupported; a bias with ragged groups: an argument error,
 * as the CPU's), the staging reset, and the grouping and bias as the kernels read them. */
int tb_cuda_attention_args(const tb_grouping *g, const tb_attn_bias *bias, int heads,
                           int head_dim, tb_grouping *gd, tb_attn_bias *bd);

/* A launch grid of one thread per element, 256 to a block. */
static inline unsigned blocks(int64_t n) { return (unsigned)((n + 255) / 256); }

/* The sum of v over the block's threads, in every thread (a multiple of 32 threads; sh: 32
 * floats of shared memory). */
static __device__ inline float block_sum(float v, float *sh) {
    for (int o = 16; o > 0; o /= 2) v += __shfl_down_sync(0xffffffffu, v, o);
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    __syncthreads(); /* sh may still be read from a previous call */
    if (lane == 0) sh[warp] = v;
    __syncthreads();
    float s = 0.0f;
    for (int w = 0; w < (int)blockDim.x / 32; w++) s += sh[w];
    return s;
}

#endif
