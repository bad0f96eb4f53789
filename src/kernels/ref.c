#include "ref.h"

#include <math.h>

void tb_layernorm_ref(float *y, const float *x, const float *w, const float *b, int64_t rows,
                      int64_t n, float eps) {
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * n;
        double mean = 0, var = 0;
        for (int64_t j = 0; j < n; j++) mean += xr[j];
        mean /= (double)n;
        for (int64_t j = 0; j < n; j++) var += (xr[j] - mean) * (xr[j] - mean);
        var /= (double)n;
        const double rstd = 1 / sqrt(var + eps);
        for (int64_t j = 0; j < n; j++) y[r * n + j] = (float)((xr[j] - mean) * rstd * w[j] + b[j]);
    }
}

void tb_layernorm_backward_ref(float *dx, const float *dy, const float *x, const float *w,
                               float *dw, float *db, int64_t rows, int64_t n, float eps) {
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * n, *dyr = dy + r * n;
        double mean = 0, var = 0, mg = 0, mgx = 0;
        for (int64_t j = 0; j < n; j++) mean += xr[j];
        mean /= (double)n;
        for (int64_t j = 0; j < n; j++) var += (xr[j] - mean) * (xr[j] - mean);
        var /= (double)n;
        const double rstd = 1 / sqrt(var + eps);
        for (int64_t j = 0; j < n; j++) {
            const double xh = (xr[j] - mean) * rstd, g = (double)dyr[j] * w[j];
            mg += g, mgx += g * xh;
            if (dw) dw[j] += (float)(dyr[j] * xh);
            if (db) db[j] += dyr[j];
        }
        mg /= (double)n, mgx /= (double)n;
        for (int64_t j = 0; j < n; j++) {
            const double xh = (xr[j] - mean) * rstd, g = (double)dyr[j] * w[j];
            dx[r * n + j] += (float)(rstd * (g - mg - xh * mgx));
        }
    }
}

void tb_linear_ref(float *y, const float *x, const float *W, const float *b, int64_t M,
                   int64_t N, int64_t K, int accumulate) {
    for (int64_t i = 0; i < M; i++)
        for (int64_t o = 0; o < N; o++) {
            double acc = (b ? b[o] : 0) + (accumulate ? y[i * N + o] : 0);
            for (int64_t k = 0; k < K; k++) acc += (double)x[i * K + k] * W[o * K + k];
            y[i * N + o] = (float)acc;
        }
}

void tb_linear_backward_ref(float *dx, float *dW, float *db, const float *dy, const float *x,
                            const float *W, int64_t M, int64_t N, int64_t K, int accumulate_dx) {
    for (int64_t i = 0; dx && i < M; i++)
        for (int64_t k = 0; k < K; k++) {
            double acc = accumulate_dx ? dx[i * K + k] : 0;
            for (int64_t o = 0; o < N; o++) acc += (double)dy[i * N + o] * W[o * K + k];
            dx[i * K + k] = (float)acc;
        }
    for (int64_t o = 0; o < N; o++) {
        for (int64_t k = 0; dW && k < K; k++) {
            double acc = dW[o * K + k];
            for (int64_t i = 0; i < M; i++) acc += (double)dy[i * N + o] * x[i * K + k];
            dW[o * K + k] = (float)acc;
        }
        if (db) {
            double acc = db[o];
            for (int64_t i = 0; i < M; i++) acc += dy[i * N + o];
            db[o] = (float)acc;
        }
    }
}

void tb_scale_cols_backward_ref(float *dy, float *dlambda, const float *y, const float *lambda,
                                int64_t rows, int64_t n) {
    for (int64_t j = 0; j < n; j++) {
        double acc = dlambda[j];
        for (int64_t r = 0; r < rows; r++) acc += (double)dy[r * n + j] * y[r * n + j];
        dlambda[j] = (float)acc;
        for (int64_t r = 0; r < rows; r++) dy[r * n + j] *= lambda[j];
    }
}

void tb_softmax_row_ref(float *x, int64_t n, float scale) {
    double mx = -INFINITY, sum = 0;
    for (int64_t j = 0; j < n; j++) mx = fmax(mx, (double)x[j] * scale);
    for (int64_t j = 0; j < n; j++) sum += exp((double)x[j] * scale - mx);
    for (int64_t j = 0; j < n; j++) x[j] = (float)(exp((double)x[j] * scale - mx) / sum);
}

void tb_softmax_backward_ref(float *dx, const float *p, const float *dp, int64_t n) {
    double dot = 0;
    for (int64_t j = 0; j < n; j++) dot += (double)p[j] * dp[j];
    for (int64_t j = 0; j < n; j++) dx[j] = (float)(p[j] * (dp[j] - dot));
}

static float rows_factor(const int32_t *idx, int64_t i, const float *row_w, const float *item_w,
                         int64_t per) {
    return (row_w ? row_w[idx[i]] : 1.0f) * (item_w ? item_w[i / per] : 1.0f);
}

void tb_gather_rows_ref(float *dst, const float *src, const int32_t *idx, int64_t n, int64_t C,
                        const float *row_w, const float *item_w, int64_t per) {
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < C; j++)
            dst[i * C + j] = idx[i] < 0 ? 0.0f
                                        : rows_factor(idx, i, row_w, item_w, per) *
                                              src[(int64_t)idx[i] * C + j];
}

void tb_scatter_rows_ref(float *dst, const float *src, const int32_t *idx, int64_t n, int64_t C,
                         int add, const float *row_w, const float *item_w, int64_t per) {
    for (int64_t i = 0; i < n; i++) {
        if (idx[i] < 0) continue;
        const float f = rows_factor(idx, i, row_w, item_w, per);
        for (int64_t j = 0; j < C; j++) {
            float *d = &dst[(int64_t)idx[i] * C + j];
            *d = add ? *d + f * src[i * C + j] : f * src[i * C + j];
        }
    }
}
