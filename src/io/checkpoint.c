/* Official checkpoints as Hugging Face models. See checkpoint.h. */
#include "checkpoint.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "checkpoint_flax.h"
#include "torch_file.h"

/* ---- name maps: official name (after the model's prefix) -> Hugging Face name ----
 * '#' is a block number. A pattern ending in '.' takes the rest of the name with it (weight,
 * bias). part k > 0: the k-th third along dimension 0 (a fused qkv split into q, k, v). */
typedef struct {
    const char *from, *to;
    int part;
} map_row;

/* facebookresearch/TimeSformer timesformer/models/vit.py, as transformers'
 * convert_timesformer_to_pytorch.py renames it. */
static const map_row TIMESFORMER_MAP[] = {
    {"cls_token", "timesformer.embeddings.cls_token", 0},
    {"pos_embed", "timesformer.embeddings.position_embeddings", 0},
    {"time_embed", "timesformer.embeddings.time_embeddings", 0},
    {"patch_embed.proj.", "timesformer.embeddings.patch_embeddings.projection.", 0},
    {"blocks.#.norm1.", "timesformer.encoder.layer.#.layernorm_before.", 0},
    {"blocks.#.attn.qkv.", "timesformer.encoder.layer.#.attention.attention.qkv.", 0},
    {"blocks.#.attn.proj.", "timesformer.encoder.layer.#.attention.output.dense.", 0},
    {"blocks.#.temporal_norm1.", "timesformer.encoder.layer.#.temporal_layernorm.", 0},
    {"blocks.#.temporal_attn.qkv.", "timesformer.encoder.layer.#.temporal_attention.attention.qkv.", 0},
    {"blocks.#.temporal_attn.proj.", "timesformer.encoder.layer.#.temporal_attention.output.dense.", 0},
    {"blocks.#.temporal_fc.", "timesformer.encoder.layer.#.temporal_dense.", 0},
    {"blocks.#.norm2.", "timesformer.encoder.layer.#.layernorm_after.", 0},
    {"blocks.#.mlp.fc1.", "timesformer.encoder.layer.#.intermediate.dense.", 0},
    {"blocks.#.mlp.fc2.", "timesformer.encoder.layer.#.output.dense.", 0},
    {"norm.", "timesformer.layernorm.", 0},
    {"head.", "classifier.", 0},
    {NULL, NULL, 0},
};

/* MCG-NJU/VideoMAE modeling_finetune.py / modeling_pretrain.py (the encoder), as transformers'
 * convert_videomae_to_pytorch.py renames it; STMixer's backbone has the same names, and its
 * layer scale gamma_1, gamma_2 become BEiT's lambda_1, lambda_2 (docs/stmixer-backbone.md). */
static const map_row VIDEOMAE_MAP[] = {
    {"patch_embed.proj.", "videomae.embeddings.patch_embeddings.projection.", 0},
    {"blocks.#.norm1.", "videomae.encoder.layer.#.layernorm_before.", 0},
    {"blocks.#.attn.qkv.weight", "videomae.encoder.layer.#.attention.attention.query.weight", 1},
    {"blocks.#.attn.qkv.weight", "videomae.encoder.layer.#.attention.attention.key.weight", 2},
    {"blocks.#.attn.qkv.weight", "videomae.encoder.layer.#.attention.attention.value.weight", 3},
    {"blocks.#.attn.q_bias", "videomae.encoder.layer.#.attention.attention.q_bias", 0},
    {"blocks.#.attn.v_bias", "videomae.encoder.layer.#.attention.attention.v_bias", 0},
    {"blocks.#.attn.proj.", "videomae.encoder.layer.#.attention.output.dense.", 0},
    {"blocks.#.norm2.", "videomae.encoder.layer.#.layernorm_after.", 0},
    {"blocks.#.mlp.fc1.", "videomae.encoder.layer.#.intermediate.dense.", 0},
    {"blocks.#.mlp.fc2.", "videomae.encoder.layer.#.output.dense.", 0},
    {"blocks.#.gamma_1", "videomae.encoder.layer.#.lambda_1", 0},
    {"blocks.#.gamma_2", "videomae.encoder.layer.#.lambda_2", 0},
    {"norm.", "videomae.layernorm.", 0},
    {"fc_norm.", "fc_norm.", 0},
    {"head.", "classifier.", 0},
    {NULL, NULL, 0},
};

/* Parts of a pretraining checkpoint that tubelet's encoder-only models do not use. */
static const char *const VIDEOMAE_DROPPED[] = {"decoder.", "mask_token", "encoder_to_decoder.", NULL};

/* Heads of the published ViT sizes (head size 64, but ViT-H/g): hidden size -> heads. */
static const int KNOWN_HEADS[][2] = {{192, 3}, {384, 6}, {768, 12}, {1024, 16}, {1280, 16}, {1408, 16}};

/* Matches name against pattern; the block number goes to *num, the rest of a '.'-ended pattern
 * to *rest. */
static int match(const char *pat, const char *name, long *num, const char **rest) {
    *num = -1, *rest = "";
    while (*pat) {
        if (*pat == '#') {
            if (*name < '0' || *name > '9') return 0;
            char *end;
            *num = strtol(name, &end, 10);
            if (end - name > 6) return 0;
            name = end, pat++;
            continue;
        }
        if (*pat != *name) return 0;
        if (pat[0] == '.' && !pat[1]) {
            *rest = name + 1;
            return **rest && !strchr(*rest, '.');
        }
        pat++, name++;
    }
    return *name == 0;
}

static void render(char *out, size_t cap, const char *to, long num, const char *rest) {
    size_t n = 0;
    for (const char *p = to; *p && n + 1 < cap; p++) {
        if (*p == '#') n += (size_t)snprintf(out + n, cap - n, "%ld", num);
        else out[n++] = *p;
        if (n >= cap) n = cap - 1;
    }
    out[n] = 0;
    snprintf(out + n, cap - n, "%s", rest);
}

/* ---- what the converted tensors hold on to ---- */
typedef struct {
    tf_file *f;
    st_tensor *ts;
    int n, cap;
    char **names;   /* one per ts */
    void **owned;   /* converted copies */
    int n_owned;
    void *keep;       /* what the tensors of another reader point into (checkpoint_flax.c) */
    void (*keep_free)(void *keep);
} holder;

static void holder_free(void *p) {
    holder *h = p;
    if (!h) return;
    for (int i = 0; i < h->n; i++) free(h->names[i]);
    for (int i = 0; i < h->n_owned; i++) tb_free(h->owned[i]);
    free(h->names), free(h->owned), free(h->ts);
    tf_close(h->f);
    if (h->keep_free) h->keep_free(h->keep);
    free(h);
}

/* Adds t (or its third `part` along dimension 0) under name: in place when contiguous f32, f16
 * or bf16 (weights.c converts the halves), else copied into float32. */
static int add_tensor(holder *h, const char *name, const tf_tensor *src, int part, const char *path,
                      tb_err *e) {
    tf_tensor t = *src;
    if (part) {
        if (t.ndim < 1 || t.shape[0] % 3)
            return tb_fail(e, TUBELET_ERR_SHAPE, "%s: tensor '%s' cannot be split in three along "
                           "its first dimension", path, src->name);
        t.shape[0] /= 3;
        t.base += (size_t)((part - 1) * t.shape[0] * t.stride[0]) * tp_dtype_size(t.dtype);
    }
    if (t.dtype != TP_F32 && t.dtype != TP_F16 && t.dtype != TP_BF16 && t.dtype != TP_F64)
        return tb_fail(e, TUBELET_ERR_FORMAT, "%s: tensor '%s' has dtype %s; weights must be "
                       "float32, float16, bfloat16 or float64", path, src->name, tp_dtype_name(t.dtype));
    if (h->n == h->cap) {
        int cap = h->cap ? 2 * h->cap : 64;
        st_tensor *ts = realloc(h->ts, sizeof *ts * (size_t)cap);
        if (ts) h->ts = ts;
        char **nm = realloc(h->names, sizeof *nm * (size_t)cap);
        if (nm) h->names = nm;
        if (!ts || !nm) return tb_fail(e, TUBELET_ERR_MEMORY, "%s: out of memory", path);
        h->cap = cap;
    }
    st_tensor *o = &h->ts[h->n];
    memset(o, 0, sizeof *o);
    if (!(h->names[h->n] = strdup(name))) return tb_fail(e, TUBELET_ERR_MEMORY, "%s: out of memory", path);
    h->n++;
    o->name = h->names[h->n - 1];
    o->ndim = t.ndim;
    for (int i = 0; i < t.ndim; i++) o->shape[i] = t.shape[i];
    const size_t numel = (size_t)tf_numel(&t);
    if (t.contiguous && t.dtype != TP_F64) {
        o->dtype = t.dtype == TP_F32 ? ST_F32 : t.dtype == TP_F16 ? ST_F16 : ST_BF16;
        o->data = t.base, o->nbytes = numel * tp_dtype_size(t.dtype);
        return TUBELET_OK;
    }
    float *buf = tb_alloc(numel ? numel * sizeof(float) : 1);
    void **ow = realloc(h->owned, sizeof *ow * (size_t)(h->n_owned + 1));
    if (ow) h->owned = ow;
    if (!buf || !ow) {
        tb_free(buf);
        return tb_fail(e, TUBELET_ERR_MEMORY, "%s: out of memory", path);
    }
    h->owned[h->n_owned++] = buf;
    tf_to_f32(&t, buf);
    o->dtype = ST_F32, o->data = buf, o->nbytes = numel * sizeof(float);
    return TUBELET_OK;
}

/* ---- the model inside the state dict ---- */
typedef enum { FAM_NONE, FAM_TIMESFORMER, FAM_VIDEOMAE } fam;

typedef struct {
    fam family;
    char prefix[128];   /* before patch_embed.proj.weight: "model.", "module.encoder.", ... */
    const tf_file *f;
} layout;

static int find_layout(const tf_file *f, const char *path, layout *l, tb_err *e) {
    static const char KEY[] = "patch_embed.proj.weight";
    memset(l, 0, sizeof *l);
    l->f = f;
    for (int i = 0; i < tf_count(f); i++) {
        const tf_tensor *t = tf_at(f, i);
        size_t n = strlen(t->name), k = sizeof KEY - 1;
        if (n < k || strcmp(t->name + n - k, KEY) || (n > k && t->name[n - k - 1] != '.')) continue;
        if (n - k >= sizeof l->prefix || !strncmp(t->name, "decoder", 7)) continue;
        if (l->family)
            return tb_fail(e, TUBELET_ERR_FORMAT, "%s: two models' patch embeddings ('%s%s' and "
                           "'%s'); give a file with one", path, l->prefix, KEY, t->name);
        memcpy(l->prefix, t->name, n - k);
        l->prefix[n - k] = 0;
        l->family = t->ndim == 4 ? FAM_TIMESFORMER : t->ndim == 5 ? FAM_VIDEOMAE : FAM_NONE;
        if (!l->family)
            return tb_fail(e, TUBELET_ERR_FORMAT, "%s: '%s' is neither a 2D (TimeSformer) nor a 3D "
                           "(VideoMAE) patch embedding", path, t->name);
    }
    if (!l->family)
        return tb_fail(e, TUBELET_ERR_FORMAT, "%s: no patch_embed.proj.weight: not a TimeSformer "
                       "or VideoMAE state dict", path);
    return TUBELET_OK;
}

/* The tensor <prefix><name>, or NULL. */
static const tf_tensor *get(const layout *l, const char *name) {
    char full[400];
    snprintf(full, sizeof full, "%s%s", l->prefix, name);
    return tf_find(l->f, full);
}

static int n_blocks(const layout *l) {
    int n = 0;
    char name[64];
    for (;;) {
        snprintf(name, sizeof name, "blocks.%d.norm1.weight", n);
        if (!get(l, name)) return n;
        n++;
    }
}

static int heads_for(int D, const char *path, const tb_log *log, tb_err *e, int *heads) {
    for (size_t i = 0; i < sizeof KNOWN_HEADS / sizeof *KNOWN_HEADS; i++)
        if (KNOWN_HEADS[i][0] == D) return *heads = KNOWN_HEADS[i][1], TUBELET_OK;
    if (D % 64 == 0) {
        *heads = D / 64;
        tb_warn(log, "%s: hidden size %d: assuming %d attention heads of 64 (pass --config with "
                "num_attention_heads if not)", path, D, *heads);
        return TUBELET_OK;
    }
    return tb_fail(e, TUBELET_ERR_CONFIG, "%s: the number of attention heads of hidden size %d "
                   "cannot be inferred; pass --config FILE (a config.json with "
                   "num_attention_heads)", path, D);
}

/* pySlowFast's "cfg" (YAML text): the integer after "<key>: " in section "<section>:". */
static int yaml_int(const char *yaml, const char *section, const char *key) {
    char sec[64];
    snprintf(sec, sizeof sec, "\n%s:\n", section);
    const size_t n = strlen(sec);
    const char *s = !yaml ? NULL : !strncmp(yaml, sec + 1, n - 1) ? yaml + n - 1 : strstr(yaml, sec);
    if (!s) return -1;
    if (s != yaml + n - 1) s += n;
    for (const char *line = s; *line == ' '; ) {
        const char *p = line;
        while (*p == ' ') p++;
        size_t k = strlen(key);
        if (!strncmp(p, key, k) && p[k] == ':' && p[k + 1] == ' ') return atoi(p + k + 2);
        const char *nl = strchr(line, '\n');
        if (!nl) break;
        line = nl + 1;
    }
    return -1;
}

static int timesformer_config(const layout *l, const char *path, const tb_log *log, cJSON *j,
                              tb_err *e) {
    const tf_tensor *pw = get(l, "patch_embed.proj.weight"), *pos = get(l, "pos_embed"),
                    *time = get(l, "time_embed"), *fc1 = get(l, "blocks.0.mlp.fc1.weight"),
                    *head = get(l, "head.weight");
    if (!pos || pos->ndim != 3 || !fc1 || fc1->ndim != 2)
        return tb_fail(e, TUBELET_ERR_FORMAT, "%s: a TimeSformer without %s", path,
                       !pos || pos->ndim != 3 ? "pos_embed (1, N + 1, D)" : "blocks.0.mlp.fc1.weight");
    const int D = (int)pw->shape[0];
    const int64_t N = pos->shape[1] - 1, g = (int64_t)llround(sqrt((double)N));
    if (g * g != N)
        return tb_fail(e, TUBELET_ERR_CONFIG, "%s: %lld patches are not a square grid; pass "
                       "--config FILE with image_size", path, (long long)N);
    int heads, frames;
    int rc = heads_for(D, path, log, e, &heads);
    if (rc) return rc;
    const char *attn = get(l, "blocks.0.temporal_fc.weight") ? "divided_space_time"
                       : time                                ? "joint_space_time"
                                                             : "space_only";
    if (time && time->ndim == 3) {
        frames = (int)time->shape[1];
    } else { /* space_only: the frames are not in the weights; pySlowFast's cfg may say */
        frames = yaml_int(tf_root_string(l->f, "cfg"), "DATA", "NUM_FRAMES");
        if (frames <= 0)
            return tb_fail(e, TUBELET_ERR_CONFIG, "%s: a space-only TimeSformer does not record "
                           "its number of frames; pass --config FILE (a config.json with "
                           "num_frames and attention_type \"space_only\")", path);
    }
    cJSON_AddStringToObject(j, "model_type", "timesformer");
    cJSON_AddNumberToObject(j, "image_size", (double)(g * pw->shape[2]));
    cJSON_AddNumberToObject(j, "patch_size", (double)pw->shape[2]);
    cJSON_AddNumberToObject(j, "num_channels", (double)pw->shape[1]);
    cJSON_AddNumberToObject(j, "num_frames", frames);
    cJSON_AddNumberToObject(j, "hidden_size", D);
    cJSON_AddNumberToObject(j, "num_hidden_layers", n_blocks(l));
    cJSON_AddNumberToObject(j, "num_attention_heads", heads);
    cJSON_AddNumberToObject(j, "intermediate_size", (double)fc1->shape[0]);
    cJSON_AddStringToObject(j, "attention_type", attn);
    cJSON_AddBoolToObject(j, "qkv_bias", get(l, "blocks.0.attn.qkv.bias") != NULL);
    cJSON_AddNumberToObject(j, "num_labels", head ? (double)head->shape[0] : 0);
    return TUBELET_OK;
}

static int videomae_config(const layout *l, const char *path, const tb_log *log, cJSON *j,
                           tb_err *e) {
    const tf_tensor *pw = get(l, "patch_embed.proj.weight"), *fc1 = get(l, "blocks.0.mlp.fc1.weight"),
                    *head = get(l, "head.weight");
    if (get(l, "pos_embed"))
        return tb_fail(e, TUBELET_ERR_UNSUPPORTED, "%s: learned position embeddings "
                       "(use_learnable_pos_emb) are not supported; tubelet's VideoMAE uses the "
                       "fixed sinusoid table", path);
    if (!fc1 || fc1->ndim != 2)
        return tb_fail(e, TUBELET_ERR_FORMAT, "%s: a VideoMAE without blocks.0.mlp.fc1.weight", path);
    const int D = (int)pw->shape[0];
    int heads;
    int rc = heads_for(D, path, log, e, &heads);
    if (rc) return rc;
    /* the sinusoid positions are not stored: frames and size are those of every published
     * VideoMAE (16 x 224 x 224) unless a config says otherwise */
    tb_warn(log, "%s: VideoMAE checkpoints do not record their input size: assuming 16 frames of "
            "224 x 224 (pass --config FILE, or put a config.json beside the file, if not)", path);
    cJSON_AddStringToObject(j, "model_type", "videomae");
    cJSON_AddNumberToObject(j, "image_size", 224);
    cJSON_AddNumberToObject(j, "patch_size", (double)pw->shape[3]);
    cJSON_AddNumberToObject(j, "tubelet_size", (double)pw->shape[2]);
    cJSON_AddNumberToObject(j, "num_channels", (double)pw->shape[1]);
    cJSON_AddNumberToObject(j, "num_frames", 16);
    cJSON_AddNumberToObject(j, "hidden_size", D);
    cJSON_AddNumberToObject(j, "num_hidden_layers", n_blocks(l));
    cJSON_AddNumberToObject(j, "num_attention_heads", heads);
    cJSON_AddNumberToObject(j, "intermediate_size", (double)fc1->shape[0]);
    cJSON_AddBoolToObject(j, "qkv_bias", get(l, "blocks.0.attn.q_bias") != NULL);
    cJSON_AddBoolToObject(j, "use_mean_pooling", get(l, "fc_norm.weight") != NULL);
    if (get(l, "blocks.0.gamma_1")) cJSON_AddNumberToObject(j, "layer_scale_init_value", 0.1);
    cJSON_AddNumberToObject(j, "num_labels", head ? (double)head->shape[0] : 0);
    return TUBELET_OK;
}

static int infer_config(const layout *l, const char *path, const tb_log *log, char **out, tb_err *e) {
    cJSON *j = cJSON_CreateObject();
    if (!j) return tb_fail(e, TUBELET_ERR_MEMORY, "%s: out of memory", path);
    int rc = l->family == FAM_TIMESFORMER ? timesformer_config(l, path, log, j, e)
                                          : videomae_config(l, path, log, j, e);
    /* both original codebases build their LayerNorms with eps 1e-6 and use exact GELU */
    cJSON_AddNumberToObject(j, "layer_norm_eps", 1e-6);
    cJSON_AddStringToObject(j, "hidden_act", "gelu");
    *out = rc ? NULL : cJSON_Print(j);
    cJSON_Delete(j);
    if (!rc && !*out) rc = tb_fail(e, TUBELET_ERR_MEMORY, "%s: out of memory", path);
    return rc;
}

static int dropped(const layout *l, const char *rel) {
    if (l->family != FAM_VIDEOMAE) return 0;
    for (int i = 0; VIDEOMAE_DROPPED[i]; i++)
        if (!strncmp(rel, VIDEOMAE_DROPPED[i], strlen(VIDEOMAE_DROPPED[i]))) return 1;
    return 0;
}

/* Every tensor through the family's table. A tensor outside the model's prefix or not in the
 * table keeps its name, so that loading reports it as unexpected; the pretraining decoder is
 * dropped. */
static int map_tensors(const layout *l, holder *h, const char *path, tb_err *e) {
    const map_row *map = l->family == FAM_TIMESFORMER ? TIMESFORMER_MAP : VIDEOMAE_MAP;
    const size_t np = strlen(l->prefix);
    for (int i = 0; i < tf_count(l->f); i++) {
        const tf_tensor *t = tf_at(l->f, i);
        const int in = !strncmp(t->name, l->prefix, np);
        int hits = 0;
        /* a pretraining checkpoint's decoder sits beside its "encoder." */
        const size_t outer = np >= 8 && !strcmp(l->prefix + np - 8, "encoder.") ? np - 8 : np;
        const char *rel = in ? t->name + np : t->name + outer;
        if ((in || !strncmp(t->name, l->prefix, outer)) && dropped(l, rel)) continue;
        for (const map_row *r = map; in && r->from; r++) {
            long num;
            const char *rest;
            if (!match(r->from, rel, &num, &rest)) continue;
            char name[400];
            render(name, sizeof name, r->to, num, rest);
            int rc = add_tensor(h, name, t, r->part, path, e);
            if (rc) return rc;
            hits++;
        }
        if (!hits) {
            int rc = add_tensor(h, t->name, t, 0, path, e);
            if (rc == TUBELET_ERR_FORMAT) continue; /* an integer buffer nobody asks for */
            if (rc) return rc;
        }
    }
    return TUBELET_OK;
}

int tb_ckpt_is_file(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* config.json in the checkpoint's directory, if there is one. */
static char *beside(const char *path) {
    const char *slash = strrchr(path, '/');
    size_t n = slash ? (size_t)(slash - path + 1) : 0;
    char *p = malloc(n + sizeof "config.json");
    if (!p) return NULL;
    memcpy(p, path, n);
    memcpy(p + n, "config.json", sizeof "config.json");
    struct stat st;
    if (stat(p, &st) != 0 || !S_ISREG(st.st_mode)) {
        free(p);
        return NULL;
    }
    return p;
}

/* checkpoint_flax.c adds its tensors (views of the msgpack file) through the same holder. */
static int add_plain(void *h, const char *name, const tf_tensor *t, const char *path, tb_err *e) {
    return add_tensor(h, name, t, 0, path, e);
}

int tb_ckpt_open(const char *path, const char *config_path, const tb_log *log, char **config_json,
                 char **config_name, tb_weights **w, tb_err *e) {
    *config_json = NULL, *config_name = NULL, *w = NULL;
    holder *h = calloc(1, sizeof *h);
    if (!h) return tb_fail(e, TUBELET_ERR_MEMORY, "%s: out of memory", path);
    char *cfg = config_path ? strdup(config_path) : beside(path), *flax_config = NULL;
    const int flax = tb_flax_ckpt_is(path); /* ViViT's scenic checkpoints (msgpack) */
    int rc = TUBELET_OK;
    layout l = {FAM_NONE, "", NULL};
    if (flax) {
        h->keep_free = tb_flax_ckpt_free;
        rc = tb_flax_ckpt_read(path, log, add_plain, h, &h->keep, cfg ? NULL : &flax_config, e);
    } else {
        rc = tf_open(&h->f, path, e);
        if (!rc) rc = find_layout(h->f, path, &l, e);
        if (!rc) rc = map_tensors(&l, h, path, e);
    }
    if (config_path && !cfg) rc = rc ? rc : tb_fail(e, TUBELET_ERR_MEMORY, "out of memory");
    if (!rc && cfg) {
        rc = tb_read_file(cfg, config_json, NULL, 1 << 24, e);
        *config_name = cfg, cfg = NULL;
    } else if (!rc) {
        if (flax) *config_json = flax_config, flax_config = NULL;
        else rc = infer_config(&l, path, log, config_json, e);
        size_t n = strlen(path) + 32;
        if (!rc && (*config_name = malloc(n))) snprintf(*config_name, n, "%s (inferred config)", path);
        else if (!rc) rc = tb_fail(e, TUBELET_ERR_MEMORY, "out of memory");
    }
    free(cfg), free(flax_config);
    if (rc) {
        holder_free(h);
        free(*config_json), free(*config_name);
        *config_json = NULL, *config_name = NULL;
        return rc;
    }
    return tb_weights_from_tensors(w, path, h->ts, h->n, h, holder_free, e);
}

char *tb_ckpt_preprocessor_json(const char *model_type) {
    /* the normalisation each codebase trained with: VideoMAE ImageNet's, TimeSformer 0.45/0.225 */
    const char *mean, *std;
    if (!strcmp(model_type, "vivit")) /* scenic (dmvr): shortest side 256, crop 224, zero-centred */
        return strdup("{\n  \"image_processor_type\": \"VivitImageProcessor\",\n  \"do_resize\": true,\n"
                      "  \"size\": {\"shortest_edge\": 256},\n  \"resample\": 2,\n"
                      "  \"do_center_crop\": true,\n  \"crop_size\": {\"height\": 224, \"width\": 224},\n"
                      "  \"do_rescale\": true,\n  \"rescale_factor\": 0.00784313725490196,\n"
                      "  \"offset\": true,\n  \"do_normalize\": false,\n"
                      "  \"image_mean\": [0.5, 0.5, 0.5],\n  \"image_std\": [0.5, 0.5, 0.5]\n}\n");
    if (!strcmp(model_type, "videomae")) mean = "0.485, 0.456, 0.406", std = "0.229, 0.224, 0.225";
    else if (!strcmp(model_type, "timesformer")) mean = "0.45, 0.45, 0.45", std = "0.225, 0.225, 0.225";
    else return NULL;
    const char *fmt =
        "{\n  \"image_processor_type\": \"VideoMAEImageProcessor\",\n  \"do_resize\": true,\n"
        "  \"size\": {\"shortest_edge\": 224},\n  \"resample\": 2,\n  \"do_center_crop\": true,\n"
        "  \"crop_size\": {\"height\": 224, \"width\": 224},\n  \"do_rescale\": true,\n"
        "  \"rescale_factor\": 0.00392156862745098,\n  \"do_normalize\": true,\n"
        "  \"image_mean\": [%s],\n  \"image_std\": [%s]\n}\n";
    size_t n = strlen(fmt) + strlen(mean) + strlen(std);
    char *s = malloc(n);
    if (s) snprintf(s, n, fmt, mean, std);
    return s;
}
