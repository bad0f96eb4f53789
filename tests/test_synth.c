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

/* Box blur of radius 2, twice (about a Gaussian of sigma 2), in place; tmp has S*S floats. */
static void blur(float *f, int S, float *tmp) {
    for (int pass = 0; pass < 2; pass++) {
        for (int y = 0; y < S; y++)
            for (int x = 0; x < S; x++) {
                double s = 0;
                for (int k = -2; k <= 2; k++) {
                    int xx = x + k < 0 ? 0 : x + k >= S ? S - 1 : x + k;
                    s += f[y * S + xx];
                }
                tmp[y * S + x] = (float)(s / 5);
            }
        for (int y = 0; y < S; y++)
            for (int x = 0; x < S; x++) {
                double s = 0;
                for (int k = -2; k <= 2; k++) {
                    int yy = y + k < 0 ? 0 : y + k >= S ? S - 1 : y + k;
                    s += tmp[yy * S + x];
                }
                f[y * S + x] = (float)(s / 5);
            }
    }
}

/* Weighted centroid of max(0, |b - a| - thr), refined twice within radius rad of the previous
 * estimate (so that a distractor far away does not pull it). Returns the total weight. */
static double change_centroid(const float *a, const float *b, int S, double thr, double rad,
                              double *cx, double *cy) {
    double w = 0;
    *cx = *cy = S / 2.0;
    for (int it = 0; it < 3; it++) {
        double sw = 0, sx = 0, sy = 0, r2 = it ? rad * rad : 1e30;
        for (int y = 0; y < S; y++)
            for (int x = 0; x < S; x++) {
                double dx = x - *cx, dy = y - *cy;
                if (dx * dx + dy * dy > r2) continue;
                double d = fabs(b[y * S + x] - a[y * S + x]) - thr;
                if (d > 0) sw += d, sx += d * x, sy += d * y;
            }
        if (sw <= 0) break;
        *cx = sx / sw;
        *cy = sy / sw;
        if (!it) w = sw;
    }
    return w;
}

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

/* Statistics of one clip computed from its pixels only. Frames are converted to grey and divided
 * by their mean (which removes the flicker).
 * Set features (order-invariant): per-frame features sorted — the multiset of each, with the order
 * forgotten: x and y centroid (centred on their clip mean) and area of the foreground
 * |f - median over the clip|, and gradient energy.
 * Order statistic of each pair, from adjacent frames: the slope of the centroid of the change
 * |f[t+1] - f[t]| (translation), the least-squares rotation rate or scaling rate that explains the
 * change of the blurred frames around that centroid (brightness constancy: f_t = -grad f . v with
 * v = omega J(p - c) or s (p - c)) for rotation, grow and approach, the area swept by the
 * centroid (orbit). Positive for the even (canonical) class. */
static void clip_statistics(const uint8_t *rgb, int T, int S, int pair, clip_stats *cs) {
    size_t P = (size_t)S * S;
    float *g = malloc(sizeof(float) * P * T), *h = malloc(sizeof(float) * P * T);
    float *med = malloc(sizeof(float) * P), *tmp = malloc(sizeof(float) * P);
    for (size_t i = 0; i < P * T; i++) {
        const uint8_t *q = rgb + i * 3;
        g[i] = 0.299f * q[0] + 0.587f * q[1] + 0.114f * q[2];
    }
    for (int pass = 0; pass < 2; pass++) {
        for (size_t i = 0; i < P; i++) { /* per-pixel median over the frames */
            float v[256];
            for (int t = 0; t < T; t++) {
                float x = g[t * P + i];
                int k = t;
                while (k > 0 && v[k - 1] > x) v[k] = v[k - 1], k--;
                v[k] = x;
            }
            med[i] = T % 2 ? v[T / 2] : 0.5f * (v[T / 2 - 1] + v[T / 2]);
        }
        if (pass) break;
        /* flicker: divide each frame by the median over pixels of f / median (robust to objects) */
        for (int t = 0; t < T; t++) {
            int hist[401] = {0}, k = 0, seen = 0;
            for (size_t i = 0; i < P; i++) {
                double r = (g[t * P + i] + 8) / (med[i] + 8);
                int b = (int)((r - 0.8) * 1000 + 0.5);
                hist[b < 0 ? 0 : b > 400 ? 400 : b]++;
            }
            while (k < 400 && (seen += hist[k]) < (int)(P / 2)) k++;
            float gain = (float)(0.8 + k / 1000.0);
            for (size_t i = 0; i < P; i++) g[t * P + i] = (g[t * P + i] + 8) / gain - 8;
        }
    }
    for (int t = 0; t < T; t++) {
        memcpy(h + t * P, g + t * P, sizeof(float) * P);
        blur(h + t * P, S, tmp);
    }
    double fx[256], fy[256], fa[256], fg[256], mfx = 0, mfy = 0;
    for (int t = 0; t < T; t++) {
        double w = 0, sx = 0, sy = 0, ge = 0;
        const float *f = g + t * P;
        for (int y = 1; y < S - 1; y++)
            for (int x = 1; x < S - 1; x++) {
                size_t i = (size_t)y * S + x;
                double d = fabs(f[i] - med[i]) - 20;
                if (d > 0) w += d, sx += d * x, sy += d * y;
                ge += fabs(f[i + 1] - f[i - 1]) + fabs(f[i + S] - f[i - S]);
            }
        fx[t] = w > 0 ? sx / w : S / 2.0;
        fy[t] = w > 0 ? sy / w : S / 2.0;
        fa[t] = w;
        fg[t] = ge;
        mfx += fx[t] / T;
        mfy += fy[t] / T;
    }
    for (int t = 0; t < T; t++) fx[t] -= mfx, fy[t] -= mfy;
    double *feat[4] = {fx, fy, fa, fg};
    int n = 0;
    for (int k = 0; k < 4; k++) {
        double v[256];
        memcpy(v, feat[k], sizeof(double) * T);
        for (int i = 1; i < T; i++) /* insertion sort: the multiset, order forgotten */
            for (int j = i; j > 0 && v[j - 1] > v[j]; j--) {
                double x = v[j];
                v[j] = v[j - 1];
                v[j - 1] = x;
            }
        for (int t = 0; t < T; t++) cs->set[n++] = v[t];
    }
    cs->n_set = n;

    double cx[256], cy[256], en[256], votes = 0;
    for (int t = 0; t + 1 < T; t++) {
        en[t] = change_centroid(g + t * P, g + (t + 1) * P, S, 24, 0.25 * S, &cx[t], &cy[t]);
    }
    if (pair == 2) {
        /* the centre of rotation: a circle fitted (Kasa's algebraic fit) to the map of all the
         * clip's change near its centroid (corners of a turning square and a turning marker both
         * draw circles around it) */
        double *wm = calloc(P, sizeof(double)), cx0 = S / 2.0, cy0 = S / 2.0;
        for (int t = 0; t + 1 < T; t++)
            for (size_t i = 0; i < P; i++) {
                double d = fabs(g[(t + 1) * P + i] - g[t * P + i]) - 24;
                if (d > 0) wm[i] += d;
            }
        for (int it = 0; it < 3; it++) {
            double sw = 0, sx = 0, sy = 0, r2 = it ? 0.0625 * S * S : 1e30;
            for (int y = 0; y < S; y++)
                for (int x = 0; x < S; x++) {
                    double dx = x - cx0, dy = y - cy0;
                    if (dx * dx + dy * dy > r2) continue;
                    sw += wm[y * S + x], sx += wm[y * S + x] * x, sy += wm[y * S + x] * y;
                }
            if (sw <= 0) break;
            cx0 = sx / sw;
            cy0 = sy / sw;
        }
        /* minimise sum w (x^2 + y^2 + D x + E y + F)^2: normal equations, 3x3 */
        double A[3][4] = {{0}};
        for (int y = 0; y < S; y++)
            for (int x = 0; x < S; x++) {
                double w = wm[y * S + x], dx = x - cx0, dy = y - cy0;
                if (w <= 0 || dx * dx + dy * dy > 0.0625 * S * S) continue;
                double v[3] = {dx, dy, 1}, z = -(dx * dx + dy * dy);
                for (int i = 0; i < 3; i++) {
                    for (int j = 0; j < 3; j++) A[i][j] += w * v[i] * v[j];
                    A[i][3] += w * v[i] * z;
                }
            }
        for (int i = 0; i < 3; i++) /* Gauss-Jordan, no pivoting needed for this SPD system */
            for (int k = 0; k < 3; k++) {
                if (k == i || A[i][i] == 0) continue;
                double f = A[k][i] / A[i][i];
                for (int j = 0; j < 4; j++) A[k][j] -= f * A[i][j];
            }
        if (A[0][0] != 0 && A[1][1] != 0) {
            double ox = -0.5 * A[0][3] / A[0][0], oy = -0.5 * A[1][3] / A[1][1];
            if (ox * ox + oy * oy < 0.04 * S * S) cx0 += ox, cy0 += oy;
        }
        free(wm);
        for (int t = 0; t + 1 < T; t++) votes += rotation_vote(g + t * P, g + (t + 1) * P, S, cx0, cy0);
    }
    int m = T - 1;
    double tm = (m - 1) / 2.0, mx = 0, my = 0;
    for (int t = 0; t < m; t++) mx += cx[t] / m, my += cy[t] / m;
    double slope_x = 0, slope_y = 0, slope_e = 0, swept = 0;
    for (int t = 0; t < m; t++) {
        slope_x += (t - tm) * cx[t];
        slope_y += (t - tm) * cy[t];
        slope_e += (t - tm) * en[t];
        if (t + 1 < m)
            swept += (cx[t] - mx) * (cy[t + 1] - cy[t]) - (cy[t] - my) * (cx[t + 1] - cx[t]);
    }
    switch (pair) {
    case 0: cs->order = slope_x; break;
    case 1: cs->order = slope_y; break;
    case 2: cs->order = votes; break;
    case 5: cs->order = swept; break;
    default: cs->order = slope_e; break;
    }
    free(g);
    free(h);
    free(med);
    free(tmp);
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
    int T = p.frames, S = p.size;
    uint8_t *rgb = malloc(tb_synth_clip_bytes(&p));
    clip_stats *st = malloc(sizeof(clip_stats) * 2 * NCLIP);
    tb_err e;
    for (int pair = 0; pair < TB_SYNTH_N_CLASSES / 2; pair++) {
        for (int k = 0; k < 2; k++)
            for (int i = 0; i < NCLIP; i++) {
                int c = 2 * pair + k;
                tb_synth_render(&p, c, tb_synth_clip_seed(11, TB_SYNTH_TRAIN, c, i), rgb, NULL, &e);
                clip_statistics(rgb, T, S, pair, &st[k * NCLIP + i]);
            }
        int right = 0;
        for (int i = 0; i < NCLIP; i++) right += (st[i].order > 0) + (st[NCLIP + i].order < 0);
        double order_acc = right / (2.0 * NCLIP);
        double set_acc = nearest_mean_accuracy(st, st + NCLIP, NCLIP);
        /* the set classifier is not toothless: it tells this pair from the next one */
        int other = (pair + 1) % (TB_SYNTH_N_CLASSES / 2);
        clip_stats *ot = malloc(sizeof(clip_stats) * NCLIP);
        for (int i = 0; i < NCLIP; i++) {
            int c = 2 * other + (i & 1);
            tb_synth_render(&p, c, tb_synth_clip_seed(11, TB_SYNTH_TRAIN, c, i), rgb, NULL, &e);
            clip_statistics(rgb, T, S, other, &ot[i]);
        }
        double pair_acc = nearest_mean_accuracy(st, ot, NCLIP);
        free(ot);
        const char *a = tb_synth_class_name(2 * pair), *b = tb_synth_class_name(2 * pair + 1);
        printf("%-10s vs %-10s  frame-set accuracy %.2f   order accuracy %.2f   (set vs %s pair %.2f)\n",
               a, b, set_acc, order_acc, tb_synth_class_name(2 * other), pair_acc);
        CHECK(order_acc >= 0.9, "%s/%s: the order statistic separates only %.2f", a, b, order_acc);
        CHECK(set_acc <= 0.7 && set_acc >= 0.3, "%s/%s: frame-set statistics separate %.2f", a, b,
              set_acc);
    }
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
