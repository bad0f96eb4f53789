/* VideoMAE masked pretraining as Hugging Face's VideoMAEForPreTraining (Tong et al. 2022; He et
 * al. 2022, MAE): the encoder runs over the visible tokens only (a state planned for n_visible
 * tokens per clip, plan.c), encoder_to_decoder maps them to the decoder's width, the masked
 * tokens enter as the mask token, every token gets the decoder's fixed sinusoid position, the
 * decoder's blocks run over all tokens, and its norm and head reconstruct the masked tubelets'
 * pixels. The decoder's blocks are the encoder's block code (encoder.c) run on a second view of
 * the model whose widths are the decoder_* sizes and whose blocks are the decoder's. Forward and
 * backward of each step sit side by side. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../kernels/ops.h"
#include "encoder.h"
#include "family.h"
#include "tubelet_pretrain.h"

/* ImageNet's mean and std (timm's IMAGENET_DEFAULT_*): HF un-normalises 3-channel input with
 * them before cutting the targets. */
static const float imagenet_mean[3] = {0.485f, 0.456f, 0.406f};
static const float imagenet_std[3] = {0.229f, 0.224f, 0.225f};

struct tubelet_pretrain {
    tubelet_model *m;
    tb_decoder_dims dd;     /* the decoder's sizes (its family's `decoder`) */
    const tb_decoder_weights *dw; /* its weights, in m's weightset (`decoder_weights`) */
    const tb_decoder_weights *dg; /* their gradients, in grads' (NULL: forward only) */
    tubelet_model dec;      /* the decoder as the block code sees a model: decoder widths and
                               blocks, the rest shared with m (never freed through it) */
    tubelet_state *enc, *ds; /* encoder over the visible tokens, decoder over all of them */
    tubelet_grads *grads;   /* NULL: forward only */
    tb_weightset dec_g;     /* the decoder view's gradients: grads with the decoder's blocks */
    int B;
    int64_t N, V, M, P;     /* tokens, visible, masked per clip; pixels per patch */
    int32_t *masked;        /* (B, M) masked token indices in order */
    int32_t *visible;       /* (B, V) visible token indices in order */
    float *arena;
    size_t arena_floats;
    float *enc_x;           /* (B V, D) the last block's output (videomae.layernorm's input) */
    float *enc_out;         /* (B V, D) sequence_output */
    float *y;               /* (B V, Dd) encoder_to_decoder(sequence_output) */
    float *tail;            /* (B M, Dd) the decoder's last M rows per clip (norm's input) */
    float *normed;          /* (B M, Dd) */
    float *logits, *target; /* (B M, P) */
    float *dlogits;         /* (B M, P) */
    float *dnormed, *dtail; /* (B M, Dd) */
    float *denc;            /* (B V, D) */
};

int tubelet_model_is_pretraining(const tubelet_model *m) { return m->cfg.pretraining; }

/* The family's pretraining decoder (zeros: it has none). */
static tb_decoder_dims decoder_dims(const tubelet_model *m) {
    tb_decoder_dims d = {0};
    if (m->fam->decoder) m->fam->decoder(&m->cfg, &d);
    return d;
}

void tubelet_pretrain_grid(const tubelet_model *m, int *t, int *h, int *w) {
    const tb_config *c = &m->cfg;
    *t = tb_grid_t(c, c->num_frames), *h = tb_grid_h(c, c->image_h), *w = tb_grid_w(c, c->image_w);
}

int tubelet_pretrain_patch_pixels(const tubelet_model *m) {
    const tb_config *c = &m->cfg;
    return c->num_channels * c->tubelet_t * c->patch_h * c->patch_w;
}

/* ---- tube masking ---- */

static uint64_t mix(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

int tubelet_tube_mask(uint8_t *mask, int B, int t, int h, int w, double ratio, uint64_t seed,
                      int64_t step, int64_t clip0, char *err, size_t errlen) {
    tb_err e = {{0}};
    const int64_t n = (int64_t)h * w;
    if (!(ratio > 0 && ratio < 1))
        return tb_err_out(tb_fail(&e, TUBELET_ERR_VALUE, "mask ratio %g is outside (0, 1)", ratio),
                          &e, err, errlen);
    const int64_t k = (int64_t)(ratio * (double)n); /* int(mask_ratio * num_patches_per_frame) */
    if (k < 1 || k >= n)
        return tb_err_out(tb_fail(&e, TUBELET_ERR_VALUE, "mask ratio %g masks %lld of the %lld "
                                  "positions of a frame: it must mask at least one and leave one",
                                  ratio, (long long)k, (long long)n), &e, err, errlen);
    for (int b = 0; b < B; b++) {
        uint8_t *frame = mask + (int64_t)b * t * n;
        /* "tube" in ASCII keeps these draws apart from any other use of the seed */
        uint64_t st = mix(mix(mix(seed ^ 0x74756265ull) + (uint64_t)step) + (uint64_t)(clip0 + b));
        for (int64_t i = 0; i < n; i++) frame[i] = i >= n - k; /* zeros, then k ones */
        for (int64_t i = n - 1; i > 0; i--) { /* Fisher-Yates shuffle */
            st += 0x9E3779B97F4A7C15ull;
            const int64_t j = (int64_t)(mix(st) % (uint64_t)(i + 1));
            const uint8_t tmp = frame[i];
            frame[i] = frame[j], frame[j] = tmp;
        }
        for (int it = 1; it < t; it++) memcpy(frame + it * n, frame, (size_t)n); /* tubes */
    }
    return TUBELET_OK;
}

/* ---- state ---- */

void tubelet_pretrain_free(tubelet_pretrain *p) {
    if (!p) return;
    tubelet_state_free(p->ds); /* before the encoder's, whose stream it runs on */
    tubelet_state_free(p->enc);
    free(p->masked), free(p->visible);
    if (p->arena) TB_RUN(&p->m->be, mem_free, p->arena);
    free(p);
}

/* The decoder as a model of decoder_hidden_size width, decoder_num_hidden_layers blocks: what
 * encoder.c's blocks and plan.c read, named one by one. It borrows m's backend, precision and
 * weight pointers and owns nothing: no weights file, tensor list, owned buffers or labels (a
 * copy of the whole model would alias each of them). */
static void decoder_view(tubelet_pretrain *p) {
    const tubelet_model *m = p->m;
    tubelet_model *d = &p->dec;
    *d = (tubelet_model){.cfg = m->cfg, .fam = m->fam, .run = m->run, .be = m->be,
                         .rng = m->rng, .log = m->log, .n_threads = m->n_threads,
                         .max_memory = m->max_memory, .w = m->w, .has_final_ln = m->has_final_ln,
                         .has_fc_norm = m->has_fc_norm, .mean_pool = m->mean_pool,
                         .precision = m->precision, .packed = m->packed,
                         .lowp_native = m->lowp_native, .attn_bf16 = m->attn_bf16,
                         .mixed = m->mixed, .pack = m->pack};
    memcpy(d->source, m->source, sizeof d->source);
    d->cfg.labels = NULL;
    d->cfg.hidden = p->dd.hidden, d->cfg.heads = p->dd.heads;
    d->cfg.intermediate = p->dd.intermediate, d->cfg.layers = p->dd.layers;
    d->cfg.layer_scale = 0, d->cfg.pretraining = 0, d->cfg.num_labels = 0;
    d->w.blocks = p->dw->blocks;
    d->w.pos = p->dw->pos;
}

int tubelet_pretrain_new(tubelet_pretrain **out, tubelet_model *m, int B, int T, int C, int H,
                         int W, int n_masked, tubelet_grads *grads, int checkpoint, char *err,
                         size_t errlen) {
    tb_err e = {{0}};
    const tb_config *c = &m->cfg;
    *out = NULL;
    if (!c->pretraining || !m->fam->decoder_weights)
        return tb_err_out(tb_fail(&e, TUBELET_ERR_ARG, "%s is not a pretraining model (config.json's "
                              "architectures has no VideoMAEForPreTraining)", m->source),
                      &e, err, errlen);
    if (T != c->num_frames || C != c->num_channels || H != c->image_h || W != c->image_w)
        return tb_err_out(tb_fail(&e, TUBELET_ERR_SHAPE, "pretraining takes config.json's input "
                              "size, %d frames of %d channels of %dx%d (this input: %d of %d of "
                              "%dx%d)", c->num_frames, c->num_channels, c->image_h, c->image_w,
                              T, C, H, W), &e, err, errlen);
    if (grads && (grads->m != m || grads->probe_only))
        return tb_err_out(tb_fail(&e, TUBELET_ERR_ARG, grads->m != m
                                  ? "the gradients were made for another model"
                                  : "pretraining trains the encoder: its gradients come from "
                                    "tubelet_grads_new, not tubelet_grads_new_probe"),
                          &e, err, errlen);
    int gt, gh, gw;
    tubelet_pretrain_grid(m, &gt, &gh, &gw);
    const int64_t N = (int64_t)gt * gh * gw;
    if (n_masked < 1 || n_masked >= N)
        return tb_err_out(tb_fail(&e, TUBELET_ERR_VALUE, "%d masked tokens of %lld: the mask must "
                                  "mask at least one token and leave one visible", n_masked,
                                  (long long)N), &e, err, errlen);
    tubelet_pretrain *p = calloc(1, sizeof *p);
    if (!p) return tb_err_out(tb_fail(&e, TUBELET_ERR_MEMORY, "out of memory"), &e, err, errlen);
    p->m = m, p->B = B, p->grads = grads, p->dd = decoder_dims(m);
    p->dw = m->fam->decoder_weights(&m->w);
    p->dg = grads ? m->fam->decoder_weights(&grads->g) : NULL;
    p->N = N, p->M = n_masked, p->V = N - n_masked, p->P = tubelet_pretrain_patch_pixels(m);
    decoder_view(p);
    char msg[1024];
    int rc = tb_state_new_visible(&p->enc, m, B, T, H, W, p->V, &e);
    /* the decoder reads the encoder's outputs and hands its gradients back: one order of work */
    if (!rc && (rc = tb_state_new_after(&p->ds, &p->dec, B, T, H, W, p->enc, &e)))
        tb_prefix(&e, rc, "decoder: ");
    if (grads) p->dec_g = grads->g, p->dec_g.blocks = p->dg->blocks;
    if (!rc && grads &&
        ((rc = tb_state_enable_training(p->enc, checkpoint, grads, &grads->g, msg, sizeof msg)) ||
         (rc = tb_state_enable_training(p->ds, checkpoint, grads, &p->dec_g, msg, sizeof msg))))
        tb_fail(&e, rc, "%s", msg);
    const int64_t D = c->hidden, Dd = p->dd.hidden, BV = B * p->V, BM = B * p->M;
    const int64_t sizes[] = {BV * D, BV * D, BV * Dd, BM * Dd, BM * Dd, BM * p->P, BM * p->P,
                             BM * p->P, BM * Dd, BM * Dd, BV * D};
    float **bufs[] = {&p->enc_x,  &p->enc_out, &p->y,       &p->tail,    &p->normed, &p->logits,
                      &p->target, &p->dlogits, &p->dnormed, &p->dtail,   &p->denc};
    size_t total = 0;
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) total += ((size_t)sizes[i] + 15) & ~(size_t)15;
    if (!rc) {
        p->arena = TB_RUN(&m->be, mem_alloc, sizeof(float) * total);
        p->masked = malloc(sizeof(int32_t) * (size_t)BM);
        p->visible = malloc(sizeof(int32_t) * (size_t)BV);
        if (!p->arena || !p->masked || !p->visible)
            rc = tb_fail(&e, TUBELET_ERR_MEMORY, "out of memory: pretraining needs %.1f MB",
                         total * 4.0 / 1e6);
    }
    /* the targets' un-normalisation, where the kernels read it (tb_state_share: once) */
    if (!rc && !(rc = tb_state_share(p->ds, imagenet_mean, sizeof imagenet_mean, &e)))
        rc = tb_state_share(p->ds, imagenet_std, sizeof imagenet_std, &e);
    if (rc) {
        tubelet_pretrain_free(p);
        return tb_err_out(rc, &e, err, errlen);
    }
    p->arena_floats = total;
    float *q = p->arena;
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
        *bufs[i] = q;
        q += ((size_t)sizes[i] + 15) & ~(size_t)15;
    }
    *out = p;
    return TUBELET_OK;
}

size_t tubelet_pretrain_bytes(const tubelet_pretrain *p) {
    return tubelet_state_bytes(p->enc) + tubelet_state_bytes(p->ds) + p->arena_floats * sizeof(float);
}

void tubelet_pretrain_logits_shape(const tubelet_pretrain *p, tubelet_shape *sh) {
    *sh = (tubelet_shape){3, {p->B, p->M, p->P}};
}

const float *tubelet_pretrain_targets(const tubelet_pretrain *p) { return p->target; }
const int32_t *tubelet_pretrain_masked(const tubelet_pretrain *p) { return p->masked; }

/* ---- targets ---- */

/* The pixels of every masked tubelet, as HF cuts them (the table's patch_targets): un-normalised
 * with ImageNet's mean and std (3 channels), each patch a row in (dt, dy, dx, channel) order, and
 * with norm_pix_loss normalised per patch and channel: (x - mean) / (std + 1e-6), std unbiased. */
static void make_targets(tubelet_pretrain *p, const float *pix) {
    const tubelet_state *s = p->enc;
    const tb_config *c = &p->m->cfg;
    const tb_patch_geom g = {p->B, s->T, c->num_channels, s->H, s->W, c->tubelet_t, c->patch_h,
                             c->patch_w, s->grid_t, s->grid_h, s->grid_w};
    const int unnorm = c->num_channels == 3;
    TB_RUN(&p->ds->be, patch_targets, p->target, pix, &g, p->masked, p->B * p->M, p->M,
           unnorm ? imagenet_mean : NULL, unnorm ? imagenet_std : NULL, p->dd.norm_pix_loss);
}

/* ---- forward ---- */

/* sequence_output = videomae.layernorm(x) (none with mean pooling), then encoder_to_decoder. */
static void encoder_to_decoder(tubelet_pretrain *p) {
    const tb_backend *ops = &p->enc->be;
    const tubelet_model *m = p->m;
    const int64_t D = m->cfg.hidden, Dd = p->dd.hidden, R = p->enc->rows;
    TB_RUN(ops, copy, p->enc_x, p->enc->x, R * D);
    if (m->has_final_ln)
        TB_RUN(ops, layernorm, p->enc_out, D, p->enc_x, D, m->w.final_ln.w, m->w.final_ln.b, R, D,
               m->w.final_ln.eps);
    else
        TB_RUN(ops, copy, p->enc_out, p->enc_x, R * D);
    TB_RUN(ops, linear, p->enc->lowp, p->y, Dd, p->enc_out, &p->dw->enc_to_dec, NULL, R, Dd, D, 0);
}

/* Its backward: dy (B V, Dd) → dL/d(last block's output) into the encoder's train->dx. */
static void encoder_to_decoder_backward(tubelet_pretrain *p, const float *dy) {
    const tb_backend *ops = &p->enc->be;
    const tubelet_model *m = p->m;
    const tb_weightset *g = &p->grads->g;
    const int64_t D = m->cfg.hidden, Dd = p->dd.hidden, R = p->enc->rows;
    float *dx = p->enc->train->dx;
    TB_RUN(ops, linear_backward, p->enc->lowp, p->denc, D, (float *)p->dg->enc_to_dec.w, NULL, dy,
           Dd, p->enc_out, D, p->dw->enc_to_dec.w, R, Dd, D, 0);
    if (m->has_final_ln) {
        TB_RUN(ops, zero, dx, R * D);
        TB_RUN(ops, layernorm_backward, dx, p->denc, p->enc_x, m->w.final_ln.w,
               (float *)g->final_ln.w, (float *)g->final_ln.b, R, D, m->w.final_ln.eps);
    } else {
        TB_RUN(ops, copy, dx, p->denc, R * D);
    }
}

/* x_full = [y + pos(visible); mask_token + pos(masked)] per clip: the visible tokens first, in
 * token order, then the masked ones (HF does not unshuffle; it shuffles the positions). */
static void decoder_tokens(tubelet_pretrain *p) {
    const tb_backend *ops = &p->ds->be;
    const int64_t Dd = p->dd.hidden, N = p->N, V = p->V, M = p->M;
    const float *pos = p->dw->pos, *tok = p->dw->mask_token;
    float *x = p->ds->x;
    for (int64_t b = 0; b < p->B; b++) {
        TB_RUN(ops, add_rows, x + b * N * Dd, Dd, p->y + b * V * Dd, Dd, pos, Dd,
               p->visible + b * V, NULL, 0, V, Dd);
        TB_RUN(ops, add_rows, x + (b * N + V) * Dd, Dd, tok, 0, pos, Dd, p->masked + b * M, NULL, 0,
               M, Dd);
    }
}

/* Its backward: dL/dx_full (the decoder's train->dx) → dy (visible rows, returned in place of
 * the decoder's first V rows of each clip... copied out to p->y) and the mask token's gradient. */
static void decoder_tokens_backward(tubelet_pretrain *p) {
    const int64_t Dd = p->dd.hidden, N = p->N, V = p->V, M = p->M;
    const tb_backend *ops = &p->ds->be;
    const float *dx = p->ds->train->dx;
    float *gtok = (float *)p->dg->mask_token;
    for (int64_t b = 0; b < p->B; b++) {
        TB_RUN(ops, copy, p->y + b * V * Dd, dx + b * N * Dd, V * Dd);
        TB_RUN(ops, add_rows, gtok, 0, gtok, 0, dx + (b * N + V) * Dd, Dd, NULL, NULL, 0, M, Dd);
    }
}

/* logits = head(norm(x_full[:, -M:])) */
static void decoder_head(tubelet_pretrain *p) {
    const tb_backend *ops = &p->ds->be;
    const tb_decoder_weights *w = p->dw;
    const int64_t Dd = p->dd.hidden, N = p->N, V = p->V, M = p->M, BM = p->B * M;
    for (int64_t b = 0; b < p->B; b++)
        TB_RUN(ops, copy, p->tail + b * M * Dd, p->ds->x + (b * N + V) * Dd, M * Dd);
    TB_RUN(ops, layernorm, p->normed, Dd, p->tail, Dd, w->norm.w, w->norm.b, BM, Dd, w->norm.eps);
    TB_RUN(ops, linear, p->ds->lowp, p->logits, p->P, p->normed, &w->head, w->head.b, BM, p->P,
           Dd, 0);
}

/* Its backward: dlogits → dL/dx_full in the decoder's train->dx (zero on the visible rows). */
static void decoder_head_backward(tubelet_pretrain *p) {
    const tb_backend *ops = &p->ds->be;
    const tb_decoder_weights *w = p->dw, *g = p->dg;
    const int64_t Dd = p->dd.hidden, N = p->N, V = p->V, M = p->M, BM = p->B * M;
    float *dx = p->ds->train->dx;
    TB_RUN(ops, linear_backward, p->ds->lowp, p->dnormed, Dd, (float *)g->head.w,
           (float *)g->head.b, p->dlogits, p->P, p->normed, Dd, w->head.w, BM, p->P, Dd, 0);
    TB_RUN(ops, zero, p->dtail, BM * Dd);
    TB_RUN(ops, layernorm_backward, p->dtail, p->dnormed, p->tail, w->norm.w, (float *)g->norm.w,
           (float *)g->norm.b, BM, Dd, w->norm.eps);
    TB_RUN(ops, zero, dx, p->B * N * Dd);
    for (int64_t b = 0; b < p->B; b++)
        TB_RUN(ops, copy, dx + (b * N + V) * Dd, p->dtail + b * M * Dd, M * Dd);
}

/* The end of a pass over both states: each one's status read and cleared (tb_pass_status), the
 * encoder's failure reported first (the decoder runs on its outputs). */
static int pass_status(tubelet_pretrain *p, char *err, size_t errlen) {
    const int rc = tb_pass_status(p->enc, err, errlen);
    const int rd = tb_pass_status(p->ds, rc ? NULL : err, errlen);
    return rc ? rc : rd;
}

int tubelet_pretrain_step(tubelet_pretrain *p, const float *pix, const uint8_t *mask,
                          int backward, float *loss, float *logits, char *err, size_t errlen) {
    tb_err e = {{0}};
    tubelet_model *m = p->m;
    if (backward && !p->grads)
        return tb_err_out(tb_fail(&e, TUBELET_ERR_ARG, "the pretraining state was made without "
                                  "gradients"), &e, err, errlen);
    int rc = tb_state_pixels(p->enc, &pix, err, errlen);
    if (rc) return rc;
    if ((backward && (rc = tb_grads_status(p->grads, &e))) ||
        (rc = tb_state_set_visible(p->enc, mask, &e)))
        return tb_err_out(rc, &e, err, errlen);
    for (int64_t b = 0, k = 0, j = 0; b < p->B; b++)
        for (int64_t i = 0; i < p->N; i++)
            if (mask[b * p->N + i]) p->masked[k++] = (int32_t)i;
            else p->visible[j++] = (int32_t)i;
    /* the step's token lists where the decoder's kernels read them: their copies refreshed */
    if ((rc = tb_state_share(p->ds, p->masked, sizeof(int32_t) * (size_t)(p->B * p->M), &e)) ||
        (rc = tb_state_share(p->ds, p->visible, sizeof(int32_t) * (size_t)(p->B * p->V), &e)))
        return tb_err_out(rc, &e, err, errlen);
    p->dec.n_threads = m->n_threads;
    tb_encode(p->enc, pix, m->cfg.layers);
    encoder_to_decoder(p);
    decoder_tokens(p);
    for (int l = 0; l < p->dd.layers; l++) tb_encoder_block(p->ds, l);
    decoder_head(p);
    make_targets(p, pix);
    /* MSELoss over every element of the masked tokens' patches, and its gradient */
    const int64_t n = p->B * p->M * p->P;
    const double l = TB_RUN(&p->ds->be, mse, backward ? p->dlogits : NULL, p->logits, p->target, n);
    if (loss) *loss = (float)l;
    if (logits) TB_RUN(&p->ds->be, to_host, logits, p->logits, sizeof(float) * (size_t)n);
    if ((rc = pass_status(p, err, errlen))) return rc;
    if (!isfinite(l))
        return tb_err_out(tb_fail(&e, TUBELET_ERR_VALUE, "the loss is not finite (%g)", l), &e, err,
                          errlen);
    if (!backward) return TUBELET_OK;
    decoder_head_backward(p);
    tb_encoder_backward(p->ds);
    decoder_tokens_backward(p);
    encoder_to_decoder_backward(p, p->y);
    tb_encoder_backward(p->enc);
    tb_embed_backward(p->enc);
    tb_grads_written(p->grads); /* a device backend's: copied when the caller reads them */
    return pass_status(p, err, errlen);
}

/* ---- cost ---- */

double tubelet_pretrain_flop(const tubelet_model *m, double ratio, double *enc_visible,
                             double *enc_all, double *decoder) {
    const tb_config *c = &m->cfg;
    const double gt = tb_grid_t(c, c->num_frames),
                 n = (double)tb_grid_h(c, c->image_h) * tb_grid_w(c, c->image_w), N = gt * n;
    const double M = gt * (double)(int64_t)(ratio * n), V = N - M, D = c->hidden;
    const tb_decoder_dims dd = decoder_dims(m);
    const double Dd = dd.hidden, Id = dd.intermediate, P = tubelet_pretrain_patch_pixels(m);
    /* the embedding covers every patch; the blocks see the visible tokens only */
    const double ev = tb_clip_flop(c, gt, n, 0, tb_attn_flop(V, 1, V, D), V, 0);
    const double ea = tb_clip_flop(c, gt, n, 0, tb_attn_flop(N, 1, N, D), N, 0);
    const double dec = 2 * V * D * Dd + dd.layers * (tb_attn_flop(N, 1, N, Dd) + 4 * N * Dd * Id) +
                       2 * M * Dd * P;
    if (enc_visible) *enc_visible = ev;
    if (enc_all) *enc_all = ea;
    if (decoder) *decoder = dec;
    return ev + dec;
}

int tubelet_pretrain_decoder(const tubelet_model *m, int what) {
    const tb_decoder_dims d = decoder_dims(m);
    const int v[5] = {d.layers, d.hidden, d.heads, d.intermediate, d.norm_pix_loss};
    return what >= 0 && what < 5 ? v[what] : 0;
}
