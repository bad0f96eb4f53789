/* tubelet convert: an official checkpoint (TimeSformer .pyth, VideoMAE .pth, Video Swin .pth,
 * ViViT's scenic/Flax msgpack) → a Hugging Face model directory, written completely under a
 * temporary name and then renamed into place. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "app.h"
#include "cli.h"

int cmd_convert(int argc, char **argv) {
    const char *input = NULL, *out = NULL, *config = NULL;
    int n_input = 0;
    const cli_option opts[] = {
        {"-o", CLI_STR, &out, 0, 0, "DIR", "output directory (must not exist; created whole or not at all)"},
        {"--output", CLI_STR, &out, 0, 0, "DIR", "the same as -o"},
        {"--config", CLI_STR, &config, 0, 0, "FILE",
         "config.json to use instead of the one inferred from the tensors (or\n"
         "the config.json beside INPUT); needed when the error says so"},
        {0}};
    const cli_command cmd = {
        "convert", "convert INPUT -o DIR [--config FILE]",
        "Reads an official checkpoint as published (TimeSformer .pyth, VideoMAE .pth, Video Swin\n"
        ".pth of torchvision or mmaction2, either of torch's serialisations; ViViT's scenic/Flax\n"
        "msgpack; V-JEPA 2's .pt, its probe from TUBELET_VJEPA2_PROBE=FILE, docs/vjepa2.md;\n"
        "docs/checkpoints.md) without running any of it, and writes a Hugging Face\n"
        "model directory (Video Swin: tubelet's video_swin): config.json, model.safetensors and\n"
        "preprocessor_config.json (the normalisation the original code\n"
        "trained with, from the file's own training config where it has one).\n"
        "Every other command also takes INPUT directly as --model.\n",
        opts, &input, &n_input, 1, NULL};
    int pr = cli_parse(&cmd, argc, argv);
    if (pr >= 0) return pr;
    if (!input || !out) {
        fprintf(stderr, "error: tubelet convert needs INPUT and -o DIR\n\n");
        cli_print_help(&cmd, stderr);
        return 2;
    }
    if (!tubelet_checkpoint_is_file(input)) {
        struct stat st;
        if (stat(input, &st) != 0)
            fprintf(stderr, "error: %s: %s\n", input,
                    errno == ENOENT ? "does not exist" : strerror(errno));
        else
            fprintf(stderr, "error: %s: %s (give a .pth, .pyth or Flax msgpack checkpoint file)\n",
                    input, S_ISDIR(st.st_mode) ? "a directory, not a file" : "not a regular file");
        return 1;
    }
    char err[1024];
    tubelet_load_params lp = tubelet_load_default_params();
    lp.log = app_log, lp.config = config;
    tubelet_model *m = NULL;
    if (tubelet_model_load(&m, input, &lp, err, sizeof err) ||
        tubelet_model_export(m, out, err, sizeof err)) {
        fprintf(stderr, "error: %s\n", err);
        tubelet_model_free(m);
        return 1;
    }
    tubelet_model_info in;
    tubelet_model_get_info(m, &in);
    printf("%s: %s (%s, %lld parameters) -> %s\n", input, in.model_type, in.variant,
           (long long)in.n_params, out);
    const int stride = tubelet_checkpoint_sampling_rate(input);
    if (stride) /* no Hugging Face file holds it: say it once */
        printf("%s: trained on clips of one frame in %d (tubelet classify --sampling clip "
               "--stride %d)\n", input, stride, stride);
    tubelet_model_free(m);
    return 0;
}
