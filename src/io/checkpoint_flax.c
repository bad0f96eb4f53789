/* ViViT's scenic checkpoints as Hugging Face models. See checkpoint_flax.h. */
#include "checkpoint_flax.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flax_file.h"

/* How a Flax array becomes the torch tensor of its Hugging Face name (all as strided views). */
typedef enum {
    AS_IS,      /* LayerNorm scale / bias, biases, cls, positions */
    DENSE,      /* nn.Dense kernel (in, out) -> Linear weight (out, in) */
    HEADS_IN,   /* attention query/key/value kernel (hidden, heads, head_dim) -> (heads head_dim, hidden) */
    HEADS_BIAS, /* their bias (heads, head_dim) -> (heads head_dim) */
    HEADS_OUT,  /* attention out kernel (heads, head_dim, hidden) -> (hidden, heads head_dim) */
    CONV,       /* nn.Conv kernel (t, h, w, in, out) -> Conv3d weight (out, in, t, h, w); a 2D
                 * kernel (h, w, in, out) of scenic's "temporal_sampling" -> (out, in, 1, h, w) */
} how;

/* scenic name (from the parameters' root, '#' a block number) -> Hugging Face name */
typedef struct {
    const char *from, *to;
    how how;
} fx_row;

#define LN(f, t) {f "/scale", t ".weight", AS_IS}, {f "/bias", t ".bias", AS_IS}
#define LINEAR(f, t) {f "/kernel", t ".weight", DENSE}, {f "/bias", t ".bias", AS_IS}
#define PROJ(f, t) {f "/kernel", t ".weight", HEADS_IN}, {f "/bias", t ".bias", HEADS_BIAS}
/* nn.MultiHeadDotProductAttention -> ViViT's attention.attention.{query,key,value}, output.dense */
#define MHA(f, t)                                                                                 \
    PROJ(f "/query", t ".attention.query"), PROJ(f "/key", t ".attention.key"),                   \
        PROJ(f "/value", t ".attention.value"),                                                   \
        {f "/out/kernel", t ".output.dense.weight", HEADS_OUT},                                   \
        {f "/out/bias", t ".output.dense.bias", AS_IS}
/* scenic's EncoderBlock (Models 1, 2, 4): unnamed submodules, so Flax numbers them */
#define BLOCK(f, t)                                                                               \
    LN(f "/LayerNorm_0", t ".layernorm_before"),                                                  \
        MHA(f "/MultiHeadDotProductAttention_0", t ".attention"),                                 \
        LN(f "/LayerNorm_1", t ".layernorm_after"),                                               \
        LINEAR(f "/MlpBlock_0/Dense_0", t ".intermediate.dense"),                                 \
        LINEAR(f "/MlpBlock_0/Dense_1", t ".output.dense")
#define EMBEDDING                                                                                 \
    {"embedding/kernel", "vivit.embeddings.patch_embeddings.projection.weight", CONV},           \
        {"embedding/bias", "vivit.embeddings.patch_embeddings.projection.bias", AS_IS}
#define END {NULL, NULL, AS_IS}

/* Model 1 (ViViT, attention "spacetime", classifier "token"): the renaming of transformers'
 * convert_vivit_flax_to_pytorch.py. Model 4 (attention "factorized_dot_product_attention",
 * classifier "gap") has the same names without "cls". */
static const fx_row MODEL1_MAP[] = {
    EMBEDDING,
    {"cls", "vivit.embeddings.cls_token", AS_IS},
    {"Transformer/posembed_input/pos_embedding", "vivit.embeddings.position_embeddings", AS_IS},
    BLOCK("Transformer/encoderblock_#", "vivit.encoder.layer.#"),
    LN("Transformer/encoder_norm", "vivit.layernorm"),
    LINEAR("output_projection", "classifier"),
    END,
};

/* Model 2 (SpaceTimeViViT, "factorized_encoder"): vit_body's cls_<encoder> tokens and the two
 * encoders, each with its own positions and final LayerNorm. */
static const fx_row MODEL2_MAP[] = {
    EMBEDDING,
    {"cls_SpatialTransformer", "vivit.embeddings.cls_token", AS_IS},
    {"SpatialTransformer/posembed_input/pos_embedding", "vivit.embeddings.position_embeddings", AS_IS},
    BLOCK("SpatialTransformer/encoderblock_#", "vivit.encoder.layer.#"),
    LN("SpatialTransformer/encoder_norm", "vivit.layernorm"),
    {"cls_TemporalTransformer", "vivit.temporal_embeddings.cls_token", AS_IS},
    {"TemporalTransformer/posembed_input/pos_embedding",
     "vivit.temporal_embeddings.position_embeddings", AS_IS},
    BLOCK("TemporalTransformer/encoderblock_#", "vivit.temporal_encoder.layer.#"),
    LN("TemporalTransformer/encoder_norm", "vivit.temporal_layernorm"),
    LINEAR("output_projection", "classifier"),
    END,
};

/* Model 3 (EncoderFactorizedSelfAttentionBlock, "factorized_self_attention_block"): named
 * submodules per axis; space is the block's attention, time its temporal attention. */
#define M3B "Transformer/encoderblock_#"
#define M3T "vivit.encoder.layer.#"
static const fx_row MODEL3_MAP[] = {
    EMBEDDING,
    {"Transformer/posembed_input/pos_embedding", "vivit.embeddings.position_embeddings", AS_IS},
    LN(M3B "/LayerNorm_space", M3T ".layernorm_before"),
    MHA(M3B "/MultiHeadDotProductAttention_space", M3T ".attention"),
    LN(M3B "/LayerNorm_time", M3T ".temporal_layernorm"),
    MHA(M3B "/MultiHeadDotProductAttention_time", M3T ".temporal_attention"),
    LN(M3B "/LayerNorm_mlp", M3T ".layernorm_after"),
    LINEAR(M3B "/MlpBlock/Dense_0", M3T ".intermediate.dense"),
    LINEAR(M3B "/MlpBlock/Dense_1", M3T ".output.dense"),
    LN("Transformer/encoder_norm", "vivit.layernorm"),
    LINEAR("output_projection", "classifier"),
    END,
};

/* ---- matching and renaming ---- */

static int match(const char *pat, const char *name, long *num) {
    *num = -1;
    while (*pat) {
        if (*pat == '#') {
            if (*name < '0' || *name > '9') return 0;
            char *end;
            *num = strtol(name, &end, 10);
            if (end - name > 6) return 0;
            name = end, pat++;
            continue;
        }
        if (*pat++ != *name++) return 0;
    }
    return *name == 0;
}

static void render(char *out, size_t cap, const char *to, long num) {
    size_t n = 0;
    for (const char *p = to; *p && n + 1 < cap; p++) {
        if (*p == '#') n += (size_t)snprintf(out + n, cap - n, "%ld", num);
        else out[n++] = *p;
        if (n >= cap) n = cap - 1;
    }
    out[n] = 0;
}

/* ---- layouts ---- */

static void set2(tf_tensor *t, int64_t a, int64_t b, int64_t sa, int64_t sb) {
    t->ndim = 2;
    t->shape[0] = a, t->shape[1] = b, t->stride[0] = sa, t->stride[1] = sb;
}

/* The view of the row-major Flax array s that is its torch tensor. */
static int torch_view(const tf_tensor *s, how how, tf_tensor *t, const char *path, tb_err *e) {
    static const int NDIM[] = {0, 2, 3, 2, 3, 5};
    const int64_t *d = s->shape;
    *t = *s;
    if (how != AS_IS && s->ndim != NDIM[how] && !(how == CONV && s->ndim == 4))
        return tb_fail(e, TUBELET_ERR_SHAPE, "%s: '%s' has %d dimensions; a Flax %s has %d", path,
                       s->name, s->ndim,
                       how == DENSE ? "Dense kernel" : how == CONV ? "Conv kernel" : "attention array",
                       NDIM[how]);
    switch (how) {
    case AS_IS: break;
    case DENSE: set2(t, d[1], d[0], 1, d[1]); break;
    case HEADS_IN: set2(t, d[1] * d[2], d[0], 1, d[1] * d[2]); break;
    case HEADS_BIAS:
        t->ndim = 1, t->shape[0] = d[0] * d[1], t->stride[0] = 1;
        break;
    case HEADS_OUT: set2(t, d[2], d[0] * d[1], 1, d[2]); break;
    case CONV: {
        const int k = s->ndim - 4; /* 1: (t, h, w, in, out); 0: (h, w, in, out) */
        const int64_t kt = k ? d[0] : 1, kh = d[k], kw = d[k + 1], in = d[k + 2], out = d[k + 3];
        t->ndim = 5;
        const int64_t shape[5] = {out, in, kt, kh, kw},
                      stride[5] = {1, out, kh * kw * in * out, kw * in * out, in * out};
        memcpy(t->shape, shape, sizeof shape);
        memcpy(t->stride, stride, sizeof stride);
        break;
    }
    }
    /* always copied into float32 (checkpoint.c copies what is not contiguous): most arrays need
     * it anyway (transposed), and reading the rest in place from the map would fault whole page
     * cache folios of the file back into the resident set */
    t->contiguous = 0;
    return TUBELET_OK;
}

/* ---- what the tensors point into ---- */
typedef struct {
    fx_file *f;
    float **owned; /* Model 4's reordered heads */
    int n_owned;
} keep_t;

void tb_flax_ckpt_free(void *p) {
    keep_t *k = p;
    if (!k) return;
    for (int i = 0; i < k->n_owned; i++) tb_free(k->owned[i]);
    free(k->owned);
    fx_close(k->f);
    free(k);
}

/* scenic's factorized_dot_product_attention gives the first half of the heads to time and the
 * second to space; tubelet's Model 4 the first half to space (docs/vivit-variants.md). A float32
 * copy of s with the two halves of its heads axis swapped. */
static int swap_head_halves(keep_t *k, const tf_tensor *s, how how, tf_tensor *out,
                            const char *path, tb_err *e) {
    const int axis = how == HEADS_IN ? 1 : 0;
    if (s->ndim != (how == HEADS_BIAS ? 2 : 3) || s->shape[axis] % 2)
        return tb_fail(e, TUBELET_ERR_SHAPE, "%s: '%s': factorised dot-product attention needs an "
                       "even number of heads", path, s->name);
    const int64_t n = tf_numel(s);
    int64_t outer = 1, inner = 1;
    for (int d = 0; d < axis; d++) outer *= s->shape[d];
    for (int d = axis + 1; d < s->ndim; d++) inner *= s->shape[d];
    const int64_t half = s->shape[axis] / 2 * inner;
    float *buf = tb_alloc((size_t)(n ? n : 1) * sizeof(float));
    float **o = realloc(k->owned, sizeof *o * (size_t)(k->n_owned + 1));
    if (o) k->owned = o;
    if (!buf || !o) {
        tb_free(buf);
        return tb_fail(e, TUBELET_ERR_MEMORY, "%s: out of memory", path);
    }
    k->owned[k->n_owned++] = buf;
    if (tf_to_f32(s, buf))
        return tb_fail(e, TUBELET_ERR_FORMAT, "%s: '%s' is not a float array", path, s->name);
    for (int64_t i = 0; i < outer; i++) {
        float *a = buf + i * 2 * half, *b = a + half;
        for (int64_t j = 0; j < half; j++) {
            float x = a[j];
            a[j] = b[j], b[j] = x;
        }
    }
    *out = *s;
    out->dtype = TP_F32, out->base = (const uint8_t *)buf, out->contiguous = 1;
    return TUBELET_OK;
}

/* ---- the model and its config ---- */

enum { M1 = 1, M2, M3, M4 };

static const tf_tensor *need(const fx_file *f, const char *name, int ndim, const char *path,
                             tb_err *e) {
    const tf_tensor *t = fx_find(f, name);
    if (!t || t->ndim != ndim) {
        tb_fail(e, TUBELET_ERR_FORMAT, "%s: %s '%s'%s (%d dimensions)", path,
                t ? "unexpected shape of" : "no array", name, t ? "" : " in the ViViT parameters", ndim);
        return NULL;
    }
    return t;
}

static int which_model(const fx_file *f, const char *path, const tb_log *log, int want_config,
                       int *model, tb_err *e) {
    if (fx_has(f, "SpatialTransformer")) return *model = M2, TUBELET_OK;
    if (fx_has(f, "Transformer/encoderblock_0/MultiHeadDotProductAttention_space")) {
        if (want_config)
            tb_warn(log, "%s: factorised self-attention (Model 3): assuming attention_order "
                    "'space_time' (spatial, then temporal attention, as in the paper); tubelet "
                    "does not run scenic's 'time_space' order", path);
        return *model = M3, TUBELET_OK;
    }
    if (fx_has(f, "Transformer/encoderblock_0/MultiHeadDotProductAttention_0")) {
        *model = fx_has(f, "cls") ? M1 : M4;
        if (*model == M4 && want_config)
            tb_warn(log, "%s: no 'cls' token: read as Model 4 (factorised dot-product attention, "
                    "classifier 'gap'), whose parameters are those of Model 1 without one", path);
        return TUBELET_OK;
    }
    return tb_fail(e, TUBELET_ERR_FORMAT, "%s: no ViViT parameters under '%s' (no "
                   "Transformer/encoderblock_0 or SpatialTransformer): not a scenic ViViT checkpoint",
                   path, fx_root(f)[0] ? fx_root(f) : "/");
}

static int n_blocks(const fx_file *f, const char *encoder) {
    char name[128];
    int n = 0;
    for (;;) {
        snprintf(name, sizeof name, "%s/encoderblock_%d", encoder, n);
        if (!fx_has(f, name)) return n;
        n++;
    }
}

/* Heads and MLP size of an encoder's first block. */
static int block_sizes(const fx_file *f, const char *encoder, int model, int D, int *heads,
                       int *mlp, int *bias, const char *path, tb_err *e) {
    char name[160];
    const char *attn = model == M3 ? "MultiHeadDotProductAttention_space" : "MultiHeadDotProductAttention_0",
               *fc = model == M3 ? "MlpBlock" : "MlpBlock_0";
    snprintf(name, sizeof name, "%s/encoderblock_0/%s/query/kernel", encoder, attn);
    const tf_tensor *q = need(f, name, 3, path, e);
    if (!q) return TUBELET_ERR_FORMAT;
    if (q->shape[0] != D || q->shape[1] * q->shape[2] != D)
        return tb_fail(e, TUBELET_ERR_UNSUPPORTED, "%s: '%s' has shape [%lld, %lld, %lld]: heads "
                       "times head size must equal the hidden size %d", path, name,
                       (long long)q->shape[0], (long long)q->shape[1], (long long)q->shape[2], D);
    *heads = (int)q->shape[1];
    snprintf(name, sizeof name, "%s/encoderblock_0/%s/query/bias", encoder, attn);
    *bias = fx_find(f, name) != NULL;
    snprintf(name, sizeof name, "%s/encoderblock_0/%s/Dense_0/kernel", encoder, fc);
    const tf_tensor *fc1 = need(f, name, 2, path, e);
    if (!fc1) return TUBELET_ERR_FORMAT;
    *mlp = (int)fc1->shape[1];
    return TUBELET_OK;
}

/* A square grid of n patches: its side, or 0. */
static int64_t square(int64_t n) {
    int64_t g = (int64_t)llround(sqrt((double)n));
    return g > 0 && g * g == n ? g : 0;
}

/* The patch grid from the position embeddings: Model 2's spatial ones give one frame's grid
 * (square) and its temporal ones the frames; Models 1, 3, 4 hold t h w positions together,
 * which is read as 224 x 224 frames, as every published ViViT, when it divides. */
static int grid(const fx_file *f, int model, const int64_t patch[3], const char *path,
                const tb_log *log, int64_t g[3], tb_err *e) {
    const char *enc = model == M2 ? "SpatialTransformer" : "Transformer";
    char name[128];
    snprintf(name, sizeof name, "%s/posembed_input/pos_embedding", enc);
    const tf_tensor *pos = need(f, name, 3, path, e);
    if (!pos) return TUBELET_ERR_FORMAT;
    const int64_t P = pos->shape[1] - (model == M1 || model == M2);
    if (P < 1)
        return tb_fail(e, TUBELET_ERR_SHAPE, "%s: '%s' holds no patch positions", path, name);
    if (model == M2) {
        const tf_tensor *tp = need(f, "TemporalTransformer/posembed_input/pos_embedding", 3, path, e);
        if (!tp) return TUBELET_ERR_FORMAT;
        g[0] = tp->shape[1] - 1, g[1] = g[2] = square(P);
        if (g[1] && g[0] > 0) return TUBELET_OK;
        return tb_fail(e, TUBELET_ERR_CONFIG, "%s: %lld spatial positions are not a square grid; "
                       "pass --config FILE (a config.json with image_size)", path, (long long)P);
    }
    g[1] = 224 / patch[1], g[2] = 224 / patch[2];
    if (224 % patch[1] == 0 && 224 % patch[2] == 0 && P > 0 && P % (g[1] * g[2]) == 0) {
        g[0] = P / (g[1] * g[2]);
        tb_warn(log, "%s: ViViT checkpoints do not record their input size: reading %lld "
                "positions as %lld frames of 224 x 224 (pass --config FILE, or put a config.json "
                "beside the file, if not)", path, (long long)P, (long long)(g[0] * patch[0]));
        return TUBELET_OK;
    }
    return tb_fail(e, TUBELET_ERR_CONFIG, "%s: %lld positions do not say the number of frames and "
                   "the image size (they are not a grid of 224 x 224 frames); pass --config FILE "
                   "(a config.json with num_frames and image_size)", path, (long long)P);
}

static int infer_config(const fx_file *f, int model, const char *path, const tb_log *log,
                        char **out, tb_err *e) {
    const tf_tensor *emb = fx_find(f, "embedding/kernel"), *head = fx_find(f, "output_projection/kernel");
    if (!emb || (emb->ndim != 5 && emb->ndim != 4))
        return tb_fail(e, TUBELET_ERR_FORMAT, "%s: no 'embedding/kernel' of 4 or 5 dimensions "
                       "(scenic's patch embedding)", path);
    if (fx_has(f, "pre_logits"))
        return tb_fail(e, TUBELET_ERR_UNSUPPORTED, "%s: 'pre_logits' (representation_size) is not "
                       "supported: Hugging Face's ViViT classifies the encoder's output directly",
                       path);
    for (int d = 0; d < emb->ndim; d++)
        if (emb->shape[d] < 1 || emb->shape[d] > (1 << 16))
            return tb_fail(e, TUBELET_ERR_SHAPE, "%s: 'embedding/kernel' has a dimension of %lld",
                           path, (long long)emb->shape[d]);
    const int k = emb->ndim - 4;
    const int64_t patch[3] = {k ? emb->shape[0] : 1, emb->shape[k], emb->shape[k + 1]};
    const int D = (int)emb->shape[k + 3];
    int heads, mlp, bias, rc;
    const char *enc = model == M2 ? "SpatialTransformer" : "Transformer";
    if ((rc = block_sizes(f, enc, model, D, &heads, &mlp, &bias, path, e))) return rc;
    if (model == M4 && heads % 2)
        return tb_fail(e, TUBELET_ERR_UNSUPPORTED, "%s: %d heads: factorised dot-product attention "
                       "splits them in two halves", path, heads);
    int t_layers = 0;
    if (model == M2) {
        int th, tm, tb;
        if ((rc = block_sizes(f, "TemporalTransformer", model, D, &th, &tm, &tb, path, e))) return rc;
        if (th != heads || tm != mlp || tb != bias)
            return tb_fail(e, TUBELET_ERR_UNSUPPORTED, "%s: the temporal encoder has %d heads and "
                           "MLP size %d, the spatial one %d and %d; tubelet's factorised encoder "
                           "uses one of each", path, th, tm, heads, mlp);
        t_layers = n_blocks(f, "TemporalTransformer");
    }
    int64_t g[3] = {0, 0, 0};
    if ((rc = grid(f, model, patch, path, log, g, e))) return rc;
    cJSON *j = cJSON_CreateObject();
    if (!j) return tb_fail(e, TUBELET_ERR_MEMORY, "%s: out of memory", path);
    static const char *const VARIANT[] = {"", "joint", "factorised_encoder",
                                          "factorised_self_attention", "factorised_dot_product"};
    const double size[2] = {(double)(g[1] * patch[1]), (double)(g[2] * patch[2])};
    const double tub[3] = {(double)patch[0], (double)patch[1], (double)patch[2]};
    cJSON_AddStringToObject(j, "model_type", "vivit");
    if (model != M1) cJSON_AddStringToObject(j, "model_variant", VARIANT[model]);
    if (size[0] == size[1]) cJSON_AddNumberToObject(j, "image_size", size[0]);
    else cJSON_AddItemToObject(j, "image_size", cJSON_CreateDoubleArray(size, 2));
    cJSON_AddNumberToObject(j, "num_frames", (double)(g[0] * patch[0]));
    cJSON_AddItemToObject(j, "tubelet_size", cJSON_CreateDoubleArray(tub, 3));
    cJSON_AddNumberToObject(j, "num_channels", (double)emb->shape[k + 2]);
    cJSON_AddNumberToObject(j, "hidden_size", D);
    cJSON_AddNumberToObject(j, "num_hidden_layers", n_blocks(f, enc));
    if (model == M2) cJSON_AddNumberToObject(j, "num_temporal_layers", t_layers);
    cJSON_AddNumberToObject(j, "num_attention_heads", heads);
    cJSON_AddNumberToObject(j, "intermediate_size", mlp);
    /* scenic: flax.linen.LayerNorm (eps 1e-6) and nn.gelu, whose default is the tanh
     * approximation: transformers' "gelu_fast", ViViT's default */
    cJSON_AddStringToObject(j, "hidden_act", "gelu_fast");
    cJSON_AddNumberToObject(j, "layer_norm_eps", 1e-6);
    cJSON_AddBoolToObject(j, "qkv_bias", bias);
    cJSON_AddNumberToObject(j, "num_labels", head && head->ndim == 2 ? (double)head->shape[1] : 0);
    *out = cJSON_Print(j);
    cJSON_Delete(j);
    return *out ? TUBELET_OK : tb_fail(e, TUBELET_ERR_MEMORY, "%s: out of memory", path);
}

/* Every array through the model's table. One not in the table keeps its name, so that loading
 * reports it as unexpected; an integer one nobody asks for is dropped. */
static int map_arrays(keep_t *k, int model, tb_ckpt_add_fn add, void *holder, const char *path,
                      tb_err *e) {
    const fx_row *map = model == M2 ? MODEL2_MAP : model == M3 ? MODEL3_MAP : MODEL1_MAP;
    for (int i = 0; i < fx_count(k->f); i++) {
        const tf_tensor *s = fx_at(k->f, i);
        const fx_row *r = map;
        long num = -1;
        while (r->from && !match(r->from, s->name, &num)) r++;
        int rc;
        if (!r->from) {
            rc = add(holder, s->name, s, path, e);
            if (rc && rc != TUBELET_ERR_FORMAT) return rc;
            continue;
        }
        char name[400];
        render(name, sizeof name, r->to, num);
        tf_tensor src = *s, view;
        if (model == M4 && (r->how == HEADS_IN || r->how == HEADS_BIAS || r->how == HEADS_OUT) &&
            (rc = swap_head_halves(k, s, r->how, &src, path, e)))
            return rc;
        if ((rc = torch_view(&src, r->how, &view, path, e)) || (rc = add(holder, name, &view, path, e)))
            return rc;
        /* copied into float32: its bytes in the file are not read again */
        fx_release(k->f, s->base, (size_t)tf_numel(s) * tp_dtype_size(s->dtype));
        if (src.base != s->base) tb_free(k->owned[--k->n_owned]); /* reordered heads, copied */
    }
    return TUBELET_OK;
}

int tb_flax_ckpt_read(const char *path, const tb_log *log, tb_ckpt_add_fn add, void *holder,
                      void **keep, char **config, tb_err *e) {
    keep_t *k = calloc(1, sizeof *k);
    *keep = k;
    if (config) *config = NULL;
    if (!k) return tb_fail(e, TUBELET_ERR_MEMORY, "%s: out of memory", path);
    int model = 0;
    int rc = fx_open(&k->f, path, e);
    if (!rc) fx_release_all(k->f); /* the pages its headers brought in */
    if (!rc) rc = which_model(k->f, path, log, config != NULL, &model, e);
    if (!rc && config) rc = infer_config(k->f, model, path, log, config, e);
    if (!rc) rc = map_arrays(k, model, add, holder, path, e);
    if (!rc) fx_release_all(k->f); /* the parameters are copies now; the file is not read again */
    if (rc && config) free(*config), *config = NULL;
    return rc;
}

