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
    const int kr = s->kern_status,
              rc = TB_RUN(&s->be, ctx_status, s->lowp); /* both read, cleared */
    const char *what = s->kern_what;
    s->kern_status = TUBELET_OK, s->kern_what = NULL;
    if (kr) {
        if (err && errlen)
            snprintf(err, errlen,
                     "the %s kernels' %s failed (status %d): the outputs are not "
                     "valid",
                     s->be.k->name, what, kr);
        return kr;
    }
    if (rc && err && errlen && s->be.k->open) /* a device backend's: its kernels or products */
        snprintf(err, errlen,
                 "the %s backend: a kernel or product failed or is not supported "
                 "there (status %d; docs/cuda.md): the outputs are not valid",
                 s->be.k->name, rc);
    else if (rc && err && errlen)
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
        TB_RUN(&s->be, to_host, logits, s->logits,
               sizeof(float) * (size_t)tubelet_shape_numel(&sh));
    if (hidden)
        TB_RUN(&s->be, to_host, hidden, h, sizeof(float) * (size_t)(s->rows * s->m->cfg.hidden));
}

int tubelet_forward(tubelet_state *s, const float *pix, float *logits, float *hidden, char *err,
                    size_t errlen) {
    int rc = tb_state_pixels(s, &pix, err, errlen);
    if (rc) return rc;
    const float *h = s->m->run->forward(s, pix, logits ? s->logits : NULL);
    copy_out(s, logits, hidden, h);
    return tb_pass_status(s, err, errlen);
}

int tubelet_forward_pooled(tubelet_state *s, const float *pix, float *pooled, char *err,
                           size_t errlen) {
    int rc = tb_state_pixels(s, &pix, err, errlen);
    if (rc) return rc;
    if (s->m->fam->text) {
        if (err && errlen) snprintf(err, errlen, "%s: X-CLIP's pooled output is one row per "
                                    "frame; use tubelet_forward_text", s->m->source);
        return TUBELET_ERR_UNSUPPORTED;
    }
    s->m->run->forward(s, pix, s->logits);
    if (s->n_seq != s->B) { /* TimeSformer space_only: a row per frame */
        if (err && errlen) snprintf(err, errlen, "%s: its pooled output has a row per frame, "
                                    "not per clip", s->m->source);
        return TUBELET_ERR_UNSUPPORTED;
    }
    TB_RUN(&s->be, to_host, pooled, s->pooled, sizeof(float) * (size_t)(s->B * s->m->cfg.hidden));
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
    int rc = tb_state_pixels(s, &pix, err, errlen);
    if (rc) return rc;
    tb_err e = {{0}};
    const float *h;
    if ((rc = s->m->run->hidden(s, pix, layer, &h, &e)))
        return tb_err_out(rc, &e, err, errlen);
    copy_out(s, NULL, hidden, h);
    return tb_pass_status(s, err, errlen);
}

int tubelet_forward_features(tubelet_state *s, const float *pix, int n_levels, const int *layers,
                             float *const *out, char *err, size_t errlen) {
    if (n_levels < 1 || n_levels > 64 || !out) {
        if (err && errlen) snprintf(err, errlen, "%d feature levels (1 to 64, each with an output "
                                    "buffer)", n_levels);
        return TUBELET_ERR_ARG;
    }
    int rc = tb_state_pixels(s, &pix, err, errlen);
    if (rc) return rc;
    tb_err e = {{0}};
    if ((rc = s->m->run->levels(s, pix, n_levels, layers, out, &e)))
        return tb_err_out(rc, &e, err, errlen);
    return tb_pass_status(s, err, errlen);
}

/* ---- a family with a text tower (X-CLIP): include/tubelet_text.h ---- */

static int no_text(const tubelet_model *m, char *err, size_t errlen) {
    if (err && errlen)
        snprintf(err, errlen, "%s: a %s model has no text tower (texts need an X-CLIP model)",
                 m->source, m->fam->display_name);
    return TUBELET_ERR_UNSUPPORTED;
}

int tubelet_text_dims(const tubelet_model *m, int *embed_dim, int *context) {
    if (!m->fam->text) return TUBELET_ERR_UNSUPPORTED;
    m->fam->text->dims(m, embed_dim, context);
    return TUBELET_OK;
}

int tubelet_text_vocab_size(const tubelet_model *m) {
    return m->fam->text ? m->fam->text->vocab_size(m) : 0;
}

int tubelet_encode_text(tubelet_model *m, const int32_t *ids, int n_texts, int context,
                        float *text_embeds, char *err, size_t errlen) {
    if (!m->fam->text) return no_text(m, err, errlen);
    tb_err e = {{0}};
    const int rc = m->fam->text->encode(m, ids, n_texts, context, text_embeds, &e);
    return tb_err_out(rc, &e, err, errlen);
}

int tubelet_forward_text(tubelet_state *s, const float *pix, const float *text_embeds,
                         int n_texts, float *logits, float *video_embeds, float *text_out,
                         char *err, size_t errlen) {
    if (!s->m->fam->text) return no_text(s->m, err, errlen);
    if (n_texts < 1 || !text_embeds || !logits) {
        if (err && errlen) snprintf(err, errlen, "%d texts: give 1 or more text embeddings and "
                                    "a logits buffer", n_texts);
        return TUBELET_ERR_ARG;
    }
    int rc = tb_state_pixels(s, &pix, err, errlen);
    if (rc) return rc;
    tb_err e = {{0}};
    if ((rc = s->m->fam->text->logits(s, pix, text_embeds, n_texts, logits, video_embeds,
                                      text_out, &e)))
        return tb_err_out(rc, &e, err, errlen);
    return tb_pass_status(s, err, errlen);
}

int tubelet_encode_video(tubelet_state *s, const float *pix, float *video_embeds, char *err,
                         size_t errlen) {
    if (!s->m->fam->text) return no_text(s->m, err, errlen);
    int rc = tb_state_pixels(s, &pix, err, errlen);
    if (rc) return rc;
    s->m->fam->text->encode_video(s, pix, video_embeds);
    return tb_pass_status(s, err, errlen);
}
