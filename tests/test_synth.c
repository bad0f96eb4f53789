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

static unsigned char *read_all(const char *path, size_t *n) {
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
    b[len] = 0;
    *n = (size_t)len;
    return b;
}

static int same_file(const char *a, const char *b) {
    size_t na = 0, nb = 0;
    unsigned char *x = read_all(a, &na), *y = read_all(b, &nb);
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
    printf("render fingerprint %016llx\n", (unsigned long long)h);
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

int main(void) {
    snprintf(g_dir, sizeof g_dir, "%s/tubelet_synth_XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(g_dir)) {
        printf("FATAL: mkdtemp: %s\n", strerror(errno));
        return 2;
    }
    test_classes();
    test_render_determinism();
    test_truth();
    test_temporal_only();
    rm_rf(g_dir);
    return check_done();
}
