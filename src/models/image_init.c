/* A video model initialised from a Hugging Face image model: tubelet_model_from_image (model.c)
 * calls the family's image_open and image_copy (family.h), which use the pieces here
 * (image_init.h). For the ViT families, an image ViT (ViTModel / ViTForImageClassification:
 * config.json + model.safetensors), as the ViViT paper (seed 000, "Initialisation by leveraging
 * pretrained models") and TimeSformer's released code do it. docs/image-init.md has the mapping
 * and the reasons; in short:
 *   every spatial attention (and joint attention) <- the ViT block's LayerNorm, q/k/v, output;
 *   every MLP, layernorm_after, the final LayerNorm <- the ViT's;
 *   TimeSformer's temporal step <- a copy of the ViT attention, temporal_dense = 0 (the block
 *     starts as the image block); axial's width and L+G's local step <- a copy, dense = identity;
 *   ViViT Model 3's temporal attention: random, its output projection 0; Model 2's temporal
 *     encoder: random;
 *   positions: the ViT's patch positions (bicubic-resized to the video's grid) repeated over the
 *     temporal indices; TimeSformer's time embeddings 0; the cls token and its position copied;
 *   tubelet filter: central frame (E at index t/2, 0 elsewhere) or inflation (E/t at every one);
 *   classifier: random, or the ViT's (keep_head).
 * Video Swin takes an image Swin instead (SwinModel / SwinForImageClassification; video_swin.c's
 * swin_image_open, swin_image_copy; docs/video-swin.md): every block, merge and norm copied, q/k/v stacked, the
 * patch filter inflated over time, each bias table repeated over the temporal offsets.
 * The video model is first built with the references' random initialisation (seeded), then the
 * copied tensors are written over it. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "image_init.h"

void tb_vit_free(tb_vit *v) {
    if (!v) return;
    if (v->w) tb_weights_free(v->w);
    free(v);
}

int tb_ii_json_int(const cJSON *j, const char *key, int def, int *out, const char *path,
                   tb_err *e) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(j, key);
    *out = def;
    if (!it) return TUBELET_OK;
    if (!cJSON_IsNumber(it) || it->valuedouble < 1 || it->valuedouble > 1 << 20 ||
        it->valuedouble != (int)it->valuedouble)
        return tb_fail(e, TUBELET_ERR_CONFIG, "%s: %s must be a positive integer", path, key);
    *out = (int)it->valuedouble;
    return TUBELET_OK;
}

/* An integer or a list of 1 to max positive integers (image_size, patch_size, depths); absent:
 * out and *n kept. */
int tb_ii_json_ints(const cJSON *j, const char *key, int *out, int max, int *n,
                    const char *path, tb_err *e) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(j, key);
    if (!it) return TUBELET_OK;
    const int len = cJSON_IsArray(it) ? cJSON_GetArraySize(it) : cJSON_IsNumber(it) ? 1 : 0;
    if (len < 1 || len > max)
        return tb_fail(e, TUBELET_ERR_CONFIG, "%s: %s must be an integer or a list of 1 to %d "
                       "integers", path, key, max);
    for (int i = 0; i < len; i++) {
        const cJSON *x = cJSON_IsArray(it) ? cJSON_GetArrayItem(it, i) : it;
        if (!cJSON_IsNumber(x) || x->valuedouble < 1 || x->valuedouble > 1 << 20 ||
            x->valuedouble != (int)x->valuedouble)
            return tb_fail(e, TUBELET_ERR_CONFIG, "%s: %s must hold positive integers", path,
                           key);
        out[i] = (int)x->valuedouble;
    }
    *n = len;
    return TUBELET_OK;
}

/* "[2, 2, 6, 2]" */
const char *tb_ii_list_text(char *buf, size_t size, const int *a, int n) {
    size_t k = (size_t)snprintf(buf, size, "[");
    for (int i = 0; i < n && k < size; i++)
        k += (size_t)snprintf(buf + k, size - k, i ? ", %d" : "%d", a[i]);
    if (k < size) snprintf(buf + k, size - k, "]");
    return buf;
}

/* ---- an image ViT (ViTModel / ViTForImageClassification) for the ViT families ---- */

int tb_ii_vit_open(tb_vit *v, const cJSON *j, const char *path, tb_config *c, const tb_log *log,
                   tb_err *e) {
    int rc;
    int image = 224;
    const cJSON *size = cJSON_GetObjectItemCaseSensitive(j, "image_size");
    /* ViTConfig's defaults; image_size may also be [h, w] */
    if (cJSON_IsArray(size) && cJSON_GetArraySize(size) == 2) {
        const cJSON *h = cJSON_GetArrayItem(size, 0), *w = cJSON_GetArrayItem(size, 1);
        if (!cJSON_IsNumber(h) || !cJSON_IsNumber(w) || h->valuedouble < 1 ||
            w->valuedouble < 1 || h->valuedouble > 1 << 20 || w->valuedouble > 1 << 20)
            return tb_fail(e, TUBELET_ERR_CONFIG, "%s: image_size must be positive integers", path);
        v->image_h = (int)h->valuedouble, v->image_w = (int)w->valuedouble;
    } else if ((rc = tb_ii_json_int(j, "image_size", 224, &image, path, e))) {
        return rc;
    } else {
        v->image_h = v->image_w = image;
    }
    if ((rc = tb_ii_json_int(j, "hidden_size", 768, &v->hidden, path, e)) ||
        (rc = tb_ii_json_int(j, "num_hidden_layers", 12, &v->layers, path, e)) ||
        (rc = tb_ii_json_int(j, "num_attention_heads", 12, &v->heads, path, e)) ||
        (rc = tb_ii_json_int(j, "intermediate_size", 3072, &v->intermediate, path, e)) ||
        (rc = tb_ii_json_int(j, "patch_size", 16, &v->patch, path, e)) ||
        (rc = tb_ii_json_int(j, "num_channels", 3, &v->channels, path, e)))
        return rc;
    const cJSON *qb = cJSON_GetObjectItemCaseSensitive(j, "qkv_bias");
    v->qkv_bias = qb ? cJSON_IsTrue(qb) : 1;
    const cJSON *act = cJSON_GetObjectItemCaseSensitive(j, "hidden_act");
    const char *act_name = cJSON_IsString(act) ? act->valuestring : "gelu";
    const int a = tb_act_parse(act_name);
    const cJSON *epsj = cJSON_GetObjectItemCaseSensitive(j, "layer_norm_eps");
    const double eps = cJSON_IsNumber(epsj) ? epsj->valuedouble : 1e-12;
    if (a < 0)
        return tb_fail(e, TUBELET_ERR_CONFIG, "%s: hidden_act '%.64s' is not supported", path,
                       act_name);
    if (v->image_h % v->patch || v->image_w % v->patch)
        return tb_fail(e, TUBELET_ERR_CONFIG,
                       "%s: image_size %dx%d is not a multiple of patch_size %d", path, v->image_h,
                       v->image_w, v->patch);
    /* the shapes must agree with the video model's */
#define SAME(what, img, vid)                                                                      \
    if ((img) != (vid))                                                                           \
        return tb_fail(e, TUBELET_ERR_SHAPE,                                                      \
                       "%s: %s %d of the image model differs from the video model's %d", path,    \
                       what, (int)(img), (int)(vid));
    SAME("hidden_size", v->hidden, c->hidden)
    SAME("num_attention_heads", v->heads, c->heads)
    SAME("intermediate_size", v->intermediate, c->intermediate)
    SAME("num_channels", v->channels, c->num_channels)
    SAME("patch_size (height)", v->patch, c->patch_h)
    SAME("patch_size (width)", v->patch, c->patch_w)
#undef SAME
    if (c->layers > v->layers)
        return tb_fail(e, TUBELET_ERR_SHAPE,
                       "%s: the image model has %d layers, the video model's (spatial) encoder %d",
                       path, v->layers, c->layers);
    if (c->layers < v->layers)
        tb_warn(log, "%s: the video model uses the first %d of the image model's %d layers", path,
                c->layers, v->layers);
    /* the image weights were trained with the image model's activation, LayerNorm epsilon and
     * q/k/v biases: the video model takes them */
    if ((int)c->act != a)
        tb_warn(log, "%s: hidden_act '%s' replaces the video config's '%s'", path,
                tb_act_name((tb_act)a), tb_act_name(c->act));
    if (c->ln_eps != (float)eps)
        tb_warn(log, "%s: layer_norm_eps %g replaces the video config's %g", path, eps,
                (double)c->ln_eps);
    if (c->qkv_bias != v->qkv_bias)
        tb_warn(log, "%s: qkv_bias %s replaces the video config's", path,
                v->qkv_bias ? "true" : "false");
    c->act = (tb_act)a, c->ln_eps = (float)eps, c->qkv_bias = v->qkv_bias;

    if ((rc = tb_weights_open(&v->w, v->dir, 1, e))) return rc;
    if (tb_weights_has(v->w, "vit.embeddings.cls_token"))
        strcpy(v->prefix, "vit.");
    else if (tb_weights_has(v->w, "embeddings.cls_token"))
        v->prefix[0] = 0;
    else
        return tb_fail(e, TUBELET_ERR_MISSING,
                       "%s/model.safetensors: no image-ViT tensors (neither "
                       "'vit.embeddings.cls_token' nor 'embeddings.cls_token')",
                       v->dir);
    char name[128];
    snprintf(name, sizeof name, "%slayers.0.layernorm_before.weight", v->prefix);
    v->new_names = tb_weights_has(v->w, name);
    return TUBELET_OK;
}

/* ---- copying ---- */

/* The writable buffer of the video model's parameter `name` (a random model owns them all). */
int tb_ii_dst(tubelet_model *m, const char *name, int64_t numel, float **out, tb_err *e) {
    for (int i = 0; i < m->n_tensors; i++)
        if (!strcmp(m->tensors[i].name, name)) {
            if (m->tensors[i].numel != numel)
                return tb_fail(e, TUBELET_ERR_SHAPE,
                               "%s: parameter '%s' has %lld values, expected %lld", m->source,
                               name, (long long)m->tensors[i].numel, (long long)numel);
            *out = (float *)m->tensors[i].data;
            return TUBELET_OK;
        }
    return tb_fail(e, TUBELET_ERR_MISSING, "%s: the video model has no parameter '%s'", m->source,
                   name);
}

/* The image model's tensor prefix+name, of exactly this shape (errors name the file). */
int tb_ii_src(tb_vit *v, const char *name, int ndim, const int64_t *shape, const float **out,
              tb_err *e) {
    char full[300];
    snprintf(full, sizeof full, "%s%s", v->prefix, name);
    return tb_weights_get(v->w, full, ndim, shape, out, e);
}

int tb_ii_copy(tb_vit *v, tubelet_model *m, const char *to, const char *from, int ndim,
               const int64_t *shape, tb_err *e) {
    const float *s;
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) n *= shape[i];
    int rc = tb_ii_src(v, from, ndim, shape, &s, e);
    if (rc) return rc;
    float *d;
    if ((rc = tb_ii_dst(m, to, n, &d, e))) return rc;
    memcpy(d, s, sizeof(float) * (size_t)n);
    return TUBELET_OK;
}

/* to+"weight"/"bias" <- from+"weight"/"bias", a Linear (out, in) or a LayerNorm (in = 0). */
int tb_ii_copy_wb(tb_vit *v, tubelet_model *m, const char *to, const char *from, int64_t out,
                  int64_t in, int bias, tb_err *e) {
    char a[256], b[256];
    int64_t ws[2] = {out, in}, bs[1] = {out};
    int rc;
    snprintf(a, sizeof a, "%sweight", to), snprintf(b, sizeof b, "%sweight", from);
    if ((rc = tb_ii_copy(v, m, a, b, in ? 2 : 1, ws, e))) return rc;
    if (!bias) return TUBELET_OK;
    snprintf(a, sizeof a, "%sbias", to), snprintf(b, sizeof b, "%sbias", from);
    return tb_ii_copy(v, m, a, b, 1, bs, e);
}

/* Source names inside ViT layer l. */
static void vit_layer(const tb_vit *v, int l, const char *legacy, const char *fresh, char *out,
                      size_t n) {
    if (v->new_names) snprintf(out, n, "layers.%d.%s", l, fresh);
    else snprintf(out, n, "encoder.layer.%d.%s", l, legacy);
}

/* One attention step of the video model <- ViT layer l's layernorm_before and attention:
 * ln + "weight"/"bias", attn + "attention.{query,key,value}." (or the fused "attention.qkv." of
 * TimeSformer, q, k, v stacked along the output) and attn + "output.dense.". */
int tb_ii_copy_attention(tb_vit *v, tubelet_model *m, int l, const char *ln, const char *attn,
                         int fused, tb_err *e) {
    const int64_t D = v->hidden;
    char f[160], t[256];
    int rc;
    vit_layer(v, l, "layernorm_before.", "layernorm_before.", f, sizeof f);
    if ((rc = tb_ii_copy_wb(v, m, ln, f, D, 0, 1, e))) return rc;
    static const char *const legacy[3] = {"attention.attention.query.", "attention.attention.key.",
                                          "attention.attention.value."};
    static const char *const fresh[3] = {"attention.q_proj.", "attention.k_proj.",
                                         "attention.v_proj."};
    static const char *const sub[3] = {"attention.query.", "attention.key.", "attention.value."};
    float *qkv_w = NULL, *qkv_b = NULL;
    if (fused) {
        snprintf(t, sizeof t, "%sattention.qkv.weight", attn);
        if ((rc = tb_ii_dst(m, t, 3 * D * D, &qkv_w, e))) return rc;
        snprintf(t, sizeof t, "%sattention.qkv.bias", attn);
        if (v->qkv_bias && (rc = tb_ii_dst(m, t, 3 * D, &qkv_b, e))) return rc;
    }
    for (int i = 0; i < 3; i++) {
        vit_layer(v, l, legacy[i], fresh[i], f, sizeof f);
        if (!fused) {
            snprintf(t, sizeof t, "%s%s", attn, sub[i]);
            if ((rc = tb_ii_copy_wb(v, m, t, f, D, D, v->qkv_bias, e))) return rc;
            continue;
        }
        char n[200];
        const float *s;
        int64_t ws[2] = {D, D}, bs[1] = {D};
        snprintf(n, sizeof n, "%sweight", f);
        if ((rc = tb_ii_src(v, n, 2, ws, &s, e))) return rc;
        memcpy(qkv_w + i * D * D, s, sizeof(float) * (size_t)(D * D));
        if (!v->qkv_bias) continue;
        snprintf(n, sizeof n, "%sbias", f);
        if ((rc = tb_ii_src(v, n, 1, bs, &s, e))) return rc;
        memcpy(qkv_b + i * D, s, sizeof(float) * (size_t)D);
    }
    vit_layer(v, l, "attention.output.dense.", "attention.o_proj.", f, sizeof f);
    snprintf(t, sizeof t, "%soutput.dense.", attn);
    return tb_ii_copy_wb(v, m, t, f, D, D, 1, e);
}

/* layernorm_after and the MLP of the block under prefix p <- ViT layer l's. */
int tb_ii_copy_mlp(tb_vit *v, tubelet_model *m, int l, const char *p, tb_err *e) {
    const int64_t D = v->hidden, I = v->intermediate;
    char f[160], t[256];
    int rc;
    vit_layer(v, l, "layernorm_after.", "layernorm_after.", f, sizeof f);
    snprintf(t, sizeof t, "%slayernorm_after.", p);
    if ((rc = tb_ii_copy_wb(v, m, t, f, D, 0, 1, e))) return rc;
    vit_layer(v, l, "intermediate.dense.", "mlp.fc1.", f, sizeof f);
    snprintf(t, sizeof t, "%sintermediate.dense.", p);
    if ((rc = tb_ii_copy_wb(v, m, t, f, I, D, 1, e))) return rc;
    vit_layer(v, l, "output.dense.", "mlp.fc2.", f, sizeof f);
    snprintf(t, sizeof t, "%soutput.dense.", p);
    return tb_ii_copy_wb(v, m, t, f, D, I, 1, e);
}

/* A dense layer (D, D) set to 0 (identity = 0) or to the identity, bias 0. */
int tb_ii_set_dense(tubelet_model *m, const char *p, int identity, tb_err *e) {
    const int64_t D = m->cfg.hidden;
    char t[256];
    snprintf(t, sizeof t, "%sweight", p);
    float *w, *b;
    int rc;
    if ((rc = tb_ii_dst(m, t, D * D, &w, e))) return rc;
    snprintf(t, sizeof t, "%sbias", p);
    if ((rc = tb_ii_dst(m, t, D, &b, e))) return rc;
    memset(w, 0, sizeof(float) * (size_t)(D * D));
    memset(b, 0, sizeof(float) * (size_t)D);
    if (identity)
        for (int64_t i = 0; i < D; i++) w[i * D + i] = 1;
    return TUBELET_OK;
}

/* Positions: the ViT's table (1, 1 + h0 w0, D) with its patch positions resized bicubically to
 * the video's h1 x w1 grid, then laid out for the video model. */
static int copy_positions(tb_vit *v, tubelet_model *m, const tb_ii_vit_layout *l, tb_err *e) {
    const tb_config *c = &m->cfg;
    const int64_t D = c->hidden, h0 = v->image_h / v->patch, w0 = v->image_w / v->patch;
    const int64_t h1 = tb_grid_h(c, c->image_h), w1 = tb_grid_w(c, c->image_w), N = h1 * w1;
    const int64_t gt = tb_grid_t(c, c->num_frames);
    int64_t ps[3] = {1, 1 + h0 * w0, D};
    const float *pos;
    int rc = tb_ii_src(v, "embeddings.position_embeddings", 3, ps, &pos, e);
    if (rc) return rc;
    if (h0 != h1 || w0 != w1)
        tb_warn(&m->log, "%s: position embeddings resized bicubically from %lldx%lld to %lldx%lld",
                v->dir, (long long)h0, (long long)w0, (long long)h1, (long long)w1);
    float *grid = malloc(sizeof(float) * (size_t)(N * D));
    if (!grid) return tb_fail(e, TUBELET_ERR_MEMORY, "out of memory");
    if (h0 == h1 && w0 == w1) memcpy(grid, pos + D, sizeof(float) * (size_t)(N * D));
    else tb_resize_bicubic(grid, h1, w1, pos + D, h0, w0, D);
    const int cls = tb_has_cls(c);
    const int64_t slices = l->one_frame_positions ? 1 : gt;
    char name[128];
    snprintf(name, sizeof name, "%sembeddings.position_embeddings", l->prefix);
    float *d = NULL;
    rc = tb_ii_dst(m, name, (cls + slices * N) * D, &d, e);
    if (!rc) {
        if (cls) memcpy(d, pos, sizeof(float) * (size_t)D);
        for (int64_t t = 0; t < slices; t++)
            memcpy(d + (cls + t * N) * D, grid, sizeof(float) * (size_t)(N * D));
    }
    free(grid);
    return rc;
}

/* A 2D filter E (DC, P) over tt frames, w (DC, tt, P): E / tt at every index (inflation) or E at
 * the central index tt / 2 and zeros elsewhere. */
void tb_ii_filter_over_time(float *w, const float *E, int64_t DC, int64_t tt, int64_t P,
                            int inflate) {
    for (int64_t o = 0; o < DC; o++)
        for (int64_t k = 0; k < tt; k++) {
            float *to = w + (o * tt + k) * P;
            const float *from = E + o * P;
            for (int64_t i = 0; i < P; i++)
                to[i] = inflate ? from[i] / (float)tt : k == tt / 2 ? from[i] : 0.0f;
        }
}

/* The patch filter: a Conv2d (tubelet_t 1: TimeSformer's) takes E as is; a Conv3d (D, C, t, p, p:
 * ViViT's) gets E at the central index t/2 and zeros elsewhere, or E/t at every index
 * (inflation). */
static int copy_patch(tb_vit *v, tubelet_model *m, const tb_ii_vit_layout *l, int inflate,
                      tb_err *e) {
    const tb_config *c = &m->cfg;
    const int64_t D = c->hidden, C = c->num_channels, P = (int64_t)v->patch * v->patch;
    char pre[96];
    snprintf(pre, sizeof pre, "%sembeddings.", l->prefix);
    char t[256];
    int64_t ws[4] = {D, C, v->patch, v->patch}, bs[1] = {D}, cs[3] = {1, 1, D};
    const float *E;
    int rc = tb_ii_src(v, "embeddings.patch_embeddings.projection.weight", 4, ws, &E, e);
    if (rc) return rc;
    const int64_t tt = l->filter_2d ? 1 : c->tubelet_t;
    snprintf(t, sizeof t, "%spatch_embeddings.projection.weight", pre);
    float *w;
    if ((rc = tb_ii_dst(m, t, D * C * tt * P, &w, e))) return rc;
    tb_ii_filter_over_time(w, E, D * C, tt, P, inflate);
    snprintf(t, sizeof t, "%spatch_embeddings.projection.bias", pre);
    if ((rc = tb_ii_copy(v, m, t, "embeddings.patch_embeddings.projection.bias", 1, bs, e))) return rc;
    if (!tb_has_cls(c)) return TUBELET_OK;
    snprintf(t, sizeof t, "%scls_token", pre);
    return tb_ii_copy(v, m, t, "embeddings.cls_token", 3, cs, e);
}

/* The layer index of a ViT layer tensor's name, -1 for the others. */
static int layer_of(const char *name) {
    const char *p = strstr(name, "encoder.layer.");
    if (p) return atoi(p + 14);
    p = strstr(name, "layers.");
    return p ? atoi(p + 7) : -1;
}

void tb_ii_report_unused(void *user, const char *name) {
    tubelet_model *m = user;
    /* not used on purpose: the pooler, the classifier (unless kept), the cls token of a video
     * model without one (ViViT Models 3 and 4), the layers past the video model's (warned
     * about once, in tb_vit_open), an image Swin's relative_position_index buffers (older
     * checkpoints store them; plan_rel in video_swin.c builds the 3D index) and mask token */
    if (strstr(name, "pooler.") || !strncmp(name, "classifier.", 11) ||
        (!tb_has_cls(&m->cfg) && strstr(name, "embeddings.cls_token")) ||
        strstr(name, "relative_position_index") || strstr(name, "embeddings.mask_token") ||
        layer_of(name) >= m->cfg.layers)
        return;
    tb_warn(&m->log, "image model tensor '%s' not used", name);
}

/* --keep-head: the video model's classifier (to + "weight"/"bias") <- the image model's. */
int tb_ii_copy_head(tb_vit *v, tubelet_model *m, const char *to, tb_err *e) {
    const tb_config *c = &m->cfg;
    const int64_t D = c->hidden;
    if (c->num_labels <= 0)
        return tb_fail(e, TUBELET_ERR_ARG, "--keep-head: the video model has no classifier");
    if (!tb_weights_has(v->w, "classifier.weight"))
        return tb_fail(e, TUBELET_ERR_MISSING,
                       "%s/model.safetensors: --keep-head, but the image model has no "
                       "classifier ('classifier.weight')",
                       v->dir);
    const float *s;
    int64_t ws[2] = {c->num_labels, D}, bs[1] = {c->num_labels};
    int64_t rows = tb_weights_rows(v->w, "classifier.weight");
    if (rows != c->num_labels)
        return tb_fail(e, TUBELET_ERR_SHAPE,
                       "%s/model.safetensors: --keep-head, but the image model's classifier "
                       "has %lld classes, the video config %d",
                       v->dir, (long long)rows, c->num_labels);
    float *d;
    char t[64];
    int rc;
    snprintf(t, sizeof t, "%sweight", to);
    if ((rc = tb_weights_get(v->w, "classifier.weight", 2, ws, &s, e))) return rc;
    if ((rc = tb_ii_dst(m, t, c->num_labels * D, &d, e))) return rc;
    memcpy(d, s, sizeof(float) * (size_t)(c->num_labels * D));
    snprintf(t, sizeof t, "%sbias", to);
    if ((rc = tb_weights_get(v->w, "classifier.bias", 1, bs, &s, e))) return rc;
    if ((rc = tb_ii_dst(m, t, c->num_labels, &d, e))) return rc;
    memcpy(d, s, sizeof(float) * (size_t)c->num_labels);
    return TUBELET_OK;
}

int tb_ii_vit_copy(tb_vit *v, tubelet_model *m, const tb_ii_vit_layout *l, int inflate,
                   int keep_head, tb_err *e) {
    char ln[96];
    snprintf(ln, sizeof ln, "%slayernorm.", l->prefix);
    int rc;
    if ((rc = copy_patch(v, m, l, inflate, e)) || (rc = copy_positions(v, m, l, e)) ||
        (rc = l->blocks(v, m, e)) ||
        (rc = tb_ii_copy_wb(v, m, ln, "layernorm.", m->cfg.hidden, 0, 1, e)) ||
        (keep_head && (rc = tb_ii_copy_head(v, m, "classifier.", e))))
        return rc;
    tb_weights_each_unused(v->w, tb_ii_report_unused, m);
    return TUBELET_OK;
}
