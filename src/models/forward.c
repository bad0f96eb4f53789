/* The forward entry points: logits and last_hidden_state, the hidden state after any block,
 * multi-level feature maps; and the profile of the time each kind of work took. */
#include <stdio.h>
#include <string.h>

#include "encoder.h"

/* ---- profiling: wall time per kind of work, only when asked for ---- */

static const char *const prof_names[PROF_N] = {
    "embed",     "layernorm",    "qkv",          "attention",      "attn_proj",
    "mlp_fc1",   "activation",   "mlp_fc2",      "other",          "loss+head",
    "bwd_embed", "bwd_layernorm", "bwd_qkv",     "bwd_attention",  "bwd_attn_proj",
    "bwd_mlp_fc1", "bwd_activation", "bwd_mlp_fc2", "bwd_other"};

void tubelet_state_set_profiling(tubelet_state *s, int on) {
    s->profile = on;
    memset(s->prof_ms, 0, sizeof s->prof_ms);
}

int tubelet_state_profile(const tubelet_state *s, const char **names, double *ms, int max) {
    int n = 0;
    for (; n < PROF_N && n < max; n++) names[n] = prof_names[n], ms[n] = s->prof_ms[n];
    return n;
}


/* The status of a pass whose products all ran without reporting: a packed or bf16 product that
 * failed (tb_qlinear, tb_gemm_bf16) left NaN in its output and its status in the context. */
int tb_pass_status(tubelet_state *s, char *err, size_t errlen) {
    const int kr = s->kern_status, rc = s->m->kern->ctx_status(s->lowp); /* both read, cleared */
    const char *what = s->kern_what;
    s->kern_status = TUBELET_OK, s->kern_what = NULL;
    if (kr) {
        if (err && errlen)
            snprintf(err, errlen, "the %s kernels' %s failed (status %d): the outputs are not "
                     "valid", s->m->kern->name, what, kr);
        return kr;
    }
    if (rc && err && errlen)
        snprintf(err, errlen, "oneDNN could not make or run the product of a linear layer (%s): "
                 "the outputs are not valid", s->m->mixed ? "bf16 mixed precision"
                 : tubelet_precision_name(s->m->precision));
    return rc;
}

/* A pass's outputs into the caller's buffers (host memory): the logits from the state's, the
 * hidden state from h. */
static void copy_out(tubelet_state *s, float *logits, float *hidden, const float *h) {
    tubelet_shape sh;
    tubelet_state_logits_shape(s, &sh);
    if (logits)
        s->m->kern->to_host(logits, s->logits, sizeof(float) * (size_t)tubelet_shape_numel(&sh));
    if (hidden)
        s->m->kern->to_host(hidden, h, sizeof(float) * (size_t)(s->rows * s->m->cfg.hidden));
}

/* One encoder's tokens x as the caller's feature map (B, D, T, H, W). */
static void map_out(tubelet_state *s, const float *x, float *out) {
    s->m->kern->to_host_maps(out, x, s->map_rows, s->B, s->n_patch, s->m->cfg.hidden);
}

int tubelet_forward(tubelet_state *s, const float *pix, float *logits, float *hidden, char *err,
                    size_t errlen) {
    const tb_config *c = &s->m->cfg;
    int rc = tb_check_pixels(s, pix, err, errlen);
    if (rc) return rc;
    if (s->m->fam->whole) { /* Video Swin: its stages, then the head */
        s->m->fam->whole->forward(s, pix, logits ? s->logits : NULL);
        copy_out(s, logits, hidden, s->x);
        return tb_pass_status(s, err, errlen);
    }
    tb_encode(s, pix, c->layers);
    const float *h;
    PROF(s, PROF_OTHER, h = tb_head(s, logits ? s->logits : NULL));
    copy_out(s, logits, hidden, h);
    return tb_pass_status(s, err, errlen);
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
    if (layer >= 0 && s->m->fam->whole) {
        if (err && errlen)
            snprintf(err, errlen, "per-block features of Video Swin are not supported: its "
                     "blocks change width stage by stage (use layer -1, or the stage outputs "
                     "of tubelet_forward_features)");
        return TUBELET_ERR_UNSUPPORTED;
    }
    if (layer >= 0 && s->n_stages > 1) {
        if (err && errlen)
            snprintf(err, errlen, "per-block features of ViViT Model 2 (factorised encoder) are "
                     "not supported: its blocks run on per-frame sequences (use layer -1, the "
                     "last hidden state)");
        return TUBELET_ERR_UNSUPPORTED;
    }
    int rc = tb_check_pixels(s, pix, err, errlen);
    if (rc) return rc;
    if (s->m->fam->whole) {
        s->m->fam->whole->forward(s, pix, NULL);
        copy_out(s, NULL, hidden, s->x);
        return tb_pass_status(s, err, errlen);
    }
    tb_encode(s, pix, layer < 0 ? c->layers : layer);
    copy_out(s, NULL, hidden, layer < 0 ? tb_head(s, NULL) : s->x);
    return tb_pass_status(s, err, errlen);
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
    if (s->m->fam->whole) { /* Video Swin: level i is stage i's output */
        tb_err e = {{0}};
        int rc = TUBELET_OK;
        if (layers)
            rc = tb_fail(&e, TUBELET_ERR_UNSUPPORTED, "Video Swin's feature levels are its stage "
                         "outputs (1 to %d levels); per-block layers are not supported",
                         c->swin.stages);
        if (rc) return tb_err_out(rc, &e, err, errlen);
        if ((rc = tb_check_pixels(s, pix, err, errlen))) return rc;
        if ((rc = s->m->fam->whole->levels(s, pix, n_levels, out, &e)))
            return tb_err_out(rc, &e, err, errlen);
        return tb_pass_status(s, err, errlen);
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
    int rc = tb_check_pixels(s, pix, err, errlen);
    if (rc) return rc;
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
    return tb_pass_status(s, err, errlen);
}
