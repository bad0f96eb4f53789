/* Windows over a video, shared by timeline, watch and serve: the frame plan of --window and
 * --stride, each window's span, the top-k and the JSON of a window. */
#include <math.h>

#include "cli.h"

int64_t cli_window_plan(double window, double stride, double fps, int T, int64_t n_frames,
                        int *fstride, int *hop) {
    int fs = window > 0 ? (int)lround(window * fps / T) : 4;
    if (fs < 1) fs = 1;
    /* a window longer than the video: one window over the whole video, at the largest frame
     * stride that fits (the caller says so) */
    const int64_t whole = n_frames > 0 && (int64_t)(T - 1) * fs + 1 > n_frames ? n_frames : 0;
    if (whole) {
        fs = n_frames >= T ? (int)((n_frames - 1) / (T > 1 ? T - 1 : 1)) : 1;
        if (fs < 1) fs = 1;
    }
    int h = stride > 0 ? (int)lround(stride * fps) : fs * T;
    if (h < fs * T) { /* the stream wants a multiple of the frame stride: the nearest */
        h = (int)lround((double)h / fs) * fs;
        if (h < fs) h = fs;
    }
    if (whole) { /* one window: the next would start past the end (a multiple of the stride) */
        h = fs * T;
        if (h < whole) h = (int)((whole + fs - 1) / fs) * fs;
    }
    *fstride = fs, *hop = h;
    return whole;
}

void cli_window_span(int64_t first, int n_real, int fstride, double fps, double *t0, double *t1) {
    *t0 = first / fps;
    *t1 = (first + (int64_t)(n_real - 1) * fstride + 1) / fps;
}

int cli_top_order(const double *prob, int64_t n, int k, int *order) {
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

void cli_json_top(FILE *f, const tubelet_model *m, const char *const *names, const double *prob,
                  const int *order, int k) {
    fputc('[', f);
    for (int a = 0; a < k; a++) {
        const char *la = names ? names[order[a]] : tubelet_model_label(m, order[a]);
        fprintf(f, "%s{\"label\": ", a ? ", " : "");
        cli_json_string(f, la ? la : "");
        fprintf(f, ", \"score\": %.6f}", prob[order[a]]);
    }
    fputc(']', f);
}

void cli_json_window(FILE *f, const tubelet_model *m, double t0, double t1, const double *prob,
                     const int *order, int k) {
    fprintf(f, "{\"start\": %.3f, \"end\": %.3f, \"top\": ", t0, t1);
    cli_json_top(f, m, NULL, prob, order, k);
    fputc('}', f);
}
