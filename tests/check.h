/* Minimal test harness: CHECK counts, prints failures, and check_done() returns the exit code,
 * so a test program exits non-zero on any mismatch. */
#ifndef TB_CHECK_H
#define TB_CHECK_H

#include <math.h>
#include <stdio.h>

static int check_passed, check_failed;

#define CHECK(cond, ...)                                                                         \
    do {                                                                                         \
        if (cond) {                                                                              \
            check_passed++;                                                                      \
        } else {                                                                                 \
            check_failed++;                                                                      \
            printf("FAIL %s:%d: ", __FILE__, __LINE__);                                          \
            printf(__VA_ARGS__);                                                                 \
            printf("\n");                                                                        \
            fflush(stdout);                                                                      \
        }                                                                                        \
    } while (0)

static inline int check_done(void) {
    printf("%d passed, %d failed\n", check_passed, check_failed);
    return check_failed ? 1 : 0;
}

/* max |a - b| over n floats (NaN anywhere counts as infinite error). */
static inline double check_max_abs_diff(const float *a, const float *b, long n) {
    double m = 0;
    for (long i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (d != d) return INFINITY;
        if (d > m) m = d;
    }
    return m;
}

static inline double check_max_abs(const float *a, long n) {
    double m = 0;
    for (long i = 0; i < n; i++)
        if (fabs(a[i]) > m) m = fabs(a[i]);
    return m;
}

/* A model directory for a test: mkdtemp(template) into dir (which holds the template), config.json
 * with the given text, and model.safetensors copied from weights_dir/model.safetensors unless
 * weights_dir is NULL. 0 on success. */
#include <stdlib.h>
#include <unistd.h>
/* The whole file, with a 0 byte after its n bytes (text can be read as a string); NULL if it
 * cannot be read. The caller frees it. */
static inline unsigned char *check_read_file(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    rewind(f);
    unsigned char *b = len >= 0 ? malloc((size_t)len + 1) : NULL;
    if (!b || fread(b, 1, (size_t)len, f) != (size_t)len) {
        free(b);
        fclose(f);
        return NULL;
    }
    fclose(f);
    b[len] = 0;
    *n = (size_t)len;
    return b;
}

static inline int check_model_dir(char *dir, const char *config, const char *weights_dir) {
    if (!mkdtemp(dir)) return -1;
    char path[1200];
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    fputs(config, f);
    if (fclose(f)) return -1;
    if (!weights_dir) return 0;
    char cmd[2600];
    snprintf(cmd, sizeof cmd, "cp %s/model.safetensors %s/", weights_dir, dir);
    return system(cmd) ? -1 : 0;
}

#endif
