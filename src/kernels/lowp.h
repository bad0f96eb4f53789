/* Linear layers through oneDNN's matmul primitive with weights packed once (docs/precision.md):
 * f32 (inference: the bias, activation and residual sum fused into the product's epilogue), bf16
 * weights and activations, or int8 weights (symmetric, per output channel) with int8
 * activations quantised per call (asymmetric, per tensor, as ONNX Runtime's dynamic quantisation
 * does) or with a fixed scale and zero point per layer (static int8, calibrated); f32
 * accumulation and output.
 *
 * Two paths give the same answers up to f32 rounding:
 *   native    oneDNN's matmul primitive (AVX512-BF16 vdpbf16ps / AVX512-VNNI vpdpbusd kernels),
 *             weights reordered once into the layout the primitive asks for; int8 on AVX2
 *             without VNNI: our own vpmaddubsw kernel (qgemm.h) with 7-bit weights
 *             (tb_int8_weight_max) in its own panels (oneDNN's AVX2 kernel on request);
 *   reference the same rounding of weights and activations done here, then expanded to f32 and
 *             multiplied by sgemm: for CPUs without those instructions (chosen by cpuid), and
 *             forced by tests (--precision int8-ref: 8-bit weights on every CPU). */
#ifndef TB_LOWP_H
#define TB_LOWP_H

#include <stddef.h>
#include <stdint.h>

#include <oneapi/dnnl/dnnl.h>

#include "../common.h"
#include "linear.h"

/* A linear layer's weight W (N out, K in), packed or in reduced precision (linear.h's opaque
 * tb_qweight). */
struct tb_qweight {
    int prec;              /* TB_PREC_FP32, TB_PREC_BF16 or TB_PREC_INT8 */
    int native;            /* 1: data in wmd's layout for the oneDNN primitive (always for f32),
                              or in qgemm.h's layout (avx2) */
    int avx2;              /* int8 on an AVX2 CPU without VNNI: our own kernel (qgemm.h) */
    int64_t N, K;
    void *data;            /* bf16 (uint16_t) or int8 values; reference path: (N, K) row-major */
    size_t bytes;
    float *scale;          /* int8: W[n, k] ~ scale[n] * q[n, k] */
    int32_t *colsum;       /* int8: sum over k of q[n, k] (the activations' zero-point term) */
    int id;                /* its index in the pack (the layer's number; 0 outside a pack) */
    float act_scale;       /* int8: > 0: the activations' fixed scale and zero point (static */
    int32_t act_zp;        /* int8, calibrated: tb_linear_pack_set_act); 0: set per call */
    dnnl_memory_desc_t wmd;
};

/* The int8 weights' range [-q, q] of a path: 127, or 63 natively on a CPU without VNNI, where
 * the pair sums of vpmaddubsw would otherwise saturate. */
int tb_int8_weight_max(int native);

/* Converts W once. eng: the model's oneDNN engine (used when native). native: 0 the portable
 * path, 1 the fastest kernel of the CPU (int8 on AVX2 without VNNI: our own, qgemm.h),
 * TB_INT8_ONEDNN oneDNN's matmul even there (the benchmarks' comparison). */
#define TB_INT8_ONEDNN 2
int tb_qweight_init(tb_qweight *q, dnnl_engine_t eng, const float *W, int64_t N, int64_t K,
                    int prec, int native, tb_err *e);
void tb_qweight_free(tb_qweight *q);

/* tb_linear_ctx_new on an engine of one's own (the tests): max_mk, max_n, max_nk as there. */
int tb_lowp_ctx_new(tb_lowp_ctx **out, dnnl_engine_t eng, int native, int64_t max_mk,
                    int64_t max_n, int64_t max_nk, tb_err *e);
/* Rounding helpers (exposed for the tests): f32 → bf16 round-to-nearest-even and back; the
 * per-tensor u8 quantisation of activations (scale, zero point) as ONNX Runtime computes it. */
uint16_t tb_bf16_from_f32(float x);
float tb_f32_from_bf16(uint16_t h);
void tb_quant_u8_params(const float *x, int64_t n, float *scale, int32_t *zero_point);

#endif
