#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

const char *tb_family_name(tb_family f) {
    static const char *n[] = {"videomae", "timesformer", "vivit", "video_swin"};
    return n[f];
}

const char *tb_attn_name(tb_attn_type a) {
    static const char *n[] = {"joint_space_time", "divided_space_time", "space_only",
                              "local_global", "axial"};
    return n[a];
}

static const char *const vivit_variants[] = {"joint", "factorised_encoder",
                                             "factorised_self_attention", "factorised_dot_product"};

const char *tb_vivit_variant_name(tb_vivit_model v) {
    return v >= TB_VIVIT_M1 && v <= TB_VIVIT_M4 ? vivit_variants[v - 1] : "";
}

/* PretrainedConfig fields every Hugging Face config may carry; none changes inference. */
static const char *const generic_keys[] = {
    "architectures", "model_type", "torch_dtype", "dtype", "transformers_version", "id2label",
    "label2id", "num_labels", "problem_type", "_name_or_path", "return_dict",
    "output_hidden_states", "output_attentions", "torchscript", "use_bfloat16",
    "tie_word_embeddings", "is_encoder_decoder", "is_decoder", "chunk_size_feed_forward",
    "pruned_heads", "finetuning_task", "tokenizer_class", "prefix", "bos_token_id", "pad_token_id",
    "eos_token_id", "sep_token_id", "decoder_start_token_id", "task_specific_params",
    "initializer_range", "drop_path_rate",
    "add_cross_attention", "cross_attention_hidden_size", "tf_legacy_loss",
    "_attn_implementation_autoset", "_attn_implementation", "use_cache", NULL};

/* Training-time settings that every family has and tubelet_train uses. */
static const char *const dropout_keys[] = {"hidden_dropout_prob", "attention_probs_dropout_prob",
                                           NULL};

static const char *const videomae_keys[] = {
    "image_size", "patch_size", "num_channels", "num_frames", "tubelet_size", "hidden_size",
    "num_hidden_layers", "num_attention_heads", "intermediate_size", "hidden_act",
    "layer_norm_eps", "qkv_bias", "qv_bias", "use_mean_pooling", "decoder_num_attention_heads",
    "decoder_hidden_size", "decoder_num_hidden_layers", "decoder_intermediate_size",
    "norm_pix_loss", "layer_scale_init_value", NULL}; /* the last: tubelet's (STMixer) */
static const char *const timesformer_keys[] = {
    "image_size", "patch_size", "num_channels", "num_frames", "hidden_size",
    "num_hidden_layers", "num_attention_heads", "intermediate_size", "hidden_act",
    "layer_norm_eps", "qkv_bias", "attention_type", NULL};
static const char *const vivit_keys[] = {
    "image_size", "num_frames", "tubelet_size", "num_channels", "hidden_size",
    "num_hidden_layers", "num_attention_heads", "intermediate_size", "hidden_act",
    "layer_norm_eps", "qkv_bias", "pooler_act", "pooler_output_size",
    "model_variant", "num_temporal_layers", NULL}; /* the last two: Models 2-4, tubelet's own */
/* tubelet's own type (docs/video-swin.md): torchvision's SwinTransformer3d arguments */
static const char *const video_swin_keys[] = {
    "image_size", "num_frames", "num_channels", "patch_size", "embed_dim", "depths", "num_heads",
    "window_size", "mlp_ratio", "stochastic_depth_prob", "layer_norm_eps", NULL};

static int in_list(const char *const *list, const char *k) {
    for (; *list; list++)
        if (!strcmp(*list, k)) return 1;
    return 0;
}

/* Reads an integer field in [lo, hi]; absent → keeps *out (the HF default). */
static int get_int(const cJSON *j, const char *key, int *out, int lo, int hi, const char *path,
                   tb_err *e) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, key);
    if (!v || cJSON_IsNull(v)) return TUBELET_OK;
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || v->valuedouble < lo ||
        v->valuedouble > hi)
        return tb_fail(e, TUBELET_ERR_CONFIG, "%s: field '%s' must be an integer in [%d, %d]",
                       path, key, lo, hi);
    *out = (int)v->valuedouble;
    return TUBELET_OK;
}

static int get_bool(const cJSON *j, const char *key, int *out, const char *path, tb_err *e) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, key);
    if (!v || cJSON_IsNull(v)) return TUBELET_OK;
    if (!cJSON_IsBool(v))
        return tb_fail(e, TUBELET_ERR_CONFIG, "%s: field '%s' must be true or false", path, key);
    *out = cJSON_IsTrue(v);
    return TUBELET_OK;
}

/* An int, or a list of n ints (image_size may be [h, w]; ViViT's tubelet_size is [t, h, w]). */
static int get_ints(const cJSON *j, const char *key, int *out, int n, const char *path,
                    tb_err *e) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, key);
    if (!v || cJSON_IsNull(v)) return TUBELET_OK;
    if (cJSON_IsNumber(v)) {
        int x = out[0];
        int rc = get_int(j, key, &x, 1, 1 << 16, path, e);
        if (rc) return rc;
        for (int i = 0; i < n; i++) out[i] = x;
        return TUBELET_OK;
    }
    if (!cJSON_IsArray(v) || cJSON_GetArraySize(v) != n)
        return tb_fail(e, TUBELET_ERR_CONFIG, "%s: field '%s' must be an integer or a list of %d",
                       path, key, n);
    for (int i = 0; i < n; i++) {
        const cJSON *x = cJSON_GetArrayItem(v, i);
        if (!cJSON_IsNumber(x) || x->valuedouble != floor(x->valuedouble) || x->valuedouble < 1 ||
            x->valuedouble > (1 << 16))
            return tb_fail(e, TUBELET_ERR_CONFIG, "%s: field '%s' has a bad entry %d", path, key,
                           i);
        out[i] = (int)x->valuedouble;
    }
    return TUBELET_OK;
}

/* VideoMAEForPreTraining: "architectures" names it, and the decoder_* fields and norm_pix_loss
 * shape its decoder and targets (HF's defaults otherwise). */
static int parse_pretraining(tb_config *c, const cJSON *j, const char *path, tb_err *e) {
    const cJSON *arch = cJSON_GetObjectItemCaseSensitive(j, "architectures"), *a;
    cJSON_ArrayForEach(a, arch)
        if (cJSON_IsString(a) && !strcmp(a->valuestring, "VideoMAEForPreTraining")) c->pretraining = 1;
    int rc;
    if ((rc = get_int(j, "decoder_hidden_size", &c->dec_hidden, 1, 1 << 16, path, e)) ||
        (rc = get_int(j, "decoder_num_hidden_layers", &c->dec_layers, 0, 1 << 10, path, e)) ||
        (rc = get_int(j, "decoder_num_attention_heads", &c->dec_heads, 1, 1 << 10, path, e)) ||
        (rc = get_int(j, "decoder_intermediate_size", &c->dec_intermediate, 1, 1 << 18, path, e)) ||
        (rc = get_bool(j, "norm_pix_loss", &c->norm_pix_loss, path, e)))
        return rc;
    if (c->pretraining && c->dec_hidden % c->dec_heads)
        return tb_fail(e, TUBELET_ERR_CONFIG, "%s: decoder_hidden_size %d is not divisible by "
                       "decoder_num_attention_heads %d", path, c->dec_hidden, c->dec_heads);
    if (c->pretraining && !c->norm_pix_loss && c->num_channels != 3)
        return tb_fail(e, TUBELET_ERR_CONFIG, "%s: norm_pix_loss false needs 3 channels (the "
                       "targets are un-normalised with ImageNet's mean and std)", path);
    return TUBELET_OK;
}

static void set_defaults(tb_config *c, tb_family f) {
    memset(c, 0, sizeof *c);
    c->family = f;
    c->num_channels = 3;
    c->hidden = 768;
    c->layers = 12;
    c->heads = 12;
    c->intermediate = 3072;
    c->qkv_bias = 1;
    c->num_labels = 2;
    c->image_h = c->image_w = 224;
    c->act = TB_ACT_GELU;
    c->attn = TB_ATTN_JOINT;
    c->init_std = 0.02;
    switch (f) {
    case TB_VIDEOMAE:
        strcpy(c->model_type, "videomae");
        c->num_frames = 16, c->tubelet_t = 2, c->patch_h = c->patch_w = 16;
        c->ln_eps = 1e-12f, c->use_mean_pooling = 1;
        c->dec_hidden = 384, c->dec_layers = 4, c->dec_heads = 6, c->dec_intermediate = 1536;
        c->norm_pix_loss = 1;
        break;
    case TB_TIMESFORMER:
        strcpy(c->model_type, "timesformer");
        c->num_frames = 8, c->tubelet_t = 1, c->patch_h = c->patch_w = 16;
        c->ln_eps = 1e-6f, c->attn = TB_ATTN_DIVIDED;
        break;
    case TB_VIDEO_SWIN: /* torchvision's swin3d_t */
        strcpy(c->model_type, "video_swin");
        c->num_frames = 32, c->tubelet_t = 2, c->patch_h = c->patch_w = 4;
        c->ln_eps = 1e-5f;
        c->swin = (tb_swin_config){4, 96, {2, 2, 6, 2}, {3, 6, 12, 24}, {8, 7, 7}, 4.0, 0.1};
        break;
    case TB_VIVIT:
        strcpy(c->model_type, "vivit");
        c->num_frames = 32, c->tubelet_t = 2, c->patch_h = c->patch_w = 16;
        c->ln_eps = 1e-6f, c->act = TB_ACT_GELU_TANH;
        c->vivit_model = TB_VIVIT_M1, c->temporal_layers = 4; /* L_t of the paper's ViViT-B FE */
        break;
    }
}

/* id2label's keys must be exactly "0".."n-1": one pass over the object (a lookup per index
 * would be quadratic: 10^6 labels took 25 minutes). */
static int make_labels(tb_config *c, const cJSON *id2label, const char *path, tb_err *e) {
    c->labels = calloc((size_t)c->num_labels + 1, sizeof(char *)); /* num_labels may be 0 */
    if (!c->labels) return tb_fail(e, TUBELET_ERR_MEMORY, "%s: out of memory", path);
    for (const cJSON *v = id2label ? id2label->child : NULL; v; v = v->next) {
        char *end;
        long k = strtol(v->string, &end, 10);
        if (v->string[0] < '0' || v->string[0] > '9' || *end || k < 0 || k >= c->num_labels || (v->string[0] == '0' && v->string[1]))
            return tb_fail(e, TUBELET_ERR_CONFIG,
                           "%s: id2label key '%.32s' is not a class index in [0, %d): the keys "
                           "must be 0..%d, each once, without gaps", path, v->string,
                           c->num_labels, c->num_labels - 1);
        if (c->labels[k])
            return tb_fail(e, TUBELET_ERR_CONFIG, "%s: id2label key '%ld' appears twice", path, k);
        if (!cJSON_IsString(v))
            return tb_fail(e, TUBELET_ERR_CONFIG, "%s: id2label['%ld'] must be a string", path, k);
        if (!(c->labels[k] = strdup(v->valuestring)))
            return tb_fail(e, TUBELET_ERR_MEMORY, "%s: out of memory", path);
    }
    for (int i = 0; i < c->num_labels; i++) { /* no id2label: transformers' default names */
        if (c->labels[i]) continue;
        char buf[32];
        snprintf(buf, sizeof buf, "LABEL_%d", i);
        if (!(c->labels[i] = strdup(buf)))
            return tb_fail(e, TUBELET_ERR_MEMORY, "%s: out of memory", path);
    }
    return TUBELET_OK;
}

double tb_config_weight_bytes(const tb_config *c) {
    if (c->family == TB_VIDEO_SWIN) { /* per stage: its blocks' products, then patch merging */
        double n = (double)c->num_channels * c->tubelet_t * c->patch_h * c->patch_w *
                   c->swin.embed_dim;
        for (int i = 0; i < c->swin.stages; i++) {
            const double C = (double)tb_swin_width(c, i);
            const double table = (2.0 * c->swin.window[0] - 1) * (2.0 * c->swin.window[1] - 1) *
                                 (2.0 * c->swin.window[2] - 1) * c->swin.heads[i];
            const double mlp = 2 * C * (double)tb_swin_mlp(c, (int64_t)C);
            n += c->swin.depths[i] * (4 * C * C + mlp + table);
            if (i + 1 < c->swin.stages) n += 8 * C * C;
        }
        return 4.0 * (n + (double)c->hidden * c->num_labels);
    }
    double h = c->hidden, per_block = 4 * h * h + 2 * h * c->intermediate;
    double patch = (double)c->num_channels * c->tubelet_t * c->patch_h * c->patch_w * h;
    return 4.0 * (tb_n_blocks(c) * per_block + patch + h * c->num_labels);
}

/* Video Swin's stages must fit each other: as many head counts as depths, each stage's width a
 * multiple of its heads; patch and window sizes of three entries (checked when parsed). */
static int validate_swin(tb_config *c, const char *path, tb_err *e) {
    const tb_swin_config *w = &c->swin;
    int64_t blocks = 0;
    if (w->embed_dim > (1 << 16) >> (w->stages - 1))
        return tb_fail(e, TUBELET_ERR_CONFIG, "%s: embed_dim %d over %d stages gives a last width "
                       "of %lld, beyond any model", path, w->embed_dim, w->stages,
                       (long long)tb_swin_width(c, w->stages - 1));
    for (int i = 0; i < w->stages; i++) {
        const int64_t C = tb_swin_width(c, i);
        if (C % w->heads[i])
            return tb_fail(e, TUBELET_ERR_CONFIG, "%s: stage %d has width %lld (embed_dim %d x "
                           "2^%d), not divisible by its num_heads %d", path, i, (long long)C,
                           w->embed_dim, i, w->heads[i]);
        if (tb_swin_mlp(c, C) < 1)
            return tb_fail(e, TUBELET_ERR_CONFIG, "%s: mlp_ratio %g leaves stage %d's MLP with "
                           "no width", path, w->mlp_ratio, i);
        blocks += w->depths[i];
    }
    /* tb_config's single-width fields describe the last stage */
    c->hidden = (int)tb_swin_width(c, w->stages - 1), c->heads = w->heads[w->stages - 1];
    c->intermediate = (int)tb_swin_mlp(c, c->hidden), c->layers = (int)blocks;
    c->act = TB_ACT_GELU, c->qkv_bias = 1;
    return TUBELET_OK;
}

/* An integer list of 1 to max entries, each in [lo, hi]; absent: *n and out kept. */
static int get_list(const cJSON *j, const char *key, int *out, int *n, int max, int lo, int hi,
                    const char *path, tb_err *e) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, key);
    if (!v || cJSON_IsNull(v)) return TUBELET_OK;
    const int len = cJSON_IsArray(v) ? cJSON_GetArraySize(v) : 0;
    if (len < 1 || len > max)
        return tb_fail(e, TUBELET_ERR_CONFIG, "%s: field '%s' must be a list of 1 to %d integers",
                       path, key, max);
    for (int i = 0; i < len; i++) {
        const cJSON *x = cJSON_GetArrayItem(v, i);
        if (!cJSON_IsNumber(x) || x->valuedouble != floor(x->valuedouble) ||
            x->valuedouble < lo || x->valuedouble > hi)
            return tb_fail(e, TUBELET_ERR_CONFIG, "%s: field '%s' entry %d must be an integer in "
                           "[%d, %d]", path, key, i, lo, hi);
        out[i] = (int)x->valuedouble;
    }
    *n = len;
    return TUBELET_OK;
}

/* Video Swin's own fields (config.json of docs/video-swin.md). */
static int parse_swin(tb_config *c, const cJSON *j, const char *path, tb_err *e) {
    tb_swin_config *w = &c->swin;
    int patch[3] = {c->tubelet_t, c->patch_h, c->patch_w}, n = 3, nh = w->stages, nw = 3;
    int rc;
    if ((rc = get_list(j, "patch_size", patch, &n, 3, 1, 1 << 10, path, e))) return rc;
    if (n != 3)
        return tb_fail(e, TUBELET_ERR_CONFIG, "%s: patch_size must have 3 entries (frames, rows, "
                       "columns), not %d", path, n);
    c->tubelet_t = patch[0], c->patch_h = patch[1], c->patch_w = patch[2];
    if ((rc = get_int(j, "embed_dim", &w->embed_dim, 1, 1 << 16, path, e)) ||
        (rc = get_list(j, "depths", w->depths, &w->stages, TB_SWIN_MAX_STAGES, 1, 1 << 10, path,
                       e)) ||
        (rc = get_list(j, "num_heads", w->heads, &nh, TB_SWIN_MAX_STAGES, 1, 1 << 10, path, e)) ||
        (rc = get_list(j, "window_size", w->window, &nw, 3, 1, 1 << 10, path, e)))
        return rc;
    if (nh != w->stages)
        return tb_fail(e, TUBELET_ERR_CONFIG, "%s: depths has %d stages but num_heads %d: one "
                       "head count per stage", path, w->stages, nh);
    if (nw != 3)
        return tb_fail(e, TUBELET_ERR_CONFIG, "%s: window_size must have 3 entries (frames, "
                       "rows, columns), not %d", path, nw);
    /* each block holds a (heads, L, L) bias and a stage up to 8 (L, L) masks: bound L */
    if ((int64_t)w->window[0] * w->window[1] * w->window[2] > 4096)
        return tb_fail(e, TUBELET_ERR_CONFIG, "%s: window_size %dx%dx%d holds %lld tokens; at most "
                       "4096 per window", path, w->window[0], w->window[1], w->window[2],
                       (long long)w->window[0] * w->window[1] * w->window[2]);
    const char *const dkeys[] = {"mlp_ratio", "stochastic_depth_prob"};
    double *dst[] = {&w->mlp_ratio, &w->stochastic_depth}, hi[] = {64, 1};
    for (int k = 0; k < 2; k++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, dkeys[k]);
        if (!v || cJSON_IsNull(v)) continue;
        if (!cJSON_IsNumber(v) || !(v->valuedouble >= 0 && v->valuedouble <= hi[k]))
            return tb_fail(e, TUBELET_ERR_CONFIG, "%s: %s must be a number in [0, %g]", path,
                           dkeys[k], hi[k]);
        *dst[k] = v->valuedouble;
    }
    return TUBELET_OK;
}

static int validate(tb_config *c, const char *path, tb_err *e) {
    int rc;
    if (c->family == TB_VIDEO_SWIN && (rc = validate_swin(c, path, e))) return rc;
    if (c->hidden % c->heads)
        return tb_fail(e, TUBELET_ERR_CONFIG,
                       "%s: hidden_size %d is not divisible by num_attention_heads %d", path,
                       c->hidden, c->heads);
    if (c->image_h < c->patch_h || c->image_w < c->patch_w || c->num_frames < c->tubelet_t)
        return tb_fail(e, TUBELET_ERR_CONFIG,
                       "%s: image %dx%d x %d frames is smaller than one patch %dx%dx%d", path,
                       c->image_h, c->image_w, c->num_frames, c->tubelet_t, c->patch_h,
                       c->patch_w);
    if (tb_is_vivit(c, TB_VIVIT_M4) && c->heads % 2)
        return tb_fail(e, TUBELET_ERR_CONFIG,
                       "%s: factorised_dot_product splits the heads into spatial and temporal "
                       "halves: num_attention_heads %d must be even", path, c->heads);
    double tokens = (double)(c->num_frames / c->tubelet_t) * (c->image_h / c->patch_h) *
                    (c->image_w / c->patch_w);
    if (tokens > 1e6)
        return tb_fail(e, TUBELET_ERR_CONFIG, "%s: %.0f tokens per clip is beyond any model",
                       path, tokens);
    return TUBELET_OK;
}

int tb_config_parse(tb_config *c, const char *text, const char *path, const tb_log *log,
                    tb_err *e) {
    memset(c, 0, sizeof *c);
    cJSON *j = cJSON_Parse(text);
    if (!j) return tb_fail(e, TUBELET_ERR_FORMAT, "%s: not valid JSON", path);
    int rc = TUBELET_OK;
    if (!cJSON_IsObject(j)) {
        rc = tb_fail(e, TUBELET_ERR_FORMAT, "%s: expected a JSON object", path);
        goto done;
    }
    const cJSON *mt = cJSON_GetObjectItemCaseSensitive(j, "model_type");
    if (!cJSON_IsString(mt)) {
        rc = tb_fail(e, TUBELET_ERR_CONFIG, "%s: no \"model_type\" (expected videomae, "
                                            "timesformer, vivit or video_swin)", path);
        goto done;
    }
    const char *const *keys;
    if (!strcmp(mt->valuestring, "videomae")) set_defaults(c, TB_VIDEOMAE), keys = videomae_keys;
    else if (!strcmp(mt->valuestring, "timesformer"))
        set_defaults(c, TB_TIMESFORMER), keys = timesformer_keys;
    else if (!strcmp(mt->valuestring, "vivit")) set_defaults(c, TB_VIVIT), keys = vivit_keys;
    else if (!strcmp(mt->valuestring, "video_swin"))
        set_defaults(c, TB_VIDEO_SWIN), keys = video_swin_keys;
    else {
        rc = tb_fail(e, TUBELET_ERR_CONFIG,
                     "%s: model_type \"%.64s\" is not supported (tubelet runs videomae, "
                     "timesformer, vivit and video_swin)", path, mt->valuestring);
        goto done;
    }
    for (const cJSON *it = j->child; it; it = it->next)
        if (!in_list(generic_keys, it->string) && !in_list(keys, it->string) &&
            !in_list(dropout_keys, it->string))
            tb_warn(log, "%s: unknown field '%s' ignored", path, it->string);

    int hw[2] = {c->image_h, c->image_w}, patch[2] = {c->patch_h, c->patch_w};
    if ((rc = get_ints(j, "image_size", hw, 2, path, e))) goto done;
    c->image_h = hw[0], c->image_w = hw[1];
    if (c->family == TB_VIDEO_SWIN) {
        if ((rc = parse_swin(c, j, path, e))) goto done;
    } else if (c->family == TB_VIVIT) {
        int tub[3] = {c->tubelet_t, c->patch_h, c->patch_w};
        if ((rc = get_ints(j, "tubelet_size", tub, 3, path, e))) goto done;
        c->tubelet_t = tub[0], c->patch_h = tub[1], c->patch_w = tub[2];
    } else {
        if ((rc = get_ints(j, "patch_size", patch, 2, path, e))) goto done;
        c->patch_h = patch[0], c->patch_w = patch[1];
        if (c->family == TB_VIDEOMAE &&
            (rc = get_int(j, "tubelet_size", &c->tubelet_t, 1, 1 << 10, path, e)))
            goto done;
    }
    if ((rc = get_int(j, "num_channels", &c->num_channels, 1, 64, path, e)) ||
        (rc = get_int(j, "num_frames", &c->num_frames, 1, 1 << 14, path, e)) ||
        (rc = get_int(j, "hidden_size", &c->hidden, 1, 1 << 16, path, e)) ||
        (rc = get_int(j, "num_hidden_layers", &c->layers, 0, 1 << 10, path, e)) ||
        (rc = get_int(j, "num_attention_heads", &c->heads, 1, 1 << 10, path, e)) ||
        (rc = get_int(j, "intermediate_size", &c->intermediate, 1, 1 << 18, path, e)) ||
        (rc = get_bool(j, "qkv_bias", &c->qkv_bias, path, e)) ||
        /* transformers 5 writes VideoMAE's flag as qv_bias: the key has no bias either way */
        (rc = get_bool(j, "qv_bias", &c->qkv_bias, path, e)) ||
        (rc = get_bool(j, "use_mean_pooling", &c->use_mean_pooling, path, e)))
        goto done;

    if (c->family == TB_VIDEOMAE && (rc = parse_pretraining(c, j, path, e))) goto done;

    const cJSON *act = cJSON_GetObjectItemCaseSensitive(j, "hidden_act");
    if (act) {
        int a = cJSON_IsString(act) ? tb_act_parse(act->valuestring) : -1;
        if (a < 0) {
            rc = tb_fail(e, TUBELET_ERR_CONFIG,
                         "%s: hidden_act %.64s is not supported (use gelu, gelu_new, gelu_fast, "
                         "gelu_pytorch_tanh, quick_gelu, relu or silu)",
                         path, cJSON_IsString(act) ? act->valuestring : "(not a string)");
            goto done;
        }
        c->act = (tb_act)a;
    }
    for (int k = 0; dropout_keys[k]; k++) { /* a probability, as nn.Dropout takes it */
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, dropout_keys[k]);
        if (!v || cJSON_IsNull(v)) continue;
        if (!cJSON_IsNumber(v) || !(v->valuedouble >= 0 && v->valuedouble <= 1)) {
            rc = tb_fail(e, TUBELET_ERR_CONFIG, "%s: %s must be a number in [0, 1]", path,
                         dropout_keys[k]);
            goto done;
        }
        *(k ? &c->attn_dropout : &c->hidden_dropout) = v->valuedouble;
    }
    const cJSON *ls = cJSON_GetObjectItemCaseSensitive(j, "layer_scale_init_value");
    if (ls && !cJSON_IsNull(ls) && c->family == TB_VIDEOMAE) {
        if (!cJSON_IsNumber(ls) || !(ls->valuedouble >= 0) || ls->valuedouble > 1e6) {
            rc = tb_fail(e, TUBELET_ERR_CONFIG, "%s: layer_scale_init_value must be a number >= 0 "
                                                "(0: no layer scale)", path);
            goto done;
        }
        c->layer_scale = ls->valuedouble;
    }
    const cJSON *eps = cJSON_GetObjectItemCaseSensitive(j, "layer_norm_eps");
    if (eps) {
        /* it is kept as a float: below 1e-30 it would round to 0 (or a denormal) */
        if (!cJSON_IsNumber(eps) || !(eps->valuedouble >= 1e-30) || eps->valuedouble > 1) {
            rc = tb_fail(e, TUBELET_ERR_CONFIG, "%s: layer_norm_eps must be a number in [1e-30, 1]",
                         path);
            goto done;
        }
        c->ln_eps = (float)eps->valuedouble;
    }
    /* Used only when there are no weights: a small model trained from random weights needs
     * more than the 0.02 made for 768-wide layers (docs/pretraining.md) */
    const cJSON *ir = cJSON_GetObjectItemCaseSensitive(j, "initializer_range");
    if (ir) {
        if (!cJSON_IsNumber(ir) || !(ir->valuedouble > 0) || ir->valuedouble > 10) {
            rc = tb_fail(e, TUBELET_ERR_CONFIG, "%s: initializer_range must be a number in (0, 10]",
                         path);
            goto done;
        }
        c->init_std = ir->valuedouble;
    }
    if (c->family == TB_TIMESFORMER) {
        const cJSON *at = cJSON_GetObjectItemCaseSensitive(j, "attention_type");
        if (at) {
            const char *s = cJSON_IsString(at) ? at->valuestring : "";
            if (!strcmp(s, "divided_space_time")) c->attn = TB_ATTN_DIVIDED;
            else if (!strcmp(s, "joint_space_time")) c->attn = TB_ATTN_JOINT;
            else if (!strcmp(s, "space_only")) c->attn = TB_ATTN_SPACE;
            else if (!strcmp(s, "local_global")) c->attn = TB_ATTN_LOCAL_GLOBAL;
            else if (!strcmp(s, "axial")) c->attn = TB_ATTN_AXIAL;
            else {
                rc = tb_fail(e, TUBELET_ERR_CONFIG,
                             "%s: attention_type \"%.64s\" is not supported (divided_space_time, "
                             "joint_space_time, space_only, local_global or axial)", path, s);
                goto done;
            }
        }
    }
    if (c->family == TB_VIVIT) {
        const cJSON *mv = cJSON_GetObjectItemCaseSensitive(j, "model_variant");
        if (mv && !cJSON_IsNull(mv)) {
            const char *s = cJSON_IsString(mv) ? mv->valuestring : "";
            int v = 0;
            for (int k = 0; k < 4; k++)
                if (!strcmp(s, vivit_variants[k])) v = k + 1;
            if (!v) {
                rc = tb_fail(e, TUBELET_ERR_CONFIG,
                             "%s: model_variant \"%.64s\" is not supported (joint, "
                             "factorised_encoder, factorised_self_attention or "
                             "factorised_dot_product)", path, s);
                goto done;
            }
            c->vivit_model = (tb_vivit_model)v;
        }
        const cJSON *tl = cJSON_GetObjectItemCaseSensitive(j, "num_temporal_layers");
        if (tl && c->vivit_model != TB_VIVIT_M2)
            tb_warn(log, "%s: num_temporal_layers is used by model_variant factorised_encoder "
                         "only; ignored", path);
        else if ((rc = get_int(j, "num_temporal_layers", &c->temporal_layers, 1, 1 << 10, path, e)))
            goto done;
    }
    /* num_labels: id2label wins (it is what HF writes); then num_labels; HF's default is 2. */
    const cJSON *id2label = cJSON_GetObjectItemCaseSensitive(j, "id2label");
    if (id2label && !cJSON_IsObject(id2label)) {
        rc = tb_fail(e, TUBELET_ERR_CONFIG, "%s: id2label must be an object", path);
        goto done;
    }
    if (id2label) c->num_labels = cJSON_GetArraySize(id2label);
    else if ((rc = get_int(j, "num_labels", &c->num_labels, 0, 1 << 20, path, e))) goto done;
    if (c->pretraining) /* VideoMAEForPreTraining has no classifier, whatever id2label says */
        c->num_labels = 0, id2label = NULL;
    if ((rc = validate(c, path, e)) || (rc = make_labels(c, id2label, path, e))) goto done;
done:
    cJSON_Delete(j);
    if (rc) tb_config_free(c);
    return rc;
}

/* timesformer-base is timesformer-base-divided (the published facebook/timesformer-base-finetuned-
 * k400); the other schemes of the paper's Table 1 at the same shapes. vivit-base-m1..m4: the
 * ViViT paper's Models 1-4 at vivit-base's shapes (vivit-base is Model 1). */
static const char *const arch_names[] = {
    "videomae-base",          "timesformer-base",          "timesformer-base-space",
    "timesformer-base-joint", "timesformer-base-divided",  "timesformer-base-local-global",
    "timesformer-base-axial", "vivit-base",                "vivit-base-m1",
    "vivit-base-m2",          "vivit-base-m3",             "vivit-base-m4",
    "stmixer-vit-base",       "videomae-b-pretrain",       "videomae-tiny-pretrain",
    "video-swin-t",           "video-swin-s",              "video-swin-b",
    "video-swin-l",           NULL};

const char *tb_config_arch_name(int i) {
    if (i < 0 || i >= (int)(sizeof arch_names / sizeof *arch_names)) return NULL;
    return arch_names[i];
}

int tb_config_arch(tb_config *c, const char *arch, tb_err *e) {
    if (!strcmp(arch, "videomae-base")) {
        set_defaults(c, TB_VIDEOMAE); /* MCG-NJU/videomae-base-finetuned-kinetics */
    } else if (!strcmp(arch, "timesformer-base") || !strcmp(arch, "timesformer-base-divided")) {
        set_defaults(c, TB_TIMESFORMER); /* facebook/timesformer-base-finetuned-k400 */
    } else if (!strncmp(arch, "timesformer-base-", 17) &&
               (!strcmp(arch + 17, "space") || !strcmp(arch + 17, "joint") ||
                !strcmp(arch + 17, "local-global") || !strcmp(arch + 17, "axial"))) {
        set_defaults(c, TB_TIMESFORMER);
        const char *v = arch + 17;
        c->attn = !strcmp(v, "space")   ? TB_ATTN_SPACE
                  : !strcmp(v, "joint") ? TB_ATTN_JOINT
                  : !strcmp(v, "axial") ? TB_ATTN_AXIAL
                                        : TB_ATTN_LOCAL_GLOBAL;
    } else if (!strcmp(arch, "vivit-base")) {
        set_defaults(c, TB_VIVIT); /* google/vivit-b-16x2-kinetics400 */
    } else if (!strncmp(arch, "vivit-base-m", 12) && arch[12] >= '1' && arch[12] <= '4' &&
               !arch[13]) {
        /* the paper's ViViT-B, Models 1-4, at vivit-base's input (32x224², tubelet 2x16x16);
         * Model 2 with L_s = 12, L_t = 4 (ViViT-B FE) */
        set_defaults(c, TB_VIVIT);
        c->vivit_model = (tb_vivit_model)(arch[12] - '0');
    } else if (!strcmp(arch, "stmixer-vit-base")) {
        /* STMixer's backbone (seed 001, docs/stmixer-backbone.md): VideoMAE ViT-B at 16x224²,
         * LayerNorm eps 1e-6, final LayerNorm instead of mean pooling, layer scale, no head */
        set_defaults(c, TB_VIDEOMAE);
        c->ln_eps = 1e-6f, c->use_mean_pooling = 0, c->layer_scale = 0.1, c->num_labels = 0;
        return make_labels(c, NULL, arch, e); /* num_labels 0 */
    } else if (!strcmp(arch, "videomae-b-pretrain")) {
        /* VideoMAE-B masked pretraining (MCG-NJU/videomae-base): ViT-B encoder with its final
         * LayerNorm, decoder 384 wide, 4 blocks, 6 heads, normalised-pixel targets */
        set_defaults(c, TB_VIDEOMAE);
        c->pretraining = 1, c->use_mean_pooling = 0, c->num_labels = 0;
        return make_labels(c, NULL, arch, e);
    } else if (!strcmp(arch, "videomae-tiny-pretrain")) {
        /* a laptop-sized pretraining model, docs/pretraining.md's experiment: 8 frames of 32²,
         * patch 4, tubelet 2 (256 tokens), encoder 96 wide, 4 blocks, 4 heads, MLP 384, mean
         * pooling for fine-tuning; decoder 64 wide, 2 blocks, 4 heads, MLP 256; 0.5M parameters */
        set_defaults(c, TB_VIDEOMAE);
        c->image_h = c->image_w = 32, c->num_frames = 8, c->patch_h = c->patch_w = 4;
        c->hidden = 96, c->layers = 4, c->heads = 4, c->intermediate = 384;
        c->dec_hidden = 64, c->dec_layers = 2, c->dec_heads = 4, c->dec_intermediate = 256;
        c->pretraining = 1, c->num_labels = 0;
        return make_labels(c, NULL, arch, e);
    } else if (!strncmp(arch, "video-swin-", 11) && strchr("tsbl", arch[11]) && arch[11] &&
               !arch[12]) {
        /* the paper's Table 1 (torchvision's swin3d_t, _s, _b; L as Swin-L: C = 192), patch
         * 2x4x4, window 8x7x7, at 32x224² */
        set_defaults(c, TB_VIDEO_SWIN);
        tb_swin_config *w = &c->swin;
        const int deep = arch[11] != 't', mult = arch[11] == 'b' ? 4 : arch[11] == 'l' ? 6 : 3;
        w->embed_dim = arch[11] == 'b' ? 128 : arch[11] == 'l' ? 192 : 96;
        w->depths[2] = deep ? 18 : 6;
        for (int i = 0; i < 4; i++) w->heads[i] = mult << i;
        tb_err ignore = {{0}};
        validate_swin(c, arch, &ignore); /* the last stage's fields; the shapes fit */
    } else {
        memset(c, 0, sizeof *c);
        return tb_fail(e, TUBELET_ERR_ARG,
                       "unknown architecture '%s' (see `tubelet info --list`)", arch);
    }
    c->num_labels = 400;
    return make_labels(c, NULL, arch, e);
}

void tb_config_free_labels(tb_config *c) {
    if (c->labels)
        for (int i = 0; i < c->num_labels; i++) free(c->labels[i]);
    free(c->labels);
    c->labels = NULL;
}

void tb_config_free(tb_config *c) {
    if (c->labels)
        for (int i = 0; i < c->num_labels; i++) free(c->labels[i]);
    free(c->labels);
    c->labels = NULL;
}

/* The fields of the three Hugging Face configs. */
static void hf_fields(cJSON *j, const tb_config *c) {
    static const char *const act_names[] = {"gelu", "gelu_new", "quick_gelu", "relu", "silu"};
    if (c->family == TB_VIVIT) {
        int tub[3] = {c->tubelet_t, c->patch_h, c->patch_w};
        cJSON_AddItemToObject(j, "tubelet_size", cJSON_CreateIntArray(tub, 3));
    } else {
        if (c->patch_h == c->patch_w) cJSON_AddNumberToObject(j, "patch_size", c->patch_h);
        else {
            int p[2] = {c->patch_h, c->patch_w};
            cJSON_AddItemToObject(j, "patch_size", cJSON_CreateIntArray(p, 2));
        }
        if (c->family == TB_VIDEOMAE) cJSON_AddNumberToObject(j, "tubelet_size", c->tubelet_t);
    }
    cJSON_AddNumberToObject(j, "num_channels", c->num_channels);
    cJSON_AddNumberToObject(j, "num_frames", c->num_frames);
    cJSON_AddNumberToObject(j, "hidden_size", c->hidden);
    cJSON_AddNumberToObject(j, "num_hidden_layers", c->layers);
    cJSON_AddNumberToObject(j, "num_attention_heads", c->heads);
    cJSON_AddNumberToObject(j, "intermediate_size", c->intermediate);
    cJSON_AddStringToObject(j, "hidden_act", act_names[c->act]);
    cJSON_AddNumberToObject(j, "layer_norm_eps", c->ln_eps);
    cJSON_AddItemToObject(j, "initializer_range", tb_json_number(c->init_std));
    cJSON_AddBoolToObject(j, "qkv_bias", c->qkv_bias);
    cJSON_AddItemToObject(j, "hidden_dropout_prob", tb_json_number(c->hidden_dropout));
    cJSON_AddItemToObject(j, "attention_probs_dropout_prob", tb_json_number(c->attn_dropout));
    if (c->family == TB_VIDEOMAE) cJSON_AddBoolToObject(j, "use_mean_pooling", c->use_mean_pooling);
    if (c->pretraining) {
        cJSON_AddNumberToObject(j, "decoder_hidden_size", c->dec_hidden);
        cJSON_AddNumberToObject(j, "decoder_num_hidden_layers", c->dec_layers);
        cJSON_AddNumberToObject(j, "decoder_num_attention_heads", c->dec_heads);
        cJSON_AddNumberToObject(j, "decoder_intermediate_size", c->dec_intermediate);
        cJSON_AddBoolToObject(j, "norm_pix_loss", c->norm_pix_loss);
    }
    if (c->layer_scale > 0) cJSON_AddItemToObject(j, "layer_scale_init_value", tb_json_number(c->layer_scale));
    if (c->family == TB_TIMESFORMER)
        cJSON_AddStringToObject(j, "attention_type", tb_attn_name(c->attn));
    if (c->family == TB_VIVIT && c->vivit_model != TB_VIVIT_M1) /* absent: Hugging Face's model */
        cJSON_AddStringToObject(j, "model_variant", tb_vivit_variant_name(c->vivit_model));
    if (tb_is_vivit(c, TB_VIVIT_M2))
        cJSON_AddNumberToObject(j, "num_temporal_layers", c->temporal_layers);
}

/* Video Swin's config.json (docs/video-swin.md): torchvision's SwinTransformer3d arguments. */
static void swin_fields(cJSON *j, const tb_config *c) {
    const tb_swin_config *w = &c->swin;
    const int patch[3] = {c->tubelet_t, c->patch_h, c->patch_w};
    cJSON_AddNumberToObject(j, "num_channels", c->num_channels);
    cJSON_AddNumberToObject(j, "num_frames", c->num_frames);
    cJSON_AddItemToObject(j, "patch_size", cJSON_CreateIntArray(patch, 3));
    cJSON_AddNumberToObject(j, "embed_dim", w->embed_dim);
    cJSON_AddItemToObject(j, "depths", cJSON_CreateIntArray(w->depths, w->stages));
    cJSON_AddItemToObject(j, "num_heads", cJSON_CreateIntArray(w->heads, w->stages));
    cJSON_AddItemToObject(j, "window_size", cJSON_CreateIntArray(w->window, 3));
    cJSON_AddItemToObject(j, "mlp_ratio", tb_json_number(w->mlp_ratio));
    cJSON_AddItemToObject(j, "stochastic_depth_prob", tb_json_number(w->stochastic_depth));
    cJSON_AddNumberToObject(j, "layer_norm_eps", c->ln_eps);
    cJSON_AddItemToObject(j, "hidden_dropout_prob", tb_json_number(c->hidden_dropout));
    cJSON_AddItemToObject(j, "attention_probs_dropout_prob", tb_json_number(c->attn_dropout));
}

/* config.json as Hugging Face writes it for the family, so that a model tubelet trained or
 * fine-tuned loads in transformers too. */
char *tb_config_to_json(const tb_config *c) {
    static const char *const arch_names[] = {"VideoMAEForVideoClassification",
                                             "TimesformerForVideoClassification",
                                             "VivitForVideoClassification", "SwinTransformer3d"};
    cJSON *j = cJSON_CreateObject(), *arr = cJSON_CreateArray(), *id2 = cJSON_CreateObject(),
          *l2i = cJSON_CreateObject();
    if (!j || !arr || !id2 || !l2i) {
        cJSON_Delete(j), cJSON_Delete(arr), cJSON_Delete(id2), cJSON_Delete(l2i);
        return NULL;
    }
    cJSON_AddItemToArray(arr, cJSON_CreateString(c->pretraining ? "VideoMAEForPreTraining"
                                                                : arch_names[c->family]));
    cJSON_AddItemToObject(j, "architectures", arr);
    cJSON_AddStringToObject(j, "model_type", tb_family_name(c->family));
    if (c->image_h == c->image_w) cJSON_AddNumberToObject(j, "image_size", c->image_h);
    else {
        int hw[2] = {c->image_h, c->image_w};
        cJSON_AddItemToObject(j, "image_size", cJSON_CreateIntArray(hw, 2));
    }
    if (c->family == TB_VIDEO_SWIN) swin_fields(j, c);
    else hf_fields(j, c);
    for (int i = 0; i < c->num_labels; i++) {
        char key[32];
        snprintf(key, sizeof key, "%d", i);
        cJSON_AddStringToObject(id2, key, c->labels[i]);
        cJSON_AddNumberToObject(l2i, c->labels[i], i);
    }
    cJSON_AddItemToObject(j, "id2label", id2);
    cJSON_AddItemToObject(j, "label2id", l2i);
    cJSON_AddStringToObject(j, "torch_dtype", "float32");
    char *text = cJSON_Print(j);
    cJSON_Delete(j);
    return text;
}
