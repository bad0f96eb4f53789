/* TimeSformer (Bertasius et al. 2021, seed 002) as Hugging Face's TimesformerModel /
 * TimesformerForVideoClassification: per-frame Conv2d patches, a cls token, learned spatial
 * positions and (unless space_only) learned time embeddings, then blocks with
 *   divided_space_time: temporal attention (own LayerNorm, qkv, projection, then temporal_dense)
 *                       followed by spatial attention in which the cls token joins every frame
 *                       and its T outputs are averaged (the paper's cls-token handling);
 *   joint_space_time:   one attention over all T*N tokens + cls;
 *   space_only:         each frame is its own sequence with its own cls token;
 * and the paper's two other schemes (Fig. 1, not in Hugging Face; docs/timesformer-variants.md):
 *   local_global:       local attention in F x H/2 x W/2 windows (local_*), then global attention
 *                       among the tokens a stride of 2 apart in time, height and width;
 *   axial:              time (temporal_*), width (width_*), then height attention.
 * Each attention projects q, k, v with one fused `qkv` Linear of 3D outputs. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "image_init.h"

static int timesformer_steps(tb_attn_type a, int64_t T, int64_t H, int64_t W,
                             tb_attn_step st[TB_MAX_STEPS]);

/* The fused (3D, D) qkv weight holds q, k, v one after another along its output dimension. */
static int build_fused_mha(tubelet_model *m, tb_mha *a, const char *prefix, int D, int bias,
                           tb_err *e) {
    char q[200];
    const float *w, *b = NULL;
    int64_t ws[2] = {3 * (int64_t)D, D}, bs[1] = {3 * (int64_t)D};
    int rc;
    snprintf(q, sizeof q, "%sattention.qkv.weight", prefix);
    if ((rc = tb_param(m, q, 2, ws, TB_INIT_NORMAL, &w, e))) return rc;
    if (bias) {
        snprintf(q, sizeof q, "%sattention.qkv.bias", prefix);
        if ((rc = tb_param(m, q, 1, bs, TB_INIT_ZEROS, &b, e))) return rc;
    }
    const int64_t DD = (int64_t)D * D;
    a->q = (tb_lin){w, b, NULL}; /* w NULL: a model described only (tubelet_model_describe) */
    a->k = (tb_lin){w ? w + DD : NULL, b ? b + D : NULL, NULL};
    a->v = (tb_lin){w ? w + 2 * DD : NULL, b ? b + 2 * D : NULL, NULL};
    snprintf(q, sizeof q, "%soutput.dense.", prefix);
    return tb_build_linear(m, &a->o, q, D, D, 1, e);
}

static int timesformer_build(tubelet_model *m, tb_weightset *ws, tb_err *e) {
    const tb_config *c = &m->cfg;
    const int D = c->hidden;
    int rc;
    int64_t n_patch = (int64_t)tb_grid_h(c, c->image_h) * tb_grid_w(c, c->image_w);
    int64_t pw[4] = {D, c->num_channels, c->patch_h, c->patch_w}, pb[1] = {D};
    int64_t cls[3] = {1, 1, D}, pos[3] = {1, n_patch + 1, D}, tpos[3] = {1, c->num_frames, D};
    if ((rc = tb_param(m, "timesformer.embeddings.patch_embeddings.projection.weight", 4, pw,
                       TB_INIT_NORMAL, &ws->patch_w, e)) ||
        (rc = tb_param(m, "timesformer.embeddings.patch_embeddings.projection.bias", 1, pb,
                       TB_INIT_ZEROS, &ws->patch_b, e)) ||
        (rc = tb_param(m, "timesformer.embeddings.cls_token", 3, cls, TB_INIT_NORMAL, &ws->cls,
                       e)) ||
        (rc = tb_param(m, "timesformer.embeddings.position_embeddings", 3, pos, TB_INIT_NORMAL,
                       &ws->pos, e)))
        return rc;
    /* time embeddings start at zero, as in transformers and the authors' code (no init touches
     * them); the cls token, positions and every weight are trunc_normal_ (.init_trunc) */
    if (c->attn != TB_ATTN_SPACE &&
        (rc = tb_param(m, "timesformer.embeddings.time_embeddings", 3, tpos, TB_INIT_ZEROS,
                       &ws->time_pos, e)))
        return rc;
    for (int l = 0; l < c->layers; l++) {
        tb_block *b = &ws->blocks[l];
        char q[200];
#define SUB(s) (snprintf(q, sizeof q, "timesformer.encoder.layer.%d.%s", l, s), q)
        if ((rc = tb_build_layernorm(m, &b->ln1, SUB("layernorm_before."), D, c->ln_eps, e)) ||
            (rc = build_fused_mha(m, &b->attn, SUB("attention."), D, c->qkv_bias, e)) ||
            (rc = tb_build_layernorm(m, &b->ln2, SUB("layernorm_after."), D, c->ln_eps, e)) ||
            (rc = tb_build_linear(m, &b->fc1, SUB("intermediate.dense."), c->intermediate, D, 1, e)) ||
            (rc = tb_build_linear(m, &b->fc2, SUB("output.dense."), D, c->intermediate, 1, e)))
            return rc;
        /* the steps before the last: own LayerNorm, attention and dense, named by the step */
        tb_attn_step st[TB_MAX_STEPS];
        const int n_steps = timesformer_steps(c->attn, 1, 1, 1, st);
        for (int k = 0; k + 1 < n_steps; k++) {
            const int width = st[k].kind == TB_STEP_WIDTH;
            const char *step = width ? "width" : c->attn == TB_ATTN_LOCAL_GLOBAL ? "local" : "temporal";
            char ln[64], at[64], dn[64];
            snprintf(ln, sizeof ln, "%s_layernorm.", step);
            snprintf(at, sizeof at, "%s_attention.", step);
            snprintf(dn, sizeof dn, "%s_dense.", step);
            if ((rc = tb_build_layernorm(m, width ? &b->ln_w : &b->ln_t, SUB(ln), D, c->ln_eps, e)) ||
                (rc = build_fused_mha(m, width ? &b->attn_w : &b->attn_t, SUB(at), D, c->qkv_bias,
                                      e)) ||
                (rc = tb_build_linear(m, width ? &b->dense_w : &b->dense_t, SUB(dn), D, D, 1, e)))
                return rc;
        }
#undef SUB
    }
    m->has_final_ln = 1;
    if ((rc = tb_build_layernorm(m, &ws->final_ln, "timesformer.layernorm.", D, c->ln_eps, e)))
        return rc;
    if (c->num_labels > 0)
        return tb_build_linear(m, &ws->head, "classifier.", c->num_labels, D, 1, e);
    return TUBELET_OK;
}

/* ---- the attention steps of a block: which tokens attend to each other ----
 * The group of patch (t, y, x) within its clip, for an H x W patch grid (docs/timesformer-
 * variants.md has the token sets, the boundaries and the cls token of each scheme). */

/* Time and space (divided): tb_time_group, tb_space_group (family.h). */
/* Width (axial): the W tokens of one row of one frame. */
static int64_t width_group(int64_t t, int64_t y, int64_t x, int64_t H, int64_t W) {
    (void)x, (void)W;
    return t * H + y;
}
/* Height (axial): the H tokens of one column of one frame. */
static int64_t height_group(int64_t t, int64_t y, int64_t x, int64_t H, int64_t W) {
    (void)y, (void)H;
    return t * W + x;
}
/* Local (local_global): the F x H/2 x W/2 window (all frames, one quadrant of the grid) the
 * patch lies in; an odd side gives its middle row or column to the first half. */
static int64_t local_group(int64_t t, int64_t y, int64_t x, int64_t H, int64_t W) {
    (void)t;
    return (y >= (H + 1) / 2) * 2 + (x >= (W + 1) / 2);
}
/* Global (local_global): the tokens of the whole clip a multiple of 2 away in time, height and
 * width — every second token in each axis, starting at the query's own parity. */
static int64_t global_group(int64_t t, int64_t y, int64_t x, int64_t H, int64_t W) {
    (void)H, (void)W;
    return t % 2 * 4 + y % 2 * 2 + x % 2;
}

/* TimeSformer's steps for attention type a: their number, 0 for joint_space_time and
 * space_only, whose one attention runs over whole sequences (the image copy names the steps'
 * weights from them too). */
static int timesformer_steps(tb_attn_type a, int64_t T, int64_t H, int64_t W,
                             tb_attn_step st[TB_MAX_STEPS]) {
    /* the cls token joins every step whose groups span space, not the time steps (as Hugging
     * Face's divided attention keeps it out of temporal attention) */
    const tb_attn_step time = {TB_STEP_TEMPORAL_OR_LOCAL, 0, H * W, tb_time_group};
    switch (a) {
    case TB_ATTN_DIVIDED: /* eqs. 6-8: time attention (+ temporal_dense), then space attention;
                           * encoder.c's divided_space_time_attention runs them */
        st[0] = time;
        st[1] = (tb_attn_step){TB_STEP_MAIN, 1, T, tb_space_group};
        return 2;
    case TB_ATTN_AXIAL:
        st[0] = time;
        st[1] = (tb_attn_step){TB_STEP_WIDTH, 1, T * H, width_group};
        st[2] = (tb_attn_step){TB_STEP_MAIN, 1, T * W, height_group};
        return 3;
    case TB_ATTN_LOCAL_GLOBAL:
        st[0] = (tb_attn_step){TB_STEP_TEMPORAL_OR_LOCAL, 1, 4, local_group};
        st[1] = (tb_attn_step){TB_STEP_MAIN, 1, 8, global_group};
        return 2;
    default:
        return 0;
    }
}

/* space_only: one sequence per frame, [cls; patches] + positions.
 * otherwise:  one sequence per clip, cls then the patches ordered (position n, frame t) at row
 *             1 + n T + t, each with its spatial position and its frame's time embedding.
 * Dropout as TimesformerEmbeddings: pos_drop after the positions (every row), then, unless
 * space_only, time_drop on the patch rows after the time embeddings. */
static void timesformer_tokens(tubelet_state *s) {
    const tb_backend *ops = &s->be;
    const tubelet_model *m = s->m;
    const int64_t D = m->cfg.hidden, N = s->grid_h * s->grid_w, T = s->grid_t;
    const float *cls = m->w.cls, *pos = s->pos, *tpos = s->time_pos;
    const int space = m->cfg.attn == TB_ATTN_SPACE;
    const int drop = tb_state_hidden_dropout_on(s); /* then time embeddings after pos_drop */
    for (int64_t b = 0; b < s->B; b++)
        for (int64_t t = 0; t < T; t++) {
            const float *e = s->emb + (b * T + t) * N * D;
            float *seq = space ? s->x + (b * T + t) * (N + 1) * D : s->x + b * (1 + N * T) * D;
            if (space || t == 0) TB_RUN(ops, add_rows, seq, D, cls, D, pos, D, NULL, NULL, 0, 1, D);
            if (space) /* row 1 + n */
                TB_RUN(ops, add_rows, seq + D, D, e, D, pos + D, D, NULL, NULL, 0, N, D);
            else /* row 1 + n T + t */
                TB_RUN(ops, add_rows, seq + (1 + t) * D, T * D, e, D, pos + D, D, NULL,
                       drop ? NULL : tpos + t * D, 0, N, D);
        }
    if (!drop) return;
    tb_state_dropout(s, -1, TB_DROP_EMB, s->x, s->rows * D, 0);
    if (space) return;
    const int64_t S = 1 + N * T;
    for (int64_t b = 0; b < s->B; b++) {
        float *x = s->x + (b * S + 1) * D; /* the clip's patch rows, (n, t) with t fastest */
        for (int64_t t = 0; t < T; t++)
            TB_RUN(ops, add_rows, x + t * D, T * D, x + t * D, T * D, tpos + t * D, 0, NULL, NULL,
                   0, N, D);
        tb_state_dropout(s, -1, TB_DROP_EMB_TIME, x, N * T * D, (b * S + 1) * D);
    }
}

static void timesformer_tokens_backward(tubelet_state *s, float *dx, float *demb) {
    const tb_backend *ops = &s->be;
    const tubelet_model *m = s->m;
    const int64_t D = m->cfg.hidden, N = s->grid_h * s->grid_w, T = s->grid_t;
    float *gcls = (float *)s->train->g->cls, *gpos = (float *)s->train->g->pos,
          *gtime = (float *)s->train->g->time_pos;
    const int space = m->cfg.attn == TB_ATTN_SPACE;
    if (tb_state_hidden_dropout_on(s)) { /* time_drop, time embeddings, then pos_drop */
        const int64_t S = 1 + N * T;
        for (int64_t b = 0; b < s->B && !space; b++) {
            float *x = dx + (b * S + 1) * D;
            tb_state_dropout(s, -1, TB_DROP_EMB_TIME, x, N * T * D, (b * S + 1) * D);
            for (int64_t t = 0; t < T; t++) /* every position's row into its frame's, in order */
                TB_RUN(ops, add_rows, gtime + t * D, 0, gtime + t * D, 0, x + t * D, T * D, NULL,
                       NULL, 0, N, D);
        }
        tb_state_dropout(s, -1, TB_DROP_EMB, dx, s->rows * D, 0);
        gtime = NULL; /* done */
    }
    for (int64_t b = 0; b < s->B; b++)
        for (int64_t t = 0; t < T; t++) {
            float *e = demb + (b * T + t) * N * D;
            const float *seq = space ? dx + (b * T + t) * (N + 1) * D : dx + b * (1 + N * T) * D;
            if (space || t == 0) {
                TB_RUN(ops, add_rows, gcls, D, gcls, D, seq, D, NULL, NULL, 0, 1, D);
                TB_RUN(ops, add_rows, gpos, D, gpos, D, seq, D, NULL, NULL, 0, 1, D);
            }
            /* the patch rows: 1 + n (space_only) or 1 + n T + t */
            const float *row = space ? seq + D : seq + (1 + t) * D;
            const int64_t ld = space ? D : T * D;
            TB_RUN(ops, copy_block, e, D, NULL, row, ld, NULL, N, D);
            TB_RUN(ops, add_rows, gpos + D, D, gpos + D, D, row, ld, NULL, NULL, 0, N, D);
            if (!space && gtime)
                TB_RUN(ops, add_rows, gtime + t * D, 0, gtime + t * D, 0, row, ld, NULL, NULL, 0, N,
                       D);
        }
}

/* PyTorch 'nearest': source index floor(dst * in / out), computed in float. */
static int64_t nearest(int64_t i, int64_t in, int64_t out) {
    int64_t s = (int64_t)floorf((float)i * ((float)in / (float)out));
    return s < in ? s : in - 1;
}

/* Positions for the state's grid (positions.c has the other families' rule). */
static int timesformer_positions(tubelet_state *s, tb_err *e) {
    const tubelet_model *m = s->m;
    const tb_config *c = &m->cfg;
    const int64_t D = c->hidden, h0 = tb_grid_h(c, c->image_h), w0 = tb_grid_w(c, c->image_w);
    const int64_t t0 = tb_grid_t(c, c->num_frames), h1 = s->grid_h, w1 = s->grid_w, t1 = s->grid_t;
    s->pos = m->w.pos, s->time_pos = m->w.time_pos;
    const int same_space = h0 == h1 && w0 == w1;
    if (same_space && (t0 == t1 || c->attn == TB_ATTN_SPACE)) return TUBELET_OK;
    s->pos_owned = tb_alloc(sizeof(float) * (size_t)((1 + h1 * w1 + t1) * D));
    if (!s->pos_owned) return tb_fail(e, TUBELET_ERR_MEMORY, "out of memory");
    float *pos = s->pos_owned, *tpos = pos + (1 + h1 * w1) * D;
    memcpy(pos, m->w.pos, sizeof(float) * (size_t)D);
    /* HF takes the trained grid as sqrt(N) x sqrt(N) */
    const int64_t p = (int64_t)sqrt((double)(h0 * w0));
    for (int64_t y = 0; y < h1; y++)
        for (int64_t x = 0; x < w1; x++)
            memcpy(pos + (1 + y * w1 + x) * D,
                   m->w.pos + (1 + nearest(y, p, h1) * p + nearest(x, p, w1)) * D,
                   sizeof(float) * (size_t)D);
    if (m->w.time_pos)
        for (int64_t t = 0; t < t1; t++)
            memcpy(tpos + t * D, m->w.time_pos + nearest(t, t0, t1) * D,
                   sizeof(float) * (size_t)D);
    s->pos = pos, s->time_pos = m->w.time_pos ? tpos : NULL;
    s->pos_owned_bytes = sizeof(float) * (size_t)((1 + h1 * w1 + t1) * D);
    return TUBELET_OK;
}

/* Patch rows in (position, frame) order: row n T + t. */
static void timesformer_patch_of_row(int64_t i, int64_t T, int64_t N, int64_t *t, int64_t *n) {
    (void)N;
    *n = i / T, *t = i % T;
}

/* space_only: one sequence per frame; otherwise one per clip, cls first. */
static int timesformer_sequences(const tb_config *c, int64_t B, int64_t gt, int64_t N,
                                 tb_stage st[2]) {
    return c->attn == TB_ATTN_SPACE ? tb_sequences_per_frame(B, gt, N, st)
                                    : tb_sequences_per_clip(c, B, gt, N, st);
}

static int timesformer_attention_plan(const tb_config *c, int64_t T, int64_t H, int64_t W,
                                      tb_attn_step st[TB_MAX_STEPS], int *split_heads) {
    *split_heads = 0;
    return timesformer_steps(c->attn, T, H, W, st);
}

static int64_t timesformer_token_row(const tubelet_state *s, int64_t b, int64_t it, int64_t iy,
                                     int64_t ix) {
    const int64_t N = s->grid_h * s->grid_w, n = iy * s->grid_w + ix;
    if (s->m->cfg.attn == TB_ATTN_SPACE) return (b * s->grid_t + it) * (N + 1) + 1 + n;
    return b * (1 + N * s->grid_t) + 1 + n * s->grid_t + it;
}

/* FLOPs of the attention steps (divided, axial, local_global) for a T x H x W grid: per step,
 * the projections (and the dense) of every group member — the cls token counts once per group
 * it joins, as the group-major rows are projected — and QK^T, AV over each group. */
static double steps_flop(const tb_config *c, int64_t T, int64_t H, int64_t W) {
    const double D = c->hidden;
    tb_attn_step st[TB_MAX_STEPS];
    const int n = timesformer_steps(c->attn, T, H, W, st);
    double f = 0;
    for (int k = 0; k < n; k++) {
        int64_t *len = calloc((size_t)st[k].n_groups, sizeof(int64_t));
        if (!len) return NAN;
        for (int64_t t = 0; t < T; t++)
            for (int64_t y = 0; y < H; y++)
                for (int64_t x = 0; x < W; x++) len[st[k].group(t, y, x, H, W)]++;
        double members = 0, sum_sq = 0;
        for (int64_t g = 0; g < st[k].n_groups; g++) {
            if (!len[g]) continue;
            const double L = (double)(len[g] + st[k].cls);
            members += L, sum_sq += L * L;
        }
        free(len);
        f += 2 * members * D * 3 * D + 4 * sum_sq * D + 2 * members * D * D;
        if (st[k].kind != TB_STEP_MAIN) f += 2 * members * D * D; /* the step's dense */
    }
    return f;
}

static double timesformer_flop(const tb_config *c, int T, int H, int W) {
    const double D = c->hidden;
    const double gt = tb_grid_t(c, T), N = (double)tb_grid_h(c, H) * tb_grid_w(c, W);
    if (c->attn == TB_ATTN_SPACE)
        return tb_clip_flop(c, gt, N, 0, tb_attn_flop(gt * (N + 1), gt, N + 1, D), gt * (N + 1),
                            gt);
    const double rows = gt * N + 1;
    if (c->attn == TB_ATTN_JOINT)
        return tb_clip_flop(c, gt, N, 0, tb_attn_flop(rows, 1, rows, D), rows, 1);
    return tb_clip_flop(c, gt, N, 0, steps_flop(c, (int64_t)gt, tb_grid_h(c, H), tb_grid_w(c, W)),
                        rows, 1);
}


/* ---- config.json: TimesformerConfig (attention_type: also tubelet's local_global, axial) ---- */

static const char *const timesformer_keys[] = {
    "image_size", "patch_size", "num_channels", "num_frames", "hidden_size",
    "num_hidden_layers", "num_attention_heads", "intermediate_size", "hidden_act",
    "layer_norm_eps", "qkv_bias", "attention_type", NULL};

static const char *const attn_names[] = {"joint_space_time", "divided_space_time", "space_only",
                                          "local_global", "axial"};

static const char *attn_name(tb_attn_type a) {
    return attn_names[a];
}

static void timesformer_defaults(tb_config *c) {
    c->num_frames = 8, c->tubelet_t = 1, c->patch_h = c->patch_w = 16;
    c->ln_eps = 1e-6f, c->attn = TB_ATTN_DIVIDED, c->cls_token = 1;
}

static int timesformer_parse_config(tb_config *c, const cJSON *j, const char *path,
                                    const tb_log *log, tb_err *e) {
    (void)log;
    int rc = tb_cfg_patch_size(c, j, path, e);
    if (rc) return rc;
    const cJSON *at = cJSON_GetObjectItemCaseSensitive(j, "attention_type");
    if (at) {
        const char *s = cJSON_IsString(at) ? at->valuestring : "";
        int a = -1;
        for (int k = 0; k < (int)(sizeof attn_names / sizeof *attn_names); k++)
            if (!strcmp(s, attn_names[k])) a = k;
        if (a < 0)
            return tb_fail(e, TUBELET_ERR_CONFIG,
                           "%s: attention_type \"%.64s\" is not supported (divided_space_time, "
                           "joint_space_time, space_only, local_global or axial)", path, s);
        c->attn = (tb_attn_type)a;
    }
    return TUBELET_OK;
}

static const char *timesformer_architecture(const tb_config *c) {
    (void)c;
    return "TimesformerForVideoClassification";
}

static const char *timesformer_variant(const tb_config *c) { return attn_name(c->attn); }

static void timesformer_write_config(cJSON *j, const tb_config *c) {
    tb_cfg_write_patch_size(j, c);
    tb_cfg_write_vit_fields(j, c);
    cJSON_AddStringToObject(j, "attention_type", attn_name(c->attn));
}

/* The other schemes of the paper's Table 1 at timesformer-base's shapes. */
static void preset_scheme(tb_config *c, const char *name) {
    const char *v = name + strlen("timesformer-base-");
    c->attn = !strcmp(v, "space")   ? TB_ATTN_SPACE
              : !strcmp(v, "joint") ? TB_ATTN_JOINT
              : !strcmp(v, "axial") ? TB_ATTN_AXIAL
                                    : TB_ATTN_LOCAL_GLOBAL;
}

/* timesformer-base is timesformer-base-divided (the published
 * facebook/timesformer-base-finetuned-k400) */
static const tb_arch_preset timesformer_presets[] = {
    {"timesformer-base", NULL},
    {"timesformer-base-space", preset_scheme},
    {"timesformer-base-joint", preset_scheme},
    {"timesformer-base-divided", NULL},
    {"timesformer-base-local-global", preset_scheme},
    {"timesformer-base-axial", preset_scheme},
    {NULL, NULL},
};

/* ---- initialisation from an image ViT (image_init.h; docs/image-init.md): every attention
 * step a copy of the ViT's; the temporal step's dense 0 (the block starts as the image block);
 * axial's width and L+G's local step dense = identity; one frame's positions, time embeddings 0 */

static int timesformer_image_blocks(tb_vit *v, tubelet_model *m, tb_err *e) {
    const tb_config *c = &m->cfg;
    tb_attn_step st[TB_MAX_STEPS];
    const int n_steps = timesformer_steps(c->attn, 1, 1, 1, st);
    int rc;
    for (int l = 0; l < c->layers; l++) {
        char p[128], ln[192], at[192], dn[192];
        snprintf(p, sizeof p, "timesformer.encoder.layer.%d.", l);
        snprintf(ln, sizeof ln, "%slayernorm_before.", p);
        snprintf(at, sizeof at, "%sattention.", p);
        if ((rc = tb_ii_copy_attention(v, m, l, ln, at, 1, e)) || (rc = tb_ii_copy_mlp(v, m, l, p, e)))
            return rc;
        for (int k = 0; k + 1 < n_steps; k++) { /* the steps before the last */
            const int width = st[k].kind == TB_STEP_WIDTH;
            const int local = c->attn == TB_ATTN_LOCAL_GLOBAL;
            const char *step = width ? "width" : local ? "local" : "temporal";
            snprintf(ln, sizeof ln, "%s%s_layernorm.", p, step);
            snprintf(at, sizeof at, "%s%s_attention.", p, step);
            snprintf(dn, sizeof dn, "%s%s_dense.", p, step);
            /* time: the block starts as the image block (dense 0); width, local: a residual
             * attention step with the image weights like the last step (dense = identity) */
            if ((rc = tb_ii_copy_attention(v, m, l, ln, at, 1, e)) ||
                (rc = tb_ii_set_dense(m, dn, width || local, e)))
                return rc;
        }
    }
    /* time embeddings 0: the model starts as the image model on each frame */
    if (c->attn != TB_ATTN_SPACE) {
        float *te;
        const int64_t n = (int64_t)c->num_frames * c->hidden;
        if ((rc = tb_ii_dst(m, "timesformer.embeddings.time_embeddings", n, &te, e))) return rc;
        memset(te, 0, sizeof(float) * (size_t)n);
    }
    return TUBELET_OK;
}

static int timesformer_image_copy(tb_vit *v, tubelet_model *m, int inflate, int keep_head,
                                  tb_err *e) {
    static const tb_ii_vit_layout layout = {"timesformer.", 1, 1, timesformer_image_blocks};
    return tb_ii_vit_copy(v, m, &layout, inflate, keep_head, e);
}

/* The shared encoder's hooks (family.h's tb_vit_hooks). */
static const tb_vit_hooks timesformer_vit = {
    .attention_plan = timesformer_attention_plan,
    .patch_of_row = timesformer_patch_of_row,
    .positions = timesformer_positions,
    .tokens = timesformer_tokens,
    .tokens_backward = timesformer_tokens_backward,
    .mlp_act_dropout = 1,
};

static const char *const timesformer_no_decay[] = {
    "embeddings.cls_token", "embeddings.position_embeddings", "embeddings.time_embeddings", NULL};

/* TimesformerImageProcessor: ImageNet's mean and std */
static const tb_preproc_defaults timesformer_preprocess = {
    "Timesformer", 224, 1.0 / 255.0, 0, {0.485f, 0.456f, 0.406f}, {0.229f, 0.224f, 0.225f}, 0, 0};

const tb_family_ops tb_timesformer_family = {
    .id = TB_TIMESFORMER,
    .build = timesformer_build,
    .vit = &timesformer_vit, /* the shared encoder runs it */
    .sequences = timesformer_sequences,
    .token_row = timesformer_token_row,
    .flop = timesformer_flop,
    .variant = timesformer_variant,
    .init_trunc = 2.0,
    .model_type = "timesformer",
    .display_name = "TimeSformer",
    .config_keys = timesformer_keys,
    .defaults = timesformer_defaults,
    .parse_config = timesformer_parse_config,
    .architecture = timesformer_architecture,
    .write_config = timesformer_write_config,
    .presets = timesformer_presets,
    .preprocess = &timesformer_preprocess,
    .no_decay = timesformer_no_decay,
    .head_prefix = "classifier.",
    .image_model_type = "vit",
    .image_model_what = "an image ViT (expected \"vit\": a Hugging Face ViTModel or ViTForImageClassification directory)",
    .image_open = tb_ii_vit_open,
    .image_copy = timesformer_image_copy,
};
