/* libFuzzer harness for the masked-pretraining entry points on a small model fixture
 * (tests/fixtures/pretrain_normpix: VideoMAEForPreTraining, 4 frames of 3 channels of 16x16,
 * 32 tokens): `tubelet run --mask` and `tubelet grad --mask` (cli_pretrain_batch, with its .npy
 * reading and its mask checks) and the library's tubelet_pretrain_new. The input is split at the
 * first SEPARATOR: what comes before is the pixel_values .npy, what follows the mask .npy (no
 * separator: the fixture's mask).
 *
 * Invariants (abort() = a finding; ASan and UBSan find the rest, such as the heap overflow of a
 * 1-channel input, issue 27): the batch either fails (exit status 1) leaving no output file, or
 * writes logits of shape (B, masked tokens, 96 patch pixels), all finite, and then the gradient
 * run succeeds too; tubelet_pretrain_new accepts exactly the (B, T, C, H, W) of the model's
 * config (1 <= B <= 4096) and names the channels when they differ.
 *
 * Stubs: cli_load_train (src/cli/main.c holds the CLI's main()) loads the fixture, as the CLI's
 * does. The CLI's loss line and messages go to /dev/null (the FILEs only: ASan reports on fd 2).
 *
 * Build and run: tests/fuzz.sh (see its table). */
#include "fuzz.h"

#include <math.h>

#include "cli/cli.h"
#include "tubelet_io.h"
#include "tubelet_pretrain.h"

#define SEPARATOR "\n#### mask.npy\n"
#define FIXTURE "tests/fixtures/pretrain_normpix"

static char g_dir[1024];
static char g_x[1100], g_mask[1100], g_logits[1100], g_grads[1100];
static tubelet_model *g_model; /* for tubelet_pretrain_new's checks */
static FILE *g_null;

static void cleanup(void) {
    unlink(g_x), unlink(g_mask), unlink(g_logits), unlink(g_grads);
    rmdir(g_dir);
    tubelet_model_free(g_model);
}

static tubelet_model *load_fixture(int precision) {
    tubelet_load_params lp = tubelet_load_default_params();
    lp.n_threads = 1;
    lp.train_precision = precision;
    lp.log = fuzz_log;
    tubelet_model *m = NULL;
    char err[1024];
    if (tubelet_model_load(&m, FIXTURE, &lp, err, sizeof err)) {
        fprintf(stderr, "fuzz_pretrain: %s (run from the repository root)\n", err);
        abort();
    }
    return m;
}

tubelet_model *cli_load_train(const char *dir, const char *arch, int threads, int precision,
                              int reference) {
    (void)dir, (void)arch, (void)threads, (void)reference;
    return load_fixture(precision);
}

static void setup(void) {
    fuzz_mkdtemp(g_dir, sizeof g_dir, "fuzz_pretrain");
    fuzz_join(g_x, sizeof g_x, g_dir, "x.npy");
    fuzz_join(g_mask, sizeof g_mask, g_dir, "mask.npy");
    fuzz_join(g_logits, sizeof g_logits, g_dir, "logits.npy");
    fuzz_join(g_grads, sizeof g_grads, g_dir, "grads.safetensors");
    if (!(g_null = fopen("/dev/null", "w"))) abort();
    g_model = load_fixture(TUBELET_PRECISION_FP32);
    atexit(cleanup);
}

/* cli_pretrain_batch with the CLI's output and messages silenced. */
static int batch(const char *mask, const char *logits, const char *grads) {
    FILE *out = stdout, *err = stderr;
    stdout = stderr = g_null;
    const int rc = cli_pretrain_batch(FIXTURE, g_x, mask, logits, grads, 1, TUBELET_PRECISION_FP32);
    stdout = out, stderr = err;
    return rc;
}

/* The library takes exactly the config's clip shape, and names the channels when they differ. */
static void check_library(const tubelet_array *x) {
    if (x->ndim != 5) return;
    for (int i = 0; i < 5; i++)
        if (x->shape[i] < 1 || x->shape[i] > 1 << 20) return;
    tubelet_model_info in;
    if (tubelet_model_get_info(g_model, &in)) abort();
    const int B = (int)x->shape[0], T = (int)x->shape[1], C = (int)x->shape[2],
              H = (int)x->shape[3], W = (int)x->shape[4];
    const int fits = T == in.num_frames && C == in.num_channels && H == in.image_height &&
                     W == in.image_width;
    tubelet_pretrain *p = NULL;
    char err[1024] = "";
    const int rc = tubelet_pretrain_new(&p, g_model, B <= 4096 ? B : 1, T, C, H, W, 1, NULL, 0,
                                        err, sizeof err);
    if (fits != (rc == 0) || (rc && p)) abort();
    if (rc && C != in.num_channels && !strstr(err, "channels")) abort();
    tubelet_pretrain_free(p);
}

/* A successful run's logits: (B, masked tokens of clip 0, patch pixels), finite. */
static void check_logits(const tubelet_array *x, const char *mask) {
    tubelet_array l = {0}, mk = {0};
    char err[1024];
    if (tubelet_npy_read(&l, g_logits, err, sizeof err) || tubelet_npy_read(&mk, mask, err, sizeof err))
        abort();
    int64_t masked = 0;
    for (int64_t i = 0; i < mk.shape[1]; i++) masked += ((const uint8_t *)mk.data)[i];
    if (l.dtype != TUBELET_F32 || l.ndim != 3 || l.shape[0] != x->shape[0] ||
        l.shape[1] != masked || l.shape[2] != tubelet_pretrain_patch_pixels(g_model))
        abort();
    for (size_t i = 0; i < l.numel; i++)
        if (!isfinite(((const float *)l.data)[i])) abort();
    tubelet_array_free(&l);
    tubelet_array_free(&mk);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!g_dir[0]) setup();
    const uint8_t *sep = memmem(data, size, SEPARATOR, sizeof SEPARATOR - 1);
    const char *mask = FIXTURE "/mask.npy";
    fuzz_put(g_x, data, sep ? (size_t)(sep - data) : size);
    if (sep) {
        const size_t at = (size_t)(sep - data) + sizeof SEPARATOR - 1;
        fuzz_put(g_mask, data + at, size - at);
        mask = g_mask;
    }
    tubelet_array x = {0};
    char err[1024];
    const int read = tubelet_npy_read(&x, g_x, err, sizeof err) == 0;
    if (read) check_library(&x);

    int rc = batch(mask, g_logits, NULL);
    if (rc != 0 && rc != 1) abort();
    if (rc) {
        if (access(g_logits, F_OK) == 0) abort(); /* a failed run wrote its output */
    } else {
        if (!read) abort(); /* the CLI ran an input the reader refuses */
        check_logits(&x, mask);
        unlink(g_logits);
        if (batch(mask, NULL, g_grads) != 0 || access(g_grads, F_OK) != 0) abort();
        unlink(g_grads);
    }
    tubelet_array_free(&x);
    return 0;
}
