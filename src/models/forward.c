/* The encoder the three families share: tubelet/patch embedding, pre-norm transformer blocks
 * whose attention runs over the family's token groups, and the classification head. */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../kernels/gemm.h"
#include "../kernels/ops.h"
#include "state.h"

/* ---- profiling: wall time per kind of work, only when asked for ---- */

static const char *const prof_names[PROF_N] = {
    "embed",     "layernorm",    "qkv",          "attention",      "attn_proj",
    "mlp_fc1",   "activation",   "mlp_fc2",      "other",          "loss+head",
    "bwd_embed", "bwd_layernorm", "bwd_qkv",     "bwd_attention",  "bwd_attn_proj",
    "bwd_mlp_fc1", "bwd_activation", "bwd_mlp_fc2", "bwd_other"};

/* Runs stmt, adding its wall time to s->prof_ms[cat] when profiling. */
#define PROF(s, cat, stmt)                                                                       \
    do {                                                                                         \
        double t0_ = (s)->profile ? omp_get_wtime() : 0;                                         \
        stmt;                                                                                    \
        if ((s)->profile) (s)->prof_ms[cat] += 1e3 * (omp_get_wtime() - t0_);                    \
    } while (0)

void tubelet_state_set_profiling(tubelet_state *s, int on) {
    s->profile = on;
    memset(s->prof_ms, 0, sizeof s->prof_ms);
}

int tubelet_state_profile(const tubelet_state *s, const char **names, double *ms, int max) {
    int n = 0;
    for (; n < PROF_N && n < max; n++) names[n] = prof_names[n], ms[n] = s->prof_ms[n];
    return n;
}

void tb_state_free_training(tubelet_state *s);

/* ---- planning ---- */

/* Makes stage k (its residual stream and sequence layout) the one the encoder blocks run over;
 * a block's one step over whole sequences follows it (ViViT Model 2's two encoders). */
static void enter_stage(tubelet_state *s, int k) {
    const tb_stage *st = &s->stages[k];
    s->stage = k, s->x = st->x;
    s->n_seq = st->n_seq, s->seq_len = st->seq_len, s->rows = st->rows;
    s->joint = (tb_grouping){st->n_seq, st->seq_len, NULL, NULL};
    if (s->n_steps == 1) s->step[0] = s->joint;
}

/* Frame t and spatial position n of the i-th patch row of a clip (the rows after its cls token):
 * TimeSformer orders them by position (row 1 + n T + t), ViViT Models 3 and 4 by frame (row
 * t N + n). */
static void patch_of_row(const tubelet_state *s, int64_t i, int64_t *t, int64_t *n) {
    const int64_t T = s->grid_t, N = s->grid_h * s->grid_w;
    if (s->m->cfg.family == TB_TIMESFORMER) *n = i / T, *t = i % T;
    else *t = i / N, *n = i % N;
}

/* Index tables of an attention step from its token sets (tb_attn_step) into *g, *rows, *start,
 * *weight (owned by the state): one group per (clip, non-empty group of the step), members in
 * row order — the clip's cls token (row 0 of the clip) first when it joins. Groups of one length
 * get no start offsets, groups of contiguous rows no index table. */
static int plan_step(tubelet_state *s, const tb_attn_step *st, tb_grouping *g, int32_t **rows_out,
                     int64_t **start_out, float **weight_out, tb_err *e) {
    const int64_t H = s->grid_h, W = s->grid_w, NT = s->n_patch, S = s->seq_len, K = st->n_groups;
    const int64_t first = tb_has_cls(&s->m->cfg); /* the clip's first patch row */
    int64_t *count = calloc((size_t)K + 1, sizeof(int64_t)), *id = calloc((size_t)K + 1, sizeof(int64_t));
    int32_t *key = malloc(sizeof(int32_t) * (size_t)NT); /* group key of clip row first + i */
    int rc = TUBELET_OK;
    if (!count || !id || !key) {
        rc = tb_fail(e, TUBELET_ERR_MEMORY, "out of memory planning attention groups");
        goto done;
    }
    for (int64_t i = 0; i < NT; i++) {
        int64_t t, n;
        patch_of_row(s, i, &t, &n);
        key[i] = (int32_t)st->group(t, n / W, n % W, H, W);
        count[key[i]]++;
    }
    int64_t G = 0, L = 0, per_clip = 0, ragged = 0;
    for (int64_t k = 0; k < K; k++) {
        if (!count[k]) continue;
        const int64_t len = count[k] + st->cls;
        ragged |= G > 0 && len != L;
        L = len > L ? len : L;
        id[k] = G++, per_clip += len;
    }
    int32_t *rows = malloc(sizeof(int32_t) * (size_t)(s->B * per_clip));
    int64_t *start = ragged ? malloc(sizeof(int64_t) * (size_t)(s->B * G + 1)) : NULL;
    float *weight = st->cls ? malloc(sizeof(float) * (size_t)s->rows) : NULL;
    int64_t *fill = malloc(sizeof(int64_t) * (size_t)G);
    *rows_out = rows, *start_out = start, *weight_out = weight;
    if (!rows || (ragged && !start) || (st->cls && !weight) || !fill) {
        free(fill);
        rc = tb_fail(e, TUBELET_ERR_MEMORY, "out of memory planning attention groups");
        goto done;
    }
    for (int64_t b = 0; b < s->B; b++) {
        for (int64_t k = 0, at = b * per_clip; k < K; k++) { /* each group's first member */
            if (!count[k]) continue;
            fill[id[k]] = at;
            if (start) start[b * G + id[k]] = at;
            at += count[k] + st->cls;
        }
        if (st->cls)
            for (int64_t k = 0; k < G; k++) rows[fill[k]++] = (int32_t)(b * S);
        for (int64_t i = 0; i < NT; i++) rows[fill[id[key[i]]]++] = (int32_t)(b * S + first + i);
    }
    if (start) start[s->B * G] = s->B * per_clip;
    /* the cls token is in all G groups of its clip: its update is the mean of the G outputs */
    for (int64_t r = 0; weight && r < s->rows; r++) weight[r] = r % S == 0 ? 1.0f / (float)G : 1;
    int64_t contiguous = !start && s->B * per_clip == s->rows; /* ViViT's frames: rows in order */
    for (int64_t i = 0; contiguous && i < s->rows; i++) contiguous = rows[i] == i;
    if (contiguous) free(rows), *rows_out = rows = NULL;
    *g = (tb_grouping){s->B * G, L, rows, start};
    free(fill);
done:
    free(count), free(id), free(key);
    return rc;
}

/* The groups of every attention step of a block: TimeSformer's divided, axial and local_global
 * schemes (timesformer.c) and ViViT Model 3 (vivit.c) have token sets, every other model one
 * attention over each whole sequence — ViViT Model 4's with its heads split over two token sets. */
static int plan_groupings(tubelet_state *s, tb_err *e) {
    const tb_config *c = &s->m->cfg;
    tb_attn_step st[TB_MAX_STEPS];
    s->joint = (tb_grouping){s->n_seq, s->seq_len, NULL, NULL};
    s->n_steps = c->family == TB_TIMESFORMER ? tb_timesformer_steps(c->attn, s->grid_t, s->grid_h, s->grid_w, st)
                 : c->family == TB_VIVIT ? tb_vivit_token_sets(c->vivit_model, s->grid_t, s->grid_h, s->grid_w, st)
                                         : 0;
    for (int k = 0; k < s->n_steps; k++) {
        int rc = plan_step(s, &st[k], &s->step[k], &s->step_rows[k], &s->step_start[k],
                           &s->step_weight[k], e);
        if (rc) return rc;
        s->step_kind[k] = st[k].kind;
    }
    if (tb_is_vivit(c, TB_VIVIT_M4)) { /* the token sets are the heads' groups, not steps */
        s->split_heads = 1, s->head_group[0] = s->step[0], s->head_group[1] = s->step[1];
        s->n_steps = 0;
    }
    if (!s->n_steps) s->n_steps = 1, s->step[0] = s->joint, s->step_kind[0] = TB_STEP_MAIN;
    return TUBELET_OK;
}

/* The longest group any attention of the model runs over (it sizes the kernels' scratch). */
static int64_t max_group_len(const tubelet_state *s) {
    int64_t L = 0;
    for (int k = 0; k < s->n_steps; k++) L = s->step[k].group_len > L ? s->step[k].group_len : L;
    for (int j = 0; s->split_heads && j < 2; j++)
        L = s->head_group[j].group_len > L ? s->head_group[j].group_len : L;
    for (int j = 1; j < s->n_stages; j++) /* the later encoders' whole sequences */
        L = s->stages[j].seq_len > L ? s->stages[j].seq_len : L;
    return L;
}

static int check_input_shape(const tubelet_model *m, int B, int T, int H, int W, tb_err *e) {
    const tb_config *c = &m->cfg;
    if (B < 1 || T < 1 || H < 1 || W < 1 || B > 4096 || T > 65536 || H > 16384 || W > 16384)
        return tb_fail(e, TUBELET_ERR_SHAPE, "input shape (%d, %d, %d, %d, %d) is out of range",
                       B, T, c->num_channels, H, W);
    if (T < c->tubelet_t || H < c->patch_h || W < c->patch_w)
        return tb_fail(e, TUBELET_ERR_SHAPE,
                       "input of %d frames of %dx%d is smaller than one %dx%dx%d patch", T, H, W,
                       c->tubelet_t, c->patch_h, c->patch_w);
    /* other sizes than config.json's are allowed: positions are resized (positions.c) */
    return TUBELET_OK;
}

static int64_t max3(int64_t a, int64_t b, int64_t c) {
    const int64_t ab = a > b ? a : b;
    return ab > c ? ab : c;
}

/* Reduced precision: the state's primitives and scratch, sized by the largest M K, N and N K of
 * a linear layer. */
static int lowp_context(tubelet_state *s, int64_t patch_in, int64_t group_rows, tb_err *e) {
    const tb_config *c = &s->m->cfg;
    const int64_t D = c->hidden, I = c->intermediate, labels = c->num_labels;
    const int64_t max_mk = s->m->precision == TB_PREC_FP32
                               ? 0 /* f32 activations go in as they are */
                               : max3(s->B * s->n_patch * patch_in, s->rows * I, group_rows * D);
    const int64_t max_n = max3(3 * D, I, labels);
    const int64_t max_nk = max3(D * patch_in, (3 * D > I ? 3 * D : I) * D, labels * D);
    return tb_lowp_ctx_new(&s->lowp, s->m->engine, s->m->lowp_native, max_mk, max_n, max_nk, e);
}

int tubelet_state_new(tubelet_state **out, tubelet_model *m, int B, int T, int H, int W,
                      char *err, size_t errlen) {
    tb_err e = {{0}};
    *out = NULL;
    int rc = check_input_shape(m, B, T, H, W, &e);
    tubelet_state *s = rc ? NULL : calloc(1, sizeof *s);
    if (!rc && !s) rc = tb_fail(&e, TUBELET_ERR_MEMORY, "out of memory");
    if (rc) {
        if (err && errlen) snprintf(err, errlen, "%s", e.msg);
        return rc;
    }
    const tb_config *c = &m->cfg;
    const int64_t D = c->hidden, I = c->intermediate;
    s->m = m, s->B = B, s->T = T, s->H = H, s->W = W;
    /* tubelet_model_set_threads may raise the count later: the per-thread scratch is sized for
     * the most threads this state will run with (tb_state_threads) */
    s->max_threads = m->n_threads > omp_get_num_procs() ? m->n_threads : omp_get_num_procs();
    s->grid_t = tb_grid_t(c, T), s->grid_h = tb_grid_h(c, H), s->grid_w = tb_grid_w(c, W);
    s->n_patch = s->grid_t * s->grid_h * s->grid_w;
    const int64_t N = s->grid_h * s->grid_w;
    int64_t group_rows;
    /* one sequence per frame (TimeSformer space_only, ViViT Model 2's spatial encoder, each with
     * a cls token), or per clip, with a cls token unless VideoMAE or ViViT Models 3, 4 */
    if ((c->family == TB_TIMESFORMER && c->attn == TB_ATTN_SPACE) || tb_is_vivit(c, TB_VIVIT_M2))
        s->n_seq = (int64_t)B * s->grid_t, s->seq_len = N + 1;
    else s->n_seq = B, s->seq_len = s->n_patch + tb_has_cls(c);
    s->rows = s->n_seq * s->seq_len;
    s->stages[0] = (tb_stage){NULL, s->n_seq, s->seq_len, s->rows};
    s->n_stages = 1;
    if (tb_is_vivit(c, TB_VIVIT_M2)) /* the temporal encoder: [cls_t; frames] per clip */
        s->stages[1] = (tb_stage){NULL, B, s->grid_t + 1, (int64_t)B * (s->grid_t + 1)}, s->n_stages = 2;
    if ((rc = plan_groupings(s, &e)) || (rc = tb_state_positions(s, &e))) goto fail;
    /* the largest step: group-major rows (shared cls rows repeat) */
    group_rows = s->rows; /* the MLP's dropout and drop path use s->p for every row */
    for (int k = 0; k < s->n_steps; k++) {
        const int64_t gr = tb_group_members(&s->step[k]);
        group_rows = gr > group_rows ? gr : group_rows;
    }
    const int64_t max_len = max_group_len(s);

    const int64_t patch_in = (int64_t)c->num_channels * c->tubelet_t * c->patch_h * c->patch_w;
    const int64_t sizes[] = {
        B * s->n_patch * patch_in, B * s->n_patch * D, s->rows * D, s->rows * D,
        s->rows * 3 * D,           group_rows * D,     group_rows * D, group_rows * D,
        s->rows * I,               s->n_seq * D,
        tb_attention_scratch_floats(max_len, c->hidden / c->heads, s->max_threads),
        s->n_stages > 1 ? s->stages[1].rows * D : 0};
    float **bufs[] = {&s->patches, &s->emb, &s->x,   &s->a,      &s->qkv,     &s->o,
                      &s->p,       &s->p2,  &s->mlp, &s->pooled, &s->scratch, &s->stages[1].x};
    size_t total = 0;
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++)
        total += ((size_t)sizes[i] + 15) & ~(size_t)15; /* keep every buffer 64-byte aligned */
    s->arena = tb_alloc(total * sizeof(float));
    if (!s->arena) {
        rc = tb_fail(&e, TUBELET_ERR_MEMORY, "out of memory: the activations need %.1f MB",
                     total * 4.0 / 1e6);
        goto fail;
    }
    s->arena_floats = total;
    float *p = s->arena;
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
        *bufs[i] = p;
        p += ((size_t)sizes[i] + 15) & ~(size_t)15;
    }
    s->stages[0].x = s->x;
    enter_stage(s, 0);
    if (m->packed && (rc = lowp_context(s, patch_in, group_rows, &e)))
        goto fail;
    *out = s;
    return TUBELET_OK;
fail:
    if (err && errlen) snprintf(err, errlen, "%s", e.msg);
    tubelet_state_free(s);
    return rc;
}

void tubelet_state_free(tubelet_state *s) {
    if (!s) return;
    tb_state_free_training(s);
    tb_free(s->arena);
    tb_free(s->pos_owned);
    tb_lowp_ctx_free(s->lowp);
    for (int k = 0; k < TB_MAX_STEPS; k++)
        free(s->step_rows[k]), free(s->step_start[k]), free(s->step_weight[k]);
    free(s);
}

int tubelet_state_matches(const tubelet_state *s, int B, int T, int H, int W) {
    return s->B == B && s->T == T && s->H == H && s->W == W;
}

size_t tubelet_state_bytes(const tubelet_state *s) {
    return (s->arena_floats + (s->train ? s->train->arena_floats : 0)) * sizeof(float);
}

/* The last encoder's sequences are what the head and last_hidden_state see. */
void tubelet_state_hidden_shape(const tubelet_state *s, tubelet_shape *sh) {
    const tb_stage *st = &s->stages[s->n_stages - 1];
    *sh = (tubelet_shape){3, {st->n_seq, st->seq_len, s->m->cfg.hidden}};
}

void tubelet_state_logits_shape(const tubelet_state *s, tubelet_shape *sh) {
    int n = s->m->cfg.num_labels > 0 ? s->m->cfg.num_labels : s->m->cfg.hidden;
    *sh = (tubelet_shape){2, {s->stages[s->n_stages - 1].n_seq, n}};
}

/* ---- embedding ---- */

/* Cuts the clip into non-overlapping t x ph x pw tubelets (2D patches when t = 1), one row per
 * tubelet in (clip, time, row, column) order, laid out (channel, dt, dy, dx) like the Conv3d
 * kernel, so that the convolution with stride = kernel is a single GEMM. Pixels beyond the last
 * whole patch are dropped, as the convolution drops them. */
static void tubelet_patchify(tubelet_state *s, const float *pix) {
    const tb_config *c = &s->m->cfg;
    const int64_t C = c->num_channels, t = c->tubelet_t, ph = c->patch_h, pw = c->patch_w;
    const int64_t H = s->H, W = s->W, T = s->T, K = C * t * ph * pw;
#pragma omp parallel for collapse(2) schedule(static)
    for (int64_t b = 0; b < s->B; b++)
        for (int64_t it = 0; it < s->grid_t; it++)
            for (int64_t iy = 0; iy < s->grid_h; iy++)
                for (int64_t ix = 0; ix < s->grid_w; ix++) {
                    float *row = s->patches + (((b * s->grid_t + it) * s->grid_h + iy) * s->grid_w + ix) * K;
                    for (int64_t ch = 0; ch < C; ch++)
                        for (int64_t dt = 0; dt < t; dt++)
                            for (int64_t dy = 0; dy < ph; dy++)
                                memcpy(row + ((ch * t + dt) * ph + dy) * pw,
                                       pix + (((b * T + it * t + dt) * C + ch) * H + iy * ph + dy) * W +
                                           ix * pw,
                                       sizeof(float) * (size_t)pw);
                }
}

static void tubelet_embed(tubelet_state *s, const float *pix) {
    const tb_config *c = &s->m->cfg;
    const int64_t K = (int64_t)c->num_channels * c->tubelet_t * c->patch_h * c->patch_w;
    PROF(s, PROF_EMBED, tubelet_patchify(s, pix));
    const tb_lin patch = {s->m->w.patch_w, s->m->w.patch_b, s->m->w.patch_q};
    PROF(s, PROF_EMBED, tb_lin_apply(s->lowp, s->emb, c->hidden, s->patches, &patch, patch.b,
                                     s->B * s->n_patch, c->hidden, K, 0));
    switch (c->family) {
    case TB_VIDEOMAE: tb_videomae_tokens(s); break;
    case TB_VIVIT: tb_vivit_tokens(s); break;
    case TB_TIMESFORMER: tb_timesformer_tokens(s); break;
    }
}

/* ---- encoder ---- */

/* x[row] += weight[row] * src[i] for each group member i (group-major src). Columns are split
 * across threads so that rows shared by several groups (cls) are never written concurrently. */
static void scatter_add(float *x, const float *src, const tb_grouping *g, const float *weight,
                        int64_t D) {
    const int64_t n = tb_group_members(g);
#pragma omp parallel
    {
        int nt = omp_get_num_threads(), id = omp_get_thread_num();
        int64_t d0 = D * id / nt, d1 = D * (id + 1) / nt;
        for (int64_t i = 0; i < n; i++) {
            int64_t r = g->rows[i];
            float w = weight ? weight[r] : 1.0f;
            for (int64_t d = d0; d < d1; d++) x[r * D + d] += w * src[i * D + d];
        }
    }
}

/* dst[i] = weight[row] * x[row] for each group member i: the backward of scatter_add. */
static void gather_rows(float *dst, const float *x, const tb_grouping *g, const float *weight,
                        int64_t D) {
    const int64_t n = tb_group_members(g);
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i++) {
        int64_t r = g->rows[i];
        float w = weight ? weight[r] : 1.0f;
        for (int64_t d = 0; d < D; d++) dst[i * D + d] = w * x[r * D + d];
    }
}

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

/* Group-major rows of x scaled by keep[their group] (drop path: one draw per group or sequence). */
static void scale_rows(float *x, const float *keep, const tb_grouping *g, int64_t D) {
    const int64_t rows = tb_group_members(g);
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; r++) {
        const float k = keep[group_of(g, r)];
        for (int64_t d = 0; d < D; d++) x[r * D + d] *= k;
    }
}

/* x += keep(row's group) * y over the members of contiguous groups; keep NULL: x += y */
static void add_scaled_rows(float *x, const float *y, const float *keep, const tb_grouping *g,
                            int64_t D) {
    const int64_t rows = tb_group_members(g);
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; r++) {
        const float k = keep ? keep[group_of(g, r)] : 1.0f;
        for (int64_t d = 0; d < D; d++) x[r * D + d] += k * y[r * D + d];
    }
}

/* Dropout sites of each kind of attention step: its output dense, its probabilities. */
static const int out_site[] = {TB_DROP_ATTN_OUT, TB_DROP_ATTN_T_OUT, TB_DROP_ATTN_W_OUT};
static const int probs_site[] = {TB_DROP_PROBS, TB_DROP_PROBS_T, TB_DROP_PROBS_W};

/* ---- dropout (training only; masks keyed by the step, the layer and the site) ---- */

static uint64_t dropout_key(const tubelet_state *s, int layer, int site) {
    return tb_hash(tb_hash(s->train->dropout_key, (uint64_t)(layer + 1)), (uint64_t)site);
}

int tb_state_hidden_dropout_on(const tubelet_state *s) {
    return s->train && s->train->active && s->train->hidden_dropout > 0;
}

void tb_state_dropout(const tubelet_state *s, int layer, int site, float *x, int64_t n,
                      int64_t first) {
    if (!tb_state_hidden_dropout_on(s)) return;
    tb_dropout(x, n, dropout_key(s, layer, site), first,
               tb_keep_rule_make(s->train->hidden_dropout));
}

/* Dropout of the attention probabilities of one attention, or NULL when off. */
static const tb_attn_dropout *probs_dropout(const tubelet_state *s, tb_attn_dropout *d,
                                            attn_bufs bf) {
    if (!s->train || !s->train->active || !(s->train->attn_dropout > 0)) return NULL;
    d->p = s->train->attn_dropout;
    d->key = dropout_key(s, bf.layer, probs_site[bf.kind]);
    return d;
}

/* y = x W^T + b [+ y]: one linear layer in the model's precision (tb_lin_apply). */
static void linear(tubelet_state *s, float *y, int64_t ldy, const float *x, const tb_lin *l,
                   int64_t M, int64_t N, int64_t K, int accumulate) {
    tb_lin_apply(s->lowp, y, ldy, x, l, l->b, M, N, K, accumulate);
}

/* Scaled dot-product attention of q, k, v (row stride 3 D) over the grouping, in the model's
 * precision: bf16 operands for reduced-precision inference where the CPU has AVX512-BF16. */
static void attention(tubelet_state *s, float *out, const float *q, const float *k,
                      const float *v, const tb_grouping *g, int heads,
                      const tb_attn_dropout *drop) {
    const tb_config *c = &s->m->cfg;
    const int hd = c->hidden / c->heads;
    if (s->m->attn_bf16 && !drop)
        tb_attention_forward_bf16(out, q, k, v, 3 * c->hidden, g, heads, hd, s->scratch,
                                  tb_state_threads(s));
    else
        tb_attention_forward(out, q, k, v, 3 * c->hidden, g, heads, hd, s->scratch,
                             tb_state_threads(s), drop);
}

static void factorised_dot_product_attention(tubelet_state *s, attn_bufs bf);
static void factorised_dot_product_attention_backward(tubelet_state *s, float *dqkv, attn_bufs bf,
                                                      const float *dO);

/* x += Attention(a) over the grouping: q, k, v projections of every row, scaled dot-product
 * attention per group and head, output projection; `extra` is a second projection applied after
 * it (TimeSformer's temporal_dense). Rows in several groups (the cls token) add their outputs
 * with weight row_weight. In training: dropout on the probabilities and after the output
 * projection, then drop path, as Hugging Face orders them. */
static void self_attention(tubelet_state *s, const tb_mha *at, const tb_grouping *g,
                           const tb_lin *extra, const float *row_weight, attn_bufs bf) {
    const tb_config *c = &s->m->cfg;
    const int64_t D = c->hidden, R = s->rows, GR = tb_group_members(g);
    tb_attn_dropout pd;
    const tb_attn_dropout *probs = probs_dropout(s, &pd, bf);
    const int drop = tb_state_hidden_dropout_on(s);
    const int site = out_site[bf.kind];
    if (at->qkv.q) { /* reduced precision: q, k, v in one */
        PROF(s, PROF_QKV, linear(s, bf.qkv, 3 * D, s->a, &at->qkv, R, 3 * D, D, 0));
    } else {
        PROF(s, PROF_QKV, linear(s, bf.qkv, 3 * D, s->a, &at->q, R, D, D, 0));
        PROF(s, PROF_QKV, linear(s, bf.qkv + D, 3 * D, s->a, &at->k, R, D, D, 0));
        PROF(s, PROF_QKV, linear(s, bf.qkv + 2 * D, 3 * D, s->a, &at->v, R, D, D, 0));
    }
    if (s->split_heads) /* ViViT Model 4: its own groups per half of the heads */
        PROF(s, PROF_ATTN, factorised_dot_product_attention(s, bf));
    else
        PROF(s, PROF_ATTN, attention(s, bf.o, bf.qkv, bf.qkv + D, bf.qkv + 2 * D, g, c->heads,
                                     probs));
    if (!g->rows && !bf.keep && !drop && !bf.lambda) { /* group-major = row order: straight into
                                                           the residual */
        PROF(s, PROF_PROJ, linear(s, s->x, D, bf.o, &at->o, R, D, D, 1));
        return;
    }
    PROF(s, PROF_PROJ, linear(s, bf.p, D, bf.o, &at->o, GR, D, D, 0));
    tb_state_dropout(s, bf.layer, site, bf.p, GR * D, 0);
    if (!g->rows) { /* drop path, dropout or layer scale on: x += keep * lambda * projection */
        if (bf.lambda) PROF(s, PROF_OTHER, tb_scale_cols(bf.p, bf.lambda, GR, D));
        add_scaled_rows(s->x, bf.p, bf.keep, g, D);
        return;
    }
    /* drop path acts on the projected output, before temporal_dense, as Hugging Face does */
    if (bf.keep) scale_rows(bf.p, bf.keep, g, D);
    const float *src = bf.p;
    if (extra) {
        PROF(s, PROF_PROJ, linear(s, s->p2, D, bf.p, extra, GR, D, D, 0));
        src = s->p2;
    }
    PROF(s, PROF_OTHER, scatter_add(s->x, src, g, row_weight, D));
}

/* Backward of a pre-norm attention sub-layer x_out = x_in + Attention(LN(x_in)):
 * dx holds dL/dx_out on entry and dL/dx_in on return; weight gradients are added to ga, gln,
 * gextra. */
static void self_attention_backward(tubelet_state *s, const tb_mha *at, const tb_ln *ln,
                                    const tb_grouping *g, const tb_lin *extra,
                                    const float *row_weight, const float *x_in, attn_bufs bf,
                                    const tb_mha *ga, const tb_ln *gln, const tb_lin *gextra) {
    const tb_config *c = &s->m->cfg;
    const int64_t D = c->hidden, R = s->rows, GR = tb_group_members(g);
    tubelet_train *tr = s->train;
    float *dx = tr->dx, *dP = tr->dp, *dO = tr->d_o;
    tb_attn_dropout pd;
    const tb_attn_dropout *probs = probs_dropout(s, &pd, bf);
    const int drop = tb_state_hidden_dropout_on(s);
    const int site = out_site[bf.kind];
    if (g->rows) {
        PROF(s, PROF_B_OTHER, gather_rows(extra ? tr->dp2 : dP, dx, g, row_weight, D));
        if (extra) /* P2 = P Wd^T + bd */
            PROF(s, PROF_B_PROJ, tb_linear_backward(dP, D, (float *)gextra->w, (float *)gextra->b,
                                                    tr->dp2, D, bf.p, D, extra->w, GR, D, D, 0));
        if (bf.keep) scale_rows(dP, bf.keep, g, D);
        tb_state_dropout(s, bf.layer, site, dP, GR * D, 0);
    } else if (bf.keep || drop || bf.lambda) {
        memcpy(dP, dx, sizeof(float) * (size_t)(R * D));
        if (bf.keep) scale_rows(dP, bf.keep, g, D);
        if (bf.lambda) { /* the projection (after dropout) the layer scale saw, computed again */
            tb_linear(tr->dp2, D, bf.o, at->o.w, at->o.b, R, D, D, 0);
            tb_state_dropout(s, bf.layer, site, tr->dp2, R * D, 0);
            tb_scale_cols_backward(dP, bf.dlambda, tr->dp2, bf.lambda, R, D);
        }
        tb_state_dropout(s, bf.layer, site, dP, R * D, 0);
    } else {
        dP = dx; /* contiguous groups: the projection wrote straight into the rows */
    }
    PROF(s, PROF_B_PROJ, tb_linear_backward(dO, D, (float *)ga->o.w, (float *)ga->o.b, dP, D,
                                            bf.o, D, at->o.w, GR, D, D, 0));
    float *dqkv = g->rows ? tr->dqkv_g : tr->dqkv;
    if (s->split_heads)
        PROF(s, PROF_B_ATTN, factorised_dot_product_attention_backward(s, dqkv, bf, dO));
    else
        PROF(s, PROF_B_ATTN,
             tb_attention_backward(dqkv, dqkv + D, dqkv + 2 * D, 3 * D, bf.qkv, bf.qkv + D,
                                   bf.qkv + 2 * D, 3 * D, bf.o, dO, g, c->heads,
                                   c->hidden / c->heads, tr->scratch, tb_state_threads(s), probs));
    if (g->rows) {
        PROF(s, PROF_B_OTHER, memset(tr->dqkv, 0, sizeof(float) * (size_t)(R * 3 * D));
             scatter_add(tr->dqkv, tr->dqkv_g, g, NULL, 3 * D));
    }
    /* q, k, v = LN(x_in) W^T + b: recompute the normalised input, then da = sum dW-products */
    PROF(s, PROF_B_NORM, tb_layernorm(s->a, D, x_in, D, ln->w, ln->b, R, D, ln->eps));
    const tb_lin *fw[3] = {&at->q, &at->k, &at->v}, *gw[3] = {&ga->q, &ga->k, &ga->v};
    for (int i = 0; i < 3; i++)
        PROF(s, PROF_B_QKV, tb_linear_backward(tr->da, D, (float *)gw[i]->w, (float *)gw[i]->b,
                                               tr->dqkv + i * D, 3 * D, s->a, D, fw[i]->w, R, D,
                                               D, i > 0));
    PROF(s, PROF_B_NORM, tb_layernorm_backward(dx, tr->da, x_in, ln->w, (float *)gln->w,
                                               (float *)gln->b, R, D, ln->eps));
}

/* ViViT Model 4, factorised dot-product attention (eqs. 7-9): the heads [0, H/2) attend with
 * K_s, V_s over the tokens of their frame (s->head_group[0]), the heads [H/2, H) with K_t, V_t
 * over the tokens of their spatial position (s->head_group[1]); o = Concat(Y_s, Y_t) in row order,
 * for the one output projection that follows. Each half is the grouped kernel with H/2 heads on
 * its columns of q, k, v; its output, D/2 wide and group-major, goes into its half of o. The
 * spatial groups are contiguous rows (group-major = row order), the temporal ones have a table. */
static void factorised_dot_product_attention(tubelet_state *s, attn_bufs bf) {
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
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < R; i++) {
        memcpy(bf.o + i * D, ys + i * D2, sizeof(float) * (size_t)D2);
        memcpy(bf.o + rows[i] * D + D2, yt + i * D2, sizeof(float) * (size_t)D2);
    }
}

/* Its backward: dO = dL/do (R, D, row order) → dqkv (R, 3D, row order), each half through the
 * kernel's backward on its own columns. */
static void factorised_dot_product_attention_backward(tubelet_state *s, float *dqkv, attn_bufs bf,
                                                      const float *dO) {
    const tb_config *c = &s->m->cfg;
    tubelet_train *tr = s->train;
    const int64_t D = c->hidden, D2 = D / 2, R = s->rows;
    const int H2 = c->heads / 2, hd = c->hidden / c->heads;
    const float *q = bf.qkv, *k = bf.qkv + D, *v = bf.qkv + 2 * D;
    tb_attn_dropout pd_s, pd_t;
    const attn_bufs in_space = {.layer = bf.layer, .kind = TB_STEP_MAIN},
                    in_time = {.layer = bf.layer, .kind = TB_STEP_TEMPORAL_OR_LOCAL};
    const tb_attn_dropout *drop_s = probs_dropout(s, &pd_s, in_space),
                          *drop_t = probs_dropout(s, &pd_t, in_time);
    float *o = tr->dp, *d_o = tr->dp2, *dt = tr->dqkv_g; /* (R, D/2), (R, D/2), (R, 3D/2) */
    const int32_t *rows = s->head_group[1].rows;
    /* spatial heads: their groups are contiguous rows, so dq, dk, dv land in place */
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < R; i++) {
        memcpy(o + i * D2, bf.o + i * D, sizeof(float) * (size_t)D2);
        memcpy(d_o + i * D2, dO + i * D, sizeof(float) * (size_t)D2);
    }
    tb_attention_backward(dqkv, dqkv + D, dqkv + 2 * D, 3 * D, q, k, v, 3 * D, o, d_o,
                          &s->head_group[0], H2, hd, tr->scratch, tb_state_threads(s), drop_s);
    /* temporal heads: gathered group-major, their gradients scattered back to the rows */
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < R; i++) {
        memcpy(o + i * D2, bf.o + rows[i] * D + D2, sizeof(float) * (size_t)D2);
        memcpy(d_o + i * D2, dO + rows[i] * D + D2, sizeof(float) * (size_t)D2);
    }
    tb_attention_backward(dt, dt + D2, dt + D, 3 * D2, q + D2, k + D2, v + D2, 3 * D, o, d_o,
                          &s->head_group[1], H2, hd, tr->scratch, tb_state_threads(s), drop_t);
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < R; i++)
        for (int j = 0; j < 3; j++)
            memcpy(dqkv + rows[i] * 3 * D + j * D + D2, dt + i * 3 * D2 + j * D2,
                   sizeof(float) * (size_t)D2);
}

/* TimeSformer's intermediate drops after the activation; VideoMAE's has no dropout, and
 * transformers 5's VivitMLP none either (4.x's VivitIntermediate had one). */
static int drops_after_act(const tubelet_state *s) { return s->m->cfg.family == TB_TIMESFORMER; }

/* x += fc2(act(fc1(LN(x)))); h (if not NULL) keeps fc1's output before the activation.
 * In training: dropout after the activation (TimeSformer) and after fc2, then drop path. */
static void mlp(tubelet_state *s, int l, const tb_block *b, float *h, const float *keep) {
    const tb_config *c = &s->m->cfg;
    const int64_t D = c->hidden, I = c->intermediate, R = s->rows;
    PROF(s, PROF_NORM, tb_layernorm(s->a, D, s->x, D, b->ln2.w, b->ln2.b, R, D, b->ln2.eps));
    if (h) {
        PROF(s, PROF_FC1, linear(s, h, I, s->a, &b->fc1, R, I, D, 0));
        PROF(s, PROF_ACT, memcpy(s->mlp, h, sizeof(float) * (size_t)(R * I));
             tb_bias_act(s->mlp, NULL, R, I, c->act));
        if (drops_after_act(s)) tb_state_dropout(s, l, TB_DROP_MLP_ACT, s->mlp, R * I, 0);
    } else {
        PROF(s, PROF_FC1, tb_lin_apply_act(s->lowp, s->mlp, s->a, &b->fc1, R, I, D, c->act));
    }
    if (keep || tb_state_hidden_dropout_on(s) || b->ls2) { /* dropout, layer scale, drop path
                                                             (one draw per sequence) */
        PROF(s, PROF_FC2, linear(s, s->p, D, s->mlp, &b->fc2, R, D, I, 0));
        tb_state_dropout(s, l, TB_DROP_MLP_OUT, s->p, R * D, 0);
        if (b->ls2) PROF(s, PROF_OTHER, tb_scale_cols(s->p, b->ls2, R, D));
        add_scaled_rows(s->x, s->p, keep, &s->joint, D);
        return;
    }
    PROF(s, PROF_FC2, linear(s, s->x, D, s->mlp, &b->fc2, R, D, I, 1));
}

/* Backward of x_out = x_mid + MLP(LN(x_mid)); dx: dL/dx_out in, dL/dx_mid out. */
static void mlp_backward(tubelet_state *s, int l, const tb_block *b, const tb_block *gb,
                         const float *x_mid, const float *h, const float *keep) {
    const tb_config *c = &s->m->cfg;
    const int64_t D = c->hidden, I = c->intermediate, R = s->rows;
    tubelet_train *tr = s->train;
    const int act_drop = drops_after_act(s);
    PROF(s, PROF_B_NORM, tb_layernorm(s->a, D, x_mid, D, b->ln2.w, b->ln2.b, R, D, b->ln2.eps));
    PROF(s, PROF_B_ACT, memcpy(s->mlp, h, sizeof(float) * (size_t)(R * I));
         tb_bias_act(s->mlp, NULL, R, I, c->act));
    if (act_drop) tb_state_dropout(s, l, TB_DROP_MLP_ACT, s->mlp, R * I, 0); /* fc2's input */
    const float *dy = tr->dx;
    if (keep || tb_state_hidden_dropout_on(s) || b->ls2) {
        memcpy(tr->dp, tr->dx, sizeof(float) * (size_t)(R * D));
        if (keep) scale_rows(tr->dp, keep, &s->joint, D);
        if (b->ls2) { /* fc2's output (after dropout) the layer scale saw, computed again */
            tb_linear(tr->dp2, D, s->mlp, b->fc2.w, b->fc2.b, R, D, I, 0);
            tb_state_dropout(s, l, TB_DROP_MLP_OUT, tr->dp2, R * D, 0);
            tb_scale_cols_backward(tr->dp, (float *)gb->ls2, tr->dp2, b->ls2, R, D);
        }
        tb_state_dropout(s, l, TB_DROP_MLP_OUT, tr->dp, R * D, 0);
        dy = tr->dp;
    }
    PROF(s, PROF_B_FC2, tb_linear_backward(tr->dmlp, I, (float *)gb->fc2.w, (float *)gb->fc2.b,
                                           dy, D, s->mlp, I, b->fc2.w, R, D, I, 0));
    if (act_drop) tb_state_dropout(s, l, TB_DROP_MLP_ACT, tr->dmlp, R * I, 0);
    PROF(s, PROF_B_ACT, tb_act_backward(tr->dmlp, h, R, I, c->act));
    PROF(s, PROF_B_FC1, tb_linear_backward(tr->da, D, (float *)gb->fc1.w, (float *)gb->fc1.b,
                                           tr->dmlp, I, s->a, D, b->fc1.w, R, I, D, 0));
    PROF(s, PROF_B_NORM, tb_layernorm_backward(tr->dx, tr->da, x_mid, b->ln2.w,
                                               (float *)gb->ln2.w, (float *)gb->ln2.b, R, D,
                                               b->ln2.eps));
}

/* The weights of one kind of attention step in a block (or in its gradients). */
typedef struct {
    const tb_ln *ln;
    const tb_mha *at;
    const tb_lin *dense; /* NULL: none */
} step_weights;

/* A model's blocks all have the same parts: block 0 says whether a step has a dense layer
 * (TimeSformer's temporal_dense yes, ViViT Model 3's temporal step no). */
static step_weights step_weights_of(const tb_block *b, tb_step_kind kind) {
    switch (kind) {
    case TB_STEP_TEMPORAL_OR_LOCAL:
        return (step_weights){&b->ln_t, &b->attn_t,
                              b->dense_t.w || b->dense_t.q ? &b->dense_t : NULL};
    case TB_STEP_WIDTH: return (step_weights){&b->ln_w, &b->attn_w, &b->dense_w};
    default: return (step_weights){&b->ln1, &b->attn, NULL};
    }
}

/* Attention step k of block l: x += dense(Attention(LN(x))) over the step's groups (s->step[k]:
 * TimeSformer's time, space, width, height, local or global groups, ViViT Model 3's space and
 * time groups; whole sequences otherwise).
 * In training its input, q|k|v, output and projection are kept in s->train->layer[l]. */
static void attention_step(tubelet_state *s, int l, int k) {
    const tb_step_kind kind = s->step_kind[k];
    const step_weights w = step_weights_of(&s->m->w.blocks[l], kind);
    const int64_t D = s->m->cfg.hidden, R = s->rows;
    tb_layer_acts *a = s->train ? &s->train->layer[l] : NULL;
    const int on = a && s->train->active;
    if (a && k > 0) memcpy(a->x_step[k], s->x, sizeof(float) * (size_t)(R * D));
    PROF(s, PROF_NORM, tb_layernorm(s->a, D, s->x, D, w.ln->w, w.ln->b, R, D, w.ln->eps));
    const float *lambda = kind == TB_STEP_MAIN ? s->m->w.blocks[l].ls1 : NULL;
    self_attention(s, w.at, &s->step[k], w.dense, s->step_weight[k],
                   a ? (attn_bufs){a->qkv[k], a->o[k], w.dense ? a->p[k] : s->p,
                                   on ? a->keep[k] : NULL, l, kind, lambda, NULL}
                     : (attn_bufs){s->qkv, s->o, s->p, NULL, l, kind, lambda, NULL});
}

/* Backward of attention step k: dL/d(its output) in s->train->dx → dL/d(its input). */
static void attention_step_backward(tubelet_state *s, int l, int k) {
    const tb_step_kind kind = s->step_kind[k];
    const step_weights w = step_weights_of(&s->m->w.blocks[l], kind);
    const step_weights gw = step_weights_of(&s->m->g.blocks[l], kind);
    tb_layer_acts *a = &s->train->layer[l];
    const int main_step = kind == TB_STEP_MAIN;
    self_attention_backward(s, w.at, w.ln, &s->step[k], w.dense, s->step_weight[k],
                            k ? a->x_step[k] : a->x_in,
                            (attn_bufs){a->qkv[k], a->o[k], w.dense ? a->p[k] : NULL, a->keep[k],
                                        l, kind, main_step ? s->m->w.blocks[l].ls1 : NULL,
                                        main_step ? (float *)s->m->g.blocks[l].ls1 : NULL},
                            gw.at, gw.ln, gw.dense);
}

/* One encoder block: its attention steps in order — one over each sequence (VideoMAE, ViViT
 * Models 1, 2 and 4, TimeSformer joint and space_only); TimeSformer divided: time, space
 * (eq. 6-8); axial: time, width, height; local_global: local, global (Fig. 1); ViViT Model 3:
 * space, time (eqs. 4-5) — then the MLP. In training, what its
 * backward needs is kept in s->train->layer[l]; drop path and dropout act only while a training
 * step runs (s->train->active). */
static void encoder_block(tubelet_state *s, int l) {
    const tb_block *b = &s->m->w.blocks[l];
    const int64_t D = s->m->cfg.hidden, R = s->rows;
    tb_layer_acts *a = s->train ? &s->train->layer[l] : NULL;
    const int on = a && s->train->active;
    if (a) memcpy(a->x_in, s->x, sizeof(float) * (size_t)(R * D));
    for (int k = 0; k < s->n_steps; k++) attention_step(s, l, k);
    if (a) memcpy(a->x_mid, s->x, sizeof(float) * (size_t)(R * D));
    mlp(s, l, b, a ? a->h : NULL, on ? a->keep_mlp : NULL);
}

static void encoder_block_backward(tubelet_state *s, int l) {
    const tb_block *b = &s->m->w.blocks[l], *gb = &s->m->g.blocks[l];
    tb_layer_acts *a = &s->train->layer[l];
    mlp_backward(s, l, b, gb, a->x_mid, a->h, a->keep_mlp);
    for (int k = s->n_steps - 1; k >= 0; k--) attention_step_backward(s, l, k);
}

/* ---- head ---- */

/* out (n_seq, D) = the mean of each sequence's L rows of x. */
static void mean_tokens(float *out, const float *x, int64_t n_seq, int64_t L, int64_t D) {
    for (int64_t i = 0; i < n_seq; i++)
        for (int64_t d = 0; d < D; d++) {
            double acc = 0;
            for (int64_t j = 0; j < L; j++) acc += x[(i * L + j) * D + d];
            out[i * D + d] = (float)(acc / (double)L);
        }
}

/* last_hidden_state, then the pooled vector per sequence and the classifier. */
static const float *head(tubelet_state *s, float *logits) {
    const tubelet_model *m = s->m;
    const int64_t D = m->cfg.hidden, L = s->seq_len;
    const float *hidden = s->x;
    if (m->has_final_ln) {
        tb_layernorm(s->a, D, s->x, D, m->w.final_ln.w, m->w.final_ln.b, s->rows, D, m->w.final_ln.eps);
        hidden = s->a;
    }
    if (!logits) return hidden;
    if (m->has_fc_norm) { /* VideoMAE: mean over tokens, then fc_norm */
        float *mean = s->mlp;
        mean_tokens(mean, hidden, s->n_seq, L, D);
        tb_layernorm(s->pooled, D, mean, D, m->w.fc_norm.w, m->w.fc_norm.b, s->n_seq, D,
                     m->w.fc_norm.eps);
    } else if (m->mean_pool) { /* ViViT Models 3, 4: global average pooling */
        mean_tokens(s->pooled, hidden, s->n_seq, L, D);
    } else { /* token 0: the cls token (the first patch for VideoMAE without mean pooling) */
        for (int64_t i = 0; i < s->n_seq; i++)
            memcpy(s->pooled + i * D, hidden + i * L * D, sizeof(float) * (size_t)D);
    }
    if (m->w.head.w || m->w.head.q)
        linear(s, logits, m->cfg.num_labels, s->pooled, &m->w.head, s->n_seq, m->cfg.num_labels,
               D, 0);
    else
        memcpy(logits, s->pooled, sizeof(float) * (size_t)(s->n_seq * D));
    return hidden;
}

/* Backward of the head: dL/dlogits (train->dlogits) → dL/dx of the last block's output. */
static void head_backward(tubelet_state *s) {
    const tubelet_model *m = s->m;
    const tb_weightset *w = &m->w, *g = &m->g;
    tubelet_train *tr = s->train;
    const int64_t D = m->cfg.hidden, L = s->seq_len, R = s->rows, NL = m->cfg.num_labels;
    const float *x = tr->x_final, *hidden = x;
    if (m->has_final_ln) {
        tb_layernorm(s->a, D, x, D, w->final_ln.w, w->final_ln.b, R, D, w->final_ln.eps);
        hidden = s->a;
    }
    if (w->head.w)
        tb_linear_backward(tr->dpooled, D, (float *)g->head.w, (float *)g->head.b, tr->dlogits,
                           NL, s->pooled, D, w->head.w, s->n_seq, NL, D, 0);
    else
        memcpy(tr->dpooled, tr->dlogits, sizeof(float) * (size_t)(s->n_seq * D));
    memset(tr->da, 0, sizeof(float) * (size_t)(R * D));
    if (m->has_fc_norm || m->mean_pool) { /* pooled = [fc_norm](mean of the tokens) */
        const float *dmean = tr->dpooled;
        if (m->has_fc_norm) {
            float *mean = s->mlp;
            mean_tokens(mean, hidden, s->n_seq, L, D);
            memset(tr->dp, 0, sizeof(float) * (size_t)(s->n_seq * D));
            tb_layernorm_backward(tr->dp, tr->dpooled, mean, w->fc_norm.w, (float *)g->fc_norm.w,
                                  (float *)g->fc_norm.b, s->n_seq, D, w->fc_norm.eps);
            dmean = tr->dp;
        }
        for (int64_t i = 0; i < s->n_seq; i++)
            for (int64_t j = 0; j < L; j++)
                for (int64_t d = 0; d < D; d++)
                    tr->da[(i * L + j) * D + d] = dmean[i * D + d] / (float)L;
    } else { /* token 0 */
        for (int64_t i = 0; i < s->n_seq; i++)
            memcpy(tr->da + i * L * D, tr->dpooled + i * D, sizeof(float) * (size_t)D);
    }
    if (m->has_final_ln) {
        memset(tr->dx, 0, sizeof(float) * (size_t)(R * D));
        tb_layernorm_backward(tr->dx, tr->da, x, w->final_ln.w, (float *)g->final_ln.w,
                              (float *)g->final_ln.b, R, D, w->final_ln.eps);
    } else {
        memcpy(tr->dx, tr->da, sizeof(float) * (size_t)(R * D));
    }
}

/* Backward of the embedding: cls, positions and time embeddings (family files), then the
 * tubelet projection, whose input (the patches) is still in the arena. */
static void tubelet_embed_backward(tubelet_state *s) {
    const tubelet_model *m = s->m;
    const tb_config *c = &m->cfg;
    tubelet_train *tr = s->train;
    const int64_t D = c->hidden, K = (int64_t)c->num_channels * c->tubelet_t * c->patch_h * c->patch_w;
    switch (c->family) {
    case TB_VIDEOMAE: tb_videomae_tokens_backward(s, tr->dx, tr->demb); break;
    case TB_VIVIT: tb_vivit_tokens_backward(s, tr->dx, tr->demb); break;
    case TB_TIMESFORMER: tb_timesformer_tokens_backward(s, tr->dx, tr->demb); break;
    }
    tb_linear_backward(NULL, 0, (float *)m->g.patch_w, (float *)m->g.patch_b, tr->demb, D,
                       s->patches, K, m->w.patch_w, s->B * s->n_patch, D, K, 0);
}

static int check_pixels(const tubelet_state *s, const float *pix, char *err, size_t errlen) {
    const int64_t n = (int64_t)s->B * s->T * s->m->cfg.num_channels * s->H * s->W;
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(pix[i])) {
            if (err && errlen)
                snprintf(err, errlen, "input holds a non-finite value (%g) at flat index %lld",
                         (double)pix[i], (long long)i);
            return TUBELET_ERR_VALUE;
        }
    return TUBELET_OK;
}

/* ViViT Model 2, factorised encoder: the spatial encoder (blocks 0 .. L_s - 1) over each frame's
 * sequence, the frame representations h_i = LN(z_cls^{L_s}), and the temporal encoder (blocks
 * L_s .. L_s + L_t - 1) over [cls_t; h_1 .. h_{n_t}] + p_t of each clip. */
static void factorised_encoder(tubelet_state *s) {
    const int Ls = s->m->cfg.layers, nb = tb_n_blocks(&s->m->cfg);
    for (int l = 0; l < Ls; l++) encoder_block(s, l);
    PROF(s, PROF_OTHER, tb_vivit_temporal_tokens(s, s->x, s->stages[1].x,
                                                 s->train ? s->train->frames : NULL));
    enter_stage(s, 1);
    for (int l = Ls; l < nb; l++) encoder_block(s, l);
}

/* Its backward between the encoders, when the backward pass reaches the spatial encoder's last
 * block: dL/d(temporal encoder input) in tr->dx → dL/d(spatial encoder output) in tr->dx. */
static void factorised_encoder_backward(tubelet_state *s) {
    tubelet_train *tr = s->train;
    memcpy(tr->da, tr->dx, sizeof(float) * (size_t)(s->rows * s->m->cfg.hidden));
    enter_stage(s, 0);
    tb_vivit_temporal_tokens_backward(s, tr->da, tr->frames, tr->dframes, tr->dx);
}

/* Embedding and the first n_layers blocks (all of them for ViViT Model 2). */
static void encode(tubelet_state *s, const float *pix, int n_layers) {
    omp_set_num_threads(tb_state_threads(s));
    enter_stage(s, 0);
    tubelet_embed(s, pix);
    if (s->n_stages > 1) {
        factorised_encoder(s);
        return;
    }
    for (int l = 0; l < n_layers; l++) encoder_block(s, l);
}

/* Backward of every block (tr->dx: dL/d of the last block's output in, dL/d of the tokens out);
 * with checkpointing, each block's forward runs again first, from its kept input. */
static void encoder_backward(tubelet_state *s) {
    const tb_config *c = &s->m->cfg;
    tubelet_train *tr = s->train;
    for (int l = tb_n_blocks(c) - 1; l >= 0; l--) {
        if (s->stage == 1 && l < c->layers) factorised_encoder_backward(s);
        if (tr->checkpoint) { /* recompute what the block's backward needs */
            memcpy(s->x, tr->layer[l].x_in, sizeof(float) * (size_t)(s->rows * c->hidden));
            encoder_block(s, l);
        }
        encoder_block_backward(s, l);
    }
    if (s->stage == 1) factorised_encoder_backward(s); /* a spatial encoder of 0 blocks */
}

/* The status of a pass whose products all ran without reporting: a packed product that failed
 * (tb_qlinear) left NaN in its output and its status in the context. */
static int pass_status(tubelet_state *s, char *err, size_t errlen) {
    const int rc = tb_lowp_ctx_status(s->lowp);
    if (rc && err && errlen)
        snprintf(err, errlen, "oneDNN could not make or run the product of a linear layer (%s "
                 "weights): the outputs are not valid", tubelet_precision_name(s->m->precision));
    return rc;
}

int tubelet_forward(tubelet_state *s, const float *pix, float *logits, float *hidden, char *err,
                    size_t errlen) {
    const tb_config *c = &s->m->cfg;
    int rc = check_pixels(s, pix, err, errlen);
    if (rc) return rc;
    encode(s, pix, c->layers);
    const float *h;
    PROF(s, PROF_OTHER, h = head(s, logits));
    if (hidden) memcpy(hidden, h, sizeof(float) * (size_t)(s->rows * c->hidden));
    return pass_status(s, err, errlen);
}

int tubelet_forward_hidden(tubelet_state *s, const float *pix, int layer, float *hidden,
                           char *err, size_t errlen) {
    const tb_config *c = &s->m->cfg;
    if (layer < -1 || layer > c->layers) {
        if (err && errlen)
            snprintf(err, errlen, "layer %d does not exist (the model has layers 0..%d; -1 = last "
                     "hidden state)", layer, c->layers);
        return TUBELET_ERR_ARG;
    }
    if (layer >= 0 && s->n_stages > 1) {
        if (err && errlen)
            snprintf(err, errlen, "per-block features of ViViT Model 2 (factorised encoder) are "
                     "not supported: its blocks run on per-frame sequences (use layer -1, the "
                     "last hidden state)");
        return TUBELET_ERR_UNSUPPORTED;
    }
    int rc = check_pixels(s, pix, err, errlen);
    if (rc) return rc;
    encode(s, pix, layer < 0 ? c->layers : layer);
    const float *h = layer < 0 ? head(s, NULL) : s->x;
    memcpy(hidden, h, sizeof(float) * (size_t)(s->rows * c->hidden));
    return pass_status(s, err, errlen);
}

void tubelet_state_feature_shape(const tubelet_state *s, tubelet_shape *sh) {
    *sh = (tubelet_shape){5, {s->B, s->m->cfg.hidden, s->grid_t, s->grid_h, s->grid_w}};
}

int tubelet_forward_features(tubelet_state *s, const float *pix, int n_levels, const int *layers,
                             float *const *out, char *err, size_t errlen) {
    const tb_config *c = &s->m->cfg;
    int deepest = 0, last_hidden = !layers; /* blocks to run; a level wants last_hidden_state */
    if (n_levels < 1 || n_levels > 64 || !out) {
        if (err && errlen) snprintf(err, errlen, "%d feature levels (1 to 64, each with an output "
                                    "buffer)", n_levels);
        return TUBELET_ERR_ARG;
    }
    if (s->n_stages > 1) {
        if (err && errlen)
            snprintf(err, errlen, "ViViT Model 2 (factorised encoder) has no patch-token feature "
                     "maps: its last hidden state holds frame tokens");
        return TUBELET_ERR_UNSUPPORTED;
    }
    for (int i = 0; i < n_levels; i++) {
        const int L = layers ? layers[i] : -1;
        if (L < -1 || L > c->layers || !out[i]) {
            if (err && errlen && !out[i]) snprintf(err, errlen, "feature level %d: no buffer", i);
            else if (err && errlen)
                snprintf(err, errlen, "feature level %d: layer %d does not exist (the model has "
                         "layers 0..%d; -1 = last hidden state)", i, L, c->layers);
            return TUBELET_ERR_ARG;
        }
        deepest = L < 0 ? c->layers : L > deepest ? L : deepest;
        last_hidden |= L < 0;
    }
    int rc = check_pixels(s, pix, err, errlen);
    if (rc) return rc;
    encode(s, pix, 0);
    for (int l = 0; l <= deepest; l++) {
        for (int i = 0; layers && i < n_levels; i++)
            if (layers[i] == l) tubelet_feature_map(s, s->x, out[i]);
        if (l < deepest) encoder_block(s, l);
    }
    if (last_hidden) {
        const float *h = head(s, NULL);
        for (int i = 0; i < n_levels; i++)
            if (!layers || layers[i] < 0) tubelet_feature_map(s, h, out[i]);
    }
    return pass_status(s, err, errlen);
}

void tubelet_state_grid(const tubelet_state *s, int *t, int *h, int *w) {
    *t = (int)s->grid_t, *h = (int)s->grid_h, *w = (int)s->grid_w;
}

int tubelet_state_has_cls(const tubelet_state *s) { return tb_has_cls(&s->m->cfg); }

/* Row of patch token (clip b, time it, row iy, column ix) in the hidden-state layout. */
static int64_t token_row(const tubelet_state *s, int64_t b, int64_t it, int64_t iy, int64_t ix) {
    const int64_t N = s->grid_h * s->grid_w, n = iy * s->grid_w + ix;
    switch (s->m->cfg.family) {
    case TB_VIDEOMAE: return b * s->n_patch + (it * s->grid_h + iy) * s->grid_w + ix;
    case TB_VIVIT: /* Models 1, 3, 4 (Model 2's hidden state holds frame tokens only) */
        return b * (s->n_patch + tb_has_cls(&s->m->cfg)) + tb_has_cls(&s->m->cfg) +
               (it * s->grid_h + iy) * s->grid_w + ix;
    case TB_TIMESFORMER:
        if (s->m->cfg.attn == TB_ATTN_SPACE) return (b * s->grid_t + it) * (N + 1) + 1 + n;
        return b * (1 + N * s->grid_t) + 1 + n * s->grid_t + it;
    }
    return 0;
}

void tubelet_feature_map(const tubelet_state *s, const float *hidden, float *out) {
    const int64_t D = s->m->cfg.hidden, T = s->grid_t, H = s->grid_h, W = s->grid_w;
    if (s->n_stages > 1) { /* ViViT Model 2: no patch tokens in the last hidden state */
        memset(out, 0, sizeof(float) * (size_t)(s->B * D * T * H * W));
        return;
    }
    for (int64_t b = 0; b < s->B; b++)
        for (int64_t it = 0; it < T; it++)
            for (int64_t iy = 0; iy < H; iy++)
                for (int64_t ix = 0; ix < W; ix++) {
                    const float *row = hidden + token_row(s, b, it, iy, ix) * D;
                    float *o = out + b * D * T * H * W + (it * H + iy) * W + ix;
                    for (int64_t d = 0; d < D; d++) o[d * T * H * W] = row[d];
                }
}

int tubelet_pool(const tubelet_state *s, const float *hidden, int mode, float *out) {
    const int64_t D = s->m->cfg.hidden, T = s->grid_t, H = s->grid_h, W = s->grid_w;
    if (mode != TUBELET_POOL_CLS && mode != TUBELET_POOL_MEAN) return TUBELET_ERR_ARG;
    if (mode == TUBELET_POOL_CLS && !tb_has_cls(&s->m->cfg)) return TUBELET_ERR_ARG;
    if (s->n_stages > 1) { /* ViViT Model 2: the temporal cls token, or the mean of the frames' */
        for (int64_t b = 0; b < s->B; b++) {
            const float *h = hidden + b * (T + 1) * D;
            for (int64_t d = 0; d < D; d++) {
                double acc = 0;
                for (int64_t t = 0; t < T; t++) acc += h[(1 + t) * D + d];
                out[b * D + d] = mode == TUBELET_POOL_CLS ? h[d] : (float)(acc / (double)T);
            }
        }
        return TUBELET_OK;
    }
    for (int64_t b = 0; b < s->B; b++) {
        float *o = out + b * D;
        if (mode == TUBELET_POOL_CLS) { /* the cls token (of the first frame for space_only) */
            memcpy(o, hidden + token_row(s, b, 0, 0, 0) * D - D, sizeof(float) * (size_t)D);
            continue;
        }
        /* one column at a time: no buffer to allocate (nor to fail), the same sums */
        for (int64_t d = 0; d < D; d++) {
            double acc = 0;
            for (int64_t it = 0; it < T; it++)
                for (int64_t iy = 0; iy < H; iy++)
                    for (int64_t ix = 0; ix < W; ix++)
                        acc += hidden[token_row(s, b, it, iy, ix) * D + d];
            o[d] = (float)(acc / (double)(T * H * W));
        }
    }
    return TUBELET_OK;
}

/* ---- training ---- */

int tubelet_state_enable_training(tubelet_state *s, int checkpoint_blocks, char *err,
                                  size_t errlen) {
    const tubelet_model *m = s->m;
    const tb_config *c = &m->cfg;
    tb_err e = {{0}};
    int rc = TUBELET_OK;
    if (s->train) return TUBELET_OK;
    if (!m->grad_arena)
        rc = tb_fail(&e, TUBELET_ERR_ARG, "enable the model's gradients first "
                                          "(tubelet_model_enable_grads)");
    else if (s->pos_owned)
        rc = tb_fail(&e, TUBELET_ERR_UNSUPPORTED, "training needs the input size of config.json "
                                                  "(%d frames of %dx%d)", c->num_frames,
                     c->image_h, c->image_w);
    if (rc) {
        if (err && errlen) snprintf(err, errlen, "%s", e.msg);
        return rc;
    }
    /* every buffer sized for stage 0, the largest (ViViT Model 2's temporal encoder has fewer
     * rows and sequences than its spatial one) */
    enter_stage(s, 0);
    const int64_t D = c->hidden, I = c->intermediate, R = s->rows, NL = c->num_labels > 0 ? c->num_labels : D;
    const int nb = tb_n_blocks(c);
    /* per layer: x_in, x_mid, h, then per attention step x_step (k > 0), qkv, o, p (with a dense) */
    enum { PER_STEP = 4, N_PER = 3 + PER_STEP * TB_MAX_STEPS };
    int64_t per_layer[N_PER] = {R * D, R * D, R * I}, gr_max = R, keep_floats = s->n_seq;
    for (int k = 0; k < s->n_steps; k++) {
        const tb_grouping *g = &s->step[k];
        const int64_t gr = tb_group_members(g);
        int64_t *f = per_layer + 3 + PER_STEP * k;
        f[0] = k ? R * D : 0, f[1] = R * 3 * D, f[2] = gr * D;
        f[3] = step_weights_of(&m->w.blocks[0], s->step_kind[k]).dense ? gr * D : 0;
        gr_max = gr > gr_max ? gr : gr_max;
        keep_floats += g->n_groups;
    }
    const int64_t n_frames = s->n_stages > 1 ? s->B * s->grid_t * D : 0; /* ViViT Model 2 */
    const int64_t shared[] = {R * D, R * D, R * D, R * 3 * D, gr_max * 3 * D, gr_max * D,
                              gr_max * D, gr_max * D, R * I, s->B * s->n_patch * D,
                              s->n_seq * NL, s->n_seq * D,
                              tb_attention_backward_scratch_floats(max_group_len(s),
                                                                   c->hidden / c->heads,
                                                                   s->max_threads),
                              n_frames, n_frames};
    enum { N_SHARED = sizeof shared / sizeof *shared };
    /* with checkpointing, each block keeps only its input; the rest lives in one shared set
     * that the backward pass refills by running the block's forward again */
    const size_t kept = checkpoint_blocks ? 1 : (size_t)nb;
    size_t total = (((size_t)per_layer[0] + 15) & ~(size_t)15) * (size_t)nb;
    for (int i = 1; i < N_PER; i++) total += (((size_t)per_layer[i] + 15) & ~(size_t)15) * kept;
    for (int i = 0; i < N_SHARED; i++) total += ((size_t)shared[i] + 15) & ~(size_t)15;
    tubelet_train *tr = calloc(1, sizeof *tr);
    if (tr) tr->layer = calloc((size_t)(nb ? nb : 1), sizeof(tb_layer_acts));
    if (tr && tr->layer) tr->arena = tb_alloc(sizeof(float) * total);
    if (!tr || !tr->layer || !tr->arena) {
        if (tr) free(tr->layer);
        free(tr);
        if (err && errlen)
            snprintf(err, errlen, "out of memory: training needs %.1f MB of activations",
                     total * 4.0 / 1e6);
        return TUBELET_ERR_MEMORY;
    }
    tr->arena_floats = total;
    float *p = tr->arena;
#define CARVE(ptr, n) (ptr = (n) ? p : NULL, p += ((size_t)(n) + 15) & ~(size_t)15)
    for (int l = 0; l < nb; l++) {
        tb_layer_acts *a = &tr->layer[l];
        float **f[N_PER] = {&a->x_in, &a->x_mid, &a->h};
        for (int k = 0; k < TB_MAX_STEPS; k++) {
            float ***fk = f + 3 + PER_STEP * k;
            fk[0] = &a->x_step[k], fk[1] = &a->qkv[k], fk[2] = &a->o[k], fk[3] = &a->p[k];
        }
        if (checkpoint_blocks && l > 0) { /* share layer 0's buffers, keep an own input */
            *a = tr->layer[0];
            CARVE(a->x_in, per_layer[0]);
            continue;
        }
        for (int i = 0; i < N_PER; i++) CARVE(*f[i], per_layer[i]);
    }
    tr->checkpoint = checkpoint_blocks;
    tr->keep_arena = calloc((size_t)(nb ? nb : 1) * (size_t)keep_floats + 1, sizeof(float));
    if (!tr->keep_arena) {
        tb_free(tr->arena), free(tr->layer), free(tr);
        if (err && errlen) snprintf(err, errlen, "out of memory");
        return TUBELET_ERR_MEMORY;
    }
    float **f[N_SHARED] = {&tr->x_final, &tr->dx,      &tr->da,       &tr->dqkv,   &tr->dqkv_g,
                           &tr->d_o,     &tr->dp,      &tr->dp2,      &tr->dmlp,   &tr->demb,
                           &tr->dlogits, &tr->dpooled, &tr->scratch,  &tr->frames, &tr->dframes};
    for (int i = 0; i < N_SHARED; i++) CARVE(*f[i], shared[i]);
#undef CARVE
    s->train = tr;
    return TUBELET_OK;
}

void tubelet_state_set_drop_path(tubelet_state *s, float rate, uint64_t seed, int64_t step) {
    if (!s->train) return;
    s->train->drop_path = rate, s->train->dp_seed = seed, s->train->dp_step = step;
}

void tubelet_state_set_dropout(tubelet_state *s, float hidden_p, float attn_p, uint64_t seed,
                               int64_t step) {
    if (!s->train) return;
    tubelet_train *tr = s->train;
    tr->hidden_dropout = hidden_p > 0 && hidden_p <= 1 ? hidden_p : 0;
    tr->attn_dropout = attn_p > 0 && attn_p <= 1 ? attn_p : 0;
    /* "dropout" in ASCII separates these keys from any other use of the seed */
    tr->dropout_key = tb_hash(tb_hash(seed, 0x64726f706f7574ull), (uint64_t)step);
}

static uint64_t dp_hash(uint64_t a, uint64_t b, uint64_t c) {
    uint64_t z = a * 0x9E3779B97F4A7C15ull ^ (b + 0x632BE59BD9B4E019ull) * 0xBF58476D1CE4E5B9ull ^ c;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Drop path (stochastic depth) masks of this step, one draw per group of each attention and per
 * sequence of each MLP — the first dimension of the tensors Hugging Face drops — at the linear
 * per-depth rate r l / (L - 1); a function of (seed, step, layer, index) only, so resumes repeat
 * them. Layers at rate 0 get no mask. */
static void draw_drop_path(tubelet_state *s) {
    tubelet_train *tr = s->train;
    const tb_config *c = &s->m->cfg;
    float *p = tr->keep_arena;
    /* draw streams: 0 the main attention, 1 the first step, 2 the MLP, 3 the width step */
    static const int stream[] = {[TB_STEP_MAIN] = 0, [TB_STEP_TEMPORAL_OR_LOCAL] = 1,
                                 [TB_STEP_WIDTH] = 3};
    for (int l = 0; l < tb_n_blocks(c); l++) {
        tb_layer_acts *a = &tr->layer[l];
        /* ViViT Model 2: each encoder has its own depth rule (its blocks 0 .. L_k - 1) and its
         * own sequences, which its blocks' one step attends over */
        const int temporal = l >= c->layers, L = temporal ? c->temporal_layers : c->layers,
                  li = temporal ? l - c->layers : l;
        const int64_t n_seq = s->stages[temporal].n_seq;
        const double rate = L > 1 ? tr->drop_path * li / (L - 1) : 0;
        float **dst[TB_MAX_STEPS + 1];
        int64_t n[TB_MAX_STEPS + 1];
        int str[TB_MAX_STEPS + 1];
        for (int k = 0; k < s->n_steps; k++)
            dst[k] = &a->keep[k], n[k] = s->n_stages > 1 ? n_seq : s->step[k].n_groups,
            str[k] = stream[s->step_kind[k]];
        dst[s->n_steps] = &a->keep_mlp, n[s->n_steps] = n_seq, str[s->n_steps] = 2;
        for (int k = 0; k <= s->n_steps; k++) {
            *dst[k] = NULL;
            if (rate <= 0) continue;
            const float keep = (float)(1.0 / (1.0 - rate));
            *dst[k] = p;
            for (int64_t i = 0; i < n[k]; i++) {
                uint64_t h = dp_hash(tr->dp_seed, (uint64_t)tr->dp_step,
                                     (uint64_t)(l * 4 + str[k]) << 32 | (uint64_t)i);
                p[i] = (double)(h >> 11) / 9007199254740992.0 < 1.0 - rate ? keep : 0.0f;
            }
            p += n[k];
        }
    }
}

void tubelet_state_set_label_smoothing(tubelet_state *s, float eps) {
    if (s->train) s->train->label_smoothing = eps;
}

void tb_state_free_training(tubelet_state *s) {
    if (!s->train) return;
    tb_free(s->train->arena);
    free(s->train->keep_arena);
    free(s->train->layer);
    free(s->train);
    s->train = NULL;
}

static int train_step(tubelet_state *s, const float *pix, const int64_t *labels, float *loss,
                      float *logits, char *err, size_t errlen);

int tubelet_forward_backward(tubelet_state *s, const float *pix, const int64_t *labels,
                             float *loss, float *logits, char *err, size_t errlen) {
    const tb_config *c = &s->m->cfg;
    tubelet_train *tr = s->train;
    if (!tr) {
        if (err && errlen) snprintf(err, errlen, "the state is not set up for training");
        return TUBELET_ERR_ARG;
    }
    if (c->num_labels < 1) {
        if (err && errlen) snprintf(err, errlen, "the model has no classifier (num_labels = 0)");
        return TUBELET_ERR_ARG;
    }
    const int64_t NL = c->num_labels, rows = s->stages[s->n_stages - 1].n_seq; /* logits rows */
    for (int64_t i = 0; i < rows; i++)
        if (labels[i] < 0 || labels[i] >= NL) {
            if (err && errlen)
                snprintf(err, errlen, "label %lld of row %lld is outside [0, %lld)",
                         (long long)labels[i], (long long)i, (long long)NL);
            return TUBELET_ERR_VALUE;
        }
    int rc = check_pixels(s, pix, err, errlen);
    if (rc) return rc;
    draw_drop_path(s);
    tr->active = 1;
    rc = train_step(s, pix, labels, loss, logits, err, errlen);
    tr->active = 0;
    return rc;
}

/* Forward, loss and backward of tubelet_forward_backward, once the inputs are checked. */
static int train_step(tubelet_state *s, const float *pix, const int64_t *labels, float *loss,
                      float *logits, char *err, size_t errlen) {
    const tb_config *c = &s->m->cfg;
    tubelet_train *tr = s->train;
    const int64_t NL = c->num_labels, rows = s->stages[s->n_stages - 1].n_seq;
    encode(s, pix, c->layers);
    const double t0 = s->profile ? omp_get_wtime() : 0;
    memcpy(tr->x_final, s->x, sizeof(float) * (size_t)(s->rows * c->hidden));
    head(s, tr->dlogits);
    if (logits) memcpy(logits, tr->dlogits, sizeof(float) * (size_t)(rows * NL));
    /* mean cross-entropy against the label smoothed by eps (PyTorch's label_smoothing): target
     * q = (1 - eps) onehot + eps / K; loss = -sum q log p; dL/dlogits = (p - q) / rows */
    const double eps = tr->label_smoothing;
    double total = 0;
    for (int64_t i = 0; i < rows; i++) {
        float *l = tr->dlogits + i * NL;
        double mx = -INFINITY, sum = 0, mean_logp = 0;
        for (int64_t k = 0; k < NL; k++) mx = l[k] > mx ? l[k] : mx;
        for (int64_t k = 0; k < NL; k++) sum += exp((double)l[k] - mx);
        const double lse = log(sum) + mx;
        for (int64_t k = 0; k < NL; k++) mean_logp += ((double)l[k] - lse) / (double)NL;
        total += (1 - eps) * (lse - l[labels[i]]) - eps * mean_logp;
        for (int64_t k = 0; k < NL; k++) {
            double q = (1 - eps) * (k == labels[i]) + eps / (double)NL;
            l[k] = (float)((exp((double)l[k] - lse) - q) / (double)rows);
        }
    }
    if (loss) *loss = (float)(total / (double)rows);
    if (!isfinite(total)) {
        if (err && errlen) snprintf(err, errlen, "the loss is not finite (%g)", total / rows);
        return TUBELET_ERR_VALUE;
    }
    head_backward(s);
    if (s->profile) s->prof_ms[PROF_LOSS] += 1e3 * (omp_get_wtime() - t0);
    encoder_backward(s);
    PROF(s, PROF_B_EMBED, tubelet_embed_backward(s));
    return TUBELET_OK;
}
