/* What an official checkpoint's own training config says about its input (docs/checkpoints.md):
 * pySlowFast's "cfg" (TimeSformer's .pyth: the YAML text of yacs' CfgNode.dump()) and the config
 * text mmcv / mmengine keep in an mmaction2 checkpoint's "meta" (Python source: img_norm_cfg or
 * data_preprocessor's mean and std). Only the few keys tubelet needs are read, by small scanners
 * over the text: it is untrusted, so they are bounded (the first TB_CKPT_CFG_MAX_TEXT bytes, lines
 * and values of fixed length), never recurse, and leave a field unset on anything malformed; they
 * never fail. */
#ifndef TB_CKPT_CFG_H
#define TB_CKPT_CFG_H

#include <stddef.h>

#define TB_CKPT_CFG_MAX_TEXT ((size_t)1 << 20)

typedef struct {
    int frames;              /* DATA.NUM_FRAMES (0: not said) */
    int sampling_rate;       /* DATA.SAMPLING_RATE: frames between two sampled ones */
    int train_crop;          /* DATA.TRAIN_CROP_SIZE */
    int test_crop;           /* DATA.TEST_CROP_SIZE */
    int num_classes;         /* MODEL.NUM_CLASSES */
    int have_mean, have_std; /* DATA.MEAN / DATA.STD, or the mmaction2 config's (/ 255) */
    float mean[3], std[3];   /* of pixels in [0, 1] */
    char attention_type[32]; /* TIMESFORMER.ATTENTION_TYPE ("" if not said) */
} tb_ckpt_cfg;

void tb_ckpt_cfg_init(tb_ckpt_cfg *c);
/* pySlowFast's YAML: sections at column 0 ("DATA:"), their keys indented ("  NUM_FRAMES: 8"),
 * lists in flow ("[0.45, 0.45, 0.45]") or block style ("  - 0.45" lines), as PyYAML writes them.
 * Returns the number of fields set. */
int tb_ckpt_cfg_slowfast(tb_ckpt_cfg *c, const char *text, size_t len);
/* mmcv / mmengine config text: "mean=[...]" and "std=[...]" (0-255 pixel units) of img_norm_cfg,
 * else of data_preprocessor. Returns the number of fields set. */
int tb_ckpt_cfg_mmcv(tb_ckpt_cfg *c, const char *text, size_t len);

#endif
