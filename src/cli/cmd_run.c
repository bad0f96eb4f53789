/* tubelet run: pixel_values (.npy) → logits (.npy) [+ last_hidden_state]. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "tubelet_io.h"

static int write_npy(const char *path, const tubelet_shape *sh, const float *data) {
    char err[1024];
    if (tubelet_npy_write(path, TUBELET_F32, sh->ndim, sh->dim, data, err, sizeof err)) {
        fprintf(stderr, "error: %s\n", err);
        return 1;
    }
    return 0;
}

int cmd_run(int argc, char **argv) {
    const char *dir = NULL, *input = NULL, *logits_path = NULL, *hidden_path = NULL;
    const char *mask_path = NULL;
    const char *prec_s = NULL;
    int precision = 0, reference = 0, threads = 0;
    const cli_option opts[] = {
        {"--model", CLI_STR, &dir, 0, 0, "DIR", "model directory"},
        {"--input", CLI_STR, &input, 0, 0, "X.npy", "pixel_values (float32; float64 is converted)"},
        {"--logits", CLI_STR, &logits_path, 0, 0, "L.npy", "where to write the logits"},
        {"--hidden", CLI_STR, &hidden_path, 0, 0, "H.npy", "also write the base model's last_hidden_state"},
        {"--mask", CLI_STR, &mask_path, 0, 0, "M.npy",
         "VideoMAEForPreTraining: bool_masked_pos, bool or uint8 (B, num_patches);\n"
         "writes the masked tokens' reconstructed patches, prints \"loss X\""},
        CLI_THREADS_OPTION(&threads),
        CLI_PRECISION_OPTION(&prec_s),
        {0}};
    const cli_command cmd = {
        "run", "run --model DIR --input X.npy --logits L.npy [--hidden H.npy] [--threads N]",
        "Runs the model in DIR (Hugging Face config.json + model.safetensors) on X, float32\n"
        "pixel_values of shape (batch, frames, channels, height, width), and writes the\n"
        "logits *ForVideoClassification returns (float32, normally (batch, num_labels)).\n",
        opts, NULL, NULL, 0, NULL};
    int pr = cli_parse(&cmd, argc, argv);
    if (pr >= 0) return pr;
    if (!dir || !input || !logits_path) {
        fprintf(stderr, "error: tubelet run needs --model, --input and --logits\n\n");
        cli_print_help(&cmd, stderr);
        return 2;
    }
    if (!cli_precision(prec_s, &precision, &reference)) return 2;
    if (mask_path)
        return cli_pretrain_batch(dir, input, mask_path, logits_path, NULL, threads,
                                  TUBELET_PRECISION_FP32);

    int rc = 1;
    tubelet_model *m = NULL;
    tubelet_state *s = NULL;
    float *logits = NULL, *hidden = NULL, *pix = NULL;
    tubelet_array x = {0};
    char err[1024];
    if (!(m = cli_load_precision(dir, NULL, threads, precision, reference, 0))) goto done;
    if (tubelet_npy_read(&x, input, err, sizeof err)) {
        fprintf(stderr, "error: %s\n", err);
        goto done;
    }
    tubelet_model_info info;
    tubelet_model_get_info(m, &info);
    if (x.ndim != 5 || x.shape[2] != info.num_channels) {
        fprintf(stderr,
                "error: %s: pixel_values must have shape (batch, frames, %d, height, width); "
                "this array has %d dimensions",
                input, info.num_channels, x.ndim);
        for (int i = 0; i < x.ndim; i++) fprintf(stderr, "%s%lld", i ? " x " : " (", (long long)x.shape[i]);
        fprintf(stderr, "%s\n", x.ndim ? ")" : "");
        goto done;
    }
    if (x.dtype == TUBELET_F32) pix = x.data;
    else if (x.dtype == TUBELET_F64) {
        if (!(pix = malloc(sizeof(float) * x.numel))) goto oom;
        for (size_t i = 0; i < x.numel; i++) pix[i] = (float)((double *)x.data)[i];
    } else {
        fprintf(stderr, "error: %s: pixel_values must be float32\n", input);
        goto done;
    }
    if (x.shape[0] > 4096 || x.shape[1] > 65536 || x.shape[3] > 16384 || x.shape[4] > 16384) {
        fprintf(stderr, "error: %s: input shape is out of range\n", input);
        goto done;
    }
    if (tubelet_state_new(&s, m, (int)x.shape[0], (int)x.shape[1], (int)x.shape[3],
                          (int)x.shape[4], err, sizeof err)) {
        fprintf(stderr, "error: %s: %s\n", input, err);
        goto done;
    }
    tubelet_shape ls, hs;
    tubelet_state_logits_shape(s, &ls);
    tubelet_state_hidden_shape(s, &hs);
    logits = malloc(sizeof(float) * (size_t)tubelet_shape_numel(&ls));
    if (hidden_path) hidden = malloc(sizeof(float) * (size_t)tubelet_shape_numel(&hs));
    if (!logits || (hidden_path && !hidden)) goto oom;
    if (tubelet_forward(s, pix, logits, hidden, err, sizeof err)) {
        fprintf(stderr, "error: %s: %s\n", input, err);
        goto done;
    }
    if (write_npy(logits_path, &ls, logits)) goto done;
    if (hidden_path && write_npy(hidden_path, &hs, hidden)) {
        unlink(logits_path); /* all outputs or none */
        goto done;
    }
    rc = 0;
    goto done;
oom:
    fprintf(stderr, "error: out of memory\n");
done:
    if (pix != x.data) free(pix);
    tubelet_array_free(&x);
    free(logits);
    free(hidden);
    tubelet_state_free(s);
    tubelet_model_free(m);
    return rc;
}
