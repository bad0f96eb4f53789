/* Tests for src/synth: the classes are temporal only (a clip of one class is exactly its pair's
 * clip reversed; statistics of the set of frames do not separate a pair, statistics of their order
 * do), the ground truth moves the way the class names say, rendering and files are deterministic,
 * the dataset's layout (CSVs, labels.txt, relative paths) is right, every file decodes with our
 * decoder to the clip's frames, and bad directories or options give clear errors and no CSV.
 * Prints one line per failed check and finally "N passed, M failed". */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <dirent.h>
#include <ftw.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "common.h"
#include "synth/synth.h"
#include "video/video.h"

static char g_dir[4096];

static char *tpath(const char *fmt, const char *a) {
    static char bufs[8][4400];
    static int k;
    char *b = bufs[k++ % 8], name[256];
    snprintf(name, sizeof name, fmt, a);
    snprintf(b, sizeof bufs[0], "%s/%s", g_dir, name);
    return b;
}

static int rm_cb(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(p);
}
static void rm_rf(const char *p) { nftw(p, rm_cb, 16, FTW_DEPTH | FTW_PHYS); }

static int exists(const char *p) {
    struct stat st;
    return stat(p, &st) == 0;
}

static int same_file(const char *a, const char *b) {
    size_t na = 0, nb = 0;
    unsigned char *x = check_read_file(a, &na), *y = check_read_file(b, &nb);
    int same = x && y && na == nb && !memcmp(x, y, na);
    free(x);
    free(y);
    return same;
}

/* ------------------------------------------------------------ classes and parameters */

static void test_classes(void) {
    CHECK(TB_SYNTH_N_CLASSES >= 8, "only %d classes", TB_SYNTH_N_CLASSES);
    for (int c = 0; c < TB_SYNTH_N_CLASSES; c++) {
        const char *n = tb_synth_class_name(c);
        CHECK(n && tb_synth_class_id(n) == c, "class %d name/id round trip", c);
        CHECK(tb_synth_opposite(tb_synth_opposite(c)) == c && tb_synth_opposite(c) != c,
              "class %d opposite", c);
        for (const char *q = n; q && *q; q++)
            CHECK((*q >= 'a' && *q <= 'z') || *q == '_', "class name %s: only [a-z_]", n);
    }
    CHECK(tb_synth_class_name(-1) == NULL && tb_synth_class_name(TB_SYNTH_N_CLASSES) == NULL,
          "names outside the range");
    CHECK(tb_synth_class_id("no_such") == -1 && tb_synth_class_id(NULL) == -1, "unknown name");
    CHECK(tb_synth_class_id("move_left") == tb_synth_opposite(tb_synth_class_id("move_right")) &&
              tb_synth_class_id("rotate_ccw") == tb_synth_opposite(tb_synth_class_id("rotate_cw")) &&
              tb_synth_class_id("shrink") == tb_synth_opposite(tb_synth_class_id("grow")) &&
              tb_synth_class_id("recede") == tb_synth_opposite(tb_synth_class_id("approach")),
          "the named pairs are opposites");

    tb_synth_params p = tb_synth_default_params();
    tb_err e = {{0}};
    CHECK(tb_synth_check_params(&p, &e) == 0, "defaults: %s", e.msg);
    CHECK(p.size == 64 && p.frames == 16, "defaults are 64x64, 16 frames");
    struct {
        int size, frames, dis;
        float noise;
        const char *word;
    } bad[] = {{63, 16, 3, 1, "even"}, {8, 16, 3, 1, "size"},  {64, 2, 3, 1, "frames"},
               {64, 16, 4, 1, "distractors"}, {64, 16, 3, -1, "noise"}, {64, 16, 3, NAN, "noise"}};
    uint8_t one[4];
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        tb_synth_params q = {bad[i].size, bad[i].frames, bad[i].dis, bad[i].noise};
        e.msg[0] = 0;
        int rc = tb_synth_render(&q, 0, 1, one, NULL, &e);
        CHECK(rc == TUBELET_ERR_ARG && strstr(e.msg, bad[i].word), "bad params %zu: rc %d '%s'", i,
              rc, e.msg);
    }
    CHECK(tb_synth_render(&p, TB_SYNTH_N_CLASSES, 1, one, NULL, &e) == TUBELET_ERR_ARG &&
              strstr(e.msg, "class"), "bad class id: %s", e.msg);
    CHECK(tb_synth_render(&p, 0, 1, NULL, NULL, &e) == TUBELET_ERR_ARG, "NULL output");
}

/* ------------------------------------------------------------ rendering */

static void test_render_determinism(void) {
    tb_synth_params p = tb_synth_default_params();
    size_t n = tb_synth_clip_bytes(&p), fb = n / p.frames;
    uint8_t *a = malloc(n), *b = malloc(n);
    tb_err e = {{0}};
    int T = p.frames;
    for (int c = 0; c < TB_SYNTH_N_CLASSES; c++) {
        uint64_t s = tb_synth_clip_seed(7, TB_SYNTH_TRAIN, c, 3);
        CHECK(tb_synth_render(&p, c, s, a, NULL, &e) == 0, "render: %s", e.msg);
        memset(b, 0, n);
        tb_synth_render(&p, c, s, b, NULL, &e);
        CHECK(!memcmp(a, b, n), "%s: same seed, different bytes", tb_synth_class_name(c));
        tb_synth_render(&p, c, s + 1, b, NULL, &e);
        CHECK(memcmp(a, b, n), "%s: different seeds, same bytes", tb_synth_class_name(c));
        /* frames differ from each other: there is motion */
        CHECK(memcmp(a, a + (size_t)(T - 1) * fb, fb), "%s: first and last frames equal",
              tb_synth_class_name(c));
        /* the opposite class with the same clip seed is this clip backwards, byte for byte */
        tb_synth_render(&p, tb_synth_opposite(c), s, b, NULL, &e);
        int rev = 1;
        for (int t = 0; t < T; t++) rev &= !memcmp(a + (size_t)t * fb, b + (size_t)(T - 1 - t) * fb, fb);
        CHECK(rev, "%s: not the exact reverse of %s", tb_synth_class_name(tb_synth_opposite(c)),
              tb_synth_class_name(c));
    }
    /* seeds: split, class and index all matter */
    CHECK(tb_synth_clip_seed(0, 0, 0, 0) != tb_synth_clip_seed(0, 1, 0, 0) &&
              tb_synth_clip_seed(0, 0, 0, 0) != tb_synth_clip_seed(0, 0, 1, 0) &&
              tb_synth_clip_seed(0, 0, 0, 0) != tb_synth_clip_seed(0, 0, 0, 1) &&
              tb_synth_clip_seed(0, 0, 0, 0) != tb_synth_clip_seed(1, 0, 0, 0),
          "clip seeds collide");
    /* A fingerprint of a few renders, fixed here: the renderer uses no libm, so these bytes are the
     * same on every IEEE-754 machine and compiler. Changing the renderer changes the dataset:
     * update the constant deliberately (and say so in docs/synth.md). */
    uint64_t h = 0xCBF29CE484222325ull;
    for (int c = 0; c < TB_SYNTH_N_CLASSES; c++) {
        tb_synth_render(&p, c, tb_synth_clip_seed(0, TB_SYNTH_TRAIN, c, 0), a, NULL, &e);
        for (size_t i = 0; i < n; i++) h = (h ^ a[i]) * 0x100000001B3ull;
    }
    CHECK(h == 0xD36FBA784EED9661ull, "render fingerprint %016llx, want d36fba784eed9661",
          (unsigned long long)h);
    /* other sizes, no distractors, no noise: still valid */
    tb_synth_params q = {32, 5, 0, 0};
    size_t nq = tb_synth_clip_bytes(&q);
    uint8_t *c0 = malloc(nq);
    CHECK(tb_synth_render(&q, TB_SYNTH_ORBIT_CCW, 5, c0, NULL, &e) == 0, "32x32x5: %s", e.msg);
    free(c0);
    free(a);
    free(b);
}

/* The ground truth moves as the names say (x right, y down, angle clockwise on screen). */
static void test_truth(void) {
    tb_synth_params p = tb_synth_default_params();
    int T = p.frames, S = p.size;
    uint8_t *rgb = malloc(tb_synth_clip_bytes(&p));
    tb_synth_truth tr[64];
    tb_err e;
    for (int c = 0; c < TB_SYNTH_N_CLASSES; c++) {
        int bad = 0;
        for (int i = 0; i < 20; i++) {
            tb_synth_render(&p, c, tb_synth_clip_seed(3, 0, c, i), rgb, tr, &e);
            const tb_synth_truth *a = &tr[0], *z = &tr[T - 1];
            int ok;
            double cross = 0, mx = 0, my = 0;
            for (int t = 0; t < T; t++) mx += tr[t].x / T, my += tr[t].y / T;
            for (int t = 0; t + 1 < T; t++)
                cross += (tr[t].x - mx) * (tr[t + 1].y - tr[t].y) - (tr[t].y - my) * (tr[t + 1].x - tr[t].x);
            switch (c) {
            case TB_SYNTH_MOVE_RIGHT: ok = z->x - a->x > 0.25 * S; break;
            case TB_SYNTH_MOVE_LEFT: ok = a->x - z->x > 0.25 * S; break;
            case TB_SYNTH_MOVE_DOWN: ok = z->y - a->y > 0.25 * S; break;
            case TB_SYNTH_MOVE_UP: ok = a->y - z->y > 0.25 * S; break;
            case TB_SYNTH_ROTATE_CW: ok = z->angle - a->angle > 0.1 * (T - 1); break;
            case TB_SYNTH_ROTATE_CCW: ok = a->angle - z->angle > 0.1 * (T - 1); break;
            case TB_SYNTH_GROW: ok = z->radius > 1.6 * a->radius && a->blur == z->blur; break;
            case TB_SYNTH_SHRINK: ok = a->radius > 1.6 * z->radius && a->blur == z->blur; break;
            case TB_SYNTH_APPROACH:
                ok = z->radius > 1.6 * a->radius && a->haze > z->haze + 0.4 && a->blur > z->blur;
                break;
            case TB_SYNTH_RECEDE:
                ok = a->radius > 1.6 * z->radius && z->haze > a->haze + 0.4 && z->blur > a->blur;
                break;
            case TB_SYNTH_ORBIT_CW: ok = cross > 0; break;
            default: ok = cross < 0; break;
            }
            /* the object stays mostly in the frame */
            for (int t = 0; t < T; t++)
                ok &= tr[t].x > -0.1 * S && tr[t].x < 1.1 * S && tr[t].y > -0.1 * S && tr[t].y < 1.1 * S;
            bad += !ok;
        }
        CHECK(bad == 0, "%s: %d of 20 clips' ground truth disagrees with the name",
              tb_synth_class_name(c), bad);
    }
    free(rgb);
}

/* ------------------------------------------------------------ temporal-only, from pixels */

#define NCLIP 50   /* clips per class */

typedef struct {
    double order;        /* the pair's order statistic: > 0 for the even (canonical) class */
    double set[4 * 256]; /* order-invariant features: sorted per-frame features */
    int n_set;
} clip_stats;

/* +1 if b looks like a rotated clockwise (on screen) about (cx, cy) better than anticlockwise,
 * -1 otherwise: the best sum of squared differences within radius S/4 over a few angles each way,
 * b(p) against a(c + R(-theta)(p - c)) sampled bilinearly. */
static double rotation_vote(const float *a, const float *b, int S, double cx, double cy) {
    static const double deg[3] = {6, 13, 20};
    double best[2] = {1e300, 1e300}, rad = 0.25 * S;
    for (int dir = 0; dir < 2; dir++)
        for (int k = 0; k < 3; k++) {
            double th = (dir ? -1 : 1) * deg[k] * 3.14159265358979 / 180, c = cos(th), sn = sin(th);
            double ssd = 0;
            for (int y = 0; y < S; y++)
                for (int x = 0; x < S; x++) {
                    double dx = x - cx, dy = y - cy;
                    if (dx * dx + dy * dy > rad * rad) continue;
                    /* y points down, so R(theta) with theta > 0 turns clockwise on screen */
                    double sx = cx + c * dx + sn * dy, sy = cy - sn * dx + c * dy;
                    int x0 = (int)floor(sx), y0 = (int)floor(sy);
                    if (x0 < 0 || y0 < 0 || x0 + 1 >= S || y0 + 1 >= S) continue;
                    double fx = sx - x0, fy = sy - y0;
                    const float *q = a + (size_t)y0 * S + x0;
                    double v = (1 - fy) * ((1 - fx) * q[0] + fx * q[1]) + fy * ((1 - fx) * q[S] + fx * q[S + 1]);
                    double d = b[(size_t)y * S + x] - v;
                    ssd += d * d;
                }
            if (ssd < best[dir]) best[dir] = ssd;
        }
    return best[0] < best[1] ? 1 : -1;
}

/* The main object of one grey frame, found as the synth design allows: it is the largest
 * connected region (4-neighbours) of pixels whose grey level differs by more than 45 from the
 * frame's median (the background covers most of the frame and varies less; objects differ from
 * its mean by 40-60 and more). Centroid and area; area 0 and the frame centre if none. */
static void main_object(const float *f, int S, double *cx, double *cy, double *area) {
    size_t P = (size_t)S * S;
    int hist[256] = {0}, k = 0, seen = 0;
    for (size_t i = 0; i < P; i++) hist[f[i] < 0 ? 0 : f[i] > 255 ? 255 : (int)f[i]]++;
    while (k < 255 && (seen += hist[k]) < (int)(P / 2)) k++;
    int *lab = calloc(P, sizeof(int)), *stack = malloc(sizeof(int) * P), best = 0, nl = 0;
    double bx = S / 2.0, by = S / 2.0;
    for (size_t i = 0; i < P; i++) {
        if (lab[i] || fabs(f[i] - k) <= 45) continue;
        int top = 0, n = 0;
        double sx = 0, sy = 0;
        lab[i] = ++nl;
        stack[top++] = (int)i;
        while (top) {
            int q = stack[--top], x = q % S, y = q / S;
            n++, sx += x, sy += y;
            int nb[4] = {x > 0 ? q - 1 : -1, x + 1 < S ? q + 1 : -1, y > 0 ? q - S : -1,
                         y + 1 < S ? q + S : -1};
            for (int j = 0; j < 4; j++)
                if (nb[j] >= 0 && !lab[nb[j]] && fabs(f[nb[j]] - k) > 45) {
                    lab[nb[j]] = nl;
                    stack[top++] = nb[j];
                }
        }
        if (n > best) best = n, bx = sx / n, by = sy / n;
    }
    free(lab);
    free(stack);
    *cx = bx;
    *cy = by;
    *area = best;
}

/* Statistics of one clip computed from its pixels only. Frames are converted to grey and scaled
 * to a median of 128 (which removes the flicker).
 * Per-frame features, functions of one frame each: the main object's centroid and area
 * (main_object) and the gradient energy. The set features are these sorted — the multiset of each
 * over the clip, the order forgotten (centroids relative to their clip mean).
 * The order statistic of each pair, positive for the even (canonical) class: the slope over time of
 * the centroid's x (move right/left) or y (down/up), of the area (grow/shrink, approach/recede),
 * the area swept by the centroid (orbit), and for rotation the votes of rotation_vote between
 * consecutive frames about the centroid. */
static void clip_statistics(const uint8_t *rgb, int T, int S, int pair, clip_stats *cs) {
    size_t P = (size_t)S * S;
    float *g = malloc(sizeof(float) * P * T);
    double ox[256], oy[256], oa[256], ge[256], mx = 0, my = 0;
    for (int t = 0; t < T; t++) {
        float *f = g + t * P;
        int hist[256] = {0}, k = 0, seen = 0;
        for (size_t i = 0; i < P; i++) {
            const uint8_t *q = rgb + ((size_t)t * P + i) * 3;
            f[i] = 0.299f * q[0] + 0.587f * q[1] + 0.114f * q[2];
            hist[(int)f[i] > 255 ? 255 : (int)f[i]]++;
        }
        while (k < 255 && (seen += hist[k]) < (int)(P / 2)) k++;
        for (size_t i = 0; i < P; i++) f[i] *= 128.0f / (k + 0.5f);
        main_object(f, S, &ox[t], &oy[t], &oa[t]);
        ge[t] = 0;
        for (int y = 1; y < S - 1; y++)
            for (int x = 1; x < S - 1; x++) {
                size_t i = (size_t)y * S + x;
                ge[t] += fabs(f[i + 1] - f[i - 1]) + fabs(f[i + S] - f[i - S]);
            }
        mx += ox[t] / T;
        my += oy[t] / T;
    }
    double *feat[4] = {ox, oy, oa, ge}, off[4] = {mx, my, 0, 0};
    int n = 0;
    for (int k = 0; k < 4; k++) {
        double v[256];
        for (int t = 0; t < T; t++) v[t] = feat[k][t] - off[k];
        for (int i = 1; i < T; i++) /* insertion sort: the multiset, order forgotten */
            for (int j = i; j > 0 && v[j - 1] > v[j]; j--) {
                double x = v[j];
                v[j] = v[j - 1];
                v[j - 1] = x;
            }
        for (int t = 0; t < T; t++) cs->set[n++] = v[t];
    }
    cs->n_set = n;

    double tm = (T - 1) / 2.0, slope_x = 0, slope_y = 0, slope_a = 0, swept = 0, votes = 0;
    for (int t = 0; t < T; t++) {
        slope_x += (t - tm) * ox[t];
        slope_y += (t - tm) * oy[t];
        slope_a += (t - tm) * oa[t];
        if (t + 1 < T) {
            swept += (ox[t] - mx) * (oy[t + 1] - oy[t]) - (oy[t] - my) * (ox[t + 1] - ox[t]);
            if (pair == 2)
                votes += rotation_vote(g + t * P, g + (t + 1) * P, S, 0.5 * (ox[t] + ox[t + 1]),
                                       0.5 * (oy[t] + oy[t + 1]));
        }
    }
    static const int which[6] = {0, 1, 2, 3, 3, 4};
    double order[5] = {slope_x, slope_y, votes, slope_a, swept};
    cs->order = order[which[pair]];
    free(g);
}

/* Nearest class mean on standardised features, fitted on the first half of each class and scored on
 * the second half: accuracy in [0, 1], 0.5 = chance for two classes. */
static double nearest_mean_accuracy(clip_stats *a, clip_stats *b, int n) {
    int d = a[0].n_set, h = n / 2;
    double mu[2][4 * 256] = {{0}}, sd[4 * 256] = {0}, mean[4 * 256] = {0};
    for (int k = 0; k < d; k++) {
        for (int i = 0; i < h; i++) mean[k] += (a[i].set[k] + b[i].set[k]) / (2 * h);
        for (int i = 0; i < h; i++)
            sd[k] += ((a[i].set[k] - mean[k]) * (a[i].set[k] - mean[k]) +
                      (b[i].set[k] - mean[k]) * (b[i].set[k] - mean[k])) / (2 * h);
        sd[k] = sqrt(sd[k]) + 1e-9;
        for (int i = 0; i < h; i++) {
            mu[0][k] += a[i].set[k] / h;
            mu[1][k] += b[i].set[k] / h;
        }
    }
    int right = 0, total = 0;
    for (int cls = 0; cls < 2; cls++)
        for (int i = h; i < n; i++) {
            const clip_stats *c = cls ? &b[i] : &a[i];
            double d0 = 0, d1 = 0;
            for (int k = 0; k < d; k++) {
                double z = c->set[k] / sd[k];
                d0 += (z - mu[0][k] / sd[k]) * (z - mu[0][k] / sd[k]);
                d1 += (z - mu[1][k] / sd[k]) * (z - mu[1][k] / sd[k]);
            }
            right += (d1 < d0) == cls;
            total++;
        }
    return (double)right / total;
}

static void test_temporal_only(void) {
    tb_synth_params p = tb_synth_default_params();
    int T = p.frames, S = p.size, NP = TB_SYNTH_N_CLASSES / 2;
    uint8_t *rgb = malloc(tb_synth_clip_bytes(&p));
    clip_stats *st = malloc(sizeof(clip_stats) * TB_SYNTH_N_CLASSES * NCLIP);
    tb_err e;
    for (int c = 0; c < TB_SYNTH_N_CLASSES; c++)
        for (int i = 0; i < NCLIP; i++) {
            tb_synth_render(&p, c, tb_synth_clip_seed(11, TB_SYNTH_TRAIN, c, i), rgb, NULL, &e);
            clip_statistics(rgb, T, S, c / 2, &st[c * NCLIP + i]);
        }
    double teeth = 0;
    for (int pair = 0; pair < NP; pair++) {
        clip_stats *a = st + 2 * pair * NCLIP, *b = a + NCLIP;
        int right = 0;
        for (int i = 0; i < NCLIP; i++) right += (a[i].order > 0) + (b[i].order < 0);
        double order_acc = right / (2.0 * NCLIP);
        double set_acc = nearest_mean_accuracy(a, b, NCLIP);
        /* the same set features do tell this pair's clips from the next pair's */
        int other = (pair + 1) % NP;
        double pair_acc = nearest_mean_accuracy(a, st + 2 * other * NCLIP, NCLIP);
        teeth += pair_acc / NP;
        const char *na = tb_synth_class_name(2 * pair), *nb = tb_synth_class_name(2 * pair + 1);
        printf("%-10s vs %-10s  frame-set accuracy %.2f  order accuracy %.2f  (frame-set, %s vs %s: %.2f)\n",
               na, nb, set_acc, order_acc, na, tb_synth_class_name(2 * other), pair_acc);
        CHECK(order_acc >= 0.9, "%s/%s: the order statistic separates only %.2f", na, nb, order_acc);
        CHECK(set_acc <= 0.7 && set_acc >= 0.3, "%s/%s: frame-set statistics separate %.2f", na, nb,
              set_acc);
    }
    CHECK(teeth >= 0.75, "the frame-set classifier tells pairs apart only %.2f on average", teeth);
    free(st);
    free(rgb);
}

/* ------------------------------------------------------------ files */

typedef struct {
    int calls, last, total, monotonic;
} prog_t;

static void prog_cb(void *user, int done, int total) {
    prog_t *p = user;
    p->monotonic &= done == p->last + 1;
    p->last = done;
    p->total = total;
    p->calls++;
}

static int count_lines(const char *text) {
    int n = 0;
    for (const char *q = text; *q; q++) n += *q == '\n';
    return n;
}

/* Checks DIR's lists and decodes every listed video, comparing it with the clip rendered in
 * memory. Returns the number of rows seen in both CSVs. */
static int check_dataset(const char *dir, const tb_synth_dataset_params *dp, int n_train, int n_val) {
    char path[4400];
    size_t len;
    snprintf(path, sizeof path, "%s/labels.txt", dir);
    char *labels = (char *)check_read_file(path, &len);
    CHECK(labels && count_lines(labels) == TB_SYNTH_N_CLASSES, "%s: labels.txt", dir);
    if (!labels) return 0;
    char *names[TB_SYNTH_N_CLASSES] = {0};
    int nn = 0;
    for (char *tok = strtok(labels, "\n"); tok && nn < TB_SYNTH_N_CLASSES; tok = strtok(NULL, "\n"))
        names[nn++] = tok;
    for (int c = 0; c < nn; c++)
        CHECK(!strcmp(names[c], tb_synth_class_name(c)), "labels.txt line %d is %s", c + 1, names[c]);
    const char *ext = tb_synth_codec_ext(dp->codec);
    int rows = 0, T = dp->clip.frames, S = dp->clip.size;
    size_t cb = tb_synth_clip_bytes(&dp->clip);
    uint8_t *want = malloc(cb), *got = malloc(cb);
    int64_t idx[256];
    for (int t = 0; t < T; t++) idx[t] = t;
    for (int split = 0; split < 2; split++) {
        const char *sn = split ? "val" : "train";
        int per = split ? n_val : n_train, count[TB_SYNTH_N_CLASSES] = {0};
        snprintf(path, sizeof path, "%s/%s.csv", dir, sn);
        char *csv = (char *)check_read_file(path, &len);
        CHECK(csv != NULL, "%s: missing", path);
        if (!csv) continue;
        CHECK(!strncmp(csv, "path,label\n", 11), "%s: header is not path,label", path);
        CHECK(count_lines(csv) == 1 + per * TB_SYNTH_N_CLASSES, "%s: %d lines, want %d", path,
              count_lines(csv), 1 + per * TB_SYNTH_N_CLASSES);
        char *save = NULL;
        strtok_r(csv, "\n", &save);
        for (char *line = strtok_r(NULL, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
            rows++;
            char *comma = strchr(line, ',');
            CHECK(comma && !strchr(comma + 1, ','), "%s: row '%s' is not path,label", sn, line);
            if (!comma) continue;
            *comma = 0;
            const char *rel = line, *label = comma + 1;
            int c = -1;
            for (int k = 0; k < nn; k++)
                if (!strcmp(label, names[k])) c = k;
            CHECK(c >= 0, "%s: label %s is not in labels.txt", sn, label);
            if (c < 0) continue;
            char prefix[64], expect[256];
            snprintf(prefix, sizeof prefix, "videos/%s/", sn);
            snprintf(expect, sizeof expect, "videos/%s/%s_%04d.%s", sn, label, count[c], ext);
            CHECK(rel[0] != '/' && !strncmp(rel, prefix, strlen(prefix)) && !strcmp(rel, expect),
                  "%s: path %s, want %s", sn, rel, expect);
            int n = count[c]++;
            char full[4400];
            snprintf(full, sizeof full, "%s/%s", dir, rel);
            tb_video *v = NULL;
            tb_err e = {{0}};
            tb_video_params vp = tb_video_default_params();
            vp.n_threads = 1;
            int rc = tb_video_open(&v, full, &vp, &e);
            CHECK(rc == 0, "open %s: %s", rel, e.msg);
            if (rc) continue;
            const tb_video_info *in = tb_video_get_info(v);
            CHECK(in->n_frames == T && in->width == S && in->height == S,
                  "%s: %lld frames of %dx%d, want %d of %dx%d", rel, (long long)in->n_frames,
                  in->width, in->height, T, S, S);
            CHECK(fabs(in->fps - dp->fps) < 1e-6, "%s: %g fps, want %d", rel, in->fps, dp->fps);
            CHECK(!strcmp(in->codec, dp->codec == TB_SYNTH_MJPEG ? "mjpeg" : "h264"), "%s: codec %s", rel,
                  in->codec);
            if (in->n_frames == T && in->width == S && in->height == S) {
                rc = tb_video_decode(v, idx, T, got, &e);
                CHECK(rc == 0, "decode %s: %s", rel, e.msg);
                tb_synth_render(&dp->clip, c, tb_synth_clip_seed(dp->seed, split, c, n), want, NULL, &e);
                /* the file is this clip, frames in this order: much closer to it than to the
                 * clip reversed (which is the opposite class) */
                double mae = 0, mae_rev = 0;
                size_t fb = cb / T;
                for (size_t i = 0; i < cb; i++) {
                    size_t t = i / fb, j = (T - 1 - t) * fb + i % fb;
                    mae += abs((int)want[i] - (int)got[i]);
                    mae_rev += abs((int)want[j] - (int)got[i]);
                }
                mae /= cb;
                mae_rev /= cb;
                CHECK(rc == 0 && mae < 14 && mae < 0.9 * mae_rev,
                      "%s: decoded frames differ from the clip by %.2f on average (reversed: %.2f)",
                      rel, mae, mae_rev);
            }
            tb_video_close(v);
        }
        for (int c = 0; c < nn; c++)
            CHECK(count[c] == per, "%s: %d rows of %s, want %d", sn, count[c], names[c], per);
        free(csv);
    }
    free(want);
    free(got);
    free(labels);
    return rows;
}

/* Counts the files under DIR/videos/{train,val}, and those ending in .tmp. */
static int count_videos(const char *dir, int *tmp_files) {
    int n = 0;
    *tmp_files = 0;
    for (int s = 0; s < 2; s++) {
        char path[4400];
        snprintf(path, sizeof path, "%s/videos/%s", dir, s ? "val" : "train");
        DIR *d = opendir(path);
        if (!d) continue;
        struct dirent *de;
        while ((de = readdir(d))) {
            if (de->d_name[0] == '.') continue;
            n++;
            size_t l = strlen(de->d_name);
            if (l > 4 && !strcmp(de->d_name + l - 4, ".tmp")) (*tmp_files)++;
        }
        closedir(d);
    }
    return n;
}

/* Every file of a's tree has a byte-identical twin in b (same relative path). */
static int same_tree(const char *a, const char *b, int *n_files, int *n_same) {
    const char *rels[] = {"labels.txt", "train.csv", "val.csv", "synth.json"};
    *n_files = *n_same = 0;
    char pa[4700], pb[4700];
    for (size_t i = 0; i < 4; i++) {
        snprintf(pa, sizeof pa, "%s/%s", a, rels[i]);
        snprintf(pb, sizeof pb, "%s/%s", b, rels[i]);
        (*n_files)++;
        *n_same += same_file(pa, pb);
    }
    for (int s = 0; s < 2; s++) {
        char sub[4400];
        snprintf(sub, sizeof sub, "%s/videos/%s", a, s ? "val" : "train");
        DIR *d = opendir(sub);
        if (!d) continue;
        struct dirent *de;
        while ((de = readdir(d))) {
            if (de->d_name[0] == '.') continue;
            snprintf(pa, sizeof pa, "%s/%s", sub, de->d_name);
            snprintf(pb, sizeof pb, "%s/videos/%s/%s", b, s ? "val" : "train", de->d_name);
            (*n_files)++;
            *n_same += same_file(pa, pb);
        }
        closedir(d);
    }
    return *n_files == *n_same;
}

static void test_dataset(void) {
    tb_synth_dataset_params dp = tb_synth_dataset_default_params();
    CHECK(dp.per_class == 100 && dp.val_percent == 20 && dp.fps == 8 && dp.codec == TB_SYNTH_H264,
          "dataset defaults");
    dp.clip.size = 32;
    dp.clip.frames = 8;
    dp.per_class = 3;
    dp.val_percent = 34; /* round(3 * 0.34) = 1 val clip per class, 2 train */
    dp.seed = 5;
    dp.n_threads = 2;
    prog_t pr = {0, 0, 0, 1};
    dp.progress = prog_cb;
    dp.progress_user = &pr;
    char d1[4400], d2[4400], d3[4400], obst[4400], foreign[4400];
    snprintf(d1, sizeof d1, "%s", tpath("%s", "ds1"));
    snprintf(d2, sizeof d2, "%s", tpath("%s", "ds2"));
    snprintf(d3, sizeof d3, "%s", tpath("%s", "ds3"));
    snprintf(obst, sizeof obst, "%s", tpath("%s", "ds1/videos/val/shrink_0000.mp4"));
    snprintf(foreign, sizeof foreign, "%s", tpath("%s", "foreign"));
    dp.dir = d1;
    tb_synth_summary sum;
    tb_err e = {{0}};
    int rc = tb_synth_write_dataset(&dp, &sum, &e);
    CHECK(rc == 0, "write dataset: %s", e.msg);
    if (rc) return;
    int NC = TB_SYNTH_N_CLASSES;
    CHECK(sum.n_train == 2 * NC && sum.n_val == NC && sum.video_bytes > 0, "summary %d/%d/%lld",
          sum.n_train, sum.n_val, (long long)sum.video_bytes);
    CHECK(pr.calls == 3 * NC && pr.last == 3 * NC && pr.total == 3 * NC && pr.monotonic,
          "progress: %d calls, last %d of %d, monotonic %d", pr.calls, pr.last, pr.total, pr.monotonic);
    CHECK(check_dataset(d1, &dp, 2, 1) == 3 * NC, "rows");
    int tmpf, nv = count_videos(d1, &tmpf);
    CHECK(nv == 3 * NC && tmpf == 0, "%d video files (%d .tmp), want %d", nv, tmpf, 3 * NC);
    size_t len;
    char *js = (char *)check_read_file(tpath("%s", "ds1/synth.json"), &len);
    CHECK(js && strstr(js, "\"frames\": 8") && strstr(js, "\"seed\": 5") &&
              strstr(js, "\"codec\": \"h264\""), "synth.json: %s", js ? js : "missing");
    free(js);

    /* determinism: the same options with another thread count give the same bytes; another seed
     * gives other videos under the same names and the same lists */
    dp.dir = d2;
    dp.n_threads = 1;
    dp.progress = NULL;
    rc = tb_synth_write_dataset(&dp, &sum, &e);
    CHECK(rc == 0, "second write: %s", e.msg);
    int nf, ns;
    CHECK(same_tree(d1, d2, &nf, &ns) && nf == 4 + 3 * NC, "same seed: %d of %d files identical",
          ns, nf);
    dp.dir = d3;
    dp.seed = 6;
    rc = tb_synth_write_dataset(&dp, &sum, &e);
    CHECK(rc == 0, "third write: %s", e.msg);
    same_tree(d1, d3, &nf, &ns);
    CHECK(ns == 3 && nf == 4 + 3 * NC, "seed 6 vs 5: %d of %d files identical, want the 3 lists", ns,
          nf);

    /* writing again over an earlier output: fewer clips, stale videos removed */
    dp.dir = d1;
    dp.seed = 5;
    dp.per_class = 2; /* round(2 * 0.34) = 1 val, 1 train */
    rc = tb_synth_write_dataset(&dp, &sum, &e);
    CHECK(rc == 0, "rewrite: %s", e.msg);
    nv = count_videos(d1, &tmpf);
    CHECK(nv == 2 * NC && tmpf == 0, "after rewrite %d video files, want %d", nv, 2 * NC);
    CHECK(check_dataset(d1, &dp, 1, 1) == 2 * NC, "rows after rewrite");
    /* the clips that stayed are the same bytes: clip i of a split does not depend on per_class */
    CHECK(same_file(tpath("%s", "ds1/videos/train/grow_0000.mp4"), tpath("%s", "ds2/videos/train/grow_0000.mp4")),
          "train clip 0 changed with per_class");

    /* a failure leaves no CSV: an obstacle where a video of ours goes */
    remove(obst);
    mkdir(obst, 0777);
    FILE *f = fopen(tpath("%s", "ds1/videos/val/shrink_0000.mp4/x"), "w");
    if (f) fclose(f);
    rc = tb_synth_write_dataset(&dp, &sum, &e);
    CHECK(rc == TUBELET_ERR_IO && strstr(e.msg, "shrink_0000.mp4"), "obstacle: rc %d '%s'", rc, e.msg);
    CHECK(!exists(tpath("%s", "ds1/train.csv")) && !exists(tpath("%s", "ds1/val.csv")),
          "a failed run left a CSV");
    rm_rf(obst);
    rc = tb_synth_write_dataset(&dp, &sum, &e);
    CHECK(rc == 0 && exists(tpath("%s", "ds1/val.csv")), "after removing the obstacle: %s", e.msg);

    /* a directory that is not ours is refused unless force */
    mkdir(foreign, 0777);
    f = fopen(tpath("%s", "foreign/notes.txt"), "w");
    if (f) fclose(f);
    dp.dir = foreign;
    rc = tb_synth_write_dataset(&dp, &sum, &e);
    CHECK(rc == TUBELET_ERR_ARG && strstr(e.msg, "not empty") && strstr(e.msg, foreign),
          "foreign dir: rc %d '%s'", rc, e.msg);
    CHECK(!exists(tpath("%s", "foreign/synth.json")) && !exists(tpath("%s", "foreign/videos")),
          "a refused directory was written to");
    dp.force = 1;
    rc = tb_synth_write_dataset(&dp, &sum, &e);
    CHECK(rc == 0 && exists(tpath("%s", "foreign/notes.txt")) && exists(tpath("%s", "foreign/train.csv")),
          "force: rc %d '%s'", rc, e.msg);
    dp.force = 0;

    /* a path under a regular file; bad options */
    dp.dir = tpath("%s", "foreign/notes.txt/sub");
    rc = tb_synth_write_dataset(&dp, &sum, &e);
    CHECK(rc == TUBELET_ERR_IO && strstr(e.msg, "notes.txt"), "dir under a file: rc %d '%s'", rc, e.msg);
    dp.dir = tpath("%s", "foreign/notes.txt");
    rc = tb_synth_write_dataset(&dp, &sum, &e);
    CHECK(rc == TUBELET_ERR_ARG && strstr(e.msg, "not a directory"), "dir is a file: rc %d '%s'", rc,
          e.msg);
    dp.dir = tpath("%s", "never");
    struct {
        int per, val, fps, codec;
        const char *word;
    } bad[] = {{0, 20, 8, 0, "per_class"}, {2, 101, 8, 0, "val_percent"}, {2, 20, 0, 0, "fps"},
               {2, 20, 8, 7, "codec"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        tb_synth_dataset_params q = dp;
        q.per_class = bad[i].per;
        q.val_percent = bad[i].val;
        q.fps = bad[i].fps;
        q.codec = (tb_synth_codec)bad[i].codec;
        rc = tb_synth_write_dataset(&q, &sum, &e);
        CHECK(rc == TUBELET_ERR_ARG && strstr(e.msg, bad[i].word), "bad option %zu: rc %d '%s'", i, rc,
              e.msg);
    }
    CHECK(!exists(dp.dir), "bad options created the directory");
    CHECK(tb_synth_write_dataset(NULL, &sum, &e) == TUBELET_ERR_ARG, "NULL params");

    /* MJPEG in .avi: intra-only, needs no libx264 */
    dp.dir = tpath("%s", "mjpeg");
    dp.codec = TB_SYNTH_MJPEG;
    dp.per_class = 1;
    dp.val_percent = 0;
    rc = tb_synth_write_dataset(&dp, &sum, &e);
    CHECK(rc == 0, "mjpeg: %s", e.msg);
    if (!rc) CHECK(check_dataset(dp.dir, &dp, 1, 0) == NC, "mjpeg rows");
}

static void test_encode_errors(void) {
    tb_synth_params p = {16, 4, 0, 0};
    uint8_t *rgb = calloc(tb_synth_clip_bytes(&p), 1);
    tb_err e = {{0}};
    char *bad = tpath("%s", "no/such/dir/x.mp4");
    int rc = tb_synth_encode(bad, rgb, 4, 16, 8, TB_SYNTH_H264, &e);
    CHECK(rc == TUBELET_ERR_IO && strstr(e.msg, "x.mp4"), "unwritable: rc %d '%s'", rc, e.msg);
    CHECK(!exists(bad), "left a file");
    rc = tb_synth_encode(tpath("%s", "odd.mp4"), rgb, 4, 15, 8, TB_SYNTH_H264, &e);
    CHECK(rc == TUBELET_ERR_ARG && strstr(e.msg, "even"), "odd size: rc %d '%s'", rc, e.msg);
    CHECK(tb_synth_codec_from_name("h264") == TB_SYNTH_H264 &&
              tb_synth_codec_from_name("mjpeg") == TB_SYNTH_MJPEG && tb_synth_codec_from_name("vp9") == -1,
          "codec names");
    /* one encode, twice: the same bytes */
    for (size_t i = 0; i < tb_synth_clip_bytes(&p); i++) rgb[i] = (uint8_t)(i * 7);
    rc = tb_synth_encode(tpath("%s", "a.mp4"), rgb, 4, 16, 8, TB_SYNTH_H264, &e) |
         tb_synth_encode(tpath("%s", "b.mp4"), rgb, 4, 16, 8, TB_SYNTH_H264, &e);
    CHECK(rc == 0 && same_file(tpath("%s", "a.mp4"), tpath("%s", "b.mp4")), "encode twice: %s", e.msg);
    free(rgb);
}

/* Intra-only coding keeps the pairs exact in the files too: the file of a clip and the file of its
 * opposite class (same clip seed) decode to the same frames in reverse order, bit for bit. */
static void test_encoded_reversal(void) {
    tb_synth_params p = tb_synth_default_params();
    int T = p.frames, S = p.size;
    size_t cb = tb_synth_clip_bytes(&p), fb = cb / T;
    uint8_t *rgb = malloc(cb), *da = malloc(cb), *db = malloc(cb);
    int64_t idx[64];
    for (int t = 0; t < T; t++) idx[t] = t;
    tb_err e = {{0}};
    for (int codec = 0; codec < 2; codec++)
        for (int c = 0; c < TB_SYNTH_N_CLASSES; c += 2) {
            uint8_t *dec[2] = {da, db};
            int ok = 1;
            for (int k = 0; k < 2 && ok; k++) {
                char *path = tpath(codec ? "rev%s.avi" : "rev%s.mp4", k ? "b" : "a");
                tb_video *v = NULL;
                tb_video_params vp = tb_video_default_params();
                ok = !tb_synth_render(&p, c + k, tb_synth_clip_seed(9, 0, c, 0), rgb, NULL, &e) &&
                     !tb_synth_encode(path, rgb, T, S, 8, (tb_synth_codec)codec, &e) &&
                     !tb_video_open(&v, path, &vp, &e) && !tb_video_decode(v, idx, T, dec[k], &e);
                tb_video_close(v);
            }
            CHECK(ok, "%s: %s", tb_synth_class_name(c), e.msg);
            int same = ok;
            for (int t = 0; t < T && same; t++) same = !memcmp(da + t * fb, db + (T - 1 - t) * fb, fb);
            CHECK(same, "%s: %s and %s files do not decode to reversed frames",
                  tb_synth_codec_name((tb_synth_codec)codec), tb_synth_class_name(c),
                  tb_synth_class_name(c + 1));
        }
    free(rgb);
    free(da);
    free(db);
}

int main(int argc, char **argv) {
    check_cases(argc, argv);
    snprintf(g_dir, sizeof g_dir, "%s/tubelet_synth_XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(g_dir)) {
        printf("FATAL: mkdtemp: %s\n", strerror(errno));
        return 2;
    }
    CASE(test_classes());
    CASE(test_render_determinism());
    CASE(test_truth());
    CASE(test_temporal_only());
    CASE(test_encoded_reversal());
    CASE(test_dataset());
    CASE(test_encode_errors());
    rm_rf(g_dir);
    return check_done();
}
