/* safetensors reader and writer. The reader is a security boundary: every header field is
 * validated before any tensor is trusted (header length within the file, JSON well-formed,
 * offsets inside the data section, tensors contiguous and non-overlapping and covering the data
 * section, dtype size x shape = byte length, no duplicate names, shapes non-negative and small). */
#ifndef TB_SAFETENSORS_H
#define TB_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "../common.h"

typedef enum { ST_F32, ST_F16, ST_BF16, ST_F64, ST_I64, ST_I32, ST_I8, ST_U8, ST_BOOL } st_dtype;

#define ST_MAX_DIMS 8

typedef struct {
    const char *name;      /* owned by the st_file */
    st_dtype dtype;
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    size_t nbytes;
    const void *data;      /* points into the mapping (or the copied file); may be unaligned */
} st_tensor;

typedef struct st_file st_file;

/* Opens and validates path. use_mmap = 0 reads the file into memory instead.
 * Errors name the file: "<path>: tensor 'x' offsets [a, b) lie outside the data section (n bytes)". */
int st_open(st_file **out, const char *path, int use_mmap, tb_err *e);
void st_close(st_file *f);
/* Hands the whole pages of [p, p + bytes) back to the kernel if they lie in f's mapping (a later
 * read loads them from the file again); a no-op otherwise. */
void st_release(st_file *f, const void *p, size_t bytes);
int st_count(const st_file *f);
const st_tensor *st_at(const st_file *f, int i);
const st_tensor *st_find(const st_file *f, const char *name);   /* NULL if absent */
const char *st_path(const st_file *f);
size_t st_dtype_size(st_dtype t);
const char *st_dtype_name(st_dtype t);    /* "F32", ... */

/* Writes tensors (data in the given dtype) to path atomically: a temporary file in the same
 * directory, fsync, rename. On error no file is left at path. */
int st_write(const char *path, const st_tensor *tensors, int n, tb_err *e);

/* Converts n elements of F16/BF16/F32 to float32. */
void st_to_f32(float *dst, const void *src, st_dtype t, size_t n);

#endif
