/* Video Swin Transformer (Liu et al., CVPR 2022; seed 003; docs/video-swin.md), with torchvision's
 * parameter names (torchvision.models.video.swin3d_t/s/b):
 *
 *   patch_embed   3D patches (2x4x4), padded to whole patches, a linear map and a LayerNorm
 *   stage i       depths[i] blocks of width embed_dim 2^i, each
 *                   x += W-MSA(LN(x))   over 3D windows (8x7x7), shifted by half a window in
 *                                       odd blocks, with a relative-position bias per head
 *                   x += MLP(LN(x))
 *   merging       after every stage but the last: 2x2 neighbours concatenated (4C), LayerNorm,
 *                 a linear map to 2C
 *   norm, mean over tokens, head
 *
 * The width changes from stage to stage, so this file is its own model runner (family.h's
 * tb_model_ops) instead of the shared encoder, with the same operations (the model's
 * kernels/backend.h table): linear layers, LayerNorm, GELU, row gathers and scatters, and the one
 * attention kernel with a tb_attn_bias (bias per head, mask per window). Windows, shifts and padding are index tables planned once per
 * input shape: window member -> token row, or -1 for a padding token (zeros, as F.pad gives).
 *
 * torchvision's rules followed exactly (its fixtures check them):
 *  - a window no smaller than the token grid along an axis shrinks to the grid and is not shifted
 *    along it (_get_window_and_shift_size: size <= window);
 *  - padding tokens are zeros after norm1: their keys and values are the qkv bias, and they are
 *    not masked (only shifted windows get a mask, from the regions of the padded, rolled grid);
 *  - a shrunk window reads the bias of the first L x L entries of the full window's relative
 *    index (relative_position_index[:L, :L], also the official code's rule), not the index of a
 *    smaller window. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <omp.h>

#include "../kernels/attention.h"
#include "../kernels/ops.h"
#include <cjson/cJSON.h>

#include "image_init.h"

/* Video Swin's own config (tb_config.fam; docs/video-swin.md): config.json fields of tubelet's own
 * "video_swin" type, named as torchvision's SwinTransformer3d arguments. The patch is
 * tubelet_t x patch_h x patch_w; hidden, heads, intermediate and layers of tb_config describe the
 * last stage (its width, heads, MLP width) and the blocks of all stages. */
#define TB_SWIN_MAX_STAGES 4
typedef struct {
    int stages;                       /* len(depths) */
    int embed_dim;                    /* width of stage 0; stage i has embed_dim 2^i */
    int depths[TB_SWIN_MAX_STAGES], heads[TB_SWIN_MAX_STAGES];
    int window[3];                    /* window_size: frames, rows, columns of tokens */
    double mlp_ratio;                 /* MLP width = int(width * mlp_ratio) */
    double stochastic_depth;          /* stochastic_depth_prob (of the last block; linear rule) */
} tb_swin_config;

static inline tb_swin_config *swin_cfg(const tb_config *c) { return c->fam; }
/* Width of stage i (patch merging doubles it). */
static inline int64_t swin_width(const tb_config *c, int i) {
    return (int64_t)swin_cfg(c)->embed_dim << i;
}
/* MLP width of a block of width C: torchvision's int(C * mlp_ratio). */
static inline int64_t swin_mlp(const tb_config *c, int64_t C) {
    return (int64_t)((double)C * swin_cfg(c)->mlp_ratio);
}

#define MAX_S TB_SWIN_MAX_STAGES

/* Runs stmt, adding its wall time to s->prof_ms[cat] when profiling (bench --profile; the same
 * kinds as the shared encoder's). */
#define VS_PROF(s, cat, stmt)                                                                    \
    do {                                                                                         \
        const double t0_ = (s)->profile ? omp_get_wtime() : 0;                                   \
        stmt;                                                                                    \
        if ((s)->profile) (s)->prof_ms[cat] += 1e3 * (omp_get_wtime() - t0_);                    \
    } while (0)

/* ---- parameters ---- */

typedef struct {
    tb_ln norm1, norm2;
    tb_lin qkv, proj, fc1, fc2; /* attn.qkv, attn.proj, mlp.0, mlp.3 */
    const float *table;         /* attn.relative_position_bias_table (n_rel, heads) */
} vs_block;

typedef struct {
    tb_lin patch;                           /* patch_embed.proj: (C0, channels, t, h, w) */
    tb_ln patch_norm;                       /* patch_embed.norm */
    tb_ln merge_norm[MAX_S];                /* features.<2i+1>.norm (4 C_i), i < stages - 1 */
    tb_lin merge[MAX_S];                    /* features.<2i+1>.reduction (2 C_i, 4 C_i) */
    tb_ln norm;                             /* norm */
    tb_lin head;                            /* head (w NULL: no classifier) */
    int n_blocks;
    vs_block blk[];                         /* stage by stage */
} vs_weights;

static int64_t n_rel(const tb_config *c) {
    const int *w = swin_cfg(c)->window;
    return (int64_t)(2 * w[0] - 1) * (2 * w[1] - 1) * (2 * w[2] - 1);
}

/* The relative-position table, checked first so that a table of another window's size says so. */
static int build_table(tubelet_model *m, const char *name, int heads, const float **out,
                       tb_err *e) {
    const tb_config *c = &m->cfg;
    const int64_t shape[2] = {n_rel(c), heads};
    const int64_t rows = m->weights && !m->grad_of ? tb_weights_rows(m->weights, name) : -1;
    if (rows >= 0 && rows != shape[0])
        return tb_fail(e, TUBELET_ERR_SHAPE,
                       "%s: '%s' has %lld rows, but window_size %dx%dx%d of config.json needs "
                       "(2*%d-1)(2*%d-1)(2*%d-1) = %lld: the checkpoint was made for another "
                       "window", m->source, name, (long long)rows, swin_cfg(c)->window[0],
                       swin_cfg(c)->window[1], swin_cfg(c)->window[2], swin_cfg(c)->window[0],
                       swin_cfg(c)->window[1], swin_cfg(c)->window[2], (long long)shape[0]);
    return tb_param(m, name, 2, shape, TB_INIT_NORMAL, out, e);
}

static int build_block(tubelet_model *m, vs_block *b, const char *pre, int64_t C, int heads,
                       tb_err *e) {
    const float eps = m->cfg.ln_eps;
    const int64_t I = swin_mlp(&m->cfg, C);
    char p[128];
    int rc;
#define PRE(suffix) (snprintf(p, sizeof p, "%s%s", pre, suffix), p)
    if ((rc = tb_build_layernorm(m, &b->norm1, PRE("norm1."), (int)C, eps, e)) ||
        (rc = tb_build_linear(m, &b->qkv, PRE("attn.qkv."), (int)(3 * C), (int)C, 1, e)) ||
        (rc = tb_build_linear(m, &b->proj, PRE("attn.proj."), (int)C, (int)C, 1, e)) ||
        (rc = build_table(m, PRE("attn.relative_position_bias_table"), heads, &b->table, e)) ||
        (rc = tb_build_layernorm(m, &b->norm2, PRE("norm2."), (int)C, eps, e)) ||
        (rc = tb_build_linear(m, &b->fc1, PRE("mlp.0."), (int)I, (int)C, 1, e)) ||
        (rc = tb_build_linear(m, &b->fc2, PRE("mlp.3."), (int)C, (int)I, 1, e)))
        return rc;
#undef PRE
    return TUBELET_OK;
}

static int swin_build(tubelet_model *m, tb_weightset *ws, tb_err *e) {
    const tb_config *c = &m->cfg;
    const tb_swin_config *sw = swin_cfg(c);
    vs_weights *w = calloc(1, sizeof *w + sizeof(vs_block) * (size_t)c->layers);
    if (!w) return tb_fail(e, TUBELET_ERR_MEMORY, "%s: out of memory", m->source);
    free(ws->fam);
    ws->fam = w;
    w->n_blocks = c->layers;
    const int64_t C0 = sw->embed_dim;
    const int64_t pshape[5] = {C0, c->num_channels, c->tubelet_t, c->patch_h, c->patch_w},
                  bshape[1] = {C0};
    /* torchvision re-initialises only the Linear layers (trunc_normal_, zero bias): the patch
     * embedding keeps nn.Conv3d's default, uniform(+-1/sqrt(fan_in)) for weight and bias */
    const double bound = 1.0 / sqrt((double)(c->num_channels * c->tubelet_t * c->patch_h *
                                             c->patch_w));
    int rc;
    if ((rc = tb_param_uniform(m, "patch_embed.proj.weight", 5, pshape, bound, &w->patch.w, e)) ||
        (rc = tb_param_uniform(m, "patch_embed.proj.bias", 1, bshape, bound, &w->patch.b, e)) ||
        (rc = tb_build_layernorm(m, &w->patch_norm, "patch_embed.norm.", (int)C0, c->ln_eps, e)))
        return rc;
    for (int i = 0, l = 0; i < sw->stages; i++) {
        const int64_t C = swin_width(c, i);
        char pre[64];
        for (int j = 0; j < sw->depths[i]; j++, l++) {
            snprintf(pre, sizeof pre, "features.%d.%d.", 2 * i, j);
            if ((rc = build_block(m, &w->blk[l], pre, C, sw->heads[i], e))) return rc;
        }
        if (i + 1 == sw->stages) break;
        snprintf(pre, sizeof pre, "features.%d.norm.", 2 * i + 1);
        if ((rc = tb_build_layernorm(m, &w->merge_norm[i], pre, (int)(4 * C), c->ln_eps, e)))
            return rc;
        snprintf(pre, sizeof pre, "features.%d.reduction.", 2 * i + 1);
        if ((rc = tb_build_linear(m, &w->merge[i], pre, (int)(2 * C), (int)(4 * C), 0, e)))
            return rc;
    }
    if ((rc = tb_build_layernorm(m, &w->norm, "norm.", c->hidden, c->ln_eps, e))) return rc;
    if (c->num_labels > 0)
        return tb_build_linear(m, &w->head, "head.", c->num_labels, c->hidden, 1, e);
    return TUBELET_OK;
}

/* ---- geometry: token grids, windows and shifts per stage ---- */

typedef struct {
    int64_t T, H, W;        /* token grid of the stage */
    int64_t C, heads, I;    /* width, heads, MLP width */
    int64_t win[3], shift[3]; /* window after shrinking; shift of the odd blocks (0: none) */
    int64_t pad[3];         /* grid padded to whole windows */
    int64_t nW, L;          /* windows per clip, tokens per window */
} vs_geom;

/* Stage i's geometry for a clip of T x H x W pixels: the patch grid (ceil: the input is padded),
 * halved in rows and columns (ceil: merging pads) at each stage. */
static void geometry(const tb_config *c, int64_t T, int64_t H, int64_t W, vs_geom g[MAX_S]) {
    int64_t n[3] = {tb_grid_t(c, (int)T), tb_grid_h(c, (int)H), tb_grid_w(c, (int)W)};
    for (int i = 0; i < swin_cfg(c)->stages; i++) {
        vs_geom *s = &g[i];
        if (i > 0) n[1] = (n[1] + 1) / 2, n[2] = (n[2] + 1) / 2;
        s->T = n[0], s->H = n[1], s->W = n[2];
        s->C = swin_width(c, i), s->heads = swin_cfg(c)->heads[i], s->I = swin_mlp(c, s->C);
        s->nW = 1, s->L = 1;
        for (int d = 0; d < 3; d++) {
            const int64_t w = swin_cfg(c)->window[d];
            s->win[d] = n[d] <= w ? n[d] : w; /* torchvision: size <= window → window = size */
            s->shift[d] = n[d] <= w ? 0 : w / 2;
            s->pad[d] = (n[d] + s->win[d] - 1) / s->win[d] * s->win[d];
            s->nW *= s->pad[d] / s->win[d], s->L *= s->win[d];
        }
    }
}

static int has_shift(const vs_geom *g) { return g->shift[0] || g->shift[1] || g->shift[2]; }

/* ---- the plan of one input shape ---- */

typedef struct {
    vs_geom g;
    int64_t rows, members;  /* B T H W tokens; B nW L window members */
    int32_t *win[2];        /* member → token row (-1: padding); [0] regular, [1] shifted */
    float *mask;            /* shifted windows: (8, L, L), 0 or -100; NULL without a shift */
    int32_t *mask_index;    /*   (nW): the mask of each window */
    int32_t *rel;           /* (L, L): row of the bias table for members i, j */
    int32_t *merge;         /* stage i > 0: (rows, 4) rows of stage i - 1 merged into each
                               token, in torchvision's order x0, x1, x2, x3 (-1: padding) */
    float *x;               /* the stage's residual stream; its output once the blocks ran */
} vs_stage;

/* What one block's backward needs (training). */
typedef struct {
    float *x_in, *x_mid;    /* block input, input of the MLP (rows, C) */
    float *qkv, *o;         /* (members, 3C), attention output (members, C) */
    float *h;               /* fc1 output before GELU (rows, I) */
    float *keep_buf;        /* drop path of this step: per clip, attention then MLP (2 B) */
    const float *keep;      /*   keep_buf, or NULL when the block's rate is 0 */
} vs_kept;

typedef struct {
    int S;
    vs_stage st[MAX_S];
    int64_t n0, K;          /* stage 0's tokens per clip, pixels per patch */
    /* activations */
    float *patches, *emb, *a, *aw, *qkv, *o, *p, *mlp, *bias, *mrg, *mrgn, *scratch;
    /* training */
    vs_kept *kept;
    float *dxa, *dxb, *da, *daw, *dqkv, *d_o, *dp, *dmlp, *dbias, *dmrg, *dmrgn, *demb, *dhid,
        *dpooled, *bscratch;
    int checkpoint;         /* gradient checkpointing: blocks keep x_in (and keep_buf) only */
    vs_kept ck;             /*   the shared x_mid and h its recomputations refill */
    float *train_arena;
} vs_state;

/* Window member → token row of a B x T x H x W grid: the grid padded to whole windows, rolled
 * back by the shift (torch.roll(x, -shift)), cut into windows in (t, h, w) order. */
static void plan_windows(int32_t *idx, int64_t B, const vs_geom *g, int shifted) {
    const int64_t *w = g->win, *p = g->pad, nt = p[0] / w[0], nh = p[1] / w[1], nw = p[2] / w[2];
    int64_t k = 0;
    for (int64_t b = 0; b < B; b++)
        for (int64_t wt = 0; wt < nt; wt++)
            for (int64_t wh = 0; wh < nh; wh++)
                for (int64_t ww = 0; ww < nw; ww++)
                    for (int64_t i = 0; i < w[0]; i++)
                        for (int64_t j = 0; j < w[1]; j++)
                            for (int64_t l = 0; l < w[2]; l++, k++) {
                                int64_t t = wt * w[0] + i, y = wh * w[1] + j, x = ww * w[2] + l;
                                if (shifted) {
                                    t = (t + g->shift[0]) % p[0], y = (y + g->shift[1]) % p[1];
                                    x = (x + g->shift[2]) % p[2];
                                }
                                idx[k] = t < g->T && y < g->H && x < g->W
                                             ? (int32_t)(((b * g->T + t) * g->H + y) * g->W + x)
                                             : -1;
                            }
}

/* Region of position i of n along an axis of the rolled grid (torchvision's slices
 * [0, n - window), [n - window, n - shift), [n - shift, n)); one region without a shift. */
static int region(int64_t i, int64_t n, int64_t win, int64_t shift) {
    if (!shift) return 0;
    return i < n - win ? 0 : i < n - shift ? 1 : 2;
}

/* The shifted windows' masks: members of different regions do not attend to each other. Along a
 * shifted axis only the last window holds two regions, so a window's mask depends only on which
 * axes it is last along: at most 8 masks, mask_index[window] naming its own. */
static int plan_mask(float *mask, int32_t *mask_index, const vs_geom *g) {
    const int64_t *w = g->win, *p = g->pad, nt = p[0] / w[0], nh = p[1] / w[1], nw = p[2] / w[2],
                  L = g->L;
    int *lab = malloc(sizeof(int) * (size_t)L), done[8] = {0};
    if (!lab) return TUBELET_ERR_MEMORY;
    for (int64_t win = 0; win < g->nW; win++) {
        const int64_t wt = win / (nh * nw), wh = win / nw % nh, ww = win % nw;
        const int code = ((g->shift[0] && wt == nt - 1) * 2 + (g->shift[1] && wh == nh - 1)) * 2 +
                         (g->shift[2] && ww == nw - 1);
        mask_index[win] = code;
        if (done[code]) continue;
        done[code] = 1;
        for (int64_t m = 0; m < L; m++) {
            const int64_t t = wt * w[0] + m / (w[1] * w[2]), y = wh * w[1] + m / w[2] % w[1],
                          x = ww * w[2] + m % w[2];
            lab[m] = region(t, p[0], w[0], g->shift[0]) * 9 +
                     region(y, p[1], w[1], g->shift[1]) * 3 + region(x, p[2], w[2], g->shift[2]);
        }
        float *mw = mask + code * L * L;
        for (int64_t i = 0; i < L; i++)
            for (int64_t j = 0; j < L; j++) mw[i * L + j] = lab[i] == lab[j] ? 0.0f : -100.0f;
    }
    free(lab);
    return TUBELET_OK;
}

/* Rows of the bias table for members i, j < L, from the configured (unshrunk) window's index. */
static void plan_rel(int32_t *rel, const tb_config *c, int64_t L) {
    const int64_t wd = swin_cfg(c)->window[0], wh = swin_cfg(c)->window[1], ww = swin_cfg(c)->window[2];
    for (int64_t i = 0; i < L; i++)
        for (int64_t j = 0; j < L; j++) {
            const int64_t dt = i / (wh * ww) - j / (wh * ww) + wd - 1,
                          dy = i / ww % wh - j / ww % wh + wh - 1, dx = i % ww - j % ww + ww - 1;
            rel[i * L + j] = (int32_t)((dt * (2 * wh - 1) + dy) * (2 * ww - 1) + dx);
        }
}

/* Stage i's tokens from stage i - 1's: 2x2 neighbours (rows padded to even), x0 = (2y, 2x),
 * x1 = (2y+1, 2x), x2 = (2y, 2x+1), x3 = (2y+1, 2x+1) as torchvision concatenates them. */
static void plan_merge(int32_t *idx, int64_t B, const vs_geom *prev, const vs_geom *g) {
    static const int dy[4] = {0, 1, 0, 1}, dx[4] = {0, 0, 1, 1};
    int64_t k = 0;
    for (int64_t b = 0; b < B; b++)
        for (int64_t t = 0; t < g->T; t++)
            for (int64_t y = 0; y < g->H; y++)
                for (int64_t x = 0; x < g->W; x++)
                    for (int q = 0; q < 4; q++, k++) {
                        const int64_t yy = 2 * y + dy[q], xx = 2 * x + dx[q];
                        idx[k] = yy < prev->H && xx < prev->W
                                     ? (int32_t)(((b * prev->T + t) * prev->H + yy) * prev->W + xx)
                                     : -1;
                    }
}

static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

/* Carves buffers of the given float counts out of one allocation (64-byte aligned each). */
static float *carve(const tb_backend *ops, float **const *ptr, const int64_t *n, int count,
                    size_t *total_out) {
    size_t total = 0;
    for (int i = 0; i < count; i++) total += ((size_t)n[i] + 15) & ~(size_t)15;
    *total_out = total;
    float *arena = TB_RUN(ops, mem_alloc, sizeof(float) * (total ? total : 1)), *p = arena;
    if (!arena) return NULL;
    for (int i = 0; i < count; i++) {
        *ptr[i] = n[i] ? p : NULL;
        p += ((size_t)n[i] + 15) & ~(size_t)15;
    }
    return arena;
}

/* A stage's tables, handed to the backend once per plan (tb_state_share: a GPU keeps its copy,
 * so that no pass copies them again), and forgotten before they are freed. */
#define STAGE_TABLES(st)                                                                           \
    {{(st)->win[0], sizeof(int32_t) * (size_t)(st)->members},                                      \
     {(st)->win[1], sizeof(int32_t) * (size_t)(st)->members},                                      \
     {(st)->mask, sizeof(float) * (size_t)(8 * (st)->g.L * (st)->g.L)},                            \
     {(st)->mask_index, sizeof(int32_t) * (size_t)(st)->g.nW},                                     \
     {(st)->rel, sizeof(int32_t) * (size_t)((st)->g.L * (st)->g.L)},                               \
     {(st)->merge, sizeof(int32_t) * (size_t)(4 * (st)->rows)}}
typedef struct {
    const void *p;
    size_t bytes;
} vs_table;

static int share_tables(tubelet_state *s, const vs_state *v, tb_err *e) {
    int rc = TUBELET_OK;
    for (int i = 0; i < v->S && !rc; i++) {
        const vs_table t[] = STAGE_TABLES(&v->st[i]);
        for (size_t k = 0; k < sizeof t / sizeof *t && !rc; k++)
            rc = tb_state_share(s, t[k].p, t[k].bytes, e);
    }
    return rc;
}

static void swin_free_state(tubelet_state *s) {
    vs_state *v = s->fam;
    if (!v) return;
    for (int i = 0; i < MAX_S; i++) {
        const vs_table t[] = STAGE_TABLES(&v->st[i]);
        for (size_t k = 0; k < sizeof t / sizeof *t; k++) tb_state_unshare(s, t[k].p);
    }
    for (int i = 0; i < MAX_S; i++)
        free(v->st[i].win[0]), free(v->st[i].win[1]), free(v->st[i].mask),
            free(v->st[i].mask_index), free(v->st[i].rel),
            free(v->st[i].merge);
    free(v->kept);
    TB_RUN(&s->be, mem_free, v->train_arena);
    free(v);
    s->fam = NULL;
}

/* Tables of every stage for this input shape. */
static int plan_tables(tubelet_state *s, vs_state *v, tb_err *e) {
    const tb_config *c = &s->m->cfg;
    for (int i = 0; i < v->S; i++) {
        vs_stage *st = &v->st[i];
        const vs_geom *g = &st->g;
        st->win[0] = malloc(sizeof(int32_t) * (size_t)st->members);
        st->win[1] = has_shift(g) ? malloc(sizeof(int32_t) * (size_t)st->members) : NULL;
        st->mask = has_shift(g) ? malloc(sizeof(float) * (size_t)(8 * g->L * g->L)) : NULL;
        st->mask_index = has_shift(g) ? malloc(sizeof(int32_t) * (size_t)g->nW) : NULL;
        st->rel = malloc(sizeof(int32_t) * (size_t)(g->L * g->L));
        st->merge = i ? malloc(sizeof(int32_t) * (size_t)(4 * st->rows)) : NULL;
        if (!st->win[0] || !st->rel ||
            (has_shift(g) && (!st->win[1] || !st->mask || !st->mask_index)) ||
            (i && !st->merge))
            return tb_fail(e, TUBELET_ERR_MEMORY, "out of memory planning Video Swin's windows");
        plan_windows(st->win[0], s->B, g, 0);
        if (has_shift(g)) {
            plan_windows(st->win[1], s->B, g, 1);
            if (plan_mask(st->mask, st->mask_index, g))
                return tb_fail(e, TUBELET_ERR_MEMORY, "out of memory planning Video Swin's masks");
        }
        plan_rel(st->rel, c, g->L);
        if (i) plan_merge(st->merge, s->B, &v->st[i - 1].g, g);
    }
    return TUBELET_OK;
}

/* Packed weights: the largest M K, N and N K of any product of this shape. */
static int plan_lowp(tubelet_state *s, vs_state *v, tb_err *e) {
    const tubelet_model *m = s->m;
    const int64_t NL = m->cfg.num_labels, C0 = swin_cfg(&m->cfg)->embed_dim;
    int64_t mk = s->B * v->n0 * v->K, n = max64(C0, NL), nk = C0 * v->K;
    for (int i = 0; i < v->S; i++) {
        const vs_stage *st = &v->st[i];
        const int64_t C = st->g.C, I = st->g.I;
        mk = max64(mk, max64(st->members * C, st->rows * I));
        n = max64(n, max64(3 * C, I));
        nk = max64(nk, max64(3 * C * C, C * I));
        if (i) mk = max64(mk, st->rows * 2 * C), nk = max64(nk, C * 2 * C);
    }
    nk = max64(nk, NL * m->cfg.hidden);
    return TB_RUN(&m->be, ctx_new, &s->lowp, m->pack, m->precision == TB_PREC_FP32 ? 0 : mk, n, nk,
                  e);
}

static int swin_plan(tubelet_state *s, tb_err *e) {
    tubelet_model *m = s->m;
    const tb_config *c = &m->cfg;
    vs_state *v = calloc(1, sizeof *v);
    if (!v) return tb_fail(e, TUBELET_ERR_MEMORY, "out of memory");
    s->fam = v;
    v->S = swin_cfg(c)->stages;
    vs_geom g[MAX_S];
    geometry(c, s->T, s->H, s->W, g);
    for (int i = 0; i < v->S; i++) {
        v->st[i].g = g[i];
        v->st[i].rows = s->B * g[i].T * g[i].H * g[i].W;
        v->st[i].members = s->B * g[i].nW * g[i].L;
        if (v->st[i].members > INT32_MAX) /* the tables hold int32 rows */
            return tb_fail(e, TUBELET_ERR_SHAPE, "%s: %d clips of %d frames of %dx%d make %lld "
                           "window tokens in stage %d; at most %d", m->source, s->B, s->T, s->H,
                           s->W, (long long)v->st[i].members, i, INT32_MAX);
    }
    v->n0 = g[0].T * g[0].H * g[0].W;
    v->K = (int64_t)c->num_channels * c->tubelet_t * c->patch_h * c->patch_w;
    int rc = plan_tables(s, v, e);
    if (!rc) rc = share_tables(s, v, e);
    if (rc) return rc;
    /* the shared view: the last stage's tokens, one sequence per clip */
    const vs_geom *gl = &g[v->S - 1];
    s->grid_t = gl->T, s->grid_h = gl->H, s->grid_w = gl->W;
    s->n_patch = gl->T * gl->H * gl->W;
    s->n_stages = 1;
    s->stages[0] = (tb_stage){NULL, s->B, s->n_patch, s->B * s->n_patch};
    s->n_seq = s->B, s->seq_len = s->n_patch, s->rows = s->B * s->n_patch;
    int64_t rc_max = 0, mc = 0, ri = 0, hll = 0, mrg = 0, sc = 0;
    for (int i = 0; i < v->S; i++) {
        const vs_stage *st = &v->st[i];
        const int64_t C = st->g.C;
        rc_max = max64(rc_max, st->rows * C), mc = max64(mc, st->members * C);
        ri = max64(ri, st->rows * st->g.I), hll = max64(hll, st->g.heads * st->g.L * st->g.L);
        if (i) mrg = max64(mrg, st->rows * 2 * C);
        sc = max64(sc, TB_RUN(&s->be, attention_scratch_floats, st->g.L, (int)(C / st->g.heads),
                              s->max_threads));
    }
    float **ptr[] = {&v->patches, &v->emb, &v->a, &v->aw, &v->qkv, &v->o, &v->p, &v->mlp,
                     &v->bias, &v->mrg, &v->mrgn, &v->scratch, &s->x, &s->pooled,
                     &v->st[0].x, &v->st[1].x, &v->st[2].x, &v->st[3].x, &s->logits};
    int64_t n[] = {s->B * v->n0 * v->K, s->B * v->n0 * g[0].C, rc_max, mc, 3 * mc, mc,
                   max64(mc, rc_max), ri, hll, mrg, mrg, sc, s->rows * c->hidden,
                   s->B * c->hidden, 0, 0, 0, 0,
                   s->B * (c->num_labels > 0 ? c->num_labels : c->hidden)};
    for (int i = 0; i < v->S; i++) n[14 + i] = v->st[i].rows * v->st[i].g.C;
    s->arena = carve(&s->be, ptr, n, (int)(sizeof n / sizeof *n), &s->arena_floats);
    if (!s->arena)
        return tb_fail(e, TUBELET_ERR_MEMORY, "out of memory: the activations need %.1f MB",
                       s->arena_floats * 4.0 / 1e6);
    s->stages[0].x = s->x;
    for (int i = 0; i < v->S; i++) { /* tubelet_state_bytes counts the tables too (4 bytes each) */
        const vs_stage *st = &v->st[i];
        s->arena_floats += (size_t)(st->members * (st->win[1] ? 2 : 1) + st->g.L * st->g.L +
                                    (st->mask ? 8 * st->g.L * st->g.L + st->g.nW : 0) +
                                    (st->merge ? 4 * st->rows : 0));
    }
    return m->packed || m->mixed ? plan_lowp(s, v, e) : TUBELET_OK;
}

/* ---- row movements ---- */

/* ---- forward ---- */

static const vs_weights *weights(const tubelet_state *s) { return s->m->w.fam; }

static int threads(const tubelet_state *s) {
    return s->m->n_threads < s->max_threads ? s->m->n_threads : s->max_threads;
}

/* Pixels (B, T, C, H, W) → one row per patch laid out like the Conv3d kernel (the table's
 * patchify), zeros beyond the input (PatchEmbed3d pads at the end of each axis). */
static void patchify_pix(tubelet_state *s, vs_state *v, const float *pix) {
    const tb_config *c = &s->m->cfg;
    const vs_geom *g = &v->st[0].g;
    const tb_patch_geom pg = {s->B, s->T, c->num_channels, s->H, s->W, c->tubelet_t,
                              c->patch_h, c->patch_w, g->T, g->H, g->W};
    TB_RUN(&s->be, patchify, v->patches, pix, &pg);
}

/* One block on the residual stream x: x += W-MSA(norm1(x)) over (shifted) windows;
 * x += MLP(norm2(x)). k (training): where x_mid, qkv, o and h are kept for the backward (NULL:
 * not kept, under checkpointing); keep: the drop-path factors of this step (NULL: none). Training
 * runs the same products with or without k, so a recomputation repeats the forward bit for bit. */
static void block_forward(tubelet_state *s, vs_state *v, const vs_stage *st, const vs_block *w,
                          int shifted, float *x, const vs_kept *k, const float *keep) {
    const tb_backend *ops = &s->be;
    const vs_geom *g = &st->g;
    const int64_t C = g->C, R = st->rows, M = st->members, I = g->I, L = g->L;
    const float eps = s->m->cfg.ln_eps;
    const int32_t *win = st->win[shifted];
    const int training = s->train && s->train->active;
    float *qkv = k ? k->qkv : v->qkv, *o = k ? k->o : v->o;
    VS_PROF(s, PROF_NORM, TB_RUN(ops, layernorm, v->a, C, x, C, w->norm1.w, w->norm1.b, R, C, eps));
    VS_PROF(s, PROF_OTHER, TB_RUN(ops, gather_rows, v->aw, v->a, win, M, C, NULL, NULL, 1));
    VS_PROF(s, PROF_QKV,
            TB_RUN(ops, linear, s->lowp, qkv, 3 * C, v->aw, &w->qkv, w->qkv.b, M, 3 * C, C, 0));
    VS_PROF(s, PROF_OTHER, TB_RUN(ops, bias_lookup, v->bias, w->table, st->rel, g->heads, L * L));
    const tb_attn_bias ab = {v->bias, shifted ? st->mask : NULL, g->nW, NULL, st->mask_index};
    const tb_grouping grp = {.n_groups = s->B * g->nW, .group_len = L};
    VS_PROF(s, PROF_ATTN,
            tb_state_kernel_failed(s,
                                   TB_RUN(ops, attention, o, qkv, qkv + C, qkv + 2 * C, 3 * C, &grp,
                                          (int)g->heads, (int)(C / g->heads), &ab, 0, v->scratch,
                                          threads(s), NULL),
                                   "window attention"));
    VS_PROF(s, PROF_PROJ,
            TB_RUN(ops, linear, s->lowp, v->p, C, o, &w->proj, w->proj.b, M, C, C, 0));
    VS_PROF(s, PROF_OTHER,
            TB_RUN(ops, scatter_rows, x, v->p, win, M, C, 1, NULL, keep, g->nW * L, 0));
    if (k) TB_RUN(ops, copy, k->x_mid, x, R * C);
    VS_PROF(s, PROF_NORM, TB_RUN(ops, layernorm, v->a, C, x, C, w->norm2.w, w->norm2.b, R, C, eps));
    if (training) { /* fc1 before GELU kept for the backward (or GELU'd in place) */
        float *h = k ? k->h : v->mlp;
        TB_RUN(ops, linear, s->lowp, h, I, v->a, &w->fc1, w->fc1.b, R, I, C, 0);
        if (h != v->mlp) TB_RUN(ops, copy, v->mlp, h, R * I);
        TB_RUN(ops, bias_act, v->mlp, NULL, R, I, TB_ACT_GELU);
    } else {
        VS_PROF(s, PROF_FC1,
                TB_RUN(ops, linear_act, s->lowp, v->mlp, v->a, &w->fc1, R, I, C, TB_ACT_GELU));
    }
    if (keep) {
        TB_RUN(ops, linear, s->lowp, v->p, C, v->mlp, &w->fc2, w->fc2.b, R, C, I, 0);
        const tb_grouping clips = {.n_groups = s->B, .group_len = R / s->B}; /* one draw per clip */
        TB_RUN(ops, scale_rows, x, v->p, keep + s->B, &clips, C, 1);
    } else {
        VS_PROF(s, PROF_FC2,
                TB_RUN(ops, linear, s->lowp, x, C, v->mlp, &w->fc2, w->fc2.b, R, C, I, 1));
    }
}

/* Stage i's input from stage i - 1's output: merge 2x2 neighbours, norm, reduce to 2C. */
static void merge_forward(tubelet_state *s, vs_state *v, int i) {
    const tb_backend *ops = &s->be;
    const vs_weights *w = weights(s);
    const vs_stage *st = &v->st[i];
    const int64_t C = v->st[i - 1].g.C, R = st->rows;
    TB_RUN(ops, gather_rows, v->mrg, v->st[i - 1].x, st->merge, 4 * R, C, NULL, NULL, 1);
    TB_RUN(ops, layernorm, v->mrgn, 4 * C, v->mrg, 4 * C, w->merge_norm[i - 1].w,
           w->merge_norm[i - 1].b, R, 4 * C, s->m->cfg.ln_eps);
    TB_RUN(ops, linear, s->lowp, st->x, 2 * C, v->mrgn, &w->merge[i - 1], NULL, R, 2 * C, 4 * C, 0);
}

/* Drop path of this training step: one draw per clip for each block's attention and MLP
 * (torchvision's StochasticDepth "row" mode), at rate r k / (blocks - 1) for block k; a function
 * of (seed, step, block, branch, clip), so resumes repeat it. */
static int draw_drop_path(tubelet_state *s, vs_state *v) {
    const tubelet_train *tr = s->train;
    const int nb = s->m->cfg.layers;
    int any = 0;
    for (int l = 0; l < nb; l++) {
        const double rate = nb > 1 ? tr->drop_path * l / (nb - 1) : 0;
        vs_kept *k = &v->kept[l];
        k->keep = rate > 0 ? k->keep_buf : NULL;
        if (rate <= 0) continue;
        any = 1;
        /* drawn where the step runs (keep_buf: the training arena's, the backend's memory):
         * tb_hash(tb_hash(tb_hash(seed, step), l), i) */
        const tb_drop_draws d = {tb_hash(tb_hash(tr->dp_seed, (uint64_t)tr->dp_step), (uint64_t)l),
                                 0, 1, rate};
        TB_RUN(&s->be, draw_keep, k->keep_buf, 2 * s->B, d);
    }
    return any;
}

/* Patch embedding and every stage; training keeps what the backward needs. */
static void run_stages(tubelet_state *s, vs_state *v, const float *pix, int n_stages) {
    const tb_backend *ops = &s->be;
    const vs_weights *w = weights(s);
    const tb_config *c = &s->m->cfg;
    const int training = s->train && s->train->active;
    omp_set_num_threads(threads(s));
    const int64_t C0 = v->st[0].g.C, R0 = v->st[0].rows;
    VS_PROF(s, PROF_EMBED, patchify_pix(s, v, pix));
    VS_PROF(s, PROF_EMBED,
            TB_RUN(ops, linear, s->lowp, v->emb, C0, v->patches, &w->patch, w->patch.b, R0, C0,
                   v->K, 0));
    VS_PROF(s, PROF_NORM,
            TB_RUN(ops, layernorm, v->st[0].x, C0, v->emb, C0, w->patch_norm.w, w->patch_norm.b, R0,
                   C0, c->ln_eps));
    for (int i = 0, l = 0; i < n_stages; i++) {
        if (i) VS_PROF(s, PROF_OTHER, merge_forward(s, v, i));
        for (int j = 0; j < swin_cfg(c)->depths[i]; j++, l++) {
            vs_kept *k = training ? &v->kept[l] : NULL;
            vs_stage *st = &v->st[i];
            if (k) TB_RUN(ops, copy, k->x_in, st->x, st->rows * st->g.C);
            block_forward(s, v, st, &w->blk[l], j % 2 && has_shift(&st->g), st->x,
                          k && !v->checkpoint ? k : NULL, k ? k->keep : NULL);
        }
    }
}

/* norm, then the mean over each clip's tokens, then the head. */
static void head_forward(tubelet_state *s, vs_state *v, float *logits) {
    const tb_backend *ops = &s->be;
    const vs_weights *w = weights(s);
    const tb_config *c = &s->m->cfg;
    const vs_stage *st = &v->st[v->S - 1];
    const int64_t C = c->hidden, N = s->n_patch;
    TB_RUN(ops, layernorm, s->x, C, st->x, C, w->norm.w, w->norm.b, st->rows, C, c->ln_eps);
    if (!logits) return;
    TB_RUN(ops, mean_rows, s->pooled, s->x, s->B, N, C);
    if (w->head.w || w->head.q)
        TB_RUN(ops, linear, s->lowp, logits, c->num_labels, s->pooled, &w->head, w->head.b, s->B,
               c->num_labels, C, 0);
    else
        TB_RUN(ops, copy, logits, s->pooled, s->B * C);
}

static const float *swin_forward(tubelet_state *s, const float *pix, float *logits) {
    vs_state *v = s->fam;
    if (s->train && s->train->active) draw_drop_path(s, v);
    run_stages(s, v, pix, v->S);
    VS_PROF(s, PROF_OTHER, head_forward(s, v, logits));
    return s->x; /* the last stage's final-normed tokens */
}

static int swin_hidden(tubelet_state *s, const float *pix, int layer, const float **hidden,
                       tb_err *e) {
    if (layer >= 0)
        return tb_fail(e, TUBELET_ERR_UNSUPPORTED, "per-block features of Video Swin are not "
                       "supported: its blocks change width stage by stage (use layer -1, or the "
                       "stage outputs of tubelet_forward_features)");
    *hidden = swin_forward(s, pix, NULL);
    return TUBELET_OK;
}

static int swin_levels(tubelet_state *s, const float *pix, int n_levels, const int *layers,
                       float *const *out, tb_err *e) {
    vs_state *v = s->fam;
    if (layers)
        return tb_fail(e, TUBELET_ERR_UNSUPPORTED, "Video Swin's feature levels are its stage "
                       "outputs (1 to %d levels); per-block layers are not supported", v->S);
    if (n_levels > v->S)
        return tb_fail(e, TUBELET_ERR_ARG, "%s has %d stages: at most %d feature levels (the "
                       "stage outputs)", s->m->source, v->S, v->S);
    run_stages(s, v, pix, n_levels);
    for (int i = 0; i < n_levels; i++) { /* (rows, C) tokens → (B, C, T, H, W) */
        const vs_geom *g = &v->st[i].g;
        TB_RUN(&s->be, to_host_maps, out[i], v->st[i].x, NULL, s->B, g->T * g->H * g->W, g->C);
    }
    return TUBELET_OK;
}

static int swin_level_shape(const tubelet_state *s, int level, int64_t shape[5]) {
    const vs_state *v = s->fam;
    if (level < 0 || level >= v->S) return TUBELET_ERR_ARG;
    const vs_geom *g = &v->st[level].g;
    shape[0] = s->B, shape[1] = g->C, shape[2] = g->T, shape[3] = g->H, shape[4] = g->W;
    return TUBELET_OK;
}

/* ---- training: buffers and backward ---- */

/* Training buffers: per block x_in and the drop-path factors, and (without checkpointing) x_mid,
 * qkv, o and h; with checkpointing x_mid and h are one shared set, sized for the largest stage
 * (qkv and o: the forward's buffers), that swin_backward refills by running each block's
 * forward again from its x_in. */
static int swin_enable_training(tubelet_state *s, int checkpoint, tb_err *e) {
    vs_state *v = s->fam;
    const tb_config *c = &s->m->cfg;
    const int nb = c->layers;
    free(v->kept), TB_RUN(&s->be, mem_free, v->train_arena); /* a failed earlier call */
    v->kept = NULL, v->train_arena = NULL;
    v->kept = calloc((size_t)nb, sizeof(vs_kept));
    if (!v->kept) return tb_fail(e, TUBELET_ERR_MEMORY, "out of memory");
    enum { PER = 6, SHARED = 17 };
    float ***ptr = malloc(sizeof(float **) * (size_t)(PER * nb + SHARED));
    int64_t *n = malloc(sizeof(int64_t) * (size_t)(PER * nb + SHARED));
    if (!ptr || !n) {
        free(ptr), free(n);
        return tb_fail(e, TUBELET_ERR_MEMORY, "out of memory");
    }
    int64_t rc_max = 0, mc = 0, ri = 0, hll = 0, mrg = 0, sc = 0;
    for (int i = 0, l = 0; i < v->S; i++) {
        const vs_stage *st = &v->st[i];
        const int64_t C = st->g.C, R = st->rows, M = st->members;
        rc_max = max64(rc_max, R * C), mc = max64(mc, M * C), ri = max64(ri, R * st->g.I);
        hll = max64(hll, st->g.heads * st->g.L * st->g.L);
        if (i) mrg = max64(mrg, R * 2 * C);
        sc = max64(sc, TB_RUN(&s->be, attention_backward_scratch_floats, st->g.L,
                              (int)(C / st->g.heads), s->max_threads));
        for (int j = 0; j < swin_cfg(c)->depths[i]; j++, l++) {
            vs_kept *k = &v->kept[l];
            float **p[PER] = {&k->x_in, &k->x_mid, &k->qkv, &k->o, &k->h, &k->keep_buf};
            const int64_t own = checkpoint ? 0 : 1; /* 0: carve gives NULL */
            const int64_t f[PER] = {R * C, own * R * C, own * 3 * M * C, own * M * C,
                                    own * R * st->g.I, 2 * s->B};
            for (int q = 0; q < PER; q++) ptr[PER * l + q] = p[q], n[PER * l + q] = f[q];
        }
    }
    float **shared[SHARED] = {&v->dxa, &v->dxb, &v->da, &v->daw, &v->dqkv, &v->d_o, &v->dp,
                              &v->dmlp, &v->dbias, &v->dmrg, &v->dmrgn, &v->demb, &v->dhid,
                              &v->dpooled, &v->bscratch, &v->ck.x_mid, &v->ck.h};
    const int64_t ck = checkpoint ? 1 : 0;
    const int64_t fs[SHARED] = {rc_max, rc_max, rc_max, mc, 3 * mc, mc, max64(mc, rc_max), ri,
                                hll, mrg, mrg, s->B * v->n0 * v->st[0].g.C,
                                s->rows * c->hidden, s->B * c->hidden, sc, ck * rc_max, ck * ri};
    for (int q = 0; q < SHARED; q++) ptr[PER * nb + q] = shared[q], n[PER * nb + q] = fs[q];
    size_t total = 0;
    v->train_arena = carve(&s->be, (float **const *)ptr, n, PER * nb + SHARED, &total);
    free(ptr), free(n);
    tubelet_train *tr = calloc(1, sizeof *tr);
    const int64_t NL = c->num_labels > 0 ? c->num_labels : c->hidden;
    if (tr) tr->arena = TB_RUN(&s->be, mem_alloc, sizeof(float) * (size_t)(s->B * NL));
    if (!v->train_arena || !tr || !tr->arena) {
        if (tr) TB_RUN(&s->be, mem_free, tr->arena);
        free(tr);
        return tb_fail(e, TUBELET_ERR_MEMORY, "out of memory: training needs %.1f MB of "
                       "activations", total * 4.0 / 1e6);
    }
    tr->arena_floats = (size_t)(s->B * NL) + total;
    tr->dlogits = tr->arena;
    tr->checkpoint = v->checkpoint = checkpoint;
    s->train = tr;
    return TUBELET_OK;
}

/* Backward of block_forward: dx holds dL/d(block output) and becomes dL/d(block input). */
static void block_backward(tubelet_state *s, vs_state *v, const vs_stage *st, const vs_block *w,
                           vs_block *gw, int shifted, float *dx, const vs_kept *k) {
    const tb_backend *ops = &s->be;
    const vs_geom *g = &st->g;
    const int64_t C = g->C, R = st->rows, M = st->members, I = g->I, L = g->L;
    const float eps = s->m->cfg.ln_eps;
    const int32_t *win = st->win[shifted];
    const float *keep = k->keep;
    /* MLP: x_out = x_mid + keep fc2(gelu(fc1(norm2(x_mid)))) */
    const float *dy = dx;
    if (keep) {
        const tb_grouping clips = {.n_groups = s->B, .group_len = R / s->B}; /* one draw per clip */
        TB_RUN(ops, scale_rows, v->dp, dx, keep + s->B, &clips, C, 0);
        dy = v->dp;
    }
    TB_RUN(ops, layernorm, v->a, C, k->x_mid, C, w->norm2.w, w->norm2.b, R, C, eps);
    TB_RUN(ops, copy, v->mlp, k->h, R * I);
    TB_RUN(ops, bias_act, v->mlp, NULL, R, I, TB_ACT_GELU);
    TB_RUN(ops, linear_backward, s->lowp, v->dmlp, I, (float *)gw->fc2.w, (float *)gw->fc2.b, dy, C,
           v->mlp, I, w->fc2.w, R, C, I, 0);
    TB_RUN(ops, act_backward, v->dmlp, k->h, R, I, TB_ACT_GELU);
    TB_RUN(ops, linear_backward, s->lowp, v->da, C, (float *)gw->fc1.w, (float *)gw->fc1.b, v->dmlp,
           I, v->a, C, w->fc1.w, R, I, C, 0);
    TB_RUN(ops, layernorm_backward, dx, v->da, k->x_mid, w->norm2.w, (float *)gw->norm2.w,
           (float *)gw->norm2.b, R, C, eps);
    /* attention: x_mid = x_in + keep scatter(proj(attn(qkv(gather(norm1(x_in)))))) */
    TB_RUN(ops, gather_rows, v->dp, dx, win, M, C, NULL, keep, g->nW * L);
    TB_RUN(ops, linear_backward, s->lowp, v->d_o, C, (float *)gw->proj.w, (float *)gw->proj.b,
           v->dp, C, k->o, C, w->proj.w, M, C, C, 0);
    TB_RUN(ops, bias_lookup, v->bias, w->table, st->rel, g->heads, L * L);
    TB_RUN(ops, zero, v->dbias, g->heads * L * L);
    const tb_attn_bias ab = {v->bias, shifted ? st->mask : NULL, g->nW, v->dbias,
                             st->mask_index};
    const tb_grouping grp = {.n_groups = s->B * g->nW, .group_len = L};
    tb_state_kernel_failed(s,
                           TB_RUN(ops, attention_backward, v->dqkv, v->dqkv + C, v->dqkv + 2 * C,
                                  3 * C, k->qkv, k->qkv + C, k->qkv + 2 * C, 3 * C, k->o, v->d_o,
                                  &grp, (int)g->heads, (int)(C / g->heads), &ab, v->bscratch,
                                  threads(s), NULL),
                           "window attention backward");
    TB_RUN(ops, bias_lookup_backward, (float *)gw->table, v->dbias, st->rel, g->heads, L * L);
    TB_RUN(ops, layernorm, v->a, C, k->x_in, C, w->norm1.w, w->norm1.b, R, C, eps);
    TB_RUN(ops, gather_rows, v->aw, v->a, win, M, C, NULL, NULL, 1);
    TB_RUN(ops, linear_backward, s->lowp, v->daw, C, (float *)gw->qkv.w, (float *)gw->qkv.b,
           v->dqkv, 3 * C, v->aw, C, w->qkv.w, M, 3 * C, C, 0);
    TB_RUN(ops, scatter_rows, v->da, v->daw, win, M, C, 0, NULL, NULL, 1,
           0); /* every token is in one window */
    TB_RUN(ops, layernorm_backward, dx, v->da, k->x_in, w->norm1.w, (float *)gw->norm1.w,
           (float *)gw->norm1.b, R, C, eps);
}

/* Backward of merge_forward into stage i: dnext (stage i's input) → dprev (stage i - 1's
 * output, overwritten). */
static void merge_backward(tubelet_state *s, vs_state *v, int i, const float *dnext,
                           float *dprev) {
    const tb_backend *ops = &s->be;
    const vs_weights *w = weights(s);
    vs_weights *gw = s->train->g->fam;
    const vs_stage *st = &v->st[i], *prev = &v->st[i - 1];
    const int64_t C = prev->g.C, R = st->rows;
    const float eps = s->m->cfg.ln_eps;
    TB_RUN(ops, gather_rows, v->mrg, prev->x, st->merge, 4 * R, C, NULL, NULL, 1);
    TB_RUN(ops, layernorm, v->mrgn, 4 * C, v->mrg, 4 * C, w->merge_norm[i - 1].w,
           w->merge_norm[i - 1].b, R, 4 * C, eps);
    TB_RUN(ops, linear_backward, s->lowp, v->dmrgn, 4 * C, (float *)gw->merge[i - 1].w, NULL, dnext,
           2 * C, v->mrgn, 4 * C, w->merge[i - 1].w, R, 2 * C, 4 * C, 0);
    TB_RUN(ops, zero, v->dmrg, R * 4 * C);
    TB_RUN(ops, layernorm_backward, v->dmrg, v->dmrgn, v->mrg, w->merge_norm[i - 1].w,
           (float *)gw->merge_norm[i - 1].w, (float *)gw->merge_norm[i - 1].b, R, 4 * C, eps);
    TB_RUN(ops, zero, dprev, prev->rows * C);
    TB_RUN(ops, scatter_rows, dprev, v->dmrg, st->merge, 4 * R, C, 0, NULL, NULL, 1, 0);
}

/* From train->dlogits: the head, every stage and merge in reverse, the patch embedding. */
static void swin_backward(tubelet_state *s) {
    const tb_backend *ops = &s->be;
    vs_state *v = s->fam;
    const vs_weights *w = weights(s);
    vs_weights *gw = s->train->g->fam;
    const tb_config *c = &s->m->cfg;
    const vs_stage *last = &v->st[v->S - 1];
    const int64_t C = c->hidden, N = s->n_patch, NL = c->num_labels;
    /* head and mean: dhidden[b, r] = dpooled[b] / N; then the final norm */
    if (w->head.w)
        TB_RUN(ops, linear_backward, s->lowp, v->dpooled, C, (float *)gw->head.w,
               (float *)gw->head.b, s->train->dlogits, NL, s->pooled, C, w->head.w, s->B, NL, C, 0);
    else
        TB_RUN(ops, copy, v->dpooled, s->train->dlogits, s->B * C);
    TB_RUN(ops, mean_rows_backward, v->dhid, v->dpooled, s->B, N, C);
    float *dx = v->dxa, *dother = v->dxb;
    TB_RUN(ops, zero, dx, last->rows * C);
    TB_RUN(ops, layernorm_backward, dx, v->dhid, last->x, w->norm.w, (float *)gw->norm.w,
           (float *)gw->norm.b, last->rows, C, c->ln_eps);
    int l = c->layers;
    for (int i = v->S - 1; i >= 0; i--) {
        for (int j = swin_cfg(c)->depths[i] - 1; j >= 0; j--) {
            l--;
            const vs_stage *st = &v->st[i];
            const int shifted = j % 2 && has_shift(&st->g);
            const vs_kept *k = &v->kept[l];
            vs_kept re;
            if (v->checkpoint) { /* the block again from its input, into the shared set; the
                                    residual it updates is dother, free until the merge */
                re = v->ck, re.x_in = k->x_in, re.keep = k->keep;
                re.qkv = v->qkv, re.o = v->o; /* the forward's, unused by the backward */
                TB_RUN(ops, copy, dother, k->x_in, st->rows * st->g.C);
                block_forward(s, v, st, &w->blk[l], shifted, dother, &re, k->keep);
                k = &re;
            }
            block_backward(s, v, st, &w->blk[l], &gw->blk[l], shifted, dx, k);
        }
        if (!i) break;
        merge_backward(s, v, i, dx, dother);
        float *t = dx;
        dx = dother, dother = t;
    }
    /* patch embedding: x0 = norm(patches W^T + b) */
    const int64_t C0 = v->st[0].g.C, R0 = v->st[0].rows;
    TB_RUN(ops, zero, v->demb, R0 * C0);
    TB_RUN(ops, layernorm_backward, v->demb, dx, v->emb, w->patch_norm.w, (float *)gw->patch_norm.w,
           (float *)gw->patch_norm.b, R0, C0, c->ln_eps);
    TB_RUN(ops, linear_backward, s->lowp, NULL, 0, (float *)gw->patch.w, (float *)gw->patch.b,
           v->demb, C0, v->patches, v->K, w->patch.w, R0, C0, v->K, 0);
}

/* ---- precision, costs, the family table ---- */

static int swin_each_linear(tubelet_model *m, const tb_linear_visitor *v, void *job) {
    vs_weights *w = m->w.fam;
    const tb_config *c = &m->cfg;
    const int64_t K = (int64_t)c->num_channels * c->tubelet_t * c->patch_h * c->patch_w;
    int rc = v->lin(job, NULL, &w->patch, swin_cfg(c)->embed_dim, K);
    for (int i = 0, l = 0; i < swin_cfg(c)->stages && !rc; i++) {
        const int64_t C = swin_width(c, i), I = swin_mlp(c, C);
        for (int j = 0; j < swin_cfg(c)->depths[i] && !rc; j++, l++) {
            vs_block *b = &w->blk[l];
            if (!rc) rc = v->lin(job, NULL, &b->qkv, 3 * C, C);
            if (!rc) rc = v->lin(job, NULL, &b->proj, C, C);
            if (!rc) rc = v->lin(job, NULL, &b->fc1, I, C);
            if (!rc) rc = v->lin(job, NULL, &b->fc2, C, I);
        }
        if (!rc && i + 1 < swin_cfg(c)->stages) rc = v->lin(job, NULL, &w->merge[i], 2 * C, 4 * C);
    }
    if (!rc && w->head.w) rc = v->lin(job, NULL, &w->head, c->num_labels, c->hidden);
    return rc;
}

static size_t swin_linear_bytes(const tubelet_model *m) {
    const tb_config *c = &m->cfg;
    double n = (double)c->num_channels * c->tubelet_t * c->patch_h * c->patch_w *
               swin_cfg(c)->embed_dim;
    for (int i = 0; i < swin_cfg(c)->stages; i++) {
        const double C = (double)swin_width(c, i);
        n += swin_cfg(c)->depths[i] * (4 * C * C + 2 * C * (double)swin_mlp(c, (int64_t)C));
        if (i + 1 < swin_cfg(c)->stages) n += 8 * C * C;
    }
    if (c->num_labels > 0) n += (double)c->hidden * c->num_labels;
    return (size_t)(4 * n);
}

/* FLOPs (2 x multiply-adds) of one clip: the products over padded windows as torchvision runs
 * them (padding tokens included), attention's QK^T and PV, patch merging, the head. */
/* tubelet_model_info's stages: the geometry of config.json's input. */
static void swin_stages(const tb_config *c, tubelet_model_info *info) {
    vs_geom g[MAX_S];
    geometry(c, c->num_frames, c->image_h, c->image_w, g);
    info->num_stages = swin_cfg(c)->stages < TUBELET_MAX_STAGES ? swin_cfg(c)->stages : TUBELET_MAX_STAGES;
    for (int i = 0; i < info->num_stages; i++) {
        info->stage[i].depth = swin_cfg(c)->depths[i];
        info->stage[i].heads = (int)g[i].heads;
        info->stage[i].width = (int)g[i].C;
        info->stage[i].mlp = (int)g[i].I;
        const int64_t n[3] = {g[i].T, g[i].H, g[i].W};
        for (int d = 0; d < 3; d++) {
            info->stage[i].tokens[d] = (int)n[d];
            info->stage[i].window[d] = (int)g[i].win[d];
        }
    }
    for (int d = 0; d < 3; d++) info->window_size[d] = swin_cfg(c)->window[d];
}

static double swin_flop(const tb_config *c, int T, int H, int W) {
    vs_geom g[MAX_S];
    geometry(c, T, H, W, g);
    const double K = (double)c->num_channels * c->tubelet_t * c->patch_h * c->patch_w;
    double f = 2 * (double)(g[0].T * g[0].H * g[0].W) * K * (double)g[0].C;
    for (int i = 0; i < swin_cfg(c)->stages; i++) {
        const double C = (double)g[i].C, R = (double)(g[i].T * g[i].H * g[i].W),
                     M = (double)(g[i].nW * g[i].L), L = (double)g[i].L;
        const double block = 2 * M * C * 3 * C + 4 * M * L * C + 2 * M * C * C +
                             4 * R * C * (double)g[i].I;
        f += swin_cfg(c)->depths[i] * block;
        if (i) f += 2 * R * 4 * (C / 2) * C; /* merging into stage i: 4 C_{i-1} → C_i */
    }
    if (c->num_labels > 0) f += 2 * (double)c->hidden * c->num_labels;
    return f;
}

static const char *swin_variant(const tb_config *c) {
    (void)c;
    return "shifted 3D windows";
}

static int swin_sequences(const tb_config *c, int64_t B, int64_t gt, int64_t N, tb_stage st[2]) {
    return tb_sequences_per_clip(c, B, gt, N, st);
}

static int64_t swin_token_row(const tubelet_state *s, int64_t b, int64_t it, int64_t iy,
                              int64_t ix) {
    return b * s->seq_len + (it * s->grid_h + iy) * s->grid_w + ix;
}

static const tb_model_ops swin_model = {
    .plan = swin_plan,
    .free_state = swin_free_state,
    .forward = swin_forward,
    .hidden = swin_hidden,
    .levels = swin_levels,
    .level_shape = swin_level_shape,
    .enable_training = swin_enable_training,
    .backward = swin_backward,
    .each_linear = swin_each_linear,
    .linear_bytes = swin_linear_bytes,
    .attention_f32 = 1, /* the biased window attention runs in f32 */
};

/* ---- config.json: tubelet's own "video_swin" type (docs/video-swin.md), named as torchvision's
 * SwinTransformer3d arguments ---- */

static const char *const video_swin_keys[] = {
    "image_size", "num_frames", "num_channels", "patch_size", "embed_dim", "depths", "num_heads",
    "window_size", "mlp_ratio", "stochastic_depth_prob", "layer_norm_eps", NULL};

/* torchvision's swin3d_t */
static void swin_defaults(tb_config *c) {
    c->num_frames = 32, c->tubelet_t = 2, c->patch_h = c->patch_w = 4;
    c->ln_eps = 1e-5f, c->pad_to_patch = 1;
    *swin_cfg(c) = (tb_swin_config){4, 96, {2, 2, 6, 2}, {3, 6, 12, 24}, {8, 7, 7}, 4.0, 0.1};
}

/* Video Swin's own fields (config.json of docs/video-swin.md). */
static int swin_parse_config(tb_config *c, const cJSON *j, const char *path,
                             const tb_log *log, tb_err *e) {
    (void)log;
    tb_swin_config *w = swin_cfg(c);
    int patch[3] = {c->tubelet_t, c->patch_h, c->patch_w}, n = 3, nh = w->stages, nw = 3;
    int rc;
    if ((rc = tb_cfg_list(j, "patch_size", patch, &n, 3, 1, 1 << 10, path, e))) return rc;
    if (n != 3)
        return tb_fail(e, TUBELET_ERR_CONFIG, "%s: patch_size must have 3 entries (frames, rows, "
                       "columns), not %d", path, n);
    c->tubelet_t = patch[0], c->patch_h = patch[1], c->patch_w = patch[2];
    if ((rc = tb_cfg_int(j, "embed_dim", &w->embed_dim, 1, 1 << 16, path, e)) ||
        (rc = tb_cfg_list(j, "depths", w->depths, &w->stages, TB_SWIN_MAX_STAGES, 1, 1 << 10, path,
                       e)) ||
        (rc = tb_cfg_list(j, "num_heads", w->heads, &nh, TB_SWIN_MAX_STAGES, 1, 1 << 10, path, e)) ||
        (rc = tb_cfg_list(j, "window_size", w->window, &nw, 3, 1, 1 << 10, path, e)))
        return rc;
    if (nh != w->stages)
        return tb_fail(e, TUBELET_ERR_CONFIG, "%s: depths has %d stages but num_heads %d: one "
                       "head count per stage", path, w->stages, nh);
    if (nw != 3)
        return tb_fail(e, TUBELET_ERR_CONFIG, "%s: window_size must have 3 entries (frames, "
                       "rows, columns), not %d", path, nw);
    /* each block holds a (heads, L, L) bias and a stage up to 8 (L, L) masks: bound L */
    if ((int64_t)w->window[0] * w->window[1] * w->window[2] > 4096)
        return tb_fail(e, TUBELET_ERR_CONFIG, "%s: window_size %dx%dx%d holds %lld tokens; at most "
                       "4096 per window", path, w->window[0], w->window[1], w->window[2],
                       (long long)w->window[0] * w->window[1] * w->window[2]);
    const char *const dkeys[] = {"mlp_ratio", "stochastic_depth_prob"};
    double *dst[] = {&w->mlp_ratio, &w->stochastic_depth}, hi[] = {64, 1};
    for (int k = 0; k < 2; k++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, dkeys[k]);
        if (!v || cJSON_IsNull(v)) continue;
        if (!cJSON_IsNumber(v) || !(v->valuedouble >= 0 && v->valuedouble <= hi[k]))
            return tb_fail(e, TUBELET_ERR_CONFIG, "%s: %s must be a number in [0, %g]", path,
                           dkeys[k], hi[k]);
        *dst[k] = v->valuedouble;
    }
    return TUBELET_OK;
}

/* Video Swin's stages must fit each other: as many head counts as depths, each stage's width a
 * multiple of its heads; patch and window sizes of three entries (checked when parsed). */
static int swin_check_config(tb_config *c, const char *path, tb_err *e) {
    const tb_swin_config *w = swin_cfg(c);
    int64_t blocks = 0;
    if (w->embed_dim > (1 << 16) >> (w->stages - 1))
        return tb_fail(e, TUBELET_ERR_CONFIG, "%s: embed_dim %d over %d stages gives a last width "
                       "of %lld, beyond any model", path, w->embed_dim, w->stages,
                       (long long)swin_width(c, w->stages - 1));
    for (int i = 0; i < w->stages; i++) {
        const int64_t C = swin_width(c, i);
        if (C % w->heads[i])
            return tb_fail(e, TUBELET_ERR_CONFIG, "%s: stage %d has width %lld (embed_dim %d x "
                           "2^%d), not divisible by its num_heads %d", path, i, (long long)C,
                           w->embed_dim, i, w->heads[i]);
        if (swin_mlp(c, C) < 1)
            return tb_fail(e, TUBELET_ERR_CONFIG, "%s: mlp_ratio %g leaves stage %d's MLP with "
                           "no width", path, w->mlp_ratio, i);
        blocks += w->depths[i];
    }
    /* tb_config's single-width fields describe the last stage */
    c->hidden = (int)swin_width(c, w->stages - 1), c->heads = w->heads[w->stages - 1];
    c->intermediate = (int)swin_mlp(c, c->hidden), c->layers = (int)blocks;
    c->act = TB_ACT_GELU, c->qkv_bias = 1;
    return TUBELET_OK;
}

static const char *swin_architecture(const tb_config *c) {
    (void)c;
    return "SwinTransformer3d";
}

static void swin_write_config(cJSON *j, const tb_config *c) {
    const tb_swin_config *w = swin_cfg(c);
    const int patch[3] = {c->tubelet_t, c->patch_h, c->patch_w};
    cJSON_AddNumberToObject(j, "num_channels", c->num_channels);
    cJSON_AddNumberToObject(j, "num_frames", c->num_frames);
    cJSON_AddItemToObject(j, "patch_size", cJSON_CreateIntArray(patch, 3));
    cJSON_AddNumberToObject(j, "embed_dim", w->embed_dim);
    cJSON_AddItemToObject(j, "depths", cJSON_CreateIntArray(w->depths, w->stages));
    cJSON_AddItemToObject(j, "num_heads", cJSON_CreateIntArray(w->heads, w->stages));
    cJSON_AddItemToObject(j, "window_size", cJSON_CreateIntArray(w->window, 3));
    cJSON_AddItemToObject(j, "mlp_ratio", tb_json_number(w->mlp_ratio));
    cJSON_AddItemToObject(j, "stochastic_depth_prob", tb_json_number(w->stochastic_depth));
    cJSON_AddNumberToObject(j, "layer_norm_eps", c->ln_eps);
    tb_cfg_write_dropout(j, c);
}

/* per stage: its blocks' products, then patch merging */
static double swin_weight_bytes(const tb_config *c) {
    double n = (double)c->num_channels * c->tubelet_t * c->patch_h * c->patch_w *
               swin_cfg(c)->embed_dim;
    for (int i = 0; i < swin_cfg(c)->stages; i++) {
        const double C = (double)swin_width(c, i);
        const double table = (2.0 * swin_cfg(c)->window[0] - 1) * (2.0 * swin_cfg(c)->window[1] - 1) *
                             (2.0 * swin_cfg(c)->window[2] - 1) * swin_cfg(c)->heads[i];
        const double mlp = 2 * C * (double)swin_mlp(c, (int64_t)C);
        n += swin_cfg(c)->depths[i] * (4 * C * C + mlp + table);
        if (i + 1 < swin_cfg(c)->stages) n += 8 * C * C;
    }
    return 4.0 * (n + (double)c->hidden * c->num_labels);
}

/* the paper's Table 1 (torchvision's swin3d_t, _s, _b; L as Swin-L: C = 192), patch 2x4x4,
 * window 8x7x7, at 32x224² */
static void preset_swin(tb_config *c, const char *name) {
    const char size = name[strlen(name) - 1];
    tb_swin_config *w = swin_cfg(c);
    const int deep = size != 't', mult = size == 'b' ? 4 : size == 'l' ? 6 : 3;
    w->embed_dim = size == 'b' ? 128 : size == 'l' ? 192 : 96;
    w->depths[2] = deep ? 18 : 6;
    for (int i = 0; i < 4; i++) w->heads[i] = mult << i;
    tb_err ignore = {{0}};
    swin_check_config(c, name, &ignore); /* the last stage's fields; the shapes fit */
}

static const tb_arch_preset swin_presets[] = {
    {"video-swin-t", preset_swin},
    {"video-swin-s", preset_swin},
    {"video-swin-b", preset_swin},
    {"video-swin-l", preset_swin},
    {NULL, NULL},
};

/* ---- initialisation from an image Swin (image_init.h; docs/video-swin.md) ---- */

/* An image Swin's config.json (SwinConfig's fields and defaults) against the Video Swin config c:
 * the blocks are copied one to one, so embed_dim, depths, heads, MLP width, channels, the
 * spatial patch and the spatial window must be the video model's. */
static int swin_image_open(tb_vit *v, const cJSON *j, const char *path, tb_config *c,
                           const tb_log *log, tb_err *e) {
    const tb_swin_config *sw = swin_cfg(c);
    int image[2] = {224, 224}, patch[2] = {4, 4}, depths[8] = {2, 2, 6, 2},
        heads[8] = {3, 6, 12, 24};
    int n_image = 1, n_patch = 1, n_depths = 4, n_heads = 4, embed = 96, rc;
    char a[96], b[96];
    if ((rc = tb_ii_json_ints(j, "image_size", image, 2, &n_image, path, e)) ||
        (rc = tb_ii_json_ints(j, "patch_size", patch, 2, &n_patch, path, e)) ||
        (rc = tb_ii_json_ints(j, "depths", depths, 8, &n_depths, path, e)) ||
        (rc = tb_ii_json_ints(j, "num_heads", heads, 8, &n_heads, path, e)) ||
        (rc = tb_ii_json_int(j, "embed_dim", 96, &embed, path, e)) ||
        (rc = tb_ii_json_int(j, "window_size", 7, &v->window, path, e)) ||
        (rc = tb_ii_json_int(j, "num_channels", 3, &v->channels, path, e)))
        return rc;
    if (n_image == 1) image[1] = image[0];
    if (n_patch == 1) patch[1] = patch[0];
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(j, "mlp_ratio");
    const double mlp_ratio = cJSON_IsNumber(it) ? it->valuedouble : 4.0;
    it = cJSON_GetObjectItemCaseSensitive(j, "layer_norm_eps");
    const double eps = cJSON_IsNumber(it) ? it->valuedouble : 1e-5;
    it = cJSON_GetObjectItemCaseSensitive(j, "qkv_bias");
    v->qkv_bias = it ? cJSON_IsTrue(it) : 1;
    it = cJSON_GetObjectItemCaseSensitive(j, "hidden_act");
    const char *act = cJSON_IsString(it) ? it->valuestring : "gelu";
    if (strcmp(act, "gelu"))
        return tb_fail(e, TUBELET_ERR_CONFIG, "%s: hidden_act '%.64s': Video Swin's MLP uses "
                       "GELU (\"gelu\")", path, act);
    if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "use_absolute_embeddings")))
        return tb_fail(e, TUBELET_ERR_CONFIG, "%s: use_absolute_embeddings is true, but Video "
                       "Swin has no absolute positions to take them", path);
#define SAME(what, img, vid)                                                                      \
    if ((img) != (vid))                                                                           \
        return tb_fail(e, TUBELET_ERR_SHAPE,                                                      \
                       "%s: %s %d of the image model differs from the video model's %d", path,    \
                       what, (int)(img), (int)(vid));
    SAME("embed_dim", embed, sw->embed_dim)
    SAME("num_channels", v->channels, c->num_channels)
    SAME("patch_size (height)", patch[0], c->patch_h)
    SAME("patch_size (width)", patch[1], c->patch_w)
#undef SAME
    if (v->window != sw->window[1] || v->window != sw->window[2])
        return tb_fail(e, TUBELET_ERR_SHAPE, "%s: window_size %d of the image model differs from "
                       "the video model's spatial window %dx%d (interpolating the relative "
                       "position bias table to another window is not supported: give the video "
                       "config window_size [t, %d, %d])", path, v->window, sw->window[1],
                       sw->window[2], v->window, v->window);
    int same = n_depths == sw->stages && n_heads == sw->stages;
    for (int i = 0; same && i < sw->stages; i++)
        same = depths[i] == sw->depths[i] && heads[i] == sw->heads[i];
    if (!same) {
        char c1[96], c2[96];
        return tb_fail(e, TUBELET_ERR_SHAPE, "%s: depths %s and num_heads %s of the image model "
                       "differ from the video model's %s and %s", path,
                       tb_ii_list_text(a, sizeof a, depths, n_depths),
                       tb_ii_list_text(b, sizeof b, heads, n_heads),
                       tb_ii_list_text(c1, sizeof c1, sw->depths, sw->stages),
                       tb_ii_list_text(c2, sizeof c2, sw->heads, sw->stages));
    }
    for (int i = 0; i < sw->stages; i++) {
        const int64_t C = swin_width(c, i);
        if ((int64_t)(mlp_ratio * (double)C) != swin_mlp(c, C))
            return tb_fail(e, TUBELET_ERR_SHAPE, "%s: mlp_ratio %g of the image model differs "
                           "from the video model's %g", path, mlp_ratio, sw->mlp_ratio);
    }
    /* transformers shrinks a block's window (and its table) to a stage grid smaller than it:
     * such a table has no place in Video Swin's one window per model */
    for (int i = 0, gh = (image[0] + patch[0] - 1) / patch[0],
             gw = (image[1] + patch[1] - 1) / patch[1];
         i < sw->stages; i++, gh = (gh + 1) / 2, gw = (gw + 1) / 2)
        if ((gh < gw ? gh : gw) < v->window)
            return tb_fail(e, TUBELET_ERR_SHAPE, "%s: at image_size %dx%d the image model's "
                           "stage %d has a %dx%d grid, smaller than window_size %d, so its "
                           "blocks use a smaller window and bias table there; Video Swin keeps "
                           "one window in every stage", path, image[0], image[1], i, gh, gw,
                           v->window);
    /* the weights were trained with the image model's epsilon */
    if (c->ln_eps != (float)eps)
        tb_warn(log, "%s: layer_norm_eps %g replaces the video config's %g", path, eps,
                (double)c->ln_eps);
    if ((float)eps != 1e-5f)
        tb_warn(log, "%s: the image model's patch and merging LayerNorms use 1e-5, the video "
                "model layer_norm_eps %g in every LayerNorm", path, eps);
    c->ln_eps = (float)eps;

    if ((rc = tb_weights_open(&v->w, v->dir, 1, e))) return rc;
    if (tb_weights_has(v->w, "swin.embeddings.patch_embeddings.projection.weight"))
        strcpy(v->prefix, "swin.");
    else if (tb_weights_has(v->w, "embeddings.patch_embeddings.projection.weight"))
        v->prefix[0] = 0;
    else
        return tb_fail(e, TUBELET_ERR_MISSING,
                       "%s/model.safetensors: no image-Swin tensors (neither "
                       "'swin.embeddings.patch_embeddings.projection.weight' nor "
                       "'embeddings.patch_embeddings.projection.weight')", v->dir);
    char name[128];
    snprintf(name, sizeof name, "%sencoder.layers.0.blocks.0.attention.q_proj.weight",
             v->prefix);
    v->new_names = tb_weights_has(v->w, name);
    v->swin = 1, v->hidden = embed, v->patch = patch[0];
    return TUBELET_OK;
}

/* ---- Video Swin <- image Swin (docs/video-swin.md, "Initialisation from an image Swin") ----
 * torchvision's names <- transformers' (legacy names, which save_pretrained writes, or
 * transformers 5's), as the official code's inflate_weights maps them:
 *   patch_embed.proj.weight (C0, 3, pt, ph, pw) <- embeddings.patch_embeddings.projection.weight
 *                                 (C0, 3, ph, pw) inflated: E / pt at every frame (or central)
 *   patch_embed.proj.bias, patch_embed.norm    <- embeddings.patch_embeddings.projection.bias,
 *                                                 embeddings.norm
 *   features.<2i>.<j>.                         <- encoder.layers.<i>.blocks.<j>. (swin_block_map;
 *                                                 attn.qkv: query, key, value stacked; the bias
 *                                                 table: the 2D one repeated over time)
 *   features.<2i+1>.norm, .reduction           <- encoder.layers.<i>.downsample.norm, .reduction
 *   norm                                       <- layernorm
 *   head                                       <- classifier (--keep-head; else random) */
static const struct {
    const char *to, *legacy, *fresh;
    char out, in; /* 'C': the stage's width, 'I': its MLP width, 0: a LayerNorm */
} swin_block_map[] = {
    {"norm1.", "layernorm_before.", "layernorm_before.", 'C', 0},
    {"attn.proj.", "attention.output.dense.", "attention.o_proj.", 'C', 'C'},
    {"norm2.", "layernorm_after.", "layernorm_after.", 'C', 0},
    {"mlp.0.", "intermediate.dense.", "mlp.fc1.", 'I', 'C'},
    {"mlp.3.", "output.dense.", "mlp.fc2.", 'C', 'I'},
};
static const char *const swin_qkv[2][3] = {
    {"attention.self.query.", "attention.self.key.", "attention.self.value."},
    {"attention.q_proj.", "attention.k_proj.", "attention.v_proj."}};
static const char *const swin_table[2] = {
    "attention.self.relative_position_bias_table",
    "attention.relative_position_bias.relative_position_bias_table"};

/* to + "attn.qkv." (3C, C) <- from + query, key, value stacked along the output (zero biases
 * when the image model has none: the same products). */
static int swin_copy_qkv(tb_vit *v, tubelet_model *m, const char *to, const char *from,
                         int64_t C, tb_err *e) {
    char t[256], f[256];
    float *w, *b;
    int rc;
    snprintf(t, sizeof t, "%sattn.qkv.weight", to);
    if ((rc = tb_ii_dst(m, t, 3 * C * C, &w, e))) return rc;
    snprintf(t, sizeof t, "%sattn.qkv.bias", to);
    if ((rc = tb_ii_dst(m, t, 3 * C, &b, e))) return rc;
    const int64_t ws[2] = {C, C}, bs[1] = {C};
    for (int k = 0; k < 3; k++) {
        const float *s;
        snprintf(f, sizeof f, "%s%sweight", from, swin_qkv[v->new_names][k]);
        if ((rc = tb_ii_src(v, f, 2, ws, &s, e))) return rc;
        memcpy(w + k * C * C, s, sizeof(float) * (size_t)(C * C));
        if (!v->qkv_bias) {
            memset(b + k * C, 0, sizeof(float) * (size_t)C);
            continue;
        }
        snprintf(f, sizeof f, "%s%sbias", from, swin_qkv[v->new_names][k]);
        if ((rc = tb_ii_src(v, f, 1, bs, &s, e))) return rc;
        memcpy(b + k * C, s, sizeof(float) * (size_t)C);
    }
    return TUBELET_OK;
}

/* to + "attn.relative_position_bias_table" ((2wd-1)(2w-1)(2w-1), heads) <- the image block's
 * ((2w-1)^2, heads) repeated for each of the 2wd-1 temporal offsets: the 3D row of offset
 * (dt, dy, dx) is dt (2w-1)^2 + the 2D row of (dy, dx) (plan_rel in video_swin.c), so every
 * temporal offset reads the image bias of its spatial offset (inflate_weights does the same). */
static int swin_copy_table(tb_vit *v, tubelet_model *m, const char *to, const char *from,
                           int64_t heads, tb_err *e) {
    const int64_t n2 = (int64_t)(2 * v->window - 1) * (2 * v->window - 1),
                  nt = 2 * (int64_t)swin_cfg(&m->cfg)->window[0] - 1;
    char t[256], f[256], full[300];
    snprintf(f, sizeof f, "%s%s", from, swin_table[v->new_names]);
    snprintf(full, sizeof full, "%s%s", v->prefix, f);
    const int64_t rows = tb_weights_rows(v->w, full);
    if (rows >= 0 && rows != n2)
        return tb_fail(e, TUBELET_ERR_SHAPE, "%s/model.safetensors: '%s' has %lld rows, but "
                       "window_size %d of its config.json needs (2*%d-1)^2 = %lld", v->dir, full,
                       (long long)rows, v->window, v->window, (long long)n2);
    const int64_t shape[2] = {n2, heads};
    const float *s;
    float *d;
    int rc;
    if ((rc = tb_ii_src(v, f, 2, shape, &s, e))) return rc;
    snprintf(t, sizeof t, "%sattn.relative_position_bias_table", to);
    if ((rc = tb_ii_dst(m, t, nt * n2 * heads, &d, e))) return rc;
    for (int64_t k = 0; k < nt; k++)
        memcpy(d + k * n2 * heads, s, sizeof(float) * (size_t)(n2 * heads));
    return TUBELET_OK;
}

static int swin_copy_blocks(tb_vit *v, tubelet_model *m, tb_err *e) {
    const tb_config *c = &m->cfg;
    char to[64], from[96], t[128], f[192];
    int rc;
    for (int i = 0; i < swin_cfg(c)->stages; i++) {
        const int64_t C = swin_width(c, i), I = swin_mlp(c, C);
        for (int j = 0; j < swin_cfg(c)->depths[i]; j++) {
            snprintf(to, sizeof to, "features.%d.%d.", 2 * i, j);
            snprintf(from, sizeof from, "encoder.layers.%d.blocks.%d.", i, j);
            for (size_t k = 0; k < sizeof swin_block_map / sizeof *swin_block_map; k++) {
                const int64_t out = swin_block_map[k].out == 'I' ? I : C,
                              in = !swin_block_map[k].in ? 0 : swin_block_map[k].in == 'I' ? I : C;
                snprintf(t, sizeof t, "%s%s", to, swin_block_map[k].to);
                snprintf(f, sizeof f, "%s%s", from,
                         v->new_names ? swin_block_map[k].fresh : swin_block_map[k].legacy);
                if ((rc = tb_ii_copy_wb(v, m, t, f, out, in, 1, e))) return rc;
            }
            if ((rc = swin_copy_qkv(v, m, to, from, C, e)) ||
                (rc = swin_copy_table(v, m, to, from, swin_cfg(c)->heads[i], e)))
                return rc;
        }
        if (i + 1 == swin_cfg(c)->stages) break;
        snprintf(t, sizeof t, "features.%d.norm.", 2 * i + 1);
        snprintf(f, sizeof f, "encoder.layers.%d.downsample.norm.", i);
        if ((rc = tb_ii_copy_wb(v, m, t, f, 4 * C, 0, 1, e))) return rc;
        snprintf(t, sizeof t, "features.%d.reduction.", 2 * i + 1);
        snprintf(f, sizeof f, "encoder.layers.%d.downsample.reduction.", i);
        if ((rc = tb_ii_copy_wb(v, m, t, f, 2 * C, 4 * C, 0, e))) return rc;
    }
    return TUBELET_OK;
}

static int swin_image_copy(tb_vit *v, tubelet_model *m, int inflate, int keep_head,
                           tb_err *e) {
    const tb_config *c = &m->cfg;
    const int64_t C0 = swin_cfg(c)->embed_dim, Cin = c->num_channels, tt = c->tubelet_t,
                  P = (int64_t)c->patch_h * c->patch_w;
    const int64_t ws[4] = {C0, Cin, c->patch_h, c->patch_w}, bs[1] = {C0};
    const float *E;
    float *w;
    int rc;
    if ((rc = tb_ii_src(v, "embeddings.patch_embeddings.projection.weight", 4, ws, &E, e)) ||
        (rc = tb_ii_dst(m, "patch_embed.proj.weight", C0 * Cin * tt * P, &w, e)))
        return rc;
    tb_ii_filter_over_time(w, E, C0 * Cin, tt, P, inflate);
    if ((rc = tb_ii_copy(v, m, "patch_embed.proj.bias", "embeddings.patch_embeddings.projection.bias",
                   1, bs, e)) ||
        (rc = tb_ii_copy_wb(v, m, "patch_embed.norm.", "embeddings.norm.", C0, 0, 1, e)) ||
        (rc = swin_copy_blocks(v, m, e)) ||
        (rc = tb_ii_copy_wb(v, m, "norm.", "layernorm.", c->hidden, 0, 1, e)) ||
        (keep_head && (rc = tb_ii_copy_head(v, m, "head.", e))))
        return rc;
    tb_weights_each_unused(v->w, tb_ii_report_unused, m);
    return TUBELET_OK;
}


const tb_family_ops tb_video_swin_family = {
    .id = TB_VIDEO_SWIN,
    .build = swin_build,
    .sequences = swin_sequences,
    .token_row = swin_token_row,
    .flop = swin_flop,
    .variant = swin_variant,
    .stages = swin_stages,
    .init_trunc = 2.0, /* torchvision's trunc_normal_(std=0.02) */
    .model = &swin_model,
    .model_type = "video_swin",
    .display_name = "Video Swin",
    .config_keys = video_swin_keys,
    .config_size = sizeof(tb_swin_config),
    .defaults = swin_defaults,
    .parse_config = swin_parse_config,
    .check_config = swin_check_config,
    .architecture = swin_architecture,
    .write_config = swin_write_config,
    .weight_bytes = swin_weight_bytes,
    .presets = swin_presets,
    .head_prefix = "head.",
    .inflate_by_default = 1,
    .image_model_type = "swin",
    .image_model_what = "an image Swin (Video Swin is initialised from a Hugging Face SwinModel or "
                        "SwinForImageClassification directory, model_type \"swin\")",
    .image_open = swin_image_open,
    .image_copy = swin_image_copy,
};
