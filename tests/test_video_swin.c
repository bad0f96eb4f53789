/* Video Swin against torchvision's SwinTransformer3d (tools/make_video_swin_fixtures.py): logits,
 * the final-normed tokens and every stage's output (forward, <= 1e-4 relative), the loss and the
 * gradient of every parameter (<= 1e-4 of each tensor's largest entry), at 1 and 2 threads; bf16
 * and int8 inference near the f32 logits; gradient checkpointing (the same gradients bit for bit,
 * less memory); save and reload; the published parameter counts of
 * --arch video-swin-t/s/b; and the bad inputs of issue 15 (configs that do not fit, a relative
 * position table of another window, an input smaller than a patch). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "parity.h"
#include "io/npy.h"
#include "io/safetensors.h"
#include "tubelet.h"

static int read_npy(const char *dir, const char *file, npy_array *a) {
    char path[1200];
    tb_err e = {{0}};
    snprintf(path, sizeof path, "%s/%s", dir, file);
    int rc = npy_read(path, a, &e);
    CHECK(rc == 0, "%s: %s", path, e.msg);
    return rc;
}

/* max |got - want| <= tol * max(1e-30, max |want|): relative to the tensor's largest entry. */
static double rel_err(const float *got, const float *want, long n) {
    double m = check_max_abs(want, n);
    return check_max_abs_diff(got, want, n) / (m > 1e-30 ? m : 1e-30);
}

static void grad_parity(const char *name, const char *dir, const npy_array *x, int threads) {
    char err[1024], path[1200];
    tb_err e = {{0}};
    npy_array y = {0}, l = {0};
    st_file *ref = NULL;
    tubelet_model *m = NULL;
    tubelet_state *s = NULL;
    tubelet_grads *gr = NULL;
    snprintf(path, sizeof path, "%s/grads.safetensors", dir);
    if (read_npy(dir, "labels.npy", &y) || read_npy(dir, "loss.npy", &l)) goto done;
    if (st_open(&ref, path, 1, &e)) {
        CHECK(0, "%s: %s", path, e.msg);
        goto done;
    }
    tubelet_load_params lp = tubelet_load_default_params();
    lp.n_threads = threads;
    int rc = tubelet_model_load(&m, dir, &lp, err, sizeof err);
    if (!rc) rc = tubelet_grads_new(&gr, m, err, sizeof err);
    if (!rc) rc = tubelet_state_new(&s, m, (int)x->shape[0], (int)x->shape[1], (int)x->shape[3],
                                    (int)x->shape[4], err, sizeof err);
    if (!rc) rc = tubelet_state_enable_training(s, 0, gr, err, sizeof err);
    float loss = 0;
    if (!rc) tubelet_grads_zero(gr);
    if (!rc) rc = tubelet_forward_backward(s, x->data, y.data, &loss, NULL, err, sizeof err);
    CHECK(rc == 0, "%s: %s", name, err);
    if (rc) goto done;
    const double lref = ((float *)l.data)[0];
    CHECK(fabs(loss - lref) <= 1e-5 * fmax(1, fabs(lref)), "%s: loss %.7f, reference %.7f", name,
          loss, lref);
    double worst = 0;
    const char *worst_name = "";
    int seen = 0;
    for (int i = 0; i < tubelet_model_n_tensors(m); i++) {
        tubelet_shape sh;
        const char *tn = tubelet_model_tensor(m, i, &sh, NULL);
        const float *g = tubelet_grads_at(gr, i);
        const st_tensor *t = st_find(ref, tn);
        CHECK(t != NULL, "%s: no reference gradient for %s", name, tn);
        if (!t) continue;
        const long n = (long)(t->nbytes / 4);
        CHECK(n == (long)tubelet_shape_numel(&sh), "%s: %s has %ld values", name, tn, n);
        if (n != (long)tubelet_shape_numel(&sh)) continue;
        const double r = rel_err(g, (const float *)t->data, n);
        CHECK(r <= 1e-4, "%s: gradient of %s: relative error %.3g", name, tn, r);
        if (r > worst) worst = r, worst_name = tn;
        seen++;
    }
    CHECK(seen == st_count(ref), "%s: %d gradients compared, the reference has %d", name, seen,
          st_count(ref));
    printf("  %-24s grads   threads %d: %d tensors, worst relative error %.2e (%s), loss %.6f\n",
           name, threads, seen, worst, worst_name, loss);
done:
    npy_free(&y), npy_free(&l);
    if (ref) st_close(ref);
    tubelet_state_free(s);
    tubelet_grads_free(gr);
    tubelet_model_free(m);
}

/* bf16 and int8: the packed path, near the f32 reference logits; and f32 packed (inference). */

/* Every parameter's gradient after one training step (drop path 0.3) with or without gradient
 * checkpointing, concatenated into a malloc'd buffer of *count values; the state's bytes. */
static float *step_grads(const char *dir, const npy_array *x, const int64_t *labels, int ckpt,
                         float *loss, size_t *count, double *state_mb) {
    char err[1024] = "";
    tubelet_load_params lp = tubelet_load_default_params();
    lp.n_threads = 2;
    tubelet_model *m = NULL;
    tubelet_state *s = NULL;
    tubelet_grads *gr = NULL;
    float *all = NULL;
    int rc = tubelet_model_load(&m, dir, &lp, err, sizeof err);
    if (!rc) rc = tubelet_grads_new(&gr, m, err, sizeof err);
    if (!rc) rc = tubelet_state_new(&s, m, (int)x->shape[0], (int)x->shape[1], (int)x->shape[3],
                                    (int)x->shape[4], err, sizeof err);
    if (!rc) rc = tubelet_state_enable_training(s, ckpt, gr, err, sizeof err);
    if (!rc) {
        tubelet_grads_zero(gr);
        tubelet_state_set_drop_path(s, 0.3f, 11, 5);
        rc = tubelet_forward_backward(s, x->data, labels, loss, NULL, err, sizeof err);
    }
    CHECK(rc == 0, "%s, checkpointing %d: %s", dir, ckpt, err);
    *count = 0;
    if (!rc) {
        *state_mb = (double)tubelet_state_bytes(s) / 1e6;
        for (int i = 0; i < tubelet_model_n_tensors(m); i++) {
            tubelet_shape sh;
            tubelet_model_tensor(m, i, &sh, NULL);
            *count += (size_t)tubelet_shape_numel(&sh);
        }
        all = malloc(sizeof(float) * *count);
        for (size_t i = 0, at = 0; all && i < (size_t)tubelet_model_n_tensors(m); i++) {
            tubelet_shape sh;
            const float *g = tubelet_grads_at(gr, (int)i);
            tubelet_model_tensor(m, (int)i, &sh, NULL);
            memcpy(all + at, g, sizeof(float) * (size_t)tubelet_shape_numel(&sh));
            at += (size_t)tubelet_shape_numel(&sh);
        }
    }
    tubelet_state_free(s);
    tubelet_grads_free(gr);
    tubelet_model_free(m);
    return all;
}

/* Gradient checkpointing: the same loss and gradients, bit for bit, as keeping every block's
 * activations (with drop path, so the recomputed blocks must reuse the step's draws), in less
 * memory. */
static void grad_checkpointing(const char *name, const char *dir, const npy_array *x) {
    npy_array y = {0};
    if (read_npy(dir, "labels.npy", &y)) return;
    float l0 = 0, l1 = 0;
    size_t n0 = 0, n1 = 0;
    double mb0 = 0, mb1 = 0;
    float *g0 = step_grads(dir, x, y.data, 0, &l0, &n0, &mb0);
    float *g1 = step_grads(dir, x, y.data, 1, &l1, &n1, &mb1);
    if (g0 && g1) {
        const int same = n0 == n1 && l0 == l1 && !memcmp(g0, g1, sizeof(float) * n0);
        CHECK(same,
              "%s: checkpointing changed the loss (%.9g, %.9g) or the gradients (max diff %.3g)",
              name, l0, l1, n0 == n1 ? check_max_abs_diff(g0, g1, (long)n0) : -1.0);
        CHECK(mb1 < mb0, "%s: checkpointing holds %.3f MB, without %.3f MB", name, mb1, mb0);
        if (same)
            printf("  %-24s checkpointing: %zu gradient values bit-identical, state %.2f MB -> "
                   "%.2f MB\n", name, n0, mb0, mb1);
    }
    free(g0), free(g1);
    npy_free(&y);
}

static void precision_runs(const char *name, const char *dir, const npy_array *x) {
    npy_array lg = {0};
    if (read_npy(dir, "logits.npy", &lg)) return;
    const int precs[3] = {0, 1, 2};
    const double tol[3] = {1e-4, 5e-2, 2e-1};
    float *logits = malloc(sizeof(float) * (size_t)lg.numel);
    for (int k = 0; k < 3; k++) {
        char err[1024];
        tubelet_load_params lp = tubelet_load_default_params();
        lp.n_threads = 2, lp.precision = precs[k], lp.inference = 1;
        tubelet_model *m = NULL;
        tubelet_state *s = NULL;
        int rc = tubelet_model_load(&m, dir, &lp, err, sizeof err);
        if (!rc) rc = tubelet_state_new(&s, m, (int)x->shape[0], (int)x->shape[1],
                                        (int)x->shape[3], (int)x->shape[4], err, sizeof err);
        if (!rc) rc = tubelet_forward(s, x->data, logits, NULL, err, sizeof err);
        CHECK(rc == 0, "%s %s: %s", name, tubelet_precision_name(precs[k]), err);
        if (!rc) {
            const double r = rel_err(logits, lg.data, (long)lg.numel);
            CHECK(r <= tol[k], "%s %s: logits relative error %.3g > %.g", name,
                  tubelet_precision_name(precs[k]), r, tol[k]);
            printf("  %-24s %-7s packed: logits relative error %.2e\n", name,
                   tubelet_precision_name(precs[k]), r);
        }
        tubelet_state_free(s);
        tubelet_model_free(m);
    }
    free(logits);
    npy_free(&lg);
}

/* tubelet_model_save writes a config.json and weights that load to the same model. */
static void save_reload(const char *name, const char *dir, const npy_array *x) {
    char err[1024], tmp[] = "/tmp/tb_swin_XXXXXX";
    if (!mkdtemp(tmp)) return;
    tubelet_model *a = NULL, *b = NULL;
    tubelet_state *sa = NULL, *sb = NULL;
    int rc = tubelet_model_load(&a, dir, NULL, err, sizeof err);
    if (!rc) rc = tubelet_model_save(a, tmp, err, sizeof err);
    if (!rc) rc = tubelet_model_load(&b, tmp, NULL, err, sizeof err);
    const int B = (int)x->shape[0], T = (int)x->shape[1], H = (int)x->shape[3],
              W = (int)x->shape[4];
    if (!rc) rc = tubelet_state_new(&sa, a, B, T, H, W, err, sizeof err);
    if (!rc) rc = tubelet_state_new(&sb, b, B, T, H, W, err, sizeof err);
    CHECK(rc == 0, "%s: save and reload: %s", name, err);
    if (!rc) {
        tubelet_shape ls;
        tubelet_state_logits_shape(sa, &ls);
        const long n = (long)tubelet_shape_numel(&ls);
        float *la = malloc(sizeof(float) * (size_t)n), *lb = malloc(sizeof(float) * (size_t)n);
        tubelet_forward(sa, x->data, la, NULL, err, sizeof err);
        tubelet_forward(sb, x->data, lb, NULL, err, sizeof err);
        CHECK(check_max_abs_diff(la, lb, n) == 0, "%s: reloaded model differs", name);
        free(la), free(lb);
    }
    tubelet_state_free(sa), tubelet_state_free(sb);
    tubelet_model_free(a), tubelet_model_free(b);
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmp);
    if (system(cmd)) printf("  (could not remove %s)\n", tmp);
}

/* Parameter counts of the published sizes: torchvision's Swin3D_*_Weights meta num_params
 * (paper, Table 1: 28M, 50M, 88M). */
static void arch_params(void) {
    static const struct { const char *arch; long long n; } want[] = {
        {"video-swin-t", 28158070}, {"video-swin-s", 49816678}, {"video-swin-b", 88048984}};
    /* the sanitizer build checks the smallest only (random initialisation of 88M parameters is
     * slow there) and prints a line for each size it skips, 2 checks each */
#if defined(__SANITIZE_ADDRESS__)
    const size_t n = 1;
#else
    const size_t n = sizeof want / sizeof *want;
#endif
    for (size_t i = n; i < sizeof want / sizeof *want; i++)
        printf("  %-14s skipped in the sanitizer build (its random initialisation is slow there): "
               "2 checks fewer\n", want[i].arch);
    for (size_t i = 0; i < n; i++) {
        char err[1024];
        tubelet_model *m = NULL;
        tubelet_load_params lp = tubelet_load_default_params();
        lp.n_threads = 2;
        int rc = tubelet_model_random(&m, want[i].arch, 1, &lp, err, sizeof err);
        CHECK(rc == 0, "%s: %s", want[i].arch, err);
        if (rc) continue;
        tubelet_model_info in;
        tubelet_model_get_info(m, &in);
        CHECK(in.n_params == want[i].n, "%s: %lld parameters, torchvision has %lld",
              want[i].arch, (long long)in.n_params, want[i].n);
        CHECK(in.tubelet_init_default == TUBELET_TUBELET_INFLATE, "%s: image init default %d, "
              "Video Swin inflates (inflate_weights)", want[i].arch, in.tubelet_init_default);
        printf("  %-14s %lld parameters, %.1f GFLOPs per 32x224x224 clip\n", want[i].arch,
               (long long)in.n_params, in.flop_per_clip / 1e9);
        tubelet_model_free(m);
    }
}

/* A model directory: config.json text, weights from a fixture (NULL: none). */
static int bad_dir(char *dir, const char *config, const char *weights_from) {
    char from[1100];
    strcpy(dir, "/tmp/tb_swin_bad_XXXXXX");
    snprintf(from, sizeof from, "%s/%s", parity_fixtures_dir(), weights_from ? weights_from : "");
    return check_model_dir(dir, config, weights_from ? from : NULL);
}

static void expect_load_error(const char *what, const char *config, const char *weights_from,
                              const char *needle) {
    char dir[64], err[1024] = "", cmd[128];
    if (bad_dir(dir, config, weights_from)) {
        CHECK(0, "%s: could not make a directory", what);
        return;
    }
    tubelet_model *m = NULL;
    tubelet_load_params lp = tubelet_load_default_params();
    lp.random_init = !weights_from;
    int rc = tubelet_model_load(&m, dir, &lp, err, sizeof err);
    CHECK(rc != 0 && strstr(err, needle) && strstr(err, dir), "%s: status %d, message '%s'",
          what, rc, err);
    printf("  bad input (%s): %s\n", what, err);
    tubelet_model_free(m);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd)) printf("  (could not remove %s)\n", dir);
}

static void bad_inputs(void) {
    const char *ok_head = "{\"model_type\": \"video_swin\", \"embed_dim\": 4, \"num_frames\": 8, "
                          "\"image_size\": 24, \"patch_size\": [2, 4, 4], ";
    char cfg[1024];
    snprintf(cfg, sizeof cfg, "%s\"depths\": [2, 2, 2, 2], \"num_heads\": [1, 2, 2]}", ok_head);
    expect_load_error("depths and heads", cfg, NULL, "num_heads");
    snprintf(cfg, sizeof cfg, "%s\"depths\": [2, 2], \"num_heads\": [3, 3]}", ok_head);
    expect_load_error("width and heads", cfg, NULL, "not divisible");
    snprintf(cfg, sizeof cfg, "%s\"depths\": [2], \"num_heads\": [1], \"window_size\": [7, 7]}",
             ok_head);
    expect_load_error("2-D window", cfg, NULL, "window_size");
    snprintf(cfg, sizeof cfg, "{\"model_type\": \"video_swin\", \"patch_size\": [4, 4]}");
    expect_load_error("2-D patch", cfg, NULL, "patch_size");
    snprintf(cfg, sizeof cfg, "%s\"depths\": [2, 2, 2, 2, 2], \"num_heads\": [1, 1, 1, 1, 1]}",
             ok_head);
    expect_load_error("five stages", cfg, NULL, "depths");
    snprintf(cfg, sizeof cfg, "{\"model_type\": \"video_swin\", \"embed_dim\": 4, "
             "\"num_frames\": 8, \"image_size\": 3, \"patch_size\": [2, 4, 4], \"depths\": [2], "
             "\"num_heads\": [1]}");
    expect_load_error("image smaller than a patch", cfg, NULL, "smaller than one patch");
    /* the shift fixture's weights (window 2x3x3: 3x5x5 = 75 rows) under another window */
    snprintf(cfg, sizeof cfg, "%s\"depths\": [2, 2, 2, 2], \"num_heads\": [1, 2, 2, 4], "
             "\"window_size\": [2, 4, 4], \"mlp_ratio\": 2.0, \"num_labels\": 5}", ok_head);
    expect_load_error("relative position table", cfg, "video_swin_shift",
                      "relative_position_bias_table");
    /* an input smaller than one patch */
    char dir[1024], err[1024] = "";
    snprintf(dir, sizeof dir, "%s/video_swin_shift", parity_fixtures_dir());
    tubelet_model *m = NULL;
    tubelet_state *s = NULL;
    int rc = tubelet_model_load(&m, dir, NULL, err, sizeof err);
    if (!rc) rc = tubelet_state_new(&s, m, 1, 1, 24, 24, err, sizeof err) ? 1 : 0;
    CHECK(rc == 1 && strstr(err, "smaller than one") && strstr(err, dir),
          "input smaller than a patch: '%s'", err);
    tubelet_state_free(s);
    tubelet_model_free(m);
}

int main(int argc, char **argv) {
    check_cases(argc, argv);
    for (const char *const *f = parity_swin_fixtures; *f; f++) {
        char dir[1024];
        snprintf(dir, sizeof dir, "%s/%s", parity_fixtures_dir(), *f);
        npy_array x = {0};
        if (read_npy(dir, "input.npy", &x)) continue;
        for (int threads = 1; threads <= 2; threads++) {
            tubelet_load_params lp = tubelet_load_default_params();
            lp.n_threads = threads;
            if (check_select("parity_swin(%s, %d threads)", *f, threads)) parity_swin(*f, *f, &x, &lp);
            if (check_select("grad_parity(%s, %d threads)", *f, threads)) grad_parity(*f, dir, &x, threads);
        }
        if (check_select("grad_checkpointing(%s)", *f)) grad_checkpointing(*f, dir, &x);
        if (check_select("precision_runs(%s)", *f)) precision_runs(*f, dir, &x);
        if (check_select("save_reload(%s)", *f)) save_reload(*f, dir, &x);
        npy_free(&x);
    }
    CASE(arch_params());
    CASE(bad_inputs());
    return check_done();
}
