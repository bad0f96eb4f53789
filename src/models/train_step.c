/* Training: binding a training state (tubelet_state_enable_training), the drop path and dropout
 * settings, and one step: the model runner's forward, mean cross-entropy (label smoothing), the
 * runner's backward (the shared encoder's: vit_train.c). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../kernels/attention.h"
#include "../rng.h"
#include "encoder.h"

int tb_state_enable_training(tubelet_state *s, int checkpoint_blocks, tubelet_grads *g,
                             const tb_weightset *gw, char *err, size_t errlen) {
    tb_err e = {{0}};
    int rc = tb_err_out(s->m->run->enable_training(s, checkpoint_blocks, &e), &e, err,
                        errlen);
    if (!rc) s->train->grads = g, s->train->g = gw;
    /* gradients of the probe only: nothing else can train (tubelet_grads_new_probe) */
    if (!rc && g && g->probe_only) s->train->frozen_encoder = 1;
    return rc;
}

int tubelet_state_enable_training(tubelet_state *s, int checkpoint_blocks, tubelet_grads *g,
                                  char *err, size_t errlen) {
    const char *bad = !g           ? "no gradients given (tubelet_grads_new)"
                      : g->m != s->m ? "the gradients were made for another model"
                      : s->train && g != s->train->grads
                          ? "the state trains with other gradients already"
                          : NULL;
    if (bad) {
        if (err && errlen) snprintf(err, errlen, "%s", bad);
        return TUBELET_ERR_ARG;
    }
    if (s->train) return TUBELET_OK;
    return tb_state_enable_training(s, checkpoint_blocks, g, &g->g, err, errlen);
}

int tubelet_state_freeze_encoder(tubelet_state *s, int on, char *err, size_t errlen) {
    const char *bad = !s->train ? "enable training first (tubelet_state_enable_training)"
                      : !s->m->run->can_freeze_encoder
                          ? "this family's runner cannot freeze its encoder (Video Swin, X-CLIP)"
                      : !on && s->train->grads && s->train->grads->probe_only
                          ? "the state's gradients hold the probe's tensors only "
                            "(tubelet_grads_new_probe): the encoder stays frozen"
                          : NULL;
    if (bad) {
        if (err && errlen) snprintf(err, errlen, "%s", bad);
        return s->train && !s->m->run->can_freeze_encoder ? TUBELET_ERR_UNSUPPORTED
                                                            : TUBELET_ERR_ARG;
    }
    s->train->frozen_encoder = on != 0;
    return TUBELET_OK;
}

/* The frozen encoder's output between steps: what tb_head reads (the rows entering the final
 * norm), copied to or from host memory. One encoder stage only (not ViViT Model 2). */
static const char *encoder_output_refused(const tubelet_state *s) {
    return !s->train || !s->train->frozen_encoder ? "the encoder is not frozen "
                                                    "(tubelet_state_freeze_encoder)"
           : s->n_stages != 1 ? "the model has two encoder stages (ViViT Model 2)"
                              : NULL;
}

int tubelet_state_encoder_output(const tubelet_state *s, float *out, char *err, size_t errlen) {
    const char *bad = encoder_output_refused(s);
    if (bad) {
        if (err && errlen) snprintf(err, errlen, "%s", bad);
        return TUBELET_ERR_ARG;
    }
    TB_RUN(&s->be, to_host, out, s->train->x_final,
           sizeof(float) * (size_t)s->rows * (size_t)s->m->cfg.hidden);
    return TUBELET_OK;
}

int tubelet_state_set_encoder_output(tubelet_state *s, const float *x, char *err, size_t errlen) {
    const char *bad = encoder_output_refused(s);
    if (bad) {
        if (err && errlen) snprintf(err, errlen, "%s", bad);
        return TUBELET_ERR_ARG;
    }
    s->train->given_output = x;
    return TUBELET_OK;
}

tubelet_grads *tubelet_state_grads(const tubelet_state *s) {
    return s->train ? s->train->grads : NULL;
}

void tubelet_state_set_block_grad_hook(tubelet_state *s, tubelet_block_grad_fn fn, void *user) {
    if (!s->train) return;
    s->train->block_grad = fn, s->train->block_grad_user = user;
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

void tubelet_state_set_label_smoothing(tubelet_state *s, float eps) {
    if (s->train) s->train->label_smoothing = eps;
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
    /* an encoder output given (tubelet_state_set_encoder_output): the pixels are not read */
    int rc = tr->given_output ? TUBELET_OK : tb_state_pixels(s, &pix, err, errlen);
    if (rc) return rc;
    if (s->be.k->upload) { /* the labels where the logits are, as the pixels (tb_state_pixels) */
        if (!tr->labels &&
            !(tr->labels = TB_RUN(&s->be, mem_alloc, sizeof(int64_t) * (size_t)rows))) {
            if (err && errlen) snprintf(err, errlen, "out of memory for the labels on the device");
            return TUBELET_ERR_MEMORY;
        }
        TB_RUN(&s->be, to_device, tr->labels, labels, sizeof(int64_t) * (size_t)rows);
        labels = tr->labels;
    }
    tb_err e = {{0}};
    if ((rc = tb_grads_status(tr->grads, &e))) return tb_err_out(rc, &e, err, errlen);
    tr->active = 1;
    rc = train_step(s, pix, labels, loss, logits, err, errlen);
    tr->active = 0;
    if (!rc) tb_grads_written(tr->grads); /* a device backend's: copied when the caller reads them */
    /* the pass's own failure first: a product that could not run leaves NaN, which the loss
     * then reports as not finite */
    const int st = tb_pass_status(s, err, errlen);
    return st ? st : rc;
}

/* Forward, loss and backward of tubelet_forward_backward, once the inputs are checked. */
static int train_step(tubelet_state *s, const float *pix, const int64_t *labels, float *loss,
                      float *logits, char *err, size_t errlen) {
    const tb_config *c = &s->m->cfg;
    tubelet_train *tr = s->train;
    const int64_t NL = c->num_labels, rows = s->stages[s->n_stages - 1].n_seq;
    s->m->run->forward(s, pix, tr->dlogits); /* drop path drawn, dlogits = the logits */
    const double t0 = s->profile ? omp_get_wtime() : 0;
    if (logits) TB_RUN(&s->be, to_host, logits, tr->dlogits, sizeof(float) * (size_t)(rows * NL));
    /* mean cross-entropy against the label smoothed by eps (PyTorch's label_smoothing); the
     * logits become dL/dlogits where they are */
    const double total =
        TB_RUN(&s->be, cross_entropy, tr->dlogits, labels, rows, NL, tr->label_smoothing);
    if (loss) *loss = (float)(total / (double)rows);
    if (s->profile) s->prof_ms[PROF_LOSS] += 1e3 * (omp_get_wtime() - t0);
    if (!isfinite(total)) {
        if (err && errlen) snprintf(err, errlen, "the loss is not finite (%g)", total / rows);
        return TUBELET_ERR_VALUE;
    }
    s->m->run->backward(s);
    return TUBELET_OK;
}
