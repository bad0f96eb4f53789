/* Public (tubelet_io.h): the .npy reader and writer and the safetensors writer, for programs
 * outside the library (the CLI, the Python package's tools). Thin: the validation and the atomic
 * writes are npy.c's and safetensors.c's. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tubelet_io.h"
#include "npy.h"
#include "safetensors.h"

/* the public dtype numbering is npy.c's */
_Static_assert((int)TUBELET_F32 == (int)NPY_F32 && (int)TUBELET_F64 == (int)NPY_F64 &&
                   (int)TUBELET_I64 == (int)NPY_I64 && (int)TUBELET_I32 == (int)NPY_I32 &&
                   (int)TUBELET_BOOL == (int)NPY_BOOL && (int)TUBELET_U8 == (int)NPY_U8,
               "tubelet_dtype follows npy_dtype");
_Static_assert(TUBELET_ARRAY_MAX_DIMS == NPY_MAX_DIMS, "the same rank limit");

int tubelet_npy_read(tubelet_array *out, const char *path, char *err, size_t errlen) {
    tb_err e = {{0}};
    npy_array a = {0};
    *out = (tubelet_array){0};
    int rc = npy_read(path, &a, &e);
    if (rc) return tb_err_out(rc, &e, err, errlen);
    out->dtype = (tubelet_dtype)a.dtype, out->ndim = a.ndim, out->numel = a.numel;
    out->data = a.data;
    for (int d = 0; d < a.ndim; d++) out->shape[d] = a.shape[d];
    return TUBELET_OK;
}

void tubelet_array_free(tubelet_array *a) {
    if (!a) return;
    tb_free(a->data);
    *a = (tubelet_array){0};
}

int tubelet_npy_header(tubelet_dtype dtype, int ndim, const int64_t *shape, unsigned char *out,
                       size_t cap, size_t *len, char *err, size_t errlen) {
    tb_err e = {{0}};
    unsigned char hdr[NPY_HEADER_MAX];
    size_t nbytes;
    int rc = npy_header(".npy", (npy_dtype)dtype, ndim, shape, hdr, len, &nbytes, &e);
    if (!rc && *len > cap) rc = tb_fail(&e, TUBELET_ERR_ARG, ".npy: header of %zu bytes, room for %zu", *len, cap);
    if (!rc) memcpy(out, hdr, *len);
    return tb_err_out(rc, &e, err, errlen);
}

int tubelet_npy_write(const char *path, tubelet_dtype dtype, int ndim, const int64_t *shape,
                      const void *data, char *err, size_t errlen) {
    tb_err e = {{0}};
    return tb_err_out(npy_write(path, (npy_dtype)dtype, ndim, shape, data, &e), &e, err, errlen);
}

int tubelet_safetensors_write(const char *path, const tubelet_tensor *t, int n, char *err,
                              size_t errlen) {
    tb_err e = {{0}};
    st_tensor *ts = calloc((size_t)(n > 0 ? n : 1), sizeof *ts);
    if (!ts)
        return tb_err_out(tb_fail(&e, TUBELET_ERR_MEMORY, "%s: out of memory", path), &e, err,
                          errlen);
    int rc = TUBELET_OK;
    for (int i = 0; i < n && !rc; i++) {
        if (t[i].ndim < 0 || t[i].ndim > ST_MAX_DIMS) {
            rc = tb_fail(&e, TUBELET_ERR_ARG, "%s: tensor '%s' has %d dimensions", path,
                         t[i].name, t[i].ndim);
            break;
        }
        size_t numel = 1;
        ts[i] = (st_tensor){t[i].name, ST_F32, t[i].ndim, {0}, 0, t[i].data};
        for (int d = 0; d < t[i].ndim; d++)
            ts[i].shape[d] = t[i].shape[d], numel *= (size_t)t[i].shape[d];
        ts[i].nbytes = sizeof(float) * numel;
    }
    if (!rc) rc = st_write(path, ts, n, &e);
    free(ts);
    return tb_err_out(rc, &e, err, errlen);
}
