/* What the CLI and the server share that is neither JSON nor a model (app.h): warnings on
 * stderr, freeing a list of strings, the clock. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "app.h"

void app_log(void *user, int level, const char *msg) {
    (void)user;
    fprintf(stderr, "%s: %s\n", level == 1 ? "warning" : "info", msg);
}

void app_free_lines(char **items, int n) {
    for (int i = 0; i < n; i++) free(items[i]);
    free(items);
}

double app_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}
