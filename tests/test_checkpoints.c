/* Official checkpoints (docs/checkpoints.md): every file in tests/fixtures/checkpoints/list.txt
 * (written by tools/make_checkpoint_fixtures.py: tiny random-weight models saved by torch.save
 * under their authors' names, in the zip and the legacy format) loads directly, and its logits
 * (or last_hidden_state) equal those of transformers' model built from the same weights, within
 * 1e-4 x max(1, max |expected|). Also: the inferred configs, --config and the error that asks for
 * it, saving a loaded checkpoint as a Hugging Face directory and loading that again. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "parity.h"
#include "io/npy.h"
#include "io/torch_file.h"
#include "tubelet.h"

static char warnings[4096];

static void keep_log(void *user, int level, const char *msg) {
    (void)user, (void)level;
    size_t n = strlen(warnings);
    snprintf(warnings + n, sizeof warnings - n, "%s\n", msg);
}

static int load_npy(const char *dir, const char *name, npy_array *a) {
    char path[1200];
    tb_err e = {{0}};
    snprintf(path, sizeof path, "%s/%s", dir, name);
    if (npy_read(path, a, &e)) {
        printf("cannot read %s: %s\n", path, e.msg);
        return 0;
    }
    return 1;
}

/* Runs m on x; compares the logits or the hidden state with want. */
static void compare(tubelet_model *m, const npy_array *x, const npy_array *want, int hidden,
                    const char *label) {
    char err[1024];
    tubelet_state *s = NULL;
    int rc = tubelet_state_new(&s, m, (int)x->shape[0], (int)x->shape[1], (int)x->shape[3],
                               (int)x->shape[4], err, sizeof err);
    CHECK(rc == 0, "%s: state: %s", label, err);
    if (rc) return;
    tubelet_shape sh;
    if (hidden) tubelet_state_hidden_shape(s, &sh);
    else tubelet_state_logits_shape(s, &sh);
    CHECK(parity_same_shape(&sh, want), "%s: output shape differs from the reference", label);
    if (parity_same_shape(&sh, want)) {
        float *out = malloc(sizeof(float) * want->numel);
        rc = tubelet_forward(s, x->data, hidden ? NULL : out, hidden ? out : NULL, err, sizeof err);
        CHECK(rc == 0, "%s: forward: %s", label, err);
        if (!rc) parity_compare(label, hidden ? "hidden" : "logits", 1, out, want);
        free(out);
    }
    tubelet_state_free(s);
}

static tubelet_model *load(const char *path, const char *config, char *err, size_t n) {
    tubelet_load_params lp = tubelet_load_default_params();
    lp.n_threads = 1, lp.log = keep_log, lp.config = config;
    tubelet_model *m = NULL;
    warnings[0] = 0;
    if (tubelet_model_load(&m, path, &lp, err, n)) return NULL;
    return m;
}

static void run_case(const char *name, const char *file, const char *output) {
    char dir[1024], path[1500], err[1024], label[500];
    snprintf(dir, sizeof dir, "%s/checkpoints/%s", parity_fixtures_dir(), name);
    snprintf(path, sizeof path, "%s/%s", dir, file);
    snprintf(label, sizeof label, "%s/%s", name, file);
    npy_array x = {0}, want = {0};
    if (!load_npy(dir, "input.npy", &x) || !load_npy(dir, "expected.npy", &want)) {
        CHECK(0, "%s: fixture files unreadable", label);
        goto done;
    }
    tubelet_model *m = load(path, NULL, err, sizeof err);
    CHECK(m != NULL, "%s: load failed: %s", label, err);
    if (!m) goto done;
    CHECK(!strstr(warnings, "unexpected tensor"), "%s: tensors left unmapped:\n%s", label, warnings);
    compare(m, &x, &want, !strcmp(output, "hidden"), label);
    /* a converted directory (what `tubelet convert` writes) loads and gives the same outputs */
    if (strstr(file, "legacy")) {
        char tmp[] = "/tmp/tubelet_ckpt_XXXXXX";
        if (mkdtemp(tmp)) {
            int rc = tubelet_model_save(m, tmp, err, sizeof err);
            CHECK(rc == 0, "%s: save: %s", label, err);
            tubelet_model *m2 = rc ? NULL : load(tmp, NULL, err, sizeof err);
            CHECK(rc || m2, "%s: reload of the saved directory: %s", label, err);
            if (m2) {
                snprintf(label + strlen(label), sizeof label - strlen(label), " (saved)");
                compare(m2, &x, &want, !strcmp(output, "hidden"), label);
                CHECK(!warnings[0], "%s: warnings: %s", label, warnings);
            }
            tubelet_model_free(m2);
            char p[1100];
            snprintf(p, sizeof p, "%s/model.safetensors", tmp), unlink(p);
            snprintf(p, sizeof p, "%s/config.json", tmp), unlink(p);
            rmdir(tmp);
        }
    }
    tubelet_model_free(m);
done:
    npy_free(&x), npy_free(&want);
}

/* What inference finds in the TimeSformer files (no config.json beside them). */
static void test_inferred(void) {
    static const struct { const char *name, *variant; int frames; } want[] = {
        {"timesformer_divided", "divided_space_time", 2},
        {"timesformer_joint", "joint_space_time", 2},
        {"timesformer_space_only", "space_only", 2}, /* frames from pySlowFast's cfg */
    };
    for (size_t i = 0; i < sizeof want / sizeof *want; i++) {
        char path[1200], err[1024];
        snprintf(path, sizeof path, "%s/checkpoints/%s/model.pyth", parity_fixtures_dir(), want[i].name);
        tubelet_model *m = load(path, NULL, err, sizeof err);
        CHECK(m != NULL, "%s: %s", path, err);
        if (!m) continue;
        tubelet_model_info in;
        tubelet_model_get_info(m, &in);
        CHECK(!strcmp(in.variant, want[i].variant), "%s: variant %s", path, in.variant);
        CHECK(in.num_frames == want[i].frames && in.image_height == 8 && in.patch_h == 4 &&
                  in.hidden_size == 64 && in.num_layers == 1 && in.num_heads == 1 &&
                  in.intermediate_size == 32 && in.num_labels == 3,
              "%s: inferred config differs", path);
        tubelet_model_free(m);
    }
}

/* A space-only TimeSformer without its frame count: the error asks for --config; given one, it
 * loads. */
static void test_config_needed(void) {
    char path[1200], cfg[1200], err[1024];
    snprintf(path, sizeof path, "%s/checkpoints/timesformer_space_only_noframes.pyth",
             parity_fixtures_dir());
    tubelet_model *m = load(path, NULL, err, sizeof err);
    CHECK(!m && strstr(err, "--config") && strstr(err, "num_frames"), "no --config error: %s", err);
    tubelet_model_free(m);
    snprintf(cfg, sizeof cfg, "/tmp/tubelet_ckpt_cfg_%d.json", (int)getpid());
    FILE *f = fopen(cfg, "w");
    if (!f) return;
    fprintf(f, "{\"model_type\": \"timesformer\", \"attention_type\": \"space_only\", "
               "\"image_size\": 8, \"patch_size\": 4, \"num_frames\": 2, \"hidden_size\": 64, "
               "\"num_hidden_layers\": 1, \"num_attention_heads\": 1, \"intermediate_size\": 32, "
               "\"layer_norm_eps\": 1e-6, \"num_labels\": 3}\n");
    fclose(f);
    m = load(path, cfg, err, sizeof err);
    CHECK(m != NULL, "with --config: %s", err);
    if (m) {
        tubelet_model_info in;
        tubelet_model_get_info(m, &in);
        CHECK(in.num_frames == 2 && !strcmp(in.variant, "space_only"), "--config not used");
    }
    tubelet_model_free(m);
    unlink(cfg);
}

/* The reader itself on the fixtures' storage tricks: views, shared storages, dtypes. */
static void test_reader(void) {
    char path[1200];
    for (int legacy = 0; legacy <= 1; legacy++) {
        snprintf(path, sizeof path, "%s/checkpoints/timesformer_divided/model%s.pyth",
                 parity_fixtures_dir(), legacy ? "_legacy" : "");
        tb_err e = {{0}};
        tf_file *f = NULL;
        int rc = tf_open(&f, path, &e);
        CHECK(rc == 0, "%s: %s", path, e.msg);
        if (rc) continue;
        CHECK(!strcmp(tf_format(f), legacy ? "legacy" : "zip"), "%s: format %s", path, tf_format(f));
        const tf_tensor *head = tf_find(f, "model.head.weight"), *cls = tf_find(f, "model.cls_token"),
                        *pos = tf_find(f, "model.pos_embed"),
                        *qkv = tf_find(f, "model.blocks.0.attn.qkv.weight");
        CHECK(head && !head->contiguous && head->stride[0] == 1, "%s: head not a transposed view", path);
        CHECK(cls && pos && cls->storage == pos->storage && pos->base == cls->base + 64 * 4,
              "%s: cls_token and pos_embed do not share a storage", path);
        CHECK(qkv && qkv->dtype == TP_F16, "%s: qkv not float16", path);
        CHECK(tf_root_string(f, "cfg") && strstr(tf_root_string(f, "cfg"), "NUM_FRAMES"),
              "%s: pySlowFast cfg not found", path);
        tf_close(f);
    }
}

/* Every malicious file of tests/attacks/checkpoints (tools/make_checkpoint_attacks.py) fails to
 * load with its error, and none of the payloads ran (their canary file does not exist). */
static void test_attacks(void) {
    const char *canary = "/tmp/tubelet_checkpoint_canary";
    unlink(canary);
    FILE *f = fopen("tests/attacks/checkpoints/expected.txt", "r");
    CHECK(f != NULL, "no tests/attacks/checkpoints/expected.txt");
    char line[600], err[1024];
    int n = 0;
    while (f && fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = 0;
        char *bar = strchr(line, '|');
        if (!bar) continue;
        *bar = 0;
        char path[700];
        snprintf(path, sizeof path, "tests/attacks/checkpoints/%s", line);
        err[0] = 0;
        tubelet_model *m = load(path, NULL, err, sizeof err);
        CHECK(!m && strstr(err, bar + 1) && strstr(err, path), "%s: want an error with '%s', got '%s'",
              line, bar + 1, m ? "(loaded)" : err);
        tubelet_model_free(m);
        n++;
    }
    if (f) fclose(f);
    CHECK(n >= 25, "only %d attack files", n);
    CHECK(access(canary, F_OK) != 0, "a payload ran: %s exists", canary);
}

/* 100 000 nested REDUCEs (OrderedDict of OrderedDict ...): parsed without recursion. */
static void test_nested_reduce(void) {
    static const char level[] = "ccollections\nOrderedDict\n]X\x01\x00\x00\x00" "a", close[] = "\x86" "a\x85R";
    const int depth = 100000;
    size_t nl = sizeof level - 1, nc = sizeof close - 1, len = 2 + depth * (nl + nc) + 2;
    uint8_t *b = malloc(len), *p = b;
    memcpy(p, "\x80\x02", 2), p += 2;
    for (int i = 0; i < depth; i++) memcpy(p, level, nl), p += nl;
    *p++ = '}';
    for (int i = 0; i < depth; i++) memcpy(p, close, nc), p += nc;
    *p++ = '.';
    tb_err e = {{0}};
    tp_pickle *pk = NULL;
    size_t used = 0;
    int rc = tp_parse(&pk, b, len, &used, &e);
    CHECK(rc == 0 && used == len && pk->root->kind == TP_DICT, "nested REDUCE: %s", e.msg);
    tp_free(pk);
    free(b);
}

int main(void) {
    char path[1100], line[512];
    snprintf(path, sizeof path, "%s/checkpoints/list.txt", parity_fixtures_dir());
    FILE *f = fopen(path, "r");
    CHECK(f != NULL, "cannot open %s", path);
    int n = 0;
    while (f && fgets(line, sizeof line, f)) {
        char name[200], file[200], output[32];
        if (sscanf(line, "%199s %199s %31s", name, file, output) != 3) continue;
        run_case(name, file, output);
        n++;
    }
    if (f) fclose(f);
    CHECK(n >= 12, "only %d checkpoint fixtures listed", n);
    test_inferred();
    test_config_needed();
    test_reader();
    test_attacks();
    test_nested_reduce();
    return check_done();
}
