/* The encoder the families share: tubelet/patch embedding, then pre-norm transformer blocks
 * whose attention runs over the family's token groups; each forward with its backward beside
 * it. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../kernels/ops.h"
#include "encoder.h"

/* ---- embedding ---- */

/* One row per whole t x ph x pw tubelet (2D patches when t = 1), laid out like the Conv3d
 * kernel, so that the convolution with stride = kernel is a single GEMM (the table's patchify).
 * Pixels beyond the last whole patch are dropped, as the convolution drops them: the grid is
 * the whole patches. */
static void tubelet_patchify(tubelet_state *s, const float *pix) {
    const tb_config *c = &s->m->cfg;
    tb_patch_geom g = {s->B, s->T, c->num_channels, s->H, s->W, c->tubelet_t, c->patch_h,
                       c->patch_w, s->grid_t, s->grid_h, s->grid_w};
    if (s->T >= c->tubelet_t) {
        TB_RUN(&s->be, patchify, s->patches, pix, &g);
        return;
    }
    /* a clip shorter than one tubelet, repeated tubelet_t times in time (V-JEPA 2's embeddings:
     * repeat(1, 1, tubelet_size, 1, 1)); a few frames, copied where the pixels are */
    const int64_t frame = (int64_t)c->num_channels * s->H * s->W, clip = frame * s->T;
    float *rep = TB_RUN(&s->be, mem_alloc, sizeof(float) * (size_t)(clip * c->tubelet_t * s->B));
    if (!rep) {
        tb_state_kernel_failed(s, TUBELET_ERR_MEMORY, "repeating a short clip (out of memory)");
        return;
    }
    for (int64_t b = 0; b < s->B; b++)
        for (int r = 0; r < c->tubelet_t; r++)
            TB_RUN(&s->be, copy, rep + (b * c->tubelet_t + r) * clip, pix + b * clip, clip);
    g.T = (int64_t)s->T * c->tubelet_t;
    TB_RUN(&s->be, patchify, s->patches, rep, &g);
    TB_RUN(&s->be, mem_free, rep);
}

static void tubelet_embed(tubelet_state *s, const float *pix) {
    const tb_backend *ops = &s->be;
    const tb_config *c = &s->m->cfg;
    const int64_t K = (int64_t)c->num_channels * c->tubelet_t * c->patch_h * c->patch_w;
    PROF(s, PROF_EMBED, tubelet_patchify(s, pix));
    const tb_lin patch = {s->m->w.patch_w, s->m->w.patch_b, s->m->w.patch_q};
    PROF(s, PROF_EMBED,
         TB_RUN(ops, linear, s->lowp, s->emb, c->hidden, s->patches, &patch, patch.b,
                s->B * s->n_patch, c->hidden, K, 0));
    if (!s->n_visible) {
        s->m->fam->vit->tokens(s); /* cls, positions: the family's token order */
        return;
    }
    /* pretraining: every token embedded, then the visible ones kept (embeddings[~mask]) */
    float *x = s->x;
    s->x = s->x_all;
    s->m->fam->vit->tokens(s);
    s->x = x;
    TB_RUN(ops, gather_rows, x, s->x_all, s->vis_rows, s->rows, c->hidden, NULL, NULL, 1);
}

/* Backward of the embedding: cls, positions and time embeddings (family files), then the
 * tubelet projection, whose input (the patches) is still in the arena. */
void tb_embed_backward(tubelet_state *s) {
    const tb_backend *ops = &s->be;
    const tubelet_model *m = s->m;
    const tb_config *c = &m->cfg;
    tubelet_train *tr = s->train;
    const int64_t D = c->hidden, K = (int64_t)c->num_channels * c->tubelet_t * c->patch_h * c->patch_w;
    float *dx = tr->dx;
    if (s->n_visible) { /* the masked tokens' gradient is zero */
        TB_RUN(ops, zero, s->x_all, s->B * s->n_patch * D);
        TB_RUN(ops, scatter_rows, s->x_all, dx, s->vis_rows, s->rows, D, 0, NULL, NULL, 1, 0);
        dx = s->x_all;
    }
    m->fam->vit->tokens_backward(s, dx, tr->demb);
    TB_RUN(ops, linear_backward, s->lowp, NULL, 0, (float *)tr->g->patch_w, (float *)tr->g->patch_b,
           tr->demb, D, s->patches, K, m->w.patch_w, s->B * s->n_patch, D, K, 0);
}


int tb_state_pixels(tubelet_state *s, const float **pix, char *err, size_t errlen) {
    const int64_t n = (int64_t)s->B * s->T * s->m->cfg.num_channels * s->H * s->W;
    for (int64_t i = 0; i < n; i++)
        if (!isfinite((*pix)[i])) {
            if (err && errlen)
                snprintf(err, errlen, "input holds a non-finite value (%g) at flat index %lld",
                         (double)(*pix)[i], (long long)i);
            return TUBELET_ERR_VALUE;
        }
    /* a backend with memory of its own (upload: a GPU) reads only that: one copy per pass into a
     * buffer the state keeps for its input shape */
    if (!s->be.k->upload) return TUBELET_OK;
    if (!s->pix && !(s->pix = TB_RUN(&s->be, mem_alloc, sizeof(float) * (size_t)n))) {
        if (err && errlen) snprintf(err, errlen, "out of memory for the input on the device");
        return TUBELET_ERR_MEMORY;
    }
    TB_RUN(&s->be, to_device, s->pix, *pix, sizeof(float) * (size_t)n);
    *pix = s->pix;
    return TUBELET_OK;
}

/* ---- encoder blocks ---- */

/* ---- self-attention, one function per step of the equation ----
 * The pre-norm attention sub-layer of a step over its token groups g, as the papers write it
 * (Vaswani et al.; seed 002's q, k, v, alpha, s and z' equations), in Hugging Face's training
 * order:
 *   a       = LN(x)                                          self_attention
 *   q, k, v = a W_q^T + b_q, a W_k^T + b_k, a W_v^T + b_v    project_qkv (V-JEPA 2: RoPE on q, k)
 *   o       = softmax(q k^T / sqrt(d_h)) v, per group, head  scaled_dot_product_attention
 *   p       = Dropout(o W_o^T + b_o)                         output_projection
 *   x      += DropPath(lambda * p)                           residual_add
 * o and p are group-major (one row per group member). When the groups are the rows in order and
 * nothing acts on p (no dropout, drop path or layer scale), o W_o^T + b_o goes straight into x.
 * Groups with an index table (TimeSformer's time and space groups, ...) add their members' rows
 * back, after the step's dense if it has one (TimeSformer's temporal_dense): see residual_add.
 * Each step's backward sits beside it. */

/* Where one attention sub-layer keeps what its backward needs: q|k|v of every row, the
 * attention output (group-major) and, with a second projection, the first projection's output. */
typedef struct {
    float *qkv, *o, *p;
    const float *keep; /* drop path: per group, 0 or 1/(1 - rate); NULL = off */
    int layer;
    tb_step_kind kind; /* which attention of the block (dropout keys) */
    const float *lambda; /* layer scale of the output (VideoMAE's lambda_1); NULL = none */
    float *dlambda;      /*   its gradient (backward) */
} attn_bufs;

/* Dropout sites of each kind of attention step: its output dense, its probabilities. */
static const int out_site[] = {TB_DROP_ATTN_OUT, TB_DROP_ATTN_T_OUT, TB_DROP_ATTN_W_OUT};
static const int probs_site[] = {TB_DROP_PROBS, TB_DROP_PROBS_T, TB_DROP_PROBS_W};

/* Dropout of the attention probabilities of one attention, or NULL when off. */
static const tb_attn_dropout *probs_dropout(const tubelet_state *s, tb_attn_dropout *d,
                                            attn_bufs bf) {
    if (!s->train || !s->train->active || !(s->train->attn_dropout > 0)) return NULL;
    d->p = s->train->attn_dropout;
    d->key = tb_state_dropout_key(s, bf.layer, probs_site[bf.kind]);
    return d;
}

void tb_state_linear(tubelet_state *s, float *y, int64_t ldy, const float *x, const tb_lin *l,
                     int64_t M, int64_t N, int64_t K, int accumulate) {
    TB_RUN(&s->be, linear, s->lowp, y, ldy, x, l, l->b, M, N, K, accumulate);
}

/* q|k|v (R, 3D, row order) = a W^T + b for a = LN(x) in s->a: three projections, or the fused
 * one of reduced precision; then V-JEPA 2's rotary positions on q and k. */
static void project_qkv(tubelet_state *s, const tb_mha *at, float *qkv) {
    const int64_t D = s->m->cfg.hidden, R = s->rows;
    if (at->qkv.q) {
        tb_state_linear(s, qkv, 3 * D, s->a, &at->qkv, R, 3 * D, D, 0);
    } else {
        tb_state_linear(s, qkv, 3 * D, s->a, &at->q, R, D, D, 0);
        tb_state_linear(s, qkv + D, 3 * D, s->a, &at->k, R, D, D, 0);
        tb_state_linear(s, qkv + 2 * D, 3 * D, s->a, &at->v, R, D, D, 0);
    }
    if (s->m->fam->vit->rotate_qk) s->m->fam->vit->rotate_qk(s, qkv, 0);
}

/* Its backward: dq|dk|dv in tr->dqkv (row order) → da in tr->da; the input a = LN(x) must be in
 * s->a; weight gradients are added to ga. */
static void project_qkv_backward(tubelet_state *s, const tb_mha *at, const tb_mha *ga) {
    const tb_backend *ops = &s->be;
    tubelet_train *tr = s->train;
    const int64_t D = s->m->cfg.hidden, R = s->rows;
    if (s->m->fam->vit->rotate_qk) s->m->fam->vit->rotate_qk(s, tr->dqkv, 1);
    const tb_lin *fw[3] = {&at->q, &at->k, &at->v}, *gw[3] = {&ga->q, &ga->k, &ga->v};
    for (int i = 0; i < 3; i++)
        TB_RUN(ops, linear_backward, s->lowp, tr->da, D, (float *)gw[i]->w, (float *)gw[i]->b,
               tr->dqkv + i * D, 3 * D, s->a, D, fw[i]->w, R, D, D, i > 0);
}

/* The attention kernel (the table's one entry): softmax(q k^T / sqrt(d_h)) v of q, k, v (row
 * stride 3 D) per group and head, in the model's precision: bf16 operands for reduced-precision
 * inference where the CPU has AVX512-BF16. A failure of the table's entry is kept for the end of
 * the pass (tb_pass_status). */
static void attention(tubelet_state *s, float *out, const float *q, const float *k,
                      const float *v, const tb_grouping *g, int heads,
                      const tb_attn_dropout *drop) {
    const tb_config *c = &s->m->cfg;
    const int hd = c->hidden / c->heads;
    tb_state_kernel_failed(s,
                           TB_RUN(&s->be, attention, out, q, k, v, 3 * c->hidden, g, heads, hd,
                                  NULL, s->m->attn_bf16, s->scratch, tb_state_threads(s), drop),
                           "attention");
}

/* Its backward: dq, dk, dv (row stride ldd) from the forward's output o and dO (row stride D). */
static void attention_backward(tubelet_state *s, float *dq, float *dk, float *dv, int64_t ldd,
                               const float *q, const float *k, const float *v, const float *o,
                               const float *d_o, const tb_grouping *g, int heads,
                               const tb_attn_dropout *drop) {
    const tb_config *c = &s->m->cfg;
    tb_state_kernel_failed(s,
                           TB_RUN(&s->be, attention_backward, dq, dk, dv, ldd, q, k, v,
                                  3 * c->hidden, o, d_o, g, heads, c->hidden / c->heads, NULL,
                                  s->train->scratch, tb_state_threads(s), drop),
                           "attention backward");
}


/* ViViT Model 4, factorised dot-product attention (eqs. 7-9): the heads [0, H/2) attend with
 * K_s, V_s over the tokens of their frame (s->head_group[0]), the heads [H/2, H) with K_t, V_t
 * over the tokens of their spatial position (s->head_group[1]); o = Concat(Y_s, Y_t) in row order,
 * for the one output projection that follows. Each half is the grouped kernel with H/2 heads on
 * its columns of q, k, v; its output, D/2 wide and group-major, goes into its half of o. The
 * spatial groups are contiguous rows (group-major = row order), the temporal ones have a table
 * (none when their order is the row order: one time step). */
static void factorised_dot_product_attention(tubelet_state *s, attn_bufs bf) {
    const tb_backend *ops = &s->be;
    const tb_config *c = &s->m->cfg;
    const int64_t D = c->hidden, D2 = D / 2, R = s->rows;
    const int H2 = c->heads / 2;
    const float *q = bf.qkv, *k = bf.qkv + D, *v = bf.qkv + 2 * D;
    const int32_t *rows = s->head_group[1].rows;
    tb_attn_dropout pd_s, pd_t;
    const attn_bufs in_space = {.layer = bf.layer, .kind = TB_STEP_MAIN},
                    in_time = {.layer = bf.layer, .kind = TB_STEP_TEMPORAL_OR_LOCAL};
    const tb_attn_dropout *drop_s = probs_dropout(s, &pd_s, in_space),
                          *drop_t = probs_dropout(s, &pd_t, in_time);
    float *ys = s->p, *yt = s->p2; /* (R, D/2) each */
    attention(s, ys, q, k, v, &s->head_group[0], H2, drop_s);
    attention(s, yt, q + D2, k + D2, v + D2, &s->head_group[1], H2, drop_t);
    TB_RUN(ops, copy_block, bf.o, D, NULL, ys, D2, NULL, R, D2);
    TB_RUN(ops, copy_block, bf.o + D2, D, rows, yt, D2, NULL, R, D2);
}

/* Its backward: dO = dL/do (R, D, row order) → dqkv (R, 3D, row order), each half through the
 * kernel's backward on its own columns. */
static void factorised_dot_product_attention_backward(tubelet_state *s, float *dqkv, attn_bufs bf,
                                                      const float *dO) {
    const tb_backend *ops = &s->be;
    const tb_config *c = &s->m->cfg;
    tubelet_train *tr = s->train;
    const int64_t D = c->hidden, D2 = D / 2, R = s->rows;
    const int H2 = c->heads / 2;
    const float *q = bf.qkv, *k = bf.qkv + D, *v = bf.qkv + 2 * D;
    tb_attn_dropout pd_s, pd_t;
    const attn_bufs in_space = {.layer = bf.layer, .kind = TB_STEP_MAIN},
                    in_time = {.layer = bf.layer, .kind = TB_STEP_TEMPORAL_OR_LOCAL};
    const tb_attn_dropout *drop_s = probs_dropout(s, &pd_s, in_space),
                          *drop_t = probs_dropout(s, &pd_t, in_time);
    float *o = tr->dp, *d_o = tr->dp2, *dt = tr->dqkv_g; /* (R, D/2), (R, D/2), (R, 3D/2) */
    const int32_t *rows = s->head_group[1].rows;
    /* spatial heads: their groups are contiguous rows, so dq, dk, dv land in place */
    TB_RUN(ops, copy_block, o, D2, NULL, bf.o, D, NULL, R, D2);
    TB_RUN(ops, copy_block, d_o, D2, NULL, dO, D, NULL, R, D2);
    attention_backward(s, dqkv, dqkv + D, dqkv + 2 * D, 3 * D, q, k, v, o, d_o,
                       &s->head_group[0], H2, drop_s);
    /* temporal heads: gathered group-major, their gradients scattered back to the rows */
    TB_RUN(ops, copy_block, o, D2, NULL, bf.o + D2, D, rows, R, D2);
    TB_RUN(ops, copy_block, d_o, D2, NULL, dO + D2, D, rows, R, D2);
    attention_backward(s, dt, dt + D2, dt + D, 3 * D2, q + D2, k + D2, v + D2, o, d_o,
                       &s->head_group[1], H2, drop_t);
    for (int j = 0; j < 3; j++) /* dq, dk, dv: each into its half's columns */
        TB_RUN(ops, copy_block, dqkv + j * D + D2, 3 * D, rows, dt + j * D2, 3 * D2, NULL, R, D2);
}

/* o (group-major) = softmax(q k^T / sqrt(d_h)) v for every group of g and every head, with
 * dropout on the probabilities in training; ViViT Model 4 gives each half of the heads its own
 * groups (factorised_dot_product_attention). */
static void scaled_dot_product_attention(tubelet_state *s, const tb_grouping *g, attn_bufs bf) {
    const int64_t D = s->m->cfg.hidden;
    if (s->split_heads) {
        factorised_dot_product_attention(s, bf);
        return;
    }
    tb_attn_dropout pd;
    attention(s, bf.o, bf.qkv, bf.qkv + D, bf.qkv + 2 * D, g, s->m->cfg.heads,
              probs_dropout(s, &pd, bf));
}

/* Its backward: dO (group-major) → dq|dk|dv in tr->dqkv (row order); with an index table the
 * kernel writes them group-major (tr->dqkv_g) and each member's are added back to its row. */
static void scaled_dot_product_attention_backward(tubelet_state *s, const tb_grouping *g,
                                                  attn_bufs bf, const float *dO) {
    const tb_backend *ops = &s->be;
    tubelet_train *tr = s->train;
    const int64_t D = s->m->cfg.hidden, R = s->rows, GR = tb_group_members(g);
    float *dqkv = g->rows ? tr->dqkv_g : tr->dqkv;
    tb_attn_dropout pd;
    const tb_attn_dropout *probs = probs_dropout(s, &pd, bf);
    if (s->split_heads)
        PROF(s, PROF_B_ATTN, factorised_dot_product_attention_backward(s, dqkv, bf, dO));
    else
        PROF(s, PROF_B_ATTN,
             attention_backward(s, dqkv, dqkv + D, dqkv + 2 * D, 3 * D, bf.qkv, bf.qkv + D,
                                bf.qkv + 2 * D, bf.o, dO, g, s->m->cfg.heads, probs));
    if (g->rows) {
        PROF(s, PROF_B_OTHER, TB_RUN(ops, zero, tr->dqkv, R * 3 * D); TB_RUN(
                 ops, scatter_rows, tr->dqkv, tr->dqkv_g, g->rows, GR, 3 * D, 1, NULL, NULL, 1, 1));
    }
}

/* p (n rows, group-major) = Dropout(o W_o^T + b_o): the output dense, and in training its
 * dropout. */
static void output_projection(tubelet_state *s, const tb_mha *at, float *p, int64_t n,
                              attn_bufs bf) {
    const int64_t D = s->m->cfg.hidden;
    tb_state_linear(s, p, D, bf.o, &at->o, n, D, D, 0);
    tb_state_dropout(s, bf.layer, out_site[bf.kind], p, n * D, 0);
}

/* Its backward: dP = dL/dp (n rows; changed in place by the dropout mask) → dO in tr->d_o;
 * weight gradients are added to ga->o. */
static void output_projection_backward(tubelet_state *s, const tb_mha *at, const tb_mha *ga,
                                       float *dP, int64_t n, attn_bufs bf) {
    const int64_t D = s->m->cfg.hidden;
    tb_state_dropout(s, bf.layer, out_site[bf.kind], dP, n * D, 0);
    PROF(s, PROF_B_PROJ,
         TB_RUN(&s->be, linear_backward, s->lowp, s->train->d_o, D, (float *)ga->o.w,
                (float *)ga->o.b, dP, D, bf.o, D, at->o.w, n, D, D, 0));
}

/* Nothing acts between the output dense and the residual (groups in row order, no drop path,
 * dropout or layer scale): x += o W_o^T + b_o in one call, and dL/dp is dL/dx. */
static int projects_into_residual(const tubelet_state *s, const tb_grouping *g, attn_bufs bf) {
    return !g->rows && !bf.keep && !tb_state_hidden_dropout_on(s) && !bf.lambda;
}

/* x += DropPath(lambda * p), p group-major (GR, D). Groups in row order: layer scale (VideoMAE's
 * lambda_1), then drop path on the way into x. Groups with an index table: drop path on p, as
 * Hugging Face does, then the step's dense `extra` (TimeSformer's temporal_dense), then each
 * member's output added to its row with weight row_weight (the cls token, a member of every
 * frame's group, averages its T outputs); no layer scale there (the models with one, VideoMAE's,
 * attend over whole sequences). */
static void residual_add(tubelet_state *s, const tb_grouping *g, const tb_lin *extra,
                         const float *row_weight, attn_bufs bf) {
    const tb_backend *ops = &s->be;
    const int64_t D = s->m->cfg.hidden, GR = tb_group_members(g);
    if (!g->rows) {
        if (bf.lambda) PROF(s, PROF_OTHER, TB_RUN(ops, scale_cols, bf.p, bf.lambda, GR, D));
        TB_RUN(ops, scale_rows, s->x, bf.p, bf.keep, g, D, 1);
        return;
    }
    if (bf.keep) TB_RUN(ops, scale_rows, bf.p, bf.p, bf.keep, g, D, 0);
    const float *src = bf.p;
    if (extra) {
        PROF(s, PROF_PROJ, tb_state_linear(s, s->p2, D, bf.p, extra, GR, D, D, 0));
        src = s->p2;
    }
    PROF(s, PROF_OTHER,
         TB_RUN(ops, scatter_rows, s->x, src, g->rows, GR, D, 1, row_weight, NULL, 1, 1));
}

/* Its backward: dL/dx (tr->dx) → dL/dp (tr->dp, GR rows, group-major), returned; gradients of
 * the dense added to gextra, of lambda to bf.dlambda. The forward does not keep the lambda * p it
 * scaled, so layer scale's gradient computes p again (output_projection). */
static float *residual_add_backward(tubelet_state *s, const tb_mha *at, const tb_grouping *g,
                                    const tb_lin *extra, const float *row_weight, attn_bufs bf,
                                    const tb_lin *gextra) {
    const tb_backend *ops = &s->be;
    tubelet_train *tr = s->train;
    const int64_t D = s->m->cfg.hidden, R = s->rows, GR = tb_group_members(g);
    float *dP = tr->dp;
    if (!g->rows) {
        TB_RUN(ops, copy, dP, tr->dx, R * D);
        if (bf.keep) TB_RUN(ops, scale_rows, dP, dP, bf.keep, g, D, 0);
        if (bf.lambda) {
            output_projection(s, at, tr->dp2, R, bf);
            TB_RUN(ops, scale_cols_backward, dP, bf.dlambda, tr->dp2, bf.lambda, R, D);
        }
        return dP;
    }
    PROF(s, PROF_B_OTHER,
         TB_RUN(ops, gather_rows, extra ? tr->dp2 : dP, tr->dx, g->rows, GR, D, row_weight, NULL,
                1));
    if (extra) /* P2 = P Wd^T + bd */
        PROF(s, PROF_B_PROJ,
             TB_RUN(ops, linear_backward, s->lowp, dP, D, (float *)gextra->w, (float *)gextra->b,
                    tr->dp2, D, bf.p, D, extra->w, GR, D, D, 0));
    if (bf.keep) TB_RUN(ops, scale_rows, dP, dP, bf.keep, g, D, 0);
    return dP;
}

/* x += Attention(LN(x)) over the grouping g: the steps above, in order. `extra` is a second
 * projection after the output projection (TimeSformer's temporal_dense); rows in several groups
 * (the cls token) add their outputs with weight row_weight. */
static void self_attention(tubelet_state *s, const tb_ln *ln, const tb_mha *at,
                           const tb_grouping *g, const tb_lin *extra, const float *row_weight,
                           attn_bufs bf) {
    const int64_t D = s->m->cfg.hidden, R = s->rows;
    PROF(s, PROF_NORM, TB_RUN(&s->be, layernorm, s->a, D, s->x, D, ln->w, ln->b, R, D, ln->eps));
    PROF(s, PROF_QKV, project_qkv(s, at, bf.qkv));
    PROF(s, PROF_ATTN, scaled_dot_product_attention(s, g, bf));
    if (projects_into_residual(s, g, bf)) { /* x += o W_o^T + b_o */
        PROF(s, PROF_PROJ, tb_state_linear(s, s->x, D, bf.o, &at->o, R, D, D, 1));
        return;
    }
    PROF(s, PROF_PROJ, output_projection(s, at, bf.p, tb_group_members(g), bf));
    residual_add(s, g, extra, row_weight, bf);
}

/* Its backward, x_out = x_in + Attention(LN(x_in)): dx (tr->dx) holds dL/dx_out on entry and
 * dL/dx_in on return; weight gradients are added to ga, gln, gextra. */
static void self_attention_backward(tubelet_state *s, const tb_ln *ln, const tb_mha *at,
                                    const tb_grouping *g, const tb_lin *extra,
                                    const float *row_weight, const float *x_in, attn_bufs bf,
                                    const tb_ln *gln, const tb_mha *ga, const tb_lin *gextra) {
    const tb_backend *ops = &s->be;
    tubelet_train *tr = s->train;
    const int64_t D = s->m->cfg.hidden, R = s->rows;
    float *dP = projects_into_residual(s, g, bf)
                    ? tr->dx
                    : residual_add_backward(s, at, g, extra, row_weight, bf, gextra);
    output_projection_backward(s, at, ga, dP, tb_group_members(g), bf);
    scaled_dot_product_attention_backward(s, g, bf, tr->d_o);
    /* a = LN(x_in), the projections' input, computed again */
    PROF(s, PROF_B_NORM, TB_RUN(ops, layernorm, s->a, D, x_in, D, ln->w, ln->b, R, D, ln->eps));
    PROF(s, PROF_B_QKV, project_qkv_backward(s, at, ga));
    PROF(s, PROF_B_NORM,
         TB_RUN(ops, layernorm_backward, tr->dx, tr->da, x_in, ln->w, (float *)gln->w,
                (float *)gln->b, R, D, ln->eps));
}

/* TimeSformer's intermediate drops after the activation; VideoMAE's has no dropout, and
 * transformers 5's VivitMLP none either (4.x's VivitIntermediate had one). */
static int drops_after_act(const tubelet_state *s) {
    return s->m->fam->vit->mlp_act_dropout;
}

/* x += fc2(act(fc1(LN(x)))); h (if not NULL) keeps fc1's output before the activation.
 * In training: dropout after the activation (TimeSformer) and after fc2, then drop path. */
static void mlp(tubelet_state *s, int l, const tb_block *b, float *h, const float *keep) {
    const tb_backend *ops = &s->be;
    const tb_config *c = &s->m->cfg;
    const int64_t D = c->hidden, I = c->intermediate, R = s->rows;
    PROF(s, PROF_NORM,
         TB_RUN(ops, layernorm, s->a, D, s->x, D, b->ln2.w, b->ln2.b, R, D, b->ln2.eps));
    if (h) {
        PROF(s, PROF_FC1, tb_state_linear(s, h, I, s->a, &b->fc1, R, I, D, 0));
        PROF(s, PROF_ACT, TB_RUN(ops, copy, s->mlp, h, R * I);
             TB_RUN(ops, bias_act, s->mlp, NULL, R, I, c->act));
        if (drops_after_act(s)) tb_state_dropout(s, l, TB_DROP_MLP_ACT, s->mlp, R * I, 0);
    } else {
        PROF(s, PROF_FC1, TB_RUN(ops, linear_act, s->lowp, s->mlp, s->a, &b->fc1, R, I, D, c->act));
    }
    if (keep || tb_state_hidden_dropout_on(s) || b->ls2) { /* dropout, layer scale, drop path
                                                             (one draw per sequence) */
        PROF(s, PROF_FC2, tb_state_linear(s, s->p, D, s->mlp, &b->fc2, R, D, I, 0));
        tb_state_dropout(s, l, TB_DROP_MLP_OUT, s->p, R * D, 0);
        if (b->ls2) PROF(s, PROF_OTHER, TB_RUN(ops, scale_cols, s->p, b->ls2, R, D));
        TB_RUN(ops, scale_rows, s->x, s->p, keep, &s->joint, D, 1);
        return;
    }
    PROF(s, PROF_FC2, tb_state_linear(s, s->x, D, s->mlp, &b->fc2, R, D, I, 1));
}

/* Backward of x_out = x_mid + MLP(LN(x_mid)); dx: dL/dx_out in, dL/dx_mid out. */
static void mlp_backward(tubelet_state *s, int l, const tb_block *b, const tb_block *gb,
                         const float *x_mid, const float *h, const float *keep) {
    const tb_backend *ops = &s->be;
    const tb_config *c = &s->m->cfg;
    const int64_t D = c->hidden, I = c->intermediate, R = s->rows;
    tubelet_train *tr = s->train;
    const int act_drop = drops_after_act(s);
    PROF(s, PROF_B_NORM,
         TB_RUN(ops, layernorm, s->a, D, x_mid, D, b->ln2.w, b->ln2.b, R, D, b->ln2.eps));
    PROF(s, PROF_B_ACT, TB_RUN(ops, copy, s->mlp, h, R * I);
         TB_RUN(ops, bias_act, s->mlp, NULL, R, I, c->act));
    if (act_drop) tb_state_dropout(s, l, TB_DROP_MLP_ACT, s->mlp, R * I, 0); /* fc2's input */
    const float *dy = tr->dx;
    if (keep || tb_state_hidden_dropout_on(s) || b->ls2) {
        TB_RUN(ops, copy, tr->dp, tr->dx, R * D);
        if (keep) TB_RUN(ops, scale_rows, tr->dp, tr->dp, keep, &s->joint, D, 0);
        if (b->ls2) { /* fc2's output (after dropout) the layer scale saw, computed again */
            tb_state_linear(s, tr->dp2, D, s->mlp, &b->fc2, R, D, I, 0);
            tb_state_dropout(s, l, TB_DROP_MLP_OUT, tr->dp2, R * D, 0);
            TB_RUN(ops, scale_cols_backward, tr->dp, (float *)gb->ls2, tr->dp2, b->ls2, R, D);
        }
        tb_state_dropout(s, l, TB_DROP_MLP_OUT, tr->dp, R * D, 0);
        dy = tr->dp;
    }
    PROF(s, PROF_B_FC2,
         TB_RUN(ops, linear_backward, s->lowp, tr->dmlp, I, (float *)gb->fc2.w, (float *)gb->fc2.b,
                dy, D, s->mlp, I, b->fc2.w, R, D, I, 0));
    if (act_drop) tb_state_dropout(s, l, TB_DROP_MLP_ACT, tr->dmlp, R * I, 0);
    PROF(s, PROF_B_ACT, TB_RUN(ops, act_backward, tr->dmlp, h, R, I, c->act));
    PROF(s, PROF_B_FC1,
         TB_RUN(ops, linear_backward, s->lowp, tr->da, D, (float *)gb->fc1.w, (float *)gb->fc1.b,
                tr->dmlp, I, s->a, D, b->fc1.w, R, I, D, 0));
    PROF(s, PROF_B_NORM,
         TB_RUN(ops, layernorm_backward, tr->dx, tr->da, x_mid, b->ln2.w, (float *)gb->ln2.w,
                (float *)gb->ln2.b, R, D, b->ln2.eps));
}

/* A model's blocks all have the same parts: block 0 says whether a step has a dense layer
 * (TimeSformer's temporal_dense yes, ViViT Model 3's temporal step no). */
tb_step_weights tb_step_weights_of(const tb_block *b, tb_step_kind kind) {
    switch (kind) {
    case TB_STEP_TEMPORAL_OR_LOCAL:
        return (tb_step_weights){&b->ln_t, &b->attn_t,
                              b->dense_t.w || b->dense_t.q ? &b->dense_t : NULL};
    case TB_STEP_WIDTH: return (tb_step_weights){&b->ln_w, &b->attn_w, &b->dense_w};
    default: return (tb_step_weights){&b->ln1, &b->attn, NULL};
    }
}

/* ---- the block's attention: the steps of the family's plan ----
 * A family's attention_plan (timesformer.c, vivit.c) lists the attention steps of a block, each
 * over its own token groups (tb_attn_step: the group of each patch, the cls token in it or not,
 * which weights); plan.c turns each into an index table (s->step[k], with the cls token's row
 * weights s->step_weight[k]). One step over whole sequences is joint space-time attention
 * (VideoMAE, V-JEPA 2, ViViT Models 1, 2 and 4, TimeSformer joint_space_time and space_only);
 * several run one after another (divided_space_time_attention). */

/* Attention step k of block l: x += dense(Attention(LN(x))) over the step's groups (s->step[k]:
 * TimeSformer's time, space, width, height, local or global groups, ViViT Model 3's space and
 * time groups; whole sequences otherwise).
 * In training its input, q|k|v, output and projection are kept in s->train->layer[l]. */
static void attention_step(tubelet_state *s, int l, int k) {
    const tb_backend *ops = &s->be;
    const tb_step_kind kind = s->step_kind[k];
    const tb_step_weights w = tb_step_weights_of(&s->m->w.blocks[l], kind);
    const int64_t D = s->m->cfg.hidden, R = s->rows;
    tb_layer_acts *a = s->train ? &s->train->layer[l] : NULL;
    const int on = a && s->train->active;
    if (a && k > 0) TB_RUN(ops, copy, a->x_step[k], s->x, R * D);
    const float *lambda = kind == TB_STEP_MAIN ? s->m->w.blocks[l].ls1 : NULL;
    self_attention(s, w.ln, w.at, &s->step[k], w.dense, s->step_weight[k],
                   a ? (attn_bufs){a->qkv[k], a->o[k], w.dense ? a->p[k] : s->p,
                                   on ? a->keep[k] : NULL, l, kind, lambda, NULL}
                     : (attn_bufs){s->qkv, s->o, s->p, NULL, l, kind, lambda, NULL});
}

/* Backward of attention step k: dL/d(its output) in s->train->dx → dL/d(its input). */
static void attention_step_backward(tubelet_state *s, int l, int k) {
    const tb_step_kind kind = s->step_kind[k];
    const tb_step_weights w = tb_step_weights_of(&s->m->w.blocks[l], kind);
    const tb_step_weights gw = tb_step_weights_of(&s->train->g->blocks[l], kind);
    tb_layer_acts *a = &s->train->layer[l];
    const int main_step = kind == TB_STEP_MAIN;
    self_attention_backward(s, w.ln, w.at, &s->step[k], w.dense, s->step_weight[k],
                            k ? a->x_step[k] : a->x_in,
                            (attn_bufs){a->qkv[k], a->o[k], w.dense ? a->p[k] : NULL, a->keep[k],
                                        l, kind, main_step ? s->m->w.blocks[l].ls1 : NULL,
                                        main_step ? (float *)s->train->g->blocks[l].ls1 : NULL},
                            gw.ln, gw.at, gw.dense);
}

/* TimeSformer's divided space-time attention (seed 002, eqs. 6-8): z, the block's input, attends
 * first over time, then over space, each attention a step of the plan (timesformer.c's
 * timesformer_steps) with its own LayerNorm, q, k, v and output projection (Hugging Face's
 * names in the right column); F frames, N patches per frame, p a patch, t a frame:
 *   step 0, time attention (groups tb_time_group: the F tokens of patch p; no cls token):
 *     alpha^time_(p,t) = SM(q_(p,t) / sqrt(D_h) . {k_(p,t')} t'=1..F)       temporal_attention
 *     z'^time = z + temporal_dense(W_O^time s^time)                          temporal_dense
 *       (temporal_dense, the official code's temporal_fc, is not in the paper's equations)
 *   step 1, space attention (groups tb_space_group: the N tokens of frame t and the cls token):
 *     alpha^space_(p,t) = SM(q_(p,t) / sqrt(D_h) . [k_(0,0) {k_(p',t)} p'=1..N])  attention
 *     z' = z'^time + W_O s^space, the cls token's F outputs averaged (row weight 1/F)
 * q, k, v of each step from LN of that step's input (temporal_layernorm, layernorm_before); the
 * MLP follows (tb_encoder_block). Each step is attention_step: one attention kernel, no scheme of
 * its own. The other plans of several steps run the same way: axial (time, width, height) and
 * local_global (local, global) of seed 002's Fig. 1, ViViT Model 3 (space, time: seed 000,
 * eqs. 4-5, no dense). */
static void divided_space_time_attention(tubelet_state *s, int l) {
    for (int k = 0; k < s->n_steps; k++) attention_step(s, l, k);
}

/* Its backward: the steps in reverse order, dL/dz' in s->train->dx → dL/dz. */
static void divided_space_time_attention_backward(tubelet_state *s, int l) {
    for (int k = s->n_steps - 1; k >= 0; k--) attention_step_backward(s, l, k);
}

/* One encoder block, z' = z + Attention(LN(z)), z^(l) = z' + MLP(LN(z')): one attention over each
 * sequence, or the plan's steps one after another (divided_space_time_attention), then the MLP.
 * In training, what its backward needs is kept in s->train->layer[l]; drop path and dropout act
 * only while a training step runs (s->train->active). */
void tb_encoder_block(tubelet_state *s, int l) {
    const tb_block *b = &s->m->w.blocks[l];
    const int64_t D = s->m->cfg.hidden, R = s->rows;
    tb_layer_acts *a = s->train ? &s->train->layer[l] : NULL;
    const int on = a && s->train->active;
    if (a) TB_RUN(&s->be, copy, a->x_in, s->x, R * D);
    if (s->n_steps > 1)
        divided_space_time_attention(s, l);
    else
        attention_step(s, l, 0); /* joint: over each whole sequence */
    if (a) TB_RUN(&s->be, copy, a->x_mid, s->x, R * D);
    mlp(s, l, b, a ? a->h : NULL, on ? a->keep_mlp : NULL);
}

static void encoder_block_backward(tubelet_state *s, int l) {
    const tb_block *b = &s->m->w.blocks[l], *gb = &s->train->g->blocks[l];
    tb_layer_acts *a = &s->train->layer[l];
    mlp_backward(s, l, b, gb, a->x_mid, a->h, a->keep_mlp);
    if (s->n_steps > 1)
        divided_space_time_attention_backward(s, l);
    else
        attention_step_backward(s, l, 0);
}

/* ---- stages ---- */

/* Two stages (ViViT Model 2, factorised encoder): the spatial encoder (blocks 0 .. L_s - 1) over each frame's
 * sequence, the frame representations h_i = LN(z_cls^{L_s}), and the temporal encoder (blocks
 * L_s .. L_s + L_t - 1) over [cls_t; h_1 .. h_{n_t}] + p_t of each clip. */
static void two_stage_encoder(tubelet_state *s) {
    const int Ls = s->m->cfg.layers, nb = tb_n_blocks(&s->m->cfg);
    for (int l = 0; l < Ls; l++) tb_encoder_block(s, l);
    PROF(s, PROF_OTHER, s->m->fam->vit->stage_tokens(s, s->x, s->stages[1].x,
                                                s->train ? s->train->frames : NULL));
    tb_state_enter_stage(s, 1);
    for (int l = Ls; l < nb; l++) tb_encoder_block(s, l);
}

/* Its backward between the encoders, when the backward pass reaches the spatial encoder's last
 * block: dL/d(temporal encoder input) in tr->dx → dL/d(spatial encoder output) in tr->dx. */
static void two_stage_encoder_backward(tubelet_state *s) {
    tubelet_train *tr = s->train;
    TB_RUN(&s->be, copy, tr->da, tr->dx, s->rows * s->m->cfg.hidden);
    tb_state_enter_stage(s, 0);
    s->m->fam->vit->stage_tokens_backward(s, tr->da, tr->frames, tr->dframes, tr->dx);
}

void tb_encode(tubelet_state *s, const float *pix, int n_layers) {
    omp_set_num_threads(tb_state_threads(s));
    tb_state_enter_stage(s, 0);
    tubelet_embed(s, pix);
    if (s->n_stages > 1) {
        two_stage_encoder(s);
        return;
    }
    for (int l = 0; l < n_layers; l++) tb_encoder_block(s, l);
}

/* With checkpointing, each block's forward runs again first, from its kept input. */
void tb_encoder_backward(tubelet_state *s) {
    const tb_config *c = &s->m->cfg;
    tubelet_train *tr = s->train;
    for (int l = tb_n_blocks(c) - 1; l >= 0; l--) {
        if (s->stage == 1 && l < c->layers) two_stage_encoder_backward(s);
        if (tr->checkpoint) { /* recompute what the block's backward needs */
            TB_RUN(&s->be, copy, s->x, tr->layer[l].x_in, s->rows * c->hidden);
            tb_encoder_block(s, l);
        }
        encoder_block_backward(s, l);
        if (tr->block_grad) tr->block_grad(tr->block_grad_user, l);
    }
    if (s->stage == 1) two_stage_encoder_backward(s); /* a spatial encoder of 0 blocks */
}
