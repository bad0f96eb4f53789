/* Flax checkpoints. See flax_file.h. */
#include "flax_file.h"

#include <errno.h>
#include <fcntl.h>
#include <msgpack.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "flax_file.c reads numpy's little-endian array bytes in place"
#endif

/* flax.serialization._MsgpackExtType */
enum { EXT_NDARRAY = 1, EXT_NATIVE_COMPLEX = 2, EXT_NPSCALAR = 3 };

/* An ndarray payload is [shape, dtype, bytes]: 4 + up to TP_MAX_DIMS objects, two levels (a few
 * more are let through so that too many dimensions get their own error). */
#define ARRAY_MAX_OBJECTS 32

struct fx_file {
    char *name;
    const uint8_t *buf;
    size_t len;
    void *map;                  /* fx_open's mapping of the file, or NULL */
    msgpack_zone *tree_zone;    /* the decoded tree (its strings point into buf) */
    msgpack_zone *array_zone;   /* one ndarray payload at a time */
    msgpack_object root;
    const char *root_path;
    tf_tensor *t;
    int n, cap;
};

/* ---- the bounded walk over msgpack headers ---- */

typedef struct {
    size_t head;        /* bytes of the header (type byte and length field) */
    uint64_t payload;   /* bytes after it that belong to this object (str, bin, ext, numbers) */
    uint64_t children;  /* objects nested in it: array n, map 2 n */
} mp_head;

static uint64_t be(const uint8_t *p, size_t n) {
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++) v = v << 8 | p[i];
    return v;
}

/* The header of the object at b (n bytes left): 0 if it is cut off or the type byte is 0xc1,
 * which msgpack never uses. */
static int read_head(const uint8_t *b, size_t n, mp_head *h) {
    if (n < 1) return 0;
    const uint8_t t = b[0];
    h->head = 1, h->payload = 0, h->children = 0;
    if (t <= 0x7f || t >= 0xe0 || t == 0xc0 || t == 0xc2 || t == 0xc3) return 1; /* fixint, nil, bool */
    if (t <= 0x8f) return h->children = 2u * (t & 0x0fu), 1;                    /* fixmap */
    if (t <= 0x9f) return h->children = t & 0x0fu, 1;                           /* fixarray */
    if (t <= 0xbf) return h->payload = t & 0x1fu, 1;                            /* fixstr */
    size_t w = 0;         /* width of the length or count field */
    uint64_t extra = 0;   /* ext: its type byte */
    int count = 0, map = 0;
    switch (t) {
    case 0xc4: case 0xd9: w = 1; break;                                 /* bin8, str8 */
    case 0xc5: case 0xda: w = 2; break;                                 /* bin16, str16 */
    case 0xc6: case 0xdb: w = 4; break;                                 /* bin32, str32 */
    case 0xc7: w = 1, extra = 1; break;                                 /* ext8 */
    case 0xc8: w = 2, extra = 1; break;                                 /* ext16 */
    case 0xc9: w = 4, extra = 1; break;                                 /* ext32 */
    case 0xca: case 0xce: case 0xd2: return h->payload = 4, 1;          /* float32, (u)int32 */
    case 0xcb: case 0xcf: case 0xd3: return h->payload = 8, 1;          /* float64, (u)int64 */
    case 0xcc: case 0xd0: return h->payload = 1, 1;                     /* (u)int8 */
    case 0xcd: case 0xd1: return h->payload = 2, 1;                     /* (u)int16 */
    case 0xd4: return h->payload = 2, 1;                                /* fixext 1 .. 16 */
    case 0xd5: return h->payload = 3, 1;
    case 0xd6: return h->payload = 5, 1;
    case 0xd7: return h->payload = 9, 1;
    case 0xd8: return h->payload = 17, 1;
    case 0xdc: w = 2, count = 1; break;                                 /* array16 */
    case 0xdd: w = 4, count = 1; break;                                 /* array32 */
    case 0xde: w = 2, count = map = 1; break;                           /* map16 */
    case 0xdf: w = 4, count = map = 1; break;                           /* map32 */
    default: return 0;                                                  /* 0xc1 */
    }
    if (n < 1 + w) return 0;
    h->head = 1 + w;
    if (count) h->children = be(b + 1, w) << map;
    else h->payload = be(b + 1, w) + extra;
    return 1;
}

/* Walks the one object at b[0, len) without recursion: every declared length must fit in the
 * bytes that remain, every container's count too (each entry takes at least one byte, so
 * msgpack-c, which allocates a container's entries from its count, never allocates more than
 * a fixed multiple of the file), at most max_depth levels and max_objects objects. *end: its
 * length. Errors: "<file>: <where>: byte N: ...". */
static int scan(const uint8_t *b, size_t len, int max_depth, size_t max_objects, size_t *end,
                const char *file, const char *where, tb_err *e) {
    uint64_t left[FX_MAX_DEPTH];
    int depth = 0;
    size_t pos = 0, objects = 0;
    if (max_depth > FX_MAX_DEPTH) max_depth = FX_MAX_DEPTH;
    do {
        mp_head h;
        if (!read_head(b + pos, len - pos, &h))
            return tb_fail(e, TUBELET_ERR_FORMAT, "%s: %s: byte %zu: %s", file, where, pos,
                           pos < len && b[pos] == 0xc1 ? "0xc1 is not a msgpack type"
                                                       : "the data ends inside an object");
        if (++objects > max_objects)
            return tb_fail(e, TUBELET_ERR_FORMAT, "%s: %s: more than %zu msgpack objects", file,
                           where, max_objects);
        const size_t rest = len - pos - h.head;
        if (h.payload > rest)
            return tb_fail(e, TUBELET_ERR_FORMAT, "%s: %s: byte %zu: declared length %llu runs "
                           "past the end (%zu bytes left)", file, where, pos,
                           (unsigned long long)h.payload, rest);
        pos += h.head + (size_t)h.payload;
        if (h.children) {
            if (h.children > len - pos)
                return tb_fail(e, TUBELET_ERR_FORMAT, "%s: %s: byte %zu: a container declares "
                               "%llu entries, more than the %zu bytes that follow", file, where,
                               pos - h.head, (unsigned long long)h.children, len - pos);
            if (depth == max_depth)
                return tb_fail(e, TUBELET_ERR_FORMAT, "%s: %s: byte %zu: nested deeper than %d "
                               "levels", file, where, pos - h.head, max_depth);
            left[depth++] = h.children;
            continue;
        }
        while (depth > 0 && --left[depth - 1] == 0) depth--;
    } while (depth > 0);
    *end = pos;
    return TUBELET_OK;
}

/* Decodes the object at b[0, len) that scan accepted, in z (emptied first). */
static int decode(const uint8_t *b, size_t len, msgpack_zone *z, msgpack_object *o,
                  const char *file, const char *where, tb_err *e) {
    size_t off = 0;
    msgpack_zone_clear(z);
    msgpack_unpack_return r = msgpack_unpack((const char *)b, len, &off, z, o);
    if (r != MSGPACK_UNPACK_SUCCESS && r != MSGPACK_UNPACK_EXTRA_BYTES)
        return tb_fail(e, r == MSGPACK_UNPACK_NOMEM_ERROR ? TUBELET_ERR_MEMORY : TUBELET_ERR_FORMAT,
                       "%s: %s: msgpack-c cannot decode it (%d)", file, where, (int)r);
    return TUBELET_OK;
}

/* ---- the tree ---- */

static int key_is(const msgpack_object *k, const char *s) {
    size_t n = strlen(s);
    return k->type == MSGPACK_OBJECT_STR && k->via.str.size == n && !memcmp(k->via.str.ptr, s, n);
}

/* The value of key in map m (the last one, as Python's dict keeps), or NULL. */
static const msgpack_object *map_get(const msgpack_object *m, const char *key) {
    const msgpack_object *v = NULL;
    if (m->type != MSGPACK_OBJECT_MAP) return NULL;
    for (uint32_t i = 0; i < m->via.map.size; i++)
        if (key_is(&m->via.map.ptr[i].key, key)) v = &m->via.map.ptr[i].val;
    return v;
}

static const struct { const char *name; tp_dtype dtype; } DTYPES[] = {
    {"float32", TP_F32}, {"float64", TP_F64}, {"float16", TP_F16}, {"bfloat16", TP_BF16},
    {"int64", TP_I64},   {"int32", TP_I32},   {"int16", TP_I16},   {"int8", TP_I8},
    {"uint8", TP_U8},    {"bool", TP_BOOL_T},
};

typedef struct {
    const char *ptr;
    uint32_t size;
} bytes;

/* A str or bin: flax packs with use_bin_type=True (the dtype a str, the array a bin); older
 * writers used raw str for both, and flax reads either. 0 if o is neither. */
static int str_or_bin(const msgpack_object *o, bytes *b) {
    if (o->type == MSGPACK_OBJECT_STR) return b->ptr = o->via.str.ptr, b->size = o->via.str.size, 1;
    if (o->type == MSGPACK_OBJECT_BIN) return b->ptr = o->via.bin.ptr, b->size = o->via.bin.size, 1;
    return 0;
}

/* An ndarray extension's payload, msgpack [shape, dtype name, bytes], as a row-major tensor
 * whose bytes stay in the file. */
static int read_ndarray(fx_file *f, const char *name, const uint8_t *p, size_t n, tf_tensor *t,
                        tb_err *e) {
    char where[FX_MAX_NAME + 16];
    snprintf(where, sizeof where, "array '%s'", name);
    size_t end;
    msgpack_object o;
    int rc = scan(p, n, 2, ARRAY_MAX_OBJECTS, &end, f->name, where, e);
    if (!rc) rc = decode(p, end, f->array_zone, &o, f->name, where, e);
    if (rc) return rc;
    const msgpack_object *it = o.type == MSGPACK_OBJECT_ARRAY ? o.via.array.ptr : NULL;
    bytes dts, datas, *dt = &dts, *data = &datas;
    if (!it || o.via.array.size != 3 || !str_or_bin(&it[1], dt) || !str_or_bin(&it[2], data) ||
        it[0].type != MSGPACK_OBJECT_ARRAY || end != n)
        return tb_fail(e, TUBELET_ERR_FORMAT, "%s: %s: the extension is not flax's ndarray "
                       "encoding [shape, dtype, bytes]", f->name, where);
    const msgpack_object_array *shape = &it[0].via.array;
    if (shape->size > TP_MAX_DIMS)
        return tb_fail(e, TUBELET_ERR_FORMAT, "%s: %s: %u dimensions (at most %d)", f->name,
                       where, shape->size, TP_MAX_DIMS);
    memset(t, 0, sizeof *t);
    t->dtype = TP_N_DTYPES;
    for (size_t i = 0; i < sizeof DTYPES / sizeof *DTYPES; i++)
        if (dt->size == strlen(DTYPES[i].name) && !memcmp(dt->ptr, DTYPES[i].name, dt->size))
            t->dtype = DTYPES[i].dtype;
    if (t->dtype == TP_N_DTYPES)
        return tb_fail(e, TUBELET_ERR_FORMAT, "%s: %s: dtype '%.*s' is not supported (float32, "
                       "float16, bfloat16, float64 or an integer type)", f->name, where,
                       (int)(dt->size < 32 ? dt->size : 32), dt->ptr);
    uint64_t numel = 1;
    t->ndim = (int)shape->size;
    for (int d = 0; d < t->ndim; d++) {
        const msgpack_object *s = &shape->ptr[d];
        if (s->type != MSGPACK_OBJECT_POSITIVE_INTEGER || s->via.u64 > ((uint64_t)1 << 40) ||
            __builtin_mul_overflow(numel, s->via.u64, &numel) || numel > ((uint64_t)1 << 40))
            return tb_fail(e, TUBELET_ERR_FORMAT, "%s: %s: shape entry %d is not a size "
                           "below 2^40 (or the sizes multiply past it)", f->name, where, d);
        t->shape[d] = (int64_t)s->via.u64;
    }
    const uint64_t want = numel * tp_dtype_size(t->dtype);
    if (data->size != want)
        return tb_fail(e, TUBELET_ERR_FORMAT, "%s: %s: shape and dtype %.*s need %llu bytes, the "
                       "array holds %u", f->name, where, (int)dt->size, dt->ptr,
                       (unsigned long long)want, data->size);
    const uint8_t *d0 = (const uint8_t *)data->ptr;
    if (d0 < p || d0 + data->size > p + n) /* msgpack-c references the input; never a copy */
        return tb_fail(e, TUBELET_ERR_FORMAT, "%s: %s: array bytes outside the payload", f->name,
                       where);
    int64_t stride = 1;
    for (int d = t->ndim - 1; d >= 0; d--) t->stride[d] = stride, stride *= t->shape[d];
    t->base = d0;
    t->contiguous = 1;
    t->storage = f->n;
    return TUBELET_OK;
}

static int add(fx_file *f, const char *name, const msgpack_object *ext, tb_err *e) {
    if (f->n == FX_MAX_TENSORS)
        return tb_fail(e, TUBELET_ERR_FORMAT, "%s: more than %d arrays", f->name, FX_MAX_TENSORS);
    if (f->n == f->cap) {
        int cap = f->cap ? 2 * f->cap : 64;
        tf_tensor *t = realloc(f->t, sizeof *t * (size_t)cap);
        if (!t) return tb_fail(e, TUBELET_ERR_MEMORY, "%s: out of memory", f->name);
        f->t = t, f->cap = cap;
    }
    tf_tensor *t = &f->t[f->n];
    int rc = read_ndarray(f, name, (const uint8_t *)ext->via.ext.ptr, ext->via.ext.size, t, e);
    if (rc) return rc;
    if (!(t->name = strdup(name))) return tb_fail(e, TUBELET_ERR_MEMORY, "%s: out of memory", f->name);
    f->n++;
    return TUBELET_OK;
}

/* Appends key to the '/'-joined name of length *n. */
static int push_name(fx_file *f, char *name, size_t *n, const msgpack_object *key, tb_err *e) {
    if (key->type != MSGPACK_OBJECT_STR)
        return tb_fail(e, TUBELET_ERR_FORMAT, "%s: a key under '%s' is not a string (flax state "
                       "dicts have string keys)", f->name, *n ? name : "/");
    const size_t k = key->via.str.size;
    const char *s = key->via.str.ptr;
    if (!k || memchr(s, '/', k) || memchr(s, 0, k))
        return tb_fail(e, TUBELET_ERR_FORMAT, "%s: a key under '%s' is empty or holds '/' or NUL",
                       f->name, *n ? name : "/");
    if (*n + 1 + k > FX_MAX_NAME)
        return tb_fail(e, TUBELET_ERR_FORMAT, "%s: a name under '%.64s' is longer than %d bytes",
                       f->name, name, FX_MAX_NAME);
    if (*n) name[(*n)++] = '/';
    memcpy(name + *n, s, k);
    *n += k;
    name[*n] = 0;
    return TUBELET_OK;
}

/* Every ndarray under the parameters' map, depth first, without recursion. Scalars and other
 * leaves are not parameters and are skipped; a chunked array (flax splits arrays over 1 GiB) is
 * refused by name, as is an extension flax does not write. */
static int flatten(fx_file *f, const msgpack_object *params, tb_err *e) {
    struct { const msgpack_object *m; uint32_t i; size_t n; } st[FX_MAX_DEPTH + 1];
    char name[FX_MAX_NAME + 1] = "";
    int depth = 0;
    st[0].m = params, st[0].i = 0, st[0].n = 0;
    while (depth >= 0) {
        if (st[depth].i == st[depth].m->via.map.size) {
            depth--;
            continue;
        }
        const msgpack_object_kv *kv = &st[depth].m->via.map.ptr[st[depth].i++];
        size_t n = st[depth].n;
        name[n] = 0;
        int rc = push_name(f, name, &n, &kv->key, e);
        if (rc) return rc;
        const msgpack_object *v = &kv->val;
        if (v->type == MSGPACK_OBJECT_MAP) {
            if (map_get(v, "__msgpack_chunked_array__"))
                return tb_fail(e, TUBELET_ERR_UNSUPPORTED, "%s: '%s' is a chunked array (flax "
                               "splits arrays over 1 GiB); not supported", f->name, name);
            if (depth + 1 > FX_MAX_DEPTH)
                return tb_fail(e, TUBELET_ERR_FORMAT, "%s: '%.64s...' nested too deep", f->name, name);
            depth++;
            st[depth].m = v, st[depth].i = 0, st[depth].n = n;
        } else if (v->type == MSGPACK_OBJECT_EXT) {
            if (v->via.ext.type == EXT_NDARRAY) {
                if ((rc = add(f, name, v, e))) return rc;
            } else if (v->via.ext.type != EXT_NPSCALAR && v->via.ext.type != EXT_NATIVE_COMPLEX) {
                return tb_fail(e, TUBELET_ERR_FORMAT, "%s: '%s' is msgpack extension type %d, "
                               "not one of flax's (1 ndarray, 2 complex, 3 numpy scalar)",
                               f->name, name, (int)v->via.ext.type);
            }
        }
    }
    return TUBELET_OK;
}

static int cmp_name(const void *a, const void *b) {
    return strcmp(((const tf_tensor *)a)->name, ((const tf_tensor *)b)->name);
}

/* The parameters inside a train state: flax.optim's optimizer.target (scenic's published
 * checkpoints), a TrainState's or variables dict's params, or the root itself. */
static const msgpack_object *find_params(fx_file *f) {
    const msgpack_object *m = &f->root, *v;
    f->root_path = "";
    if ((v = map_get(m, "optimizer")) && (v = map_get(v, "target")) && v->type == MSGPACK_OBJECT_MAP) {
        f->root_path = "optimizer/target";
        return v;
    }
    if ((v = map_get(m, "params")) && v->type == MSGPACK_OBJECT_MAP) {
        const msgpack_object *w = map_get(v, "params"); /* a TrainState holding a variables dict */
        if (w && w->type == MSGPACK_OBJECT_MAP) return f->root_path = "params/params", w;
        f->root_path = "params";
        return v;
    }
    return m;
}

static int open_impl(fx_file **out, const uint8_t *buf, size_t len, const char *name, tb_err *e) {
    fx_file *f = calloc(1, sizeof *f);
    if (!f || !(f->name = strdup(name))) {
        free(f);
        return tb_fail(e, TUBELET_ERR_MEMORY, "%s: out of memory", name);
    }
    f->buf = buf, f->len = len;
    *out = f;
    size_t end;
    int rc = scan(buf, len, FX_MAX_DEPTH, FX_MAX_OBJECTS, &end, f->name, "msgpack", e);
    if (!rc && end != len)
        rc = tb_fail(e, TUBELET_ERR_FORMAT, "%s: %zu bytes after the end of the msgpack tree "
                     "(byte %zu)", f->name, len - end, end);
    if (!rc && (!(f->tree_zone = msgpack_zone_new(MSGPACK_ZONE_CHUNK_SIZE)) ||
                !(f->array_zone = msgpack_zone_new(1024))))
        rc = tb_fail(e, TUBELET_ERR_MEMORY, "%s: out of memory", f->name);
    if (!rc) rc = decode(buf, len, f->tree_zone, &f->root, f->name, "msgpack", e);
    if (!rc && f->root.type != MSGPACK_OBJECT_MAP)
        rc = tb_fail(e, TUBELET_ERR_FORMAT, "%s: the msgpack tree is not a map: not a Flax "
                     "checkpoint", f->name);
    if (!rc) rc = flatten(f, find_params(f), e);
    if (!rc && f->n == 0)
        rc = tb_fail(e, TUBELET_ERR_FORMAT, "%s: no arrays under '%s': not a Flax checkpoint of "
                     "a model", f->name, f->root_path[0] ? f->root_path : "/");
    if (!rc) {
        qsort(f->t, (size_t)f->n, sizeof *f->t, cmp_name);
        for (int i = 1; i < f->n && !rc; i++)
            if (!strcmp(f->t[i - 1].name, f->t[i].name))
                rc = tb_fail(e, TUBELET_ERR_FORMAT, "%s: '%s' appears twice", f->name, f->t[i].name);
        for (int i = 0; i < f->n; i++) f->t[i].storage = i;
    }
    if (rc) {
        fx_close(f);
        *out = NULL;
    }
    return rc;
}

int fx_open_mem(fx_file **out, const uint8_t *buf, size_t len, const char *name, tb_err *e) {
    *out = NULL;
    if (len < 1) return tb_fail(e, TUBELET_ERR_FORMAT, "%s: empty file", name);
    return open_impl(out, buf, len, name, e);
}

int fx_open(fx_file **out, const char *path, tb_err *e) {
    *out = NULL;
    int fd = tb_open_regular(path, e);
    if (fd < 0) return -fd;
    struct stat st;
    if (fstat(fd, &st) != 0 || st.st_size < 1) {
        close(fd);
        return tb_fail(e, TUBELET_ERR_FORMAT, "%s: empty file", path);
    }
    /* copy-on-write: tensors are used in place from the map, and training updates them there
     * (a page is copied on its first write; the file itself never changes) */
    void *map = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
    int err = errno;
    close(fd);
    if (map == MAP_FAILED)
        return tb_fail(e, TUBELET_ERR_IO, "%s: mmap failed: %s", path, strerror(err));
    /* the page cache may hold the file in 2 MiB folios, which a fault maps whole: reading one
     * array's header would then make 2 MiB of weights (or optimizer state) resident */
    madvise(map, (size_t)st.st_size, MADV_NOHUGEPAGE);
    int rc = open_impl(out, map, (size_t)st.st_size, path, e);
    if (rc) {
        munmap(map, (size_t)st.st_size);
        return rc;
    }
    (*out)->map = map;
    return TUBELET_OK;
}

void fx_close(fx_file *f) {
    if (!f) return;
    for (int i = 0; i < f->n; i++) free((char *)f->t[i].name);
    free(f->t);
    if (f->tree_zone) msgpack_zone_free(f->tree_zone);
    if (f->array_zone) msgpack_zone_free(f->array_zone);
    if (f->map) munmap(f->map, f->len);
    free(f->name);
    free(f);
}

int fx_sniff(const uint8_t *head, size_t n) {
    return n >= 1 && ((head[0] >= 0x81 && head[0] <= 0x8f) || head[0] == 0xde || head[0] == 0xdf);
}

int fx_count(const fx_file *f) { return f->n; }
const tf_tensor *fx_at(const fx_file *f, int i) { return i >= 0 && i < f->n ? &f->t[i] : NULL; }
const char *fx_root(const fx_file *f) { return f->root_path; }

const tf_tensor *fx_find(const fx_file *f, const char *name) {
    int lo = 0, hi = f->n - 1;
    while (lo <= hi) {
        int mid = lo + (hi - lo) / 2, c = strcmp(f->t[mid].name, name);
        if (!c) return &f->t[mid];
        if (c < 0) lo = mid + 1;
        else hi = mid - 1;
    }
    return NULL;
}

int fx_has(const fx_file *f, const char *name) {
    const size_t k = strlen(name);
    for (int i = 0; i < f->n; i++)
        if (!strncmp(f->t[i].name, name, k) && (!f->t[i].name[k] || f->t[i].name[k] == '/'))
            return 1;
    return 0;
}

void fx_release(const fx_file *f, const void *p, size_t n) {
    if (!f->map || !n) return;
    /* a read-only private file mapping: dropped pages read back from the file if touched again */
    const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE), a = (uintptr_t)p & ~(page - 1);
    madvise((void *)a, (uintptr_t)p + n - a, MADV_DONTNEED);
}

void fx_release_all(const fx_file *f) {
    if (f->map) madvise(f->map, f->len, MADV_DONTNEED);
}
