/* PyTorch checkpoint files (torch.save) read without Python: the zip format of torch >= 1.6
 * (<archive>/data.pkl, <archive>/data/<key>) through libzip, with stored (uncompressed) storages
 * used in place from a memory map, and the legacy format (magic number, protocol and system-info
 * pickles, the object pickle, the storage keys, then each storage's size and bytes). The pickles
 * go through the restricted unpickler (torch_pickle.h). Every tensor is checked against its
 * storage: its furthest element lies inside it, and its elements do not overlap each other. */
#ifndef TB_TORCH_FILE_H
#define TB_TORCH_FILE_H

#include <stddef.h>
#include <stdint.h>

#include "../common.h"
#include "torch_pickle.h"

typedef struct {
    const char *name;        /* the state dict's key */
    tp_dtype dtype;
    int ndim;
    int64_t shape[TP_MAX_DIMS], stride[TP_MAX_DIMS]; /* stride in elements */
    const uint8_t *base;     /* the element at index 0 (storage start + offset) */
    int contiguous;          /* row-major without gaps */
    int storage;             /* which storage: tensors that share one are views */
} tf_tensor;

typedef struct tf_file tf_file;

/* Opens path (regular file; mapped read-only). Errors name the file and the problem. */
int tf_open(tf_file **out, const char *path, tb_err *e);
/* The same on a buffer the caller keeps alive while f is open (the fuzz harness). */
int tf_open_mem(tf_file **out, const uint8_t *buf, size_t len, const char *name, tb_err *e);
/* The file without its storages: the pickle only (names, dtypes and shapes of the state dict, and
 * what else the file holds: its training config), for what a checkpoint says about itself without
 * reading its weights. Its tensors have base NULL and must not be read. */
int tf_open_names(tf_file **out, const char *path, tb_err *e);
void tf_close(tf_file *f);

/* The tensors of the state dict: the root dict, or its "model_state", "state_dict", "model" or
 * "module" entry (nested up to three times). Failing those, the state dicts side by side under
 * the root (facebookresearch/vjepa2: "encoder", "target_encoder", "predictor", a "classifiers"
 * list), one level deep, named "key.name" or "key.i.name"; tf_nested is then 1. */
int tf_count(const tf_file *f);
int tf_nested(const tf_file *f);
const tf_tensor *tf_at(const tf_file *f, int i);
const tf_tensor *tf_find(const tf_file *f, const char *name);
/* A top-level string entry (pySlowFast's "cfg" YAML), or NULL. */
const char *tf_root_string(const tf_file *f, const char *key);
/* The unpickled object torch.save was given (a dict, usually). */
const tp_value *tf_root(const tf_file *f);
const char *tf_format(const tf_file *f); /* "zip" or "legacy" */

/* 1 if the file starts like a torch checkpoint (zip or legacy pickle). */
int tf_sniff(const uint8_t *head, size_t n);

/* Copies t (any layout) into dst as float32: float32/64/16 and bfloat16 only. */
int tf_to_f32(const tf_tensor *t, float *dst);
int64_t tf_numel(const tf_tensor *t);

#endif
