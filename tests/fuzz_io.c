/* libFuzzer harness for the file readers in src/io.
 *
 * Each input is written to a temporary file and read as safetensors (read and mmap modes) and as
 * .npy; accepted tensors are read in full so that any bad offset shows up under ASan. The input
 * is also placed as model.safetensors in a model directory (tb_weights_open + tb_weights_get on
 * every tensor) and as model.safetensors.index.json next to a fixed valid shard.
 *
 * Build: clang -g -O1 -fsanitize=fuzzer,address,undefined -Iinclude -Isrc src/common.c
 *        src/io/safetensors.c src/io/npy.c src/io/weights.c tests/fuzz_io.c -lcjson -lm
 * Run:   ./fuzz_io -max_total_time=60 corpus_dir/ */
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
#include "fuzz.h"
#include "io/npy.h"
#include "io/safetensors.h"
#include "io/weights.h"

static char g_dir[1024];     /* temp root */
static char g_file[1100];    /* g_dir/in */
static char g_sdir[1100];    /* g_dir/single */
static char g_single[1200];  /* g_dir/single/model.safetensors */
static char g_xdir[1100];    /* g_dir/sharded */
static char g_index[1200];   /* g_dir/sharded/model.safetensors.index.json */
static char g_shard[1200];   /* g_dir/sharded/s.safetensors */

static void cleanup(void) {
    unlink(g_file);
    unlink(g_single);
    unlink(g_index);
    unlink(g_shard);
    rmdir(g_sdir);
    rmdir(g_xdir);
    rmdir(g_dir);
}

static void put(const char *path, const uint8_t *data, size_t size) { fuzz_put(path, data, size); }

static void setup(void) {
    const char *base = getenv("TMPDIR");
    if (!base || !*base) base = "/tmp";
    snprintf(g_dir, sizeof g_dir, "%s/tubelet_fuzz_io.XXXXXX", base);
    if (!mkdtemp(g_dir)) abort();
    snprintf(g_file, sizeof g_file, "%s/in", g_dir);
    snprintf(g_sdir, sizeof g_sdir, "%s/single", g_dir);
    snprintf(g_single, sizeof g_single, "%s/model.safetensors", g_sdir);
    snprintf(g_xdir, sizeof g_xdir, "%s/sharded", g_dir);
    snprintf(g_index, sizeof g_index, "%s/model.safetensors.index.json", g_xdir);
    snprintf(g_shard, sizeof g_shard, "%s/s.safetensors", g_xdir);
    if (mkdir(g_sdir, 0700) || mkdir(g_xdir, 0700)) abort();
    float a[2] = {1, 2};
    st_tensor t = {.name = "a", .dtype = ST_F32, .ndim = 1, .shape = {2}, .nbytes = 8, .data = a};
    tb_err e;
    if (st_write(g_shard, &t, 1, &e)) abort();
    atexit(cleanup);
}

static volatile unsigned sink;

static void touch(const void *p, size_t n) {
    const unsigned char *b = p;
    unsigned s = 0;
    for (size_t i = 0; i < n; i++) s += b[i];
    sink += s;
}

static void check_err(const tb_err *e, const char *path) {
    /* every error message names the file */
    if (!memchr(e->msg, 0, sizeof e->msg)) abort();
    if (!strstr(e->msg, path)) abort();
}

static void count_one(void *user, const char *name) {
    (void)name;
    (*(int *)user)++;
}

static int count_unused(const tb_weights *w) {
    int n = 0;
    tb_weights_each_unused(w, count_one, &n);
    return n;
}

/* Opens dir as a model directory and checks what it holds against the file it was built from.
 * A single model.safetensors exposes exactly the tensors of that file. An index exposes the
 * tensors of the shards its weight_map names, and a named shard must be listed in full; the only
 * shard in the sharded directory is g_shard, so an accepted index exposes either every tensor of
 * g_shard or none (an empty weight_map is a valid, empty model). */
static void weights_all(const char *dir) {
    int single = strstr(dir, "single") != NULL;
    for (int mm = 0; mm <= 1; mm++) {
        tb_weights *w = NULL;
        tb_err e = {{0}};
        if (tb_weights_open(&w, dir, mm, &e) != TUBELET_OK) {
            if (w) abort();
            check_err(&e, dir);
            continue;
        }
        int n_w = count_unused(w);
        st_file *f = NULL;
        if (st_open(&f, single ? g_single : g_shard, mm, &e) != TUBELET_OK) {
            /* the single file was accepted by tb_weights_open, the shard is ours: both open */
            abort();
        }
        int n_f = st_count(f);
        int listed = n_w > 0;
        if (single ? n_w != n_f : (listed && n_w != n_f)) abort();
        int got = 0;
        /* look up every tensor with its own shape (via the safetensors view) */
        for (int i = 0; i < n_f; i++) {
            const st_tensor *t = st_at(f, i);
            const float *x = NULL;
            if (tb_weights_has(w, t->name) != (single || listed)) abort();
            int rc = tb_weights_get(w, t->name, t->ndim, t->shape, &x, &e);
            if (rc == TUBELET_OK) {
                touch(x, t->nbytes / st_dtype_size(t->dtype) * sizeof(float));
                if ((uintptr_t)x % 4) abort();
                got++;
            } else if (rc != (single || listed ? TUBELET_ERR_FORMAT : TUBELET_ERR_MISSING)) {
                abort();
            }
        }
        /* a tensor returned by tb_weights_get is no longer reported as unused */
        if (count_unused(w) != n_w - got) abort();
        st_close(f);
        size_t m, o;
        tb_weights_bytes(w, &m, &o);
        tb_weights_free(w);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!g_dir[0]) setup();
    put(g_file, data, size);

    for (int mm = 0; mm <= 1; mm++) {
        st_file *f = NULL;
        tb_err e = {{0}};
        int rc = st_open(&f, g_file, mm, &e);
        if (rc != TUBELET_OK) {
            if (f) abort();
            check_err(&e, g_file);
            continue;
        }
        for (int i = 0; i < st_count(f); i++) {
            const st_tensor *t = st_at(f, i);
            if (st_find(f, t->name) != t) abort();
            touch(t->data, t->nbytes);
            if (t->dtype == ST_F32 || t->dtype == ST_F16 || t->dtype == ST_BF16) {
                size_t n = t->nbytes / st_dtype_size(t->dtype);
                float *buf = malloc(n * sizeof(float) + 1);
                if (!buf) abort();
                st_to_f32(buf, t->data, t->dtype, n);
                touch(buf, n * sizeof(float));
                free(buf);
            }
        }
        st_close(f);
    }

    npy_array a;
    tb_err e = {{0}};
    if (npy_read(g_file, &a, &e) == TUBELET_OK) {
        size_t isz = a.dtype == NPY_F32 || a.dtype == NPY_I32 ? 4 : 8;
        touch(a.data, a.numel * isz);
    } else {
        if (a.data) abort();
        check_err(&e, g_file);
    }
    npy_free(&a);

    put(g_single, data, size);
    weights_all(g_sdir);
    if (size > 0 && data[0] == '{') {
        put(g_index, data, size);
        weights_all(g_xdir);
        unlink(g_index);
    }
    return 0;
}
