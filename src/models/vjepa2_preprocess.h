/* VJEPA2VideoProcessor's defaults (transformers models/vjepa2/video_processing_vjepa2.py), for
 * the vjepa2 family's table: `.preprocess = &tb_vjepa2_preprocess` in vjepa2.c, the one file
 * that includes this header. Crop 256; the short side int(crop * 256 / 224) (292 at 256), derived
 * from the crop whatever the file's size says, as the processor's __init__ does; bilinear,
 * 1/255, ImageNet's mean and std (docs/vjepa2.md, "Preprocessing"). */
#ifndef TB_VJEPA2_PREPROCESS_H
#define TB_VJEPA2_PREPROCESS_H

#include "family.h"

static const tb_preproc_defaults tb_vjepa2_preprocess = {
    "VJEPA2", 292, 1.0 / 255.0, 0, {0.485f, 0.456f, 0.406f}, {0.229f, 0.224f, 0.225f}, 256, 1};

#endif
