/* The JSON results shared by classify, timeline, watch and serve (app.h): strings, the top
 * labels of a video or a window (the frame plan and the spans are the library's:
 * tubelet_window_plan, tubelet_window_span), a failed video's entry. */
#include <stdio.h>

#include "app.h"

/* The length of the valid UTF-8 sequence at p (RFC 3629: no overlong form, no surrogate, nothing
 * above U+10FFFF), or 0. */
static int utf8_length(const unsigned char *p) {
    int n = p[0] >= 0xc2 && p[0] <= 0xdf ? 2 : p[0] >= 0xe0 && p[0] <= 0xef ? 3
          : p[0] >= 0xf0 && p[0] <= 0xf4 ? 4 : 0;
    if (!n) return 0;
    const unsigned char lo = p[0] == 0xe0 ? 0xa0 : p[0] == 0xf0 ? 0x90 : 0x80;
    const unsigned char hi = p[0] == 0xed ? 0x9f : p[0] == 0xf4 ? 0x8f : 0xbf;
    if (p[1] < lo || p[1] > hi) return 0;
    for (int i = 2; i < n; i++)
        if (p[i] < 0x80 || p[i] > 0xbf) return 0; /* a 0 byte ends the string here too */
    return n;
}

void app_json_string(FILE *f, const char *s) {
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\') fprintf(f, "\\%c", *p);
        else if (*p == '\n') fputs("\\n", f);
        else if (*p < 0x20) fprintf(f, "\\u%04x", *p);
        else if (*p < 0x80) fputc(*p, f);
        else { /* JSON is UTF-8: a byte outside a valid sequence (a name's raw bytes, a text cut
                * inside a character) becomes U+FFFD */
            const int n = utf8_length(p);
            if (n) fwrite(p, 1, (size_t)n, f), p += n - 1;
            else fputs("\\ufffd", f);
        }
    }
    fputc('"', f);
}

int app_top_order(const double *prob, int64_t n, int k, int *order) {
    int kk = k < n ? k : (int)n;
    for (int a = 0; a < kk; a++) { /* partial selection: the best not taken yet, lowest index first */
        order[a] = -1;
        for (int i = 0; i < n; i++) {
            int used = 0;
            for (int b = 0; b < a; b++) used |= order[b] == i;
            if (!used && (order[a] < 0 || prob[i] > prob[order[a]])) order[a] = i;
        }
    }
    return kk;
}

void app_json_top(FILE *f, const tubelet_model *m, const char *const *names, const double *prob,
                  const int *order, int k) {
    fputc('[', f);
    for (int a = 0; a < k; a++) {
        const char *la = names ? names[order[a]] : tubelet_model_label(m, order[a]);
        fprintf(f, "%s{\"label\": ", a ? ", " : "");
        app_json_string(f, la ? la : "");
        fprintf(f, ", \"score\": %.6f}", prob[order[a]]);
    }
    fputc(']', f);
}

void app_json_window(FILE *f, const tubelet_model *m, const char *const *names, double t0,
                     double t1, const double *prob, const int *order, int k) {
    fprintf(f, "{\"start\": %.3f, \"end\": %.3f, \"top\": ", t0, t1);
    app_json_top(f, m, names, prob, order, k);
    fputc('}', f);
}

void app_json_classified(FILE *f, const tubelet_model *m, const char *const *names,
                         const char *video, const double *prob, int n_labels, int top,
                         int *order) {
    const int k = app_top_order(prob, n_labels, top, order);
    fprintf(f, "{\"video\": ");
    app_json_string(f, video);
    fprintf(f, ", \"top\": ");
    app_json_top(f, m, names, prob, order, k);
    fprintf(f, "}");
}

void app_json_failed(FILE *f, const char *video, const char *msg) {
    fprintf(f, "{\"video\": ");
    app_json_string(f, video);
    fprintf(f, ", \"error\": ");
    app_json_string(f, msg);
    fputc('}', f);
}
