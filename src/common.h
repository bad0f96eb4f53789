/* Internal helpers shared by every layer: status codes, error text, logging.
 * The library never prints or exits; it fills a tb_err and returns a status. */
#ifndef TB_COMMON_H
#define TB_COMMON_H

#include <stddef.h>
#include <stdint.h>

#include "tubelet.h"

/* Error text carried from the failing function up to the caller. */
typedef struct {
    char msg[1024];
} tb_err;

/* Format msg into e (if non-NULL) and return code. Use as: return tb_fail(e, TUBELET_ERR_IO, "...", ...); */
int tb_fail(tb_err *e, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Prefix an existing message, e.g. with the file name: "model.safetensors: <old msg>". */
int tb_prefix(tb_err *e, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Warnings go through a caller-supplied callback (never to stderr directly). */
typedef struct {
    tubelet_log_fn fn;
    void *user;
} tb_log;
void tb_warn(const tb_log *log, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Overflow-checked size arithmetic: returns 0 on overflow. */
int tb_mul_ok(size_t a, size_t b, size_t *out);

/* 64-byte aligned allocation (for SIMD and GEMM), zeroed. Free with tb_free. */
void *tb_alloc(size_t bytes);
void tb_free(void *p);

/* Reads a whole small file (config.json and the like) into a NUL-terminated buffer. */
int tb_read_file(const char *path, char **out, size_t *len, size_t max_len, tb_err *e);

#endif
