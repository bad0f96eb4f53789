/* The config.json readers and writers the family files' config entries share (config.h,
 * tb_cfg_*): below the families, which call them, and config.c, which calls the families. */
#include "config.h"

#include <math.h>
#include <stdio.h>

#include <cjson/cJSON.h>

/* Reads an integer field in [lo, hi]; absent → keeps *out (the HF default). */
int tb_cfg_int(const cJSON *j, const char *key, int *out, int lo, int hi, const char *path,
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

int tb_cfg_bool(const cJSON *j, const char *key, int *out, const char *path, tb_err *e) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, key);
    if (!v || cJSON_IsNull(v)) return TUBELET_OK;
    if (!cJSON_IsBool(v))
        return tb_fail(e, TUBELET_ERR_CONFIG, "%s: field '%s' must be true or false", path, key);
    *out = cJSON_IsTrue(v);
    return TUBELET_OK;
}

/* An int, or a list of n ints (image_size may be [h, w]; ViViT's tubelet_size is [t, h, w]). */
int tb_cfg_ints(const cJSON *j, const char *key, int *out, int n, const char *path,
                tb_err *e) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, key);
    if (!v || cJSON_IsNull(v)) return TUBELET_OK;
    if (cJSON_IsNumber(v)) {
        int x = out[0];
        int rc = tb_cfg_int(j, key, &x, 1, 1 << 16, path, e);
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

/* An integer list of 1 to max entries, each in [lo, hi]; absent: *n and out kept. */
int tb_cfg_list(const cJSON *j, const char *key, int *out, int *n, int max, int lo, int hi,
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

/* Hugging Face's 2-d patch_size: an int, or [h, w]. */
int tb_cfg_patch_size(tb_config *c, const cJSON *j, const char *path, tb_err *e) {
    int patch[2] = {c->patch_h, c->patch_w};
    int rc = tb_cfg_ints(j, "patch_size", patch, 2, path, e);
    c->patch_h = patch[0], c->patch_w = patch[1];
    return rc;
}

void tb_cfg_write_patch_size(cJSON *j, const tb_config *c) {
    if (c->patch_h == c->patch_w) cJSON_AddNumberToObject(j, "patch_size", c->patch_h);
    else {
        int p[2] = {c->patch_h, c->patch_w};
        cJSON_AddItemToObject(j, "patch_size", cJSON_CreateIntArray(p, 2));
    }
}

const char *tb_cfg_act_name(tb_act a) {
    static const char *const act_names[] = {"gelu", "gelu_new", "quick_gelu", "relu", "silu"};
    return act_names[a];
}

void tb_cfg_write_vit_fields(cJSON *j, const tb_config *c) {
    cJSON_AddNumberToObject(j, "num_channels", c->num_channels);
    cJSON_AddNumberToObject(j, "num_frames", c->num_frames);
    cJSON_AddNumberToObject(j, "hidden_size", c->hidden);
    cJSON_AddNumberToObject(j, "num_hidden_layers", c->layers);
    cJSON_AddNumberToObject(j, "num_attention_heads", c->heads);
    cJSON_AddNumberToObject(j, "intermediate_size", c->intermediate);
    cJSON_AddStringToObject(j, "hidden_act", tb_cfg_act_name(c->act));
    cJSON_AddNumberToObject(j, "layer_norm_eps", c->ln_eps);
    cJSON_AddItemToObject(j, "initializer_range", tb_json_number(c->init_std));
    cJSON_AddBoolToObject(j, "qkv_bias", c->qkv_bias);
    tb_cfg_write_dropout(j, c);
}

void tb_cfg_write_dropout(cJSON *j, const tb_config *c) {
    cJSON_AddItemToObject(j, "hidden_dropout_prob", tb_json_number(c->hidden_dropout));
    cJSON_AddItemToObject(j, "attention_probs_dropout_prob", tb_json_number(c->attn_dropout));
}
