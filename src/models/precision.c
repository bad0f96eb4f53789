/* Packed weights (docs/precision.md): for inference every linear layer's weight is converted
 * once at load (kernels/lowp.c) into oneDNN's matmul layout, in f32 or reduced to bf16 or int8,
 * q, k and v fused into one weight (one product per attention, the activations converted once),
 * and the f32 copies dropped: buffers the model owns are freed, pages of a memory-mapped file
 * are handed back to the kernel (they are never read again). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../kernels/attention.h"
#include "encoder.h"

const char *tubelet_precision_name(int p) {
    static const char *const names[] = {"fp32", "bf16", "int8"};
    return p >= 0 && p <= TB_PREC_INT8 ? names[p] : NULL;
}

int tubelet_precision_parse(const char *s) {
    for (int p = 0; p <= TB_PREC_INT8; p++)
        if (s && !strcmp(s, tubelet_precision_name(p))) return p;
    return -1;
}

/* A weight range converted: its f32 copy can go once every tensor it lies in is covered. */
typedef struct {
    const float *p;
    int64_t n;
} range;

typedef struct {
    tubelet_model *m;
    range *done;
    int n_done;
    tb_err *e;
} convert_job;

/* The layer's name (int8_scales.json): "patch_embed", "blocks.3.fc1", "head"; a family whose
 * layers have no names (Video Swin) numbers them: "linear.7". */
static int convert(convert_job *j, const char *name, tb_lin *l, const float *W, int64_t N,
                   int64_t K) {
    char full[TB_LAYER_NAME];
    if (!name)
        snprintf(full, sizeof full, "linear.%d", TB_RUN(&j->m->be, pack_count, j->m->pack));
    else snprintf(full, sizeof full, "%s", name);
    const tb_qweight *q;
    int rc = TB_RUN(&j->m->be, pack_add, j->m->pack, full, W, N, K, &q, j->e);
    if (rc) return rc;
    l->q = q, l->w = NULL;
    return TUBELET_OK;
}

static int convert_lin(void *job, const char *name, tb_lin *l, int64_t N, int64_t K) {
    convert_job *j = job;
    if (!l->w) return TUBELET_OK; /* absent (TimeSformer's temporal_dense in some schemes) */
    j->done[j->n_done++] = (range){l->w, N * K};
    return convert(j, name, l, l->w, N, K);
}

/* q, k, v (each D x D) → one (3D, D) weight and a (3D) bias (zeros where a projection has none) */
static int convert_mha(void *job, const char *name, tb_mha *a, int64_t D) {
    convert_job *j = job;
    if (!a->q.w) return TUBELET_OK;
    tubelet_model *m = j->m;
    const tb_lin *p[3] = {&a->q, &a->k, &a->v};
    float *W = malloc(sizeof(float) * (size_t)(3 * D * D));
    if (!W) return tb_fail(j->e, TUBELET_ERR_MEMORY, "out of memory");
    float *b = NULL;
    if (a->q.b || a->k.b || a->v.b) {
        if (!(b = tb_model_alloc(m, (size_t)(3 * D), j->e))) {
            free(W);
            return TUBELET_ERR_MEMORY;
        }
    }
    for (int i = 0; i < 3; i++) {
        memcpy(W + i * D * D, p[i]->w, sizeof(float) * (size_t)(D * D));
        if (b && p[i]->b) memcpy(b + i * D, p[i]->b, sizeof(float) * (size_t)D);
        j->done[j->n_done++] = (range){p[i]->w, D * D};
    }
    a->qkv.b = b;
    int rc = b ? tb_model_share(m, b, (size_t)(3 * D), j->e) : TUBELET_OK;
    if (rc) {
        free(W);
        return rc;
    }
    char qkv[TB_LAYER_NAME], out[TB_LAYER_NAME];
    snprintf(qkv, sizeof qkv, "%s.qkv", name), snprintf(out, sizeof out, "%s.out", name);
    rc = convert(j, qkv, &a->qkv, W, 3 * D, D);
    free(W);
    if (rc) return rc;
    a->q.w = a->k.w = a->v.w = NULL;
    return convert_lin(j, out, &a->o, D, D);
}

/* counts the packed weights each_linear hands over (an attention's: qkv and out) */
static int count_lin(void *job, const char *name, tb_lin *l, int64_t N, int64_t K) {
    (void)name, (void)l, (void)N, (void)K;
    ++*(int *)job;
    return TUBELET_OK;
}
static int count_mha(void *job, const char *name, tb_mha *a, int64_t D) {
    (void)name, (void)a, (void)D;
    *(int *)job += 2;
    return TUBELET_OK;
}
static void count_none(void *job) { (void)job; }

/* 1 if the ranges converted cover every element of [p, p + n). */
static int covered(const convert_job *j, const float *p, int64_t n) {
    int64_t sum = 0;
    for (int i = 0; i < j->n_done; i++)
        if (j->done[i].p >= p && j->done[i].p + j->done[i].n <= p + n) sum += j->done[i].n;
    return sum == n;
}

/* Drops the f32 copy of every tensor that was converted in full. */
static void drop_f32(void *job) {
    convert_job *j = job;
    tubelet_model *m = j->m;
    for (int i = 0; i < m->n_tensors; i++) {
        tb_tensor_entry *t = &m->tensors[i];
        if (!t->data || t->ndim < 2 || !covered(j, t->data, t->numel)) continue;
        int owned = 0;
        for (int k = 0; k < m->n_owned && !owned; k++)
            if (m->owned[k] == t->data) {
                tb_free(m->owned[k]);
                m->owned[k] = m->owned[--m->n_owned];
                owned = 1;
            }
        if (!owned && m->weights)
            tb_weights_release(m->weights, t->data, sizeof(float) * (size_t)t->numel);
        t->data = NULL; /* a reduced-precision model has no f32 values to save or train */
    }
}

/* A user who asked for speed should know that this CPU lacks the instructions: the portable
 * path does the fp32 products plus the rounding. */
static void say_portable(tubelet_model *m, int precision, int mixed) {
    tb_info(&m->log, "%s: this CPU has no %s: %s %s products take the portable path (the same "
            "rounded values multiplied in f32), slower than fp32 here", m->source,
            precision == TB_PREC_BF16 ? "AVX512-BF16" : "AVX512-VNNI or AVX2",
            mixed ? "mixed precision's" : "the", tubelet_precision_name(precision));
}

int tb_model_set_precision(tubelet_model *m, int precision, int reference, int inference,
                           tb_err *e) {
    if (precision == TB_PREC_FP32 && !inference) return TUBELET_OK; /* plain: trainable */
    if (precision != TB_PREC_FP32 && precision != TB_PREC_BF16 && precision != TB_PREC_INT8)
        return tb_fail(e, TUBELET_ERR_ARG, "unknown precision %d", precision);
    m->precision = precision, m->packed = 1;
    m->lowp_native =
        precision == TB_PREC_FP32 || (!reference && TB_RUN(&m->be, has_native, precision));
    /* attention's products in bf16 for int8 too: its error (~2^-8) is below int8's */
    m->attn_bf16 = precision != TB_PREC_FP32 && !reference &&
                   TB_RUN(&m->be, has_native, TB_PREC_BF16) &&
                   m->be.k->has_attention_bf16(m->be.ctx) && !m->run->attention_f32;
    static const tb_linear_visitor count = {count_lin, count_mha, count_none};
    int max_lin = 0; /* the model's runner lists its layers: count them */
    int rc = m->run->each_linear(m, &count, &max_lin);
    if (!rc) rc = TB_RUN(&m->be, pack_new, &m->pack, precision, m->lowp_native, max_lin, e);
    if (rc) return rc; /* refused (a backend without this precision): no note about the CPU */
    if (!m->lowp_native && !reference) say_portable(m, precision, 0);
    convert_job j = {m, calloc((size_t)max_lin * 3, sizeof(range)), 0, e};
    if (!j.done) return tb_fail(e, TUBELET_ERR_MEMORY, "out of memory");
    static const tb_linear_visitor convert_all = {convert_lin, convert_mha, drop_f32};
    rc = m->run->each_linear(m, &convert_all, &j);
    if (!rc) drop_f32(&j);
    free(j.done);
    return rc;
}

/* The shared encoder's linear layers (tb_vit_encoder_model.each_linear). */
int tb_vit_each_linear(tubelet_model *m, const tb_linear_visitor *v, void *job) {
    const tb_config *c = &m->cfg;
    const int nb = tb_n_blocks(c);
    const int64_t D = c->hidden, I = c->intermediate;
    const int64_t K_patch = (int64_t)c->num_channels * c->tubelet_t * c->patch_h * c->patch_w;
    tb_weightset *w = &m->w;
    tb_lin patch = {w->patch_w, w->patch_b, w->patch_q};
    int rc = v->lin(job, "patch_embed", &patch, D, K_patch);
    w->patch_q = patch.q, w->patch_w = patch.w;
    char name[TB_LAYER_NAME];
#define BLOCK_NAME(l, what) (snprintf(name, sizeof name, "blocks.%d.%s", l, what), name)
    for (int l = 0; l < nb && !rc; l++) {
        tb_block *b = &w->blocks[l];
        tb_mha *att[3] = {&b->attn, &b->attn_t, &b->attn_w};
        const char *att_name[3] = {"attn", "attn_t", "attn_w"};
        for (int k = 0; k < 3 && !rc; k++) rc = v->mha(job, BLOCK_NAME(l, att_name[k]), att[k], D);
        if (!rc) rc = v->lin(job, BLOCK_NAME(l, "dense_t"), &b->dense_t, D, D);
        if (!rc) rc = v->lin(job, BLOCK_NAME(l, "dense_w"), &b->dense_w, D, D);
        if (!rc) rc = v->lin(job, BLOCK_NAME(l, "fc1"), &b->fc1, I, D);
        if (!rc) rc = v->lin(job, BLOCK_NAME(l, "fc2"), &b->fc2, D, I);
        if (!rc) v->done(job); /* block by block: the f32 pages never add up */
    }
#undef BLOCK_NAME
    const tb_vit_hooks *hooks = m->fam->vit;
    if (!rc && hooks->each_linear) rc = hooks->each_linear(m, v, job);
    if (!rc) rc = v->lin(job, "head", &w->head, c->num_labels, D);
    return rc;
}

int tb_model_set_mixed_precision(tubelet_model *m, int precision, int reference, tb_err *e) {
    if (precision == TB_PREC_FP32) return TUBELET_OK;
    if (precision != TB_PREC_BF16)
        return tb_fail(e, TUBELET_ERR_ARG, "%s: training runs in fp32 or in mixed precision with "
                       "bf16 products (train_precision bf16), not %s", m->source,
                       tubelet_precision_name(precision) ? tubelet_precision_name(precision)
                                                         : "an unknown precision");
    if (m->packed)
        return tb_fail(e, TUBELET_ERR_ARG, "%s: mixed-precision training keeps the fp32 weights: "
                       "load with precision fp32 and inference 0", m->source);
    if (!m->be.k->mixed)
        return tb_fail(e, TUBELET_ERR_UNSUPPORTED,
                       "%s: the %s backend has no mixed-precision "
                       "training (train_precision bf16)",
                       m->source, m->be.k->name);
    m->mixed = 1, m->be.k = m->be.k->mixed;
    m->lowp_native = !reference && TB_RUN(&m->be, has_native, TB_PREC_BF16);
    if (!m->lowp_native && !reference) say_portable(m, TB_PREC_BF16, 1);
    /* no weights to pack: the pack holds the engine the states' bf16 products run on */
    return TB_RUN(&m->be, pack_new, &m->pack, TB_PREC_BF16, m->lowp_native, 0, e);
}

void tb_model_free_precision(tubelet_model *m) {
    if (m->pack) TB_RUN(&m->be, pack_free, m->pack);
}

/* Bytes of the linear layers' weights as the forward reads them. */
size_t tb_model_linear_bytes(const tubelet_model *m) {
    if (m->packed) return TB_RUN(&m->be, pack_bytes, m->pack);
    return m->run->linear_bytes(m);
}

/* The shared encoder's (tb_vit_encoder_model.linear_bytes). */
size_t tb_vit_linear_bytes(const tubelet_model *m) {
    const tb_config *c = &m->cfg;
    const int64_t D = c->hidden, I = c->intermediate;
    int64_t n = m->w.patch_w ? D * c->num_channels * c->tubelet_t * c->patch_h * c->patch_w : 0;
    for (int l = 0; l < tb_n_blocks(c); l++) {
        const tb_block *b = &m->w.blocks[l];
        const tb_mha *att[3] = {&b->attn, &b->attn_t, &b->attn_w};
        for (int k = 0; k < 3; k++) n += att[k]->q.w ? 4 * D * D : 0;
        n += (b->dense_t.w ? D * D : 0) + (b->dense_w.w ? D * D : 0) + 2 * D * I;
    }
    if (m->w.head.w) n += D * c->num_labels;
    const tb_vit_hooks *hooks = m->fam->vit;
    return sizeof(float) * (size_t)n + (hooks->linear_bytes ? hooks->linear_bytes(m) : 0);
}
