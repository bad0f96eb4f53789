/* Helpers shared by the libFuzzer harnesses (tests/fuzz_*.c): a private temporary directory,
 * writing the input to a file there, and the checks every failing call must pass. abort() is a
 * finding: libFuzzer saves the input as a reproducer. */
#ifndef TB_FUZZ_H
#define TB_FUZZ_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common.h"

/* Makes dir (capacity cap) a fresh directory $TMPDIR/tubelet_<name>.XXXXXX. */
static inline void fuzz_mkdtemp(char *dir, size_t cap, const char *name) {
    const char *base = getenv("TMPDIR");
    if (!base || !*base) base = "/tmp";
    snprintf(dir, cap, "%s/tubelet_%s.XXXXXX", base, name);
    if (!mkdtemp(dir)) abort();
}

/* dir/name into out (capacity cap); a path that does not fit is a harness bug. */
static inline void fuzz_join(char *out, size_t cap, const char *dir, const char *name) {
    if ((size_t)snprintf(out, cap, "%s/%s", dir, name) >= cap) abort();
}

static inline void fuzz_put(const char *path, const uint8_t *data, size_t size) {
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) abort();
    size_t off = 0;
    while (off < size) {
        ssize_t w = write(fd, data + off, size - off);
        if (w <= 0) abort();
        off += (size_t)w;
    }
    close(fd);
}

/* A NUL-terminated copy of data (the JSON parsers take strings). */
static inline char *fuzz_strdup(const uint8_t *data, size_t size) {
    char *s = malloc(size + 1);
    if (!s) abort();
    memcpy(s, data, size);
    s[size] = 0;
    return s;
}

/* A failed call: non-zero status, and a NUL-terminated message that names the file. */
static inline void fuzz_check_err(int rc, const tb_err *e, const char *path) {
    if (rc == 0) abort();
    if (!memchr(e->msg, 0, sizeof e->msg)) abort();
    if (!strstr(e->msg, path)) abort();
}

static volatile unsigned fuzz_sink;

/* Reads every byte, so that ASan sees a buffer that is shorter than claimed. */
static inline void fuzz_touch(const void *p, size_t n) {
    const unsigned char *b = p;
    unsigned s = 0;
    for (size_t i = 0; i < n; i++) s += b[i];
    fuzz_sink += s;
}

/* Warnings must be NUL-terminated strings; they are not printed. */
static inline void fuzz_log(void *user, int level, const char *msg) {
    (void)user;
    (void)level;
    fuzz_sink += (unsigned)strlen(msg);
}

#endif
