#include "attention.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "gemm.h"
#include "ops.h"

/* Query rows per score tile: as many as fit in about 16 MB per thread (so that K and V are
 * packed by the GEMM few times), at least 64, never more than the group. */
#define TILE_FLOATS (4 << 20)
static int64_t q_tile(int64_t L) {
    int64_t t = TILE_FLOATS / (L > 0 ? L : 1);
    if (t < 64) t = 64;
    return t < L ? t : L;
}

int64_t tb_attention_scratch_floats(int64_t L, int hd, int n_threads) {
    int64_t tile = q_tile(L);
    int64_t per = 3 * L * hd + tile * L + tile * hd + 16;
    return per * (n_threads > 0 ? n_threads : 1);
}

/* Gathers the head's hd columns of the group's rows into a dense L x hd matrix. */
static void gather_head(float *dst, const float *src, int64_t ld, const tb_grouping *g,
                        int64_t grp, int h, int hd) {
    for (int64_t j = 0; j < g->group_len; j++)
        memcpy(dst + j * hd, src + tb_group_row(g, grp, j) * ld + (int64_t)h * hd,
               sizeof(float) * hd);
}

/* One (group, head): O = softmax(Q K^T * scale) V, tiled over queries. */
static void attend_one(float *out, int64_t ldo, const float *Q, const float *K, const float *V,
                       int64_t L, int hd, float *S) {
    const float scale = 1.0f / sqrtf((float)hd);
    const int64_t tile = q_tile(L);
    for (int64_t i0 = 0; i0 < L; i0 += tile) {
        int64_t m = L - i0 < tile ? L - i0 : tile;
        tb_gemm(0, 1, m, L, hd, 1.0f, Q + i0 * hd, hd, K, hd, 0.0f, S, L);
        for (int64_t i = 0; i < m; i++) tb_softmax_row(S + i * L, L, scale);
        tb_gemm(0, 0, m, hd, L, 1.0f, S, L, V, hd, 0.0f, out + i0 * ldo, ldo);
    }
}

void tb_attention_forward(float *out, const float *q, const float *k, const float *v, int64_t ld,
                          const tb_grouping *g, int heads, int head_dim, float *scratch,
                          int n_threads) {
    const int64_t L = g->group_len, D = (int64_t)heads * head_dim;
    const int64_t per = tb_attention_scratch_floats(L, head_dim, 1);
    const int64_t tasks = g->n_groups * heads;
#pragma omp parallel for schedule(dynamic) num_threads(n_threads)
    for (int64_t t = 0; t < tasks; t++) {
        int64_t grp = t / heads;
        int h = (int)(t % heads);
        float *Q = scratch + per * omp_get_thread_num(), *K = Q + L * head_dim, *V = K + L * head_dim;
        float *S = V + L * head_dim;
        gather_head(Q, q, ld, g, grp, h, head_dim);
        gather_head(K, k, ld, g, grp, h, head_dim);
        gather_head(V, v, ld, g, grp, h, head_dim);
        attend_one(out + grp * L * D + (int64_t)h * head_dim, D, Q, K, V, L, head_dim, S);
    }
}

void tb_attention_ref(float *out, const float *q, const float *k, const float *v, int64_t ld,
                      const tb_grouping *g, int heads, int hd) {
    const int64_t L = g->group_len, D = (int64_t)heads * hd;
    double *s = malloc(sizeof(double) * (size_t)L);
    if (!s) return;
    for (int64_t grp = 0; grp < g->n_groups; grp++)
        for (int h = 0; h < heads; h++)
            for (int64_t i = 0; i < L; i++) {
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
                float *o = out + (grp * L + i) * D + h * hd;
                for (int d = 0; d < hd; d++) {
                    double acc = 0;
                    for (int64_t j = 0; j < L; j++)
                        acc += s[j] * v[tb_group_row(g, grp, j) * ld + h * hd + d];
                    o[d] = (float)(acc / sum);
                }
            }
    free(s);
}
