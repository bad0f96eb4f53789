/* qgemm_bench: one ViT-B linear layer (M x K → N), timed in interleaved rounds:
 *   fp32      tb_linear (dnnl_sgemm on the f32 weight as stored: X W^T + b)
 *   fp32pk    tb_qlinear with the weight packed for oneDNN's f32 matmul (what `bench` runs)
 *   onednn    tb_qlinear int8 through oneDNN 2.6's AVX2 kernel (gemm:jit, 7-bit weights)
 *   ours      tb_qlinear int8 through qgemm.c (7-bit weights), range + quantisation included
 *   kernel    tb_qgemm alone on activations quantised once (the product without the range pass
 *             and the quantisation)
 * Before the first and after the last round, the ceilings of the two instruction mixes, on every
 * thread (register-only loops, no memory but the L1-resident operands): the int8 micro-kernel's
 * (a 4 x 16 block, vpmaddubsw + vpmaddwd + vpaddd per 8 channels x 4 k: 64 ops) and the fp32
 * FMA's (12 independent vfmadd231ps ymm: 16 flop each).
 * Each round runs every implementation once (2 warm calls, then the median of --calls calls);
 * rounds alternate the order. GOP/s count 2 M N K. The machine is shared: compare within a round.
 *
 * Build (after `make`): gcc -O2 -march=native -std=c11 -D_GNU_SOURCE -Iinclude -Isrc -fopenmp \
 *   dev/qgemm_bench.c build/libtubelet.a -o build/qgemm_bench -ldnnl -lcjson -lm \
 *   $(pkg-config --libs libavformat libavcodec libswscale libavutil libavdevice libzip msgpack \
 *   libpcre2-8 libutf8proc)
 * Usage: build/qgemm_bench [--threads T] [--rounds R] [--calls C] [--shape M,K,N]... */
#include <immintrin.h>
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

/* The ceilings: GOP/s over all threads of the int8 block loop and of the FMA loop. */
static int8_t peak_b[64 * 64] __attribute__((aligned(64)));
static uint8_t peak_a[6 * 256];
/* Named accumulators (gcc 12 keeps an array of them on the stack), 4 rows x 16 channels: with 6
 * rows gcc hoists the 6 broadcasts and spills 10 of the 12 accumulators. */
#define ROW(r, ca, cb)                                                                        \
    do {                                                                                      \
        int32_t v;                                                                            \
        memcpy(&v, peak_a + (r) * 256 + 4 * g, 4);                                            \
        const __m256i a = _mm256_set1_epi32(v);                                               \
        ca = _mm256_add_epi32(ca, _mm256_madd_epi16(_mm256_maddubs_epi16(a, b0), one));       \
        cb = _mm256_add_epi32(cb, _mm256_madd_epi16(_mm256_maddubs_epi16(a, b1), one));       \
    } while (0)
__attribute__((target("avx2"), noinline)) static int peak_int8_loop(long it) {
    __m256i c0 = _mm256_setzero_si256(), c1 = c0, c2 = c0, c3 = c0, c4 = c0, c5 = c0, c6 = c0,
            c7 = c0, c8 = c0, c9 = c0, c10 = c0, c11 = c0;
    const __m256i one = _mm256_set1_epi16(1);
    for (long i = 0; i < it; i++)
        for (int g = 0; g < 64; g++) {
            const __m256i b0 = _mm256_load_si256((const __m256i *)(peak_b + g * 64));
            const __m256i b1 = _mm256_load_si256((const __m256i *)(peak_b + g * 64 + 32));
            ROW(0, c0, c1);
            ROW(1, c2, c3);
            ROW(2, c4, c5);
            ROW(3, c6, c7);
        }
    __m256i s = _mm256_add_epi32(_mm256_add_epi32(_mm256_add_epi32(c0, c1), _mm256_add_epi32(c2, c3)),
                                 _mm256_add_epi32(_mm256_add_epi32(c4, c5), _mm256_add_epi32(c6, c7)));
    s = _mm256_add_epi32(s, _mm256_add_epi32(_mm256_add_epi32(c8, c9), _mm256_add_epi32(c10, c11)));
    return _mm256_extract_epi32(s, 0);
}
__attribute__((target("avx2,fma"), noinline)) static float peak_fma_loop(long it) {
    /* distinct starts, or gcc merges the identical chains into one */
    __m256 c0 = _mm256_set1_ps(0), c1 = _mm256_set1_ps(1), c2 = _mm256_set1_ps(2),
           c3 = _mm256_set1_ps(3), c4 = _mm256_set1_ps(4), c5 = _mm256_set1_ps(5),
           c6 = _mm256_set1_ps(6), c7 = _mm256_set1_ps(7), c8 = _mm256_set1_ps(8),
           c9 = _mm256_set1_ps(9), c10 = _mm256_set1_ps(10), c11 = _mm256_set1_ps(11);
    __m256 a = _mm256_set1_ps(0.999f), b = _mm256_set1_ps(1e-3f);
    for (long i = 0; i < it; i++) {
        c0 = _mm256_fmadd_ps(c0, a, b), c1 = _mm256_fmadd_ps(c1, a, b), c2 = _mm256_fmadd_ps(c2, a, b);
        c3 = _mm256_fmadd_ps(c3, a, b), c4 = _mm256_fmadd_ps(c4, a, b), c5 = _mm256_fmadd_ps(c5, a, b);
        c6 = _mm256_fmadd_ps(c6, a, b), c7 = _mm256_fmadd_ps(c7, a, b), c8 = _mm256_fmadd_ps(c8, a, b);
        c9 = _mm256_fmadd_ps(c9, a, b), c10 = _mm256_fmadd_ps(c10, a, b), c11 = _mm256_fmadd_ps(c11, a, b);
        __asm__ volatile("" : "+x"(a), "+x"(b));
    }
    __m256 s = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(c0, c1), _mm256_add_ps(c2, c3)),
                             _mm256_add_ps(_mm256_add_ps(c4, c5), _mm256_add_ps(c6, c7)));
    s = _mm256_add_ps(s, _mm256_add_ps(_mm256_add_ps(c8, c9), _mm256_add_ps(c10, c11)));
    return _mm256_cvtss_f32(s);
}
static void ceilings(int threads) {
    const long it_i = 30000, it_f = 20000000;
    double ti = 0, tf = 0;
    volatile float sink = 0;
#pragma omp parallel num_threads(threads) reduction(max : ti, tf)
    {
        double t0 = now();
        sink += (float)peak_int8_loop(it_i);
        ti = now() - t0;
#pragma omp barrier
        t0 = now();
        sink += peak_fma_loop(it_f);
        tf = now() - t0;
    }
    printf("ceilings on %d threads: int8 block loop %.1f GOP/s, fp32 FMA %.1f GFLOP/s (ratio %.2f)\n",
           threads, threads * it_i * 64.0 * 8 * 64 / ti / 1e9,
           threads * it_f * 12.0 * 16 / tf / 1e9,
           (it_i * 64.0 * 8 * 64 / ti) / (it_f * 12.0 * 16 / tf));
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
    ceilings(threads);
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
    ceilings(threads);
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
