/* Shared by the tests that compare our outputs with stored PyTorch references. */
#ifndef TB_PARITY_H
#define TB_PARITY_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "io/npy.h"
#include "tubelet.h"
#include "tubelet_pretrain.h"
#include "tubelet_text.h"

/* tests/fixtures, or $TUBELET_FIXTURES. */
static inline const char *parity_fixtures_dir(void) {
    const char *d = getenv("TUBELET_FIXTURES");
    return d ? d : "tests/fixtures";
}

/* fixture/name.npy of the fixtures directory into a; a failure is a failed check. 1 if read. */
static inline int parity_fixture_npy(const char *fixture, const char *name, npy_array *a) {
    char path[1024];
    tb_err e = {{0}};
    snprintf(path, sizeof path, "%s/%s/%s", parity_fixtures_dir(), fixture, name);
    const int rc = npy_read(path, a, &e);
    CHECK(!rc, "%s: %s", path, e.msg);
    return !rc;
}

/* fn(name, arg) for each fixture named in the fixtures directory's list file `list` ("list.txt"):
 * one per line, blank lines and # comments skipped; each call is a case (check.h) named
 * fn(name). Returns how many are listed; a missing list is a failed check. */
#define parity_each_listed(list, fn, arg) parity_each_listed_(list, #fn, fn, arg)
static inline int parity_each_listed_(const char *list, const char *fn_name,
                                      void (*fn)(const char *name, void *arg), void *arg) {
    char path[1024], line[256];
    snprintf(path, sizeof path, "%s/%s", parity_fixtures_dir(), list);
    FILE *f = fopen(path, "r");
    CHECK(f != NULL, "cannot open %s", path);
    int n = 0;
    while (f && fgets(line, sizeof line, f)) {
        line[strcspn(line, "\r\n")] = 0;
        if (!line[0] || line[0] == '#') continue;
        if (check_select("%s(%s)", fn_name, line)) fn(line, arg);
        n++;
    }
    if (f) fclose(f);
    return n;
}

static inline int parity_same_shape(const tubelet_shape *s, const npy_array *a) {
    if (s->ndim != a->ndim) return 0;
    for (int i = 0; i < s->ndim; i++)
        if (s->dim[i] != a->shape[i]) return 0;
    return 1;
}

/* A tolerance relative to the reference: rel * max(1, max |reference|); *scale: max |reference|. */
static inline double parity_tolerance(double rel, const npy_array *want, double *scale) {
    *scale = check_max_abs(want->data, (long)want->numel);
    return rel * (*scale > 1 ? *scale : 1);
}

/* The project's forward tolerance: max abs error <= 1e-4 * max(1, max |reference|). */
static inline void parity_compare(const char *name, const char *what, int threads,
                                  const float *got, const npy_array *want) {
    double err = check_max_abs_diff(got, want->data, (long)want->numel);
    double scale;
    double tol = parity_tolerance(1e-4, want, &scale);
    CHECK(err <= tol, "%s %s (threads %d): max abs error %.3g > tolerance %.3g", name, what,
          threads, err, tol);
    printf("  %-24s %-7s threads %d: max abs err %.2e (max |ref| %.2f, tol %.1e)\n", name, what,
           threads, err, scale, tol);
}

/* The logits of m on a fixture's input x (batch, frames, channels, height, width), malloc'd (the
 * caller frees them), shaped as *ls says; NULL if the forward failed. */
static inline float *parity_logits(tubelet_model *m, const npy_array *x, tubelet_shape *ls) {
    char err[1024];
    tubelet_state *s = NULL;
    float *l = NULL;
    if (!tubelet_state_new(&s, m, (int)x->shape[0], (int)x->shape[1], (int)x->shape[3],
                           (int)x->shape[4], err, sizeof err)) {
        tubelet_state_logits_shape(s, ls);
        l = malloc(sizeof(float) * (size_t)tubelet_shape_numel(ls));
        if (l && tubelet_forward(s, x->data, l, NULL, err, sizeof err)) free(l), l = NULL;
    }
    tubelet_state_free(s);
    return l;
}

/* 1 if got's top-1 class is the reference's in every row (rows x n) whose reference's two best
 * classes lie more than twice err apart (closer ones may swap: vivit_m4_tubelet has one 0.005
 * apart); *close counts those rows. */
static inline int parity_same_top1(const float *got, const float *want, long rows, long n,
                                   double err, long *close) {
    int same = 1;
    *close = 0;
    for (long r = 0; r < rows; r++) {
        long a = 0, b = 0;
        for (long k = 1; k < n; k++) {
            if (got[r * n + k] > got[r * n + a]) a = k;
            if (want[r * n + k] > want[r * n + b]) b = k;
        }
        double second = -1e30;
        for (long k = 0; k < n; k++)
            if (k != b && want[r * n + k] > second) second = want[r * n + k];
        if (want[r * n + b] - second <= 2 * err) ++*close;
        else same &= a == b;
    }
    return same;
}

/* A reduced-precision forward (rows of the reference's first dimension): max abs error <= rel *
 * max(1, max |reference|) and the same top-1 class in every row not too close to call
 * (parity_same_top1); one line printed. Returns the error relative to max(1, max |reference|). */
static inline double parity_compare_lowp(const char *name, const char *what, double rel,
                                       const float *got, const npy_array *want) {
    double scale;
    const double tol = parity_tolerance(rel, want, &scale);
    const double err = check_max_abs_diff(got, want->data, (long)want->numel);
    const long rows = (long)want->shape[0], n = (long)(want->numel / want->shape[0]);
    long close = 0;
    const int same = parity_same_top1(got, want->data, rows, n, err, &close);
    CHECK(err <= tol, "%s %s: max abs error %.3g > tolerance %.3g", name, what, err, tol);
    CHECK(same, "%s %s: top-1 differs from the reference", name, what);
    printf("  %-24s %-7s           max abs err %.2e (max |ref| %.2f, tol %.1e), top-1 %s (%ld of "
           "%ld rows too close to call)\n", name, what, err, scale, tol, same ? "same" : "DIFFERS",
           close, rows);
    return err / (scale > 1 ? scale : 1);
}

/* ---- the families whose outputs are more than logits (test_video_swin, test_xclip,
 * test_pretrain and gpu_parity check them with these) ---- */

/* The fixtures of Video Swin and X-CLIP (NULL-terminated; the classifiers' are list.txt's,
 * pretraining's pretrain_list.txt's). */
static const char *const parity_swin_fixtures[] = {"video_swin_shift", "video_swin_pad", NULL};
static const char *const parity_xclip_fixtures[] = {"xclip/p16_f8", "xclip/p32_f3", NULL};

/* The Video Swin fixture `fixture` (tools/make_video_swin_fixtures.py) loaded with lp, on its
 * input x: logits.npy, hidden.npy (the final-normed tokens) and every stageN.npy (the stages'
 * outputs, tubelet_forward_features) within the forward tolerance, and a level beyond the stages
 * refused. label names the run in messages; lp->n_threads is printed. */
static inline void parity_swin(const char *fixture, const char *label, const npy_array *x,
                               const tubelet_load_params *lp) {
    char dir[1024], err[1024];
    const int threads = lp->n_threads;
    snprintf(dir, sizeof dir, "%s/%s", parity_fixtures_dir(), fixture);
    tubelet_model *m = NULL;
    tubelet_state *s = NULL;
    npy_array lg = {0}, hid = {0};
    int rc = tubelet_model_load(&m, dir, lp, err, sizeof err);
    if (!rc) rc = tubelet_state_new(&s, m, (int)x->shape[0], (int)x->shape[1], (int)x->shape[3],
                                    (int)x->shape[4], err, sizeof err);
    CHECK(rc == 0, "%s: %s", label, err);
    if (rc || !parity_fixture_npy(fixture, "logits.npy", &lg) ||
        !parity_fixture_npy(fixture, "hidden.npy", &hid))
        goto done;
    tubelet_shape ls, hs;
    tubelet_state_logits_shape(s, &ls);
    tubelet_state_hidden_shape(s, &hs);
    CHECK(parity_same_shape(&ls, &lg) && parity_same_shape(&hs, &hid), "%s: output shapes", label);
    float *logits = malloc(sizeof(float) * (size_t)lg.numel);
    float *hidden = malloc(sizeof(float) * (size_t)hid.numel);
    rc = tubelet_forward(s, x->data, logits, hidden, err, sizeof err);
    CHECK(rc == 0, "%s: %s", label, err);
    if (!rc) {
        parity_compare(label, "logits", threads, logits, &lg);
        parity_compare(label, "hidden", threads, hidden, &hid);
    }
    /* every stage's output: the feature levels */
    float *lv[4] = {0};
    npy_array st[4] = {{0}};
    int n_levels = 0;
    for (; n_levels < 4; n_levels++) {
        char f[32], path[1200];
        snprintf(f, sizeof f, "stage%d.npy", n_levels);
        snprintf(path, sizeof path, "%s/%s", dir, f);
        if (access(path, R_OK) || !parity_fixture_npy(fixture, f, &st[n_levels])) break;
        tubelet_shape sh;
        CHECK(tubelet_state_level_shape(s, n_levels, &sh) == 0 &&
                  parity_same_shape(&sh, &st[n_levels]),
              "%s: stage %d shape", label, n_levels);
        lv[n_levels] = malloc(sizeof(float) * (size_t)st[n_levels].numel);
    }
    rc = tubelet_forward_features(s, x->data, n_levels, NULL, lv, err, sizeof err);
    CHECK(rc == 0, "%s: levels: %s", label, err);
    for (int i = 0; !rc && i < n_levels; i++) {
        char what[24];
        snprintf(what, sizeof what, "stage%d", i);
        parity_compare(label, what, threads, lv[i], &st[i]);
    }
    tubelet_shape bad;
    CHECK(tubelet_state_level_shape(s, n_levels, &bad) == TUBELET_ERR_ARG,
          "%s: level %d beyond the stages", label, n_levels);
    CHECK(tubelet_forward_features(s, x->data, n_levels + 1, NULL, lv, err, sizeof err) ==
              TUBELET_ERR_ARG && strstr(err, "stages"), "%s: too many levels: %s", label, err);
    for (int i = 0; i < n_levels; i++) free(lv[i]), npy_free(&st[i]);
    free(logits), free(hidden);
done:
    npy_free(&lg), npy_free(&hid);
    tubelet_state_free(s);
    tubelet_model_free(m);
}

/* An X-CLIP fixture (tools/make_xclip_fixtures.py) and what a run made of it. */
typedef struct {
    npy_array x, ids, lg, te, ve; /* clips, token ids; logits_per_video, text and video embeds */
    int P, n, B, C;               /* projection width, texts, clips, context */
    float *text;                  /* (n, P) the texts' embeddings (tubelet_encode_text) */
    float *logits;                /* (B, n) tubelet_forward_text's */
    tubelet_state *s;             /* the run's state, for further checks */
} parity_xclip;

static inline void parity_xclip_free(parity_xclip *r) {
    tubelet_state_free(r->s);
    free(r->text), free(r->logits);
    npy_free(&r->x), npy_free(&r->ids), npy_free(&r->lg), npy_free(&r->te), npy_free(&r->ve);
    memset(r, 0, sizeof *r);
}

/* X-CLIP fixture `fixture` on model m: its texts encoded, then tubelet_forward_text's logits per
 * video, video and text embeddings, tubelet_encode_video's features (video_features.npy) and
 * tubelet_forward's pooled frames (vision_pooled.npy), each within the forward tolerance of
 * transformers'. label names the run in messages; threads is printed. 1 if the forward ran (r
 * then holds its texts, logits and state); parity_xclip_free releases r either way. */
static inline int parity_xclip_run(parity_xclip *r, const char *fixture, const char *label,
                                   tubelet_model *m, int threads) {
    char err[1024];
    memset(r, 0, sizeof *r);
    if (!parity_fixture_npy(fixture, "x.npy", &r->x) ||
        !parity_fixture_npy(fixture, "ids.npy", &r->ids) ||
        !parity_fixture_npy(fixture, "logits_per_video.npy", &r->lg) ||
        !parity_fixture_npy(fixture, "text_embeds.npy", &r->te) ||
        !parity_fixture_npy(fixture, "video_embeds.npy", &r->ve))
        return 0;
    int rc = tubelet_text_dims(m, &r->P, NULL);
    CHECK(!rc && r->P == (int)r->ve.shape[1], "%s: dims %d", label, r->P);
    if (rc) return 0;
    r->n = (int)r->ids.shape[0], r->B = (int)r->x.shape[0], r->C = (int)r->ids.shape[1];
    const int P = r->P, n = r->n, B = r->B;
    r->text = malloc(sizeof(float) * (size_t)(n * P));
    r->logits = malloc(sizeof(float) * (size_t)(B * n));
    float *video = malloc(sizeof(float) * (size_t)(B * P)),
          *tout = malloc(sizeof(float) * (size_t)(B * n * P));
    rc = tubelet_encode_text(m, r->ids.data, n, r->C, r->text, err, sizeof err);
    CHECK(!rc, "%s: encode: %s", label, err);
    if (!rc) rc = tubelet_state_new(&r->s, m, B, (int)r->x.shape[1], (int)r->x.shape[3],
                                    (int)r->x.shape[4], err, sizeof err);
    CHECK(!rc, "%s: %s", label, err);
    if (!rc) {
        rc = tubelet_forward_text(r->s, r->x.data, r->text, n, r->logits, video, tout, err,
                                  sizeof err);
        CHECK(!rc, "%s: forward: %s", label, err);
    }
    if (!rc) {
        parity_compare(label, "logits", threads, r->logits, &r->lg);
        parity_compare(label, "video", threads, video, &r->ve);
        parity_compare(label, "text", threads, tout, &r->te);
        /* tubelet_encode_video: get_video_features */
        npy_array vf = {0};
        if (parity_fixture_npy(fixture, "video_features.npy", &vf)) {
            float *feat = malloc(sizeof(float) * vf.numel);
            const int ok = vf.numel == (size_t)(B * P) &&
                           !tubelet_encode_video(r->s, r->x.data, feat, err, sizeof err);
            CHECK(ok, "%s: %s", label, err);
            if (ok) parity_compare(label, "video_features", threads, feat, &vf);
            free(feat);
        }
        npy_free(&vf);
        /* tubelet_forward: the vision tower's pooled output per frame */
        npy_array vp = {0};
        tubelet_shape ls;
        tubelet_state_logits_shape(r->s, &ls);
        float *pooled = malloc(sizeof(float) * (size_t)tubelet_shape_numel(&ls));
        if (parity_fixture_npy(fixture, "vision_pooled.npy", &vp)) {
            const int same = parity_same_shape(&ls, &vp);
            const int frc = tubelet_forward(r->s, r->x.data, pooled, NULL, err, sizeof err);
            CHECK(same && !frc, "%s: pooled shape %d, forward: %s", label, same, err);
            if (same && !frc) parity_compare(label, "pooled", threads, pooled, &vp);
        }
        free(pooled), npy_free(&vp);
    }
    free(video), free(tout);
    return !rc;
}

/* The masked tokens per clip of a pretraining fixture's mask.npy (bool, (clips, tokens)): clip 0's
 * count. */
static inline int parity_pretrain_masked(const npy_array *mask) {
    const uint8_t *mk = mask->data;
    int n = 0;
    for (int64_t i = 0; i < mask->shape[1]; i++) n += mk[i];
    return n;
}

/* One step of pretraining state p (backward: with the gradients) on a fixture's input x and mask
 * (tools/make_pretrain_fixtures.py): the loss within 1e-4 relative of loss_ref, the decoder's
 * reconstruction (logits) within the forward tolerance of logits_ref. label names the run in
 * messages; threads is printed. The loss through *loss; 1 if the step ran. */
static inline int parity_pretrain_step(tubelet_pretrain *p, const char *label, int threads,
                                       const npy_array *x, const npy_array *mask,
                                       const npy_array *loss_ref, const npy_array *logits_ref,
                                       int backward, float *loss) {
    char err[1024] = "";
    tubelet_shape ls;
    tubelet_pretrain_logits_shape(p, &ls);
    const int same = parity_same_shape(&ls, logits_ref);
    CHECK(same, "%s: logits shape", label);
    if (!same) return 0;
    float *logits = malloc(sizeof(float) * logits_ref->numel);
    const int rc = tubelet_pretrain_step(p, x->data, mask->data, backward, loss, logits, err,
                                         sizeof err);
    CHECK(rc == 0, "%s: %s", label, err);
    if (!rc) {
        const double lref = *(const float *)loss_ref->data;
        CHECK(fabs(*loss - lref) <= 1e-4 * fabs(lref), "%s: loss %.7f, reference %.7f", label,
              *loss, lref);
        printf("  %-24s loss    threads %d: %.7f, reference %.7f (relative error %.2e, tol "
               "1e-4)\n", label, threads, *loss, lref, fabs(*loss - lref) / fabs(lref));
        parity_compare(label, "logits", threads, logits, logits_ref);
    }
    free(logits);
    return !rc;
}

#endif
