/* Official checkpoints as they were published, read as Hugging Face models: TimeSformer's .pyth
 * (facebookresearch/TimeSformer), VideoMAE's .pth (MCG-NJU/VideoMAE, fine-tuned and pretraining
 * encoders; STMixer's backbone) in both of torch's serialisations, and ViViT's scenic/Flax
 * msgpack checkpoints (checkpoint_flax.h). Their tensors are renamed by
 * tables (official name -> Hugging Face name, VideoMAE's fused qkv split in three) and their
 * config.json is inferred from the tensors' shapes, or read from a config.json beside the file or
 * given explicitly. docs/checkpoints.md lists the layouts and the threat model. */
#ifndef TB_CHECKPOINT_H
#define TB_CHECKPOINT_H

#include "../common.h"
#include "weights.h"

/* 1 if path is a regular file: a checkpoint to open with tb_ckpt_open, not a model directory. */
int tb_ckpt_is_file(const char *path);

/* Opens path. config_path: a config.json to use instead of inferring one (NULL: the config.json
 * beside the file if there is one, else inferred). On success *config_json is the config text
 * (malloc'd), *config_name what to call it in messages (malloc'd: the file read, or
 * "<path> (inferred config)"), *w the tensors under Hugging Face names. When the inference is
 * ambiguous the error says which --config field to give. */
int tb_ckpt_open(const char *path, const char *config_path, const tb_log *log, char **config_json,
                 char **config_name, tb_weights **w, tb_err *e);

/* preprocessor_config.json text for the checkpoint's family as its authors trained it (malloc'd),
 * or NULL when unknown. model_type: "videomae", "timesformer", "vivit". */
char *tb_ckpt_preprocessor_json(const char *model_type);

#endif
