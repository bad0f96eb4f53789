/* Mixed-precision training (train_precision bf16): the bf16 product against a slow reference
 * (operands rounded to bf16, products summed in double), then every gradient of a training step
 * of each kind of model against the fp32 step's: within bf16's rounding, and not equal to it
 * (the step must really have rounded). The portable path is tested everywhere; the oneDNN path
 * too where the CPU has AVX512-BF16. */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "io/npy.h"
#include "kernels/linear.h"
#include "kernels/lowp.h"
#include "parity.h"
#include "tubelet.h"
#include "tubelet_pretrain.h"

static void fill(float *x, int64_t n, uint64_t seed) {
    for (int64_t i = 0; i < n; i++) x[i] = (float)(tb_splitmix64(&seed) % 20001) / 10000.0f - 1.0f;
}

static double bf(float x) { return tb_f32_from_bf16(tb_bf16_from_f32(x)); }

/* ---- the product ---- */

/* C = op(A) op(B) [+ C] with both operands rounded to bf16, in double. */
static void gemm_bf16_ref(int ta, int tb, int64_t M, int64_t N, int64_t K, const float *A,
                          int64_t lda, const float *B, int64_t ldb, int acc, float *C,
                          int64_t ldc) {
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
            double s = acc ? C[i * ldc + j] : 0;
            for (int64_t k = 0; k < K; k++)
                s += bf(ta ? A[k * lda + i] : A[i * lda + k]) *
                     bf(tb ? B[j * ldb + k] : B[k * ldb + j]);
            C[i * ldc + j] = (float)s;
        }
}

static void check_gemm(int native) {
    dnnl_engine_t eng;
    if (dnnl_engine_create(&eng, dnnl_cpu, 0)) {
        CHECK(0, "no oneDNN CPU engine");
        return;
    }
    tb_lowp_ctx *c = NULL;
    tb_err e = {{0}};
    CHECK(!tb_lowp_ctx_new(&c, eng, native, 0, 1, 0, &e), "context: %s", e.msg);
    /* odd sizes, padded strides, all four transpositions, with and without accumulation; a
     * second round reuses the primitives and the grown operand buffer */
    const int64_t shapes[][3] = {{37, 19, 53}, {5, 64, 7}, {1, 3, 300}, {64, 48, 32}, {37, 19, 53}};
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes && c; s++)
        for (int t = 0; t < 8; t++) {
            const int ta = t & 1, tb = (t >> 1) & 1, acc = (t >> 2) & 1;
            const int64_t M = shapes[s][0], N = shapes[s][1], K = shapes[s][2];
            const int64_t lda = (ta ? M : K) + 3, ldb = (tb ? K : N) + 1, ldc = N + 5;
            float *A = malloc(sizeof(float) * (size_t)((ta ? K : M) * lda));
            float *B = malloc(sizeof(float) * (size_t)((tb ? N : K) * ldb));
            float *C = malloc(sizeof(float) * (size_t)(M * ldc)),
                  *R = malloc(sizeof(float) * (size_t)(M * ldc));
            fill(A, (ta ? K : M) * lda, 10 + t), fill(B, (tb ? N : K) * ldb, 20 + t);
            fill(C, M * ldc, 30 + t), memcpy(R, C, sizeof(float) * (size_t)(M * ldc));
            tb_gemm_bf16(c, ta, tb, M, N, K, A, lda, B, ldb, acc, C, ldc);
            gemm_bf16_ref(ta, tb, M, N, K, A, lda, B, ldb, acc, R, ldc);
            double err = 0, pad = 0;
            for (int64_t i = 0; i < M; i++) {
                for (int64_t j = 0; j < N; j++) {
                    const double d = fabs((double)C[i * ldc + j] - R[i * ldc + j]);
                    err = d > err || d != d ? d : err;
                }
                for (int64_t j = N; j < ldc; j++) pad += C[i * ldc + j] != R[i * ldc + j];
            }
            /* the same rounded values: only the order of the f32 sums differs (|terms| <= 1) */
            CHECK(err <= 4e-6 * (double)K && pad == 0,
                  "bf16 product (%s) %lldx%lldx%lld ta %d tb %d acc %d: max error %g, %g padding "
                  "values written", native ? "oneDNN" : "portable", (long long)M, (long long)N,
                  (long long)K, ta, tb, acc, err, pad);
            free(A), free(B), free(C), free(R);
        }
    CHECK(!tb_lowp_ctx_status(c), "a bf16 product reported a failure");
    /* rounding really happens: 1 + 2^-10 is 1 in bf16 */
    const float a = 1.0f + 1.0f / 1024, one = 1.0f;
    float y = 0;
    if (c) tb_gemm_bf16(c, 0, 0, 1, 1, 1, &a, 1, &one, 1, 0, &y, 1);
    CHECK(y == 1.0f, "bf16 product (%s): 1 + 2^-10 was not rounded (%.9g)",
          native ? "oneDNN" : "portable", y);
    tb_lowp_ctx_free(c);
    dnnl_engine_destroy(eng);
}

/* ---- a training step in fp32 and in mixed precision ---- */

typedef struct {
    float loss;
    float **g; /* every gradient */
    int64_t *n;
    int n_tensors;
} step_out;

static void step_free(step_out *o) {
    for (int i = 0; i < o->n_tensors; i++) free(o->g[i]);
    free(o->g), free(o->n);
    memset(o, 0, sizeof *o);
}

static void keep_grads(step_out *o, const tubelet_model *m, const tubelet_grads *g) {
    o->n_tensors = tubelet_model_n_tensors(m);
    o->g = calloc((size_t)o->n_tensors, sizeof *o->g);
    o->n = calloc((size_t)o->n_tensors, sizeof *o->n);
    for (int i = 0; i < o->n_tensors; i++) {
        tubelet_shape sh;
        tubelet_model_tensor(m, i, &sh, NULL);
        o->n[i] = tubelet_shape_numel(&sh);
        o->g[i] = malloc(sizeof(float) * (size_t)o->n[i]);
        memcpy(o->g[i], tubelet_grads_at(g, i), sizeof(float) * (size_t)o->n[i]);
    }
}

/* mode 0: fp32; 1: mixed, portable path; 2: mixed, oneDNN's bf16 products. */
static tubelet_model *open_model(const char *fixture, int mode) {
    char dir[1024], err[512];
    snprintf(dir, sizeof dir, "%s/%s", parity_fixtures_dir(), fixture);
    tubelet_load_params lp = tubelet_load_default_params();
    lp.n_threads = 2, lp.no_mmap = 1;
    lp.train_precision = mode ? TUBELET_PRECISION_BF16 : TUBELET_PRECISION_FP32;
    lp.precision_reference = mode == 1;
    tubelet_model *m = NULL;
    CHECK(!tubelet_model_load(&m, dir, &lp, err, sizeof err), "%s: %s", fixture, err);
    return m;
}

static int classifier_step(const char *fixture, int mode, int checkpoint, step_out *o) {
    npy_array x = {0}, y = {0};
    char err[512] = "";
    int rc = -1;
    tubelet_model *m = NULL;
    tubelet_state *s = NULL;
    tubelet_grads *g = NULL;
    if (!parity_fixture_npy(fixture, "input.npy", &x) ||
        !parity_fixture_npy(fixture, "labels.npy", &y))
        goto done;
    if (!(m = open_model(fixture, mode))) goto done;
    rc = tubelet_state_new(&s, m, (int)x.shape[0], (int)x.shape[1], (int)x.shape[3],
                           (int)x.shape[4], err, sizeof err);
    if (!rc) rc = tubelet_grads_new(&g, m, err, sizeof err);
    if (!rc) rc = tubelet_state_enable_training(s, checkpoint, g, err, sizeof err);
    if (!rc) rc = tubelet_forward_backward(s, x.data, y.data, &o->loss, NULL, err, sizeof err);
    if (!rc) keep_grads(o, m, g);
    CHECK(!rc, "%s (mode %d): %s", fixture, mode, err);
done:
    tubelet_grads_free(g);
    tubelet_state_free(s);
    tubelet_model_free(m);
    npy_free(&x), npy_free(&y);
    return rc;
}

static int pretrain_step(const char *fixture, int mode, int checkpoint, step_out *o) {
    npy_array x = {0}, mask = {0};
    char err[512] = "";
    int rc = -1;
    tubelet_model *m = NULL;
    tubelet_grads *g = NULL;
    tubelet_pretrain *p = NULL;
    uint8_t *mk = NULL;
    if (!parity_fixture_npy(fixture, "input.npy", &x) ||
        !parity_fixture_npy(fixture, "mask.npy", &mask))
        goto done;
    const int B = (int)x.shape[0];
    mk = malloc(mask.numel);
    int n_masked = 0;
    for (size_t i = 0; i < mask.numel; i++) {
        mk[i] = ((const uint8_t *)mask.data)[i] != 0;
        if (i < mask.numel / (size_t)B) n_masked += mk[i];
    }
    if (!(m = open_model(fixture, mode))) goto done;
    rc = tubelet_grads_new(&g, m, err, sizeof err);
    if (!rc) rc = tubelet_pretrain_new(&p, m, B, (int)x.shape[1], (int)x.shape[2], (int)x.shape[3],
                                       (int)x.shape[4], n_masked, g, checkpoint, err, sizeof err);
    if (!rc) rc = tubelet_pretrain_step(p, x.data, mk, 1, &o->loss, NULL, err, sizeof err);
    if (!rc) keep_grads(o, m, g);
    CHECK(!rc, "%s (mode %d): %s", fixture, mode, err);
done:
    free(mk);
    tubelet_pretrain_free(p);
    tubelet_grads_free(g);
    tubelet_model_free(m);
    npy_free(&x), npy_free(&mask);
    return rc;
}

/* ||a - b|| / ||b|| of one gradient (||a - b|| where b is 0; b NULL: ||a||). */
static double rel_err(const float *a, const float *b, int64_t n) {
    double d = 0, r = 0;
    for (int64_t i = 0; i < n; i++) {
        const double e = (double)a[i] - (b ? b[i] : 0);
        d += e * e, r += b ? (double)b[i] * b[i] : 0;
    }
    return r > 0 ? sqrt(d / r) : sqrt(d);
}

/* bf16 keeps 8 significant bits: each product's operands carry a relative error of up to 2^-9,
 * which a step compounds over its layers, forward and backward, and which the sums of a gradient
 * (over tokens, windows, positions) can cancel down to less signal. Measured on these models'
 * steps: 0.2-3 % of the whole gradient's norm, up to 5.4 % for one tensor (Video Swin's smallest
 * stage; ViViT Model 4's LayerNorm); with the rounding switched off the same code paths give
 * 1e-7. A wrong product (a missed transposition, a lost accumulation) is near 100 %. */
#define GRAD_TOL 8e-2 /* any one tensor */
#define ALL_TOL 4e-2  /* all gradients together */
#define LOSS_TOL 1e-2
#define ROUNDED 1e-4 /* the whole step's relative change must show bf16 rounding */

/* rounded: mx must differ from f32 by bf16's rounding (mixed against fp32), else it may equal it
 * (two mixed paths: the same rounded products, f32 sums in another order) */
static void compare(const char *what, const step_out *f32, const step_out *mx, const char *path,
                    double tol, int rounded) {
    if (f32->n_tensors != mx->n_tensors || !f32->n_tensors) {
        CHECK(0, "%s (%s): %d vs %d gradients", what, path, f32->n_tensors, mx->n_tensors);
        return;
    }
    /* a tensor is measured against its own norm, or against a hundredth of the typical
     * tensor's where its gradient is that small (a key bias's is zero but for rounding: softmax
     * ignores a shift) */
    double d = 0, r = 0, worst = 0;
    for (int i = 0; i < f32->n_tensors; i++) r += pow(rel_err(f32->g[i], NULL, f32->n[i]), 2);
    const double floor_norm = 0.01 * sqrt(r / f32->n_tensors);
    int at = 0;
    r = 0;
    for (int i = 0; i < f32->n_tensors; i++) {
        const double nb = rel_err(f32->g[i], NULL, f32->n[i]);
        const double diff = rel_err(mx->g[i], f32->g[i], f32->n[i]) * (nb > 0 ? nb : 1);
        const double e = diff / (nb > floor_norm ? nb : floor_norm);
        d += diff * diff, r += nb * nb;
        if (!(e <= worst)) worst = e, at = i;
    }
    const double all = sqrt(d / r), dl = fabs((double)mx->loss - f32->loss) / fabs(f32->loss);
    CHECK(worst <= tol, "%s (%s): gradient %d differs from fp32's by %.3g of its norm (> %g)",
          what, path, at, worst, tol);
    CHECK(all <= ALL_TOL, "%s (%s): the gradients differ from fp32's by %.3g of their norm",
          what, path, all);
    CHECK(dl <= LOSS_TOL, "%s (%s): loss %.6g vs fp32 %.6g", what, path, mx->loss, f32->loss);
    CHECK(!rounded || all >= ROUNDED, "%s (%s): gradients within %.3g of fp32's: the products "
          "were not rounded to bf16", what, path, all);
    printf("%-22s %-9s loss %.6f vs %.6f; gradients: %.2e of the norm overall, worst tensor "
           "%.2e (%d)\n", what, path, mx->loss, f32->loss, all, worst, at);
}

typedef int (*step_fn)(const char *, int, int, step_out *);

static void check_model(const char *fixture, step_fn step, int native) {
    step_out f32 = {0}, ref = {0}, nat = {0};
    if (step(fixture, 0, 0, &f32) || step(fixture, 1, 0, &ref)) goto done;
    compare(fixture, &f32, &ref, "portable", GRAD_TOL, 1);
    if (native && !step(fixture, 2, 0, &nat)) {
        compare(fixture, &f32, &nat, "oneDNN", GRAD_TOL, 1);
        /* the same roundings of the products (the attention kernel's bf16 operands aside) */
        compare(fixture, &ref, &nat, "vs port.", GRAD_TOL, 0);
    }
done:
    step_free(&f32), step_free(&ref), step_free(&nat);
}

/* Gradient checkpointing recomputes each block in the backward: the same rounded products, so
 * the same gradients as without it. */
static void check_checkpointed(const char *fixture) {
    step_out a = {0}, b = {0};
    if (!classifier_step(fixture, 1, 0, &a) && !classifier_step(fixture, 1, 1, &b)) {
        int same = a.n_tensors == b.n_tensors;
        for (int i = 0; same && i < a.n_tensors; i++)
            same = !memcmp(a.g[i], b.g[i], sizeof(float) * (size_t)a.n[i]);
        CHECK(same && a.loss == b.loss, "%s: mixed precision with gradient checkpointing "
              "differs from without", fixture);
    }
    step_free(&a), step_free(&b);
}

static void check_refusals(void) {
    char dir[1024], err[512] = "";
    snprintf(dir, sizeof dir, "%s/timesformer_divided", parity_fixtures_dir());
    tubelet_load_params lp = tubelet_load_default_params();
    tubelet_model *m = NULL;
    lp.train_precision = TUBELET_PRECISION_INT8;
    CHECK(tubelet_model_load(&m, dir, &lp, err, sizeof err) == TUBELET_ERR_ARG && !m &&
              strstr(err, "fp32 or in mixed precision"), "train_precision int8: %s", err);
    lp.train_precision = TUBELET_PRECISION_BF16, lp.precision = TUBELET_PRECISION_BF16;
    CHECK(tubelet_model_load(&m, dir, &lp, err, sizeof err) == TUBELET_ERR_ARG && !m &&
              strstr(err, "keeps the fp32 weights"), "mixed precision on packed weights: %s", err);
}

int main(int argc, char **argv) {
    check_cases(argc, argv);
    const int native = tb_lowp_cpu_has(TB_PREC_BF16);
    printf("AVX512-BF16: %s\n",
           native ? "yes (oneDNN path tested too)" : "no (portable path only)");
    CASE(check_gemm(0));
    if (native) CASE(check_gemm(1));
    /* every family and kind of layer: the cls row shared by groups (TimeSformer divided), layer
     * scale (STMixer's VideoMAE), two encoders (ViViT Model 2), split heads (Model 4), windows
     * with a bias and patch merging (Video Swin), the visible tokens and the decoder
     * (pretraining) */
    const char *classifiers[] = {"timesformer_divided", "stmixer_backbone", "vivit_m2_tubelet",
                                 "vivit_m4_frames", "video_swin_shift"};
    for (size_t i = 0; i < sizeof classifiers / sizeof *classifiers; i++)
        if (check_select("check_model(%s, classifier_step, native)", classifiers[i]))
            check_model(classifiers[i], classifier_step, native);
    CASE(check_model("pretrain_normpix", pretrain_step, native));
    CASE(check_checkpointed("timesformer_divided"));
    CASE(check_refusals());
    return check_done();
}
