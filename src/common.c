#include "common.h"

#include <cjson/cJSON.h>

#include <errno.h>
#include <math.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "rng.h"

int tb_fail(tb_err *e, int code, const char *fmt, ...) {
    if (e) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(e->msg, sizeof e->msg, fmt, ap);
        va_end(ap);
    }
    return code;
}

int tb_err_out(int rc, const tb_err *e, char *err, size_t errlen) {
    if (rc && err && errlen) snprintf(err, errlen, "%s", e->msg);
    return rc;
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

static void log_at(const tb_log *log, int level, const char *fmt, va_list ap) {
    if (!log || !log->fn) return;
    char msg[1024];
    vsnprintf(msg, sizeof msg, fmt, ap);
    log->fn(log->user, level, msg);
}

void tb_warn(const tb_log *log, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    log_at(log, 1, fmt, ap);
    va_end(ap);
}

void tb_info(const tb_log *log, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    log_at(log, 2, fmt, ap);
    va_end(ap);
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

/* Opens path for reading only if it is a regular file: a FIFO would block the open or the read
 * forever, a directory or device is never what was meant. O_NONBLOCK makes the open of a FIFO
 * return at once so that fstat can refuse it. */
int tb_open_regular(const char *path, tb_err *e) {
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return -tb_fail(e, TUBELET_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return -tb_fail(e, TUBELET_ERR_IO, "%s: not a regular file (a %s); give a file", path,
                        S_ISDIR(st.st_mode) ? "directory" : S_ISFIFO(st.st_mode) ? "FIFO"
                                                                                   : "device");
    }
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    return fd;
}

int tb_check_regular(const char *path, tb_err *e) {
    struct stat st;
    if (stat(path, &st) != 0)
        return tb_fail(e, TUBELET_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    if (!S_ISREG(st.st_mode))
        return tb_fail(e, TUBELET_ERR_IO, "%s: not a regular file (a %s); give a file", path,
                       S_ISDIR(st.st_mode) ? "directory" : S_ISFIFO(st.st_mode) ? "FIFO" : "device");
    return TUBELET_OK;
}

int tb_read_file(const char *path, char **out, size_t *len, size_t max_len, tb_err *e) {
    *out = NULL;
    int fd = tb_open_regular(path, e);
    if (fd < 0) return -fd;
    struct stat st;
    if (fstat(fd, &st) != 0 || (uint64_t)st.st_size > max_len) {
        close(fd);
        return tb_fail(e, TUBELET_ERR_FORMAT, "%s: file too large (%lld bytes, limit %zu)", path,
                       (long long)st.st_size, max_len);
    }
    size_t n = (size_t)st.st_size, got = 0;
    char *buf = malloc(n + 1);
    if (!buf) {
        close(fd);
        return tb_fail(e, TUBELET_ERR_MEMORY, "%s: out of memory", path);
    }
    while (got < n) {
        ssize_t r = read(fd, buf + got, n - got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        got += (size_t)r;
    }
    close(fd);
    if (got != n) {
        free(buf);
        return tb_fail(e, TUBELET_ERR_IO, "%s: read failed (the file changed while read?)", path);
    }
    buf[n] = 0;
    *out = buf;
    if (len) *len = n;
    return TUBELET_OK;
}

int tb_atomic_open(tb_atomic_file *f, const char *path, tb_err *e) {
    size_t plen = strlen(path);
    f->path = path, f->fd = -1, f->err = 0;
    f->tmp = malloc(plen + 12);
    if (!f->tmp) return tb_fail(e, TUBELET_ERR_MEMORY, "%s: out of memory", path);
    memcpy(f->tmp, path, plen);
    memcpy(f->tmp + plen, ".tmp.XXXXXX", 12);
    f->fd = mkstemp(f->tmp);
    if (f->fd < 0) {
        int rc = tb_fail(e, TUBELET_ERR_IO, "%s: cannot create a temporary file beside it: %s",
                         path, strerror(errno));
        free(f->tmp), f->tmp = NULL;
        return rc;
    }
    return TUBELET_OK;
}

void tb_atomic_put(tb_atomic_file *f, const void *data, size_t len) {
    const char *p = data;
    size_t done = 0;
    while (!f->err && done < len) {
        ssize_t w = write(f->fd, p + done, len - done);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) f->err = w < 0 ? errno : EIO;
        else done += (size_t)w;
    }
}

void tb_atomic_abort(tb_atomic_file *f) {
    if (f->fd >= 0) close(f->fd);
    if (f->tmp) unlink(f->tmp);
    free(f->tmp);
    f->tmp = NULL, f->fd = -1;
}

void tb_fsync_dir(const char *dir) {
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        (void)fsync(dfd);
        close(dfd);
    }
}

static void fsync_parent(const char *path) {
    char *copy = strdup(path);
    if (!copy) return;
    char *slash = strrchr(copy, '/');
    tb_fsync_dir(slash ? (slash == copy ? "/" : (*slash = 0, copy)) : ".");
    free(copy);
}

int tb_atomic_commit(tb_atomic_file *f, tb_err *e) {
    int err = f->err;
    const char *what = "write";
    if (!err && fchmod(f->fd, 0644) != 0) err = errno, what = "chmod"; /* mkstemp made it 0600 */
    if (!err && fsync(f->fd) != 0) err = errno, what = "fsync";
    if (close(f->fd) != 0 && !err) err = errno, what = "close";
    f->fd = -1;
    if (err) {
        tb_atomic_abort(f);
        return tb_fail(e, TUBELET_ERR_IO, "%s: %s failed: %s", f->path, what, strerror(err));
    }
    int rc = tb_rename(f->tmp, f->path, e);
    if (rc) tb_atomic_abort(f);
    else free(f->tmp), f->tmp = NULL;
    return rc;
}

int tb_atomic_write(const char *path, const void *data, size_t len, tb_err *e) {
    tb_atomic_file f;
    int rc = tb_atomic_open(&f, path, e);
    if (rc) return rc;
    tb_atomic_put(&f, data, len);
    return tb_atomic_commit(&f, e);
}

void tb_atomic_printf(tb_atomic_file *f, const char *fmt, ...) {
    char small[1024], *buf = small;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (n < 0) {
        if (!f->err) f->err = EINVAL;
        return;
    }
    if ((size_t)n >= sizeof small) { /* rare: a long line, formatted again into the heap */
        if (!(buf = malloc((size_t)n + 1))) {
            if (!f->err) f->err = ENOMEM;
            return;
        }
        va_start(ap, fmt);
        vsnprintf(buf, (size_t)n + 1, fmt, ap);
        va_end(ap);
    }
    tb_atomic_put(f, buf, (size_t)n);
    if (buf != small) free(buf);
}

int tb_rename(const char *from, const char *to, tb_err *e) {
    if (rename(from, to) != 0)
        return tb_fail(e, TUBELET_ERR_IO, "%s: cannot rename to %s: %s", from, to, strerror(errno));
    fsync_parent(to);
    return TUBELET_OK;
}

int tb_atomic_dir_open(tb_atomic_dir *d, const char *path, tb_err *e) {
    size_t n = strlen(path);
    while (n > 1 && path[n - 1] == '/') n--; /* "out/" → "out.tmp-XXXXXX", not "out/.tmp-" */
    d->path = path;
    if (!(d->tmp = malloc(n + 12)))
        return tb_fail(e, TUBELET_ERR_MEMORY, "%s: out of memory", path);
    memcpy(d->tmp, path, n);
    memcpy(d->tmp + n, ".tmp-XXXXXX", 12);
    if (!mkdtemp(d->tmp)) {
        int rc = tb_fail(e, TUBELET_ERR_IO, "%s: cannot create a directory beside it: %s", path,
                         strerror(errno));
        free(d->tmp), d->tmp = NULL;
        return rc;
    }
    return TUBELET_OK;
}

int tb_sync_tree(const char *dir, tb_err *e) {
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return tb_fail(e, TUBELET_ERR_IO, "%s: cannot open: %s", dir, strerror(errno));
    int r = syncfs(fd), err = errno;
    close(fd);
    return r ? tb_fail(e, TUBELET_ERR_IO, "%s: sync failed: %s", dir, strerror(err)) : TUBELET_OK;
}

int tb_atomic_dir_commit(tb_atomic_dir *d, tb_err *e) {
    int rc = tb_sync_tree(d->tmp, e);
    if (!rc && chmod(d->tmp, 0755) != 0) /* mkdtemp made it private */
        rc = tb_fail(e, TUBELET_ERR_IO, "%s: %s", d->tmp, strerror(errno));
    if (!rc && rmdir(d->path) != 0 && errno != ENOENT) {
        rc = tb_fail(e, TUBELET_ERR_IO, "%s: was filled by another program meanwhile; the new "
                                        "one is left in %s", d->path, d->tmp);
        free(d->tmp), d->tmp = NULL; /* kept on disk */
        return rc;
    }
    if (!rc) rc = tb_rename(d->tmp, d->path, e);
    if (rc) tb_atomic_dir_abort(d);
    else free(d->tmp), d->tmp = NULL;
    return rc;
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st, (void)flag, (void)ftw;
    return remove(path);
}

void tb_atomic_dir_abort(tb_atomic_dir *d) {
    if (d->tmp) nftw(d->tmp, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
    free(d->tmp), d->tmp = NULL;
}

struct tb_strmap_slot {
    const char *key; /* NULL: empty */
    uint64_t hash;
    int value;
};

uint64_t tb_hash_bytes(uint64_t seed, const void *p, size_t n) {
    const char *s = p;
    uint64_t h = seed ^ n;
    for (size_t i = 0; i < n; i += 8) { /* 8-byte words, each mixed into the state */
        uint64_t w = 0;
        memcpy(&w, s + i, n - i < 8 ? n - i : 8);
        h = tb_mix64(h ^ w);
    }
    return tb_mix64(h);
}

uint64_t tb_hash_seed(const void *salt) {
    uint64_t seed;
    if (getrandom(&seed, sizeof seed, GRND_NONBLOCK) != sizeof seed)
        seed = tb_mix64((uint64_t)(uintptr_t)salt ^ (uint64_t)getpid() << 32); /* no entropy yet */
    return seed;
}

static uint64_t strmap_hash(uint64_t seed, const char *s) { return tb_hash_bytes(seed, s, strlen(s)); }

static struct tb_strmap_slot *strmap_find(struct tb_strmap_slot *slot, size_t cap, const char *key,
                                          uint64_t hash) {
    for (size_t i = hash & (cap - 1);; i = (i + 1) & (cap - 1))
        if (!slot[i].key || (slot[i].hash == hash && !strcmp(slot[i].key, key))) return &slot[i];
}

int tb_strmap_add(tb_strmap *m, const char *key, int value) {
    if (!m->cap) m->seed = tb_hash_seed(m);
    if (2 * (m->n + 1) > m->cap) { /* at most half full */
        const size_t cap = m->cap ? 2 * m->cap : 64;
        struct tb_strmap_slot *s = calloc(cap, sizeof *s);
        if (!s) return -1;
        for (size_t i = 0; i < m->cap; i++)
            if (m->slot[i].key) *strmap_find(s, cap, m->slot[i].key, m->slot[i].hash) = m->slot[i];
        free(m->slot);
        m->slot = s, m->cap = cap;
    }
    const uint64_t h = strmap_hash(m->seed, key);
    struct tb_strmap_slot *s = strmap_find(m->slot, m->cap, key, h);
    if (s->key) return s->value;
    s->key = key, s->hash = h, s->value = value;
    m->n++;
    return value;
}

int tb_strmap_get(const tb_strmap *m, const char *key) {
    if (!m->cap) return -1;
    const struct tb_strmap_slot *s = strmap_find(m->slot, m->cap, key, strmap_hash(m->seed, key));
    return s->key ? s->value : -1;
}

void tb_strmap_free(tb_strmap *m) {
    free(m->slot);
    *m = (tb_strmap){0};
}

int64_t tb_machine_memory(void) {
    long pages = sysconf(_SC_PHYS_PAGES), size = sysconf(_SC_PAGE_SIZE);
    int64_t mem = pages > 0 && size > 0 ? (int64_t)pages * size : INT64_MAX;
    FILE *f = fopen("/sys/fs/cgroup/memory.max", "r"); /* a container's limit, if lower */
    long long lim;
    if (f && fscanf(f, "%lld", &lim) == 1 && lim > 0 && lim < mem) mem = lim;
    if (f) fclose(f);
    return mem;
}

/* Public (tubelet.h): the prediction of several views or frames of one clip. */
void tubelet_mean_softmax(const float *logits, int64_t rows, int64_t n, double *p) {
    for (int64_t k = 0; k < n; k++) p[k] = 0;
    for (int64_t r = 0; r < rows; r++) {
        const float *l = logits + r * n;
        double mx = -INFINITY, sum = 0;
        for (int64_t k = 0; k < n; k++) mx = l[k] > mx ? l[k] : mx;
        for (int64_t k = 0; k < n; k++) sum += exp(l[k] - mx);
        for (int64_t k = 0; k < n; k++) p[k] += exp(l[k] - mx) / sum / (double)rows;
    }
}

/* cJSON prints 15 significant digits, which loses the last bit of some doubles (a learning rate
 * of 3e-4 * 0.7): the fewest of 15, 16 or 17 digits that read back exactly. */
cJSON *tb_json_number(double v) {
    if (!isfinite(v)) return cJSON_CreateNull();
    char buf[40];
    for (int prec = 15; prec <= 17; prec++) {
        snprintf(buf, sizeof buf, "%.*g", prec, v);
        if (strtod(buf, NULL) == v) break;
    }
    return cJSON_CreateRaw(buf);
}
