#include "optim.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../io/safetensors.h"
#include "../models/model.h"
#include "tubelet.h"

/* The moments live in the backend's memory and the update runs where the weights and the
 * gradients are (the table's sum_squares and adamw entries): on a device backend a step moves
 * none of them between host and device, and the host copy of the weights goes stale until
 * tb_adamw_weights_to_host. */
struct tb_adamw {
    tubelet_model *m;
    tb_backend be;              /* the model's backend, on an instance of its own (fork) */
    int forked;
    tb_adamw_params p;
    int n;
    float *mom, *vel;           /* one arena each (be's memory), laid out like the parameters */
    int64_t *offset;            /* per parameter, into mom/vel */
    int64_t *numel;
    float *scale;               /* per parameter: layer-wise lr scale */
    unsigned char *decay;
    const float **grad;         /* a step's gradients, NULL where a parameter does not train */
    int64_t t;
};

tb_adamw_params tb_adamw_default_params(void) {
    tb_adamw_params p = {1e-3, 1e-6, 0.9, 0.999, 1e-8, 0.05, 1.0, 0.0, 0, 0, 0};
    return p;
}

int tb_adamw_new(tb_adamw **out, tubelet_model *m, const tb_adamw_params *p, tb_err *e) {
    *out = NULL;
    tb_adamw *o = calloc(1, sizeof *o);
    if (!o) return tb_fail(e, TUBELET_ERR_MEMORY, "out of memory");
    o->m = m, o->p = *p, o->n = tubelet_model_n_tensors(m), o->be = m->be;
    if (m->be.k->fork) { /* its own failure record and scratch, as a state's */
        int rc = m->be.k->fork(m->be.ctx, &o->be.ctx, e);
        if (rc) return free(o), rc;
        o->forked = 1;
    }
    o->offset = calloc((size_t)o->n + 1, sizeof(int64_t));
    o->numel = calloc((size_t)o->n + 1, sizeof(int64_t));
    o->scale = calloc((size_t)o->n + 1, sizeof(float));
    o->decay = calloc((size_t)o->n + 1, 1);
    o->grad = calloc((size_t)o->n + 1, sizeof *o->grad);
    tubelet_model_info info;
    tubelet_model_get_info(m, &info);
    for (int i = 0; o->offset && o->numel && o->scale && o->decay && i < o->n; i++) {
        tubelet_shape sh;
        tubelet_model_tensor(m, i, &sh, NULL);
        o->numel[i] = tubelet_shape_numel(&sh);
        int id;
        o->decay[i] = (unsigned char)tubelet_model_tensor_group(m, i, &id); /* the family's */
        const int depth = info.num_layers + info.num_temporal_layers;
        o->scale[i] = (float)pow(p->layer_decay, depth + 1 - id);
        if (p->freeze_encoder && !tubelet_model_tensor_is_probe(m, i)) o->scale[i] = 0; /* frozen */
        /* moments for the tensors that train only: a frozen ViT-L encoder would take 2.4 GB */
        o->offset[i + 1] = o->offset[i] + (o->scale[i] ? o->numel[i] : 0);
    }
    if (o->offset) { /* zeroed, as mem_alloc's memory is */
        o->mom = TB_RUN(&o->be, mem_alloc, sizeof(float) * (size_t)o->offset[o->n]);
        o->vel = TB_RUN(&o->be, mem_alloc, sizeof(float) * (size_t)o->offset[o->n]);
    }
    if (!o->offset || !o->numel || !o->scale || !o->decay || !o->grad || !o->mom || !o->vel) {
        tb_adamw_free(o);
        return tb_fail(e, TUBELET_ERR_MEMORY, "out of memory for the optimiser state");
    }
    *out = o;
    return TUBELET_OK;
}

void tb_adamw_free(tb_adamw *o) {
    if (!o) return;
    if (o->mom) TB_RUN(&o->be, mem_free, o->mom);
    if (o->vel) TB_RUN(&o->be, mem_free, o->vel);
    if (o->forked && o->be.k->close) o->be.k->close(o->be.ctx);
    free(o->offset), free(o->numel), free(o->scale), free(o->decay), free(o->grad), free(o);
}

double tb_adamw_lr(const tb_adamw_params *p, int64_t t) {
    if (p->warmup_steps > 0 && t < p->warmup_steps)
        return p->lr * (double)(t + 1) / (double)p->warmup_steps;
    int64_t span = p->total_steps - p->warmup_steps;
    if (span <= 0) return p->lr;
    double x = (double)(t - p->warmup_steps) / (double)span;
    if (x > 1) x = 1;
    return p->min_lr + 0.5 * (p->lr - p->min_lr) * (1 + cos(3.141592653589793 * x));
}

/* The first failure the backend recorded since the last call (a device's kernel or copy). */
static int backend_status(tb_adamw *o, const char *what, tb_err *e) {
    const int rc = TB_RUN(&o->be, ctx_status, NULL);
    return rc ? tb_fail(e, rc, "device %s: %s failed", o->be.k->name, what) : TUBELET_OK;
}

int tb_adamw_step(tb_adamw *o, const tubelet_grads *grads, double grad_scale, double *norm_out,
                  tb_err *e) {
    /* frozen (scale 0) or without a gradient: neither in the norm nor updated */
    for (int i = 0; i < o->n; i++) o->grad[i] = o->scale[i] ? tb_grads_kernel_at(grads, i) : NULL;
    const double norm = sqrt(TB_RUN(&o->be, sum_squares, o->grad, o->numel, o->n)) * grad_scale;
    double gs = grad_scale;
    if (o->p.clip_norm > 0 && norm > o->p.clip_norm) gs *= o->p.clip_norm / norm;
    const double lr = tb_adamw_lr(&o->p, o->t);
    o->t++;
    const double b1 = o->p.beta1, b2 = o->p.beta2;
    const double c1 = 1 - pow(b1, (double)o->t), c2 = 1 - pow(b2, (double)o->t);
    for (int i = 0; i < o->n; i++) {
        if (!o->grad[i]) continue;
        /* the one place that writes a model's weights: a trainable model was loaded without
         * mmap, or built; a device backend updates its own copy of them */
        float *wm = tubelet_model_tensor_writable(o->m, i);
        const tb_adamw_args a = {lr * o->scale[i], o->decay[i] ? o->p.weight_decay : 0, b1, b2,
                                 o->p.eps, c1, c2, gs};
        TB_RUN(&o->be, adamw, wm, o->grad[i], o->mom + o->offset[i], o->vel + o->offset[i],
               o->numel[i], &a);
    }
    if (norm_out) *norm_out = norm;
    return backend_status(o, "the optimiser step", e);
}

int tb_adamw_weights_to_host(tb_adamw *o, tb_err *e) {
    for (int i = 0; o->be.k->download && i < o->n; i++) {
        if (!o->scale[i]) continue; /* frozen: never updated */
        int rc = TB_RUN(&o->be, download, tubelet_model_tensor_writable(o->m, i),
                        sizeof(float) * (size_t)o->numel[i], e);
        if (rc) return rc;
    }
    return TUBELET_OK;
}

int64_t tb_adamw_steps(const tb_adamw *o) { return o->t; }

int tb_adamw_save(tb_adamw *o, const char *path, tb_err *e) {
    st_tensor *ts = calloc((size_t)(2 * o->n + 1), sizeof *ts);
    char **names = calloc((size_t)(2 * o->n), sizeof(char *));
    /* a device backend's moments through a host copy; the CPU's are host memory */
    const size_t bytes = sizeof(float) * (size_t)o->offset[o->n];
    const int device = o->be.k->open != NULL;
    float *mom = device ? malloc(bytes ? bytes : 1) : o->mom;
    float *vel = device ? malloc(bytes ? bytes : 1) : o->vel;
    int rc = TUBELET_OK;
    int64_t step_holder;
    if (!ts || !names || !mom || !vel) {
        if (device) free(mom), free(vel);
        free(ts), free(names);
        return tb_fail(e, TUBELET_ERR_MEMORY, "out of memory");
    }
    int n_ts = 0;
    if (device) {
        TB_RUN(&o->be, to_host, mom, o->mom, bytes);
        TB_RUN(&o->be, to_host, vel, o->vel, bytes);
        rc = backend_status(o, "reading the optimiser state", e);
    }
    for (int i = 0; i < o->n && !rc; i++) {
        tubelet_shape sh;
        const char *name = tubelet_model_tensor(o->m, i, &sh, NULL);
        if (!o->scale[i]) continue; /* frozen: no moments */
        for (int k = 0; k < 2; k++) {
            size_t len = strlen(name) + sizeof "exp_avg_sq.";
            names[2 * i + k] = malloc(len);
            if (!names[2 * i + k]) {
                rc = tb_fail(e, TUBELET_ERR_MEMORY, "out of memory");
                break;
            }
            snprintf(names[2 * i + k], len, "%s.%s", k ? "exp_avg_sq" : "exp_avg", name);
            st_tensor *t = &ts[n_ts++];
            t->name = names[2 * i + k], t->dtype = ST_F32, t->ndim = sh.ndim;
            for (int d = 0; d < sh.ndim; d++) t->shape[d] = sh.dim[d];
            t->nbytes = sizeof(float) * (size_t)tubelet_shape_numel(&sh);
            t->data = (k ? vel : mom) + o->offset[i];
        }
    }
    step_holder = o->t;
    ts[n_ts] = (st_tensor){"step", ST_I64, 0, {0}, sizeof(int64_t), &step_holder};
    if (!rc) rc = st_write(path, ts, n_ts + 1, e);
    for (int i = 0; i < 2 * o->n; i++) free(names[i]);
    if (device) free(mom), free(vel);
    free(names), free(ts);
    return rc;
}

/* A saved moment is input: NaN, infinity, or a negative second moment (whose square root the
 * update takes) would poison the weights at the first step. */
static int check_moment(const char *path, const char *name, const void *data, size_t n,
                        int second, tb_err *e) {
    const float *x = data;
    for (size_t i = 0; i < n; i++) {
        float v;
        memcpy(&v, x + i, sizeof v); /* the file's data need not be aligned */
        if (!isfinite(v) || (second && v < 0))
            return tb_fail(e, TUBELET_ERR_VALUE, "%s: '%s'[%zu] is %g: the optimiser state is "
                           "corrupt", path, name, i, (double)v);
    }
    return TUBELET_OK;
}

int tb_adamw_load(tb_adamw *o, const char *path, tb_err *e) {
    st_file *f = NULL;
    int rc = st_open(&f, path, 0, e);
    if (rc) return rc;
    char name[512];
    for (int i = 0; i < o->n && !rc; i++) {
        tubelet_shape sh;
        const char *pn = tubelet_model_tensor(o->m, i, &sh, NULL);
        for (int k = 0; k < 2 && !rc && o->scale[i]; k++) { /* frozen: no moments */
            snprintf(name, sizeof name, "%s.%s", k ? "exp_avg_sq" : "exp_avg", pn);
            const st_tensor *t = st_find(f, name);
            size_t want = sizeof(float) * (size_t)tubelet_shape_numel(&sh);
            if (!t || t->dtype != ST_F32 || t->nbytes != want)
                rc = tb_fail(e, TUBELET_ERR_FORMAT, "%s: no float32 '%s' of %zu bytes", path,
                             name, want);
            else
                rc = check_moment(path, name, t->data, want / sizeof(float), k, e);
            if (!rc) TB_RUN(&o->be, to_device, (k ? o->vel : o->mom) + o->offset[i], t->data, want);
        }
    }
    const st_tensor *st = rc ? NULL : st_find(f, "step");
    if (!rc && (!st || st->dtype != ST_I64 || st->nbytes != 8))
        rc = tb_fail(e, TUBELET_ERR_FORMAT, "%s: no int64 'step'", path);
    int64_t step = 0;
    if (!rc) memcpy(&step, st->data, 8);
    if (!rc && step < 0)
        rc = tb_fail(e, TUBELET_ERR_VALUE, "%s: 'step' is negative (%lld)", path, (long long)step);
    if (!rc) rc = backend_status(o, "writing the optimiser state", e);
    if (!rc) o->t = step;
    st_close(f);
    return rc;
}
