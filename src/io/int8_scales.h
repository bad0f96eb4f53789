/* int8_scales.json (docs/precision.md, "Static int8"): the fixed u8 scale and zero point of the
 * activations entering each linear layer of one model, calibrated by `tubelet calibrate`
 * (models/calibrate.c) and read when the model is loaded in int8:
 *
 *   {"format": "tubelet int8 activation scales", "version": 1,
 *    "architecture": "vivit model1_spatio_temporal, hidden 96, ...",
 *    "estimator": "...", "percentile": 100, "clips": 8,
 *    "layers": [{"name": "patch_embed", "out": 96, "in": 1536, "scale": 0.0159, "zero_point": 128},
 *               ...]}
 *
 * The file is untrusted: its size is bounded (TB_SCALES_MAX_BYTES), and it must describe exactly
 * the model it is loaded with (architecture, count, names and shapes of the layers, in order);
 * each scale a finite number in [1e-30, 1e30], each zero point an integer in [0, 255]. */
#ifndef TB_INT8_SCALES_H
#define TB_INT8_SCALES_H

#include <stdint.h>

#include "../common.h"

#define TB_SCALES_FILE "int8_scales.json"
#define TB_SCALES_MAX_BYTES ((size_t)4 << 20)
#define TB_SCALES_FORMAT "tubelet int8 activation scales"

/* What the file must describe: the model's architecture line and its n layers in order. */
typedef struct {
    const char *arch;
    int n;
    const char *const *name;
    const int64_t *out, *in;
} tb_scales_model;

/* One layer's activation quantisation: x ~ scale (q - zero_point), q in [0, 255]. */
typedef struct {
    float scale;
    int32_t zero_point;
} tb_act_quant;

/* How the scales were estimated (written for the reader; not needed to use them). */
typedef struct {
    double percentile; /* 100: the min and max over every clip; below: percentiles */
    int64_t clips;     /* batches observed */
} tb_scales_meta;

/* 1 if (scale, zero_point) are usable: scale finite in [1e-30, 1e30] as a float, zero_point an
 * integer in [0, 255]. */
int tb_act_quant_valid(float scale, double zero_point);

/* Parses the NUL-terminated text of the file at path into q[0..model->n). Every error names
 * path; unknown keys are warned about through log. */
int tb_scales_parse(const char *text, const char *path, const tb_scales_model *model,
                    tb_act_quant *q, const tb_log *log, tb_err *e);

/* The file's text for q (malloc'd, NUL-terminated), or NULL when out of memory. */
char *tb_scales_to_json(const tb_scales_model *model, const tb_act_quant *q,
                        const tb_scales_meta *meta);

#endif
