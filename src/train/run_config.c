#include "run_config.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

void tb_train_config_default(tb_train_config *c) {
    *c = (tb_train_config){.weight_decay = 0.05, .warmup_epochs = 1, .min_lr = 1e-6,
                           .layer_decay = 1, .clip_grad = 0, .min_scale = 0.5, .accum = 1,
                           .hflip = 0, .checkpointing = 0, .label_smoothing = 0, .drop_path = 0,
                           .hidden_dropout = -1, .attn_dropout = -1, .augment = 1};
}

/* One row per key: its type, its closed or half-open range, and where it goes. */
enum { REAL, INT, BOOL };
typedef struct {
    const char *key;
    int kind;
    double lo, hi;
    int hi_open; /* 1: v < hi, 0: v <= hi */
    size_t at;
    const char *meaning;
} cfg_key;

#define AT(f) offsetof(tb_train_config, f)
static const cfg_key KEYS[] = {
    {"weight_decay", REAL, 0, 100, 0, AT(weight_decay), "AdamW decoupled weight decay"},
    {"warmup_epochs", REAL, 0, 100000, 0, AT(warmup_epochs), "epochs of linear warm-up"},
    {"min_lr", REAL, 0, 10, 0, AT(min_lr), "final learning rate of the cosine"},
    {"layer_decay", REAL, 1e-6, 1, 0, AT(layer_decay), "layer-wise lr decay (1 = off)"},
    {"clip_grad", REAL, 0, 1e9, 0, AT(clip_grad), "global gradient-norm clip (0 = off)"},
    {"min_scale", REAL, 1e-3, 1, 0, AT(min_scale), "smallest random-resized-crop area"},
    {"accum_steps", INT, 1, 4096, 0, AT(accum), "batches per optimiser step"},
    {"hflip", BOOL, 0, 1, 0, AT(hflip), "random horizontal flip"},
    {"gradient_checkpointing", BOOL, 0, 1, 0, AT(checkpointing), "recompute blocks in backward"},
    {"freeze_encoder", BOOL, 0, 1, 0, AT(freeze_encoder), "train the classifier and pooler only"},
    {"augment", BOOL, 0, 1, 0, AT(augment), "random sampling, crop and flip of training clips"},
    {"label_smoothing", REAL, 0, 1, 1, AT(label_smoothing), "label smoothing"},
    {"drop_path_rate", REAL, 0, 1, 1, AT(drop_path), "stochastic depth of the last block"},
    {"hidden_dropout_prob", REAL, 0, 1, 0, AT(hidden_dropout), "dropout after projections"},
    {"attention_probs_dropout_prob", REAL, 0, 1, 0, AT(attn_dropout), "dropout of attention"},
};
#undef AT

static int set_key(tb_train_config *c, const cfg_key *k, const cJSON *v, const char *name,
                   tb_err *e) {
    char *dst = (char *)c + k->at;
    if (k->kind == BOOL) {
        if (!cJSON_IsBool(v))
            return tb_fail(e, TUBELET_ERR_CONFIG, "%s: '%s' must be true or false", name, k->key);
        *(int *)dst = cJSON_IsTrue(v);
        return TUBELET_OK;
    }
    double x = v->valuedouble;
    int in_range = cJSON_IsNumber(v) && isfinite(x) && x >= k->lo &&
                   (k->hi_open ? x < k->hi : x <= k->hi);
    if (!in_range || (k->kind == INT && x != floor(x)))
        return tb_fail(e, TUBELET_ERR_CONFIG, "%s: '%s' (%s) must be %s in [%g, %g%s", name,
                       k->key, k->meaning, k->kind == INT ? "an integer" : "a number", k->lo,
                       k->hi, k->hi_open ? ")" : "]");
    if (k->kind == INT) *(int *)dst = (int)x;
    else *(double *)dst = x;
    return TUBELET_OK;
}

static int parse_config_object(tb_train_config *c, const cJSON *j, const char *name, tb_err *e) {
    if (!cJSON_IsObject(j)) return tb_fail(e, TUBELET_ERR_CONFIG, "%s: not a JSON object", name);
    for (const cJSON *it = j->child; it; it = it->next) {
        const cfg_key *k = NULL;
        for (size_t i = 0; i < sizeof KEYS / sizeof *KEYS && !k; i++)
            if (it->string && !strcmp(it->string, KEYS[i].key)) k = &KEYS[i];
        if (!k)
            return tb_fail(e, TUBELET_ERR_CONFIG,
                           "%s: unknown field '%s' (see tubelet train --help for the keys)", name,
                           it->string ? it->string : "");
        int rc = set_key(c, k, it, name, e);
        if (rc) return rc;
    }
    return TUBELET_OK;
}

int tb_train_config_parse(tb_train_config *c, const char *text, const char *name, tb_err *e) {
    cJSON *j = cJSON_Parse(text);
    if (!j) return tb_fail(e, TUBELET_ERR_CONFIG, "%s: not valid JSON", name);
    int rc = parse_config_object(c, j, name, e);
    cJSON_Delete(j);
    return rc;
}

static cJSON *config_json(const tb_train_config *c) {
    cJSON *j = cJSON_CreateObject();
    for (size_t i = 0; j && i < sizeof KEYS / sizeof *KEYS; i++) {
        const char *src = (const char *)c + KEYS[i].at;
        if (KEYS[i].kind == BOOL) cJSON_AddBoolToObject(j, KEYS[i].key, *(const int *)src);
        else if (KEYS[i].kind == INT) cJSON_AddNumberToObject(j, KEYS[i].key, *(const int *)src);
        else cJSON_AddItemToObject(j, KEYS[i].key, tb_json_number(*(const double *)src));
    }
    return j;
}

char *tb_train_config_to_json(const tb_train_config *c) {
    cJSON *j = config_json(c);
    char *s = j ? cJSON_Print(j) : NULL;
    cJSON_Delete(j);
    return s;
}

/* An integer-valued JSON number in [lo, hi]; doubles hold integers exactly up to 2^53. */
static int get_int(const cJSON *obj, const char *key, double lo, double hi, int64_t *out,
                   const char *name, tb_err *e) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    double x = cJSON_IsNumber(v) ? v->valuedouble : NAN;
    if (!(x >= lo && x <= hi) || x != floor(x))
        return tb_fail(e, TUBELET_ERR_FORMAT, "%s: '%s' must be an integer in [%.0f, %.0f]%s",
                       name, key, lo, hi, v ? "" : " (missing)");
    *out = (int64_t)x;
    return TUBELET_OK;
}

static int parse_settings(tb_run_settings *r, const cJSON *j, const char *name, tb_err *e) {
    int64_t v[4];
    const char *keys[] = {"epochs", "batch", "seed", "n_train"};
    const double hi[] = {100000, 4096, 2147483647, 2147483647};
    for (int i = 0; i < 4; i++) {
        int rc = get_int(j, keys[i], i == 2 ? 0 : 1, hi[i], &v[i], name, e);
        if (rc) return rc;
    }
    r->epochs = (int)v[0], r->batch = (int)v[1], r->seed = (int)v[2], r->n_train = (int)v[3];
    const cJSON *lr = cJSON_GetObjectItemCaseSensitive(j, "lr");
    if (!cJSON_IsNumber(lr) || !(lr->valuedouble > 0 && lr->valuedouble <= 10))
        return tb_fail(e, TUBELET_ERR_FORMAT, "%s: 'lr' must be a number in (0, 10]", name);
    r->lr = lr->valuedouble;
    /* absent in classification runs and in checkpoints written before it was recorded */
    const cJSON *mr = cJSON_GetObjectItemCaseSensitive(j, "mask_ratio");
    if (mr && (!cJSON_IsNumber(mr) || !(mr->valuedouble >= 0 && mr->valuedouble < 1)))
        return tb_fail(e, TUBELET_ERR_FORMAT, "%s: 'mask_ratio' must be a number in [0, 1)", name);
    r->mask_ratio = mr ? mr->valuedouble : 0;
    /* absent: fp32 (and every checkpoint written before mixed precision) */
    const cJSON *pr = cJSON_GetObjectItemCaseSensitive(j, "precision");
    r->precision = TUBELET_PRECISION_FP32;
    if (pr && (!cJSON_IsString(pr) || !(!strcmp(pr->valuestring, "fp32") ||
                                        !strcmp(pr->valuestring, "bf16"))))
        return tb_fail(e, TUBELET_ERR_FORMAT, "%s: 'precision' must be \"fp32\" or \"bf16\"", name);
    if (pr && !strcmp(pr->valuestring, "bf16")) r->precision = TUBELET_PRECISION_BF16;
    tb_train_config_default(&r->cfg);
    return parse_config_object(&r->cfg, cJSON_GetObjectItemCaseSensitive(j, "config"), name, e);
}

int tb_trainer_state_parse(tb_trainer_state *s, const char *text, const char *name, tb_err *e) {
    memset(s, 0, sizeof *s);
    cJSON *j = cJSON_Parse(text);
    if (!cJSON_IsObject(j)) {
        cJSON_Delete(j);
        return tb_fail(e, TUBELET_ERR_FORMAT, "%s: not a JSON object", name);
    }
    int64_t epoch = 0;
    int rc = get_int(j, "epoch", 0, 100000, &epoch, name, e);
    if (!rc) rc = get_int(j, "step", 0, 9007199254740992.0, &s->step, name, e);
    s->epoch = (int)epoch;
    const cJSON *run = cJSON_GetObjectItemCaseSensitive(j, "run");
    if (!rc && run) {
        s->has_settings = 1;
        rc = cJSON_IsObject(run) ? parse_settings(&s->run, run, name, e)
                                 : tb_fail(e, TUBELET_ERR_FORMAT, "%s: 'run' must be an object", name);
    }
    cJSON_Delete(j);
    return rc;
}

char *tb_trainer_state_to_json(const tb_trainer_state *s) {
    cJSON *j = cJSON_CreateObject(), *run = cJSON_CreateObject();
    if (!j || !run) {
        cJSON_Delete(j), cJSON_Delete(run);
        return NULL;
    }
    cJSON_AddNumberToObject(j, "epoch", s->epoch);
    cJSON_AddNumberToObject(j, "step", (double)s->step);
    cJSON_AddNumberToObject(run, "epochs", s->run.epochs);
    cJSON_AddNumberToObject(run, "batch", s->run.batch);
    cJSON_AddNumberToObject(run, "seed", s->run.seed);
    cJSON_AddNumberToObject(run, "n_train", s->run.n_train);
    cJSON_AddItemToObject(run, "lr", tb_json_number(s->run.lr));
    if (s->run.mask_ratio > 0) cJSON_AddItemToObject(run, "mask_ratio", tb_json_number(s->run.mask_ratio));
    if (s->run.precision == TUBELET_PRECISION_BF16)
        cJSON_AddStringToObject(run, "precision", "bf16");
    cJSON_AddItemToObject(run, "config", config_json(&s->run.cfg));
    cJSON_AddItemToObject(j, "run", run);
    char *out = cJSON_Print(j);
    cJSON_Delete(j);
    return out;
}

int64_t tb_steps_per_epoch(int n_train, int batch, int accum) {
    int64_t batches = ((int64_t)n_train + batch - 1) / batch;
    return (batches + accum - 1) / accum;
}

/* The two precisions a run can train in (this file stays free of the model library: the fuzz
 * harness links it alone). */
static const char *precision_name(int p) { return p == TUBELET_PRECISION_BF16 ? "bf16" : "fp32"; }

/* The first setting that differs (--epochs may grow: it only stretches the cosine), by name, so the message can say what to change back. */
static const char *changed_setting(const tb_run_settings *a, const tb_run_settings *b,
                                   char *buf, size_t len) {
    if (a->batch != b->batch) snprintf(buf, len, "--batch %d (now %d)", a->batch, b->batch);
    else if (a->seed != b->seed) snprintf(buf, len, "--seed %d (now %d)", a->seed, b->seed);
    else if (a->lr != b->lr) snprintf(buf, len, "--lr %.17g (now %.17g)", a->lr, b->lr);
    else if (a->mask_ratio != b->mask_ratio)
        snprintf(buf, len, "--mask-ratio %.17g (now %.17g)", a->mask_ratio, b->mask_ratio);
    else if (a->precision != b->precision)
        snprintf(buf, len, "--precision %s (now %s)", precision_name(a->precision),
                 precision_name(b->precision));
    else if (a->n_train != b->n_train)
        snprintf(buf, len, "%d training clips (now %d)", a->n_train, b->n_train);
    else {
        for (size_t i = 0; i < sizeof KEYS / sizeof *KEYS; i++) {
            const char *x = (const char *)&a->cfg + KEYS[i].at, *y = (const char *)&b->cfg + KEYS[i].at;
            int differ = KEYS[i].kind == REAL ? *(const double *)x != *(const double *)y
                                              : *(const int *)x != *(const int *)y;
            if (differ) {
                snprintf(buf, len, "--config key '%s'", KEYS[i].key);
                return buf;
            }
        }
        return NULL;
    }
    return buf;
}

int tb_trainer_state_check(const tb_trainer_state *s, const tb_run_settings *run,
                           int64_t optimizer_step, const char *name, tb_err *e) {
    char what[160];
    if (s->has_settings && changed_setting(&s->run, run, what, sizeof what))
        return tb_fail(e, TUBELET_ERR_FORMAT,
                       "%s: this checkpoint was trained with %s; --resume continues the same run "
                       "only (to train on from it with new settings, use --model on its "
                       "directory and a new -o)", name, what);
    if (s->epoch > run->epochs)
        return tb_fail(e, TUBELET_ERR_FORMAT, "%s: epoch %d is past --epochs %d", name, s->epoch,
                       run->epochs);
    int64_t want = (int64_t)s->epoch * tb_steps_per_epoch(run->n_train, run->batch, run->cfg.accum);
    if (s->step != want)
        return tb_fail(e, TUBELET_ERR_FORMAT,
                       "%s: step %lld does not match epoch %d of this run (%lld steps)", name,
                       (long long)s->step, s->epoch, (long long)want);
    if (optimizer_step != s->step)
        return tb_fail(e, TUBELET_ERR_FORMAT,
                       "%s: step %lld, but optimizer.safetensors holds step %lld: the checkpoint's "
                       "files do not belong together", name, (long long)s->step,
                       (long long)optimizer_step);
    return TUBELET_OK;
}
