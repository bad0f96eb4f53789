/* Rotary position embeddings over a video's three axes (V-JEPA 2; transformers' VJEPA2RoPEAttention):
 * each head's queries and keys are rotated by their token's (depth, height, width) position. The
 * head is cut into three contiguous slices of w = 2 ((head_dim / 3) / 2) columns, one per axis
 * (depth first); the head_dim - 3 w columns after them pass unrotated. In a slice, with
 * half = w / 2, omega_j = 10000^(-j / half) and the angle a_j = p omega_j of position p:
 *   C[k] = cos a_(k mod half),  S[k] = sin a_(k mod half)   (tiled, not interleaved)
 *   y[2i] = -x[2i+1],  y[2i+1] = x[2i]                       (the partner is interleaved)
 *   out = x C + y S.
 * The two members of a pair meet different angles, so this is not a rotation and its backward is
 * the transpose written out (tb_rope_slice): dx[2i] = dy[2i] C[2i] + dy[2i+1] S[2i+1],
 * dx[2i+1] = dy[2i+1] C[2i+1] - dy[2i] S[2i]. */
#ifndef TB_ROPE_H
#define TB_ROPE_H

#include <stdint.h>

#include "ops.h" /* TB_HOST_DEVICE */

/* Columns of one axis' slice for a head of head_dim columns (0: the head is too narrow). */
TB_HOST_DEVICE static inline int tb_rope_slice_width(int head_dim) { return 2 * ((head_dim / 3) / 2); }

/* The angles' table: for each position p < n_pos, w cosines C then w sines S (tiled as above):
 * 2 w n_pos floats. Positions are the same integers on every axis, so one table serves the three. */
int64_t tb_rope_table_floats(int head_dim, int64_t n_pos);
void tb_rope_table(float *cs, int head_dim, int64_t n_pos);

/* One slice of w columns in place: out = x C + y S, or (backward) its transpose applied to x. */
TB_HOST_DEVICE static inline void tb_rope_slice(float *x, const float *C, const float *S, int w,
                                                int backward) {
    for (int k = 0; k < w; k += 2) {
        const float a = x[k], b = x[k + 1];
        if (!backward) {
            x[k] = a * C[k] - b * S[k];
            x[k + 1] = b * C[k + 1] + a * S[k + 1];
        } else {
            x[k] = a * C[k] + b * S[k + 1];
            x[k + 1] = b * C[k + 1] - a * S[k];
        }
    }
}

/* x: rows of heads x head_dim columns (row stride ld), in place; pos: (rows, 3) the depth, height
 * and width position of each row (each < the table's n_pos); backward: dx from dy (x holds dy). */
void tb_rope(float *x, int64_t ld, int64_t rows, const int32_t *pos, int heads, int head_dim,
             const float *cs, int backward);
/* The reference: the equations above with the angles in double, one row after another. */
void tb_rope_ref(float *x, int64_t ld, int64_t rows, const int32_t *pos, int heads, int head_dim,
                 int backward);

#endif
