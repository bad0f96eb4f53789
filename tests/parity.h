/* Shared by the tests that compare our outputs with stored PyTorch references. */
#ifndef TB_PARITY_H
#define TB_PARITY_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "io/npy.h"
#include "tubelet.h"

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
 * one per line, blank lines and # comments skipped. Returns how many; a missing list is a failed
 * check. */
static inline int parity_each_listed(const char *list, void (*fn)(const char *name, void *arg),
                                     void *arg) {
    char path[1024], line[256];
    snprintf(path, sizeof path, "%s/%s", parity_fixtures_dir(), list);
    FILE *f = fopen(path, "r");
    CHECK(f != NULL, "cannot open %s", path);
    int n = 0;
    while (f && fgets(line, sizeof line, f)) {
        line[strcspn(line, "\r\n")] = 0;
        if (line[0] && line[0] != '#') fn(line, arg), n++;
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

#endif
