#include "data.h"
#include "../rng.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

static double uniform01(uint64_t *s) { return tb_uniform01(s); }

static char *trim(char *s) {
    while (*s == ' ' || *s == '\t') s++;
    char *end = s + strlen(s);
    while (end > s && (end[-1] == '\n' || end[-1] == '\r' || end[-1] == ' ' || end[-1] == '\t'))
        *--end = 0;
    if (*s == '"' && end > s + 1 && end[-1] == '"') s++, end[-1] = 0; /* simple quoting */
    return s;
}

void tb_dataset_free(tb_dataset *d) {
    for (int i = 0; i < d->n; i++) free(d->paths[i]);
    free(d->paths), free(d->labels);
    if (d->owns_classes) {
        for (int i = 0; i < d->n_classes; i++) free(d->classes[i]);
        free(d->classes);
    }
    memset(d, 0, sizeof *d);
}

/* Class names sorted with their index: duplicate checks and label lookups in n log n (a
 * Kinetics-700 CSV of 500k rows would otherwise take minutes). */
typedef struct {
    const char *name;
    int index;
} named;

static int cmp_named(const void *a, const void *b) {
    const named *x = a, *y = b;
    int c = strcmp(x->name, y->name);
    return c ? c : (x->index > y->index) - (x->index < y->index);
}

static named *sorted_names(char *const *names, int n) {
    named *s = malloc(sizeof(named) * (size_t)(n ? n : 1));
    for (int i = 0; s && i < n; i++) s[i] = (named){names[i], i};
    if (s) qsort(s, (size_t)n, sizeof *s, cmp_named);
    return s;
}

/* One class name per line; a name given twice is an error (which index would it be?). */
static int read_class_file(const char *path, char ***out, int *n, tb_err *e) {
    char *text = NULL;
    int rc = tb_read_file(path, &text, NULL, 1 << 24, e);
    if (rc) return rc;
    int cap = 16;
    *out = malloc(sizeof(char *) * (size_t)cap), *n = 0;
    for (char *line = strtok(text, "\n"); line && *out; line = strtok(NULL, "\n")) {
        char *t = trim(line);
        if (!*t) continue;
        if (*n == cap) {
            char **grown = realloc(*out, sizeof(char *) * (size_t)(cap *= 2));
            if (!grown) {
                for (int i = 0; i < *n; i++) free((*out)[i]);
                free(*out), *out = NULL;
                break;
            }
            *out = grown;
        }
        if (!((*out)[*n] = strdup(t))) break;
        (*n)++;
    }
    free(text);
    if (!*out) return tb_fail(e, TUBELET_ERR_MEMORY, "out of memory");
    if (!*n) rc = tb_fail(e, TUBELET_ERR_FORMAT, "%s: no class names", path);
    named *s = rc ? NULL : sorted_names(*out, *n);
    if (!rc && !s) rc = tb_fail(e, TUBELET_ERR_MEMORY, "out of memory");
    for (int i = 1; !rc && i < *n; i++)
        if (!strcmp(s[i - 1].name, s[i].name))
            rc = tb_fail(e, TUBELET_ERR_FORMAT,
                         "%s: class '%.64s' is listed twice (classes %d and %d); each class once",
                         path, s[i].name, s[i - 1].index, s[i].index);
    free(s);
    if (rc) {
        for (int i = 0; i < *n; i++) free((*out)[i]);
        free(*out), *out = NULL, *n = 0;
    }
    return rc;
}

/* The sorted distinct labels of the rows. */
static int distinct_labels(tb_dataset *d, char **lab, tb_err *e) {
    named *s = sorted_names(lab, d->n);
    d->classes = malloc(sizeof(char *) * (size_t)d->n);
    if (!s || !d->classes) {
        free(s);
        return tb_fail(e, TUBELET_ERR_MEMORY, "out of memory");
    }
    for (int i = 0; i < d->n; i++)
        if (i == 0 || strcmp(s[i - 1].name, s[i].name))
            if (!(d->classes[d->n_classes++] = strdup(s[i].name))) {
                d->n_classes--;
                free(s);
                return tb_fail(e, TUBELET_ERR_MEMORY, "out of memory");
            }
    free(s);
    return TUBELET_OK;
}

/* A row's path: relative to the CSV's directory (absolute paths and ../ followed), or, with a
 * data root, confined to it (absolute paths and .. components refused). */
static char *resolve_path(const char *csv, int line_no, const char *dir, const char *root,
                          const char *path, tb_err *e) {
    if (root) {
        int escapes = path[0] == '/';
        for (const char *p = path; *p && !escapes; p = strchr(p, '/') ? strchr(p, '/') + 1 : "")
            escapes = !strncmp(p, "..", 2) && (p[2] == '/' || p[2] == 0);
        if (escapes) {
            tb_fail(e, TUBELET_ERR_FORMAT, "%s:%d: path '%.200s' leaves --data-root %s", csv,
                    line_no, path, root);
            return NULL;
        }
    }
    const char *base = root ? root : dir;
    size_t len = strlen(base) + strlen(path) + 2;
    char *out = malloc(len);
    if (!out) {
        tb_fail(e, TUBELET_ERR_MEMORY, "out of memory");
        return NULL;
    }
    if (path[0] == '/') snprintf(out, len, "%s", path);
    else snprintf(out, len, "%s/%s", base, path);
    return out;
}

static int add_row(tb_dataset *d, char ***lab, int *cap, char *path, const char *label,
                   tb_err *e) {
    if (d->n == *cap) {
        int c = *cap * 2;
        char **l = realloc(*lab, sizeof(char *) * (size_t)c);
        if (l) *lab = l;
        char **p = l ? realloc(d->paths, sizeof(char *) * (size_t)c) : NULL;
        if (p) d->paths = p;
        if (!l || !p) {
            free(path);
            return tb_fail(e, TUBELET_ERR_MEMORY, "out of memory");
        }
        *cap = c;
    }
    char *l = strdup(label);
    if (!l) {
        free(path);
        return tb_fail(e, TUBELET_ERR_MEMORY, "out of memory");
    }
    d->paths[d->n] = path, (*lab)[d->n] = l, d->n++;
    return TUBELET_OK;
}

static int parse_rows(tb_dataset *d, char ***lab, char *text, const char *csv, const char *dir,
                      const char *root, tb_err *e) {
    int cap = 256, rc = TUBELET_OK, line_no = 0;
    *lab = malloc(sizeof(char *) * (size_t)cap);
    d->paths = malloc(sizeof(char *) * (size_t)cap);
    if (!*lab || !d->paths) return tb_fail(e, TUBELET_ERR_MEMORY, "out of memory");
    for (char *line = text, *next; line && !rc; line = next) {
        next = strchr(line, '\n');
        if (next) *next++ = 0;
        line_no++;
        char *t = trim(line);
        if (!*t) continue;
        char *sep = strchr(t, '\t');
        if (!sep) sep = strrchr(t, ','); /* a path may hold commas; the label does not */
        if (!sep) return tb_fail(e, TUBELET_ERR_FORMAT, "%s:%d: expected 'path,label'", csv, line_no);
        *sep = 0;
        char *path = trim(t), *label = trim(sep + 1);
        if (line_no == 1 && !strcmp(path, "path") && !strcmp(label, "label")) continue;
        if (!*path || !*label)
            return tb_fail(e, TUBELET_ERR_FORMAT, "%s:%d: empty path or label", csv, line_no);
        char *full = resolve_path(csv, line_no, dir, root, path, e);
        rc = full ? add_row(d, lab, &cap, full, label, e) : TUBELET_ERR_FORMAT;
    }
    return rc;
}

int tb_dataset_load(tb_dataset *d, const char *csv, const char *root, char **classes,
                    int n_classes, tb_err *e) {
    memset(d, 0, sizeof *d);
    char *text = NULL, dir[1024] = ".", **lab = NULL;
    int rc = tb_read_file(csv, &text, NULL, 1 << 28, e);
    if (rc) return rc;
    const char *slash = strrchr(csv, '/');
    if (slash) snprintf(dir, sizeof dir, "%.*s", (int)(slash - csv), csv);
    rc = parse_rows(d, &lab, text, csv, dir, root, e);
    free(text);
    if (!rc && d->n == 0) rc = tb_fail(e, TUBELET_ERR_FORMAT, "%s: no rows", csv);
    if (!rc && n_classes > 0) {
        d->classes = classes, d->n_classes = n_classes;
    } else if (!rc) {
        char cls_path[1100];
        snprintf(cls_path, sizeof cls_path, "%s/labels.txt", dir);
        d->owns_classes = 1;
        if (access(cls_path, F_OK) == 0) rc = read_class_file(cls_path, &d->classes, &d->n_classes, e);
        else rc = distinct_labels(d, lab, e);
    }
    named *sorted = rc ? NULL : sorted_names(d->classes, d->n_classes);
    d->labels = rc ? NULL : malloc(sizeof(int) * (size_t)(d->n ? d->n : 1));
    if (!rc && (!sorted || !d->labels)) rc = tb_fail(e, TUBELET_ERR_MEMORY, "out of memory");
    for (int i = 0; !rc && i < d->n; i++) {
        named key = {lab[i], -1}, *lo = sorted, *hi = sorted + d->n_classes;
        while (lo < hi) { /* first entry >= key: the smallest index of that name */
            named *mid = lo + (hi - lo) / 2;
            if (strcmp(mid->name, key.name) < 0) lo = mid + 1;
            else hi = mid;
        }
        d->labels[i] = lo < sorted + d->n_classes && !strcmp(lo->name, lab[i]) ? lo->index : -1;
        if (d->labels[i] < 0)
            rc = tb_fail(e, TUBELET_ERR_FORMAT, "%s: row %d: label '%.64s' is not one of the %d "
                         "classes", csv, i + 1, lab[i], d->n_classes);
    }
    free(sorted);
    for (int i = 0; lab && i < d->n; i++) free(lab[i]);
    free(lab);
    if (rc) tb_dataset_free(d);
    return rc;
}

/* Random resized crop (as torchvision's RandomResizedCrop: area in [min_scale, 1], aspect in
 * [3/4, 4/3], 10 tries, else the centred square), resized to out_h x out_w, optional flip. */
static void random_resized_crop(const uint8_t *in, int h, int w, uint8_t *crop, uint8_t *out,
                                int out_h, int out_w, int T, double min_scale, int flip,
                                uint64_t *rng, tb_err *e) {
    int ch = h < w ? h : w, cw = ch, y0 = (h - ch) / 2, x0 = (w - cw) / 2;
    for (int t = 0; t < 10; t++) {
        double area = h * w * (min_scale + (1 - min_scale) * uniform01(rng));
        double ar = exp(log(3.0 / 4) + (log(4.0 / 3) - log(3.0 / 4)) * uniform01(rng));
        int tw = (int)lround(sqrt(area * ar)), th = (int)lround(sqrt(area / ar));
        if (tw >= 1 && th >= 1 && tw <= w && th <= h) {
            cw = tw, ch = th;
            y0 = (int)(uniform01(rng) * (h - th + 1));
            x0 = (int)(uniform01(rng) * (w - tw + 1));
            break;
        }
    }
    for (int f = 0; f < T; f++) {
        const uint8_t *src = in + (size_t)f * h * w * 3;
        for (int y = 0; y < ch; y++)
            memcpy(crop + (size_t)y * cw * 3, src + ((size_t)(y0 + y) * w + x0) * 3, (size_t)cw * 3);
        uint8_t *dst = out + (size_t)f * out_h * out_w * 3;
        tb_resize_u8(crop, ch, cw, dst, out_h, out_w, TB_RESAMPLE_BILINEAR, e);
        if (flip)
            for (int y = 0; y < out_h; y++)
                for (int x = 0; x < out_w / 2; x++)
                    for (int c = 0; c < 3; c++) {
                        uint8_t *a = dst + ((size_t)y * out_w + x) * 3 + c;
                        uint8_t *b = dst + ((size_t)y * out_w + out_w - 1 - x) * 3 + c;
                        uint8_t tmp = *a;
                        *a = *b, *b = tmp;
                    }
    }
}

int tb_dataset_clip(const tb_dataset *d, int i, const tb_clip_params *p, uint64_t rng_seed,
                    float *out, tb_err *e) {
    const char *path = d->paths[i];
    tb_video *v = NULL;
    tb_preproc *pp = NULL;
    uint8_t *rgb = NULL, *crop = NULL, *small = NULL;
    int64_t *idx = malloc(sizeof(int64_t) * (size_t)p->frames);
    uint64_t rng = rng_seed;
    tb_video_params vp = tb_video_default_params();
    vp.n_threads = 1; /* clips are loaded in parallel; one decoder thread each */
    int rc = idx ? tb_video_open(&v, path, &vp, e) : tb_fail(e, TUBELET_ERR_MEMORY, "out of memory");
    if (rc) goto done;
    const tb_video_info *in = tb_video_get_info(v);
    const int64_t F = in->n_frames;
    const int T = p->frames;
    if (p->train) { /* segment-based sampling with a random frame inside each segment (TSN) */
        for (int t = 0; t < T; t++) {
            double a = (double)t * F / T, b = (double)(t + 1) * F / T;
            int64_t j = (int64_t)(a + uniform01(&rng) * (b - a));
            idx[t] = j < F ? j : F - 1;
        }
    } else {
        tb_sample_params sp = {TB_SAMPLE_UNIFORM, T, 1, 1, 0};
        tb_sample_result sr;
        if ((rc = tb_sample_indices(&sp, F, idx, &sr, e))) goto done;
    }
    const size_t frame = (size_t)in->height * in->width * 3;
    rgb = malloc(frame * (size_t)T);
    if (!rgb) {
        rc = tb_fail(e, TUBELET_ERR_MEMORY, "%s: out of memory", path);
        goto done;
    }
    if ((rc = tb_video_decode(v, idx, T, rgb, e))) goto done;
    if (p->train) {
        crop = malloc(frame);
        small = malloc((size_t)T * p->height * p->width * 3);
        if (!crop || !small) {
            rc = tb_fail(e, TUBELET_ERR_MEMORY, "%s: out of memory", path);
            goto done;
        }
        int flip = p->hflip && uniform01(&rng) < 0.5;
        random_resized_crop(rgb, in->height, in->width, crop, small, p->height, p->width, T,
                            p->min_scale, flip, &rng, e);
        /* the crop is already model-sized: only rescale and normalise */
        tb_preproc_config pc = *p->pc;
        pc.do_resize = 0, pc.do_center_crop = 0;
        if ((rc = tb_preproc_new(&pp, &pc, p->height, p->width, e)) ||
            (rc = tb_preproc_run(pp, small, T, TB_CROP_CENTER, out, e)))
            goto done;
    } else {
        int oh, ow;
        if ((rc = tb_preproc_new(&pp, p->pc, in->height, in->width, e))) goto done;
        tb_preproc_out_size(pp, &oh, &ow);
        if (oh != p->height || ow != p->width) {
            rc = tb_fail(e, TUBELET_ERR_SHAPE, "%s: preprocessed to %dx%d, the model takes %dx%d",
                         path, oh, ow, p->height, p->width);
            goto done;
        }
        rc = tb_preproc_run(pp, rgb, T, TB_CROP_CENTER, out, e);
    }
done:
    if (rc && !strstr(e->msg, path)) tb_prefix(e, rc, "%s: ", path);
    free(idx), free(rgb), free(crop), free(small);
    tb_preproc_free(pp);
    tb_video_close(v);
    return rc;
}

/* ---- unlabelled videos (pretraining) ---- */

static int push_path(tb_dataset *d, int *cap, char *path, tb_err *e) {
    if (!path) return TUBELET_ERR_FORMAT; /* resolve_path said why */
    if (d->n == *cap) {
        int c = *cap ? 2 * *cap : 256;
        char **p = realloc(d->paths, sizeof(char *) * (size_t)c);
        if (!p) {
            free(path);
            return tb_fail(e, TUBELET_ERR_MEMORY, "out of memory");
        }
        d->paths = p, *cap = c;
    }
    d->paths[d->n++] = path;
    return TUBELET_OK;
}

static int video_name(const struct dirent *de) {
    static const char *const ext[] = {".mp4", ".avi", ".mkv", ".webm", ".mov", ".m4v", ".mpg",
                                      ".mpeg", ".y4m", NULL};
    const char *dot = de->d_name[0] != '.' ? strrchr(de->d_name, '.') : NULL;
    for (int i = 0; dot && ext[i]; i++)
        if (!strcasecmp(dot, ext[i])) return 1;
    return 0;
}

static int list_directory(tb_dataset *d, const char *dir, tb_err *e) {
    struct dirent **names = NULL;
    int n = scandir(dir, &names, video_name, alphasort), cap = 0, rc = TUBELET_OK;
    if (n < 0) return tb_fail(e, TUBELET_ERR_IO, "%s: cannot list: %s", dir, strerror(errno));
    for (int i = 0; i < n; i++) {
        size_t len = strlen(dir) + strlen(names[i]->d_name) + 2;
        char *p = rc ? NULL : malloc(len);
        if (p) snprintf(p, len, "%s/%s", dir, names[i]->d_name);
        else if (!rc) rc = tb_fail(e, TUBELET_ERR_MEMORY, "out of memory");
        if (!rc) rc = push_path(d, &cap, p, e);
        free(names[i]);
    }
    free(names);
    return rc;
}

static int list_file(tb_dataset *d, const char *list, const char *root, tb_err *e) {
    char *text = NULL, dir[1024] = ".";
    int rc = tb_read_file(list, &text, NULL, 1 << 28, e), cap = 0, line_no = 0;
    if (rc) return rc;
    const char *slash = strrchr(list, '/');
    if (slash) snprintf(dir, sizeof dir, "%.*s", (int)(slash - list), list);
    for (char *line = text, *next; line && !rc; line = next) {
        next = strchr(line, '\n');
        if (next) *next++ = 0;
        line_no++;
        char *t = trim(line);
        if (!*t) continue;
        char *sep = strchr(t, '\t');
        if (!sep) sep = strrchr(t, ','); /* path,label: the label is ignored */
        if (sep) *sep = 0;
        char *path = trim(t);
        if (line_no == 1 && !strcmp(path, "path")) continue; /* a CSV header */
        if (!*path) {
            rc = tb_fail(e, TUBELET_ERR_FORMAT, "%s:%d: empty path", list, line_no);
            break;
        }
        rc = push_path(d, &cap, resolve_path(list, line_no, dir, root, path, e), e);
    }
    free(text);
    return rc;
}

int tb_dataset_load_videos(tb_dataset *d, const char *list, const char *root, tb_err *e) {
    memset(d, 0, sizeof *d);
    struct stat st;
    int rc = stat(list, &st) == 0 && S_ISDIR(st.st_mode) ? list_directory(d, list, e)
                                                         : list_file(d, list, root, e);
    if (!rc && d->n == 0) rc = tb_fail(e, TUBELET_ERR_FORMAT, "%s: no videos", list);
    if (!rc) {
        d->labels = calloc((size_t)d->n, sizeof(int));
        d->classes = malloc(sizeof(char *));
        d->owns_classes = 1;
        if (d->classes && (d->classes[0] = strdup("video"))) d->n_classes = 1;
        if (!d->labels || !d->n_classes) rc = tb_fail(e, TUBELET_ERR_MEMORY, "out of memory");
    }
    if (rc) tb_dataset_free(d);
    return rc;
}
