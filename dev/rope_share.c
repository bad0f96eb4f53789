/* How long V-JEPA 2's rotary positions take per encoder block (issue 38: fuse them into attention
 * where it pays): tb_rope over q|k of ViT-L's rows (1024 wide, 16 heads of 64, rotated as 32
 * heads) at 2,048 and 8,192 tokens, median of 21 runs, 2 threads. Compare with a block's time
 * (bench/RESULTS.md: 24.9 s / 24 blocks at 2,048 tokens, 192.8 s / 24 at 8,192).
 *   gcc -O2 -march=native -fopenmp -Isrc dev/rope_share.c build/libtubelet.a -lm -o build/rope_share */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>

#include "kernels/rope.h"

static int cmp(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(void) {
    omp_set_num_threads(2);
    const int D = 1024, hd = 64, heads = 16, g = 16;
    for (int depth = 8; depth <= 32; depth *= 4) {
        const int64_t rows = (int64_t)depth * g * g, ld = 3 * (int64_t)D;
        float *x = malloc(sizeof(float) * (size_t)(rows * ld));
        int32_t *pos = malloc(sizeof(int32_t) * 3 * (size_t)rows);
        for (int64_t i = 0; i < rows * ld; i++) x[i] = (float)(i % 97) * 0.01f;
        for (int64_t r = 0; r < rows; r++)
            pos[3 * r] = (int32_t)(r / (g * g)), pos[3 * r + 1] = (int32_t)(r / g % g),
            pos[3 * r + 2] = (int32_t)(r % g);
        const int n_pos = depth > g ? depth : g;
        float *cs = malloc(sizeof(float) * (size_t)tb_rope_table_floats(hd, n_pos));
        tb_rope_table(cs, hd, n_pos);
        double t[21];
        for (int k = 0; k < 21; k++) {
            const double t0 = omp_get_wtime();
            tb_rope(x, ld, rows, pos, 2 * heads, hd, cs, k & 1);
            t[k] = omp_get_wtime() - t0;
        }
        qsort(t, 21, sizeof *t, cmp);
        printf("%lld tokens: rope over q and k %.2f ms per block (median of 21)\n", (long long)rows,
               t[10] * 1e3);
        free(x), free(pos), free(cs);
    }
    return 0;
}
