/* tubelet train: train or fine-tune a model on a CSV of videos. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>


#include "app.h"
#include "cli.h"
#include "tubelet_train.h"

/* ---- signals: stop at the end of the current step, never in the middle of a save ---- */

static volatile sig_atomic_t g_signal; /* set by the handler, the only thing it may touch */
static volatile int g_stop;           /* what the trainer polls (tubelet_train_params.stop) */

static void on_signal(int sig) { g_signal = sig, g_stop = 1; }

static void install_signals(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sa.sa_flags = SA_RESTART | SA_RESETHAND; /* a second Ctrl-C kills at once: saves survive it */
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

static int g_pretrain; /* tubelet pretrain: no accuracy to show */

static cli_bar g_bar; /* the rule of every command's progress (cli.h) */

static void progress(void *user, const tubelet_train_progress *p) {
    (void)user;
    enum { W = 24 };
    const int done = p->step, total = p->steps, fill = total ? W * done / total : W;
    char bar[W + 1], acc[32] = "";
    for (int i = 0; i < W; i++) bar[i] = i < fill ? '=' : i == fill ? '>' : ' ';
    bar[W] = 0;
    if (!g_pretrain) snprintf(acc, sizeof acc, "  acc %.3f", p->accuracy);
    cli_progress(&g_bar, done, total,
                 "epoch %d/%d [%s] %d/%d  loss %.4f%s  %.1f clips/s  ETA %d:%02d", p->epoch,
                 p->epochs, bar, done, total, p->loss, acc, p->clips_per_s, (int)p->eta_s / 60,
                 (int)p->eta_s % 60);
}

static void epoch_done(void *user, const tubelet_epoch_result *r) {
    (void)user;
    if (g_pretrain)
        fprintf(stderr, "epoch %d: train loss %.4f, val reconstruction loss %.4f (%.1f s", r->epoch,
                r->train_loss, r->val_loss, r->seconds);
    else
        fprintf(stderr, "epoch %d: train loss %.4f, val loss %.4f, val acc %.4f (%.1f s", r->epoch,
                r->train_loss, r->val_loss, r->val_accuracy, r->seconds);
    if (r->allreduce_s > 0)
        fprintf(stderr, "; all-reduce %.1f ms per step, %.1f ms of it waited after the backward",
                1e3 * r->allreduce_s, 1e3 * r->allreduce_wait_s);
    fprintf(stderr, ")\n");
}

static int g_rank; /* this process's rank: only rank 0 prints warnings */

/* Warnings as "warning: ...", the run's report lines as they are. */
static void train_log(void *user, int level, const char *msg) {
    (void)user;
    if (g_rank) return;
    if (level == 2) fprintf(stderr, "%s\n", msg);
    else app_log(NULL, level, msg);
}

/* tests only: TUBELET_TEST_KILL_SAVE=E.P kills the process after step P of epoch E's save */
static void kill_at_save(void *user, int epoch, int step) {
    const int *at = user;
    if (at[0] == epoch && at[1] == step) raise(SIGKILL);
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

static int run_training(tubelet_train_params *p);

int cmd_train(int argc, char **argv) {
    const char *prec_s = NULL, *cfg_path = NULL, *s_mem = NULL;
    tubelet_train_params p = tubelet_train_default_params();
    const cli_option opts[] = {
        {"--model", CLI_STR, &p.model_dir, 0, 0, "DIR", "a Hugging Face directory to fine-tune (config.json alone: random init)"},
        {"--arch", CLI_STR, &p.arch, 0, 0, "NAME", "a built-in architecture, random weights"},
        {"--train", CLI_STR, &p.train_csv, 0, 0, "CSV", "training clips, `path,label`"},
        {"--val", CLI_STR, &p.val_csv, 0, 0, "CSV", "validation clips"},
        {"-o", CLI_STR, &p.outdir, 0, 0, "OUTDIR", "the run directory"},
        {"--epochs", CLI_INT, &p.epochs, 1, 100000, "E", "(default 10)"},
        {"--batch", CLI_INT, &p.batch, 1, 4096, "B", "clips per step (default 8)"},
        {"--lr", CLI_REAL, &p.lr, 1e-9, 10, "X", "peak learning rate (default 1e-3)"},
        {"--seed", CLI_INT, &p.seed, 0, 2147483647, "K", "data order, augmentation and random init (default 0)"},
        CLI_THREADS_OPTION(&p.threads),
        {"--freeze-encoder", CLI_FLAG, &p.freeze_encoder, 0, 0, NULL,
         "train the probe only: the classifier and what pools for it (V-JEPA 2's\n"
         "attentive pooler, VideoMAE's fc_norm) over the frozen encoder, run as\n"
         "in inference (V-JEPA 2's evaluation protocol; a linear probe elsewhere)"},
        {"--resume", CLI_FLAG, &p.resume, 0, 0, NULL,
         "continue from OUTDIR/checkpoint exactly where it stopped (the same\n"
         "command: other settings are refused, as they would not continue\n"
         "the same run; --epochs may grow)"},
        {"--stop-after", CLI_INT, &p.stop_after, 1, 100000, "E", "end this run after epoch E (resume later with --resume)"},
        {"--overwrite", CLI_FLAG, &p.overwrite, 0, 0, NULL,
         "start over in an OUTDIR that holds a run, replacing it (without\n"
         "it, and without --resume, such an OUTDIR is refused)"},
        {"--allreduce-bf16", CLI_FLAG, &p.allreduce_bf16, 0, 0, NULL,
         "under mpirun: sum the gradients over the ranks in bf16, half the\n"
         "bytes of f32 (docs/distributed.md measures its effect on the loss)"},
        {"--allreduce-blocking", CLI_FLAG, &p.allreduce_blocking, 0, 0, NULL,
         "under mpirun: all-reduce after the whole backward instead of\n"
         "overlapping it with the backward block by block (to measure the overlap)"},
        {"--data-root", CLI_STR, &p.data_root, 0, 0, "D",
         "CSV paths are relative to D and may not leave it (no absolute\n"
         "paths, no ..); without it they are relative to the CSV and followed"},
        {"--max-memory", CLI_STR, &s_mem, 0, 0, "S",
         "refuse a model and batch that need more than S bytes (e.g. 8G;\n"
         "default: the machine's memory)"},
        {"--config", CLI_STR, &cfg_path, 0, 0, "FILE",
         "JSON with any of: weight_decay (0.05), warmup_epochs (1),\n"
         "min_lr (1e-6), layer_decay (1 = off), clip_grad (0 = off),\n"
         "accum_steps (1), min_scale (0.5: random resized crop),\n"
         "hflip (false: it would swap left/right motion),\n"
         "gradient_checkpointing (false: recompute blocks in the backward),\n"
         "freeze_encoder (false: as --freeze-encoder), augment (true; false: training\n"
         "clips made as validation's, and a frozen encoder's outputs kept per clip),\n"
         "label_smoothing (0), drop_path_rate (0: stochastic depth of the\n"
         "last block, linear in depth from 0), hidden_dropout_prob and\n"
         "attention_probs_dropout_prob (default: the model's config.json);\n"
         "an unknown key or a value out of range is an error"},
        CLI_TRAIN_PRECISION_OPTION(&prec_s),
        CLI_DEVICE_OPTION,
        {0}};
    const cli_command cmd = {
        "train",
        "train (--model DIR | --arch NAME) --train CSV --val CSV -o OUTDIR\n"
        "                     [--epochs E] [--batch B] [--lr X] [--seed K] [--threads N]\n"
        "                     [--resume | --overwrite] [--config FILE.json] [--data-root DIR]\n"
        "                     [--max-memory SIZE] [--precision fp32|bf16] [--device cpu|cuda]",
        "Trains on the videos of a CSV/TSV of `path,label` (paths relative to the CSV; the\n"
        "classes come from labels.txt beside it, or the sorted labels). --model DIR fine-tunes\n"
        "a Hugging Face directory; a directory with only config.json starts from random\n"
        "weights; a classifier of another size is re-initialised. Each epoch: validation,\n"
        "OUTDIR/metrics.csv, OUTDIR/curves.png and a checkpoint OUTDIR/checkpoint/ (a Hugging\n"
        "Face directory plus optimizer.safetensors and trainer_state.json, replaced\n"
        "atomically); the best validation accuracy is kept in OUTDIR/best/. Every clip is\n"
        "checked before the first step. One trainer at a time per OUTDIR (OUTDIR/train.lock).\n"
        "Ctrl-C or SIGTERM stops at the end of the current step; the last checkpoint stays\n"
        "intact and --resume continues from it (docs/training.md).\n",
        opts, NULL, NULL, 0, NULL};
    int pr = cli_parse(&cmd, argc, argv);
    if (pr >= 0) return pr;
    if (!cli_train_precision("train", prec_s, &p.precision)) return 2;
    if (!p.model_dir == !p.arch || !p.train_csv || !p.val_csv || !p.outdir) {
        fprintf(stderr, "error: tubelet train needs one of --model/--arch, --train, --val and -o\n\n");
        cli_print_help(&cmd, stderr);
        return 2;
    }
    if (s_mem && !parse_size(s_mem, &p.max_memory)) return 2;
    p.config_path = cfg_path;
    p.device = cli_device;
    return run_training(&p);
}

/* The run, under mpirun one rank of it, with the CLI's progress, signals and exit codes. */
static int run_training(tubelet_train_params *pp) {
    tubelet_train_params p = *pp;
    char err[1024];
    if (p.resume && p.overwrite) {
        fprintf(stderr, "error: --resume continues the run in %s and --overwrite replaces it: "
                "give one of them\n", p.outdir);
        return 2;
    }
    p.log = train_log, p.on_progress = progress, p.on_epoch = epoch_done, p.stop = &g_stop;
    int kill_at[2] = {0, 0};
    const char *k = getenv("TUBELET_TEST_KILL_SAVE");
    if (k && sscanf(k, "%d.%d", &kill_at[0], &kill_at[1]) == 2) p.save_hook = kill_at_save, p.user = kill_at;
    /* started by mpirun: one rank of a data-parallel run */
    tubelet_dist *dist = NULL;
    int rank = 0;
    const char *world = getenv("OMPI_COMM_WORLD_SIZE");
    if (world && atoi(world) > 1) {
        if (!tubelet_dist_available()) {
            fprintf(stderr, "error: started by mpirun with %s ranks, but this tubelet was built "
                    "without MPI; build it with `make MPI=1`\n", world);
            return 2;
        }
        if (tubelet_dist_init(&dist, NULL, NULL, err, sizeof err)) {
            fprintf(stderr, "error: %s\n", err);
            return 1;
        }
        p.dist = dist, rank = tubelet_dist_rank(dist);
        g_rank = rank;
    }
    install_signals();
    cli_progress_init(&g_bar);
    int rc = tubelet_train(&p, NULL, err, sizeof err);
    cli_progress_end(&g_bar);
    signal(SIGINT, SIG_DFL), signal(SIGTERM, SIG_DFL);
    tubelet_dist_finalize(dist);
    const int code = rc == TUBELET_INTERRUPTED ? 128 + (g_signal ? g_signal : SIGTERM)
                   : rc == TUBELET_ERR_ARG || rc == TUBELET_ERR_CONFIG ? 2 : rc ? 1 : 0;
    if (rank > 0) { /* rank 0 reports the run; the others only their own failures */
        if (rc && rc != TUBELET_INTERRUPTED && !strstr(err, "another rank"))
            fprintf(stderr, "error: rank %d: %s\n", rank, err);
    } else if (rc == TUBELET_INTERRUPTED) {
        fprintf(stderr, "%s (%s)\n", err, g_signal == SIGINT ? "SIGINT" : "SIGTERM");
    } else if (rc) {
        fprintf(stderr, "error: %s\n", err);
    }
    return code;
}

/* tubelet pretrain: VideoMAE masked pretraining on unlabelled videos (docs/pretraining.md). */
int cmd_pretrain(int argc, char **argv) {
    const char *cfg_path = NULL, *s_mem = NULL, *prec_s = NULL;
    tubelet_train_params p = tubelet_train_default_params();
    p.mask_ratio = 0.9, p.lr = 1.5e-4, p.batch = 8;
    const cli_option opts[] = {
        {"--model", CLI_STR, &p.model_dir, 0, 0, "DIR",
         "a VideoMAEForPreTraining directory (config.json alone: random init)"},
        {"--arch", CLI_STR, &p.arch, 0, 0, "NAME", "a built-in pretraining architecture,\n"
         "random weights: videomae-tiny-pretrain (0.6M parameters, 8x32²)\n"
         "or videomae-b-pretrain (ViT-B, 16x224²)"},
        {"--videos", CLI_STR, &p.train_csv, 0, 0, "LIST",
         "the videos: a directory, or a file of paths one a line (a CSV's\n"
         "labels are ignored)"},
        {"--val", CLI_STR, &p.val_csv, 0, 0, "LIST",
         "videos for the validation reconstruction loss (default: the first\n"
         "2 x batch of --videos)"},
        {"-o", CLI_STR, &p.outdir, 0, 0, "OUTDIR", "the run directory"},
        {"--mask-ratio", CLI_REAL, &p.mask_ratio, 0, 1, "R",
         "tube masking: int(R h w) positions of every frame masked (default 0.9)"},
        {"--epochs", CLI_INT, &p.epochs, 1, 100000, "E", "(default 10)"},
        {"--batch", CLI_INT, &p.batch, 1, 4096, "B", "clips per step (default 8)"},
        {"--lr", CLI_REAL, &p.lr, 1e-9, 10, "X",
         "base learning rate, scaled by B / 256 as VideoMAE does (default 1.5e-4)"},
        {"--seed", CLI_INT, &p.seed, 0, 2147483647, "K",
         "data order, augmentation, masks and random init (default 0)"},
        CLI_THREADS_OPTION(&p.threads),
        {"--resume", CLI_FLAG, &p.resume, 0, 0, NULL, "continue from OUTDIR/checkpoint exactly"},
        {"--stop-after", CLI_INT, &p.stop_after, 1, 100000, "E", "end this run after epoch E"},
        {"--overwrite", CLI_FLAG, &p.overwrite, 0, 0, NULL, "start over in an OUTDIR that holds a run"},
        {"--data-root", CLI_STR, &p.data_root, 0, 0, "D", "list paths are relative to D, confined to it"},
        {"--max-memory", CLI_STR, &s_mem, 0, 0, "S", "refuse what needs more than S bytes"},
        {"--config", CLI_STR, &cfg_path, 0, 0, "FILE",
         "the train config of tubelet train --help (weight_decay 0.05,\n"
         "warmup_epochs, min_lr, clip_grad, min_scale, gradient_checkpointing, ...)"},
        CLI_TRAIN_PRECISION_OPTION(&prec_s),
        CLI_DEVICE_OPTION,
        {0}};
    const cli_command cmd = {
        "pretrain",
        "pretrain (--model DIR | --arch NAME) --videos LIST -o OUTDIR [--mask-ratio 0.9]\n"
        "                     [--val LIST] [--epochs E] [--batch B] [--lr X] [--seed K]\n"
        "                     [--threads N] [--resume | --overwrite] [--config FILE.json]\n"
        "                     [--precision P]",
        "Masked-autoencoder pretraining of a VideoMAEForPreTraining model (VideoMAE, Tong et\n"
        "al. 2022): every step masks tubes (one spatial mask repeated over time, drawn from\n"
        "the seed, the step and the clip), runs the encoder over the visible tokens and the\n"
        "decoder over all, and minimises the masked tokens' pixel MSE. AdamW with VideoMAE's\n"
        "recipe: lr = X * B / 256, betas (0.9, 0.95), weight decay 0.05, warm-up + cosine.\n"
        "OUTDIR gets metrics.csv (train loss, validation reconstruction loss), curves.png and\n"
        "checkpoint/ (a Hugging Face VideoMAEForPreTraining directory, replaced atomically);\n"
        "--resume continues exactly. Fine-tune the result with tubelet train --model\n"
        "OUTDIR/checkpoint (docs/pretraining.md).\n",
        opts, NULL, NULL, 0, NULL};
    int pr = cli_parse(&cmd, argc, argv);
    if (pr >= 0) return pr;
    if (!p.model_dir == !p.arch || !p.train_csv || !p.outdir) {
        fprintf(stderr, "error: tubelet pretrain needs one of --model/--arch, --videos and -o\n\n");
        cli_print_help(&cmd, stderr);
        return 2;
    }
    if (!cli_train_precision("pretrain", prec_s, &p.precision)) return 2;
    if (!(p.mask_ratio > 0 && p.mask_ratio < 1)) {
        fprintf(stderr, "error: --mask-ratio %g is outside (0, 1)\n", p.mask_ratio);
        return 2;
    }
    if (s_mem && !parse_size(s_mem, &p.max_memory)) return 2;
    p.config_path = cfg_path;
    g_pretrain = 1;
    return run_training(&p);
}
