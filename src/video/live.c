/* Live sources (include/tubelet_video.h, tubelet_live_*): a decoder thread reads a file, stdin,
 * a network stream or a camera through decode.c's tb_video_read, preprocesses the frames the
 * windows need into a ring, and publishes each complete window into a one-window mailbox; the
 * caller takes the newest. A window the caller did not take before the next one completed is
 * replaced and counted as skipped, so the lag never grows; a file read as fast as the caller
 * goes blocks the decoder instead.
 *
 * Frame numbers are decoder outputs, counted as tb_video_stream_next counts them (no_index), and
 * a frame k of a connection is in window w when k = w * hop + j * stride, j < T: the windows of
 * a file are tubelet_video_stream's. After a reconnection the windows start again from the
 * connection's first frame; frame numbers go on from the last frame before the drop. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <libavdevice/avdevice.h>
#include <libavformat/avformat.h>

#include "tubelet_video.h"
#include "video.h"

enum { SRC_FILE, SRC_STDIN, SRC_NET, SRC_DEVICE };
#define MAX_EVENTS 16

/* The schemes a network source may name and exactly the protocols each one needs. */
static const struct {
    const char *scheme, *protocols;
} net_schemes[] = {
    {"rtsp", "rtsp,rtp,udp,tcp"}, {"rtmp", "rtmp,tcp"}, {"http", "http,tcp"},
    {"https", "https,tls,tcp"},   {"udp", "udp"},       {"tcp", "tcp"},
    {"srt", "srt"},
};

struct tubelet_live {
    char name[1024];          /* for messages (a URL without its user:password@) */
    char *location;           /* what FFmpeg opens: path, URL, "pipe:0", the device */
    int kind;
    tb_video_src src;
    tubelet_live_params p;
    tb_video *v;
    double fps;
    int stdin_flags;          /* stdin's flags before it was made non-blocking; -1: untouched */
    /* the plan (tubelet_live_start) */
    int T, stride, hop, oh, ow;
    size_t frame_floats;      /* one preprocessed frame */
    tb_preproc_config c;
    tb_preproc *pp;
    int in_h, in_w;           /* the frame size pp was planned for */
    uint8_t *rgb;             /* one decoded frame */
    float *ring;              /* the last T sampled frames, preprocessed */
    int64_t n_sampled;        /* sampled frames of this connection */
    float *staging;           /* decoder side: the window being published */
    /* the decoder thread */
    pthread_t thread;
    int started;
    atomic_int stop;
    double last_data;         /* decoder thread: when the last frame or bytes (or the
                                 connection) came */
    int64_t bytes;            /* the source's bytes read so far (tb_video_src.bytes_read) */
    int64_t last_bytes;       /* the source's bytes read at last_data */
    int64_t paused_bytes;     /* the bytes read at the last pause (-1: none yet) */
    double max_gap;           /* the longest silence between bytes that was no pause */
    int flushing;             /* a pause or the timeout interrupted: frames now out are old */
    int catching_up;          /* frames the open buffered: their windows are not skipped */
    double catch_start;       /* when the first of those windows was published (0: none) */
    int timed_out;            /* the interrupt gave up waiting (no data for timeout) */
    /* shared with the caller, under mu */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    float *pending, *taken;
    int has_pending;
    tubelet_live_item pending_item;
    uint64_t seq, pending_seq;
    tubelet_live_item events[MAX_EVENTS];
    uint64_t event_seq[MAX_EVENTS];
    int n_events;
    int64_t skipped;          /* windows replaced since the last one taken */
    int ended, end_status;
    char end_msg[1024];
};

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

static int out_err(int rc, const tb_err *e, char *err, size_t errlen) {
    if (rc && err && errlen) snprintf(err, errlen, "%s", e->msg);
    return rc;
}

tubelet_live_params tubelet_live_default_params(void) {
    tubelet_live_params p;
    memset(&p, 0, sizeof p);
    p.timeout = 10;
    return p;
}

/* Sleeps until monotonic time t, in slices, unless stopped: 0, or 1 when stopped. */
static int sleep_until(tubelet_live *l, double t) {
    for (;;) {
        if (atomic_load(&l->stop)) return 1;
        double left = t - now_s();
        if (left <= 0) return 0;
        if (left > 0.05) left = 0.05;
        struct timespec ts = {0, (long)(left * 1e9)};
        nanosleep(&ts, NULL);
    }
}

/* How long an MPEG-TS source must be silent before a pause hands out the frames its demuxer
 * holds: 1 s, or 3 times the longest silence between its bytes so far (a sender that batches
 * its packets, 7 to a datagram, is silent between batches; a pause there would cut a frame whose
 * packets straddle two). */
static double pause_wait(const tubelet_live *l) {
    return l->max_gap * 3 > 1 ? l->max_gap * 3 : 1;
}

/* FFmpeg's interrupt callback, on the decoder thread: a stop, a network source silent for
 * longer than timeout, or a pause of a silent MPEG-TS source (tb_video_pause). */
static int interrupt_cb(void *user) {
    tubelet_live *l = user;
    if (atomic_load(&l->stop)) return 1;
    /* bytes arriving keep the source alive, though no frame comes out of them yet: a
     * low-bitrate MPEG-TS stream's frame leaves the demuxer only when the next one's packets
     * begin, and the decoder holds its reordering delay more */
    const double t = now_s();
    const int64_t bytes = l->bytes;
    if (bytes != l->last_bytes) {
        /* not the wait for the first bytes, nor a silence that made a pause */
        if (l->last_bytes && l->paused_bytes != l->last_bytes && t - l->last_data > l->max_gap)
            l->max_gap = t - l->last_data;
        l->last_bytes = bytes, l->last_data = t;
    }
    if (l->kind == SRC_NET && l->p.timeout > 0 && t - l->last_data > l->p.timeout) {
        l->timed_out = 1;
        l->flushing = 1;
        return 1;
    }
    if (bytes && bytes != l->paused_bytes && t - l->last_data > pause_wait(l) &&
        tb_video_can_pause(l->v)) {
        l->paused_bytes = bytes;
        l->flushing = 1;
        tb_video_pause(l->v);
        return 1;
    }
    return 0;
}

/* The name for messages: the source without a URL's user:password@. */
static void set_name(tubelet_live *l, const char *source) {
    const char *sep = strstr(source, "://"), *at = sep ? strchr(sep + 3, '@') : NULL;
    const char *slash = sep ? strchr(sep + 3, '/') : NULL;
    if (at && (!slash || at < slash))
        snprintf(l->name, sizeof l->name, "%.*s%s", (int)(sep + 3 - source), source, at + 1);
    else
        snprintf(l->name, sizeof l->name, "%s", source);
}

static int parse_source(tubelet_live *l, const char *source, tb_err *e) {
    set_name(l, source);
    const char *loc = source;
    l->src.name = l->name;
    if (!strcmp(source, "-")) {
        l->kind = SRC_STDIN;
        snprintf(l->name, sizeof l->name, "stdin");
        loc = "pipe:0";
        l->src.protocols = "pipe";
    } else if (!strncmp(source, "v4l2:", 5)) {
        l->kind = SRC_DEVICE;
        loc = source + 5;
        if (!*loc) return tb_fail(e, TUBELET_ERR_ARG, "%s: v4l2: needs a device, e.g. v4l2:/dev/video0", source);
        l->src.format = "v4l2";
        l->src.protocols = "none";   /* the device is opened by the demuxer, not a protocol */
    } else if (!strncmp(source, "file://", 7)) {
        l->kind = SRC_FILE;
        loc = source + 7;
    } else if (strstr(source, "://")) {
        size_t n = (size_t)(strstr(source, "://") - source);
        for (size_t i = 0; i < sizeof net_schemes / sizeof net_schemes[0]; i++)
            if (strlen(net_schemes[i].scheme) == n && !strncasecmp(source, net_schemes[i].scheme, n))
                l->src.protocols = net_schemes[i].protocols;
        if (!l->src.protocols)
            return tb_fail(e, TUBELET_ERR_UNSUPPORTED,
                           "%s: unsupported source scheme '%.*s' (a file, - for stdin, rtsp, rtmp, "
                           "http, https, udp, tcp, srt or v4l2:/dev/videoN)",
                           l->name, (int)(n < 64 ? n : 64), source);
        l->kind = SRC_NET;
    } else {
        l->kind = SRC_FILE;
    }
    if (!(l->location = strdup(loc))) return tb_fail(e, TUBELET_ERR_MEMORY, "out of memory");
    if (l->kind == SRC_FILE) {
        l->src.path = l->location;
    } else {
        l->src.url = l->location;
        l->src.interrupt = interrupt_cb;
        l->src.interrupt_user = l;
        l->src.bytes_read = &l->bytes;
    }
    return TUBELET_OK;
}

int tubelet_live_new(tubelet_live **out, const char *source, const tubelet_live_params *p,
                     char *err, size_t errlen) {
    tb_err e = {{0}};
    *out = NULL;
    if (!source || !*source)
        return out_err(tb_fail(&e, TUBELET_ERR_ARG, "empty source"), &e, err, errlen);
    tubelet_live *l = calloc(1, sizeof *l);
    if (!l) return out_err(tb_fail(&e, TUBELET_ERR_MEMORY, "out of memory"), &e, err, errlen);
    l->p = p ? *p : tubelet_live_default_params();
    if (l->p.timeout < 0) l->p.timeout = 0;
    l->stdin_flags = -1;
    atomic_init(&l->stop, 0);
    pthread_mutex_init(&l->mu, NULL);
    pthread_cond_init(&l->cv, NULL);
    int rc = parse_source(l, source, &e);
    if (rc) {
        tubelet_live_close(l);
        return out_err(rc, &e, err, errlen);
    }
    tb_log lg = {l->p.log, l->p.log_user};
    if (l->p.reconnect && l->kind != SRC_NET)
        tb_warn(&lg, "%s: reconnecting applies to network sources only", l->name);
    if (l->p.realtime && l->kind != SRC_FILE)
        tb_info(&lg, "%s: a live source comes at its sender's pace (realtime is for files)", l->name);
    *out = l;
    return TUBELET_OK;
}

/* Opens the source (again): the tb_video, and for stdin the non-blocking descriptor. */
static int open_source(tubelet_live *l, tb_err *e) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, avdevice_register_all);
    if (l->kind == SRC_NET) avformat_network_init();   /* reference-counted; TLS needs it */
    if (l->kind == SRC_STDIN && l->stdin_flags < 0) {
        /* FFmpeg's pipe protocol blocks in read(); non-blocking, it polls and sees a stop */
        struct stat st;
        int fl = fcntl(0, F_GETFL);
        if (fl >= 0 && fstat(0, &st) == 0 && !S_ISREG(st.st_mode) && !(fl & O_NONBLOCK) &&
            fcntl(0, F_SETFL, fl | O_NONBLOCK) == 0)
            l->stdin_flags = fl;
    }
    tb_video_params vp = tb_video_default_params();
    vp.n_threads = l->p.threads;
    vp.no_index = 1;
    vp.low_delay = l->kind != SRC_FILE;
    vp.log = (tb_log){l->p.log, l->p.log_user};
    l->last_data = now_s();
    l->bytes = l->last_bytes = 0, l->paused_bytes = -1, l->max_gap = 0;
    l->flushing = 0, l->timed_out = 0;
    l->catching_up = l->kind != SRC_FILE, l->catch_start = 0;
    int rc = tb_video_open_src(&l->v, &l->src, &vp, e);
    if (rc && l->kind == SRC_NET) avformat_network_deinit();
    if (rc && l->timed_out)
        tb_fail(e, rc, "%s: no video within %g s", l->name, l->p.timeout);
    return rc;
}

static void close_source(tubelet_live *l) {
    if (!l->v) return;
    tb_video_close(l->v);
    l->v = NULL;
    if (l->kind == SRC_NET) avformat_network_deinit();
}

int tubelet_live_connect(tubelet_live *l, char *err, size_t errlen) {
    tb_err e = {{0}};
    if (l->v) return TUBELET_OK;
    int rc = open_source(l, &e);
    if (!rc) {
        l->fps = tb_video_get_info(l->v)->fps;
    } else if (atomic_load(&l->stop)) {
        rc = tb_fail(&e, TUBELET_ERR_IO, "%s: stopped while opening", l->name);
    }
    return out_err(rc, &e, err, errlen);
}

double tubelet_live_fps(const tubelet_live *l) { return l->fps; }

int tubelet_live_is_file(const tubelet_live *l) { return l->kind == SRC_FILE && !l->p.realtime; }

/* Plans preprocessing for the source's current frame size; the output size may not change. */
static int plan_frames(tubelet_live *l, tb_err *e) {
    const tb_video_info *in = tb_video_get_info(l->v);
    if (l->pp && in->height == l->in_h && in->width == l->in_w) return TUBELET_OK;
    tb_preproc *pp = NULL;
    int rc = tb_preproc_new(&pp, &l->c, in->height, in->width, e);
    if (rc) return tb_prefix(e, rc, "%s: ", l->name);
    int oh, ow;
    tb_preproc_out_size(pp, &oh, &ow);
    if (l->pp && (oh != l->oh || ow != l->ow)) {
        tb_preproc_free(pp);
        return tb_fail(e, TUBELET_ERR_FORMAT,
                       "%s: the frames changed from %dx%d to %dx%d, which changes the model's "
                       "input size", l->name, l->in_w, l->in_h, in->width, in->height);
    }
    uint8_t *rgb = malloc((size_t)in->height * in->width * 3);
    if (!rgb) {
        tb_preproc_free(pp);
        return tb_fail(e, TUBELET_ERR_MEMORY, "%s: out of memory", l->name);
    }
    tb_preproc_free(l->pp);
    free(l->rgb);
    l->pp = pp, l->rgb = rgb;
    l->in_h = in->height, l->in_w = in->width, l->oh = oh, l->ow = ow;
    return TUBELET_OK;
}

/* Frame k of a connection: is it in a window, and is it a window's last frame. */
static int is_sampled(const tubelet_live *l, int64_t k) {
    if (l->hop < (int64_t)l->T * l->stride) return k % l->stride == 0;
    int64_t r = k % l->hop;
    return r % l->stride == 0 && r / l->stride < l->T;
}

static int completes(const tubelet_live *l, int64_t k) {
    int64_t d = k - (int64_t)(l->T - 1) * l->stride;
    return d >= 0 && d % l->hop == 0;
}

static void *decoder_main(void *arg);

int tubelet_live_start(tubelet_live *l, const tubelet_preprocessor *pp, int num_frames,
                       int stride, int hop, int *out_h, int *out_w, char *err, size_t errlen) {
    tb_err e = {{0}};
    int rc = TUBELET_OK;
    if (!l->v || l->started)
        rc = tb_fail(&e, TUBELET_ERR_ARG, "%s: tubelet_live_start after connect, once", l->name);
    else if (num_frames < 1 || num_frames > 4096 || stride < 1 || hop < 1)
        rc = tb_fail(&e, TUBELET_ERR_ARG, "%s: windows need 1..4096 frames, stride and hop >= 1",
                     l->name);
    else if (hop % stride && (int64_t)hop < (int64_t)num_frames * stride)
        rc = tb_fail(&e, TUBELET_ERR_ARG,
                     "%s: hop %d must be a multiple of the stride %d or >= a window (%lld)",
                     l->name, hop, stride, (long long)num_frames * stride);
    if (rc) return out_err(rc, &e, err, errlen);
    l->T = num_frames, l->stride = stride, l->hop = hop;
    l->c = *tb_preprocessor_config(pp);
    if ((rc = plan_frames(l, &e))) return out_err(rc, &e, err, errlen);
    l->frame_floats = (size_t)3 * l->oh * l->ow;
    size_t window = l->frame_floats * (size_t)num_frames * sizeof(float);
    l->ring = malloc(window), l->staging = malloc(window);
    l->pending = malloc(window), l->taken = malloc(window);
    if (!l->ring || !l->staging || !l->pending || !l->taken)
        return out_err(tb_fail(&e, TUBELET_ERR_MEMORY, "%s: out of memory", l->name), &e, err,
                       errlen);
    if (pthread_create(&l->thread, NULL, decoder_main, l))
        return out_err(tb_fail(&e, TUBELET_ERR_MEMORY, "%s: cannot start the decoder thread",
                               l->name), &e, err, errlen);
    l->started = 1;
    *out_h = l->oh, *out_w = l->ow;
    return TUBELET_OK;
}

/* ---- the decoder thread ---- */

static void push_event(tubelet_live *l, const tubelet_live_item *it) {
    pthread_mutex_lock(&l->mu);
    if (l->n_events == MAX_EVENTS) { /* nobody reads them: keep the newest */
        memmove(l->events, l->events + 1, sizeof l->events[0] * (MAX_EVENTS - 1));
        memmove(l->event_seq, l->event_seq + 1, sizeof l->event_seq[0] * (MAX_EVENTS - 1));
        l->n_events--;
    }
    l->events[l->n_events] = *it;
    l->event_seq[l->n_events++] = ++l->seq;
    pthread_cond_broadcast(&l->cv);
    pthread_mutex_unlock(&l->mu);
}

/* Publishes the last n_real sampled frames (padded to T with the last) as a window. A file read
 * as fast as the caller goes waits for the mailbox to be empty, and so does the last window of a
 * stream (nothing comes after it); a live source replaces what is there, except while it catches
 * up. 1 when stopped. */
static int publish(tubelet_live *l, int64_t first, int n_real, double arrival, int last) {
    const size_t f = l->frame_floats;
    for (int j = 0; j < l->T; j++) {
        int64_t s = l->n_sampled - n_real + (j < n_real ? j : n_real - 1);
        memcpy(l->staging + (size_t)j * f, l->ring + (size_t)(s % l->T) * f, f * sizeof(float));
    }
    /* Opening a live source reads seconds of it (FFmpeg's probe: 20 frames to estimate the
     * frame rate), which then decode at once: their windows wait for the caller as a file's do,
     * for one window's span at most, so that a slow model does not start a window behind. */
    if (l->catching_up && !l->catch_start) l->catch_start = now_s();
    if (l->catching_up && l->fps > 0 && now_s() - l->catch_start > l->T * l->stride / l->fps)
        l->catching_up = 0;
    const int block = last || tubelet_live_is_file(l) || l->catching_up;
    pthread_mutex_lock(&l->mu);
    while (block && l->has_pending && !atomic_load(&l->stop)) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 100 * 1000000L;
        if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
        pthread_cond_timedwait(&l->cv, &l->mu, &ts);
    }
    int stopped = atomic_load(&l->stop);
    if (!stopped) {
        if (l->has_pending) l->skipped++;
        float *t = l->pending;
        l->pending = l->staging, l->staging = t;
        memset(&l->pending_item, 0, sizeof l->pending_item);
        l->pending_item.kind = TUBELET_LIVE_WINDOW;
        l->pending_item.first = first;
        l->pending_item.n_real = n_real;
        l->pending_item.arrival = arrival;
        l->pending_seq = ++l->seq;
        l->has_pending = 1;
        pthread_cond_broadcast(&l->cv);
    }
    pthread_mutex_unlock(&l->mu);
    return stopped;
}

/* Reopens a dropped network source with backoff: 0 when back, 1 when stopped, else a status
 * with e set (gave up). */
static int reconnect(tubelet_live *l, int *attempts, tb_err *e) {
    tb_log lg = {l->p.log, l->p.log_user};
    double delay = 0.25, since = now_s();
    close_source(l);
    for (int a = 1;; a++) {
        if (sleep_until(l, now_s() + delay)) return 1;
        tb_err e2 = {{0}};
        int rc = open_source(l, &e2);
        if (!rc && (rc = plan_frames(l, e))) return rc;   /* another frame size: not retried */
        if (!rc) {
            *attempts = a;
            tubelet_live_item it = {.kind = TUBELET_LIVE_RECONNECTED, .attempts = a,
                                    .down = now_s() - since};
            snprintf(it.message, sizeof it.message, "%.400s: reconnected after %d attempt%s", l->name,
                     a, a > 1 ? "s" : "");
            push_event(l, &it);
            return 0;
        }
        close_source(l);
        if (atomic_load(&l->stop)) return 1;
        if (l->p.reconnect_tries > 0 && a >= l->p.reconnect_tries)
            return tb_fail(e, TUBELET_ERR_IO, "%s: gave up reconnecting after %d attempts: %s",
                           l->name, a, e2.msg);
        delay = delay * 2 > 5 ? 5 : delay * 2;
        tb_info(&lg, "reconnecting: attempt %d failed: %s; next in %.2f s", a, e2.msg, delay);
    }
}

static void finish(tubelet_live *l, int status, const char *msg) {
    pthread_mutex_lock(&l->mu);
    l->ended = 1;
    l->end_status = status;
    snprintf(l->end_msg, sizeof l->end_msg, "%s", msg ? msg : "");
    pthread_cond_broadcast(&l->cv);
    pthread_mutex_unlock(&l->mu);
}

static void *decoder_main(void *arg) {
    tubelet_live *l = arg;
    tb_log lg = {l->p.log, l->p.log_user};
    tb_err e = {{0}};
    int64_t base = 0, k = 0, last_w = -1;   /* frames before this connection, frames in it */
    double t_open = now_s(), last_arrival = t_open;
    for (;;) {
        if (atomic_load(&l->stop)) break;
        const int sampled = is_sampled(l, k);
        const double t_read = now_s();
        int got = tb_video_read(l->v, sampled ? l->rgb : NULL, &e);
        if (got < 0) {
            finish(l, -got, e.msg);
            return NULL;
        }
        if (got == 2) { /* a pause handed out what the demuxer held: wait for bytes again */
            l->flushing = 0;
            continue;
        }
        if (got == 1) {
            /* a read that waited for the source (over half a frame): the open's frames are
             * decoded, what comes now is live */
            if (l->fps > 0 && now_s() - t_read > 0.5 / l->fps) l->catching_up = 0;
            /* a frame handed out by a pause or the timeout arrived with the last bytes, though
             * it came out of the decoder only now: its lag counts the silence */
            if (!l->flushing) l->last_data = now_s();
            if (l->p.realtime && l->kind == SRC_FILE && l->fps > 0 &&
                sleep_until(l, t_open + (double)k / l->fps))
                break;
            last_arrival = l->flushing ? l->last_data : now_s();
            if (sampled) {
                float *slot = l->ring + (size_t)(l->n_sampled % l->T) * l->frame_floats;
                int rc = tb_preproc_run(l->pp, l->rgb, 1, TB_CROP_CENTER, slot, &e);
                if (rc) {
                    tb_prefix(&e, rc, "%s: ", l->name);
                    finish(l, rc, e.msg);
                    return NULL;
                }
                l->n_sampled++;
            }
            if (completes(l, k)) {
                last_w = (k - (int64_t)(l->T - 1) * l->stride) / l->hop;
                if (publish(l, base + last_w * l->hop, l->T, last_arrival, 0)) break;
            }
            k++;
            continue;
        }
        /* the end of this connection */
        if (atomic_load(&l->stop)) break;
        char why[1100];
        if (l->timed_out)
            snprintf(why, sizeof why, "%s: no data for %g s", l->name, l->p.timeout);
        else
            snprintf(why, sizeof why, "%s", e.msg);
        if (l->kind == SRC_NET && l->p.reconnect) {
            tubelet_live_item it = {.kind = TUBELET_LIVE_DISCONNECTED};
            snprintf(it.message, sizeof it.message, "%.500s", why);
            push_event(l, &it);
            int attempts = 0, rc = reconnect(l, &attempts, &e);
            if (rc == 1) break;
            if (rc) {
                finish(l, rc, e.msg);
                return NULL;
            }
            base += k, k = 0, last_w = -1, l->n_sampled = 0;
            t_open = now_s();
            continue;
        }
        /* the stream's last window, as tubelet_video_stream's: the first one not complete,
         * padded with its last real frame */
        int64_t next_first = (last_w + 1) * l->hop;
        if (next_first < k) {
            int64_t real = (k - next_first + l->stride - 1) / l->stride;
            if (real > l->T) real = l->T;
            if (publish(l, base + next_first, (int)real, last_arrival, 1)) break;
        }
        if (l->kind != SRC_FILE) tb_info(&lg, "%s", why);
        break;
    }
    finish(l, 0, NULL);
    return NULL;
}

/* ---- the caller's side ---- */

int tubelet_live_next(tubelet_live *l, float *pixels, tubelet_live_item *it, char *err,
                      size_t errlen) {
    tb_err e = {{0}};
    if (!l->started) {
        out_err(tb_fail(&e, TUBELET_ERR_ARG, "%s: tubelet_live_start first", l->name), &e, err,
                errlen);
        return -TUBELET_ERR_ARG;
    }
    pthread_mutex_lock(&l->mu);
    for (;;) {
        if (l->n_events && (!l->has_pending || l->event_seq[0] < l->pending_seq)) {
            *it = l->events[0];
            memmove(l->events, l->events + 1, sizeof l->events[0] * (size_t)(l->n_events - 1));
            memmove(l->event_seq, l->event_seq + 1, sizeof l->event_seq[0] * (size_t)(l->n_events - 1));
            l->n_events--;
            pthread_mutex_unlock(&l->mu);
            return 1;
        }
        if (l->has_pending) {
            float *t = l->taken;
            l->taken = l->pending, l->pending = t;
            *it = l->pending_item;
            it->skipped = l->skipped;
            l->skipped = 0;
            l->has_pending = 0;
            pthread_cond_broadcast(&l->cv);
            pthread_mutex_unlock(&l->mu);
            memcpy(pixels, l->taken, l->frame_floats * (size_t)l->T * sizeof(float));
            return 1;
        }
        if (l->ended || atomic_load(&l->stop)) {
            int st = l->ended ? l->end_status : 0;
            if (st) snprintf(e.msg, sizeof e.msg, "%s", l->end_msg);
            pthread_mutex_unlock(&l->mu);
            if (st) out_err(st, &e, err, errlen);
            return -st;
        }
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 100 * 1000000L;   /* a stop from a signal handler cannot signal cv */
        if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
        pthread_cond_timedwait(&l->cv, &l->mu, &ts);
    }
}

void tubelet_live_stop(tubelet_live *l) {
    if (l) atomic_store(&l->stop, 1);
}

void tubelet_live_close(tubelet_live *l) {
    if (!l) return;
    atomic_store(&l->stop, 1);
    if (l->started) pthread_join(l->thread, NULL);
    close_source(l);
    if (l->stdin_flags >= 0) fcntl(0, F_SETFL, l->stdin_flags);
    tb_preproc_free(l->pp);
    free(l->rgb), free(l->ring), free(l->staging), free(l->pending), free(l->taken);
    free(l->location);
    pthread_mutex_destroy(&l->mu);
    pthread_cond_destroy(&l->cv);
    free(l);
}
