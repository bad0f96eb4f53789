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

/* The one way a message leaves the library: copies e's message into the caller's (err, errlen)
 * when rc is a failure (err may be NULL), and returns rc.
 * Use as: return tb_err_out(rc, &e, err, errlen); */
int tb_err_out(int rc, const tb_err *e, char *err, size_t errlen);

/* Prefix an existing message, e.g. with the file name: "model.safetensors: <old msg>". */
int tb_prefix(tb_err *e, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Warnings go through a caller-supplied callback (never to stderr directly). */
typedef struct {
    tubelet_log_fn fn;
    void *user;
} tb_log;
void tb_warn(const tb_log *log, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The same at the info level (2): news, not a problem (the Python package drops them). */
void tb_info(const tb_log *log, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Overflow-checked size arithmetic: returns 0 on overflow. */
int tb_mul_ok(size_t a, size_t b, size_t *out);

/* 64-byte aligned allocation (for SIMD and GEMM), zeroed. Free with tb_free. */
void *tb_alloc(size_t bytes);
void tb_free(void *p);

/* Opens path read-only if it is a regular file (never blocks on a FIFO): the descriptor, or
 * minus a status. tb_check_regular: the same test without opening. */
int tb_open_regular(const char *path, tb_err *e);
int tb_check_regular(const char *path, tb_err *e);

/* Every file tubelet writes is written completely under a temporary name beside it
 * (path.tmp.XXXXXX), fsynced, then renamed into place, and the directory synced: readers see the
 * old file or the new one, never a part, and a failure leaves nothing behind.
 *   tb_atomic_file f;
 *   if (tb_atomic_open(&f, path, e)) return ...;
 *   tb_atomic_put(&f, a, na); tb_atomic_put(&f, b, nb);   (the first error is kept)
 *   return tb_atomic_commit(&f, e);                       (or tb_atomic_abort(&f))
 * tb_atomic_write does the three for one buffer. */
typedef struct {
    const char *path;
    char *tmp;
    int fd, err;
} tb_atomic_file;
int tb_atomic_open(tb_atomic_file *f, const char *path, tb_err *e);
void tb_atomic_put(tb_atomic_file *f, const void *data, size_t len);
int tb_atomic_commit(tb_atomic_file *f, tb_err *e);
void tb_atomic_abort(tb_atomic_file *f);
int tb_atomic_write(const char *path, const void *data, size_t len, tb_err *e);
/* printf into an atomic file (text files: lists, manifests). */
void tb_atomic_printf(tb_atomic_file *f, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* The one rename of the library: from → to (a file over a file, a directory over a missing or
 * empty one, as rename(2)), then to's directory synced. On failure from is left in place and
 * the message names both. Files written by another library (FFmpeg's encoder writes a clip to
 * its own temporary name) and the checkpoint swap (train/checkpoint.c) go through it. */
int tb_rename(const char *from, const char *to, tb_err *e);
/* Flushes the file system holding dir (syncfs), so that what was written under it reaches the
 * disk before whatever is written next (a list naming those files, a rename publishing them). */
int tb_sync_tree(const char *dir, tb_err *e);
/* fsync of a directory: the renames and new names in it become durable (errors ignored: a
 * best effort after the data itself was synced). */
void tb_fsync_dir(const char *dir);

/* A directory written whole under a temporary name beside path (path.tmp-XXXXXX), then renamed
 * into place: readers never see a half directory.
 *   tb_atomic_dir d;
 *   if (tb_atomic_dir_open(&d, path, e)) return ...;
 *   ... write files under d.tmp ...
 *   return tb_atomic_dir_commit(&d, e);       (or tb_atomic_dir_abort(&d): the tree is removed)
 * path must not exist, or be an empty directory (removed at the commit; TUBELET_ERR_IO if another
 * program filled it meanwhile, and the new tree is then kept under d.tmp). */
typedef struct {
    const char *path;
    char *tmp;
} tb_atomic_dir;
int tb_atomic_dir_open(tb_atomic_dir *d, const char *path, tb_err *e);
int tb_atomic_dir_commit(tb_atomic_dir *d, tb_err *e);
void tb_atomic_dir_abort(tb_atomic_dir *d);

/* A seeded hash of n bytes. Tables keyed by what a file or a request holds take their seed from
 * tb_hash_seed (random; salt only matters when the kernel has no entropy yet), so that no input
 * can be made of keys that all collide and turn lookups quadratic. */
uint64_t tb_hash_bytes(uint64_t seed, const void *p, size_t n);
uint64_t tb_hash_seed(const void *salt);

/* Strings held elsewhere (the caller keeps each alive while the map is), each mapped to an int:
 * the index of what it names in the caller's array. Open addressing, constant time per lookup
 * whatever the number of names (a linear scan per name made a file of 80,000 names take minutes),
 * and a random seed per map, so that no file can be made of names that all collide.
 *   tb_strmap m = {0};
 *   int had = tb_strmap_add(&m, name, i);   (i: added; another value: name was there; -1: no memory)
 *   int j = tb_strmap_get(&m, name);        (-1: absent)
 *   tb_strmap_free(&m); */
typedef struct {
    struct tb_strmap_slot *slot;
    size_t cap, n;
    uint64_t seed;
} tb_strmap;
int tb_strmap_add(tb_strmap *m, const char *key, int value);
int tb_strmap_get(const tb_strmap *m, const char *key);
void tb_strmap_free(tb_strmap *m);

/* Bytes of memory this process can have: physical memory, or the cgroup's limit if lower. */
int64_t tb_machine_memory(void);

/* A JSON number that reads back as exactly v (cJSON alone keeps 15 digits). */
struct cJSON;
struct cJSON *tb_json_number(double v);

/* Reads a whole small file (config.json and the like) into a NUL-terminated buffer. */
int tb_read_file(const char *path, char **out, size_t *len, size_t max_len, tb_err *e);

#endif
