/* safetensors reader and writer. See safetensors.h.
 *
 * The reader treats the file as untrusted input: the header length, the JSON header and every
 * tensor entry are checked before any pointer into the data section is handed out. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "safetensors.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#define ST_MAX_HEADER ((uint64_t)100 * 1000 * 1000) /* the reference implementation's limit */
#define ST_MAX_INT ((double)9007199254740992.0)       /* 2^53: exact in a JSON double */

struct st_file {
    char *path;
    unsigned char *base; /* mapping or malloc'd copy of the whole file */
    size_t size;         /* file size */
    int mapped;
    const unsigned char *data; /* data section */
    size_t data_size;
    int n;
    st_tensor *t;   /* header order */
    int *by_name;   /* indices into t, sorted by name */
};

static const struct {
    const char *name;
    st_dtype t;
    size_t size;
} dtypes[] = {
    {"F32", ST_F32, 4}, {"F16", ST_F16, 2}, {"BF16", ST_BF16, 2},
    {"F64", ST_F64, 8}, {"I64", ST_I64, 8}, {"I32", ST_I32, 4},
    {"I8", ST_I8, 1},   {"U8", ST_U8, 1},   {"BOOL", ST_BOOL, 1},
};
#define N_DTYPES ((int)(sizeof dtypes / sizeof dtypes[0]))

size_t st_dtype_size(st_dtype t) {
    for (int i = 0; i < N_DTYPES; i++)
        if (dtypes[i].t == t) return dtypes[i].size;
    return 0;
}

const char *st_dtype_name(st_dtype t) {
    for (int i = 0; i < N_DTYPES; i++)
        if (dtypes[i].t == t) return dtypes[i].name;
    return "?";
}

static int dtype_from_name(const char *s, st_dtype *t) {
    for (int i = 0; i < N_DTYPES; i++)
        if (strcmp(dtypes[i].name, s) == 0) {
            *t = dtypes[i].t;
            return 1;
        }
    return 0;
}

/* ---- accessors ---- */

int st_count(const st_file *f) { return f ? f->n : 0; }

const st_tensor *st_at(const st_file *f, int i) {
    if (!f || i < 0 || i >= f->n) return NULL;
    return &f->t[i];
}

const char *st_path(const st_file *f) { return f ? f->path : NULL; }

const st_tensor *st_find(const st_file *f, const char *name) {
    if (!f || !name) return NULL;
    int lo = 0, hi = f->n - 1;
    while (lo <= hi) {
        int mid = lo + (hi - lo) / 2;
        const st_tensor *t = &f->t[f->by_name[mid]];
        int c = strcmp(t->name, name);
        if (c == 0) return t;
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid - 1;
    }
    return NULL;
}

void st_release(st_file *f, const void *p, size_t bytes) {
    const unsigned char *a = p;
    if (!f || !f->mapped || a < f->base || a + bytes > f->base + f->size) return;
    const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t lo = ((uintptr_t)a + page - 1) & ~(page - 1), hi = ((uintptr_t)a + bytes) & ~(page - 1);
    if (hi > lo) madvise((void *)lo, hi - lo, MADV_DONTNEED);
}

void st_close(st_file *f) {
    if (!f) return;
    if (f->t)
        for (int i = 0; i < f->n; i++) free((char *)f->t[i].name);
    free(f->t);
    free(f->by_name);
    if (f->base) {
        if (f->mapped)
            munmap(f->base, f->size);
        else
            free(f->base);
    }
    free(f->path);
    free(f);
}

/* ---- helpers ---- */

static int utf8_valid(const unsigned char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        unsigned c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        size_t len;
        uint32_t cp;
        if (c >= 0xc2 && c <= 0xdf) {
            len = 2;
            cp = c & 0x1f;
        } else if (c >= 0xe0 && c <= 0xef) {
            len = 3;
            cp = c & 0x0f;
        } else if (c >= 0xf0 && c <= 0xf4) {
            len = 4;
            cp = c & 0x07;
        } else {
            return 0;
        }
        if (n - i < len) return 0;
        for (size_t k = 1; k < len; k++) {
            if ((s[i + k] & 0xc0) != 0x80) return 0;
            cp = (cp << 6) | (s[i + k] & 0x3f);
        }
        if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10ffff)) ||
            (cp >= 0xd800 && cp <= 0xdfff))
            return 0;
        i += len;
    }
    return 1;
}

/* A JSON number that is a non-negative integer small enough to be exact. */
typedef enum { NUM_OK, NUM_NOT_NUMBER, NUM_NEGATIVE, NUM_NOT_INTEGER, NUM_TOO_LARGE } num_check;

static num_check json_uint(const cJSON *j, uint64_t *out) {
    if (!cJSON_IsNumber(j)) return NUM_NOT_NUMBER;
    double d = j->valuedouble;
    if (d != d) return NUM_NOT_INTEGER;
    if (d < 0) return NUM_NEGATIVE;
    if (d > ST_MAX_INT) return NUM_TOO_LARGE;
    uint64_t u = (uint64_t)d;
    if ((double)u != d) return NUM_NOT_INTEGER;
    *out = u;
    return NUM_OK;
}

static const char *num_problem(num_check c) {
    switch (c) {
    case NUM_NOT_NUMBER: return "is not a number";
    case NUM_NEGATIVE: return "is negative";
    case NUM_NOT_INTEGER: return "is not an integer";
    case NUM_TOO_LARGE: return "is too large";
    default: return "is invalid";
    }
}

static const char *json_type_name(const cJSON *j) {
    if (!j) return "missing";
    if (cJSON_IsObject(j)) return "an object";
    if (cJSON_IsArray(j)) return "an array";
    if (cJSON_IsString(j)) return "a string";
    if (cJSON_IsNumber(j)) return "a number";
    if (cJSON_IsBool(j)) return "a boolean";
    if (cJSON_IsNull(j)) return "null";
    return "invalid";
}

/* Parsed tensor entry before the file struct is built. */
typedef struct {
    uint64_t begin, end;
    int idx;
} span;

static int cmp_span(const void *a, const void *b) {
    const span *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return x->idx < y->idx ? -1 : x->idx > y->idx;
}

typedef struct {
    const char *name;
    int idx;
} name_idx;

static int cmp_name_idx(const void *a, const void *b) {
    const name_idx *x = a, *y = b;
    int c = strcmp(x->name, y->name);
    if (c) return c;
    return x->idx < y->idx ? -1 : x->idx > y->idx;
}

/* Validates one tensor entry; fills t (name not set) and its offsets. */
static int parse_entry(const char *path, const cJSON *item, st_tensor *t, uint64_t *begin,
                       uint64_t *end, size_t data_size, tb_err *e) {
    const char *name = item->string;
    if (!cJSON_IsObject(item))
        return tb_fail(e, TUBELET_ERR_FORMAT,
                       "%s: header entry for tensor '%s' is %s, expected an object with dtype, "
                       "shape and data_offsets",
                       path, name, json_type_name(item));
    const cJSON *jd = NULL, *js = NULL, *jo = NULL;
    for (const cJSON *f = item->child; f; f = f->next) {
        const cJSON **slot;
        if (strcmp(f->string, "dtype") == 0)
            slot = &jd;
        else if (strcmp(f->string, "shape") == 0)
            slot = &js;
        else if (strcmp(f->string, "data_offsets") == 0)
            slot = &jo;
        else
            return tb_fail(e, TUBELET_ERR_FORMAT,
                           "%s: tensor '%s' has an unknown field '%s' (expected dtype, shape, "
                           "data_offsets)",
                           path, name, f->string);
        if (*slot)
            return tb_fail(e, TUBELET_ERR_FORMAT, "%s: tensor '%s' has field '%s' twice", path,
                           name, f->string);
        *slot = f;
    }
    if (!jd || !js || !jo)
        return tb_fail(e, TUBELET_ERR_FORMAT, "%s: tensor '%s' has no '%s' field", path, name,
                       !jd ? "dtype" : !js ? "shape" : "data_offsets");

    /* dtype */
    if (!cJSON_IsString(jd))
        return tb_fail(e, TUBELET_ERR_FORMAT, "%s: tensor '%s': dtype is %s, expected a string",
                       path, name, json_type_name(jd));
    if (!dtype_from_name(jd->valuestring, &t->dtype))
        return tb_fail(e, TUBELET_ERR_FORMAT,
                       "%s: tensor '%s' has unsupported dtype '%s' (supported: F32, F16, BF16, "
                       "F64, I64, I32, I8, U8, BOOL)",
                       path, name, jd->valuestring);

    /* shape */
    if (!cJSON_IsArray(js))
        return tb_fail(e, TUBELET_ERR_FORMAT, "%s: tensor '%s': shape is %s, expected an array",
                       path, name, json_type_name(js));
    int ndim = cJSON_GetArraySize(js);
    if (ndim > ST_MAX_DIMS)
        return tb_fail(e, TUBELET_ERR_FORMAT,
                       "%s: tensor '%s' has %d dimensions; at most %d are supported", path, name,
                       ndim, ST_MAX_DIMS);
    t->ndim = ndim;
    size_t numel = 1;
    int k = 0;
    for (const cJSON *d = js->child; d; d = d->next, k++) {
        uint64_t v;
        num_check c = json_uint(d, &v);
        if (c != NUM_OK)
            return tb_fail(e, TUBELET_ERR_FORMAT,
                           "%s: tensor '%s': shape entry %d %s; shape entries must be "
                           "non-negative integers",
                           path, name, k, num_problem(c));
        t->shape[k] = (int64_t)v;
        if (!tb_mul_ok(numel, (size_t)v, &numel))
            return tb_fail(e, TUBELET_ERR_FORMAT,
                           "%s: tensor '%s': the element count of its shape overflows", path,
                           name);
    }
    size_t nbytes;
    if (!tb_mul_ok(numel, st_dtype_size(t->dtype), &nbytes))
        return tb_fail(e, TUBELET_ERR_FORMAT,
                       "%s: tensor '%s': the byte size of its shape overflows", path, name);

    /* data_offsets */
    if (!cJSON_IsArray(jo) || cJSON_GetArraySize(jo) != 2)
        return tb_fail(e, TUBELET_ERR_FORMAT,
                       "%s: tensor '%s': data_offsets must be an array of two integers [begin, "
                       "end]",
                       path, name);
    uint64_t off[2];
    k = 0;
    for (const cJSON *d = jo->child; d; d = d->next, k++) {
        num_check c = json_uint(d, &off[k]);
        if (c != NUM_OK)
            return tb_fail(e, TUBELET_ERR_FORMAT,
                           "%s: tensor '%s': data_offsets[%d] %s; offsets must be non-negative "
                           "integers",
                           path, name, k, num_problem(c));
    }
    if (off[1] < off[0])
        return tb_fail(e, TUBELET_ERR_FORMAT,
                       "%s: tensor '%s' has data_offsets [%llu, %llu] with end before begin",
                       path, name, (unsigned long long)off[0], (unsigned long long)off[1]);
    if (off[1] > data_size)
        return tb_fail(e, TUBELET_ERR_FORMAT,
                       "%s: tensor '%s' spans bytes [%llu, %llu) but the data section has %zu "
                       "bytes",
                       path, name, (unsigned long long)off[0], (unsigned long long)off[1],
                       data_size);
    if (off[1] - off[0] != (uint64_t)nbytes) {
        char sh[8 * 24 + 4];
        size_t m = 0;
        sh[m++] = '[';
        for (int d = 0; d < ndim; d++)
            m += (size_t)snprintf(sh + m, sizeof sh - m, "%s%lld", d ? ", " : "",
                                  (long long)t->shape[d]);
        snprintf(sh + m, sizeof sh - m, "]");
        return tb_fail(e, TUBELET_ERR_FORMAT,
                       "%s: tensor '%s' has %llu bytes of data (data_offsets [%llu, %llu]) but "
                       "shape %s of %s needs %zu",
                       path, name, (unsigned long long)(off[1] - off[0]),
                       (unsigned long long)off[0], (unsigned long long)off[1], sh,
                       st_dtype_name(t->dtype), nbytes);
    }
    t->nbytes = nbytes;
    *begin = off[0];
    *end = off[1];
    return TUBELET_OK;
}

static int check_metadata(const char *path, const cJSON *m, tb_err *e) {
    if (!cJSON_IsObject(m))
        return tb_fail(e, TUBELET_ERR_FORMAT, "%s: __metadata__ is %s, expected an object", path,
                       json_type_name(m));
    for (const cJSON *c = m->child; c; c = c->next) {
        if (!cJSON_IsString(c))
            return tb_fail(e, TUBELET_ERR_FORMAT,
                           "%s: __metadata__ value for '%s' is %s, expected a string", path,
                           c->string, json_type_name(c));
    }
    return TUBELET_OK;
}

/* Parses and validates the header of f (base, size, path already set). */
static int parse_header(st_file *f, tb_err *e) {
    const char *path = f->path;
    if (f->size < 8)
        return tb_fail(e, TUBELET_ERR_FORMAT,
                       "%s: file is %zu bytes, too short for a safetensors header (8 bytes)",
                       path, f->size);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | f->base[i];
    if (hlen > (uint64_t)(f->size - 8))
        return tb_fail(e, TUBELET_ERR_FORMAT,
                       "%s: header length %llu is larger than the rest of the file (%zu bytes); "
                       "not a safetensors file or truncated",
                       path, (unsigned long long)hlen, f->size - 8);
    if (hlen > ST_MAX_HEADER)
        return tb_fail(e, TUBELET_ERR_FORMAT,
                       "%s: header length %llu exceeds the limit of %llu bytes", path,
                       (unsigned long long)hlen, (unsigned long long)ST_MAX_HEADER);
    const char *hdr = (const char *)f->base + 8;
    size_t hn = (size_t)hlen;
    f->data = f->base + 8 + hn;
    f->data_size = f->size - 8 - hn;

    if (!utf8_valid((const unsigned char *)hdr, hn))
        return tb_fail(e, TUBELET_ERR_FORMAT, "%s: header is not valid UTF-8", path);
    if (memchr(hdr, 0, hn))
        return tb_fail(e, TUBELET_ERR_FORMAT, "%s: header contains a NUL byte", path);

    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(hdr, hn, &end, 0);
    if (!root) {
        size_t at = (end && end >= hdr && end <= hdr + hn) ? (size_t)(end - hdr) : 0;
        return tb_fail(e, TUBELET_ERR_FORMAT, "%s: header is not valid JSON (error near byte %zu)",
                       path, at);
    }
    int rc = TUBELET_OK;
    for (const char *p = end; p && p < hdr + hn; p++) {
        if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r') {
            rc = tb_fail(e, TUBELET_ERR_FORMAT,
                         "%s: header has trailing characters after the JSON object (byte %zu)",
                         path, (size_t)(p - hdr));
            goto done;
        }
    }
    if (!cJSON_IsObject(root)) {
        rc = tb_fail(e, TUBELET_ERR_FORMAT, "%s: header is %s, expected a JSON object", path,
                     json_type_name(root));
        goto done;
    }

    int n = 0, n_meta = 0;
    for (const cJSON *c = root->child; c; c = c->next) {
        if (strcmp(c->string, "__metadata__") == 0) {
            if (++n_meta > 1) {
                rc = tb_fail(e, TUBELET_ERR_FORMAT, "%s: header has '__metadata__' twice", path);
                goto done;
            }
            if ((rc = check_metadata(path, c, e))) goto done;
        } else {
            if (n == INT32_MAX / 2) {
                rc = tb_fail(e, TUBELET_ERR_FORMAT, "%s: too many tensors", path);
                goto done;
            }
            n++;
        }
    }

    f->t = calloc(n ? (size_t)n : 1, sizeof *f->t);
    f->by_name = calloc(n ? (size_t)n : 1, sizeof *f->by_name);
    span *sp = calloc(n ? (size_t)n : 1, sizeof *sp);
    name_idx *ni = calloc(n ? (size_t)n : 1, sizeof *ni);
    if (!f->t || !f->by_name || !sp || !ni) {
        free(sp);
        free(ni);
        rc = tb_fail(e, TUBELET_ERR_MEMORY, "%s: out of memory for %d tensor entries", path, n);
        goto done;
    }
    int i = 0;
    for (const cJSON *c = root->child; c; c = c->next) {
        if (strcmp(c->string, "__metadata__") == 0) continue;
        st_tensor *t = &f->t[i];
        rc = parse_entry(path, c, t, &sp[i].begin, &sp[i].end, f->data_size, e);
        if (rc) break;
        t->name = strdup(c->string);
        if (!t->name) {
            rc = tb_fail(e, TUBELET_ERR_MEMORY, "%s: out of memory", path);
            break;
        }
        f->n = i + 1; /* so st_close frees the names */
        t->data = f->data + sp[i].begin;
        sp[i].idx = i;
        ni[i].name = t->name;
        ni[i].idx = i;
        i++;
    }
    if (!rc) {
        /* duplicate names */
        qsort(ni, (size_t)n, sizeof *ni, cmp_name_idx);
        for (int k = 0; k < n; k++) {
            if (k > 0 && strcmp(ni[k - 1].name, ni[k].name) == 0) {
                rc = tb_fail(e, TUBELET_ERR_FORMAT, "%s: tensor '%s' appears twice in the header",
                             path, ni[k].name);
                break;
            }
            f->by_name[k] = ni[k].idx;
        }
    }
    if (!rc) {
        /* contiguous, non-overlapping, covering the data section */
        qsort(sp, (size_t)n, sizeof *sp, cmp_span);
        uint64_t at = 0;
        for (int k = 0; k < n && !rc; k++) {
            const char *nm = f->t[sp[k].idx].name;
            if (sp[k].begin > at)
                rc = tb_fail(e, TUBELET_ERR_FORMAT,
                             "%s: gap in the data section: bytes [%llu, %llu) before tensor '%s' "
                             "belong to no tensor",
                             path, (unsigned long long)at, (unsigned long long)sp[k].begin, nm);
            else if (sp[k].begin < at)
                rc = tb_fail(e, TUBELET_ERR_FORMAT,
                             "%s: tensor '%s' at bytes [%llu, %llu) overlaps tensor '%s' "
                             "(which ends at byte %llu)",
                             path, nm, (unsigned long long)sp[k].begin,
                             (unsigned long long)sp[k].end, f->t[sp[k - 1].idx].name,
                             (unsigned long long)at);
            at = sp[k].end;
        }
        if (!rc && at != (uint64_t)f->data_size)
            rc = tb_fail(e, TUBELET_ERR_FORMAT,
                         "%s: the tensors cover %llu bytes but the data section has %zu bytes "
                         "(trailing bytes after the last tensor)",
                         path, (unsigned long long)at, f->data_size);
    }
    free(sp);
    free(ni);
done:
    cJSON_Delete(root);
    return rc;
}

int st_open(st_file **out, const char *path, int use_mmap, tb_err *e) {
    if (!out || !path) return tb_fail(e, TUBELET_ERR_ARG, "st_open: NULL argument");
    *out = NULL;
    st_file *f = calloc(1, sizeof *f);
    if (!f) return tb_fail(e, TUBELET_ERR_MEMORY, "%s: out of memory", path);
    f->path = strdup(path);
    if (!f->path) {
        free(f);
        return tb_fail(e, TUBELET_ERR_MEMORY, "%s: out of memory", path);
    }
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK); /* no hang on a FIFO */
    if (fd < 0) {
        int err = errno;
        st_close(f);
        return tb_fail(e, TUBELET_ERR_IO, "%s: cannot open: %s", path, strerror(err));
    }
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        int err = errno;
        close(fd);
        st_close(f);
        return tb_fail(e, TUBELET_ERR_IO, "%s: cannot stat: %s", path, strerror(err));
    }
    if (!S_ISREG(sb.st_mode)) {
        close(fd);
        st_close(f);
        return tb_fail(e, TUBELET_ERR_IO, "%s: not a regular file", path);
    }
    if (sb.st_size < 0 || (uint64_t)sb.st_size > (uint64_t)SIZE_MAX) {
        close(fd);
        st_close(f);
        return tb_fail(e, TUBELET_ERR_IO, "%s: file too large", path);
    }
    f->size = (size_t)sb.st_size;
    if (f->size < 8) {
        close(fd);
        int rc = tb_fail(e, TUBELET_ERR_FORMAT,
                         "%s: file is %zu bytes, too short for a safetensors header (8 bytes)",
                         path, f->size);
        st_close(f);
        return rc;
    }
    /* Cheap checks on the header length before mapping or reading the whole file. */
    unsigned char len8[8];
    ssize_t got8;
    do {
        got8 = pread(fd, len8, 8, 0);
    } while (got8 < 0 && errno == EINTR);
    if (got8 != 8) {
        int err = got8 < 0 ? errno : EIO;
        close(fd);
        st_close(f);
        return tb_fail(e, TUBELET_ERR_IO, "%s: cannot read the header length: %s", path,
                       strerror(err));
    }
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | len8[i];
    if (hlen > (uint64_t)(f->size - 8) || hlen > ST_MAX_HEADER) {
        close(fd);
        f->base = len8; /* parse_header only looks at the length and fails */
        int rc = parse_header(f, e);
        f->base = NULL;
        st_close(f);
        return rc;
    }
    if (use_mmap) {
        void *p = mmap(NULL, f->size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) {
            int err = errno;
            close(fd);
            st_close(f);
            return tb_fail(e, TUBELET_ERR_IO, "%s: mmap failed: %s", path, strerror(err));
        }
        f->base = p;
        f->mapped = 1;
    } else {
        void *p = NULL;
        if (posix_memalign(&p, 64, f->size) != 0) {
            close(fd);
            int rc = tb_fail(e, TUBELET_ERR_MEMORY, "%s: out of memory reading %zu bytes", path,
                             f->size);
            st_close(f);
            return rc;
        }
        f->base = p;
        size_t got = 0;
        while (got < f->size) {
            ssize_t r = read(fd, f->base + got, f->size - got);
            if (r < 0 && errno == EINTR) continue;
            if (r <= 0) {
                int err = r < 0 ? errno : 0;
                close(fd);
                int rc = tb_fail(e, TUBELET_ERR_IO, "%s: read failed after %zu of %zu bytes%s%s",
                                 path, got, f->size, err ? ": " : " (file shrank)",
                                 err ? strerror(err) : "");
                st_close(f);
                return rc;
            }
            got += (size_t)r;
        }
    }
    close(fd);
    int rc = parse_header(f, e);
    if (rc) {
        st_close(f);
        return rc;
    }
    *out = f;
    return TUBELET_OK;
}

/* ---- conversion ---- */

static inline float bits_to_f32(uint32_t b) {
    float f;
    memcpy(&f, &b, 4);
    return f;
}

static inline uint32_t f16_to_f32_bits(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu;
    if (exp == 0) {
        if (man == 0) return sign; /* +-0 */
        /* subnormal: man * 2^-24; normalise */
        int shift = 0;
        while (!(man & 0x400u)) {
            man <<= 1;
            shift++;
        }
        man &= 0x3ffu;
        return sign | ((uint32_t)(113 - shift) << 23) | (man << 13);
    }
    if (exp == 31) return sign | 0x7f800000u | (man << 13); /* inf / NaN (payload kept) */
    return sign | ((exp + 112) << 23) | (man << 13);
}

void st_to_f32(float *dst, const void *src, st_dtype t, size_t n) {
    const unsigned char *s = src;
    switch (t) {
    case ST_F32:
        memmove(dst, src, n * sizeof(float));
        break;
    case ST_F16:
        for (size_t i = 0; i < n; i++) {
            uint16_t h = (uint16_t)(s[2 * i] | (s[2 * i + 1] << 8));
            dst[i] = bits_to_f32(f16_to_f32_bits(h));
        }
        break;
    case ST_BF16:
        for (size_t i = 0; i < n; i++) {
            uint32_t b = (uint32_t)(s[2 * i] | (s[2 * i + 1] << 8)) << 16;
            dst[i] = bits_to_f32(b);
        }
        break;
    default:
        /* Not a float type this function converts; callers check the dtype first. */
        for (size_t i = 0; i < n; i++) dst[i] = 0.0f;
        break;
    }
}

/* ---- writer ---- */

typedef struct {
    char *p;
    size_t n, cap;
    int oom;
} sbuf;

static void sb_put(sbuf *b, const char *s, size_t len) {
    if (b->oom) return;
    if (b->n + len + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + len + 1) {
            if (cap > SIZE_MAX / 2) {
                b->oom = 1;
                return;
            }
            cap *= 2;
        }
        char *q = realloc(b->p, cap);
        if (!q) {
            b->oom = 1;
            return;
        }
        b->p = q;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, len);
    b->n += len;
    b->p[b->n] = 0;
}

static void sb_str(sbuf *b, const char *s) { sb_put(b, s, strlen(s)); }

static void sb_json_string(sbuf *b, const char *s) {
    sb_put(b, "\"", 1);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        char esc[8];
        if (*p == '"')
            sb_put(b, "\\\"", 2);
        else if (*p == '\\')
            sb_put(b, "\\\\", 2);
        else if (*p < 0x20) {
            snprintf(esc, sizeof esc, "\\u%04x", *p);
            sb_put(b, esc, 6);
        } else
            sb_put(b, (const char *)p, 1);
    }
    sb_put(b, "\"", 1);
}

typedef struct {
    size_t align;
    int idx;
} order_ent;

static int cmp_order(const void *a, const void *b) {
    const order_ent *x = a, *y = b;
    if (x->align != y->align) return x->align > y->align ? -1 : 1;
    return x->idx < y->idx ? -1 : x->idx > y->idx;
}

int st_write(const char *path, const st_tensor *tensors, int n, tb_err *e) {
    if (!path) return tb_fail(e, TUBELET_ERR_ARG, "st_write: NULL path");
    if (n < 0 || (n > 0 && !tensors))
        return tb_fail(e, TUBELET_ERR_ARG, "%s: st_write: bad tensor list (n = %d)", path, n);

    /* validate the tensors */
    for (int i = 0; i < n; i++) {
        const st_tensor *t = &tensors[i];
        if (!t->name)
            return tb_fail(e, TUBELET_ERR_ARG, "%s: tensor %d has no name", path, i);
        if (strcmp(t->name, "__metadata__") == 0)
            return tb_fail(e, TUBELET_ERR_ARG, "%s: '__metadata__' is not a valid tensor name",
                           path);
        if (!utf8_valid((const unsigned char *)t->name, strlen(t->name)))
            return tb_fail(e, TUBELET_ERR_ARG, "%s: tensor %d's name is not valid UTF-8", path, i);
        if (st_dtype_size(t->dtype) == 0)
            return tb_fail(e, TUBELET_ERR_ARG, "%s: tensor '%s' has an invalid dtype %d", path,
                           t->name, (int)t->dtype);
        if (t->ndim < 0 || t->ndim > ST_MAX_DIMS)
            return tb_fail(e, TUBELET_ERR_ARG, "%s: tensor '%s' has %d dimensions (0..%d allowed)",
                           path, t->name, t->ndim, ST_MAX_DIMS);
        size_t numel = 1;
        for (int d = 0; d < t->ndim; d++) {
            if (t->shape[d] < 0 || !tb_mul_ok(numel, (size_t)t->shape[d], &numel))
                return tb_fail(e, TUBELET_ERR_ARG, "%s: tensor '%s' has an invalid shape", path,
                               t->name);
        }
        size_t nb;
        if (!tb_mul_ok(numel, st_dtype_size(t->dtype), &nb) || nb != t->nbytes)
            return tb_fail(e, TUBELET_ERR_ARG,
                           "%s: tensor '%s' has nbytes = %zu but its shape and dtype need %zu",
                           path, t->name, t->nbytes, nb);
        if (nb > 0 && !t->data)
            return tb_fail(e, TUBELET_ERR_ARG, "%s: tensor '%s' has no data", path, t->name);
    }
    /* duplicate names */
    name_idx *ni = calloc(n ? (size_t)n : 1, sizeof *ni);
    order_ent *ord = calloc(n ? (size_t)n : 1, sizeof *ord);
    if (!ni || !ord) {
        free(ni);
        free(ord);
        return tb_fail(e, TUBELET_ERR_MEMORY, "%s: out of memory", path);
    }
    for (int i = 0; i < n; i++) {
        ni[i].name = tensors[i].name;
        ni[i].idx = i;
        ord[i].align = st_dtype_size(tensors[i].dtype);
        ord[i].idx = i;
    }
    qsort(ni, (size_t)n, sizeof *ni, cmp_name_idx);
    for (int i = 1; i < n; i++)
        if (strcmp(ni[i - 1].name, ni[i].name) == 0) {
            int rc = tb_fail(e, TUBELET_ERR_ARG, "%s: tensor name '%s' given twice", path,
                             ni[i].name);
            free(ni);
            free(ord);
            return rc;
        }
    free(ni);
    /* Largest dtype first keeps every tensor aligned to its dtype size. */
    qsort(ord, (size_t)n, sizeof *ord, cmp_order);

    sbuf h = {0};
    sb_str(&h, "{\"__metadata__\":{\"format\":\"pt\"}");
    uint64_t off = 0;
    for (int k = 0; k < n; k++) {
        const st_tensor *t = &tensors[ord[k].idx];
        char num[64];
        sb_str(&h, ",");
        sb_json_string(&h, t->name);
        sb_str(&h, ":{\"dtype\":\"");
        sb_str(&h, st_dtype_name(t->dtype));
        sb_str(&h, "\",\"shape\":[");
        for (int d = 0; d < t->ndim; d++) {
            snprintf(num, sizeof num, "%s%lld", d ? "," : "", (long long)t->shape[d]);
            sb_str(&h, num);
        }
        snprintf(num, sizeof num, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)off,
                 (unsigned long long)(off + t->nbytes));
        sb_str(&h, num);
        off += t->nbytes;
    }
    sb_str(&h, "}");
    while (!h.oom && h.n % 8 != 0) sb_str(&h, " ");
    if (h.oom) {
        free(h.p);
        free(ord);
        return tb_fail(e, TUBELET_ERR_MEMORY, "%s: out of memory building the header", path);
    }

    tb_atomic_file f;
    int rc = tb_atomic_open(&f, path, e);
    if (rc) {
        free(h.p);
        free(ord);
        return rc;
    }
    unsigned char len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (unsigned char)((uint64_t)h.n >> (8 * i));
    tb_atomic_put(&f, len8, 8);
    tb_atomic_put(&f, h.p, h.n);
    for (int k = 0; k < n; k++) {
        const st_tensor *t = &tensors[ord[k].idx];
        if (t->nbytes) tb_atomic_put(&f, t->data, t->nbytes);
    }
    free(h.p);
    free(ord);
    return tb_atomic_commit(&f, e);
}
