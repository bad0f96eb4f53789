/* Training curves as a PNG (encoded with FFmpeg's PNG encoder), one point per epoch, under a
 * title: a loss panel (train loss blue, validation loss orange) and, when val_acc is not NULL, an
 * accuracy panel below it (validation accuracy green, on [0, 1]); tick values, legends, axis names.
 * Pretraining passes val_acc NULL: it has no accuracy. */
#ifndef TB_PLOT_H
#define TB_PLOT_H

#include "../common.h"

int tb_plot_curves(const char *path, const double *train_loss, const double *val_loss,
                   const double *val_acc, int n, tb_err *e);
/* The same picture in memory: an RGB image (*h, *w, 3) to free, NULL when out of memory. */
uint8_t *tb_plot_render(const double *train_loss, const double *val_loss, const double *val_acc,
                        int n, int *w, int *h);
/* Text in the 5 x 7 bitmap font (font.c), magnified scale times, into an RGB image (h, w, 3):
 * top-left corner at (x, y), or with vertical set read bottom to top from (x, y) upwards; clipped
 * to the image; characters outside ASCII 32-126 drawn as '?'. Returns the width in pixels. */
int tb_text_draw(uint8_t *img, int w, int h, int x, int y, int scale, const uint8_t color[3],
                 int vertical, const char *s);
int tb_text_width(const char *s, int scale);
/* An RGB image (h, w, 3) as a PNG, written to path.tmp and renamed (nothing left on error). */
int tb_write_png(const char *path, const uint8_t *rgb, int w, int h, tb_err *e);

#endif
