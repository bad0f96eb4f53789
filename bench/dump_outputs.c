/* Raw outputs of every test fixture, for bit-identity checks across refactorings: for each
 * fixture of tests/fixtures/list.txt the logits, last hidden state, hidden_states[1], feature
 * maps and pooled vectors, also with the weights packed for inference in fp32, bf16 and int8;
 * for each fixture of grad_list.txt the loss, logits and every gradient of a training step
 * (plain, checkpointed, and with dropout, drop path and label smoothing on); the same for the
 * Video Swin fixtures; for each fixture of pretrain_list.txt the masked-pretraining loss, logits
 * and every gradient (plain and checkpointed). One file per
 * output under OUTDIR; compare two runs with `cmp` (bench/dump_compare.sh does).
 *
 *   make && gcc -O2 -march=native -fopenmp -std=c11 -D_GNU_SOURCE -Iinclude -Isrc \
 *       bench/dump_outputs.c build/libtubelet.a -ldnnl -lcjson \
 *       $(pkg-config --libs libavformat libavcodec libswscale libavutil) -lm -o build/dump_outputs
 *   build/dump_outputs OUTDIR [FIXTURES_DIR] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "io/npy.h"
#include "tubelet.h"
#include "tubelet_pretrain.h"

static const char *out_dir, *fx_dir;
static int n_written, n_failed;

static void dump(const char *fixture, const char *what, const void *data, size_t bytes) {
    char path[2048];
    snprintf(path, sizeof path, "%s/%s.%s.bin", out_dir, fixture, what);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, bytes, f) != bytes) {
        fprintf(stderr, "cannot write %s\n", path);
        n_failed++;
    } else {
        n_written++;
    }
    if (f) fclose(f);
}

/* A failing call is an output too: its status goes into the file. */
static void dump_rc(const char *fixture, const char *what, int rc) {
    dump(fixture, what, &rc, sizeof rc);
}

static int load_input(const char *fixture, const char *name, npy_array *a) {
    char path[2048];
    tb_err e = {{0}};
    snprintf(path, sizeof path, "%s/%s/%s", fx_dir, fixture, name);
    if (npy_read(path, a, &e)) {
        fprintf(stderr, "%s: %s\n", path, e.msg);
        n_failed++;
        return 0;
    }
    return 1;
}

static void forward_outputs(const char *fixture, const char *tag, const tubelet_load_params *lp,
                            const npy_array *x, int features) {
    char dir[2048], err[1024], what[128];
    snprintf(dir, sizeof dir, "%s/%s", fx_dir, fixture);
    tubelet_model *m = NULL;
    tubelet_state *s = NULL;
    int rc = tubelet_model_load(&m, dir, lp, err, sizeof err);
    if (!rc) rc = tubelet_state_new(&s, m, (int)x->shape[0], (int)x->shape[1], (int)x->shape[3],
                                    (int)x->shape[4], err, sizeof err);
    snprintf(what, sizeof what, "%s.setup_rc", tag);
    dump_rc(fixture, what, rc);
    if (rc) {
        fprintf(stderr, "%s %s: %s\n", fixture, tag, err);
        goto done;
    }
    tubelet_shape ls, hs, fs;
    tubelet_state_logits_shape(s, &ls), tubelet_state_hidden_shape(s, &hs);
    tubelet_state_feature_shape(s, &fs);
    const size_t nl = (size_t)tubelet_shape_numel(&ls), nh = (size_t)tubelet_shape_numel(&hs),
                 nf = (size_t)tubelet_shape_numel(&fs);
    float *l = calloc(nl, 4), *h = calloc(nh, 4), *f[3];
    float *pool = calloc((size_t)(fs.dim[0] * fs.dim[1]), 4);
    for (int i = 0; i < 3; i++) f[i] = calloc(nf, 4);
    rc = tubelet_forward(s, x->data, l, h, err, sizeof err);
    snprintf(what, sizeof what, "%s.forward_rc", tag), dump_rc(fixture, what, rc);
    snprintf(what, sizeof what, "%s.logits", tag), dump(fixture, what, l, nl * 4);
    snprintf(what, sizeof what, "%s.hidden", tag), dump(fixture, what, h, nh * 4);
    if (features) {
        /* the cls mode reads the row before the first patch: only for models with a cls token */
        for (int mode = tubelet_state_has_cls(s) ? 0 : 1; mode < 2; mode++) {
            tubelet_pool(s, h, mode, pool);
            snprintf(what, sizeof what, "%s.pool%d", tag, mode);
            dump(fixture, what, pool, (size_t)(fs.dim[0] * fs.dim[1]) * 4);
        }
        rc = tubelet_forward_hidden(s, x->data, 1, h, err, sizeof err);
        snprintf(what, sizeof what, "%s.layer1_rc", tag), dump_rc(fixture, what, rc);
        snprintf(what, sizeof what, "%s.layer1", tag), dump(fixture, what, h, nh * 4);
        const int layers[3] = {0, 1, -1};
        rc = tubelet_forward_features(s, x->data, 3, layers, f, err, sizeof err);
        snprintf(what, sizeof what, "%s.features_rc", tag), dump_rc(fixture, what, rc);
        for (int i = 0; i < 3 && !rc; i++) {
            snprintf(what, sizeof what, "%s.features%d", tag, i);
            dump(fixture, what, f[i], nf * 4);
        }
    }
    free(l), free(h), free(pool);
    for (int i = 0; i < 3; i++) free(f[i]);
done:
    tubelet_state_free(s);
    tubelet_model_free(m);
}

static void forward_fixture(const char *fixture) {
    npy_array x = {0};
    if (!load_input(fixture, "input.npy", &x)) return;
    tubelet_load_params lp = tubelet_load_default_params();
    lp.n_threads = 2;
    forward_outputs(fixture, "fp32", &lp, &x, 1);
    lp.inference = 1;
    forward_outputs(fixture, "packed", &lp, &x, 0);
    lp.precision = TUBELET_PRECISION_BF16;
    forward_outputs(fixture, "bf16", &lp, &x, 0);
    lp.precision = TUBELET_PRECISION_INT8;
    forward_outputs(fixture, "int8", &lp, &x, 0);
    npy_free(&x);
}

/* Every parameter's gradient, one file each: TAG.g.NAME. */
static void dump_grads(const char *fixture, const char *tag, const tubelet_model *m,
                       const tubelet_grads *gr) {
    char what[512];
    for (int i = 0; i < tubelet_model_n_tensors(m); i++) {
        tubelet_shape sh;
        const char *name = tubelet_model_tensor(m, i, &sh, NULL);
        snprintf(what, sizeof what, "%s.g.%s", tag, name);
        dump(fixture, what, tubelet_grads_at(gr, i), (size_t)tubelet_shape_numel(&sh) * 4);
    }
}

/* One training step: loss, logits and every gradient. mode 0 plain, 1 checkpointed, 2 with
 * dropout, drop path and label smoothing. */
static void grad_step(const char *fixture, int mode, const npy_array *x, const npy_array *y) {
    char dir[2048], err[1024], what[128];
    snprintf(dir, sizeof dir, "%s/%s", fx_dir, fixture);
    tubelet_model *m = NULL;
    tubelet_state *s = NULL;
    tubelet_grads *gr = NULL;
    tubelet_load_params lp = tubelet_load_default_params();
    lp.n_threads = 2;
    int rc = tubelet_model_load(&m, dir, &lp, err, sizeof err);
    if (!rc) rc = tubelet_grads_new(&gr, m, err, sizeof err);
    if (!rc) rc = tubelet_state_new(&s, m, (int)x->shape[0], (int)x->shape[1], (int)x->shape[3],
                                    (int)x->shape[4], err, sizeof err);
    if (!rc) rc = tubelet_state_enable_training(s, mode == 1, gr, err, sizeof err);
    snprintf(what, sizeof what, "train%d.setup_rc", mode), dump_rc(fixture, what, rc);
    if (rc) {
        fprintf(stderr, "%s train%d: %s\n", fixture, mode, err);
        goto done;
    }
    if (mode == 2) {
        tubelet_state_set_dropout(s, 0.2f, 0.1f, 11, 3);
        tubelet_state_set_drop_path(s, 0.3f, 5, 2);
        tubelet_state_set_label_smoothing(s, 0.1f);
    }
    tubelet_shape ls;
    tubelet_state_logits_shape(s, &ls);
    const size_t nl = (size_t)tubelet_shape_numel(&ls);
    float loss = 0, *l = calloc(nl, 4);
    rc = tubelet_forward_backward(s, x->data, y->data, &loss, l, err, sizeof err);
    snprintf(what, sizeof what, "train%d.rc", mode), dump_rc(fixture, what, rc);
    snprintf(what, sizeof what, "train%d.loss", mode), dump(fixture, what, &loss, 4);
    snprintf(what, sizeof what, "train%d.logits", mode), dump(fixture, what, l, nl * 4);
    snprintf(what, sizeof what, "train%d", mode), dump_grads(fixture, what, m, gr);
    free(l);
done:
    tubelet_state_free(s);
    tubelet_grads_free(gr);
    tubelet_model_free(m);
}

static void grad_fixture(const char *fixture) {
    npy_array x = {0}, y = {0};
    if (load_input(fixture, "input.npy", &x) && load_input(fixture, "labels.npy", &y))
        for (int mode = 0; mode < 3; mode++) grad_step(fixture, mode, &x, &y);
    npy_free(&x), npy_free(&y);
}

/* VideoMAEForPreTraining on the fixture's mask: loss, logits and every gradient; checkpoint 0/1. */
static void pretrain_step(const char *fixture, int checkpoint, const npy_array *x,
                          const npy_array *mask) {
    char dir[2048], err[1024], what[128];
    snprintf(dir, sizeof dir, "%s/%s", fx_dir, fixture);
    tubelet_model *m = NULL;
    tubelet_grads *gr = NULL;
    tubelet_pretrain *p = NULL;
    tubelet_load_params lp = tubelet_load_default_params();
    lp.n_threads = 2;
    const int64_t B = x->shape[0], n = (int64_t)mask->numel;
    uint8_t *mk = malloc((size_t)n);
    int n_masked = 0;
    for (int64_t i = 0; i < n; i++) { /* bool or uint8 as the fixtures store it; else int64 */
        mk[i] = mask->dtype == NPY_BOOL || mask->dtype == NPY_U8 ? ((const uint8_t *)mask->data)[i] != 0
                                                                 : ((const int64_t *)mask->data)[i] != 0;
        if (i < n / B) n_masked += mk[i];
    }
    int rc = tubelet_model_load(&m, dir, &lp, err, sizeof err);
    if (!rc) rc = tubelet_grads_new(&gr, m, err, sizeof err);
    if (!rc) rc = tubelet_pretrain_new(&p, m, (int)B, (int)x->shape[1], (int)x->shape[2],
                                       (int)x->shape[3], (int)x->shape[4], n_masked, gr, checkpoint,
                                       err, sizeof err);
    snprintf(what, sizeof what, "pretrain%d.setup_rc", checkpoint), dump_rc(fixture, what, rc);
    if (rc) {
        fprintf(stderr, "%s pretrain%d: %s\n", fixture, checkpoint, err);
        goto done;
    }
    tubelet_shape ls;
    tubelet_pretrain_logits_shape(p, &ls);
    const size_t nl = (size_t)tubelet_shape_numel(&ls);
    float loss = 0, *l = calloc(nl, 4);
    rc = tubelet_pretrain_step(p, x->data, mk, 1, &loss, l, err, sizeof err);
    snprintf(what, sizeof what, "pretrain%d.rc", checkpoint), dump_rc(fixture, what, rc);
    snprintf(what, sizeof what, "pretrain%d.loss", checkpoint), dump(fixture, what, &loss, 4);
    snprintf(what, sizeof what, "pretrain%d.logits", checkpoint), dump(fixture, what, l, nl * 4);
    snprintf(what, sizeof what, "pretrain%d", checkpoint), dump_grads(fixture, what, m, gr);
    free(l);
done:
    free(mk);
    tubelet_pretrain_free(p);
    tubelet_grads_free(gr);
    tubelet_model_free(m);
}

static void pretrain_fixture(const char *fixture) {
    npy_array x = {0}, mask = {0};
    if (load_input(fixture, "input.npy", &x) && load_input(fixture, "mask.npy", &mask))
        for (int checkpoint = 0; checkpoint < 2; checkpoint++)
            pretrain_step(fixture, checkpoint, &x, &mask);
    npy_free(&x), npy_free(&mask);
}

static void each_line(const char *list, void (*fn)(const char *)) {
    char path[2048], line[256];
    snprintf(path, sizeof path, "%s/%s", fx_dir, list);
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "cannot open %s\n", path);
        n_failed++;
        return;
    }
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\r\n")] = 0;
        if (line[0] && line[0] != '#') fn(line);
    }
    fclose(f);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s OUTDIR [FIXTURES_DIR]\n", argv[0]);
        return 2;
    }
    out_dir = argv[1];
    fx_dir = argc > 2 ? argv[2] : "tests/fixtures";
    mkdir(out_dir, 0755);
    each_line("list.txt", forward_fixture);
    each_line("grad_list.txt", grad_fixture);
    const char *swin[] = {"video_swin_pad", "video_swin_shift"};
    for (int i = 0; i < 2; i++) forward_fixture(swin[i]), grad_fixture(swin[i]);
    each_line("pretrain_list.txt", pretrain_fixture);
    printf("%d outputs written to %s, %d failures\n", n_written, out_dir, n_failed);
    return n_failed != 0;
}
