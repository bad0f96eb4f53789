/* Parity with Hugging Face transformers: every fixture in tests/fixtures/list.txt is a random-
 * weight model directory written by tools/make_fixtures.py with its input and the logits and
 * last_hidden_state PyTorch computed (in float64). Tolerance: max abs error <= 1e-4 * max(1,
 * max |expected|), per output. Runs with 1 and 2 threads. */
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "parity.h"
#include "io/npy.h"
#include "kernels/lowp.h" /* tb_int8_weight_max: the int8 tolerance */
#include "models/state.h"
#include "tubelet.h"
#include "tubelet_io.h"

static int load_npy(const char *dir, const char *name, npy_array *a) {
    char path[1024];
    tb_err e = {{0}};
    snprintf(path, sizeof path, "%s/%s", dir, name);
    if (npy_read(path, a, &e)) {
        printf("cannot read %s: %s\n", path, e.msg);
        return 0;
    }
    return 1;
}

static void run_fixture(const char *name) {
    char dir[1024], err[1024];
    snprintf(dir, sizeof dir, "%s/%s", parity_fixtures_dir(), name);
    npy_array x = {0}, lg = {0}, hd = {0};
    if (!load_npy(dir, "input.npy", &x) || !load_npy(dir, "logits.npy", &lg) ||
        !load_npy(dir, "hidden.npy", &hd)) {
        CHECK(0, "%s: fixture files unreadable", name);
        goto done;
    }
    for (int threads = 1; threads <= 2; threads++) {
        tubelet_load_params lp = tubelet_load_default_params();
        lp.n_threads = threads;
        lp.no_mmap = threads == 2; /* exercise both loading paths */
        tubelet_model *m = NULL;
        tubelet_state *s = NULL;
        int rc = tubelet_model_load(&m, dir, &lp, err, sizeof err);
        CHECK(rc == 0, "%s: load failed: %s", name, err);
        if (rc) break;
        rc = tubelet_state_new(&s, m, (int)x.shape[0], (int)x.shape[1], (int)x.shape[3],
                               (int)x.shape[4], err, sizeof err);
        CHECK(rc == 0, "%s: state failed: %s", name, err);
        if (!rc) {
            tubelet_shape ls, hs;
            tubelet_state_logits_shape(s, &ls);
            tubelet_state_hidden_shape(s, &hs);
            CHECK(parity_same_shape(&ls, &lg), "%s: logits shape differs from the reference", name);
            CHECK(parity_same_shape(&hs, &hd), "%s: hidden shape differs from the reference", name);
            if (parity_same_shape(&ls, &lg) && parity_same_shape(&hs, &hd)) {
                float *l = malloc(sizeof(float) * lg.numel), *h = malloc(sizeof(float) * hd.numel);
                rc = tubelet_forward(s, x.data, l, h, err, sizeof err);
                CHECK(rc == 0, "%s: forward failed: %s", name, err);
                if (!rc) {
                    parity_compare(name, "logits", threads, l, &lg);
                    parity_compare(name, "hidden", threads, h, &hd);
                }
                /* hidden_states[1]: the output of block 1, no final LayerNorm (not for ViViT
                 * Model 2, whose first block runs on per-frame sequences) */
                npy_array h1 = {0};
                char h1_path[1100];
                snprintf(h1_path, sizeof h1_path, "%s/hidden_layer1.npy", dir);
                if (threads == 1 && access(h1_path, F_OK) == 0 &&
                    load_npy(dir, "hidden_layer1.npy", &h1)) {
                    rc = tubelet_forward_hidden(s, x.data, 1, h, err, sizeof err);
                    CHECK(rc == 0 && h1.numel == hd.numel, "%s: forward_hidden(1) failed: %s",
                          name, err);
                    if (!rc && h1.numel == hd.numel) parity_compare(name, "layer1", threads, h, &h1);
                    npy_free(&h1);
                }
                free(l), free(h);
            }
        }
        tubelet_state_free(s);
        tubelet_model_free(m);
    }
done:
    npy_free(&x), npy_free(&lg), npy_free(&hd);
}

/* tubelet_model_save then tubelet_model_load: the same tensors under the same names, the same
 * config (attention type included), bit-identical logits. */
static void test_save_roundtrip(const char *name) {
    char dir[1024], out[] = "/tmp/tubelet_roundtrip_XXXXXX", err[1024];
    snprintf(dir, sizeof dir, "%s/%s", parity_fixtures_dir(), name);
    npy_array x = {0};
    tubelet_model *m = NULL, *m2 = NULL;
    tubelet_state *s = NULL, *s2 = NULL;
    float *l1 = NULL, *l2 = NULL;
    int ok = mkdtemp(out) != NULL && load_npy(dir, "input.npy", &x);
    tubelet_load_params lp = tubelet_load_default_params();
    lp.n_threads = 1;
    ok = ok && !tubelet_model_load(&m, dir, &lp, err, sizeof err) &&
         !tubelet_model_save(m, out, err, sizeof err) &&
         !tubelet_model_load(&m2, out, &lp, err, sizeof err);
    CHECK(ok, "%s: save and load: %s", name, err);
    if (!ok) goto done;
    tubelet_model_info i1, i2;
    tubelet_model_get_info(m, &i1), tubelet_model_get_info(m2, &i2);
    int same = !strcmp(i1.variant, i2.variant) && i1.n_params == i2.n_params &&
               tubelet_model_n_tensors(m) == tubelet_model_n_tensors(m2);
    for (int i = 0; same && i < tubelet_model_n_tensors(m); i++) {
        tubelet_shape a, b;
        const float *da, *db;
        same = !strcmp(tubelet_model_tensor(m, i, &a, &da),
                       tubelet_model_tensor(m2, i, &b, &db)) &&
               tubelet_shape_numel(&a) == tubelet_shape_numel(&b) &&
               !memcmp(da, db, sizeof(float) * (size_t)tubelet_shape_numel(&a));
    }
    CHECK(same, "%s: the saved model differs (variant %s / %s)", name, i1.variant, i2.variant);
    const int B = (int)x.shape[0], T = (int)x.shape[1], H = (int)x.shape[3], W = (int)x.shape[4];
    ok = !tubelet_state_new(&s, m, B, T, H, W, err, sizeof err) &&
         !tubelet_state_new(&s2, m2, B, T, H, W, err, sizeof err);
    tubelet_shape ls;
    if (ok) tubelet_state_logits_shape(s, &ls);
    const size_t n = ok ? (size_t)tubelet_shape_numel(&ls) : 0;
    l1 = malloc(sizeof(float) * (n + 1)), l2 = malloc(sizeof(float) * (n + 1));
    ok = ok && !tubelet_forward(s, x.data, l1, NULL, err, sizeof err) &&
         !tubelet_forward(s2, x.data, l2, NULL, err, sizeof err);
    CHECK(ok && !memcmp(l1, l2, sizeof(float) * n), "%s: logits after save and load differ %s",
          name, err);
    printf("  %-28s saved and loaded: %s, %d tensors, logits identical\n", name, i2.variant,
           tubelet_model_n_tensors(m2));
done:
    free(l1), free(l2);
    tubelet_state_free(s), tubelet_state_free(s2);
    tubelet_model_free(m), tubelet_model_free(m2);
    npy_free(&x);
    char path[1200];
    const char *files[] = {"config.json", "model.safetensors"};
    for (int i = 0; i < 2; i++) snprintf(path, sizeof path, "%s/%s", out, files[i]), remove(path);
    remove(out);
}

/* Every tensor of a and b: same names in the same order, shapes and values, bit for bit. */
static int same_tensors(const tubelet_model *a, const tubelet_model *b) {
    if (tubelet_model_n_tensors(a) != tubelet_model_n_tensors(b)) return 0;
    for (int i = 0; i < tubelet_model_n_tensors(a); i++) {
        tubelet_shape sa, sb;
        const float *da, *db;
        const char *na = tubelet_model_tensor(a, i, &sa, &da);
        const char *nb = tubelet_model_tensor(b, i, &sb, &db);
        if (strcmp(na, nb) || sa.ndim != sb.ndim ||
            memcmp(sa.dim, sb.dim, sizeof(int64_t) * (size_t)sa.ndim) ||
            memcmp(da, db, sizeof(float) * (size_t)tubelet_shape_numel(&sa)))
            return 0;
    }
    return 1;
}

/* The fixture's logits with model m, into a malloc'd buffer (NULL on failure). */
/* VideoMAE's q_bias and v_bias as transformers 5.17 saves them (attention.attention.query.bias,
 * value.bias): the same model, the reference's logits. */
static void test_videomae_renamed_biases(void) {
    char dir[1024], out[] = "/tmp/tubelet_qvnames_XXXXXX", err[1024] = "", path[1200];
    snprintf(dir, sizeof dir, "%s/videomae_mean", parity_fixtures_dir());
    npy_array x = {0}, ref = {0};
    tubelet_model *m = NULL, *m2 = NULL;
    tubelet_load_params lp = tubelet_load_default_params();
    lp.n_threads = 1;
    int ok = mkdtemp(out) && load_npy(dir, "input.npy", &x) && load_npy(dir, "logits.npy", &ref) &&
             !tubelet_model_load(&m, dir, &lp, err, sizeof err);
    const int n = ok ? tubelet_model_n_tensors(m) : 0;
    tubelet_tensor *t = calloc((size_t)(n + 1), sizeof *t);
    char (*names)[160] = calloc((size_t)(n + 1), sizeof *names);
    int renamed = 0;
    for (int i = 0; ok && i < n; i++) {
        tubelet_shape sh;
        const char *name = tubelet_model_tensor(m, i, &sh, &t[i].data);
        t[i].ndim = sh.ndim;
        memcpy(t[i].shape, sh.dim, sizeof(int64_t) * (size_t)sh.ndim);
        char *at = strstr(name, "attention.attention.");
        if (at && (!strcmp(at + 20, "q_bias") || !strcmp(at + 20, "v_bias"))) {
            snprintf(names[i], sizeof names[i], "%.*s%s", (int)(at + 20 - name), name,
                     at[20] == 'q' ? "query.bias" : "value.bias");
            renamed++;
        } else {
            snprintf(names[i], sizeof names[i], "%s", name);
        }
        t[i].name = names[i];
    }
    snprintf(path, sizeof path, "%s/model.safetensors", out);
    ok = ok && renamed > 0 && !tubelet_safetensors_write(path, t, n, err, sizeof err);
    size_t len = 0;
    char cfg_path[1200];
    snprintf(cfg_path, sizeof cfg_path, "%s/config.json", dir);
    char *cfg = ok ? (char *)check_read_file(cfg_path, &len) : NULL;
    snprintf(path, sizeof path, "%s/config.json", out);
    FILE *f = cfg ? fopen(path, "w") : NULL; /* the flag is qv_bias there already */
    ok = ok && f && fputs(cfg, f) >= 0;
    if (f) fclose(f);
    ok = ok && !tubelet_model_load(&m2, out, &lp, err, sizeof err);
    CHECK(ok, "VideoMAE with query.bias / value.bias names: %s", err);
    tubelet_shape ls;
    float *l = ok ? parity_logits(m2, &x, &ls) : NULL;
    const double d = l ? check_max_abs_diff(l, ref.data, (long)ref.numel) : INFINITY;
    CHECK(d < 1e-4, "VideoMAE with renamed biases: logits differ from the reference by %g", d);
    printf("  videomae q_bias saved as query.bias (%d tensors renamed): logits within %.1e\n",
           renamed, d);
    free(l), free(cfg), free(t), free(names);
    tubelet_model_free(m), tubelet_model_free(m2);
    npy_free(&x), npy_free(&ref);
    snprintf(path, sizeof path, "%s/model.safetensors", out), remove(path);
    snprintf(path, sizeof path, "%s/config.json", out), remove(path);
    remove(out);
}

/* ViViT Models 1-4: tubelet_model_save writes config.json (model_variant, num_temporal_layers)
 * and model.safetensors that load back to the same tensors and logits, bit for bit; a directory
 * with only that config.json starts from the references' initialisation (each parameter's rule:
 * test_init.c) and round-trips too. */
static void test_vivit_save_load(const char *name) {
    char dir[1024], tmp[] = "/tmp/tubelet_test_models_XXXXXX", err[1024], path[1200];
    snprintf(dir, sizeof dir, "%s/%s", parity_fixtures_dir(), name);
    npy_array x = {0};
    tubelet_model *m = NULL, *m2 = NULL, *r = NULL, *r2 = NULL;
    tubelet_load_params lp = tubelet_load_default_params();
    lp.n_threads = 2;
    int ok = load_npy(dir, "input.npy", &x) && mkdtemp(tmp) &&
             !tubelet_model_load(&m, dir, &lp, err, sizeof err) &&
             !tubelet_model_save(m, tmp, err, sizeof err) &&
             !tubelet_model_load(&m2, tmp, &lp, err, sizeof err);
    CHECK(ok, "%s: save and reload failed: %s", name, err);
    if (ok) {
        tubelet_shape ls;
        float *l1 = parity_logits(m, &x, &ls), *l2 = parity_logits(m2, &x, &ls);
        CHECK(same_tensors(m, m2), "%s: reloaded tensors differ", name);
        CHECK(l1 && l2 && !memcmp(l1, l2, sizeof(float) * (size_t)tubelet_shape_numel(&ls)),
              "%s: reloaded logits differ", name);
        free(l1), free(l2);
        /* only config.json: random initialisation */
        snprintf(path, sizeof path, "%s/model.safetensors", tmp);
        unlink(path);
        lp.random_init = 1, lp.seed = 5;
        ok = !tubelet_model_load(&r, tmp, &lp, err, sizeof err) &&
             !tubelet_model_save(r, tmp, err, sizeof err) &&
             !tubelet_model_load(&r2, tmp, &lp, err, sizeof err);
        CHECK(ok && same_tensors(r, r2) && tubelet_model_n_tensors(r) == tubelet_model_n_tensors(m),
              "%s: random initialisation does not round-trip: %s", name, err);
    }
    snprintf(path, sizeof path, "%s/model.safetensors", tmp);
    unlink(path);
    snprintf(path, sizeof path, "%s/config.json", tmp);
    unlink(path);
    rmdir(tmp);
    tubelet_model_free(m), tubelet_model_free(m2), tubelet_model_free(r), tubelet_model_free(r2);
    npy_free(&x);
}

/* Level i of tubelet_forward_features on input `in` (levels of layers, NULL: STMixer's four
 * copies of the final-normed output) against want[i]; threads 1 and 2. */
static void stmixer_levels(const char *what, const npy_array *in, int n, const int *layers,
                           const npy_array *const *want) {
    char dir[1024], err[1024];
    snprintf(dir, sizeof dir, "%s/stmixer_backbone", parity_fixtures_dir());
    for (int threads = 1; threads <= 2; threads++) {
        tubelet_load_params lp = tubelet_load_default_params();
        lp.n_threads = threads;
        tubelet_model *m = NULL;
        tubelet_state *s = NULL;
        int rc = tubelet_model_load(&m, dir, &lp, err, sizeof err);
        if (!rc) rc = tubelet_state_new(&s, m, (int)in->shape[0], (int)in->shape[1],
                                        (int)in->shape[3], (int)in->shape[4], err, sizeof err);
        tubelet_shape fs = {0};
        if (!rc) tubelet_state_feature_shape(s, &fs);
        for (int i = 0; !rc && i < n; i++)
            CHECK(parity_same_shape(&fs, want[i]), "stmixer %s level %d: shape differs", what, i);
        float *out[4] = {0};
        const size_t k = (size_t)tubelet_shape_numel(&fs);
        for (int i = 0; i < n; i++) out[i] = calloc(k + 1, sizeof(float));
        if (!rc) rc = tubelet_forward_features(s, in->data, n, layers, out, err, sizeof err);
        CHECK(rc == 0, "stmixer %s: %s", what, err);
        for (int i = 0; !rc && i < n; i++) {
            char name[64];
            snprintf(name, sizeof name, "%s level %d", what, i);
            if (want[i]->numel == k) parity_compare("stmixer_backbone", name, threads, out[i], want[i]);
        }
        for (int i = 0; i < n; i++) free(out[i]);
        tubelet_state_free(s);
        tubelet_model_free(m);
    }
}

/* The STMixer backbone (tools/stmixer_backbone_ref.py): the four-level features at the trained
 * size, levels taken after chosen blocks, other input sizes (bicubic positions, up and down),
 * bad level requests, and layer scale's random initialisation = layer_scale_init_value. */
static void test_stmixer(void) {
    char dir[1024], err[1024], tmp[] = "/tmp/tubelet_stmixer_XXXXXX", path[1200], src[1200];
    snprintf(dir, sizeof dir, "%s/stmixer_backbone", parity_fixtures_dir());
    npy_array x = {0}, f = {0}, fl = {0}, xu = {0}, fu = {0}, xd = {0}, fd = {0};
    if (!load_npy(dir, "input.npy", &x) || !load_npy(dir, "features.npy", &f) ||
        !load_npy(dir, "features_layers.npy", &fl) || !load_npy(dir, "input_28x24.npy", &xu) ||
        !load_npy(dir, "features_28x24.npy", &fu) || !load_npy(dir, "input_12x8.npy", &xd) ||
        !load_npy(dir, "features_12x8.npy", &fd)) {
        CHECK(0, "stmixer_backbone: fixture files unreadable");
        goto done;
    }
    const npy_array *four[4] = {&f, &f, &f, &f};
    stmixer_levels("features", &x, 4, NULL, four);
    /* hidden_states[0], [1], [2] and the final-normed output, one pass */
    npy_array lv[3];
    const int64_t per = fl.numel / 3;
    for (int i = 0; i < 3; i++) {
        lv[i] = f;
        lv[i].data = (float *)fl.data + per * i, lv[i].numel = per;
    }
    const npy_array *blocks[4] = {&lv[2], &lv[0], &f, &lv[1]};
    const int layers[4] = {2, 0, -1, 1};
    stmixer_levels("blocks", &x, 4, layers, blocks);
    const npy_array *up[1] = {&fu}, *down[1] = {&fd};
    stmixer_levels("28x24", &xu, 1, NULL, up);
    stmixer_levels("12x8", &xd, 1, NULL, down);

    tubelet_model *m = NULL;
    tubelet_state *s = NULL;
    tubelet_load_params lp = tubelet_load_default_params();
    int rc = tubelet_model_load(&m, dir, &lp, err, sizeof err);
    if (!rc) rc = tubelet_state_new(&s, m, (int)x.shape[0], (int)x.shape[1], (int)x.shape[3],
                                    (int)x.shape[4], err, sizeof err);
    CHECK(rc == 0, "stmixer_backbone: %s", err);
    if (!rc) {
        float *out[1] = {malloc(sizeof(float) * (size_t)f.numel)};
        const int too_deep[1] = {3}, too_low[1] = {-2};
        CHECK(tubelet_forward_features(s, x.data, 1, too_deep, out, err, sizeof err) ==
                  TUBELET_ERR_ARG && strstr(err, "layer 3 does not exist"),
              "stmixer: layer 3 of 2 accepted (%s)", err);
        CHECK(tubelet_forward_features(s, x.data, 1, too_low, out, err, sizeof err) ==
                  TUBELET_ERR_ARG, "stmixer: layer -2 accepted");
        CHECK(tubelet_forward_features(s, x.data, 0, NULL, out, err, sizeof err) == TUBELET_ERR_ARG,
              "stmixer: 0 levels accepted");
        free(out[0]);
        tubelet_model_info in;
        tubelet_model_get_info(m, &in);
        CHECK(in.layer_scale_init_value == 0.5 && in.num_layers == 2,
              "stmixer: layer_scale_init_value %g", in.layer_scale_init_value);
    }
    tubelet_state_free(s), s = NULL;
    /* only config.json: lambda_1, lambda_2 start at layer_scale_init_value; the rest as usual */
    int n_lambda = 0, wrong = 0;
    tubelet_model *r = NULL;
    char *text = NULL;
    tb_err e = {{0}};
    FILE *o = NULL;
    int ok = mkdtemp(tmp) != NULL;
    snprintf(src, sizeof src, "%s/config.json", dir);
    snprintf(path, sizeof path, "%s/config.json", tmp);
    ok = ok && !tb_read_file(src, &text, NULL, 1 << 20, &e) && (o = fopen(path, "w")) &&
         fputs(text, o) >= 0;
    if (o) fclose(o);
    lp.random_init = 1, lp.seed = 3;
    ok = ok && !tubelet_model_load(&r, tmp, &lp, err, sizeof err);
    CHECK(ok, "stmixer: random initialisation from config.json: %s %s", err, e.msg);
    for (int i = 0; ok && i < tubelet_model_n_tensors(r); i++) {
        tubelet_shape sh;
        const float *d;
        const char *pn = tubelet_model_tensor(r, i, &sh, &d);
        if (!strstr(pn, ".lambda_")) continue;
        n_lambda++;
        for (int64_t k = 0; k < tubelet_shape_numel(&sh); k++) wrong += d[k] != 0.5f;
    }
    CHECK(ok && n_lambda == 4 && !wrong && tubelet_model_n_tensors(r) == tubelet_model_n_tensors(m),
          "stmixer: random init has %d lambda tensors, %d entries not 0.5", n_lambda, wrong);
    printf("  stmixer_backbone random init: %d lambda tensors at layer_scale_init_value 0.5\n",
           n_lambda);
    free(text);
    unlink(path), rmdir(tmp);
    tubelet_model_free(r), tubelet_model_free(m);
done:
    npy_free(&x), npy_free(&f), npy_free(&fl), npy_free(&xu), npy_free(&fu), npy_free(&xd);
    npy_free(&fd);
}


/* Packed weights and reduced precision (docs/precision.md) on a fixture: logits within the
 * format's tolerance of PyTorch's float64 reference, the same top-1 class in every row, both
 * paths (AVX512-BF16 / VNNI and the portable one) agreeing to the tolerance; no f32 weights left
 * to save or train. fp32 for inference (weights packed for oneDNN's matmul, bias and activation
 * in its epilogue, q, k, v fused) is held to the project's forward tolerance, 1e-4.
 * Tolerance: max abs error <= tol * max(1, max |reference|) with tol = 2^-5 for bf16 (8 mantissa
 * bits: 2^-8 per rounding, of the weights and of each linear layer's input, compounded over the
 * blocks) and 2^-4 for int8 (7 bits and a sign of weights per channel, 8 bits of activations per
 * tensor). Measured errors are printed, a few times smaller. */
static void test_precision(const char *name) {
    char dir[1024], err[1024];
    snprintf(dir, sizeof dir, "%s/%s", parity_fixtures_dir(), name);
    npy_array x = {0}, lg = {0};
    if (!load_npy(dir, "input.npy", &x) || !load_npy(dir, "logits.npy", &lg)) {
        CHECK(0, "%s: fixture files unreadable", name);
        goto done;
    }
    const double scale = check_max_abs(lg.data, (long)lg.numel);
    const float *want = lg.data;
    for (int prec = TUBELET_PRECISION_FP32; prec <= TUBELET_PRECISION_INT8; prec++) {
        /* int8's weight step is twice as coarse where the CPU's kernel takes 7-bit weights
         * (AVX2 without VNNI: tb_int8_weight_max), and so is the tolerance */
        const double coarse = prec == TUBELET_PRECISION_INT8
                                  ? (double)tb_int8_weight_max(0) / tb_int8_weight_max(1)
                                  : 1.0;
        const double tol = (prec == TUBELET_PRECISION_FP32 ? 1e-4
                            : prec == TUBELET_PRECISION_BF16 ? 1.0 / 32
                                                             : coarse / 16) *
                           (scale > 1 ? scale : 1);
        float *l[2] = {NULL, NULL};
        for (int ref = 0; ref < 2; ref++) {
            tubelet_load_params lp = tubelet_load_default_params();
            lp.n_threads = 2, lp.precision = prec, lp.precision_reference = ref;
            lp.no_mmap = ref; /* both loading paths */
            lp.inference = 1;
            tubelet_model *m = NULL;
            tubelet_shape ls;
            int rc = tubelet_model_load(&m, dir, &lp, err, sizeof err);
            CHECK(rc == 0, "%s %s: load failed: %s", name, tubelet_precision_name(prec), err);
            if (rc) continue;
            tubelet_model_info in;
            tubelet_model_get_info(m, &in);
            CHECK(in.precision == prec && in.packed &&
                      (ref || prec == TUBELET_PRECISION_FP32 ? !in.precision_native : 1),
                  "%s: model info says precision %d native %d packed %d", name, in.precision,
                  in.precision_native, in.packed);
            l[ref] = parity_logits(m, &x, &ls);
            CHECK(l[ref] && parity_same_shape(&ls, &lg), "%s %s: forward failed", name,
                  tubelet_precision_name(prec));
            tubelet_grads *gr = NULL;
            CHECK(tubelet_grads_new(&gr, m, err, sizeof err) == TUBELET_ERR_UNSUPPORTED && !gr,
                  "%s: a %s model accepted gradients", name, tubelet_precision_name(prec));
            tubelet_model_free(m);
            if (!l[ref] || !parity_same_shape(&ls, &lg)) continue;
            double e = check_max_abs_diff(l[ref], lg.data, (long)lg.numel);
            const long rows = (long)lg.shape[0], n = (long)(lg.numel / lg.shape[0]);
            long close = 0;
            const int same_top1 = parity_same_top1(l[ref], want, rows, n, e, &close);
            CHECK(e <= tol, "%s %s%s: max abs error %.3g > tolerance %.3g", name,
                  tubelet_precision_name(prec), ref ? " (portable path)" : "", e, tol);
            CHECK(same_top1, "%s %s%s: top-1 differs from the reference", name,
                  tubelet_precision_name(prec), ref ? " (portable path)" : "");
            printf("  %-24s %s%-5s max abs err %.2e (max |ref| %.2f, tol %.1e), top-1 %s (%ld "
                   "of %ld rows too close to call)\n", name, tubelet_precision_name(prec),
                   ref ? (prec == TUBELET_PRECISION_FP32 ? "-copy" : "-ref") : "", e, scale, tol,
                   same_top1 ? "same" : "DIFFERS", close, rows);
        }
        if (l[0] && l[1]) { /* the two paths round the same values, but sum in another order:
                               a rounding of a later layer's input may then fall the other way,
                               so they agree to the format's tolerance (test_kernels checks one
                               layer to f32 rounding) */
            double d = check_max_abs_diff(l[0], l[1], (long)lg.numel);
            CHECK(d <= tol, "%s %s: the two paths differ by %.3g", name,
                  tubelet_precision_name(prec), d);
        }
        free(l[0]), free(l[1]);
    }
done:
    npy_free(&x), npy_free(&lg);
}

/* V-JEPA 2's attentive pooler is packed with the encoder: in bf16 no matrix of the pooler keeps
 * an f32 copy (its layers run converted; test_precision holds their outputs to bf16's
 * tolerance). */
static void test_vjepa2_pooler_packed(const char *name) {
    char dir[1024], err[1024];
    snprintf(dir, sizeof dir, "%s/%s", parity_fixtures_dir(), name);
    tubelet_load_params lp = tubelet_load_default_params();
    lp.precision = TUBELET_PRECISION_BF16, lp.inference = 1;
    tubelet_model *m = NULL;
    int rc = tubelet_model_load(&m, dir, &lp, err, sizeof err);
    CHECK(rc == 0, "%s: %s", name, err);
    if (rc) return;
    int matrices = 0, kept = 0;
    for (int i = 0; i < tubelet_model_n_tensors(m); i++) {
        tubelet_shape sh;
        const float *data = NULL;
        const char *tn = tubelet_model_tensor(m, i, &sh, &data);
        if (strncmp(tn, "pooler.", 7) || sh.ndim != 2) continue;
        matrices++;
        if (data) {
            kept++;
            CHECK(0, "%s: %s kept its f32 values in bf16", name, tn);
        }
    }
    CHECK(matrices >= 11 && !kept, "%s: %d pooler matrices, %d unpacked", name, matrices, kept);
    printf("  %-24s bf16: the pooler's %d matrices packed\n", name, matrices);
    tubelet_model_free(m);
}

/* ViT-B's linear weights take half the bytes in bf16 and a quarter in int8 (the classifier's 400
 * rows are padded to 448 in oneDNN's blocked layout; int8 adds a scale and a sum per row). */
static void test_precision_bytes(void) {
    char err[1024];
    size_t bytes[3] = {0, 0, 0};
    for (int prec = 0; prec < 3; prec++) {
        tubelet_load_params lp = tubelet_load_default_params();
        lp.n_threads = 2, lp.precision = prec;
        tubelet_model *m = NULL;
        tubelet_model_info in;
        int rc = tubelet_model_random(&m, "videomae-base", 1, &lp, err, sizeof err);
        CHECK(rc == 0, "videomae-base in %s: %s", tubelet_precision_name(prec), err);
        if (rc) return;
        tubelet_model_get_info(m, &in);
        bytes[prec] = in.linear_weight_bytes;
        tubelet_model_free(m);
    }
    printf("  videomae-base linear weights: fp32 %.1f MB, bf16 %.1f MB, int8 %.1f MB\n",
           bytes[0] / 1e6, bytes[1] / 1e6, bytes[2] / 1e6);
    CHECK(bytes[0] > 300e6, "fp32 linear weights of ViT-B: %zu bytes", bytes[0]);
    CHECK(bytes[1] <= bytes[0] / 2 * 1.002, "bf16 weights %zu bytes, fp32 %zu", bytes[1], bytes[0]);
    CHECK(bytes[2] <= bytes[0] / 4 * 1.01, "int8 weights %zu bytes, fp32 %zu", bytes[2], bytes[0]);
}
/* ViViT Model 4 on a clip of one time step (its temporal heads attend over one token each, a
 * grouping in row order, which keeps no row table): a batch of two clips gives each clip's
 * logits as it alone does, forward and backward run (found by tests/fuzz_config.c: a NULL row
 * table was read). */
static void test_vivit_m4_one_time_step(void) {
    char dir[] = "/tmp/tubelet_test_m4_XXXXXX", path[1100], err[1024];
    int made = mkdtemp(dir) != NULL;
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = made ? fopen(path, "w") : NULL;
    if (f) {
        fputs("{\"model_type\": \"vivit\", \"model_variant\": \"factorised_dot_product\", "
              "\"image_size\": 8, \"tubelet_size\": [2, 4, 4], \"num_frames\": 2, "
              "\"hidden_size\": 8, \"num_hidden_layers\": 2, \"num_attention_heads\": 4, "
              "\"intermediate_size\": 16, \"num_labels\": 3}", f);
        fclose(f);
    }
    tubelet_load_params lp = tubelet_load_default_params();
    lp.n_threads = 1;
    lp.no_mmap = 1;
    lp.random_init = 1, lp.seed = 3;
    tubelet_model *m = NULL;
    tubelet_state *s1 = NULL, *s2 = NULL;
    int ok = !tubelet_model_load(&m, dir, &lp, err, sizeof err);
    CHECK(ok, "vivit m4 config: %s", err);
    /* two frames, tubelet_size 2: one time step */
    const int T = 2, H = 8, W = 8, C = 3;
    ok = ok && !tubelet_state_new(&s1, m, 1, T, H, W, err, sizeof err) &&
         !tubelet_state_new(&s2, m, 2, T, H, W, err, sizeof err);
    CHECK(ok, "vivit m4, one time step: state: %s", err);
    if (ok) {
        tubelet_shape ls;
        tubelet_state_logits_shape(s1, &ls);
        const int64_t n = ls.dim[0] * ls.dim[1], px = (int64_t)T * C * H * W;
        float *x = malloc(sizeof(float) * 2 * px), *l1 = malloc(sizeof(float) * 2 * n),
              *l2 = malloc(sizeof(float) * 2 * n);
        for (int64_t i = 0; i < 2 * px; i++) x[i] = (float)((i * 37) % 101) / 50.0f - 1.0f;
        ok = !tubelet_forward(s1, x, l1, NULL, err, sizeof err) &&
             !tubelet_forward(s1, x + px, l1 + n, NULL, err, sizeof err) &&
             !tubelet_forward(s2, x, l2, NULL, err, sizeof err);
        CHECK(ok, "vivit m4, one time step: forward: %s", err);
        CHECK(ok && check_max_abs_diff(l1, l2, 2 * n) <= 1e-5 && check_max_abs(l1, 2 * n) > 0,
              "vivit m4, one time step: a batch of two differs from the clips alone by %g",
              check_max_abs_diff(l1, l2, 2 * n));
        int64_t labels[2] = {0, 1};
        float loss = 0;
        tubelet_grads *gr = NULL;
        ok = !tubelet_grads_new(&gr, m, err, sizeof err) &&
             !tubelet_state_enable_training(s2, 0, gr, err, sizeof err) &&
             !tubelet_forward_backward(s2, x, labels, &loss, NULL, err, sizeof err);
        CHECK(ok && loss > 0, "vivit m4, one time step: backward: %s (loss %g)", err, loss);
        free(x), free(l1), free(l2);
        tubelet_state_free(s2), s2 = NULL;
        tubelet_grads_free(gr);
    }
    tubelet_state_free(s1);
    tubelet_state_free(s2);
    tubelet_model_free(m);
    unlink(path);
    if (made) rmdir(dir);
}

/* More threads after tubelet_state_new than the state was made with: the attention scratch,
 * indexed by thread, must not overrun (ASan sees it), in the forward and in a training step;
 * the outputs still match the references. */
static void test_threads_raised(const char *name) {
    char dir[1024], err[1024] = "";
    snprintf(dir, sizeof dir, "%s/%s", parity_fixtures_dir(), name);
    npy_array x = {0}, y = {0}, lg = {0}, loss = {0};
    tubelet_model *m = NULL;
    tubelet_state *s = NULL;
    tubelet_grads *gr = NULL;
    float *l = NULL;
    tubelet_load_params lp = tubelet_load_default_params();
    lp.n_threads = 1;
    int ok = load_npy(dir, "input.npy", &x) && load_npy(dir, "logits.npy", &lg) &&
             load_npy(dir, "labels.npy", &y) && load_npy(dir, "loss.npy", &loss) &&
             !tubelet_model_load(&m, dir, &lp, err, sizeof err) &&
             !tubelet_grads_new(&gr, m, err, sizeof err) &&
             !tubelet_state_new(&s, m, (int)x.shape[0], (int)x.shape[1], (int)x.shape[3],
                                (int)x.shape[4], err, sizeof err) &&
             !tubelet_state_enable_training(s, 0, gr, err, sizeof err);
    CHECK(ok, "%s: setup failed: %s", name, err);
    if (!ok) goto done;
    tubelet_model_set_threads(m, 8);
    l = malloc(sizeof(float) * (size_t)lg.numel);
    int rc = tubelet_forward(s, x.data, l, NULL, err, sizeof err);
    CHECK(rc == 0, "%s: forward with 8 threads after the state: %s", name, err);
    if (!rc) parity_compare(name, "logits", 8, l, &lg);
    float got = 0, want = ((float *)loss.data)[0];
    rc = tubelet_forward_backward(s, x.data, y.data, &got, NULL, err, sizeof err);
    CHECK(rc == 0 && fabsf(got - want) <= 1e-5f * fmaxf(1, fabsf(want)),
          "%s: training step with 8 threads after the state: loss %.7f, reference %.7f %s", name,
          got, want, err);
done:
    free(l);
    tubelet_state_free(s);
    tubelet_grads_free(gr);
    tubelet_model_free(m);
    npy_free(&x), npy_free(&y), npy_free(&lg), npy_free(&loss);
}

/* A thread count above tubelet_max_threads, 4 x the CPUs this process may use (counted here
 * from its affinity mask), is refused at load with the cap in the message (1 << 30 used to load,
 * and then every forward ran out of memory); tubelet_model_set_threads lowers it to the cap. */
static void test_threads_cap(const char *name) {
    char dir[1024], err[1024] = "", want[64];
    snprintf(dir, sizeof dir, "%s/%s", parity_fixtures_dir(), name);
    cpu_set_t cpus;
    CHECK(sched_getaffinity(0, sizeof cpus, &cpus) == 0, "sched_getaffinity failed");
    const int cap = 4 * CPU_COUNT(&cpus);
    snprintf(want, sizeof want, "more than the cap of %d", cap);
    CHECK(tubelet_max_threads() == cap, "tubelet_max_threads %d, want %d", tubelet_max_threads(), cap);
    tubelet_load_params lp = tubelet_load_default_params();
    tubelet_model *m = NULL;
    const int too_many[] = {cap + 1, 1 << 30};
    for (int i = 0; i < 2; i++) {
        const int n = lp.n_threads = too_many[i];
        int rc = tubelet_model_load(&m, dir, &lp, err, sizeof err);
        CHECK(rc == TUBELET_ERR_ARG && !m && strstr(err, want), "%d threads: rc %d (%s)", n, rc, err);
        rc = tubelet_model_random(&m, "videomae-base", 1, &lp, err, sizeof err);
        CHECK(rc == TUBELET_ERR_ARG && !m && strstr(err, want), "%d threads, random: rc %d (%s)", n,
              rc, err);
    }
    lp.n_threads = cap;
    int rc = tubelet_model_load(&m, dir, &lp, err, sizeof err);
    CHECK(rc == 0 && tubelet_model_threads(m) == cap, "%s: %d threads refused: %s", name, cap, err);
    if (rc) return;
    tubelet_model_set_threads(m, 1 << 30);
    CHECK(tubelet_model_threads(m) == cap, "set_threads(1 << 30) gave %d", tubelet_model_threads(m));
    tubelet_model_free(m);
}

/* tubelet_pool: the mean of the patch tokens, and an error (not a read before the buffer) for
 * the cls token of a model without one, or an unknown mode. */
static void test_pool(const char *name, int has_cls) {
    char dir[1024], err[1024] = "";
    snprintf(dir, sizeof dir, "%s/%s", parity_fixtures_dir(), name);
    npy_array x = {0};
    tubelet_model *m = NULL;
    tubelet_state *s = NULL;
    tubelet_load_params lp = tubelet_load_default_params();
    lp.n_threads = 1;
    int ok = load_npy(dir, "input.npy", &x) && !tubelet_model_load(&m, dir, &lp, err, sizeof err) &&
             !tubelet_state_new(&s, m, (int)x.shape[0], (int)x.shape[1], (int)x.shape[3],
                                (int)x.shape[4], err, sizeof err);
    CHECK(ok, "%s: setup failed: %s", name, err);
    if (ok) {
        tubelet_shape hs;
        tubelet_state_hidden_shape(s, &hs);
        const int64_t B = hs.dim[0], L = hs.dim[1], D = hs.dim[2];
        float *h = malloc(sizeof(float) * (size_t)tubelet_shape_numel(&hs));
        float *o = malloc(sizeof(float) * (size_t)(B * D));
        ok = !tubelet_forward(s, x.data, NULL, h, err, sizeof err);
        CHECK(ok, "%s: forward: %s", name, err);
        CHECK(tubelet_state_has_cls(s) == has_cls, "%s: has_cls %d", name, tubelet_state_has_cls(s));
        CHECK(tubelet_pool(s, h, TUBELET_POOL_MEAN, o) == 0, "%s: mean pooling failed", name);
        double worst = 0; /* the mean of rows [cls, L) of each clip */
        for (int64_t b = 0; b < B; b++)
            for (int64_t d = 0; d < D; d++) {
                double acc = 0;
                for (int64_t j = has_cls; j < L; j++) acc += h[(b * L + j) * D + d];
                worst = fmax(worst, fabs(acc / (double)(L - has_cls) - o[b * D + d]));
            }
        CHECK(worst < 1e-5, "%s: mean pooling differs from the mean of the patch rows by %g",
              name, worst);
        const int rc = tubelet_pool(s, h, TUBELET_POOL_CLS, o);
        CHECK(has_cls ? rc == 0 && !memcmp(o, h, sizeof(float) * (size_t)D) : rc == TUBELET_ERR_ARG,
              "%s: cls pooling returned %d", name, rc);
        CHECK(tubelet_pool(s, h, 7, o) == TUBELET_ERR_ARG, "%s: pooling mode 7 accepted", name);
        free(h), free(o);
    }
    tubelet_state_free(s);
    tubelet_model_free(m);
    npy_free(&x);
}

/* A packed product that cannot run fills its output with NaN; tubelet_forward must say so
 * rather than return OK. The state's context is filled with TB_LOWP_CACHE other shapes first,
 * so that the forward's own products find no room for their primitives. */
static void test_packed_failure(const char *name) {
    char dir[1024], err[1024] = "";
    snprintf(dir, sizeof dir, "%s/%s", parity_fixtures_dir(), name);
    npy_array x = {0};
    tubelet_model *m = NULL;
    tubelet_state *s = NULL;
    tubelet_load_params lp = tubelet_load_default_params();
    lp.n_threads = 1, lp.inference = 1;
    int ok = load_npy(dir, "input.npy", &x) && !tubelet_model_load(&m, dir, &lp, err, sizeof err) &&
             !tubelet_state_new(&s, m, (int)x.shape[0], (int)x.shape[1], (int)x.shape[3],
                                (int)x.shape[4], err, sizeof err);
    CHECK(ok && s->lowp, "%s: packed setup failed: %s", name, err);
    if (ok && s->lowp) {
        tb_err e = {{0}};
        tb_linear_pack *pack = NULL;
        const tb_qweight *w = NULL;
        float W[4] = {1, 2, 3, 4}, in[2 * TB_LOWP_CACHE + 2], out[2 * TB_LOWP_CACHE + 2];
        for (int i = 0; i < 2 * TB_LOWP_CACHE + 2; i++) in[i] = 1;
        ok = !tb_linear_pack_new(&pack, TB_PREC_FP32, 1, 1, &e) &&
             !tb_linear_pack_add(pack, "test", W, 2, 2, &w, &e);
        CHECK(ok, "%s: weight: %s", name, e.msg);
        for (int M = 1; ok && M <= TB_LOWP_CACHE; M++)
            CHECK(tb_qlinear(s->lowp, out, 2, in, w, NULL, M, 0, -1) == 0, "product %d failed", M);
        CHECK(ok && tb_qlinear(s->lowp, out, 2, in, w, NULL, TB_LOWP_CACHE + 1, 0, -1) != 0 &&
                  isnan(out[0]),
              "%s: a product beyond the cache neither failed nor gave NaN", name);
        tb_lowp_ctx_status(s->lowp);
        tubelet_shape ls;
        tubelet_state_logits_shape(s, &ls);
        float *l = malloc(sizeof(float) * (size_t)tubelet_shape_numel(&ls));
        const int rc = tubelet_forward(s, x.data, l, NULL, err, sizeof err);
        CHECK(rc == TUBELET_ERR_UNSUPPORTED && strstr(err, "oneDNN"),
              "%s: a forward whose products could not run returned %d (%s)", name, rc, err);
        printf("  %-24s packed product failure: %s\n", name, err);
        free(l);
        tb_linear_pack_free(pack);
    }
    tubelet_state_free(s);
    tubelet_model_free(m);
    npy_free(&x);
}

/* A name that is no local path (a Hub id, a URL, "-") says so and what to do, instead of "No such
 * file or directory" (issue 27); an ordinary missing directory keeps the plain message. */
static void test_not_local(void) {
    static const struct {
        const char *name, *want1, *want2;
    } cases[] = {
        {"MCG-NJU/videomae-base-finetuned-kinetics", "Hugging Face Hub id",
         "hf download MCG-NJU/videomae-base-finetuned-kinetics --local-dir DIR"},
        {"hf://MCG-NJU/videomae-base", "downloads nothing", "hf download MCG-NJU/videomae-base "},
        {"https://huggingface.co/MCG-NJU/videomae-base/tree/main", "not a local path",
         "download MCG-NJU/videomae-base --local-dir"},
        {"http://example.com/model.pth", "not a local path but a URL", "downloads nothing"},
        {"-", "standard input", "model directory"},
        {"no_such_dir_tubelet", "No such file", "no_such_dir_tubelet/config.json"},
        {"tests/no_such_model", "No such file", "tests/no_such_model/config.json"}, /* a typo */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        tubelet_model *m = NULL;
        char err[1024] = "";
        int rc = tubelet_model_load(&m, cases[i].name, NULL, err, sizeof err);
        CHECK(rc == TUBELET_ERR_IO && !m && strstr(err, cases[i].name) && strstr(err, cases[i].want1) &&
                  strstr(err, cases[i].want2),
              "load %s: %d '%s'", cases[i].name, rc, err);
    }
}

/* tubelet info --arch describes an architecture without weights (issue 27): the parameter
 * counts are transformers 5.23's for the same configurations (its default VideoMAEConfig with
 * use_mean_pooling, TimesformerConfig, VivitConfig, num_labels 400: sum of numel() of
 * *ForVideoClassification built on the meta device), the tensors are those of the random model
 * with no data, and nothing runs on it. */
static void test_describe(void) {
    static const struct {
        const char *arch;
        int64_t params;
    } hf[] = {{"videomae-base", 86534800}, {"timesformer-base", 121566352}, {"vivit-base", 88954000}};
    char err[1024] = "";
    for (size_t i = 0; i < sizeof hf / sizeof hf[0]; i++) {
        tubelet_model *m = NULL;
        CHECK(tubelet_model_describe(&m, hf[i].arch, err, sizeof err) == 0, "describe %s: %s",
              hf[i].arch, err);
        if (!m) continue;
        tubelet_model_info in;
        tubelet_model_get_info(m, &in);
        CHECK(in.n_params == hf[i].params, "describe %s: %lld parameters, transformers has %lld",
              hf[i].arch, (long long)in.n_params, (long long)hf[i].params);
        tubelet_state *s = NULL;
        tubelet_grads *g = NULL;
        CHECK(tubelet_state_new(&s, m, 1, in.num_frames, in.image_height, in.image_width, err,
                                sizeof err) == TUBELET_ERR_UNSUPPORTED && !s && strstr(err, "no weights"),
              "describe %s: state_new: %s", hf[i].arch, err);
        CHECK(tubelet_grads_new(&g, m, err, sizeof err) == TUBELET_ERR_UNSUPPORTED && !g,
              "describe %s: grads_new: %s", hf[i].arch, err);
        CHECK(tubelet_model_save(m, "/nonexistent/never", err, sizeof err) == TUBELET_ERR_UNSUPPORTED,
              "describe %s: save: %s", hf[i].arch, err);
        tubelet_model_free(m);
    }
    tubelet_model *d = NULL, *r = NULL;
    CHECK(tubelet_model_describe(&d, "nope", err, sizeof err) == TUBELET_ERR_ARG && !d &&
              strstr(err, "nope"), "describe nope: %s", err);
    /* the same tensors, names and shapes as the random model (the smallest built-in one) */
    if (tubelet_model_describe(&d, "video-swin-t", err, sizeof err) == 0 &&
        tubelet_model_random(&r, "video-swin-t", 1, NULL, err, sizeof err) == 0) {
        int n = tubelet_model_n_tensors(d), same = n == tubelet_model_n_tensors(r);
        for (int i = 0; same && i < n; i++) {
            tubelet_shape sd, sr;
            const float *pd = (const float *)1, *pr = NULL;
            const char *nd = tubelet_model_tensor(d, i, &sd, &pd);
            const char *nr = tubelet_model_tensor(r, i, &sr, &pr);
            same = !strcmp(nd, nr) && sd.ndim == sr.ndim && pd == NULL && pr != NULL &&
                   !memcmp(sd.dim, sr.dim, sizeof(int64_t) * (size_t)sd.ndim);
        }
        tubelet_model_info a, b;
        tubelet_model_get_info(d, &a), tubelet_model_get_info(r, &b);
        CHECK(same && a.n_params == b.n_params && a.flop_per_clip == b.flop_per_clip,
              "describe video-swin-t: tensors or info differ from the random model's");
    } else {
        CHECK(0, "video-swin-t: %s", err);
    }
    tubelet_model_free(d);
    tubelet_model_free(r);
}

/* A batch whose token rows do not fit the int32 index tables (attention groups, visible tokens)
 * is refused, as a shape, before anything of its size is allocated: the input checks allow
 * such shapes. Neither the state nor its pixels are ever made. */
static void test_row_overflow(void) {
    const struct {
        const char *fixture;
        int B, T, H, W;
        const char *rows;
    } cases[] = {
        /* 4096 clips of 2 x 512 x 512 patches: 2^31 */
        {"videomae_mean", 4096, 4, 4096, 4096, "2147483648 token rows"},
        /* 4096 clips of 3 x 42 x 4161 patches, 2^31 - 8192; with the spatial encoder's cls row
         * per frame 2^31 + 4096 rows */
        {"vivit_m2_tubelet", 4096, 7, 168, 12483, "2147487744 token rows"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char dir[1024], err[1024] = "";
        snprintf(dir, sizeof dir, "%s/%s", parity_fixtures_dir(), cases[i].fixture);
        tubelet_model *m = NULL;
        tubelet_state *s = NULL;
        tubelet_load_params lp = tubelet_load_default_params();
        lp.n_threads = 1;
        int rc = tubelet_model_load(&m, dir, &lp, err, sizeof err);
        CHECK(!rc, "%s: %s", cases[i].fixture, err);
        if (rc) continue;
        rc = tubelet_state_new(&s, m, cases[i].B, cases[i].T, cases[i].H, cases[i].W, err,
                               sizeof err);
        CHECK(rc == TUBELET_ERR_SHAPE && !s && strstr(err, cases[i].rows) &&
                  strstr(err, "at most 2147483647"),
              "%s: %d clips of %d frames of %dx%d (%s) gave %d (%s)",
              cases[i].fixture, cases[i].B, cases[i].T, cases[i].H, cases[i].W, cases[i].rows, rc,
              err);
        tubelet_state_free(s);
        tubelet_model_free(m);
    }
}

static void each_fixture(const char *name, void *arg) {
    (void)arg;
    run_fixture(name);
    test_precision(name);
}

int main(int argc, char **argv) {
    check_cases(argc, argv);
    const int n = parity_each_listed("list.txt", each_fixture, NULL);
    CHECK(n >= 10, "only %d fixtures listed", n);
    CASE(test_precision_bytes());
    CASE(test_vjepa2_pooler_packed("vjepa2_hd20"));
    CASE(test_save_roundtrip("timesformer_local_global_odd"));
    CASE(test_save_roundtrip("timesformer_axial_odd"));
    CASE(test_save_roundtrip("timesformer_divided"));
    const char *variants[] = {"vivit_m1_frames",  "vivit_m2_tubelet", "vivit_m2_frames",
                              "vivit_m3_tubelet", "vivit_m4_frames"};
    for (int i = 0; i < 5; i++)
        if (check_select("test_vivit_save_load(%s)", variants[i])) test_vivit_save_load(variants[i]);
    CASE(test_save_roundtrip("stmixer_backbone"));
    CASE(test_vivit_save_load("stmixer_backbone")); /* not ViViT, the same checks */
    CASE(test_stmixer());
    CASE(test_vivit_m4_one_time_step());
    CASE(test_threads_raised("vivit_m1"));
    CASE(test_threads_raised("timesformer_divided"));
    CASE(test_threads_cap("vivit_m1"));
    CASE(test_pool("videomae_mean", 0));
    CASE(test_videomae_renamed_biases());
    CASE(test_pool("vivit_m1", 1));
    CASE(test_packed_failure("vivit_m1"));
    CASE(test_not_local());
    CASE(test_describe());
    CASE(test_row_overflow());
    return check_done();
}
