/* The attention kernels on the base models' shapes: for each shape, the forward in f32 and with
 * bf16 operands (tb_attention_forward_bf16), then the backward through each kernel that applies
 * (fused AVX-512, GEMM tiles, small-group loops; skipped with --forward), median of R runs, and
 * the fused/small result against the GEMM one.
 *
 *   make && gcc -O2 -march=native -fopenmp -std=c11 -D_GNU_SOURCE -Iinclude -Isrc \
 *       bench/attn_backward.c build/libtubelet.a -ldnnl -lm -o build/attn_backward
 *   build/attn_backward [--threads 2] [--repeats 5] [--cpu] [--only NAME] [--forward]
 *
 * Shapes (batch 1, 12 heads of 64): VideoMAE-B joint 1 x 1568; ViViT-B joint 1 x 3137;
 * TimeSformer-B divided, space 8 x 197 (the cls row shared by the 8 frames' groups) and time
 * 196 x 8 (strided rows, index table). */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_timing.h"
#include "kernels/attention.h"

static int forward_only;

typedef struct {
    const char *name;
    int64_t n_groups, L;
    int kind; /* 0 contiguous, 1 TimeSformer space (shared cls), 2 TimeSformer time (strided) */
} shape;

static void run(const shape *sh, int threads, int repeats) {
    const int heads = 12, hd = 64;
    const int64_t D = heads * hd, ld = 3 * D, GR = sh->n_groups * sh->L;
    const int64_t rows = sh->kind == 1 ? 1 + sh->n_groups * (sh->L - 1) : GR;
    int32_t *idx = NULL;
    if (sh->kind) {
        idx = malloc(sizeof(int32_t) * (size_t)GR);
        for (int64_t g = 0; g < sh->n_groups; g++)
            for (int64_t j = 0; j < sh->L; j++)
                idx[g * sh->L + j] =
                    (int32_t)(sh->kind == 1 ? (j ? 1 + (j - 1) * sh->n_groups + g : 0)
                                            : 1 + j * sh->n_groups + g);
    }
    const tb_grouping g = {.n_groups = sh->n_groups, .group_len = sh->L, .rows = idx};
    float *qkv = malloc(sizeof(float) * (size_t)((rows + 1) * ld));
    float *out = malloc(sizeof(float) * (size_t)(GR * D)), *dout = malloc(sizeof(float) * (size_t)(GR * D));
    float *dqkv[3];
    for (int i = 0; i < 3; i++) dqkv[i] = malloc(sizeof(float) * (size_t)(GR * ld));
    for (int64_t i = 0; i < (rows + 1) * ld; i++) qkv[i] = 2 * frand();
    for (int64_t i = 0; i < GR * D; i++) dout[i] = frand();
    float *scr = malloc(sizeof(float) * (size_t)tb_attention_scratch_floats(sh->L, hd, threads));
    float *bscr =
        malloc(sizeof(float) * (size_t)tb_attention_backward_scratch_floats(sh->L, hd, threads));
    double *ms = malloc(sizeof(double) * (size_t)repeats), med[5] = {0};
    static const char *const names[] = {"forward", "fused", "gemm", "small"};
    const tb_attn_kernel kern[] = {TB_ATTN_AUTO, TB_ATTN_FUSED, TB_ATTN_GEMM, TB_ATTN_SMALL};
    for (int k = 4; k >= 0; k = k == 4 ? 0 : k + 1 < 4 && !forward_only ? k + 1 : -1) {
        if (k == 3 && sh->L > 32) continue;
        if (k == 1 && sh->L <= 32) continue;
        for (int r = -1; r < repeats; r++) {
            const double t0 = now();
            if (k == 4)
                tb_attention_forward_bf16(out, qkv, qkv + D, qkv + 2 * D, ld, &g, heads, hd, scr,
                                          threads);
            else if (k == 0)
                tb_attention_forward(out, qkv, qkv + D, qkv + 2 * D, ld, &g, heads, hd, scr,
                                     threads, NULL);
            else
                tb_attention_backward_kernel(dqkv[k - 1], dqkv[k - 1] + D, dqkv[k - 1] + 2 * D, ld,
                                             qkv, qkv + D, qkv + 2 * D, ld, out, dout, &g, heads,
                                             hd, bscr, threads, NULL, kern[k]);
            if (r >= 0) ms[r] = 1e3 * (now() - t0);
        }
        qsort(ms, (size_t)repeats, sizeof *ms, cmp);
        med[k] = ms[repeats / 2];
    }
    double diff = 0, big = 0;
    const float *alt = sh->L <= 32 ? dqkv[2] : dqkv[0];
    for (int64_t i = 0; i < GR * ld; i++) {
        diff = fmax(diff, fabs(alt[i] - dqkv[1][i]));
        big = fmax(big, fabs(dqkv[1][i]));
    }
    /* per (group, head) the backward does 5 products of L x L x hd, the forward 2 */
    const double gf = 2.0 * sh->n_groups * heads * (double)sh->L * sh->L * hd / 1e9;
    printf("%-22s %4lld x %4lld  forward %8.1f ms (%5.1f GFLOP/s)  bf16 forward %8.1f ms (%5.1f "
           "GFLOP/s)", sh->name, (long long)sh->n_groups, (long long)sh->L, med[0],
           2 * gf / med[0] * 1e3, med[4], 2 * gf / med[4] * 1e3);
    if (forward_only) {
        printf("\n");
        goto done;
    }
    for (int k = 1; k < 4; k++)
        if (med[k] > 0)
            printf("  %s %8.1f ms (%5.1f GFLOP/s)", names[k], med[k], 5 * gf / med[k] * 1e3);
    printf("  gemm/%s %.2fx  max |diff| %.1e of %.1e\n", sh->L <= 32 ? "small" : "fused",
           med[2] / (sh->L <= 32 ? med[3] : med[1]), diff, big);
done:
    free(idx), free(qkv), free(out), free(dout), free(scr), free(bscr), free(ms);
    for (int i = 0; i < 3; i++) free(dqkv[i]);
}

int main(int argc, char **argv) {
    int threads = 2, repeats = 5;
    const char *only = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--cpu")) use_cpu = 1;
        else if (!strcmp(argv[i], "--forward")) forward_only = 1;
        else if (i + 1 < argc && !strcmp(argv[i], "--threads")) threads = atoi(argv[++i]);
        else if (i + 1 < argc && !strcmp(argv[i], "--repeats")) repeats = atoi(argv[++i]);
        else if (i + 1 < argc && !strcmp(argv[i], "--only")) only = argv[++i];
    }
    if (repeats < 1) repeats = 1;
    const shape shapes[] = {{"videomae-base joint", 1, 1568, 0},
                            {"timesformer-base space", 8, 197, 1},
                            {"timesformer-base time", 196, 8, 2},
                            {"vivit-base joint", 1, 3137, 0}};
    for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++)
        if (!only || strstr(shapes[i].name, only)) run(&shapes[i], threads, repeats);
    return 0;
}
