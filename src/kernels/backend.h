/* The operations the models run, as one table: what a backend provides. models/ calls these
 * through a backend instance (tb_backend: the table and its context; TB_RUN) and never a kernel
 * by name, so that another table (a GPU's) can sit beside the CPU one without an #ifdef in the
 * model code. Every entry has the meaning, and the CPU table the exact code, of the kernel its
 * comment names. */
#ifndef TB_BACKEND_H
#define TB_BACKEND_H

#include <math.h>
#include <stdint.h>

#include "attention.h"
#include "linear.h"
#include "ops.h"

/* The patches of a clip batch: pixels (B, T, C, H, W) cut into gt x gh x gw patches of t x ph x
 * pw each. */
typedef struct {
    int64_t B, T, C, H, W; /* the pixels */
    int64_t t, ph, pw;     /* one patch */
    int64_t gt, gh, gw;    /* the grid of patches (beyond the pixels: zeros) */
} tb_patch_geom;

/* Code that every backend's entry runs as it is: plain C, also compiled as CUDA device code
 * (TB_HOST_DEVICE: rng.h, through ops.h). */

/* cross_entropy's row i of n logits: its loss -sum q log p with q = (1 - eps) onehot(label) + eps / n
 * (PyTorch's label_smoothing), in double; the logits replaced by dL/dlogits of the mean over the
 * `rows` rows, (p - q) / rows. */
static inline TB_HOST_DEVICE double tb_cross_entropy_row(float *l, int64_t label, int64_t n,
                                                         int64_t rows, double eps) {
    double mx = -INFINITY, sum = 0, mean_logp = 0;
    for (int64_t k = 0; k < n; k++) mx = l[k] > mx ? l[k] : mx;
    for (int64_t k = 0; k < n; k++) sum += exp((double)l[k] - mx);
    const double lse = log(sum) + mx;
    for (int64_t k = 0; k < n; k++) mean_logp += ((double)l[k] - lse) / (double)n;
    const double loss = (1 - eps) * (lse - l[label]) - eps * mean_logp;
    for (int64_t k = 0; k < n; k++) {
        const double q = (1 - eps) * (k == label) + eps / (double)n;
        l[k] = (float)((exp((double)l[k] - lse) - q) / (double)rows);
    }
    return loss;
}

/* patch_targets' norm_pix_loss on channel ch of one target row (per positions of C channels):
 * (v - mean) / (unbiased std + 1e-6), the sums in double. */
static inline TB_HOST_DEVICE void tb_patch_norm_channel(float *row, int64_t C, int64_t per,
                                                        int64_t ch) {
    double sum = 0, sq = 0;
    for (int64_t k = 0; k < per; k++) sum += row[k * C + ch];
    const double m = sum / (double)per;
    for (int64_t k = 0; k < per; k++) {
        const double d = row[k * C + ch] - m;
        sq += d * d;
    }
    const double sd = sqrt(sq / (double)(per - 1)) + 1e-6;
    for (int64_t k = 0; k < per; k++) row[k * C + ch] = (float)((row[k * C + ch] - m) / sd);
}

/* One AdamW update's constants for one tensor (the optimiser's, train/optim.c). */
typedef struct {
    double lr;           /* the step's learning rate times the tensor's layer-wise scale */
    double weight_decay; /* 0 for a tensor that takes none */
    double beta1, beta2, eps;
    double c1, c2;       /* the bias corrections 1 - beta1^t, 1 - beta2^t */
    double grad_scale;   /* 1 / accumulation steps, times the clipping factor */
} tb_adamw_args;

/* adamw's element j: the moments and the weight from gradient g, in double (the arithmetic the
 * CPU's optimiser always had: its outputs are compared bit for bit with earlier runs'). */
static inline TB_HOST_DEVICE void tb_adamw_element(float *w, float g, float *m, float *v,
                                                   const tb_adamw_args *a) {
    const double gj = g * a->grad_scale;
    *m = (float)(a->beta1 * *m + (1 - a->beta1) * gj);
    *v = (float)(a->beta2 * *v + (1 - a->beta2) * gj * gj);
    const double upd = (*m / a->c1) / (sqrt(*v / a->c2) + a->eps);
    *w = (float)(*w - a->lr * (upd + a->weight_decay * *w));
}

typedef struct tb_kernels {
    const char *name; /* the backend's name, as tubelet_load_params.device selects it */
    /* The same backend's table for mixed-precision training (autocast: the products in bf16),
     * which loading with train_precision bf16 selects; NULL: the backend has none. */
    const struct tb_kernels *mixed;

    /* ---- the backend's instance, its start and the home of the weights ---- */
    /* Every entry takes the instance's context first (tb_backend.ctx; NULL on the CPU, which
     * keeps no state). open: whether the backend can run on this machine (a GPU and its driver),
     * checked at load before anything is read, and the model's instance of it in *ctx (NULL:
     * nothing to do); a status and a message naming the problem. close: its release (NULL:
     * nothing), after every state made from it is freed. */
    int (*open)(void **ctx, tb_err *e);
    void (*close)(void *ctx);
    /* A second instance in *out for one state (or a model's gradients): its own failure record,
     * plan tables, product plans and scratch, so that states on several threads never share them,
     * reading the tensors uploaded to ctx while ctx is open; closed by close before ctx. NULL:
     * the backend keeps no per-state context (the CPU), and a state runs on the model's. */
    int (*fork)(void *ctx, void **out, tb_err *e);
    /* Host memory (bytes at host) made visible to the kernels of instance ctx once: a model's
     * tensor at load (the model's instance), a state's plan table (tb_state_share, the state's).
     * A GPU keeps a copy, which the backend's entries use wherever they are handed a pointer into
     * it; they take no other host pointer (entries copy nothing). release forgets it. The
     * linear layers' weights go through pack_add instead. Uploading the same range again
     * refreshes its copy (weights an optimizer updated). NULL on the CPU: nothing to do. */
    int (*upload)(void *ctx, const void *host, size_t bytes, tb_err *e);
    void (*release)(void *ctx, const void *host);
    /* The backend's copy of an uploaded tensor (host, bytes: as uploaded) copied back into its
     * host memory: weights an optimiser updated where they live (adamw), for the host to read
     * them (saving). NULL on the CPU, whose weights are the host's. */
    int (*download)(void *ctx, void *host, size_t bytes, tb_err *e);

    /* ---- weight preparation (linear.h): the model's set of packed weights ---- */
    /* 1 if the machine runs precision p natively (tb_lowp_cpu_has), and attention's products in
     * bf16 (tb_attention_has_bf16). */
    int (*has_native)(void *ctx, int precision);
    int (*has_attention_bf16)(void *ctx);
    /* tb_linear_pack_new, _add, _bytes, _count, _layer, _set_act, _is_static, _free. */
    int (*pack_new)(void *ctx, tb_linear_pack **out, int precision, int native, int max_weights,
                    tb_err *e);
    int (*pack_add)(void *ctx, tb_linear_pack *p, const char *name, const float *W, int64_t N,
                    int64_t K, const tb_qweight **out, tb_err *e);
    size_t (*pack_bytes)(void *ctx, const tb_linear_pack *p);
    int (*pack_count)(void *ctx, const tb_linear_pack *p);
    const char *(*pack_layer)(void *ctx, const tb_linear_pack *p, int i, int64_t *N, int64_t *K);
    void (*pack_set_act)(void *ctx, tb_linear_pack *p, int i, float scale, int32_t zero_point);
    int (*pack_is_static)(void *ctx, const tb_linear_pack *p);
    /* the scale and zero point its int8 products give activations in [lo, hi] (calibration's
     * report; tb_act_quant_params) */
    void (*act_quant_params)(void *ctx, float lo, float hi, float *scale, int32_t *zero_point);
    void (*pack_free)(void *ctx, tb_linear_pack *p);

    /* ---- a state's context of products (linear.h) ---- */
    /* tb_linear_ctx_new, tb_lowp_ctx_free; status: the first failure of a product since the last
     * call, forgotten (tb_lowp_ctx_status); observe: calibration's view of the products' inputs
     * (tb_lowp_ctx_observe). */
    int (*ctx_new)(void *ctx, tb_lowp_ctx **out, const tb_linear_pack *p, int64_t max_mk,
                   int64_t max_n, int64_t max_nk, tb_err *e);
    void (*ctx_free)(void *ctx, tb_lowp_ctx *c);
    int (*ctx_status)(void *ctx, tb_lowp_ctx *c);
    void (*ctx_observe)(void *ctx, tb_lowp_ctx *c, tb_lowp_observer fn, void *user);

    /* ---- the state's memory: its buffers live where the kernels run ---- */
    /* bytes for a state's buffers (activations, training's), 64-byte aligned and zeroed; NULL
     * when out of memory (tb_alloc); and their release (NULL: nothing; tb_free). */
    void *(*mem_alloc)(void *ctx, size_t bytes);
    void (*mem_free)(void *ctx, void *p);
    /* bytes of such a buffer copied into host memory: a pass's outputs for the caller; and
     * bytes of host memory copied into such a buffer: the caller's inputs of a pass (pixels,
     * labels, X-CLIP's token ids and cached text embeddings), the one way they reach it. */
    void (*to_host)(void *ctx, void *dst, const void *src, size_t bytes);
    void (*to_device)(void *ctx, void *dst, const void *src, size_t bytes);
    /* Feature maps into the caller's buffers (host memory): dst (B, n, N), dst[(b n + d) N + r]
     * = column d of src's row rows[b N + r] (rows NULL: b N + r); tokens to channels-first. */
    void (*to_host_maps)(void *ctx, float *dst, const float *src, const int32_t *rows, int64_t B,
                         int64_t N, int64_t n);
    /* x[0..n) = 0, and dst[0..n) = src[0..n), within the state's buffers (memset, memcpy). */
    void (*zero)(void *ctx, float *x, int64_t n);
    void (*copy)(void *ctx, float *dst, const float *src, int64_t n);

    /* ---- products (linear.h, gemm.h) ---- */
    /* y = x W^T + b [+ y], one layer as stored or packed (tb_lin_apply); c: the state's context
     * of packed products, NULL when nothing is packed. */
    void (*linear)(void *ctx, tb_lowp_ctx *c, float *y, int64_t ldy, const float *x,
                   const tb_lin *l, const float *b, int64_t M, int64_t N, int64_t K,
                   int accumulate);
    /* y = act(x W^T + b), the activation in the product's epilogue (tb_lin_apply_act). */
    void (*linear_act)(void *ctx, tb_lowp_ctx *c, float *y, const float *x, const tb_lin *l,
                       int64_t M, int64_t N, int64_t K, tb_act act);
    /* dx = dy W [+ dx], dW += dy^T x, db += column sums (tb_linear_backward; f32 weights). */
    void (*linear_backward)(void *ctx, tb_lowp_ctx *c, float *dx, int64_t lddx, float *dW,
                            float *db, const float *dy, int64_t lddy, const float *x, int64_t ldx,
                            const float *W, int64_t M, int64_t N, int64_t K, int accumulate_dx);

    /* ---- row-wise (ops.h) ---- */
    void (*layernorm)(void *ctx, float *y, int64_t ldy, const float *x, int64_t ldx, const float *w,
                      const float *b, int64_t rows, int64_t n, float eps);
    void (*layernorm_backward)(void *ctx, float *dx, const float *dy, const float *x,
                               const float *w, float *dw, float *db, int64_t rows, int64_t n,
                               float eps);
    /* x = act(x + bias) (GELU and the other activations), and dy *= act'(h). */
    void (*bias_act)(void *ctx, float *x, const float *bias, int64_t rows, int64_t n, tb_act act);
    void (*act_backward)(void *ctx, float *dy, const float *h, int64_t rows, int64_t n, tb_act act);
    /* layer scale: y *= lambda per column, and its backward. */
    void (*scale_cols)(void *ctx, float *y, const float *lambda, int64_t rows, int64_t n);
    void (*scale_cols_backward)(void *ctx, float *dy, float *dlambda, const float *y,
                                const float *lambda, int64_t rows, int64_t n);
    /* Drop path: y[r] = k x[r] (add 0; y may be x) or y[r] += k x[r] (add 1) over the members r
     * of g's groups, rows of C, k = keep[r's group] (keep NULL: 1). */
    void (*scale_rows)(void *ctx, float *y, const float *x, const float *keep, const tb_grouping *g,
                       int64_t C, int add);
    /* x[i] *= keep(key, first + i): dropout's mask, regenerated for the backward. */
    void (*dropout)(void *ctx, float *x, int64_t n, uint64_t key, int64_t first, tb_keep_rule r);
    /* keep[i] = tb_drop_path_keep(&d, i) for i < n: drop path's factors of a step. */
    void (*draw_keep)(void *ctx, float *keep, int64_t n, tb_drop_draws d);

    /* ---- embedding, tokens, pooling, losses ---- */
    /* One row per patch of the grid, laid out (channel, dt, dy, dx) like the Conv3d kernel, in
     * (clip, time, row, column) order; pix: the pass's copy of the caller's pixels
     * (tb_state_pixels). */
    void (*patchify)(void *ctx, float *patches, const float *pix, const tb_patch_geom *g);
    /* Pretraining's targets: row r = the pixels of patch tokens[r] of clip r / per_clip (a
     * patch of the grid in (time, row, column) order), laid out (dt, dy, dx, channel); each
     * channel c un-normalised as v std[c] + mean[c] when mean is given, and with norm
     * normalised per patch and channel, (v - mean) / (unbiased std + 1e-6). pix: as patchify's. */
    void (*patch_targets)(void *ctx, float *target, const float *pix, const tb_patch_geom *g,
                          const int32_t *tokens, int64_t rows, int64_t per_clip, const float *mean,
                          const float *std, int norm);
    /* y[i] = a[i] + b[b_idx ? b_idx[i] : i] (+ c[i] when c), rows of n with row strides ldy,
     * lda, ldb, ldc (0: the same row for every i; ldy 0 sums every row into one, in the order of
     * i). Positions and cls tokens into the residual stream, their gradients. */
    void (*add_rows)(void *ctx, float *y, int64_t ldy, const float *a, int64_t lda, const float *b,
                     int64_t ldb, const int32_t *b_idx, const float *c, int64_t ldc, int64_t rows,
                     int64_t n);
    /* out (n_seq, n) = the mean of each sequence's L rows of x (pooling; sums in double). */
    void (*mean_rows)(void *ctx, float *out, const float *x, int64_t n_seq, int64_t L, int64_t n);
    /* Its backward: each of sequence i's L rows of dx = dout[i] / L. */
    void (*mean_rows_backward)(void *ctx, float *dx, const float *dout, int64_t n_seq, int64_t L,
                               int64_t n);
    /* Each of rows rows of x divided by its L2 norm (the sum of squares in double). */
    void (*normalize_rows)(void *ctx, float *x, int64_t rows, int64_t n);
    /* out[i] = scale (a_i . b_i), the dot product in double, rows of n with strides lda and ldb
     * (0: the same row for every i): X-CLIP's logits, a clip against its texts. */
    void (*row_dots)(void *ctx, float *out, const float *a, int64_t lda, const float *b,
                     int64_t ldb, int64_t rows, int64_t n, float scale);
    /* Cross-entropy of logits (rows, n) against labels (in the backend's memory) smoothed by eps
     * (target (1 - eps) onehot + eps / n): the logits become dL/dlogits of the mean loss;
     * returns the summed loss. */
    double (*cross_entropy)(void *ctx, float *logits, const int64_t *labels, int64_t rows,
                            int64_t n, double eps);
    /* The sum of (a - b)^2 over n elements, returned divided by n; d (when given) = its
     * gradient with respect to a. */
    double (*mse)(void *ctx, float *d, const float *a, const float *b, int64_t n);

    /* ---- token movements ---- */
    /* dst[i] = s_i src[idx[i]] for i < n (rows of C; idx[i] < 0: a zero row), with
     * s_i = row_w[idx[i]] (when given) times item_w[i / per] (when given), else a copy. */
    void (*gather_rows)(void *ctx, float *dst, const float *src, const int32_t *idx, int64_t n,
                        int64_t C, const float *row_w, const float *item_w, int64_t per);
    /* dst[idx[i]] (+)= s_i src[i] (idx[i] < 0: skipped), s_i as above. shared: destination rows
     * repeat (a cls row in every group), so their sums keep the order of i. */
    void (*scatter_rows)(void *ctx, float *dst, const float *src, const int32_t *idx, int64_t n,
                         int64_t C, int add, const float *row_w, const float *item_w, int64_t per,
                         int shared);

    /* w columns of n rows: dst row dst_idx[i] (i when NULL) = src row src_idx[i] (likewise),
     * row strides ldd and lds (ViViT Model 4's halves of the heads). */
    void (*copy_block)(void *ctx, float *dst, int64_t ldd, const int32_t *dst_idx, const float *src,
                       int64_t lds, const int32_t *src_idx, int64_t n, int64_t w);

    /* Rotary positions (rope.h, V-JEPA 2): each head's columns of rows x (row stride ld) rotated
     * in place by its row's (depth, height, width) pos (rows, 3) with the angles' table cs
     * (tb_rope_table); backward: the transpose, dx from dy. */
    void (*rope)(void *ctx, float *x, int64_t ld, int64_t rows, const int32_t *pos, int heads,
                 int head_dim, const float *cs, int64_t cs_floats, int backward);

    /* ---- the optimiser (train/optim.c): AdamW where the weights and gradients live ---- */
    /* The sum of squares of count buffers, in double: buffer i is x[i] (n[i] floats; NULL:
     * skipped), x and n host arrays (the gradients of a model's tensors, one global norm). The
     * CPU adds every element to one sum in order, as that norm always did. */
    double (*sum_squares)(void *ctx, const float *const *x, const int64_t *n, int count);
    /* tb_adamw_element on each of n elements: the weights w of a model tensor (its host
     * address: the backend updates its own copy, the uploaded one), its gradient g and moments
     * m, v (the backend's memory, mem_alloc). */
    void (*adamw)(void *ctx, float *w, const float *g, float *m, float *v, int64_t n,
                  const tb_adamw_args *a);

    /* ---- attention over a grouping (attention.h) ---- */
    /* A relative-position bias from its table: bias[h n + i] = table[rel[i] heads + h] for the
     * heads and n pairs of positions (Video Swin's windows); the backward adds into dtable in
     * that order. */
    void (*bias_lookup)(void *ctx, float *bias, const float *table, const int32_t *rel,
                        int64_t heads, int64_t n);
    void (*bias_lookup_backward)(void *ctx, float *dtable, const float *dbias, const int32_t *rel,
                                 int64_t heads, int64_t n);
    /* out = softmax(Q K^T / sqrt(d) + bias) V per group and head. bias NULL: none; bf16: operands
     * in bf16 where the backend has them (no bias or dropout). Returns a status. */
    int (*attention)(void *ctx, float *out, const float *q, const float *k, const float *v,
                     int64_t ld, const tb_grouping *g, int heads, int head_dim,
                     const tb_attn_bias *bias, int bf16, float *scratch, int n_threads,
                     const tb_attn_dropout *drop);
    int (*attention_backward)(void *ctx, float *dq, float *dk, float *dv, int64_t ldd,
                              const float *q, const float *k, const float *v, int64_t ld,
                              const float *o, const float *dout, const tb_grouping *g, int heads,
                              int head_dim, const tb_attn_bias *bias, float *scratch, int n_threads,
                              const tb_attn_dropout *drop);
    /* The scratch floats the two need for groups of up to group_len tokens. */
    int64_t (*attention_scratch_floats)(void *ctx, int64_t group_len, int head_dim, int n_threads);
    int64_t (*attention_backward_scratch_floats)(void *ctx, int64_t group_len, int head_dim,
                                                 int n_threads);
} tb_kernels;

/* A backend as an instance: its table and its context, which every entry takes first. The model
 * holds one (tubelet_model.be, opened at load), and each state the one its passes run on
 * (tubelet_state.be). */
typedef struct tb_backend {
    const tb_kernels *k;
    void *ctx;
} tb_backend;

/* The entry `entry` of backend b (a const tb_backend *) run on its context: TB_RUN(b, zero, x,
 * n) is b->k->zero(b->ctx, x, n). */
#define TB_RUN(b, entry, ...) ((b)->k->entry((b)->ctx, __VA_ARGS__))

/* The CPU table (cpu.c): oneDNN products, the fused AVX-512/AVX2 kernels and their fallbacks. */
extern const tb_kernels tb_cpu_kernels;
/* The CPU table of mixed-precision training (autocast): every product of the linear layers,
 * forward and backward, with bf16 operands (tb_gemm_bf16), and attention's forward with bf16
 * operands where that kernel is the faster (tb_attention_has_bf16) and no bias or dropout
 * applies; all else as tb_cpu_kernels. */
extern const tb_kernels tb_cpu_mixed_kernels;

/* The backends of this build (backends.c, the one list a new backend's table joins): the i-th,
 * NULL past the last; and the one named name (NULL or "": "cpu"), NULL when none is. */
#ifdef TUBELET_CUDA
/* The CUDA table (cuda/table.c, make CUDA=1; docs/cuda.md): inference in fp32, unverified until
 * a GPU runs it. */
extern const tb_kernels tb_cuda_kernels;
#endif
const tb_kernels *tb_backend_at(int i);
const tb_kernels *tb_backend_find(const char *name);

#endif
