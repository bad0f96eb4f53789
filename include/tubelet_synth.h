/* tubelet_synth.h — the procedural motion dataset (docs/synth.md): 12 classes in opposite pairs
 * (move right/left, ..., orbit cw/ccw) whose clips only the order of the frames tells apart,
 * written as video files with train.csv, val.csv, labels.txt and synth.json. Same parameters ->
 * byte-identical files. Errors: a status from tubelet_status and a message in err naming the
 * file or the field. (The renderer itself, for tests, is src/synth/synth.h.) */
#ifndef TUBELET_SYNTH_H
#define TUBELET_SYNTH_H

#include <stddef.h>
#include <stdint.h>

#include "tubelet.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Classes of the dataset. */
int tubelet_synth_n_classes(void);

typedef struct {
    const char *dir;        /* output directory: missing, empty, or an earlier synth output */
    int size;               /* frame side S in pixels, even, 16..512 (default 64) */
    int frames;             /* T, 4..256 (default 16) */
    int max_distractors;    /* 0..3 (default 3) */
    float noise;            /* noise and flicker scale, 0..4 (default 1) */
    int per_class;          /* clips per class, 1..100000 (default 100) */
    int val_percent;        /* share of each class in val.csv, 0..100 (default 20) */
    uint64_t seed;          /* default 0 */
    int fps;                /* 1..120 (default 8) */
    const char *codec;      /* "h264" (libx264, .mp4; default) or "mjpeg" (.avi) */
    int n_threads;          /* clips encoded in parallel; 0 = all cores */
    int force;              /* 1 = write into a non-empty directory that is not synth output */
    void (*progress)(void *user, int done, int total); /* after each clip, never two at a time */
    void *progress_user;
} tubelet_synth_params;

tubelet_synth_params tubelet_synth_default_params(void);
/* 1 if name is a codec tubelet_synth_params.codec accepts. */
int tubelet_synth_codec_valid(const char *name);

typedef struct {
    int n_train, n_val;     /* clips written */
    int64_t video_bytes;    /* the video files' sizes together */
} tubelet_synth_summary;

/* Writes the dataset (a new directory whole under a temporary name, then renamed into place). */
int tubelet_synth_write(const tubelet_synth_params *p, tubelet_synth_summary *sum, char *err,
                        size_t errlen);

#ifdef __cplusplus
}
#endif

#endif
