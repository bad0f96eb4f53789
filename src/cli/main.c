/* tubelet: the command-line tool. One file per command. */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <sys/stat.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "tubelet_train.h"

static void usage(FILE *f) {
    fprintf(f,
            "tubelet %s: video vision transformers (ViViT, TimeSformer, VideoMAE) in C\n\n"
            "usage: tubelet <command> [options]   (tubelet <command> --help for its options)\n\n"
            "commands:\n"
            "  classify    label video files (top-k with probabilities)\n"
            "  features    embeddings or feature maps of video files (.npy / .safetensors)\n"
            "  preprocess  write the pixel_values a model would see for a video (.npy)\n"
            "  timeline    sliding-window classification over a long video (streaming)\n"
            "  serve       an HTTP inference server: classify uploads, batched (docs/serve.md)\n"
            "  watch       classify a live stream (file, stdin, RTSP/HTTP/UDP/TCP/SRT, camera)\n"
            "  train       train or fine-tune a model on a CSV of videos\n"
            "  pretrain    VideoMAE masked pretraining on unlabelled videos\n"
            "  reconstruct what a pretraining model makes of a masked video (PNG)\n"
            "  init        a video model initialised from an image ViT (--from-image)\n"
            "  grad        loss and the gradient of every parameter for one batch\n"
            "  synth       write the procedural motion dataset (train/val CSVs of videos)\n"
            "  run         run a model on pixel_values from a .npy file, write logits\n"
            "  info        describe a model: family, parameters, input shape, FLOPs\n"
            "  bench       time the forward pass: latency, GFLOP/s, peak memory\n"
            "  convert     an official checkpoint (.pth, .pyth) to a Hugging Face directory\n"
            "  tokenize    CLIP token ids of texts (JSON), as transformers' CLIPTokenizer\n"
            "  calibrate   int8 activation scales from a few clips (static int8)\n"
            ,
            TUBELET_VERSION);
}

void cli_log(void *user, int level, const char *msg) {
    (void)user;
    fprintf(stderr, "%s: %s\n", level == 1 ? "warning" : "info", msg);
}

void cli_json_string(FILE *f, const char *s) {
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\') fprintf(f, "\\%c", *p);
        else if (*p == '\n') fputs("\\n", f);
        else if (*p < 0x20) fprintf(f, "\\u%04x", *p);
        else fputc(*p, f);
    }
    fputc('"', f);
}

void cli_csv_string(FILE *f, const char *s) {
    if (!strpbrk(s, ",\"\n\r")) {
        fputs(s, f);
        return;
    }
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"') fputc('"', f); /* RFC 4180: quotes are doubled */
        fputc(*s, f);
    }
    fputc('"', f);
}

int cli_is_help(const char *s) { return !strcmp(s, "--help") || !strcmp(s, "-h"); }

int cli_precision(const char *s, int *precision, int *reference) {
    *precision = TUBELET_PRECISION_FP32, *reference = 0;
    if (!s) return 1;
    char name[16];
    snprintf(name, sizeof name, "%s", s);
    size_t n = strlen(name);
    if (n > 4 && !strcmp(name + n - 4, "-ref")) name[n - 4] = 0, *reference = 1;
    *precision = tubelet_precision_parse(name);
    if (*precision < 0 || (*reference && *precision == TUBELET_PRECISION_FP32)) {
        fprintf(stderr, "error: --precision must be fp32, bf16, int8, bf16-ref or int8-ref, got "
                        "'%s'\n", s);
        return 0;
    }
    return 1;
}

int cli_train_precision(const char *cmd, const char *s, int *precision) {
    *precision = TUBELET_PRECISION_FP32;
    if (!s || !strcmp(s, "fp32")) return 1;
    if (!strcmp(s, "bf16")) {
        *precision = TUBELET_PRECISION_BF16;
        return 1;
    }
    fprintf(stderr, "error: tubelet %s trains in fp32 or bf16 (mixed precision), not '%s' (int8 "
                    "and the -ref paths are for inference: run, classify, features, timeline, "
                    "bench)\n", cmd, s);
    return 0;
}

/* The model in dir, or random weights at arch's shapes, loaded with lp; prints the error. */
static tubelet_model *load_with(const char *dir, const char *arch, tubelet_load_params *lp) {
    char err[1024];
    tubelet_model *m = NULL;
    lp->log = cli_log;
    int rc = dir ? tubelet_model_load(&m, dir, lp, err, sizeof err)
                 : tubelet_model_random(&m, arch, 42, lp, err, sizeof err);
    if (rc) fprintf(stderr, "error: %s\n", err);
    return rc ? NULL : m;
}

int cli_takes_video(const tubelet_model *m, const char *dir) {
    tubelet_model_info in;
    tubelet_model_get_info(m, &in);
    if (in.num_channels == 3) return 0;
    fprintf(stderr, "error: %s: config.json's num_channels is %d, but videos decode to 3 (RGB) "
            "channels; give this model pixel_values instead (tubelet run --input)\n", dir,
            in.num_channels);
    return 1;
}

tubelet_model *cli_load_train(const char *dir, const char *arch, int threads, int precision,
                              int reference) {
    tubelet_load_params lp = tubelet_load_default_params();
    lp.n_threads = threads;
    lp.train_precision = precision, lp.precision_reference = reference;
    return load_with(dir, arch, &lp);
}

tubelet_model *cli_load(const char *dir, const char *arch, int threads) {
    return cli_load_precision(dir, arch, threads, TUBELET_PRECISION_FP32, 0, 0);
}

tubelet_model *cli_load_precision(const char *dir, const char *arch, int threads, int precision,
                                  int reference, int inference) {
    tubelet_load_params lp = tubelet_load_default_params();
    lp.n_threads = threads;
    lp.precision = precision, lp.precision_reference = reference;
    lp.inference = inference;
    return load_with(dir, arch, &lp);
}

/* The softmax of each of `rows` logits rows, averaged: one prediction from several views (and
 * from TimeSformer space_only's per-frame rows). */
void cli_free_lines(char **items, int n) {
    for (int i = 0; i < n; i++) free(items[i]);
    free(items);
}

int cli_append_list(const char ***videos, int *n_videos, const char *path, char ***items, int *n) {
    if (!(*items = cli_read_lines(path, n))) return 2;
    const char **all = realloc(*videos, sizeof(char *) * (size_t)(*n_videos + *n + 1));
    if (!all) {
        fprintf(stderr, "error: out of memory\n");
        return 1;
    }
    *videos = all;
    for (int i = 0; i < *n; i++) all[(*n_videos)++] = (*items)[i];
    return 0;
}

char **cli_read_lines(const char *path, int *n) {
    struct stat st;
    *n = 0;
    if (stat(path, &st) != 0 || !S_ISREG(st.st_mode)) {
        fprintf(stderr, "error: %s: %s\n", path, errno && stat(path, &st) != 0 ? strerror(errno)
                                                 : "not a regular file; give a file");
        return NULL;
    }
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "error: %s: cannot open: %s\n", path, strerror(errno));
        return NULL;
    }
    char **items = NULL, *line = NULL;
    size_t cap = 0;
    int n_cap = 0;
    for (ssize_t len; (len = getline(&line, &cap, f)) >= 0;) {
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = 0;
        if (!len) continue;
        if (*n == n_cap) {
            char **grown = realloc(items, sizeof(char *) * (size_t)(n_cap = n_cap ? 2 * n_cap : 64));
            if (!grown) break;
            items = grown;
        }
        if (!(items[*n] = strdup(line))) break;
        (*n)++;
    }
    free(line);
    fclose(f);
    if (!items) fprintf(stderr, "error: %s: no paths in it\n", path);
    return items;
}

int cli_dist_join(struct tubelet_dist **dist) {
    const char *world = getenv("OMPI_COMM_WORLD_SIZE");
    char err[1024];
    *dist = NULL;
    if (!world || atoi(world) <= 1) return 0;
    if (!tubelet_dist_available()) {
        fprintf(stderr, "error: started by mpirun with %s ranks, but this tubelet was built "
                "without MPI; build it with `make MPI=1`\n", world);
        return 1;
    }
    if (tubelet_dist_init(dist, NULL, NULL, err, sizeof err)) {
        fprintf(stderr, "error: %s\n", err);
        return 1;
    }
    return 0;
}

double cli_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

double cli_peak_rss_mb(void) {
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return u.ru_maxrss / 1024.0; /* Linux reports kilobytes */
}

/* OpenMP's idle threads spin before they sleep (libgomp: 300,000 turns). When other processes
 * share the cores, a spinning thread holds a core that the thread it waits for needs, and short
 * parallel regions run several times slower (docs/threads.md has the measurements). libgomp reads
 * OMP_WAIT_POLICY and GOMP_SPINCOUNT once, when it loads, before main: so, only when the user set
 * neither, the CLI sets tubelet's default and executes itself again, once. */
#define CLI_SPINCOUNT "10000"
static void cli_wait_policy(char **argv) {
    if (getenv("OMP_WAIT_POLICY") || getenv("GOMP_SPINCOUNT")) return;
    /* the binary's own path, not /proc/self/exe: the process keeps its name (ps, pkill) */
    char self[4096];
    const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0 || n >= (ssize_t)sizeof self - 1) return; /* no /proc: libgomp's default */
    self[n] = 0;
    if (setenv("GOMP_SPINCOUNT", CLI_SPINCOUNT, 1)) return;
    execv(self, argv);
    unsetenv("GOMP_SPINCOUNT"); /* not executable any more: run on with libgomp's default */
}

int main(int argc, char **argv) {
    cli_wait_policy(argv);
    if (argc < 2 || cli_is_help(argv[1])) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "--version")) {
        printf("tubelet %s\n", TUBELET_VERSION);
        return 0;
    }
    /* a file-size limit (ulimit -f) makes write() fail with EFBIG, reported like a full disk,
     * instead of killing the process in the middle of a file */
    signal(SIGXFSZ, SIG_IGN);
    if (!strcmp(argv[1], "run")) return cmd_run(argc - 1, argv + 1);
    if (!strcmp(argv[1], "info")) return cmd_info(argc - 1, argv + 1);
    if (!strcmp(argv[1], "bench")) return cmd_bench(argc - 1, argv + 1);
    if (!strcmp(argv[1], "classify")) return cmd_classify(argc - 1, argv + 1);
    if (!strcmp(argv[1], "preprocess")) return cmd_preprocess(argc - 1, argv + 1);
    if (!strcmp(argv[1], "features")) return cmd_features(argc - 1, argv + 1);
    if (!strcmp(argv[1], "timeline")) return cmd_timeline(argc - 1, argv + 1);
    if (!strcmp(argv[1], "watch")) return cmd_watch(argc - 1, argv + 1);
    if (!strcmp(argv[1], "synth")) return cmd_synth(argc - 1, argv + 1);
    if (!strcmp(argv[1], "grad")) return cmd_grad(argc - 1, argv + 1);
    if (!strcmp(argv[1], "init")) return cmd_init(argc - 1, argv + 1);
    if (!strcmp(argv[1], "train")) return cmd_train(argc - 1, argv + 1);
    if (!strcmp(argv[1], "pretrain")) return cmd_pretrain(argc - 1, argv + 1);
    if (!strcmp(argv[1], "reconstruct")) return cmd_reconstruct(argc - 1, argv + 1);
    if (!strcmp(argv[1], "serve")) return cmd_serve(argc - 1, argv + 1);
    if (!strcmp(argv[1], "convert")) return cmd_convert(argc - 1, argv + 1);
    if (!strcmp(argv[1], "tokenize")) return cmd_tokenize(argc - 1, argv + 1);
    if (!strcmp(argv[1], "calibrate")) return cmd_calibrate(argc - 1, argv + 1);
    fprintf(stderr, "error: unknown command '%s'\n\n", argv[1]);
    usage(stderr);
    return 2;
}
