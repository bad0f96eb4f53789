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
double tubelet_video_stream_fps(const tubelet_video_stream *s);
int tubelet_video_stream_begin(tubelet_video_stream *s, int num_frames, int stride, int hop,
                               int *out_h, int *out_w, char *err, size_t errlen);
int tubelet_video_stream_next(tubelet_video_stream *s, float *pixels, int64_t *first,
                              int *n_real, char *err, size_t errlen);
void tubelet_video_stream_close(tubelet_video_stream *s);

#ifdef __cplusplus
}
#endif

#endif
