/* The kernel seam for linear layers: what models/ sees of them. A layer is its f32 weight as
 * stored (products through sgemm, gemm.h) or a packed weight (opaque: oneDNN's matmul layout in
 * fp32, bf16 or int8; lowp.h holds the oneDNN side), applied through one call either way. No
 * oneDNN type appears here, so that another backend can sit behind the same functions. */
#ifndef TB_LINEAR_H
#define TB_LINEAR_H

#include <stddef.h>
#include <stdint.h>

#include "../common.h"
#include "ops.h"

typedef enum { TB_PREC_FP32 = 0, TB_PREC_BF16 = 1, TB_PREC_INT8 = 2 } tb_precision;

/* 1 if this CPU has the instructions of precision p (AVX512-BF16 for bf16, AVX512-VNNI or
 * AVX2 + FMA for int8; fp32 always). */
int tb_lowp_cpu_has(int p);

/* A packed weight (lowp.c), and the set of them a model owns with the engine they run on. */
typedef struct tb_qweight tb_qweight;
typedef struct tb_linear_pack tb_linear_pack;
/* Room for max_weights weights in `precision`; native 0: the portable reference path. */
int tb_linear_pack_new(tb_linear_pack **out, int precision, int native, int max_weights,
                       tb_err *e);
/* Packs W (N out, K in) once, as layer `name` (at most TB_LAYER_NAME - 1 characters: the name
 * int8_scales.json gives it); *out lives as long as the pack. */
#define TB_LAYER_NAME 48
int tb_linear_pack_add(tb_linear_pack *p, const char *name, const float *W, int64_t N, int64_t K,
                       const tb_qweight **out, tb_err *e);
size_t tb_linear_pack_bytes(const tb_linear_pack *p);
/* The layers packed so far, in order: layer i's name and shape (N out, K in). */
int tb_linear_pack_count(const tb_linear_pack *p);
const char *tb_linear_pack_layer(const tb_linear_pack *p, int i, int64_t *N, int64_t *K);
/* The u8 quantisation of activations in [lo, hi] (widened to hold 0, as ONNX Runtime's
 * DynamicQuantizeLinear does): scale (hi - lo) / 255 (1 for an empty range), zero point
 * round(-lo / scale) in [0, 255]. */
void tb_act_quant_params(float lo, float hi, float *scale, int32_t *zero_point);
/* Static int8: layer i's activations quantised with this fixed scale (> 0) and zero point (0 to
 * 255) instead of their range in each call. */
void tb_linear_pack_set_act(tb_linear_pack *p, int i, float scale, int32_t zero_point);
/* 1 if every layer of p has such a fixed scale (p holds at least one). */
int tb_linear_pack_is_static(const tb_linear_pack *p);
void tb_linear_pack_free(tb_linear_pack *p);

/* Per-state context of packed products: the primitives made for each shape met (on first use;
 * at most TB_LOWP_CACHE shapes) and the scratch the activations are converted into. max_mk:
 * largest M K of a call (0: f32 weights only, nothing to convert); max_n, max_nk: largest N and
 * N K of a weight. */
typedef struct tb_lowp_ctx tb_lowp_ctx;
#define TB_LOWP_CACHE 64
int tb_linear_ctx_new(tb_lowp_ctx **out, const tb_linear_pack *p, int64_t max_mk, int64_t max_n,
                      int64_t max_nk, tb_err *e);
void tb_lowp_ctx_free(tb_lowp_ctx *c);
size_t tb_lowp_ctx_bytes(const tb_lowp_ctx *c);
/* The first failure of a product since the last call (TUBELET_OK if none), and forgets it:
 * callers that run many products check once at the end of a pass. */
int tb_lowp_ctx_status(tb_lowp_ctx *c);
/* Calibration: fn(user, layer, x, n) sees the input (n values) of every product of a packed
 * layer the context runs, before it runs; fn NULL stops it. */
typedef void (*tb_lowp_observer)(void *user, int layer, const float *x, int64_t n);
void tb_lowp_ctx_observe(tb_lowp_ctx *c, tb_lowp_observer fn, void *user);
/* A product (M x N into y, row stride ldy) that could not run, as this file's own report theirs:
 * y filled with NaN and TUBELET_ERR_UNSUPPORTED kept for tb_lowp_ctx_status (a backend's
 * product that fails; the tests inject one through a table). */
void tb_lowp_ctx_fail(tb_lowp_ctx *c, float *y, int64_t ldy, int64_t M, int64_t N);

/* y (M x N, row stride ldy) = act(x (M x K, contiguous) W^T + b) [+ y if accumulate] with a
 * packed weight. act: a tb_act, or -1 for none; with an activation, ldy = N and no accumulate.
 * Where oneDNN has the activation it is applied in the product's epilogue. Returns
 * TUBELET_ERR_UNSUPPORTED, with y filled with NaN, when oneDNN cannot make or run the product
 * (or the context holds TB_LOWP_CACHE shapes already); tb_lowp_ctx_status keeps it. */
int tb_qlinear(tb_lowp_ctx *c, float *y, int64_t ldy, const float *x, const tb_qweight *w,
               const float *b, int64_t M, int accumulate, int act);

/* Mixed-precision training's product: C (M x N, row stride ldc) = op(A) op(B) [+ C] with A and B
 * rounded to bf16 (nearest even) and f32 accumulation; op as tb_gemm's (gemm.h). Through oneDNN's
 * bf16 matmul where the context is native (AVX512-BF16), else the rounded values through sgemm.
 * A product that cannot run leaves NaN in C and its status in c (tb_lowp_ctx_status). */
void tb_gemm_bf16(tb_lowp_ctx *c, int trans_a, int trans_b, int64_t M, int64_t N, int64_t K,
                  const float *A, int64_t lda, const float *B, int64_t ldb, int accumulate,
                  float *C, int64_t ldc);

/* nn.Linear: w (out, in), b (out) or NULL; q: the weight packed when the model was loaded so (w
 * is then NULL: the f32 copy is dropped), else NULL. */
typedef struct {
    const float *w, *b;
    const tb_qweight *q;
} tb_lin;

/* y = x W^T + b [+ y] for one linear layer, packed or not (b given apart: fc1's bias is applied
 * with the activation). c: the state's context (NULL when nothing is packed). */
void tb_lin_apply(tb_lowp_ctx *c, float *y, int64_t ldy, const float *x, const tb_lin *l,
                  const float *b, int64_t M, int64_t N, int64_t K, int accumulate);
/* y (M x N, contiguous) = act(x W^T + l->b): in the product's epilogue when the weights are
 * packed (and oneDNN has the activation), else with the bias in the activation's pass. */
void tb_lin_apply_act(tb_lowp_ctx *c, float *y, const float *x, const tb_lin *l, int64_t M,
                      int64_t N, int64_t K, tb_act act);

/* dx = dy W [+ dx] and dW += dy^T x with bf16 operands as tb_gemm_bf16's, dy rounded once for
 * both products. dx or dW may be NULL. */
void tb_linear_backward_bf16(tb_lowp_ctx *c, float *dx, int64_t lddx, float *dW, const float *dy,
                             int64_t lddy, const float *x, int64_t ldx, const float *W, int64_t M,
                             int64_t N, int64_t K, int accumulate_dx);

/* The same three with every product in bf16 (mixed-precision training: f32 weights, never
 * packed, bf16 operands). db stays an f32 sum. */
void tb_lin_apply_mixed(tb_lowp_ctx *c, float *y, int64_t ldy, const float *x, const tb_lin *l,
                        const float *b, int64_t M, int64_t N, int64_t K, int accumulate);
void tb_lin_apply_act_mixed(tb_lowp_ctx *c, float *y, const float *x, const tb_lin *l, int64_t M,
                            int64_t N, int64_t K, tb_act act);
void tb_linear_backward_mixed(tb_lowp_ctx *c, float *dx, int64_t lddx, float *dW, float *db,
                              const float *dy, int64_t lddy, const float *x, int64_t ldx,
                              const float *W, int64_t M, int64_t N, int64_t K, int accumulate_dx);

#endif
