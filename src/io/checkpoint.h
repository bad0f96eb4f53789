/* Official checkpoints as they were published, read as Hugging Face models: TimeSformer's .pyth
 * (facebookresearch/TimeSformer), VideoMAE's .pth (MCG-NJU/VideoMAE, fine-tuned and pretraining
 * encoders; STMixer's backbone), Video Swin's .pth (torchvision's, mmaction2's: as tubelet's
 * video_swin, torchvision's names) in both of torch's serialisations, ViViT's scenic/Flax
 * msgpack checkpoints (checkpoint_flax.h), and V-JEPA 2's (facebookresearch/vjepa2: "target_encoder",
 * or "encoder" with TUBELET_VJEPA2_ENCODER=encoder, the predictor, and the attentive probe's
 * classifiers[0] from the same file or from TUBELET_VJEPA2_PROBE=FILE; docs/vjepa2.md). Their
 * tensors are renamed by
 * tables (official name -> Hugging Face name, VideoMAE's fused qkv split in three) and their
 * config.json is inferred from the tensors' shapes, or read from a config.json beside the file or
 * given explicitly. docs/checkpoints.md lists the layouts and the threat model. */
#ifndef TB_CHECKPOINT_H
#define TB_CHECKPOINT_H

#include "../common.h"
#include "ckpt_cfg.h"
#include "weights.h"

/* 1 if path is a regular file: a checkpoint to open with tb_ckpt_open, not a model directory. */
int tb_ckpt_is_file(const char *path);

/* What a model path holds, told once (a stat, then the file's first byte) so that each loader is
 * picked without sniffing again: a scenic/Flax msgpack file, another regular file (torch's zip or
 * legacy serialisation; torch_file.c tells them apart from the bytes it maps), or anything else (a
 * Hugging Face model directory, or nothing: its config.json then reports it). */
typedef enum { TB_CKPT_DIR, TB_CKPT_FLAX, TB_CKPT_TORCH } tb_ckpt_format;
tb_ckpt_format tb_ckpt_detect(const char *path);

/* Opens path, a file of format fmt (tb_ckpt_detect). config_path: a config.json to use instead of inferring one (NULL: the config.json
 * beside the file if there is one, else inferred). On success *config_json is the config text
 * (malloc'd), *config_name what to call it in messages (malloc'd: the file read, or
 * "<path> (inferred config)"), *w the tensors under Hugging Face names. When the inference is
 * ambiguous the error says which --config field to give. */
int tb_ckpt_open(const char *path, tb_ckpt_format fmt, const char *config_path, const tb_log *log, char **config_json,
                 char **config_name, tb_weights **w, tb_err *e);

/* preprocessor_config.json text for the checkpoint's family as its authors trained it (malloc'd),
 * or NULL when unknown. model_type: "videomae", "timesformer", "vivit", "video_swin", "xclip",
 * "vjepa2" (VJEPA2VideoProcessor at crop 256). */
char *tb_ckpt_preprocessor_json(const char *model_type);

/* What the checkpoint file at path says about its own training (docs/checkpoints.md): pySlowFast's
 * cfg, mmaction2's meta config, VideoMAE's args (*cfg; fields 0 where it says nothing), and its
 * model_type (*model_type, static; may be NULL). Reads the pickle only, not the weights. */
int tb_ckpt_read_cfg(const char *path, tb_ckpt_cfg *cfg, const char **model_type, tb_err *e);

/* preprocessor_config.json text for the checkpoint file at path (*json, malloc'd): its family's
 * (tb_ckpt_preprocessor_json) with the crop, mean and std its own training config gives in place
 * of the family's defaults. Where the file gives no crop, the model's input size image_size
 * (0: the image_size of a config.json beside the file, vision_config's for X-CLIP, if any) is
 * the crop and the short side: a model of 32 x 32 frames gets 32, not the family's 224. */
int tb_ckpt_preprocessor_for(const char *path, int image_size, char **json, tb_err *e);

#endif
