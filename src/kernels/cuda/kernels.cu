/* The CUDA backend's inference kernels (backend.h's entries, listed by table.c). Every entry has
 * the meaning of the CPU entry of the same name; fp32 throughout, TF32 off, so that the outputs
 * can match the CPU's fp32 forward to 1e-4 (a model loaded in bf16: the linear layers' and
 * attention's operands in bf16, as on the CPU; docs/cuda.md).
 *
 * WRITTEN WITHOUT A GPU: this compiles and links, and a machine without a GPU refuses it at load,
 * but no kernel here has run yet (docs/cuda.md, issue 30).
 *
 * Memory. The state's buffers (mem_alloc) are device memory. The model's tensors are uploaded
 * once at load (tb_cuda_upload, and the linear layers' weights through pack_add), a state's plan
 * tables once per plan (tb_state_share), the caller's pixels once per pass (to_device), and every
 * pointer an entry receives is translated by dev(): a device pointer as it is, a host pointer
 * inside an uploaded range to its device copy; any other host pointer is refused
 * (TUBELET_ERR_ARG), never copied: no entry moves host memory to the GPU (docs/cuda.md).
 *
 * Errors. The entries that return nothing record the first failure (a CUDA or cuBLASLt error, an
 * unsupported case) in their instance; tb_cuda_ctx_status hands it to the pass (tb_pass_status),
 * once.
 *
 * Instances. Every entry takes the backend's instance (tb_cuda, common.h: the context of
 * backend.h's tb_backend), which holds all the backend keeps: the model's (open) its uploaded
 * tensors, each state's (fork) its failure, plan tables, cuBLASLt plans and scratch. No file-scope
 * variable is written (tests/check_cuda_state.sh). */
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <mma.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h" /* LAUNCH, CK, DEVF, blocks: shared with backward.cu */
#include "../rope.h"

/* ---- errors ---- */
static void fail(tb_cuda *cx, int code) {
    if (!cx->status) cx->status = code;
}
void tb_cuda_fail(tb_cuda *cx, int code) { fail(cx, code); }

extern "C" void tb_cuda_unsupported(void *ctx, const char *what) {
    (void)what; /* the pass reports the status; docs/cuda.md lists what is unsupported */
    fail((tb_cuda *)ctx, TUBELET_ERR_UNSUPPORTED);
}

/* ---- the device and the backend's instances ---- */
/* An instance of model's (NULL: a model's own), on stream (NULL: a new one, its own). */
static tb_cuda *instance_new(tb_cuda *model, cudaStream_t stream) {
    tb_cuda *cx = (tb_cuda *)calloc(1, sizeof *cx);
    if (!cx) return NULL;
    cx->stream = stream, cx->own_stream = !stream;
    if (!stream && cudaStreamCreateWithFlags(&cx->stream, cudaStreamNonBlocking) != cudaSuccess) {
        free(cx);
        return NULL;
    }
    cx->model = model ? model : cx;
    return cx;
}

extern "C" int tb_cuda_open(void **ctx, tb_err *e) {
    *ctx = NULL;
    int n = 0;
    cudaError_t r = cudaGetDeviceCount(&n);
    if (r != cudaSuccess)
        return tb_fail(e, TUBELET_ERR_UNSUPPORTED, "device cuda: no usable GPU (%s: %s)",
                       cudaGetErrorName(r), cudaGetErrorString(r));
    if (n < 1) return tb_fail(e, TUBELET_ERR_UNSUPPORTED, "device cuda: no GPU found");
    cudaDeviceProp p;
    if (cudaGetDeviceProperties(&p, 0) != cudaSuccess || p.major < 8)
        return tb_fail(e, TUBELET_ERR_UNSUPPORTED,
                       "device cuda: GPU 0 (compute capability %d.%d) is older than this build "
                       "supports (sm_90, with PTX for compute_90 and later)",
                       p.major, p.minor);
    tb_cuda *cx = instance_new(NULL, NULL);
    if (!cx) return tb_fail(e, TUBELET_ERR_MEMORY, "device cuda: out of memory making a stream");
    *ctx = cx;
    return TUBELET_OK;
}

/* Forked from a model's instance: a stream of its own. From a state's (a second state whose
 * kernels read the first's outputs, as pretraining's decoder reads its encoder's): that state's
 * stream, so that the two run in the order issued, without a wait between them. */
extern "C" int tb_cuda_fork(void *ctx, void **out, tb_err *e) {
    tb_cuda *parent = (tb_cuda *)ctx;
    tb_cuda *cx = instance_new(parent->model, parent == parent->model ? NULL : parent->stream);
    *out = cx;
    return cx ? TUBELET_OK
              : tb_fail(e, TUBELET_ERR_MEMORY, "device cuda: out of memory making a stream");
}

static void lt_plan_clear(lt_plan *p);

/* An instance's release: cuBLASLt's handle, workspace and plans, its scratch, the uploads it
 * holds (a model's tensors, a state's tables) and its list of allocations (not the allocations:
 * their owners free them). cudaFree waits for the GPU to be done with each. */
extern "C" void tb_cuda_close(void *ctx) {
    tb_cuda *cx = (tb_cuda *)ctx;
    if (!cx) return;
    cudaStreamSynchronize(cx->stream);
    for (int i = 0; i < cx->n_plans; i++) lt_plan_clear(&cx->plans[i]);
    if (cx->ws) cudaFree(cx->ws);
    if (cx->lt) cublasLtDestroy(cx->lt);
    if (cx->xb) cudaFree(cx->xb);
    if (cx->tmp) cudaFree(cx->tmp);
    for (int i = 0; i < cx->up.n; i++) cudaFree(cx->up.r[i].dev);
    free(cx->up.r), free(cx->mem.r); /* the arenas are their owners' to free */
    if (cx->own_stream) cudaStreamDestroy(cx->stream);
    free(cx);
}

/* ---- ranges: host [host, host + bytes) lives at dev on the GPU. A model's instance holds its
 * tensors (uploaded at load), a state's the tables of its plan (tb_state_share, once per plan)
 * and its arenas (mem_alloc); each list is kept sorted by host address for dev()'s bisection, and
 * only its own instance writes it. ---- */
static int range_index(const tb_cuda_ranges *rs, const char *h) { /* the first starting after h */
    int lo = 0, hi = rs->n;
    while (lo < hi) {
        const int mid = (lo + hi) / 2;
        if (rs->r[mid].host <= h) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}
/* The range of rs holding the byte at h, or NULL: a bisection, no lock and no scan. */
static const tb_cuda_range *range_of(const tb_cuda_ranges *rs, const char *h) {
    const int at = range_index(rs, h) - 1;
    return at >= 0 && h < rs->r[at].host + rs->r[at].bytes ? &rs->r[at] : NULL;
}
char *tb_cuda_model_copy(tb_cuda *cx, const void *host, size_t bytes) {
    const char *h = (const char *)host;
    const tb_cuda_range *r = range_of(&cx->model->up, h);
    return r && h + bytes <= r->host + r->bytes ? r->dev + (h - r->host) : NULL;
}
/* r inserted at its place (it overlaps none): 0 when out of memory. */
static int range_insert(tb_cuda_ranges *rs, tb_cuda_range r) {
    if (rs->n == rs->cap) {
        const int cap = rs->cap ? 2 * rs->cap : 64;
        tb_cuda_range *g = (tb_cuda_range *)realloc(rs->r, sizeof(tb_cuda_range) * (size_t)cap);
        if (!g) return 0;
        rs->r = g, rs->cap = cap;
    }
    const int at = range_index(rs, r.host);
    memmove(&rs->r[at + 1], &rs->r[at], sizeof(tb_cuda_range) * (size_t)(rs->n - at));
    rs->r[at] = r, rs->n++;
    return 1;
}
/* The range starting at h forgotten, its device address returned (NULL: none). */
static char *range_remove(tb_cuda_ranges *rs, const char *h) {
    const int at = range_index(rs, h) - 1;
    if (at < 0 || rs->r[at].host != h) return NULL;
    char *d = rs->r[at].dev;
    memmove(&rs->r[at], &rs->r[at + 1], sizeof(tb_cuda_range) * (size_t)(rs->n - at - 1));
    rs->n--;
    return d;
}

/* An upload's copy, waited for: a model's tensors are read on its states' streams. */
static int upload_copy(tb_cuda *cx, void *dst, const void *host, size_t bytes) {
    return copy_in(cx, dst, host, bytes) && cudaStreamSynchronize(cx->stream) == cudaSuccess;
}

extern "C" int tb_cuda_upload(void *ctx, const void *host, size_t bytes, tb_err *e) {
    tb_cuda *cx = (tb_cuda *)ctx;
    const char *h = (const char *)host;
    if (!bytes) return TUBELET_OK; /* nothing a kernel reads */
    const int at = range_index(&cx->up, h);
    const tb_cuda_range *before = at > 0 ? &cx->up.r[at - 1] : NULL;
    if (before && h + bytes <= before->host + before->bytes) /* uploaded: its copy refreshed */
        return upload_copy(cx, before->dev + (h - before->host), host, bytes)
                   ? TUBELET_OK
                   : tb_fail(e, TUBELET_ERR_IO, "device cuda: the upload of %zu bytes failed",
                             bytes);
    if ((before && h < before->host + before->bytes) ||
        (at < cx->up.n && h + bytes > cx->up.r[at].host))
        return tb_fail(e, TUBELET_ERR_ARG, "device cuda: %zu bytes to upload overlap an uploaded "
                       "range", bytes);
    void *d = NULL;
    if (cudaMalloc(&d, bytes) != cudaSuccess)
        return tb_fail(e, TUBELET_ERR_MEMORY, "device cuda: out of GPU memory uploading %zu "
                       "bytes", bytes);
    if (!upload_copy(cx, d, host, bytes)) {
        cudaFree(d);
        return tb_fail(e, TUBELET_ERR_IO, "device cuda: the upload of %zu bytes failed", bytes);
    }
    if (!range_insert(&cx->up, tb_cuda_range{h, bytes, (char *)d})) {
        cudaFree(d);
        return tb_fail(e, TUBELET_ERR_MEMORY, "out of memory");
    }
    return TUBELET_OK;
}

extern "C" void tb_cuda_release(void *ctx, const void *host) {
    tb_cuda *cx = (tb_cuda *)ctx;
    char *d = range_remove(&cx->up, (const char *)host);
    if (d) cudaFree(d);
}

/* The device address of p (NULL: NULL), for instance cx: p itself inside the instance's arenas;
 * inside a model tensor uploaded at load, or a table this instance holds (its state's plan), its
 * copy; else p itself if the driver says it is device memory (another instance's). Any other host
 * pointer is refused (TUBELET_ERR_ARG, and the entry's launches skipped): an entry never copies
 * host memory to the GPU. Bisections and no lock: the model's ranges change only at load and
 * free, when no pass runs, and an instance's own only on its state's thread. */
static const void *dev(tb_cuda *cx, const void *p) {
    if (!p) return NULL;
    const char *h = (const char *)p;
    const tb_cuda *mx = cx->model;
    const tb_cuda_range *r = range_of(&cx->mem, h);
    if (!r) r = range_of(&mx->up, h);
    if (!r && cx != mx) r = range_of(&cx->up, h);
    if (r) return r->dev + (h - r->host);
    cudaPointerAttributes a;
    if (cudaPointerGetAttributes(&a, p) == cudaSuccess &&
        (a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged))
        return p;
    cudaGetLastError(); /* the query's own error, if any: the refusal below is the failure */
    fail(cx, TUBELET_ERR_ARG);
    cx->refused = 1;
    return NULL;
}
const void *tb_cuda_dev(tb_cuda *cx, const void *p) { return dev(cx, p); }

/* ---- memory ---- */
/* A state's instance lists what it allocates, for dev(); a model's does not (its states allocate
 * through it on several threads), and dev() asks the driver about that memory. */
extern "C" void *tb_cuda_mem_alloc(void *ctx, size_t bytes) {
    tb_cuda *cx = (tb_cuda *)ctx;
    void *p = NULL;
    const size_t n = bytes ? bytes : 1;
    if (cudaMalloc(&p, n) != cudaSuccess) return NULL;
    /* zeroed before return: a model's memory is read on its states' streams */
    if (cudaMemsetAsync(p, 0, bytes, cx->stream) != cudaSuccess ||
        cudaStreamSynchronize(cx->stream) != cudaSuccess ||
        (cx != cx->model && !range_insert(&cx->mem, tb_cuda_range{(char *)p, n, (char *)p}))) {
        cudaFree(p);
        return NULL;
    }
    return p;
}
/* (memory freed through another instance than its own stays in the first's list: harmless, as a
 * device address is never a host one) */
extern "C" void tb_cuda_mem_free(void *ctx, void *p) {
    tb_cuda *cx = (tb_cuda *)ctx;
    if (!p) return;
    range_remove(&cx->mem, (const char *)p);
    cudaFree(p);
}
extern "C" void tb_cuda_to_host(void *ctx, void *dst, const void *src, size_t bytes) {
    tb_cuda *cx = (tb_cuda *)ctx;
    copy_out(cx, dst, src, bytes);
}
extern "C" void tb_cuda_zero(void *ctx, float *x, int64_t n) {
    tb_cuda *cx = (tb_cuda *)ctx;
    CK(cudaMemsetAsync(x, 0, sizeof(float) * (size_t)n, cx->stream));
}
extern "C" void tb_cuda_copy(void *ctx, float *dst, const float *src, int64_t n) {
    tb_cuda *cx = (tb_cuda *)ctx;
    const float *s = DEVF(src);
    if (s)
        CK(cudaMemcpyAsync(dst, s, sizeof(float) * (size_t)n, cudaMemcpyDeviceToDevice,
                           cx->stream));
}

/* Feature maps: transposed on the GPU into a temporary, then one copy to the caller. */
__global__ void k_maps(float *dst, const float *src, const int32_t *rows, int64_t B, int64_t N,
                       int64_t n) {
    const int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; /* (b, d, r) */
    if (i >= B * n * N) return;
    const int64_t r = i % N, d = i / N % n, b = i / (N * n);
    dst[i] = src[(rows ? (int64_t)rows[b * N + r] : b * N + r) * n + d];
}
extern "C" void tb_cuda_to_host_maps(void *ctx, float *dst, const float *src, const int32_t *rows,
                                     int64_t B, int64_t N, int64_t n) {
    tb_cuda *cx = (tb_cuda *)ctx;
    const int32_t *r = DEVI(rows);
    float *t = NULL;
    if (cudaMalloc(&t, sizeof(float) * (size_t)(B * N * n)) != cudaSuccess) {
        fail(cx, TUBELET_ERR_MEMORY);
        return;
    }
    LAUNCH(k_maps, blocks(B * N * n), 256)(t, src, r, B, N, n);
    LAUNCHED();
    copy_out(cx, dst, t, sizeof(float) * (size_t)(B * N * n));
    cudaFree(t);
}

/* ---- the linear layer: cuBLASLt, fp32 compute (no TF32), bias in the epilogue ----
 * Row-major y (M x N) = x (M x K) W^T is, in cuBLAS's column-major terms, y^T (N x M, ld ldy) =
 * op(W) x^T with W read as a K x N column-major matrix transposed: no copy of either operand.
 * The exact GELU is not a cuBLASLt epilogue (its GELU is the tanh form), so linear_act runs the
 * bias epilogue and then the activation kernel. */
#define WS_BYTES ((size_t)32 << 20)

/* The instance's cuBLASLt handle and workspace, made on its first product. */
static int lt_ready(tb_cuda *cx) {
    if (cx->lt) return 1;
    if (cublasLtCreate(&cx->lt) != CUBLAS_STATUS_SUCCESS) return 0;
    if (cudaMalloc(&cx->ws, WS_BYTES) != cudaSuccess) cx->ws = NULL;
    return 1;
}

/* The largest power of two up to 256 that divides the address (cuBLASLt's alignment terms). */
static uint32_t align_of(const void *p) {
    uint32_t a = 256;
    while (a > 4 && (uintptr_t)p % a) a /= 2;
    return a;
}

/* ---- bf16: 16-bit storage handled as its bits (uint16_t) ----
 * Plain bit operations rather than cuda_bf16.h's __nv_bfloat16: nvcc and the emulator's g++ take
 * the same source, and the rounding is visibly the CPU's (tb_bf16_from_f32 in lowp.c: nearest
 * even, NaN kept quiet), so the GPU rounds the weights, activations and attention operands to
 * the very values the CPU's bf16 path does. cuBLASLt only reads the storage (CUDA_R_16BF). */
__device__ uint16_t bf16_bits(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1u); /* round to nearest, ties to even */
    return (uint16_t)(u >> 16);
}
/* x rounded to bf16, as an fp32 value (exact: bf16 is fp32's upper half) */
__device__ float bf16_round(float x) {
    const uint32_t u = (uint32_t)bf16_bits(x) << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
__global__ void k_to_bf16(uint16_t *dst, const float *src, int64_t n) {
    const int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i < n) dst[i] = bf16_bits(src[i]);
}

/* The bf16 copy of a linear layer's input: one grow-only device buffer; the product that reads it
 * runs on the default stream before the next conversion overwrites it. */
static uint16_t *bf16_scratch(tb_cuda *cx, size_t n) {
    if (n > cx->xb_cap) {
        if (cx->xb) cudaFree(cx->xb); /* cudaFree waits for the products reading it */
        cx->xb = NULL, cx->xb_cap = 0;
        if (cudaMalloc(&cx->xb, sizeof(uint16_t) * n) != cudaSuccess) return cx->xb = NULL;
        cx->xb_cap = n;
    }
    return cx->xb;
}

/* cuBLASLt's descriptors and its heuristic's pick for one kind of product, made on its first call
 * and kept: the operations, the shape, the leading dimensions, the operands' alignments (the pick
 * may assume them), bf16 or fp32 operands and the bias epilogue tell kinds apart; the bias
 * pointer is set on the kept descriptor per call. A model's forward and backward run a few dozen
 * kinds; past LT_PLANS, the oldest entry is replaced. */
/* (lt_plan and LT_PLANS: common.h; the plans live in the instance) */

static void lt_plan_clear(lt_plan *p) {
    if (p->lc) cublasLtMatrixLayoutDestroy(p->lc);
    if (p->lb) cublasLtMatrixLayoutDestroy(p->lb);
    if (p->la) cublasLtMatrixLayoutDestroy(p->la);
    if (p->op) cublasLtMatmulDescDestroy(p->op);
    memset(p, 0, sizeof *p);
    p->m = -1; /* matches no call */
}

/* The plan of C (m x n, column-major) = op(A) op(B) [+ C] [+ bias]; NULL if cuBLASLt has no
 * kernel for it. */
static lt_plan *lt_plan_for(tb_cuda *cx, const lt_plan *want) {
    for (int i = 0; i < cx->n_plans; i++) {
        lt_plan *p = &cx->plans[i];
        if (p->ta == want->ta && p->tb == want->tb && p->m == want->m && p->n == want->n &&
            p->k == want->k && p->lda == want->lda && p->ldb == want->ldb &&
            p->ldc == want->ldc && p->bf16 == want->bf16 && p->bias == want->bias &&
            !memcmp(p->al, want->al, sizeof p->al))
            return p;
    }
    lt_plan *p = &cx->plans[cx->n_plans < LT_PLANS ? cx->n_plans++ : cx->next_plan++ % LT_PLANS];
    lt_plan_clear(p);
    const int64_t m = want->m, n = want->n, k = want->k;
    const cublasOperation_t ta = want->ta, tb = want->tb;
    const cudaDataType_t ab = want->bf16 ? CUDA_R_16BF : CUDA_R_32F;
    int ok = cublasLtMatmulDescCreate(&p->op, CUBLAS_COMPUTE_32F, CUDA_R_32F) == 0 &&
             cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta,
                                            sizeof ta) == 0 &&
             cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb,
                                            sizeof tb) == 0;
    if (ok && want->bias) {
        const cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
        ok = cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi,
                                            sizeof epi) == 0;
    }
    ok = ok &&
         cublasLtMatrixLayoutCreate(&p->la, ab, (uint64_t)(ta == CUBLAS_OP_N ? m : k),
                                    (uint64_t)(ta == CUBLAS_OP_N ? k : m), want->lda) == 0 &&
         cublasLtMatrixLayoutCreate(&p->lb, ab, (uint64_t)(tb == CUBLAS_OP_N ? k : n),
                                    (uint64_t)(tb == CUBLAS_OP_N ? n : k), want->ldb) == 0 &&
         cublasLtMatrixLayoutCreate(&p->lc, CUDA_R_32F, (uint64_t)m, (uint64_t)n,
                                    want->ldc) == 0;
    /* the kernel cuBLASLt's heuristic picks for these pointers' alignment (operands inside the
     * state's buffers, q/k/v columns, need not be 16-byte aligned) */
    static const cublasLtMatmulPreferenceAttributes_t al_attr[4] = {
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
    cublasLtMatmulPreference_t pref = NULL;
    cublasLtMatmulHeuristicResult_t heur;
    int found = 0;
    const uint64_t ws = cx->ws ? WS_BYTES : 0;
    ok = ok && cublasLtMatmulPreferenceCreate(&pref) == 0 &&
         cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                              sizeof ws) == 0;
    for (int i = 0; i < 4 && ok; i++)
        ok = cublasLtMatmulPreferenceSetAttribute(pref, al_attr[i], &want->al[i],
                                                  sizeof want->al[i]) == 0;
    ok = ok &&
         cublasLtMatmulAlgoGetHeuristic(cx->lt, p->op, p->la, p->lb, p->lc, p->lc, pref, 1, &heur,
                                        &found) == 0 &&
         found > 0;
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (!ok) {
        lt_plan_clear(p);
        return NULL;
    }
    p->ta = ta, p->tb = tb, p->m = m, p->n = n, p->k = k, p->lda = want->lda;
    p->ldb = want->ldb, p->ldc = want->ldc, p->bf16 = want->bf16, p->bias = want->bias;
    p->algo = heur.algo;
    memcpy(p->al, want->al, sizeof p->al);
    return p;
}

/* C (m x n, column-major, ld ldc; fp32) = op(A) op(B) + bias [+ C]: every product of the backend,
 * the forward's and the backward's. bf16: A and B are bf16 (CUDA_R_16BF), accumulated in fp32
 * (CUBLAS_COMPUTE_32F) with the fp32 bias added in the epilogue (its type is D's, fp32). */
void tb_cuda_gemm(tb_cuda *cx, cublasOperation_t ta, cublasOperation_t tb, int64_t m, int64_t n,
                  int64_t k, const void *A, int64_t lda, const void *B, int64_t ldb, int accumulate,
                  float *C, int64_t ldc, const float *bias, int bf16) {
    if (cx->refused) return; /* an operand was a host pointer (dev) */
    if (!lt_ready(cx)) return fail(cx, TUBELET_ERR_UNSUPPORTED);
    lt_plan want;
    memset(&want, 0, sizeof want);
    want.ta = ta, want.tb = tb, want.m = m, want.n = n, want.k = k;
    want.lda = lda, want.ldb = ldb, want.ldc = ldc, want.bf16 = bf16, want.bias = bias != NULL;
    want.al[0] = align_of(A), want.al[1] = align_of(B), want.al[2] = want.al[3] = align_of(C);
    lt_plan *p = lt_plan_for(cx, &want);
    const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
    const int ok =
        p &&
        (!bias || cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                                 sizeof bias) == 0) &&
        cublasLtMatmul(cx->lt, p->op, &alpha, A, p->la, B, p->lb, &beta, C, p->lc, C, p->lc,
                       &p->algo, cx->ws, cx->ws ? WS_BYTES : 0,
                       cx->stream) == CUBLAS_STATUS_SUCCESS;
    if (!ok) fail(cx, TUBELET_ERR_UNSUPPORTED);
}

/* Row-major y (M x N) = x W^T + b [+ y] is, column-major, y^T (N x M, ld ldy) = op(W) x^T with W
 * read as a K x N matrix transposed: A = W, B = x (K x M), no copy of either. */
static void gemm_bias(tb_cuda *cx, float *y, int64_t ldy, const void *x, const void *W,
                      const float *b, int64_t M, int64_t N, int64_t K, int accumulate, int bf16) {
    tb_cuda_gemm(cx, CUBLAS_OP_T, CUBLAS_OP_N, N, M, K, W, K, x, K, accumulate, y, ldy, b, bf16);
}

/* A packed (uploaded) weight: what pack_add returns as the opaque tb_qweight. */
typedef struct {
    void *W; /* device, N x K: fp32, or bf16 (bf16 set) */
    int bf16;
    int64_t N, K;
    char name[TB_LAYER_NAME];
} cuda_weight;
typedef struct {
    cuda_weight *w;
    int n, cap;
    int bf16; /* precision bf16: pack_add stores the weights so */
} cuda_pack;

/* A bf16 weight takes its input rounded to bf16 (k_to_bf16 into the instance's xb), as the CPU's
 * bf16 matmul does (lowp.c's to_bf16); the output and the bias stay fp32. */
extern "C" void tb_cuda_linear(void *ctx, tb_lowp_ctx *c, float *y, int64_t ldy, const float *x,
                               const tb_lin *l, const float *b, int64_t M, int64_t N, int64_t K,
                               int accumulate) {
    tb_cuda *cx = (tb_cuda *)ctx;
    (void)c;
    const cuda_weight *w = (const cuda_weight *)l->q;
    const float *bd = DEVF(b), *xd = DEVF(x);
    if (!w || !w->bf16)
        return gemm_bias(cx, y, ldy, xd, w ? w->W : DEVF(l->w), bd, M, N, K, accumulate, 0);
    uint16_t *xb = bf16_scratch(cx, (size_t)(M * K));
    if (!xb) return fail(cx, TUBELET_ERR_MEMORY);
    LAUNCH(k_to_bf16, blocks(M * K), 256)(xb, xd, M * K);
    LAUNCHED();
    gemm_bias(cx, y, ldy, xb, w->W, bd, M, N, K, accumulate, 1);
}

/* ---- element-wise and row-wise ---- */
__global__ void k_bias_act(float *x, const float *bias, int64_t rows, int64_t n, int act) {
    const int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i < rows * n) x[i] = tb_act_ref(x[i] + (bias ? bias[i % n] : 0.0f), (tb_act)act); /* ops.h */
}
extern "C" void tb_cuda_bias_act(void *ctx, float *x, const float *bias, int64_t rows, int64_t n,
                                 tb_act act) {
    tb_cuda *cx = (tb_cuda *)ctx;
    LAUNCH(k_bias_act, blocks(rows * n), 256)(x, DEVF(bias), rows, n, (int)act);
    LAUNCHED();
}

extern "C" void tb_cuda_linear_act(void *ctx, tb_lowp_ctx *c, float *y, const float *x,
                                   const tb_lin *l, int64_t M, int64_t N, int64_t K, tb_act act) {
    tb_cuda *cx = (tb_cuda *)ctx;
    tb_cuda_linear(ctx, c, y, N, x, l, l->b, M, N, K, 0);
    LAUNCH(k_bias_act, blocks(M * N), 256)(y, NULL, M, N, (int)act);
    LAUNCHED();
}

__global__ void k_scale_cols(float *y, const float *lambda, int64_t rows, int64_t n) {
    const int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i < rows * n) y[i] *= lambda[i % n];
}
extern "C" void tb_cuda_scale_cols(void *ctx, float *y, const float *lambda, int64_t rows,
                                   int64_t n) {
    tb_cuda *cx = (tb_cuda *)ctx;
    LAUNCH(k_scale_cols, blocks(rows * n), 256)(y, DEVF(lambda), rows, n);
    LAUNCHED();
}

/* Rotary positions (rope.h): one thread per (row, head, axis) slice, tb_rope_slice as on the
 * CPU. */
__global__ void k_rope(float *x, int64_t ld, int64_t rows, const int32_t *pos, int heads,
                       int head_dim, const float *cs, int backward) {
    const int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i >= rows * heads * 3) return;
    const int w = tb_rope_slice_width(head_dim), a = (int)(i % 3), h = (int)(i / 3 % heads);
    const int64_t r = i / 3 / heads;
    const float *C = cs + 2 * (int64_t)w * pos[3 * r + a];
    tb_rope_slice(x + r * ld + (int64_t)h * head_dim + a * w, C, C + w, w, backward);
}
extern "C" void tb_cuda_rope(void *ctx, float *x, int64_t ld, int64_t rows, const int32_t *pos,
                             int heads, int head_dim, const float *cs, int64_t cs_floats,
                             int backward) {
    tb_cuda *cx = (tb_cuda *)ctx;
    (void)cs_floats; /* the table is a state's upload or device memory: dev() needs no size */
    if (rows <= 0 || !tb_rope_slice_width(head_dim)) return;
    const int32_t *p = DEVI(pos);
    LAUNCH(k_rope, blocks(rows * heads * 3), 256)(x, ld, rows, p, heads, head_dim,
                                                   DEVF(cs), backward);
    LAUNCHED();
}

/* LayerNorm: one block of 256 threads per row; two passes (mean, then the centred variance) as
 * the CPU's, so that a row with a large mean loses no precision (block_sum: common.h). */
__global__ void k_layernorm(float *y, int64_t ldy, const float *x, int64_t ldx, const float *w,
                            const float *b, int64_t n, float eps) {
    __shared__ float sh[32];
    const float *xr = x + blockIdx.x * ldx;
    float *yr = y + blockIdx.x * ldy;
    float s = 0.0f;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) s += xr[j];
    const float mean = block_sum(s, sh) / (float)n;
    float q = 0.0f;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) q += (xr[j] - mean) * (xr[j] - mean);
    const float rstd = rsqrtf(block_sum(q, sh) / (float)n + eps);
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
        yr[j] = (xr[j] - mean) * rstd * w[j] + b[j];
}
extern "C" void tb_cuda_layernorm(void *ctx, float *y, int64_t ldy, const float *x, int64_t ldx,
                                  const float *w, const float *b, int64_t rows, int64_t n,
                                  float eps) {
    tb_cuda *cx = (tb_cuda *)ctx;
    if (rows <= 0) return;
    const float *wd = DEVF(w), *bd = DEVF(b);
    LAUNCH(k_layernorm, (unsigned)rows, 256)(y, ldy, x, ldx, wd, bd, n, eps);
    LAUNCHED();
}

/* Drop path and layer scale's residual: y[r] (+)= keep[group of r] x[r] over the members r, one
 * thread per element; the group of a ragged grouping's member by binary search of start. */
__device__ int64_t group_of(const int64_t *start, int64_t n_groups, int64_t group_len,
                            int64_t i) {
    if (!start) return i / group_len;
    int64_t lo = 0, hi = n_groups - 1; /* the last group starting at or before i */
    while (lo < hi) {
        const int64_t mid = (lo + hi + 1) / 2;
        if (start[mid] <= i) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}
__global__ void k_scale_rows(float *y, const float *x, const float *keep, const int64_t *start,
                             int64_t n_groups, int64_t group_len, int64_t rows, int64_t C,
                             int add) {
    const int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (e >= rows * C) return;
    const float k = keep ? keep[group_of(start, n_groups, group_len, e / C)] : 1.0f;
    y[e] = add ? y[e] + k * x[e] : k * x[e];
}
extern "C" void tb_cuda_scale_rows(void *ctx, float *y, const float *x, const float *keep,
                                   const tb_grouping *g, int64_t C, int add) {
    tb_cuda *cx = (tb_cuda *)ctx;
    const int64_t rows = tb_group_members(g); /* g->start: the plan's host table (its copy below) */
    const int64_t *st =
        (const int64_t *)dev(cx, g->start);
    const float *kd = DEVF(keep);
    if (rows <= 0) return;
    LAUNCH(k_scale_rows, blocks(rows * C), 256)(y, x, kd, st, g->n_groups, g->group_len, rows, C,
                                                add);
    LAUNCHED();
}

/* ---- embedding, tokens, pooling ---- */
/* One thread per element of the patch matrix: (patch, channel, dt, dy, dx) */
__global__ void k_patchify(float *patches, const float *pix, tb_patch_geom g) {
    const int64_t K = g.C * g.t * g.ph * g.pw;
    const int64_t n = g.B * g.gt * g.gh * g.gw * K;
    const int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i >= n) return;
    const int64_t k = i % K, p = i / K;
    const int64_t dx = k % g.pw, dy = k / g.pw % g.ph, dt = k / (g.pw * g.ph) % g.t,
                  ch = k / (g.pw * g.ph * g.t);
    const int64_t ix = p % g.gw, iy = p / g.gw % g.gh, it = p / (g.gw * g.gh) % g.gt,
                  b = p / (g.gw * g.gh * g.gt);
    const int64_t tt = it * g.t + dt, y = iy * g.ph + dy, xx = ix * g.pw + dx;
    patches[i] = tt < g.T && y < g.H && xx < g.W
                     ? pix[(((b * g.T + tt) * g.C + ch) * g.H + y) * g.W + xx]
                     : 0.0f; /* zeros beyond the pixels */
}
extern "C" void tb_cuda_patchify(void *ctx, float *patches, const float *pix,
                                 const tb_patch_geom *g) {
    tb_cuda *cx = (tb_cuda *)ctx;
    const float *p = DEVF(pix); /* the pass's copy of the caller's pixels (tb_state_input) */
    const int64_t n = g->B * g->gt * g->gh * g->gw * g->C * g->t * g->ph * g->pw;
    LAUNCH(k_patchify, blocks(n), 256)(patches, p, *g);
    LAUNCHED();
}

__global__ void k_add_rows(float *y, int64_t ldy, const float *a, int64_t lda, const float *b,
                           int64_t ldb, const int32_t *b_idx, const float *c, int64_t ldc,
                           int64_t rows, int64_t n) {
    const int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (e >= rows * n) return;
    const int64_t i = e / n, d = e % n;
    float v = a[i * lda + d] + b[(b_idx ? (int64_t)b_idx[i] : i) * ldb + d];
    if (c) v += c[i * ldc + d];
    y[i * ldy + d] = v;
}
/* ldy 0 (every row summed into one, in order): one thread per column walks the rows. */
__global__ void k_sum_rows(float *y, const float *a, int64_t lda, const float *b, int64_t ldb,
                           const int32_t *b_idx, const float *c, int64_t ldc, int64_t rows,
                           int64_t n) {
    const int64_t d = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (d >= n) return;
    for (int64_t i = 0; i < rows; i++) { /* a may be y itself (lda 0): read after each write */
        float v = a[i * lda + d] + b[(b_idx ? (int64_t)b_idx[i] : i) * ldb + d];
        if (c) v += c[i * ldc + d];
        y[d] = v;
    }
}
extern "C" void tb_cuda_add_rows(void *ctx, float *y, int64_t ldy, const float *a, int64_t lda,
                                 const float *b, int64_t ldb, const int32_t *b_idx, const float *c,
                                 int64_t ldc, int64_t rows, int64_t n) {
    tb_cuda *cx = (tb_cuda *)ctx;
    if (rows <= 0) return;
    const int32_t *bi = DEVI(b_idx);
    const float *ad = DEVF(a), *bd = DEVF(b);
    const float *cd = DEVF(c);
    if (ldy == 0) LAUNCH(k_sum_rows, blocks(n), 256)(y, ad, lda, bd, ldb, bi, cd, ldc, rows, n);
    else LAUNCH(k_add_rows, blocks(rows * n), 256)(y, ldy, ad, lda, bd, ldb, bi, cd, ldc, rows, n);
    LAUNCHED();
}

/* Pooling: one thread per (sequence, column), the sum in double as the CPU's. */
__global__ void k_mean_rows(float *out, const float *x, int64_t n_seq, int64_t L, int64_t n) {
    const int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (e >= n_seq * n) return;
    const int64_t i = e / n, d = e % n;
    double acc = 0;
    for (int64_t j = 0; j < L; j++) acc += x[(i * L + j) * n + d];
    out[e] = (float)(acc / (double)L);
}
extern "C" void tb_cuda_mean_rows(void *ctx, float *out, const float *x, int64_t n_seq, int64_t L,
                                  int64_t n) {
    tb_cuda *cx = (tb_cuda *)ctx;
    LAUNCH(k_mean_rows, blocks(n_seq * n), 256)(out, x, n_seq, L, n);
    LAUNCHED();
}

/* ---- token movements ---- */
__device__ float row_scale(const int32_t *idx, int64_t i, const float *row_w,
                           const float *item_w, int64_t per) {
    float s = row_w ? row_w[idx[i]] : 1.0f;
    return item_w ? s * item_w[i / per] : s;
}
__global__ void k_gather(float *dst, const float *src, const int32_t *idx, int64_t n, int64_t C,
                         const float *row_w, const float *item_w, int64_t per) {
    const int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (e >= n * C) return;
    const int64_t i = e / C, j = e % C;
    dst[e] = idx[i] < 0 ? 0.0f
                        : row_scale(idx, i, row_w, item_w, per) * src[(int64_t)idx[i] * C + j];
}
/* The number of rows an index array addresses (host memory): its largest entry + 1. */
extern "C" void tb_cuda_gather_rows(void *ctx, float *dst, const float *src, const int32_t *idx,
                                    int64_t n, int64_t C, const float *row_w, const float *item_w,
                                    int64_t per) {
    tb_cuda *cx = (tb_cuda *)ctx;
    const float *rw = DEVF(row_w), *iw = item_w ? DEVF(item_w) : NULL;
    LAUNCH(k_gather, blocks(n * C), 256)(dst, DEVF(src), DEVI(idx), n, C, rw, iw, per);
    LAUNCHED();
}
/* Not shared: one writer per destination row, so one thread per element. Shared: one thread per
 * column walks i in order, so that each sum keeps the CPU's order. */
__global__ void k_scatter(float *dst, const float *src, const int32_t *idx, int64_t n, int64_t C,
                          int add, const float *row_w, const float *item_w, int64_t per) {
    const int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (e >= n * C) return;
    const int64_t i = e / C, j = e % C;
    if (idx[i] < 0) return;
    float *d = dst + (int64_t)idx[i] * C + j;
    const float v = row_scale(idx, i, row_w, item_w, per) * src[e];
    *d = add ? *d + v : v;
}
__global__ void k_scatter_shared(float *dst, const float *src, const int32_t *idx, int64_t n,
                                 int64_t C, int add, const float *row_w, const float *item_w,
                                 int64_t per) {
    const int64_t j = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (j >= C) return;
    for (int64_t i = 0; i < n; i++) {
        if (idx[i] < 0) continue;
        float *d = dst + (int64_t)idx[i] * C + j;
        const float v = row_scale(idx, i, row_w, item_w, per) * src[i * C + j];
        *d = add ? *d + v : v;
    }
}
extern "C" void tb_cuda_scatter_rows(void *ctx, float *dst, const float *src, const int32_t *idx,
                                     int64_t n, int64_t C, int add, const float *row_w,
                                     const float *item_w, int64_t per, int shared) {
    tb_cuda *cx = (tb_cuda *)ctx;
    const float *rw = DEVF(row_w), *iw = item_w ? DEVF(item_w) : NULL;
    const float *s = DEVF(src);
    const int32_t *id = DEVI(idx);
    if (shared) LAUNCH(k_scatter_shared, blocks(C), 256)(dst, s, id, n, C, add, rw, iw, per);
    else LAUNCH(k_scatter, blocks(n * C), 256)(dst, s, id, n, C, add, rw, iw, per);
    LAUNCHED();
}

__global__ void k_copy_block(float *dst, int64_t ldd, const int32_t *dst_idx, const float *src,
                             int64_t lds, const int32_t *src_idx, int64_t n, int64_t w) {
    const int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (e >= n * w) return;
    const int64_t i = e / w, j = e % w;
    dst[(dst_idx ? (int64_t)dst_idx[i] : i) * ldd + j] =
        src[(src_idx ? (int64_t)src_idx[i] : i) * lds + j];
}
extern "C" void tb_cuda_copy_block(void *ctx, float *dst, int64_t ldd, const int32_t *dst_idx,
                                   const float *src, int64_t lds, const int32_t *src_idx, int64_t n,
                                   int64_t w) {
    tb_cuda *cx = (tb_cuda *)ctx;
    const int32_t *di = DEVI(dst_idx), *si = DEVI(src_idx);
    LAUNCH(k_copy_block, blocks(n * w), 256)(dst, ldd, di, src, lds, si, n, w);
    LAUNCHED();
}

__global__ void k_bias_lookup(float *bias, const float *table, const int32_t *rel, int64_t heads,
                              int64_t n) {
    const int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (e < heads * n) bias[e] = table[(int64_t)rel[e % n] * heads + e / n];
}
extern "C" void tb_cuda_bias_lookup(void *ctx, float *bias, const float *table, const int32_t *rel,
                                    int64_t heads, int64_t n) {
    tb_cuda *cx = (tb_cuda *)ctx;
    const int32_t *rd = DEVI(rel);
    const float *td = DEVF(table);
    LAUNCH(k_bias_lookup, blocks(heads * n), 256)(bias, td, rd, heads, n);
    LAUNCHED();
}

/* The grouping's and the bias's arrays where the kernels read them (dev(): the plan's tables are
 * the state's uploads, the bias table a model tensor or device memory): the members' rows, the
 * ragged starts, the bias, the masks and mask_index; dbias as given (device memory). The
 * forward's and the backward's attention both. */
int tb_cuda_attention_args(tb_cuda *cx, const tb_grouping *g, const tb_attn_bias *bias,
                           int head_dim, tb_grouping *gd, tb_grouping *kd, tb_attn_bias *bd) {
    if (head_dim > ATT_D) return TUBELET_ERR_UNSUPPORTED;
    /* as the CPU's: a bias needs one length and self-attention (its tables are L x L) */
    if (bias && (g->start || g->kv)) return TUBELET_ERR_ARG;
    if (g->kv && g->kv->n_groups != g->n_groups) return TUBELET_ERR_ARG;
    *gd = *g;
    gd->kv = NULL; /* a host pointer: the kernels take the keys' grouping as kd */
    gd->rows = DEVI(g->rows);
    gd->start = (const int64_t *)dev(cx, g->start);
    *kd = *gd;
    if (g->kv) { /* cross-attention: the keys' and values' own rows and lengths */
        const tb_grouping *k = g->kv;
        *kd = *k;
        kd->kv = NULL;
        kd->rows = DEVI(k->rows);
        kd->start = (const int64_t *)dev(cx, k->start);
    }
    *bd = tb_attn_bias{};
    if (!bias) return TUBELET_OK;
    *bd = *bias;
    bd->bias = DEVF(bias->bias);
    bd->mask = DEVF(bias->mask);
    bd->mask_index = DEVI(bias->mask_index);
    return TUBELET_OK;
}

/* ---- attention: one flash kernel for every grouping ----
 * A block of ATT_Q threads takes ATT_Q queries of one (group, head); each thread owns one query
 * row: its q and its output accumulator in registers (head_dim <= ATT_D), and walks the group's
 * keys (gk's group: the kv grouping's for cross-attention, else the group's own members) in
 * tiles of ATT_K that the block stages in shared memory, with the online softmax (running
 * max m, running sum l, the accumulator rescaled by exp(m_old - m_new)). fp32 throughout.
 * One thread per query row keeps the grouping's indirection (rows, ragged starts) and the
 * additive bias/mask (Swin) to a few lines; tensor-core tiles (bf16 mma) are the speed work left.
 * bf16 (the model's attn_bf16, without a bias: the CPU's meaning, attention.c's attend_fused):
 * q (already scaled), k, v and each probability rounded to bf16 for the two products; the scores,
 * the softmax's max and sum (of the unrounded probabilities) and the accumulator stay fp32. */
#define ATT_Q 64
#define ATT_K 32

__global__ void k_attention(float *out, const float *q, const float *k, const float *v,
                            int64_t ld, tb_grouping g, tb_grouping gk, int heads, int hd,
                            float scale, tb_attn_bias bias, int64_t L, int bf16) {
    __shared__ float Ks[ATT_K][ATT_D], Vs[ATT_K][ATT_D];
    const int64_t grp = blockIdx.y;
    const int h = blockIdx.z;
    const int64_t first = g.start ? g.start[grp] : grp * g.group_len;
    const int64_t size = g.start ? g.start[grp + 1] - first : g.group_len;
    const int64_t kfirst = gk.start ? gk.start[grp] : grp * gk.group_len; /* the group's keys */
    const int64_t ksize = gk.start ? gk.start[grp + 1] - kfirst : gk.group_len;
    const int64_t qi = (int64_t)blockIdx.x * ATT_Q + threadIdx.x;
    if ((int64_t)blockIdx.x * ATT_Q >= size) return; /* the whole block: no __syncthreads below */
    const int active = qi < size;
    float qr[ATT_D], acc[ATT_D];
    if (active) {
        const int64_t row = g.rows ? g.rows[first + qi] : first + qi;
        for (int d = 0; d < hd; d++) {
            const float qs = q[row * ld + h * hd + d] * scale;
            qr[d] = bf16 ? bf16_round(qs) : qs, acc[d] = 0.0f;
        }
    }
    const float *brow = bias.bias && active ? bias.bias + ((int64_t)h * L + qi) * L : NULL;
    const float *mrow = NULL;
    if (bias.mask && active) {
        const int64_t mi = bias.mask_index ? bias.mask_index[grp % bias.n_masks]
                                           : grp % bias.n_masks;
        mrow = bias.mask + (mi * L + qi) * L;
    }
    float m = -INFINITY, l = 0.0f;
    for (int64_t j0 = 0; j0 < ksize; j0 += ATT_K) {
        const int64_t nk = ksize - j0 < ATT_K ? ksize - j0 : ATT_K;
        __syncthreads(); /* the last tile is read by all */
        for (int64_t e = threadIdx.x; e < nk * hd; e += blockDim.x) {
            const int64_t j = e / hd, d = e % hd, m_ = kfirst + j0 + j;
            const int64_t row = gk.rows ? gk.rows[m_] : m_;
            const float kv = k[row * ld + h * hd + d], vv = v[row * ld + h * hd + d];
            Ks[j][d] = bf16 ? bf16_round(kv) : kv;
            Vs[j][d] = bf16 ? bf16_round(vv) : vv;
        }
        __syncthreads();
        if (!active) continue;
        for (int64_t j = 0; j < nk; j++) {
            float s = 0.0f;
            for (int d = 0; d < hd; d++) s += qr[d] * Ks[j][d];
            if (brow) s += brow[j0 + j];
            if (mrow) s += mrow[j0 + j];
            const float mn = fmaxf(m, s), corr = expf(m - mn), p = expf(s - mn);
            const float pb = bf16 ? bf16_round(p) : p;
            l = l * corr + p;
            for (int d = 0; d < hd; d++) acc[d] = acc[d] * corr + pb * Vs[j][d];
            m = mn;
        }
    }
    if (!active) return;
    float *o = out + (first + qi) * (int64_t)heads * hd + (int64_t)h * hd;
    for (int d = 0; d < hd; d++) o[d] = acc[d] / l;
}

/* ---- the bf16 attention on tensor cores: WMMA 16x16x16 tiles ----
 * The same meaning as k_attention's bf16 path (no bias or mask; head_dim a multiple of 16, at
 * most 128), on the tensor cores. A block of TC_WARPS warps takes 16 queries per warp of one
 * (group, head) and stages TC_K keys and values at a time, rounded to bf16, in shared memory.
 * Each warp: its 16 x TC_K scores by WMMA (bf16 products, fp32 sums) into shared memory; lanes
 * 0-15 the online softmax of one row each (max, rescale, probabilities rounded to bf16 for the
 * product, the sum of the unrounded ones); then O += P V by WMMA. O lives in shared memory in
 * fp32, not in accumulator fragments, because the rows must be rescaled and a fragment's mapping
 * of elements to rows is unspecified. Scores, sums and O stay fp32 throughout. */
#define TC_WARPS 4
#define TC_K 32

/* The block's dynamic shared memory, 128-byte aligned pieces: K and V tiles (bf16, rows of ldh),
 * then per warp its Q rows (bf16), scores S (fp32), probabilities P (bf16, rows of ldp), output
 * O (fp32, rows of ldo) and row statistics (m, l, correction). */
typedef struct {
    int ldh, ldp, ldo;
    size_t k, v, warps, per_warp, q, s, p, o, stats, bytes;
} tc_layout;
__host__ __device__ inline size_t tc_up(size_t b) { return (b + 127) & ~(size_t)127; }
__host__ __device__ inline tc_layout tc_layout_of(int hd) {
    tc_layout t;
    t.ldh = hd + 8, t.ldp = TC_K + 8, t.ldo = hd + 4; /* padded: fewer bank conflicts */
    t.k = 0, t.v = tc_up((size_t)TC_K * t.ldh * 2), t.warps = 2 * t.v;
    t.q = 0, t.s = tc_up((size_t)16 * t.ldh * 2), t.p = t.s + tc_up(16 * TC_K * 4);
    t.o = t.p + tc_up((size_t)16 * t.ldp * 2), t.stats = t.o + tc_up((size_t)16 * t.ldo * 4);
    t.per_warp = t.stats + tc_up(48 * 4);
    t.bytes = t.warps + TC_WARPS * t.per_warp;
    return t;
}

__global__ void k_attention_tc(float *out, const float *q, const float *k, const float *v,
                               int64_t ld, tb_grouping g, tb_grouping gk, int heads, int hd,
                               float scale) {
    using namespace nvcuda;
    typedef wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc_t;
    DYNAMIC_SHARED(smem);
    const tc_layout t = tc_layout_of(hd);
    const int64_t grp = blockIdx.y;
    const int h = blockIdx.z;
    const int64_t first = g.start ? g.start[grp] : grp * g.group_len;
    const int64_t size = g.start ? g.start[grp + 1] - first : g.group_len;
    const int64_t kfirst = gk.start ? gk.start[grp] : grp * gk.group_len; /* the group's keys */
    const int64_t ksize = gk.start ? gk.start[grp + 1] - kfirst : gk.group_len;
    const int64_t q0 = (int64_t)blockIdx.x * 16 * TC_WARPS;
    if (q0 >= size) return; /* the whole block: no __syncthreads below */
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    uint16_t *Ks = (uint16_t *)(smem + t.k), *Vs = (uint16_t *)(smem + t.v);
    unsigned char *w = smem + t.warps + (size_t)warp * t.per_warp;
    uint16_t *Qs = (uint16_t *)(w + t.q), *P = (uint16_t *)(w + t.p);
    float *S = (float *)(w + t.s), *O = (float *)(w + t.o), *stat = (float *)(w + t.stats);
    const int64_t wq0 = q0 + 16 * warp; /* this warp's first query */
    for (int e = lane; e < 16 * hd; e += 32) { /* q scaled, then rounded; rows past size: 0 */
        const int r = e / hd, d = e % hd;
        const int64_t qi = wq0 + r;
        float x = 0.0f;
        if (qi < size) x = q[(g.rows ? g.rows[first + qi] : first + qi) * ld + h * hd + d] * scale;
        Qs[r * t.ldh + d] = bf16_bits(x), O[r * t.ldo + d] = 0.0f;
    }
    if (lane < 16) stat[lane] = -INFINITY, stat[16 + lane] = 0.0f;
    for (int64_t j0 = 0; j0 < ksize; j0 += TC_K) {
        const int nk = ksize - j0 < TC_K ? (int)(ksize - j0) : TC_K;
        __syncthreads(); /* the last tile is read by all */
        for (int e = threadIdx.x; e < TC_K * hd; e += blockDim.x) { /* keys past size: 0 */
            const int j = e / hd, d = e % hd;
            float kx = 0.0f, vx = 0.0f;
            if (j < nk) {
                const int64_t row = gk.rows ? gk.rows[kfirst + j0 + j] : kfirst + j0 + j;
                kx = k[row * ld + h * hd + d], vx = v[row * ld + h * hd + d];
            }
            Ks[j * t.ldh + d] = bf16_bits(kx), Vs[j * t.ldh + d] = bf16_bits(vx);
        }
        __syncthreads();
        for (int kb = 0; kb < TC_K / 16; kb++) { /* S = Q K^T, 16 keys at a time */
            acc_t acc;
            wmma::fill_fragment(acc, 0.0f);
            for (int kk = 0; kk < hd / 16; kk++) {
                wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> a;
                wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major> b;
                wmma::load_matrix_sync(a, (const __nv_bfloat16 *)Qs + kk * 16, t.ldh);
                wmma::load_matrix_sync(b, (const __nv_bfloat16 *)Ks + kb * 16 * t.ldh + kk * 16,
                                       t.ldh);
                wmma::mma_sync(acc, a, b, acc);
            }
            wmma::store_matrix_sync(S + kb * 16, acc, TC_K, wmma::mem_row_major);
        }
        __syncwarp();
        if (lane < 16) { /* the online softmax of row `lane` */
            const float m = stat[lane];
            float mx = m;
            for (int j = 0; j < nk; j++) mx = fmaxf(mx, S[lane * TC_K + j]);
            const float corr = expf(m - mx);
            float l = stat[16 + lane] * corr;
            for (int j = 0; j < TC_K; j++) {
                const float p = j < nk ? expf(S[lane * TC_K + j] - mx) : 0.0f;
                l += p;
                P[lane * t.ldp + j] = bf16_bits(p);
            }
            stat[lane] = mx, stat[16 + lane] = l, stat[32 + lane] = corr;
        }
        __syncwarp();
        for (int e = lane; e < 16 * hd; e += 32) O[e / hd * t.ldo + e % hd] *= stat[32 + e / hd];
        __syncwarp();
        for (int cb = 0; cb < hd / 16; cb++) { /* O += P V, 16 columns at a time */
            acc_t acc;
            wmma::load_matrix_sync(acc, O + cb * 16, t.ldo, wmma::mem_row_major);
            for (int kk = 0; kk < TC_K / 16; kk++) {
                wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> a;
                wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::row_major> b;
                wmma::load_matrix_sync(a, (const __nv_bfloat16 *)P + kk * 16, t.ldp);
                wmma::load_matrix_sync(b, (const __nv_bfloat16 *)Vs + kk * 16 * t.ldh + cb * 16,
                                       t.ldh);
                wmma::mma_sync(acc, a, b, acc);
            }
            wmma::store_matrix_sync(O + cb * 16, acc, t.ldo, wmma::mem_row_major);
        }
        __syncwarp();
    }
    for (int e = lane; e < 16 * hd; e += 32) {
        const int r = e / hd, d = e % hd;
        const int64_t qi = wq0 + r;
        if (qi < size)
            out[(first + qi) * (int64_t)heads * hd + (int64_t)h * hd + d] =
                O[r * t.ldo + d] / stat[16 + r];
    }
}

extern "C" int tb_cuda_attention(void *ctx, float *out, const float *q, const float *k,
                                 const float *v, int64_t ld, const tb_grouping *g, int heads,
                                 int head_dim, const tb_attn_bias *bias, int bf16, float *scratch,
                                 int n_threads, const tb_attn_dropout *drop) {
    tb_cuda *cx = (tb_cuda *)ctx;
    (void)scratch, (void)n_threads;
    if (drop && drop->p > 0) return TUBELET_ERR_UNSUPPORTED; /* training: backward.cu's */
    tb_grouping gd, kd;
    tb_attn_bias bd;
    const int rc = tb_cuda_attention_args(cx, g, bias, head_dim, &gd, &kd, &bd);
    if (rc) return rc;
    bd.dbias = NULL; /* the forward's */
    const int64_t L = g->group_len;
    const float scale = 1.0f / sqrtf((float)head_dim);
    if (bf16 && !bias && head_dim % 16 == 0) { /* the tensor cores */
        const tc_layout t = tc_layout_of(head_dim);
        const dim3 grid((unsigned)((L + 16 * TC_WARPS - 1) / (16 * TC_WARPS)),
                        (unsigned)g->n_groups, (unsigned)heads);
        CK(cudaFuncSetAttribute(k_attention_tc, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                (int)t.bytes));
        LAUNCH_SHARED(k_attention_tc, grid, 32 * TC_WARPS, t.bytes)(out, q, k, v, ld, gd, kd,
                                                                   heads, head_dim, scale);
        return cudaGetLastError() == cudaSuccess && !cx->status ? TUBELET_OK
                                                                : TUBELET_ERR_UNSUPPORTED;
    }
    const dim3 grid((unsigned)((L + ATT_Q - 1) / ATT_Q), (unsigned)g->n_groups, (unsigned)heads);
    LAUNCH(k_attention, grid, ATT_Q)(out, q, k, v, ld, gd, kd, heads, head_dim, scale, bd, L,
                                     bf16 && !bias);
    return cudaGetLastError() == cudaSuccess && !cx->status ? TUBELET_OK : TUBELET_ERR_UNSUPPORTED;
}

extern "C" int64_t tb_cuda_attention_scratch_floats(void *ctx, int64_t group_len, int head_dim,
                                                    int n_threads) {
    (void)ctx;
    (void)group_len, (void)head_dim, (void)n_threads;
    return 1; /* the kernel keeps its tiles in shared memory */
}

/* ---- weight preparation: weights uploaded once (pack_add), in fp32 or bf16 ----
 * bf16 runs on every GPU this backend accepts (compute capability 8 and later), natively: the
 * CPU's portable path (precision_reference) has no counterpart here, so `native` is ignored. */
extern "C" int tb_cuda_has_native(void *ctx, int precision) {
    (void)ctx;
    return precision == TB_PREC_FP32 || precision == TB_PREC_BF16;
}
extern "C" int tb_cuda_has_attention_bf16(void *ctx) {
    (void)ctx;
    return 1;
}

extern "C" int tb_cuda_pack_new(void *ctx, tb_linear_pack **out, int precision, int native,
                                int max_weights, tb_err *e) {
    (void)ctx;
    (void)native;
    *out = NULL;
    if (precision != TB_PREC_FP32 && precision != TB_PREC_BF16)
        return tb_fail(e, TUBELET_ERR_UNSUPPORTED, "device cuda: precision int8 is not yet "
                       "supported on cuda (fp32 and bf16; docs/cuda.md)");
    cuda_pack *p = (cuda_pack *)calloc(1, sizeof *p);
    if (p) p->w = (cuda_weight *)calloc((size_t)(max_weights > 0 ? max_weights : 1),
                                        sizeof(cuda_weight));
    if (!p || !p->w) {
        if (p) free(p);
        return tb_fail(e, TUBELET_ERR_MEMORY, "out of memory");
    }
    p->cap = max_weights, p->bf16 = precision == TB_PREC_BF16;
    *out = (tb_linear_pack *)p;
    return TUBELET_OK;
}

extern "C" int tb_cuda_pack_add(void *ctx, tb_linear_pack *pk, const char *name, const float *W,
                                int64_t N, int64_t K, const tb_qweight **out, tb_err *e) {
    tb_cuda *cx = (tb_cuda *)ctx;
    cuda_pack *p = (cuda_pack *)pk;
    if (p->n >= p->cap) return tb_fail(e, TUBELET_ERR_ARG, "device cuda: more layers than counted");
    cuda_weight *w = &p->w[p->n];
    const size_t bytes = sizeof(float) * (size_t)(N * K);
    /* bf16: the fp32 weight goes up into a temporary, then k_to_bf16 rounds it into its home
     * (the rounding of the activations, on the GPU) */
    float *f = NULL;
    w->W = NULL;
    if (cudaMalloc(&f, bytes) != cudaSuccess ||
        (p->bf16 && cudaMalloc(&w->W, bytes / 2) != cudaSuccess)) {
        cudaFree(f);
        return tb_fail(e, TUBELET_ERR_MEMORY, "device cuda: out of GPU memory for layer %s", name);
    }
    int ok = copy_in(cx, f, W, bytes);
    if (p->bf16 && ok) LAUNCH(k_to_bf16, blocks(N * K), 256)((uint16_t *)w->W, f, N * K);
    /* waited for: the states' streams read the weight, and the temporary is freed */
    ok = ok && cudaGetLastError() == cudaSuccess &&
         cudaStreamSynchronize(cx->stream) == cudaSuccess;
    if (p->bf16) cudaFree(f);
    else w->W = f;
    if (!ok) {
        cudaFree(w->W);
        return tb_fail(e, TUBELET_ERR_IO, "device cuda: the upload of layer %s failed", name);
    }
    w->bf16 = p->bf16, w->N = N, w->K = K;
    snprintf(w->name, sizeof w->name, "%s", name);
    p->n++;
    *out = (const tb_qweight *)w;
    return TUBELET_OK;
}

extern "C" size_t tb_cuda_pack_bytes(void *ctx, const tb_linear_pack *pk) {
    (void)ctx;
    const cuda_pack *p = (const cuda_pack *)pk;
    size_t b = 0;
    for (int i = 0; p && i < p->n; i++)
        b += (p->w[i].bf16 ? sizeof(uint16_t) : sizeof(float)) * (size_t)(p->w[i].N * p->w[i].K);
    return b;
}
extern "C" int tb_cuda_pack_count(void *ctx, const tb_linear_pack *pk) {
    (void)ctx;
    return pk ? ((const cuda_pack *)pk)->n : 0;
}
extern "C" const char *tb_cuda_pack_layer(void *ctx, const tb_linear_pack *pk, int i, int64_t *N,
                                          int64_t *K) {
    (void)ctx;
    const cuda_weight *w = &((const cuda_pack *)pk)->w[i];
    *N = w->N, *K = w->K;
    return w->name;
}
extern "C" void tb_cuda_pack_set_act(void *ctx, tb_linear_pack *p, int i, float scale,
                                     int32_t zero_point) {
    (void)ctx;
    (void)p, (void)i, (void)scale, (void)zero_point; /* int8 only, which pack_new refuses */
}
extern "C" int tb_cuda_pack_is_static(void *ctx, const tb_linear_pack *p) {
    (void)ctx;
    (void)p;
    return 0;
}
extern "C" void tb_cuda_pack_free(void *ctx, tb_linear_pack *pk) {
    (void)ctx;
    cuda_pack *p = (cuda_pack *)pk;
    if (!p) return;
    for (int i = 0; i < p->n; i++) cudaFree(p->w[i].W);
    free(p->w);
    free(p);
}

/* ---- the state's context: nothing to hold yet; its status is the backend's ---- */
extern "C" int tb_cuda_ctx_new(void *ctx, tb_lowp_ctx **out, const tb_linear_pack *p,
                               int64_t max_mk, int64_t max_n, int64_t max_nk, tb_err *e) {
    (void)ctx;
    (void)p, (void)max_mk, (void)max_n, (void)max_nk, (void)e;
    *out = NULL;
    return TUBELET_OK;
}
extern "C" void tb_cuda_ctx_free(void *ctx, tb_lowp_ctx *c) {
    (void)ctx;
    (void)c;
}
extern "C" int tb_cuda_ctx_status(void *ctx, tb_lowp_ctx *c) {
    tb_cuda *cx = (tb_cuda *)ctx;
    (void)c;
    if (cudaStreamSynchronize(cx->stream) != cudaSuccess)
        fail(cx, TUBELET_ERR_UNSUPPORTED); /* a kernel's fault */
    const int s = cx->status;
    cx->status = TUBELET_OK, cx->refused = 0;
    return s;
}
extern "C" void tb_cuda_ctx_observe(void *ctx, tb_lowp_ctx *c, tb_lowp_observer fn, void *user) {
    (void)ctx;
    (void)c, (void)fn, (void)user; /* calibration (int8) is CPU-only */
}

/* ==== X-CLIP's and pretraining's entries: to_device, normalize_rows, row_dots, patch_targets,
 * mse (the CPU entries' meaning, cpu.c; their sums in double as there) ==== */

extern "C" void tb_cuda_to_device(void *ctx, void *dst, const void *src, size_t bytes) {
    tb_cuda *cx = (tb_cuda *)ctx;
    copy_in(cx, dst, src, bytes);
}

/* One warp per row: the lanes' partial sums in double, added by shuffles; every lane gets the
 * total. A warp's rows are all in or all out, so whole warps return together. */
__device__ double warp_sum_d(double v) {
    for (int o = 16; o > 0; o /= 2) v += __shfl_down_sync(0xffffffffu, v, o);
    return __shfl_sync(0xffffffffu, v, 0);
}
__global__ void k_normalize_rows(float *x, int64_t rows, int64_t n) {
    const int64_t r = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) / 32;
    const int lane = threadIdx.x % 32;
    if (r >= rows) return;
    float *xr = x + r * n;
    double ss = 0;
    for (int64_t d = lane; d < n; d += 32) ss += (double)xr[d] * xr[d];
    const float inv = (float)(1.0 / sqrt(warp_sum_d(ss)));
    for (int64_t d = lane; d < n; d += 32) xr[d] *= inv;
}
extern "C" void tb_cuda_normalize_rows(void *ctx, float *x, int64_t rows, int64_t n) {
    tb_cuda *cx = (tb_cuda *)ctx;
    if (rows <= 0) return;
    LAUNCH(k_normalize_rows, blocks(rows * 32), 256)(x, rows, n);
    LAUNCHED();
}

__global__ void k_row_dots(float *out, const float *a, int64_t lda, const float *b, int64_t ldb,
                           int64_t rows, int64_t n, float scale) {
    const int64_t r = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) / 32;
    const int lane = threadIdx.x % 32;
    if (r >= rows) return;
    const float *ar = a + r * lda, *br = b + r * ldb;
    double dot = 0;
    for (int64_t d = lane; d < n; d += 32) dot += (double)ar[d] * br[d];
    dot = warp_sum_d(dot);
    if (lane == 0) out[r] = (float)(scale * dot);
}
extern "C" void tb_cuda_row_dots(void *ctx, float *out, const float *a, int64_t lda, const float *b,
                                 int64_t ldb, int64_t rows, int64_t n, float scale) {
    tb_cuda *cx = (tb_cuda *)ctx;
    if (rows <= 0) return;
    const float *ad = DEVF(a), *bd = DEVF(b);
    LAUNCH(k_row_dots, blocks(rows * 32), 256)(out, ad, lda, bd, ldb, rows, n, scale);
    LAUNCHED();
}

/* Pretraining's targets in two kernels: one thread per target element cuts (and un-normalises)
 * the pixels; with norm, one thread per (row, channel) normalises that channel of the patch with
 * the CPU's own code (tb_patch_norm_channel, backend.h), so the targets are the CPU's. */
__global__ void k_patch_targets(float *target, const float *pix, tb_patch_geom g,
                                const int32_t *tokens, int64_t rows, int64_t per_clip,
                                const float *mean, const float *std) {
    const int64_t C = g.C, per = g.t * g.ph * g.pw, P = per * C;
    const int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (e >= rows * P) return;
    const int64_t r = e / P, k = e % P, ch = k % C, at = k / C; /* at: (dt, dy, dx) */
    const int64_t dx = at % g.pw, dy = at / g.pw % g.ph, dt = at / (g.pw * g.ph);
    const int64_t b = r / per_clip, tok = tokens[r];
    const int64_t it = tok / (g.gh * g.gw), iy = tok / g.gw % g.gh, ix = tok % g.gw;
    float v = pix[(((b * g.T + it * g.t + dt) * C + ch) * g.H + iy * g.ph + dy) * g.W +
                  ix * g.pw + dx];
    if (mean) v = v * std[ch] + mean[ch];
    target[e] = v;
}
__global__ void k_patch_norm(float *target, int64_t rows, int64_t C, int64_t per) {
    const int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (e >= rows * C) return;
    tb_patch_norm_channel(target + e / C * per * C, C, per, e % C);
}
extern "C" void tb_cuda_patch_targets(void *ctx, float *target, const float *pix,
                                      const tb_patch_geom *g, const int32_t *tokens, int64_t rows,
                                      int64_t per_clip, const float *mean, const float *std,
                                      int norm) {
    tb_cuda *cx = (tb_cuda *)ctx;
    if (rows <= 0) return;
    const int64_t per = g->t * g->ph * g->pw, P = per * g->C;
    /* the pass's copy of the caller's pixels, the plan's token list (uploaded), the model's mean
     * and std (uploaded at load) */
    const float *p = DEVF(pix);
    const int32_t *tk = DEVI(tokens);
    const float *md = DEVF(mean), *sd = DEVF(std);
    LAUNCH(k_patch_targets, blocks(rows * P), 256)(target, p, *g, tk, rows, per_clip, md, sd);
    LAUNCHED();
    if (!norm) return;
    LAUNCH(k_patch_norm, blocks(rows * g->C), 256)(target, rows, g->C, per);
    LAUNCHED();
}

/* The mean squared error: a fixed grid of MSE_BLOCKS blocks, each thread's strided sum in double,
 * each block's into one partial; the partials summed on the host in order (the loss is a pass's
 * output: one small copy), so the result does not vary from run to run. d: the gradient. */
#define MSE_BLOCKS 256
__global__ void k_mse(double *part, float *d, const float *a, const float *b, int64_t n) {
    __shared__ double sh[8]; /* 256 threads: 8 warps */
    double s = 0;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        const double e = (double)a[i] - b[i];
        s += e * e;
        if (d) d[i] = (float)(2 * e / (double)n);
    }
    block_partial_d(s, part, sh);
}
extern "C" double tb_cuda_mse(void *ctx, float *d, const float *a, const float *b, int64_t n) {
    tb_cuda *cx = (tb_cuda *)ctx;
    double host[MSE_BLOCKS] = {0}, total = 0, *part = NULL;
    const unsigned nb = n > 0 ? (blocks(n) < MSE_BLOCKS ? blocks(n) : MSE_BLOCKS) : 0;
    if (nb && cudaMalloc(&part, sizeof(double) * nb) != cudaSuccess) {
        fail(cx, TUBELET_ERR_MEMORY);
        return NAN;
    }
    if (nb) {
        LAUNCH(k_mse, nb, 256)(part, d, DEVF(a), DEVF(b), n);
        LAUNCHED();
        copy_out(cx, host, part, sizeof(double) * nb);
        cudaFree(part);
    }
    for (unsigned i = 0; i < nb; i++) total += host[i];
    return total / (double)n;
}
