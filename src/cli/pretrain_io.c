/* `tubelet run --mask` and `tubelet grad --mask`: one VideoMAEForPreTraining batch from .npy
 * files — HF's logits (the masked tokens' reconstructed patches), the loss, and every
 * parameter's gradient. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "tubelet_io.h"
#include "tubelet_pretrain.h"

/* The mask (B, num_patches), bool or uint8 0/1 → bytes; the masked count of row 0 in *n_masked.
 * Counts that differ per clip are left to tubelet_pretrain_step, which names the clip. */
static uint8_t *read_mask(const char *path, const tubelet_array *x, int64_t n_patch,
                          int *n_masked) {
    tubelet_array a = {0};
    char err[1024];
    uint8_t *mask = NULL;
    if (tubelet_npy_read(&a, path, err, sizeof err)) {
        fprintf(stderr, "error: %s\n", err);
        return NULL;
    }
    if (a.dtype != TUBELET_BOOL && a.dtype != TUBELET_U8) {
        fprintf(stderr, "error: %s: the mask must be bool or uint8 (1 = masked)\n", path);
        goto done;
    }
    if (a.ndim != 2 || a.shape[0] != x->shape[0] || a.shape[1] != n_patch) {
        fprintf(stderr, "error: %s: the mask must have shape (%lld, %lld): (batch, num_patches)"
                " of the input's batch and the model's token grid\n", path,
                (long long)x->shape[0], (long long)n_patch);
        goto done;
    }
    const uint8_t *v = a.data;
    for (size_t i = 0; i < a.numel; i++)
        if (v[i] > 1) {
            fprintf(stderr, "error: %s: mask entry %zu is %d; entries must be 0 (visible) or 1 "
                    "(masked)\n", path, i, v[i]);
            goto done;
        }
    int k = 0;
    for (int64_t i = 0; i < n_patch; i++) k += v[i];
    if (k == n_patch) {
        fprintf(stderr, "error: %s: clip 0 masks every token: the encoder needs at least one "
                "visible token\n", path);
        goto done;
    }
    if (k == 0) {
        fprintf(stderr, "error: %s: clip 0 masks no token: there is nothing to reconstruct\n", path);
        goto done;
    }
    if (!(mask = malloc(a.numel))) fprintf(stderr, "error: out of memory\n");
    else memcpy(mask, v, a.numel), *n_masked = k;
done:
    tubelet_array_free(&a);
    return mask;
}

int cli_write_grads(const char *out, const tubelet_grads *g) {
    const tubelet_model *m = tubelet_grads_model(g);
    char err[1024];
    const int n = tubelet_model_n_tensors(m);
    tubelet_tensor *ts = calloc((size_t)n, sizeof *ts);
    if (!ts) {
        fprintf(stderr, "error: out of memory\n");
        return 1;
    }
    for (int i = 0; i < n; i++) {
        tubelet_shape sh;
        ts[i].name = tubelet_model_tensor(m, i, &sh, NULL);
        ts[i].ndim = sh.ndim;
        for (int d = 0; d < sh.ndim; d++) ts[i].shape[d] = sh.dim[d];
        ts[i].data = tubelet_grads_at(g, i);
    }
    int rc = tubelet_safetensors_write(out, ts, n, err, sizeof err);
    if (rc) fprintf(stderr, "error: %s\n", err);
    else fprintf(stderr, "%s: %d gradients\n", out, n);
    free(ts);
    return rc ? 1 : 0;
}

int cli_pretrain_batch(const char *dir, const char *input, const char *mask_path,
                       const char *logits_path, const char *grad_path, int threads,
                       int train_precision) {
    int rc = 1, n_masked = 0;
    char err[1024];
    tubelet_array x = {0};
    float *pix = NULL, *logits = NULL;
    uint8_t *mask = NULL;
    tubelet_pretrain *p = NULL;
    tubelet_grads *g = NULL;
    tubelet_model *m = cli_load_train(dir, NULL, threads, train_precision, 0);
    if (!m) return 1;
    if (!tubelet_model_is_pretraining(m)) {
        fprintf(stderr, "error: %s: --mask needs a VideoMAEForPreTraining model (config.json's "
                "architectures); this one is a classifier\n", dir);
        goto done;
    }
    if (tubelet_npy_read(&x, input, err, sizeof err)) {
        fprintf(stderr, "error: %s\n", err);
        goto done;
    }
    if (x.ndim != 5 || (x.dtype != TUBELET_F32 && x.dtype != TUBELET_F64) || x.shape[0] < 1 ||
        x.shape[0] > 4096) {
        fprintf(stderr, "error: %s: pixel_values must be float32 of shape (B, T, C, H, W)\n", input);
        goto done;
    }
    if (x.dtype == TUBELET_F32) pix = x.data;
    else if ((pix = malloc(sizeof(float) * x.numel)))
        for (size_t i = 0; i < x.numel; i++) pix[i] = (float)((double *)x.data)[i];
    int gt, gh, gw;
    tubelet_pretrain_grid(m, &gt, &gh, &gw);
    if (!pix || !(mask = read_mask(mask_path, &x, (int64_t)gt * gh * gw, &n_masked))) goto done;
    if (grad_path && tubelet_grads_new(&g, m, err, sizeof err)) {
        fprintf(stderr, "error: %s\n", err);
        goto done;
    }
    if (tubelet_pretrain_new(&p, m, (int)x.shape[0], (int)x.shape[1], (int)x.shape[2],
                             (int)x.shape[3], (int)x.shape[4], n_masked, g, 0, err, sizeof err)) {
        fprintf(stderr, "error: %s: %s\n", input, err);
        goto done;
    }
    tubelet_shape ls;
    tubelet_pretrain_logits_shape(p, &ls);
    float loss;
    if (!(logits = malloc(sizeof(float) * (size_t)tubelet_shape_numel(&ls)))) goto done;
    if (tubelet_pretrain_step(p, pix, mask, grad_path != NULL, &loss, logits, err, sizeof err)) {
        fprintf(stderr, "error: %s: %s\n", mask_path, err);
        goto done;
    }
    if (logits_path &&
        tubelet_npy_write(logits_path, TUBELET_F32, ls.ndim, ls.dim, logits, err, sizeof err)) {
        fprintf(stderr, "error: %s\n", err);
        goto done;
    }
    if (grad_path && cli_write_grads(grad_path, g)) goto done;
    printf("loss %.7f\n", loss);
    rc = 0;
done:
    if (pix != x.data) free(pix);
    tubelet_array_free(&x);
    free(mask);
    free(logits);
    tubelet_pretrain_free(p);
    tubelet_grads_free(g);
    tubelet_model_free(m);
    return rc;
}
