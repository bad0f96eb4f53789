/* f32 products through oneDNN's row-major sgemm: tb_gemm, and nn.Linear forward and backward on
 * plain f32 weights. (Packed and reduced-precision weights go through oneDNN's matmul primitive
 * in lowp.c instead.) */
#ifndef TB_GEMM_H
#define TB_GEMM_H

#include <stdint.h>

/* C (M x N, row stride ldc) = alpha * op(A) * op(B) + beta * C, all row-major.
 * op(A) is M x K (A is K x M when trans_a); op(B) is K x N (B is N x K when trans_b). */
void tb_gemm(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K, float alpha,
             const float *A, int64_t lda, const float *B, int64_t ldb, float beta, float *C,
             int64_t ldc);

/* y (M x N, row stride ldy) = x (M x K) W^T + b [+ y if accumulate]: a PyTorch nn.Linear with
 * W stored (out = N, in = K) as Hugging Face stores it. b may be NULL. */
void tb_linear(float *y, int64_t ldy, const float *x, const float *W, const float *b, int64_t M,
               int64_t N, int64_t K, int accumulate);

/* Backward of tb_linear: dx (M x K) = dy W [+ dx], dW (N x K) += dy^T x, db (N) += column sums
 * of dy. Any of dx, dW, db may be NULL. Row strides: lddx, lddy, ldx. */
void tb_linear_backward(float *dx, int64_t lddx, float *dW, float *db, const float *dy,
                        int64_t lddy, const float *x, int64_t ldx, const float *W, int64_t M,
                        int64_t N, int64_t K, int accumulate_dx);

/* Slow, obviously-correct triple loop used by the kernel tests. */
void tb_gemm_ref(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                 const float *A, int64_t lda, const float *B, int64_t ldb, float beta, float *C,
                 int64_t ldc);

const char *tb_gemm_backend(void);

#endif
