/* The model handle shared by the four families, and the pieces each family file provides. */
#ifndef TB_MODEL_H
#define TB_MODEL_H

#include <string.h>

#include "../common.h"
#include "../io/weights.h"
#include "../kernels/attention.h"
#include "../kernels/backend.h"
#include "../kernels/linear.h"
#include "config.h"

typedef struct { const float *w, *b; float eps; } tb_ln; /* nn.LayerNorm */
typedef struct {
    tb_lin q, k, v, o;       /* multi-head self-attention */
    tb_lin qkv;              /* reduced precision: q, k, v fused into one (3D, D) weight */
} tb_mha;

typedef struct {
    tb_ln ln1, ln2;          /* layernorm_before, layernorm_after */
    tb_mha attn;             /* the block's last (or only) attention: joint, space, global, height */
    tb_lin fc1, fc2;         /* intermediate.dense, output.dense */
    tb_ln ln_t;              /* TB_STEP_TEMPORAL_OR_LOCAL: temporal_layernorm (TimeSformer: */
    tb_mha attn_t;           /*   time; ViViT Model 3: time), temporal_attention; local_* for */
    tb_lin dense_t;          /*   local_global; temporal_dense (TimeSformer only; w NULL: none) */
    tb_ln ln_w;              /* TimeSformer axial's width step (TB_STEP_WIDTH): width_layernorm */
    tb_mha attn_w;           /*   width_attention */
    tb_lin dense_w;          /*   width_dense */
    const float *ls1, *ls2;  /* VideoMAE layer scale: lambda_1, lambda_2 (D), which multiply the
                                attention and MLP outputs (STMixer's gamma_1, gamma_2); NULL: none */
} tb_block;

/* Attention steps of a block (TimeSformer: docs/timesformer-variants.md; ViViT Model 3:
 * docs/vivit-variants.md). Each is
 *   x += dense(Attention(LN(x)) over groups of tokens)
 * with its own LayerNorm, q/k/v/output projections and, in TimeSformer except the last step, a
 * dense layer (ViViT Model 3's steps have none). */
#define TB_MAX_STEPS 3
typedef enum {
    TB_STEP_MAIN,  /* layernorm_before + attention, no dense: TimeSformer's last (or only) step,
                      ViViT Model 3's first (space) */
    TB_STEP_TEMPORAL_OR_LOCAL, /* the block's _t weights: temporal_* (divided, axial, ViViT
                                  Model 3: time) or local_* (local_global) */
    TB_STEP_WIDTH, /* width_* (axial: width) */
} tb_step_kind;

/* Which tokens step k attends among, for a clip's T x H x W patch grid: patch (t, y, x) is in
 * group group(t, y, x, H, W) of its clip, one of n_groups (some may be empty: they are dropped);
 * with cls, the clip's cls token joins every group and its outputs are averaged over them. */
typedef struct {
    tb_step_kind kind;
    int cls;
    int64_t n_groups;
    int64_t (*group)(int64_t t, int64_t y, int64_t x, int64_t H, int64_t W);
} tb_attn_step;

/* Where parameters come from: a model directory's tensors, or fresh random values drawn as the
 * references draw them (tests/test_init.c checks every family's against tools/make_init_rules.py's
 * rules). TB_INIT_NORMAL: normal(0, cfg.init_std), truncated to |x| <= fam->init_trunc where the
 * family's reference draws trunc_normal_. */
enum { TB_INIT_NORMAL, TB_INIT_ZEROS, TB_INIT_ONES,
       TB_INIT_LAYER_SCALE, /* every entry cfg.layer_scale, as the references' init_values */
       TB_INIT_UNIFORM,     /* uniform(-bound, bound): tb_param_uniform */
       TB_INIT_NORMAL_SCALED /* TB_INIT_NORMAL at std initializer_range * scale: tb_param_scaled */ };

/* Every parameter of a model, as the forward pass reads them. The same structure, built a second
 * time with tb_param in gradient mode, holds the gradients (struct tubelet_grads). */
typedef struct {
    const float *patch_w, *patch_b;  /* (D, C t ph pw) and (D) */
    const tb_qweight *patch_q;       /* reduced precision: patch_w converted (patch_w NULL) */
    const float *cls, *pos, *time_pos;
    tb_block *blocks;                /* tb_n_blocks(cfg); ViViT Model 2: the temporal encoder's
                                        blocks follow the spatial encoder's */
    tb_ln final_ln, fc_norm;
    tb_lin head;                     /* head.w NULL when num_labels == 0 (HF's Identity) */
    void *fam;                       /* a family's own parameters (Video Swin: its stages; ViViT
                                        Model 2: its temporal encoder's embeddings; VideoMAE
                                        pretraining: its decoder, tb_decoder_weights; one malloc,
                                        freed with the model or the gradients) */
} tb_weightset;

/* One named parameter and its values. */
typedef struct {
    char *name;
    int ndim;
    int64_t shape[5], numel;
    const float *data;
} tb_tensor_entry;

struct tubelet_model {
    tb_config cfg;
    const struct tb_family_ops *fam; /* the family's table (family.h), set by tb_model_build */
    const struct tb_model_ops *run;  /* who runs it: the family's own runner, or the shared
                                        encoder for a family with ViT hooks (tb_model_build) */
    tb_backend be; /* the operations it runs on (kernels/backend.h): the backend
                      tubelet_load_params.device selected at load (tb_backend_find), opened for
                      this model */
    tb_weights *weights;     /* NULL for random models */
    void **owned;            /* buffers the model allocated (random weights, tables) */
    int n_owned, cap_owned;
    uint64_t rng;
    tb_log log;
    int n_threads;
    int64_t max_memory;      /* tubelet_load_params.max_memory */
    int64_t n_params;
    char source[512];        /* directory or arch name, for messages */
    int ckpt_file;           /* loaded from an official checkpoint file (tubelet_model_export) */
    char *ckpt_path;         /* that file, whose own training config export reads */

    tb_weightset w;          /* parameters */
    /* How the shared pooling (outputs.c) reads the last hidden state, set by the family's build:
     * the final LayerNorm over every token; fc_norm over the tokens' mean (VideoMAE's); the
     * mean of the (final-normed) tokens (ViViT 3, 4); none: token 0 */
    int has_final_ln, has_fc_norm;
    int mean_pool;
    tb_tensor_entry *tensors; /* every parameter by name, in build order */
    int n_tensors, cap_tensors;
    float *const *grad_of;   /* set only on the copy tubelet_grads_new builds from: tb_param hands
                                out grad_of[i], parameter i's gradient, instead of its values */
    int reinit_head;         /* the classifier is re-made for other classes */
    int ckpt_labels;         /*   the checkpoint's number of classes */
    int describe;            /* tubelet_model_describe: shapes only, every parameter's data NULL */
    int from_pretraining;    /* a pretraining checkpoint (cfg.pretraining: VideoMAEForPreTraining)
                                loaded as a classifier: its family's pretraining_only tensors
                                are ignored, its new_after_pretraining ones and the classifier
                                are new */
    /* reduced precision (precision.c): every linear weight converted once at load */
    int precision;           /* TB_PREC_* */
    int packed;              /* 1: linear weights converted (inference only; precision.c) */
    int lowp_native;         /* 1: oneDNN's AVX512-BF16 / VNNI kernels; 0: the reference path */
    int attn_bf16;           /* 1: attention with bf16 operands (tb_attention_forward_bf16) */
    int mixed; /* 1: mixed-precision training (be.k = the backend's mixed): f32
                                weights, bf16 products; pack holds only the engine */
    tb_linear_pack *pack;    /* the converted weights (kernels/linear.h) */
};

/* Gradients of every parameter of one model, owned by the caller (tubelet_grads_new; the model
 * stays read-only): laid out as the model's tb_weightset by running its builder a second time,
 * so that a backward pass finds each gradient where the forward finds the weight. */
struct tubelet_grads {
    const tubelet_model *m;
    tb_weightset g;          /* pointers into arena */
    float **of;              /* parameter i's gradient (m->n_tensors) */
    float *arena;
    size_t floats;
    int probe_only;          /* tubelet_grads_new_probe: of[i] NULL for the encoder's tensors */
    /* A device backend's (be.k->open) gradients, laid out as arena: the kernels add into them
     * and the optimiser reads them there (tb_grads_kernel_at); tubelet_grads_at copies them
     * into arena for the caller on its first call after a backward (host_stale). NULL on the
     * CPU, where the kernels add into arena itself. */
    float *dev;
    int host_stale;
    int zero_status;         /* the device's failure zeroing dev (tubelet_grads_zero), for the
                                next pass to report (tb_grads_status) */
    tb_backend be; /* dev's backend (the model may be freed first) */
    void **owned;            /* what that build allocated (the decoder's block table) */
    int n_owned;
};

/* After a backward added into g: a device backend's gradients are copied into the host arena
 * when the caller next reads them (tubelet_grads_at), not before, so that an optimiser on the
 * device never moves them; nothing on the CPU. */
void tb_grads_written(tubelet_grads *g);
/* The device's failure zeroing the gradients since the last call (then forgotten), said in e;
 * or 0. A pass that adds into g checks it first. */
int tb_grads_status(tubelet_grads *g, tb_err *e);
/* Gradient i where the kernels add into it, as the backend's entries take it (device memory on a
 * device backend, the host arena on the CPU), without a copy; NULL as tubelet_grads_at. */
float *tb_grads_kernel_at(const tubelet_grads *g, int i);

/* 1 if `name` starts with one of the NULL-ended `starts` (NULL: none). */
int tb_name_starts(const char *name, const char *const *starts);

/* 1 if tensor `name` is part of the classifier (its family's head_prefix): re-made when the data
 * has other classes. */
int tb_is_head_param(const tubelet_model *m, const char *name);

/* With a reduced precision, or in fp32 for inference (packed): converts every linear layer's
 * weight once into the matmul primitive's layout in m->precision and drops the f32 copies
 * (precision.c); such a model can no longer train or be saved. Plain fp32 does nothing. */
int tb_model_set_precision(tubelet_model *m, int precision, int reference, int inference,
                           tb_err *e);
void tb_model_free_precision(tubelet_model *m);
/* train_precision bf16: mixed-precision training — the kernel table whose products take bf16
 * operands (kernels/backend.h), the f32 weights kept; fp32 does nothing. reference: the portable
 * rounding path even on AVX512-BF16 CPUs. */
int tb_model_set_mixed_precision(tubelet_model *m, int precision, int reference, tb_err *e);
size_t tb_model_linear_bytes(const tubelet_model *m);

/* ---- params.c: parameters by name, and the buffers the model owns ---- */

/* The shared rule of a parameter's depth for layer-wise learning-rate decay
 * (tubelet_model_tensor_group), over Hugging Face's names: block i (".layer.i.", ".layers.i.") is
 * i + 1, the embeddings 0, the rest (final norms, classifier) depth + 1. */
int tb_param_layer(const char *name, int depth);

/* Returns parameter `name` with the given shape: from the weights, or freshly initialised. */
/* TUBELET_ERR_UNSUPPORTED for a model described only (tubelet_model_describe): it has no
 * weights to `what` ("run", "train", "save"...). */
static inline int tb_model_check_weights(const tubelet_model *m, const char *what, tb_err *e) {
    if (!m->describe) return TUBELET_OK;
    return tb_fail(e, TUBELET_ERR_UNSUPPORTED, "%s: described only (tubelet_model_describe, "
                   "tubelet info --arch): it has no weights to %s", m->source, what);
}
int tb_param(tubelet_model *m, const char *name, int ndim, const int64_t *shape, int init,
             const float **out, tb_err *e);
/* The same, freshly drawn from uniform(-bound, bound): PyTorch's default initialisation of a
 * Linear or Conv layer (kaiming_uniform_(a = sqrt 5) for the weight, the bias alike: bound
 * 1 / sqrt(fan_in) for both), where the reference keeps it. */
int tb_param_uniform(tubelet_model *m, const char *name, int ndim, const int64_t *shape,
                     double bound, const float **out, tb_err *e);
/* A normal weight at a share of initializer_range (V-JEPA 2's pooler: std / sqrt(depth)). */
int tb_param_scaled(tubelet_model *m, const char *name, int ndim, const int64_t *shape,
                    double scale, const float **out, tb_err *e);
/* A buffer owned (and freed) by the model. */
float *tb_model_alloc(tubelet_model *m, size_t floats, tb_err *e);
/* A table of the model's the kernels read (a position table, a fused bias), once filled: handed
 * to the backend as the tensors are (upload: a GPU's copy, made once; nothing on the CPU). */
int tb_model_share(tubelet_model *m, const float *t, size_t floats, tb_err *e);

/* Shared builders for the encoder's parts. prefix ends with '.'. */
int tb_build_linear(tubelet_model *m, tb_lin *l, const char *prefix, int out, int in, int bias,
                    tb_err *e);
int tb_build_layernorm(tubelet_model *m, tb_ln *l, const char *prefix, int n, float eps,
                       tb_err *e);

/* An image model opened for initialisation (image_init.h; the family's image_open and
 * image_copy, family.h). */
typedef struct tb_vit tb_vit;
void tb_vit_free(tb_vit *v);

#endif
