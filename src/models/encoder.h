/* What the files of the shared encoder give each other (family.h has what the families give
 * it). From the bottom up: dropout.c (dropout masks of the current step), precision.c (packing),
 * plan.c (a state's sequences, attention groups, buffers), encoder.c (embedding and blocks,
 * forward and backward), outputs.c (head, pooling, feature maps), vit_train.c (training buffers,
 * drop path, backward), vit_model.c (the shared encoder as a model runner, tb_vit_encoder_model);
 * above the runner, forward.c (the forward entry points, profiling) and train_step.c (loss, the
 * training step), which call it through its table. Each calls only the files below it, the
 * family files' hooks included (tests/check_models.sh). */
#ifndef TB_ENCODER_H
#define TB_ENCODER_H

#include <omp.h>

#include "family.h"

/* Runs stmt, adding its wall time to s->prof_ms[cat] when profiling. */
#define PROF(s, cat, stmt)                                                                       \
    do {                                                                                         \
        double t0_ = (s)->profile ? omp_get_wtime() : 0;                                         \
        stmt;                                                                                    \
        if ((s)->profile) (s)->prof_ms[cat] += 1e3 * (omp_get_wtime() - t0_);                    \
    } while (0)

/* ---- dropout.c ---- */
/* The mask key of a dropout site of the current training step. */
uint64_t tb_state_dropout_key(const tubelet_state *s, int layer, int site);

/* ---- the hooks of tb_vit_encoder_model (vit_model.c) in the files below it ---- */
int tb_vit_each_linear(tubelet_model *m, const tb_linear_visitor *v, void *job); /* precision.c */
size_t tb_vit_linear_bytes(const tubelet_model *m);                               /* precision.c */
int tb_vit_plan(tubelet_state *s, tb_err *e);                                     /* plan.c */
void tb_vit_free_state(tubelet_state *s);                                         /* plan.c */
int tb_vit_level_shape(const tubelet_state *s, int level, int64_t shape[5]);      /* plan.c */
int tb_vit_enable_training(tubelet_state *s, int checkpoint_blocks, tb_err *e);   /* vit_train.c */
void tb_vit_backward(tubelet_state *s);                                           /* vit_train.c */

/* ---- plan.c ---- */
/* Makes stage k (its residual stream and sequence layout) the one the encoder blocks run over. */
void tb_state_enter_stage(tubelet_state *s, int k);
/* The longest group any attention of the model runs over (it sizes the kernels' scratch). */
int64_t tb_state_max_group_len(const tubelet_state *s);
void tb_state_free_training(tubelet_state *s);
/* Training buffers for s, its backward adding into gw, the weightset of the gradients g (the
 * pretraining decoder's state: a view of them whose blocks are the decoder's, pretrain.c). */
int tb_state_enable_training(tubelet_state *s, int checkpoint_blocks, tubelet_grads *g,
                             const tb_weightset *gw, char *err, size_t errlen);
/* A state whose encoder sees n_visible of each clip's tokens (VideoMAE pretraining; one stage,
 * joint attention, no cls token), and the visible tokens of each clip: mask (B, n_patch), 1 =
 * masked; each clip must leave exactly n_visible visible (TUBELET_ERR_VALUE otherwise). */
int tb_state_new_visible(tubelet_state **out, tubelet_model *m, int B, int T, int H, int W,
                         int64_t n_visible, tb_err *e);
int tb_state_set_visible(tubelet_state *s, const uint8_t *mask, tb_err *e);
/* A state of m whose kernels run after `after`'s, in the order issued (on a device backend, its
 * instance forks after's and shares its stream): for a state that reads another's outputs within
 * one pass (pretraining's decoder). `after` must outlive it. */
int tb_state_new_after(tubelet_state **out, tubelet_model *m, int B, int T, int H, int W,
                       const tubelet_state *after, tb_err *e);

/* ---- encoder.c ---- */
/* The weights of one kind of attention step in a block (or in its gradients). */
typedef struct {
    const tb_ln *ln;
    const tb_mha *at;
    const tb_lin *dense; /* NULL: none */
} tb_step_weights;
tb_step_weights tb_step_weights_of(const tb_block *b, tb_step_kind kind);
/* The caller's pixels of a pass checked (TUBELET_ERR_VALUE, message in err, if one is not finite)
 * and handed to the backend: *pix replaced by the state's copy in the backend's memory, made by
 * one to_device (a backend whose memory is the host's, the CPU: *pix as it is). */
int tb_state_pixels(tubelet_state *s, const float **pix, char *err, size_t errlen);
/* Embedding and the first n_layers blocks (all of them with several stages). */
void tb_encode(tubelet_state *s, const float *pix, int n_layers);
void tb_encoder_block(tubelet_state *s, int l);
/* Backward of every block (train->dx: dL/d of the last block's output in, dL/d of the tokens
 * out), then of the embedding. */
void tb_encoder_backward(tubelet_state *s);
void tb_embed_backward(tubelet_state *s);
/* The end of a pass: TUBELET_OK, or the first failure since the last call, with its message: a
 * table entry's (tb_state_kernel_failed), else a product's (the table's ctx_status). Both are read
 * and cleared, so every pass calls it once it has run, whatever else failed (a non-finite
 * loss), and reports its failure first: the other is its consequence. */
int tb_pass_status(tubelet_state *s, char *err, size_t errlen);
/* y = x W^T + b [+ y]: one linear layer in the model's precision. */
void tb_state_linear(tubelet_state *s, float *y, int64_t ldy, const float *x, const tb_lin *l,
                     int64_t M, int64_t N, int64_t K, int accumulate);

/* ---- outputs.c ---- */
/* last_hidden_state (returned), then with logits the pooled vector per sequence and the
 * classifier. */
const float *tb_head(tubelet_state *s, float *logits);
/* Backward of the head: dL/dlogits (train->dlogits) → dL/dx of the last block's output. */
void tb_head_backward(tubelet_state *s);

/* ---- vit_train.c ---- */
/* The drop path (stochastic depth) masks of the current training step
 * (tubelet_state_set_drop_path). */
void tb_draw_drop_path(tubelet_state *s);

#endif
