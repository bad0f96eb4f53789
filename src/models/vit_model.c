/* The shared encoder as a model runner: tb_vit_encoder_model (family.h's tb_model_ops), the
 * `model` of the ViT families (videomae.c, timesformer.c, vivit.c). Its forward, per-block hidden
 * states and feature levels are here; its plan and state (plan.c), training buffers and backward
 * (vit_train.c) and linear layers (precision.c) beside the code they run. */

#include "encoder.h"

/* One encoder's tokens x as the caller's feature map (B, D, T, H, W). */
static void map_out(tubelet_state *s, const float *x, float *out) {
    TB_RUN(&s->be, to_host_maps, out, x, s->map_rows, s->B, s->n_patch, s->m->cfg.hidden);
}

static const float *vit_forward(tubelet_state *s, const float *pix, float *logits) {
    tubelet_train *tr = s->train && s->train->active ? s->train : NULL; /* a training step */
    if (tr && tr->given_output) { /* a frozen encoder's output from an earlier step */
        tb_state_enter_stage(s, 0);
        TB_RUN(&s->be, to_device, s->x, tr->given_output, sizeof(float) * (size_t)s->rows *
                                                           (size_t)s->m->cfg.hidden);
        tr->given_output = NULL;
    } else if (tr && tr->frozen_encoder) { /* the encoder as in inference: nothing kept, drawn */
        s->train = NULL;
        tb_encode(s, pix, s->m->cfg.layers);
        s->train = tr;
    } else {
        if (tr) tb_draw_drop_path(s);
        tb_encode(s, pix, s->m->cfg.layers);
    }
    if (tr) TB_RUN(&s->be, copy, tr->x_final, s->x, s->rows * s->m->cfg.hidden);
    const float *h;
    PROF(s, tr ? PROF_LOSS : PROF_OTHER, h = tb_head(s, logits));
    return h;
}

static int vit_hidden(tubelet_state *s, const float *pix, int layer, const float **hidden,
                      tb_err *e) {
    if (layer >= 0 && s->n_stages > 1)
        return tb_fail(e, TUBELET_ERR_UNSUPPORTED, "per-block features of ViViT Model 2 "
                       "(factorised encoder) are not supported: its blocks run on per-frame "
                       "sequences (use layer -1, the last hidden state)");
    tb_encode(s, pix, layer < 0 ? s->m->cfg.layers : layer);
    *hidden = layer < 0 ? tb_head(s, NULL) : s->x;
    return TUBELET_OK;
}

static int vit_levels(tubelet_state *s, const float *pix, int n_levels, const int *layers,
                      float *const *out, tb_err *e) {
    const tb_config *c = &s->m->cfg;
    int deepest = 0, last_hidden = !layers; /* blocks to run; a level wants last_hidden_state */
    if (s->n_stages > 1)
        return tb_fail(e, TUBELET_ERR_UNSUPPORTED, "ViViT Model 2 (factorised encoder) has no "
                       "patch-token feature maps: its last hidden state holds frame tokens");
    for (int i = 0; i < n_levels; i++) {
        const int L = layers ? layers[i] : -1;
        if (!out[i]) return tb_fail(e, TUBELET_ERR_ARG, "feature level %d: no buffer", i);
        if (L < -1 || L > c->layers)
            return tb_fail(e, TUBELET_ERR_ARG, "feature level %d: layer %d does not exist (the "
                           "model has layers 0..%d; -1 = last hidden state)", i, L, c->layers);
        deepest = L < 0 ? c->layers : L > deepest ? L : deepest;
        last_hidden |= L < 0;
    }
    tb_encode(s, pix, 0);
    for (int l = 0; l <= deepest; l++) {
        for (int i = 0; layers && i < n_levels; i++)
            if (layers[i] == l) map_out(s, s->x, out[i]);
        if (l < deepest) tb_encoder_block(s, l);
    }
    if (last_hidden) {
        const float *h = tb_head(s, NULL);
        for (int i = 0; i < n_levels; i++)
            if (!layers || layers[i] < 0) map_out(s, h, out[i]);
    }
    return TUBELET_OK;
}

const tb_model_ops tb_vit_encoder_model = {
    .plan = tb_vit_plan,
    .free_state = tb_vit_free_state,
    .forward = vit_forward,
    .hidden = vit_hidden,
    .levels = vit_levels,
    .level_shape = tb_vit_level_shape,
    .enable_training = tb_vit_enable_training,
    .backward = tb_vit_backward,
    .each_linear = tb_vit_each_linear,
    .linear_bytes = tb_vit_linear_bytes,
    .can_freeze_encoder = 1,
};
