/* Decoding with FFmpeg's libraries: open + exact frame index, frame-accurate decode of a list of
 * indices (seeking over gaps), RGB24 conversion as torchcodec does it, rotation, streaming.
 *
 * Frame numbering: a demux-only scan of the chosen stream's packets collects their timestamps
 * (pts, else dts) and keyframe flags; sorted by pts, position i is frame i. A decoded frame is
 * placed by looking its pts up in that table, so frame numbers stay right across seeks and
 * B-frame reordering. When timestamps are missing or repeat, frames are numbered by counting
 * decoder output from the start and only rewinding is used. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/display.h>
#include <libavutil/imgutils.h>
#include <libavutil/log.h>
#include <libavutil/pixdesc.h>
#include <libswscale/swscale.h>

#include "video.h"

#define MAX_SIDE 16384
#define SEEK_GAP 16   /* frames decoded through rather than seeking over */
#define LIVE_BUFFER (1 << 20)   /* bytes: a live source's probe and UDP ring (open_input) */

typedef struct {
    int64_t pts;
    int64_t seek;   /* where a seek to this packet aims: min(pts, dts) */
    int64_t dur;
    int key;
} pkt_entry;

struct tb_video {
    char path[1024];          /* the file, or the memory source's name: for messages */
    const uint8_t *mem;       /* memory source (NULL: path is a file) */
    size_t mem_size;
    int64_t mem_pos;
    AVIOContext *avio;        /* custom I/O over mem */
    tb_video_src src;         /* a URL source: its url, protocols, format, interrupt */
    int read_err;             /* what ended the input (AVERROR_EOF, or a read error) */
    tb_video_params params;
    AVFormatContext *fmt;
    AVFormatContext *opening; /* fmt while avformat_open_input has it (src_interrupt's bytes) */
    AVCodecContext *dec;
    const AVCodec *codec;
    int si;                   /* stream index */
    AVRational tb;            /* stream time base */
    AVPacket *pkt;
    AVFrame *frame;
    int have_frame;           /* frame holds the decoder's last output, number pos */
    int64_t since_seek;       /* frames out of the decoder since the last seek or rewind */
    int64_t pos;              /* number of the last frame out of the decoder, -1 before the first */
    int input_eof, dec_eof;   /* demuxer exhausted / decoder fully drained */
    int pause, paused;        /* tb_video_pause asked / done: the demuxer handed out what it held */
    /* index */
    int64_t n;                /* frames in the index */
    int64_t *pts;             /* sorted presentation timestamps, n of them */
    uint8_t *key;             /* keyframe flags in the same order */
    int64_t *seek_ts;         /* the timestamps a seek to each frame aims at: its packet's
                               * min(pts, dts), as MPEG-TS seeks by dts (same order) */
    int64_t first_ts;         /* the smallest timestamp of any packet: a rewind aims there */
    int pts_map;              /* 1: decoded frames are numbered by their pts */
    uint8_t *want;            /* during tb_video_decode: frames asked for (n of them), else NULL */
    int no_skip;              /* a retry: decode every frame, as without `want` */
    int stop;                 /* a bound of params ended the decoding (STOP_*): stop_fail says */
    int stop_w, stop_h;       /* STOP_SIDE: the size seen */
    /* conversion */
    struct SwsContext *sws;
    int sws_w, sws_h, sws_fmt, sws_cs, sws_range;
    uint8_t *conv;            /* RGB24 at coded size, conv_ls bytes per row */
    int conv_ls;
    int conv_w, conv_h;
    tb_video_info info;
    tb_video_stats stats;
    /* streaming */
    int st_active, st_done;
    tb_stream_params sp;
    int64_t st_window;        /* next window number */
    uint8_t *st_buf;          /* the current window's frames */
    int64_t st_prev_first;    /* first frame of the window in st_buf, -1 = none */
    int st_prev_real;
};

tb_video_params tb_video_default_params(void) {
    tb_video_params p;
    memset(&p, 0, sizeof p);
    return p;
}

static void quiet_ffmpeg(void) {
    /* FFmpeg logs to stderr by default; the library must not print. A program that chose its own
     * level keeps it. */
    if (av_log_get_level() == AV_LOG_INFO) av_log_set_level(AV_LOG_QUIET);
}

enum { STOP_NONE, STOP_SIDE, STOP_FRAMES, STOP_INTERRUPT };

/* The error for the bound that stopped the decoding (v->stop). */
static int stop_fail(const tb_video *v, tb_err *e) {
    if (v->stop == STOP_SIDE)
        return tb_fail(e, TUBELET_ERR_UNSUPPORTED, "%s: frames of %dx%d, above the limit of %d "
                       "pixels a side", v->path, v->stop_w, v->stop_h, v->params.max_side);
    if (v->stop == STOP_FRAMES)
        return tb_fail(e, TUBELET_ERR_UNSUPPORTED, "%s: more than %lld frames, the limit",
                       v->path, (long long)v->params.max_frames);
    return tb_fail(e, TUBELET_ERR_IO, "%s: decoding interrupted", v->path);
}

/* Whether a bound of v->params ends the decoding here (sets v->stop): the interrupt, a frame
 * size (w x h, after a sequence header or a decoded frame) above max_side, or more frames
 * decoded than max_frames. */
static int over_bounds(tb_video *v, int w, int h) {
    const tb_video_params *p = &v->params;
    if (p->interrupt && p->interrupt(p->interrupt_user)) v->stop = STOP_INTERRUPT;
    else if (p->max_side > 0 && (w > p->max_side || h > p->max_side))
        v->stop = STOP_SIDE, v->stop_w = w, v->stop_h = h;
    else if (p->max_frames > 0 && p->no_index && v->stats.frames_decoded > p->max_frames)
        v->stop = STOP_FRAMES; /* with an index, open counted them */
    return v->stop != STOP_NONE;
}

static int av_fail(tb_err *e, int code, const char *path, const char *what, int averr) {
    char buf[256];
    av_strerror(averr, buf, sizeof buf);
    return tb_fail(e, code, "%s: %s: %s", path, what, buf);
}

/* ------------------------------------------------------------------ open */

/* Custom I/O over a caller's buffer: read and seek callbacks, no protocol, no file. */
static int mem_read(void *opaque, uint8_t *buf, int size) {
    tb_video *v = opaque;
    if (v->mem_pos >= (int64_t)v->mem_size) return AVERROR_EOF;
    int64_t left = (int64_t)v->mem_size - v->mem_pos;
    int n = left < size ? (int)left : size;
    memcpy(buf, v->mem + v->mem_pos, (size_t)n);
    v->mem_pos += n;
    return n;
}

static int64_t mem_seek(void *opaque, int64_t offset, int whence) {
    tb_video *v = opaque;
    int64_t base;
    switch (whence & ~AVSEEK_FORCE) {
    case AVSEEK_SIZE: return (int64_t)v->mem_size;
    case SEEK_SET: base = 0; break;
    case SEEK_CUR: base = v->mem_pos; break;
    case SEEK_END: base = (int64_t)v->mem_size; break;
    default: return AVERROR(EINVAL);
    }
    if ((offset > 0 && base > INT64_MAX - offset) || base + offset < 0) return AVERROR(EINVAL);
    v->mem_pos = base + offset;   /* past the end is allowed: reads then give EOF */
    return v->mem_pos;
}

/* A demuxer that names another resource (an HLS playlist, a concat list, an mp4 reference) gets
 * nothing: memory input opens no file and no URL. */
static int refuse_open(AVFormatContext *s, AVIOContext **pb, const char *url, int flags,
                       AVDictionary **options) {
    (void)s, (void)pb, (void)url, (void)flags, (void)options;
    return AVERROR(EPERM);
}

static void close_input(tb_video *v) {
    if (v->fmt) avformat_close_input(&v->fmt);
    if (v->avio) {
        av_freep(&v->avio->buffer);
        avio_context_free(&v->avio);
    }
}

/* A URL source's interrupt callback: the bytes read so far into *src.bytes_read, from the first
 * read of the open on, then the source's own callback. */
static int src_interrupt(void *opaque) {
    tb_video *v = opaque;
    const AVFormatContext *f = v->fmt ? v->fmt : v->opening;
    if (v->src.bytes_read && f && f->pb) *v->src.bytes_read = f->pb->bytes_read;
    return v->src.interrupt ? v->src.interrupt(v->src.interrupt_user) : 0;
}

/* Opens the format context over the file v->path, over v->mem, or over the URL v->src.url
 * through exactly the protocols v->src.protocols names. */
static int open_input(tb_video *v, tb_err *e) {
    AVFormatContext *fmt = avformat_alloc_context();
    AVDictionary *opts = NULL;
    const AVInputFormat *ifmt = NULL;
    const char *url = v->path;
    if (!fmt) return tb_fail(e, TUBELET_ERR_MEMORY, "%s: out of memory", v->path);
    if (v->mem) {
        enum { BUF = 32768 };
        uint8_t *buf = av_malloc(BUF);
        if (buf) v->avio = avio_alloc_context(buf, BUF, 0, v, mem_read, NULL, mem_seek);
        if (!v->avio) {
            av_free(buf);
            avformat_free_context(fmt);
            return tb_fail(e, TUBELET_ERR_MEMORY, "%s: out of memory", v->path);
        }
        v->mem_pos = 0;
        fmt->pb = v->avio;
        fmt->flags |= AVFMT_FLAG_CUSTOM_IO;
        fmt->io_open = refuse_open;
        av_dict_set(&opts, "protocol_whitelist", "none", 0);
    } else if (v->src.url) {
        url = v->src.url;
        av_dict_set(&opts, "protocol_whitelist", v->src.protocols, 0);
        /* Buffers that FFmpeg fills as a ring and the kernel maps in as they are first written,
         * so a process's RSS grows by what they hold until they wrap (issue 29: 10 MB over
         * minutes of a 25 kB/s stream): the probe size, which for a non-seekable MPEG-TS input
         * is also the seek-back buffer of its I/O context (5 MB by default), and UDP's receive
         * ring (5.4 MB). 1 MiB each bounds them; a stream needs its codec parameters within
         * 1 MiB (a keyframe in the first MiB), and a UDP reader that falls behind by more
         * loses packets, not the stream (the decoder resyncs, as with a lossy network). A
         * udp:// URL's own ?fifo_size= (in 188-byte packets) still wins. */
        av_dict_set_int(&opts, "probesize", LIVE_BUFFER, 0);
        av_dict_set_int(&opts, "fifo_size", LIVE_BUFFER / 188, 0);
        av_dict_set_int(&opts, "overrun_nonfatal", 1, 0);
        fmt->interrupt_callback = (AVIOInterruptCB){src_interrupt, v};
        if (v->src.format && !(ifmt = av_find_input_format(v->src.format))) {
            avformat_free_context(fmt);
            return tb_fail(e, TUBELET_ERR_UNSUPPORTED, "%s: this FFmpeg has no %s input", v->path,
                           v->src.format);
        }
    } else {
        /* local files only: no network or pipe protocol from a name */
        av_dict_set(&opts, "protocol_whitelist", "file", 0);
    }
    v->opening = fmt;
    int rc = avformat_open_input(&fmt, url, ifmt, &opts);   /* frees fmt on failure */
    v->opening = NULL;
    av_dict_free(&opts);
    if (rc < 0) {
        if (v->src.url)
            return av_fail(e, rc == AVERROR(ENOENT) ? TUBELET_ERR_IO : TUBELET_ERR_FORMAT, v->path,
                           "cannot open", rc);
        if (!v->mem && (rc == AVERROR(ENOENT) || rc == AVERROR(EACCES) || rc == AVERROR(EISDIR)))
            return av_fail(e, TUBELET_ERR_IO, v->path, "cannot open", rc);
        return av_fail(e, TUBELET_ERR_FORMAT, v->path, "not a video file FFmpeg can read", rc);
    }
    v->fmt = fmt;
    /* the probe decodes a frame or so of each stream: with max_side, its decoders refuse (and
     * allocate nothing for) a picture beyond it, as the real decoder will */
    AVDictionary **probe = NULL;
    if (v->params.max_side > 0 && fmt->nb_streams &&
        (probe = av_calloc(fmt->nb_streams, sizeof *probe)))
        for (unsigned i = 0; i < fmt->nb_streams; i++)
            av_dict_set_int(&probe[i], "max_pixels",
                            (int64_t)v->params.max_side * v->params.max_side, 0);
    const unsigned n_probe = fmt->nb_streams;
    rc = avformat_find_stream_info(fmt, probe);
    for (unsigned i = 0; probe && i < n_probe; i++) av_dict_free(&probe[i]);
    av_free(probe);
    if (rc < 0) return av_fail(e, TUBELET_ERR_FORMAT, v->path, "cannot read stream information", rc);
    return TUBELET_OK;
}

static int rotation_of(const AVStream *st) {
    const int32_t *m = NULL;
#if LIBAVFORMAT_VERSION_MAJOR >= 61
    const AVPacketSideData *sd = av_packet_side_data_get(
        st->codecpar->coded_side_data, st->codecpar->nb_coded_side_data, AV_PKT_DATA_DISPLAYMATRIX);
    if (sd && sd->size >= 9 * sizeof(int32_t)) m = (const int32_t *)sd->data;
#else
    size_t size = 0;
    m = (const int32_t *)av_stream_get_side_data(st, AV_PKT_DATA_DISPLAYMATRIX, &size);
    if (size < 9 * sizeof(int32_t)) m = NULL;
#endif
    if (!m) return 0;
    double ccw = av_display_rotation_get(m);  /* counter-clockwise degrees to display upright */
    if (ccw != ccw) return 0;
    long cw = lround(-ccw);
    cw = ((cw % 360) + 360) % 360;
    /* only right angles are honoured (as torchcodec and the ffmpeg CLI's autorotate) */
    if (cw == 90 || cw == 180 || cw == 270) return (int)cw;
    return 0;
}

static int cmp_entry(const void *a, const void *b) {
    const pkt_entry *x = a, *y = b;
    return x->pts < y->pts ? -1 : x->pts > y->pts;
}

/* Demux-only pass over the stream's packets: the exact frame count and the keyframe index. */
static int scan_index(tb_video *v, tb_err *e) {
    size_t cap = 1024, n = 0;
    pkt_entry *ents = malloc(cap * sizeof *ents);
    if (!ents) return tb_fail(e, TUBELET_ERR_MEMORY, "%s: out of memory", v->path);
    int missing = 0;
    for (;;) {
        int rc = av_read_frame(v->fmt, v->pkt);
        if (rc == AVERROR_EOF) break;
        if (rc < 0) {
            if (rc == AVERROR(EAGAIN)) continue;
            break;   /* a read error mid-file: index what was read (truncated file) */
        }
        if (v->pkt->stream_index == v->si && !(v->pkt->flags & AV_PKT_FLAG_DISCARD) &&
            v->pkt->size > 0) {
            if (n == cap) {
                if (cap > (SIZE_MAX / sizeof *ents) / 2) {
                    av_packet_unref(v->pkt);
                    free(ents);
                    return tb_fail(e, TUBELET_ERR_MEMORY, "%s: too many packets", v->path);
                }
                pkt_entry *ne = realloc(ents, 2 * cap * sizeof *ents);
                if (!ne) {
                    av_packet_unref(v->pkt);
                    free(ents);
                    return tb_fail(e, TUBELET_ERR_MEMORY, "%s: out of memory", v->path);
                }
                ents = ne;
                cap *= 2;
            }
            int64_t t = v->pkt->pts != AV_NOPTS_VALUE ? v->pkt->pts : v->pkt->dts;
            if (t == AV_NOPTS_VALUE) missing = 1;
            int64_t d = v->pkt->dts;
            ents[n].pts = t;
            ents[n].seek = d != AV_NOPTS_VALUE && (t == AV_NOPTS_VALUE || d < t) ? d : t;
            if (ents[n].seek != AV_NOPTS_VALUE &&
                (v->first_ts == AV_NOPTS_VALUE || ents[n].seek < v->first_ts))
                v->first_ts = ents[n].seek;
            ents[n].dur = v->pkt->duration;
            ents[n].key = (v->pkt->flags & AV_PKT_FLAG_KEY) != 0;
            n++;
        }
        av_packet_unref(v->pkt);
    }
    v->pts_map = !missing && n > 0;
    if (v->pts_map) {
        qsort(ents, n, sizeof *ents, cmp_entry);
        for (size_t i = 1; i < n; i++)
            if (ents[i].pts == ents[i - 1].pts) v->pts_map = 0;  /* ambiguous: count instead */
    }
    v->n = (int64_t)n;
    v->pts = malloc((n ? n : 1) * sizeof *v->pts);
    v->key = malloc(n ? n : 1);
    v->seek_ts = malloc((n ? n : 1) * sizeof *v->seek_ts);
    if (!v->pts || !v->key || !v->seek_ts) {
        free(ents);
        return tb_fail(e, TUBELET_ERR_MEMORY, "%s: out of memory", v->path);
    }
    for (size_t i = 0; i < n; i++) {
        v->pts[i] = ents[i].pts;
        v->key[i] = (uint8_t)ents[i].key;
        v->seek_ts[i] = ents[i].seek;
    }
    if (n) v->key[0] = 1;   /* decoding from the start always works */
    /* duration: first frame start to last frame end */
    if (v->pts_map && n) {
        int64_t last_dur = ents[n - 1].dur > 0 ? ents[n - 1].dur : 0;
        if (!last_dur && n > 1) last_dur = (v->pts[n - 1] - v->pts[0]) / (int64_t)(n - 1);
        v->info.duration = (double)(v->pts[n - 1] + last_dur - v->pts[0]) * av_q2d(v->tb);
    }
    free(ents);
    return TUBELET_OK;
}

static int open_decoder(tb_video *v, tb_err *e) {
    AVStream *st = v->fmt->streams[v->si];
    v->dec = avcodec_alloc_context3(v->codec);
    if (!v->dec) return tb_fail(e, TUBELET_ERR_MEMORY, "%s: out of memory", v->path);
    int rc = avcodec_parameters_to_context(v->dec, st->codecpar);
    if (rc < 0) return av_fail(e, TUBELET_ERR_FORMAT, v->path, "bad codec parameters", rc);
    v->dec->thread_count = v->params.n_threads > 0 ? v->params.n_threads : 0;
    v->dec->thread_type = v->params.low_delay ? FF_THREAD_SLICE : FF_THREAD_FRAME | FF_THREAD_SLICE;
    v->dec->pkt_timebase = st->time_base;
    /* the decoder refuses (allocates nothing for) a picture beyond max_side squared */
    if (v->params.max_side > 0)
        v->dec->max_pixels = (int64_t)v->params.max_side * v->params.max_side;
    rc = avcodec_open2(v->dec, v->codec, NULL);
    if (rc < 0)
        return tb_fail(e, TUBELET_ERR_UNSUPPORTED, "%s: cannot open the %s decoder", v->path,
                       v->codec->name);
    return TUBELET_OK;
}

/* Back to the first packet: a seek where the format allows it, else (or with reopen) reading
 * the file again from the start. The seek aims at the smallest timestamp of the scan: MPEG-TS
 * seeks by dts, and aiming at the first frame's pts lands after its keyframe when B-frames
 * delay the pts (nothing then decodes before the next keyframe, if there is one). */
static int rewind_input(tb_video *v, int reopen, tb_err *e) {
    int64_t ts = v->n && v->pts_map ? v->pts[0] : 0;
    if (v->first_ts != AV_NOPTS_VALUE && v->first_ts < ts) ts = v->first_ts;
    AVStream *st = v->fmt->streams[v->si];
    if (st->start_time != AV_NOPTS_VALUE && st->start_time < ts) ts = st->start_time;
    int rc = reopen ? -1 : av_seek_frame(v->fmt, v->si, ts, AVSEEK_FLAG_BACKWARD);
    if (rc < 0) {
        /* formats that cannot seek: read the file again from the start */
        close_input(v);
        int r2 = open_input(v, e);
        if (r2) return r2;
        if (v->si >= (int)v->fmt->nb_streams ||
            v->fmt->streams[v->si]->codecpar->codec_type != AVMEDIA_TYPE_VIDEO ||
            (v->codec && v->fmt->streams[v->si]->codecpar->codec_id != v->codec->id))
            return tb_fail(e, TUBELET_ERR_FORMAT, "%s: the video stream changed on reopening", v->path);
    }
    if (v->dec) avcodec_flush_buffers(v->dec);
    v->since_seek = 0;
    v->pos = -1;
    v->have_frame = 0;
    v->input_eof = v->dec_eof = 0;
    return TUBELET_OK;
}

const char *tb_video_src_name(const tb_video_src *src) {
    if (src->path) return src->path;
    if (src->name && *src->name) return src->name;
    return src->url ? src->url : "<memory>";
}

int tb_video_open(tb_video **out, const char *path, const tb_video_params *p, tb_err *e) {
    tb_video_src src = {.path = path};
    if (!path || !*path) {
        if (out) *out = NULL;
        return tb_fail(e, TUBELET_ERR_ARG, "tb_video_open: empty path");
    }
    return tb_video_open_src(out, &src, p, e);
}

int tb_video_open_src(tb_video **out, const tb_video_src *src, const tb_video_params *p,
                      tb_err *e) {
    if (!out || !src) return tb_fail(e, TUBELET_ERR_ARG, "tb_video_open: NULL argument");
    *out = NULL;
    const char *path = tb_video_src_name(src);
    if (src->url && !src->protocols)
        return tb_fail(e, TUBELET_ERR_ARG, "%s: a URL source needs its protocol whitelist", path);
    if (!src->path && !src->url && (!src->data || !src->size))
        return tb_fail(e, TUBELET_ERR_FORMAT, "%s: empty video data", path);
    quiet_ffmpeg();
    tb_video *v = calloc(1, sizeof *v);
    if (!v) return tb_fail(e, TUBELET_ERR_MEMORY, "%s: out of memory", path);
    snprintf(v->path, sizeof v->path, "%s", path);
    const int from_mem = !src->path && !src->url;
    v->mem = from_mem ? src->data : NULL;
    v->mem_size = from_mem ? src->size : 0;
    if (src->url && !src->path) v->src = *src;
    v->params = p ? *p : tb_video_default_params();
    if (v->params.max_pixels <= 0) v->params.max_pixels = (int64_t)1 << 26;
    v->pos = -1;
    v->first_ts = AV_NOPTS_VALUE;
    v->st_prev_first = -1;
    int rc;
    /* a plain message for the common case, and no FIFO or device: FFmpeg would block on it */
    if (!v->mem && !v->src.url) {
        int fd = tb_open_regular(path, e);
        if (fd < 0) {
            rc = -fd;
            goto fail;
        }
        close(fd);
    }
    if ((rc = open_input(v, e))) goto fail;
    v->pkt = av_packet_alloc();
    v->frame = av_frame_alloc();
    if (!v->pkt || !v->frame) {
        rc = tb_fail(e, TUBELET_ERR_MEMORY, "%s: out of memory", path);
        goto fail;
    }
    const AVCodec *codec = NULL;
    int si = av_find_best_stream(v->fmt, AVMEDIA_TYPE_VIDEO, -1, -1, &codec, 0);
    if (si == AVERROR_STREAM_NOT_FOUND) {
        rc = tb_fail(e, TUBELET_ERR_FORMAT, "%s: no video stream", path);
        goto fail;
    }
    if (si < 0 || !codec) {
        AVStream *st0 = NULL;
        for (unsigned i = 0; i < v->fmt->nb_streams; i++)
            if (v->fmt->streams[i]->codecpar->codec_type == AVMEDIA_TYPE_VIDEO) st0 = v->fmt->streams[i];
        rc = tb_fail(e, TUBELET_ERR_UNSUPPORTED, "%s: no decoder for the video stream (codec %s)",
                     path, st0 ? avcodec_get_name(st0->codecpar->codec_id) : "unknown");
        goto fail;
    }
    v->si = si;
    v->codec = codec;
    AVStream *st = v->fmt->streams[si];
    v->tb = st->time_base;
    if (v->tb.num <= 0 || v->tb.den <= 0) v->tb = (AVRational){1, 90000};
    AVCodecParameters *cp = st->codecpar;
    tb_video_info *in = &v->info;
    if (cp->width <= 0 || cp->height <= 0) {
        rc = tb_fail(e, TUBELET_ERR_FORMAT, "%s: the video stream has no frame size (%dx%d)", path,
                     cp->width, cp->height);
        goto fail;
    }
    if (cp->width > MAX_SIDE || cp->height > MAX_SIDE ||
        (int64_t)cp->width * cp->height > v->params.max_pixels) {
        rc = tb_fail(e, TUBELET_ERR_UNSUPPORTED,
                     "%s: frame size %dx%d is beyond the limit (%d per side, %lld pixels)", path,
                     cp->width, cp->height, MAX_SIDE, (long long)v->params.max_pixels);
        goto fail;
    }
    if (over_bounds(v, cp->width, cp->height)) { /* what the stream declares, before decoding */
        rc = stop_fail(v, e);
        goto fail;
    }
    in->coded_width = cp->width;
    in->coded_height = cp->height;
    in->rotation = rotation_of(st);
    int swap = in->rotation == 90 || in->rotation == 270;
    in->width = swap ? cp->height : cp->width;
    in->height = swap ? cp->width : cp->height;
    snprintf(in->codec, sizeof in->codec, "%s", codec->name);
    const char *pf = av_get_pix_fmt_name((enum AVPixelFormat)cp->format);
    snprintf(in->pix_fmt, sizeof in->pix_fmt, "%s", pf ? pf : "unknown");
    snprintf(in->container, sizeof in->container, "%s", v->fmt->iformat->name);
    for (unsigned i = 0; i < v->fmt->nb_streams; i++)
        if (v->fmt->streams[i]->codecpar->codec_type == AVMEDIA_TYPE_AUDIO) in->has_audio = 1;
    in->n_frames_header = st->nb_frames > 0 ? st->nb_frames : 0;

    if (!v->params.no_index) {
        if ((rc = scan_index(v, e))) goto fail;
        if (v->params.max_frames > 0 && v->n > v->params.max_frames) {
            rc = tb_fail(e, TUBELET_ERR_UNSUPPORTED, "%s: %lld frames, more than the limit of %lld",
                         path, (long long)v->n, (long long)v->params.max_frames);
            goto fail;
        }
        if (v->n == 0) {
            rc = tb_fail(e, TUBELET_ERR_FORMAT, "%s: the video stream has no frames", path);
            goto fail;
        }
        in->n_frames = v->n;
        if (in->n_frames_header && in->n_frames_header != v->n)
            tb_warn(&v->params.log, "%s: the container says %lld frames, the stream has %lld", path,
                    (long long)in->n_frames_header, (long long)v->n);
        if ((rc = rewind_input(v, 0, e))) goto fail;
    } else {
        in->n_frames = in->n_frames_header;
        v->pts_map = 0;
    }
    st = v->fmt->streams[si];   /* rewind_input may have reopened the file */
    AVRational afr = st->avg_frame_rate.num > 0 ? st->avg_frame_rate : st->r_frame_rate;
    if (in->duration <= 0 && st->duration != AV_NOPTS_VALUE && st->duration > 0)
        in->duration = (double)st->duration * av_q2d(v->tb);
    if (in->duration <= 0 && v->fmt->duration > 0) in->duration = (double)v->fmt->duration / AV_TIME_BASE;
    if (in->n_frames > 1 && in->duration > 0)
        in->fps = (double)in->n_frames / in->duration;
    else if (afr.num > 0 && afr.den > 0)
        in->fps = av_q2d(afr);
    if (in->duration <= 0 && in->fps > 0 && in->n_frames > 0) in->duration = in->n_frames / in->fps;

    if ((rc = open_decoder(v, e))) goto fail;
    *out = v;
    return TUBELET_OK;
fail:
    tb_video_close(v);
    return rc;
}

void tb_video_close(tb_video *v) {
    if (!v) return;
    if (v->dec) avcodec_free_context(&v->dec);
    close_input(v);
    av_packet_free(&v->pkt);
    av_frame_free(&v->frame);
    sws_freeContext(v->sws);
    av_free(v->conv);
    free(v->pts);
    free(v->key);
    free(v->seek_ts);
    free(v->st_buf);
    free(v);
}

const tb_video_info *tb_video_get_info(const tb_video *v) { return v ? &v->info : NULL; }

void tb_video_get_stats(const tb_video *v, tb_video_stats *s) {
    if (v && s) *s = v->stats;
}

double tb_video_frame_time(const tb_video *v, int64_t i) {
    if (!v || i < 0 || i >= v->info.n_frames) return -1;
    if (v->pts_map) return (double)(v->pts[i] - v->pts[0]) * av_q2d(v->tb);
    return v->info.fps > 0 ? (double)i / v->info.fps : -1;
}

int64_t tb_video_frame_at_time(const tb_video *v, double t) {
    if (!v || v->info.n_frames <= 0) return -1;
    if (!(t > 0)) return 0;
    if (!v->pts_map) {
        int64_t i = v->info.fps > 0 ? (int64_t)(t * v->info.fps + 1e-9) : 0;
        return i >= v->info.n_frames ? v->info.n_frames - 1 : i;
    }
    double ticks = t / av_q2d(v->tb);
    /* last i with pts[i] - pts[0] <= ticks (a tiny tolerance for t computed from the pts) */
    int64_t lo = 0, hi = v->n - 1;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo + 1) / 2;
        if ((double)(v->pts[mid] - v->pts[0]) <= ticks + 1e-6) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

/* ------------------------------------------------------------------ decoding */

/* Number of a decoded frame. */
static int64_t frame_number(tb_video *v, const AVFrame *f) {
    if (v->pts_map) {
        int64_t t = f->pts != AV_NOPTS_VALUE ? f->pts : f->best_effort_timestamp;
        if (t != AV_NOPTS_VALUE) {
            /* first index with pts >= t */
            int64_t lo = 0, hi = v->n;
            while (lo < hi) {
                int64_t mid = lo + (hi - lo) / 2;
                if (v->pts[mid] < t) lo = mid + 1;
                else hi = mid;
            }
            return lo;
        }
    }
    return v->pos + 1;
}

/* A frame nobody asked for that no other frame refers to need not be decoded at all: with
 * long GOPs and B-frames that is most of the frames between two sampled ones (a 720p H.264
 * clip decodes in 0.74x the time). Only where packets map to frame numbers exactly; a packet
 * whose pts is not in the index is decoded. */
static int skip_packet(const tb_video *v, const AVPacket *p) {
    if (!v->want || v->no_skip || p->pts == AV_NOPTS_VALUE) return 0;
    int64_t lo = 0, hi = v->n;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (v->pts[mid] < p->pts) lo = mid + 1;
        else hi = mid;
    }
    return lo < v->n && v->pts[lo] == p->pts && !v->want[lo];
}

/* Next frame out of the decoder into v->frame, numbered into v->pos. Returns 1 with a frame,
 * 0 at the end of the stream. Corrupt packets are skipped, as FFmpeg's own tools do. */
static int next_frame(tb_video *v) {
    for (;;) {
        if (v->dec_eof || v->stop) return 0;
        int rc = avcodec_receive_frame(v->dec, v->frame);
        if (rc == 0) {
            v->stats.frames_decoded++;
            v->since_seek++;
            if (over_bounds(v, v->frame->width, v->frame->height)) return 0;
            int64_t num = frame_number(v, v->frame);
            if (num <= v->pos && v->have_frame) num = v->pos + 1;  /* a stray repeated pts */
            v->pos = num;
            v->have_frame = 1;
            return 1;
        }
        if (rc == AVERROR_EOF || v->input_eof) {
            /* drained (or a decoder that says EAGAIN after the flush: nothing more either) */
            v->dec_eof = 1;
            v->have_frame = 0;
            return 0;
        }
        /* EAGAIN, or a decoding error on the last packet: feed the next packet */
        for (;;) {
            rc = av_read_frame(v->fmt, v->pkt);
            if (rc < 0 && v->pause && rc == AVERROR_EXIT) {
                /* a pause, not the end: the demuxer's PES and the parser's frame came out
                 * before this error; the I/O context forgets the interrupt and the reading
                 * goes on (the decoder keeps its references: not drained) */
                v->pause = 0, v->paused = 1;
                v->fmt->pb->eof_reached = 0, v->fmt->pb->error = 0;
                return 0;
            }
            if (rc < 0) {
                v->input_eof = 1;
                v->read_err = rc;
                avcodec_send_packet(v->dec, NULL);   /* drain what the decoder holds */
                break;
            }
            if (v->pkt->stream_index != v->si) {
                av_packet_unref(v->pkt);
                continue;
            }
            v->stats.packets_read++;
            v->dec->skip_frame = skip_packet(v, v->pkt) ? AVDISCARD_NONREF : AVDISCARD_DEFAULT;
            avcodec_send_packet(v->dec, v->pkt);     /* an error here is a corrupt packet */
            av_packet_unref(v->pkt);
            /* a new sequence header sets the size before any frame of it comes out */
            if (over_bounds(v, v->dec->width, v->dec->height)) return 0;
            break;
        }
    }
}

static int ensure_sws(tb_video *v, const AVFrame *f, tb_err *e) {
    if (f->width <= 0 || f->height <= 0 || f->width > MAX_SIDE || f->height > MAX_SIDE ||
        (int64_t)f->width * f->height > v->params.max_pixels)
        return tb_fail(e, TUBELET_ERR_UNSUPPORTED, "%s: decoded frame size %dx%d is beyond the limit",
                       v->path, f->width, f->height);
    int cw = v->info.coded_width, ch = v->info.coded_height;
    if (v->sws && v->sws_w == f->width && v->sws_h == f->height && v->sws_fmt == f->format &&
        v->sws_cs == (int)f->colorspace && v->sws_range == (int)f->color_range)
        return TUBELET_OK;
    sws_freeContext(v->sws);
    /* Flags and colorspace handling are torchcodec's CPU path: swscale's default scaler (bicubic),
     * the frame's matrix and range. A stream that changes size mid-way is scaled back to the size
     * it declared in the same call. */
    v->sws = sws_getContext(f->width, f->height, (enum AVPixelFormat)f->format, cw, ch,
                            AV_PIX_FMT_RGB24, SWS_BICUBIC, NULL, NULL, NULL);
    if (!v->sws) {
        const char *n = av_get_pix_fmt_name((enum AVPixelFormat)f->format);
        return tb_fail(e, TUBELET_ERR_UNSUPPORTED, "%s: cannot convert pixel format %s to RGB",
                       v->path, n ? n : "unknown");
    }
    int *inv_table = NULL, *table = NULL, src_range, dst_range, bri, con, sat;
    if (sws_getColorspaceDetails(v->sws, &inv_table, &src_range, &table, &dst_range, &bri, &con,
                                 &sat) >= 0) {
        if (f->color_range != AVCOL_RANGE_UNSPECIFIED) src_range = f->color_range == AVCOL_RANGE_JPEG;
        const int *coefs = sws_getCoefficients(f->colorspace);
        sws_setColorspaceDetails(v->sws, coefs, src_range, coefs, dst_range, bri, con, sat);
    }
    v->sws_w = f->width;
    v->sws_h = f->height;
    v->sws_fmt = f->format;
    v->sws_cs = f->colorspace;
    v->sws_range = f->color_range;
    if (!v->conv) {
        v->conv_ls = (cw * 3 + 63) & ~63;
        v->conv = av_malloc((size_t)v->conv_ls * ch + 256);
        if (!v->conv) return tb_fail(e, TUBELET_ERR_MEMORY, "%s: out of memory", v->path);
        v->conv_w = cw;
        v->conv_h = ch;
    }
    return TUBELET_OK;
}

/* Converts v->frame to RGB24 and writes it rotated into dst (info.height x info.width x 3). */
static int convert_frame(tb_video *v, uint8_t *dst, tb_err *e) {
    AVFrame *f = v->frame;
    int rc = ensure_sws(v, f, e);
    if (rc) return rc;
    uint8_t *planes[4] = {v->conv, NULL, NULL, NULL};
    int ls[4] = {v->conv_ls, 0, 0, 0};
    int h = sws_scale(v->sws, (const uint8_t *const *)f->data, f->linesize, 0, f->height, planes, ls);
    if (h != v->conv_h)
        return tb_fail(e, TUBELET_ERR_FORMAT, "%s: pixel conversion failed at frame %lld", v->path,
                       (long long)v->pos);
    const uint8_t *src = v->conv;
    int sw = v->conv_w, sh = v->conv_h, sls = v->conv_ls;
    int W = v->info.width;
    switch (v->info.rotation) {
    case 0:
        for (int y = 0; y < sh; y++) memcpy(dst + (size_t)y * W * 3, src + (size_t)y * sls, (size_t)sw * 3);
        break;
    case 180:
        for (int y = 0; y < sh; y++) {
            const uint8_t *s = src + (size_t)(sh - 1 - y) * sls;
            uint8_t *d = dst + (size_t)y * W * 3;
            for (int x = 0; x < sw; x++) memcpy(d + 3 * x, s + 3 * (sw - 1 - x), 3);
        }
        break;
    case 90:  /* clockwise: out(y, x) = in(sh - 1 - x, y); out is sw tall, sh wide */
        for (int y = 0; y < sw; y++) {
            uint8_t *d = dst + (size_t)y * W * 3;
            for (int x = 0; x < sh; x++) memcpy(d + 3 * x, src + (size_t)(sh - 1 - x) * sls + 3 * y, 3);
        }
        break;
    case 270: /* counter-clockwise: out(y, x) = in(x, sw - 1 - y) */
        for (int y = 0; y < sw; y++) {
            uint8_t *d = dst + (size_t)y * W * 3;
            for (int x = 0; x < sh; x++) memcpy(d + 3 * x, src + (size_t)x * sls + 3 * (sw - 1 - y), 3);
        }
        break;
    }
    v->stats.frames_converted++;
    return TUBELET_OK;
}

/* Last keyframe at or before frame t. */
static int64_t key_before(const tb_video *v, int64_t t) {
    while (t > 0 && !v->key[t]) t--;
    return t;
}

/* To keyframe k; reopen: back to the start by reading the file again (k is then 0). */
static int seek_to_key(tb_video *v, int64_t k, int reopen, tb_err *e) {
    v->stats.seeks++;
    if (reopen || k <= 0 || !v->pts_map) return rewind_input(v, reopen, e);
    int rc = av_seek_frame(v->fmt, v->si, v->seek_ts[k], AVSEEK_FLAG_BACKWARD);
    if (rc < 0) return rewind_input(v, 0, e);
    avcodec_flush_buffers(v->dec);
    /* the next frame out is at the keyframe or before; numbering resumes from its pts */
    v->pos = k - 1;
    v->since_seek = 0;
    v->have_frame = 0;
    v->input_eof = v->dec_eof = 0;
    return TUBELET_OK;
}

/* Decodes until frame t is in v->frame. may_seek: jump over gaps with keyframes. A seek that
 * lands past its target (the stream skips the frame) or that yields no frame at all is
 * retried from earlier keyframes, then from the start with every frame decoded, and last by
 * reading the file again: a container whose timestamps mislead the seek still decodes. */
static int decode_to(tb_video *v, int64_t t, int may_seek, tb_err *e) {
    int rc;
    if (v->have_frame && v->pos == t) return TUBELET_OK;
    int tries = 0;
    if (v->pos >= t || v->dec_eof) {
        /* behind us: go back */
        if (!may_seek) return tb_fail(e, TUBELET_ERR_ARG, "%s: frame %lld is behind the stream position", v->path, (long long)t);
        if ((rc = seek_to_key(v, v->pts_map ? key_before(v, t) : 0, 0, e))) return rc;
        tries++;
    } else if (may_seek && v->pts_map && v->n) {
        /* seek when it skips a stretch worth more than a seek and a decoder flush */
        int64_t k = key_before(v, t);
        if (k - (v->pos + 1) > SEEK_GAP) {
            if ((rc = seek_to_key(v, k, 0, e))) return rc;
            tries++;
        }
    }
    for (;;) {
        int r = next_frame(v);
        if (r == 1) {
            if (v->pos == t) return TUBELET_OK;
            if (v->pos < t) continue;
            /* overshot: the seek landed past the target (or the frame does not exist) */
        }
        if (r == 0 && v->stop) return stop_fail(v, e);
        if (r == 1 || r == 0) {
            /* retry after an overshoot, or after a seek that gave no frame at all */
            int retry = r == 1 ? may_seek && v->pts_map : may_seek && v->since_seek == 0;
            if (retry && tries < 4) {
                /* from an earlier keyframe, then from the start, then the file read again */
                v->no_skip = 1;
                int64_t k = v->pts_map ? key_before(v, t) : 0;
                for (int i = 0; i < tries && k > 0; i++) k = key_before(v, k - 1);
                if (tries >= 2) k = 0;
                if ((rc = seek_to_key(v, k, tries == 3, e))) return rc;
                tries++;
                continue;
            }
            return tb_fail(e, TUBELET_ERR_FORMAT,
                           "%s: frame %lld could not be decoded (the stream %s frame %lld: "
                           "truncated or corrupt)",
                           v->path, (long long)t, r == 0 ? "ends at" : "skips to", (long long)v->pos);
        }
        return tb_fail(e, TUBELET_ERR_IO, "%s: read error", v->path);
    }
}

typedef struct {
    int64_t idx;
    int pos;
} order_t;

static int cmp_order(const void *a, const void *b) {
    const order_t *x = a, *y = b;
    if (x->idx != y->idx) return x->idx < y->idx ? -1 : 1;
    return x->pos - y->pos;
}

int tb_video_decode(tb_video *v, const int64_t *idx, int n, uint8_t *rgb, tb_err *e) {
    if (!v || (!idx && n) || (!rgb && n) || n < 0)
        return tb_fail(e, TUBELET_ERR_ARG, "tb_video_decode: bad argument");
    v->st_active = 0;   /* random access ends a stream in progress */
    for (int i = 0; i < n; i++) {
        if (idx[i] < 0 || (v->info.n_frames > 0 && idx[i] >= v->info.n_frames))
            return tb_fail(e, TUBELET_ERR_ARG, "%s: frame %lld is outside the video (%lld frames)",
                           v->path, (long long)idx[i], (long long)v->info.n_frames);
    }
    if (n == 0) return TUBELET_OK;
    order_t *ord = malloc((size_t)n * sizeof *ord);
    if (!ord) return tb_fail(e, TUBELET_ERR_MEMORY, "%s: out of memory", v->path);
    for (int i = 0; i < n; i++) ord[i] = (order_t){idx[i], i};
    qsort(ord, (size_t)n, sizeof *ord, cmp_order);
    if (v->pts_map && v->n > 0 && (v->want = calloc((size_t)v->n, 1)))
        for (int i = 0; i < n; i++)
            if (idx[i] < v->n) v->want[idx[i]] = 1;
    v->no_skip = 0;
    size_t fsz = (size_t)v->info.width * v->info.height * 3;
    int rc = TUBELET_OK;
    for (int i = 0; i < n; i++) {
        uint8_t *dst = rgb + (size_t)ord[i].pos * fsz;
        if (i > 0 && ord[i].idx == ord[i - 1].idx) {
            memcpy(dst, rgb + (size_t)ord[i - 1].pos * fsz, fsz);
            continue;
        }
        if ((rc = decode_to(v, ord[i].idx, 1, e))) break;
        if ((rc = convert_frame(v, dst, e))) break;
    }
    free(v->want);
    v->want = NULL;
    free(ord);
    return rc;
}

int tb_video_can_pause(const tb_video *v) {
    return v && v->fmt && v->fmt->pb && !strcmp(v->fmt->iformat->name, "mpegts");
}

void tb_video_pause(tb_video *v) { v->pause = 1; }

int tb_video_read(tb_video *v, uint8_t *rgb, tb_err *e) {
    if (!v) return -tb_fail(e, TUBELET_ERR_ARG, "tb_video_read: NULL argument");
    v->st_active = 0;
    if (!next_frame(v)) {
        if (v->paused) return v->paused = 0, 2;
        if (v->stop) return -stop_fail(v, e);
        if (v->read_err && v->read_err != AVERROR_EOF)
            av_fail(e, 0, v->path, "the stream broke off", v->read_err);
        else
            tb_fail(e, 0, "%s: end of the stream", v->path);
        return 0;
    }
    int rc = rgb ? convert_frame(v, rgb, e) : TUBELET_OK;
    return rc ? -rc : 1;
}

/* ------------------------------------------------------------------ streaming */

int tb_video_stream_begin(tb_video *v, const tb_stream_params *sp, tb_err *e) {
    if (!v || !sp) return tb_fail(e, TUBELET_ERR_ARG, "tb_video_stream_begin: NULL argument");
    if (sp->num_frames < 1 || sp->stride < 1 || sp->hop < 1 || sp->num_frames > 65536)
        return tb_fail(e, TUBELET_ERR_ARG,
                       "%s: streaming needs num_frames, stride and hop >= 1 (got %d, %d, %d)",
                       v->path, sp->num_frames, sp->stride, sp->hop);
    /* one forward pass: a window may not need a frame the previous one passed over */
    if (sp->hop % sp->stride && (int64_t)sp->hop < (int64_t)sp->num_frames * sp->stride)
        return tb_fail(e, TUBELET_ERR_ARG,
                       "%s: streaming hop %d must be a multiple of the stride %d or >= a window (%lld)",
                       v->path, sp->hop, sp->stride, (long long)sp->num_frames * sp->stride);
    size_t fsz = (size_t)v->info.width * v->info.height * 3, total;
    if (!tb_mul_ok(fsz, (size_t)sp->num_frames, &total))
        return tb_fail(e, TUBELET_ERR_MEMORY, "%s: window too large", v->path);
    free(v->st_buf);
    v->st_buf = malloc(total);
    if (!v->st_buf) return tb_fail(e, TUBELET_ERR_MEMORY, "%s: out of memory for a window", v->path);
    int rc = rewind_input(v, 0, e);
    if (rc) return rc;
    v->sp = *sp;
    v->st_active = 1;
    v->st_done = 0;
    v->st_window = 0;
    v->st_prev_first = -1;
    v->st_prev_real = 0;
    return TUBELET_OK;
}

int tb_video_stream_next(tb_video *v, uint8_t *rgb, int64_t *first_out, int *n_real, tb_err *e) {
    if (!v || !rgb) return -tb_fail(e, TUBELET_ERR_ARG, "tb_video_stream_next: NULL argument");
    if (!v->st_active) return -tb_fail(e, TUBELET_ERR_ARG, "%s: streaming not started", v->path);
    if (v->st_done) return 0;
    int T = v->sp.num_frames, s = v->sp.stride;
    size_t fsz = (size_t)v->info.width * v->info.height * 3;
    int64_t first = v->st_window * v->sp.hop;
    /* Reuse frames of the previous window: a frame of the new window at number f is in the old
     * one when (f - prev_first) is a multiple of the stride below prev_real * stride. Moving
     * forward in j order never overwrites a slot still needed (old slot >= new slot). */
    int have_upto = -1;   /* new slots [0, have_upto] filled from the old window */
    if (v->st_prev_first >= 0) {
        for (int j = 0; j < T; j++) {
            int64_t f = first + (int64_t)j * s, d = f - v->st_prev_first;
            if (d < 0 || d % s || d / s >= v->st_prev_real) break;
            int64_t old = d / s;
            if (old != j) memmove(v->st_buf + (size_t)j * fsz, v->st_buf + (size_t)old * fsz, fsz);
            have_upto = j;
        }
    }
    int real = have_upto + 1;
    for (int j = have_upto + 1; j < T; j++) {
        int64_t f = first + (int64_t)j * s;
        if (v->info.n_frames > 0 && v->pts_map && f >= v->info.n_frames) break;
        tb_err e2;
        int rc = decode_to(v, f, 0, &e2);
        if (rc) {
            if (v->dec_eof && !v->stop) break;   /* the video ended inside this window */
            if (e) *e = e2;
            return -rc;
        }
        rc = convert_frame(v, v->st_buf + (size_t)j * fsz, e);
        if (rc) return -rc;
        real = j + 1;
    }
    if (real == 0) {
        v->st_done = 1;
        return 0;
    }
    for (int j = real; j < T; j++)
        memcpy(v->st_buf + (size_t)j * fsz, v->st_buf + (size_t)(real - 1) * fsz, fsz);
    if (real < T) v->st_done = 1;
    memcpy(rgb, v->st_buf, fsz * (size_t)T);
    v->st_prev_first = first;
    v->st_prev_real = real;
    v->st_window++;
    if (first_out) *first_out = first;
    if (n_real) *n_real = real;
    return 1;
}
