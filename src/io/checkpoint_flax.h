/* ViViT's scenic checkpoints (Flax msgpack, io/flax_file.h) as Hugging Face ViViT models, for
 * io/checkpoint.c: name maps from scenic's projects/vivit/model.py (Model 1 "spacetime", Model 2
 * "factorized_encoder", Model 3 "factorized_self_attention_block", Model 4
 * "factorized_dot_product_attention") to the names of models/vivit.c, with Flax's layouts
 * turned into torch's (Dense kernels (in, out) transposed, attention kernels (hidden, heads,
 * head_dim) flattened and transposed, conv kernels (t, h, w, in, out) to (out, in, t, h, w)) as
 * strided views, and the config inferred from the shapes. docs/checkpoints.md. */
#ifndef TB_CHECKPOINT_FLAX_H
#define TB_CHECKPOINT_FLAX_H

#include "../common.h"
#include "torch_file.h"

/* Takes one tensor (any strides) under a Hugging Face name; checkpoint.c's holder. */
typedef int (*tb_ckpt_add_fn)(void *holder, const char *name, const tf_tensor *t, const char *path,
                              tb_err *e);

/* Reads path's parameters into holder through add. *keep receives what the added tensors point
 * into (free it with tb_flax_ckpt_free after the tensors' last use, also on failure). config: if
 * not NULL, receives the config.json text inferred from the tensors (malloc'd); when the
 * tensors do not say enough, the error asks for --config. */
int tb_flax_ckpt_read(const char *path, const tb_log *log, tb_ckpt_add_fn add, void *holder,
                      void **keep, char **config, tb_err *e);
void tb_flax_ckpt_free(void *keep);

#endif
