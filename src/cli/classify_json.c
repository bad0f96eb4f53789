/* What `classify --json` writes for one video, shared by classify and serve. */
#include <stdio.h>

#include "cli.h"

void cli_json_classified(FILE *f, const tubelet_model *m, const char *const *names,
                         const char *video, const double *prob, int n_labels, int top,
                         int *order) {
    const int k = cli_top_order(prob, n_labels, top, order);
    fprintf(f, "{\"video\": ");
    cli_json_string(f, video);
    fprintf(f, ", \"top\": ");
    cli_json_top(f, m, names, prob, order, k);
    fprintf(f, "}");
}
