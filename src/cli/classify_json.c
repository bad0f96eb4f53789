/* What `classify --json` writes for one video, shared by classify and serve; a failed video's
 * entry, shared by classify and timeline. */
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

void cli_json_failed(FILE *f, const char *video, const char *msg) {
    fprintf(f, "{\"video\": ");
    cli_json_string(f, video);
    fprintf(f, ", \"error\": ");
    cli_json_string(f, msg);
    fputc('}', f);
}
