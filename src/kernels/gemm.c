#include "gemm.h"

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
    if (!b) return;
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < M; i++) {
        float *row = y + i * ldy;
        for (int64_t j = 0; j < N; j++) row[j] += b[j];
    }
}

void tb_linear_backward(float *dx, int64_t lddx, float *dW, float *db, const float *dy,
                        int64_t lddy, const float *x, int64_t ldx, const float *W, int64_t M,
                        int64_t N, int64_t K, int accumulate_dx) {
    if (dx) tb_gemm(0, 0, M, K, N, 1.0f, dy, lddy, W, K, accumulate_dx ? 1.0f : 0.0f, dx, lddx);
    if (dW) tb_gemm(1, 0, N, K, M, 1.0f, dy, lddy, x, ldx, 1.0f, dW, K);
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
