/* Video models initialised from an image ViT (tubelet_model_from_image, docs/image-init.md)
 * against what the image model computes (tests/fixtures/image_init, written by
 * tools/make_image_init_fixtures.py with transformers): where the paper's initialisation makes
 * the video model compute the image model, the outputs must agree to the project's tolerance,
 * 1e-4 * max(1, max |ref|). Video Swin from an image Swin (tests/fixtures/image_init_swin,
 * tools/make_swin_init_fixtures.py): one image repeated over time gives the image model's last
 * hidden state (per frame), pooled features and logits, to 1e-4 of the largest value; and the
 * image configs and tables that do not fit are refused, naming the file. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "io/weights.h"
#include "parity.h"

#define D 16
#define N 9 /* 3 x 3 patches of 12 x 12 images */
#define PX (3 * 12 * 12)

static char fx[512];
static npy_array frames, frames16, vit_hidden, vit_hidden1, vit_hidden16, vit_nocls, bias_f1,
    bias_mean;

static void load(const char *name, npy_array *a) {
    char p[700];
    tb_err e = {{0}};
    snprintf(p, sizeof p, "%s/%s", fx, name);
    if (npy_read(p, a, &e)) {
        printf("FAIL cannot read %s: %s\n", p, e.msg);
        exit(1);
    }
}

static tubelet_model *init(const char *video, int inflate) {
    char dir[700], vit[700], err[1024];
    snprintf(dir, sizeof dir, "%s/%s", fx, video);
    snprintf(vit, sizeof vit, "%s/vit", fx);
    tubelet_image_init_params ip = tubelet_image_init_default_params();
    ip.tubelet_init = inflate ? TUBELET_TUBELET_INFLATE : TUBELET_TUBELET_CENTRAL;
    ip.seed = 7;
    tubelet_load_params lp = tubelet_load_default_params();
    lp.n_threads = 2;
    tubelet_model *m = NULL;
    int rc = tubelet_model_from_image(&m, dir, vit, &ip, &lp, err, sizeof err);
    CHECK(rc == 0, "%s: init failed: %s", video, err);
    return rc ? NULL : m;
}

/* pixel_values (1, T, 3, s, s) of the frames idx[0..T) of src (frames of s x s pixels) */
static float *video(const npy_array *src, const int *idx, int T, int s) {
    float *x = malloc(sizeof(float) * (size_t)(T * 3 * s * s));
    for (int t = 0; t < T; t++)
        memcpy(x + t * 3 * s * s, (const float *)src->data + idx[t] * 3 * s * s,
               sizeof(float) * (size_t)(3 * s * s));
    return x;
}

/* hidden state (layer -1: last_hidden_state) of m on x (1, T, 3, s, s) into a malloc'd buffer */
static float *hidden(tubelet_model *m, const float *x, int T, int s, int layer, int64_t *numel) {
    tubelet_state *st = NULL;
    char err[1024];
    *numel = 0;
    if (tubelet_state_new(&st, m, 1, T, s, s, err, sizeof err)) {
        CHECK(0, "state: %s", err);
        return NULL;
    }
    tubelet_shape hs;
    tubelet_state_hidden_shape(st, &hs);
    *numel = tubelet_shape_numel(&hs);
    float *h = malloc(sizeof(float) * (size_t)*numel);
    int rc = tubelet_forward_hidden(st, x, layer, h, err, sizeof err);
    CHECK(rc == 0, "forward: %s", err);
    tubelet_state_free(st);
    return h;
}

static void compare(const char *name, const float *got, const float *want, long n) {
    double err = check_max_abs_diff(got, want, n), scale = check_max_abs(want, n);
    double tol = 1e-4 * (scale > 1 ? scale : 1);
    CHECK(err <= tol, "%s: max abs error %.3g > tolerance %.3g", name, err, tol);
    printf("  %-58s max abs err %.2e (max |ref| %.2f)\n", name, err, scale);
}

static const float *row(const npy_array *a, int frame, int tok, int per_frame) {
    return (const float *)a->data + ((int64_t)frame * per_frame + tok) * D;
}

/* TimeSformer divided, temporal_dense = 0: the time step adds nothing, the space step is the
 * ViT's attention over a frame's patches and the (shared) cls token. */
static void timesformer_divided(void) {
    tubelet_model *m = init("timesformer_divided", 0);
    if (!m) return;
    int64_t n;
    float got[4 * (N + 1) * D], want[4 * (N + 1) * D];
    /* four different frames: after block 0 every patch token is the ViT's of its frame (the cls
     * token entering block 0 is the ViT's; after it, the clip's one cls token is the mean of
     * the frames' and the streams part) */
    const int diff[4] = {0, 1, 2, 3};
    float *x = video(&frames, diff, 4, 12), *h = hidden(m, x, 4, 12, 1, &n);
    CHECK(h && n == (1 + N * 4) * D, "divided hidden numel %lld", (long long)n);
    if (!h || n != (1 + N * 4) * D) return;
    for (int t = 0; t < 4; t++)
        for (int p = 0; p < N; p++) {
            memcpy(got + (t * N + p) * D, h + (1 + p * 4 + t) * D, sizeof(float) * D);
            memcpy(want + (t * N + p) * D, row(&vit_hidden1, t, 1 + p, N + 1), sizeof(float) * D);
        }
    compare("timesformer divided, 4 frames, block 1, patch tokens", got, want, 4 * N * D);
    free(x), free(h);
    /* one frame repeated: every token, all blocks, after the final norm, is the ViT's */
    const int rep[4] = {2, 2, 2, 2};
    x = video(&frames, rep, 4, 12), h = hidden(m, x, 4, 12, -1, &n);
    CHECK(h && n == (1 + N * 4) * D, "divided hidden numel %lld", (long long)n);
    if (!h || n != (1 + N * 4) * D) return;
    for (int t = 0; t < 4; t++)
        for (int p = 0; p < N; p++) {
            memcpy(got + (t * N + p) * D, h + (1 + p * 4 + t) * D, sizeof(float) * D);
            memcpy(want + (t * N + p) * D, row(&vit_hidden, 2, 1 + p, N + 1), sizeof(float) * D);
        }
    memcpy(got + 4 * N * D, h, sizeof(float) * D);
    memcpy(want + 4 * N * D, row(&vit_hidden, 2, 0, N + 1), sizeof(float) * D);
    compare("timesformer divided, frame 2 repeated, last hidden, all", got, want, (4 * N + 1) * D);
    free(x), free(h);
    tubelet_model_free(m);

    /* 16 x 16 input (4 x 4 grid): positions resized bicubically = HF's interpolate_pos_encoding */
    if (!(m = init("timesformer_divided16", 0))) return;
    float want16[4 * 17 * D], got16[4 * 17 * D];
    x = video(&frames16, rep, 4, 16), h = hidden(m, x, 4, 16, -1, &n);
    CHECK(h && n == (1 + 16 * 4) * D, "divided16 hidden numel %lld", (long long)n);
    if (!h || n != (1 + 16 * 4) * D) return;
    for (int t = 0; t < 4; t++)
        for (int p = 0; p < 16; p++) {
            memcpy(got16 + (t * 16 + p) * D, h + (1 + p * 4 + t) * D, sizeof(float) * D);
            memcpy(want16 + (t * 16 + p) * D, row(&vit_hidden16, 2, 1 + p, 17), sizeof(float) * D);
        }
    compare("timesformer divided 16x16 (positions resized), frame 2 x 4", got16, want16,
            4 * 16 * D);
    free(x), free(h);
    tubelet_model_free(m);
}

/* TimeSformer space_only: each frame is the ViT's sequence, exactly. */
static void timesformer_space(void) {
    tubelet_model *m = init("timesformer_space", 0);
    if (!m) return;
    int64_t n;
    const int diff[4] = {0, 1, 2, 3};
    float *x = video(&frames, diff, 4, 12), *h = hidden(m, x, 4, 12, -1, &n);
    CHECK(h && n == (int64_t)vit_hidden.numel, "space hidden numel %lld", (long long)n);
    if (h && n == (int64_t)vit_hidden.numel)
        compare("timesformer space_only, 4 frames, last hidden", h, vit_hidden.data, (long)n);
    free(x), free(h);
    tubelet_model_free(m);
}

/* ViViT Model 1, tubelet 2: on [f0, f1, f0, f1] every tubelet embeds f1 (central frame) or
 * (f0 + f1) / 2 (inflation), so both temporal indices hold the same tokens; joint attention then
 * sees each patch key twice and the cls key once: the ViT with log(1/2) added to the cls key's
 * scores (the fixture's reference). */
static void vivit_m1(void) {
    const int alt[4] = {0, 1, 0, 1};
    for (int inflate = 0; inflate < 2; inflate++) {
        tubelet_model *m = init("vivit_m1", inflate);
        if (!m) return;
        const npy_array *ref = inflate ? &bias_mean : &bias_f1;
        int64_t n;
        float *x = video(&frames, alt, 4, 12), *h = hidden(m, x, 4, 12, -1, &n);
        float want[(1 + 2 * N) * D];
        CHECK(h && n == (1 + 2 * N) * D, "m1 hidden numel %lld", (long long)n);
        if (!h || n != (1 + 2 * N) * D) return;
        memcpy(want, ref->data, sizeof(float) * D);
        for (int i = 0; i < 2; i++)
            memcpy(want + (1 + i * N) * D, (const float *)ref->data + D, sizeof(float) * N * D);
        compare(inflate ? "vivit m1 inflate, [f0 f1 f0 f1] = ViT(mean), cls key - log 2"
                        : "vivit m1 central, [f0 f1 f0 f1] = ViT(f1), cls key - log 2",
                h, want, (long)n);
        free(x), free(h);
        tubelet_model_free(m);
    }
}

/* ViViT Model 3, central frame, temporal output projection 0: each temporal index is the ViT's
 * blocks on its central frame's patch tokens (no cls token: Model 3 has none). */
static void vivit_m3(void) {
    tubelet_model *m = init("vivit_m3", 0);
    if (!m) return;
    int64_t n;
    const int diff[4] = {0, 1, 2, 3};
    float *x = video(&frames, diff, 4, 12), *h = hidden(m, x, 4, 12, -1, &n);
    float want[2 * N * D];
    CHECK(h && n == 2 * N * D, "m3 hidden numel %lld", (long long)n);
    if (!h || n != 2 * N * D) return;
    for (int i = 0; i < 2; i++) /* tubelet i holds frames 2i, 2i + 1: central index 1 */
        memcpy(want + i * N * D, row(&vit_nocls, 2 * i + 1, 0, N), sizeof(float) * N * D);
    compare("vivit m3 central, 4 frames, last hidden = ViT(f1), ViT(f3)", h, want, (long)n);

    /* save and load: the same model, bit for bit */
    char tmp[] = "/tmp/tubelet_image_init_XXXXXX", err[1024];
    tubelet_model *m2 = NULL;
    CHECK(mkdtemp(tmp) != NULL, "mkdtemp");
    int rc = tubelet_model_save(m, tmp, err, sizeof err);
    CHECK(rc == 0, "save: %s", err);
    if (!rc) rc = tubelet_model_load(&m2, tmp, NULL, err, sizeof err);
    CHECK(rc == 0, "load: %s", err);
    if (!rc) {
        tubelet_model_set_threads(m2, 2);
        int64_t n2;
        float *h2 = hidden(m2, x, 4, 12, -1, &n2);
        CHECK(h2 && n2 == n && !memcmp(h, h2, sizeof(float) * (size_t)n),
              "m3 saved and loaded differs");
        free(h2);
        tubelet_model_free(m2);
    }
    char p[700];
    snprintf(p, sizeof p, "%s/config.json", tmp), unlink(p);
    snprintf(p, sizeof p, "%s/model.safetensors", tmp), unlink(p);
    rmdir(tmp);
    free(x), free(h);
    tubelet_model_free(m);
}

static const float *tensor(const tubelet_model *m, const char *name, int64_t *numel) {
    for (int i = 0; i < tubelet_model_n_tensors(m); i++) {
        tubelet_shape s;
        const float *d;
        if (!strcmp(tubelet_model_tensor(m, i, &s, &d), name)) {
            *numel = tubelet_shape_numel(&s);
            return d;
        }
    }
    CHECK(0, "no tensor %s", name);
    return NULL;
}

/* Model 2: its spatial encoder is the ViT's, its temporal encoder random; with central-frame
 * init the output depends on each tubelet only through its central frame. Model 4: the ViT's
 * attention for its one MSA, positions repeated. */
static void vivit_m2_m4(void) {
    char vit[700];
    tb_err e = {{0}};
    tb_weights *w = NULL;
    snprintf(vit, sizeof vit, "%s/vit", fx);
    if (tb_weights_open(&w, vit, 1, &e)) {
        CHECK(0, "%s", e.msg);
        return;
    }
    tubelet_model *m = init("vivit_m2", 0);
    if (m) {
        static const char *const same[] = {"encoder.layer.1.attention.attention.query.weight",
                                           "encoder.layer.0.output.dense.bias",
                                           "embeddings.cls_token", "layernorm.weight"};
        int ok = 1;
        static const int nd[] = {2, 1, 3, 1};
        static const int64_t shp[4][3] = {{D, D}, {D}, {1, 1, D}, {D}};
        for (int i = 0; i < 4; i++) {
            char vn[200], mn[200];
            snprintf(vn, sizeof vn, "vit.%s", same[i]);
            snprintf(mn, sizeof mn, "vivit.%s", same[i]);
            int64_t nm;
            const float *a = tensor(m, mn, &nm), *b = NULL;
            tb_weights_get(w, vn, nd[i], shp[i], &b, &e);
            ok &= a && b && !memcmp(a, b, sizeof(float) * (size_t)nm);
        }
        CHECK(ok, "vivit m2: spatial encoder tensors differ from the ViT's");
        int64_t nt;
        const float *t =
            tensor(m, "vivit.temporal_encoder.layer.0.attention.output.dense.weight", &nt);
        double s = t ? check_max_abs(t, (long)nt) : 0;
        CHECK(s > 0, "vivit m2: temporal encoder not random");
        /* central frames 1 and 3 are the same in both videos, the others differ */
        const int a[4] = {0, 1, 2, 3}, b[4] = {2, 1, 0, 3};
        float *xa = video(&frames, a, 4, 12), *xb = video(&frames, b, 4, 12);
        int64_t n;
        float *ha = hidden(m, xa, 4, 12, -1, &n), *hb = hidden(m, xb, 4, 12, -1, &n);
        CHECK(ha && hb && !memcmp(ha, hb, sizeof(float) * (size_t)n),
              "vivit m2 central: non-central frames changed the output");
        printf("  vivit m2: spatial encoder = ViT tensors, temporal random, central frames only\n");
        free(xa), free(xb), free(ha), free(hb);
        tubelet_model_free(m);
    }
    if ((m = init("vivit_m4", 0))) {
        int64_t np;
        const float *pos = tensor(m, "vivit.embeddings.position_embeddings", &np), *vp = NULL;
        const int64_t ps[3] = {1, N + 1, D};
        tb_weights_get(w, "vit.embeddings.position_embeddings", 3, ps, &vp, &e);
        int ok = pos && vp && np == 4 * N * D;
        for (int t = 0; ok && t < 4; t++)
            ok = !memcmp(pos + t * N * D, vp + D, sizeof(float) * N * D);
        CHECK(ok, "vivit m4: positions are not the ViT's repeated over time");
        tubelet_model_free(m);
    }
    tb_weights_free(w);
}

/* TimeSformer's steps before the last: a copy of the image attention; the temporal dense zero,
 * axial's width dense and L+G's local dense the identity. (No equality with the image model holds
 * for axial and L+G: their spatial steps attend over rows, columns, quadrants, strided sets.) */
static void timesformer_steps(void) {
    static const struct { const char *cfg, *step; int identity; } cases[] = {
        {"timesformer_divided", "temporal", 0},
        {"timesformer_axial", "temporal", 0},
        {"timesformer_axial", "width", 1},
        {"timesformer_local_global", "local", 1},
    };
    for (int c = 0; c < 4; c++) {
        tubelet_model *m = init(cases[c].cfg, 0);
        if (!m) continue;
        for (int l = 0; l < 2; l++) {
            char a[160], b[160];
            int64_t na, nb;
            snprintf(a, sizeof a, "timesformer.encoder.layer.%d.attention.attention.qkv.weight", l);
            snprintf(b, sizeof b, "timesformer.encoder.layer.%d.%s_attention.attention.qkv.weight",
                     l, cases[c].step);
            const float *qa = tensor(m, a, &na), *qb = tensor(m, b, &nb);
            CHECK(qa && qb && na == nb && !memcmp(qa, qb, sizeof(float) * (size_t)na),
                  "%s: %s attention of block %d is not the image attention", cases[c].cfg,
                  cases[c].step, l);
            snprintf(a, sizeof a, "timesformer.encoder.layer.%d.%s_layernorm.bias", l,
                     cases[c].step);
            snprintf(b, sizeof b, "timesformer.encoder.layer.%d.layernorm_before.bias", l);
            qa = tensor(m, a, &na), qb = tensor(m, b, &nb);
            CHECK(qa && qb && na == nb && !memcmp(qa, qb, sizeof(float) * (size_t)na),
                  "%s: %s LayerNorm of block %d is not the image one", cases[c].cfg, cases[c].step,
                  l);
            snprintf(a, sizeof a, "timesformer.encoder.layer.%d.%s_dense.weight", l,
                     cases[c].step);
            const float *w = tensor(m, a, &na);
            int ok = w && na == D * D;
            for (int i = 0; ok && i < D * D; i++)
                ok = w[i] == (cases[c].identity && i % (D + 1) == 0 ? 1.0f : 0.0f);
            CHECK(ok, "%s: %s dense of block %d is not %s", cases[c].cfg, cases[c].step, l,
                  cases[c].identity ? "the identity" : "zero");
        }
        int64_t nt;
        const float *te = tensor(m, "timesformer.embeddings.time_embeddings", &nt);
        CHECK(te && check_max_abs(te, (long)nt) == 0, "%s: time embeddings not zero",
              cases[c].cfg);
        tubelet_model_free(m);
    }
    printf("  timesformer divided/axial/L+G: step attentions copied, dense 0 or identity\n");
}


/* ---- Video Swin from an image Swin (tests/fixtures/image_init_swin,
 * tools/make_swin_init_fixtures.py) ---- */

#define SW_C 48  /* width of the last stage */
#define SW_N 16  /* its 4 x 4 tokens of a 32 x 32 image */
#define SW_PX (3 * 32 * 32)

static char sfx[512];

static tubelet_model *swin_init(const char *video, const char *image, int mode, int keep_head,
                                char *err) {
    char dir[700], img[700];
    snprintf(dir, sizeof dir, "%s/%s", sfx, video);
    snprintf(img, sizeof img, "%s/%s", sfx, image);
    tubelet_image_init_params ip = tubelet_image_init_default_params();
    ip.tubelet_init = mode, ip.keep_head = keep_head, ip.seed = 3;
    tubelet_load_params lp = tubelet_load_default_params();
    lp.n_threads = 2;
    tubelet_model *m = NULL;
    if (tubelet_model_from_image(&m, dir, img, &ip, &lp, err, 1024)) return NULL;
    return m;
}

static double rel(const float *got, const float *want, long n) {
    const double s = check_max_abs(want, n);
    return check_max_abs_diff(got, want, n) / (s > 1e-30 ? s : 1e-30);
}

/* Each image repeated over T frames (3 clips): every temporal slice of the last hidden state,
 * the pooled features and (keep_head) the logits are the image model's. */
static void swin_repeated(const char *image, int mode, int keep_head, int T, const char *what) {
    char err[1024] = "";
    npy_array im = {0}, hid = {0}, pool = {0}, lg = {0};
    char p[700];
    tb_err e = {{0}};
    const char *files[4] = {"images.npy", "swin_hidden.npy", "swin_pooled.npy",
                            "swin_logits.npy"};
    npy_array *arr[4] = {&im, &hid, &pool, &lg};
    for (int i = 0; i < 4; i++) {
        snprintf(p, sizeof p, "%s/%s", sfx, files[i]);
        if (npy_read(p, arr[i], &e)) {
            CHECK(0, "cannot read %s: %s", p, e.msg);
            return;
        }
    }
    tubelet_model *m = swin_init("video", image, mode, keep_head, err);
    CHECK(m != NULL, "%s: init failed: %s", what, err);
    tubelet_state *s = NULL;
    if (m && tubelet_state_new(&s, m, 3, T, 32, 32, err, sizeof err)) CHECK(0, "state: %s", err);
    if (s) {
        int gt, gh, gw;
        tubelet_state_grid(s, &gt, &gh, &gw);
        CHECK(gh * gw == SW_N, "%s: last grid %dx%dx%d", what, gt, gh, gw);
        float *x = malloc(sizeof(float) * (size_t)(3 * T * SW_PX));
        float *h = malloc(sizeof(float) * (size_t)(3 * gt * SW_N * SW_C));
        float *hw = malloc(sizeof(float) * (size_t)(3 * gt * SW_N * SW_C));
        float pooled[3 * SW_C], logits[3 * 3];
        for (int b = 0; b < 3; b++)
            for (int t = 0; t < T; t++)
                memcpy(x + (b * T + t) * SW_PX, (const float *)im.data + b * SW_PX,
                       sizeof(float) * SW_PX);
        for (int b = 0; b < 3; b++) /* tokens (t, y, x): each slice t is the image's (y, x) */
            for (int t = 0; t < gt; t++)
                memcpy(hw + (b * gt + t) * SW_N * SW_C,
                       (const float *)hid.data + b * SW_N * SW_C, sizeof(float) * SW_N * SW_C);
        int rc = tubelet_forward(s, x, keep_head ? logits : NULL, h, err, sizeof err);
        CHECK(rc == 0, "%s: forward: %s", what, err);
        if (!rc) rc = tubelet_pool(s, h, TUBELET_POOL_MEAN, pooled);
        if (!rc) {
            const double eh = rel(h, hw, 3L * gt * SW_N * SW_C),
                         ep = rel(pooled, pool.data, 3 * SW_C),
                         el = keep_head ? rel(logits, lg.data, 9) : 0;
            CHECK(eh <= 1e-4 && ep <= 1e-4 && el <= 1e-4,
                  "%s: relative errors hidden %.3g, pooled %.3g, logits %.3g", what, eh, ep, el);
            printf("  %-60s hidden %.1e pooled %.1e%s", what, eh, ep, keep_head ? "" : "\n");
            if (keep_head) printf(" logits %.1e\n", el);
        }
        free(x), free(h), free(hw);
    }
    tubelet_state_free(s);
    tubelet_model_free(m);
    for (int i = 0; i < 4; i++) npy_free(arr[i]);
}

/* A directory holding config.json (text) and, from fixture `weights` (NULL: none),
 * model.safetensors. */
static int swin_tmp_dir(char *dir, const char *config, const char *weights) {
    char from[1100];
    strcpy(dir, "/tmp/tb_swin_init_XXXXXX");
    snprintf(from, sizeof from, "%s/%s", sfx, weights ? weights : "");
    return check_model_dir(dir, config, weights ? from : NULL);
}

/* The image config of the swin fixture with one field replaced (or added). */
static const char *swin_config(char *buf, size_t n, const char *field) {
    snprintf(buf, n, "{\"model_type\": \"swin\", \"image_size\": 32, \"patch_size\": 4, "
             "\"embed_dim\": 24, \"depths\": [2, 2], \"num_heads\": [2, 4], \"window_size\": 4, "
             "\"mlp_ratio\": 2.0, \"num_labels\": 3, %s}", field);
    return buf;
}

static void swin_expect_error(const char *what, const char *video_cfg, const char *image_cfg,
                              const char *image_weights, const char *needle) {
    char vdir[64] = "", idir[64] = "", err[1024] = "", cmd[200];
    if ((video_cfg && swin_tmp_dir(vdir, video_cfg, NULL)) ||
        swin_tmp_dir(idir, image_cfg, image_weights)) {
        CHECK(0, "%s: could not make a directory", what);
        return;
    }
    char vpath[700];
    if (!video_cfg) snprintf(vpath, sizeof vpath, "%s/video", sfx);
    tubelet_image_init_params ip = tubelet_image_init_default_params();
    tubelet_model *m = NULL;
    int rc = tubelet_model_from_image(&m, video_cfg ? vdir : vpath, idir, &ip, NULL, err,
                                      sizeof err);
    CHECK(rc != 0 && strstr(err, needle) && strstr(err, idir), "%s: status %d, message '%s'",
          what, rc, err);
    printf("  bad input (%s): %s\n", what, err);
    tubelet_model_free(m);
    snprintf(cmd, sizeof cmd, "rm -rf %s %s", vdir, idir);
    if (system(cmd)) printf("  (could not remove %s %s)\n", vdir, idir);
}

static void swin_bad_inputs(void) {
    char cfg[1024], vcfg[1024];
    /* a table of the wrong size: the image config claims window 3 ((2*3-1)^2 = 25 rows), the
     * tables have 49 */
    snprintf(vcfg, sizeof vcfg, "{\"model_type\": \"video_swin\", \"patch_size\": [2, 4, 4], "
             "\"embed_dim\": 24, \"depths\": [2, 2], \"num_heads\": [2, 4], \"window_size\": "
             "[2, 3, 3], \"mlp_ratio\": 2.0, \"num_frames\": 8, \"image_size\": 32}");
    char fixed[1024];
    snprintf(fixed, sizeof fixed, "%s", swin_config(cfg, sizeof cfg, "\"qkv_bias\": true"));
    char *w = strstr(fixed, "\"window_size\": 4");
    if (w) w[15] = '3';
    swin_expect_error("bias table of another window", vcfg, fixed, "swin",
                      "relative_position_bias_table' has 49 rows");
    /* image configs that do not fit the video model */
    snprintf(cfg, sizeof cfg, "{\"model_type\": \"swin\", \"image_size\": 32, \"embed_dim\": 32, "
             "\"depths\": [2, 2], \"num_heads\": [2, 4], \"window_size\": 4}");
    swin_expect_error("embed_dim", NULL, cfg, "swin", "embed_dim 32");
    snprintf(cfg, sizeof cfg, "{\"model_type\": \"swin\", \"image_size\": 32, \"embed_dim\": 24, "
             "\"depths\": [2, 4], \"num_heads\": [2, 4], \"window_size\": 4, "
             "\"mlp_ratio\": 2.0}");
    swin_expect_error("depths", NULL, cfg, "swin", "depths [2, 4]");
    snprintf(cfg, sizeof cfg, "{\"model_type\": \"swin\", \"image_size\": 32, \"embed_dim\": 24, "
             "\"depths\": [2, 2], \"num_heads\": [2, 4], \"window_size\": 7, "
             "\"mlp_ratio\": 2.0}");
    swin_expect_error("window", NULL, cfg, "swin", "window_size 7");
    snprintf(cfg, sizeof cfg, "{\"model_type\": \"swin\", \"image_size\": 16, \"embed_dim\": 24, "
             "\"depths\": [2, 2], \"num_heads\": [2, 4], \"window_size\": 4, "
             "\"mlp_ratio\": 2.0}");
    swin_expect_error("image smaller than a window", NULL, cfg, "swin", "smaller than window_size");
    swin_expect_error("activation", NULL, swin_config(cfg, sizeof cfg, "\"hidden_act\": \"relu\""),
                      "swin", "hidden_act");
    swin_expect_error("absolute positions", NULL,
                      swin_config(cfg, sizeof cfg, "\"use_absolute_embeddings\": true"), "swin",
                      "use_absolute_embeddings");
    /* an image ViT for Video Swin */
    swin_expect_error("ViT for Video Swin", NULL,
                      "{\"model_type\": \"vit\", \"hidden_size\": 16, \"image_size\": 12}", NULL,
                      "not an image Swin");
    /* an image Swin for a ViViT config */
    char vivit[700], err[1024] = "", img[700];
    snprintf(vivit, sizeof vivit, "%s/vivit_m1", fx);
    snprintf(img, sizeof img, "%s/swin", sfx);
    tubelet_model *m = NULL;
    int rc = tubelet_model_from_image(&m, vivit, img, NULL, NULL, err, sizeof err);
    CHECK(rc != 0 && strstr(err, "Video Swin only") && strstr(err, img), "swin for vivit: '%s'",
          err);
    printf("  bad input (image Swin for ViViT): %s\n", err);
    tubelet_model_free(m);
}

static void swin(void) {
    snprintf(sfx, sizeof sfx, "%s/image_init_swin", parity_fixtures_dir());
    /* 8 frames: 4 x 8 x 8 tokens, windows of 2 frames shifted by 1 in the odd blocks (stage 1:
     * 4 x 4 x 4, shifted in time only) */
    swin_repeated("swin", TUBELET_TUBELET_DEFAULT, 1, 8,
                  "video swin <- SwinForImageClassification, inflate, 8 frames");
    swin_repeated("swin", TUBELET_TUBELET_CENTRAL, 0, 8,
                  "video swin <- SwinForImageClassification, central, 8 frames");
    /* 2 frames: one temporal token, the window shrunk to it; transformers 5's names */
    swin_repeated("swin_new", TUBELET_TUBELET_INFLATE, 0, 2,
                  "video swin <- SwinModel (new names), inflate, 2 frames");
    swin_bad_inputs();
}

int main(int argc, char **argv) {
    check_cases(argc, argv);
    snprintf(fx, sizeof fx, "%s/image_init", parity_fixtures_dir());
    load("frames.npy", &frames), load("frames16.npy", &frames16);
    load("vit_hidden.npy", &vit_hidden), load("vit_hidden1.npy", &vit_hidden1);
    load("vit_hidden16.npy", &vit_hidden16), load("vit_nocls.npy", &vit_nocls);
    load("vit_clsbias_f1.npy", &bias_f1), load("vit_clsbias_mean.npy", &bias_mean);
    CASE(timesformer_divided());
    CASE(timesformer_space());
    CASE(vivit_m1());
    CASE(vivit_m3());
    CASE(vivit_m2_m4());
    CASE(timesformer_steps());
    CASE(swin());
    npy_free(&frames), npy_free(&frames16), npy_free(&vit_hidden), npy_free(&vit_hidden1);
    npy_free(&vit_hidden16), npy_free(&vit_nocls), npy_free(&bias_f1), npy_free(&bias_mean);
    return check_done();
}
