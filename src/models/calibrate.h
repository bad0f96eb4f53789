/* Static int8 (docs/precision.md, "Static int8"): the calibration session (tubelet_calib_*,
 * calibrate.c) and the scales' use when a model is loaded in int8. */
#ifndef TB_CALIBRATE_H
#define TB_CALIBRATE_H

#include "model.h"

/* After the weights of an int8 model are packed: the activation scales of dir/int8_scales.json
 * where that file exists (an error naming it if it is unreadable, malformed or made for another
 * model), else dynamic int8, said at the info level. dir NULL: a model without a directory (a
 * built-in architecture, a checkpoint file). Nothing for another precision. */
int tb_model_int8_scales(tubelet_model *m, const char *dir, tb_err *e);
/* 1 if m's int8 layers run with calibrated scales. */
int tb_model_int8_static(const tubelet_model *m);

#endif
