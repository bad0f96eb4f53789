/* The tensors of a Hugging Face model directory. See weights.h. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "weights.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "safetensors.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "weights.c uses little-endian F32 data in place"
#endif

#define INDEX_NAME "model.safetensors.index.json"
#define SINGLE_NAME "model.safetensors"
#define INDEX_MAX_BYTES ((size_t)64 << 20)

typedef struct {
    const st_tensor *t; /* owned by shards[shard] */
    int shard;
    int used;
    int indexed;        /* listed in the index's weight_map */
    float *owned;       /* converted copy, or NULL */
} w_entry;

struct tb_weights {
    char *source;       /* the index or the single file: used in "missing tensor" messages */
    int n_shards;
    st_file **shards;
    int n;
    w_entry *ent;       /* sorted by name */
    size_t owned_bytes;
    st_tensor *ext;     /* tb_weights_from_tensors: the tensors, held by owner */
    void *owner;
    void (*release)(void *owner);
};

/* The file a tensor comes from, for messages. */
static const char *entry_file(const tb_weights *w, const w_entry *en) {
    return w->n_shards ? st_path(w->shards[en->shard]) : w->source;
}

static int cmp_entry(const void *a, const void *b) {
    const w_entry *x = a, *y = b;
    return strcmp(x->t->name, y->t->name);
}

static w_entry *lookup(const tb_weights *w, const char *name) {
    int lo = 0, hi = w->n - 1;
    while (lo <= hi) {
        int mid = lo + (hi - lo) / 2;
        int c = strcmp(w->ent[mid].t->name, name);
        if (c == 0) return &w->ent[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid - 1;
    }
    return NULL;
}

static char *join(const char *dir, const char *name) {
    size_t a = strlen(dir), b = strlen(name);
    int slash = a > 0 && dir[a - 1] != '/';
    char *p = malloc(a + (size_t)slash + b + 1);
    if (!p) return NULL;
    memcpy(p, dir, a);
    if (slash) p[a] = '/';
    memcpy(p + a + slash, name, b + 1);
    return p;
}

void tb_weights_release(tb_weights *w, const void *p, size_t bytes) {
    for (int i = 0; w && i < w->n; i++)
        if (w->ent[i].owned == p) {
            tb_free(w->ent[i].owned);
            w->ent[i].owned = NULL;
            w->owned_bytes -= bytes;
            return;
        }
    for (int i = 0; w && i < w->n_shards; i++) st_release(w->shards[i], p, bytes);
}

void tb_weights_free(tb_weights *w) {
    if (!w) return;
    for (int i = 0; i < w->n; i++) tb_free(w->ent[i].owned);
    free(w->ent);
    for (int i = 0; i < w->n_shards; i++) st_close(w->shards[i]);
    free(w->shards);
    free(w->source);
    free(w->ext);
    if (w->release) w->release(w->owner);
    free(w);
}

int tb_weights_from_tensors(tb_weights **out, const char *source, const st_tensor *ts, int n,
                            void *owner, void (*release)(void *owner), tb_err *e) {
    *out = NULL;
    tb_weights *w = calloc(1, sizeof *w);
    if (!w) {
        if (release) release(owner);
        return tb_fail(e, TUBELET_ERR_MEMORY, "%s: out of memory", source);
    }
    w->owner = owner, w->release = release;
    w->source = strdup(source);
    w->ext = malloc(sizeof *w->ext * (size_t)(n ? n : 1));
    w->ent = calloc((size_t)(n ? n : 1), sizeof *w->ent);
    if (!w->source || !w->ext || !w->ent) {
        tb_weights_free(w);
        return tb_fail(e, TUBELET_ERR_MEMORY, "%s: out of memory", source);
    }
    memcpy(w->ext, ts, sizeof *ts * (size_t)n);
    for (int i = 0; i < n; i++) w->ent[i].t = &w->ext[i];
    w->n = n;
    qsort(w->ent, (size_t)n, sizeof *w->ent, cmp_entry);
    for (int i = 1; i < n; i++)
        if (!strcmp(w->ent[i - 1].t->name, w->ent[i].t->name)) {
            int rc = tb_fail(e, TUBELET_ERR_FORMAT, "%s: two tensors map to '%s'", source,
                             w->ent[i].t->name);
            tb_weights_free(w);
            return rc;
        }
    *out = w;
    return TUBELET_OK;
}

/* Collects all tensors of all shards into w->ent, sorted; duplicates across shards fail. */
static int build_entries(tb_weights *w, tb_err *e) {
    size_t total = 0;
    for (int s = 0; s < w->n_shards; s++) total += (size_t)st_count(w->shards[s]);
    if (total > (size_t)INT32_MAX / 2)
        return tb_fail(e, TUBELET_ERR_FORMAT, "%s: too many tensors", w->source);
    w->ent = calloc(total ? total : 1, sizeof *w->ent);
    if (!w->ent) return tb_fail(e, TUBELET_ERR_MEMORY, "%s: out of memory", w->source);
    int k = 0;
    for (int s = 0; s < w->n_shards; s++)
        for (int i = 0; i < st_count(w->shards[s]); i++) {
            w->ent[k].t = st_at(w->shards[s], i);
            w->ent[k].shard = s;
            k++;
        }
    w->n = k;
    qsort(w->ent, (size_t)w->n, sizeof *w->ent, cmp_entry);
    for (int i = 1; i < w->n; i++)
        if (strcmp(w->ent[i - 1].t->name, w->ent[i].t->name) == 0)
            return tb_fail(e, TUBELET_ERR_FORMAT, "%s: tensor '%s' appears in both %s and %s",
                           w->source, w->ent[i].t->name, st_path(w->shards[w->ent[i - 1].shard]),
                           st_path(w->shards[w->ent[i].shard]));
    return TUBELET_OK;
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static int shard_name_ok(const char *s) {
    if (!s[0]) return 0;
    if (strchr(s, '/') || strchr(s, '\\')) return 0;
    if (strstr(s, "..")) return 0;
    if (strcmp(s, ".") == 0) return 0;
    return 1;
}

static int open_index(tb_weights *w, const char *dir, int use_mmap, tb_err *e) {
    const char *ipath = w->source;
    char *text = NULL;
    size_t len = 0;
    int rc = tb_read_file(ipath, &text, &len, INDEX_MAX_BYTES, e);
    if (rc) return rc;
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(text, len, &end, 0);
    const char **names = NULL;
    if (!root) {
        size_t at = (end && end >= text && end <= text + len) ? (size_t)(end - text) : 0;
        rc = tb_fail(e, TUBELET_ERR_FORMAT, "%s: not valid JSON (error near byte %zu)", ipath, at);
        goto done;
    }
    for (const char *p = end; p < text + len; p++)
        if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r') {
            rc = tb_fail(e, TUBELET_ERR_FORMAT, "%s: trailing characters after the JSON object",
                         ipath);
            goto done;
        }
    if (!cJSON_IsObject(root)) {
        rc = tb_fail(e, TUBELET_ERR_FORMAT, "%s: expected a JSON object", ipath);
        goto done;
    }
    const cJSON *map = NULL;
    for (const cJSON *c = root->child; c; c = c->next) {
        if (strcmp(c->string, "weight_map") == 0) {
            if (map) {
                rc = tb_fail(e, TUBELET_ERR_FORMAT, "%s: 'weight_map' appears twice", ipath);
                goto done;
            }
            map = c;
        } else if (strcmp(c->string, "metadata") == 0 && !cJSON_IsObject(c) && !cJSON_IsNull(c)) {
            rc = tb_fail(e, TUBELET_ERR_FORMAT, "%s: 'metadata' must be an object", ipath);
            goto done;
        }
    }
    if (!cJSON_IsObject(map)) {
        rc = tb_fail(e, TUBELET_ERR_FORMAT, "%s: %s", ipath,
                     map ? "'weight_map' must be an object" : "no 'weight_map' object");
        goto done;
    }
    int n_map = cJSON_GetArraySize(map);
    names = calloc(n_map ? (size_t)n_map : 1, sizeof *names);
    if (!names) {
        rc = tb_fail(e, TUBELET_ERR_MEMORY, "%s: out of memory", ipath);
        goto done;
    }
    int k = 0;
    for (const cJSON *c = map->child; c; c = c->next) {
        if (!cJSON_IsString(c)) {
            rc = tb_fail(e, TUBELET_ERR_FORMAT,
                         "%s: weight_map entry for tensor '%s' is not a string (shard file name)",
                         ipath, c->string);
            goto done;
        }
        if (!shard_name_ok(c->valuestring)) {
            rc = tb_fail(e, TUBELET_ERR_FORMAT,
                         "%s: weight_map assigns tensor '%s' to shard '%s', which is not a plain "
                         "file name inside the model directory",
                         ipath, c->string, c->valuestring);
            goto done;
        }
        names[k++] = c->valuestring;
    }
    /* distinct shard names, in sorted order */
    qsort(names, (size_t)k, sizeof *names, cmp_str);
    int n_sh = 0;
    for (int i = 0; i < k; i++)
        if (i == 0 || strcmp(names[i], names[i - 1]) != 0) names[n_sh++] = names[i];
    w->shards = calloc(n_sh ? (size_t)n_sh : 1, sizeof *w->shards);
    if (!w->shards) {
        rc = tb_fail(e, TUBELET_ERR_MEMORY, "%s: out of memory", ipath);
        goto done;
    }
    for (int i = 0; i < n_sh; i++) {
        char *sp = join(dir, names[i]);
        if (!sp) {
            rc = tb_fail(e, TUBELET_ERR_MEMORY, "%s: out of memory", ipath);
            goto done;
        }
        rc = st_open(&w->shards[i], sp, use_mmap, e);
        free(sp);
        if (rc) {
            tb_prefix(e, rc, "%s: shard '%s': ", ipath, names[i]);
            goto done;
        }
        w->n_shards = i + 1;
    }
    if ((rc = build_entries(w, e))) goto done;
    /* every weight_map entry is in the shard it names; no name twice */
    for (const cJSON *c = map->child; c; c = c->next) {
        w_entry *en = lookup(w, c->string);
        if (!en) {
            rc = tb_fail(e, TUBELET_ERR_FORMAT,
                         "%s: weight_map assigns tensor '%s' to %s, which does not contain it",
                         ipath, c->string, c->valuestring);
            goto done;
        }
        if (en->indexed) {
            rc = tb_fail(e, TUBELET_ERR_FORMAT, "%s: weight_map lists tensor '%s' twice", ipath,
                         c->string);
            goto done;
        }
        const char *key = c->valuestring;
        const char **named = bsearch(&key, names, (size_t)n_sh, sizeof *names, cmp_str);
        if (!named || (int)(named - names) != en->shard) {
            rc = tb_fail(e, TUBELET_ERR_FORMAT,
                         "%s: weight_map assigns tensor '%s' to %s, but it is in %s", ipath,
                         c->string, c->valuestring, st_path(w->shards[en->shard]));
            goto done;
        }
        en->indexed = 1;
    }
    for (int i = 0; i < w->n; i++)
        if (!w->ent[i].indexed) {
            rc = tb_fail(e, TUBELET_ERR_FORMAT,
                         "%s: %s holds tensor '%s', which the weight_map does not list", ipath,
                         st_path(w->shards[w->ent[i].shard]), w->ent[i].t->name);
            goto done;
        }
done:
    free(names);
    cJSON_Delete(root);
    free(text);
    return rc;
}

int tb_weights_open(tb_weights **out, const char *dir, int use_mmap, tb_err *e) {
    if (!out || !dir) return tb_fail(e, TUBELET_ERR_ARG, "tb_weights_open: NULL argument");
    *out = NULL;
    tb_weights *w = calloc(1, sizeof *w);
    if (!w) return tb_fail(e, TUBELET_ERR_MEMORY, "%s: out of memory", dir);
    int rc;
    char *ipath = join(dir, INDEX_NAME), *spath = join(dir, SINGLE_NAME);
    if (!ipath || !spath) {
        rc = tb_fail(e, TUBELET_ERR_MEMORY, "%s: out of memory", dir);
        goto fail;
    }
    struct stat sb;
    if (stat(ipath, &sb) == 0) {
        w->source = ipath;
        ipath = NULL;
        rc = open_index(w, dir, use_mmap, e);
        if (rc) goto fail;
    } else if (stat(spath, &sb) == 0) {
        w->source = spath;
        spath = NULL;
        w->shards = calloc(1, sizeof *w->shards);
        if (!w->shards) {
            rc = tb_fail(e, TUBELET_ERR_MEMORY, "%s: out of memory", dir);
            goto fail;
        }
        rc = st_open(&w->shards[0], w->source, use_mmap, e);
        if (rc) goto fail;
        w->n_shards = 1;
        if ((rc = build_entries(w, e))) goto fail;
    } else {
        rc = tb_fail(e, TUBELET_ERR_IO,
                     "%s: no model.safetensors or model.safetensors.index.json (is this a Hugging "
                     "Face model directory?)",
                     dir);
        goto fail;
    }
    free(ipath);
    free(spath);
    *out = w;
    return TUBELET_OK;
fail:
    free(ipath);
    free(spath);
    tb_weights_free(w);
    return rc;
}

static void fmt_shape(char *buf, size_t cap, int ndim, const int64_t *shape) {
    size_t n = 0;
    n += (size_t)snprintf(buf + n, cap - n, "[");
    for (int i = 0; i < ndim && n < cap; i++)
        n += (size_t)snprintf(buf + n, cap - n, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (n < cap) snprintf(buf + n, cap - n, "]");
}

int64_t tb_weights_rows(tb_weights *w, const char *name) {
    w_entry *en = w ? lookup(w, name) : NULL;
    return en && en->t->ndim > 0 ? en->t->shape[0] : -1;
}

int tb_weights_get(tb_weights *w, const char *name, int ndim, const int64_t *shape,
                   const float **out, tb_err *e) {
    if (!w || !name || !out || ndim < 0 || ndim > ST_MAX_DIMS || (ndim > 0 && !shape))
        return tb_fail(e, TUBELET_ERR_ARG, "tb_weights_get: bad argument (tensor '%s', ndim %d)",
                       name ? name : "(null)", ndim);
    *out = NULL;
    w_entry *en = lookup(w, name);
    if (!en) return tb_fail(e, TUBELET_ERR_MISSING, "%s: missing tensor '%s'", w->source, name);
    const st_tensor *t = en->t;
    const char *file = entry_file(w, en);
    int same = t->ndim == ndim;
    for (int i = 0; same && i < ndim; i++) same = t->shape[i] == shape[i];
    if (!same) {
        char have[256], want[256];
        fmt_shape(have, sizeof have, t->ndim, t->shape);
        fmt_shape(want, sizeof want, ndim, shape);
        return tb_fail(e, TUBELET_ERR_SHAPE, "%s: tensor '%s' has shape %s, config.json implies %s",
                       file, name, have, want);
    }
    if (t->dtype != ST_F32 && t->dtype != ST_F16 && t->dtype != ST_BF16)
        return tb_fail(e, TUBELET_ERR_FORMAT,
                       "%s: tensor '%s' has dtype %s; only F32, F16 and BF16 weights are "
                       "supported",
                       file, name, st_dtype_name(t->dtype));
    if (en->owned) {
        *out = en->owned;
    } else if (t->dtype == ST_F32 && ((uintptr_t)t->data % sizeof(float)) == 0) {
        *out = (const float *)t->data;
    } else {
        size_t numel = t->nbytes / st_dtype_size(t->dtype);
        size_t bytes = numel * sizeof(float);
        float *buf = tb_alloc(bytes);
        if (!buf)
            return tb_fail(e, TUBELET_ERR_MEMORY, "%s: out of memory converting tensor '%s'",
                           file, name);
        st_to_f32(buf, t->data, t->dtype, numel);
        en->owned = buf;
        w->owned_bytes += bytes;
        *out = buf;
    }
    en->used = 1;
    return TUBELET_OK;
}

int tb_weights_has(const tb_weights *w, const char *name) {
    return w && name && lookup(w, name) != NULL;
}

void tb_weights_each_unused(const tb_weights *w, void (*fn)(void *user, const char *name),
                            void *user) {
    if (!w || !fn) return;
    for (int i = 0; i < w->n; i++)
        if (!w->ent[i].used) fn(user, w->ent[i].t->name);
}

void tb_weights_bytes(const tb_weights *w, size_t *mapped, size_t *owned) {
    size_t m = 0;
    if (w)
        for (int i = 0; i < w->n; i++) m += w->ent[i].t->nbytes;
    if (mapped) *mapped = m;
    if (owned) *owned = w ? w->owned_bytes : 0;
}
