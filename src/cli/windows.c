/* Windows over a video, shared by timeline, watch and serve: the top-k and the JSON of a window
 * (the frame plan and the spans are the library's: tubelet_window_plan, tubelet_window_span). */

#include <math.h>

#include "cli.h"

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

void cli_json_window(FILE *f, const tubelet_model *m, const char *const *names, double t0,
                     double t1, const double *prob, const int *order, int k) {
    fprintf(f, "{\"start\": %.3f, \"end\": %.3f, \"top\": ", t0, t1);
    cli_json_top(f, m, names, prob, order, k);
    fputc('}', f);
}

void cli_window_note(const char *src, double window, double fps, int T, int fstride) {
    const double got = T * fstride / fps;
    if (window > 0 && fabs(got - window) > 0.05 * window) /* more than rounding noise */
        fprintf(stderr, "note: %s: --window %g s spans %.2f s: the model's %d frames at a whole "
                "stride of %d frame%s at %.2f fps\n", src, window, got, T, fstride,
                fstride == 1 ? "" : "s", fps);
}
