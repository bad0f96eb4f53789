/* Shared pieces of the command-line tool. Results go to stdout, messages to stderr. */
#ifndef TB_CLI_H
#define TB_CLI_H

#include <stdint.h>
#include <stdio.h>

#include "tubelet.h"

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

/* Writes s as a JSON string literal (quoted, escaped). */
void cli_json_string(FILE *f, const char *s);
/* Writes s as a CSV field (quoted and with doubled quotes when it needs to be). */
void cli_csv_string(FILE *f, const char *s);

/* Log callback that prints warnings to stderr. */
void cli_log(void *user, int level, const char *msg);

/* Tiny option parser: returns 1 and sets *val when argv[*i] is `name` (with a value following,
 * which it consumes) or `name=value`. Prints an error and sets *bad when the value is missing. */
int cli_opt(int argc, char **argv, int *i, const char *name, const char **val, int *bad);
int cli_flag(char **argv, int i, const char *name);
int cli_int(const char *s, const char *name, int lo, int hi, int *out);
int cli_double(const char *s, const char *name, double lo, double hi, double *out);
int cli_is_help(const char *s);

/* Loads a model from --model DIR or builds --arch NAME; prints the error and returns NULL. */
tubelet_model *cli_load(const char *dir, const char *arch, int threads);
/* The same in a precision parsed by cli_precision (reference: the portable path); inference: the
 * weights packed for forward passes only (tubelet_load_params.inference): about 180 ms more at
 * load for ViT-B against 1-4 % less per forward, so `bench` and `timeline` (many forwards) pack,
 * `classify`, `features` and `run` keep the memory-mapped load (26-40 ms) in fp32. */
tubelet_model *cli_load_precision(const char *dir, const char *arch, int threads, int precision,
                                  int reference, int inference);
/* --precision fp32|bf16|int8, or bf16-ref / int8-ref for the portable path; prints the error.
 * s NULL: fp32. */
int cli_precision(const char *s, int *precision, int *reference);
/* train, grad: --precision other than fp32 is an error (training needs the f32 weights). */
int cli_fp32_only(const char *cmd, const char *s);
#define CLI_PRECISION_HELP                                                                     \
    "  --precision P    fp32 (default), bf16 or int8 linear layers (docs/precision.md);\n"     \
    "                   bf16-ref / int8-ref: the portable path without AVX512-BF16 / VNNI\n"
double cli_now(void);
double cli_peak_rss_mb(void);

#endif
