/* cudaemu's own test: that the emulation computes what CUDA and cuBLASLt compute (barriers,
 * shuffles, block and thread indices, column-major products with transposes, leading dimensions,
 * bias and accumulation) and that each check it promises stops a program that breaks it (each
 * such case runs in a child process, which must exit 3 naming the problem). Without these, a
 * kernel passing in the emulator would say little. */
#include "cublasLt.h"
#include "cuda_runtime.h"
#include "mma.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static int g_pass, g_fail;
#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (cond) g_pass++;                                                                        \
        else {                                                                                     \
            g_fail++;                                                                              \
            printf("FAIL %s:%d: ", __FILE__, __LINE__);                                            \
            printf(__VA_ARGS__);                                                                   \
            printf("\n");                                                                          \
        }                                                                                          \
    } while (0)

/* ---- kernels ---- */
/* a block's sum through shared memory and __syncthreads (a tree: wrong without the barrier) */
__global__ void k_block_sum(float *out, const float *x) {
    __shared__ float s[256];
    s[threadIdx.x] = x[blockIdx.x * blockDim.x + threadIdx.x];
    for (unsigned o = blockDim.x / 2; o > 0; o /= 2) {
        __syncthreads();
        if (threadIdx.x < o) s[threadIdx.x] += s[threadIdx.x + o];
    }
    if (threadIdx.x == 0) out[blockIdx.x] = s[0];
}
/* a warp's sum by __shfl_down_sync, and lane 0's value broadcast by __shfl_sync */
__global__ void k_warp(float *sum, float *bcast, float *xr, const float *x) {
    float v = x[threadIdx.x];
    for (int o = 16; o > 0; o /= 2) v += __shfl_down_sync(0xffffffffu, v, o);
    if (threadIdx.x % 32 == 0) sum[threadIdx.x / 32] = v;
    bcast[threadIdx.x] = __shfl_sync(0xffffffffu, x[threadIdx.x], 0);
    xr[threadIdx.x] = __shfl_xor_sync(0xffffffffu, x[threadIdx.x], 1);
}
__global__ void k_index(int *out) { /* every (block, thread) of a 3-d launch writes its id once */
    const int b = (blockIdx.z * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x;
    const int t = (threadIdx.z * blockDim.y + threadIdx.y) * blockDim.x + threadIdx.x;
    out[b * (blockDim.x * blockDim.y * blockDim.z) + t] += 1 + t;
}
__global__ void k_write(float *y, int i) { y[i] = 1.0f; }
__global__ void k_divergent(float *y) {
    if (threadIdx.x < 16) __syncthreads(); /* UB on a GPU: half the block never arrives */
    y[threadIdx.x] = 0.0f;
}

/* one 16x16x16 WMMA product of bf16 tiles in dynamic shared memory, from element offset `at` */
__global__ void k_wmma(float *d, const float *a, const float *b, int at) {
    using namespace nvcuda;
    unsigned char *smem = tb_emu_dynamic_shared();
    __nv_bfloat16 *as = (__nv_bfloat16 *)smem + at, *bs = as + 256;
    for (int i = threadIdx.x; i < 256; i += 32)
        as[i] = __float2bfloat16(a[i]), bs[i] = __float2bfloat16(b[i]);
    __syncwarp();
    wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> fa;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major> fb;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
    wmma::fill_fragment(acc, 0.0f);
    wmma::load_matrix_sync(fa, as, 16);
    wmma::load_matrix_sync(fb, bs, 16);
    wmma::mma_sync(acc, fa, fb, acc);
    wmma::store_matrix_sync((float *)(smem + 2048), acc, 16, wmma::mem_row_major);
    __syncwarp();
    for (int i = threadIdx.x; i < 256; i += 32) d[i] = ((float *)(smem + 2048))[i];
}

static float *dev_copy(const float *h, size_t n) {
    float *d = NULL;
    cudaMalloc(&d, n * sizeof(float));
    cudaMemcpy(d, h, n * sizeof(float), cudaMemcpyHostToDevice);
    return d;
}
static void host_copy(float *h, const float *d, size_t n) {
    cudaMemcpy(h, d, n * sizeof(float), cudaMemcpyDeviceToHost);
}

static void test_kernels(void) {
    float x[512], out[2];
    for (int i = 0; i < 512; i++) x[i] = (float)(i % 7) - 3.0f + 0.25f * (float)(i % 3);
    float *dx = dev_copy(x, 512), *dout = NULL;
    cudaMalloc(&dout, sizeof out);
    TB_EMU_LAUNCH(k_block_sum, 2, 256)(dout, dx);
    CHECK(cudaGetLastError() == cudaSuccess, "launch");
    host_copy(out, dout, 2);
    for (int b = 0; b < 2; b++) {
        double want = 0;
        for (int i = 0; i < 256; i++) want += x[b * 256 + i];
        CHECK(fabs(out[b] - want) < 1e-3, "block sum %d: %g, want %g", b, out[b], want);
    }

    float *ds, *db, *dr, s[2], bc[64], xr[64];
    cudaMalloc(&ds, sizeof s), cudaMalloc(&db, sizeof bc), cudaMalloc(&dr, sizeof xr);
    TB_EMU_LAUNCH(k_warp, 1, 64)(ds, db, dr, dx);
    host_copy(s, ds, 2), host_copy(bc, db, 64), host_copy(xr, dr, 64);
    for (int w = 0; w < 2; w++) {
        double want = 0;
        for (int i = 0; i < 32; i++) want += x[w * 32 + i];
        CHECK(fabs(s[w] - want) < 1e-4, "warp sum %d: %g, want %g", w, s[w], want);
    }
    int bad = 0;
    for (int i = 0; i < 64; i++) bad += bc[i] != x[i / 32 * 32] || xr[i] != x[i ^ 1];
    CHECK(!bad, "__shfl_sync / __shfl_xor_sync: %d lanes wrong", bad);

    int *di, hi[2 * 3 * 2 * 4 * 2 * 2];
    cudaMalloc(&di, sizeof hi);
    cudaMemset(di, 0, sizeof hi);
    TB_EMU_LAUNCH(k_index, dim3(2, 3, 2), dim3(4, 2, 2))(di);
    cudaMemcpy(hi, di, sizeof hi, cudaMemcpyDeviceToHost);
    bad = 0;
    for (int i = 0; i < (int)(sizeof hi / sizeof hi[0]); i++) bad += hi[i] != 1 + i % 16;
    CHECK(!bad, "3-d launch: %d threads wrong", bad);

    TB_EMU_LAUNCH(k_write, 1, 2048)(dout, 0); /* over 1024 threads: refused, as CUDA does */
    CHECK(cudaGetLastError() == cudaErrorInvalidConfiguration, "2048 threads a block accepted");
    TB_EMU_LAUNCH(k_write, dim3(1, 70000), 1)(dout, 0);
    CHECK(cudaGetLastError() == cudaErrorInvalidConfiguration, "grid y 70000 accepted");

    /* WMMA: row-major A times column-major B, bf16 products summed in fp32 */
    float ha[256], hb[256], hd[256];
    for (int i = 0; i < 256; i++) ha[i] = (float)(i % 7) - 3, hb[i] = (float)(i % 5) * 0.5f - 1;
    float *da = dev_copy(ha, 256), *db2 = dev_copy(hb, 256), *dd;
    cudaMalloc(&dd, sizeof hd);
    TB_EMU_LAUNCH_SHARED(k_wmma, 1, 32, 4096)(dd, da, db2, 0);
    host_copy(hd, dd, 256);
    bad = 0;
    for (int r = 0; r < 16; r++)
        for (int c = 0; c < 16; c++) {
            float want = 0;
            for (int k = 0; k < 16; k++) want += ha[r * 16 + k] * hb[c * 16 + k];
            bad += hd[r * 16 + c] != want; /* small integers and halves: exact */
        }
    CHECK(!bad, "wmma product: %d elements wrong", bad);
    TB_EMU_LAUNCH_SHARED(k_wmma, 1, 32, 64 << 10)(dd, da, db2, 0); /* 64 KB without opting in */
    CHECK(cudaGetLastError() == cudaErrorInvalidValue, "64 KB of dynamic shared memory accepted "
          "without cudaFuncSetAttribute");
    CHECK(cudaFuncSetAttribute(k_wmma, cudaFuncAttributeMaxDynamicSharedMemorySize, 64 << 10) ==
              cudaSuccess, "cudaFuncSetAttribute");
    TB_EMU_LAUNCH_SHARED(k_wmma, 1, 32, 64 << 10)(dd, da, db2, 0);
    CHECK(cudaGetLastError() == cudaSuccess, "64 KB after cudaFuncSetAttribute refused");
    cudaFree(da), cudaFree(db2), cudaFree(dd);

    float *fresh, f;
    cudaMalloc(&fresh, 64);
    host_copy(&f, fresh, 1);
    CHECK(f != f, "fresh device memory reads %g, not NaN (a GPU's is not zeroed)", f);
    cudaFree(fresh), cudaFree(dx), cudaFree(dout), cudaFree(ds), cudaFree(db), cudaFree(dr);
    cudaFree(di);
}

/* ---- streams: a device-to-host copy on a stream arrives at its synchronisation, in the order
 * of the stream's work; and the default stream's calls are counted ---- */
extern "C" void tb_cudaemu_default_stream(long *calls);
static void test_streams(void) {
    cudaStream_t st;
    CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking) == cudaSuccess, "stream");
    long d0, d1;
    tb_cudaemu_default_stream(&d0);
    float h[4] = {1, 2, 3, 4}, back[4] = {0}, *d = NULL;
    cudaMalloc(&d, sizeof h);
    cudaMemcpyAsync(d, h, sizeof h, cudaMemcpyHostToDevice, st);
    cudaMemcpyAsync(back, d, sizeof back, cudaMemcpyDeviceToHost, st);
    TB_EMU_LAUNCH_ON(k_write, 1, 1, 0, st)(d, 3); /* d[3] = 1 after the copy: not in it */
    CHECK(back[0] != back[0], "a stream's device-to-host copy arrived before its synchronisation "
          "(%g)", back[0]);
    cudaStreamSynchronize(st);
    CHECK(back[0] == 1 && back[3] == 4, "the stream's copy after synchronising: %g .. %g",
          back[0], back[3]);
    tb_cudaemu_default_stream(&d1);
    CHECK(d1 == d0, "%ld calls on a stream counted as the default stream's", d1 - d0);
    TB_EMU_LAUNCH(k_write, 1, 1)(d, 0);
    cudaMemset(d, 0, sizeof h);
    tb_cudaemu_default_stream(&d1);
    CHECK(d1 == d0 + 2, "default-stream calls: %ld counted, 2 made", d1 - d0);
    cudaFree(d);
    cudaStreamDestroy(st);
}

/* ---- cuBLASLt: D = alpha op(A) op(B) + beta C + bias, column-major, against a plain loop ---- */
static void test_product(cublasOperation_t ta, cublasOperation_t tb, int bias, int accumulate) {
    const int m = 5, n = 3, k = 4, lda = 7, ldb = 6, ldd = 8; /* leading dimensions > rows */
    const int ar = ta == CUBLAS_OP_N ? m : k, ac = ta == CUBLAS_OP_N ? k : m;
    const int br = tb == CUBLAS_OP_N ? k : n, bc = tb == CUBLAS_OP_N ? n : k;
    float A[7 * 5], B[6 * 4], D[8 * 3], b[5], want[8 * 3];
    for (int i = 0; i < 35; i++) A[i] = (float)((i * 7) % 11) - 5.0f;
    for (int i = 0; i < 24; i++) B[i] = (float)((i * 5) % 9) - 4.0f;
    for (int i = 0; i < 24; i++) D[i] = 0.5f * (float)(i % 5);
    for (int i = 0; i < 5; i++) b[i] = 0.25f * (float)i;
    for (int j = 0; j < n; j++)
        for (int i = 0; i < m; i++) {
            double s = 0;
            for (int p = 0; p < k; p++)
                s += A[ta == CUBLAS_OP_N ? i + p * lda : p + i * lda] *
                     B[tb == CUBLAS_OP_N ? p + j * ldb : j + p * ldb];
            want[i + j * ldd] = (float)(2.0 * s + (accumulate ? D[i + j * ldd] : 0) +
                                        (bias ? b[i] : 0));
        }
    float *dA = dev_copy(A, 35), *dB = dev_copy(B, 24), *dD = dev_copy(D, 24), *dbias = dev_copy(b, 5);
    cublasLtHandle_t h;
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t la, lb, ld;
    cublasLtCreate(&h);
    cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F);
    cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta);
    cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb);
    if (bias) {
        const cublasLtEpilogue_t e = CUBLASLT_EPILOGUE_BIAS;
        cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &e, sizeof e);
        cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &dbias, sizeof dbias);
    }
    cublasLtMatrixLayoutCreate(&la, CUDA_R_32F, ar, ac, lda);
    cublasLtMatrixLayoutCreate(&lb, CUDA_R_32F, br, bc, ldb);
    cublasLtMatrixLayoutCreate(&ld, CUDA_R_32F, m, n, ldd);
    const float alpha = 2.0f, beta = accumulate ? 1.0f : 0.0f;
    const cublasStatus_t st =
        cublasLtMatmul(h, op, &alpha, dA, la, dB, lb, &beta, dD, ld, dD, ld, NULL, NULL, 0, 0);
    CHECK(st == CUBLAS_STATUS_SUCCESS, "cublasLtMatmul: status %d", (int)st);
    host_copy(D, dD, 24);
    int bad = 0;
    for (int j = 0; j < n; j++)
        for (int i = 0; i < m; i++) bad += fabsf(D[i + j * ldd] - want[i + j * ldd]) > 1e-4f;
    CHECK(!bad, "product ta %d tb %d bias %d accumulate %d: %d elements wrong", (int)ta, (int)tb,
          bias, accumulate, bad);
    /* a layout that does not fit the operation is refused */
    cublasLtMatrixLayout_t wrong;
    cublasLtMatrixLayoutCreate(&wrong, CUDA_R_32F, m + 1, n, ldd);
    CHECK(cublasLtMatmul(h, op, &alpha, dA, la, dB, lb, &beta, dD, wrong, dD, wrong, NULL, NULL,
                         0, 0) == CUBLAS_STATUS_INVALID_VALUE, "a mismatched layout accepted");
    cublasLtMatrixLayoutDestroy(wrong);
    cublasLtMatrixLayoutDestroy(la), cublasLtMatrixLayoutDestroy(lb), cublasLtMatrixLayoutDestroy(ld);
    cublasLtMatmulDescDestroy(op);
    cublasLtDestroy(h);
    cudaFree(dA), cudaFree(dB), cudaFree(dD), cudaFree(dbias);
}

/* ---- the checks: each case breaks one rule in a child, which must exit 3 saying so ---- */
static void host_reads_device(void) {
    float *d;
    cudaMalloc(&d, 64);
    volatile float v = d[0];
    (void)v;
}
static void kernel_gets_host_pointer(void) {
    static float h[4];
    TB_EMU_LAUNCH(k_write, 1, 1)(h, 0);
}
static void copy_wrong_direction(void) {
    float *d, h[4] = {0};
    cudaMalloc(&d, sizeof h);
    cudaMemcpy(d, h, sizeof h, cudaMemcpyDeviceToHost);
}
static void copy_past_the_end(void) {
    float *d, h[8] = {0};
    cudaMalloc(&d, 4 * sizeof(float));
    cudaMemcpy(d, h, sizeof h, cudaMemcpyHostToDevice);
}
static void kernel_writes_past_the_end(void) {
    float *d;
    cudaMalloc(&d, 4096); /* a whole page: the guard page follows at once */
    TB_EMU_LAUNCH(k_write, 1, 1)(d, 1024);
}
static void divergent_barrier(void) {
    float *d;
    cudaMalloc(&d, 32 * sizeof(float));
    TB_EMU_LAUNCH(k_divergent, 1, 32)(d);
}
static void wmma_misaligned(void) {
    float *d;
    cudaMalloc(&d, 1024 * sizeof(float));
    TB_EMU_LAUNCH_SHARED(k_wmma, 1, 32, 4096)(d, d, d, 8); /* 16 bytes past a 32-byte boundary */
}
static void product_misaligned(void) {
    float *d;
    cudaMalloc(&d, 64 * sizeof(float));
    cublasLtHandle_t h;
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t l;
    cublasLtMatmulPreference_t pref;
    cublasLtMatmulHeuristicResult_t r;
    int found = 0;
    cublasLtCreate(&h);
    cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F);
    cublasLtMatrixLayoutCreate(&l, CUDA_R_32F, 4, 4, 4);
    cublasLtMatmulPreferenceCreate(&pref); /* the default: 256-byte aligned operands */
    cublasLtMatmulAlgoGetHeuristic(h, op, l, l, l, l, pref, 1, &r, &found);
    const float one = 1.0f, zero = 0.0f;
    cublasLtMatmul(h, op, &one, d + 1, l, d + 32, l, &zero, d + 48, l, d + 48, l, &r.algo, NULL, 0, 0);
}

/* Runs fn in a child; passes when it exits 3 and its stderr names the problem. */
static void expect_stop(void (*fn)(void), const char *name, const char *says) {
    int p[2];
    if (pipe(p)) return;
    fflush(stdout);
    const pid_t pid = fork();
    if (pid == 0) {
        dup2(p[1], 2), close(p[0]), close(p[1]);
        fn();
        exit(0);
    }
    close(p[1]);
    char buf[8192];
    size_t n = 0;
    ssize_t r;
    char rest[4096]; /* read to the end: a child writing into a closed pipe would die of it */
    while ((r = read(p[0], n < sizeof buf - 1 ? buf + n : rest,
                     n < sizeof buf - 1 ? sizeof buf - 1 - n : sizeof rest)) > 0)
        if (n < sizeof buf - 1) n += (size_t)r;
    buf[n] = 0;
    close(p[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 3 && strstr(buf, says),
          "%s: the child should stop with exit 3 saying \"%s\"; it exited %d:\n%.400s", name,
          says, WIFEXITED(status) ? WEXITSTATUS(status) : -1, buf);
}

int main(void) {
    test_kernels();
    test_streams();
    for (int t = 0; t < 8; t++)
        test_product((cublasOperation_t)(t & 1), (cublasOperation_t)(t >> 1 & 1), t >> 2 & 1,
                     (t & 1) ^ (t >> 2 & 1));
    expect_stop(host_reads_device, "host reads device memory", "the host touched device memory");
    expect_stop(kernel_gets_host_pointer, "a host pointer to a kernel", "is not device memory");
    expect_stop(copy_wrong_direction, "a copy in the wrong direction", "cudaMemcpy kind");
    expect_stop(copy_past_the_end, "a copy past the end", "run past its end");
    expect_stop(kernel_writes_past_the_end, "a kernel writing past the end", "past the end");
    expect_stop(divergent_barrier, "a barrier in divergent code", "divergent code");
    expect_stop(product_misaligned, "a misaligned product", "less aligned");
    expect_stop(wmma_misaligned, "a misaligned WMMA load", "32-byte aligned");
    printf("cudaemu selftest: %d passed, %d failed\n", g_pass, g_fail);
    return g_fail ? 1 : 0;
}
