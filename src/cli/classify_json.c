/* What `classify --json` writes for one video and `timeline --json` for one window, shared by
 * those commands and serve. */
#include <math.h>
#include <stdio.h>

#include "cli.h"

void cli_top_order(const double *prob, int n, int k, int *order) {
    for (int i = 0; i < n; i++) order[i] = i;
    for (int a = 0; a < n && a < k; a++) /* partial selection sort */
        for (int b = a + 1; b < n; b++)
            if (prob[order[b]] > prob[order[a]]) {
                int t = order[a];
                order[a] = order[b], order[b] = t;
            }
}

void cli_json_top(FILE *f, const tubelet_model *m, const double *prob, const int *order, int k) {
    fprintf(f, "[");
    for (int i = 0; i < k; i++) {
        const char *lab = tubelet_model_label(m, order[i]);
        fprintf(f, "%s{\"label\": ", i ? ", " : "");
        cli_json_string(f, lab ? lab : "");
        fprintf(f, ", \"score\": %.6f}", prob[order[i]]);
    }
    fprintf(f, "]");
}

void cli_json_classified(FILE *f, const tubelet_model *m, const char *video, const double *prob,
                         int n_labels, int top, int *order) {
    cli_top_order(prob, n_labels, top, order);
    fprintf(f, "{\"video\": ");
    cli_json_string(f, video);
    fprintf(f, ", \"top\": ");
    cli_json_top(f, m, prob, order, top < n_labels ? top : n_labels);
    fprintf(f, "}");
}

void cli_top_first(const double *prob, int n, int k, int *best) {
    for (int a = 0; a < k; a++) {
        best[a] = -1;
        for (int i = 0; i < n; i++) {
            int used = 0;
            for (int b = 0; b < a; b++) used |= best[b] == i;
            if (!used && (best[a] < 0 || prob[i] > prob[best[a]])) best[a] = i;
        }
    }
}

void cli_json_window(FILE *f, const tubelet_model *m, double t0, double t1, const double *prob,
                     const int *best, int k) {
    fprintf(f, "{\"start\": %.3f, \"end\": %.3f, \"top\": ", t0, t1);
    cli_json_top(f, m, prob, best, k);
    fprintf(f, "}");
}

int64_t cli_timeline_plan(double fps, int T, double window, double stride, int64_t n_frames,
                          int *fstride, int *hop) {
    *fstride = window > 0 ? (int)lround(window * fps / T) : 4;
    if (*fstride < 1) *fstride = 1;
    /* a window longer than the video: one window over the whole video, at the largest frame
     * stride that fits (the caller says so) */
    const int64_t whole = n_frames > 0 && (int64_t)(T - 1) * *fstride + 1 > n_frames ? n_frames : 0;
    if (whole) {
        *fstride = n_frames >= T ? (int)((n_frames - 1) / (T > 1 ? T - 1 : 1)) : 1;
        if (*fstride < 1) *fstride = 1;
    }
    *hop = stride > 0 ? (int)lround(stride * fps) : *fstride * T;
    if (*hop < *fstride * T) { /* the stream wants a multiple of the frame stride: the nearest */
        *hop = (int)lround((double)*hop / *fstride) * *fstride;
        if (*hop < *fstride) *hop = *fstride;
    }
    if (whole) { /* one window: the next would start past the end (a multiple of the stride) */
        *hop = *fstride * T;
        if (*hop < whole) *hop = (int)((whole + *fstride - 1) / *fstride) * *fstride;
    }
    return whole;
}
