/* What the command-line tool (src/cli) and the HTTP server (src/serve) share, by the file that
 * defines it: warnings and the clock (common.c), results as JSON (json.c), label sets and scores
 * of a video-text model (labels.c), loading a model and its defaults (model.c). Both call these;
 * these call neither (make check-cli-structure), and see the public headers only. Part of the
 * binary, not of the library: messages go to stderr. */
#ifndef TB_APP_H
#define TB_APP_H

#include <stdint.h>
#include <stdio.h>

#include "tubelet.h"

/* common.c */
/* Log callback that prints warnings to stderr. */
void app_log(void *user, int level, const char *msg);
/* Frees n malloc'd strings and their array (NULL entries too). */
void app_free_lines(char **items, int n);
/* Monotonic seconds. */
double app_now(void);

/* json.c: what classify, timeline, watch and serve write */
/* Writes s as a JSON string literal (quoted, escaped; a byte outside valid UTF-8 as U+FFFD). */
void app_json_string(FILE *f, const char *s);
/* The indices of the k largest of n probabilities, best first (ties: the lower index), into
 * order; returns how many (min(k, n)). */
int app_top_order(const double *prob, int64_t n, int k, int *order);
/* Those as JSON: [{"label": ..., "score": ...}, ...], the labels names[i] (NULL: the model's). */
void app_json_top(FILE *f, const tubelet_model *m, const char *const *names, const double *prob,
                  const int *order, int k);
/* One window of `timeline --json`: {"start", "end", "top": [...]}, named as app_json_top. */
void app_json_window(FILE *f, const tubelet_model *m, const char *const *names, double t0,
                     double t1, const double *prob, const int *order, int k);
/* One video of `classify --json`: {"video", "top": [...]} of the top labels of prob (order:
 * top ints of scratch), named names[i] (NULL: the model's). */
void app_json_classified(FILE *f, const tubelet_model *m, const char *const *names,
                         const char *video, const double *prob, int n_labels, int top,
                         int *order);
/* A video that failed, in the list of `classify --json` and `timeline --json`: {"video",
 * "error"}. */
void app_json_failed(FILE *f, const char *video, const char *msg);

/* labels.c: the labels of a video-text model (X-CLIP; tubelet_text.h), which print nothing */
/* arg split at commas, each trimmed, into *labels (n, malloc'd; 0, or 1 out of memory, *labels
 * then freed by the caller). */
int app_labels_split(const char *arg, char ***labels, int *n);
/* The n labels' texts through tmpl (NULL: the labels themselves) into *texts: 0, or 2 (an empty
 * label, a template without {}, none; what names the labels in err) or 1 (out of memory). */
int app_labels_fill(char *const *labels, int n, const char *what, const char *tmpl,
                    char ***texts, char *err, size_t errlen);
struct tubelet_tokenizer;
/* n texts tokenized by tok at context ctx and encoded by m into embeds (n x embed_dim): 0; 2 for
 * a text the tokenizer refuses or, strict, one longer than ctx (truncated otherwise); 1 for the
 * model's error; err says which. */
int app_texts_embed(tubelet_model *m, struct tubelet_tokenizer *tok, int ctx,
                    const char *const *texts, int n, int strict, float *embeds, char *err,
                    size_t errlen);
/* The shape of app_scores' logits: the state's, or (batch, n_text) against texts (batch: the
 * state's clips; an X-CLIP state's own logits shape has a row per frame). */
void app_scores_shape(const tubelet_state *s, int batch, int n_text, tubelet_shape *ls);
/* One forward pass of s over pix: the logits of the model's labels (text NULL), or those against
 * n_text text embeddings (tubelet_forward_text). 0, or non-zero with err set. */
int app_scores(tubelet_state *s, const float *pix, const float *text, int n_text, float *logits,
               char *err, size_t errlen);

/* model.c */
/* The model in dir, or random weights at arch's shapes (dir NULL), loaded with lp (its log set
 * to app_log); prints the error and returns NULL. */
tubelet_model *app_load(const char *dir, const char *arch, tubelet_load_params *lp);
/* The default thread count of the video commands (classify, features, timeline, watch) and
 * serve, threads 0: every core for the model, except for a model whose forward costs less than
 * decoding its clip (under APP_SMALL_MODEL_FLOP; the shipped one: 0.08 GFLOP, ViT-B 180-360):
 * one thread, the other cores left to the decoders (bench/serve_bench.py, docs/serve.md: the
 * shipped model at concurrency 16 serves 13-21 % more clips/s with --threads 1). One rule for
 * all, because oneDNN's sgemm sums in another order on another thread count: serve's answers
 * are the CLI's bytes only at the same count. */
#define APP_SMALL_MODEL_FLOP 2e9
void app_default_threads(tubelet_model *m, int threads);
/* The frame stride an official checkpoint file's own training config gives (pySlowFast's
 * DATA.SAMPLING_RATE, VideoMAE's --sampling_rate; a note says so), 0 if none or not a file. */
int app_ckpt_stride(const char *model);

#endif
