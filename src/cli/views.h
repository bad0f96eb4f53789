/* Video file → the pixel_values views a model sees: decode, sample, preprocess. Shared by the
 * classify, preprocess, features and timeline commands. */
#ifndef TB_CLI_VIEWS_H
#define TB_CLI_VIEWS_H

#include <stdint.h>

#include "tubelet.h"
#include "video/video.h"

typedef struct {
    const char *sampling; /* clip, uniform, hf, hf-rate */
    int stride;           /* clip: frame stride; hf-rate: frame_sampling_rate; 0 = mode default */
    int clips;            /* temporal views */
    int crops;            /* spatial views: 1 (centre) or 3 (left/centre/right) */
    int num_frames;       /* 0 = the model's num_frames */
    int threads;          /* decoder threads */
} views_opts;

/* The preprocessing a model directory asks for (preprocessor_config.json, or the processor
 * defaults with a warning when the directory has none). */
int views_preproc_config(const char *model_dir, tb_preproc_config *pc, char *err, size_t errlen);

typedef struct {
    float *pixels;   /* (n_views, T, C, H, W), owned */
    int n_views, T, C, H, W;
    int64_t n_frames;    /* in the video */
    double fps;
    int width, height;   /* of the video, after rotation */
    int n_padded;        /* sampled positions that repeat a frame: the video was too short */
    int64_t *indices;    /* clips x T frame indices, owned */
} views;

/* Fills v for one video; on error returns non-zero with a message that names the file. */
int views_load(views *v, const char *path, const tb_preproc_config *pc, const views_opts *o,
               int model_frames, char *err, size_t errlen);
void views_free(views *v);

#endif
