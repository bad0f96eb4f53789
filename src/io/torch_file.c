/* PyTorch checkpoint files. See torch_file.h. */
#include "torch_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zip.h>

#include "safetensors.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "torch_file.c reads little-endian storages in place"
#endif

#define MAX_ENTRIES (1 << 20)
#define MAX_PICKLE ((size_t)256 << 20)   /* data.pkl of a large model is well under 1 MB */
#define MAX_INFLATE ((uint64_t)1 << 30)  /* one compressed storage, inflated */
#define MAX_RATIO 64                     /* weights compress ~1.1:1; more is a zip bomb */

struct tf_file {
    char *name;
    const uint8_t *buf;
    size_t len;
    void *map;                /* tf_open's mapping of the file, or NULL */
    int fd;                   /* the file while opening (tf_open), or -1 */
    void *arena;              /* the legacy format's storages, aligned */
    size_t arena_len;
    const char *format;
    tp_pickle *pk;
    void **owned;             /* inflated storages and data.pkl */
    int n_owned;
    tf_tensor *t;
    int n;
    tb_strmap by_name;        /* t's names -> index */
    int names_only;           /* tf_open_names: the pickle only, no storage read */
    char **names;             /* the nested state dicts' names (prefix.key), owned */
    int n_names;
    int nested;               /* 1: state dicts side by side under the root (tf_nested) */
};

static uint64_t le(const uint8_t *p, int n) {
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

static int own(tf_file *f, void *p, tb_err *e) {
    void **o = realloc(f->owned, sizeof *o * (size_t)(f->n_owned + 1));
    if (!o) {
        tb_free(p);
        return tb_fail(e, TUBELET_ERR_MEMORY, "%s: out of memory", f->name);
    }
    f->owned = o;
    f->owned[f->n_owned++] = p;
    return TUBELET_OK;
}

/* ---- zip ---- */

/* An entry name that could not escape a directory if extracted: no absolute path, no drive or
 * backslash, no ".." component. Torch never writes anything else. */
static int safe_entry_name(const char *s) {
    if (!s[0] || s[0] == '/' || strchr(s, '\\') || strchr(s, ':')) return 0;
    for (const char *p = s; *p;) {
        const char *q = strchr(p, '/');
        size_t n = q ? (size_t)(q - p) : strlen(p);
        if (n == 2 && p[0] == '.' && p[1] == '.') return 0;
        p += n + (q ? 1 : 0);
    }
    return 1;
}

/* The local header offset of each central directory entry, in libzip's index order (the
 * central directory's). libzip has validated the archive; this reads only the offsets, which its
 * API does not give, to use stored entries in place. */
static int central_offsets(const tf_file *f, uint64_t *off, int64_t n, tb_err *e) {
    const uint8_t *b = f->buf;
    size_t len = f->len, eocd = 0;
    int found = 0;
    for (size_t i = len >= 22 ? len - 22 : 0; len >= 22 && i + 65557 >= len; i--) {
        if (le(b + i, 4) == 0x06054b50) {
            eocd = i, found = 1;
            break;
        }
        if (i == 0) break;
    }
    if (!found) return tb_fail(e, TUBELET_ERR_FORMAT, "%s: no end of central directory", f->name);
    uint64_t cd = le(b + eocd + 16, 4), count = le(b + eocd + 10, 2);
    if ((cd == 0xffffffffu || count == 0xffff) && eocd >= 20 && le(b + eocd - 20, 4) == 0x07064b50) {
        uint64_t z = le(b + eocd - 20 + 8, 8);
        if (z > len || len - z < 56 || le(b + z, 4) != 0x06064b50)
            return tb_fail(e, TUBELET_ERR_FORMAT, "%s: bad zip64 end of central directory", f->name);
        count = le(b + z + 32, 8), cd = le(b + z + 48, 8);
    }
    if ((int64_t)count != n) return tb_fail(e, TUBELET_ERR_FORMAT, "%s: central directory count differs", f->name);
    uint64_t p = cd;
    for (int64_t i = 0; i < n; i++) {
        if (p > len || len - p < 46 || le(b + p, 4) != 0x02014b50)
            return tb_fail(e, TUBELET_ERR_FORMAT, "%s: bad central directory entry %lld", f->name, (long long)i);
        uint64_t nl = le(b + p + 28, 2), xl = le(b + p + 30, 2), cl = le(b + p + 32, 2);
        uint64_t comp = le(b + p + 20, 4), size = le(b + p + 24, 4), o = le(b + p + 42, 4);
        if (len - p < 46 + nl + xl + cl)
            return tb_fail(e, TUBELET_ERR_FORMAT, "%s: central directory entry %lld runs past the end", f->name, (long long)i);
        /* zip64 extra field: the 8-byte values replace the saturated ones, in this order */
        for (uint64_t x = p + 46 + nl; x + 4 <= p + 46 + nl + xl;) {
            uint64_t id = le(b + x, 2), sz = le(b + x + 2, 2), q = x + 4;
            if (x + 4 + sz > p + 46 + nl + xl) break;
            if (id == 1) {
                if (size == 0xffffffffu && q + 8 <= x + 4 + sz) size = le(b + q, 8), q += 8;
                if (comp == 0xffffffffu && q + 8 <= x + 4 + sz) comp = le(b + q, 8), q += 8;
                if (o == 0xffffffffu && q + 8 <= x + 4 + sz) o = le(b + q, 8);
            }
            x += 4 + sz;
        }
        off[i] = o;
        p += 46 + nl + xl + cl;
    }
    return TUBELET_OK;
}

/* Start of a stored entry's data: its local header checked, then the bytes bounded by the file. */
static int stored_data(const tf_file *f, uint64_t hdr, const char *name, uint64_t size,
                       const uint8_t **out, tb_err *e) {
    const uint8_t *b = f->buf;
    size_t nl = strlen(name);
    if (hdr > f->len || f->len - hdr < 30 || le(b + hdr, 4) != 0x04034b50 ||
        le(b + hdr + 26, 2) != nl || f->len - hdr - 30 < nl || memcmp(b + hdr + 30, name, nl))
        return tb_fail(e, TUBELET_ERR_FORMAT, "%s: entry '%s': bad local header", f->name, name);
    uint64_t data = hdr + 30 + nl + le(b + hdr + 28, 2);
    if (data > f->len || f->len - data < size)
        return tb_fail(e, TUBELET_ERR_FORMAT, "%s: entry '%s' (%llu bytes) runs past the end of the file",
                       f->name, name, (unsigned long long)size);
    *out = b + data;
    return TUBELET_OK;
}

/* A compressed entry, inflated into an owned buffer, within the zip-bomb bounds. */
static int inflate_entry(tf_file *f, zip_t *z, zip_uint64_t idx, const zip_stat_t *st,
                         uint64_t limit, const uint8_t **out, tb_err *e) {
    if (st->size > limit || st->size > (uint64_t)MAX_RATIO * st->comp_size + 4096)
        return tb_fail(e, TUBELET_ERR_FORMAT,
                       "%s: entry '%s': %llu compressed bytes inflate to %llu (limit %llu bytes, "
                       "ratio %d): refused as a possible zip bomb",
                       f->name, st->name, (unsigned long long)st->comp_size,
                       (unsigned long long)st->size, (unsigned long long)limit, MAX_RATIO);
    uint8_t *buf = tb_alloc(st->size ? st->size : 1);
    if (!buf) return tb_fail(e, TUBELET_ERR_MEMORY, "%s: out of memory", f->name);
    int rc = own(f, buf, e);
    if (rc) return rc;
    zip_file_t *zf = zip_fopen_index(z, idx, 0);
    if (!zf) return tb_fail(e, TUBELET_ERR_FORMAT, "%s: entry '%s': %s", f->name, st->name, zip_strerror(z));
    zip_int64_t got = zip_fread(zf, buf, st->size);
    uint8_t extra;
    zip_int64_t more = got == (zip_int64_t)st->size ? zip_fread(zf, &extra, 1) : 0;
    int bad = got != (zip_int64_t)st->size || more != 0;
    char why[200];
    snprintf(why, sizeof why, "%s", zip_file_strerror(zf));
    zip_fclose(zf);
    if (bad)
        return tb_fail(e, TUBELET_ERR_FORMAT, "%s: entry '%s' does not inflate to its declared %llu bytes (%s)",
                       f->name, st->name, (unsigned long long)st->size, why);
    *out = buf;
    return TUBELET_OK;
}

/* An entry's bytes: in place when stored, inflated otherwise. */
static int entry_bytes(tf_file *f, zip_t *z, const uint64_t *offs, zip_int64_t idx, uint64_t limit,
                       const uint8_t **out, size_t *size, tb_err *e) {
    zip_stat_t st;
    zip_stat_init(&st);
    if (zip_stat_index(z, (zip_uint64_t)idx, ZIP_FL_ENC_RAW, &st) != 0)
        return tb_fail(e, TUBELET_ERR_FORMAT, "%s: %s", f->name, zip_strerror(z));
    if (st.encryption_method != ZIP_EM_NONE)
        return tb_fail(e, TUBELET_ERR_FORMAT, "%s: entry '%s' is encrypted", f->name, st.name);
    *size = (size_t)st.size;
    if (st.comp_method == ZIP_CM_STORE) {
        if (st.comp_size != st.size)
            return tb_fail(e, TUBELET_ERR_FORMAT, "%s: entry '%s': stored sizes differ", f->name, st.name);
        return stored_data(f, offs[idx], st.name, st.size, out, e);
    }
    return inflate_entry(f, z, (zip_uint64_t)idx, &st, limit, out, e);
}

static int parse_pickle(tf_file *f, const uint8_t *b, size_t n, const char *what, tp_pickle **out,
                        size_t *used, tb_err *e) {
    int rc = tp_parse(out, b, n, used, e);
    if (rc) tb_prefix(e, rc, "%s: %s: ", f->name, what);
    return rc;
}

static int read_zip(tf_file *f, tb_err *e) {
    zip_error_t ze;
    zip_error_init(&ze);
    zip_source_t *src = zip_source_buffer_create(f->buf, f->len, 0, &ze);
    zip_t *z = src ? zip_open_from_source(src, ZIP_RDONLY | ZIP_CHECKCONS, &ze) : NULL;
    if (!z) {
        int rc = tb_fail(e, TUBELET_ERR_FORMAT, "%s: not a valid zip archive: %s", f->name,
                         zip_error_strerror(&ze));
        if (src) zip_source_free(src);
        zip_error_fini(&ze);
        return rc;
    }
    zip_error_fini(&ze);
    int rc = TUBELET_OK;
    uint64_t *offs = NULL;
    char prefix[256] = "", name[400];
    zip_int64_t n = zip_get_num_entries(z, 0), pkl = -1;
    if (n <= 0 || n > MAX_ENTRIES) {
        rc = tb_fail(e, TUBELET_ERR_FORMAT, "%s: %lld zip entries", f->name, (long long)n);
        goto done;
    }
    for (zip_int64_t i = 0; i < n; i++) {
        const char *s = zip_get_name(z, (zip_uint64_t)i, ZIP_FL_ENC_RAW);
        if (!s || !safe_entry_name(s)) {
            rc = tb_fail(e, TUBELET_ERR_FORMAT, "%s: zip entry '%s' has an absolute or '..' path "
                         "(refused)", f->name, s ? s : "?");
            goto done;
        }
        const char *slash = strchr(s, '/');
        if (slash && !strcmp(slash, "/data.pkl") && (size_t)(slash - s) < sizeof prefix) {
            if (pkl >= 0) {
                rc = tb_fail(e, TUBELET_ERR_FORMAT, "%s: two data.pkl entries", f->name);
                goto done;
            }
            pkl = i;
            memcpy(prefix, s, (size_t)(slash - s));
            prefix[slash - s] = 0;
        }
    }
    if (pkl < 0) {
        rc = tb_fail(e, TUBELET_ERR_FORMAT, "%s: a zip archive without <name>/data.pkl (not a torch.save file)", f->name);
        goto done;
    }
    if (!(offs = calloc((size_t)n, sizeof *offs))) {
        rc = tb_fail(e, TUBELET_ERR_MEMORY, "%s: out of memory", f->name);
        goto done;
    }
    if ((rc = central_offsets(f, offs, n, e))) goto done;
    snprintf(name, sizeof name, "%s/byteorder", prefix);
    zip_int64_t bo = zip_name_locate(z, name, ZIP_FL_ENC_RAW);
    const uint8_t *b;
    size_t size;
    if (bo >= 0) {
        if ((rc = entry_bytes(f, z, offs, bo, 64, &b, &size, e))) goto done;
        if (size != 6 || memcmp(b, "little", 6)) {
            rc = tb_fail(e, TUBELET_ERR_UNSUPPORTED, "%s: a big-endian checkpoint", f->name);
            goto done;
        }
    }
    if ((rc = entry_bytes(f, z, offs, pkl, MAX_PICKLE, &b, &size, e)) ||
        (rc = parse_pickle(f, b, size, "data.pkl", &f->pk, NULL, e)))
        goto done;
    for (int s = 0; !f->names_only && s < f->pk->n_storages; s++) {
        tp_storage *st = &f->pk->storages[s];
        snprintf(name, sizeof name, "%s/data/%s", prefix, st->key);
        zip_int64_t idx = zip_name_locate(z, name, ZIP_FL_ENC_RAW);
        if (idx < 0) {
            rc = tb_fail(e, TUBELET_ERR_FORMAT, "%s: storage '%s' has no entry %s", f->name, st->key, name);
            goto done;
        }
        if ((rc = entry_bytes(f, z, offs, idx, MAX_INFLATE, &st->data, &st->nbytes, e))) goto done;
    }
    f->format = "zip";
done:
    free(offs);
    zip_discard(z);
    return rc;
}

/* ---- legacy ---- */
static const uint8_t LEGACY_MAGIC[15] = {0x80, 0x02, 0x8a, 0x0a, 0x6c, 0xfc, 0x9c, 0x46,
                                         0xf9, 0x20, 0x6a, 0xa8, 0x50, 0x19, 0x2e};

/* Legacy storages follow one another at any byte offset, so a float one is seldom 4-byte aligned
 * and could not be used in place: they are read once into one aligned arena instead (pread, so
 * the mapping's pages are never touched and the weights exist once in memory). */
static int align_storages(tf_file *f, tb_err *e) {
    size_t total = 0;
    for (int s = 0; s < f->pk->n_storages; s++) {
        const tp_storage *st = &f->pk->storages[s];
        if ((uintptr_t)st->data % 64) total += (st->nbytes + 63) & ~(size_t)63;
    }
    if (!total) return TUBELET_OK;
    const size_t huge = (size_t)2 << 20;
    f->arena_len = (total + huge - 1) / huge * huge;
    void *a = mmap(NULL, f->arena_len, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (a == MAP_FAILED) {
        f->arena_len = 0;
        return tb_fail(e, TUBELET_ERR_MEMORY, "%s: out of memory (%zu bytes)", f->name, total);
    }
    f->arena = a;
    uint8_t *dst = a;
    for (int s = 0; s < f->pk->n_storages; s++) {
        tp_storage *st = &f->pk->storages[s];
        if ((uintptr_t)st->data % 64 == 0) continue;
        const size_t pos = (size_t)(st->data - f->buf);
        size_t done = 0;
        while (f->fd >= 0 && done < st->nbytes) {
            ssize_t r = pread(f->fd, dst + done, st->nbytes - done, (off_t)(pos + done));
            if (r < 0 && errno == EINTR) continue;
            if (r <= 0) return tb_fail(e, TUBELET_ERR_IO, "%s: read failed", f->name);
            done += (size_t)r;
        }
        if (f->fd < 0) memcpy(dst, st->data, st->nbytes);
        st->data = dst;
        dst += (st->nbytes + 63) & ~(size_t)63;
    }
    return TUBELET_OK;
}

static int read_legacy(tf_file *f, tb_err *e) {
    size_t pos = sizeof LEGACY_MAGIC, used;
    if (f->len < pos || memcmp(f->buf, LEGACY_MAGIC, pos))
        return tb_fail(e, TUBELET_ERR_FORMAT, "%s: a pickle without torch's magic number (not a torch.save file)", f->name);
    tp_pickle *hdr = NULL;
    int rc = parse_pickle(f, f->buf + pos, f->len - pos, "protocol version", &hdr, &used, e);
    if (rc) return rc;
    int ok = hdr->root->kind == TP_INT && hdr->root->i == 1001;
    tp_free(hdr);
    if (!ok) return tb_fail(e, TUBELET_ERR_UNSUPPORTED, "%s: legacy protocol version is not 1001", f->name);
    pos += used;
    if ((rc = parse_pickle(f, f->buf + pos, f->len - pos, "sys_info", &hdr, &used, e))) return rc;
    const tp_value *little = tp_dict_get(hdr->root, "little_endian");
    ok = hdr->root->kind == TP_DICT && (!little || (little->kind == TP_BOOL && little->i));
    tp_free(hdr);
    if (!ok) return tb_fail(e, TUBELET_ERR_UNSUPPORTED, "%s: a big-endian checkpoint", f->name);
    pos += used;
    if ((rc = parse_pickle(f, f->buf + pos, f->len - pos, "object pickle", &f->pk, &used, e))) return rc;
    if (f->names_only) {
        f->format = "legacy";
        return TUBELET_OK;
    }
    pos += used;
    tp_pickle *keys = NULL;
    if ((rc = parse_pickle(f, f->buf + pos, f->len - pos, "storage keys", &keys, &used, e))) return rc;
    pos += used;
    const tp_value *kl = keys->root;
    if (kl->kind != TP_LIST) rc = tb_fail(e, TUBELET_ERR_FORMAT, "%s: storage keys are not a list", f->name);
    /* each storage: its element count (int64), then its bytes, in the keys' order */
    for (size_t i = 0; !rc && i < kl->n; i++) {
        tp_storage *st = NULL;
        if (kl->items[i]->kind == TP_STR) st = tp_find_storage(f->pk, kl->items[i]->s);
        if (!st || st->data) {
            rc = tb_fail(e, TUBELET_ERR_FORMAT, "%s: storage key %zu is unknown or repeated", f->name, i);
            break;
        }
        if (f->len - pos < 8) {
            rc = tb_fail(e, TUBELET_ERR_FORMAT, "%s: truncated before storage '%s'", f->name, st->key);
            break;
        }
        uint64_t numel = le(f->buf + pos, 8), es = tp_dtype_size(st->dtype);
        pos += 8;
        if (numel > (f->len - pos) / es) {
            rc = tb_fail(e, TUBELET_ERR_FORMAT, "%s: storage '%s' declares %llu elements, more than "
                         "the file holds", f->name, st->key, (unsigned long long)numel);
            break;
        }
        st->data = f->buf + pos, st->nbytes = (size_t)(numel * es);
        pos += st->nbytes;
    }
    tp_free(keys);
    for (int s = 0; !rc && s < f->pk->n_storages; s++)
        if (!f->pk->storages[s].data)
            rc = tb_fail(e, TUBELET_ERR_FORMAT, "%s: storage '%s' is missing from the file", f->name,
                         f->pk->storages[s].key);
    if (!rc) rc = align_storages(f, e);
    f->format = "legacy";
    return rc;
}

/* ---- tensors ---- */
int64_t tf_numel(const tf_tensor *t) {
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++) n *= t->shape[i];
    return n;
}

/* The tensor's furthest element inside its storage, and no two of its elements at one place. */
static int check_layout(const tf_file *f, const char *name, const tp_tensor *t, const tp_storage *s,
                        int *contiguous, tb_err *e) {
    const size_t es = tp_dtype_size(s->dtype);
    if ((uint64_t)s->numel > s->nbytes / es)
        return tb_fail(e, TUBELET_ERR_FORMAT, "%s: storage '%s' declares %lld elements but holds %zu bytes",
                       f->name, s->key, (long long)s->numel, s->nbytes);
    int64_t last = t->offset, numel = 1;
    for (int i = 0; i < t->ndim; i++) {
        if (__builtin_mul_overflow(numel, t->size[i], &numel)) goto too_big;
        if (t->size[i] == 0) return TUBELET_OK; /* empty: reads nothing */
    }
    for (int i = 0; i < t->ndim; i++) {
        int64_t step;
        if (__builtin_mul_overflow(t->size[i] - 1, t->stride[i], &step) ||
            __builtin_add_overflow(last, step, &last))
            goto too_big;
    }
    if (last >= s->numel) goto too_big;
    /* dims by increasing stride: each stride beyond what the smaller ones reach */
    int order[TP_MAX_DIMS], n = 0;
    for (int i = 0; i < t->ndim; i++)
        if (t->size[i] > 1) order[n++] = i;
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && t->stride[order[j]] < t->stride[order[j - 1]]; j--) {
            int x = order[j]; order[j] = order[j - 1]; order[j - 1] = x;
        }
    int64_t reach = 0; /* furthest offset the smaller dims reach */
    for (int k = 0; k < n; k++) {
        const int d = order[k];
        if (t->stride[d] <= reach)
            return tb_fail(e, TUBELET_ERR_FORMAT, "%s: tensor '%s' has overlapping elements (stride %lld "
                           "in dimension %d): refused", f->name, name, (long long)t->stride[d], d);
        reach += (t->size[d] - 1) * t->stride[d];
    }
    int64_t want = 1;
    *contiguous = 1;
    for (int i = t->ndim - 1; i >= 0; i--) {
        if (t->size[i] > 1 && t->stride[i] != want) *contiguous = 0;
        want *= t->size[i];
    }
    return TUBELET_OK;
too_big:
    return tb_fail(e, TUBELET_ERR_FORMAT, "%s: tensor '%s' reaches past the end of its storage '%s' "
                   "(%lld elements): refused", f->name, name, s->key, (long long)s->numel);
}

static const tp_value *find_state_dict(const tp_value *d) {
    static const char *const keys[] = {"model_state", "state_dict", "model", "module"};
    for (int depth = 0; depth < 4 && d && d->kind == TP_DICT; depth++) {
        for (size_t i = 1; i < d->n; i += 2)
            if (d->items[i]->kind == TP_TENSOR) return d;
        const tp_value *next = NULL;
        for (size_t k = 0; k < sizeof keys / sizeof *keys && !next; k++) {
            next = tp_dict_get(d, keys[k]);
            if (next && next->kind != TP_DICT) next = NULL;
        }
        d = next;
    }
    return NULL;
}

/* Adds the tensors of state dict sd, their names prefixed with prefix ("" or "key." / "key.i."
 * of a nested layout). */
static int add_state_dict(tf_file *f, const tp_value *sd, const char *prefix, tb_err *e) {
    for (size_t i = 0; i + 1 < sd->n; i += 2) {
        const tp_value *k = sd->items[i], *v = sd->items[i + 1];
        if (v->kind != TP_TENSOR) continue;
        if (k->kind != TP_STR || strlen(k->s) != k->len)
            return tb_fail(e, TUBELET_ERR_FORMAT, "%s: a state dict key that is not a string", f->name);
        const char *name = k->s;
        if (*prefix) {
            const size_t n = strlen(prefix) + k->len + 1;
            char *full = malloc(n), **names = realloc(f->names, sizeof *names * (size_t)(f->n_names + 1));
            if (names) f->names = names;
            if (!full || !names) {
                free(full);
                return tb_fail(e, TUBELET_ERR_MEMORY, "%s: out of memory", f->name);
            }
            snprintf(full, n, "%s%s", prefix, k->s);
            f->names[f->n_names++] = full;
            name = full;
        }
        const int had = tb_strmap_add(&f->by_name, name, f->n);
        if (had < 0) return tb_fail(e, TUBELET_ERR_MEMORY, "%s: out of memory", f->name);
        if (had != f->n)
            return tb_fail(e, TUBELET_ERR_FORMAT, "%s: tensor '%s' appears twice", f->name, name);
        const tp_storage *s = &f->pk->storages[v->storage];
        tf_tensor *t = &f->t[f->n];
        int rc = f->names_only ? TUBELET_OK : check_layout(f, name, v->t, s, &t->contiguous, e);
        if (rc) return rc;
        t->name = name, t->dtype = s->dtype, t->ndim = v->t->ndim, t->storage = v->storage;
        memcpy(t->shape, v->t->size, sizeof t->shape);
        memcpy(t->stride, v->t->stride, sizeof t->stride);
        t->base = f->names_only ? NULL : s->data + (size_t)v->t->offset * tp_dtype_size(s->dtype);
        f->n++;
    }
    return TUBELET_OK;
}

/* The number of tensor values of d, a dict (0 for anything else). */
static size_t n_tensors(const tp_value *d) {
    size_t n = 0;
    if (d && d->kind == TP_DICT)
        for (size_t i = 1; i < d->n; i += 2) n += d->items[i]->kind == TP_TENSOR;
    return n;
}

/* Several state dicts side by side under the root (facebookresearch/vjepa2's "encoder",
 * "target_encoder", "predictor", and its probes' "classifiers" list): one level deep, a dict of
 * tensors under a string key, or in a list or tuple there; named "key." or "key.i." + name.
 * Anything else beside them (an optimiser's state, numbers) is not looked at. */
static int collect_nested(tf_file *f, tb_err *e) {
    const tp_value *root = f->pk->root;
    size_t total = 0;
    for (size_t i = 0; root && root->kind == TP_DICT && i + 1 < root->n; i += 2) {
        const tp_value *k = root->items[i], *v = root->items[i + 1];
        if (k->kind != TP_STR || strlen(k->s) != k->len || k->len > 64) continue;
        if (v->kind == TP_DICT) total += n_tensors(v);
        else if (v->kind == TP_LIST || v->kind == TP_TUPLE)
            for (size_t j = 0; j < v->n && j < 1000; j++) total += n_tensors(v->items[j]);
    }
    if (!total)
        return tb_fail(e, TUBELET_ERR_FORMAT, "%s: no state dict (a dict of tensors, at the top or "
                       "under 'model_state', 'state_dict', 'model' or 'module', or dicts of tensors "
                       "side by side under the top)", f->name);
    f->t = calloc(total + 1, sizeof *f->t);
    if (!f->t) return tb_fail(e, TUBELET_ERR_MEMORY, "%s: out of memory", f->name);
    char prefix[96];
    for (size_t i = 0; i + 1 < root->n; i += 2) {
        const tp_value *k = root->items[i], *v = root->items[i + 1];
        if (k->kind != TP_STR || strlen(k->s) != k->len || k->len > 64) continue;
        int rc = TUBELET_OK;
        if (v->kind == TP_DICT && n_tensors(v)) {
            snprintf(prefix, sizeof prefix, "%s.", k->s);
            rc = add_state_dict(f, v, prefix, e);
        } else if (v->kind == TP_LIST || v->kind == TP_TUPLE) {
            for (size_t j = 0; j < v->n && j < 1000 && !rc; j++) {
                if (!n_tensors(v->items[j])) continue;
                snprintf(prefix, sizeof prefix, "%s.%zu.", k->s, j);
                rc = add_state_dict(f, v->items[j], prefix, e);
            }
        }
        if (rc) return rc;
    }
    f->nested = 1;
    return TUBELET_OK;
}

static int collect_tensors(tf_file *f, tb_err *e) {
    const tp_value *sd = find_state_dict(f->pk->root);
    if (!sd) return collect_nested(f, e);
    f->t = calloc(sd->n / 2 + 1, sizeof *f->t);
    if (!f->t) return tb_fail(e, TUBELET_ERR_MEMORY, "%s: out of memory", f->name);
    return add_state_dict(f, sd, "", e);
}

int tf_sniff(const uint8_t *h, size_t n) {
    if (n >= 4 && !memcmp(h, "PK\3\4", 4)) return 1;
    return n >= 4 && h[0] == 0x80 && h[1] == 2 && h[2] == 0x8a;
}

static int open_impl(tf_file **out, const uint8_t *buf, size_t len, const char *name, int fd,
                     int names_only, tb_err *e) {
    *out = NULL;
    tf_file *f = calloc(1, sizeof *f);
    if (!f || !(f->name = strdup(name))) {
        free(f);
        return tb_fail(e, TUBELET_ERR_MEMORY, "%s: out of memory", name);
    }
    f->buf = buf, f->len = len, f->fd = fd, f->names_only = names_only;
    int rc;
    if (len >= 4 && !memcmp(buf, "PK\3\4", 4)) rc = read_zip(f, e);
    else if (len >= 2 && buf[0] == 0x80) rc = read_legacy(f, e);
    else if (len > 262 && !memcmp(buf + 257, "ustar", 5))
        rc = tb_fail(e, TUBELET_ERR_UNSUPPORTED, "%s: torch's tar format (before 0.4) is not supported", name);
    else rc = tb_fail(e, TUBELET_ERR_FORMAT, "%s: not a torch checkpoint (neither a zip archive nor a pickle)", name);
    if (!rc) rc = collect_tensors(f, e);
    f->fd = -1;
    if (rc) {
        tf_close(f);
        return rc;
    }
    *out = f;
    return TUBELET_OK;
}

int tf_open_mem(tf_file **out, const uint8_t *buf, size_t len, const char *name, tb_err *e) {
    return open_impl(out, buf, len, name, -1, 0, e);
}

static int open_path(tf_file **out, const char *path, int names_only, tb_err *e) {
    *out = NULL;
    int fd = tb_open_regular(path, e);
    if (fd < 0) return -fd;
    struct stat st;
    if (fstat(fd, &st) != 0 || st.st_size < 16) {
        close(fd);
        return tb_fail(e, TUBELET_ERR_FORMAT, "%s: too short to be a checkpoint", path);
    }
    /* copy-on-write: tensors are used in place from the map, and training updates them there
     * (a page is copied on its first write; the file itself never changes) */
    void *map = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
    if (map == MAP_FAILED) {
        int err = errno;
        close(fd);
        return tb_fail(e, TUBELET_ERR_IO, "%s: mmap failed: %s", path, strerror(err));
    }
    int rc = open_impl(out, map, (size_t)st.st_size, path, fd, names_only, e);
    close(fd);
    if (rc) {
        munmap(map, (size_t)st.st_size);
        return rc;
    }
    (*out)->map = map;
    return TUBELET_OK;
}

int tf_open(tf_file **out, const char *path, tb_err *e) { return open_path(out, path, 0, e); }

int tf_open_names(tf_file **out, const char *path, tb_err *e) {
    return open_path(out, path, 1, e);
}

void tf_close(tf_file *f) {
    if (!f) return;
    tp_free(f->pk);
    for (int i = 0; i < f->n_owned; i++) tb_free(f->owned[i]);
    free(f->owned);
    free(f->t);
    tb_strmap_free(&f->by_name);
    for (int i = 0; i < f->n_names; i++) free(f->names[i]);
    free(f->names);
    if (f->map) munmap(f->map, f->len);
    if (f->arena) munmap(f->arena, f->arena_len);
    free(f->name);
    free(f);
}

int tf_count(const tf_file *f) { return f->n; }
int tf_nested(const tf_file *f) { return f->nested; }
const tf_tensor *tf_at(const tf_file *f, int i) { return i >= 0 && i < f->n ? &f->t[i] : NULL; }
const char *tf_format(const tf_file *f) { return f->format; }

const tf_tensor *tf_find(const tf_file *f, const char *name) {
    const int i = tb_strmap_get(&f->by_name, name);
    return i >= 0 ? &f->t[i] : NULL;
}

const tp_value *tf_root(const tf_file *f) { return f->pk->root; }

const char *tf_root_string(const tf_file *f, const char *key) {
    const tp_value *v = tp_dict_get(f->pk->root, key);
    return v && v->kind == TP_STR ? v->s : NULL;
}

static float elem_f32(const uint8_t *p, tp_dtype d) {
    float x;
    switch (d) {
    case TP_F32: memcpy(&x, p, 4); return x;
    case TP_F64: { double v; memcpy(&v, p, 8); return (float)v; }
    case TP_F16: st_to_f32(&x, p, ST_F16, 1); return x;
    default: st_to_f32(&x, p, ST_BF16, 1); return x;
    }
}

int tf_to_f32(const tf_tensor *t, float *dst) {
    if (t->dtype != TP_F32 && t->dtype != TP_F64 && t->dtype != TP_F16 && t->dtype != TP_BF16)
        return TUBELET_ERR_FORMAT;
    const int64_t n = tf_numel(t);
    const size_t es = tp_dtype_size(t->dtype);
    if (t->contiguous) {
        if (t->dtype == TP_F32) memcpy(dst, t->base, (size_t)n * 4);
        else if (t->dtype == TP_F64) for (int64_t i = 0; i < n; i++) dst[i] = elem_f32(t->base + i * 8, TP_F64);
        else st_to_f32(dst, t->base, t->dtype == TP_F16 ? ST_F16 : ST_BF16, (size_t)n);
        return TUBELET_OK;
    }
    int64_t idx[TP_MAX_DIMS] = {0};
    for (int64_t i = 0; i < n; i++) {
        int64_t off = 0;
        for (int d = 0; d < t->ndim; d++) off += idx[d] * t->stride[d];
        dst[i] = elem_f32(t->base + (size_t)off * es, t->dtype);
        for (int d = t->ndim - 1; d >= 0; d--) {
            if (++idx[d] < t->shape[d]) break;
            idx[d] = 0;
        }
    }
    return TUBELET_OK;
}
