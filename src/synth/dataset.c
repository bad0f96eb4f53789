/* Writing the synth dataset to a directory: videos first (each under a temporary name, then
 * renamed), the filesystem synced, then labels.txt and the CSVs (temp file, fsync, rename). The
 * clips are independent, so they are rendered and encoded in parallel (OpenMP); the files do not
 * depend on the number of threads. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <libavutil/log.h>
#include <omp.h>

#include "synth.h"
#include "tubelet_synth.h"

#define PATH_CAP 4096
static const char *const SPLIT_NAMES[2] = {"train", "val"};

tb_synth_dataset_params tb_synth_dataset_default_params(void) {
    tb_synth_dataset_params p;
    memset(&p, 0, sizeof p);
    p.clip = tb_synth_default_params();
    p.per_class = 100;
    p.val_percent = 20;
    p.fps = 8;
    p.codec = TB_SYNTH_H264;
    return p;
}

static int join(char *out, const char *dir, const char *a, const char *b, tb_err *e) {
    int n = b ? snprintf(out, PATH_CAP, "%s/%s/%s", dir, a, b) : snprintf(out, PATH_CAP, "%s/%s", dir, a);
    if (n < 0 || n >= PATH_CAP) return tb_fail(e, TUBELET_ERR_ARG, "%s: path too long", dir);
    return TUBELET_OK;
}

static int is_dir(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

static int make_dir(const char *path, tb_err *e) {
    if (mkdir(path, 0777) == 0 || (errno == EEXIST && is_dir(path))) return TUBELET_OK;
    if (errno == EEXIST) return tb_fail(e, TUBELET_ERR_IO, "%s: exists and is not a directory", path);
    return tb_fail(e, TUBELET_ERR_IO, "%s: cannot create directory: %s", path, strerror(errno));
}

/* mkdir -p */
static int make_dirs(const char *path, tb_err *e) {
    char buf[PATH_CAP];
    size_t n = strlen(path);
    if (n >= sizeof buf) return tb_fail(e, TUBELET_ERR_ARG, "%s: path too long", path);
    memcpy(buf, path, n + 1);
    for (size_t i = 1; i < n; i++) {
        if (buf[i] != '/') continue;
        buf[i] = 0;
        if (!is_dir(buf) && mkdir(buf, 0777) != 0 && errno != EEXIST)
            return tb_fail(e, TUBELET_ERR_IO, "%s: cannot create directory: %s", buf, strerror(errno));
        buf[i] = '/';
    }
    return make_dir(buf, e);
}

static int remove_file(const char *path, tb_err *e) {
    if (unlink(path) == 0 || errno == ENOENT) return TUBELET_OK;
    return tb_fail(e, TUBELET_ERR_IO, "%s: cannot remove: %s", path, strerror(errno));
}

/* DIR must be missing (created), empty, an earlier synth output (synth.json), or force. */
static int prepare_dir(const tb_synth_dataset_params *p, tb_err *e) {
    struct stat st;
    if (stat(p->dir, &st) != 0) {
        if (errno != ENOENT)
            return tb_fail(e, TUBELET_ERR_IO, "%s: cannot use as the output directory: %s", p->dir,
                           strerror(errno));
        return make_dirs(p->dir, e);
    }
    if (!S_ISDIR(st.st_mode))
        return tb_fail(e, TUBELET_ERR_ARG, "%s: exists and is not a directory", p->dir);
    DIR *d = opendir(p->dir);
    if (!d) return tb_fail(e, TUBELET_ERR_IO, "%s: cannot read directory: %s", p->dir, strerror(errno));
    int entries = 0, marker = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
        entries++;
        if (!strcmp(de->d_name, "synth.json")) marker = 1;
    }
    closedir(d);
    if (entries && !marker && !p->force)
        return tb_fail(e, TUBELET_ERR_ARG,
                       "%s: directory is not empty and is not an earlier synth output (no "
                       "synth.json); use a new or empty directory, or force (--force)",
                       p->dir);
    if (access(p->dir, W_OK) != 0)
        return tb_fail(e, TUBELET_ERR_IO, "%s: not writable: %s", p->dir, strerror(errno));
    return TUBELET_OK;
}

/* 1 if name is <class>_<digits>.<mp4|avi> or that + ".tmp": a video of ours. */
static int ours(const char *name) {
    for (int c = 0; c < TB_SYNTH_N_CLASSES; c++) {
        const char *cn = tb_synth_class_name(c);
        size_t n = strlen(cn);
        if (strncmp(name, cn, n) || name[n] != '_') continue;
        const char *q = name + n + 1;
        if (*q < '0' || *q > '9') continue;
        while (*q >= '0' && *q <= '9') q++;
        if (!strcmp(q, ".mp4") || !strcmp(q, ".avi") || !strcmp(q, ".mp4.tmp") ||
            !strcmp(q, ".avi.tmp"))
            return 1;
    }
    return 0;
}

/* Removes our videos from sub; scans again until a pass removes nothing (readdir need not
 * return entries of a directory that changes under it). */
static int clean_videos(const char *sub, tb_err *e) {
    int removed;
    do {
        DIR *d = opendir(sub);
        if (!d)
            return tb_fail(e, TUBELET_ERR_IO, "%s: cannot read directory: %s", sub, strerror(errno));
        int rc = TUBELET_OK;
        struct dirent *de;
        char path[PATH_CAP];
        removed = 0;
        while (!rc && (de = readdir(d))) {
            if (!ours(de->d_name)) continue;
            if (!(rc = join(path, sub, de->d_name, NULL, e)) && !(rc = remove_file(path, e)))
                removed++;
        }
        closedir(d);
        if (rc) return rc;
    } while (removed);
    return TUBELET_OK;
}

/* A text file of the dataset, DIR/name, written through tb_atomic_file (common.h). */
typedef struct {
    tb_atomic_file f;
    char path[PATH_CAP];
} text_file;

static int text_open(text_file *t, const char *dir, const char *name, tb_err *e) {
    int rc = join(t->path, dir, name, NULL, e);
    return rc ? rc : tb_atomic_open(&t->f, t->path, e);
}

static int write_manifest(const tb_synth_dataset_params *p, int n_train, int n_val, tb_err *e) {
    text_file a;
    int rc = text_open(&a, p->dir, "synth.json", e);
    if (rc) return rc;
    tb_atomic_printf(&a.f,
                     "{\n  \"generator\": \"tubelet synth\",\n  \"format_version\": 1,\n"
                     "  \"seed\": %llu,\n  \"per_class\": %d,\n  \"val_percent\": %d,\n"
                     "  \"train_per_class\": %d,\n  \"val_per_class\": %d,\n"
                     "  \"frames\": %d,\n  \"size\": %d,\n  \"fps\": %d,\n  \"codec\": \"%s\",\n"
                     "  \"max_distractors\": %d,\n  \"noise\": %g,\n  \"classes\": [",
                     (unsigned long long)p->seed, p->per_class, p->val_percent, n_train, n_val,
                     p->clip.frames, p->clip.size, p->fps, tb_synth_codec_name(p->codec),
                     p->clip.max_distractors, (double)p->clip.noise);
    for (int c = 0; c < TB_SYNTH_N_CLASSES; c++)
        tb_atomic_printf(&a.f, "%s\"%s\"", c ? ", " : "", tb_synth_class_name(c));
    tb_atomic_printf(&a.f, "]\n}\n");
    return tb_atomic_commit(&a.f, e);
}

static void video_name(char *out, size_t cap, int split, int c, int n, const char *ext) {
    snprintf(out, cap, "videos/%s/%s_%04d.%s", SPLIT_NAMES[split], tb_synth_class_name(c), n, ext);
}

static int write_lists(const tb_synth_dataset_params *p, int n_per[2], tb_err *e) {
    text_file a;
    int rc = text_open(&a, p->dir, "labels.txt", e);
    if (rc) return rc;
    for (int c = 0; c < TB_SYNTH_N_CLASSES; c++)
        tb_atomic_printf(&a.f, "%s\n", tb_synth_class_name(c));
    if ((rc = tb_atomic_commit(&a.f, e))) return rc;
    const char *ext = tb_synth_codec_ext(p->codec);
    for (int s = 0; s < 2; s++) {
        char name[32], rel[256];
        snprintf(name, sizeof name, "%s.csv", SPLIT_NAMES[s]);
        if ((rc = text_open(&a, p->dir, name, e))) return rc;
        tb_atomic_printf(&a.f, "path,label\n");
        for (int c = 0; c < TB_SYNTH_N_CLASSES; c++)
            for (int n = 0; n < n_per[s]; n++) {
                video_name(rel, sizeof rel, s, c, n, ext);
                tb_atomic_printf(&a.f, "%s,%s\n", rel, tb_synth_class_name(c));
            }
        if ((rc = tb_atomic_commit(&a.f, e))) return rc;
    }
    return TUBELET_OK;
}

/* Renders, encodes (to a temporary name) and renames one clip; *bytes = its size. */
static int write_clip(const tb_synth_dataset_params *p, int split, int c, int n, uint8_t *rgb,
                      int64_t *bytes, tb_err *e) {
    char rel[256], path[PATH_CAP], tmp[PATH_CAP + 8];
    video_name(rel, sizeof rel, split, c, n, tb_synth_codec_ext(p->codec));
    int rc = join(path, p->dir, rel, NULL, e);
    if (rc) return rc;
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    uint64_t cs = tb_synth_clip_seed(p->seed, split, c, n);
    if ((rc = tb_synth_render(&p->clip, c, cs, rgb, NULL, e))) return rc;
    if ((rc = tb_synth_encode(tmp, rgb, p->clip.frames, p->clip.size, p->fps, p->codec, e)))
        return rc;
    if ((rc = tb_rename(tmp, path, e))) {
        remove(tmp);
        return rc;
    }
    struct stat st;
    *bytes = stat(path, &st) == 0 ? (int64_t)st.st_size : 0;
    return TUBELET_OK;
}

static int write_dataset(const tb_synth_dataset_params *p, tb_synth_summary *sum, tb_err *e);

/* 1 if dir does not exist or is an empty directory. */
static int fresh_dir(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return errno == ENOENT;
    int empty = 1;
    for (struct dirent *de; empty && (de = readdir(d));)
        empty = !strcmp(de->d_name, ".") || !strcmp(de->d_name, "..");
    closedir(d);
    return empty;
}

/* A new dataset is written into a temporary sibling and renamed into place: a full disk or a
 * kill leaves no half dataset under DIR. An earlier synth output is rewritten in place (its
 * synth.json stays first, so a retry recognises the directory). */
int tb_synth_write_dataset(const tb_synth_dataset_params *p, tb_synth_summary *sum, tb_err *e) {
    if (!p || !p->dir || !p->dir[0] || !fresh_dir(p->dir)) return write_dataset(p, sum, e);
    char dir[PATH_CAP];
    snprintf(dir, sizeof dir, "%s", p->dir);
    for (size_t n = strlen(dir); n > 1 && dir[n - 1] == '/'; n--) dir[n - 1] = 0;
    char *slash = strrchr(dir, '/');
    if (slash && slash != dir) { /* mkdir -p the parent */
        *slash = 0;
        int rc = make_dirs(dir, e);
        *slash = '/';
        if (rc) return rc;
    }
    tb_atomic_dir d;
    int rc = tb_atomic_dir_open(&d, dir, e);
    if (rc) return rc;
    tb_synth_dataset_params q = *p;
    q.dir = d.tmp;
    if ((rc = write_dataset(&q, sum, e))) {
        tb_atomic_dir_abort(&d);
        return rc;
    }
    return tb_atomic_dir_commit(&d, e);
}

static int write_dataset(const tb_synth_dataset_params *p, tb_synth_summary *sum, tb_err *e) {
    if (sum) memset(sum, 0, sizeof *sum);
    if (!p || !p->dir || !p->dir[0]) return tb_fail(e, TUBELET_ERR_ARG, "synth: no output directory");
    int rc = tb_synth_check_params(&p->clip, e);
    if (rc) return tb_prefix(e, rc, "%s: ", p->dir);
    if (p->per_class < 1 || p->per_class > 100000)
        return tb_fail(e, TUBELET_ERR_ARG, "%s: per_class must be in [1, 100000], got %d", p->dir,
                       p->per_class);
    if (p->val_percent < 0 || p->val_percent > 100)
        return tb_fail(e, TUBELET_ERR_ARG, "%s: val_percent must be in [0, 100], got %d", p->dir,
                       p->val_percent);
    if (p->fps < 1 || p->fps > 120)
        return tb_fail(e, TUBELET_ERR_ARG, "%s: fps must be in [1, 120], got %d", p->dir, p->fps);
    if (p->n_threads < 0 || p->n_threads > 1024)
        return tb_fail(e, TUBELET_ERR_ARG, "%s: n_threads must be in [0, 1024], got %d", p->dir,
                       p->n_threads);
    if ((rc = tb_synth_codec_check(p->codec, e))) return tb_prefix(e, rc, "%s: ", p->dir);
    if (strlen(p->dir) > PATH_CAP - 64) return tb_fail(e, TUBELET_ERR_ARG, "%s: path too long", p->dir);

    int n_val = (int)(((int64_t)p->per_class * p->val_percent + 50) / 100);
    int n_per[2] = {p->per_class - n_val, n_val};
    if ((rc = prepare_dir(p, e))) return rc;
    char path[PATH_CAP];
    /* The old lists go first: from here until the new ones land, no list names a video. */
    const char *lists[3] = {"train.csv", "val.csv", "labels.txt"};
    for (int i = 0; i < 3; i++)
        if ((rc = join(path, p->dir, lists[i], NULL, e)) || (rc = remove_file(path, e))) return rc;
    if ((rc = write_manifest(p, n_per[0], n_per[1], e))) return rc;
    if ((rc = join(path, p->dir, "videos", NULL, e)) || (rc = make_dir(path, e))) return rc;
    for (int s = 0; s < 2; s++)
        if ((rc = join(path, p->dir, "videos", SPLIT_NAMES[s], e)) || (rc = make_dir(path, e)) ||
            (rc = clean_videos(path, e)))
            return rc;

    /* Jobs in list order: split, class, index. */
    int per_split[2] = {n_per[0] * TB_SYNTH_N_CLASSES, n_per[1] * TB_SYNTH_N_CLASSES};
    int total = per_split[0] + per_split[1];
    int threads = p->n_threads > 0 ? p->n_threads : omp_get_max_threads();
    if (threads > total) threads = total > 0 ? total : 1;
    size_t clip_bytes = tb_synth_clip_bytes(&p->clip);
    /* FFmpeg's log level is a global: quiet it here, once, not from the worker threads */
    if (av_log_get_level() == AV_LOG_INFO) av_log_set_level(AV_LOG_QUIET);
    int failed = 0, fail_job = INT_MAX, done = 0, fail_rc = TUBELET_OK;
    int64_t bytes = 0;
    tb_err first = {{0}};
#pragma omp parallel num_threads(threads)
    {
        uint8_t *rgb = malloc(clip_bytes);
        tb_err te = {{0}};
#pragma omp for schedule(dynamic, 1)
        for (int j = 0; j < total; j++) {
            int stop;
#pragma omp atomic read
            stop = failed;
            if (stop) continue;
            int s = j < per_split[0] ? 0 : 1, k = s ? j - per_split[0] : j;
            int c = k / n_per[s], n = k % n_per[s];
            int64_t b = 0;
            int r = rgb ? write_clip(p, s, c, n, rgb, &b, &te)
                        : tb_fail(&te, TUBELET_ERR_MEMORY, "%s: out of memory for a clip", p->dir);
#pragma omp critical(tb_synth_progress)
            {
                if (r) {
                    if (j < fail_job) fail_job = j, fail_rc = r, first = te;
#pragma omp atomic write
                    failed = 1;
                } else {
                    bytes += b;
                    done++;
                    if (p->progress && !failed) p->progress(p->progress_user, done, total);
                }
            }
        }
        free(rgb);
    }
    if (failed) {
        if (e) *e = first;
        return fail_rc;
    }
    /* the videos reach the disk before the lists that name them */
    if ((rc = tb_sync_tree(p->dir, e))) return rc;
    if ((rc = write_lists(p, n_per, e))) return rc;
    if ((rc = tb_sync_tree(p->dir, e))) return rc;
    if (sum) {
        sum->n_train = per_split[0];
        sum->n_val = per_split[1];
        sum->video_bytes = bytes;
    }
    return TUBELET_OK;
}

/* ---- public (include/tubelet_synth.h): the dataset parameters in the library's own types ---- */

int tubelet_synth_n_classes(void) { return TB_SYNTH_N_CLASSES; }

int tubelet_synth_codec_valid(const char *name) {
    return name && tb_synth_codec_from_name(name) >= 0;
}

tubelet_synth_params tubelet_synth_default_params(void) {
    const tb_synth_dataset_params d = tb_synth_dataset_default_params();
    return (tubelet_synth_params){NULL, d.clip.size, d.clip.frames, d.clip.max_distractors,
                                  d.clip.noise, d.per_class, d.val_percent, d.seed, d.fps,
                                  tb_synth_codec_name(d.codec), d.n_threads, d.force, NULL, NULL};
}

int tubelet_synth_write(const tubelet_synth_params *p, tubelet_synth_summary *sum, char *err,
                        size_t errlen) {
    tb_err e = {{0}};
    tb_synth_dataset_params d = tb_synth_dataset_default_params();
    const int codec = p->codec ? tb_synth_codec_from_name(p->codec) : (int)d.codec;
    int rc = TUBELET_OK;
    if (codec < 0) {
        rc = tb_fail(&e, TUBELET_ERR_ARG, "codec must be h264 or mjpeg, got '%s'", p->codec);
    } else {
        d.dir = p->dir, d.clip.size = p->size, d.clip.frames = p->frames;
        d.clip.max_distractors = p->max_distractors, d.clip.noise = p->noise;
        d.per_class = p->per_class, d.val_percent = p->val_percent, d.seed = p->seed;
        d.fps = p->fps, d.codec = (tb_synth_codec)codec, d.n_threads = p->n_threads;
        d.force = p->force, d.progress = p->progress, d.progress_user = p->progress_user;
        tb_synth_summary s;
        rc = tb_synth_write_dataset(&d, &s, &e);
        if (!rc && sum) *sum = (tubelet_synth_summary){s.n_train, s.n_val, s.video_bytes};
    }
    return tb_err_out(rc, &e, err, errlen);
}
