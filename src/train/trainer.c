/* tubelet_train (include/tubelet_train.h): the training loop. A run is: check every input and
 * output, build the model, optimiser and batches (or restore them from OUTDIR/checkpoint), then
 * per epoch train, validate, write metrics and curves, and save the checkpoint. */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "tubelet_pretrain.h"
#include "tubelet_train.h"
#include "../rng.h"
#include "tubelet_video.h"

#include "../dist/dist.h"
#include "checkpoint.h"
#include "data.h"
#include "optim.h"
#include "plot.h"
#include "run_config.h"

tubelet_train_params tubelet_train_default_params(void) {
    tubelet_train_params p;
    memset(&p, 0, sizeof p);
    p.epochs = 10, p.batch = 8, p.lr = 1e-3;
    return p;
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* splitmix64 of two words: the data order and augmentation are functions of (seed, epoch, clip)
 * only, so a resumed run draws exactly what the uninterrupted one drew. */
static uint64_t mix(uint64_t a, uint64_t b) { return tb_hash2(a, b); }

/* ---- batches, decoded on a second thread while the model trains on the previous one ---- */

typedef struct {
    const tb_dataset *d;
    const tb_clip_params *cp;
    const int *order;
    int first, count;   /* the global batch: clips order[first ..], count of them real */
    int row0, batch;    /* this rank's rows of it: [row0, row0 + batch) */
    uint64_t seed;
    float *pixels;
    int64_t *labels;
    const unsigned char *cached; /* per clip: its encoder output is kept (NULL: none is) */
    int rc;
    tb_err err;
} batch_job;

/* Clip of row k of this rank's share of the batch (a short last batch repeats its first). */
static int batch_clip(const batch_job *j, int k) {
    const int g = j->row0 + k;
    return j->order[j->first + (g < j->count ? g : g % j->count)];
}

/* 1 if every clip of the job has its encoder output kept: nothing to decode. */
static int batch_cached(const batch_job *j) {
    for (int k = 0; j->cached && k < j->batch; k++)
        if (!j->cached[batch_clip(j, k)]) return 0;
    return j->cached != NULL;
}

static void *load_batch(void *arg) {
    batch_job *j = arg;
    const size_t per = (size_t)j->cp->frames * 3 * j->cp->height * j->cp->width;
    const int skip = batch_cached(j); /* the encoder will not run: labels only */
    j->rc = 0;
    for (int k = 0; k < j->batch && !j->rc; k++) {
        /* a short last batch is filled up with its first clips; their rows are not counted */
        const int i = batch_clip(j, k);
        j->labels[k] = j->d->labels[i];
        if (!skip)
            j->rc = tb_dataset_clip(j->d, i, j->cp, mix(j->seed, (uint64_t)i), j->pixels + per * k,
                                    &j->err);
    }
    return NULL;
}

/* ---- one run ---- */

typedef struct {
    const tubelet_train_params *p;
    tubelet_dist *dist;
    int rank, ranks, row0, local_batch; /* this rank's rows of every batch */
    tb_log log;
    tb_train_config tc;
    tb_dataset tr, va;
    tubelet_model *m;
    tubelet_grads *grads;    /* the training state's gradients (the model stays read-only) */
    tubelet_state *s;
    tubelet_preprocessor *pre;
    tb_adamw *opt;
    tb_clip_params cp_train, cp_val;
    batch_job jobs[2];
    float *logits;
    double *vprob, *hist, best_acc;
    int *order, *val_order;
    char *preproc_json, ckpt[2100];
    int created, lock_fd, start_epoch, rows_per_clip, steps_per_epoch, n_labels;
    tb_trainer_state state;  /* what the next checkpoint records */
    int save_step, saved;
    struct overlap *ov;      /* the gradient all-reduce overlapped with the backward (ranks > 1) */
    /* pretraining (p->mask_ratio > 0): the masked model's state and this rank's masks */
    tubelet_pretrain *pt;
    uint8_t *mask;
    int grid[3], val_n; /* token grid; validation clips */
    /* a frozen encoder over clips without augmentation: each training clip's encoder output,
     * computed in its first epoch and reused (enc_rows x hidden floats per clip) */
    float *enc_cache, *enc_batch;
    unsigned char *enc_have;
    int64_t enc_floats; /* per clip */
} trainer;

static int overlap_new(trainer *t, tb_err *e);
static void overlap_free(struct overlap *o);

static int stopped(const trainer *t) { return t->p->stop && *t->p->stop; }

/* Collective: every rank learns whether any failed, so that none waits for the others in a
 * later collective. The failing rank keeps its own message. */
static int agree(trainer *t, int rc, tb_err *e) {
    double failed = rc != 0;
    tb_err ce = {{0}};
    if (tb_dist_sum_f64(t->dist, &failed, 1, &ce)) return rc ? rc : (*e = ce, TUBELET_ERR_IO);
    if (!rc && failed > 0)
        return tb_fail(e, TUBELET_ERR_IO, "stopped: another rank failed (its message names the "
                       "problem)");
    return rc;
}

static void report(const trainer *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void report(const trainer *t, const char *fmt, ...) {
    if (!t->log.fn || t->rank) return;
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    t->log.fn(t->log.user, 2, msg);
}

/* Every clip is opened before the first step: a missing one is found now, not an hour in. */
static int check_clips(const tb_dataset *d, const char *csv, tb_err *e) {
    for (int i = 0; i < d->n; i++) {
        int rc = tb_check_regular(d->paths[i], e);
        if (rc) return tb_prefix(e, rc, "%s, row %d: ", csv, i + 1);
    }
    return TUBELET_OK;
}

/* Leftovers of an interrupted run: half-written checkpoints and temporary files. */
static int clean_outdir(const char *outdir, tb_err *e) {
    int rc = tb_checkpoint_recover(outdir, "checkpoint", e);
    if (!rc) rc = tb_checkpoint_recover(outdir, "best", e);
    DIR *d = rc ? NULL : opendir(outdir);
    char p[2200];
    for (struct dirent *de; d && (de = readdir(d));)
        if (!strncmp(de->d_name, "metrics.csv.tmp", 15) || !strncmp(de->d_name, "curves.png.tmp", 14)) {
            snprintf(p, sizeof p, "%s/%s", outdir, de->d_name);
            unlink(p);
        }
    if (d) closedir(d);
    return rc;
}

/* Without resume (or overwrite), an outdir that holds a run is refused: starting over there would
 * replace a finished run's metrics, checkpoint/ and best/ one epoch at a time. */
static int check_no_run(const tubelet_train_params *p, tb_err *e) {
    if (p->resume || p->overwrite) return TUBELET_OK;
    /* metrics.csv alone is not a run: a run killed before its first checkpoint starts again */
    const char *names[] = {"checkpoint", "best"};
    char path[2200];
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        snprintf(path, sizeof path, "%s/%s", p->outdir, names[i]);
        if (access(path, F_OK) == 0)
            return tb_fail(e, TUBELET_ERR_ARG, "-o %s holds a run (%s): continue it with --resume, "
                           "choose another -o, or replace it with --overwrite", p->outdir,
                           names[i]);
    }
    return TUBELET_OK;
}

/* A run that fails before its first checkpoint leaves no directory it created. */
static void remove_new_outdir(const char *outdir) {
    const char *names[] = {"train.lock", "metrics.csv", "curves.png"};
    char p[2200];
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        snprintf(p, sizeof p, "%s/%s", outdir, names[i]);
        unlink(p);
    }
    rmdir(outdir);
}

/* Inputs and OUTDIR, before anything is built: datasets, clips, the directory and its lock. */
static int open_run(trainer *t, tb_err *e) {
    const tubelet_train_params *p = t->p;
    int rc = TUBELET_OK;
    const int pretrain = p->mask_ratio > 0;
    if (!p->model_dir == !p->arch || !p->train_csv || (!p->val_csv && !pretrain) || !p->outdir)
        return tb_fail(e, TUBELET_ERR_ARG, "training needs one of model_dir/arch, train_csv, "
                       "val_csv and outdir");
    if (p->epochs < 1 || p->epochs > 100000 || p->batch < 1 || p->batch > 4096 || p->seed < 0 ||
        !(p->lr >= 1e-9 && p->lr <= 10) || p->stop_after < 0)
        return tb_fail(e, TUBELET_ERR_ARG, "epochs, batch, seed or lr out of range");
    if (p->mask_ratio != 0 && !(pretrain && p->mask_ratio < 1))
        return tb_fail(e, TUBELET_ERR_VALUE, "mask ratio %g is outside (0, 1)", p->mask_ratio);
    tb_train_config_default(&t->tc);
    char *text = NULL;
    if (p->config_path && (rc = tb_read_file(p->config_path, &text, NULL, 1 << 20, e))) return rc;
    if (text || p->config_json)
        rc = tb_train_config_parse(&t->tc, text ? text : p->config_json,
                                   p->config_path ? p->config_path : "the train config", e);
    free(text);
    if (rc) return rc;
    if (p->freeze_encoder) t->tc.freeze_encoder = 1;
    if (t->tc.freeze_encoder && pretrain)
        return tb_fail(e, TUBELET_ERR_ARG, "freeze_encoder: pretraining trains the encoder");
    struct stat st;
    if (stat(p->outdir, &st) == 0 && !S_ISDIR(st.st_mode))
        return tb_fail(e, TUBELET_ERR_ARG, "-o %s: exists and is not a directory; choose another -o",
                       p->outdir);
    const char *val = pretrain && !p->val_csv ? p->train_csv : p->val_csv;
    if (pretrain) /* unlabelled videos; without a validation list, the first training clips */
        rc = tb_dataset_load_videos(&t->tr, p->train_csv, p->data_root, e);
    if (pretrain && !rc) rc = tb_dataset_load_videos(&t->va, val, p->data_root, e);
    if (!pretrain && !(rc = tb_dataset_load(&t->tr, p->train_csv, p->data_root, NULL, 0, e)))
        rc = tb_dataset_load(&t->va, val, p->data_root, t->tr.classes, t->tr.n_classes, e);
    if (rc || (rc = check_clips(&t->tr, p->train_csv, e)) || (rc = check_clips(&t->va, val, e)))
        return rc;
    t->val_n = pretrain && !p->val_csv && t->va.n > 2 * p->batch ? 2 * p->batch : t->va.n;
    if (t->ranks > p->batch)
        return tb_fail(e, TUBELET_ERR_ARG, "batch %d is smaller than the %d ranks: every rank "
                       "needs a clip of each batch", p->batch, t->ranks);
    snprintf(t->ckpt, sizeof t->ckpt, "%s/checkpoint", p->outdir);
    if (t->rank == 0) { /* one writer of OUTDIR */
        if (mkdir(p->outdir, 0755) == 0) t->created = 1;
        else if (errno != EEXIST) return tb_fail(e, TUBELET_ERR_IO, "-o %s: %s", p->outdir, strerror(errno));
        if ((rc = tb_outdir_lock(p->outdir, &t->lock_fd, e)) || (rc = clean_outdir(p->outdir, e)) ||
            (rc = check_no_run(p, e)))
            return rc;
    }
    return TUBELET_OK;
}

static int check_resume(trainer *t, tb_err *e) {
    const tubelet_train_params *p = t->p;
    if (p->resume && access(t->ckpt, F_OK) != 0)
        return tb_fail(e, TUBELET_ERR_IO, "--resume: %s does not exist", t->ckpt);
    return TUBELET_OK;
}

/* The model (from the checkpoint on resume), its preprocessing, and the memory check. */
static int load_model(trainer *t, tb_err *e) {
    const tubelet_train_params *p = t->p;
    char err[1024];
    tubelet_load_params lp = tubelet_load_default_params();
    lp.n_threads = p->threads, lp.log = p->log, lp.log_user = p->log_user;
    lp.no_mmap = 1, lp.random_init = 1, lp.seed = (uint64_t)p->seed;
    if (!(p->mask_ratio > 0)) /* pretraining keeps the decoder and has no classes */
        lp.num_labels = t->tr.n_classes, lp.labels = (const char *const *)t->tr.classes;
    lp.max_memory = p->max_memory;
    lp.train_precision = p->precision;
    lp.device = p->device;
    const char *from = p->resume ? t->ckpt : p->model_dir;
    int rc = from ? tubelet_model_load(&t->m, from, &lp, err, sizeof err)
                  : tubelet_model_random(&t->m, p->arch, (uint64_t)p->seed, &lp, err, sizeof err);
    if (rc) return tb_fail(e, rc, "%s", err);
    if ((p->mask_ratio > 0) != tubelet_model_is_pretraining(t->m))
        return tb_fail(e, TUBELET_ERR_ARG, p->mask_ratio > 0
                       ? "%s is not a VideoMAEForPreTraining model: pretraining needs one "
                         "(config.json's architectures, or --arch videomae-tiny-pretrain / "
                         "videomae-b-pretrain)"
                       : "%s is a pretraining model without classes: fine-tune it with "
                         "tubelet train --model DIR", from ? from : p->arch);
    tubelet_model_info mi;
    tubelet_model_get_info(t->m, &mi);
    if (mi.num_channels != 3) /* the clips would be read as another channel count */
        return tb_fail(e, TUBELET_ERR_SHAPE, "%s: config.json's num_channels is %d, but videos "
                       "decode to 3 (RGB) channels", from ? from : p->arch, mi.num_channels);
    char pp_path[2200];
    snprintf(pp_path, sizeof pp_path, "%s/preprocessor_config.json", from ? from : "");
    /* an official checkpoint file: the preprocessing of its own training config (crop, mean,
     * std), as classify uses for it */
    char vpp_path[2200]; /* transformers 5's name, which it reads first */
    snprintf(vpp_path, sizeof vpp_path, "%s/video_preprocessor_config.json", from ? from : "");
    if (from && (access(pp_path, F_OK) == 0 || access(vpp_path, F_OK) == 0 ||
                 tubelet_checkpoint_is_file(from)))
        rc = tubelet_preprocessor_load(&t->pre, from, p->log, p->log_user, err, sizeof err);
    else /* the VideoMAE processor at the model's size */
        rc = tubelet_preprocessor_default(&t->pre, mi.image_height, mi.image_width);
    if (rc) return tb_fail(e, rc, "%s", rc == TUBELET_ERR_MEMORY ? "out of memory" : err);
    t->preproc_json = tubelet_preprocessor_to_json(t->pre);
    const int T = mi.num_frames, H = mi.image_height, W = mi.image_width;
    /* weights, gradients and AdamW's two moments, and the two batches of pixels in flight */
    double need = 16.0 * (double)mi.n_params + 8.0 * p->batch * T * 3.0 * H * W;
    double limit = p->max_memory ? (double)p->max_memory : (double)tb_machine_memory();
    if (need > limit)
        return tb_fail(e, TUBELET_ERR_MEMORY, "training %s at batch %d needs at least %.1f GiB, more "
                       "than the %.1f GiB %s; lower the batch or the model's size%s",
                       from ? from : p->arch, p->batch, need / 1073741824.0, limit / 1073741824.0,
                       p->max_memory ? "allowed by --max-memory" : "this machine has",
                       p->max_memory ? ", or raise --max-memory" : "");
    if (t->tc.hidden_dropout < 0) t->tc.hidden_dropout = mi.hidden_dropout_prob;
    if (t->tc.attn_dropout < 0) t->tc.attn_dropout = mi.attention_probs_dropout_prob;
    const tb_preproc_config *pc = tb_preprocessor_config(t->pre);
    t->cp_train = (tb_clip_params){T, H, W, t->tc.augment, t->tc.min_scale, t->tc.hflip, pc};
    t->cp_val = (tb_clip_params){T, H, W, 0, 1, 0, pc};
    char classes[32] = ""; /* pretraining has none */
    if (!(p->mask_ratio > 0)) snprintf(classes, sizeof classes, ", %d classes", t->tr.n_classes);
    report(t, "%s: %d train / %d val clips%s; %s %s, %lld parameters; %d epochs of %d steps",
           p->outdir, t->tr.n, t->val_n, classes, mi.family, mi.variant, (long long)mi.n_params,
           p->epochs, (t->tr.n + p->batch - 1) / p->batch);
    return TUBELET_OK;
}

/* A frozen encoder over clips made the same way every epoch (augment false): room for each
 * training clip's encoder output, if it fits in half the memory allowed; else none (said). */
static int encoder_cache_new(trainer *t, tb_err *e) {
    tubelet_shape hs;
    tubelet_state_hidden_shape(t->s, &hs);
    t->enc_floats = tubelet_shape_numel(&hs) / t->local_batch;
    const double bytes = 4.0 * (double)t->enc_floats * t->tr.n;
    const double pages = (double)sysconf(_SC_PHYS_PAGES) * (double)sysconf(_SC_PAGESIZE);
    const double allowed = 0.5 * (t->p->max_memory ? (double)t->p->max_memory : pages);
    if (bytes > allowed) {
        report(t, "encoder outputs not kept: %d clips need %.1f GiB, more than half the memory "
                  "allowed; the frozen encoder runs every step", t->tr.n, bytes / 1073741824.0);
        return TUBELET_OK;
    }
    t->enc_cache = malloc((size_t)bytes > 0 ? (size_t)bytes : 1);
    t->enc_batch = malloc(sizeof(float) * (size_t)t->enc_floats * (size_t)t->local_batch);
    t->enc_have = calloc((size_t)t->tr.n, 1);
    if (!t->enc_cache || !t->enc_batch || !t->enc_have)
        return tb_fail(e, TUBELET_ERR_MEMORY, "out of memory for the encoder outputs (%.1f GiB)",
                       bytes / 1073741824.0);
    report(t, "frozen encoder, no augmentation: each clip's encoder output is computed in its "
              "first epoch and reused (%.1f MiB)", bytes / 1048576.0);
    return TUBELET_OK;
}

/* Gradients, the training state, the optimiser (restored on resume), and the buffers. */
static int build_training(trainer *t, tb_err *e) {
    const tubelet_train_params *p = t->p;
    const tb_clip_params *c = &t->cp_train;
    char err[1024];
    int rc;
    tubelet_shape ls;
    const int pretrain = p->mask_ratio > 0;
    /* over a frozen encoder, gradients of the probe only (none the encoder's size) */
    if ((rc = (t->tc.freeze_encoder ? tubelet_grads_new_probe : tubelet_grads_new)(
             &t->grads, t->m, err, sizeof err)))
        return tb_fail(e, rc, "%s", err);
    if (pretrain) {
        /* the masked model's state for this rank's rows, masking int(ratio h w) positions of
         * each frame; its "logits" rows are the clips' reconstructions */
        int *g = t->grid;
        tubelet_pretrain_grid(t->m, &g[0], &g[1], &g[2]);
        const int per_frame = (int)(p->mask_ratio * g[1] * g[2]);
        if ((rc = tubelet_tube_mask(NULL, 0, g[0], g[1], g[2], p->mask_ratio, 0, 0, 0, err,
                                    sizeof err)) ||
            (rc = tubelet_pretrain_new(&t->pt, t->m, t->local_batch, c->frames, 3, c->height,
                                       c->width, per_frame * g[0], t->grads, t->tc.checkpointing,
                                       err, sizeof err)))
            return tb_fail(e, rc, "%s", err);
        if (!(t->mask = malloc((size_t)t->local_batch * g[0] * g[1] * g[2])))
            return tb_fail(e, TUBELET_ERR_MEMORY, "out of memory");
        tubelet_pretrain_logits_shape(t->pt, &ls);
        ls = (tubelet_shape){2, {t->local_batch, ls.dim[1] * ls.dim[2]}};
    } else {
        if ((rc = tubelet_state_new(&t->s, t->m, t->local_batch, c->frames, c->height, c->width,
                                    err, sizeof err)) ||
            (rc = tubelet_state_enable_training(t->s, t->tc.checkpointing || t->tc.freeze_encoder,
                                                t->grads, err, sizeof err)) ||
            (t->tc.freeze_encoder &&
             (rc = tubelet_state_freeze_encoder(t->s, 1, err, sizeof err))))
            return tb_fail(e, rc, "%s", err);
        tubelet_state_set_label_smoothing(t->s, (float)t->tc.label_smoothing);
        tubelet_state_logits_shape(t->s, &ls);
        if (t->tc.freeze_encoder && !t->tc.augment && (rc = encoder_cache_new(t, e))) return rc;
    }
    t->rows_per_clip = (int)(ls.dim[0] / t->local_batch); /* TimeSformer space_only: T */
    t->n_labels = (int)ls.dim[1];
    t->steps_per_epoch = (t->tr.n + p->batch - 1) / p->batch;
    tb_adamw_params ap = tb_adamw_default_params();
    ap.lr = p->lr, ap.min_lr = t->tc.min_lr, ap.weight_decay = t->tc.weight_decay;
    if (pretrain) /* VideoMAE's recipe: the base rate scaled by batch / 256, betas (0.9, 0.95) */
        ap.lr = p->lr * p->batch / 256.0, ap.beta2 = 0.95;
    ap.layer_decay = t->tc.layer_decay, ap.clip_norm = t->tc.clip_grad;
    ap.freeze_encoder = t->tc.freeze_encoder;
    /* in range: warmup_epochs <= 1e5 and steps_per_epoch < 2^31 (run_config.c) */
    ap.warmup_steps = (int64_t)(t->tc.warmup_epochs * t->steps_per_epoch / t->tc.accum);
    ap.total_steps = (int64_t)p->epochs * t->steps_per_epoch / t->tc.accum;
    if ((rc = tb_adamw_new(&t->opt, t->m, &ap, e))) return rc;
    if (t->ranks > 1 && (rc = overlap_new(t, e))) return rc;
    const size_t per_clip = (size_t)c->frames * 3 * c->height * c->width;
    for (int k = 0; k < 2; k++) {
        t->jobs[k].pixels = malloc(sizeof(float) * per_clip * (size_t)t->local_batch);
        t->jobs[k].labels = malloc(sizeof(int64_t) * (size_t)ls.dim[0]);
        if (!t->jobs[k].pixels || !t->jobs[k].labels) return tb_fail(e, TUBELET_ERR_MEMORY, "out of memory");
    }
    t->logits = malloc(sizeof(float) * (size_t)tubelet_shape_numel(&ls));
    t->vprob = malloc(sizeof(double) * (size_t)ls.dim[1]);
    t->order = malloc(sizeof(int) * (size_t)t->tr.n);
    t->val_order = malloc(sizeof(int) * (size_t)t->va.n);
    t->hist = calloc((size_t)p->epochs * 3, sizeof(double));
    if (!t->logits || !t->vprob || !t->order || !t->val_order || !t->hist || !t->preproc_json)
        return tb_fail(e, TUBELET_ERR_MEMORY, "out of memory");
    for (int i = 0; i < t->va.n; i++) t->val_order[i] = i;
    return TUBELET_OK;
}

/* Earlier epochs' metrics, for the plot and the best accuracy so far. */
static void read_history(trainer *t) {
    char p[2200], *text = NULL;
    tb_err e = {{0}};
    snprintf(p, sizeof p, "%s/metrics.csv", t->p->outdir);
    if (tb_read_file(p, &text, NULL, 1 << 24, &e)) return;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        int ep;
        double a, b, c;
        if (sscanf(line, "%d,%lf,%lf,%lf", &ep, &a, &b, &c) == 4 && ep >= 1 && ep <= t->start_epoch &&
            ep <= t->p->epochs)
            t->hist[3 * (ep - 1)] = a, t->hist[3 * (ep - 1) + 1] = b, t->hist[3 * (ep - 1) + 2] = c;
    }
    free(text);
}

/* OUTDIR/checkpoint's optimiser and trainer state, checked against this run. */
static int restore(trainer *t, const tb_run_settings *run, tb_err *e) {
    char p[2200], *text = NULL;
    tb_trainer_state st;
    snprintf(p, sizeof p, "%s/optimizer.safetensors", t->ckpt);
    int rc = tb_adamw_load(t->opt, p, e);
    snprintf(p, sizeof p, "%s/trainer_state.json", t->ckpt);
    if (!rc) rc = tb_read_file(p, &text, NULL, 1 << 16, e);
    if (!rc) rc = tb_trainer_state_parse(&st, text, p, e);
    free(text);
    if (!rc) rc = tb_trainer_state_check(&st, run, tb_adamw_steps(t->opt), p, e);
    if (rc) return rc;
    t->start_epoch = st.epoch;
    read_history(t);
    report(t, "resuming after epoch %d (step %lld)", t->start_epoch, (long long)tb_adamw_steps(t->opt));
    return TUBELET_OK;
}

/* ---- checkpoints ---- */

static void save_point(void *user, int commit_step) {
    trainer *t = user;
    (void)commit_step;
    t->save_step++;
    if (t->p->save_hook) t->p->save_hook(t->p->user, t->state.epoch, t->save_step);
}

static int write_text(const char *dir, const char *name, const char *text, tb_err *e) {
    char p[2200];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return text ? tb_atomic_write(p, text, strlen(text), e) : tb_fail(e, TUBELET_ERR_MEMORY, "out of memory");
}

/* Writes OUTDIR/<name>.tmp completely, then swaps it in for OUTDIR/<name>: an interruption at
 * any point leaves the old checkpoint or the new one, and the next start cleans up
 * (tb_checkpoint_recover). */
static int save_checkpoint(trainer *t, const char *name, int with_optimizer, tb_err *e) {
    char tmp[2200], err[1024], p[2300];
    t->save_step = 0;
    int rc = tb_checkpoint_begin(t->p->outdir, name, tmp, sizeof tmp, e);
    if (!rc) save_point(t, 0);
    if (!rc && (rc = tubelet_model_save(t->m, tmp, err, sizeof err))) tb_fail(e, rc, "%s", err);
    if (!rc) save_point(t, 0);
    if (!rc) rc = write_text(tmp, "preprocessor_config.json", t->preproc_json, e);
    if (!rc) save_point(t, 0);
    if (!rc && with_optimizer) {
        snprintf(p, sizeof p, "%s/optimizer.safetensors", tmp);
        if (!(rc = tb_adamw_save(t->opt, p, e))) save_point(t, 0);
        char *state = rc ? NULL : tb_trainer_state_to_json(&t->state);
        if (!rc && !(rc = write_text(tmp, "trainer_state.json", state, e))) save_point(t, 0);
        free(state);
    }
    if (!rc) rc = tb_checkpoint_commit(t->p->outdir, name, save_point, t, e);
    if (rc) {
        tb_err ignored;
        tb_remove_flat_dir(tmp, &ignored);
        return tb_prefix(e, rc, "%s/%s not updated (the previous one is kept): ", t->p->outdir, name);
    }
    t->saved = 1;
    return TUBELET_OK;
}

static int write_metrics(const trainer *t, int n, tb_err *e) {
    size_t cap = 64 + (size_t)n * 80, len = 0;
    char *buf = malloc(cap), p[2200];
    if (!buf) return tb_fail(e, TUBELET_ERR_MEMORY, "out of memory");
    len += (size_t)snprintf(buf, cap, t->pt ? "epoch,train_loss,val_recon_loss,val_acc\n"
                                            : "epoch,train_loss,val_loss,val_acc\n");
    for (int k = 0; k < n; k++)
        len += (size_t)snprintf(buf + len, cap - len, "%d,%.6f,%.6f,%.6f\n", k + 1, t->hist[3 * k],
                                t->hist[3 * k + 1], t->hist[3 * k + 2]);
    snprintf(p, sizeof p, "%s/metrics.csv", t->p->outdir);
    int rc = tb_atomic_write(p, buf, len, e);
    free(buf);
    return rc;
}

/* ---- the epoch ---- */

static int interrupted(trainer *t, int epoch, tb_err *e) {
    if (t->saved || t->p->resume)
        return tb_fail(e, TUBELET_INTERRUPTED, "%s: stopped during epoch %d; that epoch is abandoned. "
                       "%s (epoch %d) is intact: run the same command with --resume to continue "
                       "from it", t->p->outdir, epoch + 1, t->ckpt, t->state.epoch);
    return tb_fail(e, TUBELET_INTERRUPTED, "%s: stopped during epoch %d; no checkpoint was "
                   "written yet: start again", t->p->outdir, epoch + 1);
}

/* This epoch's data order: a function of the seed and the epoch only (exact resume). */
static void shuffle(trainer *t, int epoch) {
    uint64_t r = mix((uint64_t)t->p->seed, 1000003u + (uint64_t)epoch);
    for (int i = 0; i < t->tr.n; i++) t->order[i] = i;
    for (int i = t->tr.n - 1; i > 0; i--) {
        r = mix(r, (uint64_t)i);
        int k = (int)(r % (uint64_t)(i + 1)), x = t->order[i];
        t->order[i] = t->order[k], t->order[k] = x;
    }
}

/* ---- the gradient all-reduce, overlapped with the backward ----
 * Each rank's gradient (the mean over its rows) is weighted by its share of the batch and summed
 * over the ranks in place, one MPI_Iallreduce per piece of at most BUCKET floats. A tensor's
 * pieces start as soon as its gradient is final: the model calls back after each block's
 * backward (tubelet_state_set_block_grad_hook), and after block l the tensors of layer id
 * l + 2 and above are final (the head first; one block of lag, since ViViT Model 2's spatial
 * final norm and temporal embeddings get their gradient between two blocks). The rest start
 * when the backward returns. Every rank starts the same pieces in the same order, even a rank
 * whose step failed, so that no rank waits in a collective the others never start; the
 * optimiser then waits for all of them, and the time it waits is what the overlap did not hide. */
enum { BUCKET = 1 << 20 }; /* floats */

typedef struct overlap {
    trainer *t;
    int n, next;        /* tensors; the next position of `order` to start */
    int *order, *id;    /* tensor indices by layer id, descending (stable); their ids */
    size_t *half_at;    /* bf16: each tensor's place in half */
    uint16_t *half;
    tb_dist_pending *pend;
    int rc;
    tb_err err;
    double wait_s, comm_s; /* waited after the backward; from the first start to the end */
    double t_first;
    int64_t reductions, steps;
} overlap;

static void overlap_free(struct overlap *o) {
    if (!o) return;
    free(o->order), free(o->id), free(o->half_at), free(o->half);
    tb_dist_pending_free(o->pend);
    free(o);
}

static int overlap_new(trainer *t, tb_err *e) {
    overlap *o = calloc(1, sizeof *o);
    const int n = tubelet_model_n_tensors(t->m);
    if (o) {
        o->t = t, o->n = n;
        o->order = malloc(sizeof(int) * (size_t)n), o->id = malloc(sizeof(int) * (size_t)n);
        o->half_at = malloc(sizeof(size_t) * (size_t)n);
    }
    if (!o || !o->order || !o->id || !o->half_at) {
        overlap_free(o);
        return tb_fail(e, TUBELET_ERR_MEMORY, "out of memory");
    }
    int pieces = 0;
    size_t total = 0;
    for (int i = 0; i < n; i++) { /* insertion by id, descending; equal ids keep their order */
        tubelet_shape sh;
        tubelet_model_tensor(t->m, i, &sh, NULL);
        int id;
        tubelet_model_tensor_group(t->m, i, &id);
        const size_t numel = tubelet_grads_at(t->grads, i) ? (size_t)tubelet_shape_numel(&sh) : 0;
        o->half_at[i] = total, total += numel;
        pieces += (int)((numel + BUCKET - 1) / BUCKET);
        int k = i;
        while (k > 0 && o->id[k - 1] < id) o->order[k] = o->order[k - 1], o->id[k] = o->id[k - 1], k--;
        o->order[k] = i, o->id[k] = id;
    }
    int rc = tb_dist_pending_new(&o->pend, pieces, e);
    if (!rc && t->p->allreduce_bf16 && !(o->half = malloc(sizeof(uint16_t) * (total ? total : 1))))
        rc = tb_fail(e, TUBELET_ERR_MEMORY, "out of memory (the bf16 all-reduce's buffer)");
    if (rc) return overlap_free(o), rc;
    t->ov = o;
    return TUBELET_OK;
}

/* Starts every tensor of layer id >= min_id not yet started, then lets MPI progress. */
static void overlap_start(overlap *o, int min_id) {
    trainer *t = o->t;
    const float share = (float)t->local_batch / (float)t->p->batch;
    for (; o->next < o->n && o->id[o->next] >= min_id && !o->rc; o->next++) {
        const int i = o->order[o->next];
        tubelet_shape sh;
        tubelet_model_tensor(t->m, i, &sh, NULL);
        float *gw = tubelet_grads_at(t->grads, i);
        if (!gw) continue; /* a frozen encoder's tensor: no gradient to reduce */
        const size_t numel = (size_t)tubelet_shape_numel(&sh);
        if (!o->reductions++) o->t_first = now();
        for (size_t k = 0; k < numel; k++) gw[k] *= share;
        for (size_t at = 0; at < numel && !o->rc; at += BUCKET)
            o->rc = tb_dist_isum(t->dist, o->pend, gw + at, o->half ? o->half + o->half_at[i] + at : NULL,
                                 numel - at < BUCKET ? numel - at : BUCKET, o->half != NULL, &o->err);
    }
    tb_dist_progress(o->pend);
}

static void overlap_hook(void *user, int block) { overlap_start(user, block + 2); }

/* Before the step's forward and backward: arm the hook on the step that ends in an optimiser
 * step (the others only accumulate). */
static void overlap_arm(trainer *t, int last_micro_step) {
    if (!t->ov) return;
    t->ov->next = 0, t->ov->reductions = 0;
    if (!t->s) return; /* pretraining: its own state, no hook (everything starts at the end) */
    /* a device backend's gradients reach the host only after the whole backward: no overlap */
    const int on_device = t->p->device && t->p->device[0] && strcmp(t->p->device, "cpu") != 0;
    const int hook = last_micro_step && !t->p->allreduce_blocking && !on_device;
    tubelet_state_set_block_grad_hook(t->s, hook ? overlap_hook : NULL, t->ov);
}

/* After the backward: start what is left; then (finish) wait for all of it. */
static int overlap_finish(trainer *t, tb_err *e) {
    overlap *o = t->ov;
    if (!o) return TUBELET_OK;
    overlap_start(o, INT_MIN);
    const double t0 = now();
    int rc = tb_dist_wait(o->pend, e);
    const double t1 = now();
    o->wait_s += t1 - t0, o->comm_s += t1 - o->t_first, o->steps++;
    if (o->rc) rc = o->rc, *e = o->err;
    return rc;
}

/* Pretraining: one batch of this rank's rows with tube masks drawn from (seed, step, row of the
 * global batch); backward or the reconstruction loss alone. */
static int pretrain_step(trainer *t, const float *pixels, int64_t step, int row0, int backward,
                         float *loss, char *err, size_t errlen) {
    const int *g = t->grid;
    int rc = tubelet_tube_mask(t->mask, t->local_batch, g[0], g[1], g[2], t->p->mask_ratio,
                               (uint64_t)t->p->seed, step, row0, err, errlen);
    return rc ? rc : tubelet_pretrain_step(t->pt, pixels, t->mask, backward, loss, t->logits,
                                           err, errlen);
}

/* The frozen encoder's outputs of a batch's clips: kept after the step that computed them
 * (keep 1), or handed to the step instead of running the encoder (keep 0). */
static int encoder_outputs(trainer *t, const batch_job *j, int keep, char *err, size_t errlen) {
    const int64_t F = t->enc_floats;
    if (keep) {
        int rc = tubelet_state_encoder_output(t->s, t->enc_batch, err, errlen);
        for (int k = 0; !rc && k < j->batch; k++) {
            const int i = batch_clip(j, k);
            memcpy(t->enc_cache + F * i, t->enc_batch + F * k, sizeof(float) * (size_t)F);
            t->enc_have[i] = 1;
        }
        return rc;
    }
    for (int k = 0; k < j->batch; k++)
        memcpy(t->enc_batch + F * k, t->enc_cache + F * batch_clip(j, k), sizeof(float) * (size_t)F);
    return tubelet_state_set_encoder_output(t->s, t->enc_batch, err, errlen);
}

static int train_epoch(trainer *t, int epoch, double *train_loss, tb_err *e) {
    const tubelet_train_params *p = t->p;
    const int B = p->batch, b = t->local_batch, R = t->rows_per_clip, S = t->steps_per_epoch;
    char err[1024];
    shuffle(t, epoch);
    double t0 = now(), sum_loss = 0, n_rows = 0, n_right = 0;
    int rc = TUBELET_OK;
    for (int k = 0; k < 2; k++)
        t->jobs[k] = (batch_job){&t->tr, &t->cp_train, t->order, 0, 0, t->row0, b,
                                 mix((uint64_t)p->seed, (uint64_t)epoch), t->jobs[k].pixels,
                                 t->jobs[k].labels, t->enc_have, 0, {{0}}};
    t->jobs[0].count = t->tr.n < B ? t->tr.n : B;
    pthread_t next;
    int have = pthread_create(&next, NULL, load_batch, &t->jobs[0]) == 0;
    if (!have) load_batch(&t->jobs[0]);
    tubelet_grads_zero(t->grads);
    for (int step = 0; step < S && !rc; step++) {
        batch_job *cur = &t->jobs[step % 2], *nxt = &t->jobs[(step + 1) % 2];
        if (have) pthread_join(next, NULL);
        have = 0;
        /* every rank stops, or fails, at the same step */
        double flags[2] = {stopped(t), cur->rc != 0};
        if ((rc = tb_dist_sum_f64(t->dist, flags, 2, e))) break;
        if (flags[0] > 0) return interrupted(t, epoch, e);
        if (flags[1] > 0) {
            if (cur->rc) rc = cur->rc, *e = cur->err;
            else rc = tb_fail(e, TUBELET_ERR_IO, "stopped: another rank could not load its clips");
            break;
        }
        if (step + 1 < S) {
            nxt->first = (step + 1) * B;
            nxt->count = t->tr.n - nxt->first < B ? t->tr.n - nxt->first : B;
            have = pthread_create(&next, NULL, load_batch, nxt) == 0;
            if (!have) load_batch(nxt);
        }
        int64_t *lab = cur->labels; /* clip labels → one label per logits row */
        for (int k = b - 1; k >= 0 && R > 1; k--)
            for (int q = R - 1; q >= 0; q--) lab[k * R + q] = lab[k];
        const int64_t global_step = (int64_t)epoch * S + step;
        /* masks are drawn per local row: the other ranks' rows draw from their own streams
         * (rank 0's, and a single process's, are unchanged) */
        const uint64_t mask_seed = t->row0 ? mix((uint64_t)p->seed, (uint64_t)t->row0) : (uint64_t)p->seed;
        if (t->s) { /* pretraining runs without dropout and drop path (VideoMAE's default) */
            tubelet_state_set_drop_path(t->s, (float)t->tc.drop_path, mask_seed, global_step);
            tubelet_state_set_dropout(t->s, (float)t->tc.hidden_dropout,
                                      (float)t->tc.attn_dropout, mask_seed, global_step);
        }
        float loss = 0;
        const int opt_step = (step + 1) % t->tc.accum == 0 || step + 1 == S;
        overlap_arm(t, opt_step);
        const int reuse = batch_cached(cur); /* every clip's encoder output is kept */
        int frc = reuse ? encoder_outputs(t, cur, 0, err, sizeof err) : TUBELET_OK;
        if (!frc)
            frc = t->pt ? pretrain_step(t, cur->pixels, global_step, t->row0, 1, &loss, err,
                                        sizeof err)
                        : tubelet_forward_backward(t->s, cur->pixels, lab, &loss, t->logits,
                                                   err, sizeof err);
        if (!frc && t->enc_cache && !reuse) frc = encoder_outputs(t, cur, 1, err, sizeof err);
        if (opt_step && t->ov) overlap_start(t->ov, INT_MIN); /* every rank, even one that failed */
        /* the batch's loss, and its rows that are real clips (not the short batch's fill) */
        double red[4] = {(double)loss * ((double)b / B), 0, 0, frc != 0};
        for (int k = 0; !frc && !t->pt && k < b * R; k++) { /* pretraining: no accuracy */
            if (t->row0 + k / R >= cur->count) break;
            const float *l = t->logits + (int64_t)k * t->n_labels;
            int best = 0;
            for (int c = 1; c < t->n_labels; c++) best = l[c] > l[best] ? c : best;
            red[1] += best == lab[k], red[2] += 1;
        }
        if ((rc = tb_dist_sum_f64(t->dist, red, 4, e))) break;
        if (red[3] > 0) {
            tb_err ignored;
            if (opt_step && t->ov) (void)tb_dist_wait(t->ov->pend, &ignored);
            if (frc) tb_fail(e, frc, "epoch %d step %d: %s; stopping (the last checkpoint in %s "
                             "is kept)", epoch + 1, step + 1, err, t->ckpt);
            else tb_fail(e, TUBELET_ERR_VALUE, "epoch %d step %d: stopped: another rank failed",
                         epoch + 1, step + 1);
            rc = frc ? frc : TUBELET_ERR_VALUE;
            break;
        }
        if (opt_step) {
            if ((rc = overlap_finish(t, e))) break;
            /* the ranks' sum, made on the host: back to a device backend's gradients */
            if (t->ov && (rc = tubelet_grads_changed(t->grads, err, sizeof err))) {
                tb_fail(e, rc, "epoch %d step %d: %s", epoch + 1, step + 1, err);
                break;
            }
            /* where the weights and gradients live: nothing crosses to or from a device */
            if ((rc = tb_adamw_step(t->opt, t->grads, 1.0 / t->tc.accum, NULL, e))) {
                tb_prefix(e, rc, "epoch %d step %d: ", epoch + 1, step + 1);
                break;
            }
            tubelet_grads_zero(t->grads);
        }
        n_right += red[1], n_rows += red[2];
        sum_loss += red[0] * cur->count;
        double el = now() - t0, done_clips = (double)(step * B + cur->count);
        tubelet_train_progress pr = {epoch + 1, p->epochs, step + 1, S, sum_loss / done_clips,
                                     n_rows > 0 ? n_right / n_rows : 0, done_clips / el,
                                     el / (step + 1) * (S - step - 1)};
        if (p->on_progress && t->rank == 0) p->on_progress(p->user, &pr);
    }
    if (have) pthread_join(next, NULL);
    *train_loss = sum_loss / t->tr.n;
    return rc;
}

/* Pretraining validation: each real clip's reconstruction loss (the MSE over its masked
 * tokens, from the step's logits and targets) into sums[0], the clip into sums[2]. */
static void pretrain_clip_losses(trainer *t, int n_real, double *sums) {
    const float *target = tubelet_pretrain_targets(t->pt);
    const int64_t per = t->n_labels; /* masked tokens x patch pixels of a clip */
    for (int k = 0; k < t->local_batch && k < n_real; k++) {
        double s = 0;
        for (int64_t i = k * per; i < (k + 1) * per; i++) {
            const double d = (double)t->logits[i] - target[i];
            s += d * d;
        }
        sums[0] += s / (double)per, sums[2] += 1;
    }
}

/* Evaluation preprocessing, same batch shape (a short batch padded); one prediction per clip,
 * as classify makes it: space_only's per-frame softmax rows are averaged, and the loss is that
 * prediction's negative log-likelihood. */
static int validate(trainer *t, int epoch, double *val_loss, double *val_acc, tb_err *e) {
    const int B = t->p->batch, R = t->rows_per_clip;
    char err[1024];
    double sums[3] = {0, 0, 0}; /* loss, right, clips: this rank's rows, then every rank's */
    int rc = TUBELET_OK;
    for (int first = 0; first < t->val_n && !rc; first += B) {
        double flags[1] = {stopped(t)};
        if ((rc = tb_dist_sum_f64(t->dist, flags, 1, e))) break;
        if (flags[0] > 0) return interrupted(t, epoch, e);
        batch_job vj = {&t->va, &t->cp_val, t->val_order, first, t->val_n - first < B ? t->val_n - first : B,
                        t->row0, t->local_batch, 0, t->jobs[0].pixels, t->jobs[0].labels, NULL, 0, {{0}}};
        load_batch(&vj);
        float loss;
        if (vj.rc) rc = vj.rc, *e = vj.err;
        else if (t->pt) { /* the same masks every epoch: step -1, the clip's place in the list */
            if ((rc = pretrain_step(t, vj.pixels, -1, first + t->row0, 0, &loss, err, sizeof err)))
                tb_fail(e, rc, "validation: %s", err);
            else
                pretrain_clip_losses(t, vj.count - t->row0, sums);
        } else if ((rc = tubelet_forward(t->s, vj.pixels, t->logits, NULL, err, sizeof err)))
            tb_fail(e, rc, "validation: %s", err);
        for (int k = 0; !rc && !t->pt && k < t->local_batch && t->row0 + k < vj.count; k++) {
            tubelet_mean_softmax(t->logits + (int64_t)k * R * t->n_labels, R, t->n_labels, t->vprob);
            int y = (int)vj.labels[k], best = 0;
            for (int c = 1; c < t->n_labels; c++) best = t->vprob[c] > t->vprob[best] ? c : best;
            sums[0] -= log(t->vprob[y] > 1e-300 ? t->vprob[y] : 1e-300);
            sums[1] += best == y, sums[2] += 1;
        }
        rc = agree(t, rc, e);
    }
    if (!rc) rc = tb_dist_sum_f64(t->dist, sums, 3, e);
    if (rc) return rc;
    *val_loss = sums[0] / sums[2], *val_acc = sums[1] / sums[2];
    return TUBELET_OK;
}

static int write_outputs(trainer *t, int epoch, int best, tb_err *e);

/* After validation: the outputs of the epoch, written by rank 0 while the others wait. */
static int end_epoch(trainer *t, int epoch, tb_err *e) {
    double *h = t->hist;
    const int best = !t->pt && h[3 * epoch + 2] > t->best_acc; /* pretraining: no best model */
    if (best) t->best_acc = h[3 * epoch + 2];
    t->state.epoch = epoch + 1, t->state.step = tb_adamw_steps(t->opt);
    int rc = t->rank == 0 ? write_outputs(t, epoch, best, e) : TUBELET_OK;
    if ((rc = agree(t, rc, e))) return rc;
    t->saved = 1; /* on every rank: the checkpoint of this epoch is in place */
    return TUBELET_OK;
}

/* Rank 0: metrics.csv, curves.png, the checkpoint, and the best model. */
static int write_outputs(trainer *t, int epoch, int best, tb_err *e) {
    double *h = t->hist;
    int rc = write_metrics(t, epoch + 1, e);
    if (rc) return rc;
    int np = epoch + 1;
    double *curves = malloc(sizeof(double) * 3 * (size_t)np);
    if (curves) {
        for (int k = 0; k < np; k++)
            curves[k] = h[3 * k], curves[np + k] = h[3 * k + 1], curves[2 * np + k] = h[3 * k + 2];
        char png[2200];
        tb_err pe = {{0}};
        snprintf(png, sizeof png, "%s/curves.png", t->p->outdir);
        if (tb_plot_curves(png, curves, curves + np, t->pt ? NULL : curves + 2 * np, np, &pe))
            tb_warn(&t->log, "%s", pe.msg);
        free(curves);
    }
    /* a device backend trains its own copy of the weights: the host's, for the files */
    if ((rc = tb_adamw_weights_to_host(t->opt, e))) return rc;
    if ((rc = save_checkpoint(t, "checkpoint", 1, e))) return rc;
    return best ? save_checkpoint(t, "best", 0, e) : TUBELET_OK;
}

static void close_run(trainer *t, int rc) {
    for (int k = 0; k < 2; k++) free(t->jobs[k].pixels), free(t->jobs[k].labels);
    free(t->logits), free(t->vprob), free(t->order), free(t->val_order), free(t->hist);
    free(t->enc_cache), free(t->enc_batch), free(t->enc_have);
    free(t->preproc_json);
    tb_adamw_free(t->opt);
    overlap_free(t->ov);
    tubelet_preprocessor_free(t->pre);
    tubelet_state_free(t->s);
    tubelet_pretrain_free(t->pt), free(t->mask);
    tubelet_grads_free(t->grads);
    tubelet_model_free(t->m);
    tb_dataset_free(&t->va);
    tb_dataset_free(&t->tr);
    if (rc && t->created && !t->saved) remove_new_outdir(t->p->outdir);
    if (t->lock_fd >= 0) close(t->lock_fd);
}

static int run(trainer *t, tubelet_train_result *res, tb_err *e) {
    const tubelet_train_params *p = t->p;
    int rc;
    if ((rc = agree(t, open_run(t, e), e)) || (rc = agree(t, check_resume(t, e), e)) ||
        (rc = agree(t, load_model(t, e), e)) || (rc = agree(t, build_training(t, e), e)))
        return rc;
    tb_run_settings settings = {p->epochs, p->batch, p->seed, t->tr.n, p->lr, t->tc, p->mask_ratio,
                                p->precision};
    if (p->resume && (rc = agree(t, restore(t, &settings, e), e))) return rc;
    t->state = (tb_trainer_state){t->start_epoch, tb_adamw_steps(t->opt), 1, settings};
    t->best_acc = -1;
    for (int k = 0; k < t->start_epoch && k < p->epochs; k++) /* resumed: the best so far */
        if (t->hist[3 * k + 2] > t->best_acc) t->best_acc = t->hist[3 * k + 2];
    if (t->start_epoch >= p->epochs) report(t, "%s already finished all %d epochs", t->ckpt, p->epochs);
    res->epochs_done = t->start_epoch;
    for (int epoch = t->start_epoch; epoch < p->epochs; epoch++) {
        double t0 = now(), tl = 0, vl = 0, vacc = 0;
        if ((rc = train_epoch(t, epoch, &tl, e)) || (rc = validate(t, epoch, &vl, &vacc, e))) return rc;
        t->hist[3 * epoch] = tl, t->hist[3 * epoch + 1] = vl, t->hist[3 * epoch + 2] = vacc;
        tubelet_epoch_result er = {epoch + 1, tl, vl, vacc, now() - t0, 0, 0};
        if (t->ov && t->ov->steps) {
            er.allreduce_wait_s = t->ov->wait_s / t->ov->steps, er.allreduce_s = t->ov->comm_s / t->ov->steps;
            t->ov->wait_s = t->ov->comm_s = 0, t->ov->steps = 0;
        }
        if (p->on_epoch && t->rank == 0) p->on_epoch(p->user, &er);
        if ((rc = end_epoch(t, epoch, e))) return rc;
        res->epochs_done = epoch + 1, res->checkpoint_saved = 1;
        if (p->stop_after && epoch + 1 >= p->stop_after && epoch + 1 < p->epochs) {
            report(t, "stopping after epoch %d as asked; continue with --resume", epoch + 1);
            break;
        }
    }
    res->best_val_accuracy = t->best_acc;
    return TUBELET_OK;
}

int tubelet_train(const tubelet_train_params *p, tubelet_train_result *result, char *err,
                  size_t errlen) {
    tb_err e = {{0}};
    tubelet_train_result ignored;
    trainer t;
    memset(&t, 0, sizeof t);
    t.p = p, t.lock_fd = -1, t.log = (tb_log){p->log, p->log_user};
    /* this rank's rows of every batch: the first B % N ranks take one more */
    t.dist = p->dist, t.rank = tb_dist_rank(p->dist), t.ranks = tb_dist_size(p->dist);
    const int q = p->batch / t.ranks, extra = p->batch % t.ranks;
    t.row0 = t.rank * q + (t.rank < extra ? t.rank : extra);
    t.local_batch = q + (t.rank < extra);
    if (!result) result = &ignored;
    memset(result, 0, sizeof *result);
    int rc = run(&t, result, &e);
    close_run(&t, rc);
    return tb_err_out(rc, &e, err, errlen);
}
