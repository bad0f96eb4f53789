/* Static int8 (docs/precision.md, "Static int8"): calibration sessions record the input range of
 * every packed linear layer of an fp32 model through the products' observer (kernels/linear.h)
 * and write int8_scales.json (io/int8_scales.c), which int8_static.c reads at load. */
#include "int8_static.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "state.h"

/* ---- calibration ---- */

typedef struct {
    double lo, hi;         /* over the batches: the extremes (percentile 100), else the sums */
    int64_t n;
    float b_lo, b_hi;      /* of the batch running now */
    int seen;
} layer_stat;

struct tubelet_calib {
    tubelet_model *m;
    double percentile;
    tb_layer_list layers;
    layer_stat *st;
    int64_t batches;
    float *copy;           /* percentiles: the values of one call, reordered */
    int64_t copy_cap;
    int failed;            /* in this batch: 1 out of memory, 2 non-finite input */
    int bad_layer;
};

/* min and max of x[0..n); 0 if some value is not finite. */
static int min_max(const float *x, int64_t n, float *lo, float *hi) {
    float l = x[0], h = x[0];
    int bad = 0;
#pragma omp parallel for reduction(min : l) reduction(max : h) reduction(| : bad) \
    schedule(static) if (n > (1 << 15))
    for (int64_t i = 0; i < n; i++) {
        l = x[i] < l ? x[i] : l, h = x[i] > h ? x[i] : h;
        bad |= !isfinite(x[i]);
    }
    *lo = l, *hi = h;
    return !bad;
}

/* Reorders a[0..n) so that a[k] holds the value of rank k, the smaller ones before it and the
 * larger ones after (quickselect, median-of-three pivots). */
static void select_kth(float *a, int64_t n, int64_t k) {
    int64_t l = 0, r = n - 1;
    while (r > l) {
        float x = a[l], y = a[l + (r - l) / 2], z = a[r];
        float p = x < y ? (y < z ? y : x < z ? z : x) : (x < z ? x : y < z ? z : y);
        int64_t i = l, j = r;
        while (i <= j) {
            while (a[i] < p) i++;
            while (a[j] > p) j--;
            if (i <= j) {
                float t = a[i];
                a[i++] = a[j], a[j--] = t;
            }
        }
        if (k <= j) r = j;
        else if (k >= i) l = i;
        else return;
    }
}

/* The q-quantile of a[0..n) as numpy.quantile's default: linear between the values of ranks
 * floor(q (n - 1)) and the next. a is reordered. */
static float quantile(float *a, int64_t n, double q) {
    const double pos = q * (double)(n - 1);
    const int64_t k = (int64_t)floor(pos);
    select_kth(a, n, k);
    if (k + 1 >= n || pos == (double)k) return a[k];
    float next = a[k + 1];
    for (int64_t i = k + 2; i < n; i++) next = a[i] < next ? a[i] : next;
    return (float)(a[k] + (pos - (double)k) * ((double)next - a[k]));
}

/* The products' observer: one call of layer `layer` on x[0..n). */
static void observe(void *user, int layer, const float *x, int64_t n) {
    tubelet_calib *c = user;
    if (c->failed || layer < 0 || layer >= c->layers.sm.n || n <= 0) return;
    float lo, hi;
    if (!min_max(x, n, &lo, &hi)) {
        c->failed = 2, c->bad_layer = layer;
        return;
    }
    if (c->percentile < 100) {
        if (n > c->copy_cap) {
            free(c->copy);
            c->copy_cap = (c->copy = malloc(sizeof(float) * (size_t)n)) ? n : 0;
            if (!c->copy) {
                c->failed = 1;
                return;
            }
        }
        memcpy(c->copy, x, sizeof(float) * (size_t)n);
        hi = quantile(c->copy, n, c->percentile / 100);
        lo = quantile(c->copy, n, 1 - c->percentile / 100);
    }
    layer_stat *s = &c->st[layer];
    s->b_lo = s->seen && s->b_lo < lo ? s->b_lo : lo; /* a layer run twice in a batch */
    s->b_hi = s->seen && s->b_hi > hi ? s->b_hi : hi;
    s->seen = 1;
}

int tubelet_calib_new(tubelet_calib **out, tubelet_model *m, double percentile, char *err,
                      size_t errlen) {
    tb_err e = {{0}};
    *out = NULL;
    if (!m->packed || m->precision != TB_PREC_FP32 || m->describe)
        return tb_err_out(tb_fail(&e, TUBELET_ERR_ARG, "%s: calibration runs the fp32 model with "
                                  "its linear layers packed (load it with precision fp32 and "
                                  "inference = 1)", m->source), &e, err, errlen);
    if (!(percentile >= 50 && percentile <= 100))
        return tb_err_out(tb_fail(&e, TUBELET_ERR_ARG, "calibration percentile %g is not in "
                                  "[50, 100]", percentile), &e, err, errlen);
    tubelet_calib *c = calloc(1, sizeof *c);
    if (!c) return tb_err_out(tb_fail(&e, TUBELET_ERR_MEMORY, "out of memory"), &e, err, errlen);
    c->m = m, c->percentile = percentile;
    int rc = tb_layer_list_of(m, &c->layers, &e);
    if (!rc && !(c->st = calloc((size_t)c->layers.sm.n + 1, sizeof *c->st)))
        rc = tb_fail(&e, TUBELET_ERR_MEMORY, "out of memory");
    if (rc) {
        tubelet_calib_free(c);
        return tb_err_out(rc, &e, err, errlen);
    }
    *out = c;
    return TUBELET_OK;
}

void tubelet_calib_free(tubelet_calib *c) {
    if (!c) return;
    tb_layer_list_free(&c->layers);
    free(c->st), free(c->copy), free(c);
}

int tubelet_calib_observe(tubelet_calib *c, tubelet_state *s, const float *pixels, char *err,
                          size_t errlen) {
    tb_err e = {{0}};
    if (s->m != c->m || !s->lowp)
        return tb_err_out(tb_fail(&e, TUBELET_ERR_ARG, "calibration: the state was made for "
                                  "another model"), &e, err, errlen);
    tubelet_shape ls;
    tubelet_state_logits_shape(s, &ls);
    float *logits = malloc(sizeof(float) * (size_t)tubelet_shape_numel(&ls));
    if (!logits) return tb_err_out(tb_fail(&e, TUBELET_ERR_MEMORY, "out of memory"), &e, err, errlen);
    for (int i = 0; i < c->layers.sm.n; i++) c->st[i].seen = 0;
    c->failed = 0;
    TB_RUN(&s->be, ctx_observe, s->lowp, observe, c);
    int rc = tubelet_forward(s, pixels, logits, NULL, err, errlen); /* the head runs too */
    TB_RUN(&s->be, ctx_observe, s->lowp, NULL, NULL);
    free(logits);
    if (rc) return rc;
    if (c->failed == 1) rc = tb_fail(&e, TUBELET_ERR_MEMORY, "calibration: out of memory");
    if (c->failed == 2)
        rc = tb_fail(&e, TUBELET_ERR_VALUE, "%s: the input of layer '%s' holds inf or NaN on "
                     "this batch: it cannot calibrate int8 scales", c->m->source,
                     c->layers.name[c->bad_layer]);
    if (rc) return tb_err_out(rc, &e, err, errlen);
    for (int i = 0; i < c->layers.sm.n; i++) {
        layer_stat *st = &c->st[i];
        if (!st->seen) continue;
        if (c->percentile < 100) st->lo += st->b_lo, st->hi += st->b_hi;
        else if (!st->n) st->lo = st->b_lo, st->hi = st->b_hi;
        else st->lo = fmin(st->lo, st->b_lo), st->hi = fmax(st->hi, st->b_hi);
        st->n++;
    }
    c->batches++;
    return TUBELET_OK;
}

int tubelet_calib_n_layers(const tubelet_calib *c) { return c->layers.sm.n; }

const char *tubelet_calib_layer(const tubelet_calib *c, int i, float *lo, float *hi,
                                float *scale, int *zero_point) {
    if (i < 0 || i >= c->layers.sm.n) return NULL;
    const layer_stat *st = &c->st[i];
    float l = 0, h = 0, s = 0;
    int32_t z = 0;
    if (st->n) {
        const double n = c->percentile < 100 ? (double)st->n : 1; /* a mean, or the extremes */
        l = (float)(st->lo / n), h = (float)(st->hi / n);
        l = l < 0 ? l : 0, h = h > 0 ? h : 0;
        TB_RUN(&c->m->be, act_quant_params, l, h, &s, &z);
    }
    *lo = l, *hi = h, *scale = s, *zero_point = z;
    return c->layers.name[i];
}

int tubelet_calib_write(const tubelet_calib *c, const char *dir, char *err, size_t errlen) {
    tb_err e = {{0}};
    const int n = c->layers.sm.n;
    if (!c->batches)
        return tb_err_out(tb_fail(&e, TUBELET_ERR_ARG, "calibration: no batch observed"), &e,
                          err, errlen);
    struct stat st;
    if (stat(dir, &st) != 0)
        return tb_err_out(tb_fail(&e, TUBELET_ERR_IO, "%s: %s", dir, strerror(errno)), &e, err,
                          errlen);
    if (!S_ISDIR(st.st_mode))
        return tb_err_out(tb_fail(&e, TUBELET_ERR_IO, "%s: not a directory", dir), &e, err,
                          errlen);
    tb_act_quant *q = calloc((size_t)n + 1, sizeof *q);
    if (!q) return tb_err_out(tb_fail(&e, TUBELET_ERR_MEMORY, "out of memory"), &e, err, errlen);
    int rc = TUBELET_OK;
    for (int i = 0; i < n && !rc; i++) {
        float lo, hi;
        int z;
        tubelet_calib_layer(c, i, &lo, &hi, &q[i].scale, &z);
        q[i].zero_point = z;
        if (!c->st[i].n)
            rc = tb_fail(&e, TUBELET_ERR_ARG, "calibration: layer '%s' never ran",
                         c->layers.name[i]);
    }
    char path[1200];
    snprintf(path, sizeof path, "%s/%s", dir, TB_SCALES_FILE);
    const tb_scales_meta meta = {c->percentile, c->batches};
    char *text = rc ? NULL : tb_scales_to_json(&c->layers.sm, q, &meta);
    if (!rc && !text) rc = tb_fail(&e, TUBELET_ERR_MEMORY, "%s: out of memory", path);
    tb_atomic_file f;
    if (!rc && !(rc = tb_atomic_open(&f, path, &e))) {
        tb_atomic_put(&f, text, strlen(text));
        tb_atomic_put(&f, "\n", 1);
        rc = tb_atomic_commit(&f, &e);
    }
    free(text), free(q);
    return tb_err_out(rc, &e, err, errlen);
}
