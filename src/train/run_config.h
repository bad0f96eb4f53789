/* The settings of a training run and the state a checkpoint carries, read and validated as
 * untrusted input: every number is range-checked before it reaches an integer or an index. */
#ifndef TB_RUN_CONFIG_H
#define TB_RUN_CONFIG_H

#include <stdint.h>

#include "../common.h"

/* `tubelet train --config FILE.json`: every key optional, unknown keys refused. */
typedef struct {
    double weight_decay, warmup_epochs, min_lr, layer_decay, clip_grad, min_scale;
    int accum, hflip, checkpointing;
    int freeze_encoder; /* train the probe only (tubelet_state_freeze_encoder) */
    int augment;        /* 0: training clips made as validation's (no random sampling, crop or
                           flip); with freeze_encoder, each clip's encoder output is kept */
    double label_smoothing, drop_path;
    double hidden_dropout, attn_dropout; /* < 0: the model's config.json values */
} tb_train_config;

void tb_train_config_default(tb_train_config *c);
/* Parses text (the contents of the file `name`, for messages) over the defaults already in c. */
int tb_train_config_parse(tb_train_config *c, const char *text, const char *name, tb_err *e);
/* The config as JSON (every key), for trainer_state.json. Caller frees. */
char *tb_train_config_to_json(const tb_train_config *c);

/* What defines a run's trajectory: resuming with other values would not continue the same run. */
typedef struct {
    int epochs, batch, seed, n_train;
    double lr;
    tb_train_config cfg;
    double mask_ratio; /* pretraining's tube masking ratio; 0 for a classification run */
    int precision;     /* TUBELET_PRECISION_FP32, or _BF16: mixed precision */
} tb_run_settings;

/* trainer_state.json: where a checkpoint stopped, and (since this version) the run's settings. */
typedef struct {
    int epoch;              /* epochs completed */
    int64_t step;           /* optimiser steps taken */
    int has_settings;       /* 0 for checkpoints written before the settings were recorded */
    tb_run_settings run;
} tb_trainer_state;

int tb_trainer_state_parse(tb_trainer_state *s, const char *text, const char *name, tb_err *e);
char *tb_trainer_state_to_json(const tb_trainer_state *s);

/* Optimiser steps in one epoch of n_train clips: a step every accum batches, and one at the end
 * of every epoch. */
int64_t tb_steps_per_epoch(int n_train, int batch, int accum);

/* Checks a parsed state against the run about to resume from it: the epoch within the run, the
 * step count consistent with it and with the optimiser file, the settings unchanged (but
 * --epochs, which may be raised to train on). */
int tb_trainer_state_check(const tb_trainer_state *s, const tb_run_settings *run,
                           int64_t optimizer_step, const char *name, tb_err *e);

#endif
