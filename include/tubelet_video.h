/* tubelet_video.h — the optional video part of tubelet's public API: a video file in, the
 * pixel_values a model sees out (decode with FFmpeg's libraries, sample frames as the
 * references do, preprocess as transformers' video processors do). tubelet.h does not need it;
 * programs that bring their own pixels never include it.
 *
 *   tubelet_preprocessor *pp;
 *   tubelet_preprocessor_load(&pp, "videomae-base-k400", NULL, NULL, err, sizeof err);
 *   tubelet_views_params vp = tubelet_views_default_params();
 *   tubelet_views v;
 *   if (tubelet_views_load(&v, "clip.mp4", pp, &vp, 16, err, sizeof err) == 0) {
 *       ... v.pixels is (n_views, T, 3, H, W) float32 for tubelet_forward ...
 *       tubelet_views_free(&v);
 *   }
 *   tubelet_preprocessor_free(pp);
 *
 * Errors: a status from tubelet_status and a message in err that names the file. Every function
 * is safe to call from several threads on different outputs; a preprocessor is read-only. */
#ifndef TUBELET_VIDEO_H
#define TUBELET_VIDEO_H

#include <stddef.h>
#include <stdint.h>

#include "tubelet.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The preprocessing of a model directory: preprocessor_config.json (or
 * video_preprocessor_config.json); without either, transformers' VideoMAE processor defaults
 * (shortest edge 224, centre crop 224, mean/std 0.5) with a warning through log. Given an
 * official checkpoint file (docs/checkpoints.md): the preprocessor_config.json beside it, else its
 * family's preprocessing with the crop, mean and std of the file's own training config. */
typedef struct tubelet_preprocessor tubelet_preprocessor;
int tubelet_preprocessor_load(tubelet_preprocessor **out, const char *model_dir, tubelet_log_fn log,
                              void *log_user, char *err, size_t errlen);
/* The VideoMAE processor at a model's input size (shortest edge and crop height x width). */
int tubelet_preprocessor_default(tubelet_preprocessor **out, int height, int width);
/* preprocessor_config.json text (malloc'd; free with free()); NULL when out of memory. */
char *tubelet_preprocessor_to_json(const tubelet_preprocessor *p);
void tubelet_preprocessor_free(tubelet_preprocessor *p);
/* A clip-feature protocol's preprocessing (tubelet features --protocol,
 * docs/temporal-localisation.md) from base's: stretch_h > 0 stretches each frame to stretch_h x
 * stretch_w (aspect ignored, no crop) the way VideoMAE V2's extract_tad_feature.py does: pixels
 * to float32 x / 255 first, then torch.nn.functional.interpolate(mode="bilinear",
 * align_corners=False), no antialias; stretch_h 0 keeps base's resize and crop. normalize 0
 * leaves the pixels in [0, 1] (x times base's rescale factor; ViViT's offset dropped), 1 keeps
 * base's mean and std. */
int tubelet_preprocessor_protocol(tubelet_preprocessor **out, const tubelet_preprocessor *base,
                                  int stretch_h, int stretch_w, int normalize);
/* Its normalisation: mean and std per channel; returns 1 if it normalises (do_normalize). */
int tubelet_preprocessor_normalization(const tubelet_preprocessor *p, float mean[3], float std[3]);

typedef struct {
    const char *sampling; /* "hf" (default), "uniform", "clip", "hf-rate" (docs/video.md) */
    int stride;           /* clip: frame stride; hf-rate: frame_sampling_rate; 0 = the default */
    int clips;            /* temporal views (default 1) */
    int crops;            /* spatial views: 1 (centre, default) or 3 (first/centre/last) */
    int num_frames;       /* frames per view; 0 = the model's */
    int threads;          /* decoder threads; 0 = FFmpeg's choice */
    tubelet_log_fn log;   /* warnings (NULL: dropped) */
    void *log_user;
    /* Bounds for untrusted input (0 / NULL: none): a video that declares a side above max_side
     * is refused before any decoding, and decoding stops with an error at the first frame above
     * it, after max_frames frames, or once interrupt(interrupt_user) returns non-zero (polled per
     * packet). max_side also caps the decoder's frame buffers. */
    int max_side;
    int64_t max_frames;
    int (*interrupt)(void *);
    void *interrupt_user;
} tubelet_views_params;
tubelet_views_params tubelet_views_default_params(void);
/* 1 if name is a sampling mode tubelet_views_params.sampling accepts. */
int tubelet_sampling_valid(const char *name);

typedef struct {
    float *pixels;        /* (n_views, T, C, H, W), owned */
    int n_views, T, C, H, W;
    int64_t n_frames;     /* in the video */
    double fps;
    int width, height;    /* of the video, after rotation */
    int n_padded;         /* sampled positions that repeat a frame: the video was too short */
    int64_t *indices;     /* clips x T frame indices, owned */
} tubelet_views;

/* Decodes, samples and preprocesses one video: clips x crops views of T frames. model_frames is
 * used when p->num_frames is 0. */
int tubelet_views_load(tubelet_views *v, const char *path, const tubelet_preprocessor *pp,
                       const tubelet_views_params *p, int model_frames, char *err, size_t errlen);
/* The same from a video file's bytes in memory (e.g. an upload), decoded through FFmpeg's custom
 * I/O: no temporary file, and no file or URL is opened. The results are those of the path version
 * on the same bytes. data must stay valid during the call; name is for messages only (NULL:
 * "<memory>"). The other *_memory functions below work the same way. */
int tubelet_views_load_memory(tubelet_views *v, const void *data, size_t size, const char *name,
                              const tubelet_preprocessor *pp, const tubelet_views_params *p,
                              int model_frames, char *err, size_t errlen);
void tubelet_views_free(tubelet_views *v);

/* The sampled frames themselves, before preprocessing: clips x T RGB frames. */
typedef struct {
    uint8_t *rgb;         /* (n, height, width, 3), owned */
    int n, height, width;
    int64_t *indices;     /* n frame indices, owned */
    int64_t n_frames;
    double fps;
    int n_padded;
} tubelet_frames;
int tubelet_frames_read(tubelet_frames *f, const char *path, const tubelet_views_params *p,
                        int num_frames, char *err, size_t errlen);
int tubelet_frames_read_memory(tubelet_frames *f, const void *data, size_t size, const char *name,
                               const tubelet_views_params *p, int num_frames, char *err,
                               size_t errlen);
void tubelet_frames_free(tubelet_frames *f);

/* Preprocesses n RGB frames (n, height, width, 3) in memory into (n, 3, *out_h, *out_w); out
 * NULL: only the output size. crop: 0 centre, 1 first (top/left), 2 last. */
int tubelet_preprocess_frames(const tubelet_preprocessor *pp, const uint8_t *rgb, int n, int height,
                              int width, int crop, float *out, int *out_h, int *out_w, char *err,
                              size_t errlen);

/* Windows over a long video (tubelet timeline), decoded in one forward pass with memory bounded
 * by one window; no packet scan first, so the frame rate is the container's (0: unknown).
 * Window w holds frames first + j * stride, j < num_frames, with first = w * hop; frames that
 * consecutive windows share are decoded once; the last window repeats its last real frame. hop
 * must be a multiple of stride or at least num_frames * stride. begin gives the size of the
 * preprocessed frames (centre crop); next writes one window as (num_frames, 3, out_h, out_w)
 * into pixels and returns 1, 0 after the last window, or -status with a message in err. */
typedef struct tubelet_video_stream tubelet_video_stream;
int tubelet_video_stream_open(tubelet_video_stream **out, const char *path,
                              const tubelet_preprocessor *pp, int threads, tubelet_log_fn log,
                              void *log_user, char *err, size_t errlen);
/* From memory: data must stay valid until tubelet_video_stream_close. */
int tubelet_video_stream_open_memory(tubelet_video_stream **out, const void *data, size_t size,
                                     const char *name, const tubelet_preprocessor *pp, int threads,
                                     tubelet_log_fn log, void *log_user, char *err, size_t errlen);
/* The same with p's threads, log and bounds (max_side, max_frames, interrupt); its sampling,
 * stride, clips, crops and num_frames are not used. */
int tubelet_video_stream_open_memory_params(tubelet_video_stream **out, const void *data,
                                            size_t size, const char *name,
                                            const tubelet_preprocessor *pp,
                                            const tubelet_views_params *p, char *err,
                                            size_t errlen);
double tubelet_video_stream_fps(const tubelet_video_stream *s);
/* The video's length in seconds as its container records it; 0: unknown. */
double tubelet_video_stream_duration(const tubelet_video_stream *s);
int tubelet_video_stream_begin(tubelet_video_stream *s, int num_frames, int stride, int hop,
                               int *out_h, int *out_w, char *err, size_t errlen);
int tubelet_video_stream_next(tubelet_video_stream *s, float *pixels, int64_t *first,
                              int *n_real, char *err, size_t errlen);
void tubelet_video_stream_close(tubelet_video_stream *s);

/* Windows over a video (tubelet timeline, watch, serve): window and stride seconds at fps for a
 * model of T frames -> the frame stride inside a window (fstride) and the hop between window
 * starts, for tubelet_video_stream_begin and tubelet_live_start (window 0: T frames at stride 4;
 * stride 0: the window). A window longer than a video of n_frames (0: unknown, a live stream)
 * becomes one window over the whole video: then it returns n_frames (the caller says so), else 0. */
int64_t tubelet_window_plan(double window, double stride, double fps, int T, int64_t n_frames,
                            int *fstride, int *hop);
/* The seconds a window covers: from its first frame to the end of its last real one. */
void tubelet_window_span(int64_t first, int n_real, int fstride, double fps, double *t0,
                         double *t1);

/* Live sources (tubelet watch, docs/watch.md): windows over a stream as it arrives. A decoder
 * thread reads the source, preprocesses the frames the windows need (as tubelet_video_stream
 * does: a file gives its windows, value for value) into a ring of frames, and hands the newest
 * complete window to tubelet_live_next. A caller slower than the stream never builds a backlog:
 * a window it did not take in time is replaced by the next one and counted as skipped. A file
 * (without realtime) is the exception: it is read as fast as the caller takes windows, none
 * dropped; so are the frames a live source's open read (FFmpeg's probe), for one window's span
 * at most. An MPEG-TS source silent for 1 s (or 3 times its longest silence so far) pauses: its
 * demuxer hands out the frames it held for the next packets, and the reading goes on
 * (docs/watch.md).
 *
 * Sources: a file path (or file://PATH); "-" for stdin (read through FFmpeg's pipe protocol;
 * the descriptor is made non-blocking while open, so that a stop is seen); rtsp://, rtmp://,
 * http://, https://, udp://, tcp://, srt:// URLs, each opened through exactly the FFmpeg
 * protocols its scheme needs (rtsp: rtsp,rtp,udp,tcp; https: https,tls,tcp; http: http,tcp; udp;
 * tcp; srt; rtmp: rtmp,tcp); v4l2:/dev/videoN, a camera through libavdevice. Anything else is
 * refused.
 *
 *   tubelet_live *l;
 *   tubelet_live_params p = tubelet_live_default_params();
 *   tubelet_live_new(&l, "udp://127.0.0.1:5000", &p, err, sizeof err);
 *   tubelet_live_connect(l, err, sizeof err);              (blocks; tubelet_live_stop ends it)
 *   tubelet_live_start(l, pp, T, stride, hop, &h, &w, err, sizeof err);
 *   tubelet_live_item it;
 *   while (tubelet_live_next(l, pixels, &it, err, sizeof err) == 1) ... it.kind ...
 *   tubelet_live_close(l); */
typedef struct tubelet_live tubelet_live;
typedef struct {
    int threads;          /* decoder threads (0: FFmpeg's choice) */
    int realtime;         /* a file: pace it at its frame rate, dropping windows as a stream */
    int reconnect;        /* a network source that drops (ends, breaks or stalls) is reopened,
                             after 0.25 s, then at doubling delays of at most 5 s */
    int reconnect_tries;  /* failed reopening attempts in a row before giving up (0: no limit) */
    double timeout;       /* network: seconds without a byte, the open's included, that count
                             as a drop (default 10; 0: none) */
    tubelet_log_fn log;   /* warnings and news (reconnect attempts) */
    void *log_user;
} tubelet_live_params;
tubelet_live_params tubelet_live_default_params(void);

/* Checks the source's form (no I/O yet). */
int tubelet_live_new(tubelet_live **out, const char *source, const tubelet_live_params *p,
                     char *err, size_t errlen);
/* Opens it: finds the video stream (a network source: up to timeout; tubelet_live_stop ends
 * the wait). */
int tubelet_live_connect(tubelet_live *l, char *err, size_t errlen);
/* The stream's frame rate as tubelet_video_stream_fps gives it (0: unknown). */
double tubelet_live_fps(const tubelet_live *l);
/* 1 for a file read as fast as the caller goes (no window dropped). */
int tubelet_live_is_file(const tubelet_live *l);
/* Starts the decoder thread: windows of num_frames frames stride apart, one every hop frames,
 * as tubelet_video_stream_begin (the same rules for hop), preprocessed by pp. */
int tubelet_live_start(tubelet_live *l, const tubelet_preprocessor *pp, int num_frames,
                       int stride, int hop, int *out_h, int *out_w, char *err, size_t errlen);

enum { TUBELET_LIVE_WINDOW = 1, TUBELET_LIVE_DISCONNECTED = 2, TUBELET_LIVE_RECONNECTED = 3 };
typedef struct {
    int kind;             /* TUBELET_LIVE_WINDOW, or an event of a reconnecting source */
    int64_t first;        /* window: the number of its first frame, counted from the stream's
                             first (across reconnections) */
    int n_real;           /* window: frames that are real; the last window of a stream that
                             ends repeats its last one */
    double arrival;       /* window: when its newest frame came out of the decoder, or, handed
                             out by a pause or the timeout, when the last bytes came
                             (CLOCK_MONOTONIC seconds) */
    int64_t skipped;      /* window: windows dropped since the previous one handed out */
    int attempts;         /* reconnected: the attempts it took */
    double down;          /* reconnected: seconds without the source */
    char message[512];    /* events: what happened */
} tubelet_live_item;
/* Waits for the next window (written to pixels as (num_frames, 3, out_h, out_w)) or event.
 * Returns 1 with an item, 0 at the end of the stream or after tubelet_live_stop, -status after
 * an error. */
int tubelet_live_next(tubelet_live *l, float *pixels, tubelet_live_item *it, char *err,
                      size_t errlen);
/* Asks everything to end soon (next returns 0); safe from a signal handler. */
void tubelet_live_stop(tubelet_live *l);
void tubelet_live_close(tubelet_live *l);

#ifdef __cplusplus
}
#endif

#endif
