/* cudaemu: the WMMA API of CUDA's mma.h (nvcuda::wmma: fragments, load_matrix_sync, mma_sync,
 * store_matrix_sync, fill_fragment) for 16x16x16 tiles of bf16 with fp32 accumulators.
 *
 * CUDA leaves a fragment's mapping of elements to lanes unspecified, so every lane holding the
 * whole tile is a valid implementation, and the one used here: code that relied on a particular
 * mapping would be wrong on a GPU anyway. Each operation is warp-collective, as on a GPU: it
 * waits for every live lane of the warp (a lane that does not come is reported), and it checks
 * what the GPU requires: a 256-bit aligned pointer and ldm a multiple of 16 bytes. Products are
 * exact bf16 x bf16 summed in fp32, in k order. */
#ifndef TB_CUDAEMU_MMA_H
#define TB_CUDAEMU_MMA_H

#include "cuda_bf16.h"
#include "cuda_runtime.h"

void tb_emu_wmma_check(const void *p, unsigned ldm, size_t elem, const char *what);

namespace nvcuda {
namespace wmma {
struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {
    static const bool is_col = false;
};
struct col_major {
    static const bool is_col = true;
};
enum layout_t { mem_row_major, mem_col_major };

template <class Use, int M, int N, int K> struct tile_shape;
template <int M, int N, int K> struct tile_shape<matrix_a, M, N, K> {
    enum { rows = M, cols = K };
};
template <int M, int N, int K> struct tile_shape<matrix_b, M, N, K> {
    enum { rows = K, cols = N };
};
template <int M, int N, int K> struct tile_shape<accumulator, M, N, K> {
    enum { rows = M, cols = N };
};

template <class Use, int M, int N, int K, class T, class Layout = void> struct fragment {
    enum { rows = tile_shape<Use, M, N, K>::rows, cols = tile_shape<Use, M, N, K>::cols };
    static const int num_elements = rows * cols;
    T x[rows * cols]; /* row-major, the whole tile in every lane */
};

static inline float as_float(float v) { return v; }
static inline float as_float(__nv_bfloat16 v) { return __bfloat162float(v); }

template <class Use, int M, int N, int K, class T, class L>
inline void load_matrix_sync(fragment<Use, M, N, K, T, L> &f, const T *p, unsigned ldm) {
    typedef fragment<Use, M, N, K, T, L> F;
    __syncwarp();
    tb_emu_wmma_check(p, ldm, sizeof(T), "load_matrix_sync");
    for (int r = 0; r < F::rows; r++)
        for (int c = 0; c < F::cols; c++)
            f.x[r * F::cols + c] = L::is_col ? p[(size_t)c * ldm + r] : p[(size_t)r * ldm + c];
    __syncwarp();
}
template <int M, int N, int K>
inline void load_matrix_sync(fragment<accumulator, M, N, K, float> &f, const float *p,
                             unsigned ldm, layout_t l) {
    __syncwarp();
    tb_emu_wmma_check(p, ldm, sizeof(float), "load_matrix_sync");
    for (int r = 0; r < M; r++)
        for (int c = 0; c < N; c++)
            f.x[r * N + c] = l == mem_col_major ? p[(size_t)c * ldm + r] : p[(size_t)r * ldm + c];
    __syncwarp();
}
template <int M, int N, int K>
inline void store_matrix_sync(float *p, const fragment<accumulator, M, N, K, float> &f,
                              unsigned ldm, layout_t l) {
    __syncwarp();
    tb_emu_wmma_check(p, ldm, sizeof(float), "store_matrix_sync");
    for (int r = 0; r < M; r++)
        for (int c = 0; c < N; c++)
            (l == mem_col_major ? p[(size_t)c * ldm + r] : p[(size_t)r * ldm + c]) = f.x[r * N + c];
    __syncwarp();
}
template <class Use, int M, int N, int K, class T, class L>
inline void fill_fragment(fragment<Use, M, N, K, T, L> &f, T v) {
    for (int i = 0; i < f.num_elements; i++) f.x[i] = v;
}
template <int M, int N, int K, class T, class LA, class LB>
inline void mma_sync(fragment<accumulator, M, N, K, float> &d,
                     const fragment<matrix_a, M, N, K, T, LA> &a,
                     const fragment<matrix_b, M, N, K, T, LB> &b,
                     const fragment<accumulator, M, N, K, float> &c) {
    __syncwarp();
    float out[M * N];
    for (int r = 0; r < M; r++)
        for (int n = 0; n < N; n++) {
            float s = c.x[r * N + n];
            for (int k = 0; k < K; k++) s += as_float(a.x[r * K + k]) * as_float(b.x[k * N + n]);
            out[r * N + n] = s;
        }
    for (int i = 0; i < M * N; i++) d.x[i] = out[i];
    __syncwarp();
}
} // namespace wmma
} // namespace nvcuda

#endif
