/* Slow, obviously correct references of the row-wise kernels (ops.h, gemm.h): the formulas
 * written out with double accumulation, single-threaded, for the kernel tests. The attention
 * references are in attention.h, the GEMM's in gemm.h. Signatures follow the kernels'. */
#ifndef TB_REF_H
#define TB_REF_H

#include <stdint.h>

/* tb_layernorm: y = (x - mean) / sqrt(var + eps) * w + b per row (contiguous rows of n). */
void tb_layernorm_ref(float *y, const float *x, const float *w, const float *b, int64_t rows,
                      int64_t n, float eps);
/* tb_layernorm_backward: with xh = (x - mean) rstd, g = dy w,
 *   dx += rstd (g - mean(g) - xh mean(g xh)),  dw += sum_r dy xh,  db += sum_r dy. */
void tb_layernorm_backward_ref(float *dx, const float *dy, const float *x, const float *w,
                               float *dw, float *db, int64_t rows, int64_t n, float eps);
/* tb_linear: y = x W^T + b [+ y] (contiguous; W is N x K). */
void tb_linear_ref(float *y, const float *x, const float *W, const float *b, int64_t M,
                   int64_t N, int64_t K, int accumulate);
/* tb_linear_backward: dx = dy W [+ dx], dW += dy^T x, db += column sums of dy (any NULL). */
void tb_linear_backward_ref(float *dx, float *dW, float *db, const float *dy, const float *x,
                            const float *W, int64_t M, int64_t N, int64_t K, int accumulate_dx);
/* tb_scale_cols_backward (y before the scaling): dlambda += sum_r dy y; dy *= lambda. The forward,
 * y *= lambda, is one multiply per element and needs no reference beyond this. */
void tb_scale_cols_backward_ref(float *dy, float *dlambda, const float *y, const float *lambda,
                                int64_t rows, int64_t n);
/* tb_softmax_row: x = softmax(x scale) in place. */
void tb_softmax_row_ref(float *x, int64_t n, float scale);
/* The softmax's backward for one row (the attention backward has it inside): with p the
 * softmax output, dx = p (dp - sum_j p_j dp_j). */
void tb_softmax_backward_ref(float *dx, const float *p, const float *dp, int64_t n);
/* backend.h's gather_rows and scatter_rows, one row after another: dst[i] = s_i src[idx[i]]
 * (zeros for idx[i] < 0), and dst[idx[i]] (+)= s_i src[i] (skipped for idx[i] < 0), with
 * s_i = row_w[idx[i]] * item_w[i / per] (each factor 1 when NULL). */
void tb_gather_rows_ref(float *dst, const float *src, const int32_t *idx, int64_t n, int64_t C,
                        const float *row_w, const float *item_w, int64_t per);
void tb_scatter_rows_ref(float *dst, const float *src, const int32_t *idx, int64_t n, int64_t C,
                         int add, const float *row_w, const float *item_w, int64_t per);

#endif
