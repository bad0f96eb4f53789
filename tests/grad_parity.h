/* Gradient parity with PyTorch autograd, shared by test_grads (device cpu) and gpu_grads (device
 * cuda): for a fixture of tests/fixtures/grad_list.txt, tools/make_grad_fixtures.py stored the
 * mean cross-entropy of the logits against labels.npy and the gradient of every parameter
 * (grads.safetensors, float64 computed). We require per tensor
 *   max |g - g_ref| / max |g_ref| <= 1e-3
 * and the loss to 1e-5 relative. A tensor whose true gradient is zero (the key bias: adding a
 * constant to every score of a row leaves the softmax unchanged) holds only rounding noise on both
 * sides, so the denominator is floored at 1e-4 of the largest gradient of the model. */
#ifndef TB_GRAD_PARITY_H
#define TB_GRAD_PARITY_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/npy.h"
#include "io/safetensors.h"
#include "parity.h"
#include "tubelet.h"

/* One fixture on device (as tubelet_load_params.device names it), with gradient checkpointing
 * when ckpt_blocks; one line printed, failures counted by check.h. */
static inline void grad_parity(const char *name, int ckpt_blocks, const char *device) {
    char dir[1024], path[1200], err[1024];
    snprintf(dir, sizeof dir, "%s/%s", parity_fixtures_dir(), name);
    npy_array x = {0}, y = {0}, l = {0};
    tb_err e = {{0}};
    st_file *ref = NULL;
    tubelet_model *m = NULL;
    tubelet_grads *gr = NULL;
    tubelet_state *s = NULL;
    snprintf(path, sizeof path, "%s/input.npy", dir);
    int ok = !npy_read(path, &x, &e);
    snprintf(path, sizeof path, "%s/labels.npy", dir);
    ok = ok && !npy_read(path, &y, &e) && y.dtype == NPY_I64;
    snprintf(path, sizeof path, "%s/loss.npy", dir);
    ok = ok && !npy_read(path, &l, &e);
    snprintf(path, sizeof path, "%s/grads.safetensors", dir);
    ok = ok && !st_open(&ref, path, 1, &e);
    CHECK(ok, "%s: fixture unreadable: %s", name, e.msg);
    if (!ok) goto done;
    tubelet_load_params lp = tubelet_load_default_params();
    lp.n_threads = 2;
    lp.device = device;
    int rc = tubelet_model_load(&m, dir, &lp, err, sizeof err);
    if (!rc) rc = tubelet_grads_new(&gr, m, err, sizeof err);
    if (!rc) rc = tubelet_state_new(&s, m, (int)x.shape[0], (int)x.shape[1], (int)x.shape[3],
                                    (int)x.shape[4], err, sizeof err);
    if (!rc) rc = tubelet_state_enable_training(s, ckpt_blocks, gr, err, sizeof err);
    float loss = 0;
    if (!rc) rc = tubelet_forward_backward(s, x.data, y.data, &loss, NULL, err, sizeof err);
    CHECK(rc == 0, "%s: %s", name, err);
    if (rc) goto done;
    double lref = ((float *)l.data)[0];
    CHECK(fabs(loss - lref) <= 1e-5 * fmax(1, fabs(lref)), "%s: loss %.7f, reference %.7f", name,
          loss, lref);
    double worst = 0, worst_live = 0, global = 0; /* live: without the key biases (zero) */
    const char *worst_name = "";
    int n = tubelet_model_n_tensors(m);
    for (int i = 0; i < st_count(ref); i++) {
        const st_tensor *t = st_at(ref, i);
        if (t->dtype != ST_F32) continue;
        for (size_t j = 0; j < t->nbytes / 4; j++) {
            float v;
            memcpy(&v, (const char *)t->data + 4 * j, 4);
            if (fabsf(v) > global) global = fabsf(v);
        }
    }
    CHECK(n == st_count(ref), "%s: %d parameters, the reference has %d gradients", name, n,
          st_count(ref));
    for (int i = 0; i < n; i++) {
        tubelet_shape sh;
        const char *pname = tubelet_model_tensor(m, i, &sh, NULL);
        const float *g = tubelet_grads_at(gr, i);
        const st_tensor *t = st_find(ref, pname);
        CHECK(t && t->dtype == ST_F32 && t->nbytes == sizeof(float) * (size_t)tubelet_shape_numel(&sh),
              "%s: no float32 reference gradient of the right size for %s", name, pname);
        if (!t || t->nbytes != sizeof(float) * (size_t)tubelet_shape_numel(&sh)) continue;
        const int64_t k = tubelet_shape_numel(&sh);
        float *r = malloc(t->nbytes);
        memcpy(r, t->data, t->nbytes); /* the mapping may be unaligned */
        double err_abs = check_max_abs_diff(g, r, (long)k), scale = check_max_abs(r, (long)k);
        double rel = err_abs / fmax(scale, 1e-4 * global);
        CHECK(rel <= 1e-3, "%s: gradient of %s: relative error %.3g (max |ref| %.3g)", name, pname,
              rel, scale);
        if (rel > worst) worst = rel, worst_name = pname;
        if (!strstr(pname, "key.bias") && !strstr(pname, "k_proj.bias"))
            worst_live = fmax(worst_live, rel);
        free(r);
    }
    printf("  %-24s %s %s loss %.6f (ref %.6f), %d gradients, worst relative error %.2e (%s); "
           "without the key biases %.2e\n", name, device, ckpt_blocks ? "checkpointed" : "            ",
           loss, lref, n, worst, worst_name, worst_live);
done:
    tubelet_state_free(s);
    tubelet_grads_free(gr);
    tubelet_model_free(m);
    st_close(ref);
    npy_free(&x), npy_free(&y), npy_free(&l);
}

#endif
