/* Element-wise and row-wise kernels: LayerNorm, the activation functions of Hugging Face's
 * ACT2FN that these models use, softmax, layer scale, dropout masks; with the backward of each
 * that training needs. */
#ifndef TB_OPS_H
#define TB_OPS_H

#include <math.h>
#include <stdint.h>

#include "../rng.h"

typedef enum {
    TB_ACT_GELU,       /* exact: 0.5 x (1 + erf(x / sqrt 2)) — HF "gelu" */
    TB_ACT_GELU_TANH,  /* 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) — "gelu_new",
                          "gelu_fast", "gelu_pytorch_tanh", "gelu_accurate" */
    TB_ACT_QUICK_GELU, /* x sigmoid(1.702 x) */
    TB_ACT_RELU,
    TB_ACT_SILU,       /* x sigmoid(x) — "silu", "swish" */
} tb_act;

/* Maps a config.json hidden_act string to tb_act; -1 if unknown. */
int tb_act_parse(const char *name);
const char *tb_act_name(tb_act a);

/* y = (x - mean) / sqrt(var + eps) * w + b over each row of n; rows x n, row strides ldx, ldy. */
void tb_layernorm(float *y, int64_t ldy, const float *x, int64_t ldx, const float *w,
                  const float *b, int64_t rows, int64_t n, float eps);

/* x = act(x + bias) in place over rows x n; bias may be NULL. */
void tb_bias_act(float *x, const float *bias, int64_t rows, int64_t n, tb_act act);
/* x = act(x) over rows x n (row stride ldx) on the calling thread: an epilogue's block. */
void tb_act_rows(float *x, int64_t ldx, int64_t rows, int64_t n, tb_act act);

/* Backward of tb_bias_act: dy *= act'(h), h the pre-activation values. */
void tb_act_backward(float *dy, const float *h, int64_t rows, int64_t n, tb_act act);

/* Backward of tb_layernorm (contiguous rows of n): dx += d/dx, dw += d/dw, db += d/db. */
void tb_layernorm_backward(float *dx, const float *dy, const float *x, const float *w,
                           float *dw, float *db, int64_t rows, int64_t n, float eps);

/* y[r * ldy + j] += b[j] over rows x n (a linear layer's bias). */
void tb_add_row_bias(float *y, int64_t ldy, const float *b, int64_t rows, int64_t n);

/* out[j] += sum over rows of x[r * ld + j] (bias gradients). */
void tb_colsum_add(float *out, const float *x, int64_t rows, int64_t n, int64_t ld);

/* Layer scale: y[r, j] *= lambda[j] over rows x n (contiguous). */
void tb_scale_cols(float *y, const float *lambda, int64_t rows, int64_t n);
/* Its backward; y holds the values before the scaling: dlambda[j] += sum_r dy[r, j] y[r, j],
 * then dy[r, j] *= lambda[j]. Sums in double, in row order whatever the thread count. */
void tb_scale_cols_backward(float *dy, float *dlambda, const float *y, const float *lambda,
                            int64_t rows, int64_t n);

/* Scalar activation (the tests' reference, and the CUDA backend's kernels). erff from libm:
 * the vector path's rational erf has |error| < 3e-7. */
TB_HOST_DEVICE static inline float tb_act_ref(float x, tb_act act) {
    switch (act) {
    case TB_ACT_GELU: return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f));
    case TB_ACT_GELU_TANH:
        return 0.5f * x * (1.0f + tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x)));
    case TB_ACT_QUICK_GELU: return x / (1.0f + expf(-1.702f * x));
    case TB_ACT_RELU: return x > 0 ? x : 0;
    case TB_ACT_SILU: return x / (1.0f + expf(-x));
    }
    return x;
}

/* d act(x) / dx, for the backward pass (scalar; the CPU's vector path has the same formulas). */
TB_HOST_DEVICE static inline float tb_act_grad(float x, tb_act act) {
    switch (act) {
    case TB_ACT_GELU:
        return 0.5f * (1.0f + erff(x * 0.70710678118654752f)) +
               x * 0.3989422804014327f * expf(-0.5f * x * x);
    case TB_ACT_GELU_TANH: {
        const float c = 0.7978845608028654f, k = 0.044715f;
        float t = tanhf(c * (x + k * x * x * x));
        return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * c * (1.0f + 3.0f * k * x * x);
    }
    case TB_ACT_QUICK_GELU: {
        float sg = 1.0f / (1.0f + expf(-1.702f * x));
        return sg + 1.702f * x * sg * (1.0f - sg);
    }
    case TB_ACT_RELU: return x > 0 ? 1.0f : 0.0f;
    case TB_ACT_SILU: {
        float sg = 1.0f / (1.0f + expf(-x));
        return sg * (1.0f + x * (1.0f - sg));
    }
    }
    return 1.0f;
}

/* max of a row; and x[j] = exp(x[j] - shift) in place, returning the sum (the two halves of a
 * softmax, used apart by the online softmax of the fused attention). shift must be at least
 * the row's max: below exp(-87.3) the terms are not flushed to 0. */
float tb_row_max(const float *x, int64_t n);
float tb_exp_shift_sum(float *x, int64_t n, float shift);

/* In-place softmax of one row of n values after scaling by `scale` (scale > 0). */
void tb_softmax_row(float *x, int64_t n, float scale);

/* ---- dropout from a counter-based hash ----
 * A mask element is a pure function of (key, index): keep(key, i) = tb_hash(key, i) >= thr with
 * thr = p 2^64, i.e. probability 1 - p. The backward pass (or a recomputation under gradient
 * checkpointing) regenerates the forward's mask from the same key without storing it. Keys are
 * derived by hashing: key' = tb_hash(key, counter) (the seed, the step, the layer, the site...). */

/* A dropout rate as the mask needs it: threshold and the 1 / (1 - p) scale of kept values.
 * p = 0 gives thr = 0 (everything kept, scale 1). */
typedef struct {
    uint64_t thr;
    float scale;
} tb_keep_rule;

tb_keep_rule tb_keep_rule_make(float p);

/* The mask element i of key as a factor: 1 / (1 - p) if kept, else 0. */
TB_HOST_DEVICE static inline float tb_keep_scale(uint64_t key, uint64_t i, tb_keep_rule r) {
    return tb_hash(key, i) >= r.thr ? r.scale : 0.0f;
}

/* Drop path's draws of a step, as each family makes them (kept, so that runs and resumes repeat):
 * draw i is tb_mix64(key ^ (first + i)) (the shared encoder's tb_hash3(seed, step, site << 32 |
 * i): key = tb_hash3_key(seed, step), first = site << 32), or with hash set tb_hash(key, first +
 * i) (Video Swin's); its factor 1 / (1 - rate) with probability 1 - rate (a uniform draw from the
 * top 53 bits), else 0. */
typedef struct {
    uint64_t key, first;
    int hash;
    double rate;
} tb_drop_draws;

/* Factor i of d: what the backends' draw_keep entry writes, so that a step's factors are drawn
 * where the step runs, the same on every backend. */
TB_HOST_DEVICE static inline float tb_drop_path_keep(const tb_drop_draws *d, int64_t i) {
    const uint64_t at = d->first + (uint64_t)i;
    const uint64_t h = d->hash ? tb_hash(d->key, at) : tb_mix64(d->key ^ at);
    return (double)(h >> 11) / 9007199254740992.0 < 1.0 - d->rate ? (float)(1.0 / (1.0 - d->rate))
                                                                  : 0.0f;
}

/* x[i] *= tb_keep_scale(key, first + i) for i in [0, n). The same call on the gradient
 * is the backward. tb_dropout splits the work over the OpenMP threads; tb_dropout_serial is for
 * callers already inside a parallel region (the attention kernels, per row). */
void tb_dropout(float *x, int64_t n, uint64_t key, int64_t first, tb_keep_rule r);
void tb_dropout_serial(float *x, int64_t n, uint64_t key, int64_t first, tb_keep_rule r);

/* Vectorised exp used by softmax and the activations: relative error < 3e-7 on [-87.3, 88.3];
 * 0 below (no subnormal results), inf above. */
void tb_vexp(float *y, const float *x, int64_t n);

#endif
