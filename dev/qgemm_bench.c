/* qgemm_bench: one ViT-B linear layer (M x K → N), timed in interleaved rounds:
 *   fp32      tb_linear (dnnl_sgemm on the f32 weight as stored: X W^T + b)
 *   fp32pk    tb_qlinear with the weight packed for oneDNN's f32 matmul (what `bench` runs)
 *   onednn    tb_qlinear int8 through oneDNN 2.6's AVX2 kernel (gemm:jit, 7-bit weights)
 *   ours      tb_qlinear int8 through qgemm.c (7-bit weights), range + quantisation included
 *   kernel    tb_qgemm alone on activations quantised once (the product without the range pass
 *             and the quantisation)
 * Each round runs every implementation once (2 warm calls, then the median of --calls calls);
 * rounds alternate the order. GOP/s count 2 M N K. The machine is shared: compare within a round.
 *
 * Build (after `make`): gcc -O2 -march=native -std=c11 -D_GNU_SOURCE -Iinclude -Isrc -fopenmp \
 *   dev/qgemm_bench.c build/libtubelet.a -o build/qgemm_bench -ldnnl -lcjson -lm \
 *   $(pkg-config --libs libavformat libavcodec libswscale libavutil libavdevice libzip msgpack \
 *   libpcre2-8 libutf8proc)
 * Usage: build/qgemm_bench [--threads T] [--rounds R] [--calls C] [--shape M,K,N]... */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/gemm.h"
#include "kernels/lowp.h"
#include "kernels/qgemm.h"

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

enum { FP32, FP32PK, ONEDNN, OURS, KERNEL, NIMPL };
static const char *const names[NIMPL] = {"fp32", "fp32pk", "onednn", "ours", "kernel"};

typedef struct {
    int M, K, N;
    float *x, *W, *b, *y, *sc, *off;
    uint8_t *xa;
    tb_qweight q[NIMPL];
    tb_lowp_ctx *c[NIMPL];
} shape;

static void run(shape *s, int impl) {
    switch (impl) {
    case FP32: tb_linear(s->y, s->N, s->x, s->W, s->b, s->M, s->N, s->K, 0); break;
    case KERNEL:
        tb_qgemm(s->y, s->N, s->xa, tb_qgemm_lda(s->K), s->q[OURS].data, s->sc, s->off, s->M, s->N,
                 s->K, 0, -1);
        break;
    default: tb_qlinear(s->c[impl], s->y, s->N, s->x, &s->q[impl], s->b, s->M, 0, -1);
    }
}

int main(int argc, char **argv) {
    int threads = 2, rounds = 5, calls = 5, ns = 0;
    /* rounds at most 64 */
    int dims[8][3];
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--threads") && i + 1 < argc) threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--rounds") && i + 1 < argc) rounds = atoi(argv[++i]) % 65;
        else if (!strcmp(argv[i], "--calls") && i + 1 < argc) calls = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--shape") && i + 1 < argc && ns < 8) {
            if (sscanf(argv[++i], "%d,%d,%d", &dims[ns][0], &dims[ns][1], &dims[ns][2]) == 3) ns++;
        } else {
            fprintf(stderr, "usage: %s [--threads T] [--rounds R] [--calls C] [--shape M,K,N]...\n",
                    argv[0]);
            return 2;
        }
    }
    if (!ns) ns = 2, memcpy(dims, (int[2][3]){{1568, 768, 3072}, {1568, 768, 768}}, sizeof(int[6]));
    omp_set_num_threads(threads);
    dnnl_engine_t eng;
    if (dnnl_engine_create(&eng, dnnl_cpu, 0)) return 1;
    shape S[8];
    tb_err e = {{0}};
    for (int s = 0; s < ns; s++) {
        shape *p = &S[s];
        memset(p, 0, sizeof *p);
        p->M = dims[s][0], p->K = dims[s][1], p->N = dims[s][2];
        const int64_t M = p->M, K = p->K, N = p->N;
        p->x = tb_alloc(sizeof(float) * (size_t)(M * K));
        p->W = tb_alloc(sizeof(float) * (size_t)(N * K));
        p->b = tb_alloc(sizeof(float) * (size_t)N), p->y = tb_alloc(sizeof(float) * (size_t)(M * N));
        p->sc = tb_alloc(sizeof(float) * (size_t)N), p->off = tb_alloc(sizeof(float) * (size_t)N);
        p->xa = tb_alloc((size_t)(M * tb_qgemm_lda(K)));
        srand(7);
        for (int64_t i = 0; i < M * K; i++) p->x[i] = (float)rand() / RAND_MAX * 4 - 1.5f;
        for (int64_t i = 0; i < N * K; i++) p->W[i] = ((float)rand() / RAND_MAX - 0.5f) * 0.1f;
        for (int64_t i = 0; i < N; i++) p->b[i] = 0.1f, p->sc[i] = 1e-4f, p->off[i] = 0.5f;
        tb_qgemm_quant(p->xa, tb_qgemm_lda(K), p->x, M, K, 0.02f, 75);
        const int prec[NIMPL] = {0, TB_PREC_FP32, TB_PREC_INT8, TB_PREC_INT8, TB_PREC_INT8};
        const int nat[NIMPL] = {0, 1, TB_INT8_ONEDNN, 1, 1};
        for (int i = FP32PK; i < NIMPL; i++)
            if (tb_qweight_init(&p->q[i], eng, p->W, N, K, prec[i], nat[i], &e) ||
                tb_lowp_ctx_new(&p->c[i], eng, nat[i], M * K, N, N * K, &e)) {
                fprintf(stderr, "setup: %s\n", e.msg);
                return 1;
            }
        if (!p->q[OURS].avx2 || p->q[ONEDNN].avx2) {
            fprintf(stderr, "this CPU does not take our AVX2 int8 kernel (VNNI or no AVX2)\n");
            return 1;
        }
    }
    printf("threads %d, %d rounds, median of %d calls each; GOP/s = 2 M N K / time\n", threads,
           rounds, calls);
    double *t = calloc((size_t)(ns * NIMPL * rounds), sizeof(double));
    for (int r = 0; r < rounds; r++)
        for (int s = 0; s < ns; s++)
            for (int o = 0; o < NIMPL; o++) {
                const int impl = r % 2 ? NIMPL - 1 - o : o; /* alternate the order */
                double c[64];
                run(&S[s], impl), run(&S[s], impl);
                for (int k = 0; k < calls && k < 64; k++) {
                    double t0 = now();
                    run(&S[s], impl);
                    c[k] = now() - t0;
                }
                qsort(c, (size_t)calls, sizeof *c, cmp);
                t[(s * NIMPL + impl) * rounds + r] = c[calls / 2];
            }
    for (int s = 0; s < ns; s++) {
        const double ops = 2.0 * S[s].M * S[s].N * S[s].K;
        printf("\nM=%d K=%d N=%d\n%-8s", S[s].M, S[s].K, S[s].N, "round");
        for (int i = 0; i < NIMPL; i++) printf(" %8s GOP/s", names[i]);
        printf("   ours/fp32 ours/onednn ours/fp32pk\n");
        for (int r = 0; r < rounds; r++) {
            printf("%-8d", r);
            const double *ts = t + s * NIMPL * rounds + r;
            for (int i = 0; i < NIMPL; i++) printf(" %14.1f", ops / ts[i * rounds] / 1e9);
            printf("   %9.2f %11.2f %11.2f\n", ts[FP32 * rounds] / ts[OURS * rounds],
                   ts[ONEDNN * rounds] / ts[OURS * rounds], ts[FP32PK * rounds] / ts[OURS * rounds]);
        }
        /* the median over the rounds of each round's ratio (the load moves between rounds) */
        printf("median ratio over rounds (time of the other / time of ours):");
        for (int i = 0; i < NIMPL; i++) {
            if (i == OURS) continue;
            double q[64];
            const double *ts = t + s * NIMPL * rounds;
            for (int r = 0; r < rounds && r < 64; r++) q[r] = ts[i * rounds + r] / ts[OURS * rounds + r];
            qsort(q, (size_t)rounds, sizeof *q, cmp);
            printf(" %s %.2f", names[i], rounds % 2 ? q[rounds / 2] : (q[rounds / 2 - 1] + q[rounds / 2]) / 2);
        }
        printf("\n");
    }
    return 0;
}
