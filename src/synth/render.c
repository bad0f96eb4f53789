/* Procedural clips whose classes only temporal order separates (see synth.h, docs/synth.md).
 *
 * A clip is planned from its seed (look of every object, background, the main object's path for the
 * class pair, distractors, noise level, flicker), then rendered frame by frame in the pair's
 * canonical time tau = 0..T-1 and stored at position tau (even class) or T-1-tau (odd class).
 * Everything is float/double arithmetic with +, -, *, /, sqrt and floor only, with FP contraction
 * off (no fused multiply-add), so the bytes do not depend on the platform's libm, the compiler, the
 * optimisation level or the instruction set. */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off") /* GCC ignores the STDC pragma; gnu11 would fuse a*b+c */
#endif

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "synth.h"
#include "../rng.h"

#define PI 3.14159265358979323846
#define MAX_DIS 3

static const char *const CLASS_NAMES[TB_SYNTH_N_CLASSES] = {
    "move_right", "move_left", "move_down", "move_up",  "rotate_cw", "rotate_ccw",
    "grow",       "shrink",    "approach",  "recede",   "orbit_cw",  "orbit_ccw",
};

const char *tb_synth_class_name(int class_id) {
    return class_id >= 0 && class_id < TB_SYNTH_N_CLASSES ? CLASS_NAMES[class_id] : NULL;
}

int tb_synth_class_id(const char *name) {
    for (int c = 0; name && c < TB_SYNTH_N_CLASSES; c++)
        if (!strcmp(name, CLASS_NAMES[c])) return c;
    return -1;
}

tb_synth_params tb_synth_default_params(void) {
    tb_synth_params p = {.size = 64, .frames = 16, .max_distractors = 3, .noise = 1.0f};
    return p;
}

int tb_synth_check_params(const tb_synth_params *p, tb_err *e) {
    if (!p) return tb_fail(e, TUBELET_ERR_ARG, "synth: no parameters");
    if (p->size < 16 || p->size > 512 || p->size % 2)
        return tb_fail(e, TUBELET_ERR_ARG, "synth: size must be even and in [16, 512], got %d",
                       p->size);
    if (p->frames < 4 || p->frames > 256)
        return tb_fail(e, TUBELET_ERR_ARG, "synth: frames must be in [4, 256], got %d", p->frames);
    if (p->max_distractors < 0 || p->max_distractors > MAX_DIS)
        return tb_fail(e, TUBELET_ERR_ARG, "synth: max_distractors must be in [0, %d], got %d",
                       MAX_DIS, p->max_distractors);
    if (!(p->noise >= 0.0f && p->noise <= 4.0f))
        return tb_fail(e, TUBELET_ERR_ARG, "synth: noise must be in [0, 4], got %g",
                       (double)p->noise);
    return TUBELET_OK;
}

size_t tb_synth_clip_bytes(const tb_synth_params *p) {
    return (size_t)p->frames * (size_t)p->size * (size_t)p->size * 3;
}

/* ------------------------------------------------------------------ random numbers */

static uint64_t mix64(uint64_t z) { return tb_mix64(z); }

typedef struct {
    uint64_t s;
} rng_t;

static uint64_t rng_next(rng_t *r) {
    return tb_splitmix64(&r->s);
}
static double rng_u(rng_t *r) { return (double)(rng_next(r) >> 11) * 0x1.0p-53; }
static double rng_range(rng_t *r, double a, double b) { return a + (b - a) * rng_u(r); }
static int rng_int(rng_t *r, int n) { return (int)(rng_next(r) % (uint64_t)n); }

uint64_t tb_synth_clip_seed(uint64_t seed, int split, int class_id, int index) {
    uint64_t h = mix64(seed ^ 0x5EED5EED5EED5EEDull);
    h = mix64(h ^ ((uint64_t)(uint32_t)split + 1) * 0xD1B54A32D192ED03ull);
    h = mix64(h ^ ((uint64_t)(uint32_t)class_id + 1) * 0xAEF17502108EF2D9ull);
    h = mix64(h ^ ((uint64_t)(uint32_t)index + 1) * 0x9E3779B97F4A7C15ull);
    return h;
}

/* ------------------------------------------------------------------ portable math */

/* sin and cos by reduction to [-pi/2, pi/2] and a Taylor polynomial through x^15 (error < 1e-11):
 * the same bits everywhere, unlike libm. */
static double sin_reduced(double x) {
    double x2 = x * x;
    return x * (1 - x2 / 6 * (1 - x2 / 20 * (1 - x2 / 42 * (1 - x2 / 72 * (1 - x2 / 110 *
                 (1 - x2 / 156 * (1 - x2 / 210)))))));
}

static double p_sin(double x) {
    double k = floor(x / (2 * PI) + 0.5);
    double y = x - k * (2 * PI);  /* [-pi, pi] */
    if (y > PI / 2) y = PI - y;
    else if (y < -PI / 2) y = -PI - y;
    return sin_reduced(y);
}

static double p_cos(double x) { return p_sin(x + PI / 2); }

/* exp by halving into [-1/8, 1/8], a Taylor polynomial, and squaring back; for |x| < 8. */
static double p_exp(double x) {
    int n = 0;
    while (fabs(x) > 0.125 && n < 8) {
        x *= 0.5;
        n++;
    }
    double t = 1 + x * (1 + x / 2 * (1 + x / 3 * (1 + x / 4 * (1 + x / 5 * (1 + x / 6 *
               (1 + x / 7 * (1 + x / 8)))))));
    while (n--) t *= t;
    return t;
}

static float clampf(float v, float lo, float hi) { return v < lo ? lo : v > hi ? hi : v; }

/* ------------------------------------------------------------------ shapes */

enum { SH_SQUARE, SH_DISC, SH_TRIANGLE, SH_CROSS, SH_BAR, SH_RING, N_SHAPES };

static float sd_box(float x, float y, float hx, float hy) {
    float qx = fabsf(x) - hx, qy = fabsf(y) - hy;
    float ox = qx > 0 ? qx : 0, oy = qy > 0 ? qy : 0;
    float in = qx > qy ? qx : qy;
    if (in > 0) in = 0;
    return sqrtf(ox * ox + oy * oy) + in;
}

/* Equilateral triangle of half side r, a vertex towards +y (Inigo Quilez's exact distance). */
static float sd_tri(float x, float y, float r) {
    const float k = 1.7320508f;
    x = fabsf(x) - r;
    y = y + r / k;
    if (x + k * y > 0) {
        float nx = (x - k * y) * 0.5f, ny = (-k * x - y) * 0.5f;
        x = nx;
        y = ny;
    }
    float c = x < -2 * r ? -2 * r : x > 0 ? 0 : x;
    x -= c;
    float l = sqrtf(x * x + y * y);
    return y > 0 ? -l : y < 0 ? l : 0;
}

/* Signed distance in units of the object's radius; local x is the object's "forward" axis (the
 * marker side), so that every shape shows its orientation. */
static float shape_sd(int shape, float x, float y) {
    switch (shape) {
    case SH_SQUARE: return sd_box(x, y, 0.8f, 0.8f);
    case SH_DISC: return sqrtf(x * x + y * y) - 1.0f;
    case SH_TRIANGLE: return sd_tri(y, x, 0.85f); /* vertex towards +x */
    case SH_CROSS: {
        float a = sd_box(x, y, 1.0f, 0.33f), b = sd_box(x, y, 0.33f, 1.0f);
        return a < b ? a : b;
    }
    case SH_BAR: return sd_box(x, y, 1.0f, 0.45f);
    default: return fabsf(sqrtf(x * x + y * y) - 0.75f) - 0.25f; /* ring */
    }
}

typedef struct {
    int shape;
    float col[3], mcol[3]; /* body and orientation-marker colour */
    float mx, mr;          /* marker centre on the forward axis and radius, units of the radius */
} look_t;

typedef struct {
    float x, y, r, ang, haze, aa;
} pose_t;

static float luma(const float *c) { return 0.299f * c[0] + 0.587f * c[1] + 0.114f * c[2]; }

/* A random colour whose luma differs from bg_luma by at least min_contrast (the best of 32 draws
 * otherwise), and a marker colour that stands out from it. */
static void make_look(rng_t *r, look_t *L, float bg_luma, float min_contrast) {
    L->shape = rng_int(r, N_SHAPES);
    float best = -1;
    for (int k = 0; k < 32; k++) {
        float c[3];
        for (int i = 0; i < 3; i++) c[i] = (float)rng_range(r, 0, 255);
        float d = fabsf(luma(c) - bg_luma);
        if (d > best) {
            best = d;
            memcpy(L->col, c, sizeof c);
        }
        if (d >= min_contrast) break;
    }
    int light = luma(L->col) > 128;
    for (int i = 0; i < 3; i++)
        L->mcol[i] = light ? L->col[i] * 0.3f : L->col[i] + (255 - L->col[i]) * 0.7f;
    L->mx = L->shape == SH_RING ? 0.75f : 0.45f;
    L->mr = 0.28f;
}

/* Composites one object over img (S x S x 3 floats). haze mixes the object towards haze_col;
 * aa is the width of the edge ramp in pixels (1 = antialiased, more = defocused). */
static void draw(float *img, int S, const look_t *L, const pose_t *P, const float *haze_col) {
    if (P->r <= 0.0f) return;
    float sn = (float)p_sin(P->ang), cs = (float)p_cos(P->ang);
    float inv_r = 1.0f / P->r, ext = P->r * 1.45f + P->aa + 1.0f;
    int x0 = (int)floorf(P->x - ext), x1 = (int)floorf(P->x + ext) + 1;
    int y0 = (int)floorf(P->y - ext), y1 = (int)floorf(P->y + ext) + 1;
    if (x0 < 0) x0 = 0;
    if (y0 < 0) y0 = 0;
    if (x1 > S) x1 = S;
    if (y1 > S) y1 = S;
    float edge = P->r / P->aa; /* unit distance -> ramp fraction */
    for (int py = y0; py < y1; py++) {
        for (int px = x0; px < x1; px++) {
            float dx = (float)px + 0.5f - P->x, dy = (float)py + 0.5f - P->y;
            /* local = R(-ang) d: with y pointing down, a growing angle turns clockwise on screen */
            float lx = (cs * dx + sn * dy) * inv_r, ly = (cs * dy - sn * dx) * inv_r;
            float a = clampf(0.5f - shape_sd(L->shape, lx, ly) * edge, 0.0f, 1.0f);
            if (a <= 0.0f) continue;
            float mdx = lx - L->mx;
            float m = clampf(0.5f - (sqrtf(mdx * mdx + ly * ly) - L->mr) * edge, 0.0f, 1.0f);
            float *o = img + ((size_t)py * S + px) * 3;
            for (int i = 0; i < 3; i++) {
                float c = L->col[i] + (L->mcol[i] - L->col[i]) * m;
                c = c + (haze_col[i] - c) * P->haze;
                o[i] = o[i] + (c - o[i]) * a;
            }
        }
    }
}

/* ------------------------------------------------------------------ the plan of one clip */

typedef struct {
    look_t look;
    double mx, my, vx, vy;  /* position at mid-clip and displacement over the whole clip */
    double r_mid, g;        /* radius at mid-clip and log of the size ratio over the clip */
    double ang_mid, spin;   /* angle at mid-clip and its change per frame */
    double haze_far, blur_far;
    int orbit;
    double orbit_r, orbit_mid, orbit_sweep;
    int front;              /* distractors: drawn over the main object */
} obj_plan;

typedef struct {
    int S, T, pair, n_dis;
    float bg_luma, haze_col[3];
    obj_plan main, dis[MAX_DIS];
    double sigma;           /* per-pixel noise, grey levels */
    float *gain;            /* T flicker gains, canonical order */
    float *bg;              /* S x S x 3 */
} plan_t;

static void make_background(rng_t *r, plan_t *pl) {
    int S = pl->S;
    float c0[3], c1[3];
    for (int i = 0; i < 3; i++) {
        c0[i] = (float)rng_range(r, 20, 235);
        c1[i] = clampf(c0[i] + (float)rng_range(r, -45, 45), 0, 255);
    }
    int pattern = rng_int(r, 5);
    double dir = rng_range(r, 0, 2 * PI), dx = p_cos(dir), dy = p_sin(dir);
    double period = rng_range(r, S / 8.0, S / 3.0), phase = rng_range(r, 0, 2 * PI);
    double wf[3][3]; /* blobs: three plane waves (kx, ky, phase) of low frequency */
    for (int k = 0; k < 3; k++) {
        double a = rng_range(r, 0, 2 * PI), f = rng_range(r, 0.5, 2.0) * 2 * PI / S;
        wf[k][0] = f * p_cos(a);
        wf[k][1] = f * p_sin(a);
        wf[k][2] = rng_range(r, 0, 2 * PI);
    }
    double sum = 0;
    for (int y = 0; y < S; y++) {
        for (int x = 0; x < S; x++) {
            double px = x + 0.5 - S / 2.0, py = y + 0.5 - S / 2.0, t;
            switch (pattern) {
            case 0: t = 0.0; break;                                           /* flat */
            case 1: t = 0.5 + (px * dx + py * dy) / (1.5 * S); break;          /* gradient */
            case 2: t = 0.5 + 0.5 * p_sin(2 * PI * (px * dx + py * dy) / period + phase); break;
            case 3: t = 0.5 + 0.5 * p_sin(2 * PI * px / period + phase) * p_sin(2 * PI * py / period);
                    break;                                                    /* soft checks */
            default:
                t = 0.5;
                for (int k = 0; k < 3; k++) t += p_cos(wf[k][0] * px + wf[k][1] * py + wf[k][2]) / 6;
            }
            float *o = pl->bg + ((size_t)y * S + x) * 3;
            for (int i = 0; i < 3; i++) o[i] = c0[i] + (c1[i] - c0[i]) * (float)t;
            sum += luma(o);
        }
    }
    pl->bg_luma = (float)(sum / ((double)S * S));
    for (int i = 0; i < 3; i++) pl->haze_col[i] = (c0[i] + c1[i]) * 0.5f;
}

/* Main object of pair `pair`, in the pair's canonical direction (move right/down, clockwise,
 * grow, approach, orbit clockwise). */
static void plan_main(rng_t *r, plan_t *pl) {
    obj_plan *o = &pl->main;
    double S = pl->S;
    make_look(r, &o->look, pl->bg_luma, 60);
    o->ang_mid = rng_range(r, 0, 2 * PI);
    o->spin = rng_range(r, -0.06, 0.06);
    o->g = 0;
    o->haze_far = o->blur_far = 0;
    o->orbit = 0;
    switch (pl->pair) {
    case 0:
    case 1: { /* translation: along x for pair 0, along y for pair 1 */
        double rad = rng_range(r, 0.11, 0.17) * S, L = rng_range(r, 0.30, 0.55) * S;
        double D = rng_range(r, -0.08, 0.08) * S;
        double ma = rng_range(r, 0.6 * rad + L / 2, S - 0.6 * rad - L / 2);
        double mb = rng_range(r, rad + fabs(D) / 2, S - rad - fabs(D) / 2);
        o->r_mid = rad;
        if (pl->pair == 0) o->mx = ma, o->my = mb, o->vx = L, o->vy = D;
        else o->mx = mb, o->my = ma, o->vx = D, o->vy = L;
        break;
    }
    case 2: { /* spin in place, 8-20 degrees a frame */
        double rad = rng_range(r, 0.13, 0.22) * S;
        o->r_mid = rad;
        o->spin = rng_range(r, 8, 20) * PI / 180;
        o->mx = rng_range(r, 1.1 * rad + 0.03 * S, S - 1.1 * rad - 0.03 * S);
        o->my = rng_range(r, 1.1 * rad + 0.03 * S, S - 1.1 * rad - 0.03 * S);
        o->vx = rng_range(r, -0.05, 0.05) * S;
        o->vy = rng_range(r, -0.05, 0.05) * S;
        break;
    }
    case 3:
    case 4: { /* size ratio 1.7-2.6 (grow) or 1.8-2.8 with haze and blur (approach) */
        int app = pl->pair == 4;
        o->g = app ? rng_range(r, 0.588, 1.030) : rng_range(r, 0.531, 0.956);
        double rmin = (app ? rng_range(r, 0.08, 0.11) : rng_range(r, 0.085, 0.12)) * S;
        double ex = p_exp(o->g / 2);
        o->r_mid = rmin * ex;
        double rmax = o->r_mid * ex, m = 0.85 * rmax;
        o->mx = rng_range(r, m, S - m);
        o->my = rng_range(r, m, S - m);
        o->vx = rng_range(r, -0.05, 0.05) * S;
        o->vy = rng_range(r, -0.05, 0.05) * S;
        if (app) {
            o->haze_far = rng_range(r, 0.45, 0.70);
            o->blur_far = rng_range(r, 0.025, 0.055) * S;
        }
        break;
    }
    default: { /* orbit: radius 0.16-0.24 S, 200-320 degrees over the clip */
        double R = rng_range(r, 0.16, 0.24) * S, rad = rng_range(r, 0.09, 0.13) * S;
        double m = R + 0.8 * rad;
        o->orbit = 1;
        o->r_mid = rad;
        o->orbit_r = R;
        o->mx = rng_range(r, m, S - m);
        o->my = rng_range(r, m, S - m);
        o->vx = o->vy = 0;
        o->orbit_mid = rng_range(r, 0, 2 * PI);
        o->orbit_sweep = rng_range(r, 200, 320) * PI / 180;
        break;
    }
    }
}

/* Distractors: smaller, straight paths in any direction (the distribution is symmetric under time
 * reversal), any spin, in front of or behind the main object. */
static void draw_distractor(rng_t *r, const plan_t *pl, obj_plan *o) {
    double S = pl->S;
    make_look(r, &o->look, pl->bg_luma, 40);
    o->r_mid = rng_range(r, 0.045, 0.085) * S;
    o->g = 0;
    o->haze_far = o->blur_far = 0;
    o->orbit = 0;
    o->mx = rng_range(r, 0.05, 0.95) * S;
    o->my = rng_range(r, 0.05, 0.95) * S;
    double len = rng_range(r, 0.05, 0.45) * S, dir = rng_range(r, 0, 2 * PI);
    o->vx = len * p_cos(dir);
    o->vy = len * p_sin(dir);
    o->ang_mid = rng_range(r, 0, 2 * PI);
    o->spin = rng_range(r, -0.15, 0.15);
    o->front = rng_int(r, 2);
}

static pose_t pose_at(const plan_t *pl, const obj_plan *o, int tau);

/* The distractor of up to 8 draws that keeps clearest of the main object over the whole clip (the
 * first that never touches it): a distractor parked on the main object would hide what the class
 * is about. The choice depends on the whole path, so it is the same played backwards. */
static void plan_distractor(rng_t *r, const plan_t *pl, obj_plan *o) {
    double best = -1e30;
    for (int k = 0; k < 8; k++) {
        obj_plan c;
        draw_distractor(r, pl, &c);
        double clear = 1e30;
        for (int tau = 0; tau < pl->T; tau++) {
            pose_t a = pose_at(pl, &pl->main, tau), b = pose_at(pl, &c, tau);
            double dx = a.x - b.x, dy = a.y - b.y;
            double d = sqrt(dx * dx + dy * dy) - 1.2 * (a.r + b.r);
            if (d < clear) clear = d;
        }
        if (clear > best) {
            best = clear;
            *o = c;
        }
        if (clear >= 0) break;
    }
}

/* Pose at canonical frame tau. s runs from -1/2 to 1/2 over the clip. */
static pose_t pose_at(const plan_t *pl, const obj_plan *o, int tau) {
    double s = (double)tau / (pl->T - 1) - 0.5, st = tau - (pl->T - 1) / 2.0;
    pose_t p;
    double x = o->mx + o->vx * s, y = o->my + o->vy * s;
    if (o->orbit) {
        double a = o->orbit_mid + o->orbit_sweep * s;
        x += o->orbit_r * p_cos(a);
        y += o->orbit_r * p_sin(a);
    }
    p.x = (float)x;
    p.y = (float)y;
    p.r = (float)(o->g != 0 ? o->r_mid * p_exp(o->g * s) : o->r_mid);
    p.ang = (float)(o->ang_mid + o->spin * st);
    p.haze = (float)(o->haze_far * (0.5 - s));
    p.aa = (float)(1.0 + o->blur_far * (0.5 - s));
    return p;
}

int tb_synth_render(const tb_synth_params *p, int class_id, uint64_t clip_seed, uint8_t *rgb,
                    tb_synth_truth *truth, tb_err *e) {
    int rc = tb_synth_check_params(p, e);
    if (rc) return rc;
    if (class_id < 0 || class_id >= TB_SYNTH_N_CLASSES)
        return tb_fail(e, TUBELET_ERR_ARG, "synth: class id %d is not in [0, %d)", class_id,
                       TB_SYNTH_N_CLASSES);
    if (!rgb) return tb_fail(e, TUBELET_ERR_ARG, "synth: no output buffer");
    plan_t pl;
    memset(&pl, 0, sizeof pl);
    pl.S = p->size;
    pl.T = p->frames;
    pl.pair = class_id / 2;
    int S = pl.S, T = pl.T, reverse = class_id & 1;
    size_t plane = (size_t)S * S * 3;
    pl.bg = malloc(plane * sizeof(float));
    float *img = malloc(plane * sizeof(float));
    pl.gain = malloc((size_t)T * sizeof(float));
    if (!pl.bg || !img || !pl.gain) {
        free(pl.bg);
        free(img);
        free(pl.gain);
        return tb_fail(e, TUBELET_ERR_MEMORY, "synth: out of memory for a %dx%d clip", S, S);
    }

    /* The plan depends on the clip seed and the pair only, never on the direction. */
    rng_t r = {mix64(clip_seed ^ 0x0123456789ABCDEFull)};
    make_background(&r, &pl);
    plan_main(&r, &pl);
    pl.n_dis = p->max_distractors > 0 ? 1 + rng_int(&r, p->max_distractors) : 0;
    for (int k = 0; k < pl.n_dis; k++) plan_distractor(&r, &pl, &pl.dis[k]);
    pl.sigma = rng_range(&r, 1.0, 6.0) * p->noise;
    double flick = rng_range(&r, 0.0, 0.05) * p->noise;
    for (int t = 0; t < T; t++) pl.gain[t] = (float)(1.0 + flick * (2 * rng_u(&r) - 1));

    const float noise_scale = (float)(pl.sigma * 1.7320508075688772 / 65535.0);
    for (int tau = 0; tau < T; tau++) {
        int t = reverse ? T - 1 - tau : tau;
        memcpy(img, pl.bg, plane * sizeof(float));
        for (int k = 0; k < pl.n_dis; k++)
            if (!pl.dis[k].front) {
                pose_t q = pose_at(&pl, &pl.dis[k], tau);
                draw(img, S, &pl.dis[k].look, &q, pl.haze_col);
            }
        pose_t mp = pose_at(&pl, &pl.main, tau);
        draw(img, S, &pl.main.look, &mp, pl.haze_col);
        for (int k = 0; k < pl.n_dis; k++)
            if (pl.dis[k].front) {
                pose_t q = pose_at(&pl, &pl.dis[k], tau);
                draw(img, S, &pl.dis[k].look, &q, pl.haze_col);
            }
        /* flicker, then grey per-pixel noise: Irwin-Hall(4) of 16-bit uniforms, unit variance */
        rng_t nr = {mix64(clip_seed ^ (0xA5A5A5A5A5A5A5A5ull + (uint64_t)tau * 0x9E3779B97F4A7C15ull))};
        uint8_t *out = rgb + (size_t)t * plane;
        float gain = pl.gain[tau];
        for (size_t i = 0; i < (size_t)S * S; i++) {
            uint64_t u = rng_next(&nr);
            int sum4 = (int)(u & 0xFFFF) + (int)((u >> 16) & 0xFFFF) + (int)((u >> 32) & 0xFFFF) +
                       (int)(u >> 48);
            float n = (float)(sum4 - 2 * 65535) * noise_scale;
            for (int c = 0; c < 3; c++) {
                float v = floorf(img[i * 3 + c] * gain + n + 0.5f);
                out[i * 3 + c] = (uint8_t)clampf(v, 0.0f, 255.0f);
            }
        }
        if (truth) {
            tb_synth_truth *tr = &truth[t];
            tr->x = mp.x;
            tr->y = mp.y;
            tr->radius = mp.r;
            tr->angle = mp.ang;
            tr->haze = mp.haze;
            tr->blur = mp.aa;
        }
    }
    free(pl.bg);
    free(img);
    free(pl.gain);
    return TUBELET_OK;
}
