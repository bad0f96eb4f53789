/* AdamW with decoupled weight decay, as the references fine-tune: no decay on norms, biases,
 * positions and cls tokens; layer-wise learning-rate decay (VideoMAE); warm-up then cosine
 * schedule; clipping of the global gradient norm. */
#ifndef TB_OPTIM_H
#define TB_OPTIM_H

#include <stdint.h>

#include "../common.h"

typedef struct {
    double lr, min_lr;          /* peak and final learning rate */
    double beta1, beta2, eps;
    double weight_decay;
    double layer_decay;         /* 1 = off; VideoMAE fine-tuning uses 0.75 */
    double clip_norm;           /* 0 = off */
    int64_t warmup_steps, total_steps;
    int freeze_encoder;         /* 1: only the probe's tensors (tubelet_model_tensor_is_probe) */
} tb_adamw_params;

tb_adamw_params tb_adamw_default_params(void);

typedef struct tb_adamw tb_adamw;

/* One optimiser over all the model's parameters (tubelet_model_tensor), its moments in the
 * memory of the model's backend; the layer-wise decay reads the encoder depth from the model. */
int tb_adamw_new(tb_adamw **out, tubelet_model *m, const tb_adamw_params *p, tb_err *e);
void tb_adamw_free(tb_adamw *o);
/* The learning rate of step t (0-based) under warm-up + cosine. */
double tb_adamw_lr(const tb_adamw_params *p, int64_t t);
/* Applies one update to the model's weights from the gradients grads (of the same model),
 * scaled by grad_scale (1/accumulation steps), where both live: on a device backend its copy of
 * the weights, from the gradients in its memory (no copy either way; the host's weights go
 * stale: tb_adamw_weights_to_host). Parameters that are frozen or have no gradient are skipped.
 * *norm (if not NULL): the gradient norm before clipping. A status (a device's failure). */
int tb_adamw_step(tb_adamw *o, const tubelet_grads *grads, double grad_scale, double *norm,
                  tb_err *e);
/* The host's copy of the weights the steps updated brought up to date, before the host reads
 * them (saving a checkpoint); nothing on the CPU. */
int tb_adamw_weights_to_host(tb_adamw *o, tb_err *e);
int64_t tb_adamw_steps(const tb_adamw *o);
/* Optimiser state for checkpoints: first and second moments of every parameter, and the step
 * (a device backend's moments copied through the host). */
int tb_adamw_save(tb_adamw *o, const char *path, tb_err *e);
int tb_adamw_load(tb_adamw *o, const char *path, tb_err *e);

#endif
