/* Model handle: loading from a Hugging Face directory or building random weights, parameter
 * lookup, and the cost figures `tubelet info` reports. */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../io/checkpoint.h"
#include "../io/safetensors.h"
#include <cjson/cJSON.h>

#include "int8_static.h"
#include "family.h"
#include "image_init.h"

tubelet_load_params tubelet_load_default_params(void) {
    tubelet_load_params p;
    memset(&p, 0, sizeof p);
    return p;
}

const char *tubelet_arch_name(int i) { return tb_config_arch_name(i); }

/* Fills ws with every parameter the family's builder asks tb_param for. */
static int build(tubelet_model *m, tb_weightset *ws, tb_err *e) {
    /* sizes from a config.json are input: refuse what cannot fit before allocating any of it */
    double need = tb_config_weight_bytes(&m->cfg);
    double limit = m->max_memory > 0 ? (double)m->max_memory : (double)tb_machine_memory();
    if (m->max_memory >= 0 && need > limit)
        return tb_fail(e, TUBELET_ERR_MEMORY,
                       "%s: the model's sizes need at least %.1f GiB for the weights alone, more "
                       "than the %.1f GiB %s; check hidden_size, intermediate_size and "
                       "num_hidden_layers in config.json", m->source, need / 1073741824.0,
                       limit / 1073741824.0, m->max_memory > 0 ? "allowed" : "this machine has");
    const int nb = tb_n_blocks(&m->cfg);
    m->fam = tb_family_ops_of(m->cfg.family);
    if (!m->fam) return tb_fail(e, TUBELET_ERR_CONFIG, "%s: unknown model family", m->source);
    m->run = m->fam->vit ? &tb_vit_encoder_model : m->fam->model;
    ws->blocks = calloc((size_t)(nb ? nb : 1), sizeof(tb_block));
    if (!ws->blocks) return tb_fail(e, TUBELET_ERR_MEMORY, "%s: out of memory", m->source);
    return m->fam->build(m, ws, e);
}

/* Whether parameter i has a gradient buffer: every parameter, or the probe's only. */
static int has_grad(const tubelet_model *m, int probe_only, int i) {
    return !probe_only || tubelet_model_tensor_is_probe(m, i);
}

static int grads_new(tubelet_grads **out, const tubelet_model *m, int probe_only, char *err,
                     size_t errlen) {
    tb_err e = {{0}};
    *out = NULL;
    int rc0 = tb_model_check_weights(m, "train", &e);
    if (rc0) return tb_err_out(rc0, &e, err, errlen);
    if (m->packed)
        return tb_err_out(tb_fail(&e, TUBELET_ERR_UNSUPPORTED, "%s: training needs the model in "
                                  "plain fp32 (it was loaded for inference, in %s)", m->source,
                                  tubelet_precision_name(m->precision)),
                          &e, err, errlen);
    if (probe_only && !m->run->can_freeze_encoder)
        return tb_err_out(tb_fail(&e, TUBELET_ERR_UNSUPPORTED, "%s: this family's runner cannot "
                                  "freeze its encoder (Video Swin, X-CLIP): no probe-only "
                                  "gradients", m->source),
                          &e, err, errlen);
    tubelet_grads *g = calloc(1, sizeof *g);
    size_t total = 0;
    for (int i = 0; i < m->n_tensors; i++)
        if (has_grad(m, probe_only, i)) total += ((size_t)m->tensors[i].numel + 15) & ~(size_t)15;
    if (g) g->of = calloc((size_t)(m->n_tensors ? m->n_tensors : 1), sizeof *g->of);
    if (g && g->of) g->arena = tb_alloc(sizeof(float) * (total ? total : 1));
    if (!g || !g->of || !g->arena) {
        tubelet_grads_free(g);
        return tb_err_out(tb_fail(&e, TUBELET_ERR_MEMORY, "%s: out of memory for gradients "
                                  "(%.1f MB)", m->source, total * 4.0 / 1e6), &e, err, errlen);
    }
    g->m = m, g->floats = total, g->probe_only = probe_only;
    memset(g->arena, 0, sizeof(float) * total);
    /* a device backend's kernels add into its own memory (mem_alloc zeroes it); the builder
     * hands them those pointers, the caller the host arena's */
    float **dev_of = NULL;
    if (m->be.k->open) {
        g->be = m->be;
        int rc = m->be.k->fork ? m->be.k->fork(m->be.ctx, &g->be.ctx, &e) : TUBELET_OK;
        if (rc) {
            g->be.ctx = NULL;
            tubelet_grads_free(g);
            return tb_err_out(rc, &e, err, errlen);
        }
        g->dev = TB_RUN(&g->be, mem_alloc, sizeof(float) * (total ? total : 1));
        dev_of = calloc((size_t)(m->n_tensors ? m->n_tensors : 1), sizeof *dev_of);
        if (!g->dev || !dev_of) {
            free(dev_of);
            tubelet_grads_free(g);
            return tb_err_out(tb_fail(&e, TUBELET_ERR_MEMORY, "%s: out of %s memory for "
                                      "gradients (%.1f MB)", m->source, m->be.k->name,
                                      total * 4.0 / 1e6), &e, err, errlen);
        }
    }
    size_t at = 0;
    for (int i = 0; i < m->n_tensors; i++) {
        if (!has_grad(m, probe_only, i)) continue; /* NULL: a frozen encoder's, never written */
        g->of[i] = g->arena + at;
        if (dev_of) dev_of[i] = g->dev + at;
        at += ((size_t)m->tensors[i].numel + 15) & ~(size_t)15;
    }
    /* The builder, run again on a copy of the model in gradient mode, lays the gradient buffers
     * out exactly like the weights; what it allocates goes to the copy's list, which the
     * gradients then own, so the model itself is never written. */
    tubelet_model view = *m;
    view.grad_of = dev_of ? dev_of : g->of;
    view.owned = NULL, view.n_owned = view.cap_owned = 0;
    int rc = build(&view, &g->g, &e);
    free(dev_of);
    g->owned = view.owned, g->n_owned = view.n_owned;
    if (rc) {
        tubelet_grads_free(g);
        return tb_err_out(rc, &e, err, errlen);
    }
    *out = g;
    return TUBELET_OK;
}

int tubelet_grads_new(tubelet_grads **out, const tubelet_model *m, char *err, size_t errlen) {
    return grads_new(out, m, 0, err, errlen);
}

int tubelet_grads_new_probe(tubelet_grads **out, const tubelet_model *m, char *err,
                            size_t errlen) {
    return grads_new(out, m, 1, err, errlen);
}

int tubelet_model_n_tensors(const tubelet_model *m) { return m->n_tensors; }

const char *tubelet_model_tensor(const tubelet_model *m, int i, tubelet_shape *shape,
                                 const float **data) {
    if (i < 0 || i >= m->n_tensors) return NULL;
    const tb_tensor_entry *t = &m->tensors[i];
    if (shape) {
        shape->ndim = t->ndim;
        for (int d = 0; d < t->ndim; d++) shape->dim[d] = t->shape[d];
    }
    if (data) *data = t->data;
    return t->name;
}

int tubelet_model_tensor_is_probe(const tubelet_model *m, int i) {
    if (i < 0 || i >= m->n_tensors) return 0;
    const char *name = m->tensors[i].name;
    return tb_is_head_param(m, name) || tb_name_starts(name, m->fam->probe);
}

int tubelet_model_tensor_group(const tubelet_model *m, int i, int *layer) {
    if (i < 0 || i >= m->n_tensors) return -1;
    const tb_tensor_entry *t = &m->tensors[i];
    const tb_family_ops *f = m->fam;
    if (layer)
        *layer = f->param_layer ? f->param_layer(&m->cfg, t->name)
                                : tb_param_layer(t->name, tb_n_blocks(&m->cfg));
    if (t->ndim <= 1) return 0; /* norms, biases, q_bias / v_bias */
    const size_t n = strlen(t->name);
    for (const char *const *k = f->no_decay; k && *k; k++) {
        const size_t kn = strlen(*k);
        if (kn <= n && !strcmp(t->name + n - kn, *k)) return 0;
    }
    return 1;
}

float *tubelet_model_tensor_writable(tubelet_model *m, int i) {
    /* a model that trains was loaded into memory (no_mmap) or built, so its values are ours */
    return i >= 0 && i < m->n_tensors && !m->packed ? (float *)m->tensors[i].data : NULL;
}

/* The tensors the packing left (biases, norms, embeddings; every one for an unpacked model) where
 * the backend's kernels read them: a GPU's copy, made once (the CPU's table has no upload). */
static int upload_tensors(tubelet_model *m, tb_err *e) {
    for (int i = 0; m->be.k->upload && i < m->n_tensors; i++) {
        const tb_tensor_entry *t = &m->tensors[i];
        int rc = t->data ? TB_RUN(&m->be, upload, t->data, sizeof(float) * (size_t)t->numel, e) : 0;
        if (rc) return tb_prefix(e, rc, "%s: tensor %s: ", m->source, t->name);
    }
    return TUBELET_OK;
}

int tubelet_model_weights_changed(tubelet_model *m, char *err, size_t errlen) {
    tb_err e = {{0}};
    return tb_err_out(m->packed ? TUBELET_OK : upload_tensors(m, &e), &e, err, errlen);
}

/* Inference's precision (packing), then training's (mixed precision), then the upload. */
static int set_precisions(tubelet_model *m, const tubelet_load_params *p, tb_err *e) {
    int rc = tb_model_set_precision(m, p->precision, p->precision_reference, p->inference, e);
    if (!rc) rc = tb_model_set_mixed_precision(m, p->train_precision, p->precision_reference, e);
    return rc ? rc : upload_tensors(m, e);
}

int tubelet_max_threads(void) { return 4 * omp_get_num_procs(); }

static int model_new(tubelet_model **out, const tubelet_load_params *p, const char *source,
                     tb_err *e) {
    tubelet_load_params d = tubelet_load_default_params();
    if (!p) p = &d;
    if (p->n_threads > tubelet_max_threads())
        return tb_fail(e, TUBELET_ERR_ARG, "%d threads is more than the cap of %d (4 x the %d "
                       "CPUs this process may use)", p->n_threads, tubelet_max_threads(),
                       omp_get_num_procs());
    const tb_kernels *kern = tb_backend_find(p->device);
    if (!kern) {
        char names[256] = "";
        for (int i = 0; tb_backend_at(i); i++)
            snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", i ? ", " : "",
                     tb_backend_at(i)->name);
        if (!strcmp(p->device, "cuda"))
            return tb_fail(e, TUBELET_ERR_ARG, "%s: device 'cuda': this build of tubelet has no "
                           "CUDA backend (build it with `make CUDA=1`, docs/cuda.md); it has: %s",
                           source, names);
        return tb_fail(e, TUBELET_ERR_ARG, "%s: unknown device '%s' (this build has: %s)", source,
                       p->device, names);
    }
    void *ctx = NULL;
    if (kern->open) {
        int rc = kern->open(&ctx, e);
        if (rc) return tb_prefix(e, rc, "%s: ", source);
    }
    tubelet_model *m = *out = calloc(1, sizeof *m);
    if (!m) {
        if (kern->close) kern->close(ctx);
        return tb_fail(e, TUBELET_ERR_MEMORY, "out of memory");
    }
    m->log.fn = p->log, m->log.user = p->log_user;
    m->be = (tb_backend){kern, ctx};
    m->n_threads = p->n_threads > 0 ? p->n_threads : omp_get_num_procs();
    m->max_memory = p->max_memory;
    snprintf(m->source, sizeof m->source, "%s", source);
    return TUBELET_OK;
}

/* The classes of the data replace the checkpoint's; a classifier of another size is re-made. */
static int set_labels(tubelet_model *m, const tubelet_load_params *p, tb_err *e) {
    if (!p->labels) return tb_fail(e, TUBELET_ERR_ARG, "num_labels given without labels");
    m->ckpt_labels = m->cfg.num_labels;
    m->reinit_head = m->cfg.num_labels != p->num_labels;
    tb_config_free_labels(&m->cfg);
    m->cfg.num_labels = p->num_labels;
    m->cfg.labels = calloc((size_t)p->num_labels, sizeof(char *));
    if (!m->cfg.labels) return tb_fail(e, TUBELET_ERR_MEMORY, "out of memory");
    for (int i = 0; i < p->num_labels; i++)
        if (!(m->cfg.labels[i] = strdup(p->labels[i])))
            return tb_fail(e, TUBELET_ERR_MEMORY, "out of memory");
    return TUBELET_OK;
}

static void report_unused(void *user, const char *name) {
    tubelet_model *m = user;
    if (m->reinit_head && tb_is_head_param(m, name)) return; /* replaced on purpose */
    if (m->from_pretraining && tb_name_starts(name, m->fam->pretraining_only))
        return; /* the pretraining decoder, dropped on purpose (one warning at load) */
    if (tb_name_starts(name, m->fam->not_run)) return; /* carried, never run (its predictor) */
    tb_warn(&m->log, "%s: unexpected tensor '%s' ignored", m->source, name);
}


/* A model name that is no local path: a URL, a Hugging Face Hub id ("org/name") or "-". tubelet
 * reads local files only, so instead of "No such file or directory" say so and what to do. A path
 * that exists is local whatever it looks like. */
static int refuse_remote(const char *src, tb_err *e) {
    struct stat st;
    if (!src || !*src || stat(src, &st) == 0) return TUBELET_OK;
    static const char todo[] = "tubelet reads local files only and downloads nothing: download "
                               "the model first (for a Hugging Face model: `hf download ";
    if (!strcmp(src, "-"))
        return tb_fail(e, TUBELET_ERR_IO, "-: a model cannot be read from standard input; give "
                       "a model directory or checkpoint file");
    const char *id = NULL; /* the Hub id inside the name, if any */
    int url = strstr(src, "://") != NULL;
    if (!strncmp(src, "hf://", 5)) id = src + 5;
    else if (!strncmp(src, "https://huggingface.co/", 23)) id = src + 23;
    else if (!strncmp(src, "http://huggingface.co/", 22)) id = src + 22;
    else if (!url) {
        /* org/name: one slash inside, the characters the Hub allows */
        const char *sl = strchr(src, '/');
        int ok = sl && sl != src && sl[1] && !strchr(sl + 1, '/') && src[0] != '.' && src[0] != '~';
        for (const char *c = src; ok && *c; c++)
            ok = (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') ||
                 *c == '-' || *c == '_' || *c == '.' || *c == '/';
        char org[256];
        snprintf(org, sizeof org, "%.*s", (int)(sl - src), src);
        /* an ordinary missing path (or a typo below a local directory): the usual message */
        if (!ok || stat(org, &st) == 0) return TUBELET_OK;
        id = src;
    }
    if (id && *id) {
        int n = 0; /* org/name: up to the second slash */
        for (const char *c = id; *c && !(*c == '/' && c > id && strchr(id, '/') < c); c++) n++;
        return tb_fail(e, TUBELET_ERR_IO,
                       "%s: not a local path (no such file or directory) but a %s. %s%.*s "
                       "--local-dir DIR` or `huggingface-cli download %.*s --local-dir DIR`) and "
                       "give DIR", src, url ? "Hugging Face URL" : "Hugging Face Hub id", todo, n,
                       id, n, id);
    }
    return tb_fail(e, TUBELET_ERR_IO, "%s: not a local path but a URL. %sID --local-dir DIR`; "
                   "otherwise any download tool) and give the directory or file", src, todo);
}

int tubelet_model_load(tubelet_model **out, const char *dir, const tubelet_load_params *params,
                       char *err, size_t errlen) {
    tb_err e = {{0}};
    *out = NULL;
    tubelet_model *m;
    int rc = model_new(&m, params, dir, &e);
    if (rc) return tb_err_out(rc, &e, err, errlen);
    char path[1200], *text = NULL, *cfg_name = NULL;
    rc = refuse_remote(dir, &e);
    if (rc) {
        tubelet_model_free(m);
        return tb_err_out(rc, &e, err, errlen);
    }
    const tb_ckpt_format fmt = tb_ckpt_detect(dir);
    const size_t dn = strlen(dir);
    if (fmt != TB_CKPT_DIR && dn >= 5 && !strcmp(dir + dn - 5, ".json")) {
        /* a common slip: the model's config.json (or another JSON of it) for its directory */
        const char *slash = strrchr(dir, '/');
        rc = tb_fail(&e, TUBELET_ERR_ARG, "%s is a JSON file, not a model: give the directory "
                     "that holds config.json and the weights (%.*s), or a checkpoint file", dir,
                     slash ? (int)(slash - dir) : 1, slash ? dir : ".");
        tubelet_model_free(m);
        return tb_err_out(rc, &e, err, errlen);
    }
    if ((m->ckpt_file = fmt != TB_CKPT_DIR)) { /* an official checkpoint (docs/checkpoints.md) */
        if (!(m->ckpt_path = strdup(dir))) {
            tubelet_model_free(m);
            return tb_err_out(tb_fail(&e, TUBELET_ERR_MEMORY, "out of memory"), &e, err, errlen);
        }
        rc = tb_ckpt_open(dir, fmt, params ? params->config : NULL, &m->log, &text, &cfg_name,
                          &m->weights, &e);
        snprintf(path, sizeof path, "%s", cfg_name ? cfg_name : dir);
        free(cfg_name);
    } else {
        snprintf(path, sizeof path, "%s/config.json", dir);
        rc = tb_read_file(path, &text, NULL, 1 << 26, &e);
    }
    if (!rc) rc = tb_config_parse(&m->cfg, text, path, &m->log, &e);
    free(text);
    if (!rc && params && params->num_labels > 0) rc = set_labels(m, params, &e);
    if (!rc && m->cfg.pretraining && params && params->num_labels > 0)
        /* fine-tuning: the encoder as VideoMAEForVideoClassification, as transformers maps it
         * (the warning follows the build, which says whether fc_norm is new) */
        m->cfg.pretraining = 0, m->from_pretraining = 1;
    if (!rc && !m->weights) {
        char p1[1200], p2[1200];
        snprintf(p1, sizeof p1, "%s/model.safetensors", dir);
        snprintf(p2, sizeof p2, "%s/model.safetensors.index.json", dir);
        if (params && params->random_init && access(p1, F_OK) && access(p2, F_OK)) {
            m->rng = params->seed; /* only config.json: the references' random initialisation */
            tb_warn(&m->log, "%s: no weights; starting from random initialisation (seed %llu)",
                    dir, (unsigned long long)params->seed);
        } else {
            rc = tb_weights_open(&m->weights, dir, !(params && params->no_mmap), &e);
        }
    }
    if (!rc) rc = build(m, &m->w, &e);
    if (!rc && m->from_pretraining)
        tb_warn(&m->log, "%s: a VideoMAEForPreTraining checkpoint: its encoder is loaded as "
                "VideoMAEForVideoClassification; the decoder, encoder_to_decoder and mask_token "
                "are dropped, %sthe classifier (%d classes) %s new", dir,
                m->has_fc_norm ? "fc_norm and " : "", m->cfg.num_labels,
                m->has_fc_norm ? "are" : "is");
    if (!rc && m->weights) tb_weights_each_unused(m->weights, report_unused, m);
    if (!rc && params) rc = set_precisions(m, params, &e);
    if (!rc) rc = tb_model_int8_scales(m, m->ckpt_file ? NULL : dir, &e); /* int8_static.h */
    if (rc) {
        tubelet_model_free(m);
        return tb_err_out(rc, &e, err, errlen);
    }
    *out = m;
    return TUBELET_OK;
}

int tubelet_model_random(tubelet_model **out, const char *arch, uint64_t seed,
                         const tubelet_load_params *params, char *err, size_t errlen) {
    tb_err e = {{0}};
    *out = NULL;
    tubelet_model *m;
    int rc = model_new(&m, params, arch, &e);
    if (rc) return tb_err_out(rc, &e, err, errlen);
    m->rng = seed;
    rc = tb_config_arch(&m->cfg, arch, &e);
    if (!rc && params && params->num_labels > 0) rc = set_labels(m, params, &e);
    if (!rc) rc = build(m, &m->w, &e);
    if (!rc && params) rc = set_precisions(m, params, &e);
    if (!rc) rc = tb_model_int8_scales(m, NULL, &e);
    if (rc) {
        tubelet_model_free(m);
        return tb_err_out(rc, &e, err, errlen);
    }
    *out = m;
    return TUBELET_OK;
}

int tubelet_model_describe(tubelet_model **out, const char *arch, char *err, size_t errlen) {
    tb_err e = {{0}};
    *out = NULL;
    tubelet_model *m;
    int rc = model_new(&m, NULL, arch, &e);
    if (rc) return tb_err_out(rc, &e, err, errlen);
    m->describe = 1;
    rc = tb_config_arch(&m->cfg, arch, &e);
    if (!rc) rc = build(m, &m->w, &e);
    if (rc) {
        tubelet_model_free(m);
        return tb_err_out(rc, &e, err, errlen);
    }
    *out = m;
    return TUBELET_OK;
}

/* Initialisation from an image model (docs/image-init.md): the image model directory's
 * config.json given to the family's image_open, which checks it against c and opens its
 * weights; an image model of another kind named as such. */
static int image_open(tb_vit **out, const char *dir, tb_config *c, const tb_log *log, tb_err *e) {
    const tb_family_ops *f = tb_family_ops_of(c->family);
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
    const tb_family_ops *g = NULL; /* the one family that image model initialises, if one */
    int n_g = 0;
    for (int i = 0; type && tb_family_at(i); i++)
        if (tb_family_at(i)->image_model_type && !strcmp(type, tb_family_at(i)->image_model_type))
            g = tb_family_at(i), n_g++;
    if (!f->image_open)
        rc = tb_fail(e, TUBELET_ERR_UNSUPPORTED, "%s", f->image_model_what);
    else if (n_g == 1 && g != f)
        rc = tb_fail(e, TUBELET_ERR_CONFIG, "%s: an image '%s' model initialises a %s only "
                     "(model_type \"%s\"), not a %s config", path, type, g->display_name,
                     g->model_type, c->model_type);
    else if (!type || strcmp(type, f->image_model_type))
        rc = tb_fail(e, TUBELET_ERR_CONFIG, "%s: model_type '%.64s' is not %s", path,
                     type ? type : "(none)", f->image_model_what);
    else
        rc = f->image_open(v, j, path, c, log, e);
done:
    cJSON_Delete(j);
    free(text);
    if (rc) tb_vit_free(v);
    else *out = v;
    return rc;
}

tubelet_image_init_params tubelet_image_init_default_params(void) {
    tubelet_image_init_params p;
    memset(&p, 0, sizeof p);
    p.tubelet_init = TUBELET_TUBELET_DEFAULT;
    return p;
}

int tubelet_model_from_image(tubelet_model **out, const char *video, const char *vit_dir,
                             const tubelet_image_init_params *ip,
                             const tubelet_load_params *params, char *err, size_t errlen) {
    tb_err e = {{0}};
    *out = NULL;
    tubelet_image_init_params d = tubelet_image_init_default_params();
    if (!ip) ip = &d;
    tubelet_model *m;
    int rc = model_new(&m, params, video, &e);
    if (rc) return tb_err_out(rc, &e, err, errlen);
    struct stat st;
    if (stat(video, &st) == 0 && S_ISDIR(st.st_mode)) { /* a directory: its config.json */
        char path[1200];
        char *text = NULL;
        snprintf(path, sizeof path, "%s/config.json", video);
        rc = tb_read_file(path, &text, NULL, 1 << 24, &e);
        if (!rc) rc = tb_config_parse(&m->cfg, text, path, &m->log, &e);
        free(text);
    } else if (strchr(video, '/')) {
        rc = tb_fail(&e, TUBELET_ERR_IO, "%s: no such directory (nor a built-in architecture)",
                     video);
    } else { /* a built-in architecture */
        rc = tb_config_arch(&m->cfg, video, &e);
    }
    tb_vit *v = NULL;
    if (!rc) rc = image_open(&v, vit_dir, &m->cfg, &m->log, &e);
    if (!rc) {
        m->rng = ip->seed; /* what is not copied: the references' random initialisation */
        rc = build(m, &m->w, &e);
    }
    /* the papers' filters: ViViT's central frame, Video Swin's inflation (inflate_weights) */
    const int inflate = ip->tubelet_init == TUBELET_TUBELET_INFLATE ||
                        (ip->tubelet_init == TUBELET_TUBELET_DEFAULT && m->fam &&
                         m->fam->inflate_by_default);
    if (!rc) rc = m->fam->image_copy(v, m, inflate, ip->keep_head, &e);
    tb_vit_free(v);
    if (rc) {
        tubelet_model_free(m);
        return tb_err_out(rc, &e, err, errlen);
    }
    *out = m;
    return TUBELET_OK;
}

void tubelet_model_free(tubelet_model *m) {
    if (!m) return;
    for (int i = 0; i < m->n_owned; i++) tb_free(m->owned[i]);
    free(m->owned);
    free(m->w.blocks);
    free(m->w.fam);
    for (int i = 0; i < m->n_tensors; i++) {
        if (m->be.k && m->be.k->release && m->tensors[i].data)
            TB_RUN(&m->be, release, m->tensors[i].data);
        free(m->tensors[i].name);
    }
    free(m->tensors);
    if (m->weights) tb_weights_free(m->weights);
    tb_model_free_precision(m);
    if (m->be.k && m->be.k->close) m->be.k->close(m->be.ctx);
    tb_config_free(&m->cfg);
    free(m->ckpt_path);
    free(m);
}

void tubelet_model_set_threads(tubelet_model *m, int n) {
    m->n_threads = n > 0 ? (n < tubelet_max_threads() ? n : tubelet_max_threads())
                         : omp_get_num_procs();
}
int tubelet_model_threads(const tubelet_model *m) { return m->n_threads; }

const char *tubelet_model_label(const tubelet_model *m, int i) {
    return i >= 0 && i < m->cfg.num_labels ? m->cfg.labels[i] : NULL;
}

static double tb_flop_per_clip(const tb_config *c, int T, int H, int W) {
    const tb_family_ops *f = tb_family_ops_of(c->family);
    return f ? f->flop(c, T, H, W) : NAN;
}

double tubelet_model_flop_per_clip(const tubelet_model *m, int frames, int height, int width) {
    return tb_flop_per_clip(&m->cfg, frames, height, width);
}

int tubelet_model_get_info(const tubelet_model *m, tubelet_model_info *info) {
    const tb_config *c = &m->cfg;
    memset(info, 0, sizeof *info);
    info->family = tb_family_name(c->family);
    info->model_type = c->model_type;
    info->variant = m->fam->variant(c);
    info->n_params = m->n_params;
    info->n_params_not_run = m->fam->params_not_run ? m->fam->params_not_run(c) : 0;
    info->num_frames = c->num_frames, info->image_height = c->image_h;
    info->image_width = c->image_w, info->num_channels = c->num_channels;
    info->hidden_size = c->hidden, info->num_layers = c->layers, info->num_heads = c->heads;
    info->intermediate_size = c->intermediate, info->num_labels = c->num_labels;
    info->tubelet_t = c->tubelet_t, info->patch_h = c->patch_h, info->patch_w = c->patch_w;
    const int64_t N = (int64_t)tb_grid_h(c, c->image_h) * tb_grid_w(c, c->image_w);
    tb_stage st[2];
    m->fam->sequences(c, 1, tb_grid_t(c, c->num_frames), N, st);
    info->n_tokens = st[0].rows; /* of one clip, in the first encoder */
    info->num_temporal_layers = tb_n_blocks(c) - c->layers; /* ViViT Model 2's */
    info->flop_per_clip = tb_flop_per_clip(c, c->num_frames, c->image_h, c->image_w);
    info->hidden_dropout_prob = (float)c->hidden_dropout;
    info->attention_probs_dropout_prob = (float)c->attn_dropout;
    info->layer_scale_init_value = c->layer_scale;
    info->tubelet_init_default = m->fam->inflate_by_default ? TUBELET_TUBELET_INFLATE
                                                            : TUBELET_TUBELET_CENTRAL;
    info->precision = m->precision;
    info->precision_native = (m->precision != TB_PREC_FP32 || m->mixed) && m->lowp_native;
    info->packed = m->packed;
    info->linear_weight_bytes = tb_model_linear_bytes(m);
    info->int8_static = tb_model_int8_static(m);
    if (m->fam->stages) m->fam->stages(c, info);
    return TUBELET_OK;
}

/* Writes text to path atomically (common.h). */
static int write_atomic(const char *path, const char *text, tb_err *e) {
    return tb_atomic_write(path, text, strlen(text), e);
}

int tubelet_model_save(const tubelet_model *m, const char *dir, char *err, size_t errlen) {
    tb_err e = {{0}};
    int rc0 = tb_model_check_weights(m, "save", &e);
    if (rc0) return tb_err_out(rc0, &e, err, errlen);
    if (m->packed)
        return tb_err_out(tb_fail(&e, TUBELET_ERR_UNSUPPORTED, "%s: a model loaded for inference "
                                  "(%s) has no plain f32 weights to save", m->source,
                                  tubelet_precision_name(m->precision)),
                          &e, err, errlen);
    char path[1200];
    char *json = tb_config_to_json(&m->cfg);
    st_tensor *ts = calloc((size_t)m->n_tensors + 1, sizeof *ts);
    int rc = TUBELET_OK;
    if (!json || !ts) rc = tb_fail(&e, TUBELET_ERR_MEMORY, "out of memory");
    for (int i = 0; !rc && i < m->n_tensors; i++) {
        const tb_tensor_entry *t = &m->tensors[i];
        ts[i].name = t->name, ts[i].dtype = ST_F32, ts[i].ndim = t->ndim;
        memcpy(ts[i].shape, t->shape, sizeof(int64_t) * (size_t)t->ndim);
        ts[i].nbytes = sizeof(float) * (size_t)t->numel, ts[i].data = t->data;
    }
    if (!rc) {
        snprintf(path, sizeof path, "%s/model.safetensors", dir);
        rc = st_write(path, ts, m->n_tensors, &e);
    }
    if (!rc) {
        snprintf(path, sizeof path, "%s/config.json", dir);
        rc = write_atomic(path, json, &e);
    }
    free(json), free(ts);
    return tb_err_out(rc, &e, err, errlen);
}

int tubelet_model_export(const tubelet_model *m, const char *out, char *err, size_t errlen) {
    tb_err e = {{0}};
    int rc0 = tb_model_check_weights(m, "export", &e);
    if (rc0) return tb_err_out(rc0, &e, err, errlen);
    struct stat st;
    if (lstat(out, &st) == 0)
        return tb_err_out(tb_fail(&e, TUBELET_ERR_IO, "%s: already exists (convert writes a new "
                                  "directory)", out), &e, err, errlen);
    tb_atomic_dir d;
    int rc = tb_atomic_dir_open(&d, out, &e);
    if (rc) return tb_err_out(rc, &e, err, errlen);
    if ((rc = tubelet_model_save(m, d.tmp, err, errlen))) {
        tb_atomic_dir_abort(&d);
        return rc;
    }
    /* an official checkpoint: the preprocessing its authors trained with — the family's, with
     * the crop, mean and std of the file's own training config where it has one */
    char *pre = NULL;
    char path[4300];
    snprintf(path, sizeof path, "%s/preprocessor_config.json", d.tmp);
    rc = m->ckpt_path ? tb_ckpt_preprocessor_for(m->ckpt_path, m->cfg.image_h, &pre, &e) : TUBELET_OK;
    if (!rc && pre) rc = write_atomic(path, pre, &e);
    free(pre);
    if (rc) tb_atomic_dir_abort(&d);
    else rc = tb_atomic_dir_commit(&d, &e);
    return tb_err_out(rc, &e, err, errlen);
}

int tubelet_checkpoint_is_file(const char *path) { return tb_ckpt_is_file(path); }

int tubelet_checkpoint_sampling_rate(const char *path) {
    tb_ckpt_cfg c;
    tb_err e = {{0}};
    if (!path || !tb_ckpt_is_file(path) || tb_ckpt_read_cfg(path, &c, NULL, &e)) return 0;
    return c.sampling_rate > 0 ? c.sampling_rate : 0;
}
