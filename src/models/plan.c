/* A state for one input shape: its sequences (per clip or per frame, one or two encoder stages:
 * the family's table says), the index tables of every attention step (the family's token sets),
 * its position tables, and one activation arena planned once. */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "encoder.h"

/* A block's one step over whole sequences follows the stage (ViViT Model 2's two encoders). */
void tb_state_enter_stage(tubelet_state *s, int k) {
    const tb_stage *st = &s->stages[k];
    s->stage = k, s->x = st->x;
    s->n_seq = st->n_seq, s->seq_len = st->seq_len, s->rows = st->rows;
    s->joint = (tb_grouping){.n_groups = st->n_seq, .group_len = st->seq_len};
    if (s->n_steps == 1) s->step[0] = s->joint;
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
    for (int64_t i = 0; i < NT; i++) { /* the family orders a clip's patch rows */
        int64_t t, n;
        s->m->fam->vit->patch_of_row(i, s->grid_t, H * W, &t, &n);
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
    *g = (tb_grouping){.n_groups = s->B * G, .group_len = L, .rows = rows, .start = start};
    free(fill);
    if (!(rc = tb_state_share(s, rows, sizeof(int32_t) * (size_t)(s->B * per_clip), e)) &&
        !(rc = tb_state_share(s, start, sizeof(int64_t) * (size_t)(s->B * G + 1), e)))
        rc = tb_state_share(s, weight, sizeof(float) * (size_t)s->rows, e);
done:
    free(count), free(id), free(key);
    return rc;
}

/* The groups of every attention step of a block: TimeSformer's divided, axial and local_global
 * schemes and ViViT Model 3 have token sets (the family's attention_plan), every other model one
 * attention over each whole sequence — ViViT Model 4's with its heads split over two token sets. */
static int plan_groupings(tubelet_state *s, tb_err *e) {
    tb_attn_step st[TB_MAX_STEPS];
    int split_heads = 0;
    s->joint = (tb_grouping){.n_groups = s->n_seq, .group_len = s->seq_len};
    s->n_steps = s->m->fam->vit->attention_plan(&s->m->cfg, s->grid_t, s->grid_h, s->grid_w,
                                                st, &split_heads);
    for (int k = 0; k < s->n_steps; k++) {
        int rc = plan_step(s, &st[k], &s->step[k], &s->step_rows[k], &s->step_start[k],
                           &s->step_weight[k], e);
        if (rc) return rc;
        s->step_kind[k] = st[k].kind;
    }
    if (split_heads) { /* the token sets are the heads' groups, not steps */
        s->split_heads = 1, s->head_group[0] = s->step[0], s->head_group[1] = s->step[1];
        s->n_steps = 0;
    }
    if (!s->n_steps) s->n_steps = 1, s->step[0] = s->joint, s->step_kind[0] = TB_STEP_MAIN;
    return TUBELET_OK;
}

int64_t tb_state_max_group_len(const tubelet_state *s) {
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
    if ((T < c->tubelet_t && !c->repeat_short_clips) || H < c->patch_h || W < c->patch_w)
        return tb_fail(e, TUBELET_ERR_SHAPE,
                       "%s: input of %d frames of %dx%d is smaller than one %dx%dx%d patch",
                       m->source, T, H, W, c->tubelet_t, c->patch_h, c->patch_w);
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
    return TB_RUN(&s->be, ctx_new, &s->lowp, s->m->pack, max_mk, max_n, max_nk, e);
}

/* n_visible > 0: the encoder runs over that many tokens of each clip (tb_state_new_visible).
 * after: the state whose backend instance this one's forks (tb_state_new_after), else the
 * model's. */
static int state_new(tubelet_state **out, tubelet_model *m, int B, int T, int H, int W,
                     int64_t n_visible, const tubelet_state *after, tb_err *ep) {
    tb_err e = {{0}};
    *out = NULL;
    int rc = tb_model_check_weights(m, "run", &e);
    if (!rc) rc = check_input_shape(m, B, T, H, W, &e);
    tubelet_state *s = rc ? NULL : calloc(1, sizeof *s);
    if (!rc && !s) rc = tb_fail(&e, TUBELET_ERR_MEMORY, "out of memory");
    if (rc) {
        *ep = e;
        return rc;
    }
    s->m = m, s->be = m->be, s->B = B, s->T = T, s->H = H, s->W = W, s->n_visible = n_visible;
    /* tubelet_model_set_threads may raise the count later: the per-thread scratch is sized for
     * the most threads this state will run with (tb_state_threads) */
    s->max_threads = m->n_threads > omp_get_num_procs() ? m->n_threads : omp_get_num_procs();
    if (m->be.k->fork && (rc = m->be.k->fork(after ? after->be.ctx : m->be.ctx, &s->be.ctx, &e))) {
        free(s);
        *ep = e;
        return rc;
    }
    if ((rc = m->run->plan(s, &e))) goto fail;
    *out = s;
    return TUBELET_OK;
fail:
    *ep = e;
    tubelet_state_free(s);
    return rc;
}

/* The shared encoder's plan (tb_vit_encoder_model.plan). */
int tb_vit_plan(tubelet_state *s, tb_err *ep) {
    tubelet_model *m = s->m;
    const tb_config *c = &m->cfg;
    const int64_t D = c->hidden, I = c->intermediate, n_visible = s->n_visible;
    const int B = s->B, T = s->T, H = s->H, W = s->W;
    tb_err e = {{0}};
    int rc = TUBELET_OK;
    s->n_visible = 0; /* set below once checked */
    s->grid_t = tb_grid_t(c, T), s->grid_h = tb_grid_h(c, H), s->grid_w = tb_grid_w(c, W);
    s->n_patch = s->grid_t * s->grid_h * s->grid_w;
    int64_t group_rows;
    /* one sequence per frame (TimeSformer space_only, ViViT Model 2's spatial encoder, each with
     * a cls token), or per clip; ViViT Model 2's temporal encoder is a second stage */
    s->n_stages = m->fam->sequences(c, B, s->grid_t, s->grid_h * s->grid_w, s->stages);
    if (n_visible > 0) { /* the encoder's sequences: the visible tokens of each clip */
        if (s->n_stages != 1 || tb_has_cls(c) || n_visible > s->n_patch) {
            rc = tb_fail(&e, TUBELET_ERR_ARG, "%lld visible tokens of %lld: only a model of one "
                         "encoder without cls token can drop tokens", (long long)n_visible,
                         (long long)s->n_patch);
            goto fail;
        }
        s->n_visible = n_visible;
        s->stages[0] = (tb_stage){NULL, B, n_visible, B * n_visible};
    }
    s->n_seq = s->stages[0].n_seq, s->seq_len = s->stages[0].seq_len, s->rows = s->stages[0].rows;
    /* the index tables (attention groups, visible tokens) hold int32 rows: refused before any
     * of them, or the arena, is allocated */
    const int64_t patches = B * s->n_patch,
                  all_rows = patches > s->stages[0].rows ? patches : s->stages[0].rows;
    if (all_rows > INT32_MAX) {
        rc = tb_fail(&e, TUBELET_ERR_SHAPE, "%s: %d clips of %d frames of %dx%d make %lld token "
                     "rows; at most %d", m->source, B, T, H, W, (long long)all_rows, INT32_MAX);
        goto fail;
    }
    if ((rc = plan_groupings(s, &e)) || (rc = m->fam->vit->positions(s, &e)) ||
        (rc = tb_state_share(s, s->pos_owned, s->pos_owned_bytes, &e)))
        goto fail;
    /* the largest step: group-major rows (shared cls rows repeat) */
    group_rows = s->rows; /* the MLP's dropout and drop path use s->p for every row */
    for (int k = 0; k < s->n_steps; k++) {
        const int64_t gr = tb_group_members(&s->step[k]);
        group_rows = gr > group_rows ? gr : group_rows;
    }
    const int64_t max_len = tb_state_max_group_len(s);

    const int64_t patch_in = (int64_t)c->num_channels * c->tubelet_t * c->patch_h * c->patch_w;
    const int64_t sizes[] = {
        B * s->n_patch * patch_in,
        B * s->n_patch * D,
        s->rows * D,
        s->rows * D,
        s->rows * 3 * D,
        group_rows * D,
        group_rows * D,
        group_rows * D,
        s->rows * I,
        s->n_seq * D,
        TB_RUN(&s->be, attention_scratch_floats, max_len, c->hidden / c->heads, s->max_threads),
        s->n_stages > 1 ? s->stages[1].rows * D : 0,
        s->n_visible ? B * s->n_patch * D : 0,
        s->stages[s->n_stages - 1].n_seq * (c->num_labels > 0 ? c->num_labels : D)};
    float **bufs[] = {&s->patches, &s->emb, &s->x,   &s->a,      &s->qkv,     &s->o,
                      &s->p,       &s->p2,  &s->mlp, &s->pooled, &s->scratch, &s->stages[1].x,
                      &s->x_all,   &s->logits};
    size_t total = 0;
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++)
        total += ((size_t)sizes[i] + 15) & ~(size_t)15; /* keep every buffer 64-byte aligned */
    s->arena = TB_RUN(&s->be, mem_alloc, total * sizeof(float));
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
    if (n_visible > 0) {
        s->vis_rows = malloc(sizeof(int32_t) * (size_t)(B * n_visible));
        if (!s->vis_rows) {
            rc = tb_fail(&e, TUBELET_ERR_MEMORY, "out of memory");
            goto fail;
        }
        for (int64_t b = 0; b < B; b++) /* until tb_state_set_visible: the first tokens */
            for (int64_t i = 0; i < n_visible; i++)
                s->vis_rows[b * n_visible + i] = (int32_t)(b * s->n_patch + i);
        if ((rc = tb_state_share(s, s->vis_rows, sizeof(int32_t) * (size_t)(B * n_visible), &e)))
            goto fail;
    }
    if (s->n_stages == 1) { /* the feature maps' rows (one encoder: its patch tokens) */
        s->map_rows = malloc(sizeof(int32_t) * (size_t)(B * s->n_patch));
        if (!s->map_rows) {
            rc = tb_fail(&e, TUBELET_ERR_MEMORY, "out of memory");
            goto fail;
        }
        for (int64_t b = 0, k = 0; b < B; b++)
            for (int64_t it = 0; it < s->grid_t; it++)
                for (int64_t iy = 0; iy < s->grid_h; iy++)
                    for (int64_t ix = 0; ix < s->grid_w; ix++)
                        s->map_rows[k++] = (int32_t)m->fam->token_row(s, b, it, iy, ix);
        if ((rc = tb_state_share(s, s->map_rows, sizeof(int32_t) * (size_t)(B * s->n_patch), &e)))
            goto fail;
    }
    s->stages[0].x = s->x;
    tb_state_enter_stage(s, 0);
    if ((m->packed || m->mixed) && (rc = lowp_context(s, patch_in, group_rows, &e)))
        goto fail;
    if (m->fam->vit->plan && (rc = m->fam->vit->plan(s, &e))) goto fail;
    return TUBELET_OK;
fail:
    *ep = e;
    return rc;
}

/* What tb_vit_plan made beyond the shared buffers (tb_vit_encoder_model.free_state). */
void tb_vit_free_state(tubelet_state *s) {
    if (s->m->fam->vit->free_plan) s->m->fam->vit->free_plan(s);
    const void *shared[] = {s->vis_rows, s->map_rows, s->pos_owned};
    for (size_t i = 0; i < sizeof shared / sizeof *shared; i++) tb_state_unshare(s, shared[i]);
    free(s->vis_rows), free(s->map_rows);
    tb_free(s->pos_owned);
    for (int k = 0; k < TB_MAX_STEPS; k++) {
        tb_state_unshare(s, s->step_rows[k]), tb_state_unshare(s, s->step_start[k]);
        tb_state_unshare(s, s->step_weight[k]);
        free(s->step_rows[k]), free(s->step_start[k]), free(s->step_weight[k]);
    }
}

void tubelet_state_free(tubelet_state *s) {
    if (!s) return;
    s->m->run->free_state(s);
    tb_state_free_training(s);
    TB_RUN(&s->be, mem_free, s->arena);
    TB_RUN(&s->be, mem_free, s->pix);
    if (s->lowp) TB_RUN(&s->be, ctx_free, s->lowp);
    if (s->be.ctx != s->m->be.ctx) s->be.k->close(s->be.ctx); /* its own instance (fork) */
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

void tubelet_state_grid(const tubelet_state *s, int *t, int *h, int *w) {
    *t = (int)s->grid_t, *h = (int)s->grid_h, *w = (int)s->grid_w;
}

int tubelet_state_has_cls(const tubelet_state *s) { return tb_has_cls(&s->m->cfg); }

void tubelet_state_feature_shape(const tubelet_state *s, tubelet_shape *sh) {
    *sh = (tubelet_shape){5, {s->B, s->m->cfg.hidden, s->grid_t, s->grid_h, s->grid_w}};
}

int tubelet_state_level_shape(const tubelet_state *s, int level, tubelet_shape *sh) {
    sh->ndim = 5;
    return s->m->run->level_shape(s, level, sh->dim);
}

/* The shared encoder's levels: each the feature map of a hidden state (tb_vit_encoder_model). */
int tb_vit_level_shape(const tubelet_state *s, int level, int64_t shape[5]) {
    tubelet_shape sh;
    tubelet_state_feature_shape(s, &sh);
    memcpy(shape, sh.dim, sizeof(int64_t) * 5);
    return level >= 0 ? TUBELET_OK : TUBELET_ERR_ARG;
}

void tb_state_free_training(tubelet_state *s) {
    if (!s->train) return;
    TB_RUN(&s->be, mem_free, s->train->arena);
    TB_RUN(&s->be, mem_free, s->train->keep_arena);
    TB_RUN(&s->be, mem_free, s->train->labels);
    free(s->train->layer);
    free(s->train);
    s->train = NULL;
}

int tubelet_state_new(tubelet_state **out, tubelet_model *m, int B, int T, int H, int W,
                      char *err, size_t errlen) {
    tb_err e = {{0}};
    int rc = state_new(out, m, B, T, H, W, 0, NULL, &e);
    return tb_err_out(rc, &e, err, errlen);
}

int tb_state_new_after(tubelet_state **out, tubelet_model *m, int B, int T, int H, int W,
                       const tubelet_state *after, tb_err *e) {
    return state_new(out, m, B, T, H, W, 0, after, e);
}

int tb_state_new_visible(tubelet_state **out, tubelet_model *m, int B, int T, int H, int W,
                         int64_t n_visible, tb_err *e) {
    if (n_visible < 1)
        return tb_fail(e, TUBELET_ERR_VALUE, "the mask leaves no visible token");
    return state_new(out, m, B, T, H, W, n_visible, NULL, e);
}

/* The rows of the visible tokens, in token order within each clip (as x[~bool_masked_pos]). */
int tb_state_set_visible(tubelet_state *s, const uint8_t *mask, tb_err *e) {
    const int64_t N = s->n_patch, V = s->n_visible;
    int rc = TUBELET_OK;
    for (int64_t b = 0; b < s->B && !rc; b++) {
        int64_t v = 0;
        for (int64_t i = 0; i < N; i++)
            if (!mask[b * N + i]) {
                if (v < V) s->vis_rows[b * V + v] = (int32_t)(b * N + i);
                v++;
            }
        if (v != V)
            rc = tb_fail(e, TUBELET_ERR_VALUE, "clip %lld of the batch leaves %lld tokens "
                         "visible, the others %lld: every clip must mask the same number",
                         (long long)b, (long long)v, (long long)V);
    }
    /* the backend's copy follows the rows, failed or not (sharing again refreshes it in place) */
    tb_err ignore = {{0}};
    const int up = tb_state_share(s, s->vis_rows, sizeof(int32_t) * (size_t)(s->B * V),
                                  rc ? &ignore : e);
    return rc ? rc : up;
}
