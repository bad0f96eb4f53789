/* cudaemu: the part of the CUDA runtime that src/kernels/cuda/kernels.cu uses, run on the CPU, so
 * that the CUDA backend's kernels are checked against the fixtures on a machine without a GPU
 * (make CUDA=emu; docs/cuda.md, "The emulator").
 *
 * Not a simulator of speed or of a GPU's rounding: a functional model that is strict where a GPU
 * is. Kernels are plain C++ functions; every thread of a block is a fiber (ucontext), so that
 * __syncthreads and warp shuffles work, and blocks run one after another (so __shared__ is a
 * static). "Device" memory is its own mappings, unreadable to the host outside the kernels, the
 * copies and the products: host code that touches it, a kernel handed a host pointer, a copy in
 * the wrong direction or past an allocation stop the program with a message (emu.cc). */
#ifndef TB_CUDAEMU_RUNTIME_H
#define TB_CUDAEMU_RUNTIME_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define TB_CUDA_EMU 1
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static /* blocks run one at a time */

typedef enum cudaError {
    cudaSuccess = 0,
    cudaErrorInvalidValue = 1,
    cudaErrorMemoryAllocation = 2,
    cudaErrorInvalidConfiguration = 9,
    cudaErrorInvalidDevicePointer = 17,
    cudaErrorInvalidMemcpyDirection = 21,
    cudaErrorNoDevice = 100,
    cudaErrorLaunchFailure = 719,
} cudaError_t;
enum cudaMemcpyKind {
    cudaMemcpyHostToHost = 0,
    cudaMemcpyHostToDevice = 1,
    cudaMemcpyDeviceToHost = 2,
    cudaMemcpyDeviceToDevice = 3,
    cudaMemcpyDefault = 4,
};
enum cudaMemoryType {
    cudaMemoryTypeUnregistered = 0,
    cudaMemoryTypeHost = 1,
    cudaMemoryTypeDevice = 2,
    cudaMemoryTypeManaged = 3,
};
struct cudaPointerAttributes {
    enum cudaMemoryType type;
    int device;
    void *devicePointer, *hostPointer;
};
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 };
struct cudaDeviceProp {
    char name[256];
    int major, minor;
    size_t totalGlobalMem, sharedMemPerBlock;
    int multiProcessorCount, maxThreadsPerBlock, warpSize;
};
typedef struct tb_emu_stream *cudaStream_t;
typedef struct tb_emu_event *cudaEvent_t;

struct uint3 {
    unsigned x, y, z;
};
struct dim3 {
    unsigned x, y, z;
    constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};

cudaError_t cudaGetDeviceCount(int *n);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int device);
cudaError_t cudaSetDevice(int device);
cudaError_t cudaMalloc(void **p, size_t bytes);
template <class T> static inline cudaError_t cudaMalloc(T **p, size_t bytes) {
    return cudaMalloc((void **)p, bytes);
}
cudaError_t cudaFree(void *p);
cudaError_t cudaMallocHost(void **p, size_t bytes);
cudaError_t cudaFreeHost(void *p);
cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind,
                            cudaStream_t s = 0);
cudaError_t cudaMemset(void *p, int value, size_t bytes);
cudaError_t cudaMemsetAsync(void *p, int value, size_t bytes, cudaStream_t s = 0);
cudaError_t cudaPointerGetAttributes(cudaPointerAttributes *a, const void *p);
cudaError_t cudaGetLastError(void);
extern "C" cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total_bytes); /* C: as CUDA's */
cudaError_t cudaDeviceSynchronize(void);
#define cudaStreamNonBlocking 0x01
cudaError_t cudaStreamCreate(cudaStream_t *s);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags);
cudaError_t cudaStreamDestroy(cudaStream_t s);
cudaError_t cudaStreamSynchronize(cudaStream_t s);
cudaError_t tb_emu_func_set_attribute(const void *f, cudaFuncAttribute a, int value);
template <class T> static inline cudaError_t cudaFuncSetAttribute(T *f, cudaFuncAttribute a,
                                                                 int value) {
    return tb_emu_func_set_attribute((const void *)f, a, value);
}
const char *cudaGetErrorName(cudaError_t e);
const char *cudaGetErrorString(cudaError_t e);

/* ---- inside a kernel ---- */
extern uint3 tb_emu_thread_idx, tb_emu_block_idx;
extern dim3 tb_emu_block_dim, tb_emu_grid_dim;
#define threadIdx tb_emu_thread_idx
#define blockIdx tb_emu_block_idx
#define blockDim tb_emu_block_dim
#define gridDim tb_emu_grid_dim

void __syncthreads(void);
/* extern __shared__'s memory: the launch's dynamic shared bytes, per block */
unsigned char *tb_emu_dynamic_shared(void);
void __syncwarp(unsigned mask = 0xffffffffu);
/* The warp's exchange: every live lane of the warp publishes v, then reads lane src's. */
uint64_t tb_emu_shfl(unsigned mask, uint64_t bits, int src_lane, int valid);
int tb_emu_lane(void); /* the thread's lane: its linear index in the block, mod 32 */
template <class T> static inline T tb_emu_shfl_as(unsigned mask, T v, int src, int valid) {
    static_assert(sizeof(T) <= 8, "shuffle of more than 8 bytes");
    uint64_t b = 0;
    memcpy(&b, &v, sizeof v);
    b = tb_emu_shfl(mask, b, src, valid);
    memcpy(&v, &b, sizeof v);
    return v;
}
template <class T> static inline T __shfl_down_sync(unsigned mask, T v, unsigned delta,
                                                    int width = 32) {
    const int lane = tb_emu_lane(), seg = lane % width;
    return tb_emu_shfl_as(mask, v, lane + (int)delta, seg + (int)delta < width);
}
template <class T> static inline T __shfl_up_sync(unsigned mask, T v, unsigned delta,
                                                  int width = 32) {
    const int lane = tb_emu_lane(), seg = lane % width;
    return tb_emu_shfl_as(mask, v, lane - (int)delta, seg >= (int)delta);
}
template <class T> static inline T __shfl_xor_sync(unsigned mask, T v, int lane_mask,
                                                   int width = 32) {
    const int lane = tb_emu_lane();
    const int src = lane ^ lane_mask;
    return tb_emu_shfl_as(mask, v, src, src / width == lane / width);
}
template <class T> static inline T __shfl_sync(unsigned mask, T v, int src, int width = 32) {
    const int lane = tb_emu_lane();
    return tb_emu_shfl_as(mask, v, lane / width * width + src % width, 1);
}
/* blocks and their threads run one at a time: an atomic is a plain update */
template <class T> static inline T atomicAdd(T *p, T v) {
    const T old = *p;
    *p = old + v;
    return old;
}
static inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
template <class T> static inline T __ldg(const T *p) { return *p; }

/* ---- launching: LAUNCH(k, grid, block)(args...) in kernels.cu ---- */
namespace tb_emu {
void launch(dim3 grid, dim3 block, size_t shared, cudaStream_t stream, const void *fn,
            const char *name, void (*run)(void *), void *arg);
/* a kernel's pointer argument: NULL or inside a device allocation, else the run stops */
void check_pointer(const void *p, const char *kernel, int arg);
template <class T> inline void check_arg(const T &, const char *, int) {}
template <class T> inline void check_arg(T *const &p, const char *k, int i) {
    check_pointer(p, k, i);
}
template <class K> struct launcher;
template <class... P> struct launcher<void(P...)> {
    void (*kernel)(P...);
    dim3 grid, block;
    size_t shared;       /* dynamic shared memory, bytes */
    cudaStream_t stream; /* 0: the default stream (counted: tb_cudaemu_default_stream) */
    const char *name;
    void operator()(P... a) { /* the arguments converted as a launch converts them */
        int i = 0;
        int seen[] = {0, (check_arg(a, name, ++i), 0)...};
        (void)seen;
        auto call = [&]() { kernel(a...); };
        launch(grid, block, shared, stream, (const void *)kernel, name,
               [](void *c) { (*(decltype(call) *)c)(); }, &call);
    }
};
} // namespace tb_emu
#define TB_EMU_LAUNCH(k, g, b) (tb_emu::launcher<decltype(k)>{k, dim3(g), dim3(b), 0, 0, #k})
#define TB_EMU_LAUNCH_SHARED(k, g, b, bytes)                                                       \
    (tb_emu::launcher<decltype(k)>{k, dim3(g), dim3(b), (size_t)(bytes), 0, #k})
/* kernel<<<g, b, bytes, s>>> */
#define TB_EMU_LAUNCH_ON(k, g, b, bytes, s)                                                        \
    (tb_emu::launcher<decltype(k)>{k, dim3(g), dim3(b), (size_t)(bytes), (s), #k})

#endif
