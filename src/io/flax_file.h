/* Flax checkpoints (flax.serialization.to_bytes / msgpack_serialize, as scenic's and
 * flax.training.checkpoints' save_checkpoint write them) read without Python: one msgpack tree of
 * maps with string keys whose arrays are msgpack extension type 1, a payload that is itself
 * msgpack [shape, dtype name, row-major bytes]. Decoding is Debian's msgpack-c; before msgpack-c
 * sees any bytes, a bounded walk over the headers checks every declared length and count against
 * the bytes that remain, the nesting depth and the number of objects, so that no file can make it
 * allocate more than a fixed multiple of its own size or recurse past its stack.
 *
 * Only the model's parameters are listed: the subtree under "optimizer" / "target" (flax.optim
 * train states, scenic's published checkpoints), "params" (flax.training.train_state, scenic's
 * newer TrainState, a variables dict) or the root. Optimizer moments and other state are never
 * decoded. Arrays point into the file's memory map (read-only, private). docs/checkpoints.md. */
#ifndef TB_FLAX_FILE_H
#define TB_FLAX_FILE_H

#include <stddef.h>
#include <stdint.h>

#include "../common.h"
#include "torch_file.h"

#define FX_MAX_DEPTH 24           /* msgpack-c's own stack is 32 */
#define FX_MAX_OBJECTS (1 << 20)  /* a ViViT-H train state has a few thousand */
#define FX_MAX_TENSORS (1 << 16)
#define FX_MAX_NAME 512

typedef struct fx_file fx_file;

/* Opens path (a regular file; mapped read-only). Errors name the file, the byte or the key. */
int fx_open(fx_file **out, const char *path, tb_err *e);
/* The same on a buffer the caller keeps alive while f is open (the fuzz harness). */
int fx_open_mem(fx_file **out, const uint8_t *buf, size_t len, const char *name, tb_err *e);
void fx_close(fx_file *f);

/* 1 if the bytes start like a Flax checkpoint: a msgpack map with at least one entry (a torch
 * legacy pickle starts with 0x80, the empty fixmap, followed by its protocol). */
int fx_sniff(const uint8_t *head, size_t n);

/* The parameters: names are the keys from the parameters' root joined by '/'
 * ("Transformer/encoderblock_0/LayerNorm_0/scale"); row-major float or integer arrays (tf_tensor:
 * contiguous, storage = its index). */
int fx_count(const fx_file *f);
const tf_tensor *fx_at(const fx_file *f, int i);
const tf_tensor *fx_find(const fx_file *f, const char *name);
/* Where the parameters were found: "optimizer/target", "params" or "" (the root). */
const char *fx_root(const fx_file *f);
/* The caller has copied the n bytes at p (inside one of f's arrays) and will not read them: their
 * pages leave the resident set (the file stays mapped). */
void fx_release(const fx_file *f, const void *p, size_t n);
/* The same for the whole file: the kernel maps whole folios around each page read (a header),
 * so walking the tree leaves much of the file resident; what is read later faults back in. */
void fx_release_all(const fx_file *f);
/* 1 if the parameters' map has an entry (of any kind) with this '/'-joined name. */
int fx_has(const fx_file *f, const char *name);

#endif
