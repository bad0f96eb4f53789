/* Position embeddings at input sizes other than config.json's, against PyTorch
 * (tests/fixtures/interp, written by tools/make_pipeline_fixtures.py):
 *   TimeSformer joint / space_only / divided: Hugging Face's own nearest resize of the position
 *     and time embeddings (the HF model run at the other size);
 *   VideoMAE: the config grid's sinusoid table resized bicubically per temporal slice (STMixer);
 *   ViViT: the learned patch positions resized the same way, the cls position kept.
 * Each list.txt line is "case model"; all cases of a model run on states of one loaded model,
 * created before any forward (so the cases at the config size also check that a resized table
 * never touches the model's own). Tolerance: max abs error <= 1e-4 * max(1, max |expected|).
 * Also: tb_resize_bicubic against F.interpolate(mode="bicubic", align_corners=False), and the
 * error for a frame count VideoMAE / ViViT cannot take. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "parity.h"
#include "io/npy.h"
#include "models/state.h"
#include "tubelet.h"

#define MAX_CASES 64

static const char *interp_dir(void) {
    const char *d = getenv("TUBELET_INTERP_FIXTURES");
    return d ? d : "tests/fixtures/interp";
}

static int load_npy(const char *path, npy_array *a) {
    tb_err e = {{0}};
    if (npy_read(path, a, &e)) {
        printf("cannot read %s: %s\n", path, e.msg);
        return 0;
    }
    if (a->dtype != NPY_F32) {
        printf("%s: not float32\n", path);
        npy_free(a);
        return 0;
    }
    return 1;
}

typedef struct {
    char name[128], model[128];
    npy_array x, logits, hidden;
    tubelet_state *s;
} icase;

/* Every case of one model on one loaded model: all states first, then the forwards. */
static void run_model(const char *model, icase *cases, int n, int threads) {
    char dir[1024], err[1024];
    snprintf(dir, sizeof dir, "%s/models/%s", interp_dir(), model);
    tubelet_load_params lp = tubelet_load_default_params();
    lp.n_threads = threads;
    lp.no_mmap = threads == 2;
    tubelet_model *m = NULL;
    int rc = tubelet_model_load(&m, dir, &lp, err, sizeof err);
    CHECK(rc == 0, "%s: load failed: %s", dir, err);
    if (rc) return;
    for (int i = 0; i < n; i++) {
        icase *c = &cases[i];
        if (strcmp(c->model, model)) continue;
        rc = tubelet_state_new(&c->s, m, (int)c->x.shape[0], (int)c->x.shape[1],
                               (int)c->x.shape[3], (int)c->x.shape[4], err, sizeof err);
        CHECK(rc == 0, "%s: state for (%lld, %lld, 3, %lld, %lld) failed: %s", c->name,
              (long long)c->x.shape[0], (long long)c->x.shape[1], (long long)c->x.shape[3],
              (long long)c->x.shape[4], err);
        if (rc) c->s = NULL;
    }
    for (int i = 0; i < n; i++) {
        icase *c = &cases[i];
        if (strcmp(c->model, model) || !c->s) continue;
        tubelet_shape ls, hs;
        tubelet_state_logits_shape(c->s, &ls);
        tubelet_state_hidden_shape(c->s, &hs);
        CHECK(parity_same_shape(&ls, &c->logits), "%s: logits shape differs from the reference", c->name);
        CHECK(parity_same_shape(&hs, &c->hidden), "%s: hidden shape differs from the reference", c->name);
        if (parity_same_shape(&ls, &c->logits) && parity_same_shape(&hs, &c->hidden)) {
            float *l = malloc(sizeof(float) * c->logits.numel);
            float *h = malloc(sizeof(float) * c->hidden.numel);
            rc = tubelet_forward(c->s, c->x.data, l, h, err, sizeof err);
            CHECK(rc == 0, "%s: forward failed: %s", c->name, err);
            if (!rc) {
                parity_compare(c->name, "logits", threads, l, &c->logits);
                parity_compare(c->name, "hidden", threads, h, &c->hidden);
            }
            free(l), free(h);
        }
    }
    for (int i = 0; i < n; i++)
        if (!strcmp(cases[i].model, model)) {
            tubelet_state_free(cases[i].s);
            cases[i].s = NULL;
        }
    tubelet_model_free(m);
}

static void test_models(void) {
    char path[1200], line[512];
    icase *cases = calloc(MAX_CASES, sizeof(icase));
    int n = 0;
    snprintf(path, sizeof path, "%s/list.txt", interp_dir());
    FILE *f = fopen(path, "r");
    CHECK(f != NULL, "cannot open %s", path);
    while (f && n < MAX_CASES && fgets(line, sizeof line, f)) {
        icase *c = &cases[n];
        if (line[0] == '#' || sscanf(line, "%127s %127s", c->name, c->model) != 2) continue;
        char p[1400];
        int ok = 1;
        snprintf(p, sizeof p, "%s/%s/input.npy", interp_dir(), c->name);
        ok = ok && load_npy(p, &c->x);
        snprintf(p, sizeof p, "%s/%s/logits.npy", interp_dir(), c->name);
        ok = ok && load_npy(p, &c->logits);
        snprintf(p, sizeof p, "%s/%s/hidden.npy", interp_dir(), c->name);
        ok = ok && load_npy(p, &c->hidden);
        CHECK(ok && c->x.ndim == 5, "%s: fixture files unreadable", c->name);
        if (!ok || c->x.ndim != 5) {
            npy_free(&c->x), npy_free(&c->logits), npy_free(&c->hidden);
            continue;
        }
        n++;
    }
    if (f) fclose(f);
    CHECK(n >= 10, "only %d interpolation cases listed", n);
    for (int threads = 1; threads <= 2; threads++)
        for (int i = 0; i < n; i++) {
            int first = 1; /* each model once */
            for (int j = 0; j < i; j++) first &= strcmp(cases[j].model, cases[i].model) != 0;
            if (first) run_model(cases[i].model, cases, n, threads);
        }
    for (int i = 0; i < n; i++)
        npy_free(&cases[i].x), npy_free(&cases[i].logits), npy_free(&cases[i].hidden);
    free(cases);
}

/* VideoMAE and ViViT have one position per temporal index: another frame count is an error
 * that says what to do, not a silent resize. */
static void test_frame_count_error(void) {
    static const char *models[] = {"vm", "vv"};
    for (int k = 0; k < 2; k++) {
        char dir[1024], err[1024] = "";
        snprintf(dir, sizeof dir, "%s/models/%s", interp_dir(), models[k]);
        tubelet_load_params lp = tubelet_load_default_params();
        lp.n_threads = 1;
        tubelet_model *m = NULL;
        if (tubelet_model_load(&m, dir, &lp, err, sizeof err)) {
            CHECK(0, "%s: load failed: %s", dir, err);
            continue;
        }
        tubelet_state *s = NULL;
        int rc = tubelet_state_new(&s, m, 1, 6, 24, 24, err, sizeof err);
        CHECK(rc == TUBELET_ERR_SHAPE, "%s: 6 frames (config 4): status %d, want %d", models[k], rc,
              TUBELET_ERR_SHAPE);
        CHECK(strstr(err, "resample the input to 4 frames") != NULL, "%s: message '%s'", models[k],
              err);
        CHECK(s == NULL || rc == 0, "%s: state set on failure", models[k]);
        if (!rc) tubelet_state_free(s);
        tubelet_model_free(m);
    }
}

static void test_bicubic(void) {
    char path[1200], line[256];
    snprintf(path, sizeof path, "%s/bicubic.txt", interp_dir());
    FILE *f = fopen(path, "r");
    CHECK(f != NULL, "cannot open %s", path);
    int n = 0;
    while (f && fgets(line, sizeof line, f)) {
        line[strcspn(line, "\r\n")] = 0;
        if (!line[0] || line[0] == '#') continue;
        npy_array src = {0}, dst = {0};
        char p[1400];
        snprintf(p, sizeof p, "%s/bicubic_%s_src.npy", interp_dir(), line);
        int ok = load_npy(p, &src);
        snprintf(p, sizeof p, "%s/bicubic_%s_dst.npy", interp_dir(), line);
        ok = ok && load_npy(p, &dst);
        ok = ok && src.ndim == 3 && dst.ndim == 3 && src.shape[2] == dst.shape[2];
        CHECK(ok, "bicubic %s: fixture unreadable or inconsistent", line);
        if (ok) {
            /* guard cells after the output catch a write past its end */
            const size_t guard = 64;
            float *out = malloc(sizeof(float) * (dst.numel + guard));
            for (size_t i = 0; i < dst.numel + guard; i++) out[i] = -12345.f;
            tb_resize_bicubic(out, dst.shape[0], dst.shape[1], src.data, src.shape[0],
                              src.shape[1], src.shape[2]);
            double err = check_max_abs_diff(out, dst.data, (long)dst.numel);
            double scale = check_max_abs(dst.data, (long)dst.numel);
            double tol = 1e-5 * (scale > 1 ? scale : 1);
            CHECK(err <= tol, "bicubic %s: max abs error %.3g > %.3g", line, err, tol);
            int intact = 1;
            for (size_t i = 0; i < guard; i++) intact &= out[dst.numel + i] == -12345.f;
            CHECK(intact, "bicubic %s: wrote past the output", line);
            printf("  bicubic %-18s (%lld,%lld)->(%lld,%lld) x %lld: max abs err %.2e\n", line,
                   (long long)src.shape[0], (long long)src.shape[1], (long long)dst.shape[0],
                   (long long)dst.shape[1], (long long)src.shape[2], err);
            free(out);
        }
        npy_free(&src), npy_free(&dst);
        n++;
    }
    if (f) fclose(f);
    CHECK(n >= 5, "only %d bicubic cases", n);

    /* same size is the identity (PyTorch's cubic weights are exactly 0, 1, 0, 0 at t = 0) */
    float a[2 * 3 * 2], b[2 * 3 * 2];
    for (int i = 0; i < 12; i++) a[i] = (float)(i * i) - 7.5f;
    tb_resize_bicubic(b, 2, 3, a, 2, 3, 2);
    CHECK(check_max_abs_diff(a, b, 12) == 0, "bicubic identity is not exact");
}

int main(int argc, char **argv) {
    check_cases(argc, argv);
    CASE(test_bicubic());
    CASE(test_frame_count_error());
    CASE(test_models());
    return check_done();
}
