/* Position embeddings for an input whose token grid differs from the one the model was trained
 * on: resized per temporal slice over the spatial grid, the way each reference does it.
 *   VideoMAE (as STMixer, seed 001): the sinusoid table of the trained grid (T, H0, W0) is
 *     resized bicubically (PyTorch F.interpolate, align_corners=False) to (T, H1, W1).
 *   ViViT: the same for the learned patch positions; the cls position is kept (Model 2: its
 *     spatial encoder's one table of a frame's positions; the temporal positions must match).
 *     (Hugging Face's
 *     interpolate_pos_encoding treats the T*H*W positions as a square 2D grid, which only works
 *     for one temporal index; see docs/hf-deviations.md.)
 *   TimeSformer (timesformer.c): as Hugging Face does it, nearest-neighbour resize of the spatial
 *     positions and, when the frame count differs, of the time embeddings. */
#include <math.h>
#include <string.h>

#include "family.h"

/* PyTorch's cubic convolution weights, A = -0.75. */
static void cubic_weights(float t, float w[4]) {
    const float A = -0.75f;
    float x = t + 1;
    w[0] = ((A * x - 5 * A) * x + 8 * A) * x - 4 * A;
    w[1] = ((A + 2) * t - (A + 3)) * t * t + 1;
    x = 1 - t;
    w[2] = ((A + 2) * x - (A + 3)) * x * x + 1;
    x = 2 - t;
    w[3] = ((A * x - 5 * A) * x + 8 * A) * x - 4 * A;
}

static int64_t clampi(int64_t v, int64_t n) { return v < 0 ? 0 : v >= n ? n - 1 : v; }

/* src (h0, w0, D) → dst (h1, w1, D), bicubic, align_corners = False, borders clamped. */
void tb_resize_bicubic(float *dst, int64_t h1, int64_t w1, const float *src, int64_t h0,
                       int64_t w0, int64_t D) {
    const float sy = (float)h0 / (float)h1, sx = (float)w0 / (float)w1;
    for (int64_t y = 0; y < h1; y++) {
        float ry = sy * ((float)y + 0.5f) - 0.5f, fy = floorf(ry), wy[4];
        cubic_weights(ry - fy, wy);
        for (int64_t x = 0; x < w1; x++) {
            float rx = sx * ((float)x + 0.5f) - 0.5f, fx = floorf(rx), wx[4];
            cubic_weights(rx - fx, wx);
            float *o = dst + (y * w1 + x) * D;
            for (int64_t d = 0; d < D; d++) {
                float acc = 0;
                for (int i = 0; i < 4; i++) {
                    const float *row = src + clampi((int64_t)fy - 1 + i, h0) * w0 * D;
                    float r = 0;
                    for (int j = 0; j < 4; j++)
                        r += wx[j] * row[clampi((int64_t)fx - 1 + j, w0) * D + d];
                    acc += wy[i] * r;
                }
                o[d] = acc;
            }
        }
    }
}

int tb_positions_bicubic(tubelet_state *s, int one_slice, tb_err *e) {
    const tubelet_model *m = s->m;
    const tb_config *c = &m->cfg;
    const int64_t D = c->hidden, h0 = tb_grid_h(c, c->image_h), w0 = tb_grid_w(c, c->image_w);
    const int64_t t0 = tb_grid_t(c, c->num_frames), h1 = s->grid_h, w1 = s->grid_w, t1 = s->grid_t;
    s->pos = m->w.pos, s->time_pos = m->w.time_pos;
    const int same_space = h0 == h1 && w0 == w1;
    if (same_space && t0 == t1) return TUBELET_OK;
    if (t0 != t1)
        return tb_fail(e, TUBELET_ERR_SHAPE,
                       "input of %d frames gives %lld temporal positions, the model was trained "
                       "with %lld (config.json num_frames %d); resample the input to %d frames",
                       s->T, (long long)t1, (long long)t0, c->num_frames, c->num_frames);
    const int cls = tb_has_cls(c);
    const int64_t slices = one_slice ? 1 : t1;
    s->pos_owned = tb_alloc(sizeof(float) * (size_t)((cls + slices * h1 * w1) * D));
    if (!s->pos_owned) return tb_fail(e, TUBELET_ERR_MEMORY, "out of memory");
    if (cls) memcpy(s->pos_owned, m->w.pos, sizeof(float) * (size_t)D);
    for (int64_t t = 0; t < slices; t++)
        tb_resize_bicubic(s->pos_owned + (cls + t * h1 * w1) * D, h1, w1,
                          m->w.pos + (cls + t * h0 * w0) * D, h0, w0, D);
    s->pos = s->pos_owned;
    s->pos_owned_bytes = sizeof(float) * (size_t)((cls + slices * h1 * w1) * D);
    return TUBELET_OK;
}
