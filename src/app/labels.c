/* The labels of a video-text model (X-CLIP) as the CLI and the server take them (app.h): a
 * label set split and put into its template, their texts encoded, and a window's scores against
 * them. Nothing here prints: each caller words its own errors (a message, an HTTP status). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app.h"
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

int app_labels_split(const char *arg, char ***labels, int *n) {
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

int app_labels_fill(char *const *labels, int n, const char *what, const char *tmpl,
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
    if (*texts) app_free_lines(*texts, n); /* calloc'd: the entries not filled are NULL */
    *texts = NULL;
    return snprintf(err, errlen, "out of memory"), 1;
}

int app_texts_embed(tubelet_model *m, tubelet_tokenizer *tok, int ctx, const char *const *texts,
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

void app_scores_shape(const tubelet_state *s, int batch, int n_text, tubelet_shape *ls) {
    if (n_text) *ls = (tubelet_shape){2, {batch, n_text}};
    else tubelet_state_logits_shape(s, ls);
}

int app_scores(tubelet_state *s, const float *pix, const float *text, int n_text, float *logits,
               char *err, size_t errlen) {
    if (text) return tubelet_forward_text(s, pix, text, n_text, logits, NULL, NULL, err, errlen);
    return tubelet_forward(s, pix, logits, NULL, err, errlen);
}
