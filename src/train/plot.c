#include "plot.h"
#include "tubelet_io.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <libavcodec/avcodec.h>

/* Training curves: a loss panel (train and validation loss) and, for a classifier, an accuracy
 * panel (validation accuracy on [0, 1]) below it, sharing the epoch axis; each with tick values,
 * a legend and its axis named, under a title. 800 x 600 (400 without the accuracy panel). */
#define PW 800
#define LEFT 120  /* the plot areas' left edge: room for the tick values and the axis name */
#define RIGHT 24
#define TOP 44    /* below the title */
#define HEAD 26   /* a panel's legend row, above its plot area */
#define FOOT 26   /* the epoch tick values below a plot area */
#define XLABEL 34 /* "epoch" under the last panel */
#define PANEL 210 /* a plot area's height */
#define GAP 14

typedef struct {
    const double *v;
    const char *name;
    const uint8_t *color;
} series;

static const uint8_t ink[3] = {40, 40, 40}, grid[3] = {228, 228, 228};

static void dot(uint8_t *img, int h, int x, int y, const uint8_t c[3]) {
    for (int dy = -1; dy <= 1; dy++)
        for (int dx = -1; dx <= 1; dx++) {
            int xx = x + dx, yy = y + dy;
            if (xx >= 0 && xx < PW && yy >= 0 && yy < h) memcpy(img + (yy * PW + xx) * 3, c, 3);
        }
}

static void line(uint8_t *img, int h, int x0, int y0, int x1, int y1, const uint8_t c[3]) {
    int n = abs(x1 - x0) > abs(y1 - y0) ? abs(x1 - x0) : abs(y1 - y0);
    for (int i = 0; i <= n; i++) {
        double t = n ? (double)i / n : 0;
        dot(img, h, (int)lround(x0 + t * (x1 - x0)), (int)lround(y0 + t * (y1 - y0)), c);
    }
}

static void rect(uint8_t *img, int h, int x0, int y0, int x1, int y1, const uint8_t c[3]) {
    for (int y = y0 < 0 ? 0 : y0; y <= y1 && y < h; y++)
        for (int x = x0 < 0 ? 0 : x0; x <= x1 && x < PW; x++) memcpy(img + (y * PW + x) * 3, c, 3);
}

/* A tick step of 1, 2 or 5 times a power of ten giving about `want` intervals over span. */
static double nice_step(double span, int want) {
    const double raw = span / want, p = pow(10, floor(log10(raw))), f = raw / p;
    return (f < 1.5 ? 1 : f < 3.5 ? 2 : f < 7.5 ? 5 : 10) * p;
}

static void tick_label(char *buf, size_t n, double v, double step) {
    int dec = 0; /* the decimals that write the step exactly */
    while (dec < 6 && fabs(step * pow(10, dec) - round(step * pow(10, dec))) > 1e-6) dec++;
    snprintf(buf, n, "%.*f", dec, fabs(v) < step * 1e-6 ? 0.0 : v);
}

/* One panel: plot area (x0, y0)-(x1, y1), values on [lo, hi] with a tick every step, epochs
 * 1..n on the x axis, the series, the legend above it and the axis name at the left. */
static void panel(uint8_t *img, int h, int y0, int y1, const series *sv, int ns, double lo,
                  double hi, double step, int n, const char *yname) {
    const int x0 = LEFT, x1 = PW - RIGHT;
    char buf[32];
    int widest = 0; /* of the tick values: the axis name goes left of them, never over them */
    for (double v = lo; v <= hi + step * 1e-6; v += step) {
        tick_label(buf, sizeof buf, v, step);
        if (tb_text_width(buf, 2) > widest) widest = tb_text_width(buf, 2);
    }
    for (double v = lo; v <= hi + step * 1e-6; v += step) { /* y ticks: grid line and value */
        const int y = y1 - (int)lround((v - lo) / (hi - lo) * (y1 - y0));
        rect(img, h, x0, y, x1, y, grid);
        rect(img, h, x0 - 5, y, x0 - 1, y, ink);
        tick_label(buf, sizeof buf, v, step);
        tb_text_draw(img, PW, h, x0 - 9 - tb_text_width(buf, 2), y - 7, 2, ink, 0, buf);
    }
    const double xstep = n > 1 ? fmax(1, nice_step(n - 1, 8)) : 1;
    for (double e = 1; e <= n + 1e-9; e += xstep) { /* x ticks at epochs */
        const int x = n > 1 ? x0 + (int)lround((e - 1) * (x1 - x0) / (n - 1)) : (x0 + x1) / 2;
        rect(img, h, x, y1 + 1, x, y1 + 5, ink);
        snprintf(buf, sizeof buf, "%.0f", e);
        tb_text_draw(img, PW, h, x - tb_text_width(buf, 2) / 2, y1 + 9, 2, ink, 0, buf);
    }
    rect(img, h, x0, y0, x0, y1, ink); /* axes */
    rect(img, h, x0, y1, x1, y1, ink);
    /* the name reads bottom to top, 18 pixels wide (7 rows and a descender, at scale 2), 8
     * pixels left of the widest tick value */
    int name_x = x0 - 9 - widest - 8 - 18;
    name_x = name_x > 10 ? 10 : name_x < 0 ? 0 : name_x;
    tb_text_draw(img, PW, h, name_x, (y0 + y1) / 2 + tb_text_width(yname, 2) / 2, 2, ink, 1,
                 yname);
    for (int k = 0; k < ns; k++) { /* the series: a line through a dot per epoch */
        int px = 0, py = 0, have = 0;
        for (int i = 0; i < n; i++) {
            const double v = sv[k].v[i];
            if (!isfinite(v)) continue;
            const double f = (fmin(fmax(v, lo), hi) - lo) / (hi - lo);
            const int x = n > 1 ? x0 + i * (x1 - x0) / (n - 1) : (x0 + x1) / 2;
            const int y = y1 - (int)lround(f * (y1 - y0));
            if (have) line(img, h, px, py, x, y, sv[k].color);
            dot(img, h, x, y, sv[k].color);
            px = x, py = y, have = 1;
        }
    }
    int lx = x1; /* legend, right-aligned above the plot area: a short line and the name */
    for (int k = ns - 1; k >= 0; k--) {
        lx -= tb_text_width(sv[k].name, 2);
        tb_text_draw(img, PW, h, lx, y0 - HEAD + 6, 2, ink, 0, sv[k].name);
        rect(img, h, lx - 28, y0 - HEAD + 11, lx - 8, y0 - HEAD + 14, sv[k].color);
        lx -= 28 + 24;
    }
}

/* The loss axis: from a tick at or below the smallest value to one at or above the largest. */
static void loss_range(const double *a, const double *b, int n, double *lo, double *hi,
                       double *step) {
    double mn = INFINITY, mx = -INFINITY;
    for (int i = 0; i < n; i++) {
        if (isfinite(a[i])) mn = fmin(mn, a[i]), mx = fmax(mx, a[i]);
        if (isfinite(b[i])) mn = fmin(mn, b[i]), mx = fmax(mx, b[i]);
    }
    if (!(mn <= mx)) mn = 0, mx = 1;
    if (mx - mn < 1e-6 * fmax(1, fabs(mx))) /* flat: a band around the value */
        mn -= 0.5 * fmax(1e-3, fabs(mn)), mx += 0.5 * fmax(1e-3, fabs(mx));
    *step = nice_step(mx - mn, 5);
    *lo = floor(mn / *step) * *step, *hi = ceil(mx / *step) * *step;
    if (*hi <= *lo) *hi = *lo + *step;
}

uint8_t *tb_plot_render(const double *tl, const double *vl, const double *va, int n, int *w,
                        int *h) {
    static const uint8_t blue[3] = {31, 119, 180}, orange[3] = {255, 127, 14},
                         green[3] = {44, 160, 44};
    const int two = va != NULL;
    const int PH = TOP + HEAD + PANEL + FOOT + (two ? GAP + HEAD + PANEL + FOOT : 0) + XLABEL;
    uint8_t *img = malloc((size_t)PW * PH * 3);
    if (!img) return NULL;
    memset(img, 255, (size_t)PW * PH * 3);
    const char *title = two ? "Training curves" : "Pretraining curves";
    tb_text_draw(img, PW, PH, (PW - tb_text_width(title, 3)) / 2, 12, 3, ink, 0, title);
    const char *vname = two ? "validation loss" : "validation reconstruction loss";
    const series loss[2] = {{tl, "train loss", blue}, {vl, vname, orange}};
    double lo, hi, step;
    loss_range(tl, vl, n, &lo, &hi, &step);
    int y0 = TOP + HEAD;
    panel(img, PH, y0, y0 + PANEL, loss, 2, lo, hi, step, n, "loss");
    if (two) {
        const series acc = {va, "validation accuracy", green};
        y0 += PANEL + FOOT + GAP + HEAD;
        panel(img, PH, y0, y0 + PANEL, &acc, 1, 0, 1, 0.25, n, "accuracy");
    }
    const char *xname = "epoch";
    tb_text_draw(img, PW, PH, LEFT + (PW - RIGHT - LEFT - tb_text_width(xname, 2)) / 2,
                 PH - XLABEL + 6, 2, ink, 0, xname);
    *w = PW, *h = PH;
    return img;
}

int tb_plot_curves(const char *path, const double *tl, const double *vl, const double *va, int n,
                   tb_err *e) {
    int w, h;
    uint8_t *img = tb_plot_render(tl, vl, va, n, &w, &h);
    if (!img) return tb_fail(e, TUBELET_ERR_MEMORY, "out of memory");
    int rc = tb_write_png(path, img, w, h, e);
    free(img);
    return rc;
}

int tb_write_png(const char *path, const uint8_t *img, int w, int h, tb_err *e) {
    int rc = TUBELET_OK;
    const AVCodec *codec = avcodec_find_encoder(AV_CODEC_ID_PNG);
    AVCodecContext *ctx = codec ? avcodec_alloc_context3(codec) : NULL;
    AVFrame *f = av_frame_alloc();
    AVPacket *pkt = av_packet_alloc();
    if (!ctx || !f || !pkt) {
        rc = tb_fail(e, TUBELET_ERR_UNSUPPORTED, "%s: FFmpeg has no PNG encoder", path);
        goto done;
    }
    ctx->width = w, ctx->height = h, ctx->pix_fmt = AV_PIX_FMT_RGB24;
    ctx->time_base = (AVRational){1, 1};
    f->width = w, f->height = h, f->format = AV_PIX_FMT_RGB24;
    if (avcodec_open2(ctx, codec, NULL) < 0 || av_frame_get_buffer(f, 0) < 0) {
        rc = tb_fail(e, TUBELET_ERR_UNSUPPORTED, "%s: cannot start the PNG encoder", path);
        goto done;
    }
    for (int y = 0; y < h; y++) memcpy(f->data[0] + y * f->linesize[0], img + y * w * 3, w * 3);
    if (avcodec_send_frame(ctx, f) < 0 || avcodec_receive_packet(ctx, pkt) < 0) {
        rc = tb_fail(e, TUBELET_ERR_UNSUPPORTED, "%s: PNG encoding failed", path);
        goto done;
    }
    rc = tb_atomic_write(path, pkt->data, (size_t)pkt->size, e);
done:
    av_packet_free(&pkt);
    av_frame_free(&f);
    avcodec_free_context(&ctx);
    return rc;
}

/* Public (tubelet_io.h). */
int tubelet_png_write(const char *path, const uint8_t *rgb, int w, int h, char *err,
                      size_t errlen) {
    tb_err e = {{0}};
    int rc = tb_write_png(path, rgb, w, h, &e);
    return tb_err_out(rc, &e, err, errlen);
}

int tubelet_png_text(uint8_t *rgb, int w, int h, int x, int y, int scale, const uint8_t color[3],
                     const char *text) {
    if (!text || scale < 1) return 0;
    return rgb ? tb_text_draw(rgb, w, h, x, y, scale, color, 0, text) : tb_text_width(text, scale);
}
