/* What the CUDA backend's two sources share (kernels.cu: inference, backward.cu: training): the
 * launch spelling, the backend's instance (tb_cuda: uploaded ranges, the first failure, cuBLASLt's
 * handle and plans, scratch), the error record and the translation of pointers. */
#ifndef TB_CUDA_COMMON_H
#define TB_CUDA_COMMON_H

#include <cublasLt.h>
#include <cuda_runtime.h>

#include "cuda.h"

/* kernel<<<grid, block>>>(args) on the instance's stream, spelled so that tests/cudaemu (make
 * CUDA=emu) can run the same source on the CPU. Written inside an entry (instance cx): once dev()
 * refused one of the entry's pointers, the grid is empty, which CUDA refuses without running
 * anything (a kernel must never see a host pointer). */
#define LAUNCH_GRID(grid) (cx->refused ? dim3(0) : dim3(grid))
#ifdef TB_CUDA_EMU
#define LAUNCH(kernel, grid, block) TB_EMU_LAUNCH_ON(kernel, LAUNCH_GRID(grid), block, 0, cx->stream)
#define LAUNCH_SHARED(kernel, grid, block, bytes)                                                  \
    TB_EMU_LAUNCH_ON(kernel, LAUNCH_GRID(grid), block, bytes, cx->stream)
#define DYNAMIC_SHARED(name) unsigned char *name = tb_emu_dynamic_shared()
#else
#define LAUNCH(kernel, grid, block) kernel<<<LAUNCH_GRID(grid), (block), 0, cx->stream>>>
/* with `bytes` of dynamic shared memory, which the kernel names with DYNAMIC_SHARED(name) */
#define LAUNCH_SHARED(kernel, grid, block, bytes)                                                  \
    kernel<<<LAUNCH_GRID(grid), (block), (bytes), cx->stream>>>
#define DYNAMIC_SHARED(name)                                                                       \
    extern __shared__ __align__(128) unsigned char tb_dynamic_shared[];                            \
    unsigned char *name = tb_dynamic_shared
#endif

/* The product plans one instance keeps (kernels.cu's lt_plan_for): cuBLASLt's descriptors and
 * its heuristic's pick for one kind of product. */
#define LT_PLANS 128
typedef struct {
    cublasOperation_t ta, tb;
    int64_t m, n, k, lda, ldb, ldc;
    uint32_t al[4];
    int bf16, bias;
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t la, lb, lc;
    cublasLtMatmulAlgo_t algo;
} lt_plan;

/* A host range [host, host + bytes) uploaded once (upload), living at dev on the GPU; or device
 * memory the instance allocated (mem_alloc), which lives at itself (host = dev). */
typedef struct {
    const char *host;
    size_t bytes;
    char *dev;
} tb_cuda_range;
/* Ranges kept sorted by host address, not overlapping: looked up by bisection (kernels.cu). */
typedef struct {
    tb_cuda_range *r;
    int n, cap;
} tb_cuda_ranges;

/* The device copy of bytes [host, host + bytes) of a tensor uploaded to cx's model, or NULL
 * (kernels.cu; the optimiser writes the weights there). */
struct tb_cuda;
char *tb_cuda_model_copy(struct tb_cuda *cx, const void *host, size_t bytes);

/* The backend's instance: the context every entry takes (backend.h's tb_backend.ctx). open
 * makes the model's, which holds the uploaded tensors; fork one per state (and per model's
 * gradients), which reads its model's tensors and has all else of its own, so that states on
 * several threads share nothing they write. Nothing of the backend lives outside it. */
typedef struct tb_cuda {
    struct tb_cuda *model; /* the instance holding the model's tensors (itself: a model's) */
    /* its own stream (non-blocking: it waits for no other instance's work), on which all its
     * launches, products, copies and sets run in the order issued; the host waits for it only
     * where it reads a result (copy_out) and at the pass's end (ctx_status) */
    cudaStream_t stream;
    int own_stream; /* made by it (else its parent state's: tb_cuda_fork) */
    int status;            /* the first failure since the last ctx_status */
    int refused;           /* dev() refused a host pointer: launches skipped until ctx_status */
    /* its uploaded ranges: a model's tensors (written at load and free only, so that its states
     * read them without a lock), a state's plan tables */
    tb_cuda_ranges up;
    /* the device memory a state's instance allocated (its arenas), so that dev() knows device
     * memory without asking the driver; a model's instance keeps none (its states would race) */
    tb_cuda_ranges mem;
    /* cuBLASLt: the handle, its workspace and the kept plans (made on the first product) */
    cublasLtHandle_t lt;
    void *ws;
    lt_plan plans[LT_PLANS];
    int n_plans, next_plan;
    /* scratch: the bf16 copy of a product's input (kernels.cu), an entry's intermediate values
     * (backward.cu) */
    uint16_t *xb;
    size_t xb_cap;
    void *tmp;
    size_t tmp_bytes;
} tb_cuda;

/* Records the first failure since the last ctx_status (which the pass reports) in instance cx. */
void tb_cuda_fail(tb_cuda *cx, int code);
/* CK, LAUNCHED, DEVF and DEVI are written inside an entry, whose instance is named cx. */
#define CK(call)                                                                                   \
    do {                                                                                           \
        if ((call) != cudaSuccess) tb_cuda_fail(cx, TUBELET_ERR_UNSUPPORTED);                      \
    } while (0)
/* a kernel launch's own error (a bad configuration) */
#define LAUNCHED() CK(cudaGetLastError())

/* The device address of p: device memory as it is, a pointer into a model tensor uploaded at load
 * or into a table the instance's state uploaded (tb_state_share) its copy. Any other host pointer
 * is refused: TUBELET_ERR_ARG recorded, NULL returned and the entry's launches skipped (no entry
 * copies host memory to the GPU; docs/cuda.md, "What an entry may receive"). */
const void *tb_cuda_dev(tb_cuda *cx, const void *p);
#define DEVF(p) ((const float *)tb_cuda_dev(cx, (p)))
#define DEVI(p) ((const int32_t *)tb_cuda_dev(cx, (p)))

/* C (m x n, column-major, ld ldc; fp32) = op(A) op(B) + bias [+ C] through cuBLASLt, fp32
 * compute (no TF32), its descriptors and algorithm kept per kind of product in the instance
 * (kernels.cu); A and B in bf16 with bf16 set. A failure is recorded (tb_cuda_fail). */
void tb_cuda_gemm(tb_cuda *cx, cublasOperation_t ta, cublasOperation_t tb, int64_t m, int64_t n,
                  int64_t k, const void *A, int64_t lda, const void *B, int64_t ldb, int accumulate,
                  float *C, int64_t ldc, const float *bias, int bf16);

/* The attention kernels keep a query's row in registers: head_dim up to ATT_D. */
#define ATT_D 128
/* An attention entry's start (kernels.cu; the forward's and the backward's): the cases no kernel
 * takes refused (head_dim over ATT_D: unsupported; a bias with ragged groups or with
 * cross-attention: an argument error, as the CPU's), and the grouping, its
 * keys' grouping (g's kv for cross-attention, else g again; both with kv NULL) and the bias as
 * the kernels read them. */
int tb_cuda_attention_args(tb_cuda *cx, const tb_grouping *g, const tb_attn_bias *bias,
                           int head_dim, tb_grouping *gd, tb_grouping *kd, tb_attn_bias *bd);

/* Copies between the host and the device, on cx's stream: in, ordered before the kernels issued
 * after it (the host's bytes are taken at the call, as the driver stages pageable memory); out,
 * waited for, so that the host may read dst on return. A failure is recorded (tb_cuda_fail) and
 * 0 returned. */
static inline int copy_in(tb_cuda *cx, void *dst, const void *src, size_t bytes) {
    const int ok =
        cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, cx->stream) == cudaSuccess;
    if (!ok) tb_cuda_fail(cx, TUBELET_ERR_UNSUPPORTED);
    return ok;
}
static inline int copy_out(tb_cuda *cx, void *dst, const void *src, size_t bytes) {
    const int ok =
        cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, cx->stream) == cudaSuccess &&
        cudaStreamSynchronize(cx->stream) == cudaSuccess;
    if (!ok) tb_cuda_fail(cx, TUBELET_ERR_UNSUPPORTED);
    return ok;
}

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

/* Each thread's s in double summed over its block of 256 threads (8 warps) into part[block]:
 * one partial per block, in a fixed order, so that a sum over a fixed grid is the same from run
 * to run (optim.cu's gradient norm, kernels.cu's mean squared error); sh: 8 doubles of shared
 * memory. */
static __device__ inline void block_partial_d(double s, double *part, double *sh) {
    for (int o = 16; o > 0; o /= 2) s += __shfl_down_sync(0xffffffffu, s, o);
    if (threadIdx.x % 32 == 0) sh[threadIdx.x / 32] = s;
    __syncthreads();
    if (threadIdx.x) return;
    double t = 0;
    for (int w = 0; w < 8; w++) t += sh[w];
    part[blockIdx.x] = t;
}

#endif
