/* Static int8 (docs/precision.md, "Static int8"): the scales' use when a model is loaded in int8
 * (int8_static.c), and the layer list the calibration session (calibrate.c) writes. */
#ifndef TB_INT8_STATIC_H
#define TB_INT8_STATIC_H

#include "../io/int8_scales.h"
#include "model.h"

/* What int8_scales.json must describe: the packed layers of a model and its architecture line. */
typedef struct {
    tb_scales_model sm;
    const char **name;
    int64_t *out, *in;
    char arch[320];
} tb_layer_list;
/* The packed layers of m and its architecture line (family, variant and sizes). */
int tb_layer_list_of(const tubelet_model *m, tb_layer_list *l, tb_err *e);
void tb_layer_list_free(tb_layer_list *l);

/* After the weights of an int8 model are packed: the activation scales of dir/int8_scales.json
 * where that file exists (an error naming it if it is unreadable, malformed or made for another
 * model), else dynamic int8, said at the info level. dir NULL: a model without a directory (a
 * built-in architecture, a checkpoint file). Nothing for another precision. */
int tb_model_int8_scales(tubelet_model *m, const char *dir, tb_err *e);
/* 1 if m's int8 layers run with calibrated scales. */
int tb_model_int8_static(const tubelet_model *m);

#endif
