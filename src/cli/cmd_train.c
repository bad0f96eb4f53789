/* tubelet train: train or fine-tune a model on a CSV of videos. */
#include <errno.h>
#include <math.h>
#include <dirent.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "cli.h"
#include "train/checkpoint.h"
#include "train/data.h"
#include "train/optim.h"
#include "train/plot.h"
#include "train/run_config.h"
#include "tubelet_video.h"

static void help(FILE *f) {
    fprintf(f,
            "usage: tubelet train (--model DIR | --arch NAME) --train CSV --val CSV -o OUTDIR\n"
            "                     [--epochs E] [--batch B] [--lr X] [--seed K] [--threads N]\n"
            "                     [--resume] [--config FILE.json] [--data-root DIR]\n"
            "                     [--max-memory SIZE]\n\n"
            "Trains on the videos of a CSV/TSV of `path,label` (paths relative to the CSV; the\n"
            "classes come from labels.txt beside it, or the sorted labels). --model DIR fine-tunes\n"
            "a Hugging Face directory; a directory with only config.json starts from random\n"
            "weights; a classifier of another size is re-initialised. Each epoch: validation,\n"
            "OUTDIR/metrics.csv, OUTDIR/curves.png and a checkpoint OUTDIR/checkpoint/ (a Hugging\n"
            "Face directory plus optimizer.safetensors and trainer_state.json, replaced\n"
            "atomically); the best validation accuracy is kept in OUTDIR/best/. Every clip is\n"
            "checked before the first step. One trainer at a time per OUTDIR (OUTDIR/train.lock).\n"
            "Ctrl-C or SIGTERM stops at the end of the current step; the last checkpoint stays\n"
            "intact and --resume continues from it.\n\n"
            "  --epochs E     (default 10)     --batch B   clips per step (default 8)\n"
            "  --lr X         peak learning rate (default 1e-3)\n"
            "  --seed K       data order, augmentation and random init (default 0)\n"
            "  --resume       continue from OUTDIR/checkpoint exactly where it stopped (the same\n"
            "                 command: other settings are refused, as they would not continue\n"
            "                 the same run)\n"
            "  --stop-after E end this run after epoch E (resume later with --resume)\n"
            "  --data-root D  CSV paths are relative to D and may not leave it (no absolute\n"
            "                 paths, no ..); without it they are relative to the CSV and followed\n"
            "  --max-memory S refuse a model and batch that need more than S bytes (e.g. 8G;\n"
            "                 default: the machine's memory)\n"
            "  --config FILE  JSON with any of: weight_decay (0.05), warmup_epochs (1),\n"
            "                 min_lr (1e-6), layer_decay (1 = off), clip_grad (0 = off),\n"
            "                 accum_steps (1), min_scale (0.5: random resized crop),\n"
            "                 hflip (false: it would swap left/right motion),\n"
            "                 gradient_checkpointing (false: recompute blocks in the backward),\n"
            "                 label_smoothing (0), drop_path_rate (0: stochastic depth of the\n"
            "                 last block, linear in depth from 0), hidden_dropout_prob and\n"
            "                 attention_probs_dropout_prob (default: the model's config.json);\n"
            "                 an unknown key or a value out of range is an error\n");
}

static int load_train_cfg(const char *path, tb_train_config *c) {
    char *text = NULL;
    tb_err e = {{0}};
    int rc = tb_read_file(path, &text, NULL, 1 << 20, &e);
    if (!rc) rc = tb_train_config_parse(c, text, path, &e);
    free(text);
    if (rc) fprintf(stderr, "error: %s\n", e.msg);
    return rc;
}

/* ---- signals: stop at the end of the current step, never in the middle of a save ---- */

static volatile sig_atomic_t g_signal; /* the CLI's only global: a handler can set nothing else */

static void on_signal(int sig) { g_signal = sig; }

static void install_signals(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sa.sa_flags = SA_RESTART | SA_RESETHAND; /* a second Ctrl-C kills at once: saves survive it */
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

/* ---- batches, decoded on a second thread while the model trains on the previous one ---- */

typedef struct {
    const tb_dataset *d;
    const tb_clip_params *cp;
    const int *order;
    int first, count, batch;
    uint64_t seed;
    float *pixels;
    int64_t *labels;
    int rc;
    char err[1024];
} batch_job;

static uint64_t mix(uint64_t a, uint64_t b) {
    uint64_t z = a * 0x9E3779B97F4A7C15ull + b + 0x632BE59BD9B4E019ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static void *load_batch(void *arg) {
    batch_job *j = arg;
    const size_t per = (size_t)j->cp->frames * 3 * j->cp->height * j->cp->width;
    j->rc = 0;
    for (int k = 0; k < j->batch && !j->rc; k++) {
        /* a short last batch is filled up with its first clips; their rows are not counted */
        int i = j->order[j->first + (k < j->count ? k : k % j->count)];
        tb_err e = {{0}};
        j->labels[k] = j->d->labels[i];
        j->rc = tb_dataset_clip(j->d, i, j->cp, mix(j->seed, (uint64_t)i), j->pixels + per * k, &e);
        if (j->rc) snprintf(j->err, sizeof j->err, "%s", e.msg);
    }
    return NULL;
}

/* ---- the run directory ---- */

typedef struct {
    const char *outdir;
    tubelet_model *m;
    const char *preproc_json;
    tb_adamw *opt;
    tb_trainer_state state;
    int kill_epoch, kill_point; /* tests: TUBELET_TEST_KILL_SAVE=E.P stops the process there */
    int point, saved;
} saver;

static void save_point(void *user, int commit_step) {
    saver *sv = user;
    sv->point++;
    (void)commit_step;
    if (sv->kill_epoch == sv->state.epoch && sv->kill_point == sv->point) raise(SIGKILL);
}

static int write_text(const char *dir, const char *name, const char *text) {
    char p[2200];
    tb_err e = {{0}};
    snprintf(p, sizeof p, "%s/%s", dir, name);
    if (!text || tb_atomic_write(p, text, strlen(text), &e)) {
        fprintf(stderr, "error: %s\n", text ? e.msg : "out of memory");
        return 1;
    }
    return 0;
}

/* Writes OUTDIR/<name>.tmp completely, then swaps it in for OUTDIR/<name>: an interruption at
 * any point leaves the old checkpoint or the new one, and the next start cleans up
 * (tb_checkpoint_recover). */
static int save_checkpoint(saver *sv, const char *name, int with_optimizer) {
    char tmp[2200], err[1024], p[2300];
    tb_err e = {{0}};
    sv->point = 0;
    int rc = tb_checkpoint_begin(sv->outdir, name, tmp, sizeof tmp, &e);
    if (rc) fprintf(stderr, "error: %s\n", e.msg);
    if (!rc) save_point(sv, 0);
    if (!rc && (rc = tubelet_model_save(sv->m, tmp, err, sizeof err)))
        fprintf(stderr, "error: %s\n", err);
    if (!rc) save_point(sv, 0);
    if (!rc) rc = write_text(tmp, "preprocessor_config.json", sv->preproc_json);
    if (!rc) save_point(sv, 0);
    if (!rc && with_optimizer) {
        snprintf(p, sizeof p, "%s/optimizer.safetensors", tmp);
        if ((rc = tb_adamw_save(sv->opt, p, &e))) fprintf(stderr, "error: %s\n", e.msg);
        if (!rc) save_point(sv, 0);
        char *state = rc ? NULL : tb_trainer_state_to_json(&sv->state);
        if (!rc) rc = write_text(tmp, "trainer_state.json", state);
        free(state);
        if (!rc) save_point(sv, 0);
    }
    if (!rc && (rc = tb_checkpoint_commit(sv->outdir, name, save_point, sv, &e)))
        fprintf(stderr, "error: %s\n", e.msg);
    if (rc) {
        tb_remove_flat_dir(tmp, &e);
        fprintf(stderr, "error: %s/%s not updated (the previous one is kept)\n", sv->outdir, name);
        return 1;
    }
    sv->saved = 1;
    return 0;
}

/* Leftovers of an interrupted run: half-written checkpoints and temporary files. */
static int clean_outdir(const char *outdir) {
    tb_err e = {{0}};
    if (tb_checkpoint_recover(outdir, "checkpoint", &e) || tb_checkpoint_recover(outdir, "best", &e)) {
        fprintf(stderr, "error: %s\n", e.msg);
        return 1;
    }
    DIR *d = opendir(outdir);
    char p[2200];
    for (struct dirent *de; d && (de = readdir(d));)
        if (!strncmp(de->d_name, "metrics.csv.tmp", 15) || !strncmp(de->d_name, "curves.png.tmp", 14)) {
            snprintf(p, sizeof p, "%s/%s", outdir, de->d_name);
            unlink(p);
        }
    if (d) closedir(d);
    return 0;
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

/* Every clip is opened before the first step: a missing one is found now, not an hour in. */
static int check_clips(const tb_dataset *d, const char *csv) {
    for (int i = 0; i < d->n; i++) {
        tb_err e = {{0}};
        if (tb_check_regular(d->paths[i], &e)) {
            fprintf(stderr, "error: %s, row %d: %s\n", csv, i + 1, e.msg);
            return 1;
        }
    }
    return 0;
}

/* Earlier epochs' metrics, for the plot and the best accuracy so far. */
static void read_history(const char *outdir, int start_epoch, int epochs, double *hist) {
    char p[2200], *text = NULL;
    tb_err e = {{0}};
    snprintf(p, sizeof p, "%s/metrics.csv", outdir);
    if (tb_read_file(p, &text, NULL, 1 << 24, &e)) return;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        int ep_i;
        double a, b, c;
        if (sscanf(line, "%d,%lf,%lf,%lf", &ep_i, &a, &b, &c) == 4 && ep_i >= 1 &&
            ep_i <= start_epoch && ep_i <= epochs)
            hist[3 * (ep_i - 1)] = a, hist[3 * (ep_i - 1) + 1] = b, hist[3 * (ep_i - 1) + 2] = c;
    }
    free(text);
}

/* Reads OUTDIR/checkpoint's optimiser and trainer state and checks them against this run. */
static int load_resume_state(const char *ckpt, tb_adamw *opt, const tb_run_settings *run,
                             int *start_epoch) {
    char p[2200], *text = NULL;
    tb_err e = {{0}};
    tb_trainer_state st;
    snprintf(p, sizeof p, "%s/optimizer.safetensors", ckpt);
    int rc = tb_adamw_load(opt, p, &e);
    snprintf(p, sizeof p, "%s/trainer_state.json", ckpt);
    if (!rc) rc = tb_read_file(p, &text, NULL, 1 << 16, &e);
    if (!rc) rc = tb_trainer_state_parse(&st, text, p, &e);
    free(text);
    if (!rc) rc = tb_trainer_state_check(&st, run, tb_adamw_steps(opt), p, &e);
    if (rc) {
        fprintf(stderr, "error: %s\n", e.msg);
        return 1;
    }
    *start_epoch = st.epoch;
    return 0;
}

static int write_metrics(const char *outdir, const double *hist, int n) {
    size_t cap = 64 + (size_t)n * 80, len = 0;
    char *buf = malloc(cap), p[2200];
    if (!buf) return 1;
    len += (size_t)snprintf(buf, cap, "epoch,train_loss,val_loss,val_acc\n");
    for (int k = 0; k < n; k++)
        len += (size_t)snprintf(buf + len, cap - len, "%d,%.6f,%.6f,%.6f\n", k + 1, hist[3 * k],
                                hist[3 * k + 1], hist[3 * k + 2]);
    tb_err e = {{0}};
    snprintf(p, sizeof p, "%s/metrics.csv", outdir);
    int rc = tb_atomic_write(p, buf, len, &e);
    free(buf);
    if (rc) fprintf(stderr, "error: %s\n", e.msg);
    return rc;
}

static int parse_size(const char *s, int64_t *out) {
    char *end;
    double v = strtod(s, &end);
    double unit = !*end ? 1 : !strcmp(end, "K") ? 1024.0 : !strcmp(end, "M") ? 1048576.0
                : !strcmp(end, "G") ? 1073741824.0 : !strcmp(end, "T") ? 1099511627776.0 : -1;
    if (end == s || unit < 0 || !(v * unit >= 1 << 20) || v * unit > 9e18) {
        fprintf(stderr, "error: --max-memory must be a size of at least 1M, like 512M or 8G; got '%s'\n", s);
        return 0;
    }
    *out = (int64_t)(v * unit);
    return 1;
}

/* A bar redrawn in place on a terminal; into a log, one line per tenth of the epoch. */
static void progress(int epoch, int epochs, int done, int total, double loss, double acc,
                     double rate, double eta) {
    const int W = 24;
    int fill = total ? W * done / total : W;
    int tty = isatty(2);
    if (!tty && total && done != total && (10 * done / total) == (10 * (done - 1) / total)) return;
    fprintf(stderr, "%sepoch %d/%d [", tty ? "\r" : "", epoch, epochs);
    for (int i = 0; i < W; i++) fputc(i < fill ? '=' : i == fill ? '>' : ' ', stderr);
    fprintf(stderr, "] %d/%d  loss %.4f  acc %.3f  %.1f clips/s  ETA %d:%02d %s", done, total,
            loss, acc, rate, (int)eta / 60, (int)eta % 60, tty ? "" : "\n");
    fflush(stderr);
}

int cmd_train(int argc, char **argv) {
    const char *prec_s = NULL; /* accepted only as fp32 */
    const char *dir = NULL, *arch = NULL, *train_csv = NULL, *val_csv = NULL, *outdir = NULL,
               *s_ep = NULL, *s_b = NULL, *s_lr = NULL, *s_seed = NULL, *th = NULL, *cfg_path = NULL,
               *s_stop = NULL, *root = NULL, *s_mem = NULL;
    int bad = 0, resume = 0, epochs = 10, batch = 8, threads = 0, seed = 0, stop_after = 0;
    int64_t max_memory = 0;
    double lr = 1e-3;
    for (int i = 1; i < argc && !bad; i++) {
        if (cli_is_help(argv[i])) return help(stdout), 0;
        if (cli_flag(argv, i, "--resume")) resume = 1;
        else if (!cli_opt(argc, argv, &i, "--model", &dir, &bad) &&
                 !cli_opt(argc, argv, &i, "--arch", &arch, &bad) &&
                 !cli_opt(argc, argv, &i, "--train", &train_csv, &bad) &&
                 !cli_opt(argc, argv, &i, "--val", &val_csv, &bad) &&
                 !cli_opt(argc, argv, &i, "-o", &outdir, &bad) &&
                 !cli_opt(argc, argv, &i, "--epochs", &s_ep, &bad) &&
                 !cli_opt(argc, argv, &i, "--batch", &s_b, &bad) &&
                 !cli_opt(argc, argv, &i, "--lr", &s_lr, &bad) &&
                 !cli_opt(argc, argv, &i, "--seed", &s_seed, &bad) &&
                 !cli_opt(argc, argv, &i, "--threads", &th, &bad) &&
                 !cli_opt(argc, argv, &i, "--precision", &prec_s, &bad) &&
                 !cli_opt(argc, argv, &i, "--config", &cfg_path, &bad) &&
                 !cli_opt(argc, argv, &i, "--data-root", &root, &bad) &&
                 !cli_opt(argc, argv, &i, "--max-memory", &s_mem, &bad) &&
                 !cli_opt(argc, argv, &i, "--stop-after", &s_stop, &bad)) {
            fprintf(stderr, "error: unknown option '%s' (see tubelet train --help)\n", argv[i]);
            return 2;
        }
    }
    if (bad || !cli_fp32_only("train", prec_s)) return 2;
    if (!dir == !arch || !train_csv || !val_csv || !outdir) {
        fprintf(stderr, "error: tubelet train needs one of --model/--arch, --train, --val and -o\n\n");
        help(stderr);
        return 2;
    }
    if ((s_ep && !cli_int(s_ep, "--epochs", 1, 100000, &epochs)) ||
        (s_b && !cli_int(s_b, "--batch", 1, 4096, &batch)) ||
        (s_seed && !cli_int(s_seed, "--seed", 0, 2147483647, &seed)) ||
        (th && !cli_int(th, "--threads", 0, 1024, &threads)) ||
        (s_stop && !cli_int(s_stop, "--stop-after", 1, 100000, &stop_after)) ||
        (s_lr && !cli_double(s_lr, "--lr", 1e-9, 10, &lr)) ||
        (s_mem && !parse_size(s_mem, &max_memory)))
        return 2;
    tb_train_config tc;
    tb_train_config_default(&tc);
    if (cfg_path && load_train_cfg(cfg_path, &tc)) return 2;
    struct stat st_out;
    if (stat(outdir, &st_out) == 0 && !S_ISDIR(st_out.st_mode)) {
        fprintf(stderr, "error: -o %s: exists and is not a directory; choose another -o\n", outdir);
        return 2;
    }

    int rc = 1, created = 0, lock_fd = -1;
    tb_err e = {{0}};
    char err[1024], ckpt[1100];
    tb_dataset tr = {0}, va = {0};
    tubelet_model *m = NULL;
    tubelet_state *s = NULL;
    tb_adamw *opt = NULL;
    batch_job jobs[2] = {{0}};
    float *logits = NULL;
    double *vprob = NULL;
    int *order = NULL, *val_order = NULL, start_epoch = 0;
    char *preproc_json = NULL;
    tubelet_preprocessor *pre = NULL;
    double *hist = NULL;
    saver sv = {0};
    if (tb_dataset_load(&tr, train_csv, root, NULL, 0, &e) ||
        tb_dataset_load(&va, val_csv, root, tr.classes, tr.n_classes, &e)) {
        fprintf(stderr, "error: %s\n", e.msg);
        goto done;
    }
    if (check_clips(&tr, train_csv) || check_clips(&va, val_csv)) goto done;
    if (mkdir(outdir, 0755) == 0) created = 1;
    else if (errno != EEXIST) {
        fprintf(stderr, "error: -o %s: %s\n", outdir, strerror(errno));
        goto done;
    }
    if (tb_outdir_lock(outdir, &lock_fd, &e)) {
        fprintf(stderr, "error: %s\n", e.msg);
        goto done;
    }
    if (clean_outdir(outdir)) goto done;
    snprintf(ckpt, sizeof ckpt, "%s/checkpoint", outdir);
    if (resume && access(ckpt, F_OK) != 0) {
        fprintf(stderr, "error: --resume: %s does not exist\n", ckpt);
        goto done;
    }
    tubelet_load_params lp = tubelet_load_default_params();
    lp.n_threads = threads, lp.log = cli_log, lp.no_mmap = 1, lp.random_init = 1;
    lp.seed = (uint64_t)seed, lp.num_labels = tr.n_classes;
    lp.labels = (const char *const *)tr.classes;
    lp.max_memory = max_memory;
    int lrc = resume ? tubelet_model_load(&m, ckpt, &lp, err, sizeof err)
              : dir  ? tubelet_model_load(&m, dir, &lp, err, sizeof err)
                     : tubelet_model_random(&m, arch, (uint64_t)seed, &lp, err, sizeof err);
    if (lrc) {
        fprintf(stderr, "error: %s\n", err);
        goto done;
    }
    tubelet_model_info mi;
    tubelet_model_get_info(m, &mi);
    char pp_path[1200];
    snprintf(pp_path, sizeof pp_path, "%s/preprocessor_config.json", resume ? ckpt : dir ? dir : "");
    if ((dir || resume) && access(pp_path, F_OK) == 0) {
        if (tubelet_preprocessor_load(&pre, resume ? ckpt : dir, cli_log, NULL, err, sizeof err)) {
            fprintf(stderr, "error: %s\n", err);
            goto done;
        }
    } else if (tubelet_preprocessor_default(&pre, mi.image_height, mi.image_width)) {
        goto oom; /* the VideoMAE processor at the model's size */
    }
    const tb_preproc_config *pc = tb_preprocessor_config(pre);
    preproc_json = tubelet_preprocessor_to_json(pre);
    const int T = mi.num_frames, H = mi.image_height, W = mi.image_width;
    /* weights, gradients and AdamW's two moments, and the two batches of pixels in flight */
    double need = 16.0 * (double)mi.n_params + 8.0 * batch * T * 3.0 * H * W;
    double limit = max_memory ? (double)max_memory : (double)tb_machine_memory();
    if (need > limit) {
        fprintf(stderr, "error: training %s at --batch %d needs at least %.1f GiB, more than the "
                "%.1f GiB %s; lower --batch or the model's size%s\n", dir ? dir : arch ? arch : ckpt,
                batch, need / 1073741824.0, limit / 1073741824.0,
                max_memory ? "allowed by --max-memory" : "this machine has",
                max_memory ? ", or raise --max-memory" : "");
        goto done;
    }
    if (tubelet_model_enable_grads(m, err, sizeof err) ||
        tubelet_state_new(&s, m, batch, T, H, W, err, sizeof err) ||
        tubelet_state_enable_training(s, tc.checkpointing, err, sizeof err)) {
        fprintf(stderr, "error: %s\n", err);
        goto done;
    }
    tubelet_state_set_label_smoothing(s, (float)tc.label_smoothing);
    if (tc.hidden_dropout < 0) tc.hidden_dropout = mi.hidden_dropout_prob;
    if (tc.attn_dropout < 0) tc.attn_dropout = mi.attention_probs_dropout_prob;
    tb_run_settings run = {epochs, batch, seed, tr.n, lr, tc};
    tubelet_shape ls;
    tubelet_state_logits_shape(s, &ls);
    const int rows_per_clip = (int)(ls.dim[0] / batch); /* TimeSformer space_only: T */
    const int steps_per_epoch = (tr.n + batch - 1) / batch;
    tb_adamw_params ap = tb_adamw_default_params();
    ap.lr = lr, ap.min_lr = tc.min_lr, ap.weight_decay = tc.weight_decay;
    ap.layer_decay = tc.layer_decay, ap.clip_norm = tc.clip_grad;
    /* in range: warmup_epochs <= 1e5 and steps_per_epoch < 2^31 (run_config.c) */
    ap.warmup_steps = (int64_t)(tc.warmup_epochs * steps_per_epoch / tc.accum);
    ap.total_steps = (int64_t)epochs * steps_per_epoch / tc.accum;
    if (tb_adamw_new(&opt, m, &ap, &e)) {
        fprintf(stderr, "error: %s\n", e.msg);
        goto done;
    }
    hist = calloc((size_t)epochs * 3, sizeof(double));
    if (!hist) goto oom;
    if (resume) {
        if (load_resume_state(ckpt, opt, &run, &start_epoch)) goto done;
        read_history(outdir, start_epoch, epochs, hist);
        fprintf(stderr, "resuming after epoch %d (step %lld)\n", start_epoch,
                (long long)tb_adamw_steps(opt));
    }
    sv = (saver){outdir, m, preproc_json, opt, {start_epoch, tb_adamw_steps(opt), 1, run}, 0, 0, 0, 0};
    const char *kill_at = getenv("TUBELET_TEST_KILL_SAVE");
    if (kill_at && sscanf(kill_at, "%d.%d", &sv.kill_epoch, &sv.kill_point) != 2) sv.kill_epoch = 0;
    fprintf(stderr, "%s: %d train / %d val clips, %d classes; %s %s, %lld parameters; %d epochs "
            "of %d steps\n", outdir, tr.n, va.n, tr.n_classes, mi.family, mi.variant,
            (long long)mi.n_params, epochs, steps_per_epoch);
    const size_t per_clip = (size_t)T * 3 * H * W;
    for (int k = 0; k < 2; k++) {
        jobs[k].pixels = malloc(sizeof(float) * per_clip * (size_t)batch);
        jobs[k].labels = malloc(sizeof(int64_t) * (size_t)ls.dim[0]);
        if (!jobs[k].pixels || !jobs[k].labels) goto oom;
    }
    logits = malloc(sizeof(float) * (size_t)tubelet_shape_numel(&ls));
    vprob = malloc(sizeof(double) * (size_t)ls.dim[1]);
    order = malloc(sizeof(int) * (size_t)tr.n);
    val_order = malloc(sizeof(int) * (size_t)va.n);
    if (!logits || !vprob || !order || !val_order || !preproc_json) goto oom;
    for (int i = 0; i < va.n; i++) val_order[i] = i;
    tb_clip_params cp_train = {T, H, W, 1, tc.min_scale, tc.hflip, pc};
    tb_clip_params cp_val = {T, H, W, 0, 1, 0, pc};
    double best_acc = -1;
    for (int k = 0; k < start_epoch && k < epochs; k++) /* resumed: the best so far */
        if (hist[3 * k + 2] > best_acc) best_acc = hist[3 * k + 2];
    if (start_epoch >= epochs) fprintf(stderr, "%s already finished all %d epochs\n", ckpt, epochs);
    install_signals();
    for (int epoch = start_epoch; epoch < epochs; epoch++) {
        /* data order of this epoch: a function of the seed and the epoch only (exact resume) */
        uint64_t r = mix((uint64_t)seed, 1000003u + (uint64_t)epoch);
        for (int i = 0; i < tr.n; i++) order[i] = i;
        for (int i = tr.n - 1; i > 0; i--) {
            r = mix(r, (uint64_t)i);
            int k = (int)(r % (uint64_t)(i + 1)), t = order[i];
            order[i] = order[k], order[k] = t;
        }
        double t0 = cli_now(), sum_loss = 0;
        int n_rows = 0, n_right = 0;
        pthread_t th_next;
        for (int k = 0; k < 2; k++) jobs[k] = (batch_job){&tr, &cp_train, order, 0, 0, batch,
                                                          mix((uint64_t)seed, (uint64_t)epoch),
                                                          jobs[k].pixels, jobs[k].labels, 0, {0}};
        jobs[0].count = tr.n < batch ? tr.n : batch;
        int have = pthread_create(&th_next, NULL, load_batch, &jobs[0]) == 0;
        if (!have) load_batch(&jobs[0]);
        tubelet_model_zero_grads(m);
        for (int step = 0; step < steps_per_epoch; step++) {
            batch_job *cur = &jobs[step % 2], *nxt = &jobs[(step + 1) % 2];
            if (have) pthread_join(th_next, NULL);
            have = 0;
            if (g_signal) goto interrupted;
            if (step + 1 < steps_per_epoch) {
                nxt->first = (step + 1) * batch;
                nxt->count = tr.n - nxt->first < batch ? tr.n - nxt->first : batch;
                have = pthread_create(&th_next, NULL, load_batch, nxt) == 0;
                if (!have) load_batch(nxt);
            }
            if (cur->rc) {
                fprintf(stderr, "\nerror: %s\n", cur->err);
                if (have) pthread_join(th_next, NULL);
                goto done;
            }
            /* clip labels → one label per logits row */
            int64_t *lab = cur->labels;
            for (int k = batch - 1; k >= 0 && rows_per_clip > 1; k--)
                for (int q = rows_per_clip - 1; q >= 0; q--) lab[k * rows_per_clip + q] = lab[k];
            float loss;
            tubelet_state_set_drop_path(s, (float)tc.drop_path, (uint64_t)seed,
                                        (int64_t)epoch * steps_per_epoch + step);
            tubelet_state_set_dropout(s, (float)tc.hidden_dropout, (float)tc.attn_dropout,
                                      (uint64_t)seed, (int64_t)epoch * steps_per_epoch + step);
            if (tubelet_forward_backward(s, cur->pixels, lab, &loss, logits, err, sizeof err)) {
                fprintf(stderr, "\nerror: epoch %d step %d: %s; stopping (the last checkpoint in "
                        "%s is kept)\n", epoch + 1, step + 1, err, ckpt);
                if (have) pthread_join(th_next, NULL);
                goto done;
            }
            if ((step + 1) % tc.accum == 0 || step + 1 == steps_per_epoch)
                tb_adamw_step(opt, 1.0 / tc.accum), tubelet_model_zero_grads(m);
            for (int k = 0; k < cur->count * rows_per_clip; k++) {
                const float *l = logits + (int64_t)k * ls.dim[1];
                int best = 0;
                for (int c = 1; c < ls.dim[1]; c++) best = l[c] > l[best] ? c : best;
                n_right += best == lab[k], n_rows++;
            }
            sum_loss += loss * cur->count;
            double el = cli_now() - t0, done_clips = (double)(step * batch + cur->count);
            progress(epoch + 1, epochs, step + 1, steps_per_epoch, sum_loss / done_clips,
                     (double)n_right / n_rows, done_clips / el,
                     el / (step + 1) * (steps_per_epoch - step - 1));
        }
        if (isatty(2)) fprintf(stderr, "\n");
        /* validation: evaluation preprocessing, same batch shape (short batch padded) */
        double vloss = 0;
        int vright = 0, vrows = 0;
        for (int first = 0; first < va.n; first += batch) {
            if (g_signal) goto interrupted;
            batch_job vj = {&va, &cp_val, val_order, first, va.n - first < batch ? va.n - first : batch,
                            batch, 0, jobs[0].pixels, jobs[0].labels, 0, {0}};
            load_batch(&vj);
            if (vj.rc) {
                fprintf(stderr, "error: %s\n", vj.err);
                goto done;
            }
            if (tubelet_forward(s, vj.pixels, logits, NULL, err, sizeof err)) {
                fprintf(stderr, "error: validation: %s\n", err);
                goto done;
            }
            /* one prediction per clip, as classify makes it: space_only's per-frame softmax
             * rows are averaged; the loss is that prediction's negative log-likelihood */
            for (int k = 0; k < vj.count; k++) {
                cli_mean_softmax(logits + (int64_t)k * rows_per_clip * ls.dim[1], rows_per_clip,
                                 ls.dim[1], vprob);
                int y = (int)vj.labels[k], best = 0;
                for (int c = 1; c < ls.dim[1]; c++) best = vprob[c] > vprob[best] ? c : best;
                vloss -= log(vprob[y] > 1e-300 ? vprob[y] : 1e-300);
                vright += best == y, vrows++;
            }
        }
        double tl = sum_loss / tr.n, vl = vloss / vrows, vacc = (double)vright / vrows;
        fprintf(stderr, "epoch %d: train loss %.4f, val loss %.4f, val acc %.4f (%.1f s)\n",
                epoch + 1, tl, vl, vacc, cli_now() - t0);
        hist[3 * epoch] = tl, hist[3 * epoch + 1] = vl, hist[3 * epoch + 2] = vacc;
        if (write_metrics(outdir, hist, epoch + 1)) goto done;
        double ptl[4096], pvl[4096], pva[4096];
        int np = epoch + 1 < 4096 ? epoch + 1 : 4096;
        for (int k = 0; k < np; k++) ptl[k] = hist[3 * k], pvl[k] = hist[3 * k + 1], pva[k] = hist[3 * k + 2];
        char png[1200];
        snprintf(png, sizeof png, "%s/curves.png", outdir);
        if (tb_plot_curves(png, ptl, pvl, pva, np, &e)) fprintf(stderr, "warning: %s\n", e.msg);
        sv.state.epoch = epoch + 1, sv.state.step = tb_adamw_steps(opt);
        if (save_checkpoint(&sv, "checkpoint", 1)) goto done;
        if (vacc > best_acc) {
            best_acc = vacc;
            if (save_checkpoint(&sv, "best", 0)) goto done;
        }
        if (stop_after && epoch + 1 >= stop_after && epoch + 1 < epochs) {
            fprintf(stderr, "stopping after epoch %d as asked; continue with --resume\n", epoch + 1);
            break;
        }
    }
    rc = 0;
    goto done;
interrupted:
    rc = 128 + g_signal;
    fprintf(stderr, "\n%s: stopped by %s during epoch %d; that epoch is abandoned. ", outdir,
            g_signal == SIGINT ? "SIGINT" : "SIGTERM", sv.state.epoch + 1);
    if (sv.saved || resume)
        fprintf(stderr, "%s (epoch %d) is intact: run the same command with --resume to "
                "continue from it\n", ckpt, sv.saved ? sv.state.epoch : start_epoch);
    else fprintf(stderr, "No checkpoint was written yet: start again\n");
    goto done;
oom:
    fprintf(stderr, "error: out of memory\n");
done:
    signal(SIGINT, SIG_DFL), signal(SIGTERM, SIG_DFL);
    for (int k = 0; k < 2; k++) free(jobs[k].pixels), free(jobs[k].labels);
    free(logits), free(vprob), free(order), free(val_order), free(hist), free(preproc_json);
    tb_adamw_free(opt);
    tubelet_preprocessor_free(pre);
    tubelet_state_free(s);
    tubelet_model_free(m);
    tb_dataset_free(&va);
    tb_dataset_free(&tr);
    if (rc && created && !sv.saved) remove_new_outdir(outdir);
    if (lock_fd >= 0) close(lock_fd);
    return rc;
}
