/* Parameters by name: tb_param looks each one up in the model directory's tensors, or
 * initialises it as the references do (seeded), and registers it (tubelet_model_tensor); in
 * gradient mode (tubelet_grads_new) it hands out the parameter's gradient buffer instead. The
 * family builders (family.h) call these; they call nothing above them. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "family.h"
#include "../rng.h"

float *tb_model_alloc(tubelet_model *m, size_t floats, tb_err *e) {
    if (m->n_owned == m->cap_owned) {
        int cap = m->cap_owned ? 2 * m->cap_owned : 64;
        void **o = realloc(m->owned, sizeof(void *) * (size_t)cap);
        if (!o) return tb_fail(e, TUBELET_ERR_MEMORY, "%s: out of memory", m->source), NULL;
        m->owned = o, m->cap_owned = cap;
    }
    size_t bytes;
    float *p = tb_mul_ok(floats, sizeof(float), &bytes) ? tb_alloc(bytes) : NULL;
    if (!p) {
        tb_fail(e, TUBELET_ERR_MEMORY, "%s: out of memory (%zu floats)", m->source, floats);
        return NULL;
    }
    m->owned[m->n_owned++] = p;
    return p;
}

int tb_model_share(tubelet_model *m, const float *t, size_t floats, tb_err *e) {
    return m->be.k->upload ? TB_RUN(&m->be, upload, t, sizeof(float) * floats, e) : TUBELET_OK;
}

int tb_param_layer(const char *name, int depth) {
    const char *p = strstr(name, ".layer.");
    int skip = 7;
    if (!p) p = strstr(name, ".layers."), skip = 8;
    if (p) return atoi(p + skip) + 1;
    if (strstr(name, "embeddings")) return 0;
    return depth + 1;
}

int tb_name_starts(const char *name, const char *const *starts) {
    for (; starts && *starts; starts++)
        if (!strncmp(name, *starts, strlen(*starts))) return 1;
    return 0;
}

int tb_is_head_param(const tubelet_model *m, const char *name) {
    const char *p = m->fam->head_prefix;
    return p && !strncmp(name, p, strlen(p));
}

/* splitmix64 → Box-Muller: deterministic random weights for a given seed. */
static double rng_uniform(uint64_t *s) {
    return ((double)(tb_splitmix64(s) >> 11) + 0.5) / 9007199254740992.0; /* never 0: log(u) */
}

static float rng_normal(uint64_t *s) {
    double u = rng_uniform(s), v = rng_uniform(s);
    return (float)(sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v));
}

static tb_tensor_entry *find_tensor(const tubelet_model *m, const char *name) {
    for (int i = 0; i < m->n_tensors; i++) /* build order = lookup order: start near the end */
        if (!strcmp(m->tensors[m->n_tensors - 1 - i].name, name))
            return &m->tensors[m->n_tensors - 1 - i];
    return NULL;
}

static int register_tensor(tubelet_model *m, const char *name, int ndim, const int64_t *shape,
                           int64_t n, const float *data, tb_err *e) {
    if (m->n_tensors == m->cap_tensors) {
        int cap = m->cap_tensors ? 2 * m->cap_tensors : 256;
        tb_tensor_entry *t = realloc(m->tensors, sizeof *t * (size_t)cap);
        if (!t) return tb_fail(e, TUBELET_ERR_MEMORY, "%s: out of memory", m->source);
        m->tensors = t, m->cap_tensors = cap;
    }
    tb_tensor_entry *t = &m->tensors[m->n_tensors];
    memset(t, 0, sizeof *t);
    if (!(t->name = strdup(name))) return tb_fail(e, TUBELET_ERR_MEMORY, "out of memory");
    t->ndim = ndim, t->numel = n, t->data = data;
    memcpy(t->shape, shape, sizeof(int64_t) * (size_t)ndim);
    m->n_tensors++;
    return TUBELET_OK;
}

static int param(tubelet_model *m, const char *name, int ndim, const int64_t *shape, int init,
                 double bound, const float **out, tb_err *e) {
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) n *= shape[i];
    if (m->grad_of) { /* second build: hand out the gradient buffer of the same parameter */
        const tb_tensor_entry *t = find_tensor(m, name);
        if (!t) return tb_fail(e, TUBELET_ERR_MISSING, "no gradient for '%s'", name);
        *out = m->grad_of[t - m->tensors];
        return TUBELET_OK;
    }
    m->n_params += n;
    if (m->describe) { /* shapes only: nothing allocated, read or drawn */
        *out = NULL;
        return register_tensor(m, name, ndim, shape, n, NULL, e);
    }
    const int is_head = tb_is_head_param(m, name);
    if (m->weights && ((m->reinit_head && is_head) ||
                       (m->from_pretraining &&
                        (is_head || tb_name_starts(name, m->fam->new_after_pretraining))))) {
        if (!m->from_pretraining && strstr(name, ".weight"))
            tb_warn(&m->log, "%s: the classifier has %lld classes, the data %d: re-initialised",
                    m->source, (long long)m->ckpt_labels, m->cfg.num_labels);
    } else if (m->weights) {
        int rc = tb_weights_get(m->weights, name, ndim, shape, out, e);
        return rc ? rc : register_tensor(m, name, ndim, shape, n, *out, e);
    }
    float *p = tb_model_alloc(m, (size_t)n, e);
    if (!p) return TUBELET_ERR_MEMORY;
    /* The references' initialisation: normal(0, initializer_range) weights (0.02 unless the
     * config says otherwise; truncated where the family's reference truncates), zero biases,
     * unit norms; each family's exceptions are its builder's (tests/test_init.c). The truncation
     * redraws: initializer_range <= 10 keeps |x| <= 2 at odds of 1 in 6 or better. */
    const double trunc = m->fam && m->fam->init_trunc > 0 ? m->fam->init_trunc : INFINITY;
    for (int64_t i = 0; i < n; i++) {
        double v;
        switch (init) {
        case TB_INIT_ZEROS: v = 0.0; break;
        case TB_INIT_ONES: v = 1.0; break;
        case TB_INIT_LAYER_SCALE: v = m->cfg.layer_scale; break;
        case TB_INIT_UNIFORM: v = bound * (2.0 * rng_uniform(&m->rng) - 1.0); break;
        case TB_INIT_NORMAL_SCALED:
            do v = (float)(m->cfg.init_std * bound) * rng_normal(&m->rng);
            while (fabs(v) > trunc);
            break;
        default:
            do v = (float)m->cfg.init_std * rng_normal(&m->rng); /* the f32 product */
            while (fabs(v) > trunc);
        }
        p[i] = (float)v;
    }
    *out = p;
    return register_tensor(m, name, ndim, shape, n, p, e);
}

int tb_param(tubelet_model *m, const char *name, int ndim, const int64_t *shape, int init,
             const float **out, tb_err *e) {
    return param(m, name, ndim, shape, init, 0.0, out, e);
}

int tb_param_uniform(tubelet_model *m, const char *name, int ndim, const int64_t *shape,
                     double bound, const float **out, tb_err *e) {
    return param(m, name, ndim, shape, TB_INIT_UNIFORM, bound, out, e);
}

int tb_param_scaled(tubelet_model *m, const char *name, int ndim, const int64_t *shape,
                    double scale, const float **out, tb_err *e) {
    return param(m, name, ndim, shape, TB_INIT_NORMAL_SCALED, scale, out, e);
}

int tb_build_linear(tubelet_model *m, tb_lin *l, const char *prefix, int out, int in, int bias,
                    tb_err *e) {
    char name[256];
    int64_t ws[2] = {out, in}, bs[1] = {out};
    int rc;
    snprintf(name, sizeof name, "%sweight", prefix);
    if ((rc = tb_param(m, name, 2, ws, TB_INIT_NORMAL, &l->w, e))) return rc;
    l->b = NULL;
    if (!bias) return TUBELET_OK;
    snprintf(name, sizeof name, "%sbias", prefix);
    return tb_param(m, name, 1, bs, TB_INIT_ZEROS, &l->b, e);
}

int tb_build_layernorm(tubelet_model *m, tb_ln *l, const char *prefix, int n, float eps,
                       tb_err *e) {
    char name[256];
    int64_t s[1] = {n};
    int rc;
    l->eps = eps;
    snprintf(name, sizeof name, "%sweight", prefix);
    if ((rc = tb_param(m, name, 1, s, TB_INIT_ONES, &l->w, e))) return rc;
    snprintf(name, sizeof name, "%sbias", prefix);
    return tb_param(m, name, 1, s, TB_INIT_ZEROS, &l->b, e);
}

/* ---- gradients (struct tubelet_grads; tubelet_grads_new in model.c builds them) ---- */

void tubelet_grads_free(tubelet_grads *g) {
    if (!g) return;
    for (int i = 0; i < g->n_owned; i++) tb_free(g->owned[i]);
    free(g->owned);
    free(g->g.blocks), free(g->g.fam);
    free(g->of);
    tb_free(g->arena);
    if (g->dev) TB_RUN(&g->be, mem_free, g->dev);
    if (g->be.ctx && g->be.k->close) g->be.k->close(g->be.ctx); /* its own instance (fork) */
    free(g);
}

void tubelet_grads_zero(tubelet_grads *g) {
    memset(g->arena, 0, sizeof(float) * g->floats);
    if (g->dev) { /* waited for (ctx_status): the states add into them on their own streams */
        TB_RUN(&g->be, zero, g->dev, (int64_t)g->floats);
        const int rc = TB_RUN(&g->be, ctx_status, NULL);
        if (!g->zero_status) g->zero_status = rc;
    }
    g->host_stale = 0;
}

int tb_grads_status(tubelet_grads *g, tb_err *e) {
    const int rc = g->zero_status;
    g->zero_status = 0;
    return rc ? tb_fail(e, rc, "device %s: zeroing the gradients failed", g->be.k->name) : 0;
}

void tb_grads_written(tubelet_grads *g) { g->host_stale = g->dev != NULL; }

float *tubelet_grads_at(const tubelet_grads *g, int i) {
    if (i < 0 || i >= g->m->n_tensors) return NULL;
    if (g->host_stale) { /* the first read since a backward: every gradient, in one copy */
        tubelet_grads *w = (tubelet_grads *)g; /* the host view refreshed: the values unchanged */
        TB_RUN(&w->be, to_host, w->arena, w->dev, sizeof(float) * w->floats);
        w->host_stale = 0;
    }
    return g->of[i];
}

float *tb_grads_kernel_at(const tubelet_grads *g, int i) {
    if (i < 0 || i >= g->m->n_tensors || !g->of[i]) return NULL;
    return g->dev ? g->dev + (g->of[i] - g->arena) : g->of[i];
}

int tubelet_grads_changed(tubelet_grads *g, char *err, size_t errlen) {
    tb_err e = {{0}};
    if (!g->dev) return TUBELET_OK;
    tubelet_grads_at(g, 0); /* a stale host view first: what the caller did not read is kept */
    TB_RUN(&g->be, to_device, g->dev, g->arena, sizeof(float) * g->floats);
    const int rc = TB_RUN(&g->be, ctx_status, NULL);
    return rc ? tb_err_out(tb_fail(&e, rc, "%s: the gradients' copy to the %s failed",
                                   g->m->source, g->be.k->name), &e, err, errlen)
              : TUBELET_OK;
}

const tubelet_model *tubelet_grads_model(const tubelet_grads *g) { return g->m; }
