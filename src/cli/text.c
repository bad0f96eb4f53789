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

int cli_label_texts(const char *labels_arg, const char *labels_file, const char *tmpl,
                    char ***labels, char ***texts, int *n) {
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
    if (labels_file) {
        if (!(*labels = cli_read_lines(labels_file, n))) return 2;
    } else {
        int cap = 1;
        for (const char *p = labels_arg; *p; p++) cap += *p == ',';
        if (!(*labels = calloc((size_t)cap, sizeof(char *)))) goto oom;
        for (const char *p = labels_arg;; p++) {
            const char *end = strchr(p, ',');
            const size_t len = end ? (size_t)(end - p) : strlen(p);
            if (!((*labels)[*n] = trimmed(p, len))) goto oom;
            (*n)++;
            if (!end) break;
            p = end;
        }
    }
    for (int i = 0; i < *n; i++)
        if (!(*labels)[i][0] || strspn((*labels)[i], " \t") == strlen((*labels)[i])) {
            fprintf(stderr, "error: %s: label %d is empty\n",
                    labels_file ? labels_file : "--labels", i + 1);
            cli_free_lines(*labels, *n);
            *labels = NULL, *n = 0;
            return 2;
        }
    if (*n < 1) {
        fprintf(stderr, "error: %s holds no labels\n", labels_file);
        return 2;
    }
    if (!(*texts = calloc((size_t)*n, sizeof(char *)))) goto oom;
    for (int i = 0; i < *n; i++)
        if (!((*texts)[i] = fill(tmpl, (*labels)[i]))) goto oom;
    return 0;
oom:
    fprintf(stderr, "error: out of memory\n");
    cli_free_lines(*labels, *n);
    if (*texts) cli_free_lines(*texts, *n); /* calloc'd: the entries not filled are NULL */
    *labels = *texts = NULL, *n = 0;
    return 1;
}

int cli_encode_texts(tubelet_model *m, const char *dir, const char *const *texts, int n,
                     float **embeds, int *dim) {
    char err[1024];
    int P = 0, ctx = 0, rc = 1;
    *embeds = NULL;
    if (tubelet_text_dims(m, &P, &ctx)) {
        fprintf(stderr, "error: %s: this model has no text tower: texts and labels need a "
                "video-text model (X-CLIP)\n", dir);
        return 1;
    }
    tubelet_tokenizer *tok = NULL;
    if (tubelet_tokenizer_load(&tok, dir, err, sizeof err)) {
        fprintf(stderr, "error: %s\n", err);
        return 1;
    }
    const int tc = tubelet_tokenizer_context(tok);
    if (tc < ctx) ctx = tc; /* the tokenizer's context, at most the model's positions */
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)n * (size_t)ctx);
    float *e = malloc(sizeof(float) * (size_t)n * (size_t)P);
    if (!ids || !e) {
        fprintf(stderr, "error: out of memory\n");
        goto done;
    }
    for (int i = 0; i < n; i++)
        if (tubelet_tokenizer_encode(tok, texts[i], strlen(texts[i]), ctx, ids + (size_t)i * ctx,
                                     NULL, err, sizeof err)) {
            fprintf(stderr, "error: text %d: %s\n", i + 1, err);
            goto done;
        }
    if (tubelet_encode_text(m, ids, n, ctx, e, err, sizeof err)) {
        fprintf(stderr, "error: %s\n", err);
        goto done;
    }
    *embeds = e, *dim = P, e = NULL, rc = 0;
done:
    tubelet_tokenizer_free(tok);
    free(ids);
    free(e);
    return rc;
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

void cli_scores_shape(const tubelet_state *s, int n_text, tubelet_shape *ls) {
    tubelet_state_logits_shape(s, ls);
    if (n_text) *ls = (tubelet_shape){2, {ls->dim[0], n_text}};
}

int cli_scores(tubelet_state *s, const float *pix, const float *text, int n_text, float *logits,
               char *err, size_t errlen) {
    if (text) return tubelet_forward_text(s, pix, text, n_text, logits, NULL, NULL, err, errlen);
    return tubelet_forward(s, pix, logits, NULL, err, errlen);
}
