/* Training curves as a PNG (encoded with FFmpeg's PNG encoder): train loss (blue), validation
 * loss (orange) on a shared axis, validation accuracy (green) on [0, 1], one point per epoch. */
#ifndef TB_PLOT_H
#define TB_PLOT_H

#include "../common.h"

int tb_plot_curves(const char *path, const double *train_loss, const double *val_loss,
                   const double *val_acc, int n, tb_err *e);
/* An RGB image (h, w, 3) as a PNG, written to path.tmp and renamed (nothing left on error). */
int tb_write_png(const char *path, const uint8_t *rgb, int w, int h, tb_err *e);

#endif
