/* Static int8 (docs/precision.md, "Static int8"):
 *   - calibration records each layer's input range: equal to ranges computed here from the
 *     inputs and from PyTorch's float64 hidden states (patch embedding, q/k/v of every block,
 *     classifier), at percentile 100 and below, and averaged over two batches;
 *   - an int8 model loaded beside int8_scales.json runs with those scales (not the dynamic ones)
 *     on every fixture, within the int8 tolerance of the reference (as tests/test_models.c's);
 *   - without the file it says it falls back to dynamic int8;
 *   - malformed, hostile or foreign files are refused with their path in the message. */
#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "check.h"
#include "io/npy.h"
#include "kernels/linear.h"
#include "kernels/lowp.h"
#include "parity.h"
#include "tubelet.h"

/* ---- helpers ---- */

typedef struct {
    char text[16384];
} log_buf;

static void capture(void *user, int level, const char *msg) {
    log_buf *b = user;
    size_t n = strlen(b->text);
    snprintf(b->text + n, sizeof b->text - n, "%d %s\n", level, msg);
}

static tubelet_model *load(const char *dir, int prec, int ref, int inference, log_buf *log,
                           char *err, size_t errlen, int *rc) {
    tubelet_load_params lp = tubelet_load_default_params();
    lp.n_threads = 2, lp.precision = prec, lp.precision_reference = ref, lp.inference = inference;
    if (log) log->text[0] = 0, lp.log = capture, lp.log_user = log;
    tubelet_model *m = NULL;
    int r = tubelet_model_load(&m, dir, &lp, err, errlen);
    if (rc) *rc = r;
    return m;
}

/* A copy of fixture `name` in a new temporary directory: symbolic links to its files. */
static int fixture_copy(const char *name, char *tmp, size_t cap) {
    char src[1024], a[2400], b[2400];
    snprintf(src, sizeof src, "%s/%s", parity_fixtures_dir(), name);
    snprintf(tmp, cap, "/tmp/tubelet_int8_XXXXXX");
    DIR *d = mkdtemp(tmp) ? opendir(src) : NULL;
    if (!d) return 0;
    char cwd[1024];
    if (!getcwd(cwd, sizeof cwd)) cwd[0] = 0;
    for (struct dirent *de; (de = readdir(d));) {
        if (de->d_name[0] == '.') continue;
        snprintf(a, sizeof a, "%s%s%s/%s", src[0] == '/' ? "" : cwd, src[0] == '/' ? "" : "/",
                 src, de->d_name);
        snprintf(b, sizeof b, "%s/%s", tmp, de->d_name);
        if (symlink(a, b)) {
            closedir(d);
            return 0;
        }
    }
    closedir(d);
    return 1;
}

static void remove_tree(const char *dir) {
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd)) printf("could not remove %s\n", dir);
}

static int load_fixture_npy(const char *fixture, const char *name, npy_array *a) {
    return parity_fixture_npy(fixture, name, a);
}

/* Calibrates the fp32 model in dir on the batches x[0..nb) at percentile p; writes
 * int8_scales.json there when write is set. The session is returned (NULL on failure) with its
 * model in *mp (which must outlive it; calib_free frees both). */
static tubelet_calib *calibrate(const char *dir, const npy_array *const *x, int nb, double p,
                                int write, tubelet_model **mp) {
    *mp = NULL;
    char err[1024] = "";
    tubelet_model *m = load(dir, TUBELET_PRECISION_FP32, 0, 1, NULL, err, sizeof err, NULL);
    CHECK(m, "%s: %s", dir, err);
    if (!m) return NULL;
    tubelet_calib *c = NULL;
    tubelet_state *s = NULL;
    int rc = tubelet_calib_new(&c, m, p, err, sizeof err);
    const int64_t *sh = x[0]->shape;
    if (!rc) rc = tubelet_state_new(&s, m, (int)sh[0], (int)sh[1], (int)sh[3], (int)sh[4], err,
                                    sizeof err);
    for (int i = 0; i < nb && !rc; i++) rc = tubelet_calib_observe(c, s, x[i]->data, err, sizeof err);
    if (!rc && write) rc = tubelet_calib_write(c, dir, err, sizeof err);
    CHECK(!rc, "calibrating %s: %s", dir, err);
    tubelet_state_free(s);
    if (rc) tubelet_calib_free(c), c = NULL;
    if (!c) tubelet_model_free(m);
    else *mp = m;
    return c;
}

static void calib_free(tubelet_calib *c, tubelet_model *m) {
    tubelet_calib_free(c);
    tubelet_model_free(m);
}

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* numpy.quantile (linear) of v[0..n) at q (v is sorted here). */
static double quantile_sorted(const double *v, long n, double q) {
    const double pos = q * (double)(n - 1);
    const long k = (long)pos;
    return k + 1 < n ? v[k] + (pos - (double)k) * (v[k + 1] - v[k]) : v[k];
}

/* The range at percentile p of v[0..n) (reordered). */
static void range_of(double *v, long n, double p, double *lo, double *hi) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    *lo = quantile_sorted(v, n, 1 - p / 100), *hi = quantile_sorted(v, n, p / 100);
}

/* LayerNorm of each row of x (rows x d) with parameter tensors wname, bname of m, into y. */
static int layernorm(const tubelet_model *m, const char *wname, const char *bname, double eps,
                     const float *x, long rows, long d, double *y) {
    const float *w = NULL, *b = NULL;
    tubelet_shape sh;
    for (int i = 0; i < tubelet_model_n_tensors(m); i++) {
        const float *data;
        const char *n = tubelet_model_tensor(m, i, &sh, &data);
        if (!strcmp(n, wname)) w = data;
        if (!strcmp(n, bname)) b = data;
    }
    CHECK(w && b, "no tensors %s, %s", wname, bname);
    if (!w || !b) return 0;
    for (long r = 0; r < rows; r++) {
        double mean = 0, var = 0;
        for (long j = 0; j < d; j++) mean += x[r * d + j];
        mean /= (double)d;
        for (long j = 0; j < d; j++) var += (x[r * d + j] - mean) * (x[r * d + j] - mean);
        var /= (double)d;
        for (long j = 0; j < d; j++)
            y[r * d + j] = (x[r * d + j] - mean) / sqrt(var + eps) * w[j] + b[j];
    }
    return 1;
}

static int layer_index(const tubelet_calib *c, const char *name) {
    float lo, hi, s;
    int z;
    for (int i = 0; i < tubelet_calib_n_layers(c); i++)
        if (!strcmp(tubelet_calib_layer(c, i, &lo, &hi, &s, &z), name)) return i;
    return -1;
}

/* Layer `name` of c against the range wanted (widened to 0) within tol relative; its scale and
 * zero point are the u8 quantisation of that range. */
static void check_layer(const tubelet_calib *c, const char *what, const char *name, double lo,
                        double hi, double tol) {
    const int i = layer_index(c, name);
    CHECK(i >= 0, "%s: no layer %s", what, name);
    if (i < 0) return;
    float l, h, s;
    int z;
    tubelet_calib_layer(c, i, &l, &h, &s, &z);
    lo = lo < 0 ? lo : 0, hi = hi > 0 ? hi : 0;
    const double el = fabs(l - lo) / fmax(1, fabs(lo)), eh = fabs(h - hi) / fmax(1, fabs(hi));
    const double want_s = (hi - lo) / 255;
    CHECK(el <= tol && eh <= tol && fabs(s - want_s) <= tol * want_s + 1e-9,
          "%s %s: range [%.7g, %.7g] scale %.7g, computed here [%.7g, %.7g] scale %.7g", what,
          name, l, h, s, lo, hi, want_s);
    const float sf = (h - l) / 255.0f;
    CHECK(s == sf && z == (int)nearbyintf(-l / sf) && z >= 0 && z <= 255,
          "%s %s: scale %.9g zero point %d are not the u8 quantisation of [%.9g, %.9g]", what,
          name, s, z, l, h);
}

/* ---- 1. the ranges ---- */

static void test_ranges(const char *fixture, int mean_pool) {
    char dir[1024], err[1024] = "";
    snprintf(dir, sizeof dir, "%s/%s", parity_fixtures_dir(), fixture);
    npy_array x = {0}, h1 = {0}, hl = {0}, x2 = {0};
    if (!load_fixture_npy(fixture, "input.npy", &x) ||
        !load_fixture_npy(fixture, "hidden_layer1.npy", &h1) ||
        !load_fixture_npy(fixture, "hidden.npy", &hl) ||
        !load_fixture_npy(fixture, "input.npy", &x2))
        goto done;
    tubelet_model *u = load(dir, TUBELET_PRECISION_FP32, 0, 0, NULL, err, sizeof err, NULL);
    CHECK(u, "%s: %s", dir, err);
    if (!u) goto done;
    tubelet_model_info in;
    tubelet_model_get_info(u, &in);
    const long B = (long)x.shape[0], D = in.hidden_size, R = (long)h1.shape[1];
    const char *fam = in.family;
    /* the inputs of the checked layers, computed here */
    const long n_pix = (long)x.numel;
    double *pix = malloc(sizeof(double) * (size_t)n_pix);
    double *q0 = malloc(sizeof(double) * (size_t)(B * R * D));
    double *q1 = malloc(sizeof(double) * (size_t)(B * R * D));
    double *head = malloc(sizeof(double) * (size_t)(B * D));
    float *h0 = malloc(sizeof(float) * (size_t)(B * R * D));
    char wn[128], bn[128];
    tubelet_state *s = NULL;
    int ok = pix && q0 && q1 && head && h0 &&
             !tubelet_state_new(&s, u, (int)B, (int)x.shape[1], (int)x.shape[3],
                                (int)x.shape[4], err, sizeof err) &&
             !tubelet_forward_hidden(s, x.data, 0, h0, err, sizeof err);
    CHECK(ok, "%s: hidden_states[0]: %s", fixture, err);
    const float *xd = x.data, *hld = hl.data;
    for (long i = 0; ok && i < n_pix; i++) pix[i] = xd[i];
    for (int l = 0; ok && l < 2; l++) {
        snprintf(wn, sizeof wn, "%s.encoder.layer.%d.layernorm_before.weight", fam, l);
        snprintf(bn, sizeof bn, "%s.encoder.layer.%d.layernorm_before.bias", fam, l);
        ok = layernorm(u, wn, bn, 1e-6, l ? h1.data : h0, B * R, D, l ? q1 : q0);
    }
    if (ok && mean_pool) { /* VideoMAE: fc_norm (eps 1e-5) of the mean token */
        float *mean = calloc((size_t)(B * D), sizeof(float));
        for (long b = 0; mean && b < B; b++)
            for (long r = 0; r < R; r++)
                for (long j = 0; j < D; j++) mean[b * D + j] += hld[(b * R + r) * D + j] / R;
        ok = mean && layernorm(u, "fc_norm.weight", "fc_norm.bias", 1e-5, mean, B, D, head);
        free(mean);
    } else if (ok) { /* the cls token of last_hidden_state (the final LayerNorm applied) */
        for (long b = 0; b < B; b++)
            for (long j = 0; j < D; j++) head[b * D + j] = hld[b * R * D + j];
    }
    const char *names[] = {"patch_embed", "blocks.0.attn.qkv", "blocks.1.attn.qkv", "head"};
    double *vals[] = {pix, q0, q1, head};
    const long counts[] = {n_pix, B * R * D, B * R * D, B * D};
    /* PyTorch's float64 hidden states against our fp32 ones: the forward tolerance */
    const double tols[] = {1e-6, 1e-4, 1e-4, 1e-4};
    const double pcts[] = {100, 99.9};
    for (int pi = 0; ok && pi < 2; pi++) {
        const npy_array *one[] = {&x};
        tubelet_model *cm;
        tubelet_calib *c = calibrate(dir, one, 1, pcts[pi], 0, &cm);
        for (int k = 0; c && k < 4; k++) {
            double *v = malloc(sizeof(double) * (size_t)counts[k]), lo, hi;
            memcpy(v, vals[k], sizeof(double) * (size_t)counts[k]);
            range_of(v, counts[k], pcts[pi], &lo, &hi);
            char what[160];
            snprintf(what, sizeof what, "%s percentile %g", fixture, pcts[pi]);
            check_layer(c, what, names[k], lo, hi, tols[k]);
            free(v);
        }
        if (c) printf("  %-16s percentile %-5g: %d layers; patch embedding, q/k/v of blocks 0 and "
                      "1 and the classifier match\n", fixture, pcts[pi], tubelet_calib_n_layers(c));
        calib_free(c, cm);
    }
    /* two batches, the second the first doubled: the extremes of both at percentile 100, the
     * mean of the two percentiles below */
    float *hd = x2.data;
    for (long i = 0; ok && i < (long)x2.numel; i++) hd[i] = xd[i] * 2;
    for (int pi = 0; ok && pi < 2; pi++) {
        const npy_array *two[] = {&x, &x2};
        tubelet_model *cm;
        tubelet_calib *c = calibrate(dir, two, 2, pcts[pi], 0, &cm);
        double *v = malloc(sizeof(double) * (size_t)n_pix), lo, hi;
        memcpy(v, pix, sizeof(double) * (size_t)n_pix);
        range_of(v, n_pix, pcts[pi], &lo, &hi);
        const double f = pi ? 1.5 : 2;
        if (c) check_layer(c, "two batches", "patch_embed", f * lo, f * hi, 1e-6);
        free(v);
        calib_free(c, cm);
    }
    tubelet_state_free(s);
    tubelet_model_free(u);
    free(pix), free(q0), free(q1), free(head), free(h0);
done:
    npy_free(&x), npy_free(&h1), npy_free(&hl), npy_free(&x2);
}

/* ---- 2 and 3. static int8 on the fixtures; the notice without the file ---- */

static double worst_static = 0, worst_dynamic = 0;

/* x with its frames in reverse order and each frame mirrored: another clip of the same
 * statistics. The scales are calibrated on it and on x (calibrated on it alone, the random
 * fixtures' activations beyond its ranges are clipped: errors up to 0.27 x max |ref|). */
static void other_clip(const npy_array *x, npy_array *y) {
    const int64_t B = x->shape[0], T = x->shape[1], C = x->shape[2], H = x->shape[3],
                  W = x->shape[4];
    const float *xd = x->data;
    float *yd = y->data;
    for (int64_t b = 0; b < B; b++)
        for (int64_t t = 0; t < T; t++)
            for (int64_t ch = 0; ch < C; ch++)
                for (int64_t i = 0; i < H; i++)
                    for (int64_t j = 0; j < W; j++)
                        yd[(((b * T + t) * C + ch) * H + i) * W + j] =
                            xd[(((b * T + (T - 1 - t)) * C + ch) * H + i) * W + (W - 1 - j)];
}

static void test_static(const char *fixture) {
    char dir[1024], tmp[256], err[1024] = "";
    snprintf(dir, sizeof dir, "%s/%s", parity_fixtures_dir(), fixture);
    npy_array x = {0}, y = {0}, lg = {0};
    if (!load_fixture_npy(fixture, "input.npy", &x) || !load_fixture_npy(fixture, "input.npy", &y) ||
        !load_fixture_npy(fixture, "logits.npy", &lg) || !fixture_copy(fixture, tmp, sizeof tmp)) {
        CHECK(0, "%s: fixture unreadable", fixture);
        goto done;
    }
    other_clip(&x, &y);
    const npy_array *cal[] = {&y, &x};
    tubelet_model *cm;
    tubelet_calib *c = calibrate(tmp, cal, 2, 100, 1, &cm);
    calib_free(c, cm);
    const double scale = check_max_abs(lg.data, (long)lg.numel);
    const double tol = (scale > 1 ? scale : 1) / 16;
    log_buf log;
    tubelet_shape ls;
    /* dynamic int8: the fixture's own directory, without the file */
    tubelet_model *m = load(dir, TUBELET_PRECISION_INT8, 1, 0, &log, err, sizeof err, NULL);
    CHECK(m && strstr(log.text, "no int8_scales.json") && strstr(log.text, "dynamic int8"),
          "%s: the dynamic int8 load said nothing of its fallback: %s", fixture, log.text);
    tubelet_model_info in = {0};
    if (m) tubelet_model_get_info(m, &in);
    CHECK(!in.int8_static, "%s: int8 without int8_scales.json says static", fixture);
    float *ld = m ? parity_logits(m, &x, &ls) : NULL;
    tubelet_model_free(m);
    for (int ref = 0; ref < 2; ref++) {
        m = load(tmp, TUBELET_PRECISION_INT8, ref, 0, &log, err, sizeof err, NULL);
        CHECK(m, "%s: static int8 load: %s", fixture, err);
        if (!m) continue;
        tubelet_model_get_info(m, &in);
        CHECK(in.int8_static && strstr(log.text, "static int8") && !strstr(log.text, "dynamic"),
              "%s: static int8 not in use (info %d): %s", fixture, in.int8_static, log.text);
        float *l = parity_logits(m, &x, &ls);
        tubelet_model_free(m);
        CHECK(l && ld, "%s: forward failed", fixture);
        if (!l || !ld) {
            free(l);
            continue;
        }
        const double e = check_max_abs_diff(l, lg.data, (long)lg.numel);
        const double ed = check_max_abs_diff(ld, lg.data, (long)lg.numel);
        const double dd = check_max_abs_diff(l, ld, (long)lg.numel);
        const long rows = (long)lg.shape[0], n = (long)(lg.numel / lg.shape[0]);
        long close = 0;
        const int same = parity_same_top1(l, lg.data, rows, n, e, &close);
        CHECK(e <= tol && same, "%s static int8%s: max abs error %.3g (tolerance %.3g), top-1 %s",
              fixture, ref ? " (portable path)" : "", e, tol, same ? "same" : "DIFFERS");
        CHECK(dd > 0, "%s: static int8 gave dynamic int8's logits exactly", fixture);
        if (!ref) {
            printf("  %-28s static int8 max abs err %.2e, dynamic %.2e (max |ref| %.2f, tol "
                   "%.1e)\n", fixture, e, ed, scale, tol);
            worst_static = fmax(worst_static, e / fmax(1, scale));
            worst_dynamic = fmax(worst_dynamic, ed / fmax(1, scale));
        }
        free(l);
    }
    free(ld);
    remove_tree(tmp);
done:
    npy_free(&x), npy_free(&y), npy_free(&lg);
}

static void test_notices(void) {
    log_buf log;
    tubelet_load_params lp = tubelet_load_default_params();
    lp.precision = TUBELET_PRECISION_INT8, lp.log = capture, lp.log_user = &log;
    log.text[0] = 0;
    tubelet_model *m = NULL;
    char err[1024];
    int rc = tubelet_model_random(&m, "videomae-tiny-pretrain", 1, &lp, err, sizeof err);
    CHECK(!rc && strstr(log.text, "dynamic int8"), "a built-in architecture in int8 said: %s (%s)",
          log.text, rc ? err : "");
    tubelet_model_free(m);
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/vivit_m1", parity_fixtures_dir());
    m = load(dir, TUBELET_PRECISION_BF16, 1, 0, &log, err, sizeof err, NULL);
    CHECK(m && !strstr(log.text, "int8"), "a bf16 load spoke of int8: %s", log.text);
    tubelet_model_free(m);
}

/* ---- 4. bad files ---- */

/* Writes text as dir/int8_scales.json; loads dir in int8: must fail naming the file and saying
 * `want`. */
static void expect_refused(const char *dir, const char *case_name, const char *text, size_t len,
                           const char *want) {
    char path[1200], err[1024] = "";
    snprintf(path, sizeof path, "%s/int8_scales.json", dir);
    FILE *f = fopen(path, "wb");
    CHECK(f && fwrite(text, 1, len, f) == len && !fclose(f), "cannot write %s", path);
    int rc = 0;
    tubelet_model *m = load(dir, TUBELET_PRECISION_INT8, 1, 0, NULL, err, sizeof err, &rc);
    CHECK(rc && !m && strstr(err, path) && strstr(err, want),
          "int8_scales.json %s: rc %d, message '%s' (wanted the path and '%s')", case_name, rc,
          err, want);
    tubelet_model_free(m);
}

/* The calibrated file with one change: the value of key in layer `layer` (-1: the top level)
 * replaced by the JSON `value` (NULL: the key removed). */
static char *mutate(const char *good, int layer, const char *key, const char *value) {
    cJSON *root = cJSON_Parse(good);
    cJSON *obj = layer < 0 ? root : cJSON_GetArrayItem(cJSON_GetObjectItem(root, "layers"), layer);
    if (value) cJSON_ReplaceItemInObject(obj, key, cJSON_CreateRaw(value));
    else cJSON_DeleteItemFromObject(obj, key);
    char *t = cJSON_Print(root);
    cJSON_Delete(root);
    return t;
}

static void test_bad_files(void) {
    char a[256], b[256], path[1200];
    if (!fixture_copy("vivit_m1", a, sizeof a) || !fixture_copy("videomae_mean", b, sizeof b)) {
        CHECK(0, "fixture copies");
        return;
    }
    npy_array x = {0}, xb = {0};
    if (!load_fixture_npy("vivit_m1", "input.npy", &x) ||
        !load_fixture_npy("videomae_mean", "input.npy", &xb))
        return;
    const npy_array *ca[] = {&x}, *cb[] = {&xb};
    tubelet_model *cm, *cm2;
    tubelet_calib *c = calibrate(a, ca, 1, 100, 1, &cm);
    tubelet_calib *c2 = calibrate(b, cb, 1, 100, 1, &cm2);
    calib_free(c2, cm2);
    snprintf(path, sizeof path, "%s/int8_scales.json", a);
    size_t n = 0;
    char *good = (char *)check_read_file(path, &n);
    CHECK(good && c, "no calibrated file");
    if (!good || !c) return;
    /* the file holds exactly the session's scales */
    cJSON *root = cJSON_Parse(good);
    cJSON *layers = cJSON_GetObjectItem(root, "layers");
    int same = cJSON_GetArraySize(layers) == tubelet_calib_n_layers(c);
    for (int i = 0; same && i < tubelet_calib_n_layers(c); i++) {
        float lo, hi, s;
        int z;
        const char *name = tubelet_calib_layer(c, i, &lo, &hi, &s, &z);
        cJSON *l = cJSON_GetArrayItem(layers, i);
        same = !strcmp(cJSON_GetObjectItem(l, "name")->valuestring, name) &&
               (float)cJSON_GetObjectItem(l, "scale")->valuedouble == s &&
               cJSON_GetObjectItem(l, "zero_point")->valueint == z;
    }
    cJSON_Delete(root);
    CHECK(same, "int8_scales.json differs from the calibration's scales");
    calib_free(c, cm);
    struct {
        const char *name;
        int layer;
        const char *key, *value, *want;
    } cases[] = {
        {"wrong format", -1, "format", "\"tubelet int4\"", "not an int8 scales file"},
        {"version 2", -1, "version", "2", "version"},
        {"no layers", -1, "layers", NULL, "no \"layers\""},
        {"layers not an array", -1, "layers", "{}", "no \"layers\""},
        {"wrong count", -1, "layers", "[]", "this model has"},
        {"renamed layer", 3, "name", "\"blocks.9.fc1\"", "this model's layer 3"},
        {"unnamed layer", 2, "name", NULL, "unnamed"},
        {"wrong shape", 1, "out", "97", "in this model"},
        {"infinite scale", 0, "scale", "1e999", "scale must be"},
        {"negative scale", 4, "scale", "-0.5", "scale must be"},
        {"zero scale", 5, "scale", "0", "scale must be"},
        {"tiny scale", 5, "scale", "1e-40", "scale must be"},
        {"scale a string", 5, "scale", "\"0.1\"", "scale must be"},
        {"zero point 256", 6, "zero_point", "256", "zero_point"},
        {"zero point 1.5", 6, "zero_point", "1.5", "zero_point"},
        {"zero point -1", 6, "zero_point", "-1", "zero_point"},
        {"layer not an object", 0, NULL, NULL, "not an object"},
        {"another architecture", -1, "architecture", "\"videomae x\"", "another architecture"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char *t;
        if (!cases[i].key) { /* layer i replaced by a number */
            cJSON *r = cJSON_Parse(good);
            cJSON_ReplaceItemInArray(cJSON_GetObjectItem(r, "layers"), cases[i].layer,
                                     cJSON_CreateNumber(1));
            t = cJSON_Print(r);
            cJSON_Delete(r);
        } else {
            t = mutate(good, cases[i].layer, cases[i].key, cases[i].value);
        }
        expect_refused(a, cases[i].name, t, strlen(t), cases[i].want);
        free(t);
    }
    const char *texts[][2] = {{"", "not valid JSON"},     {"{", "not valid JSON"},
                              {"[1, 2]", "not a JSON"},   {"{\"scale\": NaN}", "not valid JSON"},
                              {"null", "not a JSON"}};
    for (size_t i = 0; i < sizeof texts / sizeof *texts; i++)
        expect_refused(a, texts[i][0], texts[i][0], strlen(texts[i][0]), texts[i][1]);
    /* a huge file: refused by its size before it is read */
    size_t big = (size_t)5 << 20;
    char *huge = malloc(big);
    memset(huge, ' ', big);
    memcpy(huge, good, n);
    expect_refused(a, "of 5 MiB", huge, big, "too large");
    free(huge);
    /* the videomae fixture's own file, in the vivit directory */
    snprintf(path, sizeof path, "%s/int8_scales.json", b);
    size_t nb = 0;
    char *other = (char *)check_read_file(path, &nb);
    if (other) expect_refused(a, "of another model", other, nb, "another architecture");
    free(other);
    /* a directory in its place */
    snprintf(path, sizeof path, "%s/int8_scales.json", a);
    unlink(path);
    CHECK(!mkdir(path, 0755), "mkdir %s", path);
    char err[1024] = "";
    int rc = 0;
    tubelet_model *m = load(a, TUBELET_PRECISION_INT8, 1, 0, NULL, err, sizeof err, &rc);
    CHECK(rc && !m && strstr(err, path), "a directory named int8_scales.json: rc %d, '%s'", rc, err);
    tubelet_model_free(m);
    rmdir(path);
    /* an unknown key is a warning, not an error */
    char *t = mutate(good, -1, "format", "\"tubelet int8 activation scales\", \"comment\": 1");
    FILE *f = fopen(path, "wb");
    fputs(t, f);
    fclose(f);
    free(t);
    log_buf log;
    m = load(a, TUBELET_PRECISION_INT8, 1, 0, &log, err, sizeof err, &rc);
    CHECK(m && strstr(log.text, "1 ") && strstr(log.text, "unknown key 'comment'"),
          "an unknown key: rc %d (%s), log %s", rc, err, log.text);
    tubelet_model_free(m);
    free(good);
    npy_free(&x), npy_free(&xb);
    remove_tree(a), remove_tree(b);
}

/* ---- 5. the session's own errors ---- */

static void test_session_errors(void) {
    char dir[1024], err[1024] = "";
    snprintf(dir, sizeof dir, "%s/vivit_m1", parity_fixtures_dir());
    tubelet_calib *c = NULL;
    tubelet_model *m = load(dir, TUBELET_PRECISION_FP32, 0, 0, NULL, err, sizeof err, NULL);
    CHECK(m && tubelet_calib_new(&c, m, 100, err, sizeof err) == TUBELET_ERR_ARG && !c &&
              strstr(err, "inference = 1"),
          "calibration of an unpacked model: '%s'", err);
    tubelet_model_free(m);
    m = load(dir, TUBELET_PRECISION_INT8, 1, 0, NULL, err, sizeof err, NULL);
    CHECK(m && tubelet_calib_new(&c, m, 100, err, sizeof err) == TUBELET_ERR_ARG && !c,
          "calibration of an int8 model accepted");
    tubelet_model_free(m);
    m = load(dir, TUBELET_PRECISION_FP32, 0, 1, NULL, err, sizeof err, NULL);
    CHECK(m && tubelet_calib_new(&c, m, 40, err, sizeof err) == TUBELET_ERR_ARG && !c,
          "percentile 40 accepted");
    int rc = m ? tubelet_calib_new(&c, m, 100, err, sizeof err) : 1;
    CHECK(!rc && tubelet_calib_write(c, "/tmp", err, sizeof err) == TUBELET_ERR_ARG &&
              strstr(err, "no batch"),
          "a session with no batch wrote: '%s'", err);
    npy_array x = {0};
    tubelet_state *s = NULL;
    if (!rc && load_fixture_npy("vivit_m1", "input.npy", &x) &&
        !tubelet_state_new(&s, m, (int)x.shape[0], (int)x.shape[1], (int)x.shape[3],
                           (int)x.shape[4], err, sizeof err) &&
        !tubelet_calib_observe(c, s, x.data, err, sizeof err)) {
        rc = tubelet_calib_write(c, "/nonexistent/dir", err, sizeof err);
        CHECK(rc == TUBELET_ERR_IO && strstr(err, "/nonexistent/dir"), "missing dir: %d '%s'", rc,
              err);
        snprintf(dir, sizeof dir, "%s/vivit_m1/config.json", parity_fixtures_dir());
        rc = tubelet_calib_write(c, dir, err, sizeof err);
        CHECK(rc == TUBELET_ERR_IO && strstr(err, "not a directory"), "a file as dir: %d '%s'",
              rc, err);
    } else {
        CHECK(0, "calibration session: %s", err);
    }
    tubelet_state_free(s);
    tubelet_calib_free(c);
    tubelet_model_free(m);
    npy_free(&x);
}

/* ---- 0. the product with fixed scales ---- */

/* One int8 layer with a fixed activation scale and zero point, some inputs beyond that range:
 * equal, to f32 rounding, to the product of the dequantised values computed here in double
 * (each input saturated at q = 0 or 255, each weight rounded per output channel), on the
 * portable path and, where the CPU has VNNI, oneDNN's. */
static void test_product(void) {
    const int M = 37, N = 45, K = 70;
    dnnl_engine_t eng;
    CHECK(dnnl_engine_create(&eng, dnnl_cpu, 0) == dnnl_success, "oneDNN engine");
    float *x = malloc(sizeof(float) * M * K), *W = malloc(sizeof(float) * N * K);
    float *b = malloc(sizeof(float) * N), *y = malloc(sizeof(float) * M * N);
    uint64_t seed = 7;
    for (int i = 0; i < M * K; i++) x[i] = (float)(tb_splitmix64(&seed) % 4001) / 1000.0f - 1.5f;
    for (int i = 0; i < N * K; i++) W[i] = (float)(tb_splitmix64(&seed) % 2001) / 1000.0f - 1.0f;
    for (int i = 0; i < N; i++) b[i] = (float)i / N;
    const float sa = 2.0f / 255; /* [-0.8, 1.2): x in [-1.5, 2.5] goes beyond both ends */
    const int32_t za = 102;
    for (int native = 0; native <= tb_lowp_cpu_has(TB_PREC_INT8); native++) {
        tb_err e = {{0}};
        tb_qweight q;
        tb_lowp_ctx *c = NULL;
        int ok = !tb_qweight_init(&q, eng, W, N, K, TB_PREC_INT8, native, &e) &&
                 !tb_lowp_ctx_new(&c, eng, native, (int64_t)M * K, N, (int64_t)N * K, &e);
        CHECK(ok, "int8 layer: %s", e.msg);
        if (!ok) continue;
        q.act_scale = sa, q.act_zp = za;
        tb_qlinear(c, y, N, x, &q, b, M, 0, -1);
        double worst = 0;
        int clipped = 0;
        for (int n = 0; n < N; n++) {
            float amax = 0;
            for (int k = 0; k < K; k++) amax = fmaxf(amax, fabsf(W[n * K + k]));
            const float sw = amax / (float)tb_int8_weight_max(native);
            for (int i = 0; i < M; i++) {
                double want = b[n], mag = fabs(b[n]);
                for (int k = 0; k < K; k++) {
                    double qx = nearbyintf(x[i * K + k] * (1 / sa)) + za;
                    clipped += qx < 0 || qx > 255;
                    qx = qx < 0 ? 0 : qx > 255 ? 255 : qx;
                    const double xv = (qx - za) * sa, wv = nearbyintf(W[n * K + k] / sw) * sw;
                    want += xv * wv, mag += fabs(xv * wv);
                }
                worst = fmax(worst, fabs(y[i * N + n] - want) / ((mag + 1) * (K + 4) * 1.2e-7));
            }
        }
        CHECK(worst <= 1 && clipped > 0, "int8 with a fixed scale (%s): off by %.2f of f32 "
              "rounding (%d inputs saturated)", native ? "oneDNN" : "portable", worst, clipped);
        printf("  int8 layer with a fixed scale (%s): within %.2f of f32 rounding, %d inputs "
               "saturated\n", native ? "oneDNN" : "portable", worst, clipped / N);
        tb_qweight_free(&q);
        tb_lowp_ctx_free(c);
    }
    dnnl_engine_destroy(eng);
    free(x), free(W), free(b), free(y);
}

static void each_static(const char *fixture, void *arg) {
    (void)arg;
    test_static(fixture);
}

int main(int argc, char **argv) {
    check_cases(argc, argv);
    CASE(test_product());
    CASE(test_ranges("videomae_mean", 1));
    CASE(test_ranges("vivit_m1", 0));
    parity_each_listed("list.txt", each_static, NULL);
    CASE(test_static("video_swin_shift")); /* a family that lists its own layers */
    CASE(test_static("video_swin_pad"));
    printf("  worst max abs error / max(1, max |ref|): static int8 %.2e, dynamic int8 %.2e\n",
           worst_static, worst_dynamic);
    CASE(test_notices());
    CASE(test_bad_files());
    CASE(test_session_errors());
    return check_done();
}
