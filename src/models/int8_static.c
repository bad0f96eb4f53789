/* Static int8 at load (docs/precision.md, "Static int8"): an int8 model loaded from a directory
 * with int8_scales.json (io/int8_scales.c) takes the calibrated activation scales instead of
 * measuring each call's range. Below model.c, which calls it: it calls nothing of model.c (the
 * calibration session, calibrate.c, runs models and so sits above both). */
#include "int8_static.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "family.h"

/* ---- what int8_scales.json must describe ---- */


void tb_layer_list_free(tb_layer_list *l) { free(l->name), free(l->out), free(l->in); }

/* The packed layers of m and its architecture line (family, variant and sizes). */
int tb_layer_list_of(const tubelet_model *m, tb_layer_list *l, tb_err *e) {
    const tb_config *c = &m->cfg; /* what the model's info reports, read here: model.c calls us */
    snprintf(l->arch, sizeof l->arch, "%s %s (%s), hidden %d, %d layers + %d temporal, %d heads, "
             "mlp %d, %d labels, patch %dx%dx%d, %d channels", tb_family_name(c->family),
             m->fam->variant(c), c->model_type, c->hidden, c->layers, tb_n_blocks(c) - c->layers,
             c->heads, c->intermediate, c->num_labels, c->tubelet_t, c->patch_h, c->patch_w,
             c->num_channels);
    const int n = TB_RUN(&m->be, pack_count, m->pack);
    l->name = calloc((size_t)n + 1, sizeof *l->name);
    l->out = calloc((size_t)n + 1, sizeof *l->out), l->in = calloc((size_t)n + 1, sizeof *l->in);
    if (!l->name || !l->out || !l->in) {
        tb_layer_list_free(l);
        return tb_fail(e, TUBELET_ERR_MEMORY, "%s: out of memory", m->source);
    }
    for (int i = 0; i < n; i++)
        l->name[i] = TB_RUN(&m->be, pack_layer, m->pack, i, &l->out[i], &l->in[i]);
    l->sm = (tb_scales_model){l->arch, n, l->name, l->out, l->in};
    return TUBELET_OK;
}

/* ---- at load ---- */

int tb_model_int8_static(const tubelet_model *m) {
    return m->packed && m->precision == TB_PREC_INT8 && TB_RUN(&m->be, pack_is_static, m->pack);
}

static void say_dynamic(const tubelet_model *m, const char *why) {
    tb_info(&m->log, "%s: %s: int8 activations are quantised per call from their own range "
            "(dynamic int8); tubelet calibrate writes calibrated scales (static int8, "
            "docs/precision.md)", m->source, why);
}

int tb_model_int8_scales(tubelet_model *m, const char *dir, tb_err *e) {
    if (!m->packed || m->precision != TB_PREC_INT8) return TUBELET_OK;
    if (!dir) {
        say_dynamic(m, "no model directory, so no " TB_SCALES_FILE);
        return TUBELET_OK;
    }
    char path[1200];
    snprintf(path, sizeof path, "%s/%s", dir, TB_SCALES_FILE);
    struct stat st;
    if (lstat(path, &st) != 0 && errno == ENOENT) {
        say_dynamic(m, "no " TB_SCALES_FILE " in the model directory");
        return TUBELET_OK;
    }
    char *text = NULL;
    tb_layer_list l = {0};
    tb_act_quant *q = NULL;
    int rc = tb_read_file(path, &text, NULL, TB_SCALES_MAX_BYTES, e);
    if (!rc) rc = tb_layer_list_of(m, &l, e);
    if (!rc && !(q = calloc((size_t)l.sm.n + 1, sizeof *q)))
        rc = tb_fail(e, TUBELET_ERR_MEMORY, "%s: out of memory", path);
    if (!rc) rc = tb_scales_parse(text, path, &l.sm, q, &m->log, e);
    for (int i = 0; !rc && i < l.sm.n; i++)
        TB_RUN(&m->be, pack_set_act, m->pack, i, q[i].scale, q[i].zero_point);
    if (!rc) tb_info(&m->log, "%s: static int8: activation scales from %s", m->source, path);
    free(text), free(q);
    tb_layer_list_free(&l);
    return rc;
}

