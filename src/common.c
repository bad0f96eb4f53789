#include "common.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int tb_fail(tb_err *e, int code, const char *fmt, ...) {
    if (e) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(e->msg, sizeof e->msg, fmt, ap);
        va_end(ap);
    }
    return code;
}

int tb_prefix(tb_err *e, int code, const char *fmt, ...) {
    if (e) {
        char head[512], old[sizeof e->msg];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(head, sizeof head, fmt, ap);
        va_end(ap);
        memcpy(old, e->msg, sizeof old);
        size_t n = strlen(head);
        if (n >= sizeof e->msg) n = sizeof e->msg - 1;
        memcpy(e->msg, head, n);
        size_t m = strnlen(old, sizeof old - 1);
        if (m > sizeof e->msg - 1 - n) m = sizeof e->msg - 1 - n;
        memcpy(e->msg + n, old, m);
        e->msg[n + m] = 0;
    }
    return code;
}

void tb_warn(const tb_log *log, const char *fmt, ...) {
    if (!log || !log->fn) return;
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    log->fn(log->user, 1, msg);
}

int tb_mul_ok(size_t a, size_t b, size_t *out) {
    if (a != 0 && b > SIZE_MAX / a) return 0;
    *out = a * b;
    return 1;
}

void *tb_alloc(size_t bytes) {
    void *p = NULL;
    if (bytes == 0) bytes = 64;
    bytes = (bytes + 63) & ~(size_t)63;
    if (posix_memalign(&p, 64, bytes) != 0) return NULL;
    memset(p, 0, bytes);
    return p;
}

void tb_free(void *p) { free(p); }

int tb_read_file(const char *path, char **out, size_t *len, size_t max_len, tb_err *e) {
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) return tb_fail(e, TUBELET_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    if (fseek(f, 0, SEEK_END) != 0) {
        fclose(f);
        return tb_fail(e, TUBELET_ERR_IO, "%s: cannot seek: %s", path, strerror(errno));
    }
    long n = ftell(f);
    if (n < 0 || (size_t)n > max_len) {
        fclose(f);
        return tb_fail(e, TUBELET_ERR_FORMAT, "%s: file too large (%ld bytes, limit %zu)", path,
                       n, max_len);
    }
    rewind(f);
    char *buf = malloc((size_t)n + 1);
    if (!buf) {
        fclose(f);
        return tb_fail(e, TUBELET_ERR_MEMORY, "%s: out of memory", path);
    }
    if (fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        fclose(f);
        return tb_fail(e, TUBELET_ERR_IO, "%s: read failed", path);
    }
    fclose(f);
    buf[n] = 0;
    *out = buf;
    if (len) *len = (size_t)n;
    return TUBELET_OK;
}
