/* The model handle shared by the three families, and the pieces each family file provides. */
#ifndef TB_MODEL_H
#define TB_MODEL_H

#include "../common.h"
#include "../io/weights.h"
#include "../kernels/attention.h"
#include "config.h"

typedef struct { const float *w, *b; } tb_lin;           /* nn.Linear: w (out, in), b (out) or NULL */
typedef struct { const float *w, *b; float eps; } tb_ln; /* nn.LayerNorm */
typedef struct { tb_lin q, k, v, o; } tb_mha;            /* multi-head self-attention */

typedef struct {
    tb_ln ln1, ln2;          /* layernorm_before, layernorm_after */
    tb_mha attn;             /* the block's last (or only) attention: joint, space, global, height */
    tb_lin fc1, fc2;         /* intermediate.dense, output.dense */
    tb_ln ln_t;              /* TimeSformer's first step (TB_STEP_FIRST): temporal_layernorm */
    tb_mha attn_t;           /*   temporal_attention (local_* for local_global) */
    tb_lin dense_t;          /*   temporal_dense */
    tb_ln ln_w;              /* TimeSformer axial's width step (TB_STEP_WIDTH): width_layernorm */
    tb_mha attn_w;           /*   width_attention */
    tb_lin dense_w;          /*   width_dense */
} tb_block;

/* Attention steps of a block (TimeSformer: docs/timesformer-variants.md). Each is
 *   x += dense(Attention(LN(x)) over groups of tokens)
 * with its own LayerNorm, q/k/v/output projections and, except the last step, a dense layer. */
#define TB_MAX_STEPS 3
typedef enum {
    TB_STEP_MAIN,  /* layernorm_before + attention, no dense: the last (or only) step */
    TB_STEP_FIRST, /* temporal_* (divided and axial: time) or local_* (local_global: local) */
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

/* TimeSformer's steps for attention type a (timesformer.c): their number, 0 for joint_space_time
 * and space_only, whose one attention runs over whole sequences. */
int tb_timesformer_steps(tb_attn_type a, int64_t T, int64_t H, int64_t W,
                         tb_attn_step st[TB_MAX_STEPS]);

/* Where parameters come from: a model directory's tensors, or fresh random values. */
enum { TB_INIT_NORMAL, TB_INIT_ZEROS, TB_INIT_ONES };

/* Every parameter of a model, as the forward pass reads them. The same structure, built a second
 * time with tb_param in gradient mode, holds the gradients (tubelet_model_enable_grads). */
typedef struct {
    const float *patch_w, *patch_b;  /* (D, C t ph pw) and (D) */
    const float *cls, *pos, *time_pos;
    tb_block *blocks;
    tb_ln final_ln, fc_norm;
    tb_lin head;                     /* head.w NULL when num_labels == 0 (HF's Identity) */
} tb_weightset;

/* One named parameter: its values and, once gradients are enabled, its gradient. */
typedef struct {
    char *name;
    int ndim;
    int64_t shape[5], numel;
    const float *data;
    float *grad;
} tb_tensor_entry;

struct tubelet_model {
    tb_config cfg;
    tb_weights *weights;     /* NULL for random models */
    void **owned;            /* buffers the model allocated (random weights, tables) */
    int n_owned, cap_owned;
    uint64_t rng;
    tb_log log;
    int n_threads;
    int64_t n_params;
    char source[512];        /* directory or arch name, for messages */

    tb_weightset w;          /* parameters */
    tb_weightset g;          /* their gradients (pointers into grad_arena), when enabled */
    int has_final_ln, has_fc_norm;
    tb_tensor_entry *tensors; /* every parameter by name, in build order */
    int n_tensors, cap_tensors;
    int grad_mode;           /* tb_param hands out gradient buffers instead of values */
    int reinit_head;         /* the classifier is re-made for other classes */
    int ckpt_labels;         /*   the checkpoint's number of classes */
    float *grad_arena;
    size_t grad_floats;
};

/* Returns parameter `name` with the given shape: from the weights, or freshly initialised. */
int tb_param(tubelet_model *m, const char *name, int ndim, const int64_t *shape, int init,
             const float **out, tb_err *e);
/* A buffer owned (and freed) by the model. */
float *tb_model_alloc(tubelet_model *m, size_t floats, tb_err *e);

/* Family builders: look up every parameter under the Hugging Face names. */
int tb_videomae_build(tubelet_model *m, tb_weightset *ws, tb_err *e);
int tb_timesformer_build(tubelet_model *m, tb_weightset *ws, tb_err *e);
int tb_vivit_build(tubelet_model *m, tb_weightset *ws, tb_err *e);

/* Shared builders for the encoder's parts. prefix ends with '.'. */
int tb_build_linear(tubelet_model *m, tb_lin *l, const char *prefix, int out, int in, int bias,
                    tb_err *e);
int tb_build_layernorm(tubelet_model *m, tb_ln *l, const char *prefix, int n, float eps,
                       tb_err *e);

#endif
