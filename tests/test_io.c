/* Tests for src/io: safetensors, npy and the weights directory loader.
 * Creates every test file itself in a fresh temporary directory and removes it afterwards.
 * Prints one line per failed check and finally "N passed, M failed". */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "common.h"
#include "io/npy.h"
#include "io/safetensors.h"
#include "io/weights.h"
#include "tubelet.h"

static char g_dir[4096];

/* CHECK with the caller's file and line (check.h's counters) */
static void check_(int ok, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void check_(int ok, const char *file, int line, const char *fmt, ...) {
    if (ok) {
        check_passed++;
        return;
    }
    check_failed++;
    printf("FAIL %s:%d: ", file, line);
    va_list ap;
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf("\n");
}

/* ---------------------------------------------------------------- helpers */

static char *tpath(const char *name) {
    static char bufs[8][4200];
    static int k;
    char *b = bufs[k++ % 8];
    snprintf(b, sizeof bufs[0], "%s/%s", g_dir, name);
    return b;
}

static void write_bytes(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) {
        printf("FATAL: cannot create %s: %s\n", path, strerror(errno));
        exit(2);
    }
    if (n && fwrite(p, 1, n, f) != n) {
        printf("FATAL: cannot write %s\n", path);
        exit(2);
    }
    fclose(f);
}

static unsigned char *read_bytes(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    rewind(f);
    unsigned char *b = malloc((size_t)len + 1);
    if (fread(b, 1, (size_t)len, f) != (size_t)len) {
        free(b);
        fclose(f);
        return NULL;
    }
    fclose(f);
    *n = (size_t)len;
    return b;
}

/* Writes a raw safetensors file: 8-byte length (hlen_override if != UINT64_MAX), header, data. */
static void write_st_raw(const char *path, const char *header, uint64_t hlen_override,
                         const void *data, size_t ndata) {
    size_t hn = strlen(header);
    uint64_t hl = hlen_override != UINT64_MAX ? hlen_override : hn;
    size_t tot = 8 + hn + ndata;
    unsigned char *b = malloc(tot ? tot : 1);
    for (int i = 0; i < 8; i++) b[i] = (unsigned char)(hl >> (8 * i));
    memcpy(b + 8, header, hn);
    if (ndata) memcpy(b + 8 + hn, data, ndata);
    write_bytes(path, b, tot);
    free(b);
}

static int file_exists(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0;
}

static int count_tmp_files(void) {
    DIR *d = opendir(g_dir);
    int n = 0;
    if (!d) return -1;
    struct dirent *de;
    while ((de = readdir(d)))
        if (strstr(de->d_name, ".tmp.")) n++;
    closedir(d);
    return n;
}

static int rm_cb(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(p);
}

/* Expects st_open on a file with this header/data to fail with code, in both modes, with the
 * file name and want (if non-NULL) in the message. */
static void st_bad_(const char *file, int line, const char *name, const char *header,
                    uint64_t hlen_override, const void *data, size_t ndata, int code,
                    const char *want) {
    const char *path = tpath(name);
    write_st_raw(path, header, hlen_override, data, ndata);
    for (int mm = 0; mm <= 1; mm++) {
        st_file *f = (st_file *)0x1;
        tb_err e = {{0}};
        int rc = st_open(&f, path, mm, &e);
        check_(rc == code, file, line, "%s (mmap=%d): status %d, want %d (msg: %s)", name, mm, rc,
               code, e.msg);
        check_(f == NULL, file, line, "%s (mmap=%d): *out not NULL on error", name, mm);
        check_(strstr(e.msg, path) != NULL, file, line, "%s (mmap=%d): message lacks the path: %s",
               name, mm, e.msg);
        if (want)
            check_(strstr(e.msg, want) != NULL, file, line,
                   "%s (mmap=%d): message lacks '%s': %s", name, mm, want, e.msg);
        if (rc == 0) st_close(f);
    }
    unlink(path);
}
#define ST_BAD(name, header, data, ndata, code, want) \
    st_bad_(__FILE__, __LINE__, name, header, UINT64_MAX, data, ndata, code, want)

static uint16_t f32_to_bf16_trunc(float f) {
    uint32_t b;
    memcpy(&b, &f, 4);
    return (uint16_t)(b >> 16);
}

static uint32_t fbits(float f) {
    uint32_t b;
    memcpy(&b, &f, 4);
    return b;
}

/* --------------------------------------------------------- safetensors */

static void test_st_roundtrip(void) {
    float w[6] = {1.5f, -2.25f, 3.0f, 0.0f, -0.0f, 1e-30f};
    uint16_t h[5] = {0x3c00, 0xc000, 0x7bff, 0x0001, 0x7c00}; /* 1, -2, 65504, 2^-24, inf */
    uint16_t bf[3];
    bf[0] = f32_to_bf16_trunc(1.0f);
    bf[1] = f32_to_bf16_trunc(-3.5f);
    bf[2] = f32_to_bf16_trunc(1e20f);
    int64_t iv[2] = {-7, INT64_MAX};
    float sc = 42.0f;
    st_tensor ts[6];
    memset(ts, 0, sizeof ts);
    ts[0] = (st_tensor){.name = "h16", .dtype = ST_F16, .ndim = 1, .shape = {5}, .nbytes = 10,
                        .data = h};
    ts[1] = (st_tensor){.name = "w", .dtype = ST_F32, .ndim = 2, .shape = {2, 3}, .nbytes = 24,
                        .data = w};
    ts[2] = (st_tensor){.name = "b.bf16", .dtype = ST_BF16, .ndim = 1, .shape = {3}, .nbytes = 6,
                        .data = bf};
    ts[3] = (st_tensor){.name = "ids", .dtype = ST_I64, .ndim = 1, .shape = {2}, .nbytes = 16,
                        .data = iv};
    ts[4] = (st_tensor){.name = "scalar", .dtype = ST_F32, .ndim = 0, .nbytes = 4, .data = &sc};
    ts[5] = (st_tensor){.name = "empty \"q\"\n", .dtype = ST_F32, .ndim = 2, .shape = {0, 4},
                        .nbytes = 0, .data = NULL};
    const char *path = tpath("rt.safetensors");
    tb_err e = {{0}};
    int rc = st_write(path, ts, 6, &e);
    CHECK(rc == 0, "st_write: %d %s", rc, e.msg);
    CHECK(count_tmp_files() == 0, "st_write left a temporary file");
    size_t n = 0;
    unsigned char *raw = read_bytes(path, &n);
    CHECK(raw && n >= 8, "read back");
    if (raw && n >= 8) {
        uint64_t hl = 0;
        for (int i = 7; i >= 0; i--) hl = (hl << 8) | raw[i];
        CHECK(hl % 8 == 0, "header length %llu not a multiple of 8", (unsigned long long)hl);
        CHECK(8 + hl <= n && raw[8 + hl - 1] != 0, "header ends inside the file");
    }
    free(raw);
    for (int mm = 0; mm <= 1; mm++) {
        st_file *f = NULL;
        rc = st_open(&f, path, mm, &e);
        CHECK(rc == 0, "st_open roundtrip (mmap=%d): %s", mm, e.msg);
        if (rc) continue;
        CHECK(st_count(f) == 6, "count %d", st_count(f));
        CHECK(strcmp(st_path(f), path) == 0, "st_path");
        for (int i = 0; i < 6; i++) {
            const st_tensor *t = st_find(f, ts[i].name);
            CHECK(t != NULL, "find '%s' (mmap=%d)", ts[i].name, mm);
            if (!t) continue;
            CHECK(t->dtype == ts[i].dtype, "'%s' dtype", ts[i].name);
            CHECK(t->ndim == ts[i].ndim, "'%s' ndim %d", ts[i].name, t->ndim);
            for (int d = 0; d < t->ndim; d++)
                CHECK(t->shape[d] == ts[i].shape[d], "'%s' shape[%d]", ts[i].name, d);
            CHECK(t->nbytes == ts[i].nbytes, "'%s' nbytes %zu", ts[i].name, t->nbytes);
            if (t->nbytes)
                CHECK(memcmp(t->data, ts[i].data, t->nbytes) == 0, "'%s' data differs", ts[i].name);
            CHECK((uintptr_t)t->data % st_dtype_size(t->dtype) == 0,
                  "'%s' data not aligned to its dtype size", ts[i].name);
        }
        CHECK(st_find(f, "nope") == NULL, "find absent");
        CHECK(st_at(f, 6) == NULL && st_at(f, -1) == NULL, "st_at out of range");
        const st_tensor *t = st_find(f, "h16");
        if (t) {
            float out[5];
            st_to_f32(out, t->data, t->dtype, 5);
            CHECK(out[0] == 1.0f && out[1] == -2.0f && out[2] == 65504.0f &&
                      out[3] == ldexpf(1.0f, -24) && isinf(out[4]) && out[4] > 0,
                  "F16 values after roundtrip");
        }
        t = st_find(f, "b.bf16");
        if (t) {
            float out[3];
            st_to_f32(out, t->data, t->dtype, 3);
            CHECK(out[0] == 1.0f && out[1] == -3.5f && fabsf(out[2] - 1e20f) < 1e18f,
                  "BF16 values after roundtrip");
        }
        t = st_find(f, "scalar");
        if (t) CHECK(t->ndim == 0 && *(const float *)t->data == 42.0f, "0-dim scalar");
        st_close(f);
    }

    /* an empty file (no tensors) */
    rc = st_write(tpath("empty.safetensors"), NULL, 0, &e);
    CHECK(rc == 0, "st_write with no tensors: %s", e.msg);
    st_file *f = NULL;
    rc = st_open(&f, tpath("empty.safetensors"), 1, &e);
    CHECK(rc == 0 && st_count(f) == 0, "open empty: %s", e.msg);
    st_close(f);

    /* writer rejects duplicate names and leaves nothing behind */
    st_tensor dup[2] = {ts[1], ts[1]};
    const char *dpath = tpath("dup_written.safetensors");
    rc = st_write(dpath, dup, 2, &e);
    CHECK(rc == TUBELET_ERR_ARG, "st_write duplicate: %d", rc);
    CHECK(strstr(e.msg, dpath) != NULL, "st_write duplicate message names file: %s", e.msg);
    CHECK(!file_exists(dpath), "st_write duplicate left a file");
    /* bad nbytes */
    st_tensor bad = ts[1];
    bad.nbytes = 20;
    rc = st_write(dpath, &bad, 1, &e);
    CHECK(rc == TUBELET_ERR_ARG && !file_exists(dpath), "st_write bad nbytes: %d", rc);
    /* unwritable directory */
    const char *npath = "/nonexistent-dir-tubelet/x.safetensors";
    rc = st_write(npath, ts, 1, &e);
    CHECK(rc == TUBELET_ERR_IO && strstr(e.msg, npath), "st_write bad dir: %d %s", rc, e.msg);
    CHECK(count_tmp_files() == 0, "temporary files left behind");

    /* overwrite an existing file atomically */
    rc = st_write(path, &ts[1], 1, &e);
    CHECK(rc == 0, "overwrite: %s", e.msg);
    rc = st_open(&f, path, 0, &e);
    CHECK(rc == 0 && st_count(f) == 1, "overwritten file has 1 tensor");
    st_close(f);
    struct stat sb;
    CHECK(stat(path, &sb) == 0 && (sb.st_mode & 0644) == 0644, "written file mode is 0644");
}

static void test_st_handwritten(void) {
    /* as written by the Python library: metadata first, offsets, padding with spaces */
    float d[3] = {1, 2, 3};
    const char *hdr = "{\"__metadata__\":{\"format\":\"pt\"},"
                      "\"x\":{\"dtype\":\"F32\",\"shape\":[3],"
                      "\"data_offsets\":[0,12]}}   ";
    const char *path = tpath("hand.safetensors");
    write_st_raw(path, hdr, UINT64_MAX, d, 12);
    st_file *f = NULL;
    tb_err e = {{0}};
    int rc = st_open(&f, path, 1, &e);
    CHECK(rc == 0, "handwritten: %s", e.msg);
    if (!rc) {
        const st_tensor *t = st_find(f, "x");
        float v[3] = {0};
        if (t) memcpy(v, t->data, sizeof v);
        CHECK(t && v[2] == 3.0f, "handwritten value");
        st_close(f);
    }
    /* keys in another order, whitespace, zero-size tensors at the same offset, BOOL/U8/I8 */
    unsigned char u[4] = {1, 0, 255, 7};
    hdr = "{ \"z1\": {\"shape\": [0], \"data_offsets\": [0, 0], \"dtype\": \"F32\"},\n"
          "  \"b\": {\"dtype\": \"BOOL\", \"shape\": [2], \"data_offsets\": [0, 2]},\n"
          "  \"z2\": {\"dtype\": \"I64\", \"shape\": [3, 0, 2], \"data_offsets\": [2, 2]},\n"
          "  \"u\": {\"dtype\": \"U8\", \"shape\": [1], \"data_offsets\": [2, 3]},\n"
          "  \"i\": {\"dtype\": \"I8\", \"shape\": [], \"data_offsets\": [3, 4]} }\n";
    write_st_raw(path, hdr, UINT64_MAX, u, 4);
    rc = st_open(&f, path, 0, &e);
    CHECK(rc == 0, "handwritten 2: %s", e.msg);
    if (!rc) {
        CHECK(st_count(f) == 5, "handwritten 2 count");
        const st_tensor *t = st_at(f, 0);
        CHECK(t && strcmp(t->name, "z1") == 0, "st_at keeps header order");
        t = st_find(f, "i");
        CHECK(t && t->ndim == 0 && t->nbytes == 1 && *(const unsigned char *)t->data == 7,
              "0-dim I8");
        t = st_find(f, "z2");
        CHECK(t && t->ndim == 3 && t->nbytes == 0, "zero-size I64");
        st_close(f);
    }
    unlink(path);
}

static void test_st_malformed(void) {
    unsigned char z[64];
    memset(z, 0, sizeof z);
    const int F = TUBELET_ERR_FORMAT;
#define ENT(name, dt, shape, b, e) \
    "\"" name "\":{\"dtype\":\"" dt "\",\"shape\":" shape ",\"data_offsets\":[" #b "," #e "]}"

    /* shorter than 8 bytes */
    {
        const char *path = tpath("short.safetensors");
        write_bytes(path, "\x05\0\0\0", 4);
        for (int mm = 0; mm <= 1; mm++) {
            st_file *f = NULL;
            tb_err e = {{0}};
            int rc = st_open(&f, path, mm, &e);
            CHECK(rc == F && strstr(e.msg, path) && strstr(e.msg, "too short"),
                  "short file: %d %s", rc, e.msg);
        }
        unlink(path);
    }
    /* missing file */
    {
        st_file *f = NULL;
        tb_err e = {{0}};
        const char *path = tpath("does-not-exist.safetensors");
        int rc = st_open(&f, path, 1, &e);
        CHECK(rc == TUBELET_ERR_IO && strstr(e.msg, path), "missing file: %d %s", rc, e.msg);
        rc = st_open(&f, g_dir, 1, &e);
        CHECK(rc == TUBELET_ERR_IO && strstr(e.msg, g_dir), "directory: %d %s", rc, e.msg);
        /* a FIFO must not block the reader */
        const char *fifo = tpath("fifo");
        if (mkfifo(fifo, 0600) == 0) {
            rc = st_open(&f, fifo, 0, &e);
            CHECK(rc == TUBELET_ERR_IO && strstr(e.msg, "not a regular file"), "fifo: %d %s", rc,
                  e.msg);
            npy_array a;
            rc = npy_read(fifo, &a, &e);
            CHECK(rc == TUBELET_ERR_IO && strstr(e.msg, "not a regular file"), "npy fifo: %d %s",
                  rc, e.msg);
            unlink(fifo);
        }
    }
    /* header length larger than the file */
    st_bad_(__FILE__, __LINE__, "hlen_big.safetensors", "{}", 1000, NULL, 0, F, "header length");
    st_bad_(__FILE__, __LINE__, "hlen_huge.safetensors", "{}", UINT64_MAX - 1, NULL, 0, F,
            "header length");
    /* header length over 100 MB (sparse file) */
    {
        const char *path = tpath("hlen_limit.safetensors");
        uint64_t hl = 100000001;
        unsigned char l8[8];
        for (int i = 0; i < 8; i++) l8[i] = (unsigned char)(hl >> (8 * i));
        write_bytes(path, l8, 8);
        CHECK(truncate(path, (off_t)(8 + hl + 16)) == 0, "truncate");
        for (int mm = 0; mm <= 1; mm++) {
            st_file *f = NULL;
            tb_err e = {{0}};
            int rc = st_open(&f, path, mm, &e);
            CHECK(rc == F && strstr(e.msg, path) && strstr(e.msg, "limit"),
                  "header over 100 MB: %d %s", rc, e.msg);
        }
        unlink(path);
    }
    /* header not JSON / not an object / trailing garbage / empty / bad UTF-8 / NUL */
    ST_BAD("notjson.safetensors", "{\"a\": {\"dtype\": ", NULL, 0, F, "not valid JSON");
    ST_BAD("notjson2.safetensors", "hello world", NULL, 0, F, "not valid JSON");
    ST_BAD("empty_header.safetensors", "", NULL, 0, F, "not valid JSON");
    ST_BAD("array.safetensors", "[1, 2, 3]", NULL, 0, F, "expected a JSON object");
    ST_BAD("string.safetensors", "\"x\"", NULL, 0, F, "expected a JSON object");
    ST_BAD("trailing_json.safetensors", "{} {}", NULL, 0, F, "trailing");
    ST_BAD("bad_utf8.safetensors", "{\"\xff\xfe\":{}}", NULL, 0, F, "UTF-8");
    {
        char h[] = "{\"a\":1}  ";
        h[8] = 0; /* a NUL inside the header bytes */
        const char *path = tpath("nul.safetensors");
        unsigned char b[8 + 9];
        for (int i = 0; i < 8; i++) b[i] = (unsigned char)(i == 0 ? 9 : 0);
        memcpy(b + 8, h, 9);
        write_bytes(path, b, sizeof b);
        st_file *f = NULL;
        tb_err e = {{0}};
        int rc = st_open(&f, path, 1, &e);
        CHECK(rc == F && strstr(e.msg, path), "NUL in header: %d %s", rc, e.msg);
        unlink(path);
    }
    /* entry types */
    ST_BAD("entry_not_obj.safetensors", "{\"a\": [1]}", NULL, 0, F, "'a'");
    ST_BAD("no_dtype.safetensors", "{\"a\":{\"shape\":[1],\"data_offsets\":[0,4]}}", z, 4, F,
           "dtype");
    ST_BAD("no_offsets.safetensors", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1]}}", z, 4, F,
           "data_offsets");
    ST_BAD("extra_field.safetensors",
           "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],\"x\":1}}", z, 4, F,
           "unknown field");
    ST_BAD("dup_field.safetensors",
           "{\"a\":{\"dtype\":\"F32\",\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", z,
           4, F, "twice");
    ST_BAD("dtype_num.safetensors", "{\"a\":{\"dtype\":5,\"shape\":[1],\"data_offsets\":[0,4]}}",
           z, 4, F, "dtype");
    /* unknown dtype */
    ST_BAD("dtype_unknown.safetensors", "{" ENT("a", "F8_E4M3", "[4]", 0, 4) "}", z, 4, F,
           "F8_E4M3");
    ST_BAD("dtype_lower.safetensors", "{" ENT("a", "f32", "[1]", 0, 4) "}", z, 4, F, "f32");
    /* shapes */
    ST_BAD("shape_neg.safetensors", "{" ENT("a", "F32", "[-1]", 0, 4) "}", z, 4, F, "negative");
    ST_BAD("shape_frac.safetensors", "{" ENT("a", "F32", "[1.5]", 0, 4) "}", z, 4, F,
           "not an integer");
    ST_BAD("shape_str.safetensors", "{" ENT("a", "F32", "[\"1\"]", 0, 4) "}", z, 4, F,
           "not a number");
    ST_BAD("shape_obj.safetensors", "{" ENT("a", "F32", "{}", 0, 4) "}", z, 4, F, "shape");
    ST_BAD("shape_9dims.safetensors", "{" ENT("a", "F32", "[1,1,1,1,1,1,1,1,1]", 0, 4) "}", z, 4,
           F, "dimensions");
    ST_BAD("shape_overflow.safetensors",
           "{" ENT("a", "F32", "[4294967296,4294967296,4294967296]", 0, 0) "}", NULL, 0, F,
           "overflow");
    ST_BAD("shape_overflow2.safetensors",
           "{" ENT("a", "F64", "[9007199254740992,9007199254740992,0]", 0, 0) "}", NULL, 0, F,
           "overflow");
    ST_BAD("shape_bytes_overflow.safetensors",
           "{" ENT("a", "F64", "[4611686018427387904]", 0, 0) "}", NULL, 0, F, NULL);
    ST_BAD("shape_1e300.safetensors", "{" ENT("a", "F32", "[1e300]", 0, 0) "}", NULL, 0, F,
           "too large");
    /* offsets */
    ST_BAD("off_oob.safetensors", "{" ENT("a", "F32", "[4]", 0, 16) "}", z, 8, F,
           "spans bytes [0, 16) but the data section has 8 bytes");
    ST_BAD("off_oob2.safetensors", "{" ENT("a", "F32", "[1]", 100, 104) "}", z, 8, F,
           "data section");
    ST_BAD("off_rev.safetensors", "{" ENT("a", "F32", "[2]", 8, 0) "}", z, 8, F,
           "end before begin");
    ST_BAD("off_neg.safetensors", "{" ENT("a", "F32", "[1]", -4, 0) "}", z, 8, F, "negative");
    ST_BAD("off_frac.safetensors", "{" ENT("a", "F32", "[1]", 0, 4.5) "}", z, 8, F,
           "not an integer");
    ST_BAD("off_three.safetensors",
           "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4,8]}}", z, 4, F,
           "data_offsets");
    /* byte length != shape x dtype size */
    ST_BAD("len_mismatch.safetensors", "{" ENT("a", "F32", "[3]", 0, 16) "}", z, 16, F,
           "needs 12");
    ST_BAD("len_mismatch_f16.safetensors", "{" ENT("a", "F16", "[4]", 0, 16) "}", z, 16, F,
           "needs 8");
    /* overlap, gap, trailing */
    ST_BAD("overlap.safetensors",
           "{" ENT("a", "F32", "[2]", 0, 8) "," ENT("b", "F32", "[2]", 4, 12) "}", z, 12, F,
           "overlaps");
    ST_BAD("same_range.safetensors",
           "{" ENT("a", "F32", "[2]", 0, 8) "," ENT("b", "F32", "[2]", 0, 8) "}", z, 8, F,
           "overlaps");
    ST_BAD("zero_inside.safetensors",
           "{" ENT("a", "F32", "[2]", 0, 8) "," ENT("b", "F32", "[0]", 4, 4) "}", z, 8, F,
           "overlaps");
    ST_BAD("gap.safetensors",
           "{" ENT("a", "F32", "[2]", 0, 8) "," ENT("b", "F32", "[2]", 12, 20) "}", z, 20, F,
           "gap");
    ST_BAD("gap_start.safetensors", "{" ENT("a", "F32", "[1]", 4, 8) "}", z, 8, F, "gap");
    ST_BAD("trailing.safetensors", "{" ENT("a", "F32", "[2]", 0, 8) "}", z, 12, F, "trailing");
    ST_BAD("trailing_empty.safetensors", "{}", z, 4, F, "trailing");
    /* duplicate names */
    ST_BAD("dup.safetensors",
           "{" ENT("a", "F32", "[2]", 0, 8) "," ENT("a", "F32", "[2]", 8, 16) "}", z, 16, F,
           "'a' appears twice");
    /* metadata */
    ST_BAD("meta_notobj.safetensors", "{\"__metadata__\": [1]}", NULL, 0, F, "__metadata__");
    ST_BAD("meta_num.safetensors", "{\"__metadata__\": {\"k\": 1}}", NULL, 0, F, "'k'");
    ST_BAD("meta_twice.safetensors", "{\"__metadata__\": {}, \"__metadata__\": {}}", NULL, 0, F,
           "twice");
#undef ENT
}

/* F16 reference: value = (-1)^s * 2^(e-15) * (1 + m/1024), subnormal 2^-14 * m/1024. */
static void test_f16_bf16(void) {
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        uint16_t hv = (uint16_t)h;
        float got;
        st_to_f32(&got, &hv, ST_F16, 1);
        int s = (h >> 15) & 1, ex = (h >> 10) & 31, m = h & 1023;
        if (ex == 31) {
            if (m == 0) {
                if (!(isinf(got) && (signbit(got) != 0) == s)) bad++;
            } else {
                /* NaN with the payload kept, quiet bit included */
                if (!isnan(got) || (signbit(got) != 0) != s ||
                    ((fbits(got) >> 13) & 0x3ff) != (uint32_t)m)
                    bad++;
            }
            continue;
        }
        double ref = ex == 0 ? ldexp((double)m, -24) : ldexp(1024.0 + m, ex - 25);
        if (s) ref = -ref;
        if ((double)got != ref || (signbit(got) != 0) != s) bad++;
    }
    CHECK(bad == 0, "F16 -> F32 exhaustive: %d mismatches", bad);
    /* named special values */
    struct {
        uint16_t h;
        uint32_t want_bits;
    } sp[] = {
        {0x0000, 0x00000000u}, {0x8000, 0x80000000u}, {0x0001, 0x33800000u}, /* 2^-24 */
        {0x03ff, 0x387fc000u},                                               /* max subnormal */
        {0x0400, 0x38800000u},                                               /* 2^-14 */
        {0x3c00, 0x3f800000u}, {0x7bff, 0x477fe000u},                         /* 65504 */
        {0x7c00, 0x7f800000u}, {0xfc00, 0xff800000u}, {0x7e00, 0x7fc00000u},
        {0x8001, 0xb3800000u},
    };
    for (size_t i = 0; i < sizeof sp / sizeof sp[0]; i++) {
        float got;
        st_to_f32(&got, &sp[i].h, ST_F16, 1);
        CHECK(fbits(got) == sp[i].want_bits, "F16 0x%04x -> 0x%08x, want 0x%08x", sp[i].h,
              fbits(got), sp[i].want_bits);
    }
    /* BF16 is the top half of F32 */
    bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        uint16_t hv = (uint16_t)h;
        float got;
        st_to_f32(&got, &hv, ST_BF16, 1);
        if (fbits(got) != h << 16) bad++;
    }
    CHECK(bad == 0, "BF16 -> F32 exhaustive: %d mismatches", bad);
    uint16_t bs[4] = {0x3f80, 0x7f80, 0xff80, 0x7fc0};
    float out[4];
    st_to_f32(out, bs, ST_BF16, 4);
    CHECK(out[0] == 1.0f && isinf(out[1]) && out[1] > 0 && isinf(out[2]) && out[2] < 0 &&
              isnan(out[3]),
          "BF16 specials");
    /* unaligned source */
    unsigned char buf[9] = {0, 0x00, 0x3c, 0x00, 0xc0, 0, 0, 0, 0};
    float o2[2];
    st_to_f32(o2, buf + 1, ST_F16, 2);
    CHECK(o2[0] == 1.0f && o2[1] == -2.0f, "F16 from an unaligned source");
    float src[2] = {3.0f, -4.0f};
    memcpy(buf + 1, src, 8);
    st_to_f32(o2, buf + 1, ST_F32, 2);
    CHECK(o2[0] == 3.0f && o2[1] == -4.0f, "F32 from an unaligned source");
}

/* ----------------------------------------------------------------- npy */

static void write_npy_raw(const char *path, int major, const char *dict, const void *data,
                          size_t ndata) {
    size_t dl = strlen(dict);
    size_t pre = major == 1 ? 10 : 12;
    size_t tot = pre + dl + ndata;
    unsigned char *b = malloc(tot);
    memcpy(b, "\x93NUMPY", 6);
    b[6] = (unsigned char)major;
    b[7] = 0;
    b[8] = (unsigned char)(dl & 0xff);
    b[9] = (unsigned char)((dl >> 8) & 0xff);
    if (major != 1) {
        b[10] = (unsigned char)((dl >> 16) & 0xff);
        b[11] = (unsigned char)((dl >> 24) & 0xff);
    }
    memcpy(b + pre, dict, dl);
    if (ndata) memcpy(b + pre + dl, data, ndata);
    write_bytes(path, b, tot);
    free(b);
}

static void npy_bad_(const char *file, int line, const char *name, int major, const char *dict,
                     const void *data, size_t ndata, int code, const char *want) {
    const char *path = tpath(name);
    write_npy_raw(path, major, dict, data, ndata);
    npy_array a;
    tb_err e = {{0}};
    int rc = npy_read(path, &a, &e);
    check_(rc == code, file, line, "%s: status %d, want %d (msg: %s)", name, rc, code, e.msg);
    check_(strstr(e.msg, path) != NULL, file, line, "%s: message lacks the path: %s", name, e.msg);
    if (want)
        check_(strstr(e.msg, want) != NULL, file, line, "%s: message lacks '%s': %s", name, want,
               e.msg);
    check_(a.data == NULL, file, line, "%s: data set on error", name);
    npy_free(&a);
    unlink(path);
}
#define NPY_BAD(name, dict, data, ndata, code, want) \
    npy_bad_(__FILE__, __LINE__, name, 1, dict, data, ndata, code, want)

static void test_npy(void) {
    static const npy_dtype types[4] = {NPY_F32, NPY_F64, NPY_I64, NPY_I32};
    static const size_t isz[4] = {4, 8, 8, 4};
    static const int64_t shapes[4][5] = {{0}, {7}, {2, 1, 3, 2, 2}, {3, 0}};
    static const int ndims[4] = {0, 1, 5, 2};
    unsigned char src[512];
    for (size_t i = 0; i < sizeof src; i++) src[i] = (unsigned char)(i * 37 + 11);
    for (int ti = 0; ti < 4; ti++)
        for (int si = 0; si < 4; si++) {
            char name[64];
            snprintf(name, sizeof name, "rt_%d_%d.npy", ti, si);
            const char *path = tpath(name);
            tb_err e = {{0}};
            int rc = npy_write(path, types[ti], ndims[si], shapes[si], src, &e);
            CHECK(rc == 0, "npy_write %s: %s", name, e.msg);
            size_t n = 0;
            unsigned char *raw = read_bytes(path, &n);
            if (raw && n >= 10) {
                size_t hl = raw[8] | (raw[9] << 8);
                CHECK((10 + hl) % 64 == 0, "%s: data offset %zu not a multiple of 64", name,
                      10 + hl);
                CHECK(raw[10 + hl - 1] == '\n', "%s: header does not end with newline", name);
                CHECK(raw[6] == 1 && raw[7] == 0, "%s: version", name);
            } else {
                CHECK(0, "%s: read back", name);
            }
            free(raw);
            npy_array a;
            rc = npy_read(path, &a, &e);
            CHECK(rc == 0, "npy_read %s: %s", name, e.msg);
            if (!rc) {
                size_t numel = 1;
                for (int d = 0; d < ndims[si]; d++) numel *= (size_t)shapes[si][d];
                CHECK(a.dtype == types[ti] && a.ndim == ndims[si] && a.numel == numel,
                      "%s: dtype/ndim/numel", name);
                for (int d = 0; d < a.ndim; d++)
                    CHECK(a.shape[d] == shapes[si][d], "%s: shape[%d]", name, d);
                CHECK(memcmp(a.data, src, numel * isz[ti]) == 0, "%s: data differs", name);
                CHECK((uintptr_t)a.data % 64 == 0, "%s: data not 64-byte aligned", name);
            }
            npy_free(&a);
            CHECK(a.data == NULL, "npy_free clears");
            unlink(path);
        }
    CHECK(count_tmp_files() == 0, "npy_write left temporary files");

    /* a header exactly as NumPy 1.x writes it, and version 2.0 / 3.0 */
    float d6[6] = {1, 2, 3, 4, 5, 6};
    char dict[256];
    snprintf(dict, sizeof dict, "%-117s\n",
             "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }");
    const char *path = tpath("np1.npy");
    write_npy_raw(path, 1, dict, d6, sizeof d6);
    npy_array a;
    tb_err e = {{0}};
    int rc = npy_read(path, &a, &e);
    CHECK(rc == 0 && a.ndim == 2 && a.shape[0] == 2 && a.shape[1] == 3 &&
              ((float *)a.data)[5] == 6.0f,
          "NumPy-style v1 header: %s", e.msg);
    npy_free(&a);
    for (int major = 2; major <= 3; major++) {
        path = tpath("np2.npy");
        write_npy_raw(path, major,
                      "{\"shape\": (6,), \"fortran_order\": False, \"descr\": \"<f4\"}      \n",
                      d6, sizeof d6);
        rc = npy_read(path, &a, &e);
        CHECK(rc == 0 && a.ndim == 1 && a.shape[0] == 6 && ((float *)a.data)[0] == 1.0f,
              "version %d.0 header, keys reordered: %s", major, e.msg);
        npy_free(&a);
    }
    /* Python 2 long suffix and no trailing comma */
    path = tpath("np_long.npy");
    write_npy_raw(path, 1, "{'descr':'<f4','fortran_order':False,'shape':(2L,3L)}\n", d6,
                  sizeof d6);
    rc = npy_read(path, &a, &e);
    CHECK(rc == 0 && a.ndim == 2 && a.shape[0] == 2, "Python 2 header: %s", e.msg);
    npy_free(&a);

    const int F = TUBELET_ERR_FORMAT;
    NPY_BAD("fortran.npy", "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }\n", d6,
            sizeof d6, F, "fortran_order arrays are not supported");
    NPY_BAD("bigendian.npy", "{'descr': '>f4', 'fortran_order': False, 'shape': (2, 3), }\n", d6,
            sizeof d6, F, "'>f4'");
    NPY_BAD("f16.npy", "{'descr': '<f2', 'fortran_order': False, 'shape': (2,), }\n", d6, 4, F,
            "'<f2'");
    NPY_BAD("pipe.npy", "{'descr': '|i1', 'fortran_order': False, 'shape': (4,), }\n", d6, 4, F,
            "'|i1'");
    /* bool and uint8 are read (VideoMAE pretraining's masks) */
    for (int k = 0; k < 2; k++) {
        path = tpath("mask.npy");
        write_npy_raw(path, 1, k ? "{'descr': '|u1', 'fortran_order': False, 'shape': (2, 2), }\n"
                                 : "{'descr': '|b1', 'fortran_order': False, 'shape': (2, 2), }\n",
                      "\1\0\0\1", 4);
        rc = npy_read(path, &a, &e);
        CHECK(rc == 0 && a.dtype == (k ? NPY_U8 : NPY_BOOL) && a.numel == 4 &&
                  ((uint8_t *)a.data)[3] == 1 && ((uint8_t *)a.data)[1] == 0,
              "%s mask: %s", k ? "uint8" : "bool", e.msg);
        npy_free(&a);
    }
    NPY_BAD("structured.npy",
            "{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (6,), }\n", d6, sizeof d6,
            F, "structured");
    NPY_BAD("truncated.npy", "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }\n", d6,
            10, F, "header says 24 bytes of data, file has 10");
    NPY_BAD("trailing.npy", "{'descr': '<f4', 'fortran_order': False, 'shape': (5,), }\n", d6,
            sizeof d6, F, "trailing");
    NPY_BAD("garbage.npy", "hello, world\n", d6, sizeof d6, F, "malformed");
    NPY_BAD("garbage2.npy", "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), 'x': 1}\n",
            d6, sizeof d6, F, "'x'");
    NPY_BAD("missing_key.npy", "{'descr': '<f4', 'shape': (2, 3), }\n", d6, sizeof d6, F,
            "fortran_order");
    NPY_BAD("dup_key.npy",
            "{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (6,)}\n", d6,
            sizeof d6, F, "twice");
    NPY_BAD("one_no_comma.npy", "{'descr': '<f4', 'fortran_order': False, 'shape': (6)}\n", d6,
            sizeof d6, F, "trailing comma");
    NPY_BAD("neg_dim.npy", "{'descr': '<f4', 'fortran_order': False, 'shape': (-6,)}\n", d6,
            sizeof d6, F, "negative");
    NPY_BAD("fortran_bad.npy", "{'descr': '<f4', 'fortran_order': 0, 'shape': (6,)}\n", d6,
            sizeof d6, F, "fortran_order");
    NPY_BAD("unterminated.npy", "{'descr': '<f4', 'fortran_order': False, 'shape': (6,\n", d6,
            sizeof d6, F, "malformed");
    NPY_BAD("after_dict.npy", "{'descr': '<f4', 'fortran_order': False, 'shape': (6,)} x\n", d6,
            sizeof d6, F, "after the header");
    NPY_BAD("overflow.npy",
            "{'descr': '<f8', 'fortran_order': False, 'shape': (4294967296, 4294967296, 16)}\n",
            d6, sizeof d6, F, "overflow");
    NPY_BAD("nine_dims.npy",
            "{'descr': '<f4', 'fortran_order': False, 'shape': (1,1,1,1,1,1,1,1,1)}\n", d6, 4, F,
            "dimensions");
    npy_bad_(__FILE__, __LINE__, "v4.npy", 4, "{}", NULL, 0, F, "version");
    /* bad magic, short file, header length past the end */
    path = tpath("magic.npy");
    write_bytes(path, "\x93NUMPX\x01\x00\x10\x00{}", 12);
    rc = npy_read(path, &a, &e);
    CHECK(rc == F && strstr(e.msg, path) && strstr(e.msg, "magic"), "bad magic: %d %s", rc, e.msg);
    write_bytes(path, "\x93NU", 3);
    rc = npy_read(path, &a, &e);
    CHECK(rc == F && strstr(e.msg, path), "3-byte file: %d %s", rc, e.msg);
    write_bytes(path, "\x93NUMPY\x01\x00\xff\x00{}", 12);
    rc = npy_read(path, &a, &e);
    CHECK(rc == F && strstr(e.msg, path) && strstr(e.msg, "header length"),
          "header length past end: %d %s", rc, e.msg);
    unlink(path);
    rc = npy_read(tpath("nope.npy"), &a, &e);
    CHECK(rc == TUBELET_ERR_IO && strstr(e.msg, "nope.npy"), "missing npy: %d %s", rc, e.msg);

    /* writer argument checks */
    int64_t negs[1] = {-1};
    rc = npy_write(tpath("w.npy"), NPY_F32, 1, negs, d6, &e);
    CHECK(rc == TUBELET_ERR_ARG && !file_exists(tpath("w.npy")), "npy_write negative shape");
    rc = npy_write("/nonexistent-dir-tubelet/x.npy", NPY_F32, 0, NULL, d6, &e);
    CHECK(rc == TUBELET_ERR_IO && strstr(e.msg, "/nonexistent-dir-tubelet/x.npy"),
          "npy_write bad dir: %d %s", rc, e.msg);
}

/* --------------------------------------------------------------- weights */

typedef struct {
    char names[16][64];
    int n;
} name_list;

static void collect(void *user, const char *name) {
    name_list *l = user;
    if (l->n < 16) snprintf(l->names[l->n++], 64, "%s", name);
}

static int list_has(const name_list *l, const char *name) {
    for (int i = 0; i < l->n; i++)
        if (strcmp(l->names[i], name) == 0) return 1;
    return 0;
}

static void make_dir(const char *name) {
    if (mkdir(tpath(name), 0755) != 0) {
        printf("FATAL: mkdir %s: %s\n", tpath(name), strerror(errno));
        exit(2);
    }
}

static void write_index(const char *dir, const char *json) {
    char p[4200];
    snprintf(p, sizeof p, "%s/model.safetensors.index.json", tpath(dir));
    write_bytes(p, json, strlen(json));
}

static void weights_bad_(const char *file, int line, const char *dir, int code, const char *want1,
                         const char *want2) {
    for (int mm = 0; mm <= 1; mm++) {
        tb_weights *w = (tb_weights *)0x1;
        tb_err e = {{0}};
        int rc = tb_weights_open(&w, tpath(dir), mm, &e);
        check_(rc == code, file, line, "weights %s (mmap=%d): status %d, want %d (%s)", dir, mm,
               rc, code, e.msg);
        check_(w == NULL, file, line, "weights %s: *out not NULL on error", dir);
        check_(strstr(e.msg, tpath(dir)) != NULL, file, line, "weights %s: no dir in message: %s",
               dir, e.msg);
        if (want1)
            check_(strstr(e.msg, want1) != NULL, file, line, "weights %s: lacks '%s': %s", dir,
                   want1, e.msg);
        if (want2)
            check_(strstr(e.msg, want2) != NULL, file, line, "weights %s: lacks '%s': %s", dir,
                   want2, e.msg);
        if (rc == 0) tb_weights_free(w);
    }
}
#define WEIGHTS_BAD(dir, code, w1, w2) weights_bad_(__FILE__, __LINE__, dir, code, w1, w2)

static void test_weights(void) {
    float a[4] = {1, 2, 3, 4};
    uint16_t h[3] = {0x3c00, 0xc000, 0x3800}; /* 1, -2, 0.5 */
    uint16_t bf[2] = {0x3f80, 0xc040};        /* 1, -3 */
    int64_t iv[1] = {5};
    st_tensor ts[4] = {
        {.name = "enc.a.weight", .dtype = ST_F32, .ndim = 2, .shape = {2, 2}, .nbytes = 16,
         .data = a},
        {.name = "enc.h", .dtype = ST_F16, .ndim = 1, .shape = {3}, .nbytes = 6, .data = h},
        {.name = "enc.bf", .dtype = ST_BF16, .ndim = 1, .shape = {2}, .nbytes = 4, .data = bf},
        {.name = "pos_ids", .dtype = ST_I64, .ndim = 1, .shape = {1}, .nbytes = 8, .data = iv},
    };
    tb_err e = {{0}};
    int rc;

    /* single file */
    make_dir("single");
    char p[4200];
    snprintf(p, sizeof p, "%s/model.safetensors", tpath("single"));
    rc = st_write(p, ts, 4, &e);
    CHECK(rc == 0, "write single: %s", e.msg);
    for (int mm = 0; mm <= 1; mm++) {
        tb_weights *w = NULL;
        rc = tb_weights_open(&w, tpath("single"), mm, &e);
        CHECK(rc == 0, "open single (mmap=%d): %s", mm, e.msg);
        if (rc) continue;
        const float *x = NULL, *x2 = NULL;
        int64_t s22[2] = {2, 2}, s4[1] = {4}, s3[1] = {3}, s2[1] = {2}, s1[1] = {1};
        CHECK(tb_weights_has(w, "enc.a.weight") && !tb_weights_has(w, "zzz"), "has");
        rc = tb_weights_get(w, "enc.a.weight", 2, s22, &x, &e);
        CHECK(rc == 0 && x && x[0] == 1 && x[3] == 4, "get F32: %s", e.msg);
        rc = tb_weights_get(w, "enc.a.weight", 2, s22, &x2, &e);
        CHECK(rc == 0 && x2 == x, "get F32 twice returns the same pointer");
        size_t mapped = 0, owned = 1;
        tb_weights_bytes(w, &mapped, &owned);
        CHECK(owned == 0, "aligned F32 is used in place (owned %zu)", owned);
        CHECK(mapped == 16 + 6 + 4 + 8, "mapped bytes %zu", mapped);
        /* wrong shape */
        rc = tb_weights_get(w, "enc.a.weight", 1, s4, &x, &e);
        CHECK(rc == TUBELET_ERR_SHAPE && strstr(e.msg, "[2, 2]") && strstr(e.msg, "[4]") &&
                  strstr(e.msg, "enc.a.weight") && strstr(e.msg, "model.safetensors"),
              "wrong shape: %d %s", rc, e.msg);
        int64_t s23[2] = {2, 3};
        rc = tb_weights_get(w, "enc.a.weight", 2, s23, &x, &e);
        CHECK(rc == TUBELET_ERR_SHAPE && strstr(e.msg, "[2, 3]"), "wrong dim: %d %s", rc, e.msg);
        /* missing */
        rc = tb_weights_get(w, "enc.missing.bias", 1, s4, &x, &e);
        CHECK(rc == TUBELET_ERR_MISSING && strstr(e.msg, "'enc.missing.bias'") &&
                  strstr(e.msg, tpath("single")),
              "missing tensor: %d %s", rc, e.msg);
        /* F16 converted */
        rc = tb_weights_get(w, "enc.h", 1, s3, &x, &e);
        CHECK(rc == 0 && x && x[0] == 1.0f && x[1] == -2.0f && x[2] == 0.5f, "get F16: %s", e.msg);
        CHECK(x && (uintptr_t)x % 4 == 0, "F16 copy aligned");
        rc = tb_weights_get(w, "enc.h", 1, s3, &x2, &e);
        CHECK(rc == 0 && x2 == x, "F16 conversion cached");
        tb_weights_bytes(w, &mapped, &owned);
        CHECK(owned == 12, "owned bytes after F16 %zu", owned);
        /* I64 rejected */
        rc = tb_weights_get(w, "pos_ids", 1, s1, &x, &e);
        CHECK(rc == TUBELET_ERR_FORMAT && strstr(e.msg, "I64") && strstr(e.msg, "pos_ids"),
              "I64: %d %s", rc, e.msg);
        /* unused: enc.bf and pos_ids */
        name_list l = {0};
        tb_weights_each_unused(w, collect, &l);
        CHECK(l.n == 2 && list_has(&l, "enc.bf") && list_has(&l, "pos_ids"),
              "unused list (n=%d)", l.n);
        rc = tb_weights_get(w, "enc.bf", 1, s2, &x, &e);
        CHECK(rc == 0 && x[0] == 1.0f && x[1] == -3.0f, "get BF16: %s", e.msg);
        l.n = 0;
        tb_weights_each_unused(w, collect, &l);
        CHECK(l.n == 1 && list_has(&l, "pos_ids"), "unused after BF16 (n=%d)", l.n);
        tb_weights_free(w);
    }

    /* unaligned F32: a header whose length makes the data section start at an odd offset */
    make_dir("unaligned");
    {
        const char *hdr = "{\"u\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}";
        CHECK((8 + strlen(hdr)) % 4 != 0, "test header must misalign");
        snprintf(p, sizeof p, "%s/model.safetensors", tpath("unaligned"));
        write_st_raw(p, hdr, UINT64_MAX, a, sizeof a);
        for (int mm = 0; mm <= 1; mm++) {
            tb_weights *w = NULL;
            rc = tb_weights_open(&w, tpath("unaligned"), mm, &e);
            CHECK(rc == 0, "open unaligned: %s", e.msg);
            if (rc) continue;
            const float *x = NULL, *x2 = NULL;
            int64_t s4[1] = {4};
            rc = tb_weights_get(w, "u", 1, s4, &x, &e);
            CHECK(rc == 0 && x && (uintptr_t)x % 4 == 0 && x[0] == 1 && x[3] == 4,
                  "unaligned F32 copied: %s", e.msg);
            rc = tb_weights_get(w, "u", 1, s4, &x2, &e);
            CHECK(rc == 0 && x2 == x, "unaligned F32 copy cached");
            size_t mapped, owned;
            tb_weights_bytes(w, &mapped, &owned);
            CHECK(owned == 16, "unaligned owned bytes %zu", owned);
            tb_weights_free(w);
        }
    }

    /* sharded: index + 2 shards (and a stale model.safetensors the index overrides) */
    make_dir("sharded");
    snprintf(p, sizeof p, "%s/model-00001-of-00002.safetensors", tpath("sharded"));
    rc = st_write(p, ts, 2, &e);
    CHECK(rc == 0, "write shard 1: %s", e.msg);
    snprintf(p, sizeof p, "%s/model-00002-of-00002.safetensors", tpath("sharded"));
    rc = st_write(p, ts + 2, 2, &e);
    CHECK(rc == 0, "write shard 2: %s", e.msg);
    snprintf(p, sizeof p, "%s/model.safetensors", tpath("sharded"));
    rc = st_write(p, ts + 3, 1, &e);
    CHECK(rc == 0, "write stale single: %s", e.msg);
    write_index("sharded",
                "{\"metadata\": {\"total_size\": 34},\n \"weight_map\": {\n"
                "  \"enc.a.weight\": \"model-00001-of-00002.safetensors\",\n"
                "  \"enc.h\": \"model-00001-of-00002.safetensors\",\n"
                "  \"enc.bf\": \"model-00002-of-00002.safetensors\",\n"
                "  \"pos_ids\": \"model-00002-of-00002.safetensors\"}}\n");
    for (int mm = 0; mm <= 1; mm++) {
        tb_weights *w = NULL;
        char dirslash[4300];
        snprintf(dirslash, sizeof dirslash, "%s/", tpath("sharded"));
        rc = tb_weights_open(&w, mm ? tpath("sharded") : dirslash, mm, &e);
        CHECK(rc == 0, "open sharded (mmap=%d): %s", mm, e.msg);
        if (rc) continue;
        const float *x = NULL;
        int64_t s22[2] = {2, 2}, s2[1] = {2};
        rc = tb_weights_get(w, "enc.a.weight", 2, s22, &x, &e);
        CHECK(rc == 0 && x[2] == 3, "sharded get from shard 1: %s", e.msg);
        rc = tb_weights_get(w, "enc.bf", 1, s2, &x, &e);
        CHECK(rc == 0 && x[1] == -3.0f, "sharded get from shard 2: %s", e.msg);
        rc = tb_weights_get(w, "nope", 1, s2, &x, &e);
        CHECK(rc == TUBELET_ERR_MISSING && strstr(e.msg, "'nope'") &&
                  strstr(e.msg, "model.safetensors.index.json"),
              "sharded missing: %d %s", rc, e.msg);
        rc = tb_weights_get(w, "enc.bf", 2, s22, &x, &e);
        CHECK(rc == TUBELET_ERR_SHAPE && strstr(e.msg, "model-00002-of-00002.safetensors"),
              "sharded wrong shape names the shard: %s", e.msg);
        name_list l = {0};
        tb_weights_each_unused(w, collect, &l);
        CHECK(l.n == 2 && list_has(&l, "enc.h") && list_has(&l, "pos_ids"),
              "sharded unused (n=%d)", l.n);
        tb_weights_free(w);
    }

    /* index problems */
    make_dir("missing_shard");
    snprintf(p, sizeof p, "%s/model-00001-of-00002.safetensors", tpath("missing_shard"));
    st_write(p, ts, 2, &e);
    write_index("missing_shard",
                "{\"weight_map\": {\"enc.a.weight\": \"model-00001-of-00002.safetensors\","
                "\"enc.h\": \"model-00001-of-00002.safetensors\","
                "\"enc.bf\": \"model-00002-of-00002.safetensors\"}}");
    WEIGHTS_BAD("missing_shard", TUBELET_ERR_IO, "model-00002-of-00002.safetensors", NULL);

    make_dir("slash_shard");
    write_index("slash_shard", "{\"weight_map\": {\"a\": \"../single/model.safetensors\"}}");
    WEIGHTS_BAD("slash_shard", TUBELET_ERR_FORMAT, "../single/model.safetensors", "plain file");
    make_dir("abs_shard");
    write_index("abs_shard", "{\"weight_map\": {\"a\": \"/etc/passwd\"}}");
    WEIGHTS_BAD("abs_shard", TUBELET_ERR_FORMAT, "/etc/passwd", NULL);
    make_dir("dotdot_shard");
    write_index("dotdot_shard", "{\"weight_map\": {\"a\": \"..\"}}");
    WEIGHTS_BAD("dotdot_shard", TUBELET_ERR_FORMAT, "plain file", NULL);

    make_dir("not_in_shard");
    snprintf(p, sizeof p, "%s/s1.safetensors", tpath("not_in_shard"));
    st_write(p, ts, 2, &e);
    write_index("not_in_shard",
                "{\"weight_map\": {\"enc.a.weight\": \"s1.safetensors\", \"enc.h\": "
                "\"s1.safetensors\", \"enc.bf\": \"s1.safetensors\"}}");
    WEIGHTS_BAD("not_in_shard", TUBELET_ERR_FORMAT, "'enc.bf'", NULL);

    make_dir("unlisted");
    snprintf(p, sizeof p, "%s/s1.safetensors", tpath("unlisted"));
    st_write(p, ts, 2, &e);
    write_index("unlisted", "{\"weight_map\": {\"enc.a.weight\": \"s1.safetensors\"}}");
    WEIGHTS_BAD("unlisted", TUBELET_ERR_FORMAT, "'enc.h'", "does not list");

    make_dir("wrong_shard");
    snprintf(p, sizeof p, "%s/s1.safetensors", tpath("wrong_shard"));
    st_write(p, ts, 2, &e);
    snprintf(p, sizeof p, "%s/s2.safetensors", tpath("wrong_shard"));
    st_write(p, ts + 2, 2, &e);
    write_index("wrong_shard",
                "{\"weight_map\": {\"enc.a.weight\": \"s2.safetensors\", \"enc.h\": "
                "\"s1.safetensors\", \"enc.bf\": \"s2.safetensors\", \"pos_ids\": "
                "\"s2.safetensors\"}}");
    WEIGHTS_BAD("wrong_shard", TUBELET_ERR_FORMAT, "'enc.a.weight'", "s1.safetensors");

    make_dir("dup_shards");
    snprintf(p, sizeof p, "%s/s1.safetensors", tpath("dup_shards"));
    st_write(p, ts, 2, &e);
    snprintf(p, sizeof p, "%s/s2.safetensors", tpath("dup_shards"));
    st_write(p, ts + 1, 2, &e);
    write_index("dup_shards",
                "{\"weight_map\": {\"enc.a.weight\": \"s1.safetensors\", \"enc.h\": "
                "\"s1.safetensors\", \"enc.bf\": \"s2.safetensors\"}}");
    WEIGHTS_BAD("dup_shards", TUBELET_ERR_FORMAT, "'enc.h'", "both");

    make_dir("dup_index");
    snprintf(p, sizeof p, "%s/s1.safetensors", tpath("dup_index"));
    st_write(p, ts, 1, &e);
    write_index("dup_index",
                "{\"weight_map\": {\"enc.a.weight\": \"s1.safetensors\", \"enc.a.weight\": "
                "\"s1.safetensors\"}}");
    WEIGHTS_BAD("dup_index", TUBELET_ERR_FORMAT, "twice", NULL);

    make_dir("bad_index");
    write_index("bad_index", "{\"weight_map\": ");
    WEIGHTS_BAD("bad_index", TUBELET_ERR_FORMAT, "JSON", "index.json");
    make_dir("no_map");
    write_index("no_map", "{\"metadata\": {}}");
    WEIGHTS_BAD("no_map", TUBELET_ERR_FORMAT, "weight_map", NULL);
    make_dir("map_num");
    write_index("map_num", "{\"weight_map\": {\"a\": 3}}");
    WEIGHTS_BAD("map_num", TUBELET_ERR_FORMAT, "'a'", NULL);

    make_dir("bad_shard");
    snprintf(p, sizeof p, "%s/s1.safetensors", tpath("bad_shard"));
    write_bytes(p, "abc", 3);
    write_index("bad_shard", "{\"weight_map\": {\"a\": \"s1.safetensors\"}}");
    WEIGHTS_BAD("bad_shard", TUBELET_ERR_FORMAT, "too short", "s1.safetensors");

    make_dir("bad_single");
    snprintf(p, sizeof p, "%s/model.safetensors", tpath("bad_single"));
    write_st_raw(p, "[]", UINT64_MAX, NULL, 0);
    WEIGHTS_BAD("bad_single", TUBELET_ERR_FORMAT, "model.safetensors", NULL);

    make_dir("empty_dir");
    WEIGHTS_BAD("empty_dir", TUBELET_ERR_IO,
                "no model.safetensors or model.safetensors.index.json", "Hugging Face");
}

int main(int argc, char **argv) {
    check_cases(argc, argv);
    const char *base = getenv("TMPDIR");
    if (!base || !*base) base = "/tmp";
    snprintf(g_dir, sizeof g_dir, "%s/tubelet_test_io.XXXXXX", base);
    if (!mkdtemp(g_dir)) {
        printf("FATAL: mkdtemp %s: %s\n", g_dir, strerror(errno));
        return 2;
    }
    CASE(test_st_roundtrip());
    CASE(test_st_handwritten());
    CASE(test_st_malformed());
    CASE(test_f16_bf16());
    CASE(test_npy());
    CASE(test_weights());
    nftw(g_dir, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
    return check_done();
}
