/* The shared encoder's training (tb_vit_encoder_model's enable_training and backward, and the
 * drop-path draw of its forward): apart from train_step.c, the public training step, which
 * calls the model runner, so that the runner's calls run one way (tests/check_models.sh). */
#include <stdlib.h>
#include <string.h>

#include "../kernels/attention.h"
#include "../rng.h"
#include "encoder.h"

/* The shared encoder's training buffers of s (tb_vit_encoder_model.enable_training); the
 * gradients are bound by tb_state_enable_training. */
int tb_vit_enable_training(tubelet_state *s, int checkpoint_blocks, tb_err *e) {
    const tubelet_model *m = s->m;
    const tb_config *c = &m->cfg;
    if (s->pos_owned)
        return tb_fail(e, TUBELET_ERR_UNSUPPORTED, "training needs the input size of config.json "
                                                   "(%d frames of %dx%d)", c->num_frames,
                       c->image_h, c->image_w);
    /* every buffer sized for stage 0, the largest (ViViT Model 2's temporal encoder has fewer
     * rows and sequences than its spatial one) */
    tb_state_enter_stage(s, 0);
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
        f[3] = tb_step_weights_of(&m->w.blocks[0], s->step_kind[k]).dense ? gr * D : 0;
        gr_max = gr > gr_max ? gr : gr_max;
        keep_floats += g->n_groups;
    }
    const int64_t n_frames = s->n_stages > 1 ? s->B * s->grid_t * D : 0; /* ViViT Model 2 */
    const int64_t shared[] = {R * D, R * D, R * D, R * 3 * D, gr_max * 3 * D, gr_max * D,
                              gr_max * D, gr_max * D, R * I, s->B * s->n_patch * D,
                              s->n_seq * NL, s->n_seq * D,
                              TB_RUN(&s->be, attention_backward_scratch_floats,
                                  tb_state_max_group_len(s), c->hidden / c->heads, s->max_threads),
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
    if (tr && tr->layer) tr->arena = TB_RUN(&s->be, mem_alloc, sizeof(float) * total);
    if (!tr || !tr->layer || !tr->arena) {
        if (tr) free(tr->layer);
        free(tr);
        return tb_fail(e, TUBELET_ERR_MEMORY, "out of memory: training needs %.1f MB of "
                       "activations", total * 4.0 / 1e6);
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
    tr->keep_arena = TB_RUN(&s->be, mem_alloc,
                            sizeof(float) * ((size_t)(nb ? nb : 1) * (size_t)keep_floats + 1));
    if (!tr->keep_arena) {
        TB_RUN(&s->be, mem_free, tr->arena), free(tr->layer), free(tr);
        return tb_fail(e, TUBELET_ERR_MEMORY, "out of memory");
    }
    float **f[N_SHARED] = {&tr->x_final, &tr->dx,      &tr->da,       &tr->dqkv,   &tr->dqkv_g,
                           &tr->d_o,     &tr->dp,      &tr->dp2,      &tr->dmlp,   &tr->demb,
                           &tr->dlogits, &tr->dpooled, &tr->scratch,  &tr->frames, &tr->dframes};
    for (int i = 0; i < N_SHARED; i++) CARVE(*f[i], shared[i]);
#undef CARVE
    s->train = tr;
    const int rc = m->fam->vit->enable_training ? m->fam->vit->enable_training(s, e) : TUBELET_OK;
    if (rc) tb_state_free_training(s);
    return rc;
}

/* Drop path (stochastic depth) masks of this step, one draw per group of each attention and per
 * sequence of each MLP — the first dimension of the tensors Hugging Face drops — at the linear
 * per-depth rate r l / (L - 1); a function of (seed, step, layer, index) only, so resumes repeat
 * them. Layers at rate 0 get no mask. */
void tb_draw_drop_path(tubelet_state *s) {
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
            /* drawn where the step runs: tb_hash3(seed, step, (l 4 + stream) << 32 | i) */
            const tb_drop_draws d = {tb_hash3_key(tr->dp_seed, (uint64_t)tr->dp_step),
                                     (uint64_t)(l * 4 + str[k]) << 32, 0, rate};
            *dst[k] = p;
            TB_RUN(&s->be, draw_keep, p, n[k], d);
            p += n[k];
        }
    }
}

/* The shared encoder's backward from dlogits (tb_vit_encoder_model.backward). */
void tb_vit_backward(tubelet_state *s) {
    PROF(s, PROF_LOSS, tb_head_backward(s));
    if (s->train->frozen_encoder) return; /* the probe's gradients only */
    tb_encoder_backward(s);
    PROF(s, PROF_B_EMBED, tb_embed_backward(s));
}
