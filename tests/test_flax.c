/* ViViT's scenic/Flax checkpoints (docs/checkpoints.md): every file in
 * tests/fixtures/flax/list.txt (written by tools/make_flax_fixtures.py: tiny random-weight ViViT
 * Models 1-4 built by flax from scenic's module structure, saved by flax.serialization.to_bytes
 * inside scenic's train states) loads directly and its logits equal the Flax model's within
 * 1e-4 x max(1, max |expected|). Also: the inferred configs, the reader's view of a train state,
 * a config.json beside the file and the error that asks for --config, saving a loaded checkpoint
 * as a Hugging Face directory and loading that again, the malicious catalogue
 * tests/attacks/flax/ (tools/make_flax_attacks.py), and nesting and object-count bombs built
 * here. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "parity.h"
#include "io/flax_file.h"
#include "io/npy.h"
#include "tubelet.h"

static char warnings[8192];

static void keep_log(void *user, int level, const char *msg) {
    (void)user, (void)level;
    size_t n = strlen(warnings);
    snprintf(warnings + n, sizeof warnings - n, "%s\n", msg);
}

static tubelet_model *load(const char *path, const char *config, char *err, size_t n) {
    tubelet_load_params lp = tubelet_load_default_params();
    lp.n_threads = 1, lp.log = keep_log, lp.config = config;
    tubelet_model *m = NULL;
    warnings[0] = 0;
    if (tubelet_model_load(&m, path, &lp, err, n)) return NULL;
    return m;
}

/* tools/make_flax_fixtures.py's input: element i = ((i * 2654435761) mod 2^32) / 2^32 - 0.5. */
static float *pixels(size_t n) {
    float *x = malloc(sizeof(float) * n);
    for (size_t i = 0; x && i < n; i++)
        x[i] = (float)((double)(uint32_t)((uint64_t)i * 2654435761u) / 4294967296.0 - 0.5);
    return x;
}

static void compare(tubelet_model *m, int T, int H, int W, const npy_array *want, const char *label) {
    char err[1024];
    tubelet_state *s = NULL;
    const int B = 2;
    int rc = tubelet_state_new(&s, m, B, T, H, W, err, sizeof err);
    CHECK(rc == 0, "%s: state: %s", label, err);
    if (rc) return;
    tubelet_shape sh;
    tubelet_state_logits_shape(s, &sh);
    CHECK(parity_same_shape(&sh, want), "%s: logits shape differs from the reference", label);
    float *x = pixels((size_t)B * T * 3 * H * W), *out = malloc(sizeof(float) * want->numel);
    if (parity_same_shape(&sh, want) && x && out) {
        rc = tubelet_forward(s, x, out, NULL, err, sizeof err);
        CHECK(rc == 0, "%s: forward: %s", label, err);
        if (!rc) parity_compare(label, "logits", 1, out, want);
    }
    free(x), free(out);
    tubelet_state_free(s);
}

static void rm_dir(const char *dir) {
    static const char *const files[] = {"config.json", "model.safetensors"};
    char p[1200];
    for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, files[i]);
        unlink(p);
    }
    rmdir(dir);
}

static void run_case(const char *name, const char *file, const char *expected, int T, int H, int W) {
    char dir[1024], path[1500], epath[1500], err[1024], label[600];
    snprintf(dir, sizeof dir, "%s/flax/%s", parity_fixtures_dir(), name);
    snprintf(path, sizeof path, "%s/%s", dir, file);
    snprintf(label, sizeof label, "%s/%s", name, file);
    npy_array want = {0};
    tb_err e = {{0}};
    snprintf(epath, sizeof epath, "%s/%s", dir, expected);
    if (npy_read(epath, &want, &e)) {
        CHECK(0, "%s: %s", label, e.msg);
        return;
    }
    tubelet_model *m = load(path, NULL, err, sizeof err);
    CHECK(m != NULL, "%s: load failed: %s", label, err);
    if (!m) goto done;
    CHECK(!strstr(warnings, "unexpected tensor"), "%s: arrays left unmapped:\n%s", label, warnings);
    compare(m, T, H, W, &want, label);
    /* what `tubelet convert` writes loads and gives the same logits */
    char tmp[] = "/tmp/tubelet_flax_XXXXXX";
    if (!strstr(file, "bf16") && mkdtemp(tmp)) {
        int rc = tubelet_model_save(m, tmp, err, sizeof err);
        CHECK(rc == 0, "%s: save: %s", label, err);
        tubelet_model *m2 = rc ? NULL : load(tmp, NULL, err, sizeof err);
        CHECK(rc || m2, "%s: reload of the saved directory: %s", label, err);
        if (m2) {
            snprintf(label + strlen(label), sizeof label - strlen(label), " (saved)");
            compare(m2, T, H, W, &want, label);
            CHECK(!strstr(warnings, "unexpected"), "%s: warnings: %s", label, warnings);
        }
        tubelet_model_free(m2);
        rm_dir(tmp);
    }
    tubelet_model_free(m);
done:
    npy_free(&want);
}

/* What inference finds (no config.json beside these files). */
static void test_inferred(void) {
    static const struct {
        const char *name, *variant;
        int frames, size, tub_t, patch, layers, t_layers, heads;
    } want[] = {
        {"vivit_m1", "model1_spatio_temporal", 2, 224, 2, 16, 2, 0, 2},
        {"vivit_m2", "model2_factorised_encoder", 6, 16, 2, 4, 2, 1, 2},
        {"vivit_m4", "model4_factorised_dot_product", 3, 224, 1, 16, 2, 0, 4},
    };
    for (size_t i = 0; i < sizeof want / sizeof *want; i++) {
        char path[1200], err[1024];
        snprintf(path, sizeof path, "%s/flax/%s/model.msgpack", parity_fixtures_dir(), want[i].name);
        tubelet_model *m = load(path, NULL, err, sizeof err);
        CHECK(m != NULL, "%s: %s", path, err);
        if (!m) continue;
        tubelet_model_info in;
        tubelet_model_get_info(m, &in);
        CHECK(!strcmp(in.variant, want[i].variant), "%s: variant %s", path, in.variant);
        CHECK(in.num_frames == want[i].frames && in.image_height == want[i].size &&
                  in.image_width == want[i].size && in.tubelet_t == want[i].tub_t &&
                  in.patch_h == want[i].patch && in.patch_w == want[i].patch &&
                  in.hidden_size == 8 && in.num_layers == want[i].layers &&
                  in.num_temporal_layers == want[i].t_layers && in.num_heads == want[i].heads &&
                  in.intermediate_size == 16 && in.num_labels == 5 && in.num_channels == 3,
              "%s: inferred config differs: %d frames, %dx%d, tubelet %dx%dx%d, %d layers, %d "
              "heads", path, in.num_frames, in.image_height, in.image_width, in.tubelet_t,
              in.patch_h, in.patch_w, in.num_layers, in.num_heads);
        /* 224 x 224 is an assumption, and the log says so; Model 2's grid is in its positions */
        CHECK((want[i].size == 224) == (strstr(warnings, "224 x 224") != NULL),
              "%s: warnings: %s", path, warnings);
        tubelet_model_free(m);
    }
}

/* Model 3's positions (2 x 3 x 4) say neither the frames nor the size: beside its config.json
 * it loads (run_case), alone the error asks for --config, and --config works. */
static void test_config_needed(void) {
    char src[1200], cfg[1200], path[1200], err[1024];
    snprintf(src, sizeof src, "%s/flax/vivit_m3/model.msgpack", parity_fixtures_dir());
    snprintf(cfg, sizeof cfg, "%s/flax/vivit_m3/config.json", parity_fixtures_dir());
    snprintf(path, sizeof path, "/tmp/tubelet_flax_m3_%d.msgpack", (int)getpid());
    char *data = NULL;
    size_t len = 0;
    tb_err e = {{0}};
    if (tb_read_file(src, &data, &len, 1 << 24, &e) || tb_atomic_write(path, data, len, &e)) {
        CHECK(0, "copy %s: %s", src, e.msg);
        free(data);
        return;
    }
    free(data);
    tubelet_model *m = load(path, NULL, err, sizeof err);
    CHECK(!m && strstr(err, "--config") && strstr(err, "num_frames") && strstr(err, path),
          "no --config error: %s", err);
    tubelet_model_free(m);
    m = load(path, cfg, err, sizeof err);
    CHECK(m != NULL, "with --config: %s", err);
    if (m) {
        tubelet_model_info in;
        tubelet_model_get_info(m, &in);
        CHECK(in.num_frames == 4 && in.image_height == 12 && in.image_width == 16 &&
                  !strcmp(in.variant, "model3_factorised_self_attention"),
              "--config not used: %d frames, %dx%d, %s", in.num_frames, in.image_height,
              in.image_width, in.variant);
    }
    tubelet_model_free(m);
    unlink(path);
}

/* The reader on a published-style train state: only optimizer/target is listed (its momentum
 * and the uint32 rng are never decoded), float32 and bfloat16 arrays, names sorted. */
static void test_reader(void) {
    static const char *const files[] = {"model.msgpack", "model_bf16.msgpack"};
    for (int b = 0; b < 2; b++) {
        char path[1200];
        snprintf(path, sizeof path, "%s/flax/vivit_m1/%s", parity_fixtures_dir(), files[b]);
        tb_err e = {{0}};
        fx_file *f = NULL;
        int rc = fx_open(&f, path, &e);
        CHECK(rc == 0, "%s: %s", path, e.msg);
        if (rc) continue;
        CHECK(!strcmp(fx_root(f), "optimizer/target"), "%s: root '%s'", path, fx_root(f));
        const tf_tensor *k = fx_find(f, "embedding/kernel"),
                        *q = fx_find(f, "Transformer/encoderblock_1/MultiHeadDotProductAttention_0/query/kernel");
        CHECK(k && k->ndim == 5 && k->shape[0] == 2 && k->shape[1] == 16 && k->shape[3] == 3 &&
                  k->shape[4] == 8 && k->dtype == (b ? TP_BF16 : TP_F32),
              "%s: embedding/kernel", path);
        CHECK(q && q->ndim == 3 && q->shape[0] == 8 && q->shape[1] == 2 && q->shape[2] == 4,
              "%s: query kernel", path);
        /* embedding 2 + cls + pos + 2 blocks x 16 + encoder_norm 2 + output_projection 2 */
        CHECK(fx_count(f) == 40, "%s: %d arrays listed", path, fx_count(f));
        for (int i = 1; i < fx_count(f); i++)
            CHECK(strcmp(fx_at(f, i - 1)->name, fx_at(f, i)->name) < 0, "%s: not sorted", path);
        CHECK(!fx_has(f, "momentum") && !fx_find(f, "rng"), "%s: optimizer state listed", path);
        fx_close(f);
    }
}

/* Every file of tests/attacks/flax fails to load with its error, which names the file. */
static void test_attacks(void) {
    FILE *f = fopen("tests/attacks/flax/expected.txt", "r");
    CHECK(f != NULL, "no tests/attacks/flax/expected.txt");
    char line[600], err[1024];
    int n = 0;
    while (f && fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = 0;
        char *bar = strchr(line, '|');
        if (!bar) continue;
        *bar = 0;
        char path[700];
        snprintf(path, sizeof path, "tests/attacks/flax/%s", line);
        err[0] = 0;
        tubelet_model *m = load(path, NULL, err, sizeof err);
        CHECK(!m && strstr(err, bar + 1) && strstr(err, path), "%s: want an error with '%s', got '%s'",
              line, bar + 1, m ? "(loaded)" : err);
        tubelet_model_free(m);
        n++;
    }
    if (f) fclose(f);
    CHECK(n >= 25, "only %d attack files", n);
}

/* Bombs too large to commit: a million nested maps (refused at level 24, before msgpack-c's
 * own fixed stack), and more objects than the reader takes (each a single byte). */
static void test_bombs(void) {
    const size_t depth = 1000000;
    uint8_t *b = malloc(depth * 3 + 1);
    for (size_t i = 0; i < depth; i++) memcpy(b + 3 * i, "\x81\xa1" "a", 3);
    b[3 * depth] = 0xc0;
    tb_err e = {{0}};
    fx_file *f = NULL;
    int rc = fx_open_mem(&f, b, depth * 3 + 1, "nested.msgpack", &e);
    CHECK(rc && strstr(e.msg, "nested deeper than 24 levels"), "nested maps: %s", e.msg);
    free(b);
    const size_t n = FX_MAX_OBJECTS + 10; /* {"a": [nil x n]} */
    b = malloc(n + 8);
    memcpy(b, "\x81\xa1" "a\xdd", 4);
    b[4] = (uint8_t)(n >> 24), b[5] = (uint8_t)(n >> 16), b[6] = (uint8_t)(n >> 8), b[7] = (uint8_t)n;
    memset(b + 8, 0xc0, n);
    memset(&e, 0, sizeof e);
    rc = fx_open_mem(&f, b, n + 8, "objects.msgpack", &e);
    CHECK(rc && strstr(e.msg, "more than 1048576 msgpack objects"), "object count: %s", e.msg);
    free(b);
}

int main(int argc, char **argv) {
    check_cases(argc, argv);
    char path[1100], line[512];
    snprintf(path, sizeof path, "%s/flax/list.txt", parity_fixtures_dir());
    FILE *f = fopen(path, "r");
    CHECK(f != NULL, "cannot open %s", path);
    int n = 0;
    while (f && fgets(line, sizeof line, f)) {
        char name[200], file[200], expected[200];
        int T, H, W;
        if (sscanf(line, "%199s %199s %199s %d %d %d", name, file, expected, &T, &H, &W) != 6) continue;
        if (check_select("run_case(%s)", name)) run_case(name, file, expected, T, H, W);
        n++;
    }
    if (f) fclose(f);
    CHECK(n >= 5, "only %d Flax fixtures listed", n);
    CASE(test_inferred());
    CASE(test_config_needed());
    CASE(test_reader());
    CASE(test_attacks());
    CASE(test_bombs());
    return check_done();
}
