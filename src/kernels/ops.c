#include "ops.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
#include <immintrin.h>
#endif

int tb_act_parse(const char *s) {
    if (!strcmp(s, "gelu")) return TB_ACT_GELU;
    if (!strcmp(s, "gelu_new") || !strcmp(s, "gelu_fast") || !strcmp(s, "gelu_pytorch_tanh") ||
        !strcmp(s, "gelu_accurate"))
        return TB_ACT_GELU_TANH;
    if (!strcmp(s, "quick_gelu")) return TB_ACT_QUICK_GELU;
    if (!strcmp(s, "relu")) return TB_ACT_RELU;
    if (!strcmp(s, "silu") || !strcmp(s, "swish")) return TB_ACT_SILU;
    return -1;
}

const char *tb_act_name(tb_act a) {
    static const char *names[] = {"gelu", "gelu_tanh", "quick_gelu", "relu", "silu"};
    return names[a];
}

/* ---- exp: Cody-Waite range reduction + degree-6 polynomial, the same arithmetic in the
 * AVX-512 and the scalar path so that results do not depend on the vector width. ---- */
#define EXP_HI 88.3762626647949f
#define EXP_LO -87.3365447504019f
#define LOG2E 1.44269504088896341f
#define LN2_HI 0.693359375f
#define LN2_LO -2.12194440e-4f
#define P0 1.9875691500E-4f
#define P1 1.3981999507E-3f
#define P2 8.3334519073E-3f
#define P3 4.1665795894E-2f
#define P4 1.6666665459E-1f
#define P5 5.0000001201E-1f

static inline float exp_scalar(float x) {
    if (x != x) return x;
    if (x > EXP_HI) return INFINITY;
    if (x < EXP_LO) return 0.0f;
    float n = floorf(x * LOG2E + 0.5f);
    float r = x - n * LN2_HI - n * LN2_LO;
    float p = P0;
    p = p * r + P1;
    p = p * r + P2;
    p = p * r + P3;
    p = p * r + P4;
    p = p * r + P5;
    p = p * r * r + r + 1.0f;
    return ldexpf(p, (int)n);
}

/* Vector code is written once for both widths: VOP(op) is the zmm (AVX-512) or ymm (AVX2 +
 * FMA) intrinsic, vf its type, VW its lanes; vfloor and vscale2n (p 2^n) differ by set. */
#if defined(__AVX512F__)
#define VEC_OPS 1
#define VW 16
typedef __m512 vf;
#define VOP(op) _mm512_##op
#define vexp exp512
#define vfloor(x) _mm512_roundscale_ps(x, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC)
/* scalef computes p 2^n without integer tricks and handles the top of the range */
#define vscale2n(p, n) _mm512_scalef_ps(p, n)
static inline vf vpositive(vf x, vf one) {
    return _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_GT_OQ), one);
}
#elif defined(__AVX2__) && defined(__FMA__)
#define VEC_OPS 1
#define VW 8
typedef __m256 vf;
#define VOP(op) _mm256_##op
#define vexp exp256
#define vfloor(x) _mm256_floor_ps(x)
/* no scalef: 2^n as two exponent-field products, each within range, so that n = 128 and
 * n = -126 stay exact */
static inline vf vscale2n(vf p, vf n) {
    const __m256i ni = _mm256_cvtps_epi32(n), bias = _mm256_set1_epi32(127);
    const __m256i n1 = _mm256_srai_epi32(ni, 1), n2 = _mm256_sub_epi32(ni, n1);
    const __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, bias), 23));
    const __m256 s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n2, bias), 23));
    return _mm256_mul_ps(_mm256_mul_ps(p, s1), s2);
}
static inline vf vpositive(vf x, vf one) {
    return _mm256_and_ps(_mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_GT_OQ), one);
}
#endif

#if defined(VEC_OPS)
/* exp(xc) = p 2^n for xc already within [EXP_LO, EXP_HI]: the scalar path's arithmetic, VW
 * lanes at a time; returns p, n through *pn. */
static inline vf vexp_poly(vf xc, vf *pn) {
    const vf n = vfloor(VOP(fmadd_ps)(xc, VOP(set1_ps)(LOG2E), VOP(set1_ps)(0.5f)));
    *pn = n;
    vf r = VOP(fnmadd_ps)(n, VOP(set1_ps)(LN2_HI), xc);
    r = VOP(fnmadd_ps)(n, VOP(set1_ps)(LN2_LO), r);
    vf p = VOP(set1_ps)(P0);
    p = VOP(fmadd_ps)(p, r, VOP(set1_ps)(P1));
    p = VOP(fmadd_ps)(p, r, VOP(set1_ps)(P2));
    p = VOP(fmadd_ps)(p, r, VOP(set1_ps)(P3));
    p = VOP(fmadd_ps)(p, r, VOP(set1_ps)(P4));
    p = VOP(fmadd_ps)(p, r, VOP(set1_ps)(P5));
    vf r2 = VOP(mul_ps)(r, r);
    return VOP(fmadd_ps)(p, r2, VOP(add_ps)(r, VOP(set1_ps)(1.0f)));
}

static inline vf vexp_core(vf xc) {
    vf n;
    const vf p = vexp_poly(xc, &n);
    return vscale2n(p, n);
}
#endif

#if defined(__AVX512F__)
static inline __m512 exp512(__m512 x) {
    const __m512 hi = _mm512_set1_ps(EXP_HI), lo = _mm512_set1_ps(EXP_LO);
    __mmask16 under = _mm512_cmp_ps_mask(x, lo, _CMP_LT_OQ);
    __mmask16 over = _mm512_cmp_ps_mask(x, hi, _CMP_GT_OQ);
    __m512 y = vexp_core(_mm512_min_ps(_mm512_max_ps(x, lo), hi));
    y = _mm512_mask_mov_ps(y, over, _mm512_set1_ps(INFINITY));
    return _mm512_mask_mov_ps(y, under, _mm512_setzero_ps());
}

/* exp of a softmax's shifted scores (<= 0): below EXP_LO it gives exp(EXP_LO) ~ 1e-38 instead
 * of 0, nothing next to the row's largest term (1), which saves exp512's four mask operations
 * in the attention's innermost softmax; NaN stays NaN (max and min return their second
 * operand when one is NaN). */
static inline __m512 exp512_shifted(__m512 x) {
    return vexp_core(_mm512_min_ps(_mm512_set1_ps(EXP_HI),
                                     _mm512_max_ps(_mm512_set1_ps(EXP_LO), x)));
}
#elif defined(__AVX2__) && defined(__FMA__)
static inline __m256 exp256(__m256 x) {
    const __m256 hi = _mm256_set1_ps(EXP_HI), lo = _mm256_set1_ps(EXP_LO);
    const __m256 under = _mm256_cmp_ps(x, lo, _CMP_LT_OQ), over = _mm256_cmp_ps(x, hi, _CMP_GT_OQ);
    const __m256 nan = _mm256_cmp_ps(x, x, _CMP_UNORD_Q);
    __m256 y = vexp_core(_mm256_min_ps(_mm256_max_ps(x, lo), hi));
    y = _mm256_blendv_ps(y, _mm256_set1_ps(INFINITY), over);
    y = _mm256_blendv_ps(y, _mm256_setzero_ps(), under);
    return _mm256_blendv_ps(y, x, nan);
}

/* As exp512_shifted, for x <= 0 (the bottom clamped to exp(EXP_LO), NaN kept), with 2^n put
 * into p's exponent field by one integer add: exact wherever p 2^n is a normal float (all but
 * the clamped bottom, ~1e-38), so it equals exp256 there. This is the attention's innermost
 * loop on AVX2: the add, the missing upper clamp and NaN test save a third of its
 * instructions. NaN survives without a test: n is NaN, converts to 0x80000000, and adds 0 to
 * p's (NaN) bits. */
static inline __m256 exp256_shifted(__m256 x) {
    __m256 n; /* NaN: max returns its second operand */
    const __m256 p = vexp_poly(_mm256_max_ps(_mm256_set1_ps(EXP_LO), x), &n);
    const __m256i e = _mm256_slli_epi32(_mm256_cvtps_epi32(n), 23);
    return _mm256_castsi256_ps(_mm256_add_epi32(_mm256_castps_si256(p), e));
}
#endif

void tb_vexp(float *y, const float *x, int64_t n) {
    int64_t i = 0;
#if defined(__AVX512F__)
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, exp512(_mm512_loadu_ps(x + i)));
    if (i < n) {
        __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
        _mm512_mask_storeu_ps(y + i, m, exp512(_mm512_maskz_loadu_ps(m, x + i)));
        return;
    }
#elif defined(__AVX2__) && defined(__FMA__)
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, exp256(_mm256_loadu_ps(x + i)));
#endif
    for (; i < n; i++) y[i] = exp_scalar(x[i]);
}

/* ---- activations ---- */

/* erf via Abramowitz & Stegun 7.1.26 would be 1.5e-7 absolute; we need better near 0 for the
 * relative error of GELU, so use erff from libm in the scalar path and a rational approximation
 * with |error| < 3e-7 (from the same constants as XNNPACK / Eigen's erf) in the vector path. */
#if defined(VEC_OPS)
/* Eigen's generic_fast_erf_float: rational approximation, clamped to [-4, 4]. */
static inline vf verf(vf x) {
    x = VOP(min_ps)(VOP(max_ps)(x, VOP(set1_ps)(-4.0f)), VOP(set1_ps)(4.0f));
    vf x2 = VOP(mul_ps)(x, x);
    vf p = VOP(set1_ps)(-2.72614225801306e-10f);
    p = VOP(fmadd_ps)(p, x2, VOP(set1_ps)(2.77068142495902e-08f));
    p = VOP(fmadd_ps)(p, x2, VOP(set1_ps)(-2.10102402082508e-06f));
    p = VOP(fmadd_ps)(p, x2, VOP(set1_ps)(-5.69250639462346e-05f));
    p = VOP(fmadd_ps)(p, x2, VOP(set1_ps)(-7.34990630326855e-04f));
    p = VOP(fmadd_ps)(p, x2, VOP(set1_ps)(-2.95459980854025e-03f));
    p = VOP(fmadd_ps)(p, x2, VOP(set1_ps)(-1.60960333262415e-02f));
    p = VOP(mul_ps)(p, x);
    vf q = VOP(set1_ps)(-1.45660718464996e-05f);
    q = VOP(fmadd_ps)(q, x2, VOP(set1_ps)(-2.13374055278905e-04f));
    q = VOP(fmadd_ps)(q, x2, VOP(set1_ps)(-1.68282697438203e-03f));
    q = VOP(fmadd_ps)(q, x2, VOP(set1_ps)(-7.37332916720468e-03f));
    q = VOP(fmadd_ps)(q, x2, VOP(set1_ps)(-1.42647390514189e-02f));
    return VOP(div_ps)(p, q);
}

/* tanh(u) = 1 - 2 / (exp(2u) + 1): exact enough (~1e-7 absolute) and overflow-safe. */
static inline vf vtanh(vf u) {
    vf e = vexp(VOP(add_ps)(u, u));
    return VOP(sub_ps)(VOP(set1_ps)(1.0f),
                         VOP(div_ps)(VOP(set1_ps)(2.0f), VOP(add_ps)(e, VOP(set1_ps)(1.0f))));
}

static inline vf vsigmoid(vf x) {
    vf e = vexp(VOP(sub_ps)(VOP(setzero_ps)(), x));
    return VOP(div_ps)(VOP(set1_ps)(1.0f), VOP(add_ps)(e, VOP(set1_ps)(1.0f)));
}

static inline vf vact(vf x, tb_act act) {
    const vf half = VOP(set1_ps)(0.5f), one = VOP(set1_ps)(1.0f);
    switch (act) {
    case TB_ACT_GELU:
        return VOP(mul_ps)(VOP(mul_ps)(half, x),
                             VOP(add_ps)(one, verf(VOP(mul_ps)(x, VOP(set1_ps)(0.70710678118654752f)))));
    case TB_ACT_GELU_TANH: {
        vf x3 = VOP(mul_ps)(VOP(mul_ps)(x, x), x);
        vf u = VOP(mul_ps)(VOP(set1_ps)(0.7978845608028654f),
                                 VOP(fmadd_ps)(VOP(set1_ps)(0.044715f), x3, x));
        return VOP(mul_ps)(VOP(mul_ps)(half, x), VOP(add_ps)(one, vtanh(u)));
    }
    case TB_ACT_QUICK_GELU: return VOP(mul_ps)(x, vsigmoid(VOP(mul_ps)(x, VOP(set1_ps)(1.702f))));
    case TB_ACT_RELU: return VOP(max_ps)(x, VOP(setzero_ps)());
    case TB_ACT_SILU: return VOP(mul_ps)(x, vsigmoid(x));
    }
    return x;
}
#endif

#if defined(VEC_OPS)
/* tb_act_grad, VW lanes (the same formulas with the vector erf, exp, tanh, sigmoid). */
static inline vf vact_grad(vf x, tb_act act) {
    const vf half = VOP(set1_ps)(0.5f), one = VOP(set1_ps)(1.0f);
    switch (act) {
    case TB_ACT_GELU: { /* Phi(x) + x phi(x) */
        const vf cdf = VOP(mul_ps)(
            half, VOP(add_ps)(one, verf(VOP(mul_ps)(x, VOP(set1_ps)(0.70710678118654752f)))));
        const vf pdf = VOP(mul_ps)(
            VOP(set1_ps)(0.3989422804014327f),
            vexp(VOP(mul_ps)(VOP(set1_ps)(-0.5f), VOP(mul_ps)(x, x))));
        return VOP(fmadd_ps)(x, pdf, cdf);
    }
    case TB_ACT_GELU_TANH: {
        const vf c = VOP(set1_ps)(0.7978845608028654f), k = VOP(set1_ps)(0.044715f);
        const vf x2 = VOP(mul_ps)(x, x);
        const vf t = vtanh(VOP(mul_ps)(c, VOP(fmadd_ps)(VOP(mul_ps)(k, x2), x, x)));
        const vf dt = VOP(mul_ps)(VOP(fnmadd_ps)(t, t, one),
                                        VOP(mul_ps)(c, VOP(fmadd_ps)(VOP(set1_ps)(3 * 0.044715f), x2, one)));
        return VOP(fmadd_ps)(VOP(mul_ps)(half, x), dt, VOP(mul_ps)(half, VOP(add_ps)(one, t)));
    }
    case TB_ACT_QUICK_GELU: {
        const vf a = VOP(set1_ps)(1.702f), sg = vsigmoid(VOP(mul_ps)(a, x));
        return VOP(fmadd_ps)(VOP(mul_ps)(a, x), VOP(mul_ps)(sg, VOP(sub_ps)(one, sg)), sg);
    }
    case TB_ACT_RELU:
        return vpositive(x, one);
    case TB_ACT_SILU: {
        const vf sg = vsigmoid(x);
        return VOP(mul_ps)(sg, VOP(fmadd_ps)(x, VOP(sub_ps)(one, sg), one));
    }
    }
    return one;
}
#endif

void tb_act_backward(float *dy, const float *h, int64_t rows, int64_t n, tb_act act) {
    const int64_t total = rows * n, block = 4096;
#pragma omp parallel for schedule(static)
    for (int64_t b = 0; b < total; b += block) {
        const int64_t end = total - b < block ? total : b + block;
        int64_t i = b;
#if defined(VEC_OPS)
        for (; i + VW <= end; i += VW)
            VOP(storeu_ps)(dy + i, VOP(mul_ps)(VOP(loadu_ps)(dy + i), vact_grad(VOP(loadu_ps)(h + i), act)));
#endif
        for (; i < end; i++) dy[i] *= tb_act_grad(h[i], act);
    }
}

/* row (n) = act(row + bias); bias may be NULL. */
static void bias_act_row(float *row, const float *bias, int64_t n, tb_act act) {
    {
        int64_t j = 0;
#if defined(__AVX512F__)
        for (; j < n; j += 16) {
            __mmask16 m = n - j >= 16 ? 0xFFFF : (__mmask16)((1u << (n - j)) - 1);
            __m512 v = _mm512_maskz_loadu_ps(m, row + j);
            if (bias) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, bias + j));
            _mm512_mask_storeu_ps(row + j, m, vact(v, act));
        }
#elif defined(VEC_OPS)
        for (; j + VW <= n; j += VW) {
            vf v = VOP(loadu_ps)(row + j);
            if (bias) v = VOP(add_ps)(v, VOP(loadu_ps)(bias + j));
            VOP(storeu_ps)(row + j, vact(v, act));
        }
#endif
        for (; j < n; j++) row[j] = tb_act_ref(row[j] + (bias ? bias[j] : 0.0f), act);
    }
}

void tb_bias_act(float *x, const float *bias, int64_t rows, int64_t n, tb_act act) {
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; r++) bias_act_row(x + r * n, bias, n, act);
}

void tb_act_rows(float *x, int64_t ldx, int64_t rows, int64_t n, tb_act act) {
    for (int64_t r = 0; r < rows; r++) bias_act_row(x + r * ldx, NULL, n, act);
}

/* ---- LayerNorm: two passes over the row (mean, then centred variance) for accuracy. ---- */
/* Sum of a row, 16 lanes at a time where available. */
static float row_sum(const float *x, int64_t n) {
    int64_t j = 0;
    float s = 0;
#if defined(__AVX512F__)
    __m512 v = _mm512_setzero_ps();
    for (; j + 16 <= n; j += 16) v = _mm512_add_ps(v, _mm512_loadu_ps(x + j));
    s = _mm512_reduce_add_ps(v);
#endif
    for (; j < n; j++) s += x[j];
    return s;
}

static float row_centred_sq(const float *x, int64_t n, float mean) {
    int64_t j = 0;
    float s = 0;
#if defined(__AVX512F__)
    __m512 v = _mm512_setzero_ps(), m = _mm512_set1_ps(mean);
    for (; j + 16 <= n; j += 16) {
        __m512 d = _mm512_sub_ps(_mm512_loadu_ps(x + j), m);
        v = _mm512_fmadd_ps(d, d, v);
    }
    s = _mm512_reduce_add_ps(v);
#endif
    for (; j < n; j++) s += (x[j] - mean) * (x[j] - mean);
    return s;
}

/* ---- LayerNorm: two passes over the row (mean, then centred variance) for accuracy. ---- */
void tb_layernorm(float *y, int64_t ldy, const float *x, int64_t ldx, const float *w,
                  const float *b, int64_t rows, int64_t n, float eps) {
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * ldx;
        float *yr = y + r * ldy;
        const float mean = row_sum(xr, n) / (float)n;
        const float rstd = 1.0f / sqrtf(row_centred_sq(xr, n, mean) / (float)n + eps);
        for (int64_t j = 0; j < n; j++) yr[j] = (xr[j] - mean) * rstd * w[j] + b[j];
    }
}

float tb_row_max(const float *x, int64_t n) {
    int64_t j = 0;
    float mx = -INFINITY;
#if defined(__AVX512F__)
    __m512 v = _mm512_set1_ps(-INFINITY);
    for (; j + 16 <= n; j += 16) v = _mm512_max_ps(v, _mm512_loadu_ps(x + j));
    if (j < n) {
        const __mmask16 m = (__mmask16)((1u << (n - j)) - 1);
        v = _mm512_mask_max_ps(v, m, v, _mm512_maskz_loadu_ps(m, x + j));
        j = n;
    }
    mx = _mm512_reduce_max_ps(v);
#elif defined(__AVX2__) && defined(__FMA__)
    if (n >= 8) {
        __m256 v = _mm256_loadu_ps(x);
        for (j = 8; j + 8 <= n; j += 8) v = _mm256_max_ps(v, _mm256_loadu_ps(x + j));
        float lanes[8];
        _mm256_storeu_ps(lanes, v);
        for (int i = 0; i < 8; i++) mx = lanes[i] > mx ? lanes[i] : mx;
    }
#endif
    for (; j < n; j++) mx = x[j] > mx ? x[j] : mx;
    return mx;
}

float tb_exp_shift_sum(float *x, int64_t n, float shift) {
    int64_t j = 0;
    float sum = 0;
#if defined(__AVX512F__)
    const __m512 vm = _mm512_set1_ps(shift);
    __m512 vsum = _mm512_setzero_ps();
    for (; j + 16 <= n; j += 16) {
        __m512 e = exp512_shifted(_mm512_sub_ps(_mm512_loadu_ps(x + j), vm));
        _mm512_storeu_ps(x + j, e);
        vsum = _mm512_add_ps(vsum, e);
    }
    if (j < n) { /* the last n % 16 */
        const __mmask16 m = (__mmask16)((1u << (n - j)) - 1);
        __m512 e = exp512_shifted(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, x + j), vm));
        _mm512_mask_storeu_ps(x + j, m, e);
        vsum = _mm512_add_ps(vsum, _mm512_maskz_mov_ps(m, e));
        j = n;
    }
    sum = _mm512_reduce_add_ps(vsum);
#elif defined(__AVX2__) && defined(__FMA__)
    const __m256 vm = _mm256_set1_ps(shift);
    __m256 vsum = _mm256_setzero_ps();
    for (; j + 8 <= n; j += 8) {
        const __m256 e = exp256_shifted(_mm256_sub_ps(_mm256_loadu_ps(x + j), vm));
        _mm256_storeu_ps(x + j, e);
        vsum = _mm256_add_ps(vsum, e);
    }
    float lanes[8];
    _mm256_storeu_ps(lanes, vsum);
    for (int i = 0; i < 8; i++) sum += lanes[i];
#endif
    for (; j < n; j++) sum += (x[j] = exp_scalar(x[j] - shift));
    return sum;
}

/* dx += LN'(dy): with xhat = (x - mean) rstd and g = dy w,
 *   dx = rstd (g - mean(g) - xhat mean(g xhat)); dw += sum_rows dy xhat; db += sum_rows dy.
 * mean and rstd are recomputed from x (cheaper than keeping them). dw and db are summed per
 * thread over a static split of the rows and the partial sums added in thread order, so that
 * the result does not depend on timing (training resumes reproduce the same curve). */
void tb_layernorm_backward(float *dx, const float *dy, const float *x, const float *w,
                           float *dw, float *db, int64_t rows, int64_t n, float eps) {
    const int nt = omp_get_max_threads();
    double *part = calloc((size_t)(2 * n * nt), sizeof(double));
    if (!part) return; /* callers size their inputs at planning time; nothing to report here */
#pragma omp parallel num_threads(nt)
    {
        const int id = omp_get_thread_num(), cnt = omp_get_num_threads();
        double *pw = part + (size_t)2 * n * id, *pb = pw + n;
        for (int64_t r = rows * id / cnt; r < rows * (id + 1) / cnt; r++) {
            const float *xr = x + r * n, *dyr = dy + r * n;
            float *dxr = dx + r * n;
            const float mean = row_sum(xr, n) / (float)n;
            const float rstd = 1.0f / sqrtf(row_centred_sq(xr, n, mean) / (float)n + eps);
            float mg = 0, mgx = 0; /* 16 partial sums each: vectorised, and accurate enough */
#pragma omp simd reduction(+ : mg, mgx)
            for (int64_t j = 0; j < n; j++) {
                const float xh = (xr[j] - mean) * rstd, g = dyr[j] * w[j];
                mg += g, mgx += g * xh;
            }
            mg /= (float)n, mgx /= (float)n;
#pragma omp simd
            for (int64_t j = 0; j < n; j++) {
                const float xh = (xr[j] - mean) * rstd;
                pw[j] += (double)(dyr[j] * xh), pb[j] += dyr[j];
                dxr[j] += rstd * (dyr[j] * w[j] - mg - xh * mgx);
            }
        }
    }
    for (int t = 0; t < nt; t++)
        for (int64_t j = 0; j < n; j++)
            dw[j] += (float)part[(size_t)2 * n * t + j], db[j] += (float)part[(size_t)2 * n * t + n + j];
    free(part);
}

void tb_add_row_bias(float *y, int64_t ldy, const float *b, int64_t rows, int64_t n) {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < rows; i++) {
        float *row = y + i * ldy;
        for (int64_t j = 0; j < n; j++) row[j] += b[j];
    }
}

/* Columns split over the threads (each sums its columns over all rows, in row order, so the
 * result does not depend on the thread count); 64 columns at a time, which the compiler keeps
 * in registers across the rows. */

void tb_colsum_add(float *out, const float *x, int64_t rows, int64_t n, int64_t ld) {
#pragma omp parallel for schedule(static)
    for (int64_t j0 = 0; j0 < n; j0 += 64) {
        const int64_t m = n - j0 < 64 ? n - j0 : 64;
        float acc[64] = {0};
        for (int64_t r = 0; r < rows; r++) {
            const float *row = x + r * ld + j0;
#pragma omp simd
            for (int64_t j = 0; j < m; j++) acc[j] += row[j];
        }
        for (int64_t j = 0; j < m; j++) out[j0 + j] += acc[j];
    }
}

void tb_scale_cols(float *y, const float *lambda, int64_t rows, int64_t n) {
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; r++)
        for (int64_t j = 0; j < n; j++) y[r * n + j] *= lambda[j];
}

void tb_scale_cols_backward(float *dy, float *dlambda, const float *y, const float *lambda,
                            int64_t rows, int64_t n) {
    enum { CHUNK = 64 }; /* columns per task: each column's sum is one thread's, in row order */
#pragma omp parallel for schedule(static)
    for (int64_t j0 = 0; j0 < n; j0 += CHUNK) {
        const int64_t j1 = j0 + CHUNK < n ? j0 + CHUNK : n;
        double acc[CHUNK] = {0};
        for (int64_t r = 0; r < rows; r++)
            for (int64_t j = j0; j < j1; j++) acc[j - j0] += (double)dy[r * n + j] * y[r * n + j];
        for (int64_t j = j0; j < j1; j++) dlambda[j] += (float)acc[j - j0];
    }
    tb_scale_cols(dy, lambda, rows, n);
}

void tb_softmax_row(float *x, int64_t n, float scale) {
    const float mx = tb_row_max(x, n);
    int64_t j = 0;
    if (scale != 1.0f)
        for (j = 0; j < n; j++) x[j] *= scale;
    const float inv = 1.0f / tb_exp_shift_sum(x, n, mx * scale);
    j = 0;
#if defined(__AVX512F__)
    for (; j + 16 <= n; j += 16)
        _mm512_storeu_ps(x + j, _mm512_mul_ps(_mm512_loadu_ps(x + j), _mm512_set1_ps(inv)));
#endif
    for (; j < n; j++) x[j] *= inv;
}

/* ---- dropout ---- */

tb_keep_rule tb_keep_rule_make(float p) {
    tb_keep_rule r = {0, 1.0f};
    if (!(p > 0)) return r;
    if (p >= 1) return (tb_keep_rule){UINT64_MAX, 0.0f}; /* p = 1: everything becomes 0 */
    const double t = ldexp((double)p, 64);
    r.thr = t >= 18446744073709549568.0 ? UINT64_MAX : (uint64_t)t;
    r.scale = (float)(1.0 / (1.0 - (double)p));
    return r;
}

void tb_dropout_serial(float *x, int64_t n, uint64_t key, int64_t first, tb_keep_rule r) {
#pragma omp simd
    for (int64_t i = 0; i < n; i++) x[i] *= tb_keep_scale(key, (uint64_t)(first + i), r);
}

void tb_dropout(float *x, int64_t n, uint64_t key, int64_t first, tb_keep_rule r) {
    const int64_t block = 4096;
#pragma omp parallel for schedule(static)
    for (int64_t b = 0; b < n; b += block)
        tb_dropout_serial(x + b, n - b < block ? n - b : block, key, first + b, r);
}
