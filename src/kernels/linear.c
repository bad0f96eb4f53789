/* One linear layer, packed or as stored: the one entry point the models call (linear.h); and
 * its mixed-precision versions, the same steps with bf16 products. */
#include "linear.h"

#include "gemm.h"

void tb_lin_apply(tb_lowp_ctx *c, float *y, int64_t ldy, const float *x, const tb_lin *l,
                  const float *b, int64_t M, int64_t N, int64_t K, int accumulate) {
    if (l->q) tb_qlinear(c, y, ldy, x, l->q, b, M, accumulate, -1);
    else tb_linear(y, ldy, x, l->w, b, M, N, K, accumulate);
}

void tb_lin_apply_act(tb_lowp_ctx *c, float *y, const float *x, const tb_lin *l, int64_t M,
                      int64_t N, int64_t K, tb_act act) {
    if (l->q) {
        tb_qlinear(c, y, N, x, l->q, l->b, M, 0, (int)act);
        return;
    }
    tb_linear(y, N, x, l->w, NULL, M, N, K, 0);
    tb_bias_act(y, l->b, M, N, act); /* the bias rides along with the activation's pass */
}

/* ---- mixed precision: models that train so keep their f32 weights (never packed) ---- */

void tb_lin_apply_mixed(tb_lowp_ctx *c, float *y, int64_t ldy, const float *x, const tb_lin *l,
                        const float *b, int64_t M, int64_t N, int64_t K, int accumulate) {
    tb_gemm_bf16(c, 0, 1, M, N, K, x, K, l->w, K, accumulate, y, ldy);
    if (b) tb_add_row_bias(y, ldy, b, M, N);
}

void tb_lin_apply_act_mixed(tb_lowp_ctx *c, float *y, const float *x, const tb_lin *l, int64_t M,
                            int64_t N, int64_t K, tb_act act) {
    tb_gemm_bf16(c, 0, 1, M, N, K, x, K, l->w, K, 0, y, N);
    tb_bias_act(y, l->b, M, N, act);
}

void tb_linear_backward_mixed(tb_lowp_ctx *c, float *dx, int64_t lddx, float *dW, float *db,
                              const float *dy, int64_t lddy, const float *x, int64_t ldx,
                              const float *W, int64_t M, int64_t N, int64_t K, int accumulate_dx) {
    tb_linear_backward_bf16(c, dx, lddx, dW, dy, lddy, x, ldx, W, M, N, K, accumulate_dx);
    if (db) tb_colsum_add(db, dy, M, N, lddy);
}
