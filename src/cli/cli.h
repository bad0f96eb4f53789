/* Shared pieces of the command-line tool, by the file that defines them. Results go to stdout,
 * messages to stderr. main.c dispatches to the commands (cmd_*.c, one each); a command calls the
 * other files' functions below, never another command's, and what it shares with the server
 * (src/serve) from src/app/app.h (make check-cli-structure). */
#ifndef TB_CLI_H
#define TB_CLI_H

#include <stdint.h>
#include <stdio.h>

#include "tubelet.h"
#include "tubelet_video.h"

/* The commands: int cmd_NAME(argc, argv) in cmd_NAME.c (cmd_pretrain: cmd_train.c), called by
 * main.c only; the exit status. */
int cmd_run(int argc, char **argv);
int cmd_info(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_classify(int argc, char **argv);
int cmd_preprocess(int argc, char **argv);
int cmd_features(int argc, char **argv);
int cmd_timeline(int argc, char **argv);
int cmd_synth(int argc, char **argv);
int cmd_grad(int argc, char **argv);
int cmd_train(int argc, char **argv);
int cmd_init(int argc, char **argv);
int cmd_convert(int argc, char **argv);
int cmd_pretrain(int argc, char **argv);
int cmd_reconstruct(int argc, char **argv);
int cmd_serve(int argc, char **argv);
int cmd_watch(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_calibrate(int argc, char **argv);

/* common.c */
/* Writes s as a CSV field (quoted and with doubled quotes when it needs to be). */
void cli_csv_string(FILE *f, const char *s);
int cli_is_help(const char *s);
/* The non-empty lines of a small regular file (never a FIFO), malloc'd; NULL after an error
 * message. */
char **cli_read_lines(const char *path, int *n);
/* --list FILE: its lines appended to *videos (realloc'd; the strings stay in *items, freed with
 * app_free_lines). 0, or the exit status after an error message. */
int cli_append_list(const char ***videos, int *n_videos, const char *path, char ***items, int *n);
struct tubelet_dist;
/* Under mpirun with more than one rank, joins the job (*dist set); else *dist stays NULL.
 * Non-zero after an error message. */
int cli_dist_join(struct tubelet_dist **dist);
/* The peak resident memory in MiB. */
double cli_peak_rss_mb(void);

/* load.c: models and precisions */
/* Loads a model from --model DIR or builds --arch NAME; prints the error and returns NULL. */
tubelet_model *cli_load(const char *dir, const char *arch, int threads);
/* The same in a precision parsed by cli_precision (reference: the portable path); inference: the
 * weights packed for forward passes only (tubelet_load_params.inference): about 180 ms more at
 * load for ViT-B against 1-4 % less per forward, so `bench` and `timeline` (many forwards) pack,
 * `classify`, `features` and `run` keep the memory-mapped load (26-40 ms) in fp32. */
tubelet_model *cli_load_precision(const char *dir, const char *arch, int threads, int precision,
                                  int reference, int inference);
/* A model to train in precision (fp32, or bf16: mixed precision; reference: the portable path),
 * its weights in memory. Prints the error. */
tubelet_model *cli_load_train(const char *dir, const char *arch, int threads, int precision,
                              int reference);
/* Videos decode to 3 channels (RGB): 0 if m takes them, else 1 with an error naming dir. */
int cli_takes_video(const tubelet_model *m, const char *dir);
/* 0 if m scores videos against its own labels; 1 with an error naming dir and cmd for a
 * video-text model (X-CLIP), whose labels are texts that only classify and run take so far. */
int cli_own_labels(const tubelet_model *m, const char *dir, const char *cmd);
/* --precision fp32|bf16|int8, or bf16-ref / int8-ref for the portable path; prints the error.
 * s NULL: fp32. */
int cli_precision(const char *s, int *precision, int *reference);
/* train, pretrain, grad: --precision fp32 (default) or bf16 (mixed precision); prints the
 * error. */
int cli_train_precision(const char *cmd, const char *s, int *precision);
#define CLI_TRAIN_PRECISION_OPTION(ptr)                                                        \
    {"--precision", CLI_STR, (ptr), 0, 0, "P",                                                 \
     "fp32 (default) or bf16: mixed precision, as torch.autocast(bfloat16):\n"                 \
     "f32 weights and optimiser state, the linear layers' products (forward\n"                 \
     "and backward) with bf16 operands (docs/training.md)"}
#define CLI_PRECISION_OPTION(ptr)                                                              \
    {"--precision", CLI_STR, (ptr), 0, 0, "P",                                                 \
     "fp32 (default), bf16 or int8 linear layers (docs/precision.md);\n"                        \
     "bf16-ref / int8-ref: the portable path without AVX512-BF16 / VNNI"}
#define CLI_THREADS_OPTION(ptr)                                                                \
    {"--threads", CLI_INT, (ptr), 0, 1024, "N",                                                \
     "threads (default: all cores, but one for a model under 2 GFLOP\n"                       \
     "per clip in classify, features, timeline, watch and serve; at most\n"                   \
     "4 x the CPUs this process may use)"}
/* --device cpu|cuda: the backend the commands that load a model for inference run it on (run,
 * classify, features, bench, timeline; load.c passes it as tubelet_load_params.device), and
 * train (tubelet_train_params.device). NULL: the CPU. */
extern const char *cli_device;
#define CLI_DEVICE_OPTION                                                                      \
    {"--device", CLI_STR, &cli_device, 0, 0, "D",                                              \
     "cpu (default) or cuda: a build with CUDA=1 and an NVIDIA GPU\n"                           \
     "(fp32, not yet verified on a GPU; docs/cuda.md)"}
#define CLI_LABELS_OPTIONS(labels, file, tmpl)                                                 \
    {"--labels", CLI_STR, (labels), 0, 0, "\"A,B,C\"",                                          \
     "X-CLIP: score zero-shot among these labels (comma-separated)"},                          \
    {"--labels-file", CLI_STR, (file), 0, 0, "FILE", "X-CLIP: the labels, one per line"},       \
    {"--template", CLI_STR, (tmpl), 0, 0, "\"..{}..\"",                                         \
     "X-CLIP: the text of each label, {} replaced by it\n"                                      \
     "(default: the label itself), e.g. \"a video of {}\""}
#define CLI_PRECISION_HELP                                                                     \
    "  --precision P    fp32 (default), bf16 or int8 linear layers (docs/precision.md);\n"     \
    "                   bf16-ref / int8-ref: the portable path without AVX512-BF16 / VNNI\n"
/* options.c */
/* A command's options as a table: cli_parse fills the targets (CLI_FLAG sets an int to 1;
 * CLI_INT an int in [lo, hi]; CLI_REAL a double in [lo, hi]; CLI_SECONDS the same with an
 * optional `s` suffix, "2s"; CLI_STR a const char *, the argv string; CLI_LIST a cli_list whose
 * items (argc entries) collect every occurrence's string, `--text a --text b`), accepts `--name value`
 * and `--name=value`, collects the other arguments into positional (at most max_positional),
 * and prints --help from the same table. */
typedef enum { CLI_FLAG, CLI_STR, CLI_INT, CLI_REAL, CLI_SECONDS, CLI_LIST } cli_kind;
typedef struct {
    const char **items;
    int n;
} cli_list;
typedef struct {
    const char *name;  /* "--threads", "-o" */
    cli_kind kind;
    void *out;
    double lo, hi;
    const char *arg;   /* the value's name in --help ("N"); NULL for a flag */
    const char *help;  /* its description; '\n' continues it on the next line */
} cli_option;
typedef struct {
    const char *name;            /* "info" */
    const char *usage;           /* after "usage: tubelet " */
    const char *about;           /* what the command does (ends with '\n') */
    const cli_option *opts;      /* ends with {0} */
    const char **positional;     /* NULL: none accepted */
    int *n_positional;
    int max_positional;
    const char *footer;          /* printed after the options, or NULL */
} cli_command;
/* -1: parsed, go on; 0: --help printed (exit 0); 2: an error printed (exit 2). */
int cli_parse(const cli_command *c, int argc, char **argv);
/* --help: "tubelet NAME: its one-line summary", the usage, about, the options, footer. */
void cli_print_help(const cli_command *c, FILE *f);
/* The commands and their one-line summaries, in the order `tubelet --help` lists them (ends
 * with {0}): the one place they are written, for that list and each command's --help. */
typedef struct {
    const char *name, *summary;
} cli_command_summary;
extern const cli_command_summary cli_commands[];
/* The summary of the command called name, or NULL. */
const char *cli_summary_of(const char *name);

/* progress.c */
/* Progress on stderr, the same rule for every command: a line redrawn in place when stderr is a
 * terminal, otherwise plain lines, one per tenth of the work and one at its end. */
typedef struct {
    int tty, drawn; /* drawn: a redrawn line is open (cli_progress_end ends it) */
} cli_bar;
void cli_progress_init(cli_bar *p);
/* One step: DONE of TOTAL (done >= total ends the line); the text from FMT, without "\r" or
 * "\n". */
void cli_progress(cli_bar *p, int done, int total, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Before another message: ends a line left open by an interrupted bar. */
void cli_progress_end(cli_bar *p);
/* Erases a line left open (a terminal), so that results print on a clean line. */
void cli_progress_clear(cli_bar *p);

/* video_list.c */
/* Each video of a list, for classify, features and timeline: under mpirun (dist not NULL) this
 * rank's contiguous share [first, first + count) of it (tubelet_dist_share), else all of it, in
 * order; each opened by ops->open on a second thread while ops->run works on the video before
 * it. open gets video i (l->videos[i]) and sets *item (0), or sets err (non-zero); it runs
 * beside run, so it reads user only. Before run, "[i/n] PATH" goes to stderr when the list holds
 * more than one video: a line left open on a terminal (erased after run), else a plain line. run
 * gets video i with its item, or item NULL and open's err; it calls cli_list_clear before it
 * prints anything, and returns 0, or non-zero for a failed video; stop_on_error ends the loop at
 * the first. close frees every item open set (NULL too). Returns the failures. */
typedef struct {
    const char *const *videos;
    int n_videos;
    const tubelet_preprocessor *pc;   /* cli_each_video: how it loads each video's views */
    const tubelet_views_params *opts;
    int model_frames;
    int stop_on_error;
    int first, count; /* set by cli_each_opened before the first open */
    cli_bar *bar;     /* cli_each_opened's "[i/n] PATH" line while it runs, else NULL */
} cli_video_list;
/* Erases l's "[i/n] PATH" line where a terminal holds it open: a run prints after it. */
void cli_list_clear(const cli_video_list *l);
typedef struct {
    int (*open)(void *user, const cli_video_list *l, int i, void **item, char *err, size_t errlen);
    int (*run)(void *user, const cli_video_list *l, int i, void *item, const char *err);
    void (*close)(void *item);
} cli_video_ops;
int cli_each_opened(cli_video_list *l, struct tubelet_dist *dist, const cli_video_ops *ops,
                    void *user);
/* The same with each video decoded and preprocessed to its views (tubelet_views_load with pc,
 * opts and model_frames) ahead: fn gets video i's views v, or v NULL and err. */
typedef int (*cli_video_fn)(void *user, const cli_video_list *l, int i, tubelet_views *v,
                            const char *err);
int cli_each_video(cli_video_list *l, struct tubelet_dist *dist, cli_video_fn fn, void *user);
/* 2 with a message when a video is stdin ("-") or a URL, which the file commands (classify,
 * features, timeline: cmd) do not read (watch does); else 0. */
int cli_refuse_streams(const char *cmd, const char *const *videos, int n);
/* A sharded run's output: each rank wrote its share to out, a memory stream (open_memstream(buf,
 * len)); rank 0 prints every rank's to stdout, in rank order, which is the list's order (each
 * share is contiguous), and *failed becomes the job's sum. Non-zero with err set. */
int cli_dist_collect(struct tubelet_dist *d, FILE *out, char **buf, size_t *len, int *failed,
                     char *err, size_t errlen);

/* clip_features.c: features --out-dir, one row per clip, one .npy per video
 * (docs/temporal-localisation.md) */
typedef struct {
    const char *name;   /* a preset's name, NULL: given by hand */
    int frames, stride, interval; /* clip frames, frames between clip starts, frames between a
                                     clip's frames */
    int stretch;        /* 1: stretch to the model's size (float bilinear, VideoMAE V2's way);
                           0: the model's own resize and crop */
    int normalize;      /* 1: the model's mean and std; 0: pixels in [0, 1] */
} cli_clip_protocol;
/* The preset called name into *p: 1, or 0 if there is none. */
int cli_clip_preset(const char *name, cli_clip_protocol *p);
const char *cli_clip_preset_names(void);
/* 1 after an error message when two videos would write the same <stem>.npy. */
int cli_clip_same_stems(const char *const *videos, int n);
typedef struct {
    cli_clip_protocol p;
    tubelet_model *m;
    tubelet_state *s;                 /* made at the first clip, remade for another size */
    const tubelet_preprocessor *pp;
    const char *out_dir, *feature, *precision;
    int64_t hidden;
    int height, width;
    int mean_hidden;                  /* 1: the mean of last_hidden_state, not the pooled output */
    int skipped, written, mixed_fps;  /* counted by cli_clip_features */
    double fps;                       /* the first written video's */
} cli_clip_run;
/* Every video of this rank's share (cli_each_opened): DIR/<stem>.npy written atomically (a
 * temporary file renamed), a video whose file exists skipped. Returns the failures. */
int cli_clip_features(cli_clip_run *r, const char *const *videos, int n_videos,
                      struct tubelet_dist *dist);
/* The JSON written beside the features (malloc'd), or NULL. */
char *cli_clip_json(const cli_clip_run *r, const char *model);

/* windows.c */
/* A note on stderr when --window (seconds, > 0) is more than 5 % off what the windows span: T
 * frames at a whole frame stride fstride at fps round it (a stride of at least 1). */
void cli_window_note(const char *src, double window, double fps, int T, int fstride);

/* text.c: the texts of a video-text model (X-CLIP; tubelet_text.h) */
/* --labels "a,b,c" (commas split, spaces around each trimmed) or --labels-file FILE (one per
 * line), each put into template's "{}" (NULL: the label itself): *labels and *texts, n of each
 * (free both with app_free_lines). 0, or the exit status after an error message. Its parts, which
 * print nothing, are the server's too: app_labels_split, app_labels_fill (src/app/labels.c). */
int cli_label_texts(const char *labels_arg, const char *labels_file, const char *tmpl,
                    char ***labels, char ***texts, int *n);
/* n texts tokenized with DIR's tokenizer (vocab.json, merges.txt) and encoded by m: *embeds
 * (n x *dim, malloc'd). 0, or 1 after an error message. */
int cli_encode_texts(tubelet_model *m, const char *dir, const char *const *texts, int n,
                     float **embeds, int *dim);
/* The label set of classify, timeline or watch (cmd): a video-text model needs --labels or
 * --labels-file (with an optional template), encoded once: *names and *text (n x embed_dim),
 * malloc'd (app_free_lines, free); a model with its own classifier takes none of them (*names,
 * *text NULL, *n 0). 0, or the exit status after an error message. */
int cli_zero_shot(tubelet_model *m, const char *dir, const char *cmd, const char *labels_arg,
                  const char *labels_file, const char *tmpl, char ***names, float **text,
                  int *n);

/* pretrain_io.c */
/* run/grad --mask: one VideoMAEForPreTraining batch; prints "loss X".
 * train_precision: TUBELET_PRECISION_FP32, or _BF16 for mixed-precision gradients. */
int cli_pretrain_batch(const char *dir, const char *input, const char *mask_path,
                       const char *logits_path, const char *grad_path, int threads,
                       int train_precision);
/* Every parameter's gradient in g, under the parameter's name, to OUT.safetensors.
 * 0, or 1 after an error message. */
int cli_write_grads(const char *out, const tubelet_grads *g);

#endif
