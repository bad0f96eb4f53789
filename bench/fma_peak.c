/* fma_peak: measures this machine's arithmetic peak with register-only loops.
 *
 *   fp32_fma   AVX-512 vfmadd231ps zmm: 16 fp32 lanes x (mul + add) = 32 flop per instruction.
 *              Without AVX-512: vfmadd231ps ymm, 8 lanes = 16 flop per instruction.
 *   bf16_dp    AVX-512 BF16 vdpbf16ps zmm: each of the 16 fp32 lanes accumulates two bf16
 *              products (a0*b0 + a1*b1), i.e. 32 bf16 multiply-adds = 64 flop per instruction
 *              (one multiply + one add per bf16 pair, the same convention as for fp32 FMA).
 *   amx_bf16   AMX tdpbf16ps on full 16x64-byte tiles: C(16x16 fp32) += A(16x32 bf16) * B(32x16 bf16)
 *              = 16*16*32 = 8192 multiply-adds = 16384 flop per instruction.
 *
 * Each loop keeps 16 independent accumulators in zmm registers (4 accumulator tiles for AMX),
 * enough to hide the FMA latency (4 cycles x 2 ports = 8 needed). The same loop runs on 1 thread
 * and on all online CPUs by default (OpenMP, one copy per thread; --threads LIST for others);
 * GFLOP/s counts all threads. Each configuration is run --reps times (default 7) after a warm-up
 * run; the median and the best run are reported.
 *
 * A clock estimate comes from a chain of dependent scalar register adds (1 cycle each): it is the
 * clock at scalar load, which may be higher than the clock under heavy AVX-512 load, so
 * flop/cycle figures derived from it are lower bounds. On a VM the host may also change it.
 *
 * Build: gcc -O2 -fopenmp -mavx512f -mfma -mavx512bf16 bench/fma_peak.c -o build/fma_peak
 * Usage: build/fma_peak [--json] [--reps N] [--ms M] [--threads 1,2] [--kernels fp32,bf16,amx]
 */
#define _GNU_SOURCE
#include <immintrin.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/syscall.h>
#include <cpuid.h>

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static volatile float g_sink;

/* ---- fp32 FMA: 16 accumulators, 16 FMAs per iteration ---------------------------------------- */
#define FLOP_PER_ITER_FP32 (16.0 * 16.0 * 2.0)

static void fp32_loop(long iters) {
    __m512 a = _mm512_set1_ps(0.999999f), b = _mm512_set1_ps(1e-7f);
    __m512 c0 = _mm512_set1_ps(0.0f), c1 = _mm512_set1_ps(0.1f), c2 = _mm512_set1_ps(0.2f),
           c3 = _mm512_set1_ps(0.3f), c4 = _mm512_set1_ps(0.4f), c5 = _mm512_set1_ps(0.5f),
           c6 = _mm512_set1_ps(0.6f), c7 = _mm512_set1_ps(0.7f), c8 = _mm512_set1_ps(0.8f),
           c9 = _mm512_set1_ps(0.9f), c10 = _mm512_set1_ps(1.0f), c11 = _mm512_set1_ps(1.1f),
           c12 = _mm512_set1_ps(1.2f), c13 = _mm512_set1_ps(1.3f), c14 = _mm512_set1_ps(1.4f),
           c15 = _mm512_set1_ps(1.5f);
    for (long i = 0; i < iters; i++) {
        c0 = _mm512_fmadd_ps(c0, a, b);   c1 = _mm512_fmadd_ps(c1, a, b);
        c2 = _mm512_fmadd_ps(c2, a, b);   c3 = _mm512_fmadd_ps(c3, a, b);
        c4 = _mm512_fmadd_ps(c4, a, b);   c5 = _mm512_fmadd_ps(c5, a, b);
        c6 = _mm512_fmadd_ps(c6, a, b);   c7 = _mm512_fmadd_ps(c7, a, b);
        c8 = _mm512_fmadd_ps(c8, a, b);   c9 = _mm512_fmadd_ps(c9, a, b);
        c10 = _mm512_fmadd_ps(c10, a, b); c11 = _mm512_fmadd_ps(c11, a, b);
        c12 = _mm512_fmadd_ps(c12, a, b); c13 = _mm512_fmadd_ps(c13, a, b);
        c14 = _mm512_fmadd_ps(c14, a, b); c15 = _mm512_fmadd_ps(c15, a, b);
    }
    __m512 s = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(c0, c1), _mm512_add_ps(c2, c3)),
                             _mm512_add_ps(_mm512_add_ps(c4, c5), _mm512_add_ps(c6, c7)));
    s = _mm512_add_ps(s, _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(c8, c9), _mm512_add_ps(c10, c11)),
                                       _mm512_add_ps(_mm512_add_ps(c12, c13), _mm512_add_ps(c14, c15))));
    g_sink = _mm512_reduce_add_ps(s);
}

/* ---- fp32 FMA on CPUs without AVX-512 (Zen 2/3, Haswell..Alder Lake): ymm, 8 lanes ---------- */
#define FLOP_PER_ITER_FP32_YMM (12.0 * 8.0 * 2.0)

__attribute__((target("avx2,fma")))
static void fp32_loop_ymm(long iters) {
    __m256 a = _mm256_set1_ps(0.999999f), b = _mm256_set1_ps(1e-7f);
    __m256 c0 = _mm256_set1_ps(0.0f), c1 = _mm256_set1_ps(0.1f), c2 = _mm256_set1_ps(0.2f),
           c3 = _mm256_set1_ps(0.3f), c4 = _mm256_set1_ps(0.4f), c5 = _mm256_set1_ps(0.5f),
           c6 = _mm256_set1_ps(0.6f), c7 = _mm256_set1_ps(0.7f), c8 = _mm256_set1_ps(0.8f),
           c9 = _mm256_set1_ps(0.9f), c10 = _mm256_set1_ps(1.0f), c11 = _mm256_set1_ps(1.1f);
    for (long i = 0; i < iters; i++) {   /* 12 accumulators: 16 ymm registers, 2 hold a and b */
        c0 = _mm256_fmadd_ps(c0, a, b);   c1 = _mm256_fmadd_ps(c1, a, b);
        c2 = _mm256_fmadd_ps(c2, a, b);   c3 = _mm256_fmadd_ps(c3, a, b);
        c4 = _mm256_fmadd_ps(c4, a, b);   c5 = _mm256_fmadd_ps(c5, a, b);
        c6 = _mm256_fmadd_ps(c6, a, b);   c7 = _mm256_fmadd_ps(c7, a, b);
        c8 = _mm256_fmadd_ps(c8, a, b);   c9 = _mm256_fmadd_ps(c9, a, b);
        c10 = _mm256_fmadd_ps(c10, a, b); c11 = _mm256_fmadd_ps(c11, a, b);
    }
    __m256 s = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(c0, c1), _mm256_add_ps(c2, c3)),
                             _mm256_add_ps(_mm256_add_ps(c4, c5), _mm256_add_ps(c6, c7)));
    s = _mm256_add_ps(s, _mm256_add_ps(_mm256_add_ps(c8, c9), _mm256_add_ps(c10, c11)));
    float out[8];
    _mm256_storeu_ps(out, s);
    g_sink = out[0] + out[7];
}

/* ---- bf16 dot-product: 16 accumulators, 16 vdpbf16ps per iteration ----------------------------- */
#define FLOP_PER_ITER_BF16 (16.0 * 32.0 * 2.0)

static void bf16_loop(long iters) {
    /* bf16 0x3f80 = 1.0, 0x3300 ~= 3e-8: products stay tiny, accumulators stay finite */
    __m512bh a = (__m512bh)_mm512_set1_epi16(0x3300), b = (__m512bh)_mm512_set1_epi16(0x3f80);
    __m512 c0 = _mm512_set1_ps(0.0f), c1 = _mm512_set1_ps(0.1f), c2 = _mm512_set1_ps(0.2f),
           c3 = _mm512_set1_ps(0.3f), c4 = _mm512_set1_ps(0.4f), c5 = _mm512_set1_ps(0.5f),
           c6 = _mm512_set1_ps(0.6f), c7 = _mm512_set1_ps(0.7f), c8 = _mm512_set1_ps(0.8f),
           c9 = _mm512_set1_ps(0.9f), c10 = _mm512_set1_ps(1.0f), c11 = _mm512_set1_ps(1.1f),
           c12 = _mm512_set1_ps(1.2f), c13 = _mm512_set1_ps(1.3f), c14 = _mm512_set1_ps(1.4f),
           c15 = _mm512_set1_ps(1.5f);
    for (long i = 0; i < iters; i++) {
        c0 = _mm512_dpbf16_ps(c0, a, b);   c1 = _mm512_dpbf16_ps(c1, a, b);
        c2 = _mm512_dpbf16_ps(c2, a, b);   c3 = _mm512_dpbf16_ps(c3, a, b);
        c4 = _mm512_dpbf16_ps(c4, a, b);   c5 = _mm512_dpbf16_ps(c5, a, b);
        c6 = _mm512_dpbf16_ps(c6, a, b);   c7 = _mm512_dpbf16_ps(c7, a, b);
        c8 = _mm512_dpbf16_ps(c8, a, b);   c9 = _mm512_dpbf16_ps(c9, a, b);
        c10 = _mm512_dpbf16_ps(c10, a, b); c11 = _mm512_dpbf16_ps(c11, a, b);
        c12 = _mm512_dpbf16_ps(c12, a, b); c13 = _mm512_dpbf16_ps(c13, a, b);
        c14 = _mm512_dpbf16_ps(c14, a, b); c15 = _mm512_dpbf16_ps(c15, a, b);
    }
    __m512 s = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(c0, c1), _mm512_add_ps(c2, c3)),
                             _mm512_add_ps(_mm512_add_ps(c4, c5), _mm512_add_ps(c6, c7)));
    s = _mm512_add_ps(s, _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(c8, c9), _mm512_add_ps(c10, c11)),
                                       _mm512_add_ps(_mm512_add_ps(c12, c13), _mm512_add_ps(c14, c15))));
    g_sink = _mm512_reduce_add_ps(s);
}

/* ---- AMX bf16: 4 accumulator tiles (tmm0-3), A in tmm4-5, B in tmm6-7 --------------------------- */
#define FLOP_PER_ITER_AMX (4.0 * 16.0 * 16.0 * 32.0 * 2.0)
#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18

static int amx_cpu_has(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return 0;
    return (d >> 22) & 1 /* amx-bf16 */ && (d >> 24) & 1 /* amx-tile */;
}

/* Asks the kernel for permission to use the AMX tile data state (per process, Linux >= 5.16). */
static int amx_request(void) {
    return syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0;
}

typedef struct __attribute__((packed)) {
    uint8_t palette_id, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} tile_config;

__attribute__((target("amx-tile,amx-bf16")))
static void amx_loop(long iters) {
    _Alignas(64) uint16_t abuf[16 * 32], bbuf[16 * 32];   /* per thread (stack) */
    _Alignas(64) float cbuf[16 * 16];
    tile_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette_id = 1;
    for (int t = 0; t < 8; t++) { cfg.colsb[t] = 64; cfg.rows[t] = 16; }
    for (int i = 0; i < 16 * 32; i++) { abuf[i] = 0x3300; bbuf[i] = 0x3f80; }
    _tile_loadconfig(&cfg);
    _tile_zero(0); _tile_zero(1); _tile_zero(2); _tile_zero(3);
    _tile_loadd(4, abuf, 64); _tile_loadd(5, abuf, 64);
    _tile_loadd(6, bbuf, 64); _tile_loadd(7, bbuf, 64);
    for (long i = 0; i < iters; i++) {
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
    }
    _tile_stored(0, cbuf, 64);
    g_sink = cbuf[0];
    _tile_release();
}

/* ---- clock estimate: a chain of dependent register-register adds, 1 cycle each ------------------
 * (not `add $imm, reg`: Golden Cove cores can fold small immediate adds and run such chains faster
 * than one per cycle). Best of 5 runs. */
static double clock_ghz(void) {
    const long n = 200000000;
    uint64_t one = 1;
    double best = 0;
    for (int r = 0; r < 5; r++) {
        uint64_t x = 0;
        double t0 = now_s();
        for (long i = 0; i < n; i += 8)
            __asm__ volatile("add %1, %0\n\tadd %1, %0\n\tadd %1, %0\n\tadd %1, %0\n\t"
                             "add %1, %0\n\tadd %1, %0\n\tadd %1, %0\n\tadd %1, %0"
                             : "+r"(x) : "r"(one));
        double t = now_s() - t0;
        double ghz = n / t * 1e-9;
        if (ghz > best) best = ghz;
    }
    return best;
}

/* ---- driver ------------------------------------------------------------------------------------- */
typedef void (*loop_fn)(long);

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

typedef struct { double median, best; } result;

static result run_kernel(loop_fn fn, double flop_per_iter, int threads, int reps, double target_ms,
                         int needs_amx) {
    /* calibrate the iteration count on one thread so one rep lasts about target_ms */
    long iters = 1 << 16;
    for (;;) {
        double t0 = now_s();
        fn(iters);
        double t = now_s() - t0;
        if (t > 0.02) { iters = (long)(iters * (target_ms * 1e-3) / t) + 1; break; }
        iters *= 4;
    }
    double *g = calloc(reps, sizeof *g);
    for (int r = 0; r < reps + 1; r++) {   /* rep 0 is a warm-up */
        double t0 = 0, t1 = 0;
#pragma omp parallel num_threads(threads)
        {
            if (needs_amx) amx_request();   /* permission is per process, harmless to repeat */
#pragma omp barrier
#pragma omp master
            t0 = now_s();
#pragma omp barrier
            fn(iters);
#pragma omp barrier
#pragma omp master
            t1 = now_s();
        }
        if (r > 0) g[r - 1] = flop_per_iter * iters * threads / (t1 - t0) * 1e-9;
    }
    qsort(g, reps, sizeof *g, cmp_double);
    result res = { reps % 2 ? g[reps / 2] : 0.5 * (g[reps / 2 - 1] + g[reps / 2]), g[reps - 1] };
    free(g);
    return res;
}

static void cpu_model(char *buf, size_t n) {
    snprintf(buf, n, "unknown");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        if (!strncmp(line, "model name", 10)) {
            char *p = strchr(line, ':');
            if (p) {
                p += 2;
                p[strcspn(p, "\n")] = 0;
                snprintf(buf, n, "%s", p);
            }
            break;
        }
    }
    fclose(f);
}

static int in_list(const char *list, const char *word) {
    size_t n = strlen(word);
    for (const char *p = list; (p = strstr(p, word)); p += n)
        if ((p == list || p[-1] == ',') && (p[n] == 0 || p[n] == ',')) return 1;
    return 0;
}

static void usage(const char *argv0) {
    fprintf(stderr,
            "usage: %s [--json] [--reps N] [--ms M] [--threads LIST] [--kernels LIST]\n"
            "  --threads LIST   comma list of thread counts (default 1,<online cpus>)\n"
            "  --kernels LIST   any of fp32,bf16,amx (default all that the CPU has)\n",
            argv0);
}

int main(int argc, char **argv) {
    int json = 0, reps = 7;
    double target_ms = 150;
    const char *threads_s = NULL, *kernels_s = "fp32,bf16,amx";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json")) json = 1;
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--ms") && i + 1 < argc) target_ms = atof(argv[++i]);
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc) threads_s = argv[++i];
        else if (!strcmp(argv[i], "--kernels") && i + 1 < argc) kernels_s = argv[++i];
        else { usage(argv[0]); return 2; }
    }
    if (reps < 1) reps = 1;
    int ncpu = (int)sysconf(_SC_NPROCESSORS_ONLN);
    enum { MAXT = 16 };
    int tlist[MAXT], nt = 0;
    if (threads_s) {
        char buf[256];
        snprintf(buf, sizeof buf, "%s", threads_s);
        for (char *tok = strtok(buf, ","); tok && nt < MAXT; tok = strtok(NULL, ","))
            if (atoi(tok) > 0) tlist[nt++] = atoi(tok);
    } else {
        tlist[nt++] = 1;
        if (ncpu > 1) tlist[nt++] = ncpu;
    }
    if (!nt) { usage(argv[0]); return 2; }

    __builtin_cpu_init();
    int has_f = __builtin_cpu_supports("avx512f");
    int has_ymm = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    int has_bf16 = 0;
    {
        unsigned a, b, c, d;
        if (__get_cpuid_count(7, 1, &a, &b, &c, &d)) has_bf16 = (a >> 5) & 1;   /* AVX512_BF16 */
    }
    int has_amx = in_list(kernels_s, "amx") && amx_cpu_has() && amx_request();
    char model[256];
    cpu_model(model, sizeof model);
    double ghz = clock_ghz();

    struct { const char *name, *key, *what; loop_fn fn; double fpi; int ok, amx; } k[] = {
        /* without AVX-512 the fp32 peak is the ymm one: same name, so the benchmarks find it */
        { "fp32_fma", "fp32", has_f ? "vfmadd231ps zmm, 32 flop/instr" : "vfmadd231ps ymm, 16 flop/instr",
          has_f ? fp32_loop : fp32_loop_ymm, has_f ? FLOP_PER_ITER_FP32 : FLOP_PER_ITER_FP32_YMM,
          has_f || has_ymm, 0 },
        { "bf16_dp", "bf16", "vdpbf16ps zmm, 64 flop/instr", bf16_loop, FLOP_PER_ITER_BF16, has_bf16, 0 },
        { "amx_bf16", "amx", "tdpbf16ps 16x16x32, 16384 flop/instr", amx_loop, FLOP_PER_ITER_AMX, has_amx, 1 },
    };
    enum { NK = 3 };
    int want[NK];
    result res[NK][MAXT];
    for (int i = 0; i < NK; i++) {
        want[i] = in_list(kernels_s, k[i].key);
        if (want[i] && k[i].ok)
            for (int t = 0; t < nt; t++)
                res[i][t] = run_kernel(k[i].fn, k[i].fpi, tlist[t], reps, target_ms, k[i].amx);
    }

    if (json) {
        printf("{\"cpu\": \"%s\", \"online_cpus\": %d, \"clock_ghz_scalar_est\": %.3f, \"reps\": %d, "
               "\"kernels\": {", model, ncpu, ghz, reps);
        int first = 1;
        for (int i = 0; i < NK; i++) {
            if (!want[i]) continue;
            printf("%s\"%s\": {\"what\": \"%s\", \"available\": %s", first ? "" : ", ", k[i].name,
                   k[i].what, k[i].ok ? "true" : "false");
            first = 0;
            if (k[i].ok) {
                printf(", \"gflops\": {");
                for (int t = 0; t < nt; t++)
                    printf("%s\"%d\": {\"median\": %.1f, \"best\": %.1f, \"flop_per_cycle_per_thread\": %.1f}",
                           t ? ", " : "", tlist[t], res[i][t].median, res[i][t].best,
                           res[i][t].median / tlist[t] / ghz);
                printf("}");
            }
            printf("}");
        }
        printf("}}\n");
    } else {
        printf("CPU: %s (%d online), scalar clock estimate %.2f GHz, %d reps of ~%.0f ms\n", model, ncpu,
               ghz, reps, target_ms);
        printf("%-10s %-38s %7s %14s %13s %13s\n", "kernel", "instruction", "threads", "GFLOP/s median",
               "GFLOP/s best", "flop/cyc/thr");
        for (int i = 0; i < NK; i++) {
            if (!want[i]) continue;
            if (!k[i].ok) {
                printf("%-10s %-38s %7s %14s\n", k[i].name, k[i].what, "-", "not available");
                continue;
            }
            for (int t = 0; t < nt; t++)
                printf("%-10s %-38s %7d %14.1f %13.1f %13.1f\n", k[i].name, k[i].what, tlist[t],
                       res[i][t].median, res[i][t].best, res[i][t].median / tlist[t] / ghz);
        }
        printf("flop/cyc/thr uses the scalar clock estimate; under AVX-512/AMX load the clock may be lower.\n");
    }
    return 0;
}
