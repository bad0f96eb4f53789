#include "lowp.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <immintrin.h>

#include "gemm.h"
#include "ops.h"
#include "qgemm.h"

/* Below this many elements a loop runs on one thread: waking the others costs more. */
#define SMALL (1 << 15)

/* int8 products: VNNI's vpdpbusd sums u8 x s8 pairs into 32 bits exactly. Without it the AVX2
 * kernels (ours, qgemm.c, and oneDNN's) multiply with vpmaddubsw, whose pair sums saturate at 16
 * bits (2 x 255 x 127 does not fit): the weights are quantised to 7 bits there ([-63, 63], ONNX
 * Runtime's reduce_range), so that no pair sum can (2 x 255 x 63 = 32130): tb_int8_weight_max. */
static int vnni(void) { return __builtin_cpu_supports("avx512vnni") != 0; }
static int avx2_int8(void) {
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}
int tb_int8_weight_max(int native) { return native && !vnni() ? 63 : 127; }

int tb_lowp_cpu_has(int p) {
    __builtin_cpu_init();
    if (p == TB_PREC_BF16) return __builtin_cpu_supports("avx512bf16") != 0;
    if (p == TB_PREC_INT8) return vnni() || avx2_int8();
    return 1;
}

/* ---- rounding ---- */

uint16_t tb_bf16_from_f32(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1u); /* round to nearest, ties to even */
    return (uint16_t)(u >> 16);
}

float tb_f32_from_bf16(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float x;
    memcpy(&x, &u, 4);
    return x;
}

/* x (n) → bf16, 16 at a time with vcvtneps2bf16 where the CPU has it (the same rounding). */
__attribute__((target("avx512f,avx512bf16,avx512vl"))) static void to_bf16_avx512(
    uint16_t *out, const float *x, int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm256_storeu_si256((__m256i *)(out + i),
                            (__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps(x + i)));
    for (; i < n; i++) out[i] = tb_bf16_from_f32(x[i]);
}

static void to_bf16(uint16_t *out, const float *x, int64_t n, int fast) {
    const int64_t chunk = 1 << 14;
#pragma omp parallel for schedule(static) if (n > 2 * chunk)
    for (int64_t i0 = 0; i0 < n; i0 += chunk) {
        int64_t len = n - i0 < chunk ? n - i0 : chunk;
        if (fast) to_bf16_avx512(out + i0, x + i0, len);
        else
            for (int64_t i = i0; i < i0 + len; i++) out[i] = tb_bf16_from_f32(x[i]);
    }
}

/* min and max of x[0..n) with 0 included. */
__attribute__((target("avx512f"))) static void range_avx512(const float *x, int64_t n, float *lo,
                                                           float *hi) {
    __m512 a = _mm512_setzero_ps(), b = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 v = _mm512_loadu_ps(x + i);
        a = _mm512_min_ps(a, v), b = _mm512_max_ps(b, v);
    }
    float l = _mm512_reduce_min_ps(a), h = _mm512_reduce_max_ps(b);
    for (; i < n; i++) l = x[i] < l ? x[i] : l, h = x[i] > h ? x[i] : h;
    *lo = l, *hi = h;
}

__attribute__((target("avx2"))) static void range_avx2(const float *x, int64_t n, float *lo,
                                                      float *hi) {
    __m256 a = _mm256_setzero_ps(), b = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_loadu_ps(x + i);
        a = _mm256_min_ps(a, v), b = _mm256_max_ps(b, v);
    }
    float la[8], ha[8], l = 0, h = 0;
    _mm256_storeu_ps(la, a), _mm256_storeu_ps(ha, b);
    for (int j = 0; j < 8; j++) l = la[j] < l ? la[j] : l, h = ha[j] > h ? ha[j] : h;
    for (; i < n; i++) l = x[i] < l ? x[i] : l, h = x[i] > h ? x[i] : h;
    *lo = l, *hi = h;
}

static void range_scalar(const float *x, int64_t n, float *lo, float *hi) {
    float l = 0, h = 0;
    for (int64_t i = 0; i < n; i++) l = x[i] < l ? x[i] : l, h = x[i] > h ? x[i] : h;
    *lo = l, *hi = h;
}

/* ONNX Runtime's dynamic quantisation of activations (DynamicQuantizeLinear): the range always
 * holds 0, scale = (max - min) / 255, zero point = round(-min / scale) in [0, 255]. */
void tb_quant_u8_params(const float *x, int64_t n, float *scale, int32_t *zero_point) {
    const int fast = __builtin_cpu_supports("avx512f"), avx2 = __builtin_cpu_supports("avx2");
    const int64_t chunk = 1 << 14, n_chunks = (n + chunk - 1) / chunk;
    float lo = 0.0f, hi = 0.0f;
#pragma omp parallel for reduction(min : lo) reduction(max : hi) schedule(static) if (n > SMALL)
    for (int64_t c = 0; c < n_chunks; c++) {
        float l, h;
        const int64_t len = n - c * chunk < chunk ? n - c * chunk : chunk;
        if (fast) range_avx512(x + c * chunk, len, &l, &h);
        else if (avx2) range_avx2(x + c * chunk, len, &l, &h);
        else range_scalar(x + c * chunk, len, &l, &h);
        lo = l < lo ? l : lo, hi = h > hi ? h : hi;
    }
    tb_act_quant_params(lo, hi, scale, zero_point);
}

void tb_act_quant_params(float lo, float hi, float *scale, int32_t *zero_point) {
    lo = lo < 0 ? lo : 0, hi = hi > 0 ? hi : 0;
    float s = (hi - lo) / 255.0f;
    if (!(s > 0)) s = 1.0f;
    float z = nearbyintf(-lo / s);
    *scale = s;
    *zero_point = (int32_t)(z < 0 ? 0 : z > 255 ? 255 : z);
}

/* q = saturate(round_half_even(x / scale) + zp) to [0, 255] (x / scale as x * (1 / scale),
 * in both versions) */
__attribute__((target("avx512f"))) static void quant_u8_avx512(uint8_t *q, const float *x,
                                                              int64_t n, float inv, int32_t zp) {
    const __m512 vi = _mm512_set1_ps(inv);
    const __m512i vz = _mm512_set1_epi32(zp), zero = _mm512_setzero_si512();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512i v = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(x + i), vi)); /* to even */
        v = _mm512_max_epi32(_mm512_add_epi32(v, vz), zero);
        _mm_storeu_si128((__m128i *)(q + i), _mm512_cvtusepi32_epi8(v));
    }
    for (; i < n; i++) {
        float v = nearbyintf(x[i] * inv) + (float)zp;
        q[i] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
    }
}

static void quant_u8(uint8_t *q, const float *x, int64_t n, float scale, int32_t zp) {
    const float inv = 1.0f / scale;
    const int fast = __builtin_cpu_supports("avx512f"), avx2 = tb_qgemm_has_avx2();
    const int64_t chunk = 1 << 14;
#pragma omp parallel for schedule(static) if (n > SMALL)
    for (int64_t i0 = 0; i0 < n; i0 += chunk) {
        const int64_t len = n - i0 < chunk ? n - i0 : chunk;
        if (fast) {
            quant_u8_avx512(q + i0, x + i0, len, inv, zp);
            continue;
        }
        if (avx2) { /* qgemm.c's AVX2 rows: the same values; one row of len bytes, no padding */
            tb_qgemm_quant(q + i0, len, x + i0, 1, len, scale, zp);
            continue;
        }
        for (int64_t i = i0; i < i0 + len; i++) {
            float v = nearbyintf(x[i] * inv) + (float)zp;
            q[i] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
        }
    }
}

/* ---- oneDNN pieces ---- */

static dnnl_status_t md2(dnnl_memory_desc_t *md, int64_t r, int64_t c, dnnl_data_type_t t,
                         dnnl_format_tag_t tag) {
    dnnl_dims_t d = {r, c};
    return dnnl_memory_desc_init_by_tag(md, 2, d, t, tag);
}

static dnnl_data_type_t src_type(int prec) {
    return prec == TB_PREC_FP32 ? dnnl_f32 : prec == TB_PREC_BF16 ? dnnl_bf16 : dnnl_u8;
}
static dnnl_data_type_t wei_type(int prec) {
    return prec == TB_PREC_FP32 ? dnnl_f32 : prec == TB_PREC_BF16 ? dnnl_bf16 : dnnl_s8;
}
static size_t wei_size(int prec) { return prec == TB_PREC_FP32 ? 4 : prec == TB_PREC_BF16 ? 2 : 1; }

/* oneDNN's eltwise algorithm and alpha for an activation: 0 if it has none. */
static int act_alg(int act, dnnl_alg_kind_t *alg, float *alpha) {
    *alpha = 0;
    switch (act) {
    case TB_ACT_GELU: *alg = dnnl_eltwise_gelu_erf; return 1;
    case TB_ACT_GELU_TANH: *alg = dnnl_eltwise_gelu_tanh; return 1;
    case TB_ACT_RELU: *alg = dnnl_eltwise_relu; return 1;
    case TB_ACT_SILU: *alg = dnnl_eltwise_swish, *alpha = 1.0f; return 1;
    case TB_ACT_QUICK_GELU: *alg = dnnl_eltwise_swish, *alpha = 1.702f; return 1;
    default: return 0;
    }
}

/* The matmul y (M x N, row stride ldy, f32) = act(x (M x K) W (K x N) [+ bias]) [+ y]. int8:
 * the integer sums times one row vector plus another (binary post-ops 0 and 1: oneDNN 2.6's
 * run-time output scales would rule out its VNNI brgemm kernel). act < 0: none. wmd NULL: let
 * oneDNN choose the weights' layout. */
static dnnl_status_t make_matmul_pd(dnnl_primitive_desc_t *pd, dnnl_engine_t eng, int prec,
                                    int64_t M, int64_t N, int64_t K, int64_t ldy, int bias,
                                    int acc, int act, const dnnl_memory_desc_t *wmd) {
    dnnl_memory_desc_t src, wei, dst, bia;
    dnnl_dims_t dd = {M, N}, ds = {ldy, 1};
    dnnl_status_t st;
    if ((st = md2(&src, M, K, src_type(prec), dnnl_ab))) return st;
    if (wmd) wei = *wmd;
    else if ((st = md2(&wei, K, N, wei_type(prec), dnnl_format_tag_any))) return st;
    if ((st = dnnl_memory_desc_init_by_strides(&dst, 2, dd, dnnl_f32, ds))) return st;
    if (bias && (st = md2(&bia, 1, N, dnnl_f32, dnnl_ab))) return st;
    dnnl_matmul_desc_t mdesc;
    if ((st = dnnl_matmul_desc_init(&mdesc, &src, &wei, bias ? &bia : NULL, &dst))) return st;
    dnnl_primitive_attr_t attr;
    if ((st = dnnl_primitive_attr_create(&attr))) return st;
    dnnl_post_ops_t po = NULL;
    dnnl_alg_kind_t alg;
    float alpha;
    if ((acc || act >= 0 || prec == TB_PREC_INT8) && !(st = dnnl_post_ops_create(&po))) {
        if (prec == TB_PREC_INT8) { /* x a row vector (the scales), + a row vector */
            dnnl_memory_desc_t vmd;
            st = md2(&vmd, 1, N, dnnl_f32, dnnl_ab);
            if (!st) st = dnnl_post_ops_append_binary(po, dnnl_binary_mul, &vmd);
            if (!st) st = dnnl_post_ops_append_binary(po, dnnl_binary_add, &vmd);
        }
        if (!st && act >= 0 && act_alg(act, &alg, &alpha))
            st = dnnl_post_ops_append_eltwise(po, 1.0f, alg, alpha, 0.0f);
        if (!st && acc) st = dnnl_post_ops_append_sum(po, 1.0f);
        if (!st) st = dnnl_primitive_attr_set_post_ops(attr, po);
    }
    if (!st) st = dnnl_primitive_desc_create(pd, &mdesc, attr, eng, NULL);
    if (po) dnnl_post_ops_destroy(po);
    dnnl_primitive_attr_destroy(attr);
    return st;
}

/* Plain (N, K) row-major values, seen as the K x N matrix W^T (tag ba), reordered into wmd. */
static dnnl_status_t reorder_weights(void *dst, const dnnl_memory_desc_t *wmd, void *plain,
                                     int64_t N, int64_t K, int prec, dnnl_engine_t eng) {
    dnnl_memory_desc_t pmd;
    dnnl_status_t st = md2(&pmd, K, N, wei_type(prec), dnnl_ba);
    if (st) return st;
    dnnl_primitive_desc_t rpd = NULL;
    dnnl_primitive_t r = NULL;
    dnnl_memory_t a = NULL, b = NULL;
    dnnl_stream_t s = NULL;
    if (!(st = dnnl_reorder_primitive_desc_create(&rpd, &pmd, eng, wmd, eng, NULL)) &&
        !(st = dnnl_primitive_create(&r, rpd)) &&
        !(st = dnnl_memory_create(&a, &pmd, eng, plain)) &&
        !(st = dnnl_memory_create(&b, wmd, eng, dst)) &&
        !(st = dnnl_stream_create(&s, eng, dnnl_stream_default_flags))) {
        dnnl_exec_arg_t args[2] = {{DNNL_ARG_FROM, a}, {DNNL_ARG_TO, b}};
        st = dnnl_primitive_execute(r, s, 2, args);
        if (!st) st = dnnl_stream_wait(s);
    }
    if (s) dnnl_stream_destroy(s);
    if (a) dnnl_memory_destroy(a);
    if (b) dnnl_memory_destroy(b);
    if (r) dnnl_primitive_destroy(r);
    if (rpd) dnnl_primitive_desc_destroy(rpd);
    return st;
}

/* ---- weights ---- */

/* int8: symmetric per output channel, q in [-qmax, qmax] (ONNX Runtime's per-channel s8: qmax
 * 127, or 63 for the AVX2 kernel, int8_weight_max). */
static void quant_weights_s8(int8_t *q, float *scale, int32_t *colsum, const float *W, int64_t N,
                             int64_t K, int qmax) {
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; n++) {
        const float *w = W + n * K;
        float amax = 0;
        for (int64_t k = 0; k < K; k++) amax = fabsf(w[k]) > amax ? fabsf(w[k]) : amax;
        const float s = amax > 0 ? amax / (float)qmax : 1.0f;
        int32_t sum = 0;
        for (int64_t k = 0; k < K; k++) {
            float v = nearbyintf(w[k] / s);
            int8_t qi = (int8_t)(v < -qmax ? -qmax : v > qmax ? qmax : v);
            q[n * K + k] = qi;
            sum += qi;
        }
        scale[n] = s, colsum[n] = sum;
    }
}

void tb_qweight_free(tb_qweight *q) {
    if (!q) return;
    tb_free(q->data);
    tb_free(q->scale);
    tb_free(q->colsum);
    memset(q, 0, sizeof *q);
}

int tb_qweight_init(tb_qweight *q, dnnl_engine_t eng, const float *W, int64_t N, int64_t K,
                    int prec, int native, tb_err *e) {
    memset(q, 0, sizeof *q);
    /* int8 on AVX2 without VNNI: our own kernel, unless oneDNN's is asked for */
    q->avx2 = prec == TB_PREC_INT8 && native == 1 && !vnni() && tb_qgemm_has_avx2();
    native = native || prec == TB_PREC_FP32; /* f32 has no other path */
    q->prec = prec, q->native = native, q->N = N, q->K = K;
    const size_t esize = wei_size(prec), n = (size_t)(N * K);
    void *plain = prec == TB_PREC_FP32 ? (void *)W : tb_alloc(n * esize);
    if (!plain) return tb_fail(e, TUBELET_ERR_MEMORY, "out of memory (reduced-precision weights)");
    if (prec == TB_PREC_FP32) {
        /* reordered straight from W below */
    } else if (prec == TB_PREC_BF16) {
        to_bf16(plain, W, (int64_t)n, 0);
    } else {
        q->scale = tb_alloc(sizeof(float) * (size_t)N);
        q->colsum = tb_alloc(sizeof(int32_t) * (size_t)N);
        if (!q->scale || !q->colsum) {
            tb_free(plain);
            tb_qweight_free(q);
            return tb_fail(e, TUBELET_ERR_MEMORY, "out of memory (reduced-precision weights)");
        }
        quant_weights_s8(plain, q->scale, q->colsum, W, N, K, tb_int8_weight_max(native));
    }
    const size_t extra = prec == TB_PREC_INT8 ? (sizeof(float) + sizeof(int32_t)) * (size_t)N : 0;
    if (q->avx2) { /* 7-bit weights in qgemm.h's panels */
        const size_t pb = tb_qgemm_pack_bytes(N, K);
        q->data = tb_alloc(pb);
        if (!q->data) {
            tb_free(plain);
            tb_qweight_free(q);
            return tb_fail(e, TUBELET_ERR_MEMORY, "out of memory (reduced-precision weights)");
        }
        tb_qgemm_pack(q->data, plain, N, K);
        tb_free(plain);
        q->bytes = pb + extra;
        return TUBELET_OK;
    }
    if (!native) {
        q->data = plain, q->bytes = n * esize + extra;
        return TUBELET_OK;
    }
    /* the layout the primitive wants for a typical number of rows; every shape's primitive is
     * then made for this layout */
    dnnl_primitive_desc_t pd = NULL;
    dnnl_status_t st = make_matmul_pd(&pd, eng, prec, 1024, N, K, N, 0, 0, -1, NULL);
    if (!st) {
        q->wmd = *dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
        dnnl_primitive_desc_destroy(pd);
        q->bytes = dnnl_memory_desc_get_size(&q->wmd) + extra;
        q->data = tb_alloc(dnnl_memory_desc_get_size(&q->wmd));
        st = q->data ? reorder_weights(q->data, &q->wmd, plain, N, K, prec, eng)
                     : dnnl_out_of_memory;
    }
    if (plain != W) tb_free(plain);
    if (st) {
        tb_qweight_free(q);
        return tb_fail(e, TUBELET_ERR_UNSUPPORTED,
                       "oneDNN cannot make a %s matmul of %lld x %lld weights (status %d)",
                       prec == TB_PREC_FP32 ? "fp32" : prec == TB_PREC_BF16 ? "bf16" : "int8",
                       (long long)N, (long long)K, (int)st);
    }
    return TUBELET_OK;
}

/* ---- the packed weights of a model ---- */

struct tb_linear_pack {
    dnnl_engine_t eng;
    int prec, native;
    tb_qweight *w;
    char (*name)[TB_LAYER_NAME];
    int n, cap;
    size_t bytes;
};

int tb_linear_pack_new(tb_linear_pack **out, int precision, int native, int max_weights,
                       tb_err *e) {
    tb_linear_pack *p = calloc(1, sizeof *p);
    *out = NULL;
    const size_t cap = (size_t)(max_weights > 0 ? max_weights : 1);
    if (p) p->w = calloc(cap, sizeof(tb_qweight)), p->name = calloc(cap, TB_LAYER_NAME);
    if (!p || !p->w || !p->name) {
        if (p) free(p->w), free(p->name);
        free(p);
        return tb_fail(e, TUBELET_ERR_MEMORY, "out of memory");
    }
    p->prec = precision, p->native = native, p->cap = max_weights;
    if (dnnl_engine_create(&p->eng, dnnl_cpu, 0)) {
        p->eng = NULL;
        tb_linear_pack_free(p);
        return tb_fail(e, TUBELET_ERR_UNSUPPORTED, "oneDNN has no CPU engine");
    }
    *out = p;
    return TUBELET_OK;
}

int tb_linear_pack_add(tb_linear_pack *p, const char *name, const float *W, int64_t N, int64_t K,
                       const tb_qweight **out, tb_err *e) {
    if (p->n == p->cap) return tb_fail(e, TUBELET_ERR_ARG, "more linear layers than planned");
    tb_qweight *q = &p->w[p->n];
    int rc = tb_qweight_init(q, p->eng, W, N, K, p->prec, p->native, e);
    if (rc) return rc;
    q->id = p->n;
    snprintf(p->name[p->n], TB_LAYER_NAME, "%s", name);
    p->n++;
    p->bytes += q->bytes;
    *out = q;
    return TUBELET_OK;
}

size_t tb_linear_pack_bytes(const tb_linear_pack *p) { return p ? p->bytes : 0; }

int tb_linear_pack_count(const tb_linear_pack *p) { return p ? p->n : 0; }

const char *tb_linear_pack_layer(const tb_linear_pack *p, int i, int64_t *N, int64_t *K) {
    if (!p || i < 0 || i >= p->n) return NULL;
    *N = p->w[i].N, *K = p->w[i].K;
    return p->name[i];
}

void tb_linear_pack_set_act(tb_linear_pack *p, int i, float scale, int32_t zero_point) {
    p->w[i].act_scale = scale, p->w[i].act_zp = zero_point;
}

int tb_linear_pack_is_static(const tb_linear_pack *p) {
    int n = 0;
    for (int i = 0; p && i < p->n; i++) n += p->w[i].act_scale > 0;
    return n > 0 && n == p->n;
}

void tb_linear_pack_free(tb_linear_pack *p) {
    if (!p) return;
    for (int i = 0; i < p->n; i++) tb_qweight_free(&p->w[i]);
    free(p->w), free(p->name);
    if (p->eng) dnnl_engine_destroy(p->eng);
    free(p);
}

int tb_linear_ctx_new(tb_lowp_ctx **out, const tb_linear_pack *p, int64_t max_mk, int64_t max_n,
                      int64_t max_nk, tb_err *e) {
    return tb_lowp_ctx_new(out, p->eng, p->native, max_mk, max_n, max_nk, e);
}

/* ---- per-state context ---- */

typedef struct {
    int ta, tb, acc;
    int64_t M, N, K, ldc;
    dnnl_primitive_t prim;
    dnnl_memory_t a, b, c;
} gemm_entry;
#define TB_GEMM_CACHE 128 /* Video Swin's 4 stages x 5 layer shapes x 3 products fit */

typedef struct {
    int prec, bias, acc, act;
    int64_t M, N, K, ldy;
    dnnl_primitive_t prim;
    dnnl_memory_t src, wei, dst, bia, scale, vec;
} prim_entry;

struct tb_lowp_ctx {
    dnnl_engine_t eng;
    dnnl_stream_t stream;
    int native, fast_bf16;
    int status;         /* the first failure since tb_lowp_ctx_status last read it */
    tb_lowp_observer observe; /* calibration (tb_lowp_ctx_observe), or NULL */
    void *observe_user;
    prim_entry ent[TB_LOWP_CACHE];
    int n_ent;
    void *xq;           /* activations in bf16 or u8 (max_mk) */
    float *vec;         /* int8: output scales and the per-column term (2 max_n) */
    float *xf, *wf;     /* reference path: rounded activations and weights in f32 */
    float *sum;         /* AVX2 int8 with accumulation: the product before it is added (grown) */
    int64_t sum_floats;
    uint8_t *xa;        /* our AVX2 int8 kernel: the u8 activations, rows padded (grown) */
    size_t xa_bytes;
    size_t bytes;
    /* mixed-precision training (tb_gemm_bf16): its primitives, made on first use and replaced
     * in turn when the cache is full, and its operands' bf16 (native) or rounded f32 copies,
     * grown to the largest product met */
    gemm_entry gent[TB_GEMM_CACHE];
    int n_gent, evict;
    void *ops;
    size_t ops_bytes;
};

int tb_lowp_ctx_new(tb_lowp_ctx **out, dnnl_engine_t eng, int native, int64_t max_mk,
                    int64_t max_n, int64_t max_nk, tb_err *e) {
    tb_lowp_ctx *c = calloc(1, sizeof *c);
    *out = NULL;
    if (!c) return tb_fail(e, TUBELET_ERR_MEMORY, "out of memory");
    c->eng = eng, c->native = native;
    c->fast_bf16 = native && tb_lowp_cpu_has(TB_PREC_BF16);
    c->bytes = (size_t)max_mk * 2 + sizeof(float) * 2 * (size_t)max_n;
    c->xq = max_mk ? tb_alloc((size_t)max_mk * 2) : NULL;
    c->vec = tb_alloc(sizeof(float) * 2 * (size_t)max_n);
    int ok = (c->xq || !max_mk) && c->vec;
    if (!native) {
        c->xf = tb_alloc(sizeof(float) * (size_t)max_mk);
        c->wf = tb_alloc(sizeof(float) * (size_t)max_nk);
        c->bytes += sizeof(float) * (size_t)(max_mk + max_nk);
        ok = ok && c->xf && c->wf;
    }
    if (ok && native && dnnl_stream_create(&c->stream, eng, dnnl_stream_default_flags)) ok = 0;
    if (!ok) {
        tb_lowp_ctx_free(c);
        return tb_fail(e, TUBELET_ERR_MEMORY, "out of memory (reduced-precision scratch)");
    }
    *out = c;
    return TUBELET_OK;
}

static void entry_free(prim_entry *p) {
    dnnl_memory_t *mems[] = {&p->src, &p->wei, &p->dst, &p->bia, &p->scale, &p->vec};
    for (size_t i = 0; i < sizeof mems / sizeof *mems; i++)
        if (*mems[i]) dnnl_memory_destroy(*mems[i]);
    if (p->prim) dnnl_primitive_destroy(p->prim);
}

static void gemm_entry_free(gemm_entry *p) {
    if (p->a) dnnl_memory_destroy(p->a);
    if (p->b) dnnl_memory_destroy(p->b);
    if (p->c) dnnl_memory_destroy(p->c);
    if (p->prim) dnnl_primitive_destroy(p->prim);
    memset(p, 0, sizeof *p);
}

void tb_lowp_ctx_free(tb_lowp_ctx *c) {
    if (!c) return;
    for (int i = 0; i < c->n_ent; i++) entry_free(&c->ent[i]);
    for (int i = 0; i < c->n_gent; i++) gemm_entry_free(&c->gent[i]);
    tb_free(c->ops);
    if (c->stream) dnnl_stream_destroy(c->stream);
    tb_free(c->xq), tb_free(c->vec), tb_free(c->xf), tb_free(c->wf), tb_free(c->sum);
    tb_free(c->xa);
    free(c);
}

size_t tb_lowp_ctx_bytes(const tb_lowp_ctx *c) { return c ? c->bytes : 0; }

int tb_lowp_ctx_status(tb_lowp_ctx *c) {
    if (!c) return TUBELET_OK;
    const int st = c->status;
    c->status = TUBELET_OK;
    return st;
}

/* A product that could not run: its output is NaN (never a silently wrong answer) and the
 * context remembers the failure for the caller's status. */
static int qlinear_failed(tb_lowp_ctx *c, float *y, int64_t ldy, int64_t M, int64_t N) {
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) y[i * ldy + j] = NAN;
    if (!c->status) c->status = TUBELET_ERR_UNSUPPORTED;
    return TUBELET_ERR_UNSUPPORTED;
}

void tb_lowp_ctx_fail(tb_lowp_ctx *c, float *y, int64_t ldy, int64_t M, int64_t N) {
    qlinear_failed(c, y, ldy, M, N);
}

void tb_lowp_ctx_observe(tb_lowp_ctx *c, tb_lowp_observer fn, void *user) {
    c->observe = fn, c->observe_user = user;
}

/* The activations' u8 scale and zero point: the layer's calibrated ones (static int8), or the
 * range of this call's x (dynamic). */
static void act_params(const tb_qweight *w, const float *x, int64_t n, float *scale, int32_t *zp) {
    if (w->act_scale > 0) *scale = w->act_scale, *zp = w->act_zp;
    else tb_quant_u8_params(x, n, scale, zp);
}

/* The primitive of this shape, made on first use (NULL if oneDNN cannot make it). */
static prim_entry *get_entry(tb_lowp_ctx *c, const tb_qweight *w, int64_t M, int64_t ldy,
                             int bias, int acc, int act) {
    for (int i = 0; i < c->n_ent; i++) {
        prim_entry *p = &c->ent[i];
        if (p->prec == w->prec && p->M == M && p->N == w->N && p->K == w->K && p->ldy == ldy &&
            p->bias == bias && p->acc == acc && p->act == act)
            return p;
    }
    if (c->n_ent == TB_LOWP_CACHE) return NULL;
    prim_entry *p = &c->ent[c->n_ent];
    memset(p, 0, sizeof *p);
    *p = (prim_entry){w->prec, bias, acc, act, M, w->N, w->K, ldy, NULL, NULL, NULL, NULL, NULL,
                      NULL, NULL};
    dnnl_primitive_desc_t pd;
    if (make_matmul_pd(&pd, c->eng, w->prec, M, w->N, w->K, ldy, bias, acc, act, &w->wmd))
        return NULL;
    dnnl_status_t st = dnnl_primitive_create(&p->prim, pd);
    const dnnl_query_t q[] = {dnnl_query_src_md, dnnl_query_weights_md, dnnl_query_dst_md};
    dnnl_memory_t *m[] = {&p->src, &p->wei, &p->dst};
    for (int i = 0; i < 3 && !st; i++)
        st = dnnl_memory_create(m[i], dnnl_primitive_desc_query_md(pd, q[i], 0), c->eng,
                                DNNL_MEMORY_NONE);
    if (!st && bias)
        st = dnnl_memory_create(&p->bia, dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 1),
                                c->eng, DNNL_MEMORY_NONE);
    if (!st && w->prec == TB_PREC_INT8) {
        dnnl_memory_desc_t smd;
        st = md2(&smd, 1, w->N, dnnl_f32, dnnl_ab);
        if (!st) st = dnnl_memory_create(&p->scale, &smd, c->eng, DNNL_MEMORY_NONE);
        if (!st) st = dnnl_memory_create(&p->vec, &smd, c->eng, DNNL_MEMORY_NONE);
    }
    dnnl_primitive_desc_destroy(pd);
    if (st) {
        entry_free(p);
        return NULL;
    }
    c->n_ent++;
    return p;
}

/* The reference path: the same rounded values, expanded to f32, through sgemm. */
static void qlinear_reference(tb_lowp_ctx *c, float *y, int64_t ldy, const float *x,
                              const tb_qweight *w, const float *b, int64_t M, int accumulate) {
    const int64_t N = w->N, K = w->K, n = M * K;
    if (w->prec == TB_PREC_BF16) {
        const uint16_t *wq = w->data;
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < n; i++) c->xf[i] = tb_f32_from_bf16(tb_bf16_from_f32(x[i]));
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < N * K; i++) c->wf[i] = tb_f32_from_bf16(wq[i]);
    } else {
        float sa;
        int32_t z;
        uint8_t *xq = c->xq;
        const int8_t *wq = w->data;
        act_params(w, x, n, &sa, &z);
        quant_u8(xq, x, n, sa, z);
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < n; i++) c->xf[i] = (float)((int32_t)xq[i] - z) * sa;
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < N * K; i++) c->wf[i] = (float)wq[i] * w->scale[i / K];
    }
    tb_linear(y, ldy, c->xf, c->wf, b, M, N, K, accumulate);
}

/* int8 through our AVX2 kernel (qgemm.h): the activations quantised as everywhere else, rows
 * padded to a multiple of 4 bytes; y = sa s[n] (sum q_x q_w - z colsum[n]) + b[n] [+ y], the
 * scale and the per-channel term folded as for oneDNN's post-ops; an activation in the kernel's
 * epilogue, block by block. */
static int qlinear_avx2(tb_lowp_ctx *c, float *y, int64_t ldy, const float *x,
                        const tb_qweight *w, const float *b, int64_t M, int accumulate, int act) {
    const int64_t N = w->N, K = w->K, lda = tb_qgemm_lda(K);
    const size_t need = (size_t)(M * lda);
    if (c->xa_bytes < need) {
        tb_free(c->xa);
        c->bytes -= c->xa_bytes;
        c->xa = tb_alloc(need);
        c->xa_bytes = c->xa ? need : 0;
        c->bytes += c->xa_bytes;
        if (!c->xa) return qlinear_failed(c, y, ldy, M, N);
    }
    float sa;
    int32_t z;
    act_params(w, x, M * K, &sa, &z);
    tb_qgemm_quant(c->xa, lda, x, M, K, sa, z);
    for (int64_t j = 0; j < N; j++) {
        c->vec[j] = sa * w->scale[j];
        c->vec[N + j] = (b ? b[j] : 0.0f) - c->vec[j] * (float)z * (float)w->colsum[j];
    }
    tb_qgemm(y, ldy, c->xa, lda, w->data, c->vec, c->vec + N, M, N, K, accumulate, act);
    return TUBELET_OK;
}

static int qlinear(tb_lowp_ctx *c, float *y, int64_t ldy, const float *x, const tb_qweight *w,
                   const float *b, int64_t M, int accumulate, int act) {
    if (w->avx2) return qlinear_avx2(c, y, ldy, x, w, b, M, accumulate, act);
    dnnl_alg_kind_t alg;
    float alpha;
    const int fused_act = act >= 0 && !accumulate && act_alg(act, &alg, &alpha);
    if (!w->native || (act >= 0 && !fused_act)) { /* the activation after, as its own pass */
        int rc = TUBELET_OK;
        if (w->native) rc = qlinear(c, y, ldy, x, w, NULL, M, accumulate, -1);
        else qlinear_reference(c, y, ldy, x, w, act >= 0 ? NULL : b, M, accumulate);
        if (act >= 0) tb_bias_act(y, b, M, w->N, (tb_act)act);
        return rc;
    }
    const int64_t N = w->N, K = w->K;
    if (accumulate && w->prec == TB_PREC_INT8 && !vnni()) {
        /* oneDNN 2.6 runs an int8 product with a sum post-op on AVX2 in its reference kernel
         * (ref_int8, hundreds of times slower): the product goes to scratch, then is added */
        if (c->sum_floats < M * N) {
            tb_free(c->sum);
            c->sum = tb_alloc(sizeof(float) * (size_t)(M * N));
            c->sum_floats = c->sum ? M * N : 0;
            c->bytes += sizeof(float) * (size_t)c->sum_floats;
        }
        if (!c->sum || qlinear(c, c->sum, N, x, w, b, M, 0, -1))
            return qlinear_failed(c, y, ldy, M, N);
#pragma omp parallel for schedule(static) if (M * N > SMALL)
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) y[i * ldy + j] += c->sum[i * N + j];
        return TUBELET_OK;
    }
    const int f32 = w->prec == TB_PREC_FP32, bf16 = w->prec == TB_PREC_BF16;
    /* int8 adds its bias in its second post-op */
    prim_entry *p = get_entry(c, w, M, ldy, (f32 || bf16) && b, accumulate, act);
    if (!p) return qlinear_failed(c, y, ldy, M, N); /* oneDNN refused, or too many shapes */
    float sa = 1;
    int32_t z = 0;
    if (f32) {
        /* the activations as they are */
    } else if (bf16) {
        to_bf16(c->xq, x, M * K, c->fast_bf16);
    } else {
        act_params(w, x, M * K, &sa, &z);
        quant_u8(c->xq, x, M * K, sa, z);
        /* y = sa s[n] (sum_k q_x q_w - z colsum[n]) + b[n]: the scale goes to oneDNN, the rest
         * are the two vectors of the post-ops */
        for (int64_t j = 0; j < N; j++) {
            c->vec[j] = sa * w->scale[j];
            c->vec[N + j] = (b ? b[j] : 0.0f) - c->vec[j] * (float)z * (float)w->colsum[j];
        }
        dnnl_memory_set_data_handle(p->scale, c->vec);
    }
    dnnl_memory_set_data_handle(p->src, f32 ? (void *)x : c->xq);
    dnnl_memory_set_data_handle(p->wei, w->data);
    dnnl_memory_set_data_handle(p->dst, y);
    dnnl_exec_arg_t args[6] = {{DNNL_ARG_SRC, p->src}, {DNNL_ARG_WEIGHTS, p->wei},
                               {DNNL_ARG_DST, p->dst}};
    int na = 3;
    if (p->bia) {
        dnnl_memory_set_data_handle(p->bia, (void *)b);
        args[na++] = (dnnl_exec_arg_t){DNNL_ARG_BIAS, p->bia};
    }
    if (p->scale) {
        dnnl_memory_set_data_handle(p->vec, c->vec + N);
        args[na++] = (dnnl_exec_arg_t){DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1,
                                       p->scale};
        args[na++] = (dnnl_exec_arg_t){DNNL_ARG_ATTR_MULTIPLE_POST_OP(1) | DNNL_ARG_SRC_1,
                                       p->vec};
    }
    if (dnnl_primitive_execute(p->prim, c->stream, na, args) || dnnl_stream_wait(c->stream))
        return qlinear_failed(c, y, ldy, M, N);
    return TUBELET_OK;
}

int tb_qlinear(tb_lowp_ctx *c, float *y, int64_t ldy, const float *x, const tb_qweight *w,
               const float *b, int64_t M, int accumulate, int act) {
    if (M <= 0) return TUBELET_OK;
    if (c->observe) c->observe(c->observe_user, w->id, x, M * w->K);
    return qlinear(c, y, ldy, x, w, b, M, accumulate, act);
}

/* ---- bf16 products for mixed-precision training ----
 * Both operands are rounded into contiguous copies in the layout they are stored in; the
 * primitive reads a transposed one through its strides, so no copy transposes. */

/* dst (rows x cols, contiguous) = src (row stride ld) rounded to bf16: bf16 values (native), or
 * the rounded values in f32 (the portable path). */
static void round_operand(void *dst, const float *src, int64_t ld, int64_t rows, int64_t cols,
                          int native, int fast) {
    uint16_t *h = dst;
    float *f = dst;
#pragma omp parallel for schedule(static) if (rows * cols > SMALL)
    for (int64_t i = 0; i < rows; i++) {
        if (native) {
            to_bf16(h + i * cols, src + i * ld, cols, fast);
            continue;
        }
        for (int64_t j = 0; j < cols; j++)
            f[i * cols + j] = tb_f32_from_bf16(tb_bf16_from_f32(src[i * ld + j]));
    }
}

static gemm_entry *get_gemm_entry(tb_lowp_ctx *c, int ta, int tb, int64_t M, int64_t N, int64_t K,
                                  int64_t ldc, int acc) {
    for (int i = 0; i < c->n_gent; i++) {
        gemm_entry *p = &c->gent[i];
        if (p->ta == ta && p->tb == tb && p->M == M && p->N == N && p->K == K && p->ldc == ldc &&
            p->acc == acc)
            return p;
    }
    gemm_entry *p;
    if (c->n_gent < TB_GEMM_CACHE) p = &c->gent[c->n_gent++];
    else { /* full: replace the entries in turn */
        p = &c->gent[c->evict];
        c->evict = (c->evict + 1) % TB_GEMM_CACHE;
        gemm_entry_free(p);
    }
    memset(p, 0, sizeof *p);
    /* op(A) (M x K) and op(B) (K x N) over the copies: A stored M x K, or K x M when ta; B
     * stored K x N, or N x K when tb */
    dnnl_memory_desc_t a, b, d;
    dnnl_dims_t da = {M, K}, sa = {ta ? 1 : K, ta ? M : 1};
    dnnl_dims_t db = {K, N}, sb = {tb ? 1 : N, tb ? K : 1};
    dnnl_dims_t dd = {M, N}, sd = {ldc, 1};
    dnnl_status_t st = dnnl_memory_desc_init_by_strides(&a, 2, da, dnnl_bf16, sa);
    if (!st) st = dnnl_memory_desc_init_by_strides(&b, 2, db, dnnl_bf16, sb);
    if (!st) st = dnnl_memory_desc_init_by_strides(&d, 2, dd, dnnl_f32, sd);
    dnnl_matmul_desc_t mdesc;
    if (!st) st = dnnl_matmul_desc_init(&mdesc, &a, &b, NULL, &d);
    dnnl_primitive_attr_t attr = NULL;
    dnnl_post_ops_t po = NULL;
    if (!st) st = dnnl_primitive_attr_create(&attr);
    if (!st && acc && !(st = dnnl_post_ops_create(&po))) {
        st = dnnl_post_ops_append_sum(po, 1.0f);
        if (!st) st = dnnl_primitive_attr_set_post_ops(attr, po);
    }
    dnnl_primitive_desc_t pd = NULL;
    if (!st) st = dnnl_primitive_desc_create(&pd, &mdesc, attr, c->eng, NULL);
    if (!st) st = dnnl_primitive_create(&p->prim, pd);
    if (!st) st = dnnl_memory_create(&p->a, &a, c->eng, DNNL_MEMORY_NONE);
    if (!st) st = dnnl_memory_create(&p->b, &b, c->eng, DNNL_MEMORY_NONE);
    if (!st) st = dnnl_memory_create(&p->c, &d, c->eng, DNNL_MEMORY_NONE);
    if (pd) dnnl_primitive_desc_destroy(pd);
    if (po) dnnl_post_ops_destroy(po);
    if (attr) dnnl_primitive_attr_destroy(attr);
    if (st) {
        gemm_entry_free(p);
        return NULL;
    }
    p->ta = ta, p->tb = tb, p->M = M, p->N = N, p->K = K, p->ldc = ldc, p->acc = acc;
    return p;
}

/* The operands' room: bytes for both copies, grown to the largest product met. 0 if there is
 * none (the product's output is then NaN and the context keeps the failure). */
static int ops_room(tb_lowp_ctx *c, size_t need) {
    if (need <= c->ops_bytes) return 1;
    tb_free(c->ops);
    c->ops = tb_alloc(need);
    c->ops_bytes = c->ops ? need : 0;
    if (!c->ops && !c->status) c->status = TUBELET_ERR_MEMORY;
    return c->ops != NULL;
}

/* C (M x N, row stride ldc) = op(a) op(b) [+ C] over rounded copies: a stored M x K (K x M when
 * ta), b K x N (N x K when tb), contiguous. */
static void bf16_product(tb_lowp_ctx *c, int ta, int tb, int64_t M, int64_t N, int64_t K,
                         const void *a, const void *b, int accumulate, float *C, int64_t ldc) {
    if (!c->native) {
        tb_gemm(ta, tb, M, N, K, 1.0f, a, ta ? M : K, b, tb ? K : N, accumulate ? 1.0f : 0.0f, C,
                ldc);
        return;
    }
    gemm_entry *p = get_gemm_entry(c, ta, tb, M, N, K, ldc, accumulate);
    if (!p) {
        qlinear_failed(c, C, ldc, M, N);
        return;
    }
    dnnl_memory_set_data_handle(p->a, (void *)a);
    dnnl_memory_set_data_handle(p->b, (void *)b);
    dnnl_memory_set_data_handle(p->c, C);
    dnnl_exec_arg_t args[3] = {
        {DNNL_ARG_SRC, p->a}, {DNNL_ARG_WEIGHTS, p->b}, {DNNL_ARG_DST, p->c}};
    if (dnnl_primitive_execute(p->prim, c->stream, 3, args) || dnnl_stream_wait(c->stream))
        qlinear_failed(c, C, ldc, M, N);
}

void tb_gemm_bf16(tb_lowp_ctx *c, int trans_a, int trans_b, int64_t M, int64_t N, int64_t K,
                  const float *A, int64_t lda, const float *B, int64_t ldb, int accumulate,
                  float *C, int64_t ldc) {
    if (M <= 0 || N <= 0) return;
    if (K <= 0) {
        if (!accumulate)
            for (int64_t i = 0; i < M; i++) memset(C + i * ldc, 0, sizeof(float) * (size_t)N);
        return;
    }
    const size_t esize = c->native ? 2 : 4;
    if (!ops_room(c, esize * (size_t)((M + N) * K))) {
        qlinear_failed(c, C, ldc, M, N);
        return;
    }
    char *a = c->ops, *b = a + esize * (size_t)(M * K);
    round_operand(a, A, lda, trans_a ? K : M, trans_a ? M : K, c->native, c->fast_bf16);
    round_operand(b, B, ldb, trans_b ? N : K, trans_b ? K : N, c->native, c->fast_bf16);
    bf16_product(c, trans_a, trans_b, M, N, K, a, b, accumulate, C, ldc);
}

void tb_linear_backward_bf16(tb_lowp_ctx *c, float *dx, int64_t lddx, float *dW, const float *dy,
                             int64_t lddy, const float *x, int64_t ldx, const float *W, int64_t M,
                             int64_t N, int64_t K, int accumulate_dx) {
    if (M <= 0 || N <= 0 || K <= 0 || (!dx && !dW)) return;
    const size_t esize = c->native ? 2 : 4;
    /* dy (M x N) once; then W (N x K) for dx, and x (M x K) for dW, in one second room */
    if (!ops_room(c, esize * (size_t)(M * N + (M > N ? M : N) * K))) {
        if (dx) qlinear_failed(c, dx, lddx, M, K);
        if (dW) qlinear_failed(c, dW, K, N, K);
        return;
    }
    char *d = c->ops, *o = d + esize * (size_t)(M * N);
    round_operand(d, dy, lddy, M, N, c->native, c->fast_bf16);
    if (dx) { /* dx (M x K) = dy W */
        round_operand(o, W, K, N, K, c->native, c->fast_bf16);
        bf16_product(c, 0, 0, M, K, N, d, o, accumulate_dx, dx, lddx);
    }
    if (dW) { /* dW (N x K) += dy^T x: dy's copy read transposed */
        round_operand(o, x, ldx, M, K, c->native, c->fast_bf16);
        bf16_product(c, 1, 0, N, K, M, d, o, 1, dW, K);
    }
}
