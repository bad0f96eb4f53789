/* tubelet grad: the loss and the gradient of every parameter for one batch. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "tubelet_io.h"

int cmd_grad(int argc, char **argv) {
    const char *prec_s = NULL;
    int train_precision = TUBELET_PRECISION_FP32;
    const char *dir = NULL, *input = NULL, *labels_path = NULL, *out = NULL;
    const char *mask_path = NULL;
    int threads = 0;
    const cli_option opts[] = {
        {"--model", CLI_STR, &dir, 0, 0, "DIR", "model directory"},
        {"--input", CLI_STR, &input, 0, 0, "X.npy", "pixel_values, float32 (B, T, C, H, W)"},
        {"--labels", CLI_STR, &labels_path, 0, 0, "Y.npy", "int64 class indices, one per logits row"},
        {"--mask", CLI_STR, &mask_path, 0, 0, "M.npy",
         "VideoMAEForPreTraining: bool_masked_pos (B, num_patches), bool or uint8;\n"
         "the loss is the masked reconstruction's (no --labels)"},
        {"-o", CLI_STR, &out, 0, 0, "G.safetensors", "where to write the gradients"},
        CLI_THREADS_OPTION(&threads),
        CLI_TRAIN_PRECISION_OPTION(&prec_s),
        {0}};
    const cli_command cmd = {
        "grad",
        "grad --model DIR --input X.npy --labels Y.npy -o G.safetensors [--threads N]\n"
        "                     [--precision fp32|bf16]",
        "Runs the model in DIR on pixel_values X (float32, (B, T, C, H, W)), computes the mean\n"
        "cross-entropy of the classifier's logits against the int64 labels Y (one per logits\n"
        "row; no label smoothing, dropout and drop path off), prints the loss, and writes the\n"
        "gradient of every parameter under the parameter's own name and shape.\n",
        opts, NULL, NULL, 0, NULL};
    int pr = cli_parse(&cmd, argc, argv);
    if (pr >= 0) return pr;
    if (!cli_train_precision("grad", prec_s, &train_precision)) return 2;
    if (mask_path && dir && input && out)
        return cli_pretrain_batch(dir, input, mask_path, NULL, out, threads, train_precision);
    if (!dir || !input || !labels_path || !out) {
        fprintf(stderr, "error: tubelet grad needs --model, --input, --labels and -o\n\n");
        cli_print_help(&cmd, stderr);
        return 2;
    }
    int rc = 1;
    char err[1024];
    tubelet_array x = {0}, y = {0};
    tubelet_model *m = cli_load_train(dir, NULL, threads, train_precision, 0);
    tubelet_state *s = NULL;
    tubelet_grads *g = NULL;
    if (!m) goto done;
    if (tubelet_npy_read(&x, input, err, sizeof err) ||
        tubelet_npy_read(&y, labels_path, err, sizeof err)) {
        fprintf(stderr, "error: %s\n", err);
        goto done;
    }
    tubelet_model_info info;
    tubelet_model_get_info(m, &info);
    if (x.ndim != 5 || x.dtype != TUBELET_F32 || x.shape[2] != info.num_channels) {
        fprintf(stderr, "error: %s: pixel_values must be float32 of shape (B, T, %d, H, W): "
                "config.json's %d channels\n", input, info.num_channels, info.num_channels);
        goto done;
    }
    if (y.dtype != TUBELET_I64 || y.ndim != 1) {
        fprintf(stderr, "error: %s: labels must be a 1-D int64 array\n", labels_path);
        goto done;
    }
    if (tubelet_grads_new(&g, m, err, sizeof err) ||
        tubelet_state_new(&s, m, (int)x.shape[0], (int)x.shape[1], (int)x.shape[3],
                          (int)x.shape[4], err, sizeof err) ||
        tubelet_state_enable_training(s, 0, g, err, sizeof err)) {
        fprintf(stderr, "error: %s: %s\n", input, err);
        goto done;
    }
    tubelet_shape ls;
    tubelet_state_logits_shape(s, &ls);
    if (y.shape[0] != ls.dim[0]) {
        fprintf(stderr, "error: %s: %lld labels for %lld logits rows\n", labels_path,
                (long long)y.shape[0], (long long)ls.dim[0]);
        goto done;
    }
    float loss;
    const int64_t *yl = y.data;
    for (int64_t i = 0; i < y.shape[0]; i++)
        if (yl[i] < 0 || yl[i] >= ls.dim[1]) { /* checked here to name the file */
            fprintf(stderr, "error: %s: label %lld of row %lld is outside the model's classes "
                    "[0, %lld)\n", labels_path, (long long)yl[i], (long long)i, (long long)ls.dim[1]);
            goto done;
        }
    if (tubelet_forward_backward(s, x.data, y.data, &loss, NULL, err, sizeof err)) {
        fprintf(stderr, "error: %s\n", err);
        goto done;
    }
    printf("loss %.7f\n", loss);
    rc = cli_write_grads(out, g);
done:
    tubelet_array_free(&x), tubelet_array_free(&y);
    tubelet_state_free(s);
    tubelet_grads_free(g);
    tubelet_model_free(m);
    return rc;
}
