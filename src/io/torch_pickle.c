/* The restricted unpickler. See torch_pickle.h. Pickle is a stack machine: each opcode pushes,
 * pops or combines values; GLOBAL names a Python object and REDUCE calls it. Here GLOBAL only
 * resolves names from a fixed table and REDUCE only applies the table's few constructors to plain
 * data: no Python object is ever imported or called. */
#include "torch_pickle.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_VALUES (1u << 21)   /* a ViT-B checkpoint with optimizer state needs ~1e4 */
#define MAX_STACK (1u << 20)
#define MAX_MARKS (1u << 16)
#define MAX_MEMO (1u << 20)
#define MAX_STORAGES (1 << 16)

/* ---- the globals a state dict needs ---- */
enum {
    G_ORDERED_DICT = 1, G_REBUILD_TENSOR, G_REBUILD_PARAM, G_REBUILD_PARAM_STATE,
    G_REBUILD_FROM_TYPE, G_TENSOR, G_PARAMETER, G_SIZE, G_RECORD,
    G_STORAGE = 100, /* + tp_dtype: torch.FloatStorage, ... */
    G_DTYPE = 200,   /* + tp_dtype: torch.float32, ... */
};

static const struct { const char *module, *name; int id; } GLOBALS[] = {
    {"collections", "OrderedDict", G_ORDERED_DICT},
    {"torch._utils", "_rebuild_tensor_v2", G_REBUILD_TENSOR},
    {"torch._utils", "_rebuild_parameter", G_REBUILD_PARAM},
    {"torch._utils", "_rebuild_parameter_with_state", G_REBUILD_PARAM_STATE},
    {"torch._tensor", "_rebuild_from_type_v2", G_REBUILD_FROM_TYPE},
    {"torch", "Tensor", G_TENSOR},
    {"torch.nn.parameter", "Parameter", G_PARAMETER},
    {"torch", "Size", G_SIZE},
    {"argparse", "Namespace", G_RECORD}, /* training scripts' args: kept as an inert record */
    /* Data that training frameworks keep beside the weights (mmengine's message_hub: numpy
     * arrays and scalars, their dtypes, the bytes of protocol 2, HistoryBuffer): inert records
     * too, so that a checkpoint carrying them loads; none of them can become a tensor. */
    {"numpy.core.multiarray", "_reconstruct", G_RECORD},
    {"numpy._core.multiarray", "_reconstruct", G_RECORD},
    {"numpy.core.multiarray", "scalar", G_RECORD},
    {"numpy._core.multiarray", "scalar", G_RECORD},
    {"numpy", "ndarray", G_RECORD},
    {"numpy", "dtype", G_RECORD},
    {"_codecs", "encode", G_RECORD},
    {"mmengine.logging.history_buffer", "HistoryBuffer", G_RECORD},
    {"torch", "FloatStorage", G_STORAGE + TP_F32},
    {"torch", "DoubleStorage", G_STORAGE + TP_F64},
    {"torch", "HalfStorage", G_STORAGE + TP_F16},
    {"torch", "BFloat16Storage", G_STORAGE + TP_BF16},
    {"torch", "LongStorage", G_STORAGE + TP_I64},
    {"torch", "IntStorage", G_STORAGE + TP_I32},
    {"torch", "ShortStorage", G_STORAGE + TP_I16},
    {"torch", "CharStorage", G_STORAGE + TP_I8},
    {"torch", "ByteStorage", G_STORAGE + TP_U8},
    {"torch", "BoolStorage", G_STORAGE + TP_BOOL_T},
    {"torch", "float32", G_DTYPE + TP_F32},
    {"torch", "float64", G_DTYPE + TP_F64},
    {"torch", "float16", G_DTYPE + TP_F16},
    {"torch", "bfloat16", G_DTYPE + TP_BF16},
    {"torch", "int64", G_DTYPE + TP_I64},
    {"torch", "int32", G_DTYPE + TP_I32},
    {"torch", "int16", G_DTYPE + TP_I16},
    {"torch", "int8", G_DTYPE + TP_I8},
    {"torch", "uint8", G_DTYPE + TP_U8},
    {"torch", "bool", G_DTYPE + TP_BOOL_T},
};

static const struct { const char *name; size_t size; } DTYPES[TP_N_DTYPES] = {
    [TP_F32] = {"float32", 4}, [TP_F64] = {"float64", 8},  [TP_F16] = {"float16", 2},
    [TP_BF16] = {"bfloat16", 2}, [TP_I64] = {"int64", 8}, [TP_I32] = {"int32", 4},
    [TP_I16] = {"int16", 2},   [TP_I8] = {"int8", 1},      [TP_U8] = {"uint8", 1},
    [TP_BOOL_T] = {"bool", 1},
};

size_t tp_dtype_size(tp_dtype d) { return d < TP_N_DTYPES ? DTYPES[d].size : 0; }
const char *tp_dtype_name(tp_dtype d) { return d < TP_N_DTYPES ? DTYPES[d].name : "?"; }

/* ---- parser state ---- */
typedef struct {
    tp_pickle *p;
    const uint8_t *buf;
    size_t len, pos, op_pos;
    tp_value **stack;
    size_t sp, stack_cap;
    size_t *marks;
    size_t n_marks, marks_cap;
    tp_value **memo;
    size_t memo_cap;
    size_t memo_len;  /* MEMOIZE's next index */
    tb_err *e;
} ctx;

typedef struct sblock { struct sblock *next; char s[]; } sblock;

static int fail(ctx *c, int code, const char *what) {
    return tb_fail(c->e, code, "pickle byte %zu: %s", c->op_pos, what);
}

static tp_value *new_value(ctx *c, tp_kind k) {
    if (c->p->n_values >= MAX_VALUES) {
        fail(c, TUBELET_ERR_FORMAT, "more than 2^21 values (not a state dict)");
        return NULL;
    }
    tp_value *v = calloc(1, sizeof *v);
    if (!v) {
        fail(c, TUBELET_ERR_MEMORY, "out of memory");
        return NULL;
    }
    v->kind = k;
    v->next_alloc = c->p->values;
    c->p->values = v;
    c->p->n_values++;
    return v;
}

static int push(ctx *c, tp_value *v) {
    if (!v) return TUBELET_ERR_FORMAT; /* its maker filled the message */
    if (c->sp == c->stack_cap) {
        if (c->stack_cap >= MAX_STACK) return fail(c, TUBELET_ERR_FORMAT, "stack too deep");
        size_t cap = c->stack_cap ? 2 * c->stack_cap : 64;
        tp_value **s = realloc(c->stack, cap * sizeof *s);
        if (!s) return fail(c, TUBELET_ERR_MEMORY, "out of memory");
        c->stack = s, c->stack_cap = cap;
    }
    c->stack[c->sp++] = v;
    return TUBELET_OK;
}

static tp_value *pop(ctx *c) {
    size_t floor = c->n_marks ? c->marks[c->n_marks - 1] : 0;
    if (c->sp <= floor) {
        fail(c, TUBELET_ERR_FORMAT, "stack underflow");
        return NULL;
    }
    return c->stack[--c->sp];
}

static tp_value *top(ctx *c) {
    size_t floor = c->n_marks ? c->marks[c->n_marks - 1] : 0;
    if (c->sp <= floor) {
        fail(c, TUBELET_ERR_FORMAT, "stack underflow");
        return NULL;
    }
    return c->stack[c->sp - 1];
}

static int add_item(ctx *c, tp_value *to, tp_value *v) {
    if (to->n == to->cap) {
        size_t cap = to->cap ? 2 * to->cap : 4;
        tp_value **it = realloc(to->items, cap * sizeof *it);
        if (!it) return fail(c, TUBELET_ERR_MEMORY, "out of memory");
        to->items = it, to->cap = cap;
    }
    to->items[to->n++] = v;
    return TUBELET_OK;
}

/* Pops everything above the last mark into *from (index) and removes the mark. */
static int pop_mark(ctx *c, size_t *from) {
    if (!c->n_marks) return fail(c, TUBELET_ERR_FORMAT, "no MARK on the stack");
    *from = c->marks[--c->n_marks];
    return TUBELET_OK;
}

static int need(ctx *c, size_t n) {
    if (n > c->len - c->pos) return fail(c, TUBELET_ERR_FORMAT, "truncated (an opcode's argument runs past the end)");
    return TUBELET_OK;
}

static uint64_t read_le(const uint8_t *p, int n) {
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

static const char *copy_str(ctx *c, const uint8_t *s, size_t n) {
    sblock *b = malloc(sizeof *b + n + 1);
    if (!b) return NULL;
    memcpy(b->s, s, n);
    b->s[n] = 0;
    b->next = c->p->strings;
    c->p->strings = b;
    return b->s;
}

static int push_str(ctx *c, tp_kind k, size_t n) {
    int rc = need(c, n);
    if (rc) return rc;
    tp_value *v = new_value(c, k);
    if (!v) return TUBELET_ERR_MEMORY;
    if (!(v->s = copy_str(c, c->buf + c->pos, n))) return fail(c, TUBELET_ERR_MEMORY, "out of memory");
    v->len = n;
    c->pos += n;
    return push(c, v);
}

static int push_int(ctx *c, int64_t i) {
    tp_value *v = new_value(c, TP_INT);
    if (v) v->i = i;
    return push(c, v);
}

/* A length-prefixed argument: the length's bytes, then checked against what remains. */
static int read_len(ctx *c, int nbytes, size_t *n) {
    int rc = need(c, (size_t)nbytes);
    if (rc) return rc;
    uint64_t v = read_le(c->buf + c->pos, nbytes);
    c->pos += (size_t)nbytes;
    if (v > c->len - c->pos) return fail(c, TUBELET_ERR_FORMAT, "declared length runs past the end of the data");
    *n = (size_t)v;
    return TUBELET_OK;
}

/* LONG1 / LONG4: little-endian two's complement; more than 8 bytes does not fit. */
static int read_long(ctx *c, int len_bytes) {
    size_t n;
    int rc = read_len(c, len_bytes, &n);
    if (rc) return rc;
    if (n > 8) return fail(c, TUBELET_ERR_FORMAT, "integer wider than 64 bits");
    uint64_t v = n ? read_le(c->buf + c->pos, (int)n) : 0;
    if (n && n < 8 && (c->buf[c->pos + n - 1] & 0x80)) v |= ~(uint64_t)0 << (8 * n);
    c->pos += n;
    return push_int(c, (int64_t)v);
}

static int resolve_global(ctx *c, const char *module, const char *name) {
    for (size_t i = 0; i < sizeof GLOBALS / sizeof *GLOBALS; i++)
        if (!strcmp(GLOBALS[i].module, module) && !strcmp(GLOBALS[i].name, name)) {
            tp_value *v = new_value(c, TP_GLOBAL);
            if (v) v->i = GLOBALS[i].id;
            return push(c, v);
        }
    char msg[400];
    snprintf(msg, sizeof msg,
             "global '%.100s.%.100s' is not allowed (a checkpoint of weights needs only "
             "torch's tensor types and plain containers); nothing was run",
             module, name);
    return fail(c, TUBELET_ERR_FORMAT, msg);
}

static int op_global(ctx *c) {
    /* "module\nname\n" */
    const uint8_t *s = c->buf + c->pos, *end = c->buf + c->len;
    const uint8_t *nl1 = memchr(s, '\n', (size_t)(end - s));
    const uint8_t *nl2 = nl1 ? memchr(nl1 + 1, '\n', (size_t)(end - nl1 - 1)) : NULL;
    if (!nl2 || nl1 - s > 200 || nl2 - nl1 > 200)
        return fail(c, TUBELET_ERR_FORMAT, "malformed GLOBAL");
    char module[256], name[256];
    memcpy(module, s, (size_t)(nl1 - s));
    module[nl1 - s] = 0;
    memcpy(name, nl1 + 1, (size_t)(nl2 - nl1 - 1));
    name[nl2 - nl1 - 1] = 0;
    c->pos = (size_t)(nl2 + 1 - c->buf);
    return resolve_global(c, module, name);
}

static int op_stack_global(ctx *c) {
    tp_value *name = pop(c), *module = name ? pop(c) : NULL;
    if (!module) return TUBELET_ERR_FORMAT;
    if (module->kind != TP_STR || name->kind != TP_STR)
        return fail(c, TUBELET_ERR_FORMAT, "STACK_GLOBAL needs two strings");
    return resolve_global(c, module->s, name->s);
}

/* ---- constructors REDUCE may apply ---- */
static int is_int(const tp_value *v) { return v && (v->kind == TP_INT || v->kind == TP_BOOL); }

static int int_tuple(ctx *c, const tp_value *v, int64_t *out, int *n, const char *what) {
    if (!v || (v->kind != TP_TUPLE && v->kind != TP_LIST)) {
        char msg[80];
        snprintf(msg, sizeof msg, "tensor %s is not a tuple", what);
        return fail(c, TUBELET_ERR_FORMAT, msg);
    }
    if (v->n > TP_MAX_DIMS) return fail(c, TUBELET_ERR_FORMAT, "tensor has more than 8 dimensions");
    for (size_t i = 0; i < v->n; i++) {
        if (!is_int(v->items[i]) || v->items[i]->i < 0) {
            char msg[80];
            snprintf(msg, sizeof msg, "tensor %s holds a negative or non-integer value", what);
            return fail(c, TUBELET_ERR_FORMAT, msg);
        }
        out[i] = v->items[i]->i;
    }
    *n = (int)v->n;
    return TUBELET_OK;
}

/* _rebuild_tensor_v2(storage, storage_offset, size, stride, requires_grad, backward_hooks[,
 * metadata]): only the layout is kept; bounds are checked once the storages' sizes are known. */
static tp_value *rebuild_tensor(ctx *c, const tp_value *a) {
    if (a->kind != TP_TUPLE || a->n < 4 || a->n > 7) {
        fail(c, TUBELET_ERR_FORMAT, "_rebuild_tensor_v2 takes 6 or 7 arguments");
        return NULL;
    }
    if (a->items[0]->kind != TP_STORAGE || !is_int(a->items[1]) || a->items[1]->i < 0) {
        fail(c, TUBELET_ERR_FORMAT, "_rebuild_tensor_v2 needs a storage and an offset >= 0");
        return NULL;
    }
    tp_tensor t = {0};
    int ns = 0, nd = 0;
    t.offset = a->items[1]->i;
    if (int_tuple(c, a->items[2], t.size, &ns, "size") ||
        int_tuple(c, a->items[3], t.stride, &nd, "stride"))
        return NULL;
    if (ns != nd) {
        fail(c, TUBELET_ERR_FORMAT, "tensor size and stride have different lengths");
        return NULL;
    }
    t.ndim = ns;
    tp_value *v = new_value(c, TP_TENSOR);
    if (!v) return NULL;
    if (!(v->t = malloc(sizeof t))) {
        fail(c, TUBELET_ERR_MEMORY, "out of memory");
        return NULL;
    }
    *v->t = t;
    v->storage = a->items[0]->storage;
    return v;
}

/* OrderedDict() or OrderedDict([(k, v), ...]). */
static tp_value *ordered_dict(ctx *c, const tp_value *a) {
    tp_value *d = new_value(c, TP_DICT);
    if (!d || a->n == 0) return d;
    const tp_value *l = a->items[0];
    if (a->n != 1 || (l->kind != TP_LIST && l->kind != TP_TUPLE)) {
        fail(c, TUBELET_ERR_FORMAT, "OrderedDict takes a list of pairs");
        return NULL;
    }
    for (size_t i = 0; i < l->n; i++) {
        const tp_value *kv = l->items[i];
        if ((kv->kind != TP_TUPLE && kv->kind != TP_LIST) || kv->n != 2) {
            fail(c, TUBELET_ERR_FORMAT, "OrderedDict takes a list of pairs");
            return NULL;
        }
        if (add_item(c, d, kv->items[0]) || add_item(c, d, kv->items[1])) return NULL;
    }
    return d;
}

static tp_value *apply(ctx *c, const tp_value *f, const tp_value *a, int depth) {
    if (f->kind != TP_GLOBAL) {
        fail(c, TUBELET_ERR_FORMAT, "REDUCE of something that is not an allowed global");
        return NULL;
    }
    if (a->kind != TP_TUPLE) {
        fail(c, TUBELET_ERR_FORMAT, "REDUCE's arguments are not a tuple");
        return NULL;
    }
    switch (f->i) {
    case G_ORDERED_DICT: return ordered_dict(c, a);
    case G_REBUILD_TENSOR: return rebuild_tensor(c, a);
    case G_REBUILD_PARAM:
    case G_REBUILD_PARAM_STATE:
        if (a->n < 1 || a->items[0]->kind != TP_TENSOR) {
            fail(c, TUBELET_ERR_FORMAT, "_rebuild_parameter needs a tensor");
            return NULL;
        }
        return a->items[0];
    case G_REBUILD_FROM_TYPE: /* (func, type, args, state) with func one of the above */
        if (depth > 0 || a->n != 4 || a->items[1]->kind != TP_GLOBAL ||
            (a->items[1]->i != G_TENSOR && a->items[1]->i != G_PARAMETER) ||
            a->items[0]->kind != TP_GLOBAL ||
            (a->items[0]->i != G_REBUILD_TENSOR && a->items[0]->i != G_REBUILD_PARAM)) {
            fail(c, TUBELET_ERR_FORMAT, "_rebuild_from_type_v2 is allowed only for torch.Tensor "
                                        "and Parameter");
            return NULL;
        }
        return apply(c, a->items[0], a->items[2], depth + 1);
    case G_SIZE: { /* torch.Size((a, b, ...)) is its tuple */
        if (a->n != 1 || a->items[0]->kind != TP_TUPLE) {
            fail(c, TUBELET_ERR_FORMAT, "torch.Size takes one tuple");
            return NULL;
        }
        return a->items[0];
    }
    case G_RECORD: return new_value(c, TP_OBJECT);
    default:
        fail(c, TUBELET_ERR_FORMAT, f->i >= G_DTYPE     ? "a torch dtype cannot be called"
                                    : f->i >= G_STORAGE ? "a storage type cannot be called"
                                                        : "this global cannot be called");
        return NULL;
    }
}

static int op_reduce(ctx *c) {
    tp_value *a = pop(c), *f = a ? pop(c) : NULL;
    if (!f) return TUBELET_ERR_FORMAT;
    return push(c, apply(c, f, a, 0));
}

/* NEWOBJ (cls.__new__(cls, *args)): only the inert records. */
static int op_newobj(ctx *c) {
    tp_value *a = pop(c), *f = a ? pop(c) : NULL;
    if (!f) return TUBELET_ERR_FORMAT;
    if (f->kind == TP_GLOBAL && f->i == G_RECORD) return push(c, new_value(c, TP_OBJECT));
    if (f->kind == TP_GLOBAL && f->i == G_ORDERED_DICT) return push(c, new_value(c, TP_DICT));
    return fail(c, TUBELET_ERR_FORMAT,
                "NEWOBJ of a class other than OrderedDict or an inert record (argparse.Namespace, ...)");
}

/* BUILD: the state of an inert record is kept; an OrderedDict's attributes (the state dict's
 * _metadata) are dropped. */
static int op_build(ctx *c) {
    tp_value *state = pop(c), *obj = state ? top(c) : NULL;
    if (!obj) return TUBELET_ERR_FORMAT;
    if (obj->kind == TP_OBJECT) return obj->n ? fail(c, TUBELET_ERR_FORMAT, "BUILD twice") : add_item(c, obj, state);
    if (obj->kind == TP_DICT) return TUBELET_OK;
    return fail(c, TUBELET_ERR_FORMAT, "BUILD on a value that is not a record or a dict");
}

tp_storage *tp_find_storage(const tp_pickle *p, const char *key) {
    const int i = tb_strmap_get(&p->storage_index, key);
    return i >= 0 ? &p->storages[i] : NULL;
}

/* BINPERSID: ('storage', StorageType, key, location, numel[, view_metadata]). The same key twice
 * is the same storage (tensors that share it are views). */
static int op_persid(ctx *c) {
    tp_value *t = pop(c);
    if (!t) return TUBELET_ERR_FORMAT;
    if (t->kind != TP_TUPLE || t->n < 5 || t->n > 6 || t->items[0]->kind != TP_STR ||
        strcmp(t->items[0]->s, "storage") || t->items[1]->kind != TP_GLOBAL ||
        t->items[1]->i < G_STORAGE || t->items[1]->i >= G_STORAGE + TP_N_DTYPES ||
        t->items[2]->kind != TP_STR || !is_int(t->items[4]) || t->items[4]->i < 0 ||
        (t->n == 6 && t->items[5]->kind != TP_NONE))
        return fail(c, TUBELET_ERR_FORMAT, "persistent id is not ('storage', StorageType, key, "
                                           "location, numel) (storage views are not supported)");
    tp_dtype dt = (tp_dtype)(t->items[1]->i - G_STORAGE);
    tp_pickle *p = c->p;
    tp_storage *s = tp_find_storage(p, t->items[2]->s);
    if (s) {
        if (s->dtype != dt || s->numel != t->items[4]->i)
            return fail(c, TUBELET_ERR_FORMAT, "one storage key with two types or sizes");
    } else {
        if (p->n_storages >= MAX_STORAGES) return fail(c, TUBELET_ERR_FORMAT, "too many storages");
        const int ns = p->n_storages;
        if (ns == 0 || (ns >= 64 && !(ns & (ns - 1)))) { /* full: 64, then doubled */
            tp_storage *n = realloc(p->storages, sizeof *n * (size_t)(ns ? 2 * ns : 64));
            if (!n) return fail(c, TUBELET_ERR_MEMORY, "out of memory");
            p->storages = n;
        }
        if (tb_strmap_add(&p->storage_index, t->items[2]->s, p->n_storages) < 0)
            return fail(c, TUBELET_ERR_MEMORY, "out of memory");
        s = &p->storages[p->n_storages++];
        memset(s, 0, sizeof *s);
        s->key = t->items[2]->s, s->dtype = dt, s->numel = t->items[4]->i;
    }
    tp_value *v = new_value(c, TP_STORAGE);
    if (v) v->storage = (int)(s - p->storages);
    return push(c, v);
}

static int memo_put(ctx *c, size_t idx) {
    tp_value *v = top(c);
    if (!v) return TUBELET_ERR_FORMAT;
    if (idx >= MAX_MEMO) return fail(c, TUBELET_ERR_FORMAT, "memo index above 2^20");
    if (idx >= c->memo_cap) {
        size_t cap = c->memo_cap ? c->memo_cap : 256;
        while (cap <= idx) cap *= 2;
        tp_value **m = realloc(c->memo, cap * sizeof *m);
        if (!m) return fail(c, TUBELET_ERR_MEMORY, "out of memory");
        memset(m + c->memo_cap, 0, (cap - c->memo_cap) * sizeof *m);
        c->memo = m, c->memo_cap = cap;
    }
    c->memo[idx] = v;
    if (idx >= c->memo_len) c->memo_len = idx + 1;
    return TUBELET_OK;
}

static int memo_get(ctx *c, size_t idx) {
    if (idx >= c->memo_cap || !c->memo[idx]) return fail(c, TUBELET_ERR_FORMAT, "memo GET of an index never PUT");
    return push(c, c->memo[idx]);
}

static int op_mark(ctx *c) {
    if (c->n_marks == c->marks_cap) {
        if (c->marks_cap >= MAX_MARKS) return fail(c, TUBELET_ERR_FORMAT, "too many MARKs");
        size_t cap = c->marks_cap ? 2 * c->marks_cap : 16;
        size_t *m = realloc(c->marks, cap * sizeof *m);
        if (!m) return fail(c, TUBELET_ERR_MEMORY, "out of memory");
        c->marks = m, c->marks_cap = cap;
    }
    c->marks[c->n_marks++] = c->sp;
    return TUBELET_OK;
}

/* Collects stack[from..] into a new tuple or list and pushes it. */
static int collect(ctx *c, tp_kind k, size_t from) {
    tp_value *v = new_value(c, k);
    if (!v) return TUBELET_ERR_MEMORY;
    for (size_t i = from; i < c->sp; i++)
        if (add_item(c, v, c->stack[i])) return TUBELET_ERR_MEMORY;
    c->sp = from;
    return push(c, v);
}

static int op_tuple_n(ctx *c, size_t n) {
    size_t floor = c->n_marks ? c->marks[c->n_marks - 1] : 0;
    if (c->sp - floor < n) return fail(c, TUBELET_ERR_FORMAT, "stack underflow");
    return collect(c, TP_TUPLE, c->sp - n);
}

static int op_appends(ctx *c, int many) {
    size_t from = 0;
    int rc;
    if (many) {
        if ((rc = pop_mark(c, &from))) return rc;
    } else {
        size_t floor = c->n_marks ? c->marks[c->n_marks - 1] : 0;
        if (c->sp < floor + 2) return fail(c, TUBELET_ERR_FORMAT, "stack underflow");
        from = c->sp - 1;
    }
    if (from == 0 || (c->n_marks && from <= c->marks[c->n_marks - 1]))
        return fail(c, TUBELET_ERR_FORMAT, "APPEND without a list");
    tp_value *l = c->stack[from - 1];
    if (l->kind != TP_LIST) return fail(c, TUBELET_ERR_FORMAT, "APPEND to a value that is not a list");
    for (size_t i = from; i < c->sp; i++)
        if ((rc = add_item(c, l, c->stack[i]))) return rc;
    c->sp = from;
    return TUBELET_OK;
}

static int op_setitems(ctx *c, int many) {
    size_t from = 0;
    int rc;
    if (many) {
        if ((rc = pop_mark(c, &from))) return rc;
    } else {
        size_t floor = c->n_marks ? c->marks[c->n_marks - 1] : 0;
        if (c->sp < floor + 3) return fail(c, TUBELET_ERR_FORMAT, "stack underflow");
        from = c->sp - 2;
    }
    if ((c->sp - from) % 2) return fail(c, TUBELET_ERR_FORMAT, "SETITEMS with an odd number of values");
    if (from == 0 || (c->n_marks && from <= c->marks[c->n_marks - 1]))
        return fail(c, TUBELET_ERR_FORMAT, "SETITEM without a dict");
    tp_value *d = c->stack[from - 1];
    if (d->kind != TP_DICT) return fail(c, TUBELET_ERR_FORMAT, "SETITEM on a value that is not a dict");
    for (size_t i = from; i < c->sp; i++)
        if ((rc = add_item(c, d, c->stack[i]))) return rc;
    c->sp = from;
    return TUBELET_OK;
}

static int unknown_opcode(ctx *c, uint8_t op) {
    char msg[160];
    if (op >= 0x20 && op < 0x7f)
        snprintf(msg, sizeof msg, "opcode '%c' (0x%02x) is not allowed in a checkpoint", op, op);
    else
        snprintf(msg, sizeof msg, "opcode 0x%02x is not allowed in a checkpoint", op);
    return fail(c, TUBELET_ERR_FORMAT, msg);
}

/* One opcode; *stop set at STOP. */
static int step(ctx *c, int *stop) {
    c->op_pos = c->pos;
    if (c->pos >= c->len) return fail(c, TUBELET_ERR_FORMAT, "truncated (no STOP opcode)");
    uint8_t op = c->buf[c->pos++];
    size_t n, from = 0;
    int rc;
    tp_value *v;
    switch (op) {
    case 0x80: /* PROTO */
        if ((rc = need(c, 1))) return rc;
        if (c->buf[c->pos] > 5) return fail(c, TUBELET_ERR_FORMAT, "unknown pickle protocol");
        c->pos++;
        return TUBELET_OK;
    case 0x95: /* FRAME: a length hint only */
        if ((rc = need(c, 8))) return rc;
        c->pos += 8;
        return TUBELET_OK;
    case '.': *stop = 1; return TUBELET_OK;
    case '(': return op_mark(c);
    case '0': return pop(c) ? TUBELET_OK : TUBELET_ERR_FORMAT;
    case '1': if ((rc = pop_mark(c, &from))) return rc; c->sp = from; return TUBELET_OK;
    case '2': v = top(c); return v ? push(c, v) : TUBELET_ERR_FORMAT;
    case 'N': return push(c, new_value(c, TP_NONE));
    case 0x88: case 0x89:
        if ((v = new_value(c, TP_BOOL))) v->i = op == 0x88;
        return push(c, v);
    case 'J':
        if ((rc = need(c, 4))) return rc;
        rc = push_int(c, (int32_t)(uint32_t)read_le(c->buf + c->pos, 4));
        c->pos += 4;
        return rc;
    case 'K':
        if ((rc = need(c, 1))) return rc;
        return push_int(c, c->buf[c->pos++]);
    case 'M':
        if ((rc = need(c, 2))) return rc;
        rc = push_int(c, (int64_t)read_le(c->buf + c->pos, 2));
        c->pos += 2;
        return rc;
    case 0x8a: return read_long(c, 1);
    case 0x8b: return read_long(c, 4);
    case 'G': { /* BINFLOAT: big-endian double */
        if ((rc = need(c, 8))) return rc;
        uint64_t b = 0;
        for (int i = 0; i < 8; i++) b = b << 8 | c->buf[c->pos + (size_t)i];
        c->pos += 8;
        double d;
        memcpy(&d, &b, sizeof d);
        if ((v = new_value(c, TP_FLOAT))) v->f = d;
        return push(c, v);
    }
    case 'X': return (rc = read_len(c, 4, &n)) ? rc : push_str(c, TP_STR, n);
    case 0x8c: return (rc = read_len(c, 1, &n)) ? rc : push_str(c, TP_STR, n);
    case 0x8d: return (rc = read_len(c, 8, &n)) ? rc : push_str(c, TP_STR, n);
    case 'T': return (rc = read_len(c, 4, &n)) ? rc : push_str(c, TP_STR, n); /* py2 str */
    case 'U': return (rc = read_len(c, 1, &n)) ? rc : push_str(c, TP_STR, n);
    case 'B': return (rc = read_len(c, 4, &n)) ? rc : push_str(c, TP_BYTES, n);
    case 'C': return (rc = read_len(c, 1, &n)) ? rc : push_str(c, TP_BYTES, n);
    case 0x8e: return (rc = read_len(c, 8, &n)) ? rc : push_str(c, TP_BYTES, n);
    case ']': return push(c, new_value(c, TP_LIST));
    case ')': return push(c, new_value(c, TP_TUPLE));
    case '}': return push(c, new_value(c, TP_DICT));
    case 'l': return (rc = pop_mark(c, &from)) ? rc : collect(c, TP_LIST, from);
    case 't': return (rc = pop_mark(c, &from)) ? rc : collect(c, TP_TUPLE, from);
    case 'd': {
        if ((rc = pop_mark(c, &from))) return rc;
        if ((c->sp - from) % 2) return fail(c, TUBELET_ERR_FORMAT, "DICT with an odd number of values");
        return collect(c, TP_DICT, from);
    }
    case 0x85: return op_tuple_n(c, 1);
    case 0x86: return op_tuple_n(c, 2);
    case 0x87: return op_tuple_n(c, 3);
    case 'a': return op_appends(c, 0);
    case 'e': return op_appends(c, 1);
    case 's': return op_setitems(c, 0);
    case 'u': return op_setitems(c, 1);
    case 'c': return op_global(c);
    case 0x93: return op_stack_global(c);
    case 'R': return op_reduce(c);
    case 0x81: return op_newobj(c);
    case 'b': return op_build(c);
    case 'Q': return op_persid(c);
    case 'h': if ((rc = need(c, 1))) return rc; return memo_get(c, c->buf[c->pos++]);
    case 'j':
        if ((rc = need(c, 4))) return rc;
        n = (size_t)read_le(c->buf + c->pos, 4);
        c->pos += 4;
        return memo_get(c, n);
    case 'q': if ((rc = need(c, 1))) return rc; return memo_put(c, c->buf[c->pos++]);
    case 'r':
        if ((rc = need(c, 4))) return rc;
        n = (size_t)read_le(c->buf + c->pos, 4);
        c->pos += 4;
        return memo_put(c, n);
    case 0x94: return memo_put(c, c->memo_len);
    default: return unknown_opcode(c, op);
    }
}

void tp_free(tp_pickle *p) {
    if (!p) return;
    for (tp_value *v = p->values, *next; v; v = next) {
        next = v->next_alloc;
        free(v->items);
        free(v->t);
        free(v);
    }
    for (sblock *b = p->strings, *next; b; b = next) {
        next = b->next;
        free(b);
    }
    free(p->storages);
    tb_strmap_free(&p->storage_index);
    free(p);
}

int tp_parse(tp_pickle **out, const uint8_t *buf, size_t len, size_t *consumed, tb_err *e) {
    *out = NULL;
    ctx c = {0};
    c.e = e, c.buf = buf, c.len = len;
    if (!(c.p = calloc(1, sizeof *c.p))) return tb_fail(e, TUBELET_ERR_MEMORY, "out of memory");
    int stop = 0, rc = TUBELET_OK;
    while (!rc && !stop) rc = step(&c, &stop);
    if (!rc && (c.sp != 1 || c.n_marks))
        rc = fail(&c, TUBELET_ERR_FORMAT, "STOP with other than one value on the stack");
    if (!rc) {
        c.p->root = c.stack[0];
        if (consumed) *consumed = c.pos;
        *out = c.p;
    } else {
        tp_free(c.p);
    }
    free(c.stack), free(c.marks), free(c.memo);
    return rc;
}

const tp_value *tp_dict_get(const tp_value *d, const char *key) {
    if (!d || d->kind != TP_DICT) return NULL;
    for (size_t i = d->n; i >= 2; i -= 2) {
        const tp_value *k = d->items[i - 2];
        if (k->kind == TP_STR && !strcmp(k->s, key)) return d->items[i - 1];
    }
    return NULL;
}
