/* Our own int8 product for AVX2 CPUs without VNNI (docs/precision.md, "int8 on AVX2"):
 *
 *   y (M x N, row stride ldy) = scale[n] * (sum_k xq[m, k] w[n, k]) + offset[n]  [+ y]
 *
 * xq: u8 activations (row stride lda = tb_qgemm_lda(K), the bytes past K zero), w: s8 weights in
 * [-63, 63] (7 bits: vpmaddubsw adds two u8 x s8 products into a saturating 16-bit sum, which
 * 2 x 255 x 63 cannot overflow), packed once by tb_qgemm_pack. The caller folds the activations'
 * scale and zero point into scale and offset: scale[n] = s_x s_w[n], offset[n] = b[n] - scale[n]
 * z_x sum_k w[n, k]. The sums are exact (int32), so any order of them gives the same y.
 *
 * The weights' layout: panels of 16 output channels; in each, groups of 4 consecutive k, and in a
 * group the 16 channels' 4 bytes side by side (64 bytes: two ymm registers, 8 channels x 4 k
 * each). The micro-kernel broadcasts 4 bytes of one activation row, multiplies them into both
 * registers with vpmaddubsw (pairs of k into s16) and vpmaddwd by ones (pairs of pairs into s32),
 * for 6 rows x 16 channels at a time. K is padded to a multiple of 4 and N to one of 16 with zero
 * weights. */
#ifndef TB_QGEMM_H
#define TB_QGEMM_H

#include <stddef.h>
#include <stdint.h>

/* 1 if this CPU has AVX2 (the kernel's instructions; checked at run time, the file is compiled
 * for any x86-64). */
int tb_qgemm_has_avx2(void);
/* Row stride of the u8 activations: K rounded up to a multiple of 4. */
int64_t tb_qgemm_lda(int64_t K);
/* Bytes of the packed weights of an N x K layer; and the packing of w (N, K) row-major. */
size_t tb_qgemm_pack_bytes(int64_t N, int64_t K);
void tb_qgemm_pack(int8_t *dst, const int8_t *w, int64_t N, int64_t K);
/* xq (M x lda) = saturate(round_half_even(x / scale) + zp) to [0, 255] (x / scale as x * (1 /
 * scale), as lowp.c's quantisation), the bytes of each row past K set to 0. x: M x K, contiguous.
 * AVX2 where the CPU has it, the same values either way. */
void tb_qgemm_quant(uint8_t *xq, int64_t lda, const float *x, int64_t M, int64_t K, float scale,
                    int32_t zp);
/* The product above, AVX2 (call only where tb_qgemm_has_avx2), OpenMP over blocks of rows and
 * channels. act: a tb_act applied to each 6 x 16 block as it is stored (fc1's GELU), or -1 for
 * none; not with accumulate. */
void tb_qgemm(float *y, int64_t ldy, const uint8_t *xq, int64_t lda, const int8_t *packed,
              const float *scale, const float *offset, int64_t M, int64_t N, int64_t K,
              int accumulate, int act);
/* The same from plain weights w (N, K), scalar, one thread (the activation by tb_act_ref): the
 * tests' reference. */
void tb_qgemm_ref(float *y, int64_t ldy, const uint8_t *xq, int64_t lda, const int8_t *w,
                  const float *scale, const float *offset, int64_t M, int64_t N, int64_t K,
                  int accumulate, int act);

#endif
