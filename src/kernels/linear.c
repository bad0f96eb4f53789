/* One linear layer, packed or as stored: the one entry point the models call (linear.h). */
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
