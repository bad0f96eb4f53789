/* The biased attention backward (tb_attention_backward_biased_kernel) on Video Swin-T's window
 * shapes, fused kernel against GEMM tiles: relative-position bias per head, shift masks shared
 * by the windows (mask_index), dbias accumulated; median of R runs, process CPU time with
 * --cpu (steadier on a loaded machine), and the largest difference between the two kernels.
 *
 *   make && gcc -O2 -march=native -fopenmp -std=c11 -D_GNU_SOURCE -Iinclude -Isrc \
 *       bench/swin_attn_backward.c build/libtubelet.a -ldnnl -lm -o build/swin_attn_backward
 *   build/swin_attn_backward [--threads 1] [--repeats 3] [--cpu]
 *
 * Shapes (batch 1, 32x224²): stage 0, 128 windows of 8x7x7 = 392 tokens, 3 heads of 32; stage 2,
 * 8 windows of 392, 12 heads of 32. */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_timing.h"
#include "kernels/attention.h"


static float *buf(int64_t n, float scale) {
    float *p = malloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++) p[i] = scale * frand();
    return p;
}

static void run(const char *name, int64_t n_groups, int64_t L, int heads, int hd, int threads,
                int repeats) {
    const int64_t D = (int64_t)heads * hd, ld = 3 * D, R = n_groups * L;
    float *qkv = buf(R * ld, 2), *dout = buf(R * D, 1), *bias = buf(heads * L * L, 1);
    float *mask = calloc((size_t)(8 * L * L), sizeof(float)), *out = buf(R * D, 0);
    for (int64_t i = 0; i < 8 * L * L; i++) mask[i] = frand() < -0.5f ? -100.0f : 0.0f;
    int32_t mi[8] = {0, 1, 2, 3, 4, 5, 6, 7};
    float *dbias[2], *dqkv[2];
    const tb_grouping g = {.n_groups = n_groups, .group_len = L};
    float *scr = malloc(sizeof(float) * (size_t)tb_attention_scratch_floats(L, hd, threads));
    float *bscr = malloc(sizeof(float) * (size_t)tb_attention_backward_scratch_floats(L, hd, threads));
    const tb_attn_bias fb = {bias, mask, 8, NULL, mi};
    tb_attention_forward_biased(out, qkv, qkv + D, qkv + 2 * D, ld, &g, heads, hd, &fb, scr,
                                threads, NULL);
    const tb_attn_kernel kern[2] = {TB_ATTN_FUSED, TB_ATTN_GEMM};
    double med[2], *ms = malloc(sizeof(double) * (size_t)repeats);
    for (int k = 0; k < 2; k++) {
        dbias[k] = calloc((size_t)(heads * L * L), sizeof(float));
        dqkv[k] = malloc(sizeof(float) * (size_t)(R * ld));
        for (int r = -1; r < repeats; r++) {
            memset(dbias[k], 0, sizeof(float) * (size_t)(heads * L * L));
            const tb_attn_bias b = {bias, mask, 8, dbias[k], mi};
            const double t0 = now();
            tb_attention_backward_biased_kernel(dqkv[k], dqkv[k] + D, dqkv[k] + 2 * D, ld, qkv,
                                                qkv + D, qkv + 2 * D, ld, out, dout, &g, heads,
                                                hd, &b, bscr, threads, NULL, kern[k]);
            if (r >= 0) ms[r] = 1e3 * (now() - t0);
        }
        qsort(ms, (size_t)repeats, sizeof *ms, cmp);
        med[k] = ms[repeats / 2];
    }
    double diff = 0, big = 0, ddb = 0;
    for (int64_t i = 0; i < R * ld; i++)
        diff = fmax(diff, fabs(dqkv[0][i] - dqkv[1][i])), big = fmax(big, fabs(dqkv[1][i]));
    for (int64_t i = 0; i < heads * L * L; i++) ddb = fmax(ddb, fabs(dbias[0][i] - dbias[1][i]));
    const double gf = 5.0 * 2.0 * n_groups * heads * (double)L * L * hd / 1e9;
    printf("%-16s %3lld x %3lld, %2d heads of %d: fused %8.1f ms (%5.1f GFLOP/s)  gemm %8.1f ms "
           "(%5.1f GFLOP/s)  gemm/fused %.2fx  max |diff| %.1e of %.1e, dbias %.1e\n",
           name, (long long)n_groups, (long long)L, heads, hd, med[0], gf / med[0] * 1e3, med[1],
           gf / med[1] * 1e3, med[1] / med[0], diff, big, ddb);
    free(qkv), free(dout), free(bias), free(mask), free(out), free(scr), free(bscr), free(ms);
    for (int k = 0; k < 2; k++) free(dbias[k]), free(dqkv[k]);
}

int main(int argc, char **argv) {
    int threads = 1, repeats = 3;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--cpu")) use_cpu = 1;
        else if (i + 1 < argc && !strcmp(argv[i], "--threads")) threads = atoi(argv[++i]);
        else if (i + 1 < argc && !strcmp(argv[i], "--repeats")) repeats = atoi(argv[++i]);
    }
    if (repeats < 1) repeats = 1;
    omp_set_num_threads(threads); /* the GEMM calls inside the kernels too */
    run("swin-t stage 0", 128, 392, 3, 32, threads, repeats);
    run("swin-t stage 2", 8, 392, 12, 32, threads, repeats);
    return 0;
}
