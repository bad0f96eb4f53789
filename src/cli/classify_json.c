/* What `classify --json` writes for one video, shared by classify and serve. */
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
