/* cudaemu: cuda_bf16.h's bfloat16 type and its two conversions (round to nearest even, as
 * __float2bfloat16; NaN kept quiet), for the kernels that hand bf16 tiles to WMMA (mma.h). */
#ifndef TB_CUDAEMU_BF16_H
#define TB_CUDAEMU_BF16_H

#include <stdint.h>
#include <string.h>

struct __nv_bfloat16 {
    unsigned short __x;
};
static inline __nv_bfloat16 __float2bfloat16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    __nv_bfloat16 h;
    if ((u & 0x7fffffffu) > 0x7f800000u) h.__x = (unsigned short)((u >> 16) | 0x40);
    else h.__x = (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
    return h;
}
static inline float __bfloat162float(__nv_bfloat16 h) {
    const uint32_t u = (uint32_t)h.__x << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

#endif
