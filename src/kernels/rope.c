#include "rope.h"

#include <math.h>

int64_t tb_rope_table_floats(int head_dim, int64_t n_pos) {
    return 2 * (int64_t)tb_rope_slice_width(head_dim) * n_pos;
}

/* The angles in float as transformers forms them (omega = 1 / 10000^(j / half) and p omega in
 * float32), their sine and cosine rounded from double. */
void tb_rope_table(float *cs, int head_dim, int64_t n_pos) {
    const int w = tb_rope_slice_width(head_dim), half = w / 2;
    for (int64_t p = 0; p < n_pos; p++) {
        float *C = cs + 2 * w * p, *S = C + w;
        for (int k = 0; k < w; k++) {
            const float omega = 1.0f / powf(10000.0f, (float)(k % half) / (float)half);
            const float a = (float)p * omega;
            C[k] = (float)cos((double)a);
            S[k] = (float)sin((double)a);
        }
    }
}

void tb_rope(float *x, int64_t ld, int64_t rows, const int32_t *pos, int heads, int head_dim,
             const float *cs, int backward) {
    const int w = tb_rope_slice_width(head_dim);
    if (!w) return;
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; r++)
        for (int h = 0; h < heads; h++)
            for (int a = 0; a < 3; a++) {
                const float *C = cs + 2 * (int64_t)w * pos[3 * r + a];
                tb_rope_slice(x + r * ld + (int64_t)h * head_dim + a * w, C, C + w, w, backward);
            }
}

void tb_rope_ref(float *x, int64_t ld, int64_t rows, const int32_t *pos, int heads, int head_dim,
                 int backward) {
    const int w = tb_rope_slice_width(head_dim), half = w / 2;
    for (int64_t r = 0; r < rows; r++)
        for (int h = 0; h < heads; h++)
            for (int a = 0; a < 3; a++) {
                float *v = x + r * ld + (int64_t)h * head_dim + a * w;
                double in[w > 0 ? w : 1], C[w > 0 ? w : 1], S[w > 0 ? w : 1];
                for (int k = 0; k < w; k++) {
                    const double ang = pos[3 * r + a] * pow(10000.0, -(double)(k % half) / half);
                    in[k] = v[k], C[k] = cos(ang), S[k] = sin(ang);
                }
                for (int i = 0; i < w / 2; i++) {
                    const double a0 = in[2 * i], a1 = in[2 * i + 1];
                    /* forward: x C + y S; backward: C dy + P^T (S dy), P^T z = (z1, -z0) */
                    v[2 * i] = (float)(backward ? a0 * C[2 * i] + a1 * S[2 * i + 1]
                                                : a0 * C[2 * i] - a1 * S[2 * i]);
                    v[2 * i + 1] = (float)(backward ? a1 * C[2 * i + 1] - a0 * S[2 * i]
                                                    : a1 * C[2 * i + 1] + a0 * S[2 * i + 1]);
                }
            }
}
