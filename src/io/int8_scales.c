#include "int8_scales.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

int tb_act_quant_valid(float scale, double zero_point) {
    return isfinite(scale) && scale >= 1e-30f && scale <= 1e30f && zero_point >= 0 &&
           zero_point <= 255 && zero_point == floor(zero_point);
}

/* The integer value of a JSON number item, or -1 when it is absent, not a number or not a
 * non-negative integer below 2^53. */
static int64_t count_of(const cJSON *item) {
    if (!cJSON_IsNumber(item)) return -1;
    const double v = item->valuedouble;
    return v >= 0 && v < 9007199254740992.0 && v == floor(v) ? (int64_t)v : -1;
}

static void warn_unknown(const cJSON *obj, const char *const *known, const char *where,
                         const char *path, const tb_log *log) {
    for (const cJSON *it = obj->child; it; it = it->next) {
        int ok = 0;
        for (int k = 0; known[k] && !ok; k++) ok = it->string && !strcmp(it->string, known[k]);
        if (!ok)
            tb_warn(log, "%s: unknown key '%.60s' %s ignored", path,
                    it->string ? it->string : "", where);
    }
}

static int parse_layer(const cJSON *l, int i, const char *path, const tb_scales_model *model,
                       tb_act_quant *q, const tb_log *log, tb_err *e) {
    if (!cJSON_IsObject(l))
        return tb_fail(e, TUBELET_ERR_FORMAT, "%s: layers[%d] is not an object", path, i);
    static const char *const known[] = {"name", "out", "in", "scale", "zero_point", NULL};
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(l, "name");
    const cJSON *scale = cJSON_GetObjectItemCaseSensitive(l, "scale");
    const cJSON *zp = cJSON_GetObjectItemCaseSensitive(l, "zero_point");
    const int64_t out = count_of(cJSON_GetObjectItemCaseSensitive(l, "out"));
    const int64_t in = count_of(cJSON_GetObjectItemCaseSensitive(l, "in"));
    if (!cJSON_IsString(name) || strcmp(name->valuestring, model->name[i]))
        return tb_fail(e, TUBELET_ERR_FORMAT, "%s: layers[%d] is %s%.60s%s, but this model's "
                       "layer %d is '%s' (a file calibrated for another model?)", path, i,
                       cJSON_IsString(name) ? "'" : "", cJSON_IsString(name)
                       ? name->valuestring : "unnamed", cJSON_IsString(name) ? "'" : "", i,
                       model->name[i]);
    if (out != model->out[i] || in != model->in[i])
        return tb_fail(e, TUBELET_ERR_FORMAT, "%s: layer '%s' is %lld x %lld in the file, %lld "
                       "out x %lld in in this model", path, model->name[i], (long long)out,
                       (long long)in, (long long)model->out[i], (long long)model->in[i]);
    if (!cJSON_IsNumber(scale) || !cJSON_IsNumber(zp) ||
        !tb_act_quant_valid((float)scale->valuedouble, zp->valuedouble)) /* as it is kept */
        return tb_fail(e, TUBELET_ERR_VALUE, "%s: layer '%s': scale must be a number in [1e-30, "
                       "1e30] and zero_point an integer in [0, 255]", path, model->name[i]);
    warn_unknown(l, known, "in a layer", path, log);
    q->scale = (float)scale->valuedouble, q->zero_point = (int32_t)zp->valuedouble;
    return TUBELET_OK;
}

static int parse(const cJSON *root, const char *path, const tb_scales_model *model,
                 tb_act_quant *q, const tb_log *log, tb_err *e) {
    if (!cJSON_IsObject(root))
        return tb_fail(e, TUBELET_ERR_FORMAT, "%s: not a JSON object", path);
    const cJSON *format = cJSON_GetObjectItemCaseSensitive(root, "format");
    if (!cJSON_IsString(format) || strcmp(format->valuestring, TB_SCALES_FORMAT))
        return tb_fail(e, TUBELET_ERR_FORMAT, "%s: not an int8 scales file (\"format\" is not "
                       "\"%s\")", path, TB_SCALES_FORMAT);
    if (count_of(cJSON_GetObjectItemCaseSensitive(root, "version")) != 1)
        return tb_fail(e, TUBELET_ERR_FORMAT, "%s: \"version\" must be 1 (the only version this "
                       "tubelet reads)", path);
    const cJSON *arch = cJSON_GetObjectItemCaseSensitive(root, "architecture");
    if (!cJSON_IsString(arch))
        return tb_fail(e, TUBELET_ERR_FORMAT, "%s: no \"architecture\" string", path);
    if (strcmp(arch->valuestring, model->arch))
        return tb_fail(e, TUBELET_ERR_FORMAT, "%s: calibrated for another architecture (%.200s); "
                       "this model is %s: run tubelet calibrate again", path, arch->valuestring,
                       model->arch);
    const cJSON *layers = cJSON_GetObjectItemCaseSensitive(root, "layers");
    if (!cJSON_IsArray(layers))
        return tb_fail(e, TUBELET_ERR_FORMAT, "%s: no \"layers\" array", path);
    const int n = cJSON_GetArraySize(layers);
    if (n != model->n)
        return tb_fail(e, TUBELET_ERR_FORMAT, "%s: %d layers, but this model has %d linear "
                       "layers", path, n, model->n);
    int i = 0, rc = TUBELET_OK;
    for (const cJSON *l = layers->child; l && !rc; l = l->next, i++)
        rc = parse_layer(l, i, path, model, &q[i], log, e);
    static const char *const known[] = {"format", "version", "architecture", "estimator",
                                        "percentile", "clips", "layers", NULL};
    if (!rc) warn_unknown(root, known, "at the top level", path, log);
    return rc;
}

int tb_scales_parse(const char *text, const char *path, const tb_scales_model *model,
                    tb_act_quant *q, const tb_log *log, tb_err *e) {
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithOpts(text, &end, 1);
    if (!root)
        return tb_fail(e, TUBELET_ERR_FORMAT, "%s: not valid JSON (at byte %ld)", path,
                       end ? (long)(end - text) : 0L);
    int rc = parse(root, path, model, q, log, e);
    cJSON_Delete(root);
    return rc;
}

char *tb_scales_to_json(const tb_scales_model *model, const tb_act_quant *q,
                        const tb_scales_meta *meta) {
    cJSON *root = cJSON_CreateObject(), *layers = cJSON_CreateArray();
    char estimator[160];
    if (meta->percentile >= 100)
        snprintf(estimator, sizeof estimator, "the min and max over every clip (0 included)");
    else
        snprintf(estimator, sizeof estimator, "the mean over the clips of each clip's %g-th and "
                 "%g-th percentiles (0 included)", 100 - meta->percentile, meta->percentile);
    int ok = root && layers && cJSON_AddStringToObject(root, "format", TB_SCALES_FORMAT) &&
             cJSON_AddNumberToObject(root, "version", 1) &&
             cJSON_AddStringToObject(root, "architecture", model->arch) &&
             cJSON_AddStringToObject(root, "estimator", estimator) &&
             cJSON_AddItemToObject(root, "percentile", tb_json_number(meta->percentile)) &&
             cJSON_AddNumberToObject(root, "clips", (double)meta->clips) &&
             cJSON_AddItemToObject(root, "layers", layers);
    if (!ok) cJSON_Delete(layers); /* not attached to root */
    for (int i = 0; ok && i < model->n; i++) {
        cJSON *l = cJSON_CreateObject();
        if (!l || !cJSON_AddItemToArray(layers, l)) {
            cJSON_Delete(l);
            ok = 0;
            break;
        }
        ok = cJSON_AddStringToObject(l, "name", model->name[i]) &&
             cJSON_AddNumberToObject(l, "out", (double)model->out[i]) &&
             cJSON_AddNumberToObject(l, "in", (double)model->in[i]) &&
             cJSON_AddItemToObject(l, "scale", tb_json_number(q[i].scale)) &&
             cJSON_AddNumberToObject(l, "zero_point", q[i].zero_point);
    }
    char *text = ok ? cJSON_Print(root) : NULL;
    cJSON_Delete(root);
    return text;
}
