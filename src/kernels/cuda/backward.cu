/* The CUDA backend's training entries (backend.h; table.c lists them): the backward of every
 * operation the models' training runs, the classifier's loss, dropout, and attention with
 * dropout on its probabilities. Each has the meaning of the CPU entry of the same name (cpu.c and the kernels
 * it calls); fp32 throughout, TF32 off, so that the gradients can match the CPU's and PyTorch's.
 *
 * Shape: correctness first. Sums that the CPU keeps in a fixed order (bias and LayerNorm
 * gradients, layer scale's, the loss) run one thread per output column over the rows in row
 * order, or per row with the rows' values added on the host in row order: no atomics, so that a
 * run repeats exactly (training resumes reproduce their curve, as on the CPU).
 *
 * Verified in the emulator (make CUDA=emu; tests/gpu_grads.c against PyTorch's gradients); not
 * yet run on a GPU (docs/cuda.md). */
#include <math.h>
#include <stdlib.h>

#include "common.h"

/* ---- a grow-only device buffer for an entry's intermediate values (row statistics, partial
 * sums). The entries run one after another on the instance's stream, so each may reuse it from
 * the start; growing frees the old one, which cudaFree does only once the GPU is done with it. */
static void *tmp(tb_cuda *cx, size_t bytes) {
    if (bytes > cx->tmp_bytes) {
        if (cx->tmp) cudaFree(cx->tmp);
        cx->tmp = NULL, cx->tmp_bytes = 0;
        if (cudaMalloc(&cx->tmp, bytes * 2) != cudaSuccess) {
            cx->tmp = NULL;
            tb_cuda_fail(cx, TUBELET_ERR_MEMORY);
            return NULL;
        }
        cx->tmp_bytes = bytes * 2;
    }
    return cx->tmp;
}

/* ---- the linear layer's backward: the products through tb_cuda_gemm (common.h), the forward's
 * cuBLASLt path with its kept plans, fp32 (no TF32) ---- */

/* out[j] += the sum over rows of x[r ld + j]: one thread per column, the rows in order and in
 * float, as the CPU's tb_colsum_add (the bias gradient). */
__global__ void k_colsum_add(float *out, const float *x, int64_t rows, int64_t n, int64_t ld) {
    const int64_t j = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (j >= n) return;
    float acc = 0.0f;
    for (int64_t r = 0; r < rows; r++) acc += x[r * ld + j];
    out[j] += acc;
}

/* Row-major dx (M x K) = dy W is, column-major, dx^T (K x M) = W^T (W read as K x N) dy^T; and
 * dW (N x K) += dy^T x is dW^T (K x N) += x^T (K x M) dy (dy read as N x M, transposed). */
extern "C" void tb_cuda_linear_backward(void *ctx, tb_lowp_ctx *c, float *dx, int64_t lddx,
                                        float *dW, float *db, const float *dy, int64_t lddy,
                                        const float *x, int64_t ldx, const float *W, int64_t M,
                                        int64_t N, int64_t K, int accumulate_dx) {
    tb_cuda *cx = (tb_cuda *)ctx;
    (void)c; /* fp32: no packed products */
    if (M <= 0) return;
    const float *dyd = DEVF(dy);
    if (dx)
        tb_cuda_gemm(cx, CUBLAS_OP_N, CUBLAS_OP_N, K, M, N, DEVF(W), K, dyd, lddy,
                     accumulate_dx, dx, lddx, NULL, 0);
    if (dW)
        tb_cuda_gemm(cx, CUBLAS_OP_N, CUBLAS_OP_T, K, N, M, DEVF(x), ldx, dyd,
                     lddy, 1, dW, K, NULL, 0);
    if (db) {
        LAUNCH(k_colsum_add, blocks(N), 256)(db, dyd, M, N, lddy);
        LAUNCHED();
    }
}

/* ---- row-wise ---- */
/* LayerNorm's backward, rows: one block per row recomputes mean and rstd (two passes, as the
 * forward), then dx += rstd (g - mean(g) - xhat mean(g xhat)) with g = dy w; the row's mean and
 * rstd go to stats for the columns' kernel. */
__global__ void k_ln_bwd_rows(float *dx, const float *dy, const float *x, const float *w,
                              float *stats, int64_t n, float eps) {
    __shared__ float sh[32];
    const int64_t r = blockIdx.x;
    const float *xr = x + r * n, *dyr = dy + r * n;
    float s = 0.0f;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) s += xr[j];
    const float mean = block_sum(s, sh) / (float)n;
    float q = 0.0f;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) q += (xr[j] - mean) * (xr[j] - mean);
    const float rstd = 1.0f / sqrtf(block_sum(q, sh) / (float)n + eps);
    float mg = 0.0f, mgx = 0.0f;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
        const float g = dyr[j] * w[j];
        mg += g, mgx += g * (xr[j] - mean) * rstd;
    }
    mg = block_sum(mg, sh) / (float)n, mgx = block_sum(mgx, sh) / (float)n;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
        dx[r * n + j] += rstd * (dyr[j] * w[j] - mg - (xr[j] - mean) * rstd * mgx);
    if (threadIdx.x == 0) stats[2 * r] = mean, stats[2 * r + 1] = rstd;
}
/* ... and columns: dw[j] += sum_r dy xhat, db[j] += sum_r dy, one thread per column over the
 * rows in order, in double as the CPU's partial sums. */
__global__ void k_ln_bwd_cols(float *dw, float *db, const float *dy, const float *x,
                              const float *stats, int64_t rows, int64_t n) {
    const int64_t j = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (j >= n) return;
    double aw = 0, ab = 0;
    for (int64_t r = 0; r < rows; r++) {
        const float d = dy[r * n + j];
        aw += (double)(d * ((x[r * n + j] - stats[2 * r]) * stats[2 * r + 1])), ab += d;
    }
    dw[j] += (float)aw, db[j] += (float)ab;
}
extern "C" void tb_cuda_layernorm_backward(void *ctx, float *dx, const float *dy, const float *x,
                                           const float *w, float *dw, float *db, int64_t rows,
                                           int64_t n, float eps) {
    tb_cuda *cx = (tb_cuda *)ctx;
    float *stats = (float *)tmp(cx, sizeof(float) * 2 * (size_t)rows);
    if (rows <= 0 || !stats) return;
    LAUNCH(k_ln_bwd_rows, (unsigned)rows, 256)(dx, dy, x, DEVF(w), stats, n, eps);
    LAUNCHED();
    LAUNCH(k_ln_bwd_cols, blocks(n), 256)(dw, db, dy, x, stats, rows, n);
    LAUNCHED();
}

__global__ void k_act_backward(float *dy, const float *h, int64_t n, int act) {
    const int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i < n) dy[i] *= tb_act_grad(h[i], (tb_act)act); /* ops.h: the CPU's formulas */
}
extern "C" void tb_cuda_act_backward(void *ctx, float *dy, const float *h, int64_t rows, int64_t n,
                                     tb_act act) {
    tb_cuda *cx = (tb_cuda *)ctx;
    if (rows * n <= 0) return;
    LAUNCH(k_act_backward, blocks(rows * n), 256)(dy, h, rows * n, (int)act);
    LAUNCHED();
}

/* Layer scale: dlambda[j] += sum_r dy y (double, rows in order), then dy *= lambda; one thread
 * per column does both. */
__global__ void k_scale_cols_bwd(float *dy, float *dlambda, const float *y, const float *lambda,
                                 int64_t rows, int64_t n) {
    const int64_t j = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (j >= n) return;
    double acc = 0;
    for (int64_t r = 0; r < rows; r++) {
        acc += (double)dy[r * n + j] * y[r * n + j];
        dy[r * n + j] *= lambda[j];
    }
    dlambda[j] += (float)acc;
}
extern "C" void tb_cuda_scale_cols_backward(void *ctx, float *dy, float *dlambda, const float *y,
                                            const float *lambda, int64_t rows, int64_t n) {
    tb_cuda *cx = (tb_cuda *)ctx;
    LAUNCH(k_scale_cols_bwd, blocks(n), 256)(dy, dlambda, y, DEVF(lambda), rows, n);
    LAUNCHED();
}

/* Dropout: x[i] *= keep(key, first + i), the CPU's hash (tb_keep_scale, ops.h), so that the same
 * key drops the same elements on either backend. */
__global__ void k_dropout(float *x, int64_t n, uint64_t key, int64_t first, tb_keep_rule r) {
    const int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i < n) x[i] *= tb_keep_scale(key, (uint64_t)(first + i), r);
}
extern "C" void tb_cuda_dropout(void *ctx, float *x, int64_t n, uint64_t key, int64_t first,
                                tb_keep_rule r) {
    tb_cuda *cx = (tb_cuda *)ctx;
    if (n <= 0) return;
    LAUNCH(k_dropout, blocks(n), 256)(x, n, key, first, r);
    LAUNCHED();
}

/* Drop path's factors, drawn on the GPU from the CPU's rule (tb_drop_path_keep): the same step
 * keeps the same rows on either backend, and nothing is copied from the host. */
__global__ void k_draw_keep(float *keep, int64_t n, tb_drop_draws d) {
    const int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i < n) keep[i] = tb_drop_path_keep(&d, i);
}
extern "C" void tb_cuda_draw_keep(void *ctx, float *keep, int64_t n, tb_drop_draws d) {
    tb_cuda *cx = (tb_cuda *)ctx;
    if (n <= 0) return;
    LAUNCH(k_draw_keep, blocks(n), 256)(keep, n, d);
    LAUNCHED();
}

/* ---- pooling, losses ---- */
__global__ void k_mean_rows_bwd(float *dx, const float *dout, int64_t n_seq, int64_t L,
                                int64_t n) {
    const int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; /* (i, j, d) */
    if (e < n_seq * L * n) dx[e] = dout[e / (L * n) * n + e % n] / (float)L;
}
extern "C" void tb_cuda_mean_rows_backward(void *ctx, float *dx, const float *dout, int64_t n_seq,
                                           int64_t L, int64_t n) {
    tb_cuda *cx = (tb_cuda *)ctx;
    if (n_seq * L * n <= 0) return;
    LAUNCH(k_mean_rows_bwd, blocks(n_seq * L * n), 256)(dx, dout, n_seq, L, n);
    LAUNCHED();
}

/* Cross-entropy, one thread per row running the CPU's own row (tb_cross_entropy_row, backend.h):
 * the row's loss to loss[i] (summed on the host in row order), the logits replaced by
 * dL/dlogits. A row of a few hundred classes is too short to split. */
__global__ void k_cross_entropy(float *logits, double *loss, const int64_t *labels, int64_t rows,
                                int64_t n, double eps) {
    const int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i >= rows) return;
    loss[i] = tb_cross_entropy_row(logits + i * n, labels[i], n, rows, eps);
}
/* The sum of n per-row values (device) on the host, in order. */
static double host_sum(tb_cuda *cx, const double *d, int64_t n) {
    double *h = (double *)malloc(sizeof(double) * (size_t)(n > 0 ? n : 1)), total = 0;
    if (!h) {
        tb_cuda_fail(cx, TUBELET_ERR_MEMORY);
        return NAN;
    }
    if (!copy_out(cx, h, d, sizeof(double) * (size_t)n)) total = NAN; /* recorded */
    else
        for (int64_t i = 0; i < n; i++) total += h[i];
    free(h);
    return total;
}
extern "C" double tb_cuda_cross_entropy(void *ctx, float *logits, const int64_t *labels,
                                        int64_t rows, int64_t n, double eps) {
    tb_cuda *cx = (tb_cuda *)ctx;
    double *loss = (double *)tmp(cx, sizeof(double) * (size_t)rows);
    const int64_t *ld = (const int64_t *)tb_cuda_dev(cx, labels);
    if (rows <= 0 || !loss || !ld) return rows <= 0 ? 0 : NAN;
    LAUNCH(k_cross_entropy, blocks(rows), 256)(logits, loss, ld, rows, n, eps);
    LAUNCHED();
    return host_sum(cx, loss, rows);
}

/* ---- the relative-position bias table's gradient ----
 * dtable[rel[i] heads + h] += dbias[h n + i]: several i share a table row, so one thread per head
 * walks i in order (the CPU's order, no atomics). heads threads only: speed work left. */
__global__ void k_bias_lookup_bwd(float *dtable, const float *dbias, const int32_t *rel,
                                  int64_t heads, int64_t n) {
    const int64_t h = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (h >= heads) return;
    for (int64_t i = 0; i < n; i++) dtable[(int64_t)rel[i] * heads + h] += dbias[h * n + i];
}
extern "C" void tb_cuda_bias_lookup_backward(void *ctx, float *dtable, const float *dbias,
                                             const int32_t *rel, int64_t heads, int64_t n) {
    tb_cuda *cx = (tb_cuda *)ctx;
    LAUNCH(k_bias_lookup_bwd, blocks(heads), 256)(dtable, DEVF(dbias), DEVI(rel),
                                                  heads, n);
    LAUNCHED();
}

/* ---- attention with dropout, and attention's backward ----
 * One thread per (group, head, query) or (group, head, key), ATT_T to a block; the grid's y walks
 * the groups (a thread loops over groups beyond 65535), z the heads. Each thread keeps its rows
 * (q, dO and dq; or k, v, dk and dv) in registers (head_dim <= ATT_D) and reads the group's other
 * rows from global memory through the grouping (rows, ragged starts), with Swin's bias and mask
 * added to the scores. The backward is FlashAttention-2's split, without the tiles:
 *   pass Q: per query i, the row's max m_i and sum l_i (recomputed, as the CPU does: nothing is
 *     kept from the forward), delta_i = dO_i . O_i, then dS_ij = P_ij (dP_ij M_ij - delta_i) with
 *     dP = dO V^T and M the dropout mask, dQ_i = scale sum_j dS_ij K_j, and dbias += dS;
 *   pass KV: per key j, dV_j = sum_i P_ij M_ij dO_i and dK_j = scale sum_i dS_ij Q_i from the
 *     statistics pass Q stored (m, l, delta per query and head).
 * No atomics: with a bias gradient to accumulate (Swin), pass Q runs one block column over every
 * group in order, so that each dbias element has one writer and the CPU's order of the sum.
 * Cross-attention (a kv grouping, no bias): group g's keys and values are the kv grouping's
 * group g (gk below; gk = g otherwise), pass KV runs one thread per key of it and writes dk, dv
 * group-major over its members, as the CPU's backward does.
 * Tiles in shared memory and tensor cores (the forward's speed work too) are left to do. */
#define ATT_T 64

/* The row of member j of the group starting at member first. */
__device__ inline int64_t member_row(const tb_grouping &g, int64_t first, int64_t j) {
    return g.rows ? (int64_t)g.rows[first + j] : first + j;
}
__device__ inline int64_t group_first(const tb_grouping &g, int64_t grp) {
    return g.start ? g.start[grp] : grp * g.group_len;
}
__device__ inline int64_t group_size(const tb_grouping &g, int64_t grp) {
    return g.start ? g.start[grp + 1] - g.start[grp] : g.group_len;
}
/* The additive rows of query i (bias and mask; NULL where none). */
__device__ inline void bias_rows(const tb_attn_bias &b, int64_t grp, int h, int64_t L, int64_t i,
                                 const float **brow, const float **mrow) {
    *brow = b.bias ? b.bias + ((int64_t)h * L + i) * L : NULL;
    *mrow = NULL;
    if (b.mask) {
        const int64_t mi = b.mask_index ? b.mask_index[grp % b.n_masks] : grp % b.n_masks;
        *mrow = b.mask + (mi * L + i) * L;
    }
}
/* score of query qr (registers, unscaled) against key row kj */
__device__ inline float score(const float *qr, const float *kj, int hd, float scale,
                              const float *brow, const float *mrow, int64_t j) {
    float s = 0.0f;
    for (int d = 0; d < hd; d++) s += qr[d] * kj[d];
    s *= scale;
    if (brow) s += brow[j];
    if (mrow) s += mrow[j];
    return s;
}
/* The row's max and sum of exp(s - max) over the group's keys (online). */
__device__ inline void row_stats(const float *qr, const float *k, int64_t ld, const tb_grouping &g,
                                 int64_t first, int64_t size, int64_t col, int hd, float scale,
                                 const float *brow, const float *mrow, float *m, float *l) {
    float mx = -INFINITY, sum = 0.0f;
    for (int64_t j = 0; j < size; j++) {
        const float s = score(qr, k + member_row(g, first, j) * ld + col, hd, scale, brow, mrow, j);
        const float mn = fmaxf(mx, s);
        sum = sum * expf(mx - mn) + expf(s - mn);
        mx = mn;
    }
    *m = mx, *l = sum;
}
/* The dropout key of query i's row in (grp, h) (attention.h); 0 without dropout. */
__device__ inline uint64_t drop_row_key(uint64_t key, int drop, int64_t grp, int heads, int h,
                                        int64_t i) {
    return drop ? tb_hash(tb_hash(key, (uint64_t)(grp * heads + h)), (uint64_t)i) : 0;
}

/* Forward with dropout on the probabilities: out_i = sum_j P_ij M_ij V_j, P from the undropped
 * softmax. (Without dropout the table's attention is kernels.cu's flash kernel.) */
__global__ void k_attention_drop(float *out, const float *q, const float *k, const float *v,
                                 int64_t ld, tb_grouping g, tb_grouping gk, int heads, int hd,
                                 float scale, tb_attn_bias bias, int64_t L, uint64_t key,
                                 tb_keep_rule rule) {
    const int h = blockIdx.z;
    const int64_t i = (int64_t)blockIdx.x * ATT_T + threadIdx.x, col = (int64_t)h * hd;
    for (int64_t grp = blockIdx.y; grp < g.n_groups; grp += gridDim.y) {
        const int64_t first = group_first(g, grp), size = group_size(g, grp);
        const int64_t kfirst = group_first(gk, grp), ksize = group_size(gk, grp);
        if (i >= size) continue;
        float qr[ATT_D], acc[ATT_D], m, l;
        const float *qi = q + member_row(g, first, i) * ld + col, *brow, *mrow;
        for (int d = 0; d < hd; d++) qr[d] = qi[d], acc[d] = 0.0f;
        bias_rows(bias, grp, h, L, i, &brow, &mrow);
        row_stats(qr, k, ld, gk, kfirst, ksize, col, hd, scale, brow, mrow, &m, &l);
        const uint64_t rk = drop_row_key(key, 1, grp, heads, h, i);
        for (int64_t j = 0; j < ksize; j++) {
            const int64_t r = member_row(gk, kfirst, j);
            const float p = expf(score(qr, k + r * ld + col, hd, scale, brow, mrow, j) - m) *
                            tb_keep_scale(rk, (uint64_t)j, rule);
            for (int d = 0; d < hd; d++) acc[d] += p * v[r * ld + col + d];
        }
        float *o = out + (first + i) * (int64_t)heads * hd + col;
        for (int d = 0; d < hd; d++) o[d] = acc[d] / l;
    }
}

/* Pass Q of the backward (see above); stats[(member heads + h) 3 + {0, 1, 2}] = m, l, delta. */
__global__ void k_attn_bwd_q(float *dq, int64_t ldd, float *stats, const float *q,
                             const float *k, const float *v, int64_t ld, const float *o,
                             const float *dout, tb_grouping g, tb_grouping gk, int heads, int hd,
                             float scale, tb_attn_bias bias, int64_t L, int drop, uint64_t key,
                             tb_keep_rule rule) {
    const int h = blockIdx.z;
    const int64_t i = (int64_t)blockIdx.x * ATT_T + threadIdx.x, col = (int64_t)h * hd,
                  D = (int64_t)heads * hd;
    for (int64_t grp = blockIdx.y; grp < g.n_groups; grp += gridDim.y) {
        const int64_t first = group_first(g, grp), size = group_size(g, grp);
        const int64_t kfirst = group_first(gk, grp), ksize = group_size(gk, grp);
        if (i >= size) continue;
        float qr[ATT_D], dor[ATT_D], acc[ATT_D], m, l, delta = 0.0f;
        const float *qi = q + member_row(g, first, i) * ld + col, *brow, *mrow;
        const float *oi = o + (first + i) * D + col, *doi = dout + (first + i) * D + col;
        for (int d = 0; d < hd; d++)
            qr[d] = qi[d], dor[d] = doi[d], acc[d] = 0.0f, delta += doi[d] * oi[d];
        bias_rows(bias, grp, h, L, i, &brow, &mrow);
        row_stats(qr, k, ld, gk, kfirst, ksize, col, hd, scale, brow, mrow, &m, &l);
        const uint64_t rk = drop_row_key(key, drop, grp, heads, h, i);
        float *dbrow = bias.dbias ? bias.dbias + ((int64_t)h * L + i) * L : NULL;
        for (int64_t j = 0; j < ksize; j++) {
            const int64_t r = member_row(gk, kfirst, j);
            const float *kj = k + r * ld + col, *vj = v + r * ld + col;
            const float p = expf(score(qr, kj, hd, scale, brow, mrow, j) - m) / l;
            float dp = 0.0f;
            for (int d = 0; d < hd; d++) dp += dor[d] * vj[d];
            const float mk = drop ? tb_keep_scale(rk, (uint64_t)j, rule) : 1.0f;
            const float ds = p * (dp * mk - delta);
            for (int d = 0; d < hd; d++) acc[d] += ds * kj[d];
            if (dbrow) dbrow[j] += ds;
        }
        float *dqi = dq + (first + i) * ldd + col;
        for (int d = 0; d < hd; d++) dqi[d] = acc[d] * scale;
        float *st = stats + ((first + i) * heads + h) * 3;
        st[0] = m, st[1] = l, st[2] = delta;
    }
}

/* Pass KV: one thread per key j of (group, head), the keys' grouping's (gk: g itself, or its kv
 * for cross-attention); dk and dv group-major over gk's members. */
__global__ void k_attn_bwd_kv(float *dk, float *dv, int64_t ldd, const float *stats,
                              const float *q, const float *k, const float *v, int64_t ld,
                              const float *dout, tb_grouping g, tb_grouping gk, int heads, int hd,
                              float scale, tb_attn_bias bias, int64_t L, int drop, uint64_t key,
                              tb_keep_rule rule) {
    const int h = blockIdx.z;
    const int64_t j = (int64_t)blockIdx.x * ATT_T + threadIdx.x, col = (int64_t)h * hd,
                  D = (int64_t)heads * hd;
    for (int64_t grp = blockIdx.y; grp < g.n_groups; grp += gridDim.y) {
        const int64_t first = group_first(g, grp), size = group_size(g, grp);
        const int64_t kfirst = group_first(gk, grp), ksize = group_size(gk, grp);
        if (j >= ksize) continue;
        float kr[ATT_D], vr[ATT_D], ak[ATT_D], av[ATT_D];
        const int64_t rj = member_row(gk, kfirst, j);
        for (int d = 0; d < hd; d++)
            kr[d] = k[rj * ld + col + d], vr[d] = v[rj * ld + col + d], ak[d] = av[d] = 0.0f;
        for (int64_t i = 0; i < size; i++) {
            const float *qi = q + member_row(g, first, i) * ld + col;
            const float *doi = dout + (first + i) * D + col, *st = stats + ((first + i) * heads + h) * 3;
            const float *brow, *mrow;
            bias_rows(bias, grp, h, L, i, &brow, &mrow);
            const float p = expf(score(qi, kr, hd, scale, brow, mrow, j) - st[0]) / st[1];
            float dp = 0.0f;
            for (int d = 0; d < hd; d++) dp += doi[d] * vr[d];
            const float mk =
                drop ? tb_keep_scale(drop_row_key(key, 1, grp, heads, h, i), (uint64_t)j, rule)
                     : 1.0f;
            const float ds = p * (dp * mk - st[2]), pm = p * mk;
            for (int d = 0; d < hd; d++) ak[d] += ds * qi[d], av[d] += pm * doi[d];
        }
        for (int d = 0; d < hd; d++)
            dk[(kfirst + j) * ldd + col + d] = ak[d] * scale,
            dv[(kfirst + j) * ldd + col + d] = av[d];
    }
}

static dim3 att_grid(int64_t L, int64_t n_groups, int heads) {
    return dim3((unsigned)((L + ATT_T - 1) / ATT_T), (unsigned)(n_groups < 65535 ? n_groups : 65535),
                (unsigned)heads);
}
static int att_status(void) {
    return cudaGetLastError() == cudaSuccess ? TUBELET_OK : TUBELET_ERR_UNSUPPORTED;
}

extern "C" int tb_cuda_attention_train(void *ctx, float *out, const float *q, const float *k,
                                       const float *v, int64_t ld, const tb_grouping *g, int heads,
                                       int head_dim, const tb_attn_bias *bias, int bf16,
                                       float *scratch, int n_threads, const tb_attn_dropout *drop) {
    tb_cuda *cx = (tb_cuda *)ctx;
    if (!drop || !(drop->p > 0))
        return tb_cuda_attention(ctx, out, q, k, v, ld, g, heads, head_dim, bias, bf16, scratch,
                                 n_threads, drop);
    tb_grouping gd, kd;
    tb_attn_bias bd;
    const int rc = tb_cuda_attention_args(cx, g, bias, head_dim, &gd, &kd, &bd);
    if (rc) return rc;
    bd.dbias = NULL;
    if (g->n_groups <= 0) return TUBELET_OK;
    LAUNCH(k_attention_drop, att_grid(g->group_len, g->n_groups, heads), ATT_T)(
        out, q, k, v, ld, gd, kd, heads, head_dim, 1.0f / sqrtf((float)head_dim), bd, g->group_len,
        drop->key, tb_keep_rule_make(drop->p));
    return att_status();
}

extern "C" int tb_cuda_attention_backward(void *ctx, float *dq, float *dk, float *dv, int64_t ldd,
                                          const float *q, const float *k, const float *v,
                                          int64_t ld, const float *o, const float *dout,
                                          const tb_grouping *g, int heads, int head_dim,
                                          const tb_attn_bias *bias, float *scratch, int n_threads,
                                          const tb_attn_dropout *drop) {
    tb_cuda *cx = (tb_cuda *)ctx;
    (void)scratch, (void)n_threads; /* statistics in the backend's own buffer */
    tb_grouping gd, kd;
    tb_attn_bias bd;
    const int rc = tb_cuda_attention_args(cx, g, bias, head_dim, &gd, &kd, &bd);
    if (rc) return rc;
    const int64_t members = tb_group_members(g), L = g->group_len;
    if (g->n_groups <= 0 || members <= 0) return TUBELET_OK;
    float *stats = (float *)tmp(cx, sizeof(float) * 3 * (size_t)(members * heads));
    if (!stats) return TUBELET_ERR_MEMORY;
    const int dr = drop && drop->p > 0;
    const uint64_t key = dr ? drop->key : 0;
    const tb_keep_rule rule = tb_keep_rule_make(dr ? drop->p : 0);
    const float scale = 1.0f / sqrtf((float)head_dim);
    /* one block column over all groups when dbias is summed over them (one writer each) */
    const dim3 gq = att_grid(L, bd.dbias ? 1 : g->n_groups, heads);
    LAUNCH(k_attn_bwd_q, gq, ATT_T)(dq, ldd, stats, q, k, v, ld, o, dout, gd, kd, heads,
                                    head_dim, scale, bd, L, dr, key, rule);
    if (att_status()) return TUBELET_ERR_UNSUPPORTED;
    LAUNCH(k_attn_bwd_kv, att_grid(kd.group_len, g->n_groups, heads), ATT_T)(
        dk, dv, ldd, stats, q, k, v, ld, dout, gd, kd, heads, head_dim, scale, bd, L, dr, key,
        rule);
    return att_status();
}

extern "C" int64_t tb_cuda_attention_backward_scratch_floats(void *ctx, int64_t group_len,
                                                             int head_dim, int n_threads) {
    (void)ctx;
    (void)group_len, (void)head_dim, (void)n_threads;
    return 1; /* the statistics live in the backend's own buffer (tmp) */
}
