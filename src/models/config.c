#include "config.h"
#include "family.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

const char *tb_family_name(tb_family f) {
    return tb_family_ops_of(f)->model_type;
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

static int in_list(const char *const *list, const char *k) {
    for (; *list; list++)
        if (!strcmp(*list, k)) return 1;
    return 0;
}

/* The shared defaults (Hugging Face's PretrainedConfig and ViT), then the family's (its own
 * struct allocated first, for its defaults to fill). */
static int set_defaults(tb_config *c, const tb_family_ops *f, const char *path, tb_err *e) {
    memset(c, 0, sizeof *c);
    if (f->config_size && !(c->fam = calloc(1, f->config_size)))
        return tb_fail(e, TUBELET_ERR_MEMORY, "%s: out of memory", path);
    c->family = f->id;
    snprintf(c->model_type, sizeof c->model_type, "%s", f->model_type);
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
    f->defaults(c);
    return TUBELET_OK;
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
    const tb_family_ops *f = tb_family_ops_of(c->family);
    if (f->weight_bytes) return f->weight_bytes(c);
    double h = c->hidden, per_block = 4 * h * h + 2 * h * c->intermediate;
    double patch = (double)c->num_channels * c->tubelet_t * c->patch_h * c->patch_w * h;
    return 4.0 * (tb_n_blocks(c) * per_block + patch + h * c->num_labels);
}

static int validate(tb_config *c, const char *path, tb_err *e) {
    int rc;
    const tb_family_ops *f = tb_family_ops_of(c->family);
    if (f->check_config && (rc = f->check_config(c, path, e))) return rc;
    if (c->hidden % c->heads)
        return tb_fail(e, TUBELET_ERR_CONFIG,
                       "%s: hidden_size %d is not divisible by num_attention_heads %d", path,
                       c->hidden, c->heads);
    if (c->image_h < c->patch_h || c->image_w < c->patch_w || c->num_frames < c->tubelet_t)
        return tb_fail(e, TUBELET_ERR_CONFIG,
                       "%s: image %dx%d x %d frames is smaller than one patch %dx%dx%d", path,
                       c->image_h, c->image_w, c->num_frames, c->tubelet_t, c->patch_h,
                       c->patch_w);
    double tokens = (double)(c->num_frames / c->tubelet_t) * (c->image_h / c->patch_h) *
                    (c->image_w / c->patch_w);
    if (tokens > 1e6)
        return tb_fail(e, TUBELET_ERR_CONFIG, "%s: %.0f tokens per clip is beyond any model",
                       path, tokens);
    return TUBELET_OK;
}

/* "videomae, timesformer, vivit <last> video_swin": the registry's model types. */
static const char *family_names(char *buf, size_t n, const char *last) {
    size_t len = 0;
    buf[0] = 0;
    for (int i = 0; tb_family_at(i) && len < n; i++)
        len += (size_t)snprintf(buf + len, n - len, "%s%s",
                                !i ? "" : tb_family_at(i + 1) ? ", " : last[0] == 'o' ? " or " : " and ",
                                tb_family_at(i)->model_type);
    return buf;
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
    const tb_family_ops *f = NULL;
    for (int i = 0; cJSON_IsString(mt) && !f && tb_family_at(i); i++)
        if (!strcmp(mt->valuestring, tb_family_at(i)->model_type)) f = tb_family_at(i);
    if (!f) {
        char names[256];
        if (!cJSON_IsString(mt))
            rc = tb_fail(e, TUBELET_ERR_CONFIG, "%s: no \"model_type\" (expected %s)", path,
                         family_names(names, sizeof names, "or"));
        else
            rc = tb_fail(e, TUBELET_ERR_CONFIG, "%s: model_type \"%.64s\" is not supported "
                         "(tubelet runs %s)", path, mt->valuestring,
                         family_names(names, sizeof names, "and"));
        goto done;
    }
    if ((rc = set_defaults(c, f, path, e))) goto done;
    for (const cJSON *it = j->child; it; it = it->next)
        if (!in_list(generic_keys, it->string) && !in_list(f->config_keys, it->string) &&
            !in_list(dropout_keys, it->string))
            tb_warn(log, "%s: unknown field '%s' ignored", path, it->string);

    int hw[2] = {c->image_h, c->image_w};
    if ((rc = tb_cfg_ints(j, "image_size", hw, 2, path, e))) goto done;
    c->image_h = hw[0], c->image_w = hw[1];
    if ((rc = tb_cfg_int(j, "num_channels", &c->num_channels, 1, 64, path, e)) ||
        (rc = tb_cfg_int(j, "num_frames", &c->num_frames, 1, 1 << 14, path, e)) ||
        (rc = tb_cfg_int(j, "hidden_size", &c->hidden, 1, 1 << 16, path, e)) ||
        (rc = tb_cfg_int(j, "num_hidden_layers", &c->layers, 0, 1 << 10, path, e)) ||
        (rc = tb_cfg_int(j, "num_attention_heads", &c->heads, 1, 1 << 10, path, e)) ||
        (rc = tb_cfg_int(j, "intermediate_size", &c->intermediate, 1, 1 << 18, path, e)) ||
        (rc = tb_cfg_bool(j, "qkv_bias", &c->qkv_bias, path, e)))
        goto done;

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
    /* the family's own fields: patch and tubelet sizes, variants, ... */
    if ((rc = f->parse_config(c, j, path, log, e))) goto done;
    /* num_labels: id2label wins (it is what HF writes); then num_labels; HF's default is 2. */
    const cJSON *id2label = cJSON_GetObjectItemCaseSensitive(j, "id2label");
    if (id2label && !cJSON_IsObject(id2label)) {
        rc = tb_fail(e, TUBELET_ERR_CONFIG, "%s: id2label must be an object", path);
        goto done;
    }
    if (id2label) c->num_labels = cJSON_GetArraySize(id2label);
    else if ((rc = tb_cfg_int(j, "num_labels", &c->num_labels, 0, 1 << 20, path, e))) goto done;
    if (c->pretraining) /* VideoMAEForPreTraining has no classifier, whatever id2label says */
        c->num_labels = 0, id2label = NULL;
    if ((rc = validate(c, path, e))) goto done;
    if (!c->num_labels) id2label = NULL; /* the family has no classifier (V-JEPA 2's backbone) */
    if ((rc = make_labels(c, id2label, path, e))) goto done;
done:
    cJSON_Delete(j);
    if (rc) tb_config_free(c);
    return rc;
}

/* The --arch presets: each family's table (tb_family_ops.presets), in registry order. */
static const tb_arch_preset *preset_at(int i, const tb_family_ops **fam) {
    for (int k = 0; tb_family_at(k); k++) {
        const tb_arch_preset *p = tb_family_at(k)->presets;
        for (; p && p->name; p++)
            if (!i--) {
                if (fam) *fam = tb_family_at(k);
                return p;
            }
    }
    return NULL;
}

const char *tb_config_arch_name(int i) {
    const tb_arch_preset *p = i >= 0 ? preset_at(i, NULL) : NULL;
    return p ? p->name : NULL;
}

int tb_config_arch(tb_config *c, const char *arch, tb_err *e) {
    const tb_family_ops *f = NULL;
    const tb_arch_preset *p = NULL;
    for (int i = 0; (p = preset_at(i, &f)) && strcmp(p->name, arch); i++) {}
    if (!p) {
        memset(c, 0, sizeof *c);
        return tb_fail(e, TUBELET_ERR_ARG,
                       "unknown architecture '%s' (see `tubelet info --list`)", arch);
    }
    int rc = set_defaults(c, f, arch, e);
    if (rc) return rc;
    c->num_labels = 400; /* Kinetics-400 */
    if (p->apply) p->apply(c, arch);
    return make_labels(c, NULL, arch, e);
}

void tb_config_free_labels(tb_config *c) {
    if (c->labels)
        for (int i = 0; i < c->num_labels; i++) free(c->labels[i]);
    free(c->labels);
    c->labels = NULL;
}

void tb_config_free(tb_config *c) {
    tb_config_free_labels(c);
    free(c->fam);
    c->fam = NULL;
}

/* config.json as Hugging Face writes it for the family, so that a model tubelet trained or
 * fine-tuned loads in transformers too. */
char *tb_config_to_json(const tb_config *c) {
    const tb_family_ops *f = tb_family_ops_of(c->family);
    cJSON *j = cJSON_CreateObject(), *arr = cJSON_CreateArray(), *id2 = cJSON_CreateObject(),
          *l2i = cJSON_CreateObject();
    if (!j || !arr || !id2 || !l2i) {
        cJSON_Delete(j), cJSON_Delete(arr), cJSON_Delete(id2), cJSON_Delete(l2i);
        return NULL;
    }
    cJSON_AddItemToArray(arr, cJSON_CreateString(f->architecture(c)));
    cJSON_AddItemToObject(j, "architectures", arr);
    cJSON_AddStringToObject(j, "model_type", tb_family_name(c->family));
    if (c->image_h == c->image_w) cJSON_AddNumberToObject(j, "image_size", c->image_h);
    else {
        int hw[2] = {c->image_h, c->image_w};
        cJSON_AddItemToObject(j, "image_size", cJSON_CreateIntArray(hw, 2));
    }
    f->write_config(j, c);
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
