/* Training data: a CSV/TSV of `path,label` (paths relative to the CSV), the class list, and
 * clips decoded with the video pipeline — with the references' training augmentation
 * (random temporal offset, random resized crop with scale jitter, optional horizontal flip). */
#ifndef TB_DATA_H
#define TB_DATA_H

#include <stdint.h>

#include "../common.h"
#include "../video/video.h"

typedef struct {
    char **paths;      /* resolved against the CSV's directory */
    int *labels;
    int n;
    char **classes;    /* shared with the class list given to tb_dataset_load, or owned */
    int n_classes, owns_classes;
} tb_dataset;

/* Reads csv. Paths are relative to the CSV's directory (absolute paths and ../ are followed),
 * or, with root non-NULL, relative to root and confined to it. classes: the class names
 * (n_classes > 0), or NULL to take labels.txt beside the CSV (a class listed twice is an
 * error), or else the sorted distinct labels of this CSV. A label not in the classes, a row
 * without two fields, or an empty file is an error naming the file and line. */
int tb_dataset_load(tb_dataset *d, const char *csv, const char *root, char **classes,
                    int n_classes, tb_err *e);
void tb_dataset_free(tb_dataset *d);
/* Unlabelled videos (pretraining): a directory (its files with a video extension, sorted), or a
 * list file of paths, one a line, relative to the list (or confined to root); a CSV's label
 * column (after a tab or the last comma) and a "path,label" header are ignored. One class. */
int tb_dataset_load_videos(tb_dataset *d, const char *list, const char *root, tb_err *e);

typedef struct {
    int frames, height, width;  /* the model's clip */
    int train;                  /* 1: augment; 0: the evaluation preprocessing */
    double min_scale;           /* random resized crop: area fraction in [min_scale, 1] */
    int hflip;                  /* 1: flip half of the clips (off by default: it swaps left/right) */
    const tb_preproc_config *pc;
} tb_clip_params;

/* Decodes and preprocesses clip i into out (frames, 3, height, width), drawing augmentation
 * from rng (a splitmix64 state). */
int tb_dataset_clip(const tb_dataset *d, int i, const tb_clip_params *p, uint64_t rng,
                    float *out, tb_err *e);

#endif
