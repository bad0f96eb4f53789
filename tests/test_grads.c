/* Gradient parity with PyTorch autograd (grad_parity.h: each fixture of
 * tests/fixtures/grad_list.txt, loss and every parameter's gradient against
 * tools/make_grad_fixtures.py's), and the training features' own checks: concurrent states, label
 * smoothing, drop path, dropout, finite differences. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grad_parity.h"
#include "parity.h"
#include "io/npy.h"
#include "io/safetensors.h"
#include "kernels/ops.h"
#include "tubelet.h"

/* A fixture loaded for training with writable weights (the finite-difference tests nudge them),
 * with its input and labels. Returns 1 on success. */
typedef struct {
    npy_array x, y;
    tubelet_model *m;
    tubelet_grads *g;
    tubelet_state *s;
} trainable;

static int trainable_load(trainable *t, const char *fixture) {
    char dir[1024], path[1200], err[1024] = "";
    tb_err e = {{0}};
    memset(t, 0, sizeof *t);
    snprintf(dir, sizeof dir, "%s/%s", parity_fixtures_dir(), fixture);
    snprintf(path, sizeof path, "%s/input.npy", dir);
    int ok = !npy_read(path, &t->x, &e);
    snprintf(path, sizeof path, "%s/labels.npy", dir);
    ok = ok && !npy_read(path, &t->y, &e);
    tubelet_load_params lp = tubelet_load_default_params();
    lp.no_mmap = 1;
    ok = ok && !tubelet_model_load(&t->m, dir, &lp, err, sizeof err) &&
         !tubelet_grads_new(&t->g, t->m, err, sizeof err) &&
         !tubelet_state_new(&t->s, t->m, (int)t->x.shape[0], (int)t->x.shape[1],
                            (int)t->x.shape[3], (int)t->x.shape[4], err, sizeof err) &&
         !tubelet_state_enable_training(t->s, 0, t->g, err, sizeof err);
    CHECK(ok, "%s: training setup failed: %s %s", fixture, err, e.msg);
    return ok;
}

static void trainable_free(trainable *t) {
    tubelet_state_free(t->s);
    tubelet_grads_free(t->g);
    tubelet_model_free(t->m);
    npy_free(&t->x), npy_free(&t->y);
}

/* Values and gradient (in t's gradients) of the named parameter (NULL if absent). */
static float *find_param(trainable *t, const char *name, const float **grad, tubelet_shape *sh) {
    for (int i = 0; i < tubelet_model_n_tensors(t->m); i++) {
        if (!strcmp(tubelet_model_tensor(t->m, i, sh, NULL), name)) {
            *grad = tubelet_grads_at(t->g, i);
            return tubelet_model_tensor_writable(t->m, i); /* loaded without mmap */
        }
    }
    return NULL;
}

/* Largest |central finite difference - g[k]| over the first n entries of param (h = 1e-2);
 * infinite when a step fails. */
static double fd_worst(trainable *t, float *param, const float *g, int n) {
    char err[1024] = "";
    double worst = 0;
    for (int k = 0; k < n; k++) {
        const float h = 1e-2f, saved = param[k];
        float lp1, lm1;
        param[k] = saved + h;
        int rc = tubelet_forward_backward(t->s, t->x.data, t->y.data, &lp1, NULL, err, sizeof err);
        param[k] = saved - h;
        if (!rc)
            rc = tubelet_forward_backward(t->s, t->x.data, t->y.data, &lm1, NULL, err, sizeof err);
        param[k] = saved;
        CHECK(rc == 0, "finite differences: a training step failed: %s", err);
        if (rc) return INFINITY;
        worst = fmax(worst, fabs((lp1 - lm1) / (2.0 * h) - g[k]));
    }
    return worst;
}

/* The frozen encoder (V-JEPA 2's attentive probe; tubelet_state_freeze_encoder): the loss is the
 * reference's, the probe's gradients are transformers' (they do not depend on the encoder's), and
 * every encoder tensor's gradient is exactly zero. Then a dropout rate leaves the frozen
 * encoder's output (and so the loss) unchanged: it runs as in inference. */
static void test_freeze_encoder(const char *fixture) {
    trainable t;
    char path[1200], err[512] = "";
    tb_err e = {{0}};
    st_file *ref = NULL;
    if (!trainable_load(&t, fixture)) return;
    snprintf(path, sizeof path, "%s/%s/grads.safetensors", parity_fixtures_dir(), fixture);
    CHECK(!st_open(&ref, path, 1, &e), "%s: %s", path, e.msg);
    int rc = tubelet_state_freeze_encoder(t.s, 1, err, sizeof err);
    CHECK(rc == 0, "%s: freeze: %s", fixture, err);
    float loss = 0, loss_drop = 0;
    tubelet_grads_zero(t.g);
    rc = tubelet_forward_backward(t.s, t.x.data, t.y.data, &loss, NULL, err, sizeof err);
    CHECK(rc == 0, "%s: frozen step: %s", fixture, err);
    int probe = 0, frozen = 0;
    double worst = 0;
    for (int i = 0; ref && !rc && i < tubelet_model_n_tensors(t.m); i++) {
        tubelet_shape sh;
        const char *name = tubelet_model_tensor(t.m, i, &sh, NULL);
        const float *g = tubelet_grads_at(t.g, i);
        const long k = (long)tubelet_shape_numel(&sh);
        if (!tubelet_model_tensor_is_probe(t.m, i)) {
            frozen++;
            CHECK(check_max_abs(g, k) == 0, "%s: frozen %s has a gradient", fixture, name);
            continue;
        }
        probe++;
        const st_tensor *r = st_find(ref, name);
        CHECK(r && r->nbytes == sizeof(float) * (size_t)k, "%s: no reference for %s", fixture, name);
        if (!r || r->nbytes != sizeof(float) * (size_t)k) continue;
        float *rv = malloc(r->nbytes);
        memcpy(rv, r->data, r->nbytes);
        const double rel = check_max_abs_diff(g, rv, k) / fmax(check_max_abs(rv, k), 1e-6);
        if (!strstr(name, "k_proj.bias")) worst = fmax(worst, rel); /* zero gradient: noise */
        free(rv);
    }
    CHECK(worst <= 1e-3, "%s: frozen probe gradients off by %.3g", fixture, worst);
    CHECK(probe > 0 && frozen > 0, "%s: %d probe and %d frozen tensors", fixture, probe, frozen);
    /* the encoder's output kept and handed back: the same loss and gradients, pixels unread */
    tubelet_shape hs;
    tubelet_state_hidden_shape(t.s, &hs);
    const int64_t nh = tubelet_shape_numel(&hs), nt = tubelet_model_n_tensors(t.m);
    float *enc = malloc(sizeof(float) * (size_t)nh), **g0 = calloc((size_t)nt, sizeof *g0);
    rc = tubelet_state_encoder_output(t.s, enc, err, sizeof err);
    CHECK(rc == 0, "%s: encoder output: %s", fixture, err);
    for (int i = 0; i < nt; i++) {
        tubelet_shape sh;
        tubelet_model_tensor(t.m, i, &sh, NULL);
        g0[i] = malloc(sizeof(float) * (size_t)tubelet_shape_numel(&sh));
        memcpy(g0[i], tubelet_grads_at(t.g, i), sizeof(float) * (size_t)tubelet_shape_numel(&sh));
    }
    float loss_given = 0;
    tubelet_grads_zero(t.g);
    rc = tubelet_state_set_encoder_output(t.s, enc, err, sizeof err);
    if (!rc) rc = tubelet_forward_backward(t.s, NULL, t.y.data, &loss_given, NULL, err, sizeof err);
    CHECK(rc == 0 && loss_given == loss, "%s: the kept encoder output gave loss %.7f, not %.7f: %s",
          fixture, loss_given, loss, err);
    int same = 1;
    for (int i = 0; i < nt; i++) {
        tubelet_shape sh;
        tubelet_model_tensor(t.m, i, &sh, NULL);
        same &= !memcmp(g0[i], tubelet_grads_at(t.g, i), sizeof(float) * (size_t)tubelet_shape_numel(&sh));
        free(g0[i]);
    }
    CHECK(same, "%s: the kept encoder output gave other gradients", fixture);
    free(g0), free(enc);
    tubelet_grads_zero(t.g);
    tubelet_state_set_dropout(t.s, 0.5f, 0.5f, 7, 1);
    rc = tubelet_forward_backward(t.s, t.x.data, t.y.data, &loss_drop, NULL, err, sizeof err);
    CHECK(rc == 0 && loss_drop == loss, "%s: dropout changed the frozen encoder's loss: %.7f vs %.7f",
          fixture, loss_drop, loss);
    printf("  %-24s frozen encoder: loss %.6f, %d probe gradients (worst relative error %.2e), "
           "%d frozen tensors at zero\n", fixture, loss, probe, worst, frozen);
    st_close(ref);
    trainable_free(&t);
}

/* Probe-only gradients (tubelet_grads_new_probe): the encoder's tensors have none (NULL), the
 * state trains with its encoder frozen without being told, and the step gives the probe exactly
 * the gradients full gradients with tubelet_state_freeze_encoder give; the encoder cannot be
 * thawed, pretraining and the families without a probe refuse them. */
static void test_probe_grads(const char *fixture) {
    trainable t;
    char err[512] = "";
    if (!trainable_load(&t, fixture)) return;
    tubelet_grads *pg = NULL;
    tubelet_state *ps = NULL;
    int rc = tubelet_grads_new_probe(&pg, t.m, err, sizeof err);
    CHECK(rc == 0, "%s: probe gradients: %s", fixture, err);
    if (!rc) rc = tubelet_state_new(&ps, t.m, (int)t.x.shape[0], (int)t.x.shape[1],
                                    (int)t.x.shape[3], (int)t.x.shape[4], err, sizeof err);
    if (!rc) rc = tubelet_state_enable_training(ps, 1, pg, err, sizeof err);
    CHECK(rc == 0, "%s: probe state: %s", fixture, err);
    if (rc) goto done;
    CHECK(tubelet_state_freeze_encoder(ps, 0, err, sizeof err) == TUBELET_ERR_ARG,
          "%s: the encoder was thawed over probe-only gradients", fixture);
    rc = tubelet_state_freeze_encoder(t.s, 1, err, sizeof err);
    float loss = 0, loss_p = 0;
    if (!rc) rc = tubelet_forward_backward(t.s, t.x.data, t.y.data, &loss, NULL, err, sizeof err);
    if (!rc) rc = tubelet_forward_backward(ps, t.x.data, t.y.data, &loss_p, NULL, err, sizeof err);
    CHECK(rc == 0 && loss == loss_p, "%s: probe-only loss %.7f, frozen loss %.7f: %s", fixture,
          loss_p, loss, err);
    int probe = 0, none = 0, same = 1;
    for (int i = 0; !rc && i < tubelet_model_n_tensors(t.m); i++) {
        tubelet_shape sh;
        tubelet_model_tensor(t.m, i, &sh, NULL);
        const float *g = tubelet_grads_at(pg, i);
        if (!tubelet_model_tensor_is_probe(t.m, i)) {
            none += g == NULL;
            continue;
        }
        probe++;
        same &= g && !memcmp(g, tubelet_grads_at(t.g, i),
                             sizeof(float) * (size_t)tubelet_shape_numel(&sh));
    }
    CHECK(same && probe > 0, "%s: probe-only gradients differ from the frozen step's", fixture);
    CHECK(none == tubelet_model_n_tensors(t.m) - probe, "%s: %d encoder tensors of %d have a "
          "probe-only gradient", fixture, tubelet_model_n_tensors(t.m) - probe - none,
          tubelet_model_n_tensors(t.m) - probe);
    printf("  %-24s probe-only gradients: %d tensors, %d without, the frozen step's exactly\n",
           fixture, probe, none);
done:
    tubelet_state_free(ps);
    tubelet_grads_free(pg);
    trainable_free(&t);
}

/* The families whose runner cannot freeze an encoder have no probe-only gradients. */
static void test_probe_grads_refused(const char *fixture) {
    char dir[1024], err[512] = "";
    snprintf(dir, sizeof dir, "%s/%s", parity_fixtures_dir(), fixture);
    tubelet_load_params lp = tubelet_load_default_params();
    lp.no_mmap = 1;
    tubelet_model *m = NULL;
    tubelet_grads *g = NULL;
    int rc = tubelet_model_load(&m, dir, &lp, err, sizeof err);
    CHECK(rc == 0, "%s: %s", fixture, err);
    if (!rc) {
        rc = tubelet_grads_new_probe(&g, m, err, sizeof err);
        CHECK(rc == TUBELET_ERR_UNSUPPORTED && !g && strstr(err, "freeze"),
              "%s: probe-only gradients: rc %d (%s)", fixture, rc, err);
    }
    tubelet_grads_free(g);
    tubelet_model_free(m);
}

/* Label smoothing has no PyTorch fixture: check d loss / d classifier.bias against central
 * finite differences of the loss itself (the bias enters the logits linearly). */
static void test_label_smoothing(void) {
    trainable t;
    char err[1024];
    if (trainable_load(&t, "vivit_m1")) {
        tubelet_state_set_label_smoothing(t.s, 0.1f);
        const float *g = NULL;
        tubelet_shape sh;
        float *bias = find_param(&t, "classifier.bias", &g, &sh);
        float loss;
        tubelet_grads_zero(t.g);
        tubelet_forward_backward(t.s, t.x.data, t.y.data, &loss, NULL, err, sizeof err);
        float gb[64] = {0}; /* later calls add into the gradients: keep this one */
        const int nb = bias && sh.dim[0] <= 64 ? (int)sh.dim[0] : 0;
        for (int k = 0; k < nb; k++) gb[k] = g[k];
        double worst = fd_worst(&t, bias, gb, nb);
        CHECK(nb > 0 && worst < 2e-4, "label smoothing: gradient vs finite differences %.3g", worst);
        printf("  label smoothing 0.1: classifier.bias gradient vs finite differences %.2e\n", worst);
    }
    trainable_free(&t);
}

/* Drop path: masks change the loss on some steps; with the mask of one step fixed, the loss is a
 * smooth function again, so gradients of parameters inside the dropped branches (the last block's
 * MLP and attention output biases) are checked against finite differences. */
static void test_drop_path(const char *fixture, const char *const *names, int n_names) {
    trainable t;
    char err[1024];
    if (trainable_load(&t, fixture)) {
        float base, loss;
        tubelet_forward_backward(t.s, t.x.data, t.y.data, &base, NULL, err, sizeof err);
        int differs = 0, step = -1;
        for (int k = 0; k < 8; k++) {
            tubelet_state_set_drop_path(t.s, 0.5f, 7, k);
            tubelet_forward_backward(t.s, t.x.data, t.y.data, &loss, NULL, err, sizeof err);
            if (fabsf(loss - base) > 1e-6f) differs++, step = step < 0 ? k : step;
        }
        CHECK(differs > 0, "%s: drop path 0.5 never changed the loss in 8 steps", fixture);
        double worst = 0;
        for (int n = 0; n < n_names && step >= 0; n++) {
            const float *g = NULL;
            tubelet_shape sh;
            float *bias = find_param(&t, names[n], &g, &sh);
            CHECK(bias != NULL, "no %s", names[n]);
            if (!bias) continue;
            tubelet_state_set_drop_path(t.s, 0.5f, 7, step);
            tubelet_grads_zero(t.g);
            tubelet_forward_backward(t.s, t.x.data, t.y.data, &loss, NULL, err, sizeof err);
            float gb[8]; /* later calls add into the gradients: keep this one */
            for (int k = 0; k < 8; k++) gb[k] = g[k];
            worst = fmax(worst, fd_worst(&t, bias, gb, 8));
        }
        CHECK(worst < 2e-4, "%s drop path: gradient vs finite differences %.3g", fixture, worst);
        printf("  drop path 0.5 %-28s loss changed on %d of 8 steps; gradients vs finite "
               "differences %.2e\n", fixture, differs, worst);
    }
    trainable_free(&t);
}

/* Hidden dropout masks: the kept fraction of a large tensor is 1 - p within 5 standard
 * deviations, kept values are exactly x / (1 - p), and the mask of an element depends only on its
 * index (a tensor dropped in two pieces, or by the per-row serial kernel, gets the same mask). */
static void test_dropout_masks(void) {
    const int64_t n = 1 << 22;
    float *x = malloc(sizeof(float) * n), *y = malloc(sizeof(float) * n);
    const float rates[] = {0.1f, 0.5f};
    for (int k = 0; k < 2; k++) {
        const float p = rates[k];
        const tb_keep_rule r = tb_keep_rule_make(p);
        for (int64_t i = 0; i < n; i++) x[i] = y[i] = 1.0f + (float)(i % 7);
        tb_dropout(x, n, 99, 0, r);
        tb_dropout(y, n / 3, 99, 0, r);
        tb_dropout_serial(y + n / 3, n - n / 3, 99, n / 3, r);
        int64_t kept = 0, bad = 0;
        for (int64_t i = 0; i < n; i++) {
            kept += x[i] != 0;
            bad += x[i] != 0 && x[i] != (1.0f + (float)(i % 7)) * r.scale;
        }
        const double frac = (double)kept / (double)n, sd = sqrt(p * (1 - p) / (double)n);
        CHECK(fabs(frac - (1 - p)) < 5 * sd, "dropout %.1f: kept %.6f, expected %.6f (sd %.1e)",
              p, frac, 1 - p, sd);
        CHECK(bad == 0, "dropout %.1f: %lld kept values are not x / (1 - p)", p, (long long)bad);
        CHECK(memcmp(x, y, sizeof(float) * n) == 0, "dropout %.1f: the mask depends on the split",
              p);
        printf("  dropout masks p %.1f: kept %.6f of %lld (1 - p = %.1f, sd %.1e)\n", p, frac,
               (long long)n, 1 - p, sd);
    }
    free(x), free(y);
}

/* A parameter to check against finite differences. */
typedef struct {
    const char *name;
    int64_t lo, hi; /* flat range searched for the largest gradients (hi = 0: all) */
} fd_param;

static double fd_worst_rel = 0;

/* fd_worst at the n_entries (≤ 8) entries of the named parameter with the largest gradients;
 * also tracks the worst error relative to their largest gradient. */
static double fd_top(trainable *t, const fd_param *fp, int n_entries) {
    const float *g = NULL;
    tubelet_shape sh;
    char err[1024];
    float loss, *param = find_param(t, fp->name, &g, &sh);
    CHECK(param != NULL, "no parameter %s", fp->name);
    if (!param) return INFINITY;
    tubelet_grads_zero(t->g);
    tubelet_forward_backward(t->s, t->x.data, t->y.data, &loss, NULL, err, sizeof err);
    const int64_t hi = fp->hi ? fp->hi : tubelet_shape_numel(&sh);
    int idx[8];
    float gsel[8], gmax = 0;
    for (int k = 0; k < n_entries; k++) { /* the entries with the largest |g|, in [lo, hi) */
        idx[k] = -1;
        for (int64_t i = fp->lo; i < hi; i++) {
            int taken = 0;
            for (int q = 0; q < k; q++) taken |= idx[q] == i;
            if (!taken && (idx[k] < 0 || fabsf(g[i]) > fabsf(g[idx[k]]))) idx[k] = (int)i;
        }
        gsel[k] = g[idx[k]];
        gmax = fmaxf(gmax, fabsf(gsel[k]));
    }
    double worst = 0;
    for (int k = 0; k < n_entries; k++) {
        float gk = gsel[k], *pk = param + idx[k];
        double w = fd_worst(t, pk, &gk, 1);
        worst = fmax(worst, w);
    }
    fd_worst_rel = fmax(fd_worst_rel, worst / fmax(gmax, 1e-6));
    return worst;
}

/* Dropout of one family, with both rates on: rate 0 gives the loss without dropout bit for bit;
 * masks change the loss and differ between steps; one (seed, step) gives bit-identical losses and
 * gradients twice; tubelet_forward on the training state stays in evaluation mode (no dropout, no
 * drop path); and with one step's masks fixed, the gradients of parameters upstream of every
 * dropout site — the embeddings, the query weights in front of the attention dropout — agree with
 * central finite differences of the loss (checked at the entries with the largest gradients). */
static void test_dropout_family(const char *fixture, const fd_param *params, int n_params) {
    trainable t;
    char err[1024];
    if (!trainable_load(&t, fixture)) {
        trainable_free(&t);
        return;
    }
    tubelet_shape ls;
    tubelet_state_logits_shape(t.s, &ls);
    const size_t nl = (size_t)tubelet_shape_numel(&ls);
    float *eval0 = malloc(sizeof(float) * nl), *eval1 = malloc(sizeof(float) * nl);
    float base, zero, a1, a2, other;
    tubelet_forward(t.s, t.x.data, eval0, NULL, err, sizeof err);
    tubelet_forward_backward(t.s, t.x.data, t.y.data, &base, NULL, err, sizeof err);
    tubelet_state_set_dropout(t.s, 0, 0, 7, 3);
    tubelet_forward_backward(t.s, t.x.data, t.y.data, &zero, NULL, err, sizeof err);
    CHECK(memcmp(&zero, &base, sizeof base) == 0, "%s: dropout 0 gives loss %.9g, without %.9g",
          fixture, zero, base);
    /* the same step twice: the same loss and gradients, bit for bit */
    const float *g = NULL;
    tubelet_shape sh;
    find_param(&t, params[0].name, &g, &sh);
    const int64_t ng = g ? tubelet_shape_numel(&sh) : 0;
    float *g1 = malloc(sizeof(float) * (size_t)(ng + 1));
    tubelet_state_set_dropout(t.s, 0.2f, 0.2f, 7, 3);
    tubelet_grads_zero(t.g);
    tubelet_forward_backward(t.s, t.x.data, t.y.data, &a1, NULL, err, sizeof err);
    if (g) memcpy(g1, g, sizeof(float) * (size_t)ng);
    tubelet_grads_zero(t.g);
    tubelet_forward_backward(t.s, t.x.data, t.y.data, &a2, NULL, err, sizeof err);
    CHECK(g && memcmp(&a1, &a2, sizeof a1) == 0 && memcmp(g1, g, sizeof(float) * (size_t)ng) == 0,
          "%s: the same (seed, step) gave losses %.9g and %.9g or other gradients", fixture, a1,
          a2);
    CHECK(fabsf(a1 - base) > 1e-6f, "%s: dropout 0.2 left the loss unchanged (%.7f)", fixture, a1);
    tubelet_state_set_dropout(t.s, 0.2f, 0.2f, 7, 4);
    tubelet_forward_backward(t.s, t.x.data, t.y.data, &other, NULL, err, sizeof err);
    CHECK(fabsf(other - a1) > 1e-6f, "%s: steps 3 and 4 drew the same masks (loss %.7f)", fixture,
          a1);
    /* evaluation on the training state, after a step with dropout and drop path */
    tubelet_state_set_drop_path(t.s, 0.5f, 7, 3);
    tubelet_forward_backward(t.s, t.x.data, t.y.data, &other, NULL, err, sizeof err);
    tubelet_forward(t.s, t.x.data, eval1, NULL, err, sizeof err);
    CHECK(memcmp(eval0, eval1, sizeof(float) * nl) == 0,
          "%s: tubelet_forward after a training step with dropout differs from before", fixture);
    tubelet_state_set_drop_path(t.s, 0, 7, 3);
    /* finite differences with the masks of step 3 fixed: both rates, then attention dropout alone
     * for the first parameter (the query weights) */
    double worst = 0;
    for (int i = 0; i < n_params; i++) worst = fmax(worst, fd_top(&t, &params[i], 3));
    tubelet_state_set_dropout(t.s, 0, 0.3f, 7, 3);
    worst = fmax(worst, fd_top(&t, &params[0], 3));
    CHECK(worst < 2e-4, "%s dropout: gradient vs finite differences %.3g", fixture, worst);
    printf("  dropout 0.2/0.2 %-22s loss %.6f (without %.6f); %d parameters vs finite "
           "differences %.2e\n", fixture, a1, base, n_params, worst);
    free(g1), free(eval0), free(eval1);
    trainable_free(&t);
}

/* Gradient checkpointing runs each block's forward again in the backward pass: it must draw the
 * same dropout masks, so the gradients equal those without checkpointing. */
static void test_dropout_checkpointing(const char *fixture) {
    trainable t;
    char err[1024];
    tubelet_state *s2 = NULL;
    if (!trainable_load(&t, fixture) ||
        tubelet_state_new(&s2, t.m, (int)t.x.shape[0], (int)t.x.shape[1], (int)t.x.shape[3],
                          (int)t.x.shape[4], err, sizeof err) ||
        tubelet_state_enable_training(s2, 1, t.g, err, sizeof err)) {
        CHECK(0, "%s: checkpointed state: %s", fixture, err);
        tubelet_state_free(s2), trainable_free(&t);
        return;
    }
    const int n = tubelet_model_n_tensors(t.m);
    size_t total = 0;
    for (int i = 0; i < n; i++) {
        tubelet_shape sh;
        tubelet_model_tensor(t.m, i, &sh, NULL);
        total += (size_t)tubelet_shape_numel(&sh);
    }
    float *ref = malloc(sizeof(float) * total), l1, l2;
    double worst = 0, gmax = 0;
    for (int pass = 0; pass < 2; pass++) {
        tubelet_state *st = pass ? s2 : t.s;
        tubelet_state_set_dropout(st, 0.2f, 0.2f, 11, 5);
        tubelet_state_set_drop_path(st, 0.3f, 11, 5);
        tubelet_grads_zero(t.g);
        tubelet_forward_backward(st, t.x.data, t.y.data, pass ? &l2 : &l1, NULL, err, sizeof err);
        size_t off = 0;
        for (int i = 0; i < n; i++) {
            tubelet_shape sh;
            tubelet_model_tensor(t.m, i, &sh, NULL);
            const float *g = tubelet_grads_at(t.g, i);
            for (int64_t k = 0; k < tubelet_shape_numel(&sh); k++, off++) {
                if (!pass) ref[off] = g[k], gmax = fmax(gmax, fabsf(g[k]));
                else worst = fmax(worst, fabsf(g[k] - ref[off]));
            }
        }
    }
    CHECK(l1 == l2 && worst <= 1e-6 * gmax, "%s: with dropout, checkpointing changes the loss "
          "(%.9g vs %.9g) or the gradients (%.3g)", fixture, l1, l2, worst);
    printf("  dropout + checkpointing %-14s loss %s, gradients differ by %.2e (max |g| %.2e)\n",
           fixture, l1 == l2 ? "identical" : "DIFFERS", worst, gmax);
    free(ref);
    tubelet_state_free(s2);
    trainable_free(&t);
}

static void test_dropout(void) {
    test_dropout_masks();
    /* fused attention kernel (49 tokens, head size 16) */
    const fd_param vivit[] = {{"vivit.encoder.layer.0.attention.attention.query.weight", 0, 0},
                              {"vivit.embeddings.position_embeddings", 0, 0},
                              {"vivit.embeddings.patch_embeddings.projection.bias", 0, 0},
                              {"vivit.encoder.layer.1.intermediate.dense.bias", 0, 0}};
    test_dropout_family("vivit_m1", vivit, 4);
    /* small groups; pos_drop + time_drop, the temporal branch, dropout after the activation.
     * qkv rows [0, D) are the query: D = 48 */
    const fd_param ts[] = {
        {"timesformer.encoder.layer.1.temporal_attention.attention.qkv.weight", 0, 48 * 48},
        {"timesformer.encoder.layer.0.attention.attention.qkv.weight", 0, 48 * 48},
        {"timesformer.embeddings.cls_token", 0, 0},
        {"timesformer.embeddings.position_embeddings", 48, 0}, /* the patches' positions */
        {"timesformer.embeddings.time_embeddings", 0, 0},
        {"timesformer.encoder.layer.0.intermediate.dense.bias", 0, 0},
        {"timesformer.encoder.layer.0.temporal_dense.bias", 0, 0}};
    test_dropout_family("timesformer_divided", ts, 7);
    /* GEMM attention path (49 tokens, head size 12) */
    const fd_param tj[] = {
        {"timesformer.encoder.layer.0.attention.attention.qkv.weight", 0, 48 * 48},
        {"timesformer.embeddings.time_embeddings", 0, 0}};
    test_dropout_family("timesformer_joint", tj, 2);
    const fd_param tso[] = {
        {"timesformer.encoder.layer.0.attention.attention.qkv.weight", 0, 48 * 48},
        {"timesformer.embeddings.position_embeddings", 0, 0}};
    test_dropout_family("timesformer_space_only", tso, 2);
    /* no embedding dropout; 32 tokens: the small-group kernel */
    const fd_param vm[] = {{"videomae.encoder.layer.0.attention.attention.query.weight", 0, 0},
                           {"videomae.embeddings.patch_embeddings.projection.bias", 0, 0}};
    test_dropout_family("videomae_mean", vm, 2);
    /* TimeSformer axial: the width step's own dropout sites; hidden 16, qkv rows [0, 16) */
    const fd_param ax[] = {
        {"timesformer.encoder.layer.1.width_attention.attention.qkv.weight", 0, 16 * 16},
        {"timesformer.encoder.layer.0.temporal_attention.attention.qkv.weight", 0, 16 * 16},
        {"timesformer.encoder.layer.0.attention.attention.qkv.weight", 0, 16 * 16},
        {"timesformer.encoder.layer.0.width_dense.bias", 0, 0},
        {"timesformer.embeddings.cls_token", 0, 0}};
    test_dropout_family("timesformer_axial_odd", ax, 5);
    /* local_global: groups of several lengths */
    const fd_param lg[] = {
        {"timesformer.encoder.layer.1.local_attention.attention.qkv.weight", 0, 16 * 16},
        {"timesformer.encoder.layer.1.attention.attention.qkv.weight", 0, 16 * 16},
        {"timesformer.encoder.layer.0.local_dense.bias", 0, 0}};
    test_dropout_family("timesformer_local_global_odd", lg, 3);
    /* ViViT Models 2-4: the temporal tokens' dropout (Model 2), both attentions (Model 3), both
     * halves of the heads (Model 4: query rows [0, D/2) spatial, [D/2, D) temporal; D = 8) */
    const fd_param m2[] = {{"vivit.temporal_encoder.layer.0.attention.attention.query.weight", 0,
                            0},
                           {"vivit.temporal_embeddings.position_embeddings", 0, 0},
                           {"vivit.layernorm.weight", 0, 0},
                           {"vivit.encoder.layer.0.attention.attention.query.weight", 0, 0},
                           {"vivit.embeddings.position_embeddings", 0, 0}};
    test_dropout_family("vivit_m2_tubelet", m2, 5);
    const fd_param m3[] = {{"vivit.encoder.layer.0.temporal_attention.attention.query.weight", 0,
                            0},
                           {"vivit.encoder.layer.0.attention.attention.query.weight", 0, 0},
                           {"vivit.embeddings.position_embeddings", 0, 0}};
    test_dropout_family("vivit_m3_tubelet", m3, 3);
    const fd_param m4[] = {{"vivit.encoder.layer.0.attention.attention.query.weight", 32, 64},
                           {"vivit.encoder.layer.0.attention.attention.query.weight", 0, 32},
                           {"vivit.embeddings.position_embeddings", 0, 0}};
    test_dropout_family("vivit_m4_tubelet", m4, 3);
    /* the STMixer backbone: layer scale after the attention and MLP output dropout */
    const fd_param st[] = {{"videomae.encoder.layer.0.attention.attention.query.weight", 0, 0},
                           {"videomae.encoder.layer.0.lambda_1", 0, 0},
                           {"videomae.encoder.layer.1.lambda_2", 0, 0},
                           {"videomae.encoder.layer.0.attention.output.dense.bias", 0, 0},
                           {"videomae.encoder.layer.1.output.dense.bias", 0, 0}};
    test_dropout_family("stmixer_backbone", st, 5);
    printf("  dropout: worst |fd - g| / max |g| over the checked entries %.2e\n", fd_worst_rel);
    test_dropout_checkpointing("timesformer_divided");
    test_dropout_checkpointing("vivit_m1");
    test_dropout_checkpointing("timesformer_axial_odd");
    test_dropout_checkpointing("timesformer_local_global_odd");
    test_dropout_checkpointing("vivit_m2_tubelet");
    test_dropout_checkpointing("vivit_m3_tubelet");
    test_dropout_checkpointing("vivit_m4_tubelet");
    test_dropout_checkpointing("stmixer_backbone");
}


/* The model stays read-only during training: two states, each bound to its own tubelet_grads,
 * run tubelet_forward_backward on one model (memory-mapped, so a write to its weights would
 * fault) at the same time from two threads, on different labels; each run's loss and gradients
 * equal, bit for bit, those of the same step run alone. */
typedef struct {
    tubelet_state *s;
    const float *x;
    const int64_t *y;
    float loss;
    int rc;
    char err[1024];
} fb_job;

static void *fb_run(void *p) {
    fb_job *j = p;
    j->rc = tubelet_forward_backward(j->s, j->x, j->y, &j->loss, NULL, j->err, sizeof j->err);
    return NULL;
}

static void test_concurrent_backward(const char *fixture) {
    char dir[1024], path[1200], err[1024] = "";
    tb_err e = {{0}};
    npy_array x = {0}, y = {0};
    tubelet_model *m = NULL;
    tubelet_grads *g[2] = {NULL, NULL};
    tubelet_state *s[2] = {NULL, NULL};
    int64_t *y2 = NULL;
    float *ref[2] = {NULL, NULL}, ref_loss[2] = {0, 0};
    snprintf(dir, sizeof dir, "%s/%s", parity_fixtures_dir(), fixture);
    snprintf(path, sizeof path, "%s/input.npy", dir);
    int ok = !npy_read(path, &x, &e);
    snprintf(path, sizeof path, "%s/labels.npy", dir);
    ok = ok && !npy_read(path, &y, &e);
    tubelet_load_params lp = tubelet_load_default_params();
    lp.n_threads = 2;
    ok = ok && !tubelet_model_load(&m, dir, &lp, err, sizeof err);
    for (int k = 0; ok && k < 2; k++)
        ok = !tubelet_grads_new(&g[k], m, err, sizeof err) &&
             !tubelet_state_new(&s[k], m, (int)x.shape[0], (int)x.shape[1], (int)x.shape[3],
                                (int)x.shape[4], err, sizeof err) &&
             !tubelet_state_enable_training(s[k], 0, g[k], err, sizeof err);
    CHECK(ok, "%s: concurrent training setup failed: %s %s", fixture, err, e.msg);
    /* a state bound to one tubelet_grads refuses a second one */
    CHECK(!ok || tubelet_state_enable_training(s[0], 0, g[1], err, sizeof err) == TUBELET_ERR_ARG,
          "%s: a state accepted a second tubelet_grads", fixture);
    const int n = ok ? tubelet_model_n_tensors(m) : 0;
    size_t total = 0;
    for (int i = 0; i < n; i++) {
        tubelet_shape sh;
        tubelet_model_tensor(m, i, &sh, NULL);
        total += (size_t)tubelet_shape_numel(&sh);
    }
    tubelet_shape ls = {0};
    if (ok) tubelet_state_logits_shape(s[0], &ls);
    y2 = ok ? malloc(sizeof(int64_t) * (size_t)y.numel) : NULL;
    for (size_t r = 0; y2 && r < y.numel; r++) /* other labels: other gradients */
        y2[r] = (((const int64_t *)y.data)[r] + 1) % ls.dim[1];
    fb_job job[2];
    for (int k = 0; k < 2; k++) job[k] = (fb_job){s[k], x.data, k ? y2 : y.data, 0, 0, ""};
    /* alone, one after the other */
    for (int k = 0; ok && y2 && k < 2; k++) {
        fb_run(&job[k]);
        CHECK(job[k].rc == 0, "%s: %s", fixture, job[k].err);
        ref_loss[k] = job[k].loss;
        ref[k] = malloc(sizeof(float) * (total + 1));
        size_t off = 0;
        for (int i = 0; ref[k] && i < n; i++) {
            tubelet_shape sh;
            tubelet_model_tensor(m, i, &sh, NULL);
            const size_t numel = (size_t)tubelet_shape_numel(&sh);
            memcpy(ref[k] + off, tubelet_grads_at(g[k], i), sizeof(float) * numel);
            off += numel;
        }
    }
    /* together */
    int same = ok && y2 && ref[0] && ref[1];
    if (same) {
        tubelet_grads_zero(g[0]), tubelet_grads_zero(g[1]);
        pthread_t th[2];
        int started[2];
        for (int k = 0; k < 2; k++) started[k] = !pthread_create(&th[k], NULL, fb_run, &job[k]);
        for (int k = 0; k < 2; k++) {
            if (started[k]) pthread_join(th[k], NULL);
            else fb_run(&job[k]);
        }
        for (int k = 0; k < 2; k++) {
            CHECK(job[k].rc == 0, "%s: concurrent step %d: %s", fixture, k, job[k].err);
            same = same && !job[k].rc && memcmp(&job[k].loss, &ref_loss[k], sizeof(float)) == 0;
            size_t off = 0;
            for (int i = 0; i < n; i++) {
                tubelet_shape sh;
                tubelet_model_tensor(m, i, &sh, NULL);
                const size_t numel = (size_t)tubelet_shape_numel(&sh);
                same = same &&
                       !memcmp(ref[k] + off, tubelet_grads_at(g[k], i), sizeof(float) * numel);
                off += numel;
            }
        }
        CHECK(ref_loss[0] != ref_loss[1], "%s: the two label sets gave one loss", fixture);
    }
    CHECK(same, "%s: two states training concurrently on one model differ from the same steps "
          "run alone", fixture);
    printf("  concurrent backward %-18s two states, two tubelet_grads, one model: losses %.6f and "
           "%.6f, gradients %s\n", fixture, ref_loss[0], ref_loss[1],
           same ? "bit-identical to sequential runs" : "DIFFER");
    for (int k = 0; k < 2; k++) tubelet_state_free(s[k]), tubelet_grads_free(g[k]), free(ref[k]);
    free(y2);
    tubelet_model_free(m);
    npy_free(&x), npy_free(&y);
}
static void each_fixture(const char *name, void *arg) {
    (void)arg;
    for (int ck = 0; ck < 2; ck++) grad_parity(name, ck, "cpu"); /* without and with checkpointing */
}

int main(int argc, char **argv) {
    check_cases(argc, argv);
    CASE(test_concurrent_backward("timesformer_divided"));
    CASE(test_concurrent_backward("vivit_m2_tubelet"));
    CASE(test_label_smoothing());
    CASE(test_freeze_encoder("vjepa2_hd20"));
    CASE(test_freeze_encoder("videomae_mean"));
    CASE(test_probe_grads("vjepa2_hd20"));
    CASE(test_probe_grads("videomae_mean"));
    CASE(test_probe_grads_refused("video_swin_shift"));
    const char *divided[] = {"timesformer.encoder.layer.1.output.dense.bias",
                             "timesformer.encoder.layer.1.attention.output.dense.bias",
                             "timesformer.encoder.layer.1.temporal_dense.bias"};
    CASE(test_drop_path("timesformer_divided", divided, 3));
    const char *axial[] = {"timesformer.encoder.layer.1.width_dense.bias",
                           "timesformer.encoder.layer.1.temporal_dense.bias",
                           "timesformer.encoder.layer.1.attention.output.dense.bias"};
    CASE(test_drop_path("timesformer_axial_odd", axial, 3));
    const char *local_global[] = {"timesformer.encoder.layer.1.local_dense.bias",
                                  "timesformer.encoder.layer.1.attention.output.dense.bias"};
    CASE(test_drop_path("timesformer_local_global_odd", local_global, 2));
    /* ViViT: Model 2's last spatial and temporal blocks (each encoder has its own depth rule),
     * Model 3's per-group spatial and temporal branches, Model 4's per-clip attention */
    const char *m2[] = {"vivit.encoder.layer.1.output.dense.bias",
                        "vivit.encoder.layer.1.attention.output.dense.bias",
                        "vivit.temporal_encoder.layer.1.attention.output.dense.bias"};
    CASE(test_drop_path("vivit_m2_tubelet", m2, 3));
    const char *m3[] = {"vivit.encoder.layer.1.temporal_attention.output.dense.bias",
                        "vivit.encoder.layer.1.attention.output.dense.bias",
                        "vivit.encoder.layer.1.output.dense.bias"};
    CASE(test_drop_path("vivit_m3_tubelet", m3, 3));
    const char *m4[] = {"vivit.encoder.layer.1.attention.output.dense.bias",
                        "vivit.encoder.layer.1.output.dense.bias"};
    CASE(test_drop_path("vivit_m4_tubelet", m4, 2));
    /* layer scale inside the dropped branches (STMixer: drop_path(gamma * branch)) */
    const char *stm[] = {"videomae.encoder.layer.1.lambda_1", "videomae.encoder.layer.1.lambda_2",
                         "videomae.encoder.layer.1.output.dense.bias",
                         "videomae.encoder.layer.1.attention.output.dense.bias"};
    CASE(test_drop_path("stmixer_backbone", stm, 4));
    CASE(test_dropout());
    const int n = parity_each_listed("grad_list.txt", each_fixture, NULL);
    CHECK(n >= 10, "only %d gradient fixtures listed in grad_list.txt", n);
    return check_done();
}
