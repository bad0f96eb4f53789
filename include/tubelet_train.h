/* tubelet_train.h — training and fine-tuning as a library call: what `tubelet train` runs, for
 * programs (the Python package, a multi-process launcher) that want it without the CLI. Needs
 * tubelet_video.h's decoding (the clips are videos).
 *
 *   tubelet_train_params p = tubelet_train_default_params();
 *   p.model_dir = "config-only-or-checkpoint/"; p.train_csv = "train.csv"; p.val_csv = "val.csv";
 *   p.outdir = "run"; p.epochs = 10;
 *   if (tubelet_train(&p, &result, err, sizeof err)) fprintf(stderr, "%s\n", err);
 *
 * The run directory, the checkpoints and their guarantees are those of docs/training.md. */
#ifndef TUBELET_TRAIN_H
#define TUBELET_TRAIN_H

#include <stddef.h>
#include <stdint.h>

#include "tubelet.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The processes of one job. Built with `make MPI=1`, tubelet_dist_init joins the Open MPI job
 * it was started in (mpirun -np N); otherwise it returns a one-process handle and
 * tubelet_dist_available() is 0. A NULL handle means one process everywhere. */
typedef struct tubelet_dist tubelet_dist;
int tubelet_dist_init(tubelet_dist **out, int *argc, char ***argv, char *err, size_t errlen);
int tubelet_dist_rank(const tubelet_dist *d);
int tubelet_dist_size(const tubelet_dist *d);
int tubelet_dist_available(void);
void tubelet_dist_finalize(tubelet_dist *d);
/* Collectives for sharded work (every rank calls them, in the same order): the sum of x over the
 * ranks, in place; every rank's n bytes concatenated in rank order at rank 0 (*out malloc'd
 * there, NULL elsewhere). */
int tubelet_dist_sum(tubelet_dist *d, double *x, size_t n, char *err, size_t errlen);
int tubelet_dist_gather(tubelet_dist *d, const void *x, size_t n, void **out, size_t *out_n,
                        char *err, size_t errlen);
/* This rank's share [*first, *first + *count) of n items: contiguous, balanced, in order. */
void tubelet_dist_share(const tubelet_dist *d, int n, int *first, int *count);

typedef struct {
    int epoch, epochs;       /* 1-based epoch in progress */
    int step, steps;         /* steps done in this epoch, of steps */
    double loss, accuracy;   /* running means over the epoch so far */
    double clips_per_s, eta_s;
} tubelet_train_progress;

typedef struct {
    int epoch;               /* 1-based, just finished */
    double train_loss, val_loss, val_accuracy, seconds;
    /* several ranks: per optimiser step, the seconds the optimiser waited for the gradient
     * all-reduce after the backward, and from its first piece's start to its end */
    double allreduce_wait_s, allreduce_s;
} tubelet_epoch_result;

typedef struct {
    /* what to train: one of model_dir (a Hugging Face directory, possibly config.json only) or
     * arch (a built-in name, random weights) */
    const char *model_dir, *arch;
    const char *train_csv, *val_csv; /* `path,label` rows; classes from labels.txt beside the
                                        training CSV, or its sorted labels */
    const char *data_root;   /* NULL: paths relative to each CSV; else confined to this root */
    const char *outdir;
    int epochs, batch, seed, threads, stop_after, resume;
    double lr;
    int freeze_encoder;      /* 1: the encoder frozen, its probe trained (the classifier and what
                                pools for it: V-JEPA 2's attentive pooler); the config's
                                freeze_encoder too */
    const char *config_path; /* the train config (tubelet train --help): a JSON file, */
    const char *config_json; /* or its text (when config_path is NULL); both NULL: defaults */
    int64_t max_memory;      /* 0: the machine's memory; see tubelet_load_params */
    tubelet_log_fn log;      /* warnings (level 1) and the run's report lines (level 2) */
    void *log_user;
    void (*on_progress)(void *user, const tubelet_train_progress *p); /* after every step */
    void (*on_epoch)(void *user, const tubelet_epoch_result *r);      /* after validation */
    void *user;
    /* polled between steps and validation batches: non-zero stops the run there (the epoch in
     * progress is abandoned; the last checkpoint is intact) with TUBELET_INTERRUPTED */
    const volatile int *stop;
    /* data parallel over the ranks of dist (NULL: this process alone): each rank decodes and
     * runs its share of every batch (rows [r*ceil(B/N), ...)), the gradients are summed over
     * the ranks before each optimiser step, validation is sharded and reduced, and rank 0
     * alone writes OUTDIR; the run is the same as on one rank up to the order of float sums */
    tubelet_dist *dist;
    /* with dist: sum the gradients in bf16 (half the bytes on the wire; every rank rounds its
     * share to bf16, the partial sums are rounded to bf16 at each step of the reduction) */
    int allreduce_bf16;
    /* with dist: start the all-reduce only after the whole backward instead of overlapping it
     * block by block (for measuring what the overlap hides) */
    int allreduce_blocking;
    /* tests only: called after each step of a checkpoint save (epoch, step 1..9) */
    void (*save_hook)(void *user, int epoch, int step);
    /* > 0: VideoMAE masked pretraining of a VideoMAEForPreTraining model at this tube-mask ratio
     * (docs/pretraining.md): train_csv/val_csv are lists of videos (labels ignored; val_csv NULL:
     * the first clips of train_csv), lr is the base rate scaled by batch / 256, AdamW's betas
     * (0.9, 0.95); val_loss is the reconstruction loss at fixed masks, val_accuracy 0 */
    double mask_ratio;
    /* TUBELET_PRECISION_FP32 (default), or _BF16: mixed-precision training (tubelet_load_params'
     * train_precision: f32 weights and AdamW state, bf16 products); recorded in the checkpoint,
     * and --resume keeps it */
    int precision;
    /* the backend that trains (tubelet_load_params.device): NULL or "cpu", or "cuda" (fp32;
     * docs/cuda.md) */
    const char *device;
    /* non-zero: a run without resume may start in an outdir that holds a run (checkpoint/ or
     * best/), replacing it; 0: that is refused (a forgotten --resume loses no finished run) */
    int overwrite;
} tubelet_train_params;

tubelet_train_params tubelet_train_default_params(void);

typedef struct {
    int epochs_done;         /* completed epochs, resumed ones included */
    double best_val_accuracy;
    int checkpoint_saved;    /* 1 once OUTDIR/checkpoint holds this run's state */
} tubelet_train_result;

/* Trains. On TUBELET_INTERRUPTED err says where it stopped and how to resume. */
int tubelet_train(const tubelet_train_params *p, tubelet_train_result *result, char *err,
                  size_t errlen);

#ifdef __cplusplus
}
#endif

#endif
