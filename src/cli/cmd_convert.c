/* tubelet convert: an official checkpoint (TimeSformer .pyth, VideoMAE .pth, Video Swin .pth,
 * ViViT's scenic/Flax msgpack) → a Hugging Face model directory, written completely under a
 * temporary name and then renamed into place. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/checkpoint.h"
#include "cli.h"

static void remove_dir(const char *dir) {
    static const char *const files[] = {"config.json", "model.safetensors",
                                        "preprocessor_config.json"};
    char p[4300];
    for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, files[i]);
        unlink(p);
    }
    rmdir(dir);
}

static int write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    if (!f) return 0;
    int ok = fputs(text, f) >= 0;
    return (fclose(f) == 0) && ok;
}

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
        "msgpack; docs/checkpoints.md) without running any of it, and writes a Hugging Face\n"
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
    struct stat st;
    if (stat(out, &st) == 0) {
        fprintf(stderr, "error: %s: already exists (convert writes a new directory)\n", out);
        return 1;
    }
    if (!tb_ckpt_is_file(input)) {
        fprintf(stderr, "error: %s: not a file (give a .pth, .pyth or Flax msgpack checkpoint)\n", input);
        return 1;
    }
    char err[1024];
    tubelet_load_params lp = tubelet_load_default_params();
    lp.log = cli_log, lp.config = config;
    tubelet_model *m = NULL;
    if (tubelet_model_load(&m, input, &lp, err, sizeof err)) {
        fprintf(stderr, "error: %s\n", err);
        return 1;
    }
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp.XXXXXX", out);
    int rc = 1;
    if (!mkdtemp(tmp)) {
        fprintf(stderr, "error: %s: cannot create a directory beside it: %s\n", out, strerror(errno));
        goto done;
    }
    if (tubelet_model_save(m, tmp, err, sizeof err)) {
        fprintf(stderr, "error: %s\n", err);
        remove_dir(tmp);
        goto done;
    }
    tubelet_model_info in;
    tubelet_model_get_info(m, &in);
    /* the family's preprocessing with what the file's own training config says */
    char *pre = NULL, path[4300];
    tb_err e = {{0}};
    tb_ckpt_cfg cc;
    if (tb_ckpt_preprocessor_for(input, &pre, &e) || tb_ckpt_read_cfg(input, &cc, NULL, &e)) {
        fprintf(stderr, "error: %s\n", e.msg);
        free(pre);
        remove_dir(tmp);
        goto done;
    }
    snprintf(path, sizeof path, "%s/preprocessor_config.json", tmp);
    int ok = !pre || write_text(path, pre);
    free(pre);
    /* mkdtemp made it 0700 */
    if (!ok || chmod(tmp, 0755) != 0 || rename(tmp, out) != 0) {
        fprintf(stderr, "error: %s: write failed: %s\n", out, strerror(errno));
        remove_dir(tmp);
        goto done;
    }
    printf("%s: %s (%s, %lld parameters) -> %s\n", input, in.model_type, in.variant,
           (long long)in.n_params, out);
    if (cc.sampling_rate) /* no Hugging Face file holds it: say it once */
        printf("%s: trained on clips of every %d-th frame (tubelet classify --sampling clip "
               "--stride %d)\n", input, cc.sampling_rate, cc.sampling_rate);
    rc = 0;
done:
    tubelet_model_free(m);
    return rc;
}

int cli_ckpt_stride(const char *model) {
    tb_ckpt_cfg c;
    tb_err e = {{0}};
    if (!model || !tb_ckpt_is_file(model) || tb_ckpt_read_cfg(model, &c, NULL, &e) ||
        !c.sampling_rate)
        return 0; /* an unreadable file fails where the model is loaded */
    fprintf(stderr, "note: %s: sampling clips of every %d-th frame, as its training config says "
            "(--sampling, --stride to change)\n", model, c.sampling_rate);
    return c.sampling_rate;
}
