/* The CLI's shared helpers (cli.h): CSV strings, lists of paths, joining an mpirun job, peak
 * memory. Every command calls these; none of them calls a command. (What the server shares with
 * the commands, JSON strings, warnings and the clock, is in src/app/.) */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include "app.h"
#include "cli.h"
#include "tubelet_train.h"

void cli_csv_string(FILE *f, const char *s) {
    if (!strpbrk(s, ",\"\n\r")) {
        fputs(s, f);
        return;
    }
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"') fputc('"', f); /* RFC 4180: quotes are doubled */
        fputc(*s, f);
    }
    fputc('"', f);
}

int cli_is_help(const char *s) { return !strcmp(s, "--help") || !strcmp(s, "-h"); }

int cli_append_list(const char ***videos, int *n_videos, const char *path, char ***items, int *n) {
    if (!(*items = cli_read_lines(path, n))) return 2;
    const char **all = realloc(*videos, sizeof(char *) * (size_t)(*n_videos + *n + 1));
    if (!all) {
        fprintf(stderr, "error: out of memory\n");
        return 1;
    }
    *videos = all;
    for (int i = 0; i < *n; i++) all[(*n_videos)++] = (*items)[i];
    return 0;
}

char **cli_read_lines(const char *path, int *n) {
    struct stat st;
    *n = 0;
    if (stat(path, &st) != 0 || !S_ISREG(st.st_mode)) {
        fprintf(stderr, "error: %s: %s\n", path, errno && stat(path, &st) != 0 ? strerror(errno)
                                                 : "not a regular file; give a file");
        return NULL;
    }
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "error: %s: cannot open: %s\n", path, strerror(errno));
        return NULL;
    }
    char **items = NULL, *line = NULL;
    size_t cap = 0;
    int n_cap = 0, lines = 0;
    for (ssize_t len; (len = getline(&line, &cap, f)) >= 0; lines++) {
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = 0;
        if (!len) continue;
        if (strlen(line) != (size_t)len) { /* a NUL would cut the line short silently */
            fprintf(stderr, "error: %s: line %d holds a NUL byte\n", path, lines + 1);
            app_free_lines(items, *n);
            free(line);
            fclose(f);
            *n = 0;
            return NULL;
        }
        if (*n == n_cap) {
            char **grown = realloc(items, sizeof(char *) * (size_t)(n_cap = n_cap ? 2 * n_cap : 64));
            if (!grown) break;
            items = grown;
        }
        if (!(items[*n] = strdup(line))) break;
        (*n)++;
    }
    free(line);
    fclose(f);
    if (!items) fprintf(stderr, "error: %s: nothing in it (no line that is not empty)\n", path);
    return items;
}

int cli_dist_join(struct tubelet_dist **dist) {
    const char *world = getenv("OMPI_COMM_WORLD_SIZE");
    char err[1024];
    *dist = NULL;
    if (!world || atoi(world) <= 1) return 0;
    if (!tubelet_dist_available()) {
        fprintf(stderr, "error: started by mpirun with %s ranks, but this tubelet was built "
                "without MPI; build it with `make MPI=1`\n", world);
        return 1;
    }
    if (tubelet_dist_init(dist, NULL, NULL, err, sizeof err)) {
        fprintf(stderr, "error: %s\n", err);
        return 1;
    }
    return 0;
}

double cli_peak_rss_mb(void) {
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return u.ru_maxrss / 1024.0; /* Linux reports kilobytes */
}
