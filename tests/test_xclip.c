/* X-CLIP against transformers' XCLIPModel (tools/make_xclip_fixtures.py): logits_per_video,
 * text_embeds and video_embeds within 1e-4 x max(1, max |ref|) at 1 and 2 threads, for patch 16
 * x 8 frames x 2 prompt layers (batch 2, context 77) and patch 32 x 3 frames x 1 prompt layer
 * (context 16), four texts of different lengths; packed fp32, bf16 and int8 near them; the
 * fixture's token ids from the tokenizer; the
 * text embeddings independent of how many texts are encoded together; and bad input refused with
 * a message: another frame count or image size, ids outside the vocabulary or too long a
 * context, a config without text_config or with a mit width other than projection_dim, and text
 * calls on a model without a text tower. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "models/config.h"
#include "parity.h"
#include "tubelet.h"
#include "tubelet_text.h"

static tubelet_model *load(const char *dir, int threads, char *err, size_t errlen) {
    tubelet_load_params lp = tubelet_load_default_params();
    lp.n_threads = threads;
    tubelet_model *m = NULL;
    if (tubelet_model_load(&m, dir, &lp, err, errlen)) return NULL;
    return m;
}

static void parity(const char *name, int threads) {
    char dir[1024], err[1024];
    snprintf(dir, sizeof dir, "%s/%s", parity_fixtures_dir(), name);
    tubelet_model *m = load(dir, threads, err, sizeof err);
    CHECK(m, "%s: %s", dir, err);
    if (!m) return;
    parity_xclip r;
    if (!parity_xclip_run(&r, name, name, m, threads)) goto out;
    const int n = r.n, B = r.B, C = r.C, P = r.P;
    const float *text = r.text;
    float *one = malloc(sizeof(float) * (size_t)P);
    /* each text alone gives the same embedding (its own causal length) */
    for (int i = 0; i < n; i++) {
        CHECK(!tubelet_encode_text(m, (int32_t *)r.ids.data + (size_t)i * C, 1, C, one, err,
                                   sizeof err), "%s: %s", name, err);
        CHECK(check_max_abs_diff(one, text + (size_t)i * P, P) < 1e-5, "%s: text %d alone "
              "differs", name, i);
    }
    free(one);
    /* 300 texts are encoded in chunks of 256: the same embeddings */
    int32_t *ids300 = malloc(sizeof(int32_t) * (size_t)(300 * C));
    float *e300 = malloc(sizeof(float) * (size_t)(300 * P));
    for (int k = 0; k < 300; k++)
        memcpy(ids300 + (size_t)k * C, (int32_t *)r.ids.data + (size_t)(k % n) * C,
               sizeof(int32_t) * (size_t)C);
    CHECK(!tubelet_encode_text(m, ids300, 300, C, e300, err, sizeof err), "%s: 300: %s", name, err);
    double d300 = 0;
    for (int k = 0; k < 300; k++) {
        const double d = check_max_abs_diff(e300 + (size_t)k * P, text + (size_t)(k % n) * P, P);
        d300 = d > d300 ? d : d300;
    }
    CHECK(d300 < 1e-5, "%s: 300 texts differ from 4 by %.3g", name, d300);
    free(ids300), free(e300);
    /* 150 texts (the fixture's four over and over) run in chunks of 64: each column is its
     * text's logit among the four */
    enum { MANY = 150 };
    float *many = malloc(sizeof(float) * (size_t)(MANY * P)),
          *ml = malloc(sizeof(float) * (size_t)(B * MANY)),
          *want = malloc(sizeof(float) * (size_t)(B * MANY));
    for (int k = 0; k < MANY; k++) {
        memcpy(many + (size_t)k * P, text + (size_t)(k % n) * P, sizeof(float) * (size_t)P);
        for (int b = 0; b < B; b++) want[b * MANY + k] = ((float *)r.lg.data)[b * n + k % n];
    }
    CHECK(!tubelet_forward_text(r.s, r.x.data, many, MANY, ml, NULL, NULL, err, sizeof err),
          "%s: 150 texts: %s", name, err);
    npy_array wa = {.dtype = NPY_F32, .ndim = 2, .shape = {B, MANY},
                    .numel = (size_t)(B * MANY), .data = want};
    parity_compare(name, "150 texts", threads, ml, &wa);
    free(many), free(ml), free(want);
    /* a second pass on the same state gives the same logits */
    float *again = malloc(sizeof(float) * (size_t)(B * n));
    CHECK(!tubelet_forward_text(r.s, r.x.data, text, n, again, NULL, NULL, err, sizeof err) &&
          !memcmp(again, r.logits, sizeof(float) * (size_t)(B * n)), "%s: second pass", name);
    free(again);
out:
    parity_xclip_free(&r);
    tubelet_model_free(m);
}

/* The tokenizer of the model directory gives the fixture's ids. */
static void tokenizer_ids(const char *name) {
    char dir[1024], err[1024], path[1200];
    snprintf(dir, sizeof dir, "%s/%s", parity_fixtures_dir(), name);
    npy_array ids = {0};
    if (!parity_fixture_npy(name, "ids.npy", &ids)) return;
    snprintf(path, sizeof path, "%s/texts.json", dir);
    size_t len = 0;
    unsigned char *json = check_read_file(path, &len);
    tubelet_tokenizer *tok = NULL;
    CHECK(json && !tubelet_tokenizer_load(&tok, dir, err, sizeof err), "%s: %s", dir, err);
    /* texts.json: a JSON list of plain ASCII strings without escapes */
    const char *p = json ? strchr((char *)json, '"') : NULL;
    int i = 0, C = (int)ids.shape[1];
    int32_t got[128];
    while (tok && p && i < (int)ids.shape[0]) {
        const char *end = strchr(p + 1, '"');
        if (!end) break;
        int rc = tubelet_tokenizer_encode(tok, p + 1, (size_t)(end - p - 1), C, got, NULL, err,
                                          sizeof err);
        CHECK(!rc && !memcmp(got, (int32_t *)ids.data + (size_t)i * C, sizeof(int32_t) * C),
              "%s: text %d: ids differ from CLIPTokenizer's", name, i);
        i++;
        p = strchr(end + 1, '"');
    }
    CHECK(i == (int)ids.shape[0], "%s: %d texts read", name, i);
    tubelet_tokenizer_free(tok);
    free(json);
    npy_free(&ids);
}

/* Packed inference (fp32 packed, bf16, int8: every linear layer the family lists packed; the
 * count once fell short, "more linear layers than planned") near the reference logits. */
static void precisions(const char *name) {
    static const struct {
        int precision, inference;
        double tol;
    } runs[] = {{TUBELET_PRECISION_FP32, 1, 1e-4}, {TUBELET_PRECISION_BF16, 0, 0.1},
                {TUBELET_PRECISION_INT8, 0, 0.3}};
    char dir[1024], err[1024];
    snprintf(dir, sizeof dir, "%s/%s", parity_fixtures_dir(), name);
    npy_array x = {0}, ids = {0}, lg = {0};
    if (!parity_fixture_npy(name, "x.npy", &x) || !parity_fixture_npy(name, "ids.npy", &ids) ||
        !parity_fixture_npy(name, "logits_per_video.npy", &lg))
        goto out;
    for (size_t r = 0; r < sizeof runs / sizeof *runs; r++) {
        tubelet_load_params lp = tubelet_load_default_params();
        lp.n_threads = 2, lp.precision = runs[r].precision, lp.inference = runs[r].inference;
        lp.precision_reference = 1;
        tubelet_model *m = NULL;
        tubelet_state *s = NULL;
        int P = 0, rc = tubelet_model_load(&m, dir, &lp, err, sizeof err);
        CHECK(!rc, "%s precision %d: %s", name, runs[r].precision, err);
        if (rc) continue;
        tubelet_text_dims(m, &P, NULL);
        const int n = (int)ids.shape[0], B = (int)x.shape[0];
        float *text = malloc(sizeof(float) * (size_t)(n * P)),
              *logits = malloc(sizeof(float) * (size_t)(B * n));
        rc = tubelet_encode_text(m, ids.data, n, (int)ids.shape[1], text, err, sizeof err);
        if (!rc) rc = tubelet_state_new(&s, m, B, (int)x.shape[1], (int)x.shape[3],
                                        (int)x.shape[4], err, sizeof err);
        if (!rc) rc = tubelet_forward_text(s, x.data, text, n, logits, NULL, NULL, err,
                                           sizeof err);
        CHECK(!rc, "%s precision %d: %s", name, runs[r].precision, err);
        if (!rc) {
            const double d = check_max_abs_diff(logits, lg.data, (long)lg.numel);
            CHECK(d <= runs[r].tol, "%s precision %d: logits off by %.3g", name,
                  runs[r].precision, d);
            printf("  %-24s precision %d%s: max abs err %.2e\n", name, runs[r].precision,
                   runs[r].inference ? " (packed)" : "", d);
        }
        tubelet_state_free(s);
        tubelet_model_free(m);
        free(text), free(logits);
    }
out:
    npy_free(&x), npy_free(&ids), npy_free(&lg);
}

static int has(const char *err, const char *what) { return strstr(err, what) != NULL; }

static void bad_inputs(void) {
    char dir[1024], err[1024];
    snprintf(dir, sizeof dir, "%s/xclip/p32_f3", parity_fixtures_dir());
    tubelet_model *m = load(dir, 1, err, sizeof err);
    CHECK(m, "%s: %s", dir, err);
    if (!m) return;
    tubelet_state *s = NULL;
    err[0] = 0;
    CHECK(tubelet_state_new(&s, m, 1, 4, 64, 64, err, sizeof err) == TUBELET_ERR_SHAPE &&
          has(err, "num_frames = 3") && !s, "4 frames: %s", err);
    CHECK(tubelet_state_new(&s, m, 1, 3, 96, 64, err, sizeof err) == TUBELET_ERR_SHAPE &&
          has(err, "image_size 64x64") && !s, "96x64: %s", err);
    int32_t ids[17] = {0};
    float out[24];
    ids[1] = 1712;
    CHECK(tubelet_encode_text(m, ids, 1, 16, out, err, sizeof err) == TUBELET_ERR_ARG &&
          has(err, "outside the vocabulary"), "id 1712: %s", err);
    ids[1] = 5;
    CHECK(tubelet_encode_text(m, ids, 1, 17, out, err, sizeof err) == TUBELET_ERR_SHAPE &&
          has(err, "max_position_embeddings"), "context 17: %s", err);
    CHECK(tubelet_encode_text(m, ids, 0, 16, out, err, sizeof err) == TUBELET_ERR_SHAPE,
          "0 texts: %s", err);
    tubelet_model_free(m);

    /* configs: no text_config, a text_config that is not an object, mit width != projection */
    char cfg_path[1200];
    snprintf(cfg_path, sizeof cfg_path, "%s/config.json", dir);
    size_t len = 0;
    char *cfg = (char *)check_read_file(cfg_path, &len);
    CHECK(cfg != NULL, "%s unreadable", cfg_path);
    if (!cfg) return;
    struct {
        const char *from, *to, *want;
    } cases[] = {
        {"\"text_config\"", "\"text_confi_\"", "needs \"text_config\""},
        {"\"vision_config\"", "\"vision_confi_\"", "needs \"vision_config\""},
        {"\"mit_hidden_size\": 24", "\"mit_hidden_size\": 12", "must equal projection_dim"},
        {"\"prompt_num_attention_heads\": 2", "\"prompt_num_attention_heads\": 5",
         "not divisible by prompt_num_attention_heads"},
        {"\"hidden_act\": \"quick_gelu\"", "\"hidden_act\": \"tanhh\"", "not supported"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        char *at = strstr(cfg, cases[k].from);
        CHECK(at != NULL, "case %zu: '%s' not in the fixture's config", k, cases[k].from);
        if (!at) continue;
        char *edited = malloc(len + 64);
        snprintf(edited, len + 64, "%.*s%s%s", (int)(at - cfg), cfg, cases[k].to,
                 at + strlen(cases[k].from));
        char tmp[] = "/tmp/tb_xclip_XXXXXX";
        CHECK(!check_model_dir(tmp, edited, dir), "temp dir");
        tubelet_model *bad = load(tmp, 1, err, sizeof err);
        CHECK(!bad && has(err, cases[k].want) && has(err, "config.json"), "case %zu: %s", k,
              bad ? "loaded" : err);
        tubelet_model_free(bad);
        char cmd[1200];
        snprintf(cmd, sizeof cmd, "rm -rf %s", tmp);
        CHECK(!system(cmd), "rm");
        free(edited);
    }
    free(cfg);

    /* a model without text: the text calls say so */
    tubelet_model *v = NULL;
    tubelet_load_params lp = tubelet_load_default_params();
    CHECK(!tubelet_model_random(&v, "videomae-tiny-pretrain", 1, &lp, err, sizeof err),
          "videomae: %s", err);
    if (v) {
        CHECK(tubelet_text_dims(v, NULL, NULL) == TUBELET_ERR_UNSUPPORTED, "videomae dims");
        CHECK(tubelet_encode_text(v, ids, 1, 16, out, err, sizeof err) ==
                  TUBELET_ERR_UNSUPPORTED && has(err, "no text tower"), "videomae: %s", err);
        tubelet_model_free(v);
    }
}

/* config.json → tb_config → config.json → the same tb_config (tubelet's writer: a saved or
 * converted model), square and not. */
static void config_roundtrip(void) {
    char path[1200];
    snprintf(path, sizeof path, "%s/xclip/p32_f3/config.json", parity_fixtures_dir());
    size_t len = 0;
    char *text = (char *)check_read_file(path, &len);
    CHECK(text != NULL, "%s unreadable", path);
    if (!text) return;
    for (int square = 1; square >= 0; square--) {
        tb_config a, b;
        tb_err e = {{0}};
        int rc = tb_config_parse(&a, text, path, NULL, &e);
        CHECK(!rc, "%s: %s", path, e.msg);
        if (rc) break;
        if (!square) a.image_w = 96, a.patch_w = 16;
        char *out = tb_config_to_json(&a);
        rc = out ? tb_config_parse(&b, out, "written", NULL, &e) : -1;
        CHECK(!rc, "written config: %s", e.msg);
        if (!rc) {
            /* X-CLIP's own fields are private to xclip.c: the config.json b writes shows them */
            char *again = tb_config_to_json(&b);
            CHECK(again && !strcmp(out, again), "config round trip (square %d): written again "
                  "differs:\n%s\n%s", square, out, again ? again : "(null)");
            free(again);
            CHECK(a.image_h == b.image_h &&
                  a.image_w == b.image_w && a.patch_h == b.patch_h && a.patch_w == b.patch_w &&
                  a.hidden == b.hidden && a.layers == b.layers && a.heads == b.heads &&
                  a.intermediate == b.intermediate && a.act == b.act && a.ln_eps == b.ln_eps &&
                  a.num_frames == b.num_frames && a.num_labels == b.num_labels &&
                  a.family == b.family, "config round trip (square %d) differs:\n%s", square,
                  out);
            tb_config_free(&b);
        }
        free(out);
        tb_config_free(&a);
    }
    free(text);
}

/* The original repository's .pth (tools/make_xclip_pth.py: the p32_f3 model in microsoft/VideoX's
 * names, fused in_proj, x @ proj projections, under "model"; its config.json beside it) loads
 * through the converter's name map to the same model: logits, video and text embeddings
 * bit-identical to the directory's (the same float16 values), and within the parity bound of
 * transformers' logits. Without the config beside it, the error says where one comes from. */
static void original_pth(void) {
    const char *name = "xclip/p32_f3";
    char dir[1024], pth[1024], err[1024] = "";
    snprintf(dir, sizeof dir, "%s/%s", parity_fixtures_dir(), name);
    snprintf(pth, sizeof pth, "%s/xclip/pth/xclip_p32_f3.pth", parity_fixtures_dir());
    npy_array x = {0}, ids = {0}, lg = {0};
    if (!parity_fixture_npy(name, "x.npy", &x) || !parity_fixture_npy(name, "ids.npy", &ids) ||
        !parity_fixture_npy(name, "logits_per_video.npy", &lg))
        goto out;
    tubelet_model *m[2] = {load(dir, 1, err, sizeof err), load(pth, 1, err, sizeof err)};
    CHECK(m[0] && m[1], "%s: %s", pth, err);
    const int n = (int)ids.shape[0], C = (int)ids.shape[1], B = (int)x.shape[0];
    int P = 0;
    float *out[2] = {NULL, NULL};
    for (int k = 0; k < 2 && m[0] && m[1]; k++) {
        tubelet_state *s = NULL;
        CHECK(!tubelet_text_dims(m[k], &P, NULL), "dims");
        float *o = out[k] = calloc((size_t)(n * P + B * n + B * P + B * n * P), sizeof(float));
        int rc = tubelet_encode_text(m[k], ids.data, n, C, o, err, sizeof err);
        if (!rc) rc = tubelet_state_new(&s, m[k], B, (int)x.shape[1], (int)x.shape[3],
                                        (int)x.shape[4], err, sizeof err);
        if (!rc) rc = tubelet_forward_text(s, x.data, o, n, o + n * P, o + n * P + B * n,
                                           o + n * P + B * n + B * P, err, sizeof err);
        CHECK(!rc, "%s: %s", k ? pth : dir, err);
        tubelet_state_free(s);
    }
    if (out[0] && out[1]) {
        const size_t total = (size_t)(n * P + B * n + B * P + B * n * P);
        CHECK(!memcmp(out[0], out[1], total * sizeof(float)),
              "%s: outputs differ from the directory's", pth);
        const double d = check_max_abs_diff(out[1] + n * P, lg.data, (long)lg.numel);
        CHECK(d <= 1e-4 * 7, "%s: logits max abs diff %g", pth, d);
    }
    free(out[0]), free(out[1]);
    tubelet_model_free(m[0]), tubelet_model_free(m[1]);
    /* the same file without the config.json beside it */
    char tmp[] = "/tmp/tb_xclip_pth_XXXXXX", copy[64];
    if (mkdtemp(tmp)) {
        snprintf(copy, sizeof copy, "%s/x.pth", tmp);
        FILE *in = fopen(pth, "rb"), *o = fopen(copy, "wb");
        char buf[65536];
        size_t got;
        while (in && o && (got = fread(buf, 1, sizeof buf, in)) > 0) fwrite(buf, 1, got, o);
        if (in) fclose(in);
        if (o) fclose(o);
        tubelet_model *none = load(copy, 1, err, sizeof err);
        CHECK(!none && strstr(err, "x.pth") && strstr(err, "config.json"),
              "a .pth without its config: '%s'", err);
        tubelet_model_free(none);
        remove(copy), remove(tmp);
    }
out:
    npy_free(&x), npy_free(&ids), npy_free(&lg);
}

int main(int argc, char **argv) {
    check_cases(argc, argv);
    CASE(config_roundtrip());
    CASE(original_pth());
    for (const char *const *f = parity_xclip_fixtures; *f; f++) {
        for (int threads = 1; threads <= 2; threads++)
            if (check_select("parity(%s, %d threads)", *f, threads)) parity(*f, threads);
        if (check_select("tokenizer_ids(%s)", *f)) tokenizer_ids(*f);
        if (check_select("precisions(%s)", *f)) precisions(*f);
    }
    CASE(bad_inputs());
    return check_done();
}
