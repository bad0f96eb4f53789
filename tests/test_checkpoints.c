/* Official checkpoints (docs/checkpoints.md): every file in tests/fixtures/checkpoints/list.txt
 * (written by tools/make_checkpoint_fixtures.py: tiny random-weight models saved by torch.save
 * under their authors' names, in the zip and the legacy format) loads directly, and its logits
 * (or last_hidden_state) equal those of transformers' model built from the same weights, within
 * 1e-4 x max(1, max |expected|) (Video Swin: torchvision's SwinTransformer3d's). Also: the inferred
 * configs, --config and the error that asks for it, saving a loaded checkpoint as a Hugging Face
 * directory and loading that again, what the files' own training configs say and the
 * preprocessing taken from them, the config scanners on garbage. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "parity.h"
#include "io/checkpoint.h"
#include "io/npy.h"
#include "io/safetensors.h"
#include "io/torch_file.h"
#include "tubelet.h"
#include "tubelet_video.h"
#include "video/video.h"

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

/* Video Swin: the config inferred from torchvision's and mmaction2's tensors (8x7x7 window), and
 * a window that cannot be inferred: the error asks for --config with window_size; given the
 * config.json, the file loads. */
static void test_swin_inferred(void) {
    static const char *const files[] = {"video_swin_torchvision/model.pth",
                                        "video_swin_mmaction2/model_legacy.pth"};
    char path[1200], err[1024];
    for (int i = 0; i < 2; i++) {
        snprintf(path, sizeof path, "%s/checkpoints/%s", parity_fixtures_dir(), files[i]);
        tubelet_model *m = load(path, NULL, err, sizeof err);
        CHECK(m != NULL, "%s: %s", path, err);
        if (!m) continue;
        tubelet_model_info in;
        tubelet_model_get_info(m, &in);
        /* embed 8, depths 2, 1, heads 1, 2: the last stage is 16 wide with 2 heads, 3 blocks */
        CHECK(!strcmp(in.model_type, "video_swin") && in.hidden_size == 16 && in.num_heads == 2 &&
                  in.num_layers == 3 && in.intermediate_size == 32 && in.num_labels == 5 &&
                  in.tubelet_t == 2 && in.patch_h == 4 && in.num_channels == 3,
              "%s: inferred config differs (%s, %d, %d heads, %d blocks)", path, in.model_type,
              in.hidden_size, in.num_heads, in.num_layers);
        tubelet_model_free(m);
    }
    snprintf(path, sizeof path, "%s/checkpoints/video_swin_window233_noconfig.pth",
             parity_fixtures_dir());
    tubelet_model *m = load(path, NULL, err, sizeof err);
    CHECK(!m && strstr(err, "--config") && strstr(err, "window_size") && strstr(err, "75 rows"),
          "no --config error for a 2x3x3 window: %s", m ? "(loaded)" : err);
    tubelet_model_free(m);
    char cfg[1200];
    snprintf(cfg, sizeof cfg, "%s/checkpoints/video_swin_window233/config.json", parity_fixtures_dir());
    m = load(path, cfg, err, sizeof err);
    CHECK(m != NULL, "2x3x3 window with --config: %s", err);
    tubelet_model_free(m);
}

static int near3(const float *v, float a, float b, float c) {
    return fabsf(v[0] - a) < 1e-6f && fabsf(v[1] - b) < 1e-6f && fabsf(v[2] - c) < 1e-6f;
}

/* What the files' own training configs say (pySlowFast's cfg in block and in flow style,
 * mmaction2's meta config, VideoMAE's args), and the preprocessing a command given the file
 * itself takes from them. */
static void test_training_cfg(void) {
    char path[1200];
    tb_err e = {{0}};
    tb_ckpt_cfg c;
    const char *type = NULL;
    static const char *const ts[] = {"timesformer_divided/model.pyth",
                                     "timesformer_space_only/model_legacy.pyth"};
    for (int i = 0; i < 2; i++) {
        snprintf(path, sizeof path, "%s/checkpoints/%s", parity_fixtures_dir(), ts[i]);
        int rc = tb_ckpt_read_cfg(path, &c, &type, &e);
        CHECK(rc == 0 && !strcmp(type, "timesformer") && c.frames == 2 && c.sampling_rate == 4 &&
                  c.train_crop == 8 && c.test_crop == 8 && c.num_classes == 3 && c.have_mean &&
                  near3(c.mean, 0.4f, 0.45f, 0.5f) && c.have_std && near3(c.std, 0.2f, 0.225f, 0.25f) &&
                  !strcmp(c.attention_type, i ? "space_only" : "divided_space_time"),
              "%s: cfg read as frames %d, rate %d, crop %d, mean %g, attention '%s' (%s)", path,
              c.frames, c.sampling_rate, c.test_crop, c.mean[0], c.attention_type, e.msg);
        /* the preprocessing of a command given the file itself */
        tubelet_preprocessor *pp = NULL;
        char err[1024];
        rc = tubelet_preprocessor_load(&pp, path, keep_log, NULL, err, sizeof err);
        CHECK(rc == 0, "%s: preprocessor: %s", path, err);
        if (!rc) {
            const tb_preproc_config *pc = tb_preprocessor_config(pp);
            CHECK(pc->crop_h == 8 && pc->shortest_edge == 8 && near3(pc->mean, 0.4f, 0.45f, 0.5f) &&
                      near3(pc->std, 0.2f, 0.225f, 0.25f),
                  "%s: preprocessing not from its cfg (crop %d, mean %g)", path, pc->crop_h,
                  pc->mean[0]);
        }
        tubelet_preprocessor_free(pp);
    }
    snprintf(path, sizeof path, "%s/checkpoints/video_swin_mmaction2/model.pth", parity_fixtures_dir());
    int rc = tb_ckpt_read_cfg(path, &c, &type, &e);
    CHECK(rc == 0 && !strcmp(type, "video_swin") && near3(c.mean, 0.5f, 0.5f, 0.5f) &&
              near3(c.std, 0.25f, 0.25f, 0.25f),
          "%s: mmaction2 img_norm_cfg not read (%s)", path, e.msg);
    char *json = NULL;
    rc = tb_ckpt_preprocessor_for(path, 0, &json, &e);
    CHECK(rc == 0 && json && strstr(json, "\"shortest_edge\": 256") && strstr(json, "\"height\": 224") &&
              strstr(json, "[0.5, 0.5, 0.5]") && strstr(json, "[0.25, 0.25, 0.25]"),
          "%s: preprocessor json: %s", path, json ? json : e.msg);
    free(json);
    snprintf(path, sizeof path, "%s/checkpoints/video_swin_torchvision/model.pth", parity_fixtures_dir());
    rc = tb_ckpt_preprocessor_for(path, 0, &json, &e);
    CHECK(rc == 0 && json && strstr(json, "[0.485, 0.456, 0.406]") && strstr(json, "[0.229, 0.224, 0.225]"),
          "%s: torchvision's preprocessing: %s", path, json ? json : e.msg);
    free(json);
    snprintf(path, sizeof path, "%s/checkpoints/videomae_finetuned_mean/model.pth", parity_fixtures_dir());
    rc = tb_ckpt_read_cfg(path, &c, &type, &e);
    CHECK(rc == 0 && !strcmp(type, "videomae") && c.frames == 4 && c.train_crop == 16 &&
              c.sampling_rate == 2 && !c.have_mean,
          "%s: VideoMAE args read as frames %d, size %d, rate %d (%s)", path, c.frames,
          c.train_crop, c.sampling_rate, e.msg);
}

/* A cfg whose attention type is not the one the tensors show: an error that asks for --config.
 * Made from the divided fixture by rewriting its cfg in place (legacy format: the YAML is a plain
 * string of the pickle; the same length, the next line indented deeper so that it is ignored). */
static void test_cfg_mismatch(void) {
    static const char from[] = "ATTENTION_TYPE: divided_space_time\n",
                      to[] = "ATTENTION_TYPE: joint_space_time\n  ";
    char path[1200], tmp[64], err[1024];
    snprintf(path, sizeof path, "%s/checkpoints/timesformer_divided/model_legacy.pyth",
             parity_fixtures_dir());
    snprintf(tmp, sizeof tmp, "/tmp/tubelet_ckpt_mismatch_%d.pyth", (int)getpid());
    FILE *f = fopen(path, "rb");
    CHECK(f != NULL, "cannot open %s", path);
    if (!f) return;
    static char buf[1 << 20];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    char *at = memmem(buf, n, from, sizeof from - 1);
    CHECK(at != NULL && sizeof from == sizeof to, "%s: no divided ATTENTION_TYPE in its cfg", path);
    if (!at) return;
    memcpy(at, to, sizeof to - 1);
    f = fopen(tmp, "wb");
    if (!f || fwrite(buf, 1, n, f) != n) CHECK(0, "cannot write %s", tmp);
    if (f) fclose(f);
    tubelet_model *m = load(tmp, NULL, err, sizeof err);
    CHECK(!m && strstr(err, "ATTENTION_TYPE joint_space_time") && strstr(err, "divided_space_time") &&
              strstr(err, "--config"),
          "cfg/tensor attention mismatch not refused: %s", m ? "(loaded)" : err);
    tubelet_model_free(m);
    unlink(tmp);
}

/* The training-config scanners on text that is not what they expect: nothing set, no crash. */
static void test_cfg_garbage(void) {
    static const char *const bad[] = {
        "DATA:\n  NUM_FRAMES: 99999999999\n  SAMPLING_RATE: -3\n  TEST_CROP_SIZE: 8x\n",
        "DATA:\nNUM_FRAMES: 8\n",                      /* not indented: not DATA's */
        "DATA: {NUM_FRAMES: 8\n",                      /* an unclosed flow mapping */
        "DATA: {MEAN: [0.4, 0.4, 0.4}\n",             /* unbalanced */
        "DATA:\n  SUB:\n    NUM_FRAMES: 8\n  X: 1\n",  /* nested deeper than the section's keys */
        "DATA:\n  MEAN: [nan, 0.4, 0.5]\n  STD: [0.2, 0.2]\n",
        "DATA:\n  MEAN:\n  - 0.4\n  - 2.5\n  - 0.4\n  STD: [1e999, 0, 0]\n",
        "TIMESFORMER:\n  ATTENTION_TYPE: 'x; rm -rf /'\n",
        "",
        "DATA:\n  MEAN:\n",
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        tb_ckpt_cfg c;
        tb_ckpt_cfg_init(&c);
        int set = tb_ckpt_cfg_slowfast(&c, bad[i], strlen(bad[i]));
        CHECK(set == 0 && !c.frames && !c.sampling_rate && !c.test_crop && !c.have_mean &&
                  !c.have_std && !c.attention_type[0],
              "garbage %zu: %d fields set", i, set);
    }
    /* a length that ends inside the text: nothing beyond it is read */
    const char *t = "DATA:\n  NUM_FRAMES: 8\n  SAMPLING_RATE: 4\n";
    tb_ckpt_cfg c;
    tb_ckpt_cfg_init(&c);
    tb_ckpt_cfg_slowfast(&c, t, strlen("DATA:\n  NUM_FRAMES: 8\n  SAMP"));
    CHECK(c.frames == 8 && !c.sampling_rate, "bounded read: frames %d rate %d", c.frames, c.sampling_rate);
    /* PyYAML before 5.1 writes a section of scalars as a flow mapping */
    t = "DATA:\n  NUM_FRAMES: 8\nTIMESFORMER: {ATTENTION_TYPE: 'space_only', PRETRAINED_MODEL: 'a, b'}\n"
        "X: {DATA: 1}\nMODEL: {NUM_CLASSES: 7, ARCH: vit}\n";
    tb_ckpt_cfg_init(&c);
    tb_ckpt_cfg_slowfast(&c, t, strlen(t));
    CHECK(c.frames == 8 && c.num_classes == 7 && !strcmp(c.attention_type, "space_only"),
          "flow mappings: frames %d classes %d attention '%s'", c.frames, c.num_classes,
          c.attention_type);
    static const char *const mm_bad[] = {
        "img_norm_cfg = dict(mean=[1e999, 0, 0], std=[1, 1, 1])",
        "img_norm_cfg = dict(mean=[123.675, 116.28, 103.53], std=[0, 57.12, 57.375])",
        "img_norm_cfg = dict(mean=[123.675, 116.28, 103.53, 1], std=[58.395, 57.12, 57.375])",
        "img_norm_cfg = dict(img_mean=[1, 2, 3], std=[58.395, 57.12, 57.375])",
        "img_norm_cfg = dict(mean=[123.675, 116.28, 103.53",
    };
    for (size_t i = 0; i < sizeof mm_bad / sizeof *mm_bad; i++) {
        tb_ckpt_cfg_init(&c);
        CHECK(tb_ckpt_cfg_mmcv(&c, mm_bad[i], strlen(mm_bad[i])) == 0 && !c.have_mean,
              "mmcv garbage %zu read", i);
    }
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

/* Globals outside the weights: the plain-data classes on the list become inert records (nothing
 * called), any other one is refused even where the model would not look. */
static void test_inert_records(void) {
    static const struct { const char *global; int ok; } cases[] = {
        {"numpy.core.multiarray\n_reconstruct\n", 1},
        {"mmengine.logging.history_buffer\nHistoryBuffer\n", 1},
        {"mmcv.utils.config\nConfig\n", 0},
        {"builtins\nexec\n", 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        /* {"meta": <global>(())} in protocol 2 */
        uint8_t b[200], *p = b;
        memcpy(p, "\x80\x02}(X\x04\x00\x00\x00meta", 13), p += 13;
        *p++ = 'c';
        memcpy(p, cases[i].global, strlen(cases[i].global)), p += strlen(cases[i].global);
        memcpy(p, ")Ru.", 4), p += 4;
        tb_err e = {{0}};
        tp_pickle *pk = NULL;
        int rc = tp_parse(&pk, b, (size_t)(p - b), NULL, &e);
        if (cases[i].ok) {
            const tp_value *v = rc ? NULL : tp_dict_get(pk->root, "meta");
            CHECK(v && v->kind == TP_OBJECT, "%s: not an inert record: %s", cases[i].global, e.msg);
        } else {
            CHECK(rc && strstr(e.msg, "is not allowed") && strstr(e.msg, "nothing was run"),
                  "%s: not refused (%s)", cases[i].global, e.msg);
        }
        tp_free(pk);
    }
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

/* ---- facebookresearch/vjepa2's own files (tools/make_vjepa2_meta_checkpoint.py) ----
 * Read through tb_ckpt_open (no model family needed): every tensor of the transformers fixture
 * vjepa2_hd20 comes back under its name, equal to the last bit (the encoder given by
 * TUBELET_VJEPA2_ENCODER=encoder is the fixture's + 1), and nothing else is left over. */
static void vjepa2_env(const char *probe, const char *encoder) {
    if (probe) setenv("TUBELET_VJEPA2_PROBE", probe, 1);
    else unsetenv("TUBELET_VJEPA2_PROBE");
    if (encoder) setenv("TUBELET_VJEPA2_ENCODER", encoder, 1);
    else unsetenv("TUBELET_VJEPA2_ENCODER");
}

static void vjepa2_unused(void *user, const char *name) {
    int *n = user;
    if (*n < 3) printf("  left over: %s\n", name);
    ++*n;
}

/* file (and probe) against vjepa2_hd20/model.safetensors; with_probe 0: no pooler, classifier */
static void vjepa2_against_fixture(const char *label, const char *file, const char *probe,
                                   const char *encoder, float encoder_delta, int with_probe) {
    char path[1200], cfg[1200], ref[1200];
    const char *fx = parity_fixtures_dir();
    snprintf(path, sizeof path, "%s/vjepa2_meta/%s", fx, file);
    snprintf(cfg, sizeof cfg, "%s/vjepa2_hd20/config.json", fx);
    snprintf(ref, sizeof ref, "%s/vjepa2_hd20/model.safetensors", fx);
    char probe_path[1200];
    if (probe) snprintf(probe_path, sizeof probe_path, "%s/vjepa2_meta/%s", fx, probe);
    vjepa2_env(probe ? probe_path : NULL, encoder);
    tb_log log = {keep_log, NULL};
    warnings[0] = 0;
    tb_err e = {{0}};
    char *json = NULL, *name = NULL;
    tb_weights *w = NULL;
    st_file *sf = NULL;
    int rc = tb_ckpt_open(path, TB_CKPT_TORCH, cfg, &log, &json, &name, &w, &e);
    CHECK(rc == 0, "%s: %s", label, e.msg);
    if (!rc) rc = st_open(&sf, ref, 1, &e);
    CHECK(rc == 0, "%s: %s", label, e.msg);
    int compared = 0, differ = 0;
    for (int i = 0; !rc && i < st_count(sf); i++) {
        const st_tensor *t = st_at(sf, i);
        const int pooled = !strncmp(t->name, "pooler.", 7) || !strncmp(t->name, "classifier.", 11);
        if (pooled && !with_probe) {
            CHECK(!tb_weights_has(w, t->name), "%s: '%s' without a probe", label, t->name);
            continue;
        }
        size_t n = 1;
        for (int d = 0; d < t->ndim; d++) n *= (size_t)t->shape[d];
        float *want = malloc(n * sizeof *want);
        st_to_f32(want, t->data, t->dtype, n);
        const float *got = NULL;
        int g = tb_weights_get(w, t->name, t->ndim, t->shape, &got, &e);
        CHECK(g == 0, "%s: %s", label, e.msg);
        const float delta = !strncmp(t->name, "vjepa2.encoder.", 15) ? encoder_delta : 0.0f;
        for (size_t k = 0; !g && k < n; k++)
            if (got[k] != want[k] + delta) {
                if (differ++ < 3) printf("  %s: %s[%zu] = %g, want %g\n", label, t->name, k, got[k], want[k] + delta);
                break;
            }
        compared += !g;
        free(want);
    }
    int left = 0;
    if (!rc) tb_weights_each_unused(w, vjepa2_unused, &left);
    CHECK(!rc && differ == 0 && left == 0 && compared >= (with_probe ? 100 : 50),
          "%s: %d tensors compared, %d differ, %d left over", label, compared, differ, left);
    st_close(sf);
    tb_weights_free(w);
    free(json), free(name);
    vjepa2_env(NULL, NULL);
}

static double json_num(const cJSON *j, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, key);
    return cJSON_IsNumber(v) ? v->valuedouble : -1;
}

/* Meta's files run: the encoder file and its probe loaded as a model (the fixture's config.json
 * for the head count hidden 40 leaves open) give transformers' logits on the fixture's input. */
static void test_vjepa2_meta_logits(void) {
    char path[1200], probe[1200], cfg[1200], in[1200], ref[1200], err[512] = "";
    const char *fx = parity_fixtures_dir();
    snprintf(path, sizeof path, "%s/vjepa2_meta/vjepa2-hd20-32.pt", fx);
    snprintf(probe, sizeof probe, "%s/vjepa2_meta/ssv2-hd20-4x2x3.pt", fx);
    snprintf(cfg, sizeof cfg, "%s/vjepa2_hd20/config.json", fx);
    snprintf(in, sizeof in, "%s/vjepa2_hd20/input.npy", fx);
    snprintf(ref, sizeof ref, "%s/vjepa2_hd20/logits.npy", fx);
    vjepa2_env(probe, NULL);
    npy_array x = {0}, l = {0};
    tb_err e = {{0}};
    int ok = !npy_read(in, &x, &e) && !npy_read(ref, &l, &e);
    CHECK(ok, "fixture unreadable: %s", e.msg);
    tubelet_load_params lp = tubelet_load_default_params();
    lp.config = cfg;
    tubelet_model *m = NULL;
    tubelet_state *s = NULL;
    int rc = ok ? tubelet_model_load(&m, path, &lp, err, sizeof err) : -1;
    CHECK(rc == 0, "vitl-style .pt with its probe: %s", err);
    if (!rc) rc = tubelet_state_new(&s, m, (int)x.shape[0], (int)x.shape[1], (int)x.shape[3],
                                    (int)x.shape[4], err, sizeof err);
    float *out = malloc(sizeof(float) * (l.numel ? l.numel : 1));
    if (!rc) rc = tubelet_forward(s, x.data, out, NULL, err, sizeof err);
    CHECK(rc == 0, "forward: %s", err);
    if (!rc) {
        const double d = check_max_abs_diff(out, l.data, (long)l.numel);
        CHECK(d <= 1e-4 * fmax(1, check_max_abs(l.data, (long)l.numel)), "logits differ by %.3g", d);
        printf("  Meta's .pt files as a model: logits max abs err %.2e against transformers'\n", d);
    }
    free(out);
    tubelet_state_free(s);
    tubelet_model_free(m);
    npy_free(&x), npy_free(&l);
    vjepa2_env(NULL, NULL);
}

static void test_vjepa2_meta(void) {
    vjepa2_against_fixture("target_encoder + probe file", "vjepa2-hd20-32.pt", "ssv2-hd20-4x2x3.pt",
                           NULL, 0.0f, 1);
    CHECK(strstr(warnings, "2 attentive classifiers; the first"), "no warning of the second probe: %s", warnings);
    vjepa2_against_fixture("legacy serialisation", "vjepa2-hd20-32_legacy.pt", "ssv2-hd20-4x2x3.pt",
                           NULL, 0.0f, 1);
    vjepa2_against_fixture("TUBELET_VJEPA2_ENCODER=encoder", "vjepa2-hd20-32.pt", "ssv2-hd20-4x2x3.pt",
                           "encoder", 1.0f, 1);
    vjepa2_against_fixture("encoder only, no probe", "vjepa2-hd20-32.pt", NULL, NULL, 0.0f, 0);
    vjepa2_against_fixture("hub-style encoder + probe in one file", "combined-hd20-32.pt", NULL, NULL,
                           0.0f, 1);
    CHECK(strstr(warnings, "no 'target_encoder': reading 'encoder'"), "no fallback warning: %s", warnings);

    char path[1200], probe[1200];
    const char *fx = parity_fixtures_dir();
    tb_log log = {keep_log, NULL};
    tb_err e = {{0}};
    char *json = NULL, *name = NULL;
    tb_weights *w = NULL;
    /* hidden 40: its heads are in no shape, and the error says what to give */
    snprintf(path, sizeof path, "%s/vjepa2_meta/vjepa2-hd20-32.pt", fx);
    snprintf(probe, sizeof probe, "%s/vjepa2_meta/ssv2-hd20-4x2x3.pt", fx);
    vjepa2_env(probe, NULL);
    int rc = tb_ckpt_open(path, TB_CKPT_TORCH, NULL, &log, &json, &name, &w, &e);
    CHECK(rc == TUBELET_ERR_CONFIG && strstr(e.msg, "num_attention_heads") && strstr(e.msg, "vjepa2"),
          "hidden 40 inferred: %d %s", rc, e.msg);
    tb_weights_free(w), w = NULL;
    vjepa2_env(probe, "ema");
    rc = tb_ckpt_open(path, TB_CKPT_TORCH, NULL, &log, &json, &name, &w, &e);
    CHECK(rc == TUBELET_ERR_CONFIG && strstr(e.msg, "TUBELET_VJEPA2_ENCODER is 'ema'"), "bad env: %s", e.msg);
    tb_weights_free(w), w = NULL;
    vjepa2_env(NULL, NULL);
    const char *type = NULL;
    tb_ckpt_cfg c;
    rc = tb_ckpt_read_cfg(path, &c, &type, &e);
    CHECK(rc == 0 && type && !strcmp(type, "vjepa2"), "read_cfg: %s %s", e.msg, type ? type : "");

    /* the inferred config of a file with everything in its shapes and name */
    snprintf(path, sizeof path, "%s/vjepa2_meta/diving48-tiny-64.pt", fx);
    warnings[0] = 0;
    rc = tb_ckpt_open(path, TB_CKPT_TORCH, NULL, &log, &json, &name, &w, &e);
    CHECK(rc == 0, "tiny: %s", e.msg);
    cJSON *j = rc ? NULL : cJSON_Parse(json);
    const cJSON *mt = cJSON_GetObjectItemCaseSensitive(j, "model_type");
    CHECK(j && cJSON_IsString(mt) && !strcmp(mt->valuestring, "vjepa2"), "tiny: model_type");
    static const struct { const char *key; double want; } want[] = {
        {"hidden_size", 64}, {"num_attention_heads", 1}, {"num_hidden_layers", 2},
        {"patch_size", 4}, {"tubelet_size", 2}, {"in_chans", 3}, {"crop_size", 64},
        {"frames_per_clip", 32}, {"mlp_ratio", 279.0 / 64}, {"num_pooler_layers", 3},
        {"pooler_num_attention_heads", 16}, {"num_labels", 3}, {"layer_norm_eps", 1e-6}};
    for (size_t i = 0; j && i < sizeof want / sizeof *want; i++)
        CHECK(json_num(j, want[i].key) == want[i].want, "tiny: %s = %g, want %g", want[i].key,
              json_num(j, want[i].key), want[i].want);
    CHECK(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "qkv_bias")), "tiny: qkv_bias");
    CHECK(strstr(warnings, "assuming 1 attention heads of 64"), "tiny: no heads warning: %s", warnings);
    cJSON_Delete(j);
    free(json), free(name);
    tb_weights_free(w);
    /* its preprocessing: VJEPA2VideoProcessor at the crop its name gives */
    rc = tb_ckpt_preprocessor_for(path, 0, &json, &e);
    j = rc ? NULL : cJSON_Parse(json);
    const cJSON *size = cJSON_GetObjectItemCaseSensitive(j, "size");
    CHECK(j && json_num(size, "shortest_edge") == 73 &&
              json_num(cJSON_GetObjectItemCaseSensitive(j, "crop_size"), "height") == 64,
          "tiny: preprocessing %s", json ? json : e.msg);
    cJSON_Delete(j);
    free(json);
}

int main(int argc, char **argv) {
    check_cases(argc, argv);
    vjepa2_env(NULL, NULL); /* the caller's TUBELET_VJEPA2_* must not change what loads */
    char path[1100], line[512];
    snprintf(path, sizeof path, "%s/checkpoints/list.txt", parity_fixtures_dir());
    FILE *f = fopen(path, "r");
    CHECK(f != NULL, "cannot open %s", path);
    int n = 0;
    while (f && fgets(line, sizeof line, f)) {
        char name[200], file[200], output[32];
        if (sscanf(line, "%199s %199s %31s", name, file, output) != 3) continue;
        if (check_select("run_case(%s)", name)) run_case(name, file, output);
        n++;
    }
    if (f) fclose(f);
    CHECK(n >= 18, "only %d checkpoint fixtures listed", n);
    CASE(test_inferred());
    CASE(test_config_needed());
    CASE(test_swin_inferred());
    CASE(test_training_cfg());
    CASE(test_cfg_garbage());
    CASE(test_cfg_mismatch());
    CASE(test_reader());
    CASE(test_attacks());
    CASE(test_nested_reduce());
    CASE(test_inert_records());
    CASE(test_vjepa2_meta());
    CASE(test_vjepa2_meta_logits());
    return check_done();
}
