/* The kernel seam (kernels/backend.h): the token movements against their references, and a
 * second table swapped in under loaded models — one that counts each call and forwards it to the
 * CPU table — to show that every family runs every operation through its model's table (a
 * direct call would leave an entry uncounted or an output different) and that a replacement
 * table gives bit-identical outputs and gradients; weight preparation (packing, calibration's
 * scales) and the state's product context go through the table too. Then a table whose entries
 * fail: a pass reports the failure (never OK with stale outputs), and only that pass. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "io/npy.h"
#include "kernels/backend.h"
#include "kernels/ref.h"
#include "models/int8_static.h"
#include "models/model.h"
#include "parity.h"
#include "tubelet.h"
#include "tubelet_pretrain.h"
#include "tubelet_text.h"

/* ---- gather and scatter against the references ---- */

static void fill(float *x, int64_t n, uint64_t seed) {
    for (int64_t i = 0; i < n; i++) x[i] = (float)(tb_splitmix64(&seed) % 2001) / 1000.0f - 1.0f;
}

static void check_rows(void) {
    enum { N_SRC = 7, N = 11, C = 13, PER = 4 };
    /* -1: a zero row (gather) or a skipped item (scatter); rows 2 and 5 repeat (shared) */
    const int32_t idx[N] = {2, 0, -1, 5, 2, 6, 1, 5, -1, 3, 2};
    const int32_t uniq[N] = {4, -1, 0, 6, 2, -1, 1, 5, -1, 3, -1};
    float src[N_SRC * C], items[N * C], row_w[N_SRC], item_w[(N + PER - 1) / PER];
    fill(src, N_SRC * C, 1), fill(items, N * C, 2), fill(row_w, N_SRC, 3);
    fill(item_w, (N + PER - 1) / PER, 4);
    for (int wmode = 0; wmode < 4; wmode++) {
        const float *rw = wmode & 1 ? row_w : NULL, *iw = wmode & 2 ? item_w : NULL;
        float got[N * C], want[N * C];
        tb_cpu_kernels.gather_rows(NULL, got, src, idx, N, C, rw, iw, PER);
        tb_gather_rows_ref(want, src, idx, N, C, rw, iw, PER);
        CHECK(!memcmp(got, want, sizeof got), "gather_rows, weights %d: differs from the reference",
              wmode);
        for (int shared = 0; shared < 2; shared++)
            for (int add = 0; add < 2; add++) {
                const int32_t *ix = shared ? idx : uniq;
                if (shared && !add) continue; /* repeated rows are summed, not assigned */
                float g[N_SRC * C], w[N_SRC * C];
                fill(g, N_SRC * C, 5), memcpy(w, g, sizeof g);
                tb_cpu_kernels.scatter_rows(NULL, g, items, ix, N, C, add, rw, iw, PER, shared);
                tb_scatter_rows_ref(w, items, ix, N, C, add, rw, iw, PER);
                CHECK(!memcmp(g, w, sizeof g),
                      "scatter_rows, weights %d, shared %d, add %d: differs from the reference",
                      wmode, shared, add);
            }
    }
}

/* ---- a counting table ---- */

enum {
    K_LINEAR, K_LINEAR_ACT, K_LINEAR_BACKWARD, K_LAYERNORM, K_LAYERNORM_BACKWARD, K_BIAS_ACT,
    K_ACT_BACKWARD, K_SCALE_COLS, K_SCALE_COLS_BACKWARD, K_SCALE_ROWS, K_DROPOUT, K_DRAW_KEEP,
    K_GATHER,
    K_SCATTER, K_COPY_BLOCK, K_BIAS_LOOKUP, K_BIAS_LOOKUP_BACKWARD, K_ATTENTION,
    K_ATTENTION_BACKWARD, K_SCRATCH, K_BACKWARD_SCRATCH, K_MEM_ALLOC, K_MEM_FREE, K_TO_HOST, K_TO_HOST_MAPS,
    K_ZERO, K_COPY, K_PATCHIFY, K_PATCH_TARGETS, K_ADD_ROWS, K_MEAN_ROWS, K_MEAN_ROWS_BACKWARD,
    K_CROSS_ENTROPY, K_MSE, K_TO_DEVICE, K_NORMALIZE_ROWS, K_ROW_DOTS,
    K_OPS, /* the operations of a pass, above; weight preparation and the state's context below */
    K_HAS_NATIVE = K_OPS, K_HAS_ATTENTION_BF16, K_PACK_NEW, K_PACK_ADD, K_PACK_BYTES,
    K_PACK_COUNT, K_PACK_LAYER, K_PACK_SET_ACT, K_PACK_IS_STATIC, K_ACT_QUANT, K_PACK_FREE,
    K_CTX_NEW, K_CTX_FREE, K_CTX_STATUS, K_CTX_OBSERVE, K_N
};
static const char *const k_name[K_N] = {
    "linear", "linear_act", "linear_backward", "layernorm", "layernorm_backward", "bias_act",
    "act_backward", "scale_cols", "scale_cols_backward", "scale_rows", "dropout", "draw_keep",
    "gather_rows",
    "scatter_rows", "copy_block", "bias_lookup", "bias_lookup_backward", "attention",
    "attention_backward", "attention_scratch_floats", "attention_backward_scratch_floats",
    "mem_alloc", "mem_free", "to_host", "to_host_maps", "zero", "copy", "patchify", "patch_targets", "add_rows",
    "mean_rows", "mean_rows_backward", "cross_entropy", "mse", "to_device", "normalize_rows",
    "row_dots", "has_native", "has_attention_bf16",
    "pack_new", "pack_add", "pack_bytes", "pack_count", "pack_layer", "pack_set_act",
    "pack_is_static", "act_quant_params", "pack_free", "ctx_new", "ctx_free", "ctx_status",
    "ctx_observe"};
static long calls[K_N];
static const tb_kernels *const cpu = &tb_cpu_kernels;

static void c_linear(void *ctx, tb_lowp_ctx *c, float *y, int64_t ldy, const float *x,
                     const tb_lin *l, const float *b, int64_t M, int64_t N, int64_t K, int acc) {
    calls[K_LINEAR]++, cpu->linear(ctx, c, y, ldy, x, l, b, M, N, K, acc);
}
static void c_linear_act(void *ctx, tb_lowp_ctx *c, float *y, const float *x, const tb_lin *l,
                         int64_t M, int64_t N, int64_t K, tb_act act) {
    calls[K_LINEAR_ACT]++, cpu->linear_act(ctx, c, y, x, l, M, N, K, act);
}
static void c_linear_backward(void *ctx, tb_lowp_ctx *c, float *dx, int64_t lddx, float *dW,
                              float *db, const float *dy, int64_t lddy, const float *x, int64_t ldx,
                              const float *W, int64_t M, int64_t N, int64_t K, int acc) {
    calls[K_LINEAR_BACKWARD]++;
    cpu->linear_backward(ctx, c, dx, lddx, dW, db, dy, lddy, x, ldx, W, M, N, K, acc);
}
static void c_layernorm(void *ctx, float *y, int64_t ldy, const float *x, int64_t ldx,
                        const float *w, const float *b, int64_t rows, int64_t n, float eps) {
    calls[K_LAYERNORM]++, cpu->layernorm(ctx, y, ldy, x, ldx, w, b, rows, n, eps);
}
static void c_layernorm_backward(void *ctx, float *dx, const float *dy, const float *x,
                                 const float *w, float *dw, float *db, int64_t rows, int64_t n,
                                 float eps) {
    calls[K_LAYERNORM_BACKWARD]++, cpu->layernorm_backward(ctx, dx, dy, x, w, dw, db, rows, n, eps);
}
static void c_bias_act(void *ctx, float *x, const float *bias, int64_t rows, int64_t n,
                       tb_act act) {
    calls[K_BIAS_ACT]++, cpu->bias_act(ctx, x, bias, rows, n, act);
}
static void c_act_backward(void *ctx, float *dy, const float *h, int64_t rows, int64_t n,
                           tb_act act) {
    calls[K_ACT_BACKWARD]++, cpu->act_backward(ctx, dy, h, rows, n, act);
}
static void c_scale_cols(void *ctx, float *y, const float *lambda, int64_t rows, int64_t n) {
    calls[K_SCALE_COLS]++, cpu->scale_cols(ctx, y, lambda, rows, n);
}
static void c_scale_cols_backward(void *ctx, float *dy, float *dl, const float *y,
                                  const float *lambda, int64_t rows, int64_t n) {
    calls[K_SCALE_COLS_BACKWARD]++, cpu->scale_cols_backward(ctx, dy, dl, y, lambda, rows, n);
}
static void c_scale_rows(void *ctx, float *y, const float *x, const float *keep,
                         const tb_grouping *g, int64_t C, int add) {
    calls[K_SCALE_ROWS]++, cpu->scale_rows(ctx, y, x, keep, g, C, add);
}
static void c_dropout(void *ctx, float *x, int64_t n, uint64_t key, int64_t first, tb_keep_rule r) {
    calls[K_DROPOUT]++, cpu->dropout(ctx, x, n, key, first, r);
}
static void c_draw_keep(void *ctx, float *keep, int64_t n, tb_drop_draws d) {
    calls[K_DRAW_KEEP]++, cpu->draw_keep(ctx, keep, n, d);
}
static void c_gather(void *ctx, float *dst, const float *src, const int32_t *idx, int64_t n,
                     int64_t C, const float *rw, const float *iw, int64_t per) {
    calls[K_GATHER]++, cpu->gather_rows(ctx, dst, src, idx, n, C, rw, iw, per);
}
static void c_scatter(void *ctx, float *dst, const float *src, const int32_t *idx, int64_t n,
                      int64_t C, int add, const float *rw, const float *iw, int64_t per,
                      int shared) {
    calls[K_SCATTER]++, cpu->scatter_rows(ctx, dst, src, idx, n, C, add, rw, iw, per, shared);
}
static void c_copy_block(void *ctx, float *dst, int64_t ldd, const int32_t *di, const float *src,
                         int64_t lds, const int32_t *si, int64_t n, int64_t w) {
    calls[K_COPY_BLOCK]++, cpu->copy_block(ctx, dst, ldd, di, src, lds, si, n, w);
}
static void c_bias_lookup(void *ctx, float *bias, const float *table, const int32_t *rel,
                          int64_t heads, int64_t n) {
    calls[K_BIAS_LOOKUP]++, cpu->bias_lookup(ctx, bias, table, rel, heads, n);
}
static void c_bias_lookup_backward(void *ctx, float *dtable, const float *dbias, const int32_t *rel,
                                   int64_t heads, int64_t n) {
    calls[K_BIAS_LOOKUP_BACKWARD]++, cpu->bias_lookup_backward(ctx, dtable, dbias, rel, heads, n);
}
static int c_attention(void *ctx, float *out, const float *q, const float *k, const float *v,
                       int64_t ld, const tb_grouping *g, int heads, int hd,
                       const tb_attn_bias *bias, int bf16, float *scratch, int nt,
                       const tb_attn_dropout *drop) {
    calls[K_ATTENTION]++;
    return cpu->attention(ctx, out, q, k, v, ld, g, heads, hd, bias, bf16, scratch, nt, drop);
}
static int c_attention_backward(void *ctx, float *dq, float *dk, float *dv, int64_t ldd,
                                const float *q, const float *k, const float *v, int64_t ld,
                                const float *o, const float *dout, const tb_grouping *g, int heads,
                                int hd, const tb_attn_bias *bias, float *scratch, int nt,
                                const tb_attn_dropout *drop) {
    calls[K_ATTENTION_BACKWARD]++;
    return cpu->attention_backward(ctx, dq, dk, dv, ldd, q, k, v, ld, o, dout, g, heads, hd, bias,
                                   scratch, nt, drop);
}
static int64_t c_scratch(void *ctx, int64_t L, int hd, int nt) {
    calls[K_SCRATCH]++;
    return cpu->attention_scratch_floats(ctx, L, hd, nt);
}
static int64_t c_backward_scratch(void *ctx, int64_t L, int hd, int nt) {
    calls[K_BACKWARD_SCRATCH]++;
    return cpu->attention_backward_scratch_floats(ctx, L, hd, nt);
}

static void *c_mem_alloc(void *ctx, size_t bytes) {
    return calls[K_MEM_ALLOC]++, cpu->mem_alloc(ctx, bytes);
}
static void c_mem_free(void *ctx, void *p) { calls[K_MEM_FREE]++, cpu->mem_free(ctx, p); }
static void c_to_host(void *ctx, void *dst, const void *src, size_t bytes) {
    calls[K_TO_HOST]++, cpu->to_host(ctx, dst, src, bytes);
}
static void c_to_device(void *ctx, void *dst, const void *src, size_t bytes) {
    calls[K_TO_DEVICE]++, cpu->to_device(ctx, dst, src, bytes);
}
static void c_normalize_rows(void *ctx, float *x, int64_t rows, int64_t n) {
    calls[K_NORMALIZE_ROWS]++, cpu->normalize_rows(ctx, x, rows, n);
}
static void c_row_dots(void *ctx, float *out, const float *a, int64_t lda, const float *b,
                       int64_t ldb, int64_t rows, int64_t n, float scale) {
    calls[K_ROW_DOTS]++, cpu->row_dots(ctx, out, a, lda, b, ldb, rows, n, scale);
}
static void c_to_host_maps(void *ctx, float *dst, const float *src, const int32_t *rows, int64_t B,
                           int64_t N, int64_t n) {
    calls[K_TO_HOST_MAPS]++, cpu->to_host_maps(ctx, dst, src, rows, B, N, n);
}
static void c_zero(void *ctx, float *x, int64_t n) { calls[K_ZERO]++, cpu->zero(ctx, x, n); }
static void c_copy(void *ctx, float *dst, const float *src, int64_t n) {
    calls[K_COPY]++, cpu->copy(ctx, dst, src, n);
}
static void c_patchify(void *ctx, float *patches, const float *pix, const tb_patch_geom *g) {
    calls[K_PATCHIFY]++, cpu->patchify(ctx, patches, pix, g);
}
static void c_patch_targets(void *ctx, float *target, const float *pix, const tb_patch_geom *g,
                            const int32_t *tokens, int64_t rows, int64_t per_clip,
                            const float *mean, const float *std, int norm) {
    calls[K_PATCH_TARGETS]++;
    cpu->patch_targets(ctx, target, pix, g, tokens, rows, per_clip, mean, std, norm);
}
static void c_add_rows(void *ctx, float *y, int64_t ldy, const float *a, int64_t lda,
                       const float *b, int64_t ldb, const int32_t *b_idx, const float *c,
                       int64_t ldc, int64_t rows, int64_t n) {
    calls[K_ADD_ROWS]++, cpu->add_rows(ctx, y, ldy, a, lda, b, ldb, b_idx, c, ldc, rows, n);
}
static void c_mean_rows(void *ctx, float *out, const float *x, int64_t n_seq, int64_t L,
                        int64_t n) {
    calls[K_MEAN_ROWS]++, cpu->mean_rows(ctx, out, x, n_seq, L, n);
}
static void c_mean_rows_backward(void *ctx, float *dx, const float *dout, int64_t n_seq, int64_t L,
                                 int64_t n) {
    calls[K_MEAN_ROWS_BACKWARD]++, cpu->mean_rows_backward(ctx, dx, dout, n_seq, L, n);
}
static double c_cross_entropy(void *ctx, float *logits, const int64_t *labels, int64_t rows,
                              int64_t n, double eps) {
    return calls[K_CROSS_ENTROPY]++, cpu->cross_entropy(ctx, logits, labels, rows, n, eps);
}
static double c_mse(void *ctx, float *d, const float *a, const float *b, int64_t n) {
    return calls[K_MSE]++, cpu->mse(ctx, d, a, b, n);
}

static int c_has_native(void *ctx, int p) { return calls[K_HAS_NATIVE]++, cpu->has_native(ctx, p); }
static int c_has_attention_bf16(void *ctx) {
    return calls[K_HAS_ATTENTION_BF16]++, cpu->has_attention_bf16(ctx);
}
static int c_pack_new(void *ctx, tb_linear_pack **out, int precision, int native, int max_w,
                      tb_err *e) {
    return calls[K_PACK_NEW]++, cpu->pack_new(ctx, out, precision, native, max_w, e);
}
static int c_pack_add(void *ctx, tb_linear_pack *p, const char *name, const float *W, int64_t N,
                      int64_t K, const tb_qweight **out, tb_err *e) {
    return calls[K_PACK_ADD]++, cpu->pack_add(ctx, p, name, W, N, K, out, e);
}
static size_t c_pack_bytes(void *ctx, const tb_linear_pack *p) {
    return calls[K_PACK_BYTES]++, cpu->pack_bytes(ctx, p);
}
static int c_pack_count(void *ctx, const tb_linear_pack *p) {
    return calls[K_PACK_COUNT]++, cpu->pack_count(ctx, p);
}
static const char *c_pack_layer(void *ctx, const tb_linear_pack *p, int i, int64_t *N, int64_t *K) {
    return calls[K_PACK_LAYER]++, cpu->pack_layer(ctx, p, i, N, K);
}
static void c_pack_set_act(void *ctx, tb_linear_pack *p, int i, float scale, int32_t zero_point) {
    calls[K_PACK_SET_ACT]++, cpu->pack_set_act(ctx, p, i, scale, zero_point);
}
static int c_pack_is_static(void *ctx, const tb_linear_pack *p) {
    return calls[K_PACK_IS_STATIC]++, cpu->pack_is_static(ctx, p);
}
static void c_act_quant(void *ctx, float lo, float hi, float *scale, int32_t *zero_point) {
    calls[K_ACT_QUANT]++, cpu->act_quant_params(ctx, lo, hi, scale, zero_point);
}
static void c_pack_free(void *ctx, tb_linear_pack *p) {
    calls[K_PACK_FREE]++, cpu->pack_free(ctx, p);
}
static int c_ctx_new(void *ctx, tb_lowp_ctx **out, const tb_linear_pack *p, int64_t max_mk,
                     int64_t max_n, int64_t max_nk, tb_err *e) {
    return calls[K_CTX_NEW]++, cpu->ctx_new(ctx, out, p, max_mk, max_n, max_nk, e);
}
static void c_ctx_free(void *ctx, tb_lowp_ctx *c) { calls[K_CTX_FREE]++, cpu->ctx_free(ctx, c); }
static int c_ctx_status(void *ctx, tb_lowp_ctx *c) {
    return calls[K_CTX_STATUS]++, cpu->ctx_status(ctx, c);
}
static void c_ctx_observe(void *ctx, tb_lowp_ctx *c, tb_lowp_observer fn, void *user) {
    calls[K_CTX_OBSERVE]++, cpu->ctx_observe(ctx, c, fn, user);
}

static const tb_kernels counting = {
    .name = "counting",
    .linear = c_linear,
    .linear_act = c_linear_act,
    .linear_backward = c_linear_backward,
    .layernorm = c_layernorm,
    .layernorm_backward = c_layernorm_backward,
    .bias_act = c_bias_act,
    .act_backward = c_act_backward,
    .scale_cols = c_scale_cols,
    .scale_cols_backward = c_scale_cols_backward,
    .scale_rows = c_scale_rows,
    .dropout = c_dropout,
    .draw_keep = c_draw_keep,
    .gather_rows = c_gather,
    .scatter_rows = c_scatter,
    .copy_block = c_copy_block,
    .bias_lookup = c_bias_lookup,
    .bias_lookup_backward = c_bias_lookup_backward,
    .attention = c_attention,
    .attention_backward = c_attention_backward,
    .attention_scratch_floats = c_scratch,
    .attention_backward_scratch_floats = c_backward_scratch,
    .has_native = c_has_native,
    .has_attention_bf16 = c_has_attention_bf16,
    .pack_new = c_pack_new,
    .pack_add = c_pack_add,
    .pack_bytes = c_pack_bytes,
    .pack_count = c_pack_count,
    .pack_layer = c_pack_layer,
    .pack_set_act = c_pack_set_act,
    .pack_is_static = c_pack_is_static,
    .act_quant_params = c_act_quant,
    .pack_free = c_pack_free,
    .ctx_new = c_ctx_new,
    .ctx_free = c_ctx_free,
    .ctx_status = c_ctx_status,
    .ctx_observe = c_ctx_observe,
    .mem_alloc = c_mem_alloc,
    .mem_free = c_mem_free,
    .to_host = c_to_host,
    .to_host_maps = c_to_host_maps,
    .to_device = c_to_device,
    .normalize_rows = c_normalize_rows,
    .row_dots = c_row_dots,
    .zero = c_zero,
    .copy = c_copy,
    .patchify = c_patchify,
    .patch_targets = c_patch_targets,
    .add_rows = c_add_rows,
    .mean_rows = c_mean_rows,
    .mean_rows_backward = c_mean_rows_backward,
    .cross_entropy = c_cross_entropy,
    .mse = c_mse,
};

/* ---- runs under each table ---- */

/* What one run produced, all of it, to compare byte for byte. */
typedef struct {
    float *v;
    size_t n, cap;
} outs;

static void keep(outs *o, const float *x, size_t n) {
    if (o->n + n > o->cap) {
        o->cap = 2 * (o->n + n);
        o->v = realloc(o->v, o->cap * sizeof(float));
    }
    memcpy(o->v + o->n, x, n * sizeof(float));
    o->n += n;
}

static void keep_grads(outs *o, const tubelet_model *m, const tubelet_grads *g) {
    for (int i = 0; i < tubelet_model_n_tensors(m); i++) {
        tubelet_shape sh;
        tubelet_model_tensor(m, i, &sh, NULL);
        keep(o, tubelet_grads_at(g, i), (size_t)tubelet_shape_numel(&sh));
    }
}

/* mixed: mixed-precision training, on the portable path (a product context everywhere); k NULL:
 * the model's own table. */
static tubelet_model *open_model(const char *fixture, int inference, int mixed,
                                 const tb_kernels *k) {
    char dir[1024], err[512];
    snprintf(dir, sizeof dir, "%s/%s", parity_fixtures_dir(), fixture);
    tubelet_load_params lp = tubelet_load_default_params();
    lp.n_threads = 2, lp.inference = inference;
    if (mixed) lp.train_precision = TUBELET_PRECISION_BF16, lp.precision_reference = 1;
    tubelet_model *m = NULL;
    const int rc = tubelet_model_load(&m, dir, &lp, err, sizeof err);
    CHECK(!rc, "%s: %s", fixture, err);
    if (m && k) m->be.k = k; /* before any state: the scratch sizes come from the table too */
    return m;
}

/* Inference (logits and hidden states, packed weights) and one training step with dropout and
 * drop path (loss, logits, every gradient). */
static void run_classifier(const char *fixture, const tb_kernels *k, outs *o) {
    npy_array x = {0}, y = {0};
    char err[512];
    if (!parity_fixture_npy(fixture, "input.npy", &x) ||
        !parity_fixture_npy(fixture, "labels.npy", &y))
        goto done;
    const int B = (int)x.shape[0], T = (int)x.shape[1], H = (int)x.shape[3], W = (int)x.shape[4];
    for (int inference = 1; inference >= 0; inference--) {
        tubelet_model *m = open_model(fixture, inference, 0, k);
        tubelet_state *s = NULL;
        tubelet_grads *g = NULL;
        int rc = m ? tubelet_state_new(&s, m, B, T, H, W, err, sizeof err) : -1;
        tubelet_shape ls, hs;
        if (!rc) tubelet_state_logits_shape(s, &ls), tubelet_state_hidden_shape(s, &hs);
        float *l = rc ? NULL : calloc((size_t)tubelet_shape_numel(&ls), 4);
        float *h = rc ? NULL : calloc((size_t)tubelet_shape_numel(&hs), 4);
        if (!rc && inference) {
            rc = tubelet_forward(s, x.data, l, h, err, sizeof err);
            if (!rc) keep(o, h, (size_t)tubelet_shape_numel(&hs));
            /* the first feature level (ViViT Model 2 has none) */
            tubelet_shape fs;
            float *f = rc || tubelet_state_level_shape(s, 0, &fs)
                           ? NULL : calloc((size_t)tubelet_shape_numel(&fs), 4);
            if (f) {
                const int rf = tubelet_forward_features(s, x.data, 1, NULL, &f, err, sizeof err);
                CHECK(!rf || !strcmp(fixture, "vivit_m2_tubelet"), "%s: features: %s", fixture,
                      err);
                if (!rf) keep(o, f, (size_t)tubelet_shape_numel(&fs));
            }
            free(f);
        } else if (!rc) {
            rc = tubelet_grads_new(&g, m, err, sizeof err);
            if (!rc) rc = tubelet_state_enable_training(s, 1, g, err, sizeof err);
            if (!rc) {
                tubelet_state_set_dropout(s, 0.2f, 0.1f, 11, 3);
                tubelet_state_set_drop_path(s, 0.3f, 5, 2);
            }
            float loss = 0;
            if (!rc) rc = tubelet_forward_backward(s, x.data, y.data, &loss, l, err, sizeof err);
            if (!rc) keep(o, &loss, 1);
            if (!rc) keep_grads(o, m, g);
        }
        CHECK(!rc, "%s (%s, %s table): %s", fixture, inference ? "inference" : "training",
              k->name, err);
        if (!rc) keep(o, l, (size_t)tubelet_shape_numel(&ls));
        free(l), free(h);
        tubelet_grads_free(g);
        tubelet_state_free(s);
        tubelet_model_free(m);
    }
done:
    npy_free(&x), npy_free(&y);
}

/* A masked-pretraining run of the fixture on m (NULL: a failed load): its input, its mask (1 =
 * masked), gradients and the state; ok 0 when any of it failed (reported). */
typedef struct {
    tubelet_model *m;
    npy_array x;
    uint8_t *mask;
    tubelet_grads *g;
    tubelet_pretrain *p;
    int ok;
} pretrain_run;

static pretrain_run pretrain_open(const char *fixture, tubelet_model *m) {
    pretrain_run r = {.m = m};
    npy_array mask = {0};
    char err[512] = "";
    if (!m || !parity_fixture_npy(fixture, "input.npy", &r.x) ||
        !parity_fixture_npy(fixture, "mask.npy", &mask)) {
        npy_free(&mask);
        return r;
    }
    const int B = (int)r.x.shape[0];
    r.mask = malloc(mask.numel);
    int n_masked = 0;
    for (size_t i = 0; i < mask.numel; i++) {
        r.mask[i] = ((const uint8_t *)mask.data)[i] != 0;
        if (i < mask.numel / (size_t)B) n_masked += r.mask[i];
    }
    npy_free(&mask);
    int rc = tubelet_grads_new(&r.g, m, err, sizeof err);
    if (!rc) rc = tubelet_pretrain_new(&r.p, m, B, (int)r.x.shape[1], (int)r.x.shape[2],
                                       (int)r.x.shape[3], (int)r.x.shape[4], n_masked, r.g, 0, err, sizeof err);
    CHECK(!rc, "%s (%s table): %s", fixture, m->be.k->name, err);
    r.ok = !rc;
    return r;
}

static void pretrain_close(pretrain_run *r) {
    free(r->mask);
    tubelet_pretrain_free(r->p);
    tubelet_grads_free(r->g);
    tubelet_model_free(r->m);
    npy_free(&r->x);
}

/* One masked-pretraining step: loss, logits, every gradient. */
static void run_pretrain(const char *fixture, const tb_kernels *k, outs *o) {
    char err[512];
    pretrain_run r = pretrain_open(fixture, open_model(fixture, 0, 0, k));
    if (r.ok) {
        tubelet_shape ls;
        tubelet_pretrain_logits_shape(r.p, &ls);
        float loss = 0, *l = calloc((size_t)tubelet_shape_numel(&ls), 4);
        const int rc = tubelet_pretrain_step(r.p, r.x.data, r.mask, 1, &loss, l, err, sizeof err);
        CHECK(!rc, "%s (%s table): %s", fixture, k->name, err);
        if (!rc) {
            keep(o, &loss, 1), keep(o, l, (size_t)tubelet_shape_numel(&ls));
            keep_grads(o, r.m, r.g);
        }
        free(l);
    }
    pretrain_close(&r);
}

/* ---- a table whose entries fail ---- */

static const tb_kernels *base; /* the model's own table, which the failing one forwards to */
static tb_kernels failing;
static int fail_products;      /* products still to fail, as a backend's product that cannot run
                                  does: NaN out and the failure kept in the state's context */
static int fail_attention, fail_attention_backward; /* status returned instead of running */

static void f_linear(void *ctx, tb_lowp_ctx *c, float *y, int64_t ldy, const float *x,
                     const tb_lin *l, const float *b, int64_t M, int64_t N, int64_t K, int acc) {
    base->linear(ctx, c, y, ldy, x, l, b, M, N, K, acc);
    if (fail_products > 0 && c) fail_products--, tb_lowp_ctx_fail(c, y, ldy, M, N);
}
static void f_linear_act(void *ctx, tb_lowp_ctx *c, float *y, const float *x, const tb_lin *l,
                         int64_t M, int64_t N, int64_t K, tb_act act) {
    base->linear_act(ctx, c, y, x, l, M, N, K, act);
    if (fail_products > 0 && c) fail_products--, tb_lowp_ctx_fail(c, y, N, M, N);
}
static int f_attention(void *ctx, float *out, const float *q, const float *k, const float *v,
                       int64_t ld, const tb_grouping *g, int heads, int hd,
                       const tb_attn_bias *bias, int bf16, float *scratch, int nt,
                       const tb_attn_dropout *drop) {
    if (fail_attention) return fail_attention; /* out left as it was */
    return base->attention(ctx, out, q, k, v, ld, g, heads, hd, bias, bf16, scratch, nt, drop);
}
static int f_attention_backward(void *ctx, float *dq, float *dk, float *dv, int64_t ldd,
                                const float *q, const float *k, const float *v, int64_t ld,
                                const float *o, const float *dout, const tb_grouping *g, int heads,
                                int hd, const tb_attn_bias *bias, float *scratch, int nt,
                                const tb_attn_dropout *drop) {
    if (fail_attention_backward) return fail_attention_backward;
    return base->attention_backward(ctx, dq, dk, dv, ldd, q, k, v, ld, o, dout, g, heads, hd, bias,
                                    scratch, nt, drop);
}

/* A model of the fixture (mixed: in mixed-precision training) under the failing table. */
static tubelet_model *open_failing(const char *fixture, int mixed) {
    tubelet_model *m = open_model(fixture, 0, mixed, NULL);
    if (!m) return NULL;
    base = m->be.k, failing = *base;
    failing.name = "failing";
    failing.linear = f_linear, failing.linear_act = f_linear_act;
    failing.attention = f_attention, failing.attention_backward = f_attention_backward;
    m->be.k = &failing;
    return m;
}

/* One training step (and, with forward, one forward first) under the failing table: the
 * status each returned, its message in err. */
static int failing_step(tubelet_state *s, const npy_array *x, const npy_array *y, char *err) {
    tubelet_shape ls;
    tubelet_state_logits_shape(s, &ls);
    float loss = 0, *l = calloc((size_t)tubelet_shape_numel(&ls), 4);
    const int rc = tubelet_forward_backward(s, x->data, y->data, &loss, l, err, 512);
    free(l);
    return rc;
}

static int failing_forward(tubelet_state *s, const npy_array *x, char *err) {
    tubelet_shape ls;
    tubelet_state_logits_shape(s, &ls);
    float *l = calloc((size_t)tubelet_shape_numel(&ls), 4);
    const int rc = tubelet_forward(s, x->data, l, NULL, err, 512);
    free(l);
    return rc;
}

/* The attention entry's status reaches the caller of the forward and of the training step,
 * with its message, and a later healthy pass is OK (an attention that refuses its groups used to
 * leave the previous output in place and return OK). mixed: products that fail in the same
 * pass (the attention's failure is reported first). Then a failed product in a training step is
 * reported as itself, not as the non-finite loss it causes, and does not fail the next step (its
 * status used to stay in the context: the next healthy step failed with it). */
static void check_failures(const char *fixture) {
    npy_array x = {0}, y = {0};
    char err[512] = "";
    tubelet_model *m = NULL;
    tubelet_state *s = NULL;
    tubelet_grads *g = NULL;
    if (!parity_fixture_npy(fixture, "input.npy", &x) ||
        !parity_fixture_npy(fixture, "labels.npy", &y))
        goto done;
    const int B = (int)x.shape[0], T = (int)x.shape[1], H = (int)x.shape[3], W = (int)x.shape[4];
    for (int mixed = 0; mixed < 2; mixed++) {
        if (!(m = open_failing(fixture, mixed))) goto done;
        int rc = tubelet_state_new(&s, m, B, T, H, W, err, sizeof err);
        if (!rc) rc = tubelet_grads_new(&g, m, err, sizeof err);
        if (!rc) rc = tubelet_state_enable_training(s, 0, g, err, sizeof err);
        CHECK(!rc, "%s: %s", fixture, err);
        if (rc) goto done;
        fail_attention = TUBELET_ERR_SHAPE, fail_products = mixed;
        rc = failing_forward(s, &x, err);
        CHECK(rc == TUBELET_ERR_SHAPE && strstr(err, "failing kernels'") &&
                  strstr(err, "attention failed"),
              "%s (mixed %d): a forward whose attention failed returned %d (%s)", fixture, mixed,
              rc, err);
        rc = failing_step(s, &x, &y, err);
        CHECK(rc == TUBELET_ERR_SHAPE && strstr(err, "attention failed"),
              "%s (mixed %d): a training step whose attention failed returned %d (%s)", fixture,
              mixed, rc, err);
        fail_attention = 0, fail_attention_backward = TUBELET_ERR_VALUE, fail_products = 0;
        rc = failing_step(s, &x, &y, err);
        CHECK(rc == TUBELET_ERR_VALUE && strstr(err, "attention backward failed"),
              "%s (mixed %d): a training step whose attention backward failed returned %d (%s)",
              fixture, mixed, rc, err);
        fail_attention_backward = 0;
        rc = failing_forward(s, &x, err);
        CHECK(!rc, "%s (mixed %d): a healthy forward after failed ones: %s", fixture, mixed, err);
        if (mixed) {
            fail_products = 1; /* the first: the patch embedding's */
            rc = failing_step(s, &x, &y, err);
            CHECK(rc == TUBELET_ERR_UNSUPPORTED && strstr(err, "product of a linear layer"),
                  "%s: a training step whose product failed returned %d (%s)", fixture, rc, err);
            fail_products = 0;
        }
        rc = failing_step(s, &x, &y, err);
        CHECK(!rc, "%s (mixed %d): a healthy training step after failed ones: %s", fixture, mixed,
              err);
        tubelet_grads_free(g), g = NULL;
        tubelet_state_free(s), s = NULL;
        tubelet_model_free(m), m = NULL;
    }
done:
    fail_products = fail_attention = fail_attention_backward = 0;
    tubelet_grads_free(g);
    tubelet_state_free(s);
    tubelet_model_free(m);
    npy_free(&x), npy_free(&y);
}

/* Pretraining runs two states (encoder and decoder): a step whose products fail in both reports
 * it, and the next healthy step is OK (the decoder's status used to be left unread when the
 * encoder's failed, and failed the next step). Its attention's failure is reported too. */
static void check_pretrain_failures(const char *fixture) {
    char err[512] = "";
    pretrain_run r = pretrain_open(fixture, open_failing(fixture, 1));
    float loss = 0;
    if (r.ok) {
        fail_products = 1 << 30; /* every product of the step, in both states */
        int rc = tubelet_pretrain_step(r.p, r.x.data, r.mask, 1, &loss, NULL, err, sizeof err);
        CHECK(rc == TUBELET_ERR_UNSUPPORTED && strstr(err, "product of a linear layer"),
              "%s: a pretraining step whose products failed returned %d (%s)", fixture, rc, err);
        fail_products = 0, fail_attention = TUBELET_ERR_SHAPE;
        rc = tubelet_pretrain_step(r.p, r.x.data, r.mask, 1, &loss, NULL, err, sizeof err);
        CHECK(rc == TUBELET_ERR_SHAPE && strstr(err, "attention failed"),
              "%s: a pretraining step whose attention failed returned %d (%s)", fixture, rc, err);
        fail_attention = 0;
        rc = tubelet_pretrain_step(r.p, r.x.data, r.mask, 1, &loss, NULL, err, sizeof err);
        CHECK(!rc, "%s: a healthy pretraining step after failed ones: %s", fixture, err);
    }
    fail_products = fail_attention = 0;
    pretrain_close(&r);
}

/* X-CLIP's text tower, its video pass and the logits against the texts (tubelet_text.h): the
 * text embeddings, the logits, the video embeddings and the texts adapted to each clip. */
static void run_xclip(const char *fixture, const tb_kernels *k, outs *o) {
    npy_array x = {0}, ids = {0};
    char err[512] = "";
    tubelet_model *m = open_model(fixture, 1, 0, k);
    tubelet_state *s = NULL;
    int P = 0, ctx = 0;
    int rc = !m || !parity_fixture_npy(fixture, "x.npy", &x) ||
             !parity_fixture_npy(fixture, "ids.npy", &ids) || tubelet_text_dims(m, &P, &ctx);
    const int n = rc ? 0 : (int)ids.shape[0], C = rc ? 0 : (int)ids.shape[1];
    const int B = rc ? 0 : (int)x.shape[0];
    float *text = rc ? NULL : calloc((size_t)(n * P), 4);
    float *lg = rc ? NULL : calloc((size_t)(B * n), 4);
    float *video = rc ? NULL : calloc((size_t)(B * P), 4);
    float *tout = rc ? NULL : calloc((size_t)(B * n * P), 4);
    if (!rc) rc = tubelet_encode_text(m, ids.data, n, C, text, err, sizeof err);
    if (!rc) rc = tubelet_state_new(&s, m, B, (int)x.shape[1], (int)x.shape[3], (int)x.shape[4],
                                    err, sizeof err);
    if (!rc) rc = tubelet_forward_text(s, x.data, text, n, lg, video, tout, err, sizeof err);
    CHECK(!rc, "%s (%s table): %s", fixture, k->name, err);
    if (!rc) {
        keep(o, text, (size_t)(n * P)), keep(o, lg, (size_t)(B * n));
        keep(o, video, (size_t)(B * P)), keep(o, tout, (size_t)(B * n * P));
    }
    free(text), free(lg), free(video), free(tout);
    tubelet_state_free(s);
    tubelet_model_free(m);
    npy_free(&x), npy_free(&ids);
}

/* Weight preparation and the state's context through the table: a model loaded in fp32 and packed
 * under the counting table (the load itself ran under the CPU's), calibrated, then packed again
 * as int8 with the scales calibration wrote; every entry of the path counted. */
static void check_preparation(const char *fixture) {
    char err[512] = "", dir[] = "/tmp/tb_backend_XXXXXX";
    npy_array x = {0};
    tubelet_model *m[2] = {open_model(fixture, 0, 0, &counting),
                           open_model(fixture, 0, 0, &counting)};
    tubelet_state *s = NULL;
    tubelet_calib *c = NULL;
    tb_err e = {{0}};
    memset(calls, 0, sizeof calls);
    int rc = !m[0] || !m[1] || !parity_fixture_npy(fixture, "input.npy", &x) || !mkdtemp(dir);
    if (!rc) rc = tb_model_set_precision(m[0], TB_PREC_FP32, 0, 1, &e);
    if (!rc) rc = tubelet_calib_new(&c, m[0], 100, err, sizeof err);
    if (!rc) rc = tubelet_state_new(&s, m[0], (int)x.shape[0], (int)x.shape[1], (int)x.shape[3],
                                    (int)x.shape[4], err, sizeof err);
    if (!rc) rc = tubelet_calib_observe(c, s, x.data, err, sizeof err);
    if (!rc) rc = tubelet_calib_write(c, dir, err, sizeof err);
    tubelet_state_free(s);
    if (!rc) rc = tb_model_set_precision(m[1], TB_PREC_INT8, 0, 1, &e);
    if (!rc) rc = tb_model_int8_scales(m[1], dir, &e);
    CHECK(!rc, "%s: packing under the counting table: %s %s", fixture, err, e.msg);
    CHECK(!rc && tb_model_int8_static(m[1]) && tb_model_linear_bytes(m[1]) > 0,
          "%s: the int8 model packed under the counting table has no static scales", fixture);
    tubelet_calib_free(c);
    tubelet_model_free(m[0]), tubelet_model_free(m[1]);
    char path[64];
    snprintf(path, sizeof path, "%s/int8_scales.json", dir);
    remove(path), remove(dir);
    npy_free(&x);
    for (int k = K_OPS; k < K_N; k++)
        CHECK(calls[k] > 0 || (k == K_HAS_ATTENTION_BF16 && !tb_lowp_cpu_has(TB_PREC_BF16)),
              "%s: weight preparation did not call the table's %s", fixture, k_name[k]);
}

/* The backend is chosen at load by name (tubelet_load_params.device): none or "cpu" is the CPU
 * table, and with mixed-precision training its mixed table; another name is refused, naming it
 * and the backends there are. */
static void check_device(void) {
    char dir[1024], err[512] = "";
    snprintf(dir, sizeof dir, "%s/%s", parity_fixtures_dir(), "vivit_m4_frames");
    tubelet_load_params lp = tubelet_load_default_params();
    lp.n_threads = 1;
    const char *names[] = {NULL, "cpu", "cpu"};
    for (int i = 0; i < 3; i++) {
        tubelet_model *m = NULL;
        lp.device = names[i], lp.train_precision = i == 2 ? TUBELET_PRECISION_BF16 : 0;
        int rc = tubelet_model_load(&m, dir, &lp, err, sizeof err);
        CHECK(!rc && m && m->be.k == (i == 2 ? tb_cpu_kernels.mixed : &tb_cpu_kernels),
              "device %s: %s", names[i] ? names[i] : "(none)", err);
        tubelet_model_free(m);
    }
    tubelet_model *m = NULL;
    lp.device = "nope", lp.train_precision = 0;
    int rc = tubelet_model_load(&m, dir, &lp, err, sizeof err);
    CHECK(rc == TUBELET_ERR_ARG && !m && strstr(err, "unknown device 'nope'") &&
              strstr(err, "cpu"), "device nope: status %d, '%s'", rc, err);
    lp.device = "cuda";
    rc = tubelet_model_load(&m, dir, &lp, err, sizeof err);
#ifndef TUBELET_CUDA
    /* a build without the CUDA backend says so, and how to get one */
    CHECK(rc == TUBELET_ERR_ARG && !m && strstr(err, "no CUDA backend") &&
              strstr(err, "CUDA=1") && strstr(err, "cpu"), "device cuda: status %d, '%s'", rc,
          err);
#else
    /* make CUDA=1: on a machine without a GPU (or its driver) the load fails with a message
     * that says so, and nothing crashes; with a GPU it loads (parity: tools/gpu_check.sh) */
    void *probe = NULL;
    if (tb_cuda_kernels.open(&probe, NULL) == TUBELET_OK) {
        tb_cuda_kernels.close(probe);
        CHECK(!rc && m && m->be.k == &tb_cuda_kernels, "device cuda with a GPU: %s", err);
        printf("test_backend: a GPU is present: device cuda loaded (parity is gpu_check.sh's)\n");
    } else {
        CHECK(rc == TUBELET_ERR_UNSUPPORTED && !m && strstr(err, "device cuda") &&
                  strstr(err, "GPU") && strstr(err, "vivit_m4_frames"),
              "device cuda without a GPU: status %d, '%s'", rc, err);
        printf("test_backend: no GPU here: device cuda refused at load: %s\n", err);
    }
    CHECK(tb_backend_find("cuda") == &tb_cuda_kernels, "tb_backend_find(cuda)");
#endif
    tubelet_model_free(m);
    CHECK(tb_backend_find("cpu") == &tb_cpu_kernels && !tb_backend_find("nope"),
          "tb_backend_find");
}

int main(int argc, char **argv) {
    check_cases(argc, argv);
    CASE(check_device());
    CASE(check_rows());
    /* a family of each kind: shared token rows (TimeSformer divided: the cls in every frame's
     * group), layer scale (STMixer's VideoMAE), two stages (ViViT Model 2), split heads (Model 4),
     * windows with a bias (Video Swin), the visible tokens (pretraining) */
    const char *classifiers[] = {"timesformer_divided", "stmixer_backbone", "vivit_m2_tubelet",
                                 "vivit_m4_frames", "video_swin_shift"};
    long seen[K_N] = {0};
    for (size_t i = 0; i < sizeof classifiers / sizeof *classifiers; i++) {
        if (!check_select("counting_table(%s)", classifiers[i])) continue;
        outs a = {0}, b = {0};
        memset(calls, 0, sizeof calls);
        run_classifier(classifiers[i], &tb_cpu_kernels, &a);
        run_classifier(classifiers[i], &counting, &b);
        long total = 0;
        for (int e = 0; e < K_N; e++) total += calls[e], seen[e] += calls[e];
        CHECK(total > 0 && a.n == b.n && a.n > 0 && !memcmp(a.v, b.v, a.n * sizeof(float)),
              "%s: the counting table's outputs differ from the CPU table's (%zu vs %zu floats, "
              "%ld calls)", classifiers[i], a.n, b.n, total);
        free(a.v), free(b.v);
    }
    outs a = {0}, b = {0};
    if (check_select("counting_table(xclip/p32_f3)")) {
        memset(calls, 0, sizeof calls);
        run_xclip("xclip/p32_f3", &tb_cpu_kernels, &a);
        run_xclip("xclip/p32_f3", &counting, &b);
        CHECK(calls[K_TO_DEVICE] > 0 && calls[K_ROW_DOTS] > 0 && calls[K_PATCHIFY] > 0,
              "X-CLIP: the texts' upload, the logits or the patches did not go through the table");
        CHECK(a.n == b.n && a.n > 0 && !memcmp(a.v, b.v, a.n * sizeof(float)),
              "X-CLIP: the counting table's outputs differ from the CPU table's");
        free(a.v), free(b.v);
        for (int e = 0; e < K_N; e++) seen[e] += calls[e];
    }
    if (check_select("counting_table(pretrain_normpix)")) {
        a = (outs){0}, b = (outs){0};
        memset(calls, 0, sizeof calls);
        run_pretrain("pretrain_normpix", &tb_cpu_kernels, &a);
        run_pretrain("pretrain_normpix", &counting, &b);
        CHECK(calls[K_GATHER] > 0 && calls[K_SCATTER] > 0 && calls[K_ATTENTION_BACKWARD] > 0,
              "pretraining: the visible tokens' gather and scatter or the attention backward did "
              "not go through the table");
        CHECK(a.n == b.n && a.n > 0 && !memcmp(a.v, b.v, a.n * sizeof(float)),
              "pretraining: the counting table's outputs differ from the CPU table's");
        free(a.v), free(b.v);
        for (int e = 0; e < K_N; e++) seen[e] += calls[e];
    }
    /* over the counting table's cases above: all of them must have run */
    if (check_unfiltered())
        for (int e = 0; e < K_OPS; e++) CHECK(seen[e] > 0, "no model called the table's %s", k_name[e]);
    CASE(check_preparation("timesformer_divided"));
    CASE(check_preparation("video_swin_shift"));
    /* the shared encoder's attention (steps with a cls in every group), the split heads of
     * Model 4, Video Swin's window attention */
    CASE(check_failures("timesformer_divided"));
    CASE(check_failures("vivit_m4_frames"));
    CASE(check_failures("video_swin_shift"));
    CASE(check_pretrain_failures("pretrain_normpix"));
    return check_done();
}
