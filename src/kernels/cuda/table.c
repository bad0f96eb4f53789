/* The CUDA table of backend.h (make CUDA=1): the entries kernels.cu defines, and training's,
 * which are not written yet and report so. Unverified on a GPU: see docs/cuda.md. */
#include "cuda.h"

static void linear_backward(tb_lowp_ctx *c, float *dx, int64_t lddx, float *dW, float *db,
                            const float *dy, int64_t lddy, const float *x, int64_t ldx,
                            const float *W, int64_t M, int64_t N, int64_t K, int accumulate_dx) {
    (void)c, (void)dx, (void)lddx, (void)dW, (void)db, (void)dy, (void)lddy, (void)x, (void)ldx;
    (void)W, (void)M, (void)N, (void)K, (void)accumulate_dx;
    tb_cuda_unsupported("linear_backward");
}
static void layernorm_backward(float *dx, const float *dy, const float *x, const float *w,
                               float *dw, float *db, int64_t rows, int64_t n, float eps) {
    (void)dx, (void)dy, (void)x, (void)w, (void)dw, (void)db, (void)rows, (void)n, (void)eps;
    tb_cuda_unsupported("layernorm_backward");
}
static void act_backward(float *dy, const float *h, int64_t rows, int64_t n, tb_act act) {
    (void)dy, (void)h, (void)rows, (void)n, (void)act;
    tb_cuda_unsupported("act_backward");
}
static void scale_cols_backward(float *dy, float *dlambda, const float *y, const float *lambda,
                                int64_t rows, int64_t n) {
    (void)dy, (void)dlambda, (void)y, (void)lambda, (void)rows, (void)n;
    tb_cuda_unsupported("scale_cols_backward");
}
static void dropout(float *x, int64_t n, uint64_t key, int64_t first, tb_keep_rule r) {
    (void)x, (void)n, (void)key, (void)first, (void)r;
    tb_cuda_unsupported("dropout");
}
static void mean_rows_backward(float *dx, const float *dout, int64_t n_seq, int64_t L,
                               int64_t n) {
    (void)dx, (void)dout, (void)n_seq, (void)L, (void)n;
    tb_cuda_unsupported("mean_rows_backward");
}
static double cross_entropy(float *logits, const int64_t *labels, int64_t rows, int64_t n,
                            double eps) {
    (void)logits, (void)labels, (void)rows, (void)n, (void)eps;
    tb_cuda_unsupported("cross_entropy");
    return 0;
}
static void bias_lookup_backward(float *dtable, const float *dbias, const int32_t *rel,
                                 int64_t heads, int64_t n) {
    (void)dtable, (void)dbias, (void)rel, (void)heads, (void)n;
    tb_cuda_unsupported("bias_lookup_backward");
}
static int attention_backward(float *dq, float *dk, float *dv, int64_t ldd, const float *q,
                              const float *k, const float *v, int64_t ld, const float *o,
                              const float *dout, const tb_grouping *g, int heads, int head_dim,
                              const tb_attn_bias *bias, float *scratch, int n_threads,
                              const tb_attn_dropout *drop) {
    (void)dq, (void)dk, (void)dv, (void)ldd, (void)q, (void)k, (void)v, (void)ld, (void)o;
    (void)dout, (void)g, (void)heads, (void)head_dim, (void)bias, (void)scratch;
    (void)n_threads, (void)drop;
    return TUBELET_ERR_UNSUPPORTED;
}
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
    .linear_backward = linear_backward,
    .layernorm = tb_cuda_layernorm, .layernorm_backward = layernorm_backward,
    .bias_act = tb_cuda_bias_act, .act_backward = act_backward,
    .scale_cols = tb_cuda_scale_cols, .scale_cols_backward = scale_cols_backward,
    .scale_rows = tb_cuda_scale_rows, .dropout = dropout,
    .patchify = tb_cuda_patchify, .patch_targets = tb_cuda_patch_targets,
    .add_rows = tb_cuda_add_rows, .mean_rows = tb_cuda_mean_rows,
    .mean_rows_backward = mean_rows_backward, .cross_entropy = cross_entropy, .mse = tb_cuda_mse,
    .gather_rows = tb_cuda_gather_rows, .scatter_rows = tb_cuda_scatter_rows,
    .copy_block = tb_cuda_copy_block,
    .bias_lookup = tb_cuda_bias_lookup, .bias_lookup_backward = bias_lookup_backward,
    .attention = tb_cuda_attention, .attention_backward = attention_backward,
    .attention_scratch_floats = tb_cuda_attention_scratch_floats,
    .attention_backward_scratch_floats = tb_cuda_attention_scratch_floats,
};
