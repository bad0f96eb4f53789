/* The tensors of a Hugging Face model directory: model.safetensors, or the shards listed in
 * model.safetensors.index.json. Tensors are looked up by name and returned as float32:
 * F32 tensors that are 4-byte aligned are used in place (memory-mapped, no copy); F16, BF16 and
 * unaligned F32 are converted once into owned buffers. Lookups are recorded, so that tensors the
 * model never asked for can be reported as unexpected. */
#ifndef TB_WEIGHTS_H
#define TB_WEIGHTS_H

#include <stdint.h>

#include "../common.h"
#include "safetensors.h"

typedef struct tb_weights tb_weights;

/* Opens dir/model.safetensors or dir/model.safetensors.index.json (the index wins if both exist;
 * every shard it names must exist and hold exactly the tensors the index assigns to it). */
int tb_weights_open(tb_weights **out, const char *dir, int use_mmap, tb_err *e);
/* Tensors held elsewhere (an official checkpoint under Hugging Face names, io/checkpoint.h):
 * ts[i].name and .data stay valid until release(owner), which tb_weights_free calls (also when
 * this fails). source names the file in messages. Duplicate names fail. */
int tb_weights_from_tensors(tb_weights **out, const char *source, const st_tensor *ts, int n,
                            void *owner, void (*release)(void *owner), tb_err *e);
void tb_weights_free(tb_weights *w);
/* The caller will not read the tensor at p (bytes long) again: a converted copy is freed, mapped
 * pages are handed back to the kernel. */
void tb_weights_release(tb_weights *w, const void *p, size_t bytes);

/* Returns the tensor name as float32 with exactly the given shape, or fails with
 * TUBELET_ERR_MISSING ("<file>: missing tensor 'name'") or TUBELET_ERR_SHAPE
 * ("<file>: tensor 'name' has shape [a, b], config.json implies [c, d]"). */
int tb_weights_get(tb_weights *w, const char *name, int ndim, const int64_t *shape,
                   const float **out, tb_err *e);
/* The first dimension of the tensor, -1 if it does not exist (does not mark it used). */
int64_t tb_weights_rows(tb_weights *w, const char *name);
/* 1 if the tensor exists (does not mark it used). */
int tb_weights_has(const tb_weights *w, const char *name);

/* Calls fn for each tensor never returned by tb_weights_get. */
void tb_weights_each_unused(const tb_weights *w, void (*fn)(void *user, const char *name),
                            void *user);
/* Bytes of weights: mapped (in place) and owned (converted). */
void tb_weights_bytes(const tb_weights *w, size_t *mapped, size_t *owned);

#endif
