/* The texts of a video-text model (X-CLIP) from the command line: label sets (--labels,
 * --labels-file) and their embeddings, computed once per label set (run --text; classify,
 * timeline and watch --labels), with error messages; the parts the server shares are in
 * src/app/labels.c. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app.h"
#include "cli.h"
#include "tubelet_text.h"

int cli_label_texts(const char *labels_arg, const char *labels_file, const char *tmpl,
                    char ***labels, char ***texts, int *n) {
    char err[512];
    *labels = *texts = NULL, *n = 0;
    if (!labels_arg == !labels_file) {
        fprintf(stderr, "error: give the labels with --labels \"a,b,c\" or --labels-file FILE "
                "(one of them)\n");
        return 2;
    }
    if (tmpl && !strstr(tmpl, "{}")) {
        fprintf(stderr, "error: --template \"%s\" has no {} for the label\n", tmpl);
        return 2;
    }
    int rc = 0;
    if (labels_file) {
        if (!(*labels = cli_read_lines(labels_file, n))) return 2;
    } else if (app_labels_split(labels_arg, labels, n)) {
        snprintf(err, sizeof err, "out of memory"), rc = 1;
    }
    if (!rc) rc = app_labels_fill(*labels, *n, labels_file ? labels_file : "--labels", tmpl,
                                  texts, err, sizeof err);
    if (!rc) return 0;
    fprintf(stderr, "error: %s\n", err);
    app_free_lines(*labels, *n);
    *labels = NULL, *n = 0;
    return rc;
}

int cli_encode_texts(tubelet_model *m, const char *dir, const char *const *texts, int n,
                     float **embeds, int *dim) {
    char err[1024];
    int P = 0, ctx = 0;
    *embeds = NULL;
    if (tubelet_text_dims(m, &P, &ctx)) {
        fprintf(stderr, "error: %s: this model has no text tower: texts and labels need a "
                "video-text model (X-CLIP)\n", dir);
        return 1;
    }
    tubelet_tokenizer *tok = NULL;
    if (tubelet_tokenizer_load(&tok, dir, err, sizeof err) ||
        tubelet_tokenizer_check(tok, m, err, sizeof err)) {
        fprintf(stderr, "error: %s\n", err);
        tubelet_tokenizer_free(tok);
        return 1;
    }
    const int tc = tubelet_tokenizer_context(tok);
    if (tc < ctx) ctx = tc; /* the tokenizer's context, at most the model's positions */
    float *e = malloc(sizeof(float) * (size_t)n * (size_t)P);
    int rc = !e ? (snprintf(err, sizeof err, "out of memory"), 1)
                : app_texts_embed(m, tok, ctx, texts, n, 0, e, err, sizeof err);
    tubelet_tokenizer_free(tok);
    if (rc) {
        fprintf(stderr, "error: %s\n", err);
        free(e);
        return 1;
    }
    *embeds = e, *dim = P;
    return 0;
}

int cli_zero_shot(tubelet_model *m, const char *dir, const char *cmd, const char *labels_arg,
                  const char *labels_file, const char *tmpl, char ***names, float **text,
                  int *n) {
    char **texts = NULL;
    int P = 0;
    *names = NULL, *text = NULL, *n = 0;
    if (tubelet_text_dims(m, NULL, NULL)) {
        if (!labels_arg && !labels_file && !tmpl) return 0;
        fprintf(stderr, "error: %s classifies among its own labels (config.json id2label); "
                "--labels, --labels-file and --template need a video-text model (X-CLIP)\n",
                dir);
        return 2;
    }
    if (!labels_arg && !labels_file) {
        fprintf(stderr, "error: %s is a video-text model (X-CLIP): give the labels to `tubelet %s` "
                "with --labels \"a,b,c\" or --labels-file FILE (docs/zero-shot.md)\n", dir, cmd);
        return 2;
    }
    int rc = cli_label_texts(labels_arg, labels_file, tmpl, names, &texts, n);
    if (!rc && (rc = cli_encode_texts(m, dir, (const char *const *)texts, *n, text, &P))) {
        app_free_lines(*names, *n);
        *names = NULL;
    }
    if (texts) app_free_lines(texts, *n);
    if (rc) *n = 0;
    return rc;
}
