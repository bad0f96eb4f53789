/* The CPU table of backend.h: today's kernels, named once here. */
#include <math.h>
#include <omp.h>
#include <string.h>

#include "../common.h"
#include "backend.h"
#include "gemm.h"
#include "rope.h"

static inline float row_scale(const int32_t *idx, int64_t i, const float *row_w,
                              const float *item_w, int64_t per) {
    float s = row_w ? row_w[idx[i]] : 1.0f;
    return item_w ? s * item_w[i / per] : s;
}

static void cpu_gather_rows(void *ctx, float *dst, const float *src, const int32_t *idx, int64_t n,
                            int64_t C, const float *row_w, const float *item_w, int64_t per) {
    (void)ctx;
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i++) {
        float *d = dst + i * C;
        if (idx[i] < 0) {
            memset(d, 0, sizeof(float) * (size_t)C);
            continue;
        }
        const float *x = src + (int64_t)idx[i] * C;
        if (row_w || item_w) {
            const float s = row_scale(idx, i, row_w, item_w, per);
            for (int64_t j = 0; j < C; j++) d[j] = s * x[j];
        } else {
            memcpy(d, x, sizeof(float) * (size_t)C);
        }
    }
}

static void scatter_one(float *d, const float *x, int64_t C, int add, float s) {
    if (add)
        for (int64_t j = 0; j < C; j++) d[j] += s * x[j];
    else
        for (int64_t j = 0; j < C; j++) d[j] = s * x[j];
}

static void cpu_scatter_rows(void *ctx, float *dst, const float *src, const int32_t *idx, int64_t n,
                             int64_t C, int add, const float *row_w, const float *item_w,
                             int64_t per, int shared) {
    (void)ctx;
    if (!shared) { /* one writer per destination row: split the rows */
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < n; i++)
            if (idx[i] >= 0)
                scatter_one(dst + (int64_t)idx[i] * C, src + i * C, C, add,
                            row_scale(idx, i, row_w, item_w, per));
        return;
    }
    /* rows shared by several items: split the columns, so that no two threads write one
     * element and each element's sum runs in the order of i */
#pragma omp parallel
    {
        const int nt = omp_get_num_threads(), id = omp_get_thread_num();
        const int64_t c0 = C * id / nt, c1 = C * (id + 1) / nt;
        for (int64_t i = 0; i < n; i++)
            if (idx[i] >= 0)
                scatter_one(dst + (int64_t)idx[i] * C + c0, src + i * C + c0, c1 - c0, add,
                            row_scale(idx, i, row_w, item_w, per));
    }
}

static void cpu_copy_block(void *ctx, float *dst, int64_t ldd, const int32_t *dst_idx,
                           const float *src, int64_t lds, const int32_t *src_idx, int64_t n,
                           int64_t w) {
    (void)ctx;
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i++)
        memcpy(dst + (dst_idx ? (int64_t)dst_idx[i] : i) * ldd,
               src + (src_idx ? (int64_t)src_idx[i] : i) * lds, sizeof(float) * (size_t)w);
}

static void cpu_bias_lookup(void *ctx, float *bias, const float *table, const int32_t *rel,
                            int64_t heads, int64_t n) {
    (void)ctx;
    for (int64_t h = 0; h < heads; h++)
        for (int64_t i = 0; i < n; i++) bias[h * n + i] = table[rel[i] * heads + h];
}
static void cpu_bias_lookup_backward(void *ctx, float *dtable, const float *dbias,
                                     const int32_t *rel, int64_t heads, int64_t n) {
    (void)ctx;
    for (int64_t h = 0; h < heads; h++)
        for (int64_t i = 0; i < n; i++) dtable[rel[i] * heads + h] += dbias[h * n + i];
}

static void cpu_to_host(void *ctx, void *dst, const void *src, size_t bytes) {
    (void)ctx;
    memcpy(dst, src, bytes);
}
static void cpu_to_device(void *ctx, void *dst, const void *src, size_t bytes) {
    (void)ctx;
    memcpy(dst, src, bytes);
}
static void cpu_to_host_maps(void *ctx, float *dst, const float *src, const int32_t *rows,
                             int64_t B, int64_t N, int64_t n) {
    (void)ctx;
    for (int64_t b = 0; b < B; b++)
        for (int64_t r = 0; r < N; r++) {
            const float *x = src + (rows ? (int64_t)rows[b * N + r] : b * N + r) * n;
            for (int64_t d = 0; d < n; d++) dst[(b * n + d) * N + r] = x[d];
        }
}
static void cpu_zero(void *ctx, float *x, int64_t n) {
    (void)ctx;
    memset(x, 0, sizeof(float) * (size_t)n);
}
static void cpu_copy(void *ctx, float *dst, const float *src, int64_t n) {
    (void)ctx;
    memcpy(dst, src, sizeof(float) * (size_t)n);
}

static void cpu_patchify(void *ctx, float *patches, const float *pix, const tb_patch_geom *g) {
    (void)ctx;
    const int64_t C = g->C, t = g->t, ph = g->ph, pw = g->pw, T = g->T, H = g->H, W = g->W;
    const int64_t K = C * t * ph * pw;
#pragma omp parallel for collapse(2) schedule(static)
    for (int64_t b = 0; b < g->B; b++)
        for (int64_t it = 0; it < g->gt; it++)
            for (int64_t iy = 0; iy < g->gh; iy++)
                for (int64_t ix = 0; ix < g->gw; ix++) {
                    float *row = patches + (((b * g->gt + it) * g->gh + iy) * g->gw + ix) * K;
                    const int inside =
                        (it + 1) * t <= T && (iy + 1) * ph <= H && (ix + 1) * pw <= W;
                    for (int64_t ch = 0; ch < C; ch++)
                        for (int64_t dt = 0; dt < t; dt++)
                            for (int64_t dy = 0; dy < ph; dy++) {
                                float *d = row + ((ch * t + dt) * ph + dy) * pw;
                                const int64_t tt = it * t + dt, y = iy * ph + dy;
                                const int64_t at = (((b * T + tt) * C + ch) * H + y) * W + ix * pw;
                                if (inside) {
                                    memcpy(d, pix + at, sizeof(float) * (size_t)pw);
                                    continue;
                                }
                                for (int64_t dx = 0; dx < pw; dx++) /* zeros beyond the pixels */
                                    d[dx] = tt < T && y < H && ix * pw + dx < W ? pix[at + dx]
                                                                                : 0.0f;
                            }
                }
}

static void cpu_patch_targets(void *ctx, float *target, const float *pix, const tb_patch_geom *g,
                              const int32_t *tokens, int64_t rows, int64_t per_clip,
                              const float *mean, const float *std, int norm) {
    (void)ctx;
    const int64_t C = g->C, tt = g->t, ph = g->ph, pw = g->pw, T = g->T, H = g->H, W = g->W;
    const int64_t per = tt * ph * pw, P = per * C;
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; r++) {
        const int64_t b = r / per_clip, tok = tokens[r];
        const int64_t it = tok / (g->gh * g->gw), iy = tok / g->gw % g->gh, ix = tok % g->gw;
        float *row = target + r * P;
        for (int64_t dt = 0; dt < tt; dt++)
            for (int64_t dy = 0; dy < ph; dy++)
                for (int64_t dx = 0; dx < pw; dx++)
                    for (int64_t ch = 0; ch < C; ch++) {
                        float v = pix[(((b * T + it * tt + dt) * C + ch) * H + iy * ph + dy) * W +
                                      ix * pw + dx];
                        if (mean) v = v * std[ch] + mean[ch];
                        row[((dt * ph + dy) * pw + dx) * C + ch] = v;
                    }
        for (int64_t ch = 0; norm && ch < C; ch++) tb_patch_norm_channel(row, C, per, ch);
    }
}

static void cpu_add_rows(void *ctx, float *y, int64_t ldy, const float *a, int64_t lda,
                         const float *b, int64_t ldb, const int32_t *b_idx, const float *c,
                         int64_t ldc, int64_t rows, int64_t n) {
    (void)ctx;
    /* rows into one (ldy 0) run in order; others split when large */
#pragma omp parallel for schedule(static) if (ldy != 0 && rows * n >= (1 << 16))
    for (int64_t i = 0; i < rows; i++) {
        float *yi = y + i * ldy;
        const float *ai = a + i * lda, *bi = b + (b_idx ? (int64_t)b_idx[i] : i) * ldb;
        if (c) {
            const float *ci = c + i * ldc;
            for (int64_t d = 0; d < n; d++) yi[d] = ai[d] + bi[d] + ci[d];
        } else {
            for (int64_t d = 0; d < n; d++) yi[d] = ai[d] + bi[d];
        }
    }
}

static void cpu_mean_rows(void *ctx, float *out, const float *x, int64_t n_seq, int64_t L,
                          int64_t n) {
    (void)ctx;
    for (int64_t i = 0; i < n_seq; i++)
        for (int64_t d = 0; d < n; d++) {
            double acc = 0;
            for (int64_t j = 0; j < L; j++) acc += x[(i * L + j) * n + d];
            out[i * n + d] = (float)(acc / (double)L);
        }
}

static void cpu_mean_rows_backward(void *ctx, float *dx, const float *dout, int64_t n_seq,
                                   int64_t L, int64_t n) {
    (void)ctx;
    for (int64_t i = 0; i < n_seq; i++)
        for (int64_t j = 0; j < L; j++)
            for (int64_t d = 0; d < n; d++) dx[(i * L + j) * n + d] = dout[i * n + d] / (float)L;
}

static void cpu_normalize_rows(void *ctx, float *x, int64_t rows, int64_t n) {
    (void)ctx;
    for (int64_t i = 0; i < rows; i++) {
        float *r = x + i * n;
        double ss = 0;
        for (int64_t d = 0; d < n; d++) ss += (double)r[d] * r[d];
        const float inv = (float)(1.0 / sqrt(ss));
        for (int64_t d = 0; d < n; d++) r[d] *= inv;
    }
}

static void cpu_row_dots(void *ctx, float *out, const float *a, int64_t lda, const float *b,
                         int64_t ldb, int64_t rows, int64_t n, float scale) {
    (void)ctx;
    for (int64_t i = 0; i < rows; i++) {
        const float *ai = a + i * lda, *bi = b + i * ldb;
        double dot = 0;
        for (int64_t d = 0; d < n; d++) dot += (double)ai[d] * bi[d];
        out[i] = (float)(scale * dot);
    }
}

static double cpu_cross_entropy(void *ctx, float *logits, const int64_t *labels, int64_t rows,
                                int64_t n, double eps) {
    (void)ctx;
    double total = 0;
    for (int64_t i = 0; i < rows; i++)
        total += tb_cross_entropy_row(logits + i * n, labels[i], n, rows, eps);
    return total;
}

static double cpu_mse(void *ctx, float *dout, const float *a, const float *b, int64_t n) {
    (void)ctx;
    double total = 0;
    for (int64_t i = 0; i < n; i++) {
        const double d = (double)a[i] - b[i];
        total += d * d;
        if (dout) dout[i] = (float)(2 * d / (double)n);
    }
    return total / (double)n;
}

/* The optimiser's: the global norm's one running sum, and the update, threaded over a large
 * tensor's elements (each element is its own). */
static double cpu_sum_squares(void *ctx, const float *const *x, const int64_t *n, int count) {
    (void)ctx;
    double sq = 0;
    for (int i = 0; i < count; i++)
        for (int64_t j = 0; x[i] && j < n[i]; j++) sq += (double)x[i][j] * x[i][j];
    return sq;
}
static void cpu_adamw(void *ctx, float *w, const float *g, float *m, float *v, int64_t n,
                      const tb_adamw_args *a) {
    (void)ctx;
#pragma omp parallel for schedule(static) if (n > 65536)
    for (int64_t j = 0; j < n; j++) tb_adamw_element(w + j, g[j], m + j, v + j, a);
}

/* The group member i belongs to. */
static int64_t group_of(const tb_grouping *g, int64_t i) {
    if (!g->start) return i / g->group_len;
    int64_t lo = 0, hi = g->n_groups - 1; /* the last group starting at or before i */
    while (lo < hi) {
        const int64_t mid = (lo + hi + 1) / 2;
        if (g->start[mid] <= i) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

static void cpu_scale_rows(void *ctx, float *y, const float *x, const float *keep,
                           const tb_grouping *g, int64_t C, int add) {
    (void)ctx;
    const int64_t rows = tb_group_members(g);
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; r++) {
        const float k = keep ? keep[group_of(g, r)] : 1.0f;
        float *d = y + r * C;
        const float *s = x + r * C;
        if (add)
            for (int64_t j = 0; j < C; j++) d[j] += k * s[j];
        else
            for (int64_t j = 0; j < C; j++) d[j] = k * s[j];
    }
}

static int cpu_attention(void *ctx, float *out, const float *q, const float *k, const float *v,
                         int64_t ld, const tb_grouping *g, int heads, int head_dim,
                         const tb_attn_bias *bias, int bf16, float *scratch, int n_threads,
                         const tb_attn_dropout *drop) {
    (void)ctx;
    if (bias)
        return tb_attention_forward_biased(out, q, k, v, ld, g, heads, head_dim, bias, scratch,
                                           n_threads, drop);
    if (bf16 && !drop)
        tb_attention_forward_bf16(out, q, k, v, ld, g, heads, head_dim, scratch, n_threads);
    else
        tb_attention_forward(out, q, k, v, ld, g, heads, head_dim, scratch, n_threads, drop);
    return TUBELET_OK;
}

static int cpu_attention_backward(void *ctx, float *dq, float *dk, float *dv, int64_t ldd,
                                  const float *q, const float *k, const float *v, int64_t ld,
                                  const float *o, const float *dout, const tb_grouping *g,
                                  int heads, int head_dim, const tb_attn_bias *bias, float *scratch,
                                  int n_threads, const tb_attn_dropout *drop) {
    (void)ctx;
    if (bias)
        return tb_attention_backward_biased(dq, dk, dv, ldd, q, k, v, ld, o, dout, g, heads,
                                            head_dim, bias, scratch, n_threads, drop);
    tb_attention_backward(dq, dk, dv, ldd, q, k, v, ld, o, dout, g, heads, head_dim, scratch,
                          n_threads, drop);
    return TUBELET_OK;
}

static void cpu_linear_backward(void *ctx, tb_lowp_ctx *c, float *dx, int64_t lddx, float *dW,
                                float *db, const float *dy, int64_t lddy, const float *x,
                                int64_t ldx, const float *W, int64_t M, int64_t N, int64_t K,
                                int accumulate_dx) {
    (void)ctx;
    (void)c; /* f32 products need no context */
    tb_linear_backward(dx, lddx, dW, db, dy, lddy, x, ldx, W, M, N, K, accumulate_dx);
}

/* bf16 operands whenever the kernel can take them */
static int cpu_mixed_attention(void *ctx, float *out, const float *q, const float *k,
                               const float *v, int64_t ld, const tb_grouping *g, int heads,
                               int head_dim, const tb_attn_bias *bias, int bf16, float *scratch,
                               int n_threads, const tb_attn_dropout *drop) {
    (void)ctx;
    (void)bf16;
    return cpu_attention(ctx, out, q, k, v, ld, g, heads, head_dim, bias, 1, scratch, n_threads,
                         drop);
}

/* The kernels of other files, each behind the context every entry takes (none here). */
static void cpu_layernorm(void *ctx, float *y, int64_t ldy, const float *x, int64_t ldx,
                          const float *w, const float *b, int64_t rows, int64_t n, float eps) {
    (void)ctx;
    tb_layernorm(y, ldy, x, ldx, w, b, rows, n, eps);
}
static void cpu_layernorm_backward(void *ctx, float *dx, const float *dy, const float *x,
                                   const float *w, float *dw, float *db, int64_t rows, int64_t n,
                                   float eps) {
    (void)ctx;
    tb_layernorm_backward(dx, dy, x, w, dw, db, rows, n, eps);
}
static void cpu_bias_act(void *ctx, float *x, const float *bias, int64_t rows, int64_t n,
                         tb_act act) {
    (void)ctx;
    tb_bias_act(x, bias, rows, n, act);
}
static void cpu_act_backward(void *ctx, float *dy, const float *h, int64_t rows, int64_t n,
                             tb_act act) {
    (void)ctx;
    tb_act_backward(dy, h, rows, n, act);
}
static void cpu_scale_cols(void *ctx, float *y, const float *lambda, int64_t rows, int64_t n) {
    (void)ctx;
    tb_scale_cols(y, lambda, rows, n);
}
static void cpu_scale_cols_backward(void *ctx, float *dy, float *dlambda, const float *y,
                                    const float *lambda, int64_t rows, int64_t n) {
    (void)ctx;
    tb_scale_cols_backward(dy, dlambda, y, lambda, rows, n);
}
static void cpu_dropout(void *ctx, float *x, int64_t n, uint64_t key, int64_t first,
                        tb_keep_rule r) {
    (void)ctx;
    tb_dropout(x, n, key, first, r);
}
static void cpu_draw_keep(void *ctx, float *keep, int64_t n, tb_drop_draws d) {
    (void)ctx;
    for (int64_t i = 0; i < n; i++) keep[i] = tb_drop_path_keep(&d, i);
}
static int64_t cpu_attention_scratch_floats(void *ctx, int64_t group_len, int head_dim,
                                            int n_threads) {
    (void)ctx;
    return tb_attention_scratch_floats(group_len, head_dim, n_threads);
}
static int64_t cpu_attention_backward_scratch_floats(void *ctx, int64_t group_len, int head_dim,
                                                     int n_threads) {
    (void)ctx;
    return tb_attention_backward_scratch_floats(group_len, head_dim, n_threads);
}
static int cpu_has_native(void *ctx, int precision) {
    (void)ctx;
    return tb_lowp_cpu_has(precision);
}
static int cpu_has_attention_bf16(void *ctx) {
    (void)ctx;
    return tb_attention_has_bf16();
}
static int cpu_pack_new(void *ctx, tb_linear_pack **out, int precision, int native, int max_weights,
                        tb_err *e) {
    (void)ctx;
    return tb_linear_pack_new(out, precision, native, max_weights, e);
}
static int cpu_pack_add(void *ctx, tb_linear_pack *p, const char *name, const float *W, int64_t N,
                        int64_t K, const tb_qweight **out, tb_err *e) {
    (void)ctx;
    return tb_linear_pack_add(p, name, W, N, K, out, e);
}
static size_t cpu_pack_bytes(void *ctx, const tb_linear_pack *p) {
    (void)ctx;
    return tb_linear_pack_bytes(p);
}
static int cpu_pack_count(void *ctx, const tb_linear_pack *p) {
    (void)ctx;
    return tb_linear_pack_count(p);
}
static const char *cpu_pack_layer(void *ctx, const tb_linear_pack *p, int i, int64_t *N,
                                  int64_t *K) {
    (void)ctx;
    return tb_linear_pack_layer(p, i, N, K);
}
static void cpu_pack_set_act(void *ctx, tb_linear_pack *p, int i, float scale, int32_t zero_point) {
    (void)ctx;
    tb_linear_pack_set_act(p, i, scale, zero_point);
}
static int cpu_pack_is_static(void *ctx, const tb_linear_pack *p) {
    (void)ctx;
    return tb_linear_pack_is_static(p);
}
static void cpu_pack_free(void *ctx, tb_linear_pack *p) {
    (void)ctx;
    tb_linear_pack_free(p);
}
static void cpu_act_quant_params(void *ctx, float lo, float hi, float *scale, int32_t *zero_point) {
    (void)ctx;
    tb_act_quant_params(lo, hi, scale, zero_point);
}
static int cpu_ctx_new(void *ctx, tb_lowp_ctx **out, const tb_linear_pack *p, int64_t max_mk,
                       int64_t max_n, int64_t max_nk, tb_err *e) {
    (void)ctx;
    return tb_linear_ctx_new(out, p, max_mk, max_n, max_nk, e);
}
static void cpu_ctx_free(void *ctx, tb_lowp_ctx *c) {
    (void)ctx;
    tb_lowp_ctx_free(c);
}
static int cpu_ctx_status(void *ctx, tb_lowp_ctx *c) {
    (void)ctx;
    return tb_lowp_ctx_status(c);
}
static void cpu_ctx_observe(void *ctx, tb_lowp_ctx *c, tb_lowp_observer fn, void *user) {
    (void)ctx;
    tb_lowp_ctx_observe(c, fn, user);
}
static void *cpu_mem_alloc(void *ctx, size_t bytes) {
    (void)ctx;
    return tb_alloc(bytes);
}
static void cpu_mem_free(void *ctx, void *p) {
    (void)ctx;
    tb_free(p);
}
static void cpu_linear(void *ctx, tb_lowp_ctx *c, float *y, int64_t ldy, const float *x,
                       const tb_lin *l, const float *b, int64_t M, int64_t N, int64_t K,
                       int accumulate) {
    (void)ctx;
    tb_lin_apply(c, y, ldy, x, l, b, M, N, K, accumulate);
}
static void cpu_linear_act(void *ctx, tb_lowp_ctx *c, float *y, const float *x, const tb_lin *l,
                           int64_t M, int64_t N, int64_t K, tb_act act) {
    (void)ctx;
    tb_lin_apply_act(c, y, x, l, M, N, K, act);
}
static void cpu_mixed_linear(void *ctx, tb_lowp_ctx *c, float *y, int64_t ldy, const float *x,
                             const tb_lin *l, const float *b, int64_t M, int64_t N, int64_t K,
                             int accumulate) {
    (void)ctx;
    tb_lin_apply_mixed(c, y, ldy, x, l, b, M, N, K, accumulate);
}
static void cpu_mixed_linear_act(void *ctx, tb_lowp_ctx *c, float *y, const float *x,
                                 const tb_lin *l, int64_t M, int64_t N, int64_t K, tb_act act) {
    (void)ctx;
    tb_lin_apply_act_mixed(c, y, x, l, M, N, K, act);
}
static void cpu_mixed_linear_backward(void *ctx, tb_lowp_ctx *c, float *dx, int64_t lddx, float *dW,
                                      float *db, const float *dy, int64_t lddy, const float *x,
                                      int64_t ldx, const float *W, int64_t M, int64_t N, int64_t K,
                                      int accumulate_dx) {
    (void)ctx;
    tb_linear_backward_mixed(c, dx, lddx, dW, db, dy, lddy, x, ldx, W, M, N, K, accumulate_dx);
}

static void cpu_rope(void *ctx, float *x, int64_t ld, int64_t rows, const int32_t *pos, int heads,
                     int head_dim, const float *cs, int64_t cs_floats, int backward) {
    (void)ctx, (void)cs_floats;
    tb_rope(x, ld, rows, pos, heads, head_dim, cs, backward);
}

/* The entries the two tables share: row-wise, token movements, attention's backward, weight
 * preparation and the state's context. */
#define CPU_SHARED                                                                                \
    .layernorm = cpu_layernorm, .layernorm_backward = cpu_layernorm_backward,                     \
    .bias_act = cpu_bias_act, .act_backward = cpu_act_backward, .scale_cols = cpu_scale_cols,     \
    .scale_cols_backward = cpu_scale_cols_backward, .scale_rows = cpu_scale_rows,                 \
    .dropout = cpu_dropout, .draw_keep = cpu_draw_keep, .gather_rows = cpu_gather_rows,            \
    .scatter_rows = cpu_scatter_rows,                                                              \
    .copy_block = cpu_copy_block, .attention_backward = cpu_attention_backward,                   \
    .bias_lookup = cpu_bias_lookup, .bias_lookup_backward = cpu_bias_lookup_backward,             \
    .attention_scratch_floats = cpu_attention_scratch_floats,                                     \
    .attention_backward_scratch_floats = cpu_attention_backward_scratch_floats,                   \
    .has_native = cpu_has_native, .has_attention_bf16 = cpu_has_attention_bf16,                   \
    .pack_new = cpu_pack_new, .pack_add = cpu_pack_add, .pack_bytes = cpu_pack_bytes,             \
    .pack_count = cpu_pack_count, .pack_layer = cpu_pack_layer, .pack_set_act = cpu_pack_set_act, \
    .pack_is_static = cpu_pack_is_static, .pack_free = cpu_pack_free,                             \
    .act_quant_params = cpu_act_quant_params, .ctx_new = cpu_ctx_new, .ctx_free = cpu_ctx_free,   \
    .ctx_status = cpu_ctx_status, .ctx_observe = cpu_ctx_observe, .mem_alloc = cpu_mem_alloc,     \
    .mem_free = cpu_mem_free, .to_host = cpu_to_host, .zero = cpu_zero,                           \
    .to_device = cpu_to_device, .normalize_rows = cpu_normalize_rows, .row_dots = cpu_row_dots,   \
    .to_host_maps = cpu_to_host_maps, .copy = cpu_copy, .patchify = cpu_patchify,                 \
    .patch_targets = cpu_patch_targets, .add_rows = cpu_add_rows, .mean_rows = cpu_mean_rows,     \
    .mean_rows_backward = cpu_mean_rows_backward, .cross_entropy = cpu_cross_entropy,             \
    .mse = cpu_mse, .rope = cpu_rope, .sum_squares = cpu_sum_squares, .adamw = cpu_adamw

const tb_kernels tb_cpu_mixed_kernels = {
    .name = "cpu-mixed-bf16",
    .linear = cpu_mixed_linear,
    .linear_act = cpu_mixed_linear_act,
    .linear_backward = cpu_mixed_linear_backward,
    .attention = cpu_mixed_attention,
    CPU_SHARED,
};

const tb_kernels tb_cpu_kernels = {
    .name = "cpu",
    .mixed = &tb_cpu_mixed_kernels,
    .linear = cpu_linear,
    .linear_act = cpu_linear_act,
    .linear_backward = cpu_linear_backward,
    .attention = cpu_attention,
    CPU_SHARED,
};
