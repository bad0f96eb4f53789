/* NumPy .npy reader and writer (format versions 1.0, 2.0, 3.0; little-endian; C order only).
 * Validated like safetensors: header parsed strictly, shape x dtype size = data length. */
#ifndef TB_NPY_H
#define TB_NPY_H

#include <stddef.h>
#include <stdint.h>

#include "../common.h"

typedef enum { NPY_F32, NPY_F64, NPY_I64, NPY_I32, NPY_BOOL, NPY_U8 } npy_dtype;

#define NPY_MAX_DIMS 8

typedef struct {
    npy_dtype dtype;
    int ndim;
    int64_t shape[NPY_MAX_DIMS];
    size_t numel;
    void *data;            /* owned, 64-byte aligned; free with npy_free */
} npy_array;

/* Reads path. Errors name the file and the problem ("x.npy: fortran_order arrays are not
 * supported", "x.npy: truncated: header says 600 bytes of data, file has 12"). */
int npy_read(const char *path, npy_array *out, tb_err *e);
void npy_free(npy_array *a);

/* The bytes of a .npy file before its data (version 1.0), at most NPY_HEADER_MAX, into out;
 * *nbytes: the data's size. name is for messages. */
#define NPY_HEADER_MAX 522
int npy_header(const char *name, npy_dtype dtype, int ndim, const int64_t *shape,
               unsigned char out[NPY_HEADER_MAX], size_t *len, size_t *nbytes, tb_err *e);
/* Writes atomically (temporary file + fsync + rename); nothing is left at path on error. */
int npy_write(const char *path, npy_dtype dtype, int ndim, const int64_t *shape, const void *data,
              tb_err *e);

#endif
