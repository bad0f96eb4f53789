/* The CUDA table of backend.h (make CUDA=1 or CUDA=emu): the entries kernels.cu (inference) and
 * backward.cu (training) define. Verified in the emulator, not yet on a GPU: see docs/cuda.md. */
#include "cuda.h"

static void act_quant_params(float lo, float hi, float *scale, int32_t *zero_point) {
    (void)lo, (void)hi;
    *scale = 1.0f, *zero_point = 0; /* int8 is CPU-only: pack_new refuses it here */
}

const tb_kernels tb_cuda_kernels = {
    .name = "cuda",
    .mixed = NULL, /* mixed-precision training: not yet */
    .open = tb_cuda_open, .upload = tb_cuda_upload, .release = tb_cuda_release,
    .has_native = tb_cuda_has_native, .has_attention_bf16 = tb_cuda_has_attention_bf16,
    .pack_new = tb_cuda_pack_new, .pack_add = tb_cuda_pack_add,
    .pack_bytes = tb_cuda_pack_bytes, .pack_count = tb_cuda_pack_count,
    .pack_layer = tb_cuda_pack_layer, .pack_set_act = tb_cuda_pack_set_act,
    .pack_is_static = tb_cuda_pack_is_static, .act_quant_params = act_quant_params,
    .pack_free = tb_cuda_pack_free,
    .ctx_new = tb_cuda_ctx_new, .ctx_free = tb_cuda_ctx_free, .ctx_status = tb_cuda_ctx_status,
    .ctx_observe = tb_cuda_ctx_observe,
    .mem_alloc = tb_cuda_mem_alloc, .mem_free = tb_cuda_mem_free, .to_host = tb_cuda_to_host,
    .to_device = tb_cuda_to_device, .normalize_rows = tb_cuda_normalize_rows,
    .row_dots = tb_cuda_row_dots,
    .to_host_maps = tb_cuda_to_host_maps, .zero = tb_cuda_zero, .copy = tb_cuda_copy,
    .linear = tb_cuda_linear, .linear_act = tb_cuda_linear_act,
    .linear_backward = tb_cuda_linear_backward,
    .layernorm = tb_cuda_layernorm, .layernorm_backward = tb_cuda_layernorm_backward,
    .bias_act = tb_cuda_bias_act, .act_backward = tb_cuda_act_backward,
    .scale_cols = tb_cuda_scale_cols, .scale_cols_backward = tb_cuda_scale_cols_backward,
    .scale_rows = tb_cuda_scale_rows, .dropout = tb_cuda_dropout,
    .patchify = tb_cuda_patchify, .patch_targets = tb_cuda_patch_targets,
    .add_rows = tb_cuda_add_rows, .mean_rows = tb_cuda_mean_rows,
    .mean_rows_backward = tb_cuda_mean_rows_backward, .cross_entropy = tb_cuda_cross_entropy,
    .mse = tb_cuda_mse,
    .gather_rows = tb_cuda_gather_rows, .scatter_rows = tb_cuda_scatter_rows,
    .copy_block = tb_cuda_copy_block,
    .bias_lookup = tb_cuda_bias_lookup, .bias_lookup_backward = tb_cuda_bias_lookup_backward,
    .attention = tb_cuda_attention_train, .attention_backward = tb_cuda_attention_backward,
    .attention_scratch_floats = tb_cuda_attention_scratch_floats,
    .attention_backward_scratch_floats = tb_cuda_attention_backward_scratch_floats,
};
