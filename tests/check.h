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

/* Cases: main names its cases, and the command line picks some of them.
 *   build/tests/test_models vivit save   the cases whose names contain "vivit" or "save"
 *   build/tests/test_models --list       the cases' names, none run
 * main calls check_cases(argc, argv) first, then runs each case as CASE(test_gemm()) (its name is
 * the call's text without quotes: test_pool(vivit_m1, 1)) or, for a name made at run time,
 * if (check_select("parity(%s, %d threads)", name, t)) parity(name, t);
 * parity_each_listed (parity.h) makes each listed fixture a case: each_fixture(vivit_m1).
 * check_done() says how many cases ran; a filter that matches none fails (exit 1), so that a typo
 * is not taken for a pass. A program's setup and the checks outside any case always run; a check
 * over every case (one that needs all of them to have run) asks check_unfiltered() first. */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

static int check_nfilters, check_listing, check_cases_on, check_cases_seen, check_cases_ran;
static char **check_filters;

static inline void check_cases(int argc, char **argv) {
    check_cases_on = 1;
    check_filters = argv + 1;
    check_nfilters = argc - 1;
    if (argc == 2 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"))) {
        printf("usage: %s [--list | WORD...]: run the cases whose names contain a WORD (all without "
               "one); --list lists their names\n", argv[0]);
        exit(0);
    }
    if (argc == 2 && !strcmp(argv[1], "--list")) check_listing = 1, check_nfilters = 0;
}

/* 1 when the case named (printf-style; quotes are dropped) is to run now; counts it. */
static inline int check_select(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static inline int check_select(const char *fmt, ...) {
    char raw[512], name[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(raw, sizeof raw, fmt, ap);
    va_end(ap);
    size_t n = 0;
    for (const char *p = raw; *p; p++)
        if (*p != '"') name[n++] = *p;
    name[n] = 0;
    check_cases_seen++;
    if (check_listing) {
        printf("%s\n", name);
        return 0;
    }
    int pick = check_nfilters == 0;
    for (int i = 0; i < check_nfilters && !pick; i++) pick = strstr(name, check_filters[i]) != NULL;
    if (!pick) return 0;
    check_cases_ran++;
    if (check_nfilters) printf("case %s\n", name), fflush(stdout);
    return 1;
}
#define CASE(...)                                                                                \
    do {                                                                                         \
        if (check_select("%s", #__VA_ARGS__)) __VA_ARGS__;                                       \
    } while (0)

/* 1 when no filter was given (every case runs). */
static inline int check_unfiltered(void) { return check_nfilters == 0 && !check_listing; }

static inline int check_done(void) {
    int no_case = 0;
    if (check_cases_on && check_listing) {
        printf("%d cases\n", check_cases_seen);
    } else if (check_cases_on && check_nfilters) {
        printf("ran %d of %d cases (the names containing", check_cases_ran, check_cases_seen);
        for (int i = 0; i < check_nfilters; i++) printf(" %s'%s'", i ? "or " : "", check_filters[i]);
        printf(")\n");
        if (check_cases_ran == 0) {
            printf("no case matches: --list lists them\n");
            no_case = 1;
        }
    } else if (check_cases_on) {
        printf("ran %d cases\n", check_cases_seen);
    }
    printf("%d passed, %d failed\n", check_passed, check_failed);
    return check_failed || no_case ? 1 : 0;
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
