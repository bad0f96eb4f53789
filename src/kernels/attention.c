#include "attention.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "gemm.h"
#include "ops.h"

#if defined(__AVX512F__)
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
    int64_t fused_path = round_up(L, TQ) * hd + 2 * lp * hd + FQ * KC + TQ * hd;
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
                         int64_t L, int hd, float *S, float scale, const task_drop *td) {
    for (int64_t i = 0; i < L; i++) {
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

/* One (group, head): O = softmax(Q K^T * scale) V, tiled over queries. */
static void attend_one(float *out, int64_t ldo, const float *Q, const float *K, const float *V,
                       int64_t L, int hd, float *S, const task_drop *td) {
    const float scale = 1.0f / sqrtf((float)hd);
    if (L <= SMALL_GROUP) {
        attend_small(out, ldo, Q, K, V, L, hd, S, scale, td);
        return;
    }
    const int64_t tile = q_tile(L);
    for (int64_t i0 = 0; i0 < L; i0 += tile) {
        int64_t m = L - i0 < tile ? L - i0 : tile;
        tb_gemm(0, 1, m, L, hd, 1.0f, Q + i0 * hd, hd, K, hd, 0.0f, S, L);
        for (int64_t i = 0; i < m; i++) tb_softmax_row(S + i * L, L, scale);
        if (td)
            for (int64_t i = 0; i < m; i++) drop_row(td, S + i * L, L, i0 + i, 0);
        tb_gemm(0, 0, m, hd, L, 1.0f, S, L, V, hd, 0.0f, out + i0 * ldo, ldo);
    }
}

#if defined(__AVX512F__)
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

/* O[r][c0 .. c0 + 16 nc) += sum over n keys of P[r][j] v_j, for FQ rows (O row stride hd). */
static inline __attribute__((always_inline)) void fused_pv(float *O, const float *P, int64_t ldp,
                                                           const float *V, int64_t n, int hd,
                                                           int c0, const int nc) {
    __m512 acc[FQ][4];
#pragma GCC unroll 8
    for (int r = 0; r < FQ; r++)
#pragma GCC unroll 4
        for (int c = 0; c < nc; c++) acc[r][c] = _mm512_loadu_ps(O + r * hd + c0 + c * 16);
    for (int64_t j = 0; j < n; j++) {
        __m512 vv[4];
#pragma GCC unroll 4
        for (int c = 0; c < nc; c++) vv[c] = _mm512_loadu_ps(V + j * hd + c0 + c * 16);
#pragma GCC unroll 8
        for (int r = 0; r < FQ; r++) {
            __m512 p = _mm512_set1_ps(P[r * ldp + j]);
#pragma GCC unroll 4
            for (int c = 0; c < nc; c++) acc[r][c] = _mm512_fmadd_ps(p, vv[c], acc[r][c]);
        }
    }
#pragma GCC unroll 8
    for (int r = 0; r < FQ; r++)
#pragma GCC unroll 4
        for (int c = 0; c < nc; c++) _mm512_storeu_ps(O + r * hd + c0 + c * 16, acc[r][c]);
}

/* Online softmax (flash attention): per query tile, keys are visited in chunks of KC; each
 * chunk's scores for FQ rows live only in a small buffer, the running max m and sum l of every
 * row are updated and its output accumulator rescaled when m grows, so no score row is ever
 * stored whole. Q is pre-scaled by 1/sqrt(hd) (exact for hd = 64). With dropout, the chunk's
 * exponentials are dropped after they entered the running sum l, which stays undropped. */
static void attend_fused(float *out, int64_t ldo, const float *q, const float *k, const float *v,
                         int64_t ld, const tb_grouping *g, int64_t grp, int h, int hd,
                         float *scratch, const task_drop *td) {
    const int64_t L = tb_group_size(g, grp), lp = round_up(L, KC), lq = round_up(L, TQ);
    float *Q = scratch, *Kp = Q + lq * hd, *V = Kp + lp * hd, *S = V + lp * hd;
    float *O = S + FQ * KC, m[TQ], l[TQ];
    const float scale = 1.0f / sqrtf((float)hd);
    gather_head(Q, q, ld, g, grp, h, hd);
    for (int64_t i = 0; i < L * hd; i++) Q[i] *= scale;
    memset(Q + L * hd, 0, sizeof(float) * (size_t)((lq - L) * hd));
    gather_head(V, v, ld, g, grp, h, hd);
    pack_keys(Kp, k, ld, g, grp, h, hd, lp);
    for (int64_t i0 = 0; i0 < L; i0 += TQ) {
        const int64_t nq = L - i0 < TQ ? L - i0 : TQ, nr = round_up(nq, FQ);
        for (int64_t r = 0; r < nr; r++) m[r] = -INFINITY, l[r] = 0;
        memset(O, 0, sizeof(float) * (size_t)(nr * hd));
        for (int64_t kc = 0; kc < L; kc += KC) {
            const int64_t n = L - kc < KC ? L - kc : KC;
            for (int64_t r0 = 0; r0 < nr; r0 += FQ) {
                fused_scores(S, KC, Q + (i0 + r0) * hd, Kp + kc * hd, KC / 16, hd);
                for (int r = 0; r < FQ; r++) {
                    float *row = S + r * KC, *o = O + (r0 + r) * hd;
                    const float mx = tb_row_max(row, n), m_old = m[r0 + r];
                    const float m_new = mx > m_old ? mx : m_old;
                    const float sum = tb_exp_shift_sum(row, n, m_new);
                    if (m_new > m_old) { /* rescale what was accumulated under the old max */
                        const float alpha = expf(m_old - m_new);
                        l[r0 + r] *= alpha;
                        for (int d = 0; d < hd; d++) o[d] *= alpha;
                    }
                    m[r0 + r] = m_new;
                    l[r0 + r] += sum;
                    if (td) drop_row(td, row, n, i0 + r0 + r, kc);
                }
                float *o = O + r0 * hd;
                const float *vj = V + kc * hd;
                int c0 = 0;
                for (; c0 + 64 <= hd; c0 += 64) fused_pv(o, S, KC, vj, n, hd, c0, 4);
                switch ((hd - c0) / 16) {
                case 3: fused_pv(o, S, KC, vj, n, hd, c0, 3); break;
                case 2: fused_pv(o, S, KC, vj, n, hd, c0, 2); break;
                case 1: fused_pv(o, S, KC, vj, n, hd, c0, 1); break;
                default: break;
                }
            }
        }
        for (int64_t r = 0; r < nq; r++) {
            const float inv = 1.0f / l[r];
            for (int d = 0; d < hd; d++) out[(i0 + r) * ldo + d] = O[r * hd + d] * inv;
        }
    }
}
#endif

void tb_attention_forward(float *out, const float *q, const float *k, const float *v, int64_t ld,
                          const tb_grouping *g, int heads, int head_dim, float *scratch,
                          int n_threads, const tb_attn_dropout *drop) {
    const int64_t D = (int64_t)heads * head_dim;
    const int64_t per = tb_attention_scratch_floats(g->group_len, head_dim, 1);
    const int64_t tasks = g->n_groups * heads;
    /* many tiny tasks (time groups) are handed out in chunks; big ones one at a time */
    const int64_t chunk = g->group_len <= SMALL_GROUP ? 1 + tasks / (8 * (int64_t)n_threads) : 1;
#pragma omp parallel for schedule(dynamic, chunk) num_threads(n_threads)
    for (int64_t t = 0; t < tasks; t++) {
        int64_t grp = t / heads;
        int h = (int)(t % heads);
        const int64_t L = tb_group_size(g, grp);
        float *o = out + tb_group_first(g, grp) * D + (int64_t)h * head_dim;
        float *mine = scratch + per * omp_get_thread_num();
        task_drop tdrop;
        const task_drop *td = task_dropout(&tdrop, drop, grp, heads, h);
#if defined(__AVX512F__)
        if (L > SMALL_GROUP && head_dim % 16 == 0) {
            attend_fused(o, D, q, k, v, ld, g, grp, h, head_dim, mine, td);
            continue;
        }
#endif
        float *Q = mine, *K = Q + L * head_dim, *V = K + L * head_dim;
        float *S = V + L * head_dim;
        gather_head(Q, q, ld, g, grp, h, head_dim);
        gather_head(K, k, ld, g, grp, h, head_dim);
        gather_head(V, v, ld, g, grp, h, head_dim);
        attend_one(o, D, Q, K, V, L, head_dim, S, td);
    }
}

/* ---- backward ----
 * Per (group, head), query tiles of BQ rows: the scores are recomputed (S = Q K^T / sqrt(hd)),
 * P = softmax(S) row by row, then with delta_i = dO_i . O_i:
 *   dV += P^T dO,  dP = dO V^T,  dS = P * (dP - delta),  dQ = dS K / sqrt(hd),  dK += dS^T Q / sqrt(hd).
 * With dropout (mask M = m / (1 - p), regenerated from its key): P' = P * M takes P's place in
 * dV += P'^T dO, and dP = (dO V^T) * M; delta = rowsum(dO * O) is still sum_j P_ij dP_ij since
 * O = P' V. Like the forward, only a BQ x L tile of scores exists at a time. */
#define BQ 64

int64_t tb_attention_backward_scratch_floats(int64_t L, int hd, int n_threads) {
    int64_t tile = L < BQ ? L : BQ;
    return (7 * L * hd + 2 * tile * L + L + 16) * (n_threads > 0 ? n_threads : 1);
}

void tb_attention_backward(float *dq, float *dk, float *dv, int64_t ldd, const float *q,
                           const float *k, const float *v, int64_t ld, const float *o,
                           const float *dout, const tb_grouping *g, int heads, int hd,
                           float *scratch, int n_threads, const tb_attn_dropout *drop) {
    const int64_t D = (int64_t)heads * hd;
    const int64_t per = tb_attention_backward_scratch_floats(g->group_len, hd, 1);
    const float scale = 1.0f / sqrtf((float)hd);
    const int64_t tasks = g->n_groups * heads;
#pragma omp parallel for schedule(dynamic) num_threads(n_threads)
    for (int64_t t = 0; t < tasks; t++) {
        const int64_t grp = t / heads;
        const int h = (int)(t % heads);
        const int64_t L = tb_group_size(g, grp), first = tb_group_first(g, grp);
        float *Q = scratch + per * omp_get_thread_num(), *K = Q + L * hd, *V = K + L * hd;
        float *O = V + L * hd, *dO = O + L * hd, *dK = dO + L * hd, *dV = dK + L * hd;
        const int64_t tile = L < BQ ? L : BQ;
        float *S = dV + L * hd, *dP = S + tile * L, *delta = dP + tile * L;
        gather_head(Q, q, ld, g, grp, h, hd);
        gather_head(K, k, ld, g, grp, h, hd);
        gather_head(V, v, ld, g, grp, h, hd);
        for (int64_t j = 0; j < L; j++) { /* O and dO are group-major: row first + j */
            memcpy(O + j * hd, o + (first + j) * D + (int64_t)h * hd, sizeof(float) * hd);
            memcpy(dO + j * hd, dout + (first + j) * D + (int64_t)h * hd, sizeof(float) * hd);
            double acc = 0;
            for (int d = 0; d < hd; d++) acc += (double)O[j * hd + d] * dO[j * hd + d];
            delta[j] = (float)acc;
        }
        memset(dK, 0, sizeof(float) * (size_t)(2 * L * hd));
        task_drop tdrop;
        const task_drop *td = task_dropout(&tdrop, drop, grp, heads, h);
        for (int64_t i0 = 0; i0 < L; i0 += BQ) {
            const int64_t m = L - i0 < BQ ? L - i0 : BQ;
            tb_gemm(0, 1, m, L, hd, 1.0f, Q + i0 * hd, hd, K, hd, 0.0f, S, L);
            for (int64_t i = 0; i < m; i++) tb_softmax_row(S + i * L, L, scale);
            if (!td) tb_gemm(1, 0, L, hd, m, 1.0f, S, L, dO + i0 * hd, hd, 1.0f, dV, hd);
            tb_gemm(0, 1, m, L, hd, 1.0f, dO + i0 * hd, hd, V, hd, 0.0f, dP, L);
            if (td) { /* S becomes P' (for dV), dP becomes dS */
                for (int64_t i = 0; i < m; i++) {
                    const uint64_t key = tb_hash(td->key, (uint64_t)(i0 + i));
                    float *p = S + i * L, *dp = dP + i * L;
                    const float di = delta[i0 + i];
                    for (int64_t j = 0; j < L; j++) {
                        const float mk = tb_keep_scale(key, (uint64_t)j, td->rule);
                        dp[j] = p[j] * (dp[j] * mk - di);
                        p[j] *= mk;
                    }
                }
                tb_gemm(1, 0, L, hd, m, 1.0f, S, L, dO + i0 * hd, hd, 1.0f, dV, hd);
            } else {
                for (int64_t i = 0; i < m; i++)
                    for (int64_t j = 0; j < L; j++)
                        dP[i * L + j] = S[i * L + j] * (dP[i * L + j] - delta[i0 + i]);
            }
            /* dQ rows go straight to the output (group-major, this head's columns) */
            tb_gemm(0, 0, m, hd, L, scale, dP, L, K, hd, 0.0f,
                    dq + (first + i0) * ldd + (int64_t)h * hd, ldd);
            tb_gemm(1, 0, L, hd, m, scale, dP, L, Q + i0 * hd, hd, 1.0f, dK, hd);
        }
        for (int64_t j = 0; j < L; j++) {
            memcpy(dk + (first + j) * ldd + (int64_t)h * hd, dK + j * hd, sizeof(float) * hd);
            memcpy(dv + (first + j) * ldd + (int64_t)h * hd, dV + j * hd, sizeof(float) * hd);
        }
    }
}

void tb_attention_ref(float *out, const float *q, const float *k, const float *v, int64_t ld,
                      const tb_grouping *g, int heads, int hd, const tb_attn_dropout *drop) {
    const tb_keep_rule rule = tb_keep_rule_make(drop ? drop->p : 0);
    const int64_t D = (int64_t)heads * hd;
    double *s = malloc(sizeof(double) * (size_t)(g->group_len > 0 ? g->group_len : 1));
    if (!s) return;
    for (int64_t grp = 0; grp < g->n_groups; grp++)
        for (int h = 0; h < heads; h++)
            for (int64_t i = 0, L = tb_group_size(g, grp); i < L; i++) {
                const float *qi = q + tb_group_row(g, grp, i) * ld + h * hd;
                double mx = -INFINITY, sum = 0;
                for (int64_t j = 0; j < L; j++) {
                    const float *kj = k + tb_group_row(g, grp, j) * ld + h * hd;
                    double acc = 0;
                    for (int d = 0; d < hd; d++) acc += (double)qi[d] * kj[d];
                    s[j] = acc / sqrt((double)hd);
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
                        acc += s[j] * v[tb_group_row(g, grp, j) * ld + h * hd + d];
                    o[d] = (float)(acc / sum);
                }
            }
    free(s);
}
