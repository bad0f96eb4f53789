/* The one source of random numbers: splitmix64 (Steele, Lea, Flood 2014) — a counter stepped by
 * the golden ratio, then a bijective mixer. Every draw in tubelet (random weights, data order,
 * augmentation, dropout and drop-path masks, synthetic clips) is a function of a seed and of
 * where it is used, never of time or thread, so that runs and resumes repeat exactly. */
#ifndef TB_RNG_H
#define TB_RNG_H

#include <stdint.h>

#define TB_GOLDEN64 0x9E3779B97F4A7C15ull

/* Functions the CUDA backend's kernels call too (nvcc; dropout's masks are the CPU's). */
#ifdef __CUDACC__
#define TB_HOST_DEVICE __host__ __device__
#else
#define TB_HOST_DEVICE
#endif

/* splitmix64's output function. */
TB_HOST_DEVICE static inline uint64_t tb_mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* The next output of the stream whose state is *s. */
static inline uint64_t tb_splitmix64(uint64_t *s) { return tb_mix64(*s += TB_GOLDEN64); }

/* A uniform double in [0, 1) from the top 53 bits of the next output. */
static inline double tb_uniform01(uint64_t *s) {
    return (double)(tb_splitmix64(s) >> 11) * 0x1.0p-53;
}

/* Output i of the stream whose state starts at key (random access). */
TB_HOST_DEVICE static inline uint64_t tb_hash(uint64_t key, uint64_t i) { return tb_mix64(key + (i + 1) * TB_GOLDEN64); }

/* Keys of two and three words (seed, epoch, clip; seed, step, layer ...). */
static inline uint64_t tb_hash2(uint64_t a, uint64_t b) {
    return tb_mix64(a * TB_GOLDEN64 + b + 0x632BE59BD9B4E019ull);
}
/* tb_hash3(a, b, c) is tb_mix64(tb_hash3_key(a, b) ^ c): the key of its first two words, which
 * a kernel can take to make the draws of many c. */
TB_HOST_DEVICE static inline uint64_t tb_hash3_key(uint64_t a, uint64_t b) {
    return a * TB_GOLDEN64 ^ (b + 0x632BE59BD9B4E019ull) * 0xBF58476D1CE4E5B9ull;
}
static inline uint64_t tb_hash3(uint64_t a, uint64_t b, uint64_t c) {
    return tb_mix64(tb_hash3_key(a, b) ^ c);
}

#endif
