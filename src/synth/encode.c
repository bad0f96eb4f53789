/* Encoding a rendered clip into a video file with FFmpeg's libraries, deterministically:
 * one encoder thread, bit-exact flags on the muxer and the encoder (no version strings, no
 * timestamps of the wall clock), our own integer RGB -> YUV conversion (no swscale CPU paths),
 * constant quantiser, every frame coded on its own (intra only). H.264: libx264 in .mp4; x264's
 * version/options SEI is dropped with the filter_units bitstream filter (where this FFmpeg has
 * it), which also keeps the files smaller. MJPEG: FFmpeg's own encoder in .avi. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <libavcodec/avcodec.h>
#include <libavcodec/bsf.h>
#include <libavformat/avformat.h>
#include <libavutil/log.h>
#include <libavutil/opt.h>

#include "synth.h"

#define H264_QP 30    /* constant QP of every (intra) frame */
#define MJPEG_Q 8     /* MJPEG qscale */

const char *tb_synth_codec_name(tb_synth_codec c) {
    return c == TB_SYNTH_MJPEG ? "mjpeg" : c == TB_SYNTH_H264 ? "h264" : NULL;
}

const char *tb_synth_codec_ext(tb_synth_codec c) {
    return c == TB_SYNTH_MJPEG ? "avi" : c == TB_SYNTH_H264 ? "mp4" : NULL;
}

int tb_synth_codec_from_name(const char *name) {
    if (!name) return -1;
    if (!strcmp(name, "h264")) return TB_SYNTH_H264;
    if (!strcmp(name, "mjpeg")) return TB_SYNTH_MJPEG;
    return -1;
}

int tb_synth_codec_check(tb_synth_codec c, tb_err *e) {
    if (!tb_synth_codec_name(c)) return tb_fail(e, TUBELET_ERR_ARG, "synth: unknown codec %d", (int)c);
    const char *name = c == TB_SYNTH_H264 ? "libx264" : "mjpeg";
    if (!avcodec_find_encoder_by_name(name))
        return tb_fail(e, TUBELET_ERR_UNSUPPORTED,
                       "synth: this FFmpeg has no %s encoder (codec mjpeg needs only FFmpeg's own)",
                       name);
    return TUBELET_OK;
}

/* BT.601 RGB -> YUV 4:2:0 in 16-bit fixed point; chroma from the 2x2 average. full_range: JPEG
 * levels (0..255) else video levels (Y 16..235, C 16..240). */
static void rgb_to_yuv420(const uint8_t *rgb, int S, AVFrame *f, int full) {
    /* coefficients x 65536; limited range ones carry the 219/255 and 224/255 factors */
    const int yr = full ? 19595 : 16829, yg = full ? 38470 : 33039, yb = full ? 7471 : 6416;
    const int ur = full ? -11059 : -9714, ug = full ? -21709 : -19070, ub = full ? 32768 : 28784;
    const int vr = full ? 32768 : 28784, vg = full ? -27439 : -24103, vb = full ? -5329 : -4681;
    const int yoff = full ? 0 : 16;
    for (int y = 0; y < S; y++) {
        const uint8_t *p = rgb + (size_t)y * S * 3;
        uint8_t *o = f->data[0] + (size_t)y * f->linesize[0];
        for (int x = 0; x < S; x++, p += 3)
            o[x] = (uint8_t)(yoff + ((yr * p[0] + yg * p[1] + yb * p[2] + 32768) >> 16));
    }
    for (int y = 0; y < S / 2; y++) {
        uint8_t *ou = f->data[1] + (size_t)y * f->linesize[1];
        uint8_t *ov = f->data[2] + (size_t)y * f->linesize[2];
        for (int x = 0; x < S / 2; x++) {
            const uint8_t *a = rgb + ((size_t)(2 * y) * S + 2 * x) * 3, *b = a + (size_t)S * 3;
            int r = a[0] + a[3] + b[0] + b[3], g = a[1] + a[4] + b[1] + b[4];
            int bl = a[2] + a[5] + b[2] + b[5];
            /* sums of four: divide by 4 inside the rounding shift (>> 18); the + (128 << 18) is
             * the chroma offset, added before the shift so that negatives round the same way */
            int u = (ur * r + ug * g + ub * bl + (128 << 18) + (1 << 17)) >> 18;
            int v = (vr * r + vg * g + vb * bl + (128 << 18) + (1 << 17)) >> 18;
            ou[x] = (uint8_t)(u > 255 ? 255 : u);  /* full-range 255.5 rounds up */
            ov[x] = (uint8_t)(v > 255 ? 255 : v);
        }
    }
}

typedef struct {
    const char *path;
    AVFormatContext *oc;
    AVCodecContext *cc;
    AVStream *st;
    AVBSFContext *bsf;
    AVPacket *pkt;
    AVFrame *frame;
    int created;  /* path was created by us (and is removed on failure) */
} enc_t;

static int av_fail(tb_err *e, int code, const char *path, const char *what, int averr) {
    char buf[AV_ERROR_MAX_STRING_SIZE] = {0};
    av_strerror(averr, buf, sizeof buf);
    return tb_fail(e, code, "%s: %s: %s", path, what, buf);
}

/* Writes one packet (owned by the caller's pkt, unreferenced here) through the optional BSF. */
static int write_packet(enc_t *x, AVPacket *pkt, tb_err *e) {
    int r;
    if (!x->bsf) {
        r = av_interleaved_write_frame(x->oc, pkt);
        return r < 0 ? av_fail(e, TUBELET_ERR_IO, x->path, "cannot write a packet", r) : 0;
    }
    r = av_bsf_send_packet(x->bsf, pkt); /* pkt NULL = flush */
    if (r < 0) return av_fail(e, TUBELET_ERR_FORMAT, x->path, "bitstream filter failed", r);
    while ((r = av_bsf_receive_packet(x->bsf, x->pkt)) >= 0) {
        x->pkt->stream_index = x->st->index;
        r = av_interleaved_write_frame(x->oc, x->pkt);
        if (r < 0) return av_fail(e, TUBELET_ERR_IO, x->path, "cannot write a packet", r);
    }
    if (r != AVERROR(EAGAIN) && r != AVERROR_EOF)
        return av_fail(e, TUBELET_ERR_FORMAT, x->path, "bitstream filter failed", r);
    return 0;
}

/* Sends frame (NULL = flush) and writes every packet the encoder returns. */
static int encode_frame(enc_t *x, AVFrame *frame, tb_err *e) {
    int r = avcodec_send_frame(x->cc, frame);
    if (r < 0) return av_fail(e, TUBELET_ERR_FORMAT, x->path, "encoder refused a frame", r);
    AVPacket *pkt = av_packet_alloc();
    if (!pkt) return tb_fail(e, TUBELET_ERR_MEMORY, "%s: out of memory", x->path);
    int rc = 0;
    while ((r = avcodec_receive_packet(x->cc, pkt)) >= 0) {
        pkt->stream_index = x->st->index;
        av_packet_rescale_ts(pkt, x->cc->time_base, x->st->time_base);
        rc = write_packet(x, pkt, e);
        av_packet_unref(pkt);
        if (rc) break;
    }
    if (!rc && r != AVERROR(EAGAIN) && r != AVERROR_EOF)
        rc = av_fail(e, TUBELET_ERR_FORMAT, x->path, "encoder failed", r);
    if (!rc && !frame && x->bsf) rc = write_packet(x, NULL, e);
    av_packet_free(&pkt);
    return rc;
}

static int open_bsf(enc_t *x, tb_err *e) {
    const AVBitStreamFilter *f = av_bsf_get_by_name("filter_units");
    if (!f) return 0; /* an FFmpeg without it keeps the SEI: still deterministic */
    int r = av_bsf_alloc(f, &x->bsf);
    if (r < 0) return av_fail(e, TUBELET_ERR_MEMORY, x->path, "bitstream filter", r);
    if ((r = avcodec_parameters_copy(x->bsf->par_in, x->st->codecpar)) < 0 ||
        (r = av_opt_set(x->bsf->priv_data, "remove_types", "6", 0)) < 0)
        return av_fail(e, TUBELET_ERR_FORMAT, x->path, "bitstream filter setup", r);
    x->bsf->time_base_in = x->st->time_base;
    if ((r = av_bsf_init(x->bsf)) < 0)
        return av_fail(e, TUBELET_ERR_FORMAT, x->path, "bitstream filter setup", r);
    return 0;
}

static int encode(enc_t *x, const uint8_t *rgb, int frames, int size, int fps,
                  tb_synth_codec codec, tb_err *e) {
    const char *path = x->path;
    int h264 = codec == TB_SYNTH_H264, r;
    const AVCodec *enc = avcodec_find_encoder_by_name(h264 ? "libx264" : "mjpeg");
    if (!enc) return tb_prefix(e, tb_synth_codec_check(codec, e), "%s: ", path);
    r = avformat_alloc_output_context2(&x->oc, NULL, h264 ? "mp4" : "avi", path);
    if (r < 0 || !x->oc) return av_fail(e, TUBELET_ERR_UNSUPPORTED, path, "no muxer", r);
    x->oc->flags |= AVFMT_FLAG_BITEXACT;
    if (!(x->st = avformat_new_stream(x->oc, NULL)) || !(x->cc = avcodec_alloc_context3(enc)) ||
        !(x->frame = av_frame_alloc()) || !(x->pkt = av_packet_alloc()))
        return tb_fail(e, TUBELET_ERR_MEMORY, "%s: out of memory", path);
    AVCodecContext *cc = x->cc;
    cc->width = cc->height = size;
    cc->time_base = (AVRational){1, fps};
    cc->framerate = (AVRational){fps, 1};
    cc->sample_aspect_ratio = (AVRational){1, 1};
    cc->pix_fmt = h264 ? AV_PIX_FMT_YUV420P : AV_PIX_FMT_YUVJ420P;
    cc->color_range = h264 ? AVCOL_RANGE_MPEG : AVCOL_RANGE_JPEG;
    cc->colorspace = AVCOL_SPC_SMPTE170M;
    cc->color_primaries = AVCOL_PRI_SMPTE170M;
    cc->color_trc = AVCOL_TRC_SMPTE170M;
    cc->thread_count = 1;
    cc->flags |= AV_CODEC_FLAG_BITEXACT;
    if (x->oc->oformat->flags & AVFMT_GLOBALHEADER) cc->flags |= AV_CODEC_FLAG_GLOBAL_HEADER;
    if (h264) {
        char params[256];
        /* Every frame an IDR frame, coded on its own at one constant QP: the decoded frames of a
         * clip played backwards are exactly the decoded frames played backwards, so the coding
         * cannot mark where a clip starts (a P-frame GOP would: its quality drifts along the
         * file; see docs/synth.md). */
        snprintf(params, sizeof params,
                 "keyint=1:min-keyint=1:scenecut=0:bframes=0:qp=%d:ipratio=1.0:aq-mode=0:"
                 "threads=1:sliced-threads=0:lookahead-threads=1",
                 H264_QP);
        cc->gop_size = 1;
        cc->max_b_frames = 0;
        if ((r = av_opt_set(cc->priv_data, "preset", "veryfast", 0)) < 0 ||
            (r = av_opt_set(cc->priv_data, "x264-params", params, 0)) < 0)
            return av_fail(e, TUBELET_ERR_UNSUPPORTED, path, "libx264 options", r);
    } else {
        cc->flags |= AV_CODEC_FLAG_QSCALE;
        cc->global_quality = FF_QP2LAMBDA * MJPEG_Q;
    }
    if ((r = avcodec_open2(cc, enc, NULL)) < 0)
        return av_fail(e, TUBELET_ERR_UNSUPPORTED, path, "cannot open the encoder", r);
    if ((r = avcodec_parameters_from_context(x->st->codecpar, cc)) < 0)
        return av_fail(e, TUBELET_ERR_FORMAT, path, "stream parameters", r);
    x->st->time_base = cc->time_base;
    x->st->avg_frame_rate = cc->framerate;
    if (h264 && (r = open_bsf(x, e))) return r;
    if ((r = avio_open(&x->oc->pb, path, AVIO_FLAG_WRITE)) < 0)
        return av_fail(e, TUBELET_ERR_IO, path, "cannot create", r);
    x->created = 1;
    if ((r = avformat_write_header(x->oc, NULL)) < 0)
        return av_fail(e, TUBELET_ERR_IO, path, "cannot write the header", r);

    AVFrame *f = x->frame;
    f->format = cc->pix_fmt;
    f->width = f->height = size;
    f->color_range = cc->color_range;
    f->colorspace = cc->colorspace;
    if ((r = av_frame_get_buffer(f, 0)) < 0)
        return av_fail(e, TUBELET_ERR_MEMORY, path, "frame buffer", r);
    size_t plane = (size_t)size * size * 3;
    for (int t = 0; t < frames; t++) {
        if ((r = av_frame_make_writable(f)) < 0)
            return av_fail(e, TUBELET_ERR_MEMORY, path, "frame buffer", r);
        rgb_to_yuv420(rgb + (size_t)t * plane, size, f, !h264);
        f->pts = t;
        if (!h264) f->quality = cc->global_quality;
        if ((r = encode_frame(x, f, e))) return r;
    }
    if ((r = encode_frame(x, NULL, e))) return r;
    if ((r = av_write_trailer(x->oc)) < 0)
        return av_fail(e, TUBELET_ERR_IO, path, "cannot finish the file", r);
    if ((r = avio_closep(&x->oc->pb)) < 0)
        return av_fail(e, TUBELET_ERR_IO, path, "cannot close", r);
    return TUBELET_OK;
}

int tb_synth_encode(const char *path, const uint8_t *rgb, int frames, int size, int fps,
                    tb_synth_codec codec, tb_err *e) {
    if (!path || !rgb) return tb_fail(e, TUBELET_ERR_ARG, "synth encode: no path or no frames");
    if (frames < 1 || frames > 100000 || size < 16 || size > 4096 || size % 2 || fps < 1 ||
        fps > 1000)
        return tb_fail(e, TUBELET_ERR_ARG,
                       "%s: cannot encode %d frames of %dx%d at %d fps (need an even size in "
                       "[16, 4096] and fps in [1, 1000])", path, frames, size, size, fps);
    if (!tb_synth_codec_name(codec))
        return tb_fail(e, TUBELET_ERR_ARG, "%s: unknown codec %d", path, (int)codec);
    /* FFmpeg logs to stderr by default; the library must not print (as src/video does). */
    if (av_log_get_level() == AV_LOG_INFO) av_log_set_level(AV_LOG_QUIET);
    enc_t x;
    memset(&x, 0, sizeof x);
    x.path = path;
    int rc = encode(&x, rgb, frames, size, fps, codec, e);
    if (x.oc && x.oc->pb) avio_closep(&x.oc->pb);
    av_bsf_free(&x.bsf);
    avcodec_free_context(&x.cc);
    av_frame_free(&x.frame);
    av_packet_free(&x.pkt);
    avformat_free_context(x.oc);
    if (rc && x.created) remove(path); /* no partial file */
    return rc;
}
