/* cudaemu: the CUDA runtime and cuBLASLt subsets of cuda_runtime.h and cublasLt.h, on the CPU.
 *
 * Strict where a GPU is, so that a bug that would fault or read garbage on a GPU fails here:
 *  - device memory (cudaMalloc) is its own mapping, filled with NaN bytes when allocated (a GPU's
 *    memory is not zeroed), followed by an unmapped guard page, and unreadable to the host except
 *    while a kernel, a copy or a product runs: host code that reads or writes it stops the program
 *    with a message naming the allocation;
 *  - a kernel's pointer arguments, a copy's operands and a product's operands must be device
 *    memory (or pinned host memory, which a GPU can address), and a copy must stay inside its
 *    allocation and match its direction;
 *  - launch configurations are checked as CUDA does (at most 1024 threads a block, grid y and z
 *    at most 65535);
 *  - __syncthreads waits for every thread of the block, the warp shuffles for every live lane of
 *    the warp; a barrier some threads never reach (they returned, or wait at another) is reported.
 * Each violation is printed to stderr, and the program's exit status is then 3 (atexit).
 * TB_CUDAEMU_STATS=1 prints the launches, host-device copies and pointer queries
 * (cudaPointerGetAttributes) at exit (tb_cudaemu_copies: the copies so far, for tests),
 * TB_CUDAEMU_TRACE=1 where each host-to-device copy comes from; TB_CUDAEMU_PROTECT=0 leaves
 * device memory readable (faster, fewer checks). */
#include "cublasLt.h"
#include "cuda_runtime.h"

#include <execinfo.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include <map>
#include <mutex>
#include <vector>

/* ---- reports ---- */
static int g_violations;
static bool g_in_kernel;     /* a kernel runs */
static const char *g_kernel; /* its name */
static struct {
    long launches, threads, h2d, d2h, d2d, h2d_bytes, d2h_bytes, products, queries;
    long default_stream; /* launches, copies, sets and products on the default stream */
} g_stats;
/* the last error, per host thread as CUDA keeps it */
static thread_local cudaError_t g_last = cudaSuccess;

static void report_at_exit(void) {
    if (getenv("TB_CUDAEMU_STATS"))
        fprintf(stderr,
                "cudaemu: %ld launches (%ld threads), %ld products; copies: %ld host-to-device "
                "(%ld bytes), %ld device-to-host (%ld bytes), %ld device-to-device; %ld pointer "
                "queries; %ld calls on the default stream\n",
                g_stats.launches, g_stats.threads, g_stats.products, g_stats.h2d,
                g_stats.h2d_bytes, g_stats.d2h, g_stats.d2h_bytes, g_stats.d2d, g_stats.queries,
                g_stats.default_stream);
    if (g_violations) {
        fprintf(stderr, "cudaemu: %d violation%s (above): failing the run\n", g_violations,
                g_violations == 1 ? "" : "s");
        fflush(stderr);
        _exit(3);
    }
}
/* The host-device copies so far, for a test that counts a step's (tests/gpu_grads.c finds it as
 * a weak symbol, absent in a build for a GPU). */
extern "C" void tb_cudaemu_copies(long *h2d, long *h2d_bytes, long *d2h, long *d2h_bytes) {
    *h2d = g_stats.h2d, *h2d_bytes = g_stats.h2d_bytes;
    *d2h = g_stats.d2h, *d2h_bytes = g_stats.d2h_bytes;
}
/* The calls so far that ran on the default stream (a launch, copy, set or product given stream
 * 0, or a synchronous cudaMemcpy / cudaMemset): a backend whose instances each have their own
 * stream makes none after load (tests/gpu_grads.c, weak symbol as above). */
extern "C" void tb_cudaemu_default_stream(long *calls) { *calls = g_stats.default_stream; }
static void on_default_stream(const char *what) {
    g_stats.default_stream++;
    if (getenv("TB_CUDAEMU_TRACE_DEFAULT")) { /* who works on the default stream */
        fprintf(stderr, "cudaemu: %s on the default stream from\n", what);
        void *bt[6];
        backtrace_symbols_fd(bt, backtrace(bt, 6), 2);
    }
}
static void violation(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void violation(const char *fmt, ...) {
    if (g_violations >= 20) { /* every lane of a kernel may break the same rule: count the rest */
        g_violations++;
        return;
    }
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "cudaemu: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    /* where: the first few, not from a kernel's thread, whose fiber stack has no frame the
     * unwinder can stop at (the message names the kernel) */
    if (g_violations++ < 3 && !g_in_kernel) {
        void *bt[24];
        backtrace_symbols_fd(bt, backtrace(bt, 24), 2);
    }
}

/* ---- device memory ---- */
struct allocation {
    char *map;    /* the mapping: data pages, then one guard page */
    size_t pages; /* data bytes of the mapping, a multiple of the page */
    char *p;      /* what cudaMalloc returned: the data's end meets the guard page */
    size_t bytes;
    bool pinned; /* cudaMallocHost: host memory a kernel may also address */
    bool open;   /* readable now (inside a kernel, copy or product that uses it) */
};
static std::map<uintptr_t, allocation> g_allocs; /* by p */
static std::recursive_mutex g_mem;
static size_t g_page;
static bool g_protect = true;

static void on_segv(int sig, siginfo_t *si, void *uc);
static void setup(void) {
    static bool done;
    if (done) return;
    done = true;
    g_page = (size_t)sysconf(_SC_PAGESIZE);
    const char *e = getenv("TB_CUDAEMU_PROTECT");
    g_protect = !(e && e[0] == '0');
    struct sigaction sa = {};
    sa.sa_sigaction = on_segv;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigaction(SIGSEGV, &sa, NULL);
    atexit(report_at_exit);
}

/* the allocation containing [p, p + bytes), or NULL */
static allocation *find(const void *p, size_t bytes = 1) {
    const uintptr_t a = (uintptr_t)p;
    auto it = g_allocs.upper_bound(a);
    if (it == g_allocs.begin()) return NULL;
    --it;
    allocation &al = it->second;
    if (a < (uintptr_t)al.p || a >= (uintptr_t)al.p + (al.bytes ? al.bytes : 1)) return NULL;
    (void)bytes;
    return &al;
}
static bool inside(const allocation *al, const void *p, size_t bytes) {
    return (uintptr_t)p + bytes <= (uintptr_t)al->p + al->bytes;
}

static void protect(allocation &al, bool readable) {
    if (g_protect && !al.pinned && al.open != readable)
        mprotect(al.map, al.pages, readable ? PROT_READ | PROT_WRITE : PROT_NONE);
    al.open = readable;
}
/* The allocations holding the given pointers readable for the scope (a kernel reaches memory
 * only through its arguments; a copy or a product through its operands), and nothing else: a
 * few mprotect calls, not one per allocation. */
struct device_open {
    std::vector<allocation *> opened;
    explicit device_open(std::initializer_list<const void *> ptrs) { open(ptrs.begin(), ptrs.size()); }
    device_open(const void *const *ptrs, size_t n) { open(ptrs, n); }
    void open(const void *const *ptrs, size_t n) {
        g_mem.lock();
        for (size_t i = 0; i < n; i++) {
            allocation *al = ptrs[i] ? find(ptrs[i]) : NULL;
            if (al && !al->open) protect(*al, true), opened.push_back(al);
        }
    }
    ~device_open() {
        for (allocation *al : opened) protect(*al, false);
        g_mem.unlock();
    }
};

static void on_segv(int sig, siginfo_t *si, void *uc) {
    (void)uc;
    const uintptr_t a = (uintptr_t)si->si_addr;
    for (auto &kv : g_allocs) {
        const allocation &al = kv.second;
        if (!al.pinned && a >= (uintptr_t)al.map && a < (uintptr_t)al.map + al.pages + g_page) {
            char msg[256];
            int n;
            if (a >= (uintptr_t)al.p + al.bytes)
                n = snprintf(msg, sizeof msg, "cudaemu: an access %zu bytes past the end of a "
                             "device allocation of %zu bytes\n",
                             (size_t)(a - ((uintptr_t)al.p + al.bytes)), al.bytes);
            else if (g_in_kernel) /* a kernel reaches memory only through its arguments */
                n = snprintf(msg, sizeof msg, "cudaemu: kernel %s touched byte %zu of an "
                             "allocation of %zu bytes that none of its arguments points into\n",
                             g_kernel, (size_t)(a - (uintptr_t)al.p), al.bytes);
            else
                n = snprintf(msg, sizeof msg, "cudaemu: the host touched device memory: byte %zu "
                             "of an allocation of %zu bytes (a GPU's memory is not the host's)\n",
                             (size_t)(a - (uintptr_t)al.p), al.bytes);
            if (write(2, msg, (size_t)n) < 0) _exit(4);
            void *bt[32];
            backtrace_symbols_fd(bt, backtrace(bt, 32), 2);
            _exit(3);
        }
    }
    signal(sig, SIG_DFL); /* not ours: the default crash */
}

cudaError_t cudaMalloc(void **out, size_t bytes) {
    setup();
    std::lock_guard<std::recursive_mutex> lk(g_mem);
    const size_t body = ((bytes ? bytes : 1) + 255) & ~(size_t)255;
    const size_t pages = (body + g_page - 1) / g_page * g_page;
    char *m = (char *)mmap(NULL, pages + g_page, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) {
        *out = NULL;
        return g_last = cudaErrorMemoryAllocation;
    }
    allocation al = {m, pages, m + pages - body, bytes, false, true};
    mprotect(m, pages, PROT_READ | PROT_WRITE);
    memset(al.p, 0xff, body); /* NaN: a GPU's fresh memory is not zeroed */
    protect(al, false);
    g_allocs[(uintptr_t)al.p] = al;
    *out = al.p;
    return cudaSuccess;
}
cudaError_t cudaMallocHost(void **out, size_t bytes) {
    setup();
    std::lock_guard<std::recursive_mutex> lk(g_mem);
    void *p = malloc(bytes ? bytes : 1);
    if (!p) return g_last = cudaErrorMemoryAllocation;
    g_allocs[(uintptr_t)p] = allocation{(char *)p, 0, (char *)p, bytes, true, true};
    *out = p;
    return cudaSuccess;
}
static cudaError_t release(void *p, bool pinned) {
    if (!p) return cudaSuccess;
    std::lock_guard<std::recursive_mutex> lk(g_mem);
    auto it = g_allocs.find((uintptr_t)p);
    if (it == g_allocs.end() || it->second.pinned != pinned) {
        violation("%s(%p): not the start of a live %s allocation", pinned ? "cudaFreeHost" :
                  "cudaFree", p, pinned ? "pinned" : "device");
        return g_last = cudaErrorInvalidValue;
    }
    if (pinned) free(p);
    else munmap(it->second.map, it->second.pages + g_page);
    g_allocs.erase(it);
    return cudaSuccess;
}
cudaError_t cudaFree(void *p) { return release(p, false); }
cudaError_t cudaFreeHost(void *p) { return release(p, true); }

/* What p is for a copy of bytes bytes: 2 device, 1 pinned host, 0 other host; -1 (reported)
 * device memory the copy would leave. */
static int kind_of(const void *p, size_t bytes, const char *what) {
    allocation *al = find(p);
    if (!al) return 0;
    if (!inside(al, p, bytes)) {
        violation("%s: %zu bytes at byte %zu of an allocation of %zu bytes run past its end", what,
                  bytes, (size_t)((const char *)p - al->p), al->bytes);
        return -1;
    }
    return al->pinned ? 1 : 2;
}

/* ---- streams: work runs when it is issued (one device, in order), except a device-to-host
 * cudaMemcpyAsync on a stream, whose bytes reach the host only at that stream's (or the device's)
 * synchronisation: until then the destination holds 0xff bytes (NaN as floats), so that a host
 * that reads it without synchronising reads garbage, as it may on a GPU. ---- */
struct pending_copy {
    void *dst;
    std::vector<char> bytes;
};
struct tb_emu_stream {
    std::vector<pending_copy> pending;
};
static std::vector<tb_emu_stream *> g_streams;
static void stream_flush(tb_emu_stream *s) {
    for (pending_copy &c : s->pending) memcpy(c.dst, c.bytes.data(), c.bytes.size());
    s->pending.clear();
}

static cudaError_t copy(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind,
                        cudaStream_t stream, bool async) {
    setup();
    std::lock_guard<std::recursive_mutex> lk(g_mem);
    if (!stream) on_default_stream(async ? "cudaMemcpyAsync" : "cudaMemcpy");
    if (!bytes) return cudaSuccess;
    const int d = kind_of(dst, bytes, "cudaMemcpy's destination");
    const int s = kind_of(src, bytes, "cudaMemcpy's source");
    if (d < 0 || s < 0) return g_last = cudaErrorInvalidValue;
    const bool dd = d == 2, sd = s == 2;
    bool ok = true;
    switch (kind) {
    case cudaMemcpyHostToDevice: ok = dd && !sd; break;
    case cudaMemcpyDeviceToHost: ok = !dd && sd; break;
    case cudaMemcpyDeviceToDevice: ok = dd && sd; break;
    case cudaMemcpyHostToHost: ok = !dd && !sd; break;
    case cudaMemcpyDefault: break;
    }
    if (!ok) {
        violation("cudaMemcpy kind %d from %s to %s memory", (int)kind, sd ? "device" : "host",
                  dd ? "device" : "host");
        return g_last = cudaErrorInvalidMemcpyDirection;
    }
    if (dd && !sd && getenv("TB_CUDAEMU_TRACE")) { /* who copies to the GPU, and when */
        fprintf(stderr, "cudaemu: host-to-device copy of %zu bytes from\n", bytes);
        void *bt[6];
        backtrace_symbols_fd(bt, backtrace(bt, 6), 2);
    }
    if (dd && !sd) g_stats.h2d++, g_stats.h2d_bytes += (long)bytes;
    else if (!dd && sd) g_stats.d2h++, g_stats.d2h_bytes += (long)bytes;
    else if (dd && sd) g_stats.d2d++;
    device_open o{dst, src};
    if (async && stream && !dd && sd) { /* arrives at the synchronisation */
        pending_copy c{dst, std::vector<char>((const char *)src, (const char *)src + bytes)};
        stream->pending.push_back(std::move(c));
        memset(dst, 0xff, bytes);
        return cudaSuccess;
    }
    memmove(dst, src, bytes);
    return cudaSuccess;
}
cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind) {
    return copy(dst, src, bytes, kind, 0, false);
}
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t stream) {
    return copy(dst, src, bytes, kind, stream, true);
}
static cudaError_t set(void *p, int value, size_t bytes, cudaStream_t stream) {
    setup();
    std::lock_guard<std::recursive_mutex> lk(g_mem);
    if (!stream) on_default_stream("cudaMemset");
    if (!bytes) return cudaSuccess;
    if (kind_of(p, bytes, "cudaMemset") != 2) {
        violation("cudaMemset(%p, %zu bytes): not inside device memory", p, bytes);
        return g_last = cudaErrorInvalidValue;
    }
    device_open o{p};
    memset(p, value, bytes);
    return cudaSuccess;
}
cudaError_t cudaMemset(void *p, int value, size_t bytes) { return set(p, value, bytes, 0); }
cudaError_t cudaMemsetAsync(void *p, int value, size_t bytes, cudaStream_t stream) {
    return set(p, value, bytes, stream);
}
cudaError_t cudaPointerGetAttributes(cudaPointerAttributes *a, const void *p) {
    setup();
    std::lock_guard<std::recursive_mutex> lk(g_mem);
    g_stats.queries++; /* cudaPointerGetAttributes: a driver call on a GPU */
    allocation *al = find(p);
    memset(a, 0, sizeof *a);
    a->type = !al ? cudaMemoryTypeUnregistered : al->pinned ? cudaMemoryTypeHost
                                                            : cudaMemoryTypeDevice;
    a->devicePointer = al ? (void *)p : NULL;
    a->hostPointer = al && al->pinned ? (void *)p : NULL;
    return cudaSuccess;
}

/* ---- the device and errors ---- */
static const size_t EMU_MEMORY = (size_t)16 << 30; /* the emulated card's memory */
cudaError_t cudaGetDeviceCount(int *n) {
    setup();
    *n = 1;
    return cudaSuccess;
}
cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int device) {
    if (device != 0) return g_last = cudaErrorInvalidValue;
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "cudaemu (the CPU, emulating compute capability 9.0)");
    p->major = 9, p->minor = 0;
    p->totalGlobalMem = EMU_MEMORY, p->sharedMemPerBlock = 48 << 10;
    p->multiProcessorCount = 1, p->maxThreadsPerBlock = 1024, p->warpSize = 32;
    return cudaSuccess;
}
cudaError_t cudaSetDevice(int device) { return device == 0 ? cudaSuccess : cudaErrorInvalidValue; }
cudaError_t cudaGetLastError(void) {
    const cudaError_t e = g_last;
    g_last = cudaSuccess;
    return e;
}
extern "C" cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total_bytes) {
    std::lock_guard<std::recursive_mutex> lk(g_mem);
    size_t used = 0;
    for (auto &kv : g_allocs)
        if (!kv.second.pinned) used += kv.second.pages;
    *total_bytes = EMU_MEMORY, *free_bytes = used < EMU_MEMORY ? EMU_MEMORY - used : 0;
    return cudaSuccess;
}
cudaError_t cudaDeviceSynchronize(void) { /* every call ran to its end; copies arrive */
    std::lock_guard<std::recursive_mutex> lk(g_mem);
    for (tb_emu_stream *st : g_streams) stream_flush(st);
    return cudaSuccess;
}
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags) {
    (void)flags; /* one device, one order: blocking or not is the same here */
    std::lock_guard<std::recursive_mutex> lk(g_mem);
    *s = new tb_emu_stream();
    g_streams.push_back(*s);
    return cudaSuccess;
}
cudaError_t cudaStreamCreate(cudaStream_t *s) { return cudaStreamCreateWithFlags(s, 0); }
cudaError_t cudaStreamDestroy(cudaStream_t s) {
    if (!s) return g_last = cudaErrorInvalidValue;
    std::lock_guard<std::recursive_mutex> lk(g_mem);
    stream_flush(s); /* as CUDA: its work completes */
    for (size_t i = 0; i < g_streams.size(); i++)
        if (g_streams[i] == s) g_streams.erase(g_streams.begin() + (long)i);
    delete s;
    return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t s) {
    std::lock_guard<std::recursive_mutex> lk(g_mem);
    if (s) stream_flush(s);
    else
        for (tb_emu_stream *st : g_streams) stream_flush(st); /* the legacy default stream */
    return cudaSuccess;
}
const char *cudaGetErrorName(cudaError_t e) {
    switch (e) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidDevicePointer: return "cudaErrorInvalidDevicePointer";
    case cudaErrorInvalidMemcpyDirection: return "cudaErrorInvalidMemcpyDirection";
    case cudaErrorNoDevice: return "cudaErrorNoDevice";
    case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
    }
    return "cudaErrorUnknown";
}
const char *cudaGetErrorString(cudaError_t e) { return cudaGetErrorName(e); }

/* ---- kernels: one fiber per thread of a block, blocks one after another ---- */
uint3 tb_emu_thread_idx, tb_emu_block_idx;
dim3 tb_emu_block_dim, tb_emu_grid_dim;

enum { READY, AT_BLOCK, AT_WARP, DONE };
/* A fiber starts on its own stack with makecontext/setcontext, and afterwards switches with
 * _setjmp/_longjmp, which leave the signal mask alone: swapcontext's two system calls a switch
 * made barrier-heavy kernels (a LayerNorm row's shuffles) cost seconds. (Built without
 * _FORTIFY_SOURCE, whose longjmp check refuses a jump to another stack.) */
struct fiber {
    ucontext_t ctx;
    jmp_buf jb;
    char *stack;
    int state;
    bool started;
    uint3 tid;
};
static const size_t STACK = 256 << 10;
static std::vector<fiber> g_fibers;
static jmp_buf g_sched;
static int g_cur, g_n_threads;
static void (*g_run)(void *);
static void *g_arg;
static uint64_t g_xchg[1024];

static void fiber_main(void) {
    g_run(g_arg);
    g_fibers[(size_t)g_cur].state = DONE;
    _longjmp(g_sched, 1);
}
static long g_waits;   /* barriers and shuffles reached in this launch */
static bool g_direct; /* this launch's blocks after the first run as plain calls */
static void wait_at(int state) {
    if (!g_in_kernel) {
        violation("a barrier or shuffle outside a kernel");
        return;
    }
    if (g_direct) {
        violation("kernel %s: a barrier or shuffle in block (%u,%u,%u) though block 0 reached "
                  "none: the emulator ran it without fibers", g_kernel, tb_emu_block_idx.x,
                  tb_emu_block_idx.y, tb_emu_block_idx.z);
        return;
    }
    g_waits++;
    fiber &f = g_fibers[(size_t)g_cur];
    f.state = state;
    if (!_setjmp(f.jb)) _longjmp(g_sched, 1);
}
void __syncthreads(void) { wait_at(AT_BLOCK); }
void __syncwarp(unsigned) { wait_at(AT_WARP); }
int tb_emu_lane(void) { return g_cur % 32; }
uint64_t tb_emu_shfl(unsigned mask, uint64_t bits, int src, int valid) {
    (void)mask;
    const int me = g_cur, base = me / 32 * 32;
    g_xchg[me] = bits;
    wait_at(AT_WARP); /* every live lane has published */
    uint64_t r = bits;
    if (valid && src >= 0 && src < 32) {
        const int t = base + src;
        if (t >= g_n_threads || g_fibers[(size_t)t].state == DONE)
            violation("kernel %s: a shuffle reads lane %d, which has exited or does not exist",
                      g_kernel, src);
        else r = g_xchg[t];
    }
    wait_at(AT_WARP); /* every lane has read before the next publishes */
    return r;
}

/* One block: run every ready fiber until it waits or ends; release a warp whose live lanes all
 * wait at a warp barrier, or the block when all its live threads wait at __syncthreads. */
static void run_block(int n) {
    static ucontext_t proto;
    static bool have_proto;
    if (!have_proto) getcontext(&proto), have_proto = true;
    if ((int)g_fibers.size() < n) g_fibers.resize((size_t)n);
    const dim3 b = tb_emu_block_dim;
    for (int i = 0; i < n; i++) {
        fiber &f = g_fibers[(size_t)i];
        if (!f.stack) {
            f.stack = (char *)mmap(NULL, STACK, PROT_READ | PROT_WRITE,
                                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
            if (f.stack == MAP_FAILED) {
                fprintf(stderr, "cudaemu: no memory for a thread's stack\n");
                _exit(4);
            }
        }
        f.ctx = proto;
        f.ctx.uc_stack.ss_sp = f.stack, f.ctx.uc_stack.ss_size = STACK;
        f.ctx.uc_link = NULL; /* fiber_main never returns */
        makecontext(&f.ctx, fiber_main, 0);
        f.state = READY, f.started = false;
        f.tid = uint3{(unsigned)i % b.x, (unsigned)i / b.x % b.y, (unsigned)i / (b.x * b.y)};
    }
    g_n_threads = n;
    for (;;) {
        for (int i = 0; i < n; i++) {
            fiber &f = g_fibers[(size_t)i];
            if (f.state != READY) continue;
            g_cur = i, tb_emu_thread_idx = f.tid;
            if (!_setjmp(g_sched)) {
                if (f.started) _longjmp(f.jb, 1);
                f.started = true;
                setcontext(&f.ctx);
            }
        }
        bool released = false;
        int live = 0, at_block = 0;
        for (int w = 0; w < n; w += 32) {
            bool any = false, all = true;
            for (int i = w; i < n && i < w + 32; i++) {
                const int s = g_fibers[(size_t)i].state;
                if (s == DONE) continue;
                live++, at_block += s == AT_BLOCK;
                if (s == AT_WARP) any = true;
                else all = false;
            }
            if (any && all) {
                for (int i = w; i < n && i < w + 32; i++)
                    if (g_fibers[(size_t)i].state == AT_WARP) g_fibers[(size_t)i].state = READY;
                released = true;
            }
        }
        if (released) continue;
        if (!live) return;
        if (at_block == live) {
            if (live < n) { /* the programming guide: every thread of the block, or UB */
                violation("kernel %s: block (%u,%u,%u): a __syncthreads that %d of its %d "
                          "threads never reach (they returned: a barrier in divergent code)",
                          g_kernel, tb_emu_block_idx.x, tb_emu_block_idx.y, tb_emu_block_idx.z,
                          n - live, n);
                return;
            }
            for (int i = 0; i < n; i++)
                if (g_fibers[(size_t)i].state == AT_BLOCK) g_fibers[(size_t)i].state = READY;
            continue;
        }
        violation("kernel %s: block (%u,%u,%u): threads wait at different barriers (a "
                  "__syncthreads or shuffle in divergent code)",
                  g_kernel, tb_emu_block_idx.x, tb_emu_block_idx.y, tb_emu_block_idx.z);
        return;
    }
}

/* the next launch's pointer arguments, per host thread: two threads may launch at once */
static thread_local std::vector<const void *> g_args;
static const size_t MAX_SHARED = 227u << 10;
static std::map<const void *, size_t> g_max_dynamic; /* cudaFuncSetAttribute's, per kernel */
static std::vector<unsigned char> g_dynamic;          /* this launch's dynamic shared memory */

unsigned char *tb_emu_dynamic_shared(void) { /* 128-byte aligned, as __align__(128) asks */
    return (unsigned char *)(((uintptr_t)g_dynamic.data() + 127) & ~(uintptr_t)127);
}
cudaError_t tb_emu_func_set_attribute(const void *f, cudaFuncAttribute a, int value) {
    if (a != cudaFuncAttributeMaxDynamicSharedMemorySize || value < 0 ||
        (size_t)value > MAX_SHARED)
        return g_last = cudaErrorInvalidValue;
    std::lock_guard<std::recursive_mutex> lk(g_mem);
    g_max_dynamic[f] = (size_t)value;
    return cudaSuccess;
}
/* What a GPU requires of a WMMA load or store: a 256-bit aligned pointer, ldm a multiple of 16
 * bytes. */
void tb_emu_wmma_check(const void *p, unsigned ldm, size_t elem, const char *what) {
    if ((uintptr_t)p % 32 || (ldm * elem) % 16)
        violation("kernel %s: wmma::%s at %p with ldm %u: a GPU needs a 32-byte aligned pointer "
                  "and ldm a multiple of 16 bytes", g_kernel, what, p, ldm);
}

namespace tb_emu {
void check_pointer(const void *p, const char *kernel, int arg) {
    if (!p) return;
    setup();
    std::lock_guard<std::recursive_mutex> lk(g_mem);
    g_args.push_back(p);
    if (!find(p))
        violation("kernel %s: argument %d (%p) is not device memory (a host pointer handed to a "
                  "kernel faults on a GPU)", kernel, arg, p);
}

void launch(dim3 g, dim3 b, size_t shared, cudaStream_t stream, const void *fn,
            const char *name, void (*run)(void *), void *arg) {
    setup();
    std::vector<const void *> args;
    args.swap(g_args);
    /* one kernel at a time on the emulated device, whichever host thread launches it (the
     * states of one model on several threads): its grid, fibers, shared memory and the pages it
     * opens are the device's, not the thread's */
    std::lock_guard<std::recursive_mutex> device(g_mem);
    if (!stream) on_default_stream(name);
    const unsigned long threads = (unsigned long)b.x * b.y * b.z;
    if (!threads || threads > 1024 || b.z > 64 || !g.x || !g.y || !g.z || g.y > 65535 ||
        g.z > 65535 || g.x > 2147483647u) {
        g_last = cudaErrorInvalidConfiguration; /* as CUDA: the launch fails, nothing runs */
        return;
    }
    /* dynamic shared memory: up to 48 KB, beyond only as far as cudaFuncSetAttribute allowed
     * (at most 227 KB, an H100's), else the launch fails as on a GPU */
    auto allowed = g_max_dynamic.find(fn);
    if (shared > MAX_SHARED ||
        (shared > (48u << 10) && (allowed == g_max_dynamic.end() || shared > allowed->second))) {
        g_last = cudaErrorInvalidValue;
        return;
    }
    g_dynamic.assign(shared + 128, 0xff); /* garbage, as a GPU's; room to align */
    if (g_in_kernel) {
        violation("kernel %s launched from inside kernel %s", name, g_kernel);
        return;
    }
    device_open o(args.data(), args.size());
    g_in_kernel = true, g_kernel = name, g_run = run, g_arg = arg;
    tb_emu_grid_dim = g, tb_emu_block_dim = b;
    /* Block 0 runs as fibers; a kernel that never waited there (no barrier, no shuffle: the
     * element-wise ones) runs its other blocks' threads as plain calls, which is much faster.
     * A barrier reached after all is reported (wait_at). */
    g_waits = 0, g_direct = false;
    for (unsigned z = 0; z < g.z; z++)
        for (unsigned y = 0; y < g.y; y++)
            for (unsigned x = 0; x < g.x; x++) {
                tb_emu_block_idx = uint3{x, y, z};
                if (!g_direct) {
                    run_block((int)threads);
                    g_direct = g_waits == 0;
                    continue;
                }
                for (int i = 0; i < (int)threads; i++) {
                    g_cur = i;
                    tb_emu_thread_idx = uint3{(unsigned)i % b.x, (unsigned)i / b.x % b.y,
                                              (unsigned)i / (b.x * b.y)};
                    run(arg);
                }
            }
    g_in_kernel = g_direct = false;
    g_stats.launches++, g_stats.threads += (long)(threads * g.x * g.y * g.z);
}
} // namespace tb_emu

/* ---- cuBLASLt ---- */
struct tb_emu_lt {
    int unused;
};
struct tb_emu_lt_desc {
    cublasComputeType_t compute;
    cudaDataType_t scale;
    cublasOperation_t ta, tb;
    cublasLtEpilogue_t epi;
    const void *bias;
    int bias_type; /* -1: as D */
};
struct tb_emu_lt_layout {
    cudaDataType_t type;
    uint64_t rows, cols;
    int64_t ld;
    int32_t batch;
    int64_t stride;
};
struct tb_emu_lt_pref {
    uint64_t workspace;
    uint32_t align[4]; /* A, B, C, D */
};

cublasStatus_t cublasLtCreate(cublasLtHandle_t *h) {
    setup();
    *h = new tb_emu_lt();
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtDestroy(cublasLtHandle_t h) {
    delete h;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *d, cublasComputeType_t compute,
                                        cudaDataType_t scale) {
    *d = new tb_emu_lt_desc{compute, scale, CUBLAS_OP_N, CUBLAS_OP_N, CUBLASLT_EPILOGUE_DEFAULT,
                            NULL, -1};
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d) {
    delete d;
    return CUBLAS_STATUS_SUCCESS;
}
template <class T> static bool take(T *dst, const void *v, size_t bytes) {
    if (bytes != sizeof(T)) return false;
    memcpy(dst, v, sizeof(T));
    return true;
}
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d,
                                              cublasLtMatmulDescAttributes_t a, const void *v,
                                              size_t bytes) {
    bool ok = false;
    switch (a) {
    case CUBLASLT_MATMUL_DESC_TRANSA: ok = take(&d->ta, v, bytes); break;
    case CUBLASLT_MATMUL_DESC_TRANSB: ok = take(&d->tb, v, bytes); break;
    case CUBLASLT_MATMUL_DESC_EPILOGUE: ok = take(&d->epi, v, bytes); break;
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER: ok = take(&d->bias, v, bytes); break;
    case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE: ok = take(&d->bias_type, v, bytes); break;
    }
    return ok ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_INVALID_VALUE;
}
cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *l, cudaDataType_t type,
                                          uint64_t rows, uint64_t cols, int64_t ld) {
    *l = new tb_emu_lt_layout{type, rows, cols, ld, 1, 0};
    if (ld < (int64_t)(rows ? rows : 1)) return CUBLAS_STATUS_INVALID_VALUE; /* column-major */
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l) {
    delete l;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t l,
                                                cublasLtMatrixLayoutAttribute_t a, const void *v,
                                                size_t bytes) {
    bool ok = false;
    switch (a) {
    case CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT: ok = take(&l->batch, v, bytes); break;
    case CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET: ok = take(&l->stride, v, bytes); break;
    }
    return ok ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_INVALID_VALUE;
}
cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *p) {
    *p = new tb_emu_lt_pref{0, {256, 256, 256, 256}}; /* cuBLASLt's default alignments */
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p) {
    delete p;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t p,
                                                    cublasLtMatmulPreferenceAttributes_t a,
                                                    const void *v, size_t bytes) {
    bool ok = false;
    switch (a) {
    case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES: ok = take(&p->workspace, v, bytes); break;
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES: ok = take(&p->align[0], v, bytes); break;
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES: ok = take(&p->align[1], v, bytes); break;
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES: ok = take(&p->align[2], v, bytes); break;
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES: ok = take(&p->align[3], v, bytes); break;
    }
    return ok ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_INVALID_VALUE;
}

/* op(A) is m x k, op(B) k x n, C and D m x n: the dimensions the layouts give, or false. */
static bool shapes(const tb_emu_lt_desc *op, const tb_emu_lt_layout *a, const tb_emu_lt_layout *b,
                   const tb_emu_lt_layout *c, const tb_emu_lt_layout *d, uint64_t *m, uint64_t *n,
                   uint64_t *k) {
    *m = op->ta == CUBLAS_OP_N ? a->rows : a->cols;
    *k = op->ta == CUBLAS_OP_N ? a->cols : a->rows;
    const uint64_t kb = op->tb == CUBLAS_OP_N ? b->rows : b->cols;
    *n = op->tb == CUBLAS_OP_N ? b->cols : b->rows;
    return kb == *k && c->rows == *m && c->cols == *n && d->rows == *m && d->cols == *n &&
           a->batch == 1 && b->batch == 1 && c->batch == 1 && d->batch == 1;
}
static bool types_ok(const tb_emu_lt_desc *op, const tb_emu_lt_layout *a,
                     const tb_emu_lt_layout *b, const tb_emu_lt_layout *c,
                     const tb_emu_lt_layout *d) {
    if (op->compute != CUBLAS_COMPUTE_32F || op->scale != CUDA_R_32F) return false;
    if (c->type != d->type) return false;
    if (a->type == CUDA_R_32F) return b->type == CUDA_R_32F && d->type == CUDA_R_32F;
    return a->type == CUDA_R_16BF && b->type == CUDA_R_16BF &&
           (d->type == CUDA_R_16BF || d->type == CUDA_R_32F);
}

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t h, cublasLtMatmulDesc_t op,
                                              cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                                              cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,
                                              cublasLtMatmulPreference_t pref, int requested,
                                              cublasLtMatmulHeuristicResult_t *results,
                                              int *found) {
    uint64_t m, n, k;
    *found = 0;
    if (!h || requested < 1 || !shapes(op, a, b, c, d, &m, &n, &k) || !types_ok(op, a, b, c, d))
        return CUBLAS_STATUS_INVALID_VALUE;
    memset(results, 0, sizeof *results);
    for (int i = 0; i < 4; i++) results->algo.data[i] = pref->align[i]; /* what it may assume */
    results->state = CUBLAS_STATUS_SUCCESS, results->wavesCount = 1.0f;
    *found = 1;
    return CUBLAS_STATUS_SUCCESS;
}

static uint16_t to_bf16(float f) { /* round to nearest even, as __float2bfloat16 */
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* NaN */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}
static float from_bf16(uint16_t h) {
    const uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static double get(const void *p, cudaDataType_t t, uint64_t i) {
    return t == CUDA_R_32F ? ((const float *)p)[i] : from_bf16(((const uint16_t *)p)[i]);
}
static void put(void *p, cudaDataType_t t, uint64_t i, double v) {
    if (t == CUDA_R_32F) ((float *)p)[i] = (float)v;
    else ((uint16_t *)p)[i] = to_bf16((float)v);
}
static size_t elem(cudaDataType_t t) { return t == CUDA_R_32F ? 4 : 2; }
/* the bytes a column-major rows x cols layout with ld spans */
static size_t span(const tb_emu_lt_layout *l) {
    return l->rows && l->cols ? ((l->cols - 1) * (uint64_t)l->ld + l->rows) * elem(l->type) : 0;
}
static bool operand(const void *p, size_t bytes, const char *what) {
    allocation *al = find(p);
    if (!al) {
        violation("cublasLtMatmul: %s (%p) is not device memory", what, p);
        return false;
    }
    if (!inside(al, p, bytes)) {
        violation("cublasLtMatmul: %s spans %zu bytes, past the end of its allocation (%zu bytes "
                  "from byte %zu)", what, bytes, al->bytes, (size_t)((const char *)p - al->p));
        return false;
    }
    return true;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t h, cublasLtMatmulDesc_t op, const void *alpha_,
                              const void *A, cublasLtMatrixLayout_t la, const void *B,
                              cublasLtMatrixLayout_t lb, const void *beta_, const void *C,
                              cublasLtMatrixLayout_t lc, void *D, cublasLtMatrixLayout_t ld,
                              const cublasLtMatmulAlgo_t *algo, void *workspace,
                              size_t workspace_bytes, cudaStream_t stream) {
    uint64_t m, n, k;
    if (!h || !shapes(op, la, lb, lc, ld, &m, &n, &k) || !types_ok(op, la, lb, lc, ld))
        return CUBLAS_STATUS_INVALID_VALUE;
    std::lock_guard<std::recursive_mutex> lk(g_mem);
    if (!stream) on_default_stream("cublasLtMatmul");
    const float alpha = *(const float *)alpha_, beta = *(const float *)beta_;
    bool ok = operand(A, span(la), "A") && operand(B, span(lb), "B") && operand(D, span(ld), "D");
    if (beta != 0.0f) ok = ok && operand(C, span(lc), "C");
    if (C == D && (lc->ld != ld->ld)) {
        violation("cublasLtMatmul: C and D are one matrix with two leading dimensions");
        ok = false;
    }
    if (workspace_bytes && !workspace) ok = false;
    const bool bias = op->epi == CUBLASLT_EPILOGUE_BIAS || op->epi == CUBLASLT_EPILOGUE_RELU_BIAS ||
                      op->epi == CUBLASLT_EPILOGUE_GELU_BIAS;
    const cudaDataType_t bt = op->bias_type < 0 ? (ld->type == CUDA_R_32F ? CUDA_R_32F : CUDA_R_16BF)
                                                : (cudaDataType_t)op->bias_type;
    if (bias) ok = ok && operand(op->bias, m * elem(bt), "the bias");
    if (op->epi != CUBLASLT_EPILOGUE_DEFAULT && !bias && op->epi != CUBLASLT_EPILOGUE_RELU &&
        op->epi != CUBLASLT_EPILOGUE_GELU)
        return CUBLAS_STATUS_NOT_SUPPORTED; /* the training epilogues: not emulated yet */
    if (algo) { /* the heuristic's pick assumed these alignments */
        const void *ptr[4] = {A, B, C, D};
        const char *nm[4] = {"A", "B", "C", "D"};
        for (int i = 0; i < 4; i++)
            if (algo->data[i] && (uintptr_t)ptr[i] % algo->data[i] && (i != 2 || beta != 0.0f)) {
                violation("cublasLtMatmul: %s (%p) is less aligned than the %u bytes the "
                          "heuristic was promised", nm[i], ptr[i], (unsigned)algo->data[i]);
                ok = false;
            }
    }
    if (!ok) return CUBLAS_STATUS_INVALID_VALUE;
    g_stats.products++;
    device_open o{A, B, C, D, bias ? op->bias : NULL};
    std::vector<double> col(m);
    for (uint64_t j = 0; j < n; j++) {
        for (uint64_t i = 0; i < m; i++) {
            double s = 0;
            for (uint64_t p = 0; p < k; p++) {
                const uint64_t ai = op->ta == CUBLAS_OP_N ? i + p * la->ld : p + i * la->ld;
                const uint64_t bi = op->tb == CUBLAS_OP_N ? p + j * lb->ld : j + p * lb->ld;
                s += get(A, la->type, ai) * get(B, lb->type, bi);
            }
            double v = alpha * s;
            if (beta != 0.0f) v += beta * get(C, lc->type, i + j * lc->ld);
            if (bias) v += get(op->bias, bt, i);
            if (op->epi == CUBLASLT_EPILOGUE_RELU || op->epi == CUBLASLT_EPILOGUE_RELU_BIAS)
                v = v > 0 ? v : 0;
            if (op->epi == CUBLASLT_EPILOGUE_GELU || op->epi == CUBLASLT_EPILOGUE_GELU_BIAS)
                v = 0.5 * v * (1 + tanh(0.7978845608028654 * (v + 0.044715 * v * v * v)));
            col[i] = v;
        }
        for (uint64_t i = 0; i < m; i++) put(D, ld->type, i + j * ld->ld, col[i]);
    }
    return CUBLAS_STATUS_SUCCESS;
}
