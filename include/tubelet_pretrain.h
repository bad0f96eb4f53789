/* VideoMAE masked pretraining (docs/pretraining.md): Hugging Face's VideoMAEForPreTraining — the
 * encoder over the visible tokens only, encoder_to_decoder, the mask token with the decoder's
 * fixed sinusoid positions, the decoder's blocks, norm and head, and the MSE of the masked
 * tokens' pixels (normalised per patch with norm_pix_loss). A model is a pretraining model when
 * its config.json's architectures names VideoMAEForPreTraining (or --arch videomae-b-pretrain). */
#ifndef TUBELET_PRETRAIN_H
#define TUBELET_PRETRAIN_H

#include <stdint.h>

#include "tubelet.h"

#ifdef __cplusplus
extern "C" {
#endif

/* 1 if m is a VideoMAEForPreTraining model (it has a decoder, no classifier). */
int tubelet_model_is_pretraining(const tubelet_model *m);
/* Tokens per clip of the model's config (num_patches) and along each axis. */
void tubelet_pretrain_grid(const tubelet_model *m, int *t, int *h, int *w);
/* Pixels of one patch (num_channels * tubelet_size * patch_size^2): the width of the logits. */
int tubelet_pretrain_patch_pixels(const tubelet_model *m);
/* The decoder's sizes: what = 0 layers, 1 hidden size, 2 heads, 3 MLP width, 4 norm_pix_loss. */
int tubelet_pretrain_decoder(const tubelet_model *m, int what);

/* Tube masking as VideoMAE's TubeMaskingGenerator: one spatial mask of int(ratio * h * w)
 * masked positions, the same for every temporal slice, so every clip masks the same number.
 * Clip i of the B clips gets its mask from (seed, step, clip0 + i) only. mask: (B, t h w),
 * 1 = masked. TUBELET_ERR_VALUE if ratio is outside (0, 1), or masks no token or every token. */
int tubelet_tube_mask(uint8_t *mask, int B, int t, int h, int w, double ratio, uint64_t seed,
                      int64_t step, int64_t clip0, char *err, size_t errlen);

/* The activations of one batch shape (B, T, C, H, W) and masked count: an encoder state over
 * the visible tokens, a decoder state over every token. grads: the gradients
 * tubelet_pretrain_step's backward adds into (tubelet_grads_new for m; NULL: forward only);
 * checkpoint: recompute blocks in the backward. The input must have config.json's frames,
 * channels and size, as Hugging Face requires (TUBELET_ERR_SHAPE otherwise). */
typedef struct tubelet_pretrain tubelet_pretrain;
int tubelet_pretrain_new(tubelet_pretrain **out, tubelet_model *m, int B, int T, int C, int H,
                         int W, int n_masked, tubelet_grads *grads, int checkpoint, char *err,
                         size_t errlen);
void tubelet_pretrain_free(tubelet_pretrain *p);
size_t tubelet_pretrain_bytes(const tubelet_pretrain *p);
/* The logits' shape: (B, n_masked, patch pixels). */
void tubelet_pretrain_logits_shape(const tubelet_pretrain *p, tubelet_shape *sh);

/* One batch: pix (B, T, C, H, W) normalised as the model's processor does, mask (B, num_patches)
 * with 1 = masked (each clip the state's n_masked). Writes the loss and, if not NULL, the logits
 * (tubelet_pretrain_logits_shape). backward: also adds every parameter's gradient into
 * the state's tubelet_grads. */
int tubelet_pretrain_step(tubelet_pretrain *p, const float *pix, const uint8_t *mask,
                          int backward, float *loss, float *logits, char *err, size_t errlen);
/* The reconstruction targets of the last step (B, n_masked, patch pixels), and the masked
 * tokens' indices per clip (B, n_masked). */
const float *tubelet_pretrain_targets(const tubelet_pretrain *p);
const int32_t *tubelet_pretrain_masked(const tubelet_pretrain *p);

/* FLOPs of one clip's forward at mask ratio `ratio` (returned: encoder over the visible tokens
 * + decoder), with its parts: the encoder over the visible tokens, the same encoder over every
 * token (what masking saves), and the decoder with encoder_to_decoder and the head. */
double tubelet_pretrain_flop(const tubelet_model *m, double ratio, double *enc_visible,
                             double *enc_all, double *decoder);

#ifdef __cplusplus
}
#endif

#endif
