/* The texts of a video-text model (X-CLIP): label sets from the command line, and their
 * embeddings, computed once per label set (run --text; classify, timeline and watch --labels),
 * and a window's scores against them. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "tubelet_text.h"

/* s without the spaces around it, malloc'd */
static char *trimmed(const char *s, size_t n) {
    while (n && (*s == ' ' || *s == '\t')) s++, n--;
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\t')) n--;
    char *t = malloc(n + 1);
    if (t) memcpy(t, s, n), t[n] = 0;
    return t;
}

/* tmpl with its "{}" replaced by label, malloc'd */
static char *fill(const char *tmpl, const char *label) {
    const char *at = tmpl ? strstr(tmpl, "{}") : NULL;
    if (!at) return strdup(label);
    const size_t n = strlen(tmpl) + strlen(label);
    char *t = malloc(n);
    if (t) snprintf(t, n, "%.*s%s%s", (int)(at - tmpl), tmpl, label, at + 2);
    return t;
}

int cli_labels_split(const char *arg, char ***labels, int *n) {
    int cap = 1;
    *n = 0;
    for (const char *p = arg; *p; p++) cap += *p == ',';
    if (!(*labels = calloc((size_t)cap, sizeof(char *)))) return 1;
    for (const char *p = arg;; p++) {
        const char *end = strchr(p, ',');
        const size_t len = end ? (size_t)(end - p) : strlen(p);
        if (!((*labels)[*n] = trimmed(p, len))) return 1;
        (*n)++;
        if (!end) break;
        p = end;
    }
    return 0;
}

int cli_labels_fill(char *const *labels, int n, const char *what, const char *tmpl,
                    char ***texts, char *err, size_t errlen) {
    *texts = NULL;
    if (tmpl && !strstr(tmpl, "{}"))
        return snprintf(err, errlen, "template \"%.200s\" has no {} for the label", tmpl), 2;
    if (n < 1) return snprintf(err, errlen, "%s holds no labels", what), 2;
    for (int i = 0; i < n; i++)
        if (strspn(labels[i], " \t") == strlen(labels[i]))
            return snprintf(err, errlen, "%s: label %d is empty", what, i + 1), 2;
    if (!(*texts = calloc((size_t)n, sizeof(char *)))) goto oom;
    for (int i = 0; i < n; i++)
        if (!((*texts)[i] = fill(tmpl, labels[i]))) goto oom;
    return 0;
oom:
    if (*texts) cli_free_lines(*texts, n); /* calloc'd: the entries not filled are NULL */
    *texts = NULL;
    return snprintf(err, errlen, "out of memory"), 1;
}

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
    } else if (cli_labels_split(labels_arg, labels, n)) {
        snprintf(err, sizeof err, "out of memory"), rc = 1;
    }
    if (!rc) rc = cli_labels_fill(*labels, *n, labels_file ? labels_file : "--labels", tmpl,
                                  texts, err, sizeof err);
    if (!rc) return 0;
    fprintf(stderr, "error: %s\n", err);
    cli_free_lines(*labels, *n);
    *labels = NULL, *n = 0;
    return rc;
}

int cli_texts_embed(tubelet_model *m, tubelet_tokenizer *tok, int ctx, const char *const *texts,
                    int n, int strict, float *embeds, char *err, size_t errlen) {
    int32_t *ids = malloc(sizeof(int32_t) * ((size_t)n * (size_t)ctx + 1));
    int rc = 1, len = 0;
    if (!ids) return snprintf(err, errlen, "out of memory"), 1;
    for (int i = 0; i < n; i++) {
        char e[512];
        /* strict: encoded one id longer first, to see whether the context cuts the text */
        if (strict && (tubelet_tokenizer_encode(tok, texts[i], strlen(texts[i]), ctx + 1,
                                                ids + (size_t)i * ctx, &len, e, sizeof e) ||
                       len > ctx)) {
            if (len > ctx)
                snprintf(err, errlen, "text %d (\"%.100s\") is longer than the model's context "
                         "of %d tokens", i + 1, texts[i], ctx);
            else
                snprintf(err, errlen, "text %d: %s", i + 1, e);
            rc = 2;
            goto done;
        }
        if (tubelet_tokenizer_encode(tok, texts[i], strlen(texts[i]), ctx, ids + (size_t)i * ctx,
                                     NULL, e, sizeof e)) {
            snprintf(err, errlen, "text %d: %s", i + 1, e), rc = 2;
            goto done;
        }
    }
    rc = tubelet_encode_text(m, ids, n, ctx, embeds, err, errlen) ? 1 : 0;
done:
    free(ids);
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
                : cli_texts_embed(m, tok, ctx, texts, n, 0, e, err, sizeof err);
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
        cli_free_lines(*names, *n);
        *names = NULL;
    }
    if (texts) cli_free_lines(texts, *n);
    if (rc) *n = 0;
    return rc;
}

void cli_scores_shape(const tubelet_state *s, int batch, int n_text, tubelet_shape *ls) {
    if (n_text) *ls = (tubelet_shape){2, {batch, n_text}};
    else tubelet_state_logits_shape(s, ls);
}

int cli_scores(tubelet_state *s, const float *pix, const float *text, int n_text, float *logits,
               char *err, size_t errlen) {
    if (text) return tubelet_forward_text(s, pix, text, n_text, logits, NULL, NULL, err, errlen);
    return tubelet_forward(s, pix, logits, NULL, err, errlen);
}
