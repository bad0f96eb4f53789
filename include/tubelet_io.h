/* tubelet_io.h — the files around a model that programs exchange with Python: NumPy .npy arrays
 * (read and write), safetensors files of float32 tensors (write), PNG images (write). The library's
 * own validated readers and writers do the work (src/io/npy.c, src/io/safetensors.c,
 * src/train/plot.c); every file is written beside its target, synced and renamed, so nothing is
 * left at the path on error. Errors: a status from tubelet_status, a message in err naming the
 * file. */
#ifndef TUBELET_IO_H
#define TUBELET_IO_H

#include <stddef.h>
#include <stdint.h>

#include "tubelet.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    TUBELET_F32 = 0, TUBELET_F64, TUBELET_I64, TUBELET_I32, TUBELET_BOOL, TUBELET_U8
} tubelet_dtype;

#define TUBELET_ARRAY_MAX_DIMS 8
typedef struct {
    tubelet_dtype dtype;
    int ndim;
    int64_t shape[TUBELET_ARRAY_MAX_DIMS];
    size_t numel;
    void *data;            /* owned, 64-byte aligned; free with tubelet_array_free */
} tubelet_array;

/* Reads a .npy file (versions 1.0-3.0, little-endian, C order), validated strictly. */
int tubelet_npy_read(tubelet_array *out, const char *path, char *err, size_t errlen);
void tubelet_array_free(tubelet_array *a);
/* Writes data (dtype, shape) as a .npy file. */
int tubelet_npy_write(const char *path, tubelet_dtype dtype, int ndim, const int64_t *shape,
                      const void *data, char *err, size_t errlen);

/* The bytes of a .npy file before its data, for one sent from memory (e.g. over HTTP): at most
 * 522 bytes into out (capacity cap), their count in *len. */
int tubelet_npy_header(tubelet_dtype dtype, int ndim, const int64_t *shape, unsigned char *out,
                       size_t cap, size_t *len, char *err, size_t errlen);

/* One float32 tensor of a safetensors file. */
typedef struct {
    const char *name;
    int ndim;
    int64_t shape[TUBELET_ARRAY_MAX_DIMS];
    const float *data;
} tubelet_tensor;
/* Writes n float32 tensors, in the given order, as a safetensors file. */
int tubelet_safetensors_write(const char *path, const tubelet_tensor *t, int n, char *err,
                              size_t errlen);

/* An RGB image (h, w, 3) as a PNG (FFmpeg's encoder). */
int tubelet_png_write(const char *path, const uint8_t *rgb, int w, int h, char *err,
                      size_t errlen);
/* Draws text into an RGB image (h, w, 3) in tubelet's 5 x 7 bitmap font (ASCII 32-126; another
 * byte shows as '?'), magnified scale times, its top-left corner at (x, y), clipped to the image;
 * a line is 9 * scale pixels high (g, p, q, y descend). Returns the width in pixels; rgb NULL:
 * only the width. The labels of tubelet's own PNGs (curves.png, reconstruct). */
int tubelet_png_text(uint8_t *rgb, int w, int h, int x, int y, int scale, const uint8_t color[3],
                     const char *text);

#ifdef __cplusplus
}
#endif

#endif
