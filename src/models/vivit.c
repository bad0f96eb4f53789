/* ViViT (Arnab et al. 2021, seed 000): the four models of the paper (docs/vivit-variants.md).
 *   Model 1, spatio-temporal attention: Hugging Face's VivitModel / VivitForVideoClassification —
 *     tubelet embedding (Conv3d, stride = kernel; t = 1 is uniform frame sampling), a cls token,
 *     learned positions, pre-norm blocks with joint attention over all tokens, final LayerNorm,
 *     classifier on the cls token.
 *   Model 2, factorised encoder: the same blocks over each frame's tokens with a per-frame cls
 *     token (spatial encoder, num_hidden_layers), its final LayerNorm on the frames' cls tokens,
 *     then a temporal encoder (num_temporal_layers) over [cls_t; frames] + temporal positions.
 *   Model 3, factorised self-attention: blocks of spatial MSA, temporal MSA, MLP; no cls token.
 *   Model 4, factorised dot-product attention: half the heads over space, half over time.
 *   Models 3 and 4 classify the mean of the final-normed tokens.
 * This file holds the parameter names and the token layouts; forward.c the encoder. */
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "../kernels/ops.h"
#include <cjson/cJSON.h>

#include "image_init.h"

/* ViViT's four models (Arnab et al. 2021; docs/vivit-variants.md), config.json "model_variant":
 * its own config (tb_config.fam). */
typedef enum {
    TB_VIVIT_M1 = 1, /* "joint" (or absent): spatio-temporal attention, Hugging Face's VivitModel */
    TB_VIVIT_M2,     /* "factorised_encoder": spatial encoder per frame, then temporal encoder */
    TB_VIVIT_M3,     /* "factorised_self_attention": spatial MSA, temporal MSA, MLP per block */
    TB_VIVIT_M4,     /* "factorised_dot_product": half the heads over space, half over time */
} tb_vivit_model;
typedef struct {
    tb_vivit_model model;
} tb_vivit_config;

static inline tb_vivit_config *vivit_cfg(const tb_config *c) { return c->fam; }

/* Tensor names inside one encoder layer: Hugging Face's legacy ones (published checkpoints), or
 * transformers 5's new ones (vivit.layers.N.attention.q_proj, mlp.fc1) for Model 1. */
typedef struct {
    const char *q, *k, *v, *o, *fc1, *fc2;
} layer_names;

static const layer_names legacy_names = {
    "attention.attention.query.", "attention.attention.key.", "attention.attention.value.",
    "attention.output.dense.",    "intermediate.dense.",      "output.dense."};
static const layer_names new_names = {"attention.q_proj.", "attention.k_proj.",
                                      "attention.v_proj.", "attention.o_proj.",
                                      "mlp.fc1.",          "mlp.fc2."};

/* One pre-norm block under "<layer>.<l>.": layernorm_before, attention, layernorm_after, MLP;
 * Model 3 adds temporal_layernorm and temporal_attention (random like the others; initialised
 * from an image model, its output projection is zero: image_init.c). */
static int build_block(tubelet_model *m, tb_block *b, const char *layer, int l,
                       const layer_names *nm, int temporal, tb_err *e) {
    const tb_config *c = &m->cfg;
    const int D = c->hidden, I = c->intermediate, qb = c->qkv_bias;
    const float eps = c->ln_eps;
    char p[160], q[256];
    int rc;
    snprintf(p, sizeof p, "%s.%d.", layer, l);
#define NAME(s) (snprintf(q, sizeof q, "%s%s", p, s), q)
    if ((rc = tb_build_layernorm(m, &b->ln1, NAME("layernorm_before."), D, eps, e)) ||
        (rc = tb_build_linear(m, &b->attn.q, NAME(nm->q), D, D, qb, e)) ||
        (rc = tb_build_linear(m, &b->attn.k, NAME(nm->k), D, D, qb, e)) ||
        (rc = tb_build_linear(m, &b->attn.v, NAME(nm->v), D, D, qb, e)) ||
        (rc = tb_build_linear(m, &b->attn.o, NAME(nm->o), D, D, 1, e)))
        return rc;
    if (temporal &&
        ((rc = tb_build_layernorm(m, &b->ln_t, NAME("temporal_layernorm."), D, eps, e)) ||
         (rc = tb_build_linear(m, &b->attn_t.q, NAME("temporal_attention.attention.query."), D,
                               D, qb, e)) ||
         (rc = tb_build_linear(m, &b->attn_t.k, NAME("temporal_attention.attention.key."), D, D,
                               qb, e)) ||
         (rc = tb_build_linear(m, &b->attn_t.v, NAME("temporal_attention.attention.value."), D,
                               D, qb, e)) ||
         (rc = tb_build_linear(m, &b->attn_t.o, NAME("temporal_attention.output.dense."), D, D, 1,
                               e))))
        return rc;
    if ((rc = tb_build_layernorm(m, &b->ln2, NAME("layernorm_after."), D, eps, e)) ||
        (rc = tb_build_linear(m, &b->fc1, NAME(nm->fc1), I, D, 1, e)) ||
        (rc = tb_build_linear(m, &b->fc2, NAME(nm->fc2), D, I, 1, e)))
        return rc;
#undef NAME
    return TUBELET_OK;
}

/* Model 2's own weights (tb_weightset.fam; one malloc, freed with the model or the gradients):
 * the spatial encoder's final LayerNorm (vivit.layernorm; final_ln is then
 * vivit.temporal_layernorm), the temporal cls token (D) and positions (n_t + 1, D). */
typedef struct {
    tb_ln spatial_ln;
    const float *cls_t, *pos_t;
} vivit_m2_weights;

static int vivit_build(tubelet_model *m, tb_weightset *ws, tb_err *e) {
    const tb_config *c = &m->cfg;
    const int D = c->hidden, M = vivit_cfg(c)->model;
    const int64_t gt = tb_grid_t(c, c->num_frames),
                  N = (int64_t)tb_grid_h(c, c->image_h) * tb_grid_w(c, c->image_w);
    /* positions: over all tokens (+ cls), or, for Model 2's spatial encoder, over one frame's */
    const int64_t n_pos = M == TB_VIVIT_M2 ? N + 1 : gt * N + tb_has_cls(c);
    int64_t pw[5] = {D, c->num_channels, c->tubelet_t, c->patch_h, c->patch_w}, pb[1] = {D};
    int64_t cls[3] = {1, 1, D}, pos[3] = {1, n_pos, D}, pos_t[3] = {1, gt + 1, D};
    int rc;
    /* cls tokens and positions start at zero, as VivitPreTrainedModel._init_weights sets them */
    if ((rc = tb_param(m, "vivit.embeddings.patch_embeddings.projection.weight", 5, pw,
                       TB_INIT_NORMAL, &ws->patch_w, e)) ||
        (rc = tb_param(m, "vivit.embeddings.patch_embeddings.projection.bias", 1, pb,
                       TB_INIT_ZEROS, &ws->patch_b, e)) ||
        (tb_has_cls(c) &&
         (rc = tb_param(m, "vivit.embeddings.cls_token", 3, cls, TB_INIT_ZEROS, &ws->cls, e))) ||
        (rc = tb_param(m, "vivit.embeddings.position_embeddings", 3, pos, TB_INIT_ZEROS,
                       &ws->pos, e)))
        return rc;
    /* transformers 5 can save Model 1 with new-style names (vivit.layers.N.attention.q_proj,
     * mlp.fc1); published checkpoints use the legacy ones. Both load. */
    const int nw = M == TB_VIVIT_M1 && m->weights &&
                   tb_weights_has(m->weights, "vivit.layers.0.layernorm_before.weight");
    for (int l = 0; l < c->layers; l++)
        if ((rc = build_block(m, &ws->blocks[l], nw ? "vivit.layers" : "vivit.encoder.layer", l,
                              nw ? &new_names : &legacy_names, M == TB_VIVIT_M3, e)))
            return rc;
    m->has_final_ln = 1;
    m->mean_pool = M == TB_VIVIT_M3 || M == TB_VIVIT_M4;
    if (M == TB_VIVIT_M2) {
        vivit_m2_weights *w2 = calloc(1, sizeof *w2);
        if (!w2) return tb_fail(e, TUBELET_ERR_MEMORY, "%s: out of memory", m->source);
        free(ws->fam);
        ws->fam = w2;
        if ((rc = tb_build_layernorm(m, &w2->spatial_ln, "vivit.layernorm.", D, c->ln_eps, e)) ||
            (rc = tb_param(m, "vivit.temporal_embeddings.cls_token", 3, cls, TB_INIT_ZEROS,
                           &w2->cls_t, e)) ||
            (rc = tb_param(m, "vivit.temporal_embeddings.position_embeddings", 3, pos_t,
                           TB_INIT_ZEROS, &w2->pos_t, e)))
            return rc;
        for (int l = 0; l < c->temporal_layers; l++)
            if ((rc = build_block(m, &ws->blocks[c->layers + l], "vivit.temporal_encoder.layer", l,
                                  &legacy_names, 0, e)))
                return rc;
        if ((rc = tb_build_layernorm(m, &ws->final_ln, "vivit.temporal_layernorm.", D, c->ln_eps,
                                     e)))
            return rc;
    } else if ((rc = tb_build_layernorm(m, &ws->final_ln, "vivit.layernorm.", D, c->ln_eps, e))) {
        return rc;
    }
    if (c->num_labels > 0)
        return tb_build_linear(m, &ws->head, "classifier.", c->num_labels, D, 1, e);
    return TUBELET_OK;
}

/* x = dropout([cls;] patch embeddings + learned positions) (VivitEmbeddings.dropout), one
 * sequence per clip (Models 1, 3, 4) or per frame (Model 2, each frame with its own copy of the
 * cls token and the same positions): eq. 1 of the paper. */
static void vivit_tokens(tubelet_state *s) {
    const tb_backend *ops = &s->be;
    const tubelet_model *m = s->m;
    const int64_t D = m->cfg.hidden, L = s->seq_len, cls = tb_has_cls(&m->cfg), P = L - cls;
    for (int64_t q = 0; q < s->n_seq; q++) {
        float *x = s->x + q * L * D;
        if (cls) TB_RUN(ops, add_rows, x, D, m->w.cls, D, s->pos, D, NULL, NULL, 0, 1, D);
        TB_RUN(ops, add_rows, x + cls * D, D, s->emb + q * P * D, D, s->pos + cls * D, D, NULL,
               NULL, 0, P, D);
    }
    tb_state_dropout(s, -1, TB_DROP_EMB, s->x, s->rows * D, 0);
}

static void vivit_tokens_backward(tubelet_state *s, float *dx, float *demb) {
    const tubelet_model *m = s->m;
    const int64_t D = m->cfg.hidden, L = s->seq_len, cls = tb_has_cls(&m->cfg), P = L - cls;
    const tb_backend *ops = &s->be;
    tb_state_dropout(s, -1, TB_DROP_EMB, dx, s->rows * D, 0);
    float *gcls = (float *)s->train->g->cls, *gpos = (float *)s->train->g->pos;
    for (int64_t q = 0; q < s->n_seq; q++) {
        const float *x = dx + q * L * D;
        if (cls) {
            TB_RUN(ops, add_rows, gcls, D, gcls, D, x, D, NULL, NULL, 0, 1, D);
            TB_RUN(ops, add_rows, gpos, D, gpos, D, x, D, NULL, NULL, 0, 1, D);
        }
        TB_RUN(ops, copy_block, demb + q * P * D, D, NULL, x + cls * D, D, NULL, P, D);
        TB_RUN(ops, add_rows, gpos + cls * D, D, gpos + cls * D, D, x + cls * D, D, NULL, NULL, 0,
               P, D);
    }
}

/* Model 2 between its encoders: h_i = LN(z_cls^{L_s}) of each frame i (the spatial encoder's
 * final LayerNorm on its cls token), then z_t = dropout([cls_t; h_1 .. h_{n_t}] + p_t), one
 * sequence per clip. xs: the spatial encoder's output (B n_t (N + 1), D); xt: the temporal
 * encoder's input (B (n_t + 1), D); frames (B n_t, D), if not NULL, receives the frames' cls
 * rows, the LayerNorm's input that the backward needs. */
static void vivit_temporal_tokens(tubelet_state *s, const float *xs, float *xt, float *frames) {
    const tb_backend *ops = &s->be;
    const tubelet_model *m = s->m;
    const vivit_m2_weights *w2 = m->w.fam;
    const tb_ln *ln = &w2->spatial_ln;
    const int64_t D = m->cfg.hidden, T = s->grid_t, N = s->grid_h * s->grid_w;
    for (int64_t b = 0; b < s->B; b++) {
        const float *cls_rows = xs + b * T * (N + 1) * D;
        float *x = xt + b * (T + 1) * D;
        TB_RUN(ops, layernorm, x + D, D, cls_rows, (N + 1) * D, ln->w, ln->b, T, D, ln->eps);
        TB_RUN(ops, add_rows, x, D, w2->cls_t, D, w2->pos_t, D, NULL, NULL, 0, 1, D);
        TB_RUN(ops, add_rows, x + D, D, x + D, D, w2->pos_t + D, D, NULL, NULL, 0, T, D);
        if (frames)
            TB_RUN(ops, copy_block, frames + b * T * D, D, NULL, cls_rows, (N + 1) * D, NULL, T, D);
    }
    tb_state_dropout(s, -1, TB_DROP_EMB_TIME, xt, s->B * (T + 1) * D, 0);
}

/* Its backward: dxt (B (n_t + 1), D; its dropout masks are applied in place) → the gradients of
 * cls_t, p_t and the spatial LayerNorm, and dxs (B n_t (N + 1), D): zero but on the cls rows.
 * dframes: scratch (B n_t, D). */
static void vivit_temporal_tokens_backward(tubelet_state *s, float *dxt, const float *frames,
                                          float *dframes, float *dxs) {
    const tb_backend *ops = &s->be;
    const tubelet_model *m = s->m;
    const vivit_m2_weights *w2 = m->w.fam, *g2 = s->train->g->fam;
    const tb_ln *ln = &w2->spatial_ln, *gln = &g2->spatial_ln;
    const int64_t D = m->cfg.hidden, T = s->grid_t, N = s->grid_h * s->grid_w;
    float *gcls = (float *)g2->cls_t, *gpos = (float *)g2->pos_t;
    tb_state_dropout(s, -1, TB_DROP_EMB_TIME, dxt, s->B * (T + 1) * D, 0);
    TB_RUN(ops, zero, dframes, s->B * T * D);
    for (int64_t b = 0; b < s->B; b++) {
        const float *x = dxt + b * (T + 1) * D;
        TB_RUN(ops, add_rows, gcls, D, gcls, D, x, D, NULL, NULL, 0, 1, D);
        TB_RUN(ops, add_rows, gpos, D, gpos, D, x, D, NULL, NULL, 0, T + 1, D);
        TB_RUN(ops, layernorm_backward, dframes + b * T * D, x + D, frames + b * T * D, ln->w,
               (float *)gln->w, (float *)gln->b, T, D, ln->eps);
    }
    TB_RUN(ops, zero, dxs, s->B * T * (N + 1) * D);
    TB_RUN(ops, copy_block, dxs, (N + 1) * D, NULL, dframes, D, NULL, s->B * T, D);
}

/* Model 3 (factorised self-attention, eqs. 4-5): a step over each frame's tokens with the block's
 * attention (layernorm_before, attention.*), then a step over each position's tokens with its
 * temporal ones (temporal_layernorm, temporal_attention.*), neither with a dense layer. Model 4
 * (factorised dot-product attention, eqs. 7-9): the same two sets, each for half of the heads of
 * the block's one attention. No cls token joins: these models have none. encoder.c runs Model 3's
 * steps in divided_space_time_attention, Model 4's halves in factorised_dot_product_attention. */
static int vivit_attention_plan(const tb_config *c, int64_t T, int64_t H, int64_t W,
                                tb_attn_step st[TB_MAX_STEPS], int *split_heads) {
    const tb_vivit_model v = vivit_cfg(c)->model;
    *split_heads = v == TB_VIVIT_M4;
    if (v != TB_VIVIT_M3 && v != TB_VIVIT_M4) return 0;
    st[0] = (tb_attn_step){TB_STEP_MAIN, 0, T, tb_space_group};
    st[1] = (tb_attn_step){TB_STEP_TEMPORAL_OR_LOCAL, 0, H * W, tb_time_group};
    return 2;
}

/* One sequence per clip (Models 1, 3, 4), or Model 2's two encoders: the spatial one over a
 * sequence per frame, the temporal one over [cls_t; frames] per clip. */
static int vivit_sequences(const tb_config *c, int64_t B, int64_t gt, int64_t N, tb_stage st[2]) {
    if (vivit_cfg(c)->model != TB_VIVIT_M2) return tb_sequences_per_clip(c, B, gt, N, st);
    tb_sequences_per_frame(B, gt, N, st);
    st[1] = (tb_stage){NULL, B, gt + 1, B * (gt + 1)};
    return 2;
}

/* Models 1, 3, 4 (Model 2's hidden state holds frame tokens only). */
static int64_t vivit_token_row(const tubelet_state *s, int64_t b, int64_t it, int64_t iy,
                               int64_t ix) {
    const int64_t cls = tb_has_cls(&s->m->cfg);
    return b * (s->n_patch + cls) + cls + (it * s->grid_h + iy) * s->grid_w + ix;
}

/* Model 2's last hidden state is its temporal encoder's: [cls; one token per frame] per clip. */
static int64_t vivit_frame_tokens(const tubelet_state *s) {
    return vivit_cfg(&s->m->cfg)->model == TB_VIVIT_M2 ? s->grid_t : 0;
}

static int vivit_positions(tubelet_state *s, tb_err *e) {
    return tb_positions_bicubic(s, vivit_cfg(&s->m->cfg)->model == TB_VIVIT_M2, e);
}

static double vivit_flop(const tb_config *c, int T, int H, int W) {
    const double D = c->hidden, I = c->intermediate;
    const double gt = tb_grid_t(c, T), N = (double)tb_grid_h(c, H) * tb_grid_w(c, W);
    const double rows = gt * N + tb_has_cls(c);
    switch (vivit_cfg(c)->model) {
    case TB_VIVIT_M2: { /* spatial encoder per frame; temporal encoder over n_t + 1 tokens */
        const double rt = gt + 1;
        const double temporal = c->temporal_layers * (tb_attn_flop(rt, 1, rt, D) + 4 * rt * D * I);
        return tb_clip_flop(c, gt, N, temporal, tb_attn_flop(gt * (N + 1), gt, N + 1, D),
                            gt * (N + 1), 1);
    }
    case TB_VIVIT_M3: /* spatial attention per frame, then temporal per position */
        return tb_clip_flop(c, gt, N, 0,
                            tb_attn_flop(rows, gt, N, D) + tb_attn_flop(rows, N, gt, D), rows, 1);
    case TB_VIVIT_M4: /* one set of projections; half the heads (D/2 columns) per grouping */
        return tb_clip_flop(c, gt, N, 0,
                            tb_attn_flop(rows, 0, 0, D) + 4 * gt * N * N * (D / 2) +
                                4 * N * gt * gt * (D / 2),
                            rows, 1);
    default: return tb_clip_flop(c, gt, N, 0, tb_attn_flop(rows, 1, rows, D), rows, 1);
    }
}

static const char *vivit_variant(const tb_config *c) {
    static const char *const names[] = {
        "", "model1_spatio_temporal", "model2_factorised_encoder",
        "model3_factorised_self_attention", "model4_factorised_dot_product"};
    return names[vivit_cfg(c)->model];
}

/* ---- config.json: VivitConfig (model_variant, num_temporal_layers: tubelet's, Models 2-4) ---- */

static const char *const vivit_keys[] = {
    "image_size", "num_frames", "tubelet_size", "num_channels", "hidden_size",
    "num_hidden_layers", "num_attention_heads", "intermediate_size", "hidden_act",
    "layer_norm_eps", "qkv_bias", "pooler_act", "pooler_output_size",
    "model_variant", "num_temporal_layers", NULL}; /* the last two: Models 2-4, tubelet's own */
/* tubelet's own type (docs/video-swin.md): torchvision's SwinTransformer3d arguments */

static const char *const vivit_variants[] = {"joint", "factorised_encoder",
                                             "factorised_self_attention", "factorised_dot_product"};

static const char *vivit_variant_name(tb_vivit_model v) {
    return v >= TB_VIVIT_M1 && v <= TB_VIVIT_M4 ? vivit_variants[v - 1] : "";
}

/* Model v, and what it implies: a cls token (Models 1 and 2), a temporal encoder (Model 2). */
static void set_model(tb_config *c, tb_vivit_model v) {
    vivit_cfg(c)->model = v;
    c->cls_token = v == TB_VIVIT_M1 || v == TB_VIVIT_M2;
    c->temporal_encoder = v == TB_VIVIT_M2;
}

static void vivit_defaults(tb_config *c) {
    c->num_frames = 32, c->tubelet_t = 2, c->patch_h = c->patch_w = 16;
    c->ln_eps = 1e-6f, c->act = TB_ACT_GELU_TANH;
    c->temporal_layers = 4; /* L_t of the paper's ViViT-B FE */
    set_model(c, TB_VIVIT_M1);
}

static int vivit_parse_config(tb_config *c, const cJSON *j, const char *path, const tb_log *log,
                              tb_err *e) {
    int tub[3] = {c->tubelet_t, c->patch_h, c->patch_w};
    int rc = tb_cfg_ints(j, "tubelet_size", tub, 3, path, e);
    if (rc) return rc;
    c->tubelet_t = tub[0], c->patch_h = tub[1], c->patch_w = tub[2];
    const cJSON *mv = cJSON_GetObjectItemCaseSensitive(j, "model_variant");
    if (mv && !cJSON_IsNull(mv)) {
        const char *s = cJSON_IsString(mv) ? mv->valuestring : "";
        int v = 0;
        for (int k = 0; k < 4; k++)
            if (!strcmp(s, vivit_variants[k])) v = k + 1;
        if (!v)
            return tb_fail(e, TUBELET_ERR_CONFIG,
                           "%s: model_variant \"%.64s\" is not supported (joint, "
                           "factorised_encoder, factorised_self_attention or "
                           "factorised_dot_product)", path, s);
        set_model(c, (tb_vivit_model)v);
    }
    const cJSON *tl = cJSON_GetObjectItemCaseSensitive(j, "num_temporal_layers");
    if (tl && vivit_cfg(c)->model != TB_VIVIT_M2)
        tb_warn(log, "%s: num_temporal_layers is used by model_variant factorised_encoder "
                     "only; ignored", path);
    else if ((rc = tb_cfg_int(j, "num_temporal_layers", &c->temporal_layers, 1, 1 << 10, path, e)))
        return rc;
    return TUBELET_OK;
}

static int vivit_check_config(tb_config *c, const char *path, tb_err *e) {
    if (vivit_cfg(c)->model == TB_VIVIT_M4 && c->heads % 2)
        return tb_fail(e, TUBELET_ERR_CONFIG,
                       "%s: factorised_dot_product splits the heads into spatial and temporal "
                       "halves: num_attention_heads %d must be even", path, c->heads);
    return TUBELET_OK;
}

static const char *vivit_architecture(const tb_config *c) {
    (void)c;
    return "VivitForVideoClassification";
}

static void vivit_write_config(cJSON *j, const tb_config *c) {
    int tub[3] = {c->tubelet_t, c->patch_h, c->patch_w};
    cJSON_AddItemToObject(j, "tubelet_size", cJSON_CreateIntArray(tub, 3));
    tb_cfg_write_vit_fields(j, c);
    if (vivit_cfg(c)->model != TB_VIVIT_M1) /* absent: Hugging Face's model */
        cJSON_AddStringToObject(j, "model_variant", vivit_variant_name(vivit_cfg(c)->model));
    if (c->temporal_encoder)
        cJSON_AddNumberToObject(j, "num_temporal_layers", c->temporal_layers);
}

/* the paper's ViViT-B, Models 1-4, at vivit-base's input (32x224², tubelet 2x16x16); Model 2
 * with L_s = 12, L_t = 4 (ViViT-B FE) */
static void preset_model(tb_config *c, const char *name) {
    set_model(c, (tb_vivit_model)(name[strlen(name) - 1] - '0'));
}

static const tb_arch_preset vivit_presets[] = {
    {"vivit-base", NULL}, /* google/vivit-b-16x2-kinetics400 */
    {"vivit-base-m1", preset_model},
    {"vivit-base-m2", preset_model},
    {"vivit-base-m3", preset_model},
    {"vivit-base-m4", preset_model},
    {NULL, NULL},
};

/* ---- initialisation from an image ViT (image_init.h; docs/image-init.md): Model 3's temporal
 * attention random with its output projection 0, Model 2's temporal encoder random; the patch
 * filter over the tubelet central or inflated; Model 2: one frame's positions ---- */

static int vivit_image_blocks(tb_vit *v, tubelet_model *m, tb_err *e) {
    int rc;
    for (int l = 0; l < m->cfg.layers; l++) { /* Model 2: the spatial encoder */
        char p[128], ln[192], at[192];
        snprintf(p, sizeof p, "vivit.encoder.layer.%d.", l);
        snprintf(ln, sizeof ln, "%slayernorm_before.", p);
        snprintf(at, sizeof at, "%sattention.", p);
        if ((rc = tb_ii_copy_attention(v, m, l, ln, at, 0, e)) || (rc = tb_ii_copy_mlp(v, m, l, p, e)))
            return rc;
        /* Model 3's temporal attention keeps its random q, k, v; its output projection is zero,
         * as the paper initialises it: the block starts as the image block plus a residual */
        char dn[192];
        snprintf(dn, sizeof dn, "%stemporal_attention.output.dense.", p);
        if (vivit_cfg(&m->cfg)->model == TB_VIVIT_M3 && (rc = tb_ii_set_dense(m, dn, 0, e))) return rc;
    }
    return TUBELET_OK;
}

static int vivit_image_copy(tb_vit *v, tubelet_model *m, int inflate, int keep_head,
                            tb_err *e) {
    const tb_ii_vit_layout layout = {"vivit.", 0, m->cfg.temporal_encoder,
                                     vivit_image_blocks};
    return tb_ii_vit_copy(v, m, &layout, inflate, keep_head, e);
}

/* The shared encoder's hooks (family.h's tb_vit_hooks). */
static const tb_vit_hooks vivit_vit = {
    .attention_plan = vivit_attention_plan,
    .patch_of_row = tb_patch_of_row_by_frame,
    .positions = vivit_positions,
    .tokens = vivit_tokens,
    .tokens_backward = vivit_tokens_backward,
    .stage_tokens = vivit_temporal_tokens,
    .stage_tokens_backward = vivit_temporal_tokens_backward,
};

/* both encoders' (Model 2's temporal_embeddings too) */
static const char *const vivit_no_decay[] = {"embeddings.cls_token",
                                             "embeddings.position_embeddings", NULL};

/* Model 2: the temporal encoder's block j is layers + 1 + j; the spatial encoder's final norm and
 * the temporal embeddings go with the temporal encoder's block 0. */
static int vivit_param_layer(const tb_config *c, const char *name) {
    const char *p = strstr(name, "temporal_encoder.layer.");
    if (p) return c->layers + 1 + atoi(p + strlen("temporal_encoder.layer."));
    if (tb_n_blocks(c) > c->layers &&
        (strstr(name, "temporal_embeddings.") || !strncmp(name, "vivit.layernorm.", 16)))
        return c->layers + 1;
    return tb_param_layer(name, tb_n_blocks(c));
}

/* VivitImageProcessor: short side 256, [-1, 1] pixels */
static const tb_preproc_defaults vivit_preprocess = {
    "Vivit", 256, 1.0 / 127.5, 1, {0.5f, 0.5f, 0.5f}, {0.5f, 0.5f, 0.5f}, 0, 0};

const tb_family_ops tb_vivit_family = {
    .id = TB_VIVIT,
    .build = vivit_build,
    .vit = &vivit_vit, /* the shared encoder runs it */
    .sequences = vivit_sequences,
    .token_row = vivit_token_row,
    .frame_tokens = vivit_frame_tokens,
    .flop = vivit_flop,
    .variant = vivit_variant,
    .model_type = "vivit",
    .display_name = "ViViT",
    .config_keys = vivit_keys,
    .config_size = sizeof(tb_vivit_config),
    .defaults = vivit_defaults,
    .parse_config = vivit_parse_config,
    .check_config = vivit_check_config,
    .architecture = vivit_architecture,
    .write_config = vivit_write_config,
    .presets = vivit_presets,
    .preprocess = &vivit_preprocess,
    .no_decay = vivit_no_decay,
    .param_layer = vivit_param_layer,
    .head_prefix = "classifier.",
    .image_model_type = "vit",
    .image_model_what = "an image ViT (expected \"vit\": a Hugging Face ViTModel or ViTForImageClassification directory)",
    .image_open = tb_ii_vit_open,
    .image_copy = vivit_image_copy,
};
