#include "plot.h"
#include "tubelet_io.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <libavcodec/avcodec.h>

#define PW 640
#define PH 360
#define MARGIN 40

static void dot(uint8_t *img, int x, int y, const uint8_t c[3]) {
    for (int dy = -1; dy <= 1; dy++)
        for (int dx = -1; dx <= 1; dx++) {
            int xx = x + dx, yy = y + dy;
            if (xx >= 0 && xx < PW && yy >= 0 && yy < PH) memcpy(img + (yy * PW + xx) * 3, c, 3);
        }
}

static void line(uint8_t *img, int x0, int y0, int x1, int y1, const uint8_t c[3]) {
    int n = abs(x1 - x0) > abs(y1 - y0) ? abs(x1 - x0) : abs(y1 - y0);
    for (int i = 0; i <= n; i++) {
        double t = n ? (double)i / n : 0;
        dot(img, (int)lround(x0 + t * (x1 - x0)), (int)lround(y0 + t * (y1 - y0)), c);
    }
}

static void curve(uint8_t *img, const double *v, int n, double lo, double hi, const uint8_t c[3]) {
    int px = 0, py = 0;
    for (int i = 0; i < n; i++) {
        if (!isfinite(v[i])) continue;
        int x = MARGIN + (n > 1 ? i * (PW - 2 * MARGIN) / (n - 1) : (PW - 2 * MARGIN) / 2);
        int y = PH - MARGIN - (int)lround((v[i] - lo) / (hi - lo) * (PH - 2 * MARGIN));
        if (i) line(img, px, py, x, y, c);
        dot(img, x, y, c);
        px = x, py = y;
    }
}

int tb_plot_curves(const char *path, const double *tl, const double *vl, const double *va, int n,
                   tb_err *e) {
    static const uint8_t axis[3] = {60, 60, 60}, grid[3] = {225, 225, 225},
                         blue[3] = {31, 119, 180}, orange[3] = {255, 127, 14},
                         green[3] = {44, 160, 44};
    uint8_t *img = malloc(PW * PH * 3);
    if (!img) return tb_fail(e, TUBELET_ERR_MEMORY, "out of memory");
    memset(img, 255, PW * PH * 3);
    for (int k = 0; k <= 4; k++) { /* quarter lines: accuracy 0, .25, .5, .75, 1 */
        int y = PH - MARGIN - k * (PH - 2 * MARGIN) / 4;
        line(img, MARGIN, y, PW - MARGIN, y, grid);
    }
    line(img, MARGIN, PH - MARGIN, PW - MARGIN, PH - MARGIN, axis);
    line(img, MARGIN, MARGIN, MARGIN, PH - MARGIN, axis);
    double hi = 0;
    for (int i = 0; i < n; i++) {
        if (isfinite(tl[i]) && tl[i] > hi) hi = tl[i];
        if (isfinite(vl[i]) && vl[i] > hi) hi = vl[i];
    }
    if (hi <= 0) hi = 1;
    curve(img, tl, n, 0, hi * 1.05, blue);
    curve(img, vl, n, 0, hi * 1.05, orange);
    curve(img, va, n, 0, 1, green);
    int rc = tb_write_png(path, img, PW, PH, e);
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
