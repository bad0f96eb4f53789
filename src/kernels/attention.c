#include "attention.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#if defined(__x86_64__)
#include <cpuid.h>
#endif

#include "gemm.h"
#include "ops.h"

/* The fused path's register tiles: zmm on AVX-512, pairs of ymm on AVX2 + FMA (Zen 2/3, Intel
 * client CPUs); without either, every group takes the GEMM path. */
#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
#define FUSED_TILES 1
#include <immintrin.h>
#endif

/* Query rows per score tile: the scores of a tile (about 800 KB) stay in the L2 cache between
 * the two GEMMs and the softmax — measured 1.5-2x faster than tiles of 16 MB (dev/README.md) —
 * at least 64 rows, never more than the group. */
#define TILE_FLOATS (200 * 1024)
static int64_t q_tile(int64_t L) {
    int64_t t = TILE_FLOATS / (L > 0 ? L : 1);
    if (t < 64) t = 64;
    return t < L ? t : L;
}

/* Fused path: FQ query rows at a time against keys packed in blocks of 16 (KB = 4 blocks, 64
 * keys, per step); needs head_dim a multiple of 16. */
#define FQ 6
#define KB 4
/* Query tiles of TQ rows; keys in chunks of KC, so that a chunk of K and of V (KC x hd floats
 * each) and the tile's output accumulators stay in L1 while every FQ-row block uses them. */
#define TQ (4 * FQ)
#define KC (2 * 16 * KB)
static int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

int64_t tb_attention_scratch_floats(int64_t L, int hd, int n_threads) {
    int64_t tile = q_tile(L);
    int64_t lp = round_up(L, KC);
    int64_t gemm_path = 3 * L * hd + tile * L + tile * hd;
    int64_t fused_path = round_up(L, TQ) * hd + 2 * lp * hd + FQ * KC + TQ * hd + FQ * KC / 2;
    int64_t per = (gemm_path > fused_path ? gemm_path : fused_path) + 64;
    return per * (n_threads > 0 ? n_threads : 1);
}

/* Gathers the head's hd columns of the group's rows into a dense L x hd matrix. */
static void gather_head(float *dst, const float *src, int64_t ld, const tb_grouping *g,
                        int64_t grp, int h, int hd) {
    for (int64_t j = 0; j < tb_group_size(g, grp); j++)
        memcpy(dst + j * hd, src + tb_group_row(g, grp, j) * ld + (int64_t)h * hd,
               sizeof(float) * hd);
}

/* Attention dropout of one (group, head): rows are keyed by the query index, elements by the
 * key index (attention.h). NULL when off, so the kernels test one pointer per row. */
typedef struct {
    uint64_t key;
    tb_keep_rule rule;
} task_drop;

static const task_drop *task_dropout(task_drop *td, const tb_attn_dropout *d, int64_t grp,
                                     int heads, int h) {
    if (!d || !(d->p > 0)) return NULL;
    td->key = tb_hash(d->key, (uint64_t)(grp * heads + h));
    td->rule = tb_keep_rule_make(d->p);
    return td;
}

/* Probabilities row[0..n) of query i, keys j0 .. j0 + n: dropped and rescaled in place. */
static inline void drop_row(const task_drop *td, float *row, int64_t n, int64_t i, int64_t j0) {
    tb_dropout_serial(row, n, tb_hash(td->key, (uint64_t)i), j0, td->rule);
}

/* Groups of a few tokens (TimeSformer's time groups: one per position, T = 8): direct loops,
 * since a GEMM call costs more than the whole product. */
#define SMALL_GROUP 32

static void attend_small(float *out, int64_t ldo, const float *Q, const float *K, const float *V,
                         int64_t Lq, int64_t L, int hd, float *S, float scale,
                         const task_drop *td) {
    for (int64_t i = 0; i < Lq; i++) {
        const float *q = Q + i * hd;
        for (int64_t j = 0; j < L; j++) {
            const float *k = K + j * hd;
            float acc = 0;
#pragma omp simd reduction(+ : acc)
            for (int d = 0; d < hd; d++) acc += q[d] * k[d];
            S[j] = acc;
        }
        tb_softmax_row(S, L, scale);
        if (td) drop_row(td, S, L, i, 0);
        float *o = out + i * ldo;
        for (int d = 0; d < hd; d++) o[d] = 0;
        for (int64_t j = 0; j < L; j++) {
            const float p = S[j], *v = V + j * hd;
#pragma omp simd
            for (int d = 0; d < hd; d++) o[d] += p * v[d];
        }
    }
}

/* The additive terms of one (group, head) of a tb_attn_bias: rows of bias and mask (NULL: none). */
typedef struct {
    const float *bias, *mask;
} task_bias;

static const task_bias *task_bias_of(task_bias *tb, const tb_attn_bias *b, int64_t grp, int h,
                                     int64_t L) {
    if (!b) return NULL;
    tb->bias = b->bias ? b->bias + (int64_t)h * L * L : NULL;
    const int64_t w = b->n_masks > 0 ? grp % b->n_masks : 0;
    tb->mask = b->mask && b->n_masks > 0
                   ? b->mask + (b->mask_index ? (int64_t)b->mask_index[w] : w) * L * L
                   : NULL;
    return tb;
}

/* Scores row i of n keys: s = s scale + bias + mask, then the softmax of the row. */
static void biased_softmax_row(float *s, int64_t n, float scale, const task_bias *tb, int64_t i) {
    const float *b = tb->bias ? tb->bias + i * n : NULL, *m = tb->mask ? tb->mask + i * n : NULL;
    for (int64_t j = 0; j < n; j++) s[j] = s[j] * scale + (b ? b[j] : 0.0f) + (m ? m[j] : 0.0f);
    tb_softmax_row(s, n, 1.0f);
}

/* One (group, head): O = softmax(Q K^T * scale [+ bias]) V for Lq queries and L keys, tiled
 * over queries. With a bias every group takes the tile path. */
static void attend_one(float *out, int64_t ldo, const float *Q, const float *K, const float *V,
                       int64_t Lq, int64_t L, int hd, float *S, const task_drop *td,
                       const task_bias *tb) {
    const float scale = 1.0f / sqrtf((float)hd);
    if (Lq <= SMALL_GROUP && L <= SMALL_GROUP && !tb) {
        attend_small(out, ldo, Q, K, V, Lq, L, hd, S, scale, td);
        return;
    }
    const int64_t tile = q_tile(L) < Lq ? q_tile(L) : Lq;
    for (int64_t i0 = 0; i0 < Lq; i0 += tile) {
        int64_t m = Lq - i0 < tile ? Lq - i0 : tile;
        tb_gemm(0, 1, m, L, hd, 1.0f, Q + i0 * hd, hd, K, hd, 0.0f, S, L);
        if (tb)
            for (int64_t i = 0; i < m; i++) biased_softmax_row(S + i * L, L, scale, tb, i0 + i);
        else
            for (int64_t i = 0; i < m; i++) tb_softmax_row(S + i * L, L, scale);
        if (td)
            for (int64_t i = 0; i < m; i++) drop_row(td, S + i * L, L, i0 + i, 0);
        tb_gemm(0, 0, m, hd, L, 1.0f, S, L, V, hd, 0.0f, out + i0 * ldo, ldo);
    }
}

#if defined(FUSED_TILES)
/* ---- fused attention: scores, softmax and the weighted sum of V for FQ queries at a time,
 * with the FQ x L score rows kept in cache; the register tiles are FQ x 64 keys (scores) and
 * FQ x 64 columns of V (output), so each step does 24 FMAs per 10 loads. ---- */

/* K transposed into blocks of 16 keys, Kp[block][d][16], zero-padded to lp keys. */
static void pack_keys(float *Kp, const float *k, int64_t ld, const tb_grouping *g, int64_t grp,
                      int h, int hd, int64_t lp) {
    const int64_t L = tb_group_size(g, grp);
    for (int64_t j = 0; j < lp; j++) {
        float *dst = Kp + (j / 16) * hd * 16 + j % 16;
        if (j < L) {
            const float *row = k + tb_group_row(g, grp, j) * ld + (int64_t)h * hd;
            for (int d = 0; d < hd; d++) dst[d * 16] = row[d];
        } else {
            for (int d = 0; d < hd; d++) dst[d * 16] = 0;
        }
    }
}

/* The right-hand operand of fused_pv (V, and K for dQ), L rows of hd, zero-padded to lp rows.
 * AVX2 takes one block of 16 columns at a time through all rows, so it stores the blocks apart,
 * Vc[column block][j][16]: each pass then reads its keys contiguously, not 64 bytes of every
 * 256 (5-7 % of ViViT-B's attention on a Zen 3). AVX-512 reads a row's four blocks together,
 * already one contiguous stream, and keeps rows. *ldv and *cbs: fused_pv's strides. */
static void pack_pv_operand(float *Vc, const float *v, int64_t ld, const tb_grouping *g,
                            int64_t grp, int h, int hd, int64_t lp, int64_t *ldv, int64_t *cbs) {
    const int64_t L = tb_group_size(g, grp);
#if defined(__AVX512F__)
    gather_head(Vc, v, ld, g, grp, h, hd);
    memset(Vc + L * hd, 0, sizeof(float) * (size_t)((lp - L) * hd));
    *ldv = hd, *cbs = 16;
#else
    for (int64_t j = 0; j < lp; j++) {
        const float *row = j < L ? v + tb_group_row(g, grp, j) * ld + (int64_t)h * hd : NULL;
        for (int cb = 0; cb < hd / 16; cb++) {
            float *dst = Vc + (cb * lp + j) * 16;
            if (row)
                memcpy(dst, row + cb * 16, sizeof(float) * 16);
            else
                memset(dst, 0, sizeof(float) * 16);
        }
    }
    *ldv = 16, *cbs = 16 * lp;
#endif
}

#if defined(__AVX512F__)
/* S[r][j] = q_r . k_j for FQ rows and the nb blocks of 16 keys of Kp (nb a multiple of KB). */
static void fused_scores(float *S, int64_t lds, const float *Q, const float *Kp, int64_t nb,
                         int hd) {
    for (int64_t b0 = 0; b0 < nb; b0 += KB) {
        __m512 acc[FQ][KB];
#pragma GCC unroll 8
        for (int r = 0; r < FQ; r++)
#pragma GCC unroll 4
            for (int b = 0; b < KB; b++) acc[r][b] = _mm512_setzero_ps();
        const float *kp = Kp + b0 * hd * 16;
        for (int d = 0; d < hd; d++) {
            __m512 kv[KB];
#pragma GCC unroll 4
            for (int b = 0; b < KB; b++) kv[b] = _mm512_loadu_ps(kp + ((int64_t)b * hd + d) * 16);
#pragma GCC unroll 8
            for (int r = 0; r < FQ; r++) {
                __m512 q = _mm512_set1_ps(Q[r * hd + d]);
#pragma GCC unroll 4
                for (int b = 0; b < KB; b++) acc[r][b] = _mm512_fmadd_ps(q, kv[b], acc[r][b]);
            }
        }
#pragma GCC unroll 8
        for (int r = 0; r < FQ; r++)
#pragma GCC unroll 4
            for (int b = 0; b < KB; b++) _mm512_storeu_ps(S + r * lds + (b0 + b) * 16, acc[r][b]);
    }
}

/* O[r][c0 .. c0 + 16 nc) += sum over n rows j of P(r, j) v_j, for FQ rows (O row stride hd),
 * P(r, j) at P[r * sr + j * sj]: P V in the forward and dQ (sr = ld, sj = 1), the transposed
 * products P^T dO and dS^T Q of dV and dK in the backward (sr = 1, sj = ld). v_j[c] is at
 * V[j * ldv + (c / 16) * cbs + c % 16]: rows (ldv = hd, cbs = 16) or column blocks
 * (pack_pv_operand). The FQ x 64 accumulators stay in registers while the n rows of V
 * stream from L1. */
static inline __attribute__((always_inline)) void fused_pv(float *O, const float *P, int64_t sr,
                                                           int64_t sj, const float *V, int64_t ldv,
                                                           int64_t cbs, int64_t n, int hd, int c0,
                                                           const int nc) {
    __m512 acc[FQ][4];
    V += (c0 / 16) * cbs;
#pragma GCC unroll 8
    for (int r = 0; r < FQ; r++)
#pragma GCC unroll 4
        for (int c = 0; c < nc; c++) acc[r][c] = _mm512_loadu_ps(O + r * hd + c0 + c * 16);
    for (int64_t j = 0; j < n; j++) {
        __m512 vv[4];
#pragma GCC unroll 4
        for (int c = 0; c < nc; c++) vv[c] = _mm512_loadu_ps(V + j * ldv + c * cbs);
#pragma GCC unroll 8
        for (int r = 0; r < FQ; r++) {
            __m512 p = _mm512_set1_ps(P[r * sr + j * sj]);
#pragma GCC unroll 4
            for (int c = 0; c < nc; c++) acc[r][c] = _mm512_fmadd_ps(p, vv[c], acc[r][c]);
        }
    }
#pragma GCC unroll 8
    for (int r = 0; r < FQ; r++)
#pragma GCC unroll 4
        for (int c = 0; c < nc; c++) _mm512_storeu_ps(O + r * hd + c0 + c * 16, acc[r][c]);
}
#else
/* AVX2: a block of 16 keys (or columns) is two ymm registers, and one block is done at a time,
 * so that the FQ x 2 accumulators, two loads and a broadcast fit the 16 ymm registers. */
static void fused_scores(float *S, int64_t lds, const float *Q, const float *Kp, int64_t nb,
                         int hd) {
    for (int64_t b = 0; b < nb; b++) {
        __m256 acc[FQ][2];
#pragma GCC unroll 8
        for (int r = 0; r < FQ; r++) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
        const float *kp = Kp + b * hd * 16;
        for (int d = 0; d < hd; d++) {
            const __m256 k0 = _mm256_loadu_ps(kp + d * 16), k1 = _mm256_loadu_ps(kp + d * 16 + 8);
#pragma GCC unroll 8
            for (int r = 0; r < FQ; r++) {
                const __m256 q = _mm256_broadcast_ss(Q + r * hd + d);
                acc[r][0] = _mm256_fmadd_ps(q, k0, acc[r][0]);
                acc[r][1] = _mm256_fmadd_ps(q, k1, acc[r][1]);
            }
        }
#pragma GCC unroll 8
        for (int r = 0; r < FQ; r++) {
            _mm256_storeu_ps(S + r * lds + b * 16, acc[r][0]);
            _mm256_storeu_ps(S + r * lds + b * 16 + 8, acc[r][1]);
        }
    }
}

/* fused_pv on AVX2: the nc blocks of 16 columns one after the other. */
static inline __attribute__((always_inline)) void fused_pv(float *O, const float *P, int64_t sr,
                                                           int64_t sj, const float *V, int64_t ldv,
                                                           int64_t cbs, int64_t n, int hd, int c0,
                                                           const int nc) {
    for (int c = c0; c < c0 + 16 * nc; c += 16) {
        const float *vc = V + (c / 16) * cbs;
        __m256 acc[FQ][2];
#pragma GCC unroll 8
        for (int r = 0; r < FQ; r++) {
            acc[r][0] = _mm256_loadu_ps(O + r * hd + c);
            acc[r][1] = _mm256_loadu_ps(O + r * hd + c + 8);
        }
        for (int64_t j = 0; j < n; j++) {
            const __m256 v0 = _mm256_loadu_ps(vc + j * ldv), v1 = _mm256_loadu_ps(vc + j * ldv + 8);
#pragma GCC unroll 8
            for (int r = 0; r < FQ; r++) {
                const __m256 p = _mm256_broadcast_ss(P + r * sr + j * sj);
                acc[r][0] = _mm256_fmadd_ps(p, v0, acc[r][0]);
                acc[r][1] = _mm256_fmadd_ps(p, v1, acc[r][1]);
            }
        }
#pragma GCC unroll 8
        for (int r = 0; r < FQ; r++) {
            _mm256_storeu_ps(O + r * hd + c, acc[r][0]);
            _mm256_storeu_ps(O + r * hd + c + 8, acc[r][1]);
        }
    }
}
#endif

#if defined(__AVX512BF16__)
/* ---- bf16 operands (AVX512-BF16): vdpbf16ps adds a[2i] b[2i] + a[2i+1] b[2i+1] to f32 lane
 * i, twice the multiply-adds of an f32 FMA, so each product takes its operands in pairs along
 * the summed index, a pair held as one uint32: Q K^T pairs d, with K packed per block of 16
 * keys as Kb[block][d / 2][16]; P V pairs keys, with V packed as Vb[j / 2][column]. Scores,
 * softmax, running sums and outputs stay f32. ---- */

/* x[0..16) rounded to bf16 (nearest even) into dst[0..8) pairs. */
static inline void bf16_store16(uint32_t *dst, const float *x, float scale) {
    __m256bh h = _mm512_cvtneps_pbh(_mm512_mul_ps(_mm512_loadu_ps(x), _mm512_set1_ps(scale)));
    _mm256_storeu_si256((__m256i *)dst, (__m256i)h);
}

/* Q (L x hd, pre-scaled) as rows of hd / 2 pairs, zero rows up to lq. */
static void gather_q_bf16(uint32_t *Qb, const float *q, int64_t ld, const tb_grouping *g,
                          int64_t grp, int h, int hd, int64_t lq, float scale) {
    const int64_t L = tb_group_size(g, grp);
    for (int64_t j = 0; j < L; j++) {
        const float *row = q + tb_group_row(g, grp, j) * ld + (int64_t)h * hd;
        for (int d = 0; d < hd; d += 16) bf16_store16(Qb + (j * hd + d) / 2, row + d, scale);
    }
    memset(Qb + L * hd / 2, 0, sizeof(uint32_t) * (size_t)((lq - L) * hd / 2));
}

/* Kb[block][p][lane]: the pair (k[d = 2p], k[2p + 1]) of key 16 block + lane; zero keys to lp. */
static void pack_keys_bf16(uint32_t *Kb, const float *k, int64_t ld, const tb_grouping *g,
                           int64_t grp, int h, int hd, int64_t lp) {
    const int64_t L = tb_group_size(g, grp);
    const int hp = hd / 2;
    uint32_t pairs[256]; /* hd <= 512 */
    for (int64_t j = 0; j < lp; j++) {
        uint32_t *dst = Kb + (j / 16) * hp * 16 + j % 16;
        if (j < L) {
            const float *row = k + tb_group_row(g, grp, j) * ld + (int64_t)h * hd;
            for (int d = 0; d < hd; d += 16) bf16_store16(pairs + d / 2, row + d, 1.0f);
            for (int p = 0; p < hp; p++) dst[p * 16] = pairs[p];
        } else {
            for (int p = 0; p < hp; p++) dst[p * 16] = 0;
        }
    }
}

/* Vb[j / 2][c] = (v[j][c], v[j + 1][c]) for even j; zero keys to lp. */
static void pack_values_bf16(uint32_t *Vb, const float *v, int64_t ld, const tb_grouping *g,
                             int64_t grp, int h, int hd, int64_t lp) {
    const int64_t L = tb_group_size(g, grp);
    /* lanes 0-15 hold key j's 16 columns, 16-31 key j + 1's: interleave them column by column */
    static const short il[32] = {0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23,
                                 8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
    const __m512i idx = _mm512_loadu_si512(il);
    for (int64_t j = 0; j < lp; j += 2) {
        uint32_t *dst = Vb + (j / 2) * hd;
        const float *r0 = j < L ? v + tb_group_row(g, grp, j) * ld + (int64_t)h * hd : NULL;
        const float *r1 = j + 1 < L ? v + tb_group_row(g, grp, j + 1) * ld + (int64_t)h * hd : NULL;
        for (int c = 0; c < hd; c += 16) {
            const __m512 a = r0 ? _mm512_loadu_ps(r0 + c) : _mm512_setzero_ps();
            const __m512 b = r1 ? _mm512_loadu_ps(r1 + c) : _mm512_setzero_ps();
            const __m512i ab = (__m512i)_mm512_cvtne2ps_pbh(b, a);
            _mm512_storeu_si512(dst + c, _mm512_permutexvar_epi16(idx, ab));
        }
    }
}

/* S[r][j] = q_r . k_j for FQ rows of Qb and the nb blocks of 16 keys of Kb, as fused_scores. */
static void fused_scores_bf16(float *S, int64_t lds, const uint32_t *Qb, const uint32_t *Kb,
                              int64_t nb, int hd) {
    const int hp = hd / 2;
    for (int64_t b0 = 0; b0 < nb; b0 += KB) {
        __m512 acc[FQ][KB];
#pragma GCC unroll 8
        for (int r = 0; r < FQ; r++)
#pragma GCC unroll 4
            for (int b = 0; b < KB; b++) acc[r][b] = _mm512_setzero_ps();
        const uint32_t *kp = Kb + b0 * hp * 16;
        for (int p = 0; p < hp; p++) {
            __m512bh kv[KB];
#pragma GCC unroll 4
            for (int b = 0; b < KB; b++)
                kv[b] = (__m512bh)_mm512_loadu_si512(kp + ((int64_t)b * hp + p) * 16);
#pragma GCC unroll 8
            for (int r = 0; r < FQ; r++) {
                const __m512bh q = (__m512bh)_mm512_set1_epi32((int)Qb[r * hp + p]);
#pragma GCC unroll 4
                for (int b = 0; b < KB; b++) acc[r][b] = _mm512_dpbf16_ps(acc[r][b], q, kv[b]);
            }
        }
#pragma GCC unroll 8
        for (int r = 0; r < FQ; r++)
#pragma GCC unroll 4
            for (int b = 0; b < KB; b++) _mm512_storeu_ps(S + r * lds + (b0 + b) * 16, acc[r][b]);
    }
}

/* Probabilities row[0..n) as KC / 2 pairs, zero past n. */
static void probs_bf16(uint32_t *dst, const float *row, int64_t n) {
    for (int64_t j = 0; j < KC; j += 32) {
        const int64_t a = n - j < 0 ? 0 : n - j, b = n - j - 16 < 0 ? 0 : n - j - 16;
        const __m512 lo = _mm512_maskz_loadu_ps(a >= 16 ? 0xffff : (__mmask16)((1u << a) - 1),
                                                row + j);
        const __m512 hi = _mm512_maskz_loadu_ps(b >= 16 ? 0xffff : (__mmask16)((1u << b) - 1),
                                                row + j + 16);
        _mm512_storeu_si512(dst + j / 2, (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
    }
}

/* O[r][c0 .. c0 + 16 nc) += sum over np key pairs of P V, for FQ rows (P row stride KC / 2
 * pairs, O row stride hd), as fused_pv. */
static inline __attribute__((always_inline)) void fused_pv_bf16(float *O, const uint32_t *P,
                                                                const uint32_t *Vb, int64_t np,
                                                                int hd, int c0, const int nc) {
    __m512 acc[FQ][4];
#pragma GCC unroll 8
    for (int r = 0; r < FQ; r++)
#pragma GCC unroll 4
        for (int c = 0; c < nc; c++) acc[r][c] = _mm512_loadu_ps(O + r * hd + c0 + c * 16);
    for (int64_t j = 0; j < np; j++) {
        __m512bh vv[4];
#pragma GCC unroll 4
        for (int c = 0; c < nc; c++)
            vv[c] = (__m512bh)_mm512_loadu_si512(Vb + j * hd + c0 + c * 16);
#pragma GCC unroll 8
        for (int r = 0; r < FQ; r++) {
            const __m512bh p = (__m512bh)_mm512_set1_epi32((int)P[r * (KC / 2) + j]);
#pragma GCC unroll 4
            for (int c = 0; c < nc; c++) acc[r][c] = _mm512_dpbf16_ps(acc[r][c], p, vv[c]);
        }
    }
#pragma GCC unroll 8
    for (int r = 0; r < FQ; r++)
#pragma GCC unroll 4
        for (int c = 0; c < nc; c++) _mm512_storeu_ps(O + r * hd + c0 + c * 16, acc[r][c]);
}
#endif

/* O (FQ rows) += P V over n keys for every column of hd: f32 P and V rows, or (bf16) the pairs
 * of probs_bf16 and pack_values_bf16. */
static void pv_all_columns(float *O, const float *S, const uint32_t *Pb, const void *V, int64_t n,
                           int hd, int64_t ldv, int64_t cbs) {
    int c0 = 0;
#if defined(__AVX512BF16__)
    if (Pb) {
        const uint32_t *Vb = V;
        const int64_t np = (n + 1) / 2;
        for (; c0 + 64 <= hd; c0 += 64) fused_pv_bf16(O, Pb, Vb, np, hd, c0, 4);
        switch ((hd - c0) / 16) {
        case 3: fused_pv_bf16(O, Pb, Vb, np, hd, c0, 3); break;
        case 2: fused_pv_bf16(O, Pb, Vb, np, hd, c0, 2); break;
        case 1: fused_pv_bf16(O, Pb, Vb, np, hd, c0, 1); break;
        default: break;
        }
        return;
    }
#endif
    (void)Pb;
    const float *Vf = V;
    for (; c0 + 64 <= hd; c0 += 64) fused_pv(O, S, KC, 1, Vf, ldv, cbs, n, hd, c0, 4);
    switch ((hd - c0) / 16) {
    case 3: fused_pv(O, S, KC, 1, Vf, ldv, cbs, n, hd, c0, 3); break;
    case 2: fused_pv(O, S, KC, 1, Vf, ldv, cbs, n, hd, c0, 2); break;
    case 1: fused_pv(O, S, KC, 1, Vf, ldv, cbs, n, hd, c0, 1); break;
    default: break;
    }
}

/* dst[0..hd) = a src[0..hd) (hd a multiple of 16; dst may be src). */
static inline void scale_row(float *dst, const float *src, float a, int hd) {
#if defined(__AVX512F__)
    const __m512 va = _mm512_set1_ps(a);
    for (int d = 0; d < hd; d += 16)
        _mm512_storeu_ps(dst + d, _mm512_mul_ps(_mm512_loadu_ps(src + d), va));
#else
    const __m256 va = _mm256_set1_ps(a);
    for (int d = 0; d < hd; d += 8)
        _mm256_storeu_ps(dst + d, _mm256_mul_ps(_mm256_loadu_ps(src + d), va));
#endif
}

/* One row's step of the online softmax: row (n scores of a key chunk) becomes exp(row - m_new)
 * with m_new the running max m including this chunk; the running sum l and the output
 * accumulator o (hd) are rescaled when the max grew. */
static void online_softmax_step(float *row, int64_t n, float *m, float *l, float *o, int hd) {
    const float mx = tb_row_max(row, n), m_old = *m;
    const float m_new = mx > m_old ? mx : m_old;
    const float sum = tb_exp_shift_sum(row, n, m_new);
    if (m_new > m_old) { /* rescale what was accumulated under the old max */
        const float alpha = expf(m_old - m_new);
        *l *= alpha;
        scale_row(o, o, alpha, hd);
    }
    *m = m_new;
    *l += sum;
}

/* Adds the additive terms of query i to its scores for keys [kc, kc + n) (unscaled: Q was). */
static void add_bias_chunk(float *row, int64_t n, const task_bias *tb, int64_t i, int64_t kc,
                           int64_t L) {
    const float *b = tb->bias ? tb->bias + i * L + kc : NULL,
                *mk = tb->mask ? tb->mask + i * L + kc : NULL;
    if (b)
        for (int64_t j = 0; j < n; j++) row[j] += b[j];
    if (mk)
        for (int64_t j = 0; j < n; j++) row[j] += mk[j];
}

/* Online softmax (flash attention): per query tile, keys are visited in chunks of KC; each
 * chunk's scores for FQ rows live only in a small buffer, the running max m and sum l of every
 * row are updated and its output accumulator rescaled when m grows, so no score row is ever
 * stored whole. Q is pre-scaled by 1/sqrt(hd) (exact for hd = 64). With dropout, the chunk's
 * exponentials are dropped after they entered the running sum l, which stays undropped.
 * bf16: Q, K, V and the chunk's probabilities rounded to bf16 for the two products. */
static void attend_fused(float *out, int64_t ldo, const float *q, const float *k, const float *v,
                         int64_t ld, const tb_grouping *g, int64_t grp, int h, int hd,
                         float *scratch, const task_drop *td, int bf16, const task_bias *tb) {
    const tb_grouping *kg = tb_group_keys(g);
    const int64_t Lq = tb_group_size(g, grp), L = tb_group_size(kg, grp);
    const int64_t lp = round_up(L, KC), lq = round_up(Lq, TQ);
    float *Q = scratch, *Kp = Q + lq * hd, *V = Kp + lp * hd, *S = V + lp * hd;
    float *O = S + FQ * KC, m[TQ], l[TQ];
    uint32_t *Pb = NULL;
    int64_t ldv = hd, cbs = 16; /* V's strides for fused_pv (f32) */
    const float scale = 1.0f / sqrtf((float)hd);
#if defined(__AVX512BF16__)
    if (bf16) { /* pairs take half the floats: the f32 layout's room is enough */
        Pb = (uint32_t *)(O + TQ * hd);
        gather_q_bf16((uint32_t *)Q, q, ld, g, grp, h, hd, lq, scale);
        pack_keys_bf16((uint32_t *)Kp, k, ld, kg, grp, h, hd, lp);
        pack_values_bf16((uint32_t *)V, v, ld, kg, grp, h, hd, lp);
    } else
#endif
    {
        (void)bf16;
        gather_head(Q, q, ld, g, grp, h, hd);
        for (int64_t i = 0; i < Lq * hd; i++) Q[i] *= scale;
        memset(Q + Lq * hd, 0, sizeof(float) * (size_t)((lq - Lq) * hd));
        pack_pv_operand(V, v, ld, kg, grp, h, hd, lp, &ldv, &cbs);
        pack_keys(Kp, k, ld, kg, grp, h, hd, lp);
    }
    for (int64_t i0 = 0; i0 < Lq; i0 += TQ) {
        const int64_t nq = Lq - i0 < TQ ? Lq - i0 : TQ, nr = round_up(nq, FQ);
        for (int64_t r = 0; r < nr; r++) m[r] = -INFINITY, l[r] = 0;
        memset(O, 0, sizeof(float) * (size_t)(nr * hd));
        for (int64_t kc = 0; kc < L; kc += KC) {
            const int64_t n = L - kc < KC ? L - kc : KC;
            for (int64_t r0 = 0; r0 < nr; r0 += FQ) {
#if defined(__AVX512BF16__)
                if (Pb)
                    fused_scores_bf16(S, KC, (uint32_t *)Q + (i0 + r0) * hd / 2,
                                      (uint32_t *)Kp + kc * hd / 2, KC / 16, hd);
                else
#endif
                    fused_scores(S, KC, Q + (i0 + r0) * hd, Kp + kc * hd, KC / 16, hd);
                for (int r = 0; r < FQ; r++) {
                    float *row = S + r * KC;
                    if (tb && i0 + r0 + r < Lq) add_bias_chunk(row, n, tb, i0 + r0 + r, kc, L);
                    online_softmax_step(row, n, &m[r0 + r], &l[r0 + r], O + (r0 + r) * hd, hd);
                    if (td) drop_row(td, row, n, i0 + r0 + r, kc);
#if defined(__AVX512BF16__)
                    if (Pb) probs_bf16(Pb + r * (KC / 2), row, n);
#endif
                }
                pv_all_columns(O + r0 * hd, S, Pb,
                               Pb ? (const void *)((uint32_t *)V + kc * hd / 2)
                                  : (const void *)(V + kc * ldv),
                               n, hd, ldv, cbs);
            }
        }
        for (int64_t r = 0; r < nq; r++)
            scale_row(out + (i0 + r) * ldo, O + r * hd, 1.0f / l[r], hd);
    }
}
#endif

static void attention_forward(float *out, const float *q, const float *k, const float *v,
                              int64_t ld, const tb_grouping *g, int heads, int head_dim,
                              float *scratch, int n_threads, const tb_attn_dropout *drop,
                              int bf16, const tb_attn_bias *bias) {
    bf16 = bf16 && head_dim <= 512; /* pack_keys_bf16's row buffer */
    const int64_t D = (int64_t)heads * head_dim;
    const tb_grouping *kg = tb_group_keys(g);
    const int64_t per = tb_attention_scratch_floats(tb_group_longest(g), head_dim, 1);
    const int64_t tasks = g->n_groups * heads;
    /* many tiny tasks (time groups) are handed out in chunks; big ones one at a time */
    const int64_t chunk =
        tb_group_longest(g) <= SMALL_GROUP ? 1 + tasks / (8 * (int64_t)n_threads) : 1;
#pragma omp parallel for schedule(dynamic, chunk) num_threads(n_threads)
    for (int64_t t = 0; t < tasks; t++) {
        int64_t grp = t / heads;
        int h = (int)(t % heads);
        const int64_t Lq = tb_group_size(g, grp), L = tb_group_size(kg, grp);
        float *o = out + tb_group_first(g, grp) * D + (int64_t)h * head_dim;
        float *mine = scratch + per * omp_get_thread_num();
        task_drop tdrop;
        const task_drop *td = task_dropout(&tdrop, drop, grp, heads, h);
        task_bias tbias;
        const task_bias *tb = task_bias_of(&tbias, bias, grp, h, L);
#if defined(FUSED_TILES)
        if ((L > SMALL_GROUP || Lq > SMALL_GROUP) && head_dim % 16 == 0) {
            /* a bias joins each chunk's scores */
            attend_fused(o, D, q, k, v, ld, g, grp, h, head_dim, mine, td, bf16, tb);
            continue;
        }
#endif
        (void)bf16;
        float *Q = mine, *K = Q + Lq * head_dim, *V = K + L * head_dim;
        float *S = V + L * head_dim;
        gather_head(Q, q, ld, g, grp, h, head_dim);
        gather_head(K, k, ld, kg, grp, h, head_dim);
        gather_head(V, v, ld, kg, grp, h, head_dim);
        attend_one(o, D, Q, K, V, Lq, L, head_dim, S, td, tb);
    }
}

void tb_attention_forward(float *out, const float *q, const float *k, const float *v, int64_t ld,
                          const tb_grouping *g, int heads, int head_dim, float *scratch,
                          int n_threads, const tb_attn_dropout *drop) {
    attention_forward(out, q, k, v, ld, g, heads, head_dim, scratch, n_threads, drop, 0, NULL);
}

int tb_attention_forward_biased(float *out, const float *q, const float *k, const float *v,
                                int64_t ld, const tb_grouping *g, int heads, int head_dim,
                                const tb_attn_bias *bias, float *scratch, int n_threads,
                                const tb_attn_dropout *drop) {
    if (g->start || g->kv) return TUBELET_ERR_ARG; /* bias tables are L x L: self-attention */
    attention_forward(out, q, k, v, ld, g, heads, head_dim, scratch, n_threads, drop, 0, bias);
    return TUBELET_OK;
}

/* 1 where the bf16 kernel is the faster: this build has AVX512-BF16 and the CPU is not one with
 * AMX. Intel's AMX CPUs (Sapphire Rapids and later) run vdpbf16ps at half an f32 FMA's
 * multiply-adds per cycle, so the f32 kernel beats it there (measured: VideoMAE-B's attention
 * 472 ms in f32, 675 ms with bf16 operands; bench/RESULTS.md); AMD's Zen 4 and 5 run it at
 * twice. */
int tb_attention_has_bf16(void) {
#if defined(__AVX512BF16__) && defined(__x86_64__)
    unsigned a, b, c, d;
    return !(__get_cpuid_count(7, 0, &a, &b, &c, &d) && (d & (1u << 22))); /* AMX-BF16 */
#else
    return 0;
#endif
}

const char *tb_attention_bf16_kernel(void) {
#if defined(__AVX512BF16__)
    return tb_attention_has_bf16() ? "AVX512-BF16 (vdpbf16ps)"
                                   : "f32 (an AMX CPU: vdpbf16ps is slower than f32 FMA here)";
#else
    return "f32 (this build has no AVX512-BF16)";
#endif
}

void tb_attention_forward_bf16(float *out, const float *q, const float *k, const float *v,
                               int64_t ld, const tb_grouping *g, int heads, int head_dim,
                               float *scratch, int n_threads) {
    attention_forward(out, q, k, v, ld, g, heads, head_dim, scratch, n_threads, NULL,
                      tb_attention_has_bf16(), NULL);
}

/* ---- backward ----
 * Per (group, head), with P = softmax(Q K^T / sqrt(hd)) recomputed and delta_i = dO_i . O_i:
 *   dV = P^T dO,  dP = dO V^T,  dS = P * (dP - delta),  dQ = dS K / sqrt(hd),  dK = dS^T Q / sqrt(hd).
 * With dropout (mask M = m / (1 - p), regenerated from its key): P' = P * M takes P's place in
 * dV = P'^T dO, and dP = (dO V^T) * M; delta = rowsum(dO * O) is still sum_j P_ij dP_ij since
 * O = P' V. Three kernels, as in the forward: direct loops for small groups, fused AVX-512
 * tiles (head_dim % 16 == 0), GEMM calls on query tiles otherwise. Each sees the whole score
 * row of its queries, so the softmax is recomputed exactly and no statistics are kept from the
 * forward. */
#define BQ 64

/* Fused backward: query tiles of BTQ rows; a tile's probabilities P and dS (BTQ x L) stay in L2
 * while every kernel reads them. */
#define BTQ (8 * FQ)

static int64_t backward_gemm_floats(int64_t L, int hd) {
    int64_t tile = L < BQ ? L : BQ;
    return 7 * L * hd + 2 * tile * L + L + 16;
}

static int64_t backward_fused_floats(int64_t L, int hd) {
    const int64_t lp = round_up(L, KC), lq = round_up(L, BTQ);
    return 2 * lq * hd + lq + 3 * lp * hd + 2 * (lp + FQ) * hd + 2 * BTQ * (lp + 16) +
           BTQ * hd + 64;
}

int64_t tb_attention_backward_scratch_floats(int64_t L, int hd, int n_threads) {
    int64_t a = backward_gemm_floats(L, hd), b = backward_fused_floats(L, hd);
    return ((a > b ? a : b) + 16) * (n_threads > 0 ? n_threads : 1);
}

/* Where one (group, head) reads its inputs and writes its gradients. */
typedef struct {
    float *dq, *dk, *dv;
    int64_t ldd;
    const float *q, *k, *v;
    int64_t ld;
    const float *o, *dout; /* group-major, row stride D */
    int64_t D;
    const tb_grouping *g;
    int heads, hd;
    const tb_attn_bias *bias; /* NULL: none (then every kernel applies) */
} bwd_args;

/* dS_ij = P_ij (dP_ij M_ij - delta_i), and P_ij becomes P_ij M_ij (for dV); M = 1 without
 * dropout. Row i of the group over keys [0, n). */
static void softmax_grad_row(float *p, float *dp, int64_t n, float delta, const task_drop *td,
                             int64_t i) {
    if (td) {
        const uint64_t key = tb_hash(td->key, (uint64_t)i);
        for (int64_t j = 0; j < n; j++) {
            const float mk = tb_keep_scale(key, (uint64_t)j, td->rule);
            dp[j] = p[j] * (dp[j] * mk - delta);
            p[j] *= mk;
        }
        return;
    }
#pragma omp simd
    for (int64_t j = 0; j < n; j++) dp[j] = p[j] * (dp[j] - delta);
}

/* a . b over n floats: 16 lanes at a time where n allows (the compiler's own reduction of an
 * omp simd loop over rows reached through pointers gathers and reduces serially). */
static inline float dot(const float *a, const float *b, int n) {
    int d = 0;
    float s = 0;
#if defined(__AVX512F__)
    if (n % 16 == 0) {
        __m512 acc = _mm512_setzero_ps();
        for (; d < n; d += 16) acc = _mm512_fmadd_ps(_mm512_loadu_ps(a + d), _mm512_loadu_ps(b + d), acc);
        return _mm512_reduce_add_ps(acc);
    }
#endif
    for (; d < n; d++) s += a[d] * b[d];
    return s;
}

/* softmax(x scale) of a short row, its exponentials 16 at a time (tb_vexp). */
static void softmax_short(float *x, int64_t n, float scale) {
    float mx = -INFINITY, sum = 0;
    for (int64_t j = 0; j < n; j++) mx = x[j] > mx ? x[j] : mx;
    for (int64_t j = 0; j < n; j++) x[j] = (x[j] - mx) * scale;
    tb_vexp(x, x, n);
    for (int64_t j = 0; j < n; j++) sum += x[j];
    const float inv = 1.0f / sum;
    for (int64_t j = 0; j < n; j++) x[j] *= inv;
}

/* Groups of at most SMALL_GROUP tokens: direct loops over the rows where they lie, gradients
 * accumulated straight into the outputs (the GEMM calls would cost more than the products). */
static void backward_small(const bwd_args *a, int64_t grp, int h, float *P, float *dS,
                           const task_drop *td) {
    const tb_grouping *g = a->g, *kg = tb_group_keys(g);
    const int hd = a->hd;
    const int64_t Lq = tb_group_size(g, grp), first = tb_group_first(g, grp), c = (int64_t)h * hd;
    const int64_t L = tb_group_size(kg, grp), kfirst = tb_group_first(kg, grp);
    const float scale = 1.0f / sqrtf((float)hd);
    const float *K[SMALL_GROUP], *V[SMALL_GROUP];
    float *dK[SMALL_GROUP], *dV[SMALL_GROUP];
    for (int64_t j = 0; j < L; j++) {
        const int64_t r = tb_group_row(kg, grp, j);
        K[j] = a->k + r * a->ld + c, V[j] = a->v + r * a->ld + c;
        dK[j] = a->dk + (kfirst + j) * a->ldd + c, dV[j] = a->dv + (kfirst + j) * a->ldd + c;
        memset(dK[j], 0, sizeof(float) * (size_t)hd);
        memset(dV[j], 0, sizeof(float) * (size_t)hd);
    }
    for (int64_t i = 0; i < Lq; i++) {
        const float *q = a->q + tb_group_row(g, grp, i) * a->ld + c;
        const float *o = a->o + (first + i) * a->D + c, *dO = a->dout + (first + i) * a->D + c;
        float *dq = a->dq + (first + i) * a->ldd + c;
        const float delta = dot(dO, o, hd);
        for (int64_t j = 0; j < L; j++) P[j] = dot(q, K[j], hd), dS[j] = dot(dO, V[j], hd);
        softmax_short(P, L, scale);
        softmax_grad_row(P, dS, L, delta, td, i);
        for (int d = 0; d < hd; d++) dq[d] = 0;
        for (int64_t j = 0; j < L; j++) {
            const float p = P[j], ds = dS[j] * scale;
            const float *kj = K[j];
            float *dk = dK[j], *dv = dV[j];
#pragma omp simd
            for (int d = 0; d < hd; d++) {
                dv[d] += p * dO[d];
                dk[d] += ds * q[d];
                dq[d] += ds * kj[d];
            }
        }
    }
}

/* Query tiles of BQ rows through GEMM calls (any head size). */
static void backward_gemm(const bwd_args *a, int64_t grp, int h, float *scratch,
                          const task_drop *td) {
    const int hd = a->hd;
    const tb_grouping *kg = tb_group_keys(a->g);
    const int64_t Lq = tb_group_size(a->g, grp), first = tb_group_first(a->g, grp);
    const int64_t L = tb_group_size(kg, grp), kfirst = tb_group_first(kg, grp);
    const float scale = 1.0f / sqrtf((float)hd);
    float *Q = scratch, *K = Q + Lq * hd, *V = K + L * hd;
    float *O = V + L * hd, *dO = O + Lq * hd, *dK = dO + Lq * hd, *dV = dK + L * hd;
    const int64_t tile = Lq < BQ ? Lq : BQ;
    float *S = dV + L * hd, *dP = S + tile * L, *delta = dP + tile * L;
    gather_head(Q, a->q, a->ld, a->g, grp, h, hd);
    gather_head(K, a->k, a->ld, kg, grp, h, hd);
    gather_head(V, a->v, a->ld, kg, grp, h, hd);
    for (int64_t j = 0; j < Lq; j++) { /* O and dO are group-major: row first + j */
        memcpy(O + j * hd, a->o + (first + j) * a->D + (int64_t)h * hd, sizeof(float) * hd);
        memcpy(dO + j * hd, a->dout + (first + j) * a->D + (int64_t)h * hd, sizeof(float) * hd);
        double acc = 0;
        for (int d = 0; d < hd; d++) acc += (double)O[j * hd + d] * dO[j * hd + d];
        delta[j] = (float)acc;
    }
    memset(dK, 0, sizeof(float) * (size_t)(2 * L * hd));
    task_bias tbias;
    const task_bias *tb = task_bias_of(&tbias, a->bias, grp, h, L);
    float *dbias = a->bias && a->bias->dbias ? a->bias->dbias + (int64_t)h * L * L : NULL;
    for (int64_t i0 = 0; i0 < Lq; i0 += BQ) {
        const int64_t m = Lq - i0 < BQ ? Lq - i0 : BQ;
        tb_gemm(0, 1, m, L, hd, 1.0f, Q + i0 * hd, hd, K, hd, 0.0f, S, L);
        if (tb)
            for (int64_t i = 0; i < m; i++) biased_softmax_row(S + i * L, L, scale, tb, i0 + i);
        else
            for (int64_t i = 0; i < m; i++) tb_softmax_row(S + i * L, L, scale);
        tb_gemm(0, 1, m, L, hd, 1.0f, dO + i0 * hd, hd, V, hd, 0.0f, dP, L);
        /* S becomes P' (for dV), dP becomes dS */
        for (int64_t i = 0; i < m; i++)
            softmax_grad_row(S + i * L, dP + i * L, L, delta[i0 + i], td, i0 + i);
        if (dbias) /* the bias enters the scores unscaled: dL/dbias = dS (one thread per head) */
            for (int64_t i = 0; i < m * L; i++) dbias[i0 * L + i] += dP[i];
        tb_gemm(1, 0, L, hd, m, 1.0f, S, L, dO + i0 * hd, hd, 1.0f, dV, hd);
        /* dQ rows go straight to the output (group-major, this head's columns) */
        tb_gemm(0, 0, m, hd, L, scale, dP, L, K, hd, 0.0f,
                a->dq + (first + i0) * a->ldd + (int64_t)h * hd, a->ldd);
        tb_gemm(1, 0, L, hd, m, scale, dP, L, Q + i0 * hd, hd, 1.0f, dK, hd);
    }
    for (int64_t j = 0; j < L; j++) {
        memcpy(a->dk + (kfirst + j) * a->ldd + (int64_t)h * hd, dK + j * hd, sizeof(float) * hd);
        memcpy(a->dv + (kfirst + j) * a->ldd + (int64_t)h * hd, dV + j * hd, sizeof(float) * hd);
    }
}

#if defined(FUSED_TILES)
/* The column blocks of a head (hd a multiple of 16): 64 at a time, then the rest. */
#define FOR_COLUMNS(hd, call)                                                                  \
    do {                                                                                       \
        int c0 = 0;                                                                            \
        for (; c0 + 64 <= (hd); c0 += 64) call(c0, 4);                                         \
        switch (((hd) - c0) / 16) {                                                            \
        case 3: call(c0, 3); break;                                                            \
        case 2: call(c0, 2); break;                                                            \
        case 1: call(c0, 1); break;                                                            \
        default: break;                                                                        \
        }                                                                                      \
    } while (0)

/* FlashAttention-style backward of one (group, head): per tile of BTQ queries, the scores and
 * dP = dO V^T are formed key chunk by key chunk (each chunk of packed K and V used by every row
 * of the tile while in L1), the softmax of whole rows recomputed, dS formed in place; then
 * dQ = dS K per block of FQ rows (registers), and dV += P^T dO, dK += dS^T Q per block of FQ keys
 * (registers, the tile's dO and Q rows in L1). Q is pre-scaled by 1/sqrt(hd), so dK needs no
 * further scale and the scores come out scaled. */
static void backward_fused(const bwd_args *a, int64_t grp, int h, float *scratch,
                           const task_drop *td) {
    const int hd = a->hd;
    const tb_grouping *kg = tb_group_keys(a->g);
    const int64_t Lq = tb_group_size(a->g, grp), first = tb_group_first(a->g, grp);
    const int64_t L = tb_group_size(kg, grp), kfirst = tb_group_first(kg, grp);
    const int64_t lp = round_up(L, KC), lq = round_up(Lq, BTQ), ldp = lp + 16;
    const int64_t c = (int64_t)h * hd;
    /* scores only up to the last block of 16 KB keys holding one: a chunk's padding costs */
    const int64_t lk = round_up(L, 16 * KB);
    const float scale = 1.0f / sqrtf((float)hd);
    float *Q = scratch, *dO = Q + lq * hd, *delta = dO + lq * hd, *K = delta + lq;
    float *Kp = K + lp * hd, *Vp = Kp + lp * hd, *dK = Vp + lp * hd, *dV = dK + (lp + FQ) * hd;
    float *P = dV + (lp + FQ) * hd, *dS = P + BTQ * ldp, *dQ = dS + BTQ * ldp;
    task_bias tbias;
    const task_bias *tb = task_bias_of(&tbias, a->bias, grp, h, L);
    float *dbias = a->bias && a->bias->dbias ? a->bias->dbias + (int64_t)h * L * L : NULL;
    gather_head(Q, a->q, a->ld, a->g, grp, h, hd);
    for (int64_t i = 0; i < Lq * hd; i++) Q[i] *= scale;
    memset(Q + Lq * hd, 0, sizeof(float) * (size_t)((lq - Lq) * hd));
    for (int64_t j = 0; j < Lq; j++) {
        const float *o = a->o + (first + j) * a->D + c, *d_o = a->dout + (first + j) * a->D + c;
        float acc = 0;
#pragma omp simd reduction(+ : acc)
        for (int d = 0; d < hd; d++) acc += o[d] * d_o[d];
        delta[j] = acc;
        memcpy(dO + j * hd, d_o, sizeof(float) * (size_t)hd);
    }
    memset(dO + Lq * hd, 0, sizeof(float) * (size_t)((lq - Lq) * hd));
    int64_t ldk, cbk;
    pack_pv_operand(K, a->k, a->ld, kg, grp, h, hd, lp, &ldk, &cbk);
    pack_keys(Kp, a->k, a->ld, kg, grp, h, hd, lp);
    pack_keys(Vp, a->v, a->ld, kg, grp, h, hd, lp);
    memset(dK, 0, sizeof(float) * (size_t)(2 * (lp + FQ) * hd));
    /* the key blocks of FQ read up to FQ - 1 columns past lp: keep them finite */
    memset(P, 0, sizeof(float) * (size_t)(2 * BTQ * ldp));
    for (int64_t i0 = 0; i0 < Lq; i0 += BTQ) {
        const int64_t nq = Lq - i0 < BTQ ? Lq - i0 : BTQ, nr = round_up(nq, FQ);
        for (int64_t kc = 0; kc < lk; kc += KC) {
            const int64_t nb = (kc + KC <= lk ? KC : lk - kc) / 16;
            for (int64_t r0 = 0; r0 < nr; r0 += FQ) {
                fused_scores(P + r0 * ldp + kc, ldp, Q + (i0 + r0) * hd, Kp + kc * hd, nb, hd);
                fused_scores(dS + r0 * ldp + kc, ldp, dO + (i0 + r0) * hd, Vp + kc * hd, nb, hd);
            }
        }
        for (int64_t r = 0; r < nq; r++) {
            float *p = P + r * ldp, *ds = dS + r * ldp;
            if (tb) add_bias_chunk(p, L, tb, i0 + r, 0, L); /* scores came out scaled */
            const float mx = tb_row_max(p, L), inv = 1.0f / tb_exp_shift_sum(p, L, mx);
#pragma omp simd
            for (int64_t j = 0; j < L; j++) p[j] *= inv;
            softmax_grad_row(p, ds, L, delta[i0 + r], td, i0 + r);
            if (dbias) { /* the bias enters the scores unscaled: dL/dbias = dS */
                float *db = dbias + (i0 + r) * L;
#pragma omp simd
                for (int64_t j = 0; j < L; j++) db[j] += ds[j];
            }
        }
        for (int64_t r0 = 0; r0 < nr; r0 += FQ) { /* dQ = dS K, FQ rows at a time */
            memset(dQ, 0, sizeof(float) * (size_t)(FQ * hd));
#define DQ_COLS(c0, nc) fused_pv(dQ, dS + r0 * ldp, ldp, 1, K, ldk, cbk, L, hd, c0, nc)
            FOR_COLUMNS(hd, DQ_COLS);
#undef DQ_COLS
            for (int64_t r = 0; r < FQ && r0 + r < nq; r++) {
                float *dq = a->dq + (first + i0 + r0 + r) * a->ldd + c;
                for (int d = 0; d < hd; d++) dq[d] = dQ[r * hd + d] * scale;
            }
        }
        for (int64_t j0 = 0; j0 < L; j0 += FQ) { /* dV += P^T dO, dK += dS^T Q */
#define DV_COLS(c0, nc) fused_pv(dV + j0 * hd, P + j0, 1, ldp, dO + i0 * hd, hd, 16, nq, hd, c0, nc)
#define DK_COLS(c0, nc) fused_pv(dK + j0 * hd, dS + j0, 1, ldp, Q + i0 * hd, hd, 16, nq, hd, c0, nc)
            FOR_COLUMNS(hd, DV_COLS);
            FOR_COLUMNS(hd, DK_COLS);
#undef DV_COLS
#undef DK_COLS
        }
    }
    for (int64_t j = 0; j < L; j++) {
        memcpy(a->dk + (kfirst + j) * a->ldd + c, dK + j * hd, sizeof(float) * (size_t)hd);
        memcpy(a->dv + (kfirst + j) * a->ldd + c, dV + j * hd, sizeof(float) * (size_t)hd);
    }
}
#endif

tb_attn_kernel tb_attention_backward_kernel_for(int64_t L, int hd, tb_attn_kernel kernel) {
    tb_attn_kernel kn = kernel;
    if (kn == TB_ATTN_AUTO) kn = L <= SMALL_GROUP ? TB_ATTN_SMALL : TB_ATTN_FUSED;
    if (kn == TB_ATTN_SMALL && L > SMALL_GROUP) kn = TB_ATTN_GEMM;
#if defined(FUSED_TILES)
    if (kn == TB_ATTN_FUSED && hd % 16 != 0) kn = TB_ATTN_GEMM;
#else
    (void)hd;
    if (kn == TB_ATTN_FUSED) kn = TB_ATTN_GEMM; /* no AVX-512 in this build */
#endif
    return kn;
}

void tb_attention_backward_kernel(float *dq, float *dk, float *dv, int64_t ldd, const float *q,
                                  const float *k, const float *v, int64_t ld, const float *o,
                                  const float *dout, const tb_grouping *g, int heads, int hd,
                                  float *scratch, int n_threads, const tb_attn_dropout *drop,
                                  tb_attn_kernel kernel) {
    const bwd_args a = {dq, dk, dv, ldd, q, k, v, ld, o, dout, (int64_t)heads * hd, g, heads, hd,
                        NULL};
    const tb_grouping *kg = tb_group_keys(g);
    const int64_t per = tb_attention_backward_scratch_floats(tb_group_longest(g), hd, 1);
    const int64_t tasks = g->n_groups * heads;
    const int64_t chunk =
        tb_group_longest(g) <= SMALL_GROUP ? 1 + tasks / (8 * (int64_t)n_threads) : 1;
#pragma omp parallel for schedule(dynamic, chunk) num_threads(n_threads)
    for (int64_t t = 0; t < tasks; t++) {
        const int64_t grp = t / heads;
        const int h = (int)(t % heads);
        const int64_t Lq = tb_group_size(g, grp), Lk = tb_group_size(kg, grp);
        const int64_t L = Lq > Lk ? Lq : Lk; /* the kernel that fits the longer side */
        float *mine = scratch + per * omp_get_thread_num();
        task_drop tdrop;
        const task_drop *td = task_dropout(&tdrop, drop, grp, heads, h);
        const tb_attn_kernel kn = tb_attention_backward_kernel_for(L, hd, kernel);
#if defined(FUSED_TILES)
        if (kn == TB_ATTN_FUSED) {
            backward_fused(&a, grp, h, mine, td);
            continue;
        }
#endif
        if (kn == TB_ATTN_SMALL)
            backward_small(&a, grp, h, mine, mine + SMALL_GROUP, td);
        else
            backward_gemm(&a, grp, h, mine, td);
    }
}

/* With a bias, the small-group loops do not apply: groups of more than SMALL_GROUP tokens take
 * the fused kernel where it applies, the others the GEMM tiles. */
static tb_attn_kernel biased_kernel_for(int64_t L, int hd, tb_attn_kernel kernel) {
    if (kernel == TB_ATTN_AUTO) kernel = L > SMALL_GROUP ? TB_ATTN_FUSED : TB_ATTN_GEMM;
    if (kernel == TB_ATTN_SMALL) kernel = TB_ATTN_GEMM;
    return tb_attention_backward_kernel_for(L, hd, kernel);
}

int tb_attention_backward_biased_kernel(float *dq, float *dk, float *dv, int64_t ldd,
                                        const float *q, const float *k, const float *v,
                                        int64_t ld, const float *o, const float *dout,
                                        const tb_grouping *g, int heads, int hd,
                                        const tb_attn_bias *bias, float *scratch, int n_threads,
                                        const tb_attn_dropout *drop, tb_attn_kernel kernel) {
    if (g->start || g->kv) return TUBELET_ERR_ARG; /* bias tables are L x L: self-attention */
    const bwd_args a = {dq, dk, dv, ldd, q, k, v, ld, o, dout, (int64_t)heads * hd, g, heads, hd,
                        bias};
    const int fused = biased_kernel_for(g->group_len, hd, kernel) == TB_ATTN_FUSED;
    (void)fused; /* 0 without FUSED_TILES */
    const int64_t per = tb_attention_backward_scratch_floats(g->group_len, hd, 1);
    /* a head's groups on one thread: each dbias row has one writer, summed in group order */
#pragma omp parallel for schedule(dynamic, 1) num_threads(n_threads)
    for (int h = 0; h < heads; h++) {
        float *mine = scratch + per * omp_get_thread_num();
        for (int64_t grp = 0; grp < g->n_groups; grp++) {
            task_drop tdrop;
            const task_drop *td = task_dropout(&tdrop, drop, grp, heads, h);
#if defined(FUSED_TILES)
            if (fused) {
                backward_fused(&a, grp, h, mine, td);
                continue;
            }
#endif
            backward_gemm(&a, grp, h, mine, td);
        }
    }
    return TUBELET_OK;
}

int tb_attention_backward_biased(float *dq, float *dk, float *dv, int64_t ldd, const float *q,
                                 const float *k, const float *v, int64_t ld, const float *o,
                                 const float *dout, const tb_grouping *g, int heads, int hd,
                                 const tb_attn_bias *bias, float *scratch, int n_threads,
                                 const tb_attn_dropout *drop) {
    return tb_attention_backward_biased_kernel(dq, dk, dv, ldd, q, k, v, ld, o, dout, g, heads,
                                               hd, bias, scratch, n_threads, drop, TB_ATTN_AUTO);
}

void tb_attention_backward(float *dq, float *dk, float *dv, int64_t ldd, const float *q,
                           const float *k, const float *v, int64_t ld, const float *o,
                           const float *dout, const tb_grouping *g, int heads, int hd,
                           float *scratch, int n_threads, const tb_attn_dropout *drop) {
    tb_attention_backward_kernel(dq, dk, dv, ldd, q, k, v, ld, o, dout, g, heads, hd, scratch,
                                 n_threads, drop, TB_ATTN_AUTO);
}

/* The additive term of (group, head, i, j) in double (0 without a bias). */
static double bias_at(const tb_attn_bias *b, int64_t grp, int h, int64_t L, int64_t i,
                      int64_t j) {
    if (!b) return 0;
    double t = b->bias ? b->bias[((int64_t)h * L + i) * L + j] : 0;
    if (b->mask && b->n_masks > 0) {
        const int64_t w = grp % b->n_masks, m = b->mask_index ? b->mask_index[w] : w;
        t += b->mask[(m * L + i) * L + j];
    }
    return t;
}

void tb_attention_ref(float *out, const float *q, const float *k, const float *v, int64_t ld,
                      const tb_grouping *g, int heads, int hd, const tb_attn_dropout *drop) {
    tb_attention_ref_biased(out, q, k, v, ld, g, heads, hd, NULL, drop);
}

void tb_attention_ref_biased(float *out, const float *q, const float *k, const float *v,
                             int64_t ld, const tb_grouping *g, int heads, int hd,
                             const tb_attn_bias *bias, const tb_attn_dropout *drop) {
    const tb_keep_rule rule = tb_keep_rule_make(drop ? drop->p : 0);
    const int64_t D = (int64_t)heads * hd;
    const tb_grouping *kg = tb_group_keys(g);
    double *s = malloc(sizeof(double) * (size_t)(kg->group_len > 0 ? kg->group_len : 1));
    if (!s) return;
    for (int64_t grp = 0; grp < g->n_groups; grp++)
        for (int h = 0; h < heads; h++)
            for (int64_t i = 0, L = tb_group_size(kg, grp); i < tb_group_size(g, grp); i++) {
                const float *qi = q + tb_group_row(g, grp, i) * ld + h * hd;
                double mx = -INFINITY, sum = 0;
                for (int64_t j = 0; j < L; j++) {
                    const float *kj = k + tb_group_row(kg, grp, j) * ld + h * hd;
                    double acc = 0;
                    for (int d = 0; d < hd; d++) acc += (double)qi[d] * kj[d];
                    s[j] = acc / sqrt((double)hd) + bias_at(bias, grp, h, L, i, j);
                    if (s[j] > mx) mx = s[j];
                }
                for (int64_t j = 0; j < L; j++) sum += (s[j] = exp(s[j] - mx));
                if (rule.thr) { /* m_ij / (1 - p), after the normaliser */
                    const uint64_t key = tb_hash(tb_hash(drop->key, (uint64_t)(grp * heads + h)),
                                                 (uint64_t)i);
                    for (int64_t j = 0; j < L; j++) s[j] *= tb_keep_scale(key, (uint64_t)j, rule);
                }
                float *o = out + (tb_group_first(g, grp) + i) * D + h * hd;
                for (int d = 0; d < hd; d++) {
                    double acc = 0;
                    for (int64_t j = 0; j < L; j++)
                        acc += s[j] * v[tb_group_row(kg, grp, j) * ld + h * hd + d];
                    o[d] = (float)(acc / sum);
                }
            }
    free(s);
}

void tb_attention_backward_ref(float *dq, float *dk, float *dv, int64_t ldd, const float *q,
                               const float *k, const float *v, int64_t ld, const float *dout,
                               const tb_grouping *g, int heads, int hd,
                               const tb_attn_dropout *drop) {
    tb_attention_backward_ref_biased(dq, dk, dv, ldd, q, k, v, ld, dout, g, heads, hd, NULL, drop);
}

void tb_attention_backward_ref_biased(float *dq, float *dk, float *dv, int64_t ldd,
                                      const float *q, const float *k, const float *v, int64_t ld,
                                      const float *dout, const tb_grouping *g, int heads, int hd,
                                      const tb_attn_bias *bias, const tb_attn_dropout *drop) {
    const tb_keep_rule rule = tb_keep_rule_make(drop ? drop->p : 0);
    const tb_grouping *kg = tb_group_keys(g);
    const int64_t D = (int64_t)heads * hd, n = tb_group_longest(g) > 0 ? tb_group_longest(g) : 1;
    const double scale = 1.0 / sqrt((double)hd);
    /* P, the mask M, dP (= dO V^T) and dS of one (group, head), n x n each */
    double *P = malloc(sizeof(double) * (size_t)(4 * n * n));
    if (!P) return;
    double *M = P + n * n, *dP = M + n * n, *dS = dP + n * n;
    for (int64_t grp = 0; grp < g->n_groups; grp++)
        for (int h = 0; h < heads; h++) {
            const int64_t Lq = tb_group_size(g, grp), first = tb_group_first(g, grp);
            const int64_t L = tb_group_size(kg, grp), kfirst = tb_group_first(kg, grp);
            /* P, M, dP, dS (Lq x L, row stride n); query rows by g, key and value rows by kg */
#define ROW(x, j) ((x) + tb_group_row(g, grp, j) * ld + (int64_t)h * hd)
#define KROW(x, j) ((x) + tb_group_row(kg, grp, j) * ld + (int64_t)h * hd)
            for (int64_t i = 0; i < Lq; i++) {
                double mx = -INFINITY, sum = 0;
                for (int64_t j = 0; j < L; j++) {
                    double s = 0, dp = 0;
                    for (int d = 0; d < hd; d++)
                        s += (double)ROW(q, i)[d] * KROW(k, j)[d],
                        dp += (double)dout[(first + i) * D + h * hd + d] * KROW(v, j)[d];
                    P[i * n + j] = s * scale + bias_at(bias, grp, h, L, i, j), dP[i * n + j] = dp;
                    mx = P[i * n + j] > mx ? P[i * n + j] : mx;
                }
                for (int64_t j = 0; j < L; j++) sum += (P[i * n + j] = exp(P[i * n + j] - mx));
                const uint64_t key =
                    rule.thr ? tb_hash(tb_hash(drop->key, (uint64_t)(grp * heads + h)), (uint64_t)i)
                             : 0;
                double delta = 0; /* sum_j P_ij dP'_ij, dP' = dP M */
                for (int64_t j = 0; j < L; j++) {
                    P[i * n + j] /= sum;
                    M[i * n + j] = rule.thr ? tb_keep_scale(key, (uint64_t)j, rule) : 1.0;
                    dP[i * n + j] *= M[i * n + j];
                    delta += P[i * n + j] * dP[i * n + j];
                }
                for (int64_t j = 0; j < L; j++) dS[i * n + j] = P[i * n + j] * (dP[i * n + j] - delta);
                if (bias && bias->dbias)
                    for (int64_t j = 0; j < L; j++)
                        bias->dbias[((int64_t)h * L + i) * L + j] += (float)dS[i * n + j];
            }
            for (int64_t i = 0; i < Lq; i++) /* dQ = dS K scale */
                for (int d = 0; d < hd; d++) {
                    double aq = 0;
                    for (int64_t j = 0; j < L; j++) aq += dS[i * n + j] * KROW(k, j)[d];
                    dq[(first + i) * ldd + h * hd + d] = (float)(aq * scale);
                }
            for (int64_t j = 0; j < L; j++) /* dK = dS^T Q scale, dV = (P M)^T dO */
                for (int d = 0; d < hd; d++) {
                    double ak = 0, av = 0;
                    for (int64_t i = 0; i < Lq; i++) {
                        ak += dS[i * n + j] * ROW(q, i)[d];
                        av += P[i * n + j] * M[i * n + j] * dout[(first + i) * D + h * hd + d];
                    }
                    dk[(kfirst + j) * ldd + h * hd + d] = (float)(ak * scale);
                    dv[(kfirst + j) * ldd + h * hd + d] = (float)av;
                }
#undef ROW
#undef KROW
        }
    free(P);
}
