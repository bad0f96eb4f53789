/* NumPy .npy reader and writer. See npy.h.
 *
 * The header is a Python dict literal, e.g. {'descr': '<f4', 'fortran_order': False,
 * 'shape': (2, 3), }. It is parsed here by a small strict parser (no eval), accepting exactly
 * the three keys NumPy writes, in any order. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "npy.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "npy.c assumes a little-endian host"
#endif

#define NPY_MAX_HEADER ((size_t)1 << 20)

static const char npy_magic[6] = {'\x93', 'N', 'U', 'M', 'P', 'Y'};

static const struct {
    const char *descr;
    npy_dtype t;
    size_t size;
} npy_types[] = {
    {"<f4", NPY_F32, 4},
    {"<f8", NPY_F64, 8},
    {"<i8", NPY_I64, 8},
    {"<i4", NPY_I32, 4},
    {"|b1", NPY_BOOL, 1}, /* masks (VideoMAE pretraining's bool_masked_pos) */
    {"|u1", NPY_U8, 1},
};
#define N_NPY_TYPES ((int)(sizeof npy_types / sizeof npy_types[0]))

static size_t npy_itemsize(npy_dtype t) {
    for (int i = 0; i < N_NPY_TYPES; i++)
        if (npy_types[i].t == t) return npy_types[i].size;
    return 0;
}

static const char *npy_descr(npy_dtype t) {
    for (int i = 0; i < N_NPY_TYPES; i++)
        if (npy_types[i].t == t) return npy_types[i].descr;
    return NULL;
}

void npy_free(npy_array *a) {
    if (!a) return;
    tb_free(a->data);
    memset(a, 0, sizeof *a);
}

/* ---- header parser ---- */

typedef struct {
    const char *s;
    size_t n, i;
    const char *path;
    tb_err *e;
} hparser;

static int is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

static void skip_ws(hparser *p) {
    while (p->i < p->n && is_ws(p->s[p->i])) p->i++;
}

static int hfail(hparser *p, const char *what) {
    return tb_fail(p->e, TUBELET_ERR_FORMAT, "%s: malformed .npy header: %s at byte %zu", p->path,
                   what, p->i);
}

static int expect(hparser *p, char c, const char *what) {
    skip_ws(p);
    if (p->i >= p->n || p->s[p->i] != c) return hfail(p, what);
    p->i++;
    return TUBELET_OK;
}

/* A quoted string without escapes, copied into buf (cap bytes). */
static int parse_str(hparser *p, char *buf, size_t cap) {
    skip_ws(p);
    if (p->i >= p->n || (p->s[p->i] != '\'' && p->s[p->i] != '"'))
        return hfail(p, "expected a quoted string");
    char q = p->s[p->i++];
    size_t k = 0;
    while (p->i < p->n && p->s[p->i] != q) {
        char c = p->s[p->i];
        if (c == '\\' || c == '\n' || (unsigned char)c < 0x20)
            return hfail(p, "unsupported character in string");
        if (k + 1 >= cap) return hfail(p, "string too long");
        buf[k++] = c;
        p->i++;
    }
    if (p->i >= p->n) return hfail(p, "unterminated string");
    p->i++;
    buf[k] = 0;
    return TUBELET_OK;
}

static int match_word(hparser *p, const char *w) {
    size_t len = strlen(w);
    if (p->n - p->i < len || memcmp(p->s + p->i, w, len) != 0) return 0;
    /* next char must not continue an identifier */
    if (p->i + len < p->n) {
        char c = p->s[p->i + len];
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_')
            return 0;
    }
    p->i += len;
    return 1;
}

static int parse_shape(hparser *p, int *ndim, int64_t *shape) {
    int rc = expect(p, '(', "expected '(' to start the shape tuple");
    if (rc) return rc;
    int nd = 0, trailing_comma = 0;
    for (;;) {
        skip_ws(p);
        if (p->i < p->n && p->s[p->i] == ')') {
            p->i++;
            break;
        }
        if (nd == NPY_MAX_DIMS)
            return tb_fail(p->e, TUBELET_ERR_FORMAT,
                           "%s: array has more than %d dimensions, which is not supported",
                           p->path, NPY_MAX_DIMS);
        if (p->i < p->n && p->s[p->i] == '-')
            return hfail(p, "negative dimension in shape");
        size_t start = p->i;
        uint64_t v = 0;
        while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9') {
            unsigned d = (unsigned)(p->s[p->i] - '0');
            if (v > ((uint64_t)INT64_MAX - d) / 10) return hfail(p, "dimension too large");
            v = v * 10 + d;
            p->i++;
        }
        if (p->i == start) return hfail(p, "expected an integer in the shape tuple");
        if (p->i - start > 1 && p->s[start] == '0')
            return hfail(p, "integer with a leading zero in shape");
        if (p->i < p->n && p->s[p->i] == 'L') p->i++; /* Python 2 long suffix */
        shape[nd++] = (int64_t)v;
        skip_ws(p);
        trailing_comma = 0;
        if (p->i < p->n && p->s[p->i] == ',') {
            p->i++;
            trailing_comma = 1;
            continue;
        }
        if (p->i < p->n && p->s[p->i] == ')') {
            p->i++;
            break;
        }
        return hfail(p, "expected ',' or ')' in the shape tuple");
    }
    if (nd == 1 && !trailing_comma)
        return hfail(p, "a one-element shape tuple needs a trailing comma");
    *ndim = nd;
    return TUBELET_OK;
}

static int parse_header(hparser *p, npy_dtype *dtype, int *ndim, int64_t *shape) {
    int have_descr = 0, have_fortran = 0, have_shape = 0;
    int rc = expect(p, '{', "expected '{' at the start of the header dict");
    if (rc) return rc;
    for (;;) {
        skip_ws(p);
        if (p->i < p->n && p->s[p->i] == '}') {
            p->i++;
            break;
        }
        char key[32];
        if ((rc = parse_str(p, key, sizeof key))) return rc;
        if ((rc = expect(p, ':', "expected ':' after a key"))) return rc;
        skip_ws(p);
        if (strcmp(key, "descr") == 0) {
            if (have_descr++) return hfail(p, "key 'descr' given twice");
            if (p->i < p->n && p->s[p->i] == '[')
                return tb_fail(p->e, TUBELET_ERR_FORMAT,
                               "%s: structured dtypes are not supported (supported descr: '<f4', "
                               "'<f8', '<i8', '<i4')",
                               p->path);
            char d[64];
            if ((rc = parse_str(p, d, sizeof d))) return rc;
            int found = 0;
            for (int k = 0; k < N_NPY_TYPES; k++)
                if (strcmp(d, npy_types[k].descr) == 0) {
                    *dtype = npy_types[k].t;
                    found = 1;
                }
            if (!found)
                return tb_fail(p->e, TUBELET_ERR_FORMAT,
                               "%s: unsupported dtype descr '%s'%s (supported: '<f4', '<f8', "
                               "'<i8', '<i4', '|b1', '|u1')",
                               p->path, d, d[0] == '>' ? ": big-endian data is not supported" : "");
        } else if (strcmp(key, "fortran_order") == 0) {
            if (have_fortran++) return hfail(p, "key 'fortran_order' given twice");
            if (match_word(p, "True"))
                return tb_fail(p->e, TUBELET_ERR_FORMAT,
                               "%s: fortran_order arrays are not supported; save with "
                               "np.ascontiguousarray",
                               p->path);
            if (!match_word(p, "False")) return hfail(p, "fortran_order must be True or False");
        } else if (strcmp(key, "shape") == 0) {
            if (have_shape++) return hfail(p, "key 'shape' given twice");
            if ((rc = parse_shape(p, ndim, shape))) return rc;
        } else {
            return tb_fail(p->e, TUBELET_ERR_FORMAT,
                           "%s: malformed .npy header: unexpected key '%s'", p->path, key);
        }
        skip_ws(p);
        if (p->i < p->n && p->s[p->i] == ',') {
            p->i++;
            continue;
        }
        if (p->i < p->n && p->s[p->i] == '}') {
            p->i++;
            break;
        }
        return hfail(p, "expected ',' or '}' after a value");
    }
    if (!have_descr || !have_fortran || !have_shape)
        return tb_fail(p->e, TUBELET_ERR_FORMAT,
                       "%s: malformed .npy header: missing key '%s'", p->path,
                       !have_descr ? "descr" : !have_fortran ? "fortran_order" : "shape");
    skip_ws(p);
    if (p->i != p->n) return hfail(p, "unexpected characters after the header dict");
    return TUBELET_OK;
}

/* ---- reader ---- */

static int read_full(int fd, void *buf, size_t n, off_t off) {
    unsigned char *b = buf;
    while (n > 0) {
        size_t chunk = n > ((size_t)1 << 30) ? ((size_t)1 << 30) : n;
        ssize_t r = pread(fd, b, chunk, off);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return -1;
        b += r;
        n -= (size_t)r;
        off += r;
    }
    return 0;
}

int npy_read(const char *path, npy_array *out, tb_err *e) {
    if (!path || !out) return tb_fail(e, TUBELET_ERR_ARG, "npy_read: NULL argument");
    memset(out, 0, sizeof *out);
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK); /* no hang on a FIFO */
    if (fd < 0) return tb_fail(e, TUBELET_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    int rc = TUBELET_OK;
    char *hdr = NULL;
    void *data = NULL;
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        rc = tb_fail(e, TUBELET_ERR_IO, "%s: cannot stat: %s", path, strerror(errno));
        goto done;
    }
    if (!S_ISREG(sb.st_mode)) {
        rc = tb_fail(e, TUBELET_ERR_IO, "%s: not a regular file", path);
        goto done;
    }
    size_t size = (size_t)sb.st_size;
    unsigned char pre[12];
    if (size < 10 || read_full(fd, pre, 10, 0) != 0 || memcmp(pre, npy_magic, 6) != 0) {
        rc = tb_fail(e, TUBELET_ERR_FORMAT, "%s: not a .npy file (bad magic)", path);
        goto done;
    }
    int major = pre[6], minor = pre[7];
    size_t hlen, pre_len;
    if (major == 1 && minor == 0) {
        hlen = (size_t)pre[8] | ((size_t)pre[9] << 8);
        pre_len = 10;
    } else if ((major == 2 || major == 3) && minor == 0) {
        if (size < 12 || read_full(fd, pre + 10, 2, 10) != 0) {
            rc = tb_fail(e, TUBELET_ERR_FORMAT, "%s: truncated .npy header", path);
            goto done;
        }
        hlen = (size_t)pre[8] | ((size_t)pre[9] << 8) | ((size_t)pre[10] << 16) |
               ((size_t)pre[11] << 24);
        pre_len = 12;
    } else {
        rc = tb_fail(e, TUBELET_ERR_FORMAT,
                     "%s: unsupported .npy format version %d.%d (supported: 1.0, 2.0, 3.0)", path,
                     major, minor);
        goto done;
    }
    if (hlen > NPY_MAX_HEADER) {
        rc = tb_fail(e, TUBELET_ERR_FORMAT, "%s: .npy header length %zu exceeds the limit of %zu",
                     path, hlen, NPY_MAX_HEADER);
        goto done;
    }
    if (hlen > size - pre_len) {
        rc = tb_fail(e, TUBELET_ERR_FORMAT,
                     "%s: truncated: header length %zu but the file has only %zu bytes after the "
                     "preamble",
                     path, hlen, size - pre_len);
        goto done;
    }
    hdr = malloc(hlen + 1);
    if (!hdr) {
        rc = tb_fail(e, TUBELET_ERR_MEMORY, "%s: out of memory", path);
        goto done;
    }
    if (read_full(fd, hdr, hlen, (off_t)pre_len) != 0) {
        rc = tb_fail(e, TUBELET_ERR_IO, "%s: read failed", path);
        goto done;
    }
    hdr[hlen] = 0;
    hparser p = {hdr, hlen, 0, path, e};
    npy_dtype dtype = NPY_F32;
    int ndim = 0;
    int64_t shape[NPY_MAX_DIMS] = {0};
    if ((rc = parse_header(&p, &dtype, &ndim, shape))) goto done;

    size_t numel = 1, need;
    for (int d = 0; d < ndim; d++)
        if (!tb_mul_ok(numel, (size_t)shape[d], &numel)) {
            rc = tb_fail(e, TUBELET_ERR_FORMAT, "%s: the element count of the shape overflows",
                         path);
            goto done;
        }
    if (!tb_mul_ok(numel, npy_itemsize(dtype), &need)) {
        rc = tb_fail(e, TUBELET_ERR_FORMAT, "%s: the byte size of the shape overflows", path);
        goto done;
    }
    size_t off = pre_len + hlen, have = size - off;
    if (have < need) {
        rc = tb_fail(e, TUBELET_ERR_FORMAT,
                     "%s: truncated: header says %zu bytes of data, file has %zu", path, need,
                     have);
        goto done;
    }
    if (have > need) {
        rc = tb_fail(e, TUBELET_ERR_FORMAT,
                     "%s: header says %zu bytes of data, but the file has %zu (%zu trailing "
                     "bytes)",
                     path, need, have, have - need);
        goto done;
    }
    data = tb_alloc(need);
    if (!data) {
        rc = tb_fail(e, TUBELET_ERR_MEMORY, "%s: out of memory for %zu bytes", path, need);
        goto done;
    }
    if (need && read_full(fd, data, need, (off_t)off) != 0) {
        rc = tb_fail(e, TUBELET_ERR_IO, "%s: read of %zu data bytes failed", path, need);
        goto done;
    }
    out->dtype = dtype;
    out->ndim = ndim;
    memcpy(out->shape, shape, sizeof shape);
    out->numel = numel;
    out->data = data;
    data = NULL;
done:
    tb_free(data);
    free(hdr);
    close(fd);
    return rc;
}

/* ---- writer ---- */

int npy_header(const char *name, npy_dtype dtype, int ndim, const int64_t *shape,
               unsigned char out[NPY_HEADER_MAX], size_t *len_out, size_t *nbytes_out, tb_err *e) {
    const char *descr = npy_descr(dtype);
    if (!descr) return tb_fail(e, TUBELET_ERR_ARG, "%s: invalid dtype %d", name, (int)dtype);
    if (ndim < 0 || ndim > NPY_MAX_DIMS || (ndim > 0 && !shape))
        return tb_fail(e, TUBELET_ERR_ARG, "%s: invalid ndim %d (0..%d allowed)", name, ndim,
                       NPY_MAX_DIMS);
    size_t numel = 1, nbytes;
    for (int d = 0; d < ndim; d++)
        if (shape[d] < 0 || !tb_mul_ok(numel, (size_t)shape[d], &numel))
            return tb_fail(e, TUBELET_ERR_ARG, "%s: invalid shape (dimension %d is %lld)", name,
                           d, (long long)shape[d]);
    if (!tb_mul_ok(numel, npy_itemsize(dtype), &nbytes))
        return tb_fail(e, TUBELET_ERR_ARG, "%s: shape too large", name);

    /* 10-byte preamble + dict + padding + '\n' = multiple of 64 */
    char *hdr = (char *)out + 10;
    const size_t cap = NPY_HEADER_MAX - 10;
    int len = snprintf(hdr, cap, "{'descr': '%s', 'fortran_order': False, 'shape': (", descr);
    for (int d = 0; d < ndim; d++)
        len += snprintf(hdr + len, cap - (size_t)len, "%s%lld", d ? ", " : "", (long long)shape[d]);
    len += snprintf(hdr + len, cap - (size_t)len, "%s), }", ndim == 1 ? "," : "");
    size_t total = 10 + (size_t)len + 1;
    size_t pad = (64 - total % 64) % 64;
    if ((size_t)len + pad + 1 >= cap)
        return tb_fail(e, TUBELET_ERR_ARG, "%s: header too long", name);
    memset(hdr + len, ' ', pad);
    hdr[(size_t)len + pad] = '\n';
    size_t hlen = (size_t)len + pad + 1;
    memcpy(out, npy_magic, 6);
    out[6] = 1;
    out[7] = 0;
    out[8] = (unsigned char)(hlen & 0xff);
    out[9] = (unsigned char)(hlen >> 8);
    *len_out = 10 + hlen;
    *nbytes_out = nbytes;
    return 0;
}

int npy_write(const char *path, npy_dtype dtype, int ndim, const int64_t *shape, const void *data,
              tb_err *e) {
    if (!path) return tb_fail(e, TUBELET_ERR_ARG, "npy_write: NULL path");
    unsigned char hdr[NPY_HEADER_MAX];
    size_t hlen, nbytes;
    int rc = npy_header(path, dtype, ndim, shape, hdr, &hlen, &nbytes, e);
    if (rc) return rc;
    if (nbytes && !data) return tb_fail(e, TUBELET_ERR_ARG, "%s: NULL data", path);

    tb_atomic_file f;
    if ((rc = tb_atomic_open(&f, path, e))) return rc;
    tb_atomic_put(&f, hdr, hlen);
    if (nbytes) tb_atomic_put(&f, data, nbytes);
    return tb_atomic_commit(&f, e);
}
