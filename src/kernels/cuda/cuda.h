/* The CUDA backend's functions (kernels.cu, backward.cu, optim.cu), which table.c lists as the table tb_cuda_kernels
 * (backend.h). Built only with `make CUDA=1`; see docs/cuda.md. Written without a GPU: nothing
 * here has run on one yet. */
#ifndef TB_CUDA_H
#define TB_CUDA_H

#ifdef __cplusplus
extern "C" { /* the project's headers are C: their functions have C linkage here too */
#endif

#include "../backend.h"

int tb_cuda_open(void **ctx, tb_err *e);
void tb_cuda_close(void *ctx);
int tb_cuda_fork(void *ctx, void **out, tb_err *e);
int tb_cuda_upload(void *ctx, const void *host, size_t bytes, tb_err *e);
void tb_cuda_release(void *ctx, const void *host);
int tb_cuda_has_native(void *ctx, int precision);
int tb_cuda_has_attention_bf16(void *ctx);
int tb_cuda_pack_new(void *ctx, tb_linear_pack **out, int precision, int native, int max_weights,
                     tb_err *e);
int tb_cuda_pack_add(void *ctx, tb_linear_pack *p, const char *name, const float *W, int64_t N,
                     int64_t K, const tb_qweight **out, tb_err *e);
size_t tb_cuda_pack_bytes(void *ctx, const tb_linear_pack *p);
int tb_cuda_pack_count(void *ctx, const tb_linear_pack *p);
const char *tb_cuda_pack_layer(void *ctx, const tb_linear_pack *p, int i, int64_t *N, int64_t *K);
void tb_cuda_pack_set_act(void *ctx, tb_linear_pack *p, int i, float scale, int32_t zero_point);
int tb_cuda_pack_is_static(void *ctx, const tb_linear_pack *p);
void tb_cuda_pack_free(void *ctx, tb_linear_pack *p);
int tb_cuda_ctx_new(void *ctx, tb_lowp_ctx **out, const tb_linear_pack *p, int64_t max_mk,
                    int64_t max_n, int64_t max_nk, tb_err *e);
void tb_cuda_ctx_free(void *ctx, tb_lowp_ctx *c);
int tb_cuda_ctx_status(void *ctx, tb_lowp_ctx *c);
void tb_cuda_ctx_observe(void *ctx, tb_lowp_ctx *c, tb_lowp_observer fn, void *user);
void *tb_cuda_mem_alloc(void *ctx, size_t bytes);
void tb_cuda_mem_free(void *ctx, void *p);
void tb_cuda_to_host(void *ctx, void *dst, const void *src, size_t bytes);
void tb_cuda_to_host_maps(void *ctx, float *dst, const float *src, const int32_t *rows, int64_t B,
                          int64_t N, int64_t n);
void tb_cuda_zero(void *ctx, float *x, int64_t n);
void tb_cuda_copy(void *ctx, float *dst, const float *src, int64_t n);
void tb_cuda_linear(void *ctx, tb_lowp_ctx *c, float *y, int64_t ldy, const float *x,
                    const tb_lin *l, const float *b, int64_t M, int64_t N, int64_t K,
                    int accumulate);
void tb_cuda_linear_act(void *ctx, tb_lowp_ctx *c, float *y, const float *x, const tb_lin *l,
                        int64_t M, int64_t N, int64_t K, tb_act act);
void tb_cuda_layernorm(void *ctx, float *y, int64_t ldy, const float *x, int64_t ldx,
                       const float *w, const float *b, int64_t rows, int64_t n, float eps);
void tb_cuda_bias_act(void *ctx, float *x, const float *bias, int64_t rows, int64_t n, tb_act act);
void tb_cuda_rope(void *ctx, float *x, int64_t ld, int64_t rows, const int32_t *pos,
                  int heads, int head_dim, const float *cs, int64_t cs_floats, int backward);
void tb_cuda_scale_cols(void *ctx, float *y, const float *lambda, int64_t rows, int64_t n);
void tb_cuda_scale_rows(void *ctx, float *y, const float *x, const float *keep,
                        const tb_grouping *g, int64_t C, int add);
void tb_cuda_patchify(void *ctx, float *patches, const float *pix, const tb_patch_geom *g);
void tb_cuda_add_rows(void *ctx, float *y, int64_t ldy, const float *a, int64_t lda, const float *b,
                      int64_t ldb, const int32_t *b_idx, const float *c, int64_t ldc, int64_t rows,
                      int64_t n);
void tb_cuda_mean_rows(void *ctx, float *out, const float *x, int64_t n_seq, int64_t L, int64_t n);
void tb_cuda_gather_rows(void *ctx, float *dst, const float *src, const int32_t *idx, int64_t n,
                         int64_t C, const float *row_w, const float *item_w, int64_t per);
void tb_cuda_scatter_rows(void *ctx, float *dst, const float *src, const int32_t *idx, int64_t n,
                          int64_t C, int add, const float *row_w, const float *item_w, int64_t per,
                          int shared);
void tb_cuda_copy_block(void *ctx, float *dst, int64_t ldd, const int32_t *dst_idx,
                        const float *src, int64_t lds, const int32_t *src_idx, int64_t n,
                        int64_t w);
void tb_cuda_bias_lookup(void *ctx, float *bias, const float *table, const int32_t *rel,
                         int64_t heads, int64_t n);
int tb_cuda_attention(void *ctx, float *out, const float *q, const float *k, const float *v,
                      int64_t ld, const tb_grouping *g, int heads, int head_dim,
                      const tb_attn_bias *bias, int bf16, float *scratch, int n_threads,
                      const tb_attn_dropout *drop);
int64_t tb_cuda_attention_scratch_floats(void *ctx, int64_t group_len, int head_dim, int n_threads);
/* Training's entries (backward.cu). */
void tb_cuda_linear_backward(void *ctx, tb_lowp_ctx *c, float *dx, int64_t lddx, float *dW,
                             float *db, const float *dy, int64_t lddy, const float *x, int64_t ldx,
                             const float *W, int64_t M, int64_t N, int64_t K, int accumulate_dx);
void tb_cuda_layernorm_backward(void *ctx, float *dx, const float *dy, const float *x,
                                const float *w, float *dw, float *db, int64_t rows, int64_t n,
                                float eps);
void tb_cuda_act_backward(void *ctx, float *dy, const float *h, int64_t rows, int64_t n,
                          tb_act act);
void tb_cuda_scale_cols_backward(void *ctx, float *dy, float *dlambda, const float *y,
                                 const float *lambda, int64_t rows, int64_t n);
void tb_cuda_dropout(void *ctx, float *x, int64_t n, uint64_t key, int64_t first, tb_keep_rule r);
void tb_cuda_draw_keep(void *ctx, float *keep, int64_t n, tb_drop_draws d);
void tb_cuda_mean_rows_backward(void *ctx, float *dx, const float *dout, int64_t n_seq, int64_t L,
                                int64_t n);
double tb_cuda_cross_entropy(void *ctx, float *logits, const int64_t *labels, int64_t rows,
                             int64_t n, double eps);
void tb_cuda_bias_lookup_backward(void *ctx, float *dtable, const float *dbias, const int32_t *rel,
                                  int64_t heads, int64_t n);
/* tb_cuda_attention, and with dropout on the probabilities (training) backward.cu's kernel */
int tb_cuda_attention_train(void *ctx, float *out, const float *q, const float *k, const float *v,
                            int64_t ld, const tb_grouping *g, int heads, int head_dim,
                            const tb_attn_bias *bias, int bf16, float *scratch, int n_threads,
                            const tb_attn_dropout *drop);
int tb_cuda_attention_backward(void *ctx, float *dq, float *dk, float *dv, int64_t ldd,
                               const float *q, const float *k, const float *v, int64_t ld,
                               const float *o, const float *dout, const tb_grouping *g, int heads,
                               int head_dim, const tb_attn_bias *bias, float *scratch,
                               int n_threads, const tb_attn_dropout *drop);
int64_t tb_cuda_attention_backward_scratch_floats(void *ctx, int64_t group_len, int head_dim,
                                                  int n_threads);
/* X-CLIP's and pretraining's entries (the section at the end of kernels.cu). */
void tb_cuda_to_device(void *ctx, void *dst, const void *src, size_t bytes);
void tb_cuda_normalize_rows(void *ctx, float *x, int64_t rows, int64_t n);
void tb_cuda_row_dots(void *ctx, float *out, const float *a, int64_t lda, const float *b,
                      int64_t ldb, int64_t rows, int64_t n, float scale);
void tb_cuda_patch_targets(void *ctx, float *target, const float *pix, const tb_patch_geom *g,
                           const int32_t *tokens, int64_t rows, int64_t per_clip, const float *mean,
                           const float *std, int norm);
double tb_cuda_mse(void *ctx, float *d, const float *a, const float *b, int64_t n);
/* The optimiser's entries (optim.cu). */
double tb_cuda_sum_squares(void *ctx, const float *const *x, const int64_t *n, int count);
void tb_cuda_adamw(void *ctx, float *w, const float *g, float *m, float *v, int64_t n,
                   const tb_adamw_args *a);
int tb_cuda_download(void *ctx, void *host, size_t bytes, tb_err *e);
/* A case no kernel covers records TUBELET_ERR_UNSUPPORTED, which the pass returns. */
void tb_cuda_unsupported(void *ctx, const char *what);

#ifdef __cplusplus
}
#endif

#endif
