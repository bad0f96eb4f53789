/* A restricted unpickler for PyTorch checkpoints (torch.save's data.pkl, or the pickles of the
 * legacy format). It is a security boundary: it builds a tree of plain values and never calls,
 * imports or executes anything. Only the opcodes and globals a state dict needs are accepted
 * (containers, numbers, strings, collections.OrderedDict, torch's tensor and parameter rebuild
 * functions, storage types and dtypes, torch.Size, and argparse.Namespace, numpy arrays and
 * mmengine's HistoryBuffer as inert records);
 * anything else fails with an error that names the opcode or global. The memo, the stack, the
 * number of values and every declared length are bounded. */
#ifndef TB_TORCH_PICKLE_H
#define TB_TORCH_PICKLE_H

#include <stddef.h>
#include <stdint.h>

#include "../common.h"

#define TP_MAX_DIMS 8

typedef enum {
    TP_NONE, TP_BOOL, TP_INT, TP_FLOAT, TP_STR, TP_BYTES,
    TP_TUPLE, TP_LIST, TP_DICT,  /* dict: items = key, value, key, value, ... */
    TP_GLOBAL,                   /* an allowed global (id: tp_global_id) */
    TP_STORAGE,                  /* a persistent id: storage index */
    TP_TENSOR,
    TP_OBJECT,                   /* an inert record (argparse.Namespace, a numpy array, ...):
                                    items[0] = its BUILD state (Namespace: its dict) */
} tp_kind;

/* Element types of torch's storages. */
typedef enum { TP_F32, TP_F64, TP_F16, TP_BF16, TP_I64, TP_I32, TP_I16, TP_I8, TP_U8, TP_BOOL_T,
               TP_N_DTYPES } tp_dtype;

typedef struct tp_value tp_value;
struct tp_value {
    tp_kind kind;
    int64_t i;          /* bool, int; global: its id */
    double f;
    const char *s;      /* str / bytes: NUL-terminated copy */
    size_t len;
    tp_value **items;   /* tuple, list, dict (2 n), object */
    size_t n, cap;
    int storage;        /* storage, tensor: index into tp_pickle.storages */
    struct tp_tensor *t; /* tensor */
    tp_value *next_alloc;
};

typedef struct tp_tensor {
    int ndim;
    int64_t offset, size[TP_MAX_DIMS], stride[TP_MAX_DIMS]; /* in elements */
} tp_tensor;

typedef struct {
    const char *key;    /* the archive's data/<key>, or the legacy format's key */
    tp_dtype dtype;
    int64_t numel;      /* as the persistent id declares it */
    /* filled in by the container reader: */
    const uint8_t *data;
    size_t nbytes;
} tp_storage;

typedef struct tp_pickle tp_pickle;
struct tp_pickle {
    tp_value *root;
    tp_storage *storages;
    int n_storages;
    /* private */
    tp_value *values;   /* every value, for freeing */
    size_t n_values;
    void *strings;      /* arena of string copies */
    tb_strmap storage_index; /* storages' keys -> index */
};

/* Parses one pickle from buf (len bytes) up to its STOP; *consumed receives its length. Errors
 * say what and at which byte: "global 'posix.system' is not allowed ...". */
int tp_parse(tp_pickle **out, const uint8_t *buf, size_t len, size_t *consumed, tb_err *e);
void tp_free(tp_pickle *p);

size_t tp_dtype_size(tp_dtype d);
const char *tp_dtype_name(tp_dtype d);

/* The storage of a key, or NULL. */
tp_storage *tp_find_storage(const tp_pickle *p, const char *key);

/* The value of a dict for a string key (the last one set), or NULL. */
const tp_value *tp_dict_get(const tp_value *d, const char *key);

#endif
