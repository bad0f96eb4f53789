/* Gradient parity with PyTorch autograd: for each fixture in tests/fixtures/grad_list.txt,
 * tools/make_grad_fixtures.py stored the mean cross-entropy of the logits against labels.npy and
 * the gradient of every parameter (grads.safetensors, float64 computed). We require per tensor
 *   max |g - g_ref| / max |g_ref| <= 1e-3
 * and the loss to 1e-5 relative. A tensor whose true gradient is zero (the key bias: adding a
 * constant to every score of a row leaves the softmax unchanged) holds only rounding noise on both
 * sides, so the denominator is floored at 1e-4 of the largest gradient of the model. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "parity.h"
#include "io/npy.h"
#include "io/safetensors.h"
#include "tubelet.h"

static void run_fixture(const char *name, int ckpt_blocks) {
    char dir[1024], path[1200], err[1024];
    snprintf(dir, sizeof dir, "%s/%s", parity_fixtures_dir(), name);
    npy_array x = {0}, y = {0}, l = {0};
    tb_err e = {{0}};
    st_file *ref = NULL;
    tubelet_model *m = NULL;
    tubelet_state *s = NULL;
    snprintf(path, sizeof path, "%s/input.npy", dir);
    int ok = !npy_read(path, &x, &e);
    snprintf(path, sizeof path, "%s/labels.npy", dir);
    ok = ok && !npy_read(path, &y, &e) && y.dtype == NPY_I64;
    snprintf(path, sizeof path, "%s/loss.npy", dir);
    ok = ok && !npy_read(path, &l, &e);
    snprintf(path, sizeof path, "%s/grads.safetensors", dir);
    ok = ok && !st_open(&ref, path, 1, &e);
    CHECK(ok, "%s: fixture unreadable: %s", name, e.msg);
    if (!ok) goto done;
    tubelet_load_params lp = tubelet_load_default_params();
    lp.n_threads = 2;
    int rc = tubelet_model_load(&m, dir, &lp, err, sizeof err);
    if (!rc) rc = tubelet_model_enable_grads(m, err, sizeof err);
    if (!rc) rc = tubelet_state_new(&s, m, (int)x.shape[0], (int)x.shape[1], (int)x.shape[3],
                                    (int)x.shape[4], err, sizeof err);
    if (!rc) rc = tubelet_state_enable_training(s, ckpt_blocks, err, sizeof err);
    float loss = 0;
    if (!rc) rc = tubelet_forward_backward(s, x.data, y.data, &loss, NULL, err, sizeof err);
    CHECK(rc == 0, "%s: %s", name, err);
    if (rc) goto done;
    double lref = ((float *)l.data)[0];
    CHECK(fabs(loss - lref) <= 1e-5 * fmax(1, fabs(lref)), "%s: loss %.7f, reference %.7f", name,
          loss, lref);
    double worst = 0, global = 0;
    const char *worst_name = "";
    int n = tubelet_model_n_tensors(m);
    for (int i = 0; i < st_count(ref); i++) {
        const st_tensor *t = st_at(ref, i);
        if (t->dtype != ST_F32) continue;
        for (size_t j = 0; j < t->nbytes / 4; j++) {
            float v;
            memcpy(&v, (const char *)t->data + 4 * j, 4);
            if (fabsf(v) > global) global = fabsf(v);
        }
    }
    CHECK(n == st_count(ref), "%s: %d parameters, the reference has %d gradients", name, n,
          st_count(ref));
    for (int i = 0; i < n; i++) {
        tubelet_shape sh;
        const float *g;
        const char *pname = tubelet_model_tensor(m, i, &sh, NULL, &g);
        const st_tensor *t = st_find(ref, pname);
        CHECK(t && t->dtype == ST_F32 && t->nbytes == sizeof(float) * (size_t)tubelet_shape_numel(&sh),
              "%s: no float32 reference gradient of the right size for %s", name, pname);
        if (!t || t->nbytes != sizeof(float) * (size_t)tubelet_shape_numel(&sh)) continue;
        const int64_t k = tubelet_shape_numel(&sh);
        float *r = malloc(t->nbytes);
        memcpy(r, t->data, t->nbytes); /* the mapping may be unaligned */
        double err_abs = check_max_abs_diff(g, r, (long)k), scale = check_max_abs(r, (long)k);
        double rel = err_abs / fmax(scale, 1e-4 * global);
        CHECK(rel <= 1e-3, "%s: gradient of %s: relative error %.3g (max |ref| %.3g)", name, pname,
              rel, scale);
        if (rel > worst) worst = rel, worst_name = pname;
        free(r);
    }
    printf("  %-24s %s loss %.6f (ref %.6f), %d gradients, worst relative error %.2e (%s)\n",
           name, ckpt_blocks ? "checkpointed" : "            ", loss, lref, n, worst, worst_name);
done:
    tubelet_state_free(s);
    tubelet_model_free(m);
    st_close(ref);
    npy_free(&x), npy_free(&y), npy_free(&l);
}

/* A fixture loaded for training with writable weights (the finite-difference tests nudge them),
 * with its input and labels. Returns 1 on success. */
typedef struct {
    npy_array x, y;
    tubelet_model *m;
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
         !tubelet_model_enable_grads(t->m, err, sizeof err) &&
         !tubelet_state_new(&t->s, t->m, (int)t->x.shape[0], (int)t->x.shape[1],
                            (int)t->x.shape[3], (int)t->x.shape[4], err, sizeof err) &&
         !tubelet_state_enable_training(t->s, 0, err, sizeof err);
    CHECK(ok, "%s: training setup failed: %s %s", fixture, err, e.msg);
    return ok;
}

static void trainable_free(trainable *t) {
    tubelet_state_free(t->s);
    tubelet_model_free(t->m);
    npy_free(&t->x), npy_free(&t->y);
}

/* Values and gradient of the named parameter (NULL if absent). */
static float *find_param(tubelet_model *m, const char *name, const float **grad,
                         tubelet_shape *sh) {
    for (int i = 0; i < tubelet_model_n_tensors(m); i++) {
        const float *d, *g;
        if (!strcmp(tubelet_model_tensor(m, i, sh, &d, &g), name)) {
            *grad = g;
            return (float *)d; /* loaded without mmap: writable */
        }
    }
    return NULL;
}

/* Largest |central finite difference - g[k]| over the first n entries of param (h = 1e-2). */
static double fd_worst(trainable *t, float *param, const float *g, int n) {
    char err[1024];
    double worst = 0;
    for (int k = 0; k < n; k++) {
        const float h = 1e-2f, saved = param[k];
        float lp1, lm1;
        param[k] = saved + h;
        tubelet_forward_backward(t->s, t->x.data, t->y.data, &lp1, NULL, err, sizeof err);
        param[k] = saved - h;
        tubelet_forward_backward(t->s, t->x.data, t->y.data, &lm1, NULL, err, sizeof err);
        param[k] = saved;
        worst = fmax(worst, fabs((lp1 - lm1) / (2.0 * h) - g[k]));
    }
    return worst;
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
        float *bias = find_param(t.m, "classifier.bias", &g, &sh);
        float loss;
        tubelet_model_zero_grads(t.m);
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
static void test_drop_path(void) {
    trainable t;
    char err[1024];
    if (trainable_load(&t, "timesformer_divided")) {
        float base, loss;
        tubelet_forward_backward(t.s, t.x.data, t.y.data, &base, NULL, err, sizeof err);
        int differs = 0, step = -1;
        for (int k = 0; k < 8; k++) {
            tubelet_state_set_drop_path(t.s, 0.5f, 7, k);
            tubelet_forward_backward(t.s, t.x.data, t.y.data, &loss, NULL, err, sizeof err);
            if (fabsf(loss - base) > 1e-6f) differs++, step = step < 0 ? k : step;
        }
        CHECK(differs > 0, "drop path 0.5 never changed the loss in 8 steps");
        const char *names[] = {"timesformer.encoder.layer.1.output.dense.bias",
                               "timesformer.encoder.layer.1.attention.output.dense.bias",
                               "timesformer.encoder.layer.1.temporal_dense.bias"};
        double worst = 0;
        for (int n = 0; n < 3 && step >= 0; n++) {
            const float *g = NULL;
            tubelet_shape sh;
            float *bias = find_param(t.m, names[n], &g, &sh);
            CHECK(bias != NULL, "no %s", names[n]);
            if (!bias) continue;
            tubelet_state_set_drop_path(t.s, 0.5f, 7, step);
            tubelet_model_zero_grads(t.m);
            tubelet_forward_backward(t.s, t.x.data, t.y.data, &loss, NULL, err, sizeof err);
            float gb[8]; /* later calls add into the gradients: keep this one */
            for (int k = 0; k < 8; k++) gb[k] = g[k];
            worst = fmax(worst, fd_worst(&t, bias, gb, 8));
        }
        CHECK(worst < 2e-4, "drop path: gradient vs finite differences %.3g", worst);
        printf("  drop path 0.5: loss changed on %d of 8 steps; gradients vs finite differences "
               "%.2e\n", differs, worst);
    }
    trainable_free(&t);
}

int main(void) {
    test_label_smoothing();
    test_drop_path();
    char path[1024], line[256];
    snprintf(path, sizeof path, "%s/grad_list.txt", parity_fixtures_dir());
    FILE *f = fopen(path, "r");
    CHECK(f != NULL, "cannot open %s", path);
    while (f && fgets(line, sizeof line, f)) {
        line[strcspn(line, "\r\n")] = 0;
        if (line[0] && line[0] != '#')
            for (int ck = 0; ck < 2; ck++) run_fixture(line, ck); /* without and with checkpointing */
    }
    if (f) fclose(f);
    return check_done();
}
