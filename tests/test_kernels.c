/* Every optimised kernel against its slow reference, on awkward shapes. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "kernels/attention.h"
#include "kernels/backend.h"
#include "kernels/gemm.h"
#include "kernels/lowp.h"
#include "kernels/ops.h"
#include "kernels/qgemm.h"
#include "kernels/ref.h"

static uint64_t rng = 12345;
static float frand(void) { /* uniform in [-1, 1) */
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((rng >> 40) / 8388608.0 - 1.0);
}
static float *rand_buf(long n, float scale) {
    float *p = malloc(sizeof(float) * (size_t)n);
    for (long i = 0; i < n; i++) p[i] = scale * frand();
    return p;
}

static void test_gemm(void) {
    const int shapes[][3] = {{1, 1, 1}, {7, 13, 5}, {64, 33, 129}, {197, 64, 197}, {3, 400, 768}};
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++)
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++) {
                int M = shapes[s][0], N = shapes[s][1], K = shapes[s][2];
                float *A = rand_buf((long)M * K, 1), *B = rand_buf((long)K * N, 1);
                float *C = rand_buf((long)M * N, 1), *R = malloc(sizeof(float) * M * N);
                memcpy(R, C, sizeof(float) * M * N);
                int lda = ta ? M : K, ldb = tb ? K : N;
                tb_gemm(ta, tb, M, N, K, 0.5f, A, lda, B, ldb, 1.0f, C, N);
                tb_gemm_ref(ta, tb, M, N, K, 0.5f, A, lda, B, ldb, 1.0f, R, N);
                double err = check_max_abs_diff(C, R, (long)M * N);
                CHECK(err < 1e-4 * sqrt(K), "gemm %dx%dx%d ta=%d tb=%d: max err %g", M, N, K, ta,
                      tb, err);
                free(A), free(B), free(C), free(R);
            }
}

static void test_exp_and_acts(void) {
    double worst = 0;
    for (int i = -8730; i <= 8830; i++) {
        float x = i * 0.01f, y;
        tb_vexp(&y, &x, 1);
        double ref = exp((double)x), rel = fabs(y - ref) / ref;
        if (rel > worst) worst = rel;
    }
    CHECK(worst < 3e-7, "exp relative error %g", worst);
    /* vector path (length not a multiple of 16) against scalar path */
    float xs[37], ys[37];
    for (int i = 0; i < 37; i++) xs[i] = -50.0f + 3.1f * i;
    tb_vexp(ys, xs, 37);
    int ok = 1;
    for (int i = 0; i < 37; i++) ok &= fabs(ys[i] - exp((double)xs[i])) <= 3e-7 * exp((double)xs[i]);
    CHECK(ok, "vexp tail elements");
    float big = 1000.0f, small = -1000.0f, r;
    tb_vexp(&r, &big, 1);
    CHECK(isinf(r), "exp(1000) = %g, want inf", r);
    tb_vexp(&r, &small, 1);
    CHECK(r == 0.0f, "exp(-1000) = %g, want 0", r);

    for (int a = TB_ACT_GELU; a <= TB_ACT_SILU; a++) {
        const int n = 1003;
        float *x = rand_buf(n, 8), *y = malloc(sizeof(float) * n), *bias = rand_buf(n, 1);
        memcpy(y, x, sizeof(float) * n);
        tb_bias_act(y, bias, 1, n, (tb_act)a);
        double err = 0;
        for (int i = 0; i < n; i++) {
            double ref = tb_act_ref(x[i] + bias[i], (tb_act)a);
            double d = fabs(y[i] - ref) / fmax(1.0, fabs(ref));
            if (d > err) err = d;
        }
        CHECK(err < 1e-6, "activation %s: max error %g", tb_act_name((tb_act)a), err);
        free(x), free(y), free(bias);
    }
    /* the derivatives: the vector path against the scalar tb_act_grad (libm erf, exp, tanh),
     * on a length that leaves a scalar tail, and against a central difference of tb_act_ref */
    for (int a = TB_ACT_GELU; a <= TB_ACT_SILU; a++) {
        const int n = 1003;
        float *h = rand_buf(n, 8), *dy = rand_buf(n, 1), *g = malloc(sizeof(float) * n);
        memcpy(g, dy, sizeof(float) * n);
        tb_act_backward(g, h, 1, n, (tb_act)a);
        double err = 0, fd = 0;
        for (int i = 0; i < n; i++) {
            const double ref = (double)dy[i] * tb_act_grad(h[i], (tb_act)a);
            err = fmax(err, fabs(g[i] - ref) / fmax(1.0, fabs(ref)));
            const double x = h[i], e = 1e-3, /* the kink of relu: skip */
                num = (tb_act_ref((float)(x + e), (tb_act)a) - tb_act_ref((float)(x - e), (tb_act)a)) / (2 * e);
            if (fabs(x) > 2e-3) fd = fmax(fd, fabs(tb_act_grad(h[i], (tb_act)a) - num));
        }
        CHECK(err < 2e-6, "activation backward %s: max error %g", tb_act_name((tb_act)a), err);
        CHECK(fd < 2e-3, "activation derivative %s: max error %g against finite differences",
              tb_act_name((tb_act)a), fd);
        free(h), free(dy), free(g);
    }
    { /* bias gradients: column sums of a strided matrix, added to what is there */
        const int rows = 37, n = 131, ld = 140;
        float *x = rand_buf(rows * ld, 1), *out = rand_buf(n, 1), *ref = malloc(sizeof(float) * n);
        for (int j = 0; j < n; j++) {
            double acc = out[j];
            for (int r = 0; r < rows; r++) acc += x[r * ld + j];
            ref[j] = (float)acc;
        }
        tb_colsum_add(out, x, rows, n, ld);
        CHECK(check_max_abs_diff(out, ref, n) < 1e-5, "column sums: max err %g",
              check_max_abs_diff(out, ref, n));
        free(x), free(out), free(ref);
    }
    /* the reference formulas themselves, at known points */
    CHECK(fabs(tb_act_ref(1.0f, TB_ACT_GELU) - 0.8413447460685429) < 1e-6, "gelu(1)");
    CHECK(fabs(tb_act_ref(1.0f, TB_ACT_GELU_TANH) - 0.8411919906082768) < 1e-6, "gelu_tanh(1)");
    CHECK(fabs(tb_act_ref(1.0f, TB_ACT_QUICK_GELU) - 0.845796346) < 1e-6, "quick_gelu(1)");
    CHECK(tb_act_parse("gelu_fast") == TB_ACT_GELU_TANH && tb_act_parse("nope") == -1,
          "activation names");
}

static void test_layernorm(void) {
    const int rows = 5, n = 77;
    float *x = rand_buf(rows * n, 3), *w = rand_buf(n, 1), *b = rand_buf(n, 1);
    float *y = malloc(sizeof(float) * rows * n);
    for (int i = 0; i < n; i++) x[i] += 100.0f; /* a row with a large mean */
    tb_layernorm(y, n, x, n, w, b, rows, n, 1e-5f);
    double err = 0;
    for (int r = 0; r < rows; r++) {
        double mean = 0, var = 0;
        for (int j = 0; j < n; j++) mean += x[r * n + j];
        mean /= n;
        for (int j = 0; j < n; j++) var += (x[r * n + j] - mean) * (x[r * n + j] - mean);
        var /= n;
        for (int j = 0; j < n; j++) {
            double ref = (x[r * n + j] - mean) / sqrt(var + 1e-5) * w[j] + b[j];
            err = fmax(err, fabs(ref - y[r * n + j]));
        }
    }
    CHECK(err < 1e-5, "layernorm max err %g", err);
    free(x), free(w), free(b), free(y);
}

/* max |a - b| / max(max |b|, 1e-30): the error relative to the reference's scale. */
static double rel_err(const float *a, const float *b, long n) {
    return check_max_abs_diff(a, b, n) / fmax(check_max_abs(b, n), 1e-30);
}

/* The row-wise kernels against their slow references (ref.h), on shapes that leave a vector
 * tail: LayerNorm and its backward (strided rows, a large mean), the linear layer and its
 * backward (accumulating and not), layer scale's backward, the softmax and its derivative. */
static void test_rowwise_refs(void) {
    const int rows = 7, n = 83;
    { /* LayerNorm: forward through row strides, backward adds into what is there */
        const int ld = 96;
        float *x = rand_buf(rows * ld, 3), *w = rand_buf(n, 1), *b = rand_buf(n, 1);
        float *xc = malloc(sizeof(float) * rows * n), *y = malloc(sizeof(float) * rows * ld);
        float *ref = malloc(sizeof(float) * rows * n), *yc = malloc(sizeof(float) * rows * n);
        for (int j = 0; j < n; j++) x[2 * ld + j] += 50.0f; /* a row with a large mean */
        for (int r = 0; r < rows; r++) memcpy(xc + r * n, x + r * ld, sizeof(float) * n);
        tb_layernorm(y, ld, x, ld, w, b, rows, n, 1e-6f);
        tb_layernorm_ref(ref, xc, w, b, rows, n, 1e-6f);
        for (int r = 0; r < rows; r++) memcpy(yc + r * n, y + r * ld, sizeof(float) * n);
        const double ef = rel_err(yc, ref, rows * n);
        CHECK(ef < 2e-6, "layernorm (strided) against the reference: %g", ef);
        float *dy = rand_buf(rows * n, 1), *dx = rand_buf(rows * n, 1), *dw = rand_buf(n, 1),
              *db = rand_buf(n, 1);
        float *rdx = malloc(sizeof(float) * rows * n), *rdw = malloc(sizeof(float) * n),
              *rdb = malloc(sizeof(float) * n);
        memcpy(rdx, dx, sizeof(float) * rows * n), memcpy(rdw, dw, sizeof(float) * n);
        memcpy(rdb, db, sizeof(float) * n);
        tb_layernorm_backward(dx, dy, xc, w, dw, db, rows, n, 1e-6f);
        tb_layernorm_backward_ref(rdx, dy, xc, w, rdw, rdb, rows, n, 1e-6f);
        const double e1 = rel_err(dx, rdx, rows * n), e2 = rel_err(dw, rdw, n),
                     e3 = rel_err(db, rdb, n);
        CHECK(e1 < 1e-5 && e2 < 1e-5 && e3 < 1e-5,
              "layernorm backward against the reference: dx %g, dw %g, db %g", e1, e2, e3);
        /* the reference itself: d/dx_0 of sum(dy * LN(x)) by central differences (rows 0) */
        double fd_err = 0;
        for (int j = 0; j < 5; j++) {
            const float h = 1e-2f, saved = xc[j];
            double f[2];
            for (int k = 0; k < 2; k++) {
                xc[j] = saved + (k ? -h : h);
                tb_layernorm_ref(ref, xc, w, b, 1, n, 1e-6f);
                f[k] = 0;
                for (int i = 0; i < n; i++) f[k] += (double)dy[i] * ref[i];
            }
            xc[j] = saved;
            float g[83] = {0};
            tb_layernorm_backward_ref(g, dy, xc, w, NULL, NULL, 1, n, 1e-6f);
            fd_err = fmax(fd_err, fabs((f[0] - f[1]) / (2 * h) - g[j]));
        }
        CHECK(fd_err < 2e-3, "layernorm reference backward against finite differences: %g",
              fd_err);
        printf("  layernorm vs reference: forward %.2e, backward dx %.2e dw %.2e db %.2e; "
               "reference vs finite differences %.2e\n", ef, e1, e2, e3, fd_err);
        free(x), free(w), free(b), free(xc), free(y), free(ref), free(yc), free(dy), free(dx);
        free(dw), free(db), free(rdx), free(rdw), free(rdb);
    }
    { /* linear: y = x W^T + b, accumulating or not, and its backward */
        const int M = 37, N = 29, K = 53;
        float *x = rand_buf(M * K, 1), *W = rand_buf(N * K, 1), *b = rand_buf(N, 1);
        for (int acc = 0; acc < 2; acc++) {
            float *y = rand_buf(M * N, 1), *ry = malloc(sizeof(float) * M * N);
            memcpy(ry, y, sizeof(float) * M * N);
            tb_linear(y, N, x, W, acc ? NULL : b, M, N, K, acc);
            tb_linear_ref(ry, x, W, acc ? NULL : b, M, N, K, acc);
            const double e = rel_err(y, ry, M * N);
            CHECK(e < 1e-5, "linear (accumulate %d) against the reference: %g", acc, e);
            float *dy = rand_buf(M * N, 1), *dx = rand_buf(M * K, 1), *dW = rand_buf(N * K, 1),
                  *db = rand_buf(N, 1);
            float *rdx = malloc(sizeof(float) * M * K), *rdW = malloc(sizeof(float) * N * K),
                  *rdb = malloc(sizeof(float) * N);
            memcpy(rdx, dx, sizeof(float) * M * K), memcpy(rdW, dW, sizeof(float) * N * K);
            memcpy(rdb, db, sizeof(float) * N);
            tb_linear_backward(dx, K, dW, db, dy, N, x, K, W, M, N, K, acc);
            tb_linear_backward_ref(rdx, rdW, rdb, dy, x, W, M, N, K, acc);
            const double e1 = rel_err(dx, rdx, M * K), e2 = rel_err(dW, rdW, N * K),
                         e3 = rel_err(db, rdb, N);
            CHECK(e1 < 1e-5 && e2 < 1e-5 && e3 < 1e-5,
                  "linear backward (accumulate %d) against the reference: dx %g, dW %g, db %g",
                  acc, e1, e2, e3);
            printf("  linear vs reference (accumulate %d): forward %.2e, backward dx %.2e dW "
                   "%.2e db %.2e\n", acc, e, e1, e2, e3);
            free(y), free(ry), free(dy), free(dx), free(dW), free(db), free(rdx), free(rdW);
            free(rdb);
        }
        free(x), free(W), free(b);
    }
    { /* layer scale: forward exactly y * lambda; backward against the reference */
        float *y = rand_buf(rows * n, 2), *lambda = rand_buf(n, 1), *ys = malloc(sizeof(float) * rows * n);
        memcpy(ys, y, sizeof(float) * rows * n);
        tb_scale_cols(ys, lambda, rows, n);
        int exact = 1;
        for (int r = 0; r < rows; r++)
            for (int j = 0; j < n; j++) exact &= ys[r * n + j] == y[r * n + j] * lambda[j];
        CHECK(exact, "layer scale: y * lambda not exact");
        float *dy = rand_buf(rows * n, 1), *rdy = malloc(sizeof(float) * rows * n);
        float *dl = rand_buf(n, 1), *rdl = malloc(sizeof(float) * n);
        memcpy(rdy, dy, sizeof(float) * rows * n), memcpy(rdl, dl, sizeof(float) * n);
        tb_scale_cols_backward(dy, dl, y, lambda, rows, n);
        tb_scale_cols_backward_ref(rdy, rdl, y, lambda, rows, n);
        const double e1 = rel_err(dy, rdy, rows * n), e2 = rel_err(dl, rdl, n);
        CHECK(e1 < 1e-6 && e2 < 1e-6, "layer scale backward against the reference: dy %g, "
              "dlambda %g", e1, e2);
        free(y), free(lambda), free(ys), free(dy), free(rdy), free(dl), free(rdl);
    }
    { /* softmax: the kernel against the reference (scaled, a vector tail, large values), and
       * the reference backward against finite differences of the kernel */
        const int m = 77;
        float *x = rand_buf(m, 20), *r = malloc(sizeof(float) * m), *k = malloc(sizeof(float) * m);
        for (int sc = 0; sc < 2; sc++) {
            const float scale = sc ? 0.125f : 1.0f;
            memcpy(k, x, sizeof(float) * m), memcpy(r, x, sizeof(float) * m);
            tb_softmax_row(k, m, scale);
            tb_softmax_row_ref(r, m, scale);
            const double e = rel_err(k, r, m);
            CHECK(e < 2e-6, "softmax (scale %g) against the reference: %g", scale, e);
        }
        float *dp = rand_buf(m, 1), *dx = malloc(sizeof(float) * m);
        memcpy(r, x, sizeof(float) * m);
        tb_softmax_row_ref(r, m, 0.125f);
        tb_softmax_backward_ref(dx, r, dp, m);
        double worst = 0;
        for (int j = 0; j < 8; j++) {
            const float h = 1e-2f, saved = x[j];
            double f[2];
            for (int s2 = 0; s2 < 2; s2++) {
                memcpy(k, x, sizeof(float) * m);
                k[j] = saved + (s2 ? -h : h);
                tb_softmax_row(k, m, 1.0f);
                f[s2] = 0;
                for (int i = 0; i < m; i++) f[s2] += (double)dp[i] * k[i];
            }
            memcpy(k, x, sizeof(float) * m);
            tb_softmax_row(k, m, 1.0f);
            float g[77];
            tb_softmax_backward_ref(g, k, dp, m);
            worst = fmax(worst, fabs((f[0] - f[1]) / (2 * h) - g[j]));
        }
        CHECK(worst < 2e-3, "softmax backward against finite differences of the kernel: %g",
              worst);
        free(x), free(r), free(k), free(dp), free(dx);
    }
}

/* Attention with an additive bias per head and masks per group (tb_attn_bias, Video Swin's
 * windows): forward, backward and dbias against the references, with and without dropout;
 * the bias must change the output; groups of several lengths are refused. */
static void check_attention_bias(const char *what, int64_t n_groups, int64_t L, int heads, int hd,
                                 int use_bias, int n_masks, int threads) {
    const int64_t D = (int64_t)heads * hd, ld = 3 * D, rows = n_groups * L;
    const tb_grouping g = {.n_groups = n_groups, .group_len = L};
    float *qkv = rand_buf(rows * ld, 2), *bias = use_bias ? rand_buf(heads * L * L, 1) : NULL;
    float *mask = n_masks ? calloc((size_t)(n_masks * L * L), sizeof(float)) : NULL;
    for (int64_t i = 0; mask && i < n_masks * L * L; i++) { /* keep the diagonal */
        const int64_t r = i / L % L, c = i % L;
        mask[i] = r != c && frand() < 0 ? -100.0f : 0.0f;
    }
    float *dbias = use_bias ? calloc((size_t)(heads * L * L), sizeof(float)) : NULL;
    float *rdbias = use_bias ? calloc((size_t)(heads * L * L), sizeof(float)) : NULL;
    tb_attn_bias ab = {bias, mask, n_masks, dbias, NULL}, rb = {bias, mask, n_masks, rdbias, NULL};
    float *out = malloc(sizeof(float) * rows * D), *ref = malloc(sizeof(float) * rows * D);
    float *plain = malloc(sizeof(float) * rows * D), *dout = rand_buf(rows * D, 1);
    float *dqkv = malloc(sizeof(float) * rows * ld), *rq = malloc(sizeof(float) * rows * ld);
    float *scratch = malloc(sizeof(float) * tb_attention_scratch_floats(L, hd, threads));
    float *bscratch = malloc(sizeof(float) * tb_attention_backward_scratch_floats(L, hd, threads));
    const tb_attn_dropout drop = {0.2f, 0xb1a5};
    for (int k = 0; k < 2; k++) {
        const tb_attn_dropout *d = k ? &drop : NULL;
        int rc = tb_attention_forward_biased(out, qkv, qkv + D, qkv + 2 * D, ld, &g, heads, hd,
                                             &ab, scratch, threads, d);
        tb_attention_ref_biased(ref, qkv, qkv + D, qkv + 2 * D, ld, &g, heads, hd, &ab, d);
        tb_attention_ref(plain, qkv, qkv + D, qkv + 2 * D, ld, &g, heads, hd, d);
        const double ef = check_max_abs_diff(out, ref, rows * D),
                     moved = check_max_abs_diff(plain, ref, rows * D);
        CHECK(rc == 0 && ef < 2e-5, "attention bias %s%s: forward max err %g", what,
              k ? " with dropout" : "", ef);
        CHECK(moved > 1e-3, "attention bias %s: the bias changes the output by only %g", what,
              moved);
        if (rdbias) memset(rdbias, 0, sizeof(float) * heads * L * L);
        tb_attention_backward_ref_biased(rq, rq + D, rq + 2 * D, ld, qkv, qkv + D, qkv + 2 * D,
                                         ld, dout, &g, heads, hd, &rb, d);
        /* the fused kernel (where this build and head size allow it) and the GEMM tiles */
        static const tb_attn_kernel kns[2] = {TB_ATTN_FUSED, TB_ATTN_GEMM};
        for (int kk = 0; kk < 2; kk++) {
            const int fused = kns[kk] == TB_ATTN_FUSED &&
                              tb_attention_backward_kernel_for(L, hd, kns[kk]) == TB_ATTN_FUSED;
            if (kns[kk] == TB_ATTN_FUSED && !fused) continue;
            for (int64_t i = 0; i < rows * ld; i++) dqkv[i] = NAN;
            if (dbias) memset(dbias, 0, sizeof(float) * heads * L * L);
            rc = tb_attention_backward_biased_kernel(dqkv, dqkv + D, dqkv + 2 * D, ld, qkv,
                                                     qkv + D, qkv + 2 * D, ld, out, dout, &g,
                                                     heads, hd, &ab, bscratch, threads, d,
                                                     kns[kk]);
            const double eb = rel_err(dqkv, rq, rows * ld),
                         edb = dbias ? rel_err(dbias, rdbias, heads * L * L) : 0;
            CHECK(rc == 0 && eb < 2e-5 && edb < 2e-5, "attention bias %s%s, %s backward: err "
                  "%g, dbias err %g", what, k ? " with dropout" : "", fused ? "fused" : "GEMM",
                  eb, edb);
            printf("  attention bias %-28s%s forward %.2e (bias moves it %.2f), %s backward "
                   "%.2e, dbias %.2e\n", what, k ? " dropout" : "        ", ef, moved,
                   fused ? "fused" : "GEMM ", eb, edb);
        }
    }
    if (n_masks > 1) { /* mask_index: group g reads mask mask_index[g % n_masks] (shared masks) */
        int32_t *mi = malloc(sizeof(int32_t) * (size_t)n_masks);
        float *perm = malloc(sizeof(float) * (size_t)(n_masks * L * L));
        for (int64_t w = 0; w < n_masks; w++) {
            mi[w] = (int32_t)(n_masks - 1 - w);
            memcpy(perm + w * L * L, mask + mi[w] * L * L, sizeof(float) * (size_t)(L * L));
        }
        const tb_attn_bias ai = {bias, mask, n_masks, NULL, mi}, ap = {bias, perm, n_masks, NULL, NULL};
        int rc = tb_attention_forward_biased(out, qkv, qkv + D, qkv + 2 * D, ld, &g, heads, hd,
                                             &ai, scratch, threads, NULL);
        tb_attention_ref_biased(ref, qkv, qkv + D, qkv + 2 * D, ld, &g, heads, hd, &ap, NULL);
        const double em = check_max_abs_diff(out, ref, rows * D);
        CHECK(rc == 0 && em < 2e-5, "attention bias %s: mask_index max err %g", what, em);
        free(mi), free(perm);
    }
    const int64_t start[3] = {0, L - 1, rows};
    const tb_grouping ragged = {.n_groups = 2, .group_len = L, .start = start};
    CHECK(n_groups != 2 ||
              tb_attention_forward_biased(out, qkv, qkv + D, qkv + 2 * D, ld, &ragged, heads,
                                          hd, &ab, scratch, threads, NULL) == TUBELET_ERR_ARG,
          "attention bias: groups of several lengths accepted");
    free(qkv), free(bias), free(mask), free(dbias), free(rdbias), free(out), free(ref);
    free(plain), free(dout), free(dqkv), free(rq), free(scratch), free(bscratch);
}

static void test_attention_bias(void) {
    check_attention_bias("bias 2x49 hd 16", 2, 49, 3, 16, 1, 0, 2);
    check_attention_bias("masks 4x49 (2 masks) hd 32", 4, 49, 2, 32, 0, 2, 2);
    check_attention_bias("bias+masks 2x20 hd 8", 2, 20, 4, 8, 1, 2, 1); /* small groups */
    check_attention_bias("bias+masks 3x98 hd 12", 3, 98, 2, 12, 1, 3, 2);
    /* the fused backward over several query tiles and key chunks (Swin-T's 8x7x7 windows) */
    check_attention_bias("bias+masks 2x392 hd 32", 2, 392, 2, 32, 1, 2, 2);
}

/* The backward of every kernel (each where it applies, the others then fall back) against the
 * reference from the equations, without and with dropout: dq, dk, dv (group-major, written
 * at row stride ld into a buffer that starts as NaN, so that an unwritten value fails), the
 * error relative to the largest reference gradient. */
static void check_attention_backward(const char *what, const tb_grouping *g, const float *qkv,
                                     int heads, int hd, int threads) {
    static const char *const names[] = {"auto", "small", "fused", "gemm"};
    const int64_t D = (int64_t)heads * hd, ld = 3 * D, GR = tb_group_members(g);
    float *out = malloc(sizeof(float) * GR * D), *dout = rand_buf(GR * D, 1);
    float *dqkv = malloc(sizeof(float) * GR * ld), *ref = malloc(sizeof(float) * GR * ld);
    float *scratch = malloc(sizeof(float) * tb_attention_scratch_floats(g->group_len, hd, threads));
    float *bscratch =
        malloc(sizeof(float) * tb_attention_backward_scratch_floats(g->group_len, hd, threads));
    const tb_attn_dropout drop = {0.25f, 0xd20b};
    for (int k = 0; k < 2; k++) {
        const tb_attn_dropout *d = k ? &drop : NULL;
        tb_attention_forward(out, qkv, qkv + D, qkv + 2 * D, ld, g, heads, hd, scratch, threads, d);
        tb_attention_backward_ref(ref, ref + D, ref + 2 * D, ld, qkv, qkv + D, qkv + 2 * D, ld,
                                  dout, g, heads, hd, d);
        const double big = check_max_abs(ref, GR * ld);
        for (int kn = TB_ATTN_AUTO; kn <= TB_ATTN_GEMM; kn++) {
            for (int64_t i = 0; i < GR * ld; i++) dqkv[i] = NAN;
            tb_attention_backward_kernel(dqkv, dqkv + D, dqkv + 2 * D, ld, qkv, qkv + D,
                                         qkv + 2 * D, ld, out, dout, g, heads, hd, bscratch,
                                         threads, d, (tb_attn_kernel)kn);
            /* the kernel that ran on the longest group: a forced one does not apply everywhere
             * (fused needs AVX-512 and head_dim % 16 == 0, small at most 32 tokens) */
            const int ran = tb_attention_backward_kernel_for(g->group_len, hd, (tb_attn_kernel)kn);
            const double err = check_max_abs_diff(dqkv, ref, GR * ld) / (big > 0 ? big : 1);
            CHECK(err < 2e-5, "attention backward %s (%s asked, %s ran%s): max err %g of %g",
                  what, names[kn], names[ran], k ? ", dropout" : "", err, big);
            if (!k && kn != TB_ATTN_AUTO)
                printf("  attention backward %-22s %-5s asked, %-5s ran: max err %.2e\n", what,
                       names[kn], names[ran], err);
        }
    }
    free(out), free(dout), free(dqkv), free(ref), free(scratch), free(bscratch);
}

/* Without dropout, then with dropout on the probabilities (the reference draws the same masks
 * element by element, so the kernels' tiling of rows and key chunks must index them alike);
 * then the backward. */
static void check_attention(const char *what, const tb_grouping *g, int64_t rows, int heads,
                            int hd, int threads) {
    const int64_t D = (int64_t)heads * hd, ld = 3 * D, GR = tb_group_members(g);
    float *qkv = rand_buf(rows * ld, 2);
    float *out = malloc(sizeof(float) * GR * D), *ref = malloc(sizeof(float) * GR * D);
    float *scratch = malloc(sizeof(float) * tb_attention_scratch_floats(g->group_len, hd, threads));
    const tb_attn_dropout drop = {0.3f, 0x5eed};
    for (int k = 0; k < 2; k++) {
        const tb_attn_dropout *d = k ? &drop : NULL;
        tb_attention_forward(out, qkv, qkv + D, qkv + 2 * D, ld, g, heads, hd, scratch, threads, d);
        tb_attention_ref(ref, qkv, qkv + D, qkv + 2 * D, ld, g, heads, hd, d);
        double err = check_max_abs_diff(out, ref, GR * D);
        CHECK(err < 2e-5, "attention %s%s: max err %g", what, k ? " with dropout" : "", err);
    }
    check_attention_backward(what, g, qkv, heads, hd, threads);
    free(qkv), free(out), free(ref), free(scratch);
}

/* The attention dropout masks themselves: with q = k = 0 every probability is 1/L, and with
 * V = identity (hd = L) the output is O_ij = m_ij / ((1 - p) L), so the mask can be read off.
 * Every value must be 0 or 1, the kept fraction close to 1 - p (within 5 standard deviations),
 * and different heads must draw different masks. Covers the three kernels (small groups, GEMM
 * tiles, fused AVX-512). */
static void check_attention_masks(const char *what, int64_t n_groups, int64_t L, int heads,
                                  float p) {
    const int hd = (int)L;
    const int64_t D = (int64_t)heads * hd, ld = 3 * D, rows = n_groups * L;
    float *qkv = calloc((size_t)(rows * ld), sizeof(float));
    float *out = malloc(sizeof(float) * rows * D);
    float *scratch = malloc(sizeof(float) * tb_attention_scratch_floats(L, hd, 2));
    for (int64_t r = 0; r < rows; r++)
        for (int h = 0; h < heads; h++) qkv[r * ld + 2 * D + h * hd + r % L] = 1; /* v_j = e_j */
    const tb_grouping g = {.n_groups = n_groups, .group_len = L};
    const tb_attn_dropout drop = {p, 77};
    tb_attention_forward(out, qkv, qkv + D, qkv + 2 * D, ld, &g, heads, hd, scratch, 2, &drop);
    int64_t kept = 0, n = rows * D, bad = 0, same = 0;
    for (int64_t i = 0; i < n; i++) {
        const double m = out[i] * (1.0 - p) * (double)L;
        bad += fabs(m) > 1e-4 && fabs(m - 1) > 1e-4;
        kept += m > 0.5;
    }
    for (int64_t r = 0; r < rows; r++) /* head 0 against head 1 */
        for (int j = 0; j < hd; j++) same += (out[r * D + j] > 0) == (out[r * D + hd + j] > 0);
    const double frac = (double)kept / (double)n, sd = sqrt(p * (1 - p) / (double)n);
    CHECK(bad == 0, "attention masks %s: %lld values are not 0 or 1/((1-p)L)", what,
          (long long)bad);
    CHECK(fabs(frac - (1 - p)) < 5 * sd, "attention masks %s: kept %.5f of %lld, expected %.5f "
          "(sd %.5f)", what, frac, (long long)n, 1 - p, sd);
    CHECK(same < rows * hd, "attention masks %s: heads 0 and 1 drew the same mask", what);
    printf("  attention dropout masks %-6s p %.2f: kept %.5f of %lld (1 - p = %.2f, sd %.5f)\n",
           what, p, frac, (long long)n, 1 - p, sd);
    free(qkv), free(out), free(scratch);
}

/* Groups of several lengths (start offsets): forward and backward must give exactly what each
 * group gives alone, as a grouping of one group (no dropout: a lone group keys its masks as group
 * 0); check_attention compares the forward with the reference, with and without dropout. */
static void check_attention_ragged(const char *what, const int64_t *lens, int n_groups, int heads,
                                   int hd, int threads) {
    const int64_t D = (int64_t)heads * hd, ld = 3 * D;
    int64_t start[16], total = 0, Lmax = 0;
    for (int i = 0; i < n_groups; i++) {
        start[i] = total, total += lens[i];
        Lmax = lens[i] > Lmax ? lens[i] : Lmax;
    }
    start[n_groups] = total;
    /* rows: row 0 (a shared "cls") opens every group, the others are distinct, shuffled */
    const int64_t rows = 1 + total - n_groups;
    int32_t *idx = malloc(sizeof(int32_t) * (size_t)total);
    for (int i = 0, next = 1; i < n_groups; i++) {
        idx[start[i]] = 0;
        for (int64_t j = 1; j < lens[i]; j++) idx[start[i] + j] = (int32_t)(rows - next++);
    }
    const tb_grouping g = {.n_groups = n_groups, .group_len = Lmax, .rows = idx, .start = start};
    check_attention(what, &g, rows, heads, hd, threads);
    float *qkv = rand_buf(rows * ld, 5), *dout = rand_buf(total * D, 6);
    float *out = malloc(sizeof(float) * total * D), *dqkv = malloc(sizeof(float) * total * ld);
    float *out1 = malloc(sizeof(float) * Lmax * D), *dqkv1 = malloc(sizeof(float) * Lmax * ld);
    float *scratch = malloc(sizeof(float) * tb_attention_scratch_floats(Lmax, hd, threads));
    float *bscratch =
        malloc(sizeof(float) * tb_attention_backward_scratch_floats(Lmax, hd, threads));
    tb_attention_forward(out, qkv, qkv + D, qkv + 2 * D, ld, &g, heads, hd, scratch, threads, NULL);
    tb_attention_backward(dqkv, dqkv + D, dqkv + 2 * D, ld, qkv, qkv + D, qkv + 2 * D, ld, out,
                          dout, &g, heads, hd, bscratch, threads, NULL);
    double err = 0;
    for (int i = 0; i < n_groups; i++) {
        const tb_grouping one = {.n_groups = 1, .group_len = lens[i], .rows = idx + start[i]};
        tb_attention_forward(out1, qkv, qkv + D, qkv + 2 * D, ld, &one, heads, hd, scratch,
                             threads, NULL);
        tb_attention_backward(dqkv1, dqkv1 + D, dqkv1 + 2 * D, ld, qkv, qkv + D, qkv + 2 * D, ld,
                              out1, dout + start[i] * D, &one, heads, hd, bscratch, threads, NULL);
        err = fmax(err, check_max_abs_diff(out + start[i] * D, out1, (long)(lens[i] * D)));
        err = fmax(err, check_max_abs_diff(dqkv + start[i] * ld, dqkv1, (long)(lens[i] * ld)));
    }
    CHECK(err == 0, "attention %s: groups of several lengths differ from each group alone (%g)",
          what, err);
    free(idx), free(qkv), free(dout), free(out), free(dqkv), free(out1), free(dqkv1);
    free(scratch), free(bscratch);
}

/* Cross-attention (a grouping with kv): group g's queries attend over kv's group g, of another
 * length. The kernels against the reference, forward and backward with every backward kernel
 * and with dropout; queries that are a subset of the keys against self-attention over the keys
 * (so the reference's cross form is checked against the self-attention paths); a bias refused. */
static void check_cross(const char *what, int64_t G, int64_t Lq, int64_t Lk, int heads, int hd,
                        int ragged) {
    const int64_t D = (int64_t)heads * hd, ld = 3 * D, rows = G * (Lq + Lk) + 5;
    float *qkv = rand_buf(rows * ld, 2);
    int32_t *qr = malloc(sizeof(int32_t) * G * Lq), *kr = malloc(sizeof(int32_t) * G * Lk);
    int64_t qs[9], ks[9], Mq = 0, Mk = 0;
    for (int64_t g = 0; g < G; g++) { /* ragged: group g has fewer members, at least one */
        const int64_t nq = ragged ? 1 + (Lq - 1) * (g + 1) / G : Lq;
        const int64_t nk = ragged ? 1 + (Lk - 1) * (G - g) / G : Lk;
        qs[g] = Mq, ks[g] = Mk;
        for (int64_t i = 0; i < nq; i++) qr[Mq++] = (int32_t)((g * 7 + i * 3) % rows);
        for (int64_t j = 0; j < nk; j++) kr[Mk++] = (int32_t)(rows - 1 - (g * 5 + j * 2) % rows);
    }
    qs[G] = Mq, ks[G] = Mk;
    const tb_grouping kv = {.n_groups = G, .group_len = Lk, .rows = kr, .start = ragged ? ks : NULL};
    const tb_grouping g = {.n_groups = G, .group_len = Lq, .rows = qr, .start = ragged ? qs : NULL,
                           .kv = &kv};
    float *out = malloc(sizeof(float) * Mq * D), *ref = malloc(sizeof(float) * Mq * D);
    float *dout = rand_buf(Mq * D, 1), *got = malloc(sizeof(float) * (Mq + 2 * Mk) * D);
    float *want = malloc(sizeof(float) * (Mq + 2 * Mk) * D);
    float *scratch = malloc(sizeof(float) * tb_attention_scratch_floats(tb_group_longest(&g), hd, 2));
    float *bscratch =
        malloc(sizeof(float) * tb_attention_backward_scratch_floats(tb_group_longest(&g), hd, 2));
    const tb_attn_dropout drop = {0.2f, 0xc055};
    for (int k = 0; k < 2; k++) {
        const tb_attn_dropout *d = k ? &drop : NULL;
        tb_attention_forward(out, qkv, qkv + D, qkv + 2 * D, ld, &g, heads, hd, scratch, 2, d);
        tb_attention_ref(ref, qkv, qkv + D, qkv + 2 * D, ld, &g, heads, hd, d);
        CHECK(check_max_abs_diff(out, ref, Mq * D) < 2e-5, "cross-attention %s%s: forward %g",
              what, k ? " (dropout)" : "", check_max_abs_diff(out, ref, Mq * D));
        tb_attention_backward_ref(want, want + Mq * D, want + (Mq + Mk) * D, D, qkv, qkv + D,
                                  qkv + 2 * D, ld, dout, &g, heads, hd, d);
        const double big = check_max_abs(want, (Mq + 2 * Mk) * D);
        for (int kn = TB_ATTN_AUTO; kn <= TB_ATTN_GEMM; kn++) {
            for (int64_t i = 0; i < (Mq + 2 * Mk) * D; i++) got[i] = NAN;
            tb_attention_backward_kernel(got, got + Mq * D, got + (Mq + Mk) * D, D, qkv, qkv + D,
                                         qkv + 2 * D, ld, out, dout, &g, heads, hd, bscratch, 2,
                                         d, (tb_attn_kernel)kn);
            const double err = check_max_abs_diff(got, want, (Mq + 2 * Mk) * D) / (big > 1 ? big : 1);
            CHECK(err < 2e-5, "cross-attention %s%s: backward kernel %d, %g", what,
                  k ? " (dropout)" : "", kn, err);
        }
    }
    const tb_attn_bias bias = {0};
    CHECK(tb_attention_forward_biased(out, qkv, qkv + D, qkv + 2 * D, ld, &g, heads, hd, &bias,
                                      scratch, 2, NULL) == TUBELET_ERR_ARG,
          "cross-attention %s: a bias table (L x L) is refused", what);
    if (!ragged) { /* queries = the first Lq keys of each group: self-attention's rows */
        int32_t *sub = malloc(sizeof(int32_t) * G * Lq);
        for (int64_t gi = 0; gi < G; gi++)
            for (int64_t i = 0; i < Lq && i < Lk; i++) sub[gi * Lq + i] = kr[gi * Lk + i];
        if (Lq <= Lk) {
            const tb_grouping gs = {.n_groups = G, .group_len = Lq, .rows = sub, .kv = &kv};
            float *self = malloc(sizeof(float) * Mk * D);
            tb_attention_forward(out, qkv, qkv + D, qkv + 2 * D, ld, &gs, heads, hd, scratch, 2,
                                 NULL);
            tb_attention_forward(self, qkv, qkv + D, qkv + 2 * D, ld, &kv, heads, hd, scratch, 2,
                                 NULL);
            double err = 0;
            for (int64_t gi = 0; gi < G; gi++)
                err = fmax(err, check_max_abs_diff(out + gi * Lq * D, self + gi * Lk * D,
                                                   (long)(Lq * D)));
            CHECK(err < 2e-5, "cross-attention %s: queries among the keys differ from "
                  "self-attention by %g", what, err);
            free(self);
        }
        free(sub);
    }
    free(qkv), free(qr), free(kr), free(out), free(ref), free(dout), free(got), free(want);
    free(scratch), free(bscratch);
}

static void test_attention_cross(void) {
    check_cross("pooler 1 x 50", 3, 1, 50, 2, 16, 0);  /* V-JEPA 2's attentive probe */
    check_cross("small 5 x 7", 4, 5, 7, 3, 8, 0);
    check_cross("40 x 3", 2, 40, 3, 2, 32, 0);
    check_cross("33 x 70 hd 24", 2, 33, 70, 2, 24, 0); /* the GEMM tiles */
    check_cross("70 x 140 hd 64", 1, 70, 140, 2, 64, 0);
    check_cross("ragged 9 x 45", 3, 9, 45, 2, 16, 1);
}

static void test_attention(void) {
    /* joint: 2 sequences of 300 tokens (more than one query tile), 3 heads of 8 */
    tb_grouping joint = {.n_groups = 2, .group_len = 300};
    check_attention("joint 2x300", &joint, 600, 3, 8, 2);
    tb_grouping big = {.n_groups = 1, .group_len = 2100}; /* more rows than one score tile holds */
    check_attention("joint 1x2100", &big, 2100, 1, 4, 2);
    /* head sizes the fused AVX-512 path takes (multiples of 16), with odd group lengths */
    tb_grouping j197 = {.n_groups = 2, .group_len = 197};
    check_attention("joint 2x197 hd 64", &j197, 394, 2, 64, 2);
    tb_grouping j77 = {.n_groups = 1, .group_len = 77};
    check_attention("joint 1x77 hd 80", &j77, 77, 2, 80, 1);
    check_attention("joint 1x77 hd 48", &j77, 77, 1, 48, 1);
    check_attention("joint 1x77 hd 16", &j77, 77, 1, 16, 1);
    /* the edges of the backward kernels: the small-group bound (32, 33), one key chunk exactly
     * (128), query tiles of 48 plus one row (49), a partial last chunk (127) */
    const int64_t lens[] = {32, 33, 49, 127, 128};
    for (int i = 0; i < 5; i++) {
        char name[48];
        tb_grouping gl = {.n_groups = 2, .group_len = lens[i]};
        snprintf(name, sizeof name, "joint 2x%lld hd 32", (long long)lens[i]);
        check_attention(name, &gl, 2 * lens[i], 2, 32, 2);
    }
    tb_grouping j9 = {.n_groups = 3, .group_len = 9};
    check_attention("joint 3x9 hd 64", &j9, 27, 2, 64, 2);
    tb_grouping one = {.n_groups = 5, .group_len = 1};
    check_attention("single-token groups", &one, 5, 2, 4, 1);
    /* TimeSformer-style: B=2, N=6 positions, T=3 frames, cls at row 0 of each clip */
    const int B = 2, N = 6, T = 3, S = 1 + N * T;
    int32_t trows[2 * 6 * 3], srows[2 * 3 * 7];
    for (int b = 0; b < B; b++)
        for (int n = 0; n < N; n++)
            for (int t = 0; t < T; t++) trows[(b * N + n) * T + t] = b * S + 1 + n * T + t;
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            srows[(b * T + t) * (N + 1)] = b * S;
            for (int n = 0; n < N; n++) srows[(b * T + t) * (N + 1) + 1 + n] = b * S + 1 + n * T + t;
        }
    tb_grouping time = {.n_groups = B * N, .group_len = T, .rows = trows};
    tb_grouping space = {.n_groups = B * T, .group_len = N + 1, .rows = srows};
    check_attention("time groups", &time, B * S, 4, 5, 2);
    check_attention("space groups with shared cls", &space, B * S, 4, 5, 2);
    /* groups of several lengths: small-group loops, GEMM tiles and the fused kernel in one call */
    const int64_t ragged[] = {3, 40, 1, 77, 20, 33};
    check_attention_ragged("ragged hd 16", ragged, 6, 2, 16, 2);
    check_attention_ragged("ragged hd 5", ragged, 6, 3, 5, 2);
    const int64_t small[] = {4, 6, 4, 9, 2};
    check_attention_ragged("ragged small", small, 5, 2, 8, 1);
    check_attention_masks("small", 64, 20, 4, 0.3f);
    check_attention_masks("gemm", 16, 40, 4, 0.5f);  /* hd 40: not a multiple of 16 */
    check_attention_masks("fused", 8, 160, 2, 0.1f); /* hd 160, two key chunks */
}

/* bf16 attention (reduced-precision inference). The kernel rounds Q / sqrt(hd), K, V and the
 * probabilities to bf16; the input is made of values it keeps exactly (q = bf16(q s) / s, k and
 * v bf16), so that only the probabilities' rounding remains: each is off by <= 2^-8 relative
 * (8 significant bits), the output by <= 2^-8 max |v| (plus f32 rounding) from the
 * double-precision reference on the same input. Where this build has AVX512-BF16 and the fused kernel applies (groups longer than
 * 32, head_dim % 16 == 0) the result must differ from the f32 kernel's, so that a dispatch that
 * quietly ran f32 fails; elsewhere it must be the f32 kernel's exactly. */
static void check_attention_bf16(const char *what, const tb_grouping *g, int64_t rows, int heads,
                                 int hd, int threads) {
    const int64_t D = (int64_t)heads * hd, ld = 3 * D, GR = tb_group_members(g);
    const float s = 1.0f / sqrtf((float)hd);
    float *qkv = rand_buf(rows * ld, 2);
    double vmax = 0;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < ld; c++) {
            float *x = &qkv[r * ld + c];
            *x = c < D ? tb_f32_from_bf16(tb_bf16_from_f32(*x * s)) / s
                       : tb_f32_from_bf16(tb_bf16_from_f32(*x));
            if (c >= 2 * D) vmax = fmax(vmax, fabs(*x));
        }
    float *out = malloc(sizeof(float) * GR * D), *ref = malloc(sizeof(float) * GR * D);
    float *f32 = malloc(sizeof(float) * GR * D);
    float *scratch = malloc(sizeof(float) * tb_attention_scratch_floats(g->group_len, hd, threads));
    for (int64_t i = 0; i < GR * D; i++) out[i] = NAN;
    tb_attention_forward_bf16(out, qkv, qkv + D, qkv + 2 * D, ld, g, heads, hd, scratch, threads);
    tb_attention_forward(f32, qkv, qkv + D, qkv + 2 * D, ld, g, heads, hd, scratch, threads, NULL);
    tb_attention_ref(ref, qkv, qkv + D, qkv + 2 * D, ld, g, heads, hd, NULL);
    const double bound = vmax * (1.0 / 256 + 1e-5);
    const double err = check_max_abs_diff(out, ref, GR * D);
    const double vs_f32 = check_max_abs_diff(out, f32, GR * D);
    const int bf16_ran = tb_attention_has_bf16() && g->group_len > 32 && hd % 16 == 0;
    CHECK(err <= bound, "attention bf16 %s: max err %g > bound %g", what, err, bound);
    CHECK(bf16_ran ? vs_f32 > 0 : vs_f32 == 0, "attention bf16 %s: %s the f32 kernel (diff %g)",
          what, bf16_ran ? "same as" : "differs from", vs_f32);
    printf("  attention bf16 %-22s max err %.2e (bound %.2e; f32 kernel %.2e)%s\n", what, err,
           bound, check_max_abs_diff(f32, ref, GR * D), bf16_ran ? "" : " [f32 kernel ran]");
    free(qkv), free(out), free(ref), free(f32), free(scratch);
}

static void test_attention_bf16(void) {
    printf("  attention bf16 kernel: %s\n", tb_attention_bf16_kernel());
    printf("  attention bf16: %s\n", tb_attention_has_bf16() ? "AVX512-BF16 kernel"
                                                             : "no AVX512-BF16 in this build");
    /* a partial last key chunk with an odd count (197), several query tiles, every column
     * block width the P V kernel has (hd 64: 4 blocks; 48: 3; 32: 2; 16: 1; 80: 4 + 1) */
    tb_grouping j197 = {.n_groups = 2, .group_len = 197};
    check_attention_bf16("joint 2x197 hd 64", &j197, 394, 2, 64, 2);
    tb_grouping j300 = {.n_groups = 1, .group_len = 300};
    check_attention_bf16("joint 1x300 hd 48", &j300, 300, 2, 48, 2);
    check_attention_bf16("joint 1x300 hd 32", &j300, 300, 1, 32, 1);
    check_attention_bf16("joint 1x300 hd 16", &j300, 300, 3, 16, 2);
    tb_grouping j129 = {.n_groups = 1, .group_len = 129};
    check_attention_bf16("joint 1x129 hd 80", &j129, 129, 2, 80, 1);
    /* shuffled rows of several lengths (index table) and small groups (f32 kernel) */
    const int64_t lens[] = {40, 3, 77, 33, 128};
    int64_t start[6] = {0};
    for (int i = 0; i < 5; i++) start[i + 1] = start[i] + lens[i];
    int32_t idx[281];
    for (int i = 0; i < 281; i++) idx[i] = (int32_t)((i * 97) % 281);
    tb_grouping ragged = {.n_groups = 5, .group_len = 128, .rows = idx, .start = start};
    check_attention_bf16("ragged shuffled hd 32", &ragged, 281, 2, 32, 2);
    tb_grouping small = {.n_groups = 4, .group_len = 8};
    check_attention_bf16("small groups hd 64", &small, 32, 2, 64, 2);
    check_attention_bf16("joint 1x129 hd 40", &j129, 129, 1, 40, 2);
}

/* bf16 rounding: to nearest, ties to even, NaN stays NaN. */
static void test_bf16_rounding(void) {
    const float one_ulp = 1.0f / 128; /* bf16 keeps 7 stored mantissa bits */
    CHECK(tb_f32_from_bf16(tb_bf16_from_f32(1.0f + one_ulp / 2)) == 1.0f, "tie to even (down)");
    CHECK(tb_f32_from_bf16(tb_bf16_from_f32(1.0f + 1.5f * one_ulp)) == 1.0f + 2 * one_ulp,
          "tie to even (up)");
    CHECK(tb_f32_from_bf16(tb_bf16_from_f32(1.0f + 0.6f * one_ulp)) == 1.0f + one_ulp,
          "round to nearest");
    CHECK(tb_f32_from_bf16(tb_bf16_from_f32(-3.0f)) == -3.0f, "exact value");
    CHECK(isnan(tb_f32_from_bf16(tb_bf16_from_f32(NAN))), "NaN");
}

/* tb_qlinear against the exact product, within a bound derived from the format:
 *   fp32: packed weights, f32 accumulation only (K 2^-23);
 *   bf16: each product of two values rounded to 8 significant bits (unit roundoff 2^-8 each)
 *         is off by <= 2^-7 + 2^-16 of |x w|, plus f32 accumulation (K 2^-23);
 *   int8: |x w - x' w'| <= |x| s_w / 2 + (|w| + s_w / 2) s_x, s_w the channel's weight step,
 *         s_x the activations' (s_x, not s_x / 2: the zero point's rounding may clip an end).
 * The portable path (rounded values through sgemm) gives the same to f32 rounding. Strided
 * output, bias and accumulation included. */
static double check_qlinear(int prec, int native, dnnl_engine_t eng, int M, int N, int K, int bias,
                          int acc) {
    const char *pn = prec == TB_PREC_FP32 ? "fp32" : prec == TB_PREC_BF16 ? "bf16" : "int8";
    const int ldy = N + 3;
    tb_err e = {{0}};
    float *x = rand_buf((long)M * K, 2), *W = rand_buf((long)N * K, 0.5f), *b = rand_buf(N, 1);
    float *y = rand_buf((long)M * ldy, 1), *y0 = malloc(sizeof(float) * (size_t)(M * ldy));
    float *yr = malloc(sizeof(float) * (size_t)(M * ldy));
    memcpy(y0, y, sizeof(float) * (size_t)(M * ldy));
    memcpy(yr, y, sizeof(float) * (size_t)(M * ldy));
    tb_qweight q, qr;
    tb_lowp_ctx *c = NULL, *cr = NULL;
    int ok = !tb_qweight_init(&q, eng, W, N, K, prec, native, &e) &&
             !tb_qweight_init(&qr, eng, W, N, K, prec, 0, &e) &&
             !tb_lowp_ctx_new(&c, eng, native, (int64_t)M * K, N, (int64_t)N * K, &e) &&
             !tb_lowp_ctx_new(&cr, eng, 0, (int64_t)M * K, N, (int64_t)N * K, &e);
    CHECK(ok, "%s qlinear setup: %s", pn, e.msg);
    if (!ok) return 0;
    tb_qlinear(c, y, ldy, x, &q, bias ? b : NULL, M, acc, -1);
    tb_qlinear(cr, yr, ldy, x, &qr, bias ? b : NULL, M, acc, -1);
    float sx = 1;
    int32_t zx;
    tb_quant_u8_params(x, (long)M * K, &sx, &zx);
    double worst = 0, worst_paths = 0;
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double exact = (bias ? b[j] : 0) + (acc ? y0[i * ldy + j] : 0), mag = 0, bound = 0;
            float amax = 0;
            for (int k = 0; k < K; k++) amax = fabsf(W[j * K + k]) > amax ? fabsf(W[j * K + k]) : amax;
            const double sw = amax / (prec == TB_PREC_INT8 ? tb_int8_weight_max(native) : 127.0);
            for (int k = 0; k < K; k++) {
                double xv = x[i * K + k], wv = W[j * K + k];
                exact += xv * wv;
                mag += fabs(xv * wv);
                if (prec == TB_PREC_INT8) bound += fabs(xv) * sw / 2 + (fabs(wv) + sw / 2) * sx;
            }
            bound += mag * (prec == TB_PREC_BF16 ? 1.0 / 128 + 1.0 / 65536 : 0) +
                     (mag + fabs(exact)) * (K + 4) * 1.2e-7;
            double err = fabs(y[i * ldy + j] - exact), dp = fabs(y[i * ldy + j] - yr[i * ldy + j]);
            worst = err / bound > worst ? err / bound : worst;
            worst_paths = dp / ((mag + fabs(exact) + 1) * (K + 4) * 1.2e-7) > worst_paths
                              ? dp / ((mag + fabs(exact) + 1) * (K + 4) * 1.2e-7)
                              : worst_paths;
        }
    CHECK(worst <= 1, "%s qlinear %dx%dx%d (native %d, bias %d, acc %d): error %.2f x the bound",
          pn, M, N, K, native, bias, acc, worst);
    /* the paths round the weights alike but for AVX2's int8 (7 bits natively, 8 portably) */
    if (prec != TB_PREC_INT8 || tb_int8_weight_max(native) == tb_int8_weight_max(0))
        CHECK(worst_paths <= 1, "%s qlinear %dx%dx%d: the two paths differ by %.2f x f32 rounding",
              pn, M, N, K, worst_paths);
    for (int i = 0; i < M; i++) /* the padding of each row is untouched */
        for (int j = N; j < ldy; j++)
            CHECK(y[i * ldy + j] == y0[i * ldy + j], "%s qlinear wrote past a row", pn);
    tb_qweight_free(&q), tb_qweight_free(&qr);
    tb_lowp_ctx_free(c), tb_lowp_ctx_free(cr);
    free(x), free(W), free(b), free(y), free(y0), free(yr);
    return worst;
}

/* The activation in the product's epilogue (oneDNN's eltwise post-op where it has the function,
 * else our pass after the product): equal, to f32 rounding of the activation, to the product
 * followed by tb_act_ref on every value. */
static void check_qlinear_act(int prec, int native, dnnl_engine_t eng, tb_act act) {
    const int M = 37, N = 96, K = 64;
    tb_err e = {{0}};
    float *x = rand_buf((long)M * K, 2), *W = rand_buf((long)N * K, 0.5f), *b = rand_buf(N, 1);
    float *y = malloc(sizeof(float) * M * N), *z = malloc(sizeof(float) * M * N);
    tb_qweight q;
    tb_lowp_ctx *c = NULL;
    int ok = !tb_qweight_init(&q, eng, W, N, K, prec, native, &e) &&
             !tb_lowp_ctx_new(&c, eng, native || prec == TB_PREC_FP32, (int64_t)M * K, N,
                              (int64_t)N * K, &e);
    CHECK(ok, "qlinear act setup: %s", e.msg);
    if (ok) {
        tb_qlinear(c, y, N, x, &q, b, M, 0, (int)act);
        tb_qlinear(c, z, N, x, &q, b, M, 0, -1);
        double worst = 0;
        for (int i = 0; i < M * N; i++) {
            const double want = tb_act_ref(z[i], act);
            worst = fmax(worst, fabs(y[i] - want) / (1e-6 * (1 + fabs(want))));
        }
        CHECK(worst <= 2, "qlinear (precision %d, native %d) activation %d: off by %.2f x 1e-6",
              prec, native, (int)act, worst);
    }
    tb_qweight_free(&q);
    tb_lowp_ctx_free(c);
    free(x), free(W), free(b), free(y), free(z);
}

static void test_qlinear(void) {
    dnnl_engine_t eng;
    CHECK(dnnl_engine_create(&eng, dnnl_cpu, 0) == dnnl_success, "oneDNN engine");
    const int shapes[][3] = {{1, 1, 1}, {7, 13, 5}, {64, 33, 129}, {197, 64, 197}, {3, 400, 768},
                             {300, 96, 1536}};
    static const char *const pn[] = {"fp32 packed", "bf16", "int8"};
    for (int prec = TB_PREC_FP32; prec <= TB_PREC_INT8; prec++) {
        const int native = tb_lowp_cpu_has(prec); /* else only the portable path is tested */
        printf("  %s: %s path\n", pn[prec],
               !native ? "portable only (CPU lacks the instructions)"
               : prec == TB_PREC_INT8 && tb_int8_weight_max(1) == 63 ? "our AVX2 kernel (qgemm.c)"
                                                                      : "oneDNN matmul");
        for (int act = TB_ACT_GELU; act <= TB_ACT_SILU; act++) {
            check_qlinear_act(prec, native, eng, (tb_act)act);
            if (native && prec != TB_PREC_FP32) check_qlinear_act(prec, 0, eng, (tb_act)act);
        }
        double worst = 0;
        for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++)
            for (int v = 0; v < 3; v++) {
                double w = check_qlinear(prec, native, eng, shapes[s][0], shapes[s][1],
                                         shapes[s][2], v != 1, v == 2);
                worst = w > worst ? w : worst;
            }
        printf("  %s qlinear: worst error %.2f of the bound\n", pn[prec], worst);
    }
    if (tb_lowp_cpu_has(TB_PREC_INT8) && tb_int8_weight_max(1) == 63) {
        /* AVX2 without VNNI: oneDNN's int8 kernel, kept for comparison, as well as ours */
        double worst = 0;
        for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++)
            for (int v = 0; v < 3; v++) {
                double w = check_qlinear(TB_PREC_INT8, TB_INT8_ONEDNN, eng, shapes[s][0],
                                         shapes[s][1], shapes[s][2], v != 1, v == 2);
                worst = w > worst ? w : worst;
            }
        printf("  int8 qlinear (oneDNN's AVX2 kernel): worst error %.2f of the bound\n", worst);
    }
    dnnl_engine_destroy(eng);
}

/* The AVX2 int8 kernel (qgemm.c) against its scalar reference: the sums are exact integers and
 * the epilogue the same fmaf, so the outputs must be equal, on shapes that are not multiples of
 * the 6 x 16 block or of the 4-byte groups (K odd), with a strided output and accumulation (with
 * GELU in the epilogue: equal to the vector GELU's accuracy, and the padding untouched). And
 * its quantisation of activations equals the scalar formula, padding zeroed. */
static void test_qgemm(void) {
    if (!tb_qgemm_has_avx2()) {
        printf("  qgemm: skipped (no AVX2)\n");
        return;
    }
    const int shapes[][3] = {{1, 1, 1},    {5, 17, 3},    {6, 16, 4},    {7, 33, 13},
                             {13, 47, 129}, {61, 250, 767}, {100, 31, 2049}, {1568 / 8, 400, 768}};
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++)
        for (int acc = 0; acc < 2; acc++) {
            const int M = shapes[s][0], N = shapes[s][1], K = shapes[s][2], ldy = N + 5;
            const int64_t lda = tb_qgemm_lda(K);
            uint8_t *xq = calloc((size_t)(M * lda), 1);
            int8_t *w = malloc((size_t)(N * K)), *pk = tb_alloc(tb_qgemm_pack_bytes(N, K));
            float *sc = rand_buf(N, 0.01f), *off = rand_buf(N, 3), *y = rand_buf((long)M * ldy, 1);
            float *yr = malloc(sizeof(float) * (size_t)(M * ldy));
            for (int i = 0; i < M; i++) /* the extremes often: 255 x 63 pairs must not saturate */
                for (int k = 0; k < K; k++)
                    xq[i * lda + k] = (uint8_t)(frand() > 0.5f ? 255 : (frand() + 1) * 127.9f);
            for (int i = 0; i < N * K; i++)
                w[i] = (int8_t)(frand() > 0.6f ? 63 : frand() < -0.6f ? -63 : frand() * 63.9f);
            memcpy(yr, y, sizeof(float) * (size_t)(M * ldy));
            tb_qgemm_pack(pk, w, N, K);
            tb_qgemm(y, ldy, xq, lda, pk, sc, off, M, N, K, acc, -1);
            tb_qgemm_ref(yr, ldy, xq, lda, w, sc, off, M, N, K, acc, -1);
            int bad = 0;
            for (int i = 0; i < M * ldy; i++) bad += y[i] != yr[i];
            CHECK(!bad, "qgemm %dx%dx%d (acc %d): %d outputs differ from the reference", M, N, K,
                  acc, bad);
            if (!acc) { /* GELU in the epilogue: the vector GELU against erff's, to 2e-6 */
                tb_qgemm(y, ldy, xq, lda, pk, sc, off, M, N, K, 0, TB_ACT_GELU);
                tb_qgemm_ref(yr, ldy, xq, lda, w, sc, off, M, N, K, 0, TB_ACT_GELU);
                double worst = 0;
                for (int i = 0; i < M * ldy; i++)
                    worst = fmax(worst, fabs(y[i] - yr[i]) / (1e-6 * (1 + fabs(yr[i]))));
                CHECK(worst <= 2, "qgemm %dx%dx%d with GELU: off by %.2f x 1e-6", M, N, K, worst);
            }
            free(xq), free(w), tb_free(pk), free(sc), free(off), free(y), free(yr);
        }
    /* quantisation: AVX2 rows against the scalar formula */
    const int M = 9, K = 75;
    const int64_t lda = tb_qgemm_lda(K);
    float *x = rand_buf(M * K, 3);
    x[5] = 1e30f, x[6] = -1e30f; /* static int8: values far beyond the range saturate */
    uint8_t *q = malloc((size_t)(M * lda));
    memset(q, 0x55, (size_t)(M * lda));
    const float scale = 0.0173f;
    const int32_t zp = 131;
    tb_qgemm_quant(q, lda, x, M, K, scale, zp);
    int bad = 0;
    for (int i = 0; i < M; i++)
        for (int64_t k = 0; k < lda; k++) {
            float v = k < K ? nearbyintf(x[i * K + k] * (1.0f / scale)) + (float)zp : 0;
            bad += q[i * lda + k] != (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
        }
    CHECK(!bad, "qgemm quantisation: %d values differ from the scalar formula", bad);
    free(x), free(q);
}

/* The CPU table's optimiser entries against the loops train/optim.c ran before they were
 * entries, bit for bit (training runs repeat earlier runs exactly): the global norm's one running
 * sum over the tensors (one skipped), and the AdamW update on a tensor large enough to be
 * threaded. */
static void test_optimiser(void) {
    const int64_t n[3] = {70000, 33, 1000};
    float *x[3] = {rand_buf(n[0], 1), rand_buf(n[1], 5), rand_buf(n[2], 0.01f)};
    const float *xs[3] = {x[0], NULL, x[2]};
    double want = 0;
    for (int i = 0; i < 3; i++)
        for (int64_t j = 0; i != 1 && j < n[i]; j++) want += (double)x[i][j] * x[i][j];
    const double got = tb_cpu_kernels.sum_squares(NULL, xs, n, 3);
    CHECK(got == want, "sum_squares %.17g, the old loop %.17g", got, want);
    const int64_t k = n[0];
    float *w = rand_buf(k, 0.5f), *m = rand_buf(k, 0.01f), *v = rand_buf(k, 1e-3f);
    for (int64_t j = 0; j < k; j++) v[j] = fabsf(v[j]);
    float *w2 = malloc(sizeof(float) * k), *m2 = malloc(sizeof(float) * k);
    float *v2 = malloc(sizeof(float) * k);
    memcpy(w2, w, sizeof(float) * k), memcpy(m2, m, sizeof(float) * k);
    memcpy(v2, v, sizeof(float) * k);
    const double lri = 3e-3 * 0.75f, wd = 0.05, b1 = 0.9, b2 = 0.999, eps = 1e-8, gs = 0.37;
    const double c1 = 1 - pow(b1, 3.0), c2 = 1 - pow(b2, 3.0);
    const tb_adamw_args a = {lri, wd, b1, b2, eps, c1, c2, gs};
    tb_cpu_kernels.adamw(NULL, w, x[0], m, v, k, &a);
    for (int64_t j = 0; j < k; j++) { /* optim.c's loop, as it was */
        double gj = x[0][j] * gs;
        m2[j] = (float)(b1 * m2[j] + (1 - b1) * gj);
        v2[j] = (float)(b2 * v2[j] + (1 - b2) * gj * gj);
        double upd = (m2[j] / c1) / (sqrt(v2[j] / c2) + eps);
        w2[j] = (float)(w2[j] - lri * (upd + wd * w2[j]));
    }
    CHECK(!memcmp(w, w2, sizeof(float) * k) && !memcmp(m, m2, sizeof(float) * k) &&
              !memcmp(v, v2, sizeof(float) * k),
          "adamw: the weights or moments differ from the old loop's");
    for (int i = 0; i < 3; i++) free(x[i]);
    free(w), free(m), free(v), free(w2), free(m2), free(v2);
}

int main(int argc, char **argv) {
    check_cases(argc, argv);
    CASE(test_gemm());
    CASE(test_bf16_rounding());
    CASE(test_qlinear());
    CASE(test_qgemm());
    CASE(test_exp_and_acts());
    CASE(test_layernorm());
    CASE(test_rowwise_refs());
    CASE(test_attention());
    CASE(test_attention_bias());
    CASE(test_attention_cross());
    CASE(test_attention_bf16());
    CASE(test_optimiser());
    return check_done();
}
