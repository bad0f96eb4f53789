/* What the encoder's output becomes: last_hidden_state, the pooled vector and the classifier
 * (with its backward), and the feature maps and pooled features of tubelet_feature_map and
 * tubelet_pool. */
#include <stdlib.h>
#include <string.h>

#include "../kernels/ops.h"
#include "encoder.h"

const float *tb_head(tubelet_state *s, float *logits) {
    const tb_backend *ops = &s->be;
    const tubelet_model *m = s->m;
    const int64_t D = m->cfg.hidden, L = s->seq_len;
    const float *hidden = s->x;
    if (m->has_final_ln) {
        TB_RUN(ops, layernorm, s->a, D, s->x, D, m->w.final_ln.w, m->w.final_ln.b, s->rows, D,
               m->w.final_ln.eps);
        hidden = s->a;
    }
    if (!logits) return hidden;
    if (m->fam->vit->pool) { /* the family's own pooling (V-JEPA 2's attentive pooler) */
        m->fam->vit->pool(s, hidden);
    } else if (m->has_fc_norm) { /* VideoMAE: mean over tokens, then fc_norm */
        float *mean = s->mlp;
        TB_RUN(ops, mean_rows, mean, hidden, s->n_seq, L, D);
        TB_RUN(ops, layernorm, s->pooled, D, mean, D, m->w.fc_norm.w, m->w.fc_norm.b, s->n_seq, D,
               m->w.fc_norm.eps);
    } else if (m->mean_pool) { /* ViViT Models 3, 4: global average pooling */
        TB_RUN(ops, mean_rows, s->pooled, hidden, s->n_seq, L, D);
    } else { /* token 0: the cls token (the first patch for VideoMAE without mean pooling) */
        TB_RUN(ops, copy_block, s->pooled, D, NULL, hidden, L * D, NULL, s->n_seq, D);
    }
    if (m->w.head.w || m->w.head.q)
        tb_state_linear(s, logits, m->cfg.num_labels, s->pooled, &m->w.head, s->n_seq, m->cfg.num_labels,
               D, 0);
    else
        TB_RUN(ops, copy, logits, s->pooled, s->n_seq * D);
    return hidden;
}

void tb_head_backward(tubelet_state *s) {
    const tb_backend *ops = &s->be;
    const tubelet_model *m = s->m;
    const tb_weightset *w = &m->w, *g = s->train->g;
    tubelet_train *tr = s->train;
    const int64_t D = m->cfg.hidden, L = s->seq_len, R = s->rows, NL = m->cfg.num_labels;
    const float *x = tr->x_final, *hidden = x;
    if (m->has_final_ln) {
        TB_RUN(ops, layernorm, s->a, D, x, D, w->final_ln.w, w->final_ln.b, R, D, w->final_ln.eps);
        hidden = s->a;
    }
    if (w->head.w)
        TB_RUN(ops, linear_backward, s->lowp, tr->dpooled, D, (float *)g->head.w,
               (float *)g->head.b, tr->dlogits, NL, s->pooled, D, w->head.w, s->n_seq, NL, D, 0);
    else
        TB_RUN(ops, copy, tr->dpooled, tr->dlogits, s->n_seq * D);
    TB_RUN(ops, zero, tr->da, R * D);
    if (m->fam->vit->pool_backward) {
        m->fam->vit->pool_backward(s, tr->da);
    } else if (m->has_fc_norm || m->mean_pool) { /* pooled = [fc_norm](mean of the tokens) */
        const float *dmean = tr->dpooled;
        if (m->has_fc_norm) {
            float *mean = s->mlp;
            TB_RUN(ops, mean_rows, mean, hidden, s->n_seq, L, D);
            TB_RUN(ops, zero, tr->dp, s->n_seq * D);
            TB_RUN(ops, layernorm_backward, tr->dp, tr->dpooled, mean, w->fc_norm.w,
                   (float *)g->fc_norm.w, (float *)g->fc_norm.b, s->n_seq, D, w->fc_norm.eps);
            dmean = tr->dp;
        }
        TB_RUN(ops, mean_rows_backward, tr->da, dmean, s->n_seq, L, D);
    } else { /* token 0 */
        TB_RUN(ops, copy_block, tr->da, L * D, NULL, tr->dpooled, D, NULL, s->n_seq, D);
    }
    if (tr->frozen_encoder) return; /* the encoder (its final norm too) gets no gradient */
    if (m->has_final_ln) {
        TB_RUN(ops, zero, tr->dx, R * D);
        TB_RUN(ops, layernorm_backward, tr->dx, tr->da, x, w->final_ln.w, (float *)g->final_ln.w,
               (float *)g->final_ln.b, R, D, w->final_ln.eps);
    } else {
        TB_RUN(ops, copy, tr->dx, tr->da, R * D);
    }
}

/* Row of patch token (clip b, time it, row iy, column ix) in the hidden-state layout. */
static int64_t token_row(const tubelet_state *s, int64_t b, int64_t it, int64_t iy, int64_t ix) {
    return s->m->fam->token_row(s, b, it, iy, ix);
}

/* The family's frame tokens per clip in the last hidden state (0: it holds patch tokens). */
static int64_t frame_tokens(const tubelet_state *s) {
    return s->m->fam->frame_tokens ? s->m->fam->frame_tokens(s) : 0;
}

void tubelet_feature_map(const tubelet_state *s, const float *hidden, float *out) {
    const int64_t D = s->m->cfg.hidden, T = s->grid_t, H = s->grid_h, W = s->grid_w;
    if (frame_tokens(s) > 0) { /* no patch tokens in the last hidden state */
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
    const int64_t F = frame_tokens(s);
    if (F > 0) { /* the cls token, or the mean of the frames' */
        for (int64_t b = 0; b < s->B; b++) {
            const float *h = hidden + b * (F + 1) * D;
            for (int64_t d = 0; d < D; d++) {
                double acc = 0;
                for (int64_t t = 0; t < F; t++) acc += h[(1 + t) * D + d];
                out[b * D + d] = mode == TUBELET_POOL_CLS ? h[d] : (float)(acc / (double)F);
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
