#include "gemm.h"

#include <omp.h>
#include <stdio.h>

#include "ops.h"

#include <oneapi/dnnl/dnnl.h>

void tb_gemm(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K, float alpha,
             const float *A, int64_t lda, const float *B, int64_t ldb, float beta, float *C,
             int64_t ldc) {
    if (M <= 0 || N <= 0) return;
    /* Shapes are checked by the callers; oneDNN only fails on invalid arguments. */
    dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', M, N, K, alpha, A, lda, B, ldb, beta, C,
               ldc);
}

void tb_linear(float *y, int64_t ldy, const float *x, const float *W, const float *b, int64_t M,
               int64_t N, int64_t K, int accumulate) {
    tb_gemm(0, 1, M, N, K, 1.0f, x, K, W, K, accumulate ? 1.0f : 0.0f, y, ldy);
    if (b) tb_add_row_bias(y, ldy, b, M, N);
}

/* tb_gemm with the rows of C split over the OpenMP threads, one single-threaded call each (a call
 * inside a parallel region runs on its thread). For the backward's products oneDNN's own
 * split was measured slower on 2 threads: 1.7x for dW of fc2 (768 x 3072, contraction 1568),
 * 1.5x for dx of fc2, 2x for dW of the q, k, v projections (bench/RESULTS.md). Each row of C
 * is computed by one thread whatever the timing, so results do not depend on the run. */
static void gemm_split_rows(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K,
                            float alpha, const float *A, int64_t lda, const float *B, int64_t ldb,
                            float beta, float *C, int64_t ldc) {
    const int nt = omp_in_parallel() ? 1 : omp_get_max_threads();
    if (nt < 2 || M < 64 * (int64_t)nt) {
        tb_gemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
        return;
    }
#pragma omp parallel num_threads(nt)
    {
        const int id = omp_get_thread_num(), cnt = omp_get_num_threads();
        const int64_t m0 = M * id / cnt / 16 * 16, m1 = id == cnt - 1 ? M : M * (id + 1) / cnt / 16 * 16;
        tb_gemm(trans_a, trans_b, m1 - m0, N, K, alpha, trans_a ? A + m0 : A + m0 * lda, lda, B,
                ldb, beta, C + m0 * ldc, ldc);
    }
}

void tb_linear_backward(float *dx, int64_t lddx, float *dW, float *db, const float *dy,
                        int64_t lddy, const float *x, int64_t ldx, const float *W, int64_t M,
                        int64_t N, int64_t K, int accumulate_dx) {
    if (dx)
        gemm_split_rows(0, 0, M, K, N, 1.0f, dy, lddy, W, K, accumulate_dx ? 1.0f : 0.0f, dx, lddx);
    if (dW) gemm_split_rows(1, 0, N, K, M, 1.0f, dy, lddy, x, ldx, 1.0f, dW, K);
    if (db) tb_colsum_add(db, dy, M, N, lddy);
}

void tb_gemm_ref(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                 const float *A, int64_t lda, const float *B, int64_t ldb, float beta, float *C,
                 int64_t ldc) {
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
            double acc = 0;
            for (int64_t k = 0; k < K; k++) {
                float a = trans_a ? A[k * lda + i] : A[i * lda + k];
                float bb = trans_b ? B[j * ldb + k] : B[k * ldb + j];
                acc += (double)a * bb;
            }
            C[i * ldc + j] = (float)(alpha * acc + (beta != 0 ? beta * C[i * ldc + j] : 0));
        }
}

const char *tb_gemm_backend(void) {
    static char name[64];
    if (!name[0]) {
        const dnnl_version_t *v = dnnl_version();
        snprintf(name, sizeof name, "oneDNN %d.%d.%d sgemm", v->major, v->minor, v->patch);
    }
    return name;
}
