/* gemm_bench: times single-precision (and bf16) GEMM libraries at the shapes of our models, to
 * choose the engine's GEMM backend.
 *
 * Product: C (M x N, row-major, f32) = A (M x K, row-major) . op(B)
 *   layout "T":      B is stored N x K row-major (HF nn.Linear weight (out, in)), op = transpose;
 *                    this is the call the engine makes: X . W^T.
 *   layout "N":      B is stored K x N row-major (a pre-transposed copy), op = identity.
 *   layout "packed": oneDNN matmul only: weights reordered once, outside the timing, into the
 *                    blocked format the primitive asks for (format_tag any).
 *
 * Implementations (--impl, comma list, default all):
 *   openblas      cblas_sgemm from OpenBLAS (pthread build, dlopen'ed: --openblas PATH), with
 *                 the environment as given (OPENBLAS_CORETYPE is preset to Haswell here)
 *   openblas_auto the same with OPENBLAS_CORETYPE unset (OpenBLAS's own CPU detection)
 *   blis          cblas_sgemm from BLIS (OpenMP build, dlopen'ed: --blis PATH); threads set with
 *                 bli_thread_set_num_threads(); BLIS's own CPU detection
 *   blis_skx      the same with BLIS_ARCH_TYPE=0 (the AVX-512 'skx' sub-configuration): BLIS 0.9
 *                 falls back to 'haswell' when the CPU brand string does not tell it the number
 *                 of FMA units, as on this VM
 *   dnnl_sgemm    oneDNN dnnl_sgemm (row-major BLAS-like function)
 *   dnnl_matmul   oneDNN matmul primitive, f32; created once per shape (creation time reported),
 *                 executed repeatedly
 *   dnnl_gemm_bf16  oneDNN dnnl_gemm_bf16bf16f32 (bf16 A and B, f32 C)
 *   dnnl_matmul_bf16  oneDNN matmul primitive, bf16 src/weights, f32 dst
 * OpenBLAS and BLIS both export cblas_sgemm, so they are opened with dlopen(RTLD_LOCAL) instead of
 * being linked. Every (implementation, thread count) pair runs in its own forked child process so
 * that one library's spinning worker threads never steal cores from the next.
 *
 * Timing: per shape two untimed calls (the first, then one that calibrates how many calls make
 * one rep last at least --min-ms), then --reps reps; the median time per call is reported. bf16
 * variants convert the f32 inputs to bf16 outside the timing. Every result is checked at 64 sampled entries against
 * a double-precision reference (computed from the bf16-rounded inputs for the bf16 variants).
 * The machine is shared: during the reps the CPU time used by other processes is measured (from
 * /proc/stat) and printed as "other-load" (in cores); above --max-other (default 0.25) plus the
 * number of cores the measurement leaves free (online CPUs - threads), the reps are redone, up to
 * --tries (default 4) times, and the least disturbed try is kept (marked BUSY if still above).
 * With --wait-idle S, each try first waits up to S seconds for the other processes to go quiet
 * (at most that many cores over 0.5 s).
 *
 * Build (see dev/README.md):
 *   gcc -O2 -std=c11 -fopenmp dev/gemm_bench.c -o build/gemm_bench -ldnnl -ldl -lm
 * Usage:
 *   build/gemm_bench [--impl LIST] [--threads LIST] [--shapes linear,attn] [--reps N] [--min-ms X]
 *                    [--peak GFLOPS_PER_THREAD] [--jsonl FILE] [--alt 0|1] [--filter SUBSTR]
 *                    [--max-other CORES] [--tries N] [--wait-idle S] [--openblas PATH] [--blis PATH]
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <oneapi/dnnl/dnnl.h>

/* Exported by libdnnl 2.x (row-major, like dnnl_sgemm) but not declared in its C header. */
dnnl_status_t dnnl_gemm_bf16bf16f32(char transa, char transb, dnnl_dim_t M, dnnl_dim_t N,
                                    dnnl_dim_t K, float alpha, const uint16_t *A, dnnl_dim_t lda,
                                    const uint16_t *B, dnnl_dim_t ldb, float beta, float *C,
                                    dnnl_dim_t ldc);

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Busy CPU seconds of the whole machine (all processes, from /proc/stat) */
static double machine_busy_s(void) {
    FILE *f = fopen("/proc/stat", "r");
    if (!f) return 0;
    unsigned long long v[8] = { 0 };
    int n = fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3], &v[4],
                   &v[5], &v[6], &v[7]);
    fclose(f);
    if (n < 8) return 0;
    /* user nice system [idle iowait] irq softirq steal */
    return (double)(v[0] + v[1] + v[2] + v[5] + v[6] + v[7]) / sysconf(_SC_CLK_TCK);
}

static double process_cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Waits (up to max_s) until other processes use at most threshold cores over a 0.5 s window. */
static double wait_idle(double max_s, double threshold) {
    double start = now_s(), load = 0;
    if (max_s <= 0) return -1;
    do {
        double b0 = machine_busy_s(), c0 = process_cpu_s(), w0 = now_s();
        struct timespec d = { 0, 500000000 };
        nanosleep(&d, NULL);
        load = ((machine_busy_s() - b0) - (process_cpu_s() - c0)) / (now_s() - w0);
        if (load <= threshold) break;
    } while (now_s() - start < max_s);
    return load;
}

static void die(const char *msg) {
    fprintf(stderr, "gemm_bench: %s\n", msg);
    fflush(stdout);
    _exit(1);
}

#define DNNL_CHECK(x)                                                                   \
    do {                                                                                \
        dnnl_status_t st_ = (x);                                                        \
        if (st_ != dnnl_success) {                                                      \
            fprintf(stderr, "gemm_bench: %s failed: status %d (line %d)\n", #x, (int)st_, \
                    __LINE__);                                                          \
            fflush(stdout);                                                             \
            _exit(1);                                                                   \
        }                                                                               \
    } while (0)

/* ---- shapes --------------------------------------------------------------------------------- */
typedef struct {
    const char *group; /* "linear" or "attn" */
    const char *name;
    long M, N, K;
    char natural;      /* 'T': B stored N x K;  'N': B stored K x N */
    int alt;           /* also time the other layout (and oneDNN matmul "packed") */
} shape;

static const shape SHAPES[] = {
    { "linear", "qkv  M=1568 (VideoMAE-B 16f)", 1568, 2304, 768, 'T', 1 },
    { "linear", "proj M=1568", 1568, 768, 768, 'T', 1 },
    { "linear", "fc1  M=1568", 1568, 3072, 768, 'T', 1 },
    { "linear", "fc2  M=1568", 1568, 768, 3072, 'T', 1 },
    { "linear", "qkv  M=1576 (TimeSformer 8x197)", 1576, 2304, 768, 'T', 1 },
    { "linear", "proj M=1576", 1576, 768, 768, 'T', 1 },
    { "linear", "fc1  M=1576", 1576, 3072, 768, 'T', 1 },
    { "linear", "fc2  M=1576", 1576, 768, 3072, 'T', 1 },
    { "linear", "qkv  M=3137 (ViViT-B)", 3137, 2304, 768, 'T', 1 },
    { "linear", "proj M=3137", 3137, 768, 768, 'T', 1 },
    { "linear", "fc1  M=3137", 3137, 3072, 768, 'T', 1 },
    { "linear", "fc2  M=3137", 3137, 768, 3072, 'T', 1 },
    { "attn", "scores 197 (Q.K^T)", 197, 197, 64, 'T', 0 },
    { "attn", "context 197 (P.V)", 197, 64, 197, 'N', 0 },
    { "attn", "tiny 8x8x64 (call overhead)", 8, 8, 64, 'T', 0 },
    { "attn", "scores 1568 (Q.K^T)", 1568, 1568, 64, 'T', 0 },
    { "attn", "scores 3137 (Q.K^T)", 3137, 3137, 64, 'T', 0 },
    { "attn", "context 3137 (P.V)", 3137, 64, 3137, 'N', 0 },
    { "attn", "q-tile 256 vs 3137 keys", 256, 3137, 64, 'T', 0 },
};
#define NSHAPES ((int)(sizeof SHAPES / sizeof SHAPES[0]))

/* ---- dlopen'ed BLAS -------------------------------------------------------------------------- */
enum { CblasRowMajor = 101, CblasNoTrans = 111, CblasTrans = 112 };
typedef void (*cblas_sgemm_fn)(int, int, int, int, int, int, float, const float *, int,
                               const float *, int, float, float *, int);
static cblas_sgemm_fn p_sgemm;
static char g_libinfo[512];

static void *open_lib(const char *path) {
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        fprintf(stderr, "gemm_bench: cannot open %s: %s\n", path, dlerror());
        fflush(stdout);
        _exit(1);
    }
    return h;
}

static void setup_openblas(const char *path, int threads) {
    void *h = open_lib(path);
    p_sgemm = (cblas_sgemm_fn)dlsym(h, "cblas_sgemm");
    void (*set_threads)(int) = (void (*)(int))dlsym(h, "openblas_set_num_threads");
    char *(*corename)(void) = (char *(*)(void))dlsym(h, "openblas_get_corename");
    char *(*config)(void) = (char *(*)(void))dlsym(h, "openblas_get_config");
    if (!p_sgemm || !set_threads) die("OpenBLAS symbols missing");
    set_threads(threads);
    const char *ct = getenv("OPENBLAS_CORETYPE");
    snprintf(g_libinfo, sizeof g_libinfo, "OpenBLAS %s; core %s; OPENBLAS_CORETYPE=%s",
             config ? config() : "?", corename ? corename() : "?", ct ? ct : "(unset)");
}

static void setup_blis(const char *path, int threads) {
    void *h = open_lib(path);
    p_sgemm = (cblas_sgemm_fn)dlsym(h, "cblas_sgemm");
    void (*set_threads)(long) = (void (*)(long))dlsym(h, "bli_thread_set_num_threads");
    int (*arch_id)(void) = (int (*)(void))dlsym(h, "bli_arch_query_id");
    const char *(*arch_str)(int) = (const char *(*)(int))dlsym(h, "bli_arch_string");
    const char *(*ver)(void) = (const char *(*)(void))dlsym(h, "bli_info_get_version_str");
    long (*omp_on)(void) = (long (*)(void))dlsym(h, "bli_info_get_enable_openmp");
    long (*pth_on)(void) = (long (*)(void))dlsym(h, "bli_info_get_enable_pthreads");
    const char *thr = omp_on && omp_on() ? "openmp" : pth_on && pth_on() ? "pthreads" : "none";
    if (!p_sgemm || !set_threads) die("BLIS symbols missing");
    set_threads(threads);
    snprintf(g_libinfo, sizeof g_libinfo, "BLIS %s; arch %s; threading %s", ver ? ver() : "?",
             arch_id && arch_str ? arch_str(arch_id()) : "?", thr);
}

/* ---- oneDNN --------------------------------------------------------------------------------- */
static dnnl_engine_t g_eng;
static dnnl_stream_t g_strm;

static const char *isa_name(dnnl_cpu_isa_t isa) {
    switch ((int)isa) {
    case dnnl_cpu_isa_avx2: return "avx2";
    case dnnl_cpu_isa_avx512_core: return "avx512_core";
    case dnnl_cpu_isa_avx512_core_vnni: return "avx512_core_vnni";
    case dnnl_cpu_isa_avx512_core_bf16: return "avx512_core_bf16";
    case dnnl_cpu_isa_avx512_core_amx: return "avx512_core_amx";
    case dnnl_cpu_isa_avx2_vnni: return "avx2_vnni";
    default: return "other";
    }
}

static void setup_dnnl(int threads) {
    omp_set_num_threads(threads);
    DNNL_CHECK(dnnl_engine_create(&g_eng, dnnl_cpu, 0));
    DNNL_CHECK(dnnl_stream_create(&g_strm, g_eng, dnnl_stream_default_flags));
    const dnnl_version_t *v = dnnl_version();
    const char *max_isa = getenv("ONEDNN_MAX_CPU_ISA");
    if (!max_isa) max_isa = getenv("DNNL_MAX_CPU_ISA");
    snprintf(g_libinfo, sizeof g_libinfo, "oneDNN %d.%d.%d (%s); effective ISA %s%s%s", v->major,
             v->minor, v->patch, v->hash ? v->hash : "", isa_name(dnnl_get_effective_cpu_isa()),
             max_isa ? "; max ISA env " : "", max_isa ? max_isa : "");
}

typedef struct {
    dnnl_primitive_t prim;
    dnnl_memory_t src, wei, dst;
    void *wei_packed;  /* owned buffer for the "packed" layout */
    double create_ms, reorder_ms;
    char impl[128];
} matmul_obj;

/* Creates the matmul C = A . B, dims {M,K} x {K,N} -> {M,N}. B layout: 'T' (stored N x K, tag ba),
 * 'N' (tag ab), 'P' (format any, reordered from an N x K source). */
static void matmul_create(matmul_obj *o, long M, long N, long K, char layout, dnnl_data_type_t dt,
                          void *A, void *B, float *C) {
    memset(o, 0, sizeof *o);
    dnnl_dims_t a_dims = { M, K }, b_dims = { K, N }, c_dims = { M, N };
    dnnl_memory_desc_t a_md, b_md, c_md, b_user_md;
    double t0 = now_s();
    DNNL_CHECK(dnnl_memory_desc_init_by_tag(&a_md, 2, a_dims, dt, dnnl_ab));
    DNNL_CHECK(dnnl_memory_desc_init_by_tag(&b_user_md, 2, b_dims, dt, layout == 'N' ? dnnl_ab : dnnl_ba));
    if (layout == 'P') DNNL_CHECK(dnnl_memory_desc_init_by_tag(&b_md, 2, b_dims, dt, dnnl_format_tag_any));
    else b_md = b_user_md;
    DNNL_CHECK(dnnl_memory_desc_init_by_tag(&c_md, 2, c_dims, dnnl_f32, dnnl_ab));
    dnnl_matmul_desc_t desc;
    DNNL_CHECK(dnnl_matmul_desc_init(&desc, &a_md, &b_md, NULL, &c_md));
    dnnl_primitive_desc_t pd;
    DNNL_CHECK(dnnl_primitive_desc_create(&pd, &desc, NULL, g_eng, NULL));
    DNNL_CHECK(dnnl_primitive_create(&o->prim, pd));
    o->create_ms = (now_s() - t0) * 1e3;
    const char *impl = NULL;
    DNNL_CHECK(dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl));
    snprintf(o->impl, sizeof o->impl, "%s", impl ? impl : "?");
    const dnnl_memory_desc_t *wmd = dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
    DNNL_CHECK(dnnl_memory_create(&o->src, &a_md, g_eng, A));
    DNNL_CHECK(dnnl_memory_create(&o->dst, &c_md, g_eng, C));
    if (layout == 'P') {
        t0 = now_s();
        size_t sz = dnnl_memory_desc_get_size(wmd);
        o->wei_packed = aligned_alloc(64, (sz + 63) / 64 * 64);
        dnnl_memory_t user;
        DNNL_CHECK(dnnl_memory_create(&user, &b_user_md, g_eng, B));
        DNNL_CHECK(dnnl_memory_create(&o->wei, wmd, g_eng, o->wei_packed));
        dnnl_primitive_desc_t rpd;
        DNNL_CHECK(dnnl_reorder_primitive_desc_create(&rpd, &b_user_md, g_eng, wmd, g_eng, NULL));
        dnnl_primitive_t r;
        DNNL_CHECK(dnnl_primitive_create(&r, rpd));
        dnnl_exec_arg_t args[2] = { { DNNL_ARG_FROM, user }, { DNNL_ARG_TO, o->wei } };
        DNNL_CHECK(dnnl_primitive_execute(r, g_strm, 2, args));
        DNNL_CHECK(dnnl_stream_wait(g_strm));
        dnnl_primitive_destroy(r);
        dnnl_primitive_desc_destroy(rpd);
        dnnl_memory_destroy(user);
        o->reorder_ms = (now_s() - t0) * 1e3;
    } else {
        DNNL_CHECK(dnnl_memory_create(&o->wei, &b_md, g_eng, B));
    }
    dnnl_primitive_desc_destroy(pd);
}

static void matmul_run(matmul_obj *o) {
    dnnl_exec_arg_t args[3] = { { DNNL_ARG_SRC, o->src }, { DNNL_ARG_WEIGHTS, o->wei },
                                { DNNL_ARG_DST, o->dst } };
    DNNL_CHECK(dnnl_primitive_execute(o->prim, g_strm, 3, args));
    DNNL_CHECK(dnnl_stream_wait(g_strm));
}

static void matmul_destroy(matmul_obj *o) {
    dnnl_primitive_destroy(o->prim);
    dnnl_memory_destroy(o->src);
    dnnl_memory_destroy(o->wei);
    dnnl_memory_destroy(o->dst);
    free(o->wei_packed);
}

/* ---- data ----------------------------------------------------------------------------------- */
static uint64_t g_rng = 0x9E3779B97F4A7C15ull;
static float frand(void) { /* uniform in [-1, 1) */
    g_rng ^= g_rng << 13; g_rng ^= g_rng >> 7; g_rng ^= g_rng << 17;
    return (float)((g_rng >> 40) * (1.0 / (1ull << 23)) - 1.0);
}

static uint16_t f2bf(float f) { /* round to nearest even */
    uint32_t u;
    memcpy(&u, &f, 4);
    u += 0x7FFF + ((u >> 16) & 1);
    return (uint16_t)(u >> 16);
}
static float bf2f(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static void *xalloc(size_t bytes) {
    void *p = aligned_alloc(64, (bytes + 63) / 64 * 64);
    if (!p) die("out of memory");
    return p;
}

/* ---- one measurement -------------------------------------------------------------------------- */
typedef enum {
    I_OPENBLAS, I_OPENBLAS_AUTO, I_BLIS, I_BLIS_SKX, I_DNNL_SGEMM, I_DNNL_MATMUL, I_DNNL_GEMM_BF16,
    I_DNNL_MATMUL_BF16, NIMPL
} impl_id;
static const char *IMPL_NAMES[NIMPL] = { "openblas", "openblas_auto", "blis", "blis_skx", "dnnl_sgemm",
                                         "dnnl_matmul", "dnnl_gemm_bf16", "dnnl_matmul_bf16" };

typedef struct {
    int reps, tries;
    double min_ms, peak_per_thread, max_other, wait_idle_s;
    FILE *jsonl;
} opts;

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void measure(impl_id impl, int threads, const shape *s, char layout, const opts *o) {
    const long M = s->M, N = s->N, K = s->K;
    const int bf16 = impl == I_DNNL_GEMM_BF16 || impl == I_DNNL_MATMUL_BF16;
    float *A = xalloc(sizeof(float) * M * K), *B = xalloc(sizeof(float) * N * K),
          *C = xalloc(sizeof(float) * M * N);
    uint16_t *Ah = NULL, *Bh = NULL;
    /* B values are indexed as b(k, n); storage: 'N' -> B[k*N + n], 'T'/'P' -> B[n*K + k] */
    for (long i = 0; i < M * K; i++) A[i] = frand();
    for (long i = 0; i < N * K; i++) B[i] = frand();
    memset(C, 0, sizeof(float) * M * N);
    if (bf16) {
        Ah = xalloc(2 * M * K);
        Bh = xalloc(2 * N * K);
        for (long i = 0; i < M * K; i++) Ah[i] = f2bf(A[i]);
        for (long i = 0; i < N * K; i++) Bh[i] = f2bf(B[i]);
    }
    const int bT = layout != 'N';
    const long ldb = bT ? K : N;
    matmul_obj mm;
    int have_mm = 0;
    if (impl == I_DNNL_MATMUL || impl == I_DNNL_MATMUL_BF16) {
        matmul_create(&mm, M, N, K, layout, bf16 ? dnnl_bf16 : dnnl_f32, bf16 ? (void *)Ah : (void *)A,
                      bf16 ? (void *)Bh : (void *)B, C);
        have_mm = 1;
    }

#define CALL()                                                                                     \
    do {                                                                                           \
        switch (impl) {                                                                            \
        case I_OPENBLAS:                                                                           \
        case I_OPENBLAS_AUTO:                                                                      \
        case I_BLIS:                                                                               \
        case I_BLIS_SKX:                                                                           \
            p_sgemm(CblasRowMajor, CblasNoTrans, bT ? CblasTrans : CblasNoTrans, (int)M, (int)N,   \
                    (int)K, 1.0f, A, (int)K, B, (int)ldb, 0.0f, C, (int)N);                        \
            break;                                                                                 \
        case I_DNNL_SGEMM:                                                                         \
            DNNL_CHECK(dnnl_sgemm('N', bT ? 'T' : 'N', M, N, K, 1.0f, A, K, B, ldb, 0.0f, C, N));  \
            break;                                                                                 \
        case I_DNNL_GEMM_BF16:                                                                     \
            DNNL_CHECK(dnnl_gemm_bf16bf16f32('N', bT ? 'T' : 'N', M, N, K, 1.0f, Ah, K, Bh, ldb,   \
                                             0.0f, C, N));                                          \
            break;                                                                                 \
        default: matmul_run(&mm); break;                                                           \
        }                                                                                          \
    } while (0)

    /* warm-up + calibration */
    double t0 = now_s();
    CALL();
    double first_ms = (now_s() - t0) * 1e3;
    t0 = now_s();
    CALL();
    double t1 = now_s() - t0;
    long inner = 1;
    if (t1 * 1e3 < o->min_ms) inner = (long)(o->min_ms * 1e-3 / (t1 > 1e-7 ? t1 : 1e-7)) + 1;

    /* check 64 sampled entries against a double reference */
    double max_err = 0;
    for (int t = 0; t < 64; t++) {
        long i = (long)((frand() * 0.5 + 0.5) * M) % M, j = (long)((frand() * 0.5 + 0.5) * N) % N;
        double ref = 0, mag = 0;
        for (long k = 0; k < K; k++) {
            float a = A[i * K + k], b = bT ? B[j * K + k] : B[k * N + j];
            if (bf16) { a = bf2f(f2bf(a)); b = bf2f(f2bf(b)); }
            ref += (double)a * b;
            mag += fabs((double)a * b);
        }
        double e = fabs(C[i * N + j] - ref) / (mag > 0 ? mag : 1);
        if (e > max_err) max_err = e;
    }
    const int ok = max_err < 1e-4;

    /* Timed reps. The CPU time other processes used meanwhile (machine busy time from /proc/stat
     * minus this process's CPU time, in cores) is recorded; if it exceeds --max-other the reps are
     * redone, up to --tries times, keeping the least disturbed try. */
    double *ms = xalloc(sizeof(double) * o->reps), *best_ms = xalloc(sizeof(double) * o->reps);
    /* others may use the cores this measurement leaves free without competing with it */
    const long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    const double allowed = o->max_other + (ncpu > threads ? ncpu - threads : 0);
    double other = 1e9;
    int tries = 0;
    while (tries < o->tries) {
        tries++;
        wait_idle(o->wait_idle_s, allowed);
        double busy0 = machine_busy_s(), cpu0 = process_cpu_s(), w0 = now_s();
        for (int r = 0; r < o->reps; r++) {
            t0 = now_s();
            for (long c = 0; c < inner; c++) CALL();
            ms[r] = (now_s() - t0) * 1e3 / inner;
        }
        double wall = now_s() - w0;
        double oth = ((machine_busy_s() - busy0) - (process_cpu_s() - cpu0)) / wall;
        if (oth < 0) oth = 0;
        if (oth < other) {
            other = oth;
            memcpy(best_ms, ms, sizeof(double) * o->reps);
        }
        if (other <= allowed) break;
    }
    memcpy(ms, best_ms, sizeof(double) * o->reps);
    free(best_ms);
    qsort(ms, o->reps, sizeof *ms, cmp_double);
    double med = o->reps % 2 ? ms[o->reps / 2] : 0.5 * (ms[o->reps / 2 - 1] + ms[o->reps / 2]);
    double gflops = 2.0 * M * N * K / (med * 1e-3) * 1e-9;
    double pct = o->peak_per_thread > 0 ? 100.0 * gflops / (o->peak_per_thread * threads) : -1;
    const char *lay = layout == 'P' ? "packed" : layout == 'T' ? "T" : "N";
    char timebuf[32];
    if (med < 1.0) snprintf(timebuf, sizeof timebuf, "%8.1f us", med * 1e3);
    else snprintf(timebuf, sizeof timebuf, "%8.2f ms", med);
    printf("%-17s %2d  %-33s %5ld %5ld %5ld  %-6s %s %8.1f", IMPL_NAMES[impl], threads, s->name, M, N,
           K, lay, timebuf, gflops);
    if (pct >= 0) printf(" %5.1f%%", pct);
    if (have_mm) printf("  create %.2f ms", mm.create_ms);
    if (have_mm && layout == 'P') printf(" reorder %.2f ms", mm.reorder_ms);
    if (have_mm) printf("  [%s]", mm.impl);
    printf("  first-call %.2f ms  other-load %.2f%s%s\n", first_ms, other,
           other > allowed ? " BUSY" : "", ok ? "" : "  CHECK FAILED");
    if (!ok) printf("    max relative error %.3g\n", max_err);
    fflush(stdout);
    if (o->jsonl) {
        fprintf(o->jsonl,
                "{\"impl\": \"%s\", \"threads\": %d, \"group\": \"%s\", \"shape\": \"%s\", \"M\": %ld, "
                "\"N\": %ld, \"K\": %ld, \"layout\": \"%s\", \"ms_median\": %.6f, \"ms_min\": %.6f, "
                "\"ms_max\": %.6f, \"reps\": %d, \"calls_per_rep\": %ld, \"gflops\": %.3f, "
                "\"pct_peak\": %.2f, \"first_call_ms\": %.4f, \"create_ms\": %.4f, \"reorder_ms\": %.4f, "
                "\"dnnl_impl\": \"%s\", \"max_rel_err\": %.3g, \"ok\": %s, \"other_load\": %.3f, "
                "\"tries\": %d, \"lib\": \"%s\"}\n",
                IMPL_NAMES[impl], threads, s->group, s->name, M, N, K, lay, med, ms[0],
                ms[o->reps - 1], o->reps, inner, gflops, pct, first_ms, have_mm ? mm.create_ms : 0.0,
                have_mm ? mm.reorder_ms : 0.0, have_mm ? mm.impl : "", max_err, ok ? "true" : "false",
                other, tries, g_libinfo);
        fflush(o->jsonl);
    }
    if (have_mm) matmul_destroy(&mm);
    free(ms); free(A); free(B); free(C); free(Ah); free(Bh);
#undef CALL
}

/* ---- driver --------------------------------------------------------------------------------- */
static int in_list(const char *list, const char *word) {
    size_t n = strlen(word);
    for (const char *p = list; (p = strstr(p, word)); p += n)
        if ((p == list || p[-1] == ',') && (p[n] == 0 || p[n] == ',')) return 1;
    return 0;
}

static void child(impl_id impl, int threads, const char *groups, const char *filter, int alt,
                  const char *openblas_path, const char *blis_path, const opts *o) {
    switch (impl) {
    case I_OPENBLAS: setup_openblas(openblas_path, threads); break;
    case I_OPENBLAS_AUTO:   /* OpenBLAS's own CPU detection instead of the preset core type */
        unsetenv("OPENBLAS_CORETYPE");
        setup_openblas(openblas_path, threads);
        break;
    case I_BLIS: setup_blis(blis_path, threads); omp_set_num_threads(threads); break;
    case I_BLIS_SKX:   /* BLIS 0.9 picks 'haswell' when it cannot count the FMA units; force skx */
        setenv("BLIS_ARCH_TYPE", "0", 1);   /* arch_t id 0 = BLIS_ARCH_SKX in BLIS 0.9 */
        setup_blis(blis_path, threads);
        omp_set_num_threads(threads);
        break;
    default: setup_dnnl(threads); break;
    }
    printf("# %s, %d thread(s): %s\n", IMPL_NAMES[impl], threads, g_libinfo);
    fflush(stdout);
    const int is_mm = impl == I_DNNL_MATMUL || impl == I_DNNL_MATMUL_BF16;
    for (int i = 0; i < NSHAPES; i++) {
        const shape *s = &SHAPES[i];
        if (!in_list(groups, s->group)) continue;
        if (filter && !strstr(s->name, filter)) continue;
        measure(impl, threads, s, s->natural, o);
        if (s->alt && alt) {
            measure(impl, threads, s, s->natural == 'T' ? 'N' : 'T', o);
            if (is_mm) measure(impl, threads, s, 'P', o);
        }
    }
}

int main(int argc, char **argv) {
    const char *impls =
        "openblas,openblas_auto,blis,blis_skx,dnnl_sgemm,dnnl_matmul,dnnl_gemm_bf16,dnnl_matmul_bf16";
    const char *threads_s = "1,2", *groups = "linear,attn", *jsonl = NULL, *filter = NULL;
    const char *openblas_path = "/usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.so.0";
    const char *blis_path = "/usr/lib/x86_64-linux-gnu/blis-openmp/libblis.so.4";
    int alt = 1;
    opts o = { 7, 4, 50.0, 0.0, 0.25, 0.0, NULL };
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--impl") && v) impls = v, i++;
        else if (!strcmp(a, "--threads") && v) threads_s = v, i++;
        else if (!strcmp(a, "--shapes") && v) groups = v, i++;
        else if (!strcmp(a, "--filter") && v) filter = v, i++;
        else if (!strcmp(a, "--reps") && v) o.reps = atoi(v), i++;
        else if (!strcmp(a, "--min-ms") && v) o.min_ms = atof(v), i++;
        else if (!strcmp(a, "--peak") && v) o.peak_per_thread = atof(v), i++;
        else if (!strcmp(a, "--max-other") && v) o.max_other = atof(v), i++;
        else if (!strcmp(a, "--tries") && v) o.tries = atoi(v), i++;
        else if (!strcmp(a, "--wait-idle") && v) o.wait_idle_s = atof(v), i++;
        else if (!strcmp(a, "--jsonl") && v) jsonl = v, i++;
        else if (!strcmp(a, "--alt") && v) alt = atoi(v), i++;
        else if (!strcmp(a, "--openblas") && v) openblas_path = v, i++;
        else if (!strcmp(a, "--blis") && v) blis_path = v, i++;
        else {
            fprintf(stderr,
                    "usage: %s [--impl LIST] [--threads LIST] [--shapes linear,attn] [--filter SUBSTR]\n"
                    "          [--reps N] [--min-ms X] [--peak GFLOPS_PER_THREAD] [--jsonl FILE] [--alt 0|1]\n"
                    "          [--max-other CORES] [--tries N] [--wait-idle SECONDS]\n"
                    "          [--openblas PATH] [--blis PATH]\n"
                    "impls: openblas openblas_auto blis blis_skx dnnl_sgemm dnnl_matmul dnnl_gemm_bf16\n"
                    "       dnnl_matmul_bf16\n",
                    argv[0]);
            return 2;
        }
    }
    if (o.reps < 1) o.reps = 1;
    if (o.tries < 1) o.tries = 1;
    printf("%-17s %2s  %-33s %5s %5s %5s  %-6s %11s %8s%s\n", "impl", "T", "shape", "M", "N", "K",
           "B", "median", "GFLOP/s", o.peak_per_thread > 0 ? "  %peak" : "");
    fflush(stdout);
    int status_all = 0;
    for (int ii = 0; ii < NIMPL; ii++) {
        if (!in_list(impls, IMPL_NAMES[ii])) continue;
        char tbuf[64];
        snprintf(tbuf, sizeof tbuf, "%s", threads_s);
        for (char *tok = strtok(tbuf, ","); tok; tok = strtok(NULL, ",")) {
            int t = atoi(tok);
            if (t < 1) continue;
            fflush(stdout);
            pid_t pid = fork();
            if (pid < 0) die("fork failed");
            if (pid == 0) {
                if (jsonl) o.jsonl = fopen(jsonl, "a");
                child((impl_id)ii, t, groups, filter, alt, openblas_path, blis_path, &o);
                if (o.jsonl) fclose(o.jsonl);
                fflush(stdout);
                _exit(0);
            }
            int st;
            waitpid(pid, &st, 0);
            if (!WIFEXITED(st) || WEXITSTATUS(st)) {
                fprintf(stderr, "gemm_bench: %s with %d threads failed\n", IMPL_NAMES[ii], t);
                status_all = 1;
            }
        }
    }
    return status_all;
}
