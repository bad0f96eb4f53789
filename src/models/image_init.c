/* A video model initialised from a Hugging Face image ViT (ViTModel / ViTForImageClassification:
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
 * Video Swin takes an image Swin instead (SwinModel / SwinForImageClassification; swin_open,
 * swin_copy below; docs/video-swin.md): every block, merge and norm copied, q/k/v stacked, the
 * patch filter inflated over time, each bias table repeated over the temporal offsets.
 * The video model is first built with the references' random initialisation (seeded), then the
 * copied tensors are written over it. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "state.h"

struct tb_vit {
    tb_weights *w;
    char dir[512];
    char prefix[8];       /* "vit." (ViTForImageClassification) or "" (ViTModel) */
    int new_names;        /* transformers 5's vit.layers.N.attention.q_proj, mlp.fc1 */
    int hidden, layers, heads, intermediate, patch, channels, image_h, image_w, qkv_bias;
    int swin;             /* an image Swin (model_type "swin"; prefix "swin." or "") */
    int window;           /*   its window_size (square windows) */
};

void tb_vit_free(tb_vit *v) {
    if (!v) return;
    if (v->w) tb_weights_free(v->w);
    free(v);
}

static int json_int(const cJSON *j, const char *key, int def, int *out, const char *path,
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
static int json_ints(const cJSON *j, const char *key, int *out, int max, int *n,
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
static const char *list_text(char *buf, size_t size, const int *a, int n) {
    size_t k = (size_t)snprintf(buf, size, "[");
    for (int i = 0; i < n && k < size; i++)
        k += (size_t)snprintf(buf + k, size - k, i ? ", %d" : "%d", a[i]);
    if (k < size) snprintf(buf + k, size - k, "]");
    return buf;
}

/* An image Swin's config.json (SwinConfig's fields and defaults) against the Video Swin config c:
 * the blocks are copied one to one, so embed_dim, depths, heads, MLP width, channels, the
 * spatial patch and the spatial window must be the video model's. */
static int swin_open(tb_vit *v, const cJSON *j, const char *path, tb_config *c, const tb_log *log,
                     tb_err *e) {
    const tb_swin_config *sw = &c->swin;
    if (c->family != TB_VIDEO_SWIN)
        return tb_fail(e, TUBELET_ERR_CONFIG, "%s: an image Swin initialises a Video Swin only "
                       "(model_type \"video_swin\"), not a %s config", path, c->model_type);
    int image[2] = {224, 224}, patch[2] = {4, 4}, depths[8] = {2, 2, 6, 2},
        heads[8] = {3, 6, 12, 24};
    int n_image = 1, n_patch = 1, n_depths = 4, n_heads = 4, embed = 96, rc;
    char a[96], b[96];
    if ((rc = json_ints(j, "image_size", image, 2, &n_image, path, e)) ||
        (rc = json_ints(j, "patch_size", patch, 2, &n_patch, path, e)) ||
        (rc = json_ints(j, "depths", depths, 8, &n_depths, path, e)) ||
        (rc = json_ints(j, "num_heads", heads, 8, &n_heads, path, e)) ||
        (rc = json_int(j, "embed_dim", 96, &embed, path, e)) ||
        (rc = json_int(j, "window_size", 7, &v->window, path, e)) ||
        (rc = json_int(j, "num_channels", 3, &v->channels, path, e)))
        return rc;
    if (n_image == 1) image[1] = image[0];
    if (n_patch == 1) patch[1] = patch[0];
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(j, "mlp_ratio");
    const double mlp_ratio = cJSON_IsNumber(it) ? it->valuedouble : 4.0;
    it = cJSON_GetObjectItemCaseSensitive(j, "layer_norm_eps");
    const double eps = cJSON_IsNumber(it) ? it->valuedouble : 1e-5;
    it = cJSON_GetObjectItemCaseSensitive(j, "qkv_bias");
    v->qkv_bias = it ? cJSON_IsTrue(it) : 1;
    it = cJSON_GetObjectItemCaseSensitive(j, "hidden_act");
    const char *act = cJSON_IsString(it) ? it->valuestring : "gelu";
    if (strcmp(act, "gelu"))
        return tb_fail(e, TUBELET_ERR_CONFIG, "%s: hidden_act '%.64s': Video Swin's MLP uses "
                       "GELU (\"gelu\")", path, act);
    if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "use_absolute_embeddings")))
        return tb_fail(e, TUBELET_ERR_CONFIG, "%s: use_absolute_embeddings is true, but Video "
                       "Swin has no absolute positions to take them", path);
#define SAME(what, img, vid)                                                                      \
    if ((img) != (vid))                                                                           \
        return tb_fail(e, TUBELET_ERR_SHAPE,                                                      \
                       "%s: %s %d of the image model differs from the video model's %d", path,    \
                       what, (int)(img), (int)(vid));
    SAME("embed_dim", embed, sw->embed_dim)
    SAME("num_channels", v->channels, c->num_channels)
    SAME("patch_size (height)", patch[0], c->patch_h)
    SAME("patch_size (width)", patch[1], c->patch_w)
#undef SAME
    if (v->window != sw->window[1] || v->window != sw->window[2])
        return tb_fail(e, TUBELET_ERR_SHAPE, "%s: window_size %d of the image model differs from "
                       "the video model's spatial window %dx%d (interpolating the relative "
                       "position bias table to another window is not supported: give the video "
                       "config window_size [t, %d, %d])", path, v->window, sw->window[1],
                       sw->window[2], v->window, v->window);
    int same = n_depths == sw->stages && n_heads == sw->stages;
    for (int i = 0; same && i < sw->stages; i++)
        same = depths[i] == sw->depths[i] && heads[i] == sw->heads[i];
    if (!same) {
        char c1[96], c2[96];
        return tb_fail(e, TUBELET_ERR_SHAPE, "%s: depths %s and num_heads %s of the image model "
                       "differ from the video model's %s and %s", path,
                       list_text(a, sizeof a, depths, n_depths),
                       list_text(b, sizeof b, heads, n_heads),
                       list_text(c1, sizeof c1, sw->depths, sw->stages),
                       list_text(c2, sizeof c2, sw->heads, sw->stages));
    }
    for (int i = 0; i < sw->stages; i++) {
        const int64_t C = tb_swin_width(c, i);
        if ((int64_t)(mlp_ratio * (double)C) != tb_swin_mlp(c, C))
            return tb_fail(e, TUBELET_ERR_SHAPE, "%s: mlp_ratio %g of the image model differs "
                           "from the video model's %g", path, mlp_ratio, sw->mlp_ratio);
    }
    /* transformers shrinks a block's window (and its table) to a stage grid smaller than it:
     * such a table has no place in Video Swin's one window per model */
    for (int i = 0, gh = (image[0] + patch[0] - 1) / patch[0],
             gw = (image[1] + patch[1] - 1) / patch[1];
         i < sw->stages; i++, gh = (gh + 1) / 2, gw = (gw + 1) / 2)
        if ((gh < gw ? gh : gw) < v->window)
            return tb_fail(e, TUBELET_ERR_SHAPE, "%s: at image_size %dx%d the image model's "
                           "stage %d has a %dx%d grid, smaller than window_size %d, so its "
                           "blocks use a smaller window and bias table there; Video Swin keeps "
                           "one window in every stage", path, image[0], image[1], i, gh, gw,
                           v->window);
    /* the weights were trained with the image model's epsilon */
    if (c->ln_eps != (float)eps)
        tb_warn(log, "%s: layer_norm_eps %g replaces the video config's %g", path, eps,
                (double)c->ln_eps);
    if ((float)eps != 1e-5f)
        tb_warn(log, "%s: the image model's patch and merging LayerNorms use 1e-5, the video "
                "model layer_norm_eps %g in every LayerNorm", path, eps);
    c->ln_eps = (float)eps;

    if ((rc = tb_weights_open(&v->w, v->dir, 1, e))) return rc;
    if (tb_weights_has(v->w, "swin.embeddings.patch_embeddings.projection.weight"))
        strcpy(v->prefix, "swin.");
    else if (tb_weights_has(v->w, "embeddings.patch_embeddings.projection.weight"))
        v->prefix[0] = 0;
    else
        return tb_fail(e, TUBELET_ERR_MISSING,
                       "%s/model.safetensors: no image-Swin tensors (neither "
                       "'swin.embeddings.patch_embeddings.projection.weight' nor "
                       "'embeddings.patch_embeddings.projection.weight')", v->dir);
    char name[128];
    snprintf(name, sizeof name, "%sencoder.layers.0.blocks.0.attention.q_proj.weight",
             v->prefix);
    v->new_names = tb_weights_has(v->w, name);
    v->swin = 1, v->hidden = embed, v->patch = patch[0];
    return TUBELET_OK;
}

int tb_vit_open(tb_vit **out, const char *dir, tb_config *c, const tb_log *log, tb_err *e) {
    char path[700];
    char *text = NULL;
    cJSON *j = NULL;
    *out = NULL;
    tb_vit *v = calloc(1, sizeof *v);
    if (!v) return tb_fail(e, TUBELET_ERR_MEMORY, "out of memory");
    snprintf(v->dir, sizeof v->dir, "%s", dir);
    snprintf(path, sizeof path, "%s/config.json", dir);
    int rc = tb_read_file(path, &text, NULL, 1 << 24, e);
    if (rc) goto done;
    if (!(j = cJSON_Parse(text))) {
        rc = tb_fail(e, TUBELET_ERR_FORMAT, "%s: not valid JSON", path);
        goto done;
    }
    const cJSON *mt = cJSON_GetObjectItemCaseSensitive(j, "model_type");
    const char *type = cJSON_IsString(mt) ? mt->valuestring : NULL;
    if (type && !strcmp(type, "swin")) {
        rc = swin_open(v, j, path, c, log, e);
        goto done;
    }
    if (c->family == TB_VIDEO_SWIN) {
        rc = tb_fail(e, TUBELET_ERR_CONFIG,
                     "%s: model_type '%.64s' is not an image Swin (Video Swin is initialised "
                     "from a Hugging Face SwinModel or SwinForImageClassification directory, "
                     "model_type \"swin\")",
                     path, type ? type : "(none)");
        goto done;
    }
    if (!type || strcmp(type, "vit")) {
        rc = tb_fail(e, TUBELET_ERR_CONFIG,
                     "%s: model_type '%.64s' is not an image ViT (expected \"vit\": a Hugging "
                     "Face ViTModel or ViTForImageClassification directory)",
                     path, type ? type : "(none)");
        goto done;
    }
    int image = 224;
    const cJSON *size = cJSON_GetObjectItemCaseSensitive(j, "image_size");
    /* ViTConfig's defaults; image_size may also be [h, w] */
    if (cJSON_IsArray(size) && cJSON_GetArraySize(size) == 2) {
        const cJSON *h = cJSON_GetArrayItem(size, 0), *w = cJSON_GetArrayItem(size, 1);
        if (!cJSON_IsNumber(h) || !cJSON_IsNumber(w) || h->valuedouble < 1 ||
            w->valuedouble < 1 || h->valuedouble > 1 << 20 || w->valuedouble > 1 << 20) {
            rc = tb_fail(e, TUBELET_ERR_CONFIG, "%s: image_size must be positive integers", path);
            goto done;
        }
        v->image_h = (int)h->valuedouble, v->image_w = (int)w->valuedouble;
    } else if ((rc = json_int(j, "image_size", 224, &image, path, e))) {
        goto done;
    } else {
        v->image_h = v->image_w = image;
    }
    if ((rc = json_int(j, "hidden_size", 768, &v->hidden, path, e)) ||
        (rc = json_int(j, "num_hidden_layers", 12, &v->layers, path, e)) ||
        (rc = json_int(j, "num_attention_heads", 12, &v->heads, path, e)) ||
        (rc = json_int(j, "intermediate_size", 3072, &v->intermediate, path, e)) ||
        (rc = json_int(j, "patch_size", 16, &v->patch, path, e)) ||
        (rc = json_int(j, "num_channels", 3, &v->channels, path, e)))
        goto done;
    const cJSON *qb = cJSON_GetObjectItemCaseSensitive(j, "qkv_bias");
    v->qkv_bias = qb ? cJSON_IsTrue(qb) : 1;
    const cJSON *act = cJSON_GetObjectItemCaseSensitive(j, "hidden_act");
    const char *act_name = cJSON_IsString(act) ? act->valuestring : "gelu";
    const int a = tb_act_parse(act_name);
    const cJSON *epsj = cJSON_GetObjectItemCaseSensitive(j, "layer_norm_eps");
    const double eps = cJSON_IsNumber(epsj) ? epsj->valuedouble : 1e-12;
    if (a < 0) {
        rc = tb_fail(e, TUBELET_ERR_CONFIG, "%s: hidden_act '%.64s' is not supported", path,
                     act_name);
        goto done;
    }
    if (v->image_h % v->patch || v->image_w % v->patch) {
        rc = tb_fail(e, TUBELET_ERR_CONFIG,
                     "%s: image_size %dx%d is not a multiple of patch_size %d", path, v->image_h,
                     v->image_w, v->patch);
        goto done;
    }
    /* the shapes must agree with the video model's */
    if (c->family == TB_VIDEOMAE) {
        rc = tb_fail(e, TUBELET_ERR_UNSUPPORTED,
                     "VideoMAE has no image-ViT initialisation (its encoder is pre-trained by "
                     "masked autoencoding); use a TimeSformer or ViViT config");
        goto done;
    }
#define SAME(what, img, vid)                                                                      \
    if ((img) != (vid)) {                                                                         \
        rc = tb_fail(e, TUBELET_ERR_SHAPE,                                                        \
                     "%s: %s %d of the image model differs from the video model's %d", path,      \
                     what, (int)(img), (int)(vid));                                               \
        goto done;                                                                                \
    }
    SAME("hidden_size", v->hidden, c->hidden)
    SAME("num_attention_heads", v->heads, c->heads)
    SAME("intermediate_size", v->intermediate, c->intermediate)
    SAME("num_channels", v->channels, c->num_channels)
    SAME("patch_size (height)", v->patch, c->patch_h)
    SAME("patch_size (width)", v->patch, c->patch_w)
#undef SAME
    if (c->layers > v->layers) {
        rc = tb_fail(e, TUBELET_ERR_SHAPE,
                     "%s: the image model has %d layers, the video model's (spatial) encoder %d",
                     path, v->layers, c->layers);
        goto done;
    }
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

    if ((rc = tb_weights_open(&v->w, dir, 1, e))) goto done;
    if (tb_weights_has(v->w, "vit.embeddings.cls_token")) {
        strcpy(v->prefix, "vit.");
    } else if (tb_weights_has(v->w, "embeddings.cls_token")) {
        v->prefix[0] = 0;
    } else {
        rc = tb_fail(e, TUBELET_ERR_MISSING,
                     "%s/model.safetensors: no image-ViT tensors (neither "
                     "'vit.embeddings.cls_token' nor 'embeddings.cls_token')",
                     dir);
        goto done;
    }
    char name[128];
    snprintf(name, sizeof name, "%slayers.0.layernorm_before.weight", v->prefix);
    v->new_names = tb_weights_has(v->w, name);
done:
    cJSON_Delete(j);
    free(text);
    if (rc) tb_vit_free(v);
    else *out = v;
    return rc;
}

/* ---- copying ---- */

/* The writable buffer of the video model's parameter `name` (a random model owns them all). */
static int dst(tubelet_model *m, const char *name, int64_t numel, float **out, tb_err *e) {
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
static int src(tb_vit *v, const char *name, int ndim, const int64_t *shape, const float **out,
               tb_err *e) {
    char full[300];
    snprintf(full, sizeof full, "%s%s", v->prefix, name);
    return tb_weights_get(v->w, full, ndim, shape, out, e);
}

static int copy(tb_vit *v, tubelet_model *m, const char *to, const char *from, int ndim,
                const int64_t *shape, tb_err *e) {
    const float *s;
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) n *= shape[i];
    int rc = src(v, from, ndim, shape, &s, e);
    if (rc) return rc;
    float *d;
    if ((rc = dst(m, to, n, &d, e))) return rc;
    memcpy(d, s, sizeof(float) * (size_t)n);
    return TUBELET_OK;
}

/* to+"weight"/"bias" <- from+"weight"/"bias", a Linear (out, in) or a LayerNorm (in = 0). */
static int copy_wb(tb_vit *v, tubelet_model *m, const char *to, const char *from, int64_t out,
                   int64_t in, int bias, tb_err *e) {
    char a[256], b[256];
    int64_t ws[2] = {out, in}, bs[1] = {out};
    int rc;
    snprintf(a, sizeof a, "%sweight", to), snprintf(b, sizeof b, "%sweight", from);
    if ((rc = copy(v, m, a, b, in ? 2 : 1, ws, e))) return rc;
    if (!bias) return TUBELET_OK;
    snprintf(a, sizeof a, "%sbias", to), snprintf(b, sizeof b, "%sbias", from);
    return copy(v, m, a, b, 1, bs, e);
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
static int copy_attention(tb_vit *v, tubelet_model *m, int l, const char *ln, const char *attn,
                          int fused, tb_err *e) {
    const int64_t D = v->hidden;
    char f[160], t[256];
    int rc;
    vit_layer(v, l, "layernorm_before.", "layernorm_before.", f, sizeof f);
    if ((rc = copy_wb(v, m, ln, f, D, 0, 1, e))) return rc;
    static const char *const legacy[3] = {"attention.attention.query.", "attention.attention.key.",
                                          "attention.attention.value."};
    static const char *const fresh[3] = {"attention.q_proj.", "attention.k_proj.",
                                         "attention.v_proj."};
    static const char *const sub[3] = {"attention.query.", "attention.key.", "attention.value."};
    float *qkv_w = NULL, *qkv_b = NULL;
    if (fused) {
        snprintf(t, sizeof t, "%sattention.qkv.weight", attn);
        if ((rc = dst(m, t, 3 * D * D, &qkv_w, e))) return rc;
        snprintf(t, sizeof t, "%sattention.qkv.bias", attn);
        if (v->qkv_bias && (rc = dst(m, t, 3 * D, &qkv_b, e))) return rc;
    }
    for (int i = 0; i < 3; i++) {
        vit_layer(v, l, legacy[i], fresh[i], f, sizeof f);
        if (!fused) {
            snprintf(t, sizeof t, "%s%s", attn, sub[i]);
            if ((rc = copy_wb(v, m, t, f, D, D, v->qkv_bias, e))) return rc;
            continue;
        }
        char n[200];
        const float *s;
        int64_t ws[2] = {D, D}, bs[1] = {D};
        snprintf(n, sizeof n, "%sweight", f);
        if ((rc = src(v, n, 2, ws, &s, e))) return rc;
        memcpy(qkv_w + i * D * D, s, sizeof(float) * (size_t)(D * D));
        if (!v->qkv_bias) continue;
        snprintf(n, sizeof n, "%sbias", f);
        if ((rc = src(v, n, 1, bs, &s, e))) return rc;
        memcpy(qkv_b + i * D, s, sizeof(float) * (size_t)D);
    }
    vit_layer(v, l, "attention.output.dense.", "attention.o_proj.", f, sizeof f);
    snprintf(t, sizeof t, "%soutput.dense.", attn);
    return copy_wb(v, m, t, f, D, D, 1, e);
}

/* layernorm_after and the MLP of the block under prefix p <- ViT layer l's. */
static int copy_mlp(tb_vit *v, tubelet_model *m, int l, const char *p, tb_err *e) {
    const int64_t D = v->hidden, I = v->intermediate;
    char f[160], t[256];
    int rc;
    vit_layer(v, l, "layernorm_after.", "layernorm_after.", f, sizeof f);
    snprintf(t, sizeof t, "%slayernorm_after.", p);
    if ((rc = copy_wb(v, m, t, f, D, 0, 1, e))) return rc;
    vit_layer(v, l, "intermediate.dense.", "mlp.fc1.", f, sizeof f);
    snprintf(t, sizeof t, "%sintermediate.dense.", p);
    if ((rc = copy_wb(v, m, t, f, I, D, 1, e))) return rc;
    vit_layer(v, l, "output.dense.", "mlp.fc2.", f, sizeof f);
    snprintf(t, sizeof t, "%soutput.dense.", p);
    return copy_wb(v, m, t, f, D, I, 1, e);
}

/* A dense layer (D, D) set to 0 (identity = 0) or to the identity, bias 0. */
static int set_dense(tubelet_model *m, const char *p, int identity, tb_err *e) {
    const int64_t D = m->cfg.hidden;
    char t[256];
    snprintf(t, sizeof t, "%sweight", p);
    float *w, *b;
    int rc;
    if ((rc = dst(m, t, D * D, &w, e))) return rc;
    snprintf(t, sizeof t, "%sbias", p);
    if ((rc = dst(m, t, D, &b, e))) return rc;
    memset(w, 0, sizeof(float) * (size_t)(D * D));
    memset(b, 0, sizeof(float) * (size_t)D);
    if (identity)
        for (int64_t i = 0; i < D; i++) w[i * D + i] = 1;
    return TUBELET_OK;
}

static int copy_timesformer_blocks(tb_vit *v, tubelet_model *m, tb_err *e) {
    const tb_config *c = &m->cfg;
    tb_attn_step st[TB_MAX_STEPS];
    const int n_steps = tb_timesformer_steps(c->attn, 1, 1, 1, st);
    int rc;
    for (int l = 0; l < c->layers; l++) {
        char p[128], ln[192], at[192], dn[192];
        snprintf(p, sizeof p, "timesformer.encoder.layer.%d.", l);
        snprintf(ln, sizeof ln, "%slayernorm_before.", p);
        snprintf(at, sizeof at, "%sattention.", p);
        if ((rc = copy_attention(v, m, l, ln, at, 1, e)) || (rc = copy_mlp(v, m, l, p, e)))
            return rc;
        for (int k = 0; k + 1 < n_steps; k++) { /* the steps before the last */
            const int width = st[k].kind == TB_STEP_WIDTH;
            const int local = c->attn == TB_ATTN_LOCAL_GLOBAL;
            const char *step = width ? "width" : local ? "local" : "temporal";
            snprintf(ln, sizeof ln, "%s%s_layernorm.", p, step);
            snprintf(at, sizeof at, "%s%s_attention.", p, step);
            snprintf(dn, sizeof dn, "%s%s_dense.", p, step);
            /* time: the block starts as the image block (dense 0); width, local: a residual
             * attention step with the image weights like the last step (dense = identity) */
            if ((rc = copy_attention(v, m, l, ln, at, 1, e)) ||
                (rc = set_dense(m, dn, width || local, e)))
                return rc;
        }
    }
    return TUBELET_OK;
}

static int copy_vivit_blocks(tb_vit *v, tubelet_model *m, tb_err *e) {
    int rc;
    for (int l = 0; l < m->cfg.layers; l++) { /* Model 2: the spatial encoder */
        char p[128], ln[192], at[192];
        snprintf(p, sizeof p, "vivit.encoder.layer.%d.", l);
        snprintf(ln, sizeof ln, "%slayernorm_before.", p);
        snprintf(at, sizeof at, "%sattention.", p);
        if ((rc = copy_attention(v, m, l, ln, at, 0, e)) || (rc = copy_mlp(v, m, l, p, e)))
            return rc;
        /* Model 3's temporal attention keeps its random q, k, v; its output projection is zero,
         * as the paper initialises it: the block starts as the image block plus a residual */
        char dn[192];
        snprintf(dn, sizeof dn, "%stemporal_attention.output.dense.", p);
        if (m->cfg.vivit_model == TB_VIVIT_M3 && (rc = set_dense(m, dn, 0, e))) return rc;
    }
    return TUBELET_OK;
}

/* Positions: the ViT's table (1, 1 + h0 w0, D) with its patch positions resized bicubically to
 * the video's h1 x w1 grid, then laid out for the video model. */
static int copy_positions(tb_vit *v, tubelet_model *m, tb_err *e) {
    const tb_config *c = &m->cfg;
    const int64_t D = c->hidden, h0 = v->image_h / v->patch, w0 = v->image_w / v->patch;
    const int64_t h1 = tb_grid_h(c, c->image_h), w1 = tb_grid_w(c, c->image_w), N = h1 * w1;
    const int64_t gt = tb_grid_t(c, c->num_frames);
    int64_t ps[3] = {1, 1 + h0 * w0, D};
    const float *pos;
    int rc = src(v, "embeddings.position_embeddings", 3, ps, &pos, e);
    if (rc) return rc;
    if (h0 != h1 || w0 != w1)
        tb_warn(&m->log, "%s: position embeddings resized bicubically from %lldx%lld to %lldx%lld",
                v->dir, (long long)h0, (long long)w0, (long long)h1, (long long)w1);
    float *grid = malloc(sizeof(float) * (size_t)(N * D));
    if (!grid) return tb_fail(e, TUBELET_ERR_MEMORY, "out of memory");
    if (h0 == h1 && w0 == w1) memcpy(grid, pos + D, sizeof(float) * (size_t)(N * D));
    else tb_resize_bicubic(grid, h1, w1, pos + D, h0, w0, D);
    const int cls = tb_has_cls(c);
    /* TimeSformer and ViViT Model 2: one frame's table; Models 1, 3, 4: repeated over time */
    const int64_t slices = c->family == TB_TIMESFORMER || tb_is_vivit(c, TB_VIVIT_M2) ? 1 : gt;
    const char *name = c->family == TB_TIMESFORMER ? "timesformer.embeddings.position_embeddings"
                                                   : "vivit.embeddings.position_embeddings";
    float *d = NULL;
    rc = dst(m, name, (cls + slices * N) * D, &d, e);
    if (!rc) {
        if (cls) memcpy(d, pos, sizeof(float) * (size_t)D);
        for (int64_t t = 0; t < slices; t++)
            memcpy(d + (cls + t * N) * D, grid, sizeof(float) * (size_t)(N * D));
    }
    free(grid);
    if (rc) return rc;
    if (c->family == TB_TIMESFORMER && c->attn != TB_ATTN_SPACE) {
        float *te;
        if ((rc = dst(m, "timesformer.embeddings.time_embeddings", (int64_t)c->num_frames * D,
                      &te, e)))
            return rc;
        memset(te, 0, sizeof(float) * (size_t)c->num_frames * (size_t)D);
    }
    return TUBELET_OK;
}

/* A 2D filter E (DC, P) over tt frames, w (DC, tt, P): E / tt at every index (inflation) or E at
 * the central index tt / 2 and zeros elsewhere. */
static void filter_over_time(float *w, const float *E, int64_t DC, int64_t tt, int64_t P,
                             int inflate) {
    for (int64_t o = 0; o < DC; o++)
        for (int64_t k = 0; k < tt; k++) {
            float *to = w + (o * tt + k) * P;
            const float *from = E + o * P;
            for (int64_t i = 0; i < P; i++)
                to[i] = inflate ? from[i] / (float)tt : k == tt / 2 ? from[i] : 0.0f;
        }
}

/* The patch filter: TimeSformer's Conv2d takes E as is; ViViT's Conv3d (D, C, t, p, p) gets E at
 * the central index t/2 and zeros elsewhere, or E/t at every index (inflation). */
static int copy_patch(tb_vit *v, tubelet_model *m, int inflate, tb_err *e) {
    const tb_config *c = &m->cfg;
    const int64_t D = c->hidden, C = c->num_channels, P = (int64_t)v->patch * v->patch;
    const int fam = c->family == TB_TIMESFORMER;
    const char *pre = fam ? "timesformer.embeddings." : "vivit.embeddings.";
    char t[128];
    int64_t ws[4] = {D, C, v->patch, v->patch}, bs[1] = {D}, cs[3] = {1, 1, D};
    const float *E;
    int rc = src(v, "embeddings.patch_embeddings.projection.weight", 4, ws, &E, e);
    if (rc) return rc;
    const int64_t tt = fam ? 1 : c->tubelet_t;
    snprintf(t, sizeof t, "%spatch_embeddings.projection.weight", pre);
    float *w;
    if ((rc = dst(m, t, D * C * tt * P, &w, e))) return rc;
    filter_over_time(w, E, D * C, tt, P, inflate);
    snprintf(t, sizeof t, "%spatch_embeddings.projection.bias", pre);
    if ((rc = copy(v, m, t, "embeddings.patch_embeddings.projection.bias", 1, bs, e))) return rc;
    if (!tb_has_cls(c)) return TUBELET_OK;
    snprintf(t, sizeof t, "%scls_token", pre);
    return copy(v, m, t, "embeddings.cls_token", 3, cs, e);
}

/* The layer index of a ViT layer tensor's name, -1 for the others. */
static int layer_of(const char *name) {
    const char *p = strstr(name, "encoder.layer.");
    if (p) return atoi(p + 14);
    p = strstr(name, "layers.");
    return p ? atoi(p + 7) : -1;
}

static void report_unused(void *user, const char *name) {
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
static int copy_head(tb_vit *v, tubelet_model *m, const char *to, tb_err *e) {
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
    if ((rc = dst(m, t, c->num_labels * D, &d, e))) return rc;
    memcpy(d, s, sizeof(float) * (size_t)(c->num_labels * D));
    snprintf(t, sizeof t, "%sbias", to);
    if ((rc = tb_weights_get(v->w, "classifier.bias", 1, bs, &s, e))) return rc;
    if ((rc = dst(m, t, c->num_labels, &d, e))) return rc;
    memcpy(d, s, sizeof(float) * (size_t)c->num_labels);
    return TUBELET_OK;
}

/* ---- Video Swin <- image Swin (docs/video-swin.md, "Initialisation from an image Swin") ----
 * torchvision's names <- transformers' (legacy names, which save_pretrained writes, or
 * transformers 5's), as the official code's inflate_weights maps them:
 *   patch_embed.proj.weight (C0, 3, pt, ph, pw) <- embeddings.patch_embeddings.projection.weight
 *                                 (C0, 3, ph, pw) inflated: E / pt at every frame (or central)
 *   patch_embed.proj.bias, patch_embed.norm    <- embeddings.patch_embeddings.projection.bias,
 *                                                 embeddings.norm
 *   features.<2i>.<j>.                         <- encoder.layers.<i>.blocks.<j>. (swin_block_map;
 *                                                 attn.qkv: query, key, value stacked; the bias
 *                                                 table: the 2D one repeated over time)
 *   features.<2i+1>.norm, .reduction           <- encoder.layers.<i>.downsample.norm, .reduction
 *   norm                                       <- layernorm
 *   head                                       <- classifier (--keep-head; else random) */
static const struct {
    const char *to, *legacy, *fresh;
    char out, in; /* 'C': the stage's width, 'I': its MLP width, 0: a LayerNorm */
} swin_block_map[] = {
    {"norm1.", "layernorm_before.", "layernorm_before.", 'C', 0},
    {"attn.proj.", "attention.output.dense.", "attention.o_proj.", 'C', 'C'},
    {"norm2.", "layernorm_after.", "layernorm_after.", 'C', 0},
    {"mlp.0.", "intermediate.dense.", "mlp.fc1.", 'I', 'C'},
    {"mlp.3.", "output.dense.", "mlp.fc2.", 'C', 'I'},
};
static const char *const swin_qkv[2][3] = {
    {"attention.self.query.", "attention.self.key.", "attention.self.value."},
    {"attention.q_proj.", "attention.k_proj.", "attention.v_proj."}};
static const char *const swin_table[2] = {
    "attention.self.relative_position_bias_table",
    "attention.relative_position_bias.relative_position_bias_table"};

/* to + "attn.qkv." (3C, C) <- from + query, key, value stacked along the output (zero biases
 * when the image model has none: the same products). */
static int swin_copy_qkv(tb_vit *v, tubelet_model *m, const char *to, const char *from,
                         int64_t C, tb_err *e) {
    char t[256], f[256];
    float *w, *b;
    int rc;
    snprintf(t, sizeof t, "%sattn.qkv.weight", to);
    if ((rc = dst(m, t, 3 * C * C, &w, e))) return rc;
    snprintf(t, sizeof t, "%sattn.qkv.bias", to);
    if ((rc = dst(m, t, 3 * C, &b, e))) return rc;
    const int64_t ws[2] = {C, C}, bs[1] = {C};
    for (int k = 0; k < 3; k++) {
        const float *s;
        snprintf(f, sizeof f, "%s%sweight", from, swin_qkv[v->new_names][k]);
        if ((rc = src(v, f, 2, ws, &s, e))) return rc;
        memcpy(w + k * C * C, s, sizeof(float) * (size_t)(C * C));
        if (!v->qkv_bias) {
            memset(b + k * C, 0, sizeof(float) * (size_t)C);
            continue;
        }
        snprintf(f, sizeof f, "%s%sbias", from, swin_qkv[v->new_names][k]);
        if ((rc = src(v, f, 1, bs, &s, e))) return rc;
        memcpy(b + k * C, s, sizeof(float) * (size_t)C);
    }
    return TUBELET_OK;
}

/* to + "attn.relative_position_bias_table" ((2wd-1)(2w-1)(2w-1), heads) <- the image block's
 * ((2w-1)^2, heads) repeated for each of the 2wd-1 temporal offsets: the 3D row of offset
 * (dt, dy, dx) is dt (2w-1)^2 + the 2D row of (dy, dx) (plan_rel in video_swin.c), so every
 * temporal offset reads the image bias of its spatial offset (inflate_weights does the same). */
static int swin_copy_table(tb_vit *v, tubelet_model *m, const char *to, const char *from,
                           int64_t heads, tb_err *e) {
    const int64_t n2 = (int64_t)(2 * v->window - 1) * (2 * v->window - 1),
                  nt = 2 * (int64_t)m->cfg.swin.window[0] - 1;
    char t[256], f[256], full[300];
    snprintf(f, sizeof f, "%s%s", from, swin_table[v->new_names]);
    snprintf(full, sizeof full, "%s%s", v->prefix, f);
    const int64_t rows = tb_weights_rows(v->w, full);
    if (rows >= 0 && rows != n2)
        return tb_fail(e, TUBELET_ERR_SHAPE, "%s/model.safetensors: '%s' has %lld rows, but "
                       "window_size %d of its config.json needs (2*%d-1)^2 = %lld", v->dir, full,
                       (long long)rows, v->window, v->window, (long long)n2);
    const int64_t shape[2] = {n2, heads};
    const float *s;
    float *d;
    int rc;
    if ((rc = src(v, f, 2, shape, &s, e))) return rc;
    snprintf(t, sizeof t, "%sattn.relative_position_bias_table", to);
    if ((rc = dst(m, t, nt * n2 * heads, &d, e))) return rc;
    for (int64_t k = 0; k < nt; k++)
        memcpy(d + k * n2 * heads, s, sizeof(float) * (size_t)(n2 * heads));
    return TUBELET_OK;
}

static int swin_copy_blocks(tb_vit *v, tubelet_model *m, tb_err *e) {
    const tb_config *c = &m->cfg;
    char to[64], from[96], t[128], f[192];
    int rc;
    for (int i = 0; i < c->swin.stages; i++) {
        const int64_t C = tb_swin_width(c, i), I = tb_swin_mlp(c, C);
        for (int j = 0; j < c->swin.depths[i]; j++) {
            snprintf(to, sizeof to, "features.%d.%d.", 2 * i, j);
            snprintf(from, sizeof from, "encoder.layers.%d.blocks.%d.", i, j);
            for (size_t k = 0; k < sizeof swin_block_map / sizeof *swin_block_map; k++) {
                const int64_t out = swin_block_map[k].out == 'I' ? I : C,
                              in = !swin_block_map[k].in ? 0 : swin_block_map[k].in == 'I' ? I : C;
                snprintf(t, sizeof t, "%s%s", to, swin_block_map[k].to);
                snprintf(f, sizeof f, "%s%s", from,
                         v->new_names ? swin_block_map[k].fresh : swin_block_map[k].legacy);
                if ((rc = copy_wb(v, m, t, f, out, in, 1, e))) return rc;
            }
            if ((rc = swin_copy_qkv(v, m, to, from, C, e)) ||
                (rc = swin_copy_table(v, m, to, from, c->swin.heads[i], e)))
                return rc;
        }
        if (i + 1 == c->swin.stages) break;
        snprintf(t, sizeof t, "features.%d.norm.", 2 * i + 1);
        snprintf(f, sizeof f, "encoder.layers.%d.downsample.norm.", i);
        if ((rc = copy_wb(v, m, t, f, 4 * C, 0, 1, e))) return rc;
        snprintf(t, sizeof t, "features.%d.reduction.", 2 * i + 1);
        snprintf(f, sizeof f, "encoder.layers.%d.downsample.reduction.", i);
        if ((rc = copy_wb(v, m, t, f, 2 * C, 4 * C, 0, e))) return rc;
    }
    return TUBELET_OK;
}

static int swin_copy(tb_vit *v, tubelet_model *m, int inflate, int keep_head, tb_err *e) {
    const tb_config *c = &m->cfg;
    const int64_t C0 = c->swin.embed_dim, Cin = c->num_channels, tt = c->tubelet_t,
                  P = (int64_t)c->patch_h * c->patch_w;
    const int64_t ws[4] = {C0, Cin, c->patch_h, c->patch_w}, bs[1] = {C0};
    const float *E;
    float *w;
    int rc;
    if ((rc = src(v, "embeddings.patch_embeddings.projection.weight", 4, ws, &E, e)) ||
        (rc = dst(m, "patch_embed.proj.weight", C0 * Cin * tt * P, &w, e)))
        return rc;
    filter_over_time(w, E, C0 * Cin, tt, P, inflate);
    if ((rc = copy(v, m, "patch_embed.proj.bias", "embeddings.patch_embeddings.projection.bias",
                   1, bs, e)) ||
        (rc = copy_wb(v, m, "patch_embed.norm.", "embeddings.norm.", C0, 0, 1, e)) ||
        (rc = swin_copy_blocks(v, m, e)) ||
        (rc = copy_wb(v, m, "norm.", "layernorm.", c->hidden, 0, 1, e)) ||
        (keep_head && (rc = copy_head(v, m, "head.", e))))
        return rc;
    tb_weights_each_unused(v->w, report_unused, m);
    return TUBELET_OK;
}

int tb_vit_copy(tb_vit *v, tubelet_model *m, int inflate, int keep_head, tb_err *e) {
    const tb_config *c = &m->cfg;
    const int64_t D = c->hidden;
    const int ts = c->family == TB_TIMESFORMER;
    int rc;
    if (v->swin) return swin_copy(v, m, inflate, keep_head, e);
    if ((rc = copy_patch(v, m, inflate, e)) || (rc = copy_positions(v, m, e)) ||
        (rc = ts ? copy_timesformer_blocks(v, m, e) : copy_vivit_blocks(v, m, e)) ||
        (rc = copy_wb(v, m, ts ? "timesformer.layernorm." : "vivit.layernorm.", "layernorm.", D,
                      0, 1, e)) ||
        (keep_head && (rc = copy_head(v, m, "classifier.", e))))
        return rc;
    tb_weights_each_unused(v->w, report_unused, m);
    return TUBELET_OK;
}
