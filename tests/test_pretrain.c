/* VideoMAE masked pretraining against transformers' VideoMAEForPreTraining: for each fixture of
 * tests/fixtures/pretrain_list.txt (tools/make_pretrain_fixtures.py: float64 references) the
 * loss, the logits and the gradient of every parameter, each to 1e-4 relative (per tensor:
 * max |g - g_ref| / max |g_ref|), with and without gradient checkpointing and at 1 and 2
 * threads; the tube-masking generator; masks and ratios that must be refused. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/npy.h"
#include "io/safetensors.h"
#include "parity.h"
#include "tubelet.h"
#include "tubelet_pretrain.h"

#define REL_TOL 1e-4

typedef struct {
    npy_array x, mask, loss, logits;
    st_file *grads;
    tubelet_model *m;
    tubelet_grads *g;
    int n_masked;
} fixture;

static int fixture_load(fixture *f, const char *name) {
    char dir[1024], path[1200], err[1024] = "";
    tb_err e = {{0}};
    memset(f, 0, sizeof *f);
    snprintf(dir, sizeof dir, "%s/%s", parity_fixtures_dir(), name);
    const char *files[] = {"input.npy", "mask.npy", "loss.npy", "logits.npy"};
    npy_array *arrs[] = {&f->x, &f->mask, &f->loss, &f->logits};
    int ok = 1;
    for (int i = 0; i < 4 && ok; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, files[i]);
        ok = !npy_read(path, arrs[i], &e);
    }
    snprintf(path, sizeof path, "%s/grads.safetensors", dir);
    ok = ok && !st_open(&f->grads, path, 1, &e);
    ok = ok && f->mask.dtype == NPY_BOOL && f->mask.ndim == 2;
    tubelet_load_params lp = tubelet_load_default_params();
    lp.n_threads = 2;
    ok = ok && !tubelet_model_load(&f->m, dir, &lp, err, sizeof err) &&
         !tubelet_grads_new(&f->g, f->m, err, sizeof err);
    CHECK(ok, "%s: fixture unreadable: %s %s", name, e.msg, err);
    if (ok) {
        f->n_masked = parity_pretrain_masked(&f->mask);
        CHECK(tubelet_model_is_pretraining(f->m), "%s: not loaded as a pretraining model", name);
    }
    return ok;
}

static void fixture_free(fixture *f) {
    tubelet_grads_free(f->g);
    tubelet_model_free(f->m);
    st_close(f->grads);
    npy_free(&f->x), npy_free(&f->mask), npy_free(&f->loss), npy_free(&f->logits);
}

/* Every parameter's gradient against the reference; returns the worst relative error. */
static double compare_grads(const char *name, const tubelet_grads *gr, st_file *ref,
                            const char **worst_name) {
    const tubelet_model *m = tubelet_grads_model(gr);
    double worst = 0;
    const int n = tubelet_model_n_tensors(m);
    CHECK(n == st_count(ref), "%s: %d parameters, the reference has %d gradients", name, n,
          st_count(ref));
    for (int i = 0; i < n; i++) {
        tubelet_shape sh;
        const char *pname = tubelet_model_tensor(m, i, &sh, NULL);
        const float *g = tubelet_grads_at(gr, i);
        const st_tensor *t = st_find(ref, pname);
        const int64_t k = tubelet_shape_numel(&sh);
        CHECK(t && t->dtype == ST_F32 && t->nbytes == sizeof(float) * (size_t)k,
              "%s: no float32 reference gradient of the right size for %s", name, pname);
        if (!t || t->nbytes != sizeof(float) * (size_t)k) continue;
        float *r = malloc(t->nbytes);
        memcpy(r, t->data, t->nbytes);
        const double rel = check_max_abs_diff(g, r, (long)k) / check_max_abs(r, (long)k);
        CHECK(rel <= REL_TOL, "%s: gradient of %s: relative error %.3g", name, pname, rel);
        if (rel > worst) worst = rel, *worst_name = pname;
        free(r);
    }
    return worst;
}

static void parity(const char *name, int threads, int checkpoint) {
    fixture f;
    if (!fixture_load(&f, name)) {
        fixture_free(&f);
        return;
    }
    char err[1024] = "";
    tubelet_pretrain *p = NULL;
    tubelet_model_set_threads(f.m, threads);
    int rc = tubelet_pretrain_new(&p, f.m, (int)f.x.shape[0], (int)f.x.shape[1], (int)f.x.shape[2],
                                  (int)f.x.shape[3], (int)f.x.shape[4], f.n_masked, f.g, checkpoint,
                                  err, sizeof err);
    CHECK(rc == 0, "%s: %s", name, err);
    if (rc) {
        fixture_free(&f);
        return;
    }
    float loss = 0;
    tubelet_grads_zero(f.g);
    if (parity_pretrain_step(p, name, threads, &f.x, &f.mask, &f.loss, &f.logits, 1, &loss)) {
        const char *wn = "";
        const double worst = compare_grads(name, f.g, f.grads, &wn);
        printf("  %-22s threads %d%s: loss %.6f (ref %.6f), %d gradients, worst relative "
               "error %.2e (%s)\n", name, threads, checkpoint ? ", checkpointed" : "", loss,
               *(float *)f.loss.data, tubelet_model_n_tensors(f.m), worst, wn);
    }
    tubelet_pretrain_free(p);
    fixture_free(&f);
}

/* The forward alone (no gradients enabled) gives the same loss and logits. */
static void forward_only(const char *name) {
    fixture f;
    if (!fixture_load(&f, name)) {
        fixture_free(&f);
        return;
    }
    char err[1024] = "";
    tubelet_pretrain *p = NULL;
    float loss = 0;
    char label[300];
    snprintf(label, sizeof label, "%s forward", name);
    int rc = tubelet_pretrain_new(&p, f.m, (int)f.x.shape[0], (int)f.x.shape[1], (int)f.x.shape[2],
                                  (int)f.x.shape[3], (int)f.x.shape[4], f.n_masked, NULL, 0, err,
                                  sizeof err);
    CHECK(rc == 0, "%s: %s", label, err);
    if (!rc && !parity_pretrain_step(p, label, 2, &f.x, &f.mask, &f.loss, &f.logits, 0, &loss))
        rc = -1;
    /* backward on a forward-only state is refused */
    CHECK(rc || tubelet_pretrain_step(p, f.x.data, f.mask.data, 1, &loss, NULL, err, sizeof err),
          "%s: a backward without gradients was accepted", name);
    /* bad masks: a different count in clip 1, then no visible token */
    uint8_t *bad = malloc(f.mask.numel);
    memcpy(bad, f.mask.data, f.mask.numel);
    const int64_t N = f.mask.shape[1];
    for (int64_t i = 0; i < N; i++)
        if (!bad[N + i]) {
            bad[N + i] = 1;
            break;
        }
    rc = p ? tubelet_pretrain_step(p, f.x.data, bad, 0, &loss, NULL, err, sizeof err) : 0;
    CHECK(rc == TUBELET_ERR_VALUE && strstr(err, "clip 1"), "%s: unequal mask counts: rc %d (%s)",
          name, rc, err);
    tubelet_pretrain *q = NULL;
    const int T = (int)f.x.shape[1], C = (int)f.x.shape[2], H = (int)f.x.shape[3],
              W = (int)f.x.shape[4];
    rc = tubelet_pretrain_new(&q, f.m, 1, T, C, H, W, (int)N, NULL, 0, err, sizeof err);
    CHECK(rc == TUBELET_ERR_VALUE && !q, "%s: a mask without visible token was accepted", name);
    rc = tubelet_pretrain_new(&q, f.m, 1, T + 2, C, H, W, 1, NULL, 0, err, sizeof err);
    CHECK(rc == TUBELET_ERR_SHAPE && !q, "%s: another input size was accepted", name);
    /* another channel count: the step would read (C = 1) past the pixels, or misread them */
    for (int c = 1; c <= 4; c += 3) {
        rc = tubelet_pretrain_new(&q, f.m, 1, T, c, H, W, 1, NULL, 0, err, sizeof err);
        CHECK(rc == TUBELET_ERR_SHAPE && !q && strstr(err, "channels"),
              "%s: %d channels accepted: rc %d (%s)", name, c, rc, err);
    }
    free(bad);
    tubelet_pretrain_free(p);
    fixture_free(&f);
}

static void tube_mask(void) {
    const int B = 3, t = 4, h = 5, w = 7, n = h * w;
    uint8_t a[3 * 4 * 35], b[3 * 4 * 35];
    char err[256];
    CHECK(!tubelet_tube_mask(a, B, t, h, w, 0.9, 7, 3, 10, err, sizeof err), "tube mask: %s", err);
    for (int c = 0; c < B; c++) {
        int k = 0;
        for (int i = 0; i < n; i++) k += a[c * t * n + i];
        CHECK(k == (int)(0.9 * n), "tube mask: clip %d masks %d per frame", c, k);
        for (int s = 1; s < t; s++)
            CHECK(!memcmp(a + c * t * n, a + c * t * n + s * n, (size_t)n),
                  "tube mask: slice %d of clip %d differs from slice 0", s, c);
    }
    CHECK(memcmp(a, a + t * n, (size_t)n), "tube mask: clips 0 and 1 have the same mask");
    /* a function of (seed, step, clip) only: clip 11 alone is the batch's second clip */
    CHECK(!tubelet_tube_mask(b, 1, t, h, w, 0.9, 7, 3, 11, err, sizeof err), "%s", err);
    CHECK(!memcmp(b, a + t * n, (size_t)(t * n)), "tube mask: clip 11 depends on the batch");
    CHECK(!tubelet_tube_mask(b, 1, t, h, w, 0.9, 7, 4, 11, err, sizeof err), "%s", err);
    CHECK(memcmp(b, a + t * n, (size_t)(t * n)), "tube mask: another step gives the same mask");
    const double bad[] = {0, 1, -0.5, 1.5, NAN, 0.01};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        CHECK(tubelet_tube_mask(b, 1, t, h, w, bad[i], 7, 3, 0, err, sizeof err) ==
                  TUBELET_ERR_VALUE, "tube mask: ratio %g accepted", bad[i]);
    printf("  tube masking: counts, tubes, (seed, step, clip) keys, bad ratios\n");
}

int main(int argc, char **argv) {
    check_cases(argc, argv);
    char path[1200];
    snprintf(path, sizeof path, "%s/pretrain_list.txt", parity_fixtures_dir());
    FILE *fl = fopen(path, "r");
    CHECK(fl != NULL, "%s missing", path);
    char name[256];
    int count = 0;
    while (fl && fscanf(fl, "%255s", name) == 1) {
        if (check_select("parity(%s, 1 thread)", name)) parity(name, 1, 0);
        if (check_select("parity(%s, 2 threads)", name)) parity(name, 2, 0);
        if (check_select("parity(%s, 2 threads, checkpointing)", name)) parity(name, 2, 1);
        if (check_select("forward_only(%s)", name)) forward_only(name);
        count++;
    }
    if (fl) fclose(fl);
    CHECK(count >= 3, "only %d pretraining fixtures", count);
    CASE(tube_mask());
    return check_done();
}
