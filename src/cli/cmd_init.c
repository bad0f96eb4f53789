/* tubelet init: a video model initialised from an image ViT (docs/image-init.md). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "app.h"
#include "cli.h"

int cmd_init(int argc, char **argv) {
    const char *vit = NULL, *arch = NULL, *out = NULL, *mode = NULL;
    int keep_head = 0, seed = 0;
    const cli_option opts[] = {
        {"--from-image", CLI_STR, &vit, 0, 0, "VIT_DIR",
         "the image model (a ViT; an image Swin for Video Swin); its\n"
         "widths, heads, depths, channels and patch size must be the\n"
         "video model's"},
        {"--arch", CLI_STR, &arch, 0, 0, "A",
         "the video model: a built-in architecture (timesformer-base-*,\n"
         "vivit-base-m1 .. -m4, video-swin-t/s/b; `tubelet info --list`)\n"
         "or a directory with its config.json (ViViT Models 1-4,\n"
         "TimeSformer schemes, Video Swin)"},
        {"-o", CLI_STR, &out, 0, 0, "OUT", "output directory"},
        {"--tubelet-init", CLI_STR, &mode, 0, 0, "M",
         "the tubelet filter: central (the image filter at the central\n"
         "frame t/2, zeros elsewhere; ViViT's default, its paper's best)\n"
         "or inflate (the image filter / t at every frame; Video Swin's\n"
         "default, as its paper)"},
        {"--keep-head", CLI_FLAG, &keep_head, 0, 0, NULL,
         "copy the image model's classifier (sizes must match);\n"
         "default: a random classifier for the video config's labels"},
        {"--seed", CLI_INT, &seed, 0, 2147483647, "N", "seed of the random parameters (default 0)"},
        {0}};
    const cli_command cmd = {
        "init",
        "init --from-image VIT_DIR --arch ARCH_OR_CONFIG_DIR -o OUT\n"
        "                    [--tubelet-init central|inflate] [--keep-head] [--seed N]",
        "Builds a video model from a Hugging Face image ViT (ViTModel or\n"
        "ViTForImageClassification: config.json + model.safetensors; for Video Swin an\n"
        "image Swin, SwinModel or SwinForImageClassification) and writes it to OUT\n"
        "(config.json + model.safetensors, Hugging Face layout; OUT is created).\n",
        opts, NULL, NULL, 0,
        "Copied: patch filter, cls token, positions (repeated over time, resized bicubically\n"
        "to the video's grid), every spatial or joint attention, MLP and norm, the final norm.\n"
        "Zero: TimeSformer's temporal_dense and time embeddings, ViViT Model 3's temporal\n"
        "output projection. Random: ViViT Model 2's temporal encoder and the classifier.\n"
        "The image model's hidden_act, layer_norm_eps and qkv_bias replace the video config's.\n"
        "Video Swin: every block, merge and norm copied, the patch filter inflated over time,\n"
        "each relative position bias table repeated over the temporal offsets\n"
        "(docs/video-swin.md); the image window must be the video's spatial window.\n"};
    int pr = cli_parse(&cmd, argc, argv);
    if (pr >= 0) return pr;
    if (!vit || !arch || !out) {
        fprintf(stderr, "error: tubelet init needs --from-image, --arch and -o\n\n");
        cli_print_help(&cmd, stderr);
        return 2;
    }
    tubelet_image_init_params ip = tubelet_image_init_default_params();
    ip.keep_head = keep_head;
    if (mode && !strcmp(mode, "inflate")) {
        ip.tubelet_init = TUBELET_TUBELET_INFLATE;
    } else if (mode && !strcmp(mode, "central")) {
        ip.tubelet_init = TUBELET_TUBELET_CENTRAL;
    } else if (mode) {
        fprintf(stderr, "error: --tubelet-init must be central or inflate, got '%s'\n", mode);
        return 2;
    }
    ip.seed = (uint64_t)seed;

    char err[1024];
    tubelet_load_params lp = tubelet_load_default_params();
    lp.log = app_log;
    tubelet_model *m = NULL;
    if (tubelet_model_from_image(&m, arch, vit, &ip, &lp, err, sizeof err)) {
        fprintf(stderr, "error: %s\n", err);
        return 1;
    }
    int rc = 1;
    if (mkdir(out, 0755) && errno != EEXIST) {
        fprintf(stderr, "error: %s: cannot create the directory (%s)\n", out, strerror(errno));
    } else if (tubelet_model_save(m, out, err, sizeof err)) {
        fprintf(stderr, "error: %s\n", err);
    } else {
        tubelet_model_info info;
        tubelet_model_get_info(m, &info);
        const int init = ip.tubelet_init == TUBELET_TUBELET_DEFAULT ? info.tubelet_init_default
                                                                    : ip.tubelet_init;
        fprintf(stderr, "wrote %s: %s %s, %lld parameters, from %s (%s tubelet init)\n", out,
                info.family, info.variant, (long long)info.n_params, vit,
                init == TUBELET_TUBELET_INFLATE ? "inflate" : "central");
        rc = 0;
    }
    tubelet_model_free(m);
    return rc;
}
