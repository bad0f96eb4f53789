/* What the C micro-benchmarks of bench/ share: a deterministic random source, a clock (wall, or
 * process CPU time, steadier on a shared machine with 1 thread) and a comparison for qsort. */
#ifndef TB_BENCH_TIMING_H
#define TB_BENCH_TIMING_H

#include <omp.h>
#include <stdint.h>
#include <time.h>

static uint64_t bench_rng = 7;
static inline float frand(void) {
    bench_rng = bench_rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((bench_rng >> 40) / 8388608.0 - 1.0);
}

static int use_cpu; /* --cpu */
static inline double now(void) {
    if (!use_cpu) return omp_get_wtime();
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

static inline int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

#endif
