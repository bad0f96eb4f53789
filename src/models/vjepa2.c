/* V-JEPA 2 (Assran et al. 2025) as transformers' VJEPA2Model and VJEPA2ForVideoClassification
 * (docs/vjepa2.md):
 *  - the tubelet Conv3d embedding, with no position table and no cls token (a clip shorter than
 *    a tubelet is repeated in time: tb_config.repeat_short_clips);
 *  - pre-norm ViT blocks whose queries and keys are rotated by their token's (depth, height,
 *    width) position after the projections (3D rotary embeddings, kernels/rope.h); the final
 *    layernorm;
 *  - for classification, the attentive pooler: self-attention blocks over all tokens (no
 *    positions), then one learned query attending over them (cross-attention: the query is not
 *    normed, there is no output projection), an MLP, and the classifier.
 * The predictor (JEPA pretraining) is in every file; it loads and never runs (not_run). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "../kernels/rope.h"
#include "family.h"

/* V-JEPA 2's own config (tb_config.fam; VJEPA2Config; docs/vjepa2.md): crop_size and
 * frames_per_clip are tb_config's image and frames (the rotary positions' grid is crop_size /
 * patch_size, as transformers has it); the
 * attentive pooler of VJEPA2ForVideoClassification; the predictor's fields, kept to be written
 * back (its weights load and never run: classification and features do not use it). */
typedef struct {
    double mlp_ratio;                  /* the encoder's MLP: int(hidden * mlp_ratio) */
    int classifier;                    /* 1: VJEPA2ForVideoClassification (pooler + classifier) */
    int pooler_layers;                 /* num_pooler_layers: self-attention blocks before the
                                          cross-attention block */
    int pooler_heads;                  /* tubelet's pooler_num_attention_heads (0: the encoder's,
                                          as transformers; Meta's ViT-g probes use 16) */
    double pooler_dropout;             /* attention_dropout (the pooler's probabilities) */
    int pred_hidden, pred_heads, pred_layers, pred_mask_tokens, pred_zero_init;
    double pred_mlp_ratio;
} tb_vjepa2_config;

static inline tb_vjepa2_config *vjepa2_cfg(const tb_config *c) { return c->fam; }

/* ---- the attentive pooler's parameters (tb_weightset.fam) ---- */

typedef struct {
    tb_ln ln1, ln2;  /* layer_norm1, layer_norm2 */
    tb_mha attn;     /* self_attn: q_proj, k_proj, v_proj, out_proj; cross_attn: no out_proj */
    tb_lin fc1, fc2; /* mlp */
} vj_layer;

typedef struct {
    const float *query; /* query_tokens (1, 1, D) */
    vj_layer cross;     /* cross_attention_layer */
    int n_self;
    vj_layer self[];    /* self_attention_layers */
} vj_pooler;

/* The pooler's MLP: VJEPA2MLP(config, hidden_size) keeps its default ratio 4.0 whatever
 * mlp_ratio says (ViT-g's 48/11 is the encoder's only). */
static int64_t pooler_mlp(const tb_config *c) { return (int64_t)((double)c->hidden * 4.0); }
static int pooler_heads(const tb_config *c) {
    return vjepa2_cfg(c)->pooler_heads > 0 ? vjepa2_cfg(c)->pooler_heads : c->heads;
}

/* ---- parameters ---- */

static int build_block(tubelet_model *m, tb_block *b, int l, tb_err *e) {
    const tb_config *c = &m->cfg;
    const int D = c->hidden, I = c->intermediate;
    char p[200];
    int rc;
#define SUB(s) (snprintf(p, sizeof p, "vjepa2.encoder.layer.%d.%s", l, s), p)
    if ((rc = tb_build_layernorm(m, &b->ln1, SUB("norm1."), D, c->ln_eps, e)) ||
        (rc = tb_build_linear(m, &b->attn.q, SUB("attention.query."), D, D, c->qkv_bias, e)) ||
        (rc = tb_build_linear(m, &b->attn.k, SUB("attention.key."), D, D, c->qkv_bias, e)) ||
        (rc = tb_build_linear(m, &b->attn.v, SUB("attention.value."), D, D, c->qkv_bias, e)) ||
        (rc = tb_build_linear(m, &b->attn.o, SUB("attention.proj."), D, D, 1, e)) ||
        (rc = tb_build_layernorm(m, &b->ln2, SUB("norm2."), D, c->ln_eps, e)) ||
        (rc = tb_build_linear(m, &b->fc1, SUB("mlp.fc1."), I, D, 1, e)) ||
        (rc = tb_build_linear(m, &b->fc2, SUB("mlp.fc2."), D, I, 1, e)))
        return rc;
#undef SUB
    return TUBELET_OK;
}

/* A linear layer whose weight is drawn at std initializer_range * scale (zero bias). */
static int build_linear_scaled(tubelet_model *m, tb_lin *l, const char *prefix, int out, int in,
                               double scale, tb_err *e) {
    char name[200];
    int64_t ws[2] = {out, in}, bs[1] = {out};
    int rc;
    snprintf(name, sizeof name, "%sweight", prefix);
    if ((rc = tb_param_scaled(m, name, 2, ws, scale, &l->w, e))) return rc;
    snprintf(name, sizeof name, "%sbias", prefix);
    return tb_param(m, name, 1, bs, TB_INIT_ZEROS, &l->b, e);
}

/* One pooler block under prefix ("pooler.self_attention_layers.N.", with its attention `attn`
 * "self_attn" and an out_proj; "pooler.cross_attention_layer.", "cross_attn", none). */
static int build_pooler_layer(tubelet_model *m, vj_layer *L, const char *prefix, const char *attn,
                              int out_proj, double scale, tb_err *e) {
    const tb_config *c = &m->cfg;
    const int D = c->hidden, I = (int)pooler_mlp(c);
    char p[200];
    int rc;
#define SUB(s) (snprintf(p, sizeof p, "%s%s", prefix, s), p)
#define ATT(s) (snprintf(p, sizeof p, "%s%s.%s", prefix, attn, s), p)
    if ((rc = tb_build_layernorm(m, &L->ln1, SUB("layer_norm1."), D, c->ln_eps, e)) ||
        (rc = tb_build_linear(m, &L->attn.q, ATT("q_proj."), D, D, 1, e)) ||
        (rc = tb_build_linear(m, &L->attn.k, ATT("k_proj."), D, D, 1, e)) ||
        (rc = tb_build_linear(m, &L->attn.v, ATT("v_proj."), D, D, 1, e)) ||
        (out_proj && (rc = build_linear_scaled(m, &L->attn.o, ATT("out_proj."), D, D, scale, e))) ||
        (rc = tb_build_layernorm(m, &L->ln2, SUB("layer_norm2."), D, c->ln_eps, e)) ||
        (rc = tb_build_linear(m, &L->fc1, SUB("mlp.fc1."), I, D, 1, e)) ||
        (rc = build_linear_scaled(m, &L->fc2, SUB("mlp.fc2."), D, I, scale, e)))
        return rc;
#undef ATT
#undef SUB
    return TUBELET_OK;
}

/* The pooler's output layers (out_proj, fc2) are drawn at std / sqrt(depth) where transformers'
 * _init_weights rescales them: self-attention block i (from 1) at 1 / sqrt(i), the cross block at
 * 1 / sqrt(blocks + 1). */
static int build_pooler(tubelet_model *m, tb_weightset *ws, tb_err *e) {
    const tb_config *c = &m->cfg;
    const int n = vjepa2_cfg(c)->pooler_layers;
    vj_pooler *pl = calloc(1, sizeof *pl + sizeof(vj_layer) * (size_t)n);
    if (!pl) return tb_fail(e, TUBELET_ERR_MEMORY, "%s: out of memory", m->source);
    free(ws->fam);
    ws->fam = pl;
    pl->n_self = n;
    int64_t qs[3] = {1, 1, c->hidden};
    int rc;
    if ((rc = tb_param(m, "pooler.query_tokens", 3, qs, TB_INIT_NORMAL, &pl->query, e)) ||
        (rc = build_pooler_layer(m, &pl->cross, "pooler.cross_attention_layer.", "cross_attn", 0,
                                 1.0 / sqrt(n + 1.0), e)))
        return rc;
    for (int l = 0; l < n; l++) {
        char p[96];
        snprintf(p, sizeof p, "pooler.self_attention_layers.%d.", l);
        if ((rc = build_pooler_layer(m, &pl->self[l], p, "self_attn", 1, 1.0 / sqrt(l + 1.0), e)))
            return rc;
    }
    return tb_build_linear(m, &ws->head, "classifier.", c->num_labels, c->hidden, 1, e);
}

static int vjepa2_build(tubelet_model *m, tb_weightset *ws, tb_err *e) {
    const tb_config *c = &m->cfg;
    const int D = c->hidden;
    int64_t pw[5] = {D, c->num_channels, c->tubelet_t, c->patch_h, c->patch_w}, pb[1] = {D};
    int rc;
    if ((rc = tb_param(m, "vjepa2.encoder.embeddings.patch_embeddings.proj.weight", 5, pw,
                       TB_INIT_NORMAL, &ws->patch_w, e)) ||
        (rc = tb_param(m, "vjepa2.encoder.embeddings.patch_embeddings.proj.bias", 1, pb,
                       TB_INIT_ZEROS, &ws->patch_b, e)))
        return rc;
    for (int l = 0; l < c->layers; l++)
        if ((rc = build_block(m, &ws->blocks[l], l, e))) return rc;
    m->has_final_ln = 1;
    if ((rc = tb_build_layernorm(m, &ws->final_ln, "vjepa2.encoder.layernorm.", D, c->ln_eps, e)))
        return rc;
    return vjepa2_cfg(c)->classifier ? build_pooler(m, ws, e) : TUBELET_OK;
}

/* ---- a state's own part (tubelet_state.fam) ---- */

/* What a pooler block's backward needs from its forward (a training state keeps one per block). */
typedef struct {
    float *x_in;  /* the block's input (rows, D); the cross block: the tokens it attends over */
    float *qkv;   /* q|k|v (rows, 3D); the cross block: q in rows [0, B), k|v of every row */
    float *o;     /* attention output (rows, D; the cross block: B rows) */
    float *x_mid; /* after the attention, the MLP's input */
    float *h;     /* fc1's output before the activation */
} vj_keep;

typedef struct {
    int32_t *pos;      /* (rows, 3): each token's (depth, height, width) on the config's grid */
    float *cs;         /* the rotary angles' table (tb_rope_table) */
    int64_t cs_floats;
    /* the pooler (a classifier): its working buffers beside the shared ones it borrows */
    float *arena;      /* (backend memory) q_in, y, h when the encoder's MLP buffer is narrower,
                          attention scratch */
    float *q_in, *y;   /* (B, D): the query token per clip; the cross block's stream */
    float *h;          /* (rows, pooler MLP) */
    float *scratch;    /* attention tiles at the pooler's heads */
    /* training: kept activations (keep[n_self] is the cross block's) and the backward's work */
    float *train_arena;
    vj_keep *keep;
    float *a, *da, *dqkv, *d_o, *dh, *dy, *dq, *bscratch;
} vj_state;

static const vj_pooler *pooler(const tubelet_model *m) { return m->w.fam; }

static void vjepa2_free_plan(tubelet_state *s) {
    vj_state *v = s->fam;
    if (!v) return;
    tb_state_unshare(s, v->pos), tb_state_unshare(s, v->cs);
    free(v->pos), free(v->cs), free(v->keep);
    TB_RUN(&s->be, mem_free, v->arena);
    TB_RUN(&s->be, mem_free, v->train_arena);
    free(v);
    s->fam = NULL;
}

/* Carves sizes[i] floats for *bufs[i] out of one backend allocation (64-byte aligned each). */
static float *carve(tubelet_state *s, float **const *bufs, const int64_t *sizes, int n,
                    tb_err *e) {
    size_t total = 0;
    for (int i = 0; i < n; i++) total += ((size_t)sizes[i] + 15) & ~(size_t)15;
    float *arena = TB_RUN(&s->be, mem_alloc, (total ? total : 1) * sizeof(float));
    if (!arena) {
        tb_fail(e, TUBELET_ERR_MEMORY, "out of memory: V-JEPA 2's pooler needs %.1f MB",
                total * 4.0 / 1e6);
        return NULL;
    }
    float *p = arena;
    for (int i = 0; i < n; i++) {
        *bufs[i] = sizes[i] ? p : NULL;
        p += ((size_t)sizes[i] + 15) & ~(size_t)15;
    }
    return arena;
}

/* The token positions as transformers numbers them: token i of a clip is at depth
 * i / g^2, height (i mod g^2) / g, width i mod g on the grid g = crop_size / patch_size of the
 * config, whatever the input's size (the original code takes the input's grid: docs/vjepa2.md). */
static int plan_positions(tubelet_state *s, vj_state *v, tb_err *e) {
    const tb_config *c = &s->m->cfg;
    const int64_t g = c->image_h / c->patch_h, gg = g * g, N = s->n_patch;
    const int hd = c->hidden / c->heads;
    v->pos = malloc(sizeof(int32_t) * 3 * (size_t)s->rows);
    if (!v->pos) return tb_fail(e, TUBELET_ERR_MEMORY, "out of memory");
    int64_t n_pos = 1;
    for (int64_t r = 0; r < s->rows; r++) {
        const int64_t i = r % N, d = i / gg, h = (i - d * gg) / g, w = i - d * gg - h * g;
        v->pos[3 * r] = (int32_t)d, v->pos[3 * r + 1] = (int32_t)h, v->pos[3 * r + 2] = (int32_t)w;
        n_pos = d + 1 > n_pos ? d + 1 : n_pos;
        n_pos = h + 1 > n_pos ? h + 1 : n_pos;
        n_pos = w + 1 > n_pos ? w + 1 : n_pos;
    }
    v->cs_floats = tb_rope_table_floats(hd, n_pos);
    v->cs = malloc(sizeof(float) * (size_t)(v->cs_floats ? v->cs_floats : 1));
    if (!v->cs) return tb_fail(e, TUBELET_ERR_MEMORY, "out of memory");
    tb_rope_table(v->cs, hd, n_pos);
    int rc;
    if ((rc = tb_state_share(s, v->pos, sizeof(int32_t) * 3 * (size_t)s->rows, e)) ||
        (rc = tb_state_share(s, v->cs, sizeof(float) * (size_t)v->cs_floats, e)))
        return rc;
    return TUBELET_OK;
}

static int vjepa2_plan(tubelet_state *s, tb_err *e) {
    const tb_config *c = &s->m->cfg;
    if (s->n_visible)
        return tb_fail(e, TUBELET_ERR_UNSUPPORTED, "V-JEPA 2 runs over every token of a clip "
                       "(masked pretraining is VideoMAE's)");
    vj_state *v = calloc(1, sizeof *v);
    if (!v) return tb_fail(e, TUBELET_ERR_MEMORY, "out of memory");
    s->fam = v;
    int rc = plan_positions(s, v, e);
    if (rc || !vjepa2_cfg(c)->classifier) return rc;
    const int64_t D = c->hidden, B = s->n_seq, I = pooler_mlp(c);
    const int64_t sizes[] = {B * D, B * D, I > c->intermediate ? s->rows * I : 0,
                             TB_RUN(&s->be, attention_scratch_floats, s->seq_len,
                                    (int)(D / pooler_heads(c)), s->max_threads)};
    float **bufs[] = {&v->q_in, &v->y, &v->h, &v->scratch};
    if (!(v->arena = carve(s, bufs, sizes, 4, e))) return TUBELET_ERR_MEMORY;
    if (!v->h) v->h = s->mlp; /* the encoder's MLP buffer is wide enough */
    return TUBELET_OK;
}

static int vjepa2_enable_training(tubelet_state *s, tb_err *e) {
    const tb_config *c = &s->m->cfg;
    vj_state *v = s->fam;
    if (!vjepa2_cfg(c)->classifier) return TUBELET_OK;
    const int n = pooler(s->m)->n_self;
    const int64_t D = c->hidden, R = s->rows, B = s->n_seq, I = pooler_mlp(c);
    v->keep = calloc((size_t)n + 1, sizeof *v->keep);
    if (!v->keep) return tb_fail(e, TUBELET_ERR_MEMORY, "out of memory");
    enum { PER = 5, WORK = 8 };
    const int nb = (n + 1) * PER + WORK;
    int64_t *sizes = calloc((size_t)nb, sizeof *sizes);
    float ***bufs = calloc((size_t)nb, sizeof *bufs);
    if (!sizes || !bufs) {
        free(sizes), free(bufs);
        return tb_fail(e, TUBELET_ERR_MEMORY, "out of memory");
    }
    for (int l = 0; l <= n; l++) {
        const int64_t rows = l < n ? R : B; /* the cross block's o, x_mid, h: one row per clip */
        vj_keep *k = &v->keep[l];
        float **f[PER] = {&k->x_in, &k->qkv, &k->o, &k->x_mid, &k->h};
        const int64_t z[PER] = {R * D, R * 3 * D, rows * D, rows * D, rows * I};
        for (int i = 0; i < PER; i++) bufs[l * PER + i] = f[i], sizes[l * PER + i] = z[i];
    }
    float **w[WORK] = {&v->a, &v->da, &v->dqkv, &v->d_o, &v->dh, &v->dy, &v->dq, &v->bscratch};
    const int64_t wz[WORK] = {R * D, R * D, R * 3 * D, R * D, R * I, B * D, B * D,
                              TB_RUN(&s->be, attention_backward_scratch_floats, s->seq_len,
                                     (int)(D / pooler_heads(c)), s->max_threads)};
    for (int i = 0; i < WORK; i++) bufs[(n + 1) * PER + i] = w[i], sizes[(n + 1) * PER + i] = wz[i];
    v->train_arena = carve(s, (float **const *)bufs, sizes, nb, e);
    free(sizes), free(bufs);
    return v->train_arena ? TUBELET_OK : TUBELET_ERR_MEMORY;
}

/* ---- the encoder's hooks ---- */

/* x = the patch embeddings: no positions are added (they rotate q and k in every block). */
static void vjepa2_tokens(tubelet_state *s) {
    TB_RUN(&s->be, copy, s->x, s->emb, s->B * s->n_patch * s->m->cfg.hidden);
}
static void vjepa2_tokens_backward(tubelet_state *s, float *dx, float *demb) {
    TB_RUN(&s->be, copy, demb, dx, s->B * s->n_patch * s->m->cfg.hidden);
}

/* RoPE: q and k, adjacent in each row of q|k|v, are 2 H heads of head_dim columns to rotate. */
static void vjepa2_rotate_qk(tubelet_state *s, float *qkv, int backward) {
    const vj_state *v = s->fam;
    const tb_config *c = &s->m->cfg;
    TB_RUN(&s->be, rope, qkv, 3 * (int64_t)c->hidden, s->rows, v->pos, 2 * c->heads,
           c->hidden / c->heads, v->cs, v->cs_floats, backward);
}

static int vjepa2_positions(tubelet_state *s, tb_err *e) {
    (void)s, (void)e;
    return TUBELET_OK; /* none to add: vjepa2_plan makes the rotary positions */
}

static int vjepa2_attention_plan(const tb_config *c, int64_t T, int64_t H, int64_t W,
                                 tb_attn_step st[TB_MAX_STEPS], int *split_heads) {
    (void)c, (void)T, (void)H, (void)W, (void)st;
    *split_heads = 0;
    return 0; /* joint attention over each clip */
}

/* ---- the attentive pooler ---- */

static void linear(tubelet_state *s, float *y, int64_t ldy, const float *x, const tb_lin *l,
                   int64_t M, int64_t N, int64_t K, int accumulate) {
    TB_RUN(&s->be, linear, s->lowp, y, ldy, x, l, l->b, M, N, K, accumulate);
}

static void attention(tubelet_state *s, float *out, const float *qkv, const tb_grouping *g,
                      float *scratch) {
    const tb_config *c = &s->m->cfg;
    const int H = pooler_heads(c);
    tb_state_kernel_failed(s,
                           TB_RUN(&s->be, attention, out, qkv, qkv + c->hidden,
                                  qkv + 2 * c->hidden, 3 * (int64_t)c->hidden, g, H,
                                  c->hidden / H, NULL, 0, scratch, tb_state_threads(s), NULL),
                           "V-JEPA 2's pooler attention");
}

static void attention_backward(tubelet_state *s, float *dqkv, const float *qkv, const float *o,
                               const float *d_o, const tb_grouping *g) {
    const tb_config *c = &s->m->cfg;
    const int64_t D = c->hidden;
    const int H = pooler_heads(c);
    vj_state *v = s->fam;
    tb_state_kernel_failed(s,
                           TB_RUN(&s->be, attention_backward, dqkv, dqkv + D, dqkv + 2 * D, 3 * D,
                                  qkv, qkv + D, qkv + 2 * D, 3 * D, o, d_o, g, H, (int)(D / H),
                                  NULL, v->bscratch, tb_state_threads(s), NULL),
                           "V-JEPA 2's pooler attention backward");
}

/* x (rows, D) += fc2(act(fc1(LN2(x)))), a: a (rows, D) buffer; h keeps fc1's output (training). */
static void pooler_mlp_forward(tubelet_state *s, const vj_layer *L, float *x, int64_t rows,
                               float *a, float *h_keep) {
    const tb_config *c = &s->m->cfg;
    vj_state *v = s->fam;
    const int64_t D = c->hidden, I = pooler_mlp(c);
    TB_RUN(&s->be, layernorm, a, D, x, D, L->ln2.w, L->ln2.b, rows, D, L->ln2.eps);
    if (h_keep) {
        linear(s, h_keep, I, a, &L->fc1, rows, I, D, 0);
        TB_RUN(&s->be, copy, v->h, h_keep, rows * I);
        TB_RUN(&s->be, bias_act, v->h, NULL, rows, I, c->act);
    } else {
        TB_RUN(&s->be, linear_act, s->lowp, v->h, a, &L->fc1, rows, I, D, c->act);
    }
    linear(s, x, D, v->h, &L->fc2, rows, D, I, 1);
}

/* Its backward: dx (rows, D) holds dL/d(output) on entry, dL/dx_mid on return. */
static void pooler_mlp_backward(tubelet_state *s, const vj_layer *L, const vj_layer *G, float *dx,
                                const float *x_mid, const float *h, int64_t rows) {
    const tb_config *c = &s->m->cfg;
    vj_state *v = s->fam;
    const int64_t D = c->hidden, I = pooler_mlp(c);
    TB_RUN(&s->be, layernorm, v->a, D, x_mid, D, L->ln2.w, L->ln2.b, rows, D, L->ln2.eps);
    TB_RUN(&s->be, copy, v->h, h, rows * I);
    TB_RUN(&s->be, bias_act, v->h, NULL, rows, I, c->act);
    TB_RUN(&s->be, linear_backward, s->lowp, v->dh, I, (float *)G->fc2.w, (float *)G->fc2.b, dx, D,
           v->h, I, L->fc2.w, rows, D, I, 0);
    TB_RUN(&s->be, act_backward, v->dh, h, rows, I, c->act);
    TB_RUN(&s->be, linear_backward, s->lowp, v->da, D, (float *)G->fc1.w, (float *)G->fc1.b, v->dh,
           I, v->a, D, L->fc1.w, rows, I, D, 0);
    TB_RUN(&s->be, layernorm_backward, dx, v->da, x_mid, L->ln2.w, (float *)G->ln2.w,
           (float *)G->ln2.b, rows, D, L->ln2.eps);
}

/* One self-attention block of the pooler over each clip's tokens, x (rows, D) in place:
 * x += out_proj(Attention(LN1(x))); x += MLP(LN2(x)). k: what the backward keeps (NULL: none);
 * a, qkv, o: work buffers. */
static void pooler_self_block(tubelet_state *s, const vj_layer *L, float *x, vj_keep *k, float *a,
                              float *qkv, float *o) {
    const tb_config *c = &s->m->cfg;
    const int64_t D = c->hidden, R = s->rows;
    vj_state *v = s->fam;
    if (k) TB_RUN(&s->be, copy, k->x_in, x, R * D), qkv = k->qkv, o = k->o;
    TB_RUN(&s->be, layernorm, a, D, x, D, L->ln1.w, L->ln1.b, R, D, L->ln1.eps);
    linear(s, qkv, 3 * D, a, &L->attn.q, R, D, D, 0);
    linear(s, qkv + D, 3 * D, a, &L->attn.k, R, D, D, 0);
    linear(s, qkv + 2 * D, 3 * D, a, &L->attn.v, R, D, D, 0);
    attention(s, o, qkv, &s->joint, v->scratch);
    linear(s, x, D, o, &L->attn.o, R, D, D, 1);
    if (k) TB_RUN(&s->be, copy, k->x_mid, x, R * D);
    pooler_mlp_forward(s, L, x, R, a, k ? k->h : NULL);
}

static void pooler_self_block_backward(tubelet_state *s, const vj_layer *L, const vj_layer *G,
                                       float *dx, const vj_keep *k) {
    const tb_config *c = &s->m->cfg;
    const int64_t D = c->hidden, R = s->rows;
    vj_state *v = s->fam;
    pooler_mlp_backward(s, L, G, dx, k->x_mid, k->h, R);
    TB_RUN(&s->be, linear_backward, s->lowp, v->d_o, D, (float *)G->attn.o.w, (float *)G->attn.o.b,
           dx, D, k->o, D, L->attn.o.w, R, D, D, 0);
    attention_backward(s, v->dqkv, k->qkv, k->o, v->d_o, &s->joint);
    TB_RUN(&s->be, layernorm, v->a, D, k->x_in, D, L->ln1.w, L->ln1.b, R, D, L->ln1.eps);
    const tb_lin *fw[3] = {&L->attn.q, &L->attn.k, &L->attn.v},
                 *gw[3] = {&G->attn.q, &G->attn.k, &G->attn.v};
    for (int i = 0; i < 3; i++)
        TB_RUN(&s->be, linear_backward, s->lowp, v->da, D, (float *)gw[i]->w, (float *)gw[i]->b,
               v->dqkv + i * D, 3 * D, v->a, D, fw[i]->w, R, D, D, i > 0);
    TB_RUN(&s->be, layernorm_backward, dx, v->da, k->x_in, L->ln1.w, (float *)G->ln1.w,
           (float *)G->ln1.b, R, D, L->ln1.eps);
}

/* The groupings of the cross-attention: clip b's one query (row b of q) attends over its N
 * tokens (rows [b N, (b + 1) N) of k and v). */
static void cross_groups(const tubelet_state *s, tb_grouping *gq, tb_grouping *gk) {
    *gk = (tb_grouping){s->n_seq, s->seq_len, NULL, NULL, NULL};
    *gq = (tb_grouping){s->n_seq, 1, NULL, NULL, gk};
}

/* The cross-attention block: y = q + CrossAttention(q, LN1(x), LN1(x)) with q the query token
 * of every clip, then y += MLP(LN2(y)) into s->pooled (B, D). */
static void pooler_cross_block(tubelet_state *s, const vj_layer *L, const float *x, vj_keep *k,
                               float *a, float *qkv, float *o) {
    const tb_config *c = &s->m->cfg;
    const int64_t D = c->hidden, R = s->rows, B = s->n_seq;
    vj_state *v = s->fam;
    tb_grouping gq, gk;
    cross_groups(s, &gq, &gk);
    if (k) TB_RUN(&s->be, copy, k->x_in, x, R * D), qkv = k->qkv, o = k->o;
    for (int64_t b = 0; b < B; b++) TB_RUN(&s->be, copy, v->q_in + b * D, pooler(s->m)->query, D);
    TB_RUN(&s->be, layernorm, a, D, x, D, L->ln1.w, L->ln1.b, R, D, L->ln1.eps);
    linear(s, qkv, 3 * D, v->q_in, &L->attn.q, B, D, D, 0); /* the query is not normed */
    linear(s, qkv + D, 3 * D, a, &L->attn.k, R, D, D, 0);
    linear(s, qkv + 2 * D, 3 * D, a, &L->attn.v, R, D, D, 0);
    attention(s, o, qkv, &gq, v->scratch);
    TB_RUN(&s->be, add_rows, v->y, D, v->q_in, D, o, D, NULL, NULL, 0, B, D); /* no out_proj */
    if (k) TB_RUN(&s->be, copy, k->x_mid, v->y, B * D);
    pooler_mlp_forward(s, L, v->y, B, a, k ? k->h : NULL);
    TB_RUN(&s->be, copy, s->pooled, v->y, B * D);
}

/* Its backward from dL/dpooled (s->train->dpooled): the query token's gradient, and
 * dL/d(the tokens it attended over) added into dx (rows, D). */
static void pooler_cross_block_backward(tubelet_state *s, const vj_layer *L, const vj_layer *G,
                                        float *dquery, float *dx, const vj_keep *k) {
    const tb_config *c = &s->m->cfg;
    const int64_t D = c->hidden, R = s->rows, B = s->n_seq;
    vj_state *v = s->fam;
    tb_grouping gq, gk;
    cross_groups(s, &gq, &gk);
    TB_RUN(&s->be, copy, v->dy, s->train->dpooled, B * D);
    pooler_mlp_backward(s, L, G, v->dy, k->x_mid, k->h, B);
    /* y_mid = q_in + o: dL/dq_in = dy (the residual) + the query projection's share */
    TB_RUN(&s->be, add_rows, dquery, 0, dquery, 0, v->dy, D, NULL, NULL, 0, B, D);
    TB_RUN(&s->be, zero, v->dqkv, R * 3 * D);
    attention_backward(s, v->dqkv, k->qkv, k->o, v->dy, &gq);
    for (int64_t b = 0; b < B; b++) TB_RUN(&s->be, copy, v->q_in + b * D, pooler(s->m)->query, D);
    TB_RUN(&s->be, linear_backward, s->lowp, v->dq, D, (float *)G->attn.q.w, (float *)G->attn.q.b,
           v->dqkv, 3 * D, v->q_in, D, L->attn.q.w, B, D, D, 0);
    TB_RUN(&s->be, add_rows, dquery, 0, dquery, 0, v->dq, D, NULL, NULL, 0, B, D);
    TB_RUN(&s->be, layernorm, v->a, D, k->x_in, D, L->ln1.w, L->ln1.b, R, D, L->ln1.eps);
    TB_RUN(&s->be, linear_backward, s->lowp, v->da, D, (float *)G->attn.k.w, (float *)G->attn.k.b,
           v->dqkv + D, 3 * D, v->a, D, L->attn.k.w, R, D, D, 0);
    TB_RUN(&s->be, linear_backward, s->lowp, v->da, D, (float *)G->attn.v.w, (float *)G->attn.v.b,
           v->dqkv + 2 * D, 3 * D, v->a, D, L->attn.v.w, R, D, D, 1);
    TB_RUN(&s->be, layernorm_backward, dx, v->da, k->x_in, L->ln1.w, (float *)G->ln1.w,
           (float *)G->ln1.b, R, D, L->ln1.eps);
}

/* The pooled vector of each clip from the final-normed tokens: the attentive pooler of a
 * classifier (the shared buffers past the encoder are its work space: hidden is s->a), the
 * tokens' mean for the backbone alone (VJEPA2Model has no pooled output). */
static void vjepa2_pool(tubelet_state *s, const float *hidden) {
    const tb_config *c = &s->m->cfg;
    const int64_t D = c->hidden;
    if (!vjepa2_cfg(c)->classifier) {
        TB_RUN(&s->be, mean_rows, s->pooled, hidden, s->n_seq, s->seq_len, D);
        return;
    }
    const vj_pooler *pl = pooler(s->m);
    vj_state *v = s->fam;
    vj_keep *keep = s->train ? v->keep : NULL;
    float *x = s->p2, *a = s->p; /* (rows, D) each at least */
    TB_RUN(&s->be, copy, x, hidden, s->rows * D);
    for (int l = 0; l < pl->n_self; l++)
        pooler_self_block(s, &pl->self[l], x, keep ? &keep[l] : NULL, a, s->qkv, s->o);
    pooler_cross_block(s, &pl->cross, x, keep ? &keep[pl->n_self] : NULL, a, s->qkv, s->o);
}

static void vjepa2_pool_backward(tubelet_state *s, float *dhidden) {
    const tb_config *c = &s->m->cfg;
    if (!vjepa2_cfg(c)->classifier) {
        TB_RUN(&s->be, mean_rows_backward, dhidden, s->train->dpooled, s->n_seq, s->seq_len,
               c->hidden);
        return;
    }
    const vj_pooler *pl = pooler(s->m), *gl = s->train->g->fam;
    const vj_state *v = s->fam;
    pooler_cross_block_backward(s, &pl->cross, &gl->cross, (float *)gl->query, dhidden,
                                &v->keep[pl->n_self]);
    for (int l = pl->n_self - 1; l >= 0; l--)
        pooler_self_block_backward(s, &pl->self[l], &gl->self[l], dhidden, &v->keep[l]);
}

/* ---- what the family is ---- */

static int64_t vjepa2_token_row(const tubelet_state *s, int64_t b, int64_t it, int64_t iy,
                                int64_t ix) {
    return b * s->n_patch + (it * s->grid_h + iy) * s->grid_w + ix;
}

static double vjepa2_flop(const tb_config *c, int T, int H, int W) {
    const double gt = tb_grid_t(c, T), N = (double)tb_grid_h(c, H) * tb_grid_w(c, W);
    const double rows = gt * N, D = c->hidden, I = (double)pooler_mlp(c);
    double f = tb_clip_flop(c, gt, N, 0, tb_attn_flop(rows, 1, rows, D), rows, 1);
    if (vjepa2_cfg(c)->classifier) /* the pooler: its self-attention blocks, the cross block */
        f += vjepa2_cfg(c)->pooler_layers * (tb_attn_flop(rows, 1, rows, D) + 4 * rows * D * I) +
             4 * rows * D * D + 4 * rows * D + 2 * D * D + 4 * D * I;
    return f;
}

static const char *vjepa2_variant(const tb_config *c) {
    return vjepa2_cfg(c)->classifier ? "attentive_pooler" : "backbone";
}

/* ---- config.json: VJEPA2Config (and tubelet's pooler_num_attention_heads) ---- */

static const char *const vjepa2_keys[] = {
    "patch_size", "crop_size", "frames_per_clip", "tubelet_size", "in_chans", "hidden_size",
    "num_attention_heads", "num_hidden_layers", "mlp_ratio", "layer_norm_eps", "qkv_bias",
    "hidden_act", "attention_dropout", "num_pooler_layers", "pooler_num_attention_heads",
    "pred_hidden_size", "pred_num_attention_heads", "pred_num_hidden_layers",
    "pred_num_mask_tokens", "pred_zero_init_mask_tokens", "pred_mlp_ratio", "image_size",
    NULL};

static void set_mlp(tb_config *c) {
    c->intermediate = (int)((double)c->hidden * vjepa2_cfg(c)->mlp_ratio); /* Python's int() */
}

static void vjepa2_defaults(tb_config *c) {
    c->image_h = c->image_w = 256, c->num_frames = 64, c->tubelet_t = 2;
    c->patch_h = c->patch_w = 16;
    c->hidden = 1024, c->layers = 24, c->heads = 16, c->ln_eps = 1e-6f;
    c->repeat_short_clips = 1;
    tb_vjepa2_config *v = vjepa2_cfg(c);
    v->mlp_ratio = 4.0, v->pooler_layers = 3;
    v->pred_hidden = 384, v->pred_heads = 12, v->pred_layers = 12, v->pred_mask_tokens = 10;
    v->pred_zero_init = 1, v->pred_mlp_ratio = 4.0;
    set_mlp(c);
}

/* A number field in [lo, hi]: absent or null keeps *out. */
static int cfg_number(const cJSON *j, const char *key, double *out, double lo, double hi,
                      const char *path, tb_err *e) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, key);
    if (!v || cJSON_IsNull(v)) return TUBELET_OK;
    if (!cJSON_IsNumber(v) || !(v->valuedouble >= lo && v->valuedouble <= hi))
        return tb_fail(e, TUBELET_ERR_CONFIG, "%s: %s must be a number in [%g, %g]", path, key, lo,
                       hi);
    *out = v->valuedouble;
    return TUBELET_OK;
}

static int vjepa2_parse_config(tb_config *c, const cJSON *j, const char *path, const tb_log *log,
                               tb_err *e) {
    (void)log;
    tb_vjepa2_config *v = vjepa2_cfg(c);
    const cJSON *arch = cJSON_GetObjectItemCaseSensitive(j, "architectures"), *a;
    cJSON_ArrayForEach(a, arch) if (cJSON_IsString(a) &&
                                    !strcmp(a->valuestring, "VJEPA2ForVideoClassification"))
        v->classifier = 1;
    int crop = c->image_h, rc;
    if ((rc = tb_cfg_patch_size(c, j, path, e)) ||
        (rc = tb_cfg_int(j, "crop_size", &crop, 1, 1 << 14, path, e)) ||
        (rc = tb_cfg_int(j, "frames_per_clip", &c->num_frames, 1, 1 << 14, path, e)) ||
        (rc = tb_cfg_int(j, "tubelet_size", &c->tubelet_t, 1, 1 << 10, path, e)) ||
        (rc = tb_cfg_int(j, "in_chans", &c->num_channels, 1, 64, path, e)) ||
        (rc = cfg_number(j, "mlp_ratio", &v->mlp_ratio, 1e-3, 64, path, e)) ||
        (rc = cfg_number(j, "attention_dropout", &v->pooler_dropout, 0, 1, path, e)) ||
        (rc = tb_cfg_int(j, "num_pooler_layers", &v->pooler_layers, 0, 1 << 10, path, e)) ||
        (rc = tb_cfg_int(j, "pooler_num_attention_heads", &v->pooler_heads, 0, 1 << 10, path,
                         e)) ||
        (rc = tb_cfg_int(j, "pred_hidden_size", &v->pred_hidden, 1, 1 << 16, path, e)) ||
        (rc = tb_cfg_int(j, "pred_num_attention_heads", &v->pred_heads, 1, 1 << 10, path, e)) ||
        (rc = tb_cfg_int(j, "pred_num_hidden_layers", &v->pred_layers, 0, 1 << 10, path, e)) ||
        (rc = tb_cfg_int(j, "pred_num_mask_tokens", &v->pred_mask_tokens, 0, 1 << 16, path, e)) ||
        (rc = tb_cfg_bool(j, "pred_zero_init_mask_tokens", &v->pred_zero_init, path, e)) ||
        (rc = cfg_number(j, "pred_mlp_ratio", &v->pred_mlp_ratio, 1e-3, 64, path, e)))
        return rc;
    c->image_h = c->image_w = crop;
    return TUBELET_OK;
}

/* After the shared fields: the MLP width from mlp_ratio, the pooler's heads; a backbone has no
 * classifier whatever id2label says. */
static int vjepa2_check_config(tb_config *c, const char *path, tb_err *e) {
    set_mlp(c);
    if (c->intermediate < 1)
        return tb_fail(e, TUBELET_ERR_CONFIG, "%s: mlp_ratio %g leaves the MLP no width", path,
                       vjepa2_cfg(c)->mlp_ratio);
    if (c->hidden % pooler_heads(c))
        return tb_fail(e, TUBELET_ERR_CONFIG, "%s: hidden_size %d is not divisible by the "
                       "pooler's %d heads", path, c->hidden, pooler_heads(c));
    if (vjepa2_cfg(c)->classifier && c->num_labels < 1)
        return tb_fail(e, TUBELET_ERR_CONFIG, "%s: VJEPA2ForVideoClassification needs at least "
                       "one label (id2label or num_labels)", path);
    if (!vjepa2_cfg(c)->classifier) c->num_labels = 0;
    return TUBELET_OK;
}

static const char *vjepa2_architecture(const tb_config *c) {
    return vjepa2_cfg(c)->classifier ? "VJEPA2ForVideoClassification" : "VJEPA2Model";
}

static void vjepa2_write_config(cJSON *j, const tb_config *c) {
    const tb_vjepa2_config *v = vjepa2_cfg(c);
    cJSON_DeleteItemFromObjectCaseSensitive(j, "image_size"); /* VJEPA2Config's is crop_size */
    cJSON_AddNumberToObject(j, "patch_size", c->patch_h);
    cJSON_AddNumberToObject(j, "crop_size", c->image_h);
    cJSON_AddNumberToObject(j, "frames_per_clip", c->num_frames);
    cJSON_AddNumberToObject(j, "tubelet_size", c->tubelet_t);
    cJSON_AddNumberToObject(j, "in_chans", c->num_channels);
    cJSON_AddNumberToObject(j, "hidden_size", c->hidden);
    cJSON_AddNumberToObject(j, "num_hidden_layers", c->layers);
    cJSON_AddNumberToObject(j, "num_attention_heads", c->heads);
    cJSON_AddItemToObject(j, "mlp_ratio", tb_json_number(v->mlp_ratio));
    cJSON_AddStringToObject(j, "hidden_act", tb_cfg_act_name(c->act));
    cJSON_AddNumberToObject(j, "layer_norm_eps", c->ln_eps);
    cJSON_AddItemToObject(j, "initializer_range", tb_json_number(c->init_std));
    cJSON_AddBoolToObject(j, "qkv_bias", c->qkv_bias);
    cJSON_AddItemToObject(j, "attention_probs_dropout_prob", tb_json_number(c->attn_dropout));
    cJSON_AddItemToObject(j, "attention_dropout", tb_json_number(v->pooler_dropout));
    cJSON_AddNumberToObject(j, "num_pooler_layers", v->pooler_layers);
    if (v->pooler_heads > 0)
        cJSON_AddNumberToObject(j, "pooler_num_attention_heads", v->pooler_heads);
    cJSON_AddNumberToObject(j, "pred_hidden_size", v->pred_hidden);
    cJSON_AddNumberToObject(j, "pred_num_attention_heads", v->pred_heads);
    cJSON_AddNumberToObject(j, "pred_num_hidden_layers", v->pred_layers);
    cJSON_AddNumberToObject(j, "pred_num_mask_tokens", v->pred_mask_tokens);
    cJSON_AddBoolToObject(j, "pred_zero_init_mask_tokens", v->pred_zero_init);
    cJSON_AddItemToObject(j, "pred_mlp_ratio", tb_json_number(v->pred_mlp_ratio));
}

/* The published shapes (facebook/vjepa2-*): the backbones (VJEPA2Model, 64 frames) and the
 * classifiers (attentive probes of 3 + 1 blocks on Something-Something v2's 174 and Diving48's
 * 48 classes). */
static void shape_of(tb_config *c, const char *name) {
    if (strstr(name, "vith")) c->hidden = 1280, c->layers = 32, c->heads = 16;
    if (strstr(name, "vitg"))
        c->hidden = 1408, c->layers = 40, c->heads = 22, vjepa2_cfg(c)->mlp_ratio = 48.0 / 11.0;
    if (strstr(name, "-384")) c->image_h = c->image_w = 384;
    set_mlp(c);
}
static void preset_backbone(tb_config *c, const char *name) {
    shape_of(c, name);
    c->num_labels = 0;
}
static void preset_classifier(tb_config *c, const char *name) {
    shape_of(c, name);
    vjepa2_cfg(c)->classifier = 1;
    c->num_labels = strstr(name, "ssv2") ? 174 : 48;
    c->num_frames = strstr(name, "vitl-ssv2") ? 16 : strstr(name, "vitg-384-ssv2") ? 64 : 32;
}

static const tb_arch_preset vjepa2_presets[] = {
    {"vjepa2-vitl-256", preset_backbone},           /* facebook/vjepa2-vitl-fpc64-256 */
    {"vjepa2-vith-256", preset_backbone},           /* facebook/vjepa2-vith-fpc64-256 */
    {"vjepa2-vitg-256", preset_backbone},           /* facebook/vjepa2-vitg-fpc64-256 */
    {"vjepa2-vitg-384", preset_backbone},           /* facebook/vjepa2-vitg-fpc64-384 */
    {"vjepa2-vitl-ssv2", preset_classifier},        /* facebook/vjepa2-vitl-fpc16-256-ssv2 */
    {"vjepa2-vitl-diving48", preset_classifier},    /* facebook/vjepa2-vitl-fpc32-256-diving48 */
    {"vjepa2-vitg-384-ssv2", preset_classifier},    /* facebook/vjepa2-vitg-fpc64-384-ssv2 */
    {"vjepa2-vitg-384-diving48", preset_classifier}, /* facebook/vjepa2-vitg-fpc32-384-diving48 */
    {NULL, NULL},
};

/* ---- the pooler's linear layers, packed with the encoder's for inference ---- */

/* One pooler block's layers under "pooler.NAME.": q, k and v apart (the cross-attention
 * projects its query and its tokens separately), out_proj (self-attention only), the MLP. */
static int pooler_layer_linears(const tb_config *c, vj_layer *L, const char *name,
                                const tb_linear_visitor *v, void *job) {
    const int64_t D = c->hidden, I = pooler_mlp(c);
    char n[TB_LAYER_NAME];
    tb_lin *l[6] = {&L->attn.q, &L->attn.k, &L->attn.v, &L->attn.o, &L->fc1, &L->fc2};
    static const char *const what[6] = {"q_proj", "k_proj", "v_proj", "out_proj", "fc1", "fc2"};
    const int64_t out[6] = {D, D, D, D, I, D}, in[6] = {D, D, D, D, D, I};
    int rc = TUBELET_OK;
    for (int i = 0; i < 6 && !rc; i++) {
        snprintf(n, sizeof n, "pooler.%s.%s", name, what[i]);
        rc = v->lin(job, n, l[i], out[i], in[i]); /* out_proj of the cross block: absent */
    }
    if (!rc) v->done(job);
    return rc;
}

static int vjepa2_each_linear(tubelet_model *m, const tb_linear_visitor *v, void *job) {
    vj_pooler *pl = m->w.fam;
    if (!pl) return TUBELET_OK; /* the backbone alone */
    char name[32];
    int rc = TUBELET_OK;
    for (int l = 0; l < pl->n_self && !rc; l++) {
        snprintf(name, sizeof name, "self.%d", l);
        rc = pooler_layer_linears(&m->cfg, &pl->self[l], name, v, job);
    }
    return rc ? rc : pooler_layer_linears(&m->cfg, &pl->cross, "cross", v, job);
}

static size_t vjepa2_linear_bytes(const tubelet_model *m) {
    const vj_pooler *pl = m->w.fam;
    const int64_t D = m->cfg.hidden, I = pooler_mlp(&m->cfg);
    /* each self block: q, k, v, out_proj and the MLP; the cross block has no out_proj */
    return pl ? sizeof(float) * (size_t)((pl->n_self + 1) * (4 * D * D + 2 * D * I) - D * D) : 0;
}

static const tb_vit_hooks vjepa2_vit = {
    .attention_plan = vjepa2_attention_plan,
    .patch_of_row = tb_patch_of_row_by_frame,
    .positions = vjepa2_positions,
    .tokens = vjepa2_tokens,
    .tokens_backward = vjepa2_tokens_backward,
    .rotate_qk = vjepa2_rotate_qk,
    .pool = vjepa2_pool,
    .pool_backward = vjepa2_pool_backward,
    .plan = vjepa2_plan,
    .enable_training = vjepa2_enable_training,
    .free_plan = vjepa2_free_plan,
    .each_linear = vjepa2_each_linear,
    .linear_bytes = vjepa2_linear_bytes,
};

/* VJEPA2VideoProcessor's defaults (video_processing_vjepa2.py): crop 256, the short side
 * int(crop * 256 / 224) (292 at 256) derived from the crop whatever the file's size says, as the
 * processor's __init__ does; bilinear, 1/255, ImageNet's mean and std (docs/vjepa2.md). */
static const tb_preproc_defaults vjepa2_preprocess = {
    "VJEPA2", 292, 1.0 / 255.0, 0, {0.485f, 0.456f, 0.406f}, {0.229f, 0.224f, 0.225f}, 256, 1};

static const char *const vjepa2_not_run[] = {"vjepa2.predictor.", NULL};
/* the attentive probe V-JEPA 2 is evaluated with: trained over the frozen encoder */
static const char *const vjepa2_probe[] = {"pooler.", NULL};

/* VJEPA2Predictor's parameters (never run): predictor_embeddings (D -> P), the mask tokens, its
 * blocks of width P (q, k, v with qkv_bias, proj, two norms, the MLP int(P * pred_mlp_ratio)),
 * its layernorm and proj (P -> D). */
static int64_t vjepa2_params_not_run(const tb_config *c) {
    const tb_vjepa2_config *v = vjepa2_cfg(c);
    const int64_t D = c->hidden, P = v->pred_hidden, I = (int64_t)((double)P * v->pred_mlp_ratio);
    const int64_t block = 3 * (P * P + (c->qkv_bias ? P : 0)) + P * P + P + 4 * P + P * I + I +
                          I * P + P;
    return D * P + P + v->pred_mask_tokens * P + v->pred_layers * block + 2 * P + P * D + D;
}

const tb_family_ops tb_vjepa2_family = {
    .id = TB_VJEPA2,
    .build = vjepa2_build,
    .vit = &vjepa2_vit, /* the shared encoder runs it */
    .sequences = tb_sequences_per_clip,
    .token_row = vjepa2_token_row,
    .flop = vjepa2_flop,
    .variant = vjepa2_variant,
    .model_type = "vjepa2",
    .display_name = "V-JEPA 2",
    .config_keys = vjepa2_keys,
    .config_size = sizeof(tb_vjepa2_config),
    .defaults = vjepa2_defaults,
    .parse_config = vjepa2_parse_config,
    .check_config = vjepa2_check_config,
    .architecture = vjepa2_architecture,
    .write_config = vjepa2_write_config,
    .presets = vjepa2_presets,
    .not_run = vjepa2_not_run,
    .probe = vjepa2_probe,
    .params_not_run = vjepa2_params_not_run,
    .head_prefix = "classifier.",
    .preprocess = &vjepa2_preprocess,
    .init_trunc = 2.0, /* trunc_normal_(std = initializer_range), bounds +-2 */
    .image_model_what = "V-JEPA 2 has no image-ViT initialisation (its encoder is pre-trained by "
                        "JEPA); load a V-JEPA 2 checkpoint",
};
