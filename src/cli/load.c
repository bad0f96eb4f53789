/* Loading a model for a command (cli.h): --model DIR or --arch NAME, --precision, the checks a
 * video command makes (app_load in src/app/model.c loads). */
#include <stdio.h>
#include <string.h>

#include "app.h"
#include "cli.h"
#include "tubelet_text.h"
#include "tubelet_train.h"

int cli_precision(const char *s, int *precision, int *reference) {
    *precision = TUBELET_PRECISION_FP32, *reference = 0;
    if (!s) return 1;
    char name[16];
    snprintf(name, sizeof name, "%s", s);
    size_t n = strlen(name);
    if (n > 4 && !strcmp(name + n - 4, "-ref")) name[n - 4] = 0, *reference = 1;
    *precision = tubelet_precision_parse(name);
    if (*precision < 0 || (*reference && *precision == TUBELET_PRECISION_FP32)) {
        fprintf(stderr, "error: --precision must be fp32, bf16, int8, bf16-ref or int8-ref, got "
                        "'%s'\n", s);
        return 0;
    }
    return 1;
}

int cli_train_precision(const char *cmd, const char *s, int *precision) {
    *precision = TUBELET_PRECISION_FP32;
    if (!s || !strcmp(s, "fp32")) return 1;
    if (!strcmp(s, "bf16")) {
        *precision = TUBELET_PRECISION_BF16;
        return 1;
    }
    fprintf(stderr, "error: tubelet %s trains in fp32 or bf16 (mixed precision), not '%s' (int8 "
                    "and the -ref paths are for inference: run, classify, features, timeline, "
                    "bench)\n", cmd, s);
    return 0;
}

const char *cli_device;

/* The model in dir, or random weights at arch's shapes, loaded with lp on --device; prints the
 * error. */
static tubelet_model *load_with(const char *dir, const char *arch, tubelet_load_params *lp) {
    lp->device = cli_device;
    return app_load(dir, arch, lp);
}

int cli_takes_video(const tubelet_model *m, const char *dir) {
    tubelet_model_info in;
    tubelet_model_get_info(m, &in);
    if (in.num_channels == 3) return 0;
    fprintf(stderr, "error: %s: config.json's num_channels is %d, but videos decode to 3 (RGB) "
            "channels; give this model pixel_values instead (tubelet run --input)\n", dir,
            in.num_channels);
    return 1;
}

int cli_own_labels(const tubelet_model *m, const char *dir, const char *cmd) {
    if (tubelet_text_dims(m, NULL, NULL)) return 0;
    fprintf(stderr, "error: %s is a video-text model (X-CLIP): its labels are texts, which "
            "`tubelet %s` does not take yet; use tubelet classify --labels or tubelet run "
            "--text (docs/zero-shot.md)\n", dir, cmd);
    return 1;
}

tubelet_model *cli_load_train(const char *dir, const char *arch, int threads, int precision,
                              int reference) {
    tubelet_load_params lp = tubelet_load_default_params();
    lp.n_threads = threads;
    lp.train_precision = precision, lp.precision_reference = reference;
    return load_with(dir, arch, &lp);
}

tubelet_model *cli_load(const char *dir, const char *arch, int threads) {
    return cli_load_precision(dir, arch, threads, TUBELET_PRECISION_FP32, 0, 0);
}

tubelet_model *cli_load_precision(const char *dir, const char *arch, int threads, int precision,
                                  int reference, int inference) {
    tubelet_load_params lp = tubelet_load_default_params();
    lp.n_threads = threads;
    lp.precision = precision, lp.precision_reference = reference;
    lp.inference = inference;
    return load_with(dir, arch, &lp);
}
