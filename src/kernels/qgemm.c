/* The AVX2 int8 product (qgemm.h): packed 7-bit weights, vpmaddubsw + vpmaddwd, 6 x 16
 * register blocks. Compiled for any x86-64; the AVX2 functions carry their own target
 * attribute and run only where __builtin_cpu_supports("avx2") says so. */
#include "qgemm.h"

#include "ops.h"

#include <math.h>
#include <string.h>

#include <immintrin.h>

#define NR 16 /* output channels of a panel (two ymm of 8 int32) */
#define MR 6  /* rows of the register block: 12 accumulators + 2 weights + 1 broadcast + ones */
#define MC 48 /* rows of a task: its activations (MC x K bytes) stay in L2 across the panels */

int tb_qgemm_has_avx2(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") != 0;
}

int64_t tb_qgemm_lda(int64_t K) { return (K + 3) & ~(int64_t)3; }

size_t tb_qgemm_pack_bytes(int64_t N, int64_t K) {
    return (size_t)((N + NR - 1) / NR * NR) * (size_t)tb_qgemm_lda(K);
}

void tb_qgemm_pack(int8_t *dst, const int8_t *w, int64_t N, int64_t K) {
    const int64_t Kp = tb_qgemm_lda(K), panels = (N + NR - 1) / NR;
#pragma omp parallel for schedule(static)
    for (int64_t p = 0; p < panels; p++) {
        int8_t *d = dst + p * NR * Kp;
        for (int64_t g = 0; g < Kp / 4; g++)
            for (int c = 0; c < NR; c++)
                for (int t = 0; t < 4; t++) {
                    const int64_t n = p * NR + c, k = 4 * g + t;
                    d[g * 4 * NR + c * 4 + t] = n < N && k < K ? w[n * K + k] : 0;
                }
    }
}

/* ---- activations ---- */

static void quant_row_scalar(uint8_t *q, const float *x, int64_t K, float inv, int32_t zp) {
    for (int64_t k = 0; k < K; k++) {
        float v = nearbyintf(x[k] * inv) + (float)zp;
        q[k] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
    }
}

/* The scalar steps in f32, 8 at a time: round to nearest even, + zp, clamp, convert. */
__attribute__((target("avx2"))) static void quant_row_avx2(uint8_t *q, const float *x, int64_t K,
                                                          float inv, int32_t zp) {
    const __m256 vi = _mm256_set1_ps(inv), vz = _mm256_set1_ps((float)zp);
    const __m256 lo = _mm256_setzero_ps(), hi = _mm256_set1_ps(255.0f);
    int64_t k = 0;
    for (; k + 32 <= K; k += 32) {
        __m256i v[4];
        for (int j = 0; j < 4; j++) {
            __m256 f = _mm256_round_ps(_mm256_mul_ps(_mm256_loadu_ps(x + k + 8 * j), vi),
                                       _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
            f = _mm256_min_ps(_mm256_max_ps(_mm256_add_ps(f, vz), lo), hi);
            v[j] = _mm256_cvttps_epi32(f);
        }
        /* 32 int32 in [0, 255] → 32 bytes; the packs work within 128-bit lanes, the permute
         * puts the 4-byte groups back in order */
        __m256i s = _mm256_packus_epi16(_mm256_packs_epi32(v[0], v[1]),
                                        _mm256_packs_epi32(v[2], v[3]));
        s = _mm256_permutevar8x32_epi32(s, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
        _mm256_storeu_si256((__m256i *)(q + k), s);
    }
    quant_row_scalar(q + k, x + k, K - k, inv, zp);
}

void tb_qgemm_quant(uint8_t *xq, int64_t lda, const float *x, int64_t M, int64_t K, float scale,
                    int32_t zp) {
    const float inv = 1.0f / scale;
    const int avx2 = tb_qgemm_has_avx2();
#pragma omp parallel for schedule(static) if (M * K > (1 << 15))
    for (int64_t i = 0; i < M; i++) {
        if (avx2) quant_row_avx2(xq + i * lda, x + i * K, K, inv, zp);
        else quant_row_scalar(xq + i * lda, x + i * K, K, inv, zp);
        memset(xq + i * lda + K, 0, (size_t)(lda - K));
    }
}

/* ---- the product ---- */

/* Rows [0, mr) of a block (mr <= MR, a constant where inlined) times one panel: nc (<= 16)
 * channels of y. */
__attribute__((target("avx2,fma"), always_inline)) static inline void
block(int mr, int nc, float *y, int64_t ldy, const uint8_t *a, int64_t lda, const int8_t *b,
      int64_t groups, const float *scale, const float *offset, int accumulate, int act) {
    __m256i acc[MR][2];
#pragma GCC unroll 6
    for (int r = 0; r < mr; r++) acc[r][0] = acc[r][1] = _mm256_setzero_si256();
    const __m256i ones = _mm256_set1_epi16(1);
    for (int64_t g = 0; g < groups; g++, b += 4 * NR) {
        const __m256i b0 = _mm256_load_si256((const __m256i *)b);
        const __m256i b1 = _mm256_load_si256((const __m256i *)(b + 32));
#pragma GCC unroll 6
        for (int r = 0; r < mr; r++) {
            int32_t v;
            memcpy(&v, a + r * lda + 4 * g, 4);
            const __m256i x = _mm256_set1_epi32(v);
            acc[r][0] = _mm256_add_epi32(acc[r][0],
                                         _mm256_madd_epi16(_mm256_maddubs_epi16(x, b0), ones));
            acc[r][1] = _mm256_add_epi32(acc[r][1],
                                         _mm256_madd_epi16(_mm256_maddubs_epi16(x, b1), ones));
        }
    }
    /* y = scale * sum + offset [+ y]; a partial panel stores through a mask */
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
#pragma GCC unroll 2
    for (int h = 0; h < 2; h++) {
        const int cols = nc - 8 * h;
        if (cols <= 0) break;
        const __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(cols), lane);
        const __m256 s = _mm256_maskload_ps(scale + 8 * h, mask);
        const __m256 o = _mm256_maskload_ps(offset + 8 * h, mask);
#pragma GCC unroll 6
        for (int r = 0; r < mr; r++) {
            float *yr = y + r * ldy + 8 * h;
            __m256 v = _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc[r][h]), s, o);
            if (cols >= 8) {
                if (accumulate) v = _mm256_add_ps(_mm256_loadu_ps(yr), v);
                _mm256_storeu_ps(yr, v);
            } else {
                if (accumulate) v = _mm256_add_ps(_mm256_maskload_ps(yr, mask), v);
                _mm256_maskstore_ps(yr, mask, v);
            }
        }
    }
    if (act >= 0) tb_act_rows(y, ldy, mr, nc, (tb_act)act); /* while the block is in L1 */
}

__attribute__((target("avx2,fma"))) static void block_any(int mr, int nc, float *y, int64_t ldy,
                                                         const uint8_t *a, int64_t lda,
                                                         const int8_t *b, int64_t groups,
                                                         const float *scale,
                                                         const float *offset, int accumulate,
                                                         int act) {
    switch (mr) { /* one register-allocated copy per row count */
    case 6: block(6, nc, y, ldy, a, lda, b, groups, scale, offset, accumulate, act); break;
    case 5: block(5, nc, y, ldy, a, lda, b, groups, scale, offset, accumulate, act); break;
    case 4: block(4, nc, y, ldy, a, lda, b, groups, scale, offset, accumulate, act); break;
    case 3: block(3, nc, y, ldy, a, lda, b, groups, scale, offset, accumulate, act); break;
    case 2: block(2, nc, y, ldy, a, lda, b, groups, scale, offset, accumulate, act); break;
    default: block(1, nc, y, ldy, a, lda, b, groups, scale, offset, accumulate, act); break;
    }
}

void tb_qgemm(float *y, int64_t ldy, const uint8_t *xq, int64_t lda, const int8_t *packed,
              const float *scale, const float *offset, int64_t M, int64_t N, int64_t K,
              int accumulate, int act) {
    if (M <= 0 || N <= 0) return;
    const int64_t Kp = tb_qgemm_lda(K), groups = Kp / 4;
    /* a task: MC rows x nc channels, the channels' weights (nc x Kp bytes) about 128 KB, kept
     * in L2 while the task's rows go by in blocks of MR (each block in L1 across the panels) */
    int64_t nc = (128 * 1024 / (Kp ? Kp : 1)) / NR * NR;
    nc = nc < NR ? NR : nc;
    const int64_t tn = (N + nc - 1) / nc, tm = (M + MC - 1) / MC;
#pragma omp parallel for schedule(dynamic) if (M * N * Kp > (1 << 18))
    for (int64_t t = 0; t < tn * tm; t++) {
        const int64_t j0 = (t / tm) * nc, i0 = (t % tm) * MC;
        const int64_t j1 = j0 + nc < N ? j0 + nc : N, i1 = i0 + MC < M ? i0 + MC : M;
        for (int64_t i = i0; i < i1; i += MR) {
            const int mr = (int)(i1 - i < MR ? i1 - i : MR);
            for (int64_t j = j0; j < j1; j += NR)
                block_any(mr, (int)(j1 - j < NR ? j1 - j : NR), y + i * ldy + j, ldy,
                          xq + i * lda, lda, packed + j * Kp, groups, scale + j, offset + j,
                          accumulate, act);
        }
    }
}

void tb_qgemm_ref(float *y, int64_t ldy, const uint8_t *xq, int64_t lda, const int8_t *w,
                  const float *scale, const float *offset, int64_t M, int64_t N, int64_t K,
                  int accumulate, int act) {
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
            int32_t s = 0;
            for (int64_t k = 0; k < K; k++) s += (int32_t)xq[i * lda + k] * w[j * K + k];
            const float v = fmaf((float)s, scale[j], offset[j]);
            y[i * ldy + j] = accumulate ? y[i * ldy + j] + v : act >= 0 ? tb_act_ref(v, act) : v;
        }
}
